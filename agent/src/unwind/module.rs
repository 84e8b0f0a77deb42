//! The unwind tables of one binary (ELF executable, shared library or the vDSO), read once
//! and cached for the run ([`ModuleCache`]).
//!
//! What is kept of a binary: its `.eh_frame` and `.eh_frame_hdr` sections (DWARF call frame
//! information as the x86_64 psABI, section 4.2.4 "EH_FRAME sections", and the LSB's
//! "Exception Frames" chapter define them), `.debug_frame` when there is no `.eh_frame`
//! (uncompressed only), the addresses of `.text` and `.got` (bases of relative pointer
//! encodings) and the `PT_LOAD` segments (to turn process addresses into file addresses).
//! The code itself is not kept: on ELF, CFI is exact at every instruction, so framehop needs
//! no instruction analysis.
//!
//! Files are opened through `/proc/PID/map_files/START-END` only (the kernel resolves the
//! mapping to the file the process really mapped, inside its container and even after the
//! file was deleted or replaced), never through a host path built from the path the process
//! shows. A binary is keyed by device, inode, size and modification time of that file, so a
//! binary replaced during the run is a new entry.

use std::collections::HashMap;
use std::ops::Range;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use object::{Object, ObjectSection, ObjectSegment, SegmentFlags};

/// Which unwind tables a binary has, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnwindInfo {
    /// `.eh_frame` with its `.eh_frame_hdr` binary-search index.
    EhFrameHdr,
    /// `.eh_frame` without an index (framehop builds one when the module is added).
    EhFrame,
    /// `.debug_frame` only (unstripped objects built without unwind tables).
    DebugFrame,
    /// No CFI: stripped of it, built with `-fno-asynchronous-unwind-tables`, or unreadable.
    None,
}

impl UnwindInfo {
    /// Short name for reports: `eh_frame_hdr`, `eh_frame`, `debug_frame`, `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            UnwindInfo::EhFrameHdr => "eh_frame_hdr",
            UnwindInfo::EhFrame => "eh_frame",
            UnwindInfo::DebugFrame => "debug_frame",
            UnwindInfo::None => "none",
        }
    }
}

/// One `PT_LOAD` segment of a binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadSegment {
    /// `p_vaddr`: address in the file's own address space (SVMA).
    pub vaddr: u64,
    /// `p_offset`: offset in the file, bytes.
    pub offset: u64,
    /// `p_filesz`: bytes of the file the segment maps.
    pub filesz: u64,
    /// `p_flags` has `PF_X`.
    pub executable: bool,
}

/// The unwind tables and layout of one binary. Section addresses are SVMAs (as stated in the
/// file; for ELF the image base is 0).
#[derive(Debug, Clone, Default)]
pub struct ModuleData {
    /// File name for reports, e.g. `libc.so.6`, `[vdso]`.
    pub name: String,
    /// GNU build id, lowercase hex, when the binary has one.
    pub build_id: Option<String>,
    /// `.eh_frame`: address range and bytes.
    pub eh_frame: Option<(Range<u64>, Arc<[u8]>)>,
    /// `.eh_frame_hdr`: address range and bytes.
    pub eh_frame_hdr: Option<(Range<u64>, Arc<[u8]>)>,
    /// `.debug_frame` bytes (kept only when there is no `.eh_frame`).
    pub debug_frame: Option<Arc<[u8]>>,
    /// Address range of `.text`.
    pub text_svma: Option<Range<u64>>,
    /// Address range of `.got`.
    pub got_svma: Option<Range<u64>>,
    /// `PT_LOAD` segments.
    pub segments: Vec<LoadSegment>,
    /// Why the binary could not be read or parsed, when it could not.
    pub error: Option<String>,
}

impl ModuleData {
    /// The unwind tables this binary has.
    pub fn unwind_info(&self) -> UnwindInfo {
        match (&self.eh_frame, &self.eh_frame_hdr, &self.debug_frame) {
            (Some(_), Some(_), _) => UnwindInfo::EhFrameHdr,
            (Some(_), None, _) => UnwindInfo::EhFrame,
            (None, _, Some(_)) => UnwindInfo::DebugFrame,
            _ => UnwindInfo::None,
        }
    }

