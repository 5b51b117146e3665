//! A lab is its id (issue 36 item 1): one labs.yaml copied into two project
//! directories, and `labctl ci` run in both at the same time. Two QEMU labs
//! of the same name on one machine, sharing the image cache and the user's
//! registry of live labs: both must pass, and neither may leave a process,
//! a state directory or a registry entry behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use libtest_mimic::{Failed, Trial};
use serde_json::Value;

use crate::util::{bin_dir, check, processes_mentioning, to_run, Run};

/// The labs file both directories get: a lab `twin` whose ci suite passes.
const TWIN_LABS: &str = "\
# Copied into two project directories and run by two `labctl ci` at once.
labs:
  - name: twin
    nodes:
      - name: server
      - name: client
    ci:
      workloads:
        - workload: write-read
        - workload: send-recv
          size: 8192
          iterations: 8
";

pub fn trials() -> Vec<Trial> {
    vec![crate::timing::trial(
        "test_two_ci_runs_of_one_labs_file_from_two_directories_at_once_both_pass_and_leave_nothing",
        test_two_ci_runs_at_once,
    )]
}

/// One project directory holding a copy of [`TWIN_LABS`].
struct Project {
    root: PathBuf,
}

impl Project {
    fn labs_file(&self) -> PathBuf {
        self.root.join("labs.yaml")
    }

    /// Where `up` keeps the lab's state: beside the labs file.
    fn state_dir(&self) -> PathBuf {
        self.root.join(".labctl").join("twin")
    }

    fn report(&self) -> PathBuf {
        self.root.join("report.json")
    }

    /// labctl on this project's labs file, run from its directory, with the
    /// registry of live labs under `xdg_state` (shared by both projects, as
    /// one user's is) and the user's image cache.
    fn command(&self, xdg_state: &Path) -> Command {
        let mut cmd = Command::new(bin_dir().join("labctl"));
        cmd.arg("-f")
            .arg(self.labs_file())
            .current_dir(&self.root)
            .env("LABCTL_AGENT", bin_dir().join("rdma-agent"))
            .env("XDG_STATE_HOME", xdg_state)
            .env_remove("LABCTL_STATE_DIR")
            .env_remove("LABCTL_LAB");
        cmd
    }
}

fn test_two_ci_runs_at_once() -> Result<(), Failed> {
    let base = bin_dir().join("lab-tests-twin-ci");
    let _ = std::fs::remove_dir_all(&base);
    let xdg_state = base.join("xdg-state");
    let projects: Vec<Project> = ["checkout-a", "checkout-b"]
        .iter()
        .map(|name| Project { root: base.join(name) })
        .collect();
    for p in &projects {
        std::fs::create_dir_all(&p.root)?;
        std::fs::write(p.labs_file(), TWIN_LABS)?;
    }
    let result = run_both(&projects, &xdg_state);
    // Whatever happened, neither lab outlives the test.
    for p in &projects {
        let _ = p.command(&xdg_state).arg("down").output();
    }
    result?;
    let _ = std::fs::remove_dir_all(&base);
    Ok(())
}

fn run_both(projects: &[Project], xdg_state: &Path) -> Result<(), Failed> {
    let started = Instant::now();
    let children: Vec<_> = projects
        .iter()
        .map(|p| {
            p.command(xdg_state)
                .arg("ci")
                .arg("--report")
                .arg(p.report())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    // Both run to the end before anything is judged: one failing must not
    // leave the other running unseen.
    let outputs: Vec<std::io::Result<Output>> = children.into_iter().map(|c| c.wait_with_output()).collect();
    let took = started.elapsed();
    let mut runs = Vec::new();
    for (p, out) in projects.iter().zip(outputs) {
        runs.push((p, to_run(out?)));
    }
    for (p, run) in &runs {
        judge(p, run)?;
    }
    check(took < Duration::from_secs(1800), || {
        format!("the two runs took {took:?}")
    })?;
    nothing_left(projects, xdg_state)
}

/// One run passed: exit 0, every case passed, `up` and `down` both ran and
/// succeeded.
fn judge(p: &Project, run: &Run) -> Result<(), Failed> {
    let dir = p.root.display();
    check(run.code == 0, || {
        format!(
            "{dir}: labctl ci exit {} (want 0)\nstdout:\n{}\nstderr:\n{}",
            run.code, run.stdout, run.stderr
        )
    })?;
    check(run.stdout.contains("2 passed, 0 failed, 0 not run"), || {
        format!("{dir}: summary:\n{}", run.stdout)
    })?;
    let text = std::fs::read_to_string(p.report()).map_err(|e| format!("{}: {e}", p.report().display()))?;
    let r: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}\n{text}", p.report().display()))?;
    check(r["lab"] == "twin" && r["provider"] == "qemu", || format!("{dir}: {r}"))?;
    check(r["up"]["ok"] == true, || format!("{dir}: up: {}", r["up"]))?;
    check(r["down"]["ran"] == true && r["down"]["ok"] == true, || {
        format!("{dir}: down: {}", r["down"])
    })?;
    check(r["passed"] == 2 && r["failed"] == 0 && r["not_run"] == 0, || {
        format!("{dir}: {r}")
    })?;
    let cases = r["cases"].as_array().ok_or("no cases")?;
    for case in cases {
        check(case["status"] == "passed" && case["run"]["verified"] == true, || {
            format!("{dir}: {case}")
        })?;
    }
    Ok(())
}

/// Neither lab left a process (supervisor, QEMU) mentioning its state
/// directory, the directory itself, or an entry in the registry of live labs.
fn nothing_left(projects: &[Project], xdg_state: &Path) -> Result<(), Failed> {
    for p in projects {
        let dir = p.state_dir();
        let left = processes_mentioning(&dir.display().to_string());
        check(left.is_empty(), || format!("processes left behind: {left:?}"))?;
        check(!dir.exists(), || {
            format!("state directory left behind: {}", dir.display())
        })?;
    }
    let registry = xdg_state.join("labctl").join(".registry");
    let entries: Vec<String> = std::fs::read_dir(&registry)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    check(entries.is_empty(), || {
        format!("registry entries left in {}: {entries:?}", registry.display())
    })
}
