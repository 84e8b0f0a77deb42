//! `/proc/PID/stat`: the fields the agent and the bench read (format: proc(5)).

/// The fields of one `/proc/PID/stat` used here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Field 3: `R`, `S`, `D`, `Z` (zombie), `X` (dead), ...
    pub state: char,
    /// Field 4: the parent's pid.
    pub ppid: u32,
    /// Fields 14 + 15, `utime + stime`: CPU time of every thread of the process, in clock
    /// ticks ([`clock_ticks_per_second`]).
    pub cpu_ticks: u64,
}

impl ProcStat {
    /// True unless the process is a zombie or dead: an exited child that its parent has not
    /// reaped yet is gone for profiling.
    pub fn is_live(&self) -> bool {
        !matches!(self.state, 'Z' | 'X')
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
    let utime: u64 = fields.get(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.get(15 - 3)?.parse().ok()?;
    Some(ProcStat { state, ppid, cpu_ticks: utime + stime })
}

/// `/proc/PID/stat` of `pid`, parsed; `None` when the process is gone (or the file is not one).
pub fn read(pid: u32) -> Option<ProcStat> {
    parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
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

    #[test]
    fn a_command_name_with_spaces_and_parentheses() {
        let line = "4242 (tokio (worker) 1) S 1 4242 4242 0 -1 4194560 163 0 0 0 17 5 0 0 20 0 3 0 123 4096 100 0\n";
        assert_eq!(parse(line), Some(ProcStat { state: 'S', ppid: 1, cpu_ticks: 22 }));
        assert_eq!(parse("1 (x) Z 0 1 1"), None, "too few fields");
        assert_eq!(parse("no stat here"), None);
    }

    #[test]
    fn this_process_is_live_and_has_a_parent() {
        let me = read(std::process::id()).expect("own stat");
        assert!(me.is_live());
        assert_eq!(me.ppid, std::os::unix::process::parent_id());
    }
}
