//! The agent's overhead, measured by alternating runs (`profiler bench overhead`).
//!
//! Per test and per agent mode: `pairs` pairs of wrk runs of the same length, the first of each
//! pair without the agent (A), the second with the agent attached in that mode (B): A B A B ...
//! The ratio of a pair is `B req/s / A req/s`; a row reports the median, the minimum and the
//! maximum ratio over its pairs. Alternating cancels most of the machine's drift (other work,
//! the database growing under `deals-create`), which a "measured runs, then one profiled run"
//! sequence does not.
//!
//! This crate does not depend on the agent: each mode is a named [`ProfileHook`] that the caller
//! (`profiler bench overhead`) passes in, and the footprint of the agent is the caller's
//! business too (it reads it from the profiles each attached run wrote).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::load::Test;
use crate::run::{measured_run, BenchError, BenchOptions, Environment, ProfileHook, Progress};

/// Version of the `overhead.json` schema.
pub const OVERHEAD_SCHEMA_VERSION: u32 = 1;

/// One agent mode to measure: a name for the reports (`sampling`, `+offcpu`, ...) and the hook
/// that attaches the agent in that mode.
pub struct Mode<'a> {
    /// Name in `overhead.json` and `overhead.md`.
    pub name: &'a str,
    /// Attaches the agent for each B run.
    pub hook: &'a dyn ProfileHook,
}

/// One A/B pair: the same test without and with the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pair {
    /// req/s without the agent (A).
    pub unattached_req_per_s: f64,
    /// req/s with the agent attached (B).
    pub attached_req_per_s: f64,
    /// `attached / unattached`; 0 when A measured nothing.
    pub ratio: f64,
    /// Failed requests of both runs (socket errors plus non-2xx/3xx).
    pub failed_requests: u64,
    /// Folder of the B run's attach outputs, relative to the output folder.
    pub dir: String,
}

/// One row of `overhead.json`: a test under one agent mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// The test (`json`, `db`, ...).
    pub test: Test,
    /// The agent mode's name.
    pub mode: String,
    /// Median of the pairs' ratios (mean of the two middle ones for an even count).
    pub ratio_median: f64,
    /// Smallest ratio.
    pub ratio_min: f64,
    /// Largest ratio.
    pub ratio_max: f64,
    /// Number of pairs.
    pub pairs: u32,
    /// Median req/s of the A runs.
    pub unattached_req_per_s_median: f64,
    /// Every pair, in order.
    pub runs: Vec<Pair>,
    /// Why the row is incomplete (the agent could not attach, ...), when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Settings of an overhead run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverheadSettings {
    /// Tests, in order.
    pub tests: Vec<Test>,
    /// Mode names, in order.
    pub modes: Vec<String>,
    /// Pairs per test and mode.
    pub pairs: u32,
    /// Length of each run, s.
    pub duration_s: u64,
    /// Warm-up per test before its first pair, s.
    pub warmup_s: u64,
    /// wrk connections.
    pub connections: u32,
    /// wrk threads.
    pub threads: u32,
    /// CPUs of the app.
    pub app_cpus: String,
    /// CPUs of wrk.
    pub load_cpus: String,
    /// `CRM_COSTS` of the app.
    pub costs: String,
    /// On-CPU sampling frequency of the agent, Hz.
    pub frequency_hz: u64,
    /// Smoke run (short, few pairs): shape only, not a measurement.
    pub smoke: bool,
}

/// Everything `overhead.json` holds except the agent's footprint, which the agent adds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OverheadResults {
    /// [`OVERHEAD_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Start, RFC 3339 UTC.
    pub started_at: String,
    /// End, RFC 3339 UTC.
    pub finished_at: String,
    /// Online CPUs.
    pub cpus: u32,
    /// CPU model from `/proc/cpuinfo`.
    pub cpu_model: String,
    /// `uname -r`.
    pub kernel: String,
    /// Settings; `None` until the run starts.
    pub settings: Option<OverheadSettings>,
    /// One row per test and mode, in the order measured.
    pub rows: Vec<Row>,
}

