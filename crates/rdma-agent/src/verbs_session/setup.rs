//! What rdma_cm and oob setup share: the link's shape for a workload, a new
//! [`Side`] on it, PSNs, the device's outstanding-READ limit, the source GID
//! for the result, and the capability overrides of negative tests.

use std::net::IpAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use agent_proto::v1::{CompletionMode, Role, SideResult};

use crate::session::bounds::Bounds;
use crate::session::{ProgressSink, SessionError, SessionSpec, Side};
use crate::trace::{Tracer, What};
use crate::verbs::{Link, LinkConfig};
use crate::workload::Workload;

/// Outstanding READ/atomic requests per QP we ask for at most (perftest's
/// default `--outs` is 128; rxe allows 128), capped by the device.
const RD_ATOMIC_MAX: u8 = 128;
/// What we ask for when the device cannot be queried.
const RD_ATOMIC_FALLBACK: u8 = 16;

/// The local ACK timeout of a QP set up by the controller's exchange (oob)
/// or as a collective's rank: 4.096 µs × 2^14 ≈ 67 ms per try, so a write
/// across a dead link fails with IBV_WC_RETRY_EXC_ERR within about half a
/// second ([`crate::verbs::TRANSPORT_RETRY_COUNT`] retries). rdma_cm's own
/// value on RoCE comes from a fixed packet lifetime (about 1 s per try on
/// Linux), which would let a dead link hold a collective for seconds before
/// any rank could name it.
pub(crate) const LOCAL_ACK_TIMEOUT: u8 = 14;

/// Outstanding READ/atomic requests per QP for this link's device.
pub(crate) fn rd_atomic(link: &Link) -> u8 {
    match link.context().query_device() {
        Ok(attr) => attr.max_qp_rd_atom().clamp(1, i32::from(RD_ATOMIC_MAX)) as u8,
        Err(_) => RD_ATOMIC_FALLBACK,
    }
}

/// The link a side of `workload` needs on `device`: queue depths from the
/// workload, several QPs where the run asks for them.
pub(crate) fn link_config(spec: &SessionSpec, workload: &dyn Workload, device: String) -> LinkConfig {
    let params = &spec.params;
    LinkConfig {
        device,
        max_send_wr: workload.send_queue_depth(params),
        max_recv_wr: workload.recv_queue_depth(params),
        max_inline: params.inline_size,
        // Servers always get a channel: a passive server sleeps on it.
        completion_channel: params.completion() == CompletionMode::Event || spec.role == Role::Server,
        num_qps: workload.num_qps(params),
    }
}

/// `spec` with an automatic completion mode made concrete for `device` and
/// this side of `workload` (see [`completion_for`]).
pub(crate) fn resolve_completion(spec: &SessionSpec, workload: &dyn Workload, device: &str) -> SessionSpec {
    let mut spec = spec.clone();
    let measuring = workload.waits_are_measured(spec.role);
    let mode = completion_for(
        spec.params.completion(),
        crate::node_info::is_software_device(device),
        measuring,
    );
    spec.params.set_completion(mode);
    spec
}

/// The completion mode a side uses: the run's, or for `Auto` the one that
/// suits the device. A software device's work runs on the host's CPUs, so a
/// side spinning on its CQ takes the CPU the device (and, on an emulated lab,
/// the other node) needs; it sleeps instead, except a side whose waits lie
/// inside the measured time (`measuring`: a latency client, send-lat's
/// server), which keeps polling (docs/performance.md measures both). A NIC
/// does its work on its own, and busy polling is what perftest and users
/// expect there.
pub(crate) fn completion_for(asked: CompletionMode, software_device: bool, measuring: bool) -> CompletionMode {
    match asked {
        CompletionMode::Auto if software_device && !measuring => CompletionMode::Event,
        CompletionMode::Auto => CompletionMode::Poll,
        other => other,
    }
}

/// A side of `spec` on `link`, its waits bounded by `deadline` and `cancel`.
pub(crate) fn new_side(
    spec: &SessionSpec,
    mut link: Link,
    cancel: &Arc<AtomicBool>,
    deadline: Instant,
    progress: Option<ProgressSink>,
) -> Side {
    let bounds = Bounds {
        deadline,
        timeout: spec.timeout(),
        cancel: Arc::clone(cancel),
    };
    // Set before the workload registers anything, so its MRs are recorded.
    link.set_tracer(Tracer::for_run(spec.params.trace.as_ref(), &spec.params.workload));
    Side::new(link, spec.params.clone(), spec.role, bounds, progress, initial_psn())
}

