//! The local provider: one QEMU VM per node, booted straight from the cached
//! Debian image (kernel + initramfs, the whole node lives in RAM).
//!
//! Each VM has a management NIC (QEMU user networking; SSH forwarded to
//! 127.0.0.1) and a data NIC on the lab's segment, a switch run by the lab's
//! supervisor (see [`supervisor`]). Per-node identity (hostname, data address,
//! the lab's SSH key) rides on a small cpio archive appended to the shared
//! initramfs. KVM is used where it works, TCG otherwise.

mod accel;
mod identity;
pub mod process;
pub mod supervisor;
mod supervisor_log;
pub mod switch;
mod tx_watch;

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use backon::{ConstantBuilder, Retryable};
use nix::sys::signal::Signal;

pub use self::accel::{choose_accel, AccelChoice};
use self::identity::{check_memory, identity_cpio, write_initrd};
use self::process::StartedProcess;
use self::supervisor::{exit_file, SupervisorReport, VmPlan, VmSpec, PLAN_FILE, PROCESS_FILE, REPORT_FILE};
use crate::image::{self, which};
use crate::node_agent::AGENT_PORT;
use crate::provider::{Provider, ProviderError};
use crate::NodeKeys;
use lab_model::{LabSpec, ResolvedNode};
use lab_state::progress::{step, Reporter};
use lab_state::text::file_tail;
use lab_state::{LabDir, LabState, NodeState};

/// The QEMU binary labctl runs.
pub const QEMU: &str = "qemu-system-x86_64";

/// The local QEMU provider.
#[derive(Debug, Default)]
pub struct QemuProvider;

impl QemuProvider {
    /// A provider using `qemu-system-x86_64` from PATH.
    pub fn new() -> QemuProvider {
        QemuProvider
    }
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

    /// The supervisor's data NIC watch ([`tx_watch`]), read back from its log.
    fn data_nic_restarts(&self, dir: &LabDir, node: &str) -> Option<Result<Vec<crate::NicRestart>, String>> {
        let path = dir.root().join(supervisor::LOG_FILE);
        Some(
            std::fs::read_to_string(&path)
                .map(|log| supervisor_log::data_nic_restarts(&log, node))
                .map_err(|e| format!("{}: {e}", path.display())),
        )
    }

    fn packages_in_image(&self) -> bool {
        true
    }

    /// Each node's identity archive carries `keys.preload`.
    fn boots_with_preload(&self) -> bool {
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

/// The node image (its cache key) a QEMU lab's state records, as `create`
/// wrote it; None for another provider's lab.
pub fn image_of(state: &LabState) -> Option<&str> {
    state.provider_state.get("image")?.as_str()
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
        // The data NIC has the id the transmit watch's QOM path names, and
        // each VM its QMP socket in the lab directory.
        assert!(args.contains("netdev=data,mac=52:54:00:01:01:02,id=datanic"), "{args}");
        assert!(args.contains("-qmp unix:server.qmp,server=on,wait=off"), "{args}");
    }

    fn qemu_args_joined(vm: &VmSpec) -> String {
        supervisor::qemu_args(vm, Path::new(supervisor::SEGMENT_SOCKET)).join(" ")
    }
}
