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
/// on `exclude`: the database ports), each with the CPU its process tree used between `start`
/// and now, most CPU first. Servers among the target's own processes are left out, and so are
/// servers that were not running at `start`.
pub fn measure(start: &Snapshot, target_pids: &[u32], exclude: &[u16]) -> Vec<UpstreamServer> {
    let targets: BTreeSet<u32> = target_pids.iter().copied().collect();
    let mut exclude: BTreeSet<u16> = exclude.iter().copied().collect();
    let mut ports = BTreeSet::new();
    let mut netns_pid = None;
    for &pid in &targets {
        let own = super::wire::socket_inodes(pid);
        for table in ["tcp", "tcp6"] {
            let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else { continue };
            netns_pid.get_or_insert(pid);
            // The target's own listening ports: its clients' connections, not its upstreams.
            exclude.extend(super::wire::parse_listening(&text, &own));
            ports.extend(upstream_ports(&text, &own, &BTreeSet::new()));
        }
    }
    let ports: Vec<u16> = ports.difference(&exclude).copied().collect();
    let Some(netns_pid) = netns_pid.filter(|_| !ports.is_empty()) else {
        return Vec::new();
    };
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

    /// A child process listens and burns CPU; this process, the target, holds a connection
    /// to it: the child is found as an upstream with at least the CPU the kernel's count of
    /// this process's reaped children (`getrusage(RUSAGE_CHILDREN)`) gives it.
    #[test]
    fn a_local_server_the_target_calls_is_an_upstream_with_its_cpu() {
        use std::io::{BufRead, BufReader};
        // The child (a shell running a tiny listener would need a tool the machine may lack)
        // is this test binary itself, run as the listener below; libtest prints the test's
        // name before its output on the same line.
        let exe = std::env::current_exe().expect("test binary");
        let mut child = std::process::Command::new(exe)
            .args(["--exact", "collect::upstreams::tests::listener_child", "--ignored", "--nocapture", "--test-threads=1"])
            .env("PROFILER_TEST_UPSTREAM_CHILD", "1")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn the listener");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let port: u16 = lines.by_ref().map_while(Result::ok).find_map(|l| l.rsplit_once("port ").and_then(|(_, p)| p.trim().parse().ok())).expect("the child's port");
        // The run starts with the child running (servers that start later are left out).
        let start = Snapshot::take();
        let conn = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        // The child burns 0.3 s of CPU once connected, then says so.
        assert!(lines.by_ref().map_while(Result::ok).any(|l| l.contains("burnt")), "the child did not burn");
        let found = measure(&start, &[std::process::id()], &[]);
        drop(conn);
        let _ = child.wait();
        let up = found.iter().find(|u| u.port == port).unwrap_or_else(|| panic!("port {port} not among {found:?}"));
        assert_eq!(up.pid, child.id());
        assert!(up.cpu_ns as f64 / 1e9 + 0.02 >= 0.3, "{up:?}");
        assert!(measure(&start, &[std::process::id()], &[port]).iter().all(|u| u.port != port), "an excluded port is left out");
    }

    /// The listener of [`a_local_server_the_target_calls_is_an_upstream_with_its_cpu`], run
    /// only as its child (ignored otherwise): prints its port, accepts one connection, burns
    /// 0.3 s of CPU, prints `burnt` and waits for the connection to close; it exits after 20 s
    /// whatever happens, so that a failed parent leaves nothing behind.
    #[test]
    #[ignore = "the child process of a_local_server_the_target_calls_is_an_upstream_with_its_cpu"]
    fn listener_child() {
        use std::io::{Read, Write};
        if std::env::var_os("PROFILER_TEST_UPSTREAM_CHILD").is_none() {
            return;
        }
        std::thread::spawn(|| {
            std::thread::sleep(std::time::Duration::from_secs(20));
            std::process::exit(1);
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        println!("port {}", listener.local_addr().unwrap().port());
        std::io::stdout().flush().unwrap();
        let (mut conn, _) = listener.accept().unwrap();
        let t = super::super::current_thread_cpu_ns();
        let mut x = 0u64;
        while super::super::current_thread_cpu_ns() - t < 300_000_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        println!("burnt");
        std::io::stdout().flush().unwrap();
        let _ = conn.read(&mut [0u8; 1]);
    }
}
