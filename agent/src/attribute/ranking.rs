//! The ranking: named costs with their evidence and predicted throughput gain, written as
//! `ranking.md` and `ranking.json` (the model is in the [module docs](super)).

use serde::{Deserialize, Serialize};

use super::closed_loop::{ClosedLoop, Removal};
use super::costs::{self, Confidence, Finding, FindingKind, NotEvaluated};
use super::endpoints::EndpointBreakdown;
use super::layers::{Attribution, LayerRow};
use super::rules::RuleSet;
use crate::profile::Profile;
use crate::wire::WireSummary;

/// Utilization (used / capacity) at or above which a CPU set counts as the bottleneck.
pub const SATURATED: f64 = 0.85;

/// Version of the `ranking.json` schema.
pub const RANKING_SCHEMA_VERSION: u32 = 1;

/// The resource that bounds a test's throughput.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "resource", rename_all = "snake_case")]
pub enum Bound {
    /// The app's CPU set is (nearly) full: throughput = capacity / CPU per request.
    AppCpu {
        /// Mean CPU the app used, CPUs.
        used_cpus: f64,
        /// CPUs in the app's CPU set.
        capacity_cpus: f64,
    },
    /// The database's CPU set is (nearly) full.
    DbCpu {
        /// Mean CPU PostgreSQL used, CPUs.
        used_cpus: f64,
        /// CPUs in PostgreSQL's CPU set.
        capacity_cpus: f64,
        /// Mean request latency the wire measured (head read to response written), µs, for a
        /// run without a load generator's figures ([`Bound::of_profile`]): a gain is then also
        /// capped by what the cost takes off that latency, since the server's CPU per message
        /// is not measured and a round trip's share of the round trips over-counts the cheap
        /// ones (a ping). `None` in the bench.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        served_latency_us: Option<f64>,
    },
    /// The host's CPUs are (nearly) full although neither the app's CPU set nor the
    /// database's is alone: the app or its database server may use every CPU of the host, and
    /// they share them with each other, the clients and the rest ([`Bound::of_profile`]). The
    /// CPU that serves the requests (the app's, the database servers', the HTTP clients' and
    /// the upstream servers' found on this host) gets what the rest leaves it, so its throughput = that CPU / its CPU per request; a
    /// cost's share is the CPU it takes per request, the app's (sampled) plus its round trips ×
    /// the database server's CPU per round trip and its connection set-ups × the server's CPU
    /// per set-up, over that CPU per request; the gain is capped by what the app's own CPU set
    /// allows without the cost's app CPU. The rest of the host's busy time (a compile, another
    /// service) does not grow with the requests and is left out: counted in, a host busy with
    /// other work made every cost look tiny.
    HostCpu {
        /// Mean busy CPUs of the host under load (everything on it).
        used_cpus: f64,
        /// CPUs of the host.
        capacity_cpus: f64,
        /// The CPU that serves the requests per HTTP request of the target, µs: the app's,
        /// the database servers' ([`crate::profile::Meta::db_servers`]), the clients'
        /// ([`crate::profile::Meta::http_clients`]) and the upstream servers'
        /// ([`crate::profile::Meta::upstream_servers`]).
        cpu_us_per_request: f64,
        /// Mean CPUs under load of the host's other processes, left out of
        /// `cpu_us_per_request` (0 in profiles of agents that counted them in).
        #[serde(default)]
        other_cpus: f64,
        /// Mean CPUs under load of the HTTP clients found on this host; `None` when none was
        /// found (clients elsewhere, or whose connections closed before the end of the run:
        /// a load generator on this host is then among the other processes).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client_cpus: Option<f64>,
        /// Mean CPUs under load of the servers on this host the target calls, other than its
        /// databases ([`crate::profile::Meta::upstream_servers`]), counted in
        /// `cpu_us_per_request`; `None` when none was found.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        upstream_cpus: Option<f64>,
        /// The database server's CPU per round trip on the wire, µs: its CPU over the run
        /// over all round trips (each alike: an upper bound for a ping, which costs the
        /// server less than a statement), without the CPU of connections set up and closed
        /// during the run when the wire saw set-ups ([`GainInputs::db_setup_cpu_us`] holds
        /// it). `None` when the server's CPU was not measured: round trips then take only the
        /// app's CPU.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        db_cpu_us_per_round_trip: Option<f64>,
    },
    /// Neither is full: a closed loop of `connections` clients, throughput = connections /
    /// latency (Little's law).
    Latency {
        /// Concurrent connections of the load generator.
        connections: u32,
        /// Mean request latency, µs.
        latency_us: f64,
    },
    /// The app's CPU set is not full and no load generator says how the load is offered
    /// (`profiler attach`, [`Bound::of_profile`]): a gain is what removing the cost takes off
    /// the mean request latency the wire measured, `L/(L-d) - 1`. Under a closed loop of
    /// clients it bounds the throughput gain from above: their cycle is `L` plus their own
    /// time and the network's, which the wire does not see (`wrk -c1` on field-cases: 20 µs
    /// served, 96 µs by wrk).
    ServedLatency {
        /// Mean CPU the app used, CPUs.
        used_cpus: f64,
        /// CPUs the app could use.
        capacity_cpus: f64,
        /// Mean request latency, request head read to response written, as the wire
        /// measured it, µs.
        latency_us: f64,
    },
    /// Not known (e.g. `profiler attach` without load figures): gains are computed as if the
    /// app's CPU were the bottleneck, and labelled so.
    Unknown,
}

impl Bound {
    /// Picks the bound from measured utilizations: the more utilized CPU set when it is at or
    /// above [`SATURATED`], else latency at the given concurrency.
    ///
    /// `app` and `db` are `(used CPUs, capacity CPUs)`; `latency_us` the mean latency, µs.
    pub fn classify(app: (f64, f64), db: Option<(f64, f64)>, connections: u32, latency_us: f64) -> Bound {
        let util = |(u, c): (f64, f64)| if c > 0.0 { u / c } else { 0.0 };
        let ua = util(app);
        let ud = db.map_or(0.0, util);
        if ua >= SATURATED && ua >= ud {
            Bound::AppCpu { used_cpus: app.0, capacity_cpus: app.1 }
        } else if let Some(d) = db.filter(|_| ud >= SATURATED) {
            Bound::DbCpu { used_cpus: d.0, capacity_cpus: d.1, served_latency_us: None }
        } else {
            Bound::Latency { connections, latency_us }
        }
    }

    /// The bound of a run without a load generator's figures (`profiler attach`, `profiler
    /// report`), from what the profile measured. CPU use under load is a process's CPU per
    /// HTTP request times the requests per second under load (the wire's steady window, else
    /// its load window, [`WireSummary::load_req_per_s`]; else the mean over the run), at most
    /// the CPUs of its set: the
    /// target's ([`Meta::target_cpu_ns`] against [`Meta::target_cpu_capacity`]) and each database server's on this host
    /// ([`Meta::db_servers`]). The busier of the two at or above [`SATURATED`] is the bound
    /// ([`Bound::AppCpu`], or [`Bound::DbCpu`] with the served latency as a cap); else the
    /// host's CPUs ([`Bound::HostCpu`], [`Meta::host_busy_ns`] the same way) when the app or a
    /// database server on this host may use all of them and they are at or above
    /// [`SATURATED`]; else
    /// [`Bound::ServedLatency`] when the wire paired HTTP responses with their requests; else
    /// [`Bound::Unknown`] (the target's CPU, its capacity or the run's length unknown, or no
    /// HTTP latency decoded). A database server that is not on this host, or whose capacity
    /// is unknown, is not measured: a service bound by it reads as `ServedLatency`.
    ///
    /// [`Meta::target_cpu_ns`]: crate::profile::Meta::target_cpu_ns
    /// [`Meta::target_cpu_capacity`]: crate::profile::Meta::target_cpu_capacity
    /// [`Meta::db_servers`]: crate::profile::Meta::db_servers
    /// [`Meta::host_busy_ns`]: crate::profile::Meta::host_busy_ns
    pub fn of_profile(profile: &Profile) -> Bound {
        let meta = &profile.meta;
        let secs = meta.duration_ns as f64 / 1e9;
        let (Some(cpu_ns), Some(capacity)) = (meta.target_cpu_ns, meta.target_cpu_capacity.filter(|&c| c > 0.0)) else {
            return Bound::Unknown;
        };
        if secs <= 0.0 {
            return Bound::Unknown;
        }
        // Under load: the CPU per request times the requests per second of the wire's steady
        // window, else of its load window (a run longer than its load would otherwise count
        // its idle seconds); else the mean over the run.
        let under_load = profile.wire.as_ref().filter(|w| w.http.requests > 0).and_then(|w| w.load_req_per_s().map(|(x, ..)| x / w.http.requests as f64));
        // A set cannot use more than its CPUs: a reading above (CPU the run spent outside its
        // requests, e.g. before the load, counted per request at the load's rate) reads as full.
        let cpus = |ns: u64, capacity: f64| under_load.map_or(ns as f64 / 1e9 / secs, |per_request_x| ns as f64 / 1e9 * per_request_x).min(capacity);
        let used = cpus(cpu_ns, capacity);
        let db = meta
            .db_servers
            .iter()
            .filter_map(|s| {
                let c = s.capacity_cpus.filter(|&c| c > 0.0)?;
                Some((cpus(s.cpu_ns, c), c))
            })
            .max_by(|a, b| (a.0 / a.1).total_cmp(&(b.0 / b.1)));
        let (ua, ud) = (used / capacity, db.map_or(0.0, |(u, c)| u / c));
        if ua >= SATURATED && ua >= ud {
            return Bound::AppCpu { used_cpus: used, capacity_cpus: capacity };
        }
        let latency_us = profile.wire.as_ref().map(|w| &w.http).and_then(|http| {
            let responses: u64 = http.endpoints.iter().flat_map(|e| e.statuses.values()).sum();
            let total_ns: u64 = http.endpoints.iter().map(|e| e.latency_total_ns).sum();
            (responses > 0 && total_ns > 0).then(|| total_ns as f64 / responses as f64 / 1e3)
        });
        if let Some((u, c)) = db.filter(|_| ud >= SATURATED) {
            return Bound::DbCpu { used_cpus: u, capacity_cpus: c, served_latency_us: latency_us };
        }
        // The host full although neither set alone is: the app's set or a database server's on
        // this host is the whole host (the CPU that serves the requests spans it), and the
        // host's busy CPU under load is at least SATURATED of it.
        let host_cpus = f64::from(meta.cpus);
        let requests = profile.wire.as_ref().map_or(0, |w| w.http.requests);
        let spans_host = |c: f64| c >= host_cpus - 0.01;
        let serving_spans_host = spans_host(capacity) || meta.db_servers.iter().any(|s| s.capacity_cpus.is_some_and(spans_host));
        if let Some(host_ns) = meta.host_busy_ns.filter(|_| host_cpus > 0.0 && serving_spans_host && requests > 0) {
            let host = cpus(host_ns, host_cpus);
            if host / host_cpus >= SATURATED {
                let db_ns: u64 = meta.db_servers.iter().map(|s| s.cpu_ns).sum();
                let client_ns: u64 = meta.http_clients.iter().map(|c| c.cpu_ns).sum();
                let upstream_ns: u64 = meta.upstream_servers.iter().map(|u| u.cpu_ns).sum();
                let serving_ns = cpu_ns + db_ns + client_ns + upstream_ns;
                return Bound::HostCpu {
                    used_cpus: host,
                    capacity_cpus: host_cpus,
                    cpu_us_per_request: serving_ns as f64 / 1e3 / requests as f64,
                    other_cpus: cpus(host_ns.saturating_sub(serving_ns), host_cpus),
                    client_cpus: (!meta.http_clients.is_empty()).then(|| cpus(client_ns, host_cpus)),
                    upstream_cpus: (!meta.upstream_servers.is_empty()).then(|| cpus(upstream_ns, host_cpus)),
                    // The CPU of connections set up during the run is the set-ups' own
                    // (`GainInputs::db_setup_cpu_us`), not the round trips'.
                    db_cpu_us_per_round_trip: profile.db_cpu_us_per_round_trip(),
                };
            }
        }
        match latency_us {
            Some(latency_us) => Bound::ServedLatency { used_cpus: used, capacity_cpus: capacity, latency_us },
            None => Bound::Unknown,
        }
    }

