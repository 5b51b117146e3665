//! The provider contract: the [`Provider`] trait every `provider:` of
//! labs.yaml implements, its errors, and what a provider says about a
//! node's machine ([`Liveness`]).

use async_trait::async_trait;

use lab_model::{LabSpec, ResolvedNode};
use lab_state::progress::Reporter;
use lab_state::{LabDir, LabState};

/// Errors from a provider.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The provider is known but not available in this build yet.
    #[error("provider `{0}` is not implemented yet")]
    NotImplemented(String),
    /// A host program is missing.
    #[error("`{program}` is not installed; {hint}")]
    MissingProgram {
        /// The program.
        program: String,
        /// How to install it.
        hint: String,
    },
    /// A port labs.yaml asked for is taken.
    #[error("node `{node}`: port {port} on 127.0.0.1 is already in use; free it or change ssh_port in labs.yaml")]
    PortInUse {
        /// The node.
        node: String,
        /// The port.
        port: u16,
    },
    /// A node's machine stopped or never started.
    #[error(
        "node `{node}`: the VM is not running: {reason}\n--- last lines of its console ({console}) ---\n{console_tail}"
    )]
    NodeDown {
        /// The node.
        node: String,
        /// Why (exit status, QEMU's own message).
        reason: String,
        /// Path of the console log.
        console: String,
        /// Its last lines.
        console_tail: String,
    },
    /// A node's machine is not running, as its provider reports it.
    #[error("node `{node}`: the machine is not running: {reason}")]
    NotRunning {
        /// The node.
        node: String,
        /// What the provider says.
        reason: String,
    },
    /// A provider's command-line tool failed.
    #[error("`{command}` failed ({status}): {stderr}\n  fix: {hint}")]
    CommandFailed {
        /// The command line.
        command: String,
        /// Its exit status, or why there is none.
        status: String,
        /// What it printed on stderr.
        stderr: String,
        /// What to do.
        hint: String,
    },
    /// cloud-init reported an error on a node (Multipass's launch does not).
    #[error("node `{node}`: cloud-init failed on the machine ({status}); the end of /var/log/cloud-init-output.log:\n{log}\n  fix: see the log above (`multipass exec {instance} -- cloud-init status --long` has more); the image must run cloud-init and reach the package mirrors")]
    CloudInitFailed {
        /// The node.
        node: String,
        /// The Multipass instance.
        instance: String,
        /// `cloud-init status --long`'s summary.
        status: String,
        /// The last lines of cloud-init's output log.
        log: String,
    },
    /// A machine the lab would create already exists outside the lab's state.
    #[error("node `{node}`: a Multipass instance `{instance}` already exists ({state}) and is not part of this lab's state\n  fix: delete it with `multipass delete --purge {instance}`, or rename the lab")]
    InstanceExists {
        /// The node.
        node: String,
        /// The instance.
        instance: String,
        /// Its state.
        state: String,
    },
    /// The agent binary cannot run on the lab's nodes.
    #[error("the rdma-agent binary is built for {agent}, but the nodes of this lab are {nodes}\n  fix: {how}")]
    AgentArch {
        /// What the binary is built for.
        agent: String,
        /// The nodes' architecture.
        nodes: String,
        /// How to build a fitting agent.
        how: String,
    },
    /// The image could not be built.
    #[error(transparent)]
    Image(#[from] crate::image::ImageError),
    /// State could not be written.
    #[error(transparent)]
    State(#[from] lab_state::StateError),
    /// The service a provider drives refused or could not be reached (EC2
    /// for `aws`). The provider's own error says what failed and what to do;
    /// [`ProviderError::service_error`] gives it back typed.
    #[error("{error}")]
    Service {
        /// The provider, as labs.yaml names it.
        provider: &'static str,
        /// Its error.
        error: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A node of the plan has no host key in the keys handed to the provider.
    #[error(transparent)]
    HostKey(#[from] crate::node_keys::MissingHostKey),
    /// A host that exists (provider ssh) cannot serve as a node.
    #[error("node `{node}`: {problem}\n  fix: {fix}")]
    Host {
        /// The node.
        node: String,
        /// What is wrong.
        problem: String,
        /// What to do.
        fix: String,
    },
    /// The preflight found problems on one or more hosts (one per line).
    #[error("{0}")]
    Preflight(String),
    /// SSH to a host failed.
    #[error(transparent)]
    Ssh(#[from] lab_remote::ssh::SshError),
    /// A step of this provider that does not exist yet.
    #[error("{0}")]
    NotYet(String),
    /// Anything else, with context.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: std::io::Error,
    },
}

impl ProviderError {
    /// The provider's own error of type `E` behind a [`ProviderError::Service`]
    /// (`AwsError` for `aws`), for a caller that acts on its detail.
    pub fn service_error<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            ProviderError::Service { error, .. } => error.downcast_ref::<E>(),
            _ => None,
        }
    }
}

/// Whether a node's machine runs, as the provider sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "state", content = "detail")]
pub enum Liveness {
    /// Running.
    Running,
    /// Stopped, with the reason.
    Stopped(String),
}

/// A time the provider acted on a node's data NIC from outside the node
/// (the QEMU provider's supervisor restarts a transmit queue QEMU stopped
/// taking frames from), as it recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicRestart {
    /// When.
    pub at: std::time::SystemTime,
    /// The restart itself failed (the NIC may still be stopped).
    pub failed: bool,
    /// What the provider recorded ("data NIC stalled: the guest posted 3
    /// frame(s) QEMU did not take for 500 ms; ...").
    pub detail: String,
}

