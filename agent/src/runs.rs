//! The record of measured load runs: `results.json`, everything one `profiler bench` run
//! measured, in one serializable type ([`BenchResults`]), with the records it is made of (the
//! tests, wrk's figures, the CPU and memory of the processes).
//!
//! The bench writes these records; `profiler diff` (`compare::import`), the bench page
//! (`render::html::bench_page`) and the per-test rankings (`render::ranking::write_bench_rankings`)
//! read them.
//!
//! Units are in the field names (`_ms`, `_us`, `_ns`, `_bytes`, `req_per_s`); CPU is in CPUs
//! (1.0 = one CPU busy for the whole run).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One test of the benchmark, named as in SPEC.md and on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Test {
    /// `GET /json`: routing and the HTTP pipeline only.
    Json,
    /// `GET /db`: one random `world` row by primary key.
    Db,
    /// `GET /queries?queries=20`: 20 separate random-row queries.
    Queries,
    /// `GET /api/deals?page=P&per_page=20`, P cycling 1..50, authenticated.
    DealsList,
    /// `POST /api/deals` with a fresh title, amount and stage, authenticated.
    DealsCreate,
}

impl Test {
    /// All five tests in the order the benchmark runs them.
    pub const ALL: [Test; 5] = [Test::Json, Test::Db, Test::Queries, Test::DealsList, Test::DealsCreate];

    /// The name used on the command line, in file names and in `CRM_TEST`.
    pub fn name(self) -> &'static str {
        match self {
            Test::Json => "json",
            Test::Db => "db",
            Test::Queries => "queries",
            Test::DealsList => "deals-list",
            Test::DealsCreate => "deals-create",
        }
    }

    /// The request line's method and path, as a person reads it (`GET /queries?queries=20`).
    pub fn request(self) -> &'static str {
        match self {
            Test::Json => "GET /json",
            Test::Db => "GET /db",
            Test::Queries => "GET /queries?queries=20",
            Test::DealsList => "GET /api/deals?page=P&per_page=20",
            Test::DealsCreate => "POST /api/deals",
        }
    }

    /// True when the test needs a bearer token.
    pub fn authenticated(self) -> bool {
        matches!(self, Test::DealsList | Test::DealsCreate)
    }
}

impl fmt::Display for Test {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Test {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Test::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| format!("unknown test `{s}` (expected one of: json, db, queries, deals-list, deals-create)"))
    }
}

/// Socket errors of one wrk run, by kind (wrk's `summary.errors`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketErrors {
    /// Connections that could not be opened.
    pub connect: u64,
    /// Read errors.
    pub read: u64,
    /// Write errors.
    pub write: u64,
    /// Requests that timed out (`--timeout`).
    pub timeout: u64,
}

impl SocketErrors {
    /// Sum of every kind.
    pub fn total(&self) -> u64 {
        self.connect + self.read + self.write + self.timeout
    }
}

/// Latency of one run as wrk measured it, µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Fastest request, µs.
    pub min_us: u64,
    /// Mean, µs.
    pub mean_us: f64,
    /// Standard deviation, µs.
    pub stdev_us: f64,
    /// Median, µs.
    pub p50_us: u64,
    /// 75th percentile, µs.
    pub p75_us: u64,
    /// 90th percentile, µs.
    pub p90_us: u64,
    /// 99th percentile, µs.
    pub p99_us: u64,
    /// 99.9th percentile, µs.
    pub p999_us: u64,
    /// Slowest request, µs.
    pub max_us: u64,
}

/// The result of one wrk run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WrkResult {
    /// The test that ran.
    pub test: Test,
    /// Completed requests (any status).
    pub requests: u64,
    /// Measured length of the run, µs.
    pub duration_us: u64,
    /// `requests / duration`, req/s.
    pub req_per_s: f64,
    /// Bytes read from the app.
    pub bytes: u64,
    /// Socket errors by kind.
    pub errors: SocketErrors,
    /// Responses with a status outside 2xx/3xx.
    pub non_2xx: u64,
    /// Latency distribution.
    pub latency: Latency,
}

