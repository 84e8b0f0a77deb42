//! Cost fingerprints and thread roles as data: the `[[cost]]` and `[[thread_role]]` tables of a
//! rules file, beside its `[[layer]]` tables ([`super::rules`]).
//!
//! # `[[thread_role]]`
//! ```toml
//! [[thread_role]]
//! name = "runtime worker"                                   # unique
//! frames = ['^tokio::runtime::scheduler::multi_thread::worker::run\b']
//! ```
//! A thread takes the first role (in precedence order: later files first, then file order)
//! any of whose `frames` regexes matches a frame of one of the thread's on- or off-CPU stacks;
//! a thread no role matches is `other` ([`OTHER_ROLE`]). Roles come from stacks, not thread
//! names: tokio names its workers and its blocking threads alike (`tokio-runtime-worker`) and
//! starts workers from its blocking pool, so the worker rule must come before the pool's.
//!
//! # `[[frame_set]]`
//! ```toml
//! [[frame_set]]
//! name = "lock"                                             # unique
//! frames = ['^std::sys::sync::(mutex|rwlock)::']
//! ```
//! A named set of frame regexes, defined once and used by name (`"@lock"`) in any list of
//! frame regexes of a `[[cost]]` or `[[thread_role]]` (defined earlier in the file, or in an
//! earlier file), and by the Rust code that needs the same frames (`profiler diff` leaves out
//! [`RUNTIME_PARK`] samples and counts [`LOCK`] and [`SPAWN`] frames; the [`BURSTY`] sets' frames
//! ([`HEAP_GROWTH`], [`CONNECTION_SETUP`]) take a wider noise floor there; `global-locks` finds lock calls with [`LOCK`]).
//!
//! # `[[cost]]`
//! ```toml
//! [[cost]]
//! id = "construction-per-request"    # a generic name of the pattern (unique)
//! title = "an object that is costly to build is built on the request path ({cpu_us} µs of CPU per request)"
//! advice = "build it once (a static LazyLock or the app's state) and share it"
//! confidence = "medium"              # low | medium | high: when one section fires (default medium)
//! require = "any"                    # any | all: which gating sections must fire (default any)
//!
//! [cost.on_cpu]                      # on-CPU samples (optional)
//! frames = ['^regex::regex::string::Regex::new$']   # a sample counts when a frame matches one
//! under = []                         # ... and a frame above that one (towards the root) matches one
//! not_under = []                     # ... and no frame above it matches one of these
//! not_frames = []                    # ... and no frame of the stack matches one of these
//! caller_not = []                    # ... and the caller of the first match does not match one of these
//! roles = ["runtime worker"]         # ... on a thread of one of these roles (default any)
//! min_share = 0.005                  # fires when the share of the app's samples, less 2 standard errors, is at least this (0: any sample)
//! min_us_per_request = 0.0           # ... and the sampled CPU per request is at least this, µs
//!
//! [cost.off_cpu]                     # off-CPU waits (optional)
//! frames = []                        # a wait counts when a frame of its stack matches one (empty: any wait)
//! not_frames = []                    # ... and no frame matches one of these
//! caller_not = ['^(tokio|mio)::']    # ... and its caller (see below) does not match one of these
//! unknown_caller = false             # ... or, when true, it has no caller (see below) at all
//! unknown_caller_not = []            # ... unless, having none, a frame of its stack matches one of these
//! roles = ["runtime worker"]         # ... on a thread of one of these roles (default any)
//! min_us_per_request = 20.0          # fires at this many µs switched out per request
//! min_ratio_to_cpu = 0.1             # ... and at this many times the sampled CPU µs per request
//!
//! [cost.syscalls]                    # syscall counts (optional)
//! names = ["write"]                  # quoted per request in the evidence
//! min_per_request = 0.5              # gates only when given: their sum per request at least this
//! max_bytes_per_call = 64.0          # ... and the mean bytes moved per successful call of `names` at most this
//!
//! [cost.statements]                  # database statements per HTTP request, from the wire (optional)
//! min_executions_per_request = 5.0   # fires when one statement shape runs at least this often per request
//! verbs = ["SELECT"]                 # ... among the shapes that start with one of these keywords (default any)
//!
//! [cost.transactions]                # database connections idle inside a transaction, from the wire (optional)
//! gaps = "in_transaction"            # or "held": checkouts held with nothing sent outside a transaction, less the CPU
//! min_idle_us_per_request = 2000.0   # fires when an endpoint's requests leave their transactions idle this long, µs each
//! min_worker_idle_share = 0.25       # ... while the runtime's workers were parked at least this share of their time
//!
//! [cost.connections]                 # database connections set up, from the wire (optional)
//! min_per_request = 0.5              # gates only when given: connection start-ups per HTTP request at least this
//! ```
//! A cost fires when its gating sections do (`on_cpu`, `off_cpu`, `statements` and `transactions` gate when
//! present, `syscalls` and `connections` when they have a `min_per_request`); with two gating
//! sections firing its confidence is `high`. A `connections` section also makes the set-up time
//! the wire measured (first start-up message to first ReadyForQuery, per request) a part of
//! what removing the cost gives back in latency.
//! The **caller** of a stack is its innermost user frame outside the standard library, libc and
//! lock crates ([`super::layers::is_transparent`]): the code that asked for the work or the wait.
//!
//! `title` and `advice` may quote the finding's figures: `{cpu_us}` (sampled CPU µs per
//! request), `{share}` (% of the app's samples), `{blocked_us}` (µs switched out per request),
//! `{waits}` (waits per request), `{mean_wait_us}`, `{caller}` (the top caller frame) and
//! `{syscalls.NAME}` (calls of NAME per request), `{bytes_per_call.NAME}` (mean bytes per
//! successful call of NAME), `{statement}` (the statement shape that
//! fired, as text) and `{executions}` (its executions per request), `{endpoint}` (the endpoint
//! that fired), `{idle_ms}` (ms idle in transaction per request) and `{latency_share}` (that
//! time's share of the endpoint's latency), `{setups}` (database connections set up per
//! request) and `{setup_ms}` (their mean set-up time, ms); an unknown figure reads `?`.
//!
//! A fingerprint that a predicate cannot say keeps a Rust detector: `detector = "NAME"` (one of
//! [`super::costs::DETECTORS`]) with `why_code = "..."` saying why; its sections must be absent.

