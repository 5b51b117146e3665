//! The node image: built from Debian packages by `provisioning/image/build.sh`,
//! cached under the user's cache directory keyed by a hash of the recipe.
//!
//! The recipe is compiled into labctl, so the binary works from any directory
//! and the cache key changes exactly when the recipe does. A lab's own
//! `packages:` are part of the key too (as a set: sorted, without repeats),
//! so such a lab gets an image of its own while the default image (no
//! packages) keeps the key it always had.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, BufReader};

use lab_state::set_mode;

mod cache;
mod error;
pub use cache::{list, prune, CachedImage, Pruned};
use error::io_err;
pub use error::ImageError;

/// The recipe files, relative to `provisioning/image/`, with their contents.
pub const RECIPE: &[(&str, &str)] = &[
    ("build.sh", include_str!("../../../provisioning/image/build.sh")),
    (
        "rootfs/etc/fstab",
        include_str!("../../../provisioning/image/rootfs/etc/fstab"),
    ),
    (
        "rootfs/etc/inittab",
        include_str!("../../../provisioning/image/rootfs/etc/inittab"),
    ),
    (
        "rootfs/etc/lab/boot.sh",
        include_str!("../../../provisioning/image/rootfs/etc/lab/boot.sh"),
    ),
    (
        "rootfs/etc/lab/README",
        include_str!("../../../provisioning/image/rootfs/etc/lab/README"),
    ),
    (
        "rootfs/etc/ssh/sshd_config.d/lab.conf",
        include_str!("../../../provisioning/image/rootfs/etc/ssh/sshd_config.d/lab.conf"),
    ),
    (
        "rootfs/usr/local/lib/lab/agent-run",
        include_str!("../../../provisioning/image/rootfs/usr/local/lib/lab/agent-run"),
    ),
];

/// A built image in the cache.
#[derive(Debug, Clone)]
pub struct NodeImage {
    /// The recipe hash (cache key).
    pub hash: String,
    /// The kernel.
    pub kernel: PathBuf,
    /// The root filesystem as an uncompressed cpio initramfs.
    pub initramfs: PathBuf,
}

/// A lab's packages as the image sees them: sorted, each once.
pub fn package_set(packages: &[String]) -> Vec<String> {
    let mut set = packages.to_vec();
    set.sort();
    set.dedup();
    set
}

/// sha256 over the recipe's names and contents (and the build's environment
/// and the lab's `packages`), shortened: the image's cache key. Without
/// packages it is exactly the key of the plain recipe, so adding the
/// `packages:` feature did not rebuild anyone's default image.
pub fn recipe_hash(packages: &[String]) -> String {
    let mut h = Sha256::new();
    for (name, text) in RECIPE {
        h.update(name.as_bytes());
        h.update([0]);
        h.update(text.as_bytes());
        h.update([0]);
    }
    // build.sh reads these; an image built with them is a different image.
    for var in ["LAB_SUITE", "LAB_MIRROR", "LAB_EXTRA_PACKAGES"] {
        h.update(var.as_bytes());
        h.update(std::env::var(var).unwrap_or_default().as_bytes());
        h.update([0]);
    }
    let packages = package_set(packages);
    if !packages.is_empty() {
        h.update(b"packages");
        h.update(packages.join(",").as_bytes());
        h.update([0]);
    }
    hex::encode(&h.finalize()[..8])
}

/// `LAB_EXTRA_PACKAGES` as build.sh gets it: the caller's own value (an
/// ad-hoc experiment) followed by the lab's packages, comma-separated.
fn extra_packages_env(from_env: Option<&str>, packages: &[String]) -> String {
    from_env
        .filter(|v| !v.trim().is_empty())
        .map(str::to_string)
        .into_iter()
        .chain(package_set(packages))
        .collect::<Vec<_>>()
        .join(",")
}

/// What a failed build said about why: apt's and build.sh's error lines,
/// without mmdebstrap's wrap-up lines that only repeat the failed command;
/// else the last lines of the log.
fn failure_lines(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let errors: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("E: ") || l.starts_with("build.sh: "))
        .collect();
    let own: Vec<&str> = errors
        .iter()
        .copied()
        .filter(|l| !l.starts_with("E: setup failed") && !l.starts_with("E: mmdebstrap failed"))
        .collect();
    match (own.is_empty(), errors.is_empty()) {
        (false, _) => own.join("\n"),
        (true, false) => errors.join("\n"),
        (true, true) => lab_state::text::file_tail(log, 15),
    }
}

