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

use std::sync::Arc;
use std::time::Duration;

use russh::keys::PrivateKey;

use agent_proto::auth::AgentSecret;
use agent_proto::v1::{NodeInfoReply, NodeInfoRequest};
use lab_providers::{AgentBinary, ProviderError};
use lab_remote::agent::{self, AgentError};
use lab_remote::command::RemoteCommand;
use lab_remote::ssh::{self, ConnectFailure, SshError, SshSession, SshTarget};
use lab_state::progress::{step, Reporter};
use lab_state::NodeState;

use crate::facts::{self, LabFacts};

/// Node-side scripts, run over SSH with `sh -s`.
pub const RXE_SETUP: &str = include_str!("../../../provisioning/node/rxe-setup.sh");
/// See [`RXE_SETUP`].
pub const AGENT_START: &str = include_str!("../../../provisioning/node/agent-start.sh");
/// Checks or installs the lab's `packages:`; run with `sh -c` (see
/// [`ensure_packages`]).
pub const PACKAGES: &str = include_str!("../../../provisioning/node/packages.sh");

/// Installs the agent secret from stdin (root-only file; prints `changed` or `same`).
pub const AGENT_SECRET_INSTALL: &str = include_str!("../../../provisioning/node/agent-secret.sh");

/// Where the agent binary lives on a node.
pub const AGENT_PATH: &str = "/usr/local/bin/rdma-agent";

/// On a host that outlives the lab (provider ssh): the lab's directory,
/// host lock and agent supervisor; see the script's header.
pub const HOST_LAB: &str = lab_providers::ssh::host::HOST_LAB_SCRIPT;

/// Where a node's agent binary and secret live: the lab's own directory on
/// a host that outlives the lab, else the node's global places.
fn agent_paths(node: &NodeState) -> (String, String) {
    match &node.host {
        Some(h) => (h.agent_path(), h.secret_path()),
        None => (AGENT_PATH.into(), agent_proto::auth::NODE_SECRET_FILE.into()),
    }
}

/// Replaces the lines of file `$1` that end with `# $2` (the lab's marker,
/// [`facts::lab_marker`]) by new ones, `$3` (empty: only remove); creates
/// the file when it does not exist. The file is rewritten in place
/// (`cat >`), not renamed over, so it keeps its owner and mode, and an
/// `/etc/hosts` bind-mounted into a container keeps working.
const MARKED_LINES_SCRIPT: &str = r##"set -eu
file=$1 marker=$2
tmp=$(mktemp "$(dirname "$file")/.labctl.XXXXXX")
trap 'rm -f "$tmp"' EXIT
if [ -e "$file" ]; then
    awk -v m="$marker" '!(NF >= 2 && $NF == m && $(NF - 1) == "#")' "$file" >"$tmp"
fi
printf '%s' "$3" >>"$tmp"
cat "$tmp" >"$file""##;

/// Writes the lab facts' files in one command: `$1` the directory (created
/// 0755), then pairs of path and content, each written to a temporary file
/// beside it, made 0644 and renamed over, so a reader never sees half a file.
const FACTS_WRITE_SCRIPT: &str = r##"set -eu
mkdir -p -m 0755 "$1"
shift
tmp=
trap 'rm -f "$tmp"' EXIT
while [ "$#" -ge 2 ]; do
    tmp=$(mktemp "$1.XXXXXX")
    printf '%s' "$2" >"$tmp"
    chmod 0644 "$tmp"
    mv -f "$tmp" "$1"
    tmp=
    shift 2
done"##;

/// Installs the lab's node key pair for the login user: the private key from
/// stdin as `~/.ssh/id_ed25519` (0600, the identity `ssh` tries by default,
/// so `ssh <node>` and `mpirun` need no option), `$1` as its `.pub`.
const NODE_KEY_SCRIPT: &str = r##"set -eu
umask 077
mkdir -p "$HOME/.ssh"
chmod 0700 "$HOME/.ssh"
tmp=$(mktemp "$HOME/.ssh/.labctl.XXXXXX")
trap 'rm -f "$tmp"' EXIT
cat >"$tmp"
mv -f "$tmp" "$HOME/.ssh/id_ed25519"
printf '%s
' "$1" >"$HOME/.ssh/id_ed25519.pub"
chmod 0644 "$HOME/.ssh/id_ed25519.pub""##;

