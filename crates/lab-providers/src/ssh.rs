//! `provider: ssh`: hosts that already exist, reached over SSH. labctl
//! creates and deletes no machine here ([`Provider::keeps_machines`]).
//!
//! What works in this slice: the preflight, which changes nothing on any
//! host. For each node it connects (the host key must match labs.yaml's
//! `host_key:` or the user's `~/.ssh/known_hosts`: no trust on first use),
//! logs in with the node's key, checks `sudo -n` where privileged steps
//! need it, reads the CPU architecture (checked against the agent binary
//! in [`Provider::check_agent`]) and, with `fabric: existing`, lists the
//! host's RDMA devices and picks the one whose netdev holds `data_addr`
//! (or the node's `rdma_device:`), which must have an active port.
//!
//! The preflight also picks a free loopback port for the agent. Then
//! `create` takes each host's lock and makes the lab's one directory there
//! ([`host`]), recording both in the state before it touches the host;
//! provisioning puts the agent, its secret and the lab facts in that
//! directory and starts the agent under a supervisor; `delete` stops it and
//! removes the directory and the lock, and nothing else.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lab_model::{Fabric, LabSpec, ResolvedNode};
use lab_remote::command::RemoteCommand;
use lab_remote::ssh::{self, HostKeyCheck, JumpHost, SshError, SshSession, SshTarget};
use lab_state::progress::Reporter;
use lab_state::{JumpRecord, LabDir, LabState, NodeState};
use russh::keys::{Algorithm, PrivateKey};

use crate::agent_binary::AgentBinary;
use crate::node_agent::check_agent_arch;
use crate::provider::{Provider, ProviderError};
use crate::NodeKeys;

/// How long one preflight connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// The keys ssh itself tries when no `identity_file` is given, in its order.
const DEFAULT_IDENTITIES: &[&str] = &["id_ed25519", "id_ecdsa", "id_rsa"];

/// The SSH provider.
#[derive(Debug, Default)]
pub struct SshProvider {
    fabric: Fabric,
    /// The user's home (for `~`, default keys and known_hosts).
    home: Option<PathBuf>,
    /// What the preflight found, per node.
    found: Mutex<BTreeMap<String, Found>>,
    /// An ssh-agent runs (`SSH_AUTH_SOCK`): a node without a key file logs
    /// in with its keys.
    agent_running: bool,
}

/// What the preflight learnt about one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// `uname -m`.
    pub arch: String,
    /// The host key it presented (OpenSSH line), pinned from then on.
    pub host_key: String,
    /// The RDMA device picked for the node (fabric existing).
    pub device: Option<Picked>,
    /// A loopback port nothing listened on, for the lab's agent.
    pub agent_port: u16,
    /// The host key the jump host presented (OpenSSH line), pinned from then on.
    pub jump_host_key: Option<String>,
}

/// How the controller reaches one host: labs.yaml with its defaults and
/// the user's files applied.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Host, port, user and key.
    pub target: SshTarget,
    /// Which host keys are accepted.
    pub check: HostKeyCheck,
    /// Whether privileged steps use `sudo -n` (None: decided by the user).
    pub sudo: Option<bool>,
}

/// What to check when a node's address answers, but not as SSH in time.
const SSHD_NOT_REACHED_FIX: &str =
    "check the node's host and port, that sshd runs there, and that this machine can reach it (firewall, VPN)";

impl SshProvider {
    /// The provider for a lab of `fabric`, with the user's home directory.
    pub fn new(fabric: Fabric) -> SshProvider {
        SshProvider {
            fabric,
            home: dirs::home_dir(),
            found: Mutex::default(),
            agent_running: std::env::var_os("SSH_AUTH_SOCK").is_some_and(|s| !s.is_empty()),
        }
    }

    /// The same with another home directory (tests).
    pub fn with_home(fabric: Fabric, home: PathBuf) -> SshProvider {
        SshProvider {
            fabric,
            home: Some(home),
            found: Mutex::default(),
            agent_running: false,
        }
    }

