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
//!
//! Layout: [`common`] holds what every side shares (the kinds and their
//! request checks, sizes, opening, results); `bw` and `lat` hold fabric-bw's
//! and fabric-lat's sides; fabric-write's sides and the dispatch are here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use agent_proto::v1::{Endpoint, FabricEndpoint, Role, SideResult};
use fabric::write::{Client, Server, WriteError, MR_COUNT, MR_SIZE};
use fabric::FabricError;
use tokio::sync::oneshot;

use crate::cpu::CpuTimes;
use crate::fabric_trace::FabricTrace;
use crate::session::{ProgressSink, SessionError, SessionHandle, SessionSpec};
use crate::validate::ValidationError;

mod bw;
pub mod collective;
mod common;
mod lat;

use common::*;
pub use common::{provider, random_fill, Kind, DEFAULT_PROVIDER};

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
                Kind::Bw => bw::client_bw(spec, &cancel, trace, deadline, &peer, sink),
                Kind::Lat => lat::client_lat(spec, &cancel, trace, deadline, &peer, sink),
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
        Kind::Bw => return bw::serve_bw(spec, &mut ep, deadline, endpoint_tx),
        Kind::Lat => return lat::serve_lat(spec, &mut ep, deadline, endpoint_tx),
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
    let refused = std::cell::RefCell::new(crate::session::admission::Refused::default());
    let connect = server.accept(&mut ep, &mut gate(spec, &refused), left(deadline))?;
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
    facts.extend(refused.borrow().fact());
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
    sink: ProgressSink,
) -> Result<SideResult, SessionError> {
    if peer.fabric_addr.is_empty() {
        return Err(SessionError::Invalid(ValidationError::Missing {
            field: "fabric_peer.fabric_addr",
        }));
    }
    let started = Instant::now();
    let mut progress = reporter(sink);
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
    crate::session::admission::connect_delay(&spec.params, cancel, deadline)?;
    client.send_connect(&mut ep, spec.proof.as_bytes(), left(deadline))?;
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use agent_proto::v1::WorkloadParams;
    use fabric::perf::Stop;
    use fabric::write::MAX_FILL_PAGES;

    use super::*;
    use crate::plan;

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
