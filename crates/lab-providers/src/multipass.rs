//! The Multipass provider: one Multipass instance (an Ubuntu VM) per node,
//! driven through the `multipass` command line.
//!
//! Instances are named `<lab>-<node>`. Each is launched with a cloud-init
//! user-data (`provisioning/cloud-init/user-data.yaml`) that installs the
//! RDMA user space, authorizes the lab's SSH key for root and loads
//! `rdma_rxe`; from then on the node is provisioned over SSH like any other
//! (rxe link, agent). State is read from `multipass info --format json` and
//! `multipass list --format json`, parsed into the typed shapes below, which
//! follow Multipass's own JSON formatter. The node's SSH and data address is
//! the first IPv4 address Multipass reports for it.
//!
//! Multipass runs VMs of the host's own architecture, so on Apple silicon
//! (and any arm64 host) the nodes are aarch64 and the deployed agent must be
//! an aarch64 Linux build; [`MultipassProvider::check_agent`] says how.

mod json;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::join_all;
use serde::Deserialize;

use crate::agent_binary::AgentBinary;
use crate::image::which;
use crate::node_agent::{check_agent_arch, AGENT_PORT};
use crate::provider::{Provider, ProviderError};
use crate::{cloud_init, HostKeyPair, NodeKeys};
use lab_model::{LabSpec, MultipassSpec, ResolvedNode};
use lab_state::progress::{step, Reporter};
use lab_state::{LabDir, LabState, NodeState};

pub use self::json::{
    parse_info, parse_list, DiskUsage, InfoReport, InstanceInfo, InstanceState, ListEntry, ListReport, MemoryUsage,
    Mount, VersionReport,
};

/// The program labctl runs.
pub const PROGRAM: &str = "multipass";
/// The cloud-init user-data template; `@HOSTNAME@` and `@AUTHORIZED_KEY@` are
/// filled in per node.
pub const USER_DATA: &str = include_str!("../../../provisioning/cloud-init/user-data.yaml");
/// How long `multipass launch` may take (image download, package install by
/// cloud-init); passed to Multipass's own `--timeout` too.
pub const LAUNCH_TIMEOUT: Duration = Duration::from_secs(900);
/// How long asking cloud-init for its status (and its log) may take.
const CLOUD_INIT_CHECK_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the quick commands (`info`, `list`, `version`, `delete`) may take.
const QUICK_TIMEOUT: Duration = Duration::from_secs(120);
/// Multipass does not report the prefix of an instance's address; its
/// default networks (`mpqemubr0` on Linux, the vmnet network on macOS) are /24.
const DATA_PREFIX: u8 = 24;
/// How to install Multipass, for the missing-program error.
const INSTALL_HINT: &str = "install Multipass: `snap install multipass` on Ubuntu, `brew install --cask multipass` on macOS (see https://canonical.com/multipass/install)";

// ---------------------------------------------------------------------------
// Command lines
// ---------------------------------------------------------------------------

/// The Multipass instance of `node` in `lab`.
pub fn instance_name(lab: &str, node: &str) -> String {
    format!("{lab}-{node}")
}

/// The cloud-init user-data of one node: the template with its hostname and
/// the lab's login key, plus the host key labctl generated for it.
pub fn user_data(hostname: &str, authorized_key: &str, host_key: &HostKeyPair) -> String {
    let filled = USER_DATA
        .replace("@HOSTNAME@", hostname)
        .replace("@AUTHORIZED_KEY@", authorized_key.trim());
    let mut doc: serde_yaml_ng::Mapping =
        serde_yaml_ng::from_str(&filled).expect("the user-data template is a YAML mapping (tested)");
    cloud_init::add_host_key(&mut doc, host_key);
    cloud_init::render(&doc)
}

/// Sizes as `multipass launch` takes them: a number and a unit letter.
fn mib_arg(mib: u64) -> String {
    if mib.is_multiple_of(1024) {
        format!("{}G", mib / 1024)
    } else {
        format!("{mib}M")
    }
}

