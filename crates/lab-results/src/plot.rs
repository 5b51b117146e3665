//! Charts of results, written as PNG and SVG side by side.
//!
//! Drawn in Rust with plotters; text goes through ab_glyph with DejaVu Sans
//! embedded in the binary, so a chart renders the same on a CI runner without
//! fonts as on a desktop (the font's licence is in `assets/`).

use std::path::{Path, PathBuf};
use std::sync::Once;

use std::ops::Range;

use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

const WIDTH: u32 = 960;
const HEIGHT: u32 = 600;
const FONT: &str = "sans-serif";
static FONT_BYTES: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// Colours of series and bars that stand for no transport (after the
/// transports' own, which they never reuse).
const OTHER_COLORS: [RGBColor; 3] = [RGBColor(148, 103, 189), RGBColor(140, 86, 75), RGBColor(90, 90, 90)];

/// What carried the bytes a line or a bar stands for. Each has one colour,
/// the same in every chart labctl draws (and in the HTML report), so RDMA
/// is always blue and TCP always red whichever chart you look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Verbs (rdma_cm or out-of-band setup): blue.
    Rdma,
    /// libfabric (`fabric-*`): green.
    Libfabric,
    /// TCP sockets (`bulk-tcp`): red.
    Tcp,
}

impl Transport {
    /// The transport a workload moves its bytes with.
    pub fn of_workload(workload: &str) -> Transport {
        use workload_catalogue::Family;
        match workload_catalogue::find(workload).map(|w| w.family) {
            Some(Family::Libfabric) => Transport::Libfabric,
            Some(Family::Tcp) => Transport::Tcp,
            Some(Family::Verbs) | None => Transport::Rdma,
        }
    }

    /// Its colour.
    pub fn color(self) -> RGBColor {
        match self {
            Transport::Rdma => RGBColor(31, 119, 180),
            Transport::Libfabric => RGBColor(44, 160, 44),
            Transport::Tcp => RGBColor(214, 39, 40),
        }
    }

    /// Its colour as `#RRGGBB` (upper case, as the SVG files write it).
    pub fn hex(self) -> String {
        let RGBColor(r, g, b) = self.color();
        format!("#{r:02X}{g:02X}{b:02X}")
    }
}

/// How a line is drawn: lines of the same transport differ by their stroke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Stroke {
    /// A solid line.
    #[default]
    Solid,
    /// A dashed line.
    Dashed,
}

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
    /// What it stands for (its colour); `None`: a colour no transport uses.
    pub transport: Option<Transport>,
    /// Solid or dashed.
    pub stroke: Stroke,
}

/// How the x axis is scaled and labelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XScale {
    /// Seconds, evenly spaced, labelled in s, ms or µs as suits the range.
    Seconds,
    /// Powers of two evenly spaced, labelled in bytes (message sizes).
    Log2Bytes,
}

/// The unit of an axis's tick labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unit {
    /// Seconds, shown in s, ms or µs, whichever keeps the numbers short.
    Seconds,
    /// A fixed unit written after each number (`MiB/s`, `CPU s/GiB`).
    Fixed(String),
}

/// Where the ticks of a linear axis go and what each says: steps of 1, 2
/// or 5 times a power of ten, as many decimals as the step needs (so no
/// `0.15000000000000002`), then the unit.
#[derive(Debug, Clone, PartialEq)]
pub struct Ticks {
    /// Positions, in the axis's own values.
    pub at: Vec<f64>,
    /// One label per position.
    pub labels: Vec<String>,
}

