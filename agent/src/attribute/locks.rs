//! The app's functions that take a `Mutex`/`RwLock`, found in its machine code, so that their
//! calls can be counted per request ([`super::counters`]) even when the lock is never contended.
//!
//! An uncontended `std::sync::Mutex::lock` is one inlined compare-and-swap, tens of ns with no
//! frame of its own: a sampling profile almost never has a sample in it, and a uprobe cannot
//! hit inlined code. But every inlined fast path carries a call to the lock's out-of-line
//! contended slow path (`std::sys::sync::mutex::futex::Mutex::lock_contended`,
//! `RwLock::read_contended` / `write_contended`, library/std/src/sys/sync/; parking_lot's
//! `RawMutex::lock_slow`, `RawRwLock::lock_shared_slow` / `lock_exclusive_slow`). So a function
//! whose code holds such a call takes that lock. This module reads the binary (ELF, x86-64),
//! decodes every function of the app's own crates with iced-x86 and keeps those with a call to
//! a slow path: a direct `call rel32`, or `call [rip + slot]` through a GOT slot (how a PIE
//! Rust binary calls the standard library; slot targets from the `R_X86_64_RELATIVE` /
//! `GLOB_DAT` dynamic relocations). The app's crates are named by the caller (Cargo's rule: a
//! binary crate is named like its executable, `target-app` -> `target_app`).
//!
//! To count acquisitions, not calls of the function (a function may take its lock on one branch
//! only, e.g. a refresh once a second), each lock's fast path is located: the locked
//! `cmpxchg` followed by the conditional branch whose taken or fall-through side reaches the
//! slow-path call within a few instructions. The uprobe goes on that branch ([`LockFunction::
//! probes`]): x86 uprobes refuse `lock`-prefixed instructions (arch/x86/kernel/uprobes.c,
//! `is_prefix_bad`), and the branch runs exactly once per attempt to take the lock.
//!
//! What code cannot tell: whether a lock is shared by all requests or private to one.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use iced_x86::{Code, Decoder, DecoderOptions};
use object::{Object, ObjectSection, ObjectSymbol, RelocationTarget, SymbolKind};
use regex::Regex;

/// Most bytes decoded per function (longer functions are decoded up to this).
pub const MAX_FUNCTION_BYTES: u64 = 256 * 1024;

/// A function of the app's own crates that takes a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockFunction {
    /// Demangled name without hash, e.g. `target_app::layers::rate_limit::lock_rate_table`.
    pub name: String,
    /// The symbol as in `.symtab` (what a uprobe counter matches).
    pub mangled: String,
    /// Kinds of the slow paths it calls: `mutex`, `rwlock_read`, `rwlock_write`, sorted.
    pub kinds: Vec<&'static str>,
    /// Virtual addresses of the branch after each lock's `lock cmpxchg` (one hit per
    /// acquisition attempt); empty when no fast path was recognized.
    pub probes: Vec<u64>,
}

/// The kind of lock whose slow path `name` (a demangled symbol, no hash) is: `mutex`,
/// `rwlock_read`, `rwlock_write`; None for anything else. rustc's v0 demangling spells an
/// inherent impl `<std::sys::sync::mutex::futex::Mutex>::lock_contended` (nm -C on target-app).
pub fn slow_path_kind(name: &str) -> Option<&'static str> {
    static RE: std::sync::OnceLock<[(Regex, &'static str); 3]> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        let r = |p: &str| Regex::new(p).expect("static regex");
        [
            (r(r"^(<?std::sys::sync::mutex::[a-z_]+::Mutex>?::lock_contended|<?parking_lot::raw_mutex::RawMutex>?::lock_slow)$"), "mutex"),
            (r(r"^(<?std::sys::sync::rwlock::[a-z_]+::RwLock>?::read_contended|<?parking_lot::raw_rwlock::RawRwLock>?::lock_shared_slow)$"), "rwlock_read"),
            (r(r"^(<?std::sys::sync::rwlock::[a-z_]+::RwLock>?::write_contended|<?parking_lot::raw_rwlock::RawRwLock>?::lock_exclusive_slow)$"), "rwlock_write"),
        ]
    });
    re.iter().find(|(r, _)| r.is_match(name)).map(|(_, k)| *k)
}

