//! Bearer-token authentication (bench/SPEC.md, "Authentication") and the provider registry
//! the current-user extractor looks the auth service up in.
//!
//! Tokens: HS256 JWTs with the shared secret `JWT_SECRET`; claims `sub` (user id as a
//! string), `iss` = `crm-bench`, `exp` (required, in the future; no leeway), `typ` = `access`.

use std::any::Any;
use std::sync::Arc;

use axum::http::HeaderValue;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use sqlx::PgConnection;

use crate::db::users::{self, UserSummary};
use crate::error::{AppError, AuthError};

/// The required `iss` claim.
pub const ISSUER: &str = "crm-bench";
/// The required `typ` claim.
pub const TOKEN_TYPE: &str = "access";

#[derive(Debug, Deserialize)]
struct Claims {
    sub: String,
    #[serde(default)]
    typ: Option<String>,
}

/// What the authentication layer learnt from a request's `Authorization` header; put in
/// the request extensions for the access check and the unit of work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Authentication {
    /// No `Authorization` header.
    Anonymous,
    /// A valid access token for user `user_id` (not yet checked against the database).
    Verified {
        /// The `sub` claim.
        user_id: i64,
    },
    /// A header that was present but refused.
    Rejected(AuthError),
}

/// Verifies tokens and loads the signed-in user.
pub struct AuthService {
    key: DecodingKey,
    validation: Validation,
}

impl std::fmt::Debug for AuthService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthService").finish_non_exhaustive()
    }
}

impl AuthService {
    /// A verifier for HS256 tokens signed with `secret`.
    pub fn new(secret: &[u8]) -> AuthService {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 0;
        validation.validate_exp = true;
        validation.validate_aud = false;
        validation.set_issuer(&[ISSUER]);
        validation.set_required_spec_claims(&["exp", "iss", "sub"]);
        AuthService { key: DecodingKey::from_secret(secret), validation }
    }

    /// Authenticates one `Authorization` header value (`None`: no header).
    pub fn authenticate(&self, header: Option<&HeaderValue>) -> Authentication {
        let Some(header) = header else { return Authentication::Anonymous };
        match self.verify(header) {
            Ok(user_id) => Authentication::Verified { user_id },
            Err(e) => Authentication::Rejected(e),
        }
    }

    fn verify(&self, header: &HeaderValue) -> Result<i64, AuthError> {
        let value = header.to_str().map_err(|_| AuthError::WrongScheme)?;
        let (scheme, token) = value.split_once(' ').unwrap_or((value, ""));
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(AuthError::WrongScheme);
        }
        let token = token.trim();
        if token.is_empty() {
            return Err(AuthError::EmptyToken);
        }
        let data = jsonwebtoken::decode::<Claims>(token, &self.key, &self.validation)
            .map_err(|_| AuthError::InvalidToken)?;
        if data.claims.typ.as_deref() != Some(TOKEN_TYPE) {
            return Err(AuthError::WrongType);
        }
        let sub = &data.claims.sub;
        if sub.is_empty() || !sub.bytes().all(|b| b.is_ascii_digit()) {
            return Err(AuthError::BadSubject);
        }
        sub.parse::<i64>().map_err(|_| AuthError::BadSubject)
    }

    /// Loads the user `id` in the request's transaction: every column when `wide`
    /// (the `wide-user-lookup` cost), else `id, name, email`.
    ///
    /// # Errors
    /// [`AuthError::UnknownUser`] when no such user; the database error otherwise.
    pub async fn load_user(&self, conn: &mut PgConnection, id: i64, wide: bool) -> Result<UserSummary, AppError> {
        let user = if wide {
            users::find_record(conn, id).await?.map(UserSummary::from)
        } else {
            users::find_summary(conn, id).await?
        };
        user.ok_or(AppError::Unauthorized(AuthError::UnknownUser))
    }
}

/// A service registered with the app, found by name (as a DI container would).
pub trait Provider: Send + Sync + 'static {
    /// The registration name.
    fn name(&self) -> &str;
    /// For downcasting to the concrete service.
    fn as_any(&self) -> &dyn Any;
}

/// The registration name of the [`AuthService`].
pub const AUTH_PROVIDER: &str = "auth";

impl Provider for AuthService {
    fn name(&self) -> &str {
        AUTH_PROVIDER
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A registered service the CRM does not use on the request path (mailer, cache, ...).
#[derive(Debug)]
struct NamedService {
    name: String,
}

impl Provider for NamedService {
    fn name(&self) -> &str {
        &self.name
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The names of the other 39 registered services, in registration order.
const OTHER_PROVIDERS: [&str; 39] = [
    "config", "clock", "logger", "tracer", "metrics", "health", "shutdown", "secrets", "crypto",
    "password_hasher", "totp", "session_store", "csrf", "cors", "mailer", "mail_templates", "sms",
    "push", "cache", "object_store", "uploads", "image_resizer", "search", "search_indexer",
    "queue", "scheduler", "jobs", "webhooks", "outbox", "audit_log", "feature_flags", "i18n",
    "currency", "tax", "pdf", "csv_export", "reports", "billing", "notifications",
];

/// Every registered service, in registration order; the auth service is registered last.
#[derive(Clone)]
pub struct Providers(Arc<[Arc<dyn Provider>]>);

impl Providers {
    /// The registry of the CRM app: 39 other services, then `auth`.
    pub fn new(auth: Arc<AuthService>) -> Providers {
        let mut all: Vec<Arc<dyn Provider>> =
            OTHER_PROVIDERS.iter().map(|n| Arc::new(NamedService { name: n.to_string() }) as Arc<dyn Provider>).collect();
        all.push(auth);
        Providers(all.into())
    }

    /// Number of registered services (40).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none is registered.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Finds the auth service by comparing the name of every provider, then downcasting
    /// (the `wide-user-lookup` cost's lookup). Not inlined, so that a uprobe can count it.
    #[inline(never)]
    pub fn scan_for_auth(&self) -> Option<&AuthService> {
        self.0
            .iter()
            .filter(|p| p.name() == AUTH_PROVIDER)
            .find_map(|p| p.as_any().downcast_ref::<AuthService>())
    }
}
