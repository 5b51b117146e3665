//! The checks: pure functions from what was gathered on the nodes to
//! verdicts, so each is tested on recorded output without a lab.

use std::net::Ipv4Addr;

use agent_proto::data_path::{self, DataPath, LinkLayer};
use agent_proto::v1::{NodeInfoReply, RdmaPort};
use lab_model::labs::Fabric;
use lab_providers::aws::EfaInterfaces;
use lab_results::doctor::{Check, Scope, Verdict};
use lab_results::expect::{ExpectOutcome, ExpectVerdict};
use lab_results::trace::ClockEstimate;
use workload_catalogue::limits::DEFAULT_MAX_SIZE;

use super::probe::NodeProbe;
use crate::agent_memlock;
use crate::data_path_missing;
use crate::roce_port_probe::Delivery;

/// What was read on one node.
#[derive(Debug, Clone)]
pub struct NodeFound {
    /// The node's name.
    pub name: String,
    /// Its data address.
    pub data_addr: Ipv4Addr,
    /// The RDMA device the lab recorded for it, when it did.
    pub device: Option<String>,
    /// Its agent's NodeInfo, or why it could not be had.
    pub info: Result<NodeInfoReply, String>,
    /// The probe script's facts, or why it did not run.
    pub probe: Result<NodeProbe, String>,
    /// Its wall clock against the controller's (NTP's estimate from the
    /// agent's Clock calls), or why there is none.
    pub clock: Result<ClockEstimate, String>,
    /// The provider's restarts of its data NIC from outside the node, or
    /// why they could not be read; None where the provider does none.
    pub nic_restarts: Option<Result<Vec<NicRestartSeen>, String>>,
}

/// A restart of a node's data NIC by its provider, as doctor read it.
#[derive(Debug, Clone, PartialEq)]
pub struct NicRestartSeen {
    /// When, in RFC 3339.
    pub at: String,
    /// How long before doctor read it, when the clock allows.
    pub ago_s: Option<f64>,
    /// The restart failed.
    pub failed: bool,
    /// What the provider recorded.
    pub detail: String,
}

impl NodeFound {
    /// Where its data address lives among its RDMA devices.
    pub fn data_path(&self) -> Option<DataPath> {
        let info = self.info.as_ref().ok()?;
        data_path::find(&info.devices, self.data_addr, self.device.as_deref())
    }

    /// The MTU of the netdev that holds the data address.
    pub fn netdev_mtu(&self) -> Option<(String, u32)> {
        let netdev = self.data_path()?.netdev;
        let mtu = *self.probe.as_ref().ok()?.mtu.get(&netdev)?;
        Some((netdev, mtu))
    }

    /// The port that carries the data address, as NodeInfo reports it.
    pub fn data_port(&self) -> Option<&RdmaPort> {
        let path = self.data_path()?;
        let info = self.info.as_ref().ok()?;
        let dev = info.devices.iter().find(|d| d.name == path.device)?;
        dev.ports.iter().find(|p| p.port == path.port)
    }

    /// The active MTU of that port.
    pub fn active_mtu(&self) -> Option<u32> {
        Some(self.data_port()?.active_mtu)
    }
}

