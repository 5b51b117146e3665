use super::*;
use crate::bench::{PairSpec, SideStats, Stats, Suite};
use serde_json::json;

fn run() -> RunRecord {
    let mut r = RunRecord {
        id: "run<1>&\"x\"".into(),
        lab: "e2e".into(),
        workload: "write-lat".into(),
        bw_avg_mib_s: 12.345678,
        started_at: "2026-11-26T20:00:00Z".into(),
        ..RunRecord::default()
    };
    r.lat_us.min = 80.0;
    r.lat_us.typical = 100.5;
    r.lat_us.avg = 101.0;
    r.lat_us.p99 = 150.0;
    r.lat_us.p999 = 170.0;
    r.lat_us.max = 180.0;
    r.lat_us.samples = 20;
    r
}

fn side(tool: &str, v: f64) -> SideStats {
    SideStats {
        tool: tool.into(),
        command: String::new(),
        stats: Stats::of([Some(v)]),
        cpu_client_s_per_gib: Stats::default(),
        cpu_total_s_per_gib: Stats::default(),
        left_out: Default::default(),
        time_us: Default::default(),
        samples: Vec::new(),
    }
}

fn pair(size: u64, metric: Metric, ours: f64, perftest: f64) -> PairRecord {
    let (workload, tool) = match metric {
        Metric::LatTypicalUs => ("write-lat", "ib_write_lat"),
        _ => ("write-bw", "ib_write_bw"),
    };
    PairRecord {
        spec: PairSpec {
            workload: workload.into(),
            tool: tool.into(),
            size,
            iterations: 20,
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
        ratio: Some(ours / perftest),
        meets_target: None,
        cpu_ratio: None,
        time_ratio: None,
        drift: Default::default(),
        spread: None,
    }
}

fn bench(id: &str, started_at: &str) -> BenchRecord {
    BenchRecord {
        schema: 1,
        id: id.into(),
        lab: "e2e".into(),
        suite: Suite::Sweep,
        rounds: 1,
        warmup_rounds: 0,
        order: "abba".into(),
        server: "server".into(),
        client: "client".into(),
        perftest_version: "6.06".into(),
        perftest_device: [("rxe0".into(), 1), ("rxe0".into(), 1)],
        started_at: started_at.into(),
        client_uptime_s: None,
        duration_s: 1.0,
        pairs: [2, 4096]
            .iter()
            .flat_map(|&s| {
                [
                    pair(s, Metric::BwAvgMibS, s as f64, s as f64 * 1.25),
                    pair(s, Metric::LatTypicalUs, 100.0, 90.0),
                ]
            })
            .collect(),
        agent_rss: Vec::new(),
        failures: Default::default(),
        orchestration: None,
        collectives: None,
        saved_to: None,
        expectations: Vec::new(),
    }
}

fn trace() -> Value {
    json!({"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "server <s>"}},
        {"ph": "X", "name": "post WRITE", "pid": 1, "tid": 1, "ts": 0.0, "dur": 5.0, "args": {}},
        {"ph": "X", "name": "</script><script>alert(1)</script>", "pid": 2, "tid": 1, "ts": 3.0, "dur": 1.0, "args": {}},
    ]})
}

fn page() -> (String, PageContents) {
    let r = run();
    let (b1, b2) = (bench("b1", "2026-11-25T10:00:00Z"), bench("b2", "2026-11-26T10:00:00Z"));
    render(&PageInput {
        lab: "lab<&>",
        runs: vec![&r],
        collectives: Vec::new(),
        benches: vec![&b2],
        history: vec![&b1, &b2],
        topology: None,
        trace: Some(("t<1>.json".into(), trace())),
    })
    .unwrap()
}

#[test]
fn names_are_escaped_and_a_trace_cannot_end_its_script() {
    let (html, _) = page();
    assert!(html.contains("labctl report: lab lab&lt;&amp;&gt;"), "lab name");
    assert!(
        html.contains("data-run=\"run&lt;1&gt;&amp;&quot;x&quot;\""),
        "run id in an attribute"
    );
    assert!(html.contains("Trace t&lt;1&gt;.json"));
    assert!(!html.contains("lab<&>") && !html.contains("run<1>"));
    // One `</script>` per script element: the trace's text cannot close one early.
    assert_eq!(html.matches("</script>").count(), 2);
    let data = &html[html.find("id=\"trace-data\">").unwrap()..];
    let data = &data["id=\"trace-data\">".len()..data.find("</script>").unwrap()];
    let back: Value = serde_json::from_str(data).unwrap();
    assert_eq!(back, trace(), "the embedded JSON reads back unchanged");
}

