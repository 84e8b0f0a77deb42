//! `profile.json` reader and writer: round trip, and every way a file can be wrong gives its
//! [`JsonError`] variant (never a panic), including a bounded fuzz of arbitrary bytes.

use std::path::Path;

use profiler::profile::json::{self, JsonError, FORMAT};
use profiler::profile::{Profile, SCHEMA_VERSION};

fn fixture() -> Profile {
    json::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/profile/small.json"))
        .unwrap()
}

#[test]
fn fixture_reads_with_the_hand_written_values() {
    let p = fixture();
    assert_eq!(p.schema_version, 1);
    assert_eq!(p.meta.target, "pid 4242");
    assert_eq!(p.meta.duration_ns, 2_000_000_000);
    assert_eq!(p.frames.len(), 35);
    assert_eq!(p.stacks.len(), 8);
    assert_eq!(p.on_cpu.iter().map(|c| c.count).sum::<u64>(), 17);
    assert_eq!(p.syscalls[1].name, "recvfrom");
    assert_eq!(p.lost.stack_collisions, 2);
}

#[test]
fn round_trip_is_lossless() {
    // The fixture is of schema 1; the writer stamps the current version (the only change).
    let mut p = fixture();
    p.schema_version = SCHEMA_VERSION;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("profile.json");
    json::write(&p, &path).unwrap();
    let back = json::read(&path).unwrap();
    assert_eq!(back, p);
    // Writing again gives the same bytes (deterministic).
    assert_eq!(json::to_vec(&back), std::fs::read(&path).unwrap());
    let text = String::from_utf8(json::to_vec(&p)).unwrap();
    assert!(text.contains(&format!("\"format\": \"{FORMAT}\"")));
}

#[test]
fn writer_stamps_the_current_schema_version() {
    let p = Profile {
        schema_version: 0,
        ..Profile::default()
    };
    let v: serde_json::Value = serde_json::from_slice(&json::to_vec(&p)).unwrap();
    assert_eq!(v["schema_version"], SCHEMA_VERSION);
    assert_eq!(json::from_slice(&json::to_vec(&p), Path::new("x")).unwrap().schema_version, SCHEMA_VERSION);
}

fn err(bytes: &[u8]) -> JsonError {
    json::from_slice(bytes, Path::new("p.json")).unwrap_err()
}

