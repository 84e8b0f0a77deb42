//! Evaluation of the `[[cost]]` predicates of the rules catalog ([`super::catalog`]) on one
//! profile: on-CPU samples, off-CPU waits, syscall counts and database statements, per request.

use std::collections::{BTreeMap, HashMap};

use super::catalog::{ConnectionPredicate, CostRule, IdleGaps, OffCpuPredicate, OnCpuPredicate, StatementPredicate, TransactionPredicate};
use super::costs::{Confidence, Ctx, Finding, FrameSamples};

/// Role indices (into [`super::layers::Attribution::role_names`]) for role names; `None`
/// for an empty list (any role). Unknown names match no thread.
fn role_indices(ctx: &Ctx<'_>, roles: &[String]) -> Option<Vec<usize>> {
    if roles.is_empty() {
        return None;
    }
    Some(roles.iter().filter_map(|r| ctx.attr.role_names.iter().position(|n| n == r)).collect())
}

/// What the on-CPU section found.
struct OnCpu {
    /// Stack indices with samples that counted.
    stacks: Vec<usize>,
    samples: u64,
    frames: Vec<FrameSamples>,
    by_role: BTreeMap<String, u64>,
    callers: Vec<FrameSamples>,
    fires: bool,
}

fn on_cpu(ctx: &Ctx<'_>, p: &OnCpuPredicate) -> OnCpu {
    let roles = role_indices(ctx, &p.roles);
    let matches = |path: &str| p.frames.iter().any(|r| r.is_match(path));
    let any = |fr: &[u32], res: &[regex::Regex]| fr.iter().any(|&f| res.iter().any(|r| r.is_match(ctx.path(f))));
    // Whether a stack with a matching frame counts: the under, not_under, not_frames and
    // caller_not conditions.
    let counts = |fr: &[u32]| -> bool {
        let Some(first) = fr.iter().position(|&f| matches(ctx.path(f))) else { return false };
        let above = &fr[..first];
        (p.under.is_empty() || any(above, &p.under))
            && !any(above, &p.not_under)
            && !any(fr, &p.not_frames)
            && !ctx.caller_of(fr, first, &|path| matches(path)).is_some_and(|ci| p.caller_not.iter().any(|r| r.is_match(ctx.path(fr[ci]))))
    };
    let mut callers: HashMap<String, u64> = HashMap::new();
    let mut stacks = Vec::new();
    let (samples, frames, by_role) = ctx.collect_roles(roles.as_deref(), |si, fr| {
        let hits: Vec<usize> = fr.iter().enumerate().filter(|(_, &f)| matches(ctx.path(f))).map(|(i, _)| i).collect();
        let Some(&first) = hits.first() else { return hits };
        if !counts(fr) {
            return Vec::new();
        }
        stacks.push(si);
        let mut v = hits;
        if let Some(ci) = ctx.caller_of(fr, first, &|path| matches(path)) {
            let n = match &roles {
                None => ctx.attr.app_stack_samples[si],
                Some(r) => r.iter().map(|&i| ctx.attr.app_stack_role_samples[si][i]).sum(),
            };
            *callers.entry(ctx.describe(fr[ci])).or_default() += n;
            v.push(ci);
        }
        v
    });
    let share = ctx.attr.app_share(samples);
    let lower = share - 2.0 * ctx.attr.app_share_se(share);
    let us = ctx.attr.us_per_request(samples as f64);
    let fires = samples > 0 && (p.min_share <= 0.0 || lower >= p.min_share) && us.is_none_or(|u| u >= p.min_us_per_request);
    OnCpu { stacks, samples, frames, by_role, callers: ranked(callers), fires }
}

/// What the off-CPU section found.
struct OffCpu {
    waits: u64,
    total_ns: u64,
    worker_ns: u64,
    callers: Vec<FrameSamples>,
    /// The system calls the waits were in (the kernel stack's `__x64_sys_*` /
    /// `__arm64_sys_*` frame, without the prefix), µs off the CPU, most first.
    syscalls: Vec<FrameSamples>,
    fires: bool,
}

/// The system call a kernel stack was in: the name of its `__x64_sys_*` / `__arm64_sys_*`
/// frame, without the prefix.
fn syscall_of<'a>(ctx: &'a Ctx<'_>, frames: &[u32]) -> Option<&'a str> {
    frames.iter().find_map(|&f| {
        let path = ctx.path(f);
        path.strip_prefix("__x64_sys_").or_else(|| path.strip_prefix("__arm64_sys_"))
    })
}