/// The footprint of one mode over all its attached runs: medians, and the largest peak RSS.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModeFootprint {
    /// The mode's name.
    pub mode: String,
    /// Attached runs read (every test).
    pub runs: u32,
    /// Median time to attach, ms.
    pub attach_ms_median: f64,
    /// Largest time to attach, ms.
    pub attach_ms_max: f64,
    /// Median CPU of the agent's process while attached, % of one CPU.
    pub cpu_pct_median: f64,
    /// Largest CPU of the agent's process while attached, % of one CPU.
    pub cpu_pct_max: f64,
    /// Median CPU of the agent's own threads while attached, % of one CPU, over the runs
    /// that measured it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads_cpu_pct_median: Option<f64>,
    /// Largest CPU of the agent's own threads while attached, % of one CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads_cpu_pct_max: Option<f64>,
    /// Largest peak RSS at the end of a collection, MB.
    pub peak_rss_mb_collecting_max: f64,
    /// Largest peak RSS through symbolization and reports, MB.
    pub peak_rss_mb_total_max: f64,
    /// Median time to symbolize and write the reports, ms.
    pub reports_ms_median: f64,
    /// Median BPF run time, % of one CPU (every process on the host), when measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bpf_pct_median: Option<f64>,
}

/// `overhead.json`: the rows of [`OverheadResults`] and the agent's footprint per mode.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OverheadReport {
    /// Measurements, settings and machine.
    #[serde(flatten)]
    pub results: OverheadResults,
    /// The agent's footprint per mode.
    pub footprint: Vec<ModeFootprint>,
    /// The command line that produced this file.
    pub command: String,
}

/// Median of `values` ([`profiler::runs::median`]); 0 for none.
pub fn median(values: &[f64]) -> f64 {
    profiler::runs::median(values).unwrap_or(0.0)
}

impl Row {
    /// A row from its pairs (ratios, median, min, max).
    pub fn from_pairs(test: Test, mode: &str, runs: Vec<Pair>, error: Option<String>) -> Row {
        let ratios: Vec<f64> = runs.iter().map(|p| p.ratio).collect();
        let a: Vec<f64> = runs.iter().map(|p| p.unattached_req_per_s).collect();
        Row {
            test,
            mode: mode.to_string(),
            ratio_median: median(&ratios),
            ratio_min: if ratios.is_empty() {
                0.0
            } else {
                ratios.iter().copied().fold(f64::INFINITY, f64::min)
            },
            ratio_max: ratios.iter().copied().fold(0.0, f64::max),
            pairs: runs.len() as u32,
            unattached_req_per_s_median: median(&a),
            runs,
            error,
        }
    }
}

/// Runs the overhead measurement: starts the environment (PostgreSQL, the app), then per test
/// a warm-up of `opts.warmup` and, per mode, `pairs` A/B pairs of `opts.duration` each. Each B
/// run's attach outputs go to `<out_dir>/<test>/<mode>/pair-<i>/`. `results` receives every
/// row as soon as it is complete, so that an interrupted run keeps what it measured. No
/// conformance gate (`profiler bench` has one); `deals-create` inserts rows throughout, which
/// the alternation spreads over A and B alike.
///
/// Errors: the environment could not start, or wrk failed (a B run whose agent fails to attach
/// or to finish ends its row with `error` instead).
pub async fn run(
    opts: &BenchOptions,
    modes: &[Mode<'_>],
    pairs: u32,
    progress: &dyn Progress,
    results: Arc<Mutex<OverheadResults>>,
) -> Result<(), BenchError> {
    std::fs::create_dir_all(&opts.out_dir).map_err(|source| BenchError::Io {
        path: opts.out_dir.clone(),
        source,
    })?;
    {
        let mut r = results.lock().unwrap_or_else(|e| e.into_inner());
        r.schema_version = OVERHEAD_SCHEMA_VERSION;
        r.started_at = crate::run::now_rfc3339();
        r.cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        r.cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines().find_map(|l| {
                    l.strip_prefix("model name")
                        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
                })
            })
            .unwrap_or_default();
        r.kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        r.settings = Some(OverheadSettings {
            tests: opts.tests.clone(),
            modes: modes.iter().map(|m| m.name.to_string()).collect(),
            pairs,
            duration_s: opts.duration.as_secs(),
            warmup_s: opts.warmup.as_secs(),
            connections: opts.connections,
            threads: opts.threads,
            app_cpus: opts.app_cpus.clone(),
            load_cpus: opts.load_cpus.clone(),
            costs: opts.costs.clone(),
            frequency_hz: opts.frequency_hz,
            smoke: opts.smoke,
        });
    }
    let mut env = Environment::start(opts, progress).await?;
    let outcome = measure(&env, opts, modes, pairs, progress, &results).await;
    env.shutdown().await;
    results
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .finished_at = crate::run::now_rfc3339();
    outcome
}

