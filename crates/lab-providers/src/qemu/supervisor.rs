//! The per-lab supervisor: a detached `labctl __supervise DIR` process that
//! owns the lab's QEMU processes and its data segment.
//!
//! `up` writes the VM plan (`qemu-plan.json`) and starts the supervisor, which
//! binds the switch on a unix socket inside the lab's 0700 directory (so only
//! the lab's owner can attach to the segment), starts one QEMU per node, and
//! reports each QEMU's pid and start time in `supervisor.json` as it starts
//! it. When a VM exits, the supervisor records why in `<node>.exit` and keeps
//! the console log. On SIGTERM (from `down`) it kills every VM and exits. One
//! process per lab means `down` has one thing to stop.

use std::collections::HashMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde::{Deserialize, Serialize};
use tokio::net::UnixListener;
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};

use super::process::StartedProcess;
use lab_state::{set_mode, write_atomic};

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

/// What the supervisor reports: rewritten after each VM it starts, so `down`
/// knows every QEMU even when the supervisor dies halfway.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SupervisorReport {
    /// The supervisor itself.
    pub supervisor: StartedProcess,
    /// The data segment's unix socket, relative to the lab directory.
    pub segment: PathBuf,
    /// Node name → its QEMU.
    pub vms: HashMap<String, StartedProcess>,
    /// Every VM of the plan has been started (or failed to start).
    pub complete: bool,
}

/// File names inside the lab directory.
pub const PLAN_FILE: &str = "qemu-plan.json";
/// See [`SupervisorReport`].
pub const REPORT_FILE: &str = "supervisor.json";
/// The supervisor's own log.
pub const LOG_FILE: &str = "supervisor.log";
/// The supervisor process as `up` started it, written before it reports.
pub const PROCESS_FILE: &str = "supervisor.process.json";
/// The data segment's unix socket inside the lab directory.
pub const SEGMENT_SOCKET: &str = "segment.sock";

/// Binds the data segment at `dir/segment.sock`, readable and writable by the
/// owner only. The directory is 0700 too, so another local user can neither
/// reach the socket nor replace it.
pub fn bind_segment(dir: &Path) -> std::io::Result<UnixListener> {
    let path = dir.join(SEGMENT_SOCKET);
    match fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(&path)?;
    set_mode(&path, 0o600).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(listener)
}

/// Why node `name` stopped, if it did: the path of its exit record.
pub fn exit_file(dir: &Path, node: &str) -> PathBuf {
    dir.join(format!("{node}.exit"))
}