/// The arguments of `multipass launch` for one node.
/// The user-data goes on stdin (`--cloud-init -`): Multipass on Linux is a
/// snap that reads only files under the user's home, and the lab's state
/// directory may be anywhere (/srv, /opt, /tmp).
pub fn launch_args(instance: &str, node: &ResolvedNode, spec: &MultipassSpec) -> Vec<String> {
    vec![
        "launch".into(),
        "--name".into(),
        instance.into(),
        "--cpus".into(),
        node.cpus.to_string(),
        "--memory".into(),
        mib_arg(node.memory_mib),
        "--disk".into(),
        mib_arg(spec.disk.mib()),
        "--cloud-init".into(),
        "-".into(),
        "--timeout".into(),
        LAUNCH_TIMEOUT.as_secs().to_string(),
        spec.image.clone(),
    ]
}

// ---------------------------------------------------------------------------
// The provider
// ---------------------------------------------------------------------------

/// The Multipass provider.
#[derive(Debug, Clone)]
pub struct MultipassProvider {
    program: Option<PathBuf>,
}

impl Default for MultipassProvider {
    fn default() -> Self {
        Self::new()
    }
}

/// The lab's instances, recorded in `provider_state` before any is launched.
#[derive(Debug, Clone, Default, serde::Serialize, Deserialize)]
struct Recorded {
    #[serde(default)]
    instances: Vec<String>,
}

impl MultipassProvider {
    /// A provider using `multipass` from PATH.
    pub fn new() -> MultipassProvider {
        MultipassProvider {
            program: which(PROGRAM),
        }
    }

    fn program(&self) -> Result<&Path, ProviderError> {
        self.program.as_deref().ok_or_else(|| ProviderError::MissingProgram {
            program: PROGRAM.into(),
            hint: INSTALL_HINT.into(),
        })
    }

    /// Runs `multipass ARGS`; a non-zero exit is an error with its stderr.
    async fn run(&self, args: &[String], timeout: Duration) -> Result<Output, ProviderError> {
        self.run_with_input(args, None, timeout).await
    }

    /// Runs `multipass ARGS` with `input` on its stdin (none: /dev/null);
    /// fails unless it exits 0.
    async fn run_with_input(
        &self,
        args: &[String],
        input: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<Output, ProviderError> {
        let output = self.output(args, input, timeout).await?;
        if !output.status.success() {
            return Err(command_failed(&command_line(args), &output));
        }
        Ok(output)
    }

    /// Runs `multipass ARGS` and returns what it did, whatever its exit status.
    async fn output(&self, args: &[String], input: Option<&[u8]>, timeout: Duration) -> Result<Output, ProviderError> {
        let program = self.program()?;
        let command_line = command_line(args);
        let mut command = tokio::process::Command::new(program);
        // Its own process group: a Ctrl-C aimed at labctl must not kill a
        // `multipass delete` of the teardown. A dropped launch (labctl
        // interrupted) is killed instead, and the teardown deletes it.
        command
            .args(args)
            .kill_on_drop(true)
            .process_group(0)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .stdin(if input.is_some() {
                std::process::Stdio::piped()
            } else {
                std::process::Stdio::null()
            });
        let run = async {
            let mut child = command.spawn()?;
            if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
                use tokio::io::AsyncWriteExt;
                // A command that exits without reading all of it (a launch
                // refused at once) closes the pipe: its exit status and
                // stderr say why, so that is what is reported.
                match stdin.write_all(input).await {
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                    other => other?,
                }
                // Dropped here: Multipass sees the end of its input.
            }
            child.wait_with_output().await
        };
        tokio::time::timeout(timeout, run)
            .await
            .map_err(|_| ProviderError::CommandFailed {
                command: command_line.clone(),
                status: format!("no answer within {} s", timeout.as_secs()),
                stderr: String::new(),
                hint: "check `multipass list`; the Multipass daemon may be stuck (restart it)".into(),
            })?
            .map_err(|source| ProviderError::Io {
                context: format!("running {command_line}"),
                source,
            })
    }

