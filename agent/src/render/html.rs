//! `index.html`: the report page of `profiler attach` ([`attach_page`]) and `profiler bench`
//! ([`bench_page`]). One self-contained page: inline CSS, inline SVG charts, no script of its
//! own and no request to any other host; the flamegraphs are the SVG files beside it, embedded
//! with `<object>` (so their own search and zoom work).
//!
//! Its first screen answers "what should I fix": the named costs of the ranking
//! ([`crate::attribute::Ranking`], read from `ranking.json` or given) as a table, biggest
//! predicted gain first, each row opening (`<details>`) to its evidence, the code that pays it,
//! its thread roles and frames. Then, per profiled run: HTTP endpoints and database work per
//! request from the wire capture, the layer table (self time per layer), and the on-CPU and
//! off-CPU flamegraphs with the legend of their layer colours. A bench page keeps its
//! throughput, latency and CPU charts and its settings after the findings.

use std::fmt::Write;
use std::path::Path;

use crate::runs::BenchResults;

use super::flamegraph::{category_colour, CATEGORY_COLOURS, HELPER_CATEGORY, OTHER_CATEGORY};
use crate::attribute::ranking::RankedFinding;
use crate::attribute::{Finding, Ranking};
use crate::profile::Profile;
use crate::wire::WireSummary;

/// Escapes text for HTML and XML (SVG) element content and attribute values; `'` becomes
/// `&#39;`, which both read.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// One profiled run shown on the page: the attached target, or one test of a bench.
#[derive(Debug, Clone)]
pub struct RunView {
    /// What was profiled: the target (`container navree`) or the bench test (`json`).
    pub label: String,
    /// The request the load generator sent (`GET /json`); empty for `profiler attach`.
    pub request: String,
    /// Folder of the run's files (`flamegraph.svg`, `offcpu.svg`, ...) relative to the page;
    /// empty when they are beside it.
    pub dir: String,
    /// The run's ranking of named costs, or why there is none (one line).
    pub ranking: Result<Ranking, String>,
    /// The run's wire capture, when there was one.
    pub wire: Option<WireSummary>,
}

