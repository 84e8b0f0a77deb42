//! pprof writer: `profile.pb.gz`, a gzip-compressed `perftools.profiles.Profile` protobuf
//! (format: google/pprof `proto/profile.proto`; types from the `pprof` crate, prost codec).
//! `go tool pprof`, Grafana Pyroscope, Speedscope and others read it.
//!
//! What is written:
//! - on-CPU ([`Kind::OnCpu`]): sample types `samples/count` and `cpu/nanoseconds`, where
//!   cpu = samples × period and period = 1e9 / [`Meta::frequency_hz`] ns (period type
//!   `cpu/nanoseconds`); default sample type `cpu`;
//! - off-CPU ([`Kind::OffCpu`]): sample types `waits/count` and `offcpu/nanoseconds`
//!   ([`StackCount::total_ns`]);
//! - one `Sample` per [`StackCount`], locations leaf first, with labels `thread` (string),
//!   `pid`, `tid` (numbers) and `truncated` = `"true"` on truncated stacks;
//! - one `Location` per physical frame: a non-inlined frame plus the inlined frames nested in
//!   it become one location with several `Line`s, innermost first as profile.proto asks;
//!   addresses are not kept in a [`Profile`], so `Location.address` is 0;
//! - one `Mapping` per module (file name only, no address range; the target's executable
//!   first, which pprof shows as the main binary), one `Function` per
//!   distinct (name, file), named by [`Frame::display_name`].
//!
//! [`Meta::frequency_hz`]: super::Meta::frequency_hz

/// Hash maps of the interning tables: keys are names and frame indices built from our own
/// profile (no untrusted input to flood them), so a fast hasher instead of SipHash.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
use pprof::protos::{self, Message};

use super::{Frame, FrameKind, Profile, StackCount};

/// Which half of the profile to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// [`Profile::on_cpu`].
    OnCpu,
    /// [`Profile::off_cpu`].
    OffCpu,
}

