//! Everything `unsafe` in the agent lives under this module: the rdma_cm
//! wrapper ([`cm`], because sideway cannot carry private data), the data path
//! over QPs/CQs/MRs created with sideway ([`link`]: pre-built work request
//! lists, CQ polling without allocation, completion channel), and two small
//! libc calls (`poll`, `getrusage`).
//!
//! The rest of the crate is `#![deny(unsafe_code)]` and only sees safe types.

pub mod cm;
mod device;
pub mod gids;
pub mod link;
mod os;
mod posted;
mod wc;
mod wr;

pub use cm::{CmError, CmEvent, CmEventKind, CmId, EventChannel, TRANSPORT_RETRY_COUNT};
pub use gids::{gid_table, GidRow};
pub use link::{Link, LinkConfig, LinkError};
pub use os::{keep_large_allocations_unpooled, release_free_memory, thread_cpu_seconds};
pub use wc::{wc_opcode_name, wc_status_name};
pub use wr::{Access, BufId, Completion, LocalSlice, RecvChain, RemoteBuf, SendChain, SendOp, SendWr};
