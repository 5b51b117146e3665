//! The reference side of a pair: where perftest finds each node's data
//! address, the perftest and `fi_pingpong` command lines, and one round of
//! either tool run on the two nodes (server first, the client once the
//! server listens), read back into a [`Sample`].

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use agent_proto::data_path::{self, LinkLayer};
use agent_proto::v1::NodeInfoRequest;
use lab_remote::command::RemoteCommand;
use lab_results::bench::{Metric, PairSpec, PerftestResult, Sample};
use lab_state::text::last_lines;
use lab_state::LabState;

use super::options::{BenchError, BenchOptions};
use super::parse::{parse_fi_pingpong, parse_perftest, parse_perftest_server};
use crate::lab::{Lab, LabError};
/// How a sample's error begins when perftest refused to report because
/// its clock sampling was disturbed.
pub(super) const PERFTEST_CLOCK_REFUSED: &str = "perftest refused to report: its clock sampling was disturbed";

/// The line in which perftest says its cycles-per-microsecond sampling
/// was not linear enough to trust (get_clock.c, sample_get_cpu_mhz: "r^2 <
/// 0.9"), after which it prints no report. A vCPU descheduled while it
/// samples does that on a busy host; the measurement itself is not at
/// fault, so the sample is run again once.
pub fn perftest_clock_refusal(output: &str) -> Option<&str> {
    output
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with("Correlation coefficient r^2") && line.ends_with("< 0.9"))
}
#[derive(Debug, Clone)]
pub(super) struct DataPath {
    /// The RDMA device (`-d`).
    pub(super) device: String,
    /// Its port that holds the address (`-i`).
    pub(super) ib_port: u32,
    /// The source GID index (the RoCE v2 GID of the address; 0 on InfiniBand).
    pub(super) gid_index: u32,
    /// `-x`: the GID index on Ethernet; None on InfiniBand, where perftest
    /// addresses the peer by its LID.
    pub(super) perftest_gid: Option<u32>,
    /// The data address.
    pub(super) addr: Ipv4Addr,
    /// The network interface under the device (the IPoIB one on InfiniBand).
    pub(super) netdev: String,
}

/// The data path of `node` (address `addr`, recorded device `device`) in its
/// agent's NodeInfo devices: the lookup the agent makes for its sessions.
pub(super) fn data_path_of(
    node: &str,
    devices: &[agent_proto::v1::RdmaDevice],
    addr: Ipv4Addr,
    device: Option<&str>,
) -> Result<DataPath, BenchError> {
    let found = data_path::find(devices, addr, device).ok_or_else(|| {
        BenchError::Setup(format!(
            "node `{node}`: no RDMA device{} has {}",
            device.map(|d| format!(" named {d}")).unwrap_or_default(),
            data_path::wanted(addr)
        ))
    })?;
    Ok(DataPath {
        perftest_gid: (found.link_layer == LinkLayer::Ethernet).then_some(found.gid_index),
        device: found.device,
        ib_port: found.port,
        gid_index: found.gid_index,
        addr,
        netdev: found.netdev,
    })
}

/// The RDMA device, port and GID index that carry `node`'s data address (a
/// RoCE v2 GID, or an InfiniBand port's IPoIB address), and the interface
/// under that device (`fi_pingpong -d`: tcp's domains are interfaces).
pub(super) async fn node_data_path(lab: &Lab, state: &LabState, node: &str) -> Result<DataPath, BenchError> {
    let ns = lab.node_state(state, node)?.clone();
    let session = Arc::new(lab.connect(state, node).await?);
    let mut client = lab.agent(session.clone(), &ns).await?;
    let info = lab_remote::agent::call(
        node,
        "NodeInfo",
        lab_remote::agent::deadline::NODE_INFO,
        client.node_info(NodeInfoRequest {}),
    )
    .await
    .map_err(|e| BenchError::Setup(e.to_string()))?;
    session.close().await;
    data_path_of(node, &info.devices, ns.data_addr, ns.rdma_device.as_deref())
}

