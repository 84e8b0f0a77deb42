//! The `profiler` binary: argument parsing and error printing only.
fn main() {
    eprintln!("profiler: not built yet");
    std::process::exit(2);
}
