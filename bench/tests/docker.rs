//! The offline image build and a host-network container, against the real Docker engine
//! (started by scripts/setup; CI runs this as root).

use test_support::{skip_unless, Need};
use std::path::Path;
use std::time::Duration;

use bench::docker::{self, RunSpec};

#[tokio::test]
async fn an_imported_rootfs_runs_as_a_container_on_the_host_network() {
    if skip_unless(&[Need::Root, Need::Docker]) {
        return;
    }
    let d = docker::connect().await.expect("the Docker engine must run (scripts/setup starts it)");
    // /bin/sleep is dynamically linked: the image holds it, libc and the loader, nothing else.
    let image = docker::build_image(&d, Path::new("/bin/sleep"), "/bin/sleep", "profiler-test-sleep", "t1").await.unwrap();
    assert_eq!(image, "profiler-test-sleep:t1");
    let name = format!("profiler-test-{}", std::process::id());
    let spec = RunSpec { name: name.clone(), image, cmd: vec!["/bin/sleep".into(), "30".into()], env: vec![], cpuset_cpus: Some("0".into()), memory_bytes: None };
    let running = docker::run_container(&d, &spec).await.unwrap();
    assert!(running.pid > 1, "State.Pid {}", running.pid);
    // The process really is `sleep` in another mount namespace: its exe resolves inside the
    // container's root, and it shares the host's network namespace (--network host).
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", running.pid)).unwrap();
    assert_eq!(comm.trim(), "sleep");
    let netns_container = std::fs::read_link(format!("/proc/{}/ns/net", running.pid)).unwrap();
    let netns_host = std::fs::read_link("/proc/self/ns/net").unwrap();
    assert_eq!(netns_container, netns_host, "the container must share the host network namespace");
    assert!(docker::running_names(&d).await.unwrap().contains(&name));
    // Starting it again from this process replaces this process's own container.
    let again = docker::run_container(&d, &spec).await.unwrap();
    assert_ne!(again.id, running.id);

    // A container of the same kind that no bench started (no owner label) is never replaced.
    let foreign = format!("profiler-test-foreign-{}", std::process::id());
    let status = std::process::Command::new("docker")
        .args(["run", "-d", "--network", "host", "--name", &foreign, "profiler-test-sleep:t1", "/bin/sleep", "30"])
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let err = docker::run_container(&d, &RunSpec { name: foreign.clone(), ..spec.clone() }).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("a container named {foreign} exists and was not started by profiler bench: pass another --name, or remove it first (docker rm -f {foreign})")
    );
    assert!(docker::running_names(&d).await.unwrap().contains(&foreign), "the foreign container was touched");
    // The clean-up after a failed bench removes only its own container.
    docker::remove_own_container(&d, &foreign).await.unwrap();
    assert!(docker::running_names(&d).await.unwrap().contains(&foreign), "the clean-up removed the foreign container");
    docker::remove_container(&d, &foreign).await.unwrap();
    docker::remove_container(&d, &name).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!docker::running_names(&d).await.unwrap().contains(&name));
    // Removing an absent container is not an error.
    docker::remove_container(&d, &name).await.unwrap();
}
