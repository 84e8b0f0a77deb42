//! Importers: one side of a diff from any input `profiler diff` takes.
//!
//! [`load`] looks at the path and its first bytes and picks the reader:
//!
//! | input | how it is recognized | what a side gets |
//! |---|---|---|
//! | bench output folder | a folder with `results.json` (or that file itself) | one [`TestSide`] per test: its measured runs from `results.json`, its profile from `<test>/profile.json` (or `profile.json.gz`), requests = the wire capture's count over the profile (`<test>/ranking.json`, else the profile's wire summary), else wrk's count of the profiled run |
//! | attach output folder | a folder with `profile.json` or `profile.json.gz` (a bench test's folder too) | one unnamed test; requests from its `ranking.json` (`requests`) or the profile's wire capture; measured runs from its `runs.json` when it has one ([`RUNS_FORMAT`], written by `scripts/profile-pr`) |
//! | `profile.json` | JSON with `"format": "profiler-profile"` (gzip-compressed too) | as an attach folder |
//! | pprof | gzip-compressed or plain `perftools.profiles.Profile` protobuf (google/pprof `proto/profile.proto`, decoded with the `pprof` crate's prost types) | on-CPU stacks; sample value `samples` (else the default sample type, else the first); frequency from a `cpu/nanoseconds` period |
//! | `perf script` text | inferno's perf collapser says it applies (an event line followed by a stack line); every other line must be one it parses (it would skip it with a warning) | stacks folded by `inferno::collapse::perf` (comm first), one sample per event (the period column is dropped: inferno would weigh by it) |
//! | folded stacks | text whose every non-blank line is `frame;frame;... COUNT`: UTF-8, every frame named | stacks as written (first element included as a frame) |
//!
//! Text is told from pprof by its first 4,096 characters (no control characters but line
//! breaks and tabs); see [`from_bytes`].
//!
//! Every input becomes a [`Profile`], so one code path ranks and compares them. Frames named
//! `..._[k]` become kernel frames and `..._[i]` inlined frames (the folded-stack conventions of
//! [`crate::profile::folded`]), so a folded file written by `profiler` reads back to the same
//! names. Files are read whole, at most [`MAX_INPUT_BYTES`] (gzip: decompressed).
//!
//! Numbers are checked on import, and an input that fails is refused with one line naming
//! the file and the field ([`ImportError::Invalid`]): totals of counts summed with
//! `checked_add` up to [`MAX_TOTAL`], counts the run could not have made
//! ([`check_counts`]), sampling frequencies from 1 to [`MAX_FREQUENCY_HZ`], schema versions
//! from 1, and the wrk figures of `results.json` (throughput, requests, latency, CPU time)
//! within the bounds documented on [`MAX_REQ_PER_S`] and [`MAX_LATENCY_US`].

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::profile::{self, Frame, FrameKind, Profile, Stack, StackCount};

/// Largest input read (after gzip decompression), bytes: 1 GiB.
pub const MAX_INPUT_BYTES: u64 = 1 << 30;

/// Largest total of any count in one profile (on-CPU samples, off-CPU waits, syscalls, HTTP
/// requests, database round trips, statement executions), summed with `checked_add`: 2^53.
/// The figures of a diff are computed in `f64`, exact for whole numbers up to 2^53; and no
/// profile comes near it: 1,024 CPUs sampled at [`MAX_FREQUENCY_HZ`] for a day are 8.8e13
/// samples. Every sum the comparison and the ranking make is over a part of one of these
/// totals, so none of them can wrap. (Nanosecond totals, off-CPU and syscall time, must only
/// fit in a `u64`: 2^53 ns is 104 days, which a thousand waiting threads pass in three hours.)
pub const MAX_TOTAL: u64 = 1 << 53;

/// Highest sampling frequency a profile may record, Hz: 1 MHz, a sample every microsecond.
/// The kernel caps perf sampling at `kernel.perf_event_max_sample_rate` (100 kHz by default);
/// beyond 1 MHz the sampling interrupts alone would take the CPU. `profile.json` files must
/// record a frequency from 1 to this (imported stacks without one are compared per sample).
pub const MAX_FREQUENCY_HZ: u64 = 1_000_000;

/// On-CPU samples a profile may hold per CPU, per second, per Hz of its frequency: 2. Each
/// CPU is sampled at most once per period; twice that leaves room for the run's edges.
pub const MAX_SAMPLES_PER_PERIOD: f64 = 2.0;

/// Most events (syscalls, off-CPU waits, HTTP requests, database round trips) a profile may
/// count per CPU-second of its run: 1e8, one every 10 ns. Each of them is or needs a
/// syscall, and the cheapest syscall costs some 50-100 ns on current x86 (kernel entry and
/// exit alone), so no run comes within 5x of this.
pub const MAX_EVENTS_PER_CPU_SECOND: f64 = 1e8;

/// Highest throughput a `results.json` run may report, req/s: 1e8. The fastest HTTP servers
/// answer a few million requests per second on one machine (pipelined plaintext in
/// TechEmpower's benchmarks, about 7 million), and a bench here does a few thousand: 1e8 is
/// over 10x beyond anything wrk can measure.
pub const MAX_REQ_PER_S: f64 = 1e8;

/// Longest latency a `results.json` run may report, µs: one hour. wrk counts a request slower
/// than its `--timeout` (2 s by default) as a timeout, and a bench run lasts seconds to
/// minutes.
pub const MAX_LATENCY_US: f64 = 3.6e9;

/// Largest factor from the syscall counts seen in windows to the run's
/// ([`profile::Meta::syscall_scale`]): 1,000. The agent attaches the counters for 1-100% of
/// each second (`--syscalls-duty`), a factor of at most about 100; ten times that allows for
/// a short run's edges.
pub const MAX_SYSCALL_SCALE: f64 = 1000.0;

/// What kind of input a side was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    /// A `profiler bench` output folder (`results.json` + one folder per test).
    Bench,
    /// A `profiler attach` output folder (`profile.json`, `ranking.json`, ...).
    Attach,
    /// A `profile.json` file.
    ProfileJson,
    /// A pprof protobuf (`profile.pb.gz`).
    Pprof,
    /// `perf script` output.
    PerfScript,
    /// Folded stacks.
    Folded,
}

impl InputKind {
    /// A short name for reports, e.g. `bench output`.
    pub fn describe(self) -> &'static str {
        match self {
            InputKind::Bench => "bench output",
            InputKind::Attach => "attach output",
            InputKind::ProfileJson => "profile.json",
            InputKind::Pprof => "pprof",
            InputKind::PerfScript => "perf script",
            InputKind::Folded => "folded stacks",
        }
    }
}

/// Figures of one measured (unprofiled) run: a bench's, or one of a `runs.json`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct RunFigures {
    /// Throughput, req/s (wrk).
    pub req_per_s: f64,
    /// Latency p50, µs (wrk).
    pub p50_us: f64,
    /// Latency p99, µs (wrk).
    pub p99_us: f64,
    /// CPU the app used per request, µs: its `/proc` CPU time over the run / wrk's requests.
    pub cpu_us_per_request: Option<f64>,
    /// CPU the database's processes used per request, µs (`/proc`, the same way), when the
    /// bench measured them.
    pub db_cpu_us_per_request: Option<f64>,
}

