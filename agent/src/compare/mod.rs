//! What changed between two runs, per request, with noise: the analysis behind `profiler diff`
//! ([`crate::diff`]).
//!
//! - [`import`] reads each side: a bench output folder, an attach output folder, a
//!   `profile.json`, a pprof file, `perf script` text or folded stacks, into [`import::Side`]
//!   (every input becomes a [`Profile`]).
//! - [`compare()`] ranks both profiles with the same rules ([`crate::attribute::rank`]) and
//!   compares them test by test: req/s, latency and CPU per request of the measured runs (or,
//!   without them, the wire captures' throughput and mean latency, [`ROW_REQ_PER_S_WIRE`], [`ROW_LATENCY_WIRE`]), then
//!   the named costs, round trips by statement, syscalls, spawns, lock waits, layers and frames,
//!   each with its change and whether it is beyond noise (the model is below).
//! - [`crate::render::diff_md`] writes `diff.md`. The differential flamegraphs (`diff.svg`, `diff-base.svg`)
//!   and the page (`index.html`) are drawn in [`crate::render`] from [`folded_lines`] and
//!   [`Diff`].
//!
//! `diff.json` is [`Diff`] serialized with serde_json.
//!
//! The comparison: per test, rows of figures on both sides, each with its change and whether
//! that change is beyond noise.
//!
//! # Units
//! Per request when both sides know their request count and sampling frequency
//! ([`Normalization::PerRequest`]): sampled CPU in µs per request (`samples × 1e6 / Hz /
//! requests`), syscalls, round trips and waits per request. Otherwise per sample
//! ([`Normalization::PerSample`]): CPU figures as % of on-CPU samples, and no count rows.
//!
//! # Noise
//! - **Run figures** (bench: req/s, latency p50/p99, the app's and the database's CPU per
//!   request from `/proc`; see [`machine_drift`] for what the two together tell):
//!   each side has several measured runs; a change of the medians is called only when it is
//!   larger than the two sides' spreads (max - min) added together. With fewer than 2 runs on a
//!   side, significance is unknown.
//! - **Profile figures** (one profiled run per side): a count `n` scaled by `k` has the Poisson
//!   standard error `sqrt(n) k`; a change is called only beyond [`NOISE_Z`] standard errors of
//!   the difference ([`NOISE_Z_FRAMES`] for frames) plus a relative floor: the larger of
//!   [`NOISE_FLOOR`] (sampled figures; [`COUNT_NOISE_FLOOR`] for counts) and the relative
//!   spread of the measured runs' CPU per request, times the larger value. The floor stands
//!   for what one run cannot show (load and scheduling shift the mix between two profiled runs
//!   of the same code; see [`NOISE_FLOOR`]). Profile figures are called only when both sides
//!   come from a bench with measured runs; otherwise their significance is unknown. Counts per
//!   request must also change by [`COUNT_FLOOR_PER_REQUEST`], and syscalls that wait for work
//!   ([`IDLE_SYSCALLS`]) by [`IDLE_SYSCALL_FLOOR`] of their value. Syscalls counted in
//!   windows take their measured over-dispersion: the variance of a count is its
//!   [`crate::profile::SyscallWindows::dispersion`] over the windows times the count, so calls
//!   that come in one burst (a connection's `accept4`, `epoll_ctl` and `close` at a run's
//!   edges, inside one window or none) need a change larger than the burst. The samples on a bursty
//!   path (stacks with a frame of one of the catalog's [`crate::attribute::catalog::BURSTY`]
//!   sets: the heap's growth, mimalloc extending a fresh page and the kernel faulting in and
//!   zeroing pages; a database client opening a connection) take [`BURSTY_FRAME_FLOOR`]
//!   instead, in every row they count to: the frames themselves, their callers' totals
//!   (`RawVec::finish_grow`, the driver's futures), the layers (`kernel mm`) and the sampled
//!   CPU per request.
//! - `--noise-floor PCT` ([`Options::noise_floor_pct`]) adds drift between the two sides that
//!   neither side's runs can show (the machine got busier between BASE and HEAD): PCT% of the
//!   larger value is added to every noise threshold.
//! - Equal values on both sides are "no change", whatever the noise.
//! - On-CPU samples of parked runtime workers (the `runtime-park` frame set) are left out of every profile
//!   figure (a note gives their counts): how often workers run out of work follows the load.

pub mod import;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use import::{RunFigures, Side, TestSide};
use crate::attribute::{self, Bound, RankingOptions, RuleSet};
use crate::profile::folded::Weight;
use crate::profile::{folded, FrameKind, Profile};

/// Standard errors of a difference below which a profile figure's change is noise.
pub const NOISE_Z: f64 = 3.0;

/// [`NOISE_Z`] for frame rows: 4.5. A profile has hundreds of functions, so the threshold is
/// raised as for about 1,000 comparisons at 1% (Bonferroni: the two-sided normal tail beyond
/// 4.42 is 1e-5). Samples of one long event at a high frequency also come in runs, which makes
/// frame counts noisier than Poisson (mimalloc's fresh-page path went from 6 to 37 samples
/// between two runs of the same code at 4,999 Hz).
pub const NOISE_Z_FRAMES: f64 = 4.5;

/// The relative floor for syscalls whose count per request follows how often threads went
/// idle rather than the code ([`IDLE_SYSCALLS`]): 0.75, so a change must be about 4x.
/// Measured: `epoll_wait` 2.68 vs 0.81 per request in two runs of the same code.
pub const IDLE_SYSCALL_FLOOR: f64 = 0.75;

/// The relative floor of the samples on a bursty path (stacks with a frame of one of the
/// catalog's [`crate::attribute::catalog::BURSTY`] sets): 0.75 of the larger value, as for
/// idle syscalls, so that such a part must change more than about 4x (plus the Poisson part).
/// - The heap's growth (`heap-growth`) follows the heap's state (what the allocator kept after
///   the app's restart and warm-up, what it gave back with `madvise`), not the code, and its
///   samples come in runs, far noisier than Poisson: between two benches of the same code,
///   `mi_page_free_list_extend` went 1.470 -> 0.144 µs per request, 6 -> 37 samples at 4,999 Hz
///   in another pair, and in a third `RawVecInner::finish_grow` (total) 0.80 -> 3.25 µs and
///   the page zeroing below it (`folio_zero_user`) 0.71 -> 3.08 µs per request, nearly all of
///   it on that path. A real change in allocation shows in the `alloc` layer's self time, which
///   is off that path.
/// - A pool's connections (`connection-setup`) are opened at a run's edges, the same number in
///   runs of the same code, but their CPU does not repeat: the 65 connections of a
///   `deals-create` bench took 53 and 164 samples at 4,999 Hz in two benches of the same code,
///   and 27 and 172 (0.075 -> 0.589 µs per request) in two that differed only in a JSON parse.
///   A pool that reconnects on every request changes it a hundredfold, and is still called.
pub const BURSTY_FRAME_FLOOR: f64 = 0.75;

/// Syscalls that wait for work, or wake a thread that waits: their count per request depends
/// on load, not on the request path. `write` is here for the wake-ups of tokio's I/O driver
/// (mio's `Waker::wake` writes an eventfd; on-CPU stacks `IoHandle::unpark` -> `File::write`):
/// 0.079, 0.349, 0.264 and 0.082 per request in four `deals-create` benches of the same code,
/// the only row besides the double parse that `diff_bench` called without this list.
pub const IDLE_SYSCALLS: &[&str] =
    &["epoll_wait", "epoll_pwait", "epoll_pwait2", "poll", "ppoll", "select", "pselect6", "futex", "sched_yield", "nanosleep", "clock_nanosleep", "write"];

/// Relative change (0..1, of the larger value) of a profile figure that one profiled run per
/// side cannot tell from noise: 0.5, so a figure must about double or halve. Measured on a
/// 2-CPU machine shared with other work, between `profiler bench --only
/// deals-create` runs of the same code, or whose only difference was the removed double parse:
/// layers with 40 or more samples moved by 30-70% per request (hyper 46 -> 70 samples, kernel
/// sched 73 -> 126, the unattributed stacks 102 -> 173 at 4,999 Hz), and mimalloc's fresh-page
/// path (`_mi_page_malloc_zero`, which follows the heap's state after the app's restart) went
/// 346 -> 677 self samples, and 6 -> 37 in another pair. With 0.25, three of five CI-like runs
/// of `diff_bench` called one such figure; a removed cost (-100%) stays well beyond it.
pub const NOISE_FLOOR: f64 = 0.5;

