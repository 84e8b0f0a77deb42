//! Rules as data: parse errors with their line numbers, precedence and overrides, the
//! embedded catalog and target-app's app rules on real frame names of target-app.

use std::path::PathBuf;

use profiler::attribute::rules::{frame_path, RuleError, RuleSet, RulesFileError, DEFAULT_ORIGIN};
use profiler::profile::{Frame, FrameKind};

fn err(text: &str) -> RuleError {
    RuleSet::empty().add_toml(text, "t.toml").unwrap_err()
}

fn user(function: &str) -> Frame {
    Frame { function: function.into(), module: "app".into(), kind: FrameKind::User, inlined: false, file: None, line: None }
}

fn inlined(function: &str, file: &str) -> Frame {
    Frame { inlined: true, file: Some(file.into()), ..user(function) }
}

fn kernel(function: &str) -> Frame {
    Frame { kind: FrameKind::Kernel, module: "[kernel]".into(), ..user(function) }
}

fn layer_of(set: &RuleSet, f: &Frame) -> Option<String> {
    set.classify(f).map(|i| set.layers()[i].name.clone())
}

#[test]
fn toml_syntax_error_has_its_line() {
    // Line 4 has an unterminated string.
    let e = err("[[layer]]\nname = \"a\"\ncategory = \"x\"\nprefix = [\"abc]\n");
    assert_eq!(e.line, 4, "{e}");
    assert_eq!(e.origin, "t.toml");
    assert!(e.to_string().starts_with("t.toml:4: "), "{e}");
}

#[test]
fn unknown_key_has_its_line() {
    let e = err("[[layer]]\nname = \"a\"\ncategory = \"x\"\nprefix = [\"a::\"]\n\n[[layer]]\nname = \"b\"\ncategory = \"x\"\nprefx = [\"b::\"]\n");
    assert_eq!(e.line, 9, "{e}");
    assert!(e.message.contains("prefx"), "{e}");
}

#[test]
fn bad_regex_has_the_line_of_the_pattern() {
    let text = "[[layer]]\nname = \"a\"\ncategory = \"x\"\nregex = [\n  '^ok::',\n  '^bad(::',\n]\n";
    let e = err(text);
    assert_eq!(e.line, 6, "{e}");
    assert!(e.message.contains("bad regex") && e.message.contains("layer `a`"), "{e}");
}

#[test]
fn semantic_errors_have_their_lines() {
    // A layer without patterns: the line of its [[layer]] table.
    let e = err("[[layer]]\nname = \"a\"\ncategory = \"x\"\nprefix = [\"a::\"]\n[[layer]]\nname = \"b\"\ncategory = \"x\"\n");
    assert_eq!(e.line, 5, "{e}");
    assert!(e.message.contains("no `prefix` or `regex`"), "{e}");
    // A bad kind: its line.
    let e = err("[[layer]]\nname = \"a\"\ncategory = \"x\"\nprefix = [\"a::\"]\nkind = \"both\"\n");
    assert_eq!((e.line, e.message.contains("kind")), (5, true), "{e}");
    // Twice the same name in one file: the second name's line.
    let e = err("[[layer]]\nname = \"a\"\ncategory = \"x\"\nprefix = [\"a::\"]\n[[layer]]\nname = \"a\"\ncategory = \"y\"\nprefix = [\"b::\"]\n");
    assert_eq!(e.line, 6, "{e}");
    // A regex that matches everything, an empty prefix, a missing category.
    assert_eq!(err("[[layer]]\nname = \"a\"\ncategory = \"x\"\nregex = ['.*']\n").line, 4);
    assert_eq!(err("[[layer]]\nname = \"a\"\ncategory = \"x\"\n\nprefix = [\"\"]\n").line, 5);
    let e = err("\n[[layer]]\nname = \"a\"\nprefix = [\"a::\"]\n");
    assert!(e.message.contains("category"), "{e}");
    assert_eq!(e.line, 2, "{e}");
}

#[test]
fn a_failed_file_adds_nothing() {
    let mut set = RuleSet::builtin();
    let before = set.layers().len();
    assert!(set.add_toml("[[layer]]\nname = \"new\"\ncategory = \"x\"\nprefix = [\"a::\"]\n[[layer]]\nname = \"bad\"\n", "t").is_err());
    assert_eq!(set.layers().len(), before);
    assert!(set.layer("new").is_none());
}