/// One test of one side: its profile and, from a bench, its measured runs.
#[derive(Debug, Clone)]
pub struct TestSide {
    /// The bench test name (`deals-create`), or `""` for a single profile.
    pub name: String,
    /// The profile (the bench's profiled run), `None` when the bench did not profile the test.
    pub profile: Option<Profile>,
    /// HTTP requests the profile covers, when known (wrk's count, or the wire capture's).
    pub requests: Option<u64>,
    /// Where `requests` came from: `wrk`, `ranking.json`, `wire`.
    pub requests_source: Option<&'static str>,
    /// Measured runs (a bench's, or an attach output's `runs.json`), in order.
    pub runs: Vec<RunFigures>,
    /// Why the bench has no profile for this test, when it says.
    pub profile_error: Option<String>,
}

/// One side of a diff (BASE or HEAD).
#[derive(Debug, Clone)]
pub struct Side {
    /// The path as given.
    pub path: PathBuf,
    /// What it was read as.
    pub kind: InputKind,
    /// The target as recorded (`container navree`), or the file name for imported stacks.
    pub target: String,
    /// Executable names of the target's processes (file names of `/proc/PID/exe`), when known.
    pub executables: Vec<String>,
    /// `CRM_COSTS` of a bench run.
    pub costs: Option<String>,
    /// Tests, in order; exactly one for every kind but [`InputKind::Bench`].
    pub tests: Vec<TestSide>,
}

/// Why a side could not be read. Every message is one line naming the path, complete in
/// itself: no variant has a [`std::error::Error::source`], so printing the chain (`{:#}`)
/// does not repeat a cause already written into the message.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The path could not be read.
    #[error("{}: {error}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
    /// A `profile.json` the profile reader refused (wrong kind, future schema, invalid): its
    /// message with its causes (the parser's line and column).
    #[error("{}", crate::error_chain_line(.0))]
    Profile(profile::json::JsonError),
    /// Not an input `profiler diff` reads.
    #[error("{}: {what}", path.display())]
    WrongKind {
        /// The path.
        path: PathBuf,
        /// What was found, and what was expected.
        what: String,
    },
    /// A file of a schema newer than this profiler reads.
    #[error("{}: {file} schema version {found} is newer than the {supported} this profiler reads; use a newer profiler", path.display())]
    FutureVersion {
        /// The path.
        path: PathBuf,
        /// The file kind (`results.json`).
        file: &'static str,
        /// The version in the file.
        found: u64,
        /// The newest version this profiler reads.
        supported: u64,
    },
    /// The right kind of file, but its content is broken or implausible (a count or figure
    /// out of range: see [`MAX_TOTAL`] and the other bounds of this module).
    #[error("{}: invalid {file}: {detail}", path.display())]
    Invalid {
        /// The path.
        path: PathBuf,
        /// The file kind.
        file: &'static str,
        /// What is wrong, naming the field (`on_cpu[3].count`, `tests[0].runs[1].wrk.requests`)
        /// or the line.
        detail: String,
    },
    /// A profile without any on-CPU sample.
    #[error("{}: empty profile (no on-CPU samples)", path.display())]
    Empty {
        /// The path.
        path: PathBuf,
    },
}

impl From<profile::json::JsonError> for ImportError {
    fn from(e: profile::json::JsonError) -> Self {
        ImportError::Profile(e)
    }
}


/// Reads one side of a diff from `path` (see the [module docs](self) for what is accepted).
///
/// # Errors
/// [`ImportError`] with one line naming the file: unreadable, not a supported kind, a schema
/// from the future, invalid content, or a profile with no on-CPU sample.
pub fn load(path: &Path) -> Result<Side, ImportError> {
    let io = |error| ImportError::Io { path: path.to_path_buf(), error };
    let meta = std::fs::metadata(path).map_err(io)?;
    if meta.is_dir() {
        if path.join("results.json").is_file() {
            return load_bench(path);
        }
        if profile_in(path).is_file() {
            return load_attach(path);
        }
        return Err(ImportError::WrongKind {
            path: path.to_path_buf(),
            what: "a folder with neither results.json (bench output) nor profile.json or profile.json.gz (attach output)".into(),
        });
    }
    let bytes = read_bounded(path)?;
    if path.file_name().is_some_and(|n| n == "results.json") {
        return load_bench(path.parent().unwrap_or(Path::new(".")));
    }
    from_bytes(&bytes, path)
}

/// Reads a file, gunzipping it when it starts with the gzip magic, up to [`MAX_INPUT_BYTES`].
fn read_bounded(path: &Path) -> Result<Vec<u8>, ImportError> {
    let io = |error| ImportError::Io { path: path.to_path_buf(), error };
    let mut raw = Vec::new();
    std::fs::File::open(path).map_err(io)?.take(MAX_INPUT_BYTES + 1).read_to_end(&mut raw).map_err(io)?;
    if raw.len() as u64 > MAX_INPUT_BYTES {
        return Err(ImportError::WrongKind { path: path.to_path_buf(), what: format!("larger than {MAX_INPUT_BYTES} bytes") });
    }
    gunzip_if_gzip(&raw, path)
}

fn gunzip_if_gzip(raw: &[u8], path: &Path) -> Result<Vec<u8>, ImportError> {
    if !raw.starts_with(&[0x1f, 0x8b]) {
        return Ok(raw.to_vec());
    }
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(raw).take(MAX_INPUT_BYTES + 1).read_to_end(&mut out).map_err(|e| ImportError::Invalid {
        path: path.to_path_buf(),
        file: "gzip file",
        detail: e.to_string(),
    })?;
    if out.len() as u64 > MAX_INPUT_BYTES {
        return Err(ImportError::WrongKind { path: path.to_path_buf(), what: format!("decompresses to more than {MAX_INPUT_BYTES} bytes") });
    }
    Ok(out)
}

/// Reads one side from the bytes of a single file (`path` only names it in errors): a
/// `profile.json`, pprof, `perf script` text or folded stacks, gzip-compressed or not.
///
/// Which: JSON when the first non-blank byte is `{` or `[` (unless it does not parse as JSON
/// and its first line is a folded stack, such as `[unknown];main 3`); text (`perf script` or
/// folded stacks) when the start of the file is text; pprof otherwise. A text file with a line
/// that is not UTF-8 is still read as text (and refused naming that line), unless the whole
/// file decodes as a pprof protobuf.
///
/// # Errors
/// See [`load`].
pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Side, ImportError> {
    let bytes = gunzip_if_gzip(bytes, path)?;
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace()).copied();
    let lossy = String::from_utf8_lossy(&bytes);
    let text_start = looks_like_text(&lossy);
    let (kind, profile) = match first {
        None => return Err(ImportError::Empty { path: path.to_path_buf() }),
        Some(b'{') | Some(b'[') => {
            // A `.json` file is JSON, whatever its first line looks like: a truncated
            // `{"meta": 3` would otherwise read as a folded stack of 3 samples.
            if !named_json(path) && text_start && first_line_is_folded(&lossy) && serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).is_err() {
                text_profile(&bytes, path)?
            } else {
                (InputKind::ProfileJson, json_profile(&bytes, path)?)
            }
        }
        _ if text_start && (std::str::from_utf8(&bytes).is_ok() || !is_pprof(&bytes)) => text_profile(&bytes, path)?,
        _ => (InputKind::Pprof, pprof_profile(&bytes, path)?),
    };
    single(path, kind, profile, None, None)
}