    /// After a launch: cloud-init's own verdict on the instance. `multipass
    /// launch` waits for cloud-init but succeeds whatever it did, and a node
    /// whose cloud-init failed (no host key installed, no package mirror)
    /// would otherwise fail later at SSH with the cause out of sight.
    async fn check_cloud_init(&self, node: &str, instance: &str) -> Result<(), ProviderError> {
        let exec = |cmd: &[&str]| -> Vec<String> {
            ["exec", instance, "--"]
                .iter()
                .chain(cmd)
                .map(|s| s.to_string())
                .collect()
        };
        let status = self
            .output(
                &exec(&["cloud-init", "status", "--long"]),
                None,
                CLOUD_INIT_CHECK_TIMEOUT,
            )
            .await?;
        let text = String::from_utf8_lossy(&status.stdout);
        match cloud_init_status(&text) {
            Some("error") => {}
            Some(_) => return Ok(()),
            None => {
                // No cloud-init to ask (or no answer): SSH will tell.
                tracing::warn!(node, instance, output = %text.trim(), "cloud-init status gave no status line");
                return Ok(());
            }
        }
        let log = match self
            .output(
                &exec(&["tail", "-n", "25", "/var/log/cloud-init-output.log"]),
                None,
                CLOUD_INIT_CHECK_TIMEOUT,
            )
            .await
        {
            Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim_end().to_string(),
            Ok(out) => format!("(could not read it: {})", String::from_utf8_lossy(&out.stderr).trim()),
            Err(e) => format!("(could not read it: {e})"),
        };
        Err(ProviderError::CloudInitFailed {
            node: node.to_string(),
            instance: instance.to_string(),
            status: text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .take(4)
                .collect::<Vec<_>>()
                .join("; "),
            log,
        })
    }

    async fn list(&self) -> Result<ListReport, ProviderError> {
        let args = ["list", "--format", "json"].map(String::from);
        let out = self.run(&args, QUICK_TIMEOUT).await?;
        parse_list(&String::from_utf8_lossy(&out.stdout)).map_err(|e| unparsable("multipass list --format json", &e))
    }

    async fn info(&self, instances: &[String]) -> Result<InfoReport, ProviderError> {
        let mut args: Vec<String> = ["info", "--format", "json"].map(String::from).to_vec();
        args.extend(instances.iter().cloned());
        let out = self.run(&args, QUICK_TIMEOUT).await?;
        parse_info(&String::from_utf8_lossy(&out.stdout)).map_err(|e| unparsable("multipass info --format json", &e))
    }

    /// The instances this lab may have: those recorded in its state, and
    /// those whose user-data was written (a crash between writing it and
    /// saving state still leaves the file).
    fn lab_instances(dir: &LabDir, state: Option<&LabState>) -> Vec<String> {
        let mut names: Vec<String> = state
            .and_then(|s| serde_json::from_value::<Recorded>(s.provider_state.clone()).ok())
            .map(|r| r.instances)
            .unwrap_or_default();
        let lab = dir.root().file_name().map(|n| n.to_string_lossy().into_owned());
        if let (Some(lab), Ok(entries)) = (lab, std::fs::read_dir(user_data_dir(dir))) {
            for entry in entries.flatten() {
                let file = entry.file_name().to_string_lossy().into_owned();
                if let Some(node) = file.strip_suffix(".user-data.yaml") {
                    names.push(instance_name(&lab, node));
                }
            }
        }
        names.sort();
        names.dedup();
        names
    }
}

/// The command line as printed in errors.
fn command_line(args: &[String]) -> String {
    format!("{PROGRAM} {}", args.join(" "))
}

/// The value of the `status:` line of `cloud-init status` ("done", "error", "running").
pub fn cloud_init_status(output: &str) -> Option<&str> {
    output
        .lines()
        .find_map(|l| l.trim().strip_prefix("status:"))
        .map(str::trim)
}

fn user_data_dir(dir: &LabDir) -> PathBuf {
    dir.root().join("multipass")
}

fn command_failed(command_line: &str, output: &Output) -> ProviderError {
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
    let hint = if stderr.contains("multipassd") || stderr.contains("cannot connect") {
        "the Multipass daemon does not answer: start it (`snap start multipass` on Ubuntu; on macOS reopen Multipass.app)"
    } else if stderr.contains("does not exist") {
        "the instance is gone; `labctl down` and `labctl up` recreate the lab"
    } else {
        "see Multipass's message above; `multipass list` shows what exists"
    };
    ProviderError::CommandFailed {
        command: command_line.to_string(),
        status: output.status.to_string(),
        stderr,
        hint: hint.into(),
    }
}

fn unparsable(command: &str, e: &serde_json::Error) -> ProviderError {
    ProviderError::CommandFailed {
        command: command.into(),
        status: "exit status 0".into(),
        stderr: format!("unexpected JSON: {e}"),
        hint: "this Multipass version prints a layout labctl does not know; report it with `multipass version`".into(),
    }
}

