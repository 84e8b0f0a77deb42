//! Scoring of `profiler bench validate` on hand-made rankings (precision, recall and mean
//! absolute error computed by hand below), the fact table `target-app/switches.toml` checked
//! against target-app's README (its ground-truth table, which target-app/tests/costs.rs
//! asserts) and its `Cost` names, and the ranking view read from a real ranking.json.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;

use bench::load::Test;
use bench::modes::validate::{
    gain_plans, parse_switch_table, score, select_switches, switch_table, Measured, RankingView, ScoreInput,
};

fn ranking(json: &str) -> RankingView {
    serde_json::from_str(json).unwrap()
}

fn measured(median: f64) -> Measured {
    Measured { median_pct: median, min_pct: median - 1.0, max_pct: median + 1.0, rounds: 3 }
}

#[test]
fn scores_computed_by_hand() {
    let table = switch_table().unwrap();
    let switches = vec!["pool-ping".to_string(), "double-json-parse".to_string()];
    let tests = [Test::Json, Test::Db, Test::DealsCreate];
    // 2 switches x 3 tests = 6 rows; present (table): pool-ping on db and deals-create,
    // double-json-parse on deals-create: 3 present rows.
    let mut all = BTreeMap::new();
    // json: pool-ping where it is absent (a false alarm); `n-plus-one` is no seeded cost.
    all.insert(Test::Json, ranking(r#"{"costs":[{"id":"pool-ping","gain":{"gain_pct":2.0}},{"id":"n-plus-one","gain":{"gain_pct":9.0}}]}"#));
    all.insert(Test::Db, ranking(r#"{"costs":[{"id":"pool-ping","gain":{"gain_pct":12.0}}]}"#));
    // deals-create: double-json-parse found, pool-ping missed.
    all.insert(Test::DealsCreate, ranking(r#"{"costs":[{"id":"double-json-parse","gain":{"gain_pct":3.0}}]}"#));
    let mut none = BTreeMap::new();
    none.insert(Test::Json, ranking(r#"{"costs":[]}"#));
    // A seeded cost reported with every cost off: a false alarm.
    none.insert(Test::Db, ranking(r#"{"costs":[{"id":"pool-ping","gain":{"gain_pct":1.0}}]}"#));
    none.insert(Test::DealsCreate, ranking(r#"{"costs":[]}"#));
    let mut m = BTreeMap::new();
    m.insert((Test::Db, "pool-ping".to_string()), measured(10.0));
    m.insert((Test::DealsCreate, "pool-ping".to_string()), measured(5.0));
    m.insert((Test::DealsCreate, "double-json-parse".to_string()), measured(4.5));
    let v = score(&ScoreInput { table: &table, switches: &switches, tests: &tests, all: &all, none: &none, measured: &m });

    assert_eq!(v.rows.len(), 6);
    // true detections: (pool-ping, db), (double-json-parse, deals-create) = 2;
    // seeded reports: 2 + (pool-ping, json, all) + (pool-ping, db, none) = 4.
    assert_eq!((v.counts.true_detections, v.counts.seeded_reports, v.counts.present_rows, v.counts.error_rows), (2, 4, 3, 2));
    assert_eq!(v.precision, Some(0.5));
    assert_eq!(v.recall, Some(2.0 / 3.0));
    // (|12 - 10| + |3 - 4.5|) / 2 = 1.75 pp; the missed row (pool-ping, deals-create) has a
    // measured gain but no prediction and stays out.
    assert_eq!(v.mean_abs_error_pp, Some(1.75));
    assert_eq!(v.false_alarms.len(), 2);
    assert_eq!((v.false_alarms[0].switch.as_str(), v.false_alarms[0].test, v.false_alarms[0].costs.as_str()), ("pool-ping", Test::Json, "all"));
    assert_eq!((v.false_alarms[1].test, v.false_alarms[1].costs.as_str(), v.false_alarms[1].predicted_gain_pct), (Test::Db, "none", Some(1.0)));
    let row = |s: &str, t: Test| v.rows.iter().find(|r| r.switch == s && r.test == t).unwrap();
    let r = row("pool-ping", Test::Json);
    assert!(!r.present && r.detected && r.measured_gain_pct.is_none());
    let r = row("pool-ping", Test::DealsCreate);
    assert!(r.present && !r.detected && r.predicted_gain_pct.is_none() && r.measured_gain_pct == Some(5.0) && r.abs_error_pp.is_none());
    let r = row("double-json-parse", Test::Db);
    assert!(!r.present && !r.detected);
    assert_eq!(row("pool-ping", Test::Db).abs_error_pp, Some(2.0));

    // The JSON has the issue's schema.
    let j = serde_json::to_value(&v).unwrap();
    for key in ["rows", "false_alarms", "precision", "recall", "mean_abs_error_pp"] {
        assert!(j.get(key).is_some(), "validation.json lacks {key}");
    }
    for key in ["switch", "test", "present", "detected", "predicted_gain_pct", "measured_gain_pct"] {
        assert!(j["rows"][0].get(key).is_some(), "a row lacks {key}");
    }
    assert_eq!(j["rows"][0]["test"], "json");
    let md = bench::render::validation::markdown(&v);
    assert!(md.contains("**precision** 0.500") && md.contains("**recall** 0.667") && md.contains("1.8 percentage points"), "{md}");
    assert!(md.contains("**false alarm**") && md.contains("**missed**"));
}

#[test]
fn perfect_and_empty_scores() {
    let table = switch_table().unwrap();
    let switches = vec!["global-locks".to_string()];
    let tests = [Test::Json];
    let mut all = BTreeMap::new();
    // An infinite prediction is stored as null by serde_json: detected, but no error row.
    all.insert(Test::Json, ranking(r#"{"costs":[{"id":"global-locks","gain":{"gain_pct":null}}]}"#));
    let none = BTreeMap::new();
    let m = BTreeMap::new();
    let v = score(&ScoreInput { table: &table, switches: &switches, tests: &tests, all: &all, none: &none, measured: &m });
    assert_eq!((v.precision, v.recall, v.mean_abs_error_pp), (Some(1.0), Some(1.0), None));
    // Nothing reported and nothing present: precision and recall undefined (null), not 0 or 1.
    let tests = [Test::Json];
    let switches = vec!["change-events".to_string()];
    let all = BTreeMap::new();
    let v = score(&ScoreInput { table: &table, switches: &switches, tests: &tests, all: &all, none: &none, measured: &m });
    assert_eq!((v.precision, v.recall, v.mean_abs_error_pp), (None, None, None));
    let j = serde_json::to_value(&v).unwrap();
    assert!(j["precision"].is_null() && j["recall"].is_null());
}

/// Reads README.md's ground-truth table ("all" and "none" rows per endpoint) and derives, per
/// switch, the tests where its column differs between all and none.
fn presence_from_readme() -> BTreeMap<String, Vec<Test>> {
    let readme = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target-app/README.md")).unwrap();
    let section = readme.split("## Ground truth").nth(1).expect("README has the ground-truth section");
    let endpoint = |e: &str| match e {
        "GET /json" => Test::Json,
        "GET /db" => Test::Db,
        "GET /queries?queries=20" => Test::Queries,
        "GET /api/deals?page=P&per_page=20" => Test::DealsList,
        "POST /api/deals" => Test::DealsCreate,
        other => panic!("unknown endpoint {other}"),
    };
    let mut cells: BTreeMap<(Test, String), Vec<String>> = BTreeMap::new();
    for line in section.lines().take_while(|l| !l.starts_with("## ")) {
        let c: Vec<String> = line.split('|').map(|c| c.trim().to_string()).collect();
        if c.len() < 14 || !(c[2] == "all" || c[2] == "none") {
            continue;
        }
        cells.insert((endpoint(&c[1]), c[2].clone()), c[3..14].to_vec());
    }
    assert_eq!(cells.len(), 10, "5 endpoints x all/none in the README table");
    // Column (after endpoint and costs) of each switch's per-request figure.
    let columns = [
        ("pool-ping", 1),         // of which pings
        ("actor-set-config", 3),  // set_config
        ("wide-user-lookup", 4),  // user SELECT
        ("spawn-per-request", 6), // tokio tasks spawned
        ("global-locks", 7),      // global lock acquisitions
        ("double-json-parse", 8), // Value parses
        ("change-events", 9),     // change-event serializations
        ("metrics-labels", 10),   // getrandom syscalls
    ];
    let mut out = BTreeMap::new();
    for (switch, col) in columns {
        let tests = Test::ALL.into_iter().filter(|&t| cells[&(t, "all".to_string())][col] != cells[&(t, "none".to_string())][col]).collect();
        out.insert(switch.to_string(), tests);
    }
    out
}

#[test]
fn fact_table_agrees_with_the_readme_and_the_app() {
    let table = switch_table().unwrap();
    // The eight `CRM_COSTS` names of target-app/src/costs.rs, each once.
    let costs_rs = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target-app/src/costs.rs")).unwrap();
    assert_eq!(table.len(), 8);
    for f in &table {
        assert!(costs_rs.contains(&format!("=> \"{}\"", f.name)), "{} is not a switch of target-app/src/costs.rs", f.name);
    }
    let readme = presence_from_readme();
    for f in &table {
        assert_eq!(f.tests, readme[&f.name], "{}: switches.toml and README's ground-truth table disagree", f.name);
    }
    // What a person checks at a glance.
    let find = |n: &str| table.iter().find(|f| f.name == n).unwrap();
    assert!(!find("pool-ping").tests.contains(&Test::Json));
    assert_eq!(find("double-json-parse").tests, [Test::DealsCreate]);
    assert_eq!(find("actor-set-config").tests, [Test::DealsList, Test::DealsCreate]);
    assert_eq!(find("spawn-per-request").tests.len(), 5);
    // 4 + 2 + 5 + 5 + 5 + 2 + 1 + 1 present rows of 40.
    assert_eq!(table.iter().map(|f| f.tests.len()).sum::<usize>(), 25);
}

#[test]
fn table_errors_and_selection() {
    let e = parse_switch_table("[[switch]]\nname = \"a\"\ncost_id = \"a\"\ntests = [\"jsn\"]\nwhere = \"\"\nwhy = \"\"\n").unwrap_err();
    assert!(e.contains("line 4") && e.contains("jsn"), "{e}");
    let table = switch_table().unwrap();
    let e = select_switches(&table, &["pool-pong".to_string()]).unwrap_err();
    assert!(e.contains("`pool-pong`") && e.contains("change-events"), "{e}");
    // Table order, whatever the order given.
    let s = select_switches(&table, &["change-events".to_string(), "pool-ping".to_string()]).unwrap();
    assert_eq!(s, ["pool-ping", "change-events"]);
    assert_eq!(select_switches(&table, &[]).unwrap().len(), 8);
    // Gain runs only where present, unless asked.
    let plans = gain_plans(&table, &s, &[Test::Json, Test::Db, Test::DealsCreate], false);
    let got: Vec<(Test, Vec<String>)> = plans.into_iter().map(|p| (p.test, p.switches)).collect();
    assert_eq!(got, vec![(Test::Db, vec!["pool-ping".to_string()]), (Test::DealsCreate, vec!["pool-ping".to_string(), "change-events".to_string()])]);
    assert_eq!(gain_plans(&table, &s, &[Test::Json], true)[0].switches.len(), 2);
}

/// The view reads the ranking.json the attribution writes: rank a recorded profile of
/// target-app (`all`, /db), serialize it as write_ranking does, read it back.
#[test]
fn reads_a_real_ranking_json() {
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../agent/tests/data/attribute/recorded");
    let path = data.join("all-db.profile.json.gz");
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap()).read_to_end(&mut bytes).unwrap();
    let profile = profiler::profile::json::from_slice(&bytes, &path).unwrap();
    let rules = profiler::attribute::RuleSet::builtin();
    let opts = profiler::attribute::RankingOptions { rules: &rules, wire: None, base_req_per_s: Some(5000.0), label: "db", closed_loop: None };
    let dir = tempfile::tempdir().unwrap();
    let r = profiler::render::ranking::write_ranking(&profile, Some(50_000), profiler::attribute::Bound::Unknown, &opts, dir.path()).unwrap();
    assert!(!r.costs.is_empty(), "the recorded all-db profile has named costs");
    let view = bench::modes::validate::read_ranking(&dir.path().join("ranking.json")).unwrap();
    let ids: Vec<&str> = view.costs.iter().map(|c| c.id.as_str()).collect();
    let want: Vec<&str> = r.costs.iter().map(|c| c.finding.id.as_str()).collect();
    assert_eq!(ids, want);
    for (v, c) in view.costs.iter().zip(&r.costs) {
        // serde_json's float parsing may differ in the last bit.
        match (v.gain.gain_pct, Some(c.gain.gain_pct).filter(|g| g.is_finite())) {
            (Some(a), Some(b)) => assert!((a - b).abs() < 1e-9, "{a} vs {b}"),
            (a, b) => assert_eq!(a, b),
        }
    }
    let e = bench::modes::validate::read_ranking(&dir.path().join("nope.json")).unwrap_err();
    assert!(e.contains("nope.json"), "{e}");
}

/// Bad input is one line on stderr and exit status 2, before anything is started.
#[test]
fn bad_switch_names_exit_2() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_profiler"))
        .args(["bench", "validate", "--skip-build", "--switches", "pool-ping,pool-pong", "--out", "/nonexistent/never-written"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("unknown switch `pool-pong`") && err.contains("known: pool-ping,"), "{err}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_profiler")).args(["bench", "validate", "--rounds", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rounds must be at least 1"));
}
