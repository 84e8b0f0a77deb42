//! Property test: the importers of `profiler diff` never panic on malformed input (truncated
//! gzip, random bytes, flipped bytes, JSON of another schema), every error is one line, and
//! whatever they accept can be compared and rendered. Seeds: the recorded profile of
//! agent/tests/data/diff/ as gzip, as JSON, as folded stacks and as pprof, and a `perf script`
//! sample.

use std::path::Path;
use std::sync::OnceLock;

use proptest::prelude::*;
use profiler::compare::{self, import};
use profiler::render::diff_md as markdown;

const PERF_SCRIPT: &str = "\
target-app 1234 1234 100.000001: 1001001 cpu-clock:
\t    55d0c0a1b2c3 serde_json::de::from_slice+0x33 (/usr/local/bin/target-app)
\t    55d0c0a1b000 main+0x10 (/usr/local/bin/target-app)
\t    7f0000001000 __libc_start_main+0x80 (/usr/lib/x86_64-linux-gnu/libc.so.6)

target-app 1234 1235 100.001002: 1001001 cpu-clock:
\tffffffff81000000 do_syscall_64+0x1 ([kernel.kallsyms])
\t    55d0c0a1c000 tokio::runtime::park+0x5 (/usr/local/bin/target-app)

";

struct Seeds {
    gz: Vec<u8>,
    json: Vec<u8>,
    folded: Vec<u8>,
    pprof: Vec<u8>,
}

fn seeds() -> &'static Seeds {
    static S: OnceLock<Seeds> = OnceLock::new();
    S.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/diff/base/deals-create/profile.json.gz");
        let gz = std::fs::read(&path).unwrap();
        let side = import::from_bytes(&gz, &path).unwrap();
        let profile = side.tests[0].profile.clone().unwrap();
        let json = profiler::profile::json::to_vec(&profile);
        let folded = profiler::profile::folded::to_string(&profile, &profile.on_cpu, &Default::default()).into_bytes();
        let mut pprof = Vec::new();
        profiler::profile::pprof::write(&profile, profiler::profile::pprof::Kind::OnCpu, &mut pprof).unwrap();
        Seeds { gz, json, folded, pprof }
    })
}

fn seed(i: usize) -> &'static [u8] {
    let s = seeds();
    match i % 5 {
        0 => &s.gz,
        1 => &s.json,
        2 => &s.folded,
        3 => &s.pprof,
        _ => PERF_SCRIPT.as_bytes(),
    }
}

/// Imports `bytes`; on success compares the side with itself and renders it (neither may
/// panic); on failure checks the message is one line.
fn exercise(bytes: &[u8]) {
    match import::from_bytes(bytes, Path::new("fuzz-input")) {
        Ok(side) => {
            let rules = profiler::attribute::RuleSet::builtin();
            let opts = compare::Options { rules: &rules, fail_on_regression_pct: 5.0, noise_floor_pct: 0.0 };
            let d = compare::compare(&side, &side, &opts).expect("a side compares with itself");
            assert_eq!(d.verdict, compare::Verdict::Identical);
            let md = markdown::render(&d);
            assert!(md.len() < 65_536);
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.is_empty() && !msg.contains('\n'), "not one line: {msg:?}");
            // The message is whole: no source to print after it (that printed causes twice).
            assert!(std::error::Error::source(&e).is_none(), "{msg} has a source");
        }
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// JSON values of other schemas: random objects, some carrying the profile marker with wrong
/// fields or a future schema version.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(serde_json::Value::from),
        "[a-z_]{0,12}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
            prop::collection::btree_map(
                prop_oneof![Just("format".to_string()), Just("schema_version".to_string()), Just("on_cpu".to_string()), Just("tests".to_string()), Just("settings".to_string()), "[a-z_]{1,10}"],
                inner,
                0..6
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
        exercise(&bytes);
        exercise(&gzip(&bytes));
    }

    #[test]
    fn truncated_seeds(which in 0usize..5, cut in any::<prop::sample::Index>()) {
        let s = seed(which);
        exercise(&s[..cut.index(s.len() + 1)]);
    }

    #[test]
    fn flipped_bytes(which in 0usize..5, flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let mut s = seed(which).to_vec();
        for (i, b) in flips {
            let i = i.index(s.len());
            s[i] ^= b | 1;
        }
        exercise(&s);
    }

    #[test]
    fn json_of_another_schema(v in json_value(), marker in any::<bool>(), version in any::<u64>()) {
        let mut v = v;
        if marker {
            if let serde_json::Value::Object(m) = &mut v {
                m.insert("format".into(), "profiler-profile".into());
                m.insert("schema_version".into(), version.into());
            }
        }
        exercise(&serde_json::to_vec(&v).unwrap());
    }
}

/// A count near the top of the u64 range, or small.
fn count() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..1000, (1u64 << 50)..(1u64 << 54), (u64::MAX - 1000)..=u64::MAX]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    /// Folded counts never wrap: a file is read with exactly the total of its counts, or
    /// refused (one line naming the line) when that total passes 2^53.
    #[test]
    fn folded_counts_never_wrap(counts in prop::collection::vec(count(), 1..6)) {
        let text: String = counts.iter().enumerate().map(|(i, n)| format!("main;f{i} {n}\n")).collect();
        let total: u128 = counts.iter().map(|&n| u128::from(n)).sum();
        match import::from_bytes(text.as_bytes(), Path::new("counts.folded")) {
            Ok(side) => {
                prop_assert!(total <= u128::from(import::MAX_TOTAL) && total > 0, "accepted a total of {total}");
                let p = side.tests[0].profile.as_ref().unwrap();
                prop_assert_eq!(p.on_cpu.iter().map(|c| u128::from(c.count)).sum::<u128>(), total);
            }
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(total > u128::from(import::MAX_TOTAL) || total == 0, "refused a total of {total}: {msg}");
                prop_assert!(!msg.contains('\n'));
                if total > 0 {
                    prop_assert!(msg.contains("takes the file's total past 9007199254740992 (2^53)"), "{msg}");
                }
            }
        }
    }
}

