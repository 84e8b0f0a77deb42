//! Which HTTP request each thread of the target is serving, and which request each
//! PostgreSQL round trip was made for, from the order of the target's socket calls: what joins
//! on-CPU samples (thread, time) and the wire's database traffic to the endpoints of the wire
//! capture.
//!
//! The evidence is the thread and the time of every captured send and receive
//! ([`super::Chunk::tid`], [`super::Chunk::ts_ns`], the clock of the samplers'
//! `bpf_ktime_get_ns`). One task's socket calls cannot be told from another's on the same
//! worker: a task that waits (for the pool, a lock, a timer) gives the worker to another task
//! without a socket call. Two calls are taken for the same request only where, on one thread,
//! a task that has just read cannot have waited before its next call:
//!
//! - a query's answer followed by the response (the handler's last answer, then its response:
//!   one poll of an async connection task, or a thread per request);
//! - a query's answer on a connection followed by a send on the same connection (the task still
//!   holds it: the next statement of the checkout, or the pool's ping on release). After a
//!   ping's answer the next send on the connection may be another task's (a pool hands the
//!   connection it just pinged to a waiting task), so that one does not count, nor does a
//!   request head followed by a send, nor an answer followed by a send on another connection
//!   (the task may have waited for the pool in between).
//!
//! Each round trip is a node, each request another; those links join them (union-find;
//! two requests are never joined into one set), and a round trip counts for the request of
//! its set. The work of sets joined to no request (a checkout that was not its request's
//! last, a background job's queries) is then split among the endpoints as the joined work of
//! the same kind splits: each statement shape's executions as that shape's joined executions,
//! other round trips as all joined ones, a ping with the next statement on its connection (the
//! checkout it prepares, or, for a ping on release, the next checkout: one per checkout either
//! way). A shape nothing joined goes to the one endpoint with joined work when there is one (a
//! load of one endpoint), else stays with no request ([`Serving::db_unattributed`]).
//! [`DbCounts::estimated_round_trips`] says how much of an endpoint's work was split to it.
//!
//! For on-CPU samples, a thread serves the request of its last socket call (an HTTP socket's
//! current request, or the request the set of the database round trip it sent or read was
//! joined or split to; with neither, its previous request) until its next socket call. Samples of a
//! thread that has made no socket call yet (a blocking pool's thread, a background task's) are
//! unattributed. Where requests of several endpoints interleave on one worker (an async
//! runtime polling many connections), the CPU between two socket calls goes to the earlier
//! one's request: exact for a thread per request and for a load of one endpoint, an
//! approximation otherwise.

use std::collections::HashMap;

use foldhash::fast::RandomState;

use super::pg::{RoundTrip, RoundTripKind, StatementShape, TransactionStatus};
use super::summary::{collapse_varying_segments, resolved_shape, EndpointIds};
use super::{Chunk, Direction, Protocol};

/// Most thread-state changes kept (12 bytes each, about 48 MB); samples after the last one
/// kept are [`Served::NotRecorded`].
pub const MAX_CHANGES: usize = 4_000_000;

/// Most round trips, and requests a round trip joined, in the join (8 bytes each, 32 MB);
/// later ones join nothing.
pub const MAX_NODES: usize = 4_000_000;

/// Most round trips recorded for the join (40 bytes each, about 80 MB); later ones count for
/// no request.
pub const MAX_ROUND_TRIPS: usize = 2_000_000;

/// A thread-state label that names a join node (its index ORed with this bit), not an endpoint.
const NODE: u32 = 1 << 31;
/// No request: a node's owner before (or without) being joined to one.
const NO_REQUEST: u32 = u32::MAX;

/// Database work of an endpoint (or of none), statements by interned shape.
#[derive(Debug, Default)]
struct DbAcc {
    round_trips: u64,
    answered: u64,
    latency_total_ns: u64,
    pings: u64,
    statements: HashMap<u32, u64, RandomState>,
    /// Of `round_trips`, those split to it from the round trips joined to no request.
    estimated_round_trips: u64,
    idle_in_transaction_ns: u64,
    held_idle_ns: u64,
    connection_setups: u64,
    connection_setup_ns: u64,
}

impl DbAcc {
    fn add(&mut self, r: &RtRec, shapes: &[u32]) {
        self.round_trips += 1;
        self.idle_in_transaction_ns += r.idle_in_transaction_ns;
        self.held_idle_ns += r.held_idle_ns;
        if r.answered {
            self.answered += 1;
            self.latency_total_ns += r.latency_ns;
        }
        if r.ping {
            self.pings += 1;
        }
        for &s in &shapes[r.start as usize..r.start as usize + r.len as usize] {
            *self.statements.entry(s).or_default() += 1;
        }
    }

    fn counts(&self, shapes: &[StatementShape]) -> DbCounts {
        let mut statements: Vec<EndpointStatement> =
            self.statements.iter().map(|(&k, &n)| EndpointStatement { shape: shapes[k as usize].clone(), executions: n }).collect();
        statements.sort_by(|a, b| b.executions.cmp(&a.executions).then_with(|| a.shape.cmp(&b.shape)));
        DbCounts {
            round_trips: self.round_trips,
            answered: self.answered,
            latency_total_ns: self.latency_total_ns,
            pings: self.pings,
            statements,
            estimated_round_trips: self.estimated_round_trips,
            idle_in_transaction_ns: self.idle_in_transaction_ns,
            held_idle_ns: self.held_idle_ns,
            connection_setups: self.connection_setups,
            connection_setup_ns: self.connection_setup_ns,
        }
    }
}

/// One decoded round trip, kept until the join is resolved.
#[derive(Debug, Clone, Copy)]
struct RtRec {
    node: u32,
    /// Its connection ([`PgConn::index`]).
    conn: u32,
    /// Its statements: `shape_list[start..start + len]`.
    start: u32,
    len: u16,
    ping: bool,
    answered: bool,
    latency_ns: u64,
    /// Time its connection sat idle inside a transaction before it: from the answer of the
    /// previous round trip, whose ReadyForQuery said "in a transaction" (`T` or `E`), to its
    /// first message, ns; 0 outside a transaction.
    idle_in_transaction_ns: u64,
    /// Time its connection stayed checked out of the pool after its answer with nothing sent,
    /// outside a transaction, ns (see [`DbCounts::held_idle_ns`]); set when the connection's
    /// next round trip is decoded, kept only for connections whose pool pings before a
    /// checkout and on release.
    held_idle_ns: u64,
}

/// What a thread's last socket call leaves for its next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Last {
    /// Read the end of a round trip's answer.
    Answer {
        /// The round trip's node.
        node: u32,
        /// Its connection.
        socket: u64,
        /// It was a ping.
        ping: bool,
    },
    /// Anything else.
    Other,
}

