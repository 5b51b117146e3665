//! In-process gRPC tests of the agent (no RDMA device needed): the server on
//! 127.0.0.1:0, a generated client, Health/NodeInfo, refused requests, and
//! every RPC of proto/rdma_agent/v1/agent.proto refused without the secret.

use agent_proto::auth::AgentSecret;
use agent_proto::v1::agent_client::AgentClient;
use agent_proto::v1::{
    AbortRequest, ClockRequest, CollectRequest, ConnectRequest, HealthRequest, NodeInfoRequest, PrepareRequest, Role,
    RunRequest, TakeTraceRequest,
};
use tonic::Code;

use crate::common::{one_op_params as params, start, start_agent};

/// The agent's contract, read at test time so that a new RPC is never left out.
const PROTO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../proto/rdma_agent/v1/agent.proto");

/// The RPC names of a proto file, in order: each `rpc Name(` at the start of a
/// line (comments and other text ignored).
fn proto_rpcs(proto: &str) -> Vec<String> {
    proto
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("rpc "))
        .filter_map(|rest| rest.split_once('('))
        .map(|(name, _)| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .collect()
}

fn agent_rpcs() -> Vec<String> {
    let text = std::fs::read_to_string(PROTO).unwrap_or_else(|e| panic!("reading {PROTO}: {e}"));
    let rpcs = proto_rpcs(&text);
    assert!(!rpcs.is_empty(), "no `rpc Name(` line in {PROTO}");
    rpcs
}

#[test]
fn proto_rpcs_reads_each_rpc_line_and_nothing_else() {
    let text = "service S {\n  // rpc Commented(X) is not one\n  rpc A(AReq) returns (AReply);\n\
                \trpc  B (BReq) returns (stream BEvent);\n}\nmessage rpc_like { string rpc = 1; }\n";
    assert_eq!(proto_rpcs(text), ["A", "B"]);
    let real = agent_rpcs();
    for rpc in [
        "Health",
        "NodeInfo",
        "Prepare",
        "Connect",
        "Run",
        "Collect",
        "Abort",
        "Clock",
        "TakeTrace",
    ] {
        assert!(real.iter().any(|r| r == rpc), "{rpc} not read from {PROTO}: {real:?}");
    }
    let mut unique = real.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), real.len(), "{real:?}");
}

/// Every RPC of the proto, called on `client`'s agent, each with its status
/// code (Ok or the refusal). An RPC this function cannot call fails the test.
async fn every_rpc<T>(client: &mut AgentClient<T>) -> Vec<(String, Code)>
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    let code = |r: Result<(), tonic::Status>| r.err().map_or(Code::Ok, |s| s.code());
    let mut answered = Vec::new();
    for rpc in agent_rpcs() {
        let result = match rpc.as_str() {
            "Health" => client.health(HealthRequest {}).await.map(drop),
            "NodeInfo" => client.node_info(NodeInfoRequest {}).await.map(drop),
            "Prepare" => client
                .prepare(PrepareRequest {
                    session_id: "s1".into(),
                    params: Some(params("write-read", 64)),
                    role: Role::Server as i32,
                    bind_addr: "127.0.0.1".into(),
                })
                .await
                .map(drop),
            "Connect" => client.connect(ConnectRequest::default()).await.map(drop),
            "Run" => client.run(RunRequest::default()).await.map(drop),
            "Collect" => client.collect(CollectRequest::default()).await.map(drop),
            "Abort" => client.abort(AbortRequest::default()).await.map(drop),
            "Clock" => client.clock(ClockRequest {}).await.map(drop),
            "TakeTrace" => client.take_trace(TakeTraceRequest::default()).await.map(drop),
            other => panic!("{PROTO} has `rpc {other}`, which every_rpc does not call yet: add it to the match"),
        };
        answered.push((rpc, code(result)));
    }
    answered
}

