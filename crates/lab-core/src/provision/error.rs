//! What provisioning a node can fail with.

use lab_providers::ProviderError;
use lab_remote::agent::AgentError;
use lab_remote::ssh::SshError;

/// Errors provisioning one node.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    /// SSH failed.
    #[error(transparent)]
    Ssh(#[from] SshError),
    /// The node's machine died while we waited.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// rxe could not be set up.
    #[error("node `{node}`: SoftRoCE setup failed: {message}")]
    Rxe {
        /// The node.
        node: String,
        /// What the setup script said.
        message: String,
    },
    /// The agent could not be deployed or did not answer.
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// libfabric on an EFA node does not offer the EFA provider.
    #[error("node `{node}`: no EFA device is usable: `fi_info -p efa -t FI_EP_RDM` {message}\n  fix: use an AMI with the EFA software (the AWS Deep Learning AMIs, or install it: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html), and an instance type with EFA")]
    Efa {
        /// The node.
        node: String,
        /// What fi_info said.
        message: String,
    },
    /// The agent build cannot run on the node.
    #[error("node `{node}`: this rdma-agent build cannot run there: {reason}\n  fix: {fix}")]
    AgentIncompatible {
        /// The node.
        node: String,
        /// Why (architecture, glibc, libraries).
        reason: String,
        /// What to do.
        fix: String,
    },
    /// The lab's `packages:` could not be installed, or the image lacks them.
    #[error("node `{node}`: {message}\n  fix: {fix}")]
    Packages {
        /// The node.
        node: String,
        /// What failed, with apt's own error lines.
        message: String,
        /// What to do.
        fix: String,
    },
    /// The node's wall clock could not be read or set.
    #[error("setting the clock from this machine's: {0}")]
    Clock(String),
    /// The agent runs a different version than this labctl.
    #[error("node `{node}`: the deployed rdma-agent reports version {found} but labctl is {expected}; rebuild both from one checkout (cargo build --release -p labctl -p rdma-agent)")]
    AgentVersion {
        /// The node.
        node: String,
        /// What labctl expected.
        expected: String,
        /// What the agent said.
        found: String,
    },
}
