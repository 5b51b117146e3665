//! `labctl report html`: one self-contained page (charts, topology, the
//! numbers of runs, collectives and benches, a trace timeline) built from
//! saved records. Tables show what a record measured and nothing else: a
//! figure the run did not take (latency of a bandwidth loop, bandwidth of a
//! latency loop) is left out, not printed as 0.
//!
//! Everything the page needs is inline: the charts are the SVG that
//! [`crate::plot`] draws, the topology is [`crate::topology::to_svg`], the
//! trace is the Chrome trace JSON of `labctl run --trace` drawn by a small
//! script of ours ([`TIMELINE_JS`]). No network access, no CDN.
//!
//! This module only renders: it is given records, a topology and a trace
//! document, and returns HTML text; the CLI picks the records and writes
//! the file.

use serde::Serialize;
use serde_json::Value;

use crate::bench::{BenchRecord, Metric, PairRecord};
use crate::collective::CollectiveRecord;
use crate::plot::{
    bar_chart_svg, line_chart_svg, Bar, BarChart, LineChart, PlotError, Series, Stroke, Transport, XScale,
};
use crate::report::{amount, collective_charts, has_sweep, positive};
use crate::run::RunRecord;
use crate::sweep_chart::series_of;
use crate::topology::{to_svg, Topology};

/// The timeline script: lanes per node and QP, slices, flow arrows.
pub const TIMELINE_JS: &str = include_str!("timeline.js");
/// The page's style sheet.
const STYLE_CSS: &str = include_str!("style.css");
/// What the page is made of.
pub struct PageInput<'a> {
    /// The lab's name.
    pub lab: &'a str,
    /// The runs chosen.
    pub runs: Vec<&'a RunRecord>,
    /// The collective runs chosen.
    pub collectives: Vec<&'a CollectiveRecord>,
    /// The benches chosen.
    pub benches: Vec<&'a BenchRecord>,
    /// Every bench of the lab, oldest first (the ratios over time).
    pub history: Vec<&'a BenchRecord>,
    /// The lab's topology, when it could be read.
    pub topology: Option<&'a Topology>,
    /// A trace: its file name (shown) and its Chrome trace-event document.
    pub trace: Option<(String, Value)>,
}

/// What a page contains (`labctl report html --json`).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PageContents {
    /// Run ids shown.
    pub runs: Vec<String>,
    /// Collective run ids shown.
    pub collectives: Vec<String>,
    /// Bench ids shown.
    pub benches: Vec<String>,
    /// The charts, by their `data-chart` name.
    pub charts: Vec<String>,
    /// The topology is drawn.
    pub topology: bool,
    /// The trace shown, by file name.
    pub trace: Option<String>,
    /// Slices (X events) in the trace.
    pub trace_slices: usize,
}

/// Text safe inside HTML elements and quoted attributes.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// JSON safe inside a `<script>` element: `</script>` or `<!--` in a string cannot end it.
fn script_json(v: &Value) -> String {
    v.to_string().replace('<', "\\u003c")
}

/// An SVG document without what only a standalone file needs (the XML declaration).
fn inline_svg(svg: &str) -> &str {
    svg.find("<svg").map_or(svg, |i| &svg[i..])
}

