//! Symbolization: [`RawProfile`] (addresses) -> [`Profile`] (interned, named frames), with
//! blazesym.
//!
//! - User addresses are symbolized per process with `Source::Process` and `map_files` on, so
//!   the binaries are read through `/proc/PID/map_files/` and resolve inside containers
//!   (another mount namespace) too. Each distinct (pid, address) is symbolized once, in one
//!   batch per process.
//! - Return addresses point after the call; every frame but the leaf is looked up at
//!   `address - 1` so that it lands in the call instruction (the right function and line, even
//!   when the call is the last instruction of a function or of an inlined block). This holds
//!   for user and kernel stacks alike.
//! - Names: DWARF names are unqualified (`poll`), so the outer function's name comes from the
//!   ELF symbol table (demangled full path, `tokio::runtime::task::harness::poll`); DWARF
//!   gives the inlined functions (frames of their own, [`Frame::inlined`]) and file:line.
//! - Kernel addresses resolve through `/proc/kallsyms` (`Source::Kernel`), module `[kernel]`;
//!   addresses in JIT-compiled BPF programs get the program's kallsyms name
//!   (`bpf_prog_<tag>_<name>`, module `[bpf]`) from [`RawProfile::bpf_symbols`], read before the
//!   agent unloaded its programs (after that, kallsyms named them after the last kernel symbol
//!   before the JIT area, a data label such as `__stop_runtime_ptr_USER_PTR_MAX`).
//! - A process that exited before the end is symbolized from the mappings recorded while it
//!   lived ([`ProcessMaps`], [`RawProfile::maps`]): file offsets in the files held open.
//! - An address nothing resolves becomes `[unknown]` with the module (file name) that maps it,
//!   from `/proc/PID/maps`; a process that has exited with nothing recorded gives `[unknown]`
//!   frames and one warning, no error.
//! - [`Stack::truncated`]: a user stack whose outermost resolved frame is not a thread start
//!   ([`is_thread_start`]); such on-CPU samples are added to
//!   [`LostCounters::truncated_stacks`](crate::profile::LostCounters::truncated_stacks).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use blazesym::symbolize::source::{Elf, Kernel, Process, Source};
use blazesym::symbolize::{Input, Sym, Symbolized, Symbolizer};
use blazesym::{MaybeDefault, Pid};

use crate::sys::proc_maps;
use crate::profile::{
    Frame, FrameKind, OffCpuWait, Profile, RawProfile, RawStack, Stack, StackCount, SCHEMA_VERSION,
};


use crate::sys::process_maps::ProcessMaps;

/// `Frame::function` of a frame nothing resolved.
pub const UNKNOWN: &str = "[unknown]";
/// `Frame::module` of kernel frames.
pub const KERNEL_MODULE: &str = "[kernel]";
/// The frame put in place of a user stack the kernel took but could not keep
/// ([`crate::profile::StackLost`]).
pub const USER_STACK_LOST: &str = "[user stack lost]";
/// The frame put in place of a kernel stack the kernel took but could not keep
/// ([`crate::profile::StackLost`]): the sample was in the kernel, below its user frames.
pub const KERNEL_STACK_LOST: &str = "[kernel stack lost]";
/// The frame put between the user and kernel frames of an off-CPU wait the kernel saw in a
/// contended lock's futex ([`crate::profile::OffCpuWait::ContendedLock`]): the rules' lock-wait
/// frames name it, so that a lock wait is told from other futex waits where the user stack
/// stops in libc's `syscall` (code built without frame pointers).
pub const CONTENDED_LOCK_WAIT: &str = "[futex wait on a contended lock]";

/// Where the kernel's symbols come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// A `kallsyms` file. Default is `/proc/kallsyms` of the running kernel.
    pub kallsyms: PathBuf,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            kallsyms: PathBuf::from("/proc/kallsyms"),
        }
    }
}

