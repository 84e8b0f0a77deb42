//! The agent's own memory between the phases of a run.
//!
//! glibc's malloc keeps memory that the program freed for later allocations instead of
//! returning it to the kernel, most of all in the per-thread arenas (`man 3 malloc`, "Arenas";
//! `man 3 malloc_trim`). After blazesym's symbolizer is dropped, about 40-50 MB of free heap
//! stayed resident per run, and inside one `profiler bench overhead` process each attached
//! run started from what the earlier ones left (measured with `agent/examples/attach_repeat.rs`,
//! see PERFORMANCE.md). [`release_free`] gives it back.

/// Returns the allocator's free memory to the kernel (`malloc_trim(0)` on glibc; nothing
/// elsewhere). Cheap next to a run (one pass over the arenas); it frees nothing in use.
pub fn release_free() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim has no preconditions; it only releases free heap pages.
    unsafe {
        libc::malloc_trim(0);
    }
}
