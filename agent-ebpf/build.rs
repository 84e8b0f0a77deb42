//! Compiles every `src/*.bpf.c` with clang-19 into `$OUT_DIR/<name>.bpf.o`, which
//! `src/lib.rs` embeds. Needs the Debian packages `clang-19` (the BPF backend) and
//! `libbpf-dev` (`bpf/bpf_helpers.h`).

use std::path::{Path, PathBuf};
use std::process::Command;

const CLANG: &str = "clang-19";

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let include = manifest.join("include");
    let src = manifest.join("src");

    println!("cargo:rerun-if-changed={}", include.display());
    for header in read_dir_sorted(&include) {
        println!("cargo:rerun-if-changed={}", header.display());
    }

    if !Path::new("/usr/include/bpf/bpf_helpers.h").exists() {
        fail("/usr/include/bpf/bpf_helpers.h is missing: install the Debian package `libbpf-dev`");
    }

    let sources: Vec<PathBuf> = read_dir_sorted(&src)
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".bpf.c"))
        .collect();
    println!("cargo:rerun-if-changed={}", src.display());
    for source in &sources {
        println!("cargo:rerun-if-changed={}", source.display());
        let name = source.file_name().and_then(|n| n.to_str()).expect("utf-8 file name");
        let object = out_dir.join(name.replace(".bpf.c", ".bpf.o"));
        let output = Command::new(CLANG)
            .args(["-O2", "-g", "-target", "bpf", "-D__TARGET_ARCH_x86", "-Wall", "-Werror"])
            .arg("-I")
            .arg(&include)
            .arg("-c")
            .arg(source)
            .arg("-o")
            .arg(&object)
            .output();
        match output {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => fail(&format!(
                "`{CLANG}` not found: install the Debian package `clang-19` (and `libbpf-dev` for bpf/bpf_helpers.h)"
            )),
            Err(e) => fail(&format!("could not run `{CLANG}`: {e}")),
            Ok(out) if !out.status.success() => fail(&format!(
                "`{CLANG}` failed on {}:\n{}",
                source.display(),
                String::from_utf8_lossy(&out.stderr)
            )),
            Ok(_) => {}
        }
    }
}

fn read_dir_sorted(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", dir.display())))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .collect();
    paths.sort();
    paths
}

fn fail(message: &str) -> ! {
    // One clear line for cargo's output, then the details.
    eprintln!("error: agent-ebpf build: {message}");
    panic!("agent-ebpf build: {message}");
}
