//! Is RoCE v2's UDP port 4791 delivered from one node to another? Measured,
//! not guessed from firewall rules: the sender writes a few datagrams to the
//! receiver's port 4791, and the receiver's kernel says how many reached its
//! UDP stack (`Udp: InDatagrams` in /proc/net/snmp, which counts what rxe's
//! tunnel socket takes in). A netfilter rule that drops them (iptables, nft)
//! leaves that count where it was; the receiver's rules that name 4791 are
//! then read as the evidence. rxe drops the probe's datagrams as malformed
//! RoCE packets: they touch no QP.
//!
//! It applies only where RoCE runs through the kernel's UDP stack, soft RoCE
//! (rxe): a RoCE NIC takes port 4791 in hardware, past both the counter and
//! the host's firewall, so there the pair's RDMA run is the only proof.
//! `doctor`'s `udp-4791` check and a run that failed with retry-exceeded
//! both use it.

use std::net::Ipv4Addr;

use lab_model::labs::Fabric;
use lab_remote::command::RemoteCommand;
use lab_remote::ssh::SshSession;
use lab_state::NodeState;

use crate::provision::as_root;

/// RoCE v2's UDP destination port (IANA).
pub const ROCE_V2_PORT: u16 = 4791;

/// Datagrams sent per direction: enough that a few other datagrams arriving
/// meanwhile cannot pass for them all, few enough to take no time.
pub const DATAGRAMS: u64 = 16;

/// Reads the receiver's UDP counters, after a pause that lets datagrams
/// already on the wire arrive.
const COUNTER_SCRIPT: &str = r#"sleep "$1"; cat /proc/net/snmp"#;

/// Sends `$2` datagrams to `$1`:4791 (bash's /dev/udp: no tool needed).
const SEND_SCRIPT: &str = r#"
i=0
while [ "$i" -lt "$2" ]; do
    printf 'labctl roce port probe' > "/dev/udp/$1/4791" || exit 3
    i=$((i + 1))
done
"#;

/// The receiver's firewall rules that name port 4791, as iptables-save and
/// nft print them, and the INPUT chain's policy: read-only.
const RULES_SCRIPT: &str = r#"
{ iptables-save 2>/dev/null; nft list ruleset 2>/dev/null; } | grep -E '4791|^:INPUT (DROP|REJECT)' | sort -u
"#;

/// Whether the probe means anything for this node of a lab on `fabric`:
/// its RDMA device is rxe (by the lab's fabric, or by the device's name on
/// a host that set up rxe itself). Never on a lab without RDMA.
pub fn applies(node: &NodeState, fabric: Fabric) -> bool {
    match fabric {
        Fabric::None => false,
        Fabric::Rxe => true,
        Fabric::Existing | Fabric::Efa => node.rdma_device.as_deref().is_some_and(|d| d.starts_with("rxe")),
    }
}

/// `Udp: InDatagrams` of /proc/net/snmp (a header line, then a value line).
pub fn in_datagrams(snmp: &str) -> Option<u64> {
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp: "));
    let header = udp.next()?;
    let values = udp.next()?;
    let at = header.split_whitespace().position(|w| w == "InDatagrams")?;
    values.split_whitespace().nth(at)?.parse().ok()
}

/// One direction's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The sending node.
    pub from: String,
    /// The receiving node.
    pub to: String,
    /// The receiver's data address.
    pub to_addr: Ipv4Addr,
    /// How much the receiver's `InDatagrams` grew while the probe ran.
    pub received: u64,
    /// Why the sender could not send, when it could not (an OUTPUT rule
    /// that drops makes the write fail with "Operation not permitted").
    pub send_error: Option<String>,
    /// The receiver's firewall lines that name 4791 (read when the
    /// datagrams did not arrive).
    pub rules: Vec<String>,
}

impl Delivery {
    /// Every datagram arrived.
    pub fn delivered(&self) -> bool {
        self.send_error.is_none() && self.received >= DATAGRAMS
    }

    /// What was seen, in one line.
    pub fn evidence(&self) -> String {
        let way = format!("{} -> {} ({}:{ROCE_V2_PORT})", self.from, self.to, self.to_addr);
        if let Some(e) = &self.send_error {
            return format!("{way}: {} could not send: {e}", self.from);
        }
        let mut text = format!(
            "{way}: {DATAGRAMS} UDP datagrams sent, {} counted {} (Udp InDatagrams +{})",
            self.to,
            if self.delivered() { "them" } else { "fewer" },
            self.received
        );
        if !self.delivered() {
            match self.rules.is_empty() {
                true => text.push_str(&format!("; no iptables or nft rule on {} names 4791", self.to)),
                false => text.push_str(&format!("; {}'s firewall: {}", self.to, self.rules.join(" | "))),
            }
        }
        text
    }

    /// Whether a firewall is seen losing the datagrams: the sender's kernel
    /// refused to send them, or the receiver has rules that name the port.
    /// Otherwise they were lost on the way (a cut or lossy link), or by a
    /// filter the probe cannot read.
    pub fn firewall_seen(&self) -> bool {
        self.send_error.is_some() || !self.rules.is_empty()
    }

