//! The charts of a size-sweep bench (`labctl bench --sweep`): bandwidth vs
//! message size and latency vs message size, ours against perftest on the
//! same lab, one line per tool and workload.
//!
//! This module reads a [`BenchRecord`] and draws; it runs nothing and does
//! not decide what a sweep contains (the orchestration crate does).

use std::path::{Path, PathBuf};

use crate::bench::{BenchRecord, Metric, PairRecord, SideStats};
use crate::plot::{write_line_chart, LineChart, PlotError, Series, Stroke, Transport, XScale};

/// Draws `<dir>/sweep-<id8>-bw.{png,svg}` and `...-lat.{png,svg}` from the
/// medians of a sweep's pairs: ours solid, perftest dashed, in the RDMA
/// colour. A chart with no pair of its metric is left out. Returns the
/// files written.
pub fn plot_bench_sweep(record: &BenchRecord, dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    let points: Vec<&PairRecord> = record.pairs.iter().filter(|p| p.spec.sweep_point).collect();
    if points.is_empty() {
        return Err(PlotError::Empty(format!(
            "bench {} has no size sweep (made by `labctl bench --sweep`)",
            record.id
        )));
    }
    let stem = format!("sweep-{}", &record.id[..record.id.len().min(8)]);
    let charts = [
        ("bw", Metric::BwAvgMibS, "bandwidth", "average bandwidth", "MiB/s"),
        (
            "lat",
            Metric::LatTypicalUs,
            "latency",
            "typical latency (t_typical)",
            "µs",
        ),
    ];
    let mut written = Vec::new();
    for (what, metric, title, y_label, y_unit) in charts {
        let series = series_of(&points, metric);
        if series.is_empty() {
            continue;
        }
        let chart = LineChart {
            title: format!("{title} vs message size, ours and perftest (lab {})", record.lab),
            x_label: "message size".into(),
            y_label: y_label.into(),
            y_unit: y_unit.into(),
            x_scale: XScale::Log2Bytes,
            series,
        };
        written.extend(write_line_chart(&chart, &dir.join(format!("{stem}-{what}")))?);
    }
    Ok(written)
}