use std::ops::Range;

use regex::Regex;
use serde::Deserialize;
use toml::Spanned;

use super::costs::Confidence;
use super::rules::RuleError;

/// The frame set of a runtime worker parking itself (its idle time).
pub const RUNTIME_PARK: &str = "runtime-park";
/// The frame set of the kernel calls a runtime worker parks in (`epoll_wait`, a futex wait):
/// its idle time when its off-CPU user stacks stop short of the runtime's park frames (code
/// built without frame pointers).
pub const RUNTIME_PARK_KERNEL: &str = "runtime-park-kernel";
/// The frame set of std, lock_api and parking_lot lock and unlock calls.
pub const LOCK: &str = "lock";
/// The frame set of a thread waiting for a lock (the lock calls, glibc's lock waits, the
/// kernel's mark of a contended lock's futex wait): not a runtime's idle park.
pub const LOCK_WAIT: &str = "lock-wait";
/// The frame set of the places a web framework serializes a JSON response body (axum's
/// `into_response`, actix-web's `Json` responder, `warp::reply::json`, ...).
pub const JSON_RESPONSE: &str = "json-response";
/// The frame set of tokio's task spawns.
pub const SPAWN: &str = "spawn";
/// The frame set of the allocator growing its heap (fresh pages), whose samples come in bursts.
pub const HEAP_GROWTH: &str = "heap-growth";
/// The frame set of a database client opening a connection (the driver's connect and its
/// authentication): a pool opens its connections at a run's edges, whose samples come in
/// bursts.
pub const CONNECTION_SETUP: &str = "connection-setup";
/// The frame sets whose samples come in bursts that follow the process's state rather than the
/// code: `profiler diff` gives the stacks through them a wider noise floor.
pub const BURSTY: &[&str] = &[HEAP_GROWTH, CONNECTION_SETUP];
/// The frame set of PostgreSQL client drivers (sqlx, tokio-postgres, diesel, ...): their
/// share of the samples, and a warning when they are on the stacks but the wire decoded no
/// PostgreSQL traffic.
pub const DB_DRIVER: &str = "db-driver";
/// The frame set of the places a task awaits something other than a socket or a CPU (a
/// timer, a pool's acquire, a semaphore or an async lock, a channel, an upstream HTTP call):
/// named in the evidence of an endpoint whose latency is mostly such waits.
pub const ASYNC_WAIT: &str = "async-wait";