fn off_cpu(ctx: &Ctx<'_>, p: &OffCpuPredicate) -> OffCpu {
    let roles = role_indices(ctx, &p.roles);
    let worker = ctx.attr.role_names.iter().position(|n| n == WORKER_ROLE);
    let mut callers: HashMap<String, u64> = HashMap::new();
    let mut syscalls: HashMap<String, u64> = HashMap::new();
    let (mut waits, mut total_ns, mut worker_ns) = (0u64, 0u64, 0u64);
    for c in &ctx.profile.off_cpu {
        let role = ctx.attr.thread_roles.get(&(c.pid, c.tid)).copied();
        if let Some(r) = &roles {
            if !role.is_some_and(|x| r.contains(&x)) {
                continue;
            }
        }
        let Some(stack) = ctx.profile.stacks.get(c.stack as usize) else { continue };
        let fr = &stack.frames;
        let any = |res: &[regex::Regex]| fr.iter().any(|&f| res.iter().any(|r| r.is_match(ctx.path(f))));
        if !p.frames.is_empty() && !any(&p.frames) {
            continue;
        }
        if any(&p.not_frames) {
            continue;
        }
        let caller = ctx.caller_of(fr, fr.len(), &|_| false);
        // A wait whose caller is unknown (no user frame outside std and libc) cannot be told
        // from the excluded callers' waits, unless the rule tells its waits by their kind.
        if !p.caller_not.is_empty() && caller.is_none() && (!p.unknown_caller || any(&p.unknown_caller_not)) {
            continue;
        }
        if caller.is_some_and(|i| p.caller_not.iter().any(|r| r.is_match(ctx.path(fr[i])))) {
            continue;
        }
        let caller = caller.map(|i| ctx.describe(fr[i]));
        waits += c.count;
        total_ns += c.total_ns;
        if role.is_some() && role == worker {
            worker_ns += c.total_ns;
        }
        *callers.entry(caller.unwrap_or_else(|| "[no caller frame]".into())).or_default() += c.total_ns / 1_000;
        *syscalls.entry(syscall_of(ctx, fr).unwrap_or("[not in a system call]").to_string()).or_default() += c.total_ns / 1_000;
    }
    let fires = waits > 0
        && match ctx.attr.requests {
            Some(n) => {
                let us = total_ns as f64 / 1e3 / n as f64;
                let cpu = ctx.attr.us_per_request(ctx.attr.app_samples() as f64).unwrap_or(0.0);
                us >= p.min_us_per_request && us >= p.min_ratio_to_cpu * cpu
            }
            // Without a request count: at least 1% of the run's wall time.
            None => total_ns as f64 >= 0.01 * ctx.profile.meta.duration_ns as f64,
        };
    OffCpu { waits, total_ns, worker_ns, callers: ranked(callers), syscalls: ranked(syscalls), fires }
}

/// The tokio worker role's name in the default catalog: waits on such threads block every
/// task queued behind them ([`Finding::worker_blocked_us_per_request`]).
pub const WORKER_ROLE: &str = "runtime worker";

fn ranked(m: HashMap<String, u64>) -> Vec<FrameSamples> {
    let mut v: Vec<FrameSamples> = m.into_iter().map(|(frame, samples)| FrameSamples { frame: frame.chars().take(200).collect(), samples }).collect();
    v.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.frame.cmp(&b.frame)));
    v.truncate(8);
    v
}

