//! `profiler bench validate`: proves the ranking against target-app's eight switches.
//!
//! Three phases, each in an environment of its own (a throwaway PostgreSQL and the app):
//! 1. `profiler bench` with `CRM_COSTS=all` into `<out>/all/`: per test the measured runs and
//!    one profiled run, whose `ranking.json` gives what the profiler **detected** and the
//!    **predicted gain** of each named cost;
//! 2. the same with `CRM_COSTS=none` into `<out>/none/`: any seeded cost reported there is a
//!    false alarm;
//! 3. the **measured gain** of each switch on each test where it is present (all tests with
//!    `--measure-absent`): alternating runs `all, all,-s1, all, all,-s2, ..., all` repeated
//!    `--rounds` times on one PostgreSQL, the app restarted with the run's `CRM_COSTS` before
//!    every run ([`crate::validate`]), written to `<out>/gains.json`.
//!
//! Then [`score`] builds the switch × test matrix and writes `validation.json` and
//! `validation.md`. **Present** comes from the fact table kept with the app
//! (`target-app/switches.toml`, embedded at build time: [`SWITCHES_TOML`]), never from the
//! detector. A row is **detected** when the `all` ranking of its test names the switch's cost
//! id (`costs[].id` of ranking.json; the table's `cost_id` is the one place cost ids map to
//! switch names). Scores, over the selected switches and tests:
//! - precision = true detections / all seeded-cost reports (in the `all` and `none` rankings);
//! - recall = true detections / present rows;
//! - mean_abs_error_pp = mean of |predicted - measured| gain, in percentage points, over the
//!   present, detected rows with both figures.
//!
//! Each is `null` in the JSON when its denominator is 0.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use crate::load::Test;
use crate::validate::{GainOptions, GainPlan, TestGains};
pub use crate::validate::{Counts, FalseAlarm, Measured, Row, RunInfo, TestNoise, Validation, VALIDATION_SCHEMA_VERSION};
use serde::{Deserialize, Serialize};

use super::args::{AppArgs, LoadArgs, RunArgs, ValidateArgs};

/// The fact table `target-app/switches.toml` (which test each switch changes, and the cost id
/// the ranking gives it), embedded at build time.
pub const SWITCHES_TOML: &str = include_str!("../../../target-app/switches.toml");

/// Longest unrecorded warm-up after each restart of the gain runs, s (the app's pool has to
/// open its connections and prepare its statements; `--warmup` is capped at this).
pub const GAIN_WARMUP_MAX_S: u64 = 3;

/// One switch of the fact table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchFact {
    /// The `CRM_COSTS` name, e.g. `pool-ping`.
    pub name: String,
    /// The id of the cost in ranking.json (`costs[].id`).
    pub cost_id: String,
    /// The tests whose work the switch changes.
    pub tests: Vec<Test>,
    /// The app's code that reads the switch.
    #[serde(rename = "where")]
    pub where_: String,
    /// Why it is present where it is (with the ground-truth counts).
    pub why: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SwitchFile {
    switch: Vec<SwitchFact>,
}

/// Parses a switch fact table (the format of `target-app/switches.toml`: `[[switch]]` tables
/// with `name`, `cost_id`, `tests`, `where`, `why`).
///
/// # Errors
/// The TOML error with its line and column, or a duplicate switch name.
pub fn parse_switch_table(text: &str) -> Result<Vec<SwitchFact>, String> {
    let file: SwitchFile = toml::from_str(text).map_err(|e| format!("switch table: {e}"))?;
    for (i, s) in file.switch.iter().enumerate() {
        if file.switch[..i].iter().any(|t| t.name == s.name || t.cost_id == s.cost_id) {
            return Err(format!("switch table: `{}` (cost `{}`) is listed twice", s.name, s.cost_id));
        }
    }
    Ok(file.switch)
}