/// Removes the lab facts' files from a node (`down` on machines that stay).
const FACTS_REMOVE_SCRIPT: &str =
    r#"rm -f /etc/labctl/lab.env /etc/labctl/hostfile && { rmdir /etc/labctl 2>/dev/null || :; }"#;

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

/// The agent a lab deploys and the lab's secret that every call to it
/// must carry (installed on the node before the agent starts).
#[derive(Clone, Copy)]
pub struct AgentDeploy<'a> {
    /// The agent build.
    pub binary: &'a AgentBinary,
    /// The lab's agent secret.
    pub secret: &'a AgentSecret,
}

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
    /// How long to wait for SSH.
    pub ssh_wait: Duration,
    /// The node's console log, where the lab image's init says when it is
    /// done (`lab-boot:`); read only to time the boot (`up`'s phases).
    pub console: Option<std::path::PathBuf>,
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
        deploy_agent(&session, job.node, job.agent, reporter),
    )
    .await?;
    job.node.provisioned = true;
    Ok(session)
}

/// `command` as root: as it is for root, under `sudo -n` for anyone else.
pub fn as_root(node: &NodeState, command: RemoteCommand) -> RemoteCommand {
    command.as_root(node.ssh_user == "root")
}

/// Makes sure `packages` are installed on the node: with `in_image`, checks
/// that the image has them; otherwise installs the missing ones with apt-get
/// (as root, non-interactively). The script's `packages: ...` lines are
/// reported as notes of the node; a failure quotes apt's own error lines.
pub async fn ensure_packages(
    session: &SshSession,
    node: &NodeState,
    packages: &[String],
    in_image: bool,
    reporter: &dyn Reporter,
) -> Result<(), ProvisionError> {
    let mode = if in_image { "check" } else { "install" };
    let command = as_root(
        node,
        RemoteCommand::script_with(
            PACKAGES,
            std::iter::once(mode).chain(packages.iter().map(String::as_str)),
        ),
    );
    let mut stdout_line = Vec::new();
    let mut stderr = Vec::new();
    let status = session
        .exec_streaming(&command, None, |is_err, data| {
            if is_err {
                stderr.extend_from_slice(data);
                return;
            }
            for &byte in data {
                if byte != b'\n' {
                    stdout_line.push(byte);
                    continue;
                }
                let line = String::from_utf8_lossy(&stdout_line).into_owned();
                if let Some(said) = line.strip_prefix("packages: ") {
                    reporter.note(&node.name, &format!("packages: {said}"));
                }
                stdout_line.clear();
            }
        })
        .await?;
    if status == 0 {
        return Ok(());
    }
    Err(packages_failure(
        &node.name,
        status,
        &String::from_utf8_lossy(&stderr),
        packages,
    ))
}

/// The error of a failed `packages.sh`: by its exit status, with apt's `E:`
/// lines (else the end of what it printed).
fn packages_failure(node: &str, status: i32, stderr: &str, packages: &[String]) -> ProvisionError {
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("E: ")).collect();
    let said = if errors.is_empty() {
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    } else {
        errors.join("\n")
    };
    let names = packages.join(", ");
    let (message, fix) = match status {
        30 => (
            format!("the node image lacks packages of labs.yaml: {said}"),
            "`packages:` changed since this lab came up: run `labctl down` and `labctl up`, which boots an image with them".to_string(),
        ),
        31 => (
            format!("cannot install packages: {said}"),
            "`packages:` works on Debian and Ubuntu images only; use one, or remove `packages:`".to_string(),
        ),
        32 => (
            format!("`apt-get update` failed:\n{said}"),
            "check that the node reaches its package mirror (`labctl exec NODE -- apt-get update`), then run `labctl up` again".to_string(),
        ),
        _ => (
            format!("installing packages ({names}) with apt-get failed (exit status {status}):\n{said}"),
            format!("check the names in `packages:` of labs.yaml ({names}) against the node's distribution: `labctl exec NODE -- apt-cache policy NAME` shows whether it has a package (Debian and Ubuntu name some packages differently)"),
        ),
    };
    ProvisionError::Packages {
        node: node.to_string(),
        message,
        fix,
    }
}

