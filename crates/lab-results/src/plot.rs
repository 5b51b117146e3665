//! Charts of results, written as PNG and SVG side by side.
//!
//! Drawn in Rust with plotters; text goes through ab_glyph with DejaVu Sans
//! embedded in the binary, so a chart renders the same on a CI runner without
//! fonts as on a desktop (the font's licence is in `assets/`).

use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;

const WIDTH: u32 = 960;
const HEIGHT: u32 = 600;
const FONT: &str = "sans-serif";
static FONT_BYTES: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// Colours of successive series, readable on white and distinct in greyscale order.
const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(90, 90, 90),
];

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

/// One named line.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// (x, y) points, in drawing order.
    pub points: Vec<(f64, f64)>,
}

/// How the x axis is scaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XScale {
    /// Evenly spaced values (time).
    Linear,
    /// Powers of two evenly spaced, labelled in bytes (message sizes).
    Log2Bytes,
}

/// A line chart: title, axes and the lines on it.
#[derive(Debug, Clone)]
pub struct LineChart {
    /// Heading above the plot.
    pub title: String,
    /// X axis caption, with its unit.
    pub x_label: String,
    /// Y axis caption, with its unit.
    pub y_label: String,
    /// X axis scale.
    pub x_scale: XScale,
    /// The lines.
    pub series: Vec<Series>,
}

/// A bar chart: one bar per label.
#[derive(Debug, Clone)]
pub struct BarChart {
    /// Heading above the plot.
    pub title: String,
    /// Y axis caption, with its unit.
    pub y_label: String,
    /// (label, value) per bar.
    pub bars: Vec<(String, f64)>,
}

/// Writes `chart` to `<stem>.png` and `<stem>.svg`; returns both paths.
pub fn write_line_chart(chart: &LineChart, stem: &Path) -> Result<Vec<PathBuf>, PlotError> {
    if !chart.series.iter().flat_map(|s| &s.points).any(|p| chart.keeps(p)) {
        return Err(PlotError::Empty(chart.title.clone()));
    }
    let (png, svg) = prepare(stem)?;
    draw_line(chart, BitMapBackend::new(&png, (WIDTH, HEIGHT)).into_drawing_area()).map_err(failed(&png))?;
    draw_line(chart, SVGBackend::new(&svg, (WIDTH, HEIGHT)).into_drawing_area()).map_err(failed(&svg))?;
    Ok(vec![png, svg])
}

impl LineChart {
    /// A point that can be drawn: finite, and positive x on a log axis.
    fn keeps(&self, &(x, y): &(f64, f64)) -> bool {
        x.is_finite() && y.is_finite() && (self.x_scale == XScale::Linear || x > 0.0)
    }

    /// x as drawn (log2 of bytes on a size axis).
    fn x_of(&self, x: f64) -> f64 {
        match self.x_scale {
            XScale::Linear => x,
            XScale::Log2Bytes => x.log2(),
        }
    }
}

fn draw_line<DB: DrawingBackend>(chart: &LineChart, root: DrawingArea<DB, Shift>) -> Result<(), String> {
    let points: Vec<(f64, f64)> = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|p| chart.keeps(p))
        .collect();
    let (x_min, x_max) = span(points.iter().map(|p| chart.x_of(p.0)));
    let (_, y_max) = span(points.iter().map(|p| p.1));
    let y_top = if y_max > 0.0 { y_max * 1.1 } else { 1.0 };
    let x_range = if x_max > x_min {
        x_min..x_max
    } else {
        x_min - 1.0..x_max + 1.0
    };
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut ctx = ChartBuilder::on(&root)
        .caption(&chart.title, (FONT, 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x_range.clone(), 0.0..y_top)
        .map_err(|e| e.to_string())?;
    let x_fmt = |v: &f64| match chart.x_scale {
        XScale::Linear => format!("{v}"),
        XScale::Log2Bytes => bytes_label(2f64.powf(*v)),
    };
    let mut mesh = ctx.configure_mesh();
    mesh.x_desc(&chart.x_label)
        .y_desc(&chart.y_label)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .x_label_formatter(&x_fmt);
    if chart.x_scale == XScale::Log2Bytes {
        // One tick per power of two, at most 12 so labels do not collide.
        mesh.x_labels(((x_range.end - x_range.start) as usize + 1).min(12));
    }
    mesh.draw().map_err(|e| e.to_string())?;
    for (i, s) in chart.series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|p| chart.keeps(p))
            .map(|&(x, y)| (chart.x_of(x), y))
            .collect();
        ctx.draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(s.label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        if pts.len() <= 40 {
            ctx.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(|e| e.to_string())?;
        }
    }
    ctx.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 14))
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// Writes `chart` to `<stem>.png` and `<stem>.svg`; returns both paths.
pub fn write_bar_chart(chart: &BarChart, stem: &Path) -> Result<Vec<PathBuf>, PlotError> {
    if chart.bars.is_empty() || chart.bars.iter().any(|b| !b.1.is_finite()) {
        return Err(PlotError::Empty(chart.title.clone()));
    }
    let (png, svg) = prepare(stem)?;
    draw_bars(chart, BitMapBackend::new(&png, (WIDTH, HEIGHT)).into_drawing_area()).map_err(failed(&png))?;
    draw_bars(chart, SVGBackend::new(&svg, (WIDTH, HEIGHT)).into_drawing_area()).map_err(failed(&svg))?;
    Ok(vec![png, svg])
}

