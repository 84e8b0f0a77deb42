//! Helpers shared by the tests that attach for real (`attach_*`, `unwind_*`, `wire_peek`,
//! `wire_ports`, `symbolize_live`, and bench's `unwind_nofp`, which includes this file):
//! locating the example binaries, spawning them (and binaries the test just copied,
//! [`spawn_copied`]), mapping function symbols of an ELF file to the address ranges they occupy in a running process (ELF symbol table via
//! `object`, load address from `/proc/PID/maps`) so that raw sampled addresses can be
//! checked without the symbolizer under test, frame-pointer prologues by objdump, a keep-alive
//! HTTP client, and the lock of tests that must run alone ([`exclusive`]).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use object::{Object, ObjectSegment, ObjectSymbol};

/// Holds the test binary's one lock for tests that must not share the process or the machine
/// with another test of the same binary (cargo runs a binary's tests on parallel threads, and
/// one binary at a time): a process-wide CPU figure, a timed load on pinned CPUs. A test that
/// panicked while holding it does not poison it for the others.
pub fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Path of a known-answer example built by `cargo build --release --all-targets`
/// (`target/release/examples/NAME`, next to this test's `deps/` directory). Panics with a
/// clear message when it is missing: the test must not silently skip.
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>");
    let path = profile_dir.join("examples").join(name);
    assert!(path.is_file(), "{} is missing: build it with `cargo build --release -p agent --examples`", path.display());
    path
}

/// `command.spawn()`, retried while it fails with ETXTBSY ("Text file busy"): a binary just
/// copied by this test can still be open for writing in a child that another test thread
/// forked during the copy, until that child execs (the descriptor is close-on-exec).
pub fn spawn_copied(command: &mut Command) -> Child {
    for _ in 0..100 {
        match command.spawn() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => std::thread::sleep(std::time::Duration::from_millis(10)),
            other => return other.unwrap_or_else(|e| panic!("spawning {command:?}: {e}")),
        }
    }
    panic!("spawning {command:?}: still ETXTBSY after 1 s");
}

/// A spawned example with line-based stdin/stdout; killed on drop.
pub struct Spawned {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    pub stdout: BufReader<ChildStdout>,
}

impl Spawned {
    pub fn new(path: &Path, args: &[&str]) -> Self {
        let mut child = Command::new(path)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", path.display()));
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Spawned { child, stdin, stdout }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Reads one line from the child's stdout (panics at EOF).
    pub fn read_line(&mut self) -> String {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).expect("reading child stdout");
        assert!(n > 0, "child closed stdout");
        line.trim_end().to_owned()
    }

    /// Writes one line to the child's stdin.
    pub fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{line}").expect("writing child stdin");
        stdin.flush().expect("flush");
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runtime address ranges of the named function symbols of `elf` in process `pid`.
/// `map_path_suffix` picks the mapping (`/proc/PID/maps` shows the path as the process
/// sees it, e.g. inside a container).
pub fn function_ranges(elf: &Path, pid: u32, map_path_suffix: &str, symbols: &[&str]) -> Vec<Range<u64>> {
    let data = std::fs::read(elf).unwrap_or_else(|e| panic!("reading {}: {e}", elf.display()));
    let file = object::File::parse(&*data).expect("parsing ELF");
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("reading /proc/PID/maps");
    // (start, end, file offset) of the file's mappings.
    let mappings: Vec<(u64, u64, u64)> = maps
        .lines()
        .filter(|l| l.ends_with(map_path_suffix))
        .map(|l| {
            let mut f = l.split_whitespace();
            let (range, _perms, offset) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap());
            let (s, e) = range.split_once('-').unwrap();
            (
                u64::from_str_radix(s, 16).unwrap(),
                u64::from_str_radix(e, 16).unwrap(),
                u64::from_str_radix(offset, 16).unwrap(),
            )
        })
        .collect();
    assert!(!mappings.is_empty(), "no mapping of {map_path_suffix} in /proc/{pid}/maps");
    symbols
        .iter()
        .map(|name| {
            let sym = file
                .symbols()
                .find(|s| s.name() == Ok(*name))
                .unwrap_or_else(|| panic!("symbol {name} not in {}", elf.display()));
            assert!(sym.size() > 0, "symbol {name} has no size");
            let vaddr = sym.address();
            let segment = file
                .segments()
                .find(|seg| seg.address() <= vaddr && vaddr < seg.address() + seg.size())
                .expect("segment of the symbol");
            let file_offset = vaddr - segment.address() + segment.file_range().0;
            let &(start, _, map_offset) = mappings
                .iter()
                .find(|(s, e, off)| *off <= file_offset && file_offset < off + (e - s))
                .expect("mapping holding the symbol");
            let runtime = start + (file_offset - map_offset);
            runtime..runtime + sym.size()
        })
        .collect()
}

/// Index of the first range holding a frame of `user` (leaf first). The leaf is an
/// instruction pointer; the other frames are return addresses, so 1 is subtracted to land
/// inside the calling instruction.
pub fn first_frame_in(user: &[u64], ranges: &[Range<u64>]) -> Option<usize> {
    user.iter().enumerate().find_map(|(i, &addr)| {
        let pc = if i == 0 { addr } else { addr - 1 };
        ranges.iter().position(|r| r.contains(&pc))
    })
}

/// A keep-alive HTTP client for the wire-capture tests: connects to `127.0.0.1:port` and sends
/// `request` `n` times on one connection, each after the previous response, reading every
/// response up to its body `ok` (the tests' servers answer `ok`). Panics on a closed
/// connection or after 5 s without a response.
pub fn keep_alive_requests(port: u16, request: &[u8], n: u64) {
    use std::io::Read;
    let mut client = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    client.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 256];
    for _ in 0..n {
        client.write_all(request).expect("send");
        let mut got = Vec::new();
        while !got.ends_with(b"ok") {
            let n = client.read(&mut buf).expect("response");
            assert!(n > 0, "server closed");
            got.extend_from_slice(&buf[..n]);
        }
    }
}

/// Function symbols of an ELF file: (address range, name), sorted by address.
pub fn functions(data: &[u8]) -> Vec<(Range<u64>, String)> {
    let file = object::File::parse(data).expect("parsing ELF");
    let mut v: Vec<_> = file
        .symbols()
        .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 0)
        .filter_map(|s| Some((s.address()..s.address() + s.size(), s.name().ok()?.to_owned())))
        .collect();
    v.sort_by_key(|(r, _)| r.start);
    v
}

/// True when objdump shows a frame-pointer prologue (`push %rbp` then `mov %rsp,%rbp`) in
/// the first 8 instructions of the function at `range`.
pub fn has_fp_prologue(binary: &Path, range: &Range<u64>) -> bool {
    let out = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(format!("--start-address={:#x}", range.start))
        .arg(format!("--stop-address={:#x}", range.end.min(range.start + 64)))
        .arg(binary)
        .output()
        .expect("running objdump (binutils)");
    assert!(out.status.success(), "objdump: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let insns: Vec<String> = text
        .lines()
        .filter_map(|l| l.split_once(":\t").map(|(_, i)| i.split_whitespace().collect::<Vec<_>>().join(" ")))
        .take(8)
        .collect();
    assert!(!insns.is_empty(), "objdump showed no instruction at {range:x?} of {}", binary.display());
    insns.windows(2).any(|w| w[0] == "push %rbp" && w[1] == "mov %rsp,%rbp")
}
