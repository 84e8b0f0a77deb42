//! Load generation with wrk: the five tests of the CRM benchmark (`bench/SPEC.md`, "Load").
//!
//! [`run`] starts `wrk` (optionally pinned with `taskset`) with the embedded script
//! `bench/lua/crm.lua`, which picks the request for each [`Test`] (bearer token, page cycling
//! 1..50, a fresh insert body per request) and prints a machine-readable summary line
//! (`WRK_JSON {...}`) from wrk's `done` hook. Every socket error and every non-2xx/3xx
//! response is counted and returned, never averaged away.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use profiler::runs::{Latency, SocketErrors, Test, WrkResult};

/// The wrk script shared by all five tests (selected with `CRM_TEST`).
pub const WRK_SCRIPT: &str = include_str!("../lua/crm.lua");

/// How to run wrk for one measured (or warm-up) run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WrkOptions {
    /// Base URL of the app, e.g. `http://127.0.0.1:8080`. Must be a loopback address.
    pub base_url: String,
    /// Which test.
    pub test: Test,
    /// Length of the run.
    pub duration: Duration,
    /// Open connections (`wrk -c`).
    pub connections: u32,
    /// wrk threads (`wrk -t`).
    pub threads: u32,
    /// CPU list for `taskset -c` (e.g. `1`), or `None` for no pinning.
    pub cpus: Option<String>,
    /// Bearer token for the authenticated tests.
    pub token: Option<String>,
    /// Per-request timeout (`wrk --timeout`). Default in the benchmark: 10 s.
    pub timeout: Duration,
}

/// Why a wrk run produced no result.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// `wrk` (or `taskset`) is not installed.
    #[error("`{0}` not found: install the Debian package `{1}`")]
    Missing(&'static str, &'static str),
    /// The base URL does not point at loopback: load goes to this machine only.
    #[error("refusing to send load to {0}: only 127.0.0.0/8, localhost and [::1] are allowed")]
    NotLoopback(String),
    /// wrk could not be started.
    #[error("could not start wrk: {0}")]
    Spawn(#[source] std::io::Error),
    /// wrk ran but failed or printed no summary.
    #[error("wrk failed ({status}): {stderr}")]
    Failed {
        /// Exit status as text.
        status: String,
        /// The last lines wrk printed on stderr and stdout.
        stderr: String,
    },
    /// The summary line could not be parsed.
    #[error("could not parse wrk's summary `{line}`: {source}")]
    Parse {
        /// The line.
        line: String,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
}

/// True when `url`'s host is a loopback address or `localhost`.
pub fn is_loopback_url(url: &str) -> bool {
    let rest = url.split("://").nth(1).unwrap_or(url);
    let authority = rest.split('/').next().unwrap_or("");
    let host = if let Some(h) = authority.strip_prefix('[') {
        h.split(']').next().unwrap_or("")
    } else {
        authority.rsplit_once(':').map(|(h, _)| h).unwrap_or(authority)
    };
    host == "localhost" || host.parse::<std::net::IpAddr>().map(|ip| ip.is_loopback()).unwrap_or(false)
}

#[derive(Deserialize)]
struct RawSummary {
    requests: u64,
    duration_us: u64,
    bytes: u64,
    errors: RawErrors,
    latency_us: RawLatency,
}

#[derive(Deserialize)]
struct RawErrors {
    connect: u64,
    read: u64,
    write: u64,
    status: u64,
    timeout: u64,
}

#[derive(Deserialize)]
struct RawLatency {
    min: u64,
    max: u64,
    mean: f64,
    stdev: f64,
    percentiles: std::collections::BTreeMap<String, u64>,
}

/// Parses the `WRK_JSON {...}` line printed by [`WRK_SCRIPT`]'s `done` hook out of wrk's stdout.
/// Returns `Ok(None)` when no such line is present.
pub fn parse_summary(test: Test, stdout: &str) -> Result<Option<WrkResult>, LoadError> {
    let Some(line) = stdout.lines().find_map(|l| l.strip_prefix("WRK_JSON ")) else {
        return Ok(None);
    };
    let raw: RawSummary =
        serde_json::from_str(line).map_err(|source| LoadError::Parse { line: line.to_string(), source })?;
    let p = |k: &str| raw.latency_us.percentiles.get(k).copied().unwrap_or(0);
    let secs = raw.duration_us as f64 / 1e6;
    Ok(Some(WrkResult {
        test,
        requests: raw.requests,
        duration_us: raw.duration_us,
        req_per_s: if secs > 0.0 { raw.requests as f64 / secs } else { 0.0 },
        bytes: raw.bytes,
        errors: SocketErrors {
            connect: raw.errors.connect,
            read: raw.errors.read,
            write: raw.errors.write,
            timeout: raw.errors.timeout,
        },
        non_2xx: raw.errors.status,
        latency: Latency {
            min_us: raw.latency_us.min,
            mean_us: raw.latency_us.mean,
            stdev_us: raw.latency_us.stdev,
            p50_us: p("50"),
            p75_us: p("75"),
            p90_us: p("90"),
            p99_us: p("99"),
            p999_us: p("99.9"),
            max_us: raw.latency_us.max,
        },
    }))
}

fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
        .unwrap_or(false)
}

