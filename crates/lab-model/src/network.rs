//! IPv4 networks as written in labs.yaml (`10.77.0.0/24`), and the two
//! networks labctl knows about: the default data network and QEMU's
//! user-mode network. The arithmetic is `ipnet`'s (it replaced a
//! hand-written mask type); the parsing keeps labs.yaml's own messages.

use std::borrow::Cow;
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use ipnet::Ipv4Net;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use crate::problem::Problem;
use crate::scalar::{scalar, Scalar};

/// The data network when a lab does not name one.
pub const DEFAULT_DATA_NETWORK: Ipv4Network = Ipv4Network(Ipv4Net::new_assert(Ipv4Addr::new(10, 77, 0, 0), 24));

/// The network QEMU's user-mode (management/SSH) NIC uses inside each VM;
/// a data network overlapping it would break routing.
pub const QEMU_USER_NETWORK: Ipv4Network = Ipv4Network(Ipv4Net::new_assert(Ipv4Addr::new(10, 0, 2, 0), 24));

/// An IPv4 network, `ADDRESS/PREFIX`, with no host bits set and a prefix
/// of 8 to 30: `ipnet`'s [`Ipv4Net`] with labs.yaml's checks and messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Network(Ipv4Net);

impl Ipv4Network {
    /// The network address (all host bits 0).
    pub fn network(&self) -> Ipv4Addr {
        self.0.network()
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.0.prefix_len()
    }

    /// The broadcast address (all host bits 1).
    pub fn broadcast(&self) -> Ipv4Addr {
        self.0.broadcast()
    }

    /// Whether `addr` is inside the network (network and broadcast included).
    pub fn contains(&self, addr: Ipv4Addr) -> bool {
        self.0.contains(&addr)
    }

    /// Whether `addr` can be given to a host: inside, and neither the
    /// network nor the broadcast address.
    pub fn is_host(&self, addr: Ipv4Addr) -> bool {
        self.contains(addr) && addr != self.network() && addr != self.broadcast()
    }

    /// How many host addresses the network has.
    pub fn host_count(&self) -> u64 {
        (1u64 << (32 - u32::from(self.prefix()))).saturating_sub(2)
    }

    /// The `n`th host address (from 0: the first is network + 1).
    pub fn host(&self, n: u64) -> Option<Ipv4Addr> {
        usize::try_from(n).ok().and_then(|n| self.0.hosts().nth(n))
    }

    /// Whether two networks share any address.
    pub fn overlaps(&self, other: &Ipv4Network) -> bool {
        self.0.contains(&other.0) || other.0.contains(&self.0)
    }
}

impl fmt::Display for Ipv4Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

pub(crate) fn parse_network(text: &str) -> Result<Ipv4Network, Problem> {
    let t = text.trim();
    let Some((addr, prefix)) = t.split_once('/') else {
        return Err(Problem::new(
            format!("`{text}` is not a network: the /PREFIX is missing"),
            format!("write ADDRESS/PREFIX, like {}", DEFAULT_DATA_NETWORK),
        ));
    };
    let addr: Ipv4Addr = addr.trim().parse().map_err(|_| {
        Problem::new(
            format!("`{text}` is not a network: `{addr}` is not an IPv4 address"),
            format!("write ADDRESS/PREFIX, like {}", DEFAULT_DATA_NETWORK),
        )
    })?;
    let prefix: u8 = match prefix.trim().parse::<u8>() {
        Ok(p) if p <= 32 => p,
        _ => {
            return Err(Problem::new(
                format!("`{text}` is not a network: `/{prefix}` is not a prefix length"),
                "use a prefix length between /8 and /30, like /24",
            ))
        }
    };
    if !(8..=30).contains(&prefix) {
        return Err(Problem::new(
            format!("the prefix /{prefix} is out of range (/8..=/30)"),
            "use a prefix length between /8 and /30; /24 gives 254 addresses",
        ));
    }
    let net = Ipv4Network(Ipv4Net::new(addr, prefix).expect("a prefix of 8 to 30 is valid"));
    if net.network() != addr {
        return Err(Problem::new(
            format!("`{text}` has host bits set"),
            format!("write the network address: {}/{prefix}", net.network()),
        ));
    }
    Ok(net)
}

impl FromStr for Ipv4Network {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        parse_network(s).map_err(|p| p.message)
    }
}

impl<'de> Deserialize<'de> for Ipv4Network {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        scalar(d, |v| match v {
            Scalar::Null => Ok(DEFAULT_DATA_NETWORK),
            Scalar::Str(s) => parse_network(&s),
            other => Err(Problem::new(
                format!("data_network must be ADDRESS/PREFIX, found {}", other.describe()),
                format!("write it like {}", DEFAULT_DATA_NETWORK),
            )),
        })
    }
}

impl Serialize for Ipv4Network {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl JsonSchema for Ipv4Network {
    fn schema_name() -> Cow<'static, str> {
        "Ipv4Network".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "An IPv4 network as ADDRESS/PREFIX with no host bits set; prefix /8 to /30.",
            "type": "string",
            "pattern": r"^[0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}$",
            "examples": ["10.77.0.0/24"]
        })
    }
}
