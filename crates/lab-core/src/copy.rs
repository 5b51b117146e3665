//! `labctl cp`: files between this machine and the lab's nodes, scp-style.
//!
//! `NODE:PATH` names a path on one node, `@all:PATH` the same path on every
//! node; anything else is a path on this machine (write `./a:b` for a local
//! name with a colon). Everything that can be known before a byte moves is
//! checked first (nodes exist, local sources exist, directories need
//! `recursive`), so bad input changes nothing. Then every node is served in
//! parallel over its own SSH session, one file after another, each file
//! checked by sha256 before it takes its name (see `lab_remote::transfer`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use futures::future::join_all;
use lab_remote::ssh::{self, SshSession};
use lab_remote::transfer::{self, RemoteKind, TransferError};
use serde::Serialize;

use crate::lab::{connect_pinned, Lab, LabError};

/// Version of `cp --json`'s layout.
pub const COPY_SCHEMA: u32 = 1;

pub use lab_model::copy_location::CopyLocation;

/// Why a copy did not start, or failed.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The request cannot work as given; nothing was copied.
    #[error("{0}")]
    BadInput(String),
    /// The lab is not up, or a node does not exist.
    #[error(transparent)]
    Lab(#[from] LabError),
}

impl CopyError {
    /// Whether the user's request is at fault (exit status 2).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            CopyError::BadInput(_) | CopyError::Lab(LabError::UnknownNode { .. } | LabError::Config(_))
        )
    }
}

/// Receives how far each node's transfers got.
pub trait CopyProgress: Send + Sync {
    /// Node `node` will move about `bytes` bytes.
    fn planned(&self, node: &str, bytes: u64);
    /// `bytes` more crossed for `node`.
    fn advanced(&self, node: &str, bytes: u64);
    /// `node` is finished (successfully or not).
    fn finished(&self, node: &str);
}

/// Shows nothing.
pub struct NoProgress;

impl CopyProgress for NoProgress {
    fn planned(&self, _: &str, _: u64) {}
    fn advanced(&self, _: &str, _: u64) {}
    fn finished(&self, _: &str) {}
}

/// One file copied and checked.
#[derive(Debug, Clone, Serialize)]
pub struct CopiedFile {
    /// The node on the other side.
    pub node: String,
    /// Where it came from (`NODE:PATH` or a local path).
    pub from: String,
    /// Where it went.
    pub to: String,
    /// Its size.
    pub bytes: u64,
    /// Its sha256, the same on both sides.
    pub sha256: String,
    /// Its permission bits, octal.
    pub mode: String,
}

/// A node whose part of the copy failed.
#[derive(Debug, Clone, Serialize)]
pub struct CopyFailure {
    /// The node.
    pub node: String,
    /// What went wrong, one line.
    pub error: String,
}

/// What a copy did.
#[derive(Debug, Clone, Serialize)]
pub struct CopyReport {
    /// [`COPY_SCHEMA`].
    pub schema: u32,
    /// The files, in the order they finished per node.
    pub files: Vec<CopiedFile>,
    /// Nodes whose part failed (the others' files are complete).
    pub failed: Vec<CopyFailure>,
    /// Wall time, seconds.
    pub seconds: f64,
}

impl CopyReport {
    /// Bytes moved in all.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).sum()
    }
}

/// A local file or directory to send, as found before the copy.
#[derive(Debug, Clone)]
struct LocalSource {
    path: PathBuf,
    /// Directories to create (relative, with modes), parents first; empty for a file.
    dirs: Vec<(PathBuf, u32)>,
    /// Files (relative to `path` for a directory; empty relative path for a
    /// file), with modes and sizes.
    files: Vec<(PathBuf, u32, u64)>,
    is_dir: bool,
}

impl LocalSource {
    fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.2).sum()
    }
}

fn name_of(path: &Path) -> Result<String, CopyError> {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| CopyError::BadInput(format!("{}: has no file name to copy under", path.display())))
}

fn remote_name_of(path: &str) -> String {
    Path::new(path.trim_end_matches('/'))
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.to_string())
}