impl WrkResult {
    /// Requests that failed: socket errors plus non-2xx/3xx responses.
    pub fn failed(&self) -> u64 {
        self.errors.total() + self.non_2xx
    }
}

/// CPU and memory of a process tree over one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Mean CPU use over the run, in CPUs (1.0 = one CPU busy all the time).
    pub cpu: f64,
    /// CPU time used during the run, ns.
    pub cpu_ns: u64,
    /// Highest summed resident memory seen, bytes.
    pub peak_rss_bytes: u64,
    /// Samples taken.
    pub samples: u32,
}

/// Version of the `results.json` schema.
pub const RESULTS_SCHEMA_VERSION: u32 = 1;

/// One measured (or profiled) wrk run with the CPU and memory seen while it ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// What wrk measured.
    pub wrk: WrkResult,
    /// The app's process tree (container or process) during the run.
    pub app: Usage,
    /// PostgreSQL's process tree during the run (`None` with an external `--database-url`).
    pub postgres: Option<Usage>,
}

/// The profiled run of a test: the same load with the agent attached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfiledRun {
    /// The run itself.
    pub run: RunResult,
    /// `profiled req/s / median measured req/s`: the agent's overhead on this test, as a ratio
    /// (1.0 = no visible cost). Measured runs and the profiled run are not interleaved, so
    /// machine drift enters this figure; `profiler bench overhead` alternates runs instead.
    pub throughput_ratio: f64,
    /// Folder with the attach outputs (profile.json, flamegraph.svg, ...), relative to the
    /// bench output folder.
    pub dir: String,
    /// On-CPU samples of the target in that run.
    pub samples: u64,
    /// The attach summary as printed.
    pub summary: String,
}

/// All runs of one test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestResult {
    /// The test.
    pub test: Test,
    /// Method and path.
    pub request: String,
    /// Measured runs, in order.
    pub runs: Vec<RunResult>,
    /// Index into `runs` of the median run (by req/s).
    pub median_index: usize,
    /// req/s of the median run.
    pub req_per_s: f64,
    /// Latency of the median run.
    pub latency: Latency,
    /// Failed requests over all measured runs, the profiled and the counting run included:
    /// socket errors plus non-2xx/3xx.
    pub failed_requests: u64,
    /// Highest resident memory of the app during any measured run, bytes.
    pub app_peak_rss_bytes: u64,
    /// The profiled run, when the agent ran.
    pub profiled: Option<ProfiledRun>,
    /// Why the profiled run failed, when it did (the measured runs still count).
    pub profile_error: Option<String>,
}

impl TestResult {
    /// Builds a result from measured runs (at least one), picking the median by req/s.
    pub fn from_runs(test: Test, runs: Vec<RunResult>) -> TestResult {
        let mut order: Vec<usize> = (0..runs.len()).collect();
        order.sort_by(|&a, &b| runs[a].wrk.req_per_s.total_cmp(&runs[b].wrk.req_per_s));
        let median_index = order.get(order.len() / 2).copied().unwrap_or(0);
        let median = &runs[median_index];
        TestResult {
            test,
            request: test.request().to_string(),
            req_per_s: median.wrk.req_per_s,
            latency: median.wrk.latency,
            failed_requests: runs.iter().map(|r| r.wrk.failed()).sum(),
            app_peak_rss_bytes: runs.iter().map(|r| r.app.peak_rss_bytes).max().unwrap_or(0),
            median_index,
            runs,
            profiled: None,
            profile_error: None,
        }
    }

    /// The median run.
    pub fn median(&self) -> &RunResult {
        &self.runs[self.median_index]
    }
}

/// Conformance gate outcome.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConformanceResult {
    /// Checks that passed.
    pub passed: u32,
    /// Checks that failed.
    pub failed: u32,
    /// Names and details of the failing checks.
    pub failures: Vec<String>,
}

