//! What the image cache holds, and removing what no lab needs: every
//! recipe change (a new labctl, `LAB_MIRROR`, a lab's `packages:`) builds
//! an image of its own (about 0.5 GiB) beside the old ones, which nothing
//! else removes. `labctl image ls` and `labctl image prune` are built on this.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::error::{io_err, ImageError};

/// One built image in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedImage {
    /// Its key (the recipe hash), also its directory's name.
    pub hash: String,
    /// Its directory.
    pub dir: PathBuf,
    /// Bytes on disk (the kernel, the root filesystem, the build's facts).
    pub bytes: u64,
    /// When it was built (its directory's modification time).
    pub built: Option<SystemTime>,
    /// The guest kernel's release (`image.env`), when recorded.
    pub kernel: Option<String>,
    /// The Debian packages it was built with (`image.env`).
    pub packages: Vec<String>,
}

/// What [`prune`] removed.
#[derive(Debug, Default)]
pub struct Pruned {
    /// The images removed.
    pub images: Vec<CachedImage>,
    /// Other files removed: build logs of images that are not in the
    /// cache, and the work directories of builds that were cut off.
    pub leftovers: Vec<PathBuf>,
    /// Bytes freed, all of it.
    pub bytes: u64,
}

fn images_dir(cache: &Path) -> PathBuf {
    cache.join("images")
}

/// Every image in the cache at `cache`, by key. An image directory without
/// its kernel and root filesystem is not listed (a build moves a finished
/// image in whole).
pub fn list(cache: &Path) -> Vec<CachedImage> {
    let Ok(entries) = fs::read_dir(images_dir(cache)) else {
        return Vec::new();
    };
    let mut images: Vec<CachedImage> = entries
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .filter(|dir| dir.join("vmlinux").is_file() && dir.join("base.cpio").is_file())
        .map(|dir| {
            let env = fs::read_to_string(dir.join("image.env")).unwrap_or_default();
            let field = |name: &str| {
                env.lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
                    .map(str::to_string)
            };
            CachedImage {
                hash: dir.file_name().unwrap_or_default().to_string_lossy().into_owned(),
                bytes: size_of(&dir),
                built: fs::metadata(&dir).and_then(|m| m.modified()).ok(),
                kernel: field("LAB_IMAGE_KERNEL"),
                packages: field("LAB_IMAGE_PACKAGES")
                    .map(|p| p.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect())
                    .unwrap_or_default(),
                dir,
            }
        })
        .collect();
    images.sort_by(|a, b| a.hash.cmp(&b.hash));
    images
}

/// Removes from the cache at `cache` every image whose key is not in
/// `keep`, the build logs of images no longer there (unless kept: a failed
/// build's log of a recipe still in use), and what builds that were cut off
/// left. `dry_run`: only says what it would remove. It holds the cache's
/// build lock meanwhile; while another labctl builds an image it refuses
/// rather than wait.
pub fn prune(cache: &Path, keep: &BTreeSet<String>, dry_run: bool) -> Result<Pruned, ImageError> {
    let images = images_dir(cache);
    let mut pruned = Pruned::default();
    if !images.is_dir() {
        return Ok(pruned);
    }
    let lock_path = images.join(".build.lock");
    let lock = fs::File::create(&lock_path).map_err(io_err(&lock_path))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            return Err(ImageError::Io {
                path: lock_path,
                source: std::io::Error::other(
                    "another labctl is building an image (it holds this lock); prune once its `up` is past the image",
                ),
            })
        }
        Err(fs::TryLockError::Error(e)) => {
            return Err(ImageError::Io {
                path: lock_path,
                source: e,
            })
        }
    }
    let present = list(cache);
    for image in present.iter().filter(|i| !keep.contains(&i.hash)) {
        if !dry_run {
            fs::remove_dir_all(&image.dir).map_err(io_err(&image.dir))?;
        }
        pruned.bytes += image.bytes;
        pruned.images.push(image.clone());
    }
    let remaining: BTreeSet<&str> = present
        .iter()
        .filter(|i| keep.contains(&i.hash))
        .map(|i| i.hash.as_str())
        .collect();
    let entries = fs::read_dir(&images).map_err(io_err(&images))?;
    let mut leftovers: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|path| {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            match name.strip_suffix(".build.log") {
                Some(hash) => !remaining.contains(hash) && !keep.contains(hash),
                // `.build-<key>-<pid>`: with the lock held, no build is running.
                None => name.starts_with(".build-") && path.is_dir(),
            }
        })
        .collect();
    leftovers.sort();
    for path in &leftovers {
        pruned.bytes += size_of(path);
        if !dry_run {
            let removed = if path.is_dir() {
                fs::remove_dir_all(path)
            } else {
                fs::remove_file(path)
            };
            removed.map_err(io_err(path))?;
        }
    }
    pruned.leftovers = leftovers;
    Ok(pruned)
}