/// A named set of frame regexes (`[[frame_set]]`).
#[derive(Debug, Clone)]
pub struct FrameSet {
    /// Unique name, e.g. `lock`.
    pub name: String,
    /// The regexes.
    pub frames: Vec<Regex>,
    /// Where it was defined.
    pub origin: String,
}

impl FrameSet {
    /// True when one of the set's regexes matches `path`.
    pub fn matches(&self, path: &str) -> bool {
        self.frames.iter().any(|r| r.is_match(path))
    }
}

/// Looks up a frame set by name while a file is parsed.
pub(super) type SetLookup<'a> = &'a dyn Fn(&str) -> Option<Vec<Regex>>;

/// The role of a thread no `[[thread_role]]` matches.
pub const OTHER_ROLE: &str = "other";

/// A thread role: a name and the frames that give a thread this role.
#[derive(Debug, Clone)]
pub struct ThreadRole {
    /// Unique name, e.g. `runtime worker`.
    pub name: String,
    /// A thread with a frame matching one of these has the role.
    pub frames: Vec<Regex>,
    /// Where it was defined.
    pub origin: String,
}

/// The on-CPU section of a [`CostRule`].
#[derive(Debug, Clone, Default)]
pub struct OnCpuPredicate {
    /// A sample counts when one of its frames matches one of these.
    pub frames: Vec<Regex>,
    /// ... and a frame nearer the root than the first match matches one of these (empty: no
    /// condition).
    pub under: Vec<Regex>,
    /// ... and no frame nearer the root than the first match matches one of these.
    pub not_under: Vec<Regex>,
    /// ... and no frame of the stack matches one of these.
    pub not_frames: Vec<Regex>,
    /// ... and the caller of the first match does not match one of these.
    pub caller_not: Vec<Regex>,
    /// ... on a thread of one of these roles (empty: any).
    pub roles: Vec<String>,
    /// Fires when `share - 2 × its standard error` is at least this (share of the app's
    /// on-CPU samples, 0..1).
    pub min_share: f64,
    /// ... and the sampled CPU per request is at least this, µs.
    pub min_us_per_request: f64,
}

/// The off-CPU section of a [`CostRule`].
#[derive(Debug, Clone, Default)]
pub struct OffCpuPredicate {
    /// A wait counts when a frame of its stack matches one of these (empty: every wait).
    pub frames: Vec<Regex>,
    /// ... and no frame of its stack matches one of these.
    pub not_frames: Vec<Regex>,
    /// ... and its caller frame does not match one of these.
    pub caller_not: Vec<Regex>,
    /// Whether a wait with no caller frame (no user frame outside std and libc: the user walk
    /// stopped in libc, as frame-pointer walks do in code built without frame pointers) counts
    /// despite `caller_not`, which it cannot be checked against. For waits told by their kind
    /// alone (a contended lock's futex).
    pub unknown_caller: bool,
    /// ... except, for a wait with no caller frame, when a frame of its stack matches one of
    /// these (the kernel calls a runtime parks in, which a blocking call's wait is told from
    /// only by its caller).
    pub unknown_caller_not: Vec<Regex>,
    /// ... on a thread of one of these roles (empty: any).
    pub roles: Vec<String>,
    /// Fires at this many µs switched out per request.
    pub min_us_per_request: f64,
    /// ... and at this many times the sampled CPU µs per request (0: no condition), so that a
    /// few µs of waits beside milliseconds of CPU stay silent.
    pub min_ratio_to_cpu: f64,
}

