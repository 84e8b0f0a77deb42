//! `index.html` of `profiler diff --out`: the diff as a page a person opens first.
//!
//! Self-contained like the run pages ([`super::html`]): inline CSS, no script of its own, no
//! request to any other host; the differential flamegraphs are the SVG files beside it,
//! embedded with `<object>` so that their search and zoom work. Its first screen answers
//! "did this change make it worse, and where": the verdict and the `--fail-on-regression`
//! gate, then per test the throughput, latency and CPU rows and the profile's changes beyond
//! noise, biggest first. The other rows (named costs, round trips, syscalls, spawns, lock
//! waits, layers, frames) open from `<details>`; then the differential flamegraphs (HEAD's
//! widths, then BASE's), frames in their short Rust names. The figures and words are
//! `diff.md`'s ([`super::diff_md`]), from the same [`Diff`].

use std::fmt::Write;
use std::path::Path;

use super::diff_md::{called, change, headline, noise, num, section_word, test_title, Called};
use super::html::{escape, fmt_int, frame_code, inline, page_start, svg_height};
use crate::compare::{Diff, Normalization, Row, Section, Significance, TestDiff, Verdict};

/// Rows shown per table; the rest are counted, and all are in `diff.json`.
pub const MAX_ROWS: usize = 40;

/// The differential flamegraphs of one test, as file names beside the page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffGraphs {
    /// The test (`deals-create`), or `""` for a single profile.
    pub test: String,
    /// The graph with HEAD's widths (`diff.svg`, `diff-<test>.svg`).
    pub head_widths: String,
    /// The graph with BASE's widths (`diff-base.svg`, `diff-base-<test>.svg`).
    pub base_widths: String,
}

/// A row's CSS class and the words of its verdict ([`called`]).
fn verdict_cell(r: &Row) -> (&'static str, &'static str) {
    let (c, words) = called(r);
    let class = match c {
        Called::Worse => "worse",
        Called::Better => "better",
        Called::Changed => "changed",
        Called::NotCalled => "",
    };
    (class, words)
}

/// A row's name cell: functions in their short form (full name on hover), other names as
/// code, load figures as words.
fn name_cell(r: &Row) -> String {
    match r.section {
        Section::Load | Section::Cpu => escape(&r.name),
        Section::Frames | Section::SelfFrames => frame_code(&r.name),
        _ => format!("<code>{}</code>", escape(&r.name)),
    }
}

