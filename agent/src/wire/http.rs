//! HTTP/1.x decoder for the server side of the target's accepted connections: the request
//! line of each request (received, `Rx`) and the status code of each response (sent, `Tx`).
//!
//! Source: RFC 9112 "HTTP/1.1" (message format, §2-§3 request line, §4 status line, §6
//! message body length, §7.1 chunked transfer coding).
//!
//! Kept per request: the method, and the request target *templated* ([`template_target`]):
//! numeric and UUID-looking path segments become `{id}`, query values are dropped and only
//! the keys kept (`/api/deals/123?page=2` -> `/api/deals/{id}?page`). Nothing from header
//! fields or bodies is kept: the header section is read only to find where the message
//! ends (`Content-Length`, `Transfer-Encoding`), and the values of those two fields are the
//! only ones parsed; an `Authorization` header or a password in a body never reaches an
//! event. Responses are paired with requests in order (HTTP/1.1 answers in request order
//! on a connection, RFC 9112 §9.3.2), interim `1xx` responses excepted.
//!
//! Framing across cut heads: a body of known length is skipped exactly over uncaptured
//! bytes; when a start line or header section runs into uncaptured bytes, framing is lost
//! (a request line cut by the capture bound is still reported, marked truncated). While
//! lost, bytes are counted as undecodable; framing is regained at the start of a chunk that
//! begins with a well-formed request line (`METHOD SP /target SP HTTP/1.x CRLF`, or a valid
//! prefix of it running to the end of a cut head) or status line (`HTTP/1.x DDD`). When the
//! request side regains framing, requests still waiting for their response are reported
//! without a status (requests may have been missed in between, and a non-pipelining client
//! only sends a request after the previous response), so that later responses are not
//! paired with the wrong requests.
//!
//! When the producer keeps only the start line of each HTTP buffer (the collector's policy:
//! headers never leave the kernel), every request and response loses framing right after
//! its start line and regains it at the next chunk, by design: `sync_losses` then counts
//! about one per message and `undecodable_bytes` all header and body bytes. Requests and
//! statuses are still exact for clients that send one request per write; requests
//! pipelined behind another in the same buffer are not seen.

use std::collections::VecDeque;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Chunk, Direction, Piece};

/// Longest start line kept, bytes (longer ones are reported truncated).
pub const MAX_START_LINE: usize = 8192;
/// Longest header line examined, bytes (only `Content-Length`/`Transfer-Encoding` matter).
const MAX_HEADER_LINE_KEPT: usize = 256;
/// Longest request target kept after templating, characters.
pub const MAX_TARGET: usize = 512;

/// One request line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpRequest {
    /// Socket id.
    pub socket: u64,
    /// Process and thread that received it.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// When the chunk holding the request line was received, ns.
    pub ts_ns: u64,
    /// The method (`GET`, `POST`, ...).
    pub method: String,
    /// The templated target ([`template_target`]).
    pub target: String,
    /// The request line was cut by the capture bound (target ends with `…`).
    pub truncated: bool,
}

impl HttpRequest {
    /// `METHOD target`, the endpoint key of the summary.
    pub fn endpoint(&self) -> String {
        format!("{} {}", self.method, self.target)
    }
}

/// One final response's status, with the request it answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpResponse {
    /// Socket id.
    pub socket: u64,
    /// When the chunk holding the status line was sent, ns.
    pub ts_ns: u64,
    /// The status code (100..=999).
    pub status: u16,
    /// The endpoint (`METHOD target`) of the request it answers; `None` when no request was
    /// waiting (its request line was not decoded).
    pub endpoint: Option<String>,
    /// From the request's chunk to this response's chunk, ns.
    pub latency_ns: Option<u64>,
}

/// A decoded HTTP event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum HttpEvent {
    /// A request line.
    Request(HttpRequest),
    /// A final response's status line.
    Response(HttpResponse),
    /// A request whose response was never decoded (framing lost, or capture ended).
    NoResponse {
        /// The endpoint of the request.
        endpoint: String,
        /// Socket id.
        socket: u64,
    },
}

