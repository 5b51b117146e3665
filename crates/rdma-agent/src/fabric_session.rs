//! One side of a libfabric (`fabric-*`) workload session, beside the verbs
//! sessions of [`crate::session`] and dispatched by the service on the
//! workload's name. Like a verbs session it runs on its own OS thread, which
//! owns the [`fabric::Endpoint`] (fabric, domain, CQ, AV, endpoint and every
//! MR): whatever ends the thread — success, failure, timeout or Abort — drops
//! the endpoint and so deregisters the memory.
//!
//! `fabric-write` (the protocol is [`fabric::write`]):
//! - Prepare (server): opens `params.provider` bound to `bind_addr`, registers
//!   two staging MRs, and returns its fabric address; the thread then waits for
//!   the client's CONNECT (inserting the client into its AV), serves one
//!   RandomFill and finishes with its [`SideResult`] (what Collect returns).
//! - Run (client): opens the provider bound to its `bind_addr`, registers two
//!   16 MiB MRs, inserts the server, sends CONNECT and RandomFill
//!   (`params.iterations` pages of `params.size` bytes scattered over both MRs,
//!   seeded by `params.seed`), waits for the final write's immediate, verifies
//!   every page and reports.
//!
//! `fabric-bw` and `fabric-lat` (the protocols are [`fabric::perf`]) have the
//! same metrics and JSON shape as `write-bw` and `send-lat`: sizes from
//! `params.size` or the all-sizes sweep, `iterations` or `duration_s` per size,
//! `tx_depth` writes outstanding (bw), bandwidth and latency through
//! [`crate::metrics`]. Their server checks the bytes (bw: every target slot
//! against the seed's stream; lat: every ping) and the lat client checks every
//! echo.
//!
//! Abort sets the session's cancel flag, which the endpoint's waits check on
//! every CQ poll; every wait is also bounded by the session deadline.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_proto::v1::{Endpoint, FabricEndpoint, Progress, Role, SideResult, SizePoint, WorkloadParams};
use fabric::endpoint::MSG_SLOT_SIZE;
use fabric::perf::{BwClient, BwServer, LatClient, LatServer, Stop, TARGET_MAX};
use fabric::write::{scatter_pages, Client, RandomFill, Server, WriteError, MAX_FILL_PAGES, MR_COUNT, MR_SIZE};
use fabric::{FabricError, Hints};
use tokio::sync::oneshot;

use crate::cpu::CpuTimes;
use crate::fabric_trace::FabricTrace;
use crate::metrics::{bandwidth, latency, PeakTracker};
use crate::plan::{self, Plan};
use crate::session::{ProgressSink, SessionError, SessionHandle, SessionSpec};
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
const STAGING_MAX: usize = 2 << 20;

/// The provider a session uses.
pub fn provider(params: &WorkloadParams) -> &str {
    if params.provider.is_empty() {
        DEFAULT_PROVIDER
    } else {
        &params.provider
    }
}

