//! The cgroup v2 file system's mount point, from `/proc/self/mountinfo` (format:
//! `Documentation/filesystems/proc.rst`, "/proc/<pid>/mountinfo").

use std::path::PathBuf;

/// The file [`cgroup2_mount`] reads.
pub const MOUNTINFO: &str = "/proc/self/mountinfo";

/// Mount point of the cgroup2 file system: `/sys/fs/cgroup` on unified hosts,
/// `/sys/fs/cgroup/unified` on hybrid ones; `None` when none is mounted.
///
/// # Errors
/// [`MOUNTINFO`] could not be read.
pub fn cgroup2_mount() -> std::io::Result<Option<PathBuf>> {
    Ok(cgroup2_mount_in(&std::fs::read_to_string(MOUNTINFO)?))
}

/// The cgroup2 mount point in the text of a mountinfo file, unescaped.
pub fn cgroup2_mount_in(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
        let (left, right) = line.split_once(" - ")?;
        if right.split_whitespace().next() != Some("cgroup2") {
            return None;
        }
        left.split_whitespace().nth(4).map(|mount_point| PathBuf::from(unescape_mountinfo(mount_point)))
    })
}

/// Mount point of the cgroup v1 hierarchy that holds `controller` (e.g. `cpu`, `cpuset`) in
/// the text of a mountinfo file (its super options name the controllers), unescaped; `None`
/// on a unified host or without that controller.
pub fn cgroup1_mount_in(mountinfo: &str, controller: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut r = right.split_whitespace();
        if r.next() != Some("cgroup") {
            return None;
        }
        let superopts = r.nth(1)?;
        if !superopts.split(',').any(|o| o == controller) {
            return None;
        }
        left.split_whitespace().nth(4).map(|mount_point| PathBuf::from(unescape_mountinfo(mount_point)))
    })
}

/// The directory of process `pid`'s cgroup in the v1 hierarchy of `controller`
/// (`/proc/PID/cgroup` line `N:CONTROLLERS:PATH` under that hierarchy's mount); `None` on a
/// unified host, without that controller, or when `pid` is gone.
pub fn cgroup1_dir_of(pid: u32, controller: &str) -> Option<PathBuf> {
    let mount = cgroup1_mount_in(&std::fs::read_to_string(MOUNTINFO).ok()?, controller)?;
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let rel = text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers.split(',').any(|c| c == controller).then_some(path)
    })?;
    // A path with `..` components is not one the kernel writes; refuse it rather than leave
    // the mount.
    if rel.split('/').any(|c| c == "..") {
        return None;
    }
    Some(mount.join(rel.trim_start_matches('/')))
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo` octal.
fn unescape_mountinfo(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() && bytes[i + 1..i + 4].iter().all(|b| (b'0'..=b'7').contains(b)) {
            let v = (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup1_mount_of_a_controller() {
        let mountinfo = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n\
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n\
40 31 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(cgroup1_mount_in(mountinfo, "cpu"), Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct")));
        assert_eq!(cgroup1_mount_in(mountinfo, "cpuset"), Some(PathBuf::from("/sys/fs/cgroup/cpuset")));
        assert_eq!(cgroup1_mount_in(mountinfo, "memory"), None);
        assert_eq!(cgroup2_mount_in(mountinfo), Some(PathBuf::from("/sys/fs/cgroup/unified")));
    }

    #[test]
    fn mountinfo_octal_escapes() {
        assert_eq!(unescape_mountinfo(r"/mnt/a\040b"), "/mnt/a b");
        assert_eq!(unescape_mountinfo("/sys/fs/cgroup"), "/sys/fs/cgroup");
    }

    #[test]
    fn the_cgroup2_line_of_a_hybrid_host() {
        let info = "25 30 0:23 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755\n\
                    26 25 0:24 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw\n\
                    27 25 0:25 / /sys/fs/cgroup/cpu\\040x rw shared:11 - cgroup cgroup rw,cpu\n";
        assert_eq!(cgroup2_mount_in(info), Some(PathBuf::from("/sys/fs/cgroup/unified")));
        assert_eq!(cgroup2_mount_in("1 0 0:1 / / rw - ext4 /dev/vda rw\n"), None);
        assert!(cgroup2_mount().expect("mountinfo").is_some(), "this machine has a cgroup2 mount");
    }
}
