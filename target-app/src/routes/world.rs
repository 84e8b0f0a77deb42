//! `/json`, `/db`, `/queries`: the TechEmpower-style tests.

use axum::extract::{Query, State};
use axum::Json;
use serde::Serialize;

use super::query_param;
use crate::db::world::{self, World};
use crate::error::AppError;
use crate::state::AppState;

/// Rows of `world`: ids are 1..=`WORLD_ROWS`.
pub const WORLD_ROWS: i32 = 10_000;
/// The most queries `/queries` runs.
pub const MAX_QUERIES: usize = 500;

/// `{"message":"Hello, World!"}`.
#[derive(Debug, Serialize)]
pub struct Message {
    /// Always `Hello, World!`.
    pub message: &'static str,
}

/// `GET /json`.
pub async fn world_json() -> Json<Message> {
    Json(Message { message: "Hello, World!" })
}

/// A random world id from the thread-local wyrand generator of `fastrand`.
fn random_id() -> i32 {
    fastrand::i32(1..=WORLD_ROWS)
}

/// `GET /db`: one random row, straight from the pool (no transaction).
pub async fn world_db(State(state): State<AppState>) -> Result<Json<World>, AppError> {
    Ok(Json(world::find(&state.pool, random_id()).await?))
}

/// The `queries` parameter (bench/SPEC.md, "Query parameters"): parsed as an `i64`;
/// anything that does not parse (missing, empty, `abc`, `1.5`, beyond `i64`) counts as 1;
/// then clamped to 1..=500.
pub fn queries_count(raw: Option<&str>) -> usize {
    raw.and_then(|r| r.parse::<i64>().ok()).unwrap_or(1).clamp(1, MAX_QUERIES as i64) as usize
}

/// `GET /queries?queries=N`: N random rows, one query after another.
pub async fn world_queries(
    State(state): State<AppState>,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Json<Vec<World>>, AppError> {
    let n = queries_count(query_param(&params, "queries"));
    let mut rows = Vec::with_capacity(n);
    for _ in 0..n {
        rows.push(world::find(&state.pool, random_id()).await?);
    }
    Ok(Json(rows))
}

#[cfg(test)]
mod tests {
    use super::queries_count;

    #[test]
    fn clamping() {
        assert_eq!(queries_count(None), 1);
        assert_eq!(queries_count(Some("")), 1);
        assert_eq!(queries_count(Some("foo")), 1);
        assert_eq!(queries_count(Some("-5")), 1);
        assert_eq!(queries_count(Some("0")), 1);
        assert_eq!(queries_count(Some("20")), 20);
        assert_eq!(queries_count(Some("500")), 500);
        assert_eq!(queries_count(Some("501")), 500);
        assert_eq!(queries_count(Some("99999999999999999999999")), 1);
        assert_eq!(queries_count(Some("-99999999999999999999999")), 1);
        assert_eq!(queries_count(Some("2.5")), 1);
    }
}
