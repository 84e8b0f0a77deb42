//! The `world` table (10,000 rows, `id` 1..=10000).

use serde::Serialize;
use sqlx::PgPool;

/// One `world` row, serialized as `{"id":N,"randomNumber":M}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct World {
    /// Primary key, 1..=10000.
    pub id: i32,
    /// 1..=10000.
    #[serde(rename = "randomNumber")]
    #[sqlx(rename = "randomnumber")]
    pub random_number: i32,
}

/// One row by primary key, straight from the pool (no transaction): one round trip
/// (plus the pool's ping while `pool-ping` is on).
///
/// # Errors
/// The sqlx error; `RowNotFound` when no row has this id.
pub async fn find(pool: &PgPool, id: i32) -> Result<World, sqlx::Error> {
    sqlx::query_as::<_, World>("SELECT id, randomnumber FROM world WHERE id = $1").bind(id).fetch_one(pool).await
}
