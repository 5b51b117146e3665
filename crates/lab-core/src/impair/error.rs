//! What `impair` and the counter reads can fail with.

use lab_remote::ssh::SshError;

use crate::lab::LabError;

/// Errors of `impair` and of reading counters.
#[derive(Debug, thiserror::Error)]
pub enum ImpairError {
    /// The lab is not usable.
    #[error(transparent)]
    Lab(#[from] LabError),
    /// SSH failed.
    #[error(transparent)]
    Ssh(#[from] SshError),
    /// The options do not make a netem configuration.
    #[error("{0}")]
    Spec(String),
    /// labctl does not know which NIC carries the node's RDMA traffic.
    #[error("node `{node}`: no data NIC is recorded for it (only labs with `fabric: rxe` record the NIC under their RDMA device); nothing to impair")]
    NoDataNic {
        /// The node.
        node: String,
    },
    /// On a host labctl does not own, the data NIC has a root qdisc
    /// someone else configured: impairing would replace it.
    #[error("node `{node}`: {netdev} has a root qdisc labctl did not set (`{qdisc}`); `impair` would replace it, and `down` could not give it back\n  remove it on the host (`tc qdisc del dev {netdev} root`) if nothing needs it, or leave this node unimpaired")]
    ForeignQdisc {
        /// The node.
        node: String,
        /// Its data NIC.
        netdev: String,
        /// The qdisc's line of `tc qdisc show`.
        qdisc: String,
    },
    /// The node's RDMA device is a NIC that sends RDMA itself: netem on its
    /// netdev would shape the node's IP traffic only.
    #[error("node `{node}`: {device} is a hardware RDMA device ({sysfs}): it sends RDMA itself, never through the kernel's qdiscs, so netem on {netdev} would shape the node's IP traffic only (TCP bulk, SSH, IPoIB), not RDMA\n  add --ip-only to shape that IP traffic anyway; RDMA between hardware NICs is impaired in the network (a switch, an impairment appliance), or in a lab with `fabric: rxe`, whose RDMA is kernel traffic")]
    RdmaOffloaded {
        /// The node.
        node: String,
        /// Its RDMA device.
        device: String,
        /// The device's sysfs path (under its bus, not devices/virtual).
        sysfs: String,
        /// The netdev netem would go on.
        netdev: String,
    },
    /// `tc` refused the configuration or is missing.
    #[error("node `{node}`: `{command}` failed (exit status {status}): {stderr}\n  check that the node has tc (iproute2) and the sch_netem kernel module")]
    Tc {
        /// The node.
        node: String,
        /// The command line.
        command: String,
        /// Its exit status.
        status: i32,
        /// What it said.
        stderr: String,
    },
}
