//! One RC QP with its PD, CQ and registered buffers, all created with
//! sideway on a device opened by name, plus an allocation-free data path:
//! work request lists are built once ([`SendChain`], [`RecvChain`]) and posted
//! many times with raw `ibv_post_send`/`ibv_post_recv`; completions are polled
//! into a caller-provided array.
//!
//! Soundness rests on ownership: buffers are only ever added to a [`Link`],
//! never removed, and a chain remembers which link built it, so every
//! scatter/gather entry posted points into memory the link keeps allocated
//! until after its QP is destroyed (field order below). A buffer may be
//! deregistered and registered again ([`Link::deregister_buffer`], for the
//! mr-cache workload); its memory stays, so a stale lkey in an old chain
//! is refused by the device, it never reaches memory that is not ours.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdma_mummy_sys as sys;
use sideway::ibverbs::completion::{BasicCompletionQueue, CompletionChannel, CompletionQueue};
use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{BasicQueuePair, QueuePair, QueuePairAttribute};
use sideway::ibverbs::AccessFlags;

use super::device::verbs_err;
pub use super::device::{carrier_facts, device_names, mtu_bytes, open_device, port_active_mtu, LinkError};
use super::posted::traced_send;
use super::wr::{Access, BufId, Completion, LocalSlice, RecvChain, RemoteBuf, SendChain, SendOp, SendWr};

/// How to build a link.
#[derive(Debug, Clone)]
pub struct LinkConfig {
    /// RDMA device name ("rxe0").
    pub device: String,
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Largest inline payload.
    pub max_inline: u32,
    /// Create a completion channel for event-driven completion.
    pub completion_channel: bool,
    /// RC QPs to create (at least 1), all on the one CQ and PD; the bandwidth
    /// workloads spread their requests over them (perftest's `-q`).
    pub num_qps: u32,
}

/// A link's trace recorder ([`crate::trace`]); None: nothing is recorded.
pub type LinkTracer = Option<Box<crate::trace::Tracer>>;

/// Page-aligned, zeroed memory that we register.
struct AlignedMem {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl AlignedMem {
    fn new(len: usize) -> Result<AlignedMem, LinkError> {
        let layout = Layout::from_size_align(len.max(8), 4096).map_err(|e| verbs_err("buffer layout", e))?;
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(|| verbs_err(format!("allocating {len} B"), "out of memory"))?;
        Ok(AlignedMem { ptr, layout })
    }
}

impl Drop for AlignedMem {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this very layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

struct Buffer {
    // Field order matters: deregister before freeing. None: deregistered
    // (the memory stays until the link drops).
    mr: Option<Arc<MemoryRegion>>,
    mem: AlignedMem,
    len: usize,
    access: Access,
}

static NEXT_LINK_ID: AtomicU64 = AtomicU64::new(1);

/// A reliable-connected QP with everything it needs.
pub struct Link {
    // Field order is drop order: the QP goes first so no DMA can target the
    // buffers while they are deregistered and freed.
    qps: Vec<BasicQueuePair>,
    cq: Arc<BasicCompletionQueue>,
    channel: Option<Arc<CompletionChannel>>,
    buffers: Vec<Buffer>,
    pd: Arc<ProtectionDomain>,
    ctx: Arc<DeviceContext>,
    wcs: Box<[sys::ibv_wc]>,
    id: u64,
    device: String,
    trace: LinkTracer,
}

// SAFETY: all verbs objects may be used from any thread; Link is not Sync and
// every data-path call takes `&mut self`.
unsafe impl Send for Link {}

impl Link {
    /// Opens `cfg.device` and creates PD, CQ (and channel), and an RC QP.
    pub fn open(cfg: &LinkConfig) -> Result<Link, LinkError> {
        let ctx = open_device(&cfg.device)?;
        let pd = ctx.alloc_pd().map_err(|e| verbs_err("ibv_alloc_pd", e))?;
        let channel = if cfg.completion_channel {
            let channel = CompletionChannel::new(&ctx).map_err(|e| verbs_err("ibv_create_comp_channel", e))?;
            channel
                .set_nonblocking(true)
                .map_err(|e| verbs_err("completion channel O_NONBLOCK", e))?;
            Some(channel)
        } else {
            None
        };
        let num_qps = cfg.num_qps.max(1);
        let cqe = (cfg.max_send_wr + cfg.max_recv_wr) * num_qps + 16;
        let mut cq_builder = ctx.create_cq_builder();
        cq_builder.setup_cqe(cqe);
        if let Some(channel) = &channel {
            cq_builder.setup_comp_channel(channel, 0);
        }
        let cq = cq_builder
            .build()
            .map_err(|e| verbs_err(format!("ibv_create_cq({cqe})"), e))?;
        let mut qps = Vec::with_capacity(num_qps as usize);
        for _ in 0..num_qps {
            let mut qp_builder = pd.create_qp_builder();
            qp_builder
                .setup_max_send_wr(cfg.max_send_wr)
                .setup_max_recv_wr(cfg.max_recv_wr)
                .setup_max_send_sge(1)
                .setup_max_recv_sge(1)
                .setup_max_inline_data(cfg.max_inline)
                .setup_send_cq(cq.clone())
                .setup_recv_cq(cq.clone());
            qps.push(qp_builder.build().map_err(|e| {
                verbs_err(
                    format!(
                        "ibv_create_qp #{} of {num_qps} (send {}, recv {}, inline {})",
                        qps.len() + 1,
                        cfg.max_send_wr,
                        cfg.max_recv_wr,
                        cfg.max_inline
                    ),
                    e,
                )
            })?);
        }
        // SAFETY: an all-zero ibv_wc is a valid value of this plain C struct.
        let wcs = vec![unsafe { std::mem::zeroed::<sys::ibv_wc>() }; 32].into_boxed_slice();
        Ok(Link {
            qps,
            cq,
            channel,
            buffers: Vec::new(),
            pd,
            ctx,
            wcs,
            id: NEXT_LINK_ID.fetch_add(1, Ordering::Relaxed),
            device: cfg.device.clone(),
            trace: None,
        })
    }