    /// What the last preflight found, per node.
    pub fn found(&self) -> BTreeMap<String, Found> {
        self.found.lock().expect("preflight findings").clone()
    }

    fn expand(&self, path: &str) -> PathBuf {
        match (path.strip_prefix("~/"), &self.home) {
            (Some(rest), Some(home)) => home.join(rest),
            _ => PathBuf::from(path),
        }
    }

    /// The endpoint of `node`, or what is missing to reach it.
    pub fn endpoint(&self, node: &ResolvedNode) -> Result<Endpoint, ProviderError> {
        let spec = node.ssh.as_ref().ok_or_else(|| ProviderError::Host {
            node: node.name.clone(),
            problem: "labs.yaml gives no host for this node".into(),
            fix: "add `host:` to the node".into(),
        })?;
        // A `Host` entry of the user's ~/.ssh/config fills what labs.yaml leaves out.
        let cfg = match &self.home {
            Some(home) => config::for_alias(home, &spec.host).map_err(|problem| ProviderError::Host {
                node: node.name.clone(),
                problem,
                fix: "fix that line of your ssh config, or set host, port and user of the node in labs.yaml".into(),
            })?,
            None => config::HostConfig::default(),
        };
        let host = cfg.hostname.clone().unwrap_or_else(|| spec.host.clone());
        let port = spec.port.or(cfg.port).unwrap_or(22);
        let known_hosts = cfg.user_known_hosts_file.as_deref().map(|p| self.expand(p));
        // The named key, else ssh's default keys, else the user's ssh-agent.
        let identity = match spec.identity_file.as_ref().or(cfg.identity_file.as_ref()) {
            Some(path) => Some(self.expand(path)),
            None => self
                .home
                .iter()
                .flat_map(|h| DEFAULT_IDENTITIES.iter().map(move |k| h.join(".ssh").join(k)))
                .find(|p| p.exists()),
        };
        if identity.is_none() && !self.agent_running {
            return Err(ProviderError::Host {
                node: node.name.clone(),
                problem: format!(
                    "no identity_file is given, none of ~/.ssh/{} exists, and no ssh-agent runs (SSH_AUTH_SOCK is not set)",
                    DEFAULT_IDENTITIES.join(", ~/.ssh/")
                ),
                fix: "set `identity_file:` on the node (or under `defaults:`) to the private key that logs in to the host, or start an ssh-agent and `ssh-add` that key".into(),
            });
        }
        if let Some(identity) = identity.as_ref().filter(|p| !p.exists()) {
            return Err(ProviderError::Host {
                node: node.name.clone(),
                problem: format!("identity_file {} does not exist", identity.display()),
                fix: "set identity_file to the private key that logs in to the host".into(),
            });
        }
        let agent = identity.is_none();
        let check = self.host_key_check(
            node,
            spec.host_key.as_deref(),
            "host_key",
            &host,
            port,
            known_hosts.as_deref(),
        )?;
        let user = spec.user.clone().or(cfg.user.clone()).unwrap_or_else(|| "root".into());
        let cfg_jump = match cfg.proxy_jump.as_deref() {
            None | Some("none") => None,
            Some(text) => {
                Some(
                    lab_model::jump::parse_proxy_jump(text).map_err(|(problem, _)| ProviderError::Host {
                        node: node.name.clone(),
                        problem: format!("~/.ssh/config's ProxyJump for `{}`: {problem}", spec.host),
                        fix: "give the node `proxy_jump:` in labs.yaml (one hop), or change the ProxyJump line".into(),
                    })?,
                )
            }
        };
        let jump = match spec.proxy_jump.as_ref().or(cfg_jump.as_ref()) {
            None => None,
            Some(j) => {
                let jump_port = j.port.unwrap_or(22);
                Some(JumpHost {
                    host: j.host.clone(),
                    port: jump_port,
                    user: j.user.clone().unwrap_or_else(|| user.clone()),
                    identity: identity.clone(),
                    check: self.host_key_check(
                        node,
                        spec.proxy_jump_host_key.as_deref(),
                        "proxy_jump_host_key",
                        &j.host,
                        jump_port,
                        known_hosts.as_deref(),
                    )?,
                })
            }
        };
        Ok(Endpoint {
            target: SshTarget {
                node: node.name.clone(),
                host,
                port,
                user,
                identity,
                agent,
                jump,
            },
            check,
            sudo: spec.sudo,
        })
    }

