//! Short names of Rust frames, for the text drawn in flamegraph frames.
//!
//! A demangled Rust name carries every generic argument of every type on its path: a frame of
//! a tower middleware stack is thousands of characters long, so a flamegraph frame shows only
//! its last few characters (`..::Global>>`). [`shorten`] keeps what a person reads a frame for:
//!
//! - the crate, the last two modules or types and the function: at most four path segments,
//!   the middle ones replaced by `…` (`tokio::…::worker::Context::run_task`);
//! - generic arguments folded to `<…>` (`RawVec<…>::grow_one`);
//! - `<impl Trait for Type>` and `<Type as Trait>` segments as the type's own last segment,
//!   without a reference (`&`, `&mut `); a method of a trait object as `dyn Trait<…>::method`;
//! - closures and async blocks as `{closure}`, `{async block}`, `{async fn}`, impl blocks as
//!   `{impl}`, without their index (`{closure#0}`, `{{closure}}`, `{async_block_env#1}`).
//!
//! Names that are not Rust paths (C functions, kernel functions, `[unknown] (libc.so.6)`)
//! are kept as they are. The full name is never lost: flamegraphs keep it in each frame's
//! title (hover, search) and the folded files keep it in every line.

use crate::attribute::rules::{frame_path, matching_angle};
use crate::profile::{Frame, FrameKind};

/// Most path segments kept before the trailing closures: the crate and the last three.
pub const MAX_SEGMENTS: usize = 4;

/// The short form of `frame`: [`shorten`] of its rule path ([`frame_path`]: `<T as Trait>::m`
/// read as `T::m`, inlined frames prefixed with the module path of their source file); kernel
/// frames and `[unknown]` frames as [`Frame::display_name`] gives them. No `_[k]`/`_[i]`
/// suffix.
pub fn short_name(frame: &Frame) -> String {
    if frame.kind == FrameKind::Kernel || frame.function.starts_with('[') {
        return frame.display_name().into_owned();
    }
    shorten(&frame_path(frame))
}

/// The short form of a Rust path (see the module docs). A name without `::` and `<` is
/// returned unchanged, and so is one that starts with `[`.
pub fn shorten(path: &str) -> String {
    if path.starts_with('[') || (!path.contains("::") && !path.contains('<') && !path.contains('{')) {
        return path.to_string();
    }
    let path = strip_hash(path);
    // `<&T as Trait>::m` reads `&T::m`: the reference is in the full name.
    let path = path.strip_prefix("&mut ").or_else(|| path.strip_prefix('&')).unwrap_or(path);
    let mut segments: Vec<String> = split_segments(path).into_iter().map(|s| normalize(&s)).filter(|s| !s.is_empty()).collect();
    if segments.is_empty() {
        return path.to_string();
    }
    // `dyn A + B + C::m` (a method of a trait object): its first bound's type and the method.
    if path.starts_with("dyn ") {
        if let Some(first) = segments.iter().position(|s| s.contains(" + ")) {
            let ty = segments[first].split(" + ").next().unwrap_or("").to_string();
            let method = segments.last().cloned().unwrap_or_default();
            return format!("dyn {ty}::{method}");
        }
    }
    let tail = segments.iter().rev().take_while(|s| s.starts_with('{')).count();
    let core_len = segments.len() - tail;
    if core_len > MAX_SEGMENTS {
        let keep_from = core_len - (MAX_SEGMENTS - 1);
        segments.splice(1..keep_from, ["…".to_string()]);
    }
    segments.join("::")
}

/// `path` without a legacy-mangling hash suffix (`::h0123456789abcdef`).
fn strip_hash(path: &str) -> &str {
    if let Some((head, hash)) = path.rsplit_once("::h") {
        if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return head;
        }
    }
    path
}

/// Splits `path` at its top-level `::`, folding generic arguments to `<…>` and qualified
/// segments (`<impl Trait for Type>`, `<Type as Trait>`, `<Type>`) to the type's last segment.
fn split_segments(path: &str) -> Vec<String> {
    let b = path.as_bytes();
    let mut segments = Vec::new();
    let mut cur = String::new();
    // Depth of (), [] and {} groups: `::` inside them does not split.
    let mut nest = 0usize;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'<' {
            let close = matching_angle(b, i);
            let inner = path.get(i + 1..close).unwrap_or("");
            if cur.trim().is_empty() && nest == 0 {
                if inner.starts_with("impl ") || top_level_split(inner, " as ").is_some() || top_level_split(inner, ", ").is_none() {
                    cur = qualified_type(inner);
                } else {
                    // `f::<A, B>`: the generic arguments of the segment before.
                    cur = segments.pop().unwrap_or_default();
                    cur.push_str("<…>");
                }
            } else {
                cur.push_str("<…>");
            }
            i = close + 1;
            continue;
        }
        match c {
            b'(' | b'[' | b'{' => nest += 1,
            b')' | b']' | b'}' => nest = nest.saturating_sub(1),
            _ => {}
        }
        if nest == 0 && c == b':' && b.get(i + 1) == Some(&b':') {
            segments.push(std::mem::take(&mut cur));
            i += 2;
            continue;
        }
        // Whole characters: `path[i..]` starts at a char boundary here (ASCII bytes only are
        // matched above, so a multi-byte character is copied whole).
        let ch = path[i..].chars().next().unwrap_or(' ');
        cur.push(ch);
        i += ch.len_utf8();
    }
    segments.push(cur);
    segments
}

