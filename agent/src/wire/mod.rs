//! Decoders for the payload heads the kernel captures on the target's TCP sockets.
//!
//! A BPF program records, for each send and receive syscall of the target on a classified
//! socket (`sendto`, `recvfrom`, `write`, `read`, `writev`, `readv`, ...), one [`Chunk`]: when,
//! who, which socket, which way, how many bytes the syscall moved in total, and the first
//! bytes of the buffer (the *head*, bounded, e.g. 256 bytes) plus optionally its last bytes
//! (the *tail*, e.g. 64 bytes). Sockets are classified in the kernel ([`Protocol`]): PostgreSQL
//! (peer port 5432 or a configured port; the target is the *client*) or HTTP/1 (one of the
//! target's listening ports; the target is the *server*).
//!
//! The decoders turn the time-ordered chunks of each socket into events:
//! - [`pg`]: PostgreSQL frontend/backend messages (source: the PostgreSQL documentation,
//!   chapter 55 "Frontend/Backend Protocol", sections "Message Flow" and "Message Formats")
//!   into round trips with their statement shapes, pings and transactions;
//! - [`http`]: HTTP/1.x request lines and response status lines (source: RFC 9112) into
//!   requests per templated endpoint, paired with their status codes.
//!
//! [`WireDecoder`] dispatches chunks to both and folds their events into a [`WireSummary`]
//! (serde, it goes into `profile.json`), whose [`WireSummary::per_request`] gives the
//! per-HTTP-request figures the ranking uses.
//!
//! Because only a head (and tail) of each buffer is captured, a message can be cut. The
//! decoders never guess across a cut: they follow the protocol's own length fields over the
//! bytes they did not see ([`Chunk::total_len`] says how many), and when a message boundary
//! falls inside bytes they did not see, they count what they could not decode and wait for a
//! point where the framing can be proven again (see [`pg`] and [`http`] for the exact rules).
//! Nothing from HTTP headers or bodies, nor any PostgreSQL parameter value, row value,
//! password or error text, is kept in any event or summary.
//!
//! [`capture`] reads and writes a plain-text capture format (one chunk per line) used by the
//! test fixtures in `agent/tests/data/wire/` and for replaying recorded traffic.

use serde::{Deserialize, Serialize};

pub mod capture;
pub mod http;
pub mod pg;
pub mod resolve;
pub mod serving;
pub mod spread;
pub mod sql;
pub mod summary;

pub use summary::{PerRequest, WireSummary};

/// The hash map of the decoders' per-record lookups (sockets, statement names, shapes):
/// foldhash's fast hasher instead of std's SipHash, which cost about 7% of the decode time of
/// a PostgreSQL-heavy load (`examples/wire_decode_rate.rs pg`). Keys come from the target's
/// traffic, but a map holds at most a bounded number of them per connection.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Which way the bytes of a [`Chunk`] went, seen from the target process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// The target sent the bytes (send, sendto, sendmsg, write, writev).
    Tx,
    /// The target received the bytes (recv, recvfrom, recvmsg, read, readv).
    Rx,
}

/// How the kernel classified the socket of a [`Chunk`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// A connection to PostgreSQL (peer port 5432 or the configured database port): the
    /// target is the client, so `Tx` carries frontend messages and `Rx` backend messages.
    Postgres,
    /// A connection accepted on one of the target's listening ports: the target is the HTTP
    /// server, so `Rx` carries requests and `Tx` responses.
    Http,
}

/// One send or receive syscall of the target on a classified socket, as the BPF side
/// records it.
///
/// Contract for the producer (the BPF program and the code draining it):
/// - one chunk per syscall that moved at least one byte (syscalls returning 0 or an error,
///   such as `EAGAIN`, produce no chunk; a chunk with `total_len == 0` is ignored);
/// - `total_len` is the syscall's return value: the number of bytes it really moved;
/// - `head` holds the first `min(total_len, bound)` bytes of the data, `tail` the last
///   `min(total_len, tail bound)` bytes (empty when the producer does not capture tails;
///   for vectored I/O the head/tail are of the concatenated iovecs). Head and tail may
///   overlap when the data is short: the decoder uses them together only as
///   `[0, head.len())` and `[total_len - tail.len(), total_len)`;
/// - chunks of one socket are pushed in syscall order (by `ts_ns`; ties keep their order).
///   Chunks of different sockets may interleave freely.
///
/// Capturing a tail of about 64 bytes is strongly recommended: the message that ends a
/// PostgreSQL exchange (`Sync` from the client, `ReadyForQuery` from the server) sits at
/// the end of a buffer, and a tail lets the decoder see it exactly after a long message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    /// When the syscall returned, ns of `CLOCK_MONOTONIC` (`bpf_ktime_get_ns`).
    pub ts_ns: u64,
    /// Process id (tgid) of the target process.
    pub pid: u32,
    /// Thread id of the thread that made the syscall.
    pub tid: u32,
    /// A stable id of the socket for its lifetime, e.g. the socket cookie
    /// (`bpf_get_socket_cookie`). Never reused while the connection is open.
    pub socket: u64,
    /// The socket's class.
    pub protocol: Protocol,
    /// Sent or received by the target.
    pub direction: Direction,
    /// Bytes the syscall moved in total (its return value).
    pub total_len: u64,
    /// The first bytes of the data (at most `total_len`).
    pub head: Vec<u8>,
    /// The last bytes of the data (at most `total_len`); empty when not captured.
    pub tail: Vec<u8>,
}

