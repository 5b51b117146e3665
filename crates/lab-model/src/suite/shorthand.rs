//! The suite's parsing helpers that know no suite type: [`Shorthand`], the
//! visitor for values written short (one string, a list of strings) or
//! long (a mapping), and the `ready:` regular expression checked while the
//! parser still points at the value.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use crate::problem::Problem;

/// A value given as one string, a list of strings, or a mapping (the long
/// form `L`), turned into `T` by `short`/`long`. The mapping is read by
/// `L`'s own Deserialize, so its errors keep their position.
pub(super) struct Shorthand<T, L> {
    pub(super) expecting: &'static str,
    pub(super) short: fn(Result<String, Vec<String>>) -> Result<T, Problem>,
    pub(super) long: fn(L) -> T,
    pub(super) marker: PhantomData<L>,
}

impl<'de, T, L: Deserialize<'de>> Visitor<'de> for Shorthand<T, L> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.expecting)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        (self.short)(Ok(v.to_string())).map_err(Problem::into_de)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
        let words = Vec::<String>::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        (self.short)(Err(words)).map_err(Problem::into_de)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        L::deserialize(de::value::MapAccessDeserializer::new(map)).map(self.long)
    }
}

/// A mapping-less value: there is no long form.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NoLongForm {}

pub(super) fn de_some_regex<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    use crate::scalar::{scalar, Scalar};
    let fix = "write a regular expression (Rust regex syntax) that matches a line the server prints when it is ready";
    scalar(d, |v| match v {
        Scalar::Str(text) => match regex::Regex::new(&text) {
            Ok(_) => Ok(Some(text.into_owned())),
            Err(e) => {
                let why = e.to_string();
                let why = why.lines().last().unwrap_or_default().trim();
                let why = why.strip_prefix("error: ").unwrap_or(why).to_string();
                Err(Problem::new(format!("`ready` is not a regular expression: {why}"), fix))
            }
        },
        other => Err(Problem::new(
            format!("`ready` must be a regular expression, found {}", other.describe()),
            fix,
        )),
    })
}
