//! `profiler diff BASE HEAD`: what changed between two runs, per request, with noise.
//!
//! - [`import`] reads each side: a bench output folder, an attach output folder, a
//!   `profile.json`, a pprof file, `perf script` text or folded stacks, into [`import::Side`]
//!   (every input becomes a [`Profile`]).
//! - [`compare`] ranks both profiles with the same rules ([`crate::attribute::rank`]) and
//!   compares them test by test: req/s, latency and CPU per request of the measured runs, then
//!   the named costs, round trips by statement, syscalls, spawns, lock waits, layers and frames,
//!   each with its change and whether it is beyond noise (the model is in [`compare`]).
//! - [`crate::render::diff_md`] writes `diff.md`. The differential flamegraphs (`diff.svg`, `diff-base.svg`)
//!   and the page (`index.html`) are drawn in [`crate::render`] from [`folded_lines`] and
//!   [`compare::Diff`].
//!
//! `diff.json` is [`compare::Diff`] serialized with serde_json.

pub mod compare;
pub mod import;
pub mod run;

use crate::profile::folded::{self, Weight};
use crate::profile::Profile;

/// Folded on-CPU stacks of `profile` without thread names (threads may be renamed between
/// two versions; the stacks are what is compared), with their sample counts: what the
/// differential flamegraph ([`crate::render::flamegraph::write_differential_svg`]) pairs.
pub fn folded_lines(profile: &Profile) -> Vec<(String, u64)> {
    let options = folded::Options { weight: Weight::Count, include_thread: false, mark_truncated: true };
    folded::fold(profile, &profile.on_cpu, &options)
}
