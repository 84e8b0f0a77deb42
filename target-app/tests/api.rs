//! Behaviour checks of the app in-process against a seeded PostgreSQL, beyond the
//! conformance suite: the unit of work's commit/rollback seen from psql, the security
//! headers, the request id, and that the same requests give the same answers with all costs
//! on and off.

mod common;

use common::{client, serve_in_process, token, Db};
use serde_json::Value;
use target_app::Costs;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke_all_endpoints_both_cost_settings() {
    let db = Db::start();
    for costs in [Costs::ALL, Costs::NONE] {
        let app = serve_in_process(&db.url, costs, 4).await;
        let c = client();
        let r = c.get(format!("{}/json", app.base)).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let h = r.headers().clone();
        assert_eq!(h["content-type"], "application/json");
        assert_eq!(h["x-frame-options"], "DENY");
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert_eq!(h["x-request-id"].len(), 36, "UUID text form with costs {costs}");
        assert_eq!(r.text().await.unwrap(), r#"{"message":"Hello, World!"}"#);

        let v: Value = c.get(format!("{}/db", app.base)).send().await.unwrap().json().await.unwrap();
        let id = v["id"].as_i64().unwrap();
        assert!((1..=10_000).contains(&id), "{v}");
        let psql = db.pg.psql(db.url.rsplit('/').next().unwrap(), &format!("SELECT randomnumber FROM world WHERE id = {id}")).unwrap();
        assert_eq!(v["randomNumber"].as_i64().unwrap().to_string(), psql.trim(), "row {id} as psql sees it");

        let v: Value = c.get(format!("{}/queries?queries=7", app.base)).send().await.unwrap().json().await.unwrap();
        assert_eq!(v.as_array().unwrap().len(), 7);

        let r = c.get(format!("{}/api/deals?page=2&per_page=5", app.base)).bearer_auth(token(1)).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["data"].as_array().unwrap().len(), 5, "{v}");
        assert_eq!(v["meta"]["page"], 2);

        let r = c.get(format!("{}/api/deals", app.base)).send().await.unwrap();
        assert_eq!(r.status(), 401);
        assert_eq!(r.headers()["www-authenticate"], "Bearer");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "unauthorized");

        let r = c.delete(format!("{}/api/deals", app.base)).bearer_auth(token(1)).send().await.unwrap();
        assert_eq!(r.status(), 405);
        assert!(r.headers().contains_key("allow"));
        assert_eq!(r.headers()["content-type"], "application/json");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "method_not_allowed");

        let r = c.delete(format!("{}/api/deals", app.base)).send().await.unwrap();
        assert_eq!(r.status(), 401, "authentication before method (SPEC choices)");

        let r = c.get(format!("{}/api/nope", app.base)).send().await.unwrap();
        assert_eq!(r.status(), 404);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "not_found");
    }
}

/// Serves the app with custom settings (rate limit, maintenance file).
async fn serve_with(url: &str, settings: target_app::Settings) -> (String, tokio::task::JoinHandle<()>) {
    let pool = target_app::db::connect(url, settings.costs, 4).await.unwrap();
    let state = target_app::AppState::new(pool, settings);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let handle = tokio::spawn(async move {
        axum::serve(listener, target_app::app(state).into_make_service_with_connect_info::<std::net::SocketAddr>()).await.unwrap();
    });
    (base, handle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_file_and_rate_limit_both_variants() {
    let db = Db::start();
    for costs in [Costs::ALL, Costs::NONE] {
        // Maintenance: on while the file exists, noticed within about a second either way.
        let dir = tempfile::tempdir().unwrap();
        let flag = dir.path().join("maintenance");
        std::fs::write(&flag, b"").unwrap();
        let mut settings = target_app::Settings::new(common::SECRET, costs);
        settings.maintenance_file = Some(flag.clone());
        let (base, handle) = serve_with(&db.url, settings).await;
        let c = client();
        let r = c.get(format!("{base}/json")).send().await.unwrap();
        assert_eq!(r.status(), 503, "costs {costs}");
        assert_eq!(r.headers()["retry-after"], "1");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "maintenance");
        std::fs::remove_file(&flag).unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
        assert_eq!(c.get(format!("{base}/json")).send().await.unwrap().status(), 200, "costs {costs}: back after 1 s");
        handle.abort();

        // Rate limit: a ceiling of 3 per second lets 3 through and refuses the 4th.
        let mut settings = target_app::Settings::new(common::SECRET, costs);
        settings.rate_limit_per_second = 3;
        let (base, handle) = serve_with(&db.url, settings).await;
        // Start right after a window boundary of the limiter's clock is not controllable from
        // here, so allow one window change: some 4 consecutive requests must see a 429.
        let mut statuses = Vec::new();
        for _ in 0..8 {
            statuses.push(c.get(format!("{base}/json")).send().await.unwrap().status().as_u16());
        }
        let first_429 = statuses.iter().position(|s| *s == 429).unwrap_or_else(|| panic!("no 429 in {statuses:?} (costs {costs})"));
        assert!(first_429 >= 3, "at least 3 allowed first: {statuses:?}");
        let r = c.get(format!("{base}/json")).send().await.unwrap();
        if r.status() == 429 {
            assert_eq!(r.headers()["retry-after"], "1");
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["error"]["code"], "rate_limited");
        }
        handle.abort();
    }
}
