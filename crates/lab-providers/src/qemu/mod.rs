//! The local provider: one QEMU VM per node, booted straight from the cached
//! Debian image (kernel + initramfs, the whole node lives in RAM).
//!
//! Each VM has a management NIC (QEMU user networking; SSH forwarded to
//! 127.0.0.1) and a data NIC on the lab's segment, a switch run by the lab's
//! supervisor (see [`supervisor`]). Per-node identity (hostname, data address,
//! the lab's SSH key) rides on a small cpio archive appended to the shared
//! initramfs. KVM is used where it works, TCG otherwise.

pub mod process;
pub mod supervisor;
pub mod switch;

use std::fs;
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use backon::{ConstantBuilder, Retryable};
use nix::sys::signal::Signal;

use self::process::StartedProcess;
use self::supervisor::{exit_file, SupervisorReport, VmPlan, VmSpec, PLAN_FILE, PROCESS_FILE, REPORT_FILE};
use crate::image::{self, which};
use crate::provider::{Provider, ProviderError};
use crate::{HostKeyPair, NodeKeys, PreloadFile};
use lab_model::{Accel, LabSpec, ResolvedNode};
use lab_state::progress::{step, Reporter};
use lab_state::text::file_tail;
use lab_state::{LabDir, LabState, NodeState};

/// The QEMU binary labctl runs.
pub const QEMU: &str = "qemu-system-x86_64";
/// The port rdma-agent listens on inside every node (loopback only).
pub const AGENT_PORT: u16 = 7470;

/// The local QEMU provider.
#[derive(Debug, Default)]
pub struct QemuProvider;

impl QemuProvider {
    /// A provider using `qemu-system-x86_64` from PATH.
    pub fn new() -> QemuProvider {
        QemuProvider
    }
}

/// Which accelerator to use and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccelChoice {
    /// `kvm` or `tcg`.
    pub accel: &'static str,
    /// Why it was chosen, for the log.
    pub reason: String,
}

/// Picks KVM when it is requested or usable, else TCG. `LABCTL_ACCEL`
/// (kvm|tcg) overrides labs.yaml.
///
/// `/dev/kvm` alone is not enough: some hosts back it with `kvm_pvm`, under
/// which a stock guest kernel hangs at boot. KVM counts as usable only with
/// `kvm_intel` or `kvm_amd` loaded.
pub fn choose_accel(requested: Accel) -> AccelChoice {
    let env = std::env::var("LABCTL_ACCEL").ok();
    let (requested, source) = match env.as_deref() {
        Some("kvm") => (Accel::Kvm, "LABCTL_ACCEL"),
        Some("tcg") => (Accel::Tcg, "LABCTL_ACCEL"),
        Some("auto") => (Accel::Auto, "LABCTL_ACCEL"),
        Some(other) => {
            tracing::warn!(value = other, "LABCTL_ACCEL must be kvm, tcg or auto; using labs.yaml");
            (requested, "labs.yaml")
        }
        None => (requested, "labs.yaml"),
    };
    match requested {
        Accel::Kvm => AccelChoice {
            accel: "kvm",
            reason: format!("kvm requested in {source}"),
        },
        Accel::Tcg => AccelChoice {
            accel: "tcg",
            reason: format!("tcg requested in {source}"),
        },
        Accel::Auto => detect_kvm(Path::new("/dev/kvm"), Path::new("/sys/module")),
    }
}

fn detect_kvm(dev: &Path, modules: &Path) -> AccelChoice {
    let tcg = |reason: String| AccelChoice { accel: "tcg", reason };
    if !dev.exists() {
        return tcg("no /dev/kvm; using TCG software emulation".into());
    }
    if fs::OpenOptions::new().read(true).write(true).open(dev).is_err() {
        return tcg("/dev/kvm is not accessible; using TCG software emulation".into());
    }
    for module in ["kvm_intel", "kvm_amd"] {
        if modules.join(module).exists() {
            return AccelChoice {
                accel: "kvm",
                reason: format!("/dev/kvm with {module}"),
            };
        }
    }
    let backend = ["kvm_pvm"]
        .iter()
        .find(|m| modules.join(m).exists())
        .map_or("an unknown backend".to_string(), |m| m.to_string());
    tcg(format!(
        "/dev/kvm is backed by {backend}, not kvm_intel/kvm_amd (guests hang there); using TCG. Set accel: kvm to force"
    ))
}

