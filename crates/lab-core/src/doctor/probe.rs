//! What `doctor` reads on a node besides its agent's NodeInfo: one shell
//! script, run as root, printing one `key value...` line per fact, and its
//! parser. The script reads only `/sys`, `/proc` and `fi_info`: it changes
//! nothing on the node.

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
"#
);

/// A node's facts as the script printed them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
            _ => {}
        }
    }
    probe.fi_providers = have_fi_info.then_some(providers);
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
