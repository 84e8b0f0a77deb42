//! Layer 6: every error response gets the SPEC error shape. Responses rendered from an
//! [`crate::error::AppError`] pass untouched; bare ones from axum or tower-http (404 from the
//! fallback, 405 with `Allow` from the method router, 413 from the body limit, ...) get a
//! JSON body for their status, keeping their other headers.

use std::convert::Infallible;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::response::Response;
use tower::{Layer, Service};

use super::BoxFuture;
use crate::error::{error_response, RenderedError};

/// The error-rendering layer.
#[derive(Debug, Clone, Copy, Default)]
pub struct ErrorRenderingLayer;

/// The error-rendering layer.
pub fn layer() -> ErrorRenderingLayer {
    ErrorRenderingLayer
}

impl<S> Layer<S> for ErrorRenderingLayer {
    type Service = ErrorRendering<S>;
    fn layer(&self, inner: S) -> Self::Service {
        ErrorRendering { inner }
    }
}

/// The service of [`ErrorRenderingLayer`].
#[derive(Debug, Clone)]
pub struct ErrorRendering<S> {
    inner: S,
}

/// `code` and `message` for a bare error status.
pub fn describe(status: StatusCode) -> (&'static str, &'static str) {
    match status {
        StatusCode::BAD_REQUEST => ("bad_request", "the request is malformed"),
        StatusCode::UNAUTHORIZED => ("unauthorized", "authentication required"),
        StatusCode::NOT_FOUND => ("not_found", "no such route"),
        StatusCode::METHOD_NOT_ALLOWED => ("method_not_allowed", "method not allowed on this route"),
        StatusCode::PAYLOAD_TOO_LARGE => ("payload_too_large", "request body is larger than 2 MiB"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ("unsupported_media_type", "request body must be application/json"),
        StatusCode::TOO_MANY_REQUESTS => ("rate_limited", "too many requests from this client"),
        StatusCode::SERVICE_UNAVAILABLE => ("unavailable", "the service is unavailable"),
        s if s.is_server_error() => ("internal_error", "internal server error"),
        _ => ("bad_request", "the request cannot be served"),
    }
}

/// Re-renders `res` in the error shape when it is a bare error response.
pub fn render(res: Response) -> Response {
    let status = res.status();
    if !(status.is_client_error() || status.is_server_error()) || res.extensions().get::<RenderedError>().is_some() {
        return res;
    }
    let (code, message) = describe(status);
    let (mut parts, _) = res.into_parts();
    let rendered = error_response(status, code, message, None);
    let (new_parts, body) = rendered.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(header::CONTENT_TYPE, new_parts.headers[header::CONTENT_TYPE].clone());
    parts.extensions.insert(RenderedError);
    Response::from_parts(parts, body)
}

impl<S, ReqB> Service<Request<ReqB>> for ErrorRendering<S>
where
    S: Service<Request<ReqB>, Response = Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<Result<Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let fut = self.inner.call(req);
        Box::pin(async move { Ok(render(fut.await?)) })
    }
}
