//! The report page (`index.html`) in a real browser: rendered from a recorded profile of
//! target-app under `/db` load with the wire capture (agent/tests/data/attribute/recorded/
//! all-wire-db.profile.json.gz, ranked as `profiler attach` ranks), loaded in headless
//! Chromium, and its DOM checked: the findings table, the endpoint and layer tables, no raw
//! Markdown, no request to another host; then the on-CPU flamegraph alone, whose search
//! must match full names and whose frames must be drawn with short names. No root needed.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use profiler::attribute::{Bound, RankingOptions, RuleSet};
use profiler::render::ranking::write_ranking;
use profiler::profile::Profile;

fn load(name: &str) -> Profile {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../agent/tests/data/attribute/recorded").join(format!("{name}.profile.json.gz"));
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap()).read_to_end(&mut bytes).unwrap();
    profiler::profile::json::from_slice(&bytes, &path).unwrap()
}

fn chromium() -> &'static str {
    ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok())
        .expect("chromium missing: scripts/setup installs the Debian package `chromium`")
}

/// The DOM headless Chromium built for `url` once its scripts ran (virtual time lets the
/// flamegraph's `setTimeout` work finish before the dump).
fn dump_dom(url: &str) -> String {
    let profile_dir = tempfile::tempdir().unwrap();
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,900",
            "--virtual-time-budget=5000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile_dir.path().display()))
        .arg(url)
        .output()
        .expect("run chromium");
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(dom.contains("</html>") || dom.contains("</svg>"), "chromium dumped no document for {url}: {}", String::from_utf8_lossy(&out.stderr));
    dom
}

/// Values of every `name="..."` attribute in `html`.
fn attribute_values<'a>(html: &'a str, name: &str) -> Vec<&'a str> {
    let key = format!(" {name}=\"");
    html.match_indices(&key).map(|(i, _)| html[i + key.len()..].split('"').next().unwrap_or("")).collect()
}

/// The texts drawn in a flamegraph's frames: `<text x=.. y=..>label</text>` (frames too
/// narrow for a label have `<text .../>`, left out).
fn drawn_texts(dom: &str) -> Vec<&str> {
    dom.match_indices("<text x=")
        .map(|(i, _)| &dom[i..])
        .filter_map(|t| {
            let end = t.find('>')?;
            (!t[..end].ends_with('/')).then(|| &t[end + 1..t.find("</text>").unwrap()])
        })
        .collect()
}

/// `html` without its `<style>` element (the CSS is not text a person reads).
fn body_text(html: &str) -> String {
    match (html.find("<style>"), html.find("</style>")) {
        (Some(a), Some(b)) => format!("{}{}", &html[..a], &html[b..]),
        _ => html.to_string(),
    }
}

fn render(dir: &Path) -> (Profile, profiler::attribute::Ranking) {
    let profile = load("all-wire-db");
    let rules = RuleSet::builtin();
    let opts = profiler::render::Options { rules: Some(&rules), ..Default::default() };
    profiler::render::write_all_with(&profile, dir, &opts).unwrap();
    // As `profiler attach` ranks: requests from the wire, bound unknown; ranking.md and
    // ranking.json beside the page.
    let ranking_opts = RankingOptions { rules: &rules, wire: None, base_req_per_s: None, label: "", closed_loop: None };
    let ranking = write_ranking(&profile, None, Bound::Unknown, &ranking_opts, dir).unwrap();
    let page = profiler::render::html::attach_page(&profile, &ranking, dir);
    std::fs::write(dir.join("index.html"), page).unwrap();
    (profile, ranking)
}