/// The embedded fact table ([`SWITCHES_TOML`]).
///
/// # Errors
/// As [`parse_switch_table`] (a broken table in the build).
pub fn switch_table() -> Result<Vec<SwitchFact>, String> {
    parse_switch_table(SWITCHES_TOML)
}

/// The part of `ranking.json` ([`profiler::attribute::Ranking`]) the validation reads: the named
/// costs with their ids and predicted gains. Other fields are ignored.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct RankingView {
    /// Named costs that fired.
    pub costs: Vec<RankedCostView>,
}

/// One named cost of a ranking.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RankedCostView {
    /// The cost id (`pool-ping`, ...).
    pub id: String,
    /// Its predicted gain.
    pub gain: GainView,
}

/// The predicted gain of a ranked cost.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct GainView {
    /// Predicted throughput gain, percent; `null` in the file when it was infinite.
    pub gain_pct: Option<f64>,
}

/// Reads the view of one `ranking.json`.
///
/// # Errors
/// The file cannot be read or is not a ranking (`costs[].id`, `costs[].gain.gain_pct`).
pub fn read_ranking(path: &Path) -> Result<RankingView, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Everything [`score`] reads.
pub struct ScoreInput<'a> {
    /// The fact table.
    pub table: &'a [SwitchFact],
    /// Selected switch names (each in `table`), in the order the rows should follow the table.
    pub switches: &'a [String],
    /// Selected tests.
    pub tests: &'a [Test],
    /// The `all` ranking per test (absent: missing).
    pub all: &'a BTreeMap<Test, RankingView>,
    /// The `none` ranking per test (absent: missing).
    pub none: &'a BTreeMap<Test, RankingView>,
    /// Measured gain per (test, switch name).
    pub measured: &'a BTreeMap<(Test, String), Measured>,
}

fn ratio(num: usize, den: usize) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
}

/// Scores the rankings against the fact table and the measured gains (see the module docs).
/// `missing_rankings`, `noise` and `run` are left empty for the caller.
pub fn score(input: &ScoreInput<'_>) -> Validation {
    let facts: Vec<&SwitchFact> = input.table.iter().filter(|f| input.switches.contains(&f.name)).collect();
    let mut rows = Vec::new();
    let mut false_alarms = Vec::new();
    let mut counts = Counts::default();
    let mut err_sum = 0.0;
    for fact in &facts {
        for &test in input.tests {
            let present = fact.tests.contains(&test);
            let found = input.all.get(&test).and_then(|r| r.costs.iter().find(|c| c.id == fact.cost_id));
            let detected = found.is_some();
            let predicted = found.and_then(|c| c.gain.gain_pct).filter(|g| g.is_finite());
            let m = input.measured.get(&(test, fact.name.clone()));
            let measured = m.map(|m| m.median_pct);
            let abs_error = match (present && detected, predicted, measured) {
                (true, Some(p), Some(x)) => Some((p - x).abs()),
                _ => None,
            };
            if present {
                counts.present_rows += 1;
            }
            if detected {
                counts.seeded_reports += 1;
                if present {
                    counts.true_detections += 1;
                } else {
                    false_alarms.push(FalseAlarm { switch: fact.name.clone(), test, costs: "all".into(), predicted_gain_pct: predicted });
                }
            }
            if let Some(e) = abs_error {
                counts.error_rows += 1;
                err_sum += e;
            }
            rows.push(Row {
                switch: fact.name.clone(),
                test,
                present,
                detected,
                predicted_gain_pct: predicted,
                measured_gain_pct: measured,
                measured_min_pct: m.map(|m| m.min_pct),
                measured_max_pct: m.map(|m| m.max_pct),
                measured_rounds: m.map_or(0, |m| m.rounds),
                abs_error_pp: abs_error,
            });
        }
    }
    for &test in input.tests {
        let Some(r) = input.none.get(&test) else { continue };
        for fact in &facts {
            if let Some(c) = r.costs.iter().find(|c| c.id == fact.cost_id) {
                counts.seeded_reports += 1;
                false_alarms.push(FalseAlarm {
                    switch: fact.name.clone(),
                    test,
                    costs: "none".into(),
                    predicted_gain_pct: c.gain.gain_pct.filter(|g| g.is_finite()),
                });
            }
        }
    }
    Validation {
        schema_version: VALIDATION_SCHEMA_VERSION,
        rows,
        false_alarms,
        precision: ratio(counts.true_detections, counts.seeded_reports),
        recall: ratio(counts.true_detections, counts.present_rows),
        mean_abs_error_pp: (counts.error_rows > 0).then(|| err_sum / counts.error_rows as f64),
        counts,
        missing_rankings: Vec::new(),
        noise: Vec::new(),
        run: RunInfo::default(),
    }
}

