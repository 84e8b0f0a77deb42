//! The layer table: each on-CPU sample attributed to the *owner* of its innermost frame
//! (*self*) and to every distinct owner on its stack (*total*), with shares of the app's
//! samples, µs of sampled CPU per request and binomial standard errors.
//!
//! A frame's owner is the layer of the first rule that claims it; a user frame no rule claims
//! belongs to its own crate (the first segment of its Rust path, else the crate folder of its
//! source file, else the binary or library it lives in), a layer of category `app` for the
//! app's own crates ([`super::costs::app_crates`]) and `crate` for the others. Frames of the
//! standard library, libc and kernel helpers no rule names are *transparent*
//! ([`is_transparent`]): their time goes to the nearest owner towards the root (a `memcpy`
//! called by `serde_json` is serde_json's). Self time is never given to a layer further down
//! the stack than the innermost owned frame: code no rule knows shows up under its crate, not
//! under the runtime at the bottom of every stack.
//!
//! Every thread has a role ([`super::catalog::ThreadRole`], from its stacks): runtime worker,
//! blocking pool, ..., or `other`.

use serde::{Deserialize, Serialize};

use std::collections::HashMap;

use super::catalog::OTHER_ROLE;
use super::rules::{frame_path, Layer, RuleSet};
use crate::profile::{FrameKind, Profile};

/// Name of the pseudo-layer of samples whose stack has no owned frame (only transparent ones).
pub const UNATTRIBUTED: &str = "(no layer)";

/// Category of a layer made for a crate no rule claims.
pub const CRATE_CATEGORY: &str = "crate";

/// Category of a layer made for one of the app's own crates.
pub const APP_CATEGORY: &str = "app";

/// Origin of the layers made for crates ([`super::rules::Layer::origin`]).
pub const CRATE_ORIGIN: &str = "(crate of the frame)";

/// Crates whose frames are helpers of their callers: their time goes to the nearest owner
/// towards the root (unless a rule claims them, as `std sync` and `alloc` do).
pub const TRANSPARENT_CRATES: &[&str] = &["std", "core", "alloc", "core_arch", "parking_lot", "parking_lot_core", "lock_api", "compiler_builtins", "panic_unwind", "panic_abort", "rustc_demangle", "std_detect"];

/// Rust's primitive types: a frame path that starts with one (`usize::fmt` from
/// `<usize as Display>::fmt`) is core's code.
const PRIMITIVES: &[&str] = &["bool", "char", "str", "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize", "f32", "f64"];

/// Libraries (file names, prefix up to `.so`) whose C frames are helpers of their callers.
pub const TRANSPARENT_LIBRARIES: &[&str] = &["libc", "libpthread", "libm", "libdl", "librt", "ld-linux-x86-64", "ld-linux", "libgcc_s", "[vdso]"];

/// The crate of a user frame: the first segment of its Rust path (`regex_automata::meta::..`
/// -> `regex_automata`), else the crate folder of its source file
/// (`.../zstd-sys-2.0.16/zstd/lib/compress/zstd_opt.c` -> `zstd_sys`; `/rustc/HASH/library/core/..`
/// -> `core`), else `None`.
pub fn crate_of(path: &str, file: Option<&str>) -> Option<String> {
    let head = path.split("::").next().unwrap_or("");
    // A crate name starts with a lower-case letter or `_` (`T::clone` is a type parameter);
    // a primitive type's impls (`usize::fmt`, `str::find`) are core's.
    if path.contains("::") && head.starts_with(|c: char| c.is_ascii_lowercase() || c == '_') && head.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        if PRIMITIVES.contains(&head) {
            return Some("core".to_string());
        }
        return Some(head.to_string());
    }
    let file = file?;
    if let Some(i) = file.find("/library/") {
        if file[..i].contains("/rustc/") {
            return file[i + 9..].split('/').next().filter(|c| !c.is_empty()).map(|c| c.replace('-', "_"));
        }
    }
    // A registry checkout: `.../<crate>-<version>/...`.
    file.split('/').find_map(super::rules::crate_dir)
}

/// True when a library file name is one of [`TRANSPARENT_LIBRARIES`] (`libc.so.6`, `ld-linux-x86-64.so.2`).
fn transparent_library(module: &str) -> bool {
    TRANSPARENT_LIBRARIES.iter().any(|l| module == *l || module.strip_prefix(l).is_some_and(|r| r.starts_with(".so") || r.starts_with('-')))
}

