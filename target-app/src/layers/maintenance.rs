//! Layer 7: maintenance mode. While the `MAINTENANCE_FILE` exists every request is a 503
//! `maintenance`. The file is looked at most once a second (no configured file: never on).
//!
//! With the `global-locks` cost on, every request takes a process-wide `Mutex` (the time of
//! the last check) and a process-wide `RwLock` (the flag), as the seed describes. Off, the
//! flag and the next check time are atomics and only the request that wins the
//! compare-exchange after a second re-reads the file.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::http::Request;
use axum::response::{IntoResponse, Response};
use tower::{Layer, Service};

use super::BoxFuture;
use crate::error::AppError;

/// How often the flag file is looked at, at most.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The maintenance-mode switch shared by all requests.
#[derive(Debug)]
pub struct Maintenance {
    file: Option<PathBuf>,
    global_locks: bool,
    epoch: Instant,
    // global-locks on
    last_check: Mutex<Option<Instant>>,
    flag: RwLock<bool>,
    // global-locks off
    next_check_ms: AtomicU64,
    on: AtomicBool,
}

impl Maintenance {
    /// A switch reading `file` (None: never on); `global_locks` picks the locking variant.
    pub fn new(file: Option<PathBuf>, global_locks: bool) -> Maintenance {
        Maintenance {
            file,
            global_locks,
            epoch: Instant::now(),
            last_check: Mutex::new(None),
            flag: RwLock::new(false),
            next_check_ms: AtomicU64::new(0),
            on: AtomicBool::new(false),
        }
    }

    fn read_source(&self) -> bool {
        self.file.as_deref().is_some_and(|f| f.exists())
    }

    /// Whether maintenance mode is on, refreshing the flag when a second has passed.
    pub fn is_on(&self) -> bool {
        if self.global_locks {
            self.is_on_locked()
        } else {
            self.is_on_atomic()
        }
    }

    fn is_on_locked(&self) -> bool {
        {
            let mut last = lock_maintenance_mutex(&self.last_check);
            let due = last.is_none_or(|t| t.elapsed() >= CHECK_INTERVAL);
            if due {
                *last = Some(Instant::now());
                let value = self.read_source();
                *self.flag.write().unwrap_or_else(PoisonError::into_inner) = value;
            }
        }
        read_maintenance_flag(&self.flag)
    }

    fn is_on_atomic(&self) -> bool {
        let now_ms = self.epoch.elapsed().as_millis() as u64;
        let next = self.next_check_ms.load(Ordering::Relaxed);
        if now_ms >= next
            && self
                .next_check_ms
                .compare_exchange(next, now_ms + CHECK_INTERVAL.as_millis() as u64, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.on.store(self.read_source(), Ordering::Relaxed);
        }
        self.on.load(Ordering::Relaxed)
    }
}

/// Takes the process-wide maintenance `Mutex`. Not inlined, so that a uprobe counts it.
#[inline(never)]
fn lock_maintenance_mutex(m: &Mutex<Option<Instant>>) -> MutexGuard<'_, Option<Instant>> {
    // Its machine code would otherwise equal `rate_limit::lock_rate_table`'s, and LLVM's
    // MergeFunctions pass may fold the two into one symbol (it did in one clean build),
    // taking the uprobe's target away. The distinct black-boxed tag keeps them apart.
    std::hint::black_box("maintenance mutex");
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Takes the process-wide maintenance `RwLock` for reading and copies the flag. Not
/// inlined, so that a uprobe counts it.
#[inline(never)]
fn read_maintenance_flag(l: &RwLock<bool>) -> bool {
    *l.read().unwrap_or_else(PoisonError::into_inner)
}

/// The maintenance layer.
#[derive(Debug, Clone)]
pub struct MaintenanceLayer {
    switch: Arc<Maintenance>,
}

/// The maintenance layer on `switch`.
pub fn layer(switch: Arc<Maintenance>) -> MaintenanceLayer {
    MaintenanceLayer { switch }
}

impl<S> Layer<S> for MaintenanceLayer {
    type Service = MaintenanceService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        MaintenanceService { inner, switch: self.switch.clone() }
    }
}

/// The service of [`MaintenanceLayer`].
#[derive(Debug, Clone)]
pub struct MaintenanceService<S> {
    inner: S,
    switch: Arc<Maintenance>,
}

impl<S, ReqB> Service<Request<ReqB>> for MaintenanceService<S>
where
    S: Service<Request<ReqB>, Response = Response, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<Result<Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        if self.switch.is_on() {
            return Box::pin(async { Ok(AppError::Maintenance.into_response()) });
        }
        Box::pin(self.inner.call(req))
    }
}