impl RunView {
    /// Reads `ranking.json` and the wire summary (`wire.json`, written only with a capture)
    /// from `out_dir/dir`. A file that cannot be read or parsed becomes a one-line reason
    /// ([`RunView::ranking`]) or no wire section.
    pub fn load(label: &str, request: &str, dir: &str, out_dir: &Path) -> RunView {
        let folder = out_dir.join(dir);
        let ranking_path = folder.join("ranking.json");
        let ranking = std::fs::read(&ranking_path)
            .map_err(|e| format!("cannot read {}: {e}", ranking_path.display()))
            .and_then(|b| serde_json::from_slice::<Ranking>(&b).map_err(|e| format!("{}: not a ranking: {e}", ranking_path.display())));
        let wire = std::fs::read(folder.join("wire.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| serde_json::from_value::<WireSummary>(v.get("summary")?.clone()).ok());
        RunView { label: label.to_string(), request: request.to_string(), dir: dir.to_string(), ranking, wire }
    }

    fn file(&self, name: &str) -> String {
        if self.dir.is_empty() {
            name.to_string()
        } else {
            format!("{}/{name}", self.dir.trim_end_matches('/'))
        }
    }
}

/// The page's head (title, the inline CSS) and the opening of `<body><main>`.
pub(super) fn page_start(h: &mut String, title: &str) {
    let _ = write!(
        h,
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>{}</title><style>{CSS}</style></head><body><main>"#,
        escape(title)
    );
}

fn nav(h: &mut String, extra: &[(&str, &str)]) {
    h.push_str(r##"<nav><a href="#findings">findings</a> · <a href="#endpoints">endpoints</a> · <a href="#layers">layers</a>"##);
    for (id, text) in extra {
        let _ = write!(h, r##" · <a href="#{id}">{text}</a>"##);
    }
    h.push_str(r##" · <a href="#flamegraphs">flamegraphs</a></nav>"##);
}

fn pct_gain(x: f64) -> String {
    if x.is_infinite() {
        "∞".into()
    } else {
        format!("{x:+.1}%")
    }
}

/// µs as `12.3 µs`, or `4.56 ms` from 1,000 µs on.
fn duration_us(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1e3)
    } else {
        format!("{us:.1} µs")
    }
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or("–".into(), |v| format!("{v:.digits$}"))
}

/// A frame path in `<code>`: its short form, the full path as the tooltip.
pub(super) fn frame_code(path: &str) -> String {
    let short = super::names::shorten(path);
    if short == path {
        format!("<code>{}</code>", escape(path))
    } else {
        format!(r#"<code title="{}">{}</code>"#, escape(path), escape(&short))
    }
}

/// Inline text with `code` spans: the ranking's evidence and titles quote names in backticks
/// (its Markdown form); here they become `<code>` elements, so no backtick reaches the page.
pub(super) fn inline(text: &str) -> String {
    let mut out = String::new();
    for (i, part) in text.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{}</code>", escape(part));
        } else {
            out.push_str(&escape(part));
        }
    }
    out
}

fn confidence(c: crate::attribute::Confidence) -> (&'static str, &'static str) {
    match c {
        crate::attribute::Confidence::High => ("high", "conf-high"),
        crate::attribute::Confidence::Medium => ("medium", "conf-medium"),
        crate::attribute::Confidence::Low => ("low", "conf-low"),
    }
}

/// What one finding's row opens to: evidence, counts, where, roles, advice, gain, frames.
fn finding_details(f: &Finding, gain: Option<&crate::attribute::ranking::Gain>) -> String {
    let mut d = String::from(r#"<div class="evidence">"#);
    if !f.evidence.is_empty() {
        d.push_str("<ul>");
        for e in &f.evidence {
            let _ = write!(d, "<li>{}</li>", inline(e));
        }
        d.push_str("</ul>");
    }
    d.push_str("<dl>");
    if let Some(o) = &f.owner {
        let _ = write!(d, "<dt>where</dt><dd>{}</dd>", frame_code(o));
    }
    if !f.counts_per_request.is_empty() {
        let counts: Vec<String> = f.counts_per_request.iter().map(|(k, v)| format!("{} {v:.2}", escape(k))).collect();
        let _ = write!(d, "<dt>counts per request</dt><dd>{}</dd>", counts.join(", "));
    }
    if let Some(b) = f.worker_blocked_us_per_request {
        let _ = write!(d, "<dt>worker blocked</dt><dd>{b:.1} µs per request</dd>");
    }
    let payers = f.payers();
    if !payers.is_empty() {
        let rows: Vec<String> = payers
            .iter()
            .map(|p| {
                let per = p.per_request.map_or(String::new(), |x| format!(", {x:.2} per request"));
                let label = if p.endpoint { format!("<code>{}</code>", escape(&p.label)) } else { escape(&p.label) };
                format!("{label} {:.0}% ({} {}{per})", p.share * 100.0, p.count, f.endpoints_measure.unit())
            })
            .collect();
        let _ = write!(d, "<dt>paid by</dt><dd>{}</dd>", rows.join(", "));
    }
    if !f.samples_by_role.is_empty() {
        let roles: Vec<String> = f.samples_by_role.iter().map(|(r, n)| format!("{n} on {}", escape(r))).collect();
        let _ = write!(d, "<dt>samples by thread role</dt><dd>{}</dd>", roles.join(", "));
    }
    if !f.advice.is_empty() {
        let _ = write!(d, "<dt>what to do</dt><dd>{}</dd>", inline(&f.advice));
    }
    if let Some(g) = gain {
        let _ = write!(
            d,
            "<dt>predicted gain</dt><dd>{} ({}){}</dd>",
            escape(&g.formula),
            escape(&g.resource),
            g.predicted_req_per_s.map_or(String::new(), |x| format!(" → {} req/s", fmt_int(x)))
        );
    }
    d.push_str("</dl>");
    if !f.frames.is_empty() {
        d.push_str(r#"<table class="frames"><thead><tr><th>samples</th><th>frame</th></tr></thead><tbody>"#);
        for fr in &f.frames {
            let _ = write!(d, "<tr><td>{}</td><td>{}</td></tr>", fr.samples, frame_code(&fr.frame));
        }
        d.push_str("</tbody></table>");
    }
    d.push_str("</div>");
    d
}

fn finding_row(h: &mut String, c: &RankedFinding) {
    let f = &c.finding;
    let (conf, conf_class) = confidence(f.confidence);
    let _ = write!(
        h,
        r#"<tr class="finding"><td class="rank">{}</td><td class="cost"><details><summary><code class="id">{}</code> {}</summary>{}</details></td><td class="{conf_class}">{conf}</td><td>{:.1}% <span class="se">± {:.1}</span></td><td>{}</td><td>{}</td><td class="gain">{}</td></tr>"#,
        c.rank,
        escape(&f.id),
        inline(&f.title),
        finding_details(f, Some(&c.gain)),
        f.cpu_share * 100.0,
        f.cpu_share_se * 100.0,
        opt(f.cpu_us_per_request, 1),
        opt(f.round_trips_per_request, 2),
        pct_gain(c.gain.gain_pct),
    );
}

/// The first section: every run's named costs in one table, a header row per run.
fn findings_section(h: &mut String, runs: &[RunView]) {
    h.push_str(r#"<section id="findings"><h2>What to fix: named costs</h2><p class="note">Biggest predicted throughput gain first, per run. Open a row for its evidence, the code that pays it, its thread roles and frames. CPU share is of the app's on-CPU samples (the agent's own left out), with its standard error; µs are the CPU sampled in the cost's own frames per HTTP request (a cost named from the wire alone has none: its gain counts its round trips, see its formula).</p>"#);
    h.push_str(r#"<table class="findings"><thead><tr><th>#</th><th>cost</th><th>confidence</th><th>CPU share</th><th>CPU µs/req</th><th title="database round trips per request of the whole load that the remedy takes away (wire); an N+1 keeps one execution per request">extra DB trips/req</th><th>predicted gain</th></tr></thead>"#);
    let mut not_evaluated: Vec<(String, String, String)> = Vec::new();
    for run in runs {
        h.push_str("<tbody>");
        let what = if run.request.is_empty() { escape(&run.label) } else { format!("{} <span class=\"req\">{}</span>", escape(&run.label), escape(&run.request)) };
        match &run.ranking {
            Ok(r) => {
                let _ = write!(
                    h,
                    r#"<tr class="run"><th colspan="7">{what} <span class="runinfo">· {} requests{} · {} µs of sampled CPU per request · bound: {}</span></th></tr>"#,
                    r.requests.map_or("unknown".into(), |n| fmt_int(n as f64)),
                    r.requests_source.as_deref().map_or(String::new(), |s| format!(" (from {})", escape(s))),
                    opt(r.cpu_us_per_request, 1),
                    escape(&r.bound_text())
                );
                if r.costs.is_empty() {
                    let _ = write!(h, r#"<tr class="none"><td colspan="7">{}</td></tr>"#, inline(&super::no_named_cost(r)));
                }
                for c in &r.costs {
                    finding_row(h, c);
                }
                for n in &r.not_evaluated {
                    not_evaluated.push((run.label.clone(), n.id.clone(), n.reason.clone()));
                }
            }
            Err(e) => {
                let _ = write!(h, r#"<tr class="run"><th colspan="7">{what}</th></tr><tr class="none"><td colspan="7" class="warn">No ranking: {}</td></tr>"#, escape(e));
            }
        }
        h.push_str("</tbody>");
    }
    h.push_str("</table>");
    if !not_evaluated.is_empty() {
        let _ = write!(h, "<details class=\"not-evaluated\"><summary>{} fingerprints not evaluated</summary><ul>", not_evaluated.len());
        for (run, id, reason) in &not_evaluated {
            let _ = write!(h, "<li>{}: <code>{}</code>: {}</li>", escape(run), escape(id), inline(reason));
        }
        h.push_str("</ul></details>");
    }
    h.push_str("</section>");
}

/// Per run: HTTP endpoints and the database work per request, from the wire capture.
fn endpoints_section(h: &mut String, runs: &[RunView]) {
    h.push_str(r#"<section id="endpoints"><h2>Endpoints and database work per request</h2><p class="note">From the wire capture: HTTP request and status lines, PostgreSQL messages. Latency is the mean time from a request line to its response, as the app's socket saw it.</p>"#);
    for run in runs {
        let _ = write!(h, "<h3>{}</h3>", escape(&run.label));
        let Some(w) = &run.wire else {
            h.push_str("<p>No wire capture in this run (<code>--no-wire</code>, or the capture saw no traffic).</p>");
            continue;
        };
        if w.http.endpoints.is_empty() {
            h.push_str("<p>The capture decoded no HTTP request.</p>");
        } else {
            // The latency split of the ranking (endpoints joined to samples), when it has one.
            let split: &[crate::attribute::endpoints::EndpointBreakdown] = run.ranking.as_ref().map_or(&[], |r| r.endpoints.as_slice());
            h.push_str(r#"<table class="endpoints"><thead><tr><th>endpoint</th><th>requests</th><th>statuses</th><th>mean latency ms</th>"#);
            if !split.is_empty() {
                h.push_str(r#"<th>on-CPU ms/req</th><th>DB round trips/req</th><th>DB ms/req</th><th>DB connect ms/req</th><th>rest ms/req</th>"#);
            }
            h.push_str("</tr></thead><tbody>");
            for e in w.http.endpoints.iter().take(20) {
                let statuses: Vec<String> = e.statuses.iter().map(|(s, n)| format!("{s} × {}", fmt_int(*n as f64))).collect();
                let _ = write!(
                    h,
                    "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{:.2}</td>",
                    escape(&e.endpoint),
                    fmt_int(e.requests as f64),
                    statuses.join(", "),
                    e.latency_mean_ns as f64 / 1e6
                );
                if !split.is_empty() {
                    match split.iter().find(|b| b.endpoint == e.endpoint) {
                        Some(b) => {
                            let _ = write!(
                                h,
                                "<td>{}</td><td>{:.2}{}</td><td>{:.2}</td><td>{:.2}</td><td>{}</td>",
                                opt(b.cpu_us_per_request.map(|u| u / 1e3), 2),
                                b.db_round_trips_per_request,
                                if b.db_round_trips_split_share > 0.0 { format!(" ({:.0}% split)", 100.0 * b.db_round_trips_split_share) } else { String::new() },
                                b.db_us_per_request / 1e3,
                                b.connect_us_per_request / 1e3,
                                opt(b.rest_us_per_request.map(|u| u / 1e3), 2)
                            );
                        }
                        None => h.push_str("<td>–</td><td>–</td><td>–</td><td>–</td><td>–</td>"),
                    }
                }
                h.push_str("</tr>");
            }
            h.push_str("</tbody></table>");
            if !split.is_empty() {
                h.push_str(r#"<p class="note">Each request's time split: on-CPU time of the threads serving the endpoint (its samples × the sampling period), its PostgreSQL round trips (on the connections its requests held), and the rest: waits the agent does not name (a pool's acquire, a lock, a timer, queueing for a worker, off-CPU time).</p>"#);
            }
            if w.http.endpoints.len() > 20 {
                let _ = write!(h, "<p class=\"note\">{} more endpoints in wire.json.</p>", w.http.endpoints.len() - 20);
            }
        }
        let db = run.ranking.as_ref().ok().and_then(|r| r.db_per_request.clone());
        let (per, window) = match (&db, w.per_request(w.http.requests)) {
            (Some(d), _) => (
                Some(d.per_request.clone()),
                match d.window_ns {
                    Some((a, b)) => format!("the steady window {:.1}-{:.1} s after the capture's first event (no connection set-up or statement preparation in it)", a as f64 / 1e9, b as f64 / 1e9),
                    None => "the whole capture".to_string(),
                },
            ),
            (None, p) => (p, "the whole capture".to_string()),
        };
        let Some(p) = per.filter(|_| w.pg.round_trips > 0) else {
            h.push_str("<p>No PostgreSQL round trip was captured.</p>");
            continue;
        };
        let kinds = db.as_ref().map(|d| {
            let k: Vec<String> = d.round_trips_by_kind.iter().filter(|k| k.1 > 0.0).map(|(k, v)| format!("{v:.2} {}", escape(k))).collect();
            format!(" ({})", k.join(", "))
        });
        let _ = write!(
            h,
            r#"<p class="dbline"><strong>{:.2}</strong> database round trips per request{}, {:.2} pings, {:.2} transactions, {:.2} statement executions, {} of round-trip time; over {} HTTP requests in {window}.</p>"#,
            p.round_trips,
            kinds.unwrap_or_default(),
            p.pings,
            p.transactions,
            p.statement_executions,
            duration_us(p.db_latency_ns / 1e3),
            fmt_int(p.requests as f64),
        );
        if w.http.endpoints.len() > 1 {
            h.push_str(r#"<p class="note">Statements are counted over the requests of all endpoints: the capture does not tie a statement shape to the request that ran it yet (the round trips per endpoint above are).</p>"#);
        }
        h.push_str(r#"<table class="statements"><thead><tr><th>statement shape</th><th>executions/req</th><th>round trips/req</th></tr></thead><tbody>"#);
        for st in p.statements.iter().take(12) {
            let _ = write!(h, "<tr><td><code>{}</code></td><td>{:.2}</td><td>{:.2}</td></tr>", escape(&st.shape.to_string()), st.executions, st.round_trips);
        }
        h.push_str("</tbody></table>");
        if p.statements.len() > 12 {
            let _ = write!(h, "<p class=\"note\">{} more statement shapes in wire.json.</p>", p.statements.len() - 12);
        }
        if let Some(note) = super::unnamed_statements_note(&p) {
            let _ = write!(h, "<p class=\"note\">{}</p>", inline(&note));
        }
    }
    h.push_str("</section>");
}

/// Most layers listed in the layer table; the others are summed in one line.
pub const MAX_LAYER_ROWS: usize = 24;

fn swatch(category: &str) -> String {
    format!(r#"<span class="sw" style="background:{}"></span>"#, category_colour(category))
}

/// The layer table: self time per layer, one column per run; then the generic findings.
fn layers_section(h: &mut String, runs: &[RunView]) {
    h.push_str(r#"<section id="layers"><h2>Where the CPU goes: self time per layer</h2><p class="note">Each on-CPU sample counts to the layer of its innermost frame that a rule claims, else to that frame's crate. Share of all on-CPU samples ± its standard error, and sampled CPU µs per request. The colours are the flamegraphs'.</p>"#);
    let rankings: Vec<(&str, &Ranking)> = runs.iter().filter_map(|r| r.ranking.as_ref().ok().map(|k| (r.label.as_str(), k))).collect();
    if rankings.is_empty() {
        h.push_str("<p>No ranking, so no layer table.</p></section>");
        return;
    }
    // Layers by their largest self share in any run.
    let mut order: Vec<(String, String, f64)> = Vec::new();
    for (_, r) in &rankings {
        for l in &r.layers {
            match order.iter_mut().find(|o| o.0 == l.layer) {
                Some(o) => o.2 = o.2.max(l.self_share),
                None => order.push((l.layer.clone(), l.category.clone(), l.self_share)),
            }
        }
    }
    order.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
    h.push_str(r#"<table class="layers"><thead><tr><th>layer</th><th>category</th>"#);
    for (label, _) in &rankings {
        let _ = write!(h, "<th>{}</th>", escape(label));
    }
    h.push_str("</tr></thead><tbody>");
    for (name, category, _) in order.iter().take(MAX_LAYER_ROWS) {
        let _ = write!(h, "<tr><td>{}{}</td><td>{}</td>", swatch(category), escape(name), escape(category));
        for (_, r) in &rankings {
            match r.layers.iter().find(|l| &l.layer == name) {
                Some(l) if l.self_samples > 0 => {
                    let _ = write!(
                        h,
                        r#"<td>{:.1}% <span class="se">± {:.1}</span>{}</td>"#,
                        l.self_share * 100.0,
                        l.self_share_se * 100.0,
                        l.self_us_per_request.map_or(String::new(), |u| format!(r#"<br><span class="us">{u:.1} µs/req</span>"#))
                    );
                }
                _ => h.push_str("<td>–</td>"),
            }
        }
        h.push_str("</tr>");
    }
    h.push_str("</tbody></table>");
    if order.len() > MAX_LAYER_ROWS {
        let _ = write!(h, "<p class=\"note\">{} smaller layers are in each run's ranking.json.</p>", order.len() - MAX_LAYER_ROWS);
    }
    for (label, r) in &rankings {
        if r.generic.is_empty() {
            continue;
        }
        let _ = write!(h, "<details class=\"generic\"><summary>{}: {} generic findings (hottest code, functions outside known layers, allocation, truncated stacks)</summary>", escape(label), r.generic.len());
        for g in &r.generic {
            let _ = write!(
                h,
                "<details class=\"finding-generic\"><summary>{} <span class=\"runinfo\">· {} samples, {:.1}% ± {:.1}, {} µs/req</span></summary>{}</details>",
                inline(&g.title),
                g.samples,
                g.cpu_share * 100.0,
                g.cpu_share_se * 100.0,
                opt(g.cpu_us_per_request, 1),
                finding_details(g, None)
            );
        }
        h.push_str("</details>");
    }
    h.push_str("</section>");
}

/// The legend of the flamegraphs' colours: the categories of the runs' layers, the kernel,
/// the standard library and libc, and the pseudo-frames.
fn legend(runs: &[RunView]) -> String {
    let mut cats: Vec<String> = vec![HELPER_CATEGORY.into(), OTHER_CATEGORY.into(), "kernel".into()];
    for r in runs.iter().filter_map(|r| r.ranking.as_ref().ok()) {
        for l in &r.layers {
            if !cats.contains(&l.category) && l.category != "unknown" {
                cats.push(l.category.clone());
            }
        }
    }
    let rank = |c: &str| CATEGORY_COLOURS.iter().position(|(k, _)| *k == c).unwrap_or(usize::MAX);
    cats.sort_by(|a, b| rank(a).cmp(&rank(b)).then(a.cmp(b)));
    let mut s = String::from(r#"<p class="legend">"#);
    for c in &cats {
        let _ = write!(s, r#"<span class="key">{}{}</span>"#, swatch(c), escape(c));
    }
    s.push_str("</p>");
    s
}

/// The flamegraphs of every run: on-CPU above off-CPU, the legend of their colours first.
fn flamegraphs_section(h: &mut String, runs: &[RunView], out_dir: &Path) {
    h.push_str(r#"<section id="flamegraphs"><h2>Flamegraphs</h2><p class="note">On-CPU samples, then off-CPU time (µs switched out). Frames show short Rust names (generics folded to <code>&lt;…&gt;</code>); hover a frame for its full name and count, click to zoom, Search (top right of each graph, or Ctrl-F) matches full names. Colour: the frame's layer category.</p>"#);
    h.push_str(&legend(runs));
    for run in runs {
        let label = escape(&run.label);
        let _ = write!(h, r#"<h3 id="fg-{label}">{label} <span class="req">{}</span></h3>"#, escape(&run.request));
        for (file, kind, class) in [("flamegraph.svg", "on-CPU", "on-cpu"), ("offcpu.svg", "off-CPU", "off-cpu")] {
            let rel = run.file(file);
            let height = svg_height(&out_dir.join(&rel)).unwrap_or(560);
            let _ = write!(
                h,
                r#"<object class="flamegraph {class}" type="image/svg+xml" data="{r}" style="height:{height}px" aria-label="{kind} flamegraph of {label}"></object>"#,
                r = escape(&rel)
            );
        }
        let links: Vec<String> = ["flamegraph.svg", "offcpu.svg", "stacks.folded", "offcpu.folded", "profile.pb.gz", "profile.json", "ranking.md", "ranking.json"]
            .iter()
            .map(|f| format!(r#"<a href="{0}">{1}</a>"#, escape(&run.file(f)), f))
            .collect();
        let _ = write!(h, r#"<p class="links">{}</p>"#, links.join(" · "));
    }
    h.push_str("</section>");
}

/// The page of one `profiler attach` run: `profile` and its `ranking`, with the flamegraphs
/// and other files beside the page in `out_dir`.
pub fn attach_page(profile: &Profile, ranking: &Ranking, out_dir: &Path) -> String {
    let run = RunView { label: profile.meta.target.clone(), request: String::new(), dir: String::new(), ranking: Ok(ranking.clone()), wire: profile.wire.clone() };
    let runs = [run];
    let m = &profile.meta;
    let mut h = String::new();
    page_start(&mut h, &format!("profile of {} — {}", m.target, m.started_at));
    let samples: u64 = profile.on_cpu.iter().map(|c| c.count).sum();
    let waits: u64 = profile.off_cpu.iter().map(|c| c.count).sum();
    let _ = write!(
        h,
        r#"<header><h1>Profile of {}</h1><p class="sub">{:.1} s from {} at {} Hz on {} CPUs · {} on-CPU samples · {} off-CPU waits · kernel {} · agent {}</p></header>"#,
        escape(&m.target),
        m.duration_ns as f64 / 1e9,
        escape(&m.started_at),
        m.frequency_hz,
        m.cpus,
        fmt_int(samples as f64),
        fmt_int(waits as f64),
        escape(&m.kernel),
        escape(&m.agent_version)
    );
    if let Some(p) = &m.partial {
        let _ = write!(h, r#"<p class="warn"><strong>Partial profile:</strong> {}</p>"#, escape(p));
    }
    nav(&mut h, &[]);
    findings_section(&mut h, &runs);
    endpoints_section(&mut h, &runs);
    layers_section(&mut h, &runs);
    flamegraphs_section(&mut h, &runs, out_dir);
    h.push_str(r#"<section><h2>Files</h2><p>The profile itself: <a href="profile.json">profile.json</a> (re-render it with <code>profiler report</code>); syscalls: <a href="syscalls.json">syscalls.json</a>; wire: <a href="wire.json">wire.json</a>.</p></section>"#);
    h.push_str("</main></body></html>\n");
    h
}

/// One bar of a horizontal bar chart.
struct Bar {
    label: String,
    value: f64,
    text: String,
    class: &'static str,
}

/// A horizontal bar chart as inline SVG. `log` draws a log10 scale (values must be > 0).
fn bar_chart(id: &str, title: &str, bars: &[Bar], log: bool) -> String {
    let row_h = 26.0;
    let label_w = 150.0;
    let width = 760.0;
    let plot_w = width - label_w - 110.0;
    let height = row_h * bars.len() as f64 + 30.0;
    let max = bars.iter().map(|b| b.value).fold(0.0_f64, f64::max);
    let min_pos = bars.iter().map(|b| b.value).filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min);
    let scale = |v: f64| -> f64 {
        if max <= 0.0 {
            return 0.0;
        }
        if log {
            let lo = (min_pos / 2.0).max(1e-9).log10();
            let hi = max.log10();
            if hi <= lo || v <= 0.0 {
                return 0.0;
            }
            ((v.log10() - lo) / (hi - lo)).clamp(0.0, 1.0) * plot_w
        } else {
            v / max * plot_w
        }
    };
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg id="{id}" class="chart" role="img" aria-label="{t}" viewBox="0 0 {width} {height}" width="{width}" height="{height}"><title>{t}</title>"#,
        t = escape(title)
    );
    for (i, b) in bars.iter().enumerate() {
        let y = 10.0 + i as f64 * row_h;
        let w = scale(b.value).max(if b.value > 0.0 { 1.0 } else { 0.0 });
        let _ = write!(
            s,
            r#"<text x="{lx}" y="{ty}" text-anchor="end" class="lbl">{label}</text><rect class="bar {cls}" x="{label_w}" y="{y}" width="{w:.1}" height="{bh}"><title>{label}: {text}</title></rect><text x="{tx:.1}" y="{ty}" class="val">{text}</text>"#,
            lx = label_w - 8.0,
            ty = y + row_h * 0.62,
            label = escape(&b.label),
            cls = b.class,
            bh = row_h - 8.0,
            tx = label_w + w + 6.0,
            text = escape(&b.text),
        );
    }
    s.push_str("</svg>");
    s
}

/// A whole number with thousands separators (`12,345`).
pub(super) fn fmt_int(v: f64) -> String {
    let n = v.round() as i64;
    let digits = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// The `height` attribute of the root `<svg>` element of an SVG file (px), when it can be read.
/// inferno writes it from the stack depth, so the page can show the whole flamegraph.
pub fn svg_height(path: &std::path::Path) -> Option<u32> {
    let text = std::fs::read_to_string(path).ok()?;
    let start = text.find("<svg")?;
    let tag = &text[start..start + text[start..].find('>')?];
    let value = tag.split(" height=\"").nth(1)?.split('"').next()?;
    value.trim_end_matches("px").parse::<f64>().ok().map(|h| h.ceil() as u32)
}

/// The page of a `profiler bench` run. `out_dir` is the bench output folder: each profiled
/// test's files are in its folder there (`<test>/ranking.json`, `wire.json`, the
/// flamegraphs), read by [`RunView::load`]; paths in the page are relative to it.
pub fn bench_page(r: &BenchResults, out_dir: &Path) -> String {
    let mut h = String::new();
    let title = format!("profiler bench — {} — {}", r.settings.name, r.started_at);
    page_start(&mut h, &title);
    let runs: Vec<RunView> = r
        .tests
        .iter()
        .filter_map(|t| match (&t.profiled, &t.profile_error) {
            (Some(p), _) => Some(RunView::load(t.test.name(), &t.request, &p.dir, out_dir)),
            (None, Some(e)) => Some(RunView { label: t.test.name().to_string(), request: t.request.clone(), dir: String::new(), ranking: Err(format!("the profiled run failed: {e}")), wire: None }),
            (None, None) => None,
        })
        .collect();
    let profiled: Vec<RunView> = runs.iter().filter(|v| r.tests.iter().any(|t| t.test.name() == v.label && t.profiled.is_some())).cloned().collect();
    let _ = write!(
        h,
        r#"<header><h1>CRM benchmark, profiled</h1><p class="sub">{} · costs <code>{}</code> · app on CPUs {} · wrk on CPUs {} · {} × {} s runs after {} s warm-up · {} connections</p></header>"#,
        escape(&r.started_at),
        escape(&r.settings.costs),
        escape(&r.settings.app_cpus),
        escape(&r.settings.load_cpus),
        r.settings.runs,
        r.settings.duration_s,
        r.settings.warmup_s,
        r.settings.connections
    );
    if let Some(p) = &r.partial {
        let _ = write!(h, r#"<p class="warn"><strong>Partial run:</strong> {}</p>"#, escape(p));
    }
    nav(&mut h, &[("throughput", "throughput"), ("latency", "latency"), ("cpu", "CPU"), ("settings", "settings")]);
    findings_section(&mut h, &runs);

    // Headline numbers.
    h.push_str(r#"<section class="cards">"#);
    for t in &r.tests {
        let _ = write!(
            h,
            r#"<div class="card"><div class="k">{}</div><div class="v">{}</div><div class="u">req/s · p99 {:.2} ms</div></div>"#,
            escape(t.test.name()),
            fmt_int(t.req_per_s),
            t.latency.p99_us as f64 / 1e3
        );
    }
    let _ = write!(
        h,
        r#"<div class="card"><div class="k">time to ready</div><div class="v">{:.1}</div><div class="u">ms · idle {:.1} MB</div></div><div class="card"><div class="k">conformance</div><div class="v">{}/{}</div><div class="u">checks passed</div></div></section>"#,
        r.time_to_ready_ms,
        r.idle_rss_bytes as f64 / 1e6,
        r.conformance.passed,
        r.conformance.passed + r.conformance.failed
    );
    let failed = r.failed_requests();
    if failed > 0 {
        let _ = write!(h, r#"<p class="warn">{failed} requests failed (socket errors or non-2xx): see the table.</p>"#);
    }

    endpoints_section(&mut h, &profiled);
    layers_section(&mut h, &profiled);

    // Throughput.
    h.push_str("<section><h2>Throughput</h2><p>Median of the measured runs, requests per second. Higher is better. The profiled run (agent attached) is shown apart.</p>");
    let mut bars = Vec::new();
    for t in &r.tests {
        bars.push(Bar { label: t.test.name().into(), value: t.req_per_s, text: format!("{} req/s", fmt_int(t.req_per_s)), class: "rps" });
        if let Some(p) = &t.profiled {
            bars.push(Bar {
                label: format!("{} (profiled)", t.test.name()),
                value: p.run.wrk.req_per_s,
                text: format!("{} req/s ({:.1}%)", fmt_int(p.run.wrk.req_per_s), p.throughput_ratio * 100.0),
                class: "prof",
            });
        }
    }
    h.push_str(&bar_chart("throughput", "Requests per second", &bars, false));
    h.push_str("</section>");

    // Latency.
    h.push_str("<section><h2>Latency</h2><p>p50 and p99 of the median run, milliseconds, log scale. Lower is better.</p>");
    let mut bars = Vec::new();
    for t in &r.tests {
        bars.push(Bar { label: format!("{} p50", t.test.name()), value: t.latency.p50_us as f64 / 1e3, text: format!("{:.2} ms", t.latency.p50_us as f64 / 1e3), class: "p50" });
        bars.push(Bar { label: format!("{} p99", t.test.name()), value: t.latency.p99_us as f64 / 1e3, text: format!("{:.2} ms", t.latency.p99_us as f64 / 1e3), class: "p99" });
    }
    h.push_str(&bar_chart("latency", "Latency p50 and p99, ms", &bars, true));
    h.push_str("<table><thead><tr><th>test</th><th>p50</th><th>p75</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th><th>failed</th></tr></thead><tbody>");
    for t in &r.tests {
        let l = &t.latency;
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{}</td></tr>",
            escape(t.test.name()),
            l.p50_us as f64 / 1e3,
            l.p75_us as f64 / 1e3,
            l.p90_us as f64 / 1e3,
            l.p99_us as f64 / 1e3,
            l.p999_us as f64 / 1e3,
            l.max_us as f64 / 1e3,
            t.failed_requests
        );
    }
    h.push_str("</tbody></table><p class=\"note\">Milliseconds, from the median run of each test.</p></section>");

    // CPU.
    h.push_str("<section><h2>App and PostgreSQL CPU</h2><p>Mean CPU use during the median run, in CPUs, for the app and PostgreSQL.</p>");
    let mut bars = Vec::new();
    for t in &r.tests {
        let m = t.median();
        bars.push(Bar { label: format!("{} app", t.test.name()), value: m.app.cpu, text: format!("{:.2} CPUs", m.app.cpu), class: "app" });
        if let Some(pg) = m.postgres {
            bars.push(Bar { label: format!("{} PostgreSQL", t.test.name()), value: pg.cpu, text: format!("{:.2} CPUs", pg.cpu), class: "pg" });
        }
    }
    h.push_str(&bar_chart("cpu", "CPU per process, CPUs", &bars, false));
    h.push_str("<table><thead><tr><th>test</th><th>runs (req/s)</th><th>app peak memory</th></tr></thead><tbody>");
    for t in &r.tests {
        let runs: Vec<String> = t.runs.iter().map(|x| fmt_int(x.wrk.req_per_s)).collect();
        let _ = write!(h, "<tr><td>{}</td><td>{}</td><td>{:.1} MB</td></tr>", escape(t.test.name()), runs.join(", "), t.app_peak_rss_bytes as f64 / 1e6);
    }
    h.push_str("</tbody></table></section>");

    flamegraphs_section(&mut h, &profiled, out_dir);
    for t in &r.tests {
        if let Some(p) = &t.profiled {
            let _ = write!(h, r#"<details class="summary"><summary>{}: attach summary ({} samples)</summary><pre>{}</pre></details>"#, escape(t.test.name()), p.samples, escape(&p.summary));
        }
    }

    // Settings.
    let settings = serde_json::to_string_pretty(&r.settings).unwrap_or_default();
    let versions = serde_json::to_string_pretty(&r.versions).unwrap_or_default();
    let _ = write!(
        h,
        r#"<section id="settings"><h2>Method and settings</h2><p>{} CPUs ({}). Fresh seeded database, conformance gate before any measurement, warm-up, then measured runs; the median run is reported. Raw data: <a href="results.json">results.json</a>.</p><pre>{}</pre><pre>{}</pre></section>"#,
        r.cpus,
        escape(&r.cpu_model),
        escape(&settings),
        escape(&versions)
    );
    if let Some(d) = &r.drift {
        let _ = write!(
            h,
            "<p>Drift check: {} re-measured at the end at {} req/s against {} first ({:+.1}%).</p>",
            escape(d.test.name()),
            fmt_int(d.repeat_req_per_s),
            fmt_int(d.first_req_per_s),
            d.change_pct
        );
    }
    h.push_str("</main></body></html>\n");
    h
}

const CSS: &str = "body{font:15px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;background:#fafafa;color:#1d1d1f}\
main{max-width:1100px;margin:0 auto;padding:24px}h1{margin:0 0 4px;font-size:28px}h2{margin-top:36px;border-bottom:1px solid #ddd;padding-bottom:4px}\
.sub{color:#555;margin:0}.cards{display:flex;flex-wrap:wrap;gap:12px;margin:20px 0}.card{background:#fff;border:1px solid #e3e3e3;border-radius:8px;padding:12px 16px;min-width:140px}\
.card .k{color:#666;font-size:13px}.card .v{font-size:26px;font-weight:600}.card .u{color:#666;font-size:12px}\
.chart{max-width:100%;height:auto;background:#fff;border:1px solid #e3e3e3;border-radius:8px}.lbl{font-size:12px;fill:#333}.val{font-size:12px;fill:#333}\
.bar.rps{fill:#3b82f6}.bar.prof{fill:#93c5fd}.bar.p50{fill:#10b981}.bar.p99{fill:#f59e0b}.bar.app{fill:#8b5cf6}.bar.pg{fill:#64748b}\
table{border-collapse:collapse;margin:12px 0;background:#fff}td,th{border:1px solid #e3e3e3;padding:4px 10px;text-align:right}td:first-child,th:first-child{text-align:left}\
.flamegraph{width:100%;height:560px;border:1px solid #e3e3e3;border-radius:8px;background:#fff}.req{font-weight:400;color:#666;font-size:14px}\
pre{background:#fff;border:1px solid #e3e3e3;border-radius:8px;padding:10px;overflow:auto;font-size:12px}.warn{color:#b45309;font-weight:600}.note{color:#666;font-size:13px}\
nav{margin:8px 0 0;font-size:14px}nav a{color:#2563eb;text-decoration:none}code{font:12.5px ui-monospace,SFMono-Regular,Menlo,monospace;background:#f1f1f1;border-radius:3px;padding:0 3px}\
table.findings{width:100%}table.findings td,table.findings th{vertical-align:top}table.findings td.cost{text-align:left}table.findings thead th{white-space:nowrap}\
table.findings th:nth-child(2),table.findings th:nth-child(3),table.findings td:nth-child(3){text-align:left}table.findings tr.run th{text-align:left;background:#f3f4f6;font-weight:600}.runinfo{font-weight:400;color:#555;font-size:13px}\
table.findings td.gain{font-weight:700}td.rank{text-align:right}.conf-high{color:#166534}.conf-medium{color:#92400e}.conf-low{color:#6b7280}\
summary{cursor:pointer}.evidence{margin:6px 0 4px;font-size:13px}.evidence ul{margin:4px 0;padding-left:18px}.evidence dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 10px;margin:6px 0}\
.evidence dt{color:#555}.evidence dd{margin:0}table.frames{margin:4px 0;font-size:12px}table.frames td:last-child{text-align:left}.se{color:#777;font-size:12px}.us{color:#555;font-size:12px}\
table.endpoints td:first-child,table.statements td:first-child,table.layers td:first-child{text-align:left}table.layers td:nth-child(2){text-align:left;color:#555}\
.sw{display:inline-block;width:11px;height:11px;border:1px solid #999;border-radius:2px;margin-right:6px;vertical-align:-1px}.legend .key{margin-right:14px;white-space:nowrap;font-size:13px}\
.flamegraph.off-cpu{margin-top:10px}.verdict{font-size:18px;padding:10px 14px;border-radius:8px;background:#f3f4f6;margin:16px 0}\
.verdict.worse{background:#fee2e2}.verdict.better{background:#dcfce7}td.worse{color:#b91c1c;font-weight:600}td.better{color:#166534;font-weight:600}td.changed{font-weight:600}\
table.rows td:first-child{text-align:left}table.rows td:last-child,table.rows th:last-child{text-align:left}.flamegraph.diff-base{margin-top:10px}details.generic,details.not-evaluated,details.summary{margin:8px 0}details.finding-generic{margin:4px 0 4px 16px}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(escape(r#"<a href="x">&'"#), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
    }

    #[test]
    fn backticks_become_code_and_markup_is_escaped() {
        assert_eq!(inline("the pool's `acquire` <fast>"), "the pool&#39;s <code>acquire</code> &lt;fast&gt;");
        assert_eq!(inline("`a` and `b`"), "<code>a</code> and <code>b</code>");
        assert_eq!(duration_us(999.94), "999.9 µs");
        assert_eq!(duration_us(27003.4), "27.00 ms");
        assert_eq!(pct_gain(f64::INFINITY), "∞");
        assert_eq!(pct_gain(20.324), "+20.3%");
    }

    #[test]
    fn a_run_without_a_readable_ranking_says_why_in_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let v = RunView::load("json", "GET /json", "json", dir.path());
        let e = v.ranking.unwrap_err();
        assert!(e.starts_with(&format!("cannot read {}: ", dir.path().join("json/ranking.json").display())), "{e}");
        assert!(v.wire.is_none());
        std::fs::create_dir(dir.path().join("json")).unwrap();
        std::fs::write(dir.path().join("json/ranking.json"), "{\"schema_version\": 1}").unwrap();
        let e = RunView::load("json", "GET /json", "json", dir.path()).ranking.unwrap_err();
        assert!(e.contains("json/ranking.json: not a ranking: missing field"), "{e}");
        assert!(!e.contains('\n'));
        let mut page = String::new();
        findings_section(&mut page, &[RunView::load("json", "GET /json", "json", dir.path())]);
        assert!(page.contains(r#"<td colspan="7" class="warn">No ranking: "#), "{page}");
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(fmt_int(1234567.4), "1,234,567");
        assert_eq!(fmt_int(999.0), "999");
        assert_eq!(fmt_int(0.0), "0");
    }

    #[test]
    fn log_chart_places_bars_in_order() {
        let bars = [
            Bar { label: "a".into(), value: 1.0, text: "1".into(), class: "p50" },
            Bar { label: "b".into(), value: 100.0, text: "100".into(), class: "p99" },
        ];
        let svg = bar_chart("c", "t", &bars, true);
        // The largest value spans the whole plot width (760 - 150 - 110 = 500 px).
        assert!(svg.contains(r#"width="500.0""#), "{svg}");
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
    }

    #[test]
    fn reads_the_height_of_an_svg() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.svg");
        std::fs::write(&p, r#"<?xml version="1.0"?><svg version="1.1" width="1200" height="646" onload="init(evt)"><g/></svg>"#).unwrap();
        assert_eq!(svg_height(&p), Some(646));
        assert_eq!(svg_height(&dir.path().join("missing.svg")), None);
    }
}
