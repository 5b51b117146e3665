//! What `doctor` reads on a node besides its agent's NodeInfo: one shell
//! script, run as root, printing one `key value...` line per fact, and its
//! parser. The script reads only `/sys`, `/proc`, the kernel log (`dmesg`)
//! and `fi_info`: it changes nothing on the node.

use std::collections::BTreeMap;

use crate::agent_memlock::{agent_memlock_script, AgentMemlock};

/// The script. Every line it prints is `key value...`; unknown keys are
/// ignored by the parser, so a newer script can add facts.
pub const SCRIPT: &str = concat!(
    r#"
for m in ib_core ib_uverbs rdma_cm rdma_ucm rdma_rxe siw efa mlx5_ib irdma bnxt_re; do
    [ -d "/sys/module/$m" ] && echo "module $m"
done
for d in /sys/class/net/*; do
    n=${d##*/}
    echo "mtu $n $(cat "$d/mtu" 2>/dev/null)"
    f=/proc/sys/net/ipv4/conf/$n/rp_filter
    [ -r "$f" ] && echo "rp_filter $n $(cat "$f")"
done
echo "rp_filter all $(cat /proc/sys/net/ipv4/conf/all/rp_filter 2>/dev/null)"
for d in /sys/class/infiniband/*; do
    [ -e "$d" ] || continue
    drv=$(readlink "$d/device/driver" 2>/dev/null)
    echo "rdma_driver ${d##*/} ${drv##*/}"
done
"#,
    agent_memlock_script!(),
    r#"
if command -v fi_info >/dev/null 2>&1; then
    fi_info -l 2>/dev/null | sed -n 's/^\([A-Za-z0-9_;]*\):$/fi_provider \1/p'
else
    echo "fi_info missing"
fi
if log=$(dmesg 2>/dev/null); then
    echo "uptime $(cut -d' ' -f1 /proc/uptime)"
    echo "tx_timeouts $(printf '%s\n' "$log" | grep -c 'NETDEV WATCHDOG')"
    printf '%s\n' "$log" | grep 'NETDEV WATCHDOG' | tail -n 16 | sed 's/^/tx_timeout /'
else
    echo "dmesg unreadable"
fi
"#
);

/// A node's facts as the script printed them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeProbe {
    /// Kernel modules loaded, of the ones the script asks about.
    pub modules: Vec<String>,
    /// Every netdev's MTU.
    pub mtu: BTreeMap<String, u32>,
    /// Every netdev's rp_filter, and `all`'s.
    pub rp_filter: BTreeMap<String, u32>,
    /// The agent's memlock limit and whether it applies.
    pub agent: AgentMemlock,
    /// libfabric's providers (`fi_info -l`); None without fi_info.
    pub fi_providers: Option<Vec<String>>,
    /// Every RDMA device and the kernel driver bound to it (`efa`,
    /// `mlx5_core`); "" for a software device (rxe, siw), which has none.
    pub rdma_drivers: BTreeMap<String, String>,
    /// The kernel's transmit timeouts (NETDEV WATCHDOG) since boot, the
    /// newest 16 of them; None when the kernel log could not be read.
    pub tx_timeouts: Option<TxTimeouts>,
}

/// What the kernel log says of transmit queues that stopped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TxTimeouts {
    /// How many NETDEV WATCHDOG lines the log holds.
    pub count: u32,
    /// The newest of them (up to 16), oldest first.
    pub newest: Vec<TxTimeout>,
    /// Seconds since the node booted, when the probe ran.
    pub uptime_s: Option<f64>,
}

/// One NETDEV WATCHDOG line: the kernel found a netdev's transmit queue
/// stopped for longer than its driver's timeout (5 s for most).
#[derive(Debug, Clone, PartialEq)]
pub struct TxTimeout {
    /// Seconds since boot, from the line's `[   352.104113]` stamp.
    pub at_s: Option<f64>,
    /// The netdev (`eth1`).
    pub netdev: String,
    /// The transmit queue that stopped.
    pub queue: Option<u32>,
}

