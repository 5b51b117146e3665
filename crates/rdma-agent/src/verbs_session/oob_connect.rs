//! Out-of-band connection setup of a verbs side: both sides are prepared
//! (QP in INIT, endpoint returned with QPN, PSN, GID, MTU and the exposed
//! buffer); the server gets the client's endpoint through Connect and the
//! client gets the server's through Run, and each takes its QPs to RTR/RTS
//! with them, pairing QPs by position.
//!
//! RoCE peers are addressed by GID (GRH); InfiniBand peers by LID within
//! one subnet (no GRH): routed InfiniBand and mixed link layers are refused
//! (rdma_cm handles those).

use std::net::IpAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use agent_proto::data_path::{self, LinkLayer};
use agent_proto::v1::{Endpoint, QpEndpoint, Role, SideResult};
use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::{QueuePairAttribute, QueuePairState};
use sideway::ibverbs::AccessFlags;
use tokio::sync::oneshot;

use super::setup::{
    apply_corrupt_rkey, attach_trace, link_config, new_side, qp_psn, rd_atomic, resolve_completion, trace_blob,
    LOCAL_ACK_TIMEOUT,
};
use crate::session::{next_command, Command, SessionError, SessionSpec, Side};
use crate::verbs::{Link, RemoteBuf};
use crate::workload::Workload;

/// Where an oob side lives: device, port, source GID and, on InfiniBand,
/// the port's LID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Local {
    device: String,
    port: u8,
    sgid_index: u32,
    gid: [u8; 16],
    infiniband: bool,
    /// The port's LID on InfiniBand (0 on Ethernet, and on an IB port the
    /// subnet manager has not configured).
    lid: u16,
    /// The P_Key table index the QPs use: 0 (the default partition), or on
    /// InfiniBand that of the partition child that holds the data address.
    pkey_index: u16,
}

/// Where the oob side lives: the data path of its bind address (the RoCE v2
/// GID on Ethernet, the port whose IPoIB netdev holds it on InfiniBand), or
/// the GID index the run names.
fn location(spec: &SessionSpec) -> Result<Local, SessionError> {
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
                IpAddr::V4(v4) => crate::node_info::find_data_path(v4, None)
                    .map(|l| l.device)
                    .ok_or_else(|| SessionError::Setup(format!("no RDMA device has {}", data_path::wanted(v4))))?,
                IpAddr::V6(_) => return Err(SessionError::Setup("oob over IPv6 needs params.device".into())),
            },
        };
        let index = spec.params.gid_index as u32;
        let gid = crate::node_info::gid_at(&device, port, index)
            .ok_or_else(|| SessionError::Setup(format!("{device} port {port} has no GID at index {index}")))?;
        let (infiniband, lid) = crate::node_info::port_addressing(&device, port);
        return Ok(Local {
            device,
            port,
            sgid_index: index,
            gid,
            infiniband,
            lid,
            pkey_index: 0,
        });
    }
    let IpAddr::V4(v4) = ip else {
        return Err(SessionError::Setup(
            "automatic GID selection needs an IPv4 bind_addr".into(),
        ));
    };
    let found = crate::node_info::find_data_path(v4, wanted_device).ok_or_else(|| {
        SessionError::Setup(format!(
            "no RDMA device{} has {} (is rxe set up on the data NIC, or IPoIB's address on the IB port?)",
            wanted_device.map(|d| format!(" named {d}")).unwrap_or_default(),
            data_path::wanted(v4)
        ))
    })?;
    let gid = found
        .gid_bytes()
        .ok_or_else(|| SessionError::Setup(format!("{} reports GID `{}`", found.device, found.gid)))?;
    let infiniband = found.link_layer == LinkLayer::InfiniBand;
    // A partition child (ib0.8001) puts the data address in another
    // partition than the port's default one; the QPs must be in it too.
    let pkey_index = if infiniband && !found.netdev.is_empty() {
        crate::node_info::ipoib_pkey_index(&found.device, found.port as u8, &found.netdev)
            .map_err(|e| SessionError::Setup(format!("oob on InfiniBand: {e}; use --cm rdma_cm")))?
    } else {
        0
    };
    Ok(Local {
        infiniband,
        pkey_index,
        lid: found.lid as u16,
        device: found.device,
        port: found.port as u8,
        sgid_index: found.gid_index,
        gid,
    })
}

/// How a QP addresses its peer at RTR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PeerAddress {
    /// RoCE: a GRH with the peer's GID from our source GID index.
    Global { dgid: [u8; 16], sgid_index: u8 },
    /// InfiniBand within one subnet: the peer port's LID, no GRH.
    Lid { dlid: u16 },
}

