//! Docker images built offline and containers run on the host network, through bollard.
//!
//! There is no registry here: [`rootfs_tar`] packs a binary and every shared library `ldd`
//! lists (plus the dynamic loader) into a root file system tar, and [`import_image`] hands it
//! to the engine as `docker import` does (`POST /images/create?fromSrc=-`, Docker Engine API
//! 1.41). [`run_container`] starts it with `--network host` semantics (the only network on
//! this machine is loopback), pinned to a CPU set.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, CreateImageOptionsBuilder, InspectContainerOptions, ListContainersOptionsBuilder,
    LogsOptionsBuilder, RemoveContainerOptionsBuilder, StartContainerOptions,
};
use bollard::Docker;
use futures_util::StreamExt;

/// Errors of image building and container management.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    /// The engine did not answer on its socket.
    #[error("the Docker engine does not answer ({0}); start it with `scripts/setup` (dockerd --bridge=none --iptables=false)")]
    NoEngine(#[source] bollard::errors::Error),
    /// An engine call failed.
    #[error("docker: {context}: {source}")]
    Api {
        /// What was being done.
        context: String,
        /// The engine's error.
        #[source]
        source: bollard::errors::Error,
    },
    /// Reading the binary or a library failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A container of that name exists that this process may not replace ([`replaceable`]).
    #[error("a container named {name} exists and {owner}: pass another --name, or remove it first (docker rm -f {name})")]
    InUse {
        /// The container name.
        name: String,
        /// Whose it is.
        owner: String,
    },
    /// `ldd` failed or reported a missing library.
    #[error("ldd {binary}: {message}")]
    Ldd {
        /// The binary.
        binary: PathBuf,
        /// What went wrong.
        message: String,
    },
}

/// Connects to the local engine and negotiates the API version (Debian's engine 20.10 speaks
/// API 1.41; bollard's default is newer).
pub async fn connect() -> Result<Docker, DockerError> {
    let docker = Docker::connect_with_local_defaults().map_err(DockerError::NoEngine)?;
    let docker = docker.negotiate_version().await.map_err(DockerError::NoEngine)?;
    docker.ping().await.map_err(DockerError::NoEngine)?;
    Ok(docker)
}

/// The shared libraries `binary` loads, as absolute paths, from `ldd`'s output
/// (`libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)` and the loader line
/// `/lib64/ld-linux-x86-64.so.2 (0x...)`); `linux-vdso.so.1` has no file and is skipped.
pub fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>, DockerError> {
    let out = Command::new("ldd").arg(binary).output().map_err(|e| DockerError::Io { path: "ldd".into(), source: e })?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        // A static binary: ldd says "not a dynamic executable" and exits 1.
        if String::from_utf8_lossy(&out.stderr).contains("not a dynamic executable") || text.contains("statically linked") {
            return Ok(Vec::new());
        }
        return Err(DockerError::Ldd { binary: binary.into(), message: String::from_utf8_lossy(&out.stderr).trim().into() });
    }
    let mut libs = BTreeSet::new();
    for line in text.lines() {
        let line = line.trim();
        if line.contains("=> not found") {
            return Err(DockerError::Ldd { binary: binary.into(), message: format!("missing library: {line}") });
        }
        let path = match line.split_once("=>") {
            Some((_, rhs)) => rhs.trim().split_whitespace().next().unwrap_or(""),
            None => line.split_whitespace().next().unwrap_or(""),
        };
        if path.starts_with('/') {
            libs.insert(PathBuf::from(path));
        }
    }
    Ok(libs.into_iter().collect())
}