/// How long a provider's liveness check may ask its command or API.
pub const CHECK_ALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The lifecycle of a lab's machines.
#[async_trait]
pub trait Provider: Send + Sync {
    /// Checks that this host can run the lab, before anything is created.
    async fn preflight(&self, lab: &LabSpec, nodes: &[ResolvedNode]) -> Result<(), ProviderError>;

    /// Creates and boots every node. Fills `state.nodes` (SSH endpoints) and
    /// `state.provider_state`, saving state as resources appear so that a
    /// crash part-way leaves something `delete` can clean. Each node gets
    /// `keys.authorized_key` for root and its own host key pair of
    /// `keys.host_keys`, whose public half goes into `NodeState::host_key`
    /// before anything connects.
    async fn create(
        &self,
        lab: &LabSpec,
        nodes: &[ResolvedNode],
        dir: &LabDir,
        state: &mut LabState,
        keys: &crate::NodeKeys,
        reporter: &dyn Reporter,
    ) -> Result<(), ProviderError>;

    /// Checks that the agent binary can run on this provider's nodes (their
    /// CPU architecture), before anything is created.
    fn check_agent(&self, _agent: &crate::agent_binary::AgentBinary) -> Result<(), ProviderError> {
        Ok(())
    }

    /// Whether node `node`'s machine is still running; the error explains
    /// why not (exit status, console tail). Cheap, and bounded in time
    /// (a provider that asks a command or an API gives up after
    /// [`CHECK_ALIVE_TIMEOUT`]): called while waiting and by `status`.
    async fn check_alive(&self, dir: &LabDir, state: &LabState, node: &str) -> Result<(), ProviderError>;

    /// The provider's restarts of node `node`'s data NIC since the node
    /// started, oldest first; `None` where the provider never restarts one
    /// (only the QEMU provider does), an error when its record cannot be read.
    fn data_nic_restarts(&self, _dir: &LabDir, _node: &str) -> Option<Result<Vec<NicRestart>, String>> {
        None
    }

    /// The node's console log, where the provider keeps one.
    fn console_log(&self, _dir: &LabDir, _node: &str) -> Option<std::path::PathBuf> {
        None
    }

    /// Whether `create` puts `keys.preload` (the agent and the lab's
    /// secret) on every node before it boots, so that a node of a lab just
    /// created runs exactly this agent from its first seconds; `up` then
    /// asks the agent itself instead of checking the files. Providers that
    /// ignore `keys.preload` keep the default, `false`.
    fn boots_with_preload(&self) -> bool {
        false
    }

    /// Whether the nodes boot with the lab's `packages:` already installed
    /// (baked into their image), so `up` only checks that they are there;
    /// otherwise `up` installs them with apt-get once the nodes answer SSH.
    fn packages_in_image(&self) -> bool {
        false
    }

    /// Whether the nodes' machines outlive the lab (machines labctl did not
    /// create, such as hosts reached over SSH). `down` then removes what
    /// `up` wrote on them (the lab facts) before [`delete`](Self::delete).
    /// qemu, multipass and aws delete their machines, so the default is
    /// `false`; ssh overrides it.
    fn keeps_machines(&self) -> bool {
        false
    }

    /// Removes everything the lab created. Idempotent; works from partial
    /// state, or none at all.
    async fn delete(&self, dir: &LabDir, state: Option<&LabState>) -> Result<(), ProviderError>;
}
