//! `expect:`: what a lab must deliver, in a lab or a ci suite.
//!
//! ```yaml
//! expect:
//!   write-bw: {size: 64KiB, min: 90Gb/s}   # average bandwidth at least
//!   write-lat: {size: 8, max: 3us}         # typical latency at most
//!   allreduce: {size: 1MiB, min: 40GB/s}   # bus bandwidth, as nccl-tests
//!   devices: 4                             # RDMA devices on every node
//!   link_rate: 100Gb/s                     # every data port at least
//!   mtu: 4096                              # the data port's active MTU
//!   fi_provider: efa                       # what libfabric runs must open
//! ```
//!
//! A key is one of the node facts above or a workload of the catalogue;
//! a workload takes `min` when it reports a bandwidth (or a collective's
//! bus bandwidth) and `max` when it reports a latency. Every value is
//! checked while the parser points at it, so a bad one is refused with its
//! line and column. Which command checks what is the orchestration crate's
//! business (doctor the node facts, bench and ci the figures).

use std::fmt;

use schemars::JsonSchema;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use workload_catalogue::{Metric, Workload};

use crate::located::{parse_located, DocumentKind};
use crate::problem::{did_you_mean, Problem};
use crate::scalar::{int_in, scalar, Scalar};
use crate::size::parse_size;

/// The node facts `expect:` can name, in the order they are checked.
pub const NODE_FACTS: [&str; 4] = ["devices", "link_rate", "mtu", "fi_provider"];

/// The active MTUs a port can have, bytes.
pub const PORT_MTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];

/// RDMA devices a node can be expected to have.
pub const DEVICES_RANGE: std::ops::RangeInclusive<u32> = 1..=64;

/// What a lab (or a suite) expects: node facts and workload figures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expectations {
    /// RDMA devices on every node, at least.
    pub devices: Option<u32>,
    /// Every data port's link rate, at least.
    pub link_rate: Option<Rate>,
    /// The data port's active MTU, bytes.
    pub mtu: Option<u32>,
    /// The libfabric provider fabric-* runs must open (`efa`, `tcp;ofi_rxm`).
    pub fi_provider: Option<String>,
    /// Figures of workloads, in file order.
    pub workloads: Vec<WorkloadExpectation>,
}

impl Expectations {
    /// Nothing is expected.
    pub fn is_empty(&self) -> bool {
        *self == Expectations::default()
    }

    /// Reads a file of expectations (the mapping `expect:` holds, at the
    /// top level), for `--expect FILE`; errors are located in it.
    pub fn load(path: &std::path::Path) -> Result<Expectations, String> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "{}: cannot read the expectations file: {e}\n  fix: check the path given to --expect",
                path.display()
            )
        })?;
        const EXPECT: DocumentKind = DocumentKind {
            shape: "an expectations file is what `expect:` holds: lines like `write-bw: {size: 64KiB, min: 10Gb/s}` or `mtu: 4096` (see docs/labs-yaml.md)",
            docs: "docs/labs-yaml.md",
        };
        parse_located(&text, &EXPECT).map_err(|e| e.in_file(path))
    }

    /// `self` with what `over` says put over it: a suite's expectations
    /// over its lab's (a workload at the same size replaced, others added).
    pub fn overlaid(&self, over: &Expectations) -> Expectations {
        let mut workloads: Vec<WorkloadExpectation> = self
            .workloads
            .iter()
            .filter(|w| {
                !over
                    .workloads
                    .iter()
                    .any(|o| o.workload == w.workload && o.size == w.size)
            })
            .cloned()
            .collect();
        workloads.extend(over.workloads.iter().cloned());
        Expectations {
            devices: over.devices.or(self.devices),
            link_rate: over.link_rate.clone().or_else(|| self.link_rate.clone()),
            mtu: over.mtu.or(self.mtu),
            fi_provider: over.fi_provider.clone().or_else(|| self.fi_provider.clone()),
            workloads,
        }
    }
}

/// One workload's figures at one message size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkloadExpectation {
    /// The workload.
    pub workload: String,
    /// Message size, bytes (the workload's default when not written).
    pub size: u64,
    /// Bandwidth at least: the average for pairs, the bus bandwidth for
    /// collectives.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min: Option<Rate>,
    /// Typical latency at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<Latency>,
}

/// A rate as written (`90Gb/s`, `12.5GB/s`, `800MiB/s`) and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rate {
    /// As written, trimmed.
    pub text: String,
    /// The unit it was written in.
    pub unit: RateUnit,
    /// Bits per second.
    pub bits_per_s: u64,
}

