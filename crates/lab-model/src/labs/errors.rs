//! What can be wrong with a labs file, and how each reading error is worded:
//! [`ConfigError`], the checks before parsing (empty files, control
//! characters, tabs), and the translation of the reader's typed errors
//! (`crate::yaml::de::ErrorKind`) into a message and a fix for the part of
//! the file they are in.

use std::path::{Path, PathBuf};

use crate::problem::{did_you_mean, Problem};
use crate::yaml::de::{Error as ReadError, ErrorKind, Found, Want};
use crate::yaml::tree::{render_path, Seg, Syntax, SyntaxError};
use crate::yaml::{syntax_problem, want_words};

/// Everything that can be wrong with a labs file. Each variant's `Display`
/// gives the file (and, where there is one, line and column), what is wrong,
/// and on a second line, `  fix: ...`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file was read but its content is wrong.
    #[error("{}:{line}:{column}: {}{message}\n  fix: {}", path.display(), field_prefix(field), indent_fix(fix))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line of the offending text.
        line: usize,
        /// 1-based column of the offending text.
        column: usize,
        /// Where in the document, like `labs[0].nodes[1].cpus`; empty for the
        /// document itself.
        field: String,
        /// What is wrong.
        message: String,
        /// How to fix it.
        fix: String,
    },
    /// The file does not exist.
    #[error("{}: file not found\n  fix: {fix}", path.display())]
    NotFound {
        /// The file.
        path: PathBuf,
        /// How to fix it.
        fix: String,
    },
    /// The file exists but could not be read.
    #[error("{}: cannot read the file: {source}\n  fix: {fix}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
        /// How to fix it.
        fix: String,
    },
    /// `--lab NAME` names no lab of the file.
    #[error("{}: no lab named `{name}`; the labs in this file are: {}\n  fix: {fix}", path.display(), available.join(", "))]
    UnknownLab {
        /// The file.
        path: PathBuf,
        /// The name asked for.
        name: String,
        /// The names the file has, in order.
        available: Vec<String>,
        /// How to fix it.
        fix: String,
    },
}

/// Continuation lines of a fix line up under its first line.
fn indent_fix(fix: &str) -> String {
    fix.replace('\n', "\n       ")
}

fn field_prefix(field: &str) -> String {
    if field.is_empty() {
        String::new()
    } else {
        format!("{field}: ")
    }
}

impl ConfigError {
    /// The file concerned.
    pub fn path(&self) -> &Path {
        match self {
            ConfigError::Invalid { path, .. }
            | ConfigError::NotFound { path, .. }
            | ConfigError::Read { path, .. }
            | ConfigError::UnknownLab { path, .. } => path,
        }
    }

    /// 1-based line and column, for errors about the file's content.
    pub fn position(&self) -> Option<(usize, usize)> {
        match self {
            ConfigError::Invalid { line, column, .. } => Some((*line, *column)),
            _ => None,
        }
    }

    /// What is wrong, without file, position or fix.
    pub fn message(&self) -> String {
        match self {
            ConfigError::Invalid { message, .. } => message.clone(),
            ConfigError::NotFound { .. } => "file not found".into(),
            ConfigError::Read { source, .. } => format!("cannot read the file: {source}"),
            ConfigError::UnknownLab { name, available, .. } => {
                format!(
                    "no lab named `{name}`; the labs in this file are: {}",
                    available.join(", ")
                )
            }
        }
    }

    /// How to fix it.
    pub fn fix(&self) -> &str {
        match self {
            ConfigError::Invalid { fix, .. }
            | ConfigError::NotFound { fix, .. }
            | ConfigError::Read { fix, .. }
            | ConfigError::UnknownLab { fix, .. } => fix,
        }
    }
}

/// A problem with its position and document path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Located {
    pub(super) line: usize,
    pub(super) column: usize,
    pub(super) field: String,
    pub(super) problem: Problem,
}

// Checks before parsing: an empty file, control characters and tabs get a
// message of their own, before the parser would word them generically.

fn is_blank_or_comment(line: &str) -> bool {
    let t = line.trim();
    t.is_empty() || t.starts_with('#') || t == "---" || t == "..."
}

/// The smallest useful file, for fixes.
pub(super) const MINIMAL_EXAMPLE: &str =
    "\n  labs:\n    - name: local\n      nodes:\n        - name: server\n        - name: client";

