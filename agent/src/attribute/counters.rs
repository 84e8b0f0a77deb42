//! Exact call counts of library functions: uprobe perf events in counting mode, filtered on
//! the target's cgroup (no BPF program, no sample: the kernel only increments a counter).
//!
//! A counter is a regular expression on the *mangled* symbol names of the target's binary
//! (`.symtab`; legacy `_ZN...` and v0 `_R...` manglings both spell the path's identifiers in
//! clear), so that it names a library function (e.g. tokio's task registration) and never an
//! app's own code. Every distinct address that matches gets one uprobe (a generic function
//! monomorphized several times has several), on every online CPU, through
//! `perf_event_open(2)` with the uprobe PMU (`/sys/bus/event_source/devices/uprobe/type`;
//! `config1` = path of the binary, `config2` = file offset of the function) and
//! `PERF_FLAG_PID_CGROUP` (the cgroup v2 directory's fd; the kernel counts the cgroup's
//! descendants too). Source of the ABI: `perf_event_open(2)` and `include/uapi/linux/
//! perf_event.h`. A function the compiler inlined everywhere has no symbol: the counter is
//! then reported as not available, never as 0.

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// The library functions counted by default: (name, what one call means, mangled-name regex).
/// `tokio_tasks_spawned`: tokio's `OwnedTasks::bind_inner`, which every task spawned on a
/// runtime passes through exactly once (`tokio::spawn`, `JoinSet::spawn`, hyper's and sqlx's
/// spawns alike; tokio 1.x `runtime/task/list.rs`).
pub const DEFAULT_COUNTERS: &[(&str, &str, &str)] =
    &[("tokio_tasks_spawned", "tokio tasks spawned (tokio::runtime::task::list::OwnedTasks::bind_inner)", r"5tokio7runtime4task4list.*OwnedTasks.*10bind_inner|tokio.*OwnedTasks.*bind_inner")];

/// Prefix of the names of lock counters ([`lock_counter_specs`]): `lock:<function>`.
pub const LOCK_COUNTER_PREFIX: &str = "lock:";

/// [`DEFAULT_COUNTERS`] as [`CounterSpec`]s, plus one lock counter per function of the app's
/// own crates that takes a `Mutex`/`RwLock` ([`super::locks::lock_functions`]): named
/// `lock:<function>`, counting attempts to take the lock on its fast path. A binary that cannot
/// be analysed adds no lock counter (logged).
pub fn default_specs(binary: &Path, crates: &[String]) -> Vec<CounterSpec> {
    let mut specs = symbol_specs(DEFAULT_COUNTERS);
    match super::locks::lock_functions(binary, crates) {
        Ok(fns) => specs.extend(fns.into_iter().filter(|f| !f.probes.is_empty()).map(|f| CounterSpec {
            what: format!("attempts to take the {} in {} (uprobe on the branch after its fast-path compare-and-swap)", f.kinds.join("/"), f.name),
            name: format!("{LOCK_COUNTER_PREFIX}{}", f.name),
            at: ProbeAt::Addresses(f.probes),
        })),
        Err(e) => tracing::warn!("no lock counters: {e}"),
    }
    specs
}

/// (name, meaning, mangled-name regex) triples as [`CounterSpec`]s on function entries.
fn symbol_specs(specs: &[(&str, &str, &str)]) -> Vec<CounterSpec> {
    specs.iter().map(|(name, what, re)| CounterSpec { name: name.to_string(), what: what.to_string(), at: ProbeAt::Symbols(re.to_string()) }).collect()
}

/// One counter's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallCount {
    /// Counter name, e.g. `tokio_tasks_spawned`.
    pub name: String,
    /// What one call means.
    pub what: String,
    /// Distinct function addresses probed (monomorphizations).
    pub probes: u32,
    /// Calls counted over the whole session (all probes, all CPUs).
    pub count: u64,
    /// One of its probes sits on an instruction the kernel single-steps out of line (two
    /// traps per hit) rather than emulates ([`emulated_by_uprobes`]).
    #[serde(default)]
    pub stepped: bool,
}