/// True for the functions a complete user stack starts in: the ELF entry point (`_start`),
/// glibc's `__libc_start_main`/`__libc_start_call_main`, the thread trampolines
/// (`start_thread`, `clone`, `clone3`, and their `__` variants), and Rust std's
/// `...::thread_start` (glibc is built without frame pointers here, so a walk may end one frame
/// above `start_thread`).
pub fn is_thread_start(function: &str) -> bool {
    matches!(
        function,
        "_start"
            | "__libc_start_main"
            | "__libc_start_call_main"
            | "start_thread"
            | "clone"
            | "clone3"
            | "__clone"
            | "__clone3"
            | "__clone_internal"
            | "thread_start"
    ) || function.ends_with("::thread_start")
}

/// Symbolizes `raw` with default [`Options`]. See the module docs for the rules.
pub fn symbolize(raw: RawProfile) -> Profile {
    symbolize_with(raw, &Options::default())
}

/// One address's frames: frame indices, outer (physical) frame first, then its inlined
/// callees, innermost last.
type Frames = Vec<u32>;

/// Symbolizes `raw`: never fails; what cannot be resolved becomes `[unknown]` frames.
pub fn symbolize_with(raw: RawProfile, options: &Options) -> Profile {
    let RawProfile {
        meta,
        processes,
        on_cpu,
        off_cpu,
        syscalls,
        mut lost,
        wire,
        endpoints,
        maps: recorded,
        bpf_symbols,
    } = raw;
    let started = std::time::Instant::now();
    let symbolizer = Symbolizer::builder()
        .enable_demangling(true)
        .enable_inlined_fns(true)
        .enable_code_info(true)
        .build();
    let mut interner = Interner::default();

    // Distinct lookup addresses (already adjusted by -1 for return addresses).
    let mut user: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let mut kernel: Vec<u64> = Vec::new();
    for s in on_cpu.iter().chain(off_cpu.iter()) {
        user.entry(s.pid)
            .or_default()
            .extend(lookup_addresses(&s.user));
        kernel.extend(lookup_addresses(&s.kernel));
    }
    kernel.sort_unstable();
    kernel.dedup();

    let mut user_frames: HashMap<(u32, u64), Frames> = HashMap::new();
    let processes_symbolized = user.len();
    // Processes that exited before the end (a restarted app, `runc` starting a container in
    // the target's cgroup, a `sleep`): one line for all of them, not one per process.
    let mut gone: Vec<(u32, String)> = Vec::new();
    let mut from_recorded = 0usize;
    for (pid, mut addrs) in user {
        addrs.sort_unstable();
        addrs.dedup();
        let live = read_maps(pid);
        let (frames, failed) = if live.is_empty() && recorded.has(pid) {
            from_recorded += 1;
            (symbolize_recorded(&symbolizer, pid, &addrs, &recorded, &mut interner), None)
        } else {
            symbolize_process(&symbolizer, pid, &addrs, &live, &mut interner)
        };
        if let Some(err) = failed {
            gone.push((pid, err));
        }
        for (addr, f) in addrs.into_iter().zip(frames) {
            user_frames.insert((pid, addr), f);
        }
    }
    if let Some((_, first_error)) = gone.first() {
        let pids: Vec<String> = gone.iter().map(|(pid, _)| pid.to_string()).collect();
        let gone_stacks: Vec<&RawStack> = on_cpu.iter().chain(off_cpu.iter()).filter(|s| gone.iter().any(|(pid, _)| *pid == s.pid)).collect();
        // Their thread names (from the stacks themselves: such processes often lived less
        // than the second between two readings of /proc), e.g. `runc:[2:INIT]`.
        let mut threads: Vec<&str> = gone_stacks.iter().map(|s| s.thread.as_str()).collect();
        threads.sort_unstable();
        threads.dedup();
        tracing::warn!(
            processes = gone.len(),
            pids = %pids.join(","),
            threads = %threads.join(","),
            stacks = gone_stacks.len(),
            error = %first_error,
            "cannot symbolize processes that exited before the end (their user frames are [unknown])"
        );
    }
    if from_recorded > 0 {
        tracing::info!(processes = from_recorded, "symbolized processes that exited from the mappings recorded while they ran");
    }
    let user_addresses = user_frames.len();
    let kernel_addresses = kernel.len();
    let mut kernel_frames: HashMap<u64, Frames> = HashMap::new();
    let frames = symbolize_kernel(&symbolizer, &kernel, options, &bpf_symbols, &mut interner);
    for (addr, f) in kernel.into_iter().zip(frames) {
        kernel_frames.insert(addr, f);
    }

    let mut stacks = StackInterner::default();
    let mut convert = |raws: Vec<RawStack>, on_cpu: bool, lost_truncated: &mut u64| {
        // (pid, tid, thread, stack) -> (count, total_ns, samples per endpoint): different
        // addresses can give the same named stack.
        let mut merged: BTreeMap<(u32, u32, String, u32), (u64, u64, BTreeMap<u32, u64>)> = BTreeMap::new();
        for raw in raws {
            let mut frames: Vec<u32> = Vec::new();
            let mut user_outer: Vec<u32> = Vec::new();
            // Root first: the raw stacks are leaf first.
            if raw.lost.user && raw.user.is_empty() {
                frames.push(lost_frame(&mut interner, USER_STACK_LOST, FrameKind::User));
            }
            for addr in lookup_addresses(&raw.user).collect::<Vec<_>>().into_iter().rev() {
                let f = &user_frames[&(raw.pid, addr)];
                user_outer.push(f[0]);
                frames.extend_from_slice(f);
            }
            if raw.wait == OffCpuWait::ContendedLock {
                frames.push(lost_frame(&mut interner, CONTENDED_LOCK_WAIT, FrameKind::Kernel));
            }
            for addr in lookup_addresses(&raw.kernel).collect::<Vec<_>>().into_iter().rev() {
                frames.extend_from_slice(&kernel_frames[&addr]);
            }
            if raw.lost.kernel && raw.kernel.is_empty() {
                frames.push(lost_frame(&mut interner, KERNEL_STACK_LOST, FrameKind::Kernel));
            }
            let truncated = is_truncated(&user_outer, &interner.frames);
            if truncated && on_cpu {
                *lost_truncated = lost_truncated.saturating_add(raw.count);
            }
            let stack = stacks.get(Stack { frames, truncated });
            let slot = merged.entry((raw.pid, raw.tid, raw.thread, stack)).or_default();
            slot.0 = slot.0.saturating_add(raw.count);
            slot.1 = slot.1.saturating_add(raw.total_ns);
            for (e, n) in raw.endpoints {
                *slot.2.entry(e).or_default() += n;
            }
        }
        merged
            .into_iter()
            .map(|((pid, tid, thread, stack), (count, total_ns, by_endpoint))| {
                let mut endpoints: Vec<(u32, u64)> = by_endpoint.into_iter().collect();
                endpoints.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                StackCount { pid, tid, thread, stack, count, total_ns, endpoints }
            })
            .collect::<Vec<_>>()
    };
    let mut truncated = 0;
    let on_cpu = convert(on_cpu, true, &mut truncated);
    let off_cpu = convert(off_cpu, false, &mut truncated);
    lost.truncated_stacks = lost.truncated_stacks.saturating_add(truncated);
    tracing::info!(
        processes = processes_symbolized,
        user_addresses,
        kernel_addresses,
        frames = interner.frames.len(),
        stacks = stacks.stacks.len(),
        elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
        "symbolized"
    );

    Profile {
        schema_version: SCHEMA_VERSION,
        meta,
        processes,
        frames: interner.frames,
        stacks: stacks.stacks,
        on_cpu,
        off_cpu,
        syscalls,
        lost,
        wire,
        endpoints,
    }
}

