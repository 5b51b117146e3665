//! The lab lifecycle: `up`, `status`, `exec`, `down`. One way for data to
//! flow: labs.yaml → resolved nodes → provider → provisioning → agents.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use russh::keys::PrivateKey;

use lab_model::{ConfigError, Fabric, LabSpec, LabsFile, ResolvedNode};
use lab_providers::AgentBinary;
use lab_providers::{HostKeyPair, NodeKeys, PreloadFile, Provider, ProviderError};
use lab_remote::agent::{self, AgentError};
use lab_state::progress::Reporter;

use crate::facts::LabFacts;
use crate::provision::{self, AgentDeploy, NodeJob, ProvisionError};
use agent_proto::auth::AgentSecret;
use lab_remote::command::RemoteCommand;
use lab_remote::ssh::{self, SshError, SshSession};
use lab_state::{LabDir, LabLock, LabState, Phase, StateError};

// `labctl ssh`'s files and command line, an `impl Lab` of its own.
mod ssh_command;
// The second `up`: what exists checked and repaired, an `impl Lab` of its own.
mod verify;

/// Errors of lab operations.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// labs.yaml is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// State could not be read, written or locked.
    #[error(transparent)]
    State(#[from] StateError),
    /// The provider failed.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// A node could not be provisioned.
    #[error(transparent)]
    Provision(#[from] ProvisionError),
    /// SSH failed.
    #[error(transparent)]
    Ssh(#[from] SshError),
    /// An agent failed.
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// A node failed in a way its console may explain.
    #[error("{error}\n--- last lines of the console of `{node}` ({path}) ---\n{tail}")]
    WithConsole {
        /// The node.
        node: String,
        /// What failed.
        error: Box<ProvisionError>,
        /// The console log.
        path: String,
        /// Its last lines.
        tail: String,
    },
    /// Several nodes failed; each error names its node.
    #[error("{} nodes failed:\n{}", .0.len(), .0.iter().map(|e| format!("- {e}")).collect::<Vec<_>>().join("\n"))]
    Nodes(Vec<LabError>),
    /// The lab is not up.
    #[error("lab `{0}` is not up; run `labctl up` first")]
    NotUp(String),
    /// No node of that name.
    #[error("lab `{lab}` has no node `{node}`; its nodes are: {}", .known.join(", "))]
    UnknownNode {
        /// The lab.
        lab: String,
        /// The name asked for.
        node: String,
        /// The nodes it has.
        known: Vec<String>,
    },
    /// The lab exists but is not healthy; `up` will not paper over it.
    #[error("lab `{lab}` exists but is not healthy: {reason}\nrun `labctl down` and then `labctl up` to recreate it")]
    Unhealthy {
        /// The lab.
        lab: String,
        /// What is wrong.
        reason: String,
    },
    /// A command's placeholder cannot be filled (bad input).
    #[error(transparent)]
    Placeholder(#[from] crate::facts::PlaceholderError),
    /// A command uses placeholders, and the lab has no facts to fill them.
    #[error("lab `{0}` has no lab facts to fill placeholders from (it was brought up by an older labctl); run `labctl up` once more")]
    NoFacts(String),
    /// The lab's agent secret cannot be read (a lab brought up by an older
    /// labctl, or a file changed by hand).
    #[error("{0}\n  fix: run `labctl up` once more (it installs a new secret on every node)")]
    AgentSecret(String),
    /// The agent binary to deploy was not found.
    #[error("cannot read the rdma-agent binary {path}: {source}; build it with `cargo build --release -p rdma-agent` or point LABCTL_AGENT at it")]
    AgentBinary {
        /// Where labctl looked.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The files `labctl ssh` hands to the system's ssh cannot be written.
    #[error("lab `{lab}`: cannot write the ssh config for `labctl ssh`: {problem}\n  fix: give the node an identity_file at a path without `\"` or newlines")]
    SshClientConfig {
        /// The lab.
        lab: String,
        /// What is wrong.
        problem: String,
    },
}

/// Options of `up`.
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// Keep what was created when `up` fails (for debugging).
    pub keep_on_failure: bool,
    /// The rdma-agent binary to deploy.
    pub agent_binary: PathBuf,
    /// How long to wait for each node's SSH.
    pub ssh_wait: Duration,
    /// How long to wait for another labctl holding the lab.
    pub lock_wait: Duration,
}

/// What [`Lab::up_then`] runs over a ready lab's open SSH sessions (one
/// per node, in the state's order) before closing them.
pub type ThenOverSessions<T> =
    for<'a> fn(&'a Lab, &'a [Arc<SshSession>], &'a dyn Reporter) -> futures::future::BoxFuture<'a, T>;

/// What `up` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpOutcome {
    /// The lab was created.
    Created,
    /// It was already up; it was verified and left alone.
    AlreadyUp,
}

/// One lab from labs.yaml with its state directory.
pub struct Lab {
    /// The labs file it came from.
    pub file: PathBuf,
    /// Its definition.
    pub spec: LabSpec,
    /// Its nodes with defaults applied.
    pub nodes: Vec<ResolvedNode>,
    /// Where its state lives.
    pub dir: LabDir,
}

impl Lab {
    /// Loads `labs_file` and selects `name` (or the first lab).
    pub fn open(labs_file: &Path, name: Option<&str>) -> Result<Lab, LabError> {
        let file = LabsFile::load(labs_file)?;
        let spec = file.select(name)?.clone();
        let nodes = spec.resolve_nodes();
        let dir = LabDir::for_lab(labs_file, &spec.name);
        Ok(Lab {
            file: labs_file.to_path_buf(),
            spec,
            nodes,
            dir,
        })
    }

    /// Opens lab `name` (default: the first) of the built-in labs, whose
    /// state lives in the user's state directory ([`LabDir::for_builtin_lab`]).
    pub fn open_builtin(name: Option<&str>) -> Result<Lab, LabError> {
        let file = LabsFile::builtin();
        let spec = file.select(name)?.clone();
        let nodes = spec.resolve_nodes();
        let dir = LabDir::for_builtin_lab(&spec.name);
        Ok(Lab {
            file: PathBuf::from(lab_model::builtin::BUILTIN_NAME),
            spec,
            nodes,
            dir,
        })
    }

    pub(crate) fn provider(&self) -> Result<Box<dyn Provider>, LabError> {
        Ok(lab_providers::for_lab(&self.spec)?)
    }

    /// Takes the lab's lock, waiting up to `wait` on a blocking thread so
    /// the runtime's other tasks (progress, signals) keep running meanwhile.
    pub async fn lock(&self, wait: Duration) -> Result<LabLock, LabError> {
        let dir = self.dir.clone();
        let lock = tokio::task::spawn_blocking(move || dir.lock(wait))
            .await
            .expect("the lock wait does not panic")?;
        Ok(lock)
    }

    /// The recorded state, or [`LabError::NotUp`].
    pub fn state(&self) -> Result<LabState, LabError> {
        self.dir.load()?.ok_or_else(|| LabError::NotUp(self.spec.name.clone()))
    }

    /// Brings the lab up, or verifies it when it is already up.
    pub async fn up(&self, opts: &UpOptions, reporter: &dyn Reporter) -> Result<UpOutcome, LabError> {
        let nothing: ThenOverSessions<()> = |_, _, _| Box::pin(async {});
        self.up_then(opts, reporter, nothing).await.map(|(outcome, ())| outcome)
    }

    /// [`Lab::up`], then `then` over the ready lab's SSH sessions (one per
    /// node, in the state's order) before they close: what `up` reports at
    /// the end is read over the connections it already has instead of new
    /// ones (see `Lab::up_with_status`).
    pub async fn up_then<T>(
        &self,
        opts: &UpOptions,
        reporter: &dyn Reporter,
        then: ThenOverSessions<T>,
    ) -> Result<(UpOutcome, T), LabError> {
        let existed = self.dir.exists();
        let _lock = self.lock(opts.lock_wait).await?;
        // Checks that fail before anything is created leave nothing behind,
        // not even the directory that holds the lock.
        let discard = |e: LabError| {
            if !existed {
                let _ = self.dir.remove();
            }
            e
        };
        let agent = AgentBinary::load(&opts.agent_binary, env!("CARGO_PKG_VERSION"))
            .map_err(|source| LabError::AgentBinary {
                path: opts.agent_binary.clone(),
                source,
            })
            .map_err(discard)?;
        match self.dir.load()? {
            Some(state) if state.phase == Phase::Ready => {
                let then = self.verify(state, &agent, reporter, then).await?;
                return Ok((UpOutcome::AlreadyUp, then));
            }
            Some(_) => {
                reporter.note("lab", "removing the remains of an earlier failed `up`");
                self.teardown().await?;
            }
            None => {}
        }
        let provider = self.provider().map_err(discard)?;
        provider
            .preflight(&self.spec, &self.nodes)
            .await
            .map_err(|e| discard(e.into()))?;
        provider.check_agent(&agent).map_err(|e| discard(e.into()))?;
        match self.create(provider.as_ref(), opts, &agent, reporter, then).await {
            Ok(then) => Ok((UpOutcome::Created, then)),
            Err(e) if opts.keep_on_failure => {
                if let Ok(Some(mut state)) = self.dir.load() {
                    state.phase = Phase::Failed;
                    let _ = self.dir.save(&state);
                }
                reporter.note(
                    "lab",
                    &format!("keeping the failed lab in {}", self.dir.root().display()),
                );
                Err(e)
            }
            Err(e) => {
                reporter.note("lab", "up failed; removing what it created");
                if let Err(cleanup) = self.teardown().await {
                    reporter.note("lab", &format!("cleanup also failed: {cleanup}"));
                }
                Err(e)
            }
        }
    }

    async fn create<T>(
        &self,
        provider: &dyn Provider,
        opts: &UpOptions,
        agent: &AgentBinary,
        reporter: &dyn Reporter,
        then: ThenOverSessions<T>,
    ) -> Result<T, LabError> {
        self.dir.create()?;
        let mut state = LabState::new(
            &self.spec.name,
            &self.spec.provider.to_string(),
            &self.spec.fabric.to_string(),
        );
        self.dir.save(&state)?;
        // Before anything exists: from here on the lab is known as live.
        lab_state::live_labs::register(&lab_state::live_labs::LiveLab {
            id: state.id.clone(),
            lab: state.lab.clone(),
            provider: state.provider.clone(),
            state_dir: self.dir.root().to_path_buf(),
            created: state.created_at.clone(),
        })?;
        let key = Arc::new(ssh::load_or_create_key(&self.dir.ssh_key())?);
        let mut keys = self.node_keys(&key)?;
        let secret = self.load_or_create_agent_secret()?;
        // Where the provider can, nodes boot with the agent and its secret
        // (no upload, the agent starts with the node); provisioning checks
        // them by hash as it does on any node.
        keys.preload = vec![
            PreloadFile {
                path: provision::AGENT_PATH.into(),
                mode: 0o755,
                bytes: agent.bytes.clone(),
            },
            PreloadFile {
                path: agent_proto::auth::NODE_SECRET_FILE.into(),
                mode: 0o600,
                bytes: Arc::new(secret.to_file_text().into_bytes()),
            },
        ];
        provider
            .create(&self.spec, &self.nodes, &self.dir, &mut state, &keys, reporter)
            .await?;
        self.dir.save(&state)?;
        let sessions = self
            .provision_all(
                provider,
                &mut state,
                key,
                AgentDeploy {
                    binary: agent,
                    secret: &secret,
                },
                opts.ssh_wait,
                reporter,
            )
            .await?;
        let ready = async {
            self.set_facts(&state, &sessions, &secret, reporter).await?;
            self.set_node_ssh(&state, &sessions, reporter).await?;
            state.phase = Phase::Ready;
            self.dir.save(&state)?;
            self.write_known_hosts(&state)?;
            Ok::<_, LabError>(then(self, &sessions, reporter).await)
        }
        .await;
        for session in &sessions {
            session.close().await;
        }
        ready
    }

    async fn provision_all(
        &self,
        provider: &dyn Provider,
        state: &mut LabState,
        key: Arc<PrivateKey>,
        agent: AgentDeploy<'_>,
        ssh_wait: Duration,
        reporter: &dyn Reporter,
    ) -> Result<Vec<Arc<SshSession>>, LabError> {
        let rxe = self.spec.fabric == Fabric::Rxe;
        let efa = self.spec.fabric == Fabric::Efa;
        let packages_in_image = provider.packages_in_image();
        // provision_all runs right after `create` booted the nodes.
        let agent_at_boot = provider.boots_with_preload();
        let set_clock = self.nodes_keep_no_time();
        let snapshot = state.clone();
        let mut nodes = state.nodes.clone();
        let jobs = nodes.iter_mut().map(|node| {
            let name = node.name.clone();
            let key = key.clone();
            let snapshot = &snapshot;
            async move {
                let job = NodeJob {
                    node,
                    key,
                    rxe,
                    efa,
                    packages: &self.spec.packages,
                    packages_in_image,
                    agent,
                    agent_at_boot,
                    ssh_wait,
                    console: provider.console_log(&self.dir, &name),
                    set_clock,
                };
                let result =
                    provision::provision_node(job, reporter, || provider.check_alive(&self.dir, snapshot, &name)).await;
                match result {
                    Ok(session) => Ok(session),
                    // A node that never answered may say why on its console.
                    Err(error @ (ProvisionError::Ssh(_) | ProvisionError::Agent(_))) => {
                        Err(match provider.console_log(&self.dir, &name) {
                            Some(path) => LabError::WithConsole {
                                node: name.clone(),
                                error: Box::new(error),
                                tail: lab_state::text::file_tail(&path, 15),
                                path: path.display().to_string(),
                            },
                            None => LabError::Provision(error),
                        })
                    }
                    Err(error) => Err(LabError::Provision(error)),
                }
            }
        });
        let results = join_all(jobs).await;
        state.nodes = nodes;
        self.dir.save(state)?;
        let mut sessions = Vec::new();
        let mut errors = Vec::new();
        for result in results {
            match result {
                Ok(session) => sessions.push(session),
                Err(e) => errors.push(e),
            }
        }
        if !errors.is_empty() {
            for session in &sessions {
                session.close().await;
            }
        }
        one_or_all(errors)?;
        Ok(sessions)
    }

    /// The lab facts: each node's `NodeInfo` from its agent (over
    /// `sessions`, one per node of `state`, in order), saved in the state
    /// directory and written on every node (`lab.env`, the hostfile, the
    /// lab's `/etc/hosts` lines), replacing what an earlier `up` wrote.
    async fn set_facts(
        &self,
        state: &LabState,
        sessions: &[Arc<SshSession>],
        secret: &AgentSecret,
        reporter: &dyn Reporter,
    ) -> Result<LabFacts, LabError> {
        let infos = join_all(state.nodes.iter().zip(sessions).map(|(node, session)| async move {
            let info = provision::node_info(session, node, secret).await?;
            Ok::<_, ProvisionError>((node.name.clone(), info))
        }))
        .await;
        let mut by_node = BTreeMap::new();
        let mut errors = Vec::new();
        for info in infos {
            match info {
                Ok((name, info)) => {
                    by_node.insert(name, info);
                }
                Err(e) => errors.push(LabError::Provision(e)),
            }
        }
        one_or_all(errors)?;
        let fabric = state.fabric.parse().unwrap_or(self.spec.fabric);
        let facts = LabFacts::build(state, fabric, &by_node, |name| {
            self.nodes.iter().find(|n| n.name == name).map_or(1, |n| n.cpus)
        });
        facts.save(&self.dir)?;
        let facts_ref = &facts;
        on_every_node(state, sessions, reporter, "facts", |session, node| {
            provision::write_facts(session, node, facts_ref)
        })
        .await?;
        Ok(facts)
    }

    /// `node_ssh:`: the lab's node key pair (created at the first `up`, kept
    /// in the state directory) and every node's host key, installed on every
    /// node (over `sessions`, one per node of `state`, in order) for the
    /// login user, replacing what an earlier `up` installed.
    async fn set_node_ssh(
        &self,
        state: &LabState,
        sessions: &[Arc<SshSession>],
        reporter: &dyn Reporter,
    ) -> Result<(), LabError> {
        if !self.spec.node_ssh {
            return Ok(());
        }
        if state.nodes.iter().any(|n| n.host.is_some()) {
            // ~/.ssh of a host labctl does not own is not the lab's to change.
            reporter.note(
                "lab",
                "node_ssh: not set up on hosts that outlive the lab (provider ssh)",
            );
            return Ok(());
        }
        let key_path = self.dir.node_ssh_key();
        let key = ssh::load_or_create_key(&key_path)?;
        let private_key = std::fs::read(&key_path).map_err(|e| SshError::Key {
            path: key_path.display().to_string(),
            message: e.to_string(),
        })?;
        let public_line = ssh::public_line(key.public_key());
        let setup = provision::NodeSsh {
            private_key,
            authorized_keys: crate::facts::authorized_keys_line(&state.lab, &public_line),
            public_line,
            known_hosts: crate::facts::known_hosts_lines(state),
            marker: crate::facts::lab_marker(&state.lab),
        };
        let setup = &setup;
        on_every_node(state, sessions, reporter, "node ssh", |session, _node| {
            provision::write_node_ssh(session, setup)
        })
        .await
    }

    /// Whether the nodes' wall clocks are labctl's to set at `up`: QEMU
    /// nodes keep no time of their own (the host's RTC at boot, to the
    /// second; no NTP in the image); the other providers' nodes keep theirs
    /// (NTP, the cloud's time service) or are the user's hosts.
    fn nodes_keep_no_time(&self) -> bool {
        self.spec.provider == lab_model::ProviderKind::Qemu
    }

    /// Removes every VM, process and file of the lab. Idempotent.
    pub async fn down(&self, lock_wait: Duration) -> Result<bool, LabError> {
        if !self.dir.exists() {
            return Ok(false);
        }
        let _lock = self.lock(lock_wait).await?;
        self.teardown().await?;
        Ok(true)
    }

    async fn teardown(&self) -> Result<(), LabError> {
        let state = self.dir.load().ok().flatten();
        let provider = self.provider()?;
        if provider.keeps_machines() {
            if let Some(state) = &state {
                self.remove_facts(state).await;
            }
        }
        provider.delete(&self.dir, state.as_ref()).await?;
        self.dir.remove()?;
        // Last: until everything is gone the list of live labs says it is live,
        // so `down --leaked` never takes it for another lab's leftovers.
        if let Some(state) = state.filter(|s| !s.id.is_empty()) {
            lab_state::live_labs::unregister(&state.id)?;
        }
        Ok(())
    }

    /// Removes the lab facts from the nodes, best effort (a node that does
    /// not answer keeps them): only for machines that outlive the lab.
    async fn remove_facts(&self, state: &LabState) {
        let Ok(key) = ssh::load_or_create_key(&self.dir.ssh_key()) else {
            return;
        };
        let key = Arc::new(key);
        // A host with the lab's own directory had its facts there: the
        // provider's `delete` removes that directory.
        join_all(state.nodes.iter().filter(|n| n.host.is_none()).map(|node| {
            let key = key.clone();
            async move {
                let result = async {
                    let session = connect_pinned(node, key, Duration::from_secs(10)).await?;
                    let removed = provision::remove_facts(&session, node, &state.lab).await;
                    session.close().await;
                    Ok::<_, LabError>(removed?)
                }
                .await;
                if let Err(e) = result {
                    tracing::warn!(node = %node.name, "could not remove the lab facts: {e}");
                }
            }
        }))
        .await;
    }

    /// Connects to a node of the lab over SSH with its pinned host key.
    pub async fn connect(&self, state: &LabState, node: &str) -> Result<SshSession, LabError> {
        let node = self.node_state(state, node)?;
        let key = Arc::new(ssh::load_or_create_key(&self.dir.ssh_key())?);
        connect_pinned(node, key, Duration::from_secs(20)).await
    }

    /// The recorded node `name`, or an error listing the lab's nodes.
    pub fn node_state<'s>(&self, state: &'s LabState, name: &str) -> Result<&'s lab_state::NodeState, LabError> {
        state.node(name).ok_or_else(|| LabError::UnknownNode {
            lab: self.spec.name.clone(),
            node: name.to_string(),
            known: state.nodes.iter().map(|n| n.name.clone()).collect(),
        })
    }

    /// Runs `command` on `node`, streaming its output; returns its exit status.
    pub async fn exec(
        &self,
        node: &str,
        command: &RemoteCommand,
        on_output: impl FnMut(bool, &[u8]),
    ) -> Result<i32, LabError> {
        let state = self.state()?;
        let session = self.connect(&state, node).await?;
        let status = session.exec_streaming(command, None, on_output).await?;
        session.close().await;
        Ok(status)
    }

    /// The keys the provider puts on the nodes: the lab's login key, and a
    /// host key pair per node that labctl generates (or finds from an
    /// earlier `create` of this lab) before any node boots.
    fn node_keys(&self, login: &PrivateKey) -> Result<NodeKeys, LabError> {
        let mut host_keys = std::collections::BTreeMap::new();
        for node in &self.nodes {
            let (private_openssh, public) = ssh::load_or_create_host_key(&self.dir.host_key(&node.name))?;
            host_keys.insert(
                node.name.clone(),
                HostKeyPair {
                    private_openssh,
                    public,
                },
            );
        }
        Ok(NodeKeys {
            authorized_key: ssh::public_line(login.public_key()),
            host_keys,
            preload: Vec::new(),
        })
    }

    /// The lab's agent secret, made at its first `up` (see
    /// [`agent_proto::auth`]).
    fn load_or_create_agent_secret(&self) -> Result<AgentSecret, LabError> {
        let path = self.dir.agent_secret();
        if path.exists() {
            return self.agent_secret();
        }
        let secret = AgentSecret::generate();
        lab_state::write_atomic(&path, secret.to_file_text().as_bytes(), 0o600)?;
        Ok(secret)
    }

    /// The lab's agent secret, which every call to its agents carries.
    pub fn agent_secret(&self) -> Result<AgentSecret, LabError> {
        AgentSecret::read_file(&self.dir.agent_secret()).map_err(|e| LabError::AgentSecret(e.to_string()))
    }

    /// A client of `node`'s agent over `session`, carrying the lab's secret.
    pub async fn agent(
        &self,
        session: Arc<SshSession>,
        node: &lab_state::NodeState,
    ) -> Result<agent::Client, LabError> {
        Ok(agent::connect(session, node.agent_port, &self.agent_secret()?).await?)
    }
}