/// At most `max` ticks (at least 2 where the range allows) over `lo..=hi`.
pub fn linear_ticks(lo: f64, hi: f64, max: usize, unit: &Unit) -> Ticks {
    let (scale, name) = match unit {
        Unit::Seconds => {
            let top = lo.abs().max(hi.abs());
            if top >= 1.0 || top == 0.0 {
                (1.0, "s")
            } else if top >= 1e-3 {
                (1e3, "ms")
            } else {
                (1e6, "µs")
            }
        }
        Unit::Fixed(name) => (1.0, name.as_str()),
    };
    let (lo_u, hi_u) = (lo * scale, hi * scale);
    let span = hi_u - lo_u;
    if !span.is_finite() || span <= 0.0 {
        return Ticks {
            at: vec![lo],
            labels: vec![format!("{} {name}", short(lo_u, 0))],
        };
    }
    // The step is m x 10^e, m one of 1, 2, 5; tick i is at i x m x 10^e.
    let raw = span / max.max(1) as f64;
    let mut e = raw.log10().floor() as i32;
    let m = match raw / 10f64.powi(e) {
        r if r <= 1.0 + 1e-9 => 1,
        r if r <= 2.0 + 1e-9 => 2,
        r if r <= 5.0 + 1e-9 => 5,
        _ => {
            e += 1;
            1
        }
    };
    let step = m as f64 * 10f64.powi(e);
    let first = (lo_u / step - 1e-9).ceil() as i64;
    let last = (hi_u / step + 1e-9).floor() as i64;
    let counts: Vec<i64> = (first..=last).map(|i| i * m).collect();
    let value = |k: i64| k as f64 * 10f64.powi(e);
    Ticks {
        at: counts.iter().map(|&k| value(k) / scale).collect(),
        labels: counts
            .iter()
            .map(|&k| {
                // As many decimals as the step has; tiny steps as `4e-8`.
                let number = match e {
                    0.. => short(value(k), 0),
                    -4..0 => short(value(k), (-e) as usize),
                    _ if k == 0 => "0".to_string(),
                    _ => format!("{k}e{e}"),
                };
                format!("{number} {name}")
            })
            .collect(),
    }
}

/// `v` with `decimals` decimals, never `-0`.
fn short(v: f64, decimals: usize) -> String {
    let text = format!("{v:.decimals$}");
    match text.strip_prefix('-') {
        Some(rest) if rest.chars().all(|c| c == '0' || c == '.') => rest.to_string(),
        _ => text,
    }
}

/// The ticks of a power-of-two size axis (values are log2 of bytes): one
/// per power of two, every second or more when there would be more than 12.
fn log2_ticks(lo: f64, hi: f64) -> Ticks {
    let (first, last) = (lo.ceil() as i64, hi.floor() as i64);
    let every = ((last - first) / MAX_SIZE_TICKS + 1).max(1);
    let at: Vec<f64> = (first..=last).step_by(every as usize).map(|v| v as f64).collect();
    Ticks {
        labels: at.iter().map(|v| bytes_label(2f64.powf(*v))).collect(),
        at,
    }
}

/// A linear axis whose tick positions and labels are [`Ticks`]: plotters
/// asks it where the ticks go and what they say, so every chart's axes go
/// through [`linear_ticks`] (or [`log2_ticks`]) and nothing else.
struct TickedAxis {
    range: Range<f64>,
    ticks: Ticks,
}

impl Ranged for TickedAxis {
    type ValueType = f64;
    type FormatOption = NoDefaultFormatting;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        RangedCoordf64::from(self.range.clone()).map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // The bold grid lines only: a light grid between them adds nothing.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.at.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.range.clone()
    }
}

impl ValueFormatter<f64> for TickedAxis {
    fn format_ext(&self, value: &f64) -> String {
        self.ticks.label(*value)
    }
}

impl Ticks {
    /// The label at `v` (a key point plotters hands back).
    fn label(&self, v: f64) -> String {
        self.at
            .iter()
            .zip(&self.labels)
            .min_by(|a, b| (a.0 - v).abs().total_cmp(&(b.0 - v).abs()))
            .map(|(_, l)| l.clone())
            .unwrap_or_default()
    }
}