/// [`NOISE_FLOOR`] for counted figures (round trips and pings from the wire, syscalls, spawn
/// calls and lock waits per request): 0.25. Counts do not scatter like samples (round trips
/// per request were 7.008 and 7.007 in two benches of the same code), so a change of a quarter
/// (7 -> 9 round trips per request) is called.
pub const COUNT_NOISE_FLOOR: f64 = 0.25;

/// Per-request counts (syscalls, round trips, waits) that change by less than this are not
/// called: 0.02 per request. Events rarer than one in 50 requests come mostly from a run's
/// edges (wrk opening and closing its 64 connections over a few thousand requests: on this
/// machine `shutdown` went from 1 to 27 calls between two runs of the same code), not from the
/// request path.
pub const COUNT_FLOOR_PER_REQUEST: f64 = 0.02;

/// Fewest samples (on the larger side) for a frame to get a row of its own.
pub const MIN_FRAME_SAMPLES: u64 = 5;

/// Version of the `diff.json` schema.
pub const DIFF_SCHEMA_VERSION: u32 = 1;

/// How profile figures are scaled so that the two sides compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Normalization {
    /// Per HTTP request (both sides know their requests and sampling frequency).
    PerRequest,
    /// Per on-CPU sample (shares of all samples).
    PerSample,
}

/// What a row measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Section {
    /// Throughput and latency of the measured runs.
    Load,
    /// CPU per request (accounted from `/proc` in the measured runs, or sampled).
    Cpu,
    /// Named costs of the ranking (sampled CPU).
    Cost,
    /// Database round trips per request by statement shape (wire capture).
    RoundTrips,
    /// Syscalls per request.
    Syscalls,
    /// Task and thread spawns.
    Spawns,
    /// Off-CPU waits in locks.
    LockWaits,
    /// Pipeline layers (self sampled CPU).
    Layers,
    /// User-space functions, total: sampled CPU with the function anywhere on the stack.
    /// Kernel frames are left out: interrupt and scheduler entry frames move with the machine,
    /// not the code (kernel time is in the layers and syscalls).
    Frames,
    /// User-space functions, self: sampled CPU whose innermost user frame is the function (the
    /// kernel work it called included).
    SelfFrames,
}

/// Whether a row's change is beyond noise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Significance {
    /// The change is larger than the noise.
    Beyond,
    /// The change is within the noise.
    WithinNoise,
    /// No noise estimate (single profiles, or a side with one run).
    Unknown,
    /// Both sides are equal.
    NoChange,
}

/// One compared figure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// What it measures.
    pub section: Section,
    /// Name (`req/s`, a layer, a cost id, a syscall, a function, a statement).
    pub name: String,
    /// Unit of `base`, `head`, `delta` and `noise` (`req/s`, `ms`, `µs/req`, `% of samples`,
    /// `calls/req`, `round trips/req`, `waits/req`).
    pub unit: String,
    /// BASE's value (median of runs for run figures); 0 when absent on that side.
    pub base: f64,
    /// HEAD's value.
    pub head: f64,
    /// `head - base`.
    pub delta: f64,
    /// `delta / base`, percent; `None` when base is 0.
    pub delta_pct: Option<f64>,
    /// The change a row must exceed to be called, in `unit`; `None` when unknown.
    pub noise: Option<f64>,
    /// Whether the change is beyond it.
    pub significance: Significance,
    /// True when a higher value is better (req/s); false for costs and latency.
    pub higher_is_better: bool,
    /// Samples (or calls, waits) behind `base` and `head`, for profile figures.
    pub counts: Option<(u64, u64)>,
}

impl Row {
    /// True when the change is beyond noise and for the worse.
    pub fn is_worse(&self) -> bool {
        self.significance == Significance::Beyond && ((self.delta < 0.0) == self.higher_is_better)
    }
}

/// One test compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TestDiff {
    /// Test name (`deals-create`), or `""` for a single profile.
    pub name: String,
    /// How profile figures are scaled.
    pub normalization: Normalization,
    /// Requests behind BASE's and HEAD's profile, when known.
    pub requests: (Option<u64>, Option<u64>),
    /// On-CPU samples of BASE's and HEAD's profile, all of them (the profile figures leave out
    /// those of parked runtime workers, the `runtime-park` frame set; a note counts them).
    pub samples: (u64, u64),
    /// Measured runs of BASE and HEAD.
    pub runs: (usize, usize),
    /// Every row, by section, biggest change first within a section.
    pub rows: Vec<Row>,
    /// Profile rows beyond noise, biggest change first (in their unit; CPU rows first).
    pub top: Vec<Row>,
    /// The gate's findings: regressions beyond `--fail-on-regression` (text).
    pub regressions: Vec<String>,
    /// Notes a reader needs (missing profiles, per-sample scaling, ...).
    pub notes: Vec<String>,
}

/// The overall answer, printed first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Throughput or CPU per request (or latency) got worse beyond noise on some test.
    Regression,
    /// Some got better beyond noise and none worse.
    Improvement,
    /// Throughput, latency and CPU per request within noise, but profile figures changed
    /// beyond noise.
    ProfileChanged,
    /// Nothing changed beyond noise.
    NoChange,
    /// Both sides are identical.
    Identical,
    /// Things changed but there is no noise estimate (single profiles).
    SignificanceUnknown,
}

impl Verdict {
    /// The sentence `diff.md` starts with.
    pub fn headline(self) -> &'static str {
        match self {
            Verdict::Regression => "regression",
            Verdict::Improvement => "improvement",
            Verdict::ProfileChanged => "no change in throughput or CPU per request beyond noise; the profile changed beyond noise",
            Verdict::NoChange => "no change beyond noise",
            Verdict::Identical => "no change (identical)",
            Verdict::SignificanceUnknown => "changed; significance unknown (a side has a single run: no noise estimate)",
        }
    }
}

/// Description of one side in `diff.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SideInfo {
    /// The path given.
    pub path: String,
    /// Input kind (`bench`, `attach`, `profile_json`, `pprof`, `perf_script`, `folded`).
    pub kind: import::InputKind,
    /// Target as recorded.
    pub target: String,
    /// `CRM_COSTS` of a bench run.
    pub costs: Option<String>,
}

/// The whole diff (`diff.json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diff {
    /// [`DIFF_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// BASE.
    pub base: SideInfo,
    /// HEAD.
    pub head: SideInfo,
    /// The verdict.
    pub verdict: Verdict,
    /// Regression threshold, percent of req/s or of CPU per request.
    pub fail_on_regression_pct: f64,
    /// Drift added to every noise threshold, percent (`--noise-floor`).
    pub noise_floor_pct: f64,
    /// True when some test regressed beyond the threshold (exit status 1).
    pub failed: bool,
    /// Per test, in BASE's order.
    pub tests: Vec<TestDiff>,
}

/// Options of [`compare`].
#[derive(Debug, Clone, Copy)]
pub struct Options<'a> {
    /// Rules for layers and costs, the same on both sides.
    pub rules: &'a RuleSet,
    /// Regression threshold, percent (5 = 5% fewer req/s or 5% more CPU per request).
    pub fail_on_regression_pct: f64,
    /// Drift between the two sides' runs that their own spreads cannot show, percent of the
    /// larger value: added to the noise of every figure (0 = the spreads alone).
    pub noise_floor_pct: f64,
}

/// Why two sides cannot be compared.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CompareError {
    /// One side is a bench output with named tests, the other a single profile.
    #[error("BASE is {base} and HEAD is {head}: compare a bench output with a bench output, or a profile with a profile (a bench test's folder is a profile)")]
    DifferentShapes {
        /// BASE's kind.
        base: String,
        /// HEAD's kind.
        head: String,
    },
    /// The bench outputs ran different tests.
    #[error("BASE and HEAD ran different tests (BASE: {base}; HEAD: {head})")]
    DifferentTests {
        /// BASE's tests.
        base: String,
        /// HEAD's tests.
        head: String,
    },
    /// The profiles are of different programs.
    #[error("BASE and HEAD profile different targets (BASE: {base}; HEAD: {head})")]
    DifferentTargets {
        /// BASE's executables.
        base: String,
        /// HEAD's executables.
        head: String,
    },
    /// A profile's counts overflow or are implausible ([`import::check_counts`]); only
    /// a [`Side`] built by hand gets here, [`import::load`] refuses such a file.
    #[error("{side} {path}: {detail}")]
    Implausible {
        /// `BASE` or `HEAD`.
        side: &'static str,
        /// The side's path.
        path: String,
        /// What is wrong, naming the field.
        detail: String,
    },
}

