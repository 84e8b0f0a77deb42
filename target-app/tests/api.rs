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
