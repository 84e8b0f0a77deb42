//! Message framing of one direction of a PostgreSQL connection over captured heads.
//!
//! Every message after start-up is `type byte, Int32 length (counting itself), body`; the
//! start-up-phase messages (StartupMessage, SSLRequest, GSSENCRequest, CancelRequest) have
//! no type byte (PostgreSQL docs, 55.7 "Message Formats"). The framer follows the lengths
//! across chunk boundaries and across bytes that were not captured (a [`Piece::Gap`]): a
//! message whose body runs into a gap is emitted with the part of its body that was
//! captured and `complete = false`, and framing continues exactly after it.
//!
//! Sync is lost when a message header falls into uncaptured bytes, or when a header is not
//! a valid message of this direction (garbage). While lost, every byte is counted as
//! undecodable. Sync is regained only where it can be proven:
//! - at the start of a chunk whose captured bytes parse, from its first byte to its last
//!   (`total_len`), as a chain of valid headers with consistent lengths and no gap where a
//!   header should be (a *resync*); when such a chain ends inside a message, the chunk is
//!   held back (up to [`MAX_CANDIDATE_BYTES`]) and the following chunks are added to the
//!   chain until it ends exactly at a chunk end (accepted, all held chunks are framed) or
//!   breaks (the held chunks are undecodable);
//! - (backend only) at the end of a chunk whose last captured bytes are a complete, valid
//!   ReadyForQuery (`Z`, length 5, status `I`/`T`/`E`) in the undecodable region: that message
//!   is emitted, and the next chunk starts at a message boundary (an *anchored resync*).

use serde::{Deserialize, Serialize};

use crate::wire::Piece;

/// Largest body prefix kept per message, bytes. Longer bodies are framed exactly, but only
/// this much of them is kept (and the message is marked incomplete).
pub const MAX_BODY_KEEP: usize = 8192;
/// Largest length field accepted for a typed message (PostgreSQL's own limit is 1 GiB).
const MAX_LEN: u32 = 0x4000_0000;
/// Largest start-up packet (PostgreSQL's `MAX_STARTUP_PACKET_LENGTH`).
const MAX_STARTUP_LEN: u32 = 10_000;

/// `SSLRequest` code (1234 << 16 | 5679).
pub const SSL_REQUEST_CODE: u32 = 80_877_103;
/// `GSSENCRequest` code (1234 << 16 | 5680).
pub const GSSENC_REQUEST_CODE: u32 = 80_877_104;
/// `CancelRequest` code (1234 << 16 | 5678).
pub const CANCEL_REQUEST_CODE: u32 = 80_877_102;

/// Which end produced the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// The client (frontend): what the target sends.
    Frontend,
    /// The server (backend): what the target receives.
    Backend,
}

/// What kind of framed unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FrameKind {
    /// A typed message (the type byte).
    Typed(u8),
    /// A start-up-phase message without type byte; the body starts with the Int32 code.
    Untyped,
    /// The single byte a server answers an SSLRequest/GSSENCRequest with (`S`, `N`, `G`).
    SslResponse(u8),
}

/// One framed message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Frame {
    pub kind: FrameKind,
    /// The length field's value (counts itself, not the type byte).
    pub len: u32,
    /// The captured prefix of the bytes after the length field (at most [`MAX_BODY_KEEP`]).
    pub body: Vec<u8>,
    /// True when `body` is the whole body.
    pub complete: bool,
    /// Timestamp of the chunk holding the message's first byte, ns.
    pub ts_first: u64,
    /// Timestamp of the chunk holding its last byte, ns.
    pub ts_last: u64,
}

/// Byte and message accounting of one direction (or a sum of several).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FramingStats {
    /// Bytes the syscalls moved (sum of `total_len`).
    pub bytes: u64,
    /// Bytes captured (head and tail, without overlap).
    pub captured_bytes: u64,
    /// Bytes of framed messages, including their uncaptured parts.
    pub message_bytes: u64,
    /// Bytes that could not be attributed to a framed message (out of sync, garbage, a
    /// message still incomplete when the capture ended).
    pub undecodable_bytes: u64,
    /// Messages framed.
    pub messages: u64,
    /// Messages framed whose body was not fully captured.
    pub messages_truncated: u64,
    /// Times framing was lost (a header in uncaptured bytes, or an invalid header).
    pub sync_losses: u64,
    /// Times framing was regained at a chunk start after a loss.
    pub resyncs: u64,
    /// Times framing was regained at a chunk end by a trailing ReadyForQuery.
    pub anchored_resyncs: u64,
}

