//! The kernel side of the profiler: embedded BPF objects and the `#[repr(C)]` mirror of
//! `include/profiler.h`.
