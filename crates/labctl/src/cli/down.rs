//! `labctl down`: remove everything of the lab; nothing to do is success.
//! `labctl down --leaked`: find, and with confirmation delete, AWS resources
//! labctl tagged for labs that are no longer live: not in the user's
//! list of live labs, or whose state directory is gone.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args as ClapArgs;
use lab_model::ProviderKind;
use lab_providers::aws;

use super::global::{lock_wait, open_lab, BadInput, GlobalArgs};
use super::table::{Align, Table};

/// Options of `down`.
#[derive(Debug, ClapArgs)]
pub struct DownArgs {
    /// Instead of one lab: list AWS resources tagged by labctl (for this
    /// user@host) whose lab is not live (not in this user's list of live
    /// labs, or its state directory is gone), in the regions of the file's
    /// aws labs and AWS_REGION, and offer to delete them.
    #[arg(long)]
    pub leaked: bool,
    /// With --leaked: delete without asking.
    #[arg(long, requires = "leaked")]
    pub yes: bool,
}

pub async fn run(args: &GlobalArgs, down: &DownArgs) -> anyhow::Result<ExitCode> {
    if down.leaked {
        return leaked(args, down.yes).await;
    }
    let lab = open_lab(args)?;
    let started = std::time::Instant::now();
    if lab.down(lock_wait()).await? {
        println!(
            "lab `{}` removed in {:.1}s",
            lab.spec.name,
            started.elapsed().as_secs_f64()
        );
    } else {
        println!("lab `{}` is not up; nothing to remove", lab.spec.name);
    }
    Ok(ExitCode::SUCCESS)
}

async fn leaked(args: &GlobalArgs, yes: bool) -> anyhow::Result<ExitCode> {
    let source = args.source();
    let file = source.load()?;
    let mut regions: Vec<String> = file
        .labs
        .iter()
        .filter(|l| l.provider == ProviderKind::Aws)
        .filter_map(|l| l.aws.as_ref().map(|a| a.region.clone()))
        .chain(std::env::var("AWS_REGION").ok())
        .collect();
    regions.sort();
    regions.dedup();
    if regions.is_empty() {
        return Err(BadInput(format!(
            "{}: no lab uses provider aws and AWS_REGION is not set, so no region to search\n  fix: set AWS_REGION=REGION",
            source.display()
        ))
        .into());
    }
    let owner = aws::default_owner();
    // A lab is live while its entry in the list of live labs points at a
    // state directory that holds its id, wherever it was brought up from.
    // Resources of a labctl from before lab ids carry only the lab's name:
    // for those, a state directory beside this labs file is what counts.
    let known = |l: &aws::Leftover| match &l.lab_id {
        Some(id) => lab_state::live_labs::is_live(id),
        None => source.lab_dir(&l.lab).exists(),
    };
    let mut scans = Vec::new();
    for region in &regions {
        let client = aws::client_from_env(Some(region)).await;
        let scan = aws::scan_leaked(client, &owner, known)
            .await
            .with_context(|| format!("searching region {region} for leaked labctl resources"))?;
        for note in &scan.notes {
            eprintln!("labctl: note: {note}");
        }
        scans.push(scan);
    }
    let total: usize = scans.iter().map(|s| s.leftovers.len()).sum();
    if total == 0 {
        println!("no leaked labctl resources of {owner} in {}", regions.join(", "));
        return Ok(ExitCode::SUCCESS);
    }
    let mut table = Table::new(
        "",
        &[
            ("REGION", Align::Left),
            ("LAB", Align::Left),
            ("LAB ID", Align::Left),
            ("KIND", Align::Left),
            ("ID", Align::Left),
            ("CREATED", Align::Left),
        ],
    );
    for scan in &scans {
        for l in &scan.leftovers {
            table.row([
                scan.region.as_str(),
                l.lab.as_str(),
                l.lab_id.as_deref().unwrap_or("-"),
                l.kind,
                l.id.as_str(),
                l.created.as_str(),
            ]);
        }
    }
    table.print();
    if !yes {
        if !std::io::stdin().is_terminal() {
            println!("{total} leaked resources; re-run with --yes to delete them");
            return Ok(ExitCode::from(1));
        }
        print!("delete these {total} resources? [y/N] ");
        std::io::stdout().flush()?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            println!("nothing deleted");
            return Ok(ExitCode::from(1));
        }
    }
    for scan in &scans {
        scan.delete(aws::Waits::default())
            .await
            .with_context(|| format!("deleting leaked resources in {}", scan.region))?;
        // A lab whose state directory was removed by hand leaves its
        // live-lab entry behind; its resources are gone now, so is it.
        for id in scan.leftovers.iter().filter_map(|l| l.lab_id.as_deref()) {
            lab_state::live_labs::unregister(id)?;
        }
    }
    println!("deleted {total} leaked resources");
    Ok(ExitCode::SUCCESS)
}