    /// Whether gains under this bound come from the run's closed loop when one was fitted
    /// ([`predict_with`]): latency and served latency, where no CPU set is full (the host's
    /// included) and queueing at several resources decides the throughput. A full set keeps
    /// its share formula, the model's limit there: on a saturated host the model's demands
    /// over-count (a connection per request on `field-cases` read +1,412% by the model against
    /// +1,904% measured, where the host's share read +1,589% to +1,686% against +1,568% to
    /// +1,985%).
    pub fn uses_closed_loop(&self) -> bool {
        matches!(self, Bound::Latency { .. } | Bound::ServedLatency { .. })
    }

    /// A short description, e.g. `app CPU (0.97 of 1 CPUs)`.
    pub fn describe(&self) -> String {
        match self {
            Bound::AppCpu { used_cpus, capacity_cpus } => format!("app CPU ({used_cpus:.2} of {capacity_cpus} CPUs used)"),
            Bound::DbCpu { used_cpus, capacity_cpus, served_latency_us: None } => format!("database CPU ({used_cpus:.2} of {capacity_cpus} CPUs used)"),
            Bound::DbCpu { used_cpus, capacity_cpus, served_latency_us: Some(l) } => format!(
                "database CPU ({used_cpus:.2} of {capacity_cpus} CPUs used under load): gains are the cost's share of the round trips, capped by its cut in the mean request latency the wire measured ({:.3} ms; the server's CPU per message is not measured)",
                l / 1e3
            ),
            Bound::HostCpu { used_cpus, capacity_cpus, cpu_us_per_request, other_cpus, client_cpus, upstream_cpus, db_cpu_us_per_round_trip } => format!(
                "the host's CPUs ({used_cpus:.2} of {capacity_cpus} busy under load; neither the app's nor the database's CPU alone is {:.0}% busy): gains are the cost's CPU over the {cpu_us_per_request:.1} µs of CPU per request that serve it (the app's, {}, {}, {}), leaving out {other_cpus:.2} CPUs of other processes, taken as not growing with the requests; a cost's CPU is its app CPU plus {}",
                SATURATED * 100.0,
                match db_cpu_us_per_round_trip {
                    Some(_) => "its database server's",
                    None => "no database server's (none measured on this host)",
                },
                match client_cpus {
                    Some(c) => format!("its HTTP clients' on this host ({c:.2} CPUs)"),
                    None => "no HTTP client's (none found on this host: a load generator here whose connections closed before the end counts among the other processes)".to_string(),
                },
                match upstream_cpus {
                    Some(c) => format!("the servers' it calls on this host ({c:.2} CPUs; the CPU a cost makes them spend is not in the cost's)"),
                    None => "no upstream server's (none found connected on this host at the end: one called on a new connection per request counts among the other processes, and gains then read high)".to_string(),
                },
                match db_cpu_us_per_round_trip {
                    Some(d) => format!("its round trips × the database server's {d:.1} µs of CPU per round trip (each alike: an upper bound for a ping) and its connection set-ups × the server's CPU per set-up"),
                    None => "nothing for its round trips on the server".to_string(),
                }
            ),
            Bound::Latency { connections, latency_us } => {
                format!("latency at {connections} connections (mean {:.2} ms; neither CPU set is {:.0}% busy)", latency_us / 1e3, SATURATED * 100.0)
            }
            Bound::ServedLatency { used_cpus, capacity_cpus, latency_us } => format!(
                "not the app's CPU ({used_cpus:.2} of {capacity_cpus} CPUs used under load): gains are the cut in the mean request latency the wire measured ({:.3} ms, head read to response written); a closed loop of clients gains at most that much throughput (their own time is not seen)",
                latency_us / 1e3
            ),
            Bound::Unknown => "unknown (gains computed as if the app's CPU were the bottleneck)".into(),
        }
    }
}

/// `1/(1-s) - 1`: the throughput gain of removing a share `s` (0..1) of the bottleneck
/// resource's work per request (Amdahl-style: throughput ∝ 1 / work per request). A fraction
/// (0.25 = +25%). `s >= 1` gives infinity; `s <= 0` gives 0.
pub fn cpu_bound_gain(share: f64) -> f64 {
    if share <= 0.0 {
        0.0
    } else if share >= 1.0 {
        f64::INFINITY
    } else {
        1.0 / (1.0 - share) - 1.0
    }
}

/// `L/(L-d) - 1`: the throughput gain of removing `d` µs from a request latency of `L` µs at a
/// fixed concurrency N (Little's law: throughput = N / L). A fraction. `d >= L` gives infinity.
pub fn latency_bound_gain(latency_us: f64, removed_us: f64) -> f64 {
    if removed_us <= 0.0 || latency_us <= 0.0 {
        0.0
    } else if removed_us >= latency_us {
        f64::INFINITY
    } else {
        latency_us / (latency_us - removed_us) - 1.0
    }
}

/// A predicted gain and how it was computed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gain {
    /// The resource the prediction is for (`app_cpu`, `db_cpu`, `latency`, `served_latency`,
    /// `assumed_app_cpu`, `runtime_workers`).
    pub resource: String,
    /// The cost's share of that resource per request, 0..1 (CPU-bound models).
    pub share: Option<f64>,
    /// µs removed from each request's latency (latency model).
    pub removed_us: Option<f64>,
    /// Predicted throughput gain, percent (+11.1 = 11.1% more req/s).
    pub gain_pct: f64,
    /// Predicted req/s without the cost, when a base throughput is known.
    pub predicted_req_per_s: Option<f64>,
    /// The arithmetic, e.g. `1/(1-0.100)-1 = 11.1%`.
    pub formula: String,
}

/// Predicts the gain of removing one finding's cost under `bound`.
///
/// - app CPU (or unknown): `s` = the finding's share of on-CPU samples; for wire-only costs
///   (no CPU samples of their own) `s` = its extra round trips / all round trips × the share of
///   samples with a driver (sqlx) frame on the stack (the app CPU of one round trip, spread
///   evenly); gain `1/(1-s) - 1`.
/// - database CPU: `s` = the finding's extra round trips / all round trips (each round trip
///   costing the server alike); costs without round trips give 0; a finding with connection
///   set-ups and the server's CPU per set-up measured takes that share of the server's CPU
///   instead (`setup_db_gain`);
/// - host CPU: `s` = (the finding's app CPU µs per request, as for latency, + its round trips
///   × the database server's CPU per round trip + its connection set-ups × the server's CPU
///   per set-up) / the host's busy CPU per request;
/// - latency: `d` = the finding's CPU µs per request + its database µs per request (its round
///   trips, or the connection wait a held transaction causes), gain `L/(L-d) - 1` with `L`
///   the mean latency.
pub fn predict(finding: &Finding, bound: &Bound, ctx: &GainInputs) -> Gain {
    predict_with(finding, bound, ctx, None)
}