/// True when the file's name ends in `.json` or `.json.gz`.
fn named_json(path: &Path) -> bool {
    let name = path.file_name().map(|n| n.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
    name.ends_with(".json") || name.ends_with(".json.gz")
}

/// True when the first 4,096 characters hold no control character but line breaks and tabs
/// (a protobuf has them in its first bytes: field tags and lengths).
fn looks_like_text(text: &str) -> bool {
    !text.chars().take(4096).any(|c| c.is_control() && !c.is_whitespace())
}

/// True when the first non-blank line ends in ` COUNT`, as a folded stack does.
fn first_line_is_folded(text: &str) -> bool {
    text.lines()
        .map(str::trim_end)
        .find(|l| !l.is_empty())
        .and_then(|l| l.rsplit_once(' '))
        .is_some_and(|(stack, count)| !stack.trim().is_empty() && !count.is_empty() && count.bytes().all(|b| b.is_ascii_digit()))
}

/// True when `bytes` decode as a pprof protobuf with a string table and a sample type.
fn is_pprof(bytes: &[u8]) -> bool {
    use pprof::protos::Message;
    pprof::protos::Profile::decode(bytes).is_ok_and(|p| p.string_table.first().is_some_and(String::is_empty) && !p.sample_type.is_empty())
}

fn json_profile(bytes: &[u8], path: &Path) -> Result<Profile, ImportError> {
    // A JSON file of another kind we know: say what it is.
    if let Ok(serde_json::Value::Object(map)) = serde_json::from_slice::<serde_json::Value>(bytes) {
        if map.contains_key("tests") && map.contains_key("settings") && !map.contains_key("format") {
            return Err(ImportError::WrongKind {
                path: path.to_path_buf(),
                what: "a bench results.json under another name: pass its folder".into(),
            });
        }
        if map.contains_key("layers") && map.contains_key("costs") && !map.contains_key("format") {
            return Err(ImportError::WrongKind {
                path: path.to_path_buf(),
                what: "a ranking.json: pass the folder with its profile.json".into(),
            });
        }
    }
    Ok(profile::json::from_slice(bytes, path)?)
}

/// `perf script` text or folded stacks. `perf script` is recognized by inferno's perf
/// collapser (an event line followed by a stack line) on the text decoded lossily (perf
/// writes command names as the kernel has them, in any encoding); folded stacks must be UTF-8.
fn text_profile(bytes: &[u8], path: &Path) -> Result<(InputKind, Profile), ImportError> {
    use inferno::collapse::Collapse;
    let text = String::from_utf8_lossy(bytes);
    let mut options = inferno::collapse::perf::Options::default();
    options.nthreads = 1;
    // `_[k]` on kernel frames, the folded-stack convention this reader turns into kernel frames.
    options.annotate_kernel = true;
    let mut perf = inferno::collapse::perf::Folder::from(options);
    if perf.is_applicable(&text) != Some(true) {
        return Ok((InputKind::Folded, folded_profile(bytes, path, Folded::File)?));
    }
    let invalid = |detail: String| ImportError::Invalid { path: path.to_path_buf(), file: "perf script output", detail };
    // inferno weighs each event by its period column (ns for cpu-clock); without it each
    // event counts 1, so that the weights are samples as in every other input. These lines
    // (escaped, see escape_non_ascii) are what inferno reads, line for line.
    let period = regex::Regex::new(r"^(\S.*?\d+\.\d+:)\s+\d+\s+(\S+:)").expect("static regex");
    let escaped = escape_non_ascii(&text);
    let lines: Vec<std::borrow::Cow<'_, str>> =
        escaped.lines().map(|l| if l.starts_with('\t') { std::borrow::Cow::Borrowed(l) } else { period.replace(l, "$1 $2") }).collect();
    // inferno skips a line it cannot parse with a warning on stderr and goes on: a file with
    // such lines is refused here instead, before inferno sees it.
    let weird = perf_weird_lines(lines.iter().map(|l| l.as_ref()));
    if let Some(&line) = weird.first() {
        let more = match weird.len() {
            1 => String::new(),
            2 => " (and 1 more line like it)".to_string(),
            n => format!(" (and {} more lines like it)", n - 1),
        };
        let content = text.lines().nth(line - 1).unwrap_or("").trim_end();
        return Err(invalid(format!(
            "line {line}: `{}` is neither an event line (`COMMAND PID TIME: EVENT:`) nor a stack line (`ADDRESS SYMBOL (MODULE)`){more}",
            shown(content, 60)
        )));
    }
    // Lines before the first event are left out: inferno asserts that the first stack it
    // reads names the event type, and panics when a blank line comes first.
    let mut text = String::with_capacity(escaped.len());
    for l in lines.iter().skip_while(|l| l.starts_with('#') || l.trim().is_empty()) {
        text.push_str(l);
        text.push('\n');
    }
    let mut folded = Vec::new();
    perf.collapse(text.as_bytes(), &mut folded).map_err(|e| invalid(e.to_string()))?;
    Ok((InputKind::PerfScript, folded_profile(&folded, path, Folded::FromPerf)?))
}

/// Lines of `perf script` text that inferno's perf collapser would skip with a "Weird event
/// line" or "Weird stack line" warning, by number from 1. Follows the
/// collapser's reading: `#` comments and blank lines between events; the first line of an
/// event is its event line (a word after the first that is a number, or `PID/TID`, followed by
/// a space, then `TIME: EVENT:`; without the colon inferno takes no event type, and panics
/// when that is the first event), which may carry a one-frame stack after the event name; the
/// following lines are stack lines (`ADDRESS SYMBOL (MODULE)`, the module in parentheses).
/// After a line that is no event line, the next line is read as an event line again. `lines`
/// are the lines inferno reads (without their period column).
fn perf_weird_lines<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<usize> {
    let mut weird = Vec::new();
    let mut in_event = false;
    for (i, line) in lines.enumerate() {
        if line.starts_with('#') {
            continue;
        }
        let line = line.trim_end();
        if line.is_empty() {
            in_event = false;
        } else if in_event {
            if !perf_stack_line(line) {
                weird.push(i + 1);
            }
        } else if let Some(end) = perf_event_line_end(line).filter(|&end| line[end..].contains(':')) {
            // An event line with its (one-frame) stack after `EVENT:` ends the event.
            let after_event = line[end..].splitn(3, ':').nth(2).unwrap_or("");
            let after_event = after_event.find([':', ' ']).map_or(after_event, |i| &after_event[i + 1..]).trim();
            in_event = after_event.is_empty();
            if !in_event && !perf_stack_line(after_event) {
                weird.push(i + 1);
            }
        } else {
            weird.push(i + 1);
        }
    }
    weird
}

/// `text` with every non-ASCII character and `\` written as `\u{HEX}` ([`unescape_non_ascii`]
/// undoes it). inferno's perf collapser slices a symbol's last 17 bytes (its check for a Rust
/// hash) and panics when they start inside a multi-byte character (`serde_jsoé::de::from_slice`);
/// in ASCII every byte is a character.
fn escape_non_ascii(text: &str) -> std::borrow::Cow<'_, str> {
    if text.bytes().all(|b| b.is_ascii() && b != b'\\') {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for c in text.chars() {
        if c.is_ascii() && c != '\\' {
            out.push(c);
        } else {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Undoes [`escape_non_ascii`] in a frame name inferno wrote.
fn unescape_non_ascii(name: &str) -> std::borrow::Cow<'_, str> {
    if !name.contains('\\') {
        return std::borrow::Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        let decoded = after
            .strip_prefix("\\u{")
            .and_then(|a| a.split_once('}'))
            .and_then(|(hex, tail)| u32::from_str_radix(hex, 16).ok().and_then(char::from_u32).map(|c| (c, tail)));
        match decoded {
            Some((c, tail)) => {
                out.push(c);
                rest = tail;
            }
            None => {
                out.push('\\');
                rest = &after[1..];
            }
        }
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
}

/// Where the `PID` (or `PID/TID`) word of a `perf script` event line ends (after its space),
/// when the line is one: a word other than the first, of digits and `/`, followed by a space.
fn perf_event_line_end(line: &str) -> Option<usize> {
    let mut offset = 0;
    let words: Vec<&str> = line.split(' ').collect();
    for (i, w) in words.iter().enumerate() {
        let end = offset + w.len();
        if i > 0 && i + 1 < words.len() && !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit() || b == b'/') {
            return Some(end + 1);
        }
        offset = end + 1;
    }
    None
}

/// True when `line` is a `perf script` stack line: `ADDRESS SYMBOL (MODULE)`.
fn perf_stack_line(line: &str) -> bool {
    let Some((_, rest)) = line.trim_start().split_once(' ') else { return false };
    let Some((_, module)) = rest.rsplit_once(' ') else { return false };
    module.len() >= 2 && module.starts_with('(') && module.ends_with(')')
}

/// Where folded stacks come from, for the wording of errors.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Folded {
    /// A folded-stacks file: its line numbers are the user's.
    File,
    /// inferno's collapse of `perf script` text: a line is a collapsed stack.
    FromPerf,
}

/// Parses folded stacks (`a;b;c 12` per line) into a profile: one on-CPU [`StackCount`] per
/// line, frames root first, no thread name. Blank lines are skipped; a line that is not UTF-8,
/// has no count, an empty frame name (`a;;b 3`, `;;; 12`) or takes the sum of the counts past
/// [`MAX_TOTAL`] is refused with its number.
fn folded_profile(bytes: &[u8], path: &Path, from: Folded) -> Result<Profile, ImportError> {
    let mut builder = Builder::default();
    let mut total: u64 = 0;
    for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
        let n = i + 1;
        // Before the first stack, a bad line may mean the file is of another kind; after it,
        // the file is folded stacks with a bad line.
        let bad = |detail: String| match from {
            Folded::File if builder.profile.on_cpu.is_empty() => {
                ImportError::WrongKind { path: path.to_path_buf(), what: format!("not profile.json, pprof, perf script or folded stacks: line {n}: {detail}") }
            }
            Folded::File => ImportError::Invalid { path: path.to_path_buf(), file: "folded stacks", detail: format!("line {n}: {detail}") },
            Folded::FromPerf => ImportError::Invalid { path: path.to_path_buf(), file: "perf script output", detail: format!("collapsed stack {n}: {detail}") },
        };
        let line = match std::str::from_utf8(line) {
            Ok(l) => l,
            Err(e) => {
                let at = e.valid_up_to();
                return Err(bad(format!("not UTF-8 text (byte 0x{:02x} at column {})", line[at], at + 1)));
            }
        };
        let line = line.trim_end();
        if line.trim_start().is_empty() {
            continue;
        }
        let (stack, count) = line.rsplit_once(' ').ok_or_else(|| bad(format!("`{}` is no `stack count` pair", shown(line, 40))))?;
        let count: u64 = count.parse().map_err(|_| bad(format!("`{}` is not a sample count", shown(count, 40))))?;
        let stack = stack.trim_end();
        if stack.is_empty() {
            return Err(bad("empty stack".into()));
        }
        let names: Vec<&str> = stack.split(';').collect();
        if let Some(k) = names.iter().position(|f| f.trim().is_empty()) {
            return Err(bad(format!("frame {} of `{}` has no name", k + 1, shown(stack, 60))));
        }
        total = total
            .checked_add(count)
            .filter(|&t| t <= MAX_TOTAL)
            .ok_or_else(|| bad(format!("sample count {count} takes the file's total past {MAX_TOTAL} (2^53), more than any profile holds")))?;
        let frames = match from {
            Folded::File => names.into_iter().map(frame_from_folded).collect(),
            Folded::FromPerf => names.into_iter().map(|n| frame_from_folded(&unescape_non_ascii(n))).collect(),
        };
        builder.add(frames, String::new(), count);
    }
    Ok(builder.finish())
}

/// `s` cut to `n` characters, control characters escaped (an error message stays one line).
fn shown(s: &str, n: usize) -> String {
    let mut out = String::new();
    for c in s.chars().take(n) {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    if s.chars().count() > n {
        out.push('…');
    }
    out
}

fn frame_from_folded(name: &str) -> Frame {
    let (function, kind, inlined) = if let Some(n) = name.strip_suffix("_[k]") {
        (n, FrameKind::Kernel, false)
    } else if let Some(n) = name.strip_suffix("_[i]") {
        (n, FrameKind::User, true)
    } else {
        (name, FrameKind::User, false)
    };
    Frame {
        function: function.to_string(),
        module: if kind == FrameKind::Kernel { "[kernel]".into() } else { String::new() },
        kind,
        inlined,
        file: None,
        line: None,
    }
}

/// Interns frames and stacks into a [`Profile`].
#[derive(Default)]
struct Builder {
    profile: Profile,
    frames: HashMap<Frame, u32>,
    stacks: HashMap<Vec<u32>, u32>,
}

impl Builder {
    fn add(&mut self, frames: Vec<Frame>, thread: String, count: u64) {
        let mut ids = Vec::with_capacity(frames.len());
        for f in frames {
            let next = self.profile.frames.len() as u32;
            let id = *self.frames.entry(f.clone()).or_insert_with(|| {
                self.profile.frames.push(f);
                next
            });
            ids.push(id);
        }
        let next = self.profile.stacks.len() as u32;
        let stack = *self.stacks.entry(ids.clone()).or_insert_with(|| {
            self.profile.stacks.push(Stack { frames: ids, truncated: false });
            next
        });
        self.profile.on_cpu.push(StackCount { pid: 0, tid: 0, thread, stack, count, total_ns: 0, endpoints: Vec::new() });
    }

    fn finish(mut self) -> Profile {
        self.profile.schema_version = profile::SCHEMA_VERSION;
        self.profile
    }
}

/// Decodes a pprof protobuf into a profile (see the [module docs](self)).
fn pprof_profile(bytes: &[u8], path: &Path) -> Result<Profile, ImportError> {
    use pprof::protos::Message;
    let wrong = |what: String| ImportError::WrongKind { path: path.to_path_buf(), what };
    let p = pprof::protos::Profile::decode(bytes)
        .map_err(|e| wrong(format!("not profile.json, pprof, perf script or folded stacks (as protobuf: {e})")))?;
    let st = &p.string_table;
    if st.first().map(String::as_str) != Some("") || p.sample_type.is_empty() {
        return Err(wrong("not profile.json, pprof, perf script or folded stacks (no pprof string table or sample type)".into()));
    }
    let s = |i: i64| -> Option<&str> { usize::try_from(i).ok().and_then(|i| st.get(i)).map(String::as_str) };
    let invalid = |detail: String| ImportError::Invalid { path: path.to_path_buf(), file: "pprof profile", detail };
    let value_index = p
        .sample_type
        .iter()
        .position(|t| s(t.ty) == Some("samples"))
        .or_else(|| (p.default_sample_type != 0).then(|| p.sample_type.iter().position(|t| t.ty == p.default_sample_type)).flatten())
        .unwrap_or(0);
    let functions: HashMap<u64, &pprof::protos::Function> = p.function.iter().map(|f| (f.id, f)).collect();
    let mappings: HashMap<u64, &pprof::protos::Mapping> = p.mapping.iter().map(|m| (m.id, m)).collect();
    let locations: HashMap<u64, &pprof::protos::Location> = p.location.iter().map(|l| (l.id, l)).collect();
    let label_thread = st.iter().position(|x| x == "thread").map(|i| i as i64);
    let mut builder = Builder::default();
    let mut total: u64 = 0;
    for (i, sample) in p.sample.iter().enumerate() {
        let Some(&value) = sample.value.get(value_index) else {
            return Err(invalid(format!("a sample has {} values for {} sample types", sample.value.len(), p.sample_type.len())));
        };
        if value <= 0 {
            continue;
        }
        total = total.checked_add(value.unsigned_abs()).filter(|&t| t <= MAX_TOTAL).ok_or_else(|| {
            invalid(format!("sample[{i}].value[{value_index}] {value} takes the samples' total past {MAX_TOTAL} (2^53), more than any profile holds"))
        })?;
        let mut frames = Vec::new();
        // location_id is leaf first; a location's lines are innermost first.
        for id in sample.location_id.iter().rev() {
            let loc = locations.get(id).ok_or_else(|| invalid(format!("sample refers to missing location {id}")))?;
            let module = mappings.get(&loc.mapping_id).and_then(|m| s(m.filename)).unwrap_or("");
            let module = Path::new(module).file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned());
            let kernel = module.starts_with("[kernel");
            if loc.line.is_empty() {
                frames.push(Frame {
                    function: format!("0x{:x}", loc.address),
                    module: module.clone(),
                    kind: if kernel { FrameKind::Kernel } else { FrameKind::User },
                    inlined: false,
                    file: None,
                    line: None,
                });
            }
            for (i, line) in loc.line.iter().rev().enumerate() {
                let f = functions.get(&line.function_id).ok_or_else(|| invalid(format!("line refers to missing function {}", line.function_id)))?;
                let name = s(f.name).ok_or_else(|| invalid(format!("function {} has no name in the string table", f.id)))?;
                frames.push(Frame {
                    function: if name.is_empty() { "[unknown]".into() } else { name.to_string() },
                    module: module.clone(),
                    kind: if kernel { FrameKind::Kernel } else { FrameKind::User },
                    inlined: i > 0,
                    file: s(f.filename).filter(|x| !x.is_empty()).map(str::to_string),
                    line: u32::try_from(line.line).ok().filter(|&l| l > 0),
                });
            }
        }
        let thread = sample
            .label
            .iter()
            .find(|l| Some(l.key) == label_thread)
            .and_then(|l| s(l.str))
            .unwrap_or("")
            .to_string();
        builder.add(frames, thread, value as u64);
    }
    let mut profile = builder.finish();
    let period_is_cpu_ns = p.period_type.as_ref().is_some_and(|t| s(t.ty) == Some("cpu") && s(t.unit) == Some("nanoseconds"));
    if period_is_cpu_ns && p.period > 0 {
        let hz = (1e9 / p.period as f64).round();
        if !(1.0..=MAX_FREQUENCY_HZ as f64).contains(&hz) {
            return Err(invalid(format!("period {} ns is a sampling frequency of {hz} Hz, outside 1 to {MAX_FREQUENCY_HZ}", p.period)));
        }
        profile.meta.frequency_hz = hz as u64;
    }
    profile.meta.duration_ns = u64::try_from(p.duration_nanos).unwrap_or(0);
    profile.meta.target = p.comment.iter().filter_map(|&c| s(c)).find_map(|c| c.strip_prefix("target: ")).unwrap_or("").to_string();
    Ok(profile)
}

fn executables(profile: &Profile) -> Vec<String> {
    let mut v: Vec<String> = profile
        .processes
        .iter()
        .filter_map(|p| Path::new(&p.exe).file_name().map(|n| n.to_string_lossy().into_owned()))
        .filter(|n| !n.is_empty())
        .collect();
    v.sort();
    v.dedup();
    v
}

/// Checks that the profile has on-CPU samples, that every index in it points somewhere (a
/// hand-edited or corrupted `profile.json` may hold any number), and that its counts are
/// plausible ([`check_counts`]).
fn check_samples(profile: &Profile, path: &Path, kind: InputKind) -> Result<(), ImportError> {
    let file = match kind {
        InputKind::Bench | InputKind::Attach | InputKind::ProfileJson => "profile.json",
        InputKind::Pprof => "pprof profile",
        InputKind::PerfScript => "perf script output",
        InputKind::Folded => "folded stacks",
    };
    let invalid = |detail: String| ImportError::Invalid { path: path.to_path_buf(), file, detail };
    for (i, stack) in profile.stacks.iter().enumerate() {
        if let Some(&f) = stack.frames.iter().find(|&&f| f as usize >= profile.frames.len()) {
            return Err(invalid(format!("stack {i} refers to frame {f} of {}", profile.frames.len())));
        }
    }
    for c in profile.on_cpu.iter().chain(&profile.off_cpu) {
        if c.stack as usize >= profile.stacks.len() {
            return Err(invalid(format!("a sample refers to stack {} of {}", c.stack, profile.stacks.len())));
        }
    }
    check_counts(profile, kind).map_err(invalid)?;
    if profile.on_cpu.iter().all(|c| c.count == 0) {
        return Err(ImportError::Empty { path: path.to_path_buf() });
    }
    Ok(())
}

/// The sum of `counts` (the values of field `field`, `[]` standing for the index), checked:
/// an error naming the entry at which the sum passed `limit` (or would overflow a `u64`).
fn checked_total(field: &str, counts: impl IntoIterator<Item = u64>, limit: u64) -> Result<u64, String> {
    let mut total: u64 = 0;
    for (i, n) in counts.into_iter().enumerate() {
        total = match total.checked_add(n) {
            Some(t) if t <= limit => t,
            _ => {
                let at = field.replacen("[]", &format!("[{i}]"), 1);
                let bound = if limit == MAX_TOTAL { format!("2^53 ({MAX_TOTAL}), more than any profile holds") } else { format!("{limit} (it overflows)") };
                return Err(format!("{at} = {n}: the sum of {field} passes {bound}"));
            }
        };
    }
    Ok(total)
}

/// Checks the counts of a profile read from a `kind` input (an error names the field):
///
/// - every total of counts, summed with `checked_add`, is at most [`MAX_TOTAL`]: on-CPU
///   samples, off-CPU waits, syscall calls, errors and `-EAGAIN` returns, and the wire
///   capture's HTTP requests (all and by endpoint), round trips, pings and statement
///   executions; totals of nanoseconds must fit in a `u64`;
/// - a recorded profile (`profile.json`: bench, attach) has a sampling frequency from 1 to
///   [`MAX_FREQUENCY_HZ`] Hz (imported stacks may have none: 0);
/// - when the profile knows its run (`meta.duration_ns` and `meta.cpus` above 0): at most
///   [`MAX_SAMPLES_PER_PERIOD`] on-CPU samples per CPU and sampling period (plus one at the
///   start), at most [`MAX_EVENTS_PER_CPU_SECOND`] syscalls, waits, HTTP requests and round
///   trips per CPU-second, and syscall windows that scale the counts by at most
///   [`MAX_SYSCALL_SCALE`].
///
/// Every sum over counts that the comparison ([`super::compare`]) and the ranking make is
/// over a part of one of these totals, so none of them can overflow.
///
/// # Errors
/// What is wrong, one line, naming the field (`on_cpu[0].count = 18446744073709551615: ...`).
pub fn check_counts(profile: &Profile, kind: InputKind) -> Result<(), String> {
    let recorded = matches!(kind, InputKind::Bench | InputKind::Attach | InputKind::ProfileJson);
    let meta = &profile.meta;
    if recorded && !(1..=MAX_FREQUENCY_HZ).contains(&meta.frequency_hz) {
        return Err(format!("meta.frequency_hz = {} is not a sampling frequency (1 to {MAX_FREQUENCY_HZ} Hz)", meta.frequency_hz));
    }
    let samples = checked_total("on_cpu[].count", profile.on_cpu.iter().map(|c| c.count), MAX_TOTAL)?;
    let waits = checked_total("off_cpu[].count", profile.off_cpu.iter().map(|c| c.count), MAX_TOTAL)?;
    checked_total("off_cpu[].total_ns", profile.off_cpu.iter().map(|c| c.total_ns), u64::MAX)?;
    let calls = checked_total("syscalls[].count", profile.syscalls.iter().map(|s| s.count), MAX_TOTAL)?;
    checked_total("syscalls[].errors", profile.syscalls.iter().map(|s| s.errors), MAX_TOTAL)?;
    checked_total("syscalls[].eagain", profile.syscalls.iter().map(|s| s.eagain), MAX_TOTAL)?;
    checked_total("syscalls[].total_ns", profile.syscalls.iter().map(|s| s.total_ns), u64::MAX)?;
    let mut events = vec![("syscalls[].count", calls, "syscalls"), ("off_cpu[].count", waits, "off-CPU waits")];
    if let Some(w) = &profile.wire {
        let requests = checked_total("wire.http.requests", [w.http.requests], MAX_TOTAL)?;
        checked_total("wire.http.endpoints[].requests", w.http.endpoints.iter().map(|e| e.requests), MAX_TOTAL)?;
        checked_total("wire.http.endpoints[].latency_total_ns", w.http.endpoints.iter().map(|e| e.latency_total_ns), u64::MAX)?;
        let round_trips = checked_total("wire.pg.round_trips", [w.pg.round_trips], MAX_TOTAL)?;
        checked_total("wire.pg.pings", [w.pg.pings], MAX_TOTAL)?;
        let statements = &w.pg.statements;
        let by_statement = checked_total("wire.pg.statements[].round_trips", statements.iter().map(|s| s.round_trips), MAX_TOTAL)?;
        checked_total("wire.pg.statements[].executions", statements.iter().map(|s| s.executions), MAX_TOTAL)?;
        checked_total("wire.pg.statements[].prepares", statements.iter().map(|s| s.prepares), MAX_TOTAL)?;
        checked_total("wire.pg.statements[].latency_total_ns", statements.iter().map(|s| s.latency_total_ns), u64::MAX)?;
        events.extend([
            ("wire.http.requests", requests, "HTTP requests"),
            ("wire.pg.round_trips", round_trips, "round trips"),
            ("wire.pg.statements[].round_trips", by_statement, "round trips"),
        ]);
    }
    if meta.duration_ns == 0 || meta.cpus == 0 {
        return Ok(());
    }
    let seconds = meta.duration_ns as f64 / 1e9;
    let cpus = f64::from(meta.cpus);
    let run = format!("{seconds:.3} s on {} CPUs (meta.duration_ns, meta.cpus)", meta.cpus);
    if meta.frequency_hz > 0 {
        let most = MAX_SAMPLES_PER_PERIOD * (meta.frequency_hz as f64 * seconds + 1.0) * cpus;
        if samples as f64 > most {
            return Err(format!(
                "on_cpu[].count add up to {samples} samples in {run} at {} Hz: more than the {most:.0} the sampler can take (twice a sample per CPU and period)",
                meta.frequency_hz
            ));
        }
    }
    let most = MAX_EVENTS_PER_CPU_SECOND * cpus * seconds;
    for (field, n, what) in events {
        if n as f64 > most {
            return Err(format!("{field} add up to {n} {what} in {run}: more than {MAX_EVENTS_PER_CPU_SECOND:e} a CPU-second, beyond any run"));
        }
    }
    if let Some(w) = &meta.syscall_windows {
        let scale = meta.syscall_scale();
        if scale > MAX_SYSCALL_SCALE {
            return Err(format!(
                "meta.syscall_windows.traced_ns = {} of a {seconds:.3} s run would scale the syscall counts by {scale:.0}, more than {MAX_SYSCALL_SCALE} (the agent counts 1-100% of each second)",
                w.traced_ns
            ));
        }
    }
    Ok(())
}

/// Checks a request count a side got from `source` (`ranking.json`, `wire`, `wrk`) against
/// its profile's run: at most [`MAX_EVENTS_PER_CPU_SECOND`] per CPU-second (and
/// [`MAX_TOTAL`]).
fn check_requests(requests: u64, source: &str, profile: &Profile) -> Result<(), String> {
    let (seconds, cpus) = (profile.meta.duration_ns as f64 / 1e9, f64::from(profile.meta.cpus));
    let most = if seconds > 0.0 && cpus > 0.0 { (MAX_EVENTS_PER_CPU_SECOND * cpus * seconds).min(MAX_TOTAL as f64) } else { MAX_TOTAL as f64 };
    if requests as f64 > most {
        return Err(format!(
            "{requests} requests ({source}) over a profile of {seconds:.3} s on {} CPUs: more than {MAX_EVENTS_PER_CPU_SECOND:e} a CPU-second, beyond any run",
            profile.meta.cpus
        ));
    }
    Ok(())
}

fn single(
    path: &Path,
    kind: InputKind,
    profile: Profile,
    requests: Option<u64>,
    requests_source: Option<&'static str>,
) -> Result<Side, ImportError> {
    check_samples(&profile, path, kind)?;
    let (requests, requests_source) = match (requests, profile.wire.as_ref().map(|w| w.http.requests).filter(|&r| r > 0)) {
        (Some(r), _) => (Some(r), requests_source),
        (None, Some(r)) => (Some(r), Some("wire")),
        _ => (None, None),
    };
    if let Some(r) = requests {
        check_requests(r, requests_source.unwrap_or("?"), &profile)
            .map_err(|detail| ImportError::Invalid { path: path.to_path_buf(), file: "request count", detail })?;
    }
    let target = if profile.meta.target.is_empty() {
        path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
    } else {
        profile.meta.target.clone()
    };
    Ok(Side {
        path: path.to_path_buf(),
        kind,
        target,
        executables: executables(&profile),
        costs: None,
        tests: vec![TestSide { name: String::new(), profile: Some(profile), requests, requests_source, runs: Vec::new(), profile_error: None }],
    })
}

/// `requests` of a `ranking.json` beside a profile (a documented field), when it has one.
fn ranking_requests(dir: &Path) -> Result<Option<u64>, ImportError> {
    let path = dir.join("ranking.json");
    if !path.is_file() {
        return Ok(None);
    }
    let bytes = std::fs::read(&path).map_err(|error| ImportError::Io { path: path.clone(), error })?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| ImportError::Invalid { path: path.clone(), file: "ranking.json", detail: e.to_string() })?;
    if let Some(found) = v.get("schema_version").and_then(|x| x.as_u64()) {
        let supported = u64::from(crate::attribute::ranking::RANKING_SCHEMA_VERSION);
        if found > supported {
            return Err(ImportError::FutureVersion { path, file: "ranking.json", found, supported });
        }
        if found == 0 {
            return Err(ImportError::Invalid { path, file: "ranking.json", detail: "schema_version 0: ranking.json versions start at 1".into() });
        }
    }
    Ok(v.get("requests").and_then(|r| r.as_u64()).filter(|&r| r > 0))
}

