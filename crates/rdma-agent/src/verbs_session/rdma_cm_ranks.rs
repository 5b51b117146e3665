//! rdma_cm connection setup of a collective's rank over verbs.
//!
//! Prepare opens the rank's link on the device of its data address (one RC
//! QP per other rank, QP k facing the k-th other rank in rank order, every
//! QP in INIT, buffers registered and receives posted) and a listener on
//! `bind_addr:0`, and publishes the listener's address and port. Run hands
//! the rank every other rank's listener in its QP order. The rank then
//! connects to each lower rank, one after another in rank order, and
//! accepts each higher rank's connect: one rdma_cm connection per pair of
//! ranks, each taking its QP through RTR and RTS with `rdma_init_qp_attr`.
//!
//! This order cannot deadlock: a rank's connects wait only for lower ranks
//! to accept, rank 0 only accepts, and a rank that has made its connects
//! only accepts. A connect request that arrives while its rank is still
//! connecting waits in the listener's queue until its rank accepts it; the
//! connecting side's CM resends the request while it waits.
//!
//! A connect's private data is the run's connect proof, the connecting
//! rank's number (2 bytes, little endian) and its capability blob; the
//! accept answers with the accepting rank's blob. A request without the
//! proof, from a rank that is not higher, or from a rank already connected
//! is refused and logged, and the rank waits on for its peers (see
//! [`crate::session::admission`]); once every QP is connected, any request
//! is refused as it arrives.

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_proto::auth::CONNECT_PROOF_LEN;
use agent_proto::v1::{Endpoint, SideResult};
use sideway::ibverbs::queue_pair::{QueuePairAttribute, QueuePairState};
use tokio::sync::oneshot;

use super::oob_connect::prepared_in_init;
use super::rdma_cm_connect::{
    accept_params, next_cm_event, run_refusing_strangers, trace_cm, unexpected, wait_cm_event,
};
use super::setup::{attach_trace, fill_local_gid, rd_atomic, trace_blob, LOCAL_ACK_TIMEOUT};
use crate::session::admission::Refused;
use crate::session::{blob, next_command, peer_socket_addr, Command, SessionError, SessionSpec, Side};
use crate::trace::now_ns;
use crate::verbs::cm::ConnectParams;
use crate::verbs::{CmEventKind, CmId, EventChannel, RemoteBuf};
use crate::workload::collective::place;
use crate::workload::Workload;

/// Bytes of the connecting rank's number in its private data.
const RANK_LEN: usize = 2;

/// A rank's connect private data: proof, rank, blob.
fn hello(spec: &SessionSpec, rank: usize, exposed: &RemoteBuf) -> Vec<u8> {
    let mut out = spec.proof.as_bytes().to_vec();
    out.extend_from_slice(&(rank as u16).to_le_bytes());
    out.extend_from_slice(&blob::encode(exposed));
    out
}

/// The connecting rank and its blob from a connect's private data whose
/// proof was already checked, or why it is not a rank's.
fn parse_hello(private_data: &[u8]) -> Result<(usize, RemoteBuf), String> {
    let rest = &private_data[CONNECT_PROOF_LEN..];
    if rest.len() < RANK_LEN {
        return Err("its private data has no rank after the proof".into());
    }
    let rank = usize::from(u16::from_le_bytes([rest[0], rest[1]]));
    let peer = blob::decode(&rest[RANK_LEN..])?;
    Ok((rank, peer))
}