#[test]
fn future_schema_version_is_refused() {
    let mut v: serde_json::Value = serde_json::from_slice(&json::to_vec(&fixture())).unwrap();
    v["schema_version"] = (SCHEMA_VERSION + 1).into();
    let e = err(&serde_json::to_vec(&v).unwrap());
    assert!(matches!(e, JsonError::FutureVersion { found, supported: SCHEMA_VERSION, .. } if found == u64::from(SCHEMA_VERSION) + 1), "{e:?}");
    assert_eq!(
        e.to_string(),
        format!("p.json: profile schema version {} is newer than the {SCHEMA_VERSION} this profiler reads; use a newer profiler", SCHEMA_VERSION + 1)
    );
    // Refused before decoding the fields: a future profile may have changed them all.
    let e = err(br#"{"format":"profiler-profile","schema_version":7,"frames":"changed"}"#);
    assert!(matches!(e, JsonError::FutureVersion { found: 7, .. }), "{e:?}");
}

/// Profiles no run can give (a fresh user's hand-edited files, which `profiler report` rendered
/// as "0.0 s ... on-CPU samples: 1021" and "on 0 CPUs" with exit 0): one line each.
#[test]
fn impossible_profiles_are_refused() {
    let v: serde_json::Value = serde_json::from_slice(&json::to_vec(&fixture())).unwrap();
    assert!(fixture().on_cpu.iter().any(|c| c.count > 0), "the fixture has samples");
    for (field, value, says) in [
        ("schema_version", None, "schema_version 0: profile.json versions start at 1"),
        ("duration_ns", Some("meta"), "meta.duration_ns is 0, but the profile has samples"),
        ("cpus", Some("meta"), "meta.cpus is 0, but the profile has samples"),
    ] {
        let mut bad = v.clone();
        match value {
            Some(obj) => bad[obj][field] = 0.into(),
            None => bad[field] = 0.into(),
        }
        let e = err(&serde_json::to_vec(&bad).unwrap());
        assert!(e.to_string().starts_with(&format!("p.json: invalid profile.json: {says}")), "{field}: {e}");
    }
}

#[test]
fn wrong_files_are_refused_with_their_kind() {
    let e = err(b"\x1f\x8b\x08\x00 gzip");
    assert!(matches!(e, JsonError::NotJson { .. }), "{e:?}");
    assert_eq!(e.to_string(), "p.json: not JSON");
    let e = err(b"[1, 2]");
    assert_eq!(e.to_string(), "p.json: not a profiler profile.json (a JSON array, expected an object)");
    // syscalls.json, written beside profile.json, is the likeliest wrong file.
    let e = err(br#"{"duration_ns": 1, "syscalls": []}"#);
    assert_eq!(
        e.to_string(),
        "p.json: not a profiler profile.json (no \"format\": \"profiler-profile\" field)"
    );
    let e = err(br#"{"format": "pprof"}"#);
    assert_eq!(
        e.to_string(),
        "p.json: not a profiler profile.json (\"format\" is \"pprof\", expected \"profiler-profile\")"
    );
    let e = err(br#"{"format": "profiler-profile", "schema_version": 1, "meta": 5}"#);
    assert!(matches!(e, JsonError::Invalid { .. }), "{e:?}");
    assert_eq!(e.to_string(), "p.json: invalid profile.json");
    let source = std::error::Error::source(&e).unwrap().to_string();
    assert!(source.contains("meta") || source.contains("invalid type"), "{source}");
}

#[test]
fn missing_file_is_an_io_error() {
    let e = json::read(Path::new("/nonexistent/profile.json")).unwrap_err();
    assert!(matches!(e, JsonError::Io { .. }), "{e:?}");
    assert_eq!(e.to_string(), "/nonexistent/profile.json");
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// Arbitrary bytes: an error or a profile, never a panic.
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = json::from_slice(&bytes, Path::new("g.json"));
        }

        /// Valid JSON objects with the marker and random other fields: still no panic, and
        /// anything accepted round-trips.
        #[test]
        fn marked_objects_never_panic(
            version in prop_oneof![Just(serde_json::Value::from(1)), any::<i64>().prop_map(serde_json::Value::from), Just(serde_json::Value::Null)],
            key in "[a-z_]{1,12}",
            value in any::<i64>(),
        ) {
            let mut v = serde_json::json!({"format": FORMAT, "schema_version": version});
            v[key] = value.into();
            if let Ok(p) = json::from_slice(&serde_json::to_vec(&v).unwrap(), Path::new("g.json")) {
                prop_assert_eq!(json::from_slice(&json::to_vec(&p), Path::new("g.json")).unwrap(), p);
            }
        }

        /// The fixture with one byte changed: never a panic.
        #[test]
        fn mutated_fixture_never_panics(pos in 0usize..20_000, byte in any::<u8>()) {
            let mut bytes = json::to_vec(&fixture());
            let i = pos % bytes.len();
            bytes[i] = byte;
            let _ = json::from_slice(&bytes, Path::new("m.json"));
        }
    }
}

/// An index outside its table is refused with one line naming it, before any consumer
/// (attribution, the renderers, the diff) could index with it.
#[test]
fn indices_outside_their_tables_are_refused() {
    let mut p = fixture();
    let frames = p.frames.len() as u32;
    p.stacks[0].frames.push(frames + 7);
    let e = json::from_slice(&json::to_vec(&p), Path::new("p.json")).unwrap_err();
    assert!(matches!(e, JsonError::BadIndex { .. }), "{e:?}");
    assert_eq!(e.to_string(), format!("p.json: invalid profile.json: stacks[0] refers to frame {} of {frames}", frames + 7));
    let mut p = fixture();
    let stacks = p.stacks.len() as u32;
    p.on_cpu[0].stack = stacks;
    let e = json::from_slice(&json::to_vec(&p), Path::new("p.json")).unwrap_err();
    assert_eq!(e.to_string(), format!("p.json: invalid profile.json: on_cpu[0] refers to stack {stacks} of {stacks}"));
    assert!(json::bad_index(&fixture()).is_none());
}
