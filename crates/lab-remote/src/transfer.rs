//! Files between this machine and a node, checked end to end.
//!
//! A file is streamed through one SSH exec channel (as scp does: the
//! channel's window, no round trip per chunk) into a hidden temporary name
//! beside its destination. The node checks the sha256 of what it received
//! against the one this machine computed, sets the mode and only then renames
//! it into place, so a failed or interrupted copy never leaves a partial file
//! under the destination's name. Fetching works the same way in the other
//! direction: the node reports the file's sha256 and mode after sending it,
//! this machine compares and renames.
//!
//! It must not decide which files go where (the orchestration crate resolves
//! `NODE:PATH` and directories); it moves one file, or lists one tree.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::command::RemoteCommand;
use crate::ssh::{SshError, SshSession};

/// Receives a file on stdin as `$1` (a temporary name), checks its sha256
/// against `$4` and its size against `$5`, sets mode `$3` and renames it to
/// `$2`. Whatever happens, the
/// temporary file is gone when it exits.
const RECEIVE: &str = r#"set -u
tmp=$1 dest=$2 mode=$3 want=$4 size=$5
dir=$(dirname -- "$dest")
[ -d "$dir" ] || { echo "$dir: no such directory" >&2; exit 1; }
[ -w "$dir" ] || { echo "$dir: permission denied for $(id -un)" >&2; exit 1; }
trap 'rm -f -- "$tmp"' EXIT
# Read back once written rather than hashed on the way in (tee): the nodes
# have one vCPU, so a tee only adds a copy.
cat > "$tmp" || exit 1
[ "$(stat -c %s -- "$tmp")" = "$size" ] || { echo "received $(stat -c %s -- "$tmp") of $size bytes" >&2; exit 1; }
got=$(sha256sum < "$tmp") || exit 1
got=${got%% *}
if [ "$got" != "$want" ]; then
  echo "content check failed: the node has sha256 $got, this machine sent $want" >&2
  exit 3
fi
chmod "$mode" "$tmp" && mv -f -- "$tmp" "$dest""#;

/// Sends file `$1` on stdout, then its sha256 and mode as the last line of
/// stderr.
const SEND: &str = r#"[ -f "$1" ] || { echo "$1: no such file" >&2; exit 1; }
[ -r "$1" ] || { echo "$1: permission denied for $(id -un)" >&2; exit 1; }
cat -- "$1" || exit 1
sum=$(sha256sum -- "$1") || exit 1
echo "labctl-sha256 ${sum%% *} $(stat -c %a -- "$1")" >&2"#;

/// What `$1` is: `dir`, `file SIZE`, `other` or `missing`.
const KIND: &str = r#"if [ -d "$1" ]; then echo dir; elif [ -f "$1" ]; then echo "file $(stat -c %s -- "$1")"; elif [ -e "$1" ]; then echo other; else echo missing; fi"#;

/// Every entry under directory `$1`: `TYPE MODE SIZE RELATIVE-PATH`,
/// NUL-terminated.
const TREE: &str = r#"[ -d "$1" ] || { echo "$1: no such directory" >&2; exit 1; }
find "$1" -mindepth 1 -printf '%y %m %s %P\0'"#;

/// Creates directories where they do not exist: arguments come in pairs,
/// `MODE PATH`, parents first.
const MKDIRS: &str = r#"while [ $# -ge 2 ]; do
  [ -d "$2" ] || mkdir -m "$1" -- "$2" || exit 1
  shift 2
done"#;