/// PostgreSQL's Terminate message alone in a send: `X`, length 4.
fn is_terminate(chunk: &Chunk) -> bool {
    chunk.total_len == 5 && chunk.head.as_slice() == [b'X', 0, 0, 0, 4]
}

/// A PostgreSQL connection's state.
#[derive(Debug, Default)]
struct PgConn {
    /// Its number, in the order connections were first seen.
    index: u32,
    /// Node of the round trip being sent or answered, from its first send.
    open: Option<u32>,
    /// Node of its last round trip.
    last: Option<u32>,
    /// When the answer of its last round trip left it inside a transaction (ReadyForQuery `T`
    /// or `E`), ns; `None` outside one, or when that answer was not decoded.
    in_transaction_since: Option<u64>,
    /// Its start-up's time, ns, until its first round trip takes it.
    setup_ns: Option<u64>,
    /// Its last answered round trip.
    previous: Option<Previous>,
}

/// A connection's last answered round trip, for the gap before its next one.
#[derive(Debug, Clone, Copy)]
struct Previous {
    /// Its index in `round_trips`, when recorded.
    rec: Option<usize>,
    /// The end of its answer, ns.
    end_ns: u64,
    ping: bool,
    /// A ping that followed a ping: on a connection whose pool pings on release and before
    /// each checkout, the one before a checkout (the checkout begins at its answer).
    checkout_ping: bool,
    /// Its answer left the connection outside a transaction (ReadyForQuery `I`).
    outside: bool,
}

/// Union-find over requests and round trips (see the module doc).
#[derive(Debug, Default)]
struct Join {
    parent: Vec<u32>,
    /// Endpoint of a request node; [`NO_REQUEST`] for a round trip's. Meaningful at roots.
    owner: Vec<u32>,
}

impl Join {
    fn add(&mut self, owner: u32) -> Option<u32> {
        if self.parent.len() >= MAX_NODES {
            return None;
        }
        let id = self.parent.len() as u32;
        self.parent.push(id);
        self.owner.push(owner);
        Some(id)
    }

    fn find(&mut self, mut x: u32) -> u32 {
        while self.parent[x as usize] != x {
            let grand = self.parent[self.parent[x as usize] as usize];
            self.parent[x as usize] = grand;
            x = grand;
        }
        x
    }

    /// Joins the sets of `a` and `b` unless both already belong to a request.
    fn union(&mut self, a: u32, b: u32) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra == rb {
            return;
        }
        let (oa, ob) = (self.owner[ra as usize], self.owner[rb as usize]);
        match (oa != NO_REQUEST, ob != NO_REQUEST) {
            (true, true) => {}
            (true, false) => self.parent[rb as usize] = ra,
            _ => self.parent[ra as usize] = rb,
        }
    }

}

/// Builds the per-thread serving timeline and the join of round trips to requests while
/// chunks are decoded (see the module doc).
#[derive(Debug, Default)]
pub struct ServingTimeline {
    endpoints: EndpointIds,
    /// Reused buffer for endpoint keys.
    key: String,
    /// HTTP socket -> its current request (endpoint id, and its node once a round trip joined
    /// it).
    http_current: HashMap<u64, (u32, Option<u32>), RandomState>,
    /// PostgreSQL socket -> its state.
    pg: HashMap<u64, PgConn, RandomState>,
    /// Connections seen so far.
    connections: u32,
    /// Thread -> what its last socket call leaves for the next.
    last: HashMap<u32, Last, RandomState>,
    /// The chunk being decoded, when it is a PostgreSQL receive: (thread, socket).
    receiving: Option<(u32, u64)>,
    /// Thread -> (time, label) at each change, in time order per thread; a label is an
    /// endpoint id or a node ([`NODE`]).
    threads: HashMap<u32, Vec<(u64, u32)>, RandomState>,
    changes: usize,
    /// Time after which changes were no longer kept ([`MAX_CHANGES`]).
    full_at: Option<u64>,
    join: Join,
    round_trips: Vec<RtRec>,
    /// Connection set-ups, each with the index in `round_trips` of its connection's first
    /// round trip (whose node holds the start-up's chunks), and its time, ns.
    setups: Vec<(u32, u64)>,
    shape_list: Vec<u32>,
    /// Round trips past [`MAX_ROUND_TRIPS`] or [`MAX_NODES`]: counted for no request.
    overflow: DbAcc,
    /// Statement shapes seen, interned.
    shape_ids: HashMap<StatementShape, u32, RandomState>,
    shapes: Vec<StatementShape>,
    /// Per connection index: a ping followed by a ping with no statement between was seen on
    /// it (its pool pings on release and before a checkout: the checkouts are delimited).
    delimited: Vec<bool>,
}

impl ServingTimeline {
    /// The id of `METHOD target`, looked up without allocating when seen before.
    fn endpoint_id(&mut self, method: &str, target: &str) -> u32 {
        let mut key = std::mem::take(&mut self.key);
        key.clear();
        key.push_str(method);
        key.push(' ');
        key.push_str(target);
        let id = self.endpoints.id(&key);
        self.key = key;
        id
    }

    /// One decoded chunk; `request` is the method and templated target of the last request
    /// line the chunk held, if any (the parts of [`super::http::HttpRequest::endpoint`]).
    pub fn observe(&mut self, chunk: &Chunk, request: Option<(&str, &str)>) {
        self.receiving = None;
        let tid = chunk.tid;
        let last = self.last.get(&tid).copied().unwrap_or(Last::Other);
        let label = match chunk.protocol {
            Protocol::Http => {
                if let Some((method, target)) = request {
                    let id = self.endpoint_id(method, target);
                    self.http_current.insert(chunk.socket, (id, None));
                }
                let current = self.http_current.get_mut(&chunk.socket);
                let endpoint = current.as_ref().map(|c| c.0);
                if let (Direction::Tx, Last::Answer { node, .. }, Some(c)) = (chunk.direction, last, current) {
                    // The request's node, made when a round trip first joins it.
                    if c.1.is_none() {
                        c.1 = self.join.add(c.0);
                    }
                    if let Some(r) = c.1 {
                        self.join.union(node, r);
                    }
                }
                self.last.insert(tid, Last::Other);
                endpoint
            }
            // A Terminate (the client closing its connection, e.g. one opened for this
            // request) begins no round trip and leaves the thread as it was: the answer read
            // before it may still be followed by its request's response.
            Protocol::Postgres if chunk.direction == Direction::Tx && is_terminate(chunk) => return,
            Protocol::Postgres => {
                let conn = Self::conn(&mut self.pg, &mut self.connections, chunk.socket);
                let node = match conn.open {
                    Some(n) => Some(n),
                    None => {
                        let n = self.join.add(NO_REQUEST);
                        conn.open = n;
                        n
                    }
                };
                if chunk.direction == Direction::Tx {
                    if let Some(node) = node {
                        if let Last::Answer { node: n, socket, ping: false } = last {
                            if socket == chunk.socket && n != node {
                                self.join.union(n, node);
                            }
                        }
                    }
                } else {
                    self.receiving = Some((tid, chunk.socket));
                }
                self.last.insert(tid, Last::Other);
                node.map(|n| n | NODE)
            }
        };
        if let Some(l) = label {
            self.set(tid, chunk.ts_ns, l);
        }
    }

