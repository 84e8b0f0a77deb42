//! The content of framed PostgreSQL messages, as far as a profiler needs it.
//!
//! Formats from the PostgreSQL documentation, 55.7 "Message Formats". Only what identifies
//! statements and exchanges is decoded: statement and portal names, SQL text, command tags,
//! the transaction status, the SQLSTATE of errors. Parameter values (Bind), row values
//! (DataRow), passwords and SASL data ('p'), error and notice texts are never decoded.

use std::borrow::Cow;

use super::framer::{Frame, FrameKind, CANCEL_REQUEST_CODE, GSSENC_REQUEST_CODE, SSL_REQUEST_CODE};

/// A C string at `*at` in `body`: `Some` when its terminating NUL was captured. Borrowed from
/// `body` unless it is not UTF-8 (then with replacement characters).
fn cstr<'a>(body: &'a [u8], at: &mut usize) -> Option<Cow<'a, str>> {
    let rest = body.get(*at..)?;
    let end = rest.iter().position(|&c| c == 0)?;
    let s = String::from_utf8_lossy(&rest[..end]);
    *at += end + 1;
    Some(s)
}

/// A C string that may have been cut by the capture bound: the text and whether it was cut.
fn cstr_or_cut<'a>(body: &'a [u8], at: &mut usize, complete: bool) -> Option<(Cow<'a, str>, bool)> {
    if let Some(s) = cstr(body, at) {
        return Some((s, false));
    }
    if complete {
        return None; // a complete body without the NUL: malformed
    }
    let rest = body.get(*at..)?;
    *at = body.len();
    Some((String::from_utf8_lossy(rest), true))
}