/// The type a qualified segment stands for, as its last path segment: `impl Trait for Type`
/// -> `Type`, `Type as Trait` -> `Type`, `impl Type` -> `Type`; references (`&`, `&mut `)
/// dropped.
fn qualified_type(inner: &str) -> String {
    let ty = if let Some(rest) = inner.strip_prefix("impl ") {
        top_level_split(rest, " for ").map_or(rest, |(_, ty)| ty)
    } else {
        top_level_split(inner, " as ").map_or(inner, |(ty, _)| ty)
    };
    let ty = ty.trim();
    let ty = ty.strip_prefix("&mut ").or_else(|| ty.strip_prefix('&')).unwrap_or(ty).trim();
    split_segments(ty).into_iter().map(|s| normalize(&s)).rfind(|s| !s.is_empty()).unwrap_or_default()
}

/// Splits `s` at the first `sep` outside `<>`, `()`, `[]`.
fn top_level_split<'a>(s: &'a str, sep: &str) -> Option<(&'a str, &'a str)> {
    let b = s.as_bytes();
    let mut depth = 0i32;
    for i in 0..b.len() {
        match b[i] {
            b'<' | b'(' | b'[' => depth += 1,
            b'>' if i > 0 && b[i - 1] == b'-' => {}
            b'>' | b')' | b']' => depth -= 1,
            _ => {}
        }
        if depth == 0 && s[i..].starts_with(sep) {
            return Some((&s[..i], &s[i + sep.len()..]));
        }
    }
    None
}

