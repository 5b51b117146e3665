//! `labctl ci [LAB]`: bring the lab up, run its suite of steps, tear it
//! down, and write JUnit XML, a JSON report and the collected artifacts. The teardown runs whatever happens:
//! on success, on failure, and on Ctrl-C or SIGTERM (a second signal does
//! not cut it short). Exit status: 0 all passed, 1 something failed, 2 bad
//! input, 130/143 interrupted/terminated. A workload step whose bytes did
//! not verify is not retried; the summary and the report say so.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use lab_core::ci::{check_local_files, check_placeholders, run_suite, SuiteFiles};
use lab_core::lab::{Lab, UpOptions};
use lab_model::suite::{Suite, SuiteError};
use lab_results::ci::{CaseStatus, CiReport, StepResult};
use lab_state::Phase;

use super::global::{lock_wait, GlobalArgs};

/// Options of `ci`.
#[derive(Debug, ClapArgs)]
pub struct CiArgs {
    /// The lab (default: --lab, else the first in the file).
    #[arg(value_name = "LAB")]
    pub lab_name: Option<String>,
    /// Run this suite file instead of the lab's `ci:` section.
    #[arg(long, value_name = "FILE")]
    pub suite: Option<PathBuf>,
    /// Also write the JUnit XML here (it is always saved in the lab's results).
    #[arg(long, value_name = "PATH")]
    pub junit: Option<PathBuf>,
    /// Also write the JSON report here (it is always saved in the lab's results).
    #[arg(long, value_name = "PATH")]
    pub report: Option<PathBuf>,
    /// Put the files of `collect:` steps here (default: beside the report,
    /// `<time>-ci.artifacts/` in the lab's results).
    #[arg(long, value_name = "DIR")]
    pub artifacts: Option<PathBuf>,
    /// Print the JSON report on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
    /// Leave the lab up at the end (for debugging); it is then yours to `labctl down`.
    #[arg(long)]
    pub keep: bool,
    /// The rdma-agent binary to deploy (default: next to labctl).
    #[arg(long, env = "LABCTL_AGENT")]
    pub agent: Option<PathBuf>,
    /// Seconds to wait for each node's SSH.
    #[arg(long, default_value_t = 240)]
    pub ssh_timeout: u64,
}

pub async fn run(args: &GlobalArgs, ci: &CiArgs) -> anyhow::Result<ExitCode> {
    let name = match (&ci.lab_name, &args.lab) {
        (Some(a), Some(b)) if a != b => anyhow::bail!(SuiteError::Mismatch {
            source_name: "command line".into(),
            index: 0,
            message: format!("LAB `{a}` and --lab `{b}` name different labs"),
            fix: "give the lab once".into(),
        }),
        (Some(a), _) => Some(a.as_str()),
        (None, b) => b.as_deref(),
    };
    let source = args.source();
    let lab = source.open(name)?;
    let (suite, suite_name) = match &ci.suite {
        Some(path) => (Suite::load(path)?, path.display().to_string()),
        None => match &lab.spec.ci {
            Some(suite) => (
                suite.clone(),
                format!("{} (lab {}, ci:)", source.display(), lab.spec.name),
            ),
            None => {
                return Err(SuiteError::NoSuite {
                    lab: lab.spec.name.clone(),
                    file: source.path(),
                }
                .into())
            }
        },
    };
    lab.spec.check_suite(&suite, &suite_name)?;
    check_placeholders(&lab, &suite, &suite_name)?;
    // `copy:` paths are relative to the file the suite is written in.
    let suite_file = ci.suite.clone().unwrap_or_else(|| source.path());
    let base_dir = match suite_file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    check_local_files(&suite, &base_dir, &suite_name)?;
    if matches!(lab.dir.load(), Ok(Some(s)) if s.phase == Phase::Ready) {
        // It would tear down a lab somebody else brought up.
        return Err(SuiteError::AlreadyUp {
            lab: lab.spec.name.clone(),
            command: format!("labctl {}--lab {} down", source.file_flag(), lab.spec.name),
        }
        .into());
    }

    let started = Instant::now();
    let mut report = CiReport::new(&lab.spec, &suite, &suite_name);
    let files = SuiteFiles {
        base_dir,
        artifacts_dir: ci.artifacts.clone().unwrap_or_else(|| {
            let stamp: String = report
                .started_at
                .chars()
                .filter(|c| c.is_ascii_alphanumeric())
                .collect();
            lab.dir.results_dir().join(format!("{stamp}-ci.artifacts"))
        }),
    };
    let reporter = crate::progress::reporter(false);
    let opts = UpOptions {
        keep_on_failure: false,
        agent_binary: super::up::agent_path(ci.agent.as_ref()),
        ssh_wait: Duration::from_secs(ci.ssh_timeout),
        lock_wait: lock_wait(),
    };
    // The lab's life and the suite run until done or until the first signal;
    // whichever comes first, the teardown below runs.
    let signal = {
        let body = async {
            report.up.ran = true;
            let up_started = Instant::now();
            let up = lab.up(&opts, reporter.as_ref()).await;
            report.up.duration_s = up_started.elapsed().as_secs_f64();
            match up {
                Ok(_) => report.up.ok = true,
                Err(e) => {
                    report.up.error = Some(format!("{e:#}"));
                    return;
                }
            }
            run_suite(&lab, &suite, &files, &mut report, reporter.as_ref()).await;
        };
        tokio::select! {
            () = body => None,
            signal = super::global::interrupted() => Some(signal),
        }
    };
    if let Some(signal) = signal {
        eprintln!("labctl ci: {signal}; tearing the lab down (it finishes even if signalled again)");
        report.signal = Some(signal.to_string());
        if report.up.ran && !report.up.ok && report.up.error.is_none() {
            report.up.error = Some(format!("{signal} during up"));
        }
        report.mark_not_run(&format!("labctl ci was {signal}"));
    } else if !report.up.ok {
        report.mark_not_run("labctl up failed");
    }
    // Later signals are only acknowledged: the handlers stay installed, so
    // they no longer end the process, and the teardown completes.
    let watcher = tokio::spawn(async {
        loop {
            let signal = super::global::interrupted().await;
            eprintln!("labctl ci: {signal} again; the teardown continues so that nothing is left behind");
        }
    });
    if ci.keep {
        reporter.note(
            "ci",
            &format!(
                "--keep: leaving lab `{}` up; remove it with `labctl down`",
                lab.spec.name
            ),
        );
    } else {
        let down_started = Instant::now();
        let down = lab.down(lock_wait()).await;
        report.down = StepResult {
            ran: true,
            ok: down.is_ok(),
            duration_s: down_started.elapsed().as_secs_f64(),
            error: down.err().map(|e| format!("{e:#}")),
        };
    }
    watcher.abort();
    drop(reporter);
    report.duration_s = started.elapsed().as_secs_f64();
    report.tally();

    let (json_path, junit_path) = save(&lab, &report, ci)?;
    if ci.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_summary(&report, &json_path, &junit_path, &files.artifacts_dir);
    }
    Ok(match report.signal.as_deref() {
        Some("terminated") => ExitCode::from(143),
        Some(_) => ExitCode::from(130),
        None if report.success() => ExitCode::SUCCESS,
        None => ExitCode::FAILURE,
    })
}