#[async_trait]
impl Provider for MultipassProvider {
    async fn preflight(&self, lab: &LabSpec, nodes: &[ResolvedNode]) -> Result<(), ProviderError> {
        self.program()?;
        let version = self
            .run(&["version", "--format", "json"].map(String::from), QUICK_TIMEOUT)
            .await?;
        let version: VersionReport =
            serde_json::from_slice(&version.stdout).map_err(|e| unparsable("multipass version --format json", &e))?;
        if version.multipassd.is_none() {
            return Err(ProviderError::CommandFailed {
                command: "multipass version --format json".into(),
                status: "exit status 0".into(),
                stderr: format!(
                    "client {} answered, but the daemon multipassd did not",
                    version.multipass
                ),
                hint: "start the Multipass daemon (`snap start multipass` on Ubuntu; on macOS open Multipass.app)"
                    .into(),
            });
        }
        let existing = self.list().await?;
        for node in nodes {
            let name = instance_name(&lab.name, &node.name);
            if let Some(found) = existing.list.iter().find(|i| i.name == name) {
                return Err(ProviderError::InstanceExists {
                    node: node.name.clone(),
                    instance: name,
                    state: found.state.as_str().into(),
                });
            }
        }
        Ok(())
    }

    fn check_agent(&self, agent: &AgentBinary) -> Result<(), ProviderError> {
        // Multipass runs VMs of the host's own architecture.
        check_agent_arch(&agent.bytes, std::env::consts::ARCH)
    }

    async fn create(
        &self,
        lab: &LabSpec,
        nodes: &[ResolvedNode],
        dir: &LabDir,
        state: &mut LabState,
        keys: &NodeKeys,
        reporter: &dyn Reporter,
    ) -> Result<(), ProviderError> {
        let spec = lab.multipass.clone().unwrap_or_default();
        let ud_dir = user_data_dir(dir);
        std::fs::create_dir_all(&ud_dir).map_err(|source| ProviderError::Io {
            context: format!("creating {}", ud_dir.display()),
            source,
        })?;
        let instances: Vec<String> = nodes.iter().map(|n| instance_name(&lab.name, &n.name)).collect();
        state.provider_state = serde_json::json!({
            "instances": instances,
            "image": spec.image,
            "disk": spec.disk.to_string(),
        });
        dir.save(state)?;
        reporter.note(
            "lab",
            &format!("multipass: launching {} ({})", instances.join(", "), spec.image),
        );
        let launches = nodes.iter().zip(&instances).map(|(node, instance)| {
            let path = ud_dir.join(format!("{}.user-data.yaml", node.name));
            let spec = &spec;
            async move {
                let text = user_data(&node.name, &keys.authorized_key, keys.host_key(&node.name)?);
                // 0600: it holds the node's private host key.
                lab_state::write_atomic(&path, text.as_bytes(), 0o600)?;
                let args = launch_args(instance, node, spec);
                step(
                    reporter,
                    &node.name,
                    "launch",
                    self.run_with_input(&args, Some(text.as_bytes()), LAUNCH_TIMEOUT + Duration::from_secs(60)),
                )
                .await?;
                // `multipass launch` waits for cloud-init but does not say how it went.
                step(
                    reporter,
                    &node.name,
                    "cloud-init",
                    self.check_cloud_init(&node.name, instance),
                )
                .await
            }
        });
        for result in join_all(launches).await {
            result?;
        }
        let info = self.info(&instances).await?;
        for (node, instance) in nodes.iter().zip(&instances) {
            let found = info.info.get(instance).ok_or_else(|| ProviderError::NotRunning {
                node: node.name.clone(),
                reason: format!("`multipass info` does not list instance `{instance}` after its launch"),
            })?;
            let addr = match (found.state.is_running(), found.first_ipv4()) {
                (true, Some(addr)) => addr,
                (running, _) => {
                    return Err(ProviderError::NotRunning {
                        node: node.name.clone(),
                        reason: if running {
                            format!("instance `{instance}` runs but Multipass reports no IPv4 address for it")
                        } else {
                            format!("instance `{instance}` is {} after its launch", found.state.as_str())
                        },
                    })
                }
            };
            state.nodes.push(NodeState {
                name: node.name.clone(),
                ssh_host: addr.to_string(),
                ssh_port: 22,
                ssh_user: "root".into(),
                ssh_identity: None,
                ssh_jump: None,
                ssh_agent: false,
                data_addr: addr,
                data_prefix: DATA_PREFIX,
                data_netdev: None,
                rdma_device: None,
                host_key: Some(keys.host_key(&node.name)?.public.trim().to_string()),
                pid: None,
                agent_sha256: None,
                agent_port: AGENT_PORT,
                provisioned: false,
                host: None,
            });
        }
        dir.save(state)?;
        Ok(())
    }

