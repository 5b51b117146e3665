use agent_proto::v1::NodeInfoReply;

use super::*;
use crate::doctor::probe::parse;
use crate::facts::fixtures::info;

/// The probe script's output on a node of the default QEMU lab, with the
/// data netdev's MTU and the agent's memlock limit as given, and an agent
/// without CAP_IPC_LOCK (the lab's runs as root; see the memlock test).
fn probe_text(eth1_mtu: u32, memlock: &str) -> String {
    format!(
        "module ib_core\nmodule ib_uverbs\nmodule rdma_cm\nmodule rdma_ucm\nmodule rdma_rxe\n\
         mtu eth0 1500\nrp_filter eth0 0\nmtu eth1 {eth1_mtu}\nrp_filter eth1 0\nmtu lo 65536\n\
         rp_filter lo 0\nrp_filter all 0\nmemlock {memlock} {memlock}\nfi_provider psm2\n\
         fi_provider verbs\nfi_provider ofi_rxm\nfi_provider ofi_rxd\nfi_provider tcp\n\
         uptime 412.37\ntx_timeouts 0\n"
    )
}

fn node(name: &str, last: u8, info: Result<NodeInfoReply, String>, probe: &str) -> NodeFound {
    NodeFound {
        name: name.into(),
        data_addr: Ipv4Addr::new(10, 77, 0, last),
        device: Some("rxe0".into()),
        info,
        probe: Ok(parse(probe)),
        clock: Err("not read".into()),
        nic_restarts: None,
    }
}

fn verdicts(checks: &[Check]) -> Vec<(&str, Verdict)> {
    checks.iter().map(|c| (c.check.as_str(), c.verdict)).collect()
}

#[test]
fn test_a_healthy_rxe_node_passes_every_check() {
    let n = node("server", 1, Ok(info(1, 1, 2)), &probe_text(1500, "unlimited"));
    let checks = node_checks(Fabric::Rxe, &n);
    assert_eq!(
        verdicts(&checks),
        [
            ("agent", Verdict::Ok),
            ("modules", Verdict::Ok),
            ("device", Verdict::Ok),
            ("port", Verdict::Ok),
            ("mtu", Verdict::Ok),
            ("rp_filter", Verdict::Ok),
            ("tx_queue", Verdict::Ok),
            ("memlock", Verdict::Ok),
            ("libfabric", Verdict::Ok),
        ]
    );
    let device = &checks[2].evidence;
    assert!(
        device.contains("rxe0 port 1 on eth1 carries 10.77.0.1") && device.contains("GID index 1"),
        "{device}"
    );
    assert_eq!(checks[4].evidence, "eth1 MTU 1500, rxe0 port 1 active MTU 1024");
}

