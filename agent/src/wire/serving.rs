//! Which HTTP request each thread of the target is serving, from the order of its socket
//! calls: what joins on-CPU samples (thread, time) to the endpoints of the wire capture.
//!
//! The evidence is the thread and the time of every captured send and receive
//! ([`super::Chunk::tid`], [`super::Chunk::ts_ns`], the clock of the samplers'
//! `bpf_ktime_get_ns`):
//!
//! - a receive on an HTTP socket that holds a request line makes that request the socket's
//!   current one, and any call on an HTTP socket makes the thread serve the socket's current
//!   request;
//! - a send on a PostgreSQL socket by a thread serving a request makes that request the
//!   connection's holder, and a receive on it makes the thread serve the holder again (an
//!   async handler resumed by its query's answer, on whatever worker polls it).
//!
//! A thread serves its last request until its next socket call. Samples of a thread that has
//! made no socket call yet (a blocking pool's thread, a background task's) are unattributed.
//! Where requests of several endpoints interleave on one worker (an async runtime polling many
//! connections), the CPU between two socket calls goes to the later one's request: exact for a
//! thread per request and for a load of one endpoint, an approximation otherwise.

use std::collections::HashMap;

use foldhash::fast::RandomState;

use super::summary::{collapse_varying_segments, EndpointIds};
use super::{Chunk, Direction, Protocol};

/// Most thread-state changes kept (12 bytes each, about 48 MB); samples after the last one
/// kept are [`Served::NotRecorded`].
pub const MAX_CHANGES: usize = 4_000_000;

/// Builds the per-thread serving timeline while chunks are decoded (see the module doc).
#[derive(Debug, Default)]
pub struct ServingTimeline {
    endpoints: EndpointIds,
    /// Reused buffer for endpoint keys.
    key: String,
    /// HTTP socket -> its current request's endpoint.
    http_current: HashMap<u64, u32, RandomState>,
    /// PostgreSQL socket -> the endpoint of the request that last sent on it.
    pg_holder: HashMap<u64, u32, RandomState>,
    /// Thread -> (time, endpoint) at each change, in time order per thread.
    threads: HashMap<u32, Vec<(u64, u32)>, RandomState>,
    changes: usize,
    /// Time after which changes were no longer kept ([`MAX_CHANGES`]).
    full_at: Option<u64>,
    /// Endpoint -> (round trips, answered ones, their summed latency ns) on the connections it held.
    db: HashMap<u32, (u64, u64, u64), RandomState>,
}

impl ServingTimeline {
    /// The id of `METHOD target`, looked up without allocating when seen before.
    fn endpoint_id(&mut self, method: &str, target: &str) -> u32 {
        let mut key = std::mem::take(&mut self.key);
        key.clear();
        key.push_str(method);
        key.push(' ');
        key.push_str(target);
        let id = self.endpoints.id(&key);
        self.key = key;
        id
    }

    /// One decoded chunk; `request` is the method and templated target of the last request
    /// line the chunk held, if any (the parts of [`super::http::HttpRequest::endpoint`]).
    pub fn observe(&mut self, chunk: &Chunk, request: Option<(&str, &str)>) {
        let serving = match chunk.protocol {
            Protocol::Http => {
                if let Some((method, target)) = request {
                    let id = self.endpoint_id(method, target);
                    self.http_current.insert(chunk.socket, id);
                }
                self.http_current.get(&chunk.socket).copied()
            }
            Protocol::Postgres => match chunk.direction {
                Direction::Tx => {
                    if let Some(e) = self.current(chunk.tid) {
                        self.pg_holder.insert(chunk.socket, e);
                    }
                    None
                }
                Direction::Rx => self.pg_holder.get(&chunk.socket).copied(),
            },
        };
        if let Some(e) = serving {
            self.set(chunk.tid, chunk.ts_ns, e);
        }
    }

    /// A PostgreSQL round trip decoded on `socket`: counted for the request holding the
    /// connection, if any.
    pub fn round_trip(&mut self, socket: u64, latency_ns: Option<u64>) {
        if let Some(&e) = self.pg_holder.get(&socket) {
            let d = self.db.entry(e).or_default();
            d.0 += 1;
            if let Some(l) = latency_ns {
                d.1 += 1;
                d.2 += l;
            }
        }
    }

