//! `labctl bench --suite collectives`: on the quad lab (Open MPI, its
//! compiler and node SSH baked in), both sides measured and verified in one
//! record whose ratios follow from its own figures; on the shared lab (no
//! Open MPI), refused before anything runs with the labs.yaml lines.

use libtest_mimic::{Failed, Trial};
use serde_json::Value;

use crate::packages::{ensure_up, NODES};
use crate::util::{check, Labctl};

/// The trial on the quad lab.
pub fn quad_trials(lab: &Labctl) -> Vec<Trial> {
    let lab = lab.clone();
    vec![crate::timing::trial(
        "test_quad_bench_collectives_measures_both_sides_and_their_ratios_in_one_record",
        move || test_bench_collectives_measures_both_sides_and_their_ratios(&lab),
    )]
}

/// The trial on the shared lab, which has no Open MPI.
pub fn refusal_trials(lab: &Labctl) -> Vec<Trial> {
    let lab = lab.clone();
    vec![crate::timing::trial(
        "test_bench_collectives_on_a_lab_without_open_mpi_is_refused_with_the_lines_to_add",
        move || test_bench_collectives_on_a_lab_without_open_mpi_is_refused(&lab),
    )]
}

fn f64_at(v: &Value, path: &[&str]) -> Option<f64> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_f64()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// One measured round of one side: measured, checked, busbw from its time.
fn check_round(label: &str, side: &str, s: &Value, size: f64, factor: f64) -> Result<(), Failed> {
    let c = &s["collective"];
    let (busbw, time_us) = (s["value"].as_f64().unwrap_or(0.0), c["time_us"].as_f64().unwrap_or(0.0));
    check(s["error"].is_null() && s["verified"] == true, || {
        format!("{label} {side}: a round failed: {s}")
    })?;
    check(
        c["world"] == 4
            && c["checked"].as_u64().unwrap_or(0) > 0
            && c["wrong"] == 0
            && c["size"].as_f64() == Some(size),
        || format!("{label} {side}: not four ranks, nothing checked, or a wrong element: {c}"),
    )?;
    // nccl-tests: busbw = size / time x the collective's factor.
    check(
        time_us > 0.0 && close(busbw, size / (time_us * 1e-6) / 1e9 * factor),
        || format!("{label} {side}: busbw {busbw} does not follow from {size} B in {time_us} us x {factor}"),
    )
}

fn test_bench_collectives_measures_both_sides_and_their_ratios(lab: &Labctl) -> Result<(), Failed> {
    ensure_up(lab)?;
    let out = lab
        .run(&[
            "bench",
            "--suite",
            "collectives",
            "--only",
            "allreduce",
            "--only",
            "alltoall",
            "--sizes",
            "8,65536",
            "--rounds",
            "1",
            "--warmup",
            "0",
            "--json",
        ])
        .ok()?;
    let r = out.json()?;
    let c = &r["collectives"];
    check(r["suite"] == "collectives" && c["world"] == 4, || format!("{r}"))?;
    check(c["nodes"] == serde_json::json!(NODES), || {
        format!("ranks: {}", c["nodes"])
    })?;
    check(
        c["mpi_version"].as_str().unwrap_or("").contains("Open MPI") && c["mpi_transport"] == "tcp",
        || format!("Open MPI's version or transport: {c}"),
    )?;
    check(
        c["mpirun"].as_str().unwrap_or("").contains("btl_tcp_if_include"),
        || format!("mpirun: {}", c["mpirun"]),
    )?;

    // 8 B alltoall would be half an element per rank: one each, 16 B.
    let pairs = r["pairs"].as_array().cloned().unwrap_or_default();
    let mut labels: Vec<String> = pairs
        .iter()
        .map(|p| format!("{} {}", p["spec"]["workload"].as_str().unwrap_or(""), p["spec"]["size"]))
        .collect();
    labels.sort();
    check(
        labels == ["allreduce 65536", "allreduce 8", "alltoall 16", "alltoall 65536"],
        || format!("pairs: {labels:?}"),
    )?;
    for p in &pairs {
        let spec = &p["spec"];
        let label = format!("{} {}", spec["workload"], spec["size"]);
        let size = spec["size"].as_f64().unwrap_or(0.0);
        let factor = if spec["workload"] == "allreduce" { 1.5 } else { 0.75 };
        for side in ["reference", "ours"] {
            let samples = p[side]["samples"].as_array().cloned().unwrap_or_default();
            check(samples.len() == 1, || {
                format!("{label} {side}: {} rounds", samples.len())
            })?;
            check_round(&label, side, &samples[0], size, factor)?;
        }
        check(p["ours"]["samples"][0]["run_id"].is_string(), || {
            format!("{label}: ours has no run record")
        })?;
        // The ratios follow from the two sides' figures.
        let ratio = f64_at(p, &["ratio"]).unwrap_or(0.0);
        let want = f64_at(p, &["ours", "stats", "median"]).unwrap_or(f64::NAN)
            / f64_at(p, &["reference", "stats", "median"]).unwrap_or(f64::NAN);
        check(close(ratio, want), || {
            format!("{label}: ratio {ratio}, medians give {want}")
        })?;
        let time_ratio = f64_at(p, &["time_ratio"]).unwrap_or(0.0);
        let want = f64_at(p, &["ours", "time_us", "median"]).unwrap_or(f64::NAN)
            / f64_at(p, &["reference", "time_us", "median"]).unwrap_or(f64::NAN);
        check(close(time_ratio, want), || {
            format!("{label}: time ratio {time_ratio}, medians give {want}")
        })?;
    }

    // The link's ceiling, in MiB/s and in busbw's GB/s.
    let ceiling = &c["ceiling"];
    let mib_s = f64_at(ceiling, &["sample", "value"]).unwrap_or(0.0);
    check(
        mib_s > 0.0 && close(f64_at(ceiling, &["gb_s"]).unwrap_or(0.0), mib_s * 1048576.0 / 1e9),
        || format!("ceiling: {ceiling}"),
    )?;
    check(ceiling["sample"]["verified"] == true, || format!("ceiling: {ceiling}"))?;

    // Saved where `report` finds it, as a bench.
    let id = r["id"].as_str().unwrap_or_default();
    let shown = lab.run(&["report", "show", id]).ok()?;
    check(
        shown.stdout.contains("collectives") && shown.stdout.contains("MPI_Allreduce"),
        || format!("report show {id}:\n{}", shown.stdout),
    )?;
    let listed = lab.run(&["report", "list"]).ok()?;
    check(listed.stdout.contains(id), || {
        format!("report list:\n{}", listed.stdout)
    })
}

fn test_bench_collectives_on_a_lab_without_open_mpi_is_refused(lab: &Labctl) -> Result<(), Failed> {
    let out = lab.run(&["bench", "--suite", "collectives"]);
    check(out.code != 0, || format!("exit 0:\n{}", out.stdout))?;
    for says in [
        "has no mpirun (package openmpi-bin)",
        "mpicc (package libopenmpi-dev)",
        "packages: [openmpi-bin, libopenmpi-dev, gcc]",
        "node_ssh: true",
        "memory: 2048MiB",
    ] {
        check(out.stderr.contains(says), || {
            format!("wanted {says:?} in:\n{}", out.stderr)
        })?;
    }
    // Refused before anything ran: no bench saved.
    let listed = lab.run(&["report", "list"]);
    check(!listed.stdout.contains("bench collectives"), || {
        format!("a bench was saved:\n{}", listed.stdout)
    })
}