/// A unit of rate, bits (`Gb/s`) or bytes (`GB/s`, `MiB/s`) per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateUnit {
    /// How it is written.
    pub label: &'static str,
    /// Bits per second in one of it.
    pub bits_per_s: u64,
}

const RATE_UNITS: [RateUnit; 14] = [
    RateUnit {
        label: "b/s",
        bits_per_s: 1,
    },
    RateUnit {
        label: "Kb/s",
        bits_per_s: 1_000,
    },
    RateUnit {
        label: "Mb/s",
        bits_per_s: 1_000_000,
    },
    RateUnit {
        label: "Gb/s",
        bits_per_s: 1_000_000_000,
    },
    RateUnit {
        label: "Tb/s",
        bits_per_s: 1_000_000_000_000,
    },
    RateUnit {
        label: "B/s",
        bits_per_s: 8,
    },
    RateUnit {
        label: "KB/s",
        bits_per_s: 8_000,
    },
    RateUnit {
        label: "MB/s",
        bits_per_s: 8_000_000,
    },
    RateUnit {
        label: "GB/s",
        bits_per_s: 8_000_000_000,
    },
    RateUnit {
        label: "TB/s",
        bits_per_s: 8_000_000_000_000,
    },
    RateUnit {
        label: "KiB/s",
        bits_per_s: 8 << 10,
    },
    RateUnit {
        label: "MiB/s",
        bits_per_s: 8 << 20,
    },
    RateUnit {
        label: "GiB/s",
        bits_per_s: 8 << 30,
    },
    RateUnit {
        label: "TiB/s",
        bits_per_s: 8 << 40,
    },
];

/// Other spellings of the units: `Gbps`, `Gbit/s`.
const RATE_ALIASES: [(&str, &str); 8] = [
    ("bps", "b/s"),
    ("Kbps", "Kb/s"),
    ("Mbps", "Mb/s"),
    ("Gbps", "Gb/s"),
    ("Tbps", "Tb/s"),
    ("Mbit/s", "Mb/s"),
    ("Gbit/s", "Gb/s"),
    ("Tbit/s", "Tb/s"),
];

/// `text` trimmed, its leading number and the unit after it (trimmed, maybe
/// empty); None when it does not start with a number.
fn number_and_unit(text: &str) -> Option<(&str, f64, &str)> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    Some((t, number.parse().ok()?, unit.trim()))
}

impl Rate {
    /// `bits_per_s` in this rate's unit.
    pub fn in_unit(&self, bits_per_s: f64) -> f64 {
        bits_per_s / self.unit.bits_per_s as f64
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for Rate {
    type Err = String;

    /// A positive number and a unit: `90Gb/s`, `12.5 GB/s`, `800MiB/s`,
    /// `25Gbps`. Bits are `b`, bytes `B`; K, M, G, T are powers of 1000,
    /// Ki, Mi, Gi, Ti of 1024.
    fn from_str(text: &str) -> Result<Rate, String> {
        let (t, value, unit) = number_and_unit(text).ok_or_else(|| {
            format!("`{text}` is not a rate: write a number and a unit, like 90Gb/s, 12.5GB/s or 800MiB/s")
        })?;
        let unit = RATE_ALIASES.iter().find(|(a, _)| *a == unit).map_or(unit, |(_, u)| u);
        let unit = RATE_UNITS.iter().find(|u| u.label == unit).ok_or_else(|| {
            let labels: Vec<&str> = RATE_UNITS.iter().map(|u| u.label).collect();
            if unit.is_empty() {
                format!("`{text}` has no unit: add one of {}", labels.join(", "))
            } else {
                format!("`{unit}` is not a unit of rate: use one of {}", labels.join(", "))
            }
        })?;
        let bits = value * unit.bits_per_s as f64;
        if !(1.0..1e18).contains(&bits) {
            return Err(format!(
                "`{text}` is out of range: give a rate from 1b/s to 1000000Tb/s"
            ));
        }
        Ok(Rate {
            text: t.to_string(),
            unit: *unit,
            bits_per_s: bits.round() as u64,
        })
    }
}

/// A latency as written (`3us`, `1.5ms`) and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Latency {
    /// As written, trimmed.
    pub text: String,
    /// Its unit's label (`us`).
    pub unit: &'static str,
    /// Nanoseconds.
    pub ns: u64,
}

const LATENCY_UNITS: [(&str, u64); 5] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
];

impl Latency {
    /// Microseconds.
    pub fn us(&self) -> f64 {
        self.ns as f64 / 1e3
    }

