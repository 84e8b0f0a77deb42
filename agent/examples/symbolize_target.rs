//! Test helper for `agent/tests/symbolize_live.rs` (owned by the symbolization tests, not a
//! known-answer workload): a process with a few functions at known places that waits on stdin.
//!
//! It prints one line per fact, `name 0xADDR`, then `ready`, and exits when stdin closes:
//! - `leaf`: the address of `symbolize_target::shapes::Circle::area_leaf` (non-inlined);
//! - `ret_in_inlined`: a return address inside `symbolize_target::shapes::outer_frame`, at the
//!   call of `area_leaf` made from `symbolize_target::shapes::inlined_middle`, which is
//!   `#[inline(always)]` and so has no frame of its own: read from `area_leaf`'s frame record
//!   (`[rbp + 8]`), which works because the workspace builds with frame pointers.
//!
//! The test finds the same functions from outside (ELF symbol table + `/proc/PID/maps`) and
//! checks the symbolizer's names against them.

use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};

static RETURN_ADDRESS: AtomicU64 = AtomicU64::new(0);

mod shapes {
    use super::*;

    pub struct Circle {
        pub r: f64,
    }

    impl Circle {
        /// Records its own return address, then does a little arithmetic.
        #[inline(never)]
        pub fn area_leaf(&self) -> f64 {
            #[cfg(target_arch = "x86_64")]
            {
                let fp: *const u64;
                // SAFETY: reads this function's frame pointer register; no memory access.
                unsafe { std::arch::asm!("mov {}, rbp", out(reg) fp, options(nomem, nostack)) };
                // SAFETY: with frame pointers, [rbp + 8] is this frame's return address.
                let ret = unsafe { fp.add(1).read_volatile() };
                RETURN_ADDRESS.store(ret, Ordering::SeqCst);
            }
            std::hint::black_box(self.r * self.r * std::f64::consts::PI)
        }
    }

    #[inline(always)]
    pub fn inlined_middle(c: &Circle) -> f64 {
        std::hint::black_box(c.area_leaf()) + 1.0
    }

    #[inline(never)]
    pub fn outer_frame(r: f64) -> f64 {
        let c = Circle { r: std::hint::black_box(r) };
        inlined_middle(&c) * 2.0
    }
}

fn main() {
    let area = shapes::outer_frame(2.0);
    let leaf = shapes::Circle::area_leaf as fn(&shapes::Circle) -> f64 as usize;
    println!("leaf {leaf:#x}");
    println!("ret_in_inlined {:#x}", RETURN_ADDRESS.load(Ordering::SeqCst));
    println!("area {area}");
    println!("ready");
    // Stay alive until the test closes our stdin.
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}
