//! The modes of `profiler bench` ([`args`]), each driving the profiler library over the
//! harness: [`run`] (the benchmark with the agent attached, the [`crate::run::ProfileHook`]
//! that attaches it, and `serve`), [`validate`] (the ranking against target-app's switches) and
//! [`overhead`] (the agent's cost). [`run()`] dispatches and returns the exit status.

pub mod args;
pub mod overhead;
pub mod run;
pub mod validate;

pub use args::{Args, Mode};

/// Runs the mode of `args` ([`Args::mode`]). Returns the process exit status: 0, or 1 when any
/// request failed.
///
/// # Errors
/// Not root; bad flags (CPU lists, `--switches`, `--rounds 0`); a phase that failed (build,
/// PostgreSQL, Docker, the conformance gate, the agent); Ctrl-C; outputs that could not be
/// written.
pub fn run(args: Args) -> anyhow::Result<u8> {
    match args.mode() {
        Mode::Run(a) => run::run(&a),
        Mode::Validate(a) => validate::run(&a),
        Mode::Overhead(a) => run::overhead(&a),
        Mode::Serve(a) => run::serve(&a),
    }
}

/// Fails unless this process runs as root. Each mode calls it after checking its own flags, so
/// that bad input is reported as such whoever runs it.
///
/// # Errors
/// Not root: one line that says what needs it.
fn require_root() -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        anyhow::bail!("profiler bench must run as root (eBPF, Docker and cgroups need it): sudo profiler bench");
    }
    Ok(())
}