/// `DIR/profile.json`, or `DIR/profile.json.gz` when only that exists (an archived run).
fn profile_in(dir: &Path) -> PathBuf {
    let plain = dir.join("profile.json");
    let gz = dir.join("profile.json.gz");
    if !plain.exists() && gz.is_file() {
        gz
    } else {
        plain
    }
}

fn load_attach(dir: &Path) -> Result<Side, ImportError> {
    let path = profile_in(dir);
    let bytes = read_bounded(&path)?;
    let profile = json_profile(&bytes, &path)?;
    let cpus = profile.meta.cpus;
    let requests = ranking_requests(dir)?;
    let mut side = single(&path, InputKind::Attach, profile, requests, requests.map(|_| "ranking.json"))?;
    side.path = dir.to_path_buf();
    side.tests[0].runs = measured_runs(dir, cpus)?;
    Ok(side)
}

/// `format` of a `runs.json`: the measured runs of the load an attach output profiled, made
/// without the agent (`scripts/profile-pr` writes one beside each side's `profile.json`):
///
/// ```json
/// {"format": "profiler-runs", "schema_version": 1,
///  "runs": [{"duration_s": 5.0, "requests": 41200, "req_per_s": 8240.0,
///            "p50_us": 450, "p99_us": 2100, "app_cpu_ns": 4100000000}]}
/// ```
///
/// Units are in the names; `app_cpu_ns` (the service's CPU time over the run, every process
/// and thread of it) may be absent or `null`. With measured runs on both sides an attach diff
/// compares req/s, latency and CPU per request like a bench diff, and their spreads give the
/// profile figures their noise.
pub const RUNS_FORMAT: &str = "profiler-runs";

