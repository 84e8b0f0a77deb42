//! User-space DWARF unwinding of copied user stacks (the "stack copy" path).
//!
//! For each on-CPU sample the BPF program `on_cpu_sample_stack_copy` sends the user registers
//! (ip, sp, bp) and a bounded copy of the user stack from sp upward. [`Unwinder::unwind`]
//! walks it with [framehop](https://docs.rs/framehop) against the `.eh_frame` CFI of the
//! binaries the process maps (see [`module`]), which works whether or not the code keeps frame
//! pointers (Rust release builds, Debian's glibc).
//!
//! The result is a leaf-first list of addresses like the frame-pointer path gives: the
//! instruction pointer, then raw return addresses (the symbolizer subtracts 1 from return
//! addresses itself), and how the walk ended ([`StackEnd`]):
//!
//! - [`StackEnd::Complete`]: the CFI said there is no caller (`_start` and glibc's `clone3`
//!   mark the return address undefined, per the x86_64 psABI) or the return address was 0.
//! - [`StackEnd::CopyEnd`]: the walk needed stack bytes beyond the copy (a stack deeper than
//!   the `stack_copy_bytes` bound). The frames found so far are right; the rest is missing.
//! - [`StackEnd::NoUnwindInfo`]: a frame's code has no CFI (anonymous executable memory such
//!   as JIT code, a binary without `.eh_frame`, an unreadable binary). In [`Mode::Dwarf`] the
//!   walk stops there, keeping that frame; in [`Mode::Auto`] framehop's frame-pointer rule is
//!   used for such frames instead (counted in [`Unwound::fp_fallback_frames`]).
//! - [`StackEnd::BadAddress`]: the next return address is not in executable memory of the
//!   process: it is dropped, never presented as a frame.
//! - [`StackEnd::DepthLimit`], [`StackEnd::Error`]: the walk hit [`MAX_FRAMES`] or framehop
//!   refused to continue (no progress, overflow).
//!
//! Processes are scanned from `/proc/PID/maps` when first seen, again when an instruction
//! pointer falls outside every known executable mapping (at most every
//! [`RESCAN_AFTER_MISS`]) and when their maps changed (checked every [`RESCAN_EVERY`]).
//! Binaries are read once per run and file ([`module::ModuleCache`]: device, inode, size,
//! mtime), so a binary replaced during the run (a new file at the same path, re-executed or
//! reloaded) is read again at the next scan and counted in [`ModuleStats::replaced`]; samples
//! taken before the scan noticed it (at most [`RESCAN_EVERY`]) were unwound with the old
//! tables, which were right for them unless the process had already switched.

pub mod module;

use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{Error as FhError, ExplicitModuleSectionInfo, Module, Unwinder as _};
use gimli::{BaseAddresses, EhFrame, EhFrameHdr, LittleEndian, UnwindSection};

use crate::sys::proc_maps;

pub use module::{ModuleCache, ModuleData, UnwindInfo};

/// Most frames of one unwound stack (the kernel's `perf_event_max_stack` default, like the
/// frame-pointer path).
pub const MAX_FRAMES: usize = 127;
/// Farthest a stack address can be above sp and still be taken for a stack deeper than the
/// copy: 64 MiB, more than any thread stack (8 MiB main-thread default, 2 MiB for Rust
/// threads).
pub const MAX_STACK_SPAN: u64 = 64 << 20;
/// A process's maps are re-read at most this often when an instruction pointer falls outside
/// its known executable mappings.
pub const RESCAN_AFTER_MISS: Duration = Duration::from_millis(200);
/// A process's maps are compared with the last scan this often (new libraries, exec).
pub const RESCAN_EVERY: Duration = Duration::from_secs(2);

/// How frames in code without CFI are handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// CFI only: the walk stops at the first frame whose code has no CFI.
    Dwarf,
    /// CFI where the code has it, frame pointers (framehop's fallback rule) where it has not.
    Auto,
}

/// How an unwound stack ended. See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StackEnd {
    /// The outermost frame has no caller according to its CFI (or a null return address).
    Complete,
    /// More stack bytes were needed than were copied.
    CopyEnd,
    /// A frame's code has no CFI (and [`Mode::Dwarf`]).
    NoUnwindInfo,
    /// A return address outside the process's executable memory.
    BadAddress,
    /// [`MAX_FRAMES`] frames.
    DepthLimit,
    /// framehop stopped (no progress, integer overflow, a read before sp).
    Error,
    /// The process could not be scanned (it exited): only the instruction pointer is known.
    ProcessGone,
}

