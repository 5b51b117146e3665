//! The end-to-end suite: real QEMU VMs, real rxe, real agents.
//!
//! Phases, each a libtest run:
//! 1. bad input and failed `up`s, which need no running lab;
//! 2. `labctl up` of `tests/labs/e2e.yaml` once, then every test against it
//!    (the faults that break the lab, such as a killed VM, last);
//! 3. `labctl down`, checked to leave no process and no file; then the
//!    quad lab (`tests/labs/mpi.yaml`: four nodes, `packages:` and
//!    `node_ssh:`): up, `mpirun` across it, every collective on it,
//!    `bench --suite collectives` against Open MPI, down; then
//!    `labctl bench --orchestration --nodes 2`, which times `up` and `down`
//!    of a scratch lab of its own;
//! 4. `labctl ci` on a lab of its own (`tests/labs/ci.yaml`), which it brings
//!    up and tears down itself, once to completion and once cut by SIGTERM;
//!    then two `labctl ci` of one labs file from two directories at once.
//!
//! The lab is torn down at the end whatever happened; when anything failed,
//! console logs, supervisor logs, dmesg and agent logs are saved first under
//! `<target>/lab-artifacts/`.

mod bad_input;
mod bench_collectives;
mod bulk;
mod ci;
mod ci_steps;
mod collectives;
mod doctor;
mod facts;
mod faults;
mod files;
mod graph;
mod html_report;
mod image_cache;
mod impair;
mod lifecycle;
mod packages;
mod patterns;
mod report;
mod security;
mod ssh_agent;
mod ssh_bad_input;
mod ssh_config;
mod ssh_existing;
mod ssh_jump;
mod ssh_unreachable;
mod timing;
mod trace;
mod trace_collective;
mod trace_fabric;
mod trace_failed;
mod trace_show;
mod twin_ci;
mod util;
mod verbs_example;
mod verdicts;
mod webdriver;
mod workloads;

use std::process::ExitCode;

use libtest_mimic::{Arguments, Conclusion, Trial};
use util::Labctl;