/// Newest `runs.json` schema version read.
pub const RUNS_SCHEMA_VERSION: u64 = 1;

/// Longest measured run a `runs.json` may record, s: a day.
pub const MAX_RUN_SECONDS: f64 = 86_400.0;

/// `runs.json` past its `format` and `schema_version`, which [`measured_runs`] checks first.
#[derive(serde::Deserialize)]
struct RunsFile {
    runs: Vec<MeasuredRun>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct MeasuredRun {
    duration_s: f64,
    requests: u64,
    req_per_s: f64,
    p50_us: f64,
    p99_us: f64,
    #[serde(default)]
    app_cpu_ns: Option<u64>,
}

/// The measured runs of `dir/runs.json` ([`RUNS_FORMAT`]), none when the file is absent; a
/// run's figures are checked as [`check_run`] checks a bench's, on a machine of `cpus` CPUs
/// (the profile's).
fn measured_runs(dir: &Path, cpus: u32) -> Result<Vec<RunFigures>, ImportError> {
    let path = dir.join("runs.json");
    if !path.is_file() {
        return Ok(Vec::new());
    }
    let bytes = read_bounded(&path)?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| ImportError::Invalid { path: path.clone(), file: "runs.json", detail: e.to_string() })?;
    if value.get("format").and_then(|f| f.as_str()) != Some(RUNS_FORMAT) {
        return Err(ImportError::WrongKind { path, what: format!("not a runs.json (no \"format\": \"{RUNS_FORMAT}\")") });
    }
    match value.get("schema_version").and_then(|v| v.as_u64()) {
        Some(found) if found > RUNS_SCHEMA_VERSION => {
            return Err(ImportError::FutureVersion { path, file: "runs.json", found, supported: RUNS_SCHEMA_VERSION })
        }
        Some(0) => return Err(ImportError::Invalid { path, file: "runs.json", detail: "schema_version 0: runs.json versions start at 1".into() }),
        _ => {}
    }
    let file: RunsFile = serde_json::from_value(value).map_err(|e| ImportError::Invalid { path: path.clone(), file: "runs.json", detail: e.to_string() })?;
    let invalid = |detail: String| ImportError::Invalid { path: path.clone(), file: "runs.json", detail };
    let mut runs = Vec::new();
    for (i, r) in file.runs.iter().enumerate() {
        let field = format!("runs[{i}]");
        if !(r.duration_s.is_finite() && r.duration_s > 0.0 && r.duration_s <= MAX_RUN_SECONDS) {
            return Err(invalid(format!("{field}.duration_s = {} is not a run's length (above 0, at most {MAX_RUN_SECONDS} s)", number(r.duration_s))));
        }
        if !(r.req_per_s.is_finite() && (0.0..=MAX_REQ_PER_S).contains(&r.req_per_s)) {
            return Err(invalid(format!("{field}.req_per_s = {} is not a throughput (0 to {MAX_REQ_PER_S:e} req/s)", number(r.req_per_s))));
        }
        let rate = r.requests as f64 / r.duration_s;
        if rate > MAX_REQ_PER_S {
            return Err(invalid(format!("{field}.requests = {} in {} s is {rate:.2e} req/s, more than {MAX_REQ_PER_S:e}", r.requests, r.duration_s)));
        }
        for (name, us) in [("p50_us", r.p50_us), ("p99_us", r.p99_us)] {
            if !(us.is_finite() && (0.0..=MAX_LATENCY_US).contains(&us)) {
                return Err(invalid(format!("{field}.{name} = {} is not a latency (0 to an hour, {MAX_LATENCY_US:e} µs)", number(us))));
            }
        }
        if r.p50_us > r.p99_us {
            return Err(invalid(format!("{field}.p50_us = {} is above p99_us = {}", r.p50_us, r.p99_us)));
        }
        let most_ns = 2.0 * f64::from(cpus.max(1)) * (r.duration_s + 1.0) * 1e9;
        if let Some(ns) = r.app_cpu_ns.filter(|&ns| ns as f64 > most_ns) {
            return Err(invalid(format!("{field}.app_cpu_ns = {ns} is more than twice what {} CPUs give in a run of {} s and a second", cpus.max(1), r.duration_s)));
        }
        runs.push(RunFigures {
            req_per_s: r.req_per_s,
            p50_us: r.p50_us,
            p99_us: r.p99_us,
            cpu_us_per_request: r.app_cpu_ns.filter(|&ns| ns > 0 && r.requests > 0).map(|ns| ns as f64 / 1e3 / r.requests as f64),
            db_cpu_us_per_request: None,
        });
    }
    Ok(runs)
}

