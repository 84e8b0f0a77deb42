//! Each endpoint's time per request, split into what the agent can name: its latency on the
//! wire, the on-CPU time of the threads serving it, its PostgreSQL round trips, and the rest
//! (waits the agent does not name). Read by the ranking's latency breakdown and by the
//! findings that weigh a wait against an endpoint's latency.

use serde::{Deserialize, Serialize};

use super::layers::Attribution;
use crate::profile::Profile;
use crate::wire::WireSummary;

/// One endpoint's time per request: what the wire measured (request line read to status line
/// written), and the parts the agent can name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndpointBreakdown {
    /// `METHOD /route`.
    pub endpoint: String,
    /// Request lines decoded over the whole capture.
    pub requests: u64,
    /// Mean time from the request's chunk to its response's status line, µs (wire); `None`
    /// when no response was paired.
    pub latency_us: Option<f64>,
    /// Sampled on-CPU time of threads while serving it, µs per request (samples × period).
    pub cpu_us_per_request: Option<f64>,
    /// PostgreSQL round trips per request, of the chains linked to its requests
    /// ([`crate::wire::serving`]).
    pub db_round_trips_per_request: f64,
    /// Of those round trips, the share the order of the calls could not join to a request
    /// and that was split to the endpoint as its joined ones of the same kind, 0..1
    /// ([`crate::wire::serving`]).
    #[serde(default)]
    pub db_round_trips_split_share: f64,
    /// Their time, µs per request (answered round trips' latency).
    pub db_us_per_request: f64,
    /// PostgreSQL connections set up for its requests, each from the first start-up message
    /// to the first ReadyForQuery, µs per request (a connection opened per request).
    #[serde(default)]
    pub connect_us_per_request: f64,
    /// `latency_us - cpu - db - connect`, µs per request, at least 0: waits the agent does not
    /// name (tasks parked on a pool's acquire, a lock, a timer; queueing for a worker; off-CPU
    /// time). `None` without a latency or a CPU figure.
    pub rest_us_per_request: Option<f64>,
}

/// [`EndpointBreakdown`] of every endpoint the wire saw, most requests first, from the
/// profile's endpoint join ([`Profile::endpoints`]); the agent's own samples are left out of
/// the CPU figures. Empty without a join or a wire summary.
pub fn breakdown(profile: &Profile, attr: &Attribution, wire: Option<&WireSummary>) -> Vec<EndpointBreakdown> {
    let (Some(join), Some(wire)) = (&profile.endpoints, wire) else { return Vec::new() };
    let samples = attr.endpoint_samples(join.endpoints.len());
    let mut rows: Vec<EndpointBreakdown> = wire
        .http
        .endpoints
        .iter()
        .filter(|e| e.requests > 0)
        .map(|e| {
            let n = e.requests as f64;
            let id = join.endpoints.iter().position(|x| *x == e.endpoint);
            let cpu = id.and_then(|i| attr.period_us.map(|p| samples[i] as f64 * p / n));
            let db = id.and_then(|i| join.db.iter().find(|d| d.endpoint as usize == i)).map(|d| &d.counts).cloned().unwrap_or_default();
            let latency = e.statuses.values().sum::<u64>().gt(&0).then(|| e.latency_mean_ns as f64 / 1e3);
            let db_us = db.latency_total_ns as f64 / 1e3 / n;
            let connect_us = db.connection_setup_ns as f64 / 1e3 / n;
            EndpointBreakdown {
                endpoint: e.endpoint.clone(),
                requests: e.requests,
                latency_us: latency,
                cpu_us_per_request: cpu,
                db_round_trips_per_request: db.round_trips as f64 / n,
                db_round_trips_split_share: db.estimated_round_trips as f64 / db.round_trips.max(1) as f64,
                db_us_per_request: db_us,
                connect_us_per_request: connect_us,
                rest_us_per_request: latency.zip(cpu).map(|(l, c)| (l - c - db_us - connect_us).max(0.0)),
            }
        })
        .collect();
    rows.sort_by(|a, b| b.requests.cmp(&a.requests).then_with(|| a.endpoint.cmp(&b.endpoint)));
    rows
}
