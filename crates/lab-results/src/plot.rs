//! Charts of results, written as PNG and SVG side by side.
//!
//! Drawn in Rust with plotters; text goes through ab_glyph with DejaVu Sans
//! embedded in the binary, so a chart renders the same on a CI runner without
//! fonts as on a desktop (the font's licence is in `assets/`).
//!
//! One concern a file: `line` and `bar` draw the two kinds of chart on the
//! `canvas` they share, with `ticks` on their axes and `colors` for what
//! each line or bar stands for.

mod bar;
mod canvas;
mod colors;
mod line;
mod ticks;

pub use bar::{bar_chart_svg, write_bar_chart, Bar, BarChart};
pub use canvas::PlotError;
pub use colors::Transport;
pub use line::{line_chart_svg, write_line_chart, LineChart, Series, Stroke, XScale};
pub use ticks::{bytes_label, linear_ticks, Ticks, Unit};

#[cfg(test)]
pub(crate) mod tests;
