//! `profiler`: an eBPF profiling agent for the request pipelines of web services.
//!
//! The data flows one way (see DESIGN.md): `collect` (aya, kernel maps) -> `profile`
//! (the canonical in-memory [`profile::Profile`]) -> `symbolize` -> `attribute` -> `render`.

pub mod attach;
pub mod attribute;
pub mod collect;
pub mod compare;
pub mod diff;
pub mod memory;
pub mod output;
pub mod profile;
pub mod render;
pub mod report;
pub mod runs;
pub mod symbolize;
pub mod sys;
pub mod target;
pub mod unwind;
pub mod wire;

/// Whether `x` is its type's default: serde's `skip_serializing_if` for fields that files
/// leave out when zero, empty or unset (they read back as the default).
pub(crate) fn is_default<T: Default + PartialEq>(x: &T) -> bool {
    *x == T::default()
}

/// `err` and its causes ([`std::error::Error::source`], outermost first) on one line, joined
/// by `: `.
///
/// A cause whose text the line already holds is left out: many error types of this crate and
/// its dependencies write their source into their own message *and* return it from `source`
/// (thiserror's `"{path}: {source}"` with a `source` field), so printing the chain as is
/// (anyhow's `{:#}`) said every OS or parser error twice
/// (`x.json: No such file or directory (os error 2): No such file or directory (os error 2)`).
/// Line breaks inside a message (TOML parse errors have several lines) become `; `.
pub fn error_chain_line(err: &(dyn std::error::Error + 'static)) -> String {
    let mut line = String::new();
    let mut cause = Some(err);
    while let Some(c) = cause {
        let text = c.to_string();
        let text: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        let text = text.join("; ");
        if !text.is_empty() && !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
        cause = c.source();
    }
    line
}
