//! Renderers: every file `profiler` writes for a [`Profile`], and the text summary.
//!
//! [`write_all`] writes, into one directory:
//! - `profile.json`: the profile itself ([`crate::profile::json`]);
//! - `stacks.folded`, `flamegraph.svg`: on-CPU folded stacks (weights: samples) and their
//!   flamegraph;
//! - `offcpu.folded`, `offcpu.svg`: off-CPU folded stacks (weights: µs switched out) and their
//!   flamegraph;
//! - `profile.pb.gz`, `offcpu.pb.gz`: pprof files of both halves ([`crate::profile::pprof`]);
//! - `syscalls.json`: syscall counts, rates and latencies ([`syscalls`]);
//! - `wire.json` (only when the profile has a wire capture): the decoded
//!   [`crate::wire::WireSummary`] (HTTP requests per endpoint, PostgreSQL round trips, pings,
//!   statement shapes, transactions), its figures per HTTP request, and the kernel side's
//!   counters ([`crate::profile::WireCaptureReport`]).
//!
//! The flamegraphs draw frames with short Rust names and colour them by layer category
//! ([`flamegraph::Options`], both on by default; the folded files keep the full names).
//! The other reports are rendered here too, from the types the analysis returns:
//! `ranking.md` ([`ranking`], from [`crate::attribute::Ranking`]), the text summaries of a
//! run and of a bench ([`summary`]), `diff.md` and the diff page ([`diff_md`], [`diff_html`]).
//! `index.html`, the page that shows all of it, is written by the commands
//! ([`html::attach_page`], [`html::bench_page`]): it needs the ranking, which needs the run's
//! rules and counters.

pub mod diff_html;
pub mod diff_md;
pub mod flamegraph;
pub mod html;
pub mod names;
pub mod ranking;
pub mod summary;
pub mod syscalls;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

pub use summary::summary;

use crate::attribute::RuleSet;
use crate::profile::folded::{self, Weight};
use crate::profile::pprof::{self, Kind};
use crate::profile::{self, Profile};

/// Why rendering failed. Messages name the path; the OS error is the source.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The output directory could not be created.
    #[error("cannot create directory {}", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A file could not be created or written.
    #[error("cannot write {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS or encoder error.
        #[source]
        source: std::io::Error,
    },
    /// `profile.json` could not be written.
    #[error(transparent)]
    Json(#[from] profile::json::JsonError),
}

/// Writes `path` whole through `body` on a buffered writer ([`crate::output::write_replacing`]);
/// errors name `path`.
fn write_file(
    path: PathBuf,
    body: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
) -> Result<PathBuf, RenderError> {
    match crate::output::write_replacing(&path, body) {
        Ok(()) => Ok(path),
        Err(source) => Err(RenderError::Write { path, source }),
    }
}

/// The note under a statements table whose shapes include statements prepared before the
/// attach (no text, one name per connection): how many names ran how often per request, and
/// that `--db-url` names them. `None` when fewer than one such execution per request.
pub(crate) fn unnamed_statements_note(per_request: &crate::wire::PerRequest) -> Option<String> {
    let unnamed: Vec<f64> = per_request
        .statements
        .iter()
        .filter(|s| matches!(s.shape, crate::wire::pg::StatementShape::PreparedBeforeAttach { .. }))
        .map(|s| s.executions)
        .collect();
    let sum: f64 = unnamed.iter().sum();
    (sum >= 1.0).then(|| {
        format!(
            "{} statement names prepared before the attach ran {sum:.2} times per request: their text is unknown, and a driver names a statement per connection in the order it prepared it, so one SQL statement of a loop (an N+1) is spread over the pool's connections under several names and `n-plus-one-queries`, which counts per statement, may not fire. `profiler attach --db-url URL` recovers their texts from pg_stat_activity (or attach before the app opens its connections).",
            unnamed.len()
        )
    })
}

/// The line a ranking without named costs shows in place of its table: "No named cost
/// fired.", followed by [`unnamed_statements_note`] when statements prepared before the
/// attach ran at least once per request (an N+1 the wire could not name may be among them).
pub(crate) fn no_named_cost(r: &crate::attribute::Ranking) -> String {
    no_named_cost_line(r.db_per_request.as_ref().map(|d| &d.per_request))
}

fn no_named_cost_line(per_request: Option<&crate::wire::PerRequest>) -> String {
    match per_request.and_then(unnamed_statements_note) {
        Some(note) => format!("No named cost fired. {note}"),
        None => "No named cost fired.".to_string(),
    }
}

fn seconds(ns: u64) -> String {
    format!("{:.1} s", ns as f64 / 1e9)
}

