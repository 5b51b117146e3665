//! `labctl impair`: packet loss, delay, jitter, rate limits, reordering and
//! duplication on a node's data NIC with tc netem, read back from the node
//! itself; and the RDMA device's hardware counters, which show what an
//! impairment costs (Go-Back-N retransmissions on rxe).
//!
//! netem acts on the packets a NIC *sends*: impairing `client` delays or
//! drops what the client transmits (its requests, or its ACKs and READ
//! responses), not what it receives.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::lab::{Lab, LabError};
use crate::provision::as_root;
use lab_remote::command::RemoteCommand;
use lab_remote::ssh::{SshError, SshSession};
use lab_state::{LabState, NodeState};

pub use lab_results::run::Counters;

/// Errors of `impair` and of reading counters.
#[derive(Debug, thiserror::Error)]
pub enum ImpairError {
    /// The lab is not usable.
    #[error(transparent)]
    Lab(#[from] LabError),
    /// SSH failed.
    #[error(transparent)]
    Ssh(#[from] SshError),
    /// The options do not make a netem configuration.
    #[error("{0}")]
    Spec(String),
    /// labctl does not know which NIC carries the node's RDMA traffic.
    #[error("node `{node}`: no data NIC is recorded for it (only labs with `fabric: rxe` record the NIC under their RDMA device); nothing to impair")]
    NoDataNic {
        /// The node.
        node: String,
    },
    /// On a host labctl does not own, the data NIC has a root qdisc
    /// someone else configured: impairing would replace it.
    #[error("node `{node}`: {netdev} has a root qdisc labctl did not set (`{qdisc}`); `impair` would replace it, and `down` could not give it back\n  remove it on the host (`tc qdisc del dev {netdev} root`) if nothing needs it, or leave this node unimpaired")]
    ForeignQdisc {
        /// The node.
        node: String,
        /// Its data NIC.
        netdev: String,
        /// The qdisc's line of `tc qdisc show`.
        qdisc: String,
    },
    /// The node's RDMA device is a NIC that sends RDMA itself: netem on its
    /// netdev would shape the node's IP traffic only.
    #[error("node `{node}`: {device} is a hardware RDMA device ({sysfs}): it sends RDMA itself, never through the kernel's qdiscs, so netem on {netdev} would shape the node's IP traffic only (TCP bulk, SSH, IPoIB), not RDMA\n  add --ip-only to shape that IP traffic anyway; RDMA between hardware NICs is impaired in the network (a switch, an impairment appliance), or in a lab with `fabric: rxe`, whose RDMA is kernel traffic")]
    RdmaOffloaded {
        /// The node.
        node: String,
        /// Its RDMA device.
        device: String,
        /// The device's sysfs path (under its bus, not devices/virtual).
        sysfs: String,
        /// The netdev netem would go on.
        netdev: String,
    },
    /// `tc` refused the configuration or is missing.
    #[error("node `{node}`: `{command}` failed (exit status {status}): {stderr}\n  check that the node has tc (iproute2) and the sch_netem kernel module")]
    Tc {
        /// The node.
        node: String,
        /// The command line.
        command: String,
        /// Its exit status.
        status: i32,
        /// What it said.
        stderr: String,
    },
}

/// A netem configuration. Percentages are 0..=100, times microseconds, the
/// rate bits per second; `None` leaves that impairment out.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Netem {
    /// Packets dropped, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss_pct: Option<f64>,
    /// Added one-way delay, µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_us: Option<u64>,
    /// Random variation of the delay, ± µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jitter_us: Option<u64>,
    /// Bandwidth limit, bits per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_bit_s: Option<u64>,
    /// Packets sent at once, ahead of the delayed ones, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reorder_pct: Option<f64>,
    /// Packets sent twice, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duplicate_pct: Option<f64>,
}

impl Netem {
    /// Nothing set.
    pub fn is_empty(&self) -> bool {
        *self == Netem::default()
    }

    /// Checks what netem itself would refuse or silently ignore, and says why.
    pub fn validate(&self) -> Result<(), ImpairError> {
        if self.is_empty() {
            return Err(ImpairError::Spec(
                "no impairment given: use --loss, --delay, --jitter, --rate, --reorder or --duplicate, or --clear to remove one".into(),
            ));
        }
        if self.delay_us.is_none() {
            if self.jitter_us.is_some() {
                return Err(ImpairError::Spec(
                    "--jitter varies the delay, so it needs --delay too (e.g. --delay 40ms --jitter 5ms)".into(),
                ));
            }
            if self.reorder_pct.is_some() {
                return Err(ImpairError::Spec(
                    "--reorder needs --delay: netem reorders by sending some packets at once while the others wait out the delay (e.g. --delay 10ms --reorder 5%)".into(),
                ));
            }
        }
        if let (Some(jitter), Some(delay)) = (self.jitter_us, self.delay_us) {
            if jitter > delay {
                return Err(ImpairError::Spec(format!(
                    "--jitter {} is larger than --delay {}: a packet cannot leave before it was sent; use a jitter up to the delay",
                    format_time(jitter),
                    format_time(delay)
                )));
            }
        }
        if self.rate_bit_s == Some(0) {
            return Err(ImpairError::Spec(
                "--rate 0 would stop all traffic; use --loss 100% to cut the link".into(),
            ));
        }
        Ok(())
    }

