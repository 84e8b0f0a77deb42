//! The subcommands of the `profiler` binary, one module each: `Args` (clap derive) -> `run`.
//!
//! Commands use `anyhow` with `.context()`; `main.rs` prints the chain on one line and exits 2.

pub mod attach;
pub mod bench;
pub mod diff;
pub mod overhead;
pub mod report;
pub mod validate;

/// True when `err` (anywhere in its chain) is a broken pipe, e.g. stdout closed by `| head`.
/// `main` exits 0 then, as ripgrep does.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