/// Packs a root file system: `binary` at `dest` (e.g. `/usr/local/bin/target-app`), every
/// library from [`shared_libraries`] at the path `ldd` names (symbolic links resolved into
/// regular files), a minimal `/etc/passwd` and `/etc/group`, and an empty `/tmp`.
/// Returns the tar bytes.
pub fn rootfs_tar(binary: &Path, dest: &str) -> Result<Vec<u8>, DockerError> {
    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DockerError + '_ {
        move |source| DockerError::Io { path: path.to_path_buf(), source }
    }
    let mut tar = tar::Builder::new(Vec::new());
    let add = |tar: &mut tar::Builder<Vec<u8>>, path_in_image: &str, data: &[u8], mode: u32| {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(mode);
        header.set_mtime(0);
        header.set_cksum();
        tar.append_data(&mut header, path_in_image.trim_start_matches('/'), data)
    };
    let bin = std::fs::read(binary).map_err(io(binary))?;
    add(&mut tar, dest, &bin, 0o755).map_err(io(binary))?;
    for lib in shared_libraries(binary)? {
        let data = std::fs::read(&lib).map_err(io(&lib))?;
        add(&mut tar, &lib.to_string_lossy(), &data, 0o755).map_err(io(&lib))?;
    }
    add(&mut tar, "/etc/passwd", b"root:x:0:0:root:/root:/bin/false\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n", 0o644)
        .map_err(io(Path::new("/etc/passwd")))?;
    add(&mut tar, "/etc/group", b"root:x:0:\nnogroup:x:65534:\n", 0o644).map_err(io(Path::new("/etc/group")))?;
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(0o1777);
    dir.set_size(0);
    dir.set_mtime(0);
    dir.set_cksum();
    tar.append_data(&mut dir, "tmp/", std::io::empty()).map_err(io(Path::new("/tmp")))?;
    tar.into_inner().map_err(io(Path::new("<tar>")))
}

/// Imports a root file system tar as `repo:tag` (`docker import`). Returns the image reference.
pub async fn import_image(docker: &Docker, rootfs: Vec<u8>, repo: &str, tag: &str) -> Result<String, DockerError> {
    let opts = CreateImageOptionsBuilder::default().from_src("-").repo(repo).tag(tag).build();
    let mut stream = docker.create_image(Some(opts), Some(bollard::body_full(rootfs.into())), None);
    while let Some(item) = stream.next().await {
        item.map_err(|source| DockerError::Api { context: format!("import {repo}:{tag}"), source })?;
    }
    Ok(format!("{repo}:{tag}"))
}

/// Builds the image for `binary` offline: [`rootfs_tar`] then [`import_image`].
pub async fn build_image(docker: &Docker, binary: &Path, dest: &str, repo: &str, tag: &str) -> Result<String, DockerError> {
    let binary = binary.to_path_buf();
    let dest_owned = dest.to_string();
    let tar = tokio::task::spawn_blocking(move || rootfs_tar(&binary, &dest_owned))
        .await
        .map_err(|e| DockerError::Io { path: "<rootfs>".into(), source: std::io::Error::other(e) })??;
    import_image(docker, tar, repo, tag).await
}

/// How to run a container.
#[derive(Debug, Clone, Default)]
pub struct RunSpec {
    /// Container name (`--name`).
    pub name: String,
    /// Image reference.
    pub image: String,
    /// Command and arguments.
    pub cmd: Vec<String>,
    /// `KEY=value` environment.
    pub env: Vec<String>,
    /// CPU set (`--cpuset-cpus`), e.g. `0`.
    pub cpuset_cpus: Option<String>,
    /// Memory limit, bytes (`--memory`).
    pub memory_bytes: Option<i64>,
}

/// A running container: its id, the host pid of its first process and when it was started.
#[derive(Debug, Clone)]
pub struct Running {
    /// Container id.
    pub id: String,
    /// Host pid of the container's first process (`State.Pid`).
    pub pid: u32,
    /// Taken just before the engine was asked to start the (already created) container: the
    /// origin of "time to ready".
    pub started: std::time::Instant,
}

/// Creates and starts a container on the host network (`--network host`), replacing a stopped
/// or running container of the same name.
pub async fn run_container(docker: &Docker, spec: &RunSpec) -> Result<Running, DockerError> {
    run_container_in(docker, spec, None).await
}

