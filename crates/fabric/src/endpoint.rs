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
use std::ptr::{self, addr_of_mut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric_sys as sys;

use crate::error::{check, strerror, FabricError, Result};
use crate::info::{c_str, Info};
use crate::mr::{fid_of, Mr, MrTable};
pub use crate::mr::{Access, MrHandle, RemoteMr};
use crate::observe::{Call, Event, Observer};

/// Size of one control-message slot.
pub const MSG_SLOT_SIZE: usize = 8192;
const RECV_SLOTS: usize = 16;
const SEND_SLOTS: usize = 16;
const CQ_BATCH: usize = 16;

/// A peer in this endpoint's address vector (an `fi_addr_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerAddr(sys::fi_addr_t);

/// Identifies a posted operation until its completion is collected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OpId(u64);

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
    /// Opens fabric, domain, CQ, AV and an enabled RDM endpoint for `info`'s
    /// first entry, and posts the control-message receives.
    pub fn open(info: Info) -> Result<Endpoint> {
        Endpoint::open_observed(info, None)
    }

    /// As [`Endpoint::open`], with `observer` told of everything the endpoint
    /// does from its first registration on ([`crate::observe`]).
    pub fn open_observed(info: Info, observer: Option<Observer>) -> Result<Endpoint> {
        let provider = info.provider_name();
        let mr_mode = info.mr_mode();
        let mut e = Endpoint {
            mr_mode,
            cq_data_size: info.cq_data_size(),
            provider,
            info,
            fabric: ptr::null_mut(),
            domain: ptr::null_mut(),
            cq: ptr::null_mut(),
            av: ptr::null_mut(),
            ep: ptr::null_mut(),
            mrs: MrTable::new(mr_mode),
            msg_mr: 0,
            free_send_slots: Vec::new(),
            next_op: 1,
            inflight: HashMap::new(),
            pending: VecDeque::new(),
            done: HashMap::new(),
            received: VecDeque::new(),
            remote_writes: VecDeque::new(),
            async_errors: VecDeque::new(),
            write_flags: sys::FI_DELIVERY_COMPLETE as u64,
            cancel: None,
            observer,
        };
        let raw = e.info.raw();
        // SAFETY: `raw` is a valid fi_info owned by e.info; each out-pointer is a field of
        // `e`, whose Drop closes whatever was opened (in reverse order) if a later step fails.
        unsafe {
            check(
                "fi_fabric",
                sys::fis_fabric((*raw).fabric_attr, &mut e.fabric, ptr::null_mut()).into(),
            )?;
            check(
                "fi_domain",
                sys::fis_domain(e.fabric, raw, &mut e.domain, ptr::null_mut()).into(),
            )?;
            let mut cq_attr = sys::fi_cq_attr {
                format: sys::fi_cq_format_FI_CQ_FORMAT_DATA,
                wait_obj: sys::fi_wait_obj_FI_WAIT_NONE,
                ..Default::default()
            };
            check(
                "fi_cq_open",
                sys::fis_cq_open(e.domain, &mut cq_attr, &mut e.cq, ptr::null_mut()).into(),
            )?;
            let mut av_type = (*(*raw).domain_attr).av_type;
            if av_type == sys::fi_av_type_FI_AV_UNSPEC {
                av_type = sys::fi_av_type_FI_AV_TABLE;
            }
            let mut av_attr = sys::fi_av_attr {
                type_: av_type,
                count: 16,
                ..Default::default()
            };
            check(
                "fi_av_open",
                sys::fis_av_open(e.domain, &mut av_attr, &mut e.av, ptr::null_mut()).into(),
            )?;
            check(
                "fi_endpoint",
                sys::fis_endpoint(e.domain, raw, &mut e.ep, ptr::null_mut()).into(),
            )?;
            let bind = (sys::FI_TRANSMIT | sys::FI_RECV) as u64;
            check("fi_ep_bind(cq)", sys::fis_ep_bind(e.ep, fid_of(e.cq), bind).into())?;
            check("fi_ep_bind(av)", sys::fis_ep_bind(e.ep, fid_of(e.av), 0).into())?;
            check("fi_enable", sys::fis_enable(e.ep).into())?;
        }
        let msg = e.register(MSG_SLOT_SIZE * (RECV_SLOTS + SEND_SLOTS), Access::Local)?;
        e.msg_mr = msg.0;
        e.free_send_slots = (RECV_SLOTS..RECV_SLOTS + SEND_SLOTS).rev().collect();
        for slot in 0..RECV_SLOTS {
            e.submit(OpKind::Recv { slot })?;
        }
        Ok(e)
    }

    /// The provider in use, e.g. `tcp;ofi_rxm`.
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// The provider's `fi_info` (mr_mode, cq_data_size, ...).
    pub fn info(&self) -> &Info {
        &self.info
    }

    /// The `mr_mode` in force (what the provider returned).
    pub fn mr_mode(&self) -> u32 {
        self.mr_mode
    }

    /// Bytes of immediate data the provider carries.
    pub fn cq_data_size(&self) -> usize {
        self.cq_data_size
    }

    /// Masks an immediate value to the provider's `cq_data_size`.
    pub fn mask_cq_data(&self, data: u64) -> u64 {
        mask_to(data, self.cq_data_size)
    }

    /// Largest control message [`Endpoint::send`] accepts.
    pub fn max_message(&self) -> usize {
        MSG_SLOT_SIZE.min(self.info.max_msg_size())
    }

    /// This endpoint's fabric address (`fi_getname`; variable length, 32 bytes on EFA).
    pub fn address(&self) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; 64];
        let mut len = buf.len();
        // SAFETY: `ep` is an open endpoint; buf has `len` writable bytes.
        let mut ret = unsafe { sys::fis_getname(fid_of(self.ep), buf.as_mut_ptr().cast(), &mut len) };
        if ret == -(sys::FI_ETOOSMALL as i32) {
            buf.resize(len, 0);
            // SAFETY: as above with the size the provider asked for.
            ret = unsafe { sys::fis_getname(fid_of(self.ep), buf.as_mut_ptr().cast(), &mut len) };
        }
        check("fi_getname", ret.into())?;
        buf.truncate(len);
        Ok(buf)
    }

    /// A printable form of a fabric address (`fi_av_straddr`).
    pub fn address_string(&self, addr: &[u8]) -> String {
        let mut buf = vec![0u8; 256];
        let mut len = buf.len();
        // SAFETY: `av` is open; `addr` is readable (the provider reads its own address format
        // from it, and addresses come from fi_getname); buf has `len` writable bytes.
        let p = unsafe { sys::fis_av_straddr(self.av, addr.as_ptr().cast(), buf.as_mut_ptr().cast(), &mut len) };
        // SAFETY: fi_av_straddr returns `buf` (NUL-terminated, possibly truncated) or NULL.
        unsafe { c_str(p) }
    }

    /// Inserts a peer's fabric address into the address vector.
    pub fn insert_peer(&mut self, addr: &[u8]) -> Result<PeerAddr> {
        if addr.is_empty() {
            return Err(FabricError::InvalidArgument("empty fabric address".into()));
        }
        let mut out: sys::fi_addr_t = sys::FI_ADDR_UNSPEC;
        // SAFETY: `av` is open; the provider reads one address of its own format from `addr`,
        // whose length the caller got from a peer's fi_getname.
        let ret = unsafe { sys::fis_av_insert(self.av, addr.as_ptr().cast(), 1, &mut out, 0, ptr::null_mut()) };
        check("fi_av_insert", ret.into())?;
        if ret != 1 || out == sys::FI_ADDR_UNSPEC {
            return Err(FabricError::Call {
                call: "fi_av_insert",
                code: sys::FI_EINVAL as i32,
                message: strerror(22),
            });
        }
        if self.observer.is_some() {
            let address = self.address_string(addr);
            self.observe(&Event::PeerInserted {
                fi_addr: out,
                address: &address,
            });
        }
        Ok(PeerAddr(out))
    }

    /// Allocates and registers a zeroed, page-aligned buffer of `len` bytes,
    /// honouring the provider's `mr_mode` ([`MrTable::register`]).
    pub fn register(&mut self, len: usize, access: Access) -> Result<MrHandle> {
        let h = self.mrs.register(self.domain, self.ep, len, access)?;
        if let Some(observe) = self.observer.as_mut() {
            let mr = self.mrs.get(h)?;
            observe(&Event::Registered {
                addr: mr.buf.ptr as u64,
                len: len as u64,
                key: mr.key,
                remote: access == Access::Remote,
            });
        }
        Ok(h)
    }

    /// Length of a registered region.
    pub fn mr_len(&self, h: MrHandle) -> Result<usize> {
        Ok(self.mrs.get(h)?.buf.len)
    }

    /// What a peer needs to write into `h` ([`MrTable::remote`]).
    pub fn remote_mr(&self, h: MrHandle) -> Result<RemoteMr> {
        self.mrs.remote(h)
    }

    /// The bytes of a local-only region, for filling before a send or write.
    /// Fails while an operation that uses the region is in flight.
    pub fn local_bytes_mut(&mut self, h: MrHandle) -> Result<&mut [u8]> {
        let mr = self.mrs.local(h)?;
        if mr.inflight != 0 {
            return Err(FabricError::InvalidArgument(format!(
                "{} operations in flight on this MR",
                mr.inflight
            )));
        }
        let (p, len) = (mr.buf.ptr, mr.buf.len);
        // SAFETY: the buffer is `len` bytes we own; no posted operation reads or writes it
        // (inflight == 0), no peer has remote access, and `&mut self` excludes other borrows.
        Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
    }

    /// Bytes `offset .. offset + len` of a local-only region, for restamping
    /// one slot while writes from other slots of the region are in flight.
    /// Fails while a posted write reads any byte of the range.
    pub fn local_range_mut(&mut self, h: MrHandle, offset: usize, len: usize) -> Result<&mut [u8]> {
        let mr = self.mrs.local(h)?;
        let end = offset
            .checked_add(len)
            .filter(|&end| end <= mr.buf.len)
            .ok_or_else(|| {
                FabricError::InvalidArgument(format!(
                    "range {offset} + {len} is outside the MR's {} bytes",
                    mr.buf.len
                ))
            })?;
        let overlaps = |slot: &OpSlot| match slot.kind {
            OpKind::Write {
                mr: m,
                offset: o,
                len: l,
                ..
            } => m == h.0 && o < end && offset < o + l,
            _ => false,
        };
        if self.inflight.values().any(|s| overlaps(s)) || self.pending.iter().any(|s| overlaps(s)) {
            return Err(FabricError::InvalidArgument(format!(
                "a write in flight reads bytes {offset}..{end} of this MR"
            )));
        }
        let p = mr.buf.ptr;
        // SAFETY: the range lies within the `len` bytes we own (checked above); no posted
        // operation reads it (no in-flight or pending write overlaps it, and sends and
        // receives use the message region, not this one); no peer has remote access to a
        // local-only region; and `&mut self` excludes other borrows.
        Ok(unsafe { std::slice::from_raw_parts_mut(p.add(offset), len) })
    }

    /// The bytes of a remotely accessible region.
    ///
    /// # Safety
    /// No peer may write into the region while the slice is alive: the caller
    /// must know that every remote write targeting it has completed (e.g. it saw
    /// the final immediate of the transfer) and that no new one will be issued.
    pub unsafe fn remote_bytes(&self, h: MrHandle) -> Result<&[u8]> {
        let mr = self.mrs.get(h)?;
        // SAFETY: we own the buffer; the caller guarantees there are no concurrent remote writes.
        Ok(unsafe { std::slice::from_raw_parts(mr.buf.ptr, mr.buf.len) })
    }

    /// Mutable bytes of a remotely accessible region (e.g. to clear it).
    ///
    /// # Safety
    /// As for [`Endpoint::remote_bytes`]: no peer accesses the region while the slice is alive.
    pub unsafe fn remote_bytes_mut(&mut self, h: MrHandle) -> Result<&mut [u8]> {
        let mr = self.mrs.get(h)?;
        if mr.inflight != 0 {
            return Err(FabricError::InvalidArgument(format!(
                "{} operations in flight on this MR",
                mr.inflight
            )));
        }
        // SAFETY: we own the buffer, `&mut self` excludes local borrows and in-flight local
        // operations; the caller guarantees there is no remote access.
        Ok(unsafe { std::slice::from_raw_parts_mut(mr.buf.ptr, mr.buf.len) })
    }

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

    fn submit(&mut self, kind: OpKind) -> Result<OpId> {
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
        let ctx: *mut std::os::raw::c_void = addr_of_mut!(slot.ctx).cast();
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

    /// Tells the observer, if any.
    fn observe(&mut self, event: &Event<'_>) {
        if let Some(observe) = self.observer.as_mut() {
            observe(event);
        }
    }

    fn release(&mut self, kind: &OpKind) {
        match *kind {
            OpKind::Write { mr, .. } => self.mrs.slots[mr].inflight -= 1,
            OpKind::Send { slot, .. } => {
                self.mrs.slots[self.msg_mr].inflight -= 1;
                self.free_send_slots.push(slot);
            }
            OpKind::Recv { .. } => self.mrs.slots[self.msg_mr].inflight -= 1,
        }
    }

    fn retry_pending(&mut self) -> Result<()> {
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

    /// Drives progress: reads the CQ (which is what progresses tcp/rxm and EFA),
    /// records completions, reposts receives, then retries operations parked on
    /// `-FI_EAGAIN`. Returns how many completions were read.
    pub fn progress(&mut self) -> Result<usize> {
        let mut total = 0;
        loop {
            let mut entries = [sys::fi_cq_data_entry::default(); CQ_BATCH];
            // SAFETY: `cq` is open with FI_CQ_FORMAT_DATA, so each entry is an fi_cq_data_entry
            // and the buffer holds CQ_BATCH of them.
            let n = unsafe { sys::fis_cq_read(self.cq, entries.as_mut_ptr().cast(), CQ_BATCH) };
            if n == -(sys::FI_EAGAIN as isize) {
                break;
            }
            if n == -(sys::FI_EAVAIL as isize) {
                self.read_error()?;
                total += 1;
                continue;
            }
            let n = check("fi_cq_read", n as i64)? as usize;
            for entry in &entries[..n] {
                self.complete(entry)?;
            }
            total += n;
            if n < CQ_BATCH {
                break;
            }
        }
        self.retry_pending()?;
        Ok(total)
    }

    fn complete(&mut self, entry: &sys::fi_cq_data_entry) -> Result<()> {
        if self.observer.is_some() {
            let op = self.inflight.get(&(entry.op_context as usize)).map(|s| s.id);
            let data = (entry.flags & sys::FI_REMOTE_CQ_DATA as u64 != 0).then_some(entry.data);
            self.observe(&Event::Completed {
                op,
                flags: entry.flags,
                len: entry.len as u64,
                data,
            });
        }
        let remote_write = sys::FI_REMOTE_WRITE as u64;
        if entry.flags & remote_write != 0 {
            // Target side of an RMA write. Its `len` is not reliable (0 on tcp): only
            // the immediate is used.
            if entry.flags & sys::FI_REMOTE_CQ_DATA as u64 != 0 {
                self.remote_writes.push_back(mask_to(entry.data, self.cq_data_size));
            }
            return Ok(());
        }
        let Some(slot) = self.inflight.remove(&(entry.op_context as usize)) else {
            return Ok(());
        };
        self.release(&slot.kind);
        match slot.kind {
            OpKind::Recv { slot: s } => {
                let len = entry.len.min(MSG_SLOT_SIZE);
                let mut data = vec![0u8; len];
                let base = self.mrs.slots[self.msg_mr].buf.ptr;
                // SAFETY: the receive into this slot completed, so the provider no longer
                // writes it; len <= MSG_SLOT_SIZE keeps the copy inside the slot.
                unsafe { ptr::copy_nonoverlapping(base.add(s * MSG_SLOT_SIZE), data.as_mut_ptr(), len) };
                self.received.push_back(data);
                self.submit(OpKind::Recv { slot: s })?;
            }
            OpKind::Send { .. } | OpKind::Write { .. } => {
                self.done.insert(slot.id, Ok(()));
            }
        }
        Ok(())
    }

    fn read_error(&mut self) -> Result<()> {
        let mut err = sys::fi_cq_err_entry::default();
        // SAFETY: `cq` is open; `err` is a zeroed fi_cq_err_entry (err_data_size 0 lets the
        // provider point err_data at its own buffer).
        let ret = unsafe { sys::fis_cq_readerr(self.cq, &mut err, 0) };
        if ret == -(sys::FI_EAGAIN as isize) {
            return Ok(());
        }
        check("fi_cq_readerr", ret as i64)?;
        let mut buf = vec![0u8; 256];
        // SAFETY: `cq` is open; err_data comes from the entry just read; buf has 256 bytes.
        let p = unsafe { sys::fis_cq_strerror(self.cq, err.prov_errno, err.err_data, buf.as_mut_ptr().cast(), 256) };
        // SAFETY: fi_cq_strerror returns a NUL-terminated string (ours or the provider's) or NULL.
        let prov_message = unsafe { c_str(p) };
        let slot = self.inflight.remove(&(err.op_context as usize));
        self.observe(&Event::Failed {
            op: slot.as_ref().map(|s| s.id),
            err: err.err,
            prov_errno: err.prov_errno,
        });
        let op = slot
            .as_ref()
            .map_or_else(|| "operation".to_string(), |s| s.kind.to_string());
        let error = FabricError::Completion {
            provider: self.provider.clone(),
            op,
            err: err.err,
            message: strerror(err.err),
            prov_errno: err.prov_errno,
            prov_message,
        };
        match slot {
            Some(slot) => {
                self.release(&slot.kind);
                match slot.kind {
                    // A failed receive (e.g. cancelled or truncated): report it and keep a
                    // receive posted in its slot.
                    OpKind::Recv { slot: s } => {
                        self.async_errors.push_back(error);
                        self.submit(OpKind::Recv { slot: s })?;
                    }
                    _ => {
                        self.done.insert(slot.id, Err(error));
                    }
                }
            }
            None => self.async_errors.push_back(error),
        }
        Ok(())
    }

    fn wait<T>(
        &mut self,
        timeout: Duration,
        what: impl Fn() -> String,
        mut ready: impl FnMut(&mut Self) -> Option<T>,
    ) -> Result<T> {
        let start = Instant::now();
        loop {
            if let Some(e) = self.async_errors.pop_front() {
                return Err(e);
            }
            if let Some(v) = ready(self) {
                return Ok(v);
            }
            if self.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) {
                return Err(FabricError::Cancelled { what: what() });
            }
            if start.elapsed() > timeout {
                return Err(FabricError::Timeout {
                    waited: timeout,
                    what: what(),
                });
            }
            if self.progress()? == 0 {
                std::thread::yield_now();
            }
        }
    }

    /// Waits for an operation's completion and returns its outcome.
    pub fn wait_op(&mut self, op: OpId, timeout: Duration) -> Result<()> {
        self.wait(
            timeout,
            || format!("completion of operation {}", op.0),
            |e| e.done.remove(&op.0),
        )?
    }

    /// Whether an operation has completed (its outcome is then collected with [`Endpoint::wait_op`]).
    pub fn is_done(&self, op: OpId) -> bool {
        self.done.contains_key(&op.0)
    }

    /// Waits for the next control message.
    pub fn recv_message(&mut self, timeout: Duration) -> Result<Vec<u8>> {
        self.wait(timeout, || "a control message".into(), |e| e.received.pop_front())
    }

    /// Waits for a remote write carrying immediate `data` (masked to `cq_data_size`);
    /// other immediates that arrive meanwhile are kept.
    pub fn wait_remote_write(&mut self, data: u64, timeout: Duration) -> Result<()> {
        let want = self.mask_cq_data(data);
        self.wait(
            timeout,
            || format!("a remote write with immediate {want:#x}"),
            |e| {
                e.remote_writes
                    .iter()
                    .position(|&d| d == want)
                    .map(|i| e.remote_writes.remove(i))
            },
        )
        .map(|_| ())
    }

    /// Waits for the next remote write that carries immediate data and returns
    /// the immediate (masked to `cq_data_size`).
    pub fn wait_any_remote_write(&mut self, timeout: Duration) -> Result<u64> {
        self.wait(
            timeout,
            || "a remote write with immediate data".into(),
            |e| e.remote_writes.pop_front(),
        )
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

    /// A flag every wait checks: once it is set, waits end with
    /// [`FabricError::Cancelled`] (so another thread can abort a run within one
    /// CQ poll; dropping the endpoint then frees everything).
    pub fn set_cancel(&mut self, flag: Arc<AtomicBool>) {
        self.cancel = Some(flag);
    }

    /// Operations posted or parked and not yet completed (receives included).
    pub fn outstanding(&self) -> usize {
        self.inflight.len() + self.pending.len()
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
    let (call, len, remote_addr, key, data, flags) = match slot.kind {
        OpKind::Recv { .. } => (Call::Recv, MSG_SLOT_SIZE, 0, 0, None, 0),
        OpKind::Send { len, .. } => (Call::Send, len, 0, 0, None, 0),
        OpKind::Write {
            len, raddr, key, data, ..
        } => (
            Call::WriteMsg,
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
        len: len as u64,
        remote_addr,
        key,
        data,
        flags,
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