/// The file `counters.json` an attach or bench output holds beside `profile.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallCounts {
    /// The counters that could be set up, with their counts over the profile's window (or
    /// over the run of [`CallCounts::requests`]).
    pub counts: Vec<CallCount>,
    /// Counters that could not be set up, and why (e.g. the function was inlined everywhere).
    pub unavailable: Vec<(String, String)>,
    /// What one uprobe hit cost the task that took it ([`trap_costs`], calibrated when the
    /// counters were set up); `None` when the calibration failed or in files written before
    /// it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trap: Option<TrapCosts>,
    /// The requests completed while the counters counted, when they counted over a run of
    /// their own rather than the profile's window (`profiler bench`'s counting run: the load
    /// generator's count); the counts per request are then divided by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
}

/// What one uprobe hit costs the task that takes it, ns, by how the kernel runs the probed
/// instruction ([`trap_costs`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TrapCosts {
    /// On an instruction the kernel emulates (a near branch or call, a `push` of a register):
    /// one trap.
    pub emulated_ns: f64,
    /// On any other instruction, single-stepped out of line: a second trap.
    pub stepped_ns: f64,
}

// The functions [`trap_costs`] probes in the agent's own executable, each starting with the
// instruction of its kind: `push rbp` (emulated), `lea` (single-stepped out of line).
#[cfg(target_arch = "x86_64")]
std::arch::global_asm!(
    ".globl profiler_uprobe_trap_emulated",
    ".type profiler_uprobe_trap_emulated, @function",
    "profiler_uprobe_trap_emulated:",
    "push rbp",
    "pop rbp",
    "lea rax, [rdi + 1]",
    "ret",
    ".globl profiler_uprobe_trap_stepped",
    ".type profiler_uprobe_trap_stepped, @function",
    "profiler_uprobe_trap_stepped:",
    "lea rax, [rdi + 1]",
    "ret",
);

#[cfg(target_arch = "x86_64")]
unsafe extern "C" {
    fn profiler_uprobe_trap_emulated(x: u64) -> u64;
    fn profiler_uprobe_trap_stepped(x: u64) -> u64;
}

/// Whether the kernel emulates the instruction at the start of `code` when a uprobe hits it
/// (x86-64, `arch/x86/kernel/uprobes.c`: `branch_setup_xol_ops` for near jumps, conditional
/// jumps and calls, `push_setup_xol_ops` for a push of a register) instead of single-stepping
/// it out of line. `false` when it does not decode.
pub fn emulated_by_uprobes(code: &[u8]) -> bool {
    let mut d = iced_x86::Decoder::new(64, code, iced_x86::DecoderOptions::NONE);
    let ins = d.decode();
    if ins.is_invalid() {
        return false;
    }
    ins.is_jcc_short_or_near() || ins.is_jmp_short_or_near() || ins.is_call_near() || (ins.mnemonic() == iced_x86::Mnemonic::Push && ins.op0_kind() == iced_x86::OpKind::Register)
}

/// What one uprobe hit costs the task that takes it, for each kind of probed instruction
/// ([`TrapCosts`]): a function of the agent's own executable starting with that kind timed
/// without, then with a counting uprobe on it (this thread only), in
/// [`crate::collect::CALIBRATION_PAIRS`] pairs of the least mean over
/// [`crate::collect::CALIBRATION_ROUNDS`] rounds of [`crate::collect::CALIBRATION_CALLS`]
/// calls; the median difference. The trap (a breakpoint, the kernel's uprobe handler, the
/// return to user space) is what the counters cost the target: their events run no BPF
/// program and take no sample. On this machine's kernel (6.18) it read 485 ns emulated and
/// 4,389 ns stepped; a C loop probed through the same PMU read 3,473-3,490 ns on its `lea`.
///
/// # Errors
/// Not x86-64, no uprobe PMU, the agent's executable or its mapping of a function not found,
/// an event not opened, or one that did not count every call it saw.
pub fn trap_costs() -> Result<TrapCosts, String> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the assembly functions above follow the C ABI (one u64 in, one out).
        let emulated_ns = trap_cost_ns(profiler_uprobe_trap_emulated as *const () as u64, |x| unsafe { profiler_uprobe_trap_emulated(x) })?;
        // SAFETY: as above.
        let stepped_ns = trap_cost_ns(profiler_uprobe_trap_stepped as *const () as u64, |x| unsafe { profiler_uprobe_trap_stepped(x) })?;
        Ok(TrapCosts { emulated_ns, stepped_ns })
    }
    #[cfg(not(target_arch = "x86_64"))]
    Err("the uprobe trap calibration is written for x86-64".into())
}