/// The gain plans: per test, the selected switches present on it (all selected ones with
/// `measure_absent`), in fact-table order.
pub fn gain_plans(table: &[SwitchFact], switches: &[String], tests: &[Test], measure_absent: bool) -> Vec<GainPlan> {
    tests
        .iter()
        .map(|&test| GainPlan {
            test,
            switches: table
                .iter()
                .filter(|f| switches.contains(&f.name) && (measure_absent || f.tests.contains(&test)))
                .map(|f| f.name.clone())
                .collect(),
        })
        .filter(|p| !p.switches.is_empty())
        .collect()
}

/// The selected switch names, checked against the table (all of them when `given` is empty).
///
/// # Errors
/// An unknown name, listing the known ones.
pub fn select_switches(table: &[SwitchFact], given: &[String]) -> Result<Vec<String>, String> {
    if given.is_empty() {
        return Ok(table.iter().map(|f| f.name.clone()).collect());
    }
    for g in given {
        if !table.iter().any(|f| &f.name == g) {
            let known: Vec<&str> = table.iter().map(|f| f.name.as_str()).collect();
            return Err(format!("unknown switch `{g}` in --switches (known: {})", known.join(", ")));
        }
    }
    // Table order, each once.
    Ok(table.iter().filter(|f| given.contains(&f.name)).map(|f| f.name.clone()).collect())
}

fn read_rankings(dir: &Path, tests: &[Test], label: &str, missing: &mut Vec<String>) -> BTreeMap<Test, RankingView> {
    let mut out = BTreeMap::new();
    for &t in tests {
        match read_ranking(&dir.join(t.name()).join("ranking.json")) {
            Ok(r) => {
                out.insert(t, r);
            }
            Err(e) => missing.push(format!("{label}/{t}: {e}")),
        }
    }
    out
}