/// Ends a traced side of session `session_id`: records its verdict and
/// hands the trace to its result, or keeps it for TakeTrace if it failed.
pub(crate) fn attach_trace(side: &mut Side, result: &mut Result<SideResult, SessionError>, session_id: &str) {
    if let Some(tracer) = side.link.take_tracer() {
        crate::trace::attach(*tracer, result, session_id);
    }
}

/// Records the capability blob this side sent or received.
pub(crate) fn trace_blob(side: &mut Side, sent: bool, b: &crate::verbs::RemoteBuf) {
    if let Some(tr) = side.link.tracer() {
        tr.record(
            0,
            What::Blob {
                sent,
                addr: b.addr,
                rkey: b.rkey.into(),
                len: b.len,
            },
        );
    }
}

/// The starting PSN of QP `i` (each QP of a side starts elsewhere in the 24-bit space).
pub(crate) fn qp_psn(base: u32, i: usize) -> u32 {
    base.wrapping_add((i as u32).wrapping_mul(0x0001_0001)) & 0x00FF_FFFF
}

/// A random-enough 24-bit starting PSN.
fn initial_psn() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (nanos ^ (std::process::id() << 8)) & 0x00FF_FFFF
}

/// A client's negative-test overrides of the peer's capability: another
/// {addr, rkey} (`capability_override`) or a flipped rkey (`corrupt_rkey`),
/// each recorded in the facts.
pub(crate) fn apply_corrupt_rkey(side: &mut Side) {
    if let Some((addr, rkey)) = crate::validate::capability_override(&side.params) {
        side.facts.insert(
            "capability_override".into(),
            format!(
                "{addr:#x}:{rkey:#x} instead of {:#x}:{:#x}",
                side.peer.addr, side.peer.rkey
            ),
        );
        side.peer.addr = addr;
        side.peer.rkey = rkey;
    }
    if side.params.corrupt_rkey {
        // rxe and mlx5 both compare the key byte: flipping it is always invalid.
        let bad = side.peer.rkey ^ 0xFF;
        side.facts
            .insert("corrupt_rkey".into(), format!("{:#x} -> {bad:#x}", side.peer.rkey));
        side.peer.rkey = bad;
    }
}

/// Records the source GID (and its index) that rdma_cm chose for `ip` on
/// the side's device, for the result's facts.
pub(crate) fn fill_local_gid(side: &mut Side, ip: IpAddr) {
    let IpAddr::V4(v4) = ip else { return };
    let device = side.link.device().to_string();
    // On InfiniBand that is GID 0 of the port whose IPoIB netdev holds the address.
    if let Some(found) = crate::node_info::find_data_path(v4, Some(&device)) {
        if let Some(gid) = found.gid_bytes() {
            side.location.sgid_index = found.gid_index as u8;
            side.location.gid = gid;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which sides poll on a software device under `auto`: every latency
    /// client, and send-lat's server, whose echo is inside each round trip;
    /// the bandwidth sides and the passive latency servers sleep.
    #[test]
    fn a_side_whose_waits_are_measured_polls_on_a_software_device() {
        use CompletionMode::{Auto, Event, Poll};
        let mode = |name: &str, role: Role| {
            let crate::registry::Runner::Verbs(workload) = crate::registry::find(name).expect("registered") else {
                panic!("{name} is a verbs workload");
            };
            completion_for(Auto, true, workload.waits_are_measured(role))
        };
        for name in ["write-lat", "read-lat", "send-lat", "atomic-lat"] {
            assert_eq!(mode(name, Role::Client), Poll, "{name} client");
        }
        assert_eq!(mode("send-lat", Role::Server), Poll);
        for name in ["read-lat", "atomic-lat", "write-bw", "send-bw", "read-bw", "atomic-bw"] {
            assert_eq!(mode(name, Role::Server), Event, "{name} server");
        }
        for name in ["write-bw", "send-bw", "read-bw", "atomic-bw"] {
            assert_eq!(mode(name, Role::Client), Event, "{name} client");
        }
    }

    #[test]
    fn auto_sleeps_on_software_devices_and_polls_on_nics() {
        use CompletionMode::{Auto, Event, Poll};
        assert_eq!(completion_for(Auto, true, false), Event);
        assert_eq!(completion_for(Auto, false, false), Poll);
        // A latency client polls on either kind: its wait is what it measures.
        assert_eq!(completion_for(Auto, true, true), Poll);
        assert_eq!(completion_for(Auto, false, true), Poll);
        // What the run asks for explicitly is kept on either kind and side.
        for software in [true, false] {
            for measuring in [true, false] {
                assert_eq!(completion_for(Poll, software, measuring), Poll);
                assert_eq!(completion_for(Event, software, measuring), Event);
            }
        }
    }
}