    /// `us` microseconds in this latency's unit.
    pub fn in_unit(&self, us: f64) -> f64 {
        let per = LATENCY_UNITS
            .iter()
            .find(|(l, _)| *l == self.unit)
            .map_or(1_000, |(_, n)| *n);
        us * 1e3 / per as f64
    }
}

impl fmt::Display for Latency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for Latency {
    type Err = String;

    /// A positive number and a unit: `3us` (or `3µs`), `800ns`, `1.5ms`, `2s`.
    fn from_str(text: &str) -> Result<Latency, String> {
        let (t, value, unit) = number_and_unit(text)
            .ok_or_else(|| format!("`{text}` is not a latency: write a number and a unit, like 3us, 800ns or 1.5ms"))?;
        let (label, per) = LATENCY_UNITS.iter().find(|(l, _)| *l == unit).ok_or_else(|| {
            if unit.is_empty() {
                format!("`{text}` has no unit: add one of ns, us, ms, s")
            } else {
                format!("`{unit}` is not a unit of time: use one of ns, us, ms, s")
            }
        })?;
        let ns = value * *per as f64;
        if !(1.0..=3.6e12).contains(&ns) {
            return Err(format!("`{text}` is out of range: give a latency from 1ns to 3600s"));
        }
        Ok(Latency {
            text: t.to_string(),
            unit: label,
            ns: ns.round() as u64,
        })
    }
}

// ---------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------

/// What a key of `expect:` names.
enum Key {
    Devices,
    LinkRate,
    Mtu,
    FiProvider,
    Workload(&'static Workload),
}

/// What a workload's `min` is about, or why it takes none.
fn measures(w: &Workload) -> (bool, bool) {
    let bw = w.reports(Metric::Bandwidth) || w.reports(Metric::BusBandwidth);
    (bw, w.reports(Metric::Latency))
}

fn check_key(v: Scalar<'_>) -> Result<Key, Problem> {
    let expectable: Vec<&str> = NODE_FACTS
        .iter()
        .copied()
        .chain(workload_catalogue::names().filter(|n| {
            let (bw, lat) = measures(workload_catalogue::find(n).expect("a catalogue name"));
            bw || lat
        }))
        .collect();
    let fix = |word: &str| match did_you_mean(word, &expectable) {
        Some(m) => format!("write `{m}`"),
        None => format!("use one of: {}", expectable.join(", ")),
    };
    let s = match v {
        Scalar::Str(s) => s,
        other => {
            return Err(Problem::new(
                format!("an expectation's name must be text, found {}", other.describe()),
                fix(""),
            ))
        }
    };
    Ok(match s.as_ref() {
        "devices" => Key::Devices,
        "link_rate" => Key::LinkRate,
        "mtu" => Key::Mtu,
        "fi_provider" => Key::FiProvider,
        name => match workload_catalogue::find(name) {
            Some(w) if measures(w) != (false, false) => Key::Workload(w),
            Some(w) => {
                return Err(Problem::new(
                    format!("workload `{}` reports no bandwidth or latency to expect", w.name),
                    format!(
                        "expect a figure of a workload that measures one: {}",
                        expectable[4..].join(", ")
                    ),
                ))
            }
            None => return Err(Problem::new(format!("`{name}` is not something to expect"), fix(name))),
        },
    })
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        scalar(d, check_key)
    }
}

fn de_devices<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let fix = "set devices to the number of RDMA devices every node must have, like `devices: 4`";
    scalar(d, |v| match v {
        Scalar::Null => Err(Problem::new("devices is empty", fix)),
        v => int_in("devices", v, DEVICES_RANGE, fix).map(|n| n.expect("not null")),
    })
}

fn de_mtu<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let fix = "set mtu to a port MTU: 256, 512, 1024, 2048 or 4096";
    scalar(d, |v| match v {
        Scalar::Null => Err(Problem::new("mtu is empty", fix)),
        v => {
            let n = int_in("mtu", v, 1..=u32::MAX, fix)?.expect("not null");
            if PORT_MTUS.contains(&n) {
                Ok(n)
            } else {
                Err(Problem::new(format!("{n} is not an RDMA port MTU"), fix))
            }
        }
    })
}

fn de_fi_provider<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let fix = "name a libfabric provider as `fi_info -l` lists it, like `efa`, `verbs;ofi_rxm` or `tcp`";
    scalar(d, |v| match v {
        Scalar::Str(s)
            if !s.is_empty()
                && s.split(';').all(|p| !p.is_empty())
                && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ';') =>
        {
            Ok(s.into_owned())
        }
        other => Err(Problem::new(
            format!("fi_provider must be a provider's name, found {}", other.describe()),
            fix,
        )),
    })
}

