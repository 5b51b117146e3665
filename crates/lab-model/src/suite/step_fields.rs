//! Reading a [`SuiteStep`]: one mapping holds the step's own keys (`name`,
//! `exec`, `timeout_s`, ...) and a `labctl run`'s ([`WorkloadRequest`]'s,
//! `size`, `qps`, ...) side by side. serde's `flatten` would read the
//! request from a buffered copy of the mapping, losing each value's
//! position and the refusal of unknown keys; here the request's own derived
//! reader runs on the mapping itself, and the step's keys are taken out on
//! the way, so every error still points at its key or value.

use std::fmt;
use std::sync::OnceLock;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::{CollectStep, CopyStep, ExecStep, PairStep, SuiteStep};
use crate::request::WorkloadRequest;

/// The step's own keys, in the order the schema lists them.
const STEP_KEYS: &[&str] = &[
    "name",
    "setup",
    "timeout_s",
    "retries",
    "workload",
    "copy",
    "collect",
    "exec",
    "pair",
    "trace",
];

/// Every key a step may have: its own, then the request's.
fn every_key() -> &'static [&'static str] {
    static KEYS: OnceLock<Vec<&'static str>> = OnceLock::new();
    KEYS.get_or_init(|| STEP_KEYS.iter().chain(WorkloadRequest::keys()).copied().collect())
}

impl<'de> Deserialize<'de> for SuiteStep {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SuiteStep, D::Error> {
        d.deserialize_map(StepVisitor)
    }
}

struct StepVisitor;

impl<'de> Visitor<'de> for StepVisitor {
    type Value = SuiteStep;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a step: a mapping with `workload:`, `copy:`, `collect:`, `exec:` or `pair:`")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<SuiteStep, A::Error> {
        let mut step = SuiteStep::default();
        step.request = WorkloadRequest::deserialize(Split { map, step: &mut step })?;
        Ok(step)
    }
}

/// The step's mapping as the request's reader sees it: only the request's
/// keys; the step's own are read into `step` as they go by.
struct Split<'s, A> {
    map: A,
    step: &'s mut SuiteStep,
}

impl<'de, A: MapAccess<'de>> Deserializer<'de> for Split<'_, A> {
    type Error = A::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, A::Error> {
        visitor.visit_map(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Split<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, A::Error> {
        loop {
            match self.map.next_key_seed(KeySeed)? {
                None => return Ok(None),
                Some(Key::Request(name)) => {
                    return seed
                        .deserialize(de::value::BorrowedStrDeserializer::new(name))
                        .map(Some)
                }
                Some(Key::Step(name)) => self.read_step_value(name)?,
            }
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

impl<'de, A: MapAccess<'de>> Split<'_, A> {
    /// Reads the value of the step's own key `name` into the step.
    fn read_step_value(&mut self, name: &str) -> Result<(), A::Error> {
        let (map, step) = (&mut self.map, &mut *self.step);
        match name {
            "name" => step.name = map.next_value::<Option<String>>()?,
            "setup" => step.setup = map.next_value()?,
            "timeout_s" => step.timeout_s = map.next_value::<Option<u64>>()?,
            "retries" => step.retries = map.next_value()?,
            "workload" => step.workload = Some(map.next_value::<WorkloadName>()?.0),
            "copy" => step.copy = map.next_value::<Option<CopyStep>>()?,
            "collect" => step.collect = map.next_value::<Option<CollectStep>>()?,
            "exec" => step.exec = map.next_value::<Option<ExecStep>>()?,
            "pair" => step.pair = map.next_value::<Option<PairStep>>()?,
            "trace" => step.trace = map.next_value()?,
            other => unreachable!("`{other}` is not in STEP_KEYS"),
        }
        Ok(())
    }
}

/// Whose a key is.
enum Key {
    Step(&'static str),
    Request(&'static str),
}

/// Sorts a key while the reader points at it, so an unknown key is refused
/// at its position, with every key a step may have.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Key;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Key, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl Visitor<'_> for KeySeed {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a step's key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Key, E> {
        // `timeout` is the older spelling of `timeout_s`.
        let key = if key == "timeout" { "timeout_s" } else { key };
        if let Some(own) = STEP_KEYS.iter().find(|k| **k == key) {
            return Ok(Key::Step(own));
        }
        match WorkloadRequest::keys().iter().find(|k| **k == key) {
            Some(field) => Ok(Key::Request(field)),
            None => Err(E::unknown_field(key, every_key())),
        }
    }
}

/// A `workload:` value: a catalogue name, checked where it is written.
struct WorkloadName(String);

impl<'de> Deserialize<'de> for WorkloadName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<WorkloadName, D::Error> {
        crate::scalar::de_workload(d).map(WorkloadName)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_the_step_keys_are_the_schemas_own_properties() {
        let schema = serde_json::to_value(schemars::schema_for!(SuiteStep)).unwrap();
        let properties: Vec<&str> = schema["properties"]
            .as_object()
            .expect("a step's schema lists its properties")
            .keys()
            .map(String::as_str)
            .collect();
        let mut expected: Vec<&str> = every_key().to_vec();
        let mut listed = properties.clone();
        expected.sort_unstable();
        listed.sort_unstable();
        assert_eq!(
            listed, expected,
            "STEP_KEYS and the request's keys are the step's schema"
        );
    }

    #[test]
    fn test_every_step_key_is_read_into_the_step() {
        // A key listed in STEP_KEYS but missing from read_step_value would
        // panic here (unreachable!), where a parse error is fine.
        for key in STEP_KEYS {
            let text = format!("steps:\n  - {key}: ~\n");
            let _ = crate::suite::Suite::parse(std::path::Path::new("suite.yaml"), &text);
        }
    }
}
