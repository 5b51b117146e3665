//! A safe wrapper over libfabric for RDM endpoints, RMA writes with immediate
//! data and the `fabric-write` workload (the AWS EFA data path, runnable on any
//! host through `tcp;ofi_rxm`).
//!
//! # Layout
//! - [`info`] — `fi_getinfo` hints ([`Hints`]) and the provider's answer ([`Info`]).
//! - [`endpoint`] — [`Endpoint`] owns fabric, domain, CQ, AV, endpoint and MRs;
//!   posts sends, receives and `fi_writemsg`, absorbs `-FI_EAGAIN`, drives progress
//!   from the CQ poll and reports completion errors with the provider's message.
//! - [`write`] — the `fabric-write` protocol (CONNECT, RandomFill, MT19937-64 pages,
//!   immediate data on the final write, verification).
//! - [`perf`] — the `fabric-bw` (windowed writes, final one with the count as
//!   immediate data, slot check on the target) and `fabric-lat` (`fi_pingpong`-style
//!   send/recv ping-pong) protocols.
//! - [`observe`] — what an endpoint does (registrations, posts, CQ entries),
//!   told to an optional observer: the agent's `run --trace` records it.
//! - [`error`] — [`FabricError`].
//!
//! All `unsafe` of the data path lives here and in `fabric-sys`.
//!
//! ```no_run
//! use fabric::{Access, Endpoint, Hints};
//! let info = Hints::new().provider("tcp;ofi_rxm").node("127.0.0.1").get()?;
//! let mut ep = Endpoint::open(info)?;
//! let mr = ep.register(1 << 20, Access::Remote)?;
//! println!("{} at {:?}, MR {:?}", ep.provider(), ep.address()?, ep.remote_mr(mr)?);
//! # Ok::<(), fabric::FabricError>(())
//! ```

#![warn(missing_docs)]

/// The RDM endpoint and everything it owns.
pub mod endpoint;
/// Errors.
pub mod error;
/// Provider discovery.
pub mod info;
mod mr;
/// What an endpoint does, for a watcher (the agent's trace).
pub mod observe;
/// The fabric-bw and fabric-lat protocols.
pub mod perf;
/// The fabric-write protocol.
pub mod write;

pub use endpoint::{Access, Completed, Endpoint, MrHandle, OpId, PeerAddr, RemoteMr};
pub use error::{FabricError, Result};
pub use info::{providers, Hints, Info};