/// The addresses to look up for a leaf-first stack: the leaf as is, return addresses - 1.
fn lookup_addresses(stack: &[u64]) -> impl Iterator<Item = u64> + '_ {
    stack
        .iter()
        .enumerate()
        .map(|(i, &a)| if i == 0 { a } else { a.saturating_sub(1) })
}

/// Truncation rule (see [`is_thread_start`]): `outer` holds the physical frames of the user
/// part, root first. Not truncated when there is no user part, or when nothing in it resolved
/// (a process that exited before symbolization: unknown, not known to be truncated).
fn is_truncated(outer: &[u32], frames: &[Frame]) -> bool {
    let Some(&root) = outer.first() else {
        return false;
    };
    if outer
        .iter()
        .all(|&f| frames[f as usize].function == UNKNOWN)
    {
        return false;
    }
    !is_thread_start(&frames[root as usize].function)
}

#[derive(Default)]
struct Interner {
    frames: Vec<Frame>,
    index: HashMap<Frame, u32>,
}

impl Interner {
    fn get(&mut self, frame: Frame) -> u32 {
        if let Some(&i) = self.index.get(&frame) {
            return i;
        }
        let i = self.frames.len() as u32;
        self.frames.push(frame.clone());
        self.index.insert(frame, i);
        i
    }
}

