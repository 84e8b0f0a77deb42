//! `profiler attach --pid PID | --cgroup PATH | --container NAME`: profile one running target.
//!
//! Loads the BPF programs ([`crate::collect`]), samples on-CPU stacks at `--frequency`,
//! records off-CPU waits and syscall statistics for `--duration` seconds or until Ctrl-C or
//! the target exits, then symbolizes ([`crate::symbolize`]), writes every rendered file
//! ([`crate::render::write_all_with`]), the ranking and the report page `index.html`
//! ([`crate::render::html::attach_page`]) into `--out` and prints the summary on stdout.
//!
//! Ctrl-C (SIGINT) or SIGTERM (`kill`, a container runtime stopping the agent) ends the
//! collection early: what was collected is drained and written, and the profile says why it
//! is partial. Further signals while the files are written are ignored (with a message), so
//! an impatient second press never loses the run. `--out` is checked (created, written to)
//! before anything is loaded, so that a run is not collected for a folder it cannot write.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::collect::{self, StopReason};
use crate::target::Target;
use crate::{render, symbolize};

/// What `profiler attach` collects, from what, and where it writes (the command line's
/// arguments, parsed; the binary gives the defaults).
#[derive(Debug, Clone)]
pub struct Options {
    /// The process, cgroup or container profiled.
    pub target: Target,
    /// Seconds of collection; 0: until Ctrl-C or the target's exit.
    pub duration: u64,
    /// On-CPU sampling frequency per CPU, Hz (1..=10000).
    pub frequency: u64,
    /// Shortest off-CPU wait recorded, µs.
    pub offcpu_min_block_us: u64,
    /// No off-CPU recording.
    pub no_offcpu: bool,
    /// No syscall counting.
    pub no_syscalls: bool,
    /// Percent of each second the syscall counters are attached (1..=100).
    pub syscalls_duty: u32,
    /// The user-stack unwinder.
    pub unwind: collect::Unwind,
    /// No capture of PostgreSQL and HTTP/1 traffic heads.
    pub no_wire: bool,
    /// Peer port decoded as PostgreSQL.
    pub db_port: u16,
    /// Connection string whose `pg_stat_activity` is polled for statement texts.
    pub db_url: Option<String>,
    /// Turn on the kernel's BPF run statistics for the run ([`collect::Options::bpf_run_stats`]).
    pub bpf_stats: bool,
    /// Rule files added to the built-in catalog.
    pub rules: Vec<PathBuf>,
    /// Full demangled names in flamegraph frames instead of short ones.
    pub full_frame_names: bool,
    /// Output directory; `None`: `reports/<UTC timestamp>-<target>/`.
    pub out: Option<PathBuf>,
}

/// A file-name-safe slug of the target: `pid-1234`, `container-navree`, `cgroup-x.service`.
fn slug(target: &Target) -> String {
    let raw = match target {
        Target::Pid(pid) => format!("pid-{pid}"),
        Target::Container(name) => format!("container-{name}"),
        Target::Cgroup(path) => format!(
            "cgroup-{}",
            path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "root".into())
        ),
    };
    raw.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' }).collect()
}

