//! `labctl bulk` and the bulk workloads on the real lab: RDMA WRITE and TCP
//! deliver the same verified bytes between the same nodes; the CSV rows and
//! the charts (decoded PNG, parsed SVG) are written; a transfer whose total
//! is not a multiple of its chunk still verifies; an oversized total is
//! refused before anything is allocated.
//!
//! Sized for the emulated lab (~7 MB/s over rxe): a few MiB per transfer.

use std::path::{Path, PathBuf};

use libtest_mimic::{Failed, Trial};
use serde_json::Value;

use crate::util::{bin_dir, check, check_contains_all, Labctl};

pub fn trials(lab: &Labctl) -> Vec<Trial> {
    let t = |name: &str, f: fn(&Labctl) -> Result<(), Failed>| {
        let lab = lab.clone();
        crate::timing::trial(name, move || f(&lab))
    };
    vec![
        t(
            "test_bulk_rdma_and_tcp_deliver_the_same_verified_bytes_with_csv_and_plots",
            test_bulk_rdma_and_tcp_deliver_the_same_verified_bytes_with_csv_and_plots,
        ),
        t(
            "test_bulk_workloads_alone_verify_a_short_last_chunk",
            test_bulk_workloads_alone_verify_a_short_last_chunk,
        ),
        t(
            "test_bulk_table_and_default_plot_dir_beside_the_saved_runs",
            test_bulk_table_and_default_plot_dir_beside_the_saved_runs,
        ),
    ]
}

const TOTAL: u64 = 4 << 20;

/// A scratch directory removed when the trial ends, passed or failed.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = bin_dir().join(format!("lab-tests-bulk-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn labctl_json(lab: &Labctl, args: &[&str]) -> Result<Value, Failed> {
    let run = lab.run(args);
    if run.code != 0 {
        return Err(format!(
            "labctl {} exited {}:\n{}{}",
            args.join(" "),
            run.code,
            run.stdout,
            run.stderr
        )
        .into());
    }
    run.json()
}

/// A run record's server checked every byte of `total` with `seed`.
fn server_verified(run: &Value, workload: &str, total: u64, seed: u64) -> Result<(), Failed> {
    let what = || {
        format!(
            "{workload}: {}",
            serde_json::to_string_pretty(&run["server"]).unwrap_or_default()
        )
    };
    check(run["workload"] == workload, || format!("workload {}", run["workload"]))?;
    check(run["verified"] == true, what)?;
    check(
        run["server"]["checked"] == true && run["server"]["verified"] == true,
        what,
    )?;
    check(run["server"]["bytes"] == total, what)?;
    check(
        run["server"]["verify_detail"]
            .as_str()
            .is_some_and(|d| d.contains(&format!("all {total} B")) && d.contains(&format!("seed {seed}"))),
        what,
    )?;
    check(run["params"]["total"] == total && run["params"]["seed"] == seed, || {
        format!("{workload}: params {}", run["params"])
    })?;
    let last = run["client"]["timeline"].as_array().and_then(|t| t.last()).cloned();
    check(last.as_ref().is_some_and(|p| p["bytes"] == total), || {
        format!("{workload}: the client's timeline does not end at {total}: {last:?}")
    })
}

/// (transport, side) → rows of (t_s, bytes, mib_s), in file order.
type Rows = std::collections::BTreeMap<(String, String), Vec<(f64, u64, f64)>>;

fn parse_timeline_csv(path: &Path) -> Result<Rows, Failed> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut lines = text.lines();
    check(lines.next() == Some("transport,side,t_s,bytes,mib_s"), || {
        format!("header of {}:\n{text}", path.display())
    })?;
    let mut rows = Rows::new();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        check(f.len() == 5, || format!("row {line:?}"))?;
        let t: f64 = f[2].parse().map_err(|e| format!("t_s in {line:?}: {e}"))?;
        let bytes: u64 = f[3].parse().map_err(|e| format!("bytes in {line:?}: {e}"))?;
        let rate: f64 = f[4].parse().map_err(|e| format!("mib_s in {line:?}: {e}"))?;
        check(t.is_finite() && t >= 0.0 && rate.is_finite() && rate >= 0.0, || {
            format!("row {line:?}")
        })?;
        rows.entry((f[0].to_string(), f[1].to_string()))
            .or_default()
            .push((t, bytes, rate));
    }
    Ok(rows)
}

