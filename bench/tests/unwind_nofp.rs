//! DWARF unwinding for real (root): target-app built WITHOUT frame pointers
//! and profiled under `deals-list` load with `Unwind::Dwarf` gives >= 90 % complete stacks,
//! and its top-20 self-time function shares (user-space functions, see below) agree with the
//! frame-pointer build profiled with `Unwind::Fp`, within the sampling error measured in the
//! runs themselves.
//!
//! - The no-frame-pointer build: `cargo build --release -p target-app` into
//!   `<target dir>/nofp` with `CARGO_ENCODED_RUSTFLAGS` replacing the workspace's
//!   `-C force-frame-pointers=yes` (only the build id is kept) and `CFLAGS=-O2` (mimalloc
//!   without `-fno-omit-frame-pointer`): the release defaults a user has. From scratch this
//!   is the one expensive step of the test: 248 s user + 29 s system CPU measured here
//!   (about 2.5 min on two idle cores, 896 MB in the target dir); the time is printed.
//! - That the result really lacks frame pointers is checked with `objdump` (an instrument
//!   outside the code under test) on the hottest target-app functions of each profile:
//!   `push %rbp` directly followed by `mov %rsp,%rbp` in the first instructions.
//! - Load: a throwaway PostgreSQL (`bench::pg::TempPostgres`), both builds running at once
//!   as processes pinned to CPU 0, wrk (`bench::load`, 64 connections) pinned to CPU 1
//!   against one of them at a time, as `profiler bench` does. After a warm-up of each, the
//!   two are profiled in [`ROUNDS`] alternating blocks (nofp, fp, nofp, fp, ...), each at
//!   999 Hz until the app used [`BLOCK_CPU_SECONDS`] of CPU: a drift of the machine's
//!   speed or scheduling during the test falls on both builds alike.
//! - Self time is the summary's definition (`render::summary::self_samples`), as shares of
//!   the samples with a known leaf function (`[unknown]` is bounded apart, at most 1 %),
//!   per function name with its paths cut to their last identifier ([`comparable_name`]:
//!   rustc names some functions by different module paths in the two builds).
//! - The bound of each function's difference is its own sampling error, not one fixed
//!   figure: samples come in bursts (a request's allocations, a scheduler tick), so one
//!   function's count varies between blocks more than a binomial count would. That excess is
//!   measured in the run ([`overdispersion`]: Pearson's chi-square of the blocks' counts over
//!   its degrees of freedom, pooled over the functions and both builds), and a difference is
//!   allowed [`Z`] standard errors (binomial times the overdispersion), a family-wise bound
//!   for the ~23 functions compared, plus [`CODEGEN_POINTS`] for the two compilations (the
//!   measurements behind it are in PERFORMANCE.md, "DWARF and frame-pointer self time
//!   compared in alternating blocks").
//! - The functions compared are user-space ones (the top 20 of either run) outside the
//!   allocator ([`is_allocator`]: its self time follows each process's heap) and longer than
//!   [`TINY_FUNCTION_BYTES`] (the frame-pointer instructions are a large part of a tinier
//!   one, so the builds run different code there). Kernel functions
//!   are printed, not compared: both modes take the kernel stack from the kernel's own
//!   unwinder (`bpf_get_stackid` / `bpf_get_stack`) and a kernel leaf is the interrupted
//!   instruction, so no unwinding mode of ours changes them. Their shares move with the
//!   scheduling of the runs instead: `_raw_spin_unlock_irqrestore`, where the samples of
//!   interrupt-disabled sections land, read 17.01 % (fp) and 14.33 % (dwarf) in one run and
//!   15.55 % and 15.45 % in another.

use test_support::{skip_unless, Need};

#[path = "../../agent/tests/attach_support/mod.rs"]
mod attach_support;
mod app_support;
use app_support::App;

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use attach_support::{functions, has_fp_prologue};
use bench::load::{Test, WrkOptions, WrkResult};
use object::{Object, ObjectSegment};
use profiler::collect::{self, Options, StopReason, Unwind};
use profiler::profile::{Profile, RawProfile};
use profiler::target::Target;

