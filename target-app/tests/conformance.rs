//! The whole `bench::conformance` suite (bench/SPEC.md and its "Choices where the contract is
//! silent") against the app on a freshly seeded PostgreSQL: 0 failures and at least 150
//! checks, with all costs on (the built binary, as shipped) and with none (in-process via
//! `target_app::app`): the costs change the work, never the answers.

mod common;

use common::{serve_in_process, spawn_binary, Db, SECRET};
use target_app::Costs;

fn assert_clean(report: &bench::conformance::Report, what: &str) {
    let failures: Vec<String> = report
        .failures()
        .map(|c| format!("  FAIL {}: {}", c.name, c.detail.as_deref().unwrap_or("")))
        .collect();
    assert!(failures.is_empty(), "{what}: {}\n{}", report.summary_line(), failures.join("\n"));
    assert!(report.checks.len() >= 150, "{what}: only {} checks ran", report.checks.len());
    println!("{what}: {}", report.summary_line());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_all_costs_on_binary() {
    let db = Db::start();
    let app = tokio::task::spawn_blocking({
        let url = db.url.clone();
        move || spawn_binary(&[("DATABASE_URL", &url), ("CRM_COSTS", "all")])
    })
    .await
    .unwrap();
    let report = bench::conformance::run(&app.base, SECRET).await;
    assert_clean(&report, "CRM_COSTS=all (binary)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_no_costs_in_process() {
    let db = Db::start();
    let app = serve_in_process(&db.url, Costs::NONE, 16).await;
    let report = bench::conformance::run(&app.base, SECRET).await;
    assert_clean(&report, "CRM_COSTS=none (in-process)");
}
