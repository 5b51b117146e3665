//! Out-of-band connection setup of a verbs side: both sides are prepared
//! (QP in INIT, endpoint returned with QPN, PSN, GID, MTU and the exposed
//! buffer); the server gets the client's endpoint through Connect and the
//! client gets the server's through Run, and each takes its QPs to RTR/RTS
//! with them, pairing QPs by position.

use std::net::IpAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_proto::v1::{Endpoint, QpEndpoint, Role, SideResult};
use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::{QueuePairAttribute, QueuePairState};
use sideway::ibverbs::AccessFlags;
use tokio::sync::oneshot;

use super::setup::{
    apply_corrupt_rkey, attach_trace, link_config, new_side, qp_psn, rd_atomic, resolve_completion, trace_blob,
};
use super::side::Side;
use super::{Command, SessionError, SessionSpec};
use crate::verbs::{Link, RemoteBuf};
use crate::workload::Workload;

/// Where the oob side lives: its device, port and source GID.
fn location(spec: &SessionSpec) -> Result<(String, u8, u32, [u8; 16]), SessionError> {
    let ip = spec.bind_ip()?;
    let port = if spec.params.ib_port == 0 {
        1
    } else {
        spec.params.ib_port as u8
    };
    let wanted_device = (!spec.params.device.is_empty()).then_some(spec.params.device.as_str());
    if spec.params.gid_index >= 0 {
        let device = match wanted_device {
            Some(d) => d.to_string(),
            None => match ip {
                IpAddr::V4(v4) => crate::node_info::find_ipv4_gid(v4, None)
                    .map(|l| l.device)
                    .ok_or_else(|| SessionError::Setup(format!("no RDMA device has a RoCE v2 GID for {ip}")))?,
                IpAddr::V6(_) => return Err(SessionError::Setup("oob over IPv6 needs params.device".into())),
            },
        };
        let index = spec.params.gid_index as u32;
        let gid = crate::node_info::gid_at(&device, port, index)
            .ok_or_else(|| SessionError::Setup(format!("{device} port {port} has no GID at index {index}")))?;
        return Ok((device, port, index, gid));
    }
    let IpAddr::V4(v4) = ip else {
        return Err(SessionError::Setup(
            "automatic GID selection needs an IPv4 bind_addr".into(),
        ));
    };
    let loc = crate::node_info::find_ipv4_gid(v4, wanted_device).ok_or_else(|| {
        SessionError::Setup(format!(
            "no RDMA device{} has the RoCE v2 GID ::ffff:{v4} (is rxe set up on the data NIC?)",
            wanted_device.map(|d| format!(" named {d}")).unwrap_or_default()
        ))
    })?;
    Ok((loc.device, loc.port, loc.index, loc.gid))
}

