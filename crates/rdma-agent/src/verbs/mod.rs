//! Everything `unsafe` in the agent lives under this module: the rdma_cm
//! wrapper ([`cm`], because sideway cannot carry private data), the data path
//! over QPs/CQs/MRs created with sideway ([`link`]: pre-built work request
//! lists, CQ polling without allocation, completion channel), and two small
//! libc calls (`poll`, `getrusage`).
//!
//! The rest of the crate is `#![deny(unsafe_code)]` and only sees safe types.

pub mod cm;
pub mod link;

use std::os::fd::RawFd;
use std::time::Duration;

pub use cm::{CmError, CmEvent, CmEventKind, CmId, EventChannel};
pub use link::{
    Access, BufId, Completion, Link, LinkConfig, LinkError, LocalSlice, RecvChain, RemoteBuf, SendChain, SendOp, SendWr,
};

/// Transport retries before a send fails with IBV_WC_RETRY_EXC_ERR (both
/// connection modes). Not 7: rxe reads a retry count of 7 as "forever", as
/// the spec does only for RNR retries, and a cut link would hang the run.
pub const TRANSPORT_RETRY_COUNT: u8 = 6;

/// The calling thread's user and system CPU seconds (RUSAGE_THREAD).
pub fn thread_cpu_seconds() -> (f64, f64) {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage; RUSAGE_THREAD only reads the calling thread.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    if rc != 0 {
        return (0.0, 0.0);
    }
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (secs(usage.ru_utime), secs(usage.ru_stime))
}

/// Waits until `fd` is readable or `timeout` passes; `Ok(false)` on timeout.
pub(crate) fn wait_readable(fd: RawFd, timeout: Duration) -> std::io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    loop {
        // SAFETY: `pfd` is one valid pollfd and we pass a count of 1.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        return Ok(rc > 0);
    }
}

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

    #[test]
    fn poll_times_out_on_a_quiet_pipe() {
        let mut fds = [0; 2];
        // SAFETY: test-only; `fds` has room for the two descriptors pipe writes.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        assert!(!wait_readable(fds[0], Duration::from_millis(10)).unwrap());
        // SAFETY: closing the two descriptors this test opened.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }
}
