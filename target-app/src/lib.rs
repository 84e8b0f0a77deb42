//! The CRM API of the bundled benchmark (bench/SPEC.md): axum 0.8 + tower-http + sqlx 0.8
//! (PostgreSQL) + jsonwebtoken (HS256), with the SPEC's twelve-layer pipeline and its eight
//! switchable costs ([`costs`]).
//!
//! [`app`] builds the whole service without a server, so tests drive it in-process; the
//! `target-app` binary adds configuration ([`config::Config`]), the pool and the listener.

pub mod auth;
pub mod config;
pub mod costs;
pub mod db;
pub mod error;
pub mod events;
pub mod extract;
pub mod layers;
pub mod routes;
pub mod state;

use axum::extract::DefaultBodyLimit;
use axum::Router;
use tower::ServiceBuilder;

pub use config::Config;
pub use costs::{Cost, Costs};
pub use error::AppError;
pub use state::{AppState, Settings};

/// The app: the routes of [`routes::router`] behind the pipeline of [`layers`], outermost
/// first. Serve it with `into_make_service_with_connect_info::<SocketAddr>()` so that the
/// request context sees the client IP.
pub fn app(state: AppState) -> Router {
    let pipeline = ServiceBuilder::new()
        .layer(layers::request_context::layer(&state))
        .layer(layers::panic_catcher::layer())
        .layer(layers::timeout::layer())
        .layer(layers::security_headers::layer())
        .layer(layers::compression::layer())
        .layer(layers::error_rendering::layer())
        .layer(layers::maintenance::layer(state.maintenance.clone()))
        .layer(layers::rate_limit::layer(state.rate_limiter.clone()))
        .layer(layers::body_limit::layer())
        .layer(layers::authentication::layer(state.auth.clone()))
        .layer(layers::unit_of_work::layer(state.pool.clone(), state.costs));
    routes::router()
        // The body limit layer owns the 2 MiB limit.
        .layer(DefaultBodyLimit::disable())
        .layer(pipeline)
        .with_state(state)
}
