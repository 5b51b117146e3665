//! fabric-lat: send/recv ping-pong per size; the server echoes and checks
//! every ping, the client every echo.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use agent_proto::v1::{Endpoint, FabricEndpoint, SideResult, SizePoint};
use fabric::perf::{LatClient, LatServer};
use tokio::sync::oneshot;

use super::common::*;
use crate::cpu::CpuTimes;
use crate::fabric_trace::FabricTrace;
use crate::metrics::latency;
use crate::session::admission::{connect_delay, Refused};
use crate::session::{ProgressSink, SessionError, SessionSpec};

/// fabric-lat server: echoes every ping and checks it.
pub(super) fn serve_lat(
    spec: &SessionSpec,
    ep: &mut fabric::Endpoint,
    deadline: Instant,
    endpoint_tx: &mut Option<oneshot::Sender<Result<(Endpoint, FabricEndpoint), SessionError>>>,
) -> Result<SideResult, SessionError> {
    let sizes = sizes(&spec.params, Kind::Lat);
    let max = *sizes.iter().max().expect("at least one size");
    announce(spec, ep, endpoint_tx)?;
    let refused = RefCell::new(Refused::default());
    let mut server = LatServer::accept(ep, max, spec.params.seed, &mut gate(spec, &refused), left(deadline))?;
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
    let mut result = served_result(
        ep,
        pings,
        bytes,
        start.elapsed(),
        &cpu,
        &problems,
        format!("echoed {pings} pings; each held the seed's stream and its counter"),
    );
    refused.borrow().report(&mut result);
    Ok(result)
}

/// fabric-lat client: send/recv ping-pong per size, every echo checked.
pub(super) fn client_lat(
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
    connect_delay(&spec.params, cancel, deadline)?;
    let mut client = LatClient::connect(
        &mut ep,
        &peer.fabric_addr,
        max,
        spec.params.seed,
        spec.proof.as_bytes(),
        left(deadline),
    )?;
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
