//! Runs out of labctl: CSV of runs and of their size sweeps (one row per
//! size), and the sweeps drawn as bandwidth and latency charts.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::saved::{io_err, positive, ReportError};
use crate::plot::{write_line_chart, LineChart, PlotError, Series, Stroke, Transport, XScale};
use crate::run::RunRecord;

fn num(v: Option<f64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

fn flag(v: bool) -> String {
    v.to_string()
}

/// Columns of [`runs_csv`].
pub const RUN_COLUMNS: &[&str] = &[
    "id",
    "started_at",
    "lab",
    "workload",
    "server",
    "client",
    "size",
    "iterations",
    "duration_s",
    "all_sizes",
    "max_size",
    "tx_depth",
    "cq_moderation",
    "post_list",
    "inline_size",
    "num_qps",
    "cm",
    "completion",
    "provider",
    "verified",
    "bw_avg_mib_s",
    "bw_peak_mib_s",
    "bw_avg_gbps",
    "msg_rate_mpps",
    "lat_min_us",
    "lat_typical_us",
    "lat_avg_us",
    "lat_max_us",
    "lat_stdev_us",
    "lat_p99_us",
    "lat_p999_us",
    "lat_samples",
    "cpu_server_user_s",
    "cpu_server_system_s",
    "cpu_server_s_per_gib",
    "cpu_client_user_s",
    "cpu_client_system_s",
    "cpu_client_s_per_gib",
    "wall_s",
];

fn run_fields(r: &RunRecord) -> Vec<String> {
    let p = &r.params;
    vec![
        r.id.clone(),
        r.started_at.clone(),
        r.lab.clone(),
        r.workload.clone(),
        r.server.node.clone(),
        r.client.node.clone(),
        p.size.to_string(),
        p.iterations.to_string(),
        p.duration_s.to_string(),
        flag(p.all_sizes),
        p.max_size.to_string(),
        p.tx_depth.to_string(),
        p.cq_moderation.to_string(),
        p.post_list.to_string(),
        p.inline_size.to_string(),
        p.num_qps.to_string(),
        p.cm.clone(),
        p.completion.clone(),
        p.provider.clone().unwrap_or_default(),
        flag(r.verified),
    ]
}

/// Writes one row per run: id, time, workload, parameters, metrics. Absent
/// values (no latency in a bandwidth run, no CPU per GiB when nothing moved)
/// are empty cells.
pub fn runs_csv(runs: &[&RunRecord], out: impl Write) -> Result<(), csv::Error> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record(RUN_COLUMNS)?;
    for r in runs {
        let l = &r.lat_us;
        let lat = |v: f64| num((l.samples > 0).then_some(v));
        let mut row = run_fields(r);
        row.extend([
            num(positive(r.bw_avg_mib_s)),
            num(positive(r.bw_peak_mib_s)),
            num(positive(r.bw_avg_gbps)),
            num(positive(r.msg_rate_mpps)),
            lat(l.min),
            lat(l.typical),
            lat(l.avg),
            lat(l.max),
            lat(l.stdev),
            lat(l.p99),
            lat(l.p999),
            l.samples.to_string(),
            r.cpu.server.user_s.to_string(),
            r.cpu.server.system_s.to_string(),
            num(r.cpu.server.per_gib_s),
            r.cpu.client.user_s.to_string(),
            r.cpu.client.system_s.to_string(),
            num(r.cpu.client.per_gib_s),
            r.duration_s.to_string(),
        ]);
        w.write_record(&row)?;
    }
    w.flush()?;
    Ok(())
}

/// Columns of [`sweep_csv`].
pub const SWEEP_COLUMNS: &[&str] = &[
    "id",
    "started_at",
    "workload",
    "cm",
    "num_qps",
    "verified",
    "size",
    "iterations",
    "bw_avg_mib_s",
    "bw_peak_mib_s",
    "msg_rate_mpps",
    "lat_min_us",
    "lat_typical_us",
    "lat_avg_us",
    "lat_p99_us",
    "lat_p999_us",
    "lat_samples",
];

