//! `scripts/profile-pr` end to end, at smoke size: a throwaway git repository holds
//! `field-cases/pr-service` as its base commit and, as its head, the same service with
//! `COMPILE_PER_REQUEST = true` (its regex built on every request). The script builds both
//! revisions from source, runs each under wrk (2 measured runs of 3 s per side, alternated, and
//! one profiled run), and `profiler diff`s them: the diff must name `construction-per-request`
//! as a change beyond noise, and the script must exit 1 (a regression beyond
//! `--fail-on-regression`), leaving no process, cgroup or worktree behind. Bad input gives one
//! line and exit status 2.
//!
//! Needs root (the script attaches eBPF programs and makes a cgroup), wrk, git, and the crates
//! of the workspace's `regex` in cargo's cache (the service builds offline).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use test_support::{skip_unless, Need};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/profile-pr")
}

fn run(args: &[&str]) -> Output {
    Command::new(script()).args(args).env("PATH", path_with_profiler()).output().unwrap()
}

/// PATH with the profiler under test first.
fn path_with_profiler() -> String {
    let bin = Path::new(env!("CARGO_BIN_EXE_profiler")).parent().unwrap().display().to_string();
    format!("{bin}:{}", std::env::var("PATH").unwrap_or_default())
}

fn git(dir: &Path, args: &[&str]) {
    let o = Command::new("git")
        .args(["-c", "user.name=profile-pr test", "-c", "user.email=test@localhost", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The repository: base = pr-service as it is here, head = one line changed.
fn service_repo(dir: &Path) -> PathBuf {
    let repo = dir.join("service");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../field-cases/pr-service");
    std::fs::create_dir_all(repo.join("src")).unwrap();
    for f in ["Cargo.toml", "Cargo.lock", "src/main.rs"] {
        std::fs::copy(src.join(f), repo.join(f)).unwrap();
    }
    std::fs::write(repo.join(".gitignore"), "/target\n/pr-service-bin\n").unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "base: the regex is built once"]);
    let main = repo.join("src/main.rs");
    let text = std::fs::read_to_string(&main).unwrap();
    let from = "const COMPILE_PER_REQUEST: bool = false;";
    assert!(text.contains(from), "pr-service lost its switch `{from}`");
    std::fs::write(&main, text.replace(from, "const COMPILE_PER_REQUEST: bool = true;")).unwrap();
    git(&repo, &["commit", "-qam", "head: the regex is built per request"]);
    repo
}

#[test]
fn the_diff_of_a_pull_request_names_its_known_cost() {
    // scripts/profile-pr attaches eBPF programs.
    if skip_unless(&[Need::Root, Need::Wrk]) {
        return;
    }
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let repo = service_repo(dir.path());
    let out = dir.path().join("out");
    let port = free_port();
    let target = dir.path().join("cargo-target");
    // Both sides build into one cargo target folder (the dependencies are compiled once), so
    // each copies its binary into its own worktree.
    let build = format!(
        "cargo build --release --offline --locked --target-dir '{}' && cp '{}/release/pr-service' ./pr-service-bin",
        target.display(),
        target.display()
    );
    let start = format!("./pr-service-bin --listen 127.0.0.1:{port}");
    let ready = format!("http://127.0.0.1:{port}/health");
    let wrk = format!("-t1 -c4 http://127.0.0.1:{port}/parse");
    let mut args = vec![
        "--repo", repo.to_str().unwrap(), "--base", "HEAD~1", "--head", "HEAD", "--build", &build, "--start", &start,
        "--ready", &ready, "--wrk", &wrk, "--runs", "2", "--duration", "3", "--warmup", "1", "--out", out.to_str().unwrap(),
    ];
    if std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2 {
        args.extend(["--app-cpus", "0", "--load-cpus", "1"]);
    }
    let o = run(&args);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    let elapsed = started.elapsed().as_secs_f64();
    eprintln!("profile_pr: scripts/profile-pr took {elapsed:.1} s\n{stderr}");
    assert_eq!(o.status.code(), Some(1), "exit status 1 (a regression) expected\nstdout:\n{stdout}\nstderr:\n{stderr}");

    let md = std::fs::read_to_string(out.join("diff/diff.md")).unwrap();
    eprintln!("{}", md.lines().filter(|l| l.contains("construction-per-request") || l.contains("| req/s |")).collect::<Vec<_>>().join("\n"));
    assert!(md.contains("the check fails"), "{md}");
    let beyond = md.split("Changes beyond noise in the profile").nth(1).unwrap_or_else(|| panic!("no change beyond noise:\n{md}"));
    assert!(beyond.contains("- cost `construction-per-request`: +"), "the known cost is not among the changes beyond noise:\n{md}");
    let row = md.lines().find(|l| l.starts_with("| `construction-per-request` |")).unwrap_or_else(|| panic!("no cost row:\n{md}"));
    assert!(row.starts_with("| `construction-per-request` | 0 |") && row.ends_with("| **worse, beyond noise** |"), "{row}");
    assert!(md.contains("| req/s |") && md.contains("2 measured runs BASE / 2 HEAD"), "the measured runs are not compared:\n{md}");
    // Each side's own ranking: the head names the cost, the base does not.
    let ranking = |side: &str| std::fs::read_to_string(out.join(side).join("ranking.md")).unwrap();
    assert!(ranking("head").contains("`construction-per-request`"));
    assert!(!ranking("base").contains("`construction-per-request`"));
    for f in ["base/runs.json", "head/runs.json", "diff/diff.json", "diff/diff.svg", "diff/diff-base.svg", "head/flamegraph.svg"] {
        assert!(std::fs::metadata(out.join(f)).is_ok_and(|m| m.len() > 0), "{f} missing or empty");
    }
    let runs: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("head/runs.json")).unwrap()).unwrap();
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(2), "{runs}");

    // Nothing left behind: the worktrees, the cgroup, the service.
    let worktrees = Command::new("git").args(["worktree", "list"]).current_dir(&repo).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&worktrees.stdout).lines().count(), 1, "{}", String::from_utf8_lossy(&worktrees.stdout));
    assert!(!out.join("src/base").exists() && !out.join("src/head").exists());
    let cgroups = std::fs::read_to_string("/proc/mounts").unwrap();
    if let Some(mnt) = cgroups.lines().find(|l| l.split(' ').nth(2) == Some("cgroup2")).and_then(|l| l.split(' ').nth(1)) {
        let left: Vec<String> = std::fs::read_dir(mnt)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .filter(|n| n.starts_with("profile-pr-service-"))
            .collect();
        assert!(left.is_empty(), "cgroups left: {left:?}");
    }
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err(), "the service still listens on {port}");
}