/// One rank: prepare and listen, publish the listener, wait for the other
/// ranks' listeners (Run), connect, run.
pub(crate) fn rank(
    spec: &SessionSpec,
    workload: &'static dyn Workload,
    cancel: &Arc<AtomicBool>,
    deadline: Instant,
    cmd_rx: std::sync::mpsc::Receiver<Command>,
    endpoint_tx: &mut Option<oneshot::Sender<Result<Endpoint, SessionError>>>,
) -> Result<SideResult, SessionError> {
    let ip = spec.bind_ip()?;
    let place = place(&spec.params);
    let (me, world) = (place.rank as usize, place.world as usize);
    let (mut side, _) = prepared_in_init(spec, workload, cancel, deadline)?;
    let listen_channel = EventChannel::new()?;
    let listen_id = listen_channel.create_id()?;
    listen_id.bind(SocketAddr::new(ip, 0))?;
    let listen_device = listen_id.device_name()?;
    if listen_device != side.link.device() {
        return Err(SessionError::Setup(format!(
            "rdma_cm binds {ip} to {listen_device}, the data path found {}: name the device with --device",
            side.link.device()
        )));
    }
    listen_id.listen(world as i32 + 3)?;
    let port = listen_id.local_port();
    tracing::info!(%ip, port, rank = me, world, "rank listening (rdma_cm)");
    if let Some(tx) = endpoint_tx.take() {
        let _ = tx.send(Ok(Endpoint {
            address: ip.to_string(),
            port: u32::from(port),
            qps: Vec::new(),
        }));
    }
    let listeners = match next_command(&cmd_rx, || side.check_alive("Run"))? {
        Command::RunCmRanks(listeners, sink) => {
            side.set_progress(sink);
            listeners
        }
        _ => return Err(SessionError::Protocol("wrong command for a collective's rank".into())),
    };
    if listeners.len() != world - 1 {
        return Err(SessionError::Setup(format!(
            "rank {me} of {world} was given {} listeners of other ranks, expected {}",
            listeners.len(),
            world - 1
        )));
    }
    let exposed = side.exposed.map(|b| side.link.remote_buf(b)).unwrap_or_default();
    trace_blob(&mut side, true, &exposed);
    side.peers = vec![RemoteBuf::default(); world - 1];
    let connect_channel = EventChannel::new()?;
    let mut ids = Vec::with_capacity(world - 1);
    let my_hello = hello(spec, me, &exposed);
    // To every lower rank (its QP index is its rank).
    for (k, listener) in listeners.iter().enumerate().take(me) {
        let id = connect_to(
            &mut side,
            spec,
            (cancel, deadline),
            &connect_channel,
            listener,
            k,
            &my_hello,
        )
        .map_err(|e| {
            in_context(
                e,
                &format!("connecting to rank {k} at {}:{}", listener.address, listener.port),
            )
        })?;
        ids.push(id);
    }
    // From every higher rank.
    let mut refused = Refused::default();
    ids.extend(accept_higher(
        &mut side,
        spec,
        (cancel, deadline),
        &listen_channel,
        &exposed,
        &mut refused,
    )?);
    fill_local_gid(&mut side, ip);
    side.peer = side.peers[0];
    side.facts.insert("cm".into(), "rdma_cm".into());
    side.progress(
        "run",
        0,
        0,
        format!(
            "rank {me} of {world}: connected to the other ranks (rdma_cm, {} QPs)",
            side.link.num_qps()
        ),
    );
    side.start_clock();
    let (mut result, late) = run_refusing_strangers(&listen_channel, spec, workload, &mut side);
    refused.extend(late);
    for id in &ids {
        id.disconnect();
    }
    attach_trace(&mut side, &mut result, &spec.id);
    if let Ok(result) = &mut result {
        refused.report(result);
    }
    // Give the DREQs a moment to leave before the ids are destroyed.
    let _ = connect_channel.next_event(Duration::from_millis(100), "DISCONNECTED");
    result
}

/// `e` with what the rank was doing when it failed (`doing`: "connecting
/// to rank 1 at 10.77.0.2:40112"), where the error carries a message.
fn in_context(e: SessionError, doing: &str) -> SessionError {
    match e {
        SessionError::Timeout { what, after } => SessionError::Timeout {
            what: format!("{what}, {doing}"),
            after,
        },
        SessionError::Aborted(m) => SessionError::Aborted(format!("{m}, {doing}")),
        SessionError::Setup(m) => SessionError::Setup(format!("{doing}: {m}")),
        SessionError::Protocol(m) => SessionError::Protocol(format!("{doing}: {m}")),
        other => other,
    }
}

