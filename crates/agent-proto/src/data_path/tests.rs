//! The lookup on replies built from real hosts' listings (no InfiniBand
//! hardware here): the fixtures quote each value from a public report.

use super::*;
use crate::fixtures::{ib_and_roce_host, ib_and_roce_host_of_an_older_agent, ib_host_with_pkey_children};

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
    devices[0].ports[0].ipoib_netdevs[0].ipv4_addrs.clear();
    assert_eq!(find(&devices, Ipv4Addr::new(10, 20, 0, 11), None), None);
    assert!(wanted(Ipv4Addr::new(10, 20, 0, 11)).contains("IPoIB netdev holds 10.20.0.11"));
}

#[test]
fn an_address_on_a_partition_child_is_found_on_the_parents_port() {
    let devices = ib_host_with_pkey_children();
    let found = find(&devices, Ipv4Addr::new(10, 82, 0, 11), None).unwrap();
    assert_eq!(
        found,
        DataPath {
            device: "mlx5_0".into(),
            port: 1,
            link_layer: LinkLayer::InfiniBand,
            gid_index: 0,
            gid: "fe80:0000:0000:0000:248a:0703:00a3:1964".into(),
            lid: 7,
            netdev: "mlx5_ib0.8002".into(),
        }
    );
    // The parent's own address: the same port, the parent's name.
    let on_parent = find(&devices, Ipv4Addr::new(10, 20, 0, 11), None).unwrap();
    assert_eq!(
        (
            on_parent.device.as_str(),
            on_parent.port,
            on_parent.lid,
            on_parent.netdev.as_str()
        ),
        ("mlx5_0", 1, 7, "mlx5_ib0")
    );
}

#[test]
fn a_reply_of_an_older_agent_is_read_from_the_parent_alone() {
    let found = find(
        &ib_and_roce_host_of_an_older_agent(),
        Ipv4Addr::new(10, 20, 0, 11),
        None,
    )
    .unwrap();
    assert_eq!(
        (found.device.as_str(), found.netdev.as_str(), found.lid),
        ("mlx5_0", "ib0", 3)
    );
    // A newer agent's list is what counts: an address only in the old
    // fields is not one of the port's IPoIB netdevs.
    let mut devices = ib_host_with_pkey_children();
    devices[0].ports[0].ipv4_addrs = vec!["10.99.0.1".into()];
    assert_eq!(find(&devices, Ipv4Addr::new(10, 99, 0, 1), None), None);
}
