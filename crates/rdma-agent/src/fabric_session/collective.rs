//! A collective's rank over a libfabric RDM endpoint (`labctl run allreduce
//! --provider P`): the same algorithms, barrier and checks as the verbs
//! ranks ([`crate::workload::collective`]), with RMA writes carrying remote
//! CQ data (`fi_writemsg` + `FI_REMOTE_CQ_DATA`) in place of WRITE_WITH_IMM.
//!
//! - Prepare: opens `params.provider` bound to this node's data address,
//!   registers one region (the input, then the exposed part the other ranks
//!   write into) and returns its fabric address and the exposed part.
//! - Run: carries every other rank's address and region (`fabric_peers`, in
//!   rank order); the rank inserts them into its address vector and runs.
//!
//! An RDM endpoint is connectionless: no QP per peer, and a remote write's
//! completion does not say who wrote, so each immediate names its sender.
//! Nor need one peer's writes complete in order, so the rank looks for the
//! awaited immediate among those that arrived.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Instant;

use agent_proto::v1::{CmMode, Endpoint, FabricEndpoint, FabricRegion, Role, SideResult};
use fabric::{Access, Completed, MrHandle, OpId, PeerAddr, RemoteMr};
use tokio::sync::oneshot;
use workload_catalogue::Collective;

use super::common::{base_facts, cpu_usage, endpoints, left, open, provider, reporter};
use crate::cpu::CpuTimes;
use crate::fabric_trace::FabricTrace;
use crate::session::{finish_side, next_command, Command, EndpointSender, SessionError, SessionHandle, SessionSpec};
use crate::validate::ValidationError;
use crate::workload::collective::transport::{Event, Region, Slice, Transport};
use crate::workload::collective::{peer_at, place, region_lens, run_ranks};

/// Starts a rank's session: the receiver yields its endpoints once its
/// region is registered; the thread then waits for Run's peers.
#[allow(clippy::type_complexity)]
pub fn spawn(
    spec: SessionSpec,
    op: Collective,
) -> Result<
    (
        SessionHandle,
        oneshot::Receiver<Result<(Endpoint, FabricEndpoint), SessionError>>,
    ),
    SessionError,
> {
    let (handle, ends) = SessionHandle::new(Role::Client, CmMode::Oob);
    let (ready_tx, ready_rx) = oneshot::channel();
    let span = tracing::info_span!(parent: None, "session", id = %spec.id, role = "rank",
        workload = %spec.params.workload, provider = provider(&spec.params));
    let name = format!("rank-{}", spec.id.chars().take(8).collect::<String>());
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            let _enter = span.enter();
            let mut ready = Some(ready_tx);
            let trace = FabricTrace::for_run(&spec.params);
            let mut outcome = rank(&spec, op, trace.as_ref(), &ends.cancel, &ends.commands, &mut ready);
            if let Some(trace) = &trace {
                trace.finish(&mut outcome, &spec.id);
            }
            finish_side(outcome, ready, ends.result);
        })
        .map_err(|e| SessionError::Setup(format!("spawning the session thread: {e}")))?;
    Ok((handle, ready_rx))
}

