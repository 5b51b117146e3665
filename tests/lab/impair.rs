//! `labctl impair` and `labctl capture` on the real lab: a lossy link still
//! delivers verified bytes, at the cost of Go-Back-N retransmissions the
//! RDMA counters show; `--clear` gives the clean link back; a capture on a
//! node holds the run's RoCEv2 packets, immediates included.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use libtest_mimic::{Failed, Trial};
use serde_json::Value;

use crate::util::{check, Labctl, RepairOnDrop};

/// Tests that leave the lab as they found it.
pub fn trials(lab: &Labctl) -> Vec<Trial> {
    let t = |name: &str, f: fn(&Labctl) -> Result<(), Failed>| {
        let lab = lab.clone();
        crate::timing::trial(name, move || f(&lab))
    };
    vec![
        t(
            "test_wire_loss_shows_retransmissions_and_clear_restores_the_link",
            test_wire_loss_shows_retransmissions_and_clear_restores_the_link,
        ),
        t(
            "test_wire_capture_holds_the_runs_rdma_writes_reads_and_immediates",
            test_wire_capture_holds_the_runs_rdma_writes_reads_and_immediates,
        ),
    ]
}

/// The Go-Back-N counters: retransmission work on either side.
const RETRANSMISSION_COUNTERS: &[&str] = &[
    "out_of_seq_request",
    "rcvd_seq_err",
    "completer_retry_err",
    "duplicate_request",
];

fn retransmissions(run: &Value) -> u64 {
    ["server", "client"]
        .iter()
        .flat_map(|side| {
            RETRANSMISSION_COUNTERS
                .iter()
                .map(move |c| run["counters"][side][c].as_u64().unwrap_or(0))
        })
        .sum()
}

fn node_status<'a>(status: &'a Value, name: &str) -> Result<&'a Value, Failed> {
    status["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|n| n["name"] == name))
        .ok_or_else(|| format!("no node {name} in status: {status}").into())
}

/// 2% loss on what the client sends: a 512 KiB write-bw (512 packets at MTU
/// 1024, so about 10 lost; none lost has odds of 0.98^512 = 3e-5) still
/// verifies, and the counters show the Go-Back-N work. After `--clear`,
/// status shows no impairment and the same run retransmits nothing.
fn test_wire_loss_shows_retransmissions_and_clear_restores_the_link(lab: &Labctl) -> Result<(), Failed> {
    let bad = lab.run(&["impair", "client", "--jitter", "5ms"]);
    check(bad.code == 2 && bad.stderr.contains("needs --delay"), || {
        format!("--jitter without --delay: exit {}, {}", bad.code, bad.stderr)
    })?;
    let _guard = RepairOnDrop::new(lab, &["impair", "client", "--clear"]);
    let set = lab.run(&["impair", "client", "--loss", "2%", "--json"]).ok()?.json()?;
    check(set["active"]["loss_pct"] == 2.0, || format!("after impair: {set}"))?;
    // rxe0 resolves under /sys/devices/virtual: its RDMA is kernel traffic.
    check(set["shapes_rdma"] == true, || {
        format!("impair on rxe does not say it shapes RDMA: {set}")
    })?;
    let status = lab.run(&["status", "--json"]).ok()?.json()?;
    let client = node_status(&status, "client")?;
    check(client["impairment"]["loss_pct"] == 2.0, || {
        format!("status does not show the loss: {client}")
    })?;
    check(node_status(&status, "server")?["impairment"].is_null(), || {
        format!("the server is not impaired: {status}")
    })?;

    let args = ["run", "write-bw", "-s", "65536", "-n", "8", "--json"];
    let lossy = lab.run(&args).ok()?.json()?;
    check(lossy["verified"] == true, || {
        format!("not verified under 2% loss: {lossy}")
    })?;
    check(lossy["impairment"]["client"] == "loss 2%", || {
        format!("the run does not record the impairment: {}", lossy["impairment"])
    })?;
    let work = retransmissions(&lossy);
    check(work > 0, || {
        format!("no retransmission work under 2% loss: {}", lossy["counters"])
    })?;
    check(
        lossy["counters"]["client"]["sent_pkts"].as_u64().unwrap_or(0) >= 512,
        || {
            format!(
                "the client sent fewer packets than the data needs: {}",
                lossy["counters"]
            )
        },
    )?;

    let cleared = lab.run(&["impair", "client", "--clear", "--json"]).ok()?.json()?;
    check(cleared["active"].is_null(), || format!("after --clear: {cleared}"))?;
    let status = lab.run(&["status", "--json"]).ok()?.json()?;
    let client = node_status(&status, "client")?;
    check(client["impairment"].is_null(), || {
        format!("status still shows an impairment: {client}")
    })?;
    let mut clean_args = args.to_vec();
    clean_args.push("--counters");
    let clean = lab.run(&clean_args).ok()?.json()?;
    check(clean["verified"] == true && clean.get("impairment").is_none(), || {
        format!("after --clear: {clean}")
    })?;
    check(retransmissions(&clean) == 0, || {
        format!("retransmissions on the cleared link: {}", clean["counters"])
    })?;
    eprintln!(
        "2% loss: {work} retransmission counts, {:.2} MiB/s; clean: {:.2} MiB/s",
        lossy["bw_avg_mib_s"].as_f64().unwrap_or(0.0),
        clean["bw_avg_mib_s"].as_f64().unwrap_or(0.0)
    );
    Ok(())
}