fn main() -> ExitCode {
    let mut args = Arguments::from_args();
    // One lab, shared: tests take turns (the VMs have one vCPU each).
    args.test_threads = Some(1);
    let state_base = util::bin_dir().join("lab-tests-state");
    let lab = Labctl::new("tests/labs/e2e.yaml", &state_base);
    let ci_lab = Labctl::new("tests/labs/ci.yaml", &state_base);
    let mpi_lab = Labctl::new("tests/labs/mpi.yaml", &state_base);

    // Leftovers of an interrupted earlier run go first: its lab (VMs and all),
    // then whatever else it left in the suite's private state directory.
    if !args.list {
        lab.run(&["down"]);
        ci_lab.run(&["down"]);
        mpi_lab.run(&["down"]);
        let _ = std::fs::remove_dir_all(&state_base);
    }

    // The failed-`up` tests boot broken copies of the node image: build it
    // first when the cache has none (a fresh machine), as `up` would.
    if !args.list {
        if let Err(e) = ensure_node_image() {
            eprintln!("lab suite: building the node image failed: {e}");
            return ExitCode::FAILURE;
        }
    }

    let mut total = Totals::default();
    let mut before_up = bad_input::trials(&lab);
    before_up.extend(graph::planned_trials(&lab));
    total.add(&libtest_mimic::run(&args, before_up));

    let mut lab_trials = lifecycle::trials(&lab);
    lab_trials.extend(files::trials(&lab));
    lab_trials.extend(facts::trials(&lab));
    lab_trials.extend(graph::trials(&lab));
    lab_trials.extend(image_cache::trials(&lab));
    lab_trials.extend(doctor::trials(&lab));
    lab_trials.extend(security::trials(&lab));
    lab_trials.extend(verbs_example::trials(&lab));
    lab_trials.extend(workloads::trials(&lab));
    lab_trials.extend(patterns::trials(&lab));
    lab_trials.extend(verdicts::trials(&lab));
    lab_trials.extend(bulk::trials(&lab));
    lab_trials.extend(impair::trials(&lab));
    lab_trials.extend(report::trials(&lab));
    lab_trials.extend(bench_collectives::refusal_trials(&lab));
    lab_trials.extend(ssh_existing::trials(&lab));
    lab_trials.extend(faults::trials(&lab));
    lab_trials.extend(trace::trials(&lab));
    lab_trials.extend(trace_show::trials(&lab));
    lab_trials.extend(html_report::trials(&lab));
    // After every doctor test: the kernel log keeps the transmit timeout
    // this provokes, and doctor fails on it for ten minutes.
    lab_trials.extend(doctor::late_trials(&lab));
    // Last: these break the lab (the teardown trial then checks `down` still cleans).
    lab_trials.extend(faults::destructive_trials(&lab));
    let wanted = |t: &Trial| args.filter.as_deref().is_none_or(|f| t.name().contains(f));
    if lab_trials.iter().any(wanted) || args.list {
        if !args.list {
            eprintln!("lab suite: bringing up tests/labs/e2e.yaml (progress below)");
            let up = timing::phase("up tests/labs/e2e.yaml", || {
                lab.command().arg("up").status().expect("run labctl up")
            });
            if !up.success() {
                eprintln!("lab suite: `labctl up` failed; no lab tests can run");
                save_artifacts(&lab);
                lab.run(&["down"]);
                total.failed += 1;
                timing::report(15);
                return total.finish();
            }
        }
        let conclusion = libtest_mimic::run(&args, lab_trials);
        if conclusion.has_failed() {
            save_artifacts(&lab);
        }
        total.add(&conclusion);
        if !args.list {
            total.add(&libtest_mimic::run(&args, vec![lifecycle::teardown_trial(&lab)]));
        }
    }
    // Whatever happened above, nothing of the lab survives the suite.
    timing::phase("down tests/labs/e2e.yaml", || lab.run(&["down"]));

    // The quad lab, one lab at a time: after the shared one is gone.
    // packages/node_ssh first (it brings the lab up), then the collectives.
    let mut quad_trials = packages::trials(&mpi_lab);
    quad_trials.extend(collectives::trials(&mpi_lab));
    quad_trials.extend(bench_collectives::quad_trials(&mpi_lab));
    total.add(&libtest_mimic::run(&args, quad_trials));
    if !args.list {
        total.add(&libtest_mimic::run(&args, vec![packages::teardown_trial(&mpi_lab)]));
        // Whatever the filter let run, nothing of the quad lab survives.
        mpi_lab.run(&["down"]);
    }

    // `bench --orchestration` boots scratch labs of its own: after the shared one is gone.
    total.add(&libtest_mimic::run(&args, report::orchestration_trials(&lab)));

    // `labctl ci` boots its own lab, after the shared one is gone (the
    // machine has room for one lab at a time).
    total.add(&libtest_mimic::run(&args, ci::trials(&ci_lab)));
    if !args.list {
        ci_lab.run(&["down"]);
    }
    // Two `labctl ci` of one labs file from two directories at once.
    total.add(&libtest_mimic::run(&args, twin_ci::trials()));
    timing::report(15);
    total.finish()
}

/// The base node image in the user's cache (`LABCTL_CACHE_DIR` or
/// ~/.cache/labctl), built when missing.
fn ensure_node_image() -> Result<(), String> {
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let cache = lab_providers::image::cache_root();
    runtime
        .block_on(lab_providers::image::ensure(&cache, &[], &|line: &str| {
            eprintln!("lab suite: node image: {line}")
        }))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[derive(Default)]
struct Totals {
    passed: u64,
    failed: u64,
}

impl Totals {
    fn add(&mut self, c: &Conclusion) {
        self.passed += c.num_passed;
        self.failed += c.num_failed;
    }

    fn finish(self) -> ExitCode {
        println!("lab: {} passed, {} failed", self.passed, self.failed);
        if self.failed == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    }
}

/// Keeps what explains a failure: consoles, supervisor log, dmesg, agent log.
fn save_artifacts(lab: &Labctl) {
    let dest = util::bin_dir().join("lab-artifacts").join(format!(
        "{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    ));
    let _ = std::fs::create_dir_all(&dest);
    let state = lab.state_dir("e2e");
    for entry in std::fs::read_dir(&state).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".log") || name.ends_with(".exit") || name == "state.json" {
            let _ = std::fs::copy(entry.path(), dest.join(&name));
        }
    }
    for node in ["server", "client"] {
        let run = lab.run(&[
            "exec",
            node,
            "--",
            "dmesg | tail -n 80; echo ---; tail -n 80 /var/log/rdma-agent.log",
        ]);
        let _ = std::fs::write(dest.join(format!("{node}.node-logs.txt")), run.stdout + &run.stderr);
    }
    eprintln!("lab suite: failure artifacts saved in {}", dest.display());
}