    /// Parses the tables out of an ELF image. Never fails: what cannot be read is missing
    /// (and `error` says why).
    pub fn from_elf<'data, R: object::ReadRef<'data>>(name: &str, data: R) -> ModuleData {
        let mut module = ModuleData { name: name.to_owned(), ..Default::default() };
        let file = match object::File::parse(data) {
            Ok(f) => f,
            Err(e) => {
                module.error = Some(format!("not an ELF file: {e}"));
                return module;
            }
        };
        if file.architecture() != object::Architecture::X86_64 {
            module.error = Some(format!("architecture {:?}, not x86_64", file.architecture()));
            return module;
        }
        module.build_id = file.build_id().ok().flatten().map(|id| id.iter().map(|b| format!("{b:02x}")).collect());
        let section = |name: &str| -> Option<(Range<u64>, Arc<[u8]>)> {
            let s = file.section_by_name(name)?;
            // SHT_NOBITS or unreadable sections give no bytes.
            let data = s.data().ok().filter(|d| !d.is_empty())?;
            Some((s.address()..s.address() + s.size(), Arc::from(data)))
        };
        let range = |name: &str| file.section_by_name(name).map(|s| s.address()..s.address() + s.size());
        module.eh_frame = section(".eh_frame");
        module.eh_frame_hdr = section(".eh_frame_hdr");
        if module.eh_frame.is_none() {
            // Only an uncompressed .debug_frame (object's `data()` returns compressed bytes as is).
            if let Some(s) = file.section_by_name(".debug_frame") {
                let uncompressed = s.compressed_file_range().map(|r| r.format == object::CompressionFormat::None).unwrap_or(false);
                if uncompressed {
                    module.debug_frame = s.data().ok().filter(|d| !d.is_empty()).map(Arc::from);
                }
            }
        }
        module.text_svma = range(".text");
        module.got_svma = range(".got");
        module.segments = file
            .segments()
            .filter_map(|seg| {
                let (offset, filesz) = seg.file_range();
                let SegmentFlags::Elf { p_type, p_flags } = seg.flags() else { return None };
                (p_type == object::elf::PT_LOAD).then_some(LoadSegment {
                    vaddr: seg.address(),
                    offset,
                    filesz,
                    executable: p_flags.0 & object::elf::PF_X.0 != 0,
                })
            })
            .collect();
        module
    }

    /// Load bias of a mapping of this file at `start` from file offset `offset` (both from
    /// `/proc/PID/maps`): the value to add to an SVMA to get the process address. `None` when
    /// no `PT_LOAD` segment maps that offset.
    pub fn bias_for_mapping(&self, start: u64, offset: u64) -> Option<u64> {
        const PAGE: u64 = 4096;
        // The mapping starts at the page of the segment's first byte. Segments share pages
        // (the r-x segment often starts in the last page of the r-- one), so match the
        // segment that starts in the mapping's first page, executable ones first.
        let starts_here = |s: &&LoadSegment| s.offset & !(PAGE - 1) == offset;
        let seg = self
            .segments
            .iter()
            .filter(starts_here)
            .max_by_key(|s| s.executable)
            .or_else(|| self.segments.iter().find(|s| s.offset <= offset && offset < s.offset + s.filesz))?;
        // start maps `offset`; the segment maps p_offset to p_vaddr + bias, hence
        // bias = start + (p_offset - offset) - p_vaddr.
        Some(start.wrapping_add(seg.offset.wrapping_sub(offset)).wrapping_sub(seg.vaddr))
    }
}

/// Identity of a file: device, inode, size (bytes) and modification time (s, ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileKey {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
}

/// Binaries read so far in this run, by [`FileKey`]; the vDSO apart.
#[derive(Default)]
pub struct ModuleCache {
    by_file: HashMap<FileKey, Arc<ModuleData>>,
    vdso: Option<Arc<ModuleData>>,
    /// Binaries read and parsed (cache misses).
    pub loads: u64,
}

impl ModuleCache {
    /// The tables of the file mapped at `map_file` (a `/proc/PID/map_files/START-END` path),
    /// read on first use. `name` is only for reports.
    pub fn get(&mut self, map_file: &Path, name: &str) -> Arc<ModuleData> {
        let meta = match std::fs::metadata(map_file) {
            Ok(m) => m,
            Err(e) => {
                return Arc::new(ModuleData { name: name.to_owned(), error: Some(format!("{}: {e}", map_file.display())), ..Default::default() })
            }
        };
        let key = FileKey { dev: meta.dev(), ino: meta.ino(), size: meta.size(), mtime: meta.mtime(), mtime_nsec: meta.mtime_nsec() };
        if let Some(m) = self.by_file.get(&key) {
            return m.clone();
        }
        self.loads += 1;
        let module = match std::fs::File::open(map_file) {
            Ok(file) => {
                let cache = object::ReadCache::new(file);
                ModuleData::from_elf(name, &cache)
            }
            Err(e) => ModuleData { name: name.to_owned(), error: Some(format!("{}: {e}", map_file.display())), ..Default::default() },
        };
        if let Some(error) = &module.error {
            tracing::debug!(module = name, error, "no unwind tables");
        }
        let module = Arc::new(module);
        self.by_file.insert(key, module.clone());
        module
    }

