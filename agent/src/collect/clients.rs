//! The CPU of the HTTP clients on this host that drive the target (a load generator such as
//! wrk, a test harness): with the target's and its database's, the CPU that grows with the
//! target's requests. The rest of the host's busy time (a compile, another service) does not,
//! and the bound of an attach (`attribute::ranking::Bound::of_profile`) leaves it out.
//!
//! - **Which processes.** A client's socket is an ESTABLISHED socket whose remote port is one
//!   of the target's listening ports ([`crate::profile::WireCaptureReport::http_ports`]), in
//!   the target's network namespace (`/proc/<target pid>/net/tcp{,6}`, state `01`), held as an
//!   fd by a process that is not the target's. A client on another host or in another network
//!   namespace is not found, nor one that closed its connections before the end of the run.
//! - **Its CPU.** As for the database servers ([`super::db_server`]): the process tree's
//!   `utime + stime + cutime + cstime` between the start of the run (the snapshot of every
//!   process) and its end, in 10 ms clock ticks.

use std::collections::{BTreeMap, BTreeSet};

use super::db_server::{socket_owners, Snapshot};
use crate::profile::HttpClient;
use crate::sys::stat;

/// `(remote port, socket inode)` of every ESTABLISHED socket (state `01`,
/// include/net/tcp_states.h) of a `/proc/net/tcp`-format table
/// ([`super::wire::tcp_sockets`]) whose remote port is one of `server_ports`: the client ends
/// of connections to those ports.
pub fn client_sockets(text: &str, server_ports: &BTreeSet<u16>) -> Vec<(u16, u64)> {
    super::wire::tcp_sockets(text)
        .filter(|s| s.state == "01" && s.inode != 0 && server_ports.contains(&s.remote_port))
        .map(|s| (s.remote_port, s.inode))
        .collect()
}

/// The processes on this host (outside `target_pids`) connected to one of `server_ports` in
/// the network namespace of the first of `target_pids` whose TCP tables can be read, each with
/// the CPU its process tree used between `start` and now, most CPU first. Processes that were
/// not running at `start` (or whose pid was reused) are left out.
pub fn measure(start: &Snapshot, target_pids: &[u32], server_ports: &[u16]) -> Vec<HttpClient> {
    let ports: BTreeSet<u16> = server_ports.iter().copied().collect();
    if ports.is_empty() {
        return Vec::new();
    }
    let mut sockets: BTreeMap<u64, u16> = BTreeMap::new();
    for &pid in target_pids {
        let tables: Vec<String> = ["tcp", "tcp6"].iter().filter_map(|t| std::fs::read_to_string(format!("/proc/{pid}/net/{t}")).ok()).collect();
        if tables.is_empty() {
            continue;
        }
        for text in &tables {
            sockets.extend(client_sockets(text, &ports).into_iter().map(|(port, inode)| (inode, port)));
        }
        break;
    }
    if sockets.is_empty() {
        return Vec::new();
    }
    let now = stat::all();
    let targets: BTreeSet<u32> = target_pids.iter().copied().collect();
    let owners: BTreeSet<u32> = socket_owners(&sockets, now.keys().copied().filter(|p| !targets.contains(p))).into_iter().map(|(pid, _)| pid).collect();
    let ticks_ns = 1_000_000_000 / stat::clock_ticks_per_second();
    let mut out: Vec<HttpClient> = owners
        .iter()
        .copied()
        // A client whose parent is a client too is counted in its parent's tree.
        .filter(|pid| now.get(pid).is_none_or(|s| !owners.contains(&s.ppid)))
        .filter_map(|pid| {
            let started = start.processes.get(&pid)?.start_ticks;
            let a = stat::tree_cpu_ticks(&start.processes, pid, started)?;
            let b = stat::tree_cpu_ticks(&now, pid, started)?;
            Some(HttpClient {
                pid,
                command: std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|c| c.trim().to_owned()).unwrap_or_default(),
                cpu_ns: b.saturating_sub(a) * ticks_ns,
            })
        })
        .collect();
    out.sort_by(|a, b| b.cpu_ns.cmp(&a.cpu_ns).then(a.pid.cmp(&b.pid)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ends_are_established_sockets_to_the_server_ports() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0\n\
   1: 0100007F:1F90 0100007F:D2A4 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0 100 0 0 10 0\n\
   2: 0100007F:D2A4 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 333 1 0 100 0 0 10 0\n\
   3: 0100007F:D2A6 0100007F:1F90 06 00000000:00000000 00:00000000 00000000     0        0 0 1 0 100 0 0 10 0\n\
   4: 0100007F:D2A8 0100007F:1538 01 00000000:00000000 00:00000000 00000000     0        0 444 1 0 100 0 0 10 0\n\
   garbage line\n";
        let ports: BTreeSet<u16> = [0x1F90u16].into_iter().collect();
        // The server's listening socket (0A), its end of the connection (local port 8080) and
        // a TIME_WAIT socket (06) are not client ends; a connection to another port is not.
        assert_eq!(client_sockets(text, &ports), vec![(0x1F90, 333)]);
        assert!(client_sockets(text, &BTreeSet::new()).is_empty());
    }

    /// A thread of this test connects to a listener as a client would: this process is found
    /// as the client of that port (the listener's process counted as the target), with the CPU
    /// it burnt between the snapshot and the measure.
    #[test]
    fn a_connected_process_is_a_client_with_its_cpu() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (_server_end, _) = listener.accept().unwrap();
        let start = Snapshot::take();
        let t = super::super::current_thread_cpu_ns();
        let mut x = 0u64;
        while super::super::current_thread_cpu_ns() - t < 200_000_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        // The target's pids only name the network namespace here: the client is this process,
        // so it must not be among them (pid 1 shares this namespace).
        let clients = measure(&start, &[1], &[port]);
        let me = std::process::id();
        let c = clients.iter().find(|c| c.pid == me).unwrap_or_else(|| panic!("{me} not among {clients:?}"));
        assert!(c.cpu_ns as f64 / 1e9 + 0.02 >= 0.2, "{c:?}");
        assert!(measure(&start, &[1], &[1]).is_empty());
        drop(client);
    }
}
