//! The aggregate of the wire events of one capture, as it goes into `profile.json`, and the
//! per-HTTP-request figures the ranking divides by.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::http::{HttpDecodeStats, HttpEvent};
use super::pg::{PgDecodeStats, PgEvent, RoundTripKind, StatementShape, Transaction, TransactionOutcome};

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
    /// Round trips that only prepared statements, this one among them (a driver that prepares
    /// a statement in a round trip of its own before executing it); 0 in a steady window,
    /// which leaves out buckets with preparations.
    #[serde(default, skip_serializing_if = "crate::is_default")]
    pub prepare_round_trips: u64,
    /// Round trips that only closed statements, this one among them (a driver that closes a
    /// statement it prepared for one execution, in a round trip of its own); 0 in a steady
    /// window, whose buckets do not track them (a driver that closes after each execution
    /// also prepares before it, and buckets with preparations are outside the window).
    #[serde(default, skip_serializing_if = "crate::is_default")]
    pub close_round_trips: u64,
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

impl TransactionSummary {
    /// Counts one transaction that ended (committed, rolled back or unknown).
    fn add_ended(&mut self, t: &Transaction) {
        self.ended += 1;
        match t.outcome {
            TransactionOutcome::Committed => self.committed += 1,
            TransactionOutcome::RolledBack => self.rolled_back += 1,
            _ => self.unknown += 1,
        }
        if t.started_before_attach {
            self.started_before_attach += 1;
        }
        self.round_trips += t.round_trips as u64;
        if let Some(end) = t.end_ns {
            self.duration_total_ns += end.saturating_sub(t.start_ns);
        }
    }
}

/// Serde default of [`PgSummary::pings_after_ping_not_counted`]: a profile without the field
/// predates the count.
fn absent_means_legacy() -> bool {
    true
}

/// PostgreSQL side of a [`WireSummary`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgSummary {
    /// Connections whose start-up was seen.
    pub connections: u64,
    /// Of those, the connections whose start-up began in the capture (their set-up time is
    /// known, [`crate::wire::pg::PgEvent::Connected`]).
    #[serde(default)]
    pub connections_timed: u64,
    /// Sum of the set-up times of [`PgSummary::connections_timed`], ns: first start-up
    /// message sent to the first ReadyForQuery read, as the client saw them.
    #[serde(default)]
    pub connection_setup_total_ns: u64,
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
    /// Pings whose previous round trip on the same connection was a ping too: back-to-back
    /// pings with no statement between them, e.g. a pool that pings a connection when it
    /// takes it back and again before it hands it out. Only the first of such a run can tell
    /// the driver anything new; the others are redundant round trips.
    #[serde(default)]
    pub pings_after_ping: u64,
    /// Sum of the latencies of the answered [`PgSummary::pings_after_ping`], ns.
    #[serde(default)]
    pub pings_after_ping_latency_total_ns: u64,
    /// True for a summary read from a profile written before back-to-back pings were counted
    /// (the field is absent there): its `pings_after_ping` is 0 because nothing counted them.
    /// Always false in what this agent writes.
    #[serde(default = "absent_means_legacy")]
    pub pings_after_ping_not_counted: bool,
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

impl PgSummary {
    /// See [`WireSummary::apply_statement_texts`].
    fn apply_statement_texts(&mut self, texts: &HashMap<(u64, String), String>) -> u64 {
        let mut recovered = 0;
        let mut merged: Vec<StatementStats> = Vec::with_capacity(self.statements.len());
        for mut st in std::mem::take(&mut self.statements) {
            let (shape, found) = resolved_shape(&st.shape, texts);
            if found {
                recovered += st.executions;
            }
            st.shape = shape;
            match merged.iter_mut().find(|m| m.shape == st.shape) {
                Some(m) => {
                    let answered = |x: &StatementStats| x.latency_total_ns.checked_div(x.latency_mean_ns).unwrap_or(0);
                    let n = answered(m) + answered(&st);
                    m.executions += st.executions;
                    m.round_trips += st.round_trips;
                    m.prepares += st.prepares;
                    m.prepare_round_trips += st.prepare_round_trips;
                    m.close_round_trips += st.close_round_trips;
                    m.latency_total_ns += st.latency_total_ns;
                    m.latency_mean_ns = m.latency_total_ns.checked_div(n).unwrap_or(0);
                }
                None => merged.push(st),
            }
        }
        merged.sort_by(|a, b| b.executions.cmp(&a.executions).then_with(|| a.shape.cmp(&b.shape)));
        self.statements = merged;
        self.prepared_before_attach_executions = self.prepared_before_attach_executions.saturating_sub(recovered);
        recovered
    }
}

