//! `diff.md`: the diff as a GitHub pull-request comment and job summary.
//!
//! GitHub-flavoured Markdown only: headings, lists, tables, code spans; no raw HTML (GitHub
//! strips most of it). Names go into code spans with `|` escaped (GFM splits table cells on
//! it) and backticks replaced by `'`; long names are cut to [`MAX_NAME_CHARS`]. Each table
//! shows at most [`MAX_ROWS`] rows (changes beyond noise first, then the biggest), and the
//! whole text stays under [`MAX_CHARS`] (GitHub's comment limit is 65,536 characters).

use std::fmt::Write as _;

use crate::compare::{self, Diff, Normalization, Row, Section, Significance, TestDiff, Verdict};

/// Longest text written, characters (GitHub comments hold at most 65,536).
pub const MAX_CHARS: usize = 60_000;

/// Rows per table.
pub const MAX_ROWS: usize = 12;

/// Longest name shown in a table cell, characters.
pub const MAX_NAME_CHARS: usize = 120;

/// A name as a code span safe in a GFM table cell.
pub fn code(name: &str) -> String {
    let mut s: String = name.chars().take(MAX_NAME_CHARS).collect();
    if name.chars().count() > MAX_NAME_CHARS {
        s.push('…');
    }
    let s = s.replace('`', "'").replace('|', "\\|").replace(['\n', '\r'], " ");
    format!("`{s}`")
}

/// A figure with 2-3 significant digits (`1234`, `12.3`, `1.23`, `0.0123`).
pub(super) fn num(x: f64) -> String {
    let a = x.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 0.1 {
        format!("{x:.2}")
    } else {
        format!("{x:.4}")
    }
}

/// [`num`] with a `+` on positive values.
pub(super) fn signed(x: f64) -> String {
    if x > 0.0 {
        format!("+{}", num(x))
    } else {
        num(x)
    }
}

/// `+1.23 (+4.5%)`.
pub(super) fn change(r: &Row) -> String {
    match r.delta_pct {
        Some(p) => format!("{} ({:+.1}%)", signed(r.delta), p),
        None => format!("{} (new)", signed(r.delta)),
    }
}

/// What a row's change means for a reader: worse, better or changed (beyond noise; `changed`
/// for figures that are neither good nor bad by their sign), or not called; and its words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Called {
    Worse,
    Better,
    Changed,
    NotCalled,
}

/// The row's [`Called`] and its words (`worse, beyond noise`, `within noise`, ...).
pub(super) fn called(r: &Row) -> (Called, &'static str) {
    match r.significance {
        Significance::Beyond if r.is_worse() => (Called::Worse, "worse, beyond noise"),
        Significance::Beyond if matches!(r.section, Section::Load | Section::Cpu) || r.higher_is_better => (Called::Better, "better, beyond noise"),
        Significance::Beyond if r.delta > 0.0 => (Called::Changed, "grew, beyond noise"),
        Significance::Beyond => (Called::Changed, "shrank, beyond noise"),
        Significance::WithinNoise => (Called::NotCalled, "within noise"),
        Significance::Unknown => (Called::NotCalled, "significance unknown"),
        Significance::NoChange => (Called::NotCalled, "no change"),
    }
}

/// [`called`]'s words, in bold when beyond noise.
fn significance(r: &Row) -> String {
    match called(r) {
        (Called::NotCalled, words) => words.to_string(),
        (_, words) => format!("**{words}**"),
    }
}

/// `±N` in the row's unit, or `?` when unknown.
pub(super) fn noise(r: &Row) -> String {
    r.noise.map_or("?".into(), |n| format!("±{}", num(n)))
}

