//! Lines of `/proc/PID/maps`: `start-end perms offset dev inode [path]`, the format of proc(5).
//! The one parser of the agent's readers (the DWARF unwinder, the symbolizer and its recorded
//! mappings).

use std::path::Path;

/// One parsed line of `/proc/PID/maps`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapsLine<'a> {
    /// First address of the mapping.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// `r-xp` and the like.
    pub perms: &'a str,
    /// File offset of `start`, bytes.
    pub offset: u64,
    /// Device of the file, `major:minor` in hex (`00:00` for anonymous memory).
    pub dev: &'a str,
    /// Inode of the file, 0 for anonymous memory.
    pub inode: u64,
    /// Path of the file (it may contain spaces, and ends in ` (deleted)` when the file was
    /// removed), a special name (`[stack]`, `[vdso]`), or empty for anonymous memory.
    pub path: &'a str,
}

impl MapsLine<'_> {
    /// True for an executable mapping of a file.
    pub fn is_executable_file(&self) -> bool {
        self.perms.contains('x') && self.inode != 0 && self.path.starts_with('/')
    }
}

/// Parses one line; `None` for a line that does not have the five leading fields.
pub fn parse(line: &str) -> Option<MapsLine<'_>> {
    let mut rest = line;
    let mut field = || {
        let t = rest.trim_start();
        let end = t.find(char::is_whitespace).unwrap_or(t.len());
        let (f, r) = t.split_at(end);
        rest = r;
        f
    };
    let range = field();
    let perms = field();
    let offset = field();
    let dev = field();
    let inode = field().parse().ok()?;
    let path = rest.trim();
    let (start, end) = range.split_once('-')?;
    Some(MapsLine {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        perms,
        offset: u64::from_str_radix(offset, 16).ok()?,
        dev,
        inode,
        path,
    })
}

/// The file name of a maps path, without directories and without ` (deleted)`:
/// `/usr/lib/x86_64-linux-gnu/libc.so.6` -> `libc.so.6`; special names (`[vdso]`) as they are.
pub fn file_name(path: &str) -> String {
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    Path::new(path).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_with_spaces_anonymous_and_special() {
        let l = parse("7f0000000000-7f0000001000 r-xp 00002000 08:01 1234   /opt/my app/lib x.so").unwrap();
        assert_eq!((l.start, l.end, l.perms, l.offset, l.dev, l.inode, l.path), (0x7f0000000000, 0x7f0000001000, "r-xp", 0x2000, "08:01", 1234, "/opt/my app/lib x.so"));
        assert!(l.is_executable_file());
        assert_eq!(file_name(l.path), "lib x.so");
        let l = parse("7f0000000000-7f0000001000 rwxp 00000000 00:00 0 ").unwrap();
        assert_eq!((l.path, l.inode), ("", 0));
        assert!(!l.is_executable_file());
        let l = parse("7ffc5a1e6000-7ffc5a1e8000 r-xp 00000000 00:00 0                          [vdso]").unwrap();
        assert_eq!(l.path, "[vdso]");
        assert!(!l.is_executable_file());
        assert_eq!(file_name(l.path), "[vdso]");
        assert!(!parse("5581b19d9000-5581b1a00000 r--p 00000000 fd:01 1837262 /app/target-app").unwrap().is_executable_file());
        assert_eq!(file_name("/usr/lib/libc.so.6 (deleted)"), "libc.so.6");
        assert!(parse("garbage").is_none());
        assert!(parse("").is_none());
    }
}
