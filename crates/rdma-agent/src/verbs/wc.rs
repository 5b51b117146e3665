//! Names of work completion statuses and opcodes, as libibverbs spells them.

/// The symbolic name and meaning of a work completion status, as libibverbs
/// spells them, so failures read "IBV_WC_REM_ACCESS_ERR (remote access error)".
pub fn wc_status_name(status: u32) -> (&'static str, &'static str) {
    match status {
        0 => ("IBV_WC_SUCCESS", "success"),
        1 => ("IBV_WC_LOC_LEN_ERR", "local length error"),
        2 => ("IBV_WC_LOC_QP_OP_ERR", "local QP operation error"),
        3 => ("IBV_WC_LOC_EEC_OP_ERR", "local EE context operation error"),
        4 => ("IBV_WC_LOC_PROT_ERR", "local protection error"),
        5 => ("IBV_WC_WR_FLUSH_ERR", "work request flushed error"),
        6 => ("IBV_WC_MW_BIND_ERR", "memory bind operation error"),
        7 => ("IBV_WC_BAD_RESP_ERR", "bad response error"),
        8 => ("IBV_WC_LOC_ACCESS_ERR", "local access error"),
        9 => ("IBV_WC_REM_INV_REQ_ERR", "remote invalid request error"),
        10 => ("IBV_WC_REM_ACCESS_ERR", "remote access error"),
        11 => ("IBV_WC_REM_OP_ERR", "remote operation error"),
        12 => ("IBV_WC_RETRY_EXC_ERR", "transport retry counter exceeded"),
        13 => ("IBV_WC_RNR_RETRY_EXC_ERR", "RNR retry counter exceeded"),
        14 => ("IBV_WC_LOC_RDD_VIOL_ERR", "local RDD violation error"),
        15 => ("IBV_WC_REM_INV_RD_REQ_ERR", "remote invalid RD request"),
        16 => ("IBV_WC_REM_ABORT_ERR", "aborted error"),
        17 => ("IBV_WC_INV_EECN_ERR", "invalid EE context number"),
        18 => ("IBV_WC_INV_EEC_STATE_ERR", "invalid EE context state"),
        19 => ("IBV_WC_FATAL_ERR", "fatal error"),
        20 => ("IBV_WC_RESP_TIMEOUT_ERR", "response timeout error"),
        21 => ("IBV_WC_GENERAL_ERR", "general error"),
        22 => ("IBV_WC_TM_ERR", "TM error"),
        23 => ("IBV_WC_TM_RNDV_INCOMPLETE", "TM software rendezvous"),
        _ => ("IBV_WC_UNKNOWN", "unknown status"),
    }
}

/// The operation a work completion reports, named for messages.
pub fn wc_opcode_name(opcode: u32) -> &'static str {
    match opcode {
        0 => "SEND",
        1 => "WRITE",
        2 => "READ",
        3 => "COMPARE_SWAP",
        4 => "FETCH_ADD",
        128 => "RECV",
        129 => "RECV_RDMA_WITH_IMM",
        _ => "OP",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_remote_access_error() {
        assert_eq!(wc_status_name(10), ("IBV_WC_REM_ACCESS_ERR", "remote access error"));
        assert_eq!(wc_status_name(5).0, "IBV_WC_WR_FLUSH_ERR");
        assert_eq!(wc_status_name(999).0, "IBV_WC_UNKNOWN");
    }
}