/// The node facts of the lab's `expect:`, as judged on each node, as checks, one per fact and node: `expect
/// mtu` and so on, failed with the fix when the node misses it.
pub fn expectation_checks(outcomes: &[ExpectOutcome]) -> Vec<Check> {
    outcomes
        .iter()
        .cloned()
        .map(|o| {
            let scope = Scope::Node {
                node: o.node.clone().unwrap_or_default(),
            };
            let check = format!("expect {}", o.what);
            let evidence = format!("expected {}, found {}", o.expected, o.measured.unwrap_or_default());
            if o.verdict == ExpectVerdict::Met {
                return Check::ok(&scope, &check, evidence);
            }
            let fix = match o.what.as_str() {
                "devices" => "the node has fewer RDMA devices than the lab expects: `ibv_devices` lists them; load the driver (`lsmod`, the modules check above) or lower `expect: devices`",
                "link_rate" => "the data port runs below the expected rate: `ibstat` or `ethtool` on the port's netdev shows the negotiated speed and width (cable, switch port); or lower `expect: link_rate`",
                "mtu" => "the port's active MTU is the largest IB MTU below the netdev's (RoCE: `ip link set DEV mtu 4200` for 4096 on every node, and the switch's); or change `expect: mtu`",
                _ => "install the libfabric provider the lab expects (EFA: the AWS EFA installer; verbs: libfabric built with verbs) so `fi_info -l` lists it; or change `expect: fi_provider`",
            };
            Check::not_ok(&scope, &check, Verdict::Fail, evidence, fix)
        })
        .collect()
}

/// The kernel module of the RDMA driver a fabric needs, when one is known.
fn driver_module(fabric: Fabric) -> Option<&'static str> {
    match fabric {
        Fabric::Rxe => Some("rdma_rxe"),
        Fabric::Efa => Some("efa"),
        _ => None,
    }
}

/// Every check of one node, in a fixed order.
pub fn node_checks(fabric: Fabric, node: &NodeFound) -> Vec<Check> {
    let scope = Scope::Node {
        node: node.name.clone(),
    };
    let mut checks = Vec::new();
    let info = match &node.info {
        Ok(info) => {
            checks.push(Check::ok(
                &scope,
                "agent",
                format!(
                    "rdma-agent {} on {} (kernel {}, rdma-core {})",
                    info.agent_version, info.hostname, info.kernel, info.rdma_core_version
                ),
            ));
            Some(info)
        }
        Err(e) => {
            checks.push(Check::not_ok(
                &scope,
                "agent",
                Verdict::Fail,
                e.clone(),
                "`labctl status` shows the node and its agent; `labctl up` again redeploys the agent",
            ));
            None
        }
    };
    let probe = match &node.probe {
        Ok(p) => Some(p),
        Err(e) => {
            checks.push(Check::not_ok(
                &scope,
                "probe",
                Verdict::Fail,
                e.clone(),
                "doctor reads /sys and /proc as root over SSH: check `labctl exec NODE -- sudo -n true`",
            ));
            None
        }
    };
    if fabric == Fabric::None {
        return checks;
    }
    if let Some(probe) = probe {
        checks.push(modules_check(&scope, fabric, probe));
    }
    if let Some(info) = info {
        let Some(path) = node.data_path() else {
            let evidence = data_path_missing::evidence(node.data_addr, info);
            let fix = data_path_missing::fix(fabric);
            checks.push(Check::not_ok(&scope, "device", Verdict::Fail, evidence, fix));
            return checks;
        };
        if let Some((evidence, fix)) = data_path_missing::wrong_kind(fabric, info, &path) {
            checks.push(Check::not_ok(&scope, "device", Verdict::Fail, evidence, fix));
            return checks;
        }
        checks.push(Check::ok(
            &scope,
            "device",
            format!(
                "{} port {} on {} carries {}; {}",
                path.device,
                path.port,
                path.netdev,
                node.data_addr,
                match path.link_layer {
                    LinkLayer::Ethernet => format!("RoCE v2 GID index {} ({})", path.gid_index, path.gid),
                    LinkLayer::InfiniBand => format!("InfiniBand LID {}", path.lid),
                }
            ),
        ));
        if let Some(port) = node.data_port() {
            if port.state == "PORT_ACTIVE" {
                checks.push(Check::ok(
                    &scope,
                    "port",
                    match port.rate.as_str() {
                        "" => format!(
                            "{} port {}: {}, {}",
                            path.device, path.port, port.state, port.link_layer
                        ),
                        rate => format!(
                            "{} port {}: {}, {}, {rate}",
                            path.device, path.port, port.state, port.link_layer
                        ),
                    },
                ));
            } else {
                checks.push(Check::not_ok(
                    &scope,
                    "port",
                    Verdict::Fail,
                    format!("{} port {}: {}", path.device, path.port, port.state),
                    format!("bring the link up, as root: `ip link set dev {} up`", path.netdev),
                ));
            }
        }
        if let (Some((netdev, mtu)), Some(active)) = (node.netdev_mtu(), node.active_mtu()) {
            let evidence = format!(
                "{netdev} MTU {mtu}, {} port {} active MTU {active}",
                path.device, path.port
            );
            // On InfiniBand the port's MTU is the link's and ib0's the IP
            // payload IPoIB carries (2044 in datagram mode): no relation to check.
            if path.link_layer == LinkLayer::Ethernet && active > mtu {
                checks.push(Check::not_ok(
                    &scope,
                    "mtu",
                    Verdict::Warn,
                    evidence,
                    "the port's MTU exceeds its netdev's: full-size packets are dropped; set the netdev's MTU again",
                ));
            } else {
                checks.push(Check::ok(&scope, "mtu", evidence));
            }
        }
        if let Some(probe) = probe {
            checks.push(rp_filter_check(&scope, &path.netdev, probe));
            checks.push(tx_queue_check(&scope, &path.netdev, probe));
        }
    }
    if let Some(restarts) = &node.nic_restarts {
        checks.push(nic_restarts_check(&scope, restarts));
    }
    if let Some(probe) = probe {
        checks.push(memlock_check(&scope, probe));
        checks.push(libfabric_check(&scope, fabric, probe));
    }
    checks
}