/// The cache root: `LABCTL_CACHE_DIR`, else `~/.cache/labctl`.
pub fn cache_root() -> PathBuf {
    std::env::var_os("LABCTL_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| dirs::cache_dir().map(|d| d.join("labctl")))
        .unwrap_or_else(|| PathBuf::from("/var/cache/labctl"))
}

/// The image for the current recipe and `packages`, if it is already built.
pub fn cached(cache: &Path, packages: &[String]) -> Option<NodeImage> {
    let hash = recipe_hash(packages);
    let dir = cache.join("images").join(&hash);
    let image = NodeImage {
        kernel: dir.join("vmlinux"),
        initramfs: dir.join("base.cpio"),
        hash,
    };
    (image.kernel.is_file() && image.initramfs.is_file()).then_some(image)
}

/// Returns the cached image with `packages` added to the recipe's, building
/// it first when there is none. `progress` gets the recipe's own progress
/// lines. A failed build leaves its log and nothing else.
pub async fn ensure(
    cache: &Path,
    packages: &[String],
    progress: &(dyn Fn(&str) + Sync),
) -> Result<NodeImage, ImageError> {
    if let Some(image) = cached(cache, packages) {
        return Ok(image);
    }
    for (tool, package) in [("mmdebstrap", "mmdebstrap"), ("cpio", "cpio"), ("xz", "xz-utils")] {
        if which(tool).is_none() {
            return Err(ImageError::MissingTool { tool, package });
        }
    }
    let images = cache.join("images");
    fs::create_dir_all(&images).map_err(io_err(&images))?;
    // One builder at a time; a second labctl waits and then finds the image.
    let lock_path = images.join(".build.lock");
    let lock = fs::File::create(&lock_path).map_err(io_err(&lock_path))?;
    let lock = tokio::task::spawn_blocking(move || lock.lock().map(|_| lock))
        .await
        .expect("lock task")
        .map_err(io_err(&lock_path))?;
    if let Some(image) = cached(cache, packages) {
        return Ok(image);
    }

    let hash = recipe_hash(packages);
    let work = images.join(format!(".build-{hash}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&work);
    let recipe_dir = work.join("recipe");
    for (name, text) in RECIPE {
        let path = recipe_dir.join(name);
        fs::create_dir_all(path.parent().expect("recipe paths have a parent")).map_err(io_err(&path))?;
        fs::write(&path, text).map_err(io_err(&path))?;
        let exec = name.ends_with(".sh") || name.ends_with("agent-run");
        set_mode(&path, if exec { 0o755 } else { 0o644 }).map_err(|e| ImageError::Io {
            path: path.clone(),
            source: io::Error::other(e.to_string()),
        })?;
    }
    let out = work.join("out");
    let log_path = images.join(format!("{hash}.build.log"));
    let log = fs::File::create(&log_path).map_err(io_err(&log_path))?;
    let mut child = tokio::process::Command::new("bash")
        .arg(recipe_dir.join("build.sh"))
        .arg(&out)
        .env(
            "LAB_EXTRA_PACKAGES",
            extra_packages_env(std::env::var("LAB_EXTRA_PACKAGES").ok().as_deref(), packages),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log.try_clone().map_err(io_err(&log_path))?)
        .kill_on_drop(true)
        .spawn()
        .map_err(io_err(&recipe_dir))?;
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut log_writer = log;
    while let Some(line) = lines.next_line().await.map_err(io_err(&log_path))? {
        use std::io::Write;
        let _ = writeln!(log_writer, "{line}");
        if let Some(step) = line.strip_prefix("image: ") {
            progress(step);
        }
    }
    let status = child.wait().await.map_err(io_err(&recipe_dir))?;
    if !status.success() {
        let _ = fs::remove_dir_all(&work);
        let fix = if packages.is_empty() {
            "read the full log; a failed download is worth a retry (`labctl up` again), and a recipe change needs fixing in provisioning/image/".to_string()
        } else {
            format!(
                "check the names in `packages:` of labs.yaml ({}): each must be a package of the node image's Debian suite (bookworm); look one up with `apt-cache policy NAME` on a Debian 12 machine or at https://packages.debian.org/bookworm/NAME",
                package_set(packages).join(", ")
            )
        };
        return Err(ImageError::BuildFailed {
            status: status.code().map_or_else(|| "signal".into(), |c| c.to_string()),
            said: failure_lines(&log_path),
            fix,
            log: log_path,
        });
    }
    let final_dir = images.join(&hash);
    let _ = fs::remove_dir_all(&final_dir);
    fs::rename(&out, &final_dir).map_err(io_err(&final_dir))?;
    let _ = fs::remove_dir_all(&work);
    drop(lock);
    Ok(cached(cache, packages).expect("image just built"))
}

/// Finds `tool` on PATH.
pub fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(tool))
        .find(|candidate| candidate.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_recipe_lists_every_file_under_provisioning_image() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../provisioning/image");
        let mut on_disk = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    on_disk.push(path.strip_prefix(&root).unwrap().to_string_lossy().into_owned());
                }
            }
        }
        on_disk.sort();
        let mut embedded: Vec<String> = RECIPE.iter().map(|(n, _)| n.to_string()).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk, "add new recipe files to image::RECIPE");
    }

    #[test]
    fn test_recipe_hash_is_stable_and_short() {
        assert_eq!(recipe_hash(&[]), recipe_hash(&[]));
        assert_eq!(recipe_hash(&[]).len(), 16);
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    /// The key as it was before labs had `packages:`: a lab without packages
    /// must find the image every earlier labctl built.
    fn key_before_packages() -> String {
        let mut h = Sha256::new();
        for (name, text) in RECIPE {
            h.update(name.as_bytes());
            h.update([0]);
            h.update(text.as_bytes());
            h.update([0]);
        }
        for var in ["LAB_SUITE", "LAB_MIRROR", "LAB_EXTRA_PACKAGES"] {
            h.update(var.as_bytes());
            h.update(std::env::var(var).unwrap_or_default().as_bytes());
            h.update([0]);
        }
        hex::encode(&h.finalize()[..8])
    }

    #[test]
    fn test_the_default_image_keeps_its_key() {
        assert_eq!(recipe_hash(&[]), key_before_packages());
    }

    #[test]
    fn test_packages_are_part_of_the_key_as_a_set() {
        let default = recipe_hash(&[]);
        let mpi = recipe_hash(&names(&["openmpi-bin", "gcc"]));
        assert_ne!(mpi, default, "a lab with packages needs an image of its own");
        // Order and repeats do not make another image.
        assert_eq!(mpi, recipe_hash(&names(&["gcc", "openmpi-bin", "gcc"])));
        assert_ne!(mpi, recipe_hash(&names(&["gcc"])));
        // The separator cannot make two sets collide.
        assert_ne!(recipe_hash(&names(&["ab", "c"])), recipe_hash(&names(&["a", "bc"])));
    }

    #[test]
    fn test_build_sh_gets_the_lab_packages_after_the_callers_own() {
        let lab = names(&["openmpi-bin", "gcc", "gcc"]);
        assert_eq!(extra_packages_env(None, &lab), "gcc,openmpi-bin");
        assert_eq!(extra_packages_env(Some("gdb"), &lab), "gdb,gcc,openmpi-bin");
        assert_eq!(extra_packages_env(Some(" "), &[]), "");
        assert_eq!(extra_packages_env(Some("gdb"), &[]), "gdb");
    }

    #[test]
    fn test_a_failed_build_shows_apt_s_own_error() {
        let dir = std::env::temp_dir().join(format!("labctl-image-fail-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let log = dir.join("x.build.log");
        // mmdebstrap 1.3 on bookworm, asked for a package Debian does not have.
        fs::write(
            &log,
            "image: mmdebstrap bookworm (busybox,labctl-no-such-package)\n\
             I: installing remaining packages inside the chroot...\n\
             Reading package lists...\n\
             Building dependency tree...\n\
             E: Unable to locate package labctl-no-such-package\n\
             E: setup failed: E: apt-get -o Dir::Bin::dpkg=env --yes install busybox labctl-no-such-package failed\n\
             I: removing tempdir /tmp/mmdebstrap.9Rsk4F5iMb...\n\
             E: mmdebstrap failed to run\n",
        )
        .unwrap();
        assert_eq!(
            failure_lines(&log),
            "E: Unable to locate package labctl-no-such-package"
        );
        // Without error lines, the end of the log.
        fs::write(&log, "one\ntwo\n").unwrap();
        assert_eq!(failure_lines(&log).trim(), "one\ntwo");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn test_cached_requires_both_files() {
        let dir = std::env::temp_dir().join(format!("labctl-image-test-{}", std::process::id()));
        let img = dir.join("images").join(recipe_hash(&[]));
        fs::create_dir_all(&img).unwrap();
        fs::write(img.join("vmlinux"), b"k").unwrap();
        assert!(cached(&dir, &[]).is_none());
        fs::write(img.join("base.cpio"), b"i").unwrap();
        assert!(cached(&dir, &[]).is_some());
        // Another package set is another image, not this one.
        assert!(cached(&dir, &names(&["gcc"])).is_none());
        fs::remove_dir_all(dir).unwrap();
    }
}