/// Interns strings into a pprof string table (index 0 is always `""`).
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Self::default();
        s.get("");
        s
    }

    fn get(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// Builds the pprof protobuf message for one half of `profile`.
pub fn build(profile: &Profile, kind: Kind) -> protos::Profile {
    let mut strings = Strings::new();
    let value_type = |strings: &mut Strings, ty: &str, unit: &str| protos::ValueType {
        ty: strings.get(ty),
        unit: strings.get(unit),
    };
    let (counts, sample_type, period_type, period): (&[StackCount], _, _, i64) = match kind {
        Kind::OnCpu => {
            let period = if profile.meta.frequency_hz > 0 {
                (1_000_000_000 / profile.meta.frequency_hz) as i64
            } else {
                0
            };
            (
                &profile.on_cpu,
                vec![
                    value_type(&mut strings, "samples", "count"),
                    value_type(&mut strings, "cpu", "nanoseconds"),
                ],
                value_type(&mut strings, "cpu", "nanoseconds"),
                period,
            )
        }
        Kind::OffCpu => (
            &profile.off_cpu,
            vec![
                value_type(&mut strings, "waits", "count"),
                value_type(&mut strings, "offcpu", "nanoseconds"),
            ],
            value_type(&mut strings, "offcpu", "nanoseconds"),
            profile.meta.offcpu_min_block_ns as i64,
        ),
    };
    let default_sample_type = sample_type[1].ty;

    let mut mappings: Vec<protos::Mapping> = Vec::new();
    let mut functions: Vec<protos::Function> = Vec::new();
    let mut function_ids: HashMap<(std::borrow::Cow<'_, str>, Option<&str>), u64> = HashMap::default();
    // Per frame index: its function's id (0: not looked up yet), so that each frame's name is
    // hashed once, not once per stack it appears in.
    let mut frame_function_ids: Vec<u64> = vec![0; profile.frames.len()];
    let mut locations: Vec<protos::Location> = Vec::new();
    // A location is identified by its frame indices (outer first). Locations of one frame
    // (most of them) are found by frame index; those with inlined frames by the group.
    let mut frame_location_ids: Vec<u64> = vec![0; profile.frames.len()];
    let mut group_location_ids: HashMap<Vec<u32>, u64> = HashMap::default();
    // Per stack index: its location ids (leaf first) and how many samples still use them,
    // so that the last sample takes the vector instead of a copy.
    let mut stack_locations: Vec<Option<Vec<u64>>> = vec![None; profile.stacks.len()];
    let mut stack_uses: Vec<u32> = vec![0; profile.stacks.len()];
    for count in counts {
        if let Some(uses) = stack_uses.get_mut(count.stack as usize) {
            *uses += 1;
        }
    }

    // `go tool pprof` takes the first mapping as the main binary (its "File:" line): make it
    // the target's executable.
    if let Some(process) = profile.processes.first() {
        let exe = std::path::Path::new(&process.exe)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| process.comm.clone());
        if !exe.is_empty() {
            mappings.push(protos::Mapping {
                id: 1,
                filename: strings.get(&exe),
                has_functions: true,
                has_filenames: true,
                has_line_numbers: true,
                has_inline_frames: true,
                ..Default::default()
            });
        }
    }
    let mut mapping_ids: HashMap<String, u64> = mappings
        .iter()
        .map(|m| (strings.table[m.filename as usize].clone(), m.id))
        .collect();

    let label_thread = strings.get("thread");
    let label_pid = strings.get("pid");
    let label_tid = strings.get("tid");
    let label_truncated = strings.get("truncated");
    let value_true = strings.get("true");

    let mut valid: Vec<u32> = Vec::new();
    let mut samples = Vec::with_capacity(counts.len());
    for count in counts {
        let stack_index = count.stack as usize;
        let Some(stack) = profile.stacks.get(stack_index) else {
            continue;
        };
        if stack_locations[stack_index].is_none() {
            // Group root-first frames into physical frames: a non-inlined frame starts a group,
            // the inlined frames after it (its callees, inlined into it) join the group.
            // Frames with an index out of range are left out first, so that every group is a
            // run of `valid`.
            valid.clear();
            valid.extend(
                stack
                    .frames
                    .iter()
                    .copied()
                    .filter(|&f| (f as usize) < profile.frames.len()),
            );
            let mut groups: Vec<&[u32]> = Vec::new();
            let mut start = 0;
            for (i, &f) in valid.iter().enumerate() {
                if i > 0 && !profile.frames[f as usize].inlined {
                    groups.push(&valid[start..i]);
                    start = i;
                }
            }
            if !valid.is_empty() {
                groups.push(&valid[start..]);
            }
            let mut ids = Vec::with_capacity(groups.len());
            // Leaf first.
            for group in groups.into_iter().rev() {
                let known = if group.len() == 1 {
                    frame_location_ids[group[0] as usize]
                } else {
                    group_location_ids.get(group).copied().unwrap_or(0)
                };
                if known != 0 {
                    ids.push(known);
                    continue;
                }
                let outer: &Frame = &profile.frames[group[0] as usize];
                let module = module_name(outer);
                let mapping_id = match mapping_ids.get(module) {
                    Some(&id) => id,
                    None => {
                        let id = mappings.len() as u64 + 1;
                        mappings.push(protos::Mapping {
                            id,
                            filename: strings.get(module),
                            has_functions: true,
                            has_filenames: true,
                            has_line_numbers: true,
                            has_inline_frames: true,
                            ..Default::default()
                        });
                        mapping_ids.insert(module.to_string(), id);
                        id
                    }
                };
                // profile.proto: "line[i] is inlined into line[i+1]": innermost first.
                let lines = group
                    .iter()
                    .rev()
                    .map(|&f| {
                        let frame = &profile.frames[f as usize];
                        let slot = &mut frame_function_ids[f as usize];
                        if *slot == 0 {
                            let key = (frame.display_name(), frame.file.as_deref());
                            *slot = *function_ids.entry(key).or_insert_with_key(|key| {
                                let id = functions.len() as u64 + 1;
                                let name = strings.get(&key.0);
                                functions.push(protos::Function {
                                    id,
                                    name,
                                    system_name: name,
                                    filename: strings.get(frame.file.as_deref().unwrap_or("")),
                                    start_line: 0,
                                });
                                id
                            });
                        }
                        protos::Line {
                            function_id: *slot,
                            line: i64::from(frame.line.unwrap_or(0)),
                        }
                    })
                    .collect();
                let id = locations.len() as u64 + 1;
                locations.push(protos::Location {
                    id,
                    mapping_id,
                    address: 0,
                    line: lines,
                    is_folded: false,
                });
                if group.len() == 1 {
                    frame_location_ids[group[0] as usize] = id;
                } else {
                    group_location_ids.insert(group.to_vec(), id);
                }
                ids.push(id);
            }
            stack_locations[stack_index] = Some(ids);
        }
        stack_uses[stack_index] -= 1;
        let location_id = if stack_uses[stack_index] == 0 {
            stack_locations[stack_index].take().unwrap_or_default()
        } else {
            stack_locations[stack_index].clone().unwrap_or_default()
        };
        let value = match kind {
            Kind::OnCpu => vec![
                count.count as i64,
                (count.count as i64).saturating_mul(period),
            ],
            Kind::OffCpu => vec![count.count as i64, count.total_ns as i64],
        };
        let mut label = vec![
            protos::Label {
                key: label_thread,
                str: strings.get(&count.thread),
                ..Default::default()
            },
            protos::Label {
                key: label_pid,
                num: i64::from(count.pid),
                ..Default::default()
            },
            protos::Label {
                key: label_tid,
                num: i64::from(count.tid),
                ..Default::default()
            },
        ];
        if stack.truncated {
            label.push(protos::Label {
                key: label_truncated,
                str: value_true,
                ..Default::default()
            });
        }
        samples.push(protos::Sample {
            location_id,
            value,
            label,
        });
    }

    let comment = vec![strings.get(&format!("target: {}", profile.meta.target))];
    protos::Profile {
        sample_type,
        sample: samples,
        mapping: mappings,
        location: locations,
        function: functions,
        time_nanos: parse_rfc3339_ns(&profile.meta.started_at).unwrap_or(0),
        duration_nanos: profile.meta.duration_ns as i64,
        period_type: Some(period_type),
        period,
        comment,
        default_sample_type,
        string_table: strings.table,
        drop_frames: 0,
        keep_frames: 0,
    }
}

fn module_name(frame: &Frame) -> &str {
    match frame.kind {
        FrameKind::Kernel if frame.module.is_empty() => "[kernel]",
        _ => frame.module.as_str(),
    }
}

/// Parses an RFC 3339 timestamp ([`Meta::started_at`]) into ns since the Unix epoch.
///
/// [`Meta::started_at`]: super::Meta::started_at
fn parse_rfc3339_ns(s: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()?
        .timestamp_nanos_opt()
}

/// Encodes `profile` (one half, see [`build`]) as a gzip-compressed protobuf into `out`, at
/// gzip's fastest level (1): pprof readers take any level, and level 6 (the default) spent
/// half of the pprof time of a 100,000-stack profile in deflate for files about a quarter
/// smaller (see PERFORMANCE.md).
///
/// # Errors
/// Whatever `out` returns.
pub fn write(profile: &Profile, kind: Kind, out: impl Write) -> std::io::Result<()> {
    let message = build(profile, kind);
    let mut gz = GzEncoder::new(out, Compression::fast());
    gz.write_all(&message.encode_to_vec())?;
    gz.finish()?.flush()
}

#[cfg(test)]
mod tests {
    use super::parse_rfc3339_ns;

    #[test]
    fn rfc3339() {
        // `date -u -d 2026-11-30T08:47:49Z +%s` = 1796028469.
        assert_eq!(
            parse_rfc3339_ns("2026-11-30T08:47:49Z"),
            Some(1_796_028_469_000_000_000)
        );
        assert_eq!(
            parse_rfc3339_ns("2026-11-30T09:47:49.5+01:00"),
            Some(1_796_028_469_500_000_000)
        );
        assert_eq!(parse_rfc3339_ns("yesterday"), None);
    }
}
