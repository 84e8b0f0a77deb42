//! Every `#define` and enum constant of `include/profiler.h`, as libclang reads the header
//! (bindgen's parse callbacks: the values clang compiles the programs with), against the Rust
//! side's constant of the same meaning in `src/abi.rs`. The compiled objects' BTF holds struct
//! layouts (`tests/abi_btf.rs`) but neither macros nor enums that no type uses, so this is
//! where a limit or an index changed on one side fails. A constant added to the header without
//! a line here fails too.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use agent_ebpf::abi::{self, lost_index, offcpu_wait, stack_sample_flags, wire};

/// Collects `#define NAME <integer>` and every enum variant (by its C name) with its value.
#[derive(Debug, Default)]
struct Constants(Arc<Mutex<BTreeMap<String, i64>>>);

impl bindgen::callbacks::ParseCallbacks for Constants {
    fn int_macro(&self, name: &str, value: i64) -> Option<bindgen::callbacks::IntKind> {
        self.0.lock().unwrap().insert(name.to_string(), value);
        None
    }

    fn enum_variant_name(
        &self,
        _enum_name: Option<&str>,
        variant: &str,
        value: bindgen::callbacks::EnumVariantValue,
    ) -> Option<String> {
        let v = match value {
            bindgen::callbacks::EnumVariantValue::Boolean(b) => i64::from(b),
            bindgen::callbacks::EnumVariantValue::Signed(v) => v,
            bindgen::callbacks::EnumVariantValue::Unsigned(v) => i64::try_from(v).expect("enum value fits i64"),
        };
        self.0.lock().unwrap().insert(variant.to_string(), v);
        None
    }
}

/// The kernel's fixed-width types, as `vmlinux.h` gives them to the programs (and no macro
/// of its own, so that every macro the parse reports is one of the header's).
const PRELUDE: &str = "typedef unsigned char __u8; typedef unsigned short __u16; typedef unsigned int __u32;
typedef unsigned long long __u64; typedef signed char __s8; typedef short __s16; typedef int __s32;
typedef long long __s64;
#include \"profiler.h\"
";

/// The header's constants by C name.
fn header_constants() -> BTreeMap<String, i64> {
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let found = Arc::new(Mutex::new(BTreeMap::new()));
    bindgen::Builder::default()
        .header_contents("abi.h", PRELUDE)
        .clang_arg(format!("-I{}", include.display()))
        .allowlist_file(".*profiler\\.h")
        .parse_callbacks(Box::new(Constants(found.clone())))
        .generate()
        .unwrap_or_else(|e| panic!("libclang could not read profiler.h: {e} (Debian: clang-19 brings libclang1-19)"));
    let found = found.lock().unwrap().clone();
    found
}