/// The peer address for RTR from our location and the peer's endpoint. On
/// InfiniBand, oob addresses peers by LID within one subnet; a peer on
/// another subnet (routed InfiniBand, which needs a GRH and the router's
/// LID) or on the other link layer is refused with what to do instead.
pub(crate) fn peer_address(local: &Local, remote: &QpEndpoint) -> Result<PeerAddress, String> {
    let dgid: [u8; 16] = remote
        .gid
        .as_slice()
        .try_into()
        .map_err(|_| format!("peer GID is {} bytes, expected 16", remote.gid.len()))?;
    let peer_gid = std::net::Ipv6Addr::from(dgid);
    if !local.infiniband {
        if remote.lid != 0 {
            return Err(format!(
                "the peer is on InfiniBand (LID {}, GID {peer_gid}) and this side on Ethernet ({} port {}): \
                 oob needs both sides on the same link layer",
                remote.lid, local.device, local.port
            ));
        }
        return Ok(PeerAddress::Global {
            dgid,
            sgid_index: local.sgid_index as u8,
        });
    }
    if local.lid == 0 {
        return Err(format!(
            "{} port {} is InfiniBand but has no LID (is a subnet manager running on the fabric?)",
            local.device, local.port
        ));
    }
    if remote.lid == 0 {
        return Err(format!(
            "the peer has no LID (GID {peer_gid}: Ethernet/RoCE, or an IB port without a subnet manager) \
             and this side is on InfiniBand ({} port {}): oob needs both sides on one InfiniBand subnet",
            local.device, local.port
        ));
    }
    if dgid[..8] != local.gid[..8] {
        return Err(format!(
            "the peer's GID {peer_gid} is in another InfiniBand subnet than this side's {}: --cm oob \
             addresses peers by LID within one subnet; routed InfiniBand is not supported there (use --cm rdma_cm)",
            std::net::Ipv6Addr::from(local.gid)
        ));
    }
    let dlid = u16::try_from(remote.lid).map_err(|_| format!("peer LID {} is not a 16-bit LID", remote.lid))?;
    Ok(PeerAddress::Lid { dlid })
}

/// The address handle attributes of `addr` out of `port`.
fn address_handle(port: u8, addr: &PeerAddress) -> AddressHandleAttribute {
    let mut ah = AddressHandleAttribute::new();
    ah.setup_port(port);
    match addr {
        PeerAddress::Global { dgid, sgid_index } => {
            ah.setup_grh(&Gid::from(std::net::Ipv6Addr::from(*dgid)), 0, *sgid_index, 64, 0);
        }
        PeerAddress::Lid { dlid } => {
            ah.setup_dest_lid(*dlid);
        }
    }
    ah
}

/// A verbs side on the device of its data path, every QP in INIT and the
/// workload prepared (buffers registered, receives posted): what an oob
/// side and a collective's rank over rdma_cm publish their endpoint from.
pub(crate) fn prepared_in_init(
    spec: &SessionSpec,
    workload: &'static dyn Workload,
    cancel: &Arc<AtomicBool>,
    deadline: Instant,
) -> Result<(Side, Local), SessionError> {
    let local = location(spec)?;
    let port = local.port;
    let spec = &resolve_completion(spec, workload, &local.device);
    let link = Link::open(&link_config(spec, workload, local.device.clone()))?;
    let mut side = new_side(spec, link, cancel, deadline, None);
    side.location.port = port;
    side.location.sgid_index = local.sgid_index as u8;
    side.location.gid = local.gid;
    side.location.lid = local.lid;
    let mut init = QueuePairAttribute::new();
    init.setup_state(QueuePairState::Init)
        .setup_pkey_index(local.pkey_index)
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
    Ok((side, local))
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
    let (mut side, local) = prepared_in_init(spec, workload, cancel, deadline)?;
    let (port, gid) = (local.port, local.gid);
    let mtu = crate::verbs::link::port_active_mtu(side.link.context(), port).unwrap_or(1024);
    let exposed = side.exposed.map(|b| side.link.remote_buf(b)).unwrap_or_default();
    // One entry per QP, in QP order; the peer pairs them up by position.
    let qps = (0..side.link.num_qps())
        .map(|i| QpEndpoint {
            qpn: side.link.qp_num_at(i),
            psn: qp_psn(side.location.psn, i),
            gid: gid.to_vec(),
            lid: local.lid.into(),
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
    let waiting_for = if role == Role::Server { "Connect" } else { "Run" };
    let (peer, reply) = match next_command(&cmd_rx, || side.check_alive(waiting_for))? {
        Command::Connect(peer, reply) if role == Role::Server => (peer, Some(reply)),
        Command::Run(peer, sink) if role == Role::Client => {
            side.set_progress(sink);
            (peer, None)
        }
        _ => return Err(SessionError::Protocol(format!("wrong command for a {role:?} session"))),
    };
    if let Some(first) = peer.qps.first().filter(|q| q.rkey != 0 || q.length != 0) {
        let received = RemoteBuf {
            addr: first.addr,
            rkey: first.rkey,
            len: first.length,
        };
        trace_blob(&mut side, false, &received);
    }
    let connected = connect(&mut side, &local, &peer, mtu);
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
            match side.params.collective {
                Some(place) => format!(
                    "rank {} of {}: connected to the other ranks ({} QPs)",
                    place.rank,
                    place.world,
                    side.link.num_qps()
                ),
                None => format!(
                    "connected (oob); server buffer {:#x} rkey {:#x}",
                    side.peer.addr, side.peer.rkey
                ),
            },
        );
    }
    side.start_clock();
    let mut result = workload.run(&mut side);
    attach_trace(&mut side, &mut result, &spec.id);
    result
}

/// RTR and RTS of every QP with the peer's QP parameters (paired by position).
fn connect(side: &mut Side, local: &Local, peer: &Endpoint, local_mtu: u32) -> Result<(), SessionError> {
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
        let addr = peer_address(local, remote).map_err(SessionError::Setup)?;
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
        let ah = address_handle(side.location.port, &addr);
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
            .setup_timeout(LOCAL_ACK_TIMEOUT)
            .setup_retry_cnt(crate::verbs::TRANSPORT_RETRY_COUNT)
            .setup_rnr_retry(7)
            .setup_max_read_atomic(rd_atomic(&side.link));
        side.link.modify_qp_at(i, &rts, "RTS")?;
        side.peers.push(RemoteBuf {
            addr: remote.addr,
            rkey: remote.rkey,
            len: remote.length,
        });
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

#[cfg(test)]
#[path = "oob_connect_tests.rs"]
mod tests;
