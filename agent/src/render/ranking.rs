//! `ranking.md`: the ranking of named costs of one profile ([`markdown`]) and of every
//! profiled test of a `profiler bench` run ([`bench_markdown`]), from the
//! [`crate::attribute::Ranking`]s the analysis returns.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::attribute::costs::Finding;
use crate::attribute::{Bound, Ranking, RankingOptions, RuleSet};
use crate::profile::Profile;

fn pct(x: f64) -> String {
    if x.is_infinite() {
        "∞".into()
    } else {
        format!("{:+.1}%", x)
    }
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or("–".into(), |v| format!("{v:.digits$}"))
}

/// The model, as printed at the top of every `ranking.md`.
pub const MODEL_TEXT: &str = "\
Predicted gain = the throughput the test would gain if the cost were removed, from the resource
that bounds the test:
- **app CPU** (the app's CPU set ≥ 85% busy): removing a share s of the app's CPU per request
  gives 1/(1-s) - 1 more req/s (throughput = CPUs / CPU per request; Amdahl-style share
  arithmetic). s = the cost's on-CPU samples / all samples; for a cost seen only on the wire,
  s = its extra round trips / all round trips × the share of samples under the database driver.
- **database CPU** (PostgreSQL's CPU set ≥ 85% busy): s = the cost's extra round trips / all
  round trips (each round trip assumed to cost the server alike); app-CPU costs give 0.
- **host CPUs** (`profiler attach`: the app or its database may use every CPU of the host,
  which is ≥ 85% busy although neither CPU set alone is): s = (the cost's app CPU per request + its round trips ×
  the database server's CPU per round trip + its connection set-ups × the server's CPU per
  set-up) / the CPU per request of the app, its database and its clients; the gain is capped
  by what the app's own CPU set allows without the cost's app CPU.
- **latency** (neither busy): a closed loop of N connections runs at N / L req/s (Little's law),
  so removing d µs of a request's latency L gives L/(L-d) - 1. d = the cost's sampled CPU µs per
  request + its database round-trip µs per request (wire).
- **closed loop** (used instead of the latency formula whenever the run's figures allow it): the N requests in flight queue for CPU stations (the app's CPU set, the
  database's, or the host's CPUs when they share them), each with its measured CPU per request
  as demand, and spend the rest of their cycle in a delay Z fitted so that the model gives the
  measured throughput (exact mean value analysis, Reiser & Lavenberg 1980; a station of c CPUs
  by Seidmann's approximation). Removing a cost takes its app CPU (its share of the samples ×
  the app's CPU per request), its database CPU (its round trips × the server's CPU per round
  trip) and its remaining wire time off the stations and the delay; the gain is the model's new
  throughput over the old. It counts the queueing a cost causes for the other requests, which
  the formulas above miss below saturation.
CPU per request is *sampled* CPU: samples × (1 / frequency) / requests; each share carries its
binomial standard error sqrt(p(1-p)/n).
Each gain is computed with every other cost in place: gains do not add up, and removing one cost
can change what another costs (a lock held across work may cost throughput only while something
else fills the CPUs). Profile again after each fix.";

/// "paid by ...": the rows of [`Finding::payers`] in one line; `None` when it has none.
fn paid_by(f: &Finding) -> Option<String> {
    let rows = f.payers();
    if rows.is_empty() {
        return None;
    }
    let parts: Vec<String> = rows
        .iter()
        .map(|p| {
            let per = p.per_request.map_or(String::new(), |x| format!("; {x:.2} per request"));
            format!("{} {:.0}% ({}{per})", if p.endpoint { format!("`{}`", p.label) } else { p.label.clone() }, p.share * 100.0, p.count)
        })
        .collect();
    Some(format!("paid by ({}): {}", f.endpoints_measure.describe(), parts.join(", ")))
}

/// `ranking.md` of one ranking: its run figures, the model, the named costs with their
/// evidence and predicted gains, the layer, role and endpoint tables and the database and
/// syscall figures per request.
pub fn markdown(r: &Ranking) -> String {
    let mut s = String::new();
    let title = if r.label.is_empty() { r.target.clone() } else { format!("{} ({})", r.label, r.target) };
    let _ = writeln!(s, "# Ranking of named costs: {title}\n");
    if let Some(reason) = &r.partial {
        let _ = writeln!(s, "**PARTIAL: {reason}**\n");
    }
    let _ = writeln!(
        s,
        "- requests: {}{}\n- measured throughput: {}\n- on-CPU samples: {} at {} Hz (sampled CPU {} ms; accounted CPU {} ms); {} on truncated stacks\n- sampled CPU per request: {} µs\n- bound: {}\n",
        r.requests.map_or("unknown".into(), |n| n.to_string()),
        r.requests_source.as_deref().map_or(String::new(), |s| format!(" (from {s})")),
        r.base_req_per_s.map_or("unknown".into(), |x| format!(
            "{x:.0} req/s{}",
            r.throughput_source.as_deref().filter(|s| *s != "given").map_or(String::new(), |s| format!(" ({s})"))
        )),
        r.samples,
        r.frequency_hz,
        opt(r.sampled_cpu_us.map(|u| u / 1e3), 1),
        opt(r.measured_cpu_us.map(|u| u / 1e3), 1),
        r.truncated_samples,
        opt(r.cpu_us_per_request, 2),
        r.bound_text()
    );
    if let Some(j) = &r.endpoint_join {
        let all = j.attributed + j.unattributed + j.not_recorded;
        let _ = writeln!(
            s,
            "On-CPU samples joined to the HTTP endpoint their thread was serving: {} of {all} ({:.1}%) over {} endpoints; {} on threads serving no request{}. Each finding below says which endpoints pay it.\n",
            j.attributed,
            100.0 * j.attributed as f64 / all.max(1) as f64,
            j.endpoints.len(),
            j.unattributed,
            if j.not_recorded > 0 { format!(", {} not recorded (past the timeline's cap)", j.not_recorded) } else { String::new() }
        );
    }
    let _ = writeln!(s, "## Named costs\n");
    if r.costs.is_empty() {
        let _ = writeln!(s, "{}\n", super::no_named_cost(r));
    } else {
        let _ = writeln!(s, "| rank | cost | confidence | samples | CPU share | CPU µs/req | extra round trips/req | predicted gain |");
        let _ = writeln!(s, "|---:|---|---|---:|---:|---:|---:|---:|");
        for c in &r.costs {
            let f = &c.finding;
            let _ = writeln!(
                s,
                "| {} | `{}`: {} | {:?} | {} | {:.2}% ± {:.2} | {} | {} | {} |",
                c.rank,
                f.id,
                f.title,
                f.confidence,
                f.samples,
                f.cpu_share * 100.0,
                f.cpu_share_se * 100.0,
                opt(f.cpu_us_per_request, 2),
                opt(f.round_trips_per_request, 2),
                pct(c.gain.gain_pct)
            );
        }
        let _ = writeln!(s, "\nCPU µs/req: the CPU sampled in the cost's own frames per request (a cost named from the wire alone has none; its gain counts its round trips, see its formula). Extra round trips/req: the database round trips per request of the whole load that the remedy takes away (an N+1 keeps one execution per request); a finding's evidence gives the statement's own round trips, and the section below all of them.");
        let _ = writeln!(s);
        for c in &r.costs {
            let f = &c.finding;
            let _ = writeln!(s, "### {}. `{}`: {}\n", c.rank, f.id, f.title);
            for e in &f.evidence {
                let _ = writeln!(s, "- {e}");
            }
            if !f.counts_per_request.is_empty() {
                let counts: Vec<String> = f.counts_per_request.iter().map(|(k, v)| format!("{k} {v:.2}")).collect();
                let _ = writeln!(s, "- counts per request: {}", counts.join(", "));
            }
            if let Some(o) = &f.owner {
                let _ = writeln!(s, "- where: `{o}`");
            }
            if let Some(p) = paid_by(f) {
                let _ = writeln!(s, "- {p}");
            }
            if !f.samples_by_role.is_empty() {
                let roles: Vec<String> = f.samples_by_role.iter().map(|(r, n)| format!("{n} on {r}")).collect();
                let _ = writeln!(s, "- samples by thread role: {}", roles.join(", "));
            }
            if !f.advice.is_empty() {
                let _ = writeln!(s, "- what to do: {}", f.advice);
            }
            let _ = writeln!(s, "- predicted gain ({}): {}{}", c.gain.resource, c.gain.formula, c.gain.predicted_req_per_s.map_or(String::new(), |x| format!(" → {x:.0} req/s")));
            if !f.frames.is_empty() {
                let _ = writeln!(s, "\n  frames (samples):");
                for fr in &f.frames {
                    let _ = writeln!(s, "  - {} `{}`", fr.samples, fr.frame);
                }
            }
            let _ = writeln!(s);
        }
    }
    if !r.not_evaluated.is_empty() {
        let _ = writeln!(s, "Not evaluated:\n");
        for n in &r.not_evaluated {
            let _ = writeln!(s, "- `{}`: {}", n.id, n.reason);
        }
        let _ = writeln!(s);
    }
    if !r.calls_per_request.is_empty() {
        let _ = writeln!(s, "## Library calls per request (uprobe counts)\n");
        for (n, v) in &r.calls_per_request {
            let _ = writeln!(s, "- {n}: {v:.2}");
        }
        let _ = writeln!(s);
    }
    if let Some(d) = &r.db_per_request {
        let p = &d.per_request;
        let _ = writeln!(s, "## Database round trips per request (wire)\n");
        let window = match d.window_ns {
            Some((a, b)) => format!("the steady window {:.1}-{:.1} s after the capture's first event (no connection set-up or statement preparation in it)", a as f64 / 1e9, b as f64 / 1e9),
            None => "the whole capture".to_string(),
        };
        let _ = writeln!(s, "{} HTTP requests in {window}.\n", p.requests);
        if d.chunks_lost > 0 {
            let _ = writeln!(
                s,
                "**{} wire chunks were lost** (the kernel's ring buffer was full while the agent was starved of CPU): the figures below undercount the messages and requests they carried.\n",
                d.chunks_lost
            );
        }
        let kinds: Vec<String> = d.round_trips_by_kind.iter().filter(|k| k.1 > 0.0).map(|(k, v)| format!("{v:.2} {k}")).collect();
        let _ = writeln!(
            s,
            "- round trips: {:.2} ({}); back-to-back pings {:.2}\n- transactions: {:.2}; statement executions: {:.2}; round-trip time per request {:.1} µs\n",
            p.round_trips,
            kinds.join(", "),
            d.pings_after_ping,
            p.transactions,
            p.statement_executions,
            p.db_latency_ns / 1e3
        );
        let _ = writeln!(s, "| statement shape | executions/req | round trips/req |");
        let _ = writeln!(s, "|---|---:|---:|");
        for st in p.statements.iter().take(20) {
            let _ = writeln!(s, "| `{}` | {:.2} | {:.2} |", st.shape.to_string().replace('|', "\\|"), st.executions, st.round_trips);
        }
        let _ = writeln!(s);
        if let Some(note) = super::unnamed_statements_note(p) {
            let _ = writeln!(s, "{note}\n");
        }
    }
    let _ = writeln!(s, "## Model\n\n{MODEL_TEXT}\n");
    if !r.thread_roles.is_empty() {
        let _ = writeln!(s, "## Threads by role\n");
        let _ = writeln!(s, "Roles come from the stacks (the runtime's worker loop, its blocking pool), not from thread names.\n");
        let _ = writeln!(s, "| role | threads | on-CPU samples | share | CPU µs/req | off-CPU waits | off-CPU ms |");
        let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|");
        for t in &r.thread_roles {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.2}% | {} | {} | {:.1} |",
                t.role,
                t.threads,
                t.samples,
                100.0 * t.share,
                opt(t.cpu_us_per_request, 2),
                t.off_cpu_waits,
                t.off_cpu_ns as f64 / 1e6
            );
        }
        let _ = writeln!(s);
        if let Some(w) = &r.worker_idle {
            let _ = writeln!(s, "Runtime workers parked (idle): {:.1}% of their time, from {}.\n", 100.0 * w.share, w.source());
        }
    }
    let _ = writeln!(s, "## Layers\n");
    let _ = writeln!(s, "Self time belongs to the innermost frame's owner: the layer of the rule that claims it, else its crate (category `crate`, or `app` for the app's own), so code no rule knows is never booked to the runtime below it.\n");
    let _ = writeln!(s, "| layer | category | self samples | self share | self µs/req | total samples | total share | total µs/req |");
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|");
    for l in &r.layers {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.2}% ± {:.2} | {} | {} | {:.2}% ± {:.2} | {} |",
            l.layer,
            l.category,
            l.self_samples,
            l.self_share * 100.0,
            l.self_share_se * 100.0,
            opt(l.self_us_per_request, 2),
            l.total_samples,
            l.total_share * 100.0,
            l.total_share_se * 100.0,
            opt(l.total_us_per_request, 2)
        );
    }
    if !r.endpoints.is_empty() {
        let _ = writeln!(s, "\n## Endpoints: where a request's time goes\n");
        let _ = writeln!(s, "Latency from the wire (request line read to status line written), split into the on-CPU time of the threads serving the endpoint, its PostgreSQL round trips, the set-up of PostgreSQL connections opened for its requests, and the rest: waits the agent does not name (a pool's acquire, a lock, a timer, queueing for a worker, off-CPU time).\n");
        let _ = writeln!(s, "DB round trips are joined to a request by the order of the calls where a task cannot have waited between them; the others are split among the endpoints as the joined ones of the same statement (the \"split\" column).\n");
        let _ = writeln!(s, "| endpoint | requests | latency µs | on-CPU µs/req | DB round trips/req | split | DB µs/req | DB connect µs/req | rest µs/req |");
        let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for e in &r.endpoints {
            let _ = writeln!(
                s,
                "| `{}` | {} | {} | {} | {:.2} | {:.0}% | {:.1} | {:.1} | {} |",
                e.endpoint,
                e.requests,
                opt(e.latency_us, 1),
                opt(e.cpu_us_per_request, 1),
                e.db_round_trips_per_request,
                100.0 * e.db_round_trips_split_share,
                e.db_us_per_request,
                e.connect_us_per_request,
                opt(e.rest_us_per_request, 1)
            );
        }
    }
    let _ = writeln!(s, "\n## Generic findings\n");
    for g in &r.generic {
        let _ = writeln!(s, "### {}\n", g.title);
        let _ = writeln!(s, "- {} samples ({:.2}% ± {:.2}), {} µs/req", g.samples, g.cpu_share * 100.0, g.cpu_share_se * 100.0, opt(g.cpu_us_per_request, 2));
        for e in &g.evidence {
            let _ = writeln!(s, "- {e}");
        }
        if let Some(p) = paid_by(g) {
            let _ = writeln!(s, "- {p}");
        }
        for fr in &g.frames {
            let _ = writeln!(s, "  - {} `{}`", fr.samples, fr.frame);
        }
        let _ = writeln!(s);
    }
    if !r.syscalls_per_request.is_empty() {
        let _ = writeln!(s, "### Syscalls per request\n");
        if let Some(share) = r.syscalls_traced_share {
            let held = match r.syscalls_scaled_by.as_deref() {
                Some("requests") => format!("in windows (`--syscalls-duty`) that held {:.1}% of the requests the wire saw served", 100.0 * share),
                _ => format!("during {:.1}% of the run (`--syscalls-duty`)", 100.0 * share),
            };
            let _ = writeln!(s, "Estimates: syscalls were counted {held}, and the counts scaled by {:.2}.\n", 1.0 / share);
        }
        let _ = writeln!(s, "| syscall | per request |");
        let _ = writeln!(s, "|---|---:|");
        for (n, v) in r.syscalls_per_request.iter().take(12) {
            let _ = writeln!(s, "| {n} | {v:.3} |");
        }
        let _ = writeln!(s);
    }
    s
}