impl TxTimeout {
    /// Reads one kernel log line, in either of the kernel's wordings:
    /// `virtio_net virtio1 eth1: NETDEV WATCHDOG: CPU: 0: transmit queue 0
    /// timed out 5332 ms` (6.9 and the stable kernels that took it) or
    /// `NETDEV WATCHDOG: eth1 (virtio_net): transmit queue 0 timed out`.
    pub fn parse(line: &str) -> Option<TxTimeout> {
        let (before, after) = line.split_once("NETDEV WATCHDOG:")?;
        let (stamp, before) = match before.trim_start().strip_prefix('[') {
            Some(rest) => {
                let (stamp, rest) = rest.split_once(']')?;
                (stamp.trim().parse().ok(), rest)
            }
            None => (None, before),
        };
        let netdev = match before.trim().strip_suffix(':') {
            Some(device) => device.split_whitespace().last()?,
            None => after.split_whitespace().next()?,
        };
        let queue = after
            .split_once("transmit queue ")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .and_then(|q| q.parse().ok());
        Some(TxTimeout {
            at_s: stamp,
            netdev: netdev.to_string(),
            queue,
        })
    }
}

impl NodeProbe {
    /// The RDMA devices whose driver is `driver`, by name.
    pub fn devices_of_driver(&self, driver: &str) -> Vec<&str> {
        self.rdma_drivers
            .iter()
            .filter(|(_, d)| d.as_str() == driver)
            .map(|(name, _)| name.as_str())
            .collect()
    }
}

/// Whether every part of `provider` (`verbs;ofi_rxd`: `fi_info -l` lists
/// a layered provider's parts apart) is among `listed`.
pub fn lists_provider(listed: &[String], provider: &str) -> bool {
    provider.split(';').all(|part| listed.iter().any(|p| p == part))
}

