//! All SQL of the app. Tables are defined by `bench/sql/schema.sql`; the app only reads and
//! writes (no migrations on boot).

pub mod deals;
pub mod users;
pub mod world;

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool};

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

/// Checks that PostgreSQL answers with one direct connection (so that a refused connection
/// or a bad password is reported as such at once, not as a pool timeout), closes it, and
/// returns the pool, which opens its connections on demand.
///
/// # Errors
/// The sqlx error of that connection (bad URL, refused, authentication, no such database).
pub async fn connect(url: &str, costs: Costs, max_connections: u32) -> Result<PgPool, sqlx::Error> {
    let options: PgConnectOptions = url.parse()?;
    let probe = PgConnection::connect_with(&options).await?;
    probe.close().await?;
    Ok(pool_options(costs, max_connections).connect_lazy_with(options))
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