/// [`trap_costs`] of one function at `addr` in this process, called through `call`.
#[cfg(target_arch = "x86_64")]
fn trap_cost_ns(addr: u64, call: impl Fn(u64) -> u64) -> Result<f64, String> {
    let pmu = uprobe_pmu()?;
    let exe = std::fs::read_link("/proc/self/exe").map_err(|e| format!("/proc/self/exe: {e}"))?;
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(|e| format!("/proc/self/maps: {e}"))?;
    let offset = maps
        .lines()
        .filter_map(crate::sys::proc_maps::parse)
        .find(|m| (m.start..m.end).contains(&addr))
        .map(|m| addr - m.start + m.offset)
        .ok_or_else(|| format!("no mapping of {addr:#x} in /proc/self/maps"))?;
    let path = CString::new(exe.as_os_str().as_encoded_bytes()).map_err(|e| format!("{}: {e}", exe.display()))?;
    let measure = || {
        crate::collect::least_mean_ns(|| {
            std::hint::black_box(call(std::hint::black_box(1)));
        })
    };
    crate::collect::median_cost_ns(measure, |measure| {
        let attr = PerfEventAttr { type_: pmu, size: std::mem::size_of::<PerfEventAttr>() as u32, config1: path.as_ptr() as u64, config2: offset, ..Default::default() };
        // SAFETY: a valid perf_event_attr of the size it declares, a path that outlives the
        // call; pid 0 and CPU -1: the calling thread on any CPU. The fd is owned below.
        let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, &attr as *const PerfEventAttr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC) };
        if fd < 0 {
            return Err(format!("perf_event_open (uprobe on {} at {offset:#x}): {}", exe.display(), std::io::Error::last_os_error()));
        }
        // SAFETY: fd was just returned by the kernel and is not owned elsewhere.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let on = measure();
        let mut buf = [0u8; 8];
        File::from(fd).read_exact(&mut buf).map_err(|e| format!("reading the calibration's uprobe count: {e}"))?;
        let hits = u64::from_ne_bytes(buf);
        let calls = u64::from(crate::collect::CALIBRATION_ROUNDS) * u64::from(crate::collect::CALIBRATION_CALLS);
        if hits < calls {
            return Err(format!("the calibration's uprobe counted {hits} of {calls} calls"));
        }
        Ok(on)
    })
}

/// The uprobe PMU's type (`/sys/bus/event_source/devices/uprobe/type`).
fn uprobe_pmu() -> Result<u32, String> {
    std::fs::read_to_string("/sys/bus/event_source/devices/uprobe/type")
        .map_err(|e| format!("no uprobe PMU (/sys/bus/event_source/devices/uprobe/type: {e})"))?
        .trim()
        .parse()
        .map_err(|e| format!("uprobe PMU type: {e}"))
}

impl CallCounts {
    /// Hits of every counter's uprobes (all counts summed).
    pub fn hits(&self) -> u64 {
        self.counts.iter().map(|c| c.count).sum()
    }

    /// The traps' cost to the target over the session, ns: each counter's hits times the
    /// calibrated cost of its kind of probe ([`CallCount::stepped`]). `None` without a
    /// calibration.
    pub fn trap_ns(&self) -> Option<f64> {
        let t = self.trap?;
        Some(self.counts.iter().map(|c| c.count as f64 * if c.stepped { t.stepped_ns } else { t.emulated_ns }).sum())
    }

    /// The count of counter `name`, when it was available.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.counts.iter().find(|c| c.name == name).map(|c| c.count)
    }

    /// Reads `counters.json` from `dir`; `None` when absent or unreadable.
    pub fn read(dir: &Path) -> Option<CallCounts> {
        serde_json::from_str(&std::fs::read_to_string(dir.join("counters.json")).ok()?).ok()
    }

    /// Writes `counters.json` into `dir`.
    ///
    /// # Errors
    /// The I/O error.
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let json = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        crate::output::write_bytes_replacing(dir.join("counters.json"), json + "\n")
    }
}