const FREQUENCY_HZ: u64 = 999;
/// Alternating profiled blocks per build.
const ROUNDS: usize = 3;
/// Each block lasts until the app used this much CPU (about 2,000 samples at 999 Hz; 6,000
/// per build over [`ROUNDS`]), at most [`MAX_BLOCK_SECONDS`].
const BLOCK_CPU_SECONDS: f64 = 2.0;
const MAX_BLOCK_SECONDS: u64 = 20;
/// Fewest samples per build for the comparison to resolve a few points.
const MIN_SAMPLES: u64 = 4000;
const WARMUP_SECONDS: u64 = 4;
const TOP: usize = 20;
/// Allowed difference of one function's self-time share between the builds, in standard
/// errors of the difference. 3.5 is a two-sided 0.05 % bound per function, about 1 % for the
/// family of ~23 functions compared (Bonferroni).
const Z: f64 = 3.5;
/// Largest overdispersion at which the comparison still means something: beyond it the
/// blocks disagree so much that the machine was too unsteady to judge (measured here:
/// see the printed figure; a binomial count has 1).
const MAX_OVERDISPERSION: f64 = 40.0;
/// Difference of one function's self-time share, in points, that the two builds may show
/// beyond sampling error. They are two compilations of one source with different flags, so
/// rustc inlines and lays out code differently: `<Fuse<Fut> as Future>::poll` (three
/// instances in each binary) read 0.24% in the frame-pointer build and 0.73% in the other,
/// 15 against 46 samples of about 6,300: 4.0 standard errors, the blocks' overdispersion 1.00
/// (PERFORMANCE.md). A broken unwinder or symbolizer moves the top functions (shares of
/// 2-10%) by more.
const CODEGEN_POINTS: f64 = 0.5;

/// `target/release` of this test binary (`target/release/deps/unwind_nofp-HASH`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf()
}

/// The frame-pointer build of target-app that `cargo build --release --workspace` made.
fn fp_binary() -> PathBuf {
    let app = profile_dir().join("target-app");
    assert!(app.is_file(), "{} missing: cargo build --release -p target-app", app.display());
    app
}

/// Builds target-app without frame pointers into `<target dir>/nofp` and returns the binary.
fn build_nofp() -> PathBuf {
    test_support::build_without_frame_pointers("target-app", &profile_dir().parent().expect("target dir").join("nofp"))
}

/// Starts `binary` pinned to CPU 0 (`taskset` execs it: the child's pid is the app's).
fn start_app(binary: &Path, db_url: &str) -> App {
    let mut cmd = Command::new("taskset");
    cmd.arg("-c").arg("0").arg(binary).env("DATABASE_URL", db_url).env("CRM_COSTS", "all");
    App::start(cmd)
}

fn wrk(port: u16, seconds: u64, scratch: &Path) -> WrkResult {
    let opts = WrkOptions {
        base_url: format!("http://127.0.0.1:{port}"),
        test: Test::DealsList,
        duration: Duration::from_secs(seconds),
        connections: 64,
        threads: 1,
        cpus: Some("1".to_owned()),
        token: Some(bench::token::mint_valid(bench::DEFAULT_JWT_SECRET, 1)),
        timeout: Duration::from_secs(10),
    };
    let r = bench::load::run(&opts, scratch).expect("wrk");
    assert_eq!(r.failed(), 0, "failed requests under deals-list load: {r:?}");
    r
}

/// One profiled block of one build: the raw profile, the symbolized one and the mean req/s
/// of the load during it.
struct Block {
    raw: RawProfile,
    profile: Profile,
    req_per_s: f64,
}

/// User + system CPU time of process `pid` (`/proc/PID/stat`), s.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("reading /proc/PID/stat");
    // Fields after the command name (which may hold spaces) start at field 3; utime and
    // stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    ticks as f64 / profiler::sys::stat::clock_ticks_per_second() as f64
}