    /// The producer saw this socket close.
    pub fn close_socket(&mut self, protocol: Protocol, socket: u64) {
        match protocol {
            Protocol::Http => self.http_current.remove(&socket),
            Protocol::Postgres => self.pg_holder.remove(&socket),
        };
    }

    fn current(&self, tid: u32) -> Option<u32> {
        self.threads.get(&tid).and_then(|v| v.last()).map(|c| c.1)
    }

    fn set(&mut self, tid: u32, ts_ns: u64, endpoint: u32) {
        if self.full_at.is_some() {
            return;
        }
        let log = self.threads.entry(tid).or_default();
        if log.last().is_some_and(|c| c.1 == endpoint) {
            return;
        }
        if self.changes >= MAX_CHANGES {
            self.full_at = Some(ts_ns);
            return;
        }
        log.push((ts_ns, endpoint));
        self.changes += 1;
    }

    /// The timeline, with endpoints named as the summary names them (varying path segments
    /// collapsed to `{param}`, [`collapse_varying_segments`]).
    pub fn finish(self) -> Serving {
        let refs: Vec<&str> = self.endpoints.names.iter().map(String::as_str).collect();
        let templates = collapse_varying_segments(&refs);
        let mut names: Vec<String> = Vec::new();
        let mut ids: HashMap<String, u32, RandomState> = HashMap::default();
        let remap: Vec<u32> = self
            .endpoints
            .names
            .iter()
            .map(|e| {
                let name = templates.get(e).cloned().unwrap_or_else(|| e.clone());
                *ids.entry(name.clone()).or_insert_with(|| {
                    names.push(name);
                    (names.len() - 1) as u32
                })
            })
            .collect();
        let threads = self
            .threads
            .into_iter()
            .map(|(tid, mut log)| {
                for c in &mut log {
                    c.1 = remap[c.1 as usize];
                }
                log.dedup_by(|b, a| a.1 == b.1);
                (tid, log)
            })
            .collect();
        let mut db: Vec<EndpointDb> = Vec::new();
        for (e, (n, answered, ns)) in self.db {
            let endpoint = remap[e as usize];
            match db.iter_mut().find(|d| d.endpoint == endpoint) {
                Some(d) => {
                    d.round_trips += n;
                    d.answered += answered;
                    d.latency_total_ns += ns;
                }
                None => db.push(EndpointDb { endpoint, round_trips: n, answered, latency_total_ns: ns }),
            }
        }
        db.sort_by_key(|d| d.endpoint);
        Serving { endpoints: names, threads, full_at: self.full_at, db }
    }
}

/// Who each thread served when: the result of [`ServingTimeline::finish`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Serving {
    /// Endpoint names (`METHOD /route`); the ids of [`Serving::at`] index into it.
    pub endpoints: Vec<String>,
    threads: HashMap<u32, Vec<(u64, u32)>>,
    full_at: Option<u64>,
    /// PostgreSQL round trips per endpoint, on the connections its requests held.
    pub db: Vec<EndpointDb>,
}

/// An endpoint's PostgreSQL round trips: those decoded on a connection while one of its
/// requests held it (see the module doc).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EndpointDb {
    /// Index into [`Serving::endpoints`] (and [`crate::profile::EndpointSamples::endpoints`]).
    pub endpoint: u32,
    /// Round trips.
    pub round_trips: u64,
    /// Round trips whose answer was decoded.
    pub answered: u64,
    /// Their summed latency (first message sent to the answer's end), ns.
    pub latency_total_ns: u64,
}

/// What [`Serving::at`] knows of one moment of one thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// Serving the request of this endpoint (index into [`Serving::endpoints`]).
    Endpoint(u32),
    /// No socket call of the thread before that moment: nothing to attribute it to.
    Nothing,
    /// After [`MAX_CHANGES`] changes were recorded: not known.
    NotRecorded,
}