/// [`predict`], with the run's closed loop ([`ClosedLoop`]) when it could be fitted: under the
/// bounds that use it ([`Bound::uses_closed_loop`]: no CPU set full) the gain is then the
/// model's, [`closed_loop_gain`]; blocked runtime workers keep [`worker_gain`], and a
/// full CPU set its share formula (the model's limit there).
pub fn predict_with(finding: &Finding, bound: &Bound, ctx: &GainInputs, model: Option<&ClosedLoop>) -> Gain {
    let rt_share = match (finding.round_trips_per_request, ctx.round_trips_per_request) {
        (Some(x), Some(all)) if all > 0.0 => Some((x / all).min(1.0)),
        _ => None,
    };
    let cpu_share = if finding.samples > 0 { finding.cpu_share } else { rt_share.map_or(0.0, |r| r * ctx.driver_cpu_share) };
    let gain = predict_uncapped(finding, bound, ctx, model, rt_share, cpu_share);
    // Only the workers' model ignores the CPU. The other formulas keep to their own resource,
    // and in the bench their CPU per request comes from the profiled run (slowed by the agent)
    // while X is the unprofiled runs': capping them there read +0% for every cost of a smoke.
    if gain.resource != RUNTIME_WORKERS {
        return gain;
    }
    match cpu_ceiling(finding, bound, ctx, model.filter(|_| bound.uses_closed_loop()), cpu_share) {
        Some((x_cap, x, why)) if x_cap / x - 1.0 < gain.gain_pct / 100.0 => {
            let g = (x_cap / x - 1.0).max(0.0);
            Gain {
                gain_pct: g * 100.0,
                predicted_req_per_s: ctx.base_req_per_s.map(|b| b * (1.0 + g)).filter(|v| v.is_finite()),
                formula: format!("min({}, {why} = {:.2}%)", gain.formula, g * 100.0),
                ..gain
            }
        }
        _ => gain,
    }
}

/// The most throughput the run's CPU sets allow once a finding is gone, which caps the blocked
/// workers' model ([`worker_gain`], which knows the workers and the concurrency, not the CPU): `(X' req/s, the measured X, how X' was computed)`, the least of
/// - the app's own CPU set: `C / (a - d)` ([`app_set_cap`]);
/// - the host's CPUs left to the requests, under [`Bound::HostCpu`]: `(H - o) / (h - d - e)`
///   with `H` its CPUs, `o` the CPUs of its other processes, `h` the CPU per request that
///   serves the requests, `d` the finding's app CPU and `e` its database CPU per request;
/// - the database's CPU set, under [`Bound::DbCpu`]: `D / (b - e)` with `D` its CPUs and `b`
///   its CPU per request;
/// - under the closed-loop model, its stations' ([`ClosedLoop::ceiling`]).
///
/// A wait freed (a blocking call, a lock, a round trip's latency) gives back no CPU: where a CPU
/// set is nearly full, its gain cannot pass what that set has left. `None` without the
/// measured throughput or any of these figures.
fn cpu_ceiling(finding: &Finding, bound: &Bound, ctx: &GainInputs, model: Option<&ClosedLoop>, cpu_share: f64) -> Option<(f64, f64, String)> {
    let x = ctx.req_per_s.or(ctx.base_req_per_s).filter(|&x| x > 0.0)?;
    let app = cpu_removed_us(finding, ctx, cpu_share);
    let per_round_trip = match bound {
        Bound::HostCpu { db_cpu_us_per_round_trip, .. } => *db_cpu_us_per_round_trip,
        _ => ctx.db_cpu_us_per_request.zip(ctx.round_trips_per_request.filter(|&r| r > 0.0)).map(|(d, r)| d / r),
    };
    let db = finding.round_trips_per_request.unwrap_or(0.0) * per_round_trip.unwrap_or(0.0) + setup_db_cpu_us(finding, ctx).unwrap_or(0.0);
    let mut caps: Vec<(f64, String)> = Vec::new();
    if let Some((x_cap, _, c, a)) = app_set_cap(ctx, app) {
        caps.push((x_cap, format!("the app's CPU set C/(a-d)/X-1 = {c}/({a:.1}-{app:.1}) µs / {x:.1} req/s - 1")));
    }
    match bound {
        Bound::HostCpu { capacity_cpus, other_cpus, cpu_us_per_request, .. } if *cpu_us_per_request - app - db > 0.0 && capacity_cpus - other_cpus > 0.0 => {
            let left = cpu_us_per_request - app - db;
            caps.push(((capacity_cpus - other_cpus) * 1e6 / left, format!("the host's CPUs left to the requests (H-o)/(h-d-e)/X-1 = ({capacity_cpus:.2}-{other_cpus:.2})/({cpu_us_per_request:.1}-{app:.1}-{db:.1}) µs / {x:.1} req/s - 1")));
        }
        Bound::DbCpu { capacity_cpus, .. } => {
            if let Some(b) = ctx.db_cpu_us_per_request.filter(|&b| b - db > 0.0) {
                caps.push((capacity_cpus * 1e6 / (b - db), format!("the database's CPU set D/(b-e)/X-1 = {capacity_cpus:.2}/({b:.1}-{db:.1}) µs / {x:.1} req/s - 1")));
            }
        }
        _ => {}
    }
    if let Some((cap, station)) = model.and_then(|m| m.ceiling(&Removal { app_cpu_us: app, db_cpu_us: db, delay_us: 0.0 })) {
        caps.push((cap, format!("the closed loop's ceiling, {station}, / {x:.1} req/s - 1")));
    }
    caps.into_iter().min_by(|a, b| a.0.total_cmp(&b.0)).map(|(cap, why)| (cap, x, why))
}

/// [`Gain::resource`] of a gain from the closed-loop model.
const CLOSED_LOOP: &str = "closed_loop";

/// [`Gain::resource`] of a gain from the blocked workers' model ([`worker_gain`]).
const RUNTIME_WORKERS: &str = "runtime_workers";

/// [`predict_with`] before [`cpu_ceiling`].
fn predict_uncapped(finding: &Finding, bound: &Bound, ctx: &GainInputs, model: Option<&ClosedLoop>, rt_share: Option<f64>, cpu_share: f64) -> Gain {
    if let (Some(b), Some(c)) = (finding.worker_blocked_us_per_request.filter(|&b| b > 0.0), ctx.worker_cpu_us_per_request) {
        return worker_gain(b, c, ctx);
    }
    if let Some(m) = model.filter(|_| bound.uses_closed_loop()) {
        return closed_loop_gain(finding, ctx, m, cpu_share);
    }
    let base = ctx.base_req_per_s;
    let mk = |resource: &str, share: Option<f64>, removed: Option<f64>, g: f64, formula: String| Gain {
        resource: resource.into(),
        share,
        removed_us: removed,
        gain_pct: g * 100.0,
        predicted_req_per_s: base.map(|b| b * (1.0 + g)).filter(|x| x.is_finite()),
        formula,
    };
    match bound {
        Bound::AppCpu { .. } | Bound::Unknown => {
            let g = cpu_bound_gain(cpu_share);
            let res = if matches!(bound, Bound::Unknown) { "assumed_app_cpu" } else { "app_cpu" };
            mk(res, Some(cpu_share), None, g, format!("1/(1-{cpu_share:.4})-1 = {:.2}%", g * 100.0))
        }
        Bound::DbCpu { served_latency_us, .. } => {
            if let Some(g) = setup_db_gain(finding, ctx, cpu_share) {
                return mk("db_cpu", g.share, g.removed_us, g.gain_pct / 100.0, g.formula);
            }
            let s = rt_share.unwrap_or(0.0);
            let g = cpu_bound_gain(s);
            let by_share = mk("db_cpu", Some(s), None, g, format!("1/(1-{s:.4})-1 = {:.2}% (share of round trips)", g * 100.0));
            match served_latency_us {
                Some(l) => {
                    let d = latency_removed_us(finding, ctx, cpu_share);
                    let gl = latency_bound_gain(*l, d);
                    if gl < g {
                        mk(
                            "db_cpu",
                            Some(s),
                            Some(d),
                            gl,
                            format!("min(1/(1-{s:.4})-1, {l:.1}/({l:.1}-{d:.2})-1) = {:.2}% (share of round trips, capped by the served latency)", gl * 100.0),
                        )
                    } else {
                        by_share
                    }
                }
                None => by_share,
            }
        }
        Bound::HostCpu { cpu_us_per_request, db_cpu_us_per_round_trip, .. } => {
            let app = cpu_removed_us(finding, ctx, cpu_share);
            let db = finding.round_trips_per_request.unwrap_or(0.0) * db_cpu_us_per_round_trip.unwrap_or(0.0) + setup_db_cpu_us(finding, ctx).unwrap_or(0.0);
            let s = if *cpu_us_per_request > 0.0 { ((app + db) / cpu_us_per_request).min(1.0) } else { 0.0 };
            let g = cpu_bound_gain(s);
            let formula = format!("1/(1-({app:.2}+{db:.2})/{cpu_us_per_request:.1})-1 = {:.2}% (app CPU + the server's CPU of its round trips and connection set-ups, over the CPU per request of the app, its database and its clients)", g * 100.0);
            // Freed of the cost, the host may still not run the app faster than its own CPU
            // set allows.
            match app_set_cap(ctx, app) {
                Some((x_cap, x, c, a)) if x_cap / x - 1.0 < g => {
                    let gc = (x_cap / x - 1.0).max(0.0);
                    mk("host_cpu", Some(s), Some(app + db), gc, format!("min({formula}, C/(a-d)/X-1 = {c}/({a:.1}-{app:.1}) µs / {x:.1} req/s - 1 = {:.2}%: the app's own CPU set)", gc * 100.0))
                }
                _ => mk("host_cpu", Some(s), Some(app + db), g, formula),
            }
        }
        Bound::Latency { latency_us, .. } | Bound::ServedLatency { latency_us, .. } => {
            let resource = if matches!(bound, Bound::Latency { .. }) { "latency" } else { "served_latency" };
            let d = latency_removed_us(finding, ctx, cpu_share);
            let g = latency_bound_gain(*latency_us, d);
            mk(resource, None, Some(d), g, format!("{latency_us:.1}/({latency_us:.1}-{d:.2})-1 = {:.2}%", g * 100.0))
        }
    }
}

