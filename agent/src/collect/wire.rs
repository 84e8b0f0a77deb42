//! Wire capture: payload heads of the target's TCP sockets, decoded during the run.
//!
//! `wire.bpf.c` (agent-ebpf) has two programs, on the BTF tracepoints the kernel fires after
//! every send and every receive on a socket (`sock_send_length`, `sock_recv_length`); they
//! need no syscall hook. They classify the socket of each call of the target in the kernel
//! (PostgreSQL: peer port [`WireOptions::db_port`]; HTTP: local port among the target's
//! listening ports, which this module finds in `/proc/PID/net/tcp{,6}` and keeps in the
//! `http_ports` map), take the buffer from the arguments of the syscall the call is in
//! (`sendto`, `recvfrom`, `write`, `read`, `writev`, `readv`, `sendmsg`, `recvmsg`), and send
//! one chunk per call that moved bytes through the `wire_chunks` ring buffer. A thread of the agent drains the
//! ring buffer during the run and feeds [`crate::wire::WireDecoder`]; the
//! [`WireSummary`] it builds goes into the profile.
//!
//! Privacy: for HTTP sockets the kernel sends only the start line (see `wire.bpf.c`); this
//! module cuts every HTTP head after its first `\n` again and drops HTTP tails before the
//! decoder sees them, so no header field or body byte can reach a profile even if the kernel
//! side changed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use agent_ebpf::abi::wire as abi;
use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::BtfTracePoint;
use aya::{Btf, Ebpf};

use super::{load_error, load_object, map_error, program, set_target_pids, CollectError};
use super::pg_activity::ActivityLog;
use crate::profile::{StatementTextReport, WireCaptureReport};
use crate::wire::resolve::{match_texts, RoundTripTimes};
use crate::target::Filter;
use crate::wire::serving::Serving;
use crate::wire::spread::RequestSpread;
use crate::wire::{Chunk, Direction, Protocol, WireDecoder, WireOptions as DecoderOptions, WireSummary};

/// Longest time between two reads of a process's TCP tables while its socket fds stay the
/// same ([`WireCapture::refresh_ports`]).
pub const PORT_RESCAN: Duration = Duration::from_secs(10);

/// How long the drain thread waits for the ring buffer before checking the stop flag, ms.
const POLL_TIMEOUT_MS: i32 = 50;

/// Knobs of the wire capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireOptions {
    /// Peer port of PostgreSQL connections. Default is 5432.
    pub db_port: u16,
    /// Head bytes captured per call on PostgreSQL sockets, at most 256
    /// (`WIRE_HEAD_MAX`). Default is 256.
    pub head_bytes: u64,
    /// Tail bytes captured per call on PostgreSQL sockets (contiguous buffers), at most 64
    /// (`WIRE_TAIL_MAX`); 0 turns tails off. Default is 64.
    pub tail_bytes: u64,
    /// Head bytes read per call on HTTP sockets, at most 128 (`WIRE_HTTP_HEAD_MAX`); the
    /// kernel then keeps only the start line. Default is 128.
    pub http_head_bytes: u64,
}

impl Default for WireOptions {
    fn default() -> Self {
        WireOptions {
            db_port: 5432,
            head_bytes: abi::HEAD_MAX as u64,
            tail_bytes: abi::TAIL_MAX as u64,
            http_head_bytes: abi::HTTP_HEAD_MAX as u64,
        }
    }
}

/// What the drain thread hands back.
/// What the drain thread does with each ring-buffer record: [`parse_chunk`], then the
/// decoder, and a count per syscall. Public so that `examples/wire_decode_rate.rs` times the
/// same path as a run.
pub struct RecordDecoder {
    decoder: WireDecoder,
    /// Records per syscall number ([`abi::syscall::NAMES`]; 0 for an unknown one).
    by_syscall: [u64; abi::syscall::NAMES.len()],
    /// The chunk each record is parsed into, its buffers reused from record to record.
    chunk: Chunk,
    /// PostgreSQL connections: socket id -> the target's local TCP port (looked up per record).
    pg_ports: crate::wire::FastMap<u64, u16>,
    /// Peer TCP ports of the PostgreSQL connections: the servers' listening ports.
    pg_server_ports: BTreeSet<u16>,
}

impl Default for RecordDecoder {
    fn default() -> Self {
        RecordDecoder {
            decoder: WireDecoder::new(DecoderOptions::default()),
            by_syscall: [0; abi::syscall::NAMES.len()],
            chunk: Chunk::complete(0, 0, Protocol::Http, Direction::Rx, &[]),
            pg_ports: Default::default(),
            pg_server_ports: BTreeSet::new(),
        }
    }
}

