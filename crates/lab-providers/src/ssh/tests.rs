//! Tests of the ssh provider's parts that need no host: endpoints from
//! labs.yaml and the user's files, and the choice of RDMA device.

use super::*;
use std::net::Ipv4Addr;

fn links(json: &str) -> Vec<RdmaLink> {
    serde_json::from_str(json).unwrap()
}

fn addrs(json: &str) -> Vec<IpAddrInfo> {
    serde_json::from_str(json).unwrap()
}

// As `rdma -j link show` and `ip -j -4 addr show` print them on the QEMU
// lab's nodes (rxe0 over eth1), plus a second, down device.
const LINKS: &str = r#"[{"ifindex":1,"ifname":"rxe0","port":1,"state":"ACTIVE","physical_state":"LINK_UP","netdev":"eth1","netdev_index":3},
{"ifindex":2,"ifname":"mlx5_0","port":1,"state":"DOWN","physical_state":"DISABLED","netdev":"ens1f0","netdev_index":4}]"#;
const ADDRS: &str = r#"[{"ifindex":1,"ifname":"lo","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8}]},
{"ifindex":3,"ifname":"eth1","addr_info":[{"family":"inet","local":"10.77.0.1","prefixlen":24}]},
{"ifindex":4,"ifname":"ens1f0","addr_info":[{"family":"inet","local":"192.168.50.11","prefixlen":24}]}]"#;
const LAYERS: &str = "/sys/class/infiniband/rxe0/ports/1/link_layer:Ethernet\n/sys/class/infiniband/mlx5_0/ports/1/link_layer:Ethernet\n";

#[test]
fn test_the_device_on_data_addr_is_picked() {
    let p = pick_device(Ipv4Addr::new(10, 77, 0, 1), None, &links(LINKS), &addrs(ADDRS), LAYERS).unwrap();
    assert_eq!(
        p,
        Picked {
            device: "rxe0".into(),
            port: 1,
            netdev: Some("eth1".into()),
            link_layer: Some("Ethernet".into()),
        }
    );
    // Named explicitly, the same device.
    let named = pick_device(
        Ipv4Addr::new(10, 77, 0, 1),
        Some("rxe0"),
        &links(LINKS),
        &addrs(ADDRS),
        LAYERS,
    );
    assert_eq!(named.unwrap().device, "rxe0");
}

#[test]
fn test_a_device_without_an_active_port_is_refused_with_the_listing() {
    let (problem, fix) = pick_device(
        Ipv4Addr::new(192, 168, 50, 11),
        None,
        &links(LINKS),
        &addrs(ADDRS),
        LAYERS,
    )
    .unwrap_err();
    assert!(
        problem.starts_with("mlx5_0 has no ACTIVE port; the host has:\n"),
        "{problem}"
    );
    assert!(
        problem.contains("  rxe0/1 state ACTIVE link_layer Ethernet netdev eth1 (10.77.0.1)"),
        "{problem}"
    );
    assert!(
        problem.contains("  mlx5_0/1 state DOWN link_layer Ethernet netdev ens1f0 (192.168.50.11)"),
        "{problem}"
    );
    assert!(fix.contains("bring the port up"), "{fix}");
}

#[test]
fn test_data_addr_on_no_rdma_netdev_lists_what_there_is() {
    let (problem, fix) =
        pick_device(Ipv4Addr::new(10, 77, 0, 9), None, &links(LINKS), &addrs(ADDRS), LAYERS).unwrap_err();
    assert!(
        problem.starts_with("data_addr 10.77.0.9 is on no RDMA device's netdev; the host has:"),
        "{problem}"
    );
    assert!(fix.contains("rdma_device"), "{fix}");
    let (problem, _) = pick_device(
        Ipv4Addr::new(10, 77, 0, 1),
        Some("irdma0"),
        &links(LINKS),
        &addrs(ADDRS),
        LAYERS,
    )
    .unwrap_err();
    assert!(problem.starts_with("no RDMA device `irdma0` on the host"), "{problem}");
    let (problem, _) = pick_device(Ipv4Addr::new(10, 77, 0, 1), None, &[], &addrs(ADDRS), "").unwrap_err();
    assert!(problem.contains("the host has no RDMA device"), "{problem}");
}