/// Writes one row per sweep point of each run (runs without a sweep add none).
pub fn sweep_csv(runs: &[&RunRecord], out: impl Write) -> Result<(), csv::Error> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record(SWEEP_COLUMNS)?;
    for r in runs {
        for s in &r.sweep {
            let l = &s.lat_us;
            let lat = |v: f64| num((l.samples > 0).then_some(v));
            w.write_record([
                r.id.clone(),
                r.started_at.clone(),
                r.workload.clone(),
                r.params.cm.clone(),
                r.params.num_qps.to_string(),
                flag(r.verified),
                s.size.to_string(),
                s.iterations.to_string(),
                num(positive(s.bw_avg_mib_s)),
                num(positive(s.bw_peak_mib_s)),
                num(positive(s.msg_rate_mpps)),
                lat(l.min),
                lat(l.typical),
                lat(l.avg),
                lat(l.p99),
                lat(l.p999),
                l.samples.to_string(),
            ])?;
        }
    }
    w.flush()?;
    Ok(())
}

/// The first 8 characters of an id, as charts and file names show it.
pub(super) fn short_id(id: &str) -> &str {
    &id[..id.len().min(8)]
}

/// A record's short name on a chart: `write-bw 1a2b3c4d`.
pub(super) fn label(what: &str, id: &str) -> String {
    format!("{what} {}", short_id(id))
}

/// The charts' file stem: `<what>-<id8>` for one record, `sweeps-<id8>-<id8>...` for several.
pub(super) fn chart_stem(records: &[(&str, &str)]) -> String {
    match records {
        [(what, id)] => format!("{what}-{}", short_id(id)),
        many => format!(
            "sweeps-{}",
            many.iter().map(|(_, id)| short_id(id)).collect::<Vec<_>>().join("-")
        ),
    }
}

/// Each line in its transport's colour; a second line of the same
/// transport dashed, a third solid again (the legend tells them apart).
pub(super) fn strokes(transports: &[Transport]) -> Vec<Stroke> {
    transports
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let before = transports[..i].iter().filter(|u| *u == t).count();
            if before % 2 == 0 {
                Stroke::Solid
            } else {
                Stroke::Dashed
            }
        })
        .collect()
}

/// Draws bandwidth vs size and latency vs size of the sweeps of `runs` (one
/// series each) into `dir` as PNG and SVG; a chart no run has figures for is
/// left out. Returns the files written.
pub fn plot_sweeps(runs: &[&RunRecord], dir: &Path) -> Result<Vec<PathBuf>, ReportError> {
    for r in runs {
        if r.sweep.is_empty() {
            return Err(ReportError::NoSweep {
                id: r.id.clone(),
                workload: r.workload.clone(),
            });
        }
    }
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let names: Vec<(&str, &str)> = runs.iter().map(|r| (r.workload.as_str(), r.id.as_str())).collect();
    let stem = chart_stem(&names);
    let of = match runs {
        [one] => format!(" ({})", label(&one.workload, &one.id)),
        _ => String::new(),
    };
    let transports: Vec<Transport> = runs.iter().map(|r| Transport::of_workload(&r.workload)).collect();
    let strokes = strokes(&transports);
    let series = |y: fn(&crate::run::SweepPoint) -> Option<f64>| -> Vec<Series> {
        runs.iter()
            .zip(transports.iter().zip(&strokes))
            .map(|(r, (transport, stroke))| Series {
                label: label(&r.workload, &r.id),
                points: r
                    .sweep
                    .iter()
                    .filter_map(|p| y(p).map(|v| (p.size as f64, v)))
                    .collect(),
                transport: Some(*transport),
                stroke: *stroke,
            })
            .filter(|s| !s.points.is_empty())
            .collect()
    };
    let charts = [
        (
            "bw",
            LineChart {
                title: format!("bandwidth vs message size{of}"),
                x_label: "message size".into(),
                y_label: "average bandwidth".into(),
                y_unit: "MiB/s".into(),
                x_scale: XScale::Log2Bytes,
                series: series(|p| positive(p.bw_avg_mib_s)),
            },
        ),
        (
            "lat",
            LineChart {
                title: format!("latency vs message size{of}"),
                x_label: "message size".into(),
                y_label: "typical latency".into(),
                y_unit: "µs".into(),
                x_scale: XScale::Log2Bytes,
                series: series(|p| (p.lat_us.samples > 0).then_some(p.lat_us.typical)),
            },
        ),
    ];
    let mut written = Vec::new();
    for (what, chart) in charts {
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
