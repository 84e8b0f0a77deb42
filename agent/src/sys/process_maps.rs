//! Executable mappings of the target's processes, recorded while they live, so that the user
//! frames of a process that exits before the end of the run still get names.
//!
//! blazesym's `Source::Process` reads `/proc/PID/maps` and `/proc/PID/map_files/` at
//! symbolization time, after the run: a process that exited by then (a restarted app, a
//! container that was stopped, a `--pid` target that ended) has neither, and its frames were
//! `[unknown]`. [`ProcessMaps::record`] reads the executable, file-backed lines of
//! `/proc/PID/maps` (format: proc(5)) while the process lives and keeps each distinct file
//! open through `/proc/PID/map_files/START-END`, so that the bytes stay readable after the
//! process, its mount namespace and even the file's last name are gone. An address is then
//! symbolized as a file offset (`address - start + offset`) in that open file
//! (`/proc/self/fd/N`).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::sys::proc_maps;

/// One executable, file-backed line of `/proc/PID/maps`: `[start, end)` maps the file from
/// byte `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedFile {
    /// First address of the mapping.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// File offset of `start`, bytes.
    pub offset: u64,
    /// File name without directories (`target-app`, `libc.so.6`): the frames' module.
    pub module: String,
    /// The file's identity in the maps line: (device `major:minor`, inode).
    pub file: (String, u64),
}

impl MappedFile {
    /// The file offset of `address`, when the mapping holds it.
    pub fn file_offset(&self, address: u64) -> Option<u64> {
        (self.start <= address && address < self.end).then(|| address - self.start + self.offset)
    }
}

/// At most this many files are held open (one per distinct binary or library): a target of
/// many processes and libraries must not use up the agent's descriptors (the soft limit is
/// often 1,024, shared with the BPF maps and programs). Mappings of files beyond it are not
/// recorded: their frames stay `[unknown]` if the process exits before the end.
pub const MAX_OPEN_FILES: usize = 256;

/// The recorded executable mappings of every process seen, and one open handle per distinct
/// file. Cloning shares the handles.
#[derive(Debug, Clone, Default)]
pub struct ProcessMaps {
    /// Per pid, every distinct mapping recorded, oldest first (a process that `exec`s or
    /// `dlopen`s adds to its list; lookups prefer the newest).
    mappings: BTreeMap<u32, Vec<MappedFile>>,
    files: HashMap<(String, u64), Arc<File>>,
    /// Per pid, the `[vdso]` mapping's `[start, end)`: not a file, but the same image in
    /// every 64-bit process of this kernel, so this agent's own copy stands in for it.
    vdso: BTreeMap<u32, (u64, u64)>,
}

impl PartialEq for ProcessMaps {
    /// Equal when the same mappings were recorded (the open handles are not compared).
    fn eq(&self, other: &Self) -> bool {
        self.mappings == other.mappings && self.vdso == other.vdso
    }
}

impl ProcessMaps {
    /// Records the executable mappings of `pid` from `/proc`. A process that is gone, or a
    /// mapping whose file cannot be opened (`/proc/PID/map_files/` needs CAP_SYS_ADMIN),
    /// records nothing: symbolization then falls back to `[unknown]` as before.
    pub fn record(&mut self, pid: u32) {
        self.record_in(Path::new("/proc"), pid);
    }

    /// [`record`](Self::record) with another proc root (tests).
    pub fn record_in(&mut self, proc_root: &Path, pid: u32) {
        let dir = proc_root.join(pid.to_string());
        let Ok(text) = std::fs::read_to_string(dir.join("maps")) else {
            return;
        };
        for line in text.lines() {
            if let Some(v) = proc_maps::parse(line).filter(|m| m.path == "[vdso]") {
                self.vdso.insert(pid, (v.start, v.end));
            }
            let Some(m) = parse_line(line) else {
                continue;
            };
            if !self.files.contains_key(&m.file) {
                if self.files.len() >= MAX_OPEN_FILES {
                    continue;
                }
                let Ok(file) = File::open(dir.join("map_files").join(format!("{:x}-{:x}", m.start, m.end))) else {
                    continue;
                };
                self.files.insert(m.file.clone(), Arc::new(file));
            }
            let list = self.mappings.entry(pid).or_default();
            if !list.contains(&m) {
                list.push(m);
            }
        }
    }