fn rate(field: &str, v: Scalar<'_>) -> Result<Rate, Problem> {
    let fix = "write a rate with its unit, like 90Gb/s, 12.5GB/s or 800MiB/s";
    match v {
        Scalar::Str(s) => s.parse().map_err(|why| Problem::new(why, fix)),
        Scalar::Int(_) | Scalar::Float(_) => Err(Problem::new(format!("{field} has no unit"), fix)),
        other => Err(Problem::new(
            format!("{field} must be a rate, found {}", other.describe()),
            fix,
        )),
    }
}

fn de_link_rate<'de, D: Deserializer<'de>>(d: D) -> Result<Rate, D::Error> {
    scalar(d, |v| rate("link_rate", v))
}

fn de_min<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Rate>, D::Error> {
    scalar(d, |v| rate("min", v).map(Some))
}

fn de_max<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Latency>, D::Error> {
    let fix = "write a latency with its unit, like 3us, 800ns or 1.5ms";
    scalar(d, |v| match v {
        Scalar::Str(s) => s.parse().map(Some).map_err(|why: String| Problem::new(why, fix)),
        Scalar::Int(_) | Scalar::Float(_) => Err(Problem::new("max has no unit", fix)),
        other => Err(Problem::new(
            format!("max must be a latency, found {}", other.describe()),
            fix,
        )),
    })
}

fn de_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let fix = "write a message size in bytes or with a unit, like 8, 4096 or 64KiB";
    scalar(d, |v| match v {
        Scalar::Int(n) if (1..=1 << 30).contains(&n) => Ok(Some(n as u64)),
        Scalar::Str(s) => match parse_size(&s) {
            Ok(n) if (1..=1 << 30).contains(&n) => Ok(Some(n)),
            Ok(n) => Err(Problem::new(format!("size {n} is out of range (1 B ..= 1 GiB)"), fix)),
            Err(why) => Err(Problem::new(why, fix)),
        },
        Scalar::Int(n) => Err(Problem::new(format!("size {n} is out of range (1 B ..= 1 GiB)"), fix)),
        other => Err(Problem::new(
            format!("size must be a size, found {}", other.describe()),
            fix,
        )),
    })
}

/// A workload's threshold as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Threshold {
    #[serde(default, deserialize_with = "de_size")]
    size: Option<u64>,
    #[serde(default, deserialize_with = "de_min")]
    min: Option<Rate>,
    #[serde(default, deserialize_with = "de_max")]
    max: Option<Latency>,
}

/// Reads a workload's threshold and checks it against what the workload
/// measures, while the parser points at it.
struct ThresholdOf(&'static Workload);

impl<'de> DeserializeSeed<'de> for ThresholdOf {
    type Value = WorkloadExpectation;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<WorkloadExpectation, D::Error> {
        let w = self.0;
        let t = Threshold::deserialize(d)?;
        let (bw, lat) = measures(w);
        let example = if bw {
            format!("{}: {{size: 64KiB, min: 10Gb/s}}", w.name)
        } else {
            format!("{}: {{size: 8, max: 5us}}", w.name)
        };
        let problem = match (&t.min, &t.max) {
            (None, None) => Some(format!("{} expects nothing: give min or max", w.name)),
            (Some(_), _) if !bw => Some(format!(
                "{} measures latency, not bandwidth: min does not apply",
                w.name
            )),
            (_, Some(_)) if !lat => Some(format!(
                "{} measures bandwidth, not latency: max does not apply",
                w.name
            )),
            _ => None,
        };
        if let Some(message) = problem {
            return Err(Problem::new(message, format!("write it like `{example}`")).into_de());
        }
        Ok(WorkloadExpectation {
            workload: w.name.to_string(),
            size: t.size.unwrap_or(w.defaults.size),
            min: t.min,
            max: t.max,
        })
    }
}

impl<'de> Deserialize<'de> for Expectations {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Expectations, D::Error> {
        struct V;

        impl<'de> Visitor<'de> for V {
            type Value = Expectations;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping of expectations (`write-bw: {size: 64KiB, min: 10Gb/s}`, `mtu: 4096`)")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Expectations, A::Error> {
                let mut e = Expectations::default();
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::Devices => e.devices = Some(map.next_value::<DevicesValue>()?.0),
                        Key::LinkRate => e.link_rate = Some(map.next_value::<LinkRateValue>()?.0),
                        Key::Mtu => e.mtu = Some(map.next_value::<MtuValue>()?.0),
                        Key::FiProvider => e.fi_provider = Some(map.next_value::<FiProviderValue>()?.0),
                        Key::Workload(w) => e.workloads.push(map.next_value_seed(ThresholdOf(w))?),
                    }
                }
                Ok(e)
            }
        }

        d.deserialize_map(V)
    }
}

