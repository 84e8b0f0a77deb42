//! The Rust side of the ABI (`src/abi.rs`) against the compiled objects, not against its own
//! copy of `profiler.h`'s constants: for each embedded `.o`,
//! - every struct the Rust side mirrors has, in the object's BTF as `bpftool btf dump -j`
//!   prints it (an instrument outside this crate), the same size and the same members, by
//!   name, in order, at the same byte offsets;
//! - its maps (as aya-obj reads the object, the parser aya loads it with) are exactly the
//!   ones the Rust side names, each with the key size, value size and entry count it assumes;
//! - its programs and its globals (the ELF symbol table) are exactly the ones the Rust side
//!   names.
//!
//! A field added, moved or renamed on one side, a map resized, a program renamed: each fails
//! here, where each side's own `_Static_assert`/`const assert!` cannot see the other.

use std::collections::{BTreeMap, BTreeSet};
use std::mem::{offset_of, size_of};

use agent_ebpf::abi::{self, names, wire};
use object::{Object, ObjectSection, ObjectSymbol};

/// A struct of the Rust side: its C name, size and members (name, byte offset) in order.
struct Mirror {
    c_name: &'static str,
    size: usize,
    members: Vec<(&'static str, usize)>,
}

macro_rules! mirror {
    ($c:literal, $t:ty { $($f:ident),* $(,)? }) => {
        Mirror { c_name: $c, size: size_of::<$t>(), members: vec![$((stringify!($f), offset_of!($t, $f))),*] }
    };
}

/// A map of an object: (name, key size, value size, max entries), sizes in bytes; `None`
/// where the Rust side sets it at load time or does not assume one.
type MapSpec = (&'static str, Option<u32>, Option<u32>, Option<u32>);

struct ObjectSpec {
    file: &'static str,
    bytes: &'static [u8],
    structs: Vec<Mirror>,
    /// The maps the Rust side names (it reads, writes or sizes them).
    maps: Vec<MapSpec>,
    /// Maps only the BPF programs use (state between two calls, scratch space): named here so
    /// that a map nobody accounts for still fails.
    internal_maps: Vec<&'static str>,
    programs: Vec<&'static str>,
    globals: Vec<&'static str>,
}

const FILTER_GLOBALS: [&str; 3] = [names::GLOBAL_FILTER_MODE, names::GLOBAL_TARGET_CGROUP_ID, names::GLOBAL_TARGET_CGROUP_LEVEL];

fn common_maps() -> Vec<MapSpec> {
    vec![
        (names::MAP_TARGET_PIDS, Some(4), Some(1), Some(abi::MAX_TARGET_PIDS)),
        (names::MAP_LOST, Some(4), Some(8), Some(abi::lost_index::COUNT)),
    ]
}

fn specs() -> Vec<ObjectSpec> {
    let u32_size = Some(4);
    let stack_bytes = Some(8 * abi::MAX_STACK_DEPTH);
    let chunk = |name: &'static str, offset: usize| (name, offset);
    let h = |f: usize| f; // offsets of WireChunkHeader fields are offsets of struct wire_chunk
    vec![
        ObjectSpec {
            file: "sample.bpf.o",
            bytes: agent_ebpf::SAMPLE_OBJECT,
            structs: vec![mirror!("fp_sample", abi::FpSample { tgid, pid, user_stack_bytes, kernel_stack_bytes, ts_ns, comm, user_stack, kernel_stack })],
            maps: [vec![(names::MAP_FP_SAMPLES, Some(0), Some(0), None)], common_maps()].concat(),
            internal_maps: vec![],
            programs: vec![names::PROG_ON_CPU_SAMPLE],
            globals: FILTER_GLOBALS.to_vec(),
        },
        ObjectSpec {
            file: "offcpu.bpf.o",
            bytes: agent_ebpf::OFFCPU_OBJECT,
            structs: vec![
                mirror!("stack_key", abi::StackKey { tgid, pid, user_stack_id, kernel_stack_id, comm }),
                mirror!("offcpu_key", abi::OffcpuKey { stack, wait, _pad }),
                mirror!("offcpu_value", abi::OffcpuValue { count, total_ns }),
                mirror!("offcpu_start", abi::OffcpuStart { start_ns, ran_ns, key }),
                mirror!("offcpu_loop_stack", abi::OffcpuLoopStack { ip, sp, bp, frame, user_stack_id, kernel_stack_id, uses, _pad }),
            ],
            maps: [
                vec![
                    (names::MAP_STACK_TRACES, u32_size, stack_bytes, Some(abi::MAX_STACK_TRACES)),
                    (names::MAP_OFFCPU_STATS, Some(size_of::<abi::OffcpuKey>() as u32), Some(size_of::<abi::OffcpuValue>() as u32), Some(abi::MAX_STACK_COUNTS)),
                    (names::MAP_OFFCPU_STARTS, u32_size, Some(size_of::<abi::OffcpuStart>() as u32), Some(abi::MAX_OFFCPU_THREADS)),
                    (names::MAP_OFFCPU_LOOP_STACKS, u32_size, Some(size_of::<abi::OffcpuLoopStack>() as u32), Some(abi::MAX_OFFCPU_THREADS)),
                ],
                common_maps(),
            ]
            .concat(),
            internal_maps: vec![],
            programs: vec![names::PROG_ON_SCHED_SWITCH],
            globals: [&FILTER_GLOBALS[..], &[names::GLOBAL_MIN_BLOCK_NS, names::GLOBAL_LOOP_REWALK_EVERY]].concat(),
        },
        ObjectSpec {
            file: "syscalls.bpf.o",
            bytes: agent_ebpf::SYSCALLS_OBJECT,
            structs: vec![
                mirror!("syscall_stat", abi::SyscallStat { count, errors, eagain, total_ns, latency_log2_ns, bytes }),
                mirror!("syscall_entry", abi::SyscallEntry { start_ns, nr, window }),
            ],
            maps: [
                vec![
                    (names::MAP_SYSCALL_STATS, u32_size, Some(size_of::<abi::SyscallStat>() as u32), Some(abi::MAX_SYSCALLS)),
                    (names::MAP_SYSCALL_ENTRIES, u32_size, Some(size_of::<abi::SyscallEntry>() as u32), None),
                    (names::MAP_SYSCALL_WINDOW, u32_size, u32_size, Some(1)),
                ],
                common_maps(),
            ]
            .concat(),
            internal_maps: vec![],
            programs: vec![names::PROG_ON_SYS_ENTER, names::PROG_ON_SYS_EXIT],
            globals: FILTER_GLOBALS.to_vec(),
        },
        ObjectSpec {
            file: "stackcopy.bpf.o",
            bytes: agent_ebpf::STACKCOPY_OBJECT,
            structs: vec![{
                let mut m = mirror!("stack_sample", abi::StackSampleHeader { tgid, pid, ip, sp, bp, ts_ns, kernel_stack_bytes, stack_len, flags, _pad, comm, kernel_stack });
                m.members.push(("stack", abi::STACK_SAMPLE_HEADER_SIZE));
                m.size = abi::STACK_SAMPLE_SIZE;
                m
            }],
            maps: [
                vec![
                    (names::MAP_STACK_SAMPLES, Some(0), Some(0), None),
                    // One entry per possible CPU, set by the agent at load time.
                    (names::MAP_STACK_SCRATCH, u32_size, Some(abi::STACK_SAMPLE_SIZE as u32), None),
                ],
                common_maps(),
            ]
            .concat(),
            internal_maps: vec![],
            programs: vec![names::PROG_ON_CPU_SAMPLE_STACK_COPY],
            globals: [&FILTER_GLOBALS[..], &[names::GLOBAL_STACK_COPY_BYTES]].concat(),
        },
        ObjectSpec {
            file: "wire.bpf.o",
            bytes: agent_ebpf::WIRE_OBJECT,
            structs: vec![{
                use wire::WireChunkHeader as H;
                let header = [
                    chunk("ts_ns", h(offset_of!(H, ts_ns))),
                    chunk("pid", offset_of!(H, pid)),
                    chunk("tid", offset_of!(H, tid)),
                    chunk("socket", offset_of!(H, socket)),
                    chunk("total_len", offset_of!(H, total_len)),
                    chunk("local_port", offset_of!(H, local_port)),
                    chunk("peer_port", offset_of!(H, peer_port)),
                    chunk("head_len", offset_of!(H, head_len)),
                    chunk("tail_len", offset_of!(H, tail_len)),
                    chunk("direction", offset_of!(H, direction)),
                    chunk("class", offset_of!(H, class)),
                    chunk("syscall", offset_of!(H, syscall)),
                    chunk("_pad", offset_of!(H, _pad)),
                ];
                assert_eq!(offset_of!(wire::WireChunk, header), 0);
                let mut members = header.to_vec();
                members.push(("head", offset_of!(wire::WireChunk, head)));
                members.push(("tail", offset_of!(wire::WireChunk, tail)));
                Mirror { c_name: "wire_chunk", size: size_of::<wire::WireChunk>(), members }
            }],
            maps: [
                vec![
                    (wire::MAP_WIRE_CHUNKS, Some(0), Some(0), None),
                    (wire::MAP_WIRE_STATS, u32_size, Some(8), Some(wire::stat_index::COUNT)),
                    (wire::MAP_HTTP_PORTS, Some(2), Some(1), Some(wire::MAX_HTTP_PORTS)),
                ],
                common_maps(),
            ]
            .concat(),
            // Sockets recognised as PostgreSQL by their first bytes; where a record is built.
            internal_maps: vec!["pg_sockets", "wire_scratch"],
            programs: wire::PROGRAMS.iter().map(|(p, _)| *p).collect(),
            globals: [&FILTER_GLOBALS[..], &[wire::GLOBAL_DB_PORT, wire::GLOBAL_HEAD_BYTES, wire::GLOBAL_TAIL_BYTES, wire::GLOBAL_HTTP_HEAD_BYTES]].concat(),
        },
    ]
}

/// The named structs of an object's BTF, by `bpftool -j btf dump file`: name -> (size,
/// members as (name, offset in bits)).
fn btf_structs(file: &str, bytes: &[u8]) -> BTreeMap<String, (usize, Vec<(String, usize)>)> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(file);
    std::fs::write(&path, bytes).unwrap();
    let out = std::process::Command::new("bpftool")
        .args(["-j", "btf", "dump", "file"])
        .arg(&path)
        .output()
        .expect("running bpftool (Debian package `bpftool`; scripts/setup installs it)");
    assert!(out.status.success(), "bpftool btf dump {file}: {}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bpftool's JSON");
    let mut structs = BTreeMap::new();
    for t in json["types"].as_array().expect("types") {
        if t["kind"] != "STRUCT" || t["name"] == "(anon)" {
            continue;
        }
        let members = t["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["name"].as_str().unwrap().to_string(), m["bits_offset"].as_u64().unwrap() as usize))
            .collect();
        structs.insert(t["name"].as_str().unwrap().to_string(), (t["size"].as_u64().unwrap() as usize, members));
    }
    structs
}

#[test]
fn every_mirrored_struct_has_the_objects_layout() {
    for spec in specs() {
        let btf = btf_structs(spec.file, spec.bytes);
        for m in &spec.structs {
            let (size, members) = btf.get(m.c_name).unwrap_or_else(|| panic!("{}: no struct {} in its BTF", spec.file, m.c_name));
            assert_eq!(*size, m.size, "{}: struct {} is {size} bytes, the Rust mirror {}", spec.file, m.c_name, m.size);
            let rust: Vec<(String, usize)> = m.members.iter().map(|(n, o)| (n.to_string(), 8 * o)).collect();
            assert_eq!(members, &rust, "{}: struct {} members and their offsets in bits (left: BTF, right: Rust)", spec.file, m.c_name);
        }
    }
}

#[test]
fn maps_programs_and_globals_are_the_ones_the_rust_side_names() {
    for spec in specs() {
        let obj = aya_obj::Object::parse(spec.bytes).unwrap_or_else(|e| panic!("{}: {e}", spec.file));
        // Sections of globals (`.rodata`, `.bss`, `.data`) are maps to aya too; they are
        // checked through the symbol table below.
        let maps: BTreeMap<&str, &aya_obj::Map> = obj.maps.iter().filter(|(n, _)| !n.starts_with('.')).map(|(n, m)| (n.as_str(), m)).collect();
        let expected: BTreeSet<&str> = spec.maps.iter().map(|m| m.0).chain(spec.internal_maps.iter().copied()).collect();
        assert_eq!(maps.keys().copied().collect::<BTreeSet<_>>(), expected, "{}: maps (left: object, right: Rust)", spec.file);
        for (name, key, value, entries) in &spec.maps {
            let m = maps[name];
            let got = (m.key_size(), m.value_size(), m.max_entries());
            let want = (key.unwrap_or(got.0), value.unwrap_or(got.1), entries.unwrap_or(got.2));
            assert_eq!(got, want, "{}: map {name} (key bytes, value bytes, max entries)", spec.file);
        }
        let programs: BTreeSet<&str> = obj.programs.keys().map(String::as_str).collect();
        assert_eq!(programs, spec.programs.iter().copied().collect(), "{}: programs (left: object, right: Rust)", spec.file);

        let elf = object::File::parse(spec.bytes).unwrap();
        let data_sections: BTreeSet<usize> =
            elf.sections().filter(|s| matches!(s.name(), Ok(".rodata" | ".bss" | ".data"))).map(|s| s.index().0).collect();
        let globals: BTreeSet<&str> = elf
            .symbols()
            .filter(|s| s.is_global() && s.section_index().is_some_and(|i| data_sections.contains(&i.0)))
            .filter_map(|s| s.name().ok())
            // Pointers that only put a record type into the BTF (`*_btf`, never read).
            .filter(|n| !n.ends_with("_btf"))
            .collect();
        assert_eq!(globals, spec.globals.iter().copied().collect(), "{}: globals (left: object, right: Rust)", spec.file);
    }
}
