//! The wire decoders alone (agent/src/wire/), for the fuzz targets.
#![allow(missing_docs)]

#[path = "../../src/wire/mod.rs"]
pub mod wire;

use wire::{Chunk, Direction, Protocol, WireDecoder, WireOptions};

/// Turn fuzz input into chunks: each chunk is a 3-byte header (flags, length, head bound)
/// and up to `length` data bytes. Flags: bit 0 direction (tx/rx), bit 1 socket 1 or 2,
/// bits 2-3 how the capture bound applies (none, head only, head and 16-byte tail, and a
/// large uncaptured middle).
pub fn chunks(protocol: Protocol, data: &[u8]) -> Vec<Chunk> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut ts = 0;
    while i + 3 <= data.len() {
        let (flags, len, head) = (data[i], data[i + 1] as usize, data[i + 2] as usize);
        i += 3;
        let end = (i + len).min(data.len());
        let bytes = &data[i..end];
        i = end;
        ts += 1;
        let dir = if flags & 1 == 0 { Direction::Tx } else { Direction::Rx };
        let mut c = Chunk::complete(ts, 1 + u64::from((flags >> 1) & 1), protocol, dir, bytes);
        c = match (flags >> 2) & 3 {
            0 => c,
            1 => c.bounded(head, 0),
            2 => c.bounded(head, 16),
            _ => {
                let mut c = c.bounded(head, 16);
                c.total_len += 100_000;
                c
            }
        };
        out.push(c);
    }
    out
}

/// Decode, and check that every byte is accounted for exactly once.
pub fn check(chunks: &[Chunk]) {
    let mut d = WireDecoder::new(WireOptions { keep_events: true });
    d.push_all(chunks);
    let (s, _events) = d.finish();
    let bytes: u64 = chunks.iter().map(|c| c.total_len.max(c.head.len() as u64)).sum();
    let pg = s.pg.decode;
    let h = s.http.decode;
    let accounted = pg.frontend.message_bytes
        + pg.frontend.undecodable_bytes
        + pg.backend.message_bytes
        + pg.backend.undecodable_bytes
        + pg.encrypted_bytes
        + h.requests.message_bytes
        + h.requests.undecodable_bytes
        + h.requests.opaque_bytes
        + h.responses.message_bytes
        + h.responses.undecodable_bytes
        + h.responses.opaque_bytes;
    assert_eq!(accounted, bytes);
    let _ = serde_json::to_string(&s).unwrap();
}