/// Decodes a PNG; returns its size and how many pixels are not near-white.
fn decode_png(path: &Path) -> Result<(u32, u32, usize), Failed> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut reader = png::Decoder::new(std::io::BufReader::new(file))
        .read_info()
        .map_err(|e| format!("{}: not a PNG: {e}", path.display()))?;
    let mut buf = vec![0; reader.output_buffer_size().ok_or("PNG too large")?];
    let frame = reader
        .next_frame(&mut buf)
        .map_err(|e| format!("{}: undecodable: {e}", path.display()))?;
    let inked = buf[..frame.buffer_size()]
        .chunks(3)
        .filter(|p| p.iter().any(|&c| c < 200))
        .count();
    Ok((frame.width, frame.height, inked))
}

/// Parses an SVG; returns its text elements.
fn svg_texts(path: &Path) -> Result<Vec<String>, Failed> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let doc = roxmltree::Document::parse(&text).map_err(|e| format!("{}: not XML: {e}", path.display()))?;
    check(doc.root_element().tag_name().name() == "svg", || {
        format!("{}: root is not <svg>", path.display())
    })?;
    Ok(doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text().map(|t| t.trim().to_string()))
        .collect())
}

/// Every chart of a bulk record is a valid PNG and SVG pair with its title.
fn check_plots(record: &Value, dir: &Path) -> Result<(), Failed> {
    let plots: Vec<PathBuf> = record["plots"]
        .as_array()
        .ok_or("no plots in the record")?
        .iter()
        .filter_map(|p| p.as_str().map(PathBuf::from))
        .collect();
    let titles = [
        ("throughput", "Throughput over the transfer: 4 MiB in 256 KiB chunks"),
        ("rdma-vs-tcp", "RDMA WRITE vs TCP: average throughput"),
        ("cpu-per-gib", "CPU seconds per GiB moved (agent session thread)"),
    ];
    check(plots.len() == 2 * titles.len(), || format!("plots: {plots:?}"))?;
    for (stem, title) in titles {
        let png = dir.join(format!("{stem}.png"));
        let svg = dir.join(format!("{stem}.svg"));
        check(plots.contains(&png) && plots.contains(&svg), || {
            format!("{stem} not among {plots:?}")
        })?;
        let (w, h, inked) = decode_png(&png)?;
        check(w > 0 && h > 0 && inked > 1000, || {
            format!("{}: {w}x{h}, {inked} inked pixels", png.display())
        })?;
        let texts = svg_texts(&svg)?;
        check(texts.iter().any(|t| t == title), || {
            format!("{}: title {title:?} not among {texts:?}", svg.display())
        })?;
    }
    let legend = svg_texts(&dir.join("throughput.svg"))?;
    for series in ["RDMA WRITE (client)", "TCP (client)", "TCP (server)"] {
        check(legend.iter().any(|t| t == series), || {
            format!("throughput legend lacks {series:?}: {legend:?}")
        })?;
    }
    // Issue 17: the time axis said `0.15000000000000002`. Its ticks are now
    // short numbers with a unit (s, ms or µs), evenly spaced.
    let ticks: Vec<(f64, &str)> = legend
        .iter()
        .filter_map(|t| {
            let (number, unit) = t.split_once(' ')?;
            ["s", "ms", "µs"]
                .contains(&unit)
                .then_some((number.parse().ok()?, number))
        })
        .collect();
    check(ticks.len() >= 3, || format!("no time ticks among {legend:?}"))?;
    let step = ticks[1].0 - ticks[0].0;
    check(
        ticks.iter().all(|t| t.1.len() <= 5) && ticks.windows(2).all(|w| ((w[1].0 - w[0].0) - step).abs() < 1e-9),
        || format!("time ticks not short or not even: {ticks:?}"),
    )?;
    Ok(())
}