/// The gain of removing a finding from the run's closed loop ([`ClosedLoop::without`]): its
/// app CPU is `cpu_share` of the model's app CPU per request (the share of the samples, or a
/// wire-only cost's share of its round trips under the driver); its database CPU its round
/// trips × the server's CPU per round trip ([`ClosedLoop::db_cpu_per_round_trip`]) plus its
/// connection set-ups × the server's CPU per set-up; its delay its database time per request
/// (the wire's round trips and waits) less the time its database CPU spends at the stations
/// in the fitted model (that CPU × [`ClosedLoop::db_stretch`]), which they already hold.
fn closed_loop_gain(finding: &Finding, ctx: &GainInputs, model: &ClosedLoop, cpu_share: f64) -> Gain {
    let app = cpu_share * model.app_cpu_us;
    let per_round_trip = model.db_cpu_per_round_trip(ctx.round_trips_per_request);
    let db = per_round_trip.map_or(0.0, |d| finding.round_trips_per_request.unwrap_or(0.0) * d) + setup_db_cpu_us(finding, ctx).unwrap_or(0.0);
    let stretch = model.db_stretch().unwrap_or(1.0);
    let delay = (finding.db_latency_us_per_request.unwrap_or(0.0) - db * stretch).max(0.0);
    let p = model.without(&Removal { app_cpu_us: app, db_cpu_us: db, delay_us: delay });
    Gain {
        resource: CLOSED_LOOP.into(),
        share: None,
        removed_us: Some(app + db + delay),
        gain_pct: p.gain * 100.0,
        predicted_req_per_s: ctx.base_req_per_s.map(|x| x * (1.0 + p.gain)).filter(|x| x.is_finite()),
        formula: format!("{} (removed per request: {app:.2} µs of app CPU, {db:.2} µs of database CPU, {delay:.2} µs of delay)", p.formula),
    }
}

/// The database servers' CPU per request a finding's connection set-ups take, µs: its set-ups
/// per request (`connection_setups` of [`Finding::counts_per_request`]) × the servers' CPU per
/// set-up ([`GainInputs::db_setup_cpu_us`]). `None` without either.
fn setup_db_cpu_us(finding: &Finding, ctx: &GainInputs) -> Option<f64> {
    let setups = finding.counts_per_request.get("connection_setups").copied().filter(|&n| n > 0.0)?;
    Some(setups * ctx.db_setup_cpu_us?)
}

/// The gain of removing a finding's connection set-ups when the database's CPU is the bound:
/// the share `s` of the servers' CPU per request their set-ups take (measured, not a share of
/// the round trips: a set-up forks a server process and authenticates, far more than a round
/// trip), `1/(1-s) - 1`, capped by the app's own CPU set once the database is freed:
/// `X' <= C / (a - d)` with `C` the app's CPUs, `a` its accounted CPU per request and `d` the
/// finding's app CPU per request, against the measured `X`. `None` for findings without
/// set-ups, or without the servers' CPU per set-up and per request.
fn setup_db_gain(finding: &Finding, ctx: &GainInputs, cpu_share: f64) -> Option<Gain> {
    let d_db = setup_db_cpu_us(finding, ctx)?;
    let all = ctx.db_cpu_us_per_request.filter(|&a| a > 0.0)?;
    let s = (d_db / all).min(1.0);
    let by_share = cpu_bound_gain(s);
    let d_app = cpu_removed_us(finding, ctx, cpu_share);
    let (g, formula) = match app_set_cap(ctx, d_app) {
        Some((x_cap, x, c, a)) if x_cap / x - 1.0 < by_share => (
            (x_cap / x - 1.0).max(0.0),
            format!(
                "min(1/(1-{d_db:.1}/{all:.1})-1, C/(a-d)/X-1) = {c}/({a:.1}-{d_app:.1}) µs / {x:.1} req/s - 1 = {:.2}% (the database's CPU of its connection set-ups over its CPU per request, capped by the app's CPU set once the database is freed)",
                (x_cap / x - 1.0).max(0.0) * 100.0
            ),
        ),
        _ => (by_share, format!("1/(1-{d_db:.1}/{all:.1})-1 = {:.2}% (the database's CPU of its connection set-ups over its CPU per request)", by_share * 100.0)),
    };
    Some(Gain { resource: "db_cpu".into(), share: Some(s), removed_us: Some(d_db), gain_pct: g * 100.0, predicted_req_per_s: None, formula })
}

/// What the app's own CPU set allows once a finding's app CPU `d` (µs per request) is gone,
/// `X' <= C / (a - d)` with `C` its CPUs and `a` its accounted CPU per request: `(X' req/s,
/// the measured X, C, a)`. `None` without the throughput, the app's CPU set or its CPU per
/// request, or when `d` is all of it.
fn app_set_cap(ctx: &GainInputs, d: f64) -> Option<(f64, f64, f64, f64)> {
    match (ctx.req_per_s.filter(|&x| x > 0.0), ctx.app_capacity_cpus, ctx.app_cpu_us_per_request) {
        (Some(x), Some(c), Some(a)) if a - d > 0.0 => Some((c * 1e6 / (a - d), x, c, a)),
        _ => None,
    }
}

/// µs a finding takes off each request's latency: its CPU per request (for wire-only costs,
/// `cpu_share` of all CPU per request) plus its database time per request.
fn latency_removed_us(finding: &Finding, ctx: &GainInputs, cpu_share: f64) -> f64 {
    cpu_removed_us(finding, ctx, cpu_share) + finding.db_latency_us_per_request.unwrap_or(0.0)
}

/// The app CPU µs per request a finding takes: its sampled CPU per request, or for wire-only
/// costs `cpu_share` of all CPU per request.
fn cpu_removed_us(finding: &Finding, ctx: &GainInputs, cpu_share: f64) -> f64 {
    if finding.samples > 0 {
        finding.cpu_us_per_request.unwrap_or(0.0)
    } else {
        ctx.cpu_us_per_request.map_or(0.0, |c| c * cpu_share)
    }
}

/// The gain of freeing runtime workers of `b` µs of blocking waits per request, with `c` µs of
/// worker CPU per request and `B` µs of all the workers' blocking waits per request (`b` and
/// every other: [`GainInputs::worker_blocked_us_per_request`], at least `b`). The wait is
/// assumed to stay in the request's latency (made asynchronous, as `tokio::time::sleep` or
/// `spawn_blocking` do), so the closed loop of `N` requests in flight then runs at
/// `X' = min(W / (c + B - b), N / (c + B))` (W worker threads, each still held `B - b` per
/// request by the other waits: the workers' capacity; Little's law: the concurrency over the
/// latency that remains), against the measured `X`: gain `X'/X - 1`. (Leaving the other waits
/// out read +679% for a lock wait behind a 356 µs sleep on `field-cases`, where switching the
/// lock off measured +97%.) `N` is the load generator's connections, else the HTTP
/// connections that sent a request ([`crate::wire::http::HttpDecodeStats::connections`], at
/// least the concurrency). Without `X`, `N` or `W` it falls back to the share of worker time,
/// `1/(1-s) - 1` with `s = b / (B + c)`, a far looser upper bound (it assumes the wait leaves
/// the request's latency).
fn worker_gain(b: f64, c: f64, ctx: &GainInputs) -> Gain {
    if let (Some(x), Some(n), Some(w)) = (ctx.req_per_s.filter(|&x| x > 0.0), ctx.concurrency.filter(|&n| n > 0.0), ctx.workers.filter(|&w| w > 0.0)) {
        let all = ctx.worker_blocked_us_per_request.unwrap_or(b).max(b);
        let other = all - b;
        let cap = if c + other > 0.0 { w * 1e6 / (c + other) } else { f64::INFINITY };
        let conc = n * 1e6 / (c + all);
        let after = cap.min(conc);
        let g = (after / x - 1.0).max(0.0);
        return Gain {
            resource: RUNTIME_WORKERS.into(),
            share: None,
            removed_us: Some(b),
            gain_pct: g * 100.0,
            predicted_req_per_s: Some(after).filter(|v| v.is_finite()),
            formula: format!(
                "min(W/(c+B-b), N/(c+B)) = min({w:.0}/({c:.1}+{other:.1}) µs, {n:.1}/({c:.1}+{all:.1}) µs) = {after:.0} req/s against {x:.0} measured: {:.2}% (the workers freed of this wait, which stays in each request's latency, and still held by the other blocking waits)",
                g * 100.0
            ),
        };
    }
    let all = ctx.worker_blocked_us_per_request.unwrap_or(b).max(b);
    let s = b / (all + c);
    let g = cpu_bound_gain(s);
    Gain {
        resource: RUNTIME_WORKERS.into(),
        share: Some(s),
        removed_us: Some(b),
        gain_pct: g * 100.0,
        predicted_req_per_s: ctx.base_req_per_s.map(|x| x * (1.0 + g)).filter(|x| x.is_finite()),
        formula: format!(
            "1/(1-{s:.4})-1 = {:.2}%, s = {b:.1} µs blocked / ({all:.1} µs of all blocking waits + {c:.1} µs of worker CPU) per request: an upper bound (the concurrency or the worker count is unknown)",
            g * 100.0
        ),
    }
}

