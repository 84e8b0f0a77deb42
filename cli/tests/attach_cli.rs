//! `profiler attach` end to end through the binary: a busy known-answer process is profiled
//! for 2 s, the rendered files are written, the folded stacks give the known shares; bad
//! targets give one clear error line and exit status 2.

use test_support::{skip_unless, Need};

#[path = "../../agent/tests/attach_support/mod.rs"]
mod attach_support;

use std::process::Command;

use attach_support::{example, Spawned};

fn profiler() -> Command {
    Command::new(env!("CARGO_BIN_EXE_profiler"))
}

#[test]
fn attach_by_pid_writes_the_report() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let mut child = Spawned::new(&example("ka_two_hot_functions"), &["30"]);
    assert_eq!(child.read_line(), "ready");
    let out = tempfile::tempdir().unwrap();
    let output = profiler()
        .args(["attach", "--pid", &child.pid().to_string(), "--duration", "2", "--frequency", "199", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", output.status);
    assert!(stdout.contains(&format!("profile of pid {}", child.pid())), "{stdout}");
    assert!(stdout.contains("on-CPU samples:"), "no summary:\n{stdout}");
    assert!(stdout.contains(&format!("files: {}", out.path().display())), "{stdout}");
    for file in ["profile.json", "flamegraph.svg", "stacks.folded", "offcpu.svg", "index.html"] {
        let path = out.path().join(file);
        assert!(path.is_file() && std::fs::metadata(&path).unwrap().len() > 0, "{file} missing or empty");
    }
    // The report page: the findings table with this target's run, then both flamegraphs
    // beside it (report_page.rs checks the page in a browser).
    let page = std::fs::read_to_string(out.path().join("index.html")).unwrap();
    assert!(page.contains(&format!(r#"<tr class="run"><th colspan="7">pid {} "#, child.pid())), "no run row in the findings table");
    assert!(page.contains(r#"data="flamegraph.svg""#) && page.contains(r#"data="offcpu.svg""#), "flamegraphs not embedded");
    // A busy loop never blocks: the off-CPU stacks exist and are empty.
    assert!(out.path().join("offcpu.folded").is_file());
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(out.path().join("profile.json")).unwrap()).unwrap();
    assert_eq!(json["meta"]["frequency_hz"], 199);
    assert_eq!(json["meta"]["target"], format!("pid {}", child.pid()));
    assert!(json["meta"]["partial"].is_null());
    let folded = std::fs::read_to_string(out.path().join("stacks.folded")).unwrap();
    let samples = |name: &str| -> u64 {
        folded
            .lines()
            .filter(|l| l.contains(name))
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
            .sum()
    };
    let (a, b) = (samples("profiler_ka_hot_75"), samples("profiler_ka_hot_25"));
    let share = 100.0 * a as f64 / (a + b) as f64;
    eprintln!("folded: hot_75 {a}, hot_25 {b} samples ({share:.1}%)");
    // 2 s at 199 Hz: about 400 samples, so a wider band than the 4 s library test.
    assert!((share - 75.0).abs() <= 8.0, "hot_75 share {share:.1}%");
}

#[test]
fn bad_targets_fail_with_one_line() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let output = profiler().args(["attach", "--pid", "4294967290", "--duration", "1"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim(), "profiler: error: cannot resolve pid 4294967290: no process with pid 4294967290");

    let output = profiler().args(["attach", "--container", "profiler-no-such-container", "--duration", "1"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    let docker_up = std::process::Command::new("docker").arg("info").output().is_ok_and(|o| o.status.success());
    if docker_up {
        assert!(stderr.contains("no container named \"profiler-no-such-container\"; running containers:"), "{stderr}");
    } else {
        assert!(stderr.contains("cannot reach the Docker engine"), "{stderr}");
    }

    let output = profiler().args(["attach", "--cgroup", "/no/such/cgroup"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("is not a cgroup v2 directory"));

    // No target at all: clap's usage error.
    let output = profiler().args(["attach"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn sigterm_writes_what_was_collected() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let mut child = Spawned::new(&example("ka_two_hot_functions"), &["30"]);
    assert_eq!(child.read_line(), "ready");
    let out = tempfile::tempdir().unwrap();
    let attach = profiler()
        .args(["attach", "--pid", &child.pid().to_string(), "--duration", "30", "--frequency", "199", "--out"])
        .arg(out.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(3));
    // SAFETY: kill(2) on the pid of our own child.
    assert_eq!(unsafe { libc::kill(attach.id() as i32, libc::SIGTERM) }, 0);
    let started = std::time::Instant::now();
    let output = attach.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "exit {:?}\nstderr:\n{stderr}", output.status);
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "took {:?} after SIGTERM", started.elapsed());
    assert!(stderr.contains("stopping; draining and writing what was collected"), "{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(out.path().join("profile.json")).unwrap()).unwrap();
    assert_eq!(json["meta"]["partial"], "interrupted (Ctrl-C or SIGTERM)");
    let samples: u64 = json["on_cpu"].as_array().unwrap().iter().map(|c| c["count"].as_u64().unwrap()).sum();
    // About 3 s of a busy thread at 199 Hz before the signal.
    assert!(samples > 200, "{samples} samples");
    assert!(out.path().join("flamegraph.svg").is_file());
}

#[test]
fn an_unwritable_out_fails_before_collecting() {
    let mut child = Spawned::new(&example("ka_two_hot_functions"), &["30"]);
    assert_eq!(child.read_line(), "ready");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let started = std::time::Instant::now();
    let output = profiler().args(["attach", "--pid", &child.pid().to_string(), "--duration", "30", "--out"]).arg(&file).output().unwrap();
    // Refused before the 30 s collection.
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "took {:?}", started.elapsed());
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim(), format!("profiler: error: cannot write into {}: it is a file, not a folder", file.display()));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
}

/// A `--pid` target that exits mid-run: the run stops, says it is partial, and the target's
/// frames still have their names (symbolized from the mappings recorded while it ran, after
/// its `/proc/PID/maps` is gone). Known answer: the 75/25 split of `ka_two_hot_functions`.
#[test]
fn a_target_that_exits_mid_run_keeps_its_names() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let mut child = Spawned::new(&example("ka_two_hot_functions"), &["3"]);
    assert_eq!(child.read_line(), "ready");
    let out = tempfile::tempdir().unwrap();
    let output = profiler()
        .args(["attach", "--pid", &child.pid().to_string(), "--duration", "30", "--frequency", "199", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "exit {:?}\nstderr:\n{stderr}", output.status);
    // The child is a zombie until reaped here: no maps, no map_files any more.
    assert!(child.child.wait().unwrap().success());
    assert!(stderr.contains("the target exited"), "{stderr}");
    assert!(!stderr.contains("cannot symbolize"), "{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(out.path().join("profile.json")).unwrap()).unwrap();
    assert_eq!(json["meta"]["partial"], "target exited");
    let md = std::fs::read_to_string(out.path().join("ranking.md")).unwrap();
    assert!(md.contains("**PARTIAL: target exited**"), "ranking.md does not say the run is partial:\n{md}");
    let folded = std::fs::read_to_string(out.path().join("stacks.folded")).unwrap();
    let samples = |name: &str| -> u64 {
        folded.lines().filter(|l| l.contains(name)).map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap()).sum()
    };
    let all = samples("");
    let (a, b) = (samples("profiler_ka_hot_75"), samples("profiler_ka_hot_25"));
    eprintln!("folded: {all} samples, hot_75 {a}, hot_25 {b}");
    // Up to 3 s of a busy thread at 199 Hz (532 samples alone, 227 beside a full build);
    // nearly all of it in the two functions.
    assert!(all > 100, "{all} samples");
    assert!(a + b >= all * 9 / 10, "only {} of {all} samples named in the two functions:\n{folded}", a + b);
    let share = 100.0 * a as f64 / (a + b) as f64;
    assert!((share - 75.0).abs() <= 8.0, "hot_75 share {share:.1}%");
}

/// Not root: one line, exit 2, and the `--out` folder this run created is removed again
/// (it stays empty: nothing was collected). The binary runs as `nobody` from a copy in a
/// folder that user can read.
#[test]
fn not_root_fails_with_one_line_and_leaves_no_folder() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let mut child = Spawned::new(&example("ka_two_hot_functions"), &["30"]);
    assert_eq!(child.read_line(), "ready");
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let binary = dir.path().join("profiler");
    std::fs::copy(env!("CARGO_BIN_EXE_profiler"), &binary).unwrap();
    let out = dir.path().join("new-report");
    let output = attach_support::spawn_copied(
        Command::new(&binary)
            .args(["attach", "--pid", &child.pid().to_string(), "--duration", "5", "--out"])
            .arg(&out)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .uid(65534)
            .gid(65534),
    )
    .wait_with_output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("loading BPF programs needs root"), "{stderr}");
    assert!(!out.exists(), "{} was left behind", out.display());
}

/// `--duration 0` runs until Ctrl-C: that is its planned end, so the profile is not partial.
#[test]
fn an_unbounded_run_ended_by_ctrl_c_is_complete() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let mut child = Spawned::new(&example("ka_two_hot_functions"), &["30"]);
    assert_eq!(child.read_line(), "ready");
    let out = tempfile::tempdir().unwrap();
    let attach = profiler()
        .args(["attach", "--pid", &child.pid().to_string(), "--duration", "0", "--out"])
        .arg(out.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(2));
    // SAFETY: kill(2) on the pid of our own child.
    assert_eq!(unsafe { libc::kill(attach.id() as i32, libc::SIGINT) }, 0);
    let output = attach.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "exit {:?}\nstderr:\n{stderr}", output.status);
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(out.path().join("profile.json")).unwrap()).unwrap();
    assert!(json["meta"]["partial"].is_null(), "{}", json["meta"]["partial"]);
    assert!(!String::from_utf8_lossy(&output.stdout).contains("PARTIAL"));
}