#[test]
fn bad_input_gives_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("r");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "one"]);
    let r = repo.to_str().unwrap();
    let out = dir.path().join("out");
    let o = out.to_str().unwrap();
    let good = ["--repo", r, "--base", "HEAD", "--build", "true", "--start", "sleep 1", "--ready", "http://127.0.0.1:9/", "--out", o];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--repo", r, "--base", "HEAD"], "--build is required"),
        (good.to_vec(), "give the load: --wrk 'ARGS URL' or --load CMD"),
        ([&good[..], &["--wrk", "-c1 http://example.com/"]].concat(), "--wrk URL 'http://example.com/' is not on 127.0.0.1 or localhost"),
        ([&good[..], &["--wrk", "-c1 -d 60s http://127.0.0.1:9/"]].concat(), "--wrk must not set -d/--duration"),
        ([&good[..], &["--load", "true", "--duration", "ten"]].concat(), "--duration must be a whole number of seconds >= 1, got 'ten'"),
        ([&good[..], &["--load", "true", "--ready", "http://10.0.0.1/"]].concat(), "--ready must be an http:// URL on 127.0.0.1 or localhost"),
        ([&good[..], &["--load", "true", "--container", "app"]].concat(), "--container needs --stop CMD"),
        ([&good[..], &["--load", "true", "--frobnicate"]].concat(), "unknown argument '--frobnicate'"),
    ];
    for (args, line) in cases {
        let o = run(&args);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.lines().count() == 1 && stderr.starts_with(&format!("profile-pr: error: {line}")), "{args:?}: {stderr}");
    }
    // Checks that need a root shell come after these; the revision and --out checks too.
    if Need::Root.met() {
        for (extra, line) in [
            (vec!["--load", "true", "--base", "no-such-rev"], "--base 'no-such-rev' is not a commit of"),
            (vec!["--load", "true", "--repo", "/"], "--repo / is not a git repository"),
        ] {
            let o = run(&[&good[..], &extra[..]].concat());
            let stderr = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{stderr}");
            assert!(stderr.lines().count() == 1 && stderr.contains(line), "{stderr}");
        }
    }
}
