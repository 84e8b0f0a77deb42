//! Uprobes on functions of a binary, counted by `perf stat` on a running process: an
//! instrument outside the app's code. Probes are created through tracefs
//! (`/sys/kernel/tracing/uprobe_events`, "p:GROUP/EVENT PATH:0xFILE_OFFSET", see the
//! kernel's Documentation/trace/uprobetracer.rst); the file offset is computed from the ELF
//! symbol address and the PT_LOAD segment that holds it. `perf stat -x,` counts hits per
//! event between `enable` and `disable` sent through its `--control` FIFO.
//!
//! Uprobe events are global to the kernel: every [`Uprobes`] gets a group of its own,
//! `PREFIX_PID_N` (the test process's id and a per-process counter), so tests running in
//! parallel, or in two test processes at once, never add or remove each other's events.
//! Groups left behind by a test process that died are removed by the next [`Uprobes::add`].

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

use object::{Object, ObjectSegment, ObjectSymbol};

const TRACEFS: &str = "/sys/kernel/tracing";

/// Serializes the mount check and the writes to `uprobe_events` of this process's tests.
static TRACEFS_LOCK: Mutex<()> = Mutex::new(());

/// Per-process counter of uprobe groups.
static GROUP_SEQ: AtomicU32 = AtomicU32::new(0);

fn tracefs() -> PathBuf {
    let p = Path::new(TRACEFS);
    if !p.join("uprobe_events").exists() {
        // Debian does not mount tracefs by default; perf needs it for uprobes.
        let st = Command::new("mount").args(["-t", "tracefs", "nodev", TRACEFS]).status();
        assert!(
            p.join("uprobe_events").exists(),
            "tracefs is not mounted at {TRACEFS} and `mount -t tracefs` failed ({st:?}): uprobes need it (run as root)"
        );
    }
    p.to_path_buf()
}

/// A set of uprobes of one group on one binary; removed on drop.
pub struct Uprobes {
    /// `PREFIX_PID_N`: unique among the processes running now.
    group: String,
    /// Event name -> demangled symbol it sits on.
    pub events: BTreeMap<String, String>,
}

/// Demangled names (without the hash) -> file offsets, for every function symbol whose name
/// `wanted` accepts.
pub fn find_functions(binary: &Path, wanted: impl Fn(&str) -> bool) -> Vec<(String, u64)> {
    let data = std::fs::read(binary).unwrap_or_else(|e| panic!("read {}: {e}", binary.display()));
    let file = object::File::parse(&*data).expect("parse ELF");
    let segments: Vec<(u64, u64, u64)> = file
        .segments()
        .map(|s| (s.address(), s.size(), s.file_range().0))
        .collect();
    let mut out = Vec::new();
    for sym in file.symbols() {
        if sym.kind() != object::SymbolKind::Text || sym.address() == 0 {
            continue;
        }
        let Ok(raw) = sym.name() else { continue };
        let name = format!("{:#}", rustc_demangle::demangle(raw));
        if !wanted(&name) {
            continue;
        }
        let addr = sym.address();
        let Some(&(vaddr, _, off)) = segments.iter().find(|(a, size, _)| addr >= *a && addr < a + size) else {
            panic!("symbol {name} at {addr:#x} is in no segment");
        };
        let offset = addr - vaddr + off;
        if !out.iter().any(|(_, o)| *o == offset) {
            out.push((name, offset));
        }
    }
    out
}

impl Uprobes {
    /// Adds one uprobe per (event name, demangled symbol) pair; each symbol must exist exactly
    /// as named. `multi` pairs (event prefix, demangled name) put one probe on every symbol of
    /// that name (monomorphized copies), as `PREFIX_0`, `PREFIX_1`, ... The group is
    /// `{prefix}_{pid}_{n}` (see the module docs); [`Uprobes::perf_events`] names the events.
    pub fn add(binary: &Path, prefix: &str, exact: &[(&str, &str)], multi: &[(&str, &str)]) -> Uprobes {
        let _lock = TRACEFS_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tracefs();
        let binary = binary.canonicalize().expect("binary path");
        remove_stale_groups(&dir, prefix);
        let group = format!("{prefix}_{}_{}", std::process::id(), GROUP_SEQ.fetch_add(1, Ordering::Relaxed));
        let group = group.as_str();
        let mut events = BTreeMap::new();
        let mut lines = Vec::new();
        for (event, symbol) in exact {
            let found = find_functions(&binary, |n| n == *symbol);
            assert_eq!(found.len(), 1, "expected exactly one function named {symbol} in {}, found {found:?}", binary.display());
            lines.push(format!("p:{group}/{event} {}:{:#x}", binary.display(), found[0].1));
            events.insert(event.to_string(), symbol.to_string());
        }
        for (prefix, symbol) in multi {
            let found = find_functions(&binary, |n| n == *symbol);
            assert!(!found.is_empty(), "no function named {symbol} in {}", binary.display());
            for (i, (_, off)) in found.iter().enumerate() {
                let event = format!("{prefix}_{i}");
                lines.push(format!("p:{group}/{event} {}:{off:#x}", binary.display()));
                events.insert(event, symbol.to_string());
            }
        }
        let mut f = OpenOptions::new().append(true).open(dir.join("uprobe_events")).expect("open uprobe_events");
        for line in &lines {
            f.write_all(format!("{line}\n").as_bytes()).unwrap_or_else(|e| panic!("adding uprobe `{line}` failed: {e}"));
        }
        Uprobes { group: group.to_string(), events }
    }