    /// The state of PostgreSQL connection `socket`, created when first seen.
    fn conn<'a>(pg: &'a mut HashMap<u64, PgConn, RandomState>, connections: &mut u32, socket: u64) -> &'a mut PgConn {
        let next = *connections;
        let c = pg.entry(socket).or_insert_with(|| PgConn { index: next, ..PgConn::default() });
        if c.index == next {
            *connections += 1;
        }
        c
    }

    /// A PostgreSQL connection completed its start-up in `setup_ns`
    /// ([`super::pg::PgEvent::Connected`]): the time counts for the request of its first round
    /// trip, whose node holds the start-up's chunks.
    pub fn connected(&mut self, socket: u64, setup_ns: u64) {
        Self::conn(&mut self.pg, &mut self.connections, socket).setup_ns = Some(setup_ns);
    }

    /// A PostgreSQL round trip decoded on its socket (while the chunk that ended it was
    /// decoded, or at a close): recorded for the join; a thread that read its answer's end
    /// may go on with the same request.
    pub fn round_trip(&mut self, rt: &RoundTrip) {
        let conn = Self::conn(&mut self.pg, &mut self.connections, rt.socket);
        let index = conn.index;
        let setup_ns = conn.setup_ns.take();
        let idle_in_transaction_ns = conn.in_transaction_since.take().map_or(0, |t| rt.start_ns.saturating_sub(t));
        if matches!(rt.status, Some(TransactionStatus::InTransaction | TransactionStatus::Failed)) {
            conn.in_transaction_since = rt.end_ns;
        }
        let ping = rt.kind == RoundTripKind::Ping;
        let mut checkout_ping = false;
        // The gap since the connection's previous answer, when its checkout still held it: a
        // statement's answer, or the answer of the ping before the checkout (a ping that
        // followed a ping), outside a transaction, followed by the next statement of the
        // checkout or by the pool's ping on release (the checkout's end). Which it was is
        // known at the end, from whether the connection's checkouts are delimited by pings.
        if let Some(prev) = conn.previous.take() {
            if prev.ping && ping {
                checkout_ping = true;
                let i = index as usize;
                if self.delimited.len() <= i {
                    self.delimited.resize(i + 1, false);
                }
                self.delimited[i] = true;
            }
            if let (Some(rec), true, true) = (prev.rec, !prev.ping || prev.checkout_ping, prev.outside) {
                if let Some(r) = self.round_trips.get_mut(rec) {
                    r.held_idle_ns = rt.start_ns.saturating_sub(prev.end_ns);
                }
            }
        }
        let outside = matches!(rt.status, Some(TransactionStatus::Idle));
        // A round trip whose sends were not seen (pipelined after the previous one, or begun
        // before the capture) is taken for the previous one's task.
        let node = match conn.open.take().or(conn.last) {
            Some(n) => Some(n),
            None => self.join.add(NO_REQUEST),
        };
        conn.last = node;
        // The statements' interned shapes, appended to the shape list in place.
        let start = self.shape_list.len();
        for st in rt.statements.iter().take(u16::MAX as usize) {
            let id = match self.shape_ids.get(st) {
                Some(&id) => id,
                None => {
                    let id = self.shapes.len() as u32;
                    self.shapes.push(st.clone());
                    self.shape_ids.insert(st.clone(), id);
                    id
                }
            };
            self.shape_list.push(id);
        }
        let latency = rt.latency_ns();
        let rec = RtRec {
            node: node.unwrap_or(NO_REQUEST),
            conn: index,
            start: start as u32,
            len: (self.shape_list.len() - start) as u16,
            ping,
            answered: latency.is_some(),
            latency_ns: latency.unwrap_or(0),
            idle_in_transaction_ns,
            held_idle_ns: 0,
        };
        let recorded = node.is_some() && self.round_trips.len() < MAX_ROUND_TRIPS;
        if let (Some(c), Some(end)) = (self.pg.get_mut(&rt.socket), rt.end_ns) {
            c.previous = Some(Previous { rec: recorded.then_some(self.round_trips.len()), end_ns: end, ping, checkout_ping, outside });
        }
        if recorded {
            if let Some(ns) = setup_ns {
                self.setups.push((self.round_trips.len() as u32, ns));
            }
            self.round_trips.push(rec);
        } else {
            self.overflow.add(&rec, &self.shape_list);
            if let Some(ns) = setup_ns {
                self.overflow.connection_setups += 1;
                self.overflow.connection_setup_ns += ns;
            }
            self.shape_list.truncate(start);
        }
        if let (Some((tid, socket)), Some(n), true) = (self.receiving, node, latency.is_some()) {
            if socket == rt.socket {
                self.last.insert(tid, Last::Answer { node: n, socket, ping: rt.kind == RoundTripKind::Ping });
            }
        }
    }

    /// The producer saw this socket close.
    pub fn close_socket(&mut self, protocol: Protocol, socket: u64) {
        match protocol {
            Protocol::Http => {
                self.http_current.remove(&socket);
            }
            Protocol::Postgres => {
                self.pg.remove(&socket);
            }
        }
    }

    fn set(&mut self, tid: u32, ts_ns: u64, label: u32) {
        if self.full_at.is_some() {
            return;
        }
        let log = self.threads.entry(tid).or_default();
        if log.last().is_some_and(|c| c.1 == label) {
            return;
        }
        if self.changes >= MAX_CHANGES {
            self.full_at = Some(ts_ns);
            return;
        }
        log.push((ts_ns, label));
        self.changes += 1;
    }

    /// The timeline and the join, with endpoints named as the summary names them (varying
    /// path segments collapsed to `{param}`, [`collapse_varying_segments`]).
    pub fn finish(mut self) -> Serving {
        let refs: Vec<&str> = self.endpoints.names.iter().map(String::as_str).collect();
        let templates = collapse_varying_segments(&refs);
        let mut names: Vec<String> = Vec::new();
        let mut ids: HashMap<String, u32, RandomState> = HashMap::default();
        let remap: Vec<u32> = self
            .endpoints
            .names
            .iter()
            .map(|e| {
                let name = templates.get(e).cloned().unwrap_or_else(|| e.clone());
                *ids.entry(name.clone()).or_insert_with(|| {
                    names.push(name);
                    (names.len() - 1) as u32
                })
            })
            .collect();
        // Held gaps count only on connections whose checkouts the pings delimit: elsewhere a
        // statement's answer followed by the next statement may be two checkouts, with the
        // connection idle in the pool between.
        for r in &mut self.round_trips {
            if !self.delimited.get(r.conn as usize).copied().unwrap_or(false) {
                r.held_idle_ns = 0;
            }
        }
        let join = &mut self.join;
        let roots: Vec<u32> = self.round_trips.iter().map(|r| join.find(r.node)).collect();
        let joined: Vec<u32> = roots
            .iter()
            .map(|&root| match join.owner[root as usize] {
                NO_REQUEST => NO_REQUEST,
                e => remap[e as usize],
            })
            .collect();
        let (endpoint_of, estimated) = split_unjoined(&self.round_trips, &joined, &self.shape_list);
        // The endpoint a set joined to no request was dealt to: its first round trip's.
        let mut dealt: HashMap<u32, u32, RandomState> = HashMap::default();
        for (i, &root) in roots.iter().enumerate() {
            if estimated[i] {
                dealt.entry(root).or_insert(endpoint_of[i]);
            }
        }
        let mut resolve = |label: u32| -> u32 {
            if label & NODE == 0 {
                return remap[label as usize];
            }
            let root = join.find(label & !NODE);
            match join.owner[root as usize] {
                NO_REQUEST => dealt.get(&root).copied().unwrap_or(NO_REQUEST),
                e => remap[e as usize],
            }
        };
        let threads = std::mem::take(&mut self.threads)
            .into_iter()
            .map(|(tid, mut log)| {
                let mut previous = NO_REQUEST;
                for c in &mut log {
                    let e = resolve(c.1);
                    // A set joined to no request, and dealt to none, leaves the thread on its
                    // previous request.
                    c.1 = if e == NO_REQUEST && c.1 & NODE != 0 { previous } else { e };
                    previous = c.1;
                }
                log.dedup_by(|b, a| a.1 == b.1);
                (tid, log)
            })
            .collect();
        let mut by: HashMap<u32, DbAcc, RandomState> = HashMap::default();
        let mut rest = std::mem::take(&mut self.overflow);
        for (i, r) in self.round_trips.iter().enumerate() {
            match endpoint_of[i] {
                NO_REQUEST => rest.add(r, &self.shape_list),
                e => {
                    let acc = by.entry(e).or_default();
                    acc.add(r, &self.shape_list);
                    acc.estimated_round_trips += u64::from(estimated[i]);
                }
            }
        }
        for &(i, ns) in &self.setups {
            let acc = match endpoint_of[i as usize] {
                NO_REQUEST => &mut rest,
                e => by.entry(e).or_default(),
            };
            acc.connection_setups += 1;
            acc.connection_setup_ns += ns;
        }
        let mut db: Vec<EndpointDb> = by.into_iter().map(|(endpoint, acc)| EndpointDb { endpoint, counts: acc.counts(&self.shapes) }).collect();
        db.sort_by_key(|d| d.endpoint);
        Serving { endpoints: names, threads, full_at: self.full_at, db, db_unattributed: rest.counts(&self.shapes) }
    }
}