    /// Which host keys of `host:port` are accepted: the key or fingerprint
    /// labs.yaml gives in `field`, else the user's known_hosts entries.
    fn host_key_check(
        &self,
        node: &ResolvedNode,
        given: Option<&str>,
        field: &str,
        host: &str,
        port: u16,
        known_hosts: Option<&std::path::Path>,
    ) -> Result<HostKeyCheck, ProviderError> {
        Ok(match given {
            Some(fp) if fp.starts_with("SHA256:") => HostKeyCheck::Fingerprint(fp.to_string()),
            Some(line) => HostKeyCheck::AnyOf {
                keys: vec![ssh::parse_public(line).ok_or_else(|| ProviderError::Host {
                    node: node.name.clone(),
                    problem: format!("{field} `{line}` is not a public key labctl can read"),
                    fix: "paste the key as `ssh-keyscan HOST` prints it, or its SHA256 fingerprint".into(),
                })?],
                source: format!("{field} in labs.yaml"),
            },
            None => {
                let known = known_hosts
                    .map(std::path::Path::to_path_buf)
                    .or_else(|| self.home.as_ref().map(|h| h.join(".ssh").join("known_hosts")));
                let keys = match &known {
                    Some(path) => russh::keys::known_hosts::known_host_keys_path(host, port, path)
                        .map_err(|e| ProviderError::Host {
                            node: node.name.clone(),
                            problem: format!("{} cannot be read: {e}", path.display()),
                            fix: format!("fix or move the file, or give `{field}:` in labs.yaml"),
                        })?
                        .into_iter()
                        .map(|(_, k)| k)
                        .collect(),
                    None => Vec::new(),
                };
                HostKeyCheck::AnyOf {
                    keys,
                    source: known
                        .as_ref()
                        .map(|p| p.display().to_string())
                        .unwrap_or_else(|| "~/.ssh/known_hosts".into()),
                }
            }
        })
    }

