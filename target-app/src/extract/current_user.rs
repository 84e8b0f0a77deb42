//! `CurrentUser`: the signed-in user, loaded in the request's unit of work.
//!
//! With the `wide-user-lookup` cost on, the auth service is found by scanning all 40
//! registered providers and the lookup selects every `users` column (password hash and
//! two-factor secrets included); off, the auth service is a direct field and the lookup is
//! `SELECT id, name, email`. A verified token whose user does not exist is a 401.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::auth::Authentication;
use crate::costs::Cost;
use crate::db::users::UserSummary;
use crate::error::{AppError, AuthError};
use crate::layers::unit_of_work::Uow;
use crate::state::AppState;

/// The signed-in user (`id`, `name`, `email`).
#[derive(Debug, Clone)]
pub struct CurrentUser(pub UserSummary);

impl FromRequestParts<AppState> for CurrentUser {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, AppError> {
        let user_id = match parts.extensions.get::<Authentication>() {
            Some(Authentication::Verified { user_id }) => *user_id,
            Some(Authentication::Rejected(e)) => return Err(AppError::Unauthorized(*e)),
            _ => return Err(AppError::Unauthorized(AuthError::MissingHeader)),
        };
        let uow = Uow::from_request_parts(parts, state).await?;
        let wide = state.costs.on(Cost::WideUserLookup);
        let auth = if wide {
            state.providers.scan_for_auth().ok_or_else(|| AppError::Internal("no auth provider registered".into()))?
        } else {
            &state.auth
        };
        let mut conn = uow.conn().await?;
        Ok(CurrentUser(auth.load_user(&mut conn, user_id, wide).await?))
    }
}