    /// True when mappings of `pid` were recorded.
    pub fn has(&self, pid: u32) -> bool {
        self.mappings.get(&pid).is_some_and(|l| !l.is_empty())
    }

    /// Number of processes with recorded mappings.
    pub fn processes(&self) -> usize {
        self.mappings.values().filter(|l| !l.is_empty()).count()
    }

    /// The offset of `address` in the recorded `[vdso]` of `pid`, when it falls there.
    pub fn vdso_offset(&self, pid: u32, address: u64) -> Option<u64> {
        let &(start, end) = self.vdso.get(&pid)?;
        (start <= address && address < end).then(|| address - start)
    }

    /// The newest recorded mapping of `pid` that holds `address`.
    pub fn lookup(&self, pid: u32, address: u64) -> Option<&MappedFile> {
        self.mappings.get(&pid)?.iter().rev().find(|m| m.file_offset(address).is_some())
    }

    /// A path through which the file of `mapping` can be opened by this process
    /// (`/proc/self/fd/N`), as long as this `ProcessMaps` lives.
    pub fn path(&self, mapping: &MappedFile) -> Option<PathBuf> {
        self.files.get(&mapping.file).map(|f| PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd())))
    }
}

/// The recorded form of an executable file mapping; `None` for any other line.
fn parse_line(line: &str) -> Option<MappedFile> {
    let m = proc_maps::parse(line)?;
    m.is_executable_file().then(|| MappedFile {
        start: m.start,
        end: m.end,
        offset: m.offset,
        module: proc_maps::file_name(m.path),
        file: (m.dev.to_owned(), m.inode),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_executable_file_mappings_only() {
        let m = parse_line("5581b1a00000-5581b1c4e000 r-xp 00027000 fd:01 1837262                    /app/target-app").unwrap();
        assert_eq!((m.start, m.end, m.offset), (0x5581b1a00000, 0x5581b1c4e000, 0x27000));
        assert_eq!(m.module, "target-app");
        assert_eq!(m.file, ("fd:01".to_owned(), 1837262));
        assert_eq!(m.file_offset(0x5581b1a00010), Some(0x27010));
        assert_eq!(m.file_offset(0x5581b1c4e000), None);
        let deleted = parse_line("7f00-7f10 r-xp 00000000 00:2a 77 /tmp/my lib.so (deleted)").unwrap();
        assert_eq!(deleted.module, "my lib.so");
        for line in [
            "5581b19d9000-5581b1a00000 r--p 00000000 fd:01 1837262 /app/target-app",
            "7ffc5a1e6000-7ffc5a1e8000 r-xp 00000000 00:00 0                          [vdso]",
            "7f1c2c000000-7f1c2c021000 rwxp 00000000 00:00 0 ",
            "garbage",
        ] {
            assert!(parse_line(line).is_none(), "{line}");
        }
    }

    #[test]
    fn records_this_process_and_reads_its_own_code_through_the_handle() {
        let mut maps = ProcessMaps::default();
        let pid = std::process::id();
        maps.record(pid);
        let here = records_this_process_and_reads_its_own_code_through_the_handle as *const () as u64;
        let m = maps.lookup(pid, here).expect("this function's own mapping");
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let held = std::fs::read(maps.path(m).unwrap()).unwrap();
        assert_eq!(held.len(), exe.len(), "the handle is not the test binary");
        // The bytes at the computed file offset are this function's first instruction bytes.
        let offset = m.file_offset(here).unwrap() as usize;
        // SAFETY: `here` is the start of a function of this binary, mapped and readable.
        let code = unsafe { std::slice::from_raw_parts(here as *const u8, 16) };
        assert_eq!(&held[offset..offset + 16], code);
        // Recording again adds nothing.
        let before = maps.mappings[&pid].len();
        maps.record(pid);
        assert_eq!(maps.mappings[&pid].len(), before);
        assert!(maps.has(pid) && !maps.has(u32::MAX) && maps.processes() == 1);
    }
}