    async fn preflight_node(&self, node: &ResolvedNode) -> Result<Found, ProviderError> {
        let end = self.endpoint(node)?;
        let unknown = matches!(&end.check, HostKeyCheck::AnyOf { keys, .. } if keys.is_empty());
        let jump_unknown = end
            .target
            .jump
            .as_ref()
            .is_some_and(|j| matches!(&j.check, HostKeyCheck::AnyOf { keys, .. } if keys.is_empty()));
        // The lab's own key is never used here: every endpoint names one.
        let unused =
            Arc::new(
                PrivateKey::random(&mut rand::rng(), Algorithm::Ed25519).map_err(|e| ProviderError::Io {
                    context: "making a placeholder key".into(),
                    source: std::io::Error::other(e.to_string()),
                })?,
            );
        let session = match SshSession::connect_checked(&end.target, unused, end.check.clone(), CONNECT_TIMEOUT).await {
            Ok(s) => s,
            Err(SshError::HostKeyMismatch { presented, .. }) if unknown => {
                return Err(ProviderError::Host {
                    node: node.name.clone(),
                    problem: format!(
                        "{} is not in ~/.ssh/known_hosts and labs.yaml gives no host_key; the host presents {presented}, and labctl does not trust a host on first use",
                        end.target.addr()
                    ),
                    fix: format!(
                        "check {presented} on the host (`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`), then add `host_key: {presented}` to node `{}`",
                        node.name
                    ),
                })
            }
            // The jump host is not known: the same refusal, naming its field.
            Err(SshError::Jump { jump, source, .. })
                if jump_unknown && matches!(*source, SshError::HostKeyMismatch { .. }) =>
            {
                let SshError::HostKeyMismatch { presented, .. } = *source else {
                    unreachable!("matched above")
                };
                return Err(ProviderError::Host {
                    node: node.name.clone(),
                    problem: format!(
                        "jump host {jump} is not in ~/.ssh/known_hosts and labs.yaml gives no proxy_jump_host_key; it presents {presented}, and labctl does not trust a host on first use"
                    ),
                    fix: format!(
                        "check {presented} on the jump host (`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`), then add `proxy_jump_host_key: {presented}` to node `{}`",
                        node.name
                    ),
                });
            }
            // The jump host did not answer as SSH.
            Err(SshError::Jump { jump, source, .. })
                if matches!(
                    *source,
                    SshError::Protocol { .. } | SshError::Timeout { .. } | SshError::AttemptTimedOut { .. }
                ) =>
            {
                let why = match *source {
                    SshError::Protocol { source, .. } => source.to_string(),
                    SshError::AttemptTimedOut { waited_s, stage, .. } => format!("timed out after {waited_s} s: {stage}"),
                    other => other.to_string(),
                };
                return Err(ProviderError::Host {
                    node: node.name.clone(),
                    problem: format!("cannot reach the jump host {jump} over SSH: {why}"),
                    fix: "check proxy_jump's host and port, that sshd runs there, and that this machine can reach it (firewall, VPN)".into(),
                });
            }
            // Nothing answered as SSH: say where we knocked and what to check.
            Err(SshError::Protocol { source, .. }) => {
                return Err(ProviderError::Host {
                    node: node.name.clone(),
                    problem: format!("cannot reach {} over SSH: {source}", end.target.addr()),
                    fix: SSHD_NOT_REACHED_FIX.into(),
                })
            }
            // A host that drops the SYNs, or accepts and never speaks SSH:
            // this host only; the others' preflight goes on.
            Err(SshError::AttemptTimedOut {
                addr, waited_s, stage, ..
            }) => {
                return Err(ProviderError::Host {
                    node: node.name.clone(),
                    problem: format!("SSH to {addr} timed out after {waited_s} s: {stage}"),
                    fix: SSHD_NOT_REACHED_FIX.into(),
                })
            }
            Err(SshError::Timeout {
                addr, waited_s, last, ..
            }) => {
                return Err(ProviderError::Host {
                    node: node.name.clone(),
                    problem: format!("SSH at {addr} did not answer within {waited_s} s (last error: {last})"),
                    fix: "check the node's host and port, that the host is up, and that this machine can reach it (firewall, VPN)".into(),
                })
            }
            Err(e) => return Err(e.into()),
        };
        let result = self.probe(&session, node, &end).await;
        session.close().await;
        result
    }