#[test]
fn the_page_needs_no_network() {
    let (html, _) = page();
    for attr in ["src=", "href="] {
        for (i, _) in html.match_indices(attr) {
            let value = html[i + attr.len()..].trim_start_matches(['"', '\'']);
            assert!(
                !value.starts_with("http:") && !value.starts_with("https:") && !value.starts_with("//"),
                "{attr} loads from the network: {}",
                &html[i..(i + 80).min(html.len())]
            );
        }
    }
    assert!(!html.contains("<link") && !html.contains("@import") && !html.contains("url(http"));
    assert!(
        html.contains("<style>") && html.contains("(function ()"),
        "style and script are inline"
    );
}

#[test]
fn numbers_carry_the_records_values_and_every_chart_is_drawn() {
    let (html, contents) = page();
    assert!(html.contains("data-field=\"bw_avg_mib_s\" data-value=\"12.345678\">12.346<"));
    assert!(html.contains("data-field=\"lat_us.typical\" data-value=\"100.5\">100.5<"));
    assert!(
        html.contains("data-field=\"ratio\" data-value=\"0.8\">"),
        "bench ratio 2/2.5"
    );
    assert_eq!(
        contents.charts,
        [
            "run-run<1>&\"x\"-latency",
            "bench-b2-sweep-bw",
            "bench-b2-sweep-lat",
            "bench-b2-ratios",
            "ratios-over-time"
        ]
    );
    assert_eq!(html.matches("<figure class=\"chart\"").count(), 5);
    // Each chart is an inline SVG with drawn shapes, not an XML document.
    assert!(!html.contains("<?xml"));
    for name in &contents.charts {
        let at = html.find(&format!("data-chart=\"{}\"", escape(name))).unwrap();
        let fig = &html[at..at + html[at..].find("</figure>").unwrap()];
        assert!(
            fig.contains("<svg") && (fig.contains("<polyline") || fig.contains("<rect")),
            "{name}"
        );
    }
    assert_eq!(
        (contents.trace.as_deref(), contents.trace_slices),
        (Some("t<1>.json"), 2)
    );
    assert_eq!(
        (contents.runs.len(), contents.benches.as_slice()),
        (1, &["b2".to_string()][..])
    );
}

#[test]
fn a_run_without_latency_samples_has_no_empty_chart() {
    let mut r = run();
    r.lat_us = Default::default();
    let (html, contents) = render(&PageInput {
        lab: "e2e",
        runs: vec![&r],
        collectives: Vec::new(),
        benches: Vec::new(),
        history: Vec::new(),
        topology: None,
        trace: None,
    })
    .unwrap();
    assert!(contents.charts.is_empty() && contents.trace.is_none());
    assert!(!html.contains("<script"), "no trace, no script");
}

/// The page of the real records `runs` and `collectives`.
fn page_of(runs: &[&RunRecord], collectives: &[&CollectiveRecord]) -> (String, PageContents) {
    render(&PageInput {
        lab: "quad",
        runs: runs.to_vec(),
        collectives: collectives.to_vec(),
        benches: Vec::new(),
        history: Vec::new(),
        topology: None,
        trace: None,
    })
    .unwrap()
}

/// The HTML of the section whose opening tag has `attr`.
fn section<'a>(html: &'a str, attr: &str) -> &'a str {
    let at = html.find(attr).unwrap_or_else(|| panic!("no section with {attr}"));
    let start = html[..at].rfind("<section").unwrap();
    &html[start..at + html[at..].find("</section>").unwrap()]
}

/// The `data-field` names of a piece of HTML, in order.
fn fields(html: &str) -> Vec<&str> {
    html.split("data-field=\"")
        .skip(1)
        .map(|rest| &rest[..rest.find('"').unwrap()])
        .collect()
}

#[test]
fn a_run_shows_only_what_it_measured() {
    use crate::fixtures::{run, WRITE_LAT, WRITE_READ};
    let (write_read, write_lat) = (run(WRITE_READ), run(WRITE_LAT));
    let (html, _) = page_of(&[&write_read, &write_lat], &[]);
    // write-read moves bytes and takes no latency samples: no latency rows.
    let wr = section(&html, &format!("data-run=\"{WRITE_READ}\""));
    assert_eq!(
        fields(wr),
        [
            "verified",
            "bw_avg_mib_s",
            "bw_peak_mib_s",
            "bw_avg_gbps",
            "msg_rate_mpps",
            "duration_s"
        ]
    );
    assert!(wr.contains(&format!(
        "data-field=\"bw_avg_mib_s\" data-value=\"{}\">1.090<",
        write_read.bw_avg_mib_s
    )));
    // msg rate 0.000279 Mpps: four significant digits, not rounded to zeros.
    assert!(wr.contains(">0.0002791<"), "{wr}");
    // write-lat measures latency and records bandwidth as 0: no bandwidth rows.
    let wl = section(&html, &format!("data-run=\"{WRITE_LAT}\""));
    assert_eq!(
        fields(wl),
        [
            "verified",
            "lat_us.min",
            "lat_us.typical",
            "lat_us.avg",
            "lat_us.p99",
            "lat_us.p999",
            "lat_us.max",
            "duration_s"
        ]
    );
    assert!(wl.contains(&format!(
        "data-field=\"lat_us.typical\" data-value=\"{}\">1240.8<",
        write_lat.lat_us.typical
    )));
    // Nothing on the page reads as a measured zero.
    assert!(!html.contains("data-value=\"0\""), "a zero printed as a figure");
    assert!(!html.contains("0.000000<"));
}