/// The combined `ranking.md` of a `profiler bench` run: one section per profiled test
/// (`(label, ranking)` in test order) with its bound, figures and costs, then the model.
/// `costs` is the run's `--costs` list.
pub fn bench_markdown(costs: &str, rows: &[(String, Ranking)]) -> String {
    let mut combined = String::new();
    let _ = writeln!(combined, "# Ranking of named costs, all tests\n");
    let _ = writeln!(combined, "Costs: `{costs}`. One section per profiled test; details in `<test>/ranking.md`.\n");
    for (label, r) in rows {
        let _ = writeln!(combined, "## {label}: {}\n", r.bound_text());
        let _ = writeln!(
            combined,
            "{} samples, {} requests, {} µs of sampled CPU per request, {:.0} req/s measured.\n",
            r.samples,
            r.requests.map_or("?".into(), |n| n.to_string()),
            r.cpu_us_per_request.map_or("?".into(), |u| format!("{u:.1}")),
            r.base_req_per_s.unwrap_or(0.0)
        );
        if r.costs.is_empty() {
            let _ = writeln!(combined, "{}\n", super::no_named_cost(r));
            continue;
        }
        let _ = writeln!(combined, "| rank | cost | confidence | CPU µs/req | predicted gain |");
        let _ = writeln!(combined, "|---:|---|---|---:|---:|");
        for c in &r.costs {
            let _ = writeln!(
                combined,
                "| {} | `{}` | {:?} | {} | {:+.1}% |",
                c.rank,
                c.finding.id,
                c.finding.confidence,
                c.finding.cpu_us_per_request.map_or("–".into(), |u| format!("{u:.2}")),
                c.gain.gain_pct
            );
        }
        let _ = writeln!(combined);
    }
    let _ = writeln!(combined, "## Model\n\n{}\n", MODEL_TEXT);
    combined
}

