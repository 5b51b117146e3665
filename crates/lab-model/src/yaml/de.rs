//! A serde `Deserializer` over the node tree, whose errors are typed and
//! located.
//!
//! serde's derived code reports a problem through the `de::Error` hooks
//! (`unknown_field`, `missing_field`, `invalid_type`, ...); [`Error`]
//! implements each hook as its own variant, so the file's wording is chosen
//! from data (the field, the path, what was wanted and found), never from
//! message text. The node being read when an error rises gives it its
//! position and path. Our own checks' [`Problem`]s arrive through
//! `de::Error::custom` in the frame `Problem::into_de` writes.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Visitor};

use super::tree::{Node, Pos, Resolved, Seg, Value};
use crate::problem::Problem;

/// What a value had to be, for wrong-type messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Want {
    Bool,
    /// A whole number in `min..=max`.
    Int {
        min: i128,
        max: i128,
    },
    Float,
    Str,
    Seq,
    Map,
    Null,
    /// What a visitor of its own expects, in its words.
    Other(String),
}

/// What a value was, for wrong-type messages.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Found {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq,
    Map,
    /// What serde's visitor saw, in serde's words (only for values of
    /// kinds YAML has no node for).
    Other(String),
}

impl Found {
    fn of(node: &Node) -> Found {
        match &node.value {
            Value::Seq(_) => Found::Seq,
            Value::Map(_) => Found::Map,
            Value::Scalar(s) => match s.resolve() {
                Resolved::Null => Found::Null,
                Resolved::Bool(b) => Found::Bool(b),
                Resolved::Int(n) => Found::Int(n),
                Resolved::Float(x) => Found::Float(x),
                Resolved::Str(t) => Found::Str(t.to_string()),
            },
        }
    }

    fn from_unexpected(u: de::Unexpected<'_>) -> Found {
        use de::Unexpected as U;
        match u {
            U::Bool(b) => Found::Bool(b),
            U::Unsigned(n) => Found::Int(n.into()),
            U::Signed(n) => Found::Int(n.into()),
            U::Float(x) => Found::Float(x),
            U::Str(s) => Found::Str(s.to_string()),
            U::Char(c) => Found::Str(c.to_string()),
            U::Unit | U::Option => Found::Null,
            U::Seq => Found::Seq,
            U::Map => Found::Map,
            other => Found::Other(other.to_string()),
        }
    }
}

/// Why a document could not be read into the model.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ErrorKind {
    /// One of our checks refused the value.
    Problem(Problem),
    /// A key that is not a field of this mapping.
    UnknownField {
        field: String,
        expected: &'static [&'static str],
    },
    /// A required field is absent.
    MissingField(&'static str),
    /// A key given twice in one mapping.
    DuplicateKey(String),
    /// A value of the wrong type (or a number out of the type's range).
    WrongType { want: Want, found: Found },
    /// A name that is not one of an enumeration's.
    UnknownVariant {
        variant: String,
        expected: &'static [&'static str],
    },
    /// Anything else serde reports (lengths, custom messages of code not
    /// ours), in its words: shown, never read.
    Other(String),
}

/// An error with the position and path of the node it is about (the
/// mapping's path, for an unknown key).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Error {
    pub(crate) pos: Option<Pos>,
    pub(crate) path: Vec<Seg>,
    pub(crate) kind: ErrorKind,
}

impl Error {
    fn new(kind: ErrorKind) -> Self {
        Error {
            pos: None,
            path: Vec::new(),
            kind,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Only for serde's trait bounds; callers word errors from `kind`.
        write!(f, "{:?}", self.kind)
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        let msg = msg.to_string();
        Error::new(match Problem::from_frame(&msg) {
            Some(p) => ErrorKind::Problem(p),
            None => ErrorKind::Other(msg),
        })
    }

    fn invalid_type(unexp: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        Error::new(ErrorKind::WrongType {
            want: Want::Other(exp.to_string()),
            found: Found::from_unexpected(unexp),
        })
    }

    fn invalid_value(unexp: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        Self::invalid_type(unexp, exp)
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        Error::new(ErrorKind::UnknownVariant {
            variant: variant.to_string(),
            expected,
        })
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        Error::new(ErrorKind::UnknownField {
            field: field.to_string(),
            expected,
        })
    }

    fn missing_field(field: &'static str) -> Self {
        Error::new(ErrorKind::MissingField(field))
    }

    fn duplicate_field(field: &'static str) -> Self {
        Error::new(ErrorKind::DuplicateKey(field.to_string()))
    }
}

/// Reads `T` from `root` (`None`: a document with no content, read as
/// null).
pub(crate) fn from_node<'de, T: de::Deserialize<'de>>(root: Option<&Node>) -> Result<T, Error> {
    let empty = Node::empty_document();
    T::deserialize(De {
        node: root.unwrap_or(&empty),
        path: Vec::new(),
    })
}

/// A node and its path.
struct De<'n> {
    node: &'n Node,
    path: Vec<Seg>,
}

