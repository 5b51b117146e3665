//! The document as a tree of nodes that know where they were written.
//!
//! [`parse`] reads the text once with granit-parser's event stream, whose
//! every event carries its span, and builds [`Node`]s that keep the line and
//! column of their first character (and, for mapping entries, of their key).
//! Syntax errors come back as a [`Syntax`] kind chosen from the parser's
//! typed [`ErrorKind`], at the parser's marker. Checks of a whole document
//! find the value at a path with [`Node::find`].

use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;

use granit_parser::{ErrorKind, Event, Marker, Parser, ScalarStyle, Span};

/// A 1-based line and column (in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pos {
    pub(crate) line: usize,
    pub(crate) column: usize,
}

/// One step of a document path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seg {
    Key(String),
    Index(usize),
}

/// A document path as users read it: `labs[0].nodes[1].cpus`.
pub(crate) fn render_path(segs: &[Seg]) -> String {
    let mut out = String::new();
    for s in segs {
        match s {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// What of a path's end [`Node::find`] points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Aim {
    /// The value.
    Value,
    /// The last key itself (for values that are empty or absent).
    Key,
}

/// A scalar as written: its text after escapes, and whether it was plain
/// (unquoted, untagged), which is when YAML reads it as null, a boolean or
/// a number.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Scalar {
    pub(crate) text: String,
    pub(crate) plain: bool,
}

/// A scalar's value under YAML 1.2's core schema, as serde_yaml read it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Resolved<'a> {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(&'a str),
}

impl Scalar {
    pub(crate) fn resolve(&self) -> Resolved<'_> {
        if !self.plain {
            return Resolved::Str(&self.text);
        }
        let t = self.text.as_str();
        match t {
            "" | "~" | "null" | "Null" | "NULL" => return Resolved::Null,
            "true" | "True" | "TRUE" => return Resolved::Bool(true),
            "false" | "False" | "FALSE" => return Resolved::Bool(false),
            _ => {}
        }
        if let Some(n) = parse_int(t) {
            return Resolved::Int(n);
        }
        if let Some(x) = parse_float(t) {
            return Resolved::Float(x);
        }
        Resolved::Str(t)
    }
}

/// Decimal, `0x`, `0o` and `0b` integers with an optional sign; a decimal
/// with a leading zero (`0123`) is text, as YAML 1.2 says.
fn parse_int(t: &str) -> Option<i128> {
    let (negative, digits) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let (radix, body) = if let Some(b) = digits.strip_prefix("0x") {
        (16, b)
    } else if let Some(b) = digits.strip_prefix("0o") {
        (8, b)
    } else if let Some(b) = digits.strip_prefix("0b") {
        (2, b)
    } else {
        if digits.len() > 1 && digits.starts_with('0') {
            return None;
        }
        (10, digits)
    };
    if body.is_empty() || !body.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let n = i128::from_str_radix(body, radix).ok()?;
    Some(if negative { -n } else { n })
}

fn parse_float(t: &str) -> Option<f64> {
    let unsigned = t.strip_prefix(['+', '-']).unwrap_or(t);
    match unsigned {
        ".inf" | ".Inf" | ".INF" => {
            return Some(if t.starts_with('-') {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            })
        }
        ".nan" | ".NaN" | ".NAN" if unsigned == t => return Some(f64::NAN),
        _ => {}
    }
    // Rust also reads `inf` and `NaN`, which YAML does not: digits must be there.
    if !unsigned.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return None;
    }
    if unsigned.len() > 1 && unsigned.starts_with('0') && unsigned.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse::<f64>().ok().filter(|x| x.is_finite())
}

/// A mapping entry: the key keeps its own position.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) key: Rc<Node>,
    pub(crate) value: Rc<Node>,
}

/// What a node holds.
#[derive(Debug)]
pub(crate) enum Value {
    Scalar(Scalar),
    Seq(Vec<Rc<Node>>),
    /// Entries in file order, duplicates kept (the reader refuses them
    /// where it meets them, so the error points at the second one).
    Map(Vec<Entry>),
}

/// A value and where it starts. An alias is the anchored node itself, so
/// it points where the anchored value was written.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) pos: Pos,
    pub(crate) value: Value,
    /// Nodes in this one, counting what aliases repeat: bounds the work
    /// of reading a document of nested aliases.
    size: usize,
}

