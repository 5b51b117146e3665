//! `labctl report` on runs the real lab just made: `list` finds them, `show`
//! gives them back, `compare`'s changes agree with the runs' own numbers,
//! `csv` has a row per run (or per sweep point), `plot` draws a real sweep.

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
            "test_report_lists_shows_compares_and_exports_two_runs",
            test_report_lists_shows_compares_and_exports_two_runs,
        ),
        t(
            "test_report_plots_and_exports_a_size_sweep",
            test_report_plots_and_exports_a_size_sweep,
        ),
        t(
            "test_bench_reports_idle_agent_rss_and_each_ratios_spread",
            test_bench_reports_idle_agent_rss_and_each_ratios_spread,
        ),
        t(
            "test_bench_measures_expectations_and_a_miss_exits_4_with_the_figure_and_the_gap",
            test_bench_measures_expectations_and_a_miss_exits_4_with_the_figure_and_the_gap,
        ),
        t(
            "test_bench_scaling_series_runs_both_tools_at_each_qp_count",
            test_bench_scaling_series_runs_both_tools_at_each_qp_count,
        ),
        t(
            "test_bench_sweep_charts_ours_and_perftest_by_size",
            test_bench_sweep_charts_ours_and_perftest_by_size,
        ),
    ]
}

/// A verified write-bw run's JSON record.
fn write_bw(lab: &Labctl, extra: &[&str]) -> Result<Value, Failed> {
    let mut args = vec!["run", "write-bw", "--json"];
    args.extend_from_slice(extra);
    let r = lab.run(&args).ok()?.json()?;
    check(r["verified"] == true, || format!("run not verified: {r}"))?;
    Ok(r)
}