/// A background `labctl capture`, stopped (SIGINT, as Ctrl-C) or waited
/// for; killed if the test ends first.
struct Capture {
    child: Child,
    stdout: mpsc::Receiver<String>,
}

impl Capture {
    /// Starts a capture on `node` and waits until tcpdump listens.
    fn start(lab: &Labctl, node: &str, extra: &[&str], output: &Path) -> Result<Capture, Failed> {
        let mut child = lab
            .command()
            .args(["capture", node, "--json", "-o"])
            .arg(output)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawn labctl capture: {e}"))?;
        let (line_tx, lines) = mpsc::channel();
        let stderr = child.stderr.take().expect("piped");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = line_tx.send(line);
            }
        });
        let (out_tx, stdout) = mpsc::channel();
        let mut out = child.stdout.take().expect("piped");
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut out, &mut text);
            let _ = out_tx.send(text);
        });
        let mut capture = Capture { child, stdout };
        let mut said = String::new();
        loop {
            match lines.recv_timeout(Duration::from_secs(60)) {
                Ok(line) if line.contains("capturing on") && line.contains("listening on") => break,
                Ok(line) => said.push_str(&format!("{line}\n")),
                Err(_) => {
                    let _ = capture.child.kill();
                    return Err(format!("the capture did not start listening within 60 s:\n{said}").into());
                }
            }
        }
        Ok(capture)
    }

    /// Waits for labctl to exit (after SIGINT if `interrupt`); its JSON.
    fn finish(mut self, interrupt: bool) -> Result<Value, Failed> {
        if interrupt {
            let pid = self.child.id().to_string();
            std::process::Command::new("kill").args(["-INT", &pid]).status()?;
        }
        let text = self
            .stdout
            .recv_timeout(Duration::from_secs(90))
            .map_err(|_| "labctl capture did not finish within 90 s")?;
        let status = self.child.wait()?;
        check(status.success(), || format!("labctl capture failed ({status}): {text}"))?;
        serde_json::from_str(&text).map_err(|e| format!("capture --json is not JSON ({e}): {text}").into())
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A RoCEv2 packet: its BTH opcode, and the BTH with what follows.
type RocePacket = (u8, Vec<u8>);

/// The packet count of a pcap and its RoCEv2 packets, parsed here
/// independently of labctl (pcap-file, then Ethernet/IPv4/UDP by offset).
fn roce_packets(path: &Path) -> Result<(usize, Vec<RocePacket>), Failed> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut reader = pcap_file::pcap::PcapReader::new(file).map_err(|e| format!("{}: {e}", path.display()))?;
    let (mut all, mut roce) = (0, Vec::new());
    while let Some(packet) = reader.next_packet() {
        let data = packet.map_err(|e| format!("{}: {e}", path.display()))?.data;
        all += 1;
        // Ethernet (14) + IPv4 (IHL words) + UDP (8); RoCEv2 is UDP dst 4791.
        if data.len() < 14 + 20 + 8 + 12 || data[12..14] != [0x08, 0x00] || data[14 + 9] != 17 {
            continue;
        }
        let udp = 14 + usize::from(data[14] & 0x0f) * 4;
        if u16::from_be_bytes([data[udp + 2], data[udp + 3]]) == 4791 {
            roce.push((data[udp + 8], data[udp + 8..].to_vec()));
        }
    }
    Ok((all, roce))
}