fn load_bench(dir: &Path) -> Result<Side, ImportError> {
    use crate::runs::{BenchResults, RESULTS_SCHEMA_VERSION};
    let path = dir.join("results.json");
    let bytes = read_bounded(&path)?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| ImportError::WrongKind { path: path.clone(), what: format!("not JSON ({e})") })?;
    let Some(map) = value.as_object().filter(|m| m.contains_key("tests") && m.contains_key("settings")) else {
        return Err(ImportError::WrongKind { path, what: "not a bench results.json (no \"tests\" and \"settings\")".into() });
    };
    if let Some(found) = map.get("schema_version").and_then(|v| v.as_u64()) {
        let supported = u64::from(RESULTS_SCHEMA_VERSION);
        if found > supported {
            return Err(ImportError::FutureVersion { path, file: "results.json", found, supported });
        }
        if found == 0 {
            return Err(ImportError::Invalid { path, file: "results.json", detail: "schema_version 0: results.json versions start at 1".into() });
        }
    }
    let results: BenchResults =
        serde_json::from_value(value).map_err(|e| ImportError::Invalid { path: path.clone(), file: "results.json", detail: e.to_string() })?;
    if results.tests.is_empty() {
        return Err(ImportError::Invalid { path, file: "results.json", detail: "no test was measured".into() });
    }
    let invalid_results = |detail: String| ImportError::Invalid { path: path.clone(), file: "results.json", detail };
    for (i, t) in results.tests.iter().enumerate() {
        for (j, r) in t.runs.iter().enumerate() {
            check_run(r, &format!("tests[{i}].runs[{j}]"), results.cpus).map_err(invalid_results)?;
        }
        if let Some(p) = &t.profiled {
            check_run(&p.run, &format!("tests[{i}].profiled.run"), results.cpus).map_err(invalid_results)?;
        }
    }
    let mut tests = Vec::new();
    let mut target = String::new();
    let mut exes = Vec::new();
    for t in &results.tests {
        let runs = t
            .runs
            .iter()
            .map(|r| RunFigures {
                req_per_s: r.wrk.req_per_s,
                p50_us: r.wrk.latency.p50_us as f64,
                p99_us: r.wrk.latency.p99_us as f64,
                cpu_us_per_request: (r.wrk.requests > 0 && r.app.cpu_ns > 0).then(|| r.app.cpu_ns as f64 / 1e3 / r.wrk.requests as f64),
                db_cpu_us_per_request: r
                    .postgres
                    .as_ref()
                    .filter(|pg| r.wrk.requests > 0 && pg.cpu_ns > 0)
                    .map(|pg| pg.cpu_ns as f64 / 1e3 / r.wrk.requests as f64),
            })
            .collect();
        let (profile, requests) = match &t.profiled {
            Some(p) => {
                let ppath = profile_in(&dir.join(&p.dir));
                if !ppath.is_file() {
                    return Err(invalid_results(format!(
                        "test {} was profiled into {}, but {} has no profile.json or profile.json.gz",
                        t.test.name(),
                        p.dir,
                        dir.join(&p.dir).display()
                    )));
                }
                let bytes = read_bounded(&ppath)?;
                let profile = json_profile(&bytes, &ppath)?;
                check_samples(&profile, &ppath, InputKind::Bench)?;
                if target.is_empty() {
                    target = profile.meta.target.clone();
                }
                exes.extend(executables(&profile));
                // The profile covers the app's restart under the agent and the warm-up as well
                // as the measured run, so wrk's count of the measured run is too small for it
                // (by 1.38-1.49x in two benches of the same code, which moved every figure per
                // request by 8%): the requests the wire capture counted over the profile's own
                // window come first (`ranking.json`, else the profile's wire summary).
                let wire = profile.wire.as_ref().map(|w| w.http.requests).filter(|&r| r > 0);
                let requests = match (ranking_requests(&dir.join(&p.dir))?, wire) {
                    (Some(r), _) => (Some(r), Some("ranking.json")),
                    (None, Some(r)) => (Some(r), Some("wire")),
                    (None, None) => (Some(p.run.wrk.requests).filter(|&r| r > 0), Some("wrk")),
                };
                if let (Some(r), Some(source)) = requests {
                    check_requests(r, source, &profile)
                        .map_err(|detail| ImportError::Invalid { path: ppath.clone(), file: "request count", detail })?;
                }
                (Some(profile), requests)
            }
            None => (None, (None, None)),
        };
        let (requests, requests_source) = requests;
        tests.push(TestSide {
            name: t.test.name().to_string(),
            profile,
            requests,
            requests_source: requests_source.filter(|_| requests.is_some()),
            runs,
            profile_error: t.profile_error.clone(),
        });
    }
    exes.sort();
    exes.dedup();
    if target.is_empty() {
        target = format!("bench app {}", results.settings.name);
    }
    Ok(Side { path: dir.to_path_buf(), kind: InputKind::Bench, target, executables: exes, costs: Some(results.settings.costs.clone()), tests })
}