/// Per workload of `metric`, two lines: ours and the reference tool's, the
/// median of each size's samples, by size.
pub fn series_of(points: &[&PairRecord], metric: Metric) -> Vec<Series> {
    let mut workloads: Vec<&str> = Vec::new();
    for p in points.iter().filter(|p| p.spec.metric == metric) {
        if !workloads.contains(&p.spec.workload.as_str()) {
            workloads.push(&p.spec.workload);
        }
    }
    let line = |workload: &str, side: fn(&PairRecord) -> &SideStats, stroke| {
        let mut pairs: Vec<&&PairRecord> = points.iter().filter(|p| p.spec.workload == workload).collect();
        pairs.sort_by_key(|p| p.spec.size);
        let tool = pairs.first().map_or(String::new(), |p| side(p).tool.clone());
        Series {
            label: if tool == workload {
                format!("{workload} (ours)")
            } else {
                tool
            },
            points: pairs
                .iter()
                .filter_map(|p| side(p).stats.median.map(|v| (p.spec.size as f64, v)))
                .collect(),
            transport: Some(Transport::Rdma),
            stroke,
        }
    };
    workloads
        .into_iter()
        .flat_map(|w| {
            [
                line(w, |p| &p.ours, Stroke::Solid),
                line(w, |p| &p.reference, Stroke::Dashed),
            ]
        })
        .filter(|s| !s.points.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{PairSpec, Stats};

    fn side(tool: &str, values: &[f64]) -> SideStats {
        SideStats {
            tool: tool.into(),
            command: String::new(),
            stats: Stats::of(values.iter().map(|v| Some(*v))),
            cpu_client_s_per_gib: Stats::default(),
            cpu_total_s_per_gib: Stats::default(),
            left_out: Default::default(),
            time_us: Default::default(),
            samples: Vec::new(),
        }
    }

    fn point(workload: &str, tool: &str, metric: Metric, size: u64, ours: &[f64], perftest: &[f64]) -> PairRecord {
        PairRecord {
            spec: PairSpec {
                workload: workload.into(),
                tool: tool.into(),
                size,
                iterations: 10,
                depth: None,
                metric,
                target: None,
                provider: None,
                qps: 1,
                sweep_point: true,
            },
            unit: metric.unit().into(),
            better: "higher".into(),
            reference: side(tool, perftest),
            ours: side(workload, ours),
            ratio: None,
            meets_target: None,
            cpu_ratio: None,
            time_ratio: None,
            drift: Default::default(),
            spread: None,
        }
    }

    fn record(pairs: Vec<PairRecord>) -> BenchRecord {
        BenchRecord {
            schema: 1,
            id: "0123456789abcdef".into(),
            lab: "e2e".into(),
            suite: crate::bench::Suite::Sweep,
            rounds: 3,
            warmup_rounds: 0,
            order: "abba".into(),
            server: "server".into(),
            client: "client".into(),
            perftest_version: "6.06".into(),
            perftest_device: [("rxe0".into(), 1), ("rxe0".into(), 1)],
            started_at: String::new(),
            client_uptime_s: None,
            duration_s: 1.0,
            pairs,
            agent_rss: Vec::new(),
            failures: Default::default(),
            orchestration: None,
            collectives: None,
            saved_to: None,
            expectations: Vec::new(),
        }
    }

    #[test]
    fn each_tool_is_a_line_of_its_medians_by_size() {
        let bw = Metric::BwAvgMibS;
        // Given out of size order: the lines come out sorted.
        let pairs = [
            point("write-bw", "ib_write_bw", bw, 4096, &[8.0, 9.0, 30.0], &[7.0]),
            point("write-bw", "ib_write_bw", bw, 2, &[0.5], &[0.25, 0.75]),
            point(
                "write-lat",
                "ib_write_lat",
                Metric::LatTypicalUs,
                2,
                &[900.0],
                &[1000.0],
            ),
        ];
        let refs: Vec<&PairRecord> = pairs.iter().collect();
        let lines = series_of(&refs, bw);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].label, "write-bw (ours)");
        assert_eq!(lines[0].points, [(2.0, 0.5), (4096.0, 9.0)]);
        assert_eq!(lines[1].label, "ib_write_bw");
        assert_eq!(lines[1].points, [(2.0, 0.5), (4096.0, 7.0)]);
        assert_eq!((lines[0].stroke, lines[1].stroke), (Stroke::Solid, Stroke::Dashed));
        assert_eq!(series_of(&refs, Metric::LatTypicalUs)[1].points, [(2.0, 1000.0)]);
    }

    #[test]
    fn draws_both_charts_with_both_tools_in_the_legend() {
        let dir = std::env::temp_dir().join(format!("sweep-chart-{}", std::process::id()));
        let pairs = [2u64, 64, 4096]
            .iter()
            .flat_map(|&size| {
                [
                    point(
                        "write-bw",
                        "ib_write_bw",
                        Metric::BwAvgMibS,
                        size,
                        &[size as f64],
                        &[size as f64 / 2.0],
                    ),
                    point(
                        "write-lat",
                        "ib_write_lat",
                        Metric::LatTypicalUs,
                        size,
                        &[100.0],
                        &[110.0],
                    ),
                ]
            })
            .collect();
        let written = plot_bench_sweep(&record(pairs), &dir).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "sweep-01234567-bw.png",
                "sweep-01234567-bw.svg",
                "sweep-01234567-lat.png",
                "sweep-01234567-lat.svg"
            ]
        );
        let svg = std::fs::read_to_string(dir.join("sweep-01234567-bw.svg")).unwrap();
        for text in ["write-bw (ours)", "ib_write_bw", "4 KiB"] {
            assert!(svg.contains(text), "{text} missing from the bandwidth chart");
        }
        let _ = std::fs::remove_dir_all(&dir);
        // A bench without a sweep is refused, naming how to make one.
        let err = plot_bench_sweep(&record(Vec::new()), &dir).unwrap_err().to_string();
        assert!(err.contains("bench --sweep"), "{err}");
    }
}
