//! Rules as data: frame-name patterns -> pipeline layer + category.
//!
//! A rules file is TOML with one `[[layer]]` table per layer:
//!
//! ```toml
//! [[layer]]
//! name = "sqlx pool"                 # the layer's name in every table (unique)
//! category = "database"              # a coarse group: runtime, http, framework, middleware, ...
//! prefix = ["sqlx_core::pool::"]     # literal prefixes of the frame path (optional)
//! regex = ["^sqlx_core::pool::"]     # regexes searched in the frame path (optional)
//! kind = "user"                      # only user or only kernel frames (optional; default both)
//! ```
//!
//! The *frame path* a pattern sees is [`frame_path`]: the frame's full Rust path, with
//! `<Type as Trait>::method` written as `Type::method`, and, for inlined frames (whose DWARF
//! names are unqualified, e.g. `poll_inner<...>`), the module path derived from the source
//! file (`.../tokio-1.54.1/src/runtime/task/harness.rs` -> `tokio::runtime::task::harness::`).
//!
//! Precedence: a frame gets the layer of the first rule that matches it. Files added later
//! come first (an app's rules beat the default catalog), and a later file that names an
//! existing layer replaces every rule of that layer (its category too). Within a file, rules
//! keep their order.
//!
//! Errors carry the 1-based line in the file ([`RuleError`]): TOML syntax and type errors at
//! the spot `toml` reports, unknown keys, bad regexes and empty layers at the offending value.

use std::ops::Range;
use std::path::Path;

use regex::Regex;
use serde::Deserialize;
use toml::Spanned;

use super::catalog::{CostRule, FrameSet, ThreadRole};
use crate::profile::{Frame, FrameKind};

/// The default catalog for the Rust web stack (tokio, hyper, axum, tower, tower-http, sqlx,
/// serde_json, jsonwebtoken, std sync, alloc, uuid, tracing, metrics, kernel), embedded.
pub const DEFAULT_CATALOG: &str = include_str!("../../rules/rust-web.toml");
/// The origin name of [`DEFAULT_CATALOG`] in errors and layer tables.
pub const DEFAULT_ORIGIN: &str = "rust-web.toml (built in)";

/// A rules file could not be used: where (1-based line) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}:{line}: {message}")]
pub struct RuleError {
    /// The file the rules came from (a path, or [`DEFAULT_ORIGIN`]).
    pub origin: String,
    /// 1-based line of the offending text (1 when the error has no position).
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// Why [`RuleSet::add_file`] failed.
#[derive(Debug, thiserror::Error)]
pub enum RulesFileError {
    /// The file could not be read.
    #[error("reading rules file {path}: {source}")]
    Io {
        /// The path as given.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file was read but is not a valid rules file.
    #[error(transparent)]
    Rule(#[from] RuleError),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    #[serde(default)]
    layer: Vec<Spanned<LayerToml>>,
    #[serde(default)]
    cost: Vec<Spanned<super::catalog::CostToml>>,
    #[serde(default)]
    thread_role: Vec<Spanned<super::catalog::RoleToml>>,
    #[serde(default)]
    frame_set: Vec<Spanned<super::catalog::FrameSetToml>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LayerToml {
    name: Spanned<String>,
    category: Spanned<String>,
    #[serde(default)]
    prefix: Vec<Spanned<String>>,
    #[serde(default)]
    regex: Vec<Spanned<String>>,
    #[serde(default)]
    kind: Option<Spanned<String>>,
}

/// A layer: a name and a category, and the file that defined it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    /// Unique name, e.g. `sqlx pool`, `rate limit`.
    pub name: String,
    /// Coarse group, e.g. `database`, `middleware`, `alloc`, `kernel`, `app`.
    pub category: String,
    /// Where the layer was defined ([`DEFAULT_ORIGIN`] or the rules file's path).
    pub origin: String,
}

impl Layer {
    /// True when the layer comes from the embedded default catalog (a known library), false
    /// for layers of a user/app rules file (the app's own code).
    pub fn is_builtin(&self) -> bool {
        self.origin == DEFAULT_ORIGIN
    }
}

#[derive(Debug, Clone)]
struct Rule {
    layer: usize,
    prefixes: Vec<String>,
    regexes: Vec<Regex>,
    kind: Option<FrameKind>,
}

impl Rule {
    fn matches(&self, kind: FrameKind, path: &str) -> bool {
        if self.kind.is_some_and(|k| k != kind) {
            return false;
        }
        self.prefixes.iter().any(|p| path.starts_with(p.as_str())) || self.regexes.iter().any(|r| r.is_match(path))
    }
}

/// An ordered set of rules (see the module docs for precedence).
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    layers: Vec<Layer>,
    /// Rules by precedence, highest first.
    rules: Vec<Rule>,
    /// Cost fingerprints (`[[cost]]`), by precedence: later files first, then file order.
    costs: Vec<CostRule>,
    /// Thread roles (`[[thread_role]]`), by precedence.
    roles: Vec<ThreadRole>,
    /// Frame sets (`[[frame_set]]`), by name; a later file's replaces an earlier one's.
    frame_sets: Vec<FrameSet>,
}

fn line_of(text: &str, span: Option<Range<usize>>) -> usize {
    match span {
        Some(r) => text[..r.start.min(text.len())].bytes().filter(|&b| b == b'\n').count() + 1,
        None => 1,
    }
}

impl RuleSet {
    /// An empty set (no layers).
    pub fn empty() -> RuleSet {
        RuleSet::default()
    }

