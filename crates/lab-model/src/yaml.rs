//! Reading YAML with positions: the one reader of labs.yaml and suite files.
//!
//! The text is parsed once into a tree of nodes that keep their line and
//! column ([`tree`]); the model is read from that tree by a serde
//! `Deserializer` of our own ([`de`]), so every error has a kind (an enum
//! variant with the field, the path, what was wanted and found) and the
//! position of the node it is about. Nothing here reads another library's
//! message text: wording is chosen from those kinds, here for what both
//! files share and in each file's module for the rest.
//!
//! The parser is granit-parser: maintained, pure Rust, fuzzed, no panics by
//! design, spans on every event and a typed error kind for every syntax
//! error.

pub(crate) mod de;
pub(crate) mod tree;

use std::rc::Rc;

use de::{Found, Want};
use tree::{Node, Syntax, SyntaxError, MAX_DEPTH};

use crate::problem::Problem;

/// Why a text could not be read into `T`.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The text is not YAML (or not one document of it).
    Syntax(SyntaxError),
    /// The YAML does not fit the model.
    Model(de::Error),
}

/// Parses `text` and reads a `T` from it; the tree comes back too, to
/// locate the findings of checks that need the whole model.
pub(crate) fn read<T: serde::de::DeserializeOwned>(text: &str) -> Result<(T, Option<Rc<Node>>), ReadError> {
    let root = tree::parse(text).map_err(ReadError::Syntax)?;
    let value = de::from_node(root.as_deref()).map_err(ReadError::Model)?;
    Ok((value, root))
}

/// What is wrong and how to fix it, for a syntax error.
pub(crate) fn syntax_problem(kind: &Syntax) -> Problem {
    let indent_fix = "check the indentation: keys of one mapping start in the same column, children are indented more (2 spaces) than their parent, and list items start with `- `";
    match kind {
        Syntax::KeyIndent => Problem::new(
            "this line does not line up with the keys around it (bad indentation)",
            indent_fix,
        ),
        Syntax::ItemIndent => Problem::new(
            "this line does not line up with the list items around it (bad indentation)",
            indent_fix,
        ),
        Syntax::ValueNotAllowed => Problem::new(
            "unexpected `key: value` here: usually a wrong indentation, or a value containing `: ` that needs quotes",
            indent_fix,
        ),
        Syntax::KeyWithoutColon => Problem::new(
            "a key without `:` (every line in a mapping is `key: value`)",
            indent_fix,
        ),
        Syntax::ReservedCharacter(c) => Problem::new(
            format!("`{c}` is a character that cannot start a YAML value (quote values starting with @, ` or %)"),
            "put the value in double quotes, or remove the character",
        ),
        Syntax::UnclosedQuote => Problem::new("a quoted value that never ends", "close the quote on the same line"),
        Syntax::UnclosedBracket => Problem::new(
            "a `[` or `{` that is never closed",
            "close it with `]` or `}`, or write the list or mapping in block style (one item per line)",
        ),
        Syntax::UnknownAnchor => Problem::new(
            "an alias (`*name`) names no anchor (`&name`) defined before it",
            "define the anchor first (`key: &name value`), or write the value out",
        ),
        Syntax::Tab => Problem::new(
            "a tab character is used for indentation; YAML allows only spaces there",
            "replace the tabs at the start of the line with spaces (2 per level); set your editor to insert spaces for .yaml files",
        ),
        Syntax::SeveralDocuments => Problem::new(
            "the file holds more than one YAML document (`---` separators)",
            "keep one document: move what follows the extra `---` into the first, and remove the `---`",
        ),
        Syntax::TooDeep => Problem::new(
            format!("lists and mappings are nested more than {MAX_DEPTH} deep"),
            "check the brackets and the indentation: a file of this format nests a few levels only",
        ),
        Syntax::TooManyAliases => Problem::new(
            "aliases (`*name`) repeat too many values",
            "write the values out, or use fewer nested aliases",
        ),
        Syntax::Other(what) => Problem::new(format!("invalid YAML: {what}"), indent_fix),
    }
}

/// A value found where another was wanted, as the message says it:
/// `the text "yes"`, `the number 7`, `a list`.
pub(crate) fn describe(found: &Found) -> String {
    match found {
        Found::Null => "nothing (an empty value)".into(),
        Found::Bool(b) => format!("the boolean {b}"),
        Found::Int(n) => format!("the number {n}"),
        Found::Float(x) => format!("the number {x}"),
        Found::Str(s) => format!("the text \"{s}\""),
        Found::Seq => "a list (`- item` lines)".into(),
        Found::Map => "a mapping (`key: value` lines)".into(),
        Found::Other(s) => s.clone(),
    }
}

/// What a value must be, in words, and an example of one (empty where no
/// one value shows it: a visitor's own wants, or nothing).
pub(crate) fn want_words(want: &Want) -> (String, &'static str) {
    match want {
        Want::Bool => ("true or false".into(), "true"),
        Want::Int { min: 0, max } if *max >= i128::from(u64::MAX) => ("a whole number, 0 or more".into(), "4096"),
        Want::Int { min, max } if *max <= i128::from(u32::MAX) => (format!("a whole number from {min} to {max}"), "10"),
        Want::Int { .. } => ("a whole number".into(), "10"),
        Want::Float => ("a number".into(), "1.5"),
        Want::Str => ("text".into(), "name"),
        Want::Seq => ("a list".into(), "[a, b]"),
        Want::Map => ("a mapping (`key: value` lines)".into(), "{key: value}"),
        Want::Null => ("empty".into(), ""),
        Want::Other(what) => (what.clone(), ""),
    }
}