/// Evaluates one predicate fingerprint; `None` when it does not fire. With the finding, the
/// stack indices whose on-CPU samples it counted.
pub fn evaluate(ctx: &Ctx<'_>, rule: &CostRule) -> Option<(Finding, Vec<usize>)> {
    let on = rule.on_cpu.as_ref().map(|p| on_cpu(ctx, p));
    let off = rule.off_cpu.as_ref().map(|p| off_cpu(ctx, p));
    let sys: Option<(f64, BTreeMap<String, f64>, bool)> = rule.syscalls.as_ref().map(|p| {
        let per: BTreeMap<String, f64> =
            p.names.iter().filter_map(|n| Some((n.clone(), ctx.per_request(ctx.syscall_count(n).unwrap_or(0) as f64)?))).collect();
        let sum: f64 = per.values().sum();
        let small = p.max_bytes_per_call.is_none_or(|max| bytes_per_call(ctx, &p.names).is_some_and(|b| b <= max));
        (sum, per, small && p.min_per_request.is_some_and(|m| ctx.attr.requests.is_some() && sum >= m))
    });
    let stmt = rule.statements.as_ref().map(|p| statements(ctx, p));
    let txn = rule.transactions.as_ref().map(|p| transactions(ctx, p));
    let conns = rule.connections.as_ref().map(|p| connections(ctx, p));
    let mut gates: Vec<bool> = Vec::new();
    if let Some(o) = &on {
        gates.push(o.fires);
    }
    if let Some(st) = &stmt {
        gates.push(st.is_some());
    }
    if let Some(t) = &txn {
        gates.push(t.as_ref().is_some_and(|t| t.fires));
    }
    if let Some(o) = &off {
        gates.push(o.fires);
    }
    if let (Some(p), Some(c)) = (&rule.connections, &conns) {
        if p.min_per_request.is_some() {
            gates.push(c.as_ref().is_some_and(|c| c.fires));
        }
    }
    if let (Some(p), Some((_, _, fires))) = (&rule.syscalls, &sys) {
        if p.min_per_request.is_some() {
            gates.push(*fires);
        }
    }
    let fired = gates.iter().filter(|&&g| g).count();
    let fires = if rule.require_all { !gates.is_empty() && fired == gates.len() } else { fired > 0 };
    if !fires {
        return None;
    }
    let samples = on.as_ref().map_or(0, |o| o.samples);
    let frames = on.as_ref().map(|o| o.frames.clone()).unwrap_or_default();
    let confidence = if fired >= 2 { Confidence::High } else { rule.confidence };
    let mut f = ctx.finding(&rule.id, String::new(), confidence, samples, frames);
    let per_req = |x: f64| ctx.attr.requests.map(|n| x / n as f64);
    let mut figures: HashMap<String, String> = HashMap::new();
    let mut callers: Vec<FrameSamples> = Vec::new();
    let mut off_cpu_owner: Option<String> = None;
    if let Some(o) = &on {
        f.samples_by_role = o.by_role.clone();
        f.evidence.push(ctx.samples_line(&format!("in the frames of `{}`{}", rule.id, roles_text(&rule.on_cpu.as_ref().map(|p| p.roles.clone()).unwrap_or_default())), o.samples));
        if let Some(u) = f.cpu_us_per_request {
            figures.insert("cpu_us".into(), num(u));
            f.counts_per_request.insert("cpu_us".into(), u);
        }
        figures.insert("share".into(), format!("{:.1}%", 100.0 * f.cpu_share));
        callers.extend(o.callers.iter().cloned());
        if !o.callers.is_empty() {
            let c: Vec<String> = o.callers.iter().take(3).map(|c| format!("`{}` ({} samples)", c.frame, c.samples)).collect();
            f.evidence.push(format!("called from: {}", c.join(", ")));
        }
    }
    if let Some(o) = &off {
        let us = per_req(o.total_ns as f64 / 1e3);
        let waits = per_req(o.waits as f64);
        let mean = if o.waits > 0 { o.total_ns as f64 / 1e3 / o.waits as f64 } else { 0.0 };
        figures.insert("mean_wait_us".into(), num(mean));
        if let Some(u) = us {
            figures.insert("blocked_us".into(), num(u));
            f.counts_per_request.insert("blocked_us".into(), u);
        }
        if let Some(w) = waits {
            figures.insert("waits".into(), num(w));
            f.counts_per_request.insert("waits".into(), w);
        }
        if o.worker_ns > 0 {
            f.worker_blocked_us_per_request = per_req(o.worker_ns as f64 / 1e3);
        }
        let roles = roles_text(&rule.off_cpu.as_ref().map(|p| p.roles.clone()).unwrap_or_default());
        f.evidence.push(format!(
            "off-CPU{roles}: {} waits, {:.1} ms switched out in all (mean {mean:.1} µs){}",
            o.waits,
            o.total_ns as f64 / 1e6,
            match (waits, us) {
                (Some(w), Some(u)) => format!(", {w:.2} waits and {u:.1} µs per request"),
                _ => ", per request unknown (no request count)".into(),
            }
        ));
        if !o.callers.is_empty() {
            let c: Vec<String> = o.callers.iter().take(3).map(|c| format!("`{}` ({:.1} ms)", c.frame, c.samples as f64 / 1e3)).collect();
            f.evidence.push(format!("waits called from: {}", c.join(", ")));
        }
        // Which wait it is, from the kernel: a sleep, a futex (a lock, a condvar, a blocking
        // channel), a read; what the user frames cannot say when they were not walked.
        if o.total_ns > 0 && !o.syscalls.is_empty() {
            let s: Vec<String> = o.syscalls.iter().take(3).map(|c| format!("`{}` {:.0}%", c.frame, 100.0 * c.samples as f64 * 1e3 / o.total_ns as f64)).collect();
            f.evidence.push(format!("in the kernel, the waits were in: {} of the time switched out", s.join(", ")));
        }
        // The caller of the waits names the finding when no sample did; its weight is µs
        // off the CPU, so it stays out of the finding's frames, whose weight is samples.
        if callers.is_empty() {
            off_cpu_owner = o.callers.first().map(|c| c.frame.clone());
        }
    }
    if let Some((_, per, _)) = &sys {
        for (n, v) in per {
            figures.insert(format!("syscalls.{n}"), num(*v));
            f.counts_per_request.insert(format!("syscalls.{n}"), *v);
            if let Some(b) = ctx.profile.syscalls.iter().find(|s| &s.name == n).and_then(crate::profile::SyscallStat::bytes_per_call) {
                figures.insert(format!("bytes_per_call.{n}"), num(b));
                f.counts_per_request.insert(format!("bytes_per_call.{n}"), b);
            }
        }
        let with_bytes: Vec<String> = per
            .keys()
            .filter_map(|n| {
                let s = ctx.profile.syscalls.iter().find(|s| &s.name == n)?;
                Some(format!("{n} {:.1}", s.bytes_per_call()?))
            })
            .collect();
        if !with_bytes.is_empty() {
            f.evidence.push(format!("mean bytes per successful call: {}", with_bytes.join(", ")));
        }
        if !per.is_empty() {
            let list: Vec<String> = per.iter().map(|(n, v)| format!("{n} {v:.2}")).collect();
            f.evidence.push(format!("syscalls per request (whole process): {}{}", list.join(", "), ctx.syscall_counting()));
        }
    }
    if let Some(Some(st)) = &stmt {
        let mut short: String = st.shape.chars().take(90).collect();
        if short.len() < st.shape.len() {
            short.push_str(" …");
        }
        figures.insert("statement".into(), format!("`{short}`"));
        figures.insert("executions".into(), num(st.executions));
        f.counts_per_request.insert("statement_executions".into(), st.executions);
        f.counts_per_request.insert("statement_round_trips".into(), st.round_trips);
        f.evidence.push(format!(
            "wire: `{}` executed {:.2} times in {:.2} round trips per {} ({} executions over {} requests{}), mean round trip {:.0} µs",
            st.shape,
            st.executions,
            st.round_trips,
            st.endpoint.as_ref().map_or("HTTP request".to_string(), |e| format!("request of `{e}`")),
            st.total_executions,
            st.requests,
            if st.steady { ", steady window" } else { "" },
            st.mean_latency_us
        ));
        if let Some(x) = ctx.wire.and_then(|w| w.pg.statements.iter().find(|s| s.shape == st.statement)).filter(|x| x.prepare_round_trips + x.close_round_trips > 0) {
            f.evidence.push(format!(
                "its round trips include {} that only prepared it and {} that only closed it (a driver that prepares the statement for each execution, e.g. tokio-postgres' query with SQL text): {} round trips for {} executions in the capture",
                x.prepare_round_trips,
                x.close_round_trips,
                x.all_round_trips(),
                x.executions
            ));
        }
        if !st.unnamed_siblings.is_empty() {
            let list: Vec<String> = st.unnamed_siblings.iter().map(|(n, per)| format!("`{n}` {per:.2}")).collect();
            let together = st.executions + st.unnamed_siblings.iter().map(|x| x.1).sum::<f64>();
            f.evidence.push(format!(
                "it was prepared before the attach, so it is known by its name on each connection only, and a driver's statement cache names a statement in the order each connection prepared it: other such statements run here per request: {}. If they are the same SQL on other connections, it runs up to {together:.2} times per request; `--db-url` (or an attach before the app opens its connections) names them",
                list.join(", ")
            ));
        }
        figures.insert("endpoint".into(), st.endpoint.as_ref().map_or("the whole load".to_string(), |e| format!("`{e}`")));
        let shape = &st.statement;
        ctx.set_db_payers(&mut f, super::costs::EndpointMeasure::Executions, |c| {
            c.statements.iter().filter(|s| &s.shape == shape).map(|s| s.executions).sum()
        });
        if st.latency_us_per_request > 0.0 {
            f.counts_per_request.insert("statement_latency_us".into(), st.latency_us_per_request);
        }
        // The remedy fetches the rows in one statement: every execution but one per request
        // goes, with its round trips and their time; per request of the whole load, so an
        // endpoint's are weighed by its share of the requests.
        if st.executions > 1.0 {
            let gone = (st.executions - 1.0) / st.executions;
            let weight = match (&st.endpoint, ctx.wire.map(|w| w.http.requests)) {
                (Some(_), Some(all)) if all > 0 => (st.requests as f64 / all as f64).min(1.0),
                _ => 1.0,
            };
            f.round_trips_per_request = Some(st.round_trips * gone * weight);
            f.evidence.push(format!(
                "the remedy keeps one execution per request: {:.2} of its {:.2} round trips per request go{} (the ranking's extra round trips)",
                st.round_trips * gone,
                st.round_trips,
                if weight < 1.0 { format!(", {:.2} per request of the whole load", st.round_trips * gone * weight) } else { String::new() }
            ));
            if st.latency_us_per_request > 0.0 {
                f.db_latency_us_per_request = Some(st.latency_us_per_request * gone * weight);
            }
        }
    }
    if let Some(Some(t)) = &txn {
        figures.insert("idle_ms".into(), num(t.idle_us_per_request / 1e3));
        figures.insert("endpoint".into(), format!("`{}`", t.endpoint));
        f.counts_per_request.insert(if t.held { "held_idle_us" } else { "idle_in_transaction_us" }.into(), t.idle_us_per_request);
        if let Some(l) = t.latency_us.filter(|&l| l > 0.0) {
            figures.insert("latency_share".into(), format!("{:.0}%", 100.0 * t.idle_us_per_request / l));
        }
        let (total_s, n) = (t.idle_us_per_request * t.requests as f64 / 1e6, t.requests);
        let what = if t.held {
            format!("a database connection checked out of the pool with nothing sent, outside a transaction, beyond the endpoint's on-CPU time ({total_s:.1} s over {n} requests; each gap from a statement's answer to the checkout's next statement or the pool's ping on release, on connections whose pool pings before each checkout and on release)")
        } else {
            format!("a database connection idle inside a transaction ({total_s:.1} s over {n} requests; each gap from a round trip's answer that left the transaction open to the connection's next message)")
        };
        f.evidence.push(format!(
            "wire: {:.1} ms per request of `{}` with {what}{}",
            t.idle_us_per_request / 1e3,
            t.endpoint,
            t.latency_us.filter(|&l| l > 0.0).map_or(String::new(), |l| format!(", against a mean latency of {:.1} ms", l / 1e3))
        ));
        f.evidence.push(format!(
            "the runtime's workers were parked (idle) {:.0}% of their time (from {}): the gaps are waits of the request's own, not a queue for a worker",
            100.0 * t.worker_idle.share,
            t.worker_idle.source()
        ));
        // What the hold costs other requests: the part of the endpoint's latency beyond its
        // CPU, its round trips and the hold itself (the wait for a connection the hold keeps
        // busy, when the pool is short), at most the hold. Without a pool wait it is 0: the
        // wait stays in the request's latency wherever it is moved.
        if let Some(rest) = t.rest_us {
            f.db_latency_us_per_request = Some((rest - t.idle_us_per_request).clamp(0.0, t.idle_us_per_request));
        }
        if t.held {
            ctx.set_db_payers(&mut f, super::costs::EndpointMeasure::HeldIdle, |c| c.held_idle_ns / 1_000);
        } else {
            ctx.set_db_payers(&mut f, super::costs::EndpointMeasure::IdleInTransaction, |c| c.idle_in_transaction_ns / 1_000);
        }
    }
    if let Some(Some(c)) = &conns {
        figures.insert("setups".into(), num(c.per_request));
        f.counts_per_request.insert("connection_setups".into(), c.per_request);
        if let Some(mean) = c.mean_setup_us {
            figures.insert("setup_ms".into(), num(mean / 1e3));
            let per_request = mean * c.per_request;
            f.counts_per_request.insert("connection_setup_us".into(), per_request);
            // The set-up is a wait inside each request that opens a connection (the server's
            // authentication and process start): removing the cost gives it back in latency.
            // The client's own CPU of the set-up (its side of the authentication) runs inside
            // that span and is counted as the finding's CPU, so only the rest is added.
            let wait = (per_request - f.cpu_us_per_request.unwrap_or(0.0)).max(0.0);
            f.db_latency_us_per_request = Some(f.db_latency_us_per_request.unwrap_or(0.0) + wait);
        }
        f.evidence.push(format!(
            "wire: {} database connections set up over {} requests ({:.2} per request){}",
            c.connections,
            c.requests,
            c.per_request,
            c.mean_setup_us.map_or(String::new(), |m| format!(
                ", {:.2} ms each from the first start-up message to the first ReadyForQuery ({} timed): {:.2} ms per request",
                m / 1e3,
                c.timed,
                m * c.per_request / 1e3
            ))
        ));
        // The server's side of the set-ups, when its processes are measured on this host.
        if let Some((exited, timed)) = ctx.profile.connection_setup_server_cpu() {
            f.counts_per_request.insert("connection_setup_db_cpu_us".into(), exited as f64 / 1e3 / timed as f64 * c.per_request);
            f.evidence.push(format!(
                "the database server's CPU per connection set up: at most {:.2} ms ({:.2} s of its processes that exited during the run and of its root, over {timed} set-ups; the statements of those connections are in it too)",
                exited as f64 / 1e6 / timed as f64,
                exited as f64 / 1e9
            ));
        }
    }
    f.owner = callers.first().map(|c| c.frame.clone()).or(off_cpu_owner);
    if let Some(o) = &f.owner {
        figures.insert("caller".into(), format!("`{o}`"));
    }
    for c in callers {
        let bare = c.frame.split(" (").next().unwrap_or(&c.frame);
        if !f.frames.iter().any(|x| x.frame == c.frame || x.frame == bare) && f.frames.len() < 8 {
            f.frames.push(c);
        }
    }
    let fig = |name: &str| figures.get(name).cloned();
    f.title = super::catalog::fill(&rule.title, &fig);
    f.advice = super::catalog::fill(&rule.advice, &fig);
    f.evidence.push(format!("fingerprint `{}` from {}", rule.id, rule.origin));
    Some((f, on.map(|o| o.stacks).unwrap_or_default()))
}