/// The syscall section of a [`CostRule`].
#[derive(Debug, Clone, Default)]
pub struct SyscallPredicate {
    /// Syscalls quoted per request (`{syscalls.NAME}`, counts `syscalls.NAME`).
    pub names: Vec<String>,
    /// Gates when given: the calls of `names` per request, summed, at least this.
    pub min_per_request: Option<f64>,
    /// With `min_per_request`: the mean bytes per successful call of `names` (calls and bytes
    /// summed) must be at most this.
    pub max_bytes_per_call: Option<f64>,
}

/// The statement section of a [`CostRule`]: one statement shape (merged across connections)
/// executed many times per HTTP request, from the wire capture.
#[derive(Debug, Clone, Default)]
pub struct StatementPredicate {
    /// Fires when the most executed shape runs at least this many times per request.
    pub min_executions_per_request: f64,
    /// Only shapes whose first keyword is one of these (upper case); empty: any.
    pub verbs: Vec<String>,
}

/// The transaction section of a [`CostRule`]: database connections left idle inside a
/// transaction (PostgreSQL's `idle in transaction`: the app holds the transaction, its
/// connection and its row locks open while it does something else), per HTTP request of an
/// endpoint, from the wire capture ([`crate::wire::serving::DbCounts::idle_in_transaction_ns`]).
#[derive(Debug, Clone, Default)]
pub struct TransactionPredicate {
    /// Which idle gaps count: inside transactions (default) or of checkouts held outside one.
    pub gaps: IdleGaps,
    /// Fires when an endpoint's requests leave their transactions idle at least this long, µs
    /// per request.
    pub min_idle_us_per_request: f64,
    /// ... and the runtime's worker threads were parked (idle, off-CPU in the `runtime-park`
    /// frames) at least this share (0..1) of their time: on saturated workers the gaps in a
    /// transaction are the task's wait for a worker, not a wait of its own. Without off-CPU
    /// waits in the profile the section does not fire.
    pub min_worker_idle_share: f64,
}

/// The idle gaps a [`TransactionPredicate`] counts (`gaps = "in_transaction"` or `"held"`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdleGaps {
    /// A connection idle inside a transaction
    /// ([`crate::wire::serving::DbCounts::idle_in_transaction_ns`]).
    #[default]
    InTransaction,
    /// A connection checked out of its pool with nothing sent, outside a transaction
    /// ([`crate::wire::serving::DbCounts::held_idle_ns`]), less the endpoint's on-CPU time per
    /// request (the handler's own work while it holds the connection).
    Held,
}

/// The connection section of a [`CostRule`]: database connections set up while the service
/// runs, from the wire capture (each PostgreSQL start-up seen, and its time from the client's
/// first start-up message to the first ReadyForQuery, [`crate::wire::summary::PgSummary`]).
#[derive(Debug, Clone, Default)]
pub struct ConnectionPredicate {
    /// Gates when given: connection start-ups per HTTP request at least this.
    pub min_per_request: Option<f64>,
}

/// Default [`TransactionPredicate::min_worker_idle_share`].
pub const DEFAULT_MIN_WORKER_IDLE_SHARE: f64 = 0.25;

