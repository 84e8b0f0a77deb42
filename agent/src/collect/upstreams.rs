//! The CPU of the services on this host that the target calls (an upstream HTTP or gRPC
//! service, a cache): like its database's and its clients', CPU that grows with the target's
//! requests. Left among the host's other processes, it was taken as not growing, and a gain
//! under the host's CPUs as the bound (`attribute::ranking::Bound::of_profile`) read high:
//! the upstream takes its share of the CPU a faster target would need.
//!
//! - **Which processes.** At the end of the run, the target's ESTABLISHED sockets (its fds'
//!   inodes in `/proc/<target pid>/net/tcp{,6}`, state `01`) whose remote port has a LISTEN
//!   socket in the same network namespace: connections the target opened to a local server.
//!   Ports the target listens on itself and the database ports the wire decoded
//!   ([`crate::profile::WireCaptureReport::pg_server_ports`], counted in `Meta::db_servers`)
//!   are left out. The server is the process tree that holds the listening socket, found and
//!   measured as a database server is ([`super::db_server::measure`]). An upstream the target
//!   reaches with a connection per request, closed by the end of the run, is not found; nor
//!   one on another host or in another network namespace.
//! - **Its CPU.** As for the database servers: the process tree's `utime + stime + cutime +
//!   cstime` between the start of the run and its end, in 10 ms clock ticks.

use std::collections::BTreeSet;

use super::db_server::{self, Snapshot};
use crate::profile::UpstreamServer;

/// The remote ports of a `/proc/net/tcp`-format table's ESTABLISHED sockets (state `01`)
/// among `own` (the target's socket inodes) whose port some LISTEN socket (state `0A`) of the
/// same table has, other than the ports in `exclude`: the local servers the target is
/// connected to.
pub fn upstream_ports(text: &str, own: &BTreeSet<u64>, exclude: &BTreeSet<u16>) -> BTreeSet<u16> {
    let listening: BTreeSet<u16> = super::wire::listen_sockets(text).into_iter().map(|(port, _)| port).collect();
    super::wire::tcp_sockets(text)
        .filter(|s| s.state == "01" && own.contains(&s.inode) && listening.contains(&s.remote_port) && !exclude.contains(&s.remote_port))
        .map(|s| s.remote_port)
        .collect()
}