/// The perftest command line on one side (`peer` only on the client).
/// perftest's command line for one side; `port: None` leaves `-p` out (the
/// command as recorded, without the round's port).
pub(super) fn perftest_command(
    spec: &PairSpec,
    device: &str,
    ib_port: u32,
    gid: Option<u32>,
    port: Option<u16>,
    peer: Option<Ipv4Addr>,
) -> RemoteCommand {
    let mut cmd = RemoteCommand::new(&spec.tool).args(["-d", device]);
    // perftest's default port is 1; a device whose data port is another says so.
    if ib_port != 1 {
        cmd = cmd.arg("-i").arg(ib_port.to_string());
    }
    // RoCE needs the GID index; on InfiniBand perftest uses the port's LID.
    if let Some(gid) = gid {
        cmd = cmd.arg("-x").arg(gid.to_string());
    }
    if let Some(port) = port {
        cmd = cmd.arg("-p").arg(port.to_string());
    }
    cmd = cmd.arg("-n").arg(spec.iterations.to_string()).arg("-F");
    if spec.metric != Metric::MsgRateMpps {
        cmd = cmd.arg("-s").arg(spec.size.to_string());
    }
    if let Some((tx, cq)) = spec.depth {
        cmd = cmd.arg("-t").arg(tx.to_string()).arg("-Q").arg(cq.to_string());
    }
    if spec.qps > 1 {
        cmd = cmd.arg("-q").arg(spec.qps.to_string());
    }
    if let Some(peer) = peer {
        cmd = cmd.arg(peer.to_string());
    }
    cmd
}

/// perftest's average bandwidth. It prints MB/sec with two decimals, so
/// below 1 MiB/s (small messages on an emulated lab) the figure keeps one
/// significant digit or none (`0.00` at 2 B); there the message rate,
/// printed with six decimals and computed from the same run, gives it:
/// Mpps x 10^6 x bytes / 2^20.
pub(super) fn perftest_average_mib_s(c: &PerftestResult) -> Option<f64> {
    match (c.bw_avg_mib_s, c.msg_rate_mpps) {
        (Some(bw), Some(mpps)) if bw < 1.0 && mpps > 0.0 => Some(mpps * 1e6 * c.bytes as f64 / f64::from(1 << 20)),
        (bw, _) => bw,
    }
}

/// Runs a plain command under `timeout` with line-buffered stdout and the
/// shell's CPU `times` appended, keeping the command's exit status.
pub(super) fn wrapped(cmd: &RemoteCommand, timeout_s: u64) -> RemoteCommand {
    let argv = cmd.argv().expect("a plain command");
    RemoteCommand::script_with(
        "t=$1; shift; timeout \"$t\" stdbuf -oL \"$@\" 2>&1; rc=$?; times; exit $rc",
        std::iter::once(timeout_s.to_string()).chain(argv.iter().cloned()),
    )
}

pub(super) fn gib(bytes: f64) -> f64 {
    bytes / (1u64 << 30) as f64
}

async fn run_perftest(
    lab: &Lab,
    opts: &BenchOptions,
    spec: &PairSpec,
    dev: &[DataPath; 2],
    port: u16,
    round: u32,
) -> Sample {
    if spec.provider.is_some() {
        return run_fi_pingpong(lab, opts, spec, dev, port, round).await;
    }
    let mut sample = Sample {
        round,
        ..Default::default()
    };
    let timeout_s = opts.timeout.as_secs().max(10);
    let server_cmd = wrapped(
        &perftest_command(
            spec,
            &dev[0].device,
            dev[0].ib_port,
            dev[0].perftest_gid,
            Some(port),
            None,
        ),
        timeout_s,
    );
    let client_cmd = wrapped(
        &perftest_command(
            spec,
            &dev[1].device,
            dev[1].ib_port,
            dev[1].perftest_gid,
            Some(port),
            Some(dev[0].addr),
        ),
        timeout_s,
    );
    let ready = tokio::sync::Notify::new();
    let (mut server_out, mut client_out) = (Vec::new(), Vec::new());
    let server = lab.exec(&opts.server, &server_cmd, |_, data| {
        server_out.extend_from_slice(data);
        if String::from_utf8_lossy(&server_out).contains("Waiting for client") {
            ready.notify_one();
        }
    });
    let client = async {
        // perftest's server says when it listens; do not wait forever for the line.
        let _ = tokio::time::timeout(Duration::from_secs(20), ready.notified()).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        lab.exec(&opts.client, &client_cmd, |_, data| client_out.extend_from_slice(data))
            .await
    };
    let (server_rc, client_rc) = tokio::join!(server, client);
    let server_text = String::from_utf8_lossy(&server_out).into_owned();
    let client_text = String::from_utf8_lossy(&client_out).into_owned();
    if let Some(line) = perftest_clock_refusal(&client_text).or_else(|| perftest_clock_refusal(&server_text)) {
        sample.error = Some(format!("{PERFTEST_CLOCK_REFUSED}: `{line}`"));
        return sample;
    }
    let failed = |who: &str, rc: Result<i32, LabError>, text: &str| match rc {
        Ok(0) => None,
        Ok(code) => Some(format!("{who} exited {code}:\n{}", last_lines(text, 8))),
        Err(e) => Some(format!("{who}: {e}")),
    };
    if let Some(e) = failed("perftest client", client_rc, &client_text)
        .or_else(|| failed("perftest server", server_rc, &server_text))
    {
        sample.error = Some(e);
        return sample;
    }
    let (c, s) = match (parse_perftest(&client_text), parse_perftest_server(&server_text)) {
        (Ok(c), Ok(s)) => (c, s),
        (Err(e), _) | (_, Err(e)) => {
            sample.error = Some(e);
            return sample;
        }
    };
    sample.value = match spec.metric {
        Metric::BwAvgMibS => perftest_average_mib_s(&c),
        Metric::MsgRateMpps => c.msg_rate_mpps,
        Metric::LatTypicalUs => c.lat_typical_us,
        Metric::LatAvgUs => c.lat_avg_us,
        // perftest runs no collective.
        Metric::BusbwGbS => None,
    };
    sample.peak_mib_s = c.bw_peak_mib_s;
    let moved = gib((c.bytes * c.iterations) as f64);
    let cpu = |r: &PerftestResult| Some(r.cpu_user_s? + r.cpu_system_s?);
    if moved > 0.0 {
        sample.cpu_client_s_per_gib = cpu(&c).map(|x| x / moved);
        sample.cpu_total_s_per_gib = cpu(&c).zip(cpu(&s)).map(|(a, b)| (a + b) / moved);
    }
    sample.perftest = Some([c, s]);
    sample
}

