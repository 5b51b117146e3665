//! Compiles the agent contract in `proto/` at the workspace root.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_dir = "../../proto";
    let file = "../../proto/rdma_agent/v1/agent.proto";
    println!("cargo:rerun-if-changed={file}");
    // No transport `connect` constructor on the client: it would clash with the
    // generated `connect` method of `rpc Connect` (callers build a Channel and use `new`).
    tonic_prost_build::configure()
        .build_transport(false)
        .compile_protos(&[file], &[proto_dir])?;
    Ok(())
}
