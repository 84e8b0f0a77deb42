//! Known answer (c): the DWARF unwinder on a stack captured from this very process.
//!
//! `profiler_uw_capture` reads its own rip/rsp/rbp with inline assembly and copies the
//! stack above rsp, three known functions deep (`profiler_uw_level1` -> `profiler_uw_level2`
//! -> `profiler_uw_capture`). The unwound return addresses are checked against the ELF symbol
//! table of this test binary (not the symbolizer), then the same stack is cut short, filled
//! with garbage and "executed" from anonymous memory: partial stacks, marked, no wrong frame.

use test_support::{skip_unless, Need};

mod attach_support;

use std::arch::asm;
use std::ops::Range;

use attach_support::function_ranges;
use profiler::unwind::{Mode, Sample, StackEnd, Unwinder};

/// Registers and stack copy at the capture point.
pub struct Captured {
    /// rip at the capture point.
    ip: u64,
    /// rsp at the capture point.
    sp: u64,
    /// rbp at the capture point.
    bp: u64,
    /// Memory `[sp, sp + stack.len())`.
    stack: Vec<u8>,
    /// The copy ends at the top of the stack mapping.
    top: bool,
}

/// Bytes from `sp` to the end of the mapping holding it, at most `max`.
fn readable_above(sp: u64, max: u64) -> u64 {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    for line in maps.lines() {
        let (s, e) = line.split_whitespace().next().unwrap().split_once('-').unwrap();
        let (s, e) = (u64::from_str_radix(s, 16).unwrap(), u64::from_str_radix(e, 16).unwrap());
        if s <= sp && sp < e {
            return (e - sp).min(max);
        }
    }
    panic!("sp {sp:#x} not mapped");
}

/// Captures rip/rsp/rbp and the stack above rsp into `out`.
#[no_mangle]
#[inline(never)]
pub extern "C" fn profiler_uw_capture(out: &mut Option<Captured>) {
    let (ip, sp, bp): (u64, u64, u64);
    // SAFETY: reads three registers, touches no memory.
    unsafe {
        asm!("lea {ip}, [rip]", "mov {sp}, rsp", "mov {bp}, rbp", ip = out(reg) ip, sp = out(reg) sp, bp = out(reg) bp, options(nomem, nostack));
    }
    let max = 64 * 1024;
    let len = readable_above(sp, max);
    // SAFETY: [sp, sp + len) is this thread's mapped stack (checked in /proc/self/maps).
    let stack = unsafe { std::slice::from_raw_parts(sp as *const u8, len as usize) }.to_vec();
    *out = Some(Captured { ip, sp, bp, stack, top: len < max });
}

/// Calls [`profiler_uw_capture`].
#[no_mangle]
#[inline(never)]
pub extern "C" fn profiler_uw_level2(out: &mut Option<Captured>) {
    profiler_uw_capture(out);
    std::hint::black_box(out);
}

/// Calls [`profiler_uw_level2`].
#[no_mangle]
#[inline(never)]
pub extern "C" fn profiler_uw_level1(out: &mut Option<Captured>) {
    profiler_uw_level2(out);
    std::hint::black_box(out);
}

fn capture() -> Captured {
    let mut out = None;
    profiler_uw_level1(&mut out);
    out.expect("captured")
}

fn ranges() -> Vec<Range<u64>> {
    let exe = std::env::current_exe().unwrap();
    let suffix = format!("/{}", exe.file_name().unwrap().to_string_lossy());
    function_ranges(&exe, std::process::id(), &suffix, &["profiler_uw_capture", "profiler_uw_level2", "profiler_uw_level1"])
}

fn in_range(addr: u64, r: &Range<u64>) -> bool {
    r.contains(&addr)
}

