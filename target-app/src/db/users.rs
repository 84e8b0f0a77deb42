//! The `users` table.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;

/// What the API shows of a user (also the `owner` of a deal): `{"id","name","email"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct UserSummary {
    /// User id.
    pub id: i64,
    /// Display name.
    pub name: String,
    /// Email address.
    pub email: String,
}

/// Every column of a `users` row, secrets included (what the `wide-user-lookup` cost loads).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct UserRecord {
    /// User id.
    pub id: i64,
    /// Email address.
    pub email: String,
    /// Display name.
    pub name: String,
    /// Password hash (never leaves the app).
    pub password_hash: String,
    /// TOTP secret, if two-factor is set up.
    pub totp_secret: Option<String>,
    /// Recovery codes, if two-factor is set up.
    pub recovery_codes: Option<String>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
}

impl From<UserRecord> for UserSummary {
    fn from(u: UserRecord) -> Self {
        UserSummary { id: u.id, name: u.name, email: u.email }
    }
}

/// `SELECT id, name, email FROM users WHERE id = $1`.
///
/// # Errors
/// The sqlx error.
pub async fn find_summary(conn: &mut PgConnection, id: i64) -> Result<Option<UserSummary>, sqlx::Error> {
    sqlx::query_as::<_, UserSummary>("SELECT id, name, email FROM users WHERE id = $1")
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// Every column: `SELECT id, email, name, password_hash, totp_secret, recovery_codes,
/// created_at FROM users WHERE id = $1`.
///
/// # Errors
/// The sqlx error.
pub async fn find_record(conn: &mut PgConnection, id: i64) -> Result<Option<UserRecord>, sqlx::Error> {
    sqlx::query_as::<_, UserRecord>(
        "SELECT id, email, name, password_hash, totp_secret, recovery_codes, created_at FROM users WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// The users with these ids (one query; order unspecified).
///
/// # Errors
/// The sqlx error.
pub async fn find_summaries(conn: &mut PgConnection, ids: &[i64]) -> Result<Vec<UserSummary>, sqlx::Error> {
    sqlx::query_as::<_, UserSummary>("SELECT id, name, email FROM users WHERE id = ANY($1)")
        .bind(ids)
        .fetch_all(conn)
        .await
}