/// True when a frame is a helper of its caller (see [`TRANSPARENT_CRATES`],
/// [`TRANSPARENT_LIBRARIES`]): a user frame of the standard library or of libc, or a kernel
/// frame (kernel frames no rule claims count to their caller's owner).
pub fn is_transparent(frame: &crate::profile::Frame, path: &str) -> bool {
    if frame.kind == FrameKind::Kernel {
        return true;
    }
    match crate_of(path, frame.file.as_deref()) {
        Some(c) => TRANSPARENT_CRATES.contains(&c.as_str()),
        None => !path.starts_with('[') && transparent_library(&frame.module),
    }
}

/// The name of the owner layer of an unclaimed, non-transparent user frame: its crate, else
/// its binary or library (`[unknown]` frames included), else the frame's name.
fn owner_name(frame: &crate::profile::Frame, path: &str) -> String {
    if let Some(c) = crate_of(path, frame.file.as_deref()) {
        return c;
    }
    if path.starts_with('[') && path != "[unknown]" {
        return path.to_string();
    }
    if !frame.module.is_empty() {
        return frame.module.clone();
    }
    "[unknown]".to_string()
}

/// One row of the layer table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerRow {
    /// Layer name ([`UNATTRIBUTED`] for samples no rule matched).
    pub layer: String,
    /// The layer's category (`unknown` for [`UNATTRIBUTED`]).
    pub category: String,
    /// Samples whose innermost matching frame is in this layer.
    pub self_samples: u64,
    /// Samples with at least one frame of this layer on the stack.
    pub total_samples: u64,
    /// `self_samples / samples`, 0..1.
    pub self_share: f64,
    /// `total_samples / samples`, 0..1.
    pub total_share: f64,
    /// Binomial standard error of `self_share`: `sqrt(p (1 - p) / n)`.
    pub self_share_se: f64,
    /// Binomial standard error of `total_share`.
    pub total_share_se: f64,
    /// Sampled CPU per request in this layer's own code, µs (`self_samples × period /
    /// requests`); `None` without a request count or a sampling frequency.
    pub self_us_per_request: Option<f64>,
    /// Sampled CPU per request with this layer on the stack, µs.
    pub total_us_per_request: Option<f64>,
}

/// Category of the layers that are the agent's own instrumentation (`rules/rust-web.toml`:
/// "profiler BPF", "profiler uprobes"). Samples on a stack with such a frame are left out of
/// every named cost and of the app CPU a cost's share is taken of.
pub const PROFILER_CATEGORY: &str = "profiler";

/// Per-frame and per-stack attribution of a profile, shared by the layer table and the
/// cost fingerprints.
#[derive(Debug, Clone)]
pub struct Attribution {
    /// [`frame_path`] of every frame of the profile, by frame index.
    pub frame_paths: Vec<String>,
    /// The layer index (into [`RuleSet::layers`], which are the first entries of
    /// [`Attribution::layers`]) of the rule that claims each frame, by frame index.
    pub frame_layers: Vec<Option<usize>>,
    /// The rules' layers followed by one layer per crate (or library) that owns unclaimed
    /// frames ([`CRATE_CATEGORY`], [`APP_CATEGORY`]).
    pub layers: Vec<Layer>,
    /// The owner (index into [`Attribution::layers`]) of every frame: its rule's layer, its
    /// crate's layer, or `None` for transparent frames ([`is_transparent`]).
    pub frame_owner: Vec<Option<usize>>,
    /// True for frames of the app's own crates ([`super::costs::app_crates`]).
    pub frame_app: Vec<bool>,
    /// On-CPU samples per stack index (summed over threads).
    pub stack_samples: Vec<u64>,
    /// Owner of the innermost owned frame per stack index (into [`Attribution::layers`]).
    pub stack_self: Vec<Option<usize>>,
    /// Thread role names: the rules' roles in precedence order, then [`OTHER_ROLE`].
    pub role_names: Vec<String>,
    /// Role (index into [`Attribution::role_names`]) of every thread, by (pid, tid).
    pub thread_roles: HashMap<(u32, u32), usize>,
    /// On-CPU samples per stack index and role: `stack_role_samples[stack][role]`.
    pub stack_role_samples: Vec<Vec<u64>>,
    /// [`Attribution::stack_samples`] with 0 on the agent's own stacks
    /// ([`Attribution::stack_profiler`]): what every share of the app's CPU counts (named costs,
    /// generic findings, hottest code), so that none can count the agent's samples over the
    /// app's ([`Attribution::app_samples`]).
    pub app_stack_samples: Vec<u64>,
    /// [`Attribution::stack_role_samples`] with 0 on the agent's own stacks.
    pub app_stack_role_samples: Vec<Vec<u64>>,
    /// Per stack index: (role, endpoint index into [`crate::profile::EndpointSamples::endpoints`]
    /// or `None` for samples while serving no request, samples) from
    /// [`crate::profile::StackCount::endpoints`]; empty when the profile has no endpoint join.
    pub stack_endpoints: Vec<Vec<(usize, Option<u32>, u64)>>,
    /// The app's own crates.
    pub app_crates: Vec<String>,
    /// All on-CPU samples.
    pub samples: u64,
    /// Per stack index: whether a frame of the stack is in a layer of category
    /// [`PROFILER_CATEGORY`] (the agent's own BPF programs and uprobe traps).
    pub stack_profiler: Vec<bool>,
    /// On-CPU samples on those stacks: the agent's cost, not the app's.
    pub profiler_samples: u64,
    /// On-CPU samples on stacks marked truncated.
    pub truncated_samples: u64,
    /// Sampling period, µs (`1e6 / frequency_hz`); `None` when the frequency is 0.
    pub period_us: Option<f64>,
    /// HTTP requests the profile covers, when known.
    pub requests: Option<u64>,
}

