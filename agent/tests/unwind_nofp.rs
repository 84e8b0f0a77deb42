//! DWARF unwinding of a known answer without frame pointers (root): `ka_two_hot_functions`
//! built by plain rustc with the release defaults, profiled with `Unwind::Dwarf`,
//! `Unwind::Auto` and `Unwind::Fp`. The same check on target-app under load, against its
//! frame-pointer build, is `bench/tests/unwind_nofp.rs`.

mod attach_support;

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use attach_support::{functions, has_fp_prologue};
use profiler::collect::{self, Options, StopReason, Unwind};
use profiler::target::Target;
use test_support::{skip_unless, Need};

/// Frequency of the known-answer runs: prime and far from multiples of the 250 Hz scheduler
/// tick (as in `attach_on_cpu`), high enough for about 1,000 samples per run even when the
/// busy thread gets only a quarter of a CPU on a shared machine (2 points of binomial
/// standard deviation at 75 %, below the 5-point bound).
const KA_FREQUENCY_HZ: u64 = 797;
const KA_SECONDS: u64 = 5;

/// Module `ka_two_hot_functions` (`examples/ka_two_hot_functions.rs`, std only) compiled with
/// plain rustc and the release defaults: no frame pointers.
fn build_ka_nofp(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/ka_two_hot_functions.rs");
    let exe = dir.join("ka_two_hot_functions");
    let out = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .args(["--edition", "2021", "-C", "opt-level=3", "-C", "debuginfo=line-tables-only", "-C", "link-arg=-Wl,--build-id=sha1", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("running rustc");
    assert!(out.status.success(), "rustc {}: {}", src.display(), String::from_utf8_lossy(&out.stderr));
    exe
}

/// Range of the function symbol `name` in the ELF file `binary` (file addresses).
fn symbol_range(binary: &Path, name: &str) -> Range<u64> {
    let data = std::fs::read(binary).unwrap();
    functions(&data).into_iter().find(|(_, n)| n == name).unwrap_or_else(|| panic!("no {name} in {}", binary.display())).0
}

/// The 75 % / 25 % known answer of `attach_on_cpu`, on the same program built without frame
/// pointers, with `Unwind::Dwarf` and `Unwind::Auto`: shares within 5 points, and the stacks
/// keep the caller (`main`) and reach the thread start. `Unwind::Fp` on the same process
/// keeps the leaf (so the shares) but loses the stacks: what proves the build has no frame
/// pointers where it matters, besides objdump.
#[test]
fn known_answer_two_hot_functions_without_frame_pointers() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = build_ka_nofp(dir.path());
    let hot = ["profiler_ka_hot_75", "profiler_ka_hot_25"];
    for name in hot {
        let r = symbol_range(&exe, name);
        assert!(!has_fp_prologue(&exe, &r), "{name} of the rustc -O build has a frame-pointer prologue");
        // The workspace build (frame pointers forced) of the same source has one.
        let cargo_built = attach_support::example("ka_two_hot_functions");
        assert!(has_fp_prologue(&cargo_built, &symbol_range(&cargo_built, name)), "{name} of the workspace build has no frame-pointer prologue");
    }
    let mut child = attach_support::Spawned::new(&exe, &["60"]);
    assert_eq!(child.read_line(), "ready");
    let pid = child.pid();
    let ranges = attach_support::function_ranges(&exe, pid, "/ka_two_hot_functions", &hot);
    let main_range = {
        let data = std::fs::read(&exe).unwrap();
        let name = functions(&data)
            .into_iter()
            .map(|(_, n)| n)
            .find(|n| n.contains("ka_two_hot_functions4main"))
            .expect("ka_two_hot_functions::main symbol");
        attach_support::function_ranges(&exe, pid, "/ka_two_hot_functions", &[&name]).remove(0)
    };
    for unwind in [Unwind::Dwarf, Unwind::Auto, Unwind::Fp] {
        let mut target = Target::Pid(pid).resolve().expect("resolve pid");
        let options = Options { frequency_hz: KA_FREQUENCY_HZ, offcpu: false, syscalls: false, wire: false, unwind, ..Default::default() };
        let stop = AtomicBool::new(false);
        let (raw, reason) = collect::run(&mut target, &options, Duration::from_secs(KA_SECONDS), &stop, |_| {}).expect("collect");
        assert_eq!(reason, StopReason::Deadline);
        let cpu_ns = raw.meta.target_cpu_ns.expect("target CPU time");
        let (mut hits, mut total, mut with_main) = ([0u64; 2], 0u64, 0u64);
        for s in &raw.on_cpu {
            total += s.count;
            if let Some(i) = attach_support::first_frame_in(&s.user, &ranges) {
                hits[i] += s.count;
                if s.user.iter().skip(1).any(|&a| main_range.contains(&(a - 1))) {
                    with_main += s.count;
                }
            }
        }
        let attributed = hits[0] + hits[1];
        let pct = |p: u64, w: u64| 100.0 * p as f64 / w.max(1) as f64;
        let (a, b) = (pct(hits[0], attributed), pct(hits[1], attributed));
        let symbolized = profiler::symbolize::symbolize(raw);
        let complete = pct(total - symbolized.lost.truncated_stacks, total);
        eprintln!(
            "{}: {total} samples ({} ms of target CPU), hot_75 {a:.1}%, hot_25 {b:.1}%, attributed {:.1}%, main found above {:.1}%, complete {complete:.1}%",
            unwind.as_str(),
            cpu_ns / 1_000_000,
            pct(attributed, total),
            pct(with_main, attributed)
        );
        // Samples vs the CPU time the kernel accounted to the target (10 ms ticks).
        let expected = cpu_ns as f64 * KA_FREQUENCY_HZ as f64 / 1e9;
        assert!(total >= 300, "only {total} samples of a busy thread ({} ms of CPU)", cpu_ns / 1_000_000);
        assert!((total as f64 - expected).abs() <= 0.2 * expected, "{total} samples for {expected:.0} expected from the target's CPU time");
        assert!(pct(attributed, total) >= 90.0, "only {:.1}% of samples in the hot functions", pct(attributed, total));
        assert!((a - 75.0).abs() <= 5.0, "{}: hot_75 got {a:.1}%", unwind.as_str());
        assert!((b - 25.0).abs() <= 5.0, "{}: hot_25 got {b:.1}%", unwind.as_str());
        if unwind == Unwind::Fp {
            assert!(pct(with_main, attributed) < 50.0, "frame pointers found main above the hot functions in {:.1}%", pct(with_main, attributed));
            assert!(complete < 50.0, "frame pointers completed {complete:.1}% of the stacks of a build without them");
        } else {
            assert!(pct(with_main, attributed) >= 95.0, "{}: main found above the hot functions in only {:.1}%", unwind.as_str(), pct(with_main, attributed));
            assert!(complete >= 90.0, "{}: only {complete:.1}% of the stacks reach the thread start", unwind.as_str());
        }
    }
}
