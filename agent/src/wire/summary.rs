//! The aggregate of the wire events of one capture, as it goes into `profile.json`, and the
//! per-HTTP-request figures the ranking divides by.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::http::{HttpDecodeStats, HttpEvent};
use super::pg::{PgDecodeStats, PgEvent, RoundTripKind, StatementShape, TransactionOutcome};

/// Most distinct endpoints kept; requests to further endpoints are counted under
/// [`OTHER_ENDPOINT`] (protects the report from unbounded path cardinality).
pub const MAX_ENDPOINTS: usize = 1000;
/// The endpoint key requests beyond [`MAX_ENDPOINTS`] are counted under.
pub const OTHER_ENDPOINT: &str = "(other endpoints)";
/// Most distinct statement shapes kept; further executions go to
/// [`PgSummary::other_shape_executions`].
pub const MAX_SHAPES: usize = 2000;

/// Requests of one endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointStats {
    /// `METHOD target`, target templated (`GET /api/deals/{id}`).
    pub endpoint: String,
    /// Request lines decoded.
    pub requests: u64,
    /// Final response status -> count (responses paired with this endpoint's requests).
    pub statuses: BTreeMap<u16, u64>,
    /// Sum over paired responses of request-to-response time, ns.
    pub latency_total_ns: u64,
    /// `latency_total_ns / paired responses`, ns (0 without any).
    pub latency_mean_ns: u64,
}

/// HTTP side of a [`WireSummary`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpSummary {
    /// Request lines decoded, all endpoints (the "per request" denominator).
    pub requests: u64,
    /// Final responses decoded (paired or not).
    pub responses: u64,
    /// Per endpoint, most requests first.
    pub endpoints: Vec<EndpointStats>,
    /// Decoder counters: bytes, undecodable bytes, losses of framing, unpaired responses.
    pub decode: HttpDecodeStats,
}

/// One statement shape's figures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatementStats {
    /// The shape.
    pub shape: StatementShape,
    /// Times executed (Execute messages, or statements of simple queries).
    pub executions: u64,
    /// Round trips that executed it at least once.
    pub round_trips: u64,
    /// Times prepared (Parse messages).
    pub prepares: u64,
    /// Sum of the latencies of the answered round trips that executed it, ns. A round trip
    /// executing several shapes counts in full for each of them.
    pub latency_total_ns: u64,
    /// `latency_total_ns` / answered round trips that executed it, ns.
    pub latency_mean_ns: u64,
}

/// Round trips by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundTripCounts {
    /// Executed at least one statement.
    pub execute: u64,
    /// Only prepared statements.
    pub prepare: u64,
    /// Pings (no statement).
    pub ping: u64,
    /// Anything else.
    pub other: u64,
}

/// Transactions of a capture.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransactionSummary {
    /// Transactions that ended during the capture.
    pub ended: u64,
    /// Of those, committed.
    pub committed: u64,
    /// Of those, rolled back.
    pub rolled_back: u64,
    /// Of those, with an unknown outcome.
    pub unknown: u64,
    /// Still open at the end of the capture.
    pub open: u64,
    /// Ended ones that began before the capture of their connection.
    pub started_before_attach: u64,
    /// Round trips inside ended transactions.
    pub round_trips: u64,
    /// Sum of the durations of ended transactions (first round trip's start to last one's
    /// end), ns.
    pub duration_total_ns: u64,
}

/// PostgreSQL side of a [`WireSummary`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgSummary {
    /// Connections whose start-up was seen.
    pub connections: u64,
    /// Round trips, answered or not.
    pub round_trips: u64,
    /// Round trips whose ReadyForQuery was decoded.
    pub round_trips_answered: u64,
    /// Sum of the latencies of answered round trips, ns.
    pub round_trip_latency_total_ns: u64,
    /// `round_trip_latency_total_ns / round_trips_answered`, ns.
    pub round_trip_latency_mean_ns: u64,
    /// Round trips by kind.
    pub by_kind: RoundTripCounts,
    /// Pings (= `by_kind.ping`).
    pub pings: u64,
    /// Sum of the latencies of answered pings, ns.
    pub ping_latency_total_ns: u64,
    /// Statement executions, all shapes.
    pub statement_executions: u64,
    /// Executions of statements prepared before the capture (shape not known).
    pub prepared_before_attach_executions: u64,
    /// Executions whose shape was beyond [`MAX_SHAPES`].
    pub other_shape_executions: u64,
    /// Per statement shape, most executions first.
    pub statements: Vec<StatementStats>,
    /// Transactions.
    pub transactions: TransactionSummary,
    /// SQLSTATE -> number of ErrorResponses.
    pub errors: BTreeMap<String, u64>,
    /// Decoder counters: bytes, undecodable bytes, losses of framing, unmatched messages.
    pub decode: PgDecodeStats,
}

