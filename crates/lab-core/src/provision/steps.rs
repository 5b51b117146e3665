//! One node's provisioning from a machine that exists to an agent that
//! answers: wait for the image's init and SSH, then packages, rxe or EFA,
//! and the agent, each a reported step.

use std::sync::Arc;
use std::time::Duration;

use russh::keys::PrivateKey;

use lab_providers::ProviderError;
use lab_remote::ssh::{self, ConnectFailure, SshSession, SshTarget};
use lab_state::progress::{step, Reporter};
use lab_state::NodeState;

use super::agent::{deploy_agent, AgentDeploy};
use super::error::ProvisionError;
use super::packages::ensure_packages;
use super::rdma::{check_efa, setup_rxe};
use lab_remote::command::RemoteCommand;

/// How a node is reached and what to set up on it.
pub struct NodeJob<'a> {
    /// The node's recorded state; updated as steps complete.
    pub node: &'a mut NodeState,
    /// The lab's private key.
    pub key: Arc<PrivateKey>,
    /// Set up rxe on the data NIC.
    pub rxe: bool,
    /// Check the node's EFA device (instead of rxe).
    pub efa: bool,
    /// The lab's `packages:`.
    pub packages: &'a [String],
    /// Whether the node's image already has them (only checked), or they
    /// are installed with apt-get.
    pub packages_in_image: bool,
    /// The agent to deploy, and the secret it serves under.
    pub agent: AgentDeploy<'a>,
    /// The node has just booted with this agent and the lab's secret in
    /// place (`Provider::boots_with_preload`): see [`deploy_agent`].
    pub agent_at_boot: bool,
    /// How long to wait for SSH.
    pub ssh_wait: Duration,
    /// The node's console log, where the lab image's init says when it is
    /// done (`lab-boot:`); read only to time the boot (`up`'s phases).
    pub console: Option<std::path::PathBuf>,
    /// Set the node's wall clock from this machine's: a machine whose clock
    /// nothing else keeps (a QEMU node starts from the host's RTC, to the
    /// second, and runs no NTP).
    pub set_clock: bool,
}

/// What the lab image's boot script writes to the console when init is done.
pub const BOOT_DONE_MARK: &str = "lab-boot:";

