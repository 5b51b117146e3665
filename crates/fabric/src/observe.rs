//! What an [`Endpoint`](crate::Endpoint) does, told to whoever watches it:
//! the agent's `run --trace` records these as the libfabric equivalents of
//! the verbs events (registrations, `fi_av_insert`, each `fi_writemsg`,
//! `fi_send` and `fi_recv` posted, each CQ entry with its flags and remote
//! CQ data, error entries).
//!
//! An endpoint without an observer pays one branch per hook. This module
//! knows nothing of traces or clocks: the observer stamps the time.

use fabric_sys as sys;

/// The libfabric call that posted an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// `fi_writemsg`: an RMA write.
    WriteMsg,
    /// `fi_send`: a control message.
    Send,
    /// `fi_recv`: a receive buffer for one control message.
    Recv,
}

impl Call {
    /// libfabric's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Call::WriteMsg => "fi_writemsg",
            Call::Send => "fi_send",
            Call::Recv => "fi_recv",
        }
    }
}

/// One thing the endpoint did.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// A buffer was registered (`fi_mr_reg`).
    Registered {
        /// Its buffer's virtual address (what a peer writes to under
        /// `FI_MR_VIRT_ADDR`; other providers take offsets from 0).
        addr: u64,
        /// Its length.
        len: u64,
        /// The key a peer names it by.
        key: u64,
        /// Whether peers may write it (`FI_REMOTE_WRITE`).
        remote: bool,
    },
    /// A peer's address went into the address vector (`fi_av_insert`).
    PeerInserted {
        /// The `fi_addr_t` it got.
        fi_addr: u64,
        /// The peer's address as the provider prints it.
        address: &'a str,
    },
    /// An operation was posted (accepted by the provider, not `-FI_EAGAIN`).
    Posted {
        /// Which call.
        call: Call,
        /// The operation's id (its [`OpId`](crate::OpId); the completion carries it).
        op: u64,
        /// The peer's address-vector entry (sends and writes; None for a receive).
        dest: Option<u64>,
        /// Bytes (a receive: the room).
        len: u64,
        /// Remote address written (writes; 0 otherwise).
        remote_addr: u64,
        /// The remote region's key (writes; 0 otherwise).
        key: u64,
        /// Remote CQ data put on a write.
        data: Option<u64>,
        /// The flags passed (writes: `FI_COMPLETION | FI_DELIVERY_COMPLETE | ...`).
        flags: u64,
    },
    /// A CQ entry was read.
    Completed {
        /// The operation it completes; None for a target-side entry (a peer's
        /// write with remote CQ data carries no context of ours).
        op: Option<u64>,
        /// The entry's flags (`FI_RMA | FI_WRITE`, `FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA`, ...).
        flags: u64,
        /// The entry's length.
        len: u64,
        /// Remote CQ data, when the entry carries it.
        data: Option<u64>,
    },
    /// An error entry was read (`fi_cq_readerr`).
    Failed {
        /// The operation it fails, when known.
        op: Option<u64>,
        /// libfabric's error number (positive).
        err: i32,
        /// The provider's own error number.
        prov_errno: i32,
    },
}

/// Whoever watches an endpoint. `Send`: the endpoint is.
pub type Observer = Box<dyn FnMut(&Event<'_>) + Send>;

/// The flag names of a CQ entry or an operation, `FI_RMA|FI_WRITE`.
pub fn flag_names(flags: u64) -> String {
    const NAMES: [(u32, &str); 18] = [
        (sys::FI_MSG, "FI_MSG"),
        (sys::FI_RMA, "FI_RMA"),
        (sys::FI_TAGGED, "FI_TAGGED"),
        (sys::FI_ATOMIC, "FI_ATOMIC"),
        (sys::FI_READ, "FI_READ"),
        (sys::FI_WRITE, "FI_WRITE"),
        (sys::FI_RECV, "FI_RECV"),
        (sys::FI_SEND, "FI_SEND"),
        (sys::FI_REMOTE_READ, "FI_REMOTE_READ"),
        (sys::FI_REMOTE_WRITE, "FI_REMOTE_WRITE"),
        (sys::FI_MULTI_RECV, "FI_MULTI_RECV"),
        (sys::FI_REMOTE_CQ_DATA, "FI_REMOTE_CQ_DATA"),
        (sys::FI_MORE, "FI_MORE"),
        (sys::FI_COMPLETION, "FI_COMPLETION"),
        (sys::FI_INJECT, "FI_INJECT"),
        (sys::FI_INJECT_COMPLETE, "FI_INJECT_COMPLETE"),
        (sys::FI_TRANSMIT_COMPLETE, "FI_TRANSMIT_COMPLETE"),
        (sys::FI_DELIVERY_COMPLETE, "FI_DELIVERY_COMPLETE"),
    ];
    let mut names: Vec<&str> = Vec::new();
    let mut known = 0u64;
    for (bit, name) in NAMES {
        known |= u64::from(bit);
        if flags & u64::from(bit) != 0 {
            names.push(name);
        }
    }
    let rest = flags & !known;
    let mut out = names.join("|");
    if rest != 0 {
        if !out.is_empty() {
            out.push('|');
        }
        out.push_str(&format!("{rest:#x}"));
    }
    out
}

/// A CQ entry's kind in one word, for a completion's name: what completed
/// (`FI_WRITE`, `FI_SEND`, `FI_RECV`) or, on the target, `FI_REMOTE_WRITE`.
pub fn completion_name(flags: u64) -> &'static str {
    let has = |bit: u32| flags & u64::from(bit) != 0;
    if has(sys::FI_REMOTE_WRITE) {
        "FI_REMOTE_WRITE"
    } else if has(sys::FI_REMOTE_READ) {
        "FI_REMOTE_READ"
    } else if has(sys::FI_RECV) {
        "FI_RECV"
    } else if has(sys::FI_SEND) {
        "FI_SEND"
    } else if has(sys::FI_WRITE) {
        "FI_WRITE"
    } else if has(sys::FI_READ) {
        "FI_READ"
    } else {
        "FI_CQ_ENTRY"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_flags_in_libfabric_order_and_keeps_unknown_bits() {
        let write = u64::from(sys::FI_RMA | sys::FI_WRITE);
        assert_eq!(flag_names(write), "FI_RMA|FI_WRITE");
        assert_eq!(completion_name(write), "FI_WRITE");
        let target = u64::from(sys::FI_RMA | sys::FI_REMOTE_WRITE | sys::FI_REMOTE_CQ_DATA);
        assert_eq!(flag_names(target), "FI_RMA|FI_REMOTE_WRITE|FI_REMOTE_CQ_DATA");
        assert_eq!(completion_name(target), "FI_REMOTE_WRITE");
        assert_eq!(completion_name(u64::from(sys::FI_MSG | sys::FI_RECV)), "FI_RECV");
        assert_eq!(flag_names(1 << 62), "0x4000000000000000");
        assert_eq!(
            flag_names(u64::from(sys::FI_SEND) | 1 << 62),
            "FI_SEND|0x4000000000000000"
        );
        assert_eq!(flag_names(0), "");
    }
}