#[test]
fn a_collective_has_its_points_rank_times_and_a_chart() {
    use crate::fixtures::{collective, ALLREDUCE_SWEEP, INCAST};
    let (sweep, incast) = (collective(ALLREDUCE_SWEEP), collective(INCAST));
    let (html, contents) = page_of(&[], &[&sweep, &incast]);
    assert_eq!(contents.collectives, [ALLREDUCE_SWEEP, INCAST]);
    let s = section(&html, &format!("data-collective=\"{ALLREDUCE_SWEEP}\""));
    assert!(s.contains("allreduce on 4 ranks") && s.contains("ring (reduce-scatter + allgather)"));
    // nccl-tests' table: one row per size, the record's values in data-value.
    let points = &s[s.find("class=\"points\"").unwrap()..s.find("class=\"rank-times\"").unwrap()];
    assert_eq!(points.matches("<tr data-size=").count(), 14);
    for p in &sweep.points {
        let row = &points[points.find(&format!("<tr data-size=\"{}\"", p.size)).unwrap()..];
        let row = &row[..row.find("</tr>").unwrap()];
        for (field, v) in [
            ("time_us", p.time_us),
            ("algbw_gb_s", p.algbw_gb_s),
            ("busbw_gb_s", p.busbw_gb_s),
        ] {
            assert!(
                row.contains(&format!("data-field=\"{field}\" data-value=\"{v}\"")),
                "{field} in {row}"
            );
        }
        assert!(row.contains(&format!("data-field=\"wrong\" data-value=\"{}\"", p.wrong)));
        assert!(row.contains(&format!("rank {} (n{})", p.slowest_rank, p.slowest_rank + 1)));
    }
    // busbw 6.168e-7 GB/s at 8 B is shown, not rounded to 0.
    assert!(points.contains(">0.0000006168<"), "{points}");
    // Each rank's time at each size; the slowest marked.
    let times = &s[s.find("class=\"rank-times\"").unwrap()..s.find("class=\"ranks\"").unwrap()];
    assert_eq!(times.matches("data-field=\"rank_time_us.").count(), 14 * 4);
    assert_eq!(times.matches("class=\"slowest\"").count(), 14);
    assert!(times.contains("rank 3 (n4) µs"));
    assert!(!s.contains("class=\"incast\""), "no incast table for an allreduce");
    // incast: each sender's throughput and the fairness, the root left out.
    let i = section(&html, &format!("data-collective=\"{INCAST}\""));
    let record = incast.points[0].incast.as_ref().unwrap();
    assert!(i.contains(&format!(
        "data-field=\"incast.jain_fairness\" data-value=\"{}\"",
        record.jain_fairness
    )));
    let root = incast.root.unwrap();
    assert!(!i.contains(&format!("incast.sender_mib_s.{root}\"")));
    for q in (0..4).filter(|q| *q != root) {
        let v = record.sender_mib_s[q as usize];
        assert!(i.contains(&format!("data-field=\"incast.sender_mib_s.{q}\" data-value=\"{v}\"")));
    }
    // The sweep is charted; the single size of the incast draws no line.
    assert_eq!(contents.charts, ["collectives-busbw", "collectives-time"]);
    let chart = &html[html.find("data-chart=\"collectives-busbw\"").unwrap()..];
    let chart = &chart[..chart.find("</figure>").unwrap()];
    assert!(chart.contains("allreduce 5546a271, 4 ranks") && !chart.contains("incast 16b8ccb9"));
}

#[test]
fn a_failed_collective_names_the_rank_and_a_single_size_has_no_chart() {
    use crate::fixtures::{collective, BROADCAST_CORRUPT};
    let broadcast = collective(BROADCAST_CORRUPT);
    let (html, contents) = page_of(&[], &[&broadcast]);
    let s = section(&html, &format!("data-collective=\"{BROADCAST_CORRUPT}\""));
    assert!(s.contains("data-field=\"verified\">NO<"));
    assert!(s.contains("fault injected: corrupt") && s.contains("root rank 0 (server)"));
    assert!(s.contains("rank 0: 22 of 22022 elements wrong; first: operation 1 of size 4004 B, element 1000"));
    assert!(s.contains("data-field=\"wrong\" data-value=\"44\""));
    assert!(contents.charts.is_empty());
}