    /// Records this link's QP moves, registrations, posts and completions
    /// into `tracer` from now on (None: stop recording).
    pub fn set_tracer(&mut self, tracer: LinkTracer) {
        self.trace = tracer;
    }

    /// The tracer, to record connection-level events into.
    pub fn tracer(&mut self) -> Option<&mut crate::trace::Tracer> {
        self.trace.as_deref_mut()
    }

    /// Takes the tracer out (the link records nothing more).
    pub fn take_tracer(&mut self) -> LinkTracer {
        self.trace.take()
    }

    /// The device this link lives on.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// The device context (for port and GID queries).
    pub fn context(&self) -> &Arc<DeviceContext> {
        &self.ctx
    }

    /// The first QP's number (the QP of every workload but the multi-QP bandwidth runs).
    pub fn qp_num(&self) -> u32 {
        self.qp_num_at(0)
    }

    /// QP `i`'s number.
    pub fn qp_num_at(&self, i: usize) -> u32 {
        self.qps[i].qp_number()
    }

    /// How many QPs this link has.
    pub fn num_qps(&self) -> usize {
        self.qps.len()
    }

    /// Moves the first QP (INIT/RTR/RTS) with sideway's checked modify.
    pub fn modify_qp(&mut self, attr: &QueuePairAttribute, what: &str) -> Result<(), LinkError> {
        self.modify_qp_at(0, attr, what)
    }

    /// Moves QP `i` (INIT/RTR/RTS) with sideway's checked modify.
    pub fn modify_qp_at(&mut self, i: usize, attr: &QueuePairAttribute, what: &str) -> Result<(), LinkError> {
        let n = self.qps.len();
        self.qps
            .get_mut(i)
            .ok_or_else(|| LinkError::BadWorkRequest(format!("no QP #{i} (the link has {n})")))?
            .modify(attr)
            .map_err(|e| {
                let which = if n > 1 { format!(" (QP #{i})") } else { String::new() };
                verbs_err(format!("ibv_modify_qp to {what}{which}"), e)
            })?;
        if let Some(tr) = self.trace.as_deref_mut() {
            let qpn = self.qps[i].qp_number();
            let attrs = match what {
                "RTR" => format!(
                    "qpn={qpn} dest_qpn={} rq_psn={:#x} path_mtu={:?} max_dest_rd_atomic={}",
                    attr.dest_qp_num(),
                    attr.rq_psn(),
                    attr.path_mtu(),
                    attr.max_dest_read_atomic()
                ),
                "RTS" => format!("qpn={qpn} sq_psn={:#x}", attr.sq_psn()),
                _ => format!("qpn={qpn}"),
            };
            tr.record(
                i as u32,
                crate::trace::What::Qp {
                    state: what.to_string(),
                    attrs,
                },
            );
        }
        Ok(())
    }