/// The `fi_pingpong` command line on one side (`peer` only on the client):
/// RDM endpoint, untagged messages, the data interface as tcp's domain.
/// `fi_pingpong`'s command line for one side: the server binds `-B port`,
/// the client names the server's `-P port` and address. `port: None` leaves
/// the port out (the command as recorded).
pub(super) fn fi_pingpong_command(
    spec: &PairSpec,
    provider: &str,
    netdev: &str,
    port: Option<u16>,
    peer: Option<Ipv4Addr>,
) -> RemoteCommand {
    let mut cmd = RemoteCommand::new("fi_pingpong")
        .args(["-p", provider, "-e", "rdm", "-m", "msg", "-d", netdev])
        .args(["-I", &spec.iterations.to_string(), "-S", &spec.size.to_string()]);
    let port_flag = if peer.is_some() { "-P" } else { "-B" };
    if let Some(port) = port {
        cmd = cmd.arg(port_flag).arg(port.to_string());
    }
    if let Some(peer) = peer {
        cmd = cmd.arg(peer.to_string());
    }
    cmd
}

/// One round of `fi_pingpong`: the server, then the client once the server's
/// control port listens (`ss` on the server node; fi_pingpong prints nothing
/// before its result without -v, and -v logs every byte).
async fn run_fi_pingpong(
    lab: &Lab,
    opts: &BenchOptions,
    spec: &PairSpec,
    dev: &[DataPath; 2],
    port: u16,
    round: u32,
) -> Sample {
    let mut sample = Sample {
        round,
        ..Default::default()
    };
    let provider = spec.provider.as_deref().unwrap_or("tcp;ofi_rxm");
    let timeout_s = opts.timeout.as_secs().max(10);
    let server_cmd = wrapped(
        &fi_pingpong_command(spec, provider, &dev[0].netdev, Some(port), None),
        timeout_s,
    );
    let client_cmd = wrapped(
        &fi_pingpong_command(spec, provider, &dev[1].netdev, Some(port), Some(dev[0].addr)),
        timeout_s,
    );
    let listening = RemoteCommand::script_with(
        "for i in $(seq 100); do ss -Hltn \"sport = :$1\" | grep -q . && exit 0; sleep 0.2; done; exit 1",
        [port.to_string()],
    );
    let (mut server_out, mut client_out) = (Vec::new(), Vec::new());
    let server = lab.exec(&opts.server, &server_cmd, |_, data| server_out.extend_from_slice(data));
    let client = async {
        match lab.exec(&opts.server, &listening, |_, _| {}).await {
            Ok(0) => {}
            Ok(_) => return Err(format!("fi_pingpong server: port {port} not listening after 20 s")),
            Err(e) => return Err(format!("fi_pingpong server: {e}")),
        }
        lab.exec(&opts.client, &client_cmd, |_, data| client_out.extend_from_slice(data))
            .await
            .map_err(|e| format!("fi_pingpong client: {e}"))
    };
    let (server_rc, client_rc) = tokio::join!(server, client);
    let server_text = String::from_utf8_lossy(&server_out).into_owned();
    let client_text = String::from_utf8_lossy(&client_out).into_owned();
    let outcome = match (client_rc, server_rc) {
        (Err(e), _) => Err(e),
        (Ok(0), Ok(0)) => Ok(()),
        (Ok(code), _) if code != 0 => Err(format!(
            "fi_pingpong client exited {code}:\n{}",
            last_lines(&client_text, 8)
        )),
        (_, Ok(code)) => Err(format!(
            "fi_pingpong server exited {code}:\n{}",
            last_lines(&server_text, 8)
        )),
        (_, Err(e)) => Err(format!("fi_pingpong server: {e}")),
    };
    if let Err(e) = outcome {
        sample.error = Some(e);
        return sample;
    }
    let (c, s) = match (parse_fi_pingpong(&client_text), parse_fi_pingpong(&server_text)) {
        (Ok(c), Ok(s)) => (c, s),
        (Err(e), _) | (_, Err(e)) => {
            sample.error = Some(e);
            return sample;
        }
    };
    sample.value = c.lat_avg_us;
    // Both directions: iterations × size each way.
    let moved = gib((2 * c.bytes * c.iterations) as f64);
    let cpu = |r: &PerftestResult| Some(r.cpu_user_s? + r.cpu_system_s?);
    if moved > 0.0 {
        sample.cpu_client_s_per_gib = cpu(&c).map(|x| x / moved);
        sample.cpu_total_s_per_gib = cpu(&c).zip(cpu(&s)).map(|(a, b)| (a + b) / moved);
    }
    sample.perftest = Some([c, s]);
    sample
}

