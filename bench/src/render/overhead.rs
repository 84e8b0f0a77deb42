//! `overhead.md` of `profiler bench overhead`, from its [`OverheadReport`].

use crate::overhead::{OverheadReport, OverheadResults};

/// `overhead.md`: the ratio table, the footprint table and how it was made.
pub fn markdown(report: &OverheadReport) -> String {
    let mut s = String::from("# Agent overhead (`profiler bench overhead`)\n\n");
    s.push_str(&format!(
        "{} to {}, {} CPUs ({}), kernel {}.\n\n`{}`\n\nratio = req/s with the agent attached / req/s without, of the same A/B pair.\n\n",
        report.results.started_at, report.results.finished_at, report.results.cpus, report.results.cpu_model, report.results.kernel, report.command
    ));
    s.push_str(&table(&report.results));
    s.push_str("\nAgent footprint (per mode, over its attached runs):\n\n");
    s.push_str("| mode | runs | attach ms, median (max) | agent threads' CPU, % of one CPU, median (max) | whole process's CPU (harness included), median (max) | peak RSS MB collecting / with reports | reports ms, median | BPF % of one CPU |\n|---|---|---|---|---|---|---|---|\n");
    for f in &report.footprint {
        s.push_str(&format!(
            "| {} | {} | {:.0} ({:.0}) | {} | {:.2} ({:.2}) | {:.1} / {:.1} | {:.0} | {} |\n",
            f.mode,
            f.runs,
            f.attach_ms_median,
            f.attach_ms_max,
            match (f.threads_cpu_pct_median, f.threads_cpu_pct_max) {
                (Some(m), Some(x)) => format!("{m:.2} ({x:.2})"),
                _ => "not measured".to_string(),
            },
            f.cpu_pct_median,
            f.cpu_pct_max,
            f.peak_rss_mb_collecting_max,
            f.peak_rss_mb_total_max,
            f.reports_ms_median,
            f.bpf_pct_median
                .map_or("not measured".to_string(), |p| format!("{p:.1}"))
        ));
    }
    s
}

/// The rows as a Markdown table (`overhead.md`): test, mode, median ratio, min-max, pairs,
/// median unattached req/s.
pub fn table(results: &OverheadResults) -> String {
    let mut s = String::from("| test | mode | ratio, median | min-max | pairs | unattached req/s |\n|---|---|---|---|---|---|\n");
    for r in &results.rows {
        s.push_str(&format!(
            "| {} | {} | {:.3} | {:.3}-{:.3} | {} | {:.0} |{}\n",
            r.test,
            r.mode,
            r.ratio_median,
            r.ratio_min,
            r.ratio_max,
            r.pairs,
            r.unattached_req_per_s_median,
            r.error
                .as_deref()
                .map(|e| format!(" error: {e} |"))
                .unwrap_or_default()
        ));
    }
    s
}
