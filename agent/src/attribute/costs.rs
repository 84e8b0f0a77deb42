//! Named costs: fingerprints over frames, off-CPU waits, syscalls and wire figures.
//!
//! The fingerprints are data: the `[[cost]]` tables of the rules catalog
//! (`agent/rules/rust-web.toml`, format in [`super::catalog`]), evaluated by
//! [`super::fingerprint`], and a user's `--rules FILE` adds or replaces them. This module holds
//! the Rust detectors a predicate cannot say ([`DETECTORS`]; each catalog entry that names one
//! says why in its `why_code`), the shared evaluation context [`Ctx`] and [`detect`], which
//! runs every cost of the catalog.
//!
//! Every fingerprint looks only at library, runtime and kernel frames (tokio, sqlx,
//! serde_json, metrics, uuid, std sync, axum, regex, brotli, ...), syscall counts and
//! PostgreSQL statement shapes, never at an app's own symbol names, so it fires on any app
//! with the same problem. Where the app's own code matters (a lock taken by the app, not by a
//! library), "app code" means a frame of the app's own crates ([`app_crates`]) or, when they
//! are unknown, a frame no rule of the built-in catalog claims.
//!
//! The ids of target-app's eight seeded costs are the ones `target-app/switches.toml` maps
//! its switches to (`pool-ping`, ...), so that a finding can be checked against the switch.

use std::collections::HashMap;
use std::sync::OnceLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::layers::Attribution;
use super::catalog::CostRule;
use super::rules::RuleSet;
use crate::profile::{FrameKind, Profile};
use crate::wire::pg::StatementShape;
use crate::wire::WireSummary;

/// Fewest on-CPU samples a frame-only fingerprint needs to fire.
pub const MIN_SAMPLES: u64 = 2;

/// Share of the app's samples that `change-events` needs besides [`MIN_SAMPLES`]: a
/// fingerprint on a common library call (serialization) is relative to the profile. 0.05%:
/// 2 samples of 8,080 (a JWT's claims serialized on a third-party service) stay silent.
pub const MIN_RELATIVE_SHARE: f64 = 0.0005;

/// How sure a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    /// Indirect evidence (e.g. frames without the wire, or an absence of evidence).
    Low,
    /// One direct kind of evidence.
    Medium,
    /// Two independent kinds of evidence agree, or a direct count (wire) shows it.
    High,
}

/// A named cost (one of the fingerprints) or a generic finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// A named cost with a fingerprint.
    NamedCost,
    /// A generic observation (hot functions, allocation, syscalls, truncation).
    Generic,
}

/// A frame path and its on-CPU samples within a finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrameSamples {
    /// The frame path (see [`super::rules::frame_path`]), cut to 200 characters.
    pub frame: String,
    /// Samples with this frame on the stack (within the finding's samples).
    pub samples: u64,
}

/// One finding with its evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable id: a SPEC switch name for the eight seeded costs, else `hot-functions`,
    /// `allocation`, `syscalls`, `truncated-stacks`.
    pub id: String,
    /// What was seen, in a sentence.
    pub title: String,
    /// Named cost or generic.
    pub kind: FindingKind,
    /// How sure.
    pub confidence: Confidence,
    /// On-CPU samples attributed to the cost (each sample once).
    pub samples: u64,
    /// `samples / all samples`, 0..1.
    pub cpu_share: f64,
    /// Binomial standard error of `cpu_share`.
    pub cpu_share_se: f64,
    /// Sampled CPU per request, µs (`samples × period / requests`).
    pub cpu_us_per_request: Option<f64>,
    /// Database round trips per request the cost adds (wire), when known.
    pub round_trips_per_request: Option<f64>,
    /// Database time per request the cost adds to each request's latency (wire), µs: its round
    /// trips, or, for a transaction held idle (`idle-in-transaction`), the wait for a
    /// connection the hold causes.
    pub db_latency_us_per_request: Option<f64>,
    /// Counted events the cost adds per request, by name (e.g. `pings_before_checkout`,
    /// `round_trips`, `executions`, `lock_waits`, `lock_wait_us`, `getrandom_syscalls`):
    /// counts from the wire (over its steady window, see [`crate::wire::summary::SteadyWindow`])
    /// or from syscall and off-CPU counters, divided by that window's HTTP requests. Empty
    /// when nothing countable backs the finding. Absent in rankings written before it existed.
    #[serde(default)]
    pub counts_per_request: std::collections::BTreeMap<String, f64>,
    /// The frames that matched, with samples, most first (at most 8).
    pub frames: Vec<FrameSamples>,
    /// Evidence lines a person reads (counts with their units).
    pub evidence: Vec<String>,
    /// What to do about it (from the fingerprint's `advice`); empty when it has none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub advice: String,
    /// The code that pays the cost: the caller frame (or owner layer) with the most samples or
    /// wait time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The finding's on-CPU samples by thread role ([`super::catalog::ThreadRole`]).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub samples_by_role: std::collections::BTreeMap<String, u64>,
    /// Time runtime workers spent switched out per request in the waits of this finding, µs:
    /// worker time no other task could use (blocking calls on a worker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_blocked_us_per_request: Option<f64>,
    /// The endpoints that pay the finding, most first, in [`Finding::endpoints_measure`]:
    /// the on-CPU samples of the stacks through its [`Finding::frames`] per endpoint served,
    /// or, for a finding seen on the wire, its statement executions or round trips per
    /// endpoint ([`crate::profile::EndpointSamples`]). Empty when the profile has no endpoint
    /// join or the finding neither frames nor wire evidence.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<EndpointShare>,
    /// Of the finding's measure, the part joined to no request (samples of threads serving
    /// none; wire work linked to no request).
    #[serde(default, skip_serializing_if = "crate::is_default")]
    pub endpoints_unattributed: u64,
    /// What [`Finding::endpoints`] counts.
    #[serde(default, skip_serializing_if = "crate::is_default")]
    pub endpoints_measure: EndpointMeasure,
}

/// What a finding's [`EndpointShare::count`] counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndpointMeasure {
    /// On-CPU samples of its stacks, by the request their thread was serving.
    #[default]
    Samples,
    /// Statement executions on the wire, per endpoint ([`crate::wire::serving`]).
    Executions,
    /// PostgreSQL round trips on the wire, per endpoint ([`crate::wire::serving`]).
    RoundTrips,
    /// µs the database connections sat idle inside a transaction, on the wire, per endpoint
    /// ([`crate::wire::serving::DbCounts::idle_in_transaction_ns`]).
    IdleInTransaction,
    /// µs the database connections stayed checked out with nothing sent, outside a
    /// transaction, on the wire, per endpoint ([`crate::wire::serving::DbCounts::held_idle_ns`]).
    HeldIdle,
}

impl EndpointMeasure {
    /// The words for a report: "on-CPU samples of its stacks, by the request their thread was
    /// serving".
    pub fn describe(self) -> &'static str {
        match self {
            EndpointMeasure::Samples => "on-CPU samples of its stacks, by the request their thread was serving",
            EndpointMeasure::Executions => "statement executions on the wire, joined to requests by the order of the calls, the rest split as the joined ones",
            EndpointMeasure::RoundTrips => "round trips on the wire, joined to requests by the order of the calls, the rest split as the joined ones",
            EndpointMeasure::IdleInTransaction => "µs idle in transaction on the wire, counted for the round trip that ended each idle gap, joined to requests by the order of the calls, the rest split as the joined ones",
            EndpointMeasure::HeldIdle => "µs a checkout held its connection with nothing sent on the wire, counted for the round trip that began each gap, joined to requests by the order of the calls, the rest split as the joined ones",
        }
    }

    /// The unit of one count, plural: "samples", "executions", "round trips".
    pub fn unit(self) -> &'static str {
        match self {
            EndpointMeasure::Samples => "samples",
            EndpointMeasure::Executions => "executions",
            EndpointMeasure::RoundTrips => "round trips",
            EndpointMeasure::IdleInTransaction => "µs idle in transaction",
            EndpointMeasure::HeldIdle => "µs held idle",
        }
    }
}

/// One row of [`Finding::payers`].
#[derive(Debug, Clone, PartialEq)]
pub struct Payer {
    /// An endpoint (`METHOD /route`), or a label for the rest ("3 other endpoints",
    /// "serving no request").
    pub label: String,
    /// True when `label` is an endpoint.
    pub endpoint: bool,
    /// The finding's [`Finding::endpoints_measure`] on it.
    pub count: u64,
    /// Of the finding's whole measure (joined or not), 0..1.
    pub share: f64,
    /// The count per request of the endpoint, for wire measures.
    pub per_request: Option<f64>,
}