/// A value read by one of the functions above, as a type `next_value` takes.
macro_rules! read_with {
    ($name:ident, $t:ty, $f:ident) => {
        struct $name($t);

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<$name, D::Error> {
                $f(d).map($name)
            }
        }
    };
}

read_with!(DevicesValue, u32, de_devices);
read_with!(LinkRateValue, Rate, de_link_rate);
read_with!(MtuValue, u32, de_mtu);
read_with!(FiProviderValue, String, de_fi_provider);

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl Serialize for Latency {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl Serialize for Expectations {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        if let Some(n) = self.devices {
            m.serialize_entry("devices", &n)?;
        }
        if let Some(r) = &self.link_rate {
            m.serialize_entry("link_rate", r)?;
        }
        if let Some(n) = self.mtu {
            m.serialize_entry("mtu", &n)?;
        }
        if let Some(p) = &self.fi_provider {
            m.serialize_entry("fi_provider", p)?;
        }
        for w in &self.workloads {
            #[derive(Serialize)]
            struct Figures<'a> {
                size: u64,
                #[serde(skip_serializing_if = "Option::is_none")]
                min: &'a Option<Rate>,
                #[serde(skip_serializing_if = "Option::is_none")]
                max: &'a Option<Latency>,
            }
            m.serialize_entry(
                &w.workload,
                &Figures {
                    size: w.size,
                    min: &w.min,
                    max: &w.max,
                },
            )?;
        }
        m.end()
    }
}

impl JsonSchema for Expectations {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Expectations".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let rate = serde_json::json!({
            "type": "string",
            "pattern": r"^\s*[0-9]+(\.[0-9]+)?\s*([KMGT]i?)?(b|B)(/s|ps|it/s)\s*$",
            "examples": ["90Gb/s", "12.5GB/s", "800MiB/s"]
        });
        let latency = serde_json::json!({
            "type": "string",
            "pattern": r"^\s*[0-9]+(\.[0-9]+)?\s*(ns|us|µs|ms|s)\s*$",
            "examples": ["3us", "800ns", "1.5ms"]
        });
        let size = serde_json::json!({
            "anyOf": [
                { "type": "integer", "minimum": 1, "maximum": 1u64 << 30 },
                { "type": "string", "examples": ["8", "64KiB", "1MiB"] }
            ]
        });
        let mut properties = serde_json::Map::new();
        properties.insert(
            "devices".into(),
            serde_json::json!({"description": "RDMA devices on every node, at least.", "type": "integer", "minimum": 1, "maximum": 64}),
        );
        properties.insert(
            "link_rate".into(),
            serde_json::json!({"description": "Every node's data port runs at least at this rate.", "allOf": [rate.clone()]}),
        );
        properties.insert(
            "mtu".into(),
            serde_json::json!({"description": "The active MTU of every node's data port.", "enum": PORT_MTUS}),
        );
        properties.insert(
            "fi_provider".into(),
            serde_json::json!({"description": "The libfabric provider fabric-* runs must open (`efa`, `verbs;ofi_rxm`, `tcp`).", "type": "string", "pattern": "^[A-Za-z0-9_;]+$"}),
        );
        for w in workload_catalogue::CATALOGUE {
            let (bw, lat) = measures(w);
            if !bw && !lat {
                continue;
            }
            let mut figures = serde_json::Map::new();
            figures.insert("size".into(), size.clone());
            if bw {
                figures.insert("min".into(), rate.clone());
            }
            if lat {
                figures.insert("max".into(), latency.clone());
            }
            let what = match (bw, w.reports(Metric::BusBandwidth)) {
                (true, true) => "bus bandwidth at least (`min`)",
                (true, false) if lat => "average bandwidth at least (`min`) and/or typical latency at most (`max`)",
                (true, false) => "average bandwidth at least (`min`)",
                _ => "typical latency at most (`max`)",
            };
            properties.insert(
                w.name.into(),
                serde_json::json!({
                    "description": format!("{}'s {what} at `size` (default {} B).", w.name, w.defaults.size),
                    "type": "object",
                    "additionalProperties": false,
                    "properties": figures,
                }),
            );
        }
        schemars::json_schema!({
            "description": "What the lab must deliver: node facts and workload figures. `labctl doctor` checks the node facts, `labctl bench` and `labctl ci` the figures (and ci the node facts too).",
            "type": "object",
            "additionalProperties": false,
            "properties": properties,
        })
    }
}

#[cfg(test)]
mod tests;