fn side_info(s: &Side) -> SideInfo {
    SideInfo { path: s.path.display().to_string(), kind: s.kind, target: s.target.clone(), costs: s.costs.clone() }
}

/// Compares BASE with HEAD, test by test.
///
/// # Errors
/// [`CompareError`] when the sides are of different shapes (bench vs single profile), ran
/// different tests, or profile different executables, or when a profile's counts would
/// overflow the sums made here ([`CompareError::Implausible`]: every sum below is over a part
/// of a total [`import::check_counts`] has checked).
pub fn compare(base: &Side, head: &Side, opts: &Options<'_>) -> Result<Diff, CompareError> {
    for (name, side) in [("BASE", base), ("HEAD", head)] {
        for profile in side.tests.iter().filter_map(|t| t.profile.as_ref()) {
            import::check_counts(profile, side.kind).map_err(|detail| CompareError::Implausible {
                side: name,
                path: side.path.display().to_string(),
                detail,
            })?;
        }
    }
    let bench = |s: &Side| s.kind == import::InputKind::Bench;
    if bench(base) != bench(head) {
        return Err(CompareError::DifferentShapes { base: base.kind.describe().into(), head: head.kind.describe().into() });
    }
    let names = |s: &Side| s.tests.iter().map(|t| t.name.clone()).collect::<BTreeSet<_>>();
    if names(base) != names(head) {
        let list = |s: &Side| s.tests.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ");
        return Err(CompareError::DifferentTests { base: list(base), head: list(head) });
    }
    if !base.executables.is_empty() && !head.executables.is_empty() && !base.executables.iter().any(|e| head.executables.contains(e)) {
        return Err(CompareError::DifferentTargets { base: base.executables.join(", "), head: head.executables.join(", ") });
    }
    let mut tests = Vec::new();
    for b in &base.tests {
        let Some(h) = head.tests.iter().find(|t| t.name == b.name) else { continue };
        tests.push(compare_test(b, h, opts));
    }
    let rows = || tests.iter().flat_map(|t| t.rows.iter());
    let headline = |r: &&Row| matches!(r.section, Section::Load | Section::Cpu);
    let verdict = if rows().all(|r| r.significance == Significance::NoChange) {
        Verdict::Identical
    } else if rows().filter(headline).any(Row::is_worse) {
        Verdict::Regression
    } else if rows().filter(headline).any(|r| r.significance == Significance::Beyond) {
        Verdict::Improvement
    } else if rows().any(|r| r.significance == Significance::Beyond) {
        Verdict::ProfileChanged
    } else if rows().any(|r| r.significance == Significance::Unknown) {
        Verdict::SignificanceUnknown
    } else {
        Verdict::NoChange
    };
    let failed = tests.iter().any(|t| !t.regressions.is_empty());
    Ok(Diff {
        schema_version: DIFF_SCHEMA_VERSION,
        base: side_info(base),
        head: side_info(head),
        verdict,
        fail_on_regression_pct: opts.fail_on_regression_pct,
        noise_floor_pct: opts.noise_floor_pct,
        failed,
        tests,
    })
}

/// The figures of one side's profile that rows are made of.
#[derive(Default)]
struct Figures {
    samples: u64,
    /// Scale of one sample in the row unit (µs/req or % of samples).
    k: f64,
    /// 1 / requests, when per request.
    per_req: Option<f64>,
    costs: BTreeMap<String, u64>,
    /// Every named cost of the ranking with its title, on-CPU or not (a blocking call or an
    /// N+1 found off-CPU or on the wire has no samples of its own).
    named: BTreeMap<String, String>,
    layers: BTreeMap<String, u64>,
    /// Syscall counts as counted, and the factor to the whole run's (`Meta::syscall_scale`).
    syscalls: BTreeMap<String, u64>,
    syscall_scale: f64,
    /// Each syscall's calls per window (`SyscallStat::window_counts`), and the windows (whose
    /// [`crate::profile::SyscallWindows::dispersion`] a row's noise takes).
    syscall_windows: BTreeMap<String, Vec<u64>>,
    windows: Option<crate::profile::SyscallWindows>,
    round_trips: BTreeMap<String, u64>,
    spawn_samples: u64,
    lock_waits: (u64, u64),
    frames: BTreeMap<String, u64>,
    self_frames: BTreeMap<String, u64>,
}

/// Frames of a runtime worker that has no work and parks itself: the catalog's `runtime-park`
/// frame set ([`crate::attribute::catalog::RUNTIME_PARK`]: tokio's worker and current-thread
/// park, its I/O and time drivers' turn, `std::thread::park`). The on-CPU samples below them
/// are the scheduler and `epoll_wait` on the way to sleep: they follow how often the workers
/// run out of work (load), not the request path. Measured on a quiet machine: two `profiler bench --only deals-create` runs with the same app had 15.9 and 34.7 µs/req
/// under `park`, while the costs differed by 1.3 µs/req.
fn frame_set<'a>(rules: &'a RuleSet, name: &str) -> Option<&'a crate::attribute::catalog::FrameSet> {
    rules.frame_set(name)
}

/// `profile` without the on-CPU samples of parked runtime workers (the `runtime-park` frame
/// set, see [`frame_set`]), and how many samples were left out. Borrowed unchanged when there
/// are none.
fn without_idle<'p>(profile: &'p Profile, rules: &RuleSet) -> (std::borrow::Cow<'p, Profile>, u64) {
    let Some(idle) = frame_set(rules, crate::attribute::catalog::RUNTIME_PARK) else { return (std::borrow::Cow::Borrowed(profile), 0) };
    let idle_frame: Vec<bool> = profile.frames.iter().map(|f| f.kind == FrameKind::User && idle.matches(&attribute::rules::frame_path(f))).collect();
    let is_idle = |stack: u32| {
        profile.stacks.get(stack as usize).is_some_and(|s| s.frames.iter().any(|&f| idle_frame.get(f as usize).copied().unwrap_or(false)))
    };
    let left_out: u64 = profile.on_cpu.iter().filter(|c| is_idle(c.stack)).map(|c| c.count).sum();
    if left_out == 0 {
        return (std::borrow::Cow::Borrowed(profile), 0);
    }
    let mut busy = profile.clone();
    busy.on_cpu.retain(|c| !is_idle(c.stack));
    (std::borrow::Cow::Owned(busy), left_out)
}

/// `profile` with only the on-CPU samples on a bursty path: stacks with a frame (user or
/// kernel) of one of the catalog's [`crate::attribute::catalog::BURSTY`] sets. `None` when the
/// rules have none of those sets or no sample is on them.
fn bursty_only(profile: &Profile, rules: &RuleSet) -> Option<Profile> {
    let sets: Vec<_> = crate::attribute::catalog::BURSTY.iter().filter_map(|name| frame_set(rules, name)).collect();
    if sets.is_empty() {
        return None;
    }
    let bursty_frame: Vec<bool> = profile
        .frames
        .iter()
        .map(|f| {
            let path = attribute::rules::frame_path(f);
            sets.iter().any(|set| set.matches(&path))
        })
        .collect();
    let on_path = |stack: u32| {
        profile.stacks.get(stack as usize).is_some_and(|s| s.frames.iter().any(|&f| bursty_frame.get(f as usize).copied().unwrap_or(false)))
    };
    if !profile.on_cpu.iter().any(|c| on_path(c.stack)) {
        return None;
    }
    let mut only = profile.clone();
    only.on_cpu.retain(|c| on_path(c.stack));
    only.off_cpu.clear();
    Some(only)
}

impl Figures {
    /// The dispersion index ([`crate::profile::SyscallWindows::dispersion`]) of the calls of
    /// the syscalls `names` together, window by window; 1 (Poisson) when the profile has no
    /// per-window counts.
    fn dispersion(&self, names: &[&str]) -> f64 {
        let Some(windows) = &self.windows else { return 1.0 };
        let mut sum = vec![0u64; windows.window_ns.len()];
        for counts in names.iter().filter_map(|n| self.syscall_windows.get(*n)) {
            if counts.len() != sum.len() {
                return 1.0;
            }
            sum.iter_mut().zip(counts).for_each(|(s, c)| *s += c);
        }
        windows.dispersion(&sum).unwrap_or(1.0)
    }
}

