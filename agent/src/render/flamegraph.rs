//! Flamegraph SVGs of folded stacks, drawn by inferno (`inferno::flamegraph`, the Rust port
//! of Brendan Gregg's `flamegraph.pl`).

use std::io::Write;

use inferno::flamegraph::{self, color, Options};

/// Which flamegraph to draw: it sets the palette and the unit of the counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// On-CPU samples: the Rust palette (kernel frames `_[k]` apart), counts are samples.
    OnCpu,
    /// Off-CPU time: the I/O palette, counts are µs.
    OffCpu,
}

/// Draws `lines` (folded stacks, `stack weight`) as an SVG into `out`, with `title` on top
/// and `subtitle` below it.
///
/// With no lines (an empty profile) inferno refuses to draw; a small valid SVG holding the
/// title and "no samples" is written instead, so that every run has its file.
///
/// # Errors
/// Whatever `out` returns, or inferno's error for malformed lines.
pub fn write_svg(
    lines: &[String],
    style: Style,
    title: &str,
    subtitle: Option<&str>,
    mut out: impl Write,
) -> std::io::Result<()> {
    if lines.is_empty() {
        return write_empty_svg(title, subtitle, out);
    }
    let mut options = Options::default();
    options.title = title.to_string();
    options.subtitle = subtitle.map(str::to_string);
    options.deterministic = true;
    options.hash = true;
    options.name_type = "Function:".to_string();
    match style {
        Style::OnCpu => {
            options.colors = color::Palette::Multi(color::MultiPalette::Rust);
            options.count_name = "samples".to_string();
        }
        Style::OffCpu => {
            options.colors = color::Palette::Basic(color::BasicPalette::Io);
            options.count_name = "µs".to_string();
        }
    }
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut out)
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