#[test]
fn later_files_win_and_override_by_name() {
    let mut set = RuleSet::builtin();
    let f = user("sqlx_core::pool::inner::PoolInner<DB>::acquire");
    assert_eq!(layer_of(&set, &f).as_deref(), Some("sqlx pool"));
    // A new layer for a narrower prefix takes precedence over the catalog.
    set.add_toml("[[layer]]\nname = \"my pool\"\ncategory = \"database\"\nprefix = [\"sqlx_core::pool::inner::\"]\n", "app.toml").unwrap();
    assert_eq!(layer_of(&set, &f).as_deref(), Some("my pool"));
    assert_eq!(set.layer("my pool").unwrap().origin, "app.toml");
    assert!(!set.layer("my pool").unwrap().is_builtin());
    // Overriding a catalog layer by name replaces its rules and category.
    set.add_toml("[[layer]]\nname = \"uuid\"\ncategory = \"request ids\"\nprefix = [\"nanoid::\"]\n", "o.toml").unwrap();
    assert_eq!(set.layer("uuid").unwrap().category, "request ids");
    assert_eq!(layer_of(&set, &user("uuid::v4::new_v4")), None, "old uuid rules are gone");
    assert_eq!(layer_of(&set, &user("nanoid::gen")).as_deref(), Some("uuid"));
    assert_eq!(set.layers().iter().filter(|l| l.name == "uuid").count(), 1);
}

#[test]
fn missing_file_is_an_io_error() {
    let mut set = RuleSet::empty();
    let e = set.add_file(std::path::Path::new("/nonexistent/rules.toml")).unwrap_err();
    assert!(matches!(e, RulesFileError::Io { .. }), "{e}");
    assert!(e.to_string().contains("/nonexistent/rules.toml"));
}

#[test]
fn file_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r.toml");
    std::fs::write(&p, "[[layer]]\nname = 1\n").unwrap();
    let e = RuleSet::builtin_with_files(&[&p]).unwrap_err();
    match e {
        RulesFileError::Rule(r) => {
            assert_eq!(r.line, 2);
            assert_eq!(r.origin, p.display().to_string());
        }
        other => panic!("{other}"),
    }
}