fn id(r: &Value) -> Result<String, Failed> {
    Ok(r["id"].as_str().ok_or("run without id")?.to_string())
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

fn test_report_lists_shows_compares_and_exports_two_runs(lab: &Labctl) -> Result<(), Failed> {
    let a = write_bw(lab, &["-s", "65536", "-n", "40"])?;
    let b = write_bw(lab, &["-s", "65536", "-n", "40"])?;
    let (a_id, b_id) = (id(&a)?, id(&b)?);

    // list: both, with their workload and headline as the runs reported them.
    let list = lab
        .run(&["report", "list", "--workload", "write-bw", "--json"])
        .ok()?
        .json()?;
    let rows = list.as_array().ok_or("list --json is not an array")?;
    for (run, rid) in [(&a, &a_id), (&b, &b_id)] {
        let row = rows
            .iter()
            .find(|r| r["id"] == rid.as_str())
            .ok_or_else(|| format!("{rid} not listed: {list}"))?;
        check(
            row["kind"] == "run"
                && row["workload"] == "write-bw"
                && row["verified"] == true
                && row["headline_metric"] == "bw_avg_mib_s"
                && row["headline_value"] == run["bw_avg_mib_s"],
            || format!("row {row} vs run {}", run["bw_avg_mib_s"]),
        )?;
    }
    check(rows.iter().all(|r| r["workload"] == "write-bw"), || {
        format!("--workload write-bw let others through: {list}")
    })?;
    let last = lab.run(&["report", "list", "--last", "1", "--json"]).ok()?.json()?;
    check(
        last.as_array().map(Vec::len) == Some(1) && last[0]["id"] == b_id.as_str(),
        || format!("--last 1 is not the newest run: {last}"),
    )?;

    // show: by prefix and as `latest`, the same record back.
    let shown = lab.run(&["report", "show", &a_id[..8], "--json"]).ok()?.json()?;
    check(shown == a, || {
        format!("show --json differs from the run's record:\n{shown}\n{a}")
    })?;
    let latest = lab.run(&["report", "show", "latest"]).ok()?;
    check(
        latest.stdout.contains("verified    yes") && latest.stdout.contains(&b_id),
        || format!("show latest:\n{}", latest.stdout),
    )?;
    let missing = lab.run(&["report", "show", "no-such-run"]);
    check(
        missing.code == 2 && missing.stderr.contains("labctl report list"),
        || format!("unknown id: exit {} {}", missing.code, missing.stderr),
    )?;

    // compare: the % change is the runs' own numbers', the verdict follows it.
    let c = lab.run(&["report", "compare", &a_id, &b_id, "--json"]).ok()?.json()?;
    check(c["param_differences"].as_array().is_some_and(Vec::is_empty), || {
        format!("same parameters, yet differences: {}", c["param_differences"])
    })?;
    let metrics = c["metrics"].as_array().ok_or("no metrics")?;
    let row = |name: &str| metrics.iter().find(|m| m["metric"] == name);
    for (metric, field, higher_better) in [
        ("bw avg", "bw_avg_mib_s", true),
        ("bw peak", "bw_peak_mib_s", true),
        ("msg rate", "msg_rate_mpps", true),
        ("duration", "duration_s", false),
    ] {
        let m = row(metric).ok_or_else(|| format!("no `{metric}` row: {c}"))?;
        let (old, new) = (a[field].as_f64().ok_or(field)?, b[field].as_f64().ok_or(field)?);
        let pct = m["change_pct"]
            .as_f64()
            .ok_or_else(|| format!("no change for {metric}: {m}"))?;
        check(
            m["old"].as_f64() == Some(old) && m["new"].as_f64() == Some(new) && close(pct, (new - old) * 100.0 / old),
            || format!("{metric}: {m} vs runs {old} -> {new}"),
        )?;
        let improved = if higher_better { pct } else { -pct };
        let want = if improved >= 5.0 {
            "better"
        } else if improved <= -5.0 {
            "worse"
        } else {
            "same"
        };
        check(m["verdict"] == want, || format!("{metric}: verdict {m}, want {want}"))?;
    }
    check(row("lat typical").is_none(), || {
        "a bandwidth run has no latency row".into()
    })?;
    let cpu = row("cpu client").ok_or("no cpu client row")?;
    check(
        cpu["old"] == a["cpu"]["client"]["per_gib_s"] && cpu["better"] == "lower",
        || format!("cpu row {cpu}"),
    )?;
    // --fail-on-regression: exit 1 exactly when a metric got worse.
    let strict = lab.run(&["report", "compare", &a_id, &b_id, "--threshold", "0", "--json"]);
    let regressions = strict.json()?["regressions"].as_u64().ok_or("no regressions count")?;
    let gate = lab.run(&[
        "report",
        "compare",
        &a_id,
        &b_id,
        "--threshold",
        "0",
        "--fail-on-regression",
    ]);
    check(gate.code == i32::from(regressions > 0), || {
        format!("{regressions} regressions, exit {}:\n{}", gate.code, gate.stdout)
    })?;

    // csv: a header and one row per run, numbers as the runs reported them.
    let dir = bin_dir().join("lab-tests-report");
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("two-runs.csv");
    lab.run(&["report", "csv", &a_id, &b_id, "-o", file.to_str().ok_or("path")?])
        .ok()?;
    let text = std::fs::read_to_string(&file)?;
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split(',').collect()).collect();
    check(lines.len() == 3, || format!("want header + 2 rows:\n{text}"))?;
    let col = |name: &str| {
        lines[0]
            .iter()
            .position(|c| *c == name)
            .ok_or(format!("no column {name}"))
    };
    let (id_col, bw_col, size_col) = (col("id")?, col("bw_avg_mib_s")?, col("size")?);
    for (line, run) in lines[1..].iter().zip([&a, &b]) {
        let bw: f64 = line[bw_col].parse()?;
        check(
            line[id_col] == run["id"] && Some(bw) == run["bw_avg_mib_s"].as_f64() && line[size_col] == "65536",
            || format!("csv row {line:?} vs run {run}"),
        )?;
    }
    Ok(())
}