fn figures(profile: &Profile, requests: Option<u64>, norm: Normalization, rules: &RuleSet, label: &str) -> Figures {
    let ranking = attribute::rank(
        profile,
        requests,
        Bound::Unknown,
        &RankingOptions { rules, wire: None, base_req_per_s: None, label, closed_loop: None },
    );
    let samples = ranking.samples;
    let per_req = match norm {
        Normalization::PerRequest => requests.map(|r| 1.0 / r as f64),
        Normalization::PerSample => None,
    };
    let k = match (norm, per_req) {
        (Normalization::PerRequest, Some(p)) => 1e6 / profile.meta.frequency_hz.max(1) as f64 * p,
        _ => 100.0 / samples.max(1) as f64,
    };
    let costs = ranking.costs.iter().map(|c| (c.finding.id.clone(), c.finding.samples)).collect();
    let named = ranking.costs.iter().map(|c| (c.finding.id.clone(), c.finding.title.clone())).collect();
    let layers = ranking.layers.iter().map(|l| (l.layer.clone(), l.self_samples)).collect();
    let syscalls = profile.syscalls.iter().map(|s| (s.name.clone(), s.count)).collect();
    let mut round_trips = BTreeMap::new();
    if let Some(w) = &profile.wire {
        round_trips.insert(ALL_ROUND_TRIPS.to_string(), w.pg.round_trips);
        round_trips.insert("pings".to_string(), w.pg.pings);
        for s in &w.pg.statements {
            *round_trips.entry(s.shape.to_string()).or_insert(0) += s.round_trips;
        }
    }
    let never = crate::attribute::catalog::FrameSet { name: String::new(), frames: Vec::new(), origin: String::new() };
    let spawn = frame_set(rules, crate::attribute::catalog::SPAWN).unwrap_or(&never);
    let lock = frame_set(rules, crate::attribute::catalog::LOCK).unwrap_or(&never);
    let names: Vec<String> = profile.frames.iter().map(folded::frame_name).collect();
    let paths: Vec<String> = profile.frames.iter().map(attribute::rules::frame_path).collect();
    let mut stack_samples = vec![0u64; profile.stacks.len()];
    for c in &profile.on_cpu {
        if let Some(s) = stack_samples.get_mut(c.stack as usize) {
            *s += c.count;
        }
    }
    let mut frames: BTreeMap<String, u64> = BTreeMap::new();
    let mut self_frames: BTreeMap<String, u64> = BTreeMap::new();
    let mut spawn_samples = 0;
    for (stack, &n) in profile.stacks.iter().zip(&stack_samples) {
        if n == 0 {
            continue;
        }
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        for &f in &stack.frames {
            let user = profile.frames.get(f as usize).is_some_and(|fr| fr.kind == FrameKind::User);
            if let Some(name) = names.get(f as usize).filter(|_| user) {
                seen.insert(name);
            }
        }
        for name in seen {
            *frames.entry(name.to_string()).or_insert(0) += n;
        }
        let leaf = stack.frames.iter().rev().find(|&&f| profile.frames.get(f as usize).is_some_and(|fr| fr.kind == FrameKind::User));
        if let Some(name) = leaf.and_then(|&f| names.get(f as usize)) {
            *self_frames.entry(name.clone()).or_insert(0) += n;
        }
        if stack.frames.iter().any(|&f| paths.get(f as usize).is_some_and(|p| spawn.matches(p))) {
            spawn_samples += n;
        }
    }
    let mut lock_waits = (0, 0);
    for c in &profile.off_cpu {
        let Some(stack) = profile.stacks.get(c.stack as usize) else { continue };
        if stack.frames.iter().any(|&f| paths.get(f as usize).is_some_and(|p| lock.matches(p))) {
            lock_waits.0 += c.count;
            lock_waits.1 += c.total_ns;
        }
    }
    let syscall_scale = profile.meta.syscall_scale();
    let syscall_windows = profile.syscalls.iter().filter(|s| !s.window_counts.is_empty()).map(|s| (s.name.clone(), s.window_counts.clone())).collect();
    let windows = profile.meta.syscall_windows.clone();
    Figures { samples, k, per_req, costs, named, layers, syscalls, syscall_scale, syscall_windows, windows, round_trips, spawn_samples, lock_waits, frames, self_frames }
}

fn median(v: &[f64]) -> f64 {
    crate::runs::median(v).unwrap_or(0.0)
}

fn spread(v: &[f64]) -> f64 {
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    if v.is_empty() {
        0.0
    } else {
        max - min
    }
}

/// A row from two values and a noise threshold (`None`: unknown).
fn row(section: Section, name: &str, unit: &str, base: f64, head: f64, noise: Option<f64>, higher_is_better: bool, counts: Option<(u64, u64)>) -> Row {
    let delta = head - base;
    let significance = if delta == 0.0 {
        Significance::NoChange
    } else {
        match noise {
            Some(n) if delta.abs() > n => Significance::Beyond,
            Some(_) => Significance::WithinNoise,
            None => Significance::Unknown,
        }
    };
    Row {
        section,
        name: name.to_string(),
        unit: unit.to_string(),
        base,
        head,
        delta,
        delta_pct: (base != 0.0).then(|| delta / base * 100.0),
        noise,
        significance,
        higher_is_better,
        counts,
    }
}

/// A row from the measured runs' values on each side.
fn run_row(name: &str, unit: &str, b: &[f64], h: &[f64], higher_is_better: bool, floor: f64) -> Row {
    let (mb, mh) = (median(b), median(h));
    let noise = (b.len() >= 2 && h.len() >= 2).then(|| spread(b) + spread(h) + floor * mb.abs().max(mh.abs()));
    row(Section::Load, name, unit, mb, mh, noise, higher_is_better, None)
}

/// Rows of counts scaled by `kb`, `kh` (Poisson noise, see the module docs).
struct Scaler {
    /// Relative drift the measured runs show (`--noise-floor`, their CPU spread); the
    /// section's floor ([`NOISE_FLOOR`] or [`COUNT_NOISE_FLOOR`]) is added as a minimum.
    /// None: significance unknown.
    floor: Option<f64>,
}

impl Scaler {
    fn row(&self, section: Section, name: &str, unit: &str, base: (u64, f64), head: (u64, f64)) -> Row {
        self.row_split(section, name, unit, base, head, (0, 0))
    }

    /// A row whose counts `nb`, `nh` hold `growth.0`, `growth.1` samples on a bursty path
    /// (stacks with a frame of one of the catalog's [`crate::attribute::catalog::BURSTY`]
    /// sets): that part of the value takes [`BURSTY_FRAME_FLOOR`], the rest the section's
    /// floor.
    fn row_split(&self, section: Section, name: &str, unit: &str, base: (u64, f64), head: (u64, f64), growth: (u64, u64)) -> Row {
        self.row_dispersed(section, name, unit, base, head, growth, (1.0, 1.0))
    }

    /// [`Scaler::row_split`] for counts whose variance is `dispersion.0`, `dispersion.1` times
    /// their Poisson variance ([`crate::profile::SyscallWindows::dispersion`]: calls that come in
    /// bursts).
    #[allow(clippy::too_many_arguments)]
    fn row_dispersed(&self, section: Section, name: &str, unit: &str, (nb, kb): (u64, f64), (nh, kh): (u64, f64), growth: (u64, u64), (db, dh): (f64, f64)) -> Row {
        let (b, h) = (nb as f64 * kb, nh as f64 * kh);
        let (gb, gh) = (growth.0.min(nb) as f64 * kb, growth.1.min(nh) as f64 * kh);
        let se = (db * nb as f64 * kb * kb + dh * nh as f64 * kh * kh).sqrt();
        let absolute = if unit.ends_with("/req") && unit != "µs/req" { COUNT_FLOOR_PER_REQUEST } else { 0.0 };
        let z = if matches!(section, Section::Frames | Section::SelfFrames) { NOISE_Z_FRAMES } else { NOISE_Z };
        let idle = section == Section::Syscalls && IDLE_SYSCALLS.contains(&name);
        // Every figure from the one profiled run's samples takes the sampled floor, the CPU
        // per request among them: it moved 224 -> 319 µs/req between two benches of the same
        // code, the profiled run's own throughput going 0.79 -> 0.72 of unprofiled.
        let sampled = matches!(section, Section::Cpu | Section::Cost | Section::Layers | Section::Frames | Section::SelfFrames)
            || (section == Section::Spawns && unit != "calls/req");
        let noise = self.floor.map(|f| {
            let relative = if idle {
                f.max(IDLE_SYSCALL_FLOOR)
            } else if sampled {
                f.max(NOISE_FLOOR)
            } else {
                f.max(COUNT_NOISE_FLOOR)
            };
            let bursty = f.max(BURSTY_FRAME_FLOOR) * gb.max(gh);
            z * se + relative * (b - gb).abs().max((h - gh).abs()) + bursty + absolute
        });
        row(section, name, unit, b, h, noise, false, Some((nb, nh)))
    }
}