/// Endpoints [`Finding::payers`] lists by name; the rest are summed in one row.
pub const PAYERS_LISTED: usize = 5;

impl Finding {
    /// Who pays the finding, for a report: its first [`PAYERS_LISTED`] endpoints, the other
    /// endpoints in one row, and its samples while serving no request. Empty when it has no
    /// endpoints.
    pub fn payers(&self) -> Vec<Payer> {
        if self.endpoints.is_empty() {
            return Vec::new();
        }
        let total = (self.endpoints.iter().map(|e| e.count).sum::<u64>() + self.endpoints_unattributed).max(1) as f64;
        let mut rows: Vec<Payer> = self
            .endpoints
            .iter()
            .take(PAYERS_LISTED)
            .map(|e| Payer { label: e.endpoint.clone(), endpoint: true, count: e.count, share: e.count as f64 / total, per_request: e.per_request })
            .collect();
        if self.endpoints.len() > PAYERS_LISTED {
            let rest: u64 = self.endpoints[PAYERS_LISTED..].iter().map(|e| e.count).sum();
            rows.push(Payer {
                label: format!("{} other endpoints", self.endpoints.len() - PAYERS_LISTED),
                endpoint: false,
                count: rest,
                share: rest as f64 / total,
                per_request: None,
            });
        }
        if self.endpoints_unattributed > 0 {
            let n = self.endpoints_unattributed;
            rows.push(Payer { label: "serving no request".into(), endpoint: false, count: n, share: n as f64 / total, per_request: None });
        }
        rows
    }
}

/// One endpoint's part of a finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndpointShare {
    /// `METHOD /route`, as in the wire summary.
    pub endpoint: String,
    /// The finding's [`Finding::endpoints_measure`] while serving it: on-CPU samples of its
    /// stacks, or its statement executions or round trips on the wire.
    #[serde(alias = "samples")]
    pub count: u64,
    /// `count` over the finding's whole measure (joined to a request or not), 0..1.
    pub share: f64,
    /// For a wire measure, `count` per request of this endpoint (its requests over the
    /// whole capture).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_request: Option<f64>,
}

/// A fingerprint that could not be evaluated, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotEvaluated {
    /// The cost id.
    pub id: String,
    /// Why (e.g. "needs wire evidence: no PostgreSQL capture in this profile").
    pub reason: String,
}

fn re(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    cell.get_or_init(|| Regex::new(pattern).expect("static regex"))
}

macro_rules! regex {
    ($p:expr) => {{
        static CELL: OnceLock<Regex> = OnceLock::new();
        re(&CELL, $p)
    }};
}

/// Everything a fingerprint reads.
pub struct Ctx<'a> {
    /// The profile.
    pub profile: &'a Profile,
    /// The rules the attribution used.
    pub rules: &'a RuleSet,
    /// Per-frame and per-stack attribution.
    pub attr: &'a Attribution,
    /// The app's own crates ([`app_crates`]): `global-locks` counts only locks their code
    /// takes. Empty: every frame no rule claims counts as app code.
    pub app_crates: Vec<String>,
    /// Wire figures, when captured: the steady window's when the capture has one
    /// ([`crate::wire::summary::SteadyWindow`]; its `http.requests` is that window's request
    /// count), else the whole capture's.
    pub wire: Option<&'a WireSummary>,
    /// What each [`Ctx::collect_roles`] call matched: its frames and samples, and those
    /// samples per endpoint served (`None`: serving no request). [`Ctx::finding`] takes the
    /// endpoints of the call whose frames and samples it is given.
    pub matched: std::cell::RefCell<Vec<(Vec<FrameSamples>, u64, std::collections::BTreeMap<Option<u32>, u64>)>>,
    /// [`Ctx::worker_idle`], computed on first use.
    pub worker_idle: std::cell::OnceCell<Option<super::fingerprint::WorkerIdle>>,
}