// An InfiniBand host: `rdma link` as printed in
// https://github.com/openshift/sriov-network-operator/issues/635
//   link mlx5_0/1 subnet_prefix fe80:0000:0000:0000 lid 3 sm_lid 1 lmc 0 state ACTIVE physical_state LINK_UP
//   link mlx5_1/1 subnet_prefix fe80:0000:0000:0000 lid 65535 sm_lid 0 lmc 0 state DOWN physical_state DISABLED
//   link mlx5_4/1 state ACTIVE physical_state LINK_UP netdev enp97s0f0
// in `rdma -j`'s form (same keys, no netdev on IB ports); IPoIB's ib0 (and
// ib1) under the IB devices' PCI functions as sysfs lays them out. The IPv4
// addresses are illustrative: no IB hardware here.
const IB_LINKS: &str = r#"[{"ifindex":0,"ifname":"mlx5_0","port":1,"subnet_prefix":"fe80:0000:0000:0000","lid":3,"sm_lid":1,"lmc":0,"state":"ACTIVE","physical_state":"LINK_UP"},
{"ifindex":1,"ifname":"mlx5_1","port":1,"subnet_prefix":"fe80:0000:0000:0000","lid":65535,"sm_lid":0,"lmc":0,"state":"DOWN","physical_state":"DISABLED"},
{"ifindex":4,"ifname":"mlx5_4","port":1,"state":"ACTIVE","physical_state":"LINK_UP","netdev":"enp97s0f0","netdev_index":6}]"#;
const IB_ADDRS: &str = r#"[{"ifindex":1,"ifname":"lo","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8}]},
{"ifindex":4,"ifname":"ib0","addr_info":[{"family":"inet","local":"10.20.0.11","prefixlen":24}]},
{"ifindex":5,"ifname":"ib1","addr_info":[{"family":"inet","local":"10.21.0.11","prefixlen":24}]},
{"ifindex":6,"ifname":"enp97s0f0","addr_info":[{"family":"inet","local":"192.168.6.6","prefixlen":24}]}]"#;
const IB_SYSFS: &str = "/sys/class/infiniband/mlx5_0/ports/1/link_layer:InfiniBand
/sys/class/infiniband/mlx5_1/ports/1/link_layer:InfiniBand
/sys/class/infiniband/mlx5_4/ports/1/link_layer:Ethernet
/sys/class/infiniband/mlx5_0/device/net/ib0/dev_port:0
/sys/class/infiniband/mlx5_1/device/net/ib1/dev_port:0
/sys/class/infiniband/mlx5_4/device/net/enp97s0f0/dev_port:0
";

#[test]
fn test_an_infiniband_device_is_picked_by_its_ipoib_address() {
    let p = pick_device(
        Ipv4Addr::new(10, 20, 0, 11),
        None,
        &links(IB_LINKS),
        &addrs(IB_ADDRS),
        IB_SYSFS,
    )
    .unwrap();
    assert_eq!(
        p,
        Picked {
            device: "mlx5_0".into(),
            port: 1,
            netdev: Some("ib0".into()),
            link_layer: Some("InfiniBand".into()),
        }
    );
    // The RoCE device of the same host by its netdev, as before.
    let roce = pick_device(
        Ipv4Addr::new(192, 168, 6, 6),
        None,
        &links(IB_LINKS),
        &addrs(IB_ADDRS),
        IB_SYSFS,
    )
    .unwrap();
    assert_eq!(
        (roce.device.as_str(), roce.netdev.as_deref()),
        ("mlx5_4", Some("enp97s0f0"))
    );
    // An IB port that is down is refused with the listing, LIDs and IPoIB netdevs shown.
    let (problem, fix) = pick_device(
        Ipv4Addr::new(10, 21, 0, 11),
        None,
        &links(IB_LINKS),
        &addrs(IB_ADDRS),
        IB_SYSFS,
    )
    .unwrap_err();
    assert!(
        problem.starts_with("mlx5_1 has no ACTIVE port; the host has:\n"),
        "{problem}"
    );
    assert!(
        problem.contains("  mlx5_0/1 state ACTIVE link_layer InfiniBand lid 3 netdev ib0 (10.20.0.11)"),
        "{problem}"
    );
    assert!(
        problem.contains("  mlx5_4/1 state ACTIVE link_layer Ethernet netdev enp97s0f0 (192.168.6.6)"),
        "{problem}"
    );
    assert!(fix.contains("subnet manager"), "{fix}");
}