/// Returns once `console` holds a line with [`BOOT_DONE_MARK`], or with
/// the error of `still_alive` (asked every second) when the machine died;
/// runs as long as neither happens.
async fn console_says_booted<F>(
    console: &std::path::Path,
    still_alive: &mut impl FnMut() -> F,
) -> Result<(), ProviderError>
where
    F: std::future::Future<Output = Result<(), ProviderError>>,
{
    let mut tick = 0u64;
    loop {
        if std::fs::read(console).is_ok_and(|bytes| {
            bytes
                .windows(BOOT_DONE_MARK.len())
                .any(|w| w == BOOT_DONE_MARK.as_bytes())
        }) {
            return Ok(());
        }
        tick += 1;
        if tick.is_multiple_of(10) {
            still_alive().await?;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The SSH target of a recorded node.
pub fn target(node: &NodeState) -> SshTarget {
    SshTarget::recorded(node)
}

/// Runs every provisioning step on one node. `still_alive` reports a machine
/// that died while SSH was awaited.
pub async fn provision_node<F>(
    job: NodeJob<'_>,
    reporter: &dyn Reporter,
    still_alive: impl FnMut() -> F,
) -> Result<Arc<SshSession>, ProvisionError>
where
    F: std::future::Future<Output = Result<(), ProviderError>>,
{
    let name = job.node.name.clone();
    let pinned = ssh::pinned_host_key(&name, job.node.host_key.as_deref())?;
    let mut still_alive = still_alive;
    let started = std::time::Instant::now();
    if let Some(console) = &job.console {
        // SSH is tried once the node's init says it is done: an attempt made
        // before the node's network is up hangs in QEMU's user-mode NAT,
        // which resends the SYN with a growing backoff (it cost ~10 s when
        // polled from the start). A console that never says so (another
        // image) only delays polling until the wait is over.
        let booted = tokio::time::timeout(job.ssh_wait, console_says_booted(console, &mut still_alive));
        if let Ok(Err(died)) = step(reporter, &name, "boot to init", booted).await {
            return Err(ProvisionError::Provider(died));
        }
    }
    let ssh_target = target(job.node);
    let connected = step(
        reporter,
        &name,
        "wait for SSH",
        SshSession::connect_with_retry(
            &ssh_target,
            job.key.clone(),
            pinned,
            job.ssh_wait.saturating_sub(started.elapsed()),
            still_alive,
        ),
    )
    .await;
    let session = connected.map_err(|e| match e {
        ConnectFailure::Ssh(e) => ProvisionError::Ssh(e),
        ConnectFailure::NodeDied(e) => ProvisionError::Provider(e),
    })?;
    let session = Arc::new(session);

    if !job.packages.is_empty() {
        step(
            reporter,
            &name,
            "packages",
            ensure_packages(&session, job.node, job.packages, job.packages_in_image, reporter),
        )
        .await?;
    }

    if job.efa {
        let device = step(reporter, &name, "efa", check_efa(&session, job.node)).await?;
        job.node.rdma_device = Some(device);
    } else if job.rxe {
        let (netdev, device, added) = step(reporter, &name, "rxe", setup_rxe(&session, job.node)).await?;
        if job.node.host.is_some() {
            let what = if added {
                format!("added rxe link {device} on {netdev} (down removes it)")
            } else {
                format!("using {device}, the RDMA link {netdev} had already (down leaves it)")
            };
            reporter.note(&name, &what);
        }
        // On a host the lab does not own, the link it recorded is undone at
        // `down` only if it is the one in use: a netdev that had a link of
        // its own keeps it, and the record goes.
        if let Some(changes) = job.node.host.as_mut() {
            if changes.rxe_link.as_deref() != Some(device.as_str()) {
                changes.rxe_link = None;
            }
        }
        job.node.data_netdev = Some(netdev);
        job.node.rdma_device = Some(device);
    }
    step(
        reporter,
        &name,
        "agent",
        deploy_agent(&session, job.node, job.agent, job.agent_at_boot, reporter),
    )
    .await?;
    if job.set_clock {
        step(reporter, &name, "clock", set_clock(&session, job.node, job.agent)).await?;
    }
    job.node.provisioned = true;
    Ok(session)
}

/// Below this the node's clock is left as it is: the reading's own error
/// on an emulated node is a few milliseconds.
const CLOCK_STEP_MIN_NS: u64 = 1_000_000;

/// Steps the node's wall clock to this machine's, by the offset its agent's
/// Clock calls show, so that the lab's nodes agree with each other to a few
/// milliseconds (`doctor`'s `clock` check).
pub async fn set_clock(
    session: &Arc<SshSession>,
    node: &NodeState,
    agent: AgentDeploy<'_>,
) -> Result<(), ProvisionError> {
    let mut client = lab_remote::agent::connect(session.clone(), node.agent_port, agent.secret).await?;
    let estimate = crate::wall_clock::offset(&node.name, &mut client)
        .await
        .map_err(|e| ProvisionError::Clock(format!("node `{}`: {e}", node.name)))?;
    if estimate.offset_ns.unsigned_abs() < CLOCK_STEP_MIN_NS {
        return Ok(());
    }
    let step = crate::wall_clock::step_argument(estimate.offset_ns);
    let command = super::privilege::as_root(node, RemoteCommand::new("date").args(["-s", step.as_str()]));
    let out = session.exec(&command).await?;
    if out.status != 0 {
        return Err(ProvisionError::Clock(format!(
            "node `{}`: `date -s` exited {}: {}",
            node.name,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}