/// One segment in its short form: closures, async blocks, impl blocks and shims without their
/// index, and without generic arguments.
fn normalize(segment: &str) -> String {
    let s = segment.trim();
    // `call_once{{vtable.shim}}`: a shim marker glued to a name.
    if let Some(name) = s.strip_suffix("{{vtable.shim}}") {
        return format!("{name}{{shim}}");
    }
    if !s.starts_with('{') {
        return s.to_string();
    }
    let head = s.trim_start_matches('{');
    let word: String = head.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.' || *c == ':').collect();
    let short = match word.as_str() {
        "closure" | "closure_env" => "{closure}",
        "async_block" | "async_block_env" => "{async block}",
        "async_fn" | "async_fn_env" => "{async fn}",
        "impl" => "{impl}",
        "vtable.shim" | "shim:vtable" | "shim" => "{shim}",
        "constant" => "{constant}",
        _ => return s.to_string(),
    };
    short.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real frames of target-app (agent/tests/data/attribute/recorded/, as `frame_path` gives
    /// them: `<T as Trait>::m` read as `T::m`), each with the short form worked out by hand
    /// from the rules in the module docs.
    #[test]
    fn shortens_real_rust_frames() {
        let cases = [
            // Four segments or fewer are kept; longer paths keep the crate and the last three.
            ("tokio::runtime::task::core::Core<T,S>::set_stage", "tokio::…::core::Core<…>::set_stage"),
            ("http::header::map::HeaderMap<T>::get", "http::…::map::HeaderMap<…>::get"),
            ("mio::poll::Poll::poll", "mio::poll::Poll::poll"),
            ("tokio::net::tcp::stream::TcpStream::try_write", "tokio::…::stream::TcpStream::try_write"),
            ("tokio::runtime::scheduler::multi_thread::worker::Context::run", "tokio::…::worker::Context::run"),
            // `<ContextService<S> as Service<Request<ReqB>>>::call`, impl stripped by frame_path.
            ("target_app::layers::request_context::ContextService<S>::call", "target_app::…::request_context::ContextService<…>::call"),
            // Legacy closures, kept after the path, one each.
            ("sqlx_core::pool::connection::PoolConnection<DB>::return_to_pool::{{closure}}", "sqlx_core::…::connection::PoolConnection<…>::return_to_pool::{closure}"),
            ("axum::serve::handle_connection::{{closure}}::{{closure}}", "axum::serve::handle_connection::{closure}::{closure}"),
            // `<impl Trait for Type>` as the type.
            (
                "sqlx_core::pool::executor::<impl sqlx_core::executor::Executor for &sqlx_core::pool::Pool<DB>>::fetch_optional::{{closure}}",
                "sqlx_core::…::executor::Pool<…>::fetch_optional::{closure}",
            ),
            ("chrono::format::formatting::<impl chrono::format::OffsetFormat>::format", "chrono::…::formatting::OffsetFormat::format"),
            (
                "jsonwebtoken::header::_::<impl serde_core::de::Deserialize for jsonwebtoken::header::Header>::deserialize::__FieldVisitor::visit_str",
                "jsonwebtoken::…::deserialize::__FieldVisitor::visit_str",
            ),
            // Generic arguments with paths, fn pointers (`->`) and dyn types inside.
            (
                "core::ptr::drop_in_place<tracing::instrument::Instrumented<sqlx_postgres::connection::executor::<impl sqlx_postgres::connection::PgConnection>::run::{{closure}}::{{closure}}::{{closure}}>>",
                "core::ptr::drop_in_place<…>",
            ),
            (
                "http_body_util::boxed_unsync<http_body_util::combinators::map_err::MapErr<axum_core::body::Body, fn(axum_core::error::Error) -> alloc::boxed::Box<(dyn core::error::Error + core::marker::Send + core::marker::Sync), alloc::alloc::Global>>>",
                "http_body_util::boxed_unsync<…>",
            ),
            ("core::ops::function::FnOnce::call_once{{vtable.shim}}", "core::…::function::FnOnce::call_once{shim}"),
            // `<&TcpStream as Write>::write_vectored`: the reference dropped.
            ("&mio::net::tcp::stream::TcpStream::write_vectored", "mio::…::stream::TcpStream::write_vectored"),
            // A primitive's impl (`<usize as Display>::fmt`) and a slice type.
            ("usize::fmt", "usize::fmt"),
            ("[(K,V); N]::into_response_parts", "[(K,V); N]::into_response_parts"),
            // Not Rust paths: unchanged.
            ("mi_page_malloc_zero", "mi_page_malloc_zero"),
            ("__GI___pthread_disable_asynccancel", "__GI___pthread_disable_asynccancel"),
            ("[unknown] (libc.so.6)", "[unknown] (libc.so.6)"),
            // Generic arguments as a segment of their own (`signed::<i128, f64, …>`).
            (
                "compiler_builtins::float::conv::int_to_float::signed::<i128, f64, compiler_builtins::float::conv::int_to_float::u128_to_f64_bits>",
                "compiler_builtins::…::conv::int_to_float::signed<…>",
            ),
            // A legacy hash suffix.
            ("std::rt::lang_start_internal::h5d3a2fa7e2d3c5c1", "std::rt::lang_start_internal"),
        ];
        for (full, short) in cases {
            assert_eq!(shorten(full), short, "{full}");
        }
    }

    /// The 3,925-character inlined frame of the recorded profiles: `Box::new` of a tower
    /// `MapFuture` (DWARF names it `new<…>`, its file is alloc's `boxed.rs`), with v0-style
    /// `{impl#0}` and `{closure_env#0}` inside its generics, all folded.
    #[test]
    fn shortens_an_inlined_frame_with_its_module_path() {
        let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/attribute/recorded/all-wire-db.profile.json.gz");
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(std::fs::File::open(&data).unwrap()), &mut bytes).unwrap();
        let profile = crate::profile::json::from_slice(&bytes, &data).unwrap();
        let longest = profile.frames.iter().filter(|f| f.kind == FrameKind::User).max_by_key(|f| f.function.len()).unwrap();
        assert_eq!(longest.function.len(), 3925);
        assert!(longest.inlined);
        assert!(longest.function.starts_with("new<tower::util::map_future::MapFuture<"));
        assert_eq!(short_name(longest), "alloc::boxed::new<…>");
        // Every frame of the profile: short names have no generic argument left, and are
        // never longer than the path they come from.
        for f in &profile.frames {
            let s = short_name(f);
            let full = if f.kind == FrameKind::Kernel { f.display_name().into_owned() } else { frame_path(f) };
            assert!(s.chars().count() <= full.chars().count(), "{full} -> {s}");
            assert!(!s.contains("::<") && !s.contains("<<"), "{} -> {s}", f.function);
        }
    }

    /// A method of a trait object, `<&dyn Fn<…> + Sync + RefUnwindSafe as FnOnce<()>>::call_once`
    /// (std's `lang_start`, in the recorded profiles).
    #[test]
    fn trait_objects() {
        let full = "<&dyn core::ops::function::Fn<(), Output = i32> + core::marker::Sync + core::panic::unwind_safe::RefUnwindSafe as core::ops::function::FnOnce<()>>::call_once";
        let path = crate::attribute::rules::strip_impl(full);
        assert_eq!(shorten(&path), "dyn Fn<…>::call_once", "{path}");
    }

    #[test]
    fn closures_and_async_blocks_of_v0_names() {
        assert_eq!(normalize("{closure#0}"), "{closure}");
        assert_eq!(normalize("{closure_env#0}<…>"), "{closure}");
        assert_eq!(normalize("{async_block_env#1}"), "{async block}");
        assert_eq!(normalize("{async_fn_env#0}"), "{async fn}");
        assert_eq!(normalize("{impl#5}"), "{impl}");
        assert_eq!(normalize("{other#1}"), "{other#1}");
        assert_eq!(shorten("tower_http::catch_panic::{impl#5}::call::{closure_env#0}<S, B>"), "tower_http::catch_panic::{impl}::call::{closure}");
    }
}