#[test]
fn test_each_broken_node_fact_fails_its_own_check_with_a_fix() {
    // No rxe link on the data NIC: the device check fails and says how to add it.
    let mut bare = info(1, 1, 2);
    bare.devices.clear();
    let checks = node_checks(
        Fabric::Rxe,
        &node("client", 1, Ok(bare), &probe_text(1500, "unlimited")),
    );
    let device = checks.iter().find(|c| c.check == "device").unwrap();
    assert_eq!(device.verdict, Verdict::Fail);
    assert!(device.evidence.contains("no RDMA device"), "{}", device.evidence);
    assert!(device.fix.as_deref().unwrap().contains("rdma link add rxe0 type rxe"));
    // A port that is down.
    let mut down = info(1, 1, 2);
    down.devices[0].ports[0].state = "PORT_DOWN".into();
    let checks = node_checks(
        Fabric::Rxe,
        &node("client", 1, Ok(down), &probe_text(1500, "unlimited")),
    );
    let port = checks.iter().find(|c| c.check == "port").unwrap();
    assert_eq!(port.verdict, Verdict::Fail);
    assert!(port.fix.as_deref().unwrap().contains("ip link set dev eth1 up"));
    // A 64 KiB memlock limit, rdma_rxe not loaded, strict rp_filter.
    let text = probe_text(1500, "65536")
        .replace("module rdma_rxe\n", "")
        .replace("rp_filter all 0", "rp_filter all 1");
    let checks = node_checks(Fabric::Rxe, &node("client", 1, Ok(info(1, 1, 2)), &text));
    let by = |name: &str| checks.iter().find(|c| c.check == name).unwrap().clone();
    assert_eq!(by("memlock").verdict, Verdict::Fail);
    assert!(by("memlock").evidence.contains("64 KiB"), "{}", by("memlock").evidence);
    assert_eq!(by("modules").verdict, Verdict::Fail);
    assert!(by("modules").fix.unwrap().contains("modprobe -a rdma_rxe"));
    assert_eq!(by("rp_filter").verdict, Verdict::Warn);
    // The lab's own agent: root, an 8 MiB limit that root's CAP_IPC_LOCK lifts.
    let text = format!("{}agent_capeff 000001ffffffffff\n", probe_text(1500, "8388608"));
    let checks = node_checks(Fabric::Rxe, &node("client", 1, Ok(info(1, 1, 2)), &text));
    let memlock = checks.iter().find(|c| c.check == "memlock").unwrap();
    assert_eq!(memlock.verdict, Verdict::Ok);
    assert!(memlock.evidence.contains("CAP_IPC_LOCK"), "{}", memlock.evidence);
    // A libfabric without ofi_rxd: fabric-* workloads' default is missing.
    let text = probe_text(1500, "unlimited").replace("fi_provider ofi_rxd\n", "");
    let checks = node_checks(Fabric::Rxe, &node("client", 1, Ok(info(1, 1, 2)), &text));
    assert!(checks
        .iter()
        .any(|c| c.check == "libfabric" && c.verdict == Verdict::Warn));
    // An agent that does not answer fails its check; the probe's still run.
    let n = node(
        "client",
        1,
        Err("NodeInfo: connection refused".into()),
        &probe_text(1500, "unlimited"),
    );
    let checks = node_checks(Fabric::Rxe, &n);
    assert_eq!(checks[0].verdict, Verdict::Fail);
    assert!(checks.iter().all(|c| c.check != "device"));
    assert!(checks.iter().any(|c| c.check == "memlock" && c.verdict == Verdict::Ok));
}

#[test]
fn test_a_transmit_timeout_on_the_data_netdev_fails_recent_and_warns_old() {
    // The QEMU image's kernel log after its virtio-net stopped taking frames
    // (60 s before the probe ran), and an earlier timeout on the management
    // NIC, which is not the data path's business.
    let log = "tx_timeouts 2\n\
        tx_timeout [   40.000001] virtio_net virtio0 eth0: NETDEV WATCHDOG: CPU: 0: transmit queue 0 timed out 5100 ms\n\
        tx_timeout [  352.104113] virtio_net virtio1 eth1: NETDEV WATCHDOG: CPU: 0: transmit queue 0 timed out 5332 ms\n";
    let text = probe_text(1500, "unlimited").replace("tx_timeouts 0\n", log);
    let recent = text.replace("uptime 412.37", "uptime 412.10");
    let checks = node_checks(Fabric::Rxe, &node("client", 2, Ok(info(2, 1, 2)), &recent));
    let tx = checks.iter().find(|c| c.check == "tx_queue").unwrap();
    assert_eq!(tx.verdict, Verdict::Fail);
    assert_eq!(
        tx.evidence,
        "the kernel timed out eth1's transmit queue 0 (NETDEV WATCHDOG) 60 s ago; it logged 2 transmit timeouts (all NICs) since boot"
    );
    assert!(tx.fix.as_deref().unwrap().contains("labctl down"), "{:?}", tx.fix);
    // An hour later the same line only warns.
    let old = text.replace("uptime 412.37", "uptime 3952.10");
    let checks = node_checks(Fabric::Rxe, &node("client", 2, Ok(info(2, 1, 2)), &old));
    assert_eq!(
        checks.iter().find(|c| c.check == "tx_queue").unwrap().verdict,
        Verdict::Warn
    );
    // Only the management NIC's timeout: the data netdev is fine.
    let mgmt_only = text.replace("virtio1 eth1", "virtio0 eth0");
    let checks = node_checks(Fabric::Rxe, &node("client", 2, Ok(info(2, 1, 2)), &mgmt_only));
    assert_eq!(
        checks.iter().find(|c| c.check == "tx_queue").unwrap().verdict,
        Verdict::Ok
    );
    // A log that could not be read says so instead of passing.
    let unread = probe_text(1500, "unlimited").replace("uptime 412.37\ntx_timeouts 0\n", "dmesg unreadable\n");
    let checks = node_checks(Fabric::Rxe, &node("client", 2, Ok(info(2, 1, 2)), &unread));
    assert_eq!(
        checks.iter().find(|c| c.check == "tx_queue").unwrap().verdict,
        Verdict::Warn
    );
}