/// The kind a round trip joined to no request is split by: its first statement's shape, or
/// anything else that is not a ping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    Shape(u32),
    Other,
}

/// Each round trip's endpoint ([`NO_REQUEST`]: none) and whether it was split to it rather
/// than joined (see the module doc), from `joined` (each round trip's endpoint by the join,
/// or [`NO_REQUEST`]):
///
/// - a round trip joined to no request that is not a ping is dealt out as the joined ones of
///   its [`Kind`] split: each statement shape as that shape's joined executions, the others as
///   all joined round trips (smooth weighted round-robin in capture order, so that no endpoint
///   gets a stretch of time of its own); a shape nothing joined goes to the endpoint with
///   joined work when only one has any (a load of one endpoint), else to none;
/// - a ping joined to no request goes with the next round trip on its connection that is not a
///   ping: the checkout it prepares, or, for a pool's ping on release, the next checkout, one
///   per checkout either way.
fn split_unjoined(round_trips: &[RtRec], joined: &[u32], shapes: &[u32]) -> (Vec<u32>, Vec<bool>) {
    let kind_of = |r: &RtRec| if r.len > 0 { Kind::Shape(shapes[r.start as usize]) } else { Kind::Other };
    let mut weights: HashMap<Kind, HashMap<u32, u64, RandomState>, RandomState> = HashMap::default();
    for (r, &e) in round_trips.iter().zip(joined) {
        if e == NO_REQUEST || r.ping {
            continue;
        }
        for &s in &shapes[r.start as usize..r.start as usize + r.len as usize] {
            *weights.entry(Kind::Shape(s)).or_default().entry(e).or_default() += 1;
        }
        *weights.entry(Kind::Other).or_default().entry(e).or_default() += 1;
    }
    let weights: HashMap<Kind, Vec<(u32, u64)>, RandomState> = weights
        .into_iter()
        .map(|(k, w)| {
            let mut v: Vec<(u32, u64)> = w.into_iter().collect();
            v.sort_unstable();
            (k, v)
        })
        .collect();
    let mut endpoint_of = joined.to_vec();
    let mut estimated = vec![false; round_trips.len()];
    // Smooth weighted round-robin state per kind.
    let mut current: HashMap<Kind, Vec<i128>, RandomState> = HashMap::default();
    for (i, r) in round_trips.iter().enumerate() {
        if joined[i] != NO_REQUEST || r.ping {
            continue;
        }
        // A shape nothing joined goes to the one endpoint with joined work, when there is one.
        let k = Some(kind_of(r)).filter(|k| weights.contains_key(k)).unwrap_or(Kind::Other);
        let Some(w) = weights.get(&k).filter(|w| k != Kind::Other || kind_of(r) == Kind::Other || w.len() == 1) else { continue };
        let total: i128 = w.iter().map(|x| x.1 as i128).sum();
        let cur = current.entry(k).or_insert_with(|| vec![0; w.len()]);
        for (c, x) in cur.iter_mut().zip(w) {
            *c += x.1 as i128;
        }
        let pick = (0..w.len()).max_by_key(|&j| (cur[j], std::cmp::Reverse(j))).expect("weights");
        cur[pick] -= total;
        endpoint_of[i] = w[pick].0;
        estimated[i] = true;
    }
    // Pings: the next round trip on the connection that is not a ping, walking backwards.
    let mut next: HashMap<u32, u32, RandomState> = HashMap::default();
    for (i, r) in round_trips.iter().enumerate().rev() {
        if !r.ping {
            next.insert(r.conn, endpoint_of[i]);
        } else if joined[i] == NO_REQUEST {
            if let Some(&e) = next.get(&r.conn).filter(|&&e| e != NO_REQUEST) {
                endpoint_of[i] = e;
                estimated[i] = true;
            }
        }
    }
    (endpoint_of, estimated)
}

