//! `labctl man --dir DIR`: man pages, `labctl.1` and one `labctl-VERB.1` per
//! verb (and per `report`/`trace` sub-verb), generated from the same clap
//! definitions as `--help`.

use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

/// Options of `man`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Where to write the pages (created if missing), e.g. /usr/local/share/man/man1.
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
}

/// Writes the pages of `command` (labctl's, as `--help` shows it).
pub fn run(man: &ManArgs, command: clap::Command) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&man.dir).with_context(|| format!("creating {}", man.dir.display()))?;
    let written = write_pages(command, &man.dir).with_context(|| {
        format!(
            "writing man pages to {}\n  fix: pass --dir a directory you can write",
            man.dir.display()
        )
    })?;
    for path in &written {
        println!("{}", path.display());
    }
    eprintln!(
        "labctl: wrote {} man pages; read one with `man -l {}`",
        written.len(),
        man.dir.join("labctl.1").display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Writes a page for labctl and every visible subcommand, each before its
/// own subcommands; returns the files in the order written.
fn write_pages(command: clap::Command, dir: &Path) -> io::Result<Vec<PathBuf>> {
    // Built first so each subcommand knows its full name (labctl-report-list).
    let mut command = command.disable_help_subcommand(true);
    command.build();
    let mut written = Vec::new();
    write_tree(command, dir, &mut written)?;
    Ok(written)
}

fn write_tree(command: clap::Command, dir: &Path, written: &mut Vec<PathBuf>) -> io::Result<()> {
    // Every page says it is labctl's (clap_mangen would name the verb alone).
    let source = format!("labctl {}", env!("CARGO_PKG_VERSION"));
    let page = clap_mangen::Man::new(command.clone())
        .source(source)
        .manual("labctl manual");
    written.push(page.generate_to(dir)?);
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_tree(sub.clone(), dir, written)?;
    }
    Ok(())
}
