//! Symbolization of a live process and of kernel addresses, checked against instruments outside
//! the symbolizer: the target's ELF symbol table (read with the `object` crate), its
//! `/proc/PID/maps`, and `/proc/kallsyms`.
//!
//! The target is `agent/examples/symbolize_target.rs` (built by `cargo test` with the other
//! examples), which also prints the addresses it sees of itself, as a cross-check of the
//! ELF + maps arithmetic.

use test_support::{skip_unless, Need};

mod attach_support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use object::{Object, ObjectSegment, ObjectSymbol};
use profiler::profile::{FrameKind, Profile, RawProfile, RawStack, StackLost};
use profiler::symbolize::symbolize;
use profiler::sys::process_maps::ProcessMaps;

/// `target/release/examples/symbolize_target`, next to this test's `deps/` directory.
fn target_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let bin = dir.join("examples").join("symbolize_target");
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build --release -p agent --examples` (cargo test builds it)",
        bin.display()
    );
    bin
}

struct Target {
    child: Child,
    printed: HashMap<String, u64>,
}

impl Drop for Target {
    fn drop(&mut self) {
        // Closing stdin ends the target; kill it anyway in case it hangs.
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_target() -> Target {
    spawn_target_at(&target_binary())
}

fn spawn_target_at(binary: &std::path::Path) -> Target {
    let mut child = attach_support::spawn_copied(Command::new(binary).stdin(Stdio::piped()).stdout(Stdio::piped()));
    let stdout = child.stdout.take().unwrap();
    let mut printed = HashMap::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if line == "ready" {
            break;
        }
        if let Some((name, value)) = line.split_once(' ') {
            if let Some(hex) = value.strip_prefix("0x") {
                printed.insert(name.to_string(), u64::from_str_radix(hex, 16).unwrap());
            }
        }
    }
    Target { child, printed }
}

/// Runtime address of the symbol whose mangled name starts with `prefix`, from the ELF symbol
/// table of `/proc/PID/exe` and the executable's mappings in `/proc/PID/maps`.
fn runtime_address(pid: u32, prefix: &str) -> u64 {
    let exe = std::fs::read(format!("/proc/{pid}/exe")).unwrap();
    let file = object::File::parse(&*exe).unwrap();
    let symbol = file
        .symbols()
        .find(|s| s.name().is_ok_and(|n| n.starts_with(prefix)))
        .unwrap_or_else(|| panic!("no symbol {prefix} in the ELF symbol table"));
    let vaddr = symbol.address();
    let segment = file
        .segments()
        .find(|s| s.address() <= vaddr && vaddr < s.address() + s.size())
        .expect("segment of the symbol");
    let file_offset = vaddr - segment.address() + segment.file_range().0;
    let exe_path = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    for line in maps.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // Functions live in the executable mapping; the read-only one before it can overlap
        // the same page of the file.
        if f.len() < 6 || std::path::Path::new(f[5]) != exe_path || !f[1].contains('x') {
            continue;
        }
        let (start, end) = f[0].split_once('-').unwrap();
        let start = u64::from_str_radix(start, 16).unwrap();
        let end = u64::from_str_radix(end, 16).unwrap();
        let offset = u64::from_str_radix(f[2], 16).unwrap();
        if offset <= file_offset && file_offset < offset + (end - start) {
            return start + (file_offset - offset);
        }
    }
    panic!("no mapping of {} holds file offset {file_offset:#x}", exe_path.display());
}

/// Address of a text symbol in `/proc/kallsyms`.
fn kallsyms(name: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/kallsyms").unwrap();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 3 && f[2] == name && matches!(f[1], "T" | "t") {
            let addr = u64::from_str_radix(f[0], 16).unwrap();
            assert_ne!(addr, 0, "kallsyms shows 0 addresses: not root?");
            return addr;
        }
    }
    panic!("{name} not in /proc/kallsyms");
}

fn names(profile: &Profile, stack: u32) -> Vec<(String, FrameKind, bool)> {
    profile.stacks[stack as usize]
        .frames
        .iter()
        .map(|&f| {
            let f = &profile.frames[f as usize];
            (f.function.clone(), f.kind, f.inlined)
        })
        .collect()
}

#[test]
fn user_and_kernel_frames_get_full_names() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let target = spawn_target();
    let pid = target.child.id();
    // Ground truth from the symbol table; the mangled (legacy) names spell the paths:
    // _ZN 16symbolize_target 6shapes 6Circle 9area_leaf 17h<hash> E.
    let leaf = runtime_address(pid, "_ZN16symbolize_target6shapes6Circle9area_leaf17h");
    let outer = runtime_address(pid, "_ZN16symbolize_target6shapes11outer_frame17h");
    let start = runtime_address(pid, "_start");
    assert_eq!(leaf, target.printed["leaf"], "ELF+maps arithmetic disagrees with the target");
    let ret = target.printed["ret_in_inlined"];
    assert!(ret > outer && ret < outer + 0x100, "return address {ret:#x} not in outer_frame at {outer:#x}");

    let schedule = kallsyms("schedule");
    let do_syscall_64 = kallsyms("do_syscall_64");
    let raw = RawProfile {
        on_cpu: vec![
            // A complete stack: _start .. outer_frame -> (inlined_middle) -> area_leaf, then
            // the kernel. The non-leaf addresses are return addresses: _start+5 stays in
            // _start after the symbolizer's -1.
            RawStack {
                pid,
                tid: pid,
                thread: "symbolize_targe".into(),
                user: vec![leaf + 4, ret, start + 5],
                kernel: vec![schedule + 0x10, do_syscall_64 + 0x20],
                count: 7,
                total_ns: 0,
                lost: Default::default(),
                ..Default::default()
            },
            // The same without _start: the walk stopped early, so the stack is truncated.
            RawStack {
                pid,
                tid: pid,
                thread: "symbolize_targe".into(),
                user: vec![leaf + 4, ret],
                kernel: vec![],
                count: 3,
                total_ns: 0,
                lost: Default::default(),
                ..Default::default()
            },
            // In the kernel, but the kernel stack was lost (a stack-map collision): a
            // placeholder leaf, so that its self time is not the user leaf's.
            RawStack {
                pid,
                tid: pid,
                thread: "symbolize_targe".into(),
                user: vec![leaf + 4, ret, start + 5],
                kernel: vec![],
                count: 5,
                total_ns: 0,
                lost: StackLost { user: false, kernel: true },
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let profile = symbolize(raw);

    assert_eq!(profile.on_cpu.len(), 3);
    let lost = profile.on_cpu.iter().find(|c| c.count == 5).unwrap();
    let mut got = names(&profile, lost.stack);
    if got[2].0 == "inlined_middle" {
        got[2].0 = "symbolize_target::shapes::inlined_middle".to_string();
    }
    assert_eq!(got.len(), 5, "{got:?}");
    assert_eq!(got[3].0, "symbolize_target::shapes::Circle::area_leaf");
    assert_eq!(got[4], ("[kernel stack lost]".to_string(), FrameKind::Kernel, false));
    assert!(!profile.stacks[lost.stack as usize].truncated);
    let complete = profile.on_cpu.iter().find(|c| c.count == 7).unwrap();
    let truncated = profile.on_cpu.iter().find(|c| c.count == 3).unwrap();
    let got = names(&profile, complete.stack);
    println!("{got:#?}");
    let expected = vec![
        ("_start".to_string(), FrameKind::User, false),
        ("symbolize_target::shapes::outer_frame".to_string(), FrameKind::User, false),
        ("symbolize_target::shapes::inlined_middle".to_string(), FrameKind::User, true),
        ("symbolize_target::shapes::Circle::area_leaf".to_string(), FrameKind::User, false),
        ("do_syscall_64".to_string(), FrameKind::Kernel, false),
        ("schedule".to_string(), FrameKind::Kernel, false),
    ];
    // Inlined frames take their name from DWARF. The workspace's release profile has
    // `debug = "line-tables-only"`, whose DWARF has neither namespaces nor linkage names, so
    // the inlined frame is the bare `inlined_middle`; with `debug = "limited"` rustc adds
    // `DW_AT_linkage_name` (checked with llvm-dwarfdump-19) and blazesym demangles it to the
    // full path. Accept exactly those two spellings.
    let mut got = got;
    if got[2].0 == "inlined_middle" {
        got[2].0 = expected[2].0.clone();
    }
    assert_eq!(got, expected);
    assert!(!profile.stacks[complete.stack as usize].truncated);
    assert!(profile.stacks[truncated.stack as usize].truncated);
    let mut got = names(&profile, truncated.stack);
    if got[1].0 == "inlined_middle" {
        got[1].0 = expected[2].0.clone();
    }
    assert_eq!(got, expected[1..4].to_vec());
    assert_eq!(profile.lost.truncated_stacks, 3);

    // Modules and source lines from the line tables.
    let frames: Vec<_> = profile.stacks[complete.stack as usize]
        .frames
        .iter()
        .map(|&f| &profile.frames[f as usize])
        .collect();
    for f in &frames[..4] {
        assert_eq!(f.module, "symbolize_target", "{f:?}");
    }
    for f in &frames[4..] {
        assert_eq!(f.module, "[kernel]", "{f:?}");
    }
    let source = include_str!("../examples/symbolize_target.rs");
    let line_of = |needle: &str| {
        source
            .lines()
            .position(|l| l.contains(needle))
            .map(|i| i as u32 + 1)
            .unwrap()
    };
    // outer_frame executes the (inlined) call of inlined_middle, inlined_middle the call of
    // area_leaf.
    assert_eq!(frames[1].line, Some(line_of("inlined_middle(&c) * 2.0")), "{:?}", frames[1]);
    assert_eq!(frames[2].line, Some(line_of("black_box(c.area_leaf())")), "{:?}", frames[2]);
    assert!(frames[2].file.as_deref().unwrap().ends_with("symbolize_target.rs"));
}

#[test]
fn unknown_addresses_and_exited_processes() {
    let target = spawn_target();
    let pid = target.child.id();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let stack_start = maps
        .lines()
        .find(|l| l.ends_with("[stack]"))
        .map(|l| u64::from_str_radix(l.split('-').next().unwrap(), 16).unwrap())
        .unwrap();

    // A process that has exited: its pid no longer exists.
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();

    let raw = RawProfile {
        on_cpu: vec![
            RawStack {
                pid,
                tid: pid,
                thread: "t".into(),
                // Not code: the stack mapping, and an unmapped address.
                user: vec![stack_start + 8, 0x10],
                count: 1,
                ..Default::default()
            },
            RawStack {
                pid: gone_pid,
                tid: gone_pid,
                thread: "gone".into(),
                user: vec![0x5555_5555_1000, 0x5555_5555_2000],
                count: 2,
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let profile = symbolize(raw);
    let live = profile.on_cpu.iter().find(|c| c.pid == pid).unwrap();
    let frames: Vec<_> = profile.stacks[live.stack as usize]
        .frames
        .iter()
        .map(|&f| profile.frames[f as usize].clone())
        .collect();
    // Root first: the unmapped address (no module), then the stack address ([stack]).
    assert_eq!(frames[0].function, "[unknown]");
    assert_eq!(frames[0].module, "");
    assert_eq!(frames[1].function, "[unknown]");
    assert_eq!(frames[1].module, "[stack]");

    let gone = profile.on_cpu.iter().find(|c| c.pid == gone_pid).unwrap();
    let stack = &profile.stacks[gone.stack as usize];
    assert_eq!(stack.frames.len(), 2);
    for &f in &stack.frames {
        assert_eq!(profile.frames[f as usize].function, "[unknown]");
    }
    // Nothing resolved: not judged truncated.
    assert!(!stack.truncated);
    assert_eq!(profile.lost.truncated_stacks, 0);
}

/// A process that exited before symbolization, whose binary was deleted too (a container
/// removed at the end of a run): named from the mappings recorded while it ran, exactly as
/// the live process of `user_and_kernel_frames_get_full_names`. The ground truth is the ELF
/// symbol table and `/proc/PID/maps`, read while the process lived.
#[test]
fn exited_process_is_symbolized_from_its_recorded_mappings() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("symbolize_target");
    std::fs::copy(target_binary(), &copy).unwrap();
    let target = spawn_target_at(&copy);
    let pid = target.child.id();
    let leaf = runtime_address(pid, "_ZN16symbolize_target6shapes6Circle9area_leaf17h");
    let start = runtime_address(pid, "_start");
    let ret = target.printed["ret_in_inlined"];
    // A vdso function, at its offset in the vdso image (the ELF symbol table of this test's own
    // vdso: the kernel maps the same image into every 64-bit process).
    let vdso_clock = vdso_range(pid).0 + own_vdso_symbol("__vdso_clock_gettime") + 4;
    let mut recorded = ProcessMaps::default();
    recorded.record(pid);
    assert!(recorded.has(pid), "nothing recorded of a live process (not root?)");
    drop(target);
    std::fs::remove_file(&copy).unwrap();
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "pid {pid} still exists");

    let raw = |maps: ProcessMaps| RawProfile {
        on_cpu: vec![
            RawStack { pid, tid: pid, thread: "symbolize_targe".into(), user: vec![leaf + 4, ret, start + 5], count: 7, ..Default::default() },
            RawStack { pid, tid: pid, thread: "symbolize_targe".into(), user: vec![vdso_clock], count: 2, ..Default::default() },
        ],
        maps,
        ..Default::default()
    };
    let profile = symbolize(raw(recorded));
    let vdso = &profile.stacks[profile.on_cpu.iter().find(|c| c.count == 2).unwrap().stack as usize];
    let vdso = &profile.frames[vdso.frames[0] as usize];
    assert!(matches!(vdso.function.as_str(), "clock_gettime" | "__vdso_clock_gettime"), "{vdso:?}");
    assert_eq!(vdso.module, "[vdso]");
    let mut got = names(&profile, profile.on_cpu.iter().find(|c| c.count == 7).unwrap().stack);
    if got[2].0 == "inlined_middle" {
        got[2].0 = "symbolize_target::shapes::inlined_middle".to_string();
    }
    assert_eq!(
        got,
        vec![
            ("_start".to_string(), FrameKind::User, false),
            ("symbolize_target::shapes::outer_frame".to_string(), FrameKind::User, false),
            ("symbolize_target::shapes::inlined_middle".to_string(), FrameKind::User, true),
            ("symbolize_target::shapes::Circle::area_leaf".to_string(), FrameKind::User, false),
        ]
    );
    let stack = &profile.stacks[profile.on_cpu.iter().find(|c| c.count == 7).unwrap().stack as usize];
    assert!(!stack.truncated);
    let source = include_str!("../examples/symbolize_target.rs");
    let line = source.lines().position(|l| l.contains("black_box(c.area_leaf())")).unwrap() as u32 + 1;
    let middle = &profile.frames[stack.frames[2] as usize];
    assert_eq!(middle.line, Some(line), "{middle:?}");
    for &f in &stack.frames {
        assert_eq!(profile.frames[f as usize].module, "symbolize_target");
    }

    // Without the recording, the same stack has no names: the recording is what names it.
    let profile = symbolize(raw(ProcessMaps::default()));
    for c in &profile.on_cpu {
        let got = names(&profile, c.stack);
        assert!(got.iter().all(|(f, _, _)| f == "[unknown]"), "{got:?}");
    }
}

/// `[start, end)` of the `[vdso]` line of `/proc/PID/maps`.
fn vdso_range(pid: u32) -> (u64, u64) {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let line = maps.lines().find(|l| l.ends_with("[vdso]")).expect("a [vdso] mapping");
    let (start, end) = line.split_whitespace().next().unwrap().split_once('-').unwrap();
    (u64::from_str_radix(start, 16).unwrap(), u64::from_str_radix(end, 16).unwrap())
}

/// Offset of the dynamic symbol `name` in this process's vdso image, from its ELF symbol
/// table (the image read from this process's memory).
fn own_vdso_symbol(name: &str) -> u64 {
    use std::io::{Read, Seek, SeekFrom};
    let (start, end) = vdso_range(std::process::id());
    let mut image = vec![0u8; (end - start) as usize];
    let mut mem = std::fs::File::open("/proc/self/mem").unwrap();
    mem.seek(SeekFrom::Start(start)).unwrap();
    mem.read_exact(&mut image).unwrap();
    let file = object::File::parse(&*image).unwrap();
    let base = file.segments().next().map_or(0, |s| s.address());
    let symbol = file.dynamic_symbols().find(|s| s.name() == Ok(name)).unwrap_or_else(|| panic!("no {name} in the vdso"));
    symbol.address() - base
}