/// Byte accounting of one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpFramingStats {
    /// Bytes the syscalls moved.
    pub bytes: u64,
    /// Bytes captured.
    pub captured_bytes: u64,
    /// Bytes of messages framed (start line, headers and bodies, uncaptured parts included).
    pub message_bytes: u64,
    /// Bytes that could not be framed (out of sync, garbage).
    pub undecodable_bytes: u64,
    /// Bytes after a protocol switch (`101`, HTTP/2 preface): not HTTP/1.
    pub opaque_bytes: u64,
    /// Start lines decoded.
    pub messages: u64,
    /// Times framing was lost.
    pub sync_losses: u64,
    /// Times framing was regained at a chunk start.
    pub resyncs: u64,
}

impl HttpFramingStats {
    fn add(&mut self, o: &HttpFramingStats) {
        self.bytes += o.bytes;
        self.captured_bytes += o.captured_bytes;
        self.message_bytes += o.message_bytes;
        self.undecodable_bytes += o.undecodable_bytes;
        self.opaque_bytes += o.opaque_bytes;
        self.messages += o.messages;
        self.sync_losses += o.sync_losses;
        self.resyncs += o.resyncs;
    }
}

/// Counters of the HTTP decoder.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpDecodeStats {
    /// Received side (requests).
    pub requests: HttpFramingStats,
    /// Sent side (responses).
    pub responses: HttpFramingStats,
    /// Final responses with no request waiting.
    pub unpaired_responses: u64,
    /// Requests never answered by a decoded status.
    pub requests_without_status: u64,
    /// Connections on which at least one request line was decoded. Without pipelining (which
    /// clients rarely use) HTTP/1.1 serves one request per connection at a time, so at most
    /// this many requests were in flight at once: a bound on the clients' concurrency that
    /// requests queued unread in the kernel (all of them, when the runtime's workers are
    /// blocked) do not lower. Many short connections make it a loose bound.
    #[serde(default)]
    pub connections: u64,
}

/// Template a request target (RFC 9112 §3.2): path segments that are all digits, a UUID
/// (8-4-4-4-12 hex digits), or 16 or more hex digits with at least one digit become `{id}`;
/// of the query only the keys are kept (templated the same way), each once, in order of
/// first appearance; a fragment is dropped; the scheme and authority of an absolute-form
/// target are dropped. `truncated` = the target was cut by the capture bound: its last
/// (partial) component is dropped and `…` appended. The result is at most [`MAX_TARGET`]
/// characters.
pub fn template_target(raw: &str, truncated: bool) -> String {
    if raw == "*" {
        return "*".to_string();
    }
    let mut t = raw;
    let lower = t.get(..8).map(|s| s.to_ascii_lowercase()).unwrap_or_default();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        let after = &t[t.find("//").map(|i| i + 2).unwrap_or(0)..];
        t = after.find(['/', '?']).map(|i| &after[i..]).unwrap_or("/");
        if !t.starts_with('/') {
            // "http://host?x" -> "/?x"
            return template_target(&format!("/{t}"), truncated);
        }
    }
    let t = t.split('#').next().unwrap_or("");
    let (path, query) = match t.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (t, None),
    };
    let mut segs: Vec<String> = path.split('/').map(template_segment).collect();
    let mut keys: Vec<String> = Vec::new();
    if let Some(q) = query {
        for part in q.split('&') {
            let k = part.split('=').next().unwrap_or("");
            if k.is_empty() {
                continue;
            }
            let k = template_segment(k);
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
    }
    if truncated {
        match query {
            Some(q) => {
                // Drop the key being cut, unless the cut fell inside its value.
                let last = q.rsplit('&').next().unwrap_or("");
                if !last.contains('=') && !last.is_empty() {
                    keys.pop();
                }
            }
            None => {
                segs.pop();
            }
        }
    }
    let mut out = segs.join("/");
    if out.is_empty() || (truncated && query.is_none()) {
        // "/" alone, or the directory of a cut last segment: "/api/dea" -> "/api/…".
        out.push('/');
    }
    if query.is_some() {
        out.push('?');
        out.push_str(&keys.join("&"));
    }
    if truncated {
        out.push('…');
    }
    if out.chars().count() > MAX_TARGET {
        out = out.chars().take(MAX_TARGET - 1).collect();
        out.push('…');
    }
    out
}

