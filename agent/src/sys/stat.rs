//! `/proc/PID/stat`: the fields the agent and the bench read (format: proc(5)).

/// The fields of one `/proc/PID/stat` used here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Field 3: `R`, `S`, `D`, `Z` (zombie), `X` (dead), ...
    pub state: char,
    /// Field 4: the parent's pid.
    pub ppid: u32,
    /// Field 9, `flags`: the kernel's `PF_*` flags of the task (include/linux/sched.h).
    pub flags: u32,
    /// Fields 14 + 15, `utime + stime`: CPU time of every thread of the process, in clock
    /// ticks ([`clock_ticks_per_second`]).
    pub cpu_ticks: u64,
    /// Fields 16 + 17, `cutime + cstime`: CPU time of the children this process has waited
    /// for (and of theirs), clock ticks. A child's time moves here when its parent reaps it,
    /// so `cpu_ticks + children_cpu_ticks` of a process tree only grows while children come
    /// and go.
    pub children_cpu_ticks: u64,
    /// Field 22, `starttime`: when the process started, clock ticks after boot; with the pid,
    /// it names one process (pids are reused).
    pub start_ticks: u64,
}

impl ProcStat {
    /// True unless the process is a zombie or dead: an exited child that its parent has not
    /// reaped yet is gone for profiling.
    pub fn is_live(&self) -> bool {
        !matches!(self.state, 'Z' | 'X')
    }

    /// A kernel thread (`PF_KTHREAD`): no user code, nothing to profile.
    pub fn is_kernel_thread(&self) -> bool {
        self.flags & 0x0020_0000 != 0
    }

    /// [`ProcStat::cpu_ticks`] in ns.
    pub fn cpu_ns(&self) -> u64 {
        self.cpu_ticks * 1_000_000_000 / clock_ticks_per_second()
    }
}

/// Parses the text of one `/proc/PID/stat`; `None` when it is not one. The command name
/// (field 2) is in parentheses and may itself hold spaces and parentheses, so the fields are
/// split after the last `)`.
pub fn parse(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    // `rest` starts at field 3 (state), so field N is at index N - 3.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let mut state = fields.first()?.chars();
    let (state, None) = (state.next()?, state.next()) else { return None };
    let ppid = fields.get(4 - 3)?.parse().ok()?;
    let flags = fields.get(9 - 3)?.parse().ok()?;
    let utime: u64 = fields.get(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.get(15 - 3)?.parse().ok()?;
    let cutime: u64 = fields.get(16 - 3)?.parse().ok()?;
    let cstime: u64 = fields.get(17 - 3)?.parse().ok()?;
    let start_ticks = fields.get(22 - 3)?.parse().ok()?;
    Some(ProcStat { state, ppid, flags, cpu_ticks: utime + stime, children_cpu_ticks: cutime + cstime, start_ticks })
}

/// Every process of `/proc` (host pids when the caller is in the host's pid namespace) with
/// its parsed stat; processes that exit while the directory is read are left out.
pub fn all() -> std::collections::BTreeMap<u32, ProcStat> {
    let mut out = std::collections::BTreeMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            if let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) {
                if let Some(s) = read(pid) {
                    out.insert(pid, s);
                }
            }
        }
    }
    out
}

/// CPU time of the process tree under `root` in `processes` (a reading of [`all`]), clock
/// ticks: `utime + stime + cutime + cstime` of `root` and of every descendant, so the time
/// of children that exited and were reaped stays counted. `None` when `root` is not in
/// `processes` or has another start time than `root_start_ticks` (a reused pid).
pub fn tree_cpu_ticks(processes: &std::collections::BTreeMap<u32, ProcStat>, root: u32, root_start_ticks: u64) -> Option<u64> {
    let r = processes.get(&root).filter(|r| r.start_ticks == root_start_ticks)?;
    let mut children: std::collections::HashMap<u32, Vec<u32>> = std::collections::HashMap::new();
    for (&pid, s) in processes {
        if pid != root {
            children.entry(s.ppid).or_default().push(pid);
        }
    }
    let mut total = r.cpu_ticks + r.children_cpu_ticks;
    let mut stack = children.get(&root).cloned().unwrap_or_default();
    let mut seen = std::collections::HashSet::from([root]);
    while let Some(pid) = stack.pop() {
        if !seen.insert(pid) {
            continue;
        }
        let s = &processes[&pid];
        total += s.cpu_ticks + s.children_cpu_ticks;
        stack.extend(children.get(&pid).into_iter().flatten().copied());
    }
    Some(total)
}