fn by_change(rows: &mut [Row]) {
    rows.sort_by(|a, b| a.significance.cmp(&b.significance).then(b.delta.abs().total_cmp(&a.delta.abs())).then(a.name.cmp(&b.name)));
}

fn compare_test(b: &TestSide, h: &TestSide, opts: &Options<'_>) -> TestDiff {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let pct = opts.fail_on_regression_pct;
    let drift = opts.noise_floor_pct / 100.0;
    let runs = |t: &TestSide, f: fn(&RunFigures) -> Option<f64>| t.runs.iter().filter_map(f).collect::<Vec<f64>>();
    let have_runs = !b.runs.is_empty() && !h.runs.is_empty();
    if have_runs {
        let req = run_row(ROW_REQ_PER_S, "req/s", &runs(b, |r| Some(r.req_per_s)), &runs(h, |r| Some(r.req_per_s)), true, drift);
        let p50 = run_row("latency p50", "ms", &runs(b, |r| Some(r.p50_us / 1e3)), &runs(h, |r| Some(r.p50_us / 1e3)), false, drift);
        let p99 = run_row("latency p99", "ms", &runs(b, |r| Some(r.p99_us / 1e3)), &runs(h, |r| Some(r.p99_us / 1e3)), false, drift);
        rows.extend([req, p50, p99]);
        let (cb, ch) = (runs(b, |r| r.cpu_us_per_request), runs(h, |r| r.cpu_us_per_request));
        if !cb.is_empty() && !ch.is_empty() {
            let mut cpu = run_row(ROW_CPU_ACCOUNTED, "µs/req", &cb, &ch, false, drift);
            cpu.section = Section::Cpu;
            rows.push(cpu);
        }
        let (db, dh) = (runs(b, |r| r.db_cpu_us_per_request), runs(h, |r| r.db_cpu_us_per_request));
        if !db.is_empty() && !dh.is_empty() {
            let mut cpu = run_row(ROW_DB_CPU_ACCOUNTED, "µs/req", &db, &dh, false, drift);
            cpu.section = Section::Cpu;
            rows.push(cpu);
        }
    } else if !b.runs.is_empty() || !h.runs.is_empty() {
        notes.push("only one side has measured runs: throughput and latency are not compared".into());
    }
    let (Some(pb), Some(ph)) = (&b.profile, &h.profile) else {
        for (side, t) in [("BASE", b), ("HEAD", h)] {
            if t.profile.is_none() {
                notes.push(format!("{side} has no profile of this test{}: profile figures are not compared", t.profile_error.as_deref().map_or(String::new(), |e| format!(" ({e})"))));
            }
        }
        return finish(b, h, rows, notes, pct, Normalization::PerSample, (0, 0));
    };
    if !have_runs {
        rows.extend(wire_load_rows(pb, ph));
    }
    let per_request = b.requests.is_some() && h.requests.is_some() && pb.meta.frequency_hz > 0 && ph.meta.frequency_hz > 0;
    let norm = if per_request { Normalization::PerRequest } else { Normalization::PerSample };
    if !per_request {
        notes.push("per sample: a side has no request count or no sampling frequency, so CPU figures are shares of on-CPU samples and counts per request are left out".into());
    }
    // At most MAX_TOTAL each: compare() checked the profiles (import::check_counts).
    let all_samples = |p: &Profile| p.on_cpu.iter().map(|c| c.count).sum::<u64>();
    let samples = (all_samples(pb), all_samples(ph));
    // Parked runtime workers are left out of every profile figure (see IDLE_FRAMES).
    let ((pb, idle_b), (ph, idle_h)) = (without_idle(pb, opts.rules), without_idle(ph, opts.rules));
    let (pb, ph) = (pb.as_ref(), ph.as_ref());
    if idle_b + idle_h > 0 {
        notes.push(format!(
            "left out of the profile figures: {idle_b} → {idle_h} on-CPU samples of parked runtime workers (tokio park, epoll_wait while idle), which follow load, not the request path"
        ));
    }
    let fb = figures(pb, b.requests, norm, opts.rules, &b.name);
    let fh = figures(ph, h.requests, norm, opts.rules, &h.name);
    // The same figures over the samples on a bursty path only (their counts, scaled with each
    // side's whole-profile factor): that part of every row takes the bursty floor.
    let growth = |p: &Profile, t: &TestSide| {
        bursty_only(p, opts.rules).map(|g| figures(&g, t.requests, norm, opts.rules, &t.name)).unwrap_or_default()
    };
    let (gb, gh) = (growth(pb, b), growth(ph, h));
    notes.extend(named_on_one_side(&fb.named, &fh.named));
    // The relative floor: only with measured runs on both sides (bench).
    let floor = have_runs.then(|| {
        let rel = |t: &TestSide| {
            let v = runs(t, |r| r.cpu_us_per_request);
            let m = median(&v);
            if m > 0.0 {
                spread(&v) / m
            } else {
                0.0
            }
        };
        drift.max(rel(b)).max(rel(h))
    });
    let sc = Scaler { floor };
    let cpu_unit = match norm {
        Normalization::PerRequest => "µs/req",
        Normalization::PerSample => "% of samples",
    };
    let sampled = |nb: u64, nh: u64| ((nb, fb.k), (nh, fh.k));
    if per_request {
        let (x, y) = sampled(fb.samples, fh.samples);
        let mut cpu = sc.row_split(Section::Cpu, ROW_CPU_SAMPLED, cpu_unit, x, y, (gb.samples, gh.samples));
        cpu.higher_is_better = false;
        rows.push(cpu);
    }
    let empty = BTreeMap::new();
    let split_section = |s: Section, unit: &str, (mb, mh): (&BTreeMap<String, u64>, &BTreeMap<String, u64>), (gb, gh): (&BTreeMap<String, u64>, &BTreeMap<String, u64>), kb: f64, kh: f64, min: u64| {
        let keys: BTreeSet<&String> = mb.keys().chain(mh.keys()).collect();
        let count = |m: &BTreeMap<String, u64>, k: &String| m.get(k).copied().unwrap_or(0);
        let mut v: Vec<Row> = keys
            .into_iter()
            .filter_map(|k| {
                let (nb, nh) = (count(mb, k), count(mh, k));
                (nb.max(nh) >= min.max(1)).then(|| sc.row_split(s, k, unit, (nb, kb), (nh, kh), (count(gb, k), count(gh, k))))
            })
            .collect();
        by_change(&mut v);
        v
    };
    let section = |s: Section, unit: &str, mb: &BTreeMap<String, u64>, mh: &BTreeMap<String, u64>, kb: f64, kh: f64, min: u64| {
        split_section(s, unit, (mb, mh), (&empty, &empty), kb, kh, min)
    };
    rows.extend(section(Section::Cost, cpu_unit, &fb.costs, &fh.costs, fb.k, fh.k, 1));
    if let (Some(rb), Some(rh)) = (fb.per_req, fh.per_req) {
        rows.extend(section(Section::RoundTrips, "round trips/req", &fb.round_trips, &fh.round_trips, rb, rh, 1));
        // Counts seen in windows carry the Poisson noise of what was seen: scaled by the
        // window factor, not counted as if every call had been.
        // Calls that come in bursts (a connection's accept, epoll_ctl and close at a run's
        // edges) vary more than Poisson: their dispersion over the windows scales the variance.
        let (sb, sh) = (rb * fb.syscall_scale, rh * fh.syscall_scale);
        let syscall_row = |name: &str, names: &[&str]| {
            let count = |f: &Figures| names.iter().filter_map(|n| f.syscalls.get(*n)).sum::<u64>();
            (count(&fb) + count(&fh) > 0).then(|| sc.row_dispersed(Section::Syscalls, name, "calls/req", (count(&fb), sb), (count(&fh), sh), (0, 0), (fb.dispersion(names), fh.dispersion(names))))
        };
        let names: BTreeSet<&String> = fb.syscalls.keys().chain(fh.syscalls.keys()).collect();
        let mut syscalls: Vec<Row> = names.into_iter().filter_map(|n| syscall_row(n, &[n.as_str()])).collect();
        by_change(&mut syscalls);
        rows.extend(syscalls);
        let mut spawns = vec![sc.row(Section::Spawns, "tokio task spawns (CPU in spawn calls)", cpu_unit, (fb.spawn_samples, fb.k), (fh.spawn_samples, fh.k))];
        if let Some(mut clones) = syscall_row("thread/process spawns (clone, clone3, fork, vfork)", &["clone", "clone3", "fork", "vfork"]) {
            clones.section = Section::Spawns;
            spawns.push(clones);
        }
        spawns.retain(|r| r.counts != Some((0, 0)));
        rows.extend(spawns);
        let mut locks = vec![sc.row(Section::LockWaits, "off-CPU waits in Mutex/RwLock", "waits/req", (fb.lock_waits.0, rb), (fh.lock_waits.0, rh))];
        // Time waited: the Poisson error of the wait count, applied to the mean wait.
        let us = |f: &Figures, r: f64| if f.lock_waits.0 > 0 { (f.lock_waits.0, f.lock_waits.1 as f64 / 1e3 / f.lock_waits.0 as f64 * r) } else { (0, 0.0) };
        locks.push(sc.row(Section::LockWaits, "time waited in Mutex/RwLock", "µs/req", us(&fb, rb), us(&fh, rh)));
        locks.retain(|r| r.counts != Some((0, 0)));
        rows.extend(locks);
    }
    rows.extend(split_section(Section::Layers, cpu_unit, (&fb.layers, &fh.layers), (&gb.layers, &gh.layers), fb.k, fh.k, 1));
    rows.extend(split_section(Section::Frames, cpu_unit, (&fb.frames, &fh.frames), (&gb.frames, &gh.frames), fb.k, fh.k, MIN_FRAME_SAMPLES));
    rows.extend(split_section(Section::SelfFrames, cpu_unit, (&fb.self_frames, &fh.self_frames), (&gb.self_frames, &gh.self_frames), fb.k, fh.k, MIN_FRAME_SAMPLES));
    notes.extend(machine_drift(&rows));
    finish(b, h, rows, notes, pct, norm, samples)
}