    /// `GROUP:EVENT` names for perf.
    pub fn perf_events(&self) -> Vec<String> {
        self.events.keys().map(|e| format!("{}:{e}", self.group)).collect()
    }
}

/// Removes every event whose group `remove` accepts.
fn remove_groups(dir: &Path, remove: impl Fn(&str) -> bool) {
    let existing = std::fs::read_to_string(dir.join("uprobe_events")).unwrap_or_default();
    let mut f = OpenOptions::new().append(true).open(dir.join("uprobe_events")).expect("open uprobe_events");
    for line in existing.lines() {
        // "p:GROUP/EVENT PATH:OFFSET"
        if let Some(name) = line.split_whitespace().next().and_then(|s| s.split_once(':')).map(|(_, n)| n) {
            if name.split_once('/').is_some_and(|(group, _)| remove(group)) {
                // One write per command: tracefs parses each write(2) on its own.
                let _ = f.write_all(format!("-:{name}\n").as_bytes());
            }
        }
    }
}

/// Removes the groups `{prefix}_{pid}_{n}` of processes that no longer run (a test process
/// killed before its drops ran).
fn remove_stale_groups(dir: &Path, prefix: &str) {
    remove_groups(dir, |group| {
        let Some(rest) = group.strip_prefix(prefix).and_then(|r| r.strip_prefix('_')) else { return false };
        let Some(pid) = rest.split('_').next().and_then(|p| p.parse::<u32>().ok()) else { return false };
        pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
    });
}

impl Drop for Uprobes {
    fn drop(&mut self) {
        let _lock = TRACEFS_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        remove_groups(Path::new(TRACEFS), |g| g == self.group);
    }
}

/// `perf stat` attached to a process, counting `events` only between [`PerfStat::enable`]
/// and [`PerfStat::disable`].
pub struct PerfStat {
    child: Child,
    ctl: File,
    acks: mpsc::Receiver<String>,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(rc, 0, "mkfifo {}: {}", p.display(), std::io::Error::last_os_error());
}

impl PerfStat {
    /// Starts `perf stat -x, -D -1 --control fifo:CTL,ACK -e ... -p PID`, events disabled.
    pub fn start(pid: u32, events: &[String]) -> PerfStat {
        let dir = tempfile::tempdir().unwrap();
        let (ctl_path, ack_path, out) = (dir.path().join("ctl"), dir.path().join("ack"), dir.path().join("out.csv"));
        mkfifo(&ctl_path);
        mkfifo(&ack_path);
        let mut cmd = Command::new("perf");
        cmd.args(["stat", "-x", ",", "--no-big-num", "-D", "-1"])
            .arg(format!("--control=fifo:{},{}", ctl_path.display(), ack_path.display()))
            .arg("-o")
            .arg(&out);
        for e in events {
            cmd.args(["-e", e]);
        }
        cmd.args(["-p", &pid.to_string()]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let child = cmd.spawn().expect("spawn perf (Debian package linux-perf)");
        // O_RDWR: opening a FIFO this way never blocks, whether perf has opened it or not.
        let ctl = OpenOptions::new().read(true).write(true).open(&ctl_path).unwrap();
        let ack = OpenOptions::new().read(true).write(true).custom_flags(0).open(&ack_path).unwrap();
        let (tx, acks) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(ack).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        PerfStat { child, ctl, acks, out, _dir: dir }
    }

    fn command(&mut self, cmd: &str) {
        writeln!(self.ctl, "{cmd}").unwrap();
        match self.acks.recv_timeout(Duration::from_secs(10)) {
            // perf writes "ack\n" with its terminating NUL, which lands before the next line.
            Ok(line) => assert!(line.trim_matches(|c: char| c == '\0' || c.is_whitespace()) == "ack", "perf answered {line:?} to {cmd}"),
            Err(_) => {
                let _ = self.child.kill();
                let out = self.child.wait_with_output_stderr();
                panic!("perf did not acknowledge `{cmd}` within 10 s; perf stderr: {out}");
            }
        }
    }

    /// Starts counting.
    pub fn enable(&mut self) {
        self.command("enable");
    }

    /// Stops counting.
    pub fn disable(&mut self) {
        self.command("disable");
    }

    /// Stops perf and returns event -> count.
    pub fn finish(&mut self) -> BTreeMap<String, u64> {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let status = self.child.wait().expect("wait for perf");
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        let mut counts = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
            let cols: Vec<&str> = line.split(',').collect();
            if cols.len() >= 3 {
                let n = cols[0].trim().parse::<u64>().unwrap_or_else(|_| panic!("perf counted {:?} for {} (perf output: {text})", cols[0], cols[2]));
                counts.insert(cols[2].to_string(), n);
            }
        }
        assert!(!counts.is_empty(), "perf stat ({status}) wrote no counts: {text}");
        counts
    }
}

impl Drop for PerfStat {
    fn drop(&mut self) {
        // After finish() the child is reaped and this is a no-op; after a panic it frees the
        // events, so the uprobes can be removed.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

trait StderrText {
    fn wait_with_output_stderr(&mut self) -> String;
}

impl StderrText for Child {
    fn wait_with_output_stderr(&mut self) -> String {
        use std::io::Read;
        let mut s = String::new();
        if let Some(mut e) = self.stderr.take() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }
}
