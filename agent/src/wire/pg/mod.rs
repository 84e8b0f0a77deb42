//! PostgreSQL wire decoder: round trips, statement shapes, pings and transactions from the
//! captured heads of a client's connections (the target is the client: `Tx` = frontend
//! messages, `Rx` = backend messages).
//!
//! Source: the PostgreSQL documentation, chapter 55 "Frontend/Backend Protocol", sections
//! 55.2 "Message Flow" and 55.7 "Message Formats" (protocol 3.0).
//!
//! Definitions used throughout:
//! - **round trip**: the frontend messages up to and including a `Sync` or a simple `Query`
//!   (each of which the server answers with exactly one `ReadyForQuery`), closed by that
//!   `ReadyForQuery`. Its start is the timestamp of the chunk carrying its first message, its
//!   end the timestamp of the chunk carrying the `ReadyForQuery`; latency = end - start, ns.
//!   A `Flush` asks the server to send pending output without a `ReadyForQuery`; it does not
//!   close a round trip and is counted in [`RoundTrip::flushes`].
//! - **statement shape**: see [`crate::wire::sql`]; an `Execute` runs the statement its
//!   portal was bound to, a simple `Query` runs each of its `;`-separated statements.
//! - **prepared before attach**: a `Bind` of a named statement whose `Parse` was not seen on
//!   this connection is reported as [`StatementShape::PreparedBeforeAttach`] with its name,
//!   never guessed from other connections.
//! - **ping**: a round trip with no statement and no other extended-protocol message: a
//!   lone `Sync` (what sqlx 0.8 `PgConnection::ping` sends: `Sync` only, answered by
//!   `ReadyForQuery`), or a simple `Query` whose text holds no statement (`;`, `""`,
//!   `/* SQLx ping */`, which the server answers with `EmptyQueryResponse`).
//! - **transaction**: from the round trip whose `ReadyForQuery` status leaves `I` (idle) for
//!   `T`/`E`, to the one whose status returns to `I`; a single round trip whose commands
//!   include `BEGIN` and `COMMIT`/`ROLLBACK` is a transaction too. The outcome comes from the
//!   command tags (`COMMIT`, `ROLLBACK`; a `COMMIT` of a failed transaction is tagged
//!   `ROLLBACK`), else from the statement shapes, else from status `E`.
//!
//! When the answer to a round trip is not decodable (the `ReadyForQuery` fell in uncaptured
//! bytes while framing was lost), the round trip is reported with `end_ns = None`. After the
//! server side regains framing, the first `ReadyForQuery` closes the newest round trip sent
//! before it, and older ones still waiting are closed unanswered (clients such as sqlx send
//! the next round trip only after the previous answer, so the answers that were lost belong
//! to the older ones).

use std::borrow::Cow;
use std::collections::VecDeque;

use super::FastMap;

use serde::{Deserialize, Serialize};

use super::{Chunk, Direction};

pub(crate) mod framer;
pub(crate) mod message;

pub use framer::FramingStats;
use framer::{Frame, Framer, Side};
use message::{Backend, Frontend};

/// Most prepared statements or portals remembered per connection; beyond it, new names are
/// not remembered (their executions are then reported as prepared before attach).
pub const MAX_NAMES_PER_CONNECTION: usize = 4096;

/// The shape of an executed or prepared statement.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StatementShape {
    /// SQL text with every literal and parameter replaced by `?` ([`crate::wire::sql`]).
    Sql {
        /// The normalised text; ends with ` …` when the capture cut it.
        text: String,
        /// The text was cut by the capture bound.
        truncated: bool,
    },
    /// A `Bind` of a named statement whose `Parse` was sent before the capture started.
    /// Names are per connection (a driver's statement cache names them in the order each
    /// connection prepared them), so the shape keeps its connection until
    /// [`crate::wire::WireSummary::apply_statement_texts`] replaces it by its text.
    PreparedBeforeAttach {
        /// The statement name (`""` = the unnamed statement).
        name: String,
        /// Socket id of the connection it was prepared on; 0 when several connections'
        /// statements of this name were merged because their text was not recovered.
        #[serde(default)]
        connection: u64,
    },
    /// An `Execute` of a named portal bound before the capture started.
    BoundBeforeAttach {
        /// The portal name.
        portal: String,
    },
    /// The statement or portal name itself was not captured.
    Unknown,
}