fn join_remote(dir: &str, name: &str) -> String {
    if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// Reads a local source before anything moves.
fn inspect_local(path: &Path, recursive: bool) -> Result<LocalSource, CopyError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| CopyError::BadInput(format!("{}: {e}", path.display())))?;
    let mode = |m: &std::fs::Metadata| m.permissions().mode() & 0o7777;
    if meta.is_file() {
        return Ok(LocalSource {
            path: path.to_path_buf(),
            dirs: Vec::new(),
            files: vec![(PathBuf::new(), mode(&meta), meta.len())],
            is_dir: false,
        });
    }
    if !meta.is_dir() {
        return Err(CopyError::BadInput(format!(
            "{}: not a regular file or directory",
            path.display()
        )));
    }
    if !recursive {
        return Err(CopyError::BadInput(format!(
            "{}: is a directory (add -r to copy it and what it holds)",
            path.display()
        )));
    }
    let mut source = LocalSource {
        path: path.to_path_buf(),
        dirs: vec![(PathBuf::new(), mode(&meta))],
        files: Vec::new(),
        is_dir: true,
    };
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        let dir = path.join(&rel);
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .map_err(|e| CopyError::BadInput(format!("{}: {e}", dir.display())))?
            .collect::<Result<_, _>>()
            .map_err(|e| CopyError::BadInput(format!("{}: {e}", dir.display())))?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let child = rel.join(entry.file_name());
            let meta = std::fs::metadata(entry.path())
                .map_err(|e| CopyError::BadInput(format!("{}: {e}", entry.path().display())))?;
            if meta.is_dir() {
                source.dirs.push((child.clone(), mode(&meta)));
                pending.push(child);
            } else if meta.is_file() {
                source.files.push((child, mode(&meta), meta.len()));
            }
        }
    }
    source.dirs.sort();
    Ok(source)
}

impl Lab {
    /// Copies `sources` to `dest` (see the module's doc). Bad input is an
    /// error before anything moves; a node that fails is reported in the
    /// result while the other nodes finish.
    pub async fn copy(
        &self,
        sources: &[CopyLocation],
        dest: &CopyLocation,
        recursive: bool,
        progress: &dyn CopyProgress,
    ) -> Result<CopyReport, CopyError> {
        if sources.is_empty() {
            return Err(CopyError::BadInput("nothing to copy: give at least one source".into()));
        }
        let started = Instant::now();
        let state = self.state()?;
        let every: Vec<String> = state.nodes.iter().map(|n| n.name.clone()).collect();
        let check_node = |node: &str| self.node_state(&state, node).map(|_| ());
        for location in sources.iter().chain([dest]) {
            if let CopyLocation::Node { node, .. } = location {
                check_node(node)?;
            }
        }
        let key = Arc::new(ssh::load_or_create_key(&self.dir.ssh_key()).map_err(LabError::from)?);
        let connect = |node: String| {
            let key = key.clone();
            let state = &state;
            async move {
                let recorded = state.node(&node).expect("nodes checked above");
                let session = connect_pinned(recorded, key, std::time::Duration::from_secs(20)).await;
                (node, session)
            }
        };
        let outcomes = if dest.is_local() {
            if sources.iter().any(CopyLocation::is_local) {
                return Err(CopyError::BadInput(
                    "both sides are on this machine: name a node as `NODE:PATH` or `@all:PATH`".into(),
                ));
            }
            let CopyLocation::Local(dest) = dest else {
                unreachable!()
            };
            // Per node, the paths to fetch from it.
            let mut wanted: Vec<(String, Vec<String>)> = Vec::new();
            let several_nodes = sources.iter().any(|s| matches!(s, CopyLocation::Every { .. }));
            for source in sources {
                let (nodes, path) = match source {
                    CopyLocation::Node { node, path } => (vec![node.clone()], path.clone()),
                    CopyLocation::Every { path } => (every.clone(), path.clone()),
                    CopyLocation::Local(_) => unreachable!(),
                };
                for node in nodes {
                    match wanted.iter_mut().find(|(n, _)| *n == node) {
                        Some((_, paths)) => paths.push(path.clone()),
                        None => wanted.push((node, vec![path.clone()])),
                    }
                }
            }
            let several_files = sources.len() > 1 || several_nodes;
            if several_files && !dest.is_dir() {
                return Err(CopyError::BadInput(format!(
                    "{}: not a directory (copying {} needs an existing directory to put them in)",
                    dest.display(),
                    if several_nodes {
                        "from every node"
                    } else {
                        "several files"
                    }
                )));
            }
            join_all(wanted.into_iter().map(|(node, paths)| {
                let connect = &connect;
                async move {
                    let (node, session) = connect(node).await;
                    let result = match session {
                        Ok(session) => {
                            let r = fetch_from(&session, &paths, dest, several_nodes, recursive, progress).await;
                            session.close().await;
                            r
                        }
                        Err(e) => Err(e.to_string()),
                    };
                    progress.finished(&node);
                    (node, result)
                }
            }))
            .await
        } else {
            let local: Vec<&Path> = sources
                .iter()
                .map(|s| match s {
                    CopyLocation::Local(p) => Ok(p.as_path()),
                    _ => Err(CopyError::BadInput(
                        "copies between nodes go through this machine: `labctl cp NODE:PATH ./` then `labctl cp ./FILE OTHER:PATH`"
                            .into(),
                    )),
                })
                .collect::<Result<_, _>>()?;
            let inspected: Vec<LocalSource> = local
                .iter()
                .map(|p| inspect_local(p, recursive))
                .collect::<Result<_, _>>()?;
            for source in &inspected {
                name_of(&source.path)?;
            }
            let (nodes, path) = match dest {
                CopyLocation::Node { node, path } => (vec![node.clone()], path.clone()),
                CopyLocation::Every { path } => (every.clone(), path.clone()),
                CopyLocation::Local(_) => unreachable!(),
            };
            let inspected = &inspected;
            join_all(nodes.into_iter().map(|node| {
                let connect = &connect;
                let path = path.clone();
                async move {
                    let (node, session) = connect(node).await;
                    let result = match session {
                        Ok(session) => {
                            let r = send_to(&session, inspected, &path, progress).await;
                            session.close().await;
                            r
                        }
                        Err(e) => Err(e.to_string()),
                    };
                    progress.finished(&node);
                    (node, result)
                }
            }))
            .await
        };
        let mut report = CopyReport {
            schema: COPY_SCHEMA,
            files: Vec::new(),
            failed: Vec::new(),
            seconds: 0.0,
        };
        for (node, outcome) in outcomes {
            match outcome {
                Ok(files) => report.files.extend(files),
                Err(error) => report.failed.push(CopyFailure { node, error }),
            }
        }
        report.seconds = started.elapsed().as_secs_f64();
        Ok(report)
    }
}