/// One build under test: its binary, the running app, how it is unwound, its blocks and the
/// executable mappings of its binary ((start, end, file offset)).
struct Side {
    label: &'static str,
    binary: PathBuf,
    app: App,
    unwind: Unwind,
    blocks: Vec<Block>,
    maps: Vec<(u64, u64, u64)>,
}

impl Side {
    /// Starts the app of `binary` and warms it up under load.
    fn start(label: &'static str, binary: PathBuf, db_url: &str, unwind: Unwind) -> Side {
        let app = start_app(&binary, db_url);
        let scratch = tempfile::tempdir().unwrap();
        wrk(app.port, WARMUP_SECONDS, scratch.path());
        let maps = exec_mappings(app.child.id(), &binary);
        Side { label, binary, app, unwind, blocks: Vec::new(), maps }
    }

    /// Profiles one block: load in 5 s wrk runs, `FREQUENCY_HZ` sampling until the app used
    /// `BLOCK_CPU_SECONDS` of CPU, symbolized while the app lives (the symbolizer reads its
    /// binaries through /proc/PID).
    fn profile_block(&mut self) {
        let scratch = tempfile::tempdir().unwrap();
        let pid = self.app.child.id();
        let port = self.app.port;
        let dir = scratch.path().to_path_buf();
        let load_stop = Arc::new(AtomicBool::new(false));
        let flag = load_stop.clone();
        let load = std::thread::spawn(move || {
            let mut rates = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                rates.push(wrk(port, 5, &dir).req_per_s);
            }
            rates
        });
        std::thread::sleep(Duration::from_millis(1500));
        let mut target = Target::Pid(pid).resolve().expect("resolve pid");
        let options = Options { frequency_hz: FREQUENCY_HZ, offcpu: false, syscalls: false, wire: false, unwind: self.unwind, ..Default::default() };
        let stop = AtomicBool::new(false);
        let cpu0 = cpu_seconds(pid);
        let (raw, reason) = collect::run(&mut target, &options, Duration::from_secs(MAX_BLOCK_SECONDS), &stop, |_| {
            if cpu_seconds(pid) - cpu0 >= BLOCK_CPU_SECONDS {
                stop.store(true, Ordering::Relaxed);
            }
        })
        .expect("collect");
        assert!(matches!(reason, StopReason::Deadline | StopReason::Interrupted), "{reason:?}");
        load_stop.store(true, Ordering::Relaxed);
        let rates = load.join().expect("wrk thread");
        let profile = profiler::symbolize::symbolize(raw.clone());
        let req_per_s = rates.iter().sum::<f64>() / rates.len().max(1) as f64;
        self.blocks.push(Block { raw, profile, req_per_s });
    }

    fn samples(&self) -> u64 {
        self.blocks.iter().map(|b| b.profile.on_cpu.iter().map(|c| c.count).sum::<u64>()).sum()
    }

    fn seconds(&self) -> f64 {
        self.blocks.iter().map(|b| b.raw.meta.duration_ns as f64 / 1e9).sum()
    }

    fn req_per_s(&self) -> f64 {
        self.blocks.iter().map(|b| b.req_per_s).sum::<f64>() / self.blocks.len().max(1) as f64
    }
}

/// (start, end, file offset) of the executable mappings of `binary` in `pid`.
fn exec_mappings(pid: u32, binary: &Path) -> Vec<(u64, u64, u64)> {
    let suffix = format!("/{}", binary.file_name().unwrap().to_string_lossy());
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let v: Vec<_> = maps
        .lines()
        .filter(|l| l.ends_with(&suffix))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if !f[1].contains('x') {
                return None;
            }
            let (s, e) = f[0].split_once('-')?;
            Some((u64::from_str_radix(s, 16).ok()?, u64::from_str_radix(e, 16).ok()?, u64::from_str_radix(f[2], 16).ok()?))
        })
        .collect();
    assert!(!v.is_empty(), "no executable mapping of {suffix} in /proc/{pid}/maps");
    v
}

