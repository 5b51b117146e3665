//! Where a file is, as `labctl cp` and the suites' `copy:`/`collect:` steps
//! write it: `NODE:PATH` on one node, `@all:PATH` on every node, or a path on
//! this machine (write `./a:b` for a local name with a colon), read the way
//! scp reads its arguments.

use std::path::PathBuf;

/// One side of a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyLocation {
    /// A path on this machine.
    Local(PathBuf),
    /// A path on one node.
    Node {
        /// The node.
        node: String,
        /// The path there (relative paths start in the login directory).
        path: String,
    },
    /// The same path on every node.
    Every {
        /// The path.
        path: String,
    },
}

impl CopyLocation {
    /// Reads `NODE:PATH`, `@all:PATH` or a local path, the way scp does: a
    /// colon before the first slash makes it remote.
    pub fn parse(text: &str) -> CopyLocation {
        match text.split_once(':') {
            Some((host, path)) if !host.is_empty() && !host.contains('/') => {
                let path = if path.is_empty() {
                    ".".to_string()
                } else {
                    path.to_string()
                };
                if host == "@all" {
                    CopyLocation::Every { path }
                } else {
                    CopyLocation::Node {
                        node: host.to_string(),
                        path,
                    }
                }
            }
            _ => CopyLocation::Local(PathBuf::from(text)),
        }
    }

    /// Whether this is a path on this machine.
    pub fn is_local(&self) -> bool {
        matches!(self, CopyLocation::Local(_))
    }
}