fn template_segment(s: &str) -> String {
    let b = s.as_bytes();
    let digits = !b.is_empty() && b.iter().all(u8::is_ascii_digit);
    let uuid = b.len() == 36
        && b.iter().enumerate().all(|(i, c)| if matches!(i, 8 | 13 | 18 | 23) { *c == b'-' } else { c.is_ascii_hexdigit() });
    let hex = b.len() >= 16 && b.iter().all(u8::is_ascii_hexdigit) && b.iter().any(u8::is_ascii_digit);
    if digits || uuid || hex {
        "{id}".to_string()
    } else {
        s.to_string()
    }
}

fn is_method(m: &[u8]) -> bool {
    (1..=20).contains(&m.len()) && m.iter().all(|c| c.is_ascii_uppercase() || *c == b'-' || *c == b'_')
}

fn target_char_ok(c: u8) -> bool {
    c > 0x20 && c != 0x7f
}

/// A parsed request line: (method, raw target, version-is-HTTP/1).
fn parse_request_line(line: &[u8]) -> Option<(&[u8], &[u8], bool)> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut it = line.splitn(3, |&c| c == b' ');
    let m = it.next()?;
    let t = it.next()?;
    let v = it.next()?;
    if !is_method(m) || t.is_empty() || !t.iter().all(|&c| target_char_ok(c)) {
        return None;
    }
    if !(t[0] == b'/' || t == b"*" || t.starts_with(b"http://") || t.starts_with(b"https://")) && m != b"CONNECT" {
        return None;
    }
    let http1 = v == b"HTTP/1.1" || v == b"HTTP/1.0";
    if !(http1 || (v.starts_with(b"HTTP/") && v.len() == 8)) {
        return None;
    }
    Some((m, t, http1))
}

/// A cut request line (the head ended before its end): method and target prefix.
fn parse_cut_request_line(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let sp = line.iter().position(|&c| c == b' ')?;
    let (m, rest) = (&line[..sp], &line[sp + 1..]);
    if !is_method(m) || rest.is_empty() || rest[0] != b'/' {
        return None;
    }
    let t_end = rest.iter().position(|&c| c == b' ').unwrap_or(rest.len());
    let t = &rest[..t_end];
    if !t.iter().all(|&c| target_char_ok(c)) {
        return None;
    }
    if t_end < rest.len() {
        // The version started: it must be a prefix of "HTTP/1.x".
        let v = &rest[t_end + 1..];
        if !b"HTTP/1.1".starts_with(v) && !b"HTTP/1.0".starts_with(v) {
            return None;
        }
    }
    Some((m, t))
}

/// A non-empty prefix of a request line: `METHOD`, `METHOD SP /tar`, `METHOD SP /t SP HTT`.
fn is_request_line_prefix(b: &[u8]) -> bool {
    let b = b.strip_suffix(b"\r").unwrap_or(b);
    let Some(&first) = b.first() else { return false };
    if !first.is_ascii_uppercase() {
        return false;
    }
    match b.iter().position(|&c| c == b' ') {
        None => is_method(b),
        Some(sp) if sp + 1 == b.len() => is_method(&b[..sp]),
        Some(_) => parse_cut_request_line(b).is_some(),
    }
}

/// The status code of a status line (`HTTP/1.x DDD ...`).
fn parse_status_line(line: &[u8]) -> Option<u16> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.len() < 12 || !(line.starts_with(b"HTTP/1.1 ") || line.starts_with(b"HTTP/1.0 ")) {
        return None;
    }
    let d = &line[9..12];
    if !d.iter().all(u8::is_ascii_digit) || (line.len() > 12 && line[12] != b' ') || d[0] == b'0' {
        return None;
    }
    Some(((d[0] - b'0') as u16) * 100 + ((d[1] - b'0') as u16) * 10 + (d[2] - b'0') as u16)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Requests,
    Responses,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Fresh,
    Lost,
    /// Reading a start line (`line` holds what was read of it).
    StartLine,
    /// Reading the header section.
    Headers,
    /// Skipping this many body bytes.
    Body(u64),
    /// Reading a chunk-size line.
    ChunkSize,
    /// Skipping chunk data, then its CRLF.
    ChunkData(u64),
    /// Reading the line after chunk data (its CRLF).
    ChunkEnd,
    /// Reading trailer lines until an empty line.
    Trailers,
    /// The body runs to the end of the connection.
    UntilClose,
    /// Not HTTP/1 any more (protocol switch).
    Opaque,
}

