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
///
/// Each frame's name ([`frame_name`]) is formatted once, not once per stack it appears in;
/// each count's key is then concatenated from those names, and equal keys (different stacks
/// or threads with the same names) are merged after one sort.
pub fn fold(profile: &Profile, counts: &[StackCount], options: &Options) -> Vec<(String, u64)> {
    let names: Vec<String> = profile.frames.iter().map(frame_name).collect();
    let mut keyed: Vec<(String, u64)> = Vec::with_capacity(counts.len());
    for count in counts {
        let mut key = String::new();
        if options.include_thread {
            if count.thread.is_empty() {
                key.push_str("[unknown]");
            } else {
                key.push_str(&sanitize(&count.thread));
            }
        }
        // The frames part, `;`-joined; a separator goes before a name only when the part
        // already holds something (an empty name adds nothing, as it always has), and the
        // separator after the thread only when the part is not empty.
        let thread_end = key.len();
        if !key.is_empty() {
            key.push(';');
        }
        let frames_start = key.len();
        let push = |key: &mut String, name: &str| {
            if key.len() > frames_start {
                key.push(';');
            }
            key.push_str(name);
        };
        match profile.stacks.get(count.stack as usize) {
            Some(stack) => {
                if options.mark_truncated && stack.truncated {
                    push(&mut key, TRUNCATED_FRAME);
                }
                for &f in &stack.frames {
                    push(
                        &mut key,
                        names.get(f as usize).map_or("[invalid]", String::as_str),
                    );
                }
            }
            None => push(&mut key, "[invalid]"),
        }
        if key.len() == frames_start {
            key.truncate(thread_end);
        }
        if key.is_empty() {
            key.push_str("[unknown]");
        }
        let weight = match options.weight {
            Weight::Count => count.count,
            Weight::Micros => count.total_ns,
        };
        keyed.push((key, weight));
    }
    keyed.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut lines: Vec<(String, u64)> = Vec::with_capacity(keyed.len());
    for (key, weight) in keyed {
        match lines.last_mut() {
            Some(last) if last.0 == key => last.1 = last.1.saturating_add(weight),
            _ => lines.push((key, weight)),
        }
    }
    lines.retain_mut(|(_, weight)| match options.weight {
        Weight::Count => *weight > 0,
        Weight::Micros => {
            *weight = *weight / 1_000 + u64::from(*weight % 1_000 >= 500);
            *weight > 0
        }
    });
    lines
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

#[cfg(test)]
mod tests {
    use super::{fold, Options};
    use crate::profile::{Frame, FrameKind, Profile, Stack, StackCount};

    /// Edge cases of the key rules, values worked out by hand from the module docs and the
    /// rules the fold had before it concatenated cached frame names: an empty name adds no
    /// separator while the frames part is still empty; out-of-range indices fold as
    /// `[invalid]`; equal keys of different stacks and threads merge; lines sort bytewise.
    #[test]
    fn empty_names_invalid_indices_and_merged_keys() {
        let frame = |function: &str, kind| Frame {
            function: function.into(),
            module: "m".into(),
            kind,
            inlined: false,
            file: None,
            line: None,
        };
        let profile = Profile {
            frames: vec![
                frame("", FrameKind::User),
                frame("a", FrameKind::User),
                frame("a", FrameKind::User),
                frame("k", FrameKind::Kernel),
            ],
            stacks: vec![
                Stack { frames: vec![0, 1], truncated: false },
                Stack { frames: vec![2], truncated: false },
                Stack { frames: vec![1, 9, 3], truncated: true },
                Stack { frames: vec![], truncated: false },
            ],
            ..Profile::default()
        };
        let count = |thread: &str, stack, count| StackCount {
            thread: thread.into(),
            stack,
            count,
            ..StackCount::default()
        };
        let counts = [
            count("t", 0, 1),
            count("t", 1, 2),
            count("t", 2, 3),
            count("", 3, 4),
            count("t", 7, 5),
            count("u;v", 1, 0),
        ];
        let got = fold(&profile, &counts, &Options::default());
        let want = [
            ("[unknown]", 4),
            ("t;[invalid]", 5),
            ("t;[truncated];a;[invalid];k_[k]", 3),
            ("t;a", 3),
        ];
        let want: Vec<(String, u64)> = want.iter().map(|(k, w)| (k.to_string(), *w)).collect();
        assert_eq!(got, want);
        let bare = Options { include_thread: false, ..Options::default() };
        let got = fold(&profile, &counts[3..4], &bare);
        assert_eq!(got, vec![("[unknown]".to_string(), 4)]);
    }
}