/// A shape with a statement prepared before the capture given its recovered text (`texts`:
/// (connection's socket id, statement name) -> SQL), or merged by name with its connection
/// dropped when there is none; other shapes unchanged. True when a text was found.
pub(crate) fn resolved_shape(shape: &StatementShape, texts: &HashMap<(u64, String), String>) -> (StatementShape, bool) {
    match shape {
        StatementShape::PreparedBeforeAttach { name, connection } => match texts.get(&(*connection, name.clone())) {
            Some(text) => (StatementShape::Sql { text: super::sql::shape(text, false), truncated: false }, true),
            None => (StatementShape::PreparedBeforeAttach { name: name.clone(), connection: 0 }, false),
        },
        other => (other.clone(), false),
    }
}

/// Everything the wire decoders saw in one capture.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireSummary {
    /// HTTP requests and responses.
    pub http: HttpSummary,
    /// PostgreSQL round trips, statements, transactions.
    pub pg: PgSummary,
    /// The same figures over the capture's steady window ([`SteadyWindow`]), when it has one
    /// with at least [`STEADY_MIN_REQUESTS`] requests. Absent in profiles written before it
    /// existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady: Option<SteadyWindow>,
    /// The stretch under load ([`LoadWindow`]), whatever was set up in it: the throughput of a
    /// capture without a steady window (a service that sets up a database connection for
    /// every request has none). Absent with fewer than [`STEADY_MIN_REQUESTS`] requests in it,
    /// and in profiles written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadWindow>,
}

/// The stretch of a capture under load: its 100 ms buckets ([`BUCKET_NS`]) from the first
/// with an HTTP request to the last, both left out (a load generator starts and stops inside
/// them). A run that attached before the load or outlived it would otherwise read its idle
/// seconds as slowness, and its CPU use under load as lower than it was.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadWindow {
    /// Start of the window, ns after the capture's first decoded event.
    pub start_ns: u64,
    /// End of the window (exclusive), ns after the capture's first decoded event.
    pub end_ns: u64,
    /// HTTP request lines decoded in the window.
    pub http_requests: u64,
}

/// Width of the time buckets the steady window is cut from, ns (100 ms).
pub const BUCKET_NS: u64 = 100_000_000;
/// Most buckets kept (10 minutes); events later than that are in the totals only.
pub const MAX_BUCKETS: usize = 6000;
/// Buckets dropped at the start of the steady window (1 = 100 ms).
pub const STEADY_LEAD_BUCKETS: usize = 1;
/// Buckets dropped before the last bucket with an HTTP request (5 = 500 ms): a load generator
/// that stops closes its connections with requests in flight, whose database work is then
/// cancelled (an edge effect, not the app's per-request work).
pub const STEADY_TAIL_BUCKETS: usize = 5;
/// Fewest HTTP requests a steady window needs to be reported.
pub const STEADY_MIN_REQUESTS: u64 = 100;

/// The steady part of a capture: the longest stretch of 100 ms buckets ([`BUCKET_NS`]) in
/// which no database connection was set up (no start-up, no statement prepared), without its
/// first [`STEADY_LEAD_BUCKETS`] and without the last [`STEADY_TAIL_BUCKETS`] up to the last
/// HTTP request in it. Per-request database figures over this window are the app's
/// steady-state work per request: connection start-ups and the one-time preparation of each
/// statement on each connection (a driver's statement cache) are left out, and so are the
/// requests a stopping load generator abandoned. Events fall in the bucket of their start
/// (a round trip's first message, a request line, a transaction's first round trip).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SteadyWindow {
    /// Start of the window, ns after the capture's first decoded event.
    pub start_ns: u64,
    /// End of the window (exclusive), ns after the capture's first decoded event.
    pub end_ns: u64,
    /// HTTP request lines decoded in the window (the per-request denominator).
    pub http_requests: u64,
    /// Requests per endpoint in the window, most first.
    pub endpoints: Vec<(String, u64)>,
    /// PostgreSQL figures of the window (`connections`, `errors` and `decode` are left
    /// empty: they are capture-wide).
    pub pg: PgSummary,
    /// The sum over the window's [`BUCKET_NS`] buckets of the HTTP connections that sent a
    /// request in each ([`SteadyWindow::http_connections`] is its mean). `None` when more
    /// connections sent requests than [`MAX_TRACKED_CONNECTIONS`], and in summaries written
    /// before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_connection_buckets: Option<u64>,
}

impl SteadyWindow {
    /// HTTP connections active in the window, on average: per bucket of the window, the
    /// connections that sent a request in it. The clients of a closed loop count one each; a
    /// health check or a warm-up before or after the load counts nothing, one that sends a
    /// request now and then a little. Each connection serves one request at a time (HTTP/1.1
    /// without pipelining), so this bounds the requests in flight from above while requests
    /// take less than a bucket; a connection whose requests take longer sends none in some of
    /// the buckets it is busy in, and counts less than it should.
    pub fn http_connections(&self) -> Option<f64> {
        let buckets = self.end_ns.saturating_sub(self.start_ns) / BUCKET_NS;
        Some(self.http_connection_buckets? as f64 / buckets.max(1) as f64)
    }
}