/// `struct perf_event_attr` up to `config2` (`PERF_ATTR_SIZE_VER1`, 72 bytes).
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
}

const PERF_FLAG_PID_CGROUP: libc::c_ulong = 1 << 2;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

/// Open counters, counting from the moment [`Counters::open`] returned.
pub struct Counters {
    entries: Vec<(usize, Vec<OwnedFd>)>,
    /// Per counter: name, meaning, probes, and whether one is single-stepped.
    specs: Vec<(String, String, u32, bool)>,
    unavailable: Vec<(String, String)>,
    /// [`trap_costs`], measured when the counters were set up.
    trap: Option<TrapCosts>,
    // The path the kernel resolved; kept alive for the duration (the kernel copied it).
    _path: CString,
}

/// Where a counter's uprobes go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeAt {
    /// The entry of every function whose mangled symbol name matches this regex.
    Symbols(String),
    /// These virtual addresses of the binary (any instruction a uprobe accepts), e.g. the
    /// fast-path branches of [`super::locks::LockFunction::probes`].
    Addresses(Vec<u64>),
}

/// One counter to set up: its name, what one count means, where its uprobes go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterSpec {
    /// Counter name, e.g. `tokio_tasks_spawned`.
    pub name: String,
    /// What one count means.
    pub what: String,
    /// Where its uprobes go.
    pub at: ProbeAt,
}

/// File offsets of `at` in the binary (distinct virtual addresses, mapped through the ELF
/// segments: the uprobe PMU takes file offsets).
/// The file offsets of `at`'s probes in `binary`, each with whether the kernel emulates the
/// instruction there ([`emulated_by_uprobes`]).
fn probe_offsets(binary: &Path, at: &ProbeAt) -> Result<Vec<(u64, bool)>, String> {
    use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
    let data = std::fs::read(binary).map_err(|e| format!("{}: {e}", binary.display()))?;
    let obj = object::File::parse(&*data).map_err(|e| format!("{}: {e}", binary.display()))?;
    let mut addrs: Vec<u64> = match at {
        ProbeAt::Symbols(re) => {
            let re = Regex::new(re).map_err(|e| e.to_string())?;
            obj.symbols().filter(|s| s.kind() == SymbolKind::Text && s.address() != 0 && s.name().is_ok_and(|n| re.is_match(n))).map(|s| s.address()).collect()
        }
        ProbeAt::Addresses(a) => a.clone(),
    };
    addrs.sort_unstable();
    addrs.dedup();
    let mut out = Vec::new();
    for a in addrs {
        for seg in obj.segments() {
            let (fo, fs) = seg.file_range();
            if a >= seg.address() && a < seg.address() + fs.min(seg.size()) {
                let off = a - seg.address() + fo;
                out.push((off, data.get(off as usize..).is_some_and(emulated_by_uprobes)));
                break;
            }
        }
    }
    Ok(out)
}

fn online_cpus() -> Vec<i32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_else(|_| "0".into());
    let mut cpus = Vec::new();
    for part in text.trim().split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<i32>(), b.parse::<i32>()) {
                    cpus.extend(a..=b);
                }
            }
            None => cpus.extend(part.parse::<i32>().ok()),
        }
    }
    cpus
}

impl Counters {
    /// Sets up `specs` (name, meaning, mangled-name regex; see [`DEFAULT_COUNTERS`]) on
    /// `binary` (a path the kernel can resolve, e.g. `/proc/PID/exe` of a containerized
    /// process: the uprobe sits on the file's inode, so a restarted container of the same
    /// image is counted too) for the tasks of the cgroup v2 directory `cgroup`.
    ///
    /// # Errors
    /// No uprobe PMU, the binary or the cgroup cannot be opened. A counter whose function is
    /// not found, or whose events cannot be opened, is listed in [`CallCounts::unavailable`].
    pub fn open(binary: &Path, cgroup: &Path, specs: &[(&str, &str, &str)]) -> Result<Counters, String> {
        Self::open_specs(binary, cgroup, &symbol_specs(specs))
    }