impl std::fmt::Display for StatementShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StatementShape::Sql { text, .. } => f.write_str(text),
            StatementShape::PreparedBeforeAttach { name, .. } => write!(f, "(prepared before attach: {name:?})"),
            StatementShape::BoundBeforeAttach { portal } => write!(f, "(portal bound before attach: {portal:?})"),
            StatementShape::Unknown => f.write_str("(not captured)"),
        }
    }
}

impl StatementShape {
    fn sql(text: String, truncated: bool) -> StatementShape {
        StatementShape::Sql { text, truncated }
    }

    /// The first keyword of an SQL shape, upper-cased (`SELECT`, `BEGIN`, ...).
    fn verb(&self) -> Option<String> {
        match self {
            StatementShape::Sql { text, .. } => text.split_whitespace().next().map(|w| w.to_ascii_uppercase()),
            _ => None,
        }
    }
}

/// What a round trip did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RoundTripKind {
    /// Executed at least one statement.
    Execute,
    /// Prepared statements (Parse, Describe) without executing any.
    Prepare,
    /// No statement, no other extended-protocol message: a lone `Sync` or an empty `Query`.
    Ping,
    /// Anything else (e.g. only `Close`).
    Other,
}

/// Transaction status reported by ReadyForQuery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransactionStatus {
    /// `I`: not in a transaction block.
    Idle,
    /// `T`: in a transaction block.
    InTransaction,
    /// `E`: in a failed transaction block.
    Failed,
}

impl TransactionStatus {
    fn from_byte(b: u8) -> TransactionStatus {
        match b {
            b'T' => TransactionStatus::InTransaction,
            b'E' => TransactionStatus::Failed,
            _ => TransactionStatus::Idle,
        }
    }
}

/// One round trip (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundTrip {
    /// Socket id.
    pub socket: u64,
    /// Process and thread that sent its first message.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// When its first frontend message was sent, ns.
    pub start_ns: u64,
    /// When its ReadyForQuery was received, ns; `None` if the answer was not decoded.
    pub end_ns: Option<u64>,
    /// Of `end_ns - start_ns`, the part it spent queued behind the connection's previous
    /// round trip, ns: it was sent before that one's ReadyForQuery (pipelined, or a message
    /// the driver did not wait for, like tokio-postgres' `Close` of a dropped statement).
    /// The connection's answers come in order, so that part is the previous round trip's
    /// time; 0 when it was sent after the previous answer.
    #[serde(default, skip_serializing_if = "crate::is_default")]
    pub queued_ns: u64,
    /// What it did.
    pub kind: RoundTripKind,
    /// Statements executed (Execute, or each statement of a simple Query), in order.
    pub statements: Vec<StatementShape>,
    /// Statements prepared (Parse), in order.
    pub prepared: Vec<StatementShape>,
    /// Named statements closed (Close of a statement this connection prepared in the
    /// capture), in order: a driver that prepares a statement for one execution closes it
    /// after.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub closed: Vec<StatementShape>,
    /// Flush messages inside it.
    pub flushes: u32,
    /// Command tags of its CommandComplete messages as captured, e.g. `SELECT 1`, `COMMIT`.
    pub command_tags: Vec<String>,
    /// SQLSTATE codes of its ErrorResponses (e.g. `22012`); no message text.
    pub errors: Vec<String>,
    /// Transaction status after it (from its ReadyForQuery).
    pub status: Option<TransactionStatus>,
    /// Framing of the client side was lost while it was being sent: messages may be missing.
    pub incomplete: bool,
}

impl RoundTrip {
    /// The time its connection spent on it alone, ns, when the answer was decoded:
    /// `end_ns - start_ns - queued_ns`, from its send (or from the previous round trip's
    /// answer when it was queued behind it) to its ReadyForQuery. Summed over a connection's
    /// round trips it is the time the connection had a round trip outstanding, each instant
    /// counted once.
    pub fn latency_ns(&self) -> Option<u64> {
        self.end_ns.map(|e| e.saturating_sub(self.start_ns).saturating_sub(self.queued_ns))
    }
}

