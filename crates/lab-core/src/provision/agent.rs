//! rdma-agent on a node: its secret installed, the build checked against
//! the node (architecture, glibc, libraries) and uploaded when it differs,
//! started under a supervisor, and waited for until it answers.

use std::sync::Arc;
use std::time::Duration;

use agent_proto::auth::AgentSecret;
use agent_proto::v1::{NodeInfoReply, NodeInfoRequest};
use lab_providers::AgentBinary;
use lab_remote::agent;
use lab_remote::command::RemoteCommand;
use lab_remote::ssh::{SshError, SshSession};
use lab_state::progress::{step, Reporter};
use lab_state::NodeState;

use super::error::ProvisionError;
use super::privilege::as_root;

/// Starts the agent under the node's own supervisor; run over SSH with
/// `sh -s`, the agent's port its argument.
pub const AGENT_START: &str = include_str!("../../../../provisioning/node/agent-start.sh");

/// Installs the agent secret from stdin (root-only file; prints `changed` or `same`).
pub const AGENT_SECRET_INSTALL: &str = include_str!("../../../../provisioning/node/agent-secret.sh");

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

/// The agent a lab deploys and the lab's secret that every call to it
/// must carry (installed on the node before the agent starts).
#[derive(Clone, Copy)]
pub struct AgentDeploy<'a> {
    /// The agent build.
    pub binary: &'a AgentBinary,
    /// The lab's agent secret.
    pub secret: &'a AgentSecret,
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

/// How long a node that booted with the agent is given to answer before
/// `up` checks the agent's files as on any other node. The agent starts with
/// the node's init, seconds before `up` asks.
const AT_BOOT_HEALTH_WAIT: Duration = Duration::from_secs(10);

/// Installs the lab's agent secret, uploads the agent when the node's copy
/// differs, (re)starts it under the node's supervisor when either changed or
/// it does not run, and waits until it answers (with the secret) with
/// labctl's version.
///
/// `at_boot`: the provider booted the node moments ago with these very agent
/// bytes and the lab's secret in place, so an answer with the secret and
/// labctl's version is all there is to check. The secret's install, the
/// binary's hash and the process check are skipped: on an emulated node
/// they cost about a second of every `up`. An agent that does not answer
/// so gets the full treatment below.
pub async fn deploy_agent(
    session: &Arc<SshSession>,
    node: &mut NodeState,
    deploy: AgentDeploy<'_>,
    at_boot: bool,
    reporter: &dyn Reporter,
) -> Result<(), ProvisionError> {
    let AgentDeploy { binary: agent, secret } = deploy;
    let name = node.name.clone();
    if at_boot {
        let answer = step(
            reporter,
            &name,
            "agent health",
            agent::wait_healthy(session.clone(), node.agent_port, secret, AT_BOOT_HEALTH_WAIT),
        )
        .await;
        match answer {
            Ok(version) if version == agent.version => {
                node.agent_sha256 = Some(agent.sha256.clone());
                return Ok(());
            }
            Ok(version) => reporter.note(
                &name,
                &format!("the agent it booted with answers as version {version}; checking its files"),
            ),
            Err(e) => reporter.note(
                &name,
                &format!("the agent it booted with did not answer ({e}); checking its files"),
            ),
        }
    }
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
