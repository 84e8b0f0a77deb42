//! Polls PostgreSQL's `pg_stat_activity` during a run (`profiler attach --db-url`), so that
//! the statements the target's connections prepared before the capture get their text
//! ([`crate::wire::resolve`]).
//!
//! One connection of the agent's own (sqlx, on a current-thread tokio runtime in a thread of
//! its own) runs, every [`FAST_INTERVAL`] during the first [`FAST_FOR`] and every
//! [`SLOW_INTERVAL`] after:
//!
//! ```sql
//! SELECT client_port, query_start, query FROM pg_stat_activity WHERE pid <> pg_backend_pid() ...
//! ```
//!
//! Each distinct (port, `query_start`) is kept once as an [`Observation`], with
//! `query_start` converted from PostgreSQL's wall clock to `CLOCK_MONOTONIC` (the wire's
//! clock) by the offset between the two clocks read after each poll: exact on one host, off
//! by the clocks' skew when the database runs elsewhere. Only a role that may see the
//! target's sessions (the same role, a superuser, or `pg_read_all_stats`) gets their text;
//! other rows read `<insufficient privilege>` and are skipped.
//!
//! Cost on the server: one scan of the backends' shared status array per poll (no table, no
//! lock beyond the status entries) and one round trip on the agent's own connection; not yet
//! measured against the target's throughput.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sqlx::{Connection, Row};

use crate::wire::resolve::Observation;

/// Poll interval during the first [`FAST_FOR`] of the run (10 ms: 100 polls/s).
pub const FAST_INTERVAL: Duration = Duration::from_millis(10);
/// How long the poller polls at [`FAST_INTERVAL`].
pub const FAST_FOR: Duration = Duration::from_secs(10);
/// Poll interval after [`FAST_FOR`] (100 ms).
pub const SLOW_INTERVAL: Duration = Duration::from_millis(100);
/// How long [`ActivityPoller::start`] waits for the first answer before the run goes on
/// without it.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the poller keeps trying to connect: a server that answers after
/// [`CONNECT_TIMEOUT`] (busy under the very load being profiled) still gives the statements
/// it sees from then on their texts.
pub const LATE_CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// Most observations kept (about 50 bytes each, texts apart).
pub const MAX_OBSERVATIONS: usize = 200_000;

const QUERY: &str = "SELECT client_port, (EXTRACT(EPOCH FROM query_start) * 1000000)::int8 AS start_us, query \
     FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND client_port IS NOT NULL AND client_port > 0 \
     AND query_start IS NOT NULL AND backend_type = 'client backend'";

/// What the poller saw.
#[derive(Debug, Default, Clone)]
pub struct ActivityLog {
    /// Distinct (port, statement start) rows, in the order seen.
    pub observations: Vec<Observation>,
    /// The statement texts [`Observation::text`] indexes.
    pub texts: Vec<String>,
    /// Polls made.
    pub polls: u64,
    /// Why polling stopped early, when it did (the connection broke, a query failed).
    pub error: Option<String>,
}

/// The running poller; [`ActivityPoller::finish`] stops it.
pub struct ActivityPoller {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<ActivityLog>>,
}

fn clock_ns(clock: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a valid pointer to a timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}

impl ActivityPoller {
    /// Connects to `url` (a PostgreSQL connection string, `postgres://user:pass@host:port/db`)
    /// and starts polling in a thread named `profiler-pg-activity`.
    ///
    /// A server that has not answered within [`CONNECT_TIMEOUT`] does not stop the run: a
    /// warning says so, and the poller keeps trying up to [`LATE_CONNECT_TIMEOUT`] (what
    /// happened then is in [`ActivityLog::error`]): a server busy under the load being
    /// profiled can answer late.
    ///
    /// # Errors
    /// One line: the URL is malformed, the server refused the connection (or the password),
    /// or the first query failed (e.g. no `pg_stat_activity`).
    pub fn start(url: &str) -> Result<ActivityPoller, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
        let url = url.to_owned();
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("profiler-pg-activity".to_owned())
            .spawn(move || poll_thread(&url, &flag, &ready_tx))
            .map_err(|e| format!("spawning the pg_stat_activity poller: {e}"))?;
        match ready_rx.recv_timeout(CONNECT_TIMEOUT + Duration::from_secs(1)) {
            Ok(Ok(())) => Ok(ActivityPoller { stop, thread: Some(thread) }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                tracing::warn!(
                    "--db-url: no answer within {} s; the run goes on, and the poller keeps trying for up to {} s (statements prepared before the attach get their texts only if it answers)",
                    CONNECT_TIMEOUT.as_secs(),
                    LATE_CONNECT_TIMEOUT.as_secs()
                );
                Ok(ActivityPoller { stop, thread: Some(thread) })
            }
        }
    }

    /// Stops polling and returns what was seen.
    pub fn finish(mut self) -> ActivityLog {
        self.stop.store(true, Ordering::Release);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or_default()
    }
}

impl Drop for ActivityPoller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

