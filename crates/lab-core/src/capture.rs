//! `labctl capture`: tcpdump on a node's data NIC, the pcap copied to the
//! host, and a first look at it: how many packets, and which RoCEv2 (UDP
//! 4791) operations they carry, by the InfiniBand base transport header's
//! opcode.
//!
//! tcpdump runs on the node in the background of an SSH command, writing
//! packet by packet (`-U`) into a private temporary directory; labctl stops
//! it with SIGINT (its duration is up, or the user pressed Ctrl-C) or it
//! stops itself (`-c N`). Either way what was captured is copied to the host
//! and the temporary directory removed.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::impair::{data_nic, rdma_sender_of, ImpairError, RdmaSender};
use crate::lab::{Lab, LabError};
use crate::provision::as_root;
use lab_remote::command::RemoteCommand;
use lab_remote::ssh::{SshError, SshSession};
use lab_state::NodeState;

/// The UDP port of RoCEv2.
pub const ROCE_V2_PORT: u16 = 4791;

/// What `--filter` is when not given: RoCEv2 only.
pub const DEFAULT_FILTER: &str = "udp port 4791";

/// Errors of a capture.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The lab is not usable.
    #[error(transparent)]
    Lab(#[from] LabError),
    /// SSH failed.
    #[error(transparent)]
    Ssh(#[from] SshError),
    /// The node has no data NIC on record.
    #[error(transparent)]
    Nic(#[from] ImpairError),
    /// The node has no tcpdump.
    #[error("node `{node}` has no tcpdump; install it there (`labctl exec {node} -- apt-get install -y tcpdump`) — labctl's own node image includes it")]
    NoTcpdump {
        /// The node.
        node: String,
    },
    /// tcpdump failed (a bad filter, a missing NIC).
    #[error("node `{node}`: tcpdump on {netdev} failed (exit status {status}):\n{log}")]
    Tcpdump {
        /// The node.
        node: String,
        /// The NIC.
        netdev: String,
        /// Its exit status.
        status: i32,
        /// What it said.
        log: String,
    },
    /// The node's RDMA device is a NIC that sends RDMA itself: tcpdump on
    /// its netdev would see the node's IP traffic only.
    #[error("node `{node}`: {device} is a hardware RDMA device ({sysfs}): it sends and receives RDMA itself, never through the kernel, so tcpdump on {netdev} would see the node's IP traffic only (TCP bulk, SSH, IPoIB), not RDMA\n  add --ip-only with a --filter for that traffic to capture it anyway; RoCE of a hardware NIC is captured by the NIC's own sniffer (on mlx5: tcpdump on the RDMA device, `labctl ssh {node} -- sudo tcpdump -i {device}`, through libpcap's RDMA sniffer) or on a mirror port of the switch")]
    RdmaOffloaded {
        /// The node.
        node: String,
        /// Its RDMA device.
        device: String,
        /// The device's sysfs path.
        sysfs: String,
        /// The netdev tcpdump would listen on.
        netdev: String,
    },
    /// The pcap could not be written on the host.
    #[error("cannot write the capture to {path}: {source}")]
    Output {
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The pcap copied from the node does not parse.
    #[error("the capture copied from node `{node}` is not a readable pcap: {message}")]
    Pcap {
        /// The node.
        node: String,
        /// What the reader said.
        message: String,
    },
}

/// What to capture.
#[derive(Debug, Clone)]
pub struct CaptureOptions {
    /// The node.
    pub node: String,
    /// Stop after this long (from when tcpdump listens).
    pub duration: Option<Duration>,
    /// Stop after this many packets.
    pub count: Option<u64>,
    /// tcpdump's filter expression.
    pub filter: String,
    /// The pcap on the host.
    pub output: PathBuf,
    /// Capture on a node whose RDMA device is a NIC too, knowing tcpdump
    /// sees only its IP traffic there.
    pub ip_only: bool,
}

/// Why the capture stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StoppedBy {
    /// `--count` packets were captured.
    Count,
    /// `--duration` was up.
    Duration,
    /// The caller's stop signal (Ctrl-C).
    Interrupted,
}

/// What a capture got.
#[derive(Debug, Clone, Serialize)]
pub struct CaptureOutcome {
    /// The node.
    pub node: String,
    /// Its data NIC.
    pub netdev: String,
    /// The filter used.
    pub filter: String,
    /// The pcap on the host.
    pub output: String,
    /// Packets in it.
    pub packets: u64,
    /// Bytes of the file.
    pub bytes: u64,
    /// Why it stopped.
    pub stopped_by: StoppedBy,
    /// RoCEv2 packets by BTH opcode name, e.g. "RC RDMA WRITE Only".
    pub roce_opcodes: BTreeMap<String, u64>,
}

/// Runs a capture on `opts.node`. `on_listening` is called with tcpdump's
/// "listening on ..." line once packets are being captured; `stop` ends the
/// capture early (what was captured is still copied).
pub async fn capture(
    lab: &Lab,
    opts: &CaptureOptions,
    on_listening: impl FnOnce(&str),
    stop: impl Future<Output = ()>,
) -> Result<CaptureOutcome, CaptureError> {
    let state = lab.state()?;
    let node = lab.node_state(&state, &opts.node)?.clone();
    let netdev = data_nic(&node)?.to_string();
    let session = lab.connect(&state, &opts.node).await?;
    let result = capture_on(&session, &node, &netdev, opts, on_listening, stop).await;
    session.close().await;
    let (pcap, stopped_by) = result?;
    std::fs::write(&opts.output, &pcap).map_err(|source| CaptureError::Output {
        path: opts.output.clone(),
        source,
    })?;
    let summary = summarize(&pcap).map_err(|message| CaptureError::Pcap {
        node: opts.node.clone(),
        message,
    })?;
    Ok(CaptureOutcome {
        node: opts.node.clone(),
        netdev,
        filter: opts.filter.clone(),
        output: opts.output.display().to_string(),
        packets: summary.packets,
        bytes: pcap.len() as u64,
        stopped_by,
        roce_opcodes: summary.roce_opcodes,
    })
}

/// tcpdump's command line.
pub fn tcpdump_command(netdev: &str, file: &str, count: Option<u64>, filter: &str) -> RemoteCommand {
    // -Z root: Debian's tcpdump otherwise drops to user `tcpdump`, which may
    // not write into the root-owned temporary directory. --immediate-mode:
    // otherwise the kernel hands packets over in blocks, and the packets of
    // a block still pending at SIGINT are lost (seen: a capture stopped right
    // after a run missed the run's last packets).
    let mut argv = vec![
        "tcpdump".to_string(),
        "-i".into(),
        netdev.into(),
        "--immediate-mode".into(),
        "-U".into(),
        "-Z".into(),
        "root".into(),
        "-w".into(),
        file.into(),
    ];
    if let Some(n) = count {
        argv.extend(["-c".into(), n.to_string()]);
    }
    argv.push(filter.into());
    RemoteCommand::new(&argv[0]).args(&argv[1..])
}

async fn capture_on(
    session: &SshSession,
    node: &NodeState,
    netdev: &str,
    opts: &CaptureOptions,
    on_listening: impl FnOnce(&str),
    stop: impl Future<Output = ()>,
) -> Result<(Vec<u8>, StoppedBy), CaptureError> {
    if !opts.ip_only {
        if let RdmaSender::Nic { device, sysfs } = rdma_sender_of(session, node).await? {
            return Err(CaptureError::RdmaOffloaded {
                node: node.name.clone(),
                device,
                sysfs,
                netdev: netdev.to_string(),
            });
        }
    }
    if session.exec(&RemoteCommand::script("command -v tcpdump")).await?.status != 0 {
        return Err(CaptureError::NoTcpdump {
            node: node.name.clone(),
        });
    }
    let dir = session
        .run(&as_root(
            node,
            RemoteCommand::new("mktemp").args(["-d", "/tmp/labctl-capture.XXXXXX"]),
        ))
        .await?
        .stdout_text();
    let result = run_tcpdump(session, node, netdev, &dir, opts, on_listening, stop).await;
    // The temporary directory goes whatever happened; a failure to remove
    // it must not hide the capture or the real error.
    let _ = session
        .exec(&as_root(node, RemoteCommand::new("rm").arg("-rf").arg(&dir)))
        .await;
    result
}

async fn run_tcpdump(
    session: &SshSession,
    node: &NodeState,
    netdev: &str,
    dir: &str,
    opts: &CaptureOptions,
    on_listening: impl FnOnce(&str),
    stop: impl Future<Output = ()>,
) -> Result<(Vec<u8>, StoppedBy), CaptureError> {
    let file = format!("{dir}/capture.pcap");
    let pid_file = format!("{dir}/pid");
    // In the background with its pid recorded, so a second command can stop it.
    let tcpdump = tcpdump_command(netdev, &file, opts.count, &opts.filter);
    let argv = tcpdump.argv().expect("tcpdump_command is a plain command");
    let command = as_root(
        node,
        RemoteCommand::script_with(
            "p=$1; shift; \"$@\" & echo $! > \"$p\"; wait $!",
            std::iter::once(pid_file.as_str()).chain(argv.iter().map(String::as_str)),
        ),
    );
    let (tx, mut output) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let tcpdump = session.exec_streaming(&command, None, move |_, data| {
        let _ = tx.send(data.to_vec());
    });
    let mut tcpdump = std::pin::pin!(tcpdump);
    let mut stop = std::pin::pin!(stop);
    let mut log = String::new();
    let mut on_listening = Some(on_listening);
    let mut deadline: Option<tokio::time::Instant> = None;
    let (status, stopped_by) = loop {
        let duration_up = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            status = &mut tcpdump => break (Some(status?), StoppedBy::Count),
            Some(chunk) = output.recv() => {
                log.push_str(&String::from_utf8_lossy(&chunk));
                // Whole lines only: the announcement may arrive in pieces.
                let complete = &log[..log.rfind('\n').map_or(0, |i| i + 1)];
                if let Some(line) = complete.lines().find(|l| l.contains("listening on")) {
                    if let Some(notify) = on_listening.take() {
                        notify(line);
                        deadline = opts.duration.map(|d| tokio::time::Instant::now() + d);
                    }
                }
            }
            _ = duration_up => break (None, StoppedBy::Duration),
            _ = &mut stop => break (None, StoppedBy::Interrupted),
        }
    };
    let status = match status {
        Some(status) => status,
        None => {
            // SIGINT: tcpdump flushes what it has, closes the file and exits 0.
            let kill = RemoteCommand::script_with("kill -INT \"$(cat \"$1\")\"", [&pid_file]);
            session.exec(&as_root(node, kill)).await?;
            match tokio::time::timeout(Duration::from_secs(30), &mut tcpdump).await {
                Ok(status) => status?,
                Err(_) => {
                    return Err(CaptureError::Tcpdump {
                        node: node.name.clone(),
                        netdev: netdev.to_string(),
                        status: -1,
                        log: format!("{log}\n(did not stop within 30 s of SIGINT)"),
                    })
                }
            }
        }
    };
    while let Ok(chunk) = output.try_recv() {
        log.push_str(&String::from_utf8_lossy(&chunk));
    }
    if status != 0 {
        return Err(CaptureError::Tcpdump {
            node: node.name.clone(),
            netdev: netdev.to_string(),
            status,
            log: log.trim().to_string(),
        });
    }
    // A non-root login downloads a file root wrote.
    if node.ssh_user != "root" {
        session
            .run(&as_root(node, RemoteCommand::new("chmod").arg("a+r").arg(&file)))
            .await?;
    }
    Ok((session.download(&file).await?, stopped_by))
}

/// A pcap's packet count and its RoCEv2 packets by opcode.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PcapSummary {
    /// Every packet.
    pub packets: u64,
    /// RoCEv2 packets by BTH opcode name.
    pub roce_opcodes: BTreeMap<String, u64>,
}