    /// Allocates, zeroes, and registers a buffer of `len` bytes.
    pub fn add_buffer(&mut self, len: usize, access: Access) -> Result<BufId, LinkError> {
        let mem = AlignedMem::new(len)?;
        let mr = self.register(&mem, len, access)?;
        self.trace_registration(mem.ptr.as_ptr() as u64, len, access, &mr);
        self.buffers.push(Buffer {
            mr: Some(mr),
            mem,
            len,
            access,
        });
        Ok(BufId(self.buffers.len() - 1))
    }

    fn trace_registration(&mut self, addr: u64, len: usize, access: Access, mr: &MemoryRegion) {
        if let Some(tr) = self.trace.as_deref_mut() {
            let what = crate::trace::What::Mr {
                addr,
                len: len as u64,
                lkey: mr.lkey(),
                rkey: mr.rkey(),
                remote: access == Access::Remote,
            };
            tr.record(0, what);
        }
    }

    fn register(&self, mem: &AlignedMem, len: usize, access: Access) -> Result<Arc<MemoryRegion>, LinkError> {
        let flags = match access {
            Access::Local => AccessFlags::LocalWrite,
            Access::Remote => {
                AccessFlags::LocalWrite | AccessFlags::RemoteRead | AccessFlags::RemoteWrite | AccessFlags::RemoteAtomic
            }
        };
        // SAFETY: `mem` is valid for `len` bytes and is kept alive (and not
        // reallocated) in `self.buffers` until after the QP is destroyed and
        // the MR deregistered (buffers are never removed).
        unsafe { self.pd.reg_mr(mem.ptr.as_ptr() as usize, len.max(8), flags) }
            .map_err(|e| verbs_err(format!("ibv_reg_mr of {len} B"), e))
    }

    /// Deregisters a buffer (ibv_dereg_mr) and keeps its memory, as a program
    /// without a registration cache does after each use. Work requests built
    /// over it before fail with a local protection error; build new ones
    /// after [`Link::register_buffer`]. Deregistering twice is a no-op.
    pub fn deregister_buffer(&mut self, id: BufId) {
        // Dropping the only reference calls ibv_dereg_mr (the link never shares its MRs).
        self.buffers[id.0].mr = None;
    }

    /// Registers a deregistered buffer's memory again (ibv_reg_mr; new lkey
    /// and rkey). A buffer that is registered already stays as it is.
    pub fn register_buffer(&mut self, id: BufId) -> Result<(), LinkError> {
        let b = &self.buffers[id.0];
        if b.mr.is_some() {
            return Ok(());
        }
        let mr = self.register(&b.mem, b.len, b.access)?;
        let (addr, len, access) = (b.mem.ptr.as_ptr() as u64, b.len, b.access);
        self.trace_registration(addr, len, access, &mr);
        self.buffers[id.0].mr = Some(mr);
        Ok(())
    }

    /// Whether a buffer is registered (see [`Link::deregister_buffer`]).
    pub fn is_registered(&self, id: BufId) -> bool {
        self.buffers[id.0].mr.is_some()
    }

    /// Length of a buffer.
    pub fn buffer_len(&self, id: BufId) -> usize {
        self.buffers[id.0].len
    }

    /// Reads a buffer. Call only when no work request targeting it is in
    /// flight (after its completion), or the bytes may be mid-update.
    pub fn buffer(&self, id: BufId) -> &[u8] {
        let b = &self.buffers[id.0];
        // SAFETY: the allocation is `len` bytes (at least), initialised (zeroed),
        // and lives as long as `self`; the NIC writes only while the caller has
        // work outstanding, which the protocol of each workload rules out here.
        unsafe { std::slice::from_raw_parts(b.mem.ptr.as_ptr(), b.len) }
    }

    /// Reads one byte of a buffer that the peer may be writing right now
    /// (RDMA WRITE into it), as perftest's write ping-pong polls its buffer's
    /// last byte: a volatile read, then an acquire fence so the bytes the
    /// same WRITE delivered before it are seen too.
    pub fn read_byte_volatile(&self, id: BufId, offset: usize) -> u8 {
        let b = &self.buffers[id.0];
        assert!(
            offset < b.len,
            "offset {offset} outside buffer #{} of {} B",
            id.0,
            b.len
        );
        // SAFETY: `offset` is inside the live allocation (checked above); a
        // volatile read of a u8 is valid while the NIC (kernel) writes it.
        let v = unsafe { std::ptr::read_volatile(b.mem.ptr.as_ptr().add(offset)) };
        std::sync::atomic::fence(Ordering::Acquire);
        v
    }