    /// The embedded default catalog ([`DEFAULT_CATALOG`]).
    ///
    /// # Panics
    /// Never in a released build: the catalog is checked by a unit test.
    pub fn builtin() -> RuleSet {
        let mut set = RuleSet::empty();
        set.add_toml(DEFAULT_CATALOG, DEFAULT_ORIGIN).expect("the embedded catalog parses");
        set
    }

    /// The default catalog plus the rules of each file in `files`, in order (`--rules FILE`).
    ///
    /// # Errors
    /// The first file that cannot be read or parsed.
    pub fn builtin_with_files<P: AsRef<Path>>(files: &[P]) -> Result<RuleSet, RulesFileError> {
        let mut set = RuleSet::builtin();
        for f in files {
            set.add_file(f.as_ref())?;
        }
        Ok(set)
    }

    /// Adds (or overrides, by layer name) the rules of a TOML file (`--rules FILE`).
    ///
    /// # Errors
    /// [`RulesFileError::Io`] when unreadable, [`RulesFileError::Rule`] with the line.
    pub fn add_file(&mut self, path: &Path) -> Result<(), RulesFileError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| RulesFileError::Io { path: path.display().to_string(), source })?;
        self.add_toml(&text, &path.display().to_string())?;
        Ok(())
    }

    /// Adds (or overrides, by layer name) the rules in `text`; `origin` names it in errors.
    /// On error nothing is added.
    ///
    /// # Errors
    /// A [`RuleError`] with the 1-based line of the offending text.
    pub fn add_toml(&mut self, text: &str, origin: &str) -> Result<(), RuleError> {
        let err = |span: Option<Range<usize>>, message: String| RuleError {
            origin: origin.to_string(),
            line: line_of(text, span),
            message,
        };
        let file: FileToml = toml::from_str(text).map_err(|e| err(e.span(), e.message().trim().to_string()))?;
        let mut new_layers: Vec<Layer> = Vec::new();
        let mut new_rules: Vec<(String, Rule)> = Vec::new();
        for entry in &file.layer {
            let l = entry.get_ref();
            let name = l.name.get_ref().trim().to_string();
            if name.is_empty() {
                return Err(err(Some(l.name.span()), "layer name is empty".into()));
            }
            if new_layers.iter().any(|x| x.name == name) {
                return Err(err(Some(l.name.span()), format!("layer `{name}` is defined twice in this file")));
            }
            let category = l.category.get_ref().trim().to_string();
            if category.is_empty() {
                return Err(err(Some(l.category.span()), format!("layer `{name}`: category is empty")));
            }
            let kind = match &l.kind {
                None => None,
                Some(k) => match k.get_ref().as_str() {
                    "user" => Some(FrameKind::User),
                    "kernel" => Some(FrameKind::Kernel),
                    other => {
                        return Err(err(Some(k.span()), format!("kind must be \"user\" or \"kernel\", not {other:?}")));
                    }
                },
            };
            let mut prefixes = Vec::new();
            for p in &l.prefix {
                if p.get_ref().is_empty() {
                    return Err(err(Some(p.span()), format!("layer `{name}`: an empty prefix matches every frame")));
                }
                prefixes.push(p.get_ref().clone());
            }
            // Frame sets are for costs and roles; a layer's regexes are its own.
            let regexes = super::catalog::regexes(&l.regex, &format!("layer `{name}`"), &|_| None, &err)?;
            if prefixes.is_empty() && regexes.is_empty() {
                return Err(err(Some(entry.span()), format!("layer `{name}` has no `prefix` or `regex` pattern")));
            }
            new_layers.push(Layer { name: name.clone(), category, origin: origin.to_string() });
            new_rules.push((name, Rule { layer: usize::MAX, prefixes, regexes, kind }));
        }
        let mut new_sets: Vec<FrameSet> = Vec::new();
        for entry in &file.frame_set {
            let lookup = |name: &str| {
                new_sets.iter().chain(&self.frame_sets).find(|f| f.name == name).map(|f| f.frames.clone())
            };
            let f = super::catalog::parse_frame_set(entry, origin, &lookup, &err)?;
            if new_sets.iter().any(|x| x.name == f.name) {
                return Err(err(Some(entry.span()), format!("frame_set `{}` is defined twice in this file", f.name)));
            }
            new_sets.push(f);
        }
        let lookup = |name: &str| new_sets.iter().chain(&self.frame_sets).find(|f| f.name == name).map(|f| f.frames.clone());
        let mut new_costs: Vec<CostRule> = Vec::new();
        for entry in &file.cost {
            let c = super::catalog::parse_cost(entry, origin, super::costs::DETECTORS, &lookup, &err)?;
            if new_costs.iter().any(|x| x.id == c.id) {
                return Err(err(Some(entry.get_ref().id_span()), format!("cost `{}` is defined twice in this file", c.id)));
            }
            new_costs.push(c);
        }
        let mut new_roles: Vec<ThreadRole> = Vec::new();
        for entry in &file.thread_role {
            let r = super::catalog::parse_role(entry, origin, &lookup, &err)?;
            if new_roles.iter().any(|x| x.name == r.name) {
                return Err(err(Some(entry.span()), format!("thread_role `{}` is defined twice in this file", r.name)));
            }
            new_roles.push(r);
        }
        // A file's frame sets, costs and roles come before the earlier ones and replace those
        // of the same id or name.
        self.frame_sets.retain(|f| !new_sets.iter().any(|n| n.name == f.name));
        new_sets.append(&mut self.frame_sets);
        self.frame_sets = new_sets;
        self.costs.retain(|c| !new_costs.iter().any(|n| n.id == c.id));
        new_costs.append(&mut self.costs);
        self.costs = new_costs;
        self.roles.retain(|r| !new_roles.iter().any(|n| n.name == r.name));
        new_roles.append(&mut self.roles);
        self.roles = new_roles;
        // Apply: overriding layers keep their index, lose their old rules.
        let mut front = Vec::with_capacity(new_rules.len());
        for (layer, (name, mut rule)) in new_layers.into_iter().zip(new_rules) {
            let idx = match self.layers.iter().position(|x| x.name == name) {
                Some(i) => {
                    self.rules.retain(|r| r.layer != i);
                    self.layers[i] = layer;
                    i
                }
                None => {
                    self.layers.push(layer);
                    self.layers.len() - 1
                }
            };
            rule.layer = idx;
            front.push(rule);
        }
        front.append(&mut self.rules);
        self.rules = front;
        Ok(())
    }