/// Why a transfer failed.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// A file on this machine could not be read or written.
    #[error("{}: {source}", .path.display())]
    Local {
        /// The local path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The node refused or failed (no space, permission denied, no such file).
    #[error("node `{node}`: {message}")]
    Remote {
        /// The node.
        node: String,
        /// The node's own words, one line.
        message: String,
    },
    /// The bytes that arrived are not the bytes that were sent.
    #[error("node `{node}`: {path}: content check failed: sent sha256 {sent}, received {received}; nothing was written under that name")]
    Mismatch {
        /// The node.
        node: String,
        /// The file.
        path: String,
        /// sha256 of what was sent.
        sent: String,
        /// sha256 of what arrived.
        received: String,
    },
    /// The SSH session failed.
    #[error(transparent)]
    Ssh(#[from] SshError),
}

/// One file moved and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// Its size.
    pub bytes: u64,
    /// Its sha256, hex, the same on both sides.
    pub sha256: String,
    /// Its permission bits.
    pub mode: u32,
}

/// What a remote path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteKind {
    /// A directory.
    Dir,
    /// A regular file of this many bytes.
    File(u64),
    /// Something else (a device, a socket).
    Other,
    /// Nothing.
    Missing,
}

/// One entry of a remote tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteEntry {
    /// `find`'s type letter: `d`, `f`, `l` (a symbolic link) ...
    pub kind: char,
    /// Permission bits.
    pub mode: u32,
    /// Size in bytes.
    pub bytes: u64,
    /// Path relative to the tree's root.
    pub path: String,
}

/// Called with the number of bytes that just crossed.
pub type Progress<'a> = &'a (dyn Fn(u64) + Send + Sync);

/// The hidden name a file is written under before it is checked: beside its
/// destination, so the final rename never crosses a file system.
pub fn temporary_name(dest: &str) -> String {
    let path = Path::new(dest);
    let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    let tmp = format!(".{name}.labctl-{:08x}", rand::random::<u32>());
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.join(tmp).display().to_string(),
        _ => tmp,
    }
}

/// sha256 of a local file, hex (read on a blocking thread).
pub async fn local_sha256(path: &Path) -> Result<String, TransferError> {
    let owned = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let mut file = std::fs::File::open(&owned)?;
        let mut hasher = Sha256::new();
        let mut chunk = vec![0u8; 1 << 16];
        loop {
            let n = std::io::Read::read(&mut file, &mut chunk)?;
            if n == 0 {
                break;
            }
            hasher.update(&chunk[..n]);
        }
        Ok::<_, std::io::Error>(hex::encode(hasher.finalize()))
    })
    .await
    .expect("hashing does not panic")
    .map_err(|source| TransferError::Local {
        path: path.to_path_buf(),
        source,
    })
}

/// Sends local file `local` to `remote` on the node with permission bits
/// `mode`, checked by sha256 before it takes the destination's name.
pub async fn send_file(
    session: &SshSession,
    local: &Path,
    remote: &str,
    mode: u32,
    progress: Progress<'_>,
) -> Result<Moved, TransferError> {
    let local_err = |source| TransferError::Local {
        path: local.to_path_buf(),
        source,
    };
    let want = local_sha256(local).await?;
    let size = tokio::fs::metadata(local).await.map_err(local_err)?.len();
    let file = tokio::fs::File::open(local).await.map_err(local_err)?;
    let mut reader = Hashing::new(file, progress);
    let command = RemoteCommand::script_with(
        RECEIVE,
        [
            temporary_name(remote),
            remote.to_string(),
            format!("{mode:o}"),
            want.clone(),
            size.to_string(),
        ],
    );
    let (status, stderr) = session
        .exec_piped(&command, Some(&mut reader), &mut tokio::io::sink())
        .await?;
    let (bytes, sent) = reader.finish();
    match status {
        0 => Ok(Moved {
            bytes,
            sha256: want,
            mode,
        }),
        // The node's check failed because what was read here differs from
        // what was hashed before: the file changed under the copy.
        3 if sent != want => Err(local_err(std::io::Error::other(
            "the file changed while it was being copied; nothing was written on the node",
        ))),
        3 => Err(TransferError::Mismatch {
            node: session.node().to_string(),
            path: remote.to_string(),
            sent: want,
            received: last_line(&stderr),
        }),
        _ => Err(TransferError::Remote {
            node: session.node().to_string(),
            message: last_line(&stderr),
        }),
    }
}

