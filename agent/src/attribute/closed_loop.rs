//! The closed loop a load runs in, as a queueing network: what removing a cost gives when no
//! single resource is the bottleneck.
//!
//! A load generator (or a service's callers) keeps `N` requests in flight: each connection
//! sends a request, waits for its response, and sends the next. A request visits CPU
//! *stations* (the app's CPU set, its database server's, or the host's CPUs when they share
//! them), where it waits in line behind the others and is served for its *demand* (CPU µs per
//! request), and spends the rest of its cycle in a *delay* `Z` nobody queues for (the network,
//! the client's own time, round trips' wire time, timers). Throughput follows from all of them
//! at once by exact **mean value analysis** (Reiser & Lavenberg, "Mean-Value Analysis of
//! Closed Multichain Queuing Networks", JACM 27(2), 1980), one customer more at a time from 0
//! to `N`:
//!
//! ```text
//! R_k(n) = D_k/c_k × (1 + Q_k(n-1)) + D_k × (c_k-1)/c_k     residence at station k, µs
//! X(n)   = n / (Z + Σ_k R_k(n))                             req/µs
//! Q_k(n) = X(n) × D_k/c_k × (1 + Q_k(n-1))                  requests waiting or served at k
//! ```
//!
//! A station of `c_k` CPUs is Seidmann's approximation (Seidmann, Schweitzer & Shalev-Oren,
//! "Computerized closed queueing network models of flexible manufacturing systems", Large
//! Scale Systems 12, 1987): one server `c_k` times as fast plus a delay of `D_k (c_k-1)/c_k`.
//! The demands are measured (the kernel's CPU accounting over the requests served), `N` is the
//! load generator's connections (else the HTTP connections the wire saw), and `Z` is the one
//! figure fitted: the delay that makes the model's `X(N)` equal the measured throughput.
//! Removing a cost takes its CPU off the stations it used and its wire time off `Z`; the model
//! is solved again, and the gain is the new throughput over the old. Below saturation this
//! counts what a single-bottleneck formula misses: the queueing a cost's CPU causes for every
//! other request. At saturation it gives the CPU-bound `1/(1-s) - 1`; with idle CPUs, the
//! latency-bound `L/(L-d) - 1`.
//!
//! A worked example (README, "The closed-loop model"): 8 connections, one app CPU, 200 µs of
//! CPU per request, 4,000 req/s measured (the CPU 80% busy). `Z` = 1,474 µs fits (`X(8)` =
//! 4,000 req/s, the CPU's residence 526 µs of the 2,000 µs cycle). Removing a cost of 50 µs of
//! CPU per request gives `X(8)` = 4,466 req/s, **+11.7%**: the CPU-bound `1/(1-0.25) - 1` reads
//! +33.3% (the CPU is not full) and the latency-bound `2,000/(2,000-50) - 1` reads +2.6% (the
//! queueing the 50 µs caused for the other requests goes too).

use serde::{Deserialize, Serialize};

use crate::profile::Profile;

/// What a station's CPU serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StationKind {
    /// The app's CPU set: the app's CPU per request.
    App,
    /// The database server's CPU set: the server's CPU per request.
    Database,
    /// The host's CPUs, shared by the app, its database server, its HTTP clients and the
    /// servers it calls on this host: all their CPU per request.
    Host,
    /// The CPUs the app may run on, a part of the host's: the app's CPU per request and the
    /// share of the other serving processes' that ran there.
    AppCpus,
    /// The host's CPUs the app may not run on: the rest of the other serving processes' CPU.
    OtherCpus,
}

/// One CPU set a request queues for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Station {
    /// What its CPU serves.
    pub kind: StationKind,
    /// CPUs (servers) of the set, less what other processes take of it under load.
    pub servers: f64,
    /// CPU per request served at it, µs.
    pub demand_us: f64,
    /// The share of the app's CPU per request served here, 0..1.
    pub app_share: f64,
    /// The share of the database server's CPU per request served here, 0..1.
    pub db_share: f64,
}