#[derive(Debug)]
struct Parser {
    side: Side,
    state: State,
    /// The current line (start line, header line, chunk-size line), capped.
    line: Vec<u8>,
    /// Length of the current line, beyond the cap too.
    line_len: usize,
    content_length: Option<u64>,
    chunked: bool,
    /// Responses: the current response must not have a body (HEAD, 1xx, 204, 304).
    no_body: bool,
    /// Responses: switch to opaque after the header section (101).
    switch: bool,
    stats: HttpFramingStats,
}

/// Per-socket context the parsers report to.
struct Ctx<'a> {
    socket: u64,
    pid: u32,
    tid: u32,
    ts: u64,
    pending: &'a mut VecDeque<Waiting>,
    endpoints: &'a mut EndpointCache,
    stats: &'a mut HttpDecodeStats,
    out: &'a mut Vec<HttpEvent>,
}

/// A request waiting for its response on a connection.
#[derive(Debug)]
struct Waiting {
    endpoint: Arc<Endpoint>,
    ts_ns: u64,
}

/// A request line's method, templated target and endpoint key (`METHOD target`).
#[derive(Debug)]
struct Endpoint {
    method: String,
    target: String,
    key: String,
}

/// Most raw request lines [`EndpointCache`] remembers; it starts afresh when full.
const ENDPOINT_CACHE_LINES: usize = 4096;

/// Templated endpoints by raw method, target and cut flag, so that a request line seen
/// before costs a hash lookup instead of [`template_target`] and its allocations.
#[derive(Debug, Default)]
struct EndpointCache {
    by_raw: std::collections::HashMap<Box<[u8]>, Arc<Endpoint>, foldhash::fast::RandomState>,
    /// The key being looked up (method, SP, target, cut flag), reused.
    scratch: Vec<u8>,
}

impl EndpointCache {
    fn get(&mut self, method: &[u8], target: &[u8], cut: bool) -> Arc<Endpoint> {
        self.scratch.clear();
        self.scratch.extend_from_slice(method);
        self.scratch.push(b' ');
        self.scratch.extend_from_slice(target);
        self.scratch.push(u8::from(cut));
        if let Some(e) = self.by_raw.get(self.scratch.as_slice()) {
            return Arc::clone(e);
        }
        let method = String::from_utf8_lossy(method).into_owned();
        let target = template_target(&String::from_utf8_lossy(target), cut);
        let key = format!("{method} {target}");
        let e = Arc::new(Endpoint { method, target, key });
        if self.by_raw.len() >= ENDPOINT_CACHE_LINES {
            self.by_raw.clear();
        }
        self.by_raw.insert(self.scratch.as_slice().into(), Arc::clone(&e));
        e
    }
}

impl Parser {
    fn new(side: Side) -> Parser {
        Parser {
            side,
            state: State::Fresh,
            line: Vec::new(),
            line_len: 0,
            content_length: None,
            chunked: false,
            no_body: false,
            switch: false,
            stats: HttpFramingStats::default(),
        }
    }

    fn lost(&self) -> bool {
        matches!(self.state, State::Fresh | State::Lost)
    }

    fn lose(&mut self, ctx: &mut Ctx<'_>) {
        if self.state != State::Fresh {
            self.stats.sync_losses += 1;
        }
        self.state = State::Lost;
        self.line.clear();
        self.line_len = 0;
        let _ = ctx;
    }

