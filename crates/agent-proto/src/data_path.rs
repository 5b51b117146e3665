//! Where a node's data address lives in its `NodeInfo` devices: the one
//! reading of the reply that the agent (oob sessions, rdma_cm facts) and the
//! controller (lab facts, bench) share, so both sides pick the same device,
//! port and GID for either link layer.
//!
//! - Ethernet (RoCE): the port whose GID table holds the RoCE v2 GID
//!   `::ffff:a.b.c.d` of the address; its index depends on the kernel and on
//!   the netdev's other addresses, so it is looked up, never assumed.
//! - InfiniBand: GIDs are subnet prefix + port GUID and never hold an IP
//!   address; the address is on one of the port's IPoIB netdevs (`ib0`, or
//!   a partition child such as `ib0.8001`), and the port is addressed by its
//!   LID within the subnet, with GID index 0 (the port GUID's GID) as the
//!   source GID.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::v1::{RdmaDevice, RdmaPort};

/// `RdmaPort.link_layer` of an InfiniBand port (sysfs and ibv_devinfo spell it so).
pub const INFINIBAND: &str = "InfiniBand";

/// A port's link layer, as far as addressing goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLayer {
    /// RoCE: peers are addressed by GID (a GRH on every packet).
    Ethernet,
    /// InfiniBand: peers in the subnet are addressed by LID.
    InfiniBand,
}

/// The device, port and source GID that carry a data address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataPath {
    /// The RDMA device (`mlx5_0`, `rxe0`).
    pub device: String,
    /// Its port.
    pub port: u32,
    /// The link layer of that port.
    pub link_layer: LinkLayer,
    /// The source GID index: the RoCE v2 GID of the address on Ethernet, 0 on InfiniBand.
    pub gid_index: u32,
    /// That GID as the reply shows it (sysfs form, `fe80:0000:...`).
    pub gid: String,
    /// The port's LID on InfiniBand; 0 on Ethernet.
    pub lid: u32,
    /// The netdev that holds the address (`eth1`, `ib0`, `ib0.8001`); "" when not reported.
    pub netdev: String,
}

impl DataPath {
    /// The GID's 16 bytes (None if the reply's text is not a GID).
    pub fn gid_bytes(&self) -> Option<[u8; 16]> {
        self.gid.parse::<Ipv6Addr>().ok().map(|g| g.octets())
    }
}

/// Finds where `addr` lives among `devices`, on `device` only when given.
/// Ports are taken in the reply's order; the first match wins.
pub fn find(devices: &[RdmaDevice], addr: Ipv4Addr, device: Option<&str>) -> Option<DataPath> {
    let wanted_gid = addr.to_ipv6_mapped();
    let text = addr.to_string();
    for dev in devices.iter().filter(|d| device.is_none_or(|w| w == d.name)) {
        for port in &dev.ports {
            let netdev = if port.netdev.is_empty() {
                &dev.netdev
            } else {
                &port.netdev
            };
            if port.link_layer == INFINIBAND {
                let Some(holder) = ipoib_holder(port, &text) else {
                    continue;
                };
                // GID 0 is the port GUID's GID, always valid on an IB port.
                let Some(gid0) = port.gids.iter().find(|g| g.index == 0) else {
                    continue;
                };
                return Some(DataPath {
                    device: dev.name.clone(),
                    port: port.port,
                    link_layer: LinkLayer::InfiniBand,
                    gid_index: 0,
                    gid: gid0.gid.clone(),
                    lid: port.lid,
                    netdev: holder.to_string(),
                });
            }
            let found = port
                .gids
                .iter()
                .find(|g| g.gid_type == "RoCE v2" && g.gid.parse::<Ipv6Addr>().ok() == Some(wanted_gid));
            if let Some(g) = found {
                return Some(DataPath {
                    device: dev.name.clone(),
                    port: port.port,
                    link_layer: LinkLayer::Ethernet,
                    gid_index: g.index,
                    gid: g.gid.clone(),
                    lid: 0,
                    netdev: netdev.clone(),
                });
            }
        }
    }
    None
}

/// The IPoIB interface of InfiniBand `port` that holds `addr`: the parent
/// (`ib0`) or a partition child (`ib0.8001`). An agent older than
/// `ipoib_netdevs` reports the parent only, in `netdev` and `ipv4_addrs`.
fn ipoib_holder<'a>(port: &'a RdmaPort, addr: &str) -> Option<&'a str> {
    if port.ipoib_netdevs.is_empty() {
        return port
            .ipv4_addrs
            .iter()
            .any(|a| a == addr)
            .then_some(port.netdev.as_str());
    }
    port.ipoib_netdevs
        .iter()
        .find(|n| n.ipv4_addrs.iter().any(|a| a == addr))
        .map(|n| n.name.as_str())
}

/// What `find` looked for, for an error that found nothing: "the RoCE v2 GID
/// ::ffff:ADDR or an InfiniBand port whose IPoIB netdev holds ADDR".
pub fn wanted(addr: Ipv4Addr) -> String {
    format!("the RoCE v2 GID ::ffff:{addr} (Ethernet) or an InfiniBand port whose IPoIB netdev holds {addr}")
}

#[cfg(test)]
mod tests;