/// An SSH session to `node` that accepts only its recorded host key.
pub(crate) async fn connect_pinned(
    node: &lab_state::NodeState,
    key: Arc<PrivateKey>,
    timeout: Duration,
) -> Result<SshSession, LabError> {
    let pinned = ssh::pinned_host_key(&node.name, node.host_key.as_deref())?;
    Ok(SshSession::connect(&provision::target(node), key, pinned, timeout).await?)
}

/// No error, one error, or several (each names its node).
/// Runs `work` on every node of `state` in parallel (over `sessions`, one
/// per node, in order), each shown as progress step `what`; every node's
/// error is kept.
async fn on_every_node<'a, F, Fut>(
    state: &'a LabState,
    sessions: &'a [Arc<SshSession>],
    reporter: &dyn Reporter,
    what: &str,
    work: F,
) -> Result<(), LabError>
where
    F: Fn(&'a SshSession, &'a lab_state::NodeState) -> Fut,
    Fut: std::future::Future<Output = Result<(), ProvisionError>>,
{
    let runs = state.nodes.iter().zip(sessions).map(|(node, session)| {
        let run = work(session, node);
        async move {
            lab_state::progress::step(reporter, &node.name, what, run)
                .await
                .map_err(LabError::Provision)
        }
    });
    let errors = join_all(runs).await.into_iter().filter_map(Result::err).collect();
    one_or_all(errors)
}

fn one_or_all(mut errors: Vec<LabError>) -> Result<(), LabError> {
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => Err(LabError::Nodes(errors)),
    }
}