/// Everything the wire decoders saw in one capture.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireSummary {
    /// HTTP requests and responses.
    pub http: HttpSummary,
    /// PostgreSQL round trips, statements, transactions.
    pub pg: PgSummary,
}

/// One shape's figures per HTTP request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatementPerRequest {
    /// The shape.
    pub shape: StatementShape,
    /// Executions per request.
    pub executions: f64,
    /// Round trips per request.
    pub round_trips: f64,
}

/// Database figures divided by a number of HTTP requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerRequest {
    /// The denominator: HTTP requests.
    pub requests: u64,
    /// Round trips per request (all kinds).
    pub round_trips: f64,
    /// Pings per request.
    pub pings: f64,
    /// Ended transactions per request.
    pub transactions: f64,
    /// Statement executions per request.
    pub statement_executions: f64,
    /// Round-trip latency per request (sum of answered round trips' latencies / requests), ns.
    pub db_latency_ns: f64,
    /// Per shape, in the order of [`PgSummary::statements`].
    pub statements: Vec<StatementPerRequest>,
}

impl WireSummary {
    /// The database figures per HTTP request, for `requests` requests (usually
    /// [`HttpSummary::requests`], or the requests of the one endpoint a test hits).
    /// `None` when `requests` is 0.
    pub fn per_request(&self, requests: u64) -> Option<PerRequest> {
        if requests == 0 {
            return None;
        }
        let n = requests as f64;
        let pg = &self.pg;
        Some(PerRequest {
            requests,
            round_trips: pg.round_trips as f64 / n,
            pings: pg.pings as f64 / n,
            transactions: pg.transactions.ended as f64 / n,
            statement_executions: pg.statement_executions as f64 / n,
            db_latency_ns: pg.round_trip_latency_total_ns as f64 / n,
            statements: pg
                .statements
                .iter()
                .map(|s| StatementPerRequest {
                    shape: s.shape.clone(),
                    executions: s.executions as f64 / n,
                    round_trips: s.round_trips as f64 / n,
                })
                .collect(),
        })
    }

    /// Bytes no decoder could attribute to a message, both protocols, both directions.
    pub fn undecodable_bytes(&self) -> u64 {
        self.pg.decode.frontend.undecodable_bytes
            + self.pg.decode.backend.undecodable_bytes
            + self.http.decode.requests.undecodable_bytes
            + self.http.decode.responses.undecodable_bytes
    }

    /// Requests of one endpoint (`METHOD target`, as in [`EndpointStats::endpoint`]).
    pub fn requests_of(&self, endpoint: &str) -> u64 {
        self.http.endpoints.iter().find(|e| e.endpoint == endpoint).map_or(0, |e| e.requests)
    }
}

#[derive(Debug, Default)]
struct EndpointAcc {
    requests: u64,
    statuses: BTreeMap<u16, u64>,
    paired: u64,
    latency: u64,
}

#[derive(Debug, Default)]
struct ShapeAcc {
    executions: u64,
    round_trips: u64,
    answered: u64,
    prepares: u64,
    latency: u64,
}

/// Folds events into a [`WireSummary`] in bounded memory.
#[derive(Debug, Default)]
pub(crate) struct SummaryBuilder {
    endpoints: HashMap<String, EndpointAcc>,
    http_requests: u64,
    http_responses: u64,
    shapes: HashMap<StatementShape, ShapeAcc>,
    pg: PgSummary,
}

impl SummaryBuilder {
    fn endpoint(&mut self, key: &str) -> &mut EndpointAcc {
        if !self.endpoints.contains_key(key) && self.endpoints.len() >= MAX_ENDPOINTS {
            return self.endpoints.entry(OTHER_ENDPOINT.to_string()).or_default();
        }
        self.endpoints.entry(key.to_string()).or_default()
    }

    pub(crate) fn add_http(&mut self, e: &HttpEvent) {
        match e {
            HttpEvent::Request(r) => {
                self.http_requests += 1;
                self.endpoint(&r.endpoint()).requests += 1;
            }
            HttpEvent::Response(r) => {
                self.http_responses += 1;
                if let Some(ep) = &r.endpoint {
                    let key = if self.endpoints.contains_key(ep) { ep.clone() } else { OTHER_ENDPOINT.to_string() };
                    let acc = self.endpoint(&key);
                    *acc.statuses.entry(r.status).or_default() += 1;
                    acc.paired += 1;
                    acc.latency += r.latency_ns.unwrap_or(0);
                }
            }
            HttpEvent::NoResponse { .. } => {}
        }
    }