fn test_bulk_rdma_and_tcp_deliver_the_same_verified_bytes_with_csv_and_plots(lab: &Labctl) -> Result<(), Failed> {
    let scratch = Scratch::new("both");
    let csv = scratch.0.join("bulk.csv");
    let plots = scratch.0.join("plots");
    let (csv_arg, plot_arg) = (csv.display().to_string(), plots.display().to_string());
    let r = labctl_json(
        lab,
        &[
            "bulk", "--total", "4MiB", "--chunk", "256KiB", "--seed", "7", "--csv", &csv_arg, "--plot", &plot_arg,
            "--json",
        ],
    )?;
    check(
        r["verified"] == true && r["rdma"]["verified"] == true && r["tcp"]["verified"] == true,
        || format!("not verified: {} / {}", r["rdma"], r["tcp"]),
    )?;
    check(r["total"] == TOTAL && r["chunk"] == 256 << 10 && r["seed"] == 7, || {
        format!("record: total {} chunk {} seed {}", r["total"], r["chunk"], r["seed"])
    })?;
    let runs = r["runs"].as_array().ok_or("no runs")?;
    check(runs.len() == 2, || format!("{} runs", runs.len()))?;
    server_verified(&runs[0], "bulk-rdma", TOTAL, 7)?;
    server_verified(&runs[1], "bulk-tcp", TOTAL, 7)?;
    // Same nodes for both.
    for side in ["server", "client"] {
        check(runs[0][side]["node"] == runs[1][side]["node"], || {
            format!("{side}: {} vs {}", runs[0][side]["node"], runs[1][side]["node"])
        })?;
    }
    for leg in ["rdma", "tcp"] {
        for side in ["server", "client"] {
            let s = &r[leg][side];
            check(
                s["elapsed_s"].as_f64().is_some_and(|v| v > 0.0)
                    && s["mib_s"].as_f64().is_some_and(|v| v > 0.0)
                    && s["cpu_s_per_gib"].as_f64().is_some_and(|v| v >= 0.0),
                || format!("{leg} {side}: {s}"),
            )?;
        }
    }
    check(
        r["reading"]
            .as_str()
            .is_some_and(|t| t.starts_with("RDMA moved the same 4 MiB in")),
        || format!("reading: {}", r["reading"]),
    )?;

    let rows = parse_timeline_csv(&csv)?;
    for key in [("rdma", "client"), ("tcp", "client"), ("tcp", "server")] {
        let series = rows
            .get(&(key.0.to_string(), key.1.to_string()))
            .ok_or_else(|| format!("no {key:?} rows in the CSV: {:?}", rows.keys()))?;
        check(series.last().map(|r| r.1) == Some(TOTAL), || {
            format!("{key:?} rows end at {:?}, not {TOTAL}", series.last())
        })?;
        check(series.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1), || {
            format!("{key:?} rows go backwards: {series:?}")
        })?;
    }
    check(!rows.contains_key(&("rdma".to_string(), "server".to_string())), || {
        "the bulk-rdma server takes no part in a WRITE, yet has timeline rows".into()
    })?;
    let summary = std::fs::read_to_string(scratch.0.join("bulk-summary.csv"))?;
    check(
        summary.lines().count() == 5 && summary.lines().skip(1).all(|l| l.ends_with(",true")),
        || format!("summary:\n{summary}"),
    )?;
    check_plots(&r, &plots)
}

fn test_bulk_workloads_alone_verify_a_short_last_chunk(lab: &Labctl) -> Result<(), Failed> {
    // 1 MiB in 100 KiB chunks: ten whole chunks and a last one of 24 KiB.
    let total = 1 << 20;
    for workload in ["bulk-rdma", "bulk-tcp"] {
        let r = labctl_json(
            lab,
            &[
                "run", workload, "--size", "100KiB", "--total", "1MiB", "--seed", "11", "--json",
            ],
        )?;
        server_verified(&r, workload, total, 11)?;
        check(
            r["client"]["ops"] == 11 && r["client"]["facts"]["chunks"] == "11",
            || format!("{workload}: client {}", r["client"]),
        )?;
        check(r["bw_avg_mib_s"].as_f64().is_some_and(|v| v > 0.0), || {
            format!("{workload}: bandwidth {}", r["bw_avg_mib_s"])
        })?;
    }
    // Refused by the agent before it allocates: the server would hold all of it.
    let run = lab.run(&["run", "bulk-tcp", "--total", "2GiB", "--size", "1MiB"]);
    check(run.code != 0, || format!("a 2 GiB total ran:\n{}", run.stdout))?;
    check(
        run.stderr.contains("InvalidArgument") && run.stderr.contains("total 2147483648 B is out of range"),
        || format!("message: {}", run.stderr),
    )
}

fn test_bulk_table_and_default_plot_dir_beside_the_saved_runs(lab: &Labctl) -> Result<(), Failed> {
    let run = lab.run(&["bulk", "--total", "512KiB", "--chunk", "64KiB"]).ok()?;
    check_contains_all(
        "bulk's table",
        &run.stdout,
        &[
            "RDMA WRITE",
            "TCP",
            "CPU s/GiB",
            "verified (server)",
            "reading     RDMA moved the same 512 KiB",
        ],
    )?;
    let results = lab.state_base.join(".results").join("e2e");
    let plots: Vec<&str> = run
        .stdout
        .lines()
        .filter_map(|l| l.trim().strip_prefix("plots").map(str::trim).or(Some(l.trim())))
        .filter(|l| l.ends_with(".png") || l.ends_with(".svg"))
        .collect();
    check(plots.len() == 6, || format!("plot paths in:\n{}", run.stdout))?;
    for p in plots {
        let path = Path::new(p);
        check(path.starts_with(&results) && path.exists(), || {
            format!("{p} is not an existing file under {}", results.display())
        })?;
    }
    Ok(())
}
