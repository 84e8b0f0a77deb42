//! How fast the agent decodes wire-capture records in user space: the drain thread's path
//! (`profiler::collect::wire::RecordDecoder`: record parse, HTTP/PostgreSQL decoders, summary,
//! serving timeline), one thread, no BPF.
//!
//! Two loads:
//! - `http`: generated HTTP records (a `struct wire_chunk` header and the start line, as the
//!   kernel sends them for HTTP sockets) shaped like target-app's `/json` and `/api/deals/{id}`
//!   traffic on 64 keep-alive connections (a request line received, a status line sent, per
//!   request);
//! - `pg`: real traffic, `agent/tests/data/wire/pg_sqlx_db5_all.cap` and `http_db5_all.cap`
//!   (target-app's `/db` through sqlx: a ping and a Bind/Execute/Sync per request, see that
//!   folder's README), bounded as the kernel captures it (256-byte heads, 64-byte tails) and
//!   replayed on 64 connection pairs: each pair's start-up and first request once, then its
//!   steady part (4 HTTP requests, 24 PostgreSQL records: no Parse, the statement is cached)
//!   REPEATS times, one thread per pair, interleaved in time.
//!
//! `cargo build --release -p agent --example wire_decode_rate`, then
//! `target/release/examples/wire_decode_rate [http|pg] [N] [ROUNDS]` (defaults `http`,
//! N = 500000 requests for `http` or 2000 repeats for `pg`, 5 rounds).
//! Prints, per round, ns per record and records per second of one thread, and the median.
//! At 125,000 records/s (field-cases' N+1 route: 128 records per request) a decoder at N ns
//! per record costs 125,000 × N ns per second: 1% of one CPU per 80 ns.

use std::time::Instant;

use agent_ebpf::abi::wire as abi;
use profiler::collect::wire::RecordDecoder;
use profiler::wire::{capture::read_capture, Chunk, Direction, Protocol};

/// One record as the kernel sends it: the header, the head, and (when there is a tail) the
/// whole `struct wire_chunk` with the tail at its end.
fn record(ts_ns: u64, tid: u32, socket: u64, class: u8, direction: u8, syscall: u8, total_len: u64, head: &[u8], tail: &[u8]) -> Vec<u8> {
    let header = abi::WireChunkHeader {
        ts_ns,
        pid: 4242,
        tid,
        socket,
        total_len: total_len as u32,
        local_port: if class == abi::class::HTTP { 8080 } else { 40000 },
        peer_port: if class == abi::class::HTTP { 40000 } else { 5432 },
        head_len: head.len() as u16,
        tail_len: tail.len() as u16,
        direction,
        class,
        syscall,
        _pad: 0,
    };
    // SAFETY: WireChunkHeader is repr(C) plain integers without padding, CHUNK_HEADER_SIZE bytes.
    let mut r = unsafe { std::slice::from_raw_parts((&header as *const abi::WireChunkHeader).cast::<u8>(), abi::CHUNK_HEADER_SIZE) }.to_vec();
    r.extend_from_slice(head);
    if !tail.is_empty() {
        r.resize(abi::CHUNK_HEADER_SIZE + abi::HEAD_MAX, 0);
        r.extend_from_slice(tail);
        r.resize(abi::CHUNK_SIZE, 0);
    }
    r
}

fn http_records(requests: usize) -> (Vec<Vec<u8>>, u64) {
    let mut records = Vec::with_capacity(2 * requests);
    let mut ts = 1_000_000_000u64;
    for i in 0..requests {
        let socket = 0xffff_8880_0000_0000 + (i as u64 % 64) * 0x1000;
        let line = if i % 4 == 3 {
            format!("GET /api/deals/{} HTTP/1.1\r\n", 1000 + i % 5000)
        } else {
            "GET /json HTTP/1.1\r\n".to_string()
        };
        records.push(record(ts, 4243, socket, abi::class::HTTP, abi::direction::RX, abi::syscall::READ, 97, line.as_bytes(), &[]));
        ts += 7_000;
        records.push(record(ts, 4243, socket, abi::class::HTTP, abi::direction::TX, abi::syscall::WRITE, 143, b"HTTP/1.1 200 OK\r\n", &[]));
        ts += 9_000;
    }
    (records, requests as u64)
}