/// [`run_container`] under a parent cgroup (`docker run --network host --cgroup-parent`, the engine's
/// `HostConfig.CgroupParent`). With the cgroupfs driver the container's cgroup is then
/// `<parent>/<container id>` in every hierarchy, the cgroup v2 one included (checked on this
/// host: `0::/profiler-bench-x/<id>` in `/proc/PID/cgroup`), so a profiler attached to the
/// parent keeps seeing the app across a restart, which gives a new container id. The engine
/// creates the parent directories; [`remove_cgroup_parent`] removes them once empty.
pub async fn run_container_in(docker: &Docker, spec: &RunSpec, cgroup_parent: Option<&str>) -> Result<Running, DockerError> {
    if let Some((labels, running)) = existing(docker, &spec.name).await? {
        replaceable(labels.as_ref(), running, std::process::id(), pid_alive).map_err(|owner| DockerError::InUse { name: spec.name.clone(), owner })?;
    }
    remove_container(docker, &spec.name).await?;
    let host = HostConfig {
        network_mode: Some("host".into()),
        cpuset_cpus: spec.cpuset_cpus.clone(),
        memory: spec.memory_bytes,
        cgroup_parent: cgroup_parent.map(str::to_string),
        ..Default::default()
    };
    let body = ContainerCreateBody {
        labels: Some([(OWNER_LABEL.to_string(), std::process::id().to_string())].into()),
        image: Some(spec.image.clone()),
        cmd: Some(spec.cmd.clone()),
        env: Some(spec.env.clone()),
        host_config: Some(host),
        ..Default::default()
    };
    let opts = CreateContainerOptionsBuilder::default().name(&spec.name).build();
    let created = docker
        .create_container(Some(opts), body)
        .await
        .map_err(|source| DockerError::Api { context: format!("create container {}", spec.name), source })?;
    let started = std::time::Instant::now();
    docker
        .start_container(&created.id, None::<StartContainerOptions>)
        .await
        .map_err(|source| DockerError::Api { context: format!("start container {}", spec.name), source })?;
    let info = docker
        .inspect_container(&created.id, None::<InspectContainerOptions>)
        .await
        .map_err(|source| DockerError::Api { context: format!("inspect container {}", spec.name), source })?;
    let pid = info.state.and_then(|s| s.pid).unwrap_or(0);
    Ok(Running { id: created.id, pid: u32::try_from(pid).unwrap_or(0), started })
}

/// Label of every container [`run_container_in`] creates: the pid of the process that created
/// it (a `profiler bench`, or a test).
pub const OWNER_LABEL: &str = "profiler.bench.pid";

/// Whether an existing container with `labels`, running or not, may be replaced by process
/// `me`: yes when it carries [`OWNER_LABEL`] and is `me`'s (an app restart) or its process is
/// gone (`alive` false: a leftover of a bench that was killed), or when it is stopped and
/// another live bench's. A container without the label was not started by a bench (someone's
/// own `navree`): never. `Err` says whose it is.
pub fn replaceable(labels: Option<&std::collections::HashMap<String, String>>, running: bool, me: u32, alive: impl Fn(u32) -> bool) -> Result<(), String> {
    let Some(owner) = labels.and_then(|l| l.get(OWNER_LABEL)) else {
        return Err("was not started by profiler bench".into());
    };
    match owner.parse::<u32>() {
        Ok(pid) if pid == me || !alive(pid) || !running => Ok(()),
        Ok(pid) => Err(format!("belongs to another profiler bench (pid {pid}), which is still running")),
        Err(_) => Err(format!("has a {OWNER_LABEL} label that is not a pid ({owner:?})")),
    }
}

/// Removes the container `name` only when this process created it ([`OWNER_LABEL`]): the
/// clean-up after an interrupted or failed bench, which must not remove a container that it
/// refused to replace ([`replaceable`]). Absent, or someone else's, is not an error.
pub async fn remove_own_container(docker: &Docker, name: &str) -> Result<(), DockerError> {
    let mine = existing(docker, name).await?.and_then(|(labels, _)| labels).and_then(|l| l.get(OWNER_LABEL).cloned()) == Some(std::process::id().to_string());
    if mine {
        remove_container(docker, name).await?;
    }
    Ok(())
}

/// The labels of the container `name` and whether it runs; `None` when there is none.
async fn existing(docker: &Docker, name: &str) -> Result<Option<(Option<std::collections::HashMap<String, String>>, bool)>, DockerError> {
    match docker.inspect_container(name, None::<InspectContainerOptions>).await {
        Ok(info) => Ok(Some((info.config.and_then(|c| c.labels), info.state.and_then(|s| s.running).unwrap_or(false)))),
        Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => Ok(None),
        Err(source) => Err(DockerError::Api { context: format!("inspect container {name}"), source }),
    }
}

/// True when a process `pid` exists (`kill(pid, 0)`: no error, or EPERM).
fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else { return false };
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM) }
}

/// Removes a container by name or id (forced: a running one is killed). Absent is not an error.
pub async fn remove_container(docker: &Docker, name: &str) -> Result<(), DockerError> {
    let opts = RemoveContainerOptionsBuilder::default().force(true).build();
    match docker.remove_container(name, Some(opts)).await {
        Ok(()) => Ok(()),
        Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => Ok(()),
        Err(source) => Err(DockerError::Api { context: format!("remove container {name}"), source }),
    }
}