fn draw_bars<DB: DrawingBackend>(chart: &BarChart, root: DrawingArea<DB, Shift>) -> Result<(), String> {
    let y_max = chart.bars.iter().map(|b| b.1).fold(0.0, f64::max);
    let y_top = if y_max > 0.0 { y_max * 1.2 } else { 1.0 };
    let n = chart.bars.len();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut ctx = ChartBuilder::on(&root)
        .caption(&chart.title, (FONT, 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(0.0..n as f64, 0.0..y_top)
        .map_err(|e| e.to_string())?;
    ctx.configure_mesh()
        .disable_x_mesh()
        .disable_x_axis()
        .y_desc(&chart.y_label)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, (label, v)) in chart.bars.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let x = i as f64;
        ctx.draw_series(std::iter::once(Rectangle::new(
            [(x + 0.2, 0.0), (x + 0.8, *v)],
            color.filled(),
        )))
        .map_err(|e| e.to_string())?;
        // Label and value above the bar, in black: readable however short the bar is.
        ctx.draw_series([
            Text::new(label.clone(), (x + 0.22, *v + y_top * 0.08), (FONT, 16).into_font()),
            Text::new(format!("{v:.2}"), (x + 0.22, *v + y_top * 0.04), (FONT, 16).into_font()),
        ])
        .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())
}

/// Both output paths, with their directory created.
fn prepare(stem: &Path) -> Result<(PathBuf, PathBuf), PlotError> {
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

fn failed(path: &Path) -> impl FnOnce(String) -> PlotError {
    let path = path.to_path_buf();
    move |detail| PlotError::Write { path, detail }
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for style in [FontStyle::Normal, FontStyle::Bold] {
            // The embedded file is a valid TrueType font; failure would be a build defect.
            plotters::style::register_font(FONT, style, FONT_BYTES)
                .unwrap_or_else(|_| panic!("the embedded DejaVu Sans does not parse"));
        }
    });
}

fn span(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)))
}

/// "4 KiB", "1 MiB", "2 B".
pub fn bytes_label(v: f64) -> String {
    let v = v.round() as u64;
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if v >= 1 << shift && v.is_multiple_of(1 << shift) {
            return format!("{} {unit}", v >> shift);
        }
    }
    format!("{v} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_png(path: &Path) -> (u32, u32, usize) {
        let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
        let mut reader = decoder.read_info().expect("a valid PNG header");
        let mut buf = vec![0; reader.output_buffer_size().expect("size fits")];
        let frame = reader.next_frame(&mut buf).expect("a decodable PNG frame");
        let pixels = &buf[..frame.buffer_size()];
        // Count non-white pixels: an empty canvas would pass the decoder too.
        let inked = pixels.chunks(3).filter(|p| p.iter().any(|&c| c < 200)).count();
        (frame.width, frame.height, inked)
    }

    fn svg_texts(path: &Path) -> Vec<String> {
        let text = std::fs::read_to_string(path).unwrap();
        let doc = roxmltree::Document::parse(&text).expect("well-formed SVG");
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        doc.descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text().map(|t| t.trim().to_string()))
            .collect()
    }

    #[test]
    fn test_line_chart_writes_valid_png_and_svg_with_labels() {
        let dir = tempdir();
        let chart = LineChart {
            title: "write-bw vs size".into(),
            x_label: "message size".into(),
            y_label: "MiB/s".into(),
            x_scale: XScale::Log2Bytes,
            series: vec![
                Series {
                    label: "rdma".into(),
                    points: (1..=12).map(|i| ((1u64 << i) as f64, i as f64 * 3.0)).collect(),
                },
                Series {
                    label: "tcp".into(),
                    points: vec![(2.0, 1.0), (4096.0, f64::NAN), (8192.0, 5.0)],
                },
            ],
        };
        let paths = write_line_chart(&chart, &dir.join("sweep")).unwrap();
        assert_eq!(paths, vec![dir.join("sweep.png"), dir.join("sweep.svg")]);
        let (w, h, inked) = decode_png(&paths[0]);
        assert_eq!((w, h), (WIDTH, HEIGHT));
        assert!(inked > 2000, "the PNG has lines and text, {inked} dark pixels");
        let texts = svg_texts(&paths[1]);
        for want in ["write-bw vs size", "MiB/s", "rdma", "tcp", "4 KiB"] {
            assert!(texts.iter().any(|t| t == want), "{want:?} not among {texts:?}");
        }
    }

    #[test]
    fn test_bar_chart_labels_each_bar() {
        let dir = tempdir();
        let chart = BarChart {
            title: "RDMA vs TCP".into(),
            y_label: "MiB/s".into(),
            bars: vec![("RDMA WRITE".into(), 7.5), ("TCP".into(), 11.25)],
        };
        let paths = write_bar_chart(&chart, &dir.join("bars")).unwrap();
        let (_, _, inked) = decode_png(&paths[0]);
        assert!(inked > 2000);
        let texts = svg_texts(&paths[1]);
        for want in ["RDMA WRITE", "TCP", "7.50", "11.25"] {
            assert!(texts.iter().any(|t| t == want), "{want:?} not among {texts:?}");
        }
    }

    #[test]
    fn test_nothing_to_plot_is_an_error_not_an_empty_file() {
        let dir = tempdir();
        let chart = LineChart {
            title: "empty".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            x_scale: XScale::Log2Bytes,
            series: vec![Series {
                label: "zero size".into(),
                points: vec![(0.0, 1.0)],
            }],
        };
        assert!(matches!(
            write_line_chart(&chart, &dir.join("e")),
            Err(PlotError::Empty(_))
        ));
        assert!(!dir.join("e.png").exists());
    }

    #[test]
    fn test_bytes_label() {
        assert_eq!(bytes_label(2.0), "2 B");
        assert_eq!(bytes_label(4096.0), "4 KiB");
        assert_eq!(bytes_label(8.0 * 1024.0 * 1024.0), "8 MiB");
        assert_eq!(bytes_label(1536.0), "1536 B");
    }

    fn tempdir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("labctl-plot-{}-{}", std::process::id(), rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