/// What [`RecordDecoder::finish_all`] returns.
pub struct Decoded {
    /// The summary of every record pushed.
    pub summary: WireSummary,
    /// Records per syscall name.
    pub by_syscall: BTreeMap<String, u64>,
    /// Round-trip start times per PostgreSQL connection.
    pub times: RoundTripTimes,
    /// PostgreSQL connections: socket id -> the target's local TCP port.
    pub pg_ports: HashMap<u64, u16>,
    /// Peer TCP ports of the PostgreSQL connections, ascending.
    pub pg_server_ports: BTreeSet<u16>,
    /// Who each thread served when ([`crate::wire::serving`]).
    pub serving: Serving,
    /// The HTTP requests over time ([`crate::wire::spread`]).
    pub request_spread: RequestSpread,
}

impl RecordDecoder {
    /// Decodes one ring-buffer record (the filled part of a `struct wire_chunk`); false
    /// when [`parse_chunk`] refused it.
    pub fn push_record(&mut self, data: &[u8]) -> bool {
        let Some((syscall, ports)) = parse_chunk_into(data, &mut self.chunk) else { return false };
        let chunk = &self.chunk;
        if chunk.protocol == Protocol::Postgres && !self.pg_ports.contains_key(&chunk.socket) {
            self.pg_ports.insert(chunk.socket, ports.0);
            self.pg_server_ports.insert(ports.1);
        }
        self.decoder.push(chunk);
        self.by_syscall[usize::from(syscall)] += 1;
        true
    }

    /// The summary of every record pushed, and the records per syscall name.
    pub fn finish(self) -> (WireSummary, BTreeMap<String, u64>) {
        let mut d = self.finish_all();
        d.summary.apply_statement_texts(&HashMap::new());
        (d.summary, d.by_syscall)
    }

    /// [`RecordDecoder::finish`] with what [`crate::wire::resolve::match_texts`] needs, before
    /// the merge of statements prepared before the capture (see
    /// [`WireDecoder::finish_with_times`]).
    pub fn finish_all(mut self) -> Decoded {
        let serving = self.decoder.take_serving();
        let request_spread = self.decoder.take_request_spread();
        let (summary, _, times) = self.decoder.finish_with_times();
        Decoded {
            serving,
            request_spread,
            summary,
            by_syscall: abi::syscall::NAMES.iter().zip(self.by_syscall).filter(|(_, n)| *n > 0).map(|(k, n)| ((*k).to_owned(), n)).collect(),
            times,
            pg_ports: self.pg_ports.into_iter().collect(),
            pg_server_ports: self.pg_server_ports,
        }
    }
}

/// The loaded (and, after [`WireCapture::attach`], running) wire capture.
pub(super) struct WireCapture {
    ebpf: Ebpf,
    options: WireOptions,
    ports: BTreeSet<u16>,
    /// Per process, its socket inodes when its tables were last read, and when.
    scanned: HashMap<u32, (BTreeSet<u64>, Instant)>,
    stop: Arc<AtomicBool>,
    decoded: Arc<AtomicU64>,
    thread: Option<JoinHandle<(RecordDecoder, DrainStats)>>,
    /// Size of the `wire_chunks` ring buffer as the kernel reports it, bytes (0 if unread).
    ringbuf_bytes: u64,
}

impl WireCapture {
    /// Loads `wire` with the target filter and the knobs and verifies its programs (they
    /// need the kernel's BTF: [`CollectError::NoBtf`] without it).
    pub(super) fn load(filter: &Filter, options: WireOptions) -> Result<Self, CollectError> {
        let options = WireOptions {
            head_bytes: options.head_bytes.min(abi::HEAD_MAX as u64),
            tail_bytes: options.tail_bytes.min(abi::TAIL_MAX as u64),
            http_head_bytes: options.http_head_bytes.min(abi::HTTP_HEAD_MAX as u64),
            ..options
        };
        let db_port = u64::from(options.db_port);
        let mut ebpf = load_object(
            "wire",
            agent_ebpf::WIRE_OBJECT,
            filter,
            &[
                (abi::GLOBAL_DB_PORT, &db_port),
                (abi::GLOBAL_HEAD_BYTES, &options.head_bytes),
                (abi::GLOBAL_TAIL_BYTES, &options.tail_bytes),
                (abi::GLOBAL_HTTP_HEAD_BYTES, &options.http_head_bytes),
            ],
        )?;
        let btf = Btf::from_sys_fs().map_err(|_| CollectError::NoBtf)?;
        for (name, tracepoint) in abi::PROGRAMS {
            let prog: &mut BtfTracePoint = program(&mut ebpf, name)?;
            prog.load(tracepoint, &btf).map_err(|e| load_error(name, e))?;
        }
        Ok(WireCapture {
            ebpf,
            options,
            ports: BTreeSet::new(),
            scanned: HashMap::new(),
            stop: Arc::new(AtomicBool::new(false)),
            decoded: Arc::new(AtomicU64::new(0)),
            thread: None,
            ringbuf_bytes: 0,
        })
    }