fn test_report_plots_and_exports_a_size_sweep(lab: &Labctl) -> Result<(), Failed> {
    let sweep = write_bw(lab, &["--all-sizes", "--max-size", "65536", "-n", "20"])?;
    let flat = write_bw(lab, &["-s", "4096", "-n", "20"])?;
    let (sweep_id, flat_id) = (id(&sweep)?, id(&flat)?);
    let points = sweep["sweep"].as_array().ok_or("no sweep")?.len();
    check(points == 16, || {
        format!("a 2 B..64 KiB sweep has 16 points, not {points}")
    })?;

    // Comparing a sweep with a single-size run warns about the parameters.
    let c = lab
        .run(&["report", "compare", &flat_id, &sweep_id, "--json"])
        .ok()?
        .json()?;
    let differing: Vec<&str> = c["param_differences"]
        .as_array()
        .ok_or("no param_differences")?
        .iter()
        .filter_map(|d| d["name"].as_str())
        .collect();
    check(differing.contains(&"all_sizes") && differing.contains(&"size"), || {
        format!("differences {differing:?}")
    })?;

    // csv --sweep: one row per point.
    let dir = bin_dir().join("lab-tests-report");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let out = lab.run(&["report", "csv", "--sweep", &sweep_id, "-o", "-"]).ok()?;
    let rows = out.stdout.lines().count();
    check(rows == points + 1, || {
        format!("want header + {points} rows:\n{}", out.stdout)
    })?;

    // plot: PNG and SVG of bandwidth vs size, labelled with the run.
    let plotted = lab
        .run(&["report", "plot", &sweep_id, "-o", dir.to_str().ok_or("path")?])
        .ok()?;
    let files: Vec<&str> = plotted.stdout.lines().collect();
    let png = files
        .iter()
        .find(|f| f.ends_with("-bw.png"))
        .ok_or("no bandwidth PNG")?;
    let svg = files
        .iter()
        .find(|f| f.ends_with("-bw.svg"))
        .ok_or("no bandwidth SVG")?;
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(png)?));
    let mut reader = decoder.read_info()?;
    let mut buf = vec![0; reader.output_buffer_size().ok_or("PNG size")?];
    let frame = reader.next_frame(&mut buf)?;
    check(frame.width > 100 && frame.height > 100, || {
        format!("PNG {}x{}", frame.width, frame.height)
    })?;
    let svg_text = std::fs::read_to_string(svg)?;
    let doc = roxmltree::Document::parse(&svg_text)?;
    let label = format!("write-bw {}", &sweep_id[..8]);
    check(
        doc.descendants()
            .any(|n| n.text().map(str::trim) == Some(label.as_str())),
        || format!("SVG has no series labelled {label:?}"),
    )?;

    // A run without a sweep: a clear error, nothing drawn.
    let refused = lab.run(&["report", "plot", &flat_id, "-o", dir.to_str().ok_or("path")?]);
    check(
        refused.code == 2 && refused.stderr.contains("--all-sizes") && refused.stderr.contains(&flat_id),
        || format!("plot of a plain run: exit {} {}", refused.code, refused.stderr),
    )?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn test_bench_reports_idle_agent_rss_and_each_ratios_spread(lab: &Labctl) -> Result<(), Failed> {
    // A small bench: one latency pair, few iterations, the three rounds a
    // side that a spread needs.
    let args = ["bench", "--only", "write-lat", "--rounds", "3", "-n", "20"];
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let b = lab.run(&json_args).ok()?.json()?;
    let rss = b["agent_rss"].as_array().ok_or_else(|| format!("no agent_rss: {b}"))?;
    check(rss.len() == 4, || {
        format!("server and client, before and after: {rss:?}")
    })?;
    for r in rss {
        let bytes = r["rss_bytes"].as_u64().ok_or("no rss_bytes")?;
        check(
            bytes > 1 << 20 && r["target_bytes"] == 20_000_000 && r["holds"] == (bytes <= 20_000_000),
            || format!("rss row {r}"),
        )?;
    }
    // The ratio's spread over resampled rounds holds the ratio, from the
    // three counted rounds a side.
    let pair = &b["pairs"][0];
    let ratio = pair["ratio"].as_f64().ok_or_else(|| format!("no ratio: {pair}"))?;
    let spread = &pair["spread"];
    let (low, high) = (
        spread["low"].as_f64().ok_or_else(|| format!("no spread: {pair}"))?,
        spread["high"].as_f64().ok_or("no spread high")?,
    );
    check(
        low > 0.0 && low <= ratio && ratio <= high && spread["rounds"] == 3,
        || format!("spread {spread} around ratio {ratio}"),
    )?;
    // The saved bench lists and shows with its RSS rows, and with the
    // spread's line exactly when the interval holds write-lat's target, 1.
    let id = b["id"].as_str().ok_or("bench without id")?;
    let shown = lab.run(&["report", "show", id]).ok()?;
    check(
        shown.stdout.lines().any(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words.starts_with(&["agent", "RSS", "idle", "(before", "the", "runs)", "server"])
        }) && shown.stdout.contains("target <= 20 MB"),
        || format!("show of the bench:\n{}", shown.stdout),
    )?;
    let line = format!("write-lat: over resampled rounds the ratio {ratio:.3} could be anywhere in {low:.2}-{high:.2}");
    check(shown.stdout.contains(&line) == (low <= 1.0 && 1.0 <= high), || {
        format!("spread {low}-{high}, line {line:?} in:\n{}", shown.stdout)
    })?;
    let listed = lab
        .run(&["report", "list", "--workload", "bench", "--json"])
        .ok()?
        .json()?;
    check(
        listed
            .as_array()
            .is_some_and(|l| l.iter().any(|r| r["id"] == id && r["kind"] == "bench")),
        || format!("bench {id} not listed: {listed}"),
    )
}

