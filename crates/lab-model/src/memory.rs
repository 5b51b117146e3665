//! Amounts of memory and disk as written in labs.yaml (`1GiB`, `1536M`).

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use crate::limits::{MEMORY_MIB_RANGE, MULTIPASS_DISK_MIB_RANGE};
use crate::problem::Problem;
use crate::scalar::{scalar, Scalar};

/// An amount of memory, stored in bytes, always a whole number of MiB.
/// Written as `512MiB`, `1GiB`, `1.5GiB`, `1536M`, `2G` or a plain number of
/// MiB; units are binary (M = MB = MiB, G = GB = GiB) and case does not matter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemorySize {
    bytes: u64,
}

impl MemorySize {
    /// A size of `mib` MiB.
    pub const fn from_mib(mib: u64) -> Self {
        MemorySize {
            bytes: mib * 1024 * 1024,
        }
    }

    /// The size in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The size in MiB.
    pub fn mib(&self) -> u64 {
        self.bytes / (1024 * 1024)
    }
}

impl fmt::Display for MemorySize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = self.mib();
        if mib.is_multiple_of(1024) {
            write!(f, "{}GiB", mib / 1024)
        } else {
            write!(f, "{mib}MiB")
        }
    }
}

/// Why a memory string did not parse.
pub(crate) fn parse_memory(text: &str) -> Result<MemorySize, Problem> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let unit = unit.trim();
    let max_gib = MEMORY_MIB_RANGE.end() / 1024;
    let syntax = || {
        Problem::new(
            format!("`{text}` is not a memory size"),
            "write a size like 512MiB, 1GiB or 1536M (a plain number means MiB)",
        )
    };
    if number.is_empty() || number.starts_with('.') || number.ends_with('.') || number.matches('.').count() > 1 {
        return Err(syntax());
    }
    let per_unit: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "m" | "mb" | "mib" => 1,
        "g" | "gb" | "gib" => 1024,
        "k" | "kb" | "kib" | "b" => {
            return Err(Problem::new(
                format!("`{text}` is too small to be a node's memory; sizes are at least 256MiB"),
                "write the size in MiB or GiB, like 512MiB or 1GiB",
            ))
        }
        "t" | "tb" | "tib" | "p" | "pb" | "pib" | "e" | "eb" | "eib" => {
            return Err(Problem::new(
                format!(
                    "`{text}` is far more than the most allowed here ({} GiB); sizes are written in MiB or GiB",
                    max_gib
                ),
                format!("write at most {max_gib}GiB, like 1GiB or 16GiB"),
            ))
        }
        _ => {
            return Err(Problem::new(
                format!("`{text}` has an unknown unit `{unit}`"),
                "use MiB or GiB (or M, G), like 512MiB or 1GiB",
            ))
        }
    };
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    // value = (whole + frac/10^n) * per_unit MiB, computed exactly.
    let scale = 10u128.checked_pow(frac.len() as u32).ok_or_else(syntax)?;
    let whole: u128 = whole.parse().map_err(|_| syntax())?;
    let frac_v: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().map_err(|_| syntax())?
    };
    let numerator = (whole * scale + frac_v) * per_unit as u128;
    if !numerator.is_multiple_of(scale) {
        return Err(Problem::new(
            format!("`{text}` is not a whole number of MiB"),
            "round it to whole MiB, like 1536MiB",
        ));
    }
    let mib = numerator / scale;
    check_memory_mib(mib, text)
}

pub(crate) fn check_memory_mib(mib: u128, text: &str) -> Result<MemorySize, Problem> {
    let (lo, hi) = (*MEMORY_MIB_RANGE.start(), *MEMORY_MIB_RANGE.end());
    if mib < lo as u128 {
        let plain = text.trim().chars().all(|c| c.is_ascii_digit());
        let fix = if plain && (1..=64).contains(&mib) {
            format!("a plain number means MiB: did you mean {mib}GiB? sizes go from 256MiB to 64GiB")
        } else {
            "use at least 256MiB (1GiB is a good size for a node)".to_string()
        };
        return Err(Problem::new(format!("{text} is below the minimum of 256MiB"), fix));
    }
    if mib > hi as u128 {
        return Err(Problem::new(
            format!("{text} is above the maximum of 64GiB"),
            "use at most 64GiB (and no more than the host can spare)",
        ));
    }
    Ok(MemorySize::from_mib(mib as u64))
}

impl FromStr for MemorySize {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        parse_memory(s).map_err(|p| p.message)
    }
}

impl<'de> Deserialize<'de> for MemorySize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        scalar(d, |v| match v {
            Scalar::Int(n) if n < 0 => Err(Problem::new(
                format!("{n} is not a memory size"),
                "write a size like 512MiB or 1GiB",
            )),
            Scalar::Int(n) => check_memory_mib(n as u128, &n.to_string()),
            Scalar::Str(s) => parse_memory(&s),
            other => Err(Problem::new(
                format!("memory must be a size like 1GiB, found {}", other.describe()),
                "write a size like 512MiB, 1GiB or 1536M (a plain number means MiB)",
            )),
        })
    }
}

impl Serialize for MemorySize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl JsonSchema for MemorySize {
    fn schema_name() -> Cow<'static, str> {
        "MemorySize".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A memory size from 256MiB to 64GiB: a number with unit MiB/M/MB or GiB/G/GB (binary units, any case), or a plain number of MiB.",
            "anyOf": [
                { "type": "integer", "minimum": 256, "maximum": 65536 },
                { "type": "string", "pattern": r"^\s*[0-9]+(\.[0-9]+)?\s*([MmGg]([Ii]?[Bb])?)?\s*$" }
            ],
            "examples": ["1GiB", "512MiB", "1536M", 2048]
        })
    }
}

pub(crate) fn de_multipass_disk<'de, D: Deserializer<'de>>(d: D) -> Result<MemorySize, D::Error> {
    scalar(d, |v| {
        let (lo, hi) = (*MULTIPASS_DISK_MIB_RANGE.start(), *MULTIPASS_DISK_MIB_RANGE.end());
        let fix = "write a size between 4GiB and 64GiB, like 10GiB";
        let text = match v {
            Scalar::Null => return Ok(default_multipass_disk()),
            Scalar::Str(s) => s.into_owned(),
            Scalar::Int(n) => n.to_string(),
            other => {
                return Err(Problem::new(
                    format!("disk must be a size like 10GiB, found {}", other.describe()),
                    fix,
                ))
            }
        };
        let size = parse_size_mib(&text).ok_or_else(|| Problem::new(format!("`{text}` is not a disk size"), fix))?;
        if !(lo..=hi).contains(&size) {
            return Err(Problem::new(format!("disk {text} is out of range (4GiB..=64GiB)"), fix));
        }
        Ok(MemorySize::from_mib(size))
    })
}

/// A whole number of MiB from `10GiB`, `10G`, `10240M` or `10240`.
pub(crate) fn parse_size_mib(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: u64 = number.parse().ok()?;
    match unit.trim().to_ascii_lowercase().as_str() {
        "" | "m" | "mb" | "mib" => Some(n),
        "g" | "gb" | "gib" => n.checked_mul(1024),
        _ => None,
    }
}

pub(crate) fn default_multipass_disk() -> MemorySize {
    MemorySize::from_mib(10 * 1024)
}
