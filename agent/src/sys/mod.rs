//! What the agent and its harness read from the kernel's files, one parser each: lines of
//! `/proc/PID/maps` ([`proc_maps`]) and the executable mappings recorded from them while a
//! process lives ([`process_maps`]), `/proc/PID/stat` ([`stat`]), the cgroup v2 mount
//! ([`cgroup`]) and CPU lists ([`cpus`]).

pub mod cgroup;
pub mod cpus;
pub mod proc_maps;
pub mod process_maps;
pub mod stat;
