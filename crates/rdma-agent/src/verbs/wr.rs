//! What the data path posts and polls: buffer handles and slices, the
//! description of a work request ([`SendWr`], [`SendOp`]), completions, and
//! the pre-built chains of raw work requests a [`super::link::Link`] builds
//! once and posts many times. The chains only hold pointers; the link that
//! built them owns the memory they point into (see link.rs's top doc).

use rdma_mummy_sys as sys;

/// Who may touch a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Only this side's own work requests (source of WRITE/SEND, sink of READ/RECV).
    Local,
    /// Also the peer: LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE | REMOTE_ATOMIC.
    Remote,
}

/// Index of a buffer within its link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufId(pub(super) usize);

/// A range of one of our buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalSlice {
    /// The buffer.
    pub buf: BufId,
    /// Offset in bytes.
    pub offset: usize,
    /// Length in bytes (0 allowed: no scatter/gather entry).
    pub len: usize,
}

/// A peer's registered buffer: the capability blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemoteBuf {
    /// Virtual address of the buffer on the peer.
    pub addr: u64,
    /// Its rkey.
    pub rkey: u32,
    /// Its length.
    pub len: u64,
}

/// The operation of one send work request.
#[derive(Debug, Clone, Copy)]
pub enum SendOp {
    /// RDMA WRITE of `local` to `remote_addr`.
    Write {
        /// Source.
        local: LocalSlice,
        /// Target address on the peer.
        remote_addr: u64,
        /// Target rkey.
        rkey: u32,
    },
    /// RDMA WRITE with immediate data (a zero-length `local` is a pure notification).
    WriteImm {
        /// Source.
        local: LocalSlice,
        /// Target address on the peer.
        remote_addr: u64,
        /// Target rkey.
        rkey: u32,
        /// Immediate, host order.
        imm: u32,
    },
    /// RDMA READ of `remote_addr` into `local`.
    Read {
        /// Sink.
        local: LocalSlice,
        /// Source address on the peer.
        remote_addr: u64,
        /// Source rkey.
        rkey: u32,
    },
    /// SEND of `local`.
    Send {
        /// Source.
        local: LocalSlice,
    },
    /// SEND with immediate data (zero-length: a control notification).
    SendImm {
        /// Source.
        local: LocalSlice,
        /// Immediate, host order.
        imm: u32,
    },
    /// Atomic fetch-and-add on an 8-byte remote word; the old value lands in `local`.
    FetchAdd {
        /// 8-byte sink of the old value.
        local: LocalSlice,
        /// Remote word address (8-byte aligned).
        remote_addr: u64,
        /// Remote rkey.
        rkey: u32,
        /// Addend.
        add: u64,
    },
    /// Atomic compare-and-swap on an 8-byte remote word; the old value lands in `local`.
    CompareSwap {
        /// 8-byte sink of the old value.
        local: LocalSlice,
        /// Remote word address (8-byte aligned).
        remote_addr: u64,
        /// Remote rkey.
        rkey: u32,
        /// Expected value.
        compare: u64,
        /// New value if equal.
        swap: u64,
    },
}

/// One send work request to pre-build.
#[derive(Debug, Clone, Copy)]
pub struct SendWr {
    /// Returned in its completion.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOp,
    /// Ask for a completion (selective signaling leaves most unsignaled).
    pub signaled: bool,
    /// Copy the payload into the WQE (IBV_SEND_INLINE).
    pub inline: bool,
}

/// A completion, copied out of the CQ.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Completion {
    /// The work request's id.
    pub wr_id: u64,
    /// IBV_WC_* status (0 = success).
    pub status: u32,
    /// IBV_WC_* opcode.
    pub opcode: u32,
    /// Bytes received (receive side).
    pub byte_len: u32,
    /// Immediate data, host order, when `has_imm`.
    pub imm: u32,
    /// Whether the completion carried immediate data.
    pub has_imm: bool,
    /// Vendor error code.
    pub vendor_err: u32,
}

/// A pre-built, linked list of send work requests.
pub struct SendChain {
    pub(super) link_id: u64,
    pub(super) wrs: Box<[sys::ibv_send_wr]>,
    // Referenced by `wrs[i].sg_list`; a boxed slice never moves.
    pub(super) sges: Box<[sys::ibv_sge]>,
}

// SAFETY: the raw pointers inside point only into the chain's own boxes and
// the owning link's buffers; posting requires `&mut Link`, which is not shared.
unsafe impl Send for SendChain {}

impl SendChain {
    /// Number of work requests.
    pub fn len(&self) -> usize {
        self.wrs.len()
    }

    /// Whether the chain is empty.
    pub fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }

    /// Turns the completion of request `i` on or off.
    pub fn set_signaled(&mut self, i: usize, signaled: bool) {
        let flag = sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
        let wr = &mut self.wrs[i];
        wr.send_flags = if signaled {
            wr.send_flags | flag
        } else {
            wr.send_flags & !flag
        };
    }

    /// Sets the immediate of request `i` (host order).
    pub fn set_imm(&mut self, i: usize, imm: u32) {
        self.wrs[i].imm_data_invalidated_rkey_union.imm_data = imm.to_be();
    }

    /// Sets the wr_id of request `i`.
    pub fn set_wr_id(&mut self, i: usize, wr_id: u64) {
        self.wrs[i].wr_id = wr_id;
    }

    /// Sets the compare/add and swap operands of atomic request `i`.
    pub fn set_atomic_operands(&mut self, i: usize, compare_add: u64, swap: u64) {
        // Writing Copy union fields is safe; non-atomic requests ignore them.
        self.wrs[i].wr.atomic.compare_add = compare_add;
        self.wrs[i].wr.atomic.swap = swap;
    }
}

/// A pre-built list of receive work requests.
pub struct RecvChain {
    pub(super) link_id: u64,
    pub(super) wrs: Box<[sys::ibv_recv_wr]>,
    pub(super) _sges: Box<[sys::ibv_sge]>,
}

// SAFETY: as for SendChain.
unsafe impl Send for RecvChain {}

impl RecvChain {
    /// Number of work requests.
    pub fn len(&self) -> usize {
        self.wrs.len()
    }

    /// Whether the chain is empty.
    pub fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }
}