/// Who each thread served when: the result of [`ServingTimeline::finish`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Serving {
    /// Endpoint names (`METHOD /route`); the ids of [`Serving::at`] index into it.
    pub endpoints: Vec<String>,
    threads: HashMap<u32, Vec<(u64, u32)>>,
    full_at: Option<u64>,
    /// PostgreSQL work per endpoint: the chains linked to its requests (see the module doc).
    pub db: Vec<EndpointDb>,
    /// PostgreSQL work of the chains linked to no request.
    pub db_unattributed: DbCounts,
}

/// An endpoint's PostgreSQL work: the chains of round trips linked to its requests (see the
/// module doc).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EndpointDb {
    /// Index into [`Serving::endpoints`] (and [`crate::profile::EndpointSamples::endpoints`]).
    pub endpoint: u32,
    /// Its round trips and statements.
    #[serde(flatten)]
    pub counts: DbCounts,
}

/// PostgreSQL round trips and statement executions of a set of chains.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DbCounts {
    /// Round trips.
    pub round_trips: u64,
    /// Round trips whose answer was decoded.
    pub answered: u64,
    /// Their summed latency (first message sent to the answer's end), ns.
    pub latency_total_ns: u64,
    /// Of the round trips, pings (no statement).
    #[serde(default)]
    pub pings: u64,
    /// Executions per statement shape, most first (shapes as in the wire summary).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub statements: Vec<EndpointStatement>,
    /// Of `round_trips` (and of the figures above, with them), those joined to no request by
    /// the calls' order and split to this endpoint as its joined work of the same kind (see
    /// [`crate::wire::serving`]): an estimate.
    #[serde(default)]
    pub estimated_round_trips: u64,
    /// Time the connections sat idle inside a transaction before these round trips (a
    /// transaction left open while the app did something else: PostgreSQL's `idle in
    /// transaction`), summed, ns. Each gap counts for the round trip that ends it.
    #[serde(default)]
    pub idle_in_transaction_ns: u64,
    /// Time a checkout held its connection with nothing sent, outside a transaction, summed,
    /// ns: from a statement's answer, or from the answer of the pool's ping before the
    /// checkout, to the checkout's next statement or to the pool's ping on release (a
    /// connection kept across an `.await` on something else, which the pool's other requests
    /// wait for). Counted for the round trip that began each gap, only on
    /// connections whose pool pings before each checkout and on release (sqlx's defaults),
    /// where those pings delimit the checkouts: a ping answered and followed by another ping
    /// was seen on the connection. 0 elsewhere: the wire cannot tell a held connection from an
    /// idle one in the pool.
    #[serde(default)]
    pub held_idle_ns: u64,
    /// Connections set up for these requests (PostgreSQL start-ups, each counted with its
    /// connection's first round trip).
    #[serde(default)]
    pub connection_setups: u64,
    /// Their set-up time, ns ([`super::pg::PgEvent::Connected::setup_ns`]), summed.
    #[serde(default)]
    pub connection_setup_ns: u64,
}

/// One statement shape's executions in a [`DbCounts`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EndpointStatement {
    /// The shape, as in [`super::summary::StatementStats::shape`].
    pub shape: StatementShape,
    /// Times executed.
    pub executions: u64,
}

impl DbCounts {
    /// Gives statements prepared before the capture their recovered text, as
    /// [`super::WireSummary::apply_statement_texts`] does for the summary, and merges equal
    /// shapes.
    pub fn apply_statement_texts(&mut self, texts: &std::collections::HashMap<(u64, String), String>) {
        let mut merged: Vec<EndpointStatement> = Vec::with_capacity(self.statements.len());
        for st in std::mem::take(&mut self.statements) {
            let shape = resolved_shape(&st.shape, texts).0;
            match merged.iter_mut().find(|m| m.shape == shape) {
                Some(m) => m.executions += st.executions,
                None => merged.push(EndpointStatement { shape, executions: st.executions }),
            }
        }
        merged.sort_by(|a, b| b.executions.cmp(&a.executions).then_with(|| a.shape.cmp(&b.shape)));
        self.statements = merged;
    }
}

/// What [`Serving::at`] knows of one moment of one thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// Serving the request of this endpoint (index into [`Serving::endpoints`]).
    Endpoint(u32),
    /// No socket call of the thread before that moment, or its last one was on a database
    /// connection whose chain was linked to no request: nothing to attribute it to.
    Nothing,
    /// After [`MAX_CHANGES`] changes were recorded: not known.
    NotRecorded,
}

impl Serving {
    /// What thread `tid` was serving at `ts_ns` (`CLOCK_MONOTONIC`, ns).
    pub fn at(&self, tid: u32, ts_ns: u64) -> Served {
        if self.full_at.is_some_and(|f| ts_ns >= f) {
            return Served::NotRecorded;
        }
        let Some(log) = self.threads.get(&tid) else { return Served::Nothing };
        let i = log.partition_point(|c| c.0 <= ts_ns);
        match i.checked_sub(1).map(|i| log[i].1) {
            Some(NO_REQUEST) | None => Served::Nothing,
            Some(e) => Served::Endpoint(e),
        }
    }