// An InfiniBand host whose data address sits on a partition (P_Key) child:
// `ip -d link show` of a ConnectX host in Kamal Heib's reply on linux-rdma,
// 29 Sep 2020, "Re: [PATCH for-rc] RDMA/ipoib: Set rtnl_link_ops for ipoib
// interfaces" (https://lore.kernel.org/linux-rdma/20200929060438.GA73375@kheib-workstation/):
//   29: mlx5_ib0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 2044 ... link/infiniband 00:00:1f:e4:fe:80:...
//   30: mlx5_ib0.8002@mlx5_ib0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 2044 ... ipoib pkey  0x8002 ...
//   38: mlx5_ib0.8001@mlx5_ib0: <BROADCAST,MULTICAST> mtu 4092 qdisc noop state DOWN ... ipoib pkey  0x8001 ...
// so in sysfs: type 32, ifindex 29/30/38, iflink 29 for all three (`@mlx5_ib0`
// is how ip prints an iflink that is not the interface's own; `ip -j` calls
// it "link"). Only the parent sits under the PCI function (the kernel's
// ipoib_child_init() gives a child no parent device). Illustrative, not in
// the listing: the RDMA device's name and LID (mlx5_0, lid 7), the IPv4
// addresses, and eth0.
const PKEY_LINKS: &str = r#"[{"ifindex":0,"ifname":"mlx5_0","port":1,"subnet_prefix":"fe80:0000:0000:0000","lid":7,"sm_lid":1,"lmc":0,"state":"ACTIVE","physical_state":"LINK_UP"}]"#;
const PKEY_ADDRS: &str = r#"[{"ifindex":1,"ifname":"lo","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8}]},
{"ifindex":2,"ifname":"eth0","addr_info":[{"family":"inet","local":"192.0.2.5","prefixlen":24}]},
{"ifindex":29,"ifname":"mlx5_ib0","addr_info":[{"family":"inet","local":"10.20.0.11","prefixlen":24}]},
{"ifindex":30,"ifname":"mlx5_ib0.8002","link":"mlx5_ib0","addr_info":[{"family":"inet","local":"10.82.0.11","prefixlen":24}]}]"#;
const PKEY_SYSFS: &str = "/sys/class/infiniband/mlx5_0/ports/1/link_layer:InfiniBand
/sys/class/infiniband/mlx5_0/device/net/mlx5_ib0/dev_port:0
/sys/class/net/eth0/type:1
/sys/class/net/lo/type:772
/sys/class/net/mlx5_ib0.8001/type:32
/sys/class/net/mlx5_ib0.8002/type:32
/sys/class/net/mlx5_ib0/type:32
/sys/class/net/eth0/ifindex:2
/sys/class/net/lo/ifindex:1
/sys/class/net/mlx5_ib0.8001/ifindex:38
/sys/class/net/mlx5_ib0.8002/ifindex:30
/sys/class/net/mlx5_ib0/ifindex:29
/sys/class/net/eth0/iflink:2
/sys/class/net/lo/iflink:1
/sys/class/net/mlx5_ib0.8001/iflink:29
/sys/class/net/mlx5_ib0.8002/iflink:29
/sys/class/net/mlx5_ib0/iflink:29
";

#[test]
fn test_an_address_on_an_ipoib_partition_child_picks_the_parents_port() {
    let pick = |addr: Ipv4Addr, wanted: Option<&str>| {
        pick_device(addr, wanted, &links(PKEY_LINKS), &addrs(PKEY_ADDRS), PKEY_SYSFS)
    };
    let expected = |netdev: &str| Picked {
        device: "mlx5_0".into(),
        port: 1,
        netdev: Some(netdev.into()),
        link_layer: Some("InfiniBand".into()),
    };
    // On the child: its port, and the child is the node's data netdev.
    assert_eq!(
        pick(Ipv4Addr::new(10, 82, 0, 11), None).unwrap(),
        expected("mlx5_ib0.8002")
    );
    assert_eq!(
        pick(Ipv4Addr::new(10, 82, 0, 11), Some("mlx5_0")).unwrap(),
        expected("mlx5_ib0.8002")
    );
    // On the parent, as before.
    assert_eq!(pick(Ipv4Addr::new(10, 20, 0, 11), None).unwrap(), expected("mlx5_ib0"));
    // Elsewhere: the listing shows every IPoIB interface of the port.
    let (problem, _) = pick(Ipv4Addr::new(192, 0, 2, 5), None).unwrap_err();
    assert!(
        problem.contains(
            "  mlx5_0/1 state ACTIVE link_layer InfiniBand lid 7 netdev mlx5_ib0 (10.20.0.11), \
             mlx5_ib0.8001 (no IPv4 address), mlx5_ib0.8002 (10.82.0.11)"
        ),
        "{problem}"
    );
}

#[test]
fn test_without_the_net_class_lines_an_infiniband_port_has_its_parent_alone() {
    // A host whose /sys/class/net did not list (or the listing of an older
    // labctl): the parent is found as before, the child's address is not.
    let ib_only: String = PKEY_SYSFS
        .lines()
        .filter(|l| l.starts_with("/sys/class/infiniband/"))
        .map(|l| format!("{l}\n"))
        .collect();
    let p = pick_device(
        Ipv4Addr::new(10, 20, 0, 11),
        None,
        &links(PKEY_LINKS),
        &addrs(PKEY_ADDRS),
        &ib_only,
    )
    .unwrap();
    assert_eq!(p.netdev.as_deref(), Some("mlx5_ib0"));
    let (problem, _) = pick_device(
        Ipv4Addr::new(10, 82, 0, 11),
        None,
        &links(PKEY_LINKS),
        &addrs(PKEY_ADDRS),
        &ib_only,
    )
    .unwrap_err();
    assert!(problem.ends_with("lid 7 netdev mlx5_ib0 (10.20.0.11)"), "{problem}");
}