#[tokio::test]
async fn every_rpc_without_the_labs_secret_is_refused_before_it_runs() {
    let agent = start_agent().await;
    let refused = |rpcs: Vec<(String, Code)>, want: Code| {
        for (rpc, code) in rpcs {
            assert_eq!(code, want, "{rpc}");
        }
    };
    // No secret at all.
    refused(
        every_rpc(&mut AgentClient::new(agent.channel.clone())).await,
        Code::Unauthenticated,
    );
    // Another lab's secret.
    let other = AgentClient::with_interceptor(agent.channel.clone(), AgentSecret::generate());
    refused(every_rpc(&mut other.clone()).await, Code::PermissionDenied);
    // The right one reaches the handlers: Health and Clock answer, the rest get past the check.
    let answered = every_rpc(&mut agent.client.clone()).await;
    let code_of = |name: &str| answered.iter().find(|(rpc, _)| rpc == name).map(|(_, code)| *code);
    assert_eq!(code_of("Health"), Some(Code::Ok));
    assert_eq!(code_of("Clock"), Some(Code::Ok));
    for (rpc, code) in answered {
        assert!(
            !matches!(code, Code::Unauthenticated | Code::PermissionDenied),
            "{rpc}: {code:?}"
        );
    }
}

#[tokio::test]
async fn health_reports_version_and_rss() {
    let (mut client, _stop) = start().await;
    let health = client.health(HealthRequest {}).await.unwrap().into_inner();
    assert_eq!(health.version, rdma_agent::AGENT_VERSION);
    assert_eq!(health.active_sessions, 0);
    assert!(health.rss_bytes > 0);
}

#[tokio::test]
async fn node_info_works_without_rdma_devices() {
    let (mut client, _stop) = start().await;
    let info = client.node_info(NodeInfoRequest {}).await.unwrap().into_inner();
    assert!(!info.kernel.is_empty());
    assert_eq!(info.agent_version, rdma_agent::AGENT_VERSION);
    assert!(info.cpus >= 1 && info.memory_total_bytes > 0);
    if !std::path::Path::new("/sys/class/infiniband").exists() {
        assert!(info.devices.is_empty());
    }
}

#[tokio::test]
async fn unknown_workload_is_invalid_argument_listing_names() {
    let (mut client, _stop) = start().await;
    let err = client
        .prepare(PrepareRequest {
            session_id: "s1".into(),
            params: Some(params("teleport", 64)),
            role: Role::Server as i32,
            bind_addr: "127.0.0.1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("write-read") && err.message().contains("atomic-lat"),
        "{}",
        err.message()
    );
}

#[tokio::test]
async fn bad_sizes_and_missing_fields_are_invalid_argument() {
    let (mut client, _stop) = start().await;
    for p in [params("write-read", 0), params("write-read", 1 << 40)] {
        let err = client
            .prepare(PrepareRequest {
                session_id: "s2".into(),
                params: Some(p),
                role: Role::Server as i32,
                bind_addr: "127.0.0.1".into(),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message());
    }
    let err = client
        .run(RunRequest {
            session_id: "s3".into(),
            params: None,
            peer: None,
            bind_addr: String::new(),
            fabric_peer: None,
            fabric_peers: Vec::new(),
            rank_listeners: Vec::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn prepare_without_a_device_fails_cleanly_and_leaves_no_session() {
    let (mut client, _stop) = start().await;
    let mut p = params("write-read", 64);
    p.cm = agent_proto::v1::CmMode::Oob as i32;
    p.timeout_ms = 2000;
    let err = client
        .prepare(PrepareRequest {
            session_id: "s4".into(),
            params: Some(p),
            role: Role::Server as i32,
            bind_addr: "192.0.2.1".into(),
        })
        .await
        .unwrap_err();
    assert_ne!(err.code(), Code::Ok);
    assert!(!err.message().is_empty());
    let health = client.health(HealthRequest {}).await.unwrap().into_inner();
    assert_eq!(health.active_sessions, 0);
}

#[tokio::test]
async fn collect_and_abort_of_unknown_sessions() {
    let (mut client, _stop) = start().await;
    let err = client
        .collect(CollectRequest {
            session_id: "nope".into(),
            timeout_ms: 10,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    let reply = client
        .abort(AbortRequest {
            session_id: "nope".into(),
            reason: "test".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!reply.found);
}
