//! The one error type of the HTTP surface and its JSON shape (bench/SPEC.md, "Errors"):
//! `{"error":{"code":"<snake_case>","message":"<human text>","fields":{...}}}`, with `fields`
//! (field name -> list of messages) only on validation errors.

use std::collections::BTreeMap;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// Field name -> messages, in name order (a stable JSON object for clients and tests).
pub type FieldErrors = BTreeMap<String, Vec<String>>;

/// Why a bearer token was refused. All of them are 401s; the message says which.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization` header.
    #[error("missing bearer token")]
    MissingHeader,
    /// A header that is not `Bearer <token>` (another scheme, or not visible ASCII).
    #[error("the Authorization header must use the Bearer scheme")]
    WrongScheme,
    /// `Bearer` with nothing after it.
    #[error("empty bearer token")]
    EmptyToken,
    /// Not a JWT, a bad signature, another algorithm, expired, wrong issuer, a missing claim.
    #[error("invalid or expired token")]
    InvalidToken,
    /// A valid JWT whose `typ` claim is not `access`.
    #[error("the token is not an access token")]
    WrongType,
    /// `sub` is not a user id.
    #[error("the token subject is not a user id")]
    BadSubject,
    /// `sub` names no user in the database.
    #[error("unknown user")]
    UnknownUser,
}

/// Every error the API answers with. `IntoResponse` renders the SPEC shape; internal
/// errors are logged with their cause and answered with a fixed message (never SQL text or
/// a backtrace).
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// 400 `validation_failed`, with `fields`.
    #[error("validation failed")]
    Validation(FieldErrors),
    /// 400 `malformed_json`: a body that is not syntactically valid JSON.
    #[error("{0}")]
    MalformedJson(&'static str),
    /// 401 `unauthorized`.
    #[error(transparent)]
    Unauthorized(#[from] AuthError),
    /// 404 `not_found`.
    #[error("no such route")]
    NotFound,
    /// 413 `payload_too_large`: body over 2 MiB.
    #[error("request body is larger than 2 MiB")]
    PayloadTooLarge,
    /// 415 `unsupported_media_type`: a body without `Content-Type: application/json`.
    #[error("request body must be application/json")]
    UnsupportedMediaType,
    /// 429 `rate_limited`.
    #[error("too many requests from this client")]
    RateLimited,
    /// 503 `maintenance`.
    #[error("the service is in maintenance mode")]
    Maintenance,
    /// 500 `internal_error`: a database error.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// 500 `internal_error`: anything else that should not happen.
    #[error("internal error: {0}")]
    Internal(String),
}

/// Marker put in the extensions of every response rendered from an [`AppError`], so that
/// the error-rendering layer leaves them alone.
#[derive(Debug, Clone, Copy)]
pub struct RenderedError;

#[derive(Serialize)]
struct Envelope<'a> {
    error: Body<'a>,
}

#[derive(Serialize)]
struct Body<'a> {
    code: &'a str,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    fields: Option<&'a FieldErrors>,
}

impl AppError {
    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            AppError::Validation(_) | AppError::MalformedJson(_) => StatusCode::BAD_REQUEST,
            AppError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            AppError::NotFound => StatusCode::NOT_FOUND,
            AppError::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            AppError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            AppError::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            AppError::Maintenance => StatusCode::SERVICE_UNAVAILABLE,
            AppError::Database(_) | AppError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The snake_case `code` of the error body.
    pub fn code(&self) -> &'static str {
        match self {
            AppError::Validation(_) => "validation_failed",
            AppError::MalformedJson(_) => "malformed_json",
            AppError::Unauthorized(_) => "unauthorized",
            AppError::NotFound => "not_found",
            AppError::PayloadTooLarge => "payload_too_large",
            AppError::UnsupportedMediaType => "unsupported_media_type",
            AppError::RateLimited => "rate_limited",
            AppError::Maintenance => "maintenance",
            AppError::Database(_) | AppError::Internal(_) => "internal_error",
        }
    }

    /// One validation error on one field.
    pub fn field(name: &str, message: impl Into<String>) -> AppError {
        let mut fields = FieldErrors::new();
        fields.insert(name.to_string(), vec![message.into()]);
        AppError::Validation(fields)
    }
}

/// Renders the SPEC error body for `status` with `code` and `message`, marked as rendered.
pub fn error_response(status: StatusCode, code: &str, message: &str, fields: Option<&FieldErrors>) -> Response {
    let body = serde_json::to_vec(&Envelope { error: Body { code, message, fields } })
        .unwrap_or_else(|_| br#"{"error":{"code":"internal_error","message":"internal server error"}}"#.to_vec());
    let mut response = (status, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body)
        .into_response();
    response.extensions_mut().insert(RenderedError);
    response
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let status = self.status();
        let message = match &self {
            AppError::Database(e) => {
                tracing::error!(error = %e, "database error");
                "internal server error".to_string()
            }
            AppError::Internal(e) => {
                tracing::error!(error = %e, "internal error");
                "internal server error".to_string()
            }
            AppError::Validation(_) => "the request is invalid".to_string(),
            other => other.to_string(),
        };
        let fields = match &self {
            AppError::Validation(f) => Some(f),
            _ => None,
        };
        let mut response = error_response(status, self.code(), &message, fields);
        match self {
            AppError::Unauthorized(_) => {
                response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            AppError::RateLimited | AppError::Maintenance => {
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        response
    }
}