/// How a transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransactionOutcome {
    /// Committed.
    Committed,
    /// Rolled back (explicitly, or a COMMIT of a failed transaction).
    RolledBack,
    /// Ended, but neither the tags nor the statements say how.
    Unknown,
    /// Still open when the capture ended.
    Open,
}

/// One transaction (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transaction {
    /// Socket id.
    pub socket: u64,
    /// Start of its first round trip, ns.
    pub start_ns: u64,
    /// End of its last round trip, ns (`None` while open or when not decoded).
    pub end_ns: Option<u64>,
    /// Round trips inside it, the first and last included.
    pub round_trips: u32,
    /// Statements executed inside it.
    pub statements: u32,
    /// How it ended.
    pub outcome: TransactionOutcome,
    /// It was already open when the capture of this connection started.
    pub started_before_attach: bool,
}

/// A decoded PostgreSQL event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum PgEvent {
    /// A connection completed its start-up (first ReadyForQuery after a StartupMessage).
    Connected {
        /// Socket id.
        socket: u64,
        /// When, ns.
        ts_ns: u64,
        /// Its set-up time as the client saw it, ns: from the client's first start-up message
        /// (SSLRequest, GSSENCRequest or StartupMessage) to this ReadyForQuery, which spans the
        /// server's authentication exchange and, in PostgreSQL, the fork of a backend. The
        /// TCP handshake before it is not on the wire. `None` when the start-up began before
        /// the capture.
        #[serde(default)]
        setup_ns: Option<u64>,
    },
    /// The server accepted SSL/GSS encryption: the rest of the connection is not decodable.
    Encrypted {
        /// Socket id.
        socket: u64,
        /// When, ns.
        ts_ns: u64,
    },
    /// A round trip ended (answered or not).
    RoundTrip(RoundTrip),
    /// A transaction ended (or was open at the end of the capture).
    Transaction(Transaction),
    /// The client sent Terminate.
    Terminated {
        /// Socket id.
        socket: u64,
        /// When, ns.
        ts_ns: u64,
    },
}

/// Decoder counters beyond byte framing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgDecodeStats {
    /// Client-side (frontend) framing.
    pub frontend: FramingStats,
    /// Server-side (backend) framing.
    pub backend: FramingStats,
    /// Framed messages whose body did not match their format.
    pub malformed_messages: u64,
    /// ReadyForQuery messages with no round trip waiting for them (outside start-up).
    pub unmatched_ready_for_query: u64,
    /// Round trips closed without a decoded answer.
    pub unanswered_round_trips: u64,
    /// Connections whose traffic became encrypted (SSL/GSS accepted).
    pub encrypted_connections: u64,
    /// Bytes of encrypted connections after encryption began (not decodable).
    pub encrypted_bytes: u64,
}

#[derive(Debug, Default, Clone)]
struct Builder {
    start_ns: u64,
    pid: u32,
    tid: u32,
    statements: Vec<StatementShape>,
    prepared: Vec<StatementShape>,
    closed: Vec<StatementShape>,
    /// Extended-protocol messages other than Sync/Flush (Parse, Bind, Describe, Execute, Close, ...).
    extended: u32,
    flushes: u32,
    /// A Query was sent.
    query: bool,
    command_tags: Vec<String>,
    errors: Vec<String>,
    incomplete: bool,
}

