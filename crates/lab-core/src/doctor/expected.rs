//! The node facts of a lab's `expect:` (devices, the data port's rate and
//! active MTU, the libfabric provider), judged on what doctor read on each
//! node. Pure, as the checks are: tested on recorded output.

use agent_proto::v1::NodeInfoReply;
use lab_model::expect::Expectations;
use lab_results::expect::ExpectOutcome;

use super::checks::NodeFound;

/// The node facts of `expect` on every node `doctor` read: RDMA devices,
/// the data port's rate and active MTU, and the libfabric provider among
/// `fi_info`'s. A node whose agent or probe did not answer is reported by
/// doctor's own checks, not here.
pub fn node_facts(expect: &Expectations, nodes: &[NodeFound]) -> Vec<ExpectOutcome> {
    let mut out = Vec::new();
    for node in nodes {
        let Ok(info) = &node.info else { continue };
        // Where the data address lives, read once for every fact below.
        let (path, port) = (node.data_path(), node.data_port());
        if let Some(want) = expect.devices {
            out.push(devices(&node.name, info, want));
        }
        if let Some(want) = &expect.link_rate {
            let found = port.map(|p| p.rate.clone()).unwrap_or_default();
            let gbps = port_rate_gbps(&found);
            let found_words = match (&path, found.is_empty()) {
                (None, _) => "no data port".to_string(),
                (Some(_), true) => "no rate (the port does not report one)".to_string(),
                (Some(p), false) => format!("{found} ({} port {})", p.device, p.port),
            };
            let met = gbps.is_some_and(|g| g * 1e9 >= want.bits_per_s as f64);
            out.push(ExpectOutcome::of_fact(
                "link_rate",
                &node.name,
                format!("≥ {want}"),
                found_words,
                met,
            ));
        }
        if let Some(want) = expect.mtu {
            let (found, met) = match (&path, port.map(|p| p.active_mtu)) {
                (Some(p), Some(mtu)) => (format!("{mtu} ({} port {})", p.device, p.port), mtu == want),
                _ => ("no data port".to_string(), false),
            };
            out.push(ExpectOutcome::of_fact("mtu", &node.name, want.to_string(), found, met));
        }
        if let Some(want) = &expect.fi_provider {
            let (found, met) = match node.probe.as_ref().ok().and_then(|p| p.fi_providers.as_ref()) {
                Some(have) => (
                    format!("fi_info lists {}", have.join(", ")),
                    super::probe::lists_provider(have, want),
                ),
                None => ("no fi_info on the node".to_string(), false),
            };
            out.push(ExpectOutcome::of_fact(
                "fi_provider",
                &node.name,
                want.clone(),
                found,
                met,
            ));
        }
    }
    out
}

fn devices(node: &str, info: &NodeInfoReply, want: u32) -> ExpectOutcome {
    let names: Vec<&str> = info.devices.iter().map(|d| d.name.as_str()).collect();
    let found = if names.is_empty() {
        "0".to_string()
    } else {
        format!("{} ({})", names.len(), names.join(", "))
    };
    ExpectOutcome::of_fact(
        "devices",
        node,
        format!("≥ {want}"),
        found,
        names.len() >= want as usize,
    )
}

/// Gb/s of a port rate as sysfs writes it (`100 Gb/sec (4X EDR)`, `2.5
/// Gb/sec (1X SDR)`).
pub fn port_rate_gbps(rate: &str) -> Option<f64> {
    let (number, rest) = rate.trim().split_once(' ')?;
    rest.starts_with("Gb/sec").then(|| number.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::probe;
    use crate::facts::fixtures::info;

    fn found(name: &str, last: u8, probe_text: &str) -> NodeFound {
        NodeFound {
            name: name.into(),
            data_addr: format!("10.77.0.{last}").parse().unwrap(),
            device: Some("rxe0".into()),
            info: Ok(info(last, 1, 2)),
            probe: Ok(probe::parse(probe_text)),
            clock: Err("not read".into()),
            nic_restarts: None,
        }
    }

    fn expect(text: &str) -> Expectations {
        let yaml = format!("labs:\n  - name: a\n    expect: {text}\n    nodes:\n      - name: x\n");
        let f = lab_model::LabsFile::parse(std::path::Path::new("labs.yaml"), &yaml).unwrap();
        f.labs[0].expect.clone()
    }

    #[test]
    fn test_port_rates_read_as_sysfs_writes_them() {
        assert_eq!(port_rate_gbps("2.5 Gb/sec (1X SDR)"), Some(2.5));
        assert_eq!(port_rate_gbps("100 Gb/sec (4X EDR)"), Some(100.0));
        assert_eq!(port_rate_gbps(""), None);
        assert_eq!(port_rate_gbps("fast"), None);
    }

    #[test]
    fn test_node_facts_are_judged_on_what_doctor_read() {
        // The default QEMU lab's nodes: one rxe device whose port runs at
        // "2.5 Gb/sec (1X SDR)" with an active MTU of 1024, and libfabric's
        // verbs, rxm, rxd and tcp providers.
        let providers = "fi_provider verbs\nfi_provider ofi_rxm\nfi_provider ofi_rxd\nfi_provider tcp\n";
        let nodes = [found("server", 1, providers), found("client", 2, "fi_info missing\n")];
        let met = node_facts(
            &expect("{devices: 1, link_rate: 2Gb/s, mtu: 1024, fi_provider: verbs;ofi_rxd}"),
            &nodes[..1],
        );
        assert!(met.iter().all(ExpectOutcome::met), "{met:#?}");
        assert_eq!(met.len(), 4);
        let missed = node_facts(
            &expect("{devices: 2, link_rate: 100Gb/s, mtu: 4096, fi_provider: efa}"),
            &nodes,
        );
        let messages: Vec<&str> = missed.iter().map(|o| o.message.as_str()).collect();
        assert_eq!(
            messages,
            [
                "devices on server: expected ≥ 2, found 1 (rxe0)",
                "link_rate on server: expected ≥ 100Gb/s, found 2.5 Gb/sec (1X SDR) (rxe0 port 1)",
                "mtu on server: expected 4096, found 1024 (rxe0 port 1)",
                "fi_provider on server: expected efa, found fi_info lists verbs, ofi_rxm, ofi_rxd, tcp",
                "devices on client: expected ≥ 2, found 1 (rxe0)",
                "link_rate on client: expected ≥ 100Gb/s, found 2.5 Gb/sec (1X SDR) (rxe0 port 1)",
                "mtu on client: expected 4096, found 1024 (rxe0 port 1)",
                "fi_provider on client: expected efa, found no fi_info on the node",
            ]
        );
        assert!(missed.iter().all(|o| !o.met()));
    }
}