    async fn probe(&self, session: &SshSession, node: &ResolvedNode, end: &Endpoint) -> Result<Found, ProviderError> {
        let arch = session.run(&RemoteCommand::new("uname").arg("-m")).await?.stdout_text();
        let uid = session.run(&RemoteCommand::new("id").arg("-u")).await?.stdout_text();
        let root = uid == "0";
        match (end.sudo, root) {
            (Some(false), false) => {
                return Err(ProviderError::Host {
                    node: node.name.clone(),
                    problem: format!("user `{}` is not root and the node says `sudo: false`", end.target.user),
                    fix: "log in as root (user: root), or allow `sudo -n` for the user and remove `sudo: false`".into(),
                })
            }
            (_, false) => {
                let out = session.exec(&RemoteCommand::new("sudo").args(["-n", "true"])).await?;
                if out.status != 0 {
                    return Err(ProviderError::Host {
                        node: node.name.clone(),
                        problem: format!(
                            "`sudo -n true` fails for user `{}` ({}): labctl's privileged steps cannot run",
                            end.target.user,
                            String::from_utf8_lossy(&out.stderr).trim()
                        ),
                        fix: format!(
                            "allow passwordless sudo for {} (a sudoers.d line with NOPASSWD), or log in as root",
                            end.target.user
                        ),
                    });
                }
            }
            _ => {}
        }
        let device = match self.fabric {
            Fabric::Existing => Some(self.pick(session, node).await?),
            _ => None,
        };
        let agent_port = host::pick_agent_port(session, &node.name).await?;
        Ok(Found {
            arch,
            host_key: ssh::public_line(session.host_key()),
            device,
            agent_port,
            jump_host_key: session.jump_host_key().map(ssh::public_line),
        })
    }

    async fn pick(&self, session: &SshSession, node: &ResolvedNode) -> Result<Picked, ProviderError> {
        let links = session
            .exec(&RemoteCommand::new("rdma").args(["-j", "link", "show"]))
            .await?;
        let addrs = session
            .run(&RemoteCommand::new("ip").args(["-j", "-4", "addr", "show"]))
            .await?;
        let layers = session
            .exec(&RemoteCommand::script(
                // Link layers, and the IPoIB netdevs of InfiniBand ports (an IB
                // port has no netdev in `rdma link`: IPoIB's parent interface
                // sits under the device's PCI function, dev_port = port - 1;
                // its partition children name it by their iflink).
                "grep -H . /sys/class/infiniband/*/ports/*/link_layer /sys/class/infiniband/*/device/net/*/dev_port \
                 /sys/class/net/*/type /sys/class/net/*/ifindex /sys/class/net/*/iflink 2>/dev/null; true",
            ))
            .await?;
        let links: Vec<RdmaLink> = if links.status == 0 {
            serde_json::from_slice(&links.stdout).unwrap_or_default()
        } else {
            return Err(ProviderError::Host {
                node: node.name.clone(),
                problem: format!(
                    "`rdma -j link show` failed: {}",
                    String::from_utf8_lossy(&links.stderr).trim()
                ),
                fix: "install iproute2's `rdma` tool on the host (Debian/Ubuntu: iproute2) and load the driver of its RDMA NIC".into(),
            });
        };
        let addrs: Vec<IpAddrInfo> = serde_json::from_slice(&addrs.stdout).unwrap_or_default();
        pick_device(
            node.data_addr,
            node.rdma_device.as_deref(),
            &links,
            &addrs,
            &String::from_utf8_lossy(&layers.stdout),
        )
        .map_err(|(problem, fix)| ProviderError::Host {
            node: node.name.clone(),
            problem,
            fix,
        })
    }
}

/// The preflight's findings of one host, as `up` shows them.
fn preflight_note(found: &Found) -> String {
    let device = match &found.device {
        Some(p) => format!(
            ", RDMA {}/{} over {} ({}, ACTIVE)",
            p.device,
            p.port,
            p.netdev.as_deref().unwrap_or("no netdev"),
            p.link_layer.as_deref().unwrap_or("link layer unknown")
        ),
        None => String::new(),
    };
    let key = ssh::parse_public(&found.host_key)
        .map(|k| ssh::fingerprint(&k))
        .unwrap_or_default();
    let jump = found
        .jump_host_key
        .as_deref()
        .and_then(ssh::parse_public)
        .map(|k| format!(" (through a jump host with key {})", ssh::fingerprint(&k)))
        .unwrap_or_default();
    format!(
        "preflight passed: {}, host key {key}{jump}{device}, agent port {}",
        found.arch, found.agent_port
    )
}

