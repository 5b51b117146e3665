//! What happens on a node once its machine exists, whatever the provider:
//! wait for SSH (pinning the host key), install the lab's `packages:` (or,
//! where the provider baked them into the image, check they are there), set
//! up rxe on the data NIC (or, on EFA nodes, check that libfabric sees the
//! EFA device), deploy and start rdma-agent, and wait for it to answer. Once
//! every node answers: the lab facts, and with `node_ssh:` the key pair and
//! host keys that let nodes `ssh` each other.
//!
//! Local VMs log in as root; cloud images log in as a user with
//! passwordless sudo (`ubuntu`, `ec2-user`), so privileged steps run under
//! `sudo -n` when the SSH user is not root.
//!
//! One concern a file: `steps` runs a node's provisioning in order, using
//! `packages`, `rdma` (rxe or EFA) and `agent`; `node_files` writes the lab
//! facts and node SSH keys once every node answers; `privilege` and `error`
//! are what they share.

mod agent;
mod error;
mod node_files;
mod packages;
mod privilege;
mod rdma;
mod steps;

pub use agent::{
    check_agent_runs, deploy_agent, node_info, AgentDeploy, AGENT_PATH, AGENT_SECRET_INSTALL, AGENT_START, HOST_LAB,
};
pub use error::ProvisionError;
pub use node_files::{remove_facts, write_facts, write_node_ssh, NodeSsh};
pub use packages::{ensure_packages, PACKAGES};
pub use privilege::as_root;
pub use rdma::{check_efa, setup_rxe, RXE_SETUP};
pub use steps::{provision_node, set_clock, target, NodeJob, BOOT_DONE_MARK};
