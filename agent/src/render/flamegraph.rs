//! Flamegraph SVGs of folded stacks, drawn by inferno (`inferno::flamegraph`, the Rust port
//! of Brendan Gregg's `flamegraph.pl`).
//!
//! With [`FrameStyles`] (built from a profile and the rules catalog), frames are drawn with
//! their short Rust names ([`super::names`]) and coloured by the category of their layer
//! ([`category_colour`]); each frame's title (the tooltip, the line under the graph on hover,
//! and what the search box matches) keeps the full name with its count. inferno's options do
//! that much: a palette map (name -> colour) and per-name frame attributes (`data-short` on
//! each frame's `<g>`). The graph's script computes the text of a frame from its title when
//! it loads, zooms or resizes; [`write_svg_styled`] points it at `data-short` instead (a
//! `frame_label` function in the script), so the drawn text is the short name at any zoom.

use std::collections::HashMap;
use std::io::Write;

use inferno::flamegraph::{self, color, Options as InfernoOptions};

use crate::attribute::{Attribution, RuleSet};
use crate::profile::{FrameKind, Profile};

/// Which flamegraph to draw: it sets the palette and the unit of the counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// On-CPU samples: the Rust palette (kernel frames `_[k]` apart), counts are samples.
    OnCpu,
    /// Off-CPU time: the I/O palette, counts are µs.
    OffCpu,
}

/// How frames are named and coloured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Draw each frame's short Rust name ([`super::names::short_name`]) instead of its full
    /// demangled name, which stays in the frame's title (hover, search) and in the folded
    /// files. Default is `true`.
    pub short_names: bool,
    /// Colour frames by the category of their layer ([`category_colour`]) instead of
    /// inferno's palettes. Default is `true`.
    pub layer_colours: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options { short_names: true, layer_colours: true }
    }
}

/// Category of the standard library's and libc's frames that no rule claims: helpers whose
/// time the layer table gives to their caller's layer.
pub const HELPER_CATEGORY: &str = "std/libc";

/// Category of the pseudo-frames of folded stacks: the thread name at the root,
/// `[truncated]`, lost stacks.
pub const OTHER_CATEGORY: &str = "thread, marker";

/// Fill colours of the layer categories of the built-in catalog (`rules/rust-web.toml`),
/// of crate layers ([`crate::attribute::layers::CRATE_CATEGORY`], `app`), of
/// [`HELPER_CATEGORY`] and of [`OTHER_CATEGORY`], as `#rrggbb`: light enough for black text.
pub const CATEGORY_COLOURS: &[(&str, &str)] = &[
    ("app", "#f4a261"),
    ("framework", "#7fa7d9"),
    ("http", "#a9c8f0"),
    ("middleware", "#8fd3c8"),
    ("auth", "#c9a0dc"),
    ("database", "#8cc084"),
    ("serialization", "#f2d479"),
    ("runtime", "#c5cbd3"),
    ("sync", "#d2ac92"),
    ("alloc", "#f7b7d2"),
    ("ids", "#d8cfc4"),
    ("observability", "#b5dfe0"),
    ("kernel", "#f4a6a6"),
    ("profiler", "#a6a6a6"),
    ("crate", "#e0d5a8"),
    (HELPER_CATEGORY, "#e4e4e4"),
    (OTHER_CATEGORY, "#f6f6f6"),
];

fn hex_rgb(hex: &str) -> (u8, u8, u8) {
    let v = u32::from_str_radix(hex.trim_start_matches('#'), 16).unwrap_or(0xdddddd);
    ((v >> 16) as u8, (v >> 8) as u8, v as u8)
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100000001b3))
}

/// The fill colour of a layer category, `#rrggbb`: [`CATEGORY_COLOURS`], else (a category of a
/// user's own rules) a light colour picked from the name's hash, the same on every run.
pub fn category_colour(category: &str) -> String {
    if let Some((_, c)) = CATEGORY_COLOURS.iter().find(|(k, _)| *k == category) {
        return (*c).to_string();
    }
    // A pastel from the hash: each channel in 150..=230.
    let h = fnv(category);
    let ch = |shift: u32| 150 + ((h >> shift) % 81) as u8;
    format!("#{:02x}{:02x}{:02x}", ch(0), ch(8), ch(16))
}

