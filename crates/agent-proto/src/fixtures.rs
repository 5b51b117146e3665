//! `NodeInfo` devices of real InfiniBand hosts, for the tests of every crate
//! that reads a reply (this one, lab-core's facts and bench): one copy of
//! each host, with the public reports its values are quoted from. Built only
//! for tests (`cfg(test)` here, the `test-fixtures` feature elsewhere); no
//! InfiniBand hardware here, so these listings are the ground truth.

use crate::v1::{Gid, IpoibNetdev, RdmaDevice, RdmaPort};

fn gid(index: u32, gid: &str, gid_type: &str) -> Gid {
    Gid {
        index,
        gid: gid.into(),
        gid_type: gid_type.into(),
    }
}

/// An InfiniBand port and a RoCE port of one host, as an agent that lists
/// `ipoib_netdevs` reports them.
///
/// `rdma link` printed the two ports in
/// https://github.com/openshift/sriov-network-operator/issues/635 :
///   link mlx5_0/1 subnet_prefix fe80:0000:0000:0000 lid 3 sm_lid 1 lmc 0 state ACTIVE physical_state LINK_UP
///   link mlx5_4/1 state ACTIVE physical_state LINK_UP netdev enp97s0f0
/// mlx5_0's GID 0 is the one `ibv_devinfo -v` printed on an InfiniBand port in
/// https://github.com/linux-rdma/opensm/issues/36
/// (`GID[  0]: fe80:0000:0000:0000:b859:9f03:00db:f884`); its IPoIB netdev is
/// `ib0` as on the ConnectX port in https://github.com/canonical/lxd/pull/6060 .
/// mlx5_4's RoCE v2 GID is index 15, `0000:...:ffff:c0a8:0606`, as in
/// https://github.com/Mellanox/k8s-rdma-shared-dev-plugin/issues/164 .
/// The IPv4 addresses are the only values chosen here (192.168.6.6 is the
/// one that GID maps; 10.20.0.11 on ib0 is illustrative).
pub fn ib_and_roce_host() -> Vec<RdmaDevice> {
    vec![
        RdmaDevice {
            name: "mlx5_0".into(),
            netdev: "ib0".into(),
            node_guid: "b859:9f03:00db:f884".into(),
            software: false,
            ports: vec![RdmaPort {
                port: 1,
                state: "PORT_ACTIVE".into(),
                active_mtu: 4096,
                link_layer: "InfiniBand".into(),
                gids: vec![gid(0, "fe80:0000:0000:0000:b859:9f03:00db:f884", "IB")],
                lid: 3,
                netdev: "ib0".into(),
                ipv4_addrs: vec!["10.20.0.11".into()],
                ipoib_netdevs: vec![IpoibNetdev {
                    name: "ib0".into(),
                    ipv4_addrs: vec!["10.20.0.11".into()],
                }],
                // Not in the listings these come from.
                rate: String::new(),
            }],
        },
        RdmaDevice {
            name: "mlx5_4".into(),
            netdev: "enp97s0f0".into(),
            node_guid: String::new(),
            software: false,
            ports: vec![RdmaPort {
                port: 1,
                state: "PORT_ACTIVE".into(),
                active_mtu: 4096,
                link_layer: "Ethernet".into(),
                gids: vec![
                    gid(14, "0000:0000:0000:0000:0000:ffff:c0a8:0606", "RoCE v1"),
                    gid(15, "0000:0000:0000:0000:0000:ffff:c0a8:0606", "RoCE v2"),
                ],
                lid: 0,
                netdev: "enp97s0f0".into(),
                ipv4_addrs: vec!["192.168.6.6".into()],
                ipoib_netdevs: Vec::new(),
                rate: String::new(),
            }],
        },
    ]
}

/// The same host as an agent before `ipoib_netdevs` reported it: the
/// parent's name and addresses only.
pub fn ib_and_roce_host_of_an_older_agent() -> Vec<RdmaDevice> {
    let mut devices = ib_and_roce_host();
    for port in devices.iter_mut().flat_map(|d| d.ports.iter_mut()) {
        port.ipoib_netdevs.clear();
    }
    devices
}

/// An InfiniBand port whose data address sits on a partition child.
///
/// `ip -d link show` of a ConnectX host with two P_Key children, in Kamal
/// Heib's reply on linux-rdma, 29 Sep 2020, "Re: [PATCH for-rc] RDMA/ipoib:
/// Set rtnl_link_ops for ipoib interfaces"
/// (https://lore.kernel.org/linux-rdma/20200929060438.GA73375@kheib-workstation/):
///   29: mlx5_ib0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 2044 ...
///       link/infiniband 00:00:1f:e4:fe:80:00:00:00:00:00:00:24:8a:07:03:00:a3:19:64 ...
///   30: mlx5_ib0.8002@mlx5_ib0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 2044 ...
///       ipoib pkey  0x8002 mode  datagram ...
///   38: mlx5_ib0.8001@mlx5_ib0: <BROADCAST,MULTICAST> mtu 4092 qdisc noop state DOWN ...
///       ipoib pkey  0x8001 mode  datagram ...
/// GID 0 is bytes 4..20 of those hardware addresses (parent and children
/// share them). Illustrative, not in the listing: the RDMA device's name
/// (mlx5_0), the LID (7) and the IPv4 addresses (10.20.0.11 on the parent,
/// 10.82.0.11 on mlx5_ib0.8002; mlx5_ib0.8001 is DOWN and has none).
pub fn ib_host_with_pkey_children() -> Vec<RdmaDevice> {
    let netdev = |name: &str, addrs: &[&str]| IpoibNetdev {
        name: name.into(),
        ipv4_addrs: addrs.iter().map(|a| a.to_string()).collect(),
    };
    vec![RdmaDevice {
        name: "mlx5_0".into(),
        netdev: "mlx5_ib0".into(),
        node_guid: String::new(),
        software: false,
        ports: vec![RdmaPort {
            port: 1,
            state: "PORT_ACTIVE".into(),
            active_mtu: 2048,
            link_layer: "InfiniBand".into(),
            gids: vec![gid(0, "fe80:0000:0000:0000:248a:0703:00a3:1964", "IB")],
            lid: 7,
            netdev: "mlx5_ib0".into(),
            ipv4_addrs: vec!["10.20.0.11".into()],
            ipoib_netdevs: vec![
                netdev("mlx5_ib0", &["10.20.0.11"]),
                netdev("mlx5_ib0.8001", &[]),
                netdev("mlx5_ib0.8002", &["10.82.0.11"]),
            ],
            rate: String::new(),
        }],
    }]
}