/// Builds the page; returns its HTML and what it holds.
pub fn render(input: &PageInput) -> Result<(String, PageContents), PlotError> {
    let mut contents = PageContents::default();
    let mut body = String::new();
    let mut chart = |body: &mut String, name: &str, svg: Result<String, PlotError>| -> Result<(), PlotError> {
        match svg {
            Ok(svg) => {
                body.push_str(&format!(
                    "<figure class=\"chart\" data-chart=\"{}\">{}</figure>\n",
                    escape(name),
                    inline_svg(&svg)
                ));
                contents.charts.push(name.to_string());
                Ok(())
            }
            Err(PlotError::Empty(_)) => Ok(()),
            Err(e) => Err(e),
        }
    };

    if let Some(t) = input.topology {
        body.push_str("<section id=\"topology\"><h2>Topology</h2>\n");
        match to_svg(t) {
            Ok(svg) => {
                body.push_str(&format!("<figure class=\"topology\">{}</figure>\n", inline_svg(&svg)));
                contents.topology = true;
            }
            Err(e) => body.push_str(&format!(
                "<p class=\"note\">cannot draw the topology: {}</p>\n",
                escape(&e.to_string())
            )),
        }
        if let Some(note) = &t.note {
            body.push_str(&format!("<p class=\"note\">{}</p>\n", escape(note)));
        }
        body.push_str("</section>\n");
    }

    // The trace right after the topology: the timeline is what a reader looks for first.
    let mut trace_json = String::new();
    if let Some((name, doc)) = &input.trace {
        contents.trace = Some(name.clone());
        contents.trace_slices = doc["traceEvents"]
            .as_array()
            .map_or(0, |events| events.iter().filter(|e| e["ph"] == "X").count());
        body.push_str(&format!(
            "<section id=\"trace\"><h2>Trace {}</h2>\n<p class=\"note\">one lane per node and QP; a slice runs from a post to its completion; arrows are messages between the nodes. Times are on the controller's clock (each node's events moved by its measured offset).</p>\n<div id=\"timeline\" data-trace-slices=\"{}\"></div>\n</section>\n",
            escape(name),
            contents.trace_slices
        ));
        trace_json = format!(
            "<script type=\"application/json\" id=\"trace-data\">{}</script>\n<script>{}</script>\n",
            script_json(doc),
            TIMELINE_JS
        );
    }

    for run in &input.runs {
        contents.runs.push(run.id.clone());
        body.push_str(&run_section(run));
        if run.lat_us.samples > 0 {
            chart(
                &mut body,
                &format!("run-{}-latency", run.id),
                bar_chart_svg(&latency_chart(run)),
            )?;
        }
        body.push_str("</section>\n");
    }

    for c in &input.collectives {
        contents.collectives.push(c.id.clone());
        body.push_str(&collective_section(c));
        body.push_str("</section>\n");
    }
    // The sweeps side by side, one line per record: busbw compares across
    // collectives and world sizes (a single size draws no line).
    let swept: Vec<&CollectiveRecord> = input.collectives.iter().copied().filter(|c| has_sweep(c)).collect();
    if !swept.is_empty() {
        body.push_str("<section id=\"collective-sweeps\"><h2>Collectives by size</h2>\n");
        for (what, c) in collective_charts(&swept) {
            chart(&mut body, &format!("collectives-{what}"), line_chart_svg(&c))?;
        }
        body.push_str("</section>\n");
    }

    for bench in &input.benches {
        contents.benches.push(bench.id.clone());
        body.push_str(&bench_section(bench));
        let points: Vec<&PairRecord> = bench.pairs.iter().filter(|p| p.spec.sweep_point).collect();
        for (what, metric, y_label, unit) in [
            ("bw", Metric::BwAvgMibS, "average bandwidth", "MiB/s"),
            ("lat", Metric::LatTypicalUs, "typical latency (t_typical)", "µs"),
        ] {
            let series = series_of(&points, metric);
            if series.is_empty() {
                continue;
            }
            let c = LineChart {
                title: format!("{y_label} vs message size, ours and perftest"),
                x_label: "message size".into(),
                y_label: y_label.into(),
                y_unit: unit.into(),
                x_scale: XScale::Log2Bytes,
                series,
            };
            chart(
                &mut body,
                &format!("bench-{}-sweep-{what}", bench.id),
                line_chart_svg(&c),
            )?;
        }
        let bars: Vec<Bar> = bench
            .pairs
            .iter()
            .filter_map(|p| {
                p.ratio.map(|r| Bar {
                    label: p.spec.label(),
                    value: r,
                    transport: Some(Transport::Rdma),
                })
            })
            .collect();
        if !bars.is_empty() {
            let c = BarChart {
                title: "ours / perftest, median of each pair".into(),
                y_label: "ratio".into(),
                y_unit: "×".into(),
                bars,
            };
            chart(&mut body, &format!("bench-{}-ratios", bench.id), bar_chart_svg(&c))?;
        }
        body.push_str("</section>\n");
    }

    if let Some(c) = ratios_over_time(&input.history) {
        body.push_str("<section id=\"history\"><h2>Ratios over time</h2>\n");
        chart(&mut body, "ratios-over-time", line_chart_svg(&c))?;
        body.push_str("</section>\n");
    }

    let html = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>labctl report: lab {lab}</title>\n<style>{STYLE_CSS}</style>\n</head>\n<body>\n<h1>labctl report: lab {lab}</h1>\n{body}{trace_json}</body>\n</html>\n",
        lab = escape(input.lab),
    );
    Ok((html, contents))
}