/// A side whose counts would overflow is refused by `compare` itself, not only by the
/// importers (a `Side` may be built by hand).
#[test]
fn compare_refuses_overflowing_counts() {
    let mut side = import::from_bytes(seed(0), Path::new("seed")).unwrap();
    let rules = profiler::attribute::RuleSet::builtin();
    let opts = compare::Options { rules: &rules, fail_on_regression_pct: 5.0, noise_floor_pct: 0.0 };
    let profile = side.tests[0].profile.as_mut().unwrap();
    profile.on_cpu[0].count = u64::MAX;
    profile.on_cpu[1].count = u64::MAX;
    let err = compare::compare(&side, &side, &opts).unwrap_err();
    assert!(matches!(err, compare::CompareError::Implausible { side: "BASE", .. }), "{err:?}");
    assert!(err.to_string().contains("on_cpu[0].count = 18446744073709551615: the sum of on_cpu[].count passes 2^53"), "{err}");
}

#[test]
fn seeds_import_as_their_kinds() {
    let p = Path::new("seed");
    let kinds: Vec<import::InputKind> = (0..5).map(|i| import::from_bytes(seed(i), p).unwrap().kind).collect();
    use import::InputKind::*;
    assert_eq!(kinds, [ProfileJson, ProfileJson, Folded, Pprof, PerfScript]);
    // The perf script sample: 2 samples, `_[k]` on the kernel frame as inferno writes it.
    let side = import::from_bytes(PERF_SCRIPT.as_bytes(), p).unwrap();
    let profile = side.tests[0].profile.as_ref().unwrap();
    assert_eq!(profile.on_cpu.iter().map(|c| c.count).sum::<u64>(), 2);
    assert!(profile.frames.iter().any(|f| f.function == "do_syscall_64" && f.kind == profiler::profile::FrameKind::Kernel));
}

/// inferno's perf collapser slices a symbol's last 17 bytes and panicked inside a multi-byte
/// character (found by `flipped_bytes` once text with a bad byte was read as text): such
/// symbols are read, with their names as written (a byte that is not UTF-8 becomes U+FFFD).
#[test]
fn perf_script_symbols_with_non_ascii_characters() {
    let mut text = "target-app 1234 1234 100.000001: 1001001 cpu-clock:\n\
        \t    55d0c0a1b2c3 serde_jsoé::de::from_slice+0x33 (/usr/local/bin/target-app)\n\
        \t    55d0c0a1b2c4 C:\\path\\u{41}::löwe (/usr/local/bin/target-app)\n\
        \t    55d0c0a1b000 main+0x10 (/usr/local/bin/target-app)\n\n"
        .as_bytes()
        .to_vec();
    text.extend_from_slice(b"target-app 1234 1234 100.000002: 1001001 cpu-clock:\n\t    55d0c0a1b2c3 serde_jso\xff::de::from_slice+0x33 (/usr/local/bin/target-app)\n\n");
    let side = import::from_bytes(&text, Path::new("perf.txt")).unwrap();
    assert_eq!(side.kind, import::InputKind::PerfScript);
    let profile = side.tests[0].profile.as_ref().unwrap();
    let names: Vec<&str> = profile.frames.iter().map(|f| f.function.as_str()).collect();
    for name in ["serde_jsoé::de::from_slice", "C:\\path\\u{41}::löwe", "serde_jso\u{fffd}::de::from_slice", "main"] {
        assert!(names.contains(&name), "{name} not in {names:?}");
    }
}

/// inferno's perf collapser asserts that the first stack it reads names an event type, and
/// panicked on `perf script` text that starts with a blank line or whose first event line
/// has no `EVENT:` (found by `flipped_bytes`): the first is read, the second refused.
#[test]
fn perf_script_that_inferno_would_assert_on() {
    let event = "target-app 1234 1234 100.000001: 1001001 cpu-clock:\n\t    55d0c0a1b000 main+0x10 (/usr/local/bin/target-app)\n\n";
    let side = import::from_bytes(format!("\n# header\n\n{event}").as_bytes(), Path::new("perf.txt")).unwrap();
    assert_eq!(side.kind, import::InputKind::PerfScript);
    let no_event = "target-app 1234 1234 100.000001 1001001 cpu-clock\n\t    55d0c0a1b000 main+0x10 (/usr/local/bin/target-app)\n\n";
    let err = import::from_bytes(format!("{no_event}{event}").as_bytes(), Path::new("perf.txt")).unwrap_err().to_string();
    assert!(err.contains("line 1: `target-app 1234 1234 100.000001 1001001 cpu-clock` is neither an event line"), "{err}");
}

/// An event line whose only number is its period column: without the column (the importer
/// drops it) it is no event line for inferno, which then panicked on its assertion.
#[test]
fn perf_event_line_numbered_only_by_its_period() {
    let text = "target-app 1234a1234 100.000001: 1001001 cpu-clock:\n\t    55d0c0a1b000 main+0x10 (/usr/local/bin/target-app)\n\n";
    let err = import::from_bytes(text.as_bytes(), Path::new("perf.txt")).unwrap_err().to_string();
    assert!(err.contains("line 1: `target-app 1234a1234 100.000001: 1001001 cpu-clock:` is neither an event line"), "{err}");
}
