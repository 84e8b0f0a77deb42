//! What a test needs from the machine, checked in one line at its start.
//!
//! ```no_run
//! use test_support::{skip_unless, Need};
//! if skip_unless(&[Need::Root, Need::Docker]) {
//!     return;
//! }
//! ```
//!
//! When a need is missing the test prints one line, `skipped: needs root, a running Docker
//! engine`, and returns: `cargo test` as a newcomer runs it (not root, no Docker) passes and
//! says what it did not run. Under `PROFILER_TEST_STRICT=1` (set by `scripts/test`, which CI
//! runs) a missing need fails the test instead, so that CI cannot pass by skipping.
//!
//! Each need is checked once per test process. A crate with a need of its own (bench's
//! PostgreSQL binaries) defines it once as a [`Need::Check`].

use std::process::{Command, Stdio};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The environment variable that turns a skip into a failure: `1` (any other value, or unset,
/// skips).
pub const STRICT_ENV: &str = "PROFILER_TEST_STRICT";

/// Something a test needs from the machine.
#[derive(Debug, Clone, Copy)]
pub enum Need {
    /// Effective user id 0: loading BPF programs, perf events, uprobes, cgroups.
    Root,
    /// A Docker engine that answers `docker info`.
    Docker,
    /// `perf` on `PATH` and working (`perf --version`): the outside instrument.
    Perf,
    /// `wrk` on `PATH`: the load generator.
    Wrk,
    /// A need that a crate checks its own way (PostgreSQL's server binaries, found as
    /// `bench::pg` finds them): what the skip line names, and the check.
    Check {
        /// What the skip line says is missing (`PostgreSQL's server binaries`).
        what: &'static str,
        /// True when the machine has it.
        met: fn() -> bool,
    },
}

impl Need {
    /// What the skip line says is missing.
    pub fn describe(self) -> &'static str {
        match self {
            Need::Root => "root",
            Need::Docker => "a running Docker engine (`docker info`)",
            Need::Perf => "perf",
            Need::Wrk => "wrk",
            Need::Check { what, .. } => what,
        }
    }

    /// True when the machine has it (checked once per process and need).
    pub fn met(self) -> bool {
        static CACHE: Mutex<BTreeMap<&'static str, bool>> = Mutex::new(BTreeMap::new());
        let key = self.describe();
        if let Some(&m) = CACHE.lock().unwrap_or_else(|e| e.into_inner()).get(key) {
            return m;
        }
        let m = match self {
            Need::Root => (unsafe { libc::geteuid() }) == 0,
            Need::Docker => runs("docker", &["info", "--format", "{{.ServerVersion}}"]),
            Need::Perf => runs("perf", &["--version"]),
            Need::Wrk => on_path("wrk"),
            Need::Check { met, .. } => met(),
        };
        CACHE.lock().unwrap_or_else(|e| e.into_inner()).insert(key, m);
        m
    }
}

/// True when `program args` starts and exits 0 (output discarded).
fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program).args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// True when an executable file `name` is in a `PATH` directory.
fn on_path(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| is_executable(&d.join(name))))
}

fn is_executable(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}


/// True when the test must not run: some of `needs` are missing. Prints one line naming them
/// (`skipped: needs root, wrk`).
///
/// # Panics
/// When needs are missing and [`STRICT_ENV`] is `1`: the message names them.
pub fn skip_unless(needs: &[Need]) -> bool {
    let missing: Vec<&str> = needs.iter().filter(|n| !n.met()).map(|n| n.describe()).collect();
    if missing.is_empty() {
        return false;
    }
    let line = format!("needs {}", missing.join(", "));
    if std::env::var(STRICT_ENV).is_ok_and(|v| v == "1") {
        panic!("{line} ({STRICT_ENV}=1: a missing need fails the test instead of skipping it)");
    }
    // Straight to the process's stderr: libtest captures what `print!`/`eprint!` write in a
    // passing test, and this line must be seen.
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "skipped: {line}");
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_need_is_named_once_and_met_needs_are_silent() {
        // Whether this process runs as root is known from outside the code under test.
        let root = (unsafe { libc::geteuid() }) == 0;
        assert_eq!(Need::Root.met(), root);
        if std::env::var(STRICT_ENV).is_ok_and(|v| v == "1") {
            return;
        }
        assert_eq!(skip_unless(&[Need::Root]), !root);
        assert!(!skip_unless(&[]));
        assert!(skip_unless(&[Need::Check { what: "a need no machine has", met: || false }]));
        assert!(!skip_unless(&[Need::Check { what: "a need every machine has", met: || true }]));
    }
}

/// Builds the workspace package `package` (whose binary has the package's name) in release
/// mode without frame pointers into `target_dir`, and returns the binary
/// (`<target_dir>/release/<package>`): how a user's service is built by default, which the
/// workspace's own builds are not (`.cargo/config.toml` forces frame pointers).
/// `CARGO_ENCODED_RUSTFLAGS` replaces the config's `[build] rustflags` (only the GNU build id
/// the symbolizer keys on is kept) and `CFLAGS=-O2` its `[env] CFLAGS`. Builds into the same
/// `target_dir` share their dependencies. `--offline --locked`: the workspace build has fetched
/// them. Panics with cargo's stderr when the build fails.
pub fn build_without_frame_pointers(package: &str, target_dir: &std::path::Path) -> std::path::PathBuf {
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let started = std::time::Instant::now();
    let out = Command::new(&cargo)
        .current_dir(workspace)
        .args(["build", "--release", "-p", package, "--locked", "--offline", "--target-dir"])
        .arg(target_dir)
        .env("CARGO_ENCODED_RUSTFLAGS", "-Clink-arg=-Wl,--build-id=sha1")
        .env_remove("RUSTFLAGS")
        // An existing variable wins over the config's `[env]`.
        .env("CFLAGS", "-O2")
        .output()
        .expect("running cargo");
    assert!(out.status.success(), "cargo build of {package} without frame pointers failed: {}", String::from_utf8_lossy(&out.stderr));
    eprintln!("{package} built without frame pointers into {}: {:.1} s", target_dir.display(), started.elapsed().as_secs_f64());
    let exe = target_dir.join("release").join(package);
    assert!(exe.is_file(), "{} missing after the build", exe.display());
    exe
}