/// Profile-wide figures [`predict`] needs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GainInputs {
    /// Sampled CPU per request on runtime-worker threads, µs, when there are such threads.
    pub worker_cpu_us_per_request: Option<f64>,
    /// Runtime-worker threads seen.
    pub workers: Option<f64>,
    /// All the workers' off-CPU time outside their park per request, µs
    /// ([`super::fingerprint::WorkerIdle::blocked_ns`]): every blocking wait that holds a
    /// worker, of whatever finding.
    pub worker_blocked_us_per_request: Option<f64>,
    /// Measured throughput over the profile, req/s (requests / duration).
    pub req_per_s: Option<f64>,
    /// Requests in flight in the closed loop: the load generator's connections, when known.
    pub concurrency: Option<f64>,
    /// All database round trips per request (wire).
    pub round_trips_per_request: Option<f64>,
    /// Share of on-CPU samples with a driver (sqlx) frame on the stack, 0..1.
    pub driver_cpu_share: f64,
    /// All sampled CPU per request, µs.
    pub cpu_us_per_request: Option<f64>,
    /// Measured throughput with the cost present, req/s.
    pub base_req_per_s: Option<f64>,
    /// The database servers' CPU per connection set up, µs: the CPU of their processes that
    /// exited during the run and of their roots ([`crate::profile::DbServer::exited_cpu_ns`])
    /// over the connections the wire saw set up. An upper bound (each short-lived connection's
    /// statements are in it). `None` without a server measured on this host or without a
    /// set-up seen.
    pub db_setup_cpu_us: Option<f64>,
    /// The database servers' CPU per HTTP request, µs (all of it, set-ups included), when
    /// measured on this host.
    pub db_cpu_us_per_request: Option<f64>,
    /// The app's CPU per HTTP request as the kernel accounted it (cgroup or /proc), µs.
    pub app_cpu_us_per_request: Option<f64>,
    /// CPUs the app may use ([`crate::profile::Meta::target_cpu_capacity`]).
    pub app_capacity_cpus: Option<f64>,
}

/// One ranked finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankedFinding {
    /// 1 = biggest predicted gain.
    pub rank: usize,
    /// The finding.
    #[serde(flatten)]
    pub finding: Finding,
    /// Its predicted gain.
    pub gain: Gain,
}

/// Everything `ranking.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ranking {
    /// [`RANKING_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The profile's target.
    pub target: String,
    /// A label, e.g. the bench test name; empty for attach.
    pub label: String,
    /// Why the profile is partial (the run ended early: Ctrl-C, the target exited), as in
    /// [`crate::profile::Meta::partial`]; `None` for a complete run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<String>,
    /// HTTP requests the profile covers (the per-request denominator), when known.
    pub requests: Option<u64>,
    /// Where the request count came from (`wrk`, `wire`, `given`).
    pub requests_source: Option<String>,
    /// Measured throughput of the test, req/s: the load generator's when the caller gave one,
    /// else the HTTP requests the wire decoded per second under load (its steady window,
    /// [`crate::wire::summary::SteadyWindow`], else its load window,
    /// [`crate::wire::summary::LoadWindow`]), else per second of the whole run.
    pub base_req_per_s: Option<f64>,
    /// Where [`Ranking::base_req_per_s`] came from, for the reader (`given`, `wire: 3443
    /// requests in the steady window of 4.40 s`, `wire: 1290 requests in the load window of
    /// 5.80 s`, `wire: mean over the whole run of 10.09 s`).
    #[serde(default)]
    pub throughput_source: Option<String>,
    /// On-CPU samples.
    pub samples: u64,
    /// Sampling frequency, Hz.
    pub frequency_hz: u64,
    /// Sampled CPU (samples × period), µs.
    pub sampled_cpu_us: Option<f64>,
    /// CPU the target used as its cgroup or /proc accounted it, µs.
    pub measured_cpu_us: Option<f64>,
    /// Sampled CPU per request, µs.
    pub cpu_us_per_request: Option<f64>,
    /// Samples on truncated stacks (their callers are unknown, so layers above are missed).
    pub truncated_samples: u64,
    /// The bound resource.
    pub bound: Bound,
    /// The run's closed loop, fitted to its throughput ([`ClosedLoop`]), when the figures for
    /// it were there: the gains under the bounds that use it ([`Bound::uses_closed_loop`])
    /// are its.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_loop: Option<ClosedLoop>,
    /// Named costs that fired, biggest predicted gain first.
    pub costs: Vec<RankedFinding>,
    /// Fingerprints that could not be evaluated.
    pub not_evaluated: Vec<NotEvaluated>,
    /// Generic findings (hot functions outside layers, allocation, syscalls, truncation).
    pub generic: Vec<Finding>,
    /// The layer table.
    pub layers: Vec<LayerRow>,
    /// Per-syscall counts per request (name, calls per request), most first. Estimates
    /// when syscalls were counted in windows ([`Ranking::syscalls_traced_share`]).
    pub syscalls_per_request: Vec<(String, f64)>,
    /// When syscalls were counted in windows (`--syscalls-duty` below 100, see
    /// [`crate::profile::SyscallWindows`]), the share (0-1) the windows held of what
    /// [`Ranking::syscalls_scaled_by`] names: the per-request figures are then the counts scaled
    /// by its inverse. Absent when every call was counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscalls_traced_share: Option<f64>,
    /// `"requests"` (the share of the HTTP requests' work the wire saw done inside the windows:
    /// calls per request inside them) or `"time"` (the share of the run, without a wire
    /// capture); absent when every call was counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscalls_scaled_by: Option<String>,
    /// Exact calls of library functions per HTTP request (`counters.json` beside the
    /// profile, see [`super::counters`]), e.g. `("tokio_tasks_spawned", 2.0)`: over the whole
    /// capture, so divided by [`Ranking::requests`], or over a run of their own, divided by its
    /// requests ([`super::counters::CallCounts::requests`]). Empty without counters.
    #[serde(default)]
    pub calls_per_request: Vec<(String, f64)>,
    /// Threads by role ([`super::catalog::ThreadRole`]): how many, their on-CPU samples and
    /// their off-CPU waits. Absent in rankings written before roles existed.
    #[serde(default)]
    pub thread_roles: Vec<RoleRow>,
    /// The share of their time the runtime's workers were parked, and how it was told
    /// ([`super::fingerprint::worker_idle_share`]): the gate of the findings about waits
    /// outside the CPU. `None` without off-CPU waits of a runtime worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_idle: Option<super::fingerprint::WorkerIdle>,
    /// Database round trips per HTTP request (wire), over the window the fingerprints used.
    /// Absent without a PostgreSQL capture (and in rankings written before it existed).
    #[serde(default)]
    pub db_per_request: Option<DbPerRequest>,
    /// How many on-CPU samples were joined to the endpoint their thread was serving
    /// ([`crate::profile::EndpointSamples`]; the names with them); `None` without a join.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_join: Option<crate::profile::EndpointSamples>,
    /// Per endpoint (wire), its latency split into on-CPU time, database round trips and the
    /// rest, most requests first; empty without an endpoint join.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<EndpointBreakdown>,
}

impl Ranking {
    /// The bound as the reports print it: [`Bound::describe`], or, when the gains are the
    /// closed loop's ([`Bound::uses_closed_loop`] and a model was fitted), the bound's
    /// measurements followed by the model's ([`ClosedLoop::describe`]) in place of the
    /// bound's own gain rule.
    pub fn bound_text(&self) -> String {
        let text = self.bound.describe();
        match self.closed_loop.as_ref().filter(|_| self.bound.uses_closed_loop()) {
            Some(m) => format!("{}; gains from the {}", text.split(": gains").next().unwrap_or(&text), m.describe()),
            None => text,
        }
    }
}

/// One row of the thread-role table of a ranking.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoleRow {
    /// Role name (`runtime worker`, `blocking pool`, ..., `other`).
    pub role: String,
    /// Threads with this role.
    pub threads: usize,
    /// Their on-CPU samples (the agent's own included).
    pub samples: u64,
    /// `samples` / all on-CPU samples, 0..1.
    pub share: f64,
    /// Sampled CPU per request on these threads, µs.
    pub cpu_us_per_request: Option<f64>,
    /// Their off-CPU waits.
    pub off_cpu_waits: u64,
    /// Time they spent switched out, ns.
    pub off_cpu_ns: u64,
}

fn role_rows(profile: &Profile, attr: &Attribution) -> Vec<RoleRow> {
    let n = attr.role_names.len();
    let mut threads = vec![0usize; n];
    for r in attr.thread_roles.values() {
        threads[*r] += 1;
    }
    let mut samples = vec![0u64; n];
    for per in &attr.stack_role_samples {
        for (i, k) in per.iter().enumerate() {
            samples[i] += k;
        }
    }
    let (mut waits, mut ns) = (vec![0u64; n], vec![0u64; n]);
    for c in &profile.off_cpu {
        if let Some(&r) = attr.thread_roles.get(&(c.pid, c.tid)) {
            waits[r] += c.count;
            ns[r] += c.total_ns;
        }
    }
    (0..n)
        .filter(|&i| threads[i] > 0)
        .map(|i| RoleRow {
            role: attr.role_names[i].clone(),
            threads: threads[i],
            samples: samples[i],
            share: attr.share(samples[i]),
            cpu_us_per_request: attr.us_per_request(samples[i] as f64),
            off_cpu_waits: waits[i],
            off_cpu_ns: ns[i],
        })
        .collect()
}

/// Inputs of [`rank`] besides the profile.
#[derive(Debug, Clone, Copy)]
pub struct RankingOptions<'a> {
    /// Rules for the layers.
    pub rules: &'a RuleSet,
    /// Wire figures; `None` uses the profile's own ([`Profile::wire`]) when it has them.
    pub wire: Option<&'a WireSummary>,
    /// Measured throughput, req/s, for predicted req/s.
    pub base_req_per_s: Option<f64>,
    /// A label for the report (test name).
    pub label: &'a str,
    /// The run's closed loop when the caller measured it (`profiler bench`:
    /// [`ClosedLoop::of_bench`]); `None` fits it from the profile ([`ClosedLoop::of_profile`]).
    pub closed_loop: Option<&'a ClosedLoop>,
}