impl FramingStats {
    /// Add another's counts to these.
    pub fn add(&mut self, o: &FramingStats) {
        self.bytes += o.bytes;
        self.captured_bytes += o.captured_bytes;
        self.message_bytes += o.message_bytes;
        self.undecodable_bytes += o.undecodable_bytes;
        self.messages += o.messages;
        self.messages_truncated += o.messages_truncated;
        self.sync_losses += o.sync_losses;
        self.resyncs += o.resyncs;
        self.anchored_resyncs += o.anchored_resyncs;
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Never synchronised yet (a socket first seen mid-stream, or a new one).
    Fresh,
    /// Framing lost; waiting for a provable boundary.
    Lost,
    /// At a message boundary.
    Boundary,
    /// Inside a header: `have` bytes of `need` collected.
    Header { buf: [u8; 8], have: usize, need: usize, ts_first: u64 },
    /// Inside a message body.
    Body { kind: FrameKind, len: u32, size: u64, pos: u64, body: Vec<u8>, gapped: bool, ts_first: u64 },
}

/// The framer of one direction of one connection.
#[derive(Debug, Clone)]
pub(crate) struct Framer {
    side: Side,
    state: State,
    /// Frontend: a start-up-format message (no type byte) may come next.
    pub expect_untyped: bool,
    /// Backend: the next byte is the one-byte answer to an SSLRequest/GSSENCRequest.
    pub expect_ssl_byte: bool,
    pub stats: FramingStats,
    /// Set when the current chunk regained sync (resync or anchor); cleared by the caller.
    pub resynced: bool,
    /// Chunk offset where sync was lost in the current chunk.
    lost_at: Option<u64>,
    offset: u64,
    /// Chunks held back while out of sync (see `push_lost`), with their timestamps.
    candidates: Vec<(u64, Vec<OwnedPiece>)>,
    /// Body buffers of frames already handled ([`Framer::recycle`]), reused by the next
    /// messages: most messages would otherwise allocate (and grow) a buffer each.
    spare: Vec<Vec<u8>>,
}

/// Most body buffers a [`Framer`] keeps for reuse.
const SPARE_BODIES: usize = 8;
/// Largest capacity of a body buffer kept for reuse, bytes.
const SPARE_BODY_BYTES: usize = 1024;

/// Most bytes (captured or not) held back while waiting for a provable boundary.
pub const MAX_CANDIDATE_BYTES: u64 = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Valid headers all the way, ending exactly at a message boundary.
    Boundary,
    /// Valid headers so far, ending inside a message or header.
    Incomplete,
    /// An invalid header, or a header in uncaptured bytes.
    Invalid,
}

/// A [`Piece`] with owned bytes (held-back chunks).
#[derive(Debug, Clone, PartialEq, Eq)]
enum OwnedPiece {
    Bytes(Vec<u8>),
    Gap(u64),
}

impl OwnedPiece {
    fn from(p: &Piece<'_>) -> OwnedPiece {
        match p {
            Piece::Bytes(b) => OwnedPiece::Bytes(b.to_vec()),
            Piece::Gap(n) => OwnedPiece::Gap(*n),
        }
    }
    fn as_piece(&self) -> Piece<'_> {
        match self {
            OwnedPiece::Bytes(b) => Piece::Bytes(b),
            OwnedPiece::Gap(n) => Piece::Gap(*n),
        }
    }
    fn len(&self) -> u64 {
        match self {
            OwnedPiece::Bytes(b) => b.len() as u64,
            OwnedPiece::Gap(n) => *n,
        }
    }
}

fn starts_with_zero(chunks: &[(u64, Vec<OwnedPiece>)]) -> bool {
    matches!(chunks.first().and_then(|(_, p)| p.first()), Some(OwnedPiece::Bytes(b)) if b.first() == Some(&0))
}

