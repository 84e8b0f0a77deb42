//! The lock-taking functions `attribute::locks` finds in target-app's release binary, checked
//! against target-app/README.md (the `global-locks` switch: `lock_maintenance_mutex`,
//! `read_maintenance_flag`, `lock_rate_table`) and against `objdump -d` (binutils, outside the
//! code under test): each probe is a conditional branch right after a `lock cmpxchg`.
//! `scripts/test` builds target-app beside the test binaries.

use std::path::PathBuf;
use std::process::Command;

use profiler::attribute::locks::{crate_of_executable, lock_functions};

fn target_app() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let app = exe.parent().unwrap().parent().unwrap().join("target-app");
    assert!(app.is_file(), "{} missing: build the workspace first (scripts/test does)", app.display());
    app
}

#[test]
fn target_app_lock_functions_and_their_fast_paths() {
    let app = target_app();
    let krate = crate_of_executable(&app).unwrap();
    assert_eq!(krate, "target_app");
    let found = lock_functions(&app, &[krate]).unwrap();
    let names: Vec<(&str, Vec<&str>)> = found.iter().map(|f| (f.name.as_str(), f.kinds.clone())).collect();
    println!("{names:#?}");
    // The switch's three locks (README), plus the maintenance flag's refresh (a write lock the
    // app's code takes at most once a second with CRM_COSTS=none). Not listed:
    // `ChangeEvents::publish_insert`, whose code calls `Mutex::lock_contended` too (objdump),
    // but from tokio's broadcast sender inlined into it (the innermost non-std frame of the DWARF
    // inline chain at the call is tokio's src/loom/std/parking_lot.rs, locking the channel's
    // `Tail`): the lock is tokio's, taken once a request with any CRM_COSTS.
    assert_eq!(
        names,
        vec![
            ("target_app::layers::maintenance::Maintenance::is_on", vec!["rwlock_write"]),
            ("target_app::layers::maintenance::lock_maintenance_mutex", vec!["mutex"]),
            ("target_app::layers::maintenance::read_maintenance_flag", vec!["rwlock_read"]),
            ("target_app::layers::rate_limit::lock_rate_table", vec!["mutex"]),
        ]
    );
    for f in &found {
        assert!(!f.probes.is_empty(), "{}: no fast path recognized", f.name);
        let o = Command::new("objdump")
            .args(["-d", "--no-show-raw-insn", &format!("--disassemble={}", f.mangled)])
            .arg(&app)
            .output()
            .expect("objdump (binutils)");
        let text = String::from_utf8_lossy(&o.stdout);
        for &p in &f.probes {
            let lines: Vec<&str> = text.lines().filter(|l| l.trim_start().split(':').next().is_some_and(|a| u64::from_str_radix(a.trim(), 16).is_ok())).collect();
            let at = lines.iter().position(|l| u64::from_str_radix(l.trim_start().split(':').next().unwrap().trim(), 16) == Ok(p)).unwrap_or_else(|| panic!("{}: no instruction at {p:#x}:\n{text}", f.name));
            assert!(lines[at].split_whitespace().nth(1).is_some_and(|m| m.starts_with('j')), "{}: {p:#x} is not a branch: {}", f.name, lines[at]);
            assert!(at > 0 && lines[at - 1].contains("lock cmpxchg"), "{}: the instruction before {p:#x} is not a lock cmpxchg:\n{text}", f.name);
        }
    }
}
