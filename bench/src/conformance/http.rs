//! The suite's HTTP plumbing: one recorded exchange ([`Resp`]), a reqwest client that logs
//! every response, and a raw-TCP path for requests whose timing a client library hides
//! (an over-limit body announced by `Content-Length`, a chunked body that never ends in time).

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::Method;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Default per-request timeout of the suite (the app's own timeout is 30 s; nothing the suite
/// sends should take more than milliseconds).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// One request and its response, as received (bodies are not decompressed).
#[derive(Debug, Clone)]
pub struct Resp {
    /// Request method.
    pub method: String,
    /// Request path and query, as sent.
    pub target: String,
    /// Response status code.
    pub status: u16,
    /// Response headers.
    pub headers: HeaderMap,
    /// Response body bytes.
    pub body: Vec<u8>,
}

impl Resp {
    /// The header's value as text, if present and visible ASCII.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
    }

    /// The body parsed as JSON, or an error naming the request and the start of the body.
    pub fn json(&self) -> Result<Value, String> {
        serde_json::from_slice(&self.body).map_err(|e| format!("{}: body is not JSON ({e}): {}", self.what(), self.body_head()))
    }

    /// `METHOD target -> status`, for failure details.
    pub fn what(&self) -> String {
        format!("{} {} -> {}", self.method, self.target, self.status)
    }

    /// The first 200 bytes of the body, lossily decoded, whitespace runs folded to one space.
    pub fn body_head(&self) -> String {
        let n = self.body.len().min(200);
        let mut s = String::from_utf8_lossy(&self.body[..n]).split_whitespace().collect::<Vec<_>>().join(" ");
        if self.body.len() > n {
            s.push_str("...");
        }
        s
    }

    /// Whether `Content-Type` is `application/json`, parameters allowed.
    pub fn is_json_content_type(&self) -> bool {
        self.header("content-type")
            .map(|ct| ct.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("application/json"))
            .unwrap_or(false)
    }
}

/// A request body.
pub enum Body {
    /// No body.
    None,
    /// These bytes, with `Content-Length`.
    Bytes(Vec<u8>),
}

/// Sends one request with reqwest. `target` is the path and query (`/json`).
pub async fn send(client: &reqwest::Client, base: &str, method: Method, target: &str, headers: &[(&str, &str)], body: Body) -> Result<Resp, String> {
    let url = format!("{base}{target}");
    let mut req = client.request(method.clone(), &url);
    for (k, v) in headers {
        let name = HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("header name {k}: {e}"))?;
        let value = HeaderValue::from_bytes(v.as_bytes()).map_err(|e| format!("header {k}: {e}"))?;
        req = req.header(name, value);
    }
    if let Body::Bytes(b) = body {
        req = req.body(b);
    }
    let resp = req.send().await.map_err(|e| format!("{method} {target}: {}", error_chain(&e)))?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.bytes().await.map_err(|e| format!("{method} {target}: reading the body: {}", error_chain(&e)))?.to_vec();
    Ok(Resp { method: method.to_string(), target: target.to_string(), status, headers, body })
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// How [`raw`] sends the body after the head.
pub enum RawBody {
    /// `Content-Length: declared` in the head; the head goes first, then the suite waits up to
    /// `wait` for an early response (a server that judges by `Content-Length` answers at once)
    /// and only then writes `bytes`.
    Announced {
        /// The declared length.
        declared: usize,
        /// The bytes written if no early response came.
        bytes: Vec<u8>,
        /// How long to wait for an early response.
        wait: Duration,
    },
    /// `Transfer-Encoding: chunked`, `total` bytes of `fill` in 64 KiB chunks, written while the
    /// response is read (writing stops at the first error: the server may close early).
    Chunked {
        /// Bytes in all.
        total: usize,
        /// The byte every chunk is filled with.
        fill: u8,
    },
}