#[test]
fn test_the_hosts_data_nic_restarts_warn_recent_fail_failed_and_are_history_when_old() {
    let restart = |ago_s: f64, failed: bool, detail: &str| NicRestartSeen {
        at: "2026-12-01T04:10:00Z".into(),
        ago_s: Some(ago_s),
        failed,
        detail: detail.into(),
    };
    let stalled = "data NIC stalled: the guest posted 3 frame(s) QEMU did not take for 500 ms; \
                   pausing and resuming the VM to restart its transmit queue";
    let with = |restarts: Option<Result<Vec<NicRestartSeen>, String>>| {
        let mut n = node("client", 2, Ok(info(2, 1, 2)), &probe_text(1500, "unlimited"));
        n.nic_restarts = restarts;
        node_checks(Fabric::Rxe, &n)
            .into_iter()
            .find(|c| c.check == "nic_restarts")
    };
    // A provider that restarts no NIC (every one but QEMU's) has no such check.
    assert_eq!(with(None), None);
    let none = with(Some(Ok(Vec::new()))).unwrap();
    assert_eq!(
        (none.verdict, none.evidence.as_str()),
        (
            Verdict::Ok,
            "no restart of the data NIC from the host since the node started"
        )
    );
    let recent = with(Some(Ok(vec![
        restart(3600.0, false, stalled),
        restart(42.4, false, stalled),
    ])))
    .unwrap();
    assert_eq!(recent.verdict, Verdict::Warn);
    assert_eq!(
        recent.evidence,
        format!("the host restarted the data NIC 2 times since the node started; the last at 2026-12-01T04:10:00Z (42 s ago): {stalled}")
    );
    assert!(
        recent.fix.as_deref().unwrap().contains("supervisor.log"),
        "{:?}",
        recent.fix
    );
    let old = with(Some(Ok(vec![restart(3600.0, false, stalled)]))).unwrap();
    assert_eq!(old.verdict, Verdict::Ok);
    assert!(
        old.evidence.starts_with("the host restarted the data NIC once since"),
        "{}",
        old.evidence
    );
    let failed = with(Some(Ok(vec![
        restart(3600.0, false, stalled),
        restart(3599.0, true, "restarting its transmit queue failed: broken pipe"),
    ])))
    .unwrap();
    assert_eq!(failed.verdict, Verdict::Fail);
    assert!(
        failed.fix.as_deref().unwrap().contains("labctl down"),
        "{:?}",
        failed.fix
    );
    let unread = with(Some(Err("supervisor.log: No such file or directory".into()))).unwrap();
    assert_eq!(unread.verdict, Verdict::Warn);
}

#[test]
fn test_a_pair_with_different_mtus_fails_and_names_the_end_to_change() {
    let a = node("server", 1, Ok(info(1, 1, 2)), &probe_text(1500, "unlimited"));
    let mut small = info(2, 1, 2);
    small.devices[0].ports[0].active_mtu = 512;
    let b = node("client", 2, Ok(small), &probe_text(1200, "unlimited"));
    let up = Reach::Replied("time=0.8 ms".into());
    let checks = pair_checks(&a, &b, &up, &up);
    assert_eq!(verdicts(&checks), [("reach", Verdict::Ok), ("mtu", Verdict::Fail)]);
    let mtu = &checks[1];
    assert_eq!(
        mtu.evidence,
        "server: eth1 MTU 1500, active MTU 1024; client: eth1 MTU 1200, active MTU 512"
    );
    let fix = mtu.fix.as_deref().unwrap();
    assert!(
        fix.contains("`ip link set dev eth1 mtu 1500` on client, or `ip link set dev eth1 mtu 1200` on server"),
        "{fix}"
    );
    // Alike at both ends, it passes.
    let b = node("client", 2, Ok(info(2, 1, 2)), &probe_text(1500, "unlimited"));
    assert_eq!(
        verdicts(&pair_checks(&a, &b, &up, &up)),
        [("reach", Verdict::Ok), ("mtu", Verdict::Ok)]
    );
}

