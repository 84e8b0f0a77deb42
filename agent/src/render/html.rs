//! `index.html` of a `profiler bench` run: one self-contained page (inline CSS and SVG charts,
//! no external assets) with throughput, latency and CPU per test, each test's flamegraphs
//! (the SVG files beside the page, embedded interactively with `<object>`), the ranking and
//! every setting.

use std::fmt::Write;

use bench::results::BenchResults;

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

fn fmt_int(v: f64) -> String {
    let n = v.round() as i64;
    let digits = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
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

/// Renders the page. `ranking_md` is the combined ranking (Markdown), shown as preformatted
/// text when present. `out_dir` is the bench output folder: flamegraph paths in the page are
/// relative to it, and the flamegraphs' heights are read from the files there.
pub fn bench_page(r: &BenchResults, ranking_md: Option<&str>, out_dir: &std::path::Path) -> String {
    let mut h = String::new();
    let title = format!("profiler bench — {} — {}", r.settings.name, r.started_at);
    let _ = write!(
        h,
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>{}</title><style>{CSS}</style></head><body><main>"#,
        escape(&title)
    );
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
    h.push_str("<section><h2>Where the CPU goes</h2><p>Mean CPU use during the median run, in CPUs, for the app and PostgreSQL.</p>");
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

    // Flamegraphs.
    h.push_str("<section><h2>Flamegraphs</h2><p>On-CPU stacks of the app during each test's profiled run (click a frame to zoom; Ctrl-F to search). Off-CPU and pprof files are linked.</p>");
    for t in &r.tests {
        let name = escape(t.test.name());
        let _ = write!(h, r#"<h3 id="fg-{name}">{name} <span class="req">{}</span></h3>"#, escape(&t.request));
        match (&t.profiled, &t.profile_error) {
            (Some(p), _) => {
                let height = svg_height(&out_dir.join(&p.dir).join("flamegraph.svg")).unwrap_or(560);
                let dir = escape(&p.dir);
                let _ = write!(
                    h,
                    r#"<object class="flamegraph" type="image/svg+xml" data="{dir}/flamegraph.svg" style="height:{height}px" aria-label="flamegraph of {name}"></object><p class="links"><a href="{dir}/flamegraph.svg">flamegraph.svg</a> · <a href="{dir}/offcpu.svg">offcpu.svg</a> · <a href="{dir}/stacks.folded">stacks.folded</a> · <a href="{dir}/profile.pb.gz">profile.pb.gz</a> · <a href="{dir}/profile.json">profile.json</a></p><details><summary>attach summary ({} samples)</summary><pre>{}</pre></details>"#,
                    p.samples,
                    escape(&p.summary)
                );
            }
            (None, Some(e)) => {
                let _ = write!(h, r#"<p class="warn">No profile: {}</p>"#, escape(e));
            }
            (None, None) => h.push_str("<p>Not profiled in this run.</p>"),
        }
    }
    h.push_str("</section>");

    if let Some(md) = ranking_md {
        let _ = write!(h, "<section><h2>Ranking of named costs</h2><pre class=\"ranking\">{}</pre></section>", escape(md));
    }

    // Settings.
    let settings = serde_json::to_string_pretty(&r.settings).unwrap_or_default();
    let versions = serde_json::to_string_pretty(&r.versions).unwrap_or_default();
    let _ = write!(
        h,
        r#"<section><h2>Method and settings</h2><p>{} CPUs ({}). Fresh seeded database, conformance gate before any measurement, warm-up, then measured runs; the median run is reported. Raw data: <a href="results.json">results.json</a>.</p><pre>{}</pre><pre>{}</pre></section>"#,
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
pre{background:#fff;border:1px solid #e3e3e3;border-radius:8px;padding:10px;overflow:auto;font-size:12px}.warn{color:#b45309;font-weight:600}.note{color:#666;font-size:13px}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(escape(r#"<a href="x">&'"#), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
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
