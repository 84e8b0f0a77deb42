//! `profiler bench overhead`: the agent's cost on target-app, by alternating runs.
//!
//! Per test and per agent mode ([`AgentMode`]), `--pairs` pairs of wrk runs: without the agent
//! (A), then with the agent attached in that mode (B); see [`crate::overhead`]. Writes
//! `overhead.json` (`{"rows":[{"test","mode","ratio_median","ratio_min","ratio_max","pairs",
//! ...}], "footprint":[...], ...}`, ratio = attached req/s / unattached req/s of the same pair)
//! and `overhead.md` into `--out`, and prints the table. The footprint rows summarize the
//! `footprint.json` that every attached run wrote beside its profile ([`RunFootprint`]).

use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use crate::overhead::{median, Mode, ModeFootprint, OverheadReport, OverheadResults};
use crate::run::{BenchOptions, ProfileHook};
use serde::{Deserialize, Serialize};

use profiler::collect;
use profiler::profile::Profile;

/// What the agent collects in one overhead mode. Every mode samples on-CPU stacks at the
/// `--frequency` with the default unwinding (`--unwind auto`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AgentMode {
    /// On-CPU sampling only (`profiler attach --no-offcpu --no-syscalls --no-wire`).
    Sampling,
    /// + off-CPU waits (`--no-syscalls --no-wire`).
    OffCpu,
    /// + syscall statistics (`--no-wire`).
    Syscalls,
    /// + wire capture: the agent's defaults, every tracer on.
    Everything,
}

impl AgentMode {
    /// Every mode, cheapest first.
    pub const ALL: [AgentMode; 4] = [
        AgentMode::Sampling,
        AgentMode::OffCpu,
        AgentMode::Syscalls,
        AgentMode::Everything,
    ];

    /// Name in `overhead.json`: `sampling`, `+offcpu`, `+syscalls`, `everything`.
    pub fn name(self) -> &'static str {
        match self {
            AgentMode::Sampling => "sampling",
            AgentMode::OffCpu => "+offcpu",
            AgentMode::Syscalls => "+syscalls",
            AgentMode::Everything => "everything",
        }
    }

    /// `base` with the tracers of this mode switched on and the others off.
    pub fn options(self, base: collect::Options) -> collect::Options {
        let (offcpu, syscalls, wire) = match self {
            AgentMode::Sampling => (false, false, false),
            AgentMode::OffCpu => (true, false, false),
            AgentMode::Syscalls => (true, true, false),
            AgentMode::Everything => (true, true, true),
        };
        collect::Options {
            offcpu,
            syscalls,
            wire,
            ..base
        }
    }
}

/// The agent's footprint in one attached run (`footprint.json` beside its `profile.json`),
/// from [`profiler::profile::Footprint`] plus what happens after the collection.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunFootprint {
    /// From loading the BPF objects until every program was attached, ms.
    pub attach_ms: f64,
    /// CPU of the agent's process while attached, % of one CPU over the run: inside the
    /// bench this includes the harness's threads (wrk, `/proc` readings).
    pub cpu_pct_of_one_cpu: f64,
    /// CPU of the agent's own threads while attached (collection and drain threads), % of one
    /// CPU over the run ([`profiler::profile::Footprint::threads_cpu_ns`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads_cpu_pct_of_one_cpu: Option<f64>,
    /// Length of the run, s.
    pub duration_s: f64,
    /// Peak RSS of the agent's process at the end of the collection, MB (10^6 bytes). The
    /// peak is reset when the collection starts (`/proc/self/clear_refs` 5).
    pub peak_rss_mb_collecting: f64,
    /// Peak RSS through symbolization and report writing, MB.
    pub peak_rss_mb_total: f64,
    /// Symbolizing and writing every report of the run, ms.
    pub reports_ms: f64,
    /// BPF programs' run time over the run, % of one CPU (every process on the host), when
    /// BPF run statistics were on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bpf_pct_of_one_cpu: Option<f64>,
    /// Mean BPF program run time, ns per run, when BPF run statistics were on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bpf_ns_per_run: Option<f64>,
    /// Each program's runs and run time, most run time first, when BPF run statistics were
    /// on ([`profiler::profile::Footprint::programs`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub programs: Vec<profiler::profile::ProgramCost>,
}

impl RunFootprint {
    /// From a finished profile, the peak RSS now and the time the reports took.
    pub fn of(profile: &Profile, reports: std::time::Duration) -> Option<RunFootprint> {
        let f = profile.meta.footprint.as_ref()?;
        let duration_ns = profile.meta.duration_ns.max(1);
        Some(RunFootprint {
            attach_ms: f.attach_ns as f64 / 1e6,
            cpu_pct_of_one_cpu: f.cpu_ns as f64 / duration_ns as f64 * 100.0,
            threads_cpu_pct_of_one_cpu: f.threads_cpu_ns.map(|ns| ns as f64 / duration_ns as f64 * 100.0),
            duration_s: duration_ns as f64 / 1e9,
            peak_rss_mb_collecting: f.peak_rss_bytes as f64 / 1e6,
            peak_rss_mb_total: collect::self_peak_rss_bytes() as f64 / 1e6,
            reports_ms: reports.as_secs_f64() * 1e3,
            bpf_pct_of_one_cpu: f
                .bpf_run_ns
                .map(|ns| ns as f64 / duration_ns as f64 * 100.0),
            bpf_ns_per_run: match (f.bpf_run_ns, f.bpf_run_count) {
                (Some(ns), Some(runs)) if runs > 0 => Some(ns as f64 / runs as f64),
                _ => None,
            },
            programs: f.programs.clone(),
        })
    }

