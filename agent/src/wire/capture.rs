//! A plain-text capture format for [`Chunk`]s: one chunk per line, for test fixtures and
//! for replaying recorded traffic through the decoders.
//!
//! ```text
//! # profiler wire capture v1
//! # ts_ns pid tid socket protocol direction total_len head_hex tail_hex
//! 1345388376697 0 0 1 pg tx 40 510000002753454c45... -
//! ```
//!
//! Fields are separated by spaces: `ts_ns` (u64, ns), `pid`, `tid` (u32), `socket` (u64),
//! `protocol` (`pg` or `http`), `direction` (`tx` or `rx`, seen from the target), `total_len`
//! (u64, bytes the syscall moved), `head_hex` and `tail_hex` (lower- or upper-case hex of the
//! captured head and tail; `-` for none). Lines starting with `#` and blank lines are ignored.

use super::{Chunk, Direction, Protocol};

/// A capture line that does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("capture line {line}: {reason}")]
pub struct CaptureError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if s == "-" {
        return Ok(Vec::new());
    }
    if !s.len().is_multiple_of(2) {
        return Err(format!("odd number of hex digits ({})", s.len()));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|_| format!("not hex: {:?}", &s[i..i + 2])))
        .collect()
}

fn hex(b: &[u8]) -> String {
    if b.is_empty() {
        return "-".to_string();
    }
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    s
}

/// Parse a whole capture.
pub fn read_capture(text: &str) -> Result<Vec<Chunk>, CaptureError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |reason: String| CaptureError { line: i + 1, reason };
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        if f.len() != 9 {
            return Err(err(format!("expected 9 fields, found {}", f.len())));
        }
        let num = |k: usize, name: &str| f[k].parse::<u64>().map_err(|_| err(format!("{name} is not a number: {:?}", f[k])));
        let ts_ns = num(0, "ts_ns")?;
        let pid = u32::try_from(num(1, "pid")?).map_err(|_| err("pid out of range".into()))?;
        let tid = u32::try_from(num(2, "tid")?).map_err(|_| err("tid out of range".into()))?;
        let socket = num(3, "socket")?;
        let protocol = match f[4] {
            "pg" => Protocol::Postgres,
            "http" => Protocol::Http,
            o => return Err(err(format!("unknown protocol {o:?} (pg or http)"))),
        };
        let direction = match f[5] {
            "tx" => Direction::Tx,
            "rx" => Direction::Rx,
            o => return Err(err(format!("unknown direction {o:?} (tx or rx)"))),
        };
        let total_len = num(6, "total_len")?;
        let head = unhex(f[7]).map_err(&err)?;
        let tail = unhex(f[8]).map_err(&err)?;
        if head.len() as u64 > total_len || tail.len() as u64 > total_len {
            return Err(err(format!(
                "head ({}) or tail ({}) longer than total_len ({total_len})",
                head.len(),
                tail.len()
            )));
        }
        out.push(Chunk { ts_ns, pid, tid, socket, protocol, direction, total_len, head, tail });
    }
    Ok(out)
}

/// Write chunks in the capture format (with the header comment).
pub fn write_capture(chunks: &[Chunk]) -> String {
    let mut s = String::from("# profiler wire capture v1\n# ts_ns pid tid socket protocol direction total_len head_hex tail_hex\n");
    for c in chunks {
        let p = match c.protocol {
            Protocol::Postgres => "pg",
            Protocol::Http => "http",
        };
        let d = match c.direction {
            Direction::Tx => "tx",
            Direction::Rx => "rx",
        };
        s.push_str(&format!(
            "{} {} {} {} {p} {d} {} {} {}\n",
            c.ts_ns,
            c.pid,
            c.tid,
            c.socket,
            c.total_len,
            hex(&c.head),
            hex(&c.tail)
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let text = "# c\n\n10 1 2 3 pg tx 5 5300000004 -\n11 1 2 3 http rx 300 4745 2f31\n";
        let chunks = read_capture(text).unwrap();
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[0].head, vec![b'S', 0, 0, 0, 4]);
        assert_eq!(chunks[1].protocol, Protocol::Http);
        assert_eq!(chunks[1].total_len, 300);
        assert_eq!(chunks[1].tail, b"/1".to_vec());
        assert_eq!(read_capture(&write_capture(&chunks)).unwrap(), chunks);
        let e = read_capture("1 2 3 4 pg up 1 00 -").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.reason.contains("direction"), "{e}");
        assert_eq!(read_capture("x\n1 0 0 1 pg tx 1 0 -").unwrap_err().line, 1);
        assert!(read_capture("1 0 0 1 pg tx 1 0011 -").unwrap_err().reason.contains("longer"));
    }
}