/// One rank, from opening its endpoint to its result.
fn rank(
    spec: &SessionSpec,
    op: Collective,
    trace: Option<&FabricTrace>,
    cancel: &Arc<AtomicBool>,
    commands: &Receiver<Command>,
    ready: &mut EndpointSender<(Endpoint, FabricEndpoint)>,
) -> Result<SideResult, SessionError> {
    let prepared_until = Instant::now() + spec.timeout();
    let mut ep = open(spec, cancel, trace)?;
    let (input_len, exposed_len) = region_lens(op, &spec.params);
    let mr = ep.register(input_len + exposed_len, Access::Remote)?;
    let whole = ep.remote_mr(mr)?;
    let (endpoint, mut fabric) = endpoints(spec, &ep)?;
    fabric.region = Some(FabricRegion {
        addr: whole.addr + input_len as u64,
        size: exposed_len as u64,
        key: whole.key,
    });
    if let Some(tx) = ready.take() {
        let _ = tx.send(Ok((endpoint, fabric)));
    }

    let alive = || {
        if cancel.load(Ordering::Relaxed) {
            return Err(SessionError::Aborted("while waiting for Run".into()));
        }
        if Instant::now() >= prepared_until {
            return Err(SessionError::Timeout {
                what: "Run (the other ranks' endpoints)".into(),
                after: spec.timeout(),
            });
        }
        Ok(())
    };
    let (peers, sink) = match next_command(commands, alive)? {
        Command::RunRanks(peers, sink) => (peers, sink),
        _ => return Err(SessionError::Protocol("wrong command for a libfabric rank".into())),
    };
    let place = place(&spec.params);
    if peers.len() + 1 != place.world as usize {
        return Err(SessionError::Setup(format!(
            "rank {} of {} got {} fabric peers, expected {}",
            place.rank,
            place.world,
            peers.len(),
            place.world - 1
        )));
    }
    let mut targets = Vec::with_capacity(peers.len());
    for peer in &peers {
        let region = peer.region.ok_or(ValidationError::Missing {
            field: "fabric_peers.region",
        })?;
        let addr = ep.insert_peer(&peer.fabric_addr)?;
        targets.push((
            addr,
            RemoteMr {
                addr: region.addr,
                size: region.size,
                key: region.key,
            },
        ));
    }

    let cpu_start = CpuTimes::thread_now();
    let started = Instant::now();
    let mut report = reporter(sink);
    let mut ranks = FabricRanks {
        ep: &mut ep,
        mr,
        input_len,
        rank: place.rank as usize,
        peers: targets,
        in_flight: HashMap::new(),
        deadline: started + spec.timeout(),
        facts: Vec::new(),
        report: &mut report,
    };
    let outcome = run_ranks(&mut ranks, op, &spec.params)?;
    let noted = std::mem::take(&mut ranks.facts);
    let mut result = SideResult {
        role: Role::Client as i32,
        elapsed_s: started.elapsed().as_secs_f64(),
        cpu: cpu_usage(&CpuTimes::thread_now().since(&cpu_start)),
        facts: base_facts(&ep).into_iter().chain(noted).collect(),
        ..Default::default()
    };
    // The rank busy-polls its CQ (what drives tcp/rxm's and EFA's progress).
    result.facts.insert("completion".into(), "poll".into());
    outcome.into_result(&mut result, op, &spec.params);
    Ok(result)
}

/// A rank's endpoint and what it knows of the others.
struct FabricRanks<'a, R: FnMut(&str, u64, u64, String)> {
    ep: &'a mut fabric::Endpoint,
    /// The one region: input, then the exposed part.
    mr: MrHandle,
    input_len: usize,
    rank: usize,
    /// Every other rank's address and exposed region, in rank order.
    peers: Vec<(PeerAddr, RemoteMr)>,
    /// Each posted write's peer index.
    in_flight: HashMap<OpId, usize>,
    deadline: Instant,
    facts: Vec<(String, String)>,
    report: &'a mut R,
}

impl<R: FnMut(&str, u64, u64, String)> Transport for FabricRanks<'_, R> {
    fn post_write(&mut self, to: usize, src: Slice, offset: u64, imm: u32) -> Result<(), SessionError> {
        let at = match src.region {
            Region::Input => src.offset,
            Region::Exposed => self.input_len + src.offset,
        };
        let (peer, remote) = self.peers[to];
        let id = self
            .ep
            .write(peer, self.mr, at, src.len, &remote, offset, Some(u64::from(imm)))?;
        self.in_flight.insert(id, to);
        Ok(())
    }

    fn next_event(&mut self) -> Result<Event, SessionError> {
        match self.ep.wait_event(left(self.deadline))? {
            Completed::RemoteWrite(data) => Ok(Event::Arrived {
                from: None,
                imm: data as u32,
            }),
            Completed::Op(id, outcome) => {
                let to = self.in_flight.remove(&id).ok_or_else(|| {
                    SessionError::Protocol("the completion of an operation this rank did not post".into())
                })?;
                outcome.map_err(|e| {
                    SessionError::Aborted(format!("libfabric: {e}, writing to rank {}", peer_at(self.rank, to)))
                })?;
                Ok(Event::Sent { to })
            }
        }
    }

    fn in_order(&self) -> bool {
        false
    }

    fn regions_mut(&mut self) -> (&mut [u8], &mut [u8]) {
        let bytes = self
            .ep
            .shared_bytes_mut(self.mr)
            .expect("the rank's region is registered");
        bytes.split_at_mut(self.input_len)
    }

    fn note(&mut self, key: &str, value: String) {
        self.facts.push((key.to_string(), value));
    }

    fn progress(&mut self, bytes: u64, ops: u64, message: String) {
        (self.report)("run", bytes, ops, message);
    }
}
