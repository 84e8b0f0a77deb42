//! Attribution: pipeline layers, named costs and the ranking with predicted gains.
//!
//! # Layers ([`rules`], [`layers`])
//! Rules are data (TOML; the default catalog `agent/rules/rust-web.toml` is embedded, `--rules
//! FILE` adds or overrides, see [`rules::RuleSet`]). Each on-CPU sample is attributed to its
//! innermost matching layer (*self*) and to every distinct layer on its stack (*total*). The
//! layer table gives both as shares of the app's on-CPU samples and as µs of **sampled CPU per
//! request**: `samples × period / requests`, with `period = 1 / frequency` (e.g. 1,010 µs at
//! 99 Hz). Each share carries a binomial standard error `sqrt(p (1 - p) / n)` (n = all
//! samples), so a reader can judge noise: 10 samples of 1,000 is 1.0% ± 0.31.
//!
//! Self time belongs to the owner of a sample's innermost frame: the layer of the rule that
//! claims it, else the frame's own crate ([`layers`]), never the runtime further down the
//! stack. Every thread has a role from its stacks (runtime worker, blocking pool, ...,
//! [`catalog`]).
//!
//! # Named costs ([`catalog`], [`fingerprint`], [`costs`])
//! Fingerprints are data too: `[[cost]]` tables of predicates over on-CPU samples (frames,
//! callers, thread roles), off-CPU waits (the wait's frames and caller, thread roles) and
//! syscall counts per request, with thresholds relative to the profile and the request, a title
//! and an advice line that quote the per-request figures. A Rust detector ([`costs::DETECTORS`])
//! stands in only where a predicate cannot say it. Never on the app's own symbol names.
//! `hottest-code` always names the owners with the most self time and their thread roles.
//!
//! # Predicted gain ([`ranking`])
//! For each cost the ranking predicts the throughput gained if it were removed. First, the
//! resource that bounds the test ([`ranking::Bound::classify`]): the app's CPU when its CPU set
//! is at least 85% busy, the database's CPU when PostgreSQL's is, else **latency at the given
//! concurrency**. Then:
//! - **CPU-bound** (app or database): throughput = CPUs / CPU per request, so removing a share
//!   `s` of the bottleneck's work per request gives `1/(1-s) - 1` more req/s (Amdahl-style
//!   share arithmetic): s = 10% gives +11.1%. For the app, `s` is the cost's share of on-CPU
//!   samples; for the database, its share of round trips.
//! - **Latency-bound**: a closed loop of N connections (wrk) runs at `X = N / L` req/s
//!   (Little's law), so removing `d` µs from a request's latency `L` gives `L/(L-d) - 1`:
//!   d = 100 µs of L = 1,000 µs gives +11.1%. `d` = the cost's sampled CPU µs per request plus
//!   its database round-trip time per request (wire).
//! - **Closed loop** ([`closed_loop`]): unless a CPU set is full (the host's included), and
//!   whenever the run's figures allow it, the latency formulas give way to a queueing model of
//!   the whole loop (mean value analysis over the CPU stations, the delay fitted to the measured
//!   throughput), which also counts the queueing a cost causes for the other requests.
//!
//! The model's limits: sampled CPU is not the CPU on the request's critical path (work done in
//! parallel shortens latency less); the database model prices every round trip alike; a cost
//! whose frames are cut off by truncated stacks is under-counted.
//!
//! # Outputs
//! `crate::render::ranking` writes `ranking.md` and `ranking.json` for one profile, and for
//! every profiled test of a `profiler bench` run with a combined `ranking.md`.

pub mod catalog;
pub mod closed_loop;
pub mod costs;
pub mod counters;
pub mod endpoints;
pub mod fingerprint;
pub mod layers;
pub mod locks;
pub mod ranking;
pub mod rules;


pub use costs::{Confidence, EndpointMeasure, Finding, FindingKind};
pub use layers::{Attribution, LayerRow};
pub use ranking::{cpu_bound_gain, latency_bound_gain, rank, Bound, Ranking, RankingOptions};
pub use rules::{RuleError, RuleSet, RulesFileError};

/// The bound of one bench test, from its median measured run: app and PostgreSQL CPU use
/// against their CPU sets, wrk's connections and mean latency.
pub fn bench_bound(test: &crate::runs::TestResult, settings: &crate::runs::Settings) -> Bound {
    let m = test.median();
    let app = (m.app.cpu, f64::from(crate::sys::cpus::list_len(&settings.app_cpus)));
    let db = match (&m.postgres, &settings.pg_cpus) {
        (Some(u), Some(list)) => Some((u.cpu, f64::from(crate::sys::cpus::list_len(list)))),
        _ => None,
    };
    Bound::classify(app, db, settings.connections, m.wrk.latency.mean_us)
}

/// The closed loop of one bench test ([`closed_loop::ClosedLoop::of_bench`]), from its median
/// measured run: app and PostgreSQL CPU use against their CPU sets, wrk's connections and
/// req/s. `None` without a throughput.
pub fn bench_closed_loop(test: &crate::runs::TestResult, settings: &crate::runs::Settings) -> Option<closed_loop::ClosedLoop> {
    let m = test.median();
    let app = (m.app.cpu, f64::from(crate::sys::cpus::list_len(&settings.app_cpus)));
    let db = match (&m.postgres, &settings.pg_cpus) {
        (Some(u), Some(list)) => Some((u.cpu, f64::from(crate::sys::cpus::list_len(list)))),
        _ => None,
    };
    closed_loop::ClosedLoop::of_bench(app, db, settings.connections, m.wrk.req_per_s)
}