/// Most HTTP connections [`SteadyWindow::http_connections`] tracks (12 bytes each).
pub const MAX_TRACKED_CONNECTIONS: usize = 65_536;

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

impl HttpSummary {
    /// Mean request-to-response time over every paired response, ns; `None` without any.
    pub fn latency_mean_ns(&self) -> Option<f64> {
        let paired: u64 = self.endpoints.iter().flat_map(|e| e.statuses.values()).sum();
        let total: u64 = self.endpoints.iter().map(|e| e.latency_total_ns).sum();
        (paired > 0).then(|| total as f64 / paired as f64)
    }
}

impl WireSummary {
    /// The HTTP requests per second of the steady window ([`WireSummary::steady`]), with its
    /// requests and its length (s); `None` without a window or without requests in it.
    pub fn steady_req_per_s(&self) -> Option<(f64, u64, f64)> {
        let st = self.steady.as_ref()?;
        let secs = st.end_ns.saturating_sub(st.start_ns) as f64 / 1e9;
        (secs > 0.0 && st.http_requests > 0).then(|| (st.http_requests as f64 / secs, st.http_requests, secs))
    }

    /// The HTTP requests per second under load: of the steady window when there is one, else
    /// of the [`LoadWindow`]. Returns `(req/s, requests, seconds, the window's name)`, the
    /// name `"steady window"` or `"load window"`; `None` without either.
    pub fn load_req_per_s(&self) -> Option<(f64, u64, f64, &'static str)> {
        if let Some((x, n, secs)) = self.steady_req_per_s() {
            return Some((x, n, secs, "steady window"));
        }
        let w = self.load.as_ref()?;
        let secs = w.end_ns.saturating_sub(w.start_ns) as f64 / 1e9;
        (secs > 0.0 && w.http_requests > 0).then(|| (w.http_requests as f64 / secs, w.http_requests, secs, "load window"))
    }

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

    /// Replaces the shapes of statements prepared before the capture by their recovered text
    /// (`texts`: (connection socket id, statement name) -> SQL text as PostgreSQL reports it,
    /// e.g. from `pg_stat_activity`; see [`super::resolve`]), in the totals and the steady
    /// window, and merges the figures of shapes that are then equal: one statement that
    /// pooled connections prepared under different names becomes one row. Names without a
    /// text are merged by name (their connection set to 0). Returns the executions whose
    /// text was recovered.
    pub fn apply_statement_texts(&mut self, texts: &HashMap<(u64, String), String>) -> u64 {
        let recovered = self.pg.apply_statement_texts(texts);
        if let Some(w) = &mut self.steady {
            w.pg.apply_statement_texts(texts);
        }
        recovered
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
    prepare_round_trips: u64,
    close_round_trips: u64,
    latency: u64,
}

impl StatementStats {
    /// Every round trip the statement took: those that executed it, and those that only
    /// prepared or only closed it.
    pub fn all_round_trips(&self) -> u64 {
        self.round_trips + self.prepare_round_trips + self.close_round_trips
    }
}

/// One [`BUCKET_NS`] bucket of the timeline.
#[derive(Debug, Default, Clone)]
struct Bucket {
    /// Connection start-ups and round trips that prepared a statement.
    setup: u64,
    http_requests: u64,
    /// HTTP connections that sent a request in the bucket.
    http_connections: u32,
    endpoints: Vec<(u32, u64)>,
    pg: PgSummary,
    /// (shape index, executions, round trips, answered round trips, latency ns).
    shapes: Vec<(u32, u64, u64, u64, u64)>,
}

/// Endpoint keys numbered in order of first sight, at most [`MAX_ENDPOINTS`] of them (later
/// ones share the id of [`OTHER_ENDPOINT`]).
#[derive(Debug, Default)]
pub(crate) struct EndpointIds {
    ids: super::FastMap<String, u32>,
    /// The keys, by id.
    pub(crate) names: Vec<String>,
}

impl EndpointIds {
    /// The id of `endpoint`; allocates only for a key not seen before.
    pub(crate) fn id(&mut self, endpoint: &str) -> u32 {
        if let Some(&id) = self.ids.get(endpoint) {
            return id;
        }
        let key = if self.names.len() >= MAX_ENDPOINTS { OTHER_ENDPOINT } else { endpoint };
        if let Some(&id) = self.ids.get(key) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(key.to_string());
        self.ids.insert(key.to_string(), id);
        id
    }
}

/// Per-bucket figures for the steady window, in bounded memory ([`MAX_BUCKETS`]).
#[derive(Debug, Default)]
struct Timeline {
    origin: Option<u64>,
    buckets: Vec<Bucket>,
    shape_ids: super::FastMap<StatementShape, u32>,
    shapes: Vec<StatementShape>,
    endpoints: EndpointIds,
    /// Per HTTP socket: the bucket of its last request.
    connections: super::FastMap<u64, u32>,
    /// More than [`MAX_TRACKED_CONNECTIONS`] sockets sent a request.
    connections_overflow: bool,
}

impl Timeline {
    /// The bucket of an event at `ts_ns`; `None` beyond [`MAX_BUCKETS`].
    fn at(&mut self, ts_ns: u64) -> Option<&mut Bucket> {
        let origin = *self.origin.get_or_insert(ts_ns);
        let i = (ts_ns.saturating_sub(origin) / BUCKET_NS) as usize;
        if i >= MAX_BUCKETS {
            return None;
        }
        if self.buckets.len() <= i {
            self.buckets.resize(i + 1, Bucket::default());
        }
        Some(&mut self.buckets[i])
    }