/// Notes for the named costs that one side's ranking has and the other's does not, with
/// their titles (HEAD's for a new cost, BASE's for a gone one). The cost rows compare on-CPU
/// samples only, and a cost found off-CPU or on the wire (a blocking call on a worker, an N+1)
/// may have none; whether a cost is named at all is a threshold, not a measurement with a
/// noise, so these notes are not gated.
fn named_on_one_side(base: &BTreeMap<String, String>, head: &BTreeMap<String, String>) -> Vec<String> {
    let mut notes = Vec::new();
    for (id, title) in head.iter().filter(|(id, _)| !base.contains_key(*id)) {
        notes.push(format!("named in HEAD only: `{id}`: {title}"));
    }
    for (id, title) in base.iter().filter(|(id, _)| !head.contains_key(*id)) {
        notes.push(format!("named in BASE only (gone in HEAD): `{id}`: {title}"));
    }
    notes
}

/// Throughput and latency from the two profiles' wire captures, for sides without measured
/// runs (attach outputs without a `runs.json`): [`ROW_REQ_PER_S_WIRE`] from each side's steady
/// window, else its load window ([`crate::wire::WireSummary::load_req_per_s`]), and
/// [`ROW_LATENCY_WIRE`], the mean request-to-response time of the paired responses. One run
/// per side, so their noise is unknown. Each row is left out unless both sides have its
/// figure.
fn wire_load_rows(pb: &Profile, ph: &Profile) -> Vec<Row> {
    let mut rows = Vec::new();
    let rate = |p: &Profile| p.wire.as_ref().and_then(|w| w.load_req_per_s()).map(|(x, ..)| x);
    if let (Some(b), Some(h)) = (rate(pb), rate(ph)) {
        rows.push(row(Section::Load, ROW_REQ_PER_S_WIRE, "req/s", b, h, None, true, None));
    }
    let latency = |p: &Profile| p.wire.as_ref().and_then(|w| w.http.latency_mean_ns()).map(|ns| ns / 1e6);
    if let (Some(b), Some(h)) = (latency(pb), latency(ph)) {
        rows.push(row(Section::Load, ROW_LATENCY_WIRE, "ms", b, h, None, false, None));
    }
    rows
}

/// Smallest change of CPU per request, on both sides of the wire, that [`machine_drift`]
/// speaks about: 10%.
pub const DRIFT_MIN_CHANGE: f64 = 0.10;

/// A note when the app's and the database's CPU per request (accounted, measured runs) moved
/// the same way by about the same share (at least [`DRIFT_MIN_CHANGE`], within 10 points of
/// each other) while the database round trips per request did not change beyond noise: the
/// database did the same work per request in more or less CPU time, which is what a machine
/// that got slower or faster does (the speed of a shared host drifts; two benches of the same
/// code on the 2-vCPU CI machine read 164 -> 225 µs/req in the app and 267 -> 350 in
/// PostgreSQL, +37% and +31%, with 7.007 -> 7.010 round trips per request).
fn machine_drift(rows: &[Row]) -> Option<String> {
    let rel = |name: &str| rows.iter().find(|r| r.section == Section::Cpu && r.name == name).and_then(|r| r.delta_pct.map(|p| (r, p / 100.0)));
    let ((app, a), (db, d)) = (rel(ROW_CPU_ACCOUNTED)?, rel(ROW_DB_CPU_ACCOUNTED)?);
    let rt = rows.iter().find(|r| r.section == Section::RoundTrips && r.name == ALL_ROUND_TRIPS)?;
    let same = a.signum() == d.signum() && a.abs() >= DRIFT_MIN_CHANGE && d.abs() >= DRIFT_MIN_CHANGE && (a - d).abs() <= 0.10;
    if !same || rt.significance == Significance::Beyond {
        return None;
    }
    Some(format!(
        "the app's CPU per request moved {:+.0}% ({:.1} → {:.1} µs) and the database's {:+.0}% ({:.1} → {:.1} µs) with the same round trips per request ({:.2} → {:.2}): the database did the same work in {} CPU time, which points at the machine's speed rather than the code; rerun both sides close together, or widen `--noise-floor`",
        a * 100.0,
        app.base,
        app.head,
        d * 100.0,
        db.base,
        db.head,
        rt.base,
        rt.head,
        if d > 0.0 { "more" } else { "less" }
    ))
}

fn noise_words(r: &Row) -> String {
    match (r.significance, r.noise) {
        (Significance::Beyond, Some(n)) => format!("beyond the noise of {n:.1}"),
        _ => "noise unknown".into(),
    }
}

/// Name of the req/s row (measured runs).
pub const ROW_REQ_PER_S: &str = "req/s";
/// Name of the req/s row of sides without measured runs: HTTP requests per second of each
/// profile's wire capture under load (its steady window, else its load window).
pub const ROW_REQ_PER_S_WIRE: &str = "throughput (wire, steady window)";
/// Name of the latency row of sides without measured runs: the wire capture's mean
/// request-to-response time, ms.
pub const ROW_LATENCY_WIRE: &str = "latency mean (wire)";
/// Name of the row of the app's CPU per request accounted from `/proc` (measured runs).
pub const ROW_CPU_ACCOUNTED: &str = "app CPU per request (accounted, /proc)";
/// Name of the row of the database's CPU per request accounted from `/proc` (measured runs of
/// a bench that measured PostgreSQL's processes).
pub const ROW_DB_CPU_ACCOUNTED: &str = "database CPU per request (accounted, /proc)";
/// Name of the round-trip row that sums every statement shape.
pub const ALL_ROUND_TRIPS: &str = "all round trips";
/// Name of the row of sampled CPU per request (the profiles, per request only).
pub const ROW_CPU_SAMPLED: &str = "sampled CPU per request (profile)";

/// The rows of a test the `--fail-on-regression` gate checks, in order: req/s (of the
/// measured runs, or else of the wire captures), and CPU per request: the app's accounted from
/// `/proc` when the test has it, else the sampled one. Latency and profile figures are not
/// gated.
pub fn gated_rows(rows: &[Row]) -> impl Iterator<Item = &Row> {
    let accounted = rows.iter().any(|r| r.section == Section::Cpu && r.name == ROW_CPU_ACCOUNTED);
    rows.iter().filter(move |r| match r.section {
        Section::Load => r.name == ROW_REQ_PER_S || r.name == ROW_REQ_PER_S_WIRE,
        Section::Cpu => r.name == if accounted { ROW_CPU_ACCOUNTED } else { ROW_CPU_SAMPLED },
        _ => false,
    })
}