    /// Does this chunk start with a start line (see the module docs)? A chunk that ends
    /// (or whose head ends) before the line does must hold a valid prefix of one.
    fn starts_message(&self, pieces: &[Piece<'_>]) -> bool {
        let Some(Piece::Bytes(b)) = pieces.first() else { return false };
        let b = &b[..b.len().min(MAX_START_LINE)];
        match b.iter().position(|&c| c == b'\n') {
            Some(lf) => match self.side {
                Side::Requests => parse_request_line(&b[..lf]).is_some(),
                Side::Responses => parse_status_line(&b[..lf]).is_some(),
            },
            None => match self.side {
                Side::Requests => is_request_line_prefix(b),
                Side::Responses => {
                    let b = b.strip_suffix(b"\r").unwrap_or(b);
                    if b.len() >= 12 {
                        parse_status_line(&b[..12]).is_some()
                    } else {
                        (b"HTTP/1.1 200".starts_with(b) || b"HTTP/1.0 200".starts_with(b)
                            || (b.len() > 9 && b[..9] == *b"HTTP/1.1 " && b[9..].iter().all(u8::is_ascii_digit)))
                            && !b.is_empty()
                    }
                }
            },
        }
    }

    fn push(&mut self, pieces: &[Piece<'_>], ctx: &mut Ctx<'_>) {
        if self.lost() {
            if self.starts_message(pieces) {
                if self.state == State::Lost {
                    self.stats.resyncs += 1;
                    if self.side == Side::Requests {
                        // Requests may have been missed while framing was lost, and a client
                        // sends a request after the previous response: requests still waiting
                        // now are not paired with later responses (they would be the wrong ones).
                        for r in ctx.pending.drain(..) {
                            ctx.stats.requests_without_status += 1;
                            ctx.out.push(HttpEvent::NoResponse { endpoint: r.endpoint.key.clone(), socket: ctx.socket });
                        }
                    }
                }
                self.state = State::StartLine;
                self.line.clear();
                self.line_len = 0;
            } else {
                self.state = State::Lost;
            }
        }
        for p in pieces {
            match *p {
                Piece::Bytes(b) => {
                    self.stats.bytes += b.len() as u64;
                    self.stats.captured_bytes += b.len() as u64;
                    self.bytes(b, ctx);
                }
                Piece::Gap(n) => {
                    self.stats.bytes += n;
                    self.gap(n, ctx);
                }
            }
        }
    }

    fn gap(&mut self, n: u64, ctx: &mut Ctx<'_>) {
        match self.state {
            State::Fresh | State::Lost => self.stats.undecodable_bytes += n,
            State::Opaque => self.stats.opaque_bytes += n,
            State::UntilClose => self.stats.message_bytes += n,
            State::Body(rem) | State::ChunkData(rem) if n <= rem => {
                self.stats.message_bytes += n;
                let left = rem - n;
                self.state = match (&self.state, left) {
                    (State::Body(_), 0) => State::StartLine,
                    (State::Body(_), l) => State::Body(l),
                    (_, 0) => State::ChunkEnd,
                    (_, l) => State::ChunkData(l),
                };
            }
            State::Body(rem) | State::ChunkData(rem) => {
                self.stats.message_bytes += rem;
                self.lose(ctx);
                self.stats.undecodable_bytes += n - rem;
            }
            State::StartLine if !self.line.is_empty() => {
                // The head ended inside the start line: report what was seen, cut.
                let line = std::mem::take(&mut self.line);
                let len = self.line_len as u64;
                if !self.start_line(&line, true, ctx) {
                    self.stats.message_bytes -= len;
                    self.stats.undecodable_bytes += len;
                }
                self.lose(ctx);
                self.stats.undecodable_bytes += n;
            }
            _ => {
                // Inside a header section, a chunk-size line or trailers: the end is unknown.
                self.lose(ctx);
                self.stats.undecodable_bytes += n;
            }
        }
    }

    fn bytes(&mut self, b: &[u8], ctx: &mut Ctx<'_>) {
        let mut i = 0;
        while i < b.len() {
            let rest = &b[i..];
            match self.state {
                State::Fresh | State::Lost => {
                    self.stats.undecodable_bytes += rest.len() as u64;
                    return;
                }
                State::Opaque => {
                    self.stats.opaque_bytes += rest.len() as u64;
                    return;
                }
                State::UntilClose => {
                    self.stats.message_bytes += rest.len() as u64;
                    return;
                }
                State::Body(rem) | State::ChunkData(rem) => {
                    let take = (rem.min(rest.len() as u64)) as usize;
                    self.stats.message_bytes += take as u64;
                    i += take;
                    let left = rem - take as u64;
                    self.state = match (&self.state, left) {
                        (State::Body(_), 0) => State::StartLine,
                        (State::Body(_), l) => State::Body(l),
                        (_, 0) => State::ChunkEnd,
                        (_, l) => State::ChunkData(l),
                    };
                }
                State::StartLine | State::Headers | State::ChunkSize | State::ChunkEnd | State::Trailers => {
                    let cap = if self.state == State::StartLine { MAX_START_LINE } else { MAX_HEADER_LINE_KEPT };
                    let (take, done) = match rest.iter().position(|&c| c == b'\n') {
                        Some(p) => (p + 1, true),
                        None => (rest.len(), false),
                    };
                    let room = cap.saturating_sub(self.line.len());
                    self.line.extend_from_slice(&rest[..take.min(room)]);
                    self.line_len += take;
                    self.stats.message_bytes += take as u64;
                    i += take;
                    if done {
                        let mut line = std::mem::take(&mut self.line);
                        let too_long = self.line_len > cap;
                        let full_len = self.line_len as u64;
                        self.line_len = 0;
                        if line.last() == Some(&b'\n') {
                            line.pop();
                        }
                        if line.last() == Some(&b'\r') {
                            line.pop();
                        }
                        if self.state == State::StartLine && !line.is_empty() && !self.start_line(&line, too_long, ctx) {
                            // Not a start line: garbage, not a message.
                            self.stats.message_bytes -= full_len;
                            self.stats.undecodable_bytes += full_len;
                        } else {
                            self.end_of_line(&line, ctx);
                        }
                        // The line's buffer is kept for the next line (no allocation per line).
                        line.clear();
                        if self.line.is_empty() {
                            self.line = line;
                        }
                    }
                }
            }
        }
    }

    /// A complete line in a state other than a (non-empty) start line.
    fn end_of_line(&mut self, line: &[u8], ctx: &mut Ctx<'_>) {
        match self.state {
            // An empty line before a request line is ignored (RFC 9112 §2.2); a non-empty
            // start line was handled by the caller.
            State::StartLine => {}
            State::Headers => {
                if line.is_empty() {
                    self.end_of_headers();
                    return;
                }
                let Some(colon) = line.iter().position(|&c| c == b':') else { return };
                let name = &line[..colon];
                let value = std::str::from_utf8(&line[colon + 1..]).unwrap_or("").trim();
                if name.eq_ignore_ascii_case(b"content-length") {
                    self.content_length = value.parse::<u64>().ok();
                } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                    self.chunked = value.rsplit(',').next().is_some_and(|c| c.trim().eq_ignore_ascii_case("chunked"));
                }
            }
            State::ChunkSize => {
                let s = std::str::from_utf8(line).unwrap_or("");
                let hex = s.split(';').next().unwrap_or("").trim();
                match u64::from_str_radix(hex, 16) {
                    Ok(0) => self.state = State::Trailers,
                    Ok(n) => self.state = State::ChunkData(n),
                    Err(_) => self.lose(ctx),
                }
            }
            State::ChunkEnd => {
                if line.is_empty() {
                    self.state = State::ChunkSize;
                } else {
                    self.lose(ctx);
                }
            }
            State::Trailers if line.is_empty() => self.state = State::StartLine,
            _ => {}
        }
    }

    /// Handle a start line (`cut` = it ended in uncaptured bytes or beyond the cap);
    /// returns false (and loses framing) when it is not a valid one.
    fn start_line(&mut self, line: &[u8], cut: bool, ctx: &mut Ctx<'_>) -> bool {
        self.content_length = None;
        self.chunked = false;
        self.no_body = false;
        self.switch = false;
        match self.side {
            Side::Requests => {
                let parsed = if cut {
                    parse_request_line(line).map(|(m, t, _)| (m, t, true)).or_else(|| parse_cut_request_line(line).map(|(m, t)| (m, t, true)))
                } else {
                    parse_request_line(line)
                };
                let Some((method, target, http1)) = parsed else {
                    self.lose(ctx);
                    return false;
                };
                if !http1 && !cut {
                    // HTTP/2 prior knowledge ("PRI * HTTP/2.0") or another version.
                    self.state = State::Opaque;
                    return true;
                }
                // A target that ran to the end of the cut head is itself cut.
                let target_cut = cut && !line.windows(6).any(|w| w == b" HTTP/");
                self.stats.messages += 1;
                let endpoint = ctx.endpoints.get(method, target, target_cut);
                ctx.out.push(HttpEvent::Request(HttpRequest {
                    socket: ctx.socket,
                    pid: ctx.pid,
                    tid: ctx.tid,
                    ts_ns: ctx.ts,
                    method: endpoint.method.clone(),
                    target: endpoint.target.clone(),
                    truncated: target_cut,
                }));
                ctx.pending.push_back(Waiting { endpoint, ts_ns: ctx.ts });
                self.state = State::Headers;
            }
            Side::Responses => {
                let Some(status) = parse_status_line(line) else {
                    self.lose(ctx);
                    return false;
                };
                self.stats.messages += 1;
                if (100..200).contains(&status) {
                    self.no_body = true;
                    self.switch = status == 101;
                    if status == 101 {
                        self.pair(status, ctx);
                    }
                } else {
                    let head = self.pair(status, ctx);
                    self.no_body = head || status == 204 || status == 304;
                }
                self.state = State::Headers;
            }
        }
        true
    }

    /// Pair a final response with the oldest waiting request; returns whether it was HEAD.
    fn pair(&mut self, status: u16, ctx: &mut Ctx<'_>) -> bool {
        match ctx.pending.pop_front() {
            Some(req) => {
                ctx.out.push(HttpEvent::Response(HttpResponse {
                    socket: ctx.socket,
                    ts_ns: ctx.ts,
                    status,
                    endpoint: Some(req.endpoint.key.clone()),
                    latency_ns: Some(ctx.ts.saturating_sub(req.ts_ns)),
                }));
                req.endpoint.method == "HEAD"
            }
            None => {
                ctx.stats.unpaired_responses += 1;
                ctx.out.push(HttpEvent::Response(HttpResponse {
                    socket: ctx.socket,
                    ts_ns: ctx.ts,
                    status,
                    endpoint: None,
                    latency_ns: None,
                }));
                false
            }
        }
    }

    fn end_of_headers(&mut self) {
        self.state = match self.side {
            Side::Requests => {
                if self.chunked {
                    State::ChunkSize
                } else {
                    match self.content_length {
                        Some(n) if n > 0 => State::Body(n),
                        _ => State::StartLine,
                    }
                }
            }
            Side::Responses => {
                if self.switch {
                    State::Opaque
                } else if self.no_body {
                    State::StartLine
                } else if self.chunked {
                    State::ChunkSize
                } else {
                    match self.content_length {
                        Some(0) => State::StartLine,
                        Some(n) => State::Body(n),
                        None => State::UntilClose,
                    }
                }
            }
        };
    }
}

#[derive(Debug)]
struct Conn {
    req: Parser,
    resp: Parser,
    pending: VecDeque<Waiting>,
    /// Counted in [`HttpDecodeStats::connections`].
    counted: bool,
}

/// The HTTP/1 decoder for all sockets classified as HTTP.
#[derive(Debug, Default)]
pub struct HttpDecoder {
    conns: std::collections::HashMap<u64, Conn, foldhash::fast::RandomState>,
    endpoints: EndpointCache,
    stats: HttpDecodeStats,
}

impl HttpDecoder {
    /// A decoder with no connection yet.
    pub fn new() -> HttpDecoder {
        HttpDecoder::default()
    }