/// Counts the packets of a pcap and names the RoCEv2 opcodes among them.
pub fn summarize(pcap: &[u8]) -> Result<PcapSummary, String> {
    let mut reader = pcap_file::pcap::PcapReader::new(pcap).map_err(|e| e.to_string())?;
    let ethernet = reader.header().datalink == pcap_file::DataLink::ETHERNET;
    let mut summary = PcapSummary::default();
    while let Some(packet) = reader.next_packet() {
        let packet = packet.map_err(|e| e.to_string())?;
        summary.packets += 1;
        if let Some(opcode) = ethernet.then(|| roce_opcode(&packet.data)).flatten() {
            *summary.roce_opcodes.entry(opcode_name(opcode)).or_default() += 1;
        }
    }
    Ok(summary)
}

/// The BTH opcode of an Ethernet frame carrying RoCEv2 (IPv4 or IPv6, UDP
/// destination port 4791), or `None`.
pub fn roce_opcode(frame: &[u8]) -> Option<u8> {
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let (l4, protocol) = match ethertype {
        0x0800 => {
            let ihl = usize::from(frame.get(14)? & 0x0f) * 4;
            (14 + ihl, *frame.get(14 + 9)?)
        }
        0x86dd => (14 + 40, *frame.get(14 + 6)?),
        _ => return None,
    };
    if protocol != 17 {
        return None;
    }
    let dst_port = u16::from_be_bytes([*frame.get(l4 + 2)?, *frame.get(l4 + 3)?]);
    if dst_port != ROCE_V2_PORT {
        return None;
    }
    // The BTH follows the 8-byte UDP header; its first byte is the opcode.
    frame.get(l4 + 8).copied()
}

