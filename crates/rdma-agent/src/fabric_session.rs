//! One side of a libfabric (`fabric-*`) workload session, beside the verbs
//! sessions of [`crate::session`] and dispatched by the service on the
//! workload's name. Like a verbs session it runs on its own OS thread, which
//! owns the [`fabric::Endpoint`] (fabric, domain, CQ, AV, endpoint and every
//! MR): whatever ends the thread — success, failure, timeout or Abort — drops
//! the endpoint and so deregisters the memory.
//!
//! `fabric-write` (the protocol is [`fabric::write`]):
//! - Prepare (server): opens `params.provider` bound to `bind_addr`, registers
//!   a staging MR, and returns its fabric address; the thread then waits for
//!   the client's CONNECT (inserting the client into its AV), serves one
//!   RandomFill and finishes with its [`SideResult`] (what Collect returns).
//! - Run (client): opens the provider bound to its `bind_addr`, registers two
//!   16 MiB MRs, inserts the server, sends CONNECT and RandomFill
//!   (`params.iterations` pages of `params.size` bytes scattered over both MRs,
//!   seeded by `params.seed`), waits for the final write's immediate, verifies
//!   every page and reports.
//!
//! Abort sets the session's cancel flag, which the endpoint's waits check on
//! every CQ poll; every wait is also bounded by the session deadline.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_proto::v1::{CmMode, Endpoint, FabricEndpoint, Progress, Role, SideResult, WorkloadParams};
use fabric::write::{scatter_pages, Client, RandomFill, Server, WriteError, MR_COUNT, MR_SIZE};
use fabric::{FabricError, Hints};
use tokio::sync::oneshot;

use crate::cpu::CpuTimes;
use crate::session::{ProgressSink, SessionError, SessionHandle, SessionSpec};
use crate::validate::ValidationError;

/// The libfabric workloads (dispatched here instead of the verbs registry).
pub const WORKLOADS: &[&str] = &["fabric-write"];

/// The provider when `params.provider` is empty.
pub const DEFAULT_PROVIDER: &str = "tcp;ofi_rxm";

/// Largest staging MR the server generates pages into (one batch of writes).
const STAGING_MAX: usize = 4 << 20;

/// Whether `workload` is one of ours.
pub fn is_fabric(workload: &str) -> bool {
    WORKLOADS.contains(&workload)
}

/// The provider a session uses.
pub fn provider(params: &WorkloadParams) -> &str {
    if params.provider.is_empty() {
        DEFAULT_PROVIDER
    } else {
        &params.provider
    }
}

/// fabric-write's own limits: a page fits one MR, the pages fit both MRs,
/// and the run is counted in pages (no duration-based runs).
pub fn validate(params: &WorkloadParams) -> Result<(), ValidationError> {
    if params.size == 0 || params.size > MR_SIZE as u64 {
        return Err(ValidationError::FieldOutOfRange {
            field: "size",
            value: params.size as i64,
            range: "1 ..= 16777216 (fabric-write: the page size, at most one 16 MiB MR)",
        });
    }
    let max_pages = (MR_SIZE as u64 / params.size) * MR_COUNT as u64;
    if params.iterations == 0 || params.iterations > max_pages {
        return Err(ValidationError::FieldOutOfRange {
            field: "iterations",
            value: params.iterations as i64,
            range: "1 ..= 2 x 16 MiB / size (fabric-write: pages over the client's two 16 MiB MRs)",
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
    run: Option<(FabricEndpoint, ProgressSink)>,
) -> Result<
    (
        SessionHandle,
        oneshot::Receiver<Result<(Endpoint, FabricEndpoint), SessionError>>,
    ),
    SessionError,
> {
    validate(&spec.params)?;
    if spec.role == Role::Client && run.is_none() {
        return Err(SessionError::Setup(
            "fabric clients need no Prepare: call Run with the server's fabric endpoint".into(),
        ));
    }
    let cancel = Arc::new(AtomicBool::new(false));
    let (cmd_tx, _cmd_rx) = std::sync::mpsc::channel();
    let (endpoint_tx, endpoint_rx) = oneshot::channel();
    let (result_tx, result_rx) = oneshot::channel();
    let handle = SessionHandle {
        cancel: Arc::clone(&cancel),
        commands: cmd_tx,
        result: Some(result_rx),
        role: spec.role,
        // Not oob: Connect is refused for fabric sessions.
        cm: CmMode::RdmaCm,
    };
    let name = format!("fabric-{}", spec.id.chars().take(8).collect::<String>());
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            let span = tracing::info_span!("session", id = %spec.id, role = ?spec.role,
                workload = %spec.params.workload, provider = provider(&spec.params));
            let _enter = span.enter();
            let deadline = Instant::now() + spec.timeout();
            let mut endpoint_tx = Some(endpoint_tx);
            let outcome = match run {
                None => serve(&spec, &cancel, deadline, &mut endpoint_tx),
                Some((peer, sink)) => {
                    endpoint_tx = None;
                    client(&spec, &cancel, deadline, &peer, sink)
                }
            };
            crate::session::finish_side(outcome, endpoint_tx, result_tx);
        })
        .map_err(|e| SessionError::Setup(format!("spawning the session thread: {e}")))?;
    Ok((handle, endpoint_rx))
}

/// Opens the session's provider bound to this node's data address.
fn open(spec: &SessionSpec, cancel: &Arc<AtomicBool>) -> Result<fabric::Endpoint, SessionError> {
    let ip = bind_ip(&spec.bind_addr)?;
    let info = Hints::new().provider(provider(&spec.params)).node(ip).get()?;
    let mut ep = fabric::Endpoint::open(info)?;
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

fn serve(
    spec: &SessionSpec,
    cancel: &Arc<AtomicBool>,
    deadline: Instant,
    endpoint_tx: &mut Option<oneshot::Sender<Result<(Endpoint, FabricEndpoint), SessionError>>>,
) -> Result<SideResult, SessionError> {
    let mut ep = open(spec, cancel)?;
    let page = spec.params.size as usize;
    let total = page * spec.params.iterations as usize;
    let staging = total.min(STAGING_MAX).max(page);
    let mut server = Server::new(&mut ep, staging)?;
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
    let connect = server.accept(&mut ep, left(deadline))?;
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
    let mut ep = open(spec, cancel)?;
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
    let mut client = Client::connect(&mut ep, &peer.fabric_addr, MR_SIZE, left(deadline))?;
    let page = spec.params.size;
    let count = spec.params.iterations as usize;
    let req = RandomFill {
        context: context_of(&spec.id),
        seed: spec.params.seed,
        page_size: page,
        pages: scatter_pages(spec.params.seed, count, page as usize, MR_COUNT, MR_SIZE),
    };
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn provider_defaults_to_tcp() {
        assert_eq!(provider(&params(1, 1)), "tcp;ofi_rxm");
        let mut p = params(1, 1);
        p.provider = "verbs;ofi_rxd".into();
        assert_eq!(provider(&p), "verbs;ofi_rxd");
    }

    #[test]
    fn errors_map_to_session_errors() {
        let e: SessionError = FabricError::Cancelled { what: "x".into() }.into();
        assert!(matches!(e, SessionError::Aborted(_)));
        let e: SessionError = WriteError::Protocol("bad".into()).into();
        assert!(matches!(e, SessionError::Protocol(_)));
    }
}