/// Checks that libfabric offers EFA reliable-datagram endpoints; returns the
/// EFA device (the libfabric domain without its `-rdm` suffix).
pub async fn check_efa(session: &SshSession, node: &NodeState) -> Result<String, ProvisionError> {
    // The EFA installer puts fi_info under /opt/amazon/efa/bin, outside the
    // PATH of a non-login shell.
    let out = session
        .exec(&RemoteCommand::script(
            "PATH=$PATH:/opt/amazon/efa/bin fi_info -p efa -t FI_EP_RDM 2>&1",
        ))
        .await?;
    let text = out.stdout_text();
    let domain = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("domain:"))
        .map(|d| d.trim().trim_end_matches("-rdm").to_string());
    match (out.status, domain) {
        (0, Some(domain)) => Ok(domain),
        (status, _) => Err(ProvisionError::Efa {
            node: node.name.clone(),
            message: format!("exited with status {status}: {}", text.trim()),
        }),
    }
}

/// Loads rdma_rxe and binds an rxe device to the data NIC unless it has
/// one; returns (netdev, device, whether this call added the device). On a
/// host the lab does not own, a new link takes the name the lab recorded
/// and no package is installed.
pub async fn setup_rxe(session: &SshSession, node: &NodeState) -> Result<(String, String, bool), ProvisionError> {
    let mut command = RemoteCommand::new("sh").arg("-s").arg(node.data_addr.to_string());
    if let Some(changes) = &node.host {
        command = command.arg(changes.rxe_link.as_deref().unwrap_or("")).arg("check");
    }
    let command = as_root(node, command);
    let mut out = ssh::CommandOutput::default();
    out.status = session
        .exec_streaming(&command, Some(RXE_SETUP.as_bytes()), |is_err, data| {
            if is_err {
                out.stderr.extend_from_slice(data)
            } else {
                out.stdout.extend_from_slice(data)
            }
        })
        .await?;
    if out.status != 0 {
        return Err(ProvisionError::Rxe {
            node: node.name.clone(),
            message: format!(
                "{} (exit status {})",
                String::from_utf8_lossy(&out.stderr).trim(),
                out.status
            ),
        });
    }
    let text = out.stdout_text();
    let field = |key: &str| {
        text.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key).map(str::to_string))
            .unwrap_or_default()
    };
    Ok((field("netdev="), field("device="), field("created=") == "1"))
}