    /// Decode one chunk of an HTTP socket; events are appended to `out`.
    pub fn push(&mut self, chunk: &Chunk, out: &mut Vec<HttpEvent>) {
        if chunk.total_len() == 0 {
            return;
        }
        let conn = self.conns.entry(chunk.socket).or_insert_with(|| Conn {
            req: Parser::new(Side::Requests),
            resp: Parser::new(Side::Responses),
            pending: VecDeque::new(),
            counted: false,
        });
        let pieces = chunk.pieces();
        let mut ctx = Ctx {
            socket: chunk.socket,
            pid: chunk.pid,
            tid: chunk.tid,
            ts: chunk.ts_ns,
            pending: &mut conn.pending,
            endpoints: &mut self.endpoints,
            stats: &mut self.stats,
            out,
        };
        match chunk.direction {
            Direction::Rx => conn.req.push(&pieces, &mut ctx),
            Direction::Tx => conn.resp.push(&pieces, &mut ctx),
        }
        if !conn.counted && conn.req.stats.messages > 0 {
            conn.counted = true;
            self.stats.connections += 1;
        }
    }

    /// The connection is closed (the producer saw the socket close): requests still
    /// waiting are reported without a status and the connection's state is freed.
    pub fn close(&mut self, socket: u64, out: &mut Vec<HttpEvent>) {
        let Some(conn) = self.conns.remove(&socket) else { return };
        for r in conn.pending {
            self.stats.requests_without_status += 1;
            out.push(HttpEvent::NoResponse { endpoint: r.endpoint.key.clone(), socket });
        }
        self.stats.requests.add(&conn.req.stats);
        self.stats.responses.add(&conn.resp.stats);
    }