impl Attribution {
    /// The app's on-CPU samples per endpoint of the endpoint join: `n` counts, indexed like
    /// [`crate::profile::EndpointSamples::endpoints`] (`n` its length), from
    /// [`Attribution::stack_endpoints`] without the agent's own stacks. All 0 without a join.
    pub fn endpoint_samples(&self, n: usize) -> Vec<u64> {
        let mut v = vec![0u64; n];
        for (si, list) in self.stack_endpoints.iter().enumerate() {
            if self.stack_profiler.get(si).copied().unwrap_or(false) {
                continue;
            }
            for &(_, e, c) in list {
                if let Some(x) = e.and_then(|e| v.get_mut(e as usize)) {
                    *x += c;
                }
            }
        }
        v
    }

    /// Attributes every frame and stack of `profile` with `rules`.
    pub fn new(profile: &Profile, rules: &RuleSet, requests: Option<u64>) -> Attribution {
        let frame_paths: Vec<String> = profile.frames.iter().map(frame_path).collect();
        let frame_layers: Vec<Option<usize>> = profile
            .frames
            .iter()
            .zip(&frame_paths)
            .map(|(f, p)| rules.classify_path(f.kind, p))
            .collect();
        let app_crates = super::costs::app_crates(profile, &frame_paths);
        let mut layers: Vec<Layer> = rules.layers().to_vec();
        let mut by_name: HashMap<String, usize> = HashMap::new();
        let mut frame_app = vec![false; profile.frames.len()];
        let frame_owner: Vec<Option<usize>> = profile
            .frames
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let p = &frame_paths[i];
                let krate = (f.kind == FrameKind::User).then(|| crate_of(p, f.file.as_deref())).flatten();
                frame_app[i] = krate.as_ref().is_some_and(|c| app_crates.contains(c));
                if let Some(l) = frame_layers[i] {
                    return Some(l);
                }
                if is_transparent(f, p) {
                    return None;
                }
                // A frame whose own path no rule claims (`F::call` of a generic impl) but whose
                // crate a rule names (`axum::`) belongs to that rule's layer.
                if let Some(l) = krate.as_ref().and_then(|c| rules.classify_path(f.kind, &format!("{c}::"))) {
                    return Some(l);
                }
                let name = owner_name(f, p);
                let next = layers.len();
                let idx = *by_name.entry(name.clone()).or_insert(next);
                if idx == next {
                    let category = if app_crates.contains(&name) { APP_CATEGORY } else { CRATE_CATEGORY };
                    let name = if layers.iter().any(|l| l.name == name) { format!("{name} (crate)") } else { name };
                    layers.push(Layer { name, category: category.into(), origin: CRATE_ORIGIN.into() });
                }
                Some(idx)
            })
            .collect();
        let role_names: Vec<String> = rules.thread_roles().iter().map(|r| r.name.clone()).chain([OTHER_ROLE.to_string()]).collect();
        let other = role_names.len() - 1;
        let frame_role: Vec<usize> = frame_paths
            .iter()
            .map(|p| rules.thread_roles().iter().position(|r| r.frames.iter().any(|re| re.is_match(p))).unwrap_or(other))
            .collect();
        let stack_role: Vec<usize> =
            profile.stacks.iter().map(|s| s.frames.iter().map(|&f| frame_role[f as usize]).min().unwrap_or(other)).collect();
        let mut thread_roles: HashMap<(u32, u32), usize> = HashMap::new();
        for c in profile.on_cpu.iter().chain(&profile.off_cpu) {
            let r = stack_role.get(c.stack as usize).copied().unwrap_or(other);
            let e = thread_roles.entry((c.pid, c.tid)).or_insert(other);
            *e = (*e).min(r);
        }
        let mut stack_samples = vec![0u64; profile.stacks.len()];
        let mut stack_role_samples = vec![vec![0u64; role_names.len()]; profile.stacks.len()];
        let joined = profile.endpoints.is_some();
        let mut stack_endpoints: Vec<Vec<(usize, Option<u32>, u64)>> = vec![Vec::new(); if joined { profile.stacks.len() } else { 0 }];
        for c in &profile.on_cpu {
            if let Some(s) = stack_samples.get_mut(c.stack as usize) {
                *s += c.count;
                let role = thread_roles[&(c.pid, c.tid)];
                stack_role_samples[c.stack as usize][role] += c.count;
                if joined {
                    let v = &mut stack_endpoints[c.stack as usize];
                    let mut rest = c.count;
                    for &(e, n) in &c.endpoints {
                        v.push((role, Some(e), n));
                        rest = rest.saturating_sub(n);
                    }
                    if rest > 0 {
                        v.push((role, None, rest));
                    }
                }
            }
        }
        let stack_self: Vec<Option<usize>> = profile
            .stacks
            .iter()
            .map(|s| s.frames.iter().rev().find_map(|&f| frame_owner.get(f as usize).copied().flatten()))
            .collect();
        let samples = stack_samples.iter().sum();
        let stack_profiler: Vec<bool> = profile
            .stacks
            .iter()
            .map(|s| {
                s.frames.iter().any(|&f| {
                    frame_layers.get(f as usize).copied().flatten().is_some_and(|l| rules.layers()[l].category == PROFILER_CATEGORY)
                })
            })
            .collect();
        let profiler_samples = stack_samples.iter().zip(&stack_profiler).filter(|(_, &p)| p).map(|(n, _)| n).sum();
        let app_stack_samples: Vec<u64> = stack_samples.iter().zip(&stack_profiler).map(|(&n, &p)| if p { 0 } else { n }).collect();
        let app_stack_role_samples: Vec<Vec<u64>> = stack_role_samples
            .iter()
            .zip(&stack_profiler)
            .map(|(r, &p)| if p { vec![0; r.len()] } else { r.clone() })
            .collect();
        let truncated_samples =
            profile.stacks.iter().zip(&stack_samples).filter(|(s, _)| s.truncated).map(|(_, n)| n).sum();
        let period_us = (profile.meta.frequency_hz > 0).then(|| 1e6 / profile.meta.frequency_hz as f64);
        Attribution {
            frame_paths,
            frame_layers,
            layers,
            frame_owner,
            frame_app,
            stack_samples,
            stack_self,
            role_names,
            thread_roles,
            stack_role_samples,
            app_stack_samples,
            app_stack_role_samples,
            stack_endpoints,
            app_crates,
            samples,
            stack_profiler,
            profiler_samples,
            truncated_samples,
            period_us,
            requests: requests.filter(|&r| r > 0),
        }
    }

    /// `samples × period / requests`: sampled CPU per request, µs; `None` without a request
    /// count or a frequency.
    pub fn us_per_request(&self, samples: f64) -> Option<f64> {
        Some(samples * self.period_us? / self.requests? as f64)
    }

    /// `samples / all samples` (0 when there are none).
    pub fn share(&self, samples: u64) -> f64 {
        if self.samples == 0 {
            0.0
        } else {
            samples as f64 / self.samples as f64
        }
    }

    /// The app's samples: all but [`Attribution::profiler_samples`].
    pub fn app_samples(&self) -> u64 {
        self.samples - self.profiler_samples
    }

    /// `samples / the app's samples` ([`Attribution::app_samples`], 0 when there are none):
    /// a share of the CPU the app would use without the agent, which is what removing a cost
    /// gives back. Named costs use it.
    pub fn app_share(&self, samples: u64) -> f64 {
        match self.app_samples() {
            0 => 0.0,
            n => samples as f64 / n as f64,
        }
    }

    /// Binomial standard error of a share `p` of the app's samples.
    pub fn app_share_se(&self, p: f64) -> f64 {
        match self.app_samples() {
            0 => 0.0,
            n => (p.clamp(0.0, 1.0) * (1.0 - p.clamp(0.0, 1.0)) / n as f64).sqrt(),
        }
    }

    /// Binomial standard error of a share `p` of this profile's samples: `sqrt(p (1-p) / n)`.
    pub fn share_se(&self, p: f64) -> f64 {
        if self.samples == 0 {
            0.0
        } else {
            (p * (1.0 - p) / self.samples as f64).sqrt()
        }
    }

    /// The layer table, most self samples first; [`UNATTRIBUTED`] included when non-zero.
    /// Layers are [`Attribution::layers`]: the rules' and the crates'.
    pub fn layer_table(&self, profile: &Profile) -> Vec<LayerRow> {
        let n = self.layers.len();
        let mut self_s = vec![0u64; n + 1];
        let mut total_s = vec![0u64; n + 1];
        let mut seen = vec![usize::MAX; n + 1];
        for (si, stack) in profile.stacks.iter().enumerate() {
            let count = self.stack_samples[si];
            if count == 0 {
                continue;
            }
            self_s[self.stack_self[si].unwrap_or(n)] += count;
            let mut any = false;
            for &f in &stack.frames {
                if let Some(l) = self.frame_owner.get(f as usize).copied().flatten() {
                    any = true;
                    if seen[l] != si {
                        seen[l] = si;
                        total_s[l] += count;
                    }
                }
            }
            if !any {
                total_s[n] += count;
            }
        }
        let mut rows: Vec<LayerRow> = (0..=n)
            .filter(|&i| total_s[i] > 0)
            .map(|i| {
                let (layer, category) = match self.layers.get(i) {
                    Some(l) => (l.name.clone(), l.category.clone()),
                    None => (UNATTRIBUTED.to_string(), "unknown".to_string()),
                };
                let ps = self.share(self_s[i]);
                let pt = self.share(total_s[i]);
                LayerRow {
                    layer,
                    category,
                    self_samples: self_s[i],
                    total_samples: total_s[i],
                    self_share: ps,
                    total_share: pt,
                    self_share_se: self.share_se(ps),
                    total_share_se: self.share_se(pt),
                    self_us_per_request: self.us_per_request(self_s[i] as f64),
                    total_us_per_request: self.us_per_request(total_s[i] as f64),
                }
            })
            .collect();
        rows.sort_by(|a, b| b.self_samples.cmp(&a.self_samples).then(b.total_samples.cmp(&a.total_samples)).then(a.layer.cmp(&b.layer)));
        rows
    }

    /// The path of a stack's innermost user frame (or of its leaf when it has no user frame).
    fn leaf_path(&self, profile: &Profile, si: usize) -> Option<String> {
        let stack = &profile.stacks[si];
        let leaf_user = stack.frames.iter().rev().find(|&&f| profile.frames[f as usize].kind == FrameKind::User);
        let f = leaf_user.or(stack.frames.last())?;
        Some(self.frame_paths[*f as usize].clone())
    }

    /// The hottest self-time functions outside known layers: for the app's samples (the
    /// agent's own left out, as [`Attribution::app_share`] leaves them out) whose innermost
    /// user frame matched no rule, that frame's path with its samples, most first.
    pub fn hot_unattributed(&self, profile: &Profile, limit: usize) -> Vec<(String, u64)> {
        let mut counts: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
        for (si, stack) in profile.stacks.iter().enumerate() {
            let count = self.app_stack_samples[si];
            if count == 0 {
                continue;
            }
            let leaf_user = stack.frames.iter().rev().find(|&&f| profile.frames[f as usize].kind == FrameKind::User);
            let unmatched = match leaf_user {
                Some(&f) => self.frame_layers[f as usize].is_none(),
                None => false,
            };
            if unmatched {
                if let Some(p) = self.leaf_path(profile, si) {
                    *counts.entry(p).or_default() += count;
                }
            }
        }
        let mut v: Vec<(String, u64)> = counts.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v.truncate(limit);
        v
    }
}
