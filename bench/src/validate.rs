//! Measured gains of target-app's switches for `profiler bench validate`: req/s with every
//! cost on (`CRM_COSTS=all`) against req/s with one switched off (`all,-<switch>`), measured by
//! **alternating** runs on one PostgreSQL so that machine drift falls on both alike.
//!
//! Per test, the runs follow [`schedule`]: `A B1 A B2 A ... Bk A`, repeated `rounds` times
//! (consecutive rounds share their boundary `A`), where `A` is `all` and `Bi` is
//! `all,-<switch i>`. Before every run the app is restarted with that run's `CRM_COSTS`
//! ([`Environment::restart_app`]; PostgreSQL keeps running), the `deals` table is put back to
//! its seed ([`Environment::reset_deals`]) and a warm-up run that is not recorded opens the
//! pool's connections and fills the statement caches. Each `B` run's gain is its req/s over the
//! mean req/s of the two `A` runs around it, minus 1 ([`bracketed_gains`]); a switch's gain is
//! the median over the rounds, reported with its minimum and maximum.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::load::Test;
use crate::run::{measured_run, BenchError, BenchOptions, Environment, Progress};
use profiler::runs::median;

/// Seconds a restart of the app (container removed, created, started, answering) takes on
/// this machine, for the time estimate only (0.2-0.6 s measured; rounded up).
const RESTART_ESTIMATE_S: u64 = 1;

/// One test and the switches whose gain to measure on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GainPlan {
    /// The test.
    pub test: Test,
    /// Switch names (`CRM_COSTS` names, e.g. `pool-ping`), in the order they are run.
    pub switches: Vec<String>,
}

/// Lengths of the gain runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GainOptions {
    /// Alternation rounds: each switch gets one `B` run per round, bracketed by `A` runs.
    pub rounds: u32,
    /// Length of each recorded run.
    pub duration: Duration,
    /// Unrecorded warm-up after each restart (0: none).
    pub warmup: Duration,
}

/// One recorded run of the alternation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigRun {
    /// `CRM_COSTS` of the app during the run (`all` or `all,-<switch>`).
    pub costs: String,
    /// Throughput, req/s (wrk).
    pub req_per_s: f64,
    /// Mean latency, µs (wrk).
    pub mean_latency_us: f64,
    /// Failed requests (socket errors and non-2xx/3xx responses).
    pub failed: u64,
    /// Mean CPU use of the app during the run, CPUs.
    pub app_cpu: f64,
}

/// The measured gain of one switch on one test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SwitchGain {
    /// Switch name.
    pub switch: String,
    /// Gain of each round, percent: req/s of `all,-<switch>` over the mean of the two `all`
    /// runs around it, minus 1, × 100.
    pub gains_pct: Vec<f64>,
    /// Median of `gains_pct`, percent.
    pub median_pct: f64,
    /// Smallest of `gains_pct`, percent.
    pub min_pct: f64,
    /// Largest of `gains_pct`, percent.
    pub max_pct: f64,
    /// Median req/s of this switch's `all,-<switch>` runs.
    pub without_req_per_s: f64,
}

/// Every run and gain of one test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestGains {
    /// The test.
    pub test: Test,
    /// The recorded runs in the order they ran.
    pub runs: Vec<ConfigRun>,
    /// Median req/s of the `all` runs.
    pub all_req_per_s: f64,
    /// Spread of the `all` runs, percent: (max - min) / median × 100. The noise a measured
    /// gain has to stand out of.
    pub all_spread_pct: f64,
    /// Median change between consecutive `all` runs, percent: median of |A(i+1)/A(i) - 1| ×
    /// 100. The local noise a bracketed gain faces (slow drift, which the bracketing cancels,
    /// is in `all_spread_pct` but not here).
    pub all_step_change_pct: f64,
    /// Gain per switch, in plan order.
    pub switches: Vec<SwitchGain>,
}

/// The run order of one test: `None` is an `all` run, `Some(i)` a run without switch `i`.
/// `A B0 A B1 ... A B(k-1) A` per round, rounds sharing their boundary `A`: `1 + 2·k·rounds`
/// entries, every `B` between two `A`s. No switches (or no rounds) gives an empty schedule.
pub fn schedule(switches: usize, rounds: u32) -> Vec<Option<usize>> {
    if switches == 0 || rounds == 0 {
        return Vec::new();
    }
    let mut s = vec![None];
    for _ in 0..rounds {
        for i in 0..switches {
            s.push(Some(i));
            s.push(None);
        }
    }
    s
}