impl Node {
    /// The value of a document with no content: null, at its start.
    pub(crate) fn empty_document() -> Node {
        Node {
            pos: Pos { line: 1, column: 1 },
            value: Value::Scalar(Scalar {
                text: String::new(),
                plain: true,
            }),
            size: 1,
        }
    }

    /// The scalar text of a key, for looking it up and for messages.
    pub(crate) fn key_text(&self) -> Option<&str> {
        match &self.value {
            Value::Scalar(s) => Some(&s.text),
            _ => None,
        }
    }

    /// The position of the value at `segs` (or, with [`Aim::Key`], of the
    /// key naming it); `None` when the document has no such value.
    pub(crate) fn find(&self, segs: &[Seg], aim: Aim) -> Option<Pos> {
        let Some((first, rest)) = segs.split_first() else {
            return Some(self.pos);
        };
        match (first, &self.value) {
            (Seg::Key(k), Value::Map(entries)) => {
                let entry = entries.iter().find(|e| e.key.key_text() == Some(k))?;
                if rest.is_empty() && aim == Aim::Key {
                    Some(entry.key.pos)
                } else {
                    entry.value.find(rest, aim)
                }
            }
            (Seg::Index(i), Value::Seq(items)) => items.get(*i)?.find(rest, aim),
            _ => None,
        }
    }
}

/// A syntax error's kind, from the parser's typed error or the reader's
/// own limits.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Syntax {
    /// A line does not line up with the keys of its mapping.
    KeyIndent,
    /// A line does not line up with the items of its list.
    ItemIndent,
    /// `key: value` where no mapping can start (`name: a: b`).
    ValueNotAllowed,
    /// A mapping line without `:`.
    KeyWithoutColon,
    /// A character that cannot start a value (`@`, `` ` ``).
    ReservedCharacter(char),
    /// A quoted value that never ends; reported where it starts.
    UnclosedQuote,
    /// A `[` or `{` that is never closed.
    UnclosedBracket,
    /// An alias (`*name`) with no anchor (`&name`) before it.
    UnknownAnchor,
    /// A tab in indentation.
    Tab,
    /// More than one document (`---`).
    SeveralDocuments,
    /// Lists and mappings nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// Aliases that repeat more than [`MAX_NODES`] values.
    TooManyAliases,
    /// Anything else the parser refuses, in its own words (shown, never read).
    Other(String),
}

/// A syntax error and where it is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SyntaxError {
    pub(crate) pos: Pos,
    pub(crate) kind: Syntax,
}

/// How deep lists and mappings may nest: far more than any labs file, few
/// enough that reading one never runs out of stack.
pub(crate) const MAX_DEPTH: usize = 64;

/// How many values a document may hold, aliases expanded.
pub(crate) const MAX_NODES: usize = 100_000;

fn pos_of(m: &Marker) -> Pos {
    Pos {
        line: m.line(),
        column: m.col() + 1,
    }
}

impl From<&ErrorKind> for Syntax {
    fn from(kind: &ErrorKind) -> Self {
        match kind {
            ErrorKind::ExpectedBlockMappingKey => Syntax::KeyIndent,
            ErrorKind::ExpectedBlockSequenceEntry => Syntax::ItemIndent,
            ErrorKind::MappingValueNotAllowed => Syntax::ValueNotAllowed,
            ErrorKind::SimpleKeyExpected => Syntax::KeyWithoutColon,
            ErrorKind::UnexpectedCharacter { character } => Syntax::ReservedCharacter(*character),
            ErrorKind::UnclosedQuotedScalar => Syntax::UnclosedQuote,
            ErrorKind::UnclosedFlowCollection { .. }
            | ErrorKind::UnexpectedEofFlowSequence
            | ErrorKind::UnexpectedEofFlowMapping => Syntax::UnclosedBracket,
            ErrorKind::UnknownAnchor => Syntax::UnknownAnchor,
            ErrorKind::TabInIndentation | ErrorKind::TabInBlockIndentation => Syntax::Tab,
            ErrorKind::RecursionLimitExceeded => Syntax::TooDeep,
            ErrorKind::MultipleDocumentsUnsupported => Syntax::SeveralDocuments,
            other => Syntax::Other(other.to_string()),
        }
    }
}

/// A collection being read.
enum Open {
    Seq(Vec<Rc<Node>>),
    Map(Vec<Entry>, Option<Rc<Node>>),
}

