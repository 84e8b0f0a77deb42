//! A throwaway PostgreSQL server for tests and `profiler bench`.
//!
//! [`TempPostgres::start`] runs `initdb` in a fresh temporary directory (under `/dev/shm`,
//! a tmpfs, when it exists), starts `postgres` directly as a child process (not through
//! `pg_ctl`, so this process owns the postmaster's PID) with durability switched off
//! (`fsync=off`, `synchronous_commit=off`, `full_page_writes=off`: the data is thrown away
//! anyway), listening on 127.0.0.1 only on a free port and on a Unix socket inside the
//! temporary directory, and waits until `pg_isready` reports that it accepts connections.
//!
//! Authentication (`pg_hba.conf`): the Unix socket is `trust` (used by this module's own
//! `psql` calls); TCP on 127.0.0.1 is `scram-sha-256` for every role. The superuser is
//! `postgres` with password `postgres` ([`TempPostgres::admin_url`]); the application role is
//! `crm` with password `crm` (created by [`TempPostgres::create_seeded_db`]).
//!
//! PostgreSQL refuses to run as root: when this process is root, `initdb` and `postgres` run
//! as the `postgres` OS user (the temporary directory is chown'ed to it). Binaries are taken
//! from the newest `/usr/lib/postgresql/<major>/bin` (Debian layout), or from `PG_BIN_DIR`
//! when that environment variable is set.
//!
//! Dropping a [`TempPostgres`] stops the server (fast shutdown, then immediate shutdown, then
//! SIGKILL of its process group, each bounded in time), reaps it, and removes the directory;
//! this also happens while a test unwinds from a panic. A process killed with SIGKILL (or by an
//! unhandled SIGINT) cannot run `Drop`: the kernel then stops the server (`PR_SET_PDEATHSIG`,
//! SIGQUIT = immediate shutdown), and the directory it leaves in `/dev/shm` is removed by the
//! next [`TempPostgres::start`] ([`remove_stale_dirs`]).

use std::ffi::CString;
use std::fs;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::seed;

/// How long [`TempPostgres::start`] waits for the server to accept connections.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long each shutdown step (SIGINT, SIGQUIT, SIGKILL) waits for the postmaster to exit.
pub const STOP_STEP_TIMEOUT: Duration = Duration::from_secs(5);
/// `max_connections` of the server (the benchmark's pool plus tests plus `psql`).
pub const MAX_CONNECTIONS: u32 = 300;
/// File in the temporary directory holding the PID of the process that owns the server.
pub const OWNER_FILE: &str = "owner.pid";
/// The application role's name and password (see the module docs).
pub const APP_ROLE: &str = "crm";
/// The superuser's password over TCP.
pub const ADMIN_PASSWORD: &str = "postgres";