/// `/proc/PID/stat` of `pid`, parsed; `None` when the process is gone (or the file is not one).
pub fn read(pid: u32) -> Option<ProcStat> {
    parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// `/proc/TGID/task/TID/stat` of thread `tid` of process `tgid`, parsed; `None` when the
/// thread is gone.
pub fn read_thread(tgid: u32, tid: u32) -> Option<ProcStat> {
    parse(&std::fs::read_to_string(format!("/proc/{tgid}/task/{tid}/stat")).ok()?)
}

/// CPU time every CPU of the host spent busy since boot, ns: the `cpu` line of `/proc/stat`
/// (proc(5)), `user + nice + system + irq + softirq` (guest time is inside `user`; `idle`,
/// `iowait` and `steal`, time the hypervisor gave another guest, are not busy). `None`
/// when the file cannot be read or parsed.
pub fn host_busy_ns() -> Option<u64> {
    host_busy_ns_of(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// [`host_busy_ns`] of a `/proc/stat` text.
pub fn host_busy_ns_of(text: &str) -> Option<u64> {
    busy_ns_of_line(text.lines().find(|l| l.starts_with("cpu "))?)
}

/// CPU time each CPU of the host spent busy since boot, ns, by CPU number: the `cpuN` lines of
/// `/proc/stat`, counted as [`host_busy_ns`] counts the `cpu` line. Empty when the file cannot
/// be read; a CPU whose line does not parse is left out.
pub fn cpu_busy_ns() -> std::collections::BTreeMap<u32, u64> {
    std::fs::read_to_string("/proc/stat").map_or_else(|_| Default::default(), |t| cpu_busy_ns_of(&t))
}

/// [`cpu_busy_ns`] of a `/proc/stat` text.
pub fn cpu_busy_ns_of(text: &str) -> std::collections::BTreeMap<u32, u64> {
    text.lines()
        .filter_map(|l| {
            let cpu: u32 = l.split_whitespace().next()?.strip_prefix("cpu")?.parse().ok()?;
            Some((cpu, busy_ns_of_line(l)?))
        })
        .collect()
}

/// `user + nice + system + irq + softirq` of one `cpu` line of `/proc/stat`, ns.
fn busy_ns_of_line(line: &str) -> Option<u64> {
    let v: Vec<u64> = line.split_whitespace().skip(1).map(|x| x.parse().ok()).collect::<Option<_>>()?;
    let ticks = v.first()? + v.get(1)? + v.get(2)? + v.get(5)? + v.get(6)?;
    Some(ticks.saturating_mul(1_000_000_000) / clock_ticks_per_second())
}

/// Clock ticks per second of `/proc/PID/stat` times (`sysconf(_SC_CLK_TCK)`, 100 on Linux
/// x86_64).
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as u64
    } else {
        100
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// proc(5)'s order: user nice system idle iowait irq softirq steal guest guest_nice; busy =
    /// 100 + 2 + 30 + 4 + 5 = 141 ticks.
    #[test]
    fn host_busy_counts_user_nice_system_irq_softirq() {
        let text = "cpu  100 2 30 900 7 4 5 60 10 0\ncpu0 50 1 15 450 3 2 2 30 5 0\n";
        assert_eq!(host_busy_ns_of(text), Some(141 * 1_000_000_000 / clock_ticks_per_second()));
        assert_eq!(host_busy_ns_of("cpu0 1 2 3\n"), None);
        assert!(host_busy_ns().is_some_and(|ns| ns > 0));
    }

    /// Each `cpuN` line counted alike: cpu0 50 + 1 + 15 + 2 + 2 = 70 ticks, cpu1 50 + 1 + 15 +
    /// 2 + 3 = 71; the `cpu` total and a broken line are left out.
    #[test]
    fn cpu_busy_per_cpu() {
        let text = "cpu  100 2 30 900 7 4 5 60 10 0\ncpu0 50 1 15 450 3 2 2 30 5 0\ncpu1 50 1 15 450 4 2 3 30 5 0\ncpu2 1 2\nintr 5\n";
        let t = |ticks: u64| ticks * 1_000_000_000 / clock_ticks_per_second();
        assert_eq!(cpu_busy_ns_of(text), [(0, t(70)), (1, t(71))].into_iter().collect());
        let here = cpu_busy_ns();
        assert!(here.len() >= crate::sys::cpus::allowed().len() && here.values().sum::<u64>() > 0, "{here:?}");
    }

    #[test]
    fn a_command_name_with_spaces_and_parentheses() {
        let line = "4242 (tokio (worker) 1) S 1 4242 4242 0 -1 4194560 163 0 0 0 17 5 0 0 20 0 3 0 123 4096 100 0\n";
        assert_eq!(parse(line), Some(ProcStat { state: 'S', ppid: 1, flags: 4_194_560, cpu_ticks: 22, children_cpu_ticks: 0, start_ticks: 123 }));
        assert_eq!(parse("1 (x) Z 0 1 1"), None, "too few fields");
        assert_eq!(parse("no stat here"), None);
    }

    fn p(ppid: u32, cpu: u64, children: u64, start: u64) -> ProcStat {
        ProcStat { state: 'S', ppid, flags: 0, cpu_ticks: cpu, children_cpu_ticks: children, start_ticks: start }
    }

    #[test]
    fn a_tree_keeps_the_time_of_reaped_children() {
        // Postmaster 10 with backends 11 (live) and 12 (whose child 13 is live); 99 is not
        // in the tree.
        let before: std::collections::BTreeMap<u32, ProcStat> =
            [(10, p(1, 100, 50, 7)), (11, p(10, 20, 0, 8)), (12, p(10, 5, 0, 9)), (13, p(12, 1, 0, 9)), (99, p(1, 1000, 0, 3))].into();
        assert_eq!(tree_cpu_ticks(&before, 10, 7), Some(176));
        // 11 exited with 30 ticks and was reaped by 10: its time moved to 10's cutime.
        let after: std::collections::BTreeMap<u32, ProcStat> = [(10, p(1, 110, 80, 7)), (12, p(10, 6, 0, 9)), (13, p(12, 2, 0, 9)), (99, p(1, 2000, 0, 3))].into();
        assert_eq!(tree_cpu_ticks(&after, 10, 7), Some(198));
        assert_eq!(tree_cpu_ticks(&after, 10, 6), None, "another process under a reused pid");
        assert_eq!(tree_cpu_ticks(&after, 11, 8), None);
    }

    #[test]
    fn this_process_is_live_and_has_a_parent() {
        let me = read(std::process::id()).expect("own stat");
        assert!(me.is_live());
        assert_eq!(me.ppid, std::os::unix::process::parent_id());
    }
}
