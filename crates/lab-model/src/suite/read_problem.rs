//! A suite file's reading errors in words: what is wrong and what to write.

use crate::yaml::de::ErrorKind;
use crate::yaml::{describe, want_words};

/// What to tell about a reading error of a suite, from its kind.
/// `leaf` is the key the value is under, if any.
pub(super) fn read_problem(kind: ErrorKind, leaf: Option<&str>) -> (String, String) {
    let shape = "a suite is `steps:` followed by a list of steps like `- workload: write-read` or `- exec: COMMAND` (see docs/cmd/ci.md)";
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
                Some(key) => format!("write it like `{key}: {example}` (see docs/cmd/ci.md)"),
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
