//! The shared application state.

use std::ops::Deref;
use std::path::PathBuf;
use std::sync::Arc;

use sqlx::PgPool;

use crate::auth::{AuthService, Providers};
use crate::costs::{Cost, Costs};
use crate::events::ChangeEvents;
use crate::layers::maintenance::Maintenance;
use crate::layers::rate_limit::RateLimiter;

/// What [`AppState::new`] needs besides the pool.
#[derive(Debug, Clone)]
pub struct Settings {
    /// HS256 secret.
    pub jwt_secret: String,
    /// Costs switched on.
    pub costs: Costs,
    /// Rate-limit ceiling, requests per client IP per second.
    pub rate_limit_per_second: u32,
    /// Maintenance-mode flag file.
    pub maintenance_file: Option<PathBuf>,
}

impl Settings {
    /// Settings with the defaults of [`crate::config::Config`] for everything but the secret
    /// and the costs.
    pub fn new(jwt_secret: impl Into<String>, costs: Costs) -> Settings {
        Settings { jwt_secret: jwt_secret.into(), costs, rate_limit_per_second: 1_000_000, maintenance_file: None }
    }
}

/// Everything the handlers and layers share.
pub struct Shared {
    /// The PostgreSQL pool (built with [`crate::db::pool_options`] for the same costs).
    pub pool: PgPool,
    /// Costs switched on.
    pub costs: Costs,
    /// Token verification and user loading.
    pub auth: Arc<AuthService>,
    /// Every registered service (40; `auth` last).
    pub providers: Providers,
    /// The change-event bus.
    pub events: ChangeEvents,
    /// Maintenance mode.
    pub maintenance: Arc<Maintenance>,
    /// The per-IP rate limiter.
    pub rate_limiter: Arc<RateLimiter>,
}

/// The state handed to [`crate::app`] (cheap to clone).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    /// The state for `pool` and `settings`. The pool should come from
    /// [`crate::db::connect`] or [`crate::db::pool_options`] with the same costs, so that
    /// `pool-ping` holds.
    pub fn new(pool: PgPool, settings: Settings) -> AppState {
        let costs = settings.costs;
        let auth = Arc::new(AuthService::new(settings.jwt_secret.as_bytes()));
        let global_locks = costs.on(Cost::GlobalLocks);
        AppState(Arc::new(Shared {
            pool,
            costs,
            providers: Providers::new(auth.clone()),
            auth,
            events: ChangeEvents::default(),
            maintenance: Arc::new(Maintenance::new(settings.maintenance_file, global_locks)),
            rate_limiter: Arc::new(RateLimiter::new(settings.rate_limit_per_second, global_locks)),
        }))
    }
}

impl Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}
