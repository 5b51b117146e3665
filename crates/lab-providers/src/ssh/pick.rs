//! Which RDMA device and port a host's workloads use, from the listings
//! the ssh preflight reads (`rdma -j link show`, `ip -j -4 addr show`, and
//! sysfs lines of `grep -H .`). Pure parsing and choosing: it must not
//! connect anywhere (the preflight in the parent module does).
//!
//! The IPoIB parent/child rule here is the agent's as well
//! (rdma-agent `node_info`, which reads the same files directly): the two
//! copies point at each other.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde::Deserialize;

/// One port of `rdma -j link show`.
#[derive(Debug, Clone, Deserialize)]
pub struct RdmaLink {
    /// Device (`mlx5_0`, `rxe0`).
    pub ifname: String,
    /// Port number.
    pub port: u32,
    /// `ACTIVE`, `DOWN`, ...
    #[serde(default)]
    pub state: String,
    /// The netdev it runs over, where it has one (RoCE; never on InfiniBand).
    #[serde(default)]
    pub netdev: Option<String>,
    /// The port's LID (InfiniBand only).
    #[serde(default)]
    pub lid: Option<u32>,
}

/// One interface of `ip -j -4 addr show`.
#[derive(Debug, Clone, Deserialize)]
pub struct IpAddrInfo {
    /// Interface name.
    pub ifname: String,
    /// Its addresses.
    #[serde(default)]
    pub addr_info: Vec<IpAddr>,
}

/// One address of an interface.
#[derive(Debug, Clone, Deserialize)]
pub struct IpAddr {
    /// The address.
    #[serde(default)]
    pub local: Option<String>,
}

/// The RDMA device and port a node's workloads use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Picked {
    /// Device name.
    pub device: String,
    /// Port number.
    pub port: u32,
    /// The netdev under it.
    pub netdev: Option<String>,
    /// `Ethernet` (RoCE) or `InfiniBand`, where sysfs says.
    pub link_layer: Option<String>,
}

/// Picks the device of `wanted`, else the one whose netdev holds
/// `data_addr` (on InfiniBand: one of the port's IPoIB interfaces, the
/// parent or a partition child); its port must be ACTIVE. `sysfs` is `grep
/// -H .` of the ports' link_layer, the devices' `device/net/*/dev_port` and
/// /sys/class/net's `type`, `ifindex` and `iflink`. The error lists what the
/// host has.
pub fn pick_device(
    data_addr: Ipv4Addr,
    wanted: Option<&str>,
    links: &[RdmaLink],
    addrs: &[IpAddrInfo],
    sysfs: &str,
) -> Result<Picked, (String, String)> {
    let addr = data_addr.to_string();
    let addr_of = |netdev: &str| -> Vec<String> {
        addrs
            .iter()
            .filter(|i| i.ifname == netdev)
            .flat_map(|i| i.addr_info.iter().filter_map(|a| a.local.clone()))
            .collect()
    };
    let layer_of = |dev: &str, port: u32| -> Option<String> {
        let key = format!("/sys/class/infiniband/{dev}/ports/{port}/link_layer:");
        sysfs
            .lines()
            .find_map(|l| l.strip_prefix(key.as_str()).map(|v| v.trim().to_string()))
    };
    let net = NetLinks::parse(sysfs);
    // RoCE: the netdev `rdma link` names; InfiniBand: the parent IPoIB
    // interface under the device whose dev_port is port - 1 (not a child:
    // its iflink is its own), then its children. The agent's node_info
    // applies the same rule and cites the kernel source it rests on.
    let netdevs_of = |l: &RdmaLink| -> Vec<String> {
        if l.netdev.is_some() || layer_of(&l.ifname, l.port).as_deref() != Some("InfiniBand") {
            return l.netdev.clone().into_iter().collect();
        }
        let prefix = format!("/sys/class/infiniband/{}/device/net/", l.ifname);
        let parent = sysfs.lines().find_map(|line| {
            let (netdev, dev_port) = line.strip_prefix(prefix.as_str())?.split_once("/dev_port:")?;
            let on_port = dev_port.trim().parse::<u32>().ok()? + 1 == l.port;
            (on_port && !net.is_child(netdev)).then(|| netdev.to_string())
        });
        match parent {
            Some(p) => {
                let children = net.ipoib_children(&p);
                std::iter::once(p).chain(children).collect()
            }
            None => Vec::new(),
        }
    };
    // The port's netdev that holds data_addr.
    let holder_of = |l: &RdmaLink| netdevs_of(l).into_iter().find(|n| addr_of(n).contains(&addr));
    let listing = || {
        if links.is_empty() {
            return "the host has no RDMA device (`rdma link show` lists none)".to_string();
        }
        let rows: Vec<String> = links
            .iter()
            .map(|l| {
                let with_ips = |netdev: &str| {
                    let ips = addr_of(netdev);
                    let ips = if ips.is_empty() {
                        "no IPv4 address".to_string()
                    } else {
                        ips.join(", ")
                    };
                    format!("{netdev} ({ips})")
                };
                let netdevs = netdevs_of(l);
                format!(
                    "  {}/{} state {} link_layer {}{} netdev {}",
                    l.ifname,
                    l.port,
                    l.state,
                    layer_of(&l.ifname, l.port).unwrap_or_else(|| "?".into()),
                    l.lid.map(|lid| format!(" lid {lid}")).unwrap_or_default(),
                    if netdevs.is_empty() {
                        with_ips("-")
                    } else {
                        netdevs.iter().map(|n| with_ips(n)).collect::<Vec<_>>().join(", ")
                    }
                )
            })
            .collect();
        format!("the host has:\n{}", rows.join("\n"))
    };
    let chosen: Vec<&RdmaLink> = match wanted {
        Some(dev) => links.iter().filter(|l| l.ifname == dev).collect(),
        None => links.iter().filter(|l| holder_of(l).is_some()).collect(),
    };
    if chosen.is_empty() {
        return Err(match wanted {
            Some(dev) => (
                format!("no RDMA device `{dev}` on the host; {}", listing()),
                "set rdma_device to one of the devices listed, or leave it out to pick the one on data_addr".into(),
            ),
            None => (
                format!("data_addr {addr} is on no RDMA device's netdev; {}", listing()),
                "set data_addr to the address of an RDMA netdev listed, or name the device with rdma_device".into(),
            ),
        });
    }
    let Some(active) = chosen.iter().find(|l| l.state == "ACTIVE") else {
        return Err((
            format!("{} has no ACTIVE port; {}", chosen[0].ifname, listing()),
            "bring the port up (cable, switch, `ip link set NETDEV up`, the subnet manager on InfiniBand), or pick another device".into(),
        ));
    };
    Ok(Picked {
        device: active.ifname.clone(),
        port: active.port,
        netdev: holder_of(active).or_else(|| netdevs_of(active).into_iter().next()),
        link_layer: layer_of(&active.ifname, active.port),
    })
}