/// The hottest functions of `binary` by self time (samples whose leaf is a user address in
/// its executable mappings and that have no kernel frame): (address range, samples), most
/// first, at most `n`. Attributed with the ELF symbol table, not the symbolizer.
fn hot_functions(side: &Side, n: usize) -> Vec<(Range<u64>, String, u64)> {
    let data = std::fs::read(&side.binary).unwrap();
    let file = object::File::parse(&*data).expect("parsing ELF");
    let segments: Vec<(u64, u64, u64)> = file
        .segments()
        .map(|s| (s.address(), s.file_range().0, s.file_range().1))
        .collect();
    let funcs = functions(&data);
    let to_vaddr = |addr: u64| -> Option<u64> {
        let &(start, _, map_off) = side.maps.iter().find(|(s, e, _)| (*s..*e).contains(&addr))?;
        let file_off = addr - start + map_off;
        let &(vaddr, off, _) = segments.iter().find(|(_, off, size)| (*off..off + size).contains(&file_off))?;
        Some(file_off - off + vaddr)
    };
    let mut by_fn: HashMap<usize, u64> = HashMap::new();
    for s in side.blocks.iter().flat_map(|b| b.raw.on_cpu.iter()).filter(|s| s.kernel.is_empty()) {
        let Some(v) = s.user.first().and_then(|&ip| to_vaddr(ip)) else { continue };
        let i = funcs.partition_point(|(r, _)| r.start <= v);
        if let Some(i) = i.checked_sub(1).filter(|&i| funcs[i].0.contains(&v)) {
            *by_fn.entry(i).or_default() += s.count;
        }
    }
    let mut v: Vec<_> = by_fn.into_iter().map(|(i, c)| (funcs[i].0.clone(), funcs[i].1.clone(), c)).collect();
    v.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.start.cmp(&b.0.start)));
    v.truncate(n);
    v
}

/// Of the hot Rust functions in `hot` (mangled `_ZN`/`_R` names: mimalloc's C functions are
/// left out, GCC shrink-wraps their prologues even with `-fno-omit-frame-pointer`), how many
/// have a frame-pointer prologue according to objdump; printed per function.
fn rust_fp_prologues(label: &str, binary: &Path, hot: &[(Range<u64>, String, u64)]) -> (usize, usize) {
    let (mut with, mut all) = (0, 0);
    for (range, name, count) in hot {
        let fp = has_fp_prologue(binary, range);
        eprintln!("{label}: {count:>6} samples, frame-pointer prologue {fp:<5} {name}");
        if name.starts_with("_ZN") || name.starts_with("_R") {
            all += 1;
            with += usize::from(fp);
        }
    }
    (with, all)
}

/// A kernel function's folded-stack name (`render::summary::frame_name`: `_[k]` suffix).
fn is_kernel(name: &str) -> bool {
    name.ends_with("_[k]")
}

/// An allocator's function: mimalloc's (`mi_*`, `_mi_*`, C code the two builds compile with
/// different `CFLAGS`) or glibc malloc's. Printed, not compared: its self time follows the
/// process's heap (which pages are fresh, how full they are), which differs between the two
/// processes and which the alternating blocks, each of one process, do not sample: `mi_free`'s
/// share can differ by 2x between the builds (0.58% fp, 1.21% nofp; PERFORMANCE.md).
fn is_allocator(name: &str) -> bool {
    name.starts_with("mi_")
        || name.starts_with("_mi_")
        || matches!(name, "malloc" | "free" | "realloc" | "calloc" | "cfree" | "__libc_malloc" | "__libc_free" | "_int_malloc" | "_int_free" | "malloc_consolidate")
}