/// The name of a BTH opcode as the InfiniBand spec (and Wireshark) spells it.
pub fn opcode_name(opcode: u8) -> String {
    if opcode == 0x81 {
        return "CNP (congestion notification)".into();
    }
    let transport = match opcode >> 5 {
        0 => "RC",
        1 => "UC",
        2 => "RD",
        3 => "UD",
        4 => "CNP",
        5 => "XRC",
        _ => "manufacturer",
    };
    let operation = match opcode & 0x1f {
        0x00 => "SEND First",
        0x01 => "SEND Middle",
        0x02 => "SEND Last",
        0x03 => "SEND Last with Immediate",
        0x04 => "SEND Only",
        0x05 => "SEND Only with Immediate",
        0x06 => "RDMA WRITE First",
        0x07 => "RDMA WRITE Middle",
        0x08 => "RDMA WRITE Last",
        0x09 => "RDMA WRITE Last with Immediate",
        0x0a => "RDMA WRITE Only",
        0x0b => "RDMA WRITE Only with Immediate",
        0x0c => "RDMA READ Request",
        0x0d => "RDMA READ Response First",
        0x0e => "RDMA READ Response Middle",
        0x0f => "RDMA READ Response Last",
        0x10 => "RDMA READ Response Only",
        0x11 => "Acknowledge",
        0x12 => "ATOMIC Acknowledge",
        0x13 => "CmpSwap",
        0x14 => "FetchAdd",
        0x16 => "SEND Last with Invalidate",
        0x17 => "SEND Only with Invalidate",
        _ => return format!("{transport} opcode {opcode:#04x}"),
    };
    format!("{transport} {operation}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet + IPv4 + UDP frame to `dst_port` whose payload starts with `first`.
    fn udp_frame(dst_port: u16, first: u8) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8 + 12];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45; // IPv4, 20-byte header
        f[14 + 9] = 17; // UDP
        f[14 + 20 + 2..14 + 20 + 4].copy_from_slice(&dst_port.to_be_bytes());
        f[14 + 20 + 8] = first;
        f
    }

    fn pcap_of(frames: &[Vec<u8>]) -> Vec<u8> {
        use pcap_file::pcap::{PcapPacket, PcapWriter};
        let mut writer = PcapWriter::new(Vec::new()).unwrap();
        for f in frames {
            let packet = PcapPacket::new(Duration::from_millis(1), f.len() as u32, f);
            writer.write_packet(&packet).unwrap();
        }
        writer.into_writer()
    }

    #[test]
    fn test_opcodes_are_read_from_roce_v2_frames_only() {
        assert_eq!(roce_opcode(&udp_frame(4791, 0x0a)), Some(0x0a));
        assert_eq!(roce_opcode(&udp_frame(53, 0x0a)), None);
        let mut tcp = udp_frame(4791, 0x0a);
        tcp[14 + 9] = 6;
        assert_eq!(roce_opcode(&tcp), None);
        assert_eq!(roce_opcode(&udp_frame(4791, 0x0a)[..40]), None, "truncated");
        assert_eq!(roce_opcode(&[0u8; 10]), None);
    }

    #[test]
    fn test_opcode_names_follow_the_spec() {
        assert_eq!(opcode_name(0x06), "RC RDMA WRITE First");
        assert_eq!(opcode_name(0x0b), "RC RDMA WRITE Only with Immediate");
        assert_eq!(opcode_name(0x0c), "RC RDMA READ Request");
        assert_eq!(opcode_name(0x10), "RC RDMA READ Response Only");
        assert_eq!(opcode_name(0x11), "RC Acknowledge");
        assert_eq!(opcode_name(0x64), "UD SEND Only");
        assert_eq!(opcode_name(0x81), "CNP (congestion notification)");
        assert_eq!(opcode_name(0x1f), "RC opcode 0x1f");
    }

    #[test]
    fn test_summary_counts_packets_and_roce_opcodes() {
        let frames = vec![
            udp_frame(4791, 0x0a),
            udp_frame(4791, 0x0a),
            udp_frame(4791, 0x11),
            udp_frame(53, 0x0a),
        ];
        let summary = summarize(&pcap_of(&frames)).unwrap();
        assert_eq!(summary.packets, 4);
        assert_eq!(summary.roce_opcodes["RC RDMA WRITE Only"], 2);
        assert_eq!(summary.roce_opcodes["RC Acknowledge"], 1);
        assert_eq!(summary.roce_opcodes.len(), 2);
        assert!(summarize(b"not a pcap at all").is_err());
        assert_eq!(summarize(&pcap_of(&[])).unwrap().packets, 0);
    }

    #[test]
    fn test_tcpdump_command_quotes_the_filter() {
        assert_eq!(
            tcpdump_command("eth1", "/tmp/d/capture.pcap", Some(50), DEFAULT_FILTER).as_str(),
            "tcpdump -i eth1 --immediate-mode -U -Z root -w /tmp/d/capture.pcap -c 50 'udp port 4791'"
        );
        assert_eq!(
            tcpdump_command("eth1", "/tmp/d/c.pcap", None, "udp and host 10.0.0.1").as_str(),
            "tcpdump -i eth1 --immediate-mode -U -Z root -w /tmp/d/c.pcap 'udp and host 10.0.0.1'"
        );
    }
}