#[test]
fn catalog_classifies_the_rust_web_stack() {
    let set = RuleSet::builtin();
    assert!(set.layers().iter().all(|l| l.origin == DEFAULT_ORIGIN));
    let reg = "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f";
    let cases: Vec<(Frame, &str)> = vec![
        (user("<sqlx_postgres::connection::PgConnection as sqlx_core::connection::Connection>::ping::{{closure}}"), "sqlx ping"),
        (user("sqlx_core::pool::inner::PoolInner<DB>::acquire::{{closure}}"), "sqlx pool"),
        (user("<sqlx_postgres::arguments::PgArguments as sqlx_core::arguments::Arguments>::add"), "sqlx execute"),
        (user("hyper::proto::h1::dispatch::Dispatcher<D,Bs,I,T>::poll_write"), "hyper"),
        (inlined("parse_headers<hyper::proto::h1::role::Server>", &format!("{reg}/hyper-1.12.0/src/proto/h1/role.rs")), "hyper h1 parse"),
        (user("axum::routing::path_router::PathRouter<S,_>::call_with_state"), "axum routing"),
        (user("<tower_http::compression::future::ResponseFuture<F> as core::future::future::Future>::poll"), "tower-http compression"),
        (inlined("call<X>", &format!("{reg}/tower-http-0.6.11/src/request_id.rs")), "tower-http request-id"),
        (user("serde_json::ser::format_escaped_str_contents"), "serde_json"),
        (user("jsonwebtoken::decoding::decode"), "jsonwebtoken"),
        (user("uuid::v4::<impl uuid::Uuid>::new_v4"), "uuid"),
        (user("metrics::key::Key::builder"), "metrics"),
        (user("tracing_core::dispatcher::get_default"), "tracing"),
        (inlined("lock", "/rustc/5980/library/std/src/sys/sync/mutex/futex.rs"), "std sync"),
        (user("mi_malloc_aligned"), "alloc"),
        (user("__rust_dealloc"), "alloc"),
        (user("tokio::task::spawn::spawn"), "tokio spawn"),
        (user("tokio::runtime::scheduler::multi_thread::handle::Handle::bind_new_task"), "tokio spawn"),
        (user("tokio::runtime::task::harness::Harness<T,S>::poll"), "tokio scheduler"),
        (user("tokio::runtime::io::registration::Registration::poll_ready"), "tokio I/O driver"),
        (kernel("tcp_sendmsg_locked"), "kernel net"),
        (kernel("futex_wait"), "kernel futex"),
        (kernel("__schedule"), "kernel sched"),
        // A transparent huge page zeroed in a page fault of the heap (stacks of brotli's table
        // allocation: `_mi_memset` -> `asm_exc_page_fault` -> `do_huge_pmd_anonymous_page` ->
        // `vma_alloc_anon_folio_pmd` -> `folio_zero_user` -> `clear_page_erms`) is memory, not
        // files; a page-cache read is files.
        (kernel("folio_zero_user"), "kernel mm"),
        (kernel("clear_page_erms"), "kernel mm"),
        (kernel("do_huge_pmd_anonymous_page"), "kernel mm"),
        (kernel("filemap_read"), "kernel fs"),
        (kernel("folio_wait_bit_common"), "kernel fs"),
        (kernel("do_syscall_64"), "kernel syscalls"),
        (kernel("bpf_trace_run2"), "profiler BPF"),
    ];
    for (f, want) in cases {
        assert_eq!(layer_of(&set, &f).as_deref(), Some(want), "{} ({})", f.function, frame_path(&f));
    }
    // A kernel-only rule never takes a user frame, and unknown app code stays unattributed.
    assert_eq!(layer_of(&set, &user("futex_wait")), None);
    // Kernel helpers have no layer of their own: they count to their caller's.
    assert_eq!(layer_of(&set, &kernel("_raw_spin_unlock_irqrestore")), None);
    assert_eq!(layer_of(&set, &user("my_app::handlers::list")), None);
}

#[test]
fn target_app_rules_cover_its_twelve_layers() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target-app/rules.toml");
    let set = RuleSet::builtin_with_files(&[&path]).unwrap();
    let app: Vec<&str> = set.layers().iter().filter(|l| !l.is_builtin()).map(|l| l.name.as_str()).collect();
    assert_eq!(app.len(), 12, "{app:?}");
    let src = "/work/main/target-app/src";
    let cases: Vec<(Frame, &str)> = vec![
        (user("<target_app::layers::request_context::ContextService<S> as tower_service::Service<http::request::Request<ReqB>>>::call"), "request context"),
        (inlined("{async_block#3}<X>", &format!("{src}/layers/request_context.rs")), "request context"),
        (user("<tower_http::catch_panic::CatchPanic<S,T> as tower_service::Service<R>>::call"), "panic catcher"),
        (user("<target_app::layers::timeout::RequestTimeout<S> as tower_service::Service<http::request::Request<ReqB>>>::call::{{closure}}"), "timeout"),
        (user("<tower_http::set_header::response::single_header::ResponseFuture<F> as core::future::future::Future>::poll"), "security headers"),
        (user("<tower_http::compression::future::ResponseFuture<F> as core::future::future::Future>::poll"), "compression"),
        (user("target_app::layers::error_rendering::render"), "error rendering"),
        (user("target_app::layers::maintenance::lock_maintenance_mutex"), "maintenance"),
        (user("target_app::layers::rate_limit::lock_rate_table"), "rate limit"),
        (user("<target_app::layers::body_limit::BodyLimit<S> as tower_service::Service<http::request::Request<axum_core::body::Body>>>::call"), "body limit"),
        (user("target_app::auth::AuthService::verify"), "authentication"),
        (user("<target_app::layers::unit_of_work::UnitOfWork<S> as tower_service::Service<http::request::Request<ReqB>>>::call::{{closure}}"), "unit of work"),
        (user("target_app::extract::json::parse_json_value"), "router, access check, handler"),
        (user("target_app::routes::deals::deals_create::{{closure}}"), "router, access check, handler"),
    ];
    for (f, want) in cases {
        assert_eq!(layer_of(&set, &f).as_deref(), Some(want), "{}", f.function);
    }
    // Library frames the app rules do not claim keep their catalog layer.
    assert_eq!(layer_of(&set, &user("serde_json::ser::format_escaped_str_contents")).as_deref(), Some("serde_json"));
}