    /// Fills `http_ports` from the listening sockets of `pids`, starts the drain thread and
    /// attaches the two programs.
    pub(super) fn attach(&mut self, pids: &BTreeSet<u32>) -> Result<(), CollectError> {
        self.refresh_ports(pids)?;
        let map = self.ebpf.take_map(abi::MAP_WIRE_CHUNKS).ok_or_else(|| map_error(abi::MAP_WIRE_CHUNKS, "missing"))?;
        if let aya::maps::Map::RingBuf(data) = &map {
            self.ringbuf_bytes = data.info().map_or(0, |info| u64::from(info.max_entries()));
        }
        let ring: RingBuf<MapData> = RingBuf::try_from(map).map_err(|e| map_error(abi::MAP_WIRE_CHUNKS, e))?;
        let stop = self.stop.clone();
        let decoded = self.decoded.clone();
        let thread = std::thread::Builder::new()
            .name("profiler-wire".to_owned())
            .spawn(move || drain(ring, stop, decoded))
            .map_err(|e| map_error(abi::MAP_WIRE_CHUNKS, format!("spawning the drain thread: {e}")))?;
        self.thread = Some(thread);
        for (name, _) in abi::PROGRAMS {
            let prog: &mut BtfTracePoint = program(&mut self.ebpf, name)?;
            prog.attach().map_err(|source| CollectError::Attach { program: name, source })?;
        }
        Ok(())
    }

    /// The loaded object (for the programs' run statistics).
    pub(super) fn ebpf(&self) -> &Ebpf {
        &self.ebpf
    }

    /// Makes the pid-set filter of this object equal to `pids` (`old` is what it holds now).
    pub(super) fn update_pids(&mut self, pids: &BTreeSet<u32>, old: &BTreeSet<u32>) -> Result<(), CollectError> {
        set_target_pids(&mut self.ebpf, pids, old)
    }

    /// Adds the listening ports of `pids` that are not in `http_ports` yet (ports are never
    /// removed during a run: connections accepted earlier stay HTTP).
    ///
    /// Reading `/proc/PID/net/tcp` walks every TCP socket of the network namespace (the
    /// kernel's whole established hash: 8-10 ms a read on this machine, 1% of a CPU at one
    /// read a second), so a process's tables are read again only when its set of socket fds
    /// changed, or [`PORT_RESCAN`] after the last read (a socket that started listening
    /// after the read that saw it appear).
    pub(super) fn refresh_ports(&mut self, pids: &BTreeSet<u32>) -> Result<(), CollectError> {
        let mut new = BTreeSet::new();
        self.scanned.retain(|pid, _| pids.contains(pid));
        for &pid in pids {
            let inodes = socket_inodes(pid);
            if let Some((seen, at)) = self.scanned.get(&pid) {
                if *seen == inodes && at.elapsed() < PORT_RESCAN {
                    continue;
                }
            }
            new.extend(listening_ports_among(pid, &inodes));
            self.scanned.insert(pid, (inodes, Instant::now()));
        }
        let missing: Vec<u16> = new.difference(&self.ports).copied().collect();
        if missing.is_empty() {
            return Ok(());
        }
        let map = self.ebpf.map_mut(abi::MAP_HTTP_PORTS).ok_or_else(|| map_error(abi::MAP_HTTP_PORTS, "missing"))?;
        let mut map: BpfHashMap<&mut MapData, u16, u8> = BpfHashMap::try_from(map).map_err(|e| map_error(abi::MAP_HTTP_PORTS, e))?;
        for port in missing {
            if self.ports.len() >= abi::MAX_HTTP_PORTS as usize {
                break;
            }
            map.insert(port, 1, 0).map_err(|e| map_error(abi::MAP_HTTP_PORTS, e))?;
            self.ports.insert(port);
        }
        Ok(())
    }

    /// CPU time of the drain thread so far, ns (0 before it starts or after it was joined).
    pub(super) fn drain_cpu_ns(&self) -> u64 {
        self.thread.as_ref().map_or(0, super::thread_cpu_ns)
    }