impl Serving {
    /// What thread `tid` was serving at `ts_ns` (`CLOCK_MONOTONIC`, ns).
    pub fn at(&self, tid: u32, ts_ns: u64) -> Served {
        if self.full_at.is_some_and(|f| ts_ns >= f) {
            return Served::NotRecorded;
        }
        let Some(log) = self.threads.get(&tid) else { return Served::Nothing };
        let i = log.partition_point(|c| c.0 <= ts_ns);
        match i.checked_sub(1) {
            Some(i) => Served::Endpoint(log[i].1),
            None => Served::Nothing,
        }
    }

    /// True when no thread was seen serving a request.
    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(ts_ns: u64, tid: u32, socket: u64, protocol: Protocol, direction: Direction) -> Chunk {
        Chunk { ts_ns, pid: 1, tid, socket, protocol, direction, total_len: 10, head: Vec::new(), tail: Vec::new() }
    }

    /// Two requests on one worker: the second request's head moves the worker to it; the
    /// first's query answer moves it back (the holder of the PostgreSQL socket).
    #[test]
    fn requests_interleaved_on_one_worker() {
        let mut t = ServingTimeline::default();
        t.observe(&chunk(100, 7, 1, Protocol::Http, Direction::Rx), Some(("GET", "/a")));
        t.observe(&chunk(110, 7, 50, Protocol::Postgres, Direction::Tx), None);
        t.observe(&chunk(120, 7, 2, Protocol::Http, Direction::Rx), Some(("POST", "/b")));
        t.observe(&chunk(130, 7, 50, Protocol::Postgres, Direction::Rx), None);
        t.observe(&chunk(140, 7, 1, Protocol::Http, Direction::Tx), None);
        t.observe(&chunk(150, 7, 2, Protocol::Http, Direction::Tx), None);
        let s = t.finish();
        assert_eq!(s.endpoints, ["GET /a", "POST /b"]);
        assert_eq!(s.at(7, 99), Served::Nothing);
        assert_eq!(s.at(7, 100), Served::Endpoint(0));
        assert_eq!(s.at(7, 115), Served::Endpoint(0));
        assert_eq!(s.at(7, 125), Served::Endpoint(1));
        assert_eq!(s.at(7, 135), Served::Endpoint(0));
        assert_eq!(s.at(7, 145), Served::Endpoint(0));
        assert_eq!(s.at(7, 155), Served::Endpoint(1));
        // Another thread made no socket call.
        assert_eq!(s.at(8, 155), Served::Nothing);
    }

    /// A query answer read by another worker (a task moved by work stealing) moves that
    /// worker to the request; a send by a thread serving nothing makes no holder.
    #[test]
    fn the_query_answer_names_the_request_on_any_worker() {
        let mut t = ServingTimeline::default();
        t.observe(&chunk(10, 1, 60, Protocol::Postgres, Direction::Tx), None);
        t.observe(&chunk(20, 1, 60, Protocol::Postgres, Direction::Rx), None);
        t.observe(&chunk(100, 7, 1, Protocol::Http, Direction::Rx), Some(("GET", "/users/1")));
        t.observe(&chunk(110, 7, 60, Protocol::Postgres, Direction::Tx), None);
        t.observe(&chunk(130, 8, 60, Protocol::Postgres, Direction::Rx), None);
        t.round_trip(60, Some(15));
        let s = t.finish();
        assert_eq!(s.db, [EndpointDb { endpoint: 0, round_trips: 1, answered: 1, latency_total_ns: 15 }]);
        assert_eq!(s.at(1, 30), Served::Nothing);
        assert_eq!(s.at(8, 129), Served::Nothing);
        assert_eq!(s.at(8, 131), Served::Endpoint(0));
    }

    /// Endpoints are named as the summary names them: many ids become one template.
    #[test]
    fn endpoints_collapse_like_the_summary() {
        let mut t = ServingTimeline::default();
        for i in 0..12u64 {
            t.observe(&chunk(100 + i, 7, i, Protocol::Http, Direction::Rx), Some(("GET", &format!("/articles/slug-{i}"))));
        }
        let s = t.finish();
        assert_eq!(s.endpoints, ["GET /articles/{param}"]);
        assert_eq!(s.at(7, 200), Served::Endpoint(0));
        // One change only: the same template throughout.
        assert_eq!(s.threads[&7].len(), 1);
    }
}
