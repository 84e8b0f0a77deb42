//! Fingerprints on real profiles of target-app, recorded with
//! `profiler bench --smoke --skip-build --only json,db,deals-create --frequency 999
//! --costs all|none` (agent/tests/data/attribute/recorded/, gzipped profile.json plus the run
//! figures in runs.json). With `none` no seeded cost may fire; with `all` the frame-based ones
//! that apply to each test must (the wire-based ones need a wire capture these profiles lack).

use std::io::Read;
use std::path::PathBuf;

use profiler::attribute::{rank, Bound, Ranking, RankingOptions, RuleSet};
use profiler::profile::Profile;

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/attribute/recorded")
}

fn load(name: &str) -> Profile {
    let path = data().join(format!("{name}.profile.json.gz"));
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap()).read_to_end(&mut bytes).unwrap();
    profiler::profile::json::from_slice(&bytes, &path).unwrap()
}

fn run(name: &str) -> serde_json::Value {
    let runs: serde_json::Value = serde_json::from_slice(&std::fs::read(data().join("runs.json")).unwrap()).unwrap();
    runs[name].clone()
}

fn ranking(name: &str, rules: &RuleSet) -> Ranking {
    let p = load(name);
    let r = run(name);
    let bound = Bound::classify(
        (r["app_cpu"].as_f64().unwrap(), profiler::attribute::cpu_list_len(r["app_cpus"].as_str().unwrap()).into()),
        Some((r["pg_cpu"].as_f64().unwrap(), profiler::attribute::cpu_list_len(r["pg_cpus"].as_str().unwrap()).into())),
        r["connections"].as_u64().unwrap() as u32,
        r["median_latency_mean_us"].as_f64().unwrap(),
    );
    let opts = RankingOptions { rules, wire: None, base_req_per_s: r["median_req_per_s"].as_f64(), label: name };
    rank(&p, r["profiled_requests"].as_u64(), bound, &opts)
}

fn ids(r: &Ranking) -> Vec<&str> {
    let mut v: Vec<&str> = r.costs.iter().map(|c| c.finding.id.as_str()).collect();
    v.sort_unstable();
    v
}

#[test]
fn print_all() {
    let rules = RuleSet::builtin();
    for name in ["all-json", "all-db", "all-deals-create", "none-json", "none-db", "none-deals-create"] {
        let r = ranking(name, &rules);
        println!("{name}: {:?}", ids(&r));
        for c in &r.costs {
            println!("  {} {:?} samples {} gain {:.2}% {}", c.finding.id, c.finding.confidence, c.finding.samples, c.gain.gain_pct, c.gain.formula);
            for e in &c.finding.evidence {
                println!("      {e}");
            }
            for f in &c.finding.frames {
                println!("      {} {}", f.samples, f.frame.chars().take(160).collect::<String>());
            }
        }
    }
}