/// `[[cost]]`, `[[frame_set]]` and `[[thread_role]]` errors name the offending line; a file's
/// cost replaces the built-in one of the same id.
#[test]
fn cost_catalog_errors_have_their_lines() {
    let e = err("[[cost]]\nid = \"x\"\ntitle = \"t {nope} {cpu_us}\"\n[cost.on_cpu]\nframes = ['^a::']\n");
    assert_eq!(e.line, 3, "{e}");
    assert!(e.message.contains("unknown figure {nope}"), "{e}");
    let e = err("[[cost]]\nid = \"x\"\ntitle = \"t\"\n[cost.on_cpu]\nframes = ['@nope']\n");
    assert_eq!(e.line, 5, "{e}");
    assert!(e.message.contains("no frame_set named \"nope\""), "{e}");
    let e = err("[[cost]]\nid = \"x\"\ndetector = \"no-such\"\nwhy_code = \"w\"\n");
    assert_eq!(e.line, 3, "{e}");
    assert!(e.message.contains("unknown detector"), "{e}");
    let e = err("[[cost]]\nid = \"x\"\ntitle = \"t\"\n");
    assert!(e.message.contains("neither a detector nor"), "{e}");
    let e = err("[[cost]]\nid = \"x\"\ntitle = \"t\"\n[cost.off_cpu]\nroles = [\"runtime worker\"]\n");
    assert!(e.message.contains("off_cpu needs min_us_per_request"), "{e}");
    let e = err("[[cost]]\nid = \"x\"\ntitle = \"{statement} {executions}\"\n[cost.statements]\nmin_executions_per_request = 0.0\n");
    assert_eq!(e.line, 4, "{e}");
    assert!(e.message.contains("min_executions_per_request must be above 0"), "{e}");
    let e = err("[[cost]]\nid = \"x\"\ntitle = \"{idle_ms} {latency_share} {endpoint}\"\n[cost.transactions]\nmin_idle_us_per_request = 1.0\nmin_worker_idle_share = 1.5\n");
    assert_eq!(e.line, 4, "{e}");
    assert!(e.message.contains("min_worker_idle_share must be within 0..1"), "{e}");
    let e = err("[[thread_role]]\nname = \"w\"\nframes = ['.*']\n");
    assert_eq!(e.line, 3, "{e}");
    assert!(e.message.contains("matches every frame"), "{e}");
    // A frame set defined in the file is usable below it; a user's cost replaces the built-in.
    let mut set = RuleSet::builtin();
    let n = set.costs().len();
    set.add_toml(
        "[[frame_set]]\nname = \"mine\"\nframes = ['^my_app::pool::']\n[[cost]]\nid = \"lock-contention\"\ntitle = \"mine: {blocked_us} µs\"\n[cost.off_cpu]\nframes = ['@mine', '@lock']\nmin_us_per_request = 1.0\n",
        "user.toml",
    )
    .unwrap();
    assert_eq!(set.costs().len(), n);
    let c = set.costs().iter().find(|c| c.id == "lock-contention").unwrap();
    assert_eq!(c.origin, "user.toml");
    assert_eq!(set.costs()[0].id, "lock-contention", "a later file's costs come first");
    let frames = &c.off_cpu.as_ref().unwrap().frames;
    assert!(frames.iter().any(|r| r.is_match("my_app::pool::get")) && frames.iter().any(|r| r.is_match("std::sys::sync::mutex::futex::Mutex::lock_contended")));
    // The built-in catalog has the frame sets the Rust code uses.
    for name in ["runtime-park", "lock", "lock-wait", "spawn", "heap-growth", "connection-setup", "db-driver"] {
        assert!(RuleSet::builtin().frame_set(name).is_some(), "{name}");
    }
}
