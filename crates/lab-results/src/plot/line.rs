//! Line charts: series over time or over message size, each in its
//! transport's colour and stroke, with a legend.

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use super::canvas::{
    failed, prepare, register_font, span, write_png, PlotError, FONT, HEIGHT, MAX_Y_TICKS, WIDTH, Y_LABEL_AREA,
};
use super::colors::{color_of, Transport};
use super::ticks::{linear_ticks, log2_ticks, TickedAxis, Unit};

/// How a line is drawn: lines of the same transport differ by their stroke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Stroke {
    /// A solid line.
    #[default]
    Solid,
    /// A dashed line.
    Dashed,
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

/// Most ticks on an x axis: 960 px wide leaves room for 10 labels such as `350 ms`.
const MAX_X_TICKS: usize = 10;

/// Writes `chart` to `<stem>.png` and `<stem>.svg`; returns both paths.
pub fn write_line_chart(chart: &LineChart, stem: &Path) -> Result<Vec<PathBuf>, PlotError> {
    if !chart.series.iter().flat_map(|s| &s.points).any(|p| chart.keeps(p)) {
        return Err(PlotError::Empty(chart.title.clone()));
    }
    let (png, svg) = prepare(stem)?;
    write_png(&png, |area| draw_line(chart, area))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::tests::{decode_png, svg_text_at, svg_texts, tempdir};
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
}