/// Empty files and tab indentation.
pub(super) fn precheck(text: &str) -> Option<Located> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.lines().all(is_blank_or_comment) {
        let line = text.lines().count().max(1);
        return Some(Located {
            line,
            column: 1,
            field: String::new(),
            problem: Problem::new(
                "the file is empty: it defines no labs",
                format!("add at least one lab (see docs/labs-yaml.md), e.g.:{MINIMAL_EXAMPLE}"),
            ),
        });
    }
    for (i, line) in text.lines().enumerate() {
        if let Some((col, c)) = line
            .chars()
            .enumerate()
            .find(|(_, c)| c.is_control() && *c != '\t' && *c != '\r')
        {
            let what = match c {
                '\0' => "a NUL byte (U+0000)".to_string(),
                c => format!("the control character U+{:04X}", c as u32),
            };
            return Some(Located {
                line: i + 1,
                column: col + 1,
                field: String::new(),
                problem: Problem::new(
                    format!("the file contains {what}; labs.yaml must be plain text"),
                    "delete it: it is invisible in most editors (`cat -A FILE` shows it, as ^@ for NUL); the file may have been saved in a binary or UTF-16 format",
                ),
            });
        }
        let indent: &str = &line[..line.len() - line.trim_start().len()];
        if let Some(col) = indent.find('\t') {
            if line.trim_start().starts_with('#') {
                continue;
            }
            return Some(Located {
                line: i + 1,
                column: col + 1,
                field: String::new(),
                problem: Problem::new(
                    "a tab character is used for indentation; YAML allows only spaces there",
                    "replace the tabs at the start of the line with spaces (2 per level); set your editor to insert spaces for .yaml files",
                ),
            });
        }
    }
    None
}

// The wording of reading errors, by the part of the file they are in.

/// Fields of each part of the file, for suggestions.
const DOC_FIELDS: &[&str] = &["labs"];
const LAB_FIELDS: &[&str] = &[
    "name",
    "provider",
    "fabric",
    "image",
    "accel",
    "data_network",
    "defaults",
    "nodes",
    "aws",
    "multipass",
    "ci",
    "packages",
    "node_ssh",
];
const AWS_FIELDS: &[&str] = &[
    "region",
    "availability_zone",
    "instance_type",
    "ami",
    "ami_ssm_parameter",
    "ssh_user",
    "subnet_id",
    "ssh_cidr",
    "ssh_address",
];
const DEFAULTS_FIELDS: &[&str] = &["cpus", "memory", "user", "port", "identity_file", "sudo"];
pub(super) const NODE_FIELDS: &[&str] = &[
    "name",
    "cpus",
    "memory",
    "data_addr",
    "ssh_port",
    "host",
    "port",
    "user",
    "identity_file",
    "host_key",
    "sudo",
    "rdma_device",
];

/// Which part of the file a path is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Document,
    Labs,
    Lab,
    Defaults,
    Aws,
    Nodes,
    Node,
    Other,
}

fn part_of(segs: &[Seg]) -> Part {
    use Seg::{Index, Key};
    match segs {
        [] => Part::Document,
        [Key(l)] if l == "labs" => Part::Labs,
        [Key(l), Index(_)] if l == "labs" => Part::Lab,
        [Key(l), Index(_), Key(d)] if l == "labs" && d == "defaults" => Part::Defaults,
        [Key(l), Index(_), Key(a)] if l == "labs" && a == "aws" => Part::Aws,
        [Key(l), Index(_), Key(n)] if l == "labs" && n == "nodes" => Part::Nodes,
        [Key(l), Index(_), Key(n), Index(_)] if l == "labs" && n == "nodes" => Part::Node,
        _ => Part::Other,
    }
}

fn fields_of(part: Part) -> &'static [&'static str] {
    match part {
        Part::Document => DOC_FIELDS,
        Part::Lab => LAB_FIELDS,
        Part::Defaults => DEFAULTS_FIELDS,
        Part::Aws => AWS_FIELDS,
        Part::Node => NODE_FIELDS,
        _ => &[],
    }
}

/// How the message names the part a field is in: by what it is where the
/// part has a name, otherwise by its path (`labs[0].multipass`).
fn part_name(part: Part, segs: &[Seg]) -> String {
    match part {
        Part::Document => "the top level".into(),
        Part::Labs => "labs".into(),
        Part::Lab => "a lab".into(),
        Part::Defaults => "defaults".into(),
        Part::Aws => "aws".into(),
        Part::Nodes => "nodes".into(),
        Part::Node => "a node".into(),
        Part::Other => format!("`{}`", render_path(segs)),
    }
}