fn poll_thread(url: &str, stop: &AtomicBool, ready: &mpsc::Sender<Result<(), String>>) -> ActivityLog {
    let mut log = ActivityLog::default();
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(format!("--db-url: starting a runtime: {e}")));
            return log;
        }
    };
    rt.block_on(async {
        // The agent's own statements are not logged: sqlx warns of any statement slower than
        // a second at WARN, which would reach the user's terminal when the server is busy.
        let options = match url.parse::<sqlx::postgres::PgConnectOptions>() {
            Ok(o) => sqlx::ConnectOptions::disable_statement_logging(o),
            Err(e) => {
                let _ = ready.send(Err(format!("--db-url: not a PostgreSQL connection string: {}", one_line(&e.to_string()))));
                return;
            }
        };
        // The run may be over before the server answers: the connection gives up then too.
        let connect = async {
            tokio::select! {
                c = sqlx::ConnectOptions::connect(&options) => Some(c),
                () = async { while !stop.load(Ordering::Acquire) { tokio::time::sleep(FAST_INTERVAL).await } } => None,
            }
        };
        let conn = tokio::time::timeout(LATE_CONNECT_TIMEOUT, connect).await;
        // After `start` stopped waiting, a failure has no one to tell but the log.
        let mut fail = |msg: String| {
            if let Err(mpsc::SendError(Err(msg))) = ready.send(Err(msg)) {
                log.error = Some(msg);
            }
        };
        let mut conn = match conn {
            Ok(Some(Ok(c))) => c,
            Ok(Some(Err(e))) => return fail(format!("--db-url: cannot connect: {}", one_line(&e.to_string()))),
            Ok(None) => return fail("--db-url: the run ended before the server answered".into()),
            Err(_) => return fail(format!("--db-url: no answer within {} s", LATE_CONNECT_TIMEOUT.as_secs())),
        };
        let mut seen: HashMap<(u16, i64), ()> = HashMap::new();
        let mut text_ids: HashMap<String, u32> = HashMap::new();
        let started = Instant::now();
        let mut first = true;
        while !stop.load(Ordering::Acquire) {
            let rows = match sqlx::query(QUERY).fetch_all(&mut conn).await {
                Ok(rows) => rows,
                Err(e) => {
                    let msg = format!("--db-url: polling pg_stat_activity: {}", one_line(&e.to_string()));
                    // The first poll's failure goes to `start` while it waits; later ones
                    // (and one after it stopped waiting) to the log.
                    if let Err(mpsc::SendError(Err(msg))) = ready.send(Err(msg)) {
                        log.error = Some(msg);
                    }
                    return;
                }
            };
            let offset = clock_ns(libc::CLOCK_REALTIME) - clock_ns(libc::CLOCK_MONOTONIC);
            if first {
                let _ = ready.send(Ok(()));
                first = false;
            }
            log.polls += 1;
            for row in rows {
                let (Ok(port), Ok(Some(start_us)), Ok(Some(query))) =
                    (row.try_get::<i32, _>(0), row.try_get::<Option<i64>, _>(1), row.try_get::<Option<String>, _>(2))
                else {
                    continue;
                };
                let Ok(port) = u16::try_from(port) else { continue };
                if query.is_empty() || query.starts_with('<') || log.observations.len() >= MAX_OBSERVATIONS {
                    continue;
                }
                if seen.insert((port, start_us), ()).is_some() {
                    continue;
                }
                let mono = i128::from(start_us) * 1_000 - offset;
                let Ok(start_ns) = u64::try_from(mono) else { continue };
                let next = text_ids.len() as u32;
                let text = *text_ids.entry(query.clone()).or_insert_with(|| {
                    log.texts.push(query);
                    next
                });
                log.observations.push(Observation { client_port: port, start_ns, text });
            }
            let interval = if started.elapsed() < FAST_FOR { FAST_INTERVAL } else { SLOW_INTERVAL };
            tokio::time::sleep(interval).await;
        }
        let _ = conn.close().await;
    });
    log
}

fn one_line(s: &str) -> String {
    s.lines().next().unwrap_or("").trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_that_does_not_answer_does_not_stop_the_run() {
        // A listener that accepts and never speaks: sqlx waits for the server's answer to its
        // start-up message. `start` gives up waiting after CONNECT_TIMEOUT and the run goes
        // on; when the run ends first, the log says why no text was recovered.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let held = std::thread::spawn(move || listener.accept().map(|(s, _)| s));
        let poller = ActivityPoller::start(&format!("postgres://u:p@127.0.0.1:{port}/db")).expect("the run goes on");
        let log = poller.finish();
        assert_eq!(log.error.as_deref(), Some("--db-url: the run ended before the server answered"));
        assert_eq!(log.polls, 0);
        drop(held.join());
    }

    #[test]
    fn a_refused_connection_is_one_line() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let e = ActivityPoller::start(&format!("postgres://u:p@127.0.0.1:{port}/db")).err().expect("refused");
        assert!(e.starts_with("--db-url: cannot connect: "), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
}