impl Ctx<'_> {
    /// The share of the runtime workers' time spent parked
    /// ([`super::fingerprint::worker_idle_share`]), walked once per ranking: two detectors'
    /// gates and the ranking's `worker_idle` read it.
    pub fn worker_idle(&self) -> Option<super::fingerprint::WorkerIdle> {
        *self.worker_idle.get_or_init(|| super::fingerprint::worker_idle_share(self))
    }

    pub(super) fn per_request(&self, count: f64) -> Option<f64> {
        Some(count / self.attr.requests? as f64)
    }

    /// A wire count per HTTP request of the same wire window ([`Ctx::wire`] is the steady
    /// window when the capture has one); the profile's request count when the wire has none.
    pub(super) fn wire_per_request(&self, count: f64) -> Option<f64> {
        match self.wire.map(|w| w.http.requests).filter(|&n| n > 0) {
            Some(n) => Some(count / n as f64),
            None => self.per_request(count),
        }
    }

    pub(super) fn path(&self, frame: u32) -> &str {
        &self.attr.frame_paths[frame as usize]
    }

    /// True when the frame is app code: a user frame no built-in catalog rule claims.
    pub(super) fn is_app_frame(&self, frame: u32) -> bool {
        let f = &self.profile.frames[frame as usize];
        if f.kind != FrameKind::User {
            return false;
        }
        match self.attr.frame_layers[frame as usize] {
            Some(l) => !self.rules.layers()[l].is_builtin(),
            None => {
                let p = self.path(frame);
                if !self.app_crates.is_empty() {
                    return self.app_crates.iter().any(|c| p.strip_prefix(c.as_str()).is_some_and(|r| r.starts_with("::")));
                }
                !regex!(r"^(std|core|alloc|lock_api|parking_lot|parking_lot_core|\[unknown\])(::|$)").is_match(p)
                    && !p.starts_with("[unknown]")
            }
        }
    }

    /// Samples of stacks for which `select` returns the frames (indices into the stack) that
    /// make the stack count; returns (samples, frame counts).
    pub(super) fn collect<F>(&self, select: F) -> (u64, Vec<FrameSamples>)
    where
        F: FnMut(usize, &[u32]) -> Vec<usize>,
    {
        let (n, frames, _) = self.collect_roles(None, select);
        (n, frames)
    }

    /// [`Ctx::collect`] over the samples of threads whose role (index into
    /// [`Attribution::role_names`]) is in `roles` (`None`: every thread); also returns the
    /// samples by role name.
    pub(super) fn collect_roles<F>(&self, roles: Option<&[usize]>, mut select: F) -> (u64, Vec<FrameSamples>, std::collections::BTreeMap<String, u64>)
    where
        F: FnMut(usize, &[u32]) -> Vec<usize>,
    {
        let mut samples = 0;
        let mut frames: HashMap<&str, u64> = HashMap::new();
        let mut by_role = std::collections::BTreeMap::new();
        let mut by_endpoint: std::collections::BTreeMap<Option<u32>, u64> = std::collections::BTreeMap::new();
        for (si, stack) in self.profile.stacks.iter().enumerate() {
            // The app's samples: the agent's own cost (its BPF programs, its uprobe traps) is no
            // cost of the app's.
            let per_role = &self.attr.app_stack_role_samples[si];
            let n: u64 = match roles {
                None => self.attr.app_stack_samples[si],
                Some(r) => r.iter().map(|&i| per_role[i]).sum(),
            };
            if n == 0 {
                continue;
            }
            let hits = select(si, &stack.frames);
            if hits.is_empty() {
                continue;
            }
            samples += n;
            for &(role, e, k) in self.attr.stack_endpoints.get(si).map_or(&[][..], Vec::as_slice) {
                if roles.is_none_or(|r| r.contains(&role)) {
                    *by_endpoint.entry(e).or_insert(0) += k;
                }
            }
            for (i, &k) in per_role.iter().enumerate() {
                if k > 0 && roles.is_none_or(|r| r.contains(&i)) {
                    *by_role.entry(self.attr.role_names[i].clone()).or_insert(0) += k;
                }
            }
            let mut seen: Vec<&str> = Vec::new();
            for i in hits {
                let p = self.path(stack.frames[i]);
                if !seen.contains(&p) {
                    seen.push(p);
                    *frames.entry(p).or_default() += n;
                }
            }
        }
        let mut v: Vec<FrameSamples> = frames
            .into_iter()
            .map(|(f, s)| FrameSamples { frame: f.chars().take(200).collect(), samples: s })
            .collect();
        v.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.frame.cmp(&b.frame)));
        v.truncate(8);
        if !by_endpoint.is_empty() {
            self.matched.borrow_mut().push((v.clone(), samples, by_endpoint));
        }
        (samples, v, by_role)
    }

    /// A frame's path for a person: anonymous bodies (`{async_fn#0}`, `{closure#0}`: an async
    /// handler inlined into the framework's call) get their source file and line, which name
    /// the handler where the path cannot (`field_cases::{async_fn#0} (src/lib.rs:196)`).
    pub(super) fn describe(&self, frame: u32) -> String {
        let p = self.path(frame);
        let f = &self.profile.frames[frame as usize];
        let last = p.rsplit("::").next().unwrap_or(p);
        if last.starts_with('{') {
            if let (Some(file), Some(line)) = (f.file.as_deref(), f.line) {
                let short = match file.rfind("/src/") {
                    Some(i) => &file[file[..i].rfind('/').map_or(0, |j| j + 1)..],
                    None => file.rsplit('/').next().unwrap_or(file),
                };
                return format!("{p} ({short}:{line})");
            }
        }
        p.to_string()
    }

    /// Index (into the stack) of the caller of the frame at `i`: the nearest frame towards the
    /// root that is not transparent ([`super::layers::is_transparent`]) and for which `skip`
    /// is false.
    pub(super) fn caller_of(&self, frames: &[u32], i: usize, skip: &dyn Fn(&str) -> bool) -> Option<usize> {
        frames[..i].iter().rposition(|&f| {
            let fr = &self.profile.frames[f as usize];
            let p = self.path(f);
            !super::layers::is_transparent(fr, p) && !skip(p)
        })
    }

    /// Indices of frames of a stack whose path matches `r`.
    pub(super) fn matching(&self, frames: &[u32], r: &Regex) -> Vec<usize> {
        frames.iter().enumerate().filter(|(_, &f)| r.is_match(self.path(f))).map(|(i, _)| i).collect()
    }

    pub(super) fn finding(&self, id: &str, title: String, confidence: Confidence, samples: u64, frames: Vec<FrameSamples>) -> Finding {
        let share = self.attr.app_share(samples);
        let (endpoints, endpoints_unattributed) = self.endpoints_of(samples, &frames);
        Finding {
            id: id.to_string(),
            title,
            kind: FindingKind::NamedCost,
            confidence,
            samples,
            cpu_share: share,
            cpu_share_se: self.attr.app_share_se(share),
            cpu_us_per_request: self.attr.us_per_request(samples as f64),
            round_trips_per_request: None,
            db_latency_us_per_request: None,
            counts_per_request: Default::default(),
            frames,
            evidence: Vec::new(),
            advice: String::new(),
            owner: None,
            samples_by_role: Default::default(),
            worker_blocked_us_per_request: None,
            endpoints,
            endpoints_unattributed,
            endpoints_measure: EndpointMeasure::Samples,
        }
    }

    /// The endpoints of the [`Ctx::collect_roles`] call that matched `samples` in `frames`,
    /// most samples first, and its samples while serving no request; empty when no call did
    /// (a finding whose frames were merged from several calls) or nothing was joined.
    fn endpoints_of(&self, samples: u64, frames: &[FrameSamples]) -> (Vec<EndpointShare>, u64) {
        let Some(names) = self.profile.endpoints.as_ref().map(|e| &e.endpoints) else { return (Vec::new(), 0) };
        let matched = self.matched.borrow();
        let Some((_, _, by)) = matched.iter().rev().find(|m| m.1 == samples && m.0 == frames) else { return (Vec::new(), 0) };
        let total: u64 = by.values().sum();
        let mut v: Vec<EndpointShare> = by
            .iter()
            .filter_map(|(e, &n)| {
                let name = names.get((*e)? as usize)?;
                Some(EndpointShare { endpoint: name.clone(), count: n, share: n as f64 / total.max(1) as f64, per_request: None })
            })
            .collect();
        v.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.endpoint.cmp(&b.endpoint)));
        (v, by.get(&None).copied().unwrap_or(0))
    }

    /// Requests of endpoint `name` over the whole capture: the denominator of the endpoint
    /// join's database counts, which cover the whole capture too.
    pub(super) fn endpoint_requests(&self, name: &str) -> u64 {
        self.profile.wire.as_ref().map_or(0, |w| w.requests_of(name))
    }

    /// Per endpoint, `measure(counts)` of the PostgreSQL work joined to its requests
    /// ([`crate::profile::EndpointSamples::db`]), most first, with the count per request of
    /// the endpoint; and the same measure of the work joined to no request. `None` without
    /// an endpoint join or when the measure is 0 everywhere.
    pub(super) fn db_endpoints(&self, measure: impl Fn(&crate::wire::serving::DbCounts) -> u64) -> Option<(Vec<EndpointShare>, u64)> {
        let join = self.profile.endpoints.as_ref()?;
        let unattributed = measure(&join.db_unattributed);
        let counts: Vec<(&String, u64)> =
            join.db.iter().filter_map(|d| Some((join.endpoints.get(d.endpoint as usize)?, measure(&d.counts)))).filter(|x| x.1 > 0).collect();
        let total = counts.iter().map(|x| x.1).sum::<u64>() + unattributed;
        if total == 0 {
            return None;
        }
        let mut v: Vec<EndpointShare> = counts
            .into_iter()
            .map(|(name, n)| {
                let requests = self.endpoint_requests(name);
                EndpointShare {
                    endpoint: name.clone(),
                    count: n,
                    share: n as f64 / total as f64,
                    per_request: (requests > 0).then(|| n as f64 / requests as f64),
                }
            })
            .collect();
        v.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.endpoint.cmp(&b.endpoint)));
        Some((v, unattributed))
    }

    /// [`Ctx::db_endpoints`] as a finding's payers: sets its endpoints and their measure.
    pub(super) fn set_db_payers(&self, f: &mut Finding, measure: EndpointMeasure, count: impl Fn(&crate::wire::serving::DbCounts) -> u64) {
        if let Some((v, rest)) = self.db_endpoints(count) {
            f.endpoints = v;
            f.endpoints_unattributed = rest;
            f.endpoints_measure = measure;
        }
    }

    pub(super) fn samples_line(&self, what: &str, samples: u64) -> String {
        let us = self.attr.us_per_request(samples as f64).map_or(String::new(), |u| format!(", {u:.2} µs of CPU per request"));
        let agent = match self.attr.profiler_samples {
            0 => String::new(),
            n => format!(" ({n} samples of the agent's own BPF programs and uprobe traps left out)"),
        };
        format!(
            "{samples} of the app's {} on-CPU samples ({:.2}% ± {:.2}) {what}{us}{agent}",
            self.attr.app_samples(),
            100.0 * self.attr.app_share(samples),
            100.0 * self.attr.app_share_se(self.attr.app_share(samples))
        )
    }

    /// Calls of syscall `name` in the run: the count, or its estimate when syscalls were
    /// counted in windows ([`crate::profile::Meta::syscall_scale`]).
    pub(super) fn syscall_count(&self, name: &str) -> Option<u64> {
        let scale = self.profile.meta.syscall_scale();
        self.profile.syscalls.iter().find(|s| s.name == name).map(|s| (s.count as f64 * scale).round() as u64)
    }

    /// How syscalls were counted, for evidence lines: empty when every call was counted.
    pub(super) fn syscall_counting(&self) -> String {
        let scale = self.profile.meta.syscall_scale();
        match self.profile.meta.syscall_scale_basis() {
            Some("requests") => format!(", estimated from windows that held {:.0}% of the requests", 100.0 / scale),
            Some(_) => format!(", estimated from {:.0}% of the run", 100.0 / scale),
            None => String::new(),
        }
    }
}

/// The app's own crates, found generically: the crate named after each profiled process's
/// executable (`/usr/local/bin/target-app` -> `target_app`, Cargo's rule for binary crates)
/// and the crate of each `<crate>::main` frame, when some frame of the profile has that
/// crate's path (so a binary named unlike its crate adds nothing). Library frames (tokio,
/// sqlx, event-listener, ...) are then never taken for the app's code.
pub fn app_crates(profile: &Profile, frame_paths: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let main = regex!(r"^([A-Za-z_][A-Za-z0-9_]*)::main$");
    for p in frame_paths {
        if let Some(c) = main.captures(p) {
            let name = c[1].to_string();
            if !matches!(name.as_str(), "std" | "core" | "alloc" | "tokio") && !out.contains(&name) {
                out.push(name);
            }
        }
    }
    for proc in &profile.processes {
        let base = proc.exe.rsplit('/').next().unwrap_or("").replace(['-', '.'], "_");
        let prefix = format!("{base}::");
        if !base.is_empty() && !out.contains(&base) && frame_paths.iter().any(|p| p.starts_with(&prefix)) {
            out.push(base);
        }
    }
    out
}