/// The error of a host `down` could not reach: which host, and why.
fn unreachable(node: &NodeState, e: ProviderError) -> ProviderError {
    ProviderError::Host {
        node: node.name.clone(),
        problem: format!(
            "cannot reach the host {}@{}:{} over SSH to undo what the lab changed there: {}",
            node.ssh_user,
            node.ssh_host,
            node.ssh_port,
            without_node(&node.name, &e)
        ),
        fix: "bring the host back (or fix the network to it), then run `labctl down` again".into(),
    }
}

/// `e`'s message without its leading "node `NAME`: " (SSH errors name the
/// node; the error around it already does).
fn without_node(node: &str, e: &ProviderError) -> String {
    let text = e.to_string();
    match text.strip_prefix(&format!("node `{node}`: ")) {
        Some(rest) => rest.to_string(),
        None => text,
    }
}

/// A session to a recorded host, checking its pinned host key and logging
/// in with its recorded identity.
async fn connect_recorded(node: &NodeState) -> Result<SshSession, ProviderError> {
    let pinned = ssh::pinned_host_key(&node.name, node.host_key.as_deref())?;
    let target = SshTarget::recorded(node);
    // The identity is always the node's own key; this one is never offered.
    let unused = Arc::new(
        PrivateKey::random(&mut rand::rng(), Algorithm::Ed25519).map_err(|e| ProviderError::Io {
            context: "making a placeholder key".into(),
            source: std::io::Error::other(e.to_string()),
        })?,
    );
    Ok(SshSession::connect(&target, unused, pinned, CONNECT_TIMEOUT).await?)
}