    async fn check_alive(&self, _dir: &LabDir, state: &LabState, node: &str) -> Result<(), ProviderError> {
        let program = self.program()?;
        let instance = instance_name(&state.lab, node);
        let down = |reason: String| ProviderError::NotRunning {
            node: node.to_string(),
            reason,
        };
        // A wedged multipassd must not stall `status` or an `up` waiting on
        // SSH: the question has a deadline, and the command is killed past it.
        let asked = tokio::process::Command::new(program)
            .args(["info", "--format", "json", &instance])
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(crate::provider::CHECK_ALIVE_TIMEOUT, asked)
            .await
            .map_err(|_| ProviderError::Io {
                context: format!("running {PROGRAM} info {instance}"),
                source: std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "no answer within {} s (is multipassd stuck? `multipass list` shows whether it answers at all)",
                        crate::provider::CHECK_ALIVE_TIMEOUT.as_secs()
                    ),
                ),
            })?
            .map_err(|source| ProviderError::Io {
                context: format!("running {PROGRAM} info"),
                source,
            })?;
        if !output.status.success() {
            return Err(down(format!(
                "`multipass info {instance}` failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        let info = parse_info(&String::from_utf8_lossy(&output.stdout))
            .map_err(|e| unparsable("multipass info --format json", &e))?;
        match info.info.get(&instance) {
            Some(i) if i.state.is_running() => Ok(()),
            Some(i) => Err(down(format!(
                "Multipass reports instance `{instance}` as {}",
                i.state.as_str()
            ))),
            None => Err(down(format!("Multipass does not know instance `{instance}`"))),
        }
    }

    async fn delete(&self, dir: &LabDir, state: Option<&LabState>) -> Result<(), ProviderError> {
        let ours = Self::lab_instances(dir, state);
        if ours.is_empty() {
            return Ok(());
        }
        let existing = self.list().await?;
        let doomed: Vec<String> = existing
            .list
            .iter()
            .filter(|i| ours.contains(&i.name))
            .map(|i| i.name.clone())
            .collect();
        if doomed.is_empty() {
            return Ok(());
        }
        let mut args = vec!["delete".to_string(), "--purge".to_string()];
        args.extend(doomed);
        self.run(&args, QUICK_TIMEOUT).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud_init::tests::test_host_key;

    #[test]
    fn test_sizes_are_written_as_multipass_takes_them() {
        assert_eq!(mib_arg(1024), "1G");
        assert_eq!(mib_arg(1536), "1536M");
        assert_eq!(mib_arg(10 * 1024), "10G");
    }

    #[test]
    fn test_user_data_carries_key_hostname_and_packages() {
        let text = user_data("server", "ssh-ed25519 AAAAC3 labctl\n", &test_host_key());
        assert!(text.starts_with("#cloud-config\n"), "cloud-init needs the header first");
        assert!(!text.contains('@'), "a placeholder was left: {text}");
        // It is YAML, and everything is where cloud-init looks for it.
        let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(doc["hostname"].as_str(), Some("server"));
        assert_eq!(doc["disable_root"].as_bool(), Some(false));
        assert_eq!(
            doc["ssh_authorized_keys"][0].as_str(),
            Some("ssh-ed25519 AAAAC3 labctl")
        );
        let packages: Vec<&str> = doc["packages"]
            .as_sequence()
            .unwrap()
            .iter()
            .filter_map(|p| p.as_str())
            .collect();
        for package in [
            "rdma-core",
            "ibverbs-utils",
            "rdmacm-utils",
            "perftest",
            "libfabric-bin",
            "iproute2",
        ] {
            assert!(packages.contains(&package), "{package} missing");
        }
        assert!(text.contains("modprobe rdma_rxe"));
        // The node presents the host key labctl generated and pinned.
        assert_eq!(
            doc["ssh_keys"]["ed25519_public"].as_str(),
            Some(test_host_key().public.as_str())
        );
    }
}