fn sql_text(shape: &StatementShape) -> Option<&str> {
    match shape {
        StatementShape::Sql { text, .. } => Some(text),
        _ => None,
    }
}

/// Names of the Rust detectors a `[[cost]]` of the catalog can run (`detector = "NAME"`),
/// for fingerprints a predicate cannot say; each cost says why in its `why_code`.
pub const DETECTORS: &[&str] = &[
    "pool-ping",
    "ping-on-release",
    "session-setting-round-trip",
    "spawn-per-request",
    "global-locks",
    "metrics-labels",
    "wide-user-lookup",
    "double-json-parse",
    "change-events",
    "long-cpu-on-worker",
    "prepare-per-execution",
];

const NO_WIRE: &str = "needs wire evidence (PostgreSQL statement shapes): this profile has no wire capture";

/// Runs one Rust detector; `Err(reason)` when it cannot be evaluated on this profile.
fn run_detector(ctx: &Ctx<'_>, name: &str) -> Result<Option<Finding>, String> {
    Ok(match name {
        "pool-ping" => pool_ping(ctx),
        "prepare-per-execution" => {
            ctx.profile.wire.as_ref().or(ctx.wire).ok_or(NO_WIRE)?;
            prepare_per_execution(ctx)
        }
        "ping-on-release" => ping_on_release(ctx),
        "session-setting-round-trip" => {
            ctx.wire.ok_or(NO_WIRE)?;
            session_setting_round_trip(ctx)
        }
        "spawn-per-request" => spawn_per_request(ctx),
        "global-locks" => global_locks(ctx),
        "metrics-labels" => metrics_without_recorder(ctx),
        "wide-user-lookup" => {
            ctx.wire.ok_or(NO_WIRE)?;
            wide_user_row(ctx)
        }
        "double-json-parse" => double_json_parse(ctx),
        "change-events" => serialized_for_nobody(ctx),
        "long-cpu-on-worker" => long_cpu_on_worker(ctx, &Default::default()),
        other => return Err(format!("no detector named {other:?} in this build")),
    })
}

/// Runs every fingerprint of the catalog ([`RuleSet::costs`]): predicates
/// ([`super::fingerprint::evaluate`]) and Rust detectors ([`DETECTORS`]). A finding takes its
/// cost's id, and its title and advice when the cost gives them. Returns the findings that
/// fired and the fingerprints that could not be evaluated for lack of evidence.
pub fn detect(ctx: &Ctx<'_>) -> (Vec<Finding>, Vec<NotEvaluated>) {
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    // Stacks whose samples a predicate cost counted: `long-cpu-on-worker` runs last and leaves
    // them out, so that a regex compiled per request is one finding, not two.
    let mut claimed: std::collections::HashSet<usize> = std::collections::HashSet::new();
    let (last, first): (Vec<&CostRule>, Vec<&CostRule>) = ctx.rules.costs().iter().partition(|r| r.detector.as_deref() == Some("long-cpu-on-worker"));
    for rule in first.into_iter().chain(last) {
        let finding = match rule.detector.as_deref() {
            None => super::fingerprint::evaluate(ctx, rule).map(|(f, stacks)| {
                claimed.extend(stacks);
                f
            }),
            Some("long-cpu-on-worker") => long_cpu_on_worker(ctx, &claimed),
            Some(d) => match run_detector(ctx, d) {
                Ok(f) => f,
                Err(reason) => {
                    skipped.push(NotEvaluated { id: rule.id.clone(), reason });
                    None
                }
            },
        };
        if let Some(mut f) = finding {
            f.id = rule.id.clone();
            // Where: the first of the finding's frames in the app's own crates.
            if f.owner.is_none() {
                f.owner = f
                    .frames
                    .iter()
                    .find(|fr| ctx.app_crates.iter().any(|c| fr.frame.strip_prefix(c.as_str()).is_some_and(|r| r.starts_with("::"))))
                    .map(|fr| fr.frame.clone());
            }
            if rule.detector.is_some() {
                let none = |_: &str| None;
                if !rule.title.is_empty() {
                    f.title = super::catalog::fill(&rule.title, &none);
                }
                if !rule.advice.is_empty() {
                    f.advice = super::catalog::fill(&rule.advice, &none);
                }
            }
            found.push(f);
        }
    }
    (found, skipped)
}

/// Sampled CPU per request, µs, at or above which one owner's work on runtime workers is
/// `long-cpu-on-worker` (the lower end of its 2-standard-error interval): half a millisecond
/// of synchronous work per request holds a worker that long, and every task queued behind it.
pub const LONG_CPU_US_PER_REQUEST: f64 = 500.0;

/// Layer categories whose self time on a worker is the runtime's and the request pipeline's
/// own, never "long synchronous work": `long-cpu-on-worker` leaves them out.
const PIPELINE_CATEGORIES: &[&str] = &["runtime", "kernel", "profiler", "http", "framework", "middleware", "observability", "database", "alloc", "sync"];

/// `long-cpu-on-worker`: one owner (a crate, or a layer outside the runtime and the HTTP
/// pipeline) whose self time on runtime-worker threads is at least
/// [`LONG_CPU_US_PER_REQUEST`] µs per request: synchronous CPU work (password hashing,
/// compression, big parses) that holds a worker. A Rust detector because it groups samples by
/// their owner, which no predicate names in advance. Without a request count it fires when one
/// owner has a quarter or more of the workers' samples.
pub fn long_cpu_on_worker(ctx: &Ctx<'_>, claimed: &std::collections::HashSet<usize>) -> Option<Finding> {
    let worker = ctx.attr.role_names.iter().position(|n| n == super::fingerprint::WORKER_ROLE)?;
    let candidate = |o: usize| {
        let l = &ctx.attr.layers[o];
        !PIPELINE_CATEGORIES.contains(&l.category.as_str()) && l.category != super::layers::APP_CATEGORY
    };
    // Each worker sample counts for its self owner, and for every owner of the frames below
    // its innermost app frame (the library calls the app's code made: pbkdf2 for the sha2
    // below it); a stack without an app frame counts for its self owner only.
    let owners_of = |si: usize| -> Vec<usize> {
        let fr = &ctx.profile.stacks[si].frames;
        let mut v: Vec<usize> = Vec::new();
        if let Some(o) = ctx.attr.stack_self[si] {
            if candidate(o) || ctx.attr.layers[o].category == super::layers::APP_CATEGORY {
                v.push(o);
            }
        }
        if let Some(a) = fr.iter().rposition(|&f| ctx.attr.frame_app[f as usize]) {
            for &f in &fr[a + 1..] {
                if let Some(o) = ctx.attr.frame_owner[f as usize].filter(|&o| candidate(o)) {
                    if !v.contains(&o) {
                        v.push(o);
                    }
                }
            }
        }
        v
    };
    let mut by_owner: HashMap<usize, u64> = HashMap::new();
    // Per owner, samples × the position of its first frame on the stack: among owners with as
    // many samples, the outermost (pbkdf2, not the sha2 it calls) names the work.
    let mut depth: HashMap<usize, u64> = HashMap::new();
    let mut worker_samples = 0u64;
    for si in 0..ctx.profile.stacks.len() {
        let n = ctx.attr.app_stack_role_samples[si][worker];
        if n == 0 {
            continue;
        }
        worker_samples += n;
        if claimed.contains(&si) {
            continue;
        }
        let fr = &ctx.profile.stacks[si].frames;
        for o in owners_of(si) {
            *by_owner.entry(o).or_default() += n;
            let pos = fr.iter().position(|&f| ctx.attr.frame_owner[f as usize] == Some(o)).unwrap_or(fr.len());
            *depth.entry(o).or_default() += n * pos as u64;
        }
    }
    let (&owner, &n) = by_owner.iter().max_by(|a, b| {
        a.1.cmp(b.1).then_with(|| depth[b.0].cmp(&depth[a.0])).then_with(|| ctx.attr.layers[*b.0].name.cmp(&ctx.attr.layers[*a.0].name))
    })?;
    let lower = (n as f64 - 2.0 * (n as f64).sqrt()).max(0.0);
    let fires = match ctx.attr.us_per_request(lower) {
        Some(us) => us >= LONG_CPU_US_PER_REQUEST,
        None => worker_samples > 0 && lower / worker_samples as f64 >= 0.25,
    };
    if !fires {
        return None;
    }
    let name = ctx.attr.layers[owner].name.clone();
    // The paths of the owner's frames, once: the caller is the first frame above them.
    let owned_paths: std::collections::HashSet<&str> =
        ctx.attr.frame_owner.iter().zip(&ctx.attr.frame_paths).filter(|(o, _)| **o == Some(owner)).map(|(_, p)| p.as_str()).collect();
    let mut callers: HashMap<String, u64> = HashMap::new();
    let (samples, frames, by_role) = ctx.collect_roles(Some(&[worker]), |si, fr| {
        if claimed.contains(&si) || !owners_of(si).contains(&owner) {
            return Vec::new();
        }
        let first = fr.iter().position(|&f| ctx.attr.frame_owner[f as usize] == Some(owner)).unwrap_or(fr.len() - 1);
        let mut v = vec![first];
        if let Some(ci) = ctx.caller_of(fr, first, &|p| owned_paths.contains(p)) {
            *callers.entry(ctx.describe(fr[ci])).or_default() += ctx.attr.app_stack_role_samples[si][worker];
            v.push(ci);
        }
        v
    });
    let us = ctx.attr.us_per_request(samples as f64);
    let mut f = ctx.finding(
        "long-cpu-on-worker",
        format!("`{name}` runs {} µs of synchronous CPU per request on the runtime's worker threads", us.map_or("?".into(), |u| format!("{u:.0}"))),
        Confidence::Medium,
        samples,
        frames,
    );
    f.samples_by_role = by_role;
    f.evidence.push(ctx.samples_line(&format!("in `{name}` (its own code and what it calls) on runtime-worker threads"), samples));
    f.evidence.push(format!("{worker_samples} samples on runtime-worker threads in all; no other task runs on a worker while this work does"));
    let mut callers: Vec<(String, u64)> = callers.into_iter().collect();
    callers.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    if !callers.is_empty() {
        let c: Vec<String> = callers.iter().take(3).map(|(p, n)| format!("`{p}` ({n} samples)")).collect();
        f.evidence.push(format!("called from: {}", c.join(", ")));
    }
    // The app's own code is its own "where": its innermost frame with the most samples, not
    // the framework's glue that called it.
    f.owner = if ctx.attr.layers[owner].category == super::layers::APP_CATEGORY {
        let mut own: HashMap<String, u64> = HashMap::new();
        for (si, stack) in ctx.profile.stacks.iter().enumerate() {
            let n = ctx.attr.app_stack_role_samples[si][worker];
            if n > 0 && !claimed.contains(&si) && ctx.attr.stack_self[si] == Some(owner) {
                if let Some(&fi) = stack.frames.iter().rev().find(|&&fi| ctx.attr.frame_owner[fi as usize] == Some(owner)) {
                    *own.entry(ctx.describe(fi)).or_default() += n;
                }
            }
        }
        own.into_iter().max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0))).map(|(p, _)| p)
    } else {
        callers.first().map(|c| c.0.clone())
    }
    .or(Some(name));
    if let Some(u) = us {
        f.counts_per_request.insert("cpu_us".into(), u);
    }
    f.advice = "move the work off the runtime's workers (tokio::task::spawn_blocking or a dedicated pool), or make it cheaper".into();
    Some(f)
}