/// The immediates of WRITE_WITH_IMM packets, in wire order: ImmDt follows
/// the 12-byte BTH (Last with Immediate, 0x09) or BTH + 16-byte RETH (Only
/// with Immediate, 0x0b).
fn immediates(roce: &[RocePacket]) -> Vec<u64> {
    roce.iter()
        .filter_map(|(op, bth)| {
            let at = match op {
                0x09 => 12,
                0x0b => 28,
                _ => return None,
            };
            let imm = bth.get(at..at + 4)?;
            Some(u64::from(u32::from_be_bytes([imm[0], imm[1], imm[2], imm[3]])))
        })
        .collect()
}

fn temp_pcap(name: &str) -> PathBuf {
    crate::util::bin_dir().join(format!("lab-tests-{}-{name}.pcap", std::process::id()))
}

/// A capture on the server while write-read and write-imm run, stopped with
/// SIGINT: the pcap holds RC RDMA WRITE packets, READ requests and
/// responses, and the very immediates the server reported, in order; labctl's
/// packet count matches the file. A second capture stops itself at --count.
fn test_wire_capture_holds_the_runs_rdma_writes_reads_and_immediates(lab: &Labctl) -> Result<(), Failed> {
    let path = temp_pcap("runs");
    let _ = std::fs::remove_file(&path);
    let capture = Capture::start(lab, "server", &["--duration", "300"], &path)?;
    lab.run(&["run", "write-read", "-n", "4"]).ok()?;
    let imm = lab.run(&["run", "write-imm", "--json"]).ok()?.json()?;
    // The emulated node's tcpdump may lag the run a little.
    std::thread::sleep(Duration::from_secs(2));
    let got = capture.finish(true)?;
    check(got["stopped_by"] == "interrupted", || format!("capture: {got}"))?;
    let (all, roce) = roce_packets(&path)?;
    let _ = std::fs::remove_file(&path);
    check(got["packets"].as_u64() == Some(all as u64), || {
        format!("labctl counted {} packets, the file holds {all}", got["packets"])
    })?;
    let has = |ops: &[u8]| roce.iter().any(|(op, _)| ops.contains(op));
    check(has(&[0x06, 0x07, 0x08, 0x0a]), || {
        format!("no RC RDMA WRITE packet among {} RoCEv2 packets", roce.len())
    })?;
    check(has(&[0x0c]) && has(&[0x0d, 0x0e, 0x0f, 0x10]), || {
        "no RDMA READ request and response".to_string()
    })?;
    let on_wire = immediates(&roce);
    let reported: Vec<u64> = imm["server"]["immediates"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    check(!reported.is_empty() && on_wire == reported, || {
        format!("immediates on the wire {on_wire:?}, the server received {reported:?}")
    })?;
    check(
        got["roce_opcodes"]["RC RDMA WRITE Only with Immediate"].as_u64() >= Some(1),
        || format!("labctl's summary misses the immediate: {}", got["roce_opcodes"]),
    )?;

    let counted = temp_pcap("count");
    let capture = Capture::start(lab, "server", &["--count", "3", "--duration", "300"], &counted)?;
    lab.run(&["run", "write-read", "-n", "2"]).ok()?;
    let got = capture.finish(false)?;
    let (all, roce) = roce_packets(&counted)?;
    let _ = std::fs::remove_file(&counted);
    check(got["stopped_by"] == "count" && all == 3 && roce.len() == 3, || {
        format!("--count 3: {got}, {all} packets in the file, {} RoCEv2", roce.len())
    })?;
    let leftovers = lab
        .run(&[
            "exec",
            "server",
            "--",
            "ls -d /tmp/labctl-capture.* 2>/dev/null; pgrep -x tcpdump; true",
        ])
        .ok()?;
    check(leftovers.stdout.trim().is_empty(), || {
        format!("the capture left something on the node: {}", leftovers.stdout)
    })
}