    /// Detaches the programs, lets the drain thread decode what is left in the ring buffer
    /// and returns the summary with the kernel's counters, who served what when, and the
    /// requests over time.
    pub(super) fn finish(mut self, activity: Option<ActivityLog>) -> Result<(WireSummary, WireCaptureReport, Serving, RequestSpread), CollectError> {
        for (name, _) in abi::PROGRAMS {
            let prog: &mut BtfTracePoint = program(&mut self.ebpf, name)?;
            prog.unload().map_err(|source| CollectError::Attach { program: name, source })?;
        }
        self.stop.store(true, Ordering::Release);
        let (drained, drain_stats) = match self.thread.take() {
            Some(t) => t.join().map_err(|_| map_error(abi::MAP_WIRE_CHUNKS, "the drain thread panicked"))?,
            None => (RecordDecoder::default(), DrainStats::default()),
        };
        let Decoded { mut summary, by_syscall: chunks_by_syscall, times, pg_ports, pg_server_ports, mut serving, request_spread } = drained.finish_all();
        let statement_texts = activity.map(|log| {
            let texts = match_texts(&times, &pg_ports, &log.observations, &log.texts);
            let names = texts.len() as u64;
            let executions = summary.apply_statement_texts(&texts);
            serving.apply_statement_texts(&texts);
            StatementTextReport {
                polls: log.polls,
                observations: log.observations.len() as u64,
                names_recovered: names,
                executions_recovered: executions,
                executions_unrecovered: summary.pg.prepared_before_attach_executions,
                error: log.error,
            }
        });
        if statement_texts.is_none() {
            // No texts: merge by name, and drop the socket ids (kernel addresses) from the shapes.
            summary.apply_statement_texts(&HashMap::new());
            serving.apply_statement_texts(&HashMap::new());
        }
        let map = self.ebpf.map(abi::MAP_WIRE_STATS).ok_or_else(|| map_error(abi::MAP_WIRE_STATS, "missing"))?;
        let stats: PerCpuArray<&MapData, u64> = PerCpuArray::try_from(map).map_err(|e| map_error(abi::MAP_WIRE_STATS, e))?;
        let sum = |i: u32| -> Result<u64, CollectError> { Ok(stats.get(&i, 0).map_err(|e| map_error(abi::MAP_WIRE_STATS, e))?.iter().sum()) };
        let report = WireCaptureReport {
            db_port: self.options.db_port,
            http_ports: self.ports.iter().copied().collect(),
            head_bytes: self.options.head_bytes,
            tail_bytes: self.options.tail_bytes,
            http_head_bytes: self.options.http_head_bytes,
            chunks: sum(abi::stat_index::CHUNKS)?,
            chunks_decoded: self.decoded.load(Ordering::Relaxed),
            ringbuf_dropped: sum(abi::stat_index::RINGBUF_FULL)?,
            ringbuf_bytes: self.ringbuf_bytes,
            drain_max_gap_us: drain_stats.max_gap_us,
            drain_peak_bytes: drain_stats.peak_bytes,
            other_calls: sum(abi::stat_index::OTHER_CALLS)?,
            eagain: sum(abi::stat_index::EAGAIN)?,
            errors: sum(abi::stat_index::ERRORS)?,
            read_failures: sum(abi::stat_index::READ_FAILURES)?,
            http_no_start_line: sum(abi::stat_index::HTTP_NO_START_LINE)?,
            pg_recognised: sum(abi::stat_index::PG_RECOGNISED)?,
            statement_texts,
            chunks_by_syscall,
            pg_server_ports: pg_server_ports.into_iter().collect(),
        };
        if report.ringbuf_dropped > 0 {
            tracing::warn!(
                lost = report.ringbuf_dropped,
                sent = report.chunks,
                longest_drain_gap_ms = report.drain_max_gap_us / 1000,
                "the wire ring buffer was full: some messages and request lines were not captured, and the per-request database figures undercount"
            );
        }
        Ok((summary, report, serving, request_spread))
    }
}

/// How the drain thread kept up: the longest time between the ends of two passes over the
/// ring buffer, µs, and the most record bytes one pass found (each record plus the ring
/// buffer's 8-byte header): how near the buffer came to full.
#[derive(Debug, Clone, Copy, Default)]
struct DrainStats {
    max_gap_us: u64,
    peak_bytes: u64,
}

