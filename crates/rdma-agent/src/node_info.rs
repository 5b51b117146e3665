//! What a node has: hostname, kernel, rdma-core version, and its RDMA devices
//! with ports, state, MTU, link layer, GIDs, LID and the netdev (with its
//! IPv4 addresses) of each port; on InfiniBand every IPoIB interface of the
//! port (the parent and its partition children). Read from /proc,
//! /sys/class/infiniband and /sys/class/net (plus one port query for the
//! active MTU, one GID table query and one getifaddrs), so a host without
//! any RDMA device simply reports zero devices.
//!
//! One concern a file: `devices` reads the RDMA devices and their ports,
//! with `gids` and `netdevs` (the IPoIB and Ethernet interfaces beside
//! them); `pkeys` finds an IPoIB partition's P_Key index; `sysfs` is where
//! they all read.

use std::net::Ipv4Addr;
use std::path::Path;

use agent_proto::data_path::{self, DataPath};
use agent_proto::v1::NodeInfoReply;

mod devices;
mod gids;
mod netdevs;
mod pkeys;
mod sysfs;

pub use devices::{devices, is_software_device, port_addressing};
pub use gids::{gid_at, parse_gid};
pub use netdevs::NetdevAddrs;
pub use pkeys::ipoib_pkey_index;

use netdevs::ipv4_addrs;
use sysfs::{read_trimmed, SYSFS_IB, SYSFS_NET};

/// Collects the node's description.
pub fn collect() -> NodeInfoReply {
    NodeInfoReply {
        hostname: read_trimmed("/proc/sys/kernel/hostname").unwrap_or_default(),
        kernel: read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_default(),
        rdma_core_version: rdma_core_version(),
        agent_version: crate::AGENT_VERSION.to_string(),
        devices: devices(Path::new(SYSFS_IB), Path::new(SYSFS_NET), &ipv4_addrs()),
        memory_total_bytes: crate::validate::meminfo_field("MemTotal:").unwrap_or(0),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
    }
}

/// rdma-core's version: the Debian package if dpkg knows it, else the version
/// suffix of the installed libibverbs (libibverbs.so.1.14.44.0 → "44.0").
pub fn rdma_core_version() -> String {
    for package in ["rdma-core", "libibverbs1"] {
        let out = std::process::Command::new("dpkg-query")
            .args(["-W", "-f=${Version}", package])
            .stderr(std::process::Stdio::null())
            .output();
        if let Ok(out) = out {
            let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if out.status.success() && !version.is_empty() {
                return version;
            }
        }
    }
    for dir in [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
    ] {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(rest) = name.strip_prefix("libibverbs.so.1.") {
                // "14.44.0": the library ABI minor, then rdma-core's release.
                if let Some((_, release)) = rest.split_once('.') {
                    return release.to_string();
                }
            }
        }
    }
    "unknown".into()
}

/// Where `addr` lives on this host (`device` only, when given): the RoCE v2
/// GID of the address on Ethernet, the port whose IPoIB netdev holds it on
/// InfiniBand (agent_proto::data_path, the lookup the controller makes too).
pub fn find_data_path(addr: Ipv4Addr, device: Option<&str>) -> Option<DataPath> {
    data_path::find(
        &devices(Path::new(SYSFS_IB), Path::new(SYSFS_NET), &ipv4_addrs()),
        addr,
        device,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collect_works_on_this_host() {
        let info = collect();
        assert!(!info.kernel.is_empty());
        assert_eq!(info.agent_version, crate::AGENT_VERSION);
    }
}
