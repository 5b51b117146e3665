//! Reading a labs file: the checks before parsing, the YAML into the model
//! (with located errors), then the checks of the whole document.

use std::path::Path;

use super::check::check_document;
use super::errors::{precheck, ConfigError, Located};
use super::{Document, LabsFile};
use crate::limits::DEFAULT_FILE;
use crate::yaml::{read, ReadError};

impl LabsFile {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<LabsFile, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ConfigError::NotFound {
                    path: path.to_path_buf(),
                    fix: format!(
                        "labctl looks for ./{DEFAULT_FILE} in the current directory; run it where your {DEFAULT_FILE} is, or pass -f FILE"
                    ),
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(ConfigError::Read {
                    path: path.to_path_buf(),
                    source: e,
                    fix: "save the file as UTF-8 text".into(),
                })
            }
            Err(e) => {
                return Err(ConfigError::Read {
                    path: path.to_path_buf(),
                    source: e,
                    fix: "check that the path is a readable file, or pass another with -f FILE".into(),
                })
            }
        };
        Self::parse(path, &text)
    }

    /// Parses and checks `text`; `path` is used only in messages.
    pub fn parse(path: &Path, text: &str) -> Result<LabsFile, ConfigError> {
        if let Some(at) = precheck(text) {
            return Err(at.into_error(path));
        }
        let (doc, root) = read::<Document>(text).map_err(|e| match e {
            ReadError::Syntax(e) => Located::syntax(&e).into_error(path),
            ReadError::Model(e) => Located::read(e).into_error(path),
        })?;
        if let Some(issue) = check_document(&doc) {
            return Err(issue.locate(root.as_deref()).into_error(path));
        }
        Ok(LabsFile {
            path: path.to_path_buf(),
            labs: doc.labs,
        })
    }
}