    /// Writes a buffer (same caveat as [`Link::buffer`]).
    pub fn buffer_mut(&mut self, id: BufId) -> &mut [u8] {
        let b = &self.buffers[id.0];
        // SAFETY: as in `buffer`, and `&mut self` makes this the only Rust view.
        unsafe { std::slice::from_raw_parts_mut(b.mem.ptr.as_ptr(), b.len) }
    }

    /// Two distinct buffers at once (a reduction's input and output).
    /// Panics when both are the same buffer.
    pub fn buffer_pair_mut(&mut self, a: BufId, b: BufId) -> (&mut [u8], &mut [u8]) {
        assert_ne!(a, b, "one buffer cannot be borrowed twice at once");
        let (r, w) = (&self.buffers[a.0], &self.buffers[b.0]);
        // SAFETY: two distinct allocations of this link (checked above), each
        // valid for its length while the link lives; `&mut self` makes these
        // the only Rust views of them.
        unsafe {
            (
                std::slice::from_raw_parts_mut(r.mem.ptr.as_ptr(), r.len),
                std::slice::from_raw_parts_mut(w.mem.ptr.as_ptr(), w.len),
            )
        }
    }

    /// Reads `len` bytes of a buffer from `offset`: one range whose work
    /// requests are done while others may still target the rest of the
    /// buffer (the bandwidth loops' slots), so no Rust reference covers
    /// memory the NIC is writing. Panics outside the buffer (a caller's bug).
    pub fn slice(&self, id: BufId, offset: usize, len: usize) -> &[u8] {
        let b = &self.buffers[id.0];
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= b.len),
            "range {offset}+{len} outside buffer #{} of {} B",
            id.0,
            b.len
        );
        // SAFETY: the range is inside the live, initialised allocation
        // (checked above); the caller has no work request on it in flight.
        unsafe { std::slice::from_raw_parts(b.mem.ptr.as_ptr().add(offset), len) }
    }