/// `size` against `limit` (a sweep instead stops at the limit, see [`sizes`]).
fn check_largest(params: &WorkloadParams, limit: u64, range: &'static str) -> Result<(), ValidationError> {
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
fn plan(params: &WorkloadParams, kind: Kind) -> Plan {
    let largest = if kind == Kind::Lat { MSG_SLOT_SIZE } else { TARGET_MAX };
    Plan::of(params, largest as u64)
}

fn sizes(params: &WorkloadParams, kind: Kind) -> Vec<usize> {
    plan(params, kind).sizes.into_iter().map(|s| s as usize).collect()
}

fn stop(params: &WorkloadParams) -> Stop {
    match plan(params, Kind::Bw).stop {
        plan::Stop::Count(n) => Stop::Count(n),
        plan::Stop::After(d) => Stop::After(d),
    }
}

fn tx_depth(params: &WorkloadParams) -> usize {
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
fn validate_write(params: &WorkloadParams) -> Result<(), ValidationError> {
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

impl From<FabricError> for SessionError {
    fn from(e: FabricError) -> SessionError {
        match e {
            FabricError::Timeout { waited, what } => SessionError::Timeout { what, after: waited },
            FabricError::Cancelled { what } => SessionError::Aborted(format!("while waiting for {what}")),
            // A failed completion ends the run like a verbs completion error does (ABORTED).
            e @ FabricError::Completion { .. } => SessionError::Aborted(format!("libfabric: {e}")),
            e => SessionError::Setup(format!("libfabric: {e}")),
        }
    }
}

impl From<WriteError> for SessionError {
    fn from(e: WriteError) -> SessionError {
        match e {
            WriteError::Fabric(f) => f.into(),
            e => SessionError::Protocol(e.to_string()),
        }
    }
}

/// Starts a fabric session thread: Prepare of a server (`run` is None), or a
/// client's Run (`run` carries the server's fabric endpoint and the progress
/// sink). The receiver yields the server's endpoint once it is listening.
#[allow(clippy::type_complexity)]
pub fn spawn(
    spec: SessionSpec,
    kind: Kind,
    run: Option<(FabricEndpoint, ProgressSink)>,
) -> Result<
    (
        SessionHandle,
        oneshot::Receiver<Result<(Endpoint, FabricEndpoint), SessionError>>,
    ),
    SessionError,
> {
    if spec.role == Role::Client && run.is_none() {
        return Err(SessionError::Setup(
            "fabric clients need no Prepare: call Run with the server's fabric endpoint".into(),
        ));
    }
    let span = tracing::info_span!(parent: None, "session", id = %spec.id, role = ?spec.role,
        workload = %spec.params.workload, provider = provider(&spec.params));
    crate::session::spawn_thread_session(spec, "fabric", span, run, move |spec, cancel, run, endpoint_tx| {
        let deadline = Instant::now() + spec.timeout();
        let trace = FabricTrace::for_run(&spec.params);
        let trace = trace.as_ref();
        let mut outcome = match run {
            None => serve(spec, kind, &cancel, trace, deadline, endpoint_tx),
            Some((peer, sink)) => match kind {
                Kind::Bw => client_bw(spec, &cancel, trace, deadline, &peer, sink),
                Kind::Lat => client_lat(spec, &cancel, trace, deadline, &peer, sink),
                Kind::Write => client(spec, &cancel, trace, deadline, &peer, sink),
            },
        };
        if let Some(trace) = trace {
            trace.finish(&mut outcome, &spec.id);
        }
        outcome
    })
}

/// The `FI_UNIVERSE_SIZE` the agent sets on a node with a software RoCE device
/// when the user set none. `verbs;ofi_rxm` sizes its message CQ for the whole
/// universe (libfabric's default is 256 peers), beyond the CQ depth rxe
/// allows, so `fi_enable` fails with -22 (measured on the lab's rxe); a
/// session talks to one peer, and 16 leaves headroom.
pub const SOFT_ROCE_UNIVERSE_SIZE: &str = "16";

/// What to set `FI_UNIVERSE_SIZE` to at agent startup: [`SOFT_ROCE_UNIVERSE_SIZE`]
/// when it is unset (`current`) and `sysfs` (`/sys/class/infiniband`) holds a
/// software RDMA device (rxe or siw: they have a `parent` netdev attribute);
/// None otherwise (a user's value always wins; hardware needs no bound).
pub fn universe_size_default(current: Option<&str>, sysfs: &std::path::Path) -> Option<&'static str> {
    if current.is_some() {
        return None;
    }
    let soft = std::fs::read_dir(sysfs)
        .ok()?
        .flatten()
        .any(|d| d.file_name().to_string_lossy().starts_with("rxe") || d.path().join("parent").exists());
    soft.then_some(SOFT_ROCE_UNIVERSE_SIZE)
}

/// Opens the session's provider bound to this node's data address, watched
/// by the side's trace when it has one.
fn open(
    spec: &SessionSpec,
    cancel: &Arc<AtomicBool>,
    trace: Option<&FabricTrace>,
) -> Result<fabric::Endpoint, SessionError> {
    let ip = bind_ip(&spec.bind_addr)?;
    let info = Hints::new().provider(provider(&spec.params)).node(ip).get()?;
    let mut ep = fabric::Endpoint::open_observed(info, trace.map(FabricTrace::observer))?;
    ep.set_cancel(Arc::clone(cancel));
    Ok(ep)
}

fn bind_ip(bind_addr: &str) -> Result<String, SessionError> {
    if let Ok(sa) = bind_addr.parse::<std::net::SocketAddr>() {
        return Ok(sa.ip().to_string());
    }
    bind_addr
        .parse::<std::net::IpAddr>()
        .map(|ip| ip.to_string())
        .map_err(|_| SessionError::Setup(format!("bind_addr {bind_addr:?} is not an IP address")))
}

fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// A context (the final write's immediate) derived from the session id (FNV-1a).
fn context_of(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn base_facts(ep: &fabric::Endpoint) -> Vec<(String, String)> {
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

/// Hands the server's fabric endpoint to Prepare: the server now listens.
fn announce(
    spec: &SessionSpec,
    ep: &fabric::Endpoint,
    endpoint_tx: &mut Option<oneshot::Sender<Result<(Endpoint, FabricEndpoint), SessionError>>>,
) -> Result<(), SessionError> {
    let address = ep.address()?;
    tracing::info!(address = %ep.address_string(&address), provider = ep.provider(), "fabric endpoint ready");
    if let Some(tx) = endpoint_tx.take() {
        let _ = tx.send(Ok((
            Endpoint {
                address: bind_ip(&spec.bind_addr)?,
                port: 0,
                qps: Vec::new(),
            },
            FabricEndpoint {
                fabric_addr: address,
                provider: ep.provider().to_string(),
            },
        )));
    }
    Ok(())
}

fn serve(
    spec: &SessionSpec,
    kind: Kind,
    cancel: &Arc<AtomicBool>,
    trace: Option<&FabricTrace>,
    deadline: Instant,
    endpoint_tx: &mut Option<oneshot::Sender<Result<(Endpoint, FabricEndpoint), SessionError>>>,
) -> Result<SideResult, SessionError> {
    let mut ep = open(spec, cancel, trace)?;
    match kind {
        Kind::Bw => return serve_bw(spec, &mut ep, deadline, endpoint_tx),
        Kind::Lat => return serve_lat(spec, &mut ep, deadline, endpoint_tx),
        Kind::Write => {}
    }
    let page = spec.params.size as usize;
    // Half the pages per region, so that even a small request uses both.
    let staging = ((spec.params.iterations as usize).div_ceil(2) * page).min(STAGING_MAX.max(page));
    let mut server = Server::new(&mut ep, staging)?;
    let corrupt = spec.params.fault() == agent_proto::v1::Fault::Corrupt;
    if corrupt {
        server.corrupt_a_page();
    }
    announce(spec, &ep, endpoint_tx)?;
    let connect = server.accept(&mut ep, left(deadline))?;
    if let Some(trace) = trace {
        for mr in &connect.mrs {
            trace.blob(false, mr);
        }
    }
    tracing::info!(client = %ep.address_string(&connect.address), mrs = connect.mrs.len(), "CONNECT");
    let start = Instant::now();
    let cpu_start = CpuTimes::thread_now();
    let report = server.serve(&mut ep, left(deadline))?;
    let elapsed = start.elapsed();
    let cpu = CpuTimes::thread_now().since(&cpu_start);
    let mut facts = base_facts(&ep);
    facts.push(("client_fabric_addr".into(), ep.address_string(&connect.address)));
    facts.push(("immediate".into(), format!("{:#x}", report.immediate)));
    facts.push(("staging_bytes".into(), staging.to_string()));
    if corrupt {
        facts.push((
            "fault".into(),
            format!("corrupt: byte {} of the last page flipped", page / 2),
        ));
    }
    Ok(SideResult {
        role: Role::Server as i32,
        // The client checks the bytes; the server only writes them.
        checked: false,
        verified: false,
        verify_detail: String::new(),
        bytes: report.bytes,
        ops: report.pages as u64,
        elapsed_s: elapsed.as_secs_f64(),
        bw: Some(crate::metrics::bandwidth(
            report.bytes,
            report.pages as u64,
            elapsed,
            &[],
        )),
        cpu: Some(agent_proto::v1::CpuUsage {
            user_s: cpu.user_s,
            system_s: cpu.system_s,
        }),
        facts: facts.into_iter().collect(),
        ..Default::default()
    })
}

fn client(
    spec: &SessionSpec,
    cancel: &Arc<AtomicBool>,
    trace: Option<&FabricTrace>,
    deadline: Instant,
    peer: &FabricEndpoint,
    mut sink: ProgressSink,
) -> Result<SideResult, SessionError> {
    if peer.fabric_addr.is_empty() {
        return Err(SessionError::Invalid(ValidationError::Missing {
            field: "fabric_peer.fabric_addr",
        }));
    }
    let started = Instant::now();
    let mut progress = |phase: &str, bytes: u64, ops: u64, message: String| {
        sink(Progress {
            phase: phase.into(),
            bytes,
            ops,
            elapsed_s: started.elapsed().as_secs_f64(),
            message,
        })
    };
    let mut ep = open(spec, cancel, trace)?;
    progress(
        "connect",
        0,
        0,
        format!(
            "{}: CONNECT to {} ({} bytes)",
            ep.provider(),
            ep.address_string(&peer.fabric_addr),
            peer.fabric_addr.len()
        ),
    );
    let mut client = Client::register(&mut ep, &peer.fabric_addr, MR_SIZE)?;
    if let Some(trace) = trace {
        for mr in client.mrs() {
            trace.blob(true, &ep.remote_mr(*mr)?);
        }
    }
    client.send_connect(&mut ep, left(deadline))?;
    let page = spec.params.size;
    let count = spec.params.iterations as usize;
    let req = random_fill(&spec.params, context_of(&spec.id));
    let total = page * count as u64;
    progress(
        "run",
        0,
        0,
        format!("RandomFill: {count} pages of {page} B over {MR_COUNT} MRs of {MR_SIZE} B"),
    );
    let cpu_start = CpuTimes::thread_now();
    let outcome = client.random_fill(&mut ep, &req, left(deadline));
    let cpu = CpuTimes::thread_now().since(&cpu_start);
    let mut facts = base_facts(&ep);
    facts.push(("server_fabric_addr".into(), ep.address_string(&peer.fabric_addr)));
    facts.push(("immediate".into(), format!("{:#x}", ep.mask_cq_data(req.context))));
    for (i, mr) in client.mrs().iter().enumerate() {
        if let Ok(r) = ep.remote_mr(*mr) {
            facts.push((
                format!("mr{i}"),
                format!("addr {:#x} size {} key {:#x}", r.addr, r.size, r.key),
            ));
        }
    }
    let mut result = SideResult {
        role: Role::Client as i32,
        checked: true,
        cpu: Some(agent_proto::v1::CpuUsage {
            user_s: cpu.user_s,
            system_s: cpu.system_s,
        }),
        ..Default::default()
    };
    match outcome {
        Ok(report) => {
            let elapsed = report.transfer;
            result.verified = true;
            result.verify_detail = format!(
                "{count} pages of {page} B verified against the MT19937-64 stream (seed {}), immediate {:#x} seen",
                req.seed,
                ep.mask_cq_data(req.context)
            );
            result.bytes = report.bytes;
            result.ops = count as u64;
            result.elapsed_s = elapsed.as_secs_f64();
            result.bw = Some(crate::metrics::bandwidth(report.bytes, count as u64, elapsed, &[]));
            progress("verify", report.bytes, count as u64, "verified".into());
        }
        Err(WriteError::Mismatch {
            mr,
            page: p,
            offset,
            expected,
            actual,
        }) => {
            result.verified = false;
            result.verify_detail = format!(
                "MR {mr}, page {p} (byte {} of the MR), offset {offset}: expected {expected:#04x}, found {actual:#04x}",
                u64::from(p) * page + offset as u64
            );
            result.bytes = total;
            result.ops = count as u64;
            result.elapsed_s = started.elapsed().as_secs_f64();
            progress("verify", total, count as u64, result.verify_detail.clone());
        }
        Err(e) => return Err(e.into()),
    }
    if cancel.load(Ordering::Relaxed) {
        return Err(SessionError::Aborted("after the run".into()));
    }
    result.facts = facts.into_iter().collect();
    Ok(result)
}

fn cpu_usage(cpu: &CpuTimes) -> Option<agent_proto::v1::CpuUsage> {
    Some(agent_proto::v1::CpuUsage {
        user_s: cpu.user_s,
        system_s: cpu.system_s,
    })
}

/// A server's result for the sizes it served: ops and bytes it saw, the first problem if any.
fn served_result(
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

/// fabric-bw server: the target of the client's writes; checks every size's slots.
fn serve_bw(
    spec: &SessionSpec,
    ep: &mut fabric::Endpoint,
    deadline: Instant,
    endpoint_tx: &mut Option<oneshot::Sender<Result<(Endpoint, FabricEndpoint), SessionError>>>,
) -> Result<SideResult, SessionError> {
    let sizes = sizes(&spec.params, Kind::Bw);
    let max = *sizes.iter().max().expect("at least one size");
    announce(spec, ep, endpoint_tx)?;
    let mut server = BwServer::accept(ep, max, tx_depth(&spec.params), spec.params.seed, left(deadline))?;
    let (start, cpu_start) = (Instant::now(), CpuTimes::thread_now());
    let (mut writes, mut bytes, mut problems) = (0u64, 0u64, Vec::new());
    for (i, &size) in sizes.iter().enumerate() {
        let served = server.serve_size(ep, i as u32, size, left(deadline))?;
        writes += served.writes;
        bytes += served.writes * size as u64;
        if let Err(m) = served.verdict {
            problems.push(m);
        }
    }
    let cpu = CpuTimes::thread_now().since(&cpu_start);
    let mut result = served_result(
        ep,
        writes,
        bytes,
        start.elapsed(),
        &cpu,
        &problems,
        format!(
            "after each of {} size(s), every slot of the target held the MT19937-64 stream of seed {} stamped with the last of the {writes} writes counted into it",
            sizes.len(),
            spec.params.seed
        ),
    );
    result
        .facts
        .insert("tx_depth".into(), tx_depth(&spec.params).to_string());
    Ok(result)
}

/// fabric-lat server: echoes every ping and checks it.
fn serve_lat(
    spec: &SessionSpec,
    ep: &mut fabric::Endpoint,
    deadline: Instant,
    endpoint_tx: &mut Option<oneshot::Sender<Result<(Endpoint, FabricEndpoint), SessionError>>>,
) -> Result<SideResult, SessionError> {
    let sizes = sizes(&spec.params, Kind::Lat);
    let max = *sizes.iter().max().expect("at least one size");
    announce(spec, ep, endpoint_tx)?;
    let mut server = LatServer::accept(ep, max, spec.params.seed, left(deadline))?;
    let (start, cpu_start) = (Instant::now(), CpuTimes::thread_now());
    let (mut pings, mut bytes, mut problems) = (0u64, 0u64, Vec::new());
    for (i, &size) in sizes.iter().enumerate() {
        let served = server.serve_size(ep, i as u32, size, left(deadline))?;
        pings += served.pings;
        bytes += served.pings * size as u64;
        if let Err(m) = served.verdict {
            problems.push(m);
        }
    }
    let cpu = CpuTimes::thread_now().since(&cpu_start);
    Ok(served_result(
        ep,
        pings,
        bytes,
        start.elapsed(),
        &cpu,
        &problems,
        format!("echoed {pings} pings; each held the seed's stream and its counter"),
    ))
}

/// The client's progress reporter: phase, bytes and ops so far, message.
fn reporter(mut sink: ProgressSink) -> impl FnMut(&str, u64, u64, String) {
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

fn check_peer(peer: &FabricEndpoint) -> Result<(), SessionError> {
    if peer.fabric_addr.is_empty() {
        return Err(SessionError::Invalid(ValidationError::Missing {
            field: "fabric_peer.fabric_addr",
        }));
    }
    Ok(())
}

/// The client's result from its size points: the last size is the headline
/// (as the verbs workloads), the sweep is kept when all sizes ran.
fn measured_result(
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

/// fabric-bw client: `tx_depth` writes in flight per size; the server checks the bytes.
fn client_bw(
    spec: &SessionSpec,
    cancel: &Arc<AtomicBool>,
    trace: Option<&FabricTrace>,
    deadline: Instant,
    peer: &FabricEndpoint,
    sink: ProgressSink,
) -> Result<SideResult, SessionError> {
    check_peer(peer)?;
    let mut progress = reporter(sink);
    let sizes = sizes(&spec.params, Kind::Bw);
    let max = *sizes.iter().max().expect("at least one size");
    let depth = tx_depth(&spec.params);
    let mut ep = open(spec, cancel, trace)?;
    progress(
        "connect",
        0,
        0,
        format!("{}: CONNECT to {}", ep.provider(), ep.address_string(&peer.fabric_addr)),
    );
    let mut client = BwClient::connect(&mut ep, &peer.fabric_addr, max, spec.params.seed, left(deadline))?;
    let lose_one = spec.params.fault() == agent_proto::v1::Fault::Skip;
    if lose_one {
        client.claim_a_lost_write();
    }
    let (start, cpu_start) = (Instant::now(), CpuTimes::thread_now());
    let mut sweep = Vec::with_capacity(sizes.len());
    let (mut bytes, mut ops, mut first_writes) = (0u64, 0u64, 0u64);
    for (i, &size) in sizes.iter().enumerate() {
        progress("run", bytes, ops, format!("size {size} B, {depth} writes outstanding"));
        let mut peak = PeakTracker::new(Duration::from_millis(500));
        let point = client.run_size(
            &mut ep,
            i as u32,
            size,
            depth,
            stop(&spec.params),
            left(deadline),
            &mut |b| peak.add(b),
        )?;
        if i == 0 {
            first_writes = point.writes;
        }
        let moved = point.writes * size as u64;
        bytes += moved;
        ops += point.writes;
        sweep.push(SizePoint {
            size: size as u64,
            iterations: point.writes,
            bw: Some(bandwidth(moved, point.writes, point.elapsed, peak.windows())),
            lat: None,
        });
    }
    let cpu = CpuTimes::thread_now().since(&cpu_start);
    progress("verify", bytes, ops, "the server checks the target slots".into());
    let mut result = measured_result(spec, &ep, sweep, start.elapsed(), &cpu);
    // Only the server's check counts (as write-bw).
    result.checked = false;
    result.verify_detail = "the server checks the bytes".into();
    result.facts.insert("tx_depth".into(), depth.to_string());
    if lose_one {
        result.facts.insert(
            "fault".into(),
            format!(
                "skip: the client counts {first_writes} writes at {} B and did {}",
                sizes[0],
                first_writes - 1
            ),
        );
    }
    let target = client.target();
    result.facts.insert(
        "target_mr".into(),
        format!("addr {:#x} size {} key {:#x}", target.addr, target.size, target.key),
    );
    if cancel.load(Ordering::Relaxed) {
        return Err(SessionError::Aborted("after the run".into()));
    }
    Ok(result)
}

/// fabric-lat client: send/recv ping-pong per size, every echo checked.
fn client_lat(
    spec: &SessionSpec,
    cancel: &Arc<AtomicBool>,
    trace: Option<&FabricTrace>,
    deadline: Instant,
    peer: &FabricEndpoint,
    sink: ProgressSink,
) -> Result<SideResult, SessionError> {
    check_peer(peer)?;
    let mut progress = reporter(sink);
    let sizes = sizes(&spec.params, Kind::Lat);
    let max = *sizes.iter().max().expect("at least one size");
    let mut ep = open(spec, cancel, trace)?;
    progress(
        "connect",
        0,
        0,
        format!("{}: CONNECT to {}", ep.provider(), ep.address_string(&peer.fabric_addr)),
    );
    let mut client = LatClient::connect(&mut ep, &peer.fabric_addr, max, spec.params.seed, left(deadline))?;
    let corrupt = spec.params.fault() == agent_proto::v1::Fault::Corrupt;
    if corrupt {
        client.corrupt_a_ping();
    }
    let (start, cpu_start) = (Instant::now(), CpuTimes::thread_now());
    let mut sweep = Vec::with_capacity(sizes.len());
    let mut problems = Vec::new();
    let (mut bytes, mut ops) = (0u64, 0u64);
    for (i, &size) in sizes.iter().enumerate() {
        progress("run", bytes, ops, format!("size {size} B ping-pong"));
        let mut point = client.run_size(&mut ep, i as u32, size, stop(&spec.params), left(deadline))?;
        bytes += point.pings * size as u64;
        ops += point.pings;
        if let Err(m) = point.verdict {
            problems.push(m);
        }
        sweep.push(SizePoint {
            size: size as u64,
            iterations: point.pings,
            bw: None,
            lat: Some(latency(&mut point.samples_us)),
        });
    }
    let cpu = CpuTimes::thread_now().since(&cpu_start);
    progress(
        "verify",
        bytes,
        ops,
        format!("{} problem(s) in the echoes", problems.len()),
    );
    let mut result = measured_result(spec, &ep, sweep, start.elapsed(), &cpu);
    if corrupt {
        result.facts.insert(
            "fault".into(),
            format!("corrupt: the last byte of the first {} B ping flipped", sizes[0]),
        );
    }
    crate::workload::verdict(
        &mut result,
        if problems.is_empty() {
            Ok(format!("every one of {ops} echoes matched its ping"))
        } else {
            Err(problems.join("; "))
        },
    );
    if cancel.load(Ordering::Relaxed) {
        return Err(SessionError::Aborted("after the run".into()));
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind_of(p: &WorkloadParams) -> Kind {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == p.workload)
            .expect("a fabric workload")
    }

    /// The workload's own checks, as the registry runs them.
    fn validate(p: &WorkloadParams) -> Result<(), ValidationError> {
        (kind_of(p).own_check())(p, &crate::validate::Limits::of_this_node())
    }

    fn sizes_of(p: &WorkloadParams) -> Vec<usize> {
        sizes(p, kind_of(p))
    }

    fn params(size: u64, iterations: u64) -> WorkloadParams {
        WorkloadParams {
            workload: "fabric-write".into(),
            size,
            iterations,
            ..Default::default()
        }
    }

    #[test]
    fn validate_bounds_pages_by_the_two_mrs() {
        assert!(validate(&params(65536, 64)).is_ok());
        assert!(validate(&params(MR_SIZE as u64, 2)).is_ok());
        assert!(validate(&params(MR_SIZE as u64, 3))
            .unwrap_err()
            .to_string()
            .contains("iterations"));
        assert!(validate(&params(MR_SIZE as u64 + 1, 1))
            .unwrap_err()
            .to_string()
            .contains("size"));
        assert!(validate(&params(4096, 0)).is_err());
    }

    #[test]
    fn validate_bounds_pages_by_the_randomfill_message() {
        // 4 KiB pages fit 8192 times in the MRs, but one RandomFill names at
        // most 1020 (it used to pass here and fail at run time).
        assert_eq!(MAX_FILL_PAGES, 1020);
        assert!(validate(&params(4096, MAX_FILL_PAGES as u64)).is_ok());
        let err = validate(&params(4096, MAX_FILL_PAGES as u64 + 1))
            .unwrap_err()
            .to_string();
        assert!(err.contains("iterations 1021") && err.contains("RandomFill"), "{err}");
    }

    #[test]
    fn provider_defaults_to_tcp() {
        assert_eq!(provider(&params(1, 1)), "tcp;ofi_rxm");
        let mut p = params(1, 1);
        p.provider = "verbs;ofi_rxd".into();
        assert_eq!(provider(&p), "verbs;ofi_rxd");
    }

    #[test]
    fn universe_size_is_bounded_only_on_soft_roce_and_only_if_unset() {
        let dir = std::env::temp_dir().join(format!("fabric-universe-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("mlx5_0")).unwrap();
        assert_eq!(universe_size_default(None, &dir), None, "hardware needs no bound");
        assert_eq!(universe_size_default(None, &dir.join("missing")), None);
        std::fs::create_dir_all(dir.join("siw0")).unwrap();
        std::fs::write(dir.join("siw0/parent"), "eth1\n").unwrap();
        assert_eq!(universe_size_default(None, &dir), Some("16"));
        assert_eq!(universe_size_default(Some("64"), &dir), None, "the user's value wins");
        std::fs::remove_dir_all(dir.join("siw0")).unwrap();
        std::fs::create_dir_all(dir.join("rxe0")).unwrap();
        assert_eq!(universe_size_default(None, &dir), Some("16"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn perf_params(workload: &str, size: u64, all_sizes: bool, max_size: u64) -> WorkloadParams {
        WorkloadParams {
            workload: workload.into(),
            size,
            iterations: 10,
            all_sizes,
            max_size,
            ..Default::default()
        }
    }

    #[test]
    fn bw_and_lat_sizes_and_limits() {
        assert_eq!(sizes_of(&perf_params("fabric-bw", 65536, false, 0)), vec![65536]);
        let sweep = sizes_of(&perf_params("fabric-lat", 1, true, 0));
        assert_eq!((sweep[0], *sweep.last().unwrap(), sweep.len()), (2, 8192, 13));
        assert_eq!(
            *sizes_of(&perf_params("fabric-bw", 1, true, 0)).last().unwrap(),
            8 << 20
        );
        assert!(validate(&perf_params("fabric-bw", 16 << 20, false, 0)).is_ok());
        assert!(validate(&perf_params("fabric-bw", (16 << 20) + 1, false, 0))
            .unwrap_err()
            .to_string()
            .contains("size"));
        assert!(validate(&perf_params("fabric-lat", 8192, false, 0)).is_ok());
        assert!(validate(&perf_params("fabric-lat", 1, true, 0)).is_ok());
        assert!(validate(&perf_params("fabric-lat", 1, true, 65536)).is_ok());
        assert_eq!(
            *sizes_of(&perf_params("fabric-lat", 1, true, 65536)).last().unwrap(),
            8192
        );
        assert_eq!(*sizes_of(&perf_params("fabric-lat", 1, true, 64)).last().unwrap(), 64);
        let err = validate(&perf_params("fabric-lat", 8193, false, 0))
            .unwrap_err()
            .to_string();
        assert!(err.contains("size") && err.contains("8192"), "{err}");
        assert_eq!(stop(&perf_params("fabric-bw", 1, false, 0)), Stop::Count(10));
        let mut p = perf_params("fabric-bw", 1, false, 0);
        p.iterations = 0;
        assert_eq!(stop(&p), Stop::Count(plan::DEFAULT_ITERATIONS));
        p.duration_s = 0.5;
        assert_eq!(stop(&p), Stop::After(Duration::from_millis(500)));
        assert_eq!(tx_depth(&p), 128);
    }

    #[test]
    fn errors_map_to_session_errors() {
        let e: SessionError = FabricError::Cancelled { what: "x".into() }.into();
        assert!(matches!(e, SessionError::Aborted(_)));
        let e: SessionError = WriteError::Protocol("bad".into()).into();
        assert!(matches!(e, SessionError::Protocol(_)));
    }
}
