//! What every chart shares: the canvas size and room for labels, the
//! embedded font, the PNG and SVG paths a chart is written to, the PNG
//! encoding, and what writing one can fail with.

use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;

pub(super) const WIDTH: u32 = 960;
pub(super) const HEIGHT: u32 = 600;
pub(super) const FONT: &str = "sans-serif";
static FONT_BYTES: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

/// Most ticks on a y axis.
pub(super) const MAX_Y_TICKS: usize = 8;

/// Room left of the plot for y tick labels with their unit (`12.5 MiB/s`).
pub(super) const Y_LABEL_AREA: u32 = 110;

/// Why a chart could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// Nothing to draw (no series, or no finite point).
    #[error("nothing to plot for {0:?}: no finite data points")]
    Empty(String),
    /// The file could not be created or drawn.
    #[error("writing {path}: {detail}")]
    Write {
        /// The chart file.
        path: PathBuf,
        /// The backend's error.
        detail: String,
    },
}

/// Both output paths, with their directory created.
pub(super) fn prepare(stem: &Path) -> Result<(PathBuf, PathBuf), PlotError> {
    register_font();
    let png = stem.with_extension("png");
    let svg = stem.with_extension("svg");
    if let Some(dir) = png.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| PlotError::Write {
            path: png.clone(),
            detail: e.to_string(),
        })?;
    }
    Ok((png, svg))
}

/// Draws with `draw` into an RGB buffer and writes it to `path` as a PNG.
/// plotters' own PNG writer (`bitmap_encoder`) goes through the `image`
/// crate and its JPEG, BMP and quantisation code, about 25 s of the release
/// build's compile time for one PNG encoder; `png` is that encoder alone.
pub(super) fn write_png(
    path: &Path,
    draw: impl FnOnce(DrawingArea<BitMapBackend<'_>, Shift>) -> Result<(), String>,
) -> Result<(), PlotError> {
    let mut rgb = vec![0u8; WIDTH as usize * HEIGHT as usize * 3];
    draw(BitMapBackend::with_buffer(&mut rgb, (WIDTH, HEIGHT)).into_drawing_area()).map_err(failed(path))?;
    let encode = || -> Result<(), String> {
        let file = std::fs::File::create(path).map_err(|e| e.to_string())?;
        let mut encoder = png::Encoder::new(BufWriter::new(file), WIDTH, HEIGHT);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().map_err(|e| e.to_string())?;
        writer.write_image_data(&rgb).map_err(|e| e.to_string())?;
        writer.finish().map_err(|e| e.to_string())
    };
    encode().map_err(failed(path))
}

pub(super) fn failed(path: &Path) -> impl FnOnce(String) -> PlotError {
    let path = path.to_path_buf();
    move |detail| PlotError::Write { path, detail }
}

pub(super) fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for style in [FontStyle::Normal, FontStyle::Bold] {
            // The embedded file is a valid TrueType font; failure would be a build defect.
            plotters::style::register_font(FONT, style, FONT_BYTES)
                .unwrap_or_else(|_| panic!("the embedded DejaVu Sans does not parse"));
        }
    });
}

pub(super) fn span(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)))
}
