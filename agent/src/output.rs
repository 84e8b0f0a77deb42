//! Output files written whole: each file is written under a temporary name in its own folder
//! and renamed over its final name only once complete (`rename(2)` replaces it atomically on
//! the same file system). A full disk, a crash or Ctrl-C in the middle leaves the previous
//! file as it was, never a truncated one: `profiler report DIR/profile.json` renders into
//! the folder its input came from, and once truncated its input in place.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Writes `path` through `body` on a buffered writer: first to a temporary file beside it
/// (`.NAME.tmp-PID`), then renamed over `path`. On any error the temporary file is removed
/// and `path` is left untouched.
///
/// # Errors
/// The first I/O error of creating, writing, flushing or renaming.
pub fn write_replacing(path: &Path, body: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>) -> std::io::Result<()> {
    let tmp = temporary_beside(path);
    let result = File::create(&tmp).and_then(|file| {
        let mut w = BufWriter::new(file);
        body(&mut w)?;
        w.flush()?;
        let file = w.into_inner().map_err(|e| e.into_error())?;
        drop(file);
        std::fs::rename(&tmp, path)
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// [`write_replacing`] of a whole buffer.
///
/// # Errors
/// As [`write_replacing`].
pub fn write_bytes_replacing(path: impl AsRef<Path>, bytes: impl AsRef<[u8]>) -> std::io::Result<()> {
    write_replacing(path.as_ref(), |w| w.write_all(bytes.as_ref()))
}

fn temporary_beside(path: &Path) -> PathBuf {
    let name = path.file_name().map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

/// Checks an output folder before anything is collected, so that a run is not thrown away at
/// the end: creates `out` (and its parents) when missing, and writes and removes a file in it.
/// Returns the folder when this call created it ([`CreatedDir`]).
///
/// # Errors
/// `out` is a file ("it is a file, not a folder"), or the folder cannot be created or
/// written (permissions, read-only or full file system).
pub fn prepare_dir(out: &Path) -> std::io::Result<CreatedDir> {
    use std::io::{Error, ErrorKind};
    /// The error with what was being done in front of it, keeping its kind.
    fn context(what: &'static str) -> impl Fn(Error) -> Error {
        move |e| Error::new(e.kind(), format!("{what}: {e}"))
    }
    if out.exists() && !out.is_dir() {
        return Err(Error::new(ErrorKind::AlreadyExists, "it is a file, not a folder"));
    }
    let created = CreatedDir((!out.exists()).then(|| out.to_path_buf()));
    std::fs::create_dir_all(out).map_err(context("cannot create the folder"))?;
    let probe = out.join(format!(".profiler-write-check-{}", std::process::id()));
    write_bytes_replacing(&probe, b"").map_err(context("cannot create a file in it"))?;
    std::fs::remove_file(&probe).map_err(context("cannot remove a file from it"))?;
    Ok(created)
}

/// An output folder when [`prepare_dir`] created it, so that a run that fails or measures
/// nothing (the programs cannot be loaded: not root, no BTF; a bench stopped before its
/// first measurement) leaves no empty folder behind.
#[derive(Debug)]
pub struct CreatedDir(Option<PathBuf>);

impl CreatedDir {
    /// Removes the folder if [`prepare_dir`] created it and it is still empty (`remove_dir`
    /// never removes a folder with files).
    pub fn remove_if_empty(&self) {
        if let Some(dir) = &self.0 {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("profile.json");
        std::fs::write(&path, "old").unwrap();
        let err = write_replacing(&path, |w| {
            w.write_all(b"half of the new")?;
            Err(std::io::Error::other("disk full"))
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "disk full");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["profile.json"]);

        write_bytes_replacing(&path, "new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["profile.json"]);
    }
}