/// Deterministic MACs: locally administered, unique per lab and node.
fn macs(lab: &str, index: usize) -> (String, String) {
    let h = lab.bytes().fold(0u8, |a, b| a.wrapping_mul(31).wrapping_add(b));
    (
        format!("52:54:{h:02x}:00:{:02x}:01", index + 1),
        format!("52:54:{h:02x}:01:{:02x}:02", index + 1),
    )
}

/// Reserves distinct free ports on 127.0.0.1 for nodes without a fixed one.
fn pick_ports(nodes: &[ResolvedNode]) -> Result<Vec<u16>, ProviderError> {
    let mut held = Vec::new();
    let mut ports = Vec::new();
    for node in nodes {
        let listener = match node.ssh_port {
            Some(port) => TcpListener::bind(("127.0.0.1", port)).map_err(|_| ProviderError::PortInUse {
                node: node.name.clone(),
                port,
            })?,
            None => TcpListener::bind("127.0.0.1:0").map_err(|source| ProviderError::Io {
                context: "reserving a port on 127.0.0.1".into(),
                source,
            })?,
        };
        ports.push(listener.local_addr().expect("bound").port());
        held.push(listener);
    }
    Ok(ports)
}

/// The node's identity archive, appended to the shared initramfs: who it
/// is, its keys, and the `preload` files (the agent, its secret and port,
/// so the image's init starts the agent as the node boots).
#[allow(clippy::too_many_arguments)] // each a separate part of the node's identity
fn identity_cpio(
    node: &ResolvedNode,
    all: &[ResolvedNode],
    mgmt_mac: &str,
    data_mac: &str,
    authorized_key: &str,
    host_key: &HostKeyPair,
    preload: &[PreloadFile],
    soft_roce: bool,
) -> std::io::Result<Vec<u8>> {
    let env = format!(
        "LAB_HOSTNAME={}\nLAB_MGMT_MAC={mgmt_mac}\nLAB_DATA_MAC={data_mac}\nLAB_DATA_ADDR={}\nLAB_DATA_PREFIX={}\n",
        node.name, node.data_addr, node.data_prefix
    );
    // Every node resolves every other by name on the data link (libfabric's
    // verbs provider needs the local hostname to resolve).
    let mut hosts = String::from("127.0.0.1 localhost\n");
    for other in all {
        hosts.push_str(&format!("{} {}\n", other.data_addr, other.name));
    }
    // The host key labctl generated: boot.sh creates one only when none is
    // there, so sshd presents exactly the key already pinned in the state.
    let mut files: Vec<(String, u32, Vec<u8>)> = [
        ("etc/lab/node.env", 0o100644, env),
        ("etc/hosts", 0o100644, hosts),
        ("etc/hostname", 0o100644, format!("{}\n", node.name)),
        ("root/.ssh", 0o040700, String::new()),
        (
            "root/.ssh/authorized_keys",
            0o100600,
            format!("{}\n", authorized_key.trim()),
        ),
        (
            "etc/ssh/ssh_host_ed25519_key",
            0o100600,
            format!("{}\n", host_key.private_openssh.trim()),
        ),
        (
            "etc/ssh/ssh_host_ed25519_key.pub",
            0o100644,
            format!("{}\n", host_key.public.trim()),
        ),
    ]
    .into_iter()
    .map(|(name, mode, text)| (name.to_string(), mode, text.into_bytes()))
    .collect();
    if !preload.is_empty() {
        // agent-run reads the port from here (agent-start.sh writes it on
        // nodes that were not given the agent at boot).
        let mut agent_env = format!("AGENT_PORT={AGENT_PORT}\n");
        if soft_roce {
            // An agent sets FI_UNIVERSE_SIZE itself when it starts on a node with
            // a software RoCE device (verbs;ofi_rxm cannot size its CQs for
            // libfabric's default of 256 peers on rxe); one started at boot starts
            // before the rxe link exists, so it is told here. 16: the agent's own
            // value (rdma-agent's SOFT_ROCE_UNIVERSE_SIZE).
            agent_env.push_str("export FI_UNIVERSE_SIZE=16\n");
        }
        files.push(("etc/lab/agent.env".into(), 0o100644, agent_env.into_bytes()));
    }
    for file in preload {
        let path = file.path.trim_start_matches('/');
        // The kernel creates no missing directories: each parent gets an
        // entry first (one that exists keeps its owner, and takes 0755).
        let mut parent = String::new();
        for dir in path
            .split('/')
            .collect::<Vec<_>>()
            .split_last()
            .map_or(&[][..], |(_, d)| d)
        {
            parent = if parent.is_empty() {
                dir.to_string()
            } else {
                format!("{parent}/{dir}")
            };
            if !files.iter().any(|(name, _, _)| *name == parent) {
                files.push((parent.clone(), 0o040755, Vec::new()));
            }
        }
        files.push((path.to_string(), 0o100000 | (file.mode & 0o7777), file.bytes.to_vec()));
    }
    let mut out = Vec::new();
    for (ino, (name, mode, content)) in files.iter().enumerate() {
        let mut w = cpio::newc::Builder::new(name)
            .ino(ino as u32 + 1)
            .mode(*mode)
            .nlink(1)
            .write(&mut out, content.len() as u32);
        w.write_all(content)?;
        w.finish()?;
    }
    cpio::newc::trailer(&mut out)?;
    Ok(out)
}

