//! `profiler diff BASE HEAD`: what changed between two runs, per request, with noise.
//!
//! - [`import`] reads each side: a bench output folder, an attach output folder, a
//!   `profile.json`, a pprof file, `perf script` text or folded stacks, into [`import::Side`]
//!   (every input becomes a [`Profile`]).
//! - [`compare`] ranks both profiles with the same rules ([`crate::attribute::rank`]) and
//!   compares them test by test: req/s, latency and CPU per request of the measured runs, then
//!   the named costs, round trips by statement, syscalls, spawns, lock waits, layers and frames,
//!   each with its change and whether it is beyond noise (the model is in [`compare`]).
//! - [`markdown`] writes `diff.md`; [`write_svg`] the differential flamegraph (`diff.svg`).
//!
//! `diff.json` is [`compare::Diff`] serialized with serde_json.

pub mod compare;
pub mod import;
pub mod markdown;

use std::io::Write;

use crate::profile::folded::{self, Weight};
use crate::profile::Profile;

/// Folded on-CPU stacks of `profile` without thread names (threads may be renamed between
/// two versions; the stacks are what is compared).
fn folded_lines(profile: &Profile) -> Vec<(String, u64)> {
    let options = folded::Options { weight: Weight::Count, include_thread: false, mark_truncated: true };
    folded::fold(profile, &profile.on_cpu, &options)
}

/// Whose samples give a differential flamegraph its frame widths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Widths {
    /// HEAD's (`diff.svg`): what HEAD spends, coloured by the change; code HEAD no longer runs
    /// has no width.
    Head,
    /// BASE's (`diff-base.svg`, Brendan Gregg's "negated" graph): shows what shrank or went away.
    Base,
}

/// Draws the differential flamegraph of BASE → HEAD into `out` with inferno
/// (`inferno::differential` pairs the folded stacks, `inferno::flamegraph` draws them).
///
/// Frame widths are HEAD's or BASE's samples ([`Widths`]); colours are always the change from
/// BASE to HEAD: red where HEAD has more, blue where it has less. BASE's counts are first
/// scaled by `base_scale` so that the two compare: `head requests / base requests` per
/// request, `head samples / base samples` per sample (rounded to whole samples).
///
/// # Errors
/// Whatever `out` returns, or inferno's error.
pub fn write_svg(
    base: &Profile,
    head: &Profile,
    base_scale: f64,
    widths: Widths,
    title: &str,
    subtitle: &str,
    mut out: impl Write,
) -> std::io::Result<()> {
    let mut before = Vec::new();
    for (stack, n) in folded_lines(base) {
        let scaled = (n as f64 * base_scale).round() as u64;
        if scaled > 0 {
            writeln!(before, "{stack} {scaled}")?;
        }
    }
    let mut after = Vec::new();
    for (stack, n) in folded_lines(head) {
        writeln!(after, "{stack} {n}")?;
    }
    let mut paired = Vec::new();
    let options = inferno::differential::Options::default();
    match widths {
        Widths::Head => inferno::differential::from_readers(options, &before[..], &after[..], &mut paired)?,
        // inferno draws the second count's widths: put BASE second and negate the colours so
        // that red still means "more in HEAD".
        Widths::Base => inferno::differential::from_readers(options, &after[..], &before[..], &mut paired)?,
    }
    let paired = String::from_utf8_lossy(&paired);
    let lines: Vec<&str> = paired.lines().filter(|l| !l.is_empty()).collect();
    // Nothing to give widths: BASE's graph when every BASE count rounds to 0 once scaled (a
    // head that spends 190x more CPU per request scales BASE by 0.005), inferno refuses it.
    let no_widths = match widths {
        Widths::Head => after.is_empty(),
        Widths::Base => before.is_empty(),
    };
    if lines.is_empty() || no_widths {
        return crate::render::flamegraph::write_svg(&[], crate::render::flamegraph::Style::OnCpu, title, Some(subtitle), out);
    }
    let mut options = inferno::flamegraph::Options::default();
    options.title = title.to_string();
    options.subtitle = Some(subtitle.to_string());
    options.deterministic = true;
    options.name_type = "Function:".to_string();
    options.count_name = "samples".to_string();
    options.negate_differentials = widths == Widths::Base;
    inferno::flamegraph::from_lines(&mut options, lines.iter().copied(), &mut out)
}