/// Errors of the throwaway server.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// No `/usr/lib/postgresql/*/bin/postgres` (nor `PG_BIN_DIR`).
    #[error("PostgreSQL server binaries not found in /usr/lib/postgresql/*/bin (install the Debian package `postgresql`, or set PG_BIN_DIR)")]
    BinariesNotFound,
    /// Running as root, but there is no `postgres` OS user to run the server as.
    #[error("running as root but the OS user `postgres` does not exist (it comes with the Debian package `postgresql`)")]
    NoPostgresUser,
    /// A file-system operation on the temporary directory failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, with the path.
        what: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A PostgreSQL program (`initdb`, `psql`, ...) exited with an error.
    #[error("{program} failed ({status}): {stderr}")]
    Command {
        /// The program's name.
        program: String,
        /// Its exit status, as printed by std.
        status: String,
        /// The last lines of its standard error.
        stderr: String,
    },
    /// The server exited or did not accept connections in time.
    #[error("PostgreSQL did not start: {reason}; last lines of its log:\n{log_tail}")]
    StartFailed {
        /// Why we gave up (timeout, exit status).
        reason: String,
        /// The last lines of the server log.
        log_tail: String,
    },
    /// A database name that is not a plain lower-case SQL identifier.
    #[error("invalid database name {0:?}: use 1..63 characters of [a-z0-9_], starting with a letter or `_`")]
    InvalidName(String),
    /// The server did not stop within the shutdown steps.
    #[error("PostgreSQL (pid {pid}) did not stop: {reason}")]
    StopFailed {
        /// The postmaster's PID.
        pid: u32,
        /// What went wrong.
        reason: String,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> PgError {
    let what = what.into();
    move |source| PgError::Io { what, source }
}

/// A running throwaway PostgreSQL server; see the module documentation.
#[derive(Debug)]
pub struct TempPostgres {
    dir: Option<tempfile::TempDir>,
    bin: PathBuf,
    port: u16,
    child: Option<Child>,
    run_as: Option<(u32, u32)>,
}

impl TempPostgres {
    /// Initializes and starts a new server; blocks until it accepts connections (at most
    /// [`START_TIMEOUT`]). Takes about a second on tmpfs.
    ///
    /// # Errors
    /// [`PgError::BinariesNotFound`], [`PgError::NoPostgresUser`], [`PgError::Io`] for the
    /// temporary directory, [`PgError::Command`] when `initdb` fails, and
    /// [`PgError::StartFailed`] (with the server log's last lines) when the server exits or is
    /// not ready in time.
    pub fn start() -> Result<TempPostgres, PgError> {
        TempPostgres::start_with(&[])
    }

    /// [`TempPostgres::start`] with extra server settings (`-c NAME=VALUE`), e.g.
    /// `("shared_preload_libraries", "pg_stat_statements")` for a test that reads the
    /// server's own statement counts.
    ///
    /// # Errors
    /// As [`TempPostgres::start`].
    pub fn start_with(settings: &[(&str, &str)]) -> Result<TempPostgres, PgError> {
        let bin = find_bin_dir()?;
        let run_as = if unsafe_free_geteuid() == 0 { Some(lookup_user("postgres")?) } else { None };

        let parent = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        remove_stale_dirs(&parent);
        let dir = tempfile::Builder::new()
            .prefix("bench-pg-")
            .tempdir_in(&parent)
        .map_err(io_err("create a temporary directory"))?;
        let root = dir.path().to_path_buf();
        let owner = root.join(OWNER_FILE);
        fs::write(&owner, format!("{}\n", std::process::id())).map_err(io_err(format!("write {}", owner.display())))?;
        let data = root.join("data");
        let pwfile = root.join("pwfile");
        fs::write(&pwfile, ADMIN_PASSWORD).map_err(io_err(format!("write {}", pwfile.display())))?;
        if let Some((uid, gid)) = run_as {
            for p in [&root, &pwfile] {
                std::os::unix::fs::chown(p, Some(uid), Some(gid)).map_err(io_err(format!("chown {} to postgres", p.display())))?;
            }
        }
        fs::set_permissions(&root, fs::Permissions::from_mode(0o700)).map_err(io_err(format!("chmod {}", root.display())))?;

        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"])
            .arg(format!("--pwfile={}", pwfile.display()));
        run_checked(&mut initdb, run_as, None, "initdb")?;

        // Only loopback over TCP; everything else goes through the socket in `root`.
        let hba = "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n";
        let hba_path = data.join("pg_hba.conf");
        fs::write(&hba_path, hba).map_err(io_err(format!("write {}", hba_path.display())))?;

        let mut last_err = None;
        // A free port is found by binding port 0 and releasing it; another process may take it
        // before the server binds, so retry a few times on a bind failure.
        for _attempt in 0..3 {
            let port = free_port()?;
            let mut pg = TempPostgres { dir: None, bin: bin.clone(), port, child: None, run_as };
            match pg.spawn_server(&root, &data, settings) {
                Ok(()) => {
                    pg.dir = Some(dir);
                    return Ok(pg);
                }
                Err(e) => {
                    pg.kill_now();
                    let retry = matches!(&e, PgError::StartFailed { log_tail, .. } if log_tail.contains("could not bind") || log_tail.contains("Address already in use"));
                    last_err = Some(e);
                    if !retry {
                        break;
                    }
                }
            }
        }
        Err(last_err.unwrap_or_else(|| PgError::StartFailed { reason: "no attempt made".into(), log_tail: String::new() }))
    }

    fn spawn_server(&mut self, root: &Path, data: &Path, settings: &[(&str, &str)]) -> Result<(), PgError> {
        let log_path = root.join("server.log");
        let log = fs::File::create(&log_path).map_err(io_err(format!("create {}", log_path.display())))?;
        let log2 = log.try_clone().map_err(io_err("dup the log file"))?;
        let mut cmd = Command::new(self.bin.join("postgres"));
        clean_env(&mut cmd);
        cmd.arg("-D").arg(data);
        for (k, v) in [
            ("listen_addresses", "127.0.0.1".to_string()),
            ("port", self.port.to_string()),
            ("unix_socket_directories", root.display().to_string()),
            ("max_connections", MAX_CONNECTIONS.to_string()),
            ("fsync", "off".into()),
            ("synchronous_commit", "off".into()),
            ("full_page_writes", "off".into()),
            ("shared_buffers", "128MB".into()),
            ("log_min_messages", "warning".into()),
        ] {
            cmd.arg("-c").arg(format!("{k}={v}"));
        }
        for (k, v) in settings {
            cmd.arg("-c").arg(format!("{k}={v}"));
        }
        cmd.stdin(Stdio::null()).stdout(log).stderr(log2);
        // Own process group: the last-resort SIGKILL reaches the backends too.
        cmd.process_group(0);
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid).gid(gid);
        }
        // If this process dies without running Drop (SIGKILL, an unhandled SIGINT), the kernel
        // sends the postmaster SIGQUIT (immediate shutdown). PR_SET_PDEATHSIG is tied to the
        // spawning *thread*, so the spawn happens on a thread that lives as long as the process.
        // pre_exec runs after std's setuid, which would otherwise clear the setting.
        let parent = std::process::id();
        // SAFETY: the closure only calls async-signal-safe functions (prctl, getppid).
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGQUIT as libc::c_ulong, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if u32::try_from(libc::getppid()).ok() != Some(parent) {
                    return Err(std::io::Error::other("the parent exited before postgres started"));
                }
                Ok(())
            });
        }
        let child = spawn_on_lifetime_thread(cmd).map_err(io_err(format!("spawn {}", self.bin.join("postgres").display())))?;
        self.child = Some(child);

        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                self.child = None;
                return Err(PgError::StartFailed { reason: format!("postgres exited with {status}"), log_tail: tail(&log_path, 20) });
            }
            let ready = clean_env(&mut Command::new(self.bin.join("pg_isready")))
                .arg("-q")
                .arg("-h")
                .arg(root)
                .arg("-p")
                .arg(self.port.to_string())
                .arg("-U")
                .arg("postgres")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .map_err(io_err("run pg_isready"))?;
            if ready.success() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(PgError::StartFailed {
                    reason: format!("not accepting connections after {} s", START_TIMEOUT.as_secs()),
                    log_tail: tail(&log_path, 20),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The TCP port the server listens on (127.0.0.1 only).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// PID of the postmaster, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The temporary directory (data directory in `data/`, Unix socket, `server.log`).
    pub fn dir(&self) -> &Path {
        self.dir.as_ref().map_or(Path::new(""), |d| d.path())
    }

    /// The superuser's URL: `postgres://postgres:postgres@127.0.0.1:PORT/postgres`.
    pub fn admin_url(&self) -> String {
        format!("postgres://postgres:{ADMIN_PASSWORD}@127.0.0.1:{}/postgres", self.port)
    }

    /// The application role's URL for database `name`: `postgres://crm:crm@127.0.0.1:PORT/NAME`.
    pub fn app_url(&self, name: &str) -> String {
        format!("postgres://{APP_ROLE}:{APP_ROLE}@127.0.0.1:{}/{name}", self.port)
    }

    /// Runs SQL text with `psql` (as superuser, over the Unix socket, `ON_ERROR_STOP`) in
    /// database `db` and returns its unaligned, tuples-only output (`|`-separated columns,
    /// one row a line).
    ///
    /// # Errors
    /// [`PgError::Command`] with psql's error text when a statement fails.
    pub fn psql(&self, db: &str, sql: &str) -> Result<String, PgError> {
        self.psql_as("postgres", db, sql)
    }

    fn psql_as(&self, user: &str, db: &str, sql: &str) -> Result<String, PgError> {
        let mut cmd = Command::new(self.bin.join("psql"));
        cmd.args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(self.dir())
            .arg("-p")
            .arg(self.port.to_string())
            .args(["-U", user, "-d", db]);
        run_checked(&mut cmd, None, Some(sql.as_bytes()), "psql")
    }

    /// Creates database `name` owned by role `crm` (created on first use, password `crm`),
    /// applies `bench/sql/schema.sql` and the deterministic seed ([`crate::seed`]), runs
    /// `ANALYZE`, and returns `postgres://crm:crm@127.0.0.1:PORT/NAME`.
    ///
    /// # Errors
    /// [`PgError::InvalidName`] unless `name` is 1..63 of `[a-z0-9_]` starting with a letter
    /// or `_`; [`PgError::Command`] when a statement fails (e.g. the database exists).
    pub fn create_seeded_db(&self, name: &str) -> Result<String, PgError> {
        let valid = !name.is_empty()
            && name.len() <= 63
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            && !name.as_bytes()[0].is_ascii_digit();
        if !valid {
            return Err(PgError::InvalidName(name.to_string()));
        }
        self.psql(
            "postgres",
            &format!(
                "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN \
                 CREATE ROLE {APP_ROLE} LOGIN PASSWORD '{APP_ROLE}'; END IF; END $$;\n\
                 CREATE DATABASE {name} OWNER {APP_ROLE} TEMPLATE template0 ENCODING 'UTF8';"
            ),
        )?;
        let script = format!("BEGIN;\n{}\n{}\nCOMMIT;\nANALYZE;\n", seed::SCHEMA_SQL, seed::seed_sql());
        self.psql_as(APP_ROLE, name, &script)?;
        Ok(self.app_url(name))
    }

    /// Stops the server (fast shutdown, escalating; see the module docs) and removes its
    /// directory.
    ///
    /// # Errors
    /// [`PgError::StopFailed`] when the postmaster survives SIGKILL of its group, or
    /// [`PgError::Io`] when the directory cannot be removed.
    pub fn stop(mut self) -> Result<(), PgError> {
        self.shutdown()?;
        if let Some(dir) = self.dir.take() {
            let path = dir.path().display().to_string();
            dir.close().map_err(io_err(format!("remove {path}")))?;
        }
        Ok(())
    }

    fn shutdown(&mut self) -> Result<(), PgError> {
        let Some(mut child) = self.child.take() else { return Ok(()) };
        let pid = child.id();
        // SIGINT = fast shutdown, SIGQUIT = immediate shutdown (both stop the backends),
        // then SIGKILL for the whole process group.
        for (sig, group) in [(libc::SIGINT, false), (libc::SIGQUIT, false), (libc::SIGKILL, true)] {
            if matches!(child.try_wait(), Ok(Some(_))) {
                break;
            }
            send_signal(pid, sig, group);
            let deadline = Instant::now() + STOP_STEP_TIMEOUT;
            while Instant::now() < deadline {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        match child.try_wait() {
            Ok(Some(_)) => {
                // Backends that outlived the postmaster (should not happen after a clean
                // shutdown) die with the group.
                send_signal(pid, libc::SIGKILL, true);
                Ok(())
            }
            Ok(None) => Err(PgError::StopFailed { pid, reason: "still running after SIGKILL".into() }),
            Err(e) => Err(PgError::StopFailed { pid, reason: e.to_string() }),
        }
    }

    fn kill_now(&mut self) {
        if let Some(mut child) = self.child.take() {
            send_signal(child.id(), libc::SIGKILL, true);
            let _ = child.wait();
        }
    }
}

impl Drop for TempPostgres {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            eprintln!("bench::pg: {e}");
            self.kill_now();
        }
        // TempDir's own Drop removes the directory.
    }
}

/// Spawns `cmd` from one thread that lives until the process exits (see `spawn_server`).
fn spawn_on_lifetime_thread(cmd: Command) -> std::io::Result<Child> {
    type Job = (Command, std::sync::mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: std::sync::OnceLock<Option<std::sync::Mutex<std::sync::mpsc::Sender<Job>>>> = std::sync::OnceLock::new();
    let tx = SPAWNER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("bench-pg-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .ok()
            .map(|_| std::sync::Mutex::new(tx))
    });
    let tx = tx.as_ref().ok_or_else(|| std::io::Error::other("cannot start the spawner thread"))?;
    let (reply_tx, reply_rx) = std::sync::mpsc::channel();
    tx.lock()
        .map_err(|_| std::io::Error::other("spawner lock poisoned"))?
        .send((cmd, reply_tx))
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
    reply_rx.recv().map_err(|_| std::io::Error::other("the spawner thread is gone"))?
}

/// Removes `bench-pg-*` directories in `parent` left by processes that died without running
/// Drop: those whose `owner.pid` (written by [`TempPostgres::start`]) names a process that no
/// longer exists, or that have no such file and were last modified more than ten minutes ago
/// (a directory being set up right now has no owner file for a moment, but is fresh). Returns
/// how many were removed.
pub fn remove_stale_dirs(parent: &Path) -> usize {
    let Ok(entries) = fs::read_dir(parent) else { return 0 };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        if !name.to_str().is_some_and(|n| n.starts_with("bench-pg-")) {
            continue;
        }
        let dir = e.path();
        let stale = match fs::read_to_string(dir.join(OWNER_FILE)) {
            Ok(text) => match text.lines().next().and_then(|l| l.trim().parse::<u32>().ok()) {
                Some(pid) => !Path::new(&format!("/proc/{pid}")).exists(),
                None => false,
            },
            Err(_) => e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > Duration::from_secs(600)),
        };
        if stale && fs::remove_dir_all(&dir).is_ok() {
            removed += 1;
        }
    }
    removed
}