/// The driver's ping frames (sqlx `Connection::ping`, `check_idle_conn`, `test_before_acquire`).
fn ping_regex() -> &'static Regex {
    regex!(r"^sqlx_[a-z]+::.*(::ping\b|check_idle_conn|test_before_acquire)")
}

/// `pool-ping`: a ping (a round trip with no statement) before each pool checkout.
///
/// Wire (decisive when captured): back-to-back pings on one connection
/// ([`crate::wire::summary::PgSummary::pings_after_ping`]): a pool that pings a connection
/// when it takes it back (sqlx 0.8 always does) and again before it hands it out sends two
/// pings with no statement between them; the second is the ping before checkout and tells the
/// driver nothing the first did not. Fires at 0.5 or more per request, whatever the total
/// of pings: a request that checks out a connection per query has one release ping per query
/// (`queries` with `CRM_COSTS=none`: 19.95 pings, 0 back-to-back per request), so the number
/// of pings alone says nothing about the pool's checkout. A capture from a profile written
/// before they were counted ([`crate::wire::summary::PgSummary::pings_after_ping_not_counted`])
/// fires at 1.5 or more pings per request, which holds for one checkout per request only.
/// Without a capture,
/// frames: sqlx's `Connection::ping` / `check_idle_conn` / `test_before_acquire` under the
/// pool's `acquire` (not under `return_to_pool`: see [`ping_on_release`]).
pub fn pool_ping(ctx: &Ctx<'_>) -> Option<Finding> {
    let ping = ping_regex();
    let acquire = regex!(r"^sqlx_core::.*\bacquire\b");
    let release = regex!(r"return_to_pool|release|PoolConnection.*::drop");
    let (samples, frames) = ctx.collect(|_, fr| {
        let p = ctx.matching(fr, ping);
        let Some(&first) = p.first() else { return p };
        let above = &fr[..first];
        let under_acquire = above.iter().any(|&f| acquire.is_match(ctx.path(f)));
        let under_release = above.iter().any(|&f| release.is_match(ctx.path(f)));
        if under_acquire && !under_release {
            p
        } else {
            Vec::new()
        }
    });
    let wire = ctx.wire.filter(|w| w.pg.round_trips > 0);
    let frame_fires = samples >= MIN_SAMPLES;
    let (fires, confidence) = match wire {
        Some(w) if w.pg.pings_after_ping_not_counted => {
            // A profile written before back-to-back pings were counted: 1.5 or more pings per
            // request, which assumes one checkout per request, with medium confidence.
            let pings = ctx.wire_per_request(w.pg.pings as f64).unwrap_or(0.0);
            (pings >= 1.5, if frame_fires { Confidence::High } else { Confidence::Medium })
        }
        Some(w) => {
            // Back-to-back pings decide.
            let extra = ctx.wire_per_request(w.pg.pings_after_ping as f64).unwrap_or(0.0);
            (extra >= 0.5, Confidence::High)
        }
        None => (frame_fires, Confidence::Medium),
    };
    if !fires {
        return None;
    }
    let mut f = ctx.finding("pool-ping", "the connection pool pings the database before each checkout".into(), confidence, samples, frames);
    f.evidence.push(ctx.samples_line("in the driver's ping under the pool's acquire", samples));
    if let Some(w) = wire {
        let pings = ctx.wire_per_request(w.pg.pings as f64).unwrap_or(0.0);
        let extra = ctx.wire_per_request(w.pg.pings_after_ping as f64).unwrap_or(0.0);
        let rts = ctx.wire_per_request(w.pg.round_trips as f64).unwrap_or(0.0);
        f.evidence.push(format!(
            "wire: {pings:.2} pings (round trips with no statement) of {rts:.2} round trips per request ({} requests); {extra:.2} per request follow another ping on the same connection with no statement between (the ping before checkout after the one on release)",
            w.http.requests
        ));
        f.counts_per_request.insert("pings".into(), pings);
        if w.pg.pings_after_ping > 0 {
            f.round_trips_per_request = Some(extra);
            f.db_latency_us_per_request = ctx.wire_per_request(w.pg.pings_after_ping_latency_total_ns as f64 / 1e3);
            f.counts_per_request.insert("pings_before_checkout".into(), extra);
            f.counts_per_request.insert("round_trips".into(), extra);
        } else {
            f.evidence.push("no back-to-back pings counted: the pings before checkout are not separated from the others (no count, no round-trip time)".into());
        }
        ctx.set_db_payers(&mut f, EndpointMeasure::RoundTrips, |c| c.pings);
    } else {
        f.evidence.push("no wire capture: the ping count per request is not measured".into());
    }
    Some(f)
}

/// Round trips per HTTP request that only prepare or only close a statement, from which
/// `prepare-per-execution` speaks: 0.5.
pub const MIN_PREPARE_ROUND_TRIPS_PER_REQUEST: f64 = 0.5;

