//! Posting operations: control-message sends and RMA writes are checked,
//! given a boxed `fi_context2` and posted; an `-FI_EAGAIN` parks them in
//! the pending queue, retried in posting order after the CQ is polled.

use std::os::raw::c_void;
use std::ptr::{self, addr_of_mut};

use fabric_sys as sys;

use super::{mask_to, Endpoint, OpId, OpKind, OpSlot, PeerAddr, MSG_SLOT_SIZE};
use crate::error::{check, FabricError, Result};
use crate::mr::{Mr, MrHandle, RemoteMr};
use crate::observe::{Call, Event};

impl Endpoint {
    /// Sends a control message (copied into a registered slot).
    pub fn send(&mut self, dest: PeerAddr, msg: &[u8]) -> Result<OpId> {
        if msg.len() > self.max_message() {
            return Err(FabricError::InvalidArgument(format!(
                "message of {} bytes exceeds {}",
                msg.len(),
                self.max_message()
            )));
        }
        let slot = loop {
            if let Some(s) = self.free_send_slots.pop() {
                break s;
            }
            self.progress()?;
        };
        let base = self.mrs.slots[self.msg_mr].buf.ptr;
        // SAFETY: slot < RECV_SLOTS + SEND_SLOTS, so the slot lies inside the message buffer;
        // free send slots are used by no posted operation.
        unsafe { ptr::copy_nonoverlapping(msg.as_ptr(), base.add(slot * MSG_SLOT_SIZE), msg.len()) };
        self.submit(OpKind::Send {
            slot,
            len: msg.len(),
            dest: dest.0,
        })
    }

    /// RMA-writes `len` bytes at `offset` of local region `mr` to `remote` at
    /// `remote_offset` (`fi_writemsg`), with `FI_REMOTE_CQ_DATA` when `data` is
    /// given. `data` must fit the provider's `cq_data_size`.
    #[allow(clippy::too_many_arguments)] // mirrors fi_write: local range, peer, remote range, data
    pub fn write(
        &mut self,
        dest: PeerAddr,
        mr: MrHandle,
        offset: usize,
        len: usize,
        remote: &RemoteMr,
        remote_offset: u64,
        data: Option<u64>,
    ) -> Result<OpId> {
        let m = self.mrs.get(mr)?;
        if offset.checked_add(len).is_none_or(|end| end > m.buf.len) {
            return Err(FabricError::InvalidArgument(format!(
                "local range {offset}+{len} outside MR of {} bytes",
                m.buf.len
            )));
        }
        if remote_offset
            .checked_add(len as u64)
            .is_none_or(|end| end > remote.size)
        {
            return Err(FabricError::InvalidArgument(format!(
                "remote range {remote_offset}+{len} outside remote MR of {} bytes",
                remote.size
            )));
        }
        if let Some(d) = data {
            if self.cq_data_size == 0 {
                return Err(FabricError::InvalidArgument(format!(
                    "provider {} carries no immediate data (cq_data_size 0)",
                    self.provider
                )));
            }
            if mask_to(d, self.cq_data_size) != d {
                return Err(FabricError::InvalidArgument(format!(
                    "immediate {d:#x} does not fit the provider's {}-byte cq_data",
                    self.cq_data_size
                )));
            }
        }
        self.submit(OpKind::Write {
            mr: mr.0,
            offset,
            len,
            dest: dest.0,
            raddr: remote.addr + remote_offset,
            key: remote.key,
            data,
        })
    }

    pub(super) fn submit(&mut self, kind: OpKind) -> Result<OpId> {
        let id = self.next_op;
        self.next_op += 1;
        let mut slot = Box::new(OpSlot {
            ctx: sys::fi_context2::default(),
            id,
            kind,
        });
        match kind {
            OpKind::Write { mr, .. } => self.mrs.slots[mr].inflight += 1,
            OpKind::Send { .. } | OpKind::Recv { .. } => self.mrs.slots[self.msg_mr].inflight += 1,
        }
        if !self.pending.is_empty() {
            // Keep posting order: earlier operations are still waiting for resources.
            self.pending.push_back(slot);
            self.retry_pending()?;
            return Ok(OpId(id));
        }
        match self.post(&mut slot) {
            Ok(true) => {
                self.inflight.insert(ptr::addr_of!(slot.ctx) as usize, slot);
            }
            Ok(false) => self.pending.push_back(slot),
            Err(e) => {
                self.release(&slot.kind);
                return Err(e);
            }
        }
        Ok(OpId(id))
    }

