//! What every libfabric session shares: the workloads' kinds and their
//! request checks, a run's sizes and stop rule, opening the endpoint, the
//! server's announcement, the progress reporter and the results.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_proto::v1::{Endpoint, FabricEndpoint, Progress, Role, SideResult, SizePoint, WorkloadParams};
use fabric::endpoint::MSG_SLOT_SIZE;
use fabric::perf::{Stop, TARGET_MAX};
use fabric::write::{scatter_pages, RandomFill, MAX_FILL_PAGES, MR_COUNT, MR_SIZE};
use fabric::Hints;
use tokio::sync::oneshot;

use crate::cpu::CpuTimes;
use crate::fabric_trace::FabricTrace;
use crate::plan::{self, Plan};
use crate::session::admission::Refused;
use crate::session::{ProgressSink, SessionError, SessionSpec};
use crate::validate::{OwnCheck, ValidationError};

/// The libfabric workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `fabric-write`: RandomFill pages, every byte verified.
    Write,
    /// `fabric-bw`: write bandwidth, as write-bw.
    Bw,
    /// `fabric-lat`: message ping-pong latency, as send-lat.
    Lat,
}

impl Kind {
    /// Every libfabric workload.
    pub const ALL: [Kind; 3] = [Kind::Write, Kind::Bw, Kind::Lat];

    /// The registry name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Write => "fabric-write",
            Kind::Bw => "fabric-bw",
            Kind::Lat => "fabric-lat",
        }
    }

    /// The workload's own request checks: fabric-write's pages fit its MRs;
    /// a fabric-bw write fits the server's 16 MiB target; a fabric-lat ping
    /// fits one message slot. (fabric-bw's server checks each slot's
    /// sequence number, so a lost write shows; the others check the bytes.)
    pub fn own_check(self) -> OwnCheck {
        match self {
            Kind::Write => |params, _| validate_write(params),
            Kind::Bw => |params, _| {
                check_largest(
                    params,
                    TARGET_MAX as u64,
                    "1 ..= 16777216 (fabric-bw: one write fits the server's 16 MiB target)",
                )
            },
            Kind::Lat => |params, _| {
                check_largest(
                    params,
                    MSG_SLOT_SIZE as u64,
                    "1 ..= 8192 (fabric-lat: a ping is one message of at most 8 KiB)",
                )
            },
        }
    }
}

/// The provider when `params.provider` is empty.
pub const DEFAULT_PROVIDER: &str = "tcp;ofi_rxm";

/// Largest of the server's two staging MRs (one batch of writes each: one is
/// generated while the other's writes are in flight).
pub(super) const STAGING_MAX: usize = 2 << 20;

/// The provider a session uses.
pub fn provider(params: &WorkloadParams) -> &str {
    if params.provider.is_empty() {
        DEFAULT_PROVIDER
    } else {
        &params.provider
    }
}

/// `size` against `limit` (a sweep instead stops at the limit, see [`sizes`]).
pub(super) fn check_largest(params: &WorkloadParams, limit: u64, range: &'static str) -> Result<(), ValidationError> {
    if !params.all_sizes && (params.size == 0 || params.size > limit) {
        return Err(ValidationError::FieldOutOfRange {
            field: "size",
            value: i128::from(params.size),
            range,
        });
    }
    Ok(())
}

/// The plan of a fabric-bw or fabric-lat run ([`Plan`], as the verbs
/// workloads read theirs): a sweep stops at the workload's limit (16 MiB
/// writes, 8 KiB pings: labctl always sends a max_size, 8 MiB unless told
/// otherwise).
pub(super) fn plan(params: &WorkloadParams, kind: Kind) -> Plan {
    let largest = if kind == Kind::Lat { MSG_SLOT_SIZE } else { TARGET_MAX };
    Plan::of(params, largest as u64)
}

pub(super) fn sizes(params: &WorkloadParams, kind: Kind) -> Vec<usize> {
    plan(params, kind).sizes.into_iter().map(|s| s as usize).collect()
}

pub(super) fn stop(params: &WorkloadParams) -> Stop {
    match plan(params, Kind::Bw).stop {
        plan::Stop::Count(n) => Stop::Count(n),
        plan::Stop::After(d) => Stop::After(d),
    }
}

pub(super) fn tx_depth(params: &WorkloadParams) -> usize {
    plan(params, Kind::Bw).tx_depth
}