/// A frame that stands for what the kernel told without an address: a lost stack
/// ([`USER_STACK_LOST`], [`KERNEL_STACK_LOST`]) or a kind of wait ([`CONTENDED_LOCK_WAIT`]).
fn lost_frame(interner: &mut Interner, function: &str, kind: FrameKind) -> u32 {
    let module = if kind == FrameKind::Kernel { KERNEL_MODULE } else { UNKNOWN };
    interner.get(Frame { function: function.to_string(), module: module.to_string(), kind, inlined: false, file: None, line: None })
}

#[derive(Default)]
struct StackInterner {
    stacks: Vec<Stack>,
    index: HashMap<Stack, u32>,
}

impl StackInterner {
    fn get(&mut self, stack: Stack) -> u32 {
        if let Some(&i) = self.index.get(&stack) {
            return i;
        }
        let i = self.stacks.len() as u32;
        self.stacks.push(stack.clone());
        self.index.insert(stack, i);
        i
    }
}

/// One line of `/proc/PID/maps` with a file behind it.
struct Mapping {
    start: u64,
    end: u64,
    /// File name (no directories), e.g. `libc.so.6`; `[vdso]`, `[heap]` for special ones.
    module: String,
}

/// Reads the file-backed and special mappings of `pid`; empty when the process is gone.
fn read_maps(pid: u32) -> Vec<Mapping> {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(proc_maps::parse)
        .filter(|m| !m.path.is_empty())
        .map(|m| Mapping { start: m.start, end: m.end, module: proc_maps::file_name(m.path) })
        .collect()
}

fn module_of(maps: &[Mapping], addr: u64) -> String {
    maps.iter()
        .find(|m| m.start <= addr && addr < m.end)
        .map(|m| m.module.clone())
        .unwrap_or_default()
}

/// Symbolizes the (sorted, distinct) user addresses of one process: their frames, and
/// blazesym's error when the process could not be read (gone: every frame `[unknown]`).
fn symbolize_process(
    symbolizer: &Symbolizer,
    pid: u32,
    addrs: &[u64],
    maps: &[Mapping],
    interner: &mut Interner,
) -> (Vec<Frames>, Option<String>) {
    let unknown = |interner: &mut Interner, addr: u64| {
        vec![interner.get(Frame {
            function: UNKNOWN.to_string(),
            module: module_of(maps, addr),
            kind: FrameKind::User,
            inlined: false,
            file: None,
            line: None,
        })]
    };
    let Some(pid_nz) = std::num::NonZeroU32::new(pid) else {
        return (addrs.iter().map(|&a| unknown(interner, a)).collect(), None);
    };
    let source = |debug_syms: bool| {
        let mut process = Process::new(Pid::Pid(pid_nz));
        process.debug_syms = debug_syms;
        process.map_files = true;
        process.perf_map = true;
        process.vdso = true;
        Source::Process(process)
    };
    // ELF symbol table: qualified outer names. DWARF: inlined frames and lines.
    let elf = symbolizer.symbolize(&source(false), Input::AbsAddr(addrs));
    let dwarf = symbolizer.symbolize(&source(true), Input::AbsAddr(addrs));
    let (elf, dwarf) = match (elf, dwarf) {
        (Ok(elf), Ok(dwarf)) => (elf, dwarf),
        (Err(err), _) | (_, Err(err)) => {
            return (addrs.iter().map(|&a| unknown(interner, a)).collect(), Some(err.to_string()));
        }
    };
    let frames = addrs
        .iter()
        .zip(elf.iter().zip(dwarf.iter()))
        .map(|(&addr, (elf, dwarf))| {
            let module = module_of(maps, addr);
            match (elf.as_sym(), dwarf.as_sym()) {
                (None, None) => unknown(interner, addr),
                (elf, dwarf) => user_frames(elf, dwarf, module, interner),
            }
        })
        .collect();
    (frames, None)
}

