//! cargo-fuzz target: the agent's request path (see `../src/agent_request.rs`).
#![no_main]

#[path = "../src/agent_request.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