/// Title of the on-CPU flamegraph: target, duration, rate and sample count.
pub fn on_cpu_title(profile: &Profile) -> String {
    let samples: u64 = profile.on_cpu.iter().map(|c| c.count).sum();
    format!(
        "On-CPU: {}, {}, {} Hz, {} samples",
        profile.meta.target,
        seconds(profile.meta.duration_ns),
        profile.meta.frequency_hz,
        samples
    )
}

/// Title of the off-CPU flamegraph: target, duration, waits and the total in µs.
pub fn off_cpu_title(profile: &Profile) -> String {
    let waits: u64 = profile.off_cpu.iter().map(|c| c.count).sum();
    let ns: u64 = profile.off_cpu.iter().map(|c| c.total_ns).sum();
    format!(
        "Off-CPU time (µs): {}, {}, {} waits, {} µs switched out",
        profile.meta.target,
        seconds(profile.meta.duration_ns),
        waits,
        ns / 1_000
    )
}

fn subtitle(profile: &Profile, off_cpu: bool) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(reason) = &profile.meta.partial {
        parts.push(format!("PARTIAL: {reason}"));
    }
    if off_cpu {
        parts.push(format!(
            "waits shorter than {} µs not recorded",
            profile.meta.offcpu_min_block_ns / 1_000
        ));
    } else {
        let samples: u64 = profile.on_cpu.iter().map(|c| c.count).sum();
        if profile.lost.truncated_stacks > 0 && samples > 0 {
            parts.push(format!(
                "{:.1}% of stacks truncated ([truncated])",
                profile.lost.truncated_stacks as f64 * 100.0 / samples as f64
            ));
        }
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// How [`write_all_with`] renders.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options<'a> {
    /// The rules whose layers colour the flamegraphs' frames. Default is `None`: the built-in
    /// catalog.
    pub rules: Option<&'a RuleSet>,
    /// Frame names and colours of the flamegraphs. Default is [`flamegraph::Options::default`]
    /// (short names, layer colours).
    pub flamegraph: flamegraph::Options,
}

/// Writes every rendered file (see the module docs) into `out`, creating it when missing,
/// and returns the paths written, in the order above. Flamegraphs as [`Options::default`].
///
/// # Errors
/// [`RenderError::CreateDir`] when `out` cannot be created, [`RenderError::Write`] or
/// [`RenderError::Json`] when a file cannot be written.
pub fn write_all(profile: &Profile, out: &Path) -> Result<Vec<PathBuf>, RenderError> {
    write_all_with(profile, out, &Options::default())
}

/// [`write_all`] with `options`.
///
/// # Errors
/// As [`write_all`].
pub fn write_all_with(profile: &Profile, out: &Path, options: &Options<'_>) -> Result<Vec<PathBuf>, RenderError> {
    std::fs::create_dir_all(out).map_err(|source| RenderError::CreateDir {
        path: out.to_path_buf(),
        source,
    })?;
    // profile.json and the two pprof files on a second thread, beside the folded stacks and
    // flamegraphs (inferno): the two halves take about the same time, and reports are
    // written after the collection, when the CPUs are the agent's (PERFORMANCE.md).
    std::thread::scope(|scope| {
        let side = scope.spawn(|| write_json_and_pprof(profile, out));
        let flamegraphs = write_folded_and_flamegraphs(profile, out, options);
        let side = side.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        let (mut written, pprofs) = side?;
        let (folded_and_svgs, rest) = (flamegraphs?, write_syscalls_and_wire(profile, out)?);
        written.extend(folded_and_svgs);
        written.extend(pprofs);
        written.extend(rest);
        Ok(written)
    })
}

/// `profile.json`, then the two pprof files: (`[profile.json]`, `[profile.pb.gz, offcpu.pb.gz]`).
fn write_json_and_pprof(profile: &Profile, out: &Path) -> Result<(Vec<PathBuf>, Vec<PathBuf>), RenderError> {
    let json = out.join("profile.json");
    profile::json::write(profile, &json)?;
    let mut pprofs = Vec::new();
    pprofs.push(write_file(out.join("profile.pb.gz"), |w| {
        pprof::write(profile, Kind::OnCpu, w)
    })?);
    pprofs.push(write_file(out.join("offcpu.pb.gz"), |w| {
        pprof::write(profile, Kind::OffCpu, w)
    })?);
    Ok((vec![json], pprofs))
}