/// Checks the figures of one wrk run of a `results.json` (`field` names it,
/// `tests[0].runs[1]`) on a machine of `cpus` CPUs:
///
/// - `wrk.req_per_s` finite, from 0 to [`MAX_REQ_PER_S`];
/// - `wrk.requests` over `wrk.duration_us` at most [`MAX_REQ_PER_S`] (a run with requests
///   has a duration);
/// - `wrk.latency.p50_us` and `p99_us` at most [`MAX_LATENCY_US`], p50 not above p99;
/// - `app.cpu_ns` and `postgres.cpu_ns` at most twice what `cpus` CPUs give over the run plus
///   a second (`/proc` CPU time is read around the run, not exactly over it).
///
/// # Errors
/// What is wrong, naming the field.
fn check_run(run: &crate::runs::RunResult, field: &str, cpus: u32) -> Result<(), String> {
    let wrk = &run.wrk;
    if !(wrk.req_per_s.is_finite() && (0.0..=MAX_REQ_PER_S).contains(&wrk.req_per_s)) {
        return Err(format!("{field}.wrk.req_per_s = {} is not a throughput (0 to {MAX_REQ_PER_S:e} req/s)", number(wrk.req_per_s)));
    }
    let seconds = wrk.duration_us as f64 / 1e6;
    if wrk.requests > 0 {
        let rate = wrk.requests as f64 / seconds;
        if wrk.duration_us == 0 || rate > MAX_REQ_PER_S {
            return Err(format!(
                "{field}.wrk.requests = {} in {seconds} s ({field}.wrk.duration_us) is {rate:.2e} req/s, more than {MAX_REQ_PER_S:e}",
                wrk.requests
            ));
        }
    }
    let latency = &wrk.latency;
    for (name, us) in [("p50_us", latency.p50_us), ("p99_us", latency.p99_us)] {
        if us as f64 > MAX_LATENCY_US {
            return Err(format!("{field}.wrk.latency.{name} = {us} is more than an hour ({MAX_LATENCY_US:e} µs)"));
        }
    }
    if latency.p50_us > latency.p99_us {
        return Err(format!("{field}.wrk.latency.p50_us = {} is above p99_us = {}", latency.p50_us, latency.p99_us));
    }
    let most_ns = 2.0 * f64::from(cpus.max(1)) * (seconds + 1.0) * 1e9;
    for (name, cpu_ns) in [("app", Some(run.app.cpu_ns)), ("postgres", run.postgres.as_ref().map(|u| u.cpu_ns))] {
        if let Some(ns) = cpu_ns.filter(|&ns| ns as f64 > most_ns) {
            return Err(format!("{field}.{name}.cpu_ns = {ns} is more than twice what {} CPUs give in a run of {seconds} s and a second", cpus.max(1)));
        }
    }
    Ok(())
}

/// `x` for a message: plain up to 1e9, else in scientific notation (`1e308`, not 309 digits).
fn number(x: f64) -> String {
    if x.is_finite() && x.abs() < 1e9 {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}
