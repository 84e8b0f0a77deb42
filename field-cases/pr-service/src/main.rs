//! `pr-service`: a small HTTP/1.1 server (std threads, one per connection, keep-alive) whose
//! one route parses an access-log line with a regex. It is the service of scripts/profile-pr's
//! end-to-end test (cli/tests/profile_pr.rs): the base compiles the regex once, the head
//! flips [`COMPILE_PER_REQUEST`] and compiles it on every request, the cost the profiler
//! names `construction-per-request`.
//!
//! Usage: `pr-service [--listen 127.0.0.1:8097]`. Routes: `GET /parse` (the line's fields as
//! JSON), `GET /health` (`ok`); anything else is 404. Prints `listening on ADDR` to stderr
//! when ready; stops on SIGTERM or Ctrl-C (the default action). Exit status: 0, 2 on a bad
//! argument or an address it cannot bind.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::LazyLock;

use regex::Regex;

/// Whether `/parse` builds its regex on every request instead of once.
const COMPILE_PER_REQUEST: bool = false;

/// An access-log line in the combined log format.
const LINE: &str = r#"127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326 "http://www.example.com/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)""#;

/// The combined log format, 13 named groups (Unicode `\d`, `\S`, `\w`).
const PATTERN: &str = r#"^(?P<ip>\S+) (?P<ident>\S+) (?P<user>\S+) \[(?P<day>\d{2})/(?P<month>\w{3})/(?P<year>\d{4}):(?P<time>\d{2}:\d{2}:\d{2}) (?P<zone>[+-]\d{4})\] "(?P<method>\w+) (?P<path>\S+) (?P<proto>[^"]+)" (?P<status>\d{3}) (?P<size>\d+) "(?P<referer>[^"]*)" "(?P<agent>[^"]*)"$"#;

static COMPILED: LazyLock<Regex> = LazyLock::new(|| Regex::new(PATTERN).expect("PATTERN is valid"));

fn parse() -> String {
    let per_request;
    let re = if COMPILE_PER_REQUEST {
        per_request = Regex::new(PATTERN).expect("PATTERN is valid");
        &per_request
    } else {
        &*COMPILED
    };
    let caps = re.captures(LINE).expect("LINE matches PATTERN");
    format!(r#"{{"method":"{}","path":"{}","status":{},"size":{}}}"#, &caps["method"], &caps["path"], &caps["status"], &caps["size"])
}

/// Serves one connection: request heads until EOF (bodies are not read: every route is a GET).
fn serve(stream: TcpStream) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    out.set_nodelay(true)?;
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        let mut close = false;
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            if line == "\r\n" || line == "\n" {
                break;
            }
            close |= line.to_ascii_lowercase().starts_with("connection: close");
        }
        let (status, body) = match path.as_str() {
            "/parse" => ("200 OK", parse()),
            "/health" => ("200 OK", "ok".to_string()),
            _ => ("404 Not Found", "not found".to_string()),
        };
        // One write per response: several small ones would wait on Nagle's algorithm.
        let response = format!("HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        out.write_all(response.as_bytes())?;
        if close {
            return Ok(());
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let listen = match args.as_slice() {
        [] => "127.0.0.1:8097".to_string(),
        [flag, addr] if flag == "--listen" => addr.clone(),
        _ => {
            eprintln!("pr-service: usage: pr-service [--listen 127.0.0.1:PORT]");
            std::process::exit(2);
        }
    };
    let listener = match TcpListener::bind(&listen) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("pr-service: cannot listen on {listen}: {e}");
            std::process::exit(2);
        }
    };
    LazyLock::force(&COMPILED);
    eprintln!("listening on {}", listener.local_addr().map_or(listen, |a| a.to_string()));
    for stream in listener.incoming().flatten() {
        std::thread::spawn(move || {
            let _ = serve(stream);
        });
    }
}