/// The folded stacks and flamegraph of on-CPU samples, then of off-CPU time.
fn write_folded_and_flamegraphs(profile: &Profile, out: &Path, options: &Options<'_>) -> Result<Vec<PathBuf>, RenderError> {
    let mut written = Vec::new();
    let fg = options.flamegraph;
    let styles = (fg.short_names || fg.layer_colours).then(|| match options.rules {
        Some(rules) => flamegraph::FrameStyles::of(profile, rules),
        None => flamegraph::FrameStyles::of(profile, &RuleSet::builtin()),
    });
    for off_cpu in [false, true] {
        let (counts, options, folded_name, svg_name, style, title) = if off_cpu {
            (
                &profile.off_cpu,
                folded::Options {
                    weight: Weight::Micros,
                    ..Default::default()
                },
                "offcpu.folded",
                "offcpu.svg",
                flamegraph::Style::OffCpu,
                off_cpu_title(profile),
            )
        } else {
            (
                &profile.on_cpu,
                folded::Options::default(),
                "stacks.folded",
                "flamegraph.svg",
                flamegraph::Style::OnCpu,
                on_cpu_title(profile),
            )
        };
        // Each line is its folded key with the weight appended in place: the keys are the
        // bulk of the memory (hundreds of MB for 100,000 deep stacks), so they are not copied.
        let lines: Vec<String> = folded::fold(profile, counts, &options)
            .into_iter()
            .map(|(mut stack, weight)| {
                // Writing into a String cannot fail.
                let _ = std::fmt::Write::write_fmt(&mut stack, format_args!(" {weight}"));
                stack
            })
            .collect();
        written.push(write_file(out.join(folded_name), |w| {
            for line in &lines {
                w.write_all(line.as_bytes())?;
                w.write_all(b"\n")?;
            }
            Ok(())
        })?);
        let mut sub = subtitle(profile, off_cpu);
        if fg.layer_colours {
            let note = "colour: layer category (legend in index.html)";
            sub = Some(sub.map_or(note.to_string(), |s| format!("{s}; {note}")));
        }
        written.push(write_file(out.join(svg_name), |w| {
            flamegraph::write_svg_styled(&lines, style, &title, sub.as_deref(), styles.as_ref(), fg, w)
        })?);
    }

    Ok(written)
}

/// `syscalls.json`, and `wire.json` when the profile has a wire capture.
fn write_syscalls_and_wire(profile: &Profile, out: &Path) -> Result<Vec<PathBuf>, RenderError> {
    let mut written = Vec::new();
    written.push(write_file(out.join("syscalls.json"), |w| {
        serde_json::to_writer_pretty(&mut *w, &syscalls::report(profile))?;
        writeln!(w)
    })?);
    if let Some(wire) = &profile.wire {
        let doc = serde_json::json!({
            "summary": wire,
            "per_request": wire.per_request(wire.http.requests),
            "capture": profile.meta.wire,
        });
        written.push(write_file(out.join("wire.json"), |w| {
            serde_json::to_writer_pretty(&mut *w, &doc)?;
            writeln!(w)
        })?);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use crate::wire::pg::StatementShape;
    use crate::wire::summary::{PerRequest, StatementPerRequest};

    /// A fresh user's N+1 route without `--db-url`: the loop's one SELECT ran as 16 names, one
    /// per pooled connection, each below the finding's 5 per request (two of them here), beside
    /// a statement with its text. The note counts the names and their executions; none under
    /// one execution per request. A ranking without named costs says it where its table
    /// would be.
    #[test]
    fn statements_prepared_before_the_attach_point_to_db_url() {
        let before = |name: &str, executions: f64| StatementPerRequest { shape: StatementShape::PreparedBeforeAttach { name: name.into(), connection: 0 }, executions, round_trips: executions };
        let sql = StatementPerRequest { shape: StatementShape::Sql { text: "SELECT ?".into(), truncated: false }, executions: 1.0, round_trips: 1.0 };
        let mut p = PerRequest { requests: 100, round_trips: 6.31, pings: 0.0, transactions: 0.0, statement_executions: 6.31, db_latency_ns: 0.0, statements: vec![before("s2", 2.72), before("s16", 2.59), sql] };
        let note = super::unnamed_statements_note(&p).expect("a note");
        assert!(note.starts_with("2 statement names prepared before the attach ran 5.31 times per request"), "{note}");
        assert!(note.contains("`profiler attach --db-url URL`"), "{note}");
        assert_eq!(super::no_named_cost_line(Some(&p)), format!("No named cost fired. {note}"));
        p.statements = vec![before("s2", 0.5), before("s3", 0.4)];
        assert!(super::unnamed_statements_note(&p).is_none());
        assert_eq!(super::no_named_cost_line(Some(&p)), "No named cost fired.");
        assert_eq!(super::no_named_cost_line(None), "No named cost fired.");
    }
}