impl De<'_> {
    /// Gives an error that has no position yet this node's.
    fn at(&self, mut e: Error) -> Error {
        if e.pos.is_none() {
            e.pos = Some(self.node.pos);
            e.path = self.path.clone();
            if let ErrorKind::WrongType { found, .. } = &mut e.kind {
                // The node says what it is in YAML's terms (a number, not
                // a u64).
                if !matches!(found, Found::Other(_)) {
                    *found = Found::of(self.node);
                }
            }
        }
        e
    }

    fn wrong(&self, want: Want) -> Error {
        self.at(Error::new(ErrorKind::WrongType {
            want,
            found: Found::of(self.node),
        }))
    }

    fn resolved(&self) -> Option<Resolved<'_>> {
        match &self.node.value {
            Value::Scalar(s) => Some(s.resolve()),
            _ => None,
        }
    }

    fn is_null(&self) -> bool {
        matches!(self.resolved(), Some(Resolved::Null))
    }
}

macro_rules! int_methods {
    ($($method:ident $t:ty => $visit:ident;)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            let want = Want::Int { min: <$t>::MIN as i128, max: <$t>::MAX as i128 };
            match self.resolved() {
                Some(Resolved::Int(n)) => match <$t>::try_from(n) {
                    Ok(v) => visitor.$visit(v).map_err(|e| self.at(e)),
                    Err(_) => Err(self.wrong(want)),
                },
                _ => Err(self.wrong(want)),
            }
        }
    )*};
}