impl StackEnd {
    /// Short name for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            StackEnd::Complete => "complete",
            StackEnd::CopyEnd => "copy_end",
            StackEnd::NoUnwindInfo => "no_unwind_info",
            StackEnd::BadAddress => "bad_address",
            StackEnd::DepthLimit => "depth_limit",
            StackEnd::Error => "error",
            StackEnd::ProcessGone => "process_gone",
        }
    }
}

/// One sample to unwind: the user registers and the stack copied from `sp` upward.
#[derive(Debug, Clone, Copy)]
pub struct Sample<'a> {
    /// Process id (host pid namespace).
    pub pid: u32,
    /// User instruction pointer.
    pub ip: u64,
    /// User stack pointer: `stack[0]` is the byte at this address.
    pub sp: u64,
    /// User `rbp`.
    pub bp: u64,
    /// User memory `[sp, sp + stack.len())`.
    pub stack: &'a [u8],
    /// True when the copy ended at the top of the stack mapping (the kernel's read faulted
    /// there), so nothing above it is stack: a walk that needs more is broken, not deep.
    pub stack_top_reached: bool,
}

/// An unwound stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unwound {
    /// Leaf first: the instruction pointer, then return addresses (not adjusted).
    pub frames: Vec<u64>,
    /// How the walk ended.
    pub end: StackEnd,
    /// Frames unwound with the frame-pointer fallback (code without CFI, [`Mode::Auto`]).
    pub fp_fallback_frames: u32,
    /// Bytes of the copy the walk read: highest address read + 8 - sp.
    pub stack_bytes_used: u64,
}

/// Per-binary counts, for the report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModuleStats {
    /// File name of the binary (`libc.so.6`, `[vdso]`, `[anonymous]` for anonymous
    /// executable memory).
    pub name: String,
    /// GNU build id, hex.
    pub build_id: Option<String>,
    /// Unwind tables found: `eh_frame_hdr`, `eh_frame`, `debug_frame` or `none`.
    pub unwind_info: &'static str,
    /// Why the tables could not be read, if they could not.
    pub error: Option<String>,
    /// Frames in this binary unwound with CFI.
    pub cfi_frames: u64,
    /// Frames in this binary unwound with the frame-pointer fallback.
    pub fp_fallback_frames: u64,
    /// Samples whose walk ended in this binary, by [`StackEnd`] (complete included).
    pub ends: HashMap<StackEnd, u64>,
    /// Samples with at least one frame in this binary.
    pub samples: u64,
    /// Of [`ModuleStats::samples`], those whose walk was [`StackEnd::Complete`].
    pub samples_complete: u64,
    /// Stack bytes copied by the kernel for [`ModuleStats::samples`], summed, bytes.
    pub bytes_copied: u64,
    /// Times a process was seen mapping another file under this name than before (the
    /// binary was replaced and re-executed or reloaded during the run); its new tables were
    /// read and used from then on.
    pub replaced: u64,
}

/// One executable mapping of a process.
struct ExecMapping {
    range: Range<u64>,
    /// `None` for anonymous executable memory.
    module: Option<Arc<ModuleData>>,
    /// Process address = SVMA + bias.
    bias: u64,
    /// Report key: file name or `[anonymous]`.
    name: String,
}

struct ProcessState {
    unwinder: UnwinderX86_64<Arc<[u8]>>,
    /// Sorted by start.
    mappings: Vec<ExecMapping>,
    maps_text: String,
    scanned: Instant,
    gone: bool,
}

/// Unwinds samples of any number of processes; caches binaries and processes for the run.
pub struct Unwinder {
    mode: Mode,
    /// `/proc` (tests may point elsewhere only for reading maps of this process).
    proc_root: PathBuf,
    modules: ModuleCache,
    processes: HashMap<u32, ProcessState>,
    cache: CacheX86_64,
    /// (binary identity as pointer, SVMA) -> covered by an FDE.
    coverage: HashMap<(usize, u64), bool>,
    stats: HashMap<String, ModuleStats>,
}