#[async_trait]
impl Provider for SshProvider {
    async fn preflight(&self, _lab: &LabSpec, nodes: &[ResolvedNode]) -> Result<(), ProviderError> {
        let results = futures::future::join_all(nodes.iter().map(|n| self.preflight_node(n))).await;
        let mut found = BTreeMap::new();
        let mut errors = Vec::new();
        for (node, result) in nodes.iter().zip(results) {
            match result {
                Ok(f) => {
                    found.insert(node.name.clone(), f);
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        *self.found.lock().expect("preflight findings") = found;
        match errors.len() {
            0 => Ok(()),
            1 => Err(ProviderError::Preflight(errors.remove(0))),
            _ => Err(ProviderError::Preflight(errors.join("\n"))),
        }
    }

    fn check_agent(&self, agent: &AgentBinary) -> Result<(), ProviderError> {
        for found in self.found.lock().expect("preflight findings").values() {
            check_agent_arch(&agent.bytes, &found.arch)?;
        }
        Ok(())
    }

    async fn create(
        &self,
        lab: &LabSpec,
        nodes: &[ResolvedNode],
        dir: &LabDir,
        state: &mut LabState,
        _keys: &NodeKeys,
        reporter: &dyn Reporter,
    ) -> Result<(), ProviderError> {
        let found = self.found();
        let controller = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        for node in nodes {
            let Some(f) = found.get(&node.name) else {
                return Err(ProviderError::Preflight(format!(
                    "node `{}`: no preflight result (run `labctl up` again)",
                    node.name
                )));
            };
            reporter.note(&node.name, &preflight_note(f));
            let end = self.endpoint(node)?;
            let changes = host::planned_changes(&lab.name, &state.id, &controller, self.fabric == Fabric::Rxe);
            let picked = f.device.as_ref();
            // Recorded before the host is touched: `delete` undoes a claim
            // cut short, and its directory name is the lab's own.
            state.nodes.push(NodeState {
                name: node.name.clone(),
                ssh_host: end.target.host.clone(),
                ssh_port: end.target.port,
                ssh_user: end.target.user.clone(),
                ssh_identity: end.target.identity.clone(),
                ssh_jump: end.target.jump.as_ref().map(|j| JumpRecord {
                    host: j.host.clone(),
                    port: j.port,
                    user: j.user.clone(),
                    identity: j.identity.clone(),
                    host_key: f.jump_host_key.clone().unwrap_or_default(),
                }),
                ssh_agent: end.target.agent,
                data_addr: node.data_addr,
                data_prefix: node.data_prefix,
                data_netdev: picked.and_then(|p| p.netdev.clone()),
                rdma_device: picked.map(|p| p.device.clone()),
                host_key: Some(f.host_key.clone()),
                pid: None,
                agent_sha256: None,
                agent_port: f.agent_port,
                provisioned: false,
                host: Some(changes.clone()),
            });
            dir.save(state)?;
            let session = connect_recorded(state.nodes.last().expect("just pushed")).await?;
            let claimed = host::claim(&session, &node.name, end.target.user == "root", &changes).await;
            session.close().await;
            claimed?;
            reporter.note(
                &node.name,
                &format!("host lock {} taken, lab directory {}", changes.lock, changes.dir),
            );
        }
        Ok(())
    }

    async fn check_alive(&self, _dir: &LabDir, state: &LabState, node: &str) -> Result<(), ProviderError> {
        let n = state.node(node).ok_or_else(|| ProviderError::NotRunning {
            node: node.to_string(),
            reason: "not in the lab's state".into(),
        })?;
        // Behind a jump host, the jump host is what this machine can reach.
        let addr = match &n.ssh_jump {
            Some(j) => format!("{}:{}", j.host, j.port),
            None => format!("{}:{}", n.ssh_host, n.ssh_port),
        };
        match tokio::time::timeout(
            crate::provider::CHECK_ALIVE_TIMEOUT,
            tokio::net::TcpStream::connect(&addr),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(ProviderError::NotRunning {
                node: node.to_string(),
                reason: format!("SSH at {addr} cannot be reached: {e}"),
            }),
            Err(_) => Err(ProviderError::NotRunning {
                node: node.to_string(),
                reason: format!(
                    "SSH at {addr} did not answer within {} s",
                    crate::provider::CHECK_ALIVE_TIMEOUT.as_secs()
                ),
            }),
        }
    }

    fn keeps_machines(&self) -> bool {
        true
    }

    fn packages_in_image(&self) -> bool {
        // Hosts labctl does not own: `packages:` are checked, never installed.
        true
    }

    async fn delete(&self, dir: &LabDir, state: Option<&LabState>) -> Result<(), ProviderError> {
        // The hosts are not ours: only what the lab recorded goes.
        let Some(state) = state else { return Ok(()) };
        let released = futures::future::join_all(state.nodes.iter().map(|node| async move {
            let Some(changes) = &node.host else { return Ok(()) };
            let undone = async {
                let session = connect_recorded(node).await.map_err(|e| unreachable(node, e))?;
                let result = host::release(&session, &node.name, node.ssh_user == "root", changes).await;
                session.close().await;
                result
            };
            // What could not be undone is listed, so the user knows what the host keeps.
            undone
                .await
                .map_err(|e| format!("{e}\n  left on the host:\n{}", host::leftovers(changes)))
        }))
        .await;
        let mut left = state.clone();
        let mut errors = Vec::new();
        left.nodes = Vec::new();
        for (node, result) in state.nodes.iter().zip(released) {
            if let Err(e) = result {
                // The error names the node; what stays is recorded for the next `down`.
                errors.push(format!(
                    "{}\n  node `{}` stays in the lab's state: run `labctl down` again once the host answers, and it removes exactly these",
                    e.trim_end(),
                    node.name
                ));
                left.nodes.push(node.clone());
            }
        }
        if errors.is_empty() {
            return Ok(());
        }
        // What could not be undone stays recorded for the next `down`.
        dir.save(&left)?;
        Err(ProviderError::Preflight(errors.join("\n")))
    }
}

pub mod config;
pub mod host;

mod pick;
pub use pick::{pick_device, IpAddr, IpAddrInfo, Picked, RdmaLink};

#[cfg(test)]
mod tests;