/// Removes the directories a parent cgroup `parent` (e.g. `/profiler-bench-x`) has under every
/// mounted hierarchy below `/sys/fs/cgroup` (cgroup v1 controllers and the cgroup v2 mount),
/// once no container is left in it. Directories still in use or absent are left alone;
/// returns the directories removed.
pub fn remove_cgroup_parent(parent: &str) -> Vec<PathBuf> {
    let rel = parent.trim_start_matches('/');
    if rel.is_empty() || rel.split('/').any(|c| c == ".." || c.is_empty()) {
        return Vec::new();
    }
    let mut roots: Vec<PathBuf> = vec![PathBuf::from("/sys/fs/cgroup")];
    if let Ok(dir) = std::fs::read_dir("/sys/fs/cgroup") {
        roots.extend(dir.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
    }
    let mut removed = Vec::new();
    for root in roots {
        let d = root.join(rel);
        if d.is_dir() && std::fs::remove_dir(&d).is_ok() {
            removed.push(d);
        }
    }
    removed
}

/// The last `n` lines of a container's stdout and stderr (for "the app failed to start").
pub async fn last_log_lines(docker: &Docker, name: &str, n: usize) -> String {
    let opts = LogsOptionsBuilder::default().stdout(true).stderr(true).tail(&n.to_string()).build();
    let mut out = String::new();
    let mut stream = docker.logs(name, Some(opts));
    while let Some(Ok(chunk)) = stream.next().await {
        out.push_str(&chunk.to_string());
    }
    out
}

/// Names of the running containers (for error messages).
pub async fn running_names(docker: &Docker) -> Result<Vec<String>, DockerError> {
    let opts = ListContainersOptionsBuilder::default().all(false).build();
    let list = docker
        .list_containers(Some(opts))
        .await
        .map_err(|source| DockerError::Api { context: "list containers".into(), source })?;
    Ok(list
        .into_iter()
        .flat_map(|c| c.names.unwrap_or_default())
        .map(|n| n.trim_start_matches('/').to_string())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bench_s_own_or_abandoned_containers_are_replaced() {
        let owned = |pid: &str| std::collections::HashMap::from([(OWNER_LABEL.to_string(), pid.to_string())]);
        let alive = |pid: u32| pid == 10 || pid == 20;
        // Someone's own container of that name, running or not.
        assert_eq!(replaceable(None, true, 10, alive), Err("was not started by profiler bench".into()));
        assert_eq!(replaceable(Some(&Default::default()), false, 10, alive), Err("was not started by profiler bench".into()));
        // This bench's own (an app restart), and a killed bench's leftover.
        assert_eq!(replaceable(Some(&owned("10")), true, 10, alive), Ok(()));
        assert_eq!(replaceable(Some(&owned("30")), true, 10, alive), Ok(()));
        // Another bench that still runs: only once its container stopped.
        assert_eq!(replaceable(Some(&owned("20")), true, 10, alive), Err("belongs to another profiler bench (pid 20), which is still running".into()));
        assert_eq!(replaceable(Some(&owned("20")), false, 10, alive), Ok(()));
        assert!(replaceable(Some(&owned("x")), true, 10, alive).unwrap_err().contains("not a pid"));
    }

    #[test]
    fn ldd_of_a_dynamic_binary_lists_libc_and_the_loader() {
        // /bin/sh (dash) is dynamically linked against libc on Debian.
        let libs = shared_libraries(Path::new("/bin/sh")).unwrap();
        assert!(libs.iter().any(|p| p.to_string_lossy().contains("libc.so")), "{libs:?}");
        assert!(libs.iter().any(|p| p.to_string_lossy().contains("ld-linux")), "{libs:?}");
    }

    #[test]
    fn rootfs_holds_binary_libraries_and_etc() {
        let bytes = rootfs_tar(Path::new("/bin/sh"), "/bin/sh").unwrap();
        let mut archive = tar::Archive::new(&bytes[..]);
        let names: Vec<String> =
            archive.entries().unwrap().map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned()).collect();
        assert!(names.contains(&"bin/sh".to_string()), "{names:?}");
        assert!(names.iter().any(|n| n.ends_with("libc.so.6")), "{names:?}");
        assert!(names.contains(&"etc/passwd".to_string()));
        assert!(names.contains(&"tmp/".to_string()));
    }
}
