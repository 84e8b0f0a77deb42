//! `profiler attach`: arguments -> [`profiler::attach::Options`] -> [`profiler::attach::run`].

use std::path::PathBuf;

use profiler::attach::Options;
use profiler::collect;
use profiler::target::Target;

/// Arguments of `profiler attach`. Exactly one of `--pid`, `--cgroup`, `--container`.
#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["pid", "cgroup", "container"])))]
pub struct Args {
    /// Profile this process (host pid), all of its threads.
    #[arg(long)]
    pub pid: Option<u32>,
    /// Profile this cgroup v2 directory and its descendants: absolute
    /// (`/sys/fs/cgroup/unified/system.slice/x.service`) or relative to the cgroup2 mount.
    #[arg(long)]
    pub cgroup: Option<PathBuf>,
    /// Profile this Docker container (name or id).
    #[arg(long)]
    pub container: Option<String>,
    /// Length of the collection, s; 0 runs until Ctrl-C or until the target exits.
    #[arg(long, default_value_t = 30)]
    pub duration: u64,
    /// On-CPU samples per second per CPU, Hz.
    #[arg(long, default_value_t = 99)]
    pub frequency: u64,
    /// Off-CPU waits shorter than this are not recorded, µs.
    #[arg(long, default_value_t = 1)]
    pub offcpu_min_block_us: u64,
    /// Do not record off-CPU waits (the most expensive part on loads that switch context
    /// very often; see agent-ebpf/README.md for measured costs).
    #[arg(long)]
    pub no_offcpu: bool,
    /// Do not count syscalls.
    #[arg(long)]
    pub no_syscalls: bool,
    /// Share of the run the syscall counters are attached, percent: a window at the start of
    /// every second. While attached, every syscall of the host takes the kernel's slow path
    /// (on a 400,000-syscalls/s web load, 15-20% of its throughput), so by default they
    /// count a quarter of the time and the report scales the counts to the run (marked as
    /// estimates). 100 counts every call.
    #[arg(long, default_value_t = collect::DEFAULT_SYSCALL_DUTY_PCT, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub syscalls_duty: u32,
    /// How user stacks are unwound: `auto` (a copy of the user stack unwound with the
    /// binaries' `.eh_frame`, frame pointers where there is no CFI), `fp` (frame pointers,
    /// walked in the kernel: cheapest, but stacks stop in code built without them, such as
    /// Debian's glibc) or `dwarf` (CFI only).
    #[arg(long, default_value = "auto")]
    pub unwind: collect::Unwind,
    /// Do not capture PostgreSQL and HTTP/1 traffic heads (round trips, statement shapes,
    /// requests per endpoint).
    #[arg(long)]
    pub no_wire: bool,
    /// TCP port of the database server: sockets whose peer has this port are decoded as
    /// PostgreSQL. Connections on other ports are recognised by their first bytes; this only
    /// overrides that.
    #[arg(long, default_value_t = 5432)]
    pub db_port: u16,
    /// A PostgreSQL connection string of the target's database
    /// (`postgres://user:password@127.0.0.1:5432/db`): its `pg_stat_activity` is polled
    /// during the run, so that statements the target prepared before the attach get their
    /// text, one row per statement across connections. The role must see the target's
    /// sessions (the same role, or `pg_read_all_stats`).
    #[arg(long, env = "PROFILER_DB_URL", hide_env_values = true)]
    pub db_url: Option<String>,
    /// Time every BPF program with the kernel's run statistics while attached, for the
    /// `agent cost per request` line. They are the host's switch (every BPF program on the
    /// host is timed meanwhile) and cost two clock reads per program run, which the target
    /// pays in each traced syscall; off by default.
    #[arg(long)]
    pub bpf_stats: bool,
    /// Extra attribution rules (TOML) added to the built-in catalog for `ranking.md`; a layer
    /// of the same name replaces the built-in one. Errors name the file and line.
    #[arg(long)]
    pub rules: Vec<PathBuf>,
    /// Draw the full demangled Rust names in flamegraph frames. By default frames show short
    /// names (module path and name, generics folded to `<…>`) and the full name is in each
    /// frame's tooltip and search; the folded files always keep the full names.
    #[arg(long)]
    pub full_frame_names: bool,
    /// Output directory, created when missing. Default is `reports/<UTC timestamp>-<target>/`.
    #[arg(long, short)]
    pub out: Option<PathBuf>,
}

impl Args {
    fn target(&self) -> Target {
        match (&self.pid, &self.cgroup, &self.container) {
            (Some(pid), _, _) => Target::Pid(*pid),
            (_, Some(path), _) => Target::Cgroup(path.clone()),
            (_, _, Some(name)) => Target::Container(name.clone()),
            // clap's required group guarantees one of them.
            (None, None, None) => unreachable!("clap requires a target"),
        }
    }
}


impl From<Args> for Options {
    fn from(a: Args) -> Options {
        Options {
            target: a.target(),
            duration: a.duration,
            frequency: a.frequency,
            offcpu_min_block_us: a.offcpu_min_block_us,
            no_offcpu: a.no_offcpu,
            no_syscalls: a.no_syscalls,
            syscalls_duty: a.syscalls_duty,
            unwind: a.unwind,
            no_wire: a.no_wire,
            db_port: a.db_port,
            db_url: a.db_url,
            bpf_stats: a.bpf_stats,
            rules: a.rules,
            full_frame_names: a.full_frame_names,
            out: a.out,
        }
    }
}
