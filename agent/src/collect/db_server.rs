//! The CPU of the database servers behind the target's PostgreSQL connections, when they run
//! on this host: what tells a service waiting on its database's CPU from one waiting on
//! something else (the bound of an attach, `attribute::ranking::Bound::of_profile`).
//!
//! - **Which process.** The wire capture knows each PostgreSQL connection's peer port
//!   ([`crate::profile::WireCaptureReport::pg_server_ports`]). The server is the process that
//!   holds the LISTEN socket of that port in the target's network namespace
//!   (`/proc/<target pid>/net/tcp{,6}`, state `0A`, its inode among `/proc/*/fd` links
//!   `socket:[INODE]`); of several holders, the one whose parent holds none (PostgreSQL's
//!   postmaster: its backends close the listening sockets after the fork). A server in
//!   another network namespace (a container on a bridge network) or on another host is not
//!   found: the profile then has no figure, and the report says so.
//! - **Its CPU.** `utime + stime + cutime + cstime` of `/proc/PID/stat` summed over the
//!   server's process tree ([`crate::sys::stat::tree_cpu_ticks`]), read for every process at
//!   the start of the run ([`Snapshot::take`], before the server is known) and at its end: the
//!   time of a backend that exited during the run has moved into its parent's `cutime` by
//!   then, so per-request connections are counted without polling. Clock ticks are 10 ms
//!   (`_SC_CLK_TCK` 100): the figure is exact to about 10 ms per process of the tree. The
//!   root's own share of it and its exited children's (`DbServer::exited_cpu_ns`) is the
//!   server's CPU of the connections set up and closed during the run.
//! - **Its capacity.** The server's cgroup `cpu.max` and `cpuset.cpus.effective`, and its
//!   affinity ([`crate::target::process_cpu_capacity`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::profile::DbServer;
use crate::sys::stat::{self, ProcStat};

/// Every process's `/proc/PID/stat` at one instant (the start of a run).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub(super) processes: BTreeMap<u32, ProcStat>,
}

impl Snapshot {
    /// Reads every process of `/proc` (about 1 ms per 100 processes).
    pub fn take() -> Snapshot {
        Snapshot { processes: stat::all() }
    }
}

/// The servers listening on `ports` in the network namespace of the first of `netns_pids`
/// whose TCP tables can be read (the target's processes: one that has exited has none), each
/// with the CPU its process tree used between `start` and now. Servers that were not running
/// at `start` (or whose pid was reused) are left out; so are ports nobody listens on here.
pub fn measure(start: &Snapshot, netns_pids: impl IntoIterator<Item = u32>, ports: &[u16]) -> Vec<DbServer> {
    let mut listeners: BTreeMap<u64, u16> = BTreeMap::new();
    for pid in netns_pids {
        let tables: Vec<String> = ["tcp", "tcp6"].iter().filter_map(|t| std::fs::read_to_string(format!("/proc/{pid}/net/{t}")).ok()).collect();
        if tables.is_empty() {
            continue;
        }
        for text in &tables {
            for (port, inode) in super::wire::listen_sockets(text) {
                if ports.contains(&port) {
                    listeners.insert(inode, port);
                }
            }
        }
        break;
    }
    if listeners.is_empty() {
        return Vec::new();
    }
    let now = stat::all();
    let owners = socket_owners(&listeners, now.keys().copied());
    let ticks_ns = 1_000_000_000 / stat::clock_ticks_per_second();
    let mut out = Vec::new();
    for port in listeners.values().copied().collect::<BTreeSet<u16>>() {
        let holders: BTreeSet<u32> = owners.iter().filter(|(_, p)| *p == port).map(|(pid, _)| *pid).collect();
        let Some(&root) = holders.iter().find(|pid| now.get(pid).is_none_or(|s| !holders.contains(&s.ppid))) else { continue };
        let Some(started) = start.processes.get(&root).map(|s| s.start_ticks) else { continue };
        let (Some(a), Some(b)) = (stat::tree_cpu_ticks(&start.processes, root, started), stat::tree_cpu_ticks(&now, root, started)) else { continue };
        let own = |p: &BTreeMap<u32, ProcStat>| p.get(&root).map_or(0, |s| s.cpu_ticks + s.children_cpu_ticks);
        out.push(DbServer {
            port,
            pid: root,
            command: std::fs::read_to_string(format!("/proc/{root}/comm")).map(|c| c.trim().to_owned()).unwrap_or_default(),
            cpu_ns: b.saturating_sub(a) * ticks_ns,
            exited_cpu_ns: own(&now).saturating_sub(own(&start.processes)) * ticks_ns,
            capacity_cpus: crate::target::process_cpu_capacity(root),
        });
    }
    out
}

