//! A `MSG_PEEK` receive gives no wire chunk, for real (root): the bytes it peeks come again
//! with the next receive, and a chunk of each would decode one request twice.
//!
//! The test process is its own target (attached by pid): an HTTP server on a listening port
//! of 127.0.0.1 (so the agent classifies its accepted socket as HTTP) peeks at each request
//! with `recv(MSG_PEEK)` before reading it, as servers that sniff a protocol do, and answers
//! `200`. A client in the same process sends `REQUESTS` requests on one keep-alive
//! connection. Checked: the capture decodes exactly `REQUESTS` requests and responses of
//! `GET /peek`, and counts each peek in `other_calls`.

use test_support::{skip_unless, Need};

mod attach_support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::time::Duration;

use profiler::collect::{Collector, Options, Unwind};
use profiler::target::Target;

const REQUESTS: u64 = 5;

/// Serves `REQUESTS` requests on the first connection: peek, read, answer.
fn serve(listener: TcpListener) {
    let (mut conn, _) = listener.accept().expect("accept");
    let mut buf = [0u8; 1024];
    for _ in 0..REQUESTS {
        // SAFETY: buf is valid for buf.len() bytes; the fd lives as long as `conn`.
        let peeked = unsafe { libc::recv(conn.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_PEEK) };
        assert!(peeked > 0, "peek: {peeked}");
        let n = conn.read(&mut buf).expect("read");
        assert!(buf[..n].ends_with(b"\r\n\r\n"), "one whole request per read");
        conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").expect("write");
    }
}

#[test]
fn peeked_bytes_are_captured_once() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    // Attach first: the agent reads the target's listening ports when it starts.
    let target = Target::Pid(std::process::id()).resolve().expect("resolve own pid");
    let options = Options { frequency_hz: 49, offcpu: false, syscalls: false, unwind: Unwind::Fp, wire: true, ..Default::default() };
    let collector = Collector::start(&target, &options).expect("attach");
    let server = std::thread::spawn(move || serve(listener));
    attach_support::keep_alive_requests(port, b"GET /peek HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n", REQUESTS);
    server.join().expect("server");
    std::thread::sleep(Duration::from_millis(300));
    let raw = collector.finish(&target, None).expect("finish");
    let report = raw.meta.wire.clone().expect("wire report");
    let wire = raw.wire.clone().expect("wire summary");
    eprintln!("wire report: {report:?}");
    eprintln!("http: {:?}", wire.http);
    let peek = wire.http.endpoints.iter().find(|e| e.endpoint == "GET /peek").expect("GET /peek decoded");
    assert_eq!(peek.requests, REQUESTS, "each request once, not once per peek");
    assert_eq!(wire.http.requests, REQUESTS);
    assert_eq!(wire.http.responses, REQUESTS);
    assert_eq!(peek.statuses.get(&200), Some(&REQUESTS));
    assert!(report.other_calls >= REQUESTS, "the peeks are counted in other_calls: {}", report.other_calls);
}
