//! `labctl report html`: a page made from this suite's own bench, traced run
//! and latency run, opened in headless chromium through chromedriver: no
//! console errors, every chart and the trace timeline drawn, and the numbers
//! on the page equal to the saved JSON records.

use libtest_mimic::{Failed, Trial};
use serde_json::Value;

use crate::util::{bin_dir, check, Labctl};
use crate::webdriver::Browser;

pub fn trials(lab: &Labctl) -> Vec<Trial> {
    let lab = lab.clone();
    vec![crate::timing::trial(
        "test_report_html_in_headless_chromium",
        move || report_html(&lab),
    )]
}

/// Run in the page after load: what each chart, the topology and the
/// timeline drew (shapes in a colour other than black and white with a
/// nonzero box), and every `data-field` with its value.
const INSPECT: &str = r#"
const drawn = (svg) => svg ? [...svg.querySelectorAll('polyline, rect, circle, path')].filter((e) => {
  const colour = (e.getAttribute('stroke') || '') + (e.getAttribute('fill') || '');
  if (/^(#000000|#FFFFFF|none)*$/i.test(colour.replace(/none/g, ''))) return false;
  const b = e.getBBox();
  return b.width > 0 || b.height > 0;
}).length : 0;
const charts = [...document.querySelectorAll('figure.chart')].map((f) => ({
  name: f.dataset.chart, drawn: drawn(f.querySelector('svg')) }));
const topology = document.querySelector('figure.topology svg');
const slices = {};
for (const r of document.querySelectorAll('#timeline rect.slice')) {
  const b = r.getBBox();
  if (b.width > 0 && b.height > 0) slices[r.dataset.node] = (slices[r.dataset.node] || 0) + 1;
}
const fields = [...document.querySelectorAll('[data-field]')].map((e) => {
  const owner = e.closest('[data-run], [data-bench]');
  const pair = e.closest('[data-pair]');
  return { run: owner.dataset.run || null, bench: owner.dataset.bench || null,
    pair: pair ? Number(pair.dataset.pair) : null, field: e.dataset.field,
    value: e.dataset.value === undefined ? null : Number(e.dataset.value), text: e.textContent };
});
return { charts, topology: topology ? topology.querySelectorAll('*').length : 0, slices,
  flows: document.querySelectorAll('#timeline line.flow').length, fields };
"#;

fn report_html(lab: &Labctl) -> Result<(), Failed> {
    let dir = bin_dir().join(format!("html-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let trace = dir.join("write-read.trace.json");
    let trace_arg = trace.display().to_string();
    let page_dir = dir.join("page");
    let page_arg = page_dir.display().to_string();

    // Bad input first: an unknown id names what exists; an unwritable -o is refused before any work.
    let unknown = lab.run(&["report", "html", "no-such-id", "-o", &page_arg]);
    check(unknown.code != 0 && unknown.stderr.contains("no-such-id"), || {
        format!("unknown id: {} {}", unknown.code, unknown.stderr)
    })?;
    let unwritable = lab.run(&["report", "html", "-o", "/proc/labctl-report"]);
    check(
        unwritable.code != 0 && unwritable.stderr.contains("-o /proc/labctl-report"),
        || format!("unwritable -o: {} {}", unwritable.code, unwritable.stderr),
    )?;

    // The records the page shows, made here.
    let bench = lab
        .run(&[
            "bench",
            "--sweep",
            "--sizes",
            "2,4096",
            "--rounds",
            "1",
            "-n",
            "20",
            "-o",
            &dir.display().to_string(),
            "--json",
        ])
        .ok()?
        .json()?;
    let bench_id = bench["id"].as_str().ok_or("bench without id")?.to_string();
    let traced = lab
        .run(&["run", "write-read", "--trace", &trace_arg, "--json"])
        .ok()?
        .json()?;
    let traced_id = traced["id"].as_str().ok_or("run without id")?.to_string();
    // The bench saved its own runs: its write-lat run at 4096 B has latency percentiles.
    let listed = lab
        .run(&["report", "list", "--workload", "write-lat", "--json"])
        .ok()?
        .json()?;
    let lat_id = listed
        .as_array()
        .and_then(|rows| rows.last())
        .and_then(|r| r["id"].as_str())
        .ok_or_else(|| format!("no write-lat run saved by the bench: {listed}"))?
        .to_string();
    let lat_run = lab.run(&["report", "show", &lat_id, "--json"]).ok()?.json()?;

    let made = lab
        .run(&[
            "report", "html", &traced_id, &lat_id, &bench_id, "-o", &page_arg, "--trace", &trace_arg, "--json",
        ])
        .ok()?;
    let made = made.json()?;
    let index = page_dir.join("index.html");
    check(made["path"] == index.display().to_string(), || {
        format!("--json path: {made}")
    })?;
    check(
        made["topology"] == true && made["trace"] == "write-read.trace.json",
        || format!("--json contents: {made}"),
    )?;
    let html = std::fs::read_to_string(&index)?;
    check(!html.contains("src=\"http") && !html.contains("href=\"http"), || {
        "the page loads something from the network".into()
    })?;

    let profile = dir.join("chromium-profile");
    let browser = Browser::start(&profile)?;
    browser.open(&format!("file://{}", index.display()))?;
    let seen = browser.execute(INSPECT)?;
    let log = browser.console_log()?;
    drop(browser);

    // 1. No console errors.
    let severe: Vec<&Value> = log.iter().filter(|e| e["level"] == "SEVERE").collect();
    check(severe.is_empty(), || format!("console errors: {severe:?}"))?;
    // 2. Every chart drawn, the topology too, and the timeline on both nodes.
    let charts = seen["charts"].as_array().ok_or("no charts list")?;
    let names: Vec<&str> = charts.iter().filter_map(|c| c["name"].as_str()).collect();
    for want in [
        format!("run-{lat_id}-latency"),
        format!("bench-{bench_id}-sweep-bw"),
        format!("bench-{bench_id}-sweep-lat"),
        format!("bench-{bench_id}-ratios"),
        "ratios-over-time".to_string(),
    ] {
        check(names.contains(&want.as_str()), || {
            format!("chart {want} missing: {names:?}")
        })?;
    }
    check(made["charts"].as_array().map(Vec::len) == Some(names.len()), || {
        format!("--json names {} charts, the page has {names:?}", made["charts"])
    })?;
    for c in charts {
        check(c["drawn"].as_u64().unwrap_or(0) > 0, || {
            format!("chart drew nothing: {c}")
        })?;
    }
    check(seen["topology"].as_u64().unwrap_or(0) > 0, || {
        "topology not drawn".into()
    })?;
    let slices = seen["slices"].as_object().ok_or("no slices")?;
    for node in ["server", "client"] {
        let n = slices
            .iter()
            .filter(|(k, _)| k.starts_with(node))
            .map(|(_, v)| v.as_u64().unwrap_or(0))
            .sum::<u64>();
        check(n > 0, || format!("no trace slices drawn for {node}: {slices:?}"))?;
    }
    check(seen["flows"].as_u64().unwrap_or(0) > 0, || {
        "no flow arrows drawn".into()
    })?;
    // 3. The numbers equal the records'.
    let fields = seen["fields"].as_array().ok_or("no fields")?;
    let mut compared = 0;
    // Numbers compared per run, and bench pairs that showed one.
    let mut per_run: std::collections::BTreeMap<String, usize> = Default::default();
    let mut pairs_seen = std::collections::BTreeSet::new();
    for f in fields {
        let Some(shown) = f["value"].as_f64() else { continue };
        let name = f["field"].as_str().unwrap_or("");
        let want = if let Some(run) = f["run"].as_str() {
            let record = if run == traced_id {
                &traced
            } else if run == lat_id {
                &lat_run
            } else {
                return Err(format!("a run not asked for: {run}").into());
            };
            *per_run.entry(run.to_string()).or_default() += 1;
            name.split('.').fold(record, |v, k| &v[k]).as_f64()
        } else {
            pairs_seen.insert(f["pair"].as_u64().unwrap_or(u64::MAX));
            let pair = &bench["pairs"][f["pair"].as_u64().ok_or("bench field outside a pair")? as usize];
            name.split('.')
                .fold(pair, |v, k| if k == "median" { &v["stats"][k] } else { &v[k] })
                .as_f64()
        };
        check(want == Some(shown), || format!("{f}: the record says {want:?}"))?;
        compared += 1;
    }
    for f in fields.iter().filter(|f| f["field"] == "verified") {
        let record = if f["run"] == traced_id.as_str() {
            &traced
        } else {
            &lat_run
        };
        let want = if record["verified"] == true { "yes" } else { "NO" };
        check(f["text"] == want, || {
            format!("{f}: the record's verified is {}", record["verified"])
        })?;
    }
    // Each run shows the figures of what it measured (bandwidth for
    // write-read, latency for write-lat, never the other's zeros), and every
    // bench pair its own.
    let pairs = bench["pairs"].as_array().map_or(0, Vec::len);
    check(
        per_run.get(traced_id.as_str()).copied().unwrap_or(0) >= 4
            && per_run.get(lat_id.as_str()).copied().unwrap_or(0) >= 4
            && pairs_seen.len() == pairs,
        || format!("{compared} numbers compared: per run {per_run:?}, bench pairs {pairs_seen:?} of {pairs}"),
    )?;
    eprintln!(
        "html report: {} charts, {} numbers equal to the records, slices {slices:?}, {} console entries, page {} KiB",
        names.len(),
        compared,
        log.len(),
        html.len() / 1024
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