/// Fetches `remote` from the node into local file `local` with the node's
/// permission bits, checked by sha256 before it takes the local name.
pub async fn fetch_file(
    session: &SshSession,
    remote: &str,
    local: &Path,
    progress: Progress<'_>,
) -> Result<Moved, TransferError> {
    let local_err = |path: &Path, source| TransferError::Local {
        path: path.to_path_buf(),
        source,
    };
    let tmp = PathBuf::from(temporary_name(&local.display().to_string()));
    let file = tokio::fs::File::create(&tmp).await.map_err(|e| local_err(local, e))?;
    // Whatever happens below, the temporary file does not outlive this call
    // under its own name.
    let cleanup = TempFile(&tmp);
    let mut writer = Hashing::new(file, progress);
    let command = RemoteCommand::script_with(SEND, [remote]);
    let (status, stderr) = session
        .exec_piped(&command, None::<tokio::io::Empty>, &mut writer)
        .await?;
    let (bytes, received) = writer.finish();
    if status != 0 {
        return Err(TransferError::Remote {
            node: session.node().to_string(),
            message: last_line(&stderr),
        });
    }
    let summary = String::from_utf8_lossy(&stderr);
    let (sent, mode) = summary
        .lines()
        .rev()
        .find_map(|line| {
            let mut words = line.strip_prefix("labctl-sha256 ")?.split(' ');
            let sum = words.next()?.to_string();
            let mode = u32::from_str_radix(words.next()?, 8).ok()?;
            Some((sum, mode))
        })
        .ok_or_else(|| TransferError::Remote {
            node: session.node().to_string(),
            message: format!("{remote}: the node did not report the file's sha256"),
        })?;
    if sent != received {
        return Err(TransferError::Mismatch {
            node: session.node().to_string(),
            path: remote.to_string(),
            sent,
            received,
        });
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode)).map_err(|e| local_err(&tmp, e))?;
    std::fs::rename(&tmp, local).map_err(|e| local_err(local, e))?;
    std::mem::forget(cleanup);
    Ok(Moved {
        bytes,
        sha256: received,
        mode,
    })
}

/// What `path` is on the node.
pub async fn remote_kind(session: &SshSession, path: &str) -> Result<RemoteKind, TransferError> {
    let out = session.run(&RemoteCommand::script_with(KIND, [path])).await?;
    let text = out.stdout_text();
    Ok(match text.split_once(' ') {
        Some(("file", size)) => RemoteKind::File(size.parse().unwrap_or(0)),
        _ if text == "dir" => RemoteKind::Dir,
        _ if text == "missing" => RemoteKind::Missing,
        _ => RemoteKind::Other,
    })
}

/// Every entry under the node's directory `root`, parents before children.
pub async fn remote_tree(session: &SshSession, root: &str) -> Result<Vec<RemoteEntry>, TransferError> {
    let out = session.exec(&RemoteCommand::script_with(TREE, [root])).await?;
    if out.status != 0 {
        return Err(TransferError::Remote {
            node: session.node().to_string(),
            message: last_line(&out.stderr),
        });
    }
    let mut entries: Vec<RemoteEntry> = out
        .stdout
        .split(|b| *b == 0)
        .filter(|record| !record.is_empty())
        .filter_map(|record| parse_tree_record(&String::from_utf8_lossy(record)))
        .collect();
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(entries)
}

fn parse_tree_record(record: &str) -> Option<RemoteEntry> {
    let mut parts = record.splitn(4, ' ');
    let kind = parts.next()?.chars().next()?;
    let mode = u32::from_str_radix(parts.next()?, 8).ok()?;
    let bytes = parts.next()?.parse().ok()?;
    let path = parts.next()?.to_string();
    Some(RemoteEntry {
        kind,
        mode,
        bytes,
        path,
    })
}

