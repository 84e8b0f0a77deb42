//! HTTP/1 decoder tests on a real capture of target-app's server side (see
//! agent/tests/data/wire/README.md) and on hand-built requests. Expected values checked by
//! hand against the capture and RFC 9112.

use std::collections::BTreeMap;

use profiler::wire::capture::read_capture;
use profiler::wire::http::HttpEvent;
use profiler::wire::{Chunk, Direction, Protocol, WireDecoder, WireEvent, WireOptions, WireSummary};

fn fixture(name: &str) -> Vec<Chunk> {
    let path = format!("{}/tests/data/wire/{name}.cap", env!("CARGO_MANIFEST_DIR"));
    read_capture(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn decode(chunks: &[Chunk]) -> (WireSummary, Vec<HttpEvent>) {
    let mut d = WireDecoder::new(WireOptions { keep_events: true });
    d.push_all(chunks);
    let (s, ev) = d.finish();
    let h = ev
        .into_iter()
        .map(|e| match e {
            WireEvent::Http(h) => h,
            WireEvent::Postgres(p) => panic!("unexpected {p:?}"),
        })
        .collect();
    (s, h)
}

fn chunk(ts: u64, dir: Direction, data: &[u8]) -> Chunk {
    Chunk::complete(ts, 3, Protocol::Http, dir, data)
}

/// (endpoint, status) of every response, in order.
fn pairs(ev: &[HttpEvent]) -> Vec<(Option<String>, u16)> {
    ev.iter()
        .filter_map(|e| match e {
            HttpEvent::Response(r) => Some((r.endpoint.clone(), r.status)),
            _ => None,
        })
        .collect()
}

fn requests(ev: &[HttpEvent]) -> Vec<String> {
    ev.iter()
        .filter_map(|e| match e {
            HttpEvent::Request(r) => Some(r.endpoint()),
            _ => None,
        })
        .collect()
}

fn statuses(s: &WireSummary, endpoint: &str) -> BTreeMap<u16, u64> {
    s.http.endpoints.iter().find(|e| e.endpoint == endpoint).unwrap().statuses.clone()
}

#[test]
fn target_app_requests_templated_and_paired() {
    let (s, ev) = decode(&fixture("http_target_app"));
    assert_eq!(
        requests(&ev),
        vec![
            "GET /json",
            "GET /db",
            "GET /queries?queries",
            "GET /api/deals?page&per_page",
            "POST /api/deals",
            "GET /api/deals/{id}",
            "GET /api/deals/{id}",
        ]
    );
    let expected: Vec<(Option<String>, u16)> = [
        ("GET /json", 200),
        ("GET /db", 200),
        ("GET /queries?queries", 200),
        ("GET /api/deals?page&per_page", 200),
        ("POST /api/deals", 201),
        ("GET /api/deals/{id}", 404),
        ("GET /api/deals/{id}", 404),
    ]
    .iter()
    .map(|(e, c)| (Some(e.to_string()), *c))
    .collect();
    assert_eq!(pairs(&ev), expected);
    assert_eq!(s.http.requests, 7);
    assert_eq!(s.http.responses, 7);
    assert_eq!(s.requests_of("GET /api/deals/{id}"), 2);
    assert_eq!(statuses(&s, "GET /api/deals/{id}"), BTreeMap::from([(404, 2)]));
    assert_eq!(statuses(&s, "POST /api/deals"), BTreeMap::from([(201, 1)]));
    // GET /json read at ...2842658, its response written at ...3365334.
    let json = s.http.endpoints.iter().find(|e| e.endpoint == "GET /json").unwrap();
    assert_eq!(json.latency_total_ns, 1_370_093_365_334 - 1_370_092_842_658);
    let d = s.http.decode;
    assert_eq!((d.requests.undecodable_bytes, d.responses.undecodable_bytes), (0, 0));
    assert_eq!(d.requests.message_bytes, d.requests.bytes);
    assert_eq!(d.responses.message_bytes, d.responses.bytes);
    assert_eq!((d.unpaired_responses, d.requests_without_status), (0, 0));
}

/// With the capture bound (256-byte heads), requests with a bearer token and responses with
/// target-app's security headers do not fit: framing is lost after their start line and
/// regained at the next request / response. Every request and status is still decoded.
#[test]
fn target_app_under_the_capture_bound() {
    let full = fixture("http_target_app");
    let (_, ev_full) = decode(&full);
    for tail in [0, 64] {
        let cut: Vec<Chunk> = full.iter().map(|c| c.bounded(256, tail)).collect();
        let (s, ev) = decode(&cut);
        assert_eq!(requests(&ev), requests(&ev_full));
        assert_eq!(pairs(&ev), pairs(&ev_full));
        // 3 requests are longer than 256 bytes (306, 406, 325: the ones with a token); with
        // a 64-byte tail the 306-byte one is captured whole (256 + 64 >= 306). The 7
        // responses are all longer than 320 bytes (their headers alone are).
        assert_eq!(s.http.decode.requests.sync_losses, if tail == 0 { 3 } else { 2 });
        assert_eq!(s.http.decode.responses.sync_losses, 7);
        assert_eq!(s.http.decode.unpaired_responses, 0);
        assert_eq!(s.http.decode.requests_without_status, 0);
    }
}

/// The collector keeps only the start line of each HTTP buffer (head cut after its first
/// `\n`, no tail): requests and statuses are the same as with full captures; every one of
/// the 7 requests and 7 responses loses framing after its start line.
#[test]
fn start_line_only_heads() {
    let full = fixture("http_target_app");
    let (_, ev_full) = decode(&full);
    let cut: Vec<Chunk> = full
        .iter()
        .map(|c| {
            let mut c = c.clone();
            let end = c.head.iter().position(|&b| b == b'\n').map_or(c.head.len(), |i| i + 1);
            c.head.truncate(end);
            c.tail.clear();
            c
        })
        .collect();
    let (s, ev) = decode(&cut);
    assert_eq!(requests(&ev), requests(&ev_full));
    assert_eq!(pairs(&ev), pairs(&ev_full));
    assert_eq!(s.http.decode.requests.sync_losses, 7);
    assert_eq!(s.http.decode.responses.sync_losses, 7);
    assert_eq!((s.http.decode.unpaired_responses, s.http.decode.requests_without_status), (0, 0));
}

/// No header value (a bearer token) nor body content can reach any output: every event and
/// the summary, serialized, are searched for the token, its parts, and the body.
#[test]
fn authorization_header_and_body_never_reach_the_output() {
    let full = fixture("http_target_app");
    let token = std::fs::read_to_string(format!("{}/tests/data/wire/http_target_app.cap", env!("CARGO_MANIFEST_DIR")))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let head = l.split(' ').nth(7).unwrap();
            let bytes: Vec<u8> = (0..head.len()).step_by(2).map(|i| u8::from_str_radix(&head[i..i + 2], 16).unwrap()).collect();
            let text = String::from_utf8_lossy(&bytes).into_owned();
            text.split("Authorization: Bearer ").nth(1).map(|t| t.split("\r\n").next().unwrap().to_string())
        })
        .expect("the fixture holds a bearer token");
    assert!(token.len() > 100, "{token}");
    // A request built here too, with a password in a form body and a secret in the query.
    let mut extra = full.clone();
    let req = b"POST /login?token=s3cr3tQueryValue HTTP/1.1\r\nAuthorization: Bearer abc.def.SECRETSIG\r\nContent-Length: 27\r\n\r\npassword=hunter2-not-a-leak";
    extra.push(chunk(2_000_000_000_000, Direction::Rx, req));
    extra.push(chunk(2_000_000_000_100, Direction::Tx, b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n"));
    for head in [usize::MAX, 256, 64] {
        let chunks: Vec<Chunk> = extra.iter().map(|c| c.bounded(head, 64)).collect();
        let mut d = WireDecoder::new(WireOptions { keep_events: true });
        d.push_all(&chunks);
        let (s, ev) = d.finish();
        let out = format!("{}\n{}", serde_json::to_string(&s).unwrap(), serde_json::to_string(&ev).unwrap());
        assert!(out.contains("POST /login?token"), "the request was decoded (head {head})");
        for secret in [
            token.as_str(),
            &token[..20],
            token.rsplit('.').next().unwrap(),
            "Bearer",
            "Authorization",
            "SECRETSIG",
            "s3cr3tQueryValue",
            "hunter2",
            "Wire fixture deal",
            "curl/7.88.1",
        ] {
            assert!(!out.contains(secret), "{secret:?} leaked into the output (head {head})");
        }
    }
}

/// Pipelined requests in one read, responses in one write: bodies skipped by
/// Content-Length and chunked coding, an interim 100 response not paired, HEAD's response
/// without body despite its Content-Length, 204 without body.
#[test]
fn pipelined_requests_and_responses() {
    let rx = b"GET /a/1 HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello\
PUT /c?x=1&y HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n\
HEAD /d HTTP/1.1\r\n\r\nDELETE /e/550e8400-e29b-41d4-a716-446655440000 HTTP/1.1\r\n\r\n";
    let tx = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok\
HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nab\r\n0\r\nX-T: 1\r\n\r\n\
HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
    let (s, ev) = decode(&[chunk(10, Direction::Rx, rx), chunk(20, Direction::Tx, tx)]);
    assert_eq!(requests(&ev), vec!["GET /a/{id}", "POST /b", "PUT /c?x&y", "HEAD /d", "DELETE /e/{id}"]);
    let got: Vec<(Option<String>, u16)> = pairs(&ev);
    assert_eq!(
        got,
        vec![
            (Some("GET /a/{id}".into()), 200),
            (Some("POST /b".into()), 201),
            (Some("PUT /c?x&y".into()), 204),
            (Some("HEAD /d".into()), 200),
            (Some("DELETE /e/{id}".into()), 404),
        ]
    );
    assert_eq!(s.http.decode.requests.message_bytes, rx.len() as u64);
    assert_eq!(s.http.decode.responses.message_bytes, tx.len() as u64);
    assert_eq!(s.http.requests, 5);
}

/// A request split at every byte across two reads decodes the same.
#[test]
fn requests_split_across_chunks() {
    let rx: &[u8] = b"GET /api/deals/42?page=2 HTTP/1.1\r\nAuthorization: Bearer x\r\n\r\nGET /json HTTP/1.1\r\n\r\n";
    let tx: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
    let (_, whole) = decode(&[chunk(1, Direction::Rx, rx), chunk(2, Direction::Tx, tx)]);
    assert_eq!(requests(&whole), vec!["GET /api/deals/{id}?page", "GET /json"]);
    for at in 1..rx.len() {
        let (_, ev) = decode(&[chunk(1, Direction::Rx, &rx[..at]), chunk(1, Direction::Rx, &rx[at..]), chunk(2, Direction::Tx, tx)]);
        assert_eq!(ev, whole, "split at {at}");
    }
}

/// A request line longer than the head: reported with its target cut and marked.
#[test]
fn request_line_cut_by_the_head() {
    let long = format!("GET /search?q=1&{}=2&zz=3 HTTP/1.1\r\nHost: x\r\n\r\n", "k".repeat(300));
    let c = chunk(1, Direction::Rx, long.as_bytes()).bounded(64, 0);
    let (s, ev) = decode(&[c, chunk(2, Direction::Tx, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")]);
    // The head ends inside the key "kkk...": it is dropped, `…` marks the cut.
    assert_eq!(requests(&ev), vec!["GET /search?q…"]);
    assert_eq!(pairs(&ev), vec![(Some("GET /search?q…".into()), 200)]);
    assert!(matches!(&ev[0], HttpEvent::Request(r) if r.truncated));
    assert_eq!(s.http.decode.requests.sync_losses, 1);
}

/// Garbage (TLS, binary, a body written alone) is counted; the next request line resyncs.
#[test]
fn garbage_then_resync() {
    let chunks = vec![
        chunk(1, Direction::Rx, &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]),
        chunk(2, Direction::Rx, b"{\"title\":\"x\"}"),
        chunk(3, Direction::Rx, b"GET /db HTTP/1.1\r\n\r\n"),
        chunk(4, Direction::Tx, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"),
        chunk(5, Direction::Rx, b"NOT A REQUEST\r\n\r\n"),
        chunk(6, Direction::Rx, b"GET /json HTTP/1.1\r\n\r\n"),
        chunk(7, Direction::Tx, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"),
    ];
    let (s, ev) = decode(&chunks);
    assert_eq!(requests(&ev), vec!["GET /db", "GET /json"]);
    assert_eq!(pairs(&ev), vec![(Some("GET /db".into()), 200), (Some("GET /json".into()), 200)]);
    let r = s.http.decode.requests;
    assert_eq!(r.undecodable_bytes, 6 + 13 + 17);
    // Lost from the first chunk (never in sync yet: not a loss), regained at GET /db; lost
    // at "NOT A REQUEST", regained at GET /json.
    assert_eq!(r.sync_losses, 1);
    assert_eq!(r.resyncs, 2);
    assert_eq!(r.message_bytes + r.undecodable_bytes, r.bytes);
}

/// Five GET /db of the pool-ping captures: the per-request denominator.
#[test]
fn per_request_denominator() {
    let (s, _) = decode(&fixture("http_db5_all"));
    assert_eq!(s.http.requests, 5);
    assert_eq!(s.requests_of("GET /db"), 5);
    assert_eq!(statuses(&s, "GET /db"), BTreeMap::from([(200, 5)]));
    // The summary goes into profile.json: it must read back identical.
    let json = serde_json::to_string(&s).unwrap();
    assert!(json.contains(r#""statuses":{"200":5}"#), "{json}");
    let back: WireSummary = serde_json::from_str(&json).unwrap();
    assert_eq!(back, s);
}

/// A socket closed by the producer frees its state; a request without response is
/// reported as such, and the same socket id later starts afresh.
#[test]
fn close_socket() {
    let mut d = WireDecoder::new(WireOptions { keep_events: true });
    d.push(&chunk(1, Direction::Rx, b"GET /a HTTP/1.1\r\n\r\n"));
    d.close_socket(Protocol::Http, 3);
    d.push(&chunk(2, Direction::Rx, b"GET /b HTTP/1.1\r\n\r\n"));
    d.push(&chunk(3, Direction::Tx, b"HTTP/1.1 204 No Content\r\n\r\n"));
    let (s, ev) = d.finish();
    let ev: Vec<HttpEvent> = ev.into_iter().map(|e| match e { WireEvent::Http(h) => h, _ => unreachable!() }).collect();
    assert_eq!(requests(&ev), vec!["GET /a", "GET /b"]);
    assert_eq!(pairs(&ev), vec![(Some("GET /b".into()), 204)]);
    assert!(ev.contains(&HttpEvent::NoResponse { endpoint: "GET /a".into(), socket: 3 }));
    assert_eq!(s.http.decode.requests_without_status, 1);
}

/// Connections counted are those on which a request line was decoded: three keep-alive
/// connections with two requests each count 3; a socket that only sent bytes (a response
/// without request, e.g. a connection begun before the capture) and one whose first bytes
/// were cut off do not.
#[test]
fn connections_count_those_that_sent_a_request() {
    let mut d = WireDecoder::new(WireOptions::default());
    let mut ts = 1_000;
    for round in 0..2 {
        for socket in [11u64, 12, 13] {
            d.push(&Chunk::complete(ts, socket, Protocol::Http, Direction::Rx, format!("GET /r/{round} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()));
            ts += 10;
            d.push(&Chunk::complete(ts, socket, Protocol::Http, Direction::Tx, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"));
            ts += 10;
        }
    }
    d.push(&Chunk::complete(ts, 14, Protocol::Http, Direction::Tx, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"));
    d.push(&Chunk::complete(ts + 10, 15, Protocol::Http, Direction::Rx, b"x-trailing-header: 1\r\n\r\n"));
    let (s, _) = d.finish();
    assert_eq!(s.http.requests, 6);
    assert_eq!(s.http.decode.connections, 3);
}
