//! CPU lists as the kernel writes them (`/sys/devices/system/cpu/online`, cpuset files) and
//! as `taskset -c` and Docker's `--cpuset-cpus` take them: `0`, `1-3`, `0,2-3`.

/// The CPUs of `list`, in the list's order; `None` when it is not a CPU list (empty, a part
/// that is not `N` or `A-B` with `A <= B`). Ranges are cut at 4,096 CPUs.
pub fn parse_list(list: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in list.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
        if a > b {
            return None;
        }
        cpus.extend(a..=b.min(a + 4096));
    }
    Some(cpus)
}

/// Number of CPUs in `list`, at least 1 (a list that does not parse counts as one CPU).
pub fn list_len(list: &str) -> u32 {
    parse_list(list).map_or(1, |c| c.len().max(1) as u32)
}

/// The CPUs this process may run on (`sched_getaffinity(2)`), ascending; empty if unknown.
pub fn allowed() -> Vec<u32> {
    allowed_of(0)
}

/// The CPUs process `pid` may run on (`sched_getaffinity(2)`; 0 = this process), ascending;
/// empty if unknown (no such process).
pub fn allowed_of(pid: u32) -> Vec<u32> {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return Vec::new() };
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it for that process.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if unsafe { libc::sched_getaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Vec::new();
    }
    // SAFETY: CPU_ISSET reads the set filled above, with an index below CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).map(|c| c as u32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists() {
        assert_eq!(parse_list("0"), Some(vec![0]));
        assert_eq!(parse_list("1-3"), Some(vec![1, 2, 3]));
        assert_eq!(parse_list("0,2-3"), Some(vec![0, 2, 3]));
        for bad in ["", "x", "1-0", "1,", "-1"] {
            assert_eq!(parse_list(bad), None, "{bad:?}");
        }
        assert_eq!((list_len("0"), list_len("1-3"), list_len("0,2-3"), list_len("")), (1, 3, 3, 1));
        assert!(allowed().contains(&0));
    }
}