/// Parses the script's output.
pub fn parse(text: &str) -> NodeProbe {
    let mut probe = NodeProbe::default();
    let mut providers = Vec::new();
    let mut have_fi_info = true;
    let mut timeouts = TxTimeouts::default();
    let mut read_log = false;
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["module", m] => probe.modules.push((*m).to_string()),
            ["mtu", dev, mtu] => {
                if let Ok(mtu) = mtu.parse() {
                    probe.mtu.insert((*dev).to_string(), mtu);
                }
            }
            ["rp_filter", dev, v] => {
                if let Ok(v) = v.parse() {
                    probe.rp_filter.insert((*dev).to_string(), v);
                }
            }
            agent if probe.agent.take_line(agent) => {}
            ["fi_provider", p] => providers.push((*p).to_string()),
            ["rdma_driver", dev] => {
                probe.rdma_drivers.insert((*dev).to_string(), String::new());
            }
            ["rdma_driver", dev, driver] => {
                probe.rdma_drivers.insert((*dev).to_string(), (*driver).to_string());
            }
            ["fi_info", "missing"] => have_fi_info = false,
            ["uptime", s] => timeouts.uptime_s = s.parse().ok(),
            ["tx_timeouts", n] => {
                timeouts.count = n.parse().unwrap_or(0);
                read_log = true;
            }
            ["tx_timeout", ..] => timeouts.newest.extend(TxTimeout::parse(&line["tx_timeout".len()..])),
            _ => {}
        }
    }
    probe.fi_providers = have_fi_info.then_some(providers);
    probe.tx_timeouts = read_log.then_some(timeouts);
    probe
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent_memlock::Memlock;

    #[test]
    fn test_the_probe_reads_modules_mtus_rp_filter_memlock_and_providers() {
        // The script's output on a node of the default QEMU lab (the agent
        // runs as root: every capability, an 8 MiB limit that does not apply).
        let text = "module ib_core\nmodule ib_uverbs\nmodule rdma_cm\nmodule rdma_ucm\nmodule rdma_rxe\n\
            mtu eth0 1500\nrp_filter eth0 0\nmtu eth1 1500\nrp_filter eth1 0\nmtu lo 65536\nrp_filter lo 0\n\
            rp_filter all 0\nmemlock 8388608 8388608\nagent_capeff 000001ffffffffff\n\
            fi_provider psm2\nfi_provider verbs\nfi_provider ofi_rxm\nfi_provider ofi_rxd\nfi_provider tcp\n";
        let p = parse(text);
        assert_eq!(p.modules, ["ib_core", "ib_uverbs", "rdma_cm", "rdma_ucm", "rdma_rxe"]);
        assert_eq!(p.mtu["eth1"], 1500);
        assert_eq!(p.rp_filter["all"], 0);
        assert_eq!(p.agent.limit, Some(Memlock::Bytes(8 << 20)));
        assert!(p.agent.ipc_lock);
        assert_eq!(
            p.fi_providers.as_ref().unwrap(),
            &["psm2", "verbs", "ofi_rxm", "ofi_rxd", "tcp"]
        );
        assert!(p.rdma_drivers.is_empty());
        // No agent, no fi_info, a limit in bytes.
        let p = parse("memlock none none\nfi_info missing\n");
        assert_eq!(p.agent.limit, None);
        assert_eq!(p.fi_providers, None);
        assert_eq!(parse("memlock 65536 65536\n").agent.limit, Some(Memlock::Bytes(65536)));
    }

    #[test]
    fn test_the_probe_reads_transmit_timeouts_in_both_kernel_wordings() {
        // Lines as dmesg prints them: a 6.1 stable kernel of the QEMU image
        // (the newer wording) and an older kernel's.
        let p = parse(
            "uptime 412.37\ntx_timeouts 3\n\
             tx_timeout [  352.104113] virtio_net virtio1 eth1: NETDEV WATCHDOG: CPU: 0: transmit queue 0 timed out 5332 ms\n\
             tx_timeout [  371.000002] NETDEV WATCHDOG: ens5 (ena): transmit queue 3 timed out\n",
        );
        let t = p.tx_timeouts.unwrap();
        assert_eq!(t.count, 3, "the count is the log's, not the lines kept");
        assert_eq!(t.uptime_s, Some(412.37));
        assert_eq!(
            t.newest,
            [
                TxTimeout {
                    at_s: Some(352.104113),
                    netdev: "eth1".into(),
                    queue: Some(0)
                },
                TxTimeout {
                    at_s: Some(371.000002),
                    netdev: "ens5".into(),
                    queue: Some(3)
                },
            ]
        );
        // A log without a stamp (dmesg -t) still names the netdev.
        assert_eq!(
            TxTimeout::parse("NETDEV WATCHDOG: eth1 (virtio_net): transmit queue 0 timed out").map(|t| t.netdev),
            Some("eth1".into())
        );
        assert_eq!(parse("uptime 5.0\ntx_timeouts 0\n").tx_timeouts.unwrap().count, 0);
        assert_eq!(parse("dmesg unreadable\n").tx_timeouts, None);
    }

    #[test]
    fn test_the_probe_reads_each_rdma_devices_driver() {
        // rxe0 is software (no device/driver link); two EFA devices and a
        // ConnectX port, named as the kernel names PCI RDMA devices.
        let p = parse(
            "rdma_driver rxe0\nrdma_driver rdmap16s27 efa\nrdma_driver rdmap32s27 efa\nrdma_driver mlx5_0 mlx5_core\n",
        );
        assert_eq!(p.rdma_drivers["rxe0"], "");
        assert_eq!(p.devices_of_driver("efa"), ["rdmap16s27", "rdmap32s27"]);
        assert_eq!(p.devices_of_driver("mlx5_core"), ["mlx5_0"]);
        assert!(p.devices_of_driver("irdma").is_empty());
    }
}
