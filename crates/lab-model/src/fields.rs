//! The field names serde's derive gives a struct, read back from the
//! derive itself (it passes them to `deserialize_struct`), so a list of a
//! struct's keys is never written by hand beside the struct.

use serde::de::{self, Visitor};

/// The names of `T`'s fields as its derived `Deserialize` reads them.
pub(crate) fn of<'de, T: de::Deserialize<'de>>() -> Vec<&'static str> {
    let mut names = Vec::new();
    let _ = T::deserialize(FieldNames(&mut names));
    names
}

/// A deserializer that only records the field list it is handed.
struct FieldNames<'a>(&'a mut Vec<&'static str>);

#[derive(Debug)]
struct Recorded;

impl std::fmt::Display for Recorded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("field names recorded")
    }
}

impl std::error::Error for Recorded {}

impl de::Error for Recorded {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Recorded
    }
}

impl<'de> de::Deserializer<'de> for FieldNames<'_> {
    type Error = Recorded;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Recorded> {
        self.0.extend_from_slice(fields);
        Err(Recorded)
    }

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Recorded> {
        Err(Recorded)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn test_the_names_are_those_serde_reads_and_skipped_fields_are_not_among_them() {
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        struct Two {
            first: u32,
            #[serde(rename = "second_key")]
            second: u32,
            #[serde(skip)]
            hidden: u32,
        }
        assert_eq!(super::of::<Two>(), ["first", "second_key"]);
    }
}
