//! Bulk records: `labctl bulk`'s two transfers of the same bytes (RDMA WRITE
//! and TCP) side by side: per-side time, MiB/s and CPU, a one-line reading,
//! the throughput timelines and summary as CSV (the `csv` crate, which
//! replaced hand-joined lines), and the charts.
//!
//! This module owns the record and everything derived from it; moving the
//! bytes is the orchestration crate's job.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::plot::{self, Bar, BarChart, LineChart, PlotError, Series, Stroke, XScale};
use crate::run::{RunRecord, SideRecord};

/// Version of the bulk record (`--json`).
pub const BULK_SCHEMA: u32 = 1;

const MIB: f64 = (1u64 << 20) as f64;
const GIB: f64 = (1u64 << 30) as f64;

/// The two transports, in the order they run.
pub const TRANSPORTS: [Transport; 2] = [
    Transport {
        name: "rdma",
        label: "RDMA WRITE",
        workload: "bulk-rdma",
    },
    Transport {
        name: "tcp",
        label: "TCP",
        workload: "bulk-tcp",
    },
];

/// One way of moving the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transport {
    /// Short name, as in the CSV (`rdma`, `tcp`).
    pub name: &'static str,
    /// Human label, as in the charts.
    pub label: &'static str,
    /// The agent workload.
    pub workload: &'static str,
}

/// One side of one transfer.
#[derive(Debug, Clone, Serialize)]
pub struct BulkSide {
    /// The node.
    pub node: String,
    /// Seconds from connected to done, as this side saw it.
    pub elapsed_s: f64,
    /// Bytes over elapsed, MiB/s.
    pub mib_s: f64,
    /// Bytes over elapsed, Gb/s (10^9 bits).
    pub gbps: f64,
    /// User CPU seconds of the agent's session thread.
    pub cpu_user_s: f64,
    /// System CPU seconds of the agent's session thread.
    pub cpu_system_s: f64,
    /// (user + system) per GiB moved.
    pub cpu_s_per_gib: f64,
    /// Busy CPU seconds of the whole node meanwhile (includes the kernel's
    /// softirq work, where rxe runs, and anything else on the node).
    pub node_cpu_busy_s: Option<f64>,
}

/// One transfer.
#[derive(Debug, Clone, Serialize)]
pub struct BulkLeg {
    /// `rdma` or `tcp`.
    pub transport: &'static str,
    /// The workload that ran.
    pub workload: String,
    /// The server checked every byte and found them right.
    pub verified: bool,
    /// What the server found.
    pub verify_detail: String,
    /// Bytes moved.
    pub bytes: u64,
    /// The receiving side.
    pub server: BulkSide,
    /// The sending side.
    pub client: BulkSide,
    /// The run's id (its record is saved as usual).
    pub run_id: String,
    /// Where the run's record was saved.
    pub saved_to: Option<String>,
}

/// Everything `labctl bulk` reports (`--json`).
#[derive(Debug, Clone, Serialize)]
pub struct BulkRecord {
    /// [`BULK_SCHEMA`].
    pub schema: u32,
    /// The lab.
    pub lab: String,
    /// Bytes per transfer.
    pub total: u64,
    /// Bytes per WRITE / write.
    pub chunk: u64,
    /// Payload seed (the same for both).
    pub seed: u64,
    /// Both transfers verified.
    pub verified: bool,
    /// The RDMA transfer.
    pub rdma: BulkLeg,
    /// The TCP transfer.
    pub tcp: BulkLeg,
    /// The comparison in one sentence.
    pub reading: String,
    /// The timeline CSV, when written.
    pub csv: Option<String>,
    /// The summary CSV, when written.
    pub summary_csv: Option<String>,
    /// The charts written (PNG and SVG of each).
    pub plots: Vec<String>,
    /// The two run records, RDMA first.
    pub runs: Vec<RunRecord>,
}

/// `bulk.csv` → `bulk-summary.csv` (same directory).
pub fn summary_path(csv: &Path) -> PathBuf {
    let stem = csv
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = csv
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    csv.with_file_name(format!("{stem}-summary{ext}"))
}