/// `expected` (serde's list of the mapping's fields) serves the parts that
/// have no list here.
fn unknown_field(segs: &[Seg], field: &str, expected: &'static [&'static str]) -> Problem {
    let part = part_of(segs);
    let fields = match fields_of(part) {
        [] => expected,
        fields => fields,
    };
    let list = fields.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ");
    let message = format!("unknown field `{field}` in {}", part_name(part, segs));
    if let Some(m) = did_you_mean(field, fields) {
        return Problem::new(
            format!("{message}; did you mean `{m}`?"),
            format!("rename `{field}` to `{m}`"),
        );
    }
    // A field that belongs one level up or down.
    let elsewhere = match part {
        Part::Document if LAB_FIELDS.contains(&field) || NODE_FIELDS.contains(&field) => Some(
            "the file starts with `labs:`, then a list of labs (`- name: ...`); put this field inside a lab"
                .to_string(),
        ),
        Part::Lab if NODE_FIELDS.contains(&field) && DEFAULTS_FIELDS.contains(&field) => Some(format!(
            "`{field}` is a node setting: put it under `defaults:` for every node, or under one node in `nodes:`"
        )),
        Part::Lab if NODE_FIELDS.contains(&field) => Some(format!(
            "`{field}` is a node setting: put it under one node in `nodes:`"
        )),
        Part::Defaults if NODE_FIELDS.contains(&field) => Some(format!(
            "`{field}` differs per node: set it on each node in `nodes:`; defaults takes only `cpus` and `memory`"
        )),
        Part::Defaults | Part::Node | Part::Aws if LAB_FIELDS.contains(&field) => Some(format!(
            "`{field}` is a lab setting: move it up to the lab, next to `nodes:` (check the indentation)"
        )),
        _ => None,
    };
    let fix = elsewhere.unwrap_or_else(|| format!("remove `{field}`; the fields here are {list}"));
    Problem::new(format!("{message}; expected one of {list}"), fix)
}

fn missing_field(segs: &[Seg], field: &str) -> Problem {
    match (part_of(segs), field) {
        (Part::Document, "labs") => Problem::new(
            "the file has no `labs:` key",
            format!("start the file with `labs:` followed by a list of labs, e.g.:{MINIMAL_EXAMPLE}"),
        ),
        (Part::Lab, "name") => Problem::new(
            "this lab has no `name`",
            "add `name: NAME` to the lab (lowercase letters, digits and `-`)",
        ),
        (Part::Lab, "nodes") => Problem::new(
            "this lab has no `nodes`",
            "add `nodes:` with at least one node, e.g.:\n  nodes:\n    - name: server\n    - name: client",
        ),
        (Part::Node, "name") => Problem::new(
            "this node has no `name`",
            "add `name: NAME` to the node; it becomes the hostname",
        ),
        (part, field) => Problem::new(
            format!("`{field}` is missing in {}", part_name(part, segs)),
            format!("add `{field}:`"),
        ),
    }
}

/// A part of the file (a lab, the nodes list) holds the wrong kind of value.
fn invalid_type(part: Part, found: &Found) -> Problem {
    let found = match found {
        Found::Str(s) => format!("the text \"{s}\""),
        Found::Int(n) => format!("the number `{n}`"),
        Found::Float(x) => format!("the number `{x}`"),
        Found::Bool(b) => format!("the boolean `{b}`"),
        other => found_words(other),
    };
    match part {
        Part::Document => Problem::new(
            format!("the file must be a mapping with a `labs:` key, found {found}"),
            format!("start the file with `labs:` followed by a list of labs, e.g.:{MINIMAL_EXAMPLE}"),
        ),
        Part::Labs => Problem::new(
            format!("labs must be a list of labs, found {found}"),
            format!("write each lab as a list item starting with `- ` under `labs:`, e.g.:{MINIMAL_EXAMPLE}"),
        ),
        Part::Lab => Problem::new(
            format!("each lab must be a mapping (`name:`, `nodes:`, ...), found {found}"),
            "write the lab as `- name: NAME` followed by its fields, indented under the `-`",
        ),
        Part::Aws => Problem::new(
            format!("aws must be a mapping, found {found}"),
            "write `aws:` then `region:`, `instance_type:` and `ami:` indented below it (see docs/providers/aws.md)",
        ),
        Part::Defaults => Problem::new(
            format!("defaults must be a mapping, found {found}"),
            "write `defaults:` then `cpus:` and/or `memory:` indented below it",
        ),
        Part::Nodes => Problem::new(
            format!("nodes must be a list of nodes, found {found}"),
            "write one node per item, e.g.:\n  nodes:\n    - name: server\n    - name: client",
        ),
        Part::Node => Problem::new(
            format!("each node must be a mapping with at least `name:`, found {found}"),
            "write the node as `- name: NAME` (a bare `- NAME` is not enough)",
        ),
        Part::Other => Problem::new(
            format!("unexpected {found}"),
            "check the indentation against docs/labs-yaml.md",
        ),
    }
}