    /// The vDSO's tables. Every x86_64 process of this kernel maps the same vDSO image, so
    /// the agent's own copy is read (its address range from `/proc/self/maps`).
    pub fn vdso(&mut self) -> Arc<ModuleData> {
        if let Some(m) = &self.vdso {
            return m.clone();
        }
        let module = match own_vdso() {
            Some(bytes) => ModuleData::from_elf("[vdso]", &bytes[..]),
            None => ModuleData { name: "[vdso]".to_owned(), error: Some("no [vdso] in /proc/self/maps".to_owned()), ..Default::default() },
        };
        let module = Arc::new(module);
        self.vdso = Some(module.clone());
        module
    }

    /// Number of distinct binaries read.
    pub fn len(&self) -> usize {
        self.by_file.len() + usize::from(self.vdso.is_some())
    }

    /// True when no binary was read yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A copy of this process's vDSO image.
fn own_vdso() -> Option<Vec<u8>> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.ends_with("[vdso]"))?;
    let (start, end) = line.split_whitespace().next()?.split_once('-')?;
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    if end <= start {
        return None;
    }
    // SAFETY: [start, end) is the vDSO mapping of this process: mapped readable for the life
    // of the process and never written.
    let bytes = unsafe { std::slice::from_raw_parts(start as *const u8, end - start) };
    Some(bytes.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout of a lld-linked PIE (this repository's test binaries): the r-x segment
    /// starts in the last page of the r-- one, at file offset 0x9a750 and address 0x9b750.
    #[test]
    fn bias_uses_the_segment_that_starts_in_the_mapping_page() {
        let module = ModuleData {
            segments: vec![
                LoadSegment { vaddr: 0, offset: 0, filesz: 0x9a744, executable: false },
                LoadSegment { vaddr: 0x9b750, offset: 0x9a750, filesz: 0xcfe70, executable: true },
                LoadSegment { vaddr: 0x16c5c0, offset: 0x16a5c0, filesz: 0xa208, executable: false },
            ],
            ..Default::default()
        };
        // /proc/PID/maps: 5633930a5000-... r-xp 0009a000: the r-x mapping starts at the page of
        // file offset 0x9a000, which both the r-- and the r-x segments touch.
        let start = 0x5633_930a_5000;
        let bias = module.bias_for_mapping(start, 0x9a000).unwrap();
        // File offset 0x9a750 is at start + 0x750 and is address 0x9b750 + bias.
        assert_eq!(0x9b750 + bias, start + 0x750);
        // The r-- mapping at offset 0 of a PIE loaded at 0x5633_9300_a000.
        assert_eq!(module.bias_for_mapping(0x5633_9300_a000, 0), Some(0x5633_9300_a000));
        // An offset no segment maps.
        assert_eq!(module.bias_for_mapping(start, 0x10_0000_0000), None);
    }

    #[test]
    fn a_file_that_is_not_elf_has_no_tables_and_says_why() {
        let module = ModuleData::from_elf("junk", &b"#!/bin/sh\necho not elf\n"[..]);
        assert_eq!(module.unwind_info(), UnwindInfo::None);
        assert!(module.error.as_deref().is_some_and(|e| e.contains("not an ELF file")), "{:?}", module.error);
    }

    #[test]
    fn own_executable_and_vdso_have_eh_frame_hdr() {
        let mut cache = ModuleCache::default();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let line = maps.lines().find(|l| l.ends_with(exe.to_str().unwrap()) && l.contains(" r-xp ")).expect("r-x mapping of the test binary");
        let range = line.split_whitespace().next().unwrap();
        let a = cache.get(Path::new(&format!("/proc/self/map_files/{range}")), "self");
        assert_eq!(a.unwind_info(), UnwindInfo::EhFrameHdr, "{:?}", a.error);
        assert!(a.build_id.is_some());
        // The same file again: served from the cache, one load.
        let b = cache.get(Path::new(&format!("/proc/self/map_files/{range}")), "self");
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(cache.loads, 1);
        assert_eq!(cache.vdso().unwind_info(), UnwindInfo::EhFrameHdr);
        assert_eq!(cache.len(), 2);
    }
}
