//! The default pipeline of bench/SPEC.md, one file per layer, outermost first:
//!
//! 1. [`request_context`]: request id (`x-request-id`), client IP, tracing span
//!    (+ the `metrics-labels` cost)
//! 2. [`panic_catcher`]: a panic becomes a 500 in the error shape
//! 3. [`timeout`]: 30 s, then a 503 `timeout`
//! 4. [`security_headers`]: HSTS, CSP, frame, referrer and content-type policies
//! 5. [`compression`]: gzip when the client asks for it
//! 6. [`error_rendering`]: bare error responses (404, 405, 413, ...) get the JSON shape
//! 7. [`maintenance`]: 503 while maintenance mode is on, checked at most once a second
//!    (+ the `global-locks` cost)
//! 8. [`rate_limit`]: per client IP (+ the `global-locks` cost)
//! 9. [`body_limit`]: 2 MiB
//! 10. [`authentication`]: the bearer token, verified into an [`crate::auth::Authentication`]
//! 11. [`unit_of_work`]: one transaction per authenticated request, commit below 400,
//!     roll back above (+ the `spawn-per-request` and `actor-set-config` costs)
//!
//! then the router, the route's access check and the handler.

pub mod authentication;
pub mod body_limit;
pub mod compression;
pub mod error_rendering;
pub mod maintenance;
pub mod panic_catcher;
pub mod rate_limit;
pub mod request_context;
pub mod security_headers;
pub mod timeout;
pub mod unit_of_work;

use std::future::Future;
use std::pin::Pin;

/// The boxed future the custom layers return.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Takes the ready service out of `slot`, leaving a fresh clone behind (the usual tower
/// pattern for moving a service into a `'static` future).
pub(crate) fn take_ready<S: Clone>(slot: &mut S) -> S {
    let clone = slot.clone();
    std::mem::replace(slot, clone)
}
