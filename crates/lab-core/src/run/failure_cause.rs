//! What the controller adds to a failed run's error: the cause it can see
//! on the nodes when the agent saw only its own call failing. A buffer the
//! agent could not register because its locked-memory limit binds
//! ([`agent_memlock`]); a firewall that drops RoCE v2's UDP port (probed
//! after the failure, [`roce_port_probe`]), else a data link that stopped
//! delivering. It never changes what failed, only says why.

use agent_proto::v1::WorkloadParams;
use lab_model::labs::Fabric;
use lab_remote::ssh::SshSession;
use lab_state::NodeState;
use workload_catalogue::Family;

use super::error::RunError;
use crate::agent_memlock;
use crate::roce_port_probe::{self, Delivery};

/// Whether a failed run may have been stopped by the network between its
/// nodes: an agent's failure other than a refusal of the request.
pub(super) fn may_be_the_network(e: &RunError) -> bool {
    match e {
        RunError::Agent { status, .. } => !matches!(
            status.code(),
            tonic::Code::InvalidArgument | tonic::Code::Unimplemented | tonic::Code::AlreadyExists
        ),
        _ => false,
    }
}

/// After an agent failed to register a buffer (`ibv_reg_mr`): when that
/// node's agent is bound by a locked-memory limit, says so, with the limit
/// and the fix. The kernel refuses a registration past RLIMIT_MEMLOCK with
/// ENOMEM, which names neither the limit nor the process.
pub(super) async fn explain_registration_failure(
    mut e: RunError,
    server: (&NodeState, &SshSession),
    client: (&NodeState, &SshSession),
) -> RunError {
    let RunError::Agent { node, status, hint, .. } = &mut e else {
        return e;
    };
    let Some(asked) = agent_memlock::refused_registration(status.message()).filter(|_| hint.is_empty()) else {
        return e;
    };
    let on = if *node == server.0.name { server } else { client };
    if let Some(bound) = agent_memlock::read(on.0, on.1).await.and_then(|a| a.bound()) {
        *hint =
            format!(
            "\n  rdma-agent on `{node}` may lock at most {} KiB of memory (its RLIMIT_MEMLOCK, which binds: it lacks \
             CAP_IPC_LOCK); this registration of {} KiB {}.\n  fix: {}\n  \
             `labctl doctor` checks this (memlock) on every node",
            bound / 1024,
            asked.div_ceil(1024),
            if asked > bound { "alone is more" } else { "and what it already holds are more" },
            agent_memlock::FIX
        );
    }
    e
}

/// After a failed run over soft RoCE: RoCE v2's UDP port probed both ways
/// between the two nodes ([`roce_port_probe`]); the directions where a
/// firewall is seen dropping it. Empty when the probe does not apply, could
/// not run, or lost datagrams with no firewall in sight (a cut link: the
/// link's own explanation says more).
pub(super) async fn roce_port_blocked(
    fabric: Fabric,
    params: &WorkloadParams,
    server: (&NodeState, &SshSession),
    client: (&NodeState, &SshSession),
) -> Vec<Delivery> {
    let over_rdma = match workload_catalogue::find(&params.workload).map(|w| w.family) {
        Some(Family::Verbs) => true,
        Some(Family::Libfabric) => params.provider.starts_with("verbs"),
        _ => false,
    };
    if !over_rdma
        || server.0.name == client.0.name
        || !roce_port_probe::applies(server.0, fabric)
        || !roce_port_probe::applies(client.0, fabric)
    {
        return Vec::new();
    }
    let (to_server, to_client) = futures::join!(
        roce_port_probe::probe(client, server),
        roce_port_probe::probe(server, client)
    );
    [to_server, to_client]
        .into_iter()
        .flatten()
        .filter(|d| !d.delivered() && d.firewall_seen())
        .collect()
}

/// Names what stopped a run between two nodes, when the controller can tell.
/// RoCE's UDP port found blocked (`blocked`) is named first, whatever the
/// agent saw. Otherwise a retry-exceeded completion means the peer stopped
/// acknowledging: on a lab that is the data link (cut, lossy, or the peer
/// gone). The agent knows only its QP; the controller knows both ends, so
/// it names the link.
pub(super) fn explain_link_failure(
    e: RunError,
    server: &NodeState,
    client: &NodeState,
    blocked: &[Delivery],
) -> RunError {
    match e {
        RunError::Agent {
            node,
            role,
            status,
            hint,
        } if hint.is_empty() && !blocked.is_empty() => {
            let hint = blocked
                .iter()
                .map(|d| {
                    format!(
                        "\n  RoCE v2's UDP port {} is not delivered: {}\n  fix: {}",
                        roce_port_probe::ROCE_V2_PORT,
                        d.evidence(),
                        d.fix()
                    )
                })
                .collect::<String>()
                + "\n  `labctl doctor` checks this (udp-4791) for every pair of nodes";
            RunError::Agent {
                node,
                role,
                status,
                hint,
            }
        }
        RunError::Agent {
            node,
            role,
            status,
            hint,
        } if hint.is_empty()
            && (status.message().contains("IBV_WC_RETRY_EXC_ERR")
                || status.message().contains("resolve route timed out")) =>
        {
            let what = if status.message().contains("IBV_WC_RETRY_EXC_ERR") {
                "stopped delivering: every retransmission went unacknowledged"
            } else {
                "does not deliver: the peer's address did not resolve (no ARP reply)"
            };
            let end = |n: &NodeState| {
                format!(
                    "`{}` {} ({} on {})",
                    n.name,
                    n.data_addr,
                    n.rdma_device.as_deref().unwrap_or("rdma device"),
                    n.data_netdev.as_deref().unwrap_or("data NIC")
                )
            };
            let hint = format!(
                "\n  the RDMA link {} <-> {} {what}.\n  \
                 check it: labctl exec {} -- ping -c 3 {}  (and `tc qdisc show` for a leftover impairment)",
                end(client),
                end(server),
                client.name,
                server.data_addr
            );
            RunError::Agent {
                node,
                role,
                status,
                hint,
            }
        }
        other => other,
    }
}