fn valid_typed(side: Side, ty: u8, len: u32) -> bool {
    if !(4..=MAX_LEN).contains(&len) {
        return false;
    }
    match side {
        Side::Frontend => match ty {
            b'S' | b'H' | b'X' | b'c' => len == 4,
            b'E' => len >= 9,
            b'D' | b'C' => len >= 6,
            b'P' => len >= 8,
            b'B' => len >= 12,
            b'Q' | b'f' => len >= 5,
            b'p' | b'd' => true,
            b'F' => len >= 12,
            _ => false,
        },
        Side::Backend => match ty {
            b'1' | b'2' | b'3' | b'n' | b'I' | b's' | b'c' => len == 4,
            b'Z' => len == 5,
            b'K' => len == 12,
            b'R' => len >= 8,
            b'C' => len >= 5,
            b'T' | b'D' | b't' => len >= 6,
            b'S' => len >= 6,
            b'E' | b'N' => len >= 5,
            b'A' => len >= 10,
            b'G' | b'H' | b'W' => len >= 7,
            b'd' => true,
            b'V' => len >= 8,
            b'v' => len >= 12,
            _ => false,
        },
    }
}

fn valid_untyped(len: u32, code: u32) -> bool {
    match code {
        SSL_REQUEST_CODE | GSSENC_REQUEST_CODE => len == 8,
        CANCEL_REQUEST_CODE => len == 16,
        c if c >> 16 == 3 => (9..=MAX_STARTUP_LEN).contains(&len),
        _ => false,
    }
}

impl Framer {
    pub fn new(side: Side) -> Framer {
        Framer {
            side,
            state: State::Fresh,
            expect_untyped: false,
            expect_ssl_byte: false,
            stats: FramingStats::default(),
            resynced: false,
            lost_at: None,
            offset: 0,
            candidates: Vec::new(),
            spare: Vec::new(),
        }
    }

    /// Empties `frames` (handled by the caller), keeping their body buffers for the next
    /// messages of this framer.
    pub fn recycle(&mut self, frames: &mut Vec<Frame>) {
        for f in frames.drain(..) {
            let mut body = f.body;
            if self.spare.len() < SPARE_BODIES && body.capacity() > 0 && body.capacity() <= SPARE_BODY_BYTES {
                body.clear();
                self.spare.push(body);
            }
        }
    }

    /// An empty body buffer, reused when one is spare.
    fn body_buffer(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_default()
    }

    fn is_lost(&self) -> bool {
        matches!(self.state, State::Lost | State::Fresh)
    }

    /// End of the capture: a message still in progress can never be completed; its bytes
    /// become undecodable, so that `bytes = message_bytes + undecodable_bytes` holds.
    pub fn finish(&mut self) {
        self.stats.undecodable_bytes += self.pending_bytes();
        let n = self.candidates.len();
        self.drop_candidates(n);
        self.state = State::Lost;
    }

    /// Bytes of the message in progress (for the accounting invariant).
    pub fn pending_bytes(&self) -> u64 {
        match &self.state {
            State::Header { have, .. } => *have as u64,
            State::Body { pos, .. } => *pos,
            _ => 0,
        }
    }

    /// Probe `chunks` (in order) as one run of bytes starting at a message boundary.
    fn probe(&self, chunks: &[(u64, Vec<OwnedPiece>)]) -> Verdict {
        let mut probe = Framer::new(self.side);
        probe.state = State::Boundary;
        probe.expect_ssl_byte = self.expect_ssl_byte;
        probe.expect_untyped = self.expect_untyped || (self.side == Side::Frontend && starts_with_zero(chunks));
        let mut sink = Vec::new();
        for (_, pieces) in chunks {
            for p in pieces {
                probe.piece(p.as_piece(), 0, &mut sink);
                if probe.is_lost() {
                    return Verdict::Invalid;
                }
            }
        }
        if probe.state == State::Boundary {
            Verdict::Boundary
        } else {
            Verdict::Incomplete
        }
    }