/// Sends every local source to `dest` on one node.
async fn send_to(
    session: &SshSession,
    sources: &[LocalSource],
    dest: &str,
    progress: &dyn CopyProgress,
) -> Result<Vec<CopiedFile>, String> {
    let node = session.node().to_string();
    let fail = |e: TransferError| e.to_string();
    progress.planned(&node, sources.iter().map(LocalSource::bytes).sum());
    let dest_kind = transfer::remote_kind(session, dest).await.map_err(fail)?;
    // A device or socket is not replaced by a file (a rename over
    // /dev/null would do just that).
    if dest_kind == RemoteKind::Other {
        return Err(format!("node `{node}`: {dest}: not a regular file or directory"));
    }
    let into_dir = dest_kind == RemoteKind::Dir;
    if !into_dir && sources.len() > 1 {
        return Err(format!(
            "node `{node}`: {dest}: not a directory (copying several files needs one)"
        ));
    }
    if !into_dir && dest.ends_with('/') {
        return Err(format!("node `{node}`: {dest}: no such directory"));
    }
    let advance = |bytes: u64| progress.advanced(&node, bytes);
    let mut copied = Vec::new();
    for source in sources {
        let name = name_of(&source.path).map_err(|e| e.to_string())?;
        let target = if into_dir {
            join_remote(dest, &name)
        } else {
            dest.to_string()
        };
        if source.is_dir {
            let dirs: Vec<(String, u32)> = source
                .dirs
                .iter()
                .map(|(rel, mode)| (remote_join_rel(&target, rel), *mode))
                .collect();
            transfer::make_remote_dirs(session, &dirs).await.map_err(fail)?;
        }
        for (rel, mode, _) in &source.files {
            let local = if rel.as_os_str().is_empty() {
                source.path.clone()
            } else {
                source.path.join(rel)
            };
            let remote = remote_join_rel(&target, rel);
            let moved = transfer::send_file(session, &local, &remote, *mode, &advance)
                .await
                .map_err(fail)?;
            copied.push(CopiedFile {
                node: node.clone(),
                from: local.display().to_string(),
                to: format!("{node}:{remote}"),
                bytes: moved.bytes,
                sha256: moved.sha256,
                mode: format!("{:o}", moved.mode),
            });
        }
    }
    Ok(copied)
}

fn remote_join_rel(base: &str, rel: &Path) -> String {
    if rel.as_os_str().is_empty() {
        base.to_string()
    } else {
        join_remote(base, &rel.display().to_string())
    }
}