fn modules_check(scope: &Scope, fabric: Fabric, probe: &NodeProbe) -> Check {
    let mut wanted = vec!["ib_uverbs", "rdma_ucm"];
    wanted.extend(driver_module(fabric));
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|m| !probe.modules.iter().any(|l| l == m))
        .collect();
    let evidence = format!("loaded: {}", probe.modules.join(" "));
    if missing.is_empty() {
        Check::ok(scope, "modules", evidence)
    } else {
        Check::not_ok(
            scope,
            "modules",
            Verdict::Fail,
            format!("{evidence}; missing: {}", missing.join(" ")),
            format!("load them, as root: `modprobe -a {}`", missing.join(" ")),
        )
    }
}

fn rp_filter_check(scope: &Scope, netdev: &str, probe: &NodeProbe) -> Check {
    // The kernel uses the larger of `all` and the device's value.
    let all = probe.rp_filter.get("all").copied().unwrap_or(0);
    let dev = probe.rp_filter.get(netdev).copied().unwrap_or(0);
    let evidence = format!("rp_filter all {all}, {netdev} {dev}");
    if all.max(dev) == 1 {
        Check::not_ok(
            scope,
            "rp_filter",
            Verdict::Warn,
            evidence,
            format!(
                "strict reverse-path filtering drops RoCE packets that arrive on another interface than the route back; \
                 as root: `sysctl -w net.ipv4.conf.all.rp_filter=2 net.ipv4.conf.{netdev}.rp_filter=2`"
            ),
        )
    } else {
        Check::ok(scope, "rp_filter", evidence)
    }
}

/// A transmit timeout this recent fails the check: it may be why a run
/// failed now. An older one warns (the NIC's driver may have reset the
/// queue since; the runs and the reach check say whether it did).
const RECENT_TX_TIMEOUT_S: f64 = 600.0;