/// `prepare-per-execution`: statements prepared in a round trip of their own for (nearly)
/// every execution, and often closed in another after it: a driver used without a statement
/// cache (tokio-postgres' `query` with SQL text, sqlx's `persistent(false)`). From the whole
/// capture's statement figures ([`crate::wire::summary::StatementStats::prepare_round_trips`],
/// `close_round_trips`): the shapes prepared at least once per two executions and more than
/// twice per connection set up in the capture (a connection opened per request prepares its
/// statements anew: `connection-per-request`'s, which no statement cache helps), whose
/// prepare-only and close-only round trips come to at least
/// [`MIN_PREPARE_ROUND_TRIPS_PER_REQUEST`] per HTTP request. A statement cache keeps one
/// preparation per connection, so nearly all of those round trips go.
pub fn prepare_per_execution(ctx: &Ctx<'_>) -> Option<Finding> {
    // The whole capture's figures: a steady window leaves out the buckets with preparations.
    let w = ctx.profile.wire.as_ref().or(ctx.wire)?;
    let requests = w.http.requests;
    if requests == 0 {
        return None;
    }
    let shapes: Vec<&crate::wire::summary::StatementStats> =
        w.pg.statements
            .iter()
            .filter(|s| s.executions > 0 && s.prepares * 2 >= s.executions && s.prepares > 2 * w.pg.connections && s.prepare_round_trips + s.close_round_trips > 0)
            .collect();
    let extra: u64 = shapes.iter().map(|s| s.prepare_round_trips + s.close_round_trips).sum();
    let per_request = extra as f64 / requests as f64;
    if per_request < MIN_PREPARE_ROUND_TRIPS_PER_REQUEST {
        return None;
    }
    let executions: u64 = shapes.iter().map(|s| s.executions).sum();
    let mut f = ctx.finding(
        "prepare-per-execution",
        format!("statements are prepared for each execution: {per_request:.2} round trips per request only prepare or close them"),
        Confidence::High,
        0,
        Vec::new(),
    );
    f.evidence.push(format!(
        "wire: {} shapes executed {executions} times were prepared {} times, in {} round trips of their own, and closed in {} more, over {requests} HTTP requests",
        shapes.len(),
        shapes.iter().map(|s| s.prepares).sum::<u64>(),
        shapes.iter().map(|s| s.prepare_round_trips).sum::<u64>(),
        shapes.iter().map(|s| s.close_round_trips).sum::<u64>(),
    ));
    for s in shapes.iter().take(3) {
        f.evidence.push(format!("`{}`: {} executions, {} prepares, {} + {} round trips to prepare and close", s.shape, s.executions, s.prepares, s.prepare_round_trips, s.close_round_trips));
    }
    // Their time: at the mean of all round trips of the capture.
    f.round_trips_per_request = Some(per_request);
    f.db_latency_us_per_request = Some(per_request * w.pg.round_trip_latency_mean_ns as f64 / 1e3);
    f.counts_per_request.insert("round_trips".into(), per_request);
    f.cpu_us_per_request = None;
    Some(f)
}

/// Generic: the pool pings every connection it takes back (`return_to_pool`): sqlx 0.8 does
/// this whatever `test_before_acquire` says. Not a seeded cost; reported with its CPU.
pub fn ping_on_release(ctx: &Ctx<'_>) -> Option<Finding> {
    let ping = ping_regex();
    let release = regex!(r"return_to_pool");
    let (samples, frames) = ctx.collect(|_, fr| {
        let p = ctx.matching(fr, ping);
        match p.first() {
            Some(&first) if fr[..first].iter().any(|&f| release.is_match(ctx.path(f))) => p,
            _ => Vec::new(),
        }
    });
    if samples < MIN_SAMPLES {
        return None;
    }
    let mut f = ctx.finding("ping-on-release", "the pool pings each connection it takes back (after the response)".into(), Confidence::High, samples, frames);
    f.kind = FindingKind::Generic;
    f.evidence.push(ctx.samples_line("in the driver's ping under the pool's return_to_pool", samples));
    f.evidence.push("sqlx 0.8 does this on every release, whatever test_before_acquire says; it runs in a task of its own after the response".into());
    Some(f)
}

/// `session-setting-round-trip` (target-app's `actor-set-config` switch): a session-setting
/// statement (`SELECT set_config(...)`, `SET ...`) run
/// as its own round trip about once per transaction (wire only).
pub fn session_setting_round_trip(ctx: &Ctx<'_>) -> Option<Finding> {
    let w = ctx.wire?;
    let r = regex!(r"(?i)^\s*(select\s+(pg_catalog\.)?set_config\s*\(|set\s+(local\s+|session\s+)?[a-z_][a-z0-9_.]*\s*(=|\bto\b))");
    let stats: Vec<_> = w.pg.statements.iter().filter(|s| sql_text(&s.shape).is_some_and(|t| r.is_match(t))).collect();
    let executions: u64 = stats.iter().map(|s| s.executions).sum();
    let round_trips: u64 = stats.iter().map(|s| s.round_trips).sum();
    let latency_ns: u64 = stats.iter().map(|s| s.latency_total_ns).sum();
    let tx = w.pg.transactions.ended + w.pg.transactions.open;
    let per_tx = if tx > 0 { executions as f64 / tx as f64 } else { 0.0 };
    let per_req = ctx.wire_per_request(executions as f64);
    if executions == 0 || !(per_tx >= 0.5 || per_req.is_some_and(|p| p >= 0.5)) {
        return None;
    }
    let mut f = ctx.finding(
        "session-setting-round-trip",
        "a session setting is sent as a round trip of its own in every transaction".into(),
        if tx > 0 { Confidence::High } else { Confidence::Medium },
        0,
        Vec::new(),
    );
    for s in &stats {
        f.evidence.push(format!("wire: `{}` executed {} times in {} round trips", s.shape, s.executions, s.round_trips));
    }
    f.evidence.push(format!("{per_tx:.2} per transaction ({tx} transactions){}", per_req.map_or(String::new(), |p| format!(", {p:.2} per request"))));
    f.round_trips_per_request = ctx.wire_per_request(round_trips as f64);
    f.db_latency_us_per_request = ctx.wire_per_request(latency_ns as f64 / 1e3);
    if let Some(p) = per_req {
        f.counts_per_request.insert("executions".into(), p);
    }
    if let Some(r) = f.round_trips_per_request {
        f.counts_per_request.insert("round_trips".into(), r);
    }
    if tx > 0 {
        f.counts_per_request.insert("per_transaction".into(), per_tx);
    }
    f.cpu_us_per_request = None;
    let shapes: Vec<&StatementShape> = stats.iter().map(|s| &s.shape).collect();
    ctx.set_db_payers(&mut f, EndpointMeasure::Executions, |c| c.statements.iter().filter(|s| shapes.contains(&&s.shape)).map(|s| s.executions).sum());
    Some(f)
}

/// `spawn-per-request`: the rest of the request pipeline runs in a task spawned per request:
/// tokio spawn frames whose future returns an HTTP response (or is a `Service::call` async
/// block), and samples polled inside such tasks by tokio's task harness.
pub fn spawn_per_request(ctx: &Ctx<'_>) -> Option<Finding> {
    let per_request_future = r"(Output\s*=\s*(core::result::Result<)?http::response::Response|Poll<(core::result::Result<)?http::response::Response|::call::\{async_(block|fn)_env)";
    let spawn = Regex::new(&format!(r"^tokio::(task::spawn::|runtime::.*::)(spawn|spawn_inner|spawn_named|bind_new_task)\b.*{per_request_future}")).ok()?;
    let task = Regex::new(&format!(r"^tokio::runtime::task::(harness::poll_future|core::.*poll)\b.*{per_request_future}")).ok()?;
    let (spawn_samples, spawn_frames) = ctx.collect(|_, fr| ctx.matching(fr, &spawn));
    let (task_samples, _) = ctx.collect(|_, fr| ctx.matching(fr, &task));
    // The cost itself: the spawn calls, plus the runtime's own work inside those tasks (stacks
    // whose innermost user frame is tokio code: harness, wakers, scheduling).
    let (cost_samples, mut frames) = ctx.collect(|si, fr| {
        let s = ctx.matching(fr, &spawn);
        if !s.is_empty() {
            return s;
        }
        let _ = si;
        let leaf_user = fr.iter().rev().find(|&&f| ctx.profile.frames[f as usize].kind == FrameKind::User);
        let runtime_self = leaf_user
            .and_then(|&f| ctx.attr.frame_layers[f as usize])
            .is_some_and(|l| ctx.rules.layers()[l].is_builtin() && ctx.rules.layers()[l].name.starts_with("tokio"));
        if runtime_self {
            ctx.matching(fr, &task)
        } else {
            Vec::new()
        }
    });
    if spawn_samples + task_samples < MIN_SAMPLES {
        return None;
    }
    let confidence = if spawn_samples > 0 && task_samples >= MIN_SAMPLES { Confidence::High } else { Confidence::Medium };
    for f in spawn_frames.iter().rev() {
        if !frames.iter().any(|x| x.frame == f.frame) {
            frames.insert(0, f.clone());
        }
    }
    frames.truncate(8);
    let mut f = ctx.finding("spawn-per-request", "a task is spawned for every request to run the rest of the pipeline".into(), confidence, cost_samples, frames);
    f.evidence.push(ctx.samples_line("in tokio spawn calls whose future returns an HTTP response", spawn_samples));
    f.evidence.push(ctx.samples_line("run inside tasks whose future returns an HTTP response (the pipeline moved into a task per request)", task_samples));
    f.evidence.push(ctx.samples_line("counted as the cost: the spawn calls plus the runtime's own work (self time in tokio) in those tasks", cost_samples));
    f.evidence.push(SPAWNS_NOT_COUNTED.into());
    Some(f)
}