impl Unwinder {
    /// An unwinder with empty caches.
    pub fn new(mode: Mode) -> Self {
        Unwinder {
            mode,
            proc_root: PathBuf::from("/proc"),
            modules: ModuleCache::default(),
            processes: HashMap::new(),
            cache: CacheX86_64::new(),
            coverage: HashMap::new(),
            stats: HashMap::new(),
        }
    }

    /// The mode this unwinder was built with.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Distinct binaries whose tables were read.
    pub fn binaries_loaded(&self) -> usize {
        self.modules.len()
    }

    /// Per-binary counts so far, sorted by name.
    pub fn module_stats(&self) -> Vec<ModuleStats> {
        let mut v: Vec<ModuleStats> = self.stats.values().cloned().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Forgets a process (it exited); its binaries stay cached.
    pub fn forget_process(&mut self, pid: u32) {
        self.processes.remove(&pid);
    }

    fn ensure_process(&mut self, pid: u32, ip: u64) {
        let now = Instant::now();
        let needs_scan = match self.processes.get(&pid) {
            None => true,
            Some(p) => {
                let known = find_mapping(&p.mappings, ip).is_some();
                (!known && now.duration_since(p.scanned) >= RESCAN_AFTER_MISS) || now.duration_since(p.scanned) >= RESCAN_EVERY
            }
        };
        if !needs_scan {
            return;
        }
        let maps_path = self.proc_root.join(pid.to_string()).join("maps");
        let text = std::fs::read_to_string(&maps_path).unwrap_or_default();
        if let Some(p) = self.processes.get_mut(&pid) {
            p.scanned = now;
            if p.maps_text == text || (text.is_empty() && !p.gone) {
                // Unchanged, or the process is gone: keep what we know (samples already in
                // the ring buffer may still be unwound with it).
                return;
            }
        }
        let state = self.scan(pid, text, now);
        if let Some(old) = self.processes.get(&pid) {
            // A path that maps another file than at the last scan (exec of a rebuilt binary,
            // a library replaced and reloaded): the new file's tables are in use from now on.
            let mut counted: Vec<&str> = Vec::new();
            for m in &state.mappings {
                let Some(new) = &m.module else { continue };
                let replaced = old.mappings.iter().any(|o| o.name == m.name && o.module.as_ref().is_some_and(|om| !Arc::ptr_eq(om, new)));
                if replaced && !counted.contains(&m.name.as_str()) {
                    counted.push(&m.name);
                    tracing::info!(pid, binary = m.name, build_id = new.build_id.as_deref().unwrap_or("-"), "binary replaced during the run: new unwind tables");
                    self.stats.entry(m.name.clone()).or_default().replaced += 1;
                }
            }
        }
        self.processes.insert(pid, state);
    }

    fn scan(&mut self, pid: u32, text: String, now: Instant) -> ProcessState {
        let mut unwinder = UnwinderX86_64::new();
        let mut mappings = Vec::new();
        for line in text.lines() {
            let Some(m) = proc_maps::parse(line) else { continue };
            if !m.perms.contains('x') {
                continue;
            }
            let (module, name) = if m.path == "[vdso]" {
                (Some(self.modules.vdso()), "[vdso]".to_owned())
            } else if m.path.starts_with('/') {
                let map_file = self.proc_root.join(pid.to_string()).join("map_files").join(format!("{:x}-{:x}", m.start, m.end));
                let name = proc_maps::file_name(m.path);
                (Some(self.modules.get(&map_file, &name)), name)
            } else {
                // Anonymous executable memory (JIT), [vsyscall], ...: no tables.
                (None, if m.path.is_empty() { "[anonymous]".to_owned() } else { m.path.to_owned() })
            };
            let bias = module.as_ref().and_then(|md| md.bias_for_mapping(m.start, m.offset));
            let module = match (module, bias) {
                (Some(md), Some(_)) => Some(md),
                _ => None,
            };
            let bias = bias.unwrap_or(0);
            if let Some(md) = &module {
                if md.unwind_info() != UnwindInfo::None {
                    unwinder.add_module(framehop_module(md, m.start..m.end, bias));
                }
            }
            let stats = self.stats.entry(name.clone()).or_default();
            if stats.name.is_empty() {
                stats.name = name.clone();
                stats.unwind_info = module.as_ref().map(|md| md.unwind_info().as_str()).unwrap_or("none");
                stats.build_id = module.as_ref().and_then(|md| md.build_id.clone());
                stats.error = module.as_ref().and_then(|md| md.error.clone());
            }
            mappings.push(ExecMapping { range: m.start..m.end, module, bias, name });
        }
        mappings.sort_by_key(|m| m.range.start);
        let gone = text.is_empty();
        ProcessState { unwinder, mappings, maps_text: text, scanned: now, gone }
    }

    /// True when `svma` of `module` lies inside an FDE (cached per binary and address).
    fn covered(&mut self, module: &Arc<ModuleData>, svma: u64) -> bool {
        let key = (Arc::as_ptr(module) as usize, svma);
        if let Some(&c) = self.coverage.get(&key) {
            return c;
        }
        let c = fde_covers(module, svma);
        self.coverage.insert(key, c);
        c
    }

    /// Unwinds one sample. Never fails: see [`StackEnd`] for how a walk can end early.
    pub fn unwind(&mut self, sample: &Sample<'_>) -> Unwound {
        self.ensure_process(sample.pid, sample.ip);
        let mut frames: Vec<u64> = Vec::new();
        let mut fp_fallback_frames = 0u32;
        let mut max_read: Option<u64> = None;
        let sp = sample.sp;
        let stack = sample.stack;
        let copy_end = sp.saturating_add(stack.len() as u64);

        // Borrow juggling: take the process state out while unwinding.
        let Some(process) = self.processes.remove(&sample.pid) else {
            return Unwound { frames: vec![sample.ip], end: StackEnd::ProcessGone, fp_fallback_frames: 0, stack_bytes_used: 0 };
        };
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            let off = addr.checked_sub(sp).ok_or(())?;
            let off = usize::try_from(off).map_err(|_| ())?;
            let bytes = stack.get(off..off.checked_add(8).ok_or(())?).ok_or(())?;
            max_read = Some(max_read.map_or(addr, |m: u64| m.max(addr)));
            Ok(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
        };
        let mut cache = std::mem::replace(&mut self.cache, CacheX86_64::new());
        let end;
        let mut last_module: Option<String> = None;
        // Binaries holding a frame of this walk (few: a linear set).
        let mut touched: Vec<String> = Vec::new();
        let mut last_used_fallback = false;
        {
            let regs = UnwindRegsX86_64::new(sample.ip, sample.sp, sample.bp);
            let mut iter = process.unwinder.iter_frames(sample.ip, regs, &mut cache, &mut read_stack);
            loop {
                let frame = match iter.next() {
                    Ok(Some(frame)) => frame,
                    Ok(None) => {
                        // A frame-pointer step that meets bp == 0 has not proven the end.
                        end = if last_used_fallback { StackEnd::NoUnwindInfo } else { StackEnd::Complete };
                        break;
                    }
                    Err(FhError::CouldNotReadStack(addr)) => {
                        // Beyond the copy: a deeper stack, unless the copy already reached the
                        // top of the stack or the address is farther than any thread stack
                        // (a register that held no stack address).
                        let deeper = addr >= sp && addr.saturating_add(8) > copy_end && !sample.stack_top_reached && addr - sp < MAX_STACK_SPAN;
                        end = if deeper { StackEnd::CopyEnd } else { StackEnd::Error };
                        break;
                    }
                    Err(_) => {
                        end = StackEnd::Error;
                        break;
                    }
                };
                let lookup = frame.address_for_lookup();
                let Some(mapping) = find_mapping(&process.mappings, lookup) else {
                    if frames.is_empty() {
                        // The leaf itself outside every executable mapping: keep the ip (it is
                        // what the CPU executed), nothing above it can be trusted.
                        frames.push(frame.address());
                        end = if process.gone { StackEnd::ProcessGone } else { StackEnd::NoUnwindInfo };
                    } else {
                        end = StackEnd::BadAddress;
                    }
                    break;
                };
                frames.push(frame.address());
                last_module = Some(mapping.name.clone());
                if !touched.contains(&mapping.name) {
                    touched.push(mapping.name.clone());
                }
                if frames.len() >= MAX_FRAMES {
                    end = StackEnd::DepthLimit;
                    break;
                }
                let has_cfi = match &mapping.module {
                    Some(md) if md.unwind_info() != UnwindInfo::None => {
                        let svma = lookup.wrapping_sub(mapping.bias);
                        let md = md.clone();
                        self.covered(&md, svma)
                    }
                    _ => false,
                };
                let stats = self.stats.entry(mapping.name.clone()).or_default();
                if has_cfi {
                    stats.cfi_frames += 1;
                    last_used_fallback = false;
                } else if self.mode == Mode::Auto {
                    stats.fp_fallback_frames += 1;
                    fp_fallback_frames += 1;
                    last_used_fallback = true;
                } else {
                    end = StackEnd::NoUnwindInfo;
                    break;
                }
            }
        }
        self.cache = cache;
        let name = last_module.unwrap_or_else(|| "[unknown]".to_owned());
        let stats = self.stats.entry(name.clone()).or_default();
        if stats.name.is_empty() {
            stats.name = name;
            stats.unwind_info = "none";
        }
        *stats.ends.entry(end).or_default() += 1;
        for name in touched {
            let stats = self.stats.entry(name).or_default();
            stats.samples += 1;
            stats.samples_complete += u64::from(end == StackEnd::Complete);
            stats.bytes_copied += stack.len() as u64;
        }
        self.processes.insert(sample.pid, process);
        let stack_bytes_used = max_read.map_or(0, |m| m + 8 - sp);
        Unwound { frames, end, fp_fallback_frames, stack_bytes_used }
    }
}

/// How the frames of one binary were unwound, as [`module_unwinding`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModuleUnwinding {
    /// CFI only.
    Cfi {
        /// Where the CFI came from (`eh_frame_hdr`, `eh_frame`, ...).
        info: String,
    },
    /// CFI, and frame pointers where the CFI had no entry.
    CfiAndFramePointers {
        /// Where the CFI came from.
        info: String,
    },
    /// Frame pointers in the stack-copy path: the binary had no usable CFI.
    FramePointersNoCfi,
    /// No frame of it was unwound.
    None {
        /// What its unwind information was.
        info: String,
    },
    /// Frame pointers walked in the kernel (`--unwind fp`: no stack copy).
    FramePointers,
}

