//! The modes of `profiler bench`, each driving the profiler library over the harness: [`run`]
//! (the benchmark with the agent attached, the [`crate::run::ProfileHook`] that attaches it),
//! [`validate`] (the ranking against target-app's switches) and [`overhead`] (the agent's cost).
//! Each has clap `Args` and a `run` returning the exit status.

pub mod overhead;
pub mod run;
pub mod validate;