    /// Posts one operation. `Ok(false)` means `-FI_EAGAIN`: retry after progress.
    fn post(&mut self, slot: &mut OpSlot) -> Result<bool> {
        let ctx: *mut c_void = addr_of_mut!(slot.ctx).cast();
        let local_desc = |m: &Mr| {
            if self.mr_mode & sys::FI_MR_LOCAL != 0 {
                m.desc
            } else {
                ptr::null_mut()
            }
        };
        let msg = &self.mrs.slots[self.msg_mr];
        let (ret, call) = match slot.kind {
            OpKind::Recv { slot: s } => (
                // SAFETY: the slot lies inside the registered message buffer, which outlives the
                // operation; ctx is a boxed fi_context2 kept in self.inflight until completion.
                unsafe {
                    sys::fis_recv(
                        self.ep,
                        msg.buf.ptr.add(s * MSG_SLOT_SIZE).cast(),
                        MSG_SLOT_SIZE,
                        local_desc(msg),
                        sys::FI_ADDR_UNSPEC,
                        ctx,
                    )
                },
                "fi_recv",
            ),
            OpKind::Send { slot: s, len, dest } => (
                // SAFETY: as for fi_recv; the slot holds `len` initialised bytes.
                unsafe {
                    sys::fis_send(
                        self.ep,
                        msg.buf.ptr.add(s * MSG_SLOT_SIZE).cast(),
                        len,
                        local_desc(msg),
                        dest,
                        ctx,
                    )
                },
                "fi_send",
            ),
            OpKind::Write {
                mr,
                offset,
                len,
                dest,
                raddr,
                key,
                data,
            } => {
                let m = &self.mrs.slots[mr];
                // SAFETY: offset + len was checked against the MR's length in `write`.
                let base = unsafe { m.buf.ptr.add(offset) };
                let mut iov = sys::iovec {
                    iov_base: base.cast(),
                    iov_len: len,
                };
                let mut desc = local_desc(m);
                let rma = sys::fi_rma_iov { addr: raddr, len, key };
                let msg_rma = sys::fi_msg_rma {
                    msg_iov: &mut iov,
                    desc: &mut desc,
                    iov_count: 1,
                    addr: dest,
                    rma_iov: &rma,
                    rma_iov_count: 1,
                    context: ctx,
                    data: data.unwrap_or(0),
                };
                let flags = write_msg_flags(self.write_flags, data);
                // SAFETY: the iov points into a registered buffer that outlives the operation
                // (its inflight count pins it); the descriptor arrays are read during the call;
                // ctx stays valid until completion.
                (unsafe { sys::fis_writemsg(self.ep, &msg_rma, flags) }, "fi_writemsg")
            }
        };
        if ret == -(sys::FI_EAGAIN as isize) {
            return Ok(false);
        }
        check(call, ret as i64)?;
        if self.observer.is_some() {
            let posted = posted_event(slot, self.write_flags);
            self.observe(&posted);
        }
        Ok(true)
    }

    pub(super) fn release(&mut self, kind: &OpKind) {
        match *kind {
            OpKind::Write { mr, .. } => self.mrs.slots[mr].inflight -= 1,
            OpKind::Send { slot, .. } => {
                self.mrs.slots[self.msg_mr].inflight -= 1;
                self.free_send_slots.push(slot);
            }
            OpKind::Recv { .. } => self.mrs.slots[self.msg_mr].inflight -= 1,
        }
    }

    pub(super) fn retry_pending(&mut self) -> Result<()> {
        while let Some(mut slot) = self.pending.pop_front() {
            match self.post(&mut slot) {
                Ok(true) => {
                    self.inflight.insert(ptr::addr_of!(slot.ctx) as usize, slot);
                }
                Ok(false) => {
                    self.pending.push_front(slot);
                    break;
                }
                Err(e) => {
                    self.release(&slot.kind);
                    self.done.insert(slot.id, Err(e));
                }
            }
        }
        Ok(())
    }

    /// Whether RMA writes ask for `FI_DELIVERY_COMPLETE` (the default): the
    /// initiator's completion then means the target placed the data, and a target-side
    /// failure such as a wrong MR key comes back as an error completion. With `false`
    /// the provider's default (transmit complete) applies, which on `tcp;ofi_rxm`
    /// reports a wrong-key write as a success.
    pub fn set_delivery_complete(&mut self, on: bool) {
        self.write_flags = if on { sys::FI_DELIVERY_COMPLETE as u64 } else { 0 };
    }

    /// Whether the provider places RMA writes from this endpoint in order
    /// (`FI_ORDER_RMA_WAW`, or the older `FI_ORDER_WAW`, in `tx_attr.msg_order`):
    /// a delivery-complete write posted after earlier writes then implies they
    /// were placed too, so those need only transmit completion.
    pub fn orders_writes(&self) -> bool {
        self.info.msg_order() & (sys::FI_ORDER_RMA_WAW | sys::FI_ORDER_WAW as u64) != 0
    }

    /// Whether writes currently ask for `FI_DELIVERY_COMPLETE`.
    pub fn delivery_complete(&self) -> bool {
        self.write_flags != 0
    }
}

/// `fi_writemsg`'s flags: a completion, the endpoint's delivery mode, and
/// remote CQ data when the write carries an immediate.
fn write_msg_flags(write_flags: u64, data: Option<u64>) -> u64 {
    let mut flags = sys::FI_COMPLETION as u64 | write_flags;
    if data.is_some() {
        flags |= sys::FI_REMOTE_CQ_DATA as u64;
    }
    flags
}

/// What posting `slot` was, for the observer.
fn posted_event(slot: &OpSlot, write_flags: u64) -> Event<'static> {
    let (call, dest, len, remote_addr, key, data, flags) = match slot.kind {
        OpKind::Recv { .. } => (Call::Recv, None, MSG_SLOT_SIZE, 0, 0, None, 0),
        OpKind::Send { len, dest, .. } => (Call::Send, Some(dest), len, 0, 0, None, 0),
        OpKind::Write {
            len,
            dest,
            raddr,
            key,
            data,
            ..
        } => (
            Call::WriteMsg,
            Some(dest),
            len,
            raddr,
            key,
            data,
            write_msg_flags(write_flags, data),
        ),
    };
    Event::Posted {
        call,
        op: slot.id,
        dest,
        len: len as u64,
        remote_addr,
        key,
        data,
        flags,
    }
}
