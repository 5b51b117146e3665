//! Collective runs out of labctl: their size sweeps as charts of busbw and
//! time per operation against size, one line per record, as `report plot`
//! writes them and `report html` inlines them. (Their CSV is
//! [`crate::collective::points_csv`] and [`crate::collective::ranks_csv`].)

use std::path::{Path, PathBuf};

use super::export::{chart_stem, label, strokes};
use super::saved::{io_err, positive, ReportError};
use crate::collective::{CollectiveRecord, PointRecord};
use crate::plot::{write_line_chart, LineChart, PlotError, Series, Transport, XScale};

/// A record with a size sweep: more than one size to draw a line through.
pub fn has_sweep(record: &CollectiveRecord) -> bool {
    record.points.len() > 1
}

/// A record's name on a chart: `allreduce 1a2b3c4d, 4 ranks` (busbw is
/// comparable across world sizes, so records of several are overlaid).
fn series_label(r: &CollectiveRecord) -> String {
    format!("{}, {} ranks", label(&r.collective, &r.id), r.world)
}

/// The two charts of collective sweeps, named `busbw` and `time`: busbw
/// (the figure nccl-tests compares across collectives and world sizes) and
/// the slowest rank's time per operation, against size, one line per
/// record. A chart with no figures has no lines.
pub fn collective_charts(records: &[&CollectiveRecord]) -> [(&'static str, LineChart); 2] {
    let of = match records {
        [one] => format!(" ({})", series_label(one)),
        _ => String::new(),
    };
    // The collectives run over verbs: one colour, strokes told apart as for pair sweeps.
    let transports = vec![Transport::Rdma; records.len()];
    let strokes = strokes(&transports);
    let series = |y: fn(&PointRecord) -> Option<f64>| -> Vec<Series> {
        records
            .iter()
            .zip(&strokes)
            .map(|(r, stroke)| Series {
                label: series_label(r),
                points: r
                    .points
                    .iter()
                    .filter_map(|p| y(p).map(|v| (p.size as f64, v)))
                    .collect(),
                transport: Some(Transport::Rdma),
                stroke: *stroke,
            })
            .filter(|s| !s.points.is_empty())
            .collect()
    };
    [
        (
            "busbw",
            LineChart {
                title: format!("bus bandwidth vs size{of}"),
                x_label: "size (as nccl-tests counts it)".into(),
                y_label: "busbw".into(),
                y_unit: "GB/s".into(),
                x_scale: XScale::Log2Bytes,
                series: series(|p| positive(p.busbw_gb_s)),
            },
        ),
        (
            "time",
            LineChart {
                title: format!("time per operation vs size{of}"),
                x_label: "size (as nccl-tests counts it)".into(),
                y_label: "time of the slowest rank".into(),
                y_unit: "µs".into(),
                x_scale: XScale::Log2Bytes,
                series: series(|p| positive(p.time_us)),
            },
        ),
    ]
}

/// Draws [`collective_charts`] of `records` into `dir` as PNG and SVG:
/// `<collective>-<id8>-busbw` and `-time` for one record,
/// `sweeps-<id8>-<id8>...-busbw` and `-time` for several. Every record
/// needs a size sweep. Returns the files written.
pub fn plot_collectives(records: &[&CollectiveRecord], dir: &Path) -> Result<Vec<PathBuf>, ReportError> {
    if let Some(r) = records.iter().find(|r| !has_sweep(r)) {
        return Err(ReportError::NoSweep {
            id: r.id.clone(),
            workload: r.collective.clone(),
        });
    }
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let names: Vec<(&str, &str)> = records.iter().map(|r| (r.collective.as_str(), r.id.as_str())).collect();
    let stem = chart_stem(&names);
    let mut written = Vec::new();
    for (what, chart) in collective_charts(records) {
        if chart.series.is_empty() {
            continue;
        }
        written.extend(write_line_chart(&chart, &dir.join(format!("{stem}-{what}")))?);
    }
    if written.is_empty() {
        return Err(PlotError::Empty(format!("the sweeps of {stem}")).into());
    }
    Ok(written)
}
