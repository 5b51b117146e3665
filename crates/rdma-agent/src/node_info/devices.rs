//! The RDMA devices under /sys/class/infiniband: each port's state, MTU,
//! link layer, GIDs, LID and netdevs, and whether the device is software
//! (rxe, siw) or a NIC.

use std::path::{Path, PathBuf};

use agent_proto::data_path;
use agent_proto::v1::{IpoibNetdev, RdmaDevice, RdmaPort};

use super::gids::{gids, port_gids};
use super::netdevs::{ipoib_netdev, NetLinks, NetdevAddrs};
use super::sysfs::{read_trimmed, SYSFS_IB};

/// The RDMA devices under `root` (normally /sys/class/infiniband); netdevs
/// are looked up under `net_root` (normally /sys/class/net), their
/// addresses in `addrs`.
pub fn devices(root: &Path, net_root: &Path, addrs: &NetdevAddrs) -> Vec<RdmaDevice> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let links = NetLinks::read(net_root);
    names
        .into_iter()
        .map(|name| device(root, &name, &links, addrs))
        .collect()
}

fn device(root: &Path, name: &str, links: &NetLinks, addrs: &NetdevAddrs) -> RdmaDevice {
    let dir = root.join(name);
    let mut ports: Vec<u32> = std::fs::read_dir(dir.join("ports"))
        .map(|e| {
            e.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    ports.sort();
    // Opening the device is the only way to the active MTU; absent libibverbs or
    // permissions, the MTU reads 0 and everything else still reports.
    let ctx = crate::verbs::link::open_device(name).ok();
    // One query for the whole table where the device answers; sysfs otherwise.
    let table = ctx.as_deref().and_then(crate::verbs::gid_table);
    let ports: Vec<RdmaPort> = ports
        .into_iter()
        .map(|p| {
            let pdir = dir.join("ports").join(p.to_string());
            let link_layer = read_trimmed(pdir.join("link_layer")).unwrap_or_default();
            let infiniband = link_layer == agent_proto::data_path::INFINIBAND;
            let netdev = if infiniband {
                ipoib_netdev(&dir, p, links)
            } else {
                read_trimmed(pdir.join("gid_attrs/ndevs/0"))
            }
            .unwrap_or_default();
            let addrs_of = |netdev: &str| addrs.get(netdev).cloned().unwrap_or_default();
            let ipoib_netdevs: Vec<IpoibNetdev> = if infiniband && !netdev.is_empty() {
                std::iter::once(netdev.clone())
                    .chain(links.ipoib_children(&netdev))
                    .map(|name| IpoibNetdev {
                        ipv4_addrs: addrs_of(&name),
                        name,
                    })
                    .collect()
            } else {
                Vec::new()
            };
            RdmaPort {
                port: p,
                state: port_state_name(&read_trimmed(pdir.join("state")).unwrap_or_default()),
                active_mtu: ctx
                    .as_ref()
                    .and_then(|c| crate::verbs::link::port_active_mtu(c, p as u8))
                    .unwrap_or(0),
                gids: match &table {
                    Some(rows) => port_gids(rows, p),
                    None => gids(&pdir, infiniband),
                },
                link_layer,
                lid: port_lid(&pdir),
                ipv4_addrs: addrs_of(&netdev),
                netdev,
                ipoib_netdevs,
                rate: read_trimmed(pdir.join("rate")).unwrap_or_default(),
            }
        })
        .collect();
    let netdev = ports
        .iter()
        .map(|p| p.netdev.clone())
        .find(|n| !n.is_empty())
        .unwrap_or_default();
    RdmaDevice {
        name: name.to_string(),
        netdev,
        node_guid: read_trimmed(dir.join("node_guid")).unwrap_or_default(),
        ports,
        software: is_software(&dir),
    }
}

/// Whether the device at `dir` (a /sys/class/infiniband entry) is a
/// software device: rxe and siw live under /sys/devices/virtual, a NIC's
/// under its bus (pci0000:00/...).
fn is_software(dir: &Path) -> bool {
    std::fs::canonicalize(dir).is_ok_and(|p| p.components().any(|c| c.as_os_str() == "virtual"))
}

/// Whether the RDMA device `name` on this host is a software device (false
/// when it cannot be told: a NIC is the safer guess for busy polling).
pub fn is_software_device(name: &str) -> bool {
    is_software(&Path::new(SYSFS_IB).join(name))
}

/// "4: ACTIVE" → "PORT_ACTIVE".
fn port_state_name(sysfs: &str) -> String {
    match sysfs.split_once(':') {
        Some((_, s)) => format!("PORT_{}", s.trim()),
        None if sysfs.is_empty() => "PORT_UNKNOWN".into(),
        None => sysfs.to_string(),
    }
}

/// Whether `device`'s `port` is InfiniBand, and its LID (sysfs, hex "0x3").
pub fn port_addressing(device: &str, port: u8) -> (bool, u16) {
    let dir: PathBuf = [SYSFS_IB, device, "ports", &port.to_string()].iter().collect();
    let infiniband = read_trimmed(dir.join("link_layer")).as_deref() == Some(data_path::INFINIBAND);
    (infiniband, port_lid(&dir) as u16)
}

/// A port directory's LID; sysfs prints it in hex ("0x3"), RoCE ports read 0x0.
fn port_lid(port_dir: &Path) -> u32 {
    read_trimmed(port_dir.join("lid"))
        .and_then(|l| u32::from_str_radix(l.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    use crate::node_info::gids::parse_gid;
    use crate::node_info::pkeys::ipoib_pkey_index_in;

    fn fake_sysfs() -> tempdir::Dir {
        let dir = tempdir::Dir::new();
        let port = dir.path.join("rxe0/ports/1");
        std::fs::create_dir_all(port.join("gids")).unwrap();
        std::fs::create_dir_all(port.join("gid_attrs/types")).unwrap();
        std::fs::create_dir_all(port.join("gid_attrs/ndevs")).unwrap();
        std::fs::write(port.join("state"), "4: ACTIVE\n").unwrap();
        std::fs::write(port.join("link_layer"), "Ethernet\n").unwrap();
        std::fs::write(port.join("gids/0"), "fe80:0000:0000:0000:5054:00ff:febb:0001\n").unwrap();
        std::fs::write(port.join("gids/1"), "0000:0000:0000:0000:0000:ffff:0a4d:0001\n").unwrap();
        std::fs::write(port.join("gids/2"), "0000:0000:0000:0000:0000:0000:0000:0000\n").unwrap();
        std::fs::write(port.join("gid_attrs/types/0"), "IB/RoCE v1\n").unwrap();
        std::fs::write(port.join("gid_attrs/types/1"), "RoCE v2\n").unwrap();
        std::fs::write(port.join("gid_attrs/ndevs/0"), "eth1\n").unwrap();
        std::fs::write(dir.path.join("rxe0/node_guid"), "5054:00ff:febb:0001\n").unwrap();
        dir
    }

    /// A throwaway directory (no tempfile crate in the workspace).
    mod tempdir {
        pub struct Dir {
            pub path: std::path::PathBuf,
        }
        impl Dir {
            pub fn new() -> Dir {
                static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let path = std::env::temp_dir().join(format!("rdma-agent-test-{}-{n}", std::process::id()));
                let _ = std::fs::remove_dir_all(&path);
                std::fs::create_dir_all(&path).unwrap();
                Dir { path }
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.path);
            }
        }
    }

    #[test]
    fn reads_a_rxe_device_from_sysfs() {
        let dir = fake_sysfs();
        let devs = devices(&dir.path, Path::new(NO_NET), &NetdevAddrs::new());
        assert_eq!(devs.len(), 1);
        let d = &devs[0];
        assert_eq!((d.name.as_str(), d.netdev.as_str()), ("rxe0", "eth1"));
        let p = &d.ports[0];
        assert_eq!(
            (p.port, p.state.as_str(), p.link_layer.as_str()),
            (1, "PORT_ACTIVE", "Ethernet")
        );
        assert_eq!(p.gids.len(), 2, "the all-zero GID is skipped");
        assert_eq!(p.gids[0].gid_type, "RoCE v1");
        assert_eq!(p.gids[1].gid_type, "RoCE v2");
    }

    #[test]
    fn software_devices_are_the_ones_under_devices_virtual() {
        // sysfs as the kernel lays it out: class entries are links into
        // /sys/devices, rxe's under virtual/, a NIC's under its PCI function.
        let dir = tempdir::Dir::new();
        let class = dir.path.join("class/infiniband");
        std::fs::create_dir_all(&class).unwrap();
        for (name, under) in [
            ("rxe0", "devices/virtual/infiniband"),
            ("mlx5_0", "devices/pci0000:00/0000:00:05.0/infiniband"),
        ] {
            let real = dir.path.join(under).join(name);
            std::fs::create_dir_all(real.join("ports")).unwrap();
            std::os::unix::fs::symlink(&real, class.join(name)).unwrap();
        }
        let kinds: Vec<(String, bool)> = devices(&class, Path::new(NO_NET), &NetdevAddrs::new())
            .into_iter()
            .map(|d| (d.name, d.software))
            .collect();
        assert_eq!(kinds, [("mlx5_0".to_string(), false), ("rxe0".to_string(), true)]);
        // A device that is not there is not called software.
        assert!(!is_software(&class.join("siw0")));
    }

    /// Where the fixtures without /sys/class/net look for it.
    const NO_NET: &str = "/nonexistent/net";

    #[test]
    fn finds_the_ipv4_mapped_roce_v2_gid() {
        let dir = fake_sysfs();
        let find = |addr, device| {
            data_path::find(
                &devices(&dir.path, Path::new(NO_NET), &NetdevAddrs::new()),
                addr,
                device,
            )
        };
        let loc = find(Ipv4Addr::new(10, 77, 0, 1), None).unwrap();
        assert_eq!((loc.device.as_str(), loc.port, loc.gid_index), ("rxe0", 1, 1));
        assert_eq!(
            (loc.link_layer, loc.lid, loc.netdev.as_str()),
            (data_path::LinkLayer::Ethernet, 0, "eth1")
        );
        assert!(find(Ipv4Addr::new(10, 77, 0, 9), None).is_none());
        assert!(find(Ipv4Addr::new(10, 77, 0, 1), Some("mlx5_0")).is_none());
    }

    /// An mlx5 InfiniBand port as the kernel lays it out in sysfs
    /// (drivers/infiniband/core/sysfs.c: `state` "4: ACTIVE", `lid` in hex,
    /// `link_layer` "InfiniBand", `gid_attrs/types/N` "IB/RoCE v1" for IB GIDs),
    /// and IPoIB's ib0 under the same PCI function with `dev_port` 0. The
    /// values are those of a real host: LID 3 and the port link line from
    /// https://github.com/openshift/sriov-network-operator/issues/635
    /// (`link mlx5_0/1 subnet_prefix fe80:0000:0000:0000 lid 3 sm_lid 1 lmc 0
    /// state ACTIVE`), GID 0 from `ibv_devinfo -v` in
    /// https://github.com/linux-rdma/opensm/issues/36 (`GID[  0]:
    /// fe80:0000:0000:0000:b859:9f03:00db:f884`). The IPv4 address of ib0 is
    /// illustrative.
    fn fake_infiniband_sysfs() -> tempdir::Dir {
        let dir = tempdir::Dir::new();
        let port = dir.path.join("mlx5_0/ports/1");
        std::fs::create_dir_all(port.join("gids")).unwrap();
        std::fs::create_dir_all(port.join("gid_attrs/types")).unwrap();
        std::fs::create_dir_all(dir.path.join("mlx5_0/device/net/ib0")).unwrap();
        std::fs::write(port.join("state"), "4: ACTIVE\n").unwrap();
        std::fs::write(port.join("link_layer"), "InfiniBand\n").unwrap();
        std::fs::write(port.join("lid"), "0x3\n").unwrap();
        std::fs::write(port.join("gids/0"), "fe80:0000:0000:0000:b859:9f03:00db:f884\n").unwrap();
        std::fs::write(port.join("gids/1"), "0000:0000:0000:0000:0000:0000:0000:0000\n").unwrap();
        std::fs::write(port.join("gid_attrs/types/0"), "IB/RoCE v1\n").unwrap();
        std::fs::write(dir.path.join("mlx5_0/device/net/ib0/dev_port"), "0\n").unwrap();
        std::fs::write(dir.path.join("mlx5_0/node_guid"), "b859:9f03:00db:f884\n").unwrap();
        dir
    }

    #[test]
    fn an_infiniband_port_reports_its_lid_ipoib_netdev_and_addresses() {
        let dir = fake_infiniband_sysfs();
        let ib0_addrs = NetdevAddrs::from([("ib0".to_string(), vec!["10.20.0.11".to_string()])]);
        let devs = devices(&dir.path, Path::new(NO_NET), &ib0_addrs);
        let p = &devs[0].ports[0];
        assert_eq!(
            (p.link_layer.as_str(), p.lid, p.netdev.as_str(), p.ipv4_addrs.as_slice()),
            ("InfiniBand", 3, "ib0", ["10.20.0.11".to_string()].as_slice())
        );
        assert_eq!(p.gids.len(), 1, "the all-zero GID is skipped");
        assert_eq!(
            p.gids[0].gid_type, "IB",
            "sysfs's IB/RoCE v1 on an IB port is an IB GID"
        );
        assert_eq!(devs[0].netdev, "ib0");
        // The lookup: device, port, LID and GID 0, from the IPoIB address.
        let found = data_path::find(&devs, Ipv4Addr::new(10, 20, 0, 11), None).unwrap();
        assert_eq!(
            (
                found.device.as_str(),
                found.port,
                found.link_layer,
                found.gid_index,
                found.lid
            ),
            ("mlx5_0", 1, data_path::LinkLayer::InfiniBand, 0, 3)
        );
        assert_eq!(found.gid_bytes(), parse_gid("fe80:0000:0000:0000:b859:9f03:00db:f884"));
        // Without /sys/class/net the parent alone is listed.
        assert_eq!(
            p.ipoib_netdevs,
            [IpoibNetdev {
                name: "ib0".into(),
                ipv4_addrs: vec!["10.20.0.11".into()]
            }]
        );
        // A port whose dev_port does not match gets no IPoIB netdev.
        let no_links = NetLinks(Vec::new());
        assert_eq!(ipoib_netdev(&dir.path.join("mlx5_0"), 2, &no_links), None);
    }

    /// A host with two IPoIB partition children, as `ip -d link show`
    /// printed it in Kamal Heib's reply on linux-rdma, 29 Sep 2020,
    /// "Re: [PATCH for-rc] RDMA/ipoib: Set rtnl_link_ops for ipoib interfaces"
    /// (https://lore.kernel.org/linux-rdma/20200929060438.GA73375@kheib-workstation/),
    /// after the patch:
    ///   29: mlx5_ib0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 2044 ...
    ///       link/infiniband 00:00:1f:e4:fe:80:00:00:00:00:00:00:24:8a:07:03:00:a3:19:64 ...
    ///       ipoib pkey  0xffff mode  datagram ...
    ///   30: mlx5_ib0.8002@mlx5_ib0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 2044 ...
    ///       link/infiniband 00:00:1f:e6:fe:80:00:00:00:00:00:00:24:8a:07:03:00:a3:19:64 ...
    ///       ipoib pkey  0x8002 mode  datagram ...
    ///   38: mlx5_ib0.8001@mlx5_ib0: <BROADCAST,MULTICAST> mtu 4092 qdisc noop state DOWN ...
    ///       link/infiniband 00:00:2e:4e:fe:80:00:00:00:00:00:00:24:8a:07:03:00:a3:19:64 ...
    ///       ipoib pkey  0x8001 mode  datagram ...
    /// So in /sys/class/net: type 32 each; ifindex 29, 30, 38; iflink 29
    /// each (`@mlx5_ib0` is ip's rendering of an iflink that is not the
    /// interface's own). The port's GID 0 is bytes 4..20 of the addresses,
    /// shared by parent and children. Illustrative, not in the listing: the
    /// RDMA device's name (mlx5_0), the LID (7), the IPv4 addresses, and an
    /// Ethernet netdev eth0 (type 1) that must not count.
    fn fake_pkey_child_sysfs() -> (tempdir::Dir, tempdir::Dir) {
        let ib = tempdir::Dir::new();
        let port = ib.path.join("mlx5_0/ports/1");
        std::fs::create_dir_all(port.join("gids")).unwrap();
        std::fs::create_dir_all(port.join("gid_attrs/types")).unwrap();
        std::fs::create_dir_all(ib.path.join("mlx5_0/device/net/mlx5_ib0")).unwrap();
        std::fs::write(port.join("state"), "4: ACTIVE\n").unwrap();
        std::fs::write(port.join("link_layer"), "InfiniBand\n").unwrap();
        std::fs::write(port.join("lid"), "0x7\n").unwrap();
        std::fs::write(port.join("gids/0"), "fe80:0000:0000:0000:248a:0703:00a3:1964\n").unwrap();
        std::fs::write(port.join("gid_attrs/types/0"), "IB/RoCE v1\n").unwrap();
        std::fs::write(ib.path.join("mlx5_0/device/net/mlx5_ib0/dev_port"), "0\n").unwrap();
        // The port's P_Key table (illustrative): the default partition at
        // index 0, 0x8001 at 1, 0x8002 at 2, unused slots 0x0000.
        std::fs::create_dir_all(port.join("pkeys")).unwrap();
        for (index, pkey) in ["0xffff", "0x8001", "0x8002", "0x0000"].iter().enumerate() {
            std::fs::write(port.join("pkeys").join(index.to_string()), format!("{pkey}\n")).unwrap();
        }
        let net = tempdir::Dir::new();
        let broadcast = |pkey: &str| format!("00:ff:ff:ff:ff:12:40:1b:{pkey}:00:00:00:00:00:00:ff:ff:ff:ff\n");
        for (name, kind, ifindex, iflink, brd) in [
            ("eth0", 1, 2, 2, "ff:ff:ff:ff:ff:ff\n".to_string()),
            ("mlx5_ib0", 32, 29, 29, broadcast("ff:ff")),
            ("mlx5_ib0.8002", 32, 30, 29, broadcast("80:02")),
            ("mlx5_ib0.8001", 32, 38, 29, broadcast("80:01")),
        ] {
            let dir = net.path.join(name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("type"), format!("{kind}\n")).unwrap();
            std::fs::write(dir.join("ifindex"), format!("{ifindex}\n")).unwrap();
            std::fs::write(dir.join("iflink"), format!("{iflink}\n")).unwrap();
            std::fs::write(dir.join("broadcast"), brd).unwrap();
        }
        (ib, net)
    }

    #[test]
    fn an_address_on_a_partition_child_is_found_on_its_parents_port() {
        let (ib, net) = fake_pkey_child_sysfs();
        let addrs = NetdevAddrs::from([
            ("eth0".to_string(), vec!["192.0.2.5".to_string()]),
            ("mlx5_ib0".to_string(), vec!["10.20.0.11".to_string()]),
            ("mlx5_ib0.8002".to_string(), vec!["10.82.0.11".to_string()]),
        ]);
        let devs = devices(&ib.path, &net.path, &addrs);
        let p = &devs[0].ports[0];
        // The parent stays the port's netdev; every IPoIB interface is listed.
        assert_eq!(
            (p.netdev.as_str(), p.ipv4_addrs.as_slice()),
            ("mlx5_ib0", ["10.20.0.11".to_string()].as_slice())
        );
        let listed: Vec<(&str, &[String])> = p
            .ipoib_netdevs
            .iter()
            .map(|n| (n.name.as_str(), n.ipv4_addrs.as_slice()))
            .collect();
        assert_eq!(
            listed,
            [
                ("mlx5_ib0", ["10.20.0.11".to_string()].as_slice()),
                ("mlx5_ib0.8001", [].as_slice()),
                ("mlx5_ib0.8002", ["10.82.0.11".to_string()].as_slice()),
            ]
        );
        let on_child = data_path::find(&devs, Ipv4Addr::new(10, 82, 0, 11), None).unwrap();
        assert_eq!(
            (
                on_child.device.as_str(),
                on_child.port,
                on_child.lid,
                on_child.gid_index,
                on_child.netdev.as_str()
            ),
            ("mlx5_0", 1, 7, 0, "mlx5_ib0.8002")
        );
        assert_eq!(on_child.gid, "fe80:0000:0000:0000:248a:0703:00a3:1964");
        let on_parent = data_path::find(&devs, Ipv4Addr::new(10, 20, 0, 11), None).unwrap();
        assert_eq!((on_parent.port, on_parent.netdev.as_str()), (1, "mlx5_ib0"));
        // An Ethernet netdev's address is no IB port's.
        assert_eq!(data_path::find(&devs, Ipv4Addr::new(192, 0, 2, 5), None), None);
        // oob's QPs join the partition of the interface that holds the address.
        let index = |netdev: &str| ipoib_pkey_index_in(&ib.path, &net.path, "mlx5_0", 1, netdev);
        assert_eq!(index(&on_child.netdev), Ok(2));
        assert_eq!(index(&on_parent.netdev), Ok(0));
        assert_eq!(index("mlx5_ib0.8001"), Ok(1));
        let err = index("eth0").unwrap_err();
        assert!(err.contains("not an IPoIB one"), "{err}");
        std::fs::write(ib.path.join("mlx5_0/ports/1/pkeys/1"), "0x0000\n").unwrap();
        let err = index("mlx5_ib0.8001").unwrap_err();
        assert_eq!(
            err,
            "mlx5_ib0.8001's P_Key 0x8001 is not in mlx5_0 port 1's P_Key table (the subnet manager's partitions)"
        );
    }

    #[test]
    fn a_child_placed_under_the_pci_function_is_never_taken_for_the_parent() {
        // Should a driver put a child under device/net too (dev_port 0 like
        // its parent), its iflink still names the parent.
        let (ib, net) = fake_pkey_child_sysfs();
        let child = ib.path.join("mlx5_0/device/net/mlx5_ib0.8002");
        std::fs::create_dir_all(&child).unwrap();
        std::fs::write(child.join("dev_port"), "0\n").unwrap();
        std::fs::remove_dir_all(ib.path.join("mlx5_0/device/net/mlx5_ib0")).unwrap();
        let links = NetLinks::read(&net.path);
        assert_eq!(ipoib_netdev(&ib.path.join("mlx5_0"), 1, &links), None);
        std::fs::create_dir_all(ib.path.join("mlx5_0/device/net/mlx5_ib0")).unwrap();
        std::fs::write(ib.path.join("mlx5_0/device/net/mlx5_ib0/dev_port"), "0\n").unwrap();
        assert_eq!(
            ipoib_netdev(&ib.path.join("mlx5_0"), 1, &links).as_deref(),
            Some("mlx5_ib0")
        );
    }

    #[test]
    fn missing_sysfs_means_no_devices() {
        assert!(devices(
            Path::new("/nonexistent/infiniband"),
            Path::new(NO_NET),
            &NetdevAddrs::new()
        )
        .is_empty());
    }
}
