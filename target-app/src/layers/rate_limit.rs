//! Layer 8: a per-client-IP rate limit, a fixed one-second window with a very high ceiling
//! (`RATE_LIMIT_PER_SECOND`, default 1,000,000): the load generator is one client IP.
//! Over the ceiling: 429 `rate_limited` with `Retry-After: 1`.
//!
//! With the `global-locks` cost on, every request takes one process-wide
//! `Mutex<HashMap<IpAddr, Window>>`. Off, the limiter is lock-free: 4096 atomic slots,
//! each packing (window second << 32 | count), chosen by a hash of the IP; IPs that share a
//! slot share its budget, which at this ceiling never changes an answer.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Instant;

use axum::http::Request;
use axum::response::{IntoResponse, Response};
use tower::{Layer, Service};

use super::request_context::RequestContext;
use super::BoxFuture;
use crate::error::AppError;

const SLOTS: usize = 4096;
/// Entries kept in the locked table before stale windows are pruned.
const PRUNE_ABOVE: usize = 65_536;

#[derive(Debug, Clone, Copy)]
struct Window {
    second: u32,
    count: u32,
}

/// The rate limiter shared by all requests.
#[derive(Debug)]
pub struct RateLimiter {
    per_second: u32,
    epoch: Instant,
    global_locks: bool,
    table: Mutex<HashMap<IpAddr, Window>>,
    slots: Box<[AtomicU64]>,
}

impl RateLimiter {
    /// A limiter allowing `per_second` requests per IP per second; `global_locks` picks the
    /// locking variant.
    pub fn new(per_second: u32, global_locks: bool) -> RateLimiter {
        RateLimiter {
            per_second,
            epoch: Instant::now(),
            global_locks,
            table: Mutex::new(HashMap::new()),
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Counts one request from `ip`; false when it is over the ceiling.
    pub fn allow(&self, ip: IpAddr) -> bool {
        let second = self.epoch.elapsed().as_secs() as u32;
        if self.global_locks {
            self.allow_locked(ip, second)
        } else {
            self.allow_atomic(ip, second)
        }
    }

    fn allow_locked(&self, ip: IpAddr, second: u32) -> bool {
        let mut table = lock_rate_table(&self.table);
        if table.len() > PRUNE_ABOVE {
            table.retain(|_, w| w.second == second);
        }
        let w = table.entry(ip).or_insert(Window { second, count: 0 });
        if w.second != second {
            *w = Window { second, count: 0 };
        }
        if w.count >= self.per_second {
            return false;
        }
        w.count += 1;
        true
    }

    fn allow_atomic(&self, ip: IpAddr, second: u32) -> bool {
        let slot = &self.slots[slot_of(ip)];
        let mut current = slot.load(Ordering::Relaxed);
        loop {
            let (window, count) = ((current >> 32) as u32, current as u32);
            let next = if window == second {
                if count >= self.per_second {
                    return false;
                }
                current + 1
            } else {
                (u64::from(second) << 32) | 1
            };
            match slot.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(seen) => current = seen,
            }
        }
    }
}

fn slot_of(ip: IpAddr) -> usize {
    let bits: u128 = match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    };
    let folded = (bits as u64) ^ ((bits >> 64) as u64);
    // Fibonacci hashing: the top 12 bits of the product.
    (folded.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - 12)) as usize
}

/// Takes the process-wide rate-limit table lock. Not inlined, so that a uprobe counts it.
#[inline(never)]
fn lock_rate_table(m: &Mutex<HashMap<IpAddr, Window>>) -> MutexGuard<'_, HashMap<IpAddr, Window>> {
    // Kept distinct from `maintenance::lock_maintenance_mutex` (see there).
    std::hint::black_box("rate table mutex");
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The rate-limit layer.
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    limiter: Arc<RateLimiter>,
}

/// The rate-limit layer on `limiter`.
pub fn layer(limiter: Arc<RateLimiter>) -> RateLimitLayer {
    RateLimitLayer { limiter }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RateLimit { inner, limiter: self.limiter.clone() }
    }
}

/// The service of [`RateLimitLayer`].
#[derive(Debug, Clone)]
pub struct RateLimit<S> {
    inner: S,
    limiter: Arc<RateLimiter>,
}

impl<S, ReqB> Service<Request<ReqB>> for RateLimit<S>
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
        let ip = req.extensions().get::<RequestContext>().map(|c| c.client_ip).unwrap_or(IpAddr::from([0, 0, 0, 0]));
        if !self.limiter.allow(ip) {
            return Box::pin(async { Ok(AppError::RateLimited.into_response()) });
        }
        Box::pin(self.inner.call(req))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_variants_cut_at_the_ceiling() {
        for locks in [true, false] {
            let l = RateLimiter::new(3, locks);
            let a = IpAddr::from([10, 0, 0, 1]);
            let b = IpAddr::from([10, 0, 0, 2]);
            assert!(l.allow(a) && l.allow(a) && l.allow(a), "locks={locks}");
            assert!(!l.allow(a), "4th in the same second is refused (locks={locks})");
            if slot_of(a) != slot_of(b) {
                assert!(l.allow(b), "another IP has its own budget (locks={locks})");
            }
        }
    }
}