/// One binary's row of the unwinding summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleRow {
    /// The binary's file name.
    pub module: String,
    /// How its frames were unwound.
    pub unwinding: ModuleUnwinding,
    /// Times the binary was replaced during the run (another file mapped under its name).
    pub replaced: u64,
    /// On-CPU samples with at least one frame in it.
    pub samples: u64,
    /// Those of `samples` whose stack is complete.
    pub complete: u64,
    /// User-stack bytes copied for `samples` (0 with frame pointers).
    pub bytes_copied: u64,
}

/// Per binary holding frames of on-CPU samples: how its frames were unwound, with its samples
/// first (ties by name). Empty without on-CPU samples.
///
/// With the stack copy (`dwarf`, `auto`) the figures come from [`crate::profile::UnwindReport`]
/// ("complete": the CFI of the outermost frame says it has no caller); with frame pointers
/// (`fp`, no report) from the symbolized stacks ("complete": not [`crate::profile::Stack::truncated`])
/// and nothing is copied.
pub fn module_unwinding(profile: &crate::profile::Profile) -> Vec<ModuleRow> {
    let mut rows: Vec<ModuleRow> = Vec::new();
    if profile.on_cpu.iter().all(|c| c.count == 0) {
        return rows;
    }
    match &profile.meta.unwind {
        Some(r) => {
            for m in r.modules.iter().filter(|m| m.samples > 0) {
                let info = m.unwind_info.clone();
                let unwinding = match (m.cfi_frames > 0, m.fp_fallback_frames > 0) {
                    (true, false) => ModuleUnwinding::Cfi { info },
                    (true, true) => ModuleUnwinding::CfiAndFramePointers { info },
                    (false, true) => ModuleUnwinding::FramePointersNoCfi,
                    (false, false) => ModuleUnwinding::None { info },
                };
                rows.push(ModuleRow {
                    module: m.module.clone(),
                    unwinding,
                    replaced: m.replaced,
                    samples: m.samples,
                    complete: m.samples_complete,
                    bytes_copied: m.bytes_copied,
                });
            }
        }
        None => {
            // Each user frame's module as an index into `modules`, looked up once per frame
            // rather than compared by name in every stack.
            let mut modules: Vec<&str> = Vec::new();
            let mut module_index: HashMap<&str, usize> = HashMap::new();
            let frame_module: Vec<Option<usize>> = profile
                .frames
                .iter()
                .map(|f| {
                    (f.kind == crate::profile::FrameKind::User && !f.module.is_empty()).then(|| {
                        *module_index.entry(f.module.as_str()).or_insert_with(|| {
                            modules.push(&f.module);
                            modules.len() - 1
                        })
                    })
                })
                .collect();
            // Per module: (samples, complete samples, the last count that counted it).
            let mut by_module: Vec<(u64, u64, usize)> = vec![(0, 0, usize::MAX); modules.len()];
            for (i, c) in profile.on_cpu.iter().enumerate() {
                let Some(stack) = profile.stacks.get(c.stack as usize) else { continue };
                for &f in &stack.frames {
                    let Some(&Some(m)) = frame_module.get(f as usize) else { continue };
                    let e = &mut by_module[m];
                    if e.2 != i {
                        e.2 = i;
                        e.0 += c.count;
                        e.1 += if stack.truncated { 0 } else { c.count };
                    }
                }
            }
            rows.extend(modules.iter().zip(&by_module).filter(|(_, e)| e.2 != usize::MAX).map(|(m, &(n, complete, _))| ModuleRow {
                module: (*m).to_owned(),
                unwinding: ModuleUnwinding::FramePointers,
                replaced: 0,
                samples: n,
                complete,
                bytes_copied: 0,
            }));
        }
    }
    rows.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.module.cmp(&b.module)));
    rows
}

