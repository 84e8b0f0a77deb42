//! The `deals` table.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;

/// A `deals` row as the API reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct DealRow {
    /// Deal id.
    pub id: i64,
    /// The owning user's id.
    pub owner_id: i64,
    /// Title, 1..=200 characters.
    pub title: String,
    /// Amount in cents, 0..=10^12.
    pub amount_cents: i64,
    /// One of the six stages.
    pub stage: String,
    /// Creation time (UTC).
    pub created_at: DateTime<Utc>,
}

/// `SELECT count(*) FROM deals`.
///
/// # Errors
/// The sqlx error.
pub async fn count(conn: &mut PgConnection) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar::<_, i64>("SELECT count(*) FROM deals").fetch_one(conn).await
}

/// One page, newest first (`created_at DESC, id DESC`, served by the index of the schema).
///
/// # Errors
/// The sqlx error.
pub async fn page(conn: &mut PgConnection, limit: i64, offset: i64) -> Result<Vec<DealRow>, sqlx::Error> {
    sqlx::query_as::<_, DealRow>(
        "SELECT id, owner_id, title, amount_cents, stage, created_at FROM deals \
         ORDER BY created_at DESC, id DESC LIMIT $1 OFFSET $2",
    )
    .bind(limit)
    .bind(offset)
    .fetch_all(conn)
    .await
}

/// `INSERT ... RETURNING` the new row (`created_at` = `updated_at` = the transaction's `now()`).
///
/// # Errors
/// The sqlx error.
pub async fn insert(
    conn: &mut PgConnection,
    owner_id: i64,
    title: &str,
    amount_cents: i64,
    stage: &str,
) -> Result<DealRow, sqlx::Error> {
    sqlx::query_as::<_, DealRow>(
        "INSERT INTO deals (owner_id, title, amount_cents, stage, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, now(), now()) \
         RETURNING id, owner_id, title, amount_cents, stage, created_at",
    )
    .bind(owner_id)
    .bind(title)
    .bind(amount_cents)
    .bind(stage)
    .fetch_one(conn)
    .await
}
