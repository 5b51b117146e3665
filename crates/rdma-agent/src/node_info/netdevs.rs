//! The netdevs beside RDMA ports: every netdev's IPv4 addresses, the
//! interfaces of /sys/class/net with how they stack, and which IPoIB
//! interface is an InfiniBand port's own.

use std::collections::BTreeMap;
use std::path::Path;

use super::sysfs::read_trimmed;

/// `/sys/class/net/X/type` of an IPoIB interface (ARPHRD_INFINIBAND).
const ARPHRD_INFINIBAND: u32 = 32;

/// Each netdev's IPv4 addresses, by netdev name.
pub type NetdevAddrs = BTreeMap<String, Vec<String>>;

/// Every netdev's IPv4 addresses, from one getifaddrs (empty if it fails).
pub(super) fn ipv4_addrs() -> NetdevAddrs {
    let mut by_netdev = NetdevAddrs::new();
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return by_netdev;
    };
    for a in addrs {
        if let Some(ip) = a.address.as_ref().and_then(|s| s.as_sockaddr_in()) {
            by_netdev.entry(a.interface_name).or_default().push(ip.ip().to_string());
        }
    }
    by_netdev
}

/// One netdev's place in /sys/class/net: its ARPHRD type, its ifindex, and
/// its iflink (the ifindex of the interface it is stacked on, its own when
/// none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NetLink {
    name: String,
    kind: u32,
    ifindex: u32,
    iflink: u32,
}

/// The netdevs of /sys/class/net, read once per listing.
pub(super) struct NetLinks(pub(super) Vec<NetLink>);

impl NetLinks {
    pub(super) fn read(net_root: &Path) -> NetLinks {
        let mut links: Vec<NetLink> = std::fs::read_dir(net_root)
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|e| {
                        let name = e.file_name().to_string_lossy().into_owned();
                        let number = |file: &str| read_trimmed(e.path().join(file))?.parse::<u32>().ok();
                        let ifindex = number("ifindex")?;
                        Some(NetLink {
                            kind: number("type").unwrap_or(0),
                            iflink: number("iflink").unwrap_or(ifindex),
                            ifindex,
                            name,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        links.sort_by(|a, b| a.name.cmp(&b.name));
        NetLinks(links)
    }

    pub(super) fn named(&self, name: &str) -> Option<&NetLink> {
        self.0.iter().find(|l| l.name == name)
    }

    /// The IPoIB partition children of `parent`, by name.
    pub(super) fn ipoib_children(&self, parent: &str) -> Vec<String> {
        let Some(p) = self.named(parent) else {
            return Vec::new();
        };
        self.0
            .iter()
            .filter(|l| l.kind == ARPHRD_INFINIBAND && l.iflink == p.ifindex && l.ifindex != p.ifindex)
            .map(|l| l.name.clone())
            .collect()
    }
}

/// The parent IPoIB netdev of InfiniBand port `port` of the device at
/// `dir`. An IB port has no netdev in its GID attributes; how IPoIB attaches
/// its interfaces (drivers/infiniband/ulp/ipoib/ipoib_main.c, Linux 6.x):
/// - ipoib_parent_init() puts the port's interface under the HCA's PCI
///   function (SET_NETDEV_DEV: `device/net/ib0`) with dev_port = port - 1
///   (mlx4 puts both ports' interfaces under one function);
/// - a partition child (`ip link add link ib0 name ib0.8001 type ipoib pkey
///   0x8001`, or `create_child`) goes through ipoib_child_init(), which sets
///   neither: it lives under /sys/devices/virtual/net with dev_port 0, and
///   is found by its iflink, which ipoib_get_iflink() makes the parent's
///   ifindex (children of children are refused by ipoib_new_child_link()).
///   Its hardware address copies the parent's (GID part included), so the
///   address would also tell, but iflink survives a changed address.
///
/// An interface under `device/net` whose iflink is another's is a child,
/// never the parent, should a driver place one there.
///
/// The ssh preflight applies the same rule to `grep -H` lines of these files
/// before any agent runs (lab-providers `ssh/pick.rs`).
pub(super) fn ipoib_netdev(dir: &Path, port: u32, links: &NetLinks) -> Option<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("device/net"))
        .ok()?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names.into_iter().find(|n| {
        let dev_port = read_trimmed(dir.join("device/net").join(n).join("dev_port"));
        let on_port = dev_port.and_then(|d| d.parse::<u32>().ok()).unwrap_or(0) + 1 == port;
        on_port && links.named(n).is_none_or(|l| l.iflink == l.ifindex)
    })
}