/// What follows the shared image of `base_len` bytes in a node's initrd:
/// its identity archive, which the kernel reads only at a 4-byte aligned
/// offset (it skips zero padding), so padded first.
fn identity_tail(base_len: u64, identity: &[u8]) -> Vec<u8> {
    let pad = ((4 - base_len % 4) % 4) as usize;
    let mut out = vec![0; pad];
    out.extend_from_slice(identity);
    out
}

/// Writes a node's initrd: a copy of the shared image (made by the kernel,
/// `copy_file_range`, not through this process) and the node's identity.
fn write_initrd(base: &Path, initrd: &Path, identity: &[u8]) -> Result<(), ProviderError> {
    let base_len = fs::copy(base, initrd).map_err(io(format!("copying {} to {}", base.display(), initrd.display())))?;
    // The identity carries the node's host key and the lab's agent secret:
    // readable by the owner only, like the state's own agent.secret.
    fs::set_permissions(initrd, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(io(format!("restricting {}", initrd.display())))?;
    fs::OpenOptions::new()
        .append(true)
        .open(initrd)
        .and_then(|mut file| file.write_all(&identity_tail(base_len, identity)))
        .map_err(io(format!("writing {}", initrd.display())))
}

/// The least memory a node booting an initramfs of `initramfs_bytes` needs:
/// the kernel holds the archive while it unpacks the root filesystem (as
/// large, uncompressed) into RAM, plus room for the kernel and the node's
/// work; in 64 MiB steps. Measured on the 158 MiB image: 512 MiB fails to
/// unpack ("write error"), 640 MiB boots.
fn min_memory_mib(initramfs_bytes: u64) -> u64 {
    let archive_mib = initramfs_bytes.div_ceil(1 << 20);
    (2 * archive_mib + 320).div_ceil(64) * 64
}

/// Refuses nodes too small to boot the image, before any VM starts.
fn check_memory(nodes: &[ResolvedNode], initramfs_bytes: u64) -> Result<(), ProviderError> {
    let need = min_memory_mib(initramfs_bytes);
    let small: Vec<String> = nodes
        .iter()
        .filter(|n| n.memory_mib < need)
        .map(|n| {
            format!(
                "node `{}`: memory {}MiB is too small for a QEMU node: its root filesystem ({} MiB) is unpacked into RAM beside its initramfs\n  fix: give it at least `memory: {need}MiB` in labs.yaml",
                n.name,
                n.memory_mib,
                initramfs_bytes.div_ceil(1 << 20)
            )
        })
        .collect();
    if small.is_empty() {
        Ok(())
    } else {
        Err(ProviderError::Preflight(small.join("\n")))
    }
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ProviderError {
    let context = context.into();
    move |source| ProviderError::Io { context, source }
}

/// What the lab started, from the records in its directory: the supervisor
/// as `up` spawned it (or as it reported itself) and each QEMU it reported.
fn started_processes(dir: &Path) -> (Option<StartedProcess>, Vec<StartedProcess>) {
    let report = fs::read(dir.join(REPORT_FILE))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<SupervisorReport>(&bytes).ok());
    let spawned = fs::read(dir.join(PROCESS_FILE))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<StartedProcess>(&bytes).ok());
    let supervisor = spawned.or(report.as_ref().map(|r| r.supervisor));
    let vms = report.map(|r| r.vms.into_values().collect()).unwrap_or_default();
    (supervisor, vms)
}