fn test_bench_measures_expectations_and_a_miss_exits_4_with_the_figure_and_the_gap(lab: &Labctl) -> Result<(), Failed> {
    // One the emulated lab meets, one it cannot: each measured by a
    // verified run of its own after the suite's pair.
    let file = bin_dir().join("lab-tests-bench-expect.yaml");
    std::fs::write(
        &file,
        "write-lat: {size: 8, max: 10s}\nwrite-bw: {size: 64KiB, min: 1Tb/s}\n",
    )?;
    let file = file.display().to_string();
    let args = [
        "bench",
        "--only",
        "write-lat",
        "--rounds",
        "1",
        "-n",
        "20",
        "--expect",
        &file,
    ];
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let run = lab.run(&json_args);
    check(run.code == 4, || {
        format!("exit {} (want 4)\n{}{}", run.code, run.stdout, run.stderr)
    })?;
    let b = run.json()?;
    let e = b["expectations"]
        .as_array()
        .ok_or_else(|| format!("no expectations: {b}"))?;
    check(e.len() == 2, || format!("expectations: {e:?}"))?;
    let (lat, bw) = (&e[0], &e[1]);
    check(
        lat["verdict"] == "met" && lat["expected"] == "≤ 10s" && lat["percent"].as_f64().is_some_and(|p| p < 100.0),
        || format!("write-lat: {lat}"),
    )?;
    let message = bw["message"].as_str().unwrap_or_default();
    check(
        bw["verdict"] == "missed"
            && message.starts_with("write-bw 64 KiB: expected ≥ 1Tb/s, measured ")
            && message.ends_with(" %)"),
        || format!("write-bw: {bw}"),
    )?;
    // The figure is the saved run's own average, in the unit of the bound.
    let run_id = bw["run_id"].as_str().ok_or("no run id")?;
    let saved = lab.run(&["report", "show", run_id, "--json"]).ok()?.json()?;
    let gbps = saved["bw_avg_gbps"]
        .as_f64()
        .ok_or_else(|| format!("saved run: {saved}"))?;
    let measured = bw["measured"].as_str().unwrap_or_default();
    let figure: f64 = measured.trim_end_matches(" Tb/s").parse().unwrap_or(-1.0);
    check(
        saved["verified"] == true && (figure - gbps / 1000.0).abs() <= 0.01 * gbps / 1000.0,
        || format!("measured {measured} against the run's {gbps} Gb/s"),
    )?;
    // The text form lists both and says what the exit status means.
    let text = lab.run(&args);
    check_contains_all(
        "bench's text",
        &text.stdout,
        &[
            "expectations:",
            "met    write-lat 8 B: expected ≤ 10s, measured ",
            "MISSED write-bw 64 KiB: expected ≥ 1Tb/s, measured ",
            "1 of 2 expectations missed or not measured",
            "exit status 4",
        ],
    )
}