impl Builder {
    fn kind(&self) -> RoundTripKind {
        if !self.statements.is_empty() {
            RoundTripKind::Execute
        } else if !self.prepared.is_empty() {
            RoundTripKind::Prepare
        } else if self.extended == 0 {
            RoundTripKind::Ping
        } else {
            RoundTripKind::Other
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Seen mid-stream, or after start-up.
    Ready,
    /// Between StartupMessage and the first ReadyForQuery.
    Startup,
    /// Encrypted: nothing more is decodable.
    Encrypted,
}

#[derive(Debug)]
struct Conn {
    socket: u64,
    front: Framer,
    back: Framer,
    phase: Phase,
    statements: FastMap<String, StatementShape>,
    portals: FastMap<String, StatementShape>,
    building: Option<Builder>,
    pending: VecDeque<Builder>,
    status: Option<u8>,
    txn: Option<Transaction>,
    /// The backend regained framing: the next ReadyForQuery realigns the pending queue.
    realign: bool,
    /// When the client sent its first start-up message, ns, until the start-up completes.
    startup_ns: Option<u64>,
    /// When the last round trip's ReadyForQuery was received, ns.
    last_answer_ns: Option<u64>,
}

impl Conn {
    fn new(socket: u64) -> Conn {
        Conn {
            socket,
            front: Framer::new(Side::Frontend),
            back: Framer::new(Side::Backend),
            phase: Phase::Ready,
            statements: FastMap::default(),
            portals: FastMap::default(),
            building: None,
            pending: VecDeque::new(),
            status: None,
            txn: None,
            realign: false,
            startup_ns: None,
            last_answer_ns: None,
        }
    }
}

/// The PostgreSQL decoder for all sockets classified as PostgreSQL.
#[derive(Debug, Default)]
pub struct PgDecoder {
    conns: FastMap<u64, Conn>,
    /// Frame scratch buffer.
    frames: Vec<Frame>,
    stats: PgDecodeStats,
}

fn remember(map: &mut FastMap<String, StatementShape>, name: &str, shape: StatementShape) {
    if let Some(known) = map.get_mut(name) {
        *known = shape;
    } else if map.len() < MAX_NAMES_PER_CONNECTION {
        map.insert(name.to_owned(), shape);
    }
}

impl PgDecoder {
    /// A decoder with no connection yet.
    pub fn new() -> PgDecoder {
        PgDecoder::default()
    }

    /// Decode one chunk of a PostgreSQL socket; events are appended to `out`.
    pub fn push(&mut self, chunk: &Chunk, out: &mut Vec<PgEvent>) {
        if chunk.total_len() == 0 {
            return;
        }
        let conn = self.conns.entry(chunk.socket).or_insert_with(|| Conn::new(chunk.socket));
        if conn.phase == Phase::Encrypted {
            self.stats.encrypted_bytes += chunk.total_len();
            return;
        }
        let pieces = chunk.pieces();
        self.frames.clear();
        match chunk.direction {
            Direction::Tx => {
                let lost_before = conn.front.stats.sync_losses;
                conn.front.push(&pieces, chunk.ts_ns, &mut self.frames);
                let mut frames = std::mem::take(&mut self.frames);
                let mut terminated = false;
                for f in &frames {
                    terminated |= Self::on_frontend(conn, &mut self.stats, chunk, f, out);
                }
                conn.front.recycle(&mut frames);
                self.frames = frames;
                if terminated {
                    self.close(chunk.socket, out);
                    return;
                }
                if conn.front.stats.sync_losses > lost_before {
                    // Messages of the round trip being built may be missing, its terminator too.
                    if let Some(mut b) = conn.building.take() {
                        b.incomplete = true;
                        conn.pending.push_back(b);
                    }
                }
            }
            Direction::Rx => {
                conn.back.resynced = false;
                conn.back.push(&pieces, chunk.ts_ns, &mut self.frames);
                if conn.back.resynced {
                    conn.realign = true;
                }
                let mut frames = std::mem::take(&mut self.frames);
                for f in &frames {
                    Self::on_backend(conn, &mut self.stats, chunk, f, out);
                    if conn.phase == Phase::Encrypted {
                        break;
                    }
                }
                conn.back.recycle(&mut frames);
                self.frames = frames;
            }
        }
    }

    fn builder<'a>(conn: &'a mut Conn, chunk: &Chunk, f: &Frame) -> &'a mut Builder {
        conn.building.get_or_insert_with(|| Builder {
            start_ns: f.ts_first,
            pid: chunk.pid,
            tid: chunk.tid,
            ..Builder::default()
        })
    }