/// One side: prepare, publish the endpoint, wait for the peer's, connect, run.
pub(crate) fn side(
    spec: &SessionSpec,
    role: Role,
    workload: &'static dyn Workload,
    cancel: &Arc<AtomicBool>,
    deadline: Instant,
    cmd_rx: std::sync::mpsc::Receiver<Command>,
    endpoint_tx: &mut Option<oneshot::Sender<Result<Endpoint, SessionError>>>,
) -> Result<SideResult, SessionError> {
    let (device, port, sgid_index, gid) = location(spec)?;
    let spec = &resolve_completion(spec, workload, &device);
    let link = Link::open(&link_config(spec, workload, device))?;
    let mut side = new_side(spec, link, cancel, deadline, None);
    side.location.port = port;
    side.location.sgid_index = sgid_index as u8;
    side.location.gid = gid;
    let mut init = QueuePairAttribute::new();
    init.setup_state(QueuePairState::Init)
        .setup_pkey_index(0)
        .setup_port(port)
        .setup_access_flags(
            AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead | AccessFlags::RemoteAtomic,
        );
    for i in 0..side.link.num_qps() {
        side.link.modify_qp_at(i, &init, "INIT")?;
    }
    workload.prepare(&mut side)?;
    for i in 1..side.link.num_qps() {
        workload.qp_in_init(&mut side, i)?;
    }
    let mtu = crate::verbs::link::port_active_mtu(side.link.context(), port).unwrap_or(1024);
    let exposed = side.exposed.map(|b| side.link.remote_buf(b)).unwrap_or_default();
    // One entry per QP, in QP order; the peer pairs them up by position.
    let qps = (0..side.link.num_qps())
        .map(|i| QpEndpoint {
            qpn: side.link.qp_num_at(i),
            psn: qp_psn(side.location.psn, i),
            gid: gid.to_vec(),
            lid: 0,
            mtu,
            addr: exposed.addr,
            rkey: exposed.rkey,
            length: exposed.len,
        })
        .collect();
    if side.exposed.is_some() {
        // The endpoint carries the blob oob mode's peer reads (cm mode: private data).
        trace_blob(&mut side, true, &exposed);
    }
    if let Some(tx) = endpoint_tx.take() {
        let _ = tx.send(Ok(Endpoint {
            address: spec.bind_ip()?.to_string(),
            port: 0,
            qps,
        }));
    }
    // Wait for the peer's endpoint: Connect on the server, Run on the client.
    let (peer, reply) = loop {
        side.check_alive(if role == Role::Server { "Connect" } else { "Run" })?;
        match cmd_rx.recv_timeout(Duration::from_millis(100)) {
            Ok(Command::Connect(peer, reply)) if role == Role::Server => break (peer, Some(reply)),
            Ok(Command::Run(peer, sink)) if role == Role::Client => {
                side.set_progress(sink);
                break (peer, None);
            }
            Ok(_) => return Err(SessionError::Protocol(format!("wrong command for a {role:?} session"))),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(SessionError::Aborted("session dropped by the service".into()))
            }
        }
    };
    if let Some(first) = peer.qps.first().filter(|q| q.rkey != 0 || q.length != 0) {
        let received = RemoteBuf {
            addr: first.addr,
            rkey: first.rkey,
            len: first.length,
        };
        trace_blob(&mut side, false, &received);
    }
    let connected = connect(&mut side, &peer, mtu);
    if let Some(reply) = reply {
        let _ = reply.send(
            connected
                .as_ref()
                .map(|_| ())
                .map_err(|e| SessionError::Setup(e.to_string())),
        );
    }
    connected?;
    if role == Role::Client {
        apply_corrupt_rkey(&mut side);
        side.progress(
            "run",
            0,
            0,
            format!(
                "connected (oob); server buffer {:#x} rkey {:#x}",
                side.peer.addr, side.peer.rkey
            ),
        );
    }
    side.start_clock();
    let mut result = workload.run(&mut side);
    attach_trace(&mut side, &mut result, &spec.id);
    result
}

/// RTR and RTS of every QP with the peer's QP parameters (paired by position).
fn connect(side: &mut Side, peer: &Endpoint, local_mtu: u32) -> Result<(), SessionError> {
    let ours = side.link.num_qps();
    if peer.qps.len() != ours {
        return Err(SessionError::Setup(if peer.qps.is_empty() {
            "peer endpoint has no QP (was it prepared with cm=OOB?)".to_string()
        } else {
            format!(
                "peer endpoint has {} QPs, this side has {ours} (were both sides prepared with the same num_qps?)",
                peer.qps.len()
            )
        }));
    }
    for (i, remote) in peer.qps.iter().enumerate() {
        let dgid: [u8; 16] = remote
            .gid
            .as_slice()
            .try_into()
            .map_err(|_| SessionError::Setup(format!("peer GID is {} bytes, expected 16", remote.gid.len())))?;
        let mtu_bytes = if remote.mtu == 0 {
            local_mtu
        } else {
            local_mtu.min(remote.mtu)
        };
        let path_mtu = match mtu_bytes {
            4096.. => Mtu::Mtu4096,
            2048.. => Mtu::Mtu2048,
            1024.. => Mtu::Mtu1024,
            512.. => Mtu::Mtu512,
            _ => Mtu::Mtu256,
        };
        let mut ah = AddressHandleAttribute::new();
        ah.setup_port(side.location.port).setup_grh(
            &Gid::from(std::net::Ipv6Addr::from(dgid)),
            0,
            side.location.sgid_index,
            64,
            0,
        );
        let mut rtr = QueuePairAttribute::new();
        rtr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(path_mtu)
            .setup_dest_qp_num(remote.qpn)
            .setup_rq_psn(remote.psn)
            .setup_max_dest_read_atomic(rd_atomic(&side.link))
            .setup_min_rnr_timer(12)
            .setup_address_vector(&ah);
        side.link.modify_qp_at(i, &rtr, "RTR")?;
        let mut rts = QueuePairAttribute::new();
        rts.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(qp_psn(side.location.psn, i))
            .setup_timeout(14)
            .setup_retry_cnt(crate::verbs::TRANSPORT_RETRY_COUNT)
            .setup_rnr_retry(7)
            .setup_max_read_atomic(rd_atomic(&side.link));
        side.link.modify_qp_at(i, &rts, "RTS")?;
        if i == 0 {
            side.peer = RemoteBuf {
                addr: remote.addr,
                rkey: remote.rkey,
                len: remote.length,
            };
            side.facts.insert("path_mtu".into(), mtu_bytes.to_string());
            side.facts.insert("peer_qpn".into(), remote.qpn.to_string());
        }
    }
    Ok(())
}