/// A number as a cell: the record's value exactly in `data-value`, rounded in the text.
fn cell(field: &str, v: f64) -> String {
    format!(
        "<td data-field=\"{}\" data-value=\"{v}\">{}</td>",
        escape(field),
        crate::number::shown(v)
    )
}

/// A count as a cell, exactly.
fn count_cell(field: &str, v: u64) -> String {
    format!("<td data-field=\"{}\" data-value=\"{v}\">{v}</td>", escape(field))
}

/// The figures a run measured, as (record field, value, unit): bandwidth
/// and message rate when it moved bytes at a rate (a latency loop records 0),
/// latency when it took samples (a bandwidth loop takes none).
fn measured(r: &RunRecord) -> Vec<(&'static str, f64, &'static str)> {
    let latency = |v: f64| (r.lat_us.samples > 0).then_some(v);
    [
        ("bw_avg_mib_s", positive(r.bw_avg_mib_s), "MiB/s"),
        ("bw_peak_mib_s", positive(r.bw_peak_mib_s), "MiB/s"),
        ("bw_avg_gbps", positive(r.bw_avg_gbps), "Gb/s"),
        ("msg_rate_mpps", positive(r.msg_rate_mpps), "Mpps"),
        ("lat_us.min", latency(r.lat_us.min), "µs"),
        ("lat_us.typical", latency(r.lat_us.typical), "µs"),
        ("lat_us.avg", latency(r.lat_us.avg), "µs"),
        ("lat_us.p99", latency(r.lat_us.p99), "µs"),
        ("lat_us.p999", latency(r.lat_us.p999), "µs"),
        ("lat_us.max", latency(r.lat_us.max), "µs"),
        ("duration_s", positive(r.duration_s), "s"),
    ]
    .into_iter()
    .filter_map(|(field, v, unit)| v.map(|v| (field, v, unit)))
    .collect()
}

fn run_section(r: &RunRecord) -> String {
    let mut s = format!(
        "<section class=\"run\" data-run=\"{id}\"><h2>Run {id}: {workload}</h2>\n<p>started {started}, {amount}, verified: <span data-field=\"verified\">{verified}</span></p>\n<table><tr><th>metric</th><th>value</th><th>unit</th></tr>\n",
        id = escape(&r.id),
        workload = escape(&r.workload),
        started = escape(&r.started_at),
        amount = escape(&amount(r)),
        verified = if r.verified { "yes" } else { "NO" },
    );
    for (field, v, unit) in measured(r) {
        s.push_str(&format!("<tr><td>{field}</td>{}<td>{unit}</td></tr>\n", cell(field, v)));
    }
    s.push_str("</table>\n");
    s
}

/// A rank as a column heading: `rank 2 (n3)`.
fn rank_name(c: &CollectiveRecord, rank: usize) -> String {
    match c.ranks.get(rank) {
        Some(k) => format!("rank {rank} ({})", k.node),
        None => format!("rank {rank}"),
    }
}