    /// Handle one frontend message; returns true on Terminate.
    fn on_frontend(conn: &mut Conn, stats: &mut PgDecodeStats, chunk: &Chunk, f: &Frame, out: &mut Vec<PgEvent>) -> bool {
        match message::frontend(f) {
            Frontend::Startup { .. } => {
                conn.phase = Phase::Startup;
                conn.startup_ns.get_or_insert(f.ts_first);
                conn.statements.clear();
                conn.portals.clear();
                conn.status = None;
            }
            Frontend::SslRequest | Frontend::GssEncRequest => {
                conn.startup_ns.get_or_insert(f.ts_first);
                conn.back.expect_ssl_byte = true;
                conn.front.expect_untyped = true;
            }
            Frontend::CancelRequest => {}
            Frontend::Password => {}
            Frontend::Parse { statement, sql } => {
                let b = Self::builder(conn, chunk, f);
                b.extended += 1;
                let shape = match &sql {
                    Some((text, cut)) => StatementShape::sql(super::sql::shape(text, *cut), *cut),
                    None => StatementShape::Unknown,
                };
                b.prepared.push(shape.clone());
                if let Some(name) = statement {
                    remember(&mut conn.statements, &name, shape);
                }
            }
            Frontend::Bind { portal, statement } => {
                Self::builder(conn, chunk, f).extended += 1;
                let shape = match &statement {
                    Some(name) => conn
                        .statements
                        .get(name.as_ref())
                        .cloned()
                        .unwrap_or_else(|| StatementShape::PreparedBeforeAttach { name: name.clone().into_owned(), connection: chunk.socket }),
                    None => StatementShape::Unknown,
                };
                if let Some(p) = portal {
                    remember(&mut conn.portals, &p, shape);
                }
            }
            Frontend::Execute { portal } => {
                let shape = match &portal {
                    Some(p) => conn
                        .portals
                        .get(p.as_ref())
                        .cloned()
                        .unwrap_or_else(|| StatementShape::BoundBeforeAttach { portal: p.clone().into_owned() }),
                    None => StatementShape::Unknown,
                };
                let b = Self::builder(conn, chunk, f);
                b.extended += 1;
                b.statements.push(shape);
            }
            Frontend::Close { kind, name } => {
                Self::builder(conn, chunk, f).extended += 1;
                if let Some(n) = name {
                    if kind == b'S' {
                        if let Some(shape) = conn.statements.remove(n.as_ref()) {
                            Self::builder(conn, chunk, f).closed.push(shape);
                        }
                    } else {
                        conn.portals.remove(n.as_ref());
                    }
                }
            }
            Frontend::Describe | Frontend::Other(_) => Self::builder(conn, chunk, f).extended += 1,
            Frontend::Malformed(_) => {
                stats.malformed_messages += 1;
                Self::builder(conn, chunk, f).extended += 1;
            }
            Frontend::Flush => Self::builder(conn, chunk, f).flushes += 1,
            Frontend::Sync => {
                Self::builder(conn, chunk, f);
                conn.pending.extend(conn.building.take());
            }
            Frontend::Query { sql, truncated } => {
                let b = Self::builder(conn, chunk, f);
                b.query = true;
                for s in super::sql::split_statements(&sql, truncated) {
                    b.statements.push(StatementShape::sql(s, truncated));
                }
                // A simple query also destroys the unnamed statement and portal.
                conn.statements.remove("");
                conn.portals.remove("");
                conn.pending.extend(conn.building.take());
            }
            Frontend::Terminate => {
                out.push(PgEvent::Terminated { socket: conn.socket, ts_ns: f.ts_last });
                return true;
            }
        }
        false
    }

    fn on_backend(conn: &mut Conn, stats: &mut PgDecodeStats, chunk: &Chunk, f: &Frame, out: &mut Vec<PgEvent>) {
        match message::backend(f) {
            Backend::SslResponse(c) => {
                if c == b'S' || c == b'G' {
                    conn.phase = Phase::Encrypted;
                    stats.encrypted_connections += 1;
                    out.push(PgEvent::Encrypted { socket: conn.socket, ts_ns: f.ts_last });
                }
            }
            Backend::ReadyForQuery(s) => Self::on_ready(conn, stats, s, f.ts_last, out),
            Backend::CommandComplete(tag) => {
                if let (Some(t), Some(b)) = (tag, Self::answering(conn)) {
                    b.command_tags.push(t.into_owned());
                }
            }
            Backend::ErrorResponse(code) => {
                if let Some(b) = Self::answering(conn) {
                    b.errors.push(code.map_or_else(|| "?????".to_string(), Cow::into_owned));
                }
            }
            Backend::Malformed(_) => stats.malformed_messages += 1,
            Backend::EmptyQuery | Backend::Async | Backend::Startup | Backend::Reply(_) => {}
        }
        let _ = chunk;
    }

    /// The round trip the server is answering now: the oldest waiting one, else the one being
    /// built (answers to a Flush).
    fn answering(conn: &mut Conn) -> Option<&mut Builder> {
        if conn.pending.is_empty() {
            conn.building.as_mut()
        } else {
            conn.pending.front_mut()
        }
    }

