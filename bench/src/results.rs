//! `results.json`: the records are the profiler library's ([`profiler::runs`]), which reads them
//! back in `profiler diff` and the bench page.

pub use profiler::runs::{BenchResults, ConformanceResult, Drift, ProfiledRun, RunResult, Settings, TestResult, Versions, RESULTS_SCHEMA_VERSION};