    /// The netem arguments (after `netem`), in the order tc documents them.
    pub fn netem_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(delay) = self.delay_us {
            args.extend(["delay".into(), format_time(delay)]);
            if let Some(jitter) = self.jitter_us {
                args.push(format_time(jitter));
            }
        }
        if let Some(loss) = self.loss_pct {
            args.extend(["loss".into(), format_pct(loss)]);
        }
        if let Some(dup) = self.duplicate_pct {
            args.extend(["duplicate".into(), format_pct(dup)]);
        }
        if let Some(reorder) = self.reorder_pct {
            args.extend(["reorder".into(), format_pct(reorder)]);
        }
        if let Some(rate) = self.rate_bit_s {
            args.extend(["rate".into(), format_rate(rate)]);
        }
        args
    }

    /// `tc qdisc add dev NETDEV root netem ...`.
    pub fn tc_add_argv(&self, netdev: &str) -> Vec<String> {
        let mut argv: Vec<String> = ["tc", "qdisc", "add", "dev", netdev, "root", "netem"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        argv.extend(self.netem_args());
        argv
    }

    /// The shell command that makes this the NIC's only impairment: the old
    /// root qdisc goes, then this netem is added. Not `tc qdisc replace`:
    /// on an existing netem that keeps every option the new command leaves
    /// out (measured: `replace ... netem loss 2%` over `reorder 5% rate
    /// 200mbit` left all three active).
    pub fn tc_command(&self, netdev: &str) -> RemoteCommand {
        let argv = self.tc_add_argv(netdev);
        RemoteCommand::new("tc")
            .args(["qdisc", "del", "dev", netdev, "root"])
            .stderr_to_null()
            .then(RemoteCommand::new(&argv[0]).args(&argv[1..]))
    }
}

impl fmt::Display for Netem {
    /// The netem arguments as one line: `delay 40ms 5ms loss 1%`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.netem_args().join(" "))
    }
}

/// Parses a percentage: `2%`, `0.5%` or `2`, between 0 and 100.
pub fn parse_pct(text: &str) -> Result<f64, String> {
    let number = text.trim().strip_suffix('%').unwrap_or(text.trim());
    match number.parse::<f64>() {
        Ok(v) if (0.0..=100.0).contains(&v) => Ok(v),
        Ok(_) => Err(format!("`{text}` is not between 0% and 100%")),
        Err(_) => Err(format!("`{text}` is not a percentage (e.g. 1%, 0.5%)")),
    }
}

/// Parses a time with its unit: `100us`, `40ms`, `1.5s`; returns µs.
pub fn parse_time(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale = match unit {
        "us" | "µs" => 1.0,
        "ms" => 1e3,
        "s" => 1e6,
        "" => return Err(format!("`{text}` has no unit: write it with us, ms or s (e.g. 40ms)")),
        _ => {
            return Err(format!(
                "`{text}`: unknown time unit `{unit}`; use us, ms or s (e.g. 40ms)"
            ))
        }
    };
    match number.parse::<f64>() {
        Ok(v) if v.is_finite() => {
            let us = v * scale;
            if us > 0.0 && us < 1.0 {
                Err(format!("`{text}` is below netem's resolution of 1us"))
            } else {
                Ok(us.round() as u64)
            }
        }
        _ => Err(format!("`{text}` is not a time (e.g. 40ms, 100us, 1s)")),
    }
}

/// Parses a rate in bits per second: `500kbit`, `200mbit`, `1gbit`.
pub fn parse_rate(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale = match unit.to_ascii_lowercase().as_str() {
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "kbps" | "mbps" | "gbps" => {
            return Err(format!(
                "`{text}`: to tc, `{unit}` means bytes per second, which is easy to misread; write the rate in bits: kbit, mbit or gbit (e.g. 200mbit)"
            ))
        }
        "" => return Err(format!("`{text}` has no unit: write it with kbit, mbit or gbit (e.g. 200mbit)")),
        _ => return Err(format!("`{text}`: unknown rate unit `{unit}`; use kbit, mbit or gbit (e.g. 200mbit)")),
    };
    match number.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok((v * scale).round() as u64),
        _ => Err(format!("`{text}` is not a rate (e.g. 200mbit)")),
    }
}