/// Attributes, fingerprints and ranks one profile. `requests` is the number of HTTP requests
/// the profile covers (from the load generator); without it the wire's request count is used
/// when there is one, and per-request figures are absent otherwise.
pub fn rank(profile: &Profile, requests: Option<u64>, bound: Bound, opts: &RankingOptions<'_>) -> Ranking {
    let opts = &RankingOptions { wire: opts.wire.or(profile.wire.as_ref()), ..*opts };
    // The fingerprints read the wire's steady window when there is one (per-request database
    // counts without connection set-up, statement preparation and abandoned requests).
    let view: Option<WireSummary> = opts.wire.map(|w| match &w.steady {
        Some(st) => WireSummary {
            http: crate::wire::summary::HttpSummary { requests: st.http_requests, ..Default::default() },
            pg: st.pg.clone(),
            steady: None,
            load: None,
        },
        None => w.clone(),
    });
    let db_per_request = opts.wire.and_then(DbPerRequest::of).map(|d| DbPerRequest {
        chunks_lost: profile.meta.wire.as_ref().map_or(0, |w| w.ringbuf_dropped),
        ..d
    });
    let (requests, source) = match (requests.filter(|&r| r > 0), opts.wire.map(|w| w.http.requests).filter(|&r| r > 0)) {
        (Some(r), _) => (Some(r), Some("given".to_string())),
        (None, Some(r)) => (Some(r), Some("wire".to_string())),
        _ => (None, None),
    };
    let attr = Attribution::new(profile, opts.rules, requests);
    let ctx = costs::Ctx { profile, rules: opts.rules, attr: &attr, app_crates: attr.app_crates.clone(), wire: view.as_ref(), matched: Default::default(), worker_idle: Default::default() };
    let (found, not_evaluated) = costs::detect(&ctx);
    let driver = opts.rules.frame_set(super::catalog::DB_DRIVER);
    let driver_samples: u64 = profile
        .stacks
        .iter()
        .enumerate()
        .filter(|(_, s)| driver.is_some_and(|d| s.frames.iter().any(|&f| d.matches(&attr.frame_paths[f as usize]))))
        .map(|(i, _)| attr.app_stack_samples[i])
        .sum();
    let worker_samples: Option<u64> = attr
        .role_names
        .iter()
        .position(|n| n == super::fingerprint::WORKER_ROLE)
        .map(|w| attr.app_stack_role_samples.iter().map(|r| r[w]).sum())
        .filter(|&n: &u64| n > 0);
    let worker_threads = attr.role_names.iter().position(|n| n == super::fingerprint::WORKER_ROLE).map(|w| attr.thread_roles.values().filter(|&&r| r == w).count() as f64).filter(|&n| n > 0.0);
    let secs = profile.meta.duration_ns as f64 / 1e9;
    let (base_req_per_s, throughput_source) = match opts.base_req_per_s {
        Some(x) => (Some(x), Some("given".to_string())),
        None if source.as_deref() == Some("wire") => wire_throughput(opts.wire, requests, secs),
        None => (None, None),
    };
    let inputs = GainInputs {
        worker_cpu_us_per_request: worker_samples.and_then(|n| attr.us_per_request(n as f64)),
        workers: worker_threads,
        worker_blocked_us_per_request: ctx.worker_idle().and_then(|w| Some(w.blocked_ns as f64 / 1e3 / requests.filter(|&n| n > 0)? as f64)),
        req_per_s: base_req_per_s,
        // The wire's server-side latencies leave out requests queued before they are read (all
        // of them, when the workers are blocked), so N comes from the load generator, else from
        // the HTTP connections that sent requests during the steady window (one request in
        // flight per connection; a health check or a warm-up before or after the load is not
        // a client of it), else from all that sent one: a bound that errs high while requests
        // take less than the window's 100 ms buckets, so the gain stays an upper bound.
        concurrency: match bound {
            Bound::Latency { connections, .. } => Some(f64::from(connections)),
            _ => opts
                .wire
                .and_then(|w| w.steady.as_ref().and_then(|s| s.http_connections()).filter(|&n| n > 0.0).or(Some(w.http.decode.connections as f64)))
                .filter(|&n| n > 0.0),
        },
        round_trips_per_request: db_per_request.as_ref().map(|d| d.per_request.round_trips),
        driver_cpu_share: attr.app_share(driver_samples),
        cpu_us_per_request: attr.us_per_request(attr.samples as f64),
        base_req_per_s,
        db_setup_cpu_us: profile.connection_setup_server_cpu().map(|(ns, setups)| ns as f64 / 1e3 / setups as f64),
        db_cpu_us_per_request: requests
            .filter(|&n| n > 0 && !profile.meta.db_servers.is_empty())
            .map(|n| profile.meta.db_servers.iter().map(|s| s.cpu_ns).sum::<u64>() as f64 / 1e3 / n as f64),
        app_cpu_us_per_request: requests.filter(|&n| n > 0).and_then(|n| Some(profile.meta.target_cpu_ns? as f64 / 1e3 / n as f64)),
        app_capacity_cpus: profile.meta.target_cpu_capacity.filter(|&c| c > 0.0),
    };
    let closed_loop = opts.closed_loop.cloned().or_else(|| ClosedLoop::of_profile(profile, base_req_per_s, inputs.concurrency));
    let (found, generic_found): (Vec<Finding>, Vec<Finding>) = found.into_iter().partition(|f| f.kind == FindingKind::NamedCost);
    let mut ranked: Vec<RankedFinding> =
        found.into_iter().map(|f| RankedFinding { rank: 0, gain: predict_with(&f, &bound, &inputs, closed_loop.as_ref()), finding: f }).collect();
    order_by_gain(&mut ranked);
    let mut generic = generic_findings(profile, &attr);
    generic.extend(generic_found);
    if let Some(f) = driver_without_wire(&ctx, driver_samples, opts.wire) {
        generic.insert(0, f);
    }
    let endpoint_rows = super::endpoints::breakdown(profile, &attr, opts.wire);
    generic.extend(unexplained_waits(&ctx, &attr, &endpoint_rows));
    let mut syscalls: Vec<(String, f64)> = match requests {
        Some(r) => {
            let scale = profile.meta.syscall_scale();
            profile.syscalls.iter().map(|s| (s.name.clone(), s.count as f64 * scale / r as f64)).collect()
        }
        None => Vec::new(),
    };
    syscalls.sort_by(|a, b| b.1.total_cmp(&a.1));
    Ranking {
        schema_version: RANKING_SCHEMA_VERSION,
        target: profile.meta.target.clone(),
        label: opts.label.to_string(),
        partial: profile.meta.partial.clone(),
        requests,
        requests_source: source,
        base_req_per_s,
        throughput_source,
        samples: attr.samples,
        frequency_hz: profile.meta.frequency_hz,
        sampled_cpu_us: attr.period_us.map(|p| p * attr.samples as f64),
        measured_cpu_us: profile.meta.target_cpu_ns.map(|n| n as f64 / 1e3),
        cpu_us_per_request: attr.us_per_request(attr.samples as f64),
        truncated_samples: attr.truncated_samples,
        bound,
        closed_loop,
        costs: ranked,
        not_evaluated,
        generic,
        layers: attr.layer_table(profile),
        syscalls_per_request: syscalls,
        syscalls_traced_share: (profile.meta.syscall_scale() > 1.0).then(|| 1.0 / profile.meta.syscall_scale()),
        syscalls_scaled_by: profile.meta.syscall_scale_basis().map(str::to_string),
        calls_per_request: Vec::new(),
        thread_roles: role_rows(profile, &attr),
        worker_idle: ctx.worker_idle(),
        db_per_request,
        endpoint_join: profile.endpoints.clone(),
        endpoints: {
            let mut rows = endpoint_rows;
            rows.truncate(ENDPOINTS_LISTED);
            rows
        },
    }
}

/// Endpoints a ranking lists ([`Ranking::endpoints`]), most requests first.
pub const ENDPOINTS_LISTED: usize = 20;

/// Lock acquisitions per request from which a lock counter makes `global-locks` fire: a lock
/// taken on most requests, not one refreshed once a second (about 0.0005 per request at
/// 2,000 req/s).
pub const MIN_LOCKS_PER_REQUEST: f64 = 0.5;

/// Adds exact call counts ([`super::counters::CallCounts`], over the same window as the
/// profile, or over a run of their own when they carry its request count) to a ranking: [`Ranking::calls_per_request`]; the tasks spawned per request to the
/// `spawn-per-request` finding's counts and evidence; and the lock counters (`lock:<function>`,
/// [`super::counters::default_specs`]) taken at least [`MIN_LOCKS_PER_REQUEST`] times per
/// request to the `global-locks` finding, which they create when the samples did not (an
/// uncontended lock has no samples of its own: its predicted gain is then that of its sampled
/// CPU, none).
pub fn add_call_counts(r: &mut Ranking, counts: &super::counters::CallCounts) {
    let Some(n) = counts.requests.or(r.requests).filter(|&n| n > 0) else { return };
    add_lock_counts(r, counts, n);
    r.calls_per_request = counts.counts.iter().map(|c| (c.name.clone(), c.count as f64 / n as f64)).collect();
    if let Some(spawned) = counts.get("tokio_tasks_spawned") {
        let per = spawned as f64 / n as f64;
        if let Some(c) = r.costs.iter_mut().find(|c| c.finding.id == "spawn-per-request") {
            c.finding.counts_per_request.insert("tasks_spawned".into(), per);
            c.finding.evidence.retain(|e| e != super::costs::SPAWNS_NOT_COUNTED);
            c.finding.evidence.push(format!(
                "uprobe count: {spawned} tokio tasks spawned (OwnedTasks::bind_inner) for {n} requests, {per:.2} per request (all tasks: the pipeline's and the libraries', e.g. a driver's per-release task)"
            ));
        }
    }
}

