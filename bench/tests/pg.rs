//! The throwaway PostgreSQL server and the seed, checked with PostgreSQL's own answers
//! (`psql` queries) and with /proc for the processes.

use std::collections::BTreeSet;
use std::path::PathBuf;

use bench::pg::TempPostgres;
use bench::seed;

/// MD5 of every seeded table as PostgreSQL computes it (`md5(string_agg(t::text, '\n' ORDER BY id))`).
/// Pinned from the first run of this seed; a change here means the data set changed.
const TABLE_MD5_SQL: &str = "SELECT (SELECT md5(string_agg(w::text, E'\\n' ORDER BY id)) FROM world w) || ' ' || \
     (SELECT md5(string_agg(u::text, E'\\n' ORDER BY id)) FROM users u) || ' ' || \
     (SELECT md5(string_agg(d::text, E'\\n' ORDER BY id)) FROM deals d)";

/// Every test that starts a server (here or in a `bench-pg` child) holds this lock shared;
/// the test that leaves a stale directory behind holds it alone, because each
/// [`TempPostgres::start`] reclaims the stale directories it finds
/// ([`bench::pg::remove_stale_dirs`]) and would take that one first.
static SERVERS: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn starts_servers() -> std::sync::RwLockReadGuard<'static, ()> {
    SERVERS.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn one(pg: &TempPostgres, db: &str, sql: &str) -> String {
    pg.psql(db, sql).unwrap_or_else(|e| panic!("{sql}: {e}")).trim().to_string()
}

/// PIDs whose parent is `ppid` (from /proc/*/stat field 4).
fn children_of(ppid: u32) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // Fields after the ")" of the command name: state ppid ...
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { continue };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(ppid) {
            out.insert(pid);
        }
    }
    out
}

fn alive(pid: u32) -> bool {
    // A zombie still has /proc/PID; count it as dead only when the entry is gone or state Z.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit_once(')').map(|(_, r)| r.trim_start().starts_with('Z')).unwrap_or(false),
        Err(_) => false,
    }
}

#[test]
fn seeded_database_has_the_spec_schema_and_row_counts() {
    let _servers = starts_servers();
    let pg = TempPostgres::start().expect("start PostgreSQL");
    assert!(pg.dir().starts_with("/dev/shm"), "data directory on tmpfs: {}", pg.dir().display());
    let url = pg.create_seeded_db("crm").expect("seed");
    assert_eq!(url, format!("postgres://crm:crm@127.0.0.1:{}/crm", pg.port()));

    // Row counts of SPEC.md.
    assert_eq!(one(&pg, "crm", "SELECT count(*) FROM world"), "10000");
    assert_eq!(one(&pg, "crm", "SELECT count(*) FROM users"), "100");
    assert_eq!(one(&pg, "crm", "SELECT count(*) FROM deals"), "1000");
    // Ranges and shapes.
    assert_eq!(one(&pg, "crm", "SELECT min(id) || ' ' || max(id) FROM world"), "1 10000");
    let rn = one(&pg, "crm", "SELECT min(randomnumber) || ' ' || max(randomnumber) FROM world");
    let (lo, hi) = rn.split_once(' ').expect("two numbers");
    let (lo, hi): (i64, i64) = (lo.parse().expect("min"), hi.parse().expect("max"));
    assert!((1..=20).contains(&lo) && (9_980..=10_000).contains(&hi), "randomnumber spans 1..10000: {rn}");
    assert_eq!(one(&pg, "crm", "SELECT count(*) FROM users WHERE email = 'user' || id || '@example.com'"), "100");
    assert_eq!(
        one(&pg, "crm", "SELECT count(*) FROM users WHERE password_hash ~ '^\\$2b\\$12\\$[./A-Za-z0-9]{53}$' AND length(totp_secret) = 32 AND recovery_codes::jsonb ? '' IS FALSE AND jsonb_array_length(recovery_codes::jsonb) = 10"),
        "100"
    );
    assert_eq!(one(&pg, "crm", "SELECT string_agg(DISTINCT stage, ',' ORDER BY stage) FROM deals"), "lead,lost,negotiation,proposal,qualified,won");
    assert_eq!(one(&pg, "crm", "SELECT count(DISTINCT created_at) FROM deals"), "1000");
    assert_eq!(
        one(&pg, "crm", "SELECT count(*) FROM deals WHERE created_at < '2026-01-01T00:00:00Z' AND created_at >= '2025-01-01T00:00:00Z' AND updated_at >= created_at"),
        "1000"
    );
    assert_eq!(one(&pg, "crm", "SELECT count(*) FROM deals WHERE amount_cents BETWEEN 0 AND 1000000000000"), "1000");
    assert!(one(&pg, "crm", "SELECT count(DISTINCT owner_id) FROM deals").parse::<i64>().expect("n") > 90);
    // The index of SPEC.md, as PostgreSQL describes it.
    let idx = one(&pg, "crm", "SELECT indexdef FROM pg_indexes WHERE tablename = 'deals' AND indexdef LIKE '%created_at%'");
    assert!(idx.ends_with("USING btree (created_at DESC, id DESC)"), "{idx}");
    // Column types and nullability (information_schema), exactly SPEC.md's table.
    let cols = pg
        .psql(
            "crm",
            "SELECT table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable FROM information_schema.columns \
             WHERE table_schema = 'public' ORDER BY table_name, ordinal_position",
        )
        .expect("columns");
    let expected = "deals.id bigint NO\ndeals.owner_id bigint NO\ndeals.title text NO\ndeals.amount_cents bigint NO\n\
        deals.stage text NO\ndeals.created_at timestamp with time zone NO\ndeals.updated_at timestamp with time zone NO\n\
        users.id bigint NO\nusers.email text NO\nusers.name text NO\nusers.password_hash text NO\nusers.totp_secret text YES\n\
        users.recovery_codes text YES\nusers.created_at timestamp with time zone NO\nworld.id integer NO\nworld.randomnumber integer NO\n";
    assert_eq!(cols, expected);
    // Constraints: primary keys, the unique email, the foreign key.
    let cons = one(&pg, "crm", "SELECT string_agg(conrelid::regclass::text || ':' || contype::text, ',' ORDER BY conrelid::regclass::text, contype) FROM pg_constraint WHERE connamespace = 'public'::regnamespace");
    assert_eq!(cons, "deals:f,deals:p,users:p,users:u,world:p");

    // The app role can write, and the sequence continues after the seeded ids.
    assert_eq!(
        one(&pg, "crm", "SET ROLE crm; INSERT INTO deals (owner_id, title, amount_cents, stage, created_at, updated_at) VALUES (1, 't', 1, 'won', now(), now()) RETURNING id"),
        "1001"
    );
    pg.stop().expect("stop");
}