/// Runs `profiler bench validate` (see the module docs). Returns the exit code: 0, or 1 when
/// any request failed in any phase.
///
/// # Errors
/// Bad `--switches`, a bench phase that failed (no PostgreSQL, conformance gate, ...), an
/// interrupted run, or outputs that could not be written.
pub fn run(args: &ValidateArgs) -> Result<u8> {
    let started = Instant::now();
    let started_at = chrono::Utc::now();
    let table = switch_table().map_err(anyhow::Error::msg)?;
    let switches = select_switches(&table, &args.switches).map_err(anyhow::Error::msg)?;
    let tests: Vec<Test> = if args.load.only.is_empty() { Test::ALL.to_vec() } else { args.load.only.clone() };
    if args.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    super::require_root()?;
    let out = args.load.out.clone().unwrap_or_else(|| PathBuf::from("reports").join(format!("{}-validate", started_at.format("%Y%m%dT%H%M%SZ"))));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let mut exit = 0u8;

    // Phase 3's plan first, to state the time up front.
    let plans = gain_plans(&table, &switches, &tests, args.measure_absent);
    let bench_opts = super::run::options(&args.app, &args.load, "all", "validate")?;
    let g = GainOptions {
        rounds: args.rounds,
        duration: bench_opts.duration,
        warmup: bench_opts.warmup.min(Duration::from_secs(GAIN_WARMUP_MAX_S)),
    };
    let gain_time = crate::validate::expected_duration(&plans, &g);
    eprintln!(
        "validate: {} switch(es) x {} test(s); gain runs about {:.0} min after the two profiled bench runs ({} tests each)",
        switches.len(),
        tests.len(),
        gain_time.as_secs_f64() / 60.0,
        tests.len()
    );

    // Phases 1 and 2: profiled bench runs with all and none.
    let mut skip_build = args.app.skip_build;
    for costs in ["all", "none"] {
        eprintln!("validate: profiler bench with CRM_COSTS={costs} into {}", out.join(costs).display());
        let bench_args = RunArgs {
            app: AppArgs { skip_build, ..args.app.clone() },
            load: LoadArgs { out: Some(out.join(costs)), ..args.load.clone() },
            costs: costs.into(),
            drift: false,
            no_profile: false,
        };
        exit = exit.max(super::run::run(&bench_args).with_context(|| format!("the CRM_COSTS={costs} bench run"))?);
        skip_build = true;
    }

    // Phase 3: measured gains.
    let progress = super::run::StderrProgress::default();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().context("starting the async runtime")?;
    let gains: Vec<TestGains> = runtime.block_on(async {
        let mut env = crate::run::Environment::start(&bench_opts, &progress).await?;
        let outcome = tokio::select! {
            r = crate::validate::measure_gains(&mut env, &bench_opts, &plans, &g, &progress) => r.map_err(anyhow::Error::from),
            _ = super::run::stop_signal() => Err(anyhow::anyhow!(profiler::collect::INTERRUPTED)),
        };
        env.shutdown().await;
        outcome
    })?;
    let gains_path = out.join("gains.json");
    profiler::output::write_bytes_replacing(&gains_path, serde_json::to_string_pretty(&gains)? + "\n").with_context(|| format!("writing {}", gains_path.display()))?;

    // Scoring.
    let mut missing = Vec::new();
    let all = read_rankings(&out.join("all"), &tests, "all", &mut missing);
    let none = read_rankings(&out.join("none"), &tests, "none", &mut missing);
    let mut measured = BTreeMap::new();
    for t in &gains {
        for s in &t.switches {
            let m = Measured { median_pct: s.median_pct, min_pct: s.min_pct, max_pct: s.max_pct, rounds: s.gains_pct.len() };
            measured.insert((t.test, s.switch.clone()), m);
        }
    }
    let mut v = score(&ScoreInput { table: &table, switches: &switches, tests: &tests, all: &all, none: &none, measured: &measured });
    v.missing_rankings = missing;
    v.noise = gains
        .iter()
        .map(|t| TestNoise {
            test: t.test,
            all_req_per_s: t.all_req_per_s,
            all_spread_pct: t.all_spread_pct,
            all_step_change_pct: t.all_step_change_pct,
            runs: t.runs.len(),
        })
        .collect();
    let gain_failed: u64 = gains.iter().flat_map(|t| &t.runs).map(|r| r.failed).sum();
    v.run = RunInfo {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        started_at: started_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        took_s: started.elapsed().as_secs_f64(),
        rounds: g.rounds,
        gain_run_s: g.duration.as_secs(),
        gain_warmup_s: g.warmup.as_secs(),
        gain_failed_requests: gain_failed,
    };
    let json_path = out.join("validation.json");
    profiler::output::write_bytes_replacing(&json_path, serde_json::to_string_pretty(&v)? + "\n").with_context(|| format!("writing {}", json_path.display()))?;
    let md = crate::render::validation::markdown(&v);
    profiler::output::write_bytes_replacing(out.join("validation.md"), &md).with_context(|| format!("writing {}", out.join("validation.md").display()))?;
    println!("{}", crate::render::validation::headline(&v, &json_path));
    if gain_failed > 0 {
        eprintln!("validate: {gain_failed} requests failed in the gain runs: see gains.json");
        exit = 1;
    }
    Ok(exit)
}
