//! `labctl image ls` and `labctl image prune`: the QEMU node images cached
//! under `~/.cache/labctl/images` (or `$LABCTL_CACHE_DIR/images`), which
//! labs use them, and removing the ones none needs. Each change of the
//! image recipe (a new labctl, `LAB_MIRROR`, a lab's `packages:`) builds an
//! image of its own, about half a GiB, and nothing else removes old ones.

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;

use clap::{Args as ClapArgs, Subcommand};
use lab_model::{LabsFile, ProviderKind};
use lab_providers::image::{self, CachedImage};
use lab_state::live_labs;
use serde_json::json;

use super::global::{GlobalArgs, LabsSource};
use super::table::{Align, Table};

/// Options of `image`.
#[derive(Debug, ClapArgs)]
pub struct ImageArgs {
    #[command(subcommand)]
    pub action: ImageAction,
}

/// What `image` does.
#[derive(Debug, Subcommand)]
pub enum ImageAction {
    /// List the cached node images: key, size, when built, guest kernel,
    /// and the labs that use each (labs that are up, the labs of the labs
    /// file, the built-in labs).
    Ls {
        /// Print a JSON document instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Remove the cached images no lab that is up uses and no lab of the
    /// labs file or the built-in labs would use, the build logs of images
    /// no longer there, and what interrupted builds left.
    Prune {
        /// Also remove the images the labs file's and the built-in labs would
        /// use (their next `up` builds them again); images of labs that are
        /// up are kept.
        #[arg(long)]
        all: bool,
        /// Say what would be removed, remove nothing.
        #[arg(long)]
        dry_run: bool,
        /// Print a JSON document instead of the summary.
        #[arg(long)]
        json: bool,
    },
}

/// Version of `image ls --json` and `image prune --json`.
const IMAGE_SCHEMA: u32 = 1;

pub async fn run(args: &GlobalArgs, image_args: &ImageArgs) -> anyhow::Result<ExitCode> {
    let cache = image::cache_root();
    let users = Users::find(args)?;
    match &image_args.action {
        ImageAction::Ls { json } => {
            let images = image::list(&cache);
            if *json {
                let listed: Vec<_> = images
                    .iter()
                    .map(|i| {
                        json!({
                            "image": i.hash,
                            "dir": i.dir,
                            "bytes": i.bytes,
                            "built": i.built.map(lab_state::rfc3339),
                            "kernel": i.kernel,
                            "packages": i.packages,
                            "labs_up": users.up.get(&i.hash).cloned().unwrap_or_default(),
                            "labs_file": users.file.get(&i.hash).cloned().unwrap_or_default(),
                            "labs_builtin": users.builtin.get(&i.hash).cloned().unwrap_or_default(),
                        })
                    })
                    .collect();
                println!(
                    "{}",
                    serde_json::to_string_pretty(&json!({
                        "schema": IMAGE_SCHEMA,
                        "cache": cache.join("images"),
                        "images": listed,
                    }))?
                );
                return Ok(ExitCode::SUCCESS);
            }
            if images.is_empty() {
                println!("no node image in {}", cache.join("images").display());
                return Ok(ExitCode::SUCCESS);
            }
            let mut table = Table::new(
                "",
                &[
                    ("IMAGE", Align::Left),
                    ("SIZE", Align::Right),
                    ("BUILT", Align::Left),
                    ("KERNEL", Align::Left),
                    ("USED BY", Align::Left),
                ],
            );
            for i in &images {
                table.row([
                    i.hash.clone(),
                    size_label(i.bytes),
                    i.built.map(lab_state::rfc3339).unwrap_or_else(|| "-".into()),
                    i.kernel.clone().unwrap_or_else(|| "-".into()),
                    users.describe(&i.hash),
                ]);
            }
            for line in table.lines() {
                println!("{line}");
            }
            let unused: Vec<&CachedImage> = images.iter().filter(|i| !users.keeps(&i.hash, false)).collect();
            let total: u64 = images.iter().map(|i| i.bytes).sum();
            println!(
                "\n{} image(s), {} in {}",
                images.len(),
                size_label(total),
                cache.join("images").display()
            );
            if !unused.is_empty() {
                println!(
                    "`labctl image prune` removes the {} no lab uses ({})",
                    unused.len(),
                    size_label(unused.iter().map(|i| i.bytes).sum())
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        ImageAction::Prune { all, dry_run, json } => {
            let keep: BTreeSet<String> = image::list(&cache)
                .into_iter()
                .map(|i| i.hash)
                .chain(users.file.keys().cloned())
                .chain(users.builtin.keys().cloned())
                .filter(|hash| users.keeps(hash, *all))
                .collect();
            let pruned = image::prune(&cache, &keep, *dry_run)?;
            if *json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&json!({
                        "schema": IMAGE_SCHEMA,
                        "dry_run": dry_run,
                        "removed": pruned.images.iter().map(|i| &i.hash).collect::<Vec<_>>(),
                        "leftovers": pruned.leftovers,
                        "bytes": pruned.bytes,
                        "kept": keep,
                    }))?
                );
                return Ok(ExitCode::SUCCESS);
            }
            let verb = if *dry_run { "would remove" } else { "removed" };
            for i in &pruned.images {
                println!("{verb} image {} ({})", i.hash, size_label(i.bytes));
            }
            for path in &pruned.leftovers {
                println!("{verb} {}", path.display());
            }
            let kept: Vec<String> = keep
                .iter()
                .filter(|hash| image::list(&cache).iter().any(|i| &i.hash == *hash))
                .map(|hash| format!("{hash} ({})", users.describe(hash)))
                .collect();
            println!(
                "{}: {} image(s) and {} other file(s), {}; kept {}",
                if *dry_run { "dry run" } else { "pruned" },
                pruned.images.len(),
                pruned.leftovers.len(),
                size_label(pruned.bytes),
                if kept.is_empty() {
                    "none".to_string()
                } else {
                    kept.join(", ")
                }
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Which labs use which image, by key.
struct Users {
    /// Labs that are up (the user's list of live labs), by the image their
    /// state records.
    up: BTreeMap<String, Vec<String>>,
    /// QEMU labs of the labs file, by the image their `packages:` give
    /// with this labctl's recipe.
    file: BTreeMap<String, Vec<String>>,
    /// The same of the built-in labs (`labctl up` without a labs file).
    builtin: BTreeMap<String, Vec<String>>,
    /// The labs file as messages name it.
    source: String,
}

impl Users {
    fn find(args: &GlobalArgs) -> anyhow::Result<Users> {
        let mut up: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for entry in live_labs::entries_in(&live_labs::dir()) {
            let dir = lab_state::LabDir::at(&entry.state_dir, &entry.lab);
            // Live as `down --leaked` counts it: its state holds the entry's id.
            if let Ok(Some(state)) = dir.load().map(|s| s.filter(|s| s.id == entry.id)) {
                if let Some(hash) = lab_providers::qemu::image_of(&state) {
                    up.entry(hash.to_string()).or_default().push(entry.lab.clone());
                }
            }
        }
        let by_image = |labs: LabsFile| {
            let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for lab in labs.labs.into_iter().filter(|l| l.provider == ProviderKind::Qemu) {
                found
                    .entry(image::recipe_hash(&lab.packages))
                    .or_default()
                    .push(lab.name);
            }
            found
        };
        let source = args.source();
        let (file, builtin) = match source {
            LabsSource::Builtin => (BTreeMap::new(), by_image(LabsFile::builtin())),
            LabsSource::File(_) => (
                by_image(source.load().map_err(lab_core::lab::LabError::from)?),
                by_image(LabsFile::builtin()),
            ),
        };
        Ok(Users {
            up,
            file,
            builtin,
            source: source.display(),
        })
    }

    /// Whether prune keeps image `hash`: a lab that is up uses it, or
    /// (unless `all`) a lab of the labs file or a built-in lab would.
    fn keeps(&self, hash: &str, all: bool) -> bool {
        self.up.contains_key(hash) || (!all && (self.file.contains_key(hash) || self.builtin.contains_key(hash)))
    }

    /// "e2e (up); e2e (tests/labs/e2e.yaml); local, quad (built-in labs)", or "-".
    fn describe(&self, hash: &str) -> String {
        let mut parts = Vec::new();
        if let Some(labs) = self.up.get(hash) {
            parts.push(format!("{} (up)", labs.join(", ")));
        }
        if let Some(labs) = self.file.get(hash) {
            parts.push(format!("{} ({})", labs.join(", "), self.source));
        }
        if let Some(labs) = self.builtin.get(hash) {
            parts.push(format!("{} (built-in labs)", labs.join(", ")));
        }
        if parts.is_empty() {
            "-".into()
        } else {
            parts.join("; ")
        }
    }
}

/// Bytes as the table shows them: MiB below a GiB, else GiB.
fn size_label(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let mib = bytes as f64 / MIB;
    if mib < 1024.0 {
        format!("{mib:.0} MiB")
    } else {
        format!("{:.1} GiB", mib / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users() -> Users {
        let labs = |hash: &str, names: &[&str]| (hash.to_string(), names.iter().map(|n| n.to_string()).collect());
        Users {
            up: [labs("aaaa", &["e2e"])].into(),
            file: [labs("aaaa", &["e2e"]), labs("bbbb", &["mpi", "mpi-quad"])].into(),
            builtin: [labs("dddd", &["local", "quad"])].into(),
            source: "labs.yaml".into(),
        }
    }

    #[test]
    fn prune_keeps_the_images_of_labs_up_always_and_the_files_unless_all() {
        let u = users();
        assert!(u.keeps("aaaa", false) && u.keeps("aaaa", true));
        assert!(u.keeps("bbbb", false) && !u.keeps("bbbb", true));
        assert!(u.keeps("dddd", false) && !u.keeps("dddd", true));
        assert!(!u.keeps("cccc", false));
    }

    #[test]
    fn an_image_names_its_labs() {
        let u = users();
        assert_eq!(u.describe("aaaa"), "e2e (up); e2e (labs.yaml)");
        assert_eq!(u.describe("bbbb"), "mpi, mpi-quad (labs.yaml)");
        assert_eq!(u.describe("dddd"), "local, quad (built-in labs)");
        assert_eq!(u.describe("cccc"), "-");
    }

    #[test]
    fn sizes_read_in_mib_then_gib() {
        assert_eq!(size_label(500 * 1024 * 1024), "500 MiB");
        assert_eq!(size_label(1536 * 1024 * 1024), "1.5 GiB");
    }
}
