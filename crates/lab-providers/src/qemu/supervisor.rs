//! The per-lab supervisor: a detached `labctl __supervise DIR` process that
//! owns the lab's QEMU processes and its data segment.
//!
//! `up` writes the VM plan (`qemu-plan.json`) and starts the supervisor, which
//! binds the switch, starts one QEMU per node, and reports pids in
//! `supervisor.json`. When a VM exits, the supervisor records why in
//! `<node>.exit` and keeps the console log. On SIGTERM (from `down`) it kills
//! every VM and exits. One process per lab means `down` has one thing to stop.

use std::collections::HashMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};

use lab_state::write_atomic;

/// One VM as the supervisor starts it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VmSpec {
    /// Node name.
    pub name: String,
    /// The QEMU binary.
    pub qemu: PathBuf,
    /// `kvm` or `tcg`.
    pub accel: String,
    /// vCPUs.
    pub cpus: u32,
    /// Memory, MiB.
    pub memory_mib: u64,
    /// Kernel image.
    pub kernel: PathBuf,
    /// The node's initramfs (base image + identity).
    pub initrd: PathBuf,
    /// MAC of the management NIC.
    pub mgmt_mac: String,
    /// MAC of the data NIC.
    pub data_mac: String,
    /// Host port forwarded to the node's SSH.
    pub ssh_port: u16,
    /// Serial console log.
    pub console_log: PathBuf,
    /// QEMU's own stdout/stderr.
    pub qemu_log: PathBuf,
}

/// What `up` hands the supervisor.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VmPlan {
    /// The lab.
    pub lab: String,
    /// One entry per node.
    pub vms: Vec<VmSpec>,
}

/// What the supervisor reports once every VM is started.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SupervisorReport {
    /// The supervisor's pid.
    pub pid: u32,
    /// The data segment's port on 127.0.0.1.
    pub segment_port: u16,
    /// Node name → QEMU pid.
    pub vms: HashMap<String, u32>,
}

/// File names inside the lab directory.
pub const PLAN_FILE: &str = "qemu-plan.json";
/// See [`SupervisorReport`].
pub const REPORT_FILE: &str = "supervisor.json";
/// The supervisor's own log.
pub const LOG_FILE: &str = "supervisor.log";

/// Why node `name` stopped, if it did: the path of its exit record.
pub fn exit_file(dir: &Path, node: &str) -> PathBuf {
    dir.join(format!("{node}.exit"))
}

/// The QEMU command line for one VM on a segment at `segment_port`.
pub fn qemu_args(vm: &VmSpec, segment_port: u16) -> Vec<String> {
    let (accel, cpu) = if vm.accel == "kvm" {
        ("kvm", "host")
    } else {
        ("tcg,thread=multi", "max")
    };
    let mut args: Vec<String> = vec![
        "-name".into(),
        format!("{},process=labctl-{}", vm.name, vm.name),
        "-accel".into(),
        accel.into(),
        "-cpu".into(),
        cpu.into(),
        "-smp".into(),
        vm.cpus.to_string(),
        "-m".into(),
        vm.memory_mib.to_string(),
        "-nodefaults".into(),
        "-no-user-config".into(),
        "-display".into(),
        "none".into(),
        // A panicking guest exits instead of rebooting, so the failure shows.
        "-no-reboot".into(),
        "-kernel".into(),
        vm.kernel.display().to_string(),
        "-initrd".into(),
        vm.initrd.display().to_string(),
        "-append".into(),
        "console=ttyS0 panic=-1 quiet".into(),
        "-chardev".into(),
        format!("file,id=console,path={}", vm.console_log.display()),
        "-serial".into(),
        "chardev:console".into(),
        "-netdev".into(),
        format!("user,id=mgmt,hostfwd=tcp:127.0.0.1:{}-:22", vm.ssh_port),
        "-device".into(),
        format!("virtio-net-pci,netdev=mgmt,mac={}", vm.mgmt_mac),
        "-netdev".into(),
        format!("socket,id=data,connect=127.0.0.1:{segment_port}"),
        "-device".into(),
        format!("virtio-net-pci,netdev=data,mac={}", vm.data_mac),
    ];
    args.shrink_to_fit();
    args
}

/// Entry point of `labctl __supervise DIR`. Runs until every VM has exited or
/// SIGTERM/SIGINT arrives.
pub fn main(dir: &Path) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(supervise(dir))
}

async fn supervise(dir: &Path) -> std::io::Result<()> {
    let plan: VmPlan = serde_json::from_slice(&fs::read(dir.join(PLAN_FILE))?).map_err(std::io::Error::other)?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let segment_port = listener.local_addr()?.port();
    tokio::spawn(async move {
        if let Err(e) = super::switch::run(listener).await {
            tracing::error!("data segment stopped: {e}");
        }
    });

    let mut children: Vec<(String, Child)> = Vec::new();
    let mut report = SupervisorReport {
        pid: std::process::id(),
        segment_port,
        vms: HashMap::new(),
    };
    for vm in &plan.vms {
        let _ = fs::remove_file(exit_file(dir, &vm.name));
        let log = File::create(&vm.qemu_log)?;
        let child = Command::new(&vm.qemu)
            .args(qemu_args(vm, segment_port))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(e) => {
                let _ = fs::write(
                    exit_file(dir, &vm.name),
                    format!("could not start {}: {e}", vm.qemu.display()),
                );
                continue;
            }
        };
        report.vms.insert(vm.name.clone(), child.id().unwrap_or(0));
        eprintln!("supervisor: node {} started (pid {:?})", vm.name, child.id());
        children.push((vm.name.clone(), child));
    }
    write_atomic(
        &dir.join(REPORT_FILE),
        &serde_json::to_vec_pretty(&report).expect("report serialises"),
        0o600,
    )
    .map_err(|e| std::io::Error::other(e.to_string()))?;

    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let (exit_tx, mut exit_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut killers = Vec::new();
    for (name, mut child) in children {
        let tx = exit_tx.clone();
        let (kill_tx, kill_rx) = tokio::sync::oneshot::channel::<()>();
        killers.push(kill_tx);
        tokio::spawn(async move {
            let status = tokio::select! {
                status = child.wait() => status,
                _ = kill_rx => {
                    let _ = child.start_kill();
                    child.wait().await
                }
            };
            let _ = tx.send((name, status));
        });
    }
    drop(exit_tx);
    let mut running = plan.vms.len();
    let mut stopping = false;
    while running > 0 {
        tokio::select! {
            _ = term.recv(), if !stopping => { stopping = true; killers.drain(..).for_each(|k| { let _ = k.send(()); }); }
            _ = int.recv(), if !stopping => { stopping = true; killers.drain(..).for_each(|k| { let _ = k.send(()); }); }
            exited = exit_rx.recv() => {
                let Some((name, status)) = exited else { break };
                running -= 1;
                let why = match status {
                    Ok(s) if stopping => format!("stopped by labctl down ({s})"),
                    Ok(s) => format!("QEMU exited unexpectedly ({s})"),
                    Err(e) => format!("waiting for QEMU failed: {e}"),
                };
                eprintln!("supervisor: node {name}: {why}");
                let _ = fs::write(exit_file(dir, &name), &why);
            }
        }
    }
    eprintln!("supervisor: all VMs stopped; exiting");
    Ok(())
}