/// `(pid, port)` of every process among `pids` that holds one of the sockets of `listeners`
/// (inode -> port) as an fd.
pub(super) fn socket_owners(listeners: &BTreeMap<u64, u16>, pids: impl Iterator<Item = u32>) -> Vec<(u32, u16)> {
    let mut out = Vec::new();
    for pid in pids {
        for inode in super::wire::socket_inodes(pid) {
            if let Some(&port) = listeners.get(&inode) {
                out.push((pid, port));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process of this test listens on a port: it is found as that port's server, with the
    /// CPU it and a child that exited burnt between the snapshot and the measure (the
    /// kernel's own count of the process and of its reaped children, read here through
    /// `getrusage`, is the reference).
    #[test]
    fn the_listener_of_a_port_is_found_with_its_cpu() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let start = Snapshot::take();
        let me = std::process::id();
        let usage = |who| {
            // SAFETY: rusage is plain data, filled by getrusage.
            let mut u: libc::rusage = unsafe { std::mem::zeroed() };
            unsafe { libc::getrusage(who, &mut u) };
            (u.ru_utime.tv_sec + u.ru_stime.tv_sec) as f64 + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) as f64 / 1e6
        };
        let before = usage(libc::RUSAGE_SELF);
        // 0.3 s of this thread's own CPU, however busy the machine is.
        let t = super::super::current_thread_cpu_ns();
        let mut x = 0u64;
        while super::super::current_thread_cpu_ns() - t < 300_000_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        // A child that burns CPU and exits, reaped before the measure: its time moves into
        // this process's cutime + cstime, among the CPU of processes that came and went.
        let children_before = usage(libc::RUSAGE_CHILDREN);
        let status = std::process::Command::new("sh").args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"]).status().expect("sh");
        assert!(status.success());
        let servers = measure(&start, [u32::MAX, me], &[port, 1]);
        let burnt = usage(libc::RUSAGE_SELF) - before;
        let children = usage(libc::RUSAGE_CHILDREN) - children_before;
        assert_eq!(servers.len(), 1, "{servers:?}");
        let s = &servers[0];
        assert_eq!((s.port, s.pid), (port, me));
        // Other test threads of this process also run: the tree's figure is at least what
        // this thread burnt, within the 10 ms ticks of /proc/PID/stat (two readings).
        let cpu = s.cpu_ns as f64 / 1e9;
        assert!(cpu + 0.02 >= 0.3, "{cpu} s of CPU for at least 0.3 s burnt");
        assert!((cpu - burnt - children).abs() <= 0.1, "tree {cpu} s, getrusage {burnt} s + {children} s of children");
        // The root's own CPU and its reaped children's: here the whole tree's.
        let exited = s.exited_cpu_ns as f64 / 1e9;
        assert!(children > 0.01, "the child burnt {children} s");
        assert!((exited - burnt - children).abs() <= 0.1, "exited {exited} s, getrusage {burnt} s + {children} s of children");
        assert!(s.capacity_cpus.is_some_and(|c| c >= 1.0));
        drop(listener);
    }

    #[test]
    fn no_listener_no_server() {
        assert!(measure(&Snapshot::take(), [std::process::id()], &[1]).is_empty());
    }
}