/// Runs `profiler attach`.
///
/// # Errors
/// When the target cannot be resolved (unknown pid, cgroup or container: the error lists
/// the running containers), the programs cannot be loaded (not root, no BTF, verifier), or
/// the output cannot be written.
pub fn run(opts: &Options) -> anyhow::Result<()> {
    let command_started = Instant::now();
    if opts.frequency == 0 || opts.frequency > 10_000 {
        bail!("--frequency must be between 1 and 10000 Hz, got {}", opts.frequency);
    }
    let target = opts.target.clone();
    // Read the rules before attaching: a bad rules file is reported before anything runs.
    let rules = crate::attribute::RuleSet::builtin_with_files(&opts.rules).map_err(|e| anyhow::anyhow!("{e}"))?;
    let out = opts.out.clone().unwrap_or_else(|| {
        PathBuf::from("reports").join(format!("{}-{}", chrono::Utc::now().format("%Y%m%dT%H%M%SZ"), slug(&target)))
    });
    let mut resolved = target.resolve().with_context(|| format!("cannot resolve {target}"))?;
    tracing::info!(target = %resolved.description, filter = ?resolved.filter, "resolved");
    // The output folder is checked before anything is collected: a run is not thrown away
    // at the end for a folder that cannot be written.
    let created = crate::output::prepare_dir(&out).with_context(|| format!("cannot write into {}", out.display()))?;

    let stop = Arc::new(AtomicBool::new(false));
    let presses = Arc::new(AtomicUsize::new(0));
    {
        let (stop, presses) = (stop.clone(), presses.clone());
        ctrlc::set_handler(move || {
            if presses.fetch_add(1, Ordering::SeqCst) == 0 {
                stop.store(true, Ordering::SeqCst);
                eprintln!("\nprofiler: stopping; draining and writing what was collected");
            } else {
                eprintln!("profiler: still writing the profile, please wait");
            }
        })
        .context("cannot install the Ctrl-C handler")?;
    }

    let options = collect::Options {
        frequency_hz: opts.frequency,
        offcpu: !opts.no_offcpu,
        offcpu_min_block_ns: opts.offcpu_min_block_us.saturating_mul(1_000),
        syscalls: !opts.no_syscalls,
        syscalls_duty_pct: opts.syscalls_duty,
        unwind: opts.unwind,
        wire: !opts.no_wire,
        db_port: opts.db_port,
        db_url: opts.db_url.clone(),
        bpf_run_stats: opts.bpf_stats,
        ..Default::default()
    };
    let unbounded = opts.duration == 0;
    let duration = if unbounded { Duration::from_secs(u64::MAX / 4) } else { Duration::from_secs(opts.duration) };
    let progress = if unbounded {
        indicatif::ProgressBar::new_spinner()
    } else {
        indicatif::ProgressBar::new(opts.duration)
    };
    progress.set_style(
        indicatif::ProgressStyle::with_template(if unbounded {
            "{spinner} {msg} {elapsed} (Ctrl-C to stop)"
        } else {
            "{msg} [{bar:30}] {pos}/{len} s (Ctrl-C to stop early)"
        })
        .expect("static template")
        .progress_chars("=> "),
    );
    progress.set_message(format!("profiling {}", resolved.description));
    let mut attached_after = None;
    let (mut raw, reason) = collect::run(&mut resolved, &options, duration, &stop, |elapsed| {
        // The first tick comes right after every program was attached.
        attached_after.get_or_insert_with(|| command_started.elapsed());
        progress.set_position(elapsed.as_secs());
        progress.tick();
    })
    .inspect_err(|_| created.remove_if_empty())
    .with_context(|| format!("cannot collect from {}", target))?;
    progress.finish_and_clear();
    match reason {
        StopReason::Deadline => {}
        // `--duration 0` runs until Ctrl-C: that is its planned end, not a partial profile.
        StopReason::Interrupted if unbounded && raw.meta.partial.as_deref() == Some(collect::INTERRUPTED) => raw.meta.partial = None,
        StopReason::Interrupted => tracing::warn!("interrupted: the profile is partial"),
        StopReason::TargetGone => tracing::warn!("the target exited: the profile is partial"),
    }

    let reports_started = Instant::now();
    let profile = symbolize::symbolize(raw);
    // The symbolizer's caches were dropped with it: give their heap back (crate::memory).
    crate::memory::release_free();
    let render_opts = render::Options {
        rules: Some(&rules),
        flamegraph: render::flamegraph::Options { short_names: !opts.full_frame_names, ..Default::default() },
    };
    let written = render::write_all_with(&profile, &out, &render_opts).with_context(|| format!("cannot write into {}", out.display()))?;
    for path in &written {
        tracing::info!(path = %path.display(), "wrote");
    }
    // The ranking: layers and named costs per request (requests from the wire capture, when it
    // saw HTTP traffic); the bound from the target's CPU use against its CPU set and the
    // wire's request latency (Bound::of_profile).
    let ranking_opts = crate::attribute::RankingOptions { rules: &rules, wire: None, base_req_per_s: None, label: "", closed_loop: None };
    let ranking = crate::render::ranking::write_ranking(&profile, None, crate::attribute::Bound::of_profile(&profile), &ranking_opts, &out)
        .with_context(|| format!("cannot write ranking.md into {}", out.display()))?;
    let page = out.join("index.html");
    crate::output::write_bytes_replacing(&page, render::html::attach_page(&profile, &ranking, &out))
        .with_context(|| format!("cannot write {}", page.display()))?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(render::summary(&profile).as_bytes())?;
    // The rest of the footprint: what symbolizing and writing the reports cost.
    writeln!(
        stdout,
        "agent after the run: {:.0} ms from the command's start to attached (resolving the target and reading the rules included; 'attached in' above counts from loading the BPF objects), reports written in {:.0} ms, peak RSS {:.1} MB through symbolization and reports",
        attached_after.unwrap_or_default().as_secs_f64() * 1e3,
        reports_started.elapsed().as_secs_f64() * 1e3,
        collect::self_peak_rss_bytes() as f64 / 1e6
    )?;
    writeln!(stdout, "files: {}", out.display())?;
    stdout.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_file_name_safe() {
        assert_eq!(slug(&Target::Pid(42)), "pid-42");
        assert_eq!(slug(&Target::Container("my app/x".into())), "container-my_app_x");
        assert_eq!(slug(&Target::Cgroup("/sys/fs/cgroup/unified/system.slice/x.service".into())), "cgroup-x.service");
    }
}
