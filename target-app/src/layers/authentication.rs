//! Layer 10: authentication (the JWT strategy). Verifies the bearer token, if any, and puts
//! the outcome, an [`crate::auth::Authentication`], into the request extensions. It refuses nothing
//! itself: the access check of a protected route turns anything but
//! [`crate::auth::Authentication::Verified`] into a 401, and public routes ignore it.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::http::{header, Request};
use axum::response::Response;
use tower::{Layer, Service};

use crate::auth::AuthService;

/// The authentication layer.
#[derive(Debug, Clone)]
pub struct AuthenticationLayer {
    auth: Arc<AuthService>,
}

/// The authentication layer using `auth`.
pub fn layer(auth: Arc<AuthService>) -> AuthenticationLayer {
    AuthenticationLayer { auth }
}

impl<S> Layer<S> for AuthenticationLayer {
    type Service = AuthenticationService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        AuthenticationService { inner, auth: self.auth.clone() }
    }
}

/// The service of [`AuthenticationLayer`].
#[derive(Debug, Clone)]
pub struct AuthenticationService<S> {
    inner: S,
    auth: Arc<AuthService>,
}

impl<S, ReqB> Service<Request<ReqB>> for AuthenticationService<S>
where
    S: Service<Request<ReqB>, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let outcome = self.auth.authenticate(req.headers().get(header::AUTHORIZATION));
        req.extensions_mut().insert(outcome);
        self.inner.call(req)
    }
}