/// Where a call goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Callee {
    /// `call rel32`: the target address.
    Direct(u64),
    /// `call [rip + disp]`: the address of the pointer the call loads (a GOT slot).
    Slot(u64),
}

/// The callee of a call instruction with a static target.
fn callee(ins: &iced_x86::Instruction) -> Option<Callee> {
    match ins.code() {
        Code::Call_rel32_64 => Some(Callee::Direct(ins.near_branch_target())),
        Code::Call_rm64 if ins.is_ip_rel_memory_operand() => Some(Callee::Slot(ins.ip_rel_memory_address())),
        _ => None,
    }
}

/// Instructions looked at from a branch's target or fall-through for the slow-path call.
const SLOW_PATH_REACH: usize = 4;

/// The lock sites of one function's code (at virtual address `start`), `slow_kind` resolving
/// a callee: the kind and address of each slow-path call, and the fast paths that lead to one
/// (the address of the branch after the locked `cmpxchg`, and the slow-path call it reaches).
fn lock_sites(start: u64, code: &[u8], slow_kind: &dyn Fn(Callee) -> Option<&'static str>) -> (Vec<(&'static str, u64)>, Vec<(u64, u64)>) {
    let mut decoder = Decoder::with_ip(64, code, start, DecoderOptions::NONE);
    let ins: Vec<iced_x86::Instruction> = decoder.iter().collect();
    let index: HashMap<u64, usize> = ins.iter().enumerate().map(|(i, x)| (x.ip(), i)).collect();
    let slow_call = |from: usize| -> Option<u64> {
        ins.iter().skip(from).take(SLOW_PATH_REACH).find(|x| callee(x).and_then(slow_kind).is_some()).map(|x| x.ip())
    };
    let calls: Vec<(&'static str, u64)> = ins.iter().filter_map(|x| callee(x).and_then(slow_kind).map(|k| (k, x.ip()))).collect();
    let mut probes = Vec::new();
    for (i, x) in ins.iter().enumerate() {
        if !(x.has_lock_prefix() && x.mnemonic() == iced_x86::Mnemonic::Cmpxchg) {
            continue;
        }
        let Some(branch) = ins.get(i + 1).filter(|b| b.is_jcc_short_or_near()) else { continue };
        let taken = index.get(&branch.near_branch_target()).and_then(|&t| slow_call(t));
        if let Some(call) = taken.or_else(|| slow_call(i + 2)) {
            probes.push((branch.ip(), call));
        }
    }
    (calls, probes)
}

/// Source files of the standard library (`/rustc/<commit>/library/...`) and of dependencies
/// (Cargo's registry and git checkouts): code that is not the app's own.
fn is_dependency_source(file: &str) -> bool {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| Regex::new(r"^/rustc/|/library/(std|core|alloc)/src/|/\.?cargo/(registry|git)/|/rustlib/src/").expect("static regex")).is_match(file)
}

/// True when the demangled `name` is a function of one of `crates` (its path, or the type of
/// its impl, starts with the crate).
fn in_crates(name: &str, crates: &[String]) -> bool {
    let name = name.trim_start_matches('<');
    crates.iter().any(|c| name.strip_prefix(c.as_str()).is_some_and(|rest| rest.starts_with("::")))
}

