use std::path::{Path, PathBuf};

use super::*;
use crate::run::{LatencyRecord, RunRecord, SweepPoint};

fn run(id: &str, started_at: &str, workload: &str) -> RunRecord {
    let mut r = RunRecord {
        schema: crate::run::RUN_SCHEMA,
        id: id.into(),
        lab: "pair".into(),
        workload: workload.into(),
        started_at: started_at.into(),
        verified: true,
        duration_s: 2.0,
        ..Default::default()
    };
    r.params.size = 65536;
    r.params.iterations = 200;
    r.params.num_qps = 1;
    r.params.cm = "rdma_cm".into();
    r.params.completion = "event".into();
    r.server.node = "server".into();
    r.client.node = "client".into();
    r
}

/// A path under the temp dir no other test (or run of this one) uses;
/// not created.
fn scratch_path(label: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "labctl-report-{label}-{}-{}",
        std::process::id(),
        rand::random::<u64>()
    ))
}

fn saved(r: RunRecord) -> Saved {
    let raw = serde_json::to_value(&r).unwrap();
    Saved {
        path: PathBuf::from(format!("{}.json", r.id)),
        record: Record::Run(Box::new(r)),
        raw,
    }
}

fn bench_json(id: &str, ratio: f64, ours_median: f64) -> serde_json::Value {
    let side = |tool: &str, median: f64| {
        serde_json::json!({
            "tool": tool, "command": tool,
            "stats": {"min": median, "median": median, "max": median, "n": 1},
            "cpu_client_s_per_gib": {"n": 0}, "cpu_total_s_per_gib": {"median": 10.0, "n": 1},
            "samples": [{"round": 0, "value": median, "verified": true}]
        })
    };
    serde_json::json!({
        "schema": 1, "id": id, "lab": "pair", "suite": "quick", "rounds": 1,
        "server": "server", "client": "client", "perftest_version": "6.06",
        "perftest_device": [["rxe0", 1], ["rxe0", 1]],
        "started_at": "2026-11-22T05:00:00Z", "duration_s": 60.0,
        "pairs": [{
            "spec": {"workload": "write-bw", "tool": "ib_write_bw", "size": 65536, "iterations": 300,
                     "depth": [128, 16], "metric": "bw_avg_mib_s", "target": 1.1, "provider": null},
            "unit": "MiB/s", "better": "higher",
            "reference": side("ib_write_bw", ours_median / ratio),
            "ours": side("write-bw", ours_median),
            "ratio": ratio, "meets_target": ratio >= 1.1, "cpu_ratio": 1.0
        }],
        "saved_to": null
    })
}

#[test]
fn test_judge_change_knows_the_direction_of_each_metric() {
    use Better::{Higher, Lower};
    let j = |old: f64, new: f64, better| judge_change(Some(old), Some(new), better, 5.0);
    // Bandwidth: more is better.
    assert_eq!(j(100.0, 110.0, Higher), (Some(10.0), Verdict::Better));
    assert_eq!(j(100.0, 90.0, Higher), (Some(-10.0), Verdict::Worse));
    // Latency and CPU: less is better; the same +10% is a regression.
    assert_eq!(j(100.0, 110.0, Lower), (Some(10.0), Verdict::Worse));
    assert_eq!(j(100.0, 90.0, Lower), (Some(-10.0), Verdict::Better));
    // Inside the threshold is the same, whichever way.
    assert_eq!(j(100.0, 104.0, Higher).1, Verdict::Same);
    assert_eq!(j(100.0, 96.0, Lower).1, Verdict::Same);
    // The threshold itself counts.
    assert_eq!(j(100.0, 95.0, Higher).1, Verdict::Worse);
    assert_eq!(judge_change(Some(100.0), Some(96.0), Higher, 3.0).1, Verdict::Worse);
    // No old value or a zero one: no percentage to judge.
    assert_eq!(
        judge_change(None, Some(1.0), Higher, 5.0),
        (None, Verdict::NotComparable)
    );
    assert_eq!(
        judge_change(Some(0.0), Some(1.0), Higher, 5.0),
        (None, Verdict::NotComparable)
    );
}