/// /sys/class/net's `type`, `ifindex` and `iflink` of each netdev, from
/// the preflight's `grep -H .` lines (`/sys/class/net/ib0/iflink:4`).
struct NetLinks(BTreeMap<String, NetLink>);

/// One netdev's ARPHRD type, ifindex and iflink.
#[derive(Default)]
struct NetLink {
    kind: Option<u32>,
    ifindex: Option<u32>,
    iflink: Option<u32>,
}

impl NetLinks {
    fn parse(sysfs: &str) -> NetLinks {
        let mut links: BTreeMap<String, NetLink> = BTreeMap::new();
        for line in sysfs.lines() {
            let Some((netdev, file_value)) = line.strip_prefix("/sys/class/net/").and_then(|r| r.split_once('/'))
            else {
                continue;
            };
            let Some((file, value)) = file_value.split_once(':') else {
                continue;
            };
            let Ok(value) = value.trim().parse::<u32>() else {
                continue;
            };
            let link = links.entry(netdev.to_string()).or_default();
            match file {
                "type" => link.kind = Some(value),
                "ifindex" => link.ifindex = Some(value),
                "iflink" => link.iflink = Some(value),
                _ => {}
            }
        }
        NetLinks(links)
    }

    /// Whether `netdev` is stacked on another interface (its iflink is not its own).
    fn is_child(&self, netdev: &str) -> bool {
        self.0
            .get(netdev)
            .is_some_and(|l| l.iflink.is_some() && l.iflink != l.ifindex)
    }

    /// The IPoIB interfaces (type 32, ARPHRD_INFINIBAND) whose iflink is
    /// `parent`'s ifindex: its partition children, by name.
    fn ipoib_children(&self, parent: &str) -> Vec<String> {
        let Some(index) = self.0.get(parent).and_then(|p| p.ifindex) else {
            return Vec::new();
        };
        self.0
            .iter()
            .filter(|(_, l)| l.kind == Some(32) && l.iflink == Some(index) && l.ifindex != Some(index))
            .map(|(name, _)| name.clone())
            .collect()
    }
}
