//! Bounded property test: any structurally valid `Profile`, including out-of-range frame and
//! stack indices (a hand-edited file), renders every file and a summary without panicking, and
//! the folded output's weights add up to the input's.

use proptest::prelude::*;

use profiler::profile::folded::{self, Options};
use profiler::profile::{Frame, FrameKind, Profile, Stack, StackCount};
use profiler::render;

fn frame() -> impl Strategy<Value = Frame> {
    (
        prop_oneof![Just("[unknown]".to_string()), "[a-z:<>; \\[\\]]{1,12}"],
        "[a-z.]{0,6}",
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(function, module, kernel, inlined)| Frame {
            function,
            module,
            kind: if kernel { FrameKind::Kernel } else { FrameKind::User },
            inlined,
            file: None,
            line: None,
        })
}

fn profile() -> impl Strategy<Value = Profile> {
    (
        proptest::collection::vec(frame(), 0..8),
        proptest::collection::vec((proptest::collection::vec(0u32..10, 0..6), any::<bool>()), 0..6),
        proptest::collection::vec((0u32..8, 1u64..1000, 0u64..5_000_000, "[a-z-]{0,4}"), 0..10),
        0u64..200,
    )
        .prop_map(|(frames, stacks, counts, hz)| {
            let counts: Vec<StackCount> = counts
                .into_iter()
                .map(|(stack, count, total_ns, thread)| StackCount {
                    pid: 1,
                    tid: 2,
                    thread,
                    stack,
                    count,
                    total_ns,
                    endpoints: Vec::new(),
                })
                .collect();
            let mut p = Profile {
                frames,
                stacks: stacks
                    .into_iter()
                    .map(|(frames, truncated)| Stack { frames, truncated })
                    .collect(),
                on_cpu: counts.clone(),
                off_cpu: counts,
                ..Profile::default()
            };
            p.meta.frequency_hz = hz;
            p.meta.duration_ns = 1_000_000_000;
            p
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn any_profile_renders(p in profile()) {
        let dir = tempfile::tempdir().unwrap();
        let written = render::write_all(&p, dir.path()).unwrap();
        prop_assert_eq!(written.len(), 8);
        let summary = render::summary(&p);
        prop_assert!(summary.starts_with("profile of "));
        let total: u64 = p.on_cpu.iter().map(|c| c.count).sum();
        let folded_total: u64 = folded::fold(&p, &p.on_cpu, &Options::default()).iter().map(|l| l.1).sum();
        prop_assert_eq!(folded_total, total);
        for (line, _) in folded::fold(&p, &p.on_cpu, &Options::default()) {
            prop_assert!(!line.contains('\n'));
            prop_assert!(!line.is_empty());
        }
    }
}
