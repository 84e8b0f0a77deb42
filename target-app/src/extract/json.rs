//! `ValidJson<T>`: a JSON request body, parsed and validated.
//!
//! Order of checks: `Content-Type` must be `application/json` or `application/<x>+json`
//! (else 415); the body is read under the 2 MiB limit (else 413); it must be well-formed JSON
//! (else 400 `malformed_json`) holding an object (else 400 `validation_failed` on `body`);
//! then `T`'s own validation gives 400 `validation_failed` with `fields`.
//!
//! With the `double-json-parse` cost on, the body is parsed into a `serde_json::Value` first
//! and the DTO deserialized from that; off, the DTO is deserialized straight from the bytes.
//! DTOs never fail on a field's type (they collect field errors instead), so both paths give
//! the same answers; duplicate keys take the last value in both (as `Value` does).

use axum::body::Body;
use axum::extract::{FromRequest, Request};
use axum::http::header;
use serde::de::DeserializeOwned;
use serde_json::error::Category;

use crate::costs::Cost;
use crate::error::{AppError, FieldErrors};
use crate::state::AppState;

/// A DTO that validates itself into `Output`.
pub trait Validate: Sized {
    /// The validated value.
    type Output;
    /// The value, or the field errors (field name -> messages).
    ///
    /// # Errors
    /// The field errors.
    fn validate(self) -> Result<Self::Output, FieldErrors>;
}

/// A validated JSON body: `T::Output`.
#[derive(Debug)]
pub struct ValidJson<T: Validate>(pub T::Output);

/// Whether `content_type` is JSON: `application/json` or `application/*+json`, any params.
pub fn is_json_content_type(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Parses the body into `T`, through a `serde_json::Value` when `double`.
///
/// # Errors
/// [`AppError::MalformedJson`] for malformed JSON, [`AppError::Validation`] on `body` for
/// valid JSON that is not an object.
pub fn parse_body<T: DeserializeOwned>(bytes: &[u8], double: bool) -> Result<T, AppError> {
    let parsed = if double {
        parse_json_value(bytes).and_then(|v| T::deserialize(v))
    } else {
        serde_json::from_slice::<T>(bytes)
    };
    parsed.map_err(|e| match e.classify() {
        // Our DTOs never fail on a field's type: a data error means "not an object".
        Category::Data => AppError::field("body", "must be a JSON object"),
        Category::Syntax | Category::Eof | Category::Io => AppError::MalformedJson("malformed JSON body"),
    })
}

/// Parses bytes into a generic `serde_json::Value` (the first parse of the
/// `double-json-parse` cost). Not inlined, so that a uprobe counts it.
#[inline(never)]
pub fn parse_json_value(bytes: &[u8]) -> Result<serde_json::Value, serde_json::Error> {
    serde_json::from_slice(bytes)
}

fn is_length_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if err.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = err.source();
    }
    false
}

impl<T> FromRequest<AppState> for ValidJson<T>
where
    T: Validate + DeserializeOwned,
{
    type Rejection = AppError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, AppError> {
        let content_type = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        if !is_json_content_type(content_type) {
            return Err(AppError::UnsupportedMediaType);
        }
        let body: Body = req.into_body();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.map_err(|e| {
            if is_length_limit(&e) {
                AppError::PayloadTooLarge
            } else {
                AppError::MalformedJson("the request body could not be read")
            }
        })?;
        let dto: T = parse_body(&bytes, state.costs.on(Cost::DoubleJsonParse))?;
        dto.validate().map(ValidJson).map_err(AppError::Validation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types() {
        assert!(is_json_content_type("application/json"));
        assert!(is_json_content_type("Application/JSON; charset=utf-8"));
        assert!(is_json_content_type("application/merge-patch+json"));
        assert!(!is_json_content_type("text/plain"));
        assert!(!is_json_content_type(""));
        assert!(!is_json_content_type("application/jsonx"));
    }
}