/// Per switch, the gain (a fraction: 0.10 = +10%) of each of its `B` runs over the mean of the
/// `A` runs right before and after it. `order` is a [`schedule`], `req_per_s` the throughput of
/// each of its runs (same length). A `B` without an `A` on both sides, or whose `A`s measured
/// 0 req/s, is skipped.
pub fn bracketed_gains(order: &[Option<usize>], req_per_s: &[f64], switches: usize) -> Vec<Vec<f64>> {
    let mut out = vec![Vec::new(); switches];
    for (j, slot) in order.iter().enumerate() {
        let Some(i) = *slot else { continue };
        if j == 0 || j + 1 >= order.len() || order[j - 1].is_some() || order[j + 1].is_some() || i >= switches {
            continue;
        }
        let base = (req_per_s[j - 1] + req_per_s[j + 1]) / 2.0;
        if base > 0.0 {
            out[i].push(req_per_s[j] / base - 1.0);
        }
    }
    out
}


/// The `CRM_COSTS` value of a schedule slot.
fn costs_of(slot: Option<usize>, switches: &[String]) -> String {
    match slot {
        None => "all".to_string(),
        Some(i) => format!("all,-{}", switches[i]),
    }
}

/// How long [`measure_gains`] takes for these plans: runs × (warm-up + run + restart).
pub fn expected_duration(plans: &[GainPlan], g: &GainOptions) -> Duration {
    let runs: usize = plans.iter().map(|p| schedule(p.switches.len(), g.rounds).len()).sum();
    (g.duration + g.warmup + Duration::from_secs(RESTART_ESTIMATE_S)) * runs as u32
}

/// Runs the alternation of every plan on `env` (which must hold a throwaway PostgreSQL for the
/// `deals` reset to work; with `--database-url` the table is left as it is). `opts` gives wrk's
/// settings (connections, threads, CPUs, timeout) and the JWT secret. Returns the runs and
/// gains per test, in plan order; a plan without switches is skipped. The app is left running
/// with the last run's `CRM_COSTS` (`all`).
///
/// # Errors
/// The first failed restart, database reset or wrk run ([`BenchError`]).
pub async fn measure_gains(
    env: &mut Environment,
    opts: &BenchOptions,
    plans: &[GainPlan],
    g: &GainOptions,
    progress: &dyn Progress,
) -> Result<Vec<TestGains>, BenchError> {
    let token = crate::token::mint_valid(&opts.jwt_secret, 1);
    let scratch = tempfile::tempdir().map_err(|source| BenchError::Io { path: "<tempdir>".into(), source })?;
    let mut out = Vec::new();
    for plan in plans.iter().filter(|p| !p.switches.is_empty()) {
        let order = schedule(plan.switches.len(), g.rounds);
        let mut runs = Vec::with_capacity(order.len());
        for (j, &slot) in order.iter().enumerate() {
            let costs = costs_of(slot, &plan.switches);
            let run = one_run(env, opts, plan.test, &costs, g, &token, scratch.path(), progress, (j + 1, order.len())).await?;
            runs.push(run);
        }
        out.push(summarize(plan, &order, runs));
    }
    Ok(out)
}

/// Restart with `costs`, reset the deals, warm up, record one run.
#[allow(clippy::too_many_arguments)]
async fn one_run(
    env: &mut Environment,
    opts: &BenchOptions,
    test: Test,
    costs: &str,
    g: &GainOptions,
    token: &str,
    scratch: &Path,
    progress: &dyn Progress,
    (n, of): (usize, usize),
) -> Result<ConfigRun, BenchError> {
    progress.step(&format!("{test}: gain run {n}/{of}, CRM_COSTS={costs}"), g.duration + g.warmup);
    env.restart_app(Some(costs)).await?;
    env.reset_deals()?;
    if !g.warmup.is_zero() {
        measured_run(env, opts, test, g.warmup, token, scratch).await?;
    }
    let r = measured_run(env, opts, test, g.duration, token, scratch).await?;
    let run = ConfigRun {
        costs: costs.to_string(),
        req_per_s: r.wrk.req_per_s,
        mean_latency_us: r.wrk.latency.mean_us,
        failed: r.wrk.failed(),
        app_cpu: r.app.cpu,
    };
    progress.done(&format!("{test}: {costs}: {:.0} req/s, app CPU {:.2}, {} failed", run.req_per_s, run.app_cpu, run.failed));
    Ok(run)
}