/// rdma_cm's RTS attributes for `id`'s QP, with the ranks' local ACK
/// timeout ([`LOCAL_ACK_TIMEOUT`]) in place of rdma_cm's.
fn rts_attr(id: &CmId) -> Result<QueuePairAttribute, SessionError> {
    let mut rts = id.qp_attr(QueuePairState::ReadyToSend)?;
    rts.setup_timeout(LOCAL_ACK_TIMEOUT);
    Ok(rts)
}

/// Connects QP `k` to the listener of a lower rank: resolve, connect with
/// `hello`, read its blob from the response, RTR, RTS, establish.
fn connect_to(
    side: &mut Side,
    spec: &SessionSpec,
    (cancel, deadline): (&AtomicBool, Instant),
    channel: &Arc<EventChannel>,
    listener: &Endpoint,
    k: usize,
    hello: &[u8],
) -> Result<CmId, SessionError> {
    let timeout = spec.timeout();
    let ip = spec.bind_ip()?;
    let dst = peer_socket_addr(listener)?;
    let step_timeout = Duration::from_secs(5).min(timeout);
    let id = channel.create_id()?;
    id.resolve_addr(Some(SocketAddr::new(ip, 0)), dst, step_timeout)?;
    let ev = wait_cm_event(channel, CmEventKind::AddrResolved, cancel, deadline, timeout)?;
    trace_cm(side, now_ns(), k, &ev);
    id.resolve_route(step_timeout)?;
    let ev = wait_cm_event(channel, CmEventKind::RouteResolved, cancel, deadline, timeout)?;
    trace_cm(side, now_ns(), k, &ev);
    let device = id.device_name()?;
    if device != side.link.device() {
        return Err(SessionError::Setup(format!(
            "the route to {dst} leaves through {device}, not {}",
            side.link.device()
        )));
    }
    id.connect(&ConnectParams {
        qp_num: side.link.qp_num_at(k),
        private_data: hello,
        initiator_depth: rd_atomic(&side.link),
        responder_resources: rd_atomic(&side.link),
    })?;
    let response = wait_cm_event(channel, CmEventKind::ConnectResponse, cancel, deadline, timeout)?;
    trace_cm(side, now_ns(), k, &response);
    let peer = blob::decode(&response.private_data).map_err(SessionError::Protocol)?;
    trace_blob(side, false, &peer);
    side.peers[k] = peer;
    side.link
        .modify_qp_at(k, &id.qp_attr(QueuePairState::ReadyToReceive)?, "RTR")?;
    side.link.modify_qp_at(k, &rts_attr(&id)?, "RTS")?;
    id.establish()?;
    Ok(id)
}