/// Whether a reference run's failure is perftest's own and transient, so
/// that the round is run once more: it refused to report because its clock
/// sampling was disturbed, or one of its work requests completed in error
/// (`Completion with error`; perftest on rxe under a loaded host, seen as
/// `Failed status 9` with `-q 8`). Ours is never run again: a failed run of
/// ours is a failure of the thing measured.
pub(super) fn reference_failure_is_transient(error: &str) -> bool {
    error.starts_with(PERFTEST_CLOCK_REFUSED)
        || (error.starts_with("perftest client exited") || error.starts_with("perftest server exited"))
            && error.contains("Completion with error")
}

/// One round of the reference tool on a fresh port (`port` is advanced).
/// A perftest run that failed in a transient way of its own
/// ([`reference_failure_is_transient`]) is run once more, and the sample
/// says so in `rerun`.
pub(super) async fn run_reference(
    lab: &Lab,
    opts: &BenchOptions,
    spec: &PairSpec,
    devs: &[DataPath; 2],
    port: &mut u16,
    round: u32,
) -> Sample {
    *port = next_port(*port);
    let mut s = run_perftest(lab, opts, spec, devs, *port, round).await;
    if let Some(first) = s.error.take_if(|e| reference_failure_is_transient(e)) {
        *port = next_port(*port);
        s = run_perftest(lab, opts, spec, devs, *port, round).await;
        s.rerun = Some(format!("the first run failed: {first}"));
        // A second failure is the round's error; the first stays in `rerun`.
    }
    s
}

/// The first port of a bench's perftest runs: random, so that a server
/// left over by an earlier bench (it exits on its own `timeout`) is not in
/// the way.
pub(super) fn first_port() -> u16 {
    18515 + (rand::random::<u16>() % 200) * 16
}

/// A fresh TCP port per run: a server left over by a failed run cannot
/// take the next one's port.
fn next_port(port: u16) -> u16 {
    port.wrapping_add(1).max(18515)
}

/// The reference's command as the record keeps it: the client's, without
/// the round's port.
pub(super) fn reference_command(spec: &PairSpec, devs: &[DataPath; 2]) -> String {
    match &spec.provider {
        Some(provider) => fi_pingpong_command(spec, provider, &devs[1].netdev, None, Some(devs[0].addr)).to_string(),
        None => perftest_command(
            spec,
            &devs[1].device,
            devs[1].ib_port,
            devs[1].perftest_gid,
            None,
            Some(devs[0].addr),
        )
        .to_string(),
    }
}
