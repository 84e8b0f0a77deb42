//! `profile.json`: the canonical [`Profile`] serialized with serde_json.
//!
//! Shape: one JSON object, the fields of [`Profile`] plus a marker `"format": "profiler-profile"`
//! ([`FORMAT`]) so that a reader can tell a profile from any other JSON file. The reader checks,
//! in order: the file reads, it is JSON, it is an object carrying the marker, its
//! `schema_version` is not newer than [`SCHEMA_VERSION`], and only then decodes the fields.
//! Each failure is one [`JsonError`] variant with a one-line message.

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

use super::{Profile, SCHEMA_VERSION};

/// Value of the top-level `"format"` field of every `profile.json` this agent writes.
pub const FORMAT: &str = "profiler-profile";

/// Why a `profile.json` could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    /// The file could not be opened, read, created or written.
    #[error("{}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not JSON.
    #[error("{}: not JSON", path.display())]
    NotJson {
        /// The file.
        path: PathBuf,
        /// Parser error with line and column.
        #[source]
        source: serde_json::Error,
    },
    /// Valid JSON, but not a profile written by this agent (no `"format": "profiler-profile"`).
    #[error("{}: not a profiler profile.json ({what})", path.display())]
    WrongKind {
        /// The file.
        path: PathBuf,
        /// What was found instead, e.g. `a JSON array` or `"format" is "pprof"`.
        what: String,
    },
    /// A profile of a schema newer than this agent understands.
    #[error(
        "{}: profile schema version {found} is newer than the {supported} this profiler reads; use a newer profiler",
        path.display()
    )]
    FutureVersion {
        /// The file.
        path: PathBuf,
        /// `schema_version` in the file.
        found: u64,
        /// [`SCHEMA_VERSION`].
        supported: u32,
    },
    /// The marker and version are right but a field is missing or has the wrong type.
    #[error("{}: invalid profile.json", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Decoder error naming the field.
        #[source]
        source: serde_json::Error,
    },
    /// The fields decode but an index points outside its table (a stack's frame, a count's
    /// stack).
    #[error("{}: invalid profile.json: {what}", path.display())]
    BadIndex {
        /// The file.
        path: PathBuf,
        /// Which index, e.g. `stacks[3] refers to frame 90 of 12`.
        what: String,
    },
}

/// The first index of `profile` outside its table: a stack's frame or an on-CPU/off-CPU
/// count's stack; `None` when every index is in range.
pub fn bad_index(profile: &Profile) -> Option<String> {
    let frames = profile.frames.len();
    for (i, s) in profile.stacks.iter().enumerate() {
        if let Some(f) = s.frames.iter().find(|&&f| f as usize >= frames) {
            return Some(format!("stacks[{i}] refers to frame {f} of {frames}"));
        }
    }
    let stacks = profile.stacks.len();
    for (name, counts) in [("on_cpu", &profile.on_cpu), ("off_cpu", &profile.off_cpu)] {
        if let Some((i, c)) = counts.iter().enumerate().find(|(_, c)| c.stack as usize >= stacks) {
            return Some(format!("{name}[{i}] refers to stack {} of {stacks}", c.stack));
        }
    }
    None
}

/// Reads and validates a `profile.json`.
///
/// # Errors
/// [`JsonError::Io`] when the file cannot be read; [`JsonError::NotJson`],
/// [`JsonError::WrongKind`], [`JsonError::FutureVersion`] or [`JsonError::Invalid`] for its
/// content (see [`from_slice`]).
pub fn read(path: &Path) -> Result<Profile, JsonError> {
    let io = |source| JsonError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut bytes = Vec::new();
    BufReader::new(File::open(path).map_err(io)?)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    from_slice(&bytes, path)
}