    fn shape_id(&mut self, s: &StatementShape) -> Option<u32> {
        if let Some(&id) = self.shape_ids.get(s) {
            return Some(id);
        }
        if self.shapes.len() >= MAX_SHAPES {
            return None;
        }
        let id = self.shapes.len() as u32;
        self.shapes.push(s.clone());
        self.shape_ids.insert(s.clone(), id);
        Some(id)
    }

    /// A request line (`endpoint` is its [`HttpRequest::endpoint`] key) on `socket` at `ts_ns`.
    fn add_request(&mut self, endpoint: &str, socket: u64, ts_ns: u64) {
        let id = self.endpoints.id(endpoint);
        let origin = *self.origin.get_or_insert(ts_ns);
        let i = (ts_ns.saturating_sub(origin) / BUCKET_NS).min(u32::MAX as u64) as u32;
        // Whether this is the connection's first request in bucket `i` (its requests come in
        // order).
        let tracked = self.connections.len();
        let first_in_bucket = match self.connections.entry(socket) {
            std::collections::hash_map::Entry::Occupied(mut last) => last.insert(i) != i,
            std::collections::hash_map::Entry::Vacant(v) if tracked < MAX_TRACKED_CONNECTIONS => {
                v.insert(i);
                true
            }
            std::collections::hash_map::Entry::Vacant(_) => {
                self.connections_overflow = true;
                false
            }
        };
        if let Some(b) = self.at(ts_ns) {
            b.http_requests += 1;
            b.http_connections += u32::from(first_in_bucket);
            match b.endpoints.iter_mut().find(|x| x.0 == id) {
                Some(x) => x.1 += 1,
                None => b.endpoints.push((id, 1)),
            }
        }
    }

    fn add_pg(&mut self, e: &PgEvent) {
        match e {
            PgEvent::Connected { ts_ns, .. } => {
                if let Some(b) = self.at(*ts_ns) {
                    b.setup += 1;
                }
            }
            PgEvent::RoundTrip(rt) => {
                let ids: Vec<Option<u32>> = rt.statements.iter().map(|s| self.shape_id(s)).collect();
                let Some(b) = self.at(rt.start_ns) else { return };
                if !rt.prepared.is_empty() {
                    b.setup += 1;
                }
                let mut one = SummaryBuilder::default();
                one.pg = std::mem::take(&mut b.pg);
                one.add_round_trip_totals(rt);
                b.pg = one.pg;
                let latency = rt.latency_ns();
                let mut seen: Vec<u32> = Vec::new();
                for id in ids.into_iter().flatten() {
                    let first = !seen.contains(&id);
                    if first {
                        seen.push(id);
                    }
                    let i = match b.shapes.iter().position(|x| x.0 == id) {
                        Some(i) => i,
                        None => {
                            b.shapes.push((id, 0, 0, 0, 0));
                            b.shapes.len() - 1
                        }
                    };
                    let acc = &mut b.shapes[i];
                    acc.1 += 1;
                    if first {
                        acc.2 += 1;
                        if let Some(l) = latency {
                            acc.3 += 1;
                            acc.4 += l;
                        }
                    }
                }
            }
            PgEvent::Transaction(t) if t.outcome != TransactionOutcome::Open => {
                if let Some(b) = self.at(t.start_ns) {
                    b.pg.transactions.add_ended(t);
                }
            }
            _ => {}
        }
    }