/// Mean bytes per successful call of the syscalls `names`, calls and bytes summed over them.
fn bytes_per_call(ctx: &Ctx<'_>, names: &[String]) -> Option<f64> {
    let (mut bytes, mut calls) = (0u64, 0u64);
    for s in ctx.profile.syscalls.iter().filter(|s| names.contains(&s.name)) {
        s.bytes_per_call()?;
        bytes += s.bytes;
        calls += s.count.saturating_sub(s.errors);
    }
    (calls > 0).then(|| bytes as f64 / calls as f64)
}

/// The statement shape a [`StatementPredicate`] fired on.
struct StatementHit {
    shape: String,
    /// The shape itself, to find it in the endpoint join.
    statement: crate::wire::pg::StatementShape,
    /// The endpoint whose requests run it `executions` times each, when the endpoint join
    /// decided; `None`: per request of the whole load.
    endpoint: Option<String>,
    executions: f64,
    round_trips: f64,
    total_executions: u64,
    requests: u64,
    /// When the statement was prepared before the capture (no text, a per-connection name):
    /// the other such names executed at least once per request in the same scope, with
    /// their executions per request. A driver's statement cache names a statement in the
    /// order each connection prepared it, so the same SQL can run under several names.
    unnamed_siblings: Vec<(String, f64)>,
    steady: bool,
    mean_latency_us: f64,
    latency_us_per_request: f64,
}