/// One `[[cost]]`: a fingerprint as predicates, or a named Rust detector.
#[derive(Debug, Clone)]
pub struct CostRule {
    /// Stable id, the generic name of the pattern.
    pub id: String,
    /// Title template.
    pub title: String,
    /// Advice template (empty when none).
    pub advice: String,
    /// Confidence when one gating section fires.
    pub confidence: Confidence,
    /// True: every gating section must fire; false: any.
    pub require_all: bool,
    /// A Rust detector's name instead of predicates.
    pub detector: Option<String>,
    /// Why the Rust detector exists (what a predicate cannot say).
    pub why_code: String,
    /// On-CPU predicate.
    pub on_cpu: Option<OnCpuPredicate>,
    /// Off-CPU predicate.
    pub off_cpu: Option<OffCpuPredicate>,
    /// Syscall predicate.
    pub syscalls: Option<SyscallPredicate>,
    /// Statement predicate.
    pub statements: Option<StatementPredicate>,
    /// Idle time inside transactions, from the wire.
    pub transactions: Option<TransactionPredicate>,
    /// Database connections set up, from the wire.
    pub connections: Option<ConnectionPredicate>,
    /// Where it was defined.
    pub origin: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FrameSetToml {
    name: Spanned<String>,
    frames: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RoleToml {
    name: Spanned<String>,
    frames: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CostToml {
    id: Spanned<String>,
    #[serde(default)]
    title: Option<Spanned<String>>,
    #[serde(default)]
    advice: Option<String>,
    #[serde(default)]
    confidence: Option<Spanned<String>>,
    #[serde(default)]
    require: Option<Spanned<String>>,
    #[serde(default)]
    detector: Option<Spanned<String>>,
    #[serde(default)]
    why_code: Option<String>,
    #[serde(default)]
    on_cpu: Option<Spanned<OnCpuToml>>,
    #[serde(default)]
    off_cpu: Option<Spanned<OffCpuToml>>,
    #[serde(default)]
    syscalls: Option<Spanned<SyscallsToml>>,
    #[serde(default)]
    statements: Option<Spanned<StatementsToml>>,
    #[serde(default)]
    transactions: Option<Spanned<TransactionsToml>>,
    #[serde(default)]
    connections: Option<Spanned<ConnectionsToml>>,
}

impl CostToml {
    pub(super) fn id_span(&self) -> Range<usize> {
        self.id.span()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OnCpuToml {
    frames: Vec<Spanned<String>>,
    #[serde(default)]
    under: Vec<Spanned<String>>,
    #[serde(default)]
    not_under: Vec<Spanned<String>>,
    #[serde(default)]
    not_frames: Vec<Spanned<String>>,
    #[serde(default)]
    caller_not: Vec<Spanned<String>>,
    #[serde(default)]
    roles: Vec<String>,
    #[serde(default)]
    min_share: Option<f64>,
    #[serde(default)]
    min_us_per_request: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OffCpuToml {
    #[serde(default)]
    frames: Vec<Spanned<String>>,
    #[serde(default)]
    not_frames: Vec<Spanned<String>>,
    #[serde(default)]
    caller_not: Vec<Spanned<String>>,
    #[serde(default)]
    unknown_caller: bool,
    #[serde(default)]
    unknown_caller_not: Vec<Spanned<String>>,
    #[serde(default)]
    roles: Vec<String>,
    #[serde(default)]
    min_us_per_request: Option<f64>,
    #[serde(default)]
    min_ratio_to_cpu: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SyscallsToml {
    names: Vec<String>,
    #[serde(default)]
    min_per_request: Option<f64>,
    #[serde(default)]
    max_bytes_per_call: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConnectionsToml {
    #[serde(default)]
    min_per_request: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TransactionsToml {
    #[serde(default)]
    gaps: IdleGaps,
    min_idle_us_per_request: f64,
    #[serde(default)]
    min_worker_idle_share: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StatementsToml {
    min_executions_per_request: f64,
    #[serde(default)]
    verbs: Vec<String>,
}

/// Default `min_share` of an on-CPU predicate: 0.5% of the app's samples (less 2 standard
/// errors), so that a cost of a few samples in a large profile stays silent.
pub const DEFAULT_MIN_SHARE: f64 = 0.005;

/// Compiles a list of regexes (`@name` entries expand to the frame set of that name); `what`
/// names the list in errors.
pub(super) fn regexes(
    list: &[Spanned<String>],
    what: &str,
    sets: SetLookup<'_>,
    err: &dyn Fn(Option<Range<usize>>, String) -> RuleError,
) -> Result<Vec<Regex>, RuleError> {
    let mut out = Vec::with_capacity(list.len());
    for r in list {
        if let Some(name) = r.get_ref().strip_prefix('@') {
            match sets(name) {
                Some(v) => out.extend(v),
                None => return Err(err(Some(r.span()), format!("{what}: no frame_set named {name:?} (define it before its use)"))),
            }
            continue;
        }
        let re = Regex::new(r.get_ref()).map_err(|e| {
            let first = e.to_string().lines().last().unwrap_or("invalid").trim().to_string();
            err(Some(r.span()), format!("{what}: bad regex {:?}: {first}", r.get_ref()))
        })?;
        if re.is_match("") {
            return Err(err(Some(r.span()), format!("{what}: regex {:?} matches every frame", r.get_ref())));
        }
        out.push(re);
    }
    Ok(out)
}

pub(super) fn parse_frame_set(
    t: &Spanned<FrameSetToml>,
    origin: &str,
    sets: SetLookup<'_>,
    err: &dyn Fn(Option<Range<usize>>, String) -> RuleError,
) -> Result<FrameSet, RuleError> {
    let r = t.get_ref();
    let name = r.name.get_ref().trim().to_string();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(err(Some(r.name.span()), format!("frame_set name {name:?} must be one word")));
    }
    let frames = regexes(&r.frames, &format!("frame_set `{name}`"), sets, err)?;
    if frames.is_empty() {
        return Err(err(Some(t.span()), format!("frame_set `{name}` has no frames")));
    }
    Ok(FrameSet { name, frames, origin: origin.to_string() })
}

pub(super) fn parse_role(
    t: &Spanned<RoleToml>,
    origin: &str,
    sets: SetLookup<'_>,
    err: &dyn Fn(Option<Range<usize>>, String) -> RuleError,
) -> Result<ThreadRole, RuleError> {
    let r = t.get_ref();
    let name = r.name.get_ref().trim().to_string();
    if name.is_empty() || name == OTHER_ROLE {
        return Err(err(Some(r.name.span()), format!("thread_role name must be non-empty and not {OTHER_ROLE:?}")));
    }
    let frames = regexes(&r.frames, &format!("thread_role `{name}` frames"), sets, err)?;
    if frames.is_empty() {
        return Err(err(Some(t.span()), format!("thread_role `{name}` has no frames")));
    }
    Ok(ThreadRole { name, frames, origin: origin.to_string() })
}

pub(super) fn parse_cost(
    t: &Spanned<CostToml>,
    origin: &str,
    detectors: &[&str],
    sets: SetLookup<'_>,
    err: &dyn Fn(Option<Range<usize>>, String) -> RuleError,
) -> Result<CostRule, RuleError> {
    let c = t.get_ref();
    let id = c.id.get_ref().trim().to_string();
    if id.is_empty() || !id.chars().all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '-') {
        return Err(err(Some(c.id.span()), format!("cost id {id:?} must be lower-case letters, digits and '-'")));
    }
    let confidence = match c.confidence.as_ref().map(|s| s.get_ref().as_str()) {
        None | Some("medium") => Confidence::Medium,
        Some("low") => Confidence::Low,
        Some("high") => Confidence::High,
        Some(other) => {
            return Err(err(c.confidence.as_ref().map(|s| s.span()), format!("cost `{id}`: confidence must be low, medium or high, not {other:?}")));
        }
    };
    let require_all = match c.require.as_ref().map(|s| s.get_ref().as_str()) {
        None | Some("any") => false,
        Some("all") => true,
        Some(other) => return Err(err(c.require.as_ref().map(|s| s.span()), format!("cost `{id}`: require must be any or all, not {other:?}"))),
    };
    let has_sections = c.on_cpu.is_some() || c.off_cpu.is_some() || c.syscalls.is_some() || c.statements.is_some() || c.transactions.is_some() || c.connections.is_some();
    if let Some(d) = &c.detector {
        if !detectors.contains(&d.get_ref().as_str()) {
            return Err(err(Some(d.span()), format!("cost `{id}`: unknown detector {:?} (known: {})", d.get_ref(), detectors.join(", "))));
        }
        if has_sections {
            return Err(err(Some(d.span()), format!("cost `{id}`: a detector cost has no on_cpu/off_cpu/syscalls/statements/transactions/connections section")));
        }
        if c.why_code.as_deref().is_none_or(|w| w.trim().is_empty()) {
            return Err(err(Some(d.span()), format!("cost `{id}`: a detector needs why_code (what a predicate cannot say)")));
        }
    } else if !has_sections {
        return Err(err(Some(t.span()), format!("cost `{id}` has neither a detector nor an on_cpu, off_cpu, syscalls, statements, transactions or connections section")));
    }
    if let Some(t) = &c.title {
        if let Some(bad) = unknown_placeholder(t.get_ref()) {
            return Err(err(Some(t.span()), format!("cost `{id}`: title has an unknown figure {{{bad}}} (known: {})", FIGURES.join(", "))));
        }
    }
    if let Some(bad) = c.advice.as_deref().and_then(unknown_placeholder) {
        return Err(err(Some(c.id.span()), format!("cost `{id}`: advice has an unknown figure {{{bad}}} (known: {})", FIGURES.join(", "))));
    }
    let title = match &c.title {
        Some(s) if !s.get_ref().trim().is_empty() => s.get_ref().trim().to_string(),
        Some(s) => return Err(err(Some(s.span()), format!("cost `{id}`: title is empty"))),
        None if c.detector.is_some() => String::new(),
        None => return Err(err(Some(t.span()), format!("cost `{id}` has no title"))),
    };
    let on_cpu = match &c.on_cpu {
        None => None,
        Some(s) => {
            let o = s.get_ref();
            let frames = regexes(&o.frames, &format!("cost `{id}` on_cpu.frames"), sets, err)?;
            if frames.is_empty() {
                return Err(err(Some(s.span()), format!("cost `{id}`: on_cpu.frames is empty")));
            }
            Some(OnCpuPredicate {
                frames,
                under: regexes(&o.under, &format!("cost `{id}` on_cpu.under"), sets, err)?,
                not_under: regexes(&o.not_under, &format!("cost `{id}` on_cpu.not_under"), sets, err)?,
                not_frames: regexes(&o.not_frames, &format!("cost `{id}` on_cpu.not_frames"), sets, err)?,
                caller_not: regexes(&o.caller_not, &format!("cost `{id}` on_cpu.caller_not"), sets, err)?,
                roles: o.roles.clone(),
                min_share: o.min_share.unwrap_or(DEFAULT_MIN_SHARE),
                min_us_per_request: o.min_us_per_request.unwrap_or(0.0),
            })
        }
    };
    let off_cpu = match &c.off_cpu {
        None => None,
        Some(s) => {
            let o = s.get_ref();
            let Some(min) = o.min_us_per_request else {
                return Err(err(Some(s.span()), format!("cost `{id}`: off_cpu needs min_us_per_request")));
            };
            Some(OffCpuPredicate {
                frames: regexes(&o.frames, &format!("cost `{id}` off_cpu.frames"), sets, err)?,
                not_frames: regexes(&o.not_frames, &format!("cost `{id}` off_cpu.not_frames"), sets, err)?,
                caller_not: regexes(&o.caller_not, &format!("cost `{id}` off_cpu.caller_not"), sets, err)?,
                unknown_caller: o.unknown_caller,
                unknown_caller_not: regexes(&o.unknown_caller_not, &format!("cost `{id}` off_cpu.unknown_caller_not"), sets, err)?,
                roles: o.roles.clone(),
                min_us_per_request: min,
                min_ratio_to_cpu: o.min_ratio_to_cpu.unwrap_or(0.0),
            })
        }
    };
    let syscalls = match &c.syscalls {
        None => None,
        Some(s) => {
            let o = s.get_ref();
            if o.names.is_empty() {
                return Err(err(Some(s.span()), format!("cost `{id}`: syscalls.names is empty")));
            }
            if o.max_bytes_per_call.is_some() && o.min_per_request.is_none() {
                return Err(err(Some(s.span()), format!("cost `{id}`: syscalls.max_bytes_per_call needs min_per_request")));
            }
            Some(SyscallPredicate { names: o.names.clone(), min_per_request: o.min_per_request, max_bytes_per_call: o.max_bytes_per_call })
        }
    };
    let statements = match &c.statements {
        None => None,
        Some(s) => {
            let o = s.get_ref();
            if !(o.min_executions_per_request.is_finite() && o.min_executions_per_request > 0.0) {
                return Err(err(Some(s.span()), format!("cost `{id}`: statements.min_executions_per_request must be above 0")));
            }
            Some(StatementPredicate {
                min_executions_per_request: o.min_executions_per_request,
                verbs: o.verbs.iter().map(|v| v.to_ascii_uppercase()).collect(),
            })
        }
    };
    let transactions = match &c.transactions {
        None => None,
        Some(s) => {
            let o = s.get_ref();
            if !(o.min_idle_us_per_request.is_finite() && o.min_idle_us_per_request > 0.0) {
                return Err(err(Some(s.span()), format!("cost `{id}`: transactions.min_idle_us_per_request must be above 0")));
            }
            let share = o.min_worker_idle_share.unwrap_or(DEFAULT_MIN_WORKER_IDLE_SHARE);
            if !(0.0..=1.0).contains(&share) {
                return Err(err(Some(s.span()), format!("cost `{id}`: transactions.min_worker_idle_share must be within 0..1")));
            }
            Some(TransactionPredicate { gaps: o.gaps, min_idle_us_per_request: o.min_idle_us_per_request, min_worker_idle_share: share })
        }
    };
    let connections = match &c.connections {
        None => None,
        Some(s) => {
            let min = s.get_ref().min_per_request;
            if min.is_some_and(|m| !(m.is_finite() && m > 0.0)) {
                return Err(err(Some(s.span()), format!("cost `{id}`: connections.min_per_request must be above 0")));
            }
            Some(ConnectionPredicate { min_per_request: min })
        }
    };
    Ok(CostRule {
        id,
        title,
        advice: c.advice.clone().unwrap_or_default(),
        confidence,
        require_all,
        detector: c.detector.as_ref().map(|d| d.get_ref().clone()),
        why_code: c.why_code.clone().unwrap_or_default(),
        on_cpu,
        off_cpu,
        syscalls,
        statements,
        transactions,
        connections,
        origin: origin.to_string(),
    })
}

/// The figures a title or advice may quote (`{syscalls.NAME}` besides).
pub const FIGURES: &[&str] =
    &["cpu_us", "share", "blocked_us", "waits", "mean_wait_us", "caller", "syscalls.NAME", "bytes_per_call.NAME", "statement", "executions", "endpoint", "idle_ms", "latency_share", "setups", "setup_ms"];

/// The first `{name}` of a template that is not one of [`FIGURES`].
fn unknown_placeholder(template: &str) -> Option<String> {
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        let end = rest[start..].find('}')? + start;
        let name = &rest[start + 1..end];
        let named = |prefix: &str| name.strip_prefix(prefix).is_some_and(|n| !n.is_empty());
        if !(FIGURES.contains(&name) || named("syscalls.") || named("bytes_per_call.")) {
            return Some(name.to_string());
        }
        rest = &rest[end + 1..];
    }
    None
}

/// Fills `{name}` placeholders of a title or advice template from `figure` (`?` for a name it
/// does not know).
pub fn fill(template: &str, figure: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        match rest[start..].find('}') {
            Some(end) => {
                let name = &rest[start + 1..start + end];
                out.push_str(&figure(name).unwrap_or_else(|| "?".into()));
                rest = &rest[start + end + 1..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_placeholders() {
        let f = |n: &str| match n {
            "cpu_us" => Some("12.5".to_string()),
            _ => None,
        };
        assert_eq!(fill("{cpu_us} µs, {nope} x, {", &f), "12.5 µs, ? x, {");
    }
}
