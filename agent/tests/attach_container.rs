//! Known answer (a) in a Docker container, by container name: the same two-hot-functions
//! program gives the same shares, the kernel filter is the container's cgroup v2 id (the
//! inode of `<cgroup2 mount>/docker/<full id>`, computed here independently), and only the
//! container's process is sampled.
//!
//! The image is built offline: `docker import` of a root file system holding the example
//! binary and the libraries `ldd` lists. The container runs with `--network host` and is
//! removed afterwards, as is the image.

use test_support::{skip_unless, Need};

mod attach_support;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use attach_support::{example, first_frame_in, function_ranges};
use profiler::collect::{self, Options, StopReason, Unwind};
use profiler::target::{cgroup2_mount, Filter, Target, TargetError};

const IMAGE: &str = "profiler-attach-test:ka";
/// Prime and far from multiples of the 250 Hz scheduler tick, so samples do not beat with it.
const FREQUENCY_HZ: u64 = 397;

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().expect("running docker (is docker.io installed?)");
    assert!(out.status.success(), "docker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Root file system = the binary at `/NAME` + everything `ldd` lists, imported as IMAGE.
fn build_image(binary: &Path) {
    let root = tempfile::tempdir().expect("tempdir");
    let name = binary.file_name().unwrap();
    std::fs::copy(binary, root.path().join(name)).expect("copy binary");
    let ldd = Command::new("ldd").arg(binary).output().expect("ldd");
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        let Some(lib) = line.split_whitespace().find(|w| w.starts_with('/')) else { continue };
        let dest = root.path().join(lib.trim_start_matches('/'));
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(lib, &dest).unwrap_or_else(|e| panic!("copy {lib}: {e}"));
    }
    let tar = Command::new("tar").arg("-C").arg(root.path()).args(["-c", "."]).stdout(Stdio::piped()).spawn().expect("tar");
    let status = Command::new("docker")
        .args(["import", "-", IMAGE])
        .stdin(tar.stdout.expect("tar stdout"))
        .stdout(Stdio::null())
        .status()
        .expect("docker import");
    assert!(status.success(), "docker import failed");
}

struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rm", "-f", &self.0]).output();
        let _ = Command::new("docker").args(["rmi", IMAGE]).output();
    }
}

#[test]
fn on_cpu_shares_by_container_name() {
    if skip_unless(&[Need::Root, Need::Docker]) {
        return;
    }
    let exe = example("ka_two_hot_functions");
    build_image(&exe);
    let name = format!("profiler-attach-test-{}", std::process::id());
    let container = Container(name.clone());
    let id = docker(&["run", "-d", "--rm", "--network", "host", "--name", &name, IMAGE, "/ka_two_hot_functions", "30"]);
    let host_pid: u32 = docker(&["inspect", "-f", "{{.State.Pid}}", &name]).parse().expect("State.Pid");
    // Let it print `ready` (1 ms warm-up) and settle.
    std::thread::sleep(Duration::from_millis(300));

    // Unknown names list the running containers.
    match Target::Container("profiler-no-such-container".into()).resolve() {
        Err(err @ TargetError::ContainerNotFound { .. }) => {
            assert!(err.to_string().contains(&name), "{err}");
        }
        other => panic!("expected ContainerNotFound, got {other:?}"),
    }

    let mut target = Target::Container(name.clone()).resolve().expect("resolve container");
    // Ground truth for the filter: the inode of the container's cgroup v2 directory.
    let dir = cgroup2_mount().unwrap().join("docker").join(&id);
    let inode = std::fs::metadata(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).ino();
    assert_eq!(target.filter, Filter::Cgroup { id: inode, level: 2 });
    assert_eq!(target.main_pid, host_pid);
    assert_eq!(target.pids().unwrap(), [host_pid].into());
    // Files as the container sees them: its root holds only what the image put there.
    assert!(target.path_in_root("/ka_two_hot_functions").unwrap().is_file());
    assert!(!target.path_in_root("/etc/passwd").unwrap().exists());
    assert!(target.path_in_root("/../etc/passwd").is_err());

    let options = Options { frequency_hz: FREQUENCY_HZ, offcpu: false, syscalls: false, wire: false, unwind: Unwind::Fp, ..Default::default() };
    let (profile, reason) = collect::run(&mut target, &options, Duration::from_secs(4), &AtomicBool::new(false), |_| {}).unwrap();
    assert_eq!(reason, StopReason::Deadline);
    assert_eq!(profile.meta.cgroup_id, Some(inode));
    assert_eq!(profile.meta.target, format!("container {name}"));
    assert!(profile.on_cpu.iter().all(|s| s.pid == host_pid), "only the container's process is sampled");
    let process = profile.processes.iter().find(|p| p.pid == host_pid).expect("process recorded");
    assert_eq!(process.exe, "/ka_two_hot_functions", "exe as the container sees it");

    // Samples vs the cgroup's own CPU accounting (cpu.stat usage_usec).
    let samples: u64 = profile.on_cpu.iter().map(|s| s.count).sum();
    let cpu_ns = profile.meta.target_cpu_ns.expect("cgroup CPU time");
    let expected = cpu_ns as f64 * FREQUENCY_HZ as f64 / 1e9;
    eprintln!("samples {samples}, container CPU {} ms, expected {expected:.0}", cpu_ns / 1_000_000);
    assert!(cpu_ns > 1_000_000_000, "container used only {cpu_ns} ns of CPU in 4 s");
    assert!((samples as f64 - expected).abs() <= 0.15 * expected);

    let ranges = function_ranges(&exe, host_pid, "/ka_two_hot_functions", &["profiler_ka_hot_75", "profiler_ka_hot_25"]);
    let mut hits = [0u64; 2];
    for stack in &profile.on_cpu {
        if let Some(i) = first_frame_in(&stack.user, &ranges) {
            hits[i] += stack.count;
        }
    }
    let attributed = hits[0] + hits[1];
    let a = 100.0 * hits[0] as f64 / attributed as f64;
    eprintln!("hot_75 {a:.1}%, attributed {attributed} of {samples}");
    assert!(attributed as f64 >= 0.9 * samples as f64);
    assert!((a - 75.0).abs() <= 5.0, "hot_75 got {a:.1}%");
    drop(container);
}