/// The RandomFill a fabric-write client sends: `iterations` pages of `size`
/// bytes scattered over the two MRs, seeded by `seed`. [`validate`] makes it
/// fit one message slot.
pub fn random_fill(params: &WorkloadParams, context: u64) -> RandomFill {
    RandomFill {
        context,
        seed: params.seed,
        page_size: params.size,
        pages: scatter_pages(
            params.seed,
            params.iterations as usize,
            params.size as usize,
            MR_COUNT,
            MR_SIZE,
        ),
    }
}

/// fabric-write's own limits: a page fits one MR, the pages fit both MRs
/// and one RandomFill message, and the run is counted in pages (no
/// duration-based runs).
pub(super) fn validate_write(params: &WorkloadParams) -> Result<(), ValidationError> {
    if params.size == 0 || params.size > MR_SIZE as u64 {
        return Err(ValidationError::FieldOutOfRange {
            field: "size",
            value: i128::from(params.size),
            range: "1 ..= 16777216 (fabric-write: the page size, at most one 16 MiB MR)",
        });
    }
    let fit_mrs = (MR_SIZE as u64 / params.size) * MR_COUNT as u64;
    if params.iterations == 0 || params.iterations > fit_mrs {
        return Err(ValidationError::FieldOutOfRange {
            field: "iterations",
            value: i128::from(params.iterations),
            range: "1 ..= 2 x 16 MiB / size (fabric-write: pages over the client's two 16 MiB MRs)",
        });
    }
    if params.iterations > MAX_FILL_PAGES as u64 {
        return Err(ValidationError::FieldOutOfRange {
            field: "iterations",
            value: i128::from(params.iterations),
            range: "1 ..= 1020 (fabric-write: the pages are named in one 8 KiB RandomFill message)",
        });
    }
    Ok(())
}

/// Opens the session's provider bound to this node's data address, watched
/// by the side's trace when it has one.
pub(super) fn open(
    spec: &SessionSpec,
    cancel: &Arc<AtomicBool>,
    trace: Option<&FabricTrace>,
) -> Result<fabric::Endpoint, SessionError> {
    let ip = bind_ip(&spec.bind_addr)?;
    let info = Hints::new().provider(provider(&spec.params)).node(ip).get()?;
    let mut ep = fabric::Endpoint::open_observed(info, trace.map(FabricTrace::observer))?;
    refuse_unexpected_provider(&spec.params, &ep)?;
    ep.set_cancel(Arc::clone(cancel));
    Ok(ep)
}

/// No silent fallback: the provider the endpoint opened against the one the
/// lab expects, checked before any byte moves.
fn refuse_unexpected_provider(params: &WorkloadParams, ep: &fabric::Endpoint) -> Result<(), SessionError> {
    let expected = params.expect_provider.as_str();
    let opened = ep.provider();
    let parts: Vec<&str> = opened.split(';').collect();
    if expected.is_empty() || expected.split(';').all(|p| parts.contains(&p)) {
        return Ok(());
    }
    let asked = if params.provider.is_empty() {
        format!("the run named no provider and got the default, {DEFAULT_PROVIDER}")
    } else {
        format!("the run asked for `{}`", params.provider)
    };
    Err(SessionError::Setup(format!(
        "the endpoint opened libfabric provider `{opened}` (fabric {}, domain {}), but the lab expects `{expected}` \
         (expect: fi_provider): {asked}; run on `{expected}` (--provider {expected}, where `fi_info -l` lists it: \
         labctl doctor shows each node's) or change the expectation",
        ep.info().fabric_name(),
        ep.info().domain_name(),
    )))
}

/// The gate of a run's server: it admits the CONNECT that carries the run's
/// proof, and logs and counts in `refused` every message before it.
pub(super) fn gate<'a>(spec: &'a SessionSpec, refused: &'a std::cell::RefCell<Refused>) -> fabric::write::Gate<'a> {
    fabric::write::Gate::new(
        |proof| spec.proof.admits(proof),
        |claimed, why| {
            // An RDM message does not say who sent it: this is what it claims.
            let peer = claimed.map_or("a peer that sent no CONNECT".into(), |a| format!("{a} (claimed)"));
            refused.borrow_mut().refuse("libfabric", &peer, &why)
        },
    )
}

pub(super) fn bind_ip(bind_addr: &str) -> Result<String, SessionError> {
    if let Ok(sa) = bind_addr.parse::<std::net::SocketAddr>() {
        return Ok(sa.ip().to_string());
    }
    bind_addr
        .parse::<std::net::IpAddr>()
        .map(|ip| ip.to_string())
        .map_err(|_| SessionError::Setup(format!("bind_addr {bind_addr:?} is not an IP address")))
}