/// Checks that the node's architecture and glibc can run the agent build.
pub async fn check_agent_runs(
    session: &SshSession,
    node: &NodeState,
    agent: &AgentBinary,
) -> Result<(), ProvisionError> {
    let needs = agent.needs();
    let out = session
        .exec(&RemoteCommand::script(
            "uname -m; getconf GNU_LIBC_VERSION 2>/dev/null || echo glibc none",
        ))
        .await?
        .stdout_text();
    let mut lines = out.lines();
    let arch = lines.next().unwrap_or_default().trim().to_string();
    let libc = lines.next().unwrap_or_default().trim().to_string();
    let incompatible = |reason: String, fix: String| ProvisionError::AgentIncompatible {
        node: node.name.clone(),
        reason,
        fix,
    };
    if let Some(built) = needs
        .arch
        .filter(|built| *built != arch && ["x86_64", "aarch64"].contains(built))
    {
        return Err(incompatible(
            format!("it is built for {built} but the node is {arch}"),
            format!("pick an {built} instance type and image, or build the agent for {arch} (cargo build --release -p rdma-agent --target {arch}-unknown-linux-gnu) and pass it with --agent"),
        ));
    }
    if let Some((major, minor)) = needs.glibc {
        let node_glibc = libc
            .strip_prefix("glibc ")
            .and_then(|v| v.split_once('.'))
            .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)));
        match node_glibc {
            None => {
                return Err(incompatible(
                    format!("it needs glibc {major}.{minor} but the node has no glibc ({libc:?})"),
                    "use a glibc-based image (Ubuntu, Debian, Amazon Linux)".into(),
                ))
            }
            Some(have) if have < (major, minor) => {
                return Err(incompatible(
                    format!(
                        "it needs glibc {major}.{minor} but the node has {}.{}",
                        have.0, have.1
                    ),
                    format!("use a newer image (glibc {major}.{minor} or later, e.g. Ubuntu 24.04), or build the agent on a system with glibc {}.{} or older", have.0, have.1),
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Checks that the uploaded agent finds its shared libraries (libibverbs,
/// librdmacm); cloud images often lack them.
async fn check_agent_libraries(session: &SshSession, node: &NodeState, path: &str) -> Result<(), ProvisionError> {
    let out = session
        .exec(&as_root(node, RemoteCommand::new("ldd").arg(path)).stderr_to_stdout())
        .await?
        .stdout_text();
    let missing: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("not found"))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(ProvisionError::AgentIncompatible {
        node: node.name.clone(),
        reason: format!("the node lacks the shared libraries {}", missing.join(", ")),
        fix: "install rdma-core's libraries on the image (Debian/Ubuntu: apt-get install libibverbs1 librdmacm1 ibverbs-providers; Amazon Linux: dnf install libibverbs librdmacm)".into(),
    })
}

/// Installs the lab's agent secret, uploads the agent when the node's copy
/// differs, (re)starts it under the node's supervisor when either changed or
/// it does not run, and waits until it answers (with the secret) with
/// labctl's version.
pub async fn deploy_agent(
    session: &Arc<SshSession>,
    node: &mut NodeState,
    deploy: AgentDeploy<'_>,
    reporter: &dyn Reporter,
) -> Result<(), ProvisionError> {
    let AgentDeploy { binary: agent, secret } = deploy;
    let name = node.name.clone();
    let (agent_path, secret_path) = agent_paths(node);
    let agent_path = agent_path.as_str();
    // Before the binary: the node's supervisor starts the agent as soon as
    // the binary is there, and an agent without its secret does not serve.
    let install = as_root(
        node,
        RemoteCommand::new("sh")
            .arg("-c")
            .arg(AGENT_SECRET_INSTALL)
            .arg("sh")
            .arg(&secret_path),
    );
    let secret_changed = step(
        reporter,
        &name,
        "agent secret",
        session.run_with_input(&install, secret.to_file_text().as_bytes(), "agent-secret.sh"),
    )
    .await?
        == "changed";
    let remote = step(
        reporter,
        &name,
        "agent hash",
        session.exec(&as_root(node, RemoteCommand::new("sha256sum").arg(agent_path)).stderr_to_null()),
    )
    .await?
    .stdout_text();
    let up_to_date = remote.split_whitespace().next() == Some(agent.sha256.as_str());
    if !up_to_date {
        step(
            reporter,
            &name,
            "agent upload",
            upload_agent(session, node, agent, agent_path),
        )
        .await?;
    }
    let running = match &node.host {
        Some(h) => as_root(
            node,
            RemoteCommand::script_with(HOST_LAB, ["running", h.dir.as_str(), h.unit.as_str()]),
        ),
        None => RemoteCommand::script("pgrep -x rdma-agent >/dev/null"),
    };
    let running = session.exec(&running).await?.status == 0;
    if !up_to_date || !running || secret_changed {
        step(reporter, &name, "agent start", start_agent(session, node)).await?;
    }
    let version = step(
        reporter,
        &name,
        "agent health",
        agent::wait_healthy(session.clone(), node.agent_port, secret, Duration::from_secs(30)),
    )
    .await?;
    if version != agent.version {
        return Err(ProvisionError::AgentVersion {
            node: node.name.clone(),
            expected: agent.version.clone(),
            found: version,
        });
    }
    node.agent_sha256 = Some(agent.sha256.clone());
    Ok(())
}

/// Puts `agent` at `agent_path` on the node (after checking the node can
/// run it) and checks it finds its libraries there.
async fn upload_agent(
    session: &SshSession,
    node: &NodeState,
    agent: &AgentBinary,
    agent_path: &str,
) -> Result<(), ProvisionError> {
    check_agent_runs(session, node, agent).await?;
    if node.ssh_user == "root" {
        session.upload(&agent.bytes, agent_path, 0o755).await?;
    } else {
        // SFTP writes as the SSH user; root moves the file into place.
        let staged = format!("/tmp/rdma-agent.{}", &agent.sha256[..12]);
        session.upload(&agent.bytes, &staged, 0o755).await?;
        let install = as_root(
            node,
            RemoteCommand::new("install").args(["-m", "0755", staged.as_str(), agent_path]),
        );
        let shown = install.to_string();
        let out = session
            .exec(&install.and(RemoteCommand::new("rm").arg("-f").arg(&staged)))
            .await?;
        if out.status != 0 {
            return Err(ProvisionError::Ssh(SshError::CommandFailed {
                node: node.name.clone(),
                command: shown,
                status: out.status,
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            }));
        }
    }
    check_agent_libraries(session, node, agent_path).await?;
    Ok(())
}

/// (Re)starts the node's agent under its supervisor: the node's own (the
/// lab images' init, systemd) or, on a host that outlives the lab, a
/// transient systemd unit or a watchdog, recorded in `node.host`.
async fn start_agent(session: &SshSession, node: &mut NodeState) -> Result<(), ProvisionError> {
    let port = node.agent_port.to_string();
    let Some(host) = node.host.as_mut() else {
        let start = as_root(node, RemoteCommand::new("sh").arg("-s").arg(&port));
        session
            .run_with_input(&start, AGENT_START.as_bytes(), "agent-start.sh")
            .await?;
        return Ok(());
    };
    let start = RemoteCommand::script_with(
        HOST_LAB,
        ["start", host.dir.as_str(), port.as_str(), host.unit.as_str()],
    )
    .as_root(node.ssh_user == "root");
    let said = session.run(&start).await?.stdout_text();
    let field = |key: &str| said.split_whitespace().find_map(|kv| kv.strip_prefix(key));
    host.supervisor = field("supervisor=").map(str::to_string);
    host.watchdog_pid = field("pid=").and_then(|p| p.parse().ok());
    Ok(())
}

/// The node's `NodeInfo` (devices, ports, GIDs, CPUs), from its agent.
pub async fn node_info(
    session: &Arc<SshSession>,
    node: &NodeState,
    secret: &AgentSecret,
) -> Result<NodeInfoReply, ProvisionError> {
    let mut client = agent::connect(session.clone(), node.agent_port, secret).await?;
    Ok(agent::call(
        &node.name,
        "NodeInfo",
        agent::deadline::NODE_INFO,
        client.node_info(NodeInfoRequest {}),
    )
    .await?)
}

/// Runs `command`; a non-zero exit is an error that shows `shown` (not the
/// whole line, which may carry a script).
async fn run_as(
    session: &SshSession,
    node: &NodeState,
    command: RemoteCommand,
    shown: &str,
) -> Result<(), ProvisionError> {
    let out = session.exec(&command).await?;
    if out.status != 0 {
        return Err(ProvisionError::Ssh(SshError::CommandFailed {
            node: node.name.clone(),
            command: shown.to_string(),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }));
    }
    Ok(())
}

/// Puts the lab facts on a node: `/etc/labctl/lab.env`, `/etc/labctl/hostfile`
/// and the lab's marked `/etc/hosts` lines (earlier ones replaced, so a
/// second `up` leaves exactly one set).
pub async fn write_facts(session: &SshSession, node: &NodeState, lab_facts: &LabFacts) -> Result<(), ProvisionError> {
    if let Some(host) = &node.host {
        // A host that outlives the lab: the files go in the lab's directory,
        // and its /etc/hosts stays as it is (another lab may name the nodes).
        let env = facts::lab_env_in(lab_facts, &node.name, &host.dir).unwrap_or_default();
        let hostfile = facts::hostfile(lab_facts);
        let (env_path, hostfile_path) = (format!("{}/lab.env", host.dir), format!("{}/hostfile", host.dir));
        let write = RemoteCommand::script_with(
            FACTS_WRITE_SCRIPT,
            [
                host.dir.as_str(),
                env_path.as_str(),
                env.as_str(),
                hostfile_path.as_str(),
                hostfile.as_str(),
            ],
        );
        return run_as(
            session,
            node,
            as_root(node, write),
            "write the lab facts in the lab's directory",
        )
        .await;
    }
    // One command for the files and the /etc/hosts lines: every exec is a
    // process start in the guest, which costs a TCG node tenths of a second.
    let env = facts::lab_env(lab_facts, &node.name).unwrap_or_default();
    let hostfile = facts::hostfile(lab_facts);
    let hosts = facts::hosts_lines(lab_facts);
    let marker = facts::lab_marker(&lab_facts.lab);
    let write = RemoteCommand::script_with(
        FACTS_WRITE_SCRIPT,
        [
            facts::NODE_DIR,
            facts::LAB_ENV_PATH,
            env.as_str(),
            facts::HOSTFILE_PATH,
            hostfile.as_str(),
        ],
    )
    .and(RemoteCommand::script_with(
        MARKED_LINES_SCRIPT,
        ["/etc/hosts", marker.as_str(), hosts.as_str()],
    ));
    run_as(
        session,
        node,
        as_root(node, write),
        "write the lab facts (/etc/labctl/lab.env, /etc/labctl/hostfile, /etc/hosts)",
    )
    .await
}

/// What `node_ssh:` installs on every node: the lab's node key pair and
/// the lines that trust it and every node's host key.
pub struct NodeSsh {
    /// The private key, in OpenSSH format.
    pub private_key: Vec<u8>,
    /// Its public line.
    pub public_line: String,
    /// The marked `authorized_keys` line ([`facts::authorized_keys_line`]).
    pub authorized_keys: String,
    /// The marked `known_hosts` lines ([`facts::known_hosts_lines`]).
    pub known_hosts: String,
    /// The lab's marker.
    pub marker: String,
}

/// Lets the login user of `node` reach every node with `ssh <node>` (or its
/// data address) without a prompt: the lab's node key as `~/.ssh/id_ed25519`,
/// its public key in `~/.ssh/authorized_keys`, every node's host key in
/// `~/.ssh/known_hosts`. The two lists' lines carry the lab's marker, so a
/// second `up` replaces them and leaves the user's own lines alone.
pub async fn write_node_ssh(session: &SshSession, setup: &NodeSsh) -> Result<(), ProvisionError> {
    let command = RemoteCommand::script_with(NODE_KEY_SCRIPT, [setup.public_line.as_str()])
        .and(RemoteCommand::script_with(
            MARKED_LINES_SCRIPT,
            [
                ".ssh/authorized_keys",
                setup.marker.as_str(),
                setup.authorized_keys.as_str(),
            ],
        ))
        .and(RemoteCommand::script_with(
            MARKED_LINES_SCRIPT,
            [".ssh/known_hosts", setup.marker.as_str(), setup.known_hosts.as_str()],
        ));
    session
        .run_with_input(
            &command,
            &setup.private_key,
            "install the lab's node SSH key and known hosts in ~/.ssh",
        )
        .await?;
    Ok(())
}

/// Removes the lab facts from a node: the files and the lab's `/etc/hosts`
/// lines. For machines that outlive the lab (`down` on a provider that
/// keeps them).
pub async fn remove_facts(session: &SshSession, node: &NodeState, lab: &str) -> Result<(), ProvisionError> {
    run_as(
        session,
        node,
        as_root(
            node,
            RemoteCommand::script_with(MARKED_LINES_SCRIPT, ["/etc/hosts", facts::lab_marker(lab).as_str(), ""])
                .and(RemoteCommand::script(FACTS_REMOVE_SCRIPT)),
        ),
        "remove the lab facts",
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn test_a_failed_install_quotes_apt_s_own_error() {
        // What packages.sh printed on stderr on a Debian 12 node asked for
        // `hello labctl-no-such-package` (apt 2.6).
        let stderr = "Get:1 http://deb.debian.org/debian bookworm InRelease [151 kB]\n\
                      Fetched 15.8 MB in 23s (683 kB/s)\n\
                      Reading package lists...\n\
                      Building dependency tree...\n\
                      Reading state information...\n\
                      E: Unable to locate package labctl-no-such-package\n";
        let packages = names(&["hello", "labctl-no-such-package"]);
        let err = packages_failure("client", 33, stderr, &packages);
        assert_eq!(
            err.to_string(),
            "node `client`: installing packages (hello, labctl-no-such-package) with apt-get failed (exit status 33):\n\
             E: Unable to locate package labctl-no-such-package\n  \
             fix: check the names in `packages:` of labs.yaml (hello, labctl-no-such-package) against the node's distribution: \
             `labctl exec NODE -- apt-cache policy NAME` shows whether it has a package (Debian and Ubuntu name some packages differently)"
        );
    }

    #[test]
    fn test_each_way_packages_fail_has_its_own_fix() {
        let packages = names(&["gdb"]);
        let missing = packages_failure("server", 30, "not installed: gdb\n", &packages).to_string();
        assert!(
            missing.starts_with("node `server`: the node image lacks packages of labs.yaml: not installed: gdb\n"),
            "{missing}"
        );
        assert!(missing.contains("run `labctl down` and `labctl up`"), "{missing}");
        let no_apt = packages_failure(
            "server",
            31,
            "apt-get is missing: packages: needs a Debian or Ubuntu image\n",
            &packages,
        );
        assert!(no_apt.to_string().contains("Debian and Ubuntu images only"), "{no_apt}");
        // Without `E:` lines, the end of what the script printed.
        let update = packages_failure(
            "server",
            32,
            "Err:1 http://deb.debian.org/debian bookworm InRelease\n  Temporary failure resolving 'deb.debian.org'\n",
            &packages,
        )
        .to_string();
        assert!(
            update.contains("`apt-get update` failed:\nErr:1 http://deb.debian.org/debian bookworm InRelease\n  Temporary failure resolving"),
            "{update}"
        );
    }

    #[test]
    fn test_the_packages_script_checks_before_it_installs() {
        // On the controller itself (a Debian or Ubuntu host, as
        // provisioning/host/install-deps.sh requires): a package every such
        // host has is found, and one no distribution has is reported
        // missing, without apt being run (check mode).
        let run = |args: &[&str]| {
            std::process::Command::new("sh")
                .arg("-c")
                .arg(PACKAGES)
                .arg("sh")
                .args(args)
                .output()
                .unwrap()
        };
        let found = run(&["check", "dpkg"]);
        assert!(found.status.success(), "{found:?}");
        assert_eq!(String::from_utf8_lossy(&found.stdout), "packages: all 1 installed\n");
        let missing = run(&["check", "dpkg", "labctl-no-such-package"]);
        assert_eq!(missing.status.code(), Some(30));
        assert_eq!(
            String::from_utf8_lossy(&missing.stderr),
            "not installed: labctl-no-such-package\n"
        );
    }
}