/// The full suite's scaling series for send-bw: perftest's `-q` against our
/// `--qps` at 1, 2, 4 and 8 QPs, every run of ours verified, and the table.
fn test_bench_scaling_series_runs_both_tools_at_each_qp_count(lab: &Labctl) -> Result<(), Failed> {
    let args = [
        "bench",
        "--suite",
        "full",
        "--only",
        "send-bw",
        "--rounds",
        "1",
        "--warmup",
        "0",
        "-n",
        "64",
        "--timeout",
        "30",
        "--json",
    ];
    // perftest's ib_send_bw with many QPs fails on rxe at times: a
    // completion error at its client (status 9 or 11), which bench runs
    // again and which may fail the same way, or a hang until `timeout` kills
    // it (exit 124), which bench does not run again (a hang costs the whole
    // timeout). Then the bench exits 3 (only the reference failed), the pair
    // has no ratio, and ours must still have run and verified. A normal run
    // takes a few seconds; 30 s bounds what a hung one costs.
    let run = lab.run(&args);
    check(run.code == 0 || run.code == 3, || {
        format!("bench exited {}:\n{}{}", run.code, run.stdout, run.stderr)
    })?;
    let b = run.json()?;
    let pairs = b["pairs"].as_array().ok_or_else(|| format!("no pairs: {b}"))?;
    let qps: Vec<u64> = pairs.iter().filter_map(|p| p["spec"]["qps"].as_u64()).collect();
    check(qps == [1, 2, 4, 8], || format!("send-bw pairs at QPs {qps:?}"))?;
    let mut reference_failed = 0;
    for p in pairs {
        let q = p["spec"]["qps"].as_u64().unwrap_or(0);
        let per_qp = 64 / q;
        check(p["spec"]["iterations"] == per_qp, || {
            format!("q{q}: spec {}", p["spec"])
        })?;
        let command = p["reference"]["command"].as_str().unwrap_or_default();
        let wants_q = q > 1;
        check(command.contains(&format!(" -q {q} ")) == wants_q, || {
            format!("q{q}: perftest command {command}")
        })?;
        for side in ["reference", "ours"] {
            let samples = p[side]["samples"].as_array().ok_or("no samples")?;
            let measured = |s: &Value| s["error"].is_null() && s["value"].as_f64() > Some(0.0);
            // perftest's own failure: a hang, or a completion error run
            // again (the rerun keeps the first) that failed once more, the
            // same way or hung.
            let perftests_own = |s: &Value| {
                let text = |k: &str| s[k].as_str().unwrap_or_default();
                let completion_error = |k: &str| text(k).contains("Completion with error");
                let hung = |k: &str| text(k).starts_with("perftest client exited 124");
                let failed = |k: &str| completion_error(k) || hung(k);
                let rerun_after_a_completion_error = failed("error") && completion_error("rerun");
                side == "reference" && (rerun_after_a_completion_error || s["rerun"].is_null() && hung("error"))
            };
            check(
                samples.len() == 1 && samples.iter().all(|s| measured(s) || perftests_own(s)),
                || format!("q{q} {side}: {samples:?}"),
            )?;
            if !measured(&samples[0]) {
                reference_failed += 1;
                check(p["ratio"].is_null(), || {
                    format!("q{q}: a ratio without a reference: {}", p["ratio"])
                })?;
            }
        }
        check(p["ours"]["samples"][0]["verified"] == true, || {
            format!("q{q}: ours not verified")
        })?;
        // Each run of ours is saved: its record has the QPs and the messages.
        let run_id = p["ours"]["samples"][0]["run_id"].as_str().ok_or("no run_id")?;
        let run = lab.run(&["report", "show", run_id, "--json"]).ok()?.json()?;
        check(
            run["params"]["num_qps"] == q && run["server"]["ops"].as_u64() == Some(q * per_qp),
            || {
                format!(
                    "q{q}: run {run_id}: params {} server ops {}",
                    run["params"], run["server"]["ops"]
                )
            },
        )?;
    }
    check((run.code == 3) == (reference_failed > 0), || {
        format!("exit {} with {reference_failed} reference failures", run.code)
    })?;
    check(b["failures"]["ours_failed"] == 0, || {
        format!("failures {}", b["failures"])
    })?;
    // The text form prints the scaling table with one row per QP count.
    let text = lab.run(&["report", "show", b["id"].as_str().ok_or("no id")?]).ok()?;
    let rows = text
        .stdout
        .lines()
        .filter(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.len() == 7 && w[0] == "send-bw" && ["1", "2", "4", "8"].contains(&w[1])
        })
        .count();
    check(
        text.stdout.contains("scaling: aggregate MiB/s by QPs") && rows == 4,
        || format!("scaling table ({rows} rows):\n{}", text.stdout),
    )
}