    fn close_unanswered(conn: &mut Conn, stats: &mut PgDecodeStats, b: Builder, out: &mut Vec<PgEvent>) {
        stats.unanswered_round_trips += 1;
        let rt = RoundTrip {
            socket: conn.socket,
            pid: b.pid,
            tid: b.tid,
            start_ns: b.start_ns,
            end_ns: None,
            queued_ns: 0,
            kind: b.kind(),
            statements: b.statements,
            prepared: b.prepared,
            closed: b.closed,
            flushes: b.flushes,
            command_tags: b.command_tags,
            errors: b.errors,
            status: None,
            incomplete: b.incomplete,
        };
        if let Some(t) = conn.txn.as_mut() {
            t.round_trips += 1;
            t.statements += rt.statements.len() as u32;
        }
        out.push(PgEvent::RoundTrip(rt));
    }

    fn on_ready(conn: &mut Conn, stats: &mut PgDecodeStats, s: u8, ts: u64, out: &mut Vec<PgEvent>) {
        if conn.realign {
            conn.realign = false;
            // Answers lost while framing was lost belong to the older round trips.
            let newest_before = conn.pending.iter().rposition(|b| b.start_ns <= ts);
            if let Some(keep) = newest_before {
                for _ in 0..keep {
                    if let Some(b) = conn.pending.pop_front() {
                        Self::close_unanswered(conn, stats, b, out);
                    }
                }
            }
        }
        let Some(b) = conn.pending.pop_front() else {
            if conn.phase == Phase::Startup {
                conn.phase = Phase::Ready;
                conn.status = Some(s);
                let setup_ns = conn.startup_ns.take().map(|t| ts.saturating_sub(t));
                out.push(PgEvent::Connected { socket: conn.socket, ts_ns: ts, setup_ns });
            } else {
                stats.unmatched_ready_for_query += 1;
                conn.status = Some(s);
            }
            return;
        };
        conn.phase = Phase::Ready;
        let status = TransactionStatus::from_byte(s);
        let queued_ns = conn.last_answer_ns.filter(|&prev| prev > b.start_ns).map_or(0, |prev| prev.min(ts) - b.start_ns);
        conn.last_answer_ns = Some(ts);
        let rt = RoundTrip {
            socket: conn.socket,
            pid: b.pid,
            tid: b.tid,
            start_ns: b.start_ns,
            end_ns: Some(ts),
            queued_ns,
            kind: b.kind(),
            statements: b.statements,
            prepared: b.prepared,
            closed: b.closed,
            flushes: b.flushes,
            command_tags: b.command_tags,
            errors: b.errors,
            status: Some(status),
            incomplete: b.incomplete,
        };
        let mut txn_events = Vec::new();
        Self::track_transaction(conn, &rt, s, &mut txn_events);
        conn.status = Some(s);
        out.push(PgEvent::RoundTrip(rt));
        out.append(&mut txn_events);
    }

    fn outcome(rt: &RoundTrip, prev_failed: bool) -> TransactionOutcome {
        for t in rt.command_tags.iter().rev() {
            match t.as_str() {
                "ROLLBACK" => return TransactionOutcome::RolledBack,
                "COMMIT" => return TransactionOutcome::Committed,
                _ => {}
            }
        }
        if prev_failed {
            return TransactionOutcome::RolledBack;
        }
        for s in rt.statements.iter().rev() {
            match s.verb().as_deref() {
                Some("COMMIT" | "END") => return TransactionOutcome::Committed,
                Some("ROLLBACK" | "ABORT") => return TransactionOutcome::RolledBack,
                _ => {}
            }
        }
        TransactionOutcome::Unknown
    }