fn tx_queue_check(scope: &Scope, netdev: &str, probe: &NodeProbe) -> Check {
    let Some(log) = &probe.tx_timeouts else {
        return Check::not_ok(
            scope,
            "tx_queue",
            Verdict::Warn,
            "the kernel log could not be read: transmit timeouts unknown",
            "doctor reads `dmesg` as root; see whether `labctl exec NODE -- sudo -n dmesg` prints the log",
        );
    };
    let Some(last) = log.newest.iter().rev().find(|t| t.netdev == netdev) else {
        return Check::ok(
            scope,
            "tx_queue",
            format!("{netdev}: no transmit timeout in the kernel log"),
        );
    };
    let queue = last.queue.map(|q| format!(" {q}")).unwrap_or_default();
    let ago = match (log.uptime_s, last.at_s) {
        (Some(now), Some(at)) if now >= at => Some(now - at),
        _ => None,
    };
    let when = ago.map(|ago| format!(" {ago:.0} s ago")).unwrap_or_default();
    let total = if log.count > 1 {
        format!("; it logged {} transmit timeouts (all NICs) since boot", log.count)
    } else {
        String::new()
    };
    let evidence = format!("the kernel timed out {netdev}'s transmit queue{queue} (NETDEV WATCHDOG){when}{total}");
    let verdict = match ago {
        Some(ago) if ago > RECENT_TX_TIMEOUT_S => Verdict::Warn,
        _ => Verdict::Fail,
    };
    Check::not_ok(
        scope,
        "tx_queue",
        verdict,
        evidence,
        format!(
            "the NIC stopped sending for its driver's timeout or longer, and RDMA over it stops with it; \
             on a QEMU lab its supervisor restarts a queue QEMU stopped taking frames from \
             (`supervisor.log` in the lab's state directory says when), and `labctl down` and `labctl up` replace the VMs; \
             on a host, the driver's messages in `dmesg` say more, and as root \
             `ip link set dev {netdev} down && ip link set dev {netdev} up` resets the queue"
        ),
    )
}

const NIC_RESTARTS: &str = "nic_restarts";

/// The provider's restarts of the node's data NIC (the QEMU provider's
/// supervisor pauses and resumes a VM whose transmit queue QEMU stopped
/// taking frames from). One in the last [`RECENT_TX_TIMEOUT_S`] warns: a
/// run in the seconds before it may have failed for it; an older one is
/// history (the reach check says whether the link works now). A failed
/// restart fails: the NIC may still be stopped.
fn nic_restarts_check(scope: &Scope, restarts: &Result<Vec<NicRestartSeen>, String>) -> Check {
    let restarts = match restarts {
        Ok(r) => r,
        Err(e) => {
            return Check::not_ok(
                scope,
                NIC_RESTARTS,
                Verdict::Warn,
                format!("the provider's record of data NIC restarts could not be read: {e}"),
                "on a QEMU lab `supervisor.log` in the lab's state directory is that record; \
                 `labctl status` says whether the lab's supervisor still runs",
            )
        }
    };
    let Some(last) = restarts.last() else {
        return Check::ok(
            scope,
            NIC_RESTARTS,
            "no restart of the data NIC from the host since the node started",
        );
    };
    let ago = last.ago_s.map(|s| format!(" ({s:.0} s ago)")).unwrap_or_default();
    let times = match restarts.len() {
        1 => "once".to_string(),
        n => format!("{n} times"),
    };
    let evidence = format!(
        "the host restarted the data NIC {times} since the node started; the last at {}{ago}: {}",
        last.at, last.detail
    );
    let recent = last.ago_s.is_none_or(|s| s <= RECENT_TX_TIMEOUT_S);
    let stalled = "QEMU stopped taking the node's frames and its supervisor paused and resumed the VM to restart them \
                   (`supervisor.log` in the lab's state directory lists each time)";
    if last.failed {
        Check::not_ok(
            scope,
            NIC_RESTARTS,
            Verdict::Fail,
            evidence,
            format!("{stalled}, and the last restart failed: `labctl down` and `labctl up` replace the VMs"),
        )
    } else if recent {
        Check::not_ok(
            scope,
            NIC_RESTARTS,
            Verdict::Warn,
            evidence,
            format!(
                "{stalled}; a run in the seconds before it may have failed for it: run it again, \
                 and if it keeps happening, `labctl down` and `labctl up` replace the VMs"
            ),
        )
    } else {
        Check::ok(scope, NIC_RESTARTS, evidence)
    }
}