/// Fewest requests of an endpoint for its own statement counts per request to decide
/// ([`statements`]): below it, a request or two cut by the capture's edges weighs too much.
pub const MIN_ENDPOINT_REQUESTS: u64 = 20;

/// The statement shape a [`StatementPredicate`] fires on, when one runs at least
/// `min_executions_per_request` times per request: first per endpoint, from the endpoint
/// join (the executions linked to an endpoint's requests over its requests, for endpoints
/// with [`MIN_ENDPOINT_REQUESTS`] or more: a loop on one endpoint of many fires although it
/// is diluted in the whole load), else the most executed shape per HTTP request of
/// [`Ctx::wire`].
fn statements(ctx: &Ctx<'_>, p: &StatementPredicate) -> Option<StatementHit> {
    let w = ctx.wire?;
    let verb_ok = |s: &crate::wire::pg::StatementShape| {
        p.verbs.is_empty()
            || match s {
                crate::wire::pg::StatementShape::Sql { text, .. } => {
                    text.split_whitespace().next().is_some_and(|v| p.verbs.contains(&v.to_ascii_uppercase()))
                }
                _ => false,
            }
    };
    let stats_of = |shape: &crate::wire::pg::StatementShape| w.pg.statements.iter().find(|s| &s.shape == shape);
    if let Some(join) = ctx.profile.endpoints.as_ref() {
        let mut best: Option<(f64, &str, &crate::wire::pg::StatementShape, u64, u64)> = None;
        for d in &join.db {
            let Some(name) = join.endpoints.get(d.endpoint as usize) else { continue };
            let requests = ctx.endpoint_requests(name);
            if requests < MIN_ENDPOINT_REQUESTS {
                continue;
            }
            for st in d.counts.statements.iter().filter(|s| verb_ok(&s.shape)) {
                let per = st.executions as f64 / requests as f64;
                if best.is_none_or(|b| per > b.0) {
                    best = Some((per, name, &st.shape, st.executions, requests));
                }
            }
        }
        if let Some((per, name, shape, executions, requests)) = best.filter(|b| b.0 >= p.min_executions_per_request) {
            let unnamed_siblings = match join.endpoints.iter().position(|e| e == name).and_then(|i| join.db.iter().find(|d| d.endpoint as usize == i)) {
                Some(d) => unnamed_siblings(shape, d.counts.statements.iter().map(|s| (&s.shape, s.executions)), requests),
                None => Vec::new(),
            };
            // Round trips and latency per execution from the whole load's figures for the shape.
            let (rt_per_exec, mean_us) = stats_of(shape)
                .filter(|s| s.executions > 0)
                .map_or((1.0, 0.0), |s| (s.all_round_trips() as f64 / s.executions as f64, s.latency_mean_ns as f64 / 1e3));
            let round_trips = per * rt_per_exec;
            return Some(StatementHit {
                shape: shape.to_string(),
                statement: shape.clone(),
                endpoint: Some(name.to_string()),
                executions: per,
                round_trips,
                total_executions: executions,
                requests,
                unnamed_siblings,
                steady: false,
                mean_latency_us: mean_us,
                latency_us_per_request: round_trips * mean_us,
            });
        }
    }
    let requests = w.http.requests;
    if requests == 0 {
        return None;
    }
    let best = w.pg.statements.iter().filter(|s| verb_ok(&s.shape)).max_by_key(|s| s.executions)?;
    let n = requests as f64;
    let executions = best.executions as f64 / n;
    if executions < p.min_executions_per_request {
        return None;
    }
    Some(StatementHit {
        shape: best.shape.to_string(),
        statement: best.shape.clone(),
        endpoint: None,
        executions,
        round_trips: best.all_round_trips() as f64 / n,
        total_executions: best.executions,
        requests,
        unnamed_siblings: unnamed_siblings(&best.shape, w.pg.statements.iter().map(|s| (&s.shape, s.executions)), requests),
        steady: ctx.profile.wire.as_ref().and_then(|x| x.steady.as_ref()).is_some(),
        mean_latency_us: best.latency_mean_ns as f64 / 1e3,
        // The prepare-only and close-only round trips at the executing ones' mean.
        latency_us_per_request: best.latency_mean_ns as f64 / 1e3 * best.all_round_trips() as f64 / n,
    })
}

