//! How the `profiler` binary reports the errors of the library calls it makes: they return
//! `anyhow` errors with `.context()`; `main` prints [`error_line`] of the error and exits 2, or
//! 0 for [`is_broken_pipe`].

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
/// causes, outermost first, each once; see [`profiler::error_chain_line`].
pub fn error_line(err: &anyhow::Error) -> String {
    profiler::error_chain_line(err.as_ref())
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