/// The QEMU command line for one VM on the segment at unix socket `segment`
/// (a path relative to QEMU's working directory, the lab directory, so the
/// 108-byte limit of socket paths never depends on where the lab lives).
pub fn qemu_args(vm: &VmSpec, segment: &Path) -> Vec<String> {
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
        // QEMU's `stream` netdev frames like `socket` (a 4-byte big-endian
        // length per frame) and connects to a unix socket.
        format!(
            "stream,id=data,server=off,addr.type=unix,addr.path={}",
            segment.display()
        ),
        "-device".into(),
        format!(
            "virtio-net-pci,netdev=data,mac={},id={}",
            vm.data_mac,
            super::tx_watch::DATA_NIC_ID
        ),
        // The supervisor watches the data NIC through it (see tx_watch).
        "-qmp".into(),
        format!(
            "unix:{},server=on,wait=off",
            super::tx_watch::qmp_socket(&vm.name).display()
        ),
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
    // QEMU runs in the lab directory and names the segment relative to it.
    // The supervisor works in the lab directory too, so the socket path it
    // binds is as short as QEMU's.
    std::env::set_current_dir(dir)?;
    let segment = Path::new(SEGMENT_SOCKET);
    let listener = bind_segment(Path::new("."))?;
    tokio::spawn(async move {
        if let Err(e) = super::switch::run(listener).await {
            tracing::error!("data segment stopped: {e}");
        }
    });

    let mut children: Vec<(String, Child)> = Vec::new();
    let myself = StartedProcess::of(std::process::id()).ok_or_else(|| std::io::Error::other("no /proc/self/stat"))?;
    let mut report = SupervisorReport {
        supervisor: myself,
        segment: segment.to_path_buf(),
        vms: HashMap::new(),
        complete: false,
    };
    let write_report = |report: &SupervisorReport| {
        write_atomic(
            &dir.join(REPORT_FILE),
            &serde_json::to_vec_pretty(report).expect("report serialises"),
            0o600,
        )
        .map_err(|e| std::io::Error::other(e.to_string()))
    };
    for vm in &plan.vms {
        let _ = fs::remove_file(exit_file(dir, &vm.name));
        let log = File::create(&vm.qemu_log)?;
        let child = Command::new(&vm.qemu)
            .args(qemu_args(vm, segment))
            .current_dir(dir)
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
        if let Some(started) = child.id().and_then(StartedProcess::of) {
            report.vms.insert(vm.name.clone(), started);
            write_report(&report)?;
        }
        // Only a child already reaped has no pid; its exit is logged below.
        let pid = child.id().map(|pid| format!(" (pid {pid})")).unwrap_or_default();
        super::supervisor_log::line(format_args!("node {} {}{pid}", vm.name, super::supervisor_log::STARTED));
        tokio::spawn(super::tx_watch::watch(
            vm.name.clone(),
            super::tx_watch::qmp_socket(&vm.name),
        ));
        children.push((vm.name.clone(), child));
    }
    report.complete = true;
    write_report(&report)?;

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
                super::supervisor_log::line(format_args!("node {name}: {why}"));
                let _ = fs::write(exit_file(dir, &name), &why);
            }
        }
    }
    super::supervisor_log::line(format_args!("all VMs stopped; exiting"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;

    /// Tries to attach to the segment at `path` as uid/gid 65534 (`nobody`);
    /// returns what Python reports.
    fn attach_as_nobody(path: &Path) -> String {
        let out = std::process::Command::new("/usr/bin/python3")
            .args([
                "-c",
                "import socket, sys\n\
                 s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n\
                 try:\n    s.connect(sys.argv[1]); print('attached')\n\
                 except OSError as e:\n    print(type(e).__name__, e.errno)",
            ])
            .arg(path)
            .uid(65534)
            .gid(65534)
            .output()
            .expect("python3 runs as nobody");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Issue 15 item 11: the data segment carries every RoCE frame of the
    /// lab; only the lab's owner can attach to it.
    #[tokio::test]
    async fn test_another_local_user_cannot_attach_to_the_segment() {
        let base = std::env::temp_dir().join(format!("labctl-segment-test-{}", std::process::id()));
        let dir = lab_state::LabDir::for_lab(&base.join("labs.yaml"), "pair");
        dir.create().unwrap();
        let listener = bind_segment(dir.root()).unwrap();
        tokio::spawn(super::super::switch::run(listener));
        let socket = dir.root().join(SEGMENT_SOCKET);

        // The owner attaches (as QEMU does).
        tokio::net::UnixStream::connect(&socket).await.unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(dir.root()), 0o700);
        assert_eq!(mode(&socket), 0o600);

        let root = std::os::unix::fs::MetadataExt::uid(&fs::metadata("/proc/self").unwrap()) == 0;
        if root {
            // Refused at the directory (EACCES = 13) ...
            assert_eq!(attach_as_nobody(&socket), "PermissionError 13");
            // ... and at the socket itself were the directory opened up.
            fs::set_permissions(dir.root(), fs::Permissions::from_mode(0o755)).unwrap();
            assert_eq!(attach_as_nobody(&socket), "PermissionError 13");
            // The check itself can attach when nothing forbids it.
            fs::set_permissions(&socket, fs::Permissions::from_mode(0o777)).unwrap();
            assert_eq!(attach_as_nobody(&socket), "attached");
        } else {
            eprintln!("not root: attaching as another user is not tried; modes checked above");
        }
        fs::remove_dir_all(base).unwrap();
    }
}
