//! The agent's in-process tests, one test binary: agents served on
//! 127.0.0.1 and driven through their gRPC API as the controller drives
//! them, with no VM and no RDMA device. One binary rather than one per file,
//! so the agent and its dependencies are linked and their generic code
//! optimised once for all of them.

mod bulk_tcp;
mod common;
mod fabric;
mod fabric_collective;
mod fuzz_corpus;
mod service;