#[async_trait]
impl Provider for QemuProvider {
    async fn preflight(&self, _lab: &LabSpec, nodes: &[ResolvedNode]) -> Result<(), ProviderError> {
        if which(QEMU).is_none() {
            return Err(ProviderError::MissingProgram {
                program: QEMU.into(),
                hint: "install it with: apt-get install -y qemu-system-x86".into(),
            });
        }
        pick_ports(nodes).map(|_| ())
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
        let accel = choose_accel(lab.accel);
        reporter.note("lab", &format!("accelerator: {} ({})", accel.accel, accel.reason));
        tracing::info!(accel = accel.accel, reason = %accel.reason, "accelerator chosen");

        let cache = image::cache_root();
        let image = step(reporter, "lab", "image", async {
            image::ensure(&cache, &lab.packages, &|line| {
                reporter.note("lab", &format!("image: {line}"))
            })
            .await
        })
        .await?;

        let qemu = which(QEMU).ok_or_else(|| ProviderError::MissingProgram {
            program: QEMU.into(),
            hint: "install it with: apt-get install -y qemu-system-x86".into(),
        })?;
        let initramfs_bytes = fs::metadata(&image.initramfs)
            .map_err(io(format!("reading {}", image.initramfs.display())))?
            .len();
        check_memory(nodes, initramfs_bytes)?;
        let ports = pick_ports(nodes)?;
        reporter.begin("lab", "node files");
        let files_started = Instant::now();
        let mut plan = VmPlan {
            lab: lab.name.clone(),
            vms: Vec::new(),
        };
        for (node, port) in nodes.iter().zip(&ports) {
            let (mgmt_mac, data_mac) = macs(&lab.name, node.index);
            let node_dir = dir.node_dir(&node.name);
            fs::create_dir_all(&node_dir).map_err(io(format!("creating {}", node_dir.display())))?;
            let initrd = node_dir.join("initrd");
            let host_key = keys.host_key(&node.name)?;
            let identity = identity_cpio(
                node,
                nodes,
                &mgmt_mac,
                &data_mac,
                &keys.authorized_key,
                host_key,
                &keys.preload,
                lab.fabric == lab_model::Fabric::Rxe,
            )
            .map_err(io("writing the node identity archive"))?;
            write_initrd(&image.initramfs, &initrd, &identity)?;
            let console_log = dir.console_log(&node.name);
            let _ = fs::remove_file(&console_log);
            plan.vms.push(VmSpec {
                name: node.name.clone(),
                qemu: qemu.clone(),
                accel: accel.accel.to_string(),
                cpus: node.cpus,
                memory_mib: node.memory_mib,
                kernel: image.kernel.clone(),
                initrd,
                mgmt_mac,
                data_mac,
                ssh_port: *port,
                console_log,
                qemu_log: node_dir.join("qemu.log"),
            });
            state.nodes.push(NodeState {
                name: node.name.clone(),
                ssh_host: "127.0.0.1".into(),
                ssh_port: *port,
                ssh_user: "root".into(),
                ssh_identity: None,
                ssh_jump: None,
                ssh_agent: false,
                data_addr: node.data_addr,
                data_prefix: node.data_prefix,
                data_netdev: None,
                rdma_device: None,
                host_key: Some(host_key.public.trim().to_string()),
                pid: None,
                agent_sha256: None,
                agent_port: AGENT_PORT,
                provisioned: false,
                host: None,
            });
        }
        reporter.end("lab", "node files", files_started.elapsed());
        let plan_path = dir.root().join(PLAN_FILE);
        lab_state::write_atomic(
            &plan_path,
            &serde_json::to_vec_pretty(&plan).expect("plan serialises"),
            0o600,
        )?;
        let _ = fs::remove_file(dir.root().join(REPORT_FILE));

        let report = step(reporter, "lab", "start VMs", start_supervisor(dir)).await?;
        state.provider_state = serde_json::json!({
            "accel": accel.accel,
            "accel_reason": accel.reason,
            "image": image.hash,
            "supervisor_pid": report.supervisor.pid,
            "segment_socket": dir.root().join(&report.segment),
            "vms": report.vms,
        });
        for node in &mut state.nodes {
            node.pid = report.vms.get(&node.name).map(|vm| vm.pid);
        }
        dir.save(state)?;
        Ok(())
    }