fn side(s: &SideRecord, bytes: u64, cpu: &crate::run::CpuRecord) -> BulkSide {
    let per_s = |div: f64| {
        if s.elapsed_s > 0.0 {
            bytes as f64 / div / s.elapsed_s
        } else {
            0.0
        }
    };
    let cpu_s = cpu.user_s + cpu.system_s;
    BulkSide {
        node: s.node.clone(),
        elapsed_s: s.elapsed_s,
        mib_s: per_s(MIB),
        gbps: per_s(1e9 / 8.0),
        cpu_user_s: cpu.user_s,
        cpu_system_s: cpu.system_s,
        cpu_s_per_gib: if bytes > 0 { cpu_s / (bytes as f64 / GIB) } else { 0.0 },
        node_cpu_busy_s: s.facts.get("node_cpu_busy_s").and_then(|v| v.parse().ok()),
    }
}

/// One transfer's figures from its run record.
pub fn leg(transport: Transport, r: &RunRecord) -> BulkLeg {
    let bytes = r.params.total.unwrap_or(r.server.bytes.max(r.client.bytes));
    BulkLeg {
        transport: transport.name,
        workload: r.workload.clone(),
        // The server is the one that checks: its verdict is the transfer's.
        verified: r.verified && r.server.checked && r.server.verified,
        verify_detail: r.server.verify_detail.clone(),
        bytes,
        server: side(&r.server, bytes, &r.cpu.server),
        client: side(&r.client, bytes, &r.cpu.client),
        run_id: r.id.clone(),
        saved_to: r.saved_to.clone(),
    }
}

/// The comparison in one sentence: time (the sender's view, which ends when
/// the receiver has every byte) and the receiving side's CPU.
pub fn reading(rdma: &BulkLeg, tcp: &BulkLeg) -> String {
    let (r, t) = (rdma.client.elapsed_s, tcp.client.elapsed_s);
    let amount = plot::bytes_label(rdma.bytes as f64);
    let rdma_cpu = rdma.server.cpu_user_s + rdma.server.cpu_system_s;
    let tcp_cpu = tcp.server.cpu_user_s + tcp.server.cpu_system_s;
    let cpu = if rdma_cpu <= 0.0 && tcp_cpu <= 0.0 {
        "with no measurable CPU on the server either way".to_string()
    } else if rdma_cpu <= 0.0 {
        format!("with no measurable CPU on the server (TCP: {tcp_cpu:.3} s)")
    } else if rdma_cpu <= tcp_cpu {
        format!(
            "using {:.1}x less CPU on the server ({rdma_cpu:.3} s vs {tcp_cpu:.3} s)",
            tcp_cpu / rdma_cpu
        )
    } else {
        format!(
            "using {:.1}x more CPU on the server ({rdma_cpu:.3} s vs {tcp_cpu:.3} s)",
            rdma_cpu / tcp_cpu
        )
    };
    format!("RDMA moved the same {amount} in {r:.3} s vs {t:.3} s over TCP, {cpu}")
}

/// MiB/s at each sample: (t, rate), the rate measured back to the latest
/// earlier sample at least 2% of the transfer's duration before (or to
/// (0 s, 0 B)). One read or chunk alone can take microseconds and make a
/// spike that means nothing; the window smooths that away. A sample with
/// no time before it gets the average so far (0 at t = 0).
pub fn rates(timeline: &[crate::run::TimelineSample]) -> Vec<(f64, f64)> {
    let window = timeline.last().map_or(0.0, |p| p.t_s / 50.0);
    let at = |j: usize| {
        if j == 0 {
            (0.0, 0u64)
        } else {
            (timeline[j - 1].t_s, timeline[j - 1].bytes)
        }
    };
    // `base` indexes (0 s, 0 B) as 0 and sample k as k + 1.
    let mut base = 0usize;
    timeline
        .iter()
        .enumerate()
        .map(|(i, p)| {
            while base < i && timeline[base].t_s <= p.t_s - window {
                base += 1;
            }
            let (t0, b0) = at(base);
            let dt = p.t_s - t0;
            let rate = if dt > 0.0 {
                p.bytes.saturating_sub(b0) as f64 / MIB / dt
            } else if p.t_s > 0.0 {
                p.bytes as f64 / MIB / p.t_s
            } else {
                0.0
            };
            (p.t_s, rate)
        })
        .collect()
}

