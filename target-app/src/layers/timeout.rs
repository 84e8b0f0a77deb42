//! Layer 3: a request that takes longer than 30 s is answered with a 503 `timeout` in the
//! SPEC error shape (tower-http `TimeoutLayer`, whose bare 503 this layer renders).

use std::convert::Infallible;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use tower::{Layer, Service};
use tower_http::timeout::{Timeout, TimeoutLayer};

use super::BoxFuture;
use crate::error::error_response;

/// The request timeout of the SPEC: 30 s.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The timeout layer.
#[derive(Debug, Clone)]
pub struct RequestTimeoutLayer {
    inner: TimeoutLayer,
}

/// The timeout layer with [`REQUEST_TIMEOUT`].
pub fn layer() -> RequestTimeoutLayer {
    RequestTimeoutLayer { inner: TimeoutLayer::with_status_code(StatusCode::SERVICE_UNAVAILABLE, REQUEST_TIMEOUT) }
}

impl<S> Layer<S> for RequestTimeoutLayer {
    type Service = RequestTimeout<Timeout<S>>;
    fn layer(&self, inner: S) -> Self::Service {
        RequestTimeout { inner: self.inner.layer(inner) }
    }
}

/// The service of [`RequestTimeoutLayer`].
#[derive(Debug, Clone)]
pub struct RequestTimeout<S> {
    inner: S,
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for RequestTimeout<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>, Error = Infallible>,
    S::Future: Send + 'static,
    ResB: axum::body::HttpBody<Data = Bytes> + Send + 'static,
    ResB::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<Result<Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = fut.await?;
            // tower-http's Timeout answers with an empty body and the configured status.
            if res.status() == StatusCode::SERVICE_UNAVAILABLE && res.extensions().get::<crate::error::RenderedError>().is_none() {
                return Ok(error_response(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "timeout",
                    "the request took longer than 30 s",
                    None,
                ));
            }
            Ok(res.map(Body::new))
        })
    }
}
