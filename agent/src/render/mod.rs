//! Renderers: every file `profiler` writes for a profile, and the text summary.

use std::path::{Path, PathBuf};

use crate::profile::{self, Profile};

/// Why rendering failed.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The output directory could not be created.
    #[error("cannot create directory {}: {source}", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// `profile.json` could not be written.
    #[error(transparent)]
    Json(#[from] profile::json::JsonError),
}

/// Writes every rendered file into `out` (created when missing); returns their paths.
///
/// # Errors
/// [`RenderError`] when the directory or a file cannot be written.
pub fn write_all(profile: &Profile, out: &Path) -> Result<Vec<PathBuf>, RenderError> {
    std::fs::create_dir_all(out).map_err(|source| RenderError::CreateDir {
        path: out.to_path_buf(),
        source,
    })?;
    let json = out.join("profile.json");
    profile::json::write(profile, &json)?;
    Ok(vec![json])
}

/// A short text summary of `profile` for stdout.
pub fn summary(profile: &Profile) -> String {
    let samples: u64 = profile.on_cpu.iter().map(|c| c.count).sum();
    format!("target: {}\nsamples: {samples}\n", profile.meta.target)
}