    async fn check_alive(&self, dir: &LabDir, state: &LabState, node: &str) -> Result<(), ProviderError> {
        let console = dir.console_log(node);
        let down = |reason: String| ProviderError::NodeDown {
            node: node.to_string(),
            console_tail: file_tail(&console, 20),
            console: console.display().to_string(),
            reason,
        };
        if let Ok(why) = fs::read_to_string(exit_file(dir.root(), node)) {
            let qemu_log = dir.node_dir(node).join("qemu.log");
            let qemu_said = file_tail(&qemu_log, 5);
            return Err(down(if qemu_said.trim().is_empty() {
                why
            } else {
                format!("{why}; QEMU said: {}", qemu_said.trim())
            }));
        }
        let recorded = state
            .provider_state
            .get("vms")
            .and_then(|vms| vms.get(node))
            .and_then(|vm| serde_json::from_value::<StartedProcess>(vm.clone()).ok());
        match recorded {
            Some(vm) if vm.is_running() => Ok(()),
            Some(vm) => Err(down(format!("QEMU process {} is gone", vm.pid))),
            None => Err(down("no VM was started for this node".into())),
        }
    }

    fn console_log(&self, dir: &LabDir, node: &str) -> Option<PathBuf> {
        Some(dir.console_log(node))
    }

    fn packages_in_image(&self) -> bool {
        true
    }

    async fn delete(&self, dir: &LabDir, _state: Option<&LabState>) -> Result<(), ProviderError> {
        // Only what this lab started is signalled, known by pid and start
        // time; any other process, whatever its command line, is left alone.
        let (supervisor, vms) = started_processes(dir.root());
        // The supervisor stops its VMs on SIGTERM.
        if let Some(supervisor) = supervisor {
            if supervisor.signal(Signal::SIGTERM) {
                wait_gone(&[supervisor], Duration::from_secs(4)).await;
            }
        }
        // A supervisor that did not stop, or QEMUs it left behind (it was
        // killed itself), are killed outright.
        let left: Vec<StartedProcess> = supervisor.into_iter().chain(vms).filter(|p| p.is_running()).collect();
        for process in &left {
            process.signal(Signal::SIGKILL);
        }
        if !wait_gone(&left, Duration::from_secs(3)).await {
            let pids: Vec<u32> = left.iter().map(|p| p.pid).collect();
            return Err(ProviderError::Io {
                context: format!("stopping lab processes {pids:?}"),
                source: std::io::Error::other("still running after SIGKILL"),
            });
        }
        Ok(())
    }
}