/// (C name, the Rust side's value) for every constant of the header.
fn rust_side() -> Vec<(&'static str, i64)> {
    let n = |v: usize| v as i64;
    vec![
        ("COMM_LEN", n(abi::COMM_LEN)),
        ("MAX_STACK_DEPTH", abi::MAX_STACK_DEPTH.into()),
        ("MAX_STACK_TRACES", abi::MAX_STACK_TRACES.into()),
        ("MAX_STACK_COUNTS", abi::MAX_STACK_COUNTS.into()),
        ("MAX_TARGET_PIDS", abi::MAX_TARGET_PIDS.into()),
        ("MAX_OFFCPU_THREADS", abi::MAX_OFFCPU_THREADS.into()),
        ("MAX_SYSCALLS", abi::MAX_SYSCALLS.into()),
        ("LATENCY_BUCKETS", n(abi::LATENCY_BUCKETS)),
        ("FILTER_CGROUP", abi::FilterMode::Cgroup as i64),
        ("FILTER_PIDS", abi::FilterMode::Pids as i64),
        ("LOST_SAMPLES_DROPPED", lost_index::SAMPLES_DROPPED.into()),
        ("LOST_STACK_COLLISIONS", lost_index::STACK_COLLISIONS.into()),
        ("LOST_STACK_WALK_FAILURES", lost_index::STACK_WALK_FAILURES.into()),
        ("LOST_OFFCPU_DROPPED", lost_index::OFFCPU_DROPPED.into()),
        ("LOST_SYSCALL_NO_STORAGE", lost_index::SYSCALL_NO_STORAGE.into()),
        ("LOST_SYSCALL_NR_RANGE", lost_index::SYSCALL_NR_RANGE.into()),
        ("LOST_RINGBUF_FULL", lost_index::RINGBUF_FULL.into()),
        ("LOST_STACK_COPY_FAILURES", lost_index::STACK_COPY_FAILURES.into()),
        ("LOST_OFFCPU_SWITCH_IN_UNSEEN", lost_index::OFFCPU_SWITCH_IN_UNSEEN.into()),
        ("LOST_COUNTERS", lost_index::COUNT.into()),
        ("OFFCPU_WAIT_OTHER", offcpu_wait::OTHER.into()),
        ("OFFCPU_WAIT_CONTENDED_LOCK", offcpu_wait::CONTENDED_LOCK.into()),
        ("STACK_COPY_MAX_BYTES", n(abi::STACK_COPY_MAX_BYTES)),
        ("STACK_COPY_CHUNK", n(abi::STACK_COPY_CHUNK)),
        ("STACK_SAMPLE_KERNEL_MODE", stack_sample_flags::KERNEL_MODE.into()),
        ("STACK_SAMPLE_COPY_SHORT", stack_sample_flags::COPY_SHORT.into()),
        ("WIRE_HEAD_MAX", n(wire::HEAD_MAX)),
        ("WIRE_TAIL_MAX", n(wire::TAIL_MAX)),
        ("WIRE_HTTP_HEAD_MAX", n(wire::HTTP_HEAD_MAX)),
        ("WIRE_MAX_IOVECS", n(wire::MAX_IOVECS)),
        ("MAX_HTTP_PORTS", wire::MAX_HTTP_PORTS.into()),
        ("WIRE_CLASS_POSTGRES", wire::class::POSTGRES.into()),
        ("WIRE_CLASS_HTTP", wire::class::HTTP.into()),
        ("WIRE_TX", wire::direction::TX.into()),
        ("WIRE_RX", wire::direction::RX.into()),
        ("WIRE_SYS_SENDTO", wire::syscall::SENDTO.into()),
        ("WIRE_SYS_RECVFROM", wire::syscall::RECVFROM.into()),
        ("WIRE_SYS_WRITE", wire::syscall::WRITE.into()),
        ("WIRE_SYS_READ", wire::syscall::READ.into()),
        ("WIRE_SYS_WRITEV", wire::syscall::WRITEV.into()),
        ("WIRE_SYS_READV", wire::syscall::READV.into()),
        ("WIRE_SYS_SENDMSG", wire::syscall::SENDMSG.into()),
        ("WIRE_SYS_RECVMSG", wire::syscall::RECVMSG.into()),
        ("WIRE_STAT_CHUNKS", wire::stat_index::CHUNKS.into()),
        ("WIRE_STAT_RINGBUF_FULL", wire::stat_index::RINGBUF_FULL.into()),
        ("WIRE_STAT_OTHER_CALLS", wire::stat_index::OTHER_CALLS.into()),
        ("WIRE_STAT_EAGAIN", wire::stat_index::EAGAIN.into()),
        ("WIRE_STAT_ERRORS", wire::stat_index::ERRORS.into()),
        ("WIRE_STAT_READ_FAILURES", wire::stat_index::READ_FAILURES.into()),
        ("WIRE_STAT_HTTP_NO_START_LINE", wire::stat_index::HTTP_NO_START_LINE.into()),
        ("WIRE_STAT_PG_RECOGNISED", wire::stat_index::PG_RECOGNISED.into()),
        ("WIRE_STAT_COUNTERS", wire::stat_index::COUNT.into()),
        ("WIRE_CHUNK_HEADER_BYTES", n(wire::CHUNK_HEADER_SIZE)),
    ]
}

#[test]
fn every_constant_of_the_header_has_the_rust_sides_value() {
    let header = header_constants();
    let rust: BTreeMap<&str, i64> = rust_side().into_iter().collect();
    // The include guard is a macro without a value.
    let header: BTreeMap<&str, i64> = header.iter().map(|(k, v)| (k.as_str(), *v)).filter(|(k, _)| *k != "PROFILER_H").collect();
    let mut wrong = Vec::new();
    for (name, c) in &header {
        match rust.get(name) {
            Some(r) if r == c => {}
            Some(r) => wrong.push(format!("{name}: profiler.h {c}, src/abi.rs {r}")),
            None => wrong.push(format!("{name} = {c}: in profiler.h, not mirrored in src/abi.rs (or not listed in this test)")),
        }
    }
    for name in rust.keys().filter(|n| !header.contains_key(*n)) {
        wrong.push(format!("{name}: listed here, not in profiler.h"));
    }
    assert!(wrong.is_empty(), "the ABI's constants disagree:\n{}", wrong.join("\n"));
    // The parse saw the whole header (a guard for a callback that stops being called).
    assert_eq!(header.len(), rust.len());
    assert!(header.len() >= 50, "only {} constants read from profiler.h", header.len());
}
