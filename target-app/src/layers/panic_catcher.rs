//! Layer 2: a panic anywhere below becomes a 500 in the SPEC error shape (tower-http
//! `CatchPanicLayer`); the panic message is logged, never sent.

use std::any::Any;

use axum::http::StatusCode;
use axum::response::Response;
use tower_http::catch_panic::CatchPanicLayer;

use crate::error::error_response;

/// The handler type of the layer.
pub type PanicHandler = fn(Box<dyn Any + Send + 'static>) -> Response;

/// The panic-catcher layer.
pub fn layer() -> CatchPanicLayer<PanicHandler> {
    CatchPanicLayer::custom(on_panic as PanicHandler)
}

fn on_panic(payload: Box<dyn Any + Send + 'static>) -> Response {
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(non-string panic payload)");
    tracing::error!(panic = message, "request handler panicked");
    error_response(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", "internal server error", None)
}
