//! Layer 9: request bodies over 2 MiB are refused with a 413 (tower-http
//! `RequestBodyLimitLayer`: at once for a `Content-Length` over the limit, while reading for
//! chunked bodies). The layer hands the response on as an axum `Body`.

use std::convert::Infallible;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{Request, Response};
use bytes::Bytes;
use http_body_util::Limited;
use tower::{Layer, Service};
use tower_http::limit::{RequestBodyLimit, RequestBodyLimitLayer};

use super::BoxFuture;

/// The SPEC's body limit: 2 MiB = 2,097,152 bytes.
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// The body-limit layer.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimitLayer {
    inner: RequestBodyLimitLayer,
}

/// The body-limit layer with [`MAX_BODY_BYTES`].
pub fn layer() -> BodyLimitLayer {
    BodyLimitLayer { inner: RequestBodyLimitLayer::new(MAX_BODY_BYTES) }
}

impl<S> Layer<S> for BodyLimitLayer {
    type Service = BodyLimit<RequestBodyLimit<S>>;
    fn layer(&self, inner: S) -> Self::Service {
        BodyLimit { inner: self.inner.layer(inner) }
    }
}

/// The service of [`BodyLimitLayer`].
#[derive(Debug, Clone)]
pub struct BodyLimit<S> {
    inner: S,
}

impl<S, ResB> Service<Request<Body>> for BodyLimit<S>
where
    S: Service<Request<Body>, Response = Response<ResB>, Error = Infallible>,
    S::Future: Send + 'static,
    ResB: axum::body::HttpBody<Data = Bytes> + Send + 'static,
    ResB::Error: Into<axum::BoxError>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let fut = self.inner.call(req);
        Box::pin(async move { Ok(fut.await?.map(Body::new)) })
    }
}

/// The request body type below this layer.
pub type LimitedBody = Limited<Body>;