/// Bytes under `path` (a file, or a directory's files, recursively; what
/// cannot be read counts nothing).
fn size_of(path: &Path) -> u64 {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    fs::read_dir(path)
        .map(|entries| entries.filter_map(Result::ok).map(|e| size_of(&e.path())).sum())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(cache: &Path, hash: &str, rootfs: usize) {
        let dir = images_dir(cache).join(hash);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("vmlinux"), vec![0u8; 100]).unwrap();
        fs::write(dir.join("base.cpio"), vec![0u8; rootfs]).unwrap();
        fs::write(
            dir.join("image.env"),
            "LAB_IMAGE_SUITE=bookworm\nLAB_IMAGE_KERNEL=6.1.0-57-amd64\nLAB_IMAGE_PACKAGES=busybox,rdma-core\n",
        )
        .unwrap();
        fs::write(images_dir(cache).join(format!("{hash}.build.log")), "image: done\n").unwrap();
    }

    fn temp(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("labctl-image-cache-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(images_dir(&dir)).unwrap();
        dir
    }

    #[test]
    fn test_the_cache_lists_built_images_with_their_facts() {
        let cache = temp("list");
        image(&cache, "bbbb", 1000);
        image(&cache, "aaaa", 10);
        // A cut-off build's work directory and a failed build's log are no images.
        fs::create_dir_all(images_dir(&cache).join(".build-cccc-42/out")).unwrap();
        fs::write(images_dir(&cache).join("dddd.build.log"), "E: failed\n").unwrap();
        let listed = list(&cache);
        let seen: Vec<(&str, u64)> = listed.iter().map(|i| (i.hash.as_str(), i.bytes)).collect();
        let env_len = fs::metadata(images_dir(&cache).join("aaaa/image.env")).unwrap().len();
        assert_eq!(seen, [("aaaa", 110 + env_len), ("bbbb", 1100 + env_len)]);
        assert_eq!(listed[0].kernel.as_deref(), Some("6.1.0-57-amd64"));
        assert_eq!(listed[0].packages, ["busybox", "rdma-core"]);
        assert!(listed[0].built.is_some());
        fs::remove_dir_all(cache).unwrap();
    }

    #[test]
    fn test_prune_removes_what_is_not_kept_and_a_dry_run_nothing() {
        let cache = temp("prune");
        image(&cache, "kept", 10);
        image(&cache, "old1", 1000);
        image(&cache, "old2", 2000);
        fs::create_dir_all(images_dir(&cache).join(".build-old3-42/out")).unwrap();
        fs::write(images_dir(&cache).join(".build-old3-42/out/base.cpio"), vec![0u8; 500]).unwrap();
        // A failed build of a kept key keeps its log; another's goes.
        fs::write(images_dir(&cache).join("kept2.build.log"), "E: failed\n").unwrap();
        fs::write(images_dir(&cache).join("gone.build.log"), "E: failed\n").unwrap();
        let keep: BTreeSet<String> = ["kept", "kept2"].map(String::from).into();

        let dry = prune(&cache, &keep, true).unwrap();
        assert_eq!(dry.images.len(), 2);
        assert_eq!(list(&cache).len(), 3, "a dry run removes nothing");

        let pruned = prune(&cache, &keep, false).unwrap();
        let removed: Vec<&str> = pruned.images.iter().map(|i| i.hash.as_str()).collect();
        assert_eq!(removed, ["old1", "old2"]);
        let names: Vec<String> = pruned
            .leftovers
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [".build-old3-42", "gone.build.log", "old1.build.log", "old2.build.log"]
        );
        assert_eq!(pruned.bytes, dry.bytes);
        assert!(pruned.bytes >= 3000 + 500);
        let left: Vec<String> = fs::read_dir(images_dir(&cache))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        assert_eq!(left, [".build.lock", "kept", "kept.build.log", "kept2.build.log"]);
        fs::remove_dir_all(cache).unwrap();
    }

    #[test]
    fn test_prune_refuses_while_a_build_holds_the_lock() {
        let cache = temp("locked");
        image(&cache, "old", 10);
        let held = fs::File::create(images_dir(&cache).join(".build.lock")).unwrap();
        held.lock().unwrap();
        let err = prune(&cache, &BTreeSet::new(), false).unwrap_err().to_string();
        assert!(err.contains("another labctl is building an image"), "{err}");
        assert_eq!(list(&cache).len(), 1);
        drop(held);
        assert_eq!(prune(&cache, &BTreeSet::new(), false).unwrap().images.len(), 1);
        fs::remove_dir_all(cache).unwrap();
    }
}
