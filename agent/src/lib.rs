//! `profiler`: an eBPF profiling agent for the request pipelines of web services.
//!
//! The data flows one way (see DESIGN.md): `collect` (aya, kernel maps) -> `profile`
//! (the canonical in-memory [`profile::Profile`]) -> `symbolize` -> `attribute` -> `render`.

pub mod attribute;
pub mod commands;
pub mod collect;
pub mod diff;
pub mod memory;
pub mod profile;
pub mod render;
pub mod symbolize;
pub mod target;
pub mod unwind;
pub mod wire;