    /// What to do when it was not delivered.
    pub fn fix(&self) -> String {
        if !self.firewall_seen() {
            return format!(
                "no firewall rule on `{}` names port {ROCE_V2_PORT}, so the datagrams were lost on the way: \
                 check the link (`labctl exec {} -- ping -c 3 {}`, and `tc qdisc show` on both nodes for a \
                 leftover impairment), then a filter between the nodes (a switch ACL, a cloud security group)",
                self.to, self.from, self.to_addr
            );
        }
        let (node, chain) = match self.send_error {
            Some(_) => (&self.from, "OUTPUT"),
            None => (&self.to, "INPUT"),
        };
        format!(
            "RoCE v2 carries every RDMA packet, and rdma_cm's connection requests, in UDP to port {ROCE_V2_PORT}: \
             let it through on `{node}` (`labctl exec {node} -- iptables -S {chain}` lists the rules; \
             remove the one that drops udp dport {ROCE_V2_PORT}, or add \
             `iptables -I {chain} -p udp --dport {ROCE_V2_PORT} -j ACCEPT`)"
        )
    }
}

/// Probes `from` -> `to` over the two nodes' SSH sessions.
pub async fn probe(from: (&NodeState, &SshSession), to: (&NodeState, &SshSession)) -> Result<Delivery, String> {
    let ((from, from_ssh), (to, to_ssh)) = (from, to);
    let counter = |pause: &str| RemoteCommand::script_with(COUNTER_SCRIPT, [pause]);
    let read = |out: lab_remote::ssh::CommandOutput| {
        in_datagrams(&out.stdout_text()).ok_or_else(|| format!("{}: no Udp InDatagrams in /proc/net/snmp", to.name))
    };
    let before = read(to_ssh.exec(&counter("0")).await.map_err(|e| e.to_string())?)?;
    let send = RemoteCommand::new("bash").args([
        "-c",
        SEND_SCRIPT,
        "bash",
        &to.data_addr.to_string(),
        &DATAGRAMS.to_string(),
    ]);
    let sent = from_ssh.exec(&send).await.map_err(|e| e.to_string())?;
    let send_error = (sent.status != 0).then(|| {
        let said = String::from_utf8_lossy(&sent.stderr);
        let last = said
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no message");
        format!("exit {}: {}", sent.status, last.trim())
    });
    let after = read(to_ssh.exec(&counter("0.25")).await.map_err(|e| e.to_string())?)?;
    let mut delivery = Delivery {
        from: from.name.clone(),
        to: to.name.clone(),
        to_addr: to.data_addr,
        received: after.saturating_sub(before),
        send_error,
        rules: Vec::new(),
    };
    if !delivery.delivered() {
        let whose = match delivery.send_error {
            Some(_) => (from, from_ssh),
            None => (to, to_ssh),
        };
        let rules = as_root(whose.0, RemoteCommand::script(RULES_SCRIPT));
        if let Ok(out) = whose.1.exec(&rules).await {
            delivery.rules = out.stdout_text().lines().map(|l| l.trim().to_string()).collect();
        }
    }
    Ok(delivery)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// /proc/net/snmp's UDP lines as a node of the QEMU lab prints them.
    const SNMP: &str = "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n\
        Udp: 1203 4 0 1190 0 0 0 0 0\n\
        UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n\
        UdpLite: 0 0 0 0 0 0 0 0 0\n";

    fn delivery(received: u64, send_error: Option<&str>, rules: &[&str]) -> Delivery {
        Delivery {
            from: "client".into(),
            to: "server".into(),
            to_addr: Ipv4Addr::new(10, 77, 0, 1),
            received,
            send_error: send_error.map(str::to_string),
            rules: rules.iter().map(|r| r.to_string()).collect(),
        }
    }

    #[test]
    fn test_the_probe_applies_to_rxe_devices_only() {
        use crate::facts::fixtures::node_state;
        let rxe = node_state("server", 1, Some("eth1"), Some("rxe0"));
        let mlx = node_state("server", 1, Some("eth1"), Some("mlx5_0"));
        assert!(applies(&rxe, Fabric::Rxe) && applies(&rxe, Fabric::Existing));
        assert!(!applies(&mlx, Fabric::Existing) && !applies(&rxe, Fabric::None));
    }

    #[test]
    fn test_in_datagrams_reads_the_udp_line_not_udplite() {
        assert_eq!(in_datagrams(SNMP), Some(1203));
        assert_eq!(in_datagrams("Ip: Forwarding\nIp: 1\n"), None);
    }

    #[test]
    fn test_a_delivery_needs_every_datagram_and_a_clean_send() {
        let ok = delivery(DATAGRAMS + 2, None, &[]);
        assert!(ok.delivered());
        assert_eq!(
            ok.evidence(),
            "client -> server (10.77.0.1:4791): 16 UDP datagrams sent, server counted them (Udp InDatagrams +18)"
        );
        let dropped = delivery(0, None, &["-A INPUT -p udp -m udp --dport 4791 -j DROP"]);
        assert!(!dropped.delivered());
        assert!(dropped
            .evidence()
            .ends_with("server's firewall: -A INPUT -p udp -m udp --dport 4791 -j DROP"));
        assert!(dropped.fix().contains("on `server`") && dropped.fix().contains("iptables -S INPUT"));
        let refused = delivery(
            0,
            Some("exit 3: bash: printf: write error: Operation not permitted"),
            &[],
        );
        assert!(!refused.delivered());
        assert!(refused.evidence().contains("client could not send: exit 3"));
        assert!(refused.fix().contains("on `client`") && refused.fix().contains("iptables -S OUTPUT"));
        let lost = delivery(3, None, &[]);
        assert!(lost.evidence().contains("no iptables or nft rule on server names 4791"));
        // No rule and no refusal: the link, not a firewall, is the suspect.
        assert!(!lost.firewall_seen() && dropped.firewall_seen() && refused.firewall_seen());
        assert!(lost.fix().contains("lost on the way") && lost.fix().contains("ping -c 3 10.77.0.1"));
    }
}