/// Largest function, in bytes of code in the frame-pointer build, whose self time the builds
/// cannot share: its `push %rbp; mov %rsp,%rbp; pop %rbp` (5 bytes) are at least a fifth of
/// its code, which the other build does not run. `__rust_no_alloc_shim_is_unstable_v2`, called
/// on every allocation, is those 3 instructions and a `ret` in the frame-pointer build and a
/// lone `ret` in the other: 0.48% of the self time against 0.09% in one run.
const TINY_FUNCTION_BYTES: u64 = 24;

/// Comparable names ([`comparable_name`]) of the functions of `binary` with at most
/// [`TINY_FUNCTION_BYTES`] of code: printed, not compared, since the frame-pointer
/// instructions change their self time by construction.
fn tiny_functions(binary: &Path) -> BTreeSet<String> {
    let data = std::fs::read(binary).expect("reading the binary");
    functions(&data)
        .into_iter()
        .filter(|(range, _)| range.end - range.start <= TINY_FUNCTION_BYTES)
        .map(|(_, name)| comparable_name(&format!("{:#}", rustc_demangle::demangle(&name))))
        .collect()
}

/// Self-time samples of one block: per leaf function name (known leaves only), the samples
/// with a known leaf, and all samples. `[unknown]` (an unresolved address) is the unknown
/// leaf. Both on-CPU samplers copy their stacks into their records, so no
/// `[user stack lost]` / `[kernel stack lost]` frame may appear (a sampler that interns
/// stacks in a map loses about 5% of its user stacks and 2% of its kernel stacks to hash
/// collisions at 999 Hz, which show as samples with no known leaf); the caller asserts it.
struct SelfCounts {
    by_name: HashMap<String, u64>,
    known: u64,
    samples: u64,
}

fn self_counts(profile: &Profile) -> SelfCounts {
    let no_leaf = |n: &str| n.starts_with("[unknown]");
    let samples: u64 = profile.on_cpu.iter().map(|c| c.count).sum();
    let mut by_name = HashMap::new();
    let mut known = 0;
    for (n, c) in profiler::render::summary::self_samples(profile) {
        if !no_leaf(&n) {
            known += c;
            *by_name.entry(comparable_name(&n)).or_insert(0) += c;
        }
    }
    SelfCounts { by_name, known, samples }
}

/// `name` with every path cut to its last identifier (`<futures_util::future::future::Map<Fut,F>
/// as core::future::future::Future>::poll` -> `<Map<Fut,F> as Future>::poll`,
/// `tokio::net::connect::{{closure}}` -> `connect::{{closure}}`): the key under
/// which the two builds' functions are compared. rustc names one function by different paths
/// in two builds of the same source: `nm -C` lists that `Map::poll` 6 times as
/// `futures_util::future::future::Map` (and once as `future::map::Map`) in the frame-pointer
/// build, and 7 times as `futures_util::future::future::map::Map` in the other.
fn comparable_name(name: &str) -> String {
    static PATH: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    PATH.get_or_init(|| regex::Regex::new(r"(?:[A-Za-z_][A-Za-z0-9_]*::)+([A-Za-z_][A-Za-z0-9_]*)").unwrap()).replace_all(name, "$1").into_owned()
}

/// The blocks' counts summed.
fn pooled(blocks: &[SelfCounts]) -> SelfCounts {
    let mut by_name: HashMap<String, u64> = HashMap::new();
    for b in blocks {
        for (n, c) in &b.by_name {
            *by_name.entry(n.clone()).or_insert(0) += c;
        }
    }
    SelfCounts { by_name, known: blocks.iter().map(|b| b.known).sum(), samples: blocks.iter().map(|b| b.samples).sum() }
}