/// True when a gated row ([`gated_rows`]) fails the gate: worse by more than `pct` percent
/// (req/s down, CPU per request up), beyond noise or with unknown noise.
pub fn fails_gate(r: &Row, pct: f64) -> bool {
    let worse_pct = r.delta_pct.map(|p| if r.higher_is_better { -p } else { p });
    worse_pct.is_some_and(|p| p > pct) && (r.is_worse() || r.significance == Significance::Unknown)
}

/// The finding of a row that fails the gate, for [`TestDiff::regressions`].
fn gate_finding(r: &Row, pct: f64) -> String {
    let change = r.delta_pct.unwrap_or(0.0);
    match r.name.as_str() {
        ROW_REQ_PER_S if r.significance == Significance::Beyond => {
            format!("req/s {:.0} → {:.0} ({change:+.1}%, beyond the noise of {:.0} req/s and the {pct}% threshold)", r.base, r.head, r.noise.unwrap_or(0.0))
        }
        ROW_REQ_PER_S => format!("req/s {:.0} → {:.0} ({change:+.1}%, beyond the {pct}% threshold; a side has a single run, noise unknown)", r.base, r.head),
        ROW_REQ_PER_S_WIRE => format!(
            "req/s seen on the wire {:.0} → {:.0} ({change:+.1}%, beyond the {pct}% threshold; one run per side, noise unknown: a runs.json of measured runs gives it one)",
            r.base, r.head
        ),
        ROW_CPU_ACCOUNTED => format!("app CPU per request {:.1} → {:.1} µs ({change:+.1}%, {})", r.base, r.head, noise_words(r)),
        _ => format!("sampled CPU per request {:.1} → {:.1} µs ({change:+.1}%, {})", r.base, r.head, noise_words(r)),
    }
}

fn finish(b: &TestSide, h: &TestSide, rows: Vec<Row>, notes: Vec<String>, pct: f64, normalization: Normalization, samples: (u64, u64)) -> TestDiff {
    let regressions = gated_rows(&rows).filter(|r| fails_gate(r, pct)).map(|r| gate_finding(r, pct)).collect();
    let mut top: Vec<Row> = rows
        .iter()
        .filter(|r| r.significance == Significance::Beyond && !matches!(r.section, Section::Load | Section::Cpu))
        .cloned()
        .collect();
    // CPU rows (µs or % of samples) first, counts after; among them the named costs first (a
    // cost is the explanation, its frames the evidence: a removed double parse is -0.80 µs/req
    // as a cost while the typed parse that replaced it, a frame, grew +0.93), then the biggest
    // change first.
    let is_cpu = |r: &Row| r.unit == "µs/req" || r.unit == "% of samples";
    let is_cost = |r: &Row| r.section == Section::Cost;
    top.sort_by(|x, y| {
        is_cpu(y).cmp(&is_cpu(x)).then(is_cost(y).cmp(&is_cost(x))).then(y.delta.abs().total_cmp(&x.delta.abs())).then(x.name.cmp(&y.name))
    });
    TestDiff {
        name: b.name.clone(),
        normalization,
        requests: (b.requests, h.requests),
        samples,
        runs: (b.runs.len(), h.runs.len()),
        rows,
        top,
        regressions,
        notes,
    }
}

