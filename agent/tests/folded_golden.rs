//! Golden test: the hand-made `data/profile/small.json` folded into on-CPU and off-CPU folded
//! stacks must equal `data/folded/small.*.folded` byte for byte. The expected files were typed
//! by hand; `data/folded/README.md` explains why each line is what it is.

use std::path::Path;

use profiler::profile::folded::{self, Options, Weight};
use profiler::profile::json;

fn data(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(rel)
}

#[test]
fn on_cpu_folded_matches_golden() {
    let profile = json::read(&data("profile/small.json")).unwrap();
    let got = folded::to_string(&profile, &profile.on_cpu, &Options::default());
    let want = std::fs::read_to_string(data("folded/small.stacks.folded")).unwrap();
    assert_eq!(got, want);
}

#[test]
fn off_cpu_folded_matches_golden() {
    let profile = json::read(&data("profile/small.json")).unwrap();
    let options = Options {
        weight: Weight::Micros,
        ..Options::default()
    };
    let got = folded::to_string(&profile, &profile.off_cpu, &options);
    let want = std::fs::read_to_string(data("folded/small.offcpu.folded")).unwrap();
    assert_eq!(got, want);
}

#[test]
fn options_drop_thread_and_truncation_marker() {
    let profile = json::read(&data("profile/small.json")).unwrap();
    let options = Options {
        include_thread: false,
        mark_truncated: false,
        ..Options::default()
    };
    let got = folded::to_string(&profile, &profile.on_cpu, &options);
    // The same five stacks without the thread element, and stack 3 without `[truncated]`.
    // They now sort by their roots `_start`, `alloc::...`, `clone3` (three worker stacks):
    // bytewise `_` (0x5F) < `a` (0x61) < `c` (0x63).
    let first: Vec<&str> = got.lines().map(|l| l.split(';').next().unwrap()).collect();
    assert_eq!(first, ["_start", "alloc::raw_vec::RawVec<T,A>::grow_one", "clone3", "clone3", "clone3"]);
    assert!(got.starts_with("_start;__libc_start_main;main;std::rt::lang_start_internal;target_app::main;[unknown] (libfoo.so) 2\n"));
    assert!(got.contains("\nalloc::raw_vec::RawVec<T,A>::grow_one;malloc;_int_malloc 1\n"));
}

#[test]
fn empty_profile_folds_to_nothing() {
    let profile = profiler::profile::Profile::default();
    assert_eq!(folded::to_string(&profile, &profile.on_cpu, &Options::default()), "");
}