fn table(s: &mut String, first: &str, rows: &[&Row], unit_in_header: Option<&str>) {
    let unit = unit_in_header.map_or(String::new(), |u| format!(" ({u})"));
    let _ = writeln!(s, "| {first} | BASE{unit} | HEAD{unit} | change | noise | |");
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---|");
    for r in rows.iter().take(MAX_ROWS) {
        let name = match unit_in_header {
            Some(_) => code(&r.name),
            None if r.name == r.unit => r.name.clone(),
            None => format!("{} ({})", r.name, r.unit),
        };
        let _ = writeln!(s, "| {name} | {} | {} | {} | {} | {} |", num(r.base), num(r.head), change(r), noise(r), significance(r));
    }
    if rows.len() > MAX_ROWS {
        let beyond = rows[MAX_ROWS..].iter().filter(|r| r.significance == Significance::Beyond).count();
        let _ = match &rows[MAX_ROWS..] {
            [one] => {
                let words = match one.significance {
                    Significance::Beyond => "beyond noise",
                    Significance::WithinNoise => "within noise",
                    Significance::Unknown => "significance unknown",
                    Significance::NoChange => "no change",
                };
                writeln!(s, "\n1 more row in `diff.json` ({words}).")
            }
            more => writeln!(s, "\n{} more rows in `diff.json` ({beyond} of them beyond noise).", more.len()),
        };
    }
    let _ = writeln!(s);
}

/// The test's name, or for a single profile the target(s) compared.
pub(super) fn test_title(t: &TestDiff, diff: &Diff) -> String {
    if t.name.is_empty() {
        if diff.base.target == diff.head.target {
            diff.base.target.clone()
        } else {
            format!("{} → {}", diff.base.target, diff.head.target)
        }
    } else {
        t.name.clone()
    }
}

/// Figures named in the headline, at most.
const MAX_HEADLINE_FIGURES: usize = 6;

/// `figure (+5.7%)` for each row `pick` takes, grouped by test (`... of deals-create`), joined
/// with commas and a final `and`; at most [`MAX_HEADLINE_FIGURES`] of them.
fn figures(diff: &Diff, pick: impl Fn(&TestDiff) -> Vec<&Row>) -> String {
    let mut groups = Vec::new();
    let mut shown = 0;
    let mut left = 0;
    for t in &diff.tests {
        let rows = pick(t);
        let mut names = Vec::new();
        for r in rows {
            if shown == MAX_HEADLINE_FIGURES {
                left += 1;
                continue;
            }
            shown += 1;
            // `app CPU per request (accounted, /proc)` -> `app CPU per request`.
            let name = r.name.split(" (").next().unwrap_or(&r.name);
            names.push(match r.delta_pct {
                Some(p) => format!("{name} ({p:+.1}%)"),
                None => format!("{name} ({})", signed(r.delta)),
            });
        }
        if names.is_empty() {
            continue;
        }
        let names = and_list(&names);
        groups.push(if t.name.is_empty() { names } else { format!("{names} of {}", t.name) });
    }
    let mut text = groups.join(", ");
    if left > 0 {
        let _ = write!(text, " and {left} more");
    }
    text
}

/// `a`, `a and b`, `a, b and c`.
fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [most @ .., last] => format!("{} and {last}", most.join(", ")),
    }
}

/// The verdict as `diff.md`'s heading says it (and `profiler diff --out` prints): the
/// [`Verdict`], and the `--fail-on-regression` gate's outcome when the verdict alone would
/// not tell it:
///
/// - a regression beyond noise within the threshold names the figures that got worse and
///   says that the threshold (which checks req/s and CPU per request only) was not crossed;
/// - a failed gate under any other verdict (its figures' noise is unknown: a side with a single run,
///   single profiles) names the figures that crossed it and says the check fails.
pub fn headline(diff: &Diff) -> String {
    let pct = diff.fail_on_regression_pct;
    match (diff.verdict, diff.failed) {
        (Verdict::Regression, false) => {
            let worse = figures(diff, |t| t.rows.iter().filter(|r| matches!(r.section, Section::Load | Section::Cpu) && r.is_worse()).collect());
            format!(
                "regression beyond noise in {worse}; no test crossed the {pct}% `--fail-on-regression` threshold, which checks req/s and CPU per request only"
            )
        }
        (Verdict::Regression, true) => format!("regression beyond the {pct}% `--fail-on-regression` threshold: the check fails"),
        (verdict, true) => {
            let crossed = figures(diff, |t| compare::gated_rows(&t.rows).filter(|r| compare::fails_gate(r, pct)).collect());
            format!(
                "{}, but {crossed} crossed the {pct}% `--fail-on-regression` threshold with unknown noise, so the check fails",
                verdict.headline()
            )
        }
        (verdict, false) => verdict.headline().to_string(),
    }
}