/// Colour of the `i`-th series or bar, given what it stands for.
fn color_of(transport: Option<Transport>, others: &mut usize) -> RGBColor {
    transport.map_or_else(
        || {
            let c = OTHER_COLORS[*others % OTHER_COLORS.len()];
            *others += 1;
            c
        },
        Transport::color,
    )
}

/// A line chart: title, axes and the lines on it.
#[derive(Debug, Clone)]
pub struct LineChart {
    /// Heading above the plot.
    pub title: String,
    /// X axis caption.
    pub x_label: String,
    /// Y axis caption.
    pub y_label: String,
    /// The unit of the y ticks.
    pub y_unit: String,
    /// X axis scale.
    pub x_scale: XScale,
    /// The lines.
    pub series: Vec<Series>,
}

/// One bar.
#[derive(Debug, Clone)]
pub struct Bar {
    /// The text above it.
    pub label: String,
    /// Its height.
    pub value: f64,
    /// What it stands for (its colour).
    pub transport: Option<Transport>,
}

/// A bar chart: one bar per label.
#[derive(Debug, Clone)]
pub struct BarChart {
    /// Heading above the plot.
    pub title: String,
    /// Y axis caption.
    pub y_label: String,
    /// The unit of the y ticks.
    pub y_unit: String,
    /// The bars, left to right.
    pub bars: Vec<Bar>,
}

/// Most ticks on an x axis: 960 px wide leaves room for 10 labels such as `350 ms`.
const MAX_X_TICKS: usize = 10;
/// Most ticks on a message-size axis (labels such as `128 KiB`).
const MAX_SIZE_TICKS: i64 = 12;
/// Most ticks on a y axis.
const MAX_Y_TICKS: usize = 8;

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

/// `chart` as an SVG document in a string (for pages that inline it).
pub fn line_chart_svg(chart: &LineChart) -> Result<String, PlotError> {
    if !chart.series.iter().flat_map(|s| &s.points).any(|p| chart.keeps(p)) {
        return Err(PlotError::Empty(chart.title.clone()));
    }
    register_font();
    let mut svg = String::new();
    draw_line(
        chart,
        SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area(),
    )
    .map_err(failed(Path::new("(inline svg)")))?;
    Ok(svg)
}

impl LineChart {
    /// A point that can be drawn: finite, and positive x on a log axis.
    fn keeps(&self, &(x, y): &(f64, f64)) -> bool {
        x.is_finite() && y.is_finite() && (self.x_scale == XScale::Seconds || x > 0.0)
    }

