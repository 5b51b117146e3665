//! The RDM endpoint: fabric, domain, completion queue (`FI_CQ_FORMAT_DATA`),
//! address vector, endpoint and memory regions, owned together so that they
//! are closed in the right order. Operations are posted with a per-operation
//! `fi_context2`; an `-FI_EAGAIN` from a post parks the operation in a pending
//! queue that is retried after the CQ has been polled (which is also what
//! drives the provider's progress). Control messages go through a registered
//! pool of message slots. The regions themselves (buffers, keys, `mr_mode`)
//! are the `mr` module's; the endpoint counts the operations in flight on each.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use fabric_sys as sys;

use crate::error::{FabricError, Result};
use crate::info::Info;
use crate::mr::{fid_of, MrTable};
pub use crate::mr::{Access, MrHandle, RemoteMr};
use crate::observe::{Event, Observer};

// The methods live by concern: `open` (opening, addresses, peers),
// `regions` (registered memory), `post` (sends and writes), `completion`
// (the CQ and waits). Each adds to `impl Endpoint`; this file holds the
// state they share.
mod completion;
mod open;
mod post;
mod regions;

/// Size of one control-message slot.
pub const MSG_SLOT_SIZE: usize = 8192;

/// A peer in this endpoint's address vector (an `fi_addr_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerAddr(sys::fi_addr_t);

/// Identifies a posted operation until its completion is collected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OpId(u64);

/// What [`Endpoint::wait_event`] saw.
#[derive(Debug)]
pub enum Completed {
    /// A peer's RMA write with this immediate (masked to `cq_data_size`) landed.
    RemoteWrite(u64),
    /// One of this endpoint's operations completed, or failed.
    Op(OpId, Result<()>),
}

#[derive(Debug, Clone, Copy)]
enum OpKind {
    Send {
        slot: usize,
        len: usize,
        dest: sys::fi_addr_t,
    },
    Recv {
        slot: usize,
    },
    Write {
        mr: usize,
        offset: usize,
        len: usize,
        dest: sys::fi_addr_t,
        raddr: u64,
        key: u64,
        data: Option<u64>,
    },
}

/// One posted operation; `ctx` is handed to the provider as the operation context
/// (it must stay at a fixed address until the completion: it lives in a `Box`).
#[repr(C)]
struct OpSlot {
    ctx: sys::fi_context2,
    id: u64,
    kind: OpKind,
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpKind::Send { len, .. } => write!(f, "send of {len} bytes"),
            OpKind::Recv { .. } => write!(f, "receive"),
            OpKind::Write {
                len, raddr, key, data, ..
            } => {
                write!(f, "RMA write of {len} bytes to remote address {raddr:#x} key {key:#x}")?;
                if let Some(d) = data {
                    write!(f, " with immediate {d:#x}")?;
                }
                Ok(())
            }
        }
    }
}

/// A libfabric RDM endpoint and everything it owns.
pub struct Endpoint {
    info: Info,
    provider: String,
    mr_mode: u32,
    cq_data_size: usize,
    fabric: *mut sys::fid_fabric,
    domain: *mut sys::fid_domain,
    cq: *mut sys::fid_cq,
    av: *mut sys::fid_av,
    ep: *mut sys::fid_ep,
    mrs: MrTable,
    msg_mr: usize,
    free_send_slots: Vec<usize>,
    next_op: u64,
    inflight: HashMap<usize, Box<OpSlot>>,
    pending: VecDeque<Box<OpSlot>>,
    done: HashMap<u64, Result<()>>,
    received: VecDeque<Vec<u8>>,
    remote_writes: VecDeque<u64>,
    async_errors: VecDeque<FabricError>,
    write_flags: u64,
    cancel: Option<Arc<AtomicBool>>,
    observer: Option<Observer>,
}

// SAFETY: every libfabric object here is owned exclusively by this value and only
// touched through `&mut self` (or `&self` for reads of our own fields), so access is
// serialised as FI_THREAD_DOMAIN requires; libfabric objects have no thread affinity.
// The raw pointers in OpSlot contexts and MR buffers are owned by this value too.
unsafe impl Send for Endpoint {}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("provider", &self.provider)
            .field("mr_mode", &format_args!("{:#x}", self.mr_mode))
            .field("cq_data_size", &self.cq_data_size)
            .field("mrs", &self.mrs.slots.len())
            .field("inflight", &self.inflight.len())
            .field("pending", &self.pending.len())
            .finish()
    }
}

impl Endpoint {
    /// Tells the observer, if any.
    fn observe(&mut self, event: &Event<'_>) {
        if let Some(observe) = self.observer.as_mut() {
            observe(event);
        }
    }
}

/// Masks `data` to `size` bytes of immediate data.
pub fn mask_to(data: u64, size: usize) -> u64 {
    if size >= 8 {
        data
    } else {
        data & ((1u64 << (size * 8)) - 1)
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // Close in reverse order of creation: the endpoint first (which cancels what is
        // in flight), then MRs, AV, CQ, domain, fabric. Buffers and op contexts are freed
        // after this body, when the fields drop.
        let close = |fid: *mut sys::fid| {
            if !fid.is_null() {
                // SAFETY: each object is open and closed exactly once, children before parents.
                unsafe { sys::fis_close(fid) };
            }
        };
        close(fid_of(self.ep));
        self.mrs.close_all();
        close(fid_of(self.av));
        close(fid_of(self.cq));
        close(fid_of(self.domain));
        close(fid_of(self.fabric));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_mask_to_cq_data_size() {
        assert_eq!(mask_to(0x1122_3344_5566_7788, 8), 0x1122_3344_5566_7788);
        assert_eq!(mask_to(0x1122_3344_5566_7788, 4), 0x5566_7788);
        assert_eq!(mask_to(0xffff, 1), 0xff);
    }
}