#[test]
fn test_reach_reads_pings_output_and_a_lost_reply_fails_the_pair() {
    // iputils ping's output when the peer answers, and when nothing does.
    let replied = "PING 10.77.0.2 (10.77.0.2) 56(84) bytes of data.\n\
        64 bytes from 10.77.0.2: icmp_seq=1 ttl=64 time=1.12 ms\n\n\
        --- 10.77.0.2 ping statistics ---\n\
        1 packets transmitted, 1 received, 0% packet loss, time 0ms\n\
        rtt min/avg/max/mdev = 1.120/1.120/1.120/0.000 ms\n";
    assert_eq!(reach_of(0, replied), Reach::Replied("time=1.12 ms".into()));
    let lost = "PING 10.77.0.2 (10.77.0.2) 56(84) bytes of data.\n\n\
        --- 10.77.0.2 ping statistics ---\n\
        1 packets transmitted, 0 received, 100% packet loss, time 0ms\n\n";
    let r = reach_of(1, lost);
    assert_eq!(
        r,
        Reach::Failed("ping exited 1: 1 packets transmitted, 0 received, 100% packet loss, time 0ms".into())
    );
    let a = node("server", 1, Ok(info(1, 1, 2)), &probe_text(1500, "unlimited"));
    let b = node("client", 2, Ok(info(2, 1, 2)), &probe_text(1500, "unlimited"));
    let checks = pair_checks(&a, &b, &Reach::Replied("time=1 ms".into()), &r);
    assert_eq!(checks[0].verdict, Verdict::Fail);
    assert!(
        checks[0]
            .evidence
            .contains("client -> server (10.77.0.1): ping exited 1"),
        "{}",
        checks[0].evidence
    );
}

#[test]
fn test_an_infiniband_host_on_an_existing_fabric_is_judged_by_its_ipoib_netdev() {
    // A real ConnectX host's ports (agent_proto::fixtures): the data address
    // on ib0, whose MTU (2044, IPoIB in datagram mode) is below the port's
    // 4096 active MTU, as it always is on InfiniBand: not a fault.
    let mut reply = info(1, 1, 8);
    reply.devices = agent_proto::fixtures::ib_and_roce_host();
    let probe = "module ib_core\nmodule ib_uverbs\nmodule rdma_ucm\nmodule mlx5_ib\n\
        mtu ib0 2044\nmtu enp97s0f0 1500\nrp_filter all 0\nmemlock unlimited unlimited\nfi_provider verbs\n";
    let n = NodeFound {
        name: "server".into(),
        data_addr: Ipv4Addr::new(10, 20, 0, 11),
        device: None,
        info: Ok(reply),
        probe: Ok(parse(probe)),
        clock: Err("not read".into()),
        nic_restarts: None,
    };
    let checks = node_checks(Fabric::Existing, &n);
    let by = |name: &str| checks.iter().find(|c| c.check == name).unwrap().clone();
    assert_eq!(by("modules").verdict, Verdict::Ok);
    assert_eq!(by("device").verdict, Verdict::Ok);
    assert!(by("device")
        .evidence
        .contains("mlx5_0 port 1 on ib0 carries 10.20.0.11; InfiniBand LID 3"));
    assert_eq!(by("port").verdict, Verdict::Ok);
    assert_eq!(by("mtu").verdict, Verdict::Ok);
    assert_eq!(by("mtu").evidence, "ib0 MTU 2044, mlx5_0 port 1 active MTU 4096");
}

