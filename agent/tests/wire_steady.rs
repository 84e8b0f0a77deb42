//! The wire summary's back-to-back ping count and its steady window (agent/src/wire/summary.rs),
//! on the recorded sqlx captures (agent/tests/data/wire/README.md) and on a hand-built timeline
//! whose expected figures follow from its construction.

use profiler::wire::capture::read_capture;
use profiler::wire::summary::{BUCKET_NS, STEADY_TAIL_BUCKETS};
use profiler::wire::{Chunk, Direction, Protocol, WireDecoder, WireOptions, WireSummary};

fn fixture(name: &str) -> Vec<Chunk> {
    let path = format!("{}/tests/data/wire/{name}.cap", env!("CARGO_MANIFEST_DIR"));
    read_capture(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn decode(chunks: &[Chunk]) -> WireSummary {
    let mut d = WireDecoder::new(WireOptions::default());
    d.push_all(chunks);
    d.finish().0
}

fn pg_msg(ty: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![ty];
    v.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    v.extend_from_slice(body);
    v
}

#[test]
fn back_to_back_pings_in_the_recorded_sqlx_captures() {
    // all: `pPEppEppEppEppEp` (wire_pg.rs): a ping follows a ping 4 times (release, then the
    // next acquire's ping); none: `PEpEpEpEpEp`: never.
    let all = decode(&fixture("pg_sqlx_db5_all"));
    let none = decode(&fixture("pg_sqlx_db5_none"));
    assert_eq!((all.pg.pings, all.pg.pings_after_ping), (10, 4));
    assert_eq!((none.pg.pings, none.pg.pings_after_ping), (5, 0));
}

/// One prepare round trip at t = 0 (set-up), then every 10 ms from t = 10 ms to 2,990 ms an
/// HTTP request and the round trips ping, execute (a prepared statement), ping on one
/// connection.
#[test]
fn steady_window_leaves_out_set_up_and_the_tail() {
    let ms = 1_000_000u64;
    let mut chunks = Vec::new();
    let pg = |ts: u64, dir: Direction, data: &[u8]| Chunk::complete(ts, 7, Protocol::Postgres, dir, data);
    let ready = pg_msg(b'Z', b"I");
    // Parse "s1" + Describe + Sync, answered ParseComplete, ..., ReadyForQuery.
    let mut parse = pg_msg(b'P', b"s1\0SELECT 1\0\0\0");
    parse.extend(pg_msg(b'S', b""));
    chunks.push(pg(0, Direction::Tx, &parse));
    let mut answer = pg_msg(b'1', b"");
    answer.extend(&ready);
    chunks.push(pg(ms / 2, Direction::Rx, &answer));
    let mut exec = pg_msg(b'B', b"\0s1\0\0\0\0\0\0\0");
    exec.extend(pg_msg(b'E', b"\0\0\0\0\0"));
    exec.extend(pg_msg(b'S', b""));
    let mut exec_answer = pg_msg(b'2', b"");
    exec_answer.extend(pg_msg(b'C', b"SELECT 1\0"));
    exec_answer.extend(&ready);
    let sync = pg_msg(b'S', b"");
    for i in 1..300u64 {
        let t = i * 10 * ms;
        chunks.push(Chunk::complete(t, 9, Protocol::Http, Direction::Rx, b"GET /db HTTP/1.1\r\nHost: x\r\n\r\n"));
        for (k, (q, a)) in [(&sync, &ready), (&exec, &exec_answer), (&sync, &ready)].into_iter().enumerate() {
            let at = t + 1 + k as u64 * 2;
            chunks.push(pg(at, Direction::Tx, q));
            chunks.push(pg(at + 1, Direction::Rx, a));
        }
    }
    let s = decode(&chunks);
    assert_eq!(s.http.requests, 299);
    assert_eq!(s.pg.by_kind.prepare, 1);
    let st = s.steady.expect("a steady window");
    // Set-up in bucket 0; the clean stretch starts at bucket 1, minus one lead bucket: 200 ms.
    // The last request (2,990 ms) is in bucket 29; 5 tail buckets off: the end is bucket 24.
    assert_eq!(st.start_ns, 2 * BUCKET_NS);
    assert_eq!(st.end_ns, (29 - STEADY_TAIL_BUCKETS as u64) * BUCKET_NS);
    // Requests at 200, 210, ..., 2,390 ms: 220 of them, each with its 3 round trips.
    assert_eq!(st.http_requests, 220);
    assert_eq!(st.endpoints, vec![("GET /db".to_string(), 220)]);
    assert_eq!(st.pg.round_trips, 660);
    assert_eq!((st.pg.by_kind.ping, st.pg.by_kind.execute, st.pg.by_kind.prepare), (440, 220, 0));
    // Every request's first ping follows the previous request's last one.
    assert_eq!(st.pg.pings_after_ping, 220);
    assert_eq!(st.pg.statements.len(), 1);
    assert_eq!(st.pg.statements[0].executions, 220);
}

/// The clients of the steady window: four connections each send a request every 10 ms from
/// 10 to 2,990 ms; a fifth (a health check) sends one at 5 ms and one at 2,995 ms, before and
/// after the window. All five sent requests; four took part in the load (each sent one in
/// every bucket of the window), which is the concurrency a blocked worker's gain divides by.
/// A sixth sends one request in the window, at 1,005 ms: 1 of its 23 buckets.
#[test]
fn steady_window_counts_the_connections_of_the_load() {
    let ms = 1_000_000u64;
    let get = |ts: u64, socket: u64| Chunk::complete(ts, socket, Protocol::Http, Direction::Rx, b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut chunks = vec![get(5 * ms, 9)];
    for i in 1..300u64 {
        for socket in 1..=4 {
            chunks.push(get(i * 10 * ms + socket, socket));
        }
    }
    chunks.push(get(2_995 * ms, 9));
    chunks.push(get(1_005 * ms, 10));
    chunks.sort_by_key(|c| c.ts_ns);
    let s = decode(&chunks);
    assert_eq!(s.http.decode.connections, 6);
    let st = s.steady.expect("a steady window");
    assert_eq!((st.start_ns, st.end_ns), (BUCKET_NS, (29 - STEADY_TAIL_BUCKETS as u64) * BUCKET_NS));
    let n = st.http_connections().expect("connections tracked");
    assert!((n - (4.0 + 1.0 / 23.0)).abs() < 1e-9, "{n}");
}

/// A connection set up for every request (a start-up message answered AuthenticationOk and
/// ReadyForQuery) leaves no steady window; the load window still gives the throughput under
/// load. One request line every 10 ms from 500 to 2,990 ms, after a lone PostgreSQL round
/// trip at 0 ms and before another at 5,000 ms (a capture that outlived its load): the load
/// window is buckets 6 to 28 (the first and last with a request left out), 230 requests in
/// 2.3 s, 100 req/s; over the whole capture the 250 requests would read 50 req/s.
#[test]
fn load_window_without_a_steady_window() {
    let ms = 1_000_000u64;
    let pg = |ts: u64, socket: u64, dir: Direction, data: &[u8]| Chunk::complete(ts, socket, Protocol::Postgres, dir, data);
    let mut startup = Vec::new();
    let body = b"\0\x03\0\0user\0app\0\0";
    startup.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    startup.extend_from_slice(body);
    let mut ok = pg_msg(b'R', &0u32.to_be_bytes());
    ok.extend(pg_msg(b'Z', b"I"));
    let sync = pg_msg(b'S', b"");
    let ready = pg_msg(b'Z', b"I");
    let mut chunks = vec![pg(0, 1, Direction::Tx, &sync), pg(1, 1, Direction::Rx, &ready)];
    for i in 50..300u64 {
        let t = i * 10 * ms;
        chunks.push(Chunk::complete(t, 9, Protocol::Http, Direction::Rx, b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n"));
        chunks.push(pg(t + 1, 100 + i, Direction::Tx, &startup));
        chunks.push(pg(t + 2, 100 + i, Direction::Rx, &ok));
    }
    chunks.push(pg(5_000 * ms, 1, Direction::Tx, &sync));
    chunks.push(pg(5_000 * ms + 1, 1, Direction::Rx, &ready));
    let s = decode(&chunks);
    assert_eq!(s.http.requests, 250);
    assert!(s.pg.connections_timed >= 250, "{:?}", s.pg.connections_timed);
    assert_eq!(s.steady, None, "every bucket sets up a connection");
    let w = s.load.as_ref().expect("a load window");
    assert_eq!((w.start_ns, w.end_ns, w.http_requests), (6 * BUCKET_NS, 29 * BUCKET_NS, 230));
    let (x, n, secs, name) = s.load_req_per_s().expect("a throughput");
    assert_eq!((n, name), (230, "load window"));
    assert!((x - 100.0).abs() < 1e-9 && (secs - 2.3).abs() < 1e-9, "{x} req/s over {secs} s");
}