/// The `spawn-per-request` evidence line of a run without spawn counts; replaced by the count
/// when the run had its uprobe ([`super::ranking::add_call_counts`]).
pub const SPAWNS_NOT_COUNTED: &str = "spawns per request are not counted (no uprobe on the spawn path by default): the frames show the pattern, not the count";

/// Off-CPU time per request in the app's locks, µs, from which `global-locks` fires on its
/// waits alone (with fewer than [`MIN_SAMPLES`] on-CPU samples): 1 µs, about the cost of the
/// two context switches of one wait.
pub const MIN_LOCK_WAIT_US_PER_REQUEST: f64 = 1.0;

/// `global-locks`: process-wide locks taken by the app's own code on the hot path (frames of
/// the catalog's `lock` frame set, [`super::catalog::LOCK`], whose nearest non-std caller is
/// app code), and their futex waits off-CPU. Silent when the catalog has no `lock` set, and on
/// waits alone below [`MIN_LOCK_WAIT_US_PER_REQUEST`].
pub fn global_locks(ctx: &Ctx<'_>) -> Option<Finding> {
    let lock = ctx.rules.frame_set(super::catalog::LOCK)?;
    let lib = regex!(r"^(std|core|alloc|lock_api|parking_lot|parking_lot_core)::");
    let std_lock_owner = regex!(r"^std::io::stdio::");
    let app_lock = |fr: &[u32]| -> Vec<usize> {
        let mut hits = Vec::new();
        for (i, &f) in fr.iter().enumerate() {
            if !lock.matches(ctx.path(f)) {
                continue;
            }
            // Walk towards the root past std/lock frames: the first other frame is the caller.
            let caller = fr[..i].iter().rposition(|&c| !lib.is_match(ctx.path(c)) && !lock.matches(ctx.path(c)));
            // A lock std takes inside a call of the app's (stdout's, in println!) is std's:
            // `sync-logging` names the stdout one.
            let std_owned = caller.is_some_and(|ci| fr[ci + 1..i].iter().any(|&c| std_lock_owner.is_match(ctx.path(c))));
            let caller = caller.map(|ci| &fr[ci]);
            if !std_owned && caller.is_some_and(|&c| ctx.is_app_frame(c)) {
                hits.push(i);
                if let Some(ci) = fr[..i].iter().rposition(|&c| Some(&c) == caller) {
                    hits.push(ci);
                }
            }
        }
        hits
    };
    let (samples, frames) = ctx.collect(|_, fr| app_lock(fr));
    // Off-CPU: waits whose stack has an app-taken lock.
    let mut waits = 0u64;
    let mut wait_ns = 0u64;
    for c in &ctx.profile.off_cpu {
        if let Some(stack) = ctx.profile.stacks.get(c.stack as usize) {
            if !app_lock(&stack.frames).is_empty() {
                waits += c.count;
                wait_ns += c.total_ns;
            }
        }
    }
    // Waits alone fire only when they add up to a cost: a lock taken to clone an `Arc` waits
    // now and then for a few µs, which no remedy would give back.
    let wait_us_per_request = ctx.per_request(wait_ns as f64 / 1e3);
    if samples < MIN_SAMPLES && (waits == 0 || wait_us_per_request.is_some_and(|u| u < MIN_LOCK_WAIT_US_PER_REQUEST)) {
        return None;
    }
    let confidence = if samples >= MIN_SAMPLES && waits > 0 {
        Confidence::High
    } else if samples >= 5 || waits > 0 {
        Confidence::Medium
    } else {
        Confidence::Low
    };
    let mut f = ctx.finding("global-locks", "the app takes process-wide locks (Mutex/RwLock) on the request path".into(), confidence, samples, frames);
    f.evidence.push(ctx.samples_line("in Mutex/RwLock lock calls made by the app's own code", samples));
    f.evidence.push(format!(
        "off-CPU: {waits} waits ({:.1} µs in total{}) blocked in those locks",
        wait_ns as f64 / 1e3,
        ctx.per_request(wait_ns as f64 / 1e3).map_or(String::new(), |u| format!(", {u:.3} µs per request"))
    ));
    if let Some(n) = ctx.syscall_count("futex") {
        f.evidence.push(format!(
            "futex syscalls: {n}{}{}",
            ctx.per_request(n as f64).map_or(String::new(), |p| format!(" ({p:.4} per request)")),
            ctx.syscall_counting()
        ));
    }
    if let Some(p) = ctx.per_request(waits as f64) {
        f.counts_per_request.insert("lock_waits".into(), p);
    }
    if let Some(u) = ctx.per_request(wait_ns as f64 / 1e3) {
        f.counts_per_request.insert("lock_wait_us".into(), u);
    }
    f.evidence.push("an uncontended lock costs tens of ns: at a low sampling frequency few samples land in it, so absence of this finding is weak evidence".into());
    Some(f)
}

/// getrandom syscalls per request at which `metrics-labels` fires on the syscall count alone.
/// target-app: 1.000-1.003 with the cost on every test, none without it.
pub const GETRANDOM_PER_REQUEST: f64 = 0.9;

/// `metrics-labels`: metric keys and labels built per request (the `metrics` crate's key/label
/// code) with no recorder installed (no recorder frames), and random request ids (uuid v4 with a
/// `getrandom` syscall per request). Fires on either fingerprint's samples, or with low
/// confidence on [`GETRANDOM_PER_REQUEST`] or more getrandom syscalls per request alone.
pub fn metrics_without_recorder(ctx: &Ctx<'_>) -> Option<Finding> {
    let metrics = regex!(r"^metrics::|[<,]\s*metrics::(label::Label|key::Key)\b");
    let recorder = regex!(r"^(metrics_exporter_[a-z_]+|metrics_util)::|::register_(counter|gauge|histogram)\b");
    let noop = regex!(r"NoopRecorder");
    let uuid = regex!(r"^uuid::(v4::|rng::|.*new_v4)");
    let (metric_samples, mut frames) = ctx.collect(|_, fr| ctx.matching(fr, metrics));
    let (recorder_samples, _) = ctx.collect(|_, fr| {
        fr.iter().enumerate().filter(|(_, &f)| recorder.is_match(ctx.path(f)) && !noop.is_match(ctx.path(f))).map(|(i, _)| i).collect()
    });
    let (uuid_samples, uuid_frames) = ctx.collect(|_, fr| ctx.matching(fr, uuid));
    let (union, _) = ctx.collect(|_, fr| {
        let mut v = ctx.matching(fr, metrics);
        v.extend(ctx.matching(fr, uuid));
        v
    });
    let getrandom = ctx.syscall_count("getrandom").unwrap_or(0);
    let getrandom_per_req = ctx.per_request(getrandom as f64);
    let metrics_fires = metric_samples >= MIN_SAMPLES && recorder_samples == 0;
    let uuid_fires = uuid_samples >= MIN_SAMPLES && getrandom_per_req.is_none_or(|p| p >= 0.5);
    // The kernel's count alone: a getrandom syscall for (nearly) every request is a random id
    // per request even when too few samples land in it, as on a database-bound test
    // (`queries`: 1.003 per request and no uuid sample among 471 at 99 Hz).
    let syscall_fires = getrandom_per_req.is_some_and(|p| p >= GETRANDOM_PER_REQUEST);
    if !metrics_fires && !uuid_fires && !syscall_fires {
        return None;
    }
    let confidence = match (metrics_fires, uuid_fires) {
        (true, true) => Confidence::High,
        (false, false) => Confidence::Low,
        _ => Confidence::Medium,
    };
    for u in uuid_frames {
        if !frames.iter().any(|x| x.frame == u.frame) {
            frames.push(u);
        }
    }
    frames.sort_by(|a, b| b.samples.cmp(&a.samples));
    frames.truncate(8);
    let mut f = ctx.finding(
        "metrics-labels",
        "metric labels and random request ids are built per request with no metrics recorder".into(),
        confidence,
        union,
        frames,
    );
    f.evidence.push(ctx.samples_line("building metric keys/labels (metrics crate)", metric_samples));
    f.evidence.push(format!("{recorder_samples} samples in a metrics recorder or exporter (none: nothing consumes the labels)"));
    f.evidence.push(ctx.samples_line("generating random UUIDs (uuid v4)", uuid_samples));
    f.evidence.push(format!(
        "getrandom syscalls: {getrandom}{}{}",
        getrandom_per_req.map_or(String::new(), |p| format!(" ({p:.2} per request)")),
        ctx.syscall_counting()
    ));
    Some(f)
}