    /// Writes `footprint.json` into `dir`.
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let json = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        profiler::output::write_bytes_replacing(dir.join("footprint.json"), json + "\n")
    }
}

fn max(values: &[f64]) -> f64 {
    values.iter().copied().fold(0.0, f64::max)
}

/// Reads every `footprint.json` of `mode`'s attached runs under `out`.
fn mode_footprint(results: &OverheadResults, mode: &str, out: &Path) -> ModeFootprint {
    let runs: Vec<RunFootprint> = results
        .rows
        .iter()
        .filter(|r| r.mode == mode)
        .flat_map(|r| r.runs.iter())
        .filter_map(|p| std::fs::read_to_string(out.join(&p.dir).join("footprint.json")).ok())
        .filter_map(|s| serde_json::from_str(&s).ok())
        .collect();
    let col = |f: fn(&RunFootprint) -> f64| runs.iter().map(f).collect::<Vec<f64>>();
    let bpf: Vec<f64> = runs.iter().filter_map(|r| r.bpf_pct_of_one_cpu).collect();
    let threads: Vec<f64> = runs.iter().filter_map(|r| r.threads_cpu_pct_of_one_cpu).collect();
    ModeFootprint {
        mode: mode.to_string(),
        runs: runs.len() as u32,
        attach_ms_median: median(&col(|r| r.attach_ms)),
        attach_ms_max: max(&col(|r| r.attach_ms)),
        cpu_pct_median: median(&col(|r| r.cpu_pct_of_one_cpu)),
        cpu_pct_max: max(&col(|r| r.cpu_pct_of_one_cpu)),
        threads_cpu_pct_median: (!threads.is_empty()).then(|| median(&threads)),
        threads_cpu_pct_max: (!threads.is_empty()).then(|| max(&threads)),
        peak_rss_mb_collecting_max: max(&col(|r| r.peak_rss_mb_collecting)),
        peak_rss_mb_total_max: max(&col(|r| r.peak_rss_mb_total)),
        reports_ms_median: median(&col(|r| r.reports_ms)),
        bpf_pct_median: (!bpf.is_empty()).then(|| median(&bpf)),
    }
}

/// Runs the overhead measurement for `opts` (tests, durations, CPUs) with `pairs` pairs per
/// test and mode, then writes `overhead.json` and `overhead.md` into `opts.out_dir` (also when
/// it was interrupted, with what was measured). `make_hook` builds the agent hook of a mode.
///
/// Errors: the environment could not start, wrk failed, an output could not be written, or
/// the run was interrupted (Ctrl-C or SIGTERM).
pub fn run(
    opts: &BenchOptions,
    pairs: u32,
    runtime: &tokio::runtime::Runtime,
    progress: &dyn crate::run::Progress,
    make_hook: impl Fn(AgentMode) -> Box<dyn ProfileHook>,
) -> Result<OverheadReport> {
    let hooks: Vec<(AgentMode, Box<dyn ProfileHook>)> =
        AgentMode::ALL.iter().map(|&m| (m, make_hook(m))).collect();
    let modes: Vec<Mode<'_>> = hooks
        .iter()
        .map(|(m, h)| Mode {
            name: m.name(),
            hook: h.as_ref(),
        })
        .collect();
    let results = Arc::new(Mutex::new(OverheadResults::default()));
    let outcome = runtime.block_on(async {
        tokio::select! {
            r = crate::overhead::run(opts, &modes, pairs, progress, results.clone()) => r.map_err(anyhow::Error::from),
            _ = super::run::stop_signal() => Err(anyhow::anyhow!(profiler::collect::INTERRUPTED)),
        }
    });
    if outcome.is_err() && opts.docker {
        let name = opts.name.clone();
        runtime.block_on(async move {
            if let Ok(d) = crate::docker::connect().await {
                let _ = crate::docker::remove_own_container(&d, &name).await;
            }
        });
    }
    let results = results.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let footprint = AgentMode::ALL
        .iter()
        .map(|m| mode_footprint(&results, m.name(), &opts.out_dir))
        .collect();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let report = OverheadReport {
        results,
        footprint,
        command,
    };
    if !report.results.rows.is_empty() {
        std::fs::create_dir_all(&opts.out_dir)
            .with_context(|| format!("creating {}", opts.out_dir.display()))?;
        let json = serde_json::to_string_pretty(&report).context("serializing overhead.json")?;
        let path = opts.out_dir.join("overhead.json");
        profiler::output::write_bytes_replacing(&path, json + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        let md = crate::render::overhead::markdown(&report);
        let path = opts.out_dir.join("overhead.md");
        profiler::output::write_bytes_replacing(&path, &md).with_context(|| format!("writing {}", path.display()))?;
        print!("{md}");
        eprintln!(
            "bench: wrote {}",
            opts.out_dir.join("overhead.json").display()
        );
    }
    outcome?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_switch_the_tracers() {
        let base = collect::Options::default();
        let s = AgentMode::Sampling.options(base.clone());
        assert!(!s.offcpu && !s.syscalls && !s.wire);
        let o = AgentMode::OffCpu.options(base.clone());
        assert!(o.offcpu && !o.syscalls && !o.wire);
        let y = AgentMode::Syscalls.options(base.clone());
        assert!(y.offcpu && y.syscalls && !y.wire);
        let e = AgentMode::Everything.options(base);
        assert!(e.offcpu && e.syscalls && e.wire);
        assert_eq!(
            AgentMode::ALL.map(AgentMode::name),
            ["sampling", "+offcpu", "+syscalls", "everything"]
        );
    }
}