impl Station {
    /// A station of `kind` serving all of the app's CPU (`App`), all of the database's
    /// (`Database`) or both (`Host`); the split kinds take their shares from
    /// [`ClosedLoop::of_profile`].
    pub fn new(kind: StationKind, servers: f64, demand_us: f64) -> Station {
        let (app_share, db_share) = match kind {
            StationKind::App => (1.0, 0.0),
            StationKind::Database => (0.0, 1.0),
            StationKind::Host => (1.0, 1.0),
            StationKind::AppCpus => (1.0, 0.5),
            StationKind::OtherCpus => (0.0, 0.5),
        };
        Station { kind, servers, demand_us, app_share, db_share }
    }

    fn label(&self) -> &'static str {
        match self.kind {
            StationKind::App => "app CPU",
            StationKind::Database => "database CPU",
            StationKind::Host => "host CPUs",
            StationKind::AppCpus => "the app's CPUs",
            StationKind::OtherCpus => "the host's other CPUs",
        }
    }
}

/// The model's throughput and where a request spends its cycle.
#[derive(Debug, Clone, PartialEq)]
pub struct Solution {
    /// Throughput, req/s.
    pub req_per_s: f64,
    /// Residence time per request at each station (queueing and service), µs, in the order
    /// of [`ClosedLoop::stations`].
    pub residence_us: Vec<f64>,
}

/// Exact mean value analysis of `customers` requests in flight over `stations` and a delay of
/// `delay_us` per cycle (Seidmann's approximation for stations of several CPUs). Stations
/// with no demand or no servers are skipped (residence 0). `customers` 0 gives 0 req/s.
pub fn solve(customers: u32, stations: &[Station], delay_us: f64) -> Solution {
    let queue_demand: Vec<f64> = stations.iter().map(|s| if s.servers > 0.0 && s.demand_us > 0.0 { s.demand_us / s.servers } else { 0.0 }).collect();
    let fixed: Vec<f64> = stations.iter().zip(&queue_demand).map(|(s, q)| (s.demand_us - q).max(0.0) * f64::from(u8::from(*q > 0.0))).collect();
    let fixed_sum: f64 = fixed.iter().sum();
    let mut queue = vec![0.0f64; stations.len()];
    let mut residence = vec![0.0f64; stations.len()];
    let mut x = 0.0;
    for n in 1..=customers {
        for k in 0..stations.len() {
            residence[k] = queue_demand[k] * (1.0 + queue[k]);
        }
        let cycle = delay_us.max(0.0) + fixed_sum + residence.iter().sum::<f64>();
        x = if cycle > 0.0 { f64::from(n) / cycle } else { f64::INFINITY };
        for k in 0..stations.len() {
            queue[k] = x * residence[k];
        }
    }
    Solution { req_per_s: x * 1e6, residence_us: residence.iter().zip(&fixed).map(|(r, f)| r + f).collect() }
}

/// Most requests in flight the model takes: the wire may count thousands of idle keep-alive
/// connections, and past a few times the stations' servers more customers only lengthen the
/// fitted delay.
pub const MAX_CUSTOMERS: u32 = 10_000;

/// The closed loop of one run, fitted to its measured throughput.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClosedLoop {
    /// Requests in flight, `N`: the load generator's connections, else the HTTP connections
    /// that sent requests under load.
    pub customers: u32,
    /// The measured throughput the model is fitted to, req/s.
    pub req_per_s: f64,
    /// The CPU sets a request queues for.
    pub stations: Vec<Station>,
    /// CPU sets whose capacity also caps the throughput without being in the network: the
    /// app's own CPU set when it is smaller than the host's CPUs it shares (`X <= c / D`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ceilings: Vec<Station>,
    /// The fitted delay `Z` per cycle, µs: the time of a request's cycle spent outside the
    /// stations (the client, the network, round trips' wire time, timers).
    pub delay_us: f64,
    /// The model's throughput with the fitted delay, req/s: the measured one, unless even
    /// `Z` = 0 gives less (the demands or `N` over-counted), when the gains are the model's
    /// ratios from its own throughput.
    pub model_req_per_s: f64,
    /// The app's CPU per request, µs (at the `app` station or inside the `host` one).
    pub app_cpu_us: f64,
    /// The database server's CPU per round trip on the wire, µs, when it is a station or in
    /// the host's: its CPU per request (connection set-ups' apart) over the round trips per
    /// request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db_cpu_us_per_round_trip: Option<f64>,
    /// Residence per request at each station in the fitted model (queueing and service), µs,
    /// in the order of [`ClosedLoop::stations`].
    pub residence_us: Vec<f64>,
}

