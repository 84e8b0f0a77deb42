//! `validation.md` of `profiler bench validate`, from its [`Validation`].

use std::fmt::Write as _;
use std::path::Path;

use crate::validate::Validation;

fn opt_pct(x: Option<f64>) -> String {
    x.map_or("–".into(), |v| format!("{v:+.1}%"))
}

fn opt_ratio(x: Option<f64>) -> String {
    x.map_or("n/a".into(), |v| format!("{v:.3}"))
}

/// `validation.md`: precision, recall and mean absolute error, the switch × test table,
/// false alarms, missing rankings, the noise of the gain runs and the method.
pub fn markdown(v: &Validation) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Validation of the ranking against target-app's switches\n");
    if !v.run.command.is_empty() {
        let _ = writeln!(s, "`{}` (started {}, took {:.1} min)\n", v.run.command, v.run.started_at, v.run.took_s / 60.0);
    }
    let c = &v.counts;
    let _ = writeln!(
        s,
        "- **precision** {} ({} true detections of {} seeded-cost reports)\n- **recall** {} ({} of {} present rows detected)\n- **mean absolute error** of predicted vs measured gain: {} ({} rows)\n",
        opt_ratio(v.precision),
        c.true_detections,
        c.seeded_reports,
        opt_ratio(v.recall),
        c.true_detections,
        c.present_rows,
        v.mean_abs_error_pp.map_or("n/a".into(), |e| format!("{e:.1} percentage points")),
        c.error_rows
    );
    let _ = writeln!(s, "## Switch × test\n");
    let _ = writeln!(s, "| switch | test | present | detected | predicted gain | measured gain (median) | measured min..max (rounds) | abs. error, pp |");
    let _ = writeln!(s, "|---|---|---|---|---:|---:|---:|---:|");
    for r in &v.rows {
        let spread = match (r.measured_min_pct, r.measured_max_pct) {
            (Some(a), Some(b)) => format!("{a:+.1}..{b:+.1}% ({})", r.measured_rounds),
            _ => "–".into(),
        };
        let verdict = match (r.present, r.detected) {
            (true, true) => "yes",
            (true, false) => "**missed**",
            (false, true) => "**false alarm**",
            (false, false) => "no",
        };
        let _ = writeln!(
            s,
            "| `{}` | {} | {} | {} | {} | {} | {} | {} |",
            r.switch,
            r.test,
            if r.present { "yes" } else { "no" },
            verdict,
            opt_pct(r.predicted_gain_pct),
            opt_pct(r.measured_gain_pct),
            spread,
            r.abs_error_pp.map_or("–".into(), |e| format!("{e:.1}"))
        );
    }
    let _ = writeln!(s, "\n## False alarms\n");
    if v.false_alarms.is_empty() {
        let _ = writeln!(s, "None.\n");
    } else {
        for f in &v.false_alarms {
            let _ = writeln!(s, "- `{}` reported on {} with `CRM_COSTS={}` (predicted {})", f.switch, f.test, f.costs, opt_pct(f.predicted_gain_pct));
        }
        let _ = writeln!(s);
    }
    if !v.missing_rankings.is_empty() {
        let _ = writeln!(s, "## Missing rankings (rows count as not detected)\n");
        for m in &v.missing_rankings {
            let _ = writeln!(s, "- {m}");
        }
        let _ = writeln!(s);
    }
    if !v.noise.is_empty() {
        let _ = writeln!(s, "## Noise of the gain runs\n");
        let _ = writeln!(
            s,
            "A measured gain smaller than the change between consecutive `all` runs is within noise; the spread \
             of all `all` runs also holds slow drift, which the bracketing cancels.\n"
        );
        let _ = writeln!(s, "| test | `all` req/s (median) | consecutive `all` runs, median change | spread of `all` runs | recorded runs |");
        let _ = writeln!(s, "|---|---:|---:|---:|---:|");
        for n in &v.noise {
            let _ = writeln!(s, "| {} | {:.0} | {:.1}% | {:.1}% | {} |", n.test, n.all_req_per_s, n.all_step_change_pct, n.all_spread_pct, n.runs);
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(
        s,
        "## Method\n\n\
- **present**: `target-app/switches.toml`, the fact table kept with the app (from its README's \
switch and ground-truth tables and the code that reads each switch), never the detector.\n\
- **detected** and **predicted gain**: `all/<test>/ranking.json` of a `profiler bench` run with \
`CRM_COSTS=all` (the profiled run's named costs, `costs[].id`, mapped to switches by the \
table's `cost_id`). Reports in `none/<test>/ranking.json` (`CRM_COSTS=none`) are false alarms.\n\
- **measured gain**: req/s of `all,-<switch>` over the mean of the two `all` runs around it, \
minus 1; runs alternate `all, all,-s1, all, all,-s2, ..., all` for {} round(s) on one \
PostgreSQL, the app restarted with each run's `CRM_COSTS`, {} s warm-up and {} s recorded per \
run (`gains.json` has every run). The median over rounds is reported, with min..max.\n\
- precision = true detections / seeded-cost reports; recall = true detections / present rows; \
mean absolute error over present, detected rows with both gains.",
        v.run.rounds, v.run.gain_warmup_s, v.run.gain_run_s
    );
    s
}


/// The one line `profiler bench validate` prints at the end: precision, recall and mean
/// absolute error with their counts, and the path of `validation.json`.
pub fn headline(v: &Validation, json_path: &Path) -> String {
    format!(
        "validation: precision {} ({} of {} reports), recall {} ({} of {} present rows), mean absolute error {} ({} rows); wrote {}",
        opt_ratio(v.precision),
        v.counts.true_detections,
        v.counts.seeded_reports,
        opt_ratio(v.recall),
        v.counts.true_detections,
        v.counts.present_rows,
        v.mean_abs_error_pp.map_or("n/a".into(), |e| format!("{e:.1} pp")),
        v.counts.error_rows,
        json_path.display()
    )
}
