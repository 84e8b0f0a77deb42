//! The CRM benchmark harness (`bench/SPEC.md`).
//!
//! - [`pg`]: a throwaway PostgreSQL server (tmpfs, no durability, loopback only).
//! - [`seed`]: the schema and the deterministic seed data; [`seed::DEFAULT_JWT_SECRET`].
//! - [`token`]: HS256 access tokens and every invalid variant the contract lists.
//! - [`conformance`]: the conformance suite (library; binary `conformance`).
//! - [`validate`]: measured gains of target-app's switches (alternating runs) for `profiler bench validate`.
//! - [`results`]: `results.json`, whose records ([`profiler::runs`]) the profiler reads back.
//! - [`modes`]: `profiler bench` itself (run, validate, overhead), driving the profiler library.

pub mod conformance;
pub mod docker;
pub mod load;
pub mod modes;
pub mod overhead;
pub mod procstat;
pub mod render;
pub mod results;
pub mod run;
pub mod pg;
pub mod seed;
pub mod token;
pub mod validate;

pub use seed::DEFAULT_JWT_SECRET;