/// `bench --sweep`: one pair per size of write-bw and write-lat, both tools,
/// drawn as two charts with ours and perftest as lines; `report plot` of the
/// saved record draws them again; a fixed-size workload cannot sweep.
fn test_bench_sweep_charts_ours_and_perftest_by_size(lab: &Labctl) -> Result<(), Failed> {
    let dir = bin_dir().join(format!("bench-sweep-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let dir_arg = dir.to_str().ok_or("path")?;
    let args = [
        "bench", "--sweep", "--sizes", "2,4096", "--rounds", "1", "--warmup", "0", "-n", "20", "-o", dir_arg, "--json",
    ];
    let run = lab.run(&args).ok()?;
    let b = run.json()?;
    check(b["suite"] == "sweep", || format!("suite {}", b["suite"]))?;
    let pairs = b["pairs"].as_array().ok_or("no pairs")?;
    let labels: Vec<&str> = pairs.iter().filter_map(|p| p["spec"]["workload"].as_str()).collect();
    let sizes: Vec<u64> = pairs.iter().filter_map(|p| p["spec"]["size"].as_u64()).collect();
    check(
        labels == ["write-bw", "write-bw", "write-lat", "write-lat"] && sizes == [2, 4096, 2, 4096],
        || format!("pairs {labels:?} at {sizes:?}"),
    )?;
    for p in pairs {
        for side in ["reference", "ours"] {
            let v = p[side]["stats"]["median"].as_f64().unwrap_or(-1.0);
            check(v > 0.0 && p[side]["samples"][0]["error"].is_null(), || {
                format!("{} {side}: {}", p["spec"], p[side])
            })?;
        }
        check(p["ours"]["samples"][0]["verified"] == true, || {
            format!("{}: not verified", p["spec"])
        })?;
    }
    let id = b["id"].as_str().ok_or("no id")?;
    let stem = format!("sweep-{}", &id[..8]);
    for chart in ["bw", "lat"] {
        for ext in ["png", "svg"] {
            let path = dir.join(format!("{stem}-{chart}.{ext}"));
            check(run.stderr.contains(&format!("chart {}", path.display())), || {
                format!("{} not announced:\n{}", path.display(), run.stderr)
            })?;
            check(std::fs::metadata(&path).is_ok_and(|m| m.len() > 1000), || {
                format!("{} missing or empty", path.display())
            })?;
        }
        let svg = std::fs::read_to_string(dir.join(format!("{stem}-{chart}.svg"))).map_err(|e| e.to_string())?;
        let (ours, theirs) = if chart == "bw" {
            ("write-bw (ours)", "ib_write_bw")
        } else {
            ("write-lat (ours)", "ib_write_lat")
        };
        check_contains_all(&format!("the {chart} chart"), &svg, &[ours, theirs, "4 KiB"])?;
    }
    // The saved record draws the same charts again.
    let again = dir.join("again");
    let plotted = lab
        .run(&["report", "plot", id, "-o", again.to_str().ok_or("path")?])
        .ok()?;
    check(
        plotted.stdout.lines().count() == 4 && again.join(format!("{stem}-lat.svg")).exists(),
        || format!("report plot of the sweep:\n{}", plotted.stdout),
    )?;
    let _ = std::fs::remove_dir_all(&dir);
    // An atomic's size is fixed: refused before any run, naming what can sweep.
    let refused = lab.run(&["bench", "--sweep", "--only", "atomic-bw"]);
    check(
        refused.code != 0
            && refused
                .stderr
                .contains("`atomic-bw` cannot sweep sizes; these can: write-bw"),
        || format!("sweep of atomic-bw: exit {} {}", refused.code, refused.stderr),
    )
}

/// Trials that boot labs of their own: run after the shared lab is down.
pub fn orchestration_trials(lab: &Labctl) -> Vec<Trial> {
    let lab = lab.clone();
    vec![crate::timing::trial(
        "test_bench_orchestration_times_up_and_down_of_a_scratch_lab",
        move || test_bench_orchestration_times_up_and_down_of_a_scratch_lab(&lab),
    )]
}

fn test_bench_orchestration_times_up_and_down_of_a_scratch_lab(lab: &Labctl) -> Result<(), Failed> {
    let b = lab
        .run(&["bench", "--orchestration", "--nodes", "2", "--rounds", "1", "--json"])
        .ok()?
        .json()?;
    let steps = b["orchestration"]["steps"]
        .as_array()
        .ok_or_else(|| format!("no orchestration steps: {b}"))?;
    let names: Vec<(&str, u64)> = steps
        .iter()
        .filter_map(|s| Some((s["step"].as_str()?, s["nodes"].as_u64()?)))
        .collect();
    check(names == [("up warm", 2), ("down", 2)], || format!("steps {names:?}"))?;
    for s in steps {
        let seconds = s["seconds"]["median"].as_f64().unwrap_or(0.0);
        check(
            seconds > 0.0 && s["seconds"]["n"] == 1 && s["errors"].as_array().is_some_and(Vec::is_empty),
            || format!("step {s}"),
        )?;
    }
    // `up` boots VMs and deploys agents: it cannot take under a few seconds.
    check(steps[0]["seconds"]["median"].as_f64() > Some(5.0), || {
        format!("up took {}", steps[0]["seconds"])
    })?;
    // Where the warm `up` spent its time, from its own timeline: the VMs'
    // boot, SSH and the agent, each with a time and in the order they ran.
    let phases = b["orchestration"]["phases"]
        .as_array()
        .ok_or_else(|| format!("no orchestration phases: {b}"))?;
    let ends_at = |name: &str| {
        phases
            .iter()
            .find(|p| p["phase"] == name && p["nodes"] == 2 && p["seconds"]["n"] == 1)
            .and_then(|p| p["ends_at"]["median"].as_f64())
    };
    let order: Vec<Option<f64>> = ["start VMs", "boot to init", "wait for SSH", "agent health", "status"]
        .into_iter()
        .map(ends_at)
        .collect();
    check(
        order.iter().all(Option::is_some) && order.windows(2).all(|w| w[0] <= w[1]),
        || format!("phases (start VMs, boot, SSH, agent health, status done at) {order:?}: {phases:?}"),
    )?;
    // Nothing of the scratch lab is left: no directory, no process.
    let leftovers: Vec<_> = std::fs::read_dir(&lab.state_base)?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".orch-"))
        .map(|e| e.path())
        .collect();
    check(leftovers.is_empty(), || {
        format!("scratch directories left: {leftovers:?}")
    })?;
    let processes = crate::util::processes_mentioning(".orch-");
    check(processes.is_empty(), || {
        format!("scratch lab processes left: {processes:?}")
    })?;
    // Saved like any bench.
    let id = b["id"].as_str().ok_or("no id")?;
    let shown = lab.run(&["report", "show", id]).ok()?;
    check(
        shown.stdout.contains("up warm") && shown.stdout.contains("down"),
        || format!("show:\n{}", shown.stdout),
    )
}