/// A collective run: what it was, nccl-tests' table of its sizes, each
/// rank's time per size, incast's senders, and each rank's verdict.
fn collective_section(c: &CollectiveRecord) -> String {
    let p = &c.params;
    let nodes: Vec<&str> = c.ranks.iter().map(|k| k.node.as_str()).collect();
    let mut facts = vec![
        format!("started {}", c.started_at),
        c.algorithm.clone(),
        format!("nodes {}", nodes.join(" ")),
    ];
    if !c.transport.is_empty() {
        facts.push(format!("over {}", c.transport));
    }
    if let Some(root) = c.root {
        facts.push(format!("root {}", rank_name(c, root as usize)));
    }
    facts.push(if p.iterations > 0 {
        format!("{} timed operations per size", p.iterations)
    } else {
        format!("{} s per size", p.duration_s)
    });
    if let Some(fault) = &p.fault {
        facts.push(format!("fault injected: {fault}"));
    }
    let mut s = format!(
        "<section class=\"collective\" data-collective=\"{id}\"><h2>Collective {id}: {name} on {world} ranks</h2>\n<p>{facts}; verified: <span data-field=\"verified\">{verified}</span> ({detail})</p>\n",
        id = escape(&c.id),
        name = escape(&c.collective),
        world = c.world,
        facts = escape(&facts.join(", ")),
        verified = if c.verified { "yes" } else { "NO" },
        detail = escape(&c.verify_detail),
    );
    s.push_str("<table class=\"points\"><caption>per size, as nccl-tests prints it: the time is the slowest rank's mean</caption>\n<tr><th>size (B)</th><th>count</th><th>iterations</th><th>time (µs)</th><th>algbw (GB/s)</th><th>busbw (GB/s)</th><th>#wrong</th><th>slowest rank</th></tr>\n");
    for pt in &c.points {
        s.push_str(&format!(
            "<tr data-size=\"{}\">{}{}{}{}{}{}{}<td data-field=\"slowest_rank\" data-value=\"{}\">{}</td></tr>\n",
            pt.size,
            count_cell("size", pt.size),
            count_cell("count", pt.count),
            count_cell("iterations", pt.iterations),
            cell("time_us", pt.time_us),
            cell("algbw_gb_s", pt.algbw_gb_s),
            cell("busbw_gb_s", pt.busbw_gb_s),
            count_cell("wrong", pt.wrong),
            pt.slowest_rank,
            escape(&rank_name(c, pt.slowest_rank as usize)),
        ));
    }
    s.push_str("</table>\n");

    // Each rank's own mean time: the operation's is the slowest one's (in bold).
    let world = c.points.iter().map(|pt| pt.rank_time_us.len()).max().unwrap_or(0);
    if world > 0 {
        s.push_str("<table class=\"rank-times\"><caption>each rank's mean time per operation; the slowest in bold</caption>\n<tr><th>size (B)</th>");
        for rank in 0..world {
            s.push_str(&format!("<th>{} µs</th>", escape(&rank_name(c, rank))));
        }
        s.push_str("</tr>\n");
        for pt in &c.points {
            s.push_str(&format!(
                "<tr data-size=\"{}\">{}",
                pt.size,
                count_cell("size", pt.size)
            ));
            for (rank, t) in pt.rank_time_us.iter().enumerate() {
                let td = cell(&format!("rank_time_us.{rank}"), *t);
                s.push_str(&if rank as u32 == pt.slowest_rank {
                    td.replacen("<td ", "<td class=\"slowest\" ", 1)
                } else {
                    td
                });
            }
            s.push_str("</tr>\n");
        }
        s.push_str("</table>\n");
    }

    // incast: what each sender got into the root, and how fairly.
    let incast: Vec<_> = c
        .points
        .iter()
        .filter_map(|pt| pt.incast.as_ref().map(|i| (pt.size, i)))
        .collect();
    if !incast.is_empty() {
        let senders: Vec<usize> = (0..world).filter(|q| c.root != Some(*q as u32)).collect();
        s.push_str("<table class=\"incast\"><caption>incast: each sender's throughput into the root, and Jain's fairness index over the senders (1: equal shares)</caption>\n<tr><th>size (B)</th><th>into the root (MiB/s)</th>");
        for q in &senders {
            s.push_str(&format!("<th>{} MiB/s</th>", escape(&rank_name(c, *q))));
        }
        s.push_str("<th>Jain's fairness</th></tr>\n");
        for (size, i) in incast {
            s.push_str(&format!(
                "<tr data-size=\"{size}\">{}{}",
                count_cell("size", size),
                cell("incast.aggregate_mib_s", i.aggregate_mib_s)
            ));
            for q in &senders {
                match i.sender_mib_s.get(*q) {
                    Some(v) => s.push_str(&cell(&format!("incast.sender_mib_s.{q}"), *v)),
                    None => s.push_str("<td></td>"),
                }
            }
            s.push_str(&format!("{}</tr>\n", cell("incast.jain_fairness", i.jain_fairness)));
        }
        s.push_str("</table>\n");
    }

    // Each rank's verdict: a failed run says here which rank saw what.
    s.push_str("<table class=\"ranks\"><caption>each rank's check of its result</caption>\n<tr><th>rank</th><th>node</th><th>verified</th><th>detail</th></tr>\n");
    for k in &c.ranks {
        s.push_str(&format!(
            "<tr data-rank=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            k.rank,
            k.rank,
            escape(&k.node),
            if k.verified { "yes" } else { "NO" },
            escape(&k.verify_detail),
        ));
    }
    s.push_str("</table>\n");
    s
}