/// Accepts a connect from every rank above `me`, each onto the QP that
/// faces it, until all are established. A request that is not a higher
/// rank's first is rejected and counted in `refused`.
fn accept_higher(
    side: &mut Side,
    spec: &SessionSpec,
    (cancel, deadline): (&AtomicBool, Instant),
    channel: &Arc<EventChannel>,
    exposed: &RemoteBuf,
    refused: &mut Refused,
) -> Result<Vec<CmId>, SessionError> {
    let place = place(&spec.params);
    let (me, world) = (place.rank as usize, place.world as usize);
    let higher = world - 1 - me;
    let mut ids: Vec<CmId> = Vec::with_capacity(higher);
    let mut connected = vec![false; world];
    let mut established = 0;
    // The QP each accepted connection's id stands for, for its ESTABLISHED.
    let mut qp_of: Vec<(usize, usize)> = Vec::with_capacity(higher);
    let reply = blob::encode(exposed);
    while established < higher {
        let want = if ids.len() < higher {
            CmEventKind::ConnectRequest
        } else {
            CmEventKind::Established
        };
        let mut ev = next_cm_event(channel, want, cancel, deadline, spec.timeout()).map_err(|e| {
            let waiting_for = (me + 1..world)
                .filter(|&p| !connected[p])
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            in_context(e, &format!("the connects of ranks {waiting_for}"))
        })?;
        match ev.kind {
            CmEventKind::ConnectRequest => {
                let at = now_ns();
                let new_id = ev
                    .new_id
                    .take()
                    .ok_or_else(|| SessionError::Protocol("CONNECT_REQUEST without a new id".into()))?;
                let peer_addr = new_id
                    .peer_addr()
                    .map_or("an unknown address".into(), |a| a.to_string());
                if !spec.proof.admits(&ev.private_data) {
                    new_id.reject();
                    refused.refuse(
                        "rdma_cm",
                        &peer_addr,
                        "its private data does not open with this run's connect proof",
                    );
                    continue;
                }
                let (p, peer) = match parse_hello(&ev.private_data) {
                    Ok((p, _)) if p <= me || p >= world || connected[p] => {
                        new_id.reject();
                        let why = format!("it names rank {p}, which does not connect to rank {me} now");
                        refused.refuse("rdma_cm", &peer_addr, &why);
                        continue;
                    }
                    Ok(found) => found,
                    Err(why) => {
                        new_id.reject();
                        refused.refuse("rdma_cm", &peer_addr, &why);
                        continue;
                    }
                };
                let k = p - 1;
                trace_cm(side, at, k, &ev);
                let moved = (|| -> Result<(), SessionError> {
                    let device = new_id.device_name()?;
                    if device != side.link.device() {
                        return Err(SessionError::Setup(format!(
                            "rank {p}'s connect arrived on {device}, not {}",
                            side.link.device()
                        )));
                    }
                    side.link
                        .modify_qp_at(k, &new_id.qp_attr(QueuePairState::ReadyToReceive)?, "RTR")?;
                    side.link.modify_qp_at(k, &rts_attr(&new_id)?, "RTS")?;
                    new_id.accept(&accept_params(&ev, &side.link, k, &reply))?;
                    Ok(())
                })();
                if let Err(e) = moved {
                    new_id.reject();
                    return Err(e);
                }
                trace_blob(side, false, &peer);
                side.peers[k] = peer;
                connected[p] = true;
                qp_of.push((new_id.key(), k));
                ids.push(new_id);
            }
            CmEventKind::Established => {
                let k = qp_of.iter().find(|(key, _)| *key == ev.id_key).map_or(0, |(_, k)| *k);
                trace_cm(side, now_ns(), k, &ev);
                established += 1;
            }
            _ => return Err(unexpected(&ev, want)),
        }
    }
    debug_assert_eq!(ids.len(), higher);
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_a_ranks_hello_fits_a_connect_request_and_reads_back() {
        let spec = SessionSpec {
            id: "s".into(),
            proof: agent_proto::auth::AgentSecret::generate().connect_proof(b"run"),
            params: agent_proto::v1::WorkloadParams::default(),
            role: agent_proto::v1::Role::Client,
            bind_addr: "10.0.0.1".into(),
        };
        let buf = RemoteBuf {
            addr: 0x7f00_1234_5000,
            rkey: 0x1_2345,
            len: 1 << 20,
        };
        let data = hello(&spec, 11, &buf);
        // RoCE and InfiniBand carry 56 bytes of private data in a connect request.
        assert!(data.len() <= 56, "{} bytes", data.len());
        assert!(spec.proof.admits(&data));
        let (rank, peer) = parse_hello(&data).unwrap();
        assert_eq!(
            (rank, peer.addr, peer.rkey, peer.len),
            (11, buf.addr, buf.rkey, buf.len)
        );
        assert!(parse_hello(&data[..CONNECT_PROOF_LEN + 1]).is_err());
    }
}