    fn shape(&mut self, s: &StatementShape) -> Option<&mut ShapeAcc> {
        if !self.shapes.contains_key(s) && self.shapes.len() >= MAX_SHAPES {
            return None;
        }
        Some(self.shapes.entry(s.clone()).or_default())
    }

    pub(crate) fn add_pg(&mut self, e: &PgEvent) {
        match e {
            PgEvent::Connected { .. } => self.pg.connections += 1,
            PgEvent::Encrypted { .. } | PgEvent::Terminated { .. } => {}
            PgEvent::RoundTrip(rt) => {
                let latency = rt.latency_ns();
                self.pg.round_trips += 1;
                if let Some(l) = latency {
                    self.pg.round_trips_answered += 1;
                    self.pg.round_trip_latency_total_ns += l;
                }
                match rt.kind {
                    RoundTripKind::Execute => self.pg.by_kind.execute += 1,
                    RoundTripKind::Prepare => self.pg.by_kind.prepare += 1,
                    RoundTripKind::Ping => {
                        self.pg.by_kind.ping += 1;
                        self.pg.ping_latency_total_ns += latency.unwrap_or(0);
                    }
                    RoundTripKind::Other => self.pg.by_kind.other += 1,
                }
                for code in &rt.errors {
                    *self.pg.errors.entry(code.clone()).or_default() += 1;
                }
                let mut seen: Vec<&StatementShape> = Vec::new();
                for s in &rt.statements {
                    self.pg.statement_executions += 1;
                    if matches!(s, StatementShape::PreparedBeforeAttach { .. }) {
                        self.pg.prepared_before_attach_executions += 1;
                    }
                    let first = !seen.contains(&s);
                    if first {
                        seen.push(s);
                    }
                    match self.shape(s) {
                        Some(acc) => {
                            acc.executions += 1;
                            if first {
                                acc.round_trips += 1;
                                if let Some(l) = latency {
                                    acc.answered += 1;
                                    acc.latency += l;
                                }
                            }
                        }
                        None => self.pg.other_shape_executions += 1,
                    }
                }
                for s in &rt.prepared {
                    if let Some(acc) = self.shape(s) {
                        acc.prepares += 1;
                    }
                }
            }
            PgEvent::Transaction(t) => {
                let ts = &mut self.pg.transactions;
                if t.outcome == TransactionOutcome::Open {
                    ts.open += 1;
                    return;
                }
                ts.ended += 1;
                match t.outcome {
                    TransactionOutcome::Committed => ts.committed += 1,
                    TransactionOutcome::RolledBack => ts.rolled_back += 1,
                    _ => ts.unknown += 1,
                }
                if t.started_before_attach {
                    ts.started_before_attach += 1;
                }
                ts.round_trips += t.round_trips as u64;
                if let Some(end) = t.end_ns {
                    ts.duration_total_ns += end.saturating_sub(t.start_ns);
                }
            }
        }
    }

    pub(crate) fn build(&self, pg: PgDecodeStats, http: HttpDecodeStats) -> WireSummary {
        let mut endpoints: Vec<EndpointStats> = self
            .endpoints
            .iter()
            .map(|(k, a)| EndpointStats {
                endpoint: k.clone(),
                requests: a.requests,
                statuses: a.statuses.clone(),
                latency_total_ns: a.latency,
                latency_mean_ns: a.latency.checked_div(a.paired).unwrap_or(0),
            })
            .collect();
        endpoints.sort_by(|a, b| b.requests.cmp(&a.requests).then_with(|| a.endpoint.cmp(&b.endpoint)));
        let mut statements: Vec<StatementStats> = self
            .shapes
            .iter()
            .map(|(s, a)| StatementStats {
                shape: s.clone(),
                executions: a.executions,
                round_trips: a.round_trips,
                prepares: a.prepares,
                latency_total_ns: a.latency,
                latency_mean_ns: a.latency.checked_div(a.answered).unwrap_or(0),
            })
            .collect();
        statements.sort_by(|a, b| {
            b.executions.cmp(&a.executions).then_with(|| b.prepares.cmp(&a.prepares)).then_with(|| a.shape.cmp(&b.shape))
        });
        let mut pgs = self.pg.clone();
        pgs.statements = statements;
        pgs.pings = pgs.by_kind.ping;
        pgs.round_trip_latency_mean_ns =
            pgs.round_trip_latency_total_ns.checked_div(pgs.round_trips_answered).unwrap_or(0);
        pgs.decode = pg;
        WireSummary {
            http: HttpSummary { requests: self.http_requests, responses: self.http_responses, endpoints, decode: http },
            pg: pgs,
        }
    }
}