#[test]
fn test_udp_4791_fails_on_the_direction_not_delivered_and_names_the_receivers_rule() {
    use crate::roce_port_probe::{Delivery, DATAGRAMS};
    let scope = Scope::Pair {
        a: "server".into(),
        b: "client".into(),
    };
    let way = |from: &str, to: &str, received: u64, rules: &[&str]| Delivery {
        from: from.into(),
        to: to.into(),
        to_addr: Ipv4Addr::new(10, 77, 0, if to == "server" { 1 } else { 2 }),
        received,
        send_error: None,
        rules: rules.iter().map(|r| r.to_string()).collect(),
    };
    let both = udp_check(
        &scope,
        Ok(way("server", "client", DATAGRAMS, &[])),
        Ok(way("client", "server", DATAGRAMS + 1, &[])),
    );
    assert_eq!(both.verdict, Verdict::Ok);
    assert_eq!(both.check, "udp-4791");
    // An iptables rule on the server drops what the client sends it.
    let rule = "-A INPUT -p udp -m udp --dport 4791 -j DROP";
    let dropped = udp_check(
        &scope,
        Ok(way("server", "client", DATAGRAMS, &[])),
        Ok(way("client", "server", 0, &[rule])),
    );
    assert_eq!(dropped.verdict, Verdict::Fail);
    assert!(
        dropped.evidence.contains("client -> server (10.77.0.1:4791)"),
        "{}",
        dropped.evidence
    );
    assert!(dropped.evidence.contains(rule), "{}", dropped.evidence);
    let fix = dropped.fix.as_deref().unwrap_or_default();
    assert!(
        fix.contains("on `server`") && fix.contains("iptables -S INPUT"),
        "{fix}"
    );
    // A probe that could not run is a warning, not a verdict on the port.
    let unprobed = udp_check(
        &scope,
        Ok(way("server", "client", DATAGRAMS, &[])),
        Err("bash: not found".into()),
    );
    assert_eq!(unprobed.verdict, Verdict::Warn);
}

#[test]
fn test_the_clock_check_warns_when_wall_clocks_differ_beyond_the_error() {
    let with_clock = |name: &str, last: u8, offset_ms: i64, error_ms: u64| {
        let mut n = node(name, last, Ok(info(last, 1, 2)), &probe_text(1500, "unlimited"));
        n.clock = Ok(ClockEstimate {
            offset_ns: offset_ms * 1_000_000,
            error_ns: error_ms * 1_000_000,
            rtt_ns: 2 * error_ms * 1_000_000,
            samples: 8,
            agent_ns: 0,
        });
        n
    };
    let server = with_clock("server", 1, 1, 2);
    // 399 ms apart, ± 5 ms: beyond 10 ms and the error.
    let check = clock_check(&server, &with_clock("client", 2, 400, 3)).unwrap();
    assert_eq!(check.verdict, Verdict::Warn);
    assert_eq!(
        check.evidence,
        "client's wall clock is 399.0 ms ahead of server's (± 5.0 ms, each read against labctl's over 8 Clock calls)"
    );
    assert!(check.fix.unwrap().contains("chrony"));
    // 54 ms behind, but the estimates' error (± 5 ms) leaves it within 50 ms.
    let check = clock_check(&server, &with_clock("client", 2, -53, 3)).unwrap();
    assert_eq!(check.verdict, Verdict::Ok, "{}", check.evidence);
    assert!(check.evidence.contains("54.0 ms behind"), "{}", check.evidence);
    // 56 ms behind is beyond it.
    let check = clock_check(&server, &with_clock("client", 2, -55, 3)).unwrap();
    assert_eq!(check.verdict, Verdict::Warn, "{}", check.evidence);
    // A node without a reading: no check (its agent check says why).
    let unread = node("client", 2, Ok(info(2, 1, 2)), &probe_text(1500, "unlimited"));
    assert!(clock_check(&server, &unread).is_none());
}