/// Renders `diff.md`.
pub fn render(diff: &Diff) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## profiler diff: {}\n", headline(diff));
    let failing: Vec<(&TestDiff, &String)> = diff.tests.iter().flat_map(|t| t.regressions.iter().map(move |r| (t, r))).collect();
    if failing.is_empty() {
        // A regression within the threshold says it in the heading.
        if diff.verdict != Verdict::Regression {
            let _ = writeln!(s, "No test regressed by more than {}% of req/s or CPU per request.\n", diff.fail_on_regression_pct);
        }
    } else {
        let _ = writeln!(s, "**Regression beyond {}%** (the check fails):\n", diff.fail_on_regression_pct);
        for (t, r) in &failing {
            let _ = writeln!(s, "- {}: {r}", test_title(t, diff));
        }
        let _ = writeln!(s);
    }
    for t in &diff.tests {
        if let Some(top) = t.top.first() {
            let _ = writeln!(
                s,
                "- {}: top change {} {} {} ({})",
                test_title(t, diff),
                section_word(top.section),
                code(&top.name),
                change(top),
                top.unit
            );
        }
    }
    if diff.tests.iter().any(|t| !t.top.is_empty()) {
        let _ = writeln!(s);
    }
    let side = |x: &compare::SideInfo| {
        format!("`{}` ({}{})", x.path.replace('`', "'"), x.kind.describe(), x.costs.as_deref().map_or(String::new(), |c| format!(", costs `{c}`")))
    };
    let _ = writeln!(s, "BASE {} · HEAD {}\n", side(&diff.base), side(&diff.head));
    for t in &diff.tests {
        test_section(&mut s, t, diff);
        if s.len() > MAX_CHARS {
            break;
        }
    }
    let drift = if diff.noise_floor_pct > 0.0 { format!(" plus {}% of the larger value (`--noise-floor`)", diff.noise_floor_pct) } else { String::new() };
    let _ = writeln!(
        s,
        "Noise: run figures change beyond noise when the medians differ by more than the two sides' spreads (max - min of the measured runs) added together{drift}; profile figures (one profiled run per side) by more than {} Poisson standard errors ({} for frames) plus {:.0}% of the larger value for sampled figures, {:.0}% for counts (or the runs' relative CPU spread if larger; {:.0}% for syscalls that wait for work), and counts per request by {} more; profile figures are called only when both sides have measured runs. Generated by `profiler diff`.",
        compare::NOISE_Z,
        compare::NOISE_Z_FRAMES,
        compare::NOISE_FLOOR * 100.0,
        compare::COUNT_NOISE_FLOOR * 100.0,
        compare::IDLE_SYSCALL_FLOOR * 100.0,
        compare::COUNT_FLOOR_PER_REQUEST
    );
    if s.len() > MAX_CHARS {
        let mut cut = MAX_CHARS - 200;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        // Cut at a line end so that no table row is broken.
        let cut = s[..cut].rfind('\n').unwrap_or(cut);
        s.truncate(cut);
        s.push_str("\n\n(cut at the comment size limit: the whole diff is in `diff.json`)\n");
    }
    s
}

/// What a row of `s` is, in a few words (`cost`, `syscall`, `frame (self)`; empty for load).
pub(super) fn section_word(s: Section) -> &'static str {
    match s {
        Section::Load | Section::Cpu => "",
        Section::Cost => "cost",
        Section::RoundTrips => "round trips",
        Section::Syscalls => "syscall",
        Section::Spawns => "spawns",
        Section::LockWaits => "lock waits",
        Section::Layers => "layer",
        Section::Frames => "frame (total)",
        Section::SelfFrames => "frame (self)",
    }
}