/// The drain thread: decodes every chunk until `stop` is raised (after the programs were
/// detached) and the buffer is empty.
fn drain(mut ring: RingBuf<MapData>, stop: Arc<AtomicBool>, decoded: Arc<AtomicU64>) -> (RecordDecoder, DrainStats) {
    let mut records = RecordDecoder::default();
    let mut stats = DrainStats::default();
    let mut last = Instant::now();
    loop {
        // Read the flag before draining: chunks submitted before the detach are all in the
        // buffer by the time the flag is seen, so the last drain gets them.
        let stopping = stop.load(Ordering::Acquire);
        let mut bytes = 0u64;
        while let Some(item) = ring.next() {
            bytes += item.len() as u64 + RINGBUF_RECORD_HEADER_BYTES;
            if records.push_record(&item) {
                decoded.fetch_add(1, Ordering::Relaxed);
            }
        }
        let now = Instant::now();
        stats.max_gap_us = stats.max_gap_us.max(now.duration_since(last).as_micros() as u64);
        stats.peak_bytes = stats.peak_bytes.max(bytes);
        last = now;
        if stopping {
            break;
        }
        let mut pfd = libc::pollfd { fd: ring.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd; the fd lives as long as `ring`.
        unsafe { libc::poll(&mut pfd, 1, POLL_TIMEOUT_MS) };
    }
    (records, stats)
}

/// Bytes the kernel's ring buffer adds to every record (`BPF_RINGBUF_HDR_SZ`,
/// include/uapi/linux/bpf.h), rounded with the record to 8 bytes.
const RINGBUF_RECORD_HEADER_BYTES: u64 = 8;

/// One ring-buffer record as a decoder [`Chunk`], the name of its syscall and the socket's
/// (local, peer) TCP ports. A record is the filled part of a `struct wire_chunk`: the
/// [`abi::CHUNK_HEADER_SIZE`]-byte header and `head_len` head bytes, or all
/// [`abi::CHUNK_SIZE`] bytes when it has a tail (`tail_len > 0`). `None` for a record shorter
/// than its header says, with an unknown class or direction, or an HTTP record with a tail.
/// HTTP heads are cut after their first `\n`, whatever the kernel sent.
pub fn parse_chunk(data: &[u8]) -> Option<(Chunk, &'static str, (u16, u16))> {
    let mut chunk = Chunk::complete(0, 0, Protocol::Http, Direction::Rx, &[]);
    let (syscall, ports) = parse_chunk_into(data, &mut chunk)?;
    Some((chunk, abi::syscall::NAMES[usize::from(syscall)], ports))
}

/// [`parse_chunk`] into `chunk`, whose head and tail buffers are reused (the drain thread's
/// path: no allocation per record); returns the syscall's number ([`abi::syscall::NAMES`], 0
/// for an unknown one) instead of its name. On `None`, `chunk` is unspecified.
pub fn parse_chunk_into(data: &[u8], chunk: &mut Chunk) -> Option<(u8, (u16, u16))> {
    const HEAD: usize = abi::CHUNK_HEADER_SIZE;
    const TAIL: usize = std::mem::offset_of!(abi::WireChunk, tail);
    if data.len() < HEAD {
        return None;
    }
    // SAFETY: at least CHUNK_HEADER_SIZE bytes; WireChunkHeader is plain integers (every bit
    // pattern valid); read_unaligned has no alignment requirement.
    let c: abi::WireChunkHeader = unsafe { std::ptr::read_unaligned(data.as_ptr().cast()) };
    let (protocol, head_max) = match c.class {
        abi::class::POSTGRES => (Protocol::Postgres, abi::HEAD_MAX),
        abi::class::HTTP if c.tail_len == 0 => (Protocol::Http, abi::HTTP_HEAD_MAX),
        _ => return None,
    };
    let direction = match c.direction {
        abi::direction::TX => Direction::Tx,
        abi::direction::RX => Direction::Rx,
        _ => return None,
    };
    let total = u64::from(c.total_len);
    let total_usize = usize::try_from(total).unwrap_or(usize::MAX);
    let head_len = usize::from(c.head_len);
    let tail_len = usize::from(c.tail_len);
    if head_len > head_max || tail_len > abi::TAIL_MAX {
        return None;
    }
    let needed = if tail_len > 0 { abi::CHUNK_SIZE } else { HEAD + head_len };
    if data.len() < needed {
        return None;
    }
    let head = &data[HEAD..HEAD + head_len.min(total_usize)];
    chunk.head.clear();
    chunk.tail.clear();
    match protocol {
        Protocol::Http => chunk.head.extend_from_slice(http_start_line(head)),
        Protocol::Postgres => {
            chunk.head.extend_from_slice(head);
            if tail_len > 0 {
                chunk.tail.extend_from_slice(&data[TAIL..TAIL + tail_len.min(total_usize)]);
            }
        }
    }
    chunk.ts_ns = c.ts_ns;
    chunk.pid = c.pid;
    chunk.tid = c.tid;
    chunk.socket = c.socket;
    chunk.protocol = protocol;
    chunk.direction = direction;
    chunk.total_len = total;
    let syscall = if usize::from(c.syscall) < abi::syscall::NAMES.len() { c.syscall } else { 0 };
    Some((syscall, (c.local_port, c.peer_port)))
}

/// The bytes of an HTTP head up to and including its first `\n` (all of it when it has none:
/// a start line cut by the capture bound).
pub fn http_start_line(head: &[u8]) -> &[u8] {
    match head.iter().position(|&b| b == b'\n') {
        Some(i) => &head[..=i],
        None => head,
    }
}

/// Local ports of the LISTEN TCP sockets (IPv4 and IPv6) that process `pid` holds: sockets
/// of `/proc/PID/net/tcp` and `tcp6` in state `0A` (TCP_LISTEN, include/net/tcp_states.h)
/// whose inode is one of the process's fds (`/proc/PID/fd/N` -> `socket:[INODE]`). Empty
/// when the process is gone or unreadable.
pub fn listening_ports(pid: u32) -> BTreeSet<u16> {
    listening_ports_among(pid, &socket_inodes(pid))
}

/// The socket inodes of process `pid`'s fds (`/proc/PID/fd/N` -> `socket:[INODE]`); empty
/// when the process is gone or unreadable.
pub fn socket_inodes(pid: u32) -> BTreeSet<u64> {
    let mut inodes = BTreeSet::new();
    if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for entry in dir.flatten() {
            if let Ok(link) = std::fs::read_link(entry.path()) {
                let link = link.to_string_lossy();
                if let Some(inode) = link.strip_prefix("socket:[").and_then(|s| s.strip_suffix(']')) {
                    if let Ok(inode) = inode.parse::<u64>() {
                        inodes.insert(inode);
                    }
                }
            }
        }
    }
    inodes
}

