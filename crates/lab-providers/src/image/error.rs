//! The image cache's errors.

use std::io;
use std::path::{Path, PathBuf};

/// Errors building or finding the node image.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// A host tool the recipe needs is not installed.
    #[error(
        "`{tool}` is not installed; the node image is built with it. Install it with: apt-get install -y {package}"
    )]
    MissingTool {
        /// The command.
        tool: &'static str,
        /// The Debian package that provides it.
        package: &'static str,
    },
    /// The recipe failed.
    #[error("building the node image failed (exit {status}):\n{said}\n  fix: {fix}\n  full log: {}", log.display())]
    BuildFailed {
        /// Exit status of build.sh.
        status: String,
        /// The build log.
        log: PathBuf,
        /// What the build said about its failure: the error lines of
        /// mmdebstrap, apt and build.sh, else the last lines of the log.
        said: String,
        /// What to do.
        fix: String,
    },
    /// An I/O error on the cache.
    #[error("image cache {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

pub(super) fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ImageError + '_ {
    move |source| ImageError::Io {
        path: path.to_path_buf(),
        source,
    }
}