    /// Writes `len` bytes of a buffer from `offset` (as [`Link::slice`]).
    pub fn slice_mut(&mut self, id: BufId, offset: usize, len: usize) -> &mut [u8] {
        let b = &self.buffers[id.0];
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= b.len),
            "range {offset}+{len} outside buffer #{} of {} B",
            id.0,
            b.len
        );
        // SAFETY: as in `slice`, and `&mut self` makes this the only Rust view.
        unsafe { std::slice::from_raw_parts_mut(b.mem.ptr.as_ptr().add(offset), len) }
    }

    /// The capability blob of a buffer for the peer.
    pub fn remote_buf(&self, id: BufId) -> RemoteBuf {
        let b = &self.buffers[id.0];
        RemoteBuf {
            addr: b.mem.ptr.as_ptr() as u64,
            // A deregistered buffer has no rkey; 0 is never a valid one on rxe or mlx5.
            rkey: b.mr.as_ref().map_or(0, |mr| mr.rkey()),
            len: b.len as u64,
        }
    }

    fn sge(&self, s: &LocalSlice) -> Result<Option<sys::ibv_sge>, LinkError> {
        let b = self
            .buffers
            .get(s.buf.0)
            .ok_or_else(|| LinkError::BadWorkRequest(format!("no buffer #{}", s.buf.0)))?;
        if s.offset.checked_add(s.len).is_none_or(|end| end > b.len) || s.len > u32::MAX as usize {
            return Err(LinkError::BadWorkRequest(format!(
                "slice {}+{} outside buffer #{} of {} B",
                s.offset, s.len, s.buf.0, b.len
            )));
        }
        if s.len == 0 {
            return Ok(None);
        }
        let mr = b.mr.as_ref().ok_or_else(|| {
            LinkError::BadWorkRequest(format!("buffer #{} is deregistered (register it again first)", s.buf.0))
        })?;
        Ok(Some(sys::ibv_sge {
            addr: b.mem.ptr.as_ptr() as u64 + s.offset as u64,
            length: s.len as u32,
            lkey: mr.lkey(),
        }))
    }

    /// Builds a linked list of send work requests over our buffers.
    pub fn send_chain(&self, wrs: &[SendWr]) -> Result<SendChain, LinkError> {
        let mut sges = Vec::with_capacity(wrs.len());
        let mut raw = Vec::with_capacity(wrs.len());
        for wr in wrs {
            use sys::ibv_wr_opcode::*;
            // SAFETY: an all-zero ibv_send_wr is valid (null pointers, zero unions).
            let mut r: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
            r.wr_id = wr.wr_id;
            let (local, opcode) = match wr.op {
                SendOp::Write {
                    local,
                    remote_addr,
                    rkey,
                } => {
                    r.wr.rdma = sys::rdma_t { remote_addr, rkey };
                    (local, IBV_WR_RDMA_WRITE)
                }
                SendOp::WriteImm {
                    local,
                    remote_addr,
                    rkey,
                    imm,
                } => {
                    r.wr.rdma = sys::rdma_t { remote_addr, rkey };
                    r.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
                    (local, IBV_WR_RDMA_WRITE_WITH_IMM)
                }
                SendOp::Read {
                    local,
                    remote_addr,
                    rkey,
                } => {
                    r.wr.rdma = sys::rdma_t { remote_addr, rkey };
                    (local, IBV_WR_RDMA_READ)
                }
                SendOp::Send { local } => (local, IBV_WR_SEND),
                SendOp::SendImm { local, imm } => {
                    r.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
                    (local, IBV_WR_SEND_WITH_IMM)
                }
                SendOp::FetchAdd {
                    local,
                    remote_addr,
                    rkey,
                    add,
                } => {
                    r.wr.atomic = sys::atomic_t {
                        remote_addr,
                        compare_add: add,
                        swap: 0,
                        rkey,
                    };
                    (local, IBV_WR_ATOMIC_FETCH_AND_ADD)
                }
                SendOp::CompareSwap {
                    local,
                    remote_addr,
                    rkey,
                    compare,
                    swap,
                } => {
                    r.wr.atomic = sys::atomic_t {
                        remote_addr,
                        compare_add: compare,
                        swap,
                        rkey,
                    };
                    (local, IBV_WR_ATOMIC_CMP_AND_SWP)
                }
            };
            if matches!(wr.op, SendOp::FetchAdd { .. } | SendOp::CompareSwap { .. }) && local.len != 8 {
                return Err(LinkError::BadWorkRequest("atomic result slice must be 8 bytes".into()));
            }
            r.opcode = opcode;
            let mut flags = 0;
            if wr.signaled {
                flags |= sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
            }
            if wr.inline && local.len > 0 && opcode != IBV_WR_RDMA_READ {
                flags |= sys::ibv_send_flags::IBV_SEND_INLINE.0;
            }
            r.send_flags = flags;
            let sge = self.sge(&local)?;
            r.num_sge = i32::from(sge.is_some());
            // A placeholder keeps indices aligned; num_sge 0 means it is unused.
            sges.push(sge.unwrap_or(sys::ibv_sge {
                addr: 0,
                length: 0,
                lkey: 0,
            }));
            raw.push(r);
        }
        let mut sges = sges.into_boxed_slice();
        let mut wrs_box = raw.into_boxed_slice();
        let n = wrs_box.len();
        let wrs_ptr = wrs_box.as_mut_ptr();
        for i in 0..n {
            if wrs_box[i].num_sge > 0 {
                wrs_box[i].sg_list = &mut sges[i];
            }
            wrs_box[i].next = if i + 1 < n {
                // SAFETY: i + 1 < n, so the pointer stays inside the boxed slice.
                unsafe { wrs_ptr.add(i + 1) }
            } else {
                std::ptr::null_mut()
            };
        }
        Ok(SendChain {
            link_id: self.id,
            wrs: wrs_box,
            sges,
        })
    }

    /// Builds a list of receive work requests; wr_id of entry i is `first_wr_id + i`.
    pub fn recv_chain(&self, slices: &[LocalSlice], first_wr_id: u64) -> Result<RecvChain, LinkError> {
        let mut sges = Vec::with_capacity(slices.len());
        let mut raw = Vec::with_capacity(slices.len());
        for (i, s) in slices.iter().enumerate() {
            let sge = self.sge(s)?;
            raw.push(sys::ibv_recv_wr {
                wr_id: first_wr_id + i as u64,
                next: std::ptr::null_mut(),
                sg_list: std::ptr::null_mut(),
                num_sge: i32::from(sge.is_some()),
            });
            sges.push(sge.unwrap_or(sys::ibv_sge {
                addr: 0,
                length: 0,
                lkey: 0,
            }));
        }
        let mut sges = sges.into_boxed_slice();
        let mut wrs = raw.into_boxed_slice();
        for i in 0..wrs.len() {
            if wrs[i].num_sge > 0 {
                wrs[i].sg_list = &mut sges[i];
            }
        }
        Ok(RecvChain {
            link_id: self.id,
            wrs,
            _sges: sges,
        })
    }

    /// Posts the whole send chain with one ibv_post_send on the first QP.
    pub fn post_send(&mut self, chain: &mut SendChain) -> Result<(), LinkError> {
        self.post_send_on(0, chain)
    }

    /// Posts the whole send chain with one ibv_post_send on QP `qp`.
    pub fn post_send_on(&mut self, qp: usize, chain: &mut SendChain) -> Result<(), LinkError> {
        let qp_index = qp;
        let qp = self.qp_ptr(qp)?;
        if chain.link_id != self.id {
            return Err(LinkError::BadWorkRequest("send chain built for another link".into()));
        }
        if chain.wrs.is_empty() {
            return Ok(());
        }
        let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the chain was built by this link (checked above): every sge
        // points into one of our buffers, whose memory outlives the QP (an
        // lkey gone stale by deregistration is refused by the device); the
        // list is linked within the chain's own boxed slice.
        let rc = unsafe { sys::ibv_post_send(qp, chain.wrs.as_mut_ptr(), &mut bad) };
        if rc != 0 {
            return Err(LinkError::Post {
                call: "ibv_post_send",
                source: std::io::Error::from_raw_os_error(rc),
            });
        }
        if let Some(tr) = self.trace.as_deref_mut() {
            for (wr, sge) in chain.wrs.iter().zip(chain.sges.iter()) {
                if tr.sample_post() {
                    tr.record(qp_index as u32, traced_send(wr, sge));
                }
            }
        }
        Ok(())
    }

    /// Posts receive request `i` of `chain` alone on the first QP.
    pub fn post_recv_one(&mut self, chain: &mut RecvChain, i: usize) -> Result<(), LinkError> {
        self.post_recv_one_on(0, chain, i)
    }

    /// Posts receive request `i` of `chain` alone on QP `qp`.
    pub fn post_recv_one_on(&mut self, qp: usize, chain: &mut RecvChain, i: usize) -> Result<(), LinkError> {
        let qp_index = qp;
        let qp = self.qp_ptr(qp)?;
        if chain.link_id != self.id {
            return Err(LinkError::BadWorkRequest("recv chain built for another link".into()));
        }
        let wr = chain
            .wrs
            .get_mut(i)
            .ok_or_else(|| LinkError::BadWorkRequest(format!("no receive request #{i}")))?;
        wr.next = std::ptr::null_mut();
        let mut bad: *mut sys::ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: as in `post_send`; `wr` is a single, unlinked request.
        let rc = unsafe { sys::ibv_post_recv(qp, wr, &mut bad) };
        if rc != 0 {
            return Err(LinkError::Post {
                call: "ibv_post_recv",
                source: std::io::Error::from_raw_os_error(rc),
            });
        }
        if let Some(tr) = self.trace.as_deref_mut() {
            let len = if wr.num_sge > 0 && !wr.sg_list.is_null() {
                // SAFETY: a receive chain's sg_list points into its own boxed sges.
                unsafe { (*wr.sg_list).length }
            } else {
                0
            };
            let wr_id = wr.wr_id;
            if tr.sample_post() {
                tr.record(qp_index as u32, crate::trace::What::PostRecv { wr_id, len });
            }
        }
        Ok(())
    }

    /// Posts every receive request of `chain`.
    pub fn post_recv_all(&mut self, chain: &mut RecvChain) -> Result<(), LinkError> {
        for i in 0..chain.len() {
            self.post_recv_one(chain, i)?;
        }
        Ok(())
    }

    fn qp_ptr(&self, i: usize) -> Result<*mut sys::ibv_qp, LinkError> {
        self.qps
            .get(i)
            // SAFETY: the raw handle is only passed to ibv_post_send/recv by
            // this link's `&mut self` methods, while the QP (owned by `self`) lives.
            .map(|qp| unsafe { qp.qp() }.as_ptr())
            .ok_or_else(|| LinkError::BadWorkRequest(format!("no QP #{i} (the link has {})", self.qps.len())))
    }

    /// Polls up to `out.len()` completions; returns how many were written.
    pub fn poll(&mut self, out: &mut [Completion]) -> Result<usize, LinkError> {
        let want = out.len().min(self.wcs.len()) as i32;
        // SAFETY: `wcs` has room for `want` entries; the CQ is live.
        let n = unsafe { sys::ibv_poll_cq(self.cq.cq().as_ptr(), want, self.wcs.as_mut_ptr()) };
        if n < 0 {
            return Err(LinkError::Poll(std::io::Error::from_raw_os_error(-n)));
        }
        for (slot, wc) in out.iter_mut().zip(self.wcs.iter()).take(n as usize) {
            let has_imm = wc.wc_flags & sys::ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0;
            *slot = Completion {
                wr_id: wc.wr_id,
                status: wc.status,
                opcode: wc.opcode,
                byte_len: wc.byte_len,
                imm: if has_imm {
                    // SAFETY: reading a u32 out of a union of two u32s; any bit pattern is valid.
                    u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data })
                } else {
                    0
                },
                has_imm,
                vendor_err: wc.vendor_err,
            };
        }
        if let Some(tr) = self.trace.as_deref_mut() {
            for (c, wc) in out.iter().zip(self.wcs.iter()).take(n as usize) {
                if tr.sample_completion() {
                    let qp = self.qps.iter().position(|q| q.qp_number() == wc.qp_num).unwrap_or(0);
                    let status = super::wc::wc_status_name(c.status).0;
                    let what = crate::trace::What::Completion {
                        wr_id: c.wr_id,
                        status,
                        // Only wr_id, status, qp_num and vendor_err are valid in a failed
                        // completion (ibv_poll_cq(3)); the trace names it by its post.
                        opcode: if status == "IBV_WC_SUCCESS" {
                            super::wc::wc_opcode_name(c.opcode)
                        } else {
                            agent_proto::v1::FAILED_COMPLETION_OPCODE
                        },
                        byte_len: c.byte_len,
                        imm: c.has_imm.then_some(c.imm),
                    };
                    tr.record(qp as u32, what);
                }
            }
        }
        Ok(n as usize)
    }

    /// Event mode, step 1: asks for an event on the next completion. Callers
    /// poll the CQ once more after arming (a completion may have arrived
    /// between their last poll and the arming, and raises no event), and only
    /// then [`Link::wait_cq_event`]. Without a channel this does nothing.
    pub fn arm_cq(&mut self) -> Result<(), LinkError> {
        if self.channel.is_none() {
            return Ok(());
        }
        // SAFETY: the CQ is live and was created on this link's channel.
        let rc = unsafe { sys::ibv_req_notify_cq(self.cq.cq().as_ptr(), 0) };
        if rc != 0 {
            return Err(verbs_err("ibv_req_notify_cq", std::io::Error::from_raw_os_error(rc)));
        }
        Ok(())
    }

    /// Event mode, step 2: sleeps until the armed CQ raises its event or
    /// `timeout` passes, and acknowledges the event. Returns false on timeout.
    /// Without a channel it yields once and returns true.
    pub fn wait_cq_event(&mut self, timeout: Duration) -> Result<bool, LinkError> {
        let Some(channel) = self.channel.clone() else {
            std::thread::yield_now();
            return Ok(true);
        };
        use std::os::fd::AsRawFd;
        if !super::os::wait_readable(channel.as_raw_fd(), timeout)
            .map_err(|e| verbs_err("poll(completion channel)", e))?
        {
            return Ok(false);
        }
        let mut cq: *mut sys::ibv_cq = std::ptr::null_mut();
        let mut ctx: *mut libc::c_void = std::ptr::null_mut();
        // SAFETY: the channel is live and non-blocking; out pointers are valid.
        let rc = unsafe { sys::ibv_get_cq_event(channel.comp_channel().as_ptr(), &mut cq, &mut ctx) };
        if rc == 0 && !cq.is_null() {
            // SAFETY: acking the one event just received, on the CQ it named
            // (ours: it is the only CQ on this channel).
            unsafe { sys::ibv_ack_cq_events(cq, 1) };
        }
        Ok(true)
    }

    /// Whether this link has a completion channel (servers always do; a side
    /// sleeps on it in event mode, or when it is passive).
    pub fn has_completion_channel(&self) -> bool {
        self.channel.is_some()
    }
}
