//! `labctl down`: remove everything of the lab; nothing to do is success.

use std::process::ExitCode;

use clap::Args as ClapArgs;

use super::{lock_wait, open_lab, Args};

/// Options of `down`.
#[derive(Debug, ClapArgs)]
pub struct DownArgs {}

pub async fn run(args: &Args, _down: &DownArgs) -> anyhow::Result<ExitCode> {
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