#[test]
fn seed_is_identical_every_time() {
    let _servers = starts_servers();
    let a = seed::seed_sql();
    assert_eq!(a, seed::seed_sql(), "two renderings in one process differ");
    let pg = TempPostgres::start().expect("start PostgreSQL");
    pg.create_seeded_db("one").expect("seed one");
    pg.create_seeded_db("two").expect("seed two");
    let one_md5 = one(&pg, "one", TABLE_MD5_SQL);
    let two_md5 = one(&pg, "two", TABLE_MD5_SQL);
    assert_eq!(one_md5, two_md5, "two seeded databases differ");
    // Pinned: the same data on every run and machine (see TABLE_MD5_SQL).
    assert_eq!(one_md5, PINNED_MD5, "the seed data changed; if on purpose, update PINNED_MD5");
}

const PINNED_MD5: &str = "533ce5f1b8563500b80181dec88e4243 5c1c510e29c45112d6d3caffa9ce9108 eff166de729e57b42c3466c313f74a48";

#[test]
fn bad_database_names_are_rejected_before_any_sql() {
    let _servers = starts_servers();
    let pg = TempPostgres::start().expect("start PostgreSQL");
    for bad in ["", "Crm", "1db", "a-b", "x; DROP DATABASE postgres", &"a".repeat(64)] {
        let err = pg.create_seeded_db(bad).expect_err(bad);
        assert!(matches!(err, bench::pg::PgError::InvalidName(_)), "{bad}: {err}");
    }
    // The same name twice is PostgreSQL's error, passed through with its text.
    pg.create_seeded_db("dup").expect("first");
    let err = pg.create_seeded_db("dup").expect_err("second").to_string();
    assert!(err.contains("already exists"), "{err}");
}

#[test]
fn drop_stops_every_server_process_and_removes_the_directory() {
    let _servers = starts_servers();
    let pg = TempPostgres::start().expect("start PostgreSQL");
    let pid = pg.pid().expect("running");
    let dir: PathBuf = pg.dir().to_path_buf();
    let port = pg.port();
    let kids = children_of(pid);
    assert!(kids.len() >= 3, "postmaster {pid} has its background processes: {kids:?}");
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(), "listening on 127.0.0.1:{port}");
    drop(pg);
    assert!(!alive(pid), "postmaster {pid} still running after drop");
    for k in &kids {
        assert!(!alive(*k), "backend {k} still running after drop");
    }
    assert!(!dir.exists(), "{} left behind", dir.display());
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err(), "port {port} still accepts");
}