    /// [`Counters::open`] with explicit [`CounterSpec`]s (symbols or addresses).
    ///
    /// # Errors
    /// As [`Counters::open`].
    pub fn open_specs(binary: &Path, cgroup: &Path, specs: &[CounterSpec]) -> Result<Counters, String> {
        let pmu = uprobe_pmu()?;
        let cg = File::open(cgroup).map_err(|e| format!("{}: {e}", cgroup.display()))?;
        let path = CString::new(binary.as_os_str().as_encoded_bytes()).map_err(|e| format!("{}: {e}", binary.display()))?;
        let cpus = online_cpus();
        // Before the target's probes exist: the calibration's own trap is the only one.
        let trap = trap_costs().map_err(|e| tracing::warn!("uprobe trap cost not calibrated: {e}")).ok();
        let mut c = Counters { entries: Vec::new(), specs: Vec::new(), unavailable: Vec::new(), trap, _path: path.clone() };
        for (i, CounterSpec { name, what, at }) in specs.iter().enumerate() {
            if let ProbeAt::Symbols(re) = at {
                Regex::new(re).map_err(|e| format!("counter {name}: {e}"))?;
            }
            let offsets = match probe_offsets(binary, at) {
                Ok(o) if o.is_empty() => {
                    c.unavailable.push((name.to_string(), "no symbol matches (inlined everywhere, or not linked in)".into()));
                    continue;
                }
                Ok(o) => o,
                Err(e) => {
                    c.unavailable.push((name.to_string(), e));
                    continue;
                }
            };
            let mut fds = Vec::new();
            let mut failure = None;
            'open: for &(off, _) in &offsets {
                for &cpu in &cpus {
                    let attr = PerfEventAttr {
                        type_: pmu,
                        size: std::mem::size_of::<PerfEventAttr>() as u32,
                        config1: path.as_ptr() as u64,
                        config2: off,
                        ..Default::default()
                    };
                    // SAFETY: a valid perf_event_attr of the size it declares, a path that
                    // outlives the call; the returned fd is owned here.
                    let fd = unsafe {
                        libc::syscall(libc::SYS_perf_event_open, &attr as *const PerfEventAttr, cg.as_raw_fd(), cpu, -1, PERF_FLAG_PID_CGROUP | PERF_FLAG_FD_CLOEXEC)
                    };
                    if fd < 0 {
                        failure = Some(format!("perf_event_open (uprobe at {:#x}, CPU {cpu}): {}", off, std::io::Error::last_os_error()));
                        break 'open;
                    }
                    // SAFETY: fd was just returned by the kernel and is not owned elsewhere.
                    fds.push(unsafe { OwnedFd::from_raw_fd(fd as i32) });
                }
            }
            match failure {
                Some(e) => c.unavailable.push((name.to_string(), e)),
                None => {
                    let stepped = offsets.iter().any(|&(_, emulated)| !emulated);
                    c.specs.push((name.to_string(), what.to_string(), offsets.len() as u32, stepped));
                    c.entries.push((i, fds));
                }
            }
        }
        Ok(c)
    }

    /// Reads every counter (the events keep counting until dropped). A counter one of whose
    /// events cannot be read goes to [`CallCounts::unavailable`] with the error, rather than
    /// count less than it saw.
    pub fn read(&self) -> CallCounts {
        let mut counts = Vec::new();
        let mut unavailable = self.unavailable.clone();
        for ((_, fds), (name, what, probes, stepped)) in self.entries.iter().zip(&self.specs) {
            let mut total = 0u64;
            let mut failure = None;
            for fd in fds {
                let mut buf = [0u8; 8];
                match fd.try_clone().map(File::from).and_then(|mut f| f.read_exact(&mut buf)) {
                    Ok(()) => total += u64::from_ne_bytes(buf),
                    Err(e) => failure = Some(format!("reading its perf event: {e}")),
                }
            }
            match failure {
                None => counts.push(CallCount { name: name.clone(), what: what.clone(), probes: *probes, count: total, stepped: *stepped }),
                Some(e) => unavailable.push((name.clone(), e)),
            }
        }
        CallCounts { counts, unavailable, trap: self.trap, requests: None }
    }
}
