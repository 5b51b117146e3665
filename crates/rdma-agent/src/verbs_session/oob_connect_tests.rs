//! The RTR address choice of oob sides. No InfiniBand hardware here: the
//! GIDs and LIDs are real ones quoted from public reports of IB hosts.

use super::*;

/// `ibv_devinfo -v` of an InfiniBand port, GID[0]:
/// https://github.com/linux-rdma/opensm/issues/36
const IB_GID: &str = "fe80:0000:0000:0000:b859:9f03:00db:f884";
/// The same port after opensm set subnet_prefix 0xfe80000000000006 (same issue):
/// a port of another subnet.
const IB_GID_OTHER_SUBNET: &str = "fe80:0000:0000:0006:b859:9f03:00db:f884";
/// An InfiniBand port's GID from `fi_info -p verbs -v`:
/// https://github.com/ofiwg/libfabric/pull/5605
const IB_PEER_GID: &str = "fe80:0000:0000:0000:248a:0703:003f:1f6a";

fn bytes(gid: &str) -> [u8; 16] {
    gid.parse::<std::net::Ipv6Addr>().unwrap().octets()
}

/// Port 1 of mlx5_0 with LID 3, as `rdma link` printed it in
/// https://github.com/openshift/sriov-network-operator/issues/635
fn ib_side() -> Local {
    Local {
        device: "mlx5_0".into(),
        port: 1,
        sgid_index: 0,
        gid: bytes(IB_GID),
        infiniband: true,
        lid: 3,
        pkey_index: 0,
    }
}

/// The suite's rxe side: RoCE v2 GID ::ffff:10.77.0.1 at index 1.
fn roce_side() -> Local {
    Local {
        device: "rxe0".into(),
        port: 1,
        sgid_index: 1,
        gid: bytes("::ffff:10.77.0.1"),
        infiniband: false,
        lid: 0,
        pkey_index: 0,
    }
}

fn endpoint(gid: &str, lid: u32) -> QpEndpoint {
    QpEndpoint {
        qpn: 0x11,
        psn: 7,
        gid: bytes(gid).to_vec(),
        lid,
        mtu: 4096,
        ..Default::default()
    }
}

#[test]
fn roce_peers_get_a_grh_with_our_gid_index() {
    let addr = peer_address(&roce_side(), &endpoint("::ffff:10.77.0.2", 0)).unwrap();
    assert_eq!(
        addr,
        PeerAddress::Global {
            dgid: bytes("::ffff:10.77.0.2"),
            sgid_index: 1
        }
    );
}

#[test]
fn infiniband_peers_in_the_subnet_get_their_lid_and_no_grh() {
    // LID 4: mlx5_6/1 of the same listing.
    let addr = peer_address(&ib_side(), &endpoint(IB_PEER_GID, 4)).unwrap();
    assert_eq!(addr, PeerAddress::Lid { dlid: 4 });
}

#[test]
fn what_oob_does_not_support_on_infiniband_is_refused_by_name() {
    let other_subnet = peer_address(&ib_side(), &endpoint(IB_GID_OTHER_SUBNET, 4)).unwrap_err();
    assert!(other_subnet.contains("another InfiniBand subnet"), "{other_subnet}");
    assert!(
        other_subnet.contains("routed InfiniBand is not supported"),
        "{other_subnet}"
    );
    assert!(other_subnet.contains("--cm rdma_cm"), "{other_subnet}");

    let roce_peer = peer_address(&ib_side(), &endpoint("::ffff:10.77.0.2", 0)).unwrap_err();
    assert!(roce_peer.contains("the peer has no LID"), "{roce_peer}");

    let ib_peer = peer_address(&roce_side(), &endpoint(IB_PEER_GID, 4)).unwrap_err();
    assert!(ib_peer.contains("same link layer"), "{ib_peer}");

    let no_sm = Local { lid: 0, ..ib_side() };
    let unconfigured = peer_address(&no_sm, &endpoint(IB_PEER_GID, 4)).unwrap_err();
    assert!(unconfigured.contains("subnet manager"), "{unconfigured}");

    let short = QpEndpoint {
        gid: vec![0; 4],
        ..endpoint(IB_PEER_GID, 4)
    };
    assert!(peer_address(&ib_side(), &short).unwrap_err().contains("4 bytes"));
}
