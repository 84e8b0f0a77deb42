//! Bounded property tests of the wire decoders (run by `cargo test`, a few seconds):
//! - any bytes, in any chunking, with any head/tail/total_len, never panic, and every byte
//!   is accounted for exactly once (in a framed message, undecodable, or still pending);
//! - re-chunking the real captures (splitting each recorded read/write anywhere, and merging
//!   consecutive ones of one direction) gives the same decoded events when every byte is
//!   captured: decoding is chunking-invariant where the bytes are complete.

use proptest::prelude::*;

use profiler::wire::capture::read_capture;
use profiler::wire::{Chunk, Direction, Protocol, WireDecoder, WireEvent, WireOptions};

fn fixture(name: &str) -> Vec<Chunk> {
    let path = format!("{}/tests/data/wire/{name}.cap", env!("CARGO_MANIFEST_DIR"));
    read_capture(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

const FIXTURES: [&str; 8] = [
    "pg_psql_simple",
    "pg_sqlx_target_app",
    "pg_sqlx_db5_all",
    "pg_sqlx_db5_none",
    "pg_pgbench_prepared",
    "pg_pgbench_extended",
    "http_target_app",
    "http_db5_all",
];

fn events(chunks: &[Chunk]) -> Vec<WireEvent> {
    let mut d = WireDecoder::new(WireOptions { keep_events: true });
    d.push_all(chunks);
    d.finish().1
}

/// Split every chunk at the given cut fractions (per mille of its length), all pieces with
/// the chunk's timestamp.
fn split(chunks: &[Chunk], cuts: &[u16]) -> Vec<Chunk> {
    let mut out = Vec::new();
    for (i, c) in chunks.iter().enumerate() {
        let n = c.head.len();
        let k = cuts[i % cuts.len()] as usize;
        let at = n * k / 1000;
        if at == 0 || at >= n {
            out.push(c.clone());
            continue;
        }
        let mut a = c.clone();
        a.head.truncate(at);
        a.total_len = at as u64;
        let mut b = c.clone();
        b.head = c.head[at..].to_vec();
        b.total_len = (n - at) as u64;
        out.push(a);
        out.push(b);
    }
    out
}

/// Merge runs of consecutive chunks of one socket and direction (when `merge[i]`), keeping
/// the first one's timestamp. Timestamps are zeroed in all chunks so that events compare.
fn merge(chunks: &[Chunk], mask: &[bool]) -> Vec<Chunk> {
    let mut out: Vec<Chunk> = Vec::new();
    for (i, c) in chunks.iter().enumerate() {
        let mut c = c.clone();
        c.ts_ns = 0;
        if let Some(last) = out.last_mut() {
            if mask[i % mask.len()] && last.socket == c.socket && last.direction == c.direction {
                last.head.extend_from_slice(&c.head);
                last.total_len += c.total_len;
                continue;
            }
        }
        out.push(c);
    }
    out
}

fn zero_ts(chunks: &[Chunk]) -> Vec<Chunk> {
    chunks.iter().map(|c| Chunk { ts_ns: 0, ..c.clone() }).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn splitting_captures_changes_nothing(f in 0..FIXTURES.len(), cuts in prop::collection::vec(0u16..1000, 1..40)) {
        let chunks = fixture(FIXTURES[f]);
        prop_assert_eq!(events(&split(&chunks, &cuts)), events(&chunks));
    }

    #[test]
    fn merging_captures_changes_nothing(f in 0..FIXTURES.len(), mask in prop::collection::vec(any::<bool>(), 1..40)) {
        let chunks = fixture(FIXTURES[f]);
        prop_assert_eq!(events(&merge(&chunks, &mask)), events(&zero_ts(&chunks)));
    }
}

#[derive(Debug, Clone)]
struct RawChunk {
    socket: u64,
    http: bool,
    tx: bool,
    data: Vec<u8>,
    head: usize,
    tail: usize,
    extra: u64,
}

fn raw_chunk() -> impl Strategy<Value = RawChunk> {
    // Bytes biased towards protocol-looking ones, so that deep states are reached.
    let byte = prop_oneof![any::<u8>(), Just(0u8), Just(4u8), Just(5u8), Just(b'Z'), Just(b'S'), Just(b'\n'), Just(b' '), Just(b'\r')];
    (0u64..3, any::<bool>(), any::<bool>(), prop::collection::vec(byte, 0..300), 0usize..300, 0usize..80, prop_oneof![Just(0u64), 0u64..5000])
        .prop_map(|(socket, http, tx, data, head, tail, extra)| RawChunk { socket, http, tx, data, head, tail, extra })
}

/// The chunk: the first `head` bytes of `data` as head, then `extra` uncaptured bytes, then
/// the rest of `data` (at most `tail` bytes of it) as tail.
fn to_chunk(i: usize, r: &RawChunk) -> Chunk {
    let h = r.head.min(r.data.len());
    let rest = &r.data[h..];
    let t = r.tail.min(rest.len());
    let tail = rest[rest.len() - t..].to_vec();
    let gap = (rest.len() - t) as u64 + r.extra;
    Chunk {
        ts_ns: i as u64,
        pid: 1,
        tid: 1,
        socket: r.socket,
        protocol: if r.http { Protocol::Http } else { Protocol::Postgres },
        direction: if r.tx { Direction::Tx } else { Direction::Rx },
        total_len: h as u64 + gap + t as u64,
        head: r.data[..h].to_vec(),
        tail,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic_and_every_byte_is_accounted(raw in prop::collection::vec(raw_chunk(), 0..30)) {
        let chunks: Vec<Chunk> = raw.iter().enumerate().map(|(i, r)| to_chunk(i, r)).collect();
        let mut d = WireDecoder::new(WireOptions { keep_events: true });
        d.push_all(&chunks);
        let (s, _) = d.finish();
        let bytes: u64 = chunks.iter().map(|c| c.total_len).sum();
        let pg = s.pg.decode;
        let h = s.http.decode;
        let accounted = pg.frontend.message_bytes + pg.frontend.undecodable_bytes
            + pg.backend.message_bytes + pg.backend.undecodable_bytes + pg.encrypted_bytes
            + h.requests.message_bytes + h.requests.undecodable_bytes + h.requests.opaque_bytes
            + h.responses.message_bytes + h.responses.undecodable_bytes + h.responses.opaque_bytes;
        // After finish, a message still in progress at the end counts as undecodable.
        prop_assert_eq!(accounted, bytes);
        let seen = pg.frontend.bytes + pg.backend.bytes + pg.encrypted_bytes + h.requests.bytes + h.responses.bytes;
        prop_assert_eq!(seen, bytes);
    }
}