/// Starts `labctl __supervise DIR` detached and waits for its report.
async fn start_supervisor(dir: &LabDir) -> Result<SupervisorReport, ProviderError> {
    let exe = std::env::current_exe().map_err(io("finding the labctl executable"))?;
    let log_path = dir.root().join(supervisor::LOG_FILE);
    let log = fs::File::create(&log_path).map_err(io(format!("creating {}", log_path.display())))?;
    let mut command = std::process::Command::new(exe);
    command
        .arg("__supervise")
        .arg(dir.root())
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(io("log"))?)
        .stderr(log);
    // Its own process group: a Ctrl-C aimed at `labctl up` must not kill the lab.
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut child = command.spawn().map_err(io("starting the lab supervisor"))?;
    // Recorded before anything else, so `down` can stop it even if it
    // never reports.
    if let Some(started) = StartedProcess::of(child.id()) {
        lab_state::write_atomic(
            &dir.root().join(PROCESS_FILE),
            &serde_json::to_vec(&started).expect("process record serialises"),
            0o600,
        )?;
    }
    let report_path = dir.root().join(REPORT_FILE);
    let limit = Duration::from_secs(20);
    let started = Instant::now();
    let poll = || {
        let outcome = match fs::read(&report_path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<SupervisorReport>(&bytes).ok())
            .filter(|r| r.complete)
        {
            Some(report) => Ok(report),
            None => match child.try_wait() {
                Ok(Some(status)) => Err(Some(ProviderError::Io {
                    context: "the lab supervisor".into(),
                    source: std::io::Error::other(format!("exited early ({status}): {}", file_tail(&log_path, 10))),
                })),
                // Not yet.
                _ => Err(None),
            },
        };
        std::future::ready(outcome)
    };
    let outcome = poll
        .retry(
            ConstantBuilder::new()
                .with_delay(Duration::from_millis(50))
                .without_max_times(),
        )
        .when(|e| e.is_none() && started.elapsed() <= limit)
        .await;
    match outcome {
        // Reaped by init once labctl exits; never waited on here.
        Ok(report) => Ok(report),
        Err(Some(e)) => Err(e),
        Err(None) => {
            let _ = child.kill();
            Err(ProviderError::Io {
                context: "the lab supervisor".into(),
                source: std::io::Error::other(format!("did not report within 20 s: {}", file_tail(&log_path, 10))),
            })
        }
    }
}