/// Pearson's chi-square of `name`'s counts over `blocks` against one share for all of them,
/// and its degrees of freedom (blocks - 1); `None` when the pooled share is 0 or 1.
fn chi_square(name: &str, blocks: &[SelfCounts]) -> Option<(f64, f64)> {
    let all = pooled(blocks);
    let p = all.by_name.get(name).copied().unwrap_or(0) as f64 / all.known.max(1) as f64;
    if p <= 0.0 || p >= 1.0 {
        return None;
    }
    let x2 = blocks
        .iter()
        .map(|b| {
            let n = b.known as f64;
            let c = b.by_name.get(name).copied().unwrap_or(0) as f64;
            (c - n * p).powi(2) / (n * p * (1.0 - p))
        })
        .sum();
    Some((x2, blocks.len() as f64 - 1.0))
}

/// How much more one function's count varies between blocks than a binomial count would:
/// the chi-square of `names` over both sides' blocks divided by its degrees of freedom
/// (the Pearson estimate of the dispersion parameter), at least 1.
fn overdispersion(names: &[&String], sides: [&[SelfCounts]; 2]) -> f64 {
    let (mut x2, mut df) = (0.0, 0.0);
    for blocks in sides {
        for n in names {
            if let Some((x, d)) = chi_square(n, blocks) {
                x2 += x;
                df += d;
            }
        }
    }
    if df == 0.0 {
        1.0
    } else {
        (x2 / df).max(1.0)
    }
}