/// Sends one HTTP/1.1 request over a fresh TCP connection (`Connection: close`) and parses the
/// response with httparse (`Content-Length`, chunked, or read to EOF).
#[allow(clippy::too_many_arguments)]
pub async fn raw(
    addr: &str,
    host: &str,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: RawBody,
    timeout: Duration,
) -> Result<Resp, String> {
    let what = format!("{method} {target} (raw)");
    let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| format!("{what}: connect timed out"))?
        .map_err(|e| format!("{what}: connect {addr}: {e}"))?;
    let (mut rd, mut wr) = stream.into_split();
    let mut head = format!("{method} {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    match &body {
        RawBody::Announced { declared, .. } => head.push_str(&format!("Content-Length: {declared}\r\n\r\n")),
        RawBody::Chunked { .. } => head.push_str("Transfer-Encoding: chunked\r\n\r\n"),
    }
    wr.write_all(head.as_bytes()).await.map_err(|e| format!("{what}: write head: {e}"))?;

    // The writer runs as its own task: it may fail (the server answered and closed early)
    // or finish long before the response is complete; either way the reader decides.
    let writer = tokio::spawn(async move {
        match body {
            RawBody::Announced { bytes, wait, .. } => {
                tokio::time::sleep(wait).await;
                let _ = wr.write_all(&bytes).await;
            }
            RawBody::Chunked { total, fill } => {
                let chunk = vec![fill; 64 * 1024];
                let mut sent = 0;
                while sent < total {
                    let n = chunk.len().min(total - sent);
                    let mut piece = format!("{n:x}\r\n").into_bytes();
                    piece.extend_from_slice(&chunk[..n]);
                    piece.extend_from_slice(b"\r\n");
                    if wr.write_all(&piece).await.is_err() {
                        return;
                    }
                    sent += n;
                }
                let _ = wr.write_all(b"0\r\n\r\n").await;
            }
        }
        // Keep the write half open until the reader is done (dropping it would send FIN).
        std::future::pending::<()>().await;
    });
    let reader = async {
        let mut buf = Vec::new();
        let mut tmp = vec![0u8; 64 * 1024];
        loop {
            match rd.read(&mut tmp).await {
                Ok(0) => break,
                Ok(n) => {
                    buf.extend_from_slice(&tmp[..n]);
                    if let Some(done) = complete_response(&buf) {
                        buf.truncate(done);
                        break;
                    }
                }
                // A reset after the response arrived is normal for a server that closes
                // with unread request bytes.
                Err(_) if !buf.is_empty() => break,
                Err(e) => return Err(format!("{what}: read: {e}")),
            }
        }
        Ok(buf)
    };
    let result = tokio::time::timeout(timeout, reader).await;
    writer.abort();
    let buf = result.map_err(|_| format!("{what}: no complete response within {} s", timeout.as_secs_f64()))??;
    parse_response(&buf, method, target).map_err(|e| format!("{what}: {e}"))
}

/// Length of a complete response at the start of `buf`, if there is one.
fn complete_response(buf: &[u8]) -> Option<usize> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut headers);
    let Ok(httparse::Status::Complete(head_len)) = r.parse(buf) else { return None };
    let cl = r
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse::<usize>().ok());
    let chunked = r
        .headers
        .iter()
        .any(|h| h.name.eq_ignore_ascii_case("transfer-encoding") && String::from_utf8_lossy(h.value).to_ascii_lowercase().contains("chunked"));
    if let Some(cl) = cl {
        return (buf.len() >= head_len + cl).then_some(head_len + cl);
    }
    if chunked {
        return dechunk(&buf[head_len..]).map(|(_, used)| head_len + used);
    }
    None
}

/// Decodes a complete chunked body: (body, bytes consumed), or `None` if incomplete.
fn dechunk(mut b: &[u8]) -> Option<(Vec<u8>, usize)> {
    let start = b.len();
    let mut out = Vec::new();
    loop {
        let line_end = b.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&b[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        b = &b[line_end + 2..];
        if size == 0 {
            // Trailers (none expected) end with an empty line.
            let end = b.windows(2).position(|w| w == b"\r\n")?;
            b = &b[end + 2..];
            return Some((out, start - b.len()));
        }
        if b.len() < size + 2 {
            return None;
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

fn parse_response(buf: &[u8], method: &str, target: &str) -> Result<Resp, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut headers);
    let head_len = match r.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Err(format!("incomplete response ({} bytes)", buf.len())),
        Err(e) => return Err(format!("unparsable response: {e}")),
    };
    let status = r.code.ok_or("no status code")?;
    let mut map = HeaderMap::new();
    let mut chunked = false;
    for h in r.headers.iter() {
        if h.name.eq_ignore_ascii_case("transfer-encoding") && String::from_utf8_lossy(h.value).to_ascii_lowercase().contains("chunked") {
            chunked = true;
        }
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(h.name.as_bytes()), HeaderValue::from_bytes(h.value)) {
            map.append(n, v);
        }
    }
    let rest = &buf[head_len..];
    let body = if chunked { dechunk(rest).map(|(b, _)| b).ok_or("incomplete chunked body")? } else { rest.to_vec() };
    Ok(Resp { method: method.to_string(), target: target.to_string(), status, headers: map, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dechunk_handles_complete_and_partial_bodies() {
        let b = b"5\r\nhello\r\n1\r\n!\r\n0\r\n\r\nEXTRA";
        let (body, used) = dechunk(b).expect("complete");
        assert_eq!(body, b"hello!");
        assert_eq!(used, b.len() - 5);
        assert!(dechunk(b"5\r\nhel").is_none());
    }

    #[test]
    fn complete_response_uses_content_length() {
        let r = b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 2\r\n\r\n{}tail";
        assert_eq!(complete_response(r), Some(r.len() - 4));
        assert_eq!(complete_response(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n{}"), None);
        let p = parse_response(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", "GET", "/").expect("parse");
        assert_eq!((p.status, p.body.as_slice()), (200, b"{}".as_slice()));
    }
}