/// Waits until none of `processes` runs; false on timeout.
async fn wait_gone(processes: &[StartedProcess], timeout: Duration) -> bool {
    let started = Instant::now();
    let gone = || {
        std::future::ready(if processes.iter().any(|p| p.is_running()) {
            Err(())
        } else {
            Ok(())
        })
    };
    gone.retry(
        ConstantBuilder::new()
            .with_delay(Duration::from_millis(50))
            .without_max_times(),
    )
    .when(|_| started.elapsed() <= timeout)
    .await
    .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn node(index: usize, name: &str) -> ResolvedNode {
        ResolvedNode {
            index,
            name: name.into(),
            cpus: 1,
            memory_mib: 1024,
            data_addr: std::net::Ipv4Addr::new(10, 77, 0, index as u8 + 1),
            data_prefix: 24,
            ssh_port: None,
            ssh: None,
            rdma_device: None,
        }
    }

    #[test]
    fn test_kvm_needs_a_real_backend() {
        let tmp = std::env::temp_dir().join(format!("labctl-kvm-test-{}", std::process::id()));
        let modules = tmp.join("module");
        fs::create_dir_all(&modules).unwrap();
        let dev = tmp.join("kvm");
        assert_eq!(detect_kvm(&dev, &modules).accel, "tcg");
        fs::write(&dev, b"").unwrap();
        fs::create_dir_all(modules.join("kvm_pvm")).unwrap();
        let choice = detect_kvm(&dev, &modules);
        assert_eq!(choice.accel, "tcg");
        assert!(choice.reason.contains("kvm_pvm"), "{}", choice.reason);
        fs::create_dir_all(modules.join("kvm_intel")).unwrap();
        assert_eq!(detect_kvm(&dev, &modules).accel, "kvm");
        fs::remove_dir_all(tmp).unwrap();
    }

    /// Issue 15 item 4: `down` stops what `up` started (recorded by pid and
    /// start time) and nothing else, even a process whose command line names
    /// the lab's directory.
    #[tokio::test]
    async fn test_delete_stops_only_the_recorded_processes() {
        use std::os::unix::process::CommandExt;
        let base = std::env::temp_dir().join(format!("labctl-qemu-delete-{}", std::process::id()));
        let dir = LabDir::for_lab(&base.join("labs.yaml"), "pair");
        dir.create().unwrap();
        let sleeper = |argv0: &Path| {
            std::process::Command::new("sleep")
                .arg0(argv0)
                .arg("60")
                .spawn()
                .unwrap()
        };
        let mut unrelated = sleeper(&dir.root().join("nodes/server/initrd"));
        let mut supervisor = sleeper(Path::new("labctl-supervisor-stand-in"));
        let mut vm = sleeper(Path::new("qemu-stand-in"));
        let record = |child: &std::process::Child| StartedProcess::of(child.id()).unwrap();
        fs::write(
            dir.root().join(PROCESS_FILE),
            serde_json::to_vec(&record(&supervisor)).unwrap(),
        )
        .unwrap();
        let report = SupervisorReport {
            supervisor: record(&supervisor),
            segment: supervisor::SEGMENT_SOCKET.into(),
            vms: [("server".to_string(), record(&vm))].into(),
            complete: true,
        };
        fs::write(dir.root().join(REPORT_FILE), serde_json::to_vec(&report).unwrap()).unwrap();

        QemuProvider::new().delete(&dir, None).await.unwrap();

        // A sleep ends on SIGTERM (the supervisor) or SIGKILL (the orphaned VM).
        assert!(supervisor.wait().unwrap().signal().is_some());
        assert!(vm.wait().unwrap().signal().is_some());
        assert!(
            unrelated.try_wait().unwrap().is_none(),
            "down killed a process it did not start"
        );
        unrelated.kill().unwrap();
        unrelated.wait().unwrap();
        fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn test_macs_are_unique_and_locally_administered() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..16 {
            let (m, d) = macs("local", i);
            assert!(m.starts_with("52:54:") && d.starts_with("52:54:"));
            assert!(seen.insert(m) && seen.insert(d));
        }
    }

    #[test]
    fn test_identity_archive_carries_name_address_login_key_and_host_key() {
        let nodes = vec![node(0, "server"), node(1, "client")];
        let archive = identity_cpio(
            &nodes[1],
            &nodes,
            "52:54:00:00:02:01",
            "52:54:00:01:02:02",
            "ssh-ed25519 AAAA test",
            &HostKeyPair {
                private_openssh: "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbg==\n-----END OPENSSH PRIVATE KEY-----"
                    .into(),
                public: "ssh-ed25519 AAAAhost".into(),
            },
            &[PreloadFile {
                path: "/etc/labctl/agent.secret".into(),
                mode: 0o600,
                bytes: std::sync::Arc::new(b"00ff\n".to_vec()),
            }],
            true,
        )
        .unwrap();
        let mut reader = std::io::Cursor::new(archive);
        let mut files = std::collections::HashMap::new();
        loop {
            let mut entry = cpio::newc::Reader::new(&mut reader).unwrap();
            if entry.entry().is_trailer() {
                break;
            }
            let name = entry.entry().name().to_string();
            let mode = entry.entry().mode();
            let mut text = String::new();
            std::io::Read::read_to_string(&mut entry, &mut text).unwrap();
            files.insert(name, (mode, text));
            entry.finish().unwrap();
        }
        assert!(files["etc/lab/node.env"].1.contains("LAB_HOSTNAME=client"));
        assert!(files["etc/lab/node.env"].1.contains("LAB_DATA_ADDR=10.77.0.2"));
        assert!(files["etc/hosts"].1.contains("10.77.0.1 server"));
        assert_eq!(files["root/.ssh/authorized_keys"].0 & 0o777, 0o600);
        assert_eq!(files["root/.ssh/authorized_keys"].1, "ssh-ed25519 AAAA test\n");
        // The host key labctl generated, private half readable by root only.
        assert_eq!(files["etc/ssh/ssh_host_ed25519_key"].0 & 0o777, 0o600);
        assert!(files["etc/ssh/ssh_host_ed25519_key"]
            .1
            .starts_with("-----BEGIN OPENSSH PRIVATE KEY-----\n"));
        assert_eq!(files["etc/ssh/ssh_host_ed25519_key.pub"].1, "ssh-ed25519 AAAAhost\n");
        // A preloaded file, after an entry for its directory, and the
        // agent's port beside it.
        assert_eq!(files["etc/labctl"].0, 0o040755);
        assert_eq!(files["etc/labctl/agent.secret"], (0o100600, "00ff\n".to_string()));
        assert_eq!(
            files["etc/lab/agent.env"].1,
            "AGENT_PORT=7470\nexport FI_UNIVERSE_SIZE=16\n"
        );
    }

    #[test]
    fn test_small_nodes_are_refused_before_any_vm_starts() {
        // The 158 MiB image: 512 MiB failed to unpack it, 640 MiB booted.
        let image = 165_085_184;
        assert_eq!(min_memory_mib(image), 640);
        let mut nodes = vec![node(0, "a"), node(1, "b")];
        nodes[0].memory_mib = 640;
        nodes[1].memory_mib = 512;
        let e = check_memory(&nodes, image).unwrap_err().to_string();
        assert!(
            e.contains("node `b`: memory 512MiB is too small") && e.contains("at least `memory: 640MiB`"),
            "{e}"
        );
        assert!(!e.contains("node `a`"), "{e}");
        nodes[1].memory_mib = 1024;
        assert!(check_memory(&nodes, image).is_ok());
    }

    #[test]
    fn test_identity_starts_4_byte_aligned_after_the_base() {
        let dir = std::env::temp_dir().join(format!("labctl-initrd-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        for base_len in 0..8 {
            let base = dir.join("base");
            fs::write(&base, vec![0x1f; base_len]).unwrap();
            let initrd = dir.join("initrd");
            write_initrd(&base, &initrd, b"070701").unwrap();
            let out = fs::read(&initrd).unwrap();
            let at = out.len() - 6;
            assert_eq!(at % 4, 0, "base of {base_len} bytes");
            assert!(out[..base_len].iter().all(|b| *b == 0x1f));
            assert!(out[base_len..at].iter().all(|b| *b == 0));
            assert_eq!(&out[at..], b"070701");
            let mode = std::os::unix::fs::PermissionsExt::mode(&fs::metadata(&initrd).unwrap().permissions());
            assert_eq!(mode & 0o777, 0o600, "the initrd holds secrets");
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn test_fixed_port_in_use_is_named() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut n = node(0, "server");
        n.ssh_port = Some(taken.local_addr().unwrap().port());
        match pick_ports(&[n]) {
            Err(ProviderError::PortInUse { node, .. }) => assert_eq!(node, "server"),
            other => panic!("expected PortInUse, got {other:?}"),
        }
    }

    #[test]
    fn test_qemu_args_wire_console_ssh_and_segment() {
        let vm = VmSpec {
            name: "server".into(),
            qemu: QEMU.into(),
            accel: "tcg".into(),
            cpus: 1,
            memory_mib: 1024,
            kernel: "/k".into(),
            initrd: "/i".into(),
            mgmt_mac: "52:54:00:00:01:01".into(),
            data_mac: "52:54:00:01:01:02".into(),
            ssh_port: 2201,
            console_log: "/lab/server.console.log".into(),
            qemu_log: "/lab/q.log".into(),
        };
        let args = qemu_args_joined(&vm);
        assert!(args.contains("-accel tcg,thread=multi -cpu max"), "{args}");
        assert!(args.contains("hostfwd=tcp:127.0.0.1:2201-:22"), "{args}");
        assert!(
            args.contains("stream,id=data,server=off,addr.type=unix,addr.path=segment.sock"),
            "{args}"
        );
        assert!(args.contains("path=/lab/server.console.log"), "{args}");
    }

    fn qemu_args_joined(vm: &VmSpec) -> String {
        supervisor::qemu_args(vm, Path::new(supervisor::SEGMENT_SOCKET)).join(" ")
    }
}
