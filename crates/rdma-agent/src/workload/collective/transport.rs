//! What a collective needs of the transport under it, so that one
//! implementation of the algorithms runs over verbs RC QPs (the verbs
//! collectives) and over a libfabric RDM endpoint (`--provider`): writes
//! with an immediate into a peer's exposed region, the events that tell an
//! arrival or a write's completion, and the rank's two regions.
//!
//! Peers are named by their index among the other ranks in rank order (the
//! QP index on verbs); the [`super::net::Net`] above turns ranks into it.

use crate::session::SessionError;

/// One of a rank's two regions: its input, and the exposed region the
/// peers write into (output, and the reductions' staging area).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Region {
    /// Read by this rank only (the source of its writes at the first step).
    Input,
    /// Written by the peers.
    Exposed,
}

/// Bytes of one of this rank's regions: the data of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slice {
    /// The region.
    pub region: Region,
    /// Byte offset in it.
    pub offset: usize,
    /// Length in bytes (0: a message without data).
    pub len: usize,
}

/// What the transport saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A peer's write landed (its data visible): the immediate, and the peer
    /// it came from when the transport knows it (an RC QP does; an RDM
    /// endpoint does not, and the immediate names its sender).
    Arrived {
        /// The peer's index, if known.
        from: Option<usize>,
        /// The write's immediate.
        imm: u32,
    },
    /// One of this rank's writes to peer `to` completed.
    Sent {
        /// The peer's index.
        to: usize,
    },
}

/// A rank's transport: verbs ([`super::VerbsRanks`]) or libfabric
/// (`fabric_session::collective`).
pub trait Transport {
    /// Writes `src` into peer `to`'s exposed region at `offset`, with the
    /// immediate `imm` (the arrival signal). Does not wait.
    fn post_write(&mut self, to: usize, src: Slice, offset: u64, imm: u32) -> Result<(), SessionError>;

    /// Waits for the next event, within the session's deadline and abort.
    fn next_event(&mut self) -> Result<Event, SessionError>;

    /// Whether one peer's writes arrive in the order it posted them (RC
    /// does; RDM need not), so that any message but the awaited one is a
    /// protocol error.
    fn in_order(&self) -> bool;

    /// The input and exposed regions.
    fn regions_mut(&mut self) -> (&mut [u8], &mut [u8]);

    /// Records a fact of the run (the fault injected).
    fn note(&mut self, key: &str, value: String);

    /// Tells the controller how far the run is (bytes sent, operations).
    fn progress(&mut self, bytes: u64, ops: u64, message: String);
}