impl<'de> de::Deserializer<'de> for De<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let out = match &self.node.value {
            Value::Seq(items) => visitor.visit_seq(SeqAccess {
                items: items.iter(),
                index: 0,
                path: &self.path,
            }),
            Value::Map(entries) => visitor.visit_map(MapAccess::new(entries, &self.path)),
            Value::Scalar(s) => match s.resolve() {
                Resolved::Null => visitor.visit_unit(),
                Resolved::Bool(b) => visitor.visit_bool(b),
                Resolved::Int(n) => match (u64::try_from(n), i64::try_from(n)) {
                    (Ok(u), _) => visitor.visit_u64(u),
                    (_, Ok(i)) => visitor.visit_i64(i),
                    _ => visitor.visit_i128(n),
                },
                Resolved::Float(x) => visitor.visit_f64(x),
                Resolved::Str(t) => visitor.visit_str(t),
            },
        };
        out.map_err(|e| self.at(e))
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.resolved() {
            Some(Resolved::Bool(b)) => visitor.visit_bool(b).map_err(|e| self.at(e)),
            _ => Err(self.wrong(Want::Bool)),
        }
    }

    int_methods! {
        deserialize_i8 i8 => visit_i8;
        deserialize_i16 i16 => visit_i16;
        deserialize_i32 i32 => visit_i32;
        deserialize_i64 i64 => visit_i64;
        deserialize_u8 u8 => visit_u8;
        deserialize_u16 u16 => visit_u16;
        deserialize_u32 u32 => visit_u32;
        deserialize_u64 u64 => visit_u64;
        deserialize_i128 i128 => visit_i128;
    }

    fn deserialize_u128<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.resolved() {
            Some(Resolved::Int(n)) if n >= 0 => visitor.visit_u128(n as u128).map_err(|e| self.at(e)),
            _ => Err(self.wrong(Want::Int { min: 0, max: i128::MAX })),
        }
    }

    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.resolved() {
            Some(Resolved::Float(x)) => visitor.visit_f64(x).map_err(|e| self.at(e)),
            Some(Resolved::Int(n)) => visitor.visit_f64(n as f64).map_err(|e| self.at(e)),
            _ => Err(self.wrong(Want::Float)),
        }
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    /// Any scalar as written (`version: 1.10` is the text "1.10"), as
    /// serde_yaml read it.
    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match &self.node.value {
            Value::Scalar(s) => visitor.visit_str(&s.text).map_err(|e| self.at(e)),
            _ => Err(self.wrong(Want::Str)),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_any(visitor)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_any(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        if self.is_null() {
            visitor.visit_none().map_err(|e| self.at(e))
        } else {
            let (node, path) = (self.node, self.path.clone());
            visitor.visit_some(self).map_err(|e| De { node, path }.at(e))
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        if self.is_null() {
            visitor.visit_unit().map_err(|e| self.at(e))
        } else {
            Err(self.wrong(Want::Null))
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(self, _: &'static str, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _: &'static str, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    /// A list; an empty value is an empty list.
    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match &self.node.value {
            Value::Seq(_) => self.deserialize_any(visitor),
            _ if self.is_null() => visitor
                .visit_seq(SeqAccess {
                    items: [].iter(),
                    index: 0,
                    path: &self.path,
                })
                .map_err(|e| self.at(e)),
            _ => Err(self.wrong(Want::Seq)),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _: usize, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    /// A mapping; an empty value is an empty mapping.
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match &self.node.value {
            Value::Map(_) => self.deserialize_any(visitor),
            _ if self.is_null() => visitor
                .visit_map(MapAccess::new(&[], &self.path))
                .map_err(|e| self.at(e)),
            _ => Err(self.wrong(Want::Map)),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_map(visitor)
    }

    /// A unit variant by name (`cm: oob`), or `{variant: value}`.
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match &self.node.value {
            Value::Scalar(_) => visitor
                .visit_enum(EnumAccess {
                    key: De {
                        node: self.node,
                        path: self.path.clone(),
                    },
                    value: None,
                })
                .map_err(|e| self.at(e)),
            Value::Map(entries) if entries.len() == 1 => {
                let entry = &entries[0];
                let mut path = self.path.clone();
                path.push(Seg::Key(entry.key.key_text().unwrap_or_default().to_string()));
                visitor
                    .visit_enum(EnumAccess {
                        key: De {
                            node: &entry.key,
                            path: self.path.clone(),
                        },
                        value: Some(De {
                            node: &entry.value,
                            path,
                        }),
                    })
                    .map_err(|e| self.at(e))
            }
            _ => Err(self.wrong(Want::Other("a name".into()))),
        }
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }
}

struct SeqAccess<'n, 'p> {
    items: std::slice::Iter<'n, std::rc::Rc<Node>>,
    index: usize,
    path: &'p [Seg],
}

impl<'de> de::SeqAccess<'de> for SeqAccess<'_, '_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Error> {
        let Some(node) = self.items.next() else {
            return Ok(None);
        };
        let mut path = self.path.to_vec();
        path.push(Seg::Index(self.index));
        self.index += 1;
        let de = De { node, path };
        let (node, path) = (de.node, de.path.clone());
        seed.deserialize(de).map(Some).map_err(|e| De { node, path }.at(e))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct MapAccess<'n, 'p> {
    entries: std::slice::Iter<'n, super::tree::Entry>,
    value: Option<&'n Node>,
    key: String,
    seen: HashSet<&'n str>,
    path: &'p [Seg],
}

impl<'n, 'p> MapAccess<'n, 'p> {
    fn new(entries: &'n [super::tree::Entry], path: &'p [Seg]) -> Self {
        MapAccess {
            entries: entries.iter(),
            value: None,
            key: String::new(),
            seen: HashSet::new(),
            path,
        }
    }
}

impl<'de> de::MapAccess<'de> for MapAccess<'_, '_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        let Some(entry) = self.entries.next() else {
            return Ok(None);
        };
        let key = De {
            node: &entry.key,
            path: self.path.to_vec(),
        };
        if let Some(text) = entry.key.key_text() {
            if !self.seen.insert(text) {
                let mut path = self.path.to_vec();
                path.push(Seg::Key(text.to_string()));
                return Err(Error {
                    pos: Some(entry.key.pos),
                    path,
                    kind: ErrorKind::DuplicateKey(text.to_string()),
                });
            }
        }
        self.key = entry.key.key_text().unwrap_or_default().to_string();
        self.value = Some(&entry.value);
        let (node, path) = (key.node, key.path.clone());
        seed.deserialize(key).map(Some).map_err(|e| De { node, path }.at(e))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let node = self.value.take().expect("serde asks for a value after its key");
        let mut path = self.path.to_vec();
        path.push(Seg::Key(std::mem::take(&mut self.key)));
        let p = path.clone();
        seed.deserialize(De { node, path })
            .map_err(|e| De { node, path: p }.at(e))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

struct EnumAccess<'n> {
    key: De<'n>,
    value: Option<De<'n>>,
}

impl<'de, 'n> de::EnumAccess<'de> for EnumAccess<'n> {
    type Error = Error;
    type Variant = Variant<'n>;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Variant<'n>), Error> {
        let (node, path) = (self.key.node, self.key.path.clone());
        let v = seed.deserialize(self.key).map_err(|e| De { node, path }.at(e))?;
        Ok((v, Variant(self.value)))
    }
}

struct Variant<'n>(Option<De<'n>>);

impl<'de> de::VariantAccess<'de> for Variant<'_> {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        match self.0 {
            None => Ok(()),
            Some(de) if de.is_null() => Ok(()),
            Some(de) => Err(de.wrong(Want::Null)),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        match self.0 {
            Some(de) => seed.deserialize(de),
            None => Err(Error::new(ErrorKind::WrongType {
                want: Want::Map,
                found: Found::Other("a name alone".into()),
            })),
        }
    }

    fn tuple_variant<V: Visitor<'de>>(self, _: usize, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Some(de) => de::Deserializer::deserialize_seq(de, visitor),
            None => Err(Error::new(ErrorKind::WrongType {
                want: Want::Seq,
                found: Found::Other("a name alone".into()),
            })),
        }
    }

    fn struct_variant<V: Visitor<'de>>(self, _: &'static [&'static str], visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Some(de) => de::Deserializer::deserialize_map(de, visitor),
            None => Err(Error::new(ErrorKind::WrongType {
                want: Want::Map,
                found: Found::Other("a name alone".into()),
            })),
        }
    }
}