#[test]
fn test_a_lab_that_says_rxe_on_a_nics_port_fails_the_device_check() {
    // The recorded ConnectX host, its RoCE address on mlx5_4, in a lab that
    // says `fabric: rxe`: its runs would measure the NIC.
    let mut reply = info(1, 1, 8);
    reply.devices = agent_proto::fixtures::ib_and_roce_host();
    let n = NodeFound {
        name: "server".into(),
        data_addr: Ipv4Addr::new(192, 168, 6, 6),
        device: None,
        info: Ok(reply),
        probe: Ok(parse(&probe_text(1500, "unlimited"))),
        clock: Err("not read".into()),
        nic_restarts: None,
    };
    let checks = node_checks(Fabric::Rxe, &n);
    let device = checks.iter().find(|c| c.check == "device").unwrap();
    assert_eq!(device.verdict, Verdict::Fail);
    assert_eq!(
        device.evidence,
        "the data address is on mlx5_4 port 1, a hardware device, but the lab's fabric is rxe (SoftRoCE)"
    );
    assert!(device.fix.as_deref().unwrap().contains("fabric: existing"));
}

#[test]
fn test_efa_devices_are_counted_against_what_the_instance_was_launched_with_and_its_type_takes() {
    let efa_node = |drivers: &str| {
        let mut n = node("n1", 1, Err("not read".into()), drivers);
        n.device = None;
        n
    };
    let p4d = |attached, maximum| EfaInterfaces {
        instance_type: "p4d.24xlarge".into(),
        attached,
        maximum,
    };
    let one = efa_node("rdma_driver rdmap16s27 efa\n");
    let four = efa_node(
        "rdma_driver rdmap16s27 efa\nrdma_driver rdmap32s27 efa\nrdma_driver rdmap144s27 efa\nrdma_driver rdmap160s27 efa\n",
    );
    let none = efa_node("rdma_driver rxe0\n");

    // Not an EFA lab: no check.
    assert!(efa_check(Fabric::Rxe, &one, Some(&p4d(1, Some(4)))).is_none());

    // One interface launched on a type that takes four: a warning that says the share.
    let c = efa_check(Fabric::Efa, &one, Some(&p4d(1, Some(4)))).unwrap();
    assert_eq!((c.check.as_str(), c.verdict), (EFA_CHECK, Verdict::Warn));
    assert_eq!(
        c.evidence,
        "1 EFA device(s) (rdmap16s27) of the 4 a p4d.24xlarge takes: collectives get about 1/4 of its EFA bandwidth"
    );
    assert!(
        c.fix
            .as_deref()
            .unwrap_or_default()
            .contains("one EFA interface per network card"),
        "{c:?}"
    );

    // As many as the type takes.
    let c = efa_check(Fabric::Efa, &four, Some(&p4d(4, Some(4)))).unwrap();
    assert_eq!(c.verdict, Verdict::Ok, "{c:?}");
    assert!(
        c.evidence
            .starts_with("4 EFA device(s) (rdmap144s27 rdmap160s27 rdmap16s27 rdmap32s27), every one"),
        "{}",
        c.evidence
    );

    // An interface without a device (driver not loaded): a failure.
    let c = efa_check(Fabric::Efa, &none, Some(&p4d(1, Some(4)))).unwrap();
    assert_eq!(c.verdict, Verdict::Fail);
    assert_eq!(
        c.evidence,
        "no EFA device; the p4d.24xlarge was launched with 1 EFA interface(s)"
    );

    // EC2 did not say the maximum: judged on what was launched.
    let c = efa_check(Fabric::Efa, &one, Some(&p4d(1, None))).unwrap();
    assert_eq!(
        (c.verdict, c.evidence.as_str()),
        (
            Verdict::Ok,
            "1 EFA device(s) (rdmap16s27), as launched (1 per instance)"
        )
    );

    // Hosts the lab did not launch (provider ssh): no device fails, devices pass
    // and point at `expect: devices` for the count.
    assert_eq!(efa_check(Fabric::Efa, &none, None).unwrap().verdict, Verdict::Fail);
    let c = efa_check(Fabric::Efa, &four, None).unwrap();
    assert_eq!(c.verdict, Verdict::Ok);
    assert!(c.evidence.contains("`expect: {devices: N}`"), "{}", c.evidence);

    // A probe that did not run says nothing here (the probe check fails instead).
    let mut unprobed = one.clone();
    unprobed.probe = Err("no SSH".into());
    assert!(efa_check(Fabric::Efa, &unprobed, Some(&p4d(1, Some(4)))).is_none());
}