fn memlock_check(scope: &Scope, probe: &NodeProbe) -> Check {
    let agent = probe.agent;
    match (agent.limit, agent.bound()) {
        (None, _) => Check::not_ok(
            scope,
            "memlock",
            Verdict::Warn,
            "no rdma-agent process on the node",
            "`labctl up` again starts the agent",
        ),
        (Some(limit), None) if agent.ipc_lock => Check::ok(
            scope,
            "memlock",
            format!("rdma-agent holds CAP_IPC_LOCK (root): its locked-memory limit ({limit}) does not apply"),
        ),
        (Some(limit), None) => Check::ok(scope, "memlock", format!("rdma-agent's locked-memory limit: {limit}")),
        (Some(_), Some(b)) if b >= DEFAULT_MAX_SIZE => Check::ok(
            scope,
            "memlock",
            format!("rdma-agent's locked-memory limit: {} KiB", b / 1024),
        ),
        (Some(_), Some(b)) => Check::not_ok(
            scope,
            "memlock",
            Verdict::Fail,
            format!(
                "rdma-agent's locked-memory limit is {} KiB and it lacks CAP_IPC_LOCK: below the {} MiB one message may register",
                b / 1024,
                DEFAULT_MAX_SIZE >> 20
            ),
            agent_memlock::FIX,
        ),
    }
}

fn libfabric_check(scope: &Scope, fabric: Fabric, probe: &NodeProbe) -> Check {
    let wanted = fabric.libfabric_provider();
    match &probe.fi_providers {
        None => Check::not_ok(
            scope,
            "libfabric",
            Verdict::Warn,
            "fi_info is not installed",
            "fabric-* workloads need libfabric: install libfabric1 and libfabric-bin (Debian) or libfabric (EFA installer)",
        ),
        Some(providers) if super::probe::lists_provider(providers, wanted) => Check::ok(
            scope,
            "libfabric",
            format!("provider {wanted} present (fi_info -l: {})", providers.join(" ")),
        ),
        Some(providers) => Check::not_ok(
            scope,
            "libfabric",
            Verdict::Warn,
            format!("provider {wanted} absent (fi_info -l: {})", providers.join(" ")),
            format!("fabric-* workloads default to {wanted} on this fabric; install a libfabric built with it, or pass --provider"),
        ),
    }
}

/// The name of the EFA check.
pub const EFA_CHECK: &str = "efa devices";

/// On a fabric-efa lab: the node's EFA devices (RDMA devices bound to the
/// `efa` driver) against the interfaces its instance was launched with and
/// the most its type takes, when the lab's provider recorded them (EC2).
/// Fewer devices than interfaces fails; fewer interfaces than the type
/// takes warns, since collectives then get that share of the fabric.
pub fn efa_check(fabric: Fabric, node: &NodeFound, launched: Option<&EfaInterfaces>) -> Option<Check> {
    if fabric != Fabric::Efa {
        return None;
    }
    let probe = node.probe.as_ref().ok()?;
    let scope = Scope::Node {
        node: node.name.clone(),
    };
    let devices = probe.devices_of_driver("efa");
    let found = u32::try_from(devices.len()).unwrap_or(u32::MAX);
    let listed = match devices.as_slice() {
        [] => "no EFA device".to_string(),
        names => format!("{found} EFA device(s) ({})", names.join(" ")),
    };
    let Some(launched) = launched else {
        return Some(if found == 0 {
            Check::not_ok(
                &scope,
                EFA_CHECK,
                Verdict::Fail,
                format!("{listed}: no RDMA device is bound to the efa driver"),
                "install the AWS EFA software (its installer loads the efa driver), and check the instance was launched with an EFA interface",
            )
        } else {
            Check::ok(
                &scope,
                EFA_CHECK,
                format!("{listed}; how many the instance type takes is unknown to this lab: `expect: {{devices: N}}` states it"),
            )
        });
    };
    let instance_type = &launched.instance_type;
    Some(if found < launched.attached {
        Check::not_ok(
            &scope,
            EFA_CHECK,
            Verdict::Fail,
            format!(
                "{listed}; the {instance_type} was launched with {} EFA interface(s)",
                launched.attached
            ),
            "an EFA interface has no device: check the efa driver is loaded (`lsmod | grep efa`) and the AWS EFA software installed, then `labctl up` again",
        )
    } else if let Some(maximum) = launched.maximum.filter(|&m| found < m) {
        Check::not_ok(
            &scope,
            EFA_CHECK,
            Verdict::Warn,
            format!("{listed} of the {maximum} a {instance_type} takes: collectives get about {found}/{maximum} of its EFA bandwidth"),
            format!(
                "labctl launches {} EFA interface(s) per instance; for all {maximum}, launch the instances with one EFA interface per network card and use them as a `provider: ssh` lab",
                launched.attached
            ),
        )
    } else {
        Check::ok(
            &scope,
            EFA_CHECK,
            match launched.maximum {
                Some(maximum) => format!("{listed}, every one a {instance_type} takes ({maximum})"),
                None => format!("{listed}, as launched ({} per instance)", launched.attached),
            },
        )
    })
}