fn format_pct(v: f64) -> String {
    format!("{v}%")
}

fn format_time(us: u64) -> String {
    match us {
        0 => "0us".into(),
        _ if us.is_multiple_of(1_000_000) => format!("{}s", us / 1_000_000),
        _ if us.is_multiple_of(1000) => format!("{}ms", us / 1000),
        _ => format!("{us}us"),
    }
}

fn format_rate(bits: u64) -> String {
    match bits {
        _ if bits >= 1_000_000_000 && bits.is_multiple_of(1_000_000_000) => format!("{}gbit", bits / 1_000_000_000),
        _ if bits >= 1_000_000 && bits.is_multiple_of(1_000_000) => format!("{}mbit", bits / 1_000_000),
        _ if bits >= 1000 && bits.is_multiple_of(1000) => format!("{}kbit", bits / 1000),
        _ => format!("{bits}bit"),
    }
}

/// Reads the root netem qdisc out of `tc qdisc show dev X`; `None` when the
/// NIC has none (its default qdisc, or another kind).
pub fn parse_tc_show(output: &str) -> Option<Netem> {
    let line = output.lines().find(|l| {
        let words: Vec<&str> = l.split_whitespace().collect();
        words.len() >= 4 && words[0] == "qdisc" && words[1] == "netem" && words.contains(&"root")
    })?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut netem = Netem::default();
    let mut i = 0;
    while i < words.len() {
        let next = words.get(i + 1).copied().unwrap_or_default();
        match words[i] {
            "delay" => {
                netem.delay_us = tc_time(next);
                // The jitter, when there is one, follows the delay.
                if let Some(jitter) = words.get(i + 2).and_then(|w| tc_time(w)) {
                    netem.jitter_us = Some(jitter);
                    i += 1;
                }
                i += 1;
            }
            "loss" => {
                // `loss random 1%` in some versions, `loss 1%` in others.
                let value = if next == "random" {
                    words.get(i + 2).copied()
                } else {
                    Some(next)
                };
                netem.loss_pct = value.and_then(tc_pct);
                i += 1;
            }
            "duplicate" => {
                netem.duplicate_pct = tc_pct(next);
                i += 1;
            }
            "reorder" => {
                netem.reorder_pct = tc_pct(next);
                i += 1;
            }
            "rate" => {
                netem.rate_bit_s = tc_rate(next);
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    // netem with nothing set (`tc qdisc add ... netem`) impairs nothing.
    (!netem.is_empty()).then_some(netem)
}

/// tc prints times as `40ms`, `40.0ms`, `100us`, `1s` or `1.5s`.
fn tc_time(word: &str) -> Option<u64> {
    let split = word.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = word.split_at(split);
    let v: f64 = number.parse().ok()?;
    let scale = match unit {
        "ns" => 1e-3,
        "us" => 1.0,
        "ms" => 1e3,
        "s" => 1e6,
        _ => return None,
    };
    Some((v * scale).round() as u64)
}

/// Percentages come back through the kernel's 32-bit probability, so `2%`
/// may read as 1.99999%: round to what a person typed (6 significant digits).
fn tc_pct(word: &str) -> Option<f64> {
    let v: f64 = word.strip_suffix('%')?.parse().ok()?;
    Some((v * 1e4).round() / 1e4)
}

/// tc prints rates as `200Mbit`, `500Kbit`, `1Gbit` or `800bit`.
fn tc_rate(word: &str) -> Option<u64> {
    let split = word.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = word.split_at(split);
    let v: f64 = number.parse().ok()?;
    let scale = match unit.to_ascii_lowercase().as_str() {
        "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "tbit" => 1e12,
        "kibit" => 1024.0,
        "mibit" => 1024.0 * 1024.0,
        "gibit" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some((v * scale).round() as u64)
}

/// The NIC under a node's RDMA device, where impairments go.
pub fn data_nic(node: &NodeState) -> Result<&str, ImpairError> {
    node.data_netdev
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ImpairError::NoDataNic {
            node: node.name.clone(),
        })
}

/// Who puts a node's RDMA packets on the wire. rxe and siw are kernel
/// drivers that send RDMA as ordinary packets of the network stack, so a
/// qdisc on the netdev shapes them and tcpdump sees them; a NIC (mlx5,
/// irdma, bnxt_re, efa, an InfiniBand HCA) sends RDMA itself, past both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RdmaSender {
    /// A software device: RDMA is kernel traffic.
    Kernel,
    /// A hardware device: RDMA bypasses the kernel.
    Nic {
        /// The RDMA device.
        device: String,
        /// Where sysfs puts it (its bus path).
        sysfs: String,
    },
    /// No RDMA device is recorded, or sysfs did not resolve it.
    Unknown,
}

/// Tells [`RdmaSender`] from where `/sys/class/infiniband/DEVICE` resolves
/// (`readlink -f`): software devices live under /sys/devices/virtual, a
/// NIC's under its bus (the agent's node info uses the same rule).
pub fn rdma_sender(device: &str, resolved: &str) -> RdmaSender {
    let resolved = resolved.trim();
    if resolved.is_empty() || !resolved.starts_with("/sys/devices/") {
        RdmaSender::Unknown
    } else if resolved.split('/').any(|c| c == "virtual") {
        RdmaSender::Kernel
    } else {
        RdmaSender::Nic {
            device: device.to_string(),
            sysfs: resolved.to_string(),
        }
    }
}

/// Asks the node who sends its RDMA device's packets.
pub async fn rdma_sender_of(session: &SshSession, node: &NodeState) -> Result<RdmaSender, SshError> {
    let Some(device) = node.rdma_device.as_deref().filter(|d| !d.is_empty()) else {
        return Ok(RdmaSender::Unknown);
    };
    let class_path = format!("/sys/class/infiniband/{device}");
    let out = session
        .exec(&RemoteCommand::new("readlink").args(["-f", class_path.as_str()]))
        .await?;
    if out.status != 0 {
        return Ok(RdmaSender::Unknown);
    }
    Ok(rdma_sender(device, &String::from_utf8_lossy(&out.stdout)))
}

/// The netem impairment active on `node`'s data NIC, read from the node.
pub async fn active(session: &SshSession, node: &NodeState) -> Result<Option<Netem>, ImpairError> {
    let nic = data_nic(node)?;
    let command = RemoteCommand::new("tc").args(["qdisc", "show", "dev", nic]);
    let out = session.exec(&command).await?;
    if out.status != 0 {
        return Err(ImpairError::Tc {
            node: node.name.clone(),
            command: command.to_string(),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(parse_tc_show(&String::from_utf8_lossy(&out.stdout)))
}

/// What [`set`] and [`clear`] did.
#[derive(Debug, Clone, Serialize)]
pub struct ImpairOutcome {
    /// The node.
    pub node: String,
    /// Its data NIC.
    pub netdev: String,
    /// The command run on the node.
    pub command: String,
    /// What is active now, read back from the node.
    pub active: Option<Netem>,
    /// Whether netem reaches the node's RDMA traffic (set by [`set`]):
    /// true on a software device (rxe, siw), false on a NIC impaired with
    /// `ip_only`, absent when the device kind is not known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shapes_rdma: Option<bool>,
}

/// How long `impair` on a host labctl does not own waits for the lab's
/// lock (it records the qdisc in the lab's state).
const STATE_LOCK_WAIT: Duration = Duration::from_secs(60);

/// The root qdisc in `tc qdisc show dev X` output: its line, and whether
/// it is the kernel's default (handle `0:`, e.g. `qdisc fq_codel 0: root`,
/// `qdisc noqueue 0: root`) rather than one someone configured.
pub fn root_qdisc(output: &str) -> Option<(&str, bool)> {
    output.lines().find_map(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        (words.len() >= 4 && words[0] == "qdisc" && words[3] == "root").then_some((line.trim(), words[2] == "0:"))
    })
}

/// Whether a `tc qdisc show` line is a netem qdisc.
fn is_netem(line: &str) -> bool {
    line.starts_with("qdisc netem ")
}

/// The netdev whose netem this lab recorded on `node` (a host labctl does
/// not own), if any.
fn recorded_netem(lab: &Lab, state: &LabState, node: &str) -> Result<Option<String>, ImpairError> {
    Ok(lab
        .node_state(state, node)?
        .host
        .as_ref()
        .and_then(|h| h.netem_netdev.clone()))
}

/// On a host labctl does not own: may `impair` replace the root qdisc in
/// `tc_show`? The kernel's default, yes; a netem this lab recorded on the
/// netdev (`recorded`), yes; anything else is someone's and is refused.
pub fn check_host_qdisc(node: &str, netdev: &str, recorded: bool, tc_show: &str) -> Result<(), ImpairError> {
    match root_qdisc(tc_show) {
        None | Some((_, true)) => Ok(()),
        Some((line, false)) if recorded && is_netem(line) => Ok(()),
        Some((line, false)) => Err(ImpairError::ForeignQdisc {
            node: node.to_string(),
            netdev: netdev.to_string(),
            qdisc: line.to_string(),
        }),
    }
}

async fn tc_show(session: &SshSession, node: &str, netdev: &str) -> Result<String, ImpairError> {
    let command = RemoteCommand::new("tc").args(["qdisc", "show", "dev", netdev]);
    run_tc(session, node, &command).await
}

/// Records (`Some`) or forgets (`None`) the netdev of `node`'s netem in
/// the lab's state; the caller holds the lab's lock.
fn record_netem(lab: &Lab, state: &mut LabState, node: &str, netdev: Option<&str>) -> Result<(), ImpairError> {
    if let Some(changes) = state
        .nodes
        .iter_mut()
        .find(|n| n.name == node)
        .and_then(|n| n.host.as_mut())
    {
        changes.netem_netdev = netdev.map(str::to_string);
    }
    lab.dir.save(state).map_err(LabError::from)?;
    Ok(())
}

/// Replaces the impairment on `node`'s data NIC with `netem`. On a host
/// labctl does not own (provider ssh) the netdev is recorded in the lab's
/// state first, so that `down` removes the qdisc, and a root qdisc someone
/// else configured is refused. A node whose RDMA device is a NIC is refused
/// too (netem would not touch its RDMA), unless `ip_only` says the caller
/// means to shape its IP traffic.
pub async fn set(lab: &Lab, node: &str, netem: &Netem, ip_only: bool) -> Result<ImpairOutcome, ImpairError> {
    netem.validate()?;
    let state = lab.state()?;
    let node_state = lab.node_state(&state, node)?;
    let netdev = data_nic(node_state)?.to_string();
    let session = lab.connect(&state, node).await?;
    let command = netem.tc_command(&netdev);
    let result = async {
        let shapes_rdma = match rdma_sender_of(&session, node_state).await? {
            RdmaSender::Kernel => Some(true),
            RdmaSender::Unknown => None,
            RdmaSender::Nic { .. } if ip_only => Some(false),
            RdmaSender::Nic { device, sysfs } => {
                return Err(ImpairError::RdmaOffloaded {
                    node: node.to_string(),
                    device,
                    sysfs,
                    netdev: netdev.clone(),
                })
            }
        };
        if node_state.host.is_some() {
            let _lock = lab.lock(STATE_LOCK_WAIT).await?;
            let mut state = lab.state()?;
            let recorded = recorded_netem(lab, &state, node)?.as_deref() == Some(netdev.as_str());
            check_host_qdisc(node, &netdev, recorded, &tc_show(&session, node, &netdev).await?)?;
            if !recorded {
                record_netem(lab, &mut state, node, Some(&netdev))?;
            }
        }
        run_tc(&session, node, &as_root(node_state, command.clone())).await?;
        Ok((active(&session, node_state).await?, shapes_rdma))
    }
    .await;
    session.close().await;
    let (active, shapes_rdma) = result?;
    Ok(ImpairOutcome {
        node: node.to_string(),
        netdev,
        command: command.to_string(),
        active,
        shapes_rdma,
    })
}

/// Removes the impairment on `node`'s data NIC; fine when there is none.
pub async fn clear(lab: &Lab, node: &str) -> Result<ImpairOutcome, ImpairError> {
    let state = lab.state()?;
    let node_state = lab.node_state(&state, node)?;
    let netdev = data_nic(node_state)?.to_string();
    let session = lab.connect(&state, node).await?;
    if node_state.host.is_some() {
        let result = clear_on_host(lab, &session, node, node_state, &netdev).await;
        session.close().await;
        let (command, now) = result?;
        return Ok(ImpairOutcome {
            node: node.to_string(),
            netdev,
            command,
            active: now,
            shapes_rdma: None,
        });
    }
    let result = async {
        let command = if active(&session, node_state).await?.is_some() {
            let command = as_root(
                node_state,
                RemoteCommand::new("tc").args(["qdisc", "del", "dev", netdev.as_str(), "root"]),
            );
            run_tc(&session, node, &command).await?;
            command.to_string()
        } else {
            String::new()
        };
        Ok::<_, ImpairError>((command, active(&session, node_state).await?))
    }
    .await;
    session.close().await;
    let (command, now) = result?;
    Ok(ImpairOutcome {
        node: node.to_string(),
        netdev,
        command,
        active: now,
        shapes_rdma: None,
    })
}

/// `clear` on a host labctl does not own: removes the root qdisc only when
/// this lab recorded a netem on the netdev and it is still netem, then
/// forgets it. A qdisc the lab did not set stays (and shows as active).
async fn clear_on_host(
    lab: &Lab,
    session: &SshSession,
    node: &str,
    node_state: &NodeState,
    netdev: &str,
) -> Result<(String, Option<Netem>), ImpairError> {
    let _lock = lab.lock(STATE_LOCK_WAIT).await?;
    let mut state = lab.state()?;
    let recorded = recorded_netem(lab, &state, node)?;
    let mut command = String::new();
    if let Some(recorded) = recorded {
        let still_netem = root_qdisc(&tc_show(session, node, &recorded).await?)
            .is_some_and(|(line, default)| !default && is_netem(line));
        if still_netem {
            let del = as_root(
                node_state,
                RemoteCommand::new("tc").args(["qdisc", "del", "dev", recorded.as_str(), "root"]),
            );
            run_tc(session, node, &del).await?;
            command = del.to_string();
        }
        record_netem(lab, &mut state, node, None)?;
    }
    let now = parse_tc_show(&tc_show(session, node, netdev).await?);
    Ok((command, now))
}

/// Runs a `tc` command on `node`; its stdout, or the failure with its stderr.
async fn run_tc(session: &SshSession, node: &str, command: &RemoteCommand) -> Result<String, ImpairError> {
    let out = session.exec(command).await?;
    if out.status != 0 {
        return Err(ImpairError::Tc {
            node: node.to_string(),
            command: command.to_string(),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The RDMA counters that count Go-Back-N retransmission work, with what
/// each one means; shown under a run's table.
pub const RETRANSMISSION_COUNTERS: &[(&str, &str)] = &[
    (
        "out_of_seq_request",
        "responder: a packet arrived past a gap (one was lost); it NAKs and drops the rest of the window",
    ),
    (
        "rcvd_seq_err",
        "requester: sequence-error NAKs received; each makes it go back and resend from the lost packet",
    ),
    (
        "completer_retry_err",
        "requester: retransmission rounds started (after a NAK or an ACK timeout)",
    ),
    (
        "duplicate_request",
        "responder: packets it had already executed, sent again (Go-Back-N resends the whole window)",
    ),
    (
        "retry_exceeded_err",
        "requester: retries used up; the QP failed with IBV_WC_RETRY_EXC_ERR",
    ),
    ("rcvd_rnr_err", "requester: receiver-not-ready NAKs (no receive posted)"),
    ("send_rnr_err", "responder: receiver-not-ready NAKs sent"),
];

/// Reads every counter of `device` port `port` (`/sys/class/infiniband/<dev>/ports/<port>/hw_counters`).
pub async fn read_counters(
    session: &SshSession,
    node: &NodeState,
    device: &str,
    port: u32,
) -> Result<Counters, ImpairError> {
    let dir = format!("/sys/class/infiniband/{device}/ports/{port}/hw_counters");
    // `grep -H . *` prints `name:value` for every counter file in one round trip.
    let command = RemoteCommand::script_with("cd \"$1\" && grep -H . *", [&dir]);
    let out = session.exec(&command).await?;
    if out.status != 0 {
        return Err(ImpairError::Ssh(SshError::CommandFailed {
            node: node.name.clone(),
            command: command.to_string(),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }));
    }
    Ok(parse_counters(&String::from_utf8_lossy(&out.stdout)))
}

/// Parses `name:value` lines; lines that are not are skipped, and so is
/// `lifespan`, which sits among the counters but is their refresh interval.
pub fn parse_counters(text: &str) -> Counters {
    text.lines()
        .filter_map(|l| {
            let (name, value) = l.split_once(':')?;
            let name = name.trim();
            (name != "lifespan").then_some(())?;
            Some((name.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

/// `after - before` per counter (a counter that went backwards, e.g. a
/// device re-created mid-run, counts from zero).
pub fn counter_delta(before: &Counters, after: &Counters) -> Counters {
    after
        .iter()
        .map(|(name, &now)| {
            let then = before.get(name).copied().unwrap_or(0);
            let delta = if now >= then { now - then } else { now };
            (name.clone(), delta)
        })
        .collect()
}

/// The retransmission work in a counter delta (the sum of the Go-Back-N counters).
pub fn retransmission_work(delta: &Counters) -> u64 {
    [
        "out_of_seq_request",
        "rcvd_seq_err",
        "completer_retry_err",
        "duplicate_request",
    ]
    .iter()
    .filter_map(|name| delta.get(*name))
    .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_host_qdisc_default_or_our_netem_may_go_anything_else_is_refused() {
        // Real `tc qdisc show dev X` outputs: a default single-queue NIC, a
        // virtual one, a multiqueue one (children under a default mq).
        let fq_codel = "qdisc fq_codel 0: root refcnt 2 limit 10240p flows 1024 quantum 1514 target 5ms interval 100ms memory_limit 32Mb ecn drop_batch 64\n";
        let noqueue = "qdisc noqueue 0: root refcnt 2\n";
        let mq =
            "qdisc mq 0: root\nqdisc fq_codel 0: parent :2 limit 10240p\nqdisc fq_codel 0: parent :1 limit 10240p\n";
        let netem = "qdisc netem 8001: root refcnt 2 limit 1000 delay 40ms\n";
        let htb = "qdisc htb 1: root refcnt 2 r2q 10 default 0 direct_packets_stat 0 direct_qlen 1000\n";
        assert_eq!(root_qdisc(noqueue), Some(("qdisc noqueue 0: root refcnt 2", true)));
        assert_eq!(root_qdisc(netem), Some((netem.trim(), false)));
        assert_eq!(root_qdisc(""), None);
        for default in [fq_codel, noqueue, mq, ""] {
            check_host_qdisc("client", "eth1", false, default).unwrap();
        }
        // Our own recorded netem may be replaced; one we did not record is someone's.
        check_host_qdisc("client", "eth1", true, netem).unwrap();
        let foreign = check_host_qdisc("client", "eth1", false, netem)
            .unwrap_err()
            .to_string();
        assert!(
            foreign.starts_with("node `client`: eth1 has a root qdisc labctl did not set (`qdisc netem 8001: root"),
            "{foreign}"
        );
        assert!(foreign.contains("tc qdisc del dev eth1 root"), "{foreign}");
        // A recorded netdev whose qdisc someone replaced with theirs: refused too.
        let replaced = check_host_qdisc("client", "eth1", true, htb).unwrap_err().to_string();
        assert!(replaced.contains("`qdisc htb 1: root refcnt 2"), "{replaced}");
    }

    #[test]
    fn test_rdma_of_software_devices_is_kernel_traffic_and_of_nics_is_not() {
        // `readlink -f /sys/class/infiniband/DEV`: rxe0 as this repository's
        // QEMU nodes resolve it; the NIC paths have the shape of a PCI
        // device's (bus addresses illustrative).
        assert_eq!(
            rdma_sender("rxe0", "/sys/devices/virtual/infiniband/rxe0\n"),
            RdmaSender::Kernel
        );
        assert_eq!(
            rdma_sender("siw0", "/sys/devices/virtual/infiniband/siw0"),
            RdmaSender::Kernel
        );
        let mlx = "/sys/devices/pci0000:00/0000:00:03.0/0000:05:00.0/infiniband/mlx5_0";
        assert_eq!(
            rdma_sender("mlx5_0", mlx),
            RdmaSender::Nic {
                device: "mlx5_0".into(),
                sysfs: mlx.into()
            }
        );
        // readlink -f of a name that does not exist prints the path as given.
        assert_eq!(rdma_sender("gone0", "/sys/class/infiniband/gone0"), RdmaSender::Unknown);
        assert_eq!(rdma_sender("x", ""), RdmaSender::Unknown);
    }

    #[test]
    fn test_percentages_accept_with_or_without_sign_and_reject_out_of_range() {
        assert_eq!(parse_pct("2%"), Ok(2.0));
        assert_eq!(parse_pct("0.5%"), Ok(0.5));
        assert_eq!(parse_pct("100"), Ok(100.0));
        assert!(parse_pct("150%").unwrap_err().contains("between 0% and 100%"));
        assert!(parse_pct("-1%").unwrap_err().contains("between"));
        assert!(parse_pct("lots").unwrap_err().contains("not a percentage"));
    }

    #[test]
    fn test_times_need_a_unit() {
        assert_eq!(parse_time("40ms"), Ok(40_000));
        assert_eq!(parse_time("100us"), Ok(100));
        assert_eq!(parse_time("1.5s"), Ok(1_500_000));
        assert_eq!(parse_time("0.5ms"), Ok(500));
        assert!(parse_time("40").unwrap_err().contains("no unit"));
        assert!(parse_time("40min").unwrap_err().contains("unknown time unit `min`"));
        assert!(parse_time("ms").unwrap_err().contains("not a time"));
        assert!(parse_time("0.1us").unwrap_err().contains("resolution"));
    }

    #[test]
    fn test_rates_are_bits_and_bytes_are_refused_with_a_reason() {
        assert_eq!(parse_rate("200mbit"), Ok(200_000_000));
        assert_eq!(parse_rate("500kbit"), Ok(500_000));
        assert_eq!(parse_rate("1Gbit"), Ok(1_000_000_000));
        assert!(parse_rate("200mbps").unwrap_err().contains("bytes per second"));
        assert!(parse_rate("200").unwrap_err().contains("no unit"));
        assert!(parse_rate("200furlong").unwrap_err().contains("unknown rate unit"));
    }

    #[test]
    fn test_jitter_and_reorder_need_a_delay() {
        let jitter = Netem {
            jitter_us: Some(5000),
            ..Default::default()
        };
        assert!(jitter.validate().unwrap_err().to_string().contains("needs --delay"));
        let reorder = Netem {
            reorder_pct: Some(5.0),
            ..Default::default()
        };
        assert!(reorder
            .validate()
            .unwrap_err()
            .to_string()
            .contains("--reorder needs --delay"));
        let too_much = Netem {
            delay_us: Some(1000),
            jitter_us: Some(5000),
            ..Default::default()
        };
        assert!(too_much
            .validate()
            .unwrap_err()
            .to_string()
            .contains("larger than --delay 1ms"));
        assert!(Netem::default().validate().unwrap_err().to_string().contains("--clear"));
        let zero_rate = Netem {
            rate_bit_s: Some(0),
            ..Default::default()
        };
        assert!(zero_rate.validate().unwrap_err().to_string().contains("--loss 100%"));
    }

    #[test]
    fn test_everything_renders_as_one_netem_that_replaces_the_old() {
        let netem = Netem {
            loss_pct: Some(1.0),
            delay_us: Some(40_000),
            jitter_us: Some(5_000),
            rate_bit_s: Some(200_000_000),
            reorder_pct: Some(5.0),
            duplicate_pct: Some(0.5),
        };
        netem.validate().unwrap();
        assert_eq!(
            netem.tc_command("eth1").as_str(),
            "tc qdisc del dev eth1 root 2>/dev/null; \
             tc qdisc add dev eth1 root netem delay 40ms 5ms loss '1%' duplicate '0.5%' reorder '5%' rate 200mbit"
        );
        assert_eq!(
            netem.to_string(),
            "delay 40ms 5ms loss 1% duplicate 0.5% reorder 5% rate 200mbit"
        );
        let odd = Netem {
            delay_us: Some(1500),
            rate_bit_s: Some(1_500_000),
            ..Default::default()
        };
        assert_eq!(odd.to_string(), "delay 1500us rate 1500kbit");
    }

    #[test]
    fn test_tc_show_reads_back_what_was_set() {
        // As iproute2 6.1 printed it on the lab's node (Debian 12), jitter and all.
        let out = "qdisc netem 8001: root refcnt 2 limit 1000 delay 40ms  5ms loss 1% duplicate 0.5% reorder 5% rate 200Mbit gap 1\n";
        assert_eq!(
            parse_tc_show(out),
            Some(Netem {
                loss_pct: Some(1.0),
                delay_us: Some(40_000),
                jitter_us: Some(5_000),
                rate_bit_s: Some(200_000_000),
                reorder_pct: Some(5.0),
                duplicate_pct: Some(0.5),
            })
        );
        let loss_only = "qdisc netem 8002: root refcnt 2 limit 1000 loss 2%\n";
        assert_eq!(parse_tc_show(loss_only).unwrap().to_string(), "loss 2%");
        let decimal = "qdisc netem 8003: root refcnt 2 limit 1000 delay 40.0ms loss 1.99999%\n";
        assert_eq!(parse_tc_show(decimal).unwrap().to_string(), "delay 40ms loss 2%");
        // A NIC's default qdisc, or netem that is not at the root, is no impairment of ours.
        assert_eq!(parse_tc_show("qdisc pfifo_fast 0: root refcnt 2 bands 3\n"), None);
        assert_eq!(parse_tc_show("qdisc noqueue 0: root refcnt 2\n"), None);
        assert_eq!(parse_tc_show(""), None);
        assert_eq!(
            parse_tc_show("qdisc netem 10: parent 1:1 limit 1000 loss 5%\nqdisc htb 1: root refcnt 2\n"),
            None
        );
    }

    #[test]
    fn test_counter_deltas_and_retransmission_work() {
        let before = parse_counters(
            "rcvd_seq_err:3\ncompleter_retry_err:4\nsent_pkts:100\nlifespan:10\nnot a counter\nduplicate_request:0\n",
        );
        assert_eq!(before.get("sent_pkts"), Some(&100));
        assert_eq!(before.len(), 4, "{before:?}");
        let after =
            parse_counters("rcvd_seq_err:10\ncompleter_retry_err:9\nsent_pkts:700\nlifespan:10\nduplicate_request:2\n");
        let delta = counter_delta(&before, &after);
        assert_eq!(delta["rcvd_seq_err"], 7);
        assert_eq!(delta["completer_retry_err"], 5);
        assert_eq!(delta["sent_pkts"], 600);
        assert!(!delta.contains_key("lifespan"));
        assert_eq!(retransmission_work(&delta), 7 + 5 + 2);
        // A device re-created between the reads starts again at zero.
        let reset = parse_counters("sent_pkts:5\n");
        assert_eq!(counter_delta(&after, &reset)["sent_pkts"], 5);
    }
}