#[test]
fn test_compare_runs_gives_rows_with_changes_and_param_differences() {
    let mut old = run("aaaa", "2026-11-22T05:00:00Z", "write-bw");
    old.bw_avg_mib_s = 8.0;
    old.bw_peak_mib_s = 10.0;
    old.msg_rate_mpps = 0.000128;
    old.cpu.client.per_gib_s = Some(20.0);
    let mut new = run("bbbb", "2026-11-22T06:00:00Z", "write-bw");
    new.bw_avg_mib_s = 6.0;
    new.bw_peak_mib_s = 10.2;
    new.msg_rate_mpps = 0.000096;
    new.cpu.client.per_gib_s = Some(15.0);
    new.params.size = 4096;
    let c = compare(&saved(old), &saved(new), 5.0).unwrap();
    let row = |m: &str| {
        c.metrics
            .iter()
            .find(|r| r.metric == m)
            .unwrap_or_else(|| panic!("no {m}"))
    };
    assert_eq!(row("bw avg").change_pct, Some(-25.0));
    assert_eq!(row("bw avg").verdict, Verdict::Worse);
    assert_eq!(row("bw peak").verdict, Verdict::Same);
    assert_eq!(row("cpu client").change_pct, Some(-25.0));
    assert_eq!(row("cpu client").verdict, Verdict::Better);
    assert_eq!(row("duration").verdict, Verdict::Same);
    // Latency was not measured by either run: no row, rather than a row of blanks.
    assert!(c.metrics.iter().all(|r| !r.metric.starts_with("lat")));
    assert!(c.metrics.iter().all(|r| r.metric != "cpu server"));
    assert_eq!(c.regressions, 2, "bw avg and msg rate: {:?}", c.metrics);
    assert_eq!(
        c.param_differences,
        vec![ParamDiff {
            name: "size".into(),
            old: "65536".into(),
            new: "4096".into()
        }]
    );
}