fn add_lock_counts(r: &mut Ranking, counts: &super::counters::CallCounts, n: u64) {
    let locks: Vec<(&str, &str, f64)> = counts
        .counts
        .iter()
        .filter_map(|c| c.name.strip_prefix(super::counters::LOCK_COUNTER_PREFIX).map(|f| (f, c.what.as_str(), c.count as f64 / n as f64)))
        .filter(|(_, _, per)| *per >= MIN_LOCKS_PER_REQUEST)
        .collect();
    if locks.is_empty() {
        return;
    }
    let total: f64 = locks.iter().map(|(_, _, p)| p).sum();
    let mut evidence = vec![format!(
        "uprobe counts on the fast path of each lock the app's own code takes (found in its machine code: a call of the lock's contended slow path): {total:.2} acquisitions per request over {n} requests"
    )];
    evidence.extend(locks.iter().map(|(f, what, per)| format!("{per:.2} per request: {what} (`{f}`)")));
    evidence.push("whether each lock is shared by all requests (process-wide) is not known from code; uncontended, each costs tens of ns, so its predicted gain comes from the CPU sampled in lock code".into());
    if let Some(c) = r.costs.iter_mut().find(|c| c.finding.id == "global-locks") {
        c.finding.counts_per_request.insert("lock_acquisitions".into(), total);
        c.finding.confidence = Confidence::High;
        c.finding.evidence.extend(evidence);
        return;
    }
    let mut finding = Finding {
        id: "global-locks".into(),
        title: format!("the app's own code takes Mutex/RwLock locks on the request path ({total:.2} per request, counted)"),
        kind: FindingKind::NamedCost,
        confidence: Confidence::Medium,
        samples: 0,
        cpu_share: 0.0,
        cpu_share_se: 0.0,
        cpu_us_per_request: Some(0.0),
        round_trips_per_request: None,
        db_latency_us_per_request: None,
        counts_per_request: Default::default(),
        frames: Vec::new(),
        evidence,
        advice: String::new(),
        owner: None,
        samples_by_role: Default::default(),
        worker_blocked_us_per_request: None,
        endpoints: Vec::new(),
        endpoints_unattributed: 0,
        endpoints_measure: Default::default(),
    };
    finding.counts_per_request.insert("lock_acquisitions".into(), total);
    let inputs = GainInputs { cpu_us_per_request: r.cpu_us_per_request, base_req_per_s: r.base_req_per_s, ..GainInputs::default() };
    let gain = predict_with(&finding, &r.bound, &inputs, r.closed_loop.as_ref());
    r.costs.push(RankedFinding { rank: 0, finding, gain });
    order_by_gain(&mut r.costs);
}

/// Sorts findings by predicted gain (then samples, then id), those of low confidence (whose
/// evidence cannot tell the pattern from a look-alike) after the others, and numbers them
/// from 1.
fn order_by_gain(costs: &mut [RankedFinding]) {
    costs.sort_by(|a, b| {
        (a.finding.confidence == Confidence::Low)
            .cmp(&(b.finding.confidence == Confidence::Low))
            .then(b.gain.gain_pct.total_cmp(&a.gain.gain_pct))
            .then(b.finding.samples.cmp(&a.finding.samples))
            .then(a.finding.id.cmp(&b.finding.id))
    });
    for (i, c) in costs.iter_mut().enumerate() {
        c.rank = i + 1;
    }
}

/// The database figures per HTTP request the fingerprints used, and their window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DbPerRequest {
    /// `steady` (the wire's steady window, [`crate::wire::summary::SteadyWindow`]) or
    /// `capture` (the whole capture: it had no steady window).
    pub window: String,
    /// Window start and end, ns after the capture's first decoded event (`steady` only).
    pub window_ns: Option<(u64, u64)>,
    /// Per request of that window: round trips (all kinds), pings, transactions, statement
    /// executions, round-trip latency (ns), per statement shape.
    pub per_request: crate::wire::PerRequest,
    /// Round trips per request by kind: execute, prepare, ping, other.
    pub round_trips_by_kind: [(String, f64); 4],
    /// Back-to-back pings per request ([`crate::wire::summary::PgSummary::pings_after_ping`]).
    pub pings_after_ping: f64,
    /// Requests per endpoint in the window.
    pub endpoints: Vec<(String, u64)>,
    /// Wire chunks the kernel could not queue because the ring buffer was full
    /// ([`crate::profile::WireCaptureReport::ringbuf_dropped`]): each is a message or request
    /// line missing from the figures above, which then undercount. 0 when the profile has no
    /// capture report.
    #[serde(default)]
    pub chunks_lost: u64,
}

impl DbPerRequest {
    /// From a capture's summary: its steady window when it has one, else the whole capture.
    /// `None` without HTTP requests or round trips.
    pub fn of(w: &WireSummary) -> Option<DbPerRequest> {
        let (window, window_ns, view, endpoints) = match &w.steady {
            Some(st) => (
                "steady",
                Some((st.start_ns, st.end_ns)),
                WireSummary { http: crate::wire::summary::HttpSummary { requests: st.http_requests, ..Default::default() }, pg: st.pg.clone(), steady: None, load: None },
                st.endpoints.clone(),
            ),
            None => ("capture", None, w.clone(), w.http.endpoints.iter().map(|e| (e.endpoint.clone(), e.requests)).collect()),
        };
        if view.pg.round_trips == 0 {
            return None;
        }
        let per_request = view.per_request(view.http.requests)?;
        let n = view.http.requests as f64;
        let k = &view.pg.by_kind;
        Some(DbPerRequest {
            window: window.into(),
            window_ns,
            round_trips_by_kind: [
                ("execute".into(), k.execute as f64 / n),
                ("prepare".into(), k.prepare as f64 / n),
                ("ping".into(), k.ping as f64 / n),
                ("other".into(), k.other as f64 / n),
            ],
            pings_after_ping: view.pg.pings_after_ping as f64 / n,
            per_request,
            endpoints,
            chunks_lost: 0,
        })
    }
}

/// Without a load generator's figure, the throughput the wire saw: requests per second of its
/// steady window when it has one, else of its load window (a run that attached before the
/// load or outlived it would otherwise read its idle seconds as slowness: 387 req/s over a
/// 10 s attach around 5 s of wrk at 778 req/s, whose steady window read 782), else of the
/// whole run. Returns the figure (req/s) and where it came from.
fn wire_throughput(wire: Option<&WireSummary>, requests: Option<u64>, run_secs: f64) -> (Option<f64>, Option<String>) {
    if let Some((x, n, secs, window)) = wire.and_then(WireSummary::load_req_per_s) {
        return (Some(x), Some(format!("wire: {n} requests in the {window} of {secs:.2} s")));
    }
    match requests {
        Some(r) if run_secs > 0.0 => (Some(r as f64 / run_secs), Some(format!("wire: mean over the whole run of {run_secs:.2} s"))),
        _ => (None, None),
    }
}

fn generic(attr: &Attribution, id: &str, title: String, samples: u64, evidence: Vec<String>) -> Finding {
    let share = attr.app_share(samples);
    Finding {
        id: id.into(),
        title,
        kind: FindingKind::Generic,
        confidence: Confidence::High,
        samples,
        cpu_share: share,
        cpu_share_se: attr.app_share_se(share),
        cpu_us_per_request: attr.us_per_request(samples as f64),
        round_trips_per_request: None,
        db_latency_us_per_request: None,
        counts_per_request: Default::default(),
        frames: Vec::new(),
        evidence,
        advice: String::new(),
        owner: None,
        samples_by_role: Default::default(),
        worker_blocked_us_per_request: None,
        endpoints: Vec::new(),
        endpoints_unattributed: 0,
        endpoints_measure: Default::default(),
    }
}

/// Owners (layers and crates, [`Attribution::layers`]) listed by `hottest-code`.
pub const HOTTEST_OWNERS: usize = 8;

/// `hottest-code`: where the CPU goes, always: the owners with the most self time (the app's
/// samples, the agent's own left out), each with its share, µs per request and thread roles.
fn hottest_code(attr: &Attribution) -> Option<Finding> {
    let mut self_by_owner: std::collections::HashMap<usize, Vec<u64>> = std::collections::HashMap::new();
    for (si, o) in attr.stack_self.iter().enumerate() {
        if attr.app_stack_samples[si] == 0 {
            continue;
        }
        if let Some(o) = o {
            let e = self_by_owner.entry(*o).or_insert_with(|| vec![0; attr.role_names.len()]);
            for (i, n) in attr.app_stack_role_samples[si].iter().enumerate() {
                e[i] += n;
            }
        }
    }
    let mut owners: Vec<(usize, u64, Vec<u64>)> = self_by_owner.into_iter().map(|(o, r)| (o, r.iter().sum(), r)).collect();
    owners.sort_by(|a, b| b.1.cmp(&a.1).then(attr.layers[a.0].name.cmp(&attr.layers[b.0].name)));
    owners.truncate(HOTTEST_OWNERS);
    let (top, top_n, _) = owners.first()?.clone();
    let total: u64 = owners.iter().map(|o| o.1).sum();
    let mut f = generic(
        attr,
        "hottest-code",
        format!("the most self time is in `{}` ({:.1}% of the app's samples, the agent's own left out)", attr.layers[top].name, 100.0 * attr.app_share(top_n)),
        total,
        Vec::new(),
    );
    for (o, n, roles) in &owners {
        let l = &attr.layers[*o];
        let share = attr.app_share(*n);
        let by_role: Vec<String> =
            roles.iter().enumerate().filter(|(_, &k)| k > 0).map(|(i, k)| format!("{:.0}% on {}", 100.0 * *k as f64 / *n as f64, attr.role_names[i])).collect();
        f.evidence.push(format!(
            "`{}` ({}): {n} samples, {:.2}% ± {:.2}{}; {}",
            l.name,
            l.category,
            100.0 * share,
            100.0 * attr.app_share_se(share),
            attr.us_per_request(*n as f64).map_or(String::new(), |u| format!(", {u:.1} µs per request")),
            by_role.join(", ")
        ));
        f.frames.push(costs::FrameSamples { frame: l.name.clone(), samples: *n });
    }
    f.owner = Some(attr.layers[top].name.clone());
    Some(f)
}