fn pg_records(repeats: usize) -> (Vec<Vec<u8>>, u64) {
    const PAIRS: u64 = 64;
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/wire/");
    let load = |name: &str| read_capture(&std::fs::read_to_string(format!("{dir}{name}")).expect("fixture readable")).expect("fixture parses");
    let pg: Vec<Chunk> = load("pg_sqlx_db5_all.cap").iter().map(|c| c.bounded(abi::HEAD_MAX, abi::TAIL_MAX)).collect();
    let http: Vec<Chunk> = load("http_db5_all.cap").iter().map(|c| c.bounded(abi::HTTP_HEAD_MAX, 0)).collect();
    // The steady part starts at the second HTTP request; before it, the connection's start-up
    // and the first request, which prepares the statement (sqlx caches it per connection).
    let steady_from = http.iter().filter(|c| c.direction == Direction::Rx).nth(1).expect("two requests").ts_ns;
    let t0 = pg[0].ts_ns;
    let end = pg.last().unwrap().ts_ns.max(http.last().unwrap().ts_ns);
    let span = end - steady_from + 1_000;
    let mut timed: Vec<(u64, Vec<u8>)> = Vec::new();
    for pair in 0..PAIRS {
        let tid = 5000 + pair as u32;
        let offset = pair * 7_919;
        let mut push = |c: &Chunk, ts: u64| {
            let (class, socket) = match c.protocol {
                Protocol::Postgres => (abi::class::POSTGRES, 0xffff_8880_0000_0000 + pair * 0x1000),
                Protocol::Http => (abi::class::HTTP, 0xffff_8881_0000_0000 + pair * 0x1000),
            };
            let (direction, syscall) = match c.direction {
                Direction::Tx => (abi::direction::TX, abi::syscall::SENDTO),
                Direction::Rx => (abi::direction::RX, abi::syscall::RECVFROM),
            };
            timed.push((ts, record(ts, tid, socket, class, direction, syscall, c.total_len, &c.head, &c.tail)));
        };
        for c in pg.iter().chain(&http).filter(|c| c.ts_ns < steady_from) {
            push(c, c.ts_ns - t0 + offset);
        }
        for r in 0..repeats as u64 {
            for c in pg.iter().chain(&http).filter(|c| c.ts_ns >= steady_from) {
                push(c, c.ts_ns - t0 + offset + r * span);
            }
        }
    }
    timed.sort_by_key(|(ts, _)| *ts);
    let per_repeat = http.iter().filter(|c| c.direction == Direction::Rx && c.ts_ns >= steady_from).count() as u64;
    let requests = PAIRS * (1 + repeats as u64 * per_repeat);
    (timed.into_iter().map(|(_, r)| r).collect(), requests)
}

fn main() {
    let mut args = std::env::args().skip(1).peekable();
    let mode = match args.peek().map(String::as_str) {
        Some("http" | "pg") => args.next().unwrap(),
        _ => "http".to_string(),
    };
    let n: Option<usize> = args.next().and_then(|a| a.parse().ok());
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let (records, requests) = if mode == "pg" { pg_records(n.unwrap_or(2_000)) } else { http_records(n.unwrap_or(500_000)) };
    let mut per_record = Vec::new();
    for round in 1..=rounds {
        let mut d = RecordDecoder::default();
        let start = Instant::now();
        for r in &records {
            assert!(d.push_record(r));
        }
        let (summary, _) = d.finish();
        let ns = start.elapsed().as_nanos() as f64 / records.len() as f64;
        assert_eq!(summary.http.requests, requests);
        assert_eq!(summary.http.responses, requests);
        println!("round {round}: {ns:.1} ns per record, {:.0} records/s, {:.2} µs per HTTP request", 1e9 / ns, ns * records.len() as f64 / requests as f64 / 1e3);
        per_record.push(ns);
    }
    per_record.sort_by(f64::total_cmp);
    println!("{mode}: median {:.1} ns per record ({} records, {requests} HTTP requests per round)", per_record[per_record.len() / 2], records.len());
}
