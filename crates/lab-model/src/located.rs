//! Reading a whole document of one type (a suite file, an `--expect`
//! file) with every error located: line, column, what is wrong and what to
//! write, in words chosen from the error's kind, never from serde's text.

use std::path::Path;

use crate::yaml::de::ErrorKind;
use crate::yaml::tree::{render_path, Pos, Seg};
use crate::yaml::{describe, syntax_problem, want_words, ReadError};

/// What kind of document is read, for the fixes of shape errors.
pub(crate) struct DocumentKind {
    /// What the document looks like, in one sentence.
    pub(crate) shape: &'static str,
    /// The page that documents it.
    pub(crate) docs: &'static str,
}

/// A problem of a document, where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Located {
    pub(crate) line: usize,
    pub(crate) column: usize,
    pub(crate) message: String,
    pub(crate) fix: String,
}

impl Located {
    /// `FILE:LINE:COLUMN: message` and the fix on a line of its own.
    pub(crate) fn in_file(&self, path: &Path) -> String {
        format!(
            "{}:{}:{}: {}\n  fix: {}",
            path.display(),
            self.line,
            self.column,
            self.message,
            self.fix
        )
    }
}

/// Reads `text` as a `T`.
pub(crate) fn parse_located<T: serde::de::DeserializeOwned>(text: &str, kind_of: &DocumentKind) -> Result<T, Located> {
    let located = |pos: Pos, message: String, fix: String| Located {
        line: pos.line,
        column: pos.column,
        message,
        fix,
    };
    match crate::yaml::read::<T>(text) {
        Ok((value, _)) => Ok(value),
        Err(ReadError::Syntax(e)) => {
            let p = syntax_problem(&e.kind);
            Err(located(e.pos, p.message, p.fix))
        }
        Err(ReadError::Model(e)) => {
            let leaf = match e.path.last() {
                Some(Seg::Key(key)) => Some(key.as_str()),
                _ => None,
            };
            let (message, fix) = read_problem(e.kind.clone(), leaf, kind_of);
            let field = render_path(&e.path);
            let message = if field.is_empty() {
                message
            } else {
                format!("{field}: {message}")
            };
            Err(located(e.pos.unwrap_or(Pos { line: 1, column: 1 }), message, fix))
        }
    }
}

/// What to tell about a reading error, from its kind. `leaf` is the key
/// the value is under, if any.
fn read_problem(kind: ErrorKind, leaf: Option<&str>, kind_of: &DocumentKind) -> (String, String) {
    let shape = kind_of.shape;
    match kind {
        ErrorKind::Problem(p) => (p.message, p.fix),
        ErrorKind::UnknownField { field, expected } => {
            let list = expected.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ");
            let fix = match crate::problem::did_you_mean(&field, expected) {
                Some(m) => format!("rename `{field}` to `{m}`"),
                None => format!("remove `{field}`; the fields here are {list}"),
            };
            (format!("unknown field `{field}`; expected one of {list}"), fix)
        }
        ErrorKind::MissingField(field) => (format!("`{field}` is missing"), format!("add `{field}:`; {shape}")),
        ErrorKind::DuplicateKey(key) => (
            format!("`{key}` is given twice"),
            format!("keep one `{key}:` line and remove the other"),
        ),
        ErrorKind::WrongType { want, found } => {
            let (must, example) = want_words(&want);
            let fix = match leaf {
                Some(key) if example.is_empty() => format!("make `{key}:` {must} (see {})", kind_of.docs),
                Some(key) => format!("write it like `{key}: {example}` (see {})", kind_of.docs),
                None => shape.into(),
            };
            (format!("must be {must}, found {}", describe(&found)), fix)
        }
        ErrorKind::UnknownVariant { variant, expected } => {
            let hint = crate::problem::did_you_mean(&variant, expected)
                .map(|m| format!("write `{m}`"))
                .unwrap_or_else(|| format!("use one of: {}", expected.join(", ")));
            (
                format!("unknown value `{variant}`; supported: {}", expected.join(", ")),
                hint,
            )
        }
        ErrorKind::Other(message) => (message, shape.into()),
    }
}