    /// The load window (see [`LoadWindow`]), or `None` when it holds fewer than
    /// [`STEADY_MIN_REQUESTS`] requests.
    fn load(&self) -> Option<LoadWindow> {
        let first = self.buckets.iter().position(|b| b.http_requests > 0)?;
        let last = self.buckets.iter().rposition(|b| b.http_requests > 0)?;
        let (a, end) = (first + 1, last);
        if end <= a {
            return None;
        }
        let requests: u64 = self.buckets[a..end].iter().map(|b| b.http_requests).sum();
        (requests >= STEADY_MIN_REQUESTS).then(|| LoadWindow { start_ns: a as u64 * BUCKET_NS, end_ns: end as u64 * BUCKET_NS, http_requests: requests })
    }

    /// The steady window (see [`SteadyWindow`]), or `None` when no stretch holds
    /// [`STEADY_MIN_REQUESTS`] requests.
    fn steady(&self) -> Option<SteadyWindow> {
        // The longest run of buckets without set-up.
        let (mut best, mut start) = ((0usize, 0usize), None::<usize>);
        for i in 0..=self.buckets.len() {
            let clean = self.buckets.get(i).is_some_and(|b| b.setup == 0);
            match (clean, start) {
                (true, None) => start = Some(i),
                (false, Some(a)) => {
                    if i - a > best.1 - best.0 {
                        best = (a, i);
                    }
                    start = None;
                }
                _ => {}
            }
        }
        let (a, b) = best;
        let a = a + STEADY_LEAD_BUCKETS;
        let last_request = (a..b).rev().find(|&i| self.buckets[i].http_requests > 0)?;
        let end = last_request.checked_sub(STEADY_TAIL_BUCKETS)?;
        if end <= a {
            return None;
        }
        let mut pg = PgSummary::default();
        let mut requests = 0;
        let mut endpoints: HashMap<u32, u64> = HashMap::new();
        let mut shapes: HashMap<u32, ShapeAcc> = HashMap::new();
        for bk in &self.buckets[a..end] {
            requests += bk.http_requests;
            for &(id, n) in &bk.endpoints {
                *endpoints.entry(id).or_default() += n;
            }
            let p = &bk.pg;
            pg.round_trips += p.round_trips;
            pg.round_trips_answered += p.round_trips_answered;
            pg.round_trip_latency_total_ns += p.round_trip_latency_total_ns;
            pg.by_kind.execute += p.by_kind.execute;
            pg.by_kind.prepare += p.by_kind.prepare;
            pg.by_kind.ping += p.by_kind.ping;
            pg.by_kind.other += p.by_kind.other;
            pg.ping_latency_total_ns += p.ping_latency_total_ns;
            pg.pings_after_ping += p.pings_after_ping;
            pg.pings_after_ping_not_counted |= p.pings_after_ping_not_counted;
            pg.pings_after_ping_latency_total_ns += p.pings_after_ping_latency_total_ns;
            pg.statement_executions += p.statement_executions;
            pg.prepared_before_attach_executions += p.prepared_before_attach_executions;
            let (t, u) = (&mut pg.transactions, &p.transactions);
            t.ended += u.ended;
            t.committed += u.committed;
            t.rolled_back += u.rolled_back;
            t.unknown += u.unknown;
            t.started_before_attach += u.started_before_attach;
            t.round_trips += u.round_trips;
            t.duration_total_ns += u.duration_total_ns;
            for &(id, ex, rts, ans, lat) in &bk.shapes {
                let acc = shapes.entry(id).or_default();
                acc.executions += ex;
                acc.round_trips += rts;
                acc.answered += ans;
                acc.latency += lat;
            }
        }
        if requests < STEADY_MIN_REQUESTS {
            return None;
        }
        pg.pings = pg.by_kind.ping;
        pg.round_trip_latency_mean_ns = pg.round_trip_latency_total_ns.checked_div(pg.round_trips_answered).unwrap_or(0);
        let mut statements: Vec<StatementStats> = shapes
            .into_iter()
            .map(|(id, a)| StatementStats {
                shape: self.shapes[id as usize].clone(),
                executions: a.executions,
                round_trips: a.round_trips,
                prepares: 0,
                prepare_round_trips: 0,
                close_round_trips: 0,
                latency_total_ns: a.latency,
                latency_mean_ns: a.latency.checked_div(a.answered).unwrap_or(0),
            })
            .collect();
        statements.sort_by(|x, y| y.executions.cmp(&x.executions).then_with(|| x.shape.cmp(&y.shape)));
        pg.statements = statements;
        let mut endpoints: Vec<(String, u64)> =
            endpoints.into_iter().map(|(id, n)| (self.endpoints.names[id as usize].clone(), n)).collect();
        endpoints.sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
        let http_connection_buckets = (!self.connections_overflow).then(|| self.buckets[a..end].iter().map(|b| u64::from(b.http_connections)).sum());
        Some(SteadyWindow { start_ns: a as u64 * BUCKET_NS, end_ns: end as u64 * BUCKET_NS, http_requests: requests, endpoints, pg, http_connection_buckets })
    }
}

/// Folds events into a [`WireSummary`] in bounded memory.
#[derive(Debug, Default)]
pub(crate) struct SummaryBuilder {
    endpoints: super::FastMap<String, EndpointAcc>,
    http_requests: u64,
    http_responses: u64,
    shapes: super::FastMap<StatementShape, ShapeAcc>,
    pg: PgSummary,
    timeline: Option<Box<Timeline>>,
    /// The requests over time, each from its request line to its response.
    spread: super::spread::RequestSpread,
    /// Kind of the last round trip per connection (socket id), for
    /// [`PgSummary::pings_after_ping`].
    last_kind: super::FastMap<u64, RoundTripKind>,
    /// Reused buffer for endpoint keys.
    key: String,
}

impl SummaryBuilder {
    fn endpoint(&mut self, key: &str) -> &mut EndpointAcc {
        // A known endpoint: one lookup, no allocation of its key.
        if self.endpoints.contains_key(key) {
            return self.endpoints.get_mut(key).expect("present");
        }
        let key = if self.endpoints.len() < MAX_ENDPOINTS { key } else { OTHER_ENDPOINT };
        self.endpoints.entry(key.to_string()).or_default()
    }

