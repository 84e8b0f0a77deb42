//! The subcommands of the `profiler` binary, one module each: `Args` (clap derive) -> `run`.
//!
//! Commands use `anyhow` with `.context()`; `main.rs` prints [`error_line`] of the error and
//! exits 2.

pub mod attach;
pub mod bench;
pub mod diff;
pub mod overhead;
pub mod report;
pub mod validate;

/// True when `err` (anywhere in its chain) is a broken pipe, e.g. stdout closed by `| head`.
/// `main` exits 0 then, as ripgrep does.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The one line `main` prints for `err` (after `profiler: error: `): the context and its
/// causes joined by `: `, outermost first.
///
/// A cause whose text the line already holds is left out: many error types of this crate and
/// its dependencies write their source into their own message *and* return it from
/// [`std::error::Error::source`] (thiserror's `"{path}: {source}"` with a `source` field), so
/// printing the chain as is (anyhow's `{:#}`) said every OS or parser error twice
/// (`x.json: No such file or directory (os error 2): No such file or directory (os error 2)`).
/// Line breaks inside a message (TOML parse errors have several lines) become `; `, so the
/// result is always one line.
pub fn error_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        let text: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        let text = text.join("; ");
        if text.is_empty() || line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::error_line;

    #[derive(Debug, thiserror::Error)]
    #[error("{path}: {source}")]
    struct Embeds {
        path: String,
        source: std::io::Error,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("{path}: not JSON")]
    struct Chains {
        path: String,
        #[source]
        source: std::io::Error,
    }

    fn enoent() -> std::io::Error {
        std::io::Error::from_raw_os_error(2)
    }

    #[test]
    fn a_source_already_in_the_message_is_not_repeated() {
        let err = anyhow::Error::new(Embeds { path: "x.json".into(), source: enoent() }).context("BASE");
        assert_eq!(error_line(&err), "BASE: x.json: No such file or directory (os error 2)");
    }

    #[test]
    fn a_source_not_in_the_message_is_appended() {
        let err = anyhow::Error::new(Chains { path: "x.json".into(), source: enoent() }).context("HEAD");
        assert_eq!(error_line(&err), "HEAD: x.json: not JSON: No such file or directory (os error 2)");
    }

    #[test]
    fn line_breaks_become_semicolons() {
        let err = anyhow::anyhow!("rules.toml:1: invalid string\nexpected `\"`\n");
        assert_eq!(error_line(&err), "rules.toml:1: invalid string; expected `\"`");
    }
}