/// The drift check: the first test measured again at the end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Drift {
    /// The test re-measured.
    pub test: Test,
    /// req/s of the first measurement (median).
    pub first_req_per_s: f64,
    /// req/s of the repeat.
    pub repeat_req_per_s: f64,
    /// `(repeat - first) / first`, percent.
    pub change_pct: f64,
}

/// Versions of everything that ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Versions {
    /// The profiler (this workspace).
    pub profiler: String,
    /// `uname -r`.
    pub kernel: String,
    /// PostgreSQL `server_version`.
    pub postgres: String,
    /// Docker engine version, when Docker ran the app.
    pub docker: Option<String>,
    /// First line of `wrk -v`.
    pub wrk: String,
}

/// Every setting of the run (the resolved command line).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// Tests in order.
    pub tests: Vec<Test>,
    /// Measured runs per test.
    pub runs: u32,
    /// Length of each measured run, s.
    pub duration_s: u64,
    /// Warm-up per test, s.
    pub warmup_s: u64,
    /// wrk connections.
    pub connections: u32,
    /// wrk threads.
    pub threads: u32,
    /// The app's CPU set.
    pub app_cpus: String,
    /// wrk's CPU set.
    pub load_cpus: String,
    /// PostgreSQL's CPU set (`None`: not pinned).
    pub pg_cpus: Option<String>,
    /// `CRM_COSTS` given to the app.
    pub costs: String,
    /// Database pool size of the app.
    pub pool_size: u32,
    /// Container (or process) name.
    pub name: String,
    /// True when the app ran in Docker.
    pub docker: bool,
    /// True with an external `--database-url`.
    pub external_database: bool,
    /// Agent sampling frequency in the profiled runs, Hz (0: no profiled run).
    pub frequency_hz: u64,
    /// Smoke mode.
    pub smoke: bool,
}

/// The whole `results.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BenchResults {
    /// Always [`RESULTS_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Start, RFC 3339 UTC.
    pub started_at: String,
    /// End, RFC 3339 UTC.
    pub finished_at: String,
    /// Settings.
    pub settings: Settings,
    /// Versions.
    pub versions: Versions,
    /// Online CPUs of the machine.
    pub cpus: u32,
    /// CPU model name from /proc/cpuinfo.
    pub cpu_model: String,
    /// From starting the app (container start) to the first 200 from `GET /json`, ms.
    pub time_to_ready_ms: f64,
    /// Resident memory of the app once it answered, before any load, bytes.
    pub idle_rss_bytes: u64,
    /// The conformance gate.
    pub conformance: ConformanceResult,
    /// Per test, in order.
    pub tests: Vec<TestResult>,
    /// The drift check, with `--drift`.
    pub drift: Option<Drift>,
    /// Why the run ended before every test was measured (interrupted, an error), and which
    /// tests are missing; `None` for a complete run. A test is in [`BenchResults::tests`] only
    /// once all its runs were measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<String>,
    /// The test whose measured runs were under way when the run ended: the runs that
    /// finished (fewer than `settings.runs`), their median, no profiled run. Kept so that an
    /// interrupted bench loses no finished run; `None` once every test has finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unfinished: Option<TestResult>,
}

impl BenchResults {
    /// Failed requests over every measured run of every test.
    pub fn failed_requests(&self) -> u64 {
        self.tests.iter().map(|t| t.failed_requests).sum()
    }