/// Writes `ranking.md` and `ranking.json` for `profile` into `out` and returns the ranking.
/// Call counts in `out/counters.json` ([`crate::attribute::counters`]), when present, are added
/// ([`crate::attribute::ranking::add_call_counts`]).
///
/// # Errors
/// The I/O error of the first file that could not be written.
pub fn write_ranking(
    profile: &Profile,
    requests: Option<u64>,
    bound: Bound,
    opts: &RankingOptions<'_>,
    out: &Path,
) -> std::io::Result<Ranking> {
    let mut r = crate::attribute::rank(profile, requests, bound, opts);
    if let Some(c) = crate::attribute::counters::CallCounts::read(out) {
        crate::attribute::ranking::add_call_counts(&mut r, &c);
    }
    std::fs::create_dir_all(out)?;
    crate::output::write_bytes_replacing(out.join("ranking.md"), markdown(&r))?;
    let json = serde_json::to_string_pretty(&r).map_err(std::io::Error::other)?;
    crate::output::write_bytes_replacing(out.join("ranking.json"), json + "\n")?;
    Ok(r)
}

/// Paths written by [`write_ranking`] into `out`.
pub fn ranking_paths(out: &Path) -> [PathBuf; 2] {
    [out.join("ranking.md"), out.join("ranking.json")]
}

