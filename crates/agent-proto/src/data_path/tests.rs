//! The lookup on replies built from real hosts' listings (no InfiniBand
//! hardware here): each value below is quoted from a public report.

use super::*;
use crate::v1::{Gid, RdmaPort};

fn gid(index: u32, gid: &str, gid_type: &str) -> Gid {
    Gid {
        index,
        gid: gid.into(),
        gid_type: gid_type.into(),
    }
}

/// Two devices of one host, as `rdma link` printed them in
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
pub(crate) fn ib_and_roce_host() -> Vec<RdmaDevice> {
    vec![
        RdmaDevice {
            name: "mlx5_0".into(),
            netdev: String::new(),
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
            }],
        },
    ]
}

#[test]
fn an_infiniband_port_is_found_by_its_ipoib_address_with_lid_and_gid_0() {
    let found = find(&ib_and_roce_host(), Ipv4Addr::new(10, 20, 0, 11), None).unwrap();
    assert_eq!(
        found,
        DataPath {
            device: "mlx5_0".into(),
            port: 1,
            link_layer: LinkLayer::InfiniBand,
            gid_index: 0,
            gid: "fe80:0000:0000:0000:b859:9f03:00db:f884".into(),
            lid: 3,
            netdev: "ib0".into(),
        }
    );
    assert_eq!(found.gid_bytes().unwrap()[..8], [0xfe, 0x80, 0, 0, 0, 0, 0, 0]);
    // Named explicitly: the same; another device: not there.
    assert_eq!(
        find(&ib_and_roce_host(), Ipv4Addr::new(10, 20, 0, 11), Some("mlx5_0")),
        Some(found)
    );
    assert_eq!(
        find(&ib_and_roce_host(), Ipv4Addr::new(10, 20, 0, 11), Some("mlx5_4")),
        None
    );
}

#[test]
fn an_ethernet_port_is_found_by_its_roce_v2_gid_not_the_v1_one() {
    let found = find(&ib_and_roce_host(), Ipv4Addr::new(192, 168, 6, 6), None).unwrap();
    assert_eq!(
        (
            found.device.as_str(),
            found.port,
            found.link_layer,
            found.gid_index,
            found.lid,
            found.netdev.as_str()
        ),
        ("mlx5_4", 1, LinkLayer::Ethernet, 15, 0, "enp97s0f0")
    );
}

#[test]
fn an_address_on_no_port_is_not_found() {
    assert_eq!(find(&ib_and_roce_host(), Ipv4Addr::new(10, 20, 0, 12), None), None);
    // An InfiniBand GID never matches an IPv4-mapped one, so an IB port
    // without the address in its IPoIB netdev is never picked by its GIDs.
    let mut devices = ib_and_roce_host();
    devices[0].ports[0].ipv4_addrs.clear();
    assert_eq!(find(&devices, Ipv4Addr::new(10, 20, 0, 11), None), None);
    assert!(wanted(Ipv4Addr::new(10, 20, 0, 11)).contains("IPoIB netdev holds 10.20.0.11"));
}