/// Symbolizes the user addresses of a process that has exited from its recorded mappings:
/// each address becomes a file offset in the file held open for its mapping, looked up with
/// `Source::Elf` and `Input::FileOffset` (symbol table, then DWARF, as for a live process).
/// `[vdso]` addresses are looked up at the same offset in this agent's own vdso. An address
/// outside every recorded mapping is `[unknown]`.
fn symbolize_recorded(
    symbolizer: &Symbolizer,
    pid: u32,
    addrs: &[u64],
    recorded: &ProcessMaps,
    interner: &mut Interner,
) -> Vec<Frames> {
    let unknown = |interner: &mut Interner, module: String| {
        vec![interner.get(Frame { function: UNKNOWN.to_string(), module, kind: FrameKind::User, inlined: false, file: None, line: None })]
    };
    let mut frames: Vec<Option<Frames>> = vec![None; addrs.len()];
    // Per open file: (index in addrs, file offset, module).
    let mut by_file: BTreeMap<PathBuf, Vec<(usize, u64, String)>> = BTreeMap::new();
    for (i, &addr) in addrs.iter().enumerate() {
        if let Some(m) = recorded.lookup(pid, addr) {
            if let (Some(path), Some(offset)) = (recorded.path(m), m.file_offset(addr)) {
                by_file.entry(path).or_default().push((i, offset, m.module.clone()));
            }
        }
    }
    // `[vdso]` addresses: the same offset in this agent's own vdso, which is the same image.
    let vdso: Vec<(usize, u64)> = addrs.iter().enumerate().filter_map(|(i, &a)| recorded.vdso_offset(pid, a).map(|o| (i, o))).collect();
    if let (false, Some(own)) = (vdso.is_empty(), read_maps(std::process::id()).into_iter().find(|m| m.module == "[vdso]")) {
        let own_addrs: Vec<u64> = vdso.iter().map(|&(_, o)| own.start + o).collect();
        let mut own_process = Process::new(Pid::Slf);
        own_process.debug_syms = false;
        own_process.vdso = true;
        if let Ok(syms) = symbolizer.symbolize(&Source::Process(own_process), Input::AbsAddr(&own_addrs)) {
            for (&(i, _), sym) in vdso.iter().zip(syms.iter()) {
                if let Some(sym) = sym.as_sym() {
                    frames[i] = Some(user_frames(Some(sym), None, own.module.clone(), interner));
                }
            }
        }
    }
    for (path, entries) in by_file {
        let offsets: Vec<u64> = entries.iter().map(|e| e.1).collect();
        let source = |debug_syms: bool| {
            let mut elf = Elf::new(path.clone());
            elf.debug_syms = debug_syms;
            Source::Elf(elf)
        };
        let elf = symbolizer.symbolize(&source(false), Input::FileOffset(&offsets));
        let dwarf = symbolizer.symbolize(&source(true), Input::FileOffset(&offsets));
        let (Ok(elf), Ok(dwarf)) = (elf, dwarf) else {
            continue;
        };
        for ((i, _, module), (elf, dwarf)) in entries.into_iter().zip(elf.iter().zip(dwarf.iter())) {
            frames[i] = Some(match (elf.as_sym(), dwarf.as_sym()) {
                (None, None) => unknown(interner, module),
                (elf, dwarf) => user_frames(elf, dwarf, module, interner),
            });
        }
    }
    frames
        .into_iter()
        .zip(addrs)
        .map(|(f, &addr)| {
            f.unwrap_or_else(|| {
                let module = match recorded.lookup(pid, addr) {
                    Some(m) => m.module.clone(),
                    None if recorded.vdso_offset(pid, addr).is_some() => "[vdso]".to_string(),
                    None => String::new(),
                };
                unknown(interner, module)
            })
        })
        .collect()
}