/// Creates the node's directories `dirs` (path and mode, parents first)
/// where they do not exist yet.
pub async fn make_remote_dirs(session: &SshSession, dirs: &[(String, u32)]) -> Result<(), TransferError> {
    if dirs.is_empty() {
        return Ok(());
    }
    let args = dirs.iter().flat_map(|(path, mode)| [format!("{mode:o}"), path.clone()]);
    let out = session.exec(&RemoteCommand::script_with(MKDIRS, args)).await?;
    if out.status != 0 {
        return Err(TransferError::Remote {
            node: session.node().to_string(),
            message: last_line(&out.stderr),
        });
    }
    Ok(())
}

/// The last non-empty line of a command's stderr, without the shell's
/// `sh: 1: ` prefix.
fn last_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("failed without a message");
    let line = line.trim();
    match line.strip_prefix("sh: ") {
        Some(rest) => rest.split_once(": ").map(|(_, msg)| msg).unwrap_or(rest).to_string(),
        None => line.to_string(),
    }
}

/// Removes a temporary file when dropped.
struct TempFile<'a>(&'a Path);

impl Drop for TempFile<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0);
    }
}

/// A reader or writer that hashes and counts the bytes passing through it
/// and reports them as progress.
struct Hashing<'a, T> {
    inner: T,
    hasher: Sha256,
    bytes: u64,
    progress: Progress<'a>,
}

impl<'a, T> Hashing<'a, T> {
    fn new(inner: T, progress: Progress<'a>) -> Self {
        Hashing {
            inner,
            hasher: Sha256::new(),
            bytes: 0,
            progress,
        }
    }

    fn account(&mut self, data: &[u8]) {
        self.hasher.update(data);
        self.bytes += data.len() as u64;
        (self.progress)(data.len() as u64);
    }

    fn finish(self) -> (u64, String) {
        (self.bytes, hex::encode(self.hasher.finalize()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Hashing<'_, T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let fresh = buf.filled()[before..].to_vec();
            self.account(&fresh);
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Hashing<'_, T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = polled {
            self.account(&data[..n]);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_temporary_name_is_hidden_beside_the_destination() {
        let tmp = temporary_name("/opt/app/bin/server");
        assert!(tmp.starts_with("/opt/app/bin/.server.labctl-"), "{tmp}");
        let bare = temporary_name("server");
        assert!(bare.starts_with(".server.labctl-"), "{bare}");
        assert_ne!(temporary_name("/a/b"), temporary_name("/a/b"));
    }

    #[test]
    fn test_tree_records_keep_spaces_in_names() {
        assert_eq!(
            parse_tree_record("f 755 12 bin/my tool"),
            Some(RemoteEntry {
                kind: 'f',
                mode: 0o755,
                bytes: 12,
                path: "bin/my tool".into()
            })
        );
        assert_eq!(parse_tree_record("d 700 4096 bin").unwrap().kind, 'd');
        assert_eq!(parse_tree_record("garbage"), None);
    }

    #[test]
    fn test_last_line_drops_the_shell_prefix() {
        assert_eq!(
            last_line(b"sh: 1: cannot create /x/.y: Permission denied\n"),
            "cannot create /x/.y: Permission denied"
        );
        assert_eq!(
            last_line(b"noise\ncat: write error: No space left on device\n\n"),
            "cat: write error: No space left on device"
        );
        assert_eq!(last_line(b""), "failed without a message");
    }

    #[tokio::test]
    async fn test_hashing_reader_counts_hashes_and_reports_progress() {
        use std::sync::atomic::{AtomicU64, Ordering};
        use tokio::io::AsyncReadExt;
        let seen = AtomicU64::new(0);
        let progress = |n: u64| {
            seen.fetch_add(n, Ordering::Relaxed);
        };
        let data = vec![7u8; 300_000];
        let mut reader = Hashing::new(&data[..], &progress);
        let mut out = Vec::new();
        reader.read_to_end(&mut out).await.unwrap();
        let (bytes, sum) = reader.finish();
        assert_eq!(bytes, 300_000);
        assert_eq!(seen.load(Ordering::Relaxed), 300_000);
        assert_eq!(sum, hex::encode(Sha256::digest(&data)));
    }
}
