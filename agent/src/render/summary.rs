//! The short text summary `profiler` prints on stdout after a run or a `report`.

use std::collections::HashMap;
use std::fmt::Write;

use crate::profile::folded::frame_name;
use crate::profile::Profile;

use super::syscalls;

/// Self time per function: on-CPU samples whose leaf is in that function, most first (ties by
/// name). The function is the leaf's symbol, as `perf report` counts without `--inline`:
/// inlined frames at the leaf count to the function they were inlined into (the flamegraph
/// and pprof files keep them apart). Names are folded-stack names ([`frame_name`]: kernel
/// frames end in `_[k]`). Samples with an empty stack count as `[unknown]`.
pub fn self_samples(profile: &Profile) -> Vec<(String, u64)> {
    // Samples per leaf frame index first (the last slot: `[unknown]`), then per name, so
    // that each frame's name is formatted once, not once per stack.
    let unknown = profile.frames.len();
    // `None`: no sample's leaf (a name with 0 samples is still listed when a count of 0 has it).
    let mut by_frame: Vec<Option<u64>> = vec![None; unknown + 1];
    for count in &profile.on_cpu {
        let valid = || {
            profile
                .stacks
                .get(count.stack as usize)
                .into_iter()
                .flat_map(|s| s.frames.iter())
                .copied()
                .filter(|&f| (f as usize) < unknown)
        };
        // The last frame that was not inlined (the leaf's symbol); an all-inlined stack (a
        // hand-made file) falls back to its first frame.
        let leaf = valid()
            .rev()
            .find(|&f| !profile.frames[f as usize].inlined)
            .or_else(|| valid().next())
            .map_or(unknown, |f| f as usize);
        *by_frame[leaf].get_or_insert(0) += count.count;
    }
    let mut by_name: HashMap<String, u64> = HashMap::new();
    for (i, n) in by_frame.iter().enumerate() {
        let Some(n) = *n else { continue };
        let name = profile
            .frames
            .get(i)
            .map_or_else(|| "[unknown]".to_string(), frame_name);
        *by_name.entry(name).or_default() += n;
    }
    let mut v: Vec<_> = by_name.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// The unwinding part of the run summary: one line for the run (mode, samples, share of
/// complete stacks, mean and largest stack bytes copied per sample), then one line per binary
/// holding frames ([`crate::unwind::module_unwinding`]): how its frames were unwound (`CFI
/// (eh_frame_hdr)`, `CFI + frame pointers`, `frame pointers`, `none`), the samples with a
/// frame in it, the share of those that are complete and the mean bytes copied per such
/// sample; at most 12 binaries. Empty without on-CPU samples.
pub fn unwinding(profile: &Profile) -> String {
    use crate::unwind::ModuleUnwinding as U;
    let samples: u64 = profile.on_cpu.iter().map(|c| c.count).sum();
    let mut s = String::new();
    if samples == 0 {
        return s;
    }
    match &profile.meta.unwind {
        Some(r) => {
            let _ = writeln!(
                s,
                "unwinding: {} (.eh_frame CFI on a copy of at most {} bytes of user stack per sample): {} samples, {:.1}% complete, {} bytes copied per sample (max {}), truncated: {} copy end, {} no CFI, {} bad address, {} other",
                r.mode,
                r.stack_copy_bytes,
                r.samples,
                pct(r.complete, r.samples),
                r.bytes_copied_total / r.samples.max(1),
                r.bytes_copied_max,
                r.truncated_copy_end,
                r.truncated_no_unwind_info,
                r.truncated_bad_address,
                r.truncated_other
            );
        }
        None => {
            let _ = writeln!(
                s,
                "unwinding: frame pointers (walked in the kernel, no stack copy): {samples} samples, {:.1}% complete, 0 bytes copied per sample",
                pct(samples.saturating_sub(profile.lost.truncated_stacks), samples)
            );
        }
    }
    let rows = crate::unwind::module_unwinding(profile);
    if !rows.is_empty() {
        let _ = writeln!(s, "  {:<24} {:<32} {:>8} {:>9} {:>13}", "binary", "unwinding", "samples", "complete", "bytes/sample");
    }
    for m in rows.iter().take(12) {
        let how = match &m.unwinding {
            U::Cfi { info } => format!("CFI ({info})"),
            U::CfiAndFramePointers { info } => format!("CFI ({info}) + frame pointers"),
            U::FramePointersNoCfi => "frame pointers (no CFI)".to_owned(),
            U::None { info } => format!("none ({info})"),
            U::FramePointers => "frame pointers".to_owned(),
        };
        let how = if m.replaced > 0 { format!("{how}, replaced {}x", m.replaced) } else { how };
        let _ = writeln!(s, "  {:<24} {:<32} {:>8} {:>8.1}% {:>13}", m.module, how, m.samples, pct(m.complete, m.samples), m.bytes_copied / m.samples.max(1));
    }
    s
}

/// The summary table printed at the end of a run (plain text, one row per test), after a
/// `PARTIAL:` line when the run ended early.
pub fn bench_table(results: &crate::runs::BenchResults) -> String {
    let mut s = String::new();
    if let Some(p) = &results.partial {
        let _ = writeln!(s, "PARTIAL: {p}");
    }
    let _ = writeln!(
        s,
        "{:<13} {:>10} {:>8} {:>8} {:>8} {:>7} {:>7} {:>9} {:>12}",
        "test", "req/s", "p50 ms", "p99 ms", "failed", "app CPU", "PG CPU", "peak MB", "profiled"
    );
    for t in results.tests.iter().chain(results.unfinished.iter().filter(|u| !u.runs.is_empty())) {
        let m = t.median();
        let pg = m.postgres.map(|u| format!("{:.2}", u.cpu)).unwrap_or_else(|| "-".into());
        let unfinished = results.unfinished.as_ref().is_some_and(|u| std::ptr::eq(u, t));
        let prof = match (&t.profiled, &t.profile_error) {
            (Some(p), _) => format!("{:.0} ({:.3})", p.run.wrk.req_per_s, p.throughput_ratio),
            (None, Some(_)) => "failed".into(),
            (None, None) if unfinished => format!("unfinished {}/{}", t.runs.len(), results.settings.runs.max(1)),
            (None, None) => "-".into(),
        };
        let _ = writeln!(
            s,
            "{:<13} {:>10.0} {:>8.2} {:>8.2} {:>8} {:>7.2} {:>7} {:>9.1} {:>12}",
            t.test.name(),
            t.req_per_s,
            t.latency.p50_us as f64 / 1000.0,
            t.latency.p99_us as f64 / 1000.0,
            t.failed_requests,
            m.app.cpu,
            pg,
            t.app_peak_rss_bytes as f64 / 1e6,
            prof
        );
    }
    let _ = writeln!(
        s,
        "time to ready {:.1} ms, idle memory {:.1} MB, conformance {} passed / {} failed",
        results.time_to_ready_ms,
        results.idle_rss_bytes as f64 / 1e6,
        results.conformance.passed,
        results.conformance.failed
    );
    if let Some(d) = &results.drift {
        let _ = writeln!(
            s,
            "drift: {} re-measured at {:.0} req/s vs {:.0} first ({:+.1}%)",
            d.test, d.repeat_req_per_s, d.first_req_per_s, d.change_pct
        );
    }
    s
}

fn us(ns: Option<f64>) -> String {
    ns.map_or_else(|| "-".to_string(), |ns| format!("{:.1}", ns / 1e3))
}

/// The database servers behind the target's PostgreSQL connections in one line: each one's
/// CPU over the run (s, % of one CPU) and the CPUs it may use, e.g. `database server CPU
/// use: postgres (pid 42, port 5432) 5.00 s = 49.6% of one CPU, may use 1 CPUs`. When the
/// wire saw PostgreSQL connections but found no server of their ports on this host, it says
/// so (the bound then cannot be the database's CPU). `None` without PostgreSQL connections.
pub fn db_server_line(meta: &crate::profile::Meta) -> Option<String> {
    let ports = &meta.wire.as_ref()?.pg_server_ports;
    if ports.is_empty() {
        return None;
    }
    if meta.db_servers.is_empty() {
        let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
        return Some(format!(
            "database server CPU use: not measured (no process of this host listens on port {} in the target's network namespace)",
            ports.join(", ")
        ));
    }
    let servers: Vec<String> = meta
        .db_servers
        .iter()
        .map(|d| {
            let share = if meta.duration_ns > 0 { format!(" = {:.1}% of one CPU", pct(d.cpu_ns, meta.duration_ns)) } else { String::new() };
            let cap = d.capacity_cpus.map_or(", its CPU set unknown".to_owned(), |c| format!(", may use {c} CPUs"));
            format!("{} (pid {}, port {}) {:.2} s{share}{cap}", d.command, d.pid, d.port, d.cpu_ns as f64 / 1e9)
        })
        .collect();
    Some(format!("database server CPU use: {}", servers.join("; ")))
}

/// The servers on this host the target calls ([`crate::profile::Meta::upstream_servers`]) in
/// one line: each one's CPU over the run (s, % of one CPU), e.g. `upstream servers' CPU use:
/// api (pid 44, port 8081) 2.50 s = 25.0% of one CPU`. `None` when none was found.
pub fn upstream_line(meta: &crate::profile::Meta) -> Option<String> {
    if meta.upstream_servers.is_empty() {
        return None;
    }
    let servers: Vec<String> = meta
        .upstream_servers
        .iter()
        .map(|u| {
            let share = if meta.duration_ns > 0 { format!(" = {:.1}% of one CPU", pct(u.cpu_ns, meta.duration_ns)) } else { String::new() };
            format!("{} (pid {}, port {}) {:.2} s{share}", u.command, u.pid, u.port, u.cpu_ns as f64 / 1e9)
        })
        .collect();
    Some(format!("upstream servers' CPU use: {}", servers.join("; ")))
}

/// The agent's own cost in one line (`agent footprint: ...`): time to attach (ms), the CPU
/// of its own threads while attached (s and % of one CPU over the run) and of its whole
/// process (%; the two differ inside `profiler bench`), its peak RSS when the
/// collection ended (MB = 10^6 bytes) and, when BPF run statistics were on, the BPF programs'
/// run time (s, % of one CPU, ns per run). `None` for profiles without a footprint.
pub fn footprint_line(meta: &crate::profile::Meta) -> Option<String> {
    let f = meta.footprint.as_ref()?;
    let cpu = match f.threads_cpu_ns {
        Some(ns) => format!(
            "agent threads {:.2} s CPU while attached = {:.1}% of one CPU (whole process {:.1}%)",
            ns as f64 / 1e9,
            pct(ns, meta.duration_ns),
            pct(f.cpu_ns, meta.duration_ns)
        ),
        None => format!("{:.2} s CPU while attached = {:.1}% of one CPU", f.cpu_ns as f64 / 1e9, pct(f.cpu_ns, meta.duration_ns)),
    };
    let mut line = format!(
        "agent footprint: attached in {:.0} ms, {cpu}, peak RSS {:.1} MB",
        f.attach_ns as f64 / 1e6,
        f.peak_rss_bytes as f64 / 1e6
    );
    if let (Some(ns), Some(runs)) = (f.bpf_run_ns, f.bpf_run_count) {
        let per_run = if runs > 0 { ns as f64 / runs as f64 } else { 0.0 };
        line.push_str(&format!(
            "; BPF programs {:.2} s = {:.1}% of one CPU in {runs} runs ({per_run:.0} ns/run, every process on the host)",
            ns as f64 / 1e9,
            pct(ns, meta.duration_ns)
        ));
    }
    Some(line)
}

/// The agent's cost per HTTP request of the target, from the kernel's counters, in one
/// line (`agent cost per request: ...`), each divided by the HTTP requests the wire capture
/// decoded (µs per request): the BPF programs' run time (when run statistics were on, an
/// upper bound: the tracepoint programs run, and are timed, for every process of the host),
/// the agent's threads' CPU, and the syscall tracepoints' slow path the target paid (its calls
/// counted in the windows × [`crate::profile::SyscallWindows::tracepoint_tax_ns`], an
/// estimate); their sum as a share of the target's CPU per request (%), and the three programs
/// with most run time (µs per request). `None` without a footprint, HTTP requests, or the
/// target's CPU time.
pub fn agent_cost_line(profile: &Profile) -> Option<String> {
    let meta = &profile.meta;
    let f = meta.footprint.as_ref()?;
    let requests = profile.wire.as_ref().map_or(0, |w| w.http.requests);
    let target_ns = meta.target_cpu_ns?;
    if requests == 0 || target_ns == 0 {
        return None;
    }
    let n = requests as f64;
    let threads_ns = f.threads_cpu_ns.unwrap_or(f.cpu_ns) as f64;
    let per_request = |ns: f64| ns / n / 1e3;
    let calls: u64 = profile.syscalls.iter().map(|c| c.count).sum();
    let tax = meta.syscall_windows.as_ref().and_then(|w| w.tracepoint_tax_ns).map(|t| (t, t * calls as f64));
    let mut parts = Vec::new();
    match f.bpf_run_ns {
        Some(ns) => parts.push(format!("BPF programs {:.2} µs (all processes' runs)", per_request(ns as f64))),
        None => parts.push("BPF programs not timed (run statistics off: --bpf-stats)".to_string()),
    }
    parts.push(format!("agent threads {:.2} µs", per_request(threads_ns)));
    if let Some((per_call, ns)) = tax {
        parts.push(format!("syscall tracepoints' slow path ~{:.2} µs (estimate: {calls} calls counted × {per_call:.0} ns calibrated)", per_request(ns)));
    }
    let total = f.bpf_run_ns.unwrap_or(0) as f64 + threads_ns + tax.map_or(0.0, |t| t.1);
    let mut line = format!(
        "agent cost per request ({requests} HTTP requests): {}; {}{:.1}% of the target's {:.1} µs of CPU per request",
        parts.join(", "),
        if f.bpf_run_ns.is_some() { "" } else { "at least " },
        total * 100.0 / target_ns as f64,
        per_request(target_ns as f64)
    );
    let top: Vec<String> = f
        .programs
        .iter()
        .filter(|p| p.run_time_ns > 0)
        .take(3)
        .map(|p| format!("{} {:.2}", p.program, per_request(p.run_time_ns as f64)))
        .collect();
    if !top.is_empty() {
        line.push_str(&format!(" (most: {} µs)", top.join(", ")));
    }
    Some(line)
}

/// The summary's line under an on-CPU sample count of 0: what it can mean, and what to do.
pub const NO_SAMPLES: &str = "no on-CPU sample of the target: it did not run during the attach (idle, stopped), or its work runs in other processes (the children of a wrapper script are not followed: pass --pid of the process that serves, or --container / --cgroup)";

/// The summary: run description, the partial reason when the run ended early, sample and
/// loss counters, truncated share, the target's CPU use, the top 10 functions by self time
/// (share of on-CPU samples) and the top 10 syscalls by calls. Durations print in s, ms or µs
/// as labelled; percentages with one decimal.
pub fn summary(profile: &Profile) -> String {
    let meta = &profile.meta;
    let mut s = String::new();
    let samples: u64 = profile.on_cpu.iter().map(|c| c.count).sum();
    let duration_s = meta.duration_ns as f64 / 1e9;
    let _ = writeln!(s, "profile of {}", meta.target);
    let _ = writeln!(
        s,
        "  {:.1} s from {} at {} Hz on {} CPUs (kernel {}, agent {})",
        duration_s, meta.started_at, meta.frequency_hz, meta.cpus, meta.kernel, meta.agent_version
    );
    if let Some(reason) = &meta.partial {
        let _ = writeln!(s, "  PARTIAL: the run ended early: {reason}");
    }
    let sampled_cpu_s = if meta.frequency_hz > 0 {
        samples as f64 / meta.frequency_hz as f64
    } else {
        0.0
    };
    let threads = profile
        .on_cpu
        .iter()
        .map(|c| c.tid)
        .collect::<std::collections::HashSet<_>>()
        .len();
    let _ = writeln!(
        s,
        "on-CPU samples: {samples} ({sampled_cpu_s:.2} s of CPU), {threads} threads"
    );
    if samples == 0 && meta.frequency_hz > 0 {
        let _ = writeln!(s, "  {NO_SAMPLES}");
    }
    match meta.target_cpu_ns {
        Some(ns) if meta.duration_ns > 0 => {
            let _ = writeln!(
                s,
                "target CPU use: {:.2} s = {:.1}% of one CPU",
                ns as f64 / 1e9,
                pct(ns, meta.duration_ns)
            );
        }
        Some(ns) => {
            let _ = writeln!(s, "target CPU use: {:.2} s", ns as f64 / 1e9);
        }
        None => {
            let _ = writeln!(s, "target CPU use: not measured");
        }
    }
    if let Some(line) = db_server_line(meta) {
        let _ = writeln!(s, "{line}");
    }
    if let Some(line) = upstream_line(meta) {
        let _ = writeln!(s, "{line}");
    }
    if let Some(line) = footprint_line(meta) {
        let _ = writeln!(s, "{line}");
    }
    if let Some(line) = agent_cost_line(profile) {
        let _ = writeln!(s, "{line}");
    }
    let lost = &profile.lost;
    let _ = writeln!(
        s,
        "lost: {} samples dropped, {} stack collisions, {} stack walk failures, {} off-CPU dropped, {} ring buffer dropped",
        lost.samples_dropped,
        lost.stack_collisions,
        lost.stack_walk_failures,
        lost.offcpu_dropped,
        lost.ringbuf_dropped
    );
    let _ = writeln!(
        s,
        "truncated stacks: {} of {} samples ({:.1}%)",
        lost.truncated_stacks,
        samples,
        pct(lost.truncated_stacks, samples)
    );
    s.push_str(&unwinding(profile));
    let waits: u64 = profile.off_cpu.iter().map(|c| c.count).sum();
    let off_ns: u64 = profile.off_cpu.iter().map(|c| c.total_ns).sum();
    let _ = write!(s, "off-CPU: {waits} waits, {:.1} ms switched out", off_ns as f64 / 1e6);
    if lost.offcpu_switch_ins_unseen > 0 {
        let _ = write!(
            s,
            " ({} switch-ins the kernel's sched_switch tracepoint did not show; those waits end at an estimate)",
            lost.offcpu_switch_ins_unseen
        );
    }
    s.push('\n');

    let top = self_samples(profile);
    if !top.is_empty() {
        let _ = writeln!(s, "\ntop functions by self time (on-CPU samples; inlined code counts to its caller):");
        let _ = writeln!(s, "  {:>6}  {:>8}  function", "self%", "samples");
        for (name, n) in top.iter().take(10) {
            let _ = writeln!(s, "  {:>5.1}%  {:>8}  {}", pct(*n, samples), n, name);
        }
    }
    let report = syscalls::report(profile);
    if !report.syscalls.is_empty() {
        match &profile.meta.syscall_windows {
            Some(w) if report.traced_share < 1.0 => {
                let _ = writeln!(
                    s,
                    "\ntop syscalls by calls (counted in {} windows of {} ms every {} ms, which held {:.1}% of {}; calls and errors are estimates, {:.2}x the calls seen):",
                    w.windows,
                    w.period_ns * w.duty_pct as u64 / 100 / 1_000_000,
                    w.period_ns / 1_000_000,
                    100.0 * report.traced_share,
                    if profile.meta.syscall_scale_basis() == Some("requests") { "the requests served" } else { "the run" },
                    1.0 / report.traced_share
                );
            }
            _ => {
                let _ = writeln!(s, "\ntop syscalls by calls:");
            }
        }
        let _ = writeln!(
            s,
            "  {:<16} {:>10} {:>10} {:>8} {:>9} {:>9} {:>9} {:>9}",
            "syscall", "calls", "calls/s", "errors", "not ready", "mean µs", "p50 µs", "p99 µs"
        );
        for r in report.syscalls.iter().take(10) {
            let _ = writeln!(
                s,
                "  {:<16} {:>10} {:>10.1} {:>8} {:>9} {:>9} {:>9} {:>9}",
                r.name,
                r.count,
                r.calls_per_sec,
                r.errors,
                r.eagain,
                us(r.mean_latency_ns),
                us(r.p50_latency_ns),
                us(r.p99_latency_ns)
            );
        }
        let _ = writeln!(s, "  (errors: every negative return; not ready: the -EAGAIN and -EINPROGRESS among them, nonblocking calls that were not failures)");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Footprint, ProgramCost};

    #[test]
    fn summary_lines_state_per_binary_unwinding_complete_share_and_bytes() {
        use crate::profile::{Frame, FrameKind, ModuleUnwind, Profile, Stack, StackCount, UnwindReport};
        let count = |stack, count| StackCount { pid: 1, tid: 1, thread: "t".into(), stack, count, total_ns: 0, endpoints: Vec::new() };
        let module = |module: &str, cfi, fp, samples, complete, bytes| ModuleUnwind {
            module: module.into(),
            unwind_info: "eh_frame_hdr".into(),
            cfi_frames: cfi,
            fp_fallback_frames: fp,
            samples,
            samples_complete: complete,
            bytes_copied: bytes,
            ..Default::default()
        };
        let mut p = Profile::default();
        p.on_cpu = vec![count(0, 200)];
        p.meta.unwind = Some(UnwindReport {
            mode: "auto".into(),
            stack_copy_bytes: 65536,
            samples: 200,
            complete: 190,
            truncated_copy_end: 10,
            bytes_copied_total: 4_000_000,
            bytes_copied_max: 30_000,
            modules: vec![module("app", 900, 0, 200, 190, 4_000_000), module("libjit.so", 3, 7, 40, 30, 600_000), module("unused.so", 0, 0, 0, 0, 0)],
            ..Default::default()
        });
        let text = unwinding(&p);
        let lines: Vec<&str> = text.lines().collect();
        // 190/200 = 95.0 %, 4,000,000 / 200 = 20,000 bytes; libjit: 30/40 = 75 %, 15,000 bytes.
        assert!(lines[0].starts_with("unwinding: auto (.eh_frame CFI on a copy of at most 65536 bytes of user stack per sample): 200 samples, 95.0% complete, 20000 bytes copied per sample (max 30000), truncated: 10 copy end"), "{text}");
        assert_eq!(lines[2], format!("  {:<24} {:<32} {:>8} {:>8.1}% {:>13}", "app", "CFI (eh_frame_hdr)", 200, 95.0, 20000));
        assert_eq!(lines[3], format!("  {:<24} {:<32} {:>8} {:>8.1}% {:>13}", "libjit.so", "CFI (eh_frame_hdr) + frame pointers", 40, 75.0, 15000));
        assert_eq!(lines.len(), 4, "a binary without samples is not listed: {text}");

        // Frame pointers (no report): from the symbolized stacks, nothing copied.
        let frame = |module: &str| Frame { function: "f".into(), module: module.into(), kind: FrameKind::User, inlined: false, file: None, line: None };
        let mut p = Profile::default();
        // Stack 0 has two frames of `app`: its 30 samples count once for `app`.
        p.frames = vec![frame("app"), frame("libc.so.6"), frame("app")];
        p.stacks = vec![Stack { frames: vec![0, 2, 1], truncated: false }, Stack { frames: vec![1], truncated: true }];
        p.on_cpu = vec![count(0, 30), count(1, 10)];
        p.lost.truncated_stacks = 10;
        let text = unwinding(&p);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "unwinding: frame pointers (walked in the kernel, no stack copy): 40 samples, 75.0% complete, 0 bytes copied per sample");
        assert_eq!(lines[2], format!("  {:<24} {:<32} {:>8} {:>8.1}% {:>13}", "libc.so.6", "frame pointers", 40, 75.0, 0));
        assert_eq!(lines[3], format!("  {:<24} {:<32} {:>8} {:>8.1}% {:>13}", "app", "frame pointers", 30, 100.0, 0));
        assert_eq!(unwinding(&Profile::default()), "");
    }

    /// A profile of 1,000 HTTP requests in which the target used 100 ms of CPU (100 µs per
    /// request), the BPF programs ran 3 ms and the agent's threads 2 ms: 3 µs + 2 µs per
    /// request, 5% of the target's CPU.
    fn profile(requests: u64, bpf_run_ns: Option<u64>) -> Profile {
        let mut p = Profile::default();
        p.meta.target_cpu_ns = Some(100_000_000);
        p.meta.duration_ns = 1_000_000_000;
        p.meta.footprint = Some(Footprint {
            threads_cpu_ns: Some(2_000_000),
            bpf_run_ns,
            programs: vec![
                ProgramCost { program: "on_sys_enter".into(), runs: 10, run_time_ns: 2_000_000 },
                ProgramCost { program: "on_sock_send".into(), runs: 5, run_time_ns: 1_000_000 },
                ProgramCost { program: "on_cpu_sample".into(), runs: 0, run_time_ns: 0 },
            ],
            ..Default::default()
        });
        let mut wire = crate::wire::WireSummary::default();
        wire.http.requests = requests;
        p.wire = Some(wire);
        p
    }

    /// A target that never ran (a wrapper's pid, an idle service) says so under its count.
    #[test]
    fn a_run_without_samples_says_what_it_can_mean() {
        let mut p = profile(0, None);
        p.meta.frequency_hz = 99;
        p.on_cpu.clear();
        let text = summary(&p);
        assert!(text.contains(&format!("on-CPU samples: 0 (0.00 s of CPU), 0 threads\n  {NO_SAMPLES}\n")), "{text}");
        p.on_cpu.push(crate::profile::StackCount { count: 1, ..Default::default() });
        assert!(!summary(&p).contains(NO_SAMPLES));
    }

    #[test]
    fn agent_cost_per_request_divides_by_the_http_requests() {
        let line = agent_cost_line(&profile(1_000, Some(3_000_000))).expect("a line");
        assert_eq!(
            line,
            "agent cost per request (1000 HTTP requests): BPF programs 3.00 µs (all processes' runs), agent threads 2.00 µs; \
             5.0% of the target's 100.0 µs of CPU per request (most: on_sys_enter 2.00, on_sock_send 1.00 µs)"
        );
    }

    /// Without run statistics the line still gives the agent's threads, and the syscall
    /// tracepoints' slow path: 10,000 calls counted × 150 ns calibrated = 1.5 ms, 1.50 µs per
    /// request; with the threads' 2 µs, at least 3.5% of the target's 100 µs.
    #[test]
    fn agent_cost_without_run_statistics_and_with_the_tracepoint_tax() {
        assert_eq!(agent_cost_line(&profile(0, Some(3_000_000))), None);
        let mut p = profile(1_000, None);
        p.meta.footprint.as_mut().unwrap().programs.clear();
        p.syscalls = vec![crate::profile::SyscallStat { nr: 0, name: "read".into(), count: 10_000, ..Default::default() }];
        p.meta.syscall_windows = Some(crate::profile::SyscallWindows { duty_pct: 25, tracepoint_tax_ns: Some(150.0), ..Default::default() });
        assert_eq!(
            agent_cost_line(&p).unwrap(),
            "agent cost per request (1000 HTTP requests): BPF programs not timed (run statistics off: --bpf-stats), agent threads 2.00 µs, \
             syscall tracepoints' slow path ~1.50 µs (estimate: 10000 calls counted × 150 ns calibrated); at least 3.5% of the target's 100.0 µs of CPU per request"
        );
    }

    #[test]
    fn db_server_line_names_the_server_or_says_why_not() {
        let mut meta = crate::profile::Meta { duration_ns: 10_000_000_000, ..Default::default() };
        assert_eq!(db_server_line(&meta), None, "no wire");
        meta.wire = Some(crate::profile::WireCaptureReport { pg_server_ports: vec![5432, 6432], ..Default::default() });
        assert_eq!(
            db_server_line(&meta).unwrap(),
            "database server CPU use: not measured (no process of this host listens on port 5432, 6432 in the target's network namespace)"
        );
        meta.db_servers = vec![crate::profile::DbServer { port: 5432, pid: 42, command: "postgres".into(), cpu_ns: 5_000_000_000, exited_cpu_ns: 0, capacity_cpus: Some(1.0) }];
        assert_eq!(db_server_line(&meta).unwrap(), "database server CPU use: postgres (pid 42, port 5432) 5.00 s = 50.0% of one CPU, may use 1 CPUs");
    }

    #[test]
    fn upstream_line_names_each_server_with_its_cpu() {
        let mut meta = crate::profile::Meta { duration_ns: 10_000_000_000, ..Default::default() };
        assert_eq!(upstream_line(&meta), None);
        meta.upstream_servers = vec![
            crate::profile::UpstreamServer { port: 8081, pid: 44, command: "api".into(), cpu_ns: 2_500_000_000 },
            crate::profile::UpstreamServer { port: 6379, pid: 45, command: "redis-server".into(), cpu_ns: 100_000_000 },
        ];
        assert_eq!(upstream_line(&meta).unwrap(), "upstream servers' CPU use: api (pid 44, port 8081) 2.50 s = 25.0% of one CPU; redis-server (pid 45, port 6379) 0.10 s = 1.0% of one CPU");
    }
}