    /// End of capture: [`HttpDecoder::close`] every connection, in socket order.
    pub fn finish(&mut self, out: &mut Vec<HttpEvent>) {
        let mut sockets: Vec<u64> = self.conns.keys().copied().collect();
        sockets.sort_unstable();
        for s in sockets {
            self.close(s, out);
        }
    }

    /// Counters so far (open connections included).
    pub fn stats(&self) -> HttpDecodeStats {
        let mut s = self.stats;
        for c in self.conns.values() {
            s.requests.add(&c.req.stats);
            s.responses.add(&c.resp.stats);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates() {
        assert_eq!(template_target("/api/deals/123", false), "/api/deals/{id}");
        assert_eq!(template_target("/queries?queries=20", false), "/queries?queries");
        assert_eq!(template_target("/api/deals?page=2&per_page=5&page=3", false), "/api/deals?page&per_page");
        assert_eq!(
            template_target("/api/deals/3f2b8c1e-9a4d-4e5f-8b6a-1c2d3e4f5a6b/notes/7", false),
            "/api/deals/{id}/notes/{id}"
        );
        assert_eq!(template_target("/blobs/5f2b8c1e9a4d4e5f", false), "/blobs/{id}");
        assert_eq!(template_target("/users/deadbeefdeadbeef", false), "/users/deadbeefdeadbeef");
        assert_eq!(template_target("/v1/json", false), "/v1/json");
        assert_eq!(template_target("http://user:pw@host:8080/a/1?x=1#frag", false), "/a/{id}?x");
        assert_eq!(template_target("/", false), "/");
        assert_eq!(template_target("*", false), "*");
        assert_eq!(template_target("/api/dea", true), "/api/…");
        assert_eq!(template_target("/api/deals?page=2&per_pa", true), "/api/deals?page…");
        assert_eq!(template_target("/api/deals?page=2&per_page=1", true), "/api/deals?page&per_page…");
    }

    #[test]
    fn status_and_request_lines() {
        assert_eq!(parse_status_line(b"HTTP/1.1 200 OK\r"), Some(200));
        assert_eq!(parse_status_line(b"HTTP/1.1 404"), Some(404));
        assert_eq!(parse_status_line(b"HTTP/1.1 2000"), None);
        assert_eq!(parse_status_line(b"HTTP/2 200 OK"), None);
        assert_eq!(parse_request_line(b"GET /db HTTP/1.1\r"), Some((&b"GET"[..], &b"/db"[..], true)));
        assert_eq!(parse_request_line(b"get /db HTTP/1.1"), None);
        assert_eq!(parse_request_line(b"GET /d b HTTP/1.1"), None);
        assert_eq!(parse_cut_request_line(b"GET /api/deals?pa"), Some((&b"GET"[..], &b"/api/deals?pa"[..])));
        assert_eq!(parse_cut_request_line(b"{\"title\": 1}"), None);
    }
}