/// `wide-user-lookup`: a single-row SELECT run about once per request that reads credential
/// columns (password/hash/secret/totp/token/recovery), `*`, or 6 or more columns (wire only).
pub fn wide_user_row(ctx: &Ctx<'_>) -> Option<Finding> {
    let w = ctx.wire?;
    let select = regex!(r"(?is)^\s*select\s+(.*?)\s+from\s+([a-z_.\x22]+)\s+where\s+.*=\s*(\?|\$\d+)");
    let secret = regex!(r"(?i)(password|passwd|hash|secret|totp|token|recovery|otp)");
    let mut hits = Vec::new();
    for s in &w.pg.statements {
        let Some(text) = sql_text(&s.shape) else { continue };
        let Some(c) = select.captures(text) else { continue };
        let list = c.get(1).map_or("", |m| m.as_str());
        let columns = split_top_level(list);
        let secrets: Vec<&str> = columns.iter().copied().filter(|c| secret.is_match(c)).collect();
        let wide = list.trim() == "*" || columns.len() >= 6 || !secrets.is_empty();
        let per_req = ctx.wire_per_request(s.executions as f64);
        if wide && per_req.is_none_or(|p| p >= 0.5) {
            hits.push((s, columns.len(), secrets.join(", "), per_req));
        }
    }
    if hits.is_empty() {
        return None;
    }
    let mut f = ctx.finding(
        "wide-user-lookup",
        "a wide row (credential columns included) is fetched on every request".into(),
        // Whether the request uses the columns (a login must read the password hash) is not
        // visible on the wire.
        Confidence::Low,
        0,
        Vec::new(),
    );
    for (s, n, secrets, per_req) in &hits {
        f.evidence.push(format!(
            "wire: `{}`: {n} columns{}, {} executions{}",
            s.shape,
            if secrets.is_empty() { String::new() } else { format!(" incl. {secrets}") },
            s.executions,
            per_req.map_or(String::new(), |p| format!(" ({p:.2} per request)"))
        ));
    }
    let execs: f64 = hits.iter().filter_map(|h| h.3).sum();
    if hits.iter().all(|h| h.3.is_some()) {
        f.counts_per_request.insert("executions".into(), execs);
    }
    if let Some(n) = hits.iter().map(|h| h.1).max() {
        f.counts_per_request.insert("columns".into(), n as f64);
    }
    f.evidence.push("the extra CPU of decoding the extra columns is not separated from the query's (its gain is predicted as 0)".into());
    f.evidence.push("whether the request uses these columns is not visible on the wire (a login must read the password hash): check the caller".into());
    f.cpu_us_per_request = None;
    let shapes: Vec<&StatementShape> = hits.iter().map(|h| &h.0.shape).collect();
    ctx.set_db_payers(&mut f, EndpointMeasure::Executions, |c| c.statements.iter().filter(|s| shapes.contains(&&s.shape)).map(|s| s.executions).sum());
    Some(f)
}

/// Splits an SQL select list at top-level commas.
fn split_top_level(list: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, ch) in list.char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(list[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if !list[start..].trim().is_empty() {
        out.push(list[start..].trim());
    }
    out
}

/// `double-json-parse`: a JSON body parsed into a generic `serde_json::Value` (the Value
/// visitor) and then deserialized from that Value (the Value deserializer).
pub fn double_json_parse(ctx: &Ctx<'_>) -> Option<Finding> {
    let into_value = regex!(r"^serde_json::(value::de::.*(Deserialize for serde_json::value::Value|ValueVisitor)|de::(from_slice|from_str|from_reader|from_trait)<serde_json::value::Value\b|de::.*deserialize_any<.*ValueVisitor)");
    let from_value = regex!(r"^serde_json::value::(Value::deserialize_|from_value|de::(visit_object|visit_array|MapDeserializer|SeqDeserializer|.*Deserializer for serde_json::value::Value))");
    let (a, frames_a) = ctx.collect(|_, fr| ctx.matching(fr, into_value));
    let (b, frames_b) = ctx.collect(|_, fr| ctx.matching(fr, from_value));
    if a < MIN_SAMPLES {
        return None;
    }
    let (both, mut frames) = ctx.collect(|_, fr| {
        let mut v = ctx.matching(fr, into_value);
        v.extend(ctx.matching(fr, from_value));
        v
    });
    frames.extend(frames_b.into_iter().filter(|x| !frames_a.iter().any(|y| y.frame == x.frame)));
    frames.truncate(8);
    let confidence = if b > 0 { Confidence::High } else { Confidence::Medium };
    let mut f = ctx.finding("double-json-parse", "JSON bodies are parsed into a generic Value before the typed value".into(), confidence, both, frames);
    f.evidence.push(ctx.samples_line("parsing bytes into serde_json::Value", a));
    f.evidence.push(ctx.samples_line("deserializing a typed value from a serde_json::Value", b));
    if b == 0 {
        f.evidence.push("the second pass (from the Value) was not sampled: it is cheaper than the first; the Value parse alone may be intended".into());
    }
    Some(f)
}

/// `change-events` stays silent when the serialization outside the known response frames
/// has more than this many times the samples of the serialization under them: 4. Then the
/// other serialization is more likely the responses themselves, built where the catalog
/// cannot see (a handler serializing into a `String` or `Vec`), with a few known-frame
/// responses beside them (a stats route). target-app's change events serialize a row like
/// the response does: 2 samples against 4 under `into_response` in a recorded
/// `deals-create` profile.
pub const RESPONSE_SERIALIZATION_RATIO: u64 = 4;

/// `change-events`: JSON serialization that does not feed an HTTP response: no frame of the
/// catalog's [`super::catalog::JSON_RESPONSE`] set (axum's `into_response`, actix-web's
/// `Json` responder, `warp::reply::json`, ...) on its stack, in a profile where serialization
/// under such a frame was sampled too, at least a [`RESPONSE_SERIALIZATION_RATIO`]th as much.
/// Without it, the framework's responses are not serialized under frames the catalog knows
/// (a handler that serializes into a `String` and returns it, a framework the set does not
/// list), and serialization outside them may well be the response: silent. What happens to
/// the output is not visible from frames, so this fires at low confidence.
pub fn serialized_for_nobody(ctx: &Ctx<'_>) -> Option<Finding> {
    let response = ctx.rules.frame_set(super::catalog::JSON_RESPONSE)?;
    let ser = regex!(r"^serde_json::(ser::|to_vec|to_string|to_writer)");
    let serde = regex!(r"^(serde_json|serde|serde_core|core|alloc|std|bytes)::");
    let answers = |fr: &[u32]| fr.iter().any(|&f| response.matches(ctx.path(f)));
    let (samples, frames) = ctx.collect(|_, fr| {
        if answers(fr) {
            return Vec::new();
        }
        let mut v = ctx.matching(fr, ser);
        // The caller: the first frame above the outermost serialization frame outside serde/std.
        if let Some(&first) = v.first() {
            if let Some(ci) = fr[..first].iter().rposition(|&c| !serde.is_match(ctx.path(c))) {
                v.push(ci);
            }
        }
        v
    });
    let (responses, _) = ctx.collect(|_, fr| if answers(fr) { ctx.matching(fr, ser) } else { Vec::new() });
    if responses == 0 || responses * RESPONSE_SERIALIZATION_RATIO < samples {
        return None;
    }
    let (all, _) = ctx.collect(|_, fr| ctx.matching(fr, ser));
    // Relative to the profile: 2 samples of 8,080 (a JWT's serialization) are no pattern.
    if samples < MIN_SAMPLES || ctx.attr.app_share(samples) < MIN_RELATIVE_SHARE {
        return None;
    }
    let mut f = ctx.finding(
        "change-events",
        "JSON is serialized outside the response path (a payload no response carries)".into(),
        Confidence::Low,
        samples,
        frames,
    );
    f.evidence.push(ctx.samples_line("in serde_json serialization with no JSON response frame (@json-response) on the stack", samples));
    f.evidence.push(ctx.samples_line("in serde_json serialization of JSON responses (under a @json-response frame)", responses));
    f.evidence.push(ctx.samples_line("in serde_json serialization in all", all));
    f.evidence.push("frames cannot show whether anything reads the output (an event bus with no listener, a log, a cache): check the caller listed below".into());
    Some(f)
}
