//! Layer 11: the unit of work. An authenticated request gets a [`Uow`] in its extensions: one
//! PostgreSQL transaction, begun on first use, committed when the response status is below
//! 400 and rolled back otherwise (a failed commit becomes a 500). Requests without a
//! verified token get none (`/db` and `/queries` use the pool directly, per SPEC).
//!
//! Costs: `actor-set-config` runs `SELECT set_config('app.actor', <user id>, true)` as its
//! own round trip right after `BEGIN`; `spawn-per-request` runs the rest of the pipeline in a
//! `tokio::spawn`ed task for every request, `/json` included.

use std::convert::Infallible;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::Request;
use axum::response::{IntoResponse, Response};
use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use tokio::sync::{Mutex, MutexGuard};
use tower::{Layer, Service};

use super::{take_ready, BoxFuture};
use crate::auth::Authentication;
use crate::costs::{Cost, Costs};
use crate::db;
use crate::error::AppError;

struct UowState {
    pool: PgPool,
    actor: i64,
    set_actor: bool,
    tx: Option<Transaction<'static, Postgres>>,
}

/// The request's unit of work (cheap to clone: all clones share one transaction).
#[derive(Clone)]
pub struct Uow(Arc<Mutex<UowState>>);

impl std::fmt::Debug for Uow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uow").finish_non_exhaustive()
    }
}

/// Exclusive access to the transaction's connection (derefs to `PgConnection`).
pub struct UowConn<'a>(MutexGuard<'a, UowState>);

impl Deref for UowConn<'_> {
    type Target = PgConnection;
    fn deref(&self) -> &PgConnection {
        self.0.tx.as_deref().expect("UowConn exists only with an open transaction")
    }
}

impl DerefMut for UowConn<'_> {
    fn deref_mut(&mut self) -> &mut PgConnection {
        self.0.tx.as_deref_mut().expect("UowConn exists only with an open transaction")
    }
}

impl Uow {
    fn new(pool: PgPool, actor: i64, set_actor: bool) -> Uow {
        Uow(Arc::new(Mutex::new(UowState { pool, actor, set_actor, tx: None })))
    }

    /// The transaction's connection; the first call checks a connection out, sends
    /// `BEGIN` and, with `actor-set-config`, the `set_config` round trip.
    ///
    /// # Errors
    /// [`AppError::Database`] when the pool or PostgreSQL fails.
    pub async fn conn(&self) -> Result<UowConn<'_>, AppError> {
        let mut state = self.0.lock().await;
        if state.tx.is_none() {
            let mut tx = state.pool.begin().await?;
            if state.set_actor {
                db::set_actor(&mut tx, &state.actor.to_string()).await?;
            }
            state.tx = Some(tx);
        }
        Ok(UowConn(state))
    }

    /// Commits (`commit`) or rolls back the transaction, if one was begun.
    async fn finish(&self, commit: bool) -> Result<(), sqlx::Error> {
        let tx = self.0.lock().await.tx.take();
        match tx {
            Some(tx) if commit => tx.commit().await,
            Some(tx) => tx.rollback().await,
            None => Ok(()),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Uow {
    type Rejection = AppError;
    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Uow>().cloned().ok_or_else(|| AppError::Internal("no unit of work on this route".into()))
    }
}

/// The unit-of-work layer.
#[derive(Debug, Clone)]
pub struct UnitOfWorkLayer {
    pool: PgPool,
    costs: Costs,
}

/// The unit-of-work layer on `pool` with `costs`.
pub fn layer(pool: PgPool, costs: Costs) -> UnitOfWorkLayer {
    UnitOfWorkLayer { pool, costs }
}

impl<S> Layer<S> for UnitOfWorkLayer {
    type Service = UnitOfWork<S>;
    fn layer(&self, inner: S) -> Self::Service {
        UnitOfWork { inner, pool: self.pool.clone(), costs: self.costs }
    }
}

/// The service of [`UnitOfWorkLayer`].
#[derive(Debug, Clone)]
pub struct UnitOfWork<S> {
    inner: S,
    pool: PgPool,
    costs: Costs,
}

impl<S, ReqB> Service<Request<ReqB>> for UnitOfWork<S>
where
    S: Service<Request<ReqB>, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqB: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<Result<Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let uow = match req.extensions().get::<Authentication>() {
            Some(Authentication::Verified { user_id }) => {
                let uow = Uow::new(self.pool.clone(), *user_id, self.costs.on(Cost::ActorSetConfig));
                req.extensions_mut().insert(uow.clone());
                Some(uow)
            }
            _ => None,
        };
        let mut inner = take_ready(&mut self.inner);
        let work = async move {
            let res = match inner.call(req).await {
                Ok(res) => res,
                Err(never) => match never {},
            };
            match uow {
                Some(uow) => match uow.finish(res.status().as_u16() < 400).await {
                    Ok(()) => res,
                    Err(e) => AppError::Database(e).into_response(),
                },
                None => res,
            }
        };
        if self.costs.on(Cost::SpawnPerRequest) {
            let handle = spawn_request(Box::pin(work));
            Box::pin(async move {
                match handle.await {
                    Ok(res) => Ok(res),
                    // Re-raise a panic of the task so that the panic catcher answers it.
                    Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                    Err(e) => Ok(AppError::Internal(format!("request task failed: {e}")).into_response()),
                }
            })
        } else {
            Box::pin(async move { Ok(work.await) })
        }
    }
}

/// Spawns the rest of one request's pipeline as a tokio task (the `spawn-per-request`
/// cost). Not inlined, so that a uprobe counts it.
#[inline(never)]
fn spawn_request(work: BoxFuture<Response>) -> tokio::task::JoinHandle<Response> {
    tokio::spawn(work)
}
