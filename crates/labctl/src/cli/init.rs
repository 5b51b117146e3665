//! `labctl init`: write the built-in labs out as a commented labs.yaml, the
//! starting point for a lab of one's own.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args as ClapArgs;
use lab_model::builtin::init_text;
use lab_model::DEFAULT_FILE;

use super::global::GlobalArgs;

/// Options of `init`.
#[derive(Debug, ClapArgs)]
pub struct InitArgs {
    /// Replace the file if it exists.
    #[arg(long)]
    pub force: bool,
}

/// `init` would overwrite a file without `--force` (bad input: exit 2).
#[derive(Debug, thiserror::Error)]
#[error("{} already exists; labctl init does not overwrite it\n  fix: edit it, pass --force to replace it with the built-in labs, or write elsewhere with -f FILE", path.display())]
pub struct WouldOverwrite {
    /// The file.
    pub path: PathBuf,
}

pub fn run(args: &GlobalArgs, init: &InitArgs) -> anyhow::Result<ExitCode> {
    let path = args.file.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_FILE));
    if path.exists() && !init.force {
        return Err(WouldOverwrite { path }.into());
    }
    // Beside the target, then renamed: an interrupted init leaves no half file.
    let tmp = path.with_extension("yaml.labctl-init");
    std::fs::write(&tmp, init_text()).map_err(|e| anyhow::anyhow!("writing {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow::anyhow!("writing {}: {e}", path.display())
    })?;
    println!(
        "wrote {}: lab `local` (2 QEMU nodes, the default) and `quad` (4 nodes), every field commented\n  next: labctl up   (state goes to {}/.labctl/)",
        path.display(),
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or(".".to_string(), |p| p.display().to_string())
    );
    Ok(ExitCode::SUCCESS)
}