fn node_on(host: &str, port: u16, identity: Option<&str>, host_key: Option<&str>) -> ResolvedNode {
    ResolvedNode {
        index: 0,
        name: "a".into(),
        cpus: 1,
        memory_mib: 1024,
        data_addr: Ipv4Addr::new(10, 77, 0, 1),
        data_prefix: 24,
        ssh_port: None,
        ssh: Some(lab_model::SshTarget {
            host: host.into(),
            port: Some(port),
            user: None,
            identity_file: identity.map(str::to_string),
            host_key: host_key.map(str::to_string),
            sudo: None,
            proxy_jump: None,
            proxy_jump_host_key: None,
        }),
        rdma_device: None,
    }
}

#[test]
fn test_endpoints_take_keys_from_labs_yaml_or_known_hosts() {
    let home = std::env::temp_dir().join(format!("labctl-ssh-provider-{}", std::process::id()));
    let dotssh = home.join(".ssh");
    std::fs::create_dir_all(&dotssh).unwrap();
    let host_key = ssh::load_or_create_host_key(&home.join("host/key")).unwrap().1;
    let parsed = ssh::parse_public(&host_key).unwrap();
    std::fs::write(dotssh.join("known_hosts"), format!("[127.0.0.1]:2201 {host_key}\n")).unwrap();
    std::fs::write(dotssh.join("id_ed25519"), "not read here").unwrap();
    let p = SshProvider::with_home(Fabric::Existing, home.clone());

    // No host_key: known_hosts has the host on that port.
    let e = p.endpoint(&node_on("127.0.0.1", 2201, None, None)).unwrap();
    assert_eq!(e.target.user, "root");
    assert_eq!(e.target.identity.as_deref(), Some(dotssh.join("id_ed25519").as_path()));
    assert!(e.check.accepts(&parsed));
    // Another port is another host: nothing accepted, so the preflight refuses.
    let e = p.endpoint(&node_on("127.0.0.1", 2202, None, None)).unwrap();
    assert!(matches!(&e.check, HostKeyCheck::AnyOf { keys, .. } if keys.is_empty()));
    // A fingerprint in labs.yaml.
    let fp = ssh::fingerprint(&parsed);
    let e = p
        .endpoint(&node_on("10.0.0.5", 22, Some("~/.ssh/id_ed25519"), Some(&fp)))
        .unwrap();
    assert!(e.check.accepts(&parsed));
    let other = ssh::parse_public(&ssh::load_or_create_host_key(&home.join("host/other")).unwrap().1).unwrap();
    assert!(!e.check.accepts(&other));
    // A key file that is not there.
    let err = p
        .endpoint(&node_on("10.0.0.5", 22, Some("~/.ssh/nope"), Some(&fp)))
        .unwrap_err();
    assert!(err.to_string().contains("identity_file"), "{err}");
    assert!(err.to_string().contains(".ssh/nope does not exist"), "{err}");
    std::fs::remove_dir_all(&home).unwrap();
}

#[tokio::test]
async fn test_down_of_an_unreachable_host_names_the_node_once() {
    // A port nothing listens on: the connection is refused.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let key = PrivateKey::random(&mut rand::rng(), Algorithm::Ed25519).unwrap();
    let node = NodeState {
        name: "client".into(),
        ssh_host: "127.0.0.1".into(),
        ssh_port: port,
        ssh_user: "root".into(),
        ssh_identity: None,
        ssh_jump: None,
        ssh_agent: false,
        data_addr: Ipv4Addr::new(10, 77, 0, 2),
        data_prefix: 24,
        data_netdev: None,
        rdma_device: None,
        host_key: Some(ssh::public_line(key.public_key())),
        pid: None,
        agent_sha256: None,
        agent_port: 7470,
        provisioned: true,
        host: None,
    };
    let Err(e) = connect_recorded(&node).await else {
        panic!("connected to a closed port");
    };
    let text = unreachable(&node, e).to_string();
    assert_eq!(text.matches("node `client`").count(), 1, "{text}");
    assert!(
        text.starts_with(&format!(
            "node `client`: cannot reach the host root@127.0.0.1:{port} over SSH to undo what the lab changed there: SSH: "
        )),
        "{text}"
    );
    assert!(text.contains("fix: bring the host back"), "{text}");
}