/// A part of a chunk's data: bytes that were captured, or a run of bytes that were not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Piece<'a> {
    /// Captured bytes, in order.
    Bytes(&'a [u8]),
    /// This many bytes were moved by the syscall but not captured.
    Gap(u64),
}

/// The (at most three) pieces of a chunk: head, gap, tail; on the stack, as a slice.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pieces<'a> {
    items: [Piece<'a>; 3],
    len: usize,
}

impl<'a> Pieces<'a> {
    fn push(&mut self, p: Piece<'a>) {
        self.items[self.len] = p;
        self.len += 1;
    }
}

impl<'a> std::ops::Deref for Pieces<'a> {
    type Target = [Piece<'a>];
    fn deref(&self) -> &[Piece<'a>] {
        &self.items[..self.len]
    }
}

impl Piece<'_> {
    /// Bytes this piece covers.
    pub(crate) fn len(&self) -> u64 {
        match self {
            Piece::Bytes(b) => b.len() as u64,
            Piece::Gap(n) => *n,
        }
    }
}

impl Chunk {
    /// A chunk whose data was captured in full (`head` = all the bytes, no tail).
    pub fn complete(
        ts_ns: u64,
        socket: u64,
        protocol: Protocol,
        direction: Direction,
        data: &[u8],
    ) -> Chunk {
        Chunk {
            ts_ns,
            pid: 0,
            tid: 0,
            socket,
            protocol,
            direction,
            total_len: data.len() as u64,
            head: data.to_vec(),
            tail: Vec::new(),
        }
    }

    /// This chunk as the kernel would have captured it with a head bound of `head_max`
    /// bytes and a tail bound of `tail_max` bytes (0 = no tail): what the BPF side sends.
    /// Only the captured bytes are reduced; `total_len` is unchanged.
    pub fn bounded(&self, head_max: usize, tail_max: usize) -> Chunk {
        let full = self.captured_if_complete();
        let mut c = self.clone();
        match full {
            Some(data) if data.len() > head_max => {
                c.head = data[..head_max].to_vec();
                let t = tail_max.min(data.len() - head_max);
                c.tail = data[data.len() - t..].to_vec();
            }
            Some(data) => {
                c.head = data;
                c.tail = Vec::new();
            }
            None => {
                c.head.truncate(head_max);
                let keep = c.tail.len().min(tail_max);
                c.tail.drain(..c.tail.len() - keep);
            }
        }
        c
    }

    /// True when every byte the syscall moved was captured (head and tail together).
    pub fn is_complete(&self) -> bool {
        self.head.len() as u64 + self.tail.len() as u64 >= self.total_len
    }

    /// Bytes captured without double-counting a head/tail overlap, at most `total_len`.
    pub fn captured_len(&self) -> u64 {
        (self.head.len() as u64 + self.tail.len() as u64).min(self.total_len())
    }

    /// `total_len`, raised to the head's length if a producer bug made it smaller.
    pub(crate) fn total_len(&self) -> u64 {
        self.total_len.max(self.head.len() as u64)
    }

    /// All the data, when head and tail together cover it.
    fn captured_if_complete(&self) -> Option<Vec<u8>> {
        let total = self.total_len();
        let h = self.head.len() as u64;
        if h >= total {
            return Some(self.head[..total as usize].to_vec());
        }
        let t = self.tail.len() as u64;
        if h + t >= total {
            let from_tail = (total - h) as usize;
            let mut v = self.head.clone();
            v.extend_from_slice(&self.tail[self.tail.len() - from_tail..]);
            return Some(v);
        }
        None
    }

    /// The chunk's data as captured pieces and gaps, in order, covering `total_len` bytes.
    pub(crate) fn pieces(&self) -> Pieces<'_> {
        let total = self.total_len();
        let h = self.head.len() as u64;
        let mut v = Pieces { items: [Piece::Gap(0); 3], len: 0 };
        if h >= total {
            v.push(Piece::Bytes(&self.head[..total as usize]));
            return v;
        }
        let t = (self.tail.len() as u64).min(total - h);
        let gap = total - h - t;
        let tail = &self.tail[self.tail.len() - t as usize..];
        if h > 0 {
            v.push(Piece::Bytes(&self.head));
        }
        if gap > 0 {
            v.push(Piece::Gap(gap));
        }
        if t > 0 {
            v.push(Piece::Bytes(tail));
        }
        v
    }
}

/// One decoded event of either protocol.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "protocol", rename_all = "snake_case")]
pub enum WireEvent {
    /// A PostgreSQL event.
    Postgres(pg::PgEvent),
    /// An HTTP/1 event.
    Http(http::HttpEvent),
}