/// [`StatementHit::unnamed_siblings`] of `shape` among `(shape, executions)` over `requests`:
/// empty unless `shape` itself was prepared before the capture.
fn unnamed_siblings<'a>(
    shape: &crate::wire::pg::StatementShape,
    all: impl Iterator<Item = (&'a crate::wire::pg::StatementShape, u64)>,
    requests: u64,
) -> Vec<(String, f64)> {
    use crate::wire::pg::StatementShape::PreparedBeforeAttach;
    if !matches!(shape, PreparedBeforeAttach { .. }) || requests == 0 {
        return Vec::new();
    }
    let mut out: Vec<(String, f64)> = all
        .filter(|(s, _)| *s != shape && matches!(s, PreparedBeforeAttach { .. }))
        .map(|(s, n)| (s.to_string(), n as f64 / requests as f64))
        .filter(|(_, per)| *per >= 1.0)
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out
}

/// What a [`ConnectionPredicate`] measured over the whole wire capture.
struct ConnectionHit {
    /// PostgreSQL start-ups seen.
    connections: u64,
    /// Of those, the ones whose set-up time is known.
    timed: u64,
    /// HTTP requests of the capture.
    requests: u64,
    /// `connections / requests`.
    per_request: f64,
    /// Mean set-up time of the timed connections, µs.
    mean_setup_us: Option<f64>,
    fires: bool,
}