/// What a cost takes off the closed loop per request.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Removal {
    /// The app's CPU, µs.
    pub app_cpu_us: f64,
    /// The database server's CPU, µs.
    pub db_cpu_us: f64,
    /// The delay outside the CPUs, µs: the wire time of its round trips and waits, less the
    /// database CPU they queue for (already in `db_cpu_us`).
    pub delay_us: f64,
}

/// The model's prediction for one removal.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    /// The model's throughput without the cost, req/s.
    pub req_per_s: f64,
    /// Its gain over the model's throughput with it, a fraction (0.25 = +25%).
    pub gain: f64,
    /// The arithmetic in one line.
    pub formula: String,
}

impl ClosedLoop {
    /// Fits the delay `Z` so that the model's throughput at `customers` equals `req_per_s`
    /// (bisection: `X(N)` falls as `Z` grows). `None` without customers, throughput or a
    /// station with demand.
    pub fn fit(customers: f64, req_per_s: f64, stations: Vec<Station>, ceilings: Vec<Station>, app_cpu_us: f64) -> Option<ClosedLoop> {
        if !(customers >= 0.5 && req_per_s > 0.0 && req_per_s.is_finite()) || !stations.iter().any(|s| s.demand_us > 0.0 && s.servers > 0.0) {
            return None;
        }
        let n = (customers.round() as u32).clamp(1, MAX_CUSTOMERS);
        let x_at = |z: f64| solve(n, &stations, z).req_per_s;
        let (delay_us, model) = if x_at(0.0) <= req_per_s {
            (0.0, x_at(0.0))
        } else {
            // X(Z) <= N/Z, so Z = N/X already gives at most the measured throughput.
            let (mut lo, mut hi) = (0.0, f64::from(n) * 1e6 / req_per_s);
            for _ in 0..100 {
                let mid = 0.5 * (lo + hi);
                if x_at(mid) > req_per_s {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            (0.5 * (lo + hi), req_per_s)
        };
        let residence_us = solve(n, &stations, delay_us).residence_us;
        Some(ClosedLoop { customers: n, req_per_s, stations, ceilings, delay_us, model_req_per_s: model, app_cpu_us, db_cpu_us_per_round_trip: None, residence_us })
    }

    /// The closed loop of a `profiler bench` test from its measured (unprofiled) run: the
    /// app's CPU set and PostgreSQL's as two stations, each with its CPU use over the
    /// throughput as its demand; `connections` customers. The load generator's CPU (on
    /// PostgreSQL's CPUs by default) is not measured: its share ends in the fitted delay.
    /// `pg` is `(CPUs used, CPUs of its set)`; `app` the same for the app.
    pub fn of_bench(app: (f64, f64), pg: Option<(f64, f64)>, connections: u32, req_per_s: f64) -> Option<ClosedLoop> {
        if req_per_s <= 0.0 {
            return None;
        }
        let app_us = app.0 * 1e6 / req_per_s;
        let mut stations = vec![Station::new(StationKind::App, app.1, app_us)];
        if let Some((used, servers)) = pg.filter(|p| p.1 > 0.0) {
            stations.push(Station::new(StationKind::Database, servers, used * 1e6 / req_per_s));
        }
        ClosedLoop::fit(f64::from(connections), req_per_s, stations, Vec::new(), app_us)
    }

    /// The closed loop of a profile (`profiler attach`, `profiler report`), at `req_per_s`
    /// (the throughput under load) with `customers` requests in flight. Demands are CPU over
    /// the run per HTTP request the wire decoded.
    ///
    /// With the host's busy time known and the app's CPU set or a database server's on this
    /// host spanning the host's CPUs, the serving processes (the app, the database servers,
    /// the HTTP clients and the upstream servers on this host) share the host's CPUs:
    /// - the app may run on every CPU: one `host` station, the host's CPUs less what its other
    ///   processes use under load, serving all their CPU per request;
    /// - the app may run on a part of them only ([`Meta::target_cpus`], with each CPU's busy
    ///   time, [`Meta::cpu_busy_ns`]): an `app_cpus` station for that part and an
    ///   `other_cpus` one for the rest. The app's CPU is all at the first; the other serving
    ///   processes' CPU and the other processes' are split between them as their busy time
    ///   beside the app's was (`f` = (busy of the app's CPUs - the app's CPU) / (busy of all
    ///   CPUs - the app's CPU)), and so is a cost's database CPU.
    ///
    /// The app's quota, when below its CPUs, is a ceiling. Else an `app` station and, with a
    /// database server measured on this host, a `database` one (its servers the largest set
    /// among them). `None` without the target's CPU, its capacity or an HTTP request.
    ///
    /// [`Meta::target_cpus`]: crate::profile::Meta::target_cpus
    /// [`Meta::cpu_busy_ns`]: crate::profile::Meta::cpu_busy_ns
    pub fn of_profile(profile: &Profile, req_per_s: Option<f64>, customers: Option<f64>) -> Option<ClosedLoop> {
        let meta = &profile.meta;
        let requests = profile.wire.as_ref().map_or(0, |w| w.http.requests);
        let (x, n) = (req_per_s?, customers?);
        let app_capacity = meta.target_cpu_capacity.filter(|&c| c > 0.0)?;
        if requests == 0 {
            return None;
        }
        let per_request = |ns: f64| ns / 1e3 / requests as f64;
        // CPUs under load of a CPU time over the run: its time per request at the load's rate.
        let under_load = |ns: f64| per_request(ns) * x / 1e6;
        let app_ns = meta.target_cpu_ns? as f64;
        let app_us = per_request(app_ns);
        let db_ns: u64 = meta.db_servers.iter().map(|s| s.cpu_ns).sum();
        let host_cpus = f64::from(meta.cpus);
        let spans_host = |c: f64| host_cpus > 0.0 && c >= host_cpus - 0.01;
        let serving_spans_host = spans_host(app_capacity) || meta.db_servers.iter().any(|s| s.capacity_cpus.is_some_and(spans_host));
        let app_ceiling = |set: f64| {
            if app_capacity < set - 0.01 {
                vec![Station::new(StationKind::App, app_capacity, app_us)]
            } else {
                Vec::new()
            }
        };
        let (stations, ceilings) = match meta.host_busy_ns.filter(|_| serving_spans_host) {
            Some(host_ns) => {
                let client_ns: u64 = meta.http_clients.iter().map(|c| c.cpu_ns).sum();
                let upstream_ns: u64 = meta.upstream_servers.iter().map(|u| u.cpu_ns).sum();
                let rest_ns = (db_ns + client_ns + upstream_ns) as f64;
                let other_ns = (host_ns as f64 - app_ns - rest_ns).max(0.0);
                let app_cpus: Vec<u32> = meta.target_cpus.iter().copied().filter(|c| meta.cpu_busy_ns.contains_key(c)).collect();
                if !app_cpus.is_empty() && (app_cpus.len() as f64) < host_cpus && meta.cpu_busy_ns.len() as f64 >= host_cpus {
                    let busy_app: f64 = app_cpus.iter().map(|c| meta.cpu_busy_ns[c] as f64).sum();
                    let busy_all: f64 = meta.cpu_busy_ns.values().map(|&b| b as f64).sum();
                    let beside = (busy_all - app_ns).max(0.0);
                    let f = if beside > 0.0 { ((busy_app - app_ns).max(0.0) / beside).min(1.0) } else { app_cpus.len() as f64 / host_cpus };
                    let set = app_cpus.len() as f64;
                    // At least a tenth of a CPU: the other processes' share is an estimate.
                    let floor = |c: f64| c.max(0.1);
                    let mine = Station {
                        servers: floor(set - f * under_load(other_ns)),
                        demand_us: app_us + f * per_request(rest_ns),
                        app_share: 1.0,
                        db_share: f,
                        ..Station::new(StationKind::AppCpus, 0.0, 0.0)
                    };
                    let theirs = Station {
                        servers: floor(host_cpus - set - (1.0 - f) * under_load(other_ns)),
                        demand_us: (1.0 - f) * per_request(rest_ns),
                        app_share: 0.0,
                        db_share: 1.0 - f,
                        ..Station::new(StationKind::OtherCpus, 0.0, 0.0)
                    };
                    (vec![mine, theirs], app_ceiling(set))
                } else {
                    let servers = (host_cpus - under_load(other_ns).min(host_cpus)).max(0.1 * host_cpus);
                    (vec![Station::new(StationKind::Host, servers, app_us + per_request(rest_ns))], app_ceiling(host_cpus))
                }
            }
            None => {
                let mut stations = vec![Station::new(StationKind::App, app_capacity, app_us)];
                let db_servers = meta.db_servers.iter().filter_map(|s| s.capacity_cpus).fold(0.0f64, f64::max);
                if db_servers > 0.0 && db_ns > 0 {
                    stations.push(Station::new(StationKind::Database, db_servers, per_request(db_ns as f64)));
                }
                (stations, Vec::new())
            }
        };
        let mut model = ClosedLoop::fit(n, x, stations, ceilings, app_us)?;
        model.db_cpu_us_per_round_trip = profile.db_cpu_us_per_round_trip();
        Some(model)
    }

    /// The database server's CPU per round trip for a model whose stations hold the database
    /// (`database` or `host`): the one measured on the host, else the `database` station's
    /// demand over `round_trips_per_request`. `None` when no station holds it.
    pub fn db_cpu_per_round_trip(&self, round_trips_per_request: Option<f64>) -> Option<f64> {
        self.db_cpu_us_per_round_trip.or_else(|| {
            let db = self.stations.iter().find(|s| s.kind == StationKind::Database)?;
            let rts = round_trips_per_request.filter(|&r| r > 0.0)?;
            Some(db.demand_us / rts)
        })
    }

    /// Residence over demand of the database's CPU in the fitted model: how much longer than
    /// its CPU a round trip spends at the stations, queueing included (the stations' residence
    /// over demand, weighed by the share of the database's CPU each serves). `None` when no
    /// station holds it.
    pub fn db_stretch(&self) -> Option<f64> {
        let (mut weighed, mut shares) = (0.0, 0.0);
        for (s, r) in self.stations.iter().zip(&self.residence_us) {
            if s.db_share > 0.0 && s.demand_us > 0.0 {
                weighed += s.db_share * r / s.demand_us;
                shares += s.db_share;
            }
        }
        (shares > 0.0).then(|| weighed / shares)
    }

    /// The throughput without a cost: every station's demand less its shares of what the cost
    /// takes of the app's CPU and the database's (never below zero), the delay less its
    /// delay, solved again and capped by the ceilings.
    pub fn without(&self, removal: &Removal) -> Prediction {
        let cut = |s: &Station| Station { demand_us: (s.demand_us - s.app_share * removal.app_cpu_us - s.db_share * removal.db_cpu_us).max(0.0), ..s.clone() };
        let stations: Vec<Station> = self.stations.iter().map(cut).collect();
        let ceilings: Vec<Station> = self.ceilings.iter().map(cut).collect();
        let delay = (self.delay_us - removal.delay_us).max(0.0);
        let ceiling = |cs: &[Station]| cs.iter().filter(|c| c.demand_us > 0.0).map(|c| c.servers * 1e6 / c.demand_us).fold(f64::INFINITY, f64::min);
        let base = self.model_req_per_s.min(ceiling(&self.ceilings));
        let after = solve(self.customers, &stations, delay).req_per_s.min(ceiling(&ceilings));
        let gain = if base > 0.0 { (after / base - 1.0).max(0.0) } else { 0.0 };
        let parts: Vec<String> = self
            .stations
            .iter()
            .zip(&stations)
            .map(|(a, b)| format!("{} {:.2} × {:.1} → {:.1} µs", a.label(), a.servers, a.demand_us, b.demand_us))
            .chain(self.ceilings.iter().zip(&ceilings).map(|(a, b)| format!("ceiling: the {} set {:.2} × {:.1} → {:.1} µs", a.label(), a.servers, a.demand_us, b.demand_us)))
            .collect();
        let formula = format!(
            "closed loop of N={} (mean value analysis): {}; delay Z {:.1} → {:.1} µs: X {:.0} → {:.0} req/s = {:+.2}%{}",
            self.customers,
            parts.join(", "),
            self.delay_us,
            delay,
            base,
            after,
            gain * 100.0,
            if self.model_req_per_s < self.req_per_s * 0.999 {
                format!(" (the model reaches only {:.0} of the {:.0} req/s measured even with Z = 0: its ratio is taken)", self.model_req_per_s, self.req_per_s)
            } else {
                String::new()
            }
        );
        Prediction { req_per_s: after, gain, formula }
    }

    /// The most throughput the stations and ceilings allow without a cost, however many
    /// requests were in flight: the least `servers / demand` over them once the cost's CPU is
    /// taken off (as in [`ClosedLoop::without`]), in req/s comparable with the measured
    /// throughput (scaled by measured over modelled when the model reaches less), and which
    /// station it is. `None` when no station has a demand left.
    pub fn ceiling(&self, removal: &Removal) -> Option<(f64, String)> {
        let base = self.model_req_per_s.min(self.req_per_s);
        let scale = if base > 0.0 { self.req_per_s / base } else { 1.0 };
        self.stations
            .iter()
            .chain(&self.ceilings)
            .filter_map(|s| {
                let demand = s.demand_us - s.app_share * removal.app_cpu_us - s.db_share * removal.db_cpu_us;
                (demand > 0.0 && s.servers > 0.0).then(|| (s.servers * 1e6 / demand * scale, format!("the {} {:.2}/{:.1} µs", s.label(), s.servers, demand)))
            })
            .min_by(|a, b| a.0.total_cmp(&b.0))
    }

    /// One line for a report: the stations, `N`, the fitted `Z` and the throughput.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self
            .stations
            .iter()
            .map(|s| format!("{} ({:.2} CPUs, {:.1} µs per request)", s.label(), s.servers, s.demand_us))
            .chain(self.ceilings.iter().map(|s| format!("ceiling: the {} set ({:.2} CPUs, {:.1} µs per request)", s.label(), s.servers, s.demand_us)))
            .collect();
        format!(
            "closed loop of {} requests in flight over {}, delay Z = {:.1} µs fitted to {:.0} req/s{}",
            self.customers,
            parts.join(", "),
            self.delay_us,
            self.req_per_s,
            if self.model_req_per_s < self.req_per_s * 0.999 { format!(" (the model reaches only {:.0} req/s with Z = 0)", self.model_req_per_s) } else { String::new() }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(servers: f64, demand_us: f64) -> Station {
        Station::new(StationKind::App, servers, demand_us)
    }

    /// One customer sees no queue: X = 1 / (Z + D).
    #[test]
    fn one_customer_is_served_without_queueing() {
        let s = solve(1, &[app(1.0, 200.0)], 800.0);
        assert!((s.req_per_s - 1000.0).abs() < 1e-9, "{s:?}");
        assert!((s.residence_us[0] - 200.0).abs() < 1e-9);
    }

    /// Two customers, one CPU of 100 µs, no delay: by hand, n=1: R=100, X=0.01/µs, Q=1;
    /// n=2: R=100×2=200, X=2/200=0.01/µs = 10,000 req/s (the CPU full).
    #[test]
    fn two_customers_by_hand() {
        let s = solve(2, &[app(1.0, 100.0)], 0.0);
        assert!((s.req_per_s - 10_000.0).abs() < 1e-6, "{s:?}");
        assert!((s.residence_us[0] - 200.0).abs() < 1e-9);
    }

    /// Many customers on a saturated CPU (a short delay): X -> c/D, and removing a share s of
    /// D gives 1/(1-s) - 1 (the CPU-bound formula).
    #[test]
    fn saturated_it_is_the_cpu_bound_share() {
        let x = solve(200, &[app(1.0, 200.0)], 200.0).req_per_s;
        let m = ClosedLoop::fit(200.0, x, vec![app(1.0, 200.0)], Vec::new(), 200.0).unwrap();
        // The CPU is full: any delay up to a few hundred µs gives the same throughput.
        assert!(m.delay_us <= 200.0, "{m:?}");
        let p = m.without(&Removal { app_cpu_us: 50.0, ..Removal::default() });
        assert!((p.gain - (1.0 / 0.75 - 1.0)).abs() < 0.01, "{p:?}");
    }

    /// Idle CPUs: the cycle is the delay plus the demand, and removing delay d gives the
    /// latency-bound L/(L-d) - 1 within a point.
    #[test]
    fn idle_it_is_the_latency_bound() {
        // 8 customers, 50 µs of CPU, 7,950 µs of delay: about 1,000 req/s, the CPU 5% busy.
        let x = solve(8, &[app(2.0, 50.0)], 7_950.0).req_per_s;
        let m = ClosedLoop::fit(8.0, x, vec![app(2.0, 50.0)], Vec::new(), 50.0).unwrap();
        assert!((m.delay_us - 7_950.0).abs() < 0.01, "{m:?}");
        let p = m.without(&Removal { delay_us: 2_000.0, ..Removal::default() });
        let latency = 8e6 / x;
        assert!((p.gain - (latency / (latency - 2_000.0) - 1.0)).abs() < 0.01, "{p:?}");
    }

    /// The module's worked example (README): 8 customers, one CPU of 200 µs, 4,000 req/s;
    /// figures from an independent script of the same recurrences (Z = 1,473.84 µs, X' =
    /// 4,466.10 req/s).
    #[test]
    fn the_worked_example() {
        let m = ClosedLoop::fit(8.0, 4_000.0, vec![app(1.0, 200.0)], Vec::new(), 200.0).unwrap();
        assert!((m.delay_us - 1_473.84).abs() < 0.05, "Z = {}", m.delay_us);
        let base = solve(m.customers, &m.stations, m.delay_us);
        assert!((base.residence_us[0] - 526.16).abs() < 0.05, "{base:?}");
        let p = m.without(&Removal { app_cpu_us: 50.0, ..Removal::default() });
        println!("{}", p.formula);
        assert!((p.req_per_s - 4_466.10).abs() < 0.1, "{p:?}");
        assert!((p.gain - 0.1165).abs() < 0.0005, "{p:?}");
        // However many requests were in flight, one CPU of 200 µs serves 5,000 req/s, of
        // 150 µs 6,667: the ceiling a freed wait's gain is capped by.
        let (cap, station) = m.ceiling(&Removal::default()).unwrap();
        assert!((cap - 5_000.0).abs() < 1e-6, "{cap} {station}");
        let (cap, _) = m.ceiling(&Removal { app_cpu_us: 50.0, ..Removal::default() }).unwrap();
        assert!((cap - 1e6 / 150.0).abs() < 1e-6, "{cap}");
    }

    /// Demands that cannot give the measured throughput even without a delay: Z = 0 and the
    /// gain is the model's own ratio, said in the formula.
    #[test]
    fn over_counted_demands_fit_no_delay_and_say_so() {
        let m = ClosedLoop::fit(4.0, 10_000.0, vec![app(1.0, 200.0)], Vec::new(), 200.0).unwrap();
        assert_eq!(m.delay_us, 0.0);
        assert!(m.model_req_per_s < 5_000.0 + 1e-6);
        let p = m.without(&Removal { app_cpu_us: 100.0, ..Removal::default() });
        assert!(p.formula.contains("its ratio is taken"), "{}", p.formula);
        assert!(p.gain > 0.9 && p.gain < 1.01, "{p:?}");
    }

    /// A ceiling caps the gain: the host has room, the app's own CPU set does not.
    #[test]
    fn the_apps_own_set_caps_the_gain() {
        let host = Station::new(StationKind::Host, 2.0, 300.0);
        let m = ClosedLoop::fit(8.0, 3_000.0, vec![host], vec![app(1.0, 300.0)], 300.0);
        // 3,000 req/s × 300 µs is 0.9 of the app's one CPU: the ceiling holds at 3,333 req/s.
        let m = m.unwrap();
        let p = m.without(&Removal { db_cpu_us: 150.0, delay_us: 2_000.0, ..Removal::default() });
        assert!((p.req_per_s - 1e6 / 300.0).abs() < 1e-6, "{p:?}");
    }

    /// A run of 1 s on 2 CPUs, the app pinned to CPU 0, 4,000 requests and 12,000 round trips:
    /// the app used 0.6 s, PostgreSQL 0.5 s (both CPUs), an HTTP client 0.2 s, the host 1.6 s
    /// (CPU 0 0.9 s, CPU 1 0.7 s). By hand: the app 150 µs per request; the others' 0.7 s is
    /// 175 µs; the rest of the host 0.3 s is 0.3 CPUs under load; beside the app, CPU 0 was
    /// busy 0.3 s of the 1.0 s, so f = 0.3: the app's CPUs 1 - 0.3 × 0.3 = 0.91 servers of
    /// 150 + 0.3 × 175 = 202.5 µs; the other CPUs 1 - 0.7 × 0.3 = 0.79 servers of 0.7 × 175 =
    /// 122.5 µs; the server's CPU per round trip 0.5 s / 12,000 = 41.67 µs. Unpinned, one host
    /// station of 2 - 0.3 = 1.7 servers and 325 µs.
    #[test]
    fn stations_of_an_attach_split_at_the_apps_cpus() {
        use crate::profile::{DbServer, HttpClient};
        let mut p = Profile::default();
        p.meta.cpus = 2;
        p.meta.duration_ns = 1_000_000_000;
        p.meta.target_cpu_ns = Some(600_000_000);
        p.meta.target_cpu_capacity = Some(1.0);
        p.meta.target_cpus = vec![0];
        p.meta.host_busy_ns = Some(1_600_000_000);
        p.meta.cpu_busy_ns = [(0, 900_000_000), (1, 700_000_000)].into_iter().collect();
        p.meta.db_servers = vec![DbServer { port: 5432, pid: 7, command: "postgres".into(), cpu_ns: 500_000_000, exited_cpu_ns: 0, capacity_cpus: Some(2.0) }];
        p.meta.http_clients = vec![HttpClient { pid: 8, command: "wrk".into(), cpu_ns: 200_000_000 }];
        let mut w = crate::wire::WireSummary::default();
        w.http.requests = 4000;
        w.pg.round_trips = 12_000;
        p.wire = Some(w);
        let m = ClosedLoop::of_profile(&p, Some(4000.0), Some(8.0)).unwrap();
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert_eq!(m.stations.len(), 2, "{m:?}");
        let (mine, theirs) = (&m.stations[0], &m.stations[1]);
        assert!(mine.kind == StationKind::AppCpus && close(mine.servers, 0.91) && close(mine.demand_us, 202.5) && close(mine.db_share, 0.3), "{mine:?}");
        assert!(theirs.kind == StationKind::OtherCpus && close(theirs.servers, 0.79) && close(theirs.demand_us, 122.5) && close(theirs.db_share, 0.7), "{theirs:?}");
        assert!(m.ceilings.is_empty() && close(m.app_cpu_us, 150.0));
        assert!(close(m.db_cpu_us_per_round_trip.unwrap(), 0.5e9 / 1e3 / 12_000.0));
        // A cost of 50 µs of app CPU and 2 round trips (83.3 µs of the server's CPU): 30% of
        // it at the app's CPUs.
        let after = m.without(&Removal { app_cpu_us: 50.0, db_cpu_us: 83.333, delay_us: 0.0 });
        assert!(after.formula.contains("the app's CPUs 0.91 × 202.5 → 127.5 µs, the host's other CPUs 0.79 × 122.5 → 64.2 µs"), "{}", after.formula);
        // Unpinned: one host station.
        p.meta.target_cpus = vec![0, 1];
        p.meta.target_cpu_capacity = Some(2.0);
        let m = ClosedLoop::of_profile(&p, Some(4000.0), Some(8.0)).unwrap();
        assert!(m.stations.len() == 1 && m.stations[0].kind == StationKind::Host && close(m.stations[0].servers, 1.7) && close(m.stations[0].demand_us, 325.0), "{m:?}");
        // Without the host's figures: an app station and a database one.
        p.meta.host_busy_ns = None;
        let m = ClosedLoop::of_profile(&p, Some(4000.0), Some(8.0)).unwrap();
        assert_eq!(m.stations, vec![Station::new(StationKind::App, 2.0, 150.0), Station::new(StationKind::Database, 2.0, 125.0)]);
    }

    #[test]
    fn nothing_to_fit_gives_none() {
        assert!(ClosedLoop::fit(0.0, 1_000.0, vec![app(1.0, 100.0)], Vec::new(), 100.0).is_none());
        assert!(ClosedLoop::fit(8.0, 0.0, vec![app(1.0, 100.0)], Vec::new(), 100.0).is_none());
        assert!(ClosedLoop::fit(8.0, 1_000.0, vec![app(1.0, 0.0)], Vec::new(), 0.0).is_none());
    }
}