/// The colour of one frame: its category's, a little lighter or darker by the name's hash so
/// that neighbouring frames of one layer stay apart (at most 12 levels of 255 either way).
fn frame_colour(category: &str, name: &str) -> color::Color {
    let (r, g, b) = hex_rgb(&category_colour(category));
    let shift = (fnv(name) % 25) as i16 - 12;
    let adj = |c: u8| (i16::from(c) + shift).clamp(0, 255) as u8;
    color::Color { r: adj(r), g: adj(g), b: adj(b) }
}

/// Per folded frame name ([`crate::profile::folded::frame_name`]): the short name drawn in the
/// frame and the layer category that colours it.
#[derive(Debug, Clone, Default)]
pub struct FrameStyles {
    by_name: HashMap<String, (String, String)>,
}

impl FrameStyles {
    /// The styles of every frame of `profile`: its short name and the category of its owner
    /// layer under `rules` ([`Attribution::frame_owner`]: the rule's layer, else the crate's),
    /// `kernel` for kernel frames no rule claims and [`HELPER_CATEGORY`] for the other
    /// transparent frames. When frames of one folded name differ (rare), the first wins.
    ///
    /// Stacks that name frames the profile does not have (a hand-edited file; they fold as
    /// `[invalid]`) are attributed without those frames.
    pub fn of(profile: &Profile, rules: &RuleSet) -> FrameStyles {
        let n = profile.frames.len();
        let valid = profile.stacks.iter().all(|s| s.frames.iter().all(|&f| (f as usize) < n));
        let attr = if valid {
            Attribution::new(profile, rules, None)
        } else {
            let mut clean = profile.clone();
            for s in &mut clean.stacks {
                s.frames.retain(|&f| (f as usize) < n);
            }
            Attribution::new(&clean, rules, None)
        };
        let mut by_name = HashMap::with_capacity(profile.frames.len());
        for (i, f) in profile.frames.iter().enumerate() {
            let name = crate::profile::folded::frame_name(f);
            if by_name.contains_key(&name) {
                continue;
            }
            let category = match attr.frame_owner.get(i).copied().flatten() {
                Some(l) => attr.layers[l].category.clone(),
                None if f.kind == FrameKind::Kernel => "kernel".to_string(),
                None => HELPER_CATEGORY.to_string(),
            };
            by_name.insert(name, (super::names::short_name(f), category));
        }
        FrameStyles { by_name }
    }

    /// Adds the frames of `other` that `self` does not name (the styles of two profiles, for
    /// a differential flamegraph).
    pub fn merge(&mut self, other: FrameStyles) {
        for (name, style) in other.by_name {
            self.by_name.entry(name).or_insert(style);
        }
    }

    /// The short name and category of a folded frame name, when it is a frame of the profile.
    pub fn get(&self, folded_name: &str) -> Option<(&str, &str)> {
        self.by_name.get(folded_name).map(|(s, c)| (s.as_str(), c.as_str()))
    }

    /// The categories of the frames of `lines` (folded stacks), each once, in the order of
    /// [`CATEGORY_COLOURS`] and then by name: what a legend of that flamegraph lists.
    pub fn categories_in(&self, lines: &[String]) -> Vec<String> {
        let mut seen: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
        for line in lines {
            let stack = line.rsplit_once(' ').map_or(line.as_str(), |(s, _)| s);
            for name in stack.split(';') {
                seen.insert(self.get(name).map_or(OTHER_CATEGORY, |(_, c)| c));
            }
        }
        let mut out: Vec<String> = CATEGORY_COLOURS.iter().filter(|(k, _)| seen.contains(k)).map(|(k, _)| k.to_string()).collect();
        out.extend(seen.iter().filter(|c| !CATEGORY_COLOURS.iter().any(|(k, _)| k == *c)).map(|c| c.to_string()));
        out
    }
}