    /// The cost fingerprints, by precedence.
    pub fn costs(&self) -> &[CostRule] {
        &self.costs
    }

    /// The thread roles, by precedence.
    pub fn thread_roles(&self) -> &[ThreadRole] {
        &self.roles
    }

    /// The frame set of this name (`[[frame_set]]`, e.g. [`super::catalog::LOCK`]).
    pub fn frame_set(&self, name: &str) -> Option<&FrameSet> {
        self.frame_sets.iter().find(|f| f.name == name)
    }

    /// All layers, in the order they were first defined.
    pub fn layers(&self) -> &[Layer] {
        &self.layers
    }

    /// The layer with this name.
    pub fn layer(&self, name: &str) -> Option<&Layer> {
        self.layers.iter().find(|l| l.name == name)
    }

    /// Index into [`RuleSet::layers`] of the layer of a frame with this kind and
    /// [`frame_path`], or `None` when no rule matches.
    pub fn classify_path(&self, kind: FrameKind, path: &str) -> Option<usize> {
        self.rules.iter().find(|r| r.matches(kind, path)).map(|r| r.layer)
    }

    /// Index into [`RuleSet::layers`] of a frame's layer, or `None`.
    pub fn classify(&self, frame: &Frame) -> Option<usize> {
        self.classify_path(frame.kind, &frame_path(frame))
    }
}