fn send_signal(pid: u32, sig: libc::c_int, group: bool) {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return };
    let target = if group { -pid } else { pid };
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe {
        libc::kill(target, sig);
    }
}

fn unsafe_free_geteuid() -> u32 {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// UID and GID of an OS user, through getpwnam_r (NSS aware).
fn lookup_user(name: &str) -> Result<(u32, u32), PgError> {
    let cname = CString::new(name).map_err(|_| PgError::NoPostgresUser)?;
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: passwd is plain old data; getpwnam_r fills it and points its strings into `buf`,
    // which outlives every use below (we only read the numeric ids).
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwnam_r(cname.as_ptr(), &mut pwd, buf.as_mut_ptr(), buf.len(), &mut result);
        if rc != 0 || result.is_null() {
            return Err(PgError::NoPostgresUser);
        }
        Ok((pwd.pw_uid, pwd.pw_gid))
    }
}

/// The newest `/usr/lib/postgresql/<major>/bin` that holds `postgres`, or `$PG_BIN_DIR`.
fn find_bin_dir() -> Result<PathBuf, PgError> {
    if let Some(dir) = std::env::var_os("PG_BIN_DIR") {
        let dir = PathBuf::from(dir);
        return if dir.join("postgres").is_file() { Ok(dir) } else { Err(PgError::BinariesNotFound) };
    }
    let mut best: Option<(u32, PathBuf)> = None;
    if let Ok(entries) = fs::read_dir("/usr/lib/postgresql") {
        for e in entries.flatten() {
            let Some(major) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            let bin = e.path().join("bin");
            if bin.join("postgres").is_file() && best.as_ref().is_none_or(|(m, _)| major > *m) {
                best = Some((major, bin));
            }
        }
    }
    best.map(|(_, b)| b).ok_or(PgError::BinariesNotFound)
}