fn code_location(info: Option<&blazesym::symbolize::CodeInfo<'_>>) -> (Option<String>, Option<u32>) {
    match info {
        Some(info) => (
            Some(info.to_path().to_string_lossy().into_owned()),
            info.line,
        ),
        None => (None, None),
    }
}

/// Frames of one user address: the outer function (name from the symbol table when it has
/// one, else from DWARF), then the inlined functions from DWARF, outermost first.
///
/// Lines: after blazesym's own shift (its DWARF resolver moves each location up one level),
/// the symbol's `code_info` is the line executing in the outer function (the call site of the
/// first inlined function) and each inlined function's `code_info` the line executing in it;
/// the innermost one's is the instruction's own line.
fn user_frames(
    elf: Option<&Sym<'_>>,
    dwarf: Option<&Sym<'_>>,
    module: String,
    interner: &mut Interner,
) -> Frames {
    let outer_name = elf
        .or(dwarf)
        .map(|s| s.name.to_string())
        .unwrap_or_else(|| UNKNOWN.to_string());
    let module = if module.is_empty() {
        elf.or(dwarf)
            .and_then(|s| s.module.as_deref())
            .map(|m| proc_maps::file_name(&m.to_string_lossy()))
            .unwrap_or_default()
    } else {
        module
    };
    let Some(dwarf) = dwarf else {
        return vec![interner.get(Frame {
            function: outer_name,
            module,
            kind: FrameKind::User,
            inlined: false,
            file: None,
            line: None,
        })];
    };
    let mut locations = vec![code_location(dwarf.code_info.as_deref())];
    locations.extend(
        dwarf
            .inlined
            .iter()
            .map(|f| code_location(f.code_info.as_ref())),
    );
    let mut names = vec![outer_name];
    names.extend(dwarf.inlined.iter().map(|f| f.name.to_string()));
    names
        .into_iter()
        .zip(locations)
        .enumerate()
        .map(|(i, (function, (file, line)))| {
            interner.get(Frame {
                function,
                module: module.clone(),
                kind: FrameKind::User,
                inlined: i > 0,
                file,
                line,
            })
        })
        .collect()
}

/// `Frame::module` of a frame in a JIT-compiled BPF program, as `/proc/kallsyms` tags them.
pub const BPF_MODULE: &str = "[bpf]";

/// The largest JIT image a `[bpf]` symbol is taken to cover, bytes: kallsyms gives start
/// addresses only, and the agent's programs compile to a few KiB each (`bpftool prog show`:
/// `jited` sizes).
pub const BPF_SYMBOL_MAX_BYTES: u64 = 64 * 1024;

/// The `[bpf]` lines of a kallsyms file (`ffffffffc0a1b2c0 t bpf_prog_6deef7357e7b4530_on_sock_send	[bpf]`):
/// (start address, name), sorted by address. Empty when the file cannot be read or shows
/// zero addresses (not root, `kernel.kptr_restrict`).
pub fn read_bpf_symbols(kallsyms: &std::path::Path) -> Vec<(u64, String)> {
    let Ok(text) = std::fs::read_to_string(kallsyms) else {
        return Vec::new();
    };
    let mut symbols: Vec<(u64, String)> = text
        .lines()
        .filter(|l| l.ends_with("[bpf]"))
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let addr = u64::from_str_radix(f.next()?, 16).ok().filter(|&a| a != 0)?;
            let name = f.nth(1)?;
            Some((addr, name.to_string()))
        })
        .collect();
    symbols.sort_unstable();
    symbols
}

/// The `[bpf]` symbol holding `addr`: the last one starting at or before it, if `addr` is
/// below the next one's start and within [`BPF_SYMBOL_MAX_BYTES`] of its own.
fn bpf_symbol_of(symbols: &[(u64, String)], addr: u64) -> Option<&str> {
    let i = symbols.partition_point(|(start, _)| *start <= addr).checked_sub(1)?;
    let (start, name) = &symbols[i];
    let end = symbols.get(i + 1).map_or(u64::MAX, |(next, _)| *next).min(start.saturating_add(BPF_SYMBOL_MAX_BYTES));
    (addr < end).then_some(name.as_str())
}