/// The name rules and fingerprints match for a frame (see the module docs): kernel frames as
/// they are; user frames with `<T as Trait>::m` -> `T::m`; inlined frames without a path of
/// their own prefixed with the module path of their source file.
pub fn frame_path(frame: &Frame) -> String {
    if frame.kind == FrameKind::Kernel {
        return frame.function.clone();
    }
    let name = strip_impl(&frame.function);
    if frame.inlined && !has_top_level_path(&name) {
        if let Some(m) = frame.file.as_deref().and_then(module_path_of_file) {
            return format!("{m}::{name}");
        }
    }
    name
}

/// The index of the `>` that closes the `<` at byte `open` of a symbol (`->` arrows skipped),
/// or `b.len()` when it is not closed.
pub fn matching_angle(b: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for i in open..b.len() {
        match b[i] {
            b'<' => depth += 1,
            b'>' if i > 0 && b[i - 1] == b'-' => {}
            b'>' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    b.len()
}

/// `<A as B>::rest` -> `A::rest`, `<A>::rest` -> `A::rest`; anything else unchanged.
pub fn strip_impl(name: &str) -> String {
    if !name.starts_with('<') {
        return name.to_string();
    }
    let b = name.as_bytes();
    let close = matching_angle(b, 0);
    if close == b.len() {
        return name.to_string();
    }
    // The first ` as ` inside the outer brackets but outside any nested ones.
    let mut as_at = None;
    let mut i = 1;
    while i < close {
        if b[i] == b'<' {
            i = matching_angle(b, i) + 1;
            continue;
        }
        if name[i..].starts_with(" as ") {
            as_at = Some(i);
            break;
        }
        i += 1;
    }
    format!("{}{}", &name[1..as_at.unwrap_or(close)], &name[close + 1..])
}

/// `name` without its generic arguments: `a::b<c::d>::e<f>` -> `a::b::e`.
pub fn strip_generics(name: &str) -> String {
    let b = name.as_bytes();
    let mut out = String::with_capacity(name.len());
    let mut depth = 0usize;
    for (i, ch) in name.char_indices() {
        match ch {
            '<' => depth += 1,
            '>' if i > 0 && b[i - 1] == b'-' => {}
            '>' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(ch),
            _ => {}
        }
    }
    out
}

/// True when `name` has a `::` outside of generic brackets (`a::b<c::d>` yes, `f<c::d>` no).
fn has_top_level_path(name: &str) -> bool {
    let b = name.as_bytes();
    let mut depth = 0i32;
    for i in 0..b.len() {
        match b[i] {
            b'<' => depth += 1,
            b'>' if i > 0 && b[i - 1] == b'-' => {}
            b'>' => depth -= 1,
            b':' if depth == 0 && b.get(i + 1) == Some(&b':') => return true,
            _ => {}
        }
    }
    false
}

/// The Rust module path of a source file: `.../tokio-1.54.1/src/runtime/task/harness.rs` ->
/// `tokio::runtime::task::harness`; `/rustc/<hash>/library/std/src/panic.rs` -> `std::panic`;
/// `/work/app/target-app/src/layers/mod.rs` -> `target_app::layers`. `None` for non-Rust files.
pub fn module_path_of_file(file: &str) -> Option<String> {
    let rel = file.strip_suffix(".rs")?;
    let parts: Vec<&str> = rel.split('/').collect();
    let src = parts.iter().rposition(|p| *p == "src")?;
    if src == 0 {
        return None;
    }
    let krate = crate_name_of_dir(parts[src - 1]);
    let mut path = vec![krate];
    for (i, p) in parts[src + 1..].iter().enumerate() {
        let last = i == parts.len() - src - 2;
        if last && (*p == "mod" || *p == "lib" || *p == "main") {
            continue;
        }
        path.push(p.replace('-', "_"));
    }
    Some(path.join("::"))
}

/// The crate of a registry folder name: `zstd-sys-2.0.16+zstd.1.5.7` -> `zstd_sys`; `None`
/// for a name without a `-<version>` (`src`, `target-app`).
pub fn crate_dir(dir: &str) -> Option<String> {
    let b = dir.as_bytes();
    (0..b.len())
        .find(|&i| b[i] == b'-' && b.get(i + 1).is_some_and(u8::is_ascii_digit) && dir[i + 1..].contains('.'))
        .filter(|&i| i > 0)
        .map(|i| dir[..i].replace('-', "_"))
}

/// `sqlx-core-0.8.6` -> `sqlx_core`; `target-app` -> `target_app`.
fn crate_name_of_dir(dir: &str) -> String {
    crate_dir(dir).unwrap_or_else(|| dir.replace('-', "_"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(function: &str, inlined: bool, file: Option<&str>) -> Frame {
        Frame {
            function: function.into(),
            module: "app".into(),
            kind: FrameKind::User,
            inlined,
            file: file.map(str::to_string),
            line: None,
        }
    }

    #[test]
    fn builtin_catalog_parses() {
        let set = RuleSet::builtin();
        assert!(set.layers().len() >= 20, "{}", set.layers().len());
        for name in ["tokio scheduler", "tokio spawn", "tokio I/O driver", "sqlx pool", "sqlx ping", "hyper", "axum routing", "axum extractors", "tower-http compression", "serde_json", "jsonwebtoken", "std sync", "alloc", "uuid", "metrics"] {
            assert!(set.layer(name).is_some(), "missing layer {name}");
        }
    }

    #[test]
    fn strips_trait_impls() {
        assert_eq!(
            strip_impl("<target_app::layers::timeout::RequestTimeout<S> as tower_service::Service<http::request::Request<B>>>::call::{{closure}}"),
            "target_app::layers::timeout::RequestTimeout<S>::call::{{closure}}"
        );
        assert_eq!(strip_impl("<std::sys::thread::unix::Thread>::new::thread_start"), "std::sys::thread::unix::Thread::new::thread_start");
        assert_eq!(strip_impl("<F as fn() -> T>::x"), "F::x");
        assert_eq!(strip_impl("tokio::runtime::task::harness::Harness<T,S>::poll"), "tokio::runtime::task::harness::Harness<T,S>::poll");
    }

    #[test]
    fn strips_generics() {
        assert_eq!(strip_generics("a::b<c::d<e>>::f<g>"), "a::b::f");
        assert_eq!(strip_generics("poll<F, fn() -> T>"), "poll");
    }

    #[test]
    fn module_paths_from_files() {
        let reg = "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f";
        assert_eq!(module_path_of_file(&format!("{reg}/tokio-1.54.1/src/runtime/task/harness.rs")).unwrap(), "tokio::runtime::task::harness");
        assert_eq!(module_path_of_file(&format!("{reg}/sqlx-core-0.8.6/src/pool/mod.rs")).unwrap(), "sqlx_core::pool");
        assert_eq!(module_path_of_file(&format!("{reg}/hyper-1.12.0/src/lib.rs")).unwrap(), "hyper");
        assert_eq!(module_path_of_file("/rustc/5980/library/std/src/sys/sync/mutex/futex.rs").unwrap(), "std::sys::sync::mutex::futex");
        assert_eq!(module_path_of_file("/work/main/target-app/src/layers/rate_limit.rs").unwrap(), "target_app::layers::rate_limit");
        assert_eq!(module_path_of_file("/x/libmimalloc-sys-0.1.4/c_src/mimalloc/src/alloc.c"), None);
    }

    #[test]
    fn inlined_frames_get_their_files_module() {
        let f = user("poll_inner<hyper::proto::h1::dispatch::Server<X>>", true, Some("/r/hyper-1.12.0/src/proto/h1/dispatch.rs"));
        assert_eq!(frame_path(&f), "hyper::proto::h1::dispatch::poll_inner<hyper::proto::h1::dispatch::Server<X>>");
        // An inlined frame that has a path keeps it; a non-inlined one never takes its file's.
        let g = user("tokio::task::spawn::spawn", true, Some("/r/tokio-1.54.1/src/task/spawn.rs"));
        assert_eq!(frame_path(&g), "tokio::task::spawn::spawn");
        let h = user("mi_malloc", false, Some("/r/libmimalloc-sys-0.1.4/c_src/mimalloc/src/alloc.c"));
        assert_eq!(frame_path(&h), "mi_malloc");
    }
}
