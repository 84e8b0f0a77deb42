//! A port the target starts listening on after the agent attached is captured once the
//! agent refreshes the target (`Collector::note_processes`, once a second in a run), for
//! real (root). The agent reads a process's TCP tables again only when its socket fds
//! changed (`collect::wire::PORT_RESCAN`): opening the listener is such a change.
//!
//! The test process is its own target: before the listener exists, requests to it are not
//! HTTP of the target; after the refresh, `REQUESTS` requests on a keep-alive connection are
//! decoded, each once, with their statuses.

use test_support::{skip_unless, Need};

mod attach_support;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use profiler::collect::{Collector, Options, Unwind};
use profiler::target::Target;

const REQUESTS: u64 = 4;

fn serve(listener: TcpListener) {
    let (mut conn, _) = listener.accept().expect("accept");
    let mut buf = [0u8; 1024];
    for _ in 0..REQUESTS {
        let n = conn.read(&mut buf).expect("read");
        assert!(buf[..n].ends_with(b"\r\n\r\n"), "one whole request per read");
        conn.write_all(b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nok").expect("write");
    }
}

#[test]
fn a_port_opened_after_attach_is_captured_after_the_refresh() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let pid = std::process::id();
    let target = Target::Pid(pid).resolve().expect("resolve own pid");
    let options = Options { frequency_hz: 49, offcpu: false, syscalls: false, unwind: Unwind::Fp, wire: true, ..Default::default() };
    let mut collector = Collector::start(&target, &options).expect("attach");
    // A refresh before the listener exists reads the tables and remembers the socket fds.
    collector.note_processes(&BTreeSet::from([pid]));
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    collector.note_processes(&BTreeSet::from([pid]));
    let server = std::thread::spawn(move || serve(listener));
    attach_support::keep_alive_requests(port, b"GET /late HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n", REQUESTS);
    server.join().expect("server");
    std::thread::sleep(Duration::from_millis(300));
    let raw = collector.finish(&target, None).expect("finish");
    let report = raw.meta.wire.clone().expect("wire report");
    let wire = raw.wire.clone().expect("wire summary");
    eprintln!("wire report: {report:?}");
    assert!(report.http_ports.contains(&port), "port {port} found after the refresh: {:?}", report.http_ports);
    let late = wire.http.endpoints.iter().find(|e| e.endpoint == "GET /late").expect("GET /late decoded");
    assert_eq!(late.requests, REQUESTS);
    assert_eq!(late.statuses.get(&201), Some(&REQUESTS));
    assert_eq!(wire.http.responses, REQUESTS);
}
