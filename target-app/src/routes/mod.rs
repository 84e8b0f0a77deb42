//! The router, the access check of protected routes, and the handlers
//! (`<resource>_<action>`).

pub mod deals;
pub mod world;

use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::auth::Authentication;
use crate::error::{AppError, AuthError};
use crate::state::AppState;

/// The routes of bench/SPEC.md, without the pipeline: `/json`, `/db`, `/queries` (public)
/// and `/api/deals` (GET, POST; signed-in users only). Unknown routes: 404.
pub fn router() -> Router<AppState> {
    let api = Router::new()
        .route("/api/deals", get(deals::deals_list).post(deals::deals_create))
        .route_layer(middleware::from_fn(require_signed_in));
    Router::new()
        .route("/json", get(world::world_json))
        .route("/db", get(world::world_db))
        .route("/queries", get(world::world_queries))
        .merge(api)
        .fallback(not_found)
}

/// The access check of `/api/*`: any signed-in user (a verified token). Everything else is a
/// 401 saying what was wrong with the token.
pub async fn require_signed_in(req: Request, next: Next) -> Response {
    match req.extensions().get::<Authentication>() {
        Some(Authentication::Verified { .. }) => next.run(req).await,
        Some(Authentication::Rejected(e)) => AppError::Unauthorized(*e).into_response(),
        Some(Authentication::Anonymous) | None => AppError::Unauthorized(AuthError::MissingHeader).into_response(),
    }
}

async fn not_found() -> AppError {
    AppError::NotFound
}

/// The first value of `name` in a decoded query string.
pub(crate) fn query_param<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}