#[test]
fn test_compare_runs_sweeps_point_by_point_and_latency_lower_is_better() {
    let point = |size: u64, bw: f64, typical: f64| SweepPoint {
        size,
        iterations: 20,
        bw_avg_mib_s: bw,
        lat_us: LatencyRecord {
            typical,
            samples: 20,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut old = run("aaaa", "2026-11-22T05:00:00Z", "write-lat");
    old.lat_us = LatencyRecord {
        min: 100.0,
        typical: 200.0,
        avg: 210.0,
        p99: 400.0,
        p999: 500.0,
        samples: 200,
        ..Default::default()
    };
    old.sweep = vec![point(2, 0.1, 200.0), point(4, 0.2, 200.0)];
    let mut new = old.clone();
    new.id = "bbbb".into();
    new.lat_us.typical = 150.0;
    new.lat_us.p99 = 480.0;
    new.sweep = vec![point(4, 0.2, 300.0), point(8, 0.4, 200.0)];
    let c = compare(&saved(old), &saved(new), 5.0).unwrap();
    let verdict = |m: &str| c.metrics.iter().find(|r| r.metric == m).map(|r| r.verdict);
    assert_eq!(verdict("lat typical"), Some(Verdict::Better));
    assert_eq!(verdict("lat p99"), Some(Verdict::Worse));
    assert_eq!(verdict("lat min"), Some(Verdict::Same));
    // Only the size both sweeps have is compared.
    assert_eq!(verdict("lat typical @ 4 B"), Some(Verdict::Worse));
    assert_eq!(verdict("bw avg @ 4 B"), Some(Verdict::Same));
    assert_eq!(verdict("lat typical @ 2 B"), None);
    assert_eq!(verdict("lat typical @ 8 B"), None);
    assert!(c.param_differences.is_empty(), "{:?}", c.param_differences);
}

#[test]
fn test_compare_benches_pairs_ratios_and_refuses_a_run_against_a_bench() {
    let parse = |v: serde_json::Value| parse_record(Path::new("b.json"), v.to_string().as_bytes()).unwrap();
    let old = parse(bench_json("b1", 1.2, 6.0));
    let new = parse(bench_json("b2", 1.0, 6.6));
    let c = compare(&old, &new, 5.0).unwrap();
    let row = |m: &str| {
        c.metrics
            .iter()
            .find(|r| r.metric == m)
            .unwrap_or_else(|| panic!("no {m}"))
    };
    let ratio = row("write-bw ours/ib_write_bw ratio");
    assert_eq!((ratio.old, ratio.new), (Some(1.2), Some(1.0)));
    assert_eq!(ratio.verdict, Verdict::Worse);
    let ours = row("write-bw ours median");
    assert!((ours.change_pct.unwrap() - 10.0).abs() < 1e-9);
    assert_eq!(ours.verdict, Verdict::Better);
    assert_eq!(row("write-bw ib_write_bw median").verdict, Verdict::Better);
    assert_eq!(row("write-bw ours cpu").verdict, Verdict::Same);
    assert!(c.param_differences.is_empty());

    let a_run = saved(run("cccc", "2026-11-22T05:00:00Z", "write-bw"));
    let err = compare(&a_run, &new, 5.0).unwrap_err().to_string();
    assert!(
        err.contains("b2") && err.contains("bench") && err.contains("cccc"),
        "{err}"
    );
}

#[test]
fn test_runs_csv_has_a_header_and_one_row_per_run() {
    let mut a = run("aaaa", "2026-11-22T05:00:00Z", "write-bw");
    a.bw_avg_mib_s = 7.25;
    a.params.provider = Some("odd, \"quoted\" provider".into());
    let mut b = run("bbbb", "2026-11-22T06:00:00Z", "write-lat");
    b.lat_us.typical = 321.5;
    b.lat_us.samples = 200;
    let mut out = Vec::new();
    runs_csv(&[&a, &b], &mut out).unwrap();
    let mut reader = csv::Reader::from_reader(out.as_slice());
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(header, RUN_COLUMNS);
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 2);
    let col = |row: &csv::StringRecord, name: &str| {
        row.get(RUN_COLUMNS.iter().position(|c| *c == name).unwrap())
            .unwrap()
            .to_string()
    };
    assert_eq!(col(&rows[0], "id"), "aaaa");
    assert_eq!(col(&rows[0], "bw_avg_mib_s"), "7.25");
    assert_eq!(col(&rows[0], "lat_typical_us"), "", "a bandwidth run has no latency");
    assert_eq!(col(&rows[0], "provider"), "odd, \"quoted\" provider");
    assert_eq!(col(&rows[1], "lat_typical_us"), "321.5");
    assert_eq!(col(&rows[1], "bw_avg_mib_s"), "");
    assert_eq!(col(&rows[1], "size"), "65536");
}

#[test]
fn test_sweep_csv_has_one_row_per_point() {
    let mut a = run("aaaa", "2026-11-22T05:00:00Z", "write-bw");
    a.sweep = (1..=3)
        .map(|i| SweepPoint {
            size: 1 << i,
            iterations: 20,
            bw_avg_mib_s: i as f64,
            ..Default::default()
        })
        .collect();
    let plain = run("bbbb", "2026-11-22T06:00:00Z", "write-bw");
    let mut out = Vec::new();
    sweep_csv(&[&a, &plain], &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[1].starts_with("aaaa,") && lines[3].contains(",8,20,3,"), "{text}");
}

#[test]
fn test_load_dir_reads_runs_and_benches_and_skips_what_is_not_a_record() {
    let dir = scratch_path("load");
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: String| std::fs::write(dir.join(name), text).unwrap();
    write(
        "2-write-bw-b1.json",
        serde_json::to_string(&run("b1c2", "2026-11-22T06:00:00Z", "write-bw")).unwrap(),
    );
    write(
        "1-write-bw-b1.json",
        serde_json::to_string(&run("b1c3", "2026-11-22T05:00:00Z", "write-bw")).unwrap(),
    );
    write("3-bench-quick-ff.json", bench_json("ff00", 1.2, 6.0).to_string());
    // An older record: fewer fields, plus one this version does not know.
    write(
        "0-read-a.json",
        r#"{"schema":1,"id":"a0","workload":"read","started_at":"2026-11-21T00:00:00Z","verified":true,"future":1}"#
            .into(),
    );
    write("4-broken.json", "{\"id\":".into());
    write("5-other.json", "[1, 2]".into());
    write("notes.txt", "not json, not looked at".into());
    write(".9-write-bw-x.json.tmp1", "partial".into());
    write("20261127T003023Z-ci.json", "{\"suite\": \"ci.yaml\"}".into());
    write(
        "20261127T003119Z-write-read-d0ec.trace.json",
        "{\"traceEvents\": []}".into(),
    );

    let (saved, skipped) = load_dir(&dir).unwrap();
    let ids: Vec<&str> = saved.iter().map(Saved::id).collect();
    // The bench started at 05:00 too: same second, the id decides.
    assert_eq!(ids, ["a0", "b1c3", "ff00", "b1c2"], "oldest first");
    assert_eq!(saved[2].kind(), "bench");
    assert_eq!(saved[0].run("show").unwrap().params.cm, "", "missing fields default");
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert!(skipped[0].to_string().contains("4-broken.json") && skipped[0].reason.contains("not JSON"));
    assert!(skipped[1].reason.contains("neither a run nor a bench"));

    assert_eq!(resolve(&saved, "latest", &dir).unwrap().id(), "b1c2");
    assert_eq!(resolve(&saved, "b1c3", &dir).unwrap().id(), "b1c3");
    assert_eq!(resolve(&saved, "ff", &dir).unwrap().id(), "ff00");
    let ambiguous = resolve(&saved, "b1", &dir).unwrap_err();
    assert!(
        ambiguous.to_string().contains("b1c2") && ambiguous.to_string().contains("b1c3"),
        "{ambiguous}"
    );
    let missing = resolve(&saved, "zz", &dir).unwrap_err();
    assert!(missing.is_bad_input() && missing.to_string().contains("labctl report list"));
    let bench_as_run = saved[2].run("csv exports runs").unwrap_err().to_string();
    assert!(bench_as_run.contains("ff00") && bench_as_run.contains("is a bench"));

    let (none, _) = load_dir(&dir.join("absent")).unwrap();
    assert!(none.is_empty());
    assert!(matches!(resolve(&none, "latest", &dir), Err(ReportError::Empty { .. })));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn test_list_row_headline_follows_the_workload() {
    let mut bw = run("aaaa", "2026-11-22T05:00:00Z", "write-bw");
    bw.bw_avg_mib_s = 7.0;
    let row = list_row(&saved(bw));
    assert_eq!(
        (row.headline_metric, row.headline_value, row.params.as_str()),
        (Some("bw_avg_mib_s"), Some(7.0), "64 KiB x 200, 1 QP, rdma_cm")
    );
    let mut lat = run("bbbb", "2026-11-22T05:00:00Z", "write-lat");
    lat.lat_us.typical = 250.0;
    lat.lat_us.samples = 10;
    lat.params.all_sizes = true;
    lat.params.max_size = 65536;
    lat.params.iterations = 20;
    let row = list_row(&saved(lat));
    assert_eq!(row.headline_metric, Some("lat_typical_us"));
    assert_eq!(row.params, "sweep 2 B..64 KiB x 20, 1 QP, rdma_cm");
    let bench = parse_record(Path::new("b.json"), bench_json("b1", 1.2, 6.0).to_string().as_bytes()).unwrap();
    let row = list_row(&bench);
    assert_eq!(
        (row.kind, row.workload.as_str(), row.headline.as_str(), row.verified),
        ("bench", "bench quick", "targets met 1/1", true)
    );
}

#[test]
fn test_plot_needs_a_sweep_and_draws_one_series_per_run() {
    let dir = scratch_path("plot");
    let flat = run("cccc", "2026-11-22T05:00:00Z", "write-bw");
    let err = plot_sweeps(&[&flat], &dir).unwrap_err().to_string();
    assert!(err.contains("cccc") && err.contains("--all-sizes"), "{err}");

    let sweep = |id: &str, scale: f64| {
        let mut r = run(id, "2026-11-22T05:00:00Z", "write-bw");
        r.sweep = (1..=10)
            .map(|i| SweepPoint {
                size: 1 << i,
                iterations: 20,
                bw_avg_mib_s: i as f64 * scale,
                ..Default::default()
            })
            .collect();
        r
    };
    let (a, b) = (sweep("aaaaaaaa11", 1.0), sweep("bbbbbbbb22", 2.0));
    let files = plot_sweeps(&[&a, &b], &dir).unwrap();
    // No latency figures in these sweeps: the bandwidth chart only.
    assert_eq!(
        files,
        vec![
            dir.join("sweeps-aaaaaaaa-bbbbbbbb-bw.png"),
            dir.join("sweeps-aaaaaaaa-bbbbbbbb-bw.svg")
        ]
    );
    let svg = std::fs::read_to_string(&files[1]).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).map(str::trim).collect();
    assert!(
        texts.contains(&"write-bw aaaaaaaa") && texts.contains(&"write-bw bbbbbbbb"),
        "{texts:?}"
    );
    let png = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&files[0]).unwrap()));
    assert!(png.read_info().is_ok());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn test_plot_collectives_draws_busbw_and_time_one_line_per_record() {
    use crate::fixtures::{collective, ALLREDUCE_SWEEP, ALLTOALL_SWEEP, INCAST};
    let dir = scratch_path("plot-coll");
    let (allreduce, alltoall) = (collective(ALLREDUCE_SWEEP), collective(ALLTOALL_SWEEP));
    let files = plot_collectives(&[&allreduce, &alltoall], &dir).unwrap();
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "sweeps-5546a271-6599be2f-busbw.png",
            "sweeps-5546a271-6599be2f-busbw.svg",
            "sweeps-5546a271-6599be2f-time.png",
            "sweeps-5546a271-6599be2f-time.svg"
        ]
    );
    let svg = std::fs::read_to_string(&files[1]).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).map(str::trim).collect();
    for want in [
        "allreduce 5546a271, 4 ranks",
        "alltoall 6599be2f, 2 ranks",
        "8 B",
        "32 KiB",
        "busbw",
    ] {
        assert!(texts.contains(&want), "{want:?} not among {texts:?}");
    }
    assert!(texts.iter().any(|t| t.ends_with(" GB/s")), "{texts:?}");
    // One line per record, the second dashed: its points are the record's busbw.
    let [(_, busbw), (_, time)] = collective_charts(&[&allreduce, &alltoall]);
    assert_eq!(busbw.series.len(), 2);
    let drawn: Vec<(f64, f64)> = allreduce.points.iter().map(|p| (p.size as f64, p.busbw_gb_s)).collect();
    assert_eq!(busbw.series[0].points, drawn);
    assert_eq!(
        (busbw.series[0].stroke, busbw.series[1].stroke),
        (crate::plot::Stroke::Solid, crate::plot::Stroke::Dashed)
    );
    assert_eq!(
        time.series[1].points.last(),
        Some(&(65536.0, alltoall.points[13].time_us))
    );
    // A single size is no sweep: refused, saying how to make one.
    let err = plot_collectives(&[&collective(INCAST)], &dir).unwrap_err().to_string();
    assert!(
        err.contains(INCAST) && err.contains("labctl run incast --all-sizes"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn test_of_two_records_in_the_same_second_the_one_written_last_is_the_latest() {
    let dir = scratch_path("second");
    std::fs::create_dir_all(&dir).unwrap();
    // Two runs in a row within one second; the second's id sorts first.
    let base = std::time::SystemTime::now();
    for (name, id, written) in [
        ("first.json", "ffff", base),
        ("second.json", "0000", base + std::time::Duration::from_millis(600)),
    ] {
        let path = dir.join(name);
        std::fs::write(
            &path,
            serde_json::to_string(&run(id, "2026-11-30T19:09:54Z", "write-bw")).unwrap(),
        )
        .unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(written)
            .unwrap();
    }
    let (saved, _) = load_dir(&dir).unwrap();
    let ids: Vec<&str> = saved.iter().map(Saved::id).collect();
    assert_eq!(ids, ["ffff", "0000"], "oldest first");
    assert_eq!(resolve(&saved, "latest", &dir).unwrap().id(), "0000");
    std::fs::remove_dir_all(&dir).unwrap();
}