    /// Frame one chunk's pieces; frames are appended to `out`.
    pub fn push(&mut self, pieces: &[Piece<'_>], ts: u64, out: &mut Vec<Frame>) {
        if pieces.is_empty() {
            return;
        }
        self.lost_at = None;
        self.offset = 0;
        if self.is_lost() {
            self.push_lost(pieces, ts, out);
            return;
        }
        self.process(pieces, ts, out);
        self.anchor(pieces, ts, out);
    }

    fn process(&mut self, pieces: &[Piece<'_>], ts: u64, out: &mut Vec<Frame>) {
        for p in pieces {
            self.piece(*p, ts, out);
        }
    }

    /// Out of sync: find a provable boundary (see the module docs). Chunks that might start
    /// at a boundary but end inside a message are held back (at most [`MAX_CANDIDATE_BYTES`])
    /// until the run of chunks from the first of them ends at a boundary.
    fn push_lost(&mut self, pieces: &[Piece<'_>], ts: u64, out: &mut Vec<Frame>) {
        self.candidates.push((ts, pieces.iter().map(OwnedPiece::from).collect()));
        let all = self.probe(&self.candidates);
        if all == Verdict::Boundary {
            self.accept_candidates(out);
            return;
        }
        let n = self.candidates.len();
        let alone = if n > 1 { self.probe(&self.candidates[n - 1..]) } else { all };
        if n > 1 && alone == Verdict::Boundary {
            self.drop_candidates(n - 1);
            self.accept_candidates(out);
            return;
        }
        let held: u64 = self.candidates.iter().map(|(_, p)| p.iter().map(OwnedPiece::len).sum::<u64>()).sum();
        if all == Verdict::Incomplete && held <= MAX_CANDIDATE_BYTES {
            return;
        }
        if n > 1 && alone == Verdict::Incomplete && pieces.iter().map(|p| p.len()).sum::<u64>() <= MAX_CANDIDATE_BYTES {
            self.drop_candidates(n - 1);
            return;
        }
        self.drop_candidates(n);
        self.state = State::Lost;
        self.lost_at = Some(0);
        self.offset = pieces.iter().map(|p| p.len()).sum();
        self.anchor(pieces, ts, out);
    }

    /// Count the first `k` held-back chunks as undecodable.
    fn drop_candidates(&mut self, k: usize) {
        for (_, pieces) in self.candidates.drain(..k) {
            for p in &pieces {
                let n = p.len();
                self.stats.bytes += n;
                if let OwnedPiece::Bytes(b) = p {
                    self.stats.captured_bytes += b.len() as u64;
                }
                self.stats.undecodable_bytes += n;
            }
        }
        if self.state == State::Fresh && k > 0 {
            self.state = State::Lost;
        }
    }

    /// The held-back chunks start at a boundary and end at one: frame them.
    fn accept_candidates(&mut self, out: &mut Vec<Frame>) {
        if self.state == State::Lost {
            self.stats.resyncs += 1;
            self.resynced = true;
        }
        if self.side == Side::Frontend && starts_with_zero(&self.candidates) {
            self.expect_untyped = true;
        }
        self.state = State::Boundary;
        let held = std::mem::take(&mut self.candidates);
        for (ts, pieces) in &held {
            self.offset = 0;
            self.lost_at = None;
            let pieces: Vec<Piece<'_>> = pieces.iter().map(OwnedPiece::as_piece).collect();
            self.process(&pieces, *ts, out);
        }
    }

    /// Anchored resync on a trailing ReadyForQuery (backend, framing lost in this chunk).
    fn anchor(&mut self, pieces: &[Piece<'_>], ts: u64, out: &mut Vec<Frame>) {
        if self.side != Side::Backend || self.state != State::Lost {
            return;
        }
        let Some(Piece::Bytes(last)) = pieces.last() else { return };
        let n = last.len();
        let total = self.offset;
        if n < 6 {
            return;
        }
        let z = &last[n - 6..];
        let start = total - 6;
        if z[0] == b'Z' && z[1..5] == [0, 0, 0, 5] && matches!(z[5], b'I' | b'T' | b'E') && self.lost_at.is_some_and(|l| start >= l)
        {
            self.stats.undecodable_bytes -= 6;
            self.stats.message_bytes += 6;
            self.stats.messages += 1;
            self.stats.anchored_resyncs += 1;
            self.resynced = true;
            self.state = State::Boundary;
            out.push(Frame {
                kind: FrameKind::Typed(b'Z'),
                len: 5,
                body: vec![z[5]],
                complete: true,
                ts_first: ts,
                ts_last: ts,
            });
        }
    }

    fn lose(&mut self) {
        if self.state != State::Fresh {
            self.stats.sync_losses += 1;
        }
        self.state = State::Lost;
        if self.lost_at.is_none() {
            self.lost_at = Some(self.offset);
        }
    }

    fn piece(&mut self, p: Piece<'_>, ts: u64, out: &mut Vec<Frame>) {
        match p {
            Piece::Bytes(b) => {
                self.stats.bytes += b.len() as u64;
                self.stats.captured_bytes += b.len() as u64;
                self.bytes(b, ts, out);
            }
            Piece::Gap(n) => {
                self.stats.bytes += n;
                self.gap(n, ts, out);
            }
        }
    }

    fn emit(&mut self, ts: u64, out: &mut Vec<Frame>) {
        let st = std::mem::replace(&mut self.state, State::Boundary);
        if let State::Body { kind, len, size, body, gapped, ts_first, .. } = st {
            let _ = size;
            let complete = !gapped && body.len() as u64 == len as u64 - 4;
            self.stats.message_bytes += size;
            self.stats.messages += 1;
            if !complete {
                self.stats.messages_truncated += 1;
            }
            if let FrameKind::Typed(_) = kind {
                self.expect_untyped = false;
            }
            out.push(Frame { kind, len, body, complete, ts_first, ts_last: ts });
        }
    }

    fn gap(&mut self, n: u64, ts: u64, out: &mut Vec<Frame>) {
        match &mut self.state {
            State::Lost | State::Fresh => self.stats.undecodable_bytes += n,
            State::Boundary => {
                self.lose();
                self.stats.undecodable_bytes += n;
            }
            State::Header { have, .. } => {
                let have = *have as u64;
                self.lose();
                self.stats.undecodable_bytes += have + n;
            }
            State::Body { size, pos, gapped, .. } => {
                let need = *size - *pos;
                *gapped = true;
                if n < need {
                    *pos += n;
                } else {
                    *pos = *size;
                    self.offset += need;
                    self.emit(ts, out);
                    if n > need {
                        self.lose();
                        self.stats.undecodable_bytes += n - need;
                    }
                    self.offset += n - need;
                    return;
                }
            }
        }
        self.offset += n;
    }

    fn bytes(&mut self, b: &[u8], ts: u64, out: &mut Vec<Frame>) {
        let mut i = 0usize;
        while i < b.len() {
            match &mut self.state {
                State::Lost | State::Fresh => {
                    self.stats.undecodable_bytes += (b.len() - i) as u64;
                    self.offset += (b.len() - i) as u64;
                    return;
                }
                State::Boundary => {
                    let c = b[i];
                    if self.side == Side::Backend && self.expect_ssl_byte {
                        self.expect_ssl_byte = false;
                        if matches!(c, b'S' | b'N' | b'G') {
                            self.stats.message_bytes += 1;
                            self.stats.messages += 1;
                            out.push(Frame {
                                kind: FrameKind::SslResponse(c),
                                len: 0,
                                body: Vec::new(),
                                complete: true,
                                ts_first: ts,
                                ts_last: ts,
                            });
                            i += 1;
                            self.offset += 1;
                            continue;
                        }
                    }
                    let need = if self.side == Side::Frontend && self.expect_untyped && c == 0 { 8 } else { 5 };
                    self.state = State::Header { buf: [0; 8], have: 0, need, ts_first: ts };
                }
                State::Header { buf, have, need, ts_first } => {
                    let take = (*need - *have).min(b.len() - i);
                    buf[*have..*have + take].copy_from_slice(&b[i..i + take]);
                    *have += take;
                    i += take;
                    self.offset += take as u64;
                    if *have < *need {
                        return;
                    }
                    let (buf, need, ts_first) = (*buf, *need, *ts_first);
                    let (kind, len, size, valid) = if need == 8 {
                        let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
                        let code = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
                        (FrameKind::Untyped, len, len as u64, valid_untyped(len, code))
                    } else {
                        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
                        (FrameKind::Typed(buf[0]), len, len as u64 + 1, valid_typed(self.side, buf[0], len))
                    };
                    if !valid {
                        // Sync is lost where this header began (possibly in an earlier chunk).
                        let have = need as u64;
                        let here = self.offset;
                        self.offset = here.saturating_sub(have);
                        self.lose();
                        self.offset = here;
                        self.stats.undecodable_bytes += have;
                        continue;
                    }
                    let mut body = self.body_buffer();
                    if need == 8 {
                        body.extend_from_slice(&buf[4..8]);
                    }
                    self.state = State::Body {
                        kind,
                        len,
                        size,
                        pos: need as u64,
                        body,
                        gapped: false,
                        ts_first,
                    };
                    if need as u64 == size {
                        self.emit(ts, out);
                    }
                }
                State::Body { size, pos, body, gapped, .. } => {
                    let take = ((*size - *pos) as usize).min(b.len() - i);
                    if !*gapped && body.len() < MAX_BODY_KEEP {
                        let keep = take.min(MAX_BODY_KEEP - body.len());
                        body.extend_from_slice(&b[i..i + keep]);
                    }
                    *pos += take as u64;
                    i += take;
                    self.offset += take as u64;
                    if *pos == *size {
                        self.emit(ts, out);
                    }
                }
            }
        }
    }
}