/// Every (transport, side, timeline) of the runs, RDMA first, client before
/// server. The bulk-rdma server has none: a WRITE does not involve it.
pub fn timelines(runs: &[RunRecord]) -> Vec<(&'static str, &'static str, &[crate::run::TimelineSample])> {
    let mut out = Vec::new();
    for (transport, r) in TRANSPORTS.iter().zip(runs) {
        for (side_name, s) in [("client", &r.client), ("server", &r.server)] {
            if !s.timeline.is_empty() {
                out.push((transport.name, side_name, s.timeline.as_slice()));
            }
        }
    }
    out
}

/// The timelines as CSV: `transport,side,t_s,bytes,mib_s`, one row per
/// sample; `mib_s` is the throughput at the sample ([`rates`]).
pub fn timeline_csv(timelines: &[(&str, &str, &[crate::run::TimelineSample])]) -> String {
    let mut csv = csv::Writer::from_writer(Vec::new());
    write_row(&mut csv, ["transport", "side", "t_s", "bytes", "mib_s"]);
    for (transport, side_name, timeline) in timelines {
        for (p, (_, rate)) in timeline.iter().zip(rates(timeline)) {
            write_row(
                &mut csv,
                [
                    transport.to_string(),
                    side_name.to_string(),
                    format!("{:.6}", p.t_s),
                    p.bytes.to_string(),
                    format!("{rate:.3}"),
                ],
            );
        }
    }
    finish(csv)
}

/// One row per transport and side with the headline figures.
pub fn summary_csv(r: &BulkRecord) -> String {
    let mut csv = csv::Writer::from_writer(Vec::new());
    write_row(
        &mut csv,
        [
            "transport",
            "side",
            "node",
            "bytes",
            "elapsed_s",
            "mib_s",
            "gbps",
            "cpu_user_s",
            "cpu_system_s",
            "cpu_s_per_gib",
            "node_cpu_busy_s",
            "verified",
        ],
    );
    for leg in [&r.rdma, &r.tcp] {
        for (name, s) in [("client", &leg.client), ("server", &leg.server)] {
            write_row(
                &mut csv,
                [
                    leg.transport.to_string(),
                    name.to_string(),
                    s.node.clone(),
                    leg.bytes.to_string(),
                    format!("{:.6}", s.elapsed_s),
                    format!("{:.3}", s.mib_s),
                    format!("{:.4}", s.gbps),
                    format!("{:.4}", s.cpu_user_s),
                    format!("{:.4}", s.cpu_system_s),
                    format!("{:.3}", s.cpu_s_per_gib),
                    s.node_cpu_busy_s.map(|v| format!("{v:.3}")).unwrap_or_default(),
                    leg.verified.to_string(),
                ],
            );
        }
    }
    finish(csv)
}

/// Writes one record into an in-memory CSV; a `Vec` writer cannot fail.
fn write_row<I, S>(csv: &mut csv::Writer<Vec<u8>>, row: I)
where
    I: IntoIterator<Item = S>,
    S: AsRef<[u8]>,
{
    csv.write_record(row).expect("writing CSV into memory");
}

/// The CSV text (UTF-8: every field came from a `String`).
fn finish(csv: csv::Writer<Vec<u8>>) -> String {
    let bytes = csv.into_inner().expect("flushing CSV into memory");
    String::from_utf8(bytes).expect("CSV of UTF-8 fields")
}

/// Title of the throughput-over-time chart.
pub fn throughput_title(r: &BulkRecord) -> String {
    format!(
        "Throughput over the transfer: {} in {} chunks",
        plot::bytes_label(r.total as f64),
        plot::bytes_label(r.chunk as f64)
    )
}