/// Whether a ping from one node reached another, as the orchestration saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// The reply's round trip, as ping printed it (`time=0.512 ms`).
    Replied(String),
    /// No reply, or ping could not run: its last line.
    Failed(String),
}

/// Every check of one pair: `reach` (both ways), `mtu` (both ends alike).
/// The pair's RDMA run is checked by the orchestration, which runs it.
pub fn pair_checks(a: &NodeFound, b: &NodeFound, a_to_b: &Reach, b_to_a: &Reach) -> Vec<Check> {
    let scope = Scope::Pair {
        a: a.name.clone(),
        b: b.name.clone(),
    };
    let mut checks = Vec::new();
    let way = |from: &NodeFound, to: &NodeFound, r: &Reach| match r {
        Reach::Replied(t) => Ok(format!("{} -> {} ({}): {t}", from.name, to.name, to.data_addr)),
        Reach::Failed(e) => Err(format!("{} -> {} ({}): {e}", from.name, to.name, to.data_addr)),
    };
    match (way(a, b, a_to_b), way(b, a, b_to_a)) {
        (Ok(x), Ok(y)) => checks.push(Check::ok(&scope, "reach", format!("{x}; {y}"))),
        (x, y) => checks.push(Check::not_ok(
            &scope,
            "reach",
            Verdict::Fail,
            [x, y].map(|r| r.unwrap_or_else(|e| e)).join("; "),
            "the data addresses do not reach each other: check both data NICs are up, in one subnet, \
             and that no firewall drops ICMP or UDP 4791 (`iptables -S` on each node)",
        )),
    }
    if let (Some((na, ma)), Some((nb, mb))) = (a.netdev_mtu(), b.netdev_mtu()) {
        let (aa, ab) = (a.active_mtu().unwrap_or(0), b.active_mtu().unwrap_or(0));
        let evidence = format!(
            "{}: {na} MTU {ma}, active MTU {aa}; {}: {nb} MTU {mb}, active MTU {ab}",
            a.name, b.name
        );
        if ma == mb && aa == ab {
            checks.push(Check::ok(&scope, "mtu", evidence));
        } else {
            checks.push(Check::not_ok(
                &scope,
                "mtu",
                Verdict::Fail,
                evidence,
                format!(
                    "the two ends differ: rdma_cm and perftest settle on the smaller active MTU, but a program \
                     that sets its QP's path MTU from its own port alone sends frames larger than the other \
                     end's MTU, which a NIC may drop; set one MTU on both, as root: \
                     `ip link set dev {nb} mtu {ma}` on {}, or `ip link set dev {na} mtu {mb}` on {}",
                    b.name, a.name
                ),
            ));
        }
    }
    checks
}