/// The gains and spreads of one test's recorded runs (`runs` in `order`).
pub fn summarize(plan: &GainPlan, order: &[Option<usize>], runs: Vec<ConfigRun>) -> TestGains {
    let rps: Vec<f64> = runs.iter().map(|r| r.req_per_s).collect();
    let gains = bracketed_gains(order, &rps, plan.switches.len());
    let a: Vec<f64> = order.iter().zip(&rps).filter(|(s, _)| s.is_none()).map(|(_, &x)| x).collect();
    let all_req_per_s = median(&a).unwrap_or(0.0);
    let spread = match (a.iter().copied().reduce(f64::min), a.iter().copied().reduce(f64::max)) {
        (Some(lo), Some(hi)) if all_req_per_s > 0.0 => (hi - lo) / all_req_per_s * 100.0,
        _ => 0.0,
    };
    let steps: Vec<f64> = a.windows(2).filter(|w| w[0] > 0.0).map(|w| (w[1] / w[0] - 1.0).abs() * 100.0).collect();
    let all_step_change_pct = median(&steps).unwrap_or(0.0);
    let switches = plan
        .switches
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let pct: Vec<f64> = gains[i].iter().map(|x| x * 100.0).collect();
            let b: Vec<f64> = order.iter().zip(&rps).filter(|(s, _)| **s == Some(i)).map(|(_, &x)| x).collect();
            SwitchGain {
                switch: name.clone(),
                median_pct: median(&pct).unwrap_or(0.0),
                min_pct: pct.iter().copied().reduce(f64::min).unwrap_or(0.0),
                max_pct: pct.iter().copied().reduce(f64::max).unwrap_or(0.0),
                without_req_per_s: median(&b).unwrap_or(0.0),
                gains_pct: pct,
            }
        })
        .collect();
    TestGains { test: plan.test, runs, all_req_per_s, all_spread_pct: spread, all_step_change_pct, switches }
}

// The records of `validation.json`, scored by `crate::modes::validate::score`.

/// Version of the `validation.json` schema.
pub const VALIDATION_SCHEMA_VERSION: u32 = 1;

/// The measured gain of one switch on one test (from [`SwitchGain`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// Median over the rounds, percent.
    pub median_pct: f64,
    /// Smallest round, percent.
    pub min_pct: f64,
    /// Largest round, percent.
    pub max_pct: f64,
    /// Rounds measured.
    pub rounds: usize,
}

/// One row of the switch × test matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Switch name.
    pub switch: String,
    /// Test name.
    pub test: Test,
    /// The switch changes this test's work (fact table).
    pub present: bool,
    /// The `all` ranking of this test names the switch's cost.
    pub detected: bool,
    /// Predicted gain of the `all` ranking, percent (`null`: not detected, or infinite).
    pub predicted_gain_pct: Option<f64>,
    /// Measured gain (median over rounds), percent (`null`: not measured).
    pub measured_gain_pct: Option<f64>,
    /// Smallest and largest round of the measured gain, percent.
    pub measured_min_pct: Option<f64>,
    /// Largest round of the measured gain, percent.
    pub measured_max_pct: Option<f64>,
    /// Rounds behind the measured gain.
    pub measured_rounds: usize,
    /// |predicted - measured|, percentage points, on present detected rows with both.
    pub abs_error_pp: Option<f64>,
}

/// A seeded cost reported where its switch is not present, or in a `none` run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FalseAlarm {
    /// Switch name.
    pub switch: String,
    /// Test name.
    pub test: Test,
    /// `CRM_COSTS` of the run whose ranking reported it (`all` or `none`).
    pub costs: String,
    /// The gain that ranking predicted, percent.
    pub predicted_gain_pct: Option<f64>,
}

/// The counts behind the scores.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Present rows the `all` ranking detected.
    pub true_detections: usize,
    /// Every seeded-cost report: true detections + false alarms.
    pub seeded_reports: usize,
    /// Rows whose switch is present.
    pub present_rows: usize,
    /// Rows in the mean absolute error.
    pub error_rows: usize,
}

/// `validation.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Validation {
    /// [`VALIDATION_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// One row per selected switch and test, in fact-table then test order.
    pub rows: Vec<Row>,
    /// Seeded costs reported where they do not belong.
    pub false_alarms: Vec<FalseAlarm>,
    /// true detections / seeded-cost reports (`null`: nothing reported).
    pub precision: Option<f64>,
    /// true detections / present rows (`null`: no present row).
    pub recall: Option<f64>,
    /// Mean |predicted - measured| gain over present detected measured rows, percentage points.
    pub mean_abs_error_pp: Option<f64>,
    /// The counts behind the scores.
    pub counts: Counts,
    /// Tests whose `all` or `none` ranking was missing (`<costs>/<test>: why`): their rows
    /// count as not detected and they add no false alarms.
    pub missing_rankings: Vec<String>,
    /// Per test: median req/s of the `all` gain runs and their spread, percent.
    pub noise: Vec<TestNoise>,
    /// The command line, settings and timing of the run (empty in unit tests).
    pub run: RunInfo,
}