/// Fetches `paths` from one node into `dest`; with `per_node`, into
/// `dest/NODE/`.
async fn fetch_from(
    session: &SshSession,
    paths: &[String],
    dest: &Path,
    per_node: bool,
    recursive: bool,
    progress: &dyn CopyProgress,
) -> Result<Vec<CopiedFile>, String> {
    let node = session.node().to_string();
    let fail = |e: TransferError| e.to_string();
    let dest_dir = if per_node { dest.join(&node) } else { dest.to_path_buf() };
    if per_node {
        std::fs::create_dir_all(&dest_dir).map_err(|e| format!("{}: {e}", dest_dir.display()))?;
    }
    let into_dir = dest_dir.is_dir();
    // Everything to fetch, found before the first byte moves.
    // Directories with the node's modes, where known (set once their files
    // are in, so a read-only directory does not refuse its own files).
    let mut dirs: Vec<(PathBuf, Option<u32>)> = Vec::new();
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    let mut planned = 0u64;
    for path in paths {
        let target = if into_dir {
            dest_dir.join(remote_name_of(path))
        } else {
            dest_dir.clone()
        };
        match transfer::remote_kind(session, path).await.map_err(fail)? {
            RemoteKind::File(size) => {
                planned += size;
                files.push((path.clone(), target));
            }
            RemoteKind::Dir if recursive => {
                dirs.push((target.clone(), None));
                for entry in transfer::remote_tree(session, path).await.map_err(fail)? {
                    let local = target.join(&entry.path);
                    match entry.kind {
                        'd' => dirs.push((local, Some(entry.mode))),
                        'f' => {
                            planned += entry.bytes;
                            files.push((join_remote(path, &entry.path), local));
                        }
                        // Links, sockets and devices are not files to copy.
                        _ => {}
                    }
                }
            }
            RemoteKind::Dir => return Err(format!("node `{node}`: {path}: is a directory (add -r)")),
            RemoteKind::Other => return Err(format!("node `{node}`: {path}: not a regular file or directory")),
            RemoteKind::Missing => return Err(format!("node `{node}`: {path}: no such file or directory")),
        }
    }
    progress.planned(&node, planned);
    for (dir, _) in &dirs {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let advance = |bytes: u64| progress.advanced(&node, bytes);
    let mut copied = Vec::new();
    for (remote, local) in files {
        let moved = transfer::fetch_file(session, &remote, &local, &advance)
            .await
            .map_err(fail)?;
        copied.push(CopiedFile {
            node: node.clone(),
            from: format!("{node}:{remote}"),
            to: local.display().to_string(),
            bytes: moved.bytes,
            sha256: moved.sha256,
            mode: format!("{:o}", moved.mode),
        });
    }
    use std::os::unix::fs::PermissionsExt;
    for (dir, mode) in dirs.iter().rev() {
        if let Some(mode) = mode {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(*mode))
                .map_err(|e| format!("{}: {e}", dir.display()))?;
        }
    }
    Ok(copied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_copy_locations_read_like_scp() {
        assert_eq!(
            CopyLocation::parse("server:/tmp/x"),
            CopyLocation::Node {
                node: "server".into(),
                path: "/tmp/x".into()
            }
        );
        assert_eq!(
            CopyLocation::parse("@all:/opt/bin/"),
            CopyLocation::Every {
                path: "/opt/bin/".into()
            }
        );
        assert_eq!(
            CopyLocation::parse("client:"),
            CopyLocation::Node {
                node: "client".into(),
                path: ".".into()
            }
        );
        assert_eq!(CopyLocation::parse("./a:b"), CopyLocation::Local("./a:b".into()));
        assert_eq!(CopyLocation::parse("/tmp/a:b"), CopyLocation::Local("/tmp/a:b".into()));
        assert_eq!(CopyLocation::parse("plain"), CopyLocation::Local("plain".into()));
        assert_eq!(CopyLocation::parse(":x"), CopyLocation::Local(":x".into()));
    }

    #[test]
    fn test_local_sources_are_checked_before_anything_moves() {
        let base = std::env::temp_dir().join(format!("labctl-copy-test-{}", std::process::id()));
        std::fs::create_dir_all(base.join("tree/sub")).unwrap();
        std::fs::write(base.join("tree/a"), b"aa").unwrap();
        std::fs::write(base.join("tree/sub/b"), b"bbb").unwrap();

        let missing = inspect_local(&base.join("nope"), false).unwrap_err().to_string();
        assert!(
            missing.contains("nope") && missing.contains("No such file"),
            "{missing}"
        );
        let dir = inspect_local(&base.join("tree"), false).unwrap_err().to_string();
        assert!(dir.contains("is a directory (add -r"), "{dir}");

        let tree = inspect_local(&base.join("tree"), true).unwrap();
        assert!(tree.is_dir);
        assert_eq!(tree.bytes(), 5);
        let dirs: Vec<_> = tree.dirs.iter().map(|d| d.0.display().to_string()).collect();
        assert_eq!(dirs, ["", "sub"]);
        let mut files: Vec<_> = tree.files.iter().map(|f| f.0.display().to_string()).collect();
        files.sort();
        assert_eq!(files, ["a", "sub/b"]);
        std::fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn test_remote_paths_join_without_doubled_slashes() {
        assert_eq!(join_remote("/opt/", "x"), "/opt/x");
        assert_eq!(join_remote("/opt", "x"), "/opt/x");
        assert_eq!(remote_name_of("/var/log/"), "log");
        assert_eq!(remote_join_rel("/opt/t", Path::new("")), "/opt/t");
        assert_eq!(remote_join_rel("/opt/t", Path::new("sub/b")), "/opt/t/sub/b");
    }
}
