//! Folded stacks: Brendan Gregg's format (`stackcollapse-*.pl` output, `flamegraph.pl` and
//! inferno input).
//!
//! One line per distinct stack: `thread;root;...;leaf count`, frames separated by `;`, the
//! weight after the last space. Conventions, as perf's and inferno's collapsers write them:
//! - the first element is the thread name (`comm`), so threads are the flamegraph's first level;
//!   threads of the same name are merged (as `stackcollapse-perf.pl` does by default);
//! - kernel frames end in `_[k]`, inlined frames in `_[i]`;
//! - a stack whose user part did not reach the thread's start ([`Stack::truncated`]) gets a
//!   `[truncated]` pseudo-frame right after the thread (option [`Options::mark_truncated`]), so
//!   the flamegraph shows those samples apart instead of as false roots;
//! - a `;` inside a name (Rust array types such as `<[u8; 32] as Debug>::fmt`) becomes `,` and
//!   line breaks become spaces, since both would break the format;
//! - lines are sorted bytewise and each key appears once (counts summed), so the output is
//!   deterministic.
//!
//! [`Stack::truncated`]: super::Stack::truncated

use std::collections::BTreeMap;
use std::io::{self, Write};

use super::{Frame, FrameKind, Profile, StackCount};

/// Pseudo-frame placed after the thread name in stacks that did not reach the thread's start.
pub const TRUNCATED_FRAME: &str = "[truncated]";

/// What each line's number counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weight {
    /// [`StackCount::count`]: on-CPU samples, or off-CPU waits.
    Count,
    /// [`StackCount::total_ns`] in whole µs (summed per line in ns, then rounded to the nearest
    /// µs; lines that round to 0 µs are left out): off-CPU time.
    Micros,
}

/// How to fold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// What the numbers count. Default is [`Weight::Count`].
    pub weight: Weight,
    /// Put the thread name first. Default is `true`.
    pub include_thread: bool,
    /// Insert [`TRUNCATED_FRAME`] after the thread in truncated stacks. Default is `true`.
    pub mark_truncated: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            weight: Weight::Count,
            include_thread: true,
            mark_truncated: true,
        }
    }
}

/// The folded-stack name of one frame: [`Frame::display_name`] with `;` replaced by `,`, line
/// breaks by spaces, and `_[k]` (kernel) or `_[i]` (inlined) appended.
pub fn frame_name(frame: &Frame) -> String {
    let mut name = sanitize(&frame.display_name());
    match frame.kind {
        FrameKind::Kernel => name.push_str("_[k]"),
        FrameKind::User if frame.inlined => name.push_str("_[i]"),
        FrameKind::User => {}
    }
    name
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            ';' => ',',
            '\n' | '\r' => ' ',
            c => c,
        })
        .collect()
}

/// Folds `counts` (stack indices into `profile`) into sorted `(stack, weight)` pairs.
///
/// Out-of-range stack or frame indices (a hand-edited profile) fold as `[invalid]` frames
/// rather than panicking.
pub fn fold(profile: &Profile, counts: &[StackCount], options: &Options) -> Vec<(String, u64)> {
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    // Fold each distinct stack's frame names once, not once per thread.
    let mut names: Vec<Option<String>> = vec![None; profile.stacks.len()];
    for count in counts {
        let stack_index = count.stack as usize;
        let frames = match names.get_mut(stack_index) {
            Some(slot) => slot
                .get_or_insert_with(|| {
                    let stack = &profile.stacks[stack_index];
                    let mut s = String::new();
                    if options.mark_truncated && stack.truncated {
                        s.push_str(TRUNCATED_FRAME);
                    }
                    for &f in &stack.frames {
                        if !s.is_empty() {
                            s.push(';');
                        }
                        match profile.frames.get(f as usize) {
                            Some(frame) => s.push_str(&frame_name(frame)),
                            None => s.push_str("[invalid]"),
                        }
                    }
                    s
                })
                .clone(),
            None => "[invalid]".to_string(),
        };
        let mut key = String::new();
        if options.include_thread {
            key.push_str(&if count.thread.is_empty() {
                "[unknown]".to_string()
            } else {
                sanitize(&count.thread)
            });
        }
        if !frames.is_empty() {
            if !key.is_empty() {
                key.push(';');
            }
            key.push_str(&frames);
        }
        if key.is_empty() {
            key.push_str("[unknown]");
        }
        let weight = match options.weight {
            Weight::Count => count.count,
            Weight::Micros => count.total_ns,
        };
        let slot = lines.entry(key).or_insert(0);
        *slot = slot.saturating_add(weight);
    }
    lines
        .into_iter()
        .filter_map(|(key, weight)| match options.weight {
            Weight::Count => (weight > 0).then_some((key, weight)),
            Weight::Micros => {
                let us = weight / 1_000 + u64::from(weight % 1_000 >= 500);
                (us > 0).then_some((key, us))
            }
        })
        .collect()
}

/// Writes `counts` as folded stacks, one `stack weight\n` line each.
///
/// # Errors
/// Whatever `out` returns.
pub fn write(
    profile: &Profile,
    counts: &[StackCount],
    options: &Options,
    mut out: impl Write,
) -> io::Result<()> {
    for (stack, weight) in fold(profile, counts, options) {
        writeln!(out, "{stack} {weight}")?;
    }
    Ok(())
}

/// [`write`] into a `String`.
pub fn to_string(profile: &Profile, counts: &[StackCount], options: &Options) -> String {
    let mut s = String::new();
    for (stack, weight) in fold(profile, counts, options) {
        s.push_str(&stack);
        s.push(' ');
        s.push_str(&weight.to_string());
        s.push('\n');
    }
    s
}
