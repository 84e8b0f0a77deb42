//! `syscalls.json`: the target's per-syscall statistics with derived rates and latencies.
//!
//! Shape (all latencies in ns, rates per second of wall-clock run time):
//! ```json
//! {"duration_ns": 10000000000, "traced_share": 0.25,
//!  "syscalls": [{"nr": 44, "name": "sendto", "count": 3000, "traced_calls": 750,
//!                "errors": 0, "eagain": 0,
//!                "calls_per_sec": 300.0, "errors_per_sec": 0.0, "eagain_per_sec": 0.0,
//!                "total_latency_ns": 2400000, "mean_latency_ns": 800.0,
//!                "p50_latency_ns": 768.0, "p99_latency_ns": 2016.0,
//!                "latency_log2_ns": [0, 0, ...]}]}
//! ```
//! sorted by `count`, most called first. When the syscall programs were attached only part of
//! the run (`traced_share` < 1, see `collect::Options::syscalls_duty_pct`), `count`, `errors`,
//! `eagain` and the rates are estimates for the whole run (the calls seen, `traced_calls`,
//! times [`Meta::syscall_scale`](crate::profile::Meta::syscall_scale)); the histogram and
//! `total_latency_ns` are the calls seen. Percentiles are estimated from the log2 histogram
//! ([`log2_quantile`]); the mean is exact (`total_latency_ns / traced_calls`).

use serde::Serialize;

use crate::profile::{Profile, SyscallStat};

/// One syscall's line of `syscalls.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SyscallReport {
    /// x86_64 syscall number.
    pub nr: u32,
    /// Syscall name, e.g. `sendto`.
    pub name: String,
    /// Completed calls in the run (an estimate when `traced_share` < 1).
    pub count: u64,
    /// Completed calls seen while the syscall programs were attached.
    pub traced_calls: u64,
    /// Calls that returned an error, `-EAGAIN` included (estimated like `count`).
    pub errors: u64,
    /// Calls that returned `-EAGAIN` or `-EINPROGRESS` (estimated like `count`).
    pub eagain: u64,
    /// Calls per second of run time (0 when the duration is unknown).
    pub calls_per_sec: f64,
    /// Errors per second of run time.
    pub errors_per_sec: f64,
    /// `-EAGAIN` and `-EINPROGRESS` returns per second of run time.
    pub eagain_per_sec: f64,
    /// Sum of entry-to-exit latencies of the calls seen, ns.
    pub total_latency_ns: u64,
    /// Mean latency, ns (`None` without calls).
    pub mean_latency_ns: Option<f64>,
    /// Median latency estimated from the histogram, ns.
    pub p50_latency_ns: Option<f64>,
    /// 99th percentile latency estimated from the histogram, ns.
    pub p99_latency_ns: Option<f64>,
    /// The histogram: entry `i` counts calls with latency in `[2^i, 2^(i+1))` ns.
    pub latency_log2_ns: Vec<u64>,
    /// Mean bytes moved per successful call, for the read and write families
    /// ([`crate::profile::SyscallStat::bytes_per_call`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_per_call: Option<f64>,
}

/// The whole `syscalls.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SyscallsReport {
    /// Wall-clock length of the run the rates are per, ns.
    pub duration_ns: u64,
    /// `1 / Meta::syscall_scale`: the share of the requests the wire saw served inside the
    /// windows the syscall programs were attached, or without a wire capture the share of the
    /// run they were attached (0..=1; 1 when every call was counted).
    pub traced_share: f64,
    /// One entry per syscall, most called first (ties by name).
    pub syscalls: Vec<SyscallReport>,
}

/// Estimates the `q`-quantile (0 < q <= 1) of latencies from a log2 histogram
/// (`hist[i]` = calls in `[2^i, 2^(i+1))` ns).
///
/// The rank is `ceil(q × total)`; inside the bucket that holds it the value is interpolated
/// linearly as if the bucket's calls were spread evenly over `[2^i, 2^(i+1))`, so the estimate
/// is within a factor of 2 of the truth. Returns `None` for an empty histogram.
///
/// Example: `hist = [0, 0, 4]` (four calls in [4, 8) ns): p50 is rank 2 of 4 in that bucket,
/// 4 + 4 × 2/4 = 6 ns.
pub fn log2_quantile(hist: &[u64], q: f64) -> Option<f64> {
    let total: u64 = hist.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
    let mut below = 0u64;
    for (i, &n) in hist.iter().enumerate() {
        if n > 0 && below + n >= rank {
            let low = 2f64.powi(i as i32);
            let within = (rank - below) as f64 / n as f64;
            return Some(low + low * within);
        }
        below += n;
    }
    None
}