/// Title of the average-throughput chart.
pub const RATE_TITLE: &str = "RDMA WRITE vs TCP: average throughput";
/// Title of the CPU chart.
pub const CPU_TITLE: &str = "CPU seconds per GiB moved (agent session thread)";

/// Writes `throughput`, `rdma-vs-tcp` and `cpu-per-gib`, each as PNG and
/// SVG. Each transport keeps its colour ([`plot::Transport`]) in all three;
/// in the throughput chart the sender's line is solid, the receiver's dashed.
pub fn write_plots(r: &BulkRecord, dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    let of = |name: &str| TRANSPORTS.iter().find(|t| t.name == name);
    let series = timelines(&r.runs)
        .into_iter()
        .map(|(transport, side_name, timeline)| Series {
            label: format!("{} ({side_name})", of(transport).map_or("?", |t| t.label)),
            points: rates(timeline),
            transport: of(transport).map(|t| plot::Transport::of_workload(t.workload)),
            stroke: if side_name == "client" {
                Stroke::Solid
            } else {
                Stroke::Dashed
            },
        })
        .collect();
    let mut paths = plot::write_line_chart(
        &LineChart {
            title: throughput_title(r),
            x_label: "time since connected".into(),
            y_label: "throughput".into(),
            y_unit: "MiB/s".into(),
            x_scale: XScale::Seconds,
            series,
        },
        &dir.join("throughput"),
    )?;
    let bar = |label: &str, value: f64, leg: &BulkLeg| Bar {
        label: label.into(),
        value,
        transport: Some(plot::Transport::of_workload(&leg.workload)),
    };
    paths.extend(plot::write_bar_chart(
        &BarChart {
            title: RATE_TITLE.into(),
            y_label: "sender's throughput, until the receiver has every byte".into(),
            y_unit: "MiB/s".into(),
            bars: vec![
                bar("RDMA WRITE", r.rdma.client.mib_s, &r.rdma),
                bar("TCP", r.tcp.client.mib_s, &r.tcp),
            ],
        },
        &dir.join("rdma-vs-tcp"),
    )?);
    paths.extend(plot::write_bar_chart(
        &BarChart {
            title: CPU_TITLE.into(),
            y_label: "CPU seconds per GiB".into(),
            y_unit: "s/GiB".into(),
            bars: vec![
                bar("RDMA server", r.rdma.server.cpu_s_per_gib, &r.rdma),
                bar("TCP server", r.tcp.server.cpu_s_per_gib, &r.tcp),
                bar("RDMA client", r.rdma.client.cpu_s_per_gib, &r.rdma),
                bar("TCP client", r.tcp.client.cpu_s_per_gib, &r.tcp),
            ],
        },
        &dir.join("cpu-per-gib"),
    )?);
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::TimelineSample;

    fn sample(t_s: f64, bytes: u64) -> TimelineSample {
        TimelineSample { t_s, bytes }
    }

    fn bulk_side(node: &str, elapsed_s: f64, cpu: f64) -> BulkSide {
        BulkSide {
            node: node.into(),
            elapsed_s,
            mib_s: 4.0 / elapsed_s,
            gbps: 0.0,
            cpu_user_s: cpu / 2.0,
            cpu_system_s: cpu / 2.0,
            cpu_s_per_gib: cpu * 256.0,
            node_cpu_busy_s: None,
        }
    }

    fn leg_of(transport: &'static str, client_s: f64, server_cpu: f64) -> BulkLeg {
        BulkLeg {
            transport,
            workload: format!("bulk-{transport}"),
            verified: true,
            verify_detail: String::new(),
            bytes: 4 << 20,
            server: bulk_side("server", client_s, server_cpu),
            client: bulk_side("client", client_s, 0.05),
            run_id: "id".into(),
            saved_to: None,
        }
    }

    #[test]
    fn test_rates_are_per_interval_mib_s() {
        let mib = 1u64 << 20;
        let r = rates(&[
            sample(0.5, mib),
            sample(1.0, 3 * mib),
            sample(1.0, 3 * mib),
            sample(2.0, 4 * mib),
        ]);
        assert_eq!(r.len(), 4);
        assert_eq!(r[0], (0.5, 2.0));
        assert_eq!(r[1], (1.0, 4.0));
        // Same instant as the sample before: measured back past it, not infinity.
        assert_eq!(r[2], (1.0, 4.0));
        assert_eq!(r[3], (2.0, 1.0));
        assert!(rates(&[]).is_empty());
        // Reads microseconds apart are smoothed over 2% of the transfer.
        let bursty: Vec<TimelineSample> = (1..=100u64)
            .flat_map(|i| {
                [
                    sample(i as f64 * 0.01, i * mib - 4096),
                    sample(i as f64 * 0.01 + 1e-6, i * mib),
                ]
            })
            .collect();
        assert!(
            rates(&bursty).iter().all(|&(_, r)| r > 50.0 && r < 200.0),
            "{:?}",
            rates(&bursty)
        );
        assert_eq!(rates(&[sample(0.0, 10)]), vec![(0.0, 0.0)]);
    }

    #[test]
    fn test_reading_compares_time_and_server_cpu() {
        let line = reading(&leg_of("rdma", 0.6, 0.01), &leg_of("tcp", 0.4, 0.2));
        assert_eq!(
            line,
            "RDMA moved the same 4 MiB in 0.600 s vs 0.400 s over TCP, \
             using 20.0x less CPU on the server (0.010 s vs 0.200 s)"
        );
        let line = reading(&leg_of("rdma", 0.6, 0.3), &leg_of("tcp", 0.4, 0.1));
        assert!(
            line.ends_with("using 3.0x more CPU on the server (0.300 s vs 0.100 s)"),
            "{line}"
        );
        let line = reading(&leg_of("rdma", 0.6, 0.0), &leg_of("tcp", 0.4, 0.1));
        assert!(
            line.ends_with("with no measurable CPU on the server (TCP: 0.100 s)"),
            "{line}"
        );
    }

    #[test]
    fn test_summary_path_sits_beside_the_csv() {
        assert_eq!(
            summary_path(Path::new("out/bulk.csv")),
            PathBuf::from("out/bulk-summary.csv")
        );
        assert_eq!(summary_path(Path::new("bulk")), PathBuf::from("bulk-summary"));
    }

    #[test]
    fn test_timeline_csv_has_a_row_per_sample_ending_at_the_total() {
        let mib = 1u64 << 20;
        let rdma = [sample(0.5, 2 * mib), sample(1.0, 4 * mib)];
        let tcp = [sample(0.25, mib), sample(0.5, 4 * mib)];
        let csv = timeline_csv(&[
            ("rdma", "client", &rdma),
            ("tcp", "client", &tcp),
            ("tcp", "server", &tcp),
        ]);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], "transport,side,t_s,bytes,mib_s");
        assert_eq!(lines.len(), 7);
        assert_eq!(lines[1], "rdma,client,0.500000,2097152,4.000");
        assert_eq!(lines[2], "rdma,client,1.000000,4194304,4.000");
        assert_eq!(lines[4], "tcp,client,0.500000,4194304,12.000");
        assert!(lines[6].starts_with("tcp,server,0.500000,4194304,"));
    }

    /// A verified 4 MiB bulk record (256 KiB chunks, seed 1) of these legs, with no runs.
    fn record_of(rdma: BulkLeg, tcp: BulkLeg) -> BulkRecord {
        BulkRecord {
            schema: BULK_SCHEMA,
            lab: "lab".into(),
            total: 4 << 20,
            chunk: 256 << 10,
            seed: 1,
            verified: true,
            rdma,
            tcp,
            reading: String::new(),
            csv: None,
            summary_csv: None,
            plots: vec![],
            runs: vec![],
        }
    }

    /// Issue 17 item 6: the three bulk charts of a 0.42 s transfer have
    /// time ticks in short milliseconds (once `0.15000000000000002`), and
    /// RDMA and TCP keep one colour each across all three.
    #[test]
    fn test_bulk_charts_label_ticks_in_short_units_and_colour_by_transport() {
        let mib = 1u64 << 20;
        // Samples every 0.05 s, the times summed as a timeline's are.
        let timeline = |rate: u64, offset: f64| -> Vec<TimelineSample> {
            let mut t = offset;
            (1..=8u64)
                .map(|i| {
                    t += 0.05;
                    sample(t, i * rate * mib / 20)
                })
                .collect()
        };
        let run = |workload: &str, client: Vec<TimelineSample>, server: Vec<TimelineSample>| {
            let mut r = RunRecord {
                workload: workload.into(),
                ..Default::default()
            };
            r.client.timeline = client;
            r.server.timeline = server;
            r
        };
        let record = BulkRecord {
            runs: vec![
                run("bulk-rdma", timeline(10, 0.02), vec![]),
                run("bulk-tcp", timeline(14, 0.0), timeline(13, 0.0)),
            ],
            ..record_of(leg_of("rdma", 0.42, 0.01), leg_of("tcp", 0.30, 0.2))
        };
        let dir = std::env::temp_dir().join(format!(
            "labctl-bulk-plot-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        let paths = write_plots(&record, &dir).unwrap();
        assert_eq!(paths.len(), 6);

        let texts = crate::plot::tests::svg_text_at(&dir.join("throughput.svg"));
        let x_ticks: Vec<&str> = texts
            .iter()
            .filter(|t| t.0.ends_with(" ms") || t.0.ends_with(" s"))
            .map(|t| t.0.as_str())
            .collect();
        assert_eq!(
            x_ticks,
            ["50 ms", "100 ms", "150 ms", "200 ms", "250 ms", "300 ms", "350 ms", "400 ms"],
            "{texts:?}"
        );
        for svg in ["throughput.svg", "rdma-vs-tcp.svg", "cpu-per-gib.svg"] {
            let texts = crate::plot::tests::svg_text_at(&dir.join(svg));
            let numbers: Vec<&str> = texts
                .iter()
                .map(|t| t.0.as_str())
                .filter(|t| t.starts_with(|c: char| c.is_ascii_digit()))
                .collect();
            // Every number on a chart is short: no float noise.
            assert!(numbers.iter().all(|t| t.len() <= 12), "{svg}: {numbers:?}");
            assert!(
                texts.iter().any(|t| t.0.ends_with(" MiB/s") || t.0.ends_with(" s/GiB")),
                "{svg}: no y tick with its unit in {texts:?}"
            );
        }

        let (rdma, tcp) = (plot::Transport::Rdma.hex(), plot::Transport::Tcp.hex());
        let lines = crate::plot::tests::svg_colors(&dir.join("throughput.svg"), "polyline", "stroke");
        assert!(lines.contains(&rdma) && lines.contains(&tcp), "{lines:?}");
        assert!(lines.iter().all(|c| *c == rdma || *c == tcp), "{lines:?}");
        let rate = crate::plot::tests::svg_colors(&dir.join("rdma-vs-tcp.svg"), "rect", "fill");
        assert_eq!(rate, [rdma.clone(), tcp.clone()]);
        // Issue 17: RDMA's two bars were blue and green, TCP's red and orange.
        let cpu = crate::plot::tests::svg_colors(&dir.join("cpu-per-gib.svg"), "rect", "fill");
        assert_eq!(cpu, [rdma.clone(), tcp.clone(), rdma, tcp]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn test_summary_csv_has_a_row_per_transport_and_side() {
        let record = record_of(leg_of("rdma", 0.5, 0.0), leg_of("tcp", 0.25, 0.1));
        let csv = summary_csv(&record);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 5);
        assert!(lines[0].starts_with("transport,side,node,bytes,elapsed_s,mib_s,"));
        assert_eq!(
            lines[1],
            "rdma,client,client,4194304,0.500000,8.000,0.0000,0.0250,0.0250,12.800,,true"
        );
        assert!(
            lines[4].starts_with("tcp,server,server,4194304,0.250000,16.000,"),
            "{}",
            lines[4]
        );
        let columns = lines[0].split(',').count();
        assert!(lines.iter().all(|l| l.split(',').count() == columns));
    }
}