/// Draws `lines` (folded stacks, `stack weight`) as an SVG into `out`, with `title` on top
/// and `subtitle` below it, in inferno's colours and with the full names in frames.
///
/// With no lines (an empty profile) inferno refuses to draw; a small valid SVG holding the
/// title and "no samples" is written instead, so that every run has its file.
///
/// # Errors
/// Whatever `out` returns, or inferno's error for malformed lines.
pub fn write_svg(lines: &[String], style: Style, title: &str, subtitle: Option<&str>, out: impl Write) -> std::io::Result<()> {
    write_svg_styled(lines, style, title, subtitle, None, Options { short_names: false, layer_colours: false }, out)
}

/// [`write_svg`] with frames named and coloured by `styles` as `options` say (without
/// `styles`, as [`write_svg`]).
///
/// # Errors
/// Whatever `out` returns, or inferno's error for malformed lines.
pub fn write_svg_styled(
    lines: &[String],
    style: Style,
    title: &str,
    subtitle: Option<&str>,
    styles: Option<&FrameStyles>,
    options: Options,
    mut out: impl Write,
) -> std::io::Result<()> {
    if lines.is_empty() {
        return write_empty_svg(title, subtitle, out);
    }
    let styles = styles.filter(|_| options.short_names || options.layer_colours);
    let Some(styles) = styles else {
        let mut opts = inferno_options(style, title, subtitle);
        return flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut out);
    };
    let mut palette = color::PaletteMap::default();
    if options.layer_colours {
        for name in frame_names(lines.iter().map(|l| stack_of(l))) {
            let category = styles.get(name).map_or(OTHER_CATEGORY, |(_, c)| c);
            palette.insert(name, frame_colour(category, name));
        }
    }
    let attrs = if options.short_names { short_name_attrs(lines.iter().map(|l| stack_of(l)), styles) } else { String::new() };
    let mut opts = inferno_options(style, title, subtitle);
    if options.layer_colours {
        opts.palette_map = Some(&mut palette);
    }
    if !attrs.is_empty() {
        opts.func_frameattrs = flamegraph::FuncFrameAttrsMap::from_reader(attrs.as_bytes())?;
    }
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut svg)?;
    if options.short_names {
        svg = label_frames_by_short_name(svg);
    }
    out.write_all(&svg)
}

/// The stack of a folded line (`stack weight`): the line without its weight.
fn stack_of(line: &str) -> &str {
    line.rsplit_once(' ').map_or(line, |(s, _)| s)
}

/// Each frame name of `stacks` (folded stacks without their weights), once, in order of
/// appearance.
fn frame_names<'a>(stacks: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut names = Vec::new();
    for stack in stacks {
        for name in stack.split(';') {
            if seen.insert(name) {
                names.push(name);
            }
        }
    }
    names
}

/// inferno's frame-attribute lines (`name<TAB>g_extra=data-short="SHORT"`) for the frames of
/// `stacks` (folded, without weights) whose short name differs from their name. Names with tabs, line breaks,
/// surrounding blanks or quotes cannot be written there and keep their full name.
fn short_name_attrs<'a>(stacks: impl Iterator<Item = &'a str>, styles: &FrameStyles) -> String {
    let plain = |s: &str| !s.contains(['\t', '\n', '\r', '"']) && s.trim() == s && !s.is_empty();
    let mut attrs = String::new();
    for name in frame_names(stacks) {
        let short = styles.get(name).map_or(name, |(s, _)| s);
        if short != deannotate(name) && plain(name) && plain(short) {
            attrs.push_str(name);
            attrs.push_str("\tg_extra=data-short=\"");
            attrs.push_str(short);
            attrs.push_str("\"\n");
        }
    }
    attrs
}

/// Whose samples give a differential flamegraph its frame widths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Widths {
    /// HEAD's (`diff.svg`): what HEAD spends, coloured by the change; code HEAD no longer runs
    /// has no width.
    Head,
    /// BASE's (`diff-base.svg`, Brendan Gregg's "negated" graph): shows what shrank or went away.
    Base,
}

