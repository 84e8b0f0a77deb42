//! The layer table: each on-CPU sample attributed to its innermost matching layer (*self*)
//! and to every distinct layer on its stack (*total*), with shares of the app's samples, µs of
//! sampled CPU per request and binomial standard errors.

use serde::{Deserialize, Serialize};

use super::rules::{frame_path, RuleSet};
use crate::profile::{FrameKind, Profile};

/// Name of the pseudo-layer of samples whose stack matched no rule.
pub const UNATTRIBUTED: &str = "(no layer)";

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
    /// The layer index (into [`RuleSet::layers`]) of every frame, by frame index.
    pub frame_layers: Vec<Option<usize>>,
    /// On-CPU samples per stack index (summed over threads).
    pub stack_samples: Vec<u64>,
    /// Innermost matching layer per stack index.
    pub stack_self: Vec<Option<usize>>,
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
    /// Attributes every frame and stack of `profile` with `rules`.
    pub fn new(profile: &Profile, rules: &RuleSet, requests: Option<u64>) -> Attribution {
        let frame_paths: Vec<String> = profile.frames.iter().map(frame_path).collect();
        let frame_layers: Vec<Option<usize>> = profile
            .frames
            .iter()
            .zip(&frame_paths)
            .map(|(f, p)| rules.classify_path(f.kind, p))
            .collect();
        let mut stack_samples = vec![0u64; profile.stacks.len()];
        for c in &profile.on_cpu {
            if let Some(s) = stack_samples.get_mut(c.stack as usize) {
                *s += c.count;
            }
        }
        let stack_self: Vec<Option<usize>> = profile
            .stacks
            .iter()
            .map(|s| s.frames.iter().rev().find_map(|&f| frame_layers.get(f as usize).copied().flatten()))
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
        let truncated_samples =
            profile.stacks.iter().zip(&stack_samples).filter(|(s, _)| s.truncated).map(|(_, n)| n).sum();
        let period_us = (profile.meta.frequency_hz > 0).then(|| 1e6 / profile.meta.frequency_hz as f64);
        Attribution {
            frame_paths,
            frame_layers,
            stack_samples,
            stack_self,
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
            n => (p * (1.0 - p) / n as f64).sqrt(),
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
    pub fn layer_table(&self, profile: &Profile, rules: &RuleSet) -> Vec<LayerRow> {
        let n = rules.layers().len();
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
                if let Some(l) = self.frame_layers.get(f as usize).copied().flatten() {
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
                let (layer, category) = match rules.layers().get(i) {
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

    /// The hottest self-time functions outside known layers: for samples whose innermost
    /// user frame matched no rule, that frame's path with its samples, most first.
    pub fn hot_unattributed(&self, profile: &Profile, limit: usize) -> Vec<(String, u64)> {
        let mut counts: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
        for (si, stack) in profile.stacks.iter().enumerate() {
            let count = self.stack_samples[si];
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