/// A frontend (client) message; its names and texts borrow the frame's body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Frontend<'a> {
    /// StartupMessage with its protocol version (major << 16 | minor).
    Startup { protocol: u32 },
    /// SSLRequest.
    SslRequest,
    /// GSSENCRequest.
    GssEncRequest,
    /// CancelRequest (sent on a new connection).
    CancelRequest,
    /// Parse: statement name (empty = unnamed) and SQL text (with a cut flag); `None` when the
    /// capture ends inside the name.
    Parse { statement: Option<Cow<'a, str>>, sql: Option<(Cow<'a, str>, bool)> },
    /// Bind: portal and statement names, when captured.
    Bind { portal: Option<Cow<'a, str>>, statement: Option<Cow<'a, str>> },
    /// Describe of a statement (`S`) or portal (`P`).
    Describe,
    /// Execute of a portal, when its name was captured.
    Execute { portal: Option<Cow<'a, str>> },
    /// Close of a statement (`S`) or portal (`P`) with its name.
    Close { kind: u8, name: Option<Cow<'a, str>> },
    /// Sync.
    Sync,
    /// Flush.
    Flush,
    /// Query (simple query protocol) with its SQL text and a cut flag.
    Query { sql: Cow<'a, str>, truncated: bool },
    /// Terminate.
    Terminate,
    /// PasswordMessage / SASLInitialResponse / SASLResponse / GSSResponse: content never read.
    Password,
    /// CopyData, CopyDone, CopyFail, FunctionCall.
    Other(u8),
    /// A framed message whose body does not match its format.
    Malformed(u8),
}

/// A backend (server) message; its texts borrow the frame's body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Backend<'a> {
    /// The one-byte answer to SSLRequest/GSSENCRequest: `S`/`G` = encryption follows.
    SslResponse(u8),
    /// ReadyForQuery with the transaction status byte (`I`, `T` or `E`).
    ReadyForQuery(u8),
    /// CommandComplete with its tag (e.g. `SELECT 5`, `INSERT 0 1`, `COMMIT`), when captured.
    CommandComplete(Option<Cow<'a, str>>),
    /// ErrorResponse with its SQLSTATE code (field `C`), when captured.
    ErrorResponse(Option<Cow<'a, str>>),
    /// EmptyQueryResponse.
    EmptyQuery,
    /// Asynchronous messages: ParameterStatus, NoticeResponse, NotificationResponse.
    Async,
    /// Authentication request (`R`) or BackendKeyData (`K`): start-up phase.
    Startup,
    /// Any other reply (ParseComplete, BindComplete, CloseComplete, NoData, RowDescription,
    /// DataRow, ParameterDescription, PortalSuspended, copy messages, ...), by type byte.
    Reply(u8),
    /// A framed message whose body does not match its format.
    Malformed(u8),
}

pub(crate) fn frontend(f: &Frame) -> Frontend<'_> {
    let b = &f.body;
    match f.kind {
        FrameKind::Untyped => {
            let code = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
            match code {
                SSL_REQUEST_CODE => Frontend::SslRequest,
                GSSENC_REQUEST_CODE => Frontend::GssEncRequest,
                CANCEL_REQUEST_CODE => Frontend::CancelRequest,
                c => Frontend::Startup { protocol: c },
            }
        }
        FrameKind::SslResponse(c) => Frontend::Malformed(c),
        FrameKind::Typed(t) => {
            let mut at = 0;
            match t {
                b'P' => {
                    let statement = cstr(b, &mut at);
                    let sql = if statement.is_some() { cstr_or_cut(b, &mut at, f.complete) } else { None };
                    if f.complete && sql.is_none() {
                        return Frontend::Malformed(t);
                    }
                    Frontend::Parse { statement, sql }
                }
                b'B' => {
                    let portal = cstr(b, &mut at);
                    let statement = if portal.is_some() { cstr(b, &mut at) } else { None };
                    if f.complete && statement.is_none() {
                        return Frontend::Malformed(t);
                    }
                    Frontend::Bind { portal, statement }
                }
                b'D' => Frontend::Describe,
                b'E' => {
                    let portal = cstr(b, &mut at);
                    if f.complete && portal.is_none() {
                        return Frontend::Malformed(t);
                    }
                    Frontend::Execute { portal }
                }
                b'C' => {
                    let kind = b.first().copied().unwrap_or(0);
                    at = 1;
                    let name = cstr(b, &mut at);
                    if f.complete && (name.is_none() || !matches!(kind, b'S' | b'P')) {
                        return Frontend::Malformed(t);
                    }
                    Frontend::Close { kind, name }
                }
                b'S' => Frontend::Sync,
                b'H' => Frontend::Flush,
                b'X' => Frontend::Terminate,
                b'Q' => match cstr_or_cut(b, &mut at, f.complete) {
                    Some((sql, truncated)) => Frontend::Query { sql, truncated },
                    None => Frontend::Malformed(t),
                },
                b'p' => Frontend::Password,
                other => Frontend::Other(other),
            }
        }
    }
}

pub(crate) fn backend(f: &Frame) -> Backend<'_> {
    let b = &f.body;
    match f.kind {
        FrameKind::SslResponse(c) => Backend::SslResponse(c),
        FrameKind::Untyped => Backend::Malformed(0),
        FrameKind::Typed(t) => match t {
            b'Z' => match b.first() {
                Some(&s @ (b'I' | b'T' | b'E')) => Backend::ReadyForQuery(s),
                _ => Backend::Malformed(t),
            },
            b'C' => {
                let mut at = 0;
                let tag = cstr(b, &mut at);
                if f.complete && tag.is_none() {
                    return Backend::Malformed(t);
                }
                Backend::CommandComplete(tag)
            }
            b'E' => {
                // Fields: a code byte and a C string each, ended by a zero byte.
                let mut at = 0;
                let mut code = None;
                while at < b.len() && b[at] != 0 {
                    let field = b[at];
                    at += 1;
                    match cstr(b, &mut at) {
                        Some(v) if field == b'C' => {
                            if v.len() == 5 && v.bytes().all(|c| c.is_ascii_alphanumeric()) {
                                code = Some(v);
                            }
                        }
                        Some(_) => {}
                        None => break,
                    }
                }
                Backend::ErrorResponse(code)
            }
            b'I' => Backend::EmptyQuery,
            b'S' | b'N' | b'A' => Backend::Async,
            b'R' | b'K' => Backend::Startup,
            other => Backend::Reply(other),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(t: u8, body: &[u8], complete: bool) -> Frame {
        Frame {
            kind: FrameKind::Typed(t),
            len: body.len() as u32 + 4,
            body: body.to_vec(),
            complete,
            ts_first: 0,
            ts_last: 0,
        }
    }

    #[test]
    fn parse_bind_execute_close() {
        assert_eq!(
            frontend(&typed(b'P', b"sqlx_s_1\0SELECT 1\0\0\0", true)),
            Frontend::Parse { statement: Some("sqlx_s_1".into()), sql: Some(("SELECT 1".into(), false)) }
        );
        assert_eq!(
            frontend(&typed(b'P', b"s\0SELECT id FR", false)),
            Frontend::Parse { statement: Some("s".into()), sql: Some(("SELECT id FR".into(), true)) }
        );
        assert_eq!(frontend(&typed(b'P', b"s\0SELECT", true)), Frontend::Malformed(b'P'));
        assert_eq!(
            frontend(&typed(b'B', b"\0sqlx_s_1\0\0\x01\0\x01", true)),
            Frontend::Bind { portal: Some("".into()), statement: Some("sqlx_s_1".into()) }
        );
        assert_eq!(frontend(&typed(b'E', b"\0\0\0\0\0", true)), Frontend::Execute { portal: Some("".into()) });
        assert_eq!(
            frontend(&typed(b'C', b"Ssqlx_s_3\0", true)),
            Frontend::Close { kind: b'S', name: Some("sqlx_s_3".into()) }
        );
    }

    #[test]
    fn error_response_keeps_only_the_sqlstate() {
        let body = b"SERROR\0VERROR\0C22012\0Mdivision by zero\0Fint.c\0\0";
        assert_eq!(backend(&typed(b'E', body, true)), Backend::ErrorResponse(Some("22012".into())));
        assert_eq!(backend(&typed(b'Z', b"T", true)), Backend::ReadyForQuery(b'T'));
        assert_eq!(backend(&typed(b'C', b"SELECT 5\0", true)), Backend::CommandComplete(Some("SELECT 5".into())));
    }
}
