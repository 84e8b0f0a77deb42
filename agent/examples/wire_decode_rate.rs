//! How fast the agent decodes wire-capture records in user space: the drain thread's path
//! (`profiler::collect::wire::RecordDecoder`: record parse, HTTP/PostgreSQL decoders, summary)
//! over generated HTTP records (a `struct wire_chunk` header and the start line, as the kernel
//! sends them for HTTP sockets) shaped like target-app's `/json` and `/api/deals/{id}` traffic on 64
//! keep-alive connections (a request line received, a status line sent, per request).
//!
//! `cargo build --release -p agent --example wire_decode_rate`, then
//! `target/release/examples/wire_decode_rate [REQUESTS] [ROUNDS]` (defaults 500000, 5).
//! Prints, per round, ns per record and records per second of one thread, and the median.
//! At 60,000 req/s (two records per request) a decoder at N ns per record costs
//! 120,000 × N ns per second: 1% of one CPU per 83 ns.

use std::time::Instant;

use agent_ebpf::abi::wire as abi;
use profiler::collect::wire::RecordDecoder;

fn record(ts_ns: u64, socket: u64, direction: u8, syscall: u8, total_len: u64, head: &[u8]) -> Vec<u8> {
    let header = abi::WireChunkHeader {
        ts_ns,
        pid: 4242,
        tid: 4243,
        socket,
        total_len: total_len as u32,
        local_port: 8080,
        peer_port: 40000,
        head_len: head.len() as u16,
        tail_len: 0,
        direction,
        class: abi::class::HTTP,
        syscall,
        _pad: 0,
    };
    // SAFETY: WireChunkHeader is repr(C) plain integers without padding, CHUNK_HEADER_SIZE bytes.
    let mut r = unsafe { std::slice::from_raw_parts((&header as *const abi::WireChunkHeader).cast::<u8>(), abi::CHUNK_HEADER_SIZE) }.to_vec();
    r.extend_from_slice(head);
    r
}

fn main() {
    let mut args = std::env::args().skip(1);
    let requests: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(500_000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    // Records as the kernel sends them: HTTP heads cut after the start line.
    let mut records = Vec::with_capacity(2 * requests);
    let mut ts = 1_000_000_000u64;
    for i in 0..requests {
        let socket = 0xffff_8880_0000_0000 + (i as u64 % 64) * 0x1000;
        let line = if i % 4 == 3 {
            format!("GET /api/deals/{} HTTP/1.1\r\n", 1000 + i % 5000)
        } else {
            "GET /json HTTP/1.1\r\n".to_string()
        };
        records.push(record(ts, socket, abi::direction::RX, 3, 97, line.as_bytes()));
        ts += 7_000;
        records.push(record(ts, socket, abi::direction::TX, 4, 143, b"HTTP/1.1 200 OK\r\n"));
        ts += 9_000;
    }
    let mut per_record = Vec::new();
    for round in 1..=rounds {
        let mut d = RecordDecoder::default();
        let start = Instant::now();
        for r in &records {
            assert!(d.push_record(r));
        }
        let (summary, _) = d.finish();
        let ns = start.elapsed().as_nanos() as f64 / records.len() as f64;
        assert_eq!(summary.http.requests, requests as u64);
        assert_eq!(summary.http.responses, requests as u64);
        println!("round {round}: {ns:.1} ns per record, {:.0} records/s", 1e9 / ns);
        per_record.push(ns);
    }
    per_record.sort_by(f64::total_cmp);
    println!("median {:.1} ns per record ({} records per round)", per_record[per_record.len() / 2], records.len());
}