    /// x as drawn (log2 of bytes on a size axis).
    fn x_of(&self, x: f64) -> f64 {
        match self.x_scale {
            XScale::Seconds => x,
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
    let x_ticks = match chart.x_scale {
        XScale::Seconds => linear_ticks(x_range.start, x_range.end, MAX_X_TICKS, &Unit::Seconds),
        XScale::Log2Bytes => log2_ticks(x_range.start, x_range.end),
    };
    let y_ticks = linear_ticks(0.0, y_top, MAX_Y_TICKS, &Unit::Fixed(chart.y_unit.clone()));
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut ctx = ChartBuilder::on(&root)
        .caption(&chart.title, (FONT, 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(Y_LABEL_AREA)
        .build_cartesian_2d(
            TickedAxis {
                range: x_range,
                ticks: x_ticks,
            },
            TickedAxis {
                range: 0.0..y_top,
                ticks: y_ticks,
            },
        )
        .map_err(|e| e.to_string())?;
    ctx.configure_mesh()
        .x_desc(&chart.x_label)
        .y_desc(&chart.y_label)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .draw()
        .map_err(|e| e.to_string())?;
    let mut others = 0;
    for s in &chart.series {
        let color = color_of(s.transport, &mut others);
        let style = color.stroke_width(2);
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|p| chart.keeps(p))
            .map(|&(x, y)| (chart.x_of(x), y))
            .collect();
        let drawn = match s.stroke {
            Stroke::Solid => ctx.draw_series(LineSeries::new(pts.iter().copied(), style)),
            Stroke::Dashed => ctx.draw_series(DashedLineSeries::new(pts.iter().copied(), 8, 5, style)),
        }
        .map_err(|e| e.to_string())?;
        let stroke = s.stroke;
        // A dashed line's legend sample has a gap in the middle.
        let gap = if stroke == Stroke::Dashed { (8, 12) } else { (10, 10) };
        drawn.label(s.label.as_str()).legend(move |(x, y)| {
            EmptyElement::at((x, y))
                + PathElement::new(vec![(0, 0), (gap.0, 0)], style)
                + PathElement::new(vec![(gap.1, 0), (20, 0)], style)
        });
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

/// Room left of the plot for y tick labels with their unit (`12.5 MiB/s`).
const Y_LABEL_AREA: u32 = 110;

/// Writes `chart` to `<stem>.png` and `<stem>.svg`; returns both paths.
pub fn write_bar_chart(chart: &BarChart, stem: &Path) -> Result<Vec<PathBuf>, PlotError> {
    if chart.bars.is_empty() || chart.bars.iter().any(|b| !b.value.is_finite()) {
        return Err(PlotError::Empty(chart.title.clone()));
    }
    let (png, svg) = prepare(stem)?;
    draw_bars(chart, BitMapBackend::new(&png, (WIDTH, HEIGHT)).into_drawing_area()).map_err(failed(&png))?;
    draw_bars(chart, SVGBackend::new(&svg, (WIDTH, HEIGHT)).into_drawing_area()).map_err(failed(&svg))?;
    Ok(vec![png, svg])
}

/// `chart` as an SVG document in a string (for pages that inline it).
pub fn bar_chart_svg(chart: &BarChart) -> Result<String, PlotError> {
    if chart.bars.is_empty() || chart.bars.iter().any(|b| !b.value.is_finite()) {
        return Err(PlotError::Empty(chart.title.clone()));
    }
    register_font();
    let mut svg = String::new();
    draw_bars(
        chart,
        SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area(),
    )
    .map_err(failed(Path::new("(inline svg)")))?;
    Ok(svg)
}

fn draw_bars<DB: DrawingBackend>(chart: &BarChart, root: DrawingArea<DB, Shift>) -> Result<(), String> {
    let y_max = chart.bars.iter().map(|b| b.value).fold(0.0, f64::max);
    let y_top = if y_max > 0.0 { y_max * 1.2 } else { 1.0 };
    let y_ticks = linear_ticks(0.0, y_top, MAX_Y_TICKS, &Unit::Fixed(chart.y_unit.clone()));
    let n = chart.bars.len();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut ctx = ChartBuilder::on(&root)
        .caption(&chart.title, (FONT, 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(Y_LABEL_AREA)
        .build_cartesian_2d(
            0.0..n as f64,
            TickedAxis {
                range: 0.0..y_top,
                ticks: y_ticks,
            },
        )
        .map_err(|e| e.to_string())?;
    ctx.configure_mesh()
        .disable_x_mesh()
        .disable_x_axis()
        .y_desc(&chart.y_label)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .draw()
        .map_err(|e| e.to_string())?;
    let mut others = 0;
    for (i, bar) in chart.bars.iter().enumerate() {
        let (label, v) = (&bar.label, &bar.value);
        let color = color_of(bar.transport, &mut others);
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
pub(crate) mod tests {
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
            y_label: "bandwidth".into(),
            y_unit: "MiB/s".into(),
            x_scale: XScale::Log2Bytes,
            series: vec![
                Series {
                    label: "rdma".into(),
                    points: (1..=12).map(|i| ((1u64 << i) as f64, i as f64 * 3.0)).collect(),
                    transport: Some(Transport::Rdma),
                    stroke: Stroke::Solid,
                },
                Series {
                    label: "tcp".into(),
                    points: vec![(2.0, 1.0), (4096.0, f64::NAN), (8192.0, 5.0)],
                    transport: Some(Transport::Tcp),
                    stroke: Stroke::Dashed,
                },
            ],
        };
        let paths = write_line_chart(&chart, &dir.join("sweep")).unwrap();
        assert_eq!(paths, vec![dir.join("sweep.png"), dir.join("sweep.svg")]);
        let (w, h, inked) = decode_png(&paths[0]);
        assert_eq!((w, h), (WIDTH, HEIGHT));
        assert!(inked > 2000, "the PNG has lines and text, {inked} dark pixels");
        let texts = svg_texts(&paths[1]);
        for want in ["write-bw vs size", "bandwidth", "rdma", "tcp"] {
            assert!(texts.iter().any(|t| t == want), "{want:?} not among {texts:?}");
        }
        // 2 B .. 8 KiB is 13 powers of two: every second one is labelled.
        let x_ticks: Vec<&String> = texts.iter().filter(|t| t.ends_with('B')).collect();
        assert_eq!(x_ticks, ["2 B", "8 B", "32 B", "128 B", "512 B", "2 KiB", "8 KiB"]);
        let y_ticks: Vec<&String> = texts.iter().filter(|t| t.ends_with(" MiB/s")).collect();
        assert_eq!(
            y_ticks,
            ["0 MiB/s", "5 MiB/s", "10 MiB/s", "15 MiB/s", "20 MiB/s", "25 MiB/s", "30 MiB/s", "35 MiB/s"]
        );
    }

    #[test]
    fn test_bar_chart_labels_each_bar() {
        let dir = tempdir();
        let chart = BarChart {
            title: "RDMA vs TCP".into(),
            y_label: "throughput".into(),
            y_unit: "MiB/s".into(),
            bars: vec![
                Bar {
                    label: "RDMA WRITE".into(),
                    value: 7.5,
                    transport: Some(Transport::Rdma),
                },
                Bar {
                    label: "TCP".into(),
                    value: 11.25,
                    transport: Some(Transport::Tcp),
                },
            ],
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
            y_unit: "y".into(),
            x_scale: XScale::Log2Bytes,
            series: vec![Series {
                label: "zero size".into(),
                points: vec![(0.0, 1.0)],
                transport: None,
                stroke: Stroke::Solid,
            }],
        };
        assert!(matches!(
            write_line_chart(&chart, &dir.join("e")),
            Err(PlotError::Empty(_))
        ));
        assert!(!dir.join("e.png").exists());
    }

    /// Every `<text>` with its position (x, y as written).
    pub(crate) fn svg_text_at(path: &Path) -> Vec<(String, f64, f64)> {
        let text = std::fs::read_to_string(path).unwrap();
        let doc = roxmltree::Document::parse(&text).expect("well-formed SVG");
        doc.descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| {
                let at = |a: &str| n.attribute(a).and_then(|v| v.parse::<f64>().ok());
                Some((n.text()?.trim().to_string(), at("x")?, at("y")?))
            })
            .collect()
    }

    /// The colours (`stroke` of lines, `fill` of rectangles) an SVG draws
    /// with, in drawing order, leaving out black, white and the grid's greys.
    pub(crate) fn svg_colors(path: &Path, tag: &str, attr: &str) -> Vec<String> {
        let text = std::fs::read_to_string(path).unwrap();
        let doc = roxmltree::Document::parse(&text).expect("well-formed SVG");
        doc.descendants()
            .filter(|n| n.has_tag_name(tag))
            .filter_map(|n| n.attribute(attr).map(str::to_string))
            .filter(|c| {
                let c = c.to_ascii_uppercase();
                // Greys (black, white, the grid) have R = G = B.
                let grey = c.len() == 7 && c[1..3] == c[3..5] && c[3..5] == c[5..7];
                c != "NONE" && !grey
            })
            .collect()
    }

    #[test]
    fn test_linear_ticks_are_short_decimals_with_units_chosen_for_the_range() {
        let labels = |lo, hi, max, unit: Unit| linear_ticks(lo, hi, max, &unit).labels;
        // The bulk chart's case: 0.05 s .. 0.42 s, once labelled
        // 0.15000000000000002 and 0.39999999999999994.
        assert_eq!(
            labels(0.05, 0.42, 10, Unit::Seconds),
            ["50 ms", "100 ms", "150 ms", "200 ms", "250 ms", "300 ms", "350 ms", "400 ms"]
        );
        assert_eq!(
            labels(0.0, 2.6, 10, Unit::Seconds),
            ["0.0 s", "0.5 s", "1.0 s", "1.5 s", "2.0 s", "2.5 s"]
        );
        assert_eq!(
            labels(0.0, 0.0004, 4, Unit::Seconds),
            ["0 µs", "100 µs", "200 µs", "300 µs", "400 µs"]
        );
        assert_eq!(
            labels(0.0, 13.2, 8, Unit::Fixed("MiB/s".into())),
            ["0 MiB/s", "2 MiB/s", "4 MiB/s", "6 MiB/s", "8 MiB/s", "10 MiB/s", "12 MiB/s"]
        );
        assert_eq!(
            labels(0.0, 0.33, 8, Unit::Fixed("s/GiB".into())),
            [
                "0.00 s/GiB",
                "0.05 s/GiB",
                "0.10 s/GiB",
                "0.15 s/GiB",
                "0.20 s/GiB",
                "0.25 s/GiB",
                "0.30 s/GiB"
            ]
        );
        // Positions are where the labels say, and never more than asked for.
        let t = linear_ticks(0.05, 0.42, 10, &Unit::Seconds);
        assert!((t.at[2] - 0.15).abs() < 1e-12, "{:?}", t.at);
        for (lo, hi) in [(0.0, 1e-7), (0.0, 3.0), (1.0, 1000.0), (0.013, 0.0131), (-2.0, 7.0)] {
            let t = linear_ticks(lo, hi, 8, &Unit::Fixed("x".into()));
            assert!((2..=8).contains(&t.at.len()), "{lo}..{hi}: {:?}", t.labels);
            assert!(t.at.iter().all(|v| (lo..=hi).contains(v)), "{lo}..{hi}: {:?}", t.at);
            assert!(t.labels.iter().all(|l| l.len() <= 10), "{:?}", t.labels);
        }
        // An empty range still gets one tick, and `-0` is never written.
        assert_eq!(labels(3.0, 3.0, 8, Unit::Fixed("B".into())), ["3 B"]);
        assert_eq!(short(-0.0001, 2), "0.00");
    }

    #[test]
    fn test_time_axis_ticks_in_the_svg_are_short_evenly_spaced_and_apart() {
        let dir = tempdir();
        // Times built by adding 0.05 s, as a timeline's are: the floating
        // point noise (0.15000000000000002) is in the data.
        let mut t = 0.0;
        let points: Vec<(f64, f64)> = (0..9)
            .map(|i| {
                t += 0.05;
                (t - 0.03, 4.0 + i as f64)
            })
            .collect();
        let chart = LineChart {
            title: "over time".into(),
            x_label: "time".into(),
            y_label: "throughput".into(),
            y_unit: "MiB/s".into(),
            x_scale: XScale::Seconds,
            series: vec![Series {
                label: "RDMA WRITE (client)".into(),
                points,
                transport: Some(Transport::Rdma),
                stroke: Stroke::Solid,
            }],
        };
        let paths = write_line_chart(&chart, &dir.join("time")).unwrap();
        let texts = svg_text_at(&paths[1]);
        let x_ticks: Vec<&(String, f64, f64)> = texts.iter().filter(|t| t.0.ends_with(" ms")).collect();
        let labels: Vec<&str> = x_ticks.iter().map(|t| t.0.as_str()).collect();
        assert_eq!(
            labels,
            ["50 ms", "100 ms", "150 ms", "200 ms", "250 ms", "300 ms", "350 ms", "400 ms"]
        );
        // On one line, evenly spaced, each further from the next than the
        // widest label is long (14 px type: under 9 px a character).
        assert!(x_ticks.iter().all(|t| t.2 == x_ticks[0].2), "{x_ticks:?}");
        let gaps: Vec<f64> = x_ticks.windows(2).map(|w| w[1].1 - w[0].1).collect();
        assert!(gaps.iter().all(|g| (g - gaps[0]).abs() <= 1.0), "{gaps:?}");
        assert!(gaps[0] > 9.0 * 6.0, "labels {gaps:?} px apart would overlap");
        let y_ticks: Vec<&str> = texts
            .iter()
            .filter(|t| t.0.ends_with(" MiB/s"))
            .map(|t| t.0.as_str())
            .collect();
        assert_eq!(
            y_ticks,
            ["0 MiB/s", "2 MiB/s", "4 MiB/s", "6 MiB/s", "8 MiB/s", "10 MiB/s", "12 MiB/s"]
        );
        // No label anywhere carries floating point noise.
        assert!(
            texts.iter().all(|t| !t.0.contains("0000") && !t.0.contains("9999")),
            "{texts:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn test_each_transport_has_one_colour_in_line_and_bar_charts() {
        let dir = tempdir();
        let line = |label: &str, transport, stroke| Series {
            label: label.into(),
            points: vec![(0.1, 1.0), (0.2, 2.0), (0.3, 1.5)],
            transport: Some(transport),
            stroke,
        };
        let chart = LineChart {
            title: "lines".into(),
            x_label: "time".into(),
            y_label: "throughput".into(),
            y_unit: "MiB/s".into(),
            x_scale: XScale::Seconds,
            series: vec![
                line("RDMA (client)", Transport::Rdma, Stroke::Solid),
                line("RDMA (server)", Transport::Rdma, Stroke::Dashed),
                line("TCP (client)", Transport::Tcp, Stroke::Solid),
                line("TCP (server)", Transport::Tcp, Stroke::Dashed),
                line("fabric", Transport::Libfabric, Stroke::Solid),
            ],
        };
        let lines = write_line_chart(&chart, &dir.join("lines")).unwrap();
        let strokes = svg_colors(&lines[1], "polyline", "stroke");
        let (rdma, tcp, fabric) = (Transport::Rdma.hex(), Transport::Tcp.hex(), Transport::Libfabric.hex());
        // Every line and legend sample is in its transport's colour; the
        // three colours differ.
        assert!(
            strokes.iter().all(|c| [&rdma, &tcp, &fabric].contains(&c)),
            "{strokes:?}"
        );
        for c in [&rdma, &tcp, &fabric] {
            assert!(strokes.contains(c), "{c} not among {strokes:?}");
        }
        assert!(rdma != tcp && tcp != fabric && rdma != fabric);
        let bar = |label: &str, transport| Bar {
            label: label.into(),
            value: 1.0,
            transport: Some(transport),
        };
        let bars = BarChart {
            title: "bars".into(),
            y_label: "CPU".into(),
            y_unit: "s/GiB".into(),
            bars: vec![
                bar("RDMA server", Transport::Rdma),
                bar("TCP server", Transport::Tcp),
                bar("RDMA client", Transport::Rdma),
                bar("TCP client", Transport::Tcp),
            ],
        };
        let files = write_bar_chart(&bars, &dir.join("bars")).unwrap();
        assert_eq!(
            svg_colors(&files[1], "rect", "fill"),
            [&rdma, &tcp, &rdma, &tcp].map(String::clone)
        );
        std::fs::remove_dir_all(&dir).unwrap();
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