    /// True when no thread was seen serving a request.
    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }

    /// [`DbCounts::apply_statement_texts`] on every endpoint's counts and the unattributed ones.
    pub fn apply_statement_texts(&mut self, texts: &std::collections::HashMap<(u64, String), String>) {
        for d in &mut self.db {
            d.counts.apply_statement_texts(texts);
        }
        self.db_unattributed.apply_statement_texts(texts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(ts_ns: u64, tid: u32, socket: u64, protocol: Protocol, direction: Direction) -> Chunk {
        Chunk { ts_ns, pid: 1, tid, socket, protocol, direction, total_len: 10, head: Vec::new(), tail: Vec::new() }
    }

    /// Two requests on one worker: the second request's head moves the worker to it; the
    /// first's query answer, followed by the first's response, moves it back.
    #[test]
    fn requests_interleaved_on_one_worker() {
        let mut t = ServingTimeline::default();
        t.observe(&chunk(100, 7, 1, Protocol::Http, Direction::Rx), Some(("GET", "/a")));
        t.observe(&chunk(110, 7, 50, Protocol::Postgres, Direction::Tx), None);
        t.observe(&chunk(120, 7, 2, Protocol::Http, Direction::Rx), Some(("POST", "/b")));
        t.observe(&chunk(130, 7, 50, Protocol::Postgres, Direction::Rx), None);
        t.round_trip(&rt(50, 110, &["SELECT 1"]));
        t.observe(&chunk(140, 7, 1, Protocol::Http, Direction::Tx), None);
        t.observe(&chunk(150, 7, 2, Protocol::Http, Direction::Tx), None);
        let s = t.finish();
        assert_eq!(s.endpoints, ["GET /a", "POST /b"]);
        assert_eq!(s.at(7, 99), Served::Nothing);
        assert_eq!(s.at(7, 100), Served::Endpoint(0));
        assert_eq!(s.at(7, 115), Served::Endpoint(0));
        assert_eq!(s.at(7, 125), Served::Endpoint(1));
        assert_eq!(s.at(7, 135), Served::Endpoint(0));
        assert_eq!(s.at(7, 145), Served::Endpoint(0));
        assert_eq!(s.at(7, 155), Served::Endpoint(1));
        // Another thread made no socket call.
        assert_eq!(s.at(8, 155), Served::Nothing);
    }

    fn rt(socket: u64, start_ns: u64, statements: &[&str]) -> RoundTrip {
        RoundTrip {
            socket,
            pid: 1,
            tid: 0,
            start_ns,
            end_ns: Some(start_ns + 15),
            queued_ns: 0,
            kind: if statements.is_empty() { RoundTripKind::Ping } else { RoundTripKind::Execute },
            statements: statements.iter().map(|t| StatementShape::Sql { text: t.to_string(), truncated: false }).collect(),
            prepared: Vec::new(),
            closed: Vec::new(),
            flushes: 0,
            command_tags: Vec::new(),
            errors: Vec::new(),
            status: None,
            incomplete: false,
        }
    }

    /// A round trip of `statements` that leaves its connection in `status`.
    fn rt_status(socket: u64, start_ns: u64, statements: &[&str], status: TransactionStatus) -> RoundTrip {
        RoundTrip { status: Some(status), ..rt(socket, start_ns, statements) }
    }

    /// A transaction held open across a wait: BEGIN and a SELECT on one worker, then, after
    /// the task waited 1,855 ns (a timer, another service), an UPDATE and the COMMIT on
    /// another. Every gap between an answer that left the transaction open and the
    /// connection's next message is idle in transaction (5 + 1,855 + 5 ns), counted for the
    /// request: the UPDATE and COMMIT by the join, BEGIN and SELECT split to the one endpoint.
    /// Gaps outside a transaction (after COMMIT) count nothing.
    #[test]
    fn idle_time_inside_a_transaction_goes_to_the_request_holding_it() {
        use TransactionStatus::{Idle, InTransaction};
        let mut t = ServingTimeline::default();
        t.observe(&chunk(100, 7, 1, Protocol::Http, Direction::Rx), Some(("POST", "/t")));
        for (ts, tid, text, status) in [(110, 7, "BEGIN", InTransaction), (130, 7, "SELECT 1", InTransaction), (2000, 8, "UPDATE t", InTransaction), (2020, 8, "COMMIT", Idle)] {
            t.observe(&chunk(ts, tid, 60, Protocol::Postgres, Direction::Tx), None);
            t.observe(&chunk(ts + 10, tid, 60, Protocol::Postgres, Direction::Rx), None);
            t.round_trip(&rt_status(60, ts, &[text], status));
        }
        t.observe(&chunk(2040, 8, 1, Protocol::Http, Direction::Tx), None);
        // The connection's next statement, outside a transaction, 10 µs later.
        t.observe(&chunk(12_000, 9, 60, Protocol::Postgres, Direction::Tx), None);
        t.observe(&chunk(12_010, 9, 60, Protocol::Postgres, Direction::Rx), None);
        t.round_trip(&rt_status(60, 12_000, &["SELECT 2"], Idle));
        let s = t.finish();
        assert_eq!(s.db.len(), 1);
        assert_eq!(s.db[0].counts.idle_in_transaction_ns, 5 + 1855 + 5);
        assert_eq!(s.db_unattributed.idle_in_transaction_ns, 0);
    }

    /// Checkouts held with nothing sent: on a connection whose pool pings before each checkout
    /// and on release (a ping followed by a ping), the gaps from a statement's answer to the
    /// checkout's next statement (1,000 ns) and to the release ping (2,000 ns) count, and so
    /// does the gap from the answer of the ping before a checkout (a ping after a ping) to
    /// the checkout's first statement (3,085 ns: acquire, a wait, then the query); the gap
    /// after the release ping does not (the connection sits in the pool after it), nor does
    /// the gap after a ping with no ping before it (the connection's first). On a connection
    /// without pings the same gaps may be the pool's idle time: they count nothing.
    #[test]
    fn held_checkouts_count_only_where_pings_delimit_them() {
        use TransactionStatus::Idle;
        let mut t = ServingTimeline::default();
        t.observe(&chunk(50, 7, 1, Protocol::Http, Direction::Rx), Some(("GET", "/held")));
        for (ts, text) in [(100, None), (200, Some("SELECT a")), (1215, Some("SELECT b")), (3230, None), (5000, None), (8100, Some("SELECT c"))] {
            t.observe(&chunk(ts, 7, 70, Protocol::Postgres, Direction::Tx), None);
            t.observe(&chunk(ts + 10, 7, 70, Protocol::Postgres, Direction::Rx), None);
            match text {
                Some(text) => t.round_trip(&rt_status(70, ts, &[text], Idle)),
                // A ping (Sync alone) is answered by ReadyForQuery, here `I`.
                None => t.round_trip(&rt_status(70, ts, &[], Idle)),
            }
        }
        for ts in [100, 5000] {
            t.observe(&chunk(ts, 8, 71, Protocol::Postgres, Direction::Tx), None);
            t.observe(&chunk(ts + 10, 8, 71, Protocol::Postgres, Direction::Rx), None);
            t.round_trip(&rt_status(71, ts, &["SELECT d"], Idle));
        }
        t.observe(&chunk(9000, 7, 1, Protocol::Http, Direction::Tx), None);
        let s = t.finish();
        let held: u64 = s.db.iter().map(|d| d.counts.held_idle_ns).sum::<u64>() + s.db_unattributed.held_idle_ns;
        assert_eq!(held, (1215 - 215) + (3230 - 1230) + (8100 - 5015));
    }

    /// A connection opened for one request and closed before its response: the start-up's
    /// chunks, the query, then the Terminate. The query joins the request by its answer and
    /// the response after the Terminate, which is no round trip; the start-up's 30 ns go with
    /// the query.
    #[test]
    fn a_connection_closed_before_the_response_is_joined_to_its_request() {
        let mut t = ServingTimeline::default();
        t.observe(&chunk(100, 7, 1, Protocol::Http, Direction::Rx), Some(("GET", "/orders/1")));
        for (ts, direction) in [(110, Direction::Tx), (120, Direction::Rx), (130, Direction::Tx), (140, Direction::Rx)] {
            t.observe(&chunk(ts, 7, 61, Protocol::Postgres, direction), None);
        }
        t.connected(61, 30);
        t.observe(&chunk(150, 7, 61, Protocol::Postgres, Direction::Tx), None);
        t.observe(&chunk(160, 7, 61, Protocol::Postgres, Direction::Rx), None);
        t.round_trip(&rt(61, 150, &["SELECT ?"]));
        let terminate = Chunk { total_len: 5, head: vec![b'X', 0, 0, 0, 4], ..chunk(170, 7, 61, Protocol::Postgres, Direction::Tx) };
        t.observe(&terminate, None);
        t.observe(&chunk(180, 7, 1, Protocol::Http, Direction::Tx), None);
        let s = t.finish();
        assert_eq!(s.db.len(), 1);
        let want = DbCounts { round_trips: 1, answered: 1, latency_total_ns: 15, statements: vec![stmt("SELECT ?", 1)], connection_setups: 1, connection_setup_ns: 30, ..DbCounts::default() };
        assert_eq!(s.db[0].counts, want);
        assert_eq!(s.db_unattributed, DbCounts::default());
        assert_eq!(s.at(7, 175), Served::Endpoint(0));
    }

    fn stmt(text: &str, executions: u64) -> EndpointStatement {
        EndpointStatement { shape: StatementShape::Sql { text: text.into(), truncated: false }, executions }
    }

    /// A query answer read by another worker (a task moved by work stealing) moves that
    /// worker to the request, and the round trip joins it by its answer right before the
    /// response. A ping earlier on the connection goes with that query.
    #[test]
    fn the_query_answer_names_the_request_on_any_worker() {
        let mut t = ServingTimeline::default();
        t.observe(&chunk(10, 1, 60, Protocol::Postgres, Direction::Tx), None);
        t.observe(&chunk(20, 1, 60, Protocol::Postgres, Direction::Rx), None);
        t.round_trip(&rt(60, 10, &[]));
        t.observe(&chunk(100, 7, 1, Protocol::Http, Direction::Rx), Some(("GET", "/users/1")));
        t.observe(&chunk(110, 7, 60, Protocol::Postgres, Direction::Tx), None);
        t.observe(&chunk(130, 8, 60, Protocol::Postgres, Direction::Rx), None);
        t.round_trip(&rt(60, 110, &["SELECT ?"]));
        t.observe(&chunk(140, 8, 1, Protocol::Http, Direction::Tx), None);
        let s = t.finish();
        assert_eq!(s.db.len(), 1);
        assert_eq!(s.db[0].endpoint, 0);
        assert_eq!(s.db[0].counts, DbCounts { round_trips: 2, answered: 2, latency_total_ns: 30, pings: 1, statements: vec![stmt("SELECT ?", 1)], estimated_round_trips: 1, ..DbCounts::default() });
        assert_eq!(s.db_unattributed, DbCounts::default());
        assert_eq!(s.at(1, 30), Served::Endpoint(0));
        assert_eq!(s.at(8, 129), Served::Nothing);
        assert_eq!(s.at(8, 131), Served::Endpoint(0));
    }

    /// A task resumed from a wait for the pool on a worker whose last socket call was another
    /// request's: its queries on one connection follow one another (each answer, then the next
    /// send on it) up to its response, and are that response's request's, not the worker's
    /// previous one; its query before, on another connection, is split to it as the only
    /// endpoint whose joined work holds that statement.
    #[test]
    fn a_task_resumed_from_a_pool_wait_is_joined_by_its_response() {
        let mut t = ServingTimeline::default();
        // /a takes the pool's one connection; /b's request arrives and waits for it.
        t.observe(&chunk(100, 7, 1, Protocol::Http, Direction::Rx), Some(("GET", "/a")));
        t.observe(&chunk(110, 7, 50, Protocol::Postgres, Direction::Tx), None);
        t.observe(&chunk(120, 7, 2, Protocol::Http, Direction::Rx), Some(("GET", "/b")));
        t.observe(&chunk(130, 7, 50, Protocol::Postgres, Direction::Rx), None);
        t.round_trip(&rt(50, 110, &["SELECT a"]));
        t.observe(&chunk(140, 7, 1, Protocol::Http, Direction::Tx), None);
        // /b resumes on the same worker, whose last socket call was /a's response; its second
        // query goes to another connection (a checkout per statement).
        t.observe(&chunk(150, 7, 50, Protocol::Postgres, Direction::Tx), None);
        t.observe(&chunk(160, 8, 50, Protocol::Postgres, Direction::Rx), None);
        t.round_trip(&rt(50, 150, &["SELECT b"]));
        t.observe(&chunk(170, 8, 51, Protocol::Postgres, Direction::Tx), None);
        for i in 0..2 {
            t.observe(&chunk(180 + 20 * i, 8, 51, Protocol::Postgres, Direction::Rx), None);
            t.round_trip(&rt(51, 170 + 20 * i, &["SELECT b"]));
            t.observe(&chunk(190 + 20 * i, 8, 51, Protocol::Postgres, Direction::Tx), None);
        }
        t.observe(&chunk(220, 8, 51, Protocol::Postgres, Direction::Rx), None);
        t.round_trip(&rt(51, 210, &["SELECT b"]));
        t.observe(&chunk(230, 8, 2, Protocol::Http, Direction::Tx), None);
        let s = t.finish();
        assert_eq!(s.endpoints, ["GET /a", "GET /b"]);
        let of = |e: u32| s.db.iter().find(|d| d.endpoint == e).map(|d| d.counts.clone()).unwrap_or_default();
        assert_eq!(of(0).round_trips, 1);
        assert_eq!(of(0).statements, [stmt("SELECT a", 1)]);
        assert_eq!(of(1).round_trips, 4);
        assert_eq!(of(1).statements, [stmt("SELECT b", 4)]);
        // The first query (after the wait, before a send on another connection) joined
        // nothing; it went to /b as the only endpoint whose joined work holds its shape.
        assert_eq!(of(1).estimated_round_trips, 1);
        assert_eq!(s.db_unattributed, DbCounts::default());
        // The worker serves /b from its first query on.
        assert_eq!(s.at(7, 145), Served::Endpoint(0));
        assert_eq!(s.at(7, 155), Served::Endpoint(1));
        assert_eq!(s.at(8, 225), Served::Endpoint(1));
    }

    /// Round trips with no evidence of their request, of kinds no joined round trip has,
    /// belong to none: a response whose request head came before the capture, a background
    /// job's query, a first query after a request head (the handler may have waited for the
    /// pool), a query followed by another task's call. Their threads stay on their previous
    /// request.
    #[test]
    fn round_trips_without_evidence_belong_to_no_request() {
        let mut t = ServingTimeline::default();
        t.observe(&chunk(100, 7, 50, Protocol::Postgres, Direction::Tx), None);
        t.observe(&chunk(110, 7, 50, Protocol::Postgres, Direction::Rx), None);
        t.round_trip(&rt(50, 100, &["SELECT x"]));
        t.observe(&chunk(120, 7, 1, Protocol::Http, Direction::Tx), None);
        // A background job's query on another connection, then the connection closes.
        t.observe(&chunk(200, 9, 51, Protocol::Postgres, Direction::Tx), None);
        t.observe(&chunk(210, 9, 51, Protocol::Postgres, Direction::Rx), None);
        t.round_trip(&rt(51, 200, &["SELECT job"]));
        t.close_socket(Protocol::Postgres, 51);
        t.observe(&chunk(300, 7, 2, Protocol::Http, Direction::Rx), Some(("GET", "/c")));
        t.observe(&chunk(310, 7, 52, Protocol::Postgres, Direction::Tx), None);
        t.observe(&chunk(320, 7, 52, Protocol::Postgres, Direction::Rx), None);
        t.round_trip(&rt(52, 310, &["SELECT c"]));
        t.observe(&chunk(330, 7, 3, Protocol::Http, Direction::Rx), Some(("GET", "/d")));
        t.observe(&chunk(335, 8, 2, Protocol::Http, Direction::Tx), None);
        let s = t.finish();
        assert_eq!(s.endpoints, ["GET /c", "GET /d"]);
        assert!(s.db.is_empty(), "{:?}", s.db);
        assert_eq!(s.db_unattributed.round_trips, 3);
        assert_eq!(s.db_unattributed.statements, [stmt("SELECT c", 1), stmt("SELECT job", 1), stmt("SELECT x", 1)]);
        assert_eq!(s.at(7, 105), Served::Nothing);
        assert_eq!(s.at(9, 205), Served::Nothing);
        assert_eq!(s.at(7, 315), Served::Endpoint(0));
        assert_eq!(s.at(7, 335), Served::Endpoint(1));
    }

    /// Round trips joined to no request are split as the joined ones of their kind: a shape
    /// joined only to /a goes to /a; one joined 2:1 to /a and /b splits 2:1 (5 and 3 of 8 by
    /// smooth weighted round-robin, interleaved in time); a shape joined nowhere to no
    /// request; a ping goes with the next statement on its connection.
    #[test]
    fn unjoined_round_trips_split_as_the_joined_ones_of_their_kind() {
        let mut t = ServingTimeline::default();
        let mut ts = 0u64;
        let mut socket = 100u64;
        // One request of `endpoint` whose last query (joined by the response) is `last`, after
        // `before` (not joined: each on a connection of its own, after another's answer; a
        // ping ("") and the statement after it share one, as a checkout's do).
        let mut request = |t: &mut ServingTimeline, endpoint: &str, before: &[&str], last: &str| {
            ts += 10;
            socket += 1;
            let http = socket;
            t.observe(&chunk(ts, 7, http, Protocol::Http, Direction::Rx), Some(("GET", endpoint)));
            let mut after_ping = false;
            for q in before.iter().chain([&last]) {
                if !after_ping {
                    socket += 1;
                }
                after_ping = q.is_empty();
                ts += 10;
                t.observe(&chunk(ts, 7, socket, Protocol::Postgres, Direction::Tx), None);
                ts += 10;
                t.observe(&chunk(ts, 7, socket, Protocol::Postgres, Direction::Rx), None);
                t.round_trip(&rt(socket, ts - 10, if q.is_empty() { &[] } else { std::slice::from_ref(q) }));
            }
            ts += 10;
            t.observe(&chunk(ts, 7, http, Protocol::Http, Direction::Tx), None);
        };
        request(&mut t, "/a", &["A", "AB", "AB"], "A");
        for _ in 0..2 {
            request(&mut t, "/a", &["A", "AB", "AB"], "AB");
        }
        request(&mut t, "/b", &["", "AB", "AB"], "AB");
        request(&mut t, "/b", &["C"], "");
        let s = t.finish();
        assert_eq!(s.endpoints, ["GET /a", "GET /b"]);
        let of = |e: u32| s.db.iter().find(|d| d.endpoint == e).map(|d| d.counts.clone()).unwrap_or_default();
        // Joined: /a A 1, AB 2; /b AB 1, a ping 1 (its last round trip). Split: A (3) all to
        // /a; AB (8) 5:3, the first of /b's to /a; the unjoined ping with that AB to /a; C to
        // no request.
        assert_eq!(of(0).statements, [stmt("AB", 7), stmt("A", 4)]);
        assert_eq!(of(1).statements, [stmt("AB", 4)]);
        assert_eq!((of(0).round_trips, of(0).estimated_round_trips, of(0).pings), (12, 9, 1));
        assert_eq!((of(1).round_trips, of(1).estimated_round_trips, of(1).pings), (5, 3, 1));
        assert_eq!(s.db_unattributed.round_trips, 1);
        assert_eq!(s.db_unattributed.statements, [stmt("C", 1)]);
    }

    /// Statements prepared before the capture are named per connection until their text is
    /// known; each endpoint's counts then merge them as the summary does.
    #[test]
    fn statements_prepared_before_the_capture_merge_by_text() {
        let mut t = ServingTimeline::default();
        for (i, socket) in [50u64, 51].into_iter().enumerate() {
            let ts = 100 * (i as u64 + 1);
            t.observe(&chunk(ts, 7, i as u64 + 1, Protocol::Http, Direction::Rx), Some(("GET", "/items")));
            t.observe(&chunk(ts + 10, 7, socket, Protocol::Postgres, Direction::Tx), None);
            t.observe(&chunk(ts + 20, 7, socket, Protocol::Postgres, Direction::Rx), None);
            let mut r = rt(socket, ts + 10, &[]);
            r.kind = RoundTripKind::Execute;
            r.statements = vec![StatementShape::PreparedBeforeAttach { name: format!("s{i}"), connection: socket }];
            t.round_trip(&r);
            t.observe(&chunk(ts + 30, 7, i as u64 + 1, Protocol::Http, Direction::Tx), None);
        }
        let mut s = t.finish();
        let texts: HashMap<(u64, String), String> =
            [((50, "s0".to_string()), "SELECT name FROM items WHERE id = $1".to_string()), ((51, "s1".to_string()), "SELECT name FROM items WHERE id = $1".to_string())].into();
        s.apply_statement_texts(&texts);
        assert_eq!(s.db[0].counts.statements, [stmt("SELECT name FROM items WHERE id = ?", 2)]);
    }

    /// Endpoints are named as the summary names them: many ids become one template.
    #[test]
    fn endpoints_collapse_like_the_summary() {
        let mut t = ServingTimeline::default();
        for i in 0..12u64 {
            t.observe(&chunk(100 + i, 7, i, Protocol::Http, Direction::Rx), Some(("GET", &format!("/articles/slug-{i}"))));
        }
        let s = t.finish();
        assert_eq!(s.endpoints, ["GET /articles/{param}"]);
        assert_eq!(s.at(7, 200), Served::Endpoint(0));
        // One change only: the same template throughout.
        assert_eq!(s.threads[&7].len(), 1);
    }
}