pub(super) fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// A context (the final write's immediate) derived from the session id (FNV-1a).
pub(super) fn context_of(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

pub(super) fn base_facts(ep: &fabric::Endpoint) -> Vec<(String, String)> {
    let mut facts = vec![
        ("provider".to_string(), ep.provider().to_string()),
        ("fabric".to_string(), ep.info().fabric_name()),
        ("domain".to_string(), ep.info().domain_name()),
        ("mr_mode".to_string(), format!("{:#x}", ep.mr_mode())),
        ("cq_data_size".to_string(), ep.cq_data_size().to_string()),
    ];
    if let Ok(addr) = ep.address() {
        facts.push(("fabric_addr".to_string(), ep.address_string(&addr)));
        facts.push(("fabric_addr_len".to_string(), addr.len().to_string()));
    }
    facts
}

/// What Prepare returns for `ep`: the bind address and the fabric endpoint.
pub(super) fn endpoints(spec: &SessionSpec, ep: &fabric::Endpoint) -> Result<(Endpoint, FabricEndpoint), SessionError> {
    let address = ep.address()?;
    tracing::info!(address = %ep.address_string(&address), provider = ep.provider(), "fabric endpoint ready");
    Ok((
        Endpoint {
            address: bind_ip(&spec.bind_addr)?,
            port: 0,
            qps: Vec::new(),
        },
        FabricEndpoint {
            fabric_addr: address,
            provider: ep.provider().to_string(),
            region: None,
        },
    ))
}

/// Hands the server's fabric endpoint to Prepare: the server now listens.
pub(super) fn announce(
    spec: &SessionSpec,
    ep: &fabric::Endpoint,
    endpoint_tx: &mut Option<oneshot::Sender<Result<(Endpoint, FabricEndpoint), SessionError>>>,
) -> Result<(), SessionError> {
    let ready = endpoints(spec, ep)?;
    if let Some(tx) = endpoint_tx.take() {
        let _ = tx.send(Ok(ready));
    }
    Ok(())
}

pub(super) fn cpu_usage(cpu: &CpuTimes) -> Option<agent_proto::v1::CpuUsage> {
    Some(agent_proto::v1::CpuUsage {
        user_s: cpu.user_s,
        system_s: cpu.system_s,
    })
}

/// A server's result for the sizes it served: ops and bytes it saw, the first problem if any.
pub(super) fn served_result(
    ep: &fabric::Endpoint,
    ops: u64,
    bytes: u64,
    elapsed: Duration,
    cpu: &CpuTimes,
    problems: &[String],
    ok_detail: String,
) -> SideResult {
    let mut result = SideResult {
        role: Role::Server as i32,
        bytes,
        ops,
        elapsed_s: elapsed.as_secs_f64(),
        cpu: cpu_usage(cpu),
        facts: base_facts(ep).into_iter().collect(),
        ..Default::default()
    };
    crate::workload::verdict(
        &mut result,
        if problems.is_empty() {
            Ok(ok_detail)
        } else {
            Err(problems.join("; "))
        },
    );
    result
}

/// The client's progress reporter: phase, bytes and ops so far, message.
pub(super) fn reporter(mut sink: ProgressSink) -> impl FnMut(&str, u64, u64, String) {
    let started = Instant::now();
    move |phase: &str, bytes: u64, ops: u64, message: String| {
        sink(Progress {
            phase: phase.into(),
            bytes,
            ops,
            elapsed_s: started.elapsed().as_secs_f64(),
            message,
        })
    }
}

pub(super) fn check_peer(peer: &FabricEndpoint) -> Result<(), SessionError> {
    if peer.fabric_addr.is_empty() {
        return Err(SessionError::Invalid(ValidationError::Missing {
            field: "fabric_peer.fabric_addr",
        }));
    }
    Ok(())
}

/// The client's result from its size points: the last size is the headline
/// (as the verbs workloads), the sweep is kept when all sizes ran.
pub(super) fn measured_result(
    spec: &SessionSpec,
    ep: &fabric::Endpoint,
    sweep: Vec<SizePoint>,
    elapsed: Duration,
    cpu: &CpuTimes,
) -> SideResult {
    let last = sweep.last().cloned().unwrap_or_default();
    let mut result = SideResult {
        role: Role::Client as i32,
        bytes: sweep.iter().map(|p| p.size * p.iterations).sum(),
        ops: sweep.iter().map(|p| p.iterations).sum(),
        elapsed_s: elapsed.as_secs_f64(),
        bw: last.bw,
        lat: last.lat,
        cpu: cpu_usage(cpu),
        facts: base_facts(ep).into_iter().collect(),
        ..Default::default()
    };
    if spec.params.all_sizes {
        result.sweep = sweep;
    }
    result
}