    fn track_transaction(conn: &mut Conn, rt: &RoundTrip, s: u8, out: &mut Vec<PgEvent>) {
        let prev = conn.status;
        let n_stmts = rt.statements.len() as u32;
        let in_block = s == b'T' || s == b'E';
        match (prev, in_block) {
            (Some(b'T' | b'E'), true) => {
                let t = conn.txn.get_or_insert(Transaction {
                    socket: conn.socket,
                    start_ns: rt.start_ns,
                    end_ns: None,
                    round_trips: 0,
                    statements: 0,
                    outcome: TransactionOutcome::Open,
                    started_before_attach: true,
                });
                t.round_trips += 1;
                t.statements += n_stmts;
            }
            (_, true) => {
                // Idle (or unknown) before, in a block after: the transaction begins here,
                // unless the status was unknown and nothing here began it.
                let began_here = prev.is_some()
                    || rt.command_tags.iter().any(|t| t == "BEGIN" || t == "START TRANSACTION")
                    || rt.statements.iter().any(|s| matches!(s.verb().as_deref(), Some("BEGIN" | "START")));
                conn.txn = Some(Transaction {
                    socket: conn.socket,
                    start_ns: rt.start_ns,
                    end_ns: None,
                    round_trips: 1,
                    statements: n_stmts,
                    outcome: TransactionOutcome::Open,
                    started_before_attach: !began_here,
                });
            }
            (Some(b'T' | b'E'), false) => {
                let mut t = conn.txn.take().unwrap_or(Transaction {
                    socket: conn.socket,
                    start_ns: rt.start_ns,
                    end_ns: None,
                    round_trips: 0,
                    statements: 0,
                    outcome: TransactionOutcome::Open,
                    started_before_attach: true,
                });
                t.round_trips += 1;
                t.statements += n_stmts;
                t.end_ns = rt.end_ns;
                t.outcome = Self::outcome(rt, prev == Some(b'E'));
                out.push(PgEvent::Transaction(t));
            }
            (_, false) => {
                // Idle before and after: a whole transaction inside one round trip?
                let began = rt.command_tags.iter().any(|t| t == "BEGIN")
                    || (rt.command_tags.is_empty()
                        && rt.statements.iter().any(|s| matches!(s.verb().as_deref(), Some("BEGIN" | "START"))));
                if began && rt.statements.len() > 1 {
                    out.push(PgEvent::Transaction(Transaction {
                        socket: conn.socket,
                        start_ns: rt.start_ns,
                        end_ns: rt.end_ns,
                        round_trips: 1,
                        statements: n_stmts,
                        outcome: Self::outcome(rt, false),
                        started_before_attach: false,
                    }));
                }
            }
        }
    }

    /// The connection is closed (the client sent Terminate, or the producer saw the socket
    /// close): round trips still waiting end unanswered, an open transaction is reported
    /// open, and the connection's state is freed. Later chunks of this socket id start a
    /// new connection.
    pub fn close(&mut self, socket: u64, out: &mut Vec<PgEvent>) {
        let Some(mut conn) = self.conns.remove(&socket) else { return };
        let mut waiting: Vec<Builder> = conn.pending.drain(..).collect();
        if let Some(b) = conn.building.take() {
            waiting.push(b);
        }
        for b in waiting {
            Self::close_unanswered(&mut conn, &mut self.stats, b, out);
        }
        if let Some(t) = conn.txn.take() {
            out.push(PgEvent::Transaction(t));
        }
        conn.front.finish();
        conn.back.finish();
        self.stats.frontend.add(&conn.front.stats);
        self.stats.backend.add(&conn.back.stats);
    }

    /// End of capture: [`PgDecoder::close`] every connection, in socket order.
    pub fn finish(&mut self, out: &mut Vec<PgEvent>) {
        let mut sockets: Vec<u64> = self.conns.keys().copied().collect();
        sockets.sort_unstable();
        for s in sockets {
            self.close(s, out);
        }
    }

    /// Counters so far (framing counts of open connections included).
    pub fn stats(&self) -> PgDecodeStats {
        let mut s = self.stats;
        for c in self.conns.values() {
            s.frontend.add(&c.front.stats);
            s.backend.add(&c.back.stats);
        }
        s
    }

    /// Bytes of messages in progress (partially received) over all connections, per side
    /// (frontend, backend): before [`PgDecoder::finish`], `bytes = message_bytes +
    /// undecodable_bytes + pending` holds for each side of [`PgDecoder::stats`]; after it,
    /// pending bytes are undecodable.
    pub fn pending_bytes(&self) -> (u64, u64) {
        self.conns
            .values()
            .fold((0, 0), |(f, b), c| (f + c.front.pending_bytes(), b + c.back.pending_bytes()))
    }
}
