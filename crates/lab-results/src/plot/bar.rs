//! Bar charts: one labelled bar per value, in its transport's colour.

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use super::canvas::{
    failed, prepare, register_font, write_png, PlotError, FONT, HEIGHT, MAX_Y_TICKS, WIDTH, Y_LABEL_AREA,
};
use super::colors::{color_of, Transport};
use super::ticks::{linear_ticks, TickedAxis, Unit};

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

/// Writes `chart` to `<stem>.png` and `<stem>.svg`; returns both paths.
pub fn write_bar_chart(chart: &BarChart, stem: &Path) -> Result<Vec<PathBuf>, PlotError> {
    if chart.bars.is_empty() || chart.bars.iter().any(|b| !b.value.is_finite()) {
        return Err(PlotError::Empty(chart.title.clone()));
    }
    let (png, svg) = prepare(stem)?;
    write_png(&png, |area| draw_bars(chart, area))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::tests::{decode_png, svg_texts, tempdir};
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
}
