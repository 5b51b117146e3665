//! The agent's memory under a flood of refused requests, in a test binary of
//! its own: it reads the process's RSS, which tests running beside it in
//! one process would grow too.

#[path = "in_process/common.rs"]
mod common;

use agent_proto::v1::{HealthRequest, PrepareRequest, Role, WorkloadParams};
use tonic::Code;

use common::{one_op_params as params, start};

/// Thousands of refused requests of every kind (sizes, iterations, QPs,
/// unknown workloads, malformed capabilities, an oversized message) leave the
/// agent answering, with no session and no memory growth to speak of.
#[tokio::test]
async fn refused_requests_keep_the_agent_up_with_bounded_memory() {
    let (mut client, _stop) = start().await;
    let rss = |h: agent_proto::v1::HealthReply| h.rss_bytes;
    let before = rss(client.health(HealthRequest {}).await.unwrap().into_inner());
    let bad: Vec<WorkloadParams> = vec![
        params("write-read", 0),
        params("write-read", 1 << 40),
        params("write-read", u64::MAX),
        WorkloadParams {
            iterations: u64::MAX,
            ..params("write-bw", 64)
        },
        WorkloadParams {
            iterations: 0,
            duration_s: f64::INFINITY,
            ..params("write-bw", 64)
        },
        WorkloadParams {
            num_qps: 100_000,
            ..params("write-bw", 64)
        },
        WorkloadParams {
            tx_depth: u32::MAX,
            ..params("write-bw", 64)
        },
        WorkloadParams {
            capability_override: "not:a:capability".into(),
            ..params("write-read", 64)
        },
        params("teleport", 64),
        params("", 64),
    ];
    for round in 0..200 {
        for (i, p) in bad.iter().enumerate() {
            let err = client
                .prepare(PrepareRequest {
                    session_id: format!("bad-{round}-{i}"),
                    params: Some(p.clone()),
                    role: Role::Server as i32,
                    bind_addr: "127.0.0.1".into(),
                })
                .await
                .unwrap_err();
            assert_eq!(err.code(), Code::InvalidArgument, "{p:?}: {}", err.message());
        }
    }
    // A request beyond the message size limit is refused by the transport.
    let huge = params(&"w".repeat(8 << 20), 64);
    let err = client
        .prepare(PrepareRequest {
            session_id: "huge".into(),
            params: Some(huge),
            role: Role::Server as i32,
            bind_addr: "127.0.0.1".into(),
        })
        .await
        .unwrap_err();
    assert_ne!(err.code(), Code::Ok);
    let health = client.health(HealthRequest {}).await.unwrap().into_inner();
    assert_eq!(health.active_sessions, 0);
    let grown = health.rss_bytes.saturating_sub(before);
    assert!(
        grown < 32 << 20,
        "RSS grew by {} KiB over {} refused requests",
        grown >> 10,
        200 * bad.len()
    );
}