/// Options of [`WireDecoder`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireOptions {
    /// Keep every decoded event for [`WireDecoder::take_events`] (tests, timelines).
    /// Default is `false`: only the [`WireSummary`] is built, in bounded memory.
    pub keep_events: bool,
}

/// Both decoders and the summary they feed: push chunks in, read a [`WireSummary`] out.
#[derive(Debug, Default)]
pub struct WireDecoder {
    options: WireOptions,
    pg: pg::PgDecoder,
    http: http::HttpDecoder,
    summary: summary::SummaryBuilder,
    times: resolve::RoundTripTimes,
    serving: serving::ServingTimeline,
    events: Vec<WireEvent>,
    scratch_pg: Vec<pg::PgEvent>,
    scratch_http: Vec<http::HttpEvent>,
}

impl WireDecoder {
    /// A decoder with these options.
    pub fn new(options: WireOptions) -> WireDecoder {
        WireDecoder { options, ..WireDecoder::default() }
    }

    /// Decode one chunk (see [`Chunk`] for the ordering contract).
    pub fn push(&mut self, chunk: &Chunk) {
        match chunk.protocol {
            Protocol::Postgres => self.pg.push(chunk, &mut self.scratch_pg),
            Protocol::Http => self.http.push(chunk, &mut self.scratch_http),
        }
        let request = self.scratch_http.iter().rev().find_map(|e| match e {
            http::HttpEvent::Request(r) => Some((r.method.as_str(), r.target.as_str())),
            _ => None,
        });
        self.serving.observe(chunk, request);
        self.fold();
    }

    /// Decode many chunks in order.
    pub fn push_all<'a>(&mut self, chunks: impl IntoIterator<Item = &'a Chunk>) {
        for c in chunks {
            self.push(c);
        }
    }

    fn fold(&mut self) {
        for e in self.scratch_pg.drain(..) {
            if let pg::PgEvent::RoundTrip(rt) = &e {
                if rt.kind != pg::RoundTripKind::Ping {
                    let before = match rt.statements.first() {
                        Some(pg::StatementShape::PreparedBeforeAttach { name, .. }) => Some(name.as_str()),
                        _ => None,
                    };
                    self.times.add(rt.socket, rt.start_ns, before);
                }
                self.serving.round_trip(rt);
            }
            if let pg::PgEvent::Connected { socket, setup_ns: Some(ns), .. } = &e {
                self.serving.connected(*socket, *ns);
            }
            self.summary.add_pg(&e);
            if self.options.keep_events {
                self.events.push(WireEvent::Postgres(e));
            }
        }
        for e in self.scratch_http.drain(..) {
            self.summary.add_http(&e);
            if self.options.keep_events {
                self.events.push(WireEvent::Http(e));
            }
        }
    }

    /// The producer saw this socket close: free its state (see [`pg::PgDecoder::close`],
    /// [`http::HttpDecoder::close`]). Without it, state lives until [`WireDecoder::finish`].
    pub fn close_socket(&mut self, protocol: Protocol, socket: u64) {
        self.serving.close_socket(protocol, socket);
        match protocol {
            Protocol::Postgres => self.pg.close(socket, &mut self.scratch_pg),
            Protocol::Http => self.http.close(socket, &mut self.scratch_http),
        }
        self.fold();
    }

    /// Who each thread served when, from the chunks pushed so far (see [`serving`]); the
    /// decoder starts a new timeline.
    pub fn take_serving(&mut self) -> serving::Serving {
        std::mem::take(&mut self.serving).finish()
    }

    /// How the HTTP requests decoded so far spread over time ([`spread::RequestSpread`]),
    /// emptied.
    pub fn take_request_spread(&mut self) -> spread::RequestSpread {
        self.summary.take_request_spread()
    }

    /// The events decoded so far (only with [`WireOptions::keep_events`]), emptied.
    pub fn take_events(&mut self) -> Vec<WireEvent> {
        std::mem::take(&mut self.events)
    }

    /// End of the capture: close what is still open (round trips never answered,
    /// transactions still open) and return the summary of everything pushed.
    /// Statements prepared before the capture are merged by name
    /// ([`WireSummary::apply_statement_texts`] with no text).
    pub fn finish(self) -> (WireSummary, Vec<WireEvent>) {
        let (mut summary, events, _) = self.finish_with_times();
        summary.apply_statement_texts(&std::collections::HashMap::new());
        (summary, events)
    }

    /// [`WireDecoder::finish`] without the merge of the statements prepared before the
    /// capture (their shapes still name their connection by its socket id, a kernel address
    /// that must not reach a report: call [`WireSummary::apply_statement_texts`], with the
    /// texts recovered or an empty map, before writing it), and the start times of the
    /// round trips per connection that [`resolve::match_texts`] matches to PostgreSQL's own
    /// view of its connections.
    pub fn finish_with_times(mut self) -> (WireSummary, Vec<WireEvent>, resolve::RoundTripTimes) {
        self.pg.finish(&mut self.scratch_pg);
        self.http.finish(&mut self.scratch_http);
        self.fold();
        let summary = self.summary.build(self.pg.stats(), self.http.stats());
        (summary, self.events, self.times)
    }
}