struct Frame {
    pos: Pos,
    anchor: usize,
    open: Open,
}

/// Reads `text` as one YAML document; `Ok(None)` for a document with no
/// content at all (only comments).
pub(crate) fn parse(text: &str) -> Result<Option<Rc<Node>>, SyntaxError> {
    let options = granit_parser::options! {
        flow_nesting_limit: MAX_DEPTH,
        block_nesting_limit: MAX_DEPTH,
    };
    let mut stack: Vec<Frame> = Vec::new();
    let mut anchors: HashMap<usize, Rc<Node>> = HashMap::new();
    let mut root: Option<Rc<Node>> = None;
    let mut documents = 0;
    let mut total = 0usize;
    for event in Parser::new_from_str_with_options(text, options) {
        let (event, span) = event.map_err(|e| SyntaxError {
            pos: pos_of(e.marker()),
            kind: Syntax::from(e.kind()),
        })?;
        let pos = pos_of(&span.start);
        let node = match event {
            Event::DocumentStart(..) => {
                documents += 1;
                if documents > 1 {
                    return Err(SyntaxError {
                        pos,
                        kind: Syntax::SeveralDocuments,
                    });
                }
                continue;
            }
            Event::Scalar(text_of, style, anchor, tag) => {
                let forced_text = tag.as_ref().is_some_and(|t| t.is_yaml_core_schema_tag("str"));
                let node = Rc::new(Node {
                    pos: empty_value_pos(text, &span).unwrap_or(pos),
                    value: Value::Scalar(Scalar {
                        // An empty value is read as `~`; keep it empty, as written.
                        text: if span.start.index() == span.end.index() {
                            String::new()
                        } else {
                            text_of.into_owned()
                        },
                        plain: style == ScalarStyle::Plain && !forced_text,
                    }),
                    size: 1,
                });
                if anchor != 0 {
                    anchors.insert(anchor, node.clone());
                }
                node
            }
            Event::Alias(id) => {
                let Some(node) = anchors.get(&id) else {
                    // An alias inside the value it names.
                    return Err(SyntaxError {
                        pos,
                        kind: Syntax::Other("an alias refers to the value that contains it".into()),
                    });
                };
                node.clone()
            }
            Event::SequenceStart(_, anchor, _) => {
                stack.push(Frame {
                    pos,
                    anchor,
                    open: Open::Seq(Vec::new()),
                });
                continue;
            }
            Event::MappingStart(_, anchor, _) => {
                stack.push(Frame {
                    pos,
                    anchor,
                    open: Open::Map(Vec::new(), None),
                });
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some(frame) = stack.pop() else { continue };
                let (value, size) = match frame.open {
                    Open::Seq(items) => {
                        let size = 1 + items.iter().map(|n| n.size).sum::<usize>();
                        (Value::Seq(items), size)
                    }
                    Open::Map(entries, _) => {
                        let size = 1 + entries.iter().map(|e| e.key.size + e.value.size).sum::<usize>();
                        (Value::Map(entries), size)
                    }
                };
                let node = Rc::new(Node {
                    pos: frame.pos,
                    value,
                    size,
                });
                if frame.anchor != 0 {
                    anchors.insert(frame.anchor, node.clone());
                }
                node
            }
            _ => continue,
        };
        total = total.saturating_add(node.size);
        if total > MAX_NODES {
            return Err(SyntaxError {
                pos,
                kind: Syntax::TooManyAliases,
            });
        }
        match stack.last_mut() {
            None => root = Some(node),
            Some(Frame {
                open: Open::Seq(items), ..
            }) => items.push(node),
            Some(Frame {
                open: Open::Map(entries, key),
                ..
            }) => match key.take() {
                None => *key = Some(node),
                Some(k) => entries.push(Entry { key: k, value: node }),
            },
        }
    }
    Ok(root)
}

/// The parser puts an empty value (`name:`) on its `:`; users read it as
/// the place right after, where the value would go (as a `- ` item's empty
/// value already is).
fn empty_value_pos(text: &str, span: &Span) -> Option<Pos> {
    if span.start.index() != span.end.index() {
        return None;
    }
    let at = span.start.byte_offset()?;
    text.get(at..)?.starts_with(':').then(|| Pos {
        line: span.start.line(),
        column: span.start.col() + 2,
    })
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}