async fn measure(
    env: &Environment,
    opts: &BenchOptions,
    modes: &[Mode<'_>],
    pairs: u32,
    progress: &dyn Progress,
    results: &Arc<Mutex<OverheadResults>>,
) -> Result<(), BenchError> {
    let token = crate::token::mint_valid(&opts.jwt_secret, 1);
    let scratch = tempfile::tempdir().map_err(|source| BenchError::Io {
        path: "<tempdir>".into(),
        source,
    })?;
    let expected = opts.duration * 2 * pairs.max(1);
    for &test in &opts.tests {
        if !opts.warmup.is_zero() {
            progress.step(
                &format!("{test}: warm-up {} s", opts.warmup.as_secs()),
                opts.warmup,
            );
            let warm = measured_run(env, opts, test, opts.warmup, &token, scratch.path()).await?;
            progress.done(&format!("{test}: warm-up {:.0} req/s", warm.wrk.req_per_s));
        }
        for mode in modes {
            progress.step(
                &format!(
                    "{test}, {}: {pairs} pairs of {} s runs, without and with the agent",
                    mode.name,
                    opts.duration.as_secs()
                ),
                expected,
            );
            let mut runs = Vec::new();
            let mut error = None;
            for i in 0..pairs.max(1) {
                let a =
                    measured_run(env, opts, test, opts.duration, &token, scratch.path()).await?;
                let rel = PathBuf::from(test.name())
                    .join(dir_name(mode.name))
                    .join(format!("pair-{}", i + 1));
                let session = match mode.hook.start(
                    &env.target,
                    test,
                    &opts.out_dir.join(&rel),
                    opts.duration,
                ) {
                    Ok(s) => s,
                    Err(e) => {
                        error = Some(format!("pair {}: could not attach: {e}", i + 1));
                        break;
                    }
                };
                // No restart here: the measured part begins with the attach.
                session.measured_part_begins();
                let b = measured_run(env, opts, test, opts.duration, &token, scratch.path()).await;
                let finished = tokio::task::spawn_blocking(move || session.finish())
                    .await
                    .unwrap_or_else(|e| Err(format!("profiling task: {e}")));
                let b = b?;
                if let Err(e) = finished {
                    error = Some(format!("pair {}: the agent failed: {e}", i + 1));
                    break;
                }
                let ratio = if a.wrk.req_per_s > 0.0 {
                    b.wrk.req_per_s / a.wrk.req_per_s
                } else {
                    0.0
                };
                runs.push(Pair {
                    unattached_req_per_s: a.wrk.req_per_s,
                    attached_req_per_s: b.wrk.req_per_s,
                    ratio,
                    failed_requests: a.wrk.failed() + b.wrk.failed(),
                    dir: rel.to_string_lossy().into_owned(),
                });
            }
            let row = Row::from_pairs(test, mode.name, runs, error);
            progress.done(&format!(
                "{test}, {}: ratio {:.3} ({:.3}-{:.3}) over {} pairs, unattached {:.0} req/s{}",
                mode.name,
                row.ratio_median,
                row.ratio_min,
                row.ratio_max,
                row.pairs,
                row.unattached_req_per_s_median,
                row.error
                    .as_deref()
                    .map(|e| format!("; {e}"))
                    .unwrap_or_default()
            ));
            results
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .rows
                .push(row);
        }
    }
    Ok(())
}

/// A mode's folder name: `+offcpu` -> `offcpu`.
fn dir_name(mode: &str) -> String {
    mode.chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(a: f64, b: f64) -> Pair {
        Pair {
            unattached_req_per_s: a,
            attached_req_per_s: b,
            ratio: b / a,
            failed_requests: 0,
            dir: String::new(),
        }
    }

    #[test]
    fn row_statistics() {
        let row = Row::from_pairs(
            Test::Json,
            "sampling",
            vec![pair(100.0, 99.0), pair(200.0, 190.0), pair(100.0, 101.0)],
            None,
        );
        assert_eq!(row.pairs, 3);
        assert!((row.ratio_median - 0.99).abs() < 1e-9);
        assert!((row.ratio_min - 0.95).abs() < 1e-9);
        assert!((row.ratio_max - 1.01).abs() < 1e-9);
        assert!((row.unattached_req_per_s_median - 100.0).abs() < 1e-9);
        let empty = Row::from_pairs(Test::Db, "everything", vec![], Some("x".into()));
        assert_eq!(
            (
                empty.pairs,
                empty.ratio_min,
                empty.ratio_max,
                empty.ratio_median
            ),
            (0, 0.0, 0.0, 0.0)
        );
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(dir_name("+offcpu"), "offcpu");
    }
}
