//! A deliberately syscall-heavy HTTP/1.1 server for overhead measurements: one thread per
//! connection, keep-alive, one `read` and one `write` per request, a fixed 13-byte body.
//! Usage: `overhead_http_server [PORT]` (default 0: a free port); listens on 127.0.0.1 and
//! prints `ready PORT`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\nContent-Type: text/plain\r\n\r\nHello, World!";

fn serve(mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let mut buf = [0u8; 4096];
    let mut pending = Vec::new();
    loop {
        let n = match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        pending.extend_from_slice(&buf[..n]);
        // Answer every complete request (wrk sends GETs without bodies).
        let mut answers = Vec::new();
        while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            pending.drain(..end + 4);
            answers.extend_from_slice(RESPONSE);
        }
        if !answers.is_empty() && stream.write_all(&answers).is_err() {
            return;
        }
    }
}

fn main() {
    let port: u16 = match std::env::args().nth(1).map(|s| s.parse()) {
        None => 0,
        Some(Ok(p)) => p,
        Some(Err(_)) => {
            eprintln!("usage: overhead_http_server [PORT]");
            std::process::exit(2);
        }
    };
    let listener = match TcpListener::bind(("127.0.0.1", port)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("overhead_http_server: cannot listen on 127.0.0.1:{port}: {e}");
            std::process::exit(1);
        }
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(port);
    println!("ready {port}");
    let _ = std::io::stdout().flush();
    for stream in listener.incoming().flatten() {
        std::thread::spawn(move || serve(stream));
    }
}