fn test_section(s: &mut String, t: &TestDiff, diff: &Diff) {
    let _ = writeln!(s, "### {}\n", test_title(t, diff));
    let reqs = |r: Option<u64>| r.map_or("?".into(), |r| r.to_string());
    let _ = writeln!(
        s,
        "{}; profile: {} / {} on-CPU samples, {} / {} requests; {}.\n",
        match t.runs {
            (0, 0) => "no measured runs".to_string(),
            (1, h) => format!("1 measured run BASE / {h} HEAD"),
            (b, h) => format!("{b} measured runs BASE / {h} HEAD"),
        },
        t.samples.0,
        t.samples.1,
        reqs(t.requests.0),
        reqs(t.requests.1),
        match t.normalization {
            Normalization::PerRequest => "figures per request",
            Normalization::PerSample => "CPU figures as % of on-CPU samples",
        }
    );
    for n in &t.notes {
        let _ = writeln!(s, "- {n}");
    }
    if !t.notes.is_empty() {
        let _ = writeln!(s);
    }
    let of = |sec: Section| t.rows.iter().filter(move |r| r.section == sec);
    let head: Vec<&Row> = of(Section::Load).chain(of(Section::Cpu)).collect();
    if !head.is_empty() {
        table(s, "throughput, latency, CPU", &head, None);
    }
    if !t.top.is_empty() {
        let _ = writeln!(s, "Changes beyond noise in the profile, biggest first:\n");
        for r in t.top.iter().take(MAX_ROWS) {
            let _ = writeln!(s, "- {} {}: {} {} ({} → {})", section_word(r.section), code(&r.name), change(r), r.unit, num(r.base), num(r.head));
        }
        if t.top.len() > MAX_ROWS {
            let _ = writeln!(s, "- and {} more in `diff.json`", t.top.len() - MAX_ROWS);
        }
        let _ = writeln!(s);
    } else if t.rows.iter().any(|r| !matches!(r.section, Section::Load | Section::Cpu) && r.significance == Significance::Unknown) {
        let _ = writeln!(s, "Profile figures: significance unknown (measured runs on both sides are needed for a noise estimate).\n");
    } else if t.samples.0 > 0 {
        let _ = writeln!(s, "No profile figure changed beyond noise.\n");
    }
    let cpu_unit = match t.normalization {
        Normalization::PerRequest => "µs/req",
        Normalization::PerSample => "% of samples",
    };
    let sections: [(Section, &str, &str, Option<&str>); 6] = [
        (Section::Cost, "Ranking: named costs (sampled CPU)", "cost", Some(cpu_unit)),
        (Section::RoundTrips, "Ranking: database round trips by statement", "statement", Some("round trips/req")),
        (Section::Syscalls, "Ranking: syscalls", "syscall", Some("calls/req")),
        (Section::Spawns, "Ranking: spawns", "what", None),
        (Section::LockWaits, "Ranking: lock waits (off-CPU)", "what", None),
        (Section::Layers, "Layers (self CPU)", "layer", Some(cpu_unit)),
    ];
    for (sec, title, first, unit) in sections {
        let rows: Vec<&Row> = of(sec).collect();
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(s, "#### {title}\n");
        table(s, first, &rows, unit);
    }
    let mut grew: Vec<&Row> = of(Section::SelfFrames).filter(|r| r.delta > 0.0).collect();
    grew.sort_by(|a, b| a.significance.cmp(&b.significance).then(b.delta.total_cmp(&a.delta)).then(a.name.cmp(&b.name)));
    if !grew.is_empty() {
        let _ = writeln!(s, "#### Top frames that grew (self CPU: in the function and the kernel work it called; totals in `diff.json`)\n");
        table(s, "function", &grew, Some(cpu_unit));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str) -> Row {
        Row {
            section: Section::Syscalls,
            name: name.into(),
            unit: "calls/req".into(),
            base: 1.0,
            head: 2.0,
            delta: 1.0,
            delta_pct: Some(100.0),
            noise: Some(5.0),
            significance: Significance::WithinNoise,
            higher_is_better: false,
            counts: Some((1, 2)),
        }
    }

    fn rows_after_table(n: usize) -> String {
        let rows: Vec<Row> = (0..n).map(|i| row(&format!("s{i}"))).collect();
        let refs: Vec<&Row> = rows.iter().collect();
        let mut s = String::new();
        table(&mut s, "syscall", &refs, Some("calls/req"));
        s.lines().filter(|l| l.contains("diff.json")).collect()
    }

    #[test]
    fn rows_left_out_of_a_table_are_counted_in_words() {
        assert_eq!(rows_after_table(MAX_ROWS), "");
        assert_eq!(rows_after_table(MAX_ROWS + 1), "1 more row in `diff.json` (within noise).");
        assert_eq!(rows_after_table(MAX_ROWS + 2), "2 more rows in `diff.json` (0 of them beyond noise).");
    }
}