    pub(crate) fn add_http(&mut self, e: &HttpEvent) {
        match e {
            HttpEvent::Request(r) => {
                // The endpoint key `METHOD target`, built in a reused buffer.
                let mut key = std::mem::take(&mut self.key);
                key.clear();
                key.push_str(&r.method);
                key.push(' ');
                key.push_str(&r.target);
                self.timeline.get_or_insert_with(Box::default).add_request(&key, r.socket, r.ts_ns);
                self.spread.request(r.ts_ns);
                self.http_requests += 1;
                self.endpoint(&key).requests += 1;
                self.key = key;
            }
            HttpEvent::Response(r) => {
                self.http_responses += 1;
                if let (Some(_), Some(latency)) = (&r.endpoint, r.latency_ns) {
                    self.spread.answered(r.ts_ns.saturating_sub(latency), r.ts_ns);
                }
                if let Some(ep) = &r.endpoint {
                    let key = if self.endpoints.contains_key(ep.as_str()) { ep.as_str() } else { OTHER_ENDPOINT };
                    let acc = self.endpoint(key);
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

    /// Round-trip totals of [`PgSummary`] (count, latency, kind, errors, executions); not
    /// the per-shape figures.
    fn add_round_trip_totals(&mut self, rt: &super::pg::RoundTrip) {
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
        for s in &rt.statements {
            self.pg.statement_executions += 1;
            if matches!(s, StatementShape::PreparedBeforeAttach { .. }) {
                self.pg.prepared_before_attach_executions += 1;
            }
        }
    }

    pub(crate) fn add_pg(&mut self, e: &PgEvent) {
        let after_ping = match e {
            PgEvent::RoundTrip(rt) => {
                let prev = self.last_kind.insert(rt.socket, rt.kind);
                rt.kind == RoundTripKind::Ping && prev == Some(RoundTripKind::Ping)
            }
            PgEvent::Terminated { socket, .. } | PgEvent::Encrypted { socket, .. } => {
                self.last_kind.remove(socket);
                false
            }
            _ => false,
        };
        if let PgEvent::RoundTrip(rt) = e {
            if after_ping {
                let l = rt.latency_ns().unwrap_or(0);
                self.pg.pings_after_ping += 1;
                self.pg.pings_after_ping_latency_total_ns += l;
                let tl = self.timeline.get_or_insert_with(Box::default);
                if let Some(b) = tl.at(rt.start_ns) {
                    b.pg.pings_after_ping += 1;
                    b.pg.pings_after_ping_latency_total_ns += l;
                }
            }
        }
        self.timeline.get_or_insert_with(Box::default).add_pg(e);
        match e {
            PgEvent::Connected { setup_ns, .. } => {
                self.pg.connections += 1;
                if let Some(ns) = setup_ns {
                    self.pg.connections_timed += 1;
                    self.pg.connection_setup_total_ns += ns;
                }
            }
            PgEvent::Encrypted { .. } | PgEvent::Terminated { .. } => {}
            PgEvent::RoundTrip(rt) => {
                let latency = rt.latency_ns();
                self.add_round_trip_totals(rt);
                let mut seen: Vec<&StatementShape> = Vec::new();
                for s in &rt.statements {
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
                // A round trip that only prepared, or only closed, counts once for each
                // statement it did so for.
                let only = match rt.kind {
                    RoundTripKind::Prepare => Some((&rt.prepared, false)),
                    RoundTripKind::Other if !rt.closed.is_empty() => Some((&rt.closed, true)),
                    _ => None,
                };
                if let Some((shapes, close)) = only {
                    let mut seen: Vec<&StatementShape> = Vec::new();
                    for s in shapes {
                        if seen.contains(&s) {
                            continue;
                        }
                        seen.push(s);
                        if let Some(acc) = self.shape(s) {
                            if close {
                                acc.close_round_trips += 1;
                            } else {
                                acc.prepare_round_trips += 1;
                            }
                        }
                    }
                }
            }
            PgEvent::Transaction(t) => {
                let ts = &mut self.pg.transactions;
                if t.outcome == TransactionOutcome::Open {
                    ts.open += 1;
                    return;
                }
                ts.add_ended(t);
            }
        }
    }

    /// [`SummaryBuilder::spread`], emptied.
    pub(crate) fn take_request_spread(&mut self) -> super::spread::RequestSpread {
        std::mem::take(&mut self.spread)
    }

    pub(crate) fn build(&self, pg: PgDecodeStats, http: HttpDecodeStats) -> WireSummary {
        let keys: Vec<&str> = self.endpoints.keys().map(String::as_str).collect();
        let template = collapse_varying_segments(&keys);
        let name = |k: &str| template.get(k).cloned().unwrap_or_else(|| k.to_string());
        let mut merged: HashMap<String, (EndpointAcc, u64)> = HashMap::new();
        for (k, a) in &self.endpoints {
            let e = &mut merged.entry(name(k)).or_default().0;
            e.requests += a.requests;
            for (st, n) in &a.statuses {
                *e.statuses.entry(*st).or_default() += n;
            }
            e.paired += a.paired;
            e.latency += a.latency;
        }
        let mut endpoints: Vec<EndpointStats> = merged
            .into_iter()
            .map(|(k, (a, _))| EndpointStats {
                endpoint: k,
                requests: a.requests,
                statuses: a.statuses,
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
                prepare_round_trips: a.prepare_round_trips,
                close_round_trips: a.close_round_trips,
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
        let mut steady = self.timeline.as_ref().and_then(|t| t.steady());
        if let Some(w) = steady.as_mut() {
            let mut by: BTreeMap<String, u64> = BTreeMap::new();
            for (k, n) in std::mem::take(&mut w.endpoints) {
                *by.entry(name(&k)).or_default() += n;
            }
            w.endpoints = by.into_iter().collect();
            w.endpoints.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        }
        WireSummary {
            http: HttpSummary { requests: self.http_requests, responses: self.http_responses, endpoints, decode: http },
            pg: pgs,
            steady,
            load: self.timeline.as_ref().and_then(|t| t.load()),
        }
    }
}

/// Fewest distinct data-like values (a digit, `-`, `_`, `.`, `%`, `@` or `~` in them: slugs,
/// names with a number, e-mail addresses) a path segment must take, among endpoints equal
/// everywhere else, to become `{param}` ([`collapse_varying_segments`]).
pub const COLLAPSE_MIN_VALUES: usize = 10;
/// Distinct values from which every value of the segment becomes `{param}`, data-like or not
/// (usernames of letters only).
pub const COLLAPSE_ALL_VALUES: usize = 50;

/// Whether a path segment looks like data rather than a route name: see [`COLLAPSE_MIN_VALUES`].
fn data_like(seg: &str) -> bool {
    seg.bytes().any(|b| b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.' | b'%' | b'@' | b'~'))
}

/// Route templates for path segments that vary: endpoint keys (`METHOD /a/b?q`) that agree on
/// the method, the query keys and every path segment but one, where that one takes at least
/// [`COLLAPSE_MIN_VALUES`] data-like values (or [`COLLAPSE_ALL_VALUES`] values of any kind),
/// map to the key with that segment as `{param}` (slugs, names: what
/// [`super::http::template_target`] cannot tell from one request); route names beside them
/// (`/articles/feed`) stay. The first segment is never collapsed. Positions are collapsed from
/// the last segment to the first, so `/a/{param}/b/{param}` can result. A key whose target
/// the capture bound cut (it ends with `…`, [`super::http::template_target`]) then maps to the
/// one other key it is a prefix of, when there is exactly one (`GET /case/…` beside
/// `GET /case/n-plus-one` alone).
/// Returns only the keys that change.
pub fn collapse_varying_segments(keys: &[&str]) -> HashMap<String, String> {
    // (method, segments, query) per key; the templated form is rewritten in place.
    let mut parts: Vec<(String, Vec<String>, String)> = keys
        .iter()
        .map(|k| {
            let (method, target) = k.split_once(' ').unwrap_or(("", k));
            let (path, query) = match target.split_once('?') {
                Some((p, q)) => (p, format!("?{q}")),
                None => (target, String::new()),
            };
            (method.to_string(), path.split('/').map(str::to_string).collect(), query)
        })
        .collect();
    let longest = parts.iter().map(|p| p.1.len()).max().unwrap_or(0);
    for pos in (2..longest).rev() {
        // Group by everything but the segment at `pos`.
        let mut groups: HashMap<(String, Vec<String>, String, usize), Vec<usize>> = HashMap::new();
        for (i, (m, segs, q)) in parts.iter().enumerate() {
            if segs.len() <= pos || segs[pos].is_empty() || segs[pos].starts_with('{') {
                continue;
            }
            let mut rest = segs.clone();
            rest[pos].clear();
            groups.entry((m.clone(), rest, q.clone(), segs.len())).or_default().push(i);
        }
        for members in groups.into_values() {
            let distinct: std::collections::HashSet<&str> = members.iter().map(|&i| parts[i].1[pos].as_str()).collect();
            let data: Vec<usize> = members.iter().copied().filter(|&i| data_like(&parts[i].1[pos])).collect();
            let data_distinct: std::collections::HashSet<&str> = data.iter().map(|&i| parts[i].1[pos].as_str()).collect();
            let chosen = if distinct.len() >= COLLAPSE_ALL_VALUES {
                members
            } else if data_distinct.len() >= COLLAPSE_MIN_VALUES {
                data
            } else {
                continue;
            };
            for i in chosen {
                parts[i].1[pos] = "{param}".to_string();
            }
        }
    }
    let mut finals: Vec<String> =
        parts.into_iter().map(|(m, segs, q)| if m.is_empty() { format!("{}{q}", segs.join("/")) } else { format!("{m} {}{q}", segs.join("/")) }).collect();
    let mut whole: Vec<String> = finals.iter().filter(|f| !f.ends_with('…')).cloned().collect();
    whole.sort_unstable();
    whole.dedup();
    for f in finals.iter_mut() {
        let Some(prefix) = f.strip_suffix('…') else { continue };
        let mut candidates = whole.iter().filter(|w| w.starts_with(prefix));
        if let (Some(one), None) = (candidates.next(), candidates.next()) {
            *f = one.clone();
        }
    }
    keys.iter().zip(finals).filter_map(|(k, t)| (t != *k).then(|| (k.to_string(), t))).collect()
}

#[cfg(test)]
mod collapse_tests {
    use super::*;

    #[test]
    fn slugs_become_a_parameter_and_fixed_routes_stay() {
        let mut keys: Vec<String> = (0..12).map(|i| format!("GET /api/articles/how-to-train-dragon-{i}")).collect();
        keys.extend((0..12).map(|i| format!("GET /api/articles/slug-{i}/comments")));
        keys.push("GET /api/articles/feed".into());
        keys.push("GET /api/tags".into());
        keys.push("POST /api/articles/slug-1/favorite".into());
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let m = collapse_varying_segments(&refs);
        assert_eq!(m["GET /api/articles/how-to-train-dragon-3"], "GET /api/articles/{param}");
        // A route name beside the slugs stays.
        assert!(!m.contains_key("GET /api/articles/feed"));
        assert_eq!(m["GET /api/articles/slug-7/comments"], "GET /api/articles/{param}/comments");
        assert!(!m.contains_key("GET /api/tags"));
        assert!(!m.contains_key("POST /api/articles/slug-1/favorite"), "one value is not a parameter");
    }

    #[test]
    fn few_values_stay_apart() {
        let keys = ["GET /db", "GET /json", "GET /queries?queries", "GET /api/deals/{id}", "POST /api/deals"];
        assert!(collapse_varying_segments(&keys).is_empty());
        // Twelve resources under /api are route names, not a parameter; neither are top-level routes.
        let names = ["users", "orders", "items", "carts", "tags", "reviews", "stores", "coupons", "invoices", "refunds", "teams", "roles"];
        let keys: Vec<String> = names.iter().map(|n| format!("GET /api/{n}")).chain(names.iter().map(|n| format!("GET /{n}-v2"))).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        assert!(collapse_varying_segments(&refs).is_empty());
        // Fifty usernames of letters only are.
        let keys: Vec<String> = (0..50u8).map(|i| format!("GET /profiles/user{}", (b'a' + i % 26) as char).repeat(1) + &"x".repeat(usize::from(i / 26) + 1)).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        assert_eq!(collapse_varying_segments(&refs).len(), 50);
    }

    /// A key cut by the capture bound joins the one key it is a prefix of; with two, it stays.
    #[test]
    fn cut_keys_join_the_one_key_they_begin() {
        let m = collapse_varying_segments(&["GET /case/n-plus-one", "GET /case/…", "POST /case/…"]);
        assert_eq!(m.len(), 1);
        assert_eq!(m["GET /case/…"], "GET /case/n-plus-one");
        let m = collapse_varying_segments(&["GET /case/a", "GET /case/b", "GET /case/…"]);
        assert!(m.is_empty(), "{m:?}");
    }
}