fn latency_chart(r: &RunRecord) -> BarChart {
    let l = &r.lat_us;
    let bar = |label: &str, value| Bar {
        label: label.into(),
        value,
        transport: Some(Transport::of_workload(&r.workload)),
    };
    BarChart {
        title: format!("latency percentiles, {} ({} samples)", r.workload, l.samples),
        y_label: "latency".into(),
        y_unit: "µs".into(),
        bars: vec![
            bar("min", l.min),
            bar("typical", l.typical),
            bar("avg", l.avg),
            bar("p99", l.p99),
            bar("p99.9", l.p999),
            bar("max", l.max),
        ],
    }
}

fn bench_section(b: &BenchRecord) -> String {
    let mut s = format!(
        "<section class=\"bench\" data-bench=\"{id}\"><h2>Bench {id}</h2>\n<p>started {started}, {rounds} round(s), {reference}</p>\n<table><tr><th>pair</th><th>unit</th><th>ours (median)</th><th>{name} (median)</th><th>ratio</th></tr>\n",
        id = escape(&b.id),
        started = escape(&b.started_at),
        rounds = b.rounds,
        reference = escape(&match &b.collectives {
            Some(c) => format!("{} over {}", c.mpi_version, c.mpi_transport_detail),
            None => format!("perftest {}", b.perftest_version),
        }),
        name = if b.collectives.is_some() { "Open MPI" } else { "perftest" },
    );
    for (i, p) in b.pairs.iter().enumerate() {
        let opt = |field: &str, v: Option<f64>| match v {
            Some(v) => cell(field, v),
            None => format!("<td data-field=\"{field}\">-</td>"),
        };
        s.push_str(&format!(
            "<tr data-pair=\"{i}\"><td>{}</td><td>{}</td>{}{}{}</tr>\n",
            escape(&p.spec.label()),
            escape(&p.unit),
            opt("ours.median", p.ours.stats.median),
            opt("reference.median", p.reference.stats.median),
            opt("ratio", p.ratio),
        ));
    }
    s.push_str("</table>\n");
    s
}

/// One line per pair label: its ratio in each bench, by hours since the first.
fn ratios_over_time(history: &[&BenchRecord]) -> Option<LineChart> {
    let dated: Vec<(f64, &BenchRecord)> = history
        .iter()
        .filter_map(|b| humantime::parse_rfc3339_weak(&b.started_at).ok().map(|t| (t, *b)))
        .filter_map(|(t, b)| {
            t.duration_since(std::time::UNIX_EPOCH)
                .ok()
                .map(|d| (d.as_secs_f64(), b))
        })
        .collect();
    let t0 = dated.iter().map(|d| d.0).fold(f64::INFINITY, f64::min);
    let mut series: Vec<Series> = Vec::new();
    for (t, b) in &dated {
        for p in &b.pairs {
            let Some(r) = p.ratio else { continue };
            let label = p.spec.label();
            let point = (t - t0, r);
            match series.iter_mut().find(|s| s.label == label) {
                Some(s) => s.points.push(point),
                None => series.push(Series {
                    label,
                    points: vec![point],
                    transport: None,
                    stroke: Stroke::Solid,
                }),
            }
        }
    }
    if series.is_empty() {
        return None;
    }
    Some(LineChart {
        title: format!("ours / perftest by bench, {} benches", dated.len()),
        x_label: "time since the first bench".into(),
        y_label: "ratio".into(),
        y_unit: "×".into(),
        x_scale: XScale::Seconds,
        series,
    })
}

#[cfg(test)]
mod tests;