fn per_sec(n: u64, duration_ns: u64) -> f64 {
    if duration_ns == 0 {
        0.0
    } else {
        n as f64 * 1e9 / duration_ns as f64
    }
}

/// One syscall's derived statistics over a run of `duration_ns`, its counts multiplied by
/// `scale` (see [`Meta::syscall_scale`](crate::profile::Meta::syscall_scale)).
pub fn syscall_report(stat: &SyscallStat, duration_ns: u64, scale: f64) -> SyscallReport {
    let est = |n: u64| (n as f64 * scale).round() as u64;
    let (count, errors, eagain) = (est(stat.count), est(stat.errors), est(stat.eagain));
    SyscallReport {
        nr: stat.nr,
        name: stat.name.clone(),
        count,
        traced_calls: stat.count,
        errors,
        eagain,
        calls_per_sec: per_sec(count, duration_ns),
        errors_per_sec: per_sec(errors, duration_ns),
        eagain_per_sec: per_sec(eagain, duration_ns),
        total_latency_ns: stat.total_ns,
        mean_latency_ns: (stat.count > 0).then(|| stat.total_ns as f64 / stat.count as f64),
        p50_latency_ns: log2_quantile(&stat.latency_log2_ns, 0.5),
        p99_latency_ns: log2_quantile(&stat.latency_log2_ns, 0.99),
        latency_log2_ns: stat.latency_log2_ns.clone(),
        bytes_per_call: stat.bytes_per_call(),
    }
}

/// The `syscalls.json` content of `profile`.
pub fn report(profile: &Profile) -> SyscallsReport {
    let duration_ns = profile.meta.duration_ns;
    let scale = profile.meta.syscall_scale();
    let mut syscalls: Vec<SyscallReport> = profile
        .syscalls
        .iter()
        .map(|s| syscall_report(s, duration_ns, scale))
        .collect();
    syscalls.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.name.cmp(&b.name)));
    SyscallsReport {
        duration_ns,
        traced_share: 1.0 / scale,
        syscalls,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_from_log2_buckets() {
        // The doc example: four calls in [4, 8) ns; p50 = rank 2 of 4 -> 4 + 4 * 2/4 = 6.
        assert_eq!(log2_quantile(&[0, 0, 4], 0.5), Some(6.0));
        // Rank 4 of 4 is the bucket's top.
        assert_eq!(log2_quantile(&[0, 0, 4], 1.0), Some(8.0));
        // One call in [1, 2): every quantile is 2 (the rank rounds up to 1).
        assert_eq!(log2_quantile(&[1], 0.01), Some(2.0));
        // 90 calls in [2, 4), 10 in [1024, 2048): p90 = 4 (rank 90), p91 = 1024 + 102.4.
        let mut h = vec![0u64; 11];
        h[1] = 90;
        h[10] = 10;
        assert_eq!(log2_quantile(&h, 0.9), Some(4.0));
        assert_eq!(log2_quantile(&h, 0.91), Some(1024.0 + 102.4));
        assert_eq!(log2_quantile(&[], 0.5), None);
        assert_eq!(log2_quantile(&[0, 0], 0.5), None);
    }

    #[test]
    fn rates_need_a_duration() {
        let stat = SyscallStat {
            nr: 0,
            name: "read".into(),
            count: 10,
            errors: 4,
            eagain: 2,
            total_ns: 1_000,
            latency_log2_ns: vec![],
            bytes: 96,
            window_counts: Vec::new(),
        };
        let r = syscall_report(&stat, 500_000_000, 1.0);
        // 6 successful reads moved 96 bytes.
        assert_eq!(r.bytes_per_call, Some(16.0));
        assert_eq!((r.calls_per_sec, r.errors_per_sec, r.eagain_per_sec), (20.0, 8.0, 4.0));
        assert_eq!(r.mean_latency_ns, Some(100.0));
        assert_eq!(r.p50_latency_ns, None);
        assert_eq!(syscall_report(&stat, 0, 1.0).calls_per_sec, 0.0);
        // Counted a quarter of the run: counts and rates are 4x the calls seen, the mean is
        // that of the calls seen.
        let r = syscall_report(&stat, 500_000_000, 4.0);
        assert_eq!((r.count, r.traced_calls, r.errors, r.eagain), (40, 10, 16, 8));
        assert_eq!((r.calls_per_sec, r.errors_per_sec, r.eagain_per_sec), (80.0, 32.0, 16.0));
        assert_eq!(r.mean_latency_ns, Some(100.0));
    }
}