#[test]
fn the_page_shows_the_findings_first_and_loads_nothing_from_outside() {
    let dir = tempfile::tempdir().unwrap();
    let (profile, ranking) = render(dir.path());
    // REPORT_PAGE_KEEP=FOLDER keeps a copy of the rendered page and its files, to look at.
    if let Ok(keep) = std::env::var("REPORT_PAGE_KEEP") {
        std::fs::create_dir_all(&keep).unwrap();
        for e in std::fs::read_dir(dir.path()).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), Path::new(&keep).join(e.file_name())).unwrap();
        }
    }
    let wire = profile.wire.as_ref().unwrap();
    // What this recorded run holds (attribute_recorded checks the ranking itself): every
    // request of the capture is `GET /db`, and pool-ping fires with 2 pings per request.
    assert_eq!(wire.http.endpoints.len(), 1);
    assert_eq!(wire.http.endpoints[0].endpoint, "GET /db");
    assert!(ranking.costs.iter().any(|c| c.finding.id == "pool-ping"));

    let dom = dump_dom(&format!("file://{}", dir.path().join("index.html").display()));
    let text = body_text(&dom);

    // The findings table comes first, one row per named cost, in rank order, each opening
    // to its evidence.
    let findings_at = dom.find(r#"<section id="findings">"#).expect("findings section");
    for later in [r#"<section id="endpoints">"#, r#"<section id="layers">"#, r#"<section id="flamegraphs">"#] {
        assert!(dom.find(later).expect(later) > findings_at, "{later} before the findings");
    }
    assert_eq!(dom.matches(r#"<tr class="finding">"#).count(), ranking.costs.len());
    let mut at = 0;
    for c in &ranking.costs {
        let row = format!(r#"<code class="id">{}</code>"#, c.finding.id);
        let i = dom[at..].find(&row).unwrap_or_else(|| panic!("no row for {} in rank order", c.finding.id)) + at;
        at = i;
    }
    let ping = &dom[dom.find(r#"<code class="id">pool-ping</code>"#).unwrap()..];
    let (details, cells) = ping.split_at(ping.find("</details></td>").unwrap());
    let cells = &cells[..cells.find("</tr>").unwrap()];
    assert!(cells.contains(r#"<td class="conf-high">high</td>"#), "{cells}");
    assert!(details.contains("<dt>counts per request</dt><dd>pings 2.00</dd>"), "{details}");
    assert!(details.contains("<dt>predicted gain</dt><dd>1/(1-"), "{details}");
    assert!(details.contains("<dt>what to do</dt><dd>turn the pool's test_before_acquire off"), "{details}");
    assert_eq!(dom.matches("<details><summary><code class=\"id\">").count(), ranking.costs.len());

    // No raw Markdown anywhere a person reads.
    for md in ["| rank |", "|---", "## ", "### ", "**", "`"] {
        assert!(!text.contains(md), "raw Markdown {md:?} on the page");
    }
    // No request leaves the page: every src, href and data is a file beside it or an anchor.
    for attr in ["src", "href", "data", "action", "poster"] {
        for v in attribute_values(&dom, attr) {
            assert!(!v.contains("://") && !v.starts_with("//"), "{attr}={v:?} points outside the page's folder");
            if attr != "href" || !v.starts_with('#') {
                assert!(dir.path().join(v).exists() || v.starts_with('#'), "{attr}={v:?} is not a file beside the page");
            }
        }
    }
    assert!(!dom.contains("<script"), "the page has a script of its own");
    assert!(!dom.contains("<link"), "the page links a resource");

    // Endpoints and database work per request, from the wire: 1 endpoint, its statements.
    let per = ranking.db_per_request.as_ref().unwrap();
    assert!(dom.contains("<tr><td><code>GET /db</code></td>"), "endpoint row");
    assert!(dom.contains(&format!("<strong>{:.2}</strong> database round trips per request", per.per_request.round_trips)));
    let first_shape = per.per_request.statements.first().unwrap();
    assert!(dom.contains(&format!("<td>{:.2}</td>", first_shape.executions)));
    // The layer table: the biggest layer by self share first, with its category swatch.
    let top = &ranking.layers[0];
    let layers = &dom[dom.find(r#"<table class="layers">"#).unwrap()..];
    let first_row = &layers[layers.find("<tbody><tr>").unwrap()..];
    assert!(first_row[..first_row.find("</tr>").unwrap()].contains(&format!("</span>{}</td><td>{}</td>", top.layer, top.category)), "{}", &first_row[..300]);
    assert!(first_row.starts_with(&format!(r#"<tbody><tr><td><span class="sw" style="background:{}">"#, profiler::render::flamegraph::category_colour(&top.category))));
    // Both flamegraphs, on-CPU first, and the legend of their colours.
    let on = dom.find(r#"data="flamegraph.svg""#).expect("on-CPU flamegraph");
    let off = dom.find(r#"data="offcpu.svg""#).expect("off-CPU flamegraph");
    assert!(on < off);
    assert!(dom.contains(r#"<span class="key"><span class="sw" style="background:#8cc084"></span>database</span>"#), "legend");
}

#[test]
fn the_flamegraph_draws_short_names_and_searches_full_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (profile, _) = render(dir.path());
    let svg_path = dir.path().join("flamegraph.svg");
    let folded = std::fs::read_to_string(dir.path().join("stacks.folded")).unwrap();
    // The folded file keeps the full names.
    assert!(folded.contains(";core::ptr::drop_in_place<sqlx_core::pool::connection::PoolConnection<sqlx_postgres::database::Postgres>>;"), "full names in stacks.folded");

    // Search for a type that only full names hold: the database generic `Postgres` inside
    // `<…>`. The expected share is worked out from the folded stacks: the samples of the
    // stacks with a frame that matches, over all samples.
    let term = "sqlx_postgres::database::Postgres";
    let (mut hit, mut all) = (0u64, 0u64);
    for line in folded.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        let n: u64 = n.parse().unwrap();
        all += n;
        if stack.contains(term) {
            hit += n;
        }
    }
    assert!(hit > 0 && hit < all, "{hit} of {all}");
    let want = format!("Matched: {:.1}%", 100.0 * hit as f64 / all as f64);
    let dom = dump_dom(&format!("file://{}?s={}", svg_path.display(), term));
    assert!(dom.contains(&want), "search did not report {want}");
    assert!(dom.contains(r#"fill="rgb(230,0,230)""#), "no frame highlighted");

    // The drawn text is the short name: no drawn frame label holds a folded generic's
    // contents, and the widest short names are drawn whole.
    let texts = drawn_texts(&dom);
    assert!(texts.len() > 100, "{} texts", texts.len());
    for t in &texts {
        assert!(!t.contains("alloc::alloc::Global") && !t.contains("::Global&gt;"), "a frame drawn with its full name: {t}");
    }
    assert!(texts.contains(&"tokio::…::worker::Context::run_task"), "a wide frame drawn by its short name");
    // Its tooltip keeps the full name.
    assert!(dom.contains("<title>tokio::runtime::scheduler::multi_thread::worker::Context::run_task ("), "full name in the title");
    let samples: u64 = profile.on_cpu.iter().map(|c| c.count).sum();
    assert_eq!(samples, all, "stacks.folded holds every sample");
}

/// `profiler diff --out` of the recorded bench pair of `data/diff` (BASE `--costs all`, HEAD
/// `all,-double-json-parse` on deals-create; see diff_golden.rs), its page in the browser.
#[test]
fn the_diff_page_shows_the_verdict_first_and_the_differential_graphs() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/tests/data/diff");
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_profiler"))
        .current_dir(&data)
        .args(["diff", "base", "head", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let dom = dump_dom(&format!("file://{}", dir.path().join("index.html").display()));
    let text = body_text(&dom);
    // The verdict, then the test's changes, then the graphs.
    let verdict = dom.find(r#"id="verdict""#).expect("verdict");
    let changes = dom.find(r#"<section id="changes">"#).expect("changes");
    let graphs = dom.find(r#"<section id="flamegraphs">"#).expect("graphs");
    assert!(verdict < changes && changes < graphs);
    // The pair's verdict (diff_golden's bench.diff.md): latency worse beyond noise, within
    // the threshold.
    assert!(dom[verdict..changes].contains("no test crossed the 5% <code>--fail-on-regression</code> threshold"), "{}", &dom[verdict..changes]);
    // The removed cost, named in the notes as gone (code, not backticks), and its row
    // (diff_golden checks its figures: 2.14 -> 0 µs per request).
    assert!(dom.contains("named in BASE only (gone in HEAD): <code>double-json-parse</code>: JSON bodies are parsed"), "the note of the gone cost");
    let cost = &dom[dom.find("<td><code>double-json-parse</code>").expect("the removed cost's row")..];
    let cost = &cost[..cost.find("</tr>").unwrap()];
    assert!(cost.contains("<td>2.14</td><td>0</td>") && cost.contains("-100.0%"), "{cost}");
    // req/s as diff.md has it: 1796 -> 1723, ±124.
    assert!(dom.contains("<td>req/s</td><td>req/s</td><td>1796</td><td>1723</td>"), "req/s row");
    for md in ["|---", "## ", "**", "`"] {
        assert!(!text.contains(md), "raw Markdown {md:?} on the page");
    }
    for attr in ["src", "href", "data"] {
        for v in attribute_values(&dom, attr) {
            assert!(!v.contains("://") && !v.starts_with("//"), "{attr}={v:?} points outside the page's folder");
            assert!(v.starts_with('#') || dir.path().join(v).exists(), "{attr}={v:?} is not a file beside the page");
        }
    }
    assert!(!dom.contains("<script"), "the page has a script of its own");
    let head = dom.find(r#"data="diff.svg""#).expect("HEAD's widths");
    let base = dom.find(r#"data="diff-base.svg""#).expect("BASE's widths");
    assert!(head < base);

    // The differential graph alone: frames drawn with short names, search on full names.
    let svg = std::fs::read_to_string(dir.path().join("diff.svg")).unwrap();
    assert!(svg.contains("data-short=\""), "no frame carries a short name");
    let term = "serde_json::de::from_trait";
    let dom = dump_dom(&format!("file://{}?s={}", dir.path().join("diff.svg").display(), term));
    assert!(dom.contains("Matched: "), "search did not match {term}");
    let drawn = drawn_texts(&dom);
    assert!(drawn.iter().any(|t| t.contains("&lt;…&gt;") || t.contains("<…>")), "no drawn frame has a folded generic");
}