/// The local ports of the LISTEN sockets of `/proc/PID/net/tcp{,6}` whose inode is in `inodes`.
pub fn listening_ports_among(pid: u32, inodes: &BTreeSet<u64>) -> BTreeSet<u16> {
    let mut ports = BTreeSet::new();
    for table in ["tcp", "tcp6"] {
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) {
            ports.extend(parse_listening(&text, inodes));
        }
    }
    ports
}

/// The LISTEN ports of a `/proc/net/tcp`-format table whose socket inode is in `inodes`.
pub fn parse_listening(text: &str, inodes: &BTreeSet<u64>) -> BTreeSet<u16> {
    listen_sockets(text).into_iter().filter(|(_, inode)| inodes.contains(inode)).map(|(port, _)| port).collect()
}

/// `(local port, socket inode)` of every LISTEN socket (state `0A`) of a `/proc/net/tcp`-format
/// table ([`tcp_sockets`]).
pub fn listen_sockets(text: &str) -> Vec<(u16, u64)> {
    tcp_sockets(text).filter(|s| s.state == "0A").map(|s| (s.local_port, s.inode)).collect()
}

/// One line of a `/proc/net/tcp`-format table ([`tcp_sockets`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSocket<'a> {
    /// Local port.
    pub local_port: u16,
    /// Remote port (0 for a listening socket).
    pub remote_port: u16,
    /// State, two hex digits (include/net/tcp_states.h): `01` ESTABLISHED, `0A` LISTEN, ...
    pub state: &'a str,
    /// Socket inode (0 for a socket without one, e.g. in TIME_WAIT).
    pub inode: u64,
}