    /// Marks the results partial: `why` the run ended, and the tests of the settings that
    /// have no result.
    /// have no result; an [`unfinished`](Self::unfinished) test is named with its count of
    /// finished runs.
    pub fn mark_partial(&mut self, why: &str) {
        let unfinished = self.unfinished.as_ref().filter(|u| !u.runs.is_empty());
        let missing: Vec<&str> = self
            .settings
            .tests
            .iter()
            .filter(|t| !self.tests.iter().any(|r| r.test == **t) && unfinished.is_none_or(|u| u.test != **t))
            .map(|t| t.name())
            .collect();
        let mut text = why.to_string();
        if let Some(u) = unfinished {
            let planned = self.settings.runs.max(1);
            text += &match u.runs.len() as u32 >= planned {
                true => format!("; unfinished: {} (all {planned} runs; the profiled run did not finish)", u.test.name()),
                false => format!("; unfinished: {} ({} of {planned} runs, not profiled)", u.test.name(), u.runs.len()),
            };
        }
        if !missing.is_empty() {
            text += &format!("; not measured: {}", missing.join(", "));
        }
        self.partial = Some(text);
    }
}

/// Median of the finite values of `values` (the mean of the two middle ones for an even
/// count); `None` when there is none.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupted_run_names_why_and_what_is_missing() {
        let mut r = BenchResults::default();
        r.settings.tests = vec![Test::Json, Test::Db, Test::DealsCreate];
        r.tests.push(TestResult {
            test: Test::Json,
            request: Test::Json.request().to_string(),
            runs: vec![],
            median_index: 0,
            req_per_s: 1.0,
            latency: Latency::default(),
            failed_requests: 0,
            app_peak_rss_bytes: 0,
            profiled: None,
            profile_error: None,
        });
        r.mark_partial("interrupted (Ctrl-C or SIGTERM)");
        assert_eq!(r.partial.as_deref(), Some("interrupted (Ctrl-C or SIGTERM); not measured: db, deals-create"));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["partial"], "interrupted (Ctrl-C or SIGTERM); not measured: db, deals-create");
        r.tests.clear(); // the table's rows need measured runs
        assert!(crate::render::summary::bench_table(&r).starts_with("PARTIAL: interrupted (Ctrl-C or SIGTERM); not measured: db, deals-create\n"));
        // A complete run has no such field, and files without it still read.
        let complete = BenchResults::default();
        assert!(serde_json::to_value(&complete).unwrap().get("partial").is_none());
        let back: BenchResults = serde_json::from_value(serde_json::to_value(&complete).unwrap()).unwrap();
        assert_eq!(back.partial, None);
        assert!(back.unfinished.is_none());
    }

    #[test]
    fn an_interrupted_test_keeps_its_finished_runs() {
        let run = |req_per_s: f64| RunResult {
            wrk: WrkResult {
                test: Test::Db,
                requests: (req_per_s * 5.0) as u64,
                duration_us: 5_000_000,
                req_per_s,
                bytes: 0,
                errors: Default::default(),
                non_2xx: 0,
                latency: Latency { p50_us: 2_500, p99_us: 9_000, ..Default::default() },
            },
            app: Usage { cpu: 0.9, ..Default::default() },
            postgres: None,
        };
        let mut r = BenchResults::default();
        r.settings.tests = vec![Test::Db, Test::DealsCreate];
        r.settings.runs = 3;
        r.unfinished = Some(TestResult::from_runs(Test::Db, vec![run(9_000.0), run(8_000.0)]));
        r.mark_partial("interrupted (Ctrl-C or SIGTERM)");
        assert_eq!(
            r.partial.as_deref(),
            Some("interrupted (Ctrl-C or SIGTERM); unfinished: db (2 of 3 runs, not profiled); not measured: deals-create")
        );
        let table = crate::render::summary::bench_table(&r);
        let row = table.lines().find(|l| l.starts_with("db ")).expect("a row for the unfinished test");
        // The median of two runs is the faster one (index len / 2 of the sorted runs).
        assert!(row.contains(" 9000 ") && row.ends_with("unfinished 2/3"), "{row}");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["unfinished"]["runs"].as_array().unwrap().len(), 2);
        let back: BenchResults = serde_json::from_value(json).unwrap();
        assert_eq!(back, r);
    }
}