/// Draws the differential flamegraph of BASE → HEAD into `out` with inferno
/// (`inferno::differential` pairs the folded stacks, `inferno::flamegraph` draws them).
///
/// `base` and `head` are folded stacks with their sample counts. Frame widths are HEAD's or
/// BASE's samples ([`Widths`]); colours are always the change from BASE to HEAD: red where
/// HEAD has more, blue where it has less. BASE's counts are first scaled by `base_scale` so
/// that the two compare (`head requests / base requests` per request, `head samples / base
/// samples` per sample; rounded to whole samples). With `styles`, frames are drawn with their
/// short names as in [`write_svg_styled`] (their colours stay the change's).
///
/// # Errors
/// Whatever `out` returns, or inferno's error.
#[allow(clippy::too_many_arguments)]
pub fn write_differential_svg(
    base: &[(String, u64)],
    head: &[(String, u64)],
    base_scale: f64,
    widths: Widths,
    title: &str,
    subtitle: &str,
    styles: Option<&FrameStyles>,
    mut out: impl Write,
) -> std::io::Result<()> {
    let mut before = Vec::new();
    for (stack, n) in base {
        let scaled = (*n as f64 * base_scale).round() as u64;
        if scaled > 0 {
            writeln!(before, "{stack} {scaled}")?;
        }
    }
    let mut after = Vec::new();
    for (stack, n) in head {
        writeln!(after, "{stack} {n}")?;
    }
    let mut paired = Vec::new();
    let options = inferno::differential::Options::default();
    match widths {
        Widths::Head => inferno::differential::from_readers(options, &before[..], &after[..], &mut paired)?,
        // inferno draws the second count's widths: put BASE second and negate the colours so
        // that red still means "more in HEAD".
        Widths::Base => inferno::differential::from_readers(options, &after[..], &before[..], &mut paired)?,
    }
    let paired = String::from_utf8_lossy(&paired);
    let lines: Vec<&str> = paired.lines().filter(|l| !l.is_empty()).collect();
    // Nothing to give widths: BASE's graph when every BASE count rounds to 0 once scaled (a
    // head that spends 190x more CPU per request scales BASE by 0.005), inferno refuses it.
    let no_widths = match widths {
        Widths::Head => after.is_empty(),
        Widths::Base => before.is_empty(),
    };
    if lines.is_empty() || no_widths {
        return write_empty_svg(title, Some(subtitle), out);
    }
    let mut options = InfernoOptions::default();
    options.title = title.to_string();
    options.subtitle = Some(subtitle.to_string());
    options.deterministic = true;
    options.name_type = "Function:".to_string();
    options.count_name = "samples".to_string();
    options.negate_differentials = widths == Widths::Base;
    let attrs = styles.map(|st| short_name_attrs(base.iter().chain(head).map(|(s, _)| s.as_str()), st)).unwrap_or_default();
    if !attrs.is_empty() {
        options.func_frameattrs = flamegraph::FuncFrameAttrsMap::from_reader(attrs.as_bytes())?;
    }
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut options, lines.iter().copied(), &mut svg)?;
    if styles.is_some() {
        svg = label_frames_by_short_name(svg);
    }
    out.write_all(&svg)
}

/// inferno's options for `style`, without frame styles.
fn inferno_options<'a>(style: Style, title: &str, subtitle: Option<&str>) -> InfernoOptions<'a> {
    let mut opts = InfernoOptions::default();
    opts.title = title.to_string();
    opts.subtitle = subtitle.map(str::to_string);
    opts.deterministic = true;
    opts.hash = true;
    opts.name_type = "Function:".to_string();
    match style {
        Style::OnCpu => {
            opts.colors = color::Palette::Multi(color::MultiPalette::Rust);
            opts.count_name = "samples".to_string();
        }
        Style::OffCpu => {
            opts.colors = color::Palette::Basic(color::BasicPalette::Io);
            opts.count_name = "µs".to_string();
        }
    }
    opts
}

/// inferno's `deannotate`: the name without its `_[k]`/`_[i]`/`_[j]`/`_[w]` suffix.
fn deannotate(f: &str) -> &str {
    if f.ends_with(']') {
        if let Some(ai) = f.rfind("_[") {
            if f[ai..].len() == 4 && "kwij".contains(&f[ai + 2..ai + 3]) {
                return &f[..ai];
            }
        }
    }
    f
}

/// The expression inferno's script computes a frame's text from (its title without the
/// count), in both of its text-fitting functions.
const TITLE_TEXT_EXPR: &str = r#"find_child(e, "title").textContent.replace(/\([^(]*\)$/,"")"#;