/// Symbolizes kernel addresses through kallsyms; addresses in a BPF program of `bpf` (read
/// while it was loaded, [`read_bpf_symbols`]) get its name and module [`BPF_MODULE`].
fn symbolize_kernel(
    symbolizer: &Symbolizer,
    addrs: &[u64],
    options: &Options,
    bpf: &[(u64, String)],
    interner: &mut Interner,
) -> Vec<Frames> {
    let unknown = |interner: &mut Interner| {
        vec![interner.get(Frame {
            function: UNKNOWN.to_string(),
            module: KERNEL_MODULE.to_string(),
            kind: FrameKind::Kernel,
            inlined: false,
            file: None,
            line: None,
        })]
    };
    if addrs.is_empty() {
        return Vec::new();
    }
    let mut kernel = Kernel::default();
    kernel.kallsyms = MaybeDefault::Some(options.kallsyms.clone());
    kernel.vmlinux = MaybeDefault::None;
    kernel.debug_syms = false;
    let results = match symbolizer.symbolize(&Source::Kernel(kernel), Input::AbsAddr(addrs)) {
        Ok(r) => r,
        Err(err) => {
            tracing::warn!(error = %err, "cannot symbolize kernel addresses; they are [unknown]");
            return addrs.iter().map(|_| unknown(interner)).collect();
        }
    };
    results
        .iter()
        .zip(addrs)
        .map(|(result, &addr)| match (bpf_symbol_of(bpf, addr), result) {
            (Some(program), _) => vec![interner.get(Frame {
                function: program.to_string(),
                module: BPF_MODULE.to_string(),
                kind: FrameKind::Kernel,
                inlined: false,
                file: None,
                line: None,
            })],
            (None, Symbolized::Sym(sym)) => vec![interner.get(Frame {
                function: sym.name.to_string(),
                module: KERNEL_MODULE.to_string(),
                kind: FrameKind::Kernel,
                inlined: false,
                file: None,
                line: None,
            })],
            (None, Symbolized::Unknown(_)) => unknown(interner),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bpf_symbols_come_from_kallsyms_bpf_lines_and_cover_their_image() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kallsyms");
        std::fs::write(
            &path,
            "ffffffff81000000 T _stext\n\
             ffffffffc0a20000 t bpf_prog_bbbb_on_sock_recv\t[bpf]\n\
             ffffffffc0a1b000 t bpf_prog_aaaa_on_sock_send\t[bpf]\n\
             ffffffffc0203000 t ftrace_trampoline\t[__builtin__ftrace]\n\
             0000000000000000 t bpf_prog_hidden\t[bpf]\n",
        )
        .unwrap();
        let symbols = read_bpf_symbols(&path);
        assert_eq!(symbols, vec![(0xffffffffc0a1b000, "bpf_prog_aaaa_on_sock_send".to_string()), (0xffffffffc0a20000, "bpf_prog_bbbb_on_sock_recv".to_string())]);
        assert_eq!(bpf_symbol_of(&symbols, 0xffffffffc0a1b000), Some("bpf_prog_aaaa_on_sock_send"));
        // Up to the next program's start.
        assert_eq!(bpf_symbol_of(&symbols, 0xffffffffc0a1ffff), Some("bpf_prog_aaaa_on_sock_send"));
        assert_eq!(bpf_symbol_of(&symbols, 0xffffffffc0a20000), Some("bpf_prog_bbbb_on_sock_recv"));
        // At most BPF_SYMBOL_MAX_BYTES past the last one; nothing before the first.
        assert_eq!(bpf_symbol_of(&symbols, 0xffffffffc0a20000 + BPF_SYMBOL_MAX_BYTES - 1), Some("bpf_prog_bbbb_on_sock_recv"));
        assert_eq!(bpf_symbol_of(&symbols, 0xffffffffc0a20000 + BPF_SYMBOL_MAX_BYTES), None);
        assert_eq!(bpf_symbol_of(&symbols, 0xffffffffc0a1afff), None);
        assert!(read_bpf_symbols(&dir.path().join("missing")).is_empty());
    }
}