fn find_mapping(mappings: &[ExecMapping], addr: u64) -> Option<&ExecMapping> {
    let i = mappings.partition_point(|m| m.range.start <= addr);
    let m = mappings.get(i.checked_sub(1)?)?;
    m.range.contains(&addr).then_some(m)
}

fn framehop_module(md: &ModuleData, avma: Range<u64>, bias: u64) -> Module<Arc<[u8]>> {
    let info = ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: md.text_svma.clone(),
        got_svma: md.got_svma.clone(),
        eh_frame_svma: md.eh_frame.as_ref().map(|(r, _)| r.clone()),
        eh_frame: md.eh_frame.as_ref().map(|(_, d)| d.clone()),
        eh_frame_hdr_svma: md.eh_frame_hdr.as_ref().map(|(r, _)| r.clone()),
        eh_frame_hdr: md.eh_frame_hdr.as_ref().map(|(_, d)| d.clone()),
        debug_frame: md.debug_frame.clone(),
        ..Default::default()
    };
    Module::new(md.name.clone(), avma, bias, info)
}

/// True when an FDE of `md` covers `svma`. With `.eh_frame_hdr` this is a binary search;
/// without it a linear scan (cached by the caller).
fn fde_covers(md: &ModuleData, svma: u64) -> bool {
    let Some((eh_range, eh)) = &md.eh_frame else {
        if let Some(debug_frame) = &md.debug_frame {
            let section = gimli::DebugFrame::new(debug_frame, LittleEndian);
            let bases = BaseAddresses::default();
            return section.fde_for_address(&bases, svma, gimli::DebugFrame::cie_from_offset).is_ok();
        }
        return false;
    };
    let eh_frame = EhFrame::new(eh, LittleEndian);
    let mut bases = BaseAddresses::default().set_eh_frame(eh_range.start);
    if let Some(text) = &md.text_svma {
        bases = bases.set_text(text.start);
    }
    if let Some(got) = &md.got_svma {
        bases = bases.set_got(got.start);
    }
    if let Some((hdr_range, hdr)) = &md.eh_frame_hdr {
        bases = bases.set_eh_frame_hdr(hdr_range.start);
        if let Ok(parsed) = EhFrameHdr::new(hdr, LittleEndian).parse(&bases, 8) {
            if let Some(table) = parsed.table() {
                return table.fde_for_address(&eh_frame, &bases, svma, EhFrame::cie_from_offset).is_ok();
            }
        }
    }
    eh_frame.fde_for_address(&bases, svma, EhFrame::cie_from_offset).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_lookup_is_half_open() {
        let m = |s, e| ExecMapping { range: s..e, module: None, bias: 0, name: String::new() };
        let maps = vec![m(0x1000, 0x2000), m(0x3000, 0x4000)];
        assert!(find_mapping(&maps, 0xfff).is_none());
        assert_eq!(find_mapping(&maps, 0x1000).unwrap().range.start, 0x1000);
        assert!(find_mapping(&maps, 0x2000).is_none());
        assert_eq!(find_mapping(&maps, 0x3fff).unwrap().range.start, 0x3000);
        assert!(find_mapping(&maps, 0x4000).is_none());
    }
}
