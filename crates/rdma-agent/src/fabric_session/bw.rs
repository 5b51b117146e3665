//! fabric-bw: the client keeps `tx_depth` writes in flight per size; the
//! server is their target and checks every size's slots.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_proto::v1::{Endpoint, FabricEndpoint, SideResult, SizePoint};
use fabric::perf::{BwClient, BwServer};
use tokio::sync::oneshot;

use super::common::*;
use crate::cpu::CpuTimes;
use crate::fabric_trace::FabricTrace;
use crate::metrics::{bandwidth, PeakTracker};
use crate::session::admission::{connect_delay, Refused};
use crate::session::{ProgressSink, SessionError, SessionSpec};

/// fabric-bw server: the target of the client's writes; checks every size's slots.
pub(super) fn serve_bw(
    spec: &SessionSpec,
    ep: &mut fabric::Endpoint,
    deadline: Instant,
    endpoint_tx: &mut Option<oneshot::Sender<Result<(Endpoint, FabricEndpoint), SessionError>>>,
) -> Result<SideResult, SessionError> {
    let sizes = sizes(&spec.params, Kind::Bw);
    let max = *sizes.iter().max().expect("at least one size");
    announce(spec, ep, endpoint_tx)?;
    let refused = RefCell::new(Refused::default());
    let mut server = BwServer::accept(
        ep,
        max,
        tx_depth(&spec.params),
        spec.params.seed,
        &mut gate(spec, &refused),
        left(deadline),
    )?;
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
    refused.borrow().report(&mut result);
    Ok(result)
}

/// fabric-bw client: `tx_depth` writes in flight per size; the server checks the bytes.
pub(super) fn client_bw(
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
    connect_delay(&spec.params, cancel, deadline)?;
    let mut client = BwClient::connect(
        &mut ep,
        &peer.fabric_addr,
        max,
        spec.params.seed,
        spec.proof.as_bytes(),
        left(deadline),
    )?;
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