#[test]
fn nofp_target_app_with_dwarf_matches_fp_build_with_fp() {
    if skip_unless(&[Need::Root, Need::Wrk]) {
        return;
    }
    for tool in ["objdump", "taskset", "wrk"] {
        assert!(Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().is_ok_and(|o| o.status.success()), "{tool} is not installed");
    }
    let nofp_app = build_nofp();

    let pg = bench::pg::TempPostgres::start().expect("postgres");
    let db_url = pg.create_seeded_db("crm").expect("seed");

    let mut nofp = Side::start("nofp/dwarf", nofp_app, &db_url, Unwind::Dwarf);
    let mut fp = Side::start("fp/fp", fp_binary(), &db_url, Unwind::Fp);
    for _ in 0..ROUNDS {
        nofp.profile_block();
        fp.profile_block();
    }

    // The builds really differ in frame pointers, on the code the profiles spent time in.
    let nofp_hot = hot_functions(&nofp, 12);
    let fp_hot = hot_functions(&fp, 12);
    let (nofp_with, nofp_all) = rust_fp_prologues("nofp build", &nofp.binary, &nofp_hot);
    let (fp_with, fp_all) = rust_fp_prologues("fp build", &fp.binary, &fp_hot);
    eprintln!("frame-pointer prologues in the hottest Rust functions of target-app: nofp build {nofp_with} of {nofp_all}, fp build {fp_with} of {fp_all}");
    assert!(nofp_all >= 5 && fp_all >= 5, "too few hot Rust functions to judge: {nofp_all} and {fp_all}");
    assert!(fp_with * 5 >= fp_all * 4, "the frame-pointer build has prologues in only {fp_with} of {fp_all} hot Rust functions");
    assert!(nofp_with <= 1, "the no-frame-pointer build has frame-pointer prologues in {nofp_with} of {nofp_all} hot Rust functions");

    // DWARF unwinding on the no-frame-pointer build: complete stacks, in every block.
    let (mut walks, mut complete_walks, mut copied) = (0, 0, 0);
    for (i, block) in nofp.blocks.iter().enumerate() {
        let report = block.raw.meta.unwind.clone().expect("the stack-copy path reports its unwinding");
        let samples: u64 = block.profile.on_cpu.iter().map(|c| c.count).sum();
        let complete = 100.0 * report.complete as f64 / report.samples.max(1) as f64;
        let not_truncated = 100.0 * (samples - block.profile.lost.truncated_stacks) as f64 / samples.max(1) as f64;
        eprintln!(
            "nofp + dwarf, block {i}: {samples} samples ({} unwound) in {:.1} s, {:.0} req/s, walks complete {complete:.1}%, stacks reaching the thread start {not_truncated:.1}%, ring buffer dropped {}, report {:?}",
            report.samples,
            block.raw.meta.duration_ns as f64 / 1e9,
            block.req_per_s,
            block.raw.lost.ringbuf_dropped,
            report.modules.iter().map(|m| (&m.module, m.cfi_frames, m.fp_fallback_frames)).collect::<Vec<_>>()
        );
        assert_eq!(report.mode, "dwarf");
        assert_eq!(report.fp_fallback_frames, 0, "dwarf mode never uses the frame-pointer rule");
        let app_module = report.modules.iter().find(|m| m.module == "target-app").expect("target-app in the per-binary report");
        assert_eq!(app_module.unwind_info, "eh_frame_hdr");
        assert!(complete >= 90.0, "block {i}: only {complete:.1}% of the DWARF walks were complete");
        assert!(not_truncated >= 90.0, "block {i}: only {not_truncated:.1}% of the stacks reach the thread start");
        walks += report.samples;
        complete_walks += report.complete;
        copied += report.bytes_copied_total;
    }
    eprintln!(
        "nofp + dwarf: {} samples in {:.1} s, {:.0} req/s, walks complete {:.1}%, {} bytes copied per sample",
        nofp.samples(),
        nofp.seconds(),
        nofp.req_per_s(),
        100.0 * complete_walks as f64 / walks.max(1) as f64,
        copied / walks.max(1)
    );
    eprintln!(
        "fp + fp: {} samples in {:.1} s, {:.0} req/s, truncated {}",
        fp.samples(),
        fp.seconds(),
        fp.req_per_s(),
        fp.blocks.iter().map(|b| b.profile.lost.truncated_stacks).sum::<u64>()
    );
    for side in [&nofp, &fp] {
        assert!(side.samples() >= MIN_SAMPLES, "{}: only {} samples in {:.0} s: the machine is too busy to compare", side.label, side.samples(), side.seconds());
    }

    // Every user frame was symbolized (a dead process would give `[unknown]` frames and
    // lump all user functions into one), and no stack was lost.
    for side in [&nofp, &fp] {
        for p in side.blocks.iter().map(|b| &b.profile) {
            let unknown = p.frames.iter().filter(|f| f.kind == profiler::profile::FrameKind::User && f.function == "[unknown]").count();
            let user = p.frames.iter().filter(|f| f.kind == profiler::profile::FrameKind::User).count();
            assert!(unknown * 100 <= user, "{}: {unknown} of {user} user frames unresolved", side.label);
            let lost: Vec<&String> = p.frames.iter().map(|f| &f.function).filter(|n| n.contains("stack lost]")).collect();
            assert!(lost.is_empty(), "{}: on-CPU stacks lost: {lost:?}", side.label);
        }
    }
    let nofp_blocks: Vec<SelfCounts> = nofp.blocks.iter().map(|b| self_counts(&b.profile)).collect();
    let fp_blocks: Vec<SelfCounts> = fp.blocks.iter().map(|b| self_counts(&b.profile)).collect();
    let (nofp_all_counts, fp_all_counts) = (pooled(&nofp_blocks), pooled(&fp_blocks));
    for (label, c) in [("nofp/dwarf", &nofp_all_counts), ("fp/fp", &fp_all_counts)] {
        let unknown = 100.0 * (c.samples - c.known) as f64 / c.samples.max(1) as f64;
        eprintln!("samples without a known leaf function, {label}: {unknown:.2}%");
        assert!(unknown <= 1.0, "{label}: {unknown:.2}% of the samples have no known leaf");
    }

    let share = |c: &SelfCounts, n: &str| 100.0 * c.by_name.get(n).copied().unwrap_or(0) as f64 / c.known.max(1) as f64;
    let kernel_share = |c: &SelfCounts| c.by_name.iter().filter(|(n, _)| is_kernel(n)).map(|(_, &v)| v).sum::<u64>() as f64 * 100.0 / c.known.max(1) as f64;
    eprintln!("kernel self time (% of known): fp/fp {:.2}, nofp/dwarf {:.2} (not compared)", kernel_share(&fp_all_counts), kernel_share(&nofp_all_counts));
    let alloc_share = |c: &SelfCounts| c.by_name.iter().filter(|(n, _)| is_allocator(n)).map(|(_, &v)| v).sum::<u64>() as f64 * 100.0 / c.known.max(1) as f64;
    eprintln!("allocator self time (% of known): fp/fp {:.2}, nofp/dwarf {:.2} (not compared)", alloc_share(&fp_all_counts), alloc_share(&nofp_all_counts));
    let tiny = tiny_functions(&fp.binary);
    let tiny_share = |c: &SelfCounts| c.by_name.iter().filter(|(n, _)| tiny.contains(*n)).map(|(_, &v)| v).sum::<u64>() as f64 * 100.0 / c.known.max(1) as f64;
    eprintln!(
        "functions of at most {TINY_FUNCTION_BYTES} bytes in the fp build, self time (% of known): fp/fp {:.2}, nofp/dwarf {:.2} (not compared)",
        tiny_share(&fp_all_counts),
        tiny_share(&nofp_all_counts)
    );
    let compared = |n: &str| !is_kernel(n) && !is_allocator(n) && !tiny.contains(n);
    let top = |c: &SelfCounts| -> Vec<String> {
        let mut v: Vec<(&String, u64)> = c.by_name.iter().filter(|(n, _)| compared(n)).map(|(n, &v)| (n, v)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        v.into_iter().take(TOP).map(|(n, _)| n.clone()).collect()
    };
    let (nofp_top, fp_top) = (top(&nofp_all_counts), top(&fp_all_counts));
    let names: Vec<&String> = nofp_top.iter().chain(fp_top.iter()).collect::<BTreeSet<_>>().into_iter().collect();
    assert!(names.len() >= TOP, "fewer than {TOP} user-space functions to compare");
    let phi = overdispersion(&names, [&nofp_blocks, &fp_blocks]);
    eprintln!("overdispersion of the blocks' counts (1 = binomial): {phi:.2} over {} functions, {ROUNDS} blocks per build", names.len());
    assert!(phi <= MAX_OVERDISPERSION, "the blocks' counts vary {phi:.1}x more than binomial counts: the machine was too unsteady to compare the builds");
    // Standard error of a share in points: binomial, widened by the overdispersion.
    let se = |c: &SelfCounts, n: &str| {
        let p = share(c, n) / 100.0;
        100.0 * (phi * p * (1.0 - p) / c.known.max(1) as f64).sqrt()
    };
    let mut rows: Vec<(f64, f64, f64, &String)> = names
        .iter()
        .map(|n| {
            let bound = Z * (se(&fp_all_counts, n).powi(2) + se(&nofp_all_counts, n).powi(2)).sqrt() + CODEGEN_POINTS;
            (share(&fp_all_counts, n), share(&nofp_all_counts, n), bound, *n)
        })
        .collect();
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    eprintln!("self time (% of known)     fp build/fp   nofp build/dwarf    diff   bound   function");
    let mut worst: Option<(f64, f64, &String)> = None;
    for &(a, b, bound, n) in &rows {
        eprintln!("                           {a:>10.2}   {b:>15.2}   {:>+6.2}   {bound:>5.2}   {n}", b - a);
        // The worst is the difference largest against its own bound.
        if worst.is_none_or(|(d, w, _)| (b - a).abs() / bound > d / w) {
            worst = Some(((b - a).abs(), bound, n));
        }
    }
    let (diff, bound, name) = worst.expect("functions compared");
    eprintln!("largest difference of a user-space function against its bound: {diff:.2} of {bound:.2} points ({name})");
    assert!(diff <= bound, "self-time share of {name} differs by {diff:.2} points between the builds, beyond its bound of {bound:.2} ({Z} standard errors + {CODEGEN_POINTS})");
    drop(nofp);
    drop(fp);
    pg.stop().expect("stop postgres");
}