/// Saves the JSON report and the JUnit XML in the lab's results directory
/// (and where `--report`/`--junit` ask); returns the saved paths.
fn save(lab: &Lab, report: &CiReport, ci: &CiArgs) -> anyhow::Result<(PathBuf, PathBuf)> {
    let json = serde_json::to_vec_pretty(report)?;
    let xml = report.junit_xml();
    let json_path = lab.dir.save_result(&report.started_at, "ci", &json)?;
    let junit_path = json_path.with_extension("junit.xml");
    write(&junit_path, xml.as_bytes())?;
    if let Some(path) = &ci.report {
        write(path, &json)?;
    }
    if let Some(path) = &ci.junit {
        write(path, xml.as_bytes())?;
    }
    Ok((json_path, junit_path))
}

fn write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("creating {}: {e}", dir.display()))?;
    }
    std::fs::write(path, bytes).map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))
}

fn print_summary(r: &CiReport, json_path: &Path, junit_path: &Path, artifacts: &Path) {
    println!(
        "ci on lab `{}`: {} passed, {} failed, {} not run in {:.1}s",
        r.lab, r.passed, r.failed, r.not_run, r.duration_s
    );
    let step = |name: &str, s: &StepResult| match (&s.error, s.ran) {
        (Some(e), _) => println!("  {name:<6} FAILED after {:.1}s: {e}", s.duration_s),
        (None, true) => println!("  {name:<6} ok ({:.1}s)", s.duration_s),
        (None, false) => println!("  {name:<6} skipped"),
    };
    step("up", &r.up);
    let width = r.cases.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for case in &r.cases {
        let (verdict, why) = match case.status {
            CaseStatus::Passed if case.attempts > 1 => ("passed", format!("on attempt {}", case.attempts)),
            CaseStatus::Passed => ("passed", String::new()),
            CaseStatus::Failed if case.attempts > 1 => (
                "FAILED",
                format!(
                    "{} attempts: {}",
                    case.attempts,
                    case.message.clone().unwrap_or_default()
                ),
            ),
            CaseStatus::Failed => ("FAILED", case.message.clone().unwrap_or_default()),
            CaseStatus::NotRun => ("not run", case.message.clone().unwrap_or_default()),
        };
        let mut why = why.lines().next().unwrap_or_default().to_string();
        if case.not_retried.is_some() {
            why.push_str(" (not retried: a verification failure is final)");
        }
        println!("  {verdict:<7} {:<width$} {:>6.1}s  {why}", case.name, case.duration_s);
        if let Some(trace) = &case.trace {
            println!("  {:<7} {:<width$}          trace {trace}", "", "");
        }
    }
    step("down", &r.down);
    if let Some(signal) = &r.signal {
        println!("  {signal}: the suite was stopped by a signal");
    }
    println!("  report  {}", json_path.display());
    println!("  junit   {}", junit_path.display());
    if artifacts.is_dir() {
        println!("  artifacts {}", artifacts.display());
    }
}