#[test]
fn drop_during_a_panic_still_stops_the_server() {
    let _servers = starts_servers();
    let (tx, rx) = std::sync::mpsc::channel();
    let result = std::thread::spawn(move || {
        let pg = TempPostgres::start().expect("start PostgreSQL");
        tx.send((pg.pid().expect("running"), pg.dir().to_path_buf())).expect("send");
        panic!("test panic while the server runs");
    })
    .join();
    assert!(result.is_err(), "the thread panicked");
    let (pid, dir) = rx.recv().expect("pid");
    assert!(!alive(pid), "postmaster {pid} survived the panic");
    assert!(!dir.exists(), "{} left behind", dir.display());
}

/// `psql` without the caller's libpq environment (PGOPTIONS, PGHOST, ...).
fn psql_cmd() -> std::process::Command {
    let mut c = std::process::Command::new("psql");
    for (k, _) in std::env::vars() {
        if k.starts_with("PG") {
            c.env_remove(k);
        }
    }
    c
}

/// The `bench-pg` binary, with stdin piped; returns the child and the URL it printed.
fn start_bench_pg() -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_bench-pg"))
        .args(["--db", "handmade"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn bench-pg");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("read the URL");
    (child, line.trim().to_string())
}

/// The postmaster started by `parent` and its temporary directory (from `-D DIR/data`).
fn postmaster_of(parent: u32) -> (u32, PathBuf) {
    for pid in children_of(parent) {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<String> = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        if args.first().is_some_and(|a| a.ends_with("/postgres")) {
            let data = args.iter().skip_while(|a| *a != "-D").nth(1).expect("-D DIR");
            return (pid, PathBuf::from(data).parent().expect("root").to_path_buf());
        }
    }
    panic!("no postmaster among the children of {parent}");
}

#[test]
fn bench_pg_serves_the_seed_over_scram_and_stops_at_stdin_eof() {
    let _servers = starts_servers();
    let (mut child, url) = start_bench_pg();
    assert!(url.starts_with("postgres://crm:crm@127.0.0.1:") && url.ends_with("/handmade"), "{url}");
    let (pm, dir) = postmaster_of(child.id());
    // Password authentication over TCP, as the app connects (psql here, outside our code).
    let out = psql_cmd()
        .args(["-X", "-A", "-t", &url, "-c", "SELECT current_user, (SELECT count(*) FROM deals), (SELECT count(*) FROM world)"])
        .output()
        .expect("psql");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "crm|1000|10000");
    // A wrong password is refused: the loopback is not `trust`.
    let wrong = url.replace("crm:crm@", "crm:nope@");
    let out = psql_cmd().args(["-X", &wrong, "-c", "SELECT 1"]).output().expect("psql");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("password authentication failed"), "{}", String::from_utf8_lossy(&out.stderr));

    drop(child.stdin.take());
    let status = child.wait().expect("wait");
    assert!(status.success(), "{status}");
    assert!(!alive(pm), "postmaster {pm} still running");
    assert!(!dir.exists(), "{} left behind", dir.display());
}

#[test]
fn bench_pg_stops_at_sigterm_while_its_stdin_stays_open() {
    let _servers = starts_servers();
    // As in .github/workflows/profile.yml: `sleep infinity | bench-pg`, stopped by a signal.
    let (mut child, _url) = start_bench_pg();
    let (pm, dir) = postmaster_of(child.id());
    let _stdin = child.stdin.take().expect("stdin");
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("bench-pg still running 30 s after SIGTERM with its stdin open");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    assert!(!alive(pm), "postmaster {pm} still running");
    assert!(!dir.exists(), "{} left behind", dir.display());
}

#[test]
fn a_killed_owner_takes_its_server_down_and_the_directory_is_reclaimed() {
    let _alone = SERVERS.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    let (mut child, _url) = start_bench_pg();
    let (pm, dir) = postmaster_of(child.id());
    child.kill().expect("SIGKILL bench-pg");
    child.wait().expect("reap");
    // PR_SET_PDEATHSIG: the kernel sends the postmaster SIGQUIT.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while alive(pm) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(!alive(pm), "postmaster {pm} outlived its owner");
    assert!(dir.exists(), "nobody ran Drop, so the directory is still there");
    assert!(bench::pg::remove_stale_dirs(dir.parent().expect("parent")) >= 1);
    assert!(!dir.exists(), "{} not reclaimed", dir.display());
}