/// The sockets of a `/proc/net/tcp`-format table; lines that do not parse are skipped. Format
/// (Documentation/networking/proc_net_tcp.rst): `sl local_address rem_address st
/// tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode`, addresses as `HEXADDR:HEXPORT`.
pub fn tcp_sockets(text: &str) -> impl Iterator<Item = TcpSocket<'_>> {
    let port = |a: &str| a.rsplit_once(':').and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
    text.lines().skip(1).filter_map(move |line| {
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        if f.len() < 10 {
            return None;
        }
        Some(TcpSocket { local_port: port(f[1])?, remote_port: port(f[2])?, state: f[3], inode: f[9].parse().ok()? })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_ports_come_from_listen_lines_of_own_inodes() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0\n\
   1: 0100007F:1538 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 222 1 0 100 0 0 10 0\n\
   2: 0100007F:1F90 0100007F:D2A4 01 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0\n\
   garbage line\n";
        let inodes: BTreeSet<u64> = [111u64].into_iter().collect();
        assert_eq!(parse_listening(text, &inodes), [0x1F90u16].into_iter().collect());
        assert!(parse_listening(text, &BTreeSet::new()).is_empty());
    }

    #[test]
    fn wire_syscalls_have_their_x86_64_numbers() {
        // syscall_name reads the table copied from arch/x86/entry/syscalls/syscall_64.tbl.
        for (value, nr) in abi::SYSCALL_NUMBERS {
            assert_eq!(abi::syscall::NAMES[usize::from(value)], crate::collect::syscall_name(nr), "syscall {value} as number {nr}");
        }
        let values: BTreeSet<u8> = abi::SYSCALL_NUMBERS.iter().map(|&(v, _)| v).collect();
        assert_eq!(values, (1..=8).collect(), "every wire syscall exactly once");
    }

    #[test]
    fn http_heads_are_cut_after_the_first_line() {
        assert_eq!(http_start_line(b"GET /db HTTP/1.1\r\nAuthorization: Bearer x\r\n"), b"GET /db HTTP/1.1\r\n");
        assert_eq!(http_start_line(b"GET /very-long"), b"GET /very-long");
        assert_eq!(http_start_line(b""), b"");
    }

    /// The header of a test record.
    fn header(class: u8, direction: u8, syscall: u8, total: u64, head: &[u8], tail: &[u8]) -> abi::WireChunkHeader {
        abi::WireChunkHeader {
            ts_ns: 7,
            pid: 1,
            tid: 2,
            socket: 3,
            total_len: total as u32,
            local_port: 40000,
            peer_port: 5433,
            head_len: head.len() as u16,
            tail_len: tail.len() as u16,
            direction,
            class,
            syscall,
            _pad: 0,
        }
    }

    /// A record as the kernel sends it: the filled part of a `struct wire_chunk` (the header
    /// and the head, or all CHUNK_SIZE bytes when there is a tail).
    fn sent(class: u8, direction: u8, syscall: u8, total: u64, head: &[u8], tail: &[u8]) -> Vec<u8> {
        let mut c = abi::WireChunk {
            header: header(class, direction, syscall, total, head, tail),
            head: [0; abi::HEAD_MAX],
            tail: [0; abi::TAIL_MAX],
        };
        c.head[..head.len()].copy_from_slice(head);
        c.tail[..tail.len()].copy_from_slice(tail);
        // SAFETY: WireChunk is plain data without padding (asserted in abi).
        let whole = unsafe { std::slice::from_raw_parts((&c as *const abi::WireChunk).cast::<u8>(), abi::CHUNK_SIZE) };
        let len = if tail.is_empty() { abi::CHUNK_HEADER_SIZE + head.len() } else { abi::CHUNK_SIZE };
        whole[..len].to_vec()
    }

    fn record(class: u8, direction: u8, total: u64, head: &[u8], tail: &[u8]) -> Vec<u8> {
        sent(class, direction, abi::syscall::RECVFROM, total, head, tail)
    }

    #[test]
    fn records_become_chunks_and_http_never_carries_more_than_the_start_line() {
        let r = record(abi::class::HTTP, abi::direction::RX, 300, b"GET /db HTTP/1.1\r\nAuthorization: Bearer secret", b"");
        let (c, syscall, ports) = parse_chunk(&r).unwrap();
        assert_eq!(ports, (40000, 5433));
        assert_eq!(syscall, "recvfrom");
        assert_eq!(c.protocol, Protocol::Http);
        assert_eq!(c.direction, Direction::Rx);
        assert_eq!(c.head, b"GET /db HTTP/1.1\r\n");
        assert!(c.tail.is_empty());
        assert_eq!(c.total_len, 300);
        // An HTTP record never has a tail: one that says so is refused.
        assert!(parse_chunk(&record(abi::class::HTTP, abi::direction::RX, 300, b"GET / HTTP/1.1\r\n", b"body")).is_none());

        let r = record(abi::class::POSTGRES, abi::direction::TX, 400, b"S\0\0\0\x04", b"Z\0\0\0\x05I");
        assert_eq!(r.len(), abi::CHUNK_SIZE);
        let (c, _, _) = parse_chunk(&r).unwrap();
        assert_eq!((c.protocol, c.direction), (Protocol::Postgres, Direction::Tx));
        assert_eq!(c.head, b"S\0\0\0\x04");
        assert_eq!(c.tail, b"Z\0\0\0\x05I");
        // Without a tail, a PostgreSQL record is the header and its head.
        let r = record(abi::class::POSTGRES, abi::direction::RX, 5, b"Z\0\0\0\x05", b"");
        assert_eq!(r.len(), abi::CHUNK_HEADER_SIZE + 5);
        let (c, _, _) = parse_chunk(&r).unwrap();
        assert_eq!(c.head, b"Z\0\0\0\x05");
        assert!(c.tail.is_empty());
    }

    #[test]
    fn short_http_records_parse_with_their_start_line() {
        let r = sent(abi::class::HTTP, abi::direction::RX, abi::syscall::READ, 97, b"GET /json HTTP/1.1\r\n", b"");
        assert_eq!(r.len(), abi::CHUNK_HEADER_SIZE + 20);
        let (c, syscall, ports) = parse_chunk(&r).unwrap();
        assert_eq!(ports, (40000, 5433));
        assert_eq!(syscall, "read");
        assert_eq!((c.protocol, c.direction, c.total_len), (Protocol::Http, Direction::Rx, 97));
        assert_eq!((c.ts_ns, c.pid, c.tid, c.socket), (7, 1, 2, 3));
        assert_eq!(c.head, b"GET /json HTTP/1.1\r\n");
        assert!(c.tail.is_empty());
        // A head of HTTP_HEAD_MAX bytes parses; a head_len past it is refused.
        let line = [b'a'; abi::HTTP_HEAD_MAX];
        let r = sent(abi::class::HTTP, abi::direction::TX, abi::syscall::WRITE, 1000, &line, b"");
        assert_eq!(parse_chunk(&r).unwrap().0.head, line);
        let mut r = sent(abi::class::HTTP, abi::direction::TX, abi::syscall::WRITE, 1000, &[b'a'; abi::HTTP_HEAD_MAX + 1], b"");
        assert!(parse_chunk(&r).is_none());
        r[32..34].copy_from_slice(&u16::MAX.to_ne_bytes());
        assert!(parse_chunk(&r).is_none());
        // Trailing bytes after the record are ignored.
        let mut r = sent(abi::class::HTTP, abi::direction::TX, abi::syscall::WRITE, 20, b"HTTP/1.1 200 OK\r\n", b"");
        r.extend_from_slice(b"Set-Cookie: secret\r\n");
        assert_eq!(parse_chunk(&r).unwrap().0.head, b"HTTP/1.1 200 OK\r\n");
    }

    #[test]
    fn records_shorter_than_their_header_says_are_refused() {
        // A record with a tail needs all of CHUNK_SIZE.
        let pg = record(abi::class::POSTGRES, abi::direction::RX, 400, b"D\0\0\0\x05", b"Z\0\0\0\x05I");
        assert!(parse_chunk(&pg).is_some());
        assert!(parse_chunk(&pg[..abi::CHUNK_SIZE - 1]).is_none());
        // Without a tail, the header and head_len bytes.
        let pg = record(abi::class::POSTGRES, abi::direction::RX, 5, b"Z\0\0\0\x05", b"");
        assert!(parse_chunk(&pg[..pg.len() - 1]).is_none());
        let http = record(abi::class::HTTP, abi::direction::RX, 97, b"GET / HTTP/1.1\r\n", b"");
        assert!(parse_chunk(&http[..http.len() - 1]).is_none());
        // Shorter than the header.
        assert!(parse_chunk(&http[..39]).is_none());
        assert!(parse_chunk(&pg[..39]).is_none());
    }

    #[test]
    fn bad_records_are_refused_without_panicking() {
        assert!(parse_chunk(&[]).is_none());
        assert!(parse_chunk(&[0u8; abi::CHUNK_HEADER_SIZE - 1]).is_none());
        assert!(parse_chunk(&record(9, abi::direction::TX, 1, b"x", b"")).is_none());
        assert!(parse_chunk(&record(abi::class::HTTP, 7, 1, b"x", b"")).is_none());
        // Lengths beyond the arrays are refused; lengths beyond the total are clamped to it.
        let mut r = record(abi::class::POSTGRES, abi::direction::RX, 2, b"ab", b"z");
        r[34] = 0xff;
        assert!(parse_chunk(&r).is_none());
        let r = record(abi::class::POSTGRES, abi::direction::RX, 2, b"abcd", b"xyz");
        let (c, _, _) = parse_chunk(&r).unwrap();
        assert_eq!(c.head, b"ab");
        assert_eq!(c.tail, b"xy");
    }
}