#[test]
fn captured_stack_unwinds_through_known_callers_to_the_thread_start() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let c = capture();
    let r = ranges();
    for mode in [Mode::Dwarf, Mode::Auto] {
        let mut unwinder = Unwinder::new(mode);
        let u = unwinder.unwind(&Sample { pid: std::process::id(), ip: c.ip, sp: c.sp, bp: c.bp, stack: &c.stack, stack_top_reached: c.top });
        eprintln!("{mode:?}: {} frames, end {:?}, {} stack bytes used: {:x?}", u.frames.len(), u.end, u.stack_bytes_used, u.frames);
        assert!(in_range(u.frames[0], &r[0]), "leaf {:#x} not in profiler_uw_capture {:x?}", u.frames[0], r[0]);
        // Return addresses: the call instruction is just before them.
        assert!(in_range(u.frames[1] - 1, &r[1]), "frame 1 {:#x} not in profiler_uw_level2 {:x?}", u.frames[1], r[1]);
        assert!(in_range(u.frames[2] - 1, &r[2]), "frame 2 {:#x} not in profiler_uw_level1 {:x?}", u.frames[2], r[2]);
        assert_eq!(u.end, StackEnd::Complete, "the walk should reach the thread start");
        assert!(u.frames.len() >= 6, "{:x?}", u.frames);
        assert_eq!(u.fp_fallback_frames, 0, "every frame of this binary and libc has CFI");
        assert!(u.stack_bytes_used > 0 && u.stack_bytes_used <= c.stack.len() as u64);

        // The same stack cut to the bytes the first three frames need: a prefix, marked.
        let cut = 48usize;
        let short = unwinder.unwind(&Sample { pid: std::process::id(), ip: c.ip, sp: c.sp, bp: c.bp, stack: &c.stack[..cut], stack_top_reached: false });
        assert_eq!(short.end, StackEnd::CopyEnd, "{short:?}");
        assert!(!short.frames.is_empty() && short.frames.len() < u.frames.len());
        assert_eq!(short.frames[..], u.frames[..short.frames.len()], "a cut stack must be a prefix of the full one");

        // Cut just below what the full walk needed: still a strict prefix.
        let needed = u.stack_bytes_used as usize;
        let almost = unwinder.unwind(&Sample { pid: std::process::id(), ip: c.ip, sp: c.sp, bp: c.bp, stack: &c.stack[..needed - 8], stack_top_reached: false });
        assert_eq!(almost.end, StackEnd::CopyEnd);
        assert_eq!(almost.frames[..], u.frames[..almost.frames.len()]);

        // No stack at all: the leaf only.
        let none = unwinder.unwind(&Sample { pid: std::process::id(), ip: c.ip, sp: c.sp, bp: c.bp, stack: &[], stack_top_reached: false });
        assert_eq!(none.frames, vec![c.ip]);
        assert_eq!(none.end, StackEnd::CopyEnd);
    }
}

#[test]
fn garbage_stack_gives_the_leaf_and_no_invented_frame() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let c = capture();
    let garbage = vec![0x41u8; 4096];
    let mut unwinder = Unwinder::new(Mode::Dwarf);
    let u = unwinder.unwind(&Sample { pid: std::process::id(), ip: c.ip, sp: c.sp, bp: 0x4141_4141_4141_4141, stack: &garbage, stack_top_reached: false });
    assert_eq!(u.frames, vec![c.ip], "{u:?}");
    // profiler_uw_capture's CFA is rbp + 16: a read far outside any stack, not a deep stack.
    assert_eq!(u.end, StackEnd::Error, "{u:?}");
    // A sample of a process that does not exist: the ip, marked.
    let u = unwinder.unwind(&Sample { pid: u32::MAX - 1, ip: c.ip, sp: c.sp, bp: c.bp, stack: &c.stack, stack_top_reached: c.top });
    assert_eq!(u.frames, vec![c.ip]);
    assert_eq!(u.end, StackEnd::ProcessGone);
}

#[test]
fn anonymous_executable_memory_stops_dwarf_and_falls_back_to_frame_pointers_in_auto() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let c = capture();
    // SAFETY: a fresh private anonymous mapping, never executed.
    let page = unsafe {
        libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ | libc::PROT_EXEC, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    };
    assert_ne!(page, libc::MAP_FAILED);
    let jit_ip = page as u64 + 16;
    // Pretend the code at jit_ip was called by profiler_uw_capture's frame and keeps frame
    // pointers: rbp is the capture frame's rbp.
    let mut dwarf = Unwinder::new(Mode::Dwarf);
    let u = dwarf.unwind(&Sample { pid: std::process::id(), ip: jit_ip, sp: c.sp, bp: c.bp, stack: &c.stack, stack_top_reached: c.top });
    assert_eq!(u.frames, vec![jit_ip], "{u:?}");
    assert_eq!(u.end, StackEnd::NoUnwindInfo);
    let mut auto = Unwinder::new(Mode::Auto);
    let u = auto.unwind(&Sample { pid: std::process::id(), ip: jit_ip, sp: c.sp, bp: c.bp, stack: &c.stack, stack_top_reached: c.top });
    eprintln!("auto from anonymous code: {u:x?}");
    assert_eq!(u.frames[0], jit_ip);
    assert!(u.fp_fallback_frames >= 1);
    // The frame-pointer step from the capture frame's rbp lands in its caller, level2.
    assert!(in_range(u.frames[1] - 1, &ranges()[1]), "{:x?}", u.frames);
    assert_eq!(u.end, StackEnd::Complete, "CFI takes over after the fallback frame");
    // SAFETY: unmapping what was mapped above.
    unsafe { libc::munmap(page, 4096) };
}