/// Decodes a `profile.json` from memory; `path` is only used in error messages.
///
/// # Errors
/// See [`read`]; never [`JsonError::Io`].
pub fn from_slice(bytes: &[u8], path: &Path) -> Result<Profile, JsonError> {
    let path = path.to_path_buf();
    let value: serde_json::Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(source) => return Err(JsonError::NotJson { path, source }),
    };
    let object = match &value {
        serde_json::Value::Object(map) => map,
        other => {
            let what = match other {
                serde_json::Value::Array(_) => "a JSON array",
                serde_json::Value::String(_) => "a JSON string",
                serde_json::Value::Number(_) => "a JSON number",
                serde_json::Value::Bool(_) => "a JSON boolean",
                _ => "JSON null",
            };
            return Err(JsonError::WrongKind {
                path,
                what: format!("{what}, expected an object"),
            });
        }
    };
    match object.get("format") {
        Some(serde_json::Value::String(s)) if s == FORMAT => {}
        Some(other) => {
            return Err(JsonError::WrongKind {
                path,
                what: format!("\"format\" is {other}, expected \"{FORMAT}\""),
            })
        }
        None => {
            return Err(JsonError::WrongKind {
                path,
                what: format!("no \"format\": \"{FORMAT}\" field"),
            })
        }
    }
    if let Some(found) = object.get("schema_version").and_then(|v| v.as_u64()) {
        if found > u64::from(SCHEMA_VERSION) {
            return Err(JsonError::FutureVersion {
                path,
                found,
                supported: SCHEMA_VERSION,
            });
        }
    }
    let profile: Profile = serde_json::from_value(value).map_err(|source| JsonError::Invalid { path: path.clone(), source })?;
    if let Some(what) = bad_index(&profile).or_else(|| impossible(&profile)) {
        return Err(JsonError::BadIndex { path, what });
    }
    Ok(profile)
}

/// What makes a profile one no run can give, if anything: schema version 0 (versions start at
/// 1), or samples or waits over a run of no length or on no CPU (every figure per second or per
/// CPU would divide by zero).
pub fn impossible(profile: &Profile) -> Option<String> {
    if profile.schema_version == 0 {
        return Some("schema_version 0: profile.json versions start at 1".into());
    }
    let recorded = profile.on_cpu.iter().any(|c| c.count > 0) || profile.off_cpu.iter().any(|c| c.count > 0);
    if recorded && profile.meta.duration_ns == 0 {
        return Some("meta.duration_ns is 0, but the profile has samples: a run that recorded them lasted some time".into());
    }
    if recorded && profile.meta.cpus == 0 {
        return Some("meta.cpus is 0, but the profile has samples: they were taken on some CPU".into());
    }
    None
}

/// Encodes `profile` as `profile.json` text (pretty-printed, keys sorted, `schema_version` set to
/// [`SCHEMA_VERSION`], plus the `"format"` marker).
pub fn to_vec(profile: &Profile) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(&to_object(profile))
        .expect("a serde_json::Value always serializes");
    bytes.push(b'\n');
    bytes
}

/// The JSON object [`to_vec`] prints: the profile's fields, `schema_version` and `"format"`.
fn to_object(profile: &Profile) -> serde_json::Value {
    let mut value = match serde_json::to_value(profile) {
        Ok(serde_json::Value::Object(map)) => map,
        // Profile is a plain struct of strings, numbers and vectors: serde_json cannot fail
        // on it and always yields an object.
        _ => unreachable!("Profile serializes to a JSON object"),
    };
    value.insert("schema_version".into(), SCHEMA_VERSION.into());
    let mut out = serde_json::Map::new();
    out.insert("format".into(), FORMAT.into());
    out.extend(value);
    serde_json::Value::Object(out)
}

/// Writes `profile` to `path`, whole ([`crate::output::write_replacing`]: an earlier file
/// there is replaced only once the new one is complete). See [`to_vec`] for the content.
///
/// # Errors
/// [`JsonError::Io`] when the file cannot be created or written.
pub fn write(profile: &Profile, path: &Path) -> Result<(), JsonError> {
    // Straight into the file: the text of a large profile is not held in memory as well.
    crate::output::write_replacing(path, |file| {
        serde_json::to_writer_pretty(&mut *file, &to_object(profile))?;
        file.write_all(b"\n")
    })
    .map_err(|source| JsonError::Io { path: path.to_path_buf(), source })
}
