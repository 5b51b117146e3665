//! `labctl doctor`: each node's fabric and each pair's data path checked,
//! with the evidence and the fix of every check that does not pass.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use lab_core::doctor::DoctorOptions;
use lab_results::doctor::{DoctorReport, Verdict};

use super::global::{open_lab, GlobalArgs};
use super::table::{Align, Table};

/// Options of `doctor`.
#[derive(Debug, ClapArgs)]
pub struct DoctorArgs {
    /// Print JSON (with a schema version) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Leave out each pair's one-shot RDMA write-read (node checks, reach and MTU only).
    #[arg(long)]
    pub no_run: bool,
    /// Check these node facts instead of the lab's `expect:`: a YAML file
    /// holding what `expect:` holds (`mtu: 4096`, `devices: 4`, ...); its
    /// workload figures are bench's and ci's to measure.
    #[arg(long, value_name = "FILE")]
    pub expect: Option<std::path::PathBuf>,
}

/// Exit status: 0 when every check is ok or warn, 1 when one fails.
pub async fn run(args: &GlobalArgs, doctor: &DoctorArgs) -> anyhow::Result<ExitCode> {
    let lab = open_lab(args)?;
    let expect = match &doctor.expect {
        Some(path) => Some(lab_model::expect::Expectations::load(path).map_err(super::global::BadInput)?),
        None => None,
    };
    let opts = DoctorOptions {
        no_run: doctor.no_run,
        expect,
    };
    let report = lab.doctor(&opts, |step| eprintln!("doctor: {step}")).await?;
    if doctor.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for line in report_lines(&report) {
            println!("{line}");
        }
    }
    Ok(if report.verdict() == Verdict::Fail {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The text report: one row per check, then the fix of each that did not pass.
fn report_lines(r: &DoctorReport) -> Vec<String> {
    let mut table = Table::new(
        "",
        &[
            ("where", Align::Left),
            ("check", Align::Left),
            ("verdict", Align::Left),
            ("evidence", Align::Left),
        ],
    );
    for c in &r.checks {
        table.row([
            c.scope.to_string(),
            c.check.clone(),
            c.verdict.label().into(),
            c.evidence.clone(),
        ]);
    }
    let mut out = vec![format!("lab `{}` (fabric {})", r.lab, r.fabric)];
    out.extend(table.lines());
    let fixes: Vec<String> = r
        .checks
        .iter()
        .filter_map(|c| {
            c.fix
                .as_ref()
                .map(|fix| format!("  {} {} {}: {fix}", c.verdict.label(), c.scope, c.check))
        })
        .collect();
    if !fixes.is_empty() {
        out.push(String::new());
        out.push("what to do:".into());
        out.extend(fixes);
    }
    out.push(String::new());
    out.push(format!(
        "{}: {} ok, {} warn, {} failed, in {:.1} s",
        match r.verdict() {
            Verdict::Fail => "unhealthy",
            _ => "healthy",
        },
        r.count(Verdict::Ok),
        r.count(Verdict::Warn),
        r.count(Verdict::Fail),
        r.took_s
    ));
    out
}

#[cfg(test)]
mod tests {
    use lab_results::doctor::{Check, Scope, DOCTOR_SCHEMA};

    use super::*;

    #[test]
    fn test_the_report_lists_every_check_and_then_the_fixes() {
        let server = Scope::Node { node: "server".into() };
        let pair = Scope::Pair {
            a: "server".into(),
            b: "client".into(),
        };
        let r = DoctorReport {
            schema: DOCTOR_SCHEMA,
            lab: "rdma".into(),
            fabric: "rxe".into(),
            checks: vec![
                Check::ok(&server, "port", "rxe0 port 1: PORT_ACTIVE, Ethernet"),
                Check::not_ok(&pair, "mtu", Verdict::Fail, "1500 vs 1200", "set one MTU on both"),
            ],
            took_s: 2.04,
            expectations: Vec::new(),
        };
        let lines = report_lines(&r);
        assert_eq!(lines[0], "lab `rdma` (fabric rxe)");
        assert!(lines
            .iter()
            .any(|l| l.starts_with("server ") && l.contains("port") && l.contains("ok")));
        assert!(lines
            .iter()
            .any(|l| l.starts_with("server <-> client") && l.contains("FAIL")));
        assert!(lines.contains(&"  FAIL server <-> client mtu: set one MTU on both".to_string()));
        assert_eq!(lines.last().unwrap(), "unhealthy: 1 ok, 0 warn, 1 failed, in 2.0 s");
    }
}