/// The functions of `crates` in `binary` whose code calls a lock's slow path.
///
/// # Errors
/// The binary cannot be read or parsed (one line).
pub fn lock_functions(binary: &Path, crates: &[String]) -> Result<Vec<LockFunction>, String> {
    let data = std::fs::read(binary).map_err(|e| format!("{}: {e}", binary.display()))?;
    let obj = object::File::parse(&*data).map_err(|e| format!("{}: {e}", binary.display()))?;
    if obj.architecture() != object::Architecture::X86_64 {
        return Err(format!("{}: not an x86-64 binary", binary.display()));
    }
    let symbols: Vec<(u64, u64, String, String)> = obj
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
        .filter_map(|s| {
            let mangled = s.name().ok()?.to_string();
            let name = format!("{:#}", rustc_demangle::demangle(&mangled));
            Some((s.address(), s.size(), name, mangled))
        })
        .collect();
    let slow: HashMap<u64, &'static str> = symbols.iter().filter_map(|(a, _, n, _)| slow_path_kind(n).map(|k| (*a, k))).collect();
    if slow.is_empty() {
        return Ok(Vec::new());
    }
    // GOT slot -> target, from the dynamic relocations.
    let dynsyms: HashMap<usize, u64> = obj.dynamic_symbols().map(|s| (s.index().0, s.address())).collect();
    let mut slots: HashMap<u64, u64> = HashMap::new();
    if let Some(relocs) = obj.dynamic_relocations() {
        for (slot, r) in relocs {
            let target = match r.target() {
                RelocationTarget::Absolute => u64::try_from(r.addend()).ok(),
                RelocationTarget::Symbol(i) => dynsyms.get(&i.0).copied().filter(|&a| a != 0).map(|a| a.wrapping_add_signed(r.addend())),
                _ => None,
            };
            if let Some(t) = target {
                slots.insert(slot, t);
            }
        }
    }
    let text: Vec<(u64, &[u8])> = obj.sections().filter(|s| s.kind() == object::SectionKind::Text).filter_map(|s| Some((s.address(), s.data().ok()?))).collect();
    let code_of = |addr: u64, size: u64| -> Option<&[u8]> {
        let (base, bytes) = text.iter().find(|(b, d)| addr >= *b && addr < b + d.len() as u64)?;
        let from = usize::try_from(addr - base).ok()?;
        let to = from.saturating_add(usize::try_from(size.min(MAX_FUNCTION_BYTES)).ok()?).min(bytes.len());
        Some(&bytes[from..to])
    };
    let slow_kind = |c: Callee| match c {
        Callee::Direct(t) => slow.get(&t).copied(),
        Callee::Slot(s) => slots.get(&s).and_then(|t| slow.get(t)).copied(),
    };
    let mut seen: HashSet<u64> = HashSet::new();
    let mut candidates: Vec<(&str, &str, Vec<(&'static str, u64)>, Vec<(u64, u64)>)> = Vec::new();
    for (addr, size, name, mangled) in &symbols {
        if *size == 0 || !in_crates(name, crates) || !seen.insert(*addr) {
            continue;
        }
        let Some(code) = code_of(*addr, *size) else { continue };
        let (calls, probes) = lock_sites(*addr, code, &slow_kind);
        if !calls.is_empty() {
            candidates.push((name, mangled, calls, probes));
        }
    }
    // Who takes each lock: the innermost frame of the DWARF inline chain at the slow-path call
    // that is not standard-library code. A lock a dependency takes in code inlined into the
    // app's function (e.g. tokio's broadcast sender locking its tail) is the dependency's.
    let sites: Vec<u64> = candidates.iter().flat_map(|(_, _, calls, _)| calls.iter().map(|&(_, a)| a)).collect();
    let own = own_sites(binary, &sites);
    let mut out = Vec::new();
    for (name, mangled, calls, probes) in candidates {
        let mut kinds: Vec<&'static str> = calls.iter().filter(|(_, a)| own.contains(a)).map(|(k, _)| *k).collect();
        kinds.sort_unstable();
        kinds.dedup();
        let probes: Vec<u64> = probes.into_iter().filter(|(_, call)| own.contains(call)).map(|(p, _)| p).collect();
        if !kinds.is_empty() {
            out.push(LockFunction { name: name.to_string(), mangled: mangled.to_string(), kinds, probes });
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The call sites (virtual addresses) among `sites` where the lock is taken by the app's own
/// code: the innermost frame at the site, past the standard library's frames, has a source
/// file that is not a dependency's ([`is_dependency_source`]). Without line information (a
/// stripped binary) every site counts as the app's.
fn own_sites(binary: &Path, sites: &[u64]) -> HashSet<u64> {
    use blazesym::symbolize::source::{Elf, Source};
    use blazesym::symbolize::{Input, Symbolizer};
    let symbolizer = Symbolizer::builder().enable_inlined_fns(true).enable_code_info(true).build();
    let mut elf = Elf::new(binary);
    elf.debug_syms = true;
    let Ok(syms) = symbolizer.symbolize(&Source::Elf(elf), Input::VirtOffset(sites)) else {
        return sites.iter().copied().collect();
    };
    let std_file = |f: &str| f.starts_with("/rustc/") || f.contains("/library/std/src/") || f.contains("/library/core/src/") || f.contains("/library/alloc/src/");
    sites
        .iter()
        .zip(syms.iter())
        .filter(|(_, s)| {
            let Some(sym) = s.as_sym() else { return true };
            let mut files: Vec<String> = sym.code_info.as_deref().map(|c| c.to_path().to_string_lossy().into_owned()).into_iter().collect();
            files.extend(sym.inlined.iter().filter_map(|f| f.code_info.as_ref().map(|c| c.to_path().to_string_lossy().into_owned())));
            match files.iter().rev().find(|f| !std_file(f)) {
                Some(f) => !is_dependency_source(f),
                None => true,
            }
        })
        .map(|(&a, _)| a)
        .collect()
}

/// The app's crates for a binary: Cargo names a binary crate like its executable, `-` as `_`.
pub fn crate_of_executable(exe: &Path) -> Option<String> {
    let name = exe.file_name()?.to_str()?.replace(['-', '.'], "_");
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_paths_by_name() {
        assert_eq!(slow_path_kind("std::sys::sync::mutex::futex::Mutex::lock_contended"), Some("mutex"));
        assert_eq!(slow_path_kind("<std::sys::sync::mutex::futex::Mutex>::lock_contended"), Some("mutex"));
        assert_eq!(slow_path_kind("<std::sys::sync::rwlock::futex::RwLock>::read_contended"), Some("rwlock_read"));
        assert_eq!(slow_path_kind("<std::sys::sync::rwlock::futex::RwLock>::write_contended"), Some("rwlock_write"));
        assert_eq!(slow_path_kind("parking_lot::raw_mutex::RawMutex::lock_slow"), Some("mutex"));
        assert_eq!(slow_path_kind("parking_lot::raw_mutex::RawMutex::unlock_slow"), None);
        assert_eq!(slow_path_kind("std::sys::sync::once::futex::Once::call"), None);
    }

    #[test]
    fn fast_path_branch_is_the_probe() {
        // The shape of target-app's lock_maintenance_mutex (objdump -d): at 0x1000
        // `lock cmpxchg [rdi],ecx` (f0 0f b1 0f); `jne +0x5` (75 05) to 0x100b; `xor eax,eax`
        // (31 c0); `ret` (c3); `nop; nop` (90 90); 0x100b: `mov rbx,rdi` (48 89 fb);
        // 0x100e: `call [rip+0x10]` (ff 15 10 00 00 00), the slot at 0x1014 + 0x10 = 0x1024.
        let code = [0xf0, 0x0f, 0xb1, 0x0f, 0x75, 0x05, 0x31, 0xc0, 0xc3, 0x90, 0x90, 0x48, 0x89, 0xfb, 0xff, 0x15, 0x10, 0x00, 0x00, 0x00];
        let slow = |c: Callee| (c == Callee::Slot(0x1024)).then_some("mutex");
        assert_eq!(lock_sites(0x1000, &code, &slow), (vec![("mutex", 0x100e)], vec![(0x1004, 0x100e)]));
        // Another slot: a call, but not a lock's slow path.
        let other = |c: Callee| (c == Callee::Slot(0x2000)).then_some("mutex");
        assert_eq!(lock_sites(0x1000, &code, &other), (vec![], vec![]));
    }

    #[test]
    fn dependency_sources() {
        assert!(is_dependency_source("/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/tokio-1.54.1/src/loom/std/parking_lot.rs"));
        assert!(is_dependency_source("/rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/std/src/sync/poison/mutex.rs"));
        assert!(!is_dependency_source("/work/main/target-app/src/layers/maintenance.rs"));
    }

    #[test]
    fn app_crates_by_path_or_impl() {
        let c = vec!["target_app".to_string()];
        assert!(in_crates("target_app::layers::rate_limit::lock_rate_table", &c));
        assert!(in_crates("<target_app::layers::maintenance::MaintenanceService<S> as tower_service::Service<R>>::call", &c));
        assert!(!in_crates("tokio::runtime::task::harness::poll", &c));
        assert!(!in_crates("target_application::x", &c));
        assert_eq!(crate_of_executable(Path::new("/usr/local/bin/target-app")).as_deref(), Some("target_app"));
    }
}
