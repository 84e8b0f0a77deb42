//! All SQL of the app. Tables are defined by `bench/sql/schema.sql`; the app only reads and
//! writes (no migrations on boot).

pub mod deals;
pub mod users;
pub mod world;

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgConnection, PgPool};

use crate::costs::{Cost, Costs};

/// The pool as the app runs it: `max_connections` = `DB_POOL_SIZE`, and sqlx's
/// `test_before_acquire` (a ping, i.e. a lone `Sync` round trip, before handing out an idle
/// connection) exactly when the `pool-ping` cost is on. The pool opens connections lazily.
pub fn pool_options(costs: Costs, max_connections: u32) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .min_connections(0)
        .acquire_timeout(Duration::from_secs(10))
        .test_before_acquire(costs.on(Cost::PoolPing))
}

/// Opens the pool and checks that PostgreSQL answers (one connection is opened).
///
/// # Errors
/// The sqlx error of the first connection attempt (bad URL, refused, authentication).
pub async fn connect(url: &str, costs: Costs, max_connections: u32) -> Result<PgPool, sqlx::Error> {
    let options: PgConnectOptions = url.parse()?;
    pool_options(costs, max_connections).connect_with(options).await
}

/// `SELECT set_config('app.actor', $1, true)`: the actor of the current transaction, for
/// auditing triggers (the `actor-set-config` cost; one round trip).
///
/// # Errors
/// The sqlx error.
pub async fn set_actor(conn: &mut PgConnection, actor: &str) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT set_config('app.actor', $1, true)").bind(actor).execute(conn).await?;
    Ok(())
}