/// The local servers the processes `target_pids` are connected to at the end of a run (not
/// on `exclude`: the database ports), in the network namespace of the first of them whose TCP
/// tables can be read, each with the CPU its process tree used between `start`
/// and now, most CPU first. Servers among the target's own processes are left out, and so are
/// servers that were not running at `start`.
pub fn measure(start: &Snapshot, target_pids: &[u32], exclude: &[u16]) -> Vec<UpstreamServer> {
    let targets: BTreeSet<u32> = target_pids.iter().copied().collect();
    let mut exclude: BTreeSet<u16> = exclude.iter().copied().collect();
    // The tables of the network namespace of the first target process that has them, read
    // once; the sockets of every target process.
    let Some((netns_pid, tables)) = targets.iter().find_map(|&pid| {
        let tables: Vec<String> = ["tcp", "tcp6"].iter().filter_map(|t| std::fs::read_to_string(format!("/proc/{pid}/net/{t}")).ok()).collect();
        (!tables.is_empty()).then_some((pid, tables))
    }) else {
        return Vec::new();
    };
    let own: BTreeSet<u64> = targets.iter().flat_map(|&pid| super::wire::socket_inodes(pid)).collect();
    let mut ports = BTreeSet::new();
    for text in &tables {
        // The target's own listening ports: its clients' connections, not its upstreams.
        exclude.extend(super::wire::parse_listening(text, &own));
        ports.extend(upstream_ports(text, &own, &BTreeSet::new()));
    }
    let ports: Vec<u16> = ports.difference(&exclude).copied().collect();
    if ports.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<UpstreamServer> = db_server::measure(start, [netns_pid], &ports)
        .into_iter()
        .filter(|s| !targets.contains(&s.pid))
        .map(|s| UpstreamServer { port: s.port, pid: s.pid, command: s.command, cpu_ns: s.cpu_ns })
        .collect();
    out.sort_by(|a, b| b.cpu_ns.cmp(&a.cpu_ns).then(a.port.cmp(&b.port)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_ports_are_established_connections_to_local_listeners() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0\n\
   1: 0100007F:D2A4 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0 100 0 0 10 0\n\
   2: 0100007F:1F90 0100007F:D2A4 01 00000000:00000000 00:00000000 00000000     0        0 333 1 0 100 0 0 10 0\n\
   3: 0100007F:D2A6 0A00000B:01BB 01 00000000:00000000 00:00000000 00000000     0        0 444 1 0 100 0 0 10 0\n\
   4: 0100007F:1538 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 555 1 0 100 0 0 10 0\n\
   5: 0100007F:D2A8 0100007F:1538 01 00000000:00000000 00:00000000 00000000     0        0 666 1 0 100 0 0 10 0\n\
   garbage line\n";
        let own: BTreeSet<u64> = [222, 444, 666].into_iter().collect();
        // 222 connects to 8080, which a local socket listens on; 444 to port 443 that nothing
        // here listens on (another host); 666 to 5432, left out as the database's.
        let exclude: BTreeSet<u16> = [0x1538].into_iter().collect();
        assert_eq!(upstream_ports(text, &own, &exclude), [0x1F90].into_iter().collect());
        // The server's end of the same connection (333) is not the target's.
        assert!(upstream_ports(text, &[333].into_iter().collect(), &BTreeSet::new()).is_empty());
    }

    /// A child process holds a listening socket and burns CPU; this process, the target, holds
    /// a connection to it: the child is found as an upstream with the CPU the scheduler's own
    /// count gives it (`/proc/PID/schedstat`, ns on a CPU: not the clock ticks of
    /// `/proc/PID/stat` that the code reads).
    #[test]
    fn a_local_server_the_target_calls_is_an_upstream_with_its_cpu() {
        use std::os::fd::AsRawFd;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // The child inherits the listening socket (no close-on-exec), then this process closes
        // its own copy: the child is the port's only holder. It burns CPU in the shell, then
        // becomes `sleep` (same pid), still holding it.
        // SAFETY: fcntl on an fd this process owns.
        unsafe {
            let fd = listener.as_raw_fd();
            libc::fcntl(fd, libc::F_SETFD, libc::fcntl(fd, libc::F_GETFD) & !libc::FD_CLOEXEC);
        }
        let mut child = std::process::Command::new("sh").args(["-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; exec sleep 20"]).spawn().expect("sh");
        drop(listener);
        let pid = child.id();
        let on_cpu_s = || std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok().and_then(|t| t.split_whitespace().next()?.parse::<f64>().ok()).map(|ns| ns / 1e9);
        // The run starts with the child running (servers that start later are left out).
        let (start, at_start) = (Snapshot::take(), on_cpu_s().expect("schedstat"));
        let conn = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect: the child's backlog accepts it");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::fs::read_to_string(format!("/proc/{pid}/comm")).map_or(true, |c| c.trim() != "sleep") {
            assert!(std::time::Instant::now() < deadline, "the child did not finish its loop");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let found = measure(&start, &[std::process::id()], &[]);
        let burnt = on_cpu_s().expect("schedstat") - at_start;
        let excluded = measure(&start, &[std::process::id()], &[port]);
        drop(conn);
        // Killed, not reaped: reaping would add its CPU to this process's children's, which
        // other tests of this binary measure meanwhile. The zombie goes with the process.
        let _ = child.kill();
        std::mem::forget(child);
        let up = found.iter().find(|u| u.port == port).unwrap_or_else(|| panic!("port {port} not among {found:?}"));
        assert_eq!(up.pid, pid);
        // Within the 10 ms ticks of /proc/PID/stat, read twice.
        let cpu = up.cpu_ns as f64 / 1e9;
        println!("upstream {}: {cpu:.3} s found, {burnt:.3} s by the scheduler", up.command);
        assert!(burnt > 0.05, "the child burnt {burnt} s");
        assert!((cpu - burnt).abs() <= 0.03, "{cpu} s found, the scheduler counted {burnt} s");
        assert!(excluded.iter().all(|u| u.port != port), "an excluded port is left out: {excluded:?}");
    }
}