/// Database connections set up per HTTP request over the whole wire capture (the steady
/// window leaves start-ups out), and their mean set-up time. `None` without a wire capture,
/// requests or a start-up.
fn connections(ctx: &Ctx<'_>, p: &ConnectionPredicate) -> Option<ConnectionHit> {
    let w = ctx.profile.wire.as_ref()?;
    let requests = w.http.requests;
    if requests == 0 || w.pg.connections == 0 {
        return None;
    }
    let per_request = w.pg.connections as f64 / requests as f64;
    Some(ConnectionHit {
        connections: w.pg.connections,
        timed: w.pg.connections_timed,
        requests,
        per_request,
        mean_setup_us: (w.pg.connections_timed > 0).then(|| w.pg.connection_setup_total_ns as f64 / 1e3 / w.pg.connections_timed as f64),
        fires: p.min_per_request.is_some_and(|m| per_request >= m),
    })
}

/// What a [`TransactionPredicate`] measured on the endpoint whose requests leave their
/// transactions idle longest.
struct TransactionHit {
    endpoint: String,
    requests: u64,
    /// The gaps are of checkouts held outside a transaction ([`IdleGaps::Held`]).
    held: bool,
    /// Idle time per request of the endpoint, µs: inside transactions, or, for held
    /// checkouts, their gaps less the endpoint's on-CPU time.
    idle_us_per_request: f64,
    /// The endpoint's mean latency on the wire, µs.
    latency_us: Option<f64>,
    /// Its latency less its on-CPU time and its round trips, µs per request
    /// ([`super::endpoints::EndpointBreakdown::rest_us_per_request`]), when both are known.
    rest_us: Option<f64>,
    /// The runtime workers' idle time.
    worker_idle: WorkerIdle,
    fires: bool,
}

/// The endpoint whose requests leave database connections idle longest (from the endpoint
/// join's [`crate::wire::serving::DbCounts::idle_in_transaction_ns`], or for
/// [`IdleGaps::Held`] its [`crate::wire::serving::DbCounts::held_idle_ns`] less the endpoint's
/// on-CPU time; endpoints with [`MIN_ENDPOINT_REQUESTS`] or more), and whether it fires: at least
/// `min_idle_us_per_request` per request while the runtime's workers were parked at least
/// `min_worker_idle_share` of their time. `None` without an endpoint join, without idle time,
/// or without off-CPU waits of a runtime worker (the workers' idle time is then unknown).
fn transactions(ctx: &Ctx<'_>, p: &TransactionPredicate) -> Option<TransactionHit> {
    let join = ctx.profile.endpoints.as_ref()?;
    let held = p.gaps == IdleGaps::Held;
    let gap_ns = |c: &crate::wire::serving::DbCounts| if held { c.held_idle_ns } else { c.idle_in_transaction_ns };
    let rows = super::endpoints::breakdown(ctx.profile, ctx.attr, ctx.profile.wire.as_ref());
    let row_of = |name: &str| rows.iter().find(|r| r.endpoint == name);
    // Idle µs per request: a held checkout's gaps less the endpoint's own CPU per request
    // (what its handler did while holding the connection).
    let idle_of = |ns: u64, name: &str, requests: u64| {
        let us = ns as f64 / 1e3 / requests as f64;
        if held {
            (us - row_of(name).and_then(|r| r.cpu_us_per_request).unwrap_or(0.0)).max(0.0)
        } else {
            us
        }
    };
    let (idle_us_per_request, name, requests) = join
        .db
        .iter()
        .filter_map(|d| {
            let name = join.endpoints.get(d.endpoint as usize)?;
            let requests = ctx.endpoint_requests(name);
            let ns = gap_ns(&d.counts);
            (requests >= MIN_ENDPOINT_REQUESTS && ns > 0).then(|| (idle_of(ns, name, requests), name, requests))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))?;
    let worker_idle = ctx.worker_idle()?;
    let row = row_of(name);
    Some(TransactionHit {
        endpoint: name.clone(),
        requests,
        held,
        idle_us_per_request,
        latency_us: row.and_then(|r| r.latency_us),
        rest_us: row.and_then(|r| r.rest_us_per_request),
        worker_idle,
        fires: idle_us_per_request >= p.min_idle_us_per_request && worker_idle.share >= p.min_worker_idle_share,
    })
}

/// The runtime workers' idle time ([`worker_idle_share`]).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WorkerIdle {
    /// Share (0..1) of the workers' time they were parked: their parked off-CPU time over the
    /// run's length times the workers seen.
    pub share: f64,
    /// `true` when told by [`super::catalog::RUNTIME_PARK`] frames on their off-CPU stacks;
    /// `false` when those stacks stop short of the worker's loop (off-CPU stacks are walked
    /// by frame pointers, which a default release build omits) and the waits were told by
    /// the kernel call they block in ([`super::catalog::RUNTIME_PARK_KERNEL`]).
    pub from_park_frames: bool,
    /// The workers' off-CPU time outside their park over the run, ns: blocking calls, lock
    /// waits, page faults. What holds a worker that could run other tasks.
    #[serde(default)]
    pub blocked_ns: u64,
}

