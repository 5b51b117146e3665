//! `labctl down`: remove everything of the lab; nothing to do is success.
//! `labctl down --leaked`: find, and with confirmation delete, AWS resources
//! labctl tagged for labs that are no longer live: not in the user's
//! list of live labs, or whose state directory is gone. A leaked lab is
//! deleted by its id; a resource without a lab id (an older labctl's) is
//! listed but deleted only when named with `--delete-id-less`.

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
    /// With --leaked: also delete this leaked resource that carries no lab
    /// id (LAB ID `-` in the list: an older labctl's, which could belong to
    /// any lab of its name). Its ID as listed; repeat for each one. Without
    /// it, such resources are only listed.
    #[arg(long, value_name = "ID", requires = "leaked")]
    pub delete_id_less: Vec<String>,
}

pub async fn run(args: &GlobalArgs, down: &DownArgs) -> anyhow::Result<ExitCode> {
    if down.leaked {
        return leaked(args, down.yes, &down.delete_id_less).await;
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

async fn leaked(args: &GlobalArgs, yes: bool, named: &[String]) -> anyhow::Result<ExitCode> {
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
    let id_less: Vec<(&str, &aws::Leftover)> = scans
        .iter()
        .flat_map(|s| s.id_less().map(move |l| (s.region.as_str(), l)))
        .collect();
    check_named(named, &scans, &id_less)?;
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
    let kept = id_less.iter().filter(|(_, l)| !named.contains(&l.id)).count();
    if kept > 0 {
        println!(
            "{kept} of these carry no lab id (LAB ID -): they are kept, as they could belong to any lab of their name; to delete one, name it: --delete-id-less ID"
        );
    }
    let doomed = total - kept;
    if doomed == 0 {
        println!("nothing to delete");
        return Ok(ExitCode::from(1));
    }
    if !yes {
        if !std::io::stdin().is_terminal() {
            println!("{doomed} leaked resources; re-run with --yes to delete them");
            return Ok(ExitCode::from(1));
        }
        print!("delete these {doomed} resources? [y/N] ");
        std::io::stdout().flush()?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            println!("nothing deleted");
            return Ok(ExitCode::from(1));
        }
    }
    let mut deleted = 0;
    for scan in &scans {
        let gone = scan
            .delete(aws::Waits::default(), named)
            .await
            .with_context(|| format!("deleting leaked resources in {}", scan.region))?;
        deleted += gone.len();
        // A lab whose state directory was removed by hand leaves its
        // live-lab entry behind; its resources are gone now, so is it.
        for id in gone.iter().filter_map(|l| l.lab_id.as_deref()) {
            lab_state::live_labs::unregister(id)?;
        }
    }
    println!("deleted {deleted} leaked resources");
    Ok(ExitCode::SUCCESS)
}

/// Every `--delete-id-less` ID must be one of the id-less leftovers found:
/// a typo must not pass for "nothing to delete", nor name a resource that is
/// not a leftover of this user.
fn check_named(named: &[String], scans: &[aws::LeakedScan], id_less: &[(&str, &aws::Leftover)]) -> anyhow::Result<()> {
    let unknown: Vec<&str> = named
        .iter()
        .filter(|n| !id_less.iter().any(|(_, l)| &l.id == *n))
        .map(String::as_str)
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let with_id = |n: &str| {
        scans
            .iter()
            .flat_map(|s| &s.leftovers)
            .any(|l| l.id == n && l.lab_id.is_some())
    };
    let listed = if id_less.is_empty() {
        "none was found".to_string()
    } else {
        id_less
            .iter()
            .map(|(region, l)| format!("\n    {region}  {}  {}  {}", l.lab, l.kind, l.id))
            .collect()
    };
    let why = if unknown.iter().all(|&n| with_id(n)) {
        "carries a lab id (a leaked lab is deleted whole, by its id, without naming its resources)"
    } else {
        "is not a leaked labctl resource without a lab id"
    };
    anyhow::bail!(
        "--delete-id-less {}: {why}; the leaked resources without a lab id are: {listed}\n  fix: name only IDs from that list (`labctl down --leaked` lists them with LAB ID -)",
        unknown.join(", ")
    )
}
