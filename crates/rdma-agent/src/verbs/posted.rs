//! How a posted send work request reads in the trace ([`crate::trace`]):
//! decoding a raw `ibv_send_wr` back into names and fields.

use rdma_mummy_sys as sys;

/// What a posted send request is, for the trace.
pub(super) fn traced_send(wr: &sys::ibv_send_wr, sge: &sys::ibv_sge) -> crate::trace::What {
    use sys::ibv_wr_opcode::*;
    let opcode = wr.opcode;
    let (name, one_sided, atomic, with_imm) = match opcode {
        IBV_WR_RDMA_WRITE => ("WRITE", true, false, false),
        IBV_WR_RDMA_WRITE_WITH_IMM => ("WRITE_WITH_IMM", true, false, true),
        IBV_WR_RDMA_READ => ("READ", true, false, false),
        IBV_WR_SEND => ("SEND", false, false, false),
        IBV_WR_SEND_WITH_IMM => ("SEND_WITH_IMM", false, false, true),
        IBV_WR_ATOMIC_FETCH_AND_ADD => ("FETCH_ADD", false, true, false),
        IBV_WR_ATOMIC_CMP_AND_SWP => ("COMPARE_SWAP", false, true, false),
        _ => ("OP", false, false, false),
    };
    // SAFETY: send_chain wrote the union member the opcode names (rdma for
    // one-sided, atomic for atomics); all members are plain integers.
    let (remote_addr, rkey) = unsafe {
        if one_sided {
            (wr.wr.rdma.remote_addr, wr.wr.rdma.rkey)
        } else if atomic {
            (wr.wr.atomic.remote_addr, wr.wr.atomic.rkey)
        } else {
            (0, 0)
        }
    };
    // SAFETY: a u32 out of a union of u32s; any bit pattern is valid.
    let imm = with_imm.then(|| u32::from_be(unsafe { wr.imm_data_invalidated_rkey_union.imm_data }));
    crate::trace::What::Post {
        opcode: name,
        wr_id: wr.wr_id,
        len: if wr.num_sge > 0 { sge.length } else { 0 },
        remote_addr,
        rkey,
        imm,
        signaled: wr.send_flags & sys::ibv_send_flags::IBV_SEND_SIGNALED.0 != 0,
        inline: wr.send_flags & sys::ibv_send_flags::IBV_SEND_INLINE.0 != 0,
    }
}