/// The noise of one test's gain runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestNoise {
    /// Test.
    pub test: Test,
    /// Median req/s of the `all` runs.
    pub all_req_per_s: f64,
    /// (max - min) / median of the `all` runs, percent.
    pub all_spread_pct: f64,
    /// Median |A(i+1)/A(i) - 1| of consecutive `all` runs, percent: the local noise of a
    /// bracketed gain.
    pub all_step_change_pct: f64,
    /// Recorded gain runs (all and without).
    pub runs: usize,
}

/// How the validation was run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// The command line.
    pub command: String,
    /// UTC start, RFC 3339.
    pub started_at: String,
    /// Wall time, s.
    pub took_s: f64,
    /// Alternation rounds.
    pub rounds: u32,
    /// Length of each gain run, s.
    pub gain_run_s: u64,
    /// Warm-up after each restart, s.
    pub gain_warmup_s: u64,
    /// Failed requests in the gain runs.
    pub gain_failed_requests: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_brackets_every_b() {
        assert_eq!(schedule(2, 1), vec![None, Some(0), None, Some(1), None]);
        assert_eq!(schedule(1, 3), vec![None, Some(0), None, Some(0), None, Some(0), None]);
        assert_eq!(schedule(3, 2).len(), 1 + 2 * 3 * 2);
        assert!(schedule(0, 3).is_empty() && schedule(2, 0).is_empty());
    }

    #[test]
    fn gains_over_the_mean_of_the_neighbours() {
        let order = schedule(2, 1); // A B0 A B1 A
        // B0 = 110 between 100 and 100: +10%; B1 = 99 between 100 and 80: 99/90 - 1 = +10%.
        let g = bracketed_gains(&order, &[100.0, 110.0, 100.0, 99.0, 80.0], 2);
        assert!((g[0][0] - 0.10).abs() < 1e-12, "{g:?}");
        assert!((g[1][0] - 0.10).abs() < 1e-12, "{g:?}");
        // Drift cancels: A rising linearly 100, 120, 140 with a B that is always +5% of the
        // A level at its time (110 × 1.05 and 130 × 1.05).
        let order = schedule(1, 2);
        let g = bracketed_gains(&order, &[100.0, 115.5, 120.0, 136.5, 140.0], 1);
        assert_eq!(g[0].len(), 2);
        for x in &g[0] {
            assert!((x - 0.05).abs() < 1e-12, "{g:?}");
        }
    }

    #[test]
    fn medians_and_summary() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        let plan = GainPlan { test: Test::Db, switches: vec!["pool-ping".into()] };
        let order = schedule(1, 2);
        let run = |costs: &str, rps: f64| ConfigRun { costs: costs.into(), req_per_s: rps, mean_latency_us: 0.0, failed: 0, app_cpu: 0.5 };
        let runs = vec![run("all", 100.0), run("all,-pool-ping", 110.0), run("all", 100.0), run("all,-pool-ping", 95.0), run("all", 90.0)];
        let t = summarize(&plan, &order, runs);
        assert_eq!(t.all_req_per_s, 100.0);
        assert!((t.all_spread_pct - 10.0).abs() < 1e-9);
        // A runs 100, 100, 90: steps 0% and 10%, median 5%.
        assert!((t.all_step_change_pct - 5.0).abs() < 1e-9, "{}", t.all_step_change_pct);
        let s = &t.switches[0];
        // +10% and 95/95 - 1 = 0%.
        assert!((s.gains_pct[0] - 10.0).abs() < 1e-9 && s.gains_pct[1].abs() < 1e-9, "{s:?}");
        assert!((s.median_pct - 5.0).abs() < 1e-9 && s.min_pct.abs() < 1e-9 && (s.max_pct - 10.0).abs() < 1e-9);
        assert_eq!(s.without_req_per_s, 102.5);
    }

    #[test]
    fn time_estimate() {
        let plans = [GainPlan { test: Test::Db, switches: vec!["a".into(), "b".into()] }];
        let g = GainOptions { rounds: 3, duration: Duration::from_secs(5), warmup: Duration::from_secs(2) };
        // 1 + 2·2·3 = 13 runs of 5 + 2 + 1 s.
        assert_eq!(expected_duration(&plans, &g), Duration::from_secs(13 * 8));
    }
}