/// Share of the app's samples (less 2 standard errors) in database-driver frames from which
/// [`driver_without_wire`] warns: 1%.
pub const DRIVER_WITHOUT_WIRE_SHARE: f64 = 0.01;

/// A warning when PostgreSQL driver frames ([`super::catalog::DB_DRIVER`]) hold at least
/// [`DRIVER_WITHOUT_WIRE_SHARE`] of the app's samples but the wire capture decoded no
/// PostgreSQL round trip: the database figures and the database costs are then missing, not
/// zero.
fn driver_without_wire(ctx: &costs::Ctx<'_>, driver_samples: u64, wire: Option<&WireSummary>) -> Option<Finding> {
    let wire = wire?;
    if wire.pg.round_trips > 0 {
        return None;
    }
    let share = ctx.attr.app_share(driver_samples);
    if share - 2.0 * ctx.attr.app_share_se(share) < DRIVER_WITHOUT_WIRE_SHARE {
        return None;
    }
    let mut f = ctx.finding(
        "database-traffic-not-decoded",
        format!(
            "database driver frames hold {:.1}% of the app's samples, but no PostgreSQL traffic was decoded: the database figures are missing, not zero",
            100.0 * share
        ),
        Confidence::Medium,
        driver_samples,
        Vec::new(),
    );
    f.kind = FindingKind::Generic;
    f.advice = "the wire capture decodes PostgreSQL over TCP without TLS, recognised on any port by its first bytes or by --db-port; a connection over TLS (sslmode=require), a Unix socket, or opened and idle for the whole run is not seen".into();
    f.evidence.push(format!("{driver_samples} samples with a frame of the `{}` frame set; 0 PostgreSQL round trips decoded", super::catalog::DB_DRIVER));
    Some(f)
}

/// Least share (0..1) of an endpoint's wire latency that its unexplained rest (neither on a
/// CPU nor in a database round trip, [`super::endpoints::EndpointBreakdown::rest_us_per_request`])
/// must hold for `unexplained-wait`: 0.5, the rest dominates.
pub const UNEXPLAINED_WAIT_SHARE: f64 = 0.5;

/// ... and its least length, µs per request: 1,000 (a millisecond per request is beyond the
/// wire's own timing and a task's wake-up on an idle worker).
pub const UNEXPLAINED_WAIT_MIN_US: f64 = 1000.0;

/// Endpoints `unexplained-wait` lists at most, longest rest first.
pub const UNEXPLAINED_WAIT_ENDPOINTS: usize = 3;

/// `unexplained-wait`, per endpoint (at most [`UNEXPLAINED_WAIT_ENDPOINTS`]): most of its
/// latency is neither CPU nor database round trips while the runtime's workers were idle (parked
/// at least [`super::catalog::DEFAULT_MIN_WORKER_IDLE_SHARE`] of their time, so not a queue for
/// a worker): its tasks waited on something the agent does not time (a pool, a timer, a lock
/// or semaphore, a channel, another service). The evidence names the endpoint's samples in the
/// catalog's `async-wait` frames (where a future is polled before it waits). No gain: the
/// wait's cause is unknown. `rows` is the ranking's [`super::endpoints::breakdown`]. Empty
/// without an endpoint join, a wire latency, or off-CPU waits of a runtime worker.
fn unexplained_waits(ctx: &costs::Ctx<'_>, attr: &Attribution, rows: &[super::endpoints::EndpointBreakdown]) -> Vec<Finding> {
    let Some(join) = &ctx.profile.endpoints else { return Vec::new() };
    let Some(idle) = ctx.worker_idle() else { return Vec::new() };
    if idle.share < super::catalog::DEFAULT_MIN_WORKER_IDLE_SHARE {
        return Vec::new();
    }
    let mut rows: Vec<(&super::endpoints::EndpointBreakdown, f64)> = rows
        .iter()
        .filter(|r| r.requests >= super::fingerprint::MIN_ENDPOINT_REQUESTS)
        .filter_map(|r| {
            let (l, rest) = (r.latency_us?, r.rest_us_per_request?);
            (l > 0.0 && rest >= UNEXPLAINED_WAIT_MIN_US && rest >= UNEXPLAINED_WAIT_SHARE * l).then_some((r, rest))
        })
        .collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    rows.truncate(UNEXPLAINED_WAIT_ENDPOINTS);
    let waits = ctx.rules.frame_set(super::catalog::ASYNC_WAIT);
    rows.into_iter()
        .map(|(r, rest)| {
            let l = r.latency_us.unwrap_or(0.0);
            // The endpoint's samples by the innermost `async-wait` frame on their stack.
            let id = join.endpoints.iter().position(|e| *e == r.endpoint).map(|i| i as u32);
            let mut by_frame: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
            let mut samples = 0;
            for (si, list) in attr.stack_endpoints.iter().enumerate() {
                let n: u64 = list.iter().filter(|(_, e, _)| e.is_some() && *e == id).map(|x| x.2).sum();
                if n == 0 || attr.stack_profiler.get(si).copied().unwrap_or(false) {
                    continue;
                }
                samples += n;
                if let Some(set) = waits {
                    if let Some(&f) = ctx.profile.stacks[si].frames.iter().find(|&&f| set.matches(ctx.path(f))) {
                        *by_frame.entry(ctx.path(f)).or_default() += n;
                    }
                }
            }
            let mut frames: Vec<costs::FrameSamples> = by_frame.into_iter().map(|(f, n)| costs::FrameSamples { frame: f.chars().take(200).collect(), samples: n }).collect();
            frames.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.frame.cmp(&b.frame)));
            frames.truncate(5);
            let mut f = generic(
                attr,
                "unexplained-wait",
                format!(
                    "`{}` waits {:.1} ms per request off the CPU and outside the database ({:.0}% of its {:.1} ms latency): its tasks wait on something the agent does not time",
                    r.endpoint,
                    rest / 1e3,
                    100.0 * rest / l,
                    l / 1e3
                ),
                samples,
                Vec::new(),
            );
            f.confidence = Confidence::Medium;
            f.evidence.push(format!(
                "wire: {} requests, mean latency {:.2} ms = on-CPU {:.2} ms + database round trips {:.2} ms ({:.2} per request) + the rest {:.2} ms",
                r.requests,
                l / 1e3,
                r.cpu_us_per_request.unwrap_or(0.0) / 1e3,
                r.db_us_per_request / 1e3,
                r.db_round_trips_per_request,
                rest / 1e3
            ));
            f.evidence.push(format!(
                "the runtime's workers were parked (idle) {:.0}% of their time (from {}): the rest is not a queue for a worker",
                100.0 * idle.share,
                idle.source()
            ));
            if frames.is_empty() {
                f.evidence.push(format!("none of the endpoint's {samples} samples is in a frame of the `{}` set (a timer, a pool's acquire, a semaphore, a channel, an HTTP client)", super::catalog::ASYNC_WAIT));
            } else {
                let list: Vec<String> = frames.iter().map(|x| format!("`{}` ({} samples)", x.frame, x.samples)).collect();
                f.evidence.push(format!("where its tasks await (samples of the endpoint in `{}` frames): {}", super::catalog::ASYNC_WAIT, list.join(", ")));
            }
            f.advice = "find what the handler awaits between its socket calls: a pool's acquire while other requests hold connections (across a sleep, an upstream call or a long transaction), a timer, an async lock or semaphore, a channel, or a call to another service the wire capture does not decode".into();
            f.counts_per_request.insert("rest_us".into(), rest);
            f.counts_per_request.insert("latency_us".into(), l);
            f.frames = frames;
            f.endpoints = vec![costs::EndpointShare { endpoint: r.endpoint.clone(), count: samples, share: 1.0, per_request: None }];
            f
        })
        .collect()
}

fn generic_findings(profile: &Profile, attr: &Attribution) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(f) = hottest_code(attr) {
        out.push(f);
    }
    let hot = attr.hot_unattributed(profile, 10);
    let hot_total: u64 = hot.iter().map(|h| h.1).sum();
    if hot_total > 0 {
        let mut f = generic(attr, "hot-functions", "hottest self-time functions outside known layers".into(), hot_total, Vec::new());
        f.frames = hot.iter().map(|(p, n)| costs::FrameSamples { frame: p.chars().take(200).collect(), samples: *n }).collect();
        f.evidence.push(format!("the top {} functions no rule claims (innermost user frame), by self samples", hot.len()));
        out.push(f);
    }
    // Allocation: the app's samples whose innermost layer has the category `alloc`. Every
    // count here is over the app's stacks only: its share is of the app's samples.
    let mut alloc = 0;
    let mut truncated = 0;
    for (si, l) in attr.stack_self.iter().enumerate() {
        if l.is_some_and(|l| attr.layers[l].category == "alloc") {
            alloc += attr.app_stack_samples[si];
        }
        if profile.stacks[si].truncated {
            truncated += attr.app_stack_samples[si];
        }
    }
    out.push(generic(
        attr,
        "allocation",
        "CPU in the memory allocator (self time)".into(),
        alloc,
        vec![format!("{alloc} of the app's {} samples have their innermost layer in the allocator (malloc/free, mimalloc, jemalloc, __rust_alloc)", attr.app_samples())],
    ));
    if truncated > 0 {
        out.push(generic(
            attr,
            "truncated-stacks",
            "stacks cut before the thread start (callers unknown)".into(),
            truncated,
            vec![format!(
                "{truncated} of the app's {} samples are on truncated stacks: their layers above the cut (and any cost fingerprint there) are missed; code without frame pointers (e.g. glibc syscall wrappers) cuts stacks",
                attr.app_samples()
            )],
        ));
    }
    out
}