/// Folded on-CPU stacks of `profile` without thread names (threads may be renamed between
/// two versions; the stacks are what is compared), with their sample counts: what the
/// differential flamegraph ([`crate::render::flamegraph::write_differential_svg`]) pairs.
pub fn folded_lines(profile: &Profile) -> Vec<(String, u64)> {
    let options = folded::Options { weight: Weight::Count, include_thread: false, mark_truncated: true };
    folded::fold(profile, &profile.on_cpu, &options)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(name: &str, base: f64, head: f64, noise: f64) -> Row {
        row(Section::Cpu, name, "µs/req", base, head, Some(noise), false, None)
    }

    fn round_trips(base: f64, head: f64, noise: f64) -> Row {
        row(Section::RoundTrips, ALL_ROUND_TRIPS, "round trips/req", base, head, Some(noise), false, None)
    }

    #[test]
    fn samples_on_the_heap_growth_path_need_more_than_a_disappearance() {
        // Two benches of the same code: `mi_page_free_list_extend` 1.470 -> 0.144 µs/req,
        // about 141 -> 14 samples of 0.0104 µs/req each, at the bench's floor of 0.35.
        let scaler = Scaler { floor: Some(0.35) };
        let k = 0.01043;
        let bursty = scaler.row_split(Section::Frames, "mi_page_free_list_extend", "µs/req", (141, k), (14, k), (141, 14));
        assert_eq!(bursty.significance, Significance::WithinNoise, "{bursty:?}");
        // The same counts off that path (the double JSON parse going away) are called.
        let other = scaler.row(Section::Frames, "target_app::extract::json::parse_json_value", "µs/req", (141, k), (14, k));
        assert_eq!(other.significance, Significance::Beyond, "{other:?}");
        // A heap-growth path that grows tenfold is still called.
        let grown = scaler.row_split(Section::Frames, "mi_page_free_list_extend", "µs/req", (141, k), (1500, k), (141, 1500));
        assert_eq!(grown.significance, Significance::Beyond, "{grown:?}");
        // A caller whose rise is on that path (a frame's total, as `RawVecInner::finish_grow`
        // when a Vec's growth reaches fresh pages) is within noise; the same rise off the path
        // is called.
        let caller = scaler.row_split(Section::Frames, "alloc::raw_vec::RawVecInner<A>::finish_grow", "µs/req", (77, k), (600, k), (15, 540));
        assert_eq!(caller.significance, Significance::WithinNoise, "{caller:?}");
        let off_path = scaler.row_split(Section::Frames, "alloc::raw_vec::RawVecInner<A>::finish_grow", "µs/req", (77, k), (600, k), (15, 15));
        assert_eq!(off_path.significance, Significance::Beyond, "{off_path:?}");
    }

    /// `diff_bench` in CI: `epoll_ctl` 0 -> 130 calls counted in the windows (0.061 per
    /// request) between two benches of `deals-create` that differed only in a JSON parse: wrk's
    /// 64 connections registered and removed inside one window. At Poisson's variance (and
    /// the bench's floor of 0.35) that was called; with the burst's dispersion (all 130 calls
    /// in one of 8 windows: 130, see `SyscallWindows::dispersion`) it is noise. The same calls
    /// spread over the windows (dispersion 1) are still called, as are calls per request that
    /// grow by far more than the burst.
    #[test]
    fn calls_that_come_in_one_burst_need_more_than_poissons_noise() {
        let scaler = Scaler { floor: Some(0.35) };
        let k = 0.061_299 / 130.0;
        let poisson = scaler.row_dispersed(Section::Syscalls, "epoll_ctl", "calls/req", (0, k), (130, k), (0, 0), (1.0, 1.0));
        assert_eq!(poisson.significance, Significance::Beyond, "{poisson:?}");
        let burst = scaler.row_dispersed(Section::Syscalls, "epoll_ctl", "calls/req", (0, k), (130, k), (0, 0), (1.0, 130.0));
        assert_eq!(burst.significance, Significance::WithinNoise, "{burst:?}");
        // A connection per request: 2 epoll_ctl calls per request, 4,240 calls, evenly spread.
        let per_request = scaler.row_dispersed(Section::Syscalls, "epoll_ctl", "calls/req", (130, k), (4_240, k), (0, 0), (130.0, 1.0));
        assert_eq!(per_request.significance, Significance::Beyond, "{per_request:?}");
    }

    /// A profile's windows and calls per window give the row's dispersion; a profile without
    /// them gives Poisson's.
    #[test]
    fn figures_take_the_dispersion_of_the_calls_per_window() {
        let mut p = Profile::default();
        p.meta.syscall_windows = Some(crate::profile::SyscallWindows { window_ns: vec![250_000_000; 8], ..Default::default() });
        let stat = |name: &str, window_counts: Vec<u64>| crate::profile::SyscallStat { name: name.into(), count: window_counts.iter().sum(), window_counts, ..Default::default() };
        p.syscalls = vec![stat("epoll_ctl", vec![0, 0, 130, 0, 0, 0, 0, 0]), stat("clone", vec![65, 0, 0, 0, 0, 0, 0, 0]), stat("clone3", vec![0, 65, 0, 0, 0, 0, 0, 0])];
        let f = figures(&p, Some(1_000), Normalization::PerRequest, &RuleSet::builtin(), "t");
        assert!((f.dispersion(&["epoll_ctl"]) - 130.0).abs() < 1e-9);
        // Two syscalls together, window by window: 65 65 0 ... over 8 windows expect 16.25;
        // X² = 2 × 48.75²/16.25 + 6 × 16.25 = 390, over 7: 55.71.
        assert!((f.dispersion(&["clone", "clone3", "fork"]) - 390.0 / 7.0).abs() < 1e-9);
        p.syscalls.iter_mut().for_each(|s| s.window_counts.clear());
        let f = figures(&p, Some(1_000), Normalization::PerRequest, &RuleSet::builtin(), "t");
        assert_eq!(f.dispersion(&["epoll_ctl"]), 1.0);
    }

    #[test]
    fn a_pools_connection_setup_needs_more_than_a_sixfold_change() {
        // `diff_bench` in CI: sqlx's `PgConnection::establish` (the pool's 65 connections)
        // 27 -> 172 samples, 0.075 -> 0.589 µs/req at the bench's floor of 0.35, with the
        // JSON parse the only change between the two sides.
        let scaler = Scaler { floor: Some(0.35) };
        let (kb, kh) = (0.075 / 27.0, 0.589 / 172.0);
        let name = "sqlx_postgres::connection::establish::<impl sqlx_postgres::connection::PgConnection>::establish::{{closure}}";
        let setup = scaler.row_split(Section::Frames, name, "µs/req", (27, kb), (172, kh), (27, 172));
        assert_eq!(setup.significance, Significance::WithinNoise, "{setup:?}");
        // Off a bursty path the same counts are called (as they were, wrongly, in that run).
        let off_path = scaler.row(Section::Frames, name, "µs/req", (27, kb), (172, kh));
        assert_eq!(off_path.significance, Significance::Beyond, "{off_path:?}");
        // A pool that reconnects on every request: 65 connections become thousands.
        let churn = scaler.row_split(Section::Frames, name, "µs/req", (27, kb), (5000, kh), (27, 5000));
        assert_eq!(churn.significance, Significance::Beyond, "{churn:?}");
    }

    #[test]
    fn bursty_only_keeps_the_stacks_through_a_connection_setup() {
        use crate::profile::{Frame, Stack, StackCount};
        let rules = RuleSet::builtin();
        let frame = |function: &str, kind: FrameKind, inlined: bool| Frame { function: function.into(), module: String::new(), kind, inlined, file: None, line: None };
        let mut p = Profile::default();
        // Names as the bench's profiles of target-app (sqlx 0.8) and a tokio-postgres client
        // show them; the inlined future above the establish frame has no path of its own.
        p.frames = vec![
            frame("{async_fn#0}<core::pin::Pin<alloc::boxed::Box<(dyn core::future::future::Future<Output=core::result::Result<sqlx_postgres::connection::PgConnection, sqlx_core::error::Error>> + core::marker::Send), alloc::alloc::Global>>>", FrameKind::User, true),
            frame("sqlx_postgres::connection::establish::<impl sqlx_postgres::connection::PgConnection>::establish::{{closure}}", FrameKind::User, false),
            frame("sqlx_postgres::connection::sasl::hi", FrameKind::User, false),
            frame("tokio_postgres::connect_raw::authenticate::{{closure}}", FrameKind::User, false),
            frame("sqlx_postgres::connection::executor::<impl sqlx_postgres::connection::PgConnection>::run::{{closure}}", FrameKind::User, false),
            frame("tcp_sendmsg", FrameKind::Kernel, false),
        ];
        p.stacks = [vec![0, 1, 2], vec![0, 1, 5], vec![3], vec![0, 4, 5]].into_iter().map(|frames| Stack { frames, truncated: false }).collect();
        p.on_cpu = (0..4).map(|stack| StackCount { stack, count: 3 + stack as u64, ..Default::default() }).collect();
        let only = bursty_only(&p, &rules).expect("samples on the path");
        assert_eq!(only.on_cpu.iter().map(|c| (c.stack, c.count)).collect::<Vec<_>>(), vec![(0, 3), (1, 4), (2, 5)]);
    }

    #[test]
    fn bursty_only_keeps_the_stacks_through_a_fresh_page_or_a_page_fault() {
        use crate::profile::{Frame, Stack, StackCount};
        let rules = RuleSet::builtin();
        let frame = |function: &str, kind: FrameKind| Frame { function: function.into(), module: String::new(), kind, inlined: false, file: None, line: None };
        let mut p = Profile::default();
        p.frames = vec![
            frame("alloc::raw_vec::RawVecInner<A>::finish_grow", FrameKind::User),
            frame("mi_page_fresh_alloc", FrameKind::User),
            frame("clear_page_erms", FrameKind::Kernel),
            frame("serde_json::de::from_slice", FrameKind::User),
        ];
        p.stacks = [vec![0, 1], vec![3, 2], vec![0, 3]].into_iter().map(|frames| Stack { frames, truncated: false }).collect();
        p.on_cpu = vec![StackCount { stack: 0, count: 5, ..Default::default() }, StackCount { stack: 1, count: 7, ..Default::default() }, StackCount { stack: 2, count: 11, ..Default::default() }];
        let only = bursty_only(&p, &rules).expect("samples on the path");
        assert_eq!(only.on_cpu.iter().map(|c| (c.stack, c.count)).collect::<Vec<_>>(), vec![(0, 5), (1, 7)]);
        p.on_cpu.truncate(0);
        assert!(bursty_only(&p, &rules).is_none());
    }

    #[test]
    fn the_same_factor_on_both_sides_of_the_wire_is_called_machine_drift() {
        // Two benches of the same code on a machine whose speed drifted:
        // app 163.7 -> 225.3 µs/req, PostgreSQL 0.92 CPUs at 3,446 req/s -> 0.90 at 2,572
        // (267 -> 350 µs/req), round trips 7.007 -> 7.010.
        let rows = [cpu(ROW_CPU_ACCOUNTED, 163.7, 225.3, 92.4), cpu(ROW_DB_CPU_ACCOUNTED, 267.0, 350.0, 120.0), round_trips(7.007, 7.010, 1.9)];
        let note = machine_drift(&rows).expect("a drift note");
        assert!(note.starts_with("the app's CPU per request moved +38% (163.7 → 225.3 µs) and the database's +31% (267.0 → 350.0 µs) with the same round trips per request (7.01 → 7.01): the database did the same work in more CPU time"), "{note}");

        // Only the app got slower: its code, not the machine.
        let rows = [cpu(ROW_CPU_ACCOUNTED, 163.7, 225.3, 20.0), cpu(ROW_DB_CPU_ACCOUNTED, 267.0, 272.0, 20.0), round_trips(7.0, 7.0, 1.9)];
        assert_eq!(machine_drift(&rows), None);
        // The database got more work per request: the code again (a query added).
        let rows = [cpu(ROW_CPU_ACCOUNTED, 160.0, 200.0, 20.0), cpu(ROW_DB_CPU_ACCOUNTED, 267.0, 340.0, 20.0), round_trips(7.0, 9.0, 1.0)];
        assert_eq!(machine_drift(&rows), None);
        // Opposite directions, or changes below 10%, say nothing.
        let rows = [cpu(ROW_CPU_ACCOUNTED, 160.0, 200.0, 20.0), cpu(ROW_DB_CPU_ACCOUNTED, 267.0, 220.0, 20.0), round_trips(7.0, 7.0, 1.0)];
        assert_eq!(machine_drift(&rows), None);
        let rows = [cpu(ROW_CPU_ACCOUNTED, 160.0, 170.0, 20.0), cpu(ROW_DB_CPU_ACCOUNTED, 267.0, 285.0, 20.0), round_trips(7.0, 7.0, 1.0)];
        assert_eq!(machine_drift(&rows), None);
        // Without a wire capture there is no round-trip row to vouch for the same work.
        assert_eq!(machine_drift(&[cpu(ROW_CPU_ACCOUNTED, 163.7, 225.3, 92.4), cpu(ROW_DB_CPU_ACCOUNTED, 267.0, 350.0, 120.0)]), None);
    }
}