/// Above this (beyond the estimates' own error) the nodes' wall clocks are
/// said to differ: unsynchronised clocks are hundreds of milliseconds to
/// seconds apart (a QEMU node's starts from the host's RTC, to the second),
/// while clocks set from one source agree to the error of setting them, a
/// few milliseconds per node where a call's round trip is several (an
/// emulated node under load).
pub const CLOCK_OFFSET_WARN_NS: u64 = 50_000_000;

/// The pair's `clock` check: `b`'s wall clock against `a`'s, each read
/// against the controller's; warn when they differ by more than
/// [`CLOCK_OFFSET_WARN_NS`] beyond the estimates' error. None when either
/// node gave no reading (its agent check says why).
pub fn clock_check(a: &NodeFound, b: &NodeFound) -> Option<Check> {
    let (ca, cb) = (a.clock.as_ref().ok()?, b.clock.as_ref().ok()?);
    let scope = Scope::Pair {
        a: a.name.clone(),
        b: b.name.clone(),
    };
    let offset = i128::from(cb.offset_ns) - i128::from(ca.offset_ns);
    let error = u128::from(ca.error_ns) + u128::from(cb.error_ns);
    let ms = |ns: u128| ns as f64 / 1e6;
    let way = if offset >= 0 { "ahead of" } else { "behind" };
    let evidence = format!(
        "{}'s wall clock is {:.1} ms {way} {}'s (± {:.1} ms, each read against labctl's over {} Clock calls)",
        b.name,
        ms(offset.unsigned_abs()),
        a.name,
        ms(error),
        ca.samples.min(cb.samples)
    );
    if offset.unsigned_abs() <= error + u128::from(CLOCK_OFFSET_WARN_NS) {
        return Some(Check::ok(&scope, "clock", evidence));
    }
    Some(Check::not_ok(
        &scope,
        "clock",
        Verdict::Warn,
        evidence,
        "the nodes' wall clocks differ: RDMA does not care, but timestamps of captures, logs and your \
         tools' traces do not line up across them (`labctl run --trace` aligns its own); keep every node \
         synchronised (chrony, or PTP with ptp4l and phc2sys on NICs that have a hardware clock)",
    ))
}

/// The pair's `udp-4791` check: RoCE v2's port delivered both ways
/// ([`crate::roce_port_probe`]), or the direction that is not, with the
/// receiver's firewall lines and the fix.
pub fn udp_check(scope: &Scope, a_to_b: Result<Delivery, String>, b_to_a: Result<Delivery, String>) -> Check {
    let ways = [a_to_b, b_to_a];
    let evidence = ways
        .iter()
        .map(|w| match w {
            Ok(d) => d.evidence(),
            Err(e) => format!("could not probe: {e}"),
        })
        .collect::<Vec<_>>()
        .join("; ");
    if let Some(blocked) = ways.iter().flatten().find(|d| !d.delivered()) {
        return Check::not_ok(scope, UDP_CHECK, Verdict::Fail, evidence, blocked.fix());
    }
    match ways.iter().all(Result::is_ok) {
        true => Check::ok(scope, UDP_CHECK, evidence),
        false => Check::not_ok(
            scope,
            UDP_CHECK,
            Verdict::Warn,
            evidence,
            "the probe needs bash and /proc/net/snmp on both nodes; the pair's write-read below still tests the port",
        ),
    }
}

/// The `udp-4791` check's name.
pub const UDP_CHECK: &str = "udp-4791";

/// The `reach` of one ping's output and exit status.
pub fn reach_of(status: i32, output: &str) -> Reach {
    let last = output
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no output")
        .trim();
    if status == 0 {
        match output.split_whitespace().find(|w| w.starts_with("time=")) {
            Some(t) => Reach::Replied(format!("{t} ms")),
            None => Reach::Replied(last.to_string()),
        }
    } else {
        Reach::Failed(format!("ping exited {status}: {last}"))
    }
}

#[cfg(test)]
mod tests;