/// A field that must hold a number or text holds something else: say what
/// it must be, in words, and show one.
fn wrong_scalar(field: &str, found: &Found, want: &Want) -> Problem {
    let found = match found {
        Found::Str(s) => format!("the text \"{s}\""),
        Found::Int(n) => format!("`{n}`"),
        Found::Float(x) => format!("`{x}`"),
        Found::Bool(b) => format!("`{b}`"),
        other => found_words(other),
    };
    let (must, example) = match want {
        // What a visitor of serde's own expects is one value, in its words;
        // no one example shows every such value.
        Want::Other(_) => ("a single value".to_string(), ""),
        want => want_words(want),
    };
    let fix = if example.is_empty() {
        format!("make `{field}:` {must} (see docs/labs-yaml.md)")
    } else {
        format!("write it like `{field}: {example}` (see docs/labs-yaml.md)")
    };
    Problem::new(format!("{field} must be {must}, found {found}"), fix)
}

/// Lists, mappings and empty values, as both kinds of wrong-type message
/// name them.
fn found_words(found: &Found) -> String {
    match found {
        Found::Seq => "a list".into(),
        Found::Map => "a mapping".into(),
        Found::Null => "nothing".into(),
        Found::Str(s) => format!("the text \"{s}\""),
        Found::Int(n) => n.to_string(),
        Found::Float(x) => x.to_string(),
        Found::Bool(b) => b.to_string(),
        Found::Other(what) => what.clone(),
    }
}

impl Located {
    /// A syntax error: no field, the parser's position.
    pub(super) fn syntax(e: &SyntaxError) -> Located {
        Located {
            line: e.pos.line,
            column: e.pos.column,
            field: String::new(),
            problem: match e.kind {
                Syntax::SeveralDocuments => Problem::new(
                    "the file holds more than one YAML document (`---` separators)",
                    "keep one document: put every lab in the one `labs:` list and remove the extra `---`",
                ),
                ref kind => syntax_problem(kind),
            },
        }
    }

    /// A reading error, worded for the part of the file it is in.
    pub(super) fn read(e: ReadError) -> Located {
        let pos = e.pos.unwrap_or(crate::yaml::tree::Pos { line: 1, column: 1 });
        let segs = &e.path;
        let problem = match e.kind {
            ErrorKind::Problem(p) => p,
            ErrorKind::UnknownField { field, expected } => unknown_field(segs, &field, expected),
            ErrorKind::MissingField(field) => missing_field(segs, field),
            ErrorKind::DuplicateKey(key) => {
                // The path ends with the key; the part is its mapping's.
                let mapping = &segs[..segs.len().saturating_sub(1)];
                Problem::new(
                    format!("`{key}` is given twice in {}", part_name(part_of(mapping), mapping)),
                    format!("keep one `{key}:` line and remove the other"),
                )
            }
            ErrorKind::WrongType { want, found } => match (part_of(segs), segs.last()) {
                (Part::Other, Some(Seg::Key(leaf))) => wrong_scalar(leaf, &found, &want),
                (part, _) => invalid_type(part, &found),
            },
            ErrorKind::UnknownVariant { variant, expected } => {
                let hint = did_you_mean(&variant, expected)
                    .map(|m| format!("write `{m}`"))
                    .unwrap_or_else(|| format!("use one of: {}", expected.join(", ")));
                Problem::new(
                    format!("unknown value `{variant}`; supported: {}", expected.join(", ")),
                    hint,
                )
            }
            ErrorKind::Other(message) => Problem::new(message, "check this value against docs/labs-yaml.md"),
        };
        Located {
            line: pos.line,
            column: pos.column,
            field: render_path(segs),
            problem,
        }
    }

    /// The error of `path`'s content.
    pub(super) fn into_error(self, path: &Path) -> ConfigError {
        ConfigError::Invalid {
            path: path.to_path_buf(),
            line: self.line,
            column: self.column,
            field: self.field,
            message: self.problem.message,
            fix: self.problem.fix,
        }
    }
}