/// Removes libpq/server environment variables (`PGHOST`, `PGOPTIONS`, `PGPASSWORD`,
/// `PGSSLMODE`, `PGDATA`, ...) from `cmd`, so that the caller's environment cannot redirect or
/// reconfigure our own `initdb`, `postgres`, `pg_isready` and `psql` calls.
fn clean_env(cmd: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars_os() {
        if k.to_str().is_some_and(|k| k.starts_with("PG")) {
            cmd.env_remove(k);
        }
    }
    cmd
}

fn free_port() -> Result<u16, PgError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(io_err("bind 127.0.0.1:0 to find a free port"))?;
    Ok(l.local_addr().map_err(io_err("local address of the probe socket"))?.port())
}

/// Runs a command to completion (optionally as another user, optionally feeding stdin) and
/// returns its stdout, or [`PgError::Command`] with the tail of stderr.
fn run_checked(cmd: &mut Command, run_as: Option<(u32, u32)>, stdin: Option<&[u8]>, program: &str) -> Result<String, PgError> {
    if let Some((uid, gid)) = run_as {
        cmd.uid(uid).gid(gid);
    }
    clean_env(cmd);
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() }).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(io_err(format!("spawn {program}")))?;
    // Write stdin from a thread so a large script cannot deadlock against a full stdout pipe.
    let writer = match (stdin, child.stdin.take()) {
        (Some(data), Some(mut pipe)) => {
            let data = data.to_vec();
            Some(std::thread::spawn(move || pipe.write_all(&data)))
        }
        _ => None,
    };
    let mut stderr = String::new();
    let mut err_pipe = child.stderr.take();
    let err_thread = std::thread::spawn(move || {
        if let Some(p) = err_pipe.as_mut() {
            let _ = p.read_to_string(&mut stderr);
        }
        stderr
    });
    let mut stdout = String::new();
    if let Some(mut p) = child.stdout.take() {
        p.read_to_string(&mut stdout).map_err(io_err(format!("read {program} output")))?;
    }
    let status = child.wait().map_err(io_err(format!("wait for {program}")))?;
    let stderr = err_thread.join().unwrap_or_default();
    let write_result = writer.map(|w| w.join());
    if !status.success() {
        return Err(PgError::Command { program: program.into(), status: status.to_string(), stderr: last_lines(&stderr, 20) });
    }
    if let Some(Ok(Err(e))) = write_result {
        return Err(PgError::Io { what: format!("write to {program}"), source: e });
    }
    Ok(stdout)
}

fn last_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn tail(path: &Path, n: usize) -> String {
    match fs::read(path) {
        Ok(b) => last_lines(&String::from_utf8_lossy(&b), n),
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}