/// The function the script calls instead: a frame's `data-short` attribute when it has one.
const FRAME_LABEL_FN: &str = r#"function frame_label(e) {
    var s = e.getAttribute("data-short");
    return s != null ? s : find_child(e, "title").textContent.replace(/\([^(]*\)$/,"");
}
function g_to_text(e) {"#;

/// Points the script of an inferno SVG at `data-short` for the text drawn in frames (see the
/// module docs), and redraws the frames' static text with their short names
/// ([`short_static_text`]). When the script is not the one expected (another inferno
/// version), the SVG is returned unchanged, with a warning: frames then show their full names.
fn label_frames_by_short_name(svg: Vec<u8>) -> Vec<u8> {
    let text = match String::from_utf8(svg) {
        Ok(t) => t,
        Err(e) => return e.into_bytes(),
    };
    if text.matches(TITLE_TEXT_EXPR).count() != 2 || !text.contains("function g_to_text(e) {") {
        tracing::warn!("inferno's flamegraph script is not the expected one: frames keep their full names");
        return text.into_bytes();
    }
    let text = text.replace(TITLE_TEXT_EXPR, "frame_label(e)").replacen("function g_to_text(e) {", FRAME_LABEL_FN, 1);
    short_static_text(&text).into_bytes()
}

/// `&amp;`, `&lt;`, `&gt;`, `&quot;`, `&apos;` and `&#39;` as the characters they stand for.
fn unescape(s: &str) -> String {
    s.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&apos;", "'").replace("&#39;", "'").replace("&amp;", "&")
}

/// The text inferno drew in each frame with a `data-short` attribute, redrawn with the short
/// name, for viewers that run no script (an SVG shown as an image). inferno fits a name in
/// `fit` characters: whole when shorter, else its first `fit - 2` characters and `..`, and
/// nothing when `fit < 3`; a drawn text ending in `..` therefore has `fit` characters, and one
/// drawn whole has at most `fit - 1` (a short name can be longer than a name drawn whole: an
/// inlined `{closure#0}` gets its module path). Frames whose text is empty stay empty.
fn short_static_text(svg: &str) -> String {
    const G: &str = "<g data-short=\"";
    let mut out = String::with_capacity(svg.len());
    let mut rest = svg;
    while let Some(at) = rest.find(G) {
        let (head, tail) = rest.split_at(at + G.len());
        out.push_str(head);
        let Some(end_attr) = tail.find('"') else {
            rest = tail;
            break;
        };
        let short = unescape(&tail[..end_attr]);
        // The frame's `<text ...>CONTENT</text>`, before the group closes.
        let group_end = tail.find("</g>").unwrap_or(tail.len());
        let text_open = tail[..group_end].find("<text ").and_then(|t| tail[t..group_end].find('>').map(|g| t + g + 1));
        let Some(content_start) = text_open.filter(|&c| !tail[..c].ends_with("/>")) else {
            rest = tail;
            continue;
        };
        let Some(content_len) = tail[content_start..group_end].find("</text>") else {
            rest = tail;
            continue;
        };
        let drawn = unescape(&tail[content_start..content_start + content_len]);
        // A name drawn whole had fewer characters than fit: `fit` is at least one more.
        let fit = if drawn.ends_with("..") { drawn.chars().count() } else { drawn.chars().count() + 1 };
        let redrawn = if drawn.is_empty() {
            String::new()
        } else if short.chars().count() < fit {
            short
        } else {
            let mut t: String = short.chars().take(fit.saturating_sub(2)).collect();
            t.push_str("..");
            t
        };
        out.push_str(&tail[..content_start]);
        out.push_str(&super::html::escape(&redrawn));
        rest = &tail[content_start + content_len..];
    }
    out.push_str(rest);
    out
}

fn write_empty_svg(title: &str, subtitle: Option<&str>, mut out: impl Write) -> std::io::Result<()> {
    writeln!(out, r#"<?xml version="1.0" encoding="UTF-8" standalone="no"?>"#)?;
    writeln!(
        out,
        r#"<svg version="1.1" width="1200" height="90" viewBox="0 0 1200 90" xmlns="http://www.w3.org/2000/svg">"#
    )?;
    writeln!(out, "<title>{}</title>", super::html::escape(title))?;
    writeln!(out, r##"<rect x="0" y="0" width="100%" height="100%" fill="#eeeeee"/>"##)?;
    writeln!(
        out,
        r#"<text x="600" y="24" font-size="17" font-family="Verdana" text-anchor="middle">{}</text>"#,
        super::html::escape(title)
    )?;
    if let Some(sub) = subtitle {
        writeln!(
            out,
            r##"<text x="600" y="46" font-size="12" font-family="Verdana" text-anchor="middle" fill="#a0a0a0">{}</text>"##,
            super::html::escape(sub)
        )?;
    }
    writeln!(
        out,
        r#"<text x="600" y="72" font-size="12" font-family="Verdana" text-anchor="middle">no samples</text>"#
    )?;
    writeln!(out, "</svg>")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn styles(entries: &[(&str, &str, &str)]) -> FrameStyles {
        FrameStyles { by_name: entries.iter().map(|(n, s, c)| (n.to_string(), (s.to_string(), c.to_string()))).collect() }
    }

    #[test]
    fn frames_carry_their_short_name_and_layer_colour() {
        let full = "<tokio::runtime::scheduler::multi_thread::worker::Context>::run_task";
        let st = styles(&[
            (full, "tokio::…::worker::Context::run_task", "runtime"),
            ("serde_json::ser::format_escaped_str", "serde_json::ser::format_escaped_str", "serialization"),
            ("tcp_sendmsg_[k]", "tcp_sendmsg", "kernel"),
        ]);
        let lines = vec![
            format!("tokio-runtime-w;{full};serde_json::ser::format_escaped_str 3"),
            format!("tokio-runtime-w;{full};tcp_sendmsg_[k] 1"),
        ];
        let mut svg = Vec::new();
        write_svg_styled(&lines, Style::OnCpu, "t", None, Some(&st), Options::default(), &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        // The full name (XML-escaped) with its count stays the title; the short one is on the
        // frame's group; a name whose short form is itself (less its `_[k]`) gets no attribute.
        assert!(svg.contains("<title>&lt;tokio::runtime::scheduler::multi_thread::worker::Context&gt;::run_task (4 samples, 100.00%)</title>"), "{svg}");
        assert!(svg.contains(r#"<g data-short="tokio::…::worker::Context::run_task">"#), "{svg}");
        assert_eq!(svg.matches("data-short=").count(), 1, "{svg}");
        // Colours: the category's base colour moved by at most 12 levels per channel.
        let fill = |name: &str| {
            let at = svg.find(&format!("<title>{name} (")).unwrap();
            let rest = &svg[at..];
            let f = rest.split("fill=\"").nth(1).unwrap().split('"').next().unwrap().to_string();
            f
        };
        let rgb = |s: &str| -> (i32, i32, i32) {
            let v: Vec<i32> = s.trim_start_matches("rgb(").trim_end_matches(')').split(',').map(|x| x.trim().parse().unwrap()).collect();
            (v[0], v[1], v[2])
        };
        let (r, g, b) = rgb(&fill("serde_json::ser::format_escaped_str"));
        let (br, bg, bb) = hex_rgb("#f2d479");
        assert!((r - i32::from(br)).abs() <= 12 && (g - i32::from(bg)).abs() <= 12 && (b - i32::from(bb)).abs() <= 12, "{r},{g},{b}");
        let (r, _, _) = rgb(&fill("tcp_sendmsg"));
        assert!((r - 0xf4).abs() <= 12, "{r}");
        // Drawn without a script too: the frame's text is its short name, cut as inferno
        // cuts names (the first characters and `..`) where the frame is narrow.
        let group = &svg[svg.find(r#"<g data-short="tokio::…::worker::Context::run_task">"#).unwrap()..];
        let text = &group[group.find("<text ").unwrap()..group.find("</text>").unwrap()];
        assert!(text.ends_with(">tokio::…::worker::Context::run_task"), "{text}");
        // The script draws frame text from data-short.
        assert!(svg.contains("function frame_label(e)"));
        assert_eq!(svg.matches("frame_label(e)").count(), 3, "definition and its two callers");
    }

    #[test]
    fn static_text_is_cut_as_inferno_cuts_it() {
        let svg = r#"<g data-short="a::…::Long&lt;…&gt;::name"><title>t</title><rect/><text x="1" y="2">a::b::c::Lo..</text></g><g data-short="x::y"><title>t</title><rect/><text x="1" y="2"/></g><g data-short="p::q"><title>t</title><rect/><text x="1" y="2">p::full::q</text></g><g data-short="tokio::net::{closure}"><title>t</title><rect/><text x="1" y="2">{closure#0}</text></g>"#;
        let out = short_static_text(svg);
        // 13 characters fit: 11 of the short name and `..`; a frame too narrow for text keeps
        // none; a name drawn whole is replaced whole.
        assert!(out.contains(r#"<text x="1" y="2">a::…::Long&lt;..</text>"#), "{out}");
        assert!(out.contains(r#"<text x="1" y="2"/>"#), "{out}");
        assert!(out.contains(r#"<text x="1" y="2">p::q</text>"#), "{out}");
        // `{closure#0}` (11 characters) was drawn whole: at least 12 fit, 10 of the short name.
        assert!(out.contains(r#"<text x="1" y="2">tokio::net..</text>"#), "{out}");
        assert!(out.contains(r#"<g data-short="a::…::Long&lt;…&gt;::name">"#), "{out}");
    }

    #[test]
    fn differential_frames_carry_short_names_and_the_change_colours() {
        // Names with blanks and generics, as Rust's are: the stack is split from its count at
        // the last blank only.
        let full = "<alloc::vec::Vec<u8> as core::clone::Clone>::clone";
        let st = styles(&[(full, "Vec<…>::clone", "alloc"), ("main", "main", "app")]);
        let base = vec![(format!("main;{full}"), 10)];
        let head = vec![(format!("main;{full}"), 30), ("main".to_string(), 5)];
        let mut svg = Vec::new();
        write_differential_svg(&base, &head, 1.0, Widths::Head, "t", "s", Some(&st), &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.contains(r#"<g data-short="Vec&lt;…&gt;::clone">"#), "{svg}");
        assert!(svg.contains("<title>&lt;alloc::vec::Vec&lt;u8&gt; as core::clone::Clone&gt;::clone (30 samples, 85.71%; +57.14%)</title>"), "{svg}");
        // inferno gives the change as a share of all samples: (30 - 10) / 35. Red for more in
        // HEAD (rgb(255, x, x)), not the layer's colour.
        let group = &svg[svg.find(r#"<g data-short="Vec&lt;…&gt;::clone">"#).unwrap()..];
        let fill = group.split("fill=\"").nth(1).unwrap().split('"').next().unwrap();
        assert!(fill.starts_with("rgb(255,"), "{fill}");
        // BASE's widths: BASE's 10 samples, coloured as the change to HEAD, whose share is of
        // the drawn graph's samples: (30 - 10) / 10.
        let mut svg = Vec::new();
        write_differential_svg(&base, &head, 1.0, Widths::Base, "t", "s", Some(&st), &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.contains("(10 samples, 100.00%; +200.00%)"), "{svg}");
    }

    #[test]
    fn without_styles_inferno_draws_as_before() {
        let lines = vec!["main;work 2".to_string()];
        let mut a = Vec::new();
        write_svg(&lines, Style::OnCpu, "t", None, &mut a).unwrap();
        let a = String::from_utf8(a).unwrap();
        assert!(!a.contains("data-short") && !a.contains("frame_label"));
        assert!(a.contains("<title>work (2 samples, 100.00%)</title>"));
    }

    #[test]
    fn legend_categories_follow_the_catalog_order() {
        let st = styles(&[("a", "a", "database"), ("b", "b", "app"), ("c", "c", "my own")]);
        let lines = vec!["thread;a;b 1".to_string(), "thread;c 1".to_string()];
        assert_eq!(st.categories_in(&lines), ["app", "database", OTHER_CATEGORY, "my own"]);
        // A category of a user's rules gets the same colour every time.
        assert_eq!(category_colour("my own"), category_colour("my own"));
        assert_eq!(category_colour("database"), "#8cc084");
    }
}