/// A table of `rows` (at most [`MAX_ROWS`]), with the section's word in the first column
/// when `with_section`.
fn rows_table(h: &mut String, first: &str, rows: &[&Row], with_section: bool) {
    let _ = write!(
        h,
        r#"<table class="rows"><thead><tr>{}<th>{}</th><th>unit</th><th>BASE</th><th>HEAD</th><th>change</th><th>noise</th><th>verdict</th></tr></thead><tbody>"#,
        if with_section { "<th>what</th>" } else { "" },
        escape(first)
    );
    for r in rows.iter().take(MAX_ROWS) {
        let (class, words) = verdict_cell(r);
        let counts = r.counts.map_or(String::new(), |(b, h)| format!(r#" title="{b} → {h} samples, calls or waits""#));
        let _ = write!(
            h,
            r#"<tr>{}<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class="{class}"{counts}>{}</td><td>{}</td><td class="{class}">{words}</td></tr>"#,
            if with_section { format!("<td>{}</td>", escape(section_word(r.section))) } else { String::new() },
            name_cell(r),
            escape(&r.unit),
            num(r.base),
            num(r.head),
            escape(&change(r)),
            escape(&noise(r)),
        );
    }
    h.push_str("</tbody></table>");
    if rows.len() > MAX_ROWS {
        let beyond = rows[MAX_ROWS..].iter().filter(|r| r.significance == Significance::Beyond).count();
        let _ = write!(h, r#"<p class="note">{} more rows in <a href="diff.json">diff.json</a> ({beyond} of them beyond noise).</p>"#, rows.len() - MAX_ROWS);
    }
}

/// An id for a test's anchors: its name with characters other than `[A-Za-z0-9_-]` as `-`.
fn anchor(test: &str) -> String {
    if test.is_empty() {
        return "profile".into();
    }
    test.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '-' }).collect()
}

fn test_section(h: &mut String, t: &TestDiff, diff: &Diff) {
    let title = test_title(t, diff);
    let _ = write!(h, r#"<h3 id="test-{}">{}</h3>"#, escape(&anchor(&t.name)), escape(&title));
    let reqs = |r: Option<u64>| r.map_or("?".into(), |r| fmt_int(r as f64));
    let _ = write!(
        h,
        r#"<p class="note">{}; profile: {} → {} on-CPU samples, {} → {} requests; {}.</p>"#,
        match t.runs {
            (0, 0) => "no measured runs".to_string(),
            (b, hh) => format!("measured runs: {b} BASE, {hh} HEAD"),
        },
        fmt_int(t.samples.0 as f64),
        fmt_int(t.samples.1 as f64),
        reqs(t.requests.0),
        reqs(t.requests.1),
        match t.normalization {
            Normalization::PerRequest => "figures per request",
            Normalization::PerSample => "CPU figures as % of on-CPU samples",
        }
    );
    if !t.notes.is_empty() {
        h.push_str(r#"<ul class="notes">"#);
        for n in &t.notes {
            let _ = write!(h, "<li>{}</li>", inline(n));
        }
        h.push_str("</ul>");
    }
    let of = |sec: Section| t.rows.iter().filter(move |r| r.section == sec);
    let load: Vec<&Row> = of(Section::Load).chain(of(Section::Cpu)).collect();
    if !load.is_empty() {
        rows_table(h, "throughput, latency, CPU", &load, false);
    }
    if !t.top.is_empty() {
        h.push_str("<h4>Changes beyond noise in the profile, biggest first</h4>");
        let top: Vec<&Row> = t.top.iter().collect();
        rows_table(h, "name", &top, true);
    } else if t.rows.iter().any(|r| !matches!(r.section, Section::Load | Section::Cpu) && r.significance == Significance::Unknown) {
        h.push_str(r#"<p>Profile figures: significance unknown (measured runs on both sides are needed for a noise estimate).</p>"#);
    } else if t.samples.0 > 0 {
        h.push_str("<p>No profile figure changed beyond noise.</p>");
    }
    let sections: [(Section, &str, &str); 8] = [
        (Section::Cost, "Named costs (sampled CPU)", "cost"),
        (Section::RoundTrips, "Database round trips by statement", "statement"),
        (Section::Syscalls, "Syscalls", "syscall"),
        (Section::Spawns, "Spawns", "what"),
        (Section::LockWaits, "Lock waits (off-CPU)", "what"),
        (Section::Layers, "Layers (self CPU)", "layer"),
        (Section::SelfFrames, "Functions, self CPU (in the function and the kernel work it called)", "function"),
        (Section::Frames, "Functions, total CPU (anywhere on the stack)", "function"),
    ];
    for (sec, name, first) in sections {
        let rows: Vec<&Row> = of(sec).collect();
        if rows.is_empty() {
            continue;
        }
        let beyond = rows.iter().filter(|r| r.significance == Significance::Beyond).count();
        // The named costs are what the ranking is about: open.
        let open = if sec == Section::Cost { " open" } else { "" };
        let _ = write!(
            h,
            r#"<details class="summary"{open}><summary>{} <span class="note">({} row{}, {beyond} beyond noise)</span></summary>"#,
            escape(name),
            rows.len(),
            if rows.len() == 1 { "" } else { "s" }
        );
        rows_table(h, first, &rows, false);
        h.push_str("</details>");
    }
}

/// The page. `out_dir` is where the page and the graphs are written (the graphs' heights are
/// read from their files there).
pub fn diff_page(diff: &Diff, graphs: &[DiffGraphs], out_dir: &Path) -> String {
    let mut h = String::new();
    page_start(&mut h, &format!("profiler diff — {} → {}", diff.base.path, diff.head.path));
    let side = |x: &crate::compare::SideInfo| {
        format!(
            "<code>{}</code> ({}{}{})",
            escape(&x.path),
            escape(x.kind.describe()),
            if x.target.is_empty() { String::new() } else { format!(", target {}", escape(&x.target)) },
            x.costs.as_deref().map_or(String::new(), |c| format!(", costs <code>{}</code>", escape(c)))
        )
    };
    let _ = write!(h, r#"<header><h1>profiler diff</h1><p class="sub">BASE {} → HEAD {}</p></header>"#, side(&diff.base), side(&diff.head));
    let class = match diff.verdict {
        _ if diff.failed => "worse",
        Verdict::Regression => "worse",
        Verdict::Improvement => "better",
        _ => "",
    };
    let _ = write!(h, r#"<p class="verdict {class}" id="verdict"><strong>{}</strong></p>"#, inline(&headline(diff)));
    let failing: Vec<(&TestDiff, &String)> = diff.tests.iter().flat_map(|t| t.regressions.iter().map(move |r| (t, r))).collect();
    if failing.is_empty() {
        if diff.verdict != Verdict::Regression {
            let _ = write!(h, "<p>No test regressed by more than {}% of req/s or CPU per request.</p>", diff.fail_on_regression_pct);
        }
    } else {
        let _ = write!(h, r#"<p class="warn">Regression beyond {}% (the check fails):</p><ul class="regressions">"#, diff.fail_on_regression_pct);
        for (t, r) in &failing {
            let _ = write!(h, "<li>{}: {}</li>", escape(&test_title(t, diff)), inline(r));
        }
        h.push_str("</ul>");
    }
    h.push_str("<nav>");
    let links: Vec<String> =
        diff.tests.iter().map(|t| format!(r##"<a href="#test-{}">{}</a>"##, escape(&anchor(&t.name)), escape(&test_title(t, diff)))).collect();
    h.push_str(&links.join(" · "));
    h.push_str(r##" · <a href="#flamegraphs">differential flamegraphs</a> · <a href="diff.md">diff.md</a> · <a href="diff.json">diff.json</a></nav>"##);
    h.push_str(r#"<section id="changes"><h2>What changed, per test</h2>"#);
    for t in &diff.tests {
        test_section(&mut h, t, diff);
    }
    h.push_str("</section>");
    h.push_str(r#"<section id="flamegraphs"><h2>Differential flamegraphs</h2><p class="note">Red: more in HEAD, blue: less, deeper colour for a bigger change; BASE is scaled to HEAD's requests (or samples) first. The first graph has HEAD's widths (what HEAD spends); the second BASE's (what shrank or went away). Frames show short Rust names; hover for the full name, click to zoom, Search matches full names.</p>"#);
    if graphs.is_empty() {
        h.push_str("<p>No test has a profile on both sides: no differential flamegraph.</p>");
    }
    for g in graphs {
        let label = if g.test.is_empty() { "profile".to_string() } else { g.test.clone() };
        let _ = write!(h, "<h3>{}</h3>", escape(&label));
        for (file, whose, class) in [(&g.head_widths, "HEAD", "diff-head"), (&g.base_widths, "BASE", "diff-base")] {
            let height = svg_height(&out_dir.join(file)).unwrap_or(560);
            let _ = write!(
                h,
                r#"<object class="flamegraph {class}" type="image/svg+xml" data="{f}" style="height:{height}px" aria-label="differential flamegraph of {l}, {whose}'s widths"></object>"#,
                f = escape(file),
                l = escape(&label),
            );
        }
    }
    h.push_str("</section>");
    let drift = if diff.noise_floor_pct > 0.0 { format!(", plus {}% of the larger value (<code>--noise-floor</code>)", diff.noise_floor_pct) } else { String::new() };
    let _ = write!(
        h,
        r#"<section><h2>How noise is judged</h2><p class="note">Run figures (req/s, latency, CPU from /proc) change beyond noise when the medians differ by more than the two sides' spreads added together{drift}. Profile figures (one profiled run per side) take Poisson standard errors plus a relative floor; the whole rule is at the end of <a href="diff.md">diff.md</a>. Generated by <code>profiler diff</code>.</p></section>"#
    );
    h.push_str("</main></body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::SideInfo;
    use crate::compare::import::InputKind;

    fn row(section: Section, name: &str, base: f64, head: f64, significance: Significance) -> Row {
        Row {
            section,
            name: name.into(),
            unit: "µs/req".into(),
            base,
            head,
            delta: head - base,
            delta_pct: (base != 0.0).then(|| (head - base) / base * 100.0),
            noise: Some(1.0),
            significance,
            higher_is_better: false,
            counts: Some((10, 20)),
        }
    }

    fn diff() -> Diff {
        let regex = row(Section::SelfFrames, "regex_automata::meta::regex::Regex::new<&str>", 0.0, 5.7, Significance::Beyond);
        let cost = row(Section::Cost, "construction-per-request", 0.0, 6.1, Significance::Beyond);
        let test = TestDiff {
            name: "json".into(),
            normalization: Normalization::PerRequest,
            requests: (Some(1000), Some(900)),
            samples: (400, 520),
            runs: (3, 3),
            rows: vec![row(Section::Cpu, "app CPU per request (accounted, /proc)", 100.0, 130.0, Significance::Beyond), cost.clone(), regex.clone()],
            top: vec![cost, regex],
            regressions: vec!["app CPU per request +30.0% (> 5%)".into()],
            notes: vec!["a note with `code`".into()],
        };
        let side = |p: &str| SideInfo { path: p.into(), kind: InputKind::Bench, target: "target-app".into(), costs: None };
        Diff {
            schema_version: 1,
            base: side("base/"),
            head: side("head/<x>"),
            verdict: Verdict::Regression,
            fail_on_regression_pct: 5.0,
            noise_floor_pct: 0.0,
            failed: true,
            tests: vec![test],
        }
    }

    #[test]
    fn the_page_leads_with_the_verdict_and_the_changes() {
        let graphs = [DiffGraphs { test: "json".into(), head_widths: "diff.svg".into(), base_widths: "diff-base.svg".into() }];
        let page = diff_page(&diff(), &graphs, Path::new("/nonexistent"));
        let verdict = page.find(r#"id="verdict""#).unwrap();
        let changes = page.find("Changes beyond noise").unwrap();
        let graphs_at = page.find(r#"id="flamegraphs""#).unwrap();
        assert!(verdict < changes && changes < graphs_at);
        assert!(page.contains(r#"class="verdict worse""#));
        assert!(page.contains("<li>json: app CPU per request +30.0% (&gt; 5%)</li>"));
        // Functions in their short form with the full name as the tooltip; costs as code.
        assert!(page.contains(r#"<code title="regex_automata::meta::regex::Regex::new&lt;&amp;str&gt;">"#), "{page}");
        assert!(page.contains("<code>construction-per-request</code>"));
        assert!(page.contains(r#"data="diff.svg""#) && page.contains(r#"data="diff-base.svg""#));
        // Escaped side paths, backticks as code, no raw markdown.
        assert!(page.contains("head/&lt;x&gt;"));
        assert!(page.contains("a note with <code>code</code>"));
        assert!(!page.contains('`') && !page.contains("**") && !page.contains("|---"));
    }

    #[test]
    fn anchors_are_safe_ids() {
        assert_eq!(anchor("deals-create"), "deals-create");
        assert_eq!(anchor(""), "profile");
        assert_eq!(anchor("a b\"<c>"), "a-b--c-");
    }
}