/// Writes `ranking.md` + `ranking.json` into each profiled test's folder of a `profiler bench`
/// output (`out_dir/<test>/`, next to its `profile.json`) and a combined `out_dir/ranking.md`.
/// Per test: requests = the HTTP requests the wire capture decoded over the profile's window
/// (else the profiled run's completed requests from wrk), bound from the median
/// measured run ([`crate::attribute::bench_bound`]), base throughput = the median run's req/s. Wire figures are
/// the profile's own ([`crate::profile::Profile::wire`]) when the capture was on.
///
/// # Errors
/// The first profile that cannot be read or ranking that cannot be written, with its path.
pub fn write_bench_rankings(results: &crate::runs::BenchResults, out_dir: &Path, rules: &RuleSet) -> Result<Vec<PathBuf>, String> {
    let mut written = Vec::new();
    let mut rows: Vec<(String, Ranking)> = Vec::new();
    for t in &results.tests {
        let Some(p) = &t.profiled else { continue };
        let dir = out_dir.join(&p.dir);
        let profile = crate::profile::json::read(&dir.join("profile.json")).map_err(|e| format!("{e}"))?;
        let bound = crate::attribute::bench_bound(t, &results.settings);
        let model = crate::attribute::bench_closed_loop(t, &results.settings);
        let label = t.test.name();
        let opts = RankingOptions { rules, wire: None, base_req_per_s: Some(t.req_per_s), label, closed_loop: model.as_ref() };
        // The profile covers the app's restart, the warm-up and the run under the agent: the
        // wire's request count is over that same window; wrk's count of the run alone is used
        // only when there is no HTTP capture.
        let wire_requests = profile.wire.as_ref().map_or(0, |w| w.http.requests);
        let given = (wire_requests == 0).then_some(p.run.wrk.requests);
        let r = write_ranking(&profile, given, bound, &opts, &dir).map_err(|e| format!("writing {}: {e}", dir.display()))?;
        written.extend(ranking_paths(&dir));
        rows.push((label.to_string(), r));
    }
    let combined = bench_markdown(&results.settings.costs, &rows);
    std::fs::create_dir_all(out_dir).map_err(|e| format!("creating {}: {e}", out_dir.display()))?;
    let path = out_dir.join("ranking.md");
    crate::output::write_bytes_replacing(&path, combined).map_err(|e| format!("writing {}: {e}", path.display()))?;
    written.push(path);
    Ok(written)
}
