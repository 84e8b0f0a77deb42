//! Layer 1: the request context. Gives every request an id (`x-request-id`, kept when the
//! client sent one, echoed on the response; tower-http `SetRequestId`/`PropagateRequestId`),
//! finds the client IP (the TCP peer from `ConnectInfo`), and runs the request in a
//! `tracing` span. The [`RequestContext`] goes into the request extensions.
//!
//! With the `metrics-labels` cost on, new ids are UUID v4 (16 bytes from the OS RNG per
//! request), and the layer builds metric label `String`s for a request counter, an in-flight
//! gauge and a duration histogram (with no metrics recorder installed, so they go nowhere)
//! and a [`RequestScope`] map. Off, ids come from a process-wide counter, printed in the
//! same UUID text form, and no labels or scope are built.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, Request, Response};
use metrics::Label;
use tower::{Layer, Service};
use tower_http::request_id::{
    MakeRequestId, PropagateRequestId, PropagateRequestIdLayer, RequestId, SetRequestId, SetRequestIdLayer,
};
use tracing::Instrument;

use super::BoxFuture;
use crate::costs::Cost;
use crate::state::AppState;

/// What every layer and handler below knows about the request.
#[derive(Debug, Clone)]
pub struct RequestContext {
    /// The `x-request-id`.
    pub request_id: HeaderValue,
    /// The TCP peer address (unspecified `0.0.0.0` when served without `ConnectInfo`).
    pub client_ip: IpAddr,
    /// When the request entered the pipeline.
    pub started: Instant,
}

/// A per-request map of typed values (what a DI container's request scope holds).
#[derive(Default)]
pub struct RequestScope {
    values: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
}

impl RequestScope {
    /// Stores `value`, replacing one of the same type.
    pub fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        self.values.insert(TypeId::of::<T>(), Box::new(value));
    }
    /// The value of type `T`, if stored.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.values.get(&TypeId::of::<T>()).and_then(|v| v.downcast_ref())
    }
}

impl std::fmt::Debug for RequestScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestScope").field("values", &self.values.len()).finish()
    }
}

/// Makes request ids: UUID v4 with `metrics-labels` on, else a counter in UUID text form.
#[derive(Debug, Clone)]
pub struct MakeId {
    uuid_v4: bool,
    next: Arc<AtomicU64>,
    base: u64,
}

impl MakeRequestId for MakeId {
    fn make_request_id<B>(&mut self, _request: &Request<B>) -> Option<RequestId> {
        let id = if self.uuid_v4 { new_uuid_v4() } else { self.counter_id() };
        let mut buf = uuid::Uuid::encode_buffer();
        HeaderValue::from_str(id.hyphenated().encode_lower(&mut buf)).ok().map(RequestId::new)
    }
}

impl MakeId {
    fn counter_id(&self) -> uuid::Uuid {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        // Version 4 and RFC 4122 variant bits set, so the text has the same shape as v4.
        let raw = (u128::from(self.base) << 64) | u128::from(n);
        uuid::Uuid::from_u128(raw & 0xFFFF_FFFF_FFFF_4FFF_BFFF_FFFF_FFFF_FFFF | 0x4000_8000_0000_0000_0000)
    }
}

/// A UUID v4 from the OS random source. Not inlined, so that a uprobe can count it.
#[inline(never)]
fn new_uuid_v4() -> uuid::Uuid {
    uuid::Uuid::new_v4()
}

/// The request-context layer.
#[derive(Debug, Clone)]
pub struct RequestContextLayer {
    make_id: MakeId,
    metrics_labels: bool,
}

/// The request-context layer for `state`'s costs.
pub fn layer(state: &AppState) -> RequestContextLayer {
    let metrics_labels = state.costs.on(Cost::MetricsLabels);
    RequestContextLayer {
        make_id: MakeId { uuid_v4: metrics_labels, next: Arc::new(AtomicU64::new(1)), base: fastrand::u64(..) },
        metrics_labels,
    }
}

impl<S> Layer<S> for RequestContextLayer {
    type Service = SetRequestId<PropagateRequestId<ContextService<S>>, MakeId>;
    fn layer(&self, inner: S) -> Self::Service {
        let inner = ContextService { inner, metrics_labels: self.metrics_labels };
        let inner = PropagateRequestIdLayer::x_request_id().layer(inner);
        SetRequestIdLayer::x_request_id(self.make_id.clone()).layer(inner)
    }
}

/// The context service (inside the request-id services).
#[derive(Debug, Clone)]
pub struct ContextService<S> {
    inner: S,
    metrics_labels: bool,
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for ContextService<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>, Error = Infallible>,
    S::Future: Send + 'static,
    ResB: 'static,
{
    type Response = Response<ResB>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Response<ResB>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let started = Instant::now();
        let client_ip = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.ip())
            .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        let request_id = req
            .extensions()
            .get::<RequestId>()
            .map(|id| id.header_value().clone())
            .unwrap_or_else(|| HeaderValue::from_static("-"));
        let span = tracing::info_span!(
            "request",
            method = %req.method(),
            path = req.uri().path(),
            request_id = ?request_id,
            client_ip = %client_ip,
        );
        let context = RequestContext { request_id, client_ip, started };
        let labels = if self.metrics_labels {
            let labels = request_labels(&req, &context);
            let mut scope = RequestScope::default();
            scope.insert(context.clone());
            scope.insert(labels.clone());
            scope.insert(started);
            req.extensions_mut().insert(Arc::new(scope));
            Some(labels)
        } else {
            None
        };
        req.extensions_mut().insert(context);
        let fut = self.inner.call(req);
        Box::pin(
            async move {
                let res = fut.await?;
                if let Some(labels) = labels {
                    record_response_metrics(labels, res.status().as_u16(), started);
                }
                Ok(res)
            }
            .instrument(span),
        )
    }
}

/// Builds the metric labels of a request (fresh `String`s) and records the request
/// counter and the in-flight gauge. Not inlined, so that a uprobe can count it.
#[inline(never)]
fn request_labels<B>(req: &Request<B>, context: &RequestContext) -> Vec<Label> {
    let labels = vec![
        Label::new("method", req.method().as_str().to_string()),
        Label::new("path", req.uri().path().to_string()),
        Label::new("client_ip", context.client_ip.to_string()),
    ];
    metrics::counter!("http_requests_total", labels.clone()).increment(1);
    metrics::gauge!("http_requests_in_flight", labels.clone()).increment(1.0);
    labels
}

/// Records the response metrics with a `status` label. Not inlined (uprobe target).
#[inline(never)]
fn record_response_metrics(mut labels: Vec<Label>, status: u16, started: Instant) {
    metrics::gauge!("http_requests_in_flight", labels.clone()).decrement(1.0);
    labels.push(Label::new("status", status.to_string()));
    metrics::histogram!("http_request_duration_seconds", labels).record(started.elapsed().as_secs_f64());
}