/// Runs wrk once and returns its summary. Blocks for about `opts.duration`.
///
/// Errors: wrk or taskset missing, a non-loopback URL, wrk failing or printing no summary.
pub fn run(opts: &WrkOptions, scratch_dir: &Path) -> Result<WrkResult, LoadError> {
    if !is_loopback_url(&opts.base_url) {
        return Err(LoadError::NotLoopback(opts.base_url.clone()));
    }
    if !which("wrk") {
        return Err(LoadError::Missing("wrk", "wrk"));
    }
    let script = scratch_dir.join("crm.lua");
    std::fs::write(&script, WRK_SCRIPT).map_err(LoadError::Spawn)?;
    let mut cmd = match &opts.cpus {
        Some(cpus) => {
            if !which("taskset") {
                return Err(LoadError::Missing("taskset", "util-linux"));
            }
            let mut c = Command::new("taskset");
            c.arg("-c").arg(cpus).arg("wrk");
            c
        }
        None => Command::new("wrk"),
    };
    let secs = opts.duration.as_secs().max(1);
    cmd.arg("-t")
        .arg(opts.threads.max(1).to_string())
        .arg("-c")
        .arg(opts.connections.max(opts.threads.max(1)).to_string())
        .arg("-d")
        .arg(format!("{secs}s"))
        .arg("--timeout")
        .arg(format!("{}s", opts.timeout.as_secs().max(1)))
        .arg("-s")
        .arg(&script)
        .arg(&opts.base_url)
        .env("CRM_TEST", opts.test.name())
        .env("CRM_TOKEN", opts.token.as_deref().unwrap_or(""));
    let out = cmd.output().map_err(LoadError::Spawn)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    match parse_summary(opts.test, &stdout)? {
        Some(r) if out.status.success() => Ok(r),
        _ => Err(LoadError::Failed {
            status: out.status.to_string(),
            stderr: last_lines(&format!("{stderr}{stdout}"), 8),
        }),
    }
}

fn last_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    // A line printed by wrk 4.1.0 (Debian) with bench/lua/crm.lua against a server that
    // answered 404 to every request: 1,908 requests in 1.001371 s, all non-2xx.
    const SAMPLE: &str = "Running 1s test @ http://127.0.0.1:18080/\n  1 threads and 2 connections\n\
Requests/sec:   1905.39\n\
WRK_JSON {\"requests\":1908,\"duration_us\":1001371,\"bytes\":992160,\"errors\":{\"connect\":0,\"read\":0,\"write\":0,\"status\":1908,\"timeout\":0},\"latency_us\":{\"min\":204,\"max\":13095,\"mean\":1024.5,\"stdev\":875.1,\"percentiles\":{\"50\":891,\"75\":1132,\"90\":1466,\"99\":3379,\"99.9\":12820}}}\n";

    #[test]
    fn parses_the_summary_line() {
        let r = parse_summary(Test::Json, SAMPLE).unwrap().unwrap();
        assert_eq!(r.requests, 1908);
        assert_eq!(r.non_2xx, 1908);
        assert_eq!(r.failed(), 1908);
        // wrk printed 1905.39 req/s for the same run.
        assert!((r.req_per_s - 1905.39).abs() < 0.01, "{}", r.req_per_s);
        assert_eq!(r.latency.p50_us, 891);
        assert_eq!(r.latency.p999_us, 12820);
        assert_eq!(r.latency.max_us, 13095);
    }

    #[test]
    fn no_summary_is_none_and_garbage_is_an_error() {
        assert!(parse_summary(Test::Db, "Running 1s test\n").unwrap().is_none());
        assert!(matches!(parse_summary(Test::Db, "WRK_JSON {nope"), Err(LoadError::Parse { .. })));
    }

    #[test]
    fn only_loopback_targets() {
        assert!(is_loopback_url("http://127.0.0.1:8080"));
        assert!(is_loopback_url("http://127.9.9.9:1/x"));
        assert!(is_loopback_url("http://localhost:8080/"));
        assert!(is_loopback_url("http://[::1]:8080"));
        assert!(!is_loopback_url("http://10.0.0.1:8080"));
        assert!(!is_loopback_url("http://example.com"));
        assert!(!is_loopback_url("http://192.168.1.2"));
    }

    #[test]
    fn test_names_round_trip() {
        for t in Test::ALL {
            assert_eq!(t.name().parse::<Test>().unwrap(), t);
        }
        assert!("nope".parse::<Test>().is_err());
    }
}