impl WorkerIdle {
    /// How the share was told, for a finding's evidence.
    pub fn source(&self) -> &'static str {
        if self.from_park_frames {
            "their off-CPU waits under the runtime's park"
        } else {
            "their off-CPU waits in the kernel calls a runtime parks in (epoll_wait, futex): their user stacks stop short of the worker's loop, without frame pointers"
        }
    }
}

/// Share of the runtime workers' time spent parked: their off-CPU time in waits whose stack
/// has a `runtime-park` frame, over the run's length times the workers seen (threads of the
/// `runtime worker` role). A wait begun before the attach is not seen (its switch-out was not
/// recorded), so a worker parked from before the attach until the load begins counts as busy
/// until then: the share errs low, and a finding gated on it stays silent rather than fires.
/// (A worker preempted while runnable is not off the CPU by choice and counts as busy too.)
/// When no off-CPU stack of a worker reaches the worker's loop (a frame of its role: the user
/// stack was cut short, as frame-pointer walks are in code built without frame pointers), the
/// waits in a `runtime-park-kernel` frame count instead (the runtime parks in `epoll_wait` or
/// on a futex), less those in a `lock-wait` frame (a contended lock's futex wait, which the
/// kernel marks from the syscall's arguments). `None` without the frame sets or without an
/// off-CPU wait of a worker.
pub(super) fn worker_idle_share(ctx: &Ctx<'_>) -> Option<WorkerIdle> {
    let park = ctx.rules.frame_set(super::catalog::RUNTIME_PARK)?;
    let worker = ctx.attr.role_names.iter().position(|n| n == WORKER_ROLE)?;
    let loop_frames = &ctx.rules.thread_roles().get(worker)?.frames;
    let workers = ctx.attr.thread_roles.values().filter(|&&r| r == worker).count();
    let (mut parked_ns, mut kernel_parked_ns, mut off_ns) = (0u64, 0u64, 0u64);
    let (mut any, mut walked) = (false, false);
    let kernel_park = ctx.rules.frame_set(super::catalog::RUNTIME_PARK_KERNEL);
    let lock_wait = ctx.rules.frame_set(super::catalog::LOCK_WAIT);
    for c in &ctx.profile.off_cpu {
        if ctx.attr.thread_roles.get(&(c.pid, c.tid)) != Some(&worker) {
            continue;
        }
        any = true;
        off_ns += c.total_ns;
        let Some(stack) = ctx.profile.stacks.get(c.stack as usize) else { continue };
        let paths = || stack.frames.iter().map(|&f| ctx.path(f));
        if paths().any(|p| park.matches(p)) {
            parked_ns += c.total_ns;
        }
        if !walked && paths().any(|p| loop_frames.iter().any(|re| re.is_match(p))) {
            walked = true;
        }
        if kernel_park.is_some_and(|k| paths().any(|p| k.matches(p))) && !lock_wait.is_some_and(|l| paths().any(|p| l.matches(p))) {
            kernel_parked_ns += c.total_ns;
        }
    }
    let span = ctx.profile.meta.duration_ns as f64 * workers as f64;
    if !any || span <= 0.0 {
        return None;
    }
    if walked {
        return Some(WorkerIdle { share: (parked_ns as f64 / span).min(1.0), from_park_frames: true, blocked_ns: off_ns.saturating_sub(parked_ns) });
    }
    kernel_park?;
    Some(WorkerIdle { share: (kernel_parked_ns as f64 / span).min(1.0), from_park_frames: false, blocked_ns: off_ns.saturating_sub(kernel_parked_ns) })
}

/// A figure for a title: 3 significant digits up to 1,000, whole numbers above
/// (`0.724`, `12.5`, `2145`, `11299`).
fn num(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn roles_text(roles: &[String]) -> String {
    if roles.is_empty() {
        String::new()
    } else {
        format!(" on {} threads", roles.join(" or "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::pg::StatementShape;

    #[test]
    fn unnamed_siblings_are_the_other_names_prepared_before_the_attach() {
        // A fresh user's N+1 route without --db-url: the loop's one SELECT ran as `sqlx_s_1`
        // (11.46 per request) on some of the pool's connections and `sqlx_s_2` (8.53) on the
        // others; a statement with text and a name run less than once per request are not
        // siblings.
        let before = |name: &str| StatementShape::PreparedBeforeAttach { name: name.into(), connection: 0 };
        let (s1, s2, s3) = (before("sqlx_s_1"), before("sqlx_s_2"), before("sqlx_s_3"));
        let sql = StatementShape::Sql { text: "SELECT ?".into(), truncated: false };
        let all = [(&s1, 11_460u64), (&s2, 8_530), (&s3, 500), (&sql, 1_000)];
        let siblings = unnamed_siblings(&s1, all.iter().copied(), 1_000);
        assert_eq!(siblings, vec![("(prepared before attach: \"sqlx_s_2\")".to_string(), 8.53)]);
        // A statement with its text has no siblings of that kind.
        assert!(unnamed_siblings(&sql, all.iter().copied(), 1_000).is_empty());
    }
}
