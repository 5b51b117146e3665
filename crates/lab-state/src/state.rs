//! A lab's state directory: what `up` created, so `status`, `exec`, `run` and
//! `down` can find it again.
//!
//! The directory holds `state.json` (written atomically: temp file, fsync,
//! rename), a lock file that serialises `labctl` processes on one lab, the
//! lab's SSH key, each node's console and QEMU logs, and saved results.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use backon::{BlockingRetryable, ConstantBuilder};
use serde::{Deserialize, Serialize};

/// Version of the `state.json` layout.
pub const STATE_SCHEMA: u32 = 1;

/// Errors reading, writing or locking a lab's state.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// An I/O error on a state file.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// `state.json` exists but cannot be parsed.
    #[error("{path}: corrupt lab state ({source}); `labctl down` still removes the lab")]
    Corrupt {
        /// The state file.
        path: PathBuf,
        /// The parse error.
        source: serde_json::Error,
    },
    /// Another labctl process holds the lab's lock.
    #[error("lab `{lab}` is busy: another labctl (pid {holder}) is working on it; waited {waited_s} s")]
    Busy {
        /// The lab name.
        lab: String,
        /// The pid written by the holder, or "unknown".
        holder: String,
        /// How long this process waited.
        waited_s: u64,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Where a lab keeps its files: `<labs.yaml dir>/.labctl/<lab>/` unless
/// `LABCTL_STATE_DIR` names another base directory.
#[derive(Debug, Clone)]
pub struct LabDir {
    root: PathBuf,
    lab: String,
}

impl LabDir {
    /// The state directory of `lab`, for a labs file at `labs_file`.
    pub fn for_lab(labs_file: &Path, lab: &str) -> LabDir {
        let base = match std::env::var_os("LABCTL_STATE_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => labs_file
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .join(".labctl"),
        };
        LabDir {
            root: absolute(&base.join(lab)),
            lab: lab.to_string(),
        }
    }

    /// The state directory `root` of `lab`, as recorded elsewhere (the
    /// registry of live labs).
    pub fn at(root: &Path, lab: &str) -> LabDir {
        LabDir {
            root: absolute(root),
            lab: lab.to_string(),
        }
    }

    /// The state directory of `lab` of the built-in labs (no labs.yaml):
    /// `$LABCTL_STATE_DIR/<lab>` when set, else the user's state directory,
    /// `$XDG_STATE_HOME/labctl/<lab>` (`~/.local/state/labctl/<lab>`), so a
    /// lab brought up from anywhere is found from anywhere.
    pub fn for_builtin_lab(lab: &str) -> LabDir {
        let base = match std::env::var_os("LABCTL_STATE_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => dirs::state_dir()
                .or_else(|| dirs::home_dir().map(|h| h.join(".local/state")))
                .unwrap_or_else(|| PathBuf::from(".labctl"))
                .join("labctl"),
        };
        LabDir {
            root: absolute(&base.join(lab)),
            lab: lab.to_string(),
        }
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Creates the directory (mode 0700: it holds the lab's private key).
    pub fn create(&self) -> Result<(), StateError> {
        fs::create_dir_all(&self.root).map_err(io_err(&self.root))?;
        set_mode(&self.root, 0o700)
    }

    /// Whether anything of this lab is on disk.
    pub fn exists(&self) -> bool {
        self.root.exists()
    }

    /// `state.json`.
    pub fn state_file(&self) -> PathBuf {
        self.root.join("state.json")
    }

    /// The lab's SSH private key (OpenSSH format, mode 0600).
    pub fn ssh_key(&self) -> PathBuf {
        self.root.join("id_ed25519")
    }

    /// The key pair the nodes use to `ssh` each other (`node_ssh:`), kept
    /// apart from [`ssh_key`](Self::ssh_key): a node holds this one, never
    /// the controller's.
    pub fn node_ssh_key(&self) -> PathBuf {
        self.root.join("node_ed25519")
    }

    /// The SSH host key pair labctl generated for `node` before it booted
    /// (private half; the public one beside it with `.pub`). Kept for the
    /// lab's life so a re-`create` that reuses a machine expects its key.
    pub fn host_key(&self, node: &str) -> PathBuf {
        self.root.join("host_keys").join(format!("{node}_ed25519"))
    }

    /// The lab's agent secret (mode 0600), which every agent call carries;
    /// kept out of `state.json` so state can be shown and shared.
    pub fn agent_secret(&self) -> PathBuf {
        self.root.join("agent.secret")
    }

    /// Pinned host keys in OpenSSH `known_hosts` form, for `labctl ssh`.
    pub fn known_hosts(&self) -> PathBuf {
        self.root.join("known_hosts")
    }

    /// The ssh config `labctl ssh` passes with `-F` (it carries the
    /// known_hosts file and jump host's key to the jump hop).
    pub fn ssh_config(&self) -> PathBuf {
        self.root.join("ssh_config")
    }

    /// The phases of the `up` that created the lab (`up`'s timeline, a
    /// JSON list of [`StepTime`](crate::progress::StepTime)), which
    /// `bench --orchestration` reads.
    pub fn up_timings(&self) -> PathBuf {
        self.root.join("up-timings.json")
    }

    /// A node's serial console log.
    pub fn console_log(&self, node: &str) -> PathBuf {
        self.root.join(format!("{node}.console.log"))
    }

    /// A node's private files (initramfs, QEMU output).
    pub fn node_dir(&self, node: &str) -> PathBuf {
        self.root.join("nodes").join(node)
    }

    /// Saved runs and benches: `<state base>/.results/<lab>/`, beside the
    /// lab's directory rather than in it, so `down` keeps a lab's history.
    /// (Lab names start with a letter or digit, so `.results` is never a lab.)
    pub fn results_dir(&self) -> PathBuf {
        self.root
            .parent()
            .unwrap_or(Path::new("."))
            .join(".results")
            .join(&self.lab)
    }

    /// Writes a run's or bench's JSON record as
    /// `<results dir>/<started_at, digits only>-<name>.json`; returns its path.
    pub fn save_result(&self, started_at: &str, name: &str, json: &[u8]) -> Result<PathBuf, StateError> {
        let dir = self.results_dir();
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let stamp: String = started_at.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
        let path = dir.join(format!("{stamp}-{name}.json"));
        write_atomic(&path, json, 0o644)?;
        Ok(path)
    }

    /// Loads `state.json`, or `None` when the lab has no state.
    pub fn load(&self) -> Result<Option<LabState>, StateError> {
        let path = self.state_file();
        let mut text = String::new();
        match File::open(&path) {
            Ok(mut f) => f.read_to_string(&mut text).map_err(io_err(&path))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&path)(e)),
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|source| StateError::Corrupt { path, source })
    }

    /// Writes `state.json` atomically.
    pub fn save(&self, state: &LabState) -> Result<(), StateError> {
        let json = serde_json::to_vec_pretty(state).expect("lab state serialises");
        write_atomic(&self.state_file(), &json, 0o600)
    }

    /// Takes the lab's lock, waiting up to `wait` for another labctl to finish.
    ///
    /// This blocks the calling thread while it waits; async callers run it
    /// on a blocking thread (`tokio::task::spawn_blocking`).
    pub fn lock(&self, wait: Duration) -> Result<LabLock, StateError> {
        let path = self.root.join("lock");
        let started = Instant::now();
        // The lock file waited on stays open between attempts: it is only
        // reopened once a lock on it turned out to be on a removed file.
        let mut open: Option<File> = None;
        let attempt = || -> Result<LabLock, LockAttempt> {
            loop {
                if open.is_none() {
                    self.create()?;
                    let file = OpenOptions::new()
                        .create(true)
                        .truncate(false)
                        .read(true)
                        .write(true)
                        .open(&path)
                        .map_err(io_err(&path))?;
                    open = Some(file);
                }
                let file = open.as_mut().expect("opened above");
                match file.try_lock() {
                    Ok(()) => {}
                    Err(fs::TryLockError::WouldBlock) => {
                        let holder = fs::read_to_string(&path)
                            .ok()
                            .map(|s| s.trim().to_string())
                            .filter(|s| !s.is_empty())
                            .unwrap_or_else(|| "unknown".into());
                        return Err(LockAttempt::Held { holder });
                    }
                    Err(fs::TryLockError::Error(e)) => return Err(io_err(&path)(e).into()),
                }
                let mut file = open.take().expect("the file just locked");
                // `remove()` unlinks the lock file with the lab, possibly while
                // this process waited on it. A newcomer then locks a new file at
                // the same path, so holding the old one excludes nobody: take
                // the lock only if the file locked is still the one at `path`.
                if is_same_file(&file, &path) {
                    file.set_len(0).map_err(io_err(&path))?;
                    write!(file, "{}", std::process::id()).map_err(io_err(&path))?;
                    return Ok(LabLock { _file: file });
                }
                tracing::debug!(lab = %self.lab, "the lock file was replaced while waiting; locking the new one");
            }
        };
        let mut told = false;
        let result = attempt
            .retry(
                ConstantBuilder::new()
                    .with_delay(Duration::from_millis(200))
                    .without_max_times(),
            )
            .when(|e| matches!(e, LockAttempt::Held { .. }) && started.elapsed() < wait)
            .notify(|e, _| {
                if let (LockAttempt::Held { holder }, false) = (e, told) {
                    tracing::info!(lab = %self.lab, holder = %holder, "waiting for another labctl working on this lab");
                    told = true;
                }
            })
            .call();
        result.map_err(|e| match e {
            LockAttempt::Held { holder } => StateError::Busy {
                lab: self.lab.clone(),
                holder,
                waited_s: started.elapsed().as_secs(),
            },
            LockAttempt::Failed(e) => e,
        })
    }

    /// Removes the whole directory (after `down`).
    pub fn remove(&self) -> Result<(), StateError> {
        match fs::remove_dir_all(&self.root) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err(&self.root)(e)),
        }
    }
}

/// Why one attempt at the lab's lock did not take it.
enum LockAttempt {
    /// Another process holds it (its pid, from the lock file).
    Held { holder: String },
    /// Anything else; not retried.
    Failed(StateError),
}

impl From<StateError> for LockAttempt {
    fn from(e: StateError) -> Self {
        LockAttempt::Failed(e)
    }
}

/// Held while a labctl process works on a lab; released on drop.
#[derive(Debug)]
pub struct LabLock {
    _file: File,
}

/// What a lab is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// `up` is creating or provisioning nodes.
    Creating,
    /// Every node is provisioned and its agent answered.
    Ready,
    /// `up` failed and `--keep-on-failure` kept what it made.
    Failed,
}

/// Everything `up` recorded about a lab.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LabState {
    /// [`STATE_SCHEMA`].
    pub schema: u32,
    /// The lab's random id (16 hex digits), made at its first `up`: the key
    /// of its entry in the user's registry of live labs and a tag on its
    /// cloud resources. Empty in states written by an older labctl.
    #[serde(default)]
    pub id: String,
    /// The lab's name.
    pub lab: String,
    /// `qemu`, `multipass`, `aws`.
    pub provider: String,
    /// The fabric configured on the nodes (`rxe`, `efa`, `none`).
    pub fabric: String,
    /// Where the lab stands.
    pub phase: Phase,
    /// When `up` started, RFC 3339.
    pub created_at: String,
    /// Provider-specific facts (QEMU: accelerator, supervisor pid, image hash).
    #[serde(default)]
    pub provider_state: serde_json::Value,
    /// One entry per node, in labs.yaml order.
    pub nodes: Vec<NodeState>,
}

impl LabState {
    /// A fresh state for a lab about to be created.
    pub fn new(lab: &str, provider: &str, fabric: &str) -> LabState {
        LabState {
            schema: STATE_SCHEMA,
            id: format!("{:016x}", rand::random::<u64>()),
            lab: lab.to_string(),
            provider: provider.to_string(),
            fabric: fabric.to_string(),
            phase: Phase::Creating,
            created_at: now_rfc3339(),
            provider_state: serde_json::Value::Null,
            nodes: Vec::new(),
        }
    }

    /// The node called `name`.
    pub fn node(&self, name: &str) -> Option<&NodeState> {
        self.nodes.iter().find(|n| n.name == name)
    }
}

/// One node as created and provisioned.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeState {
    /// The node's name from labs.yaml (also its hostname).
    pub name: String,
    /// SSH endpoint as seen from the controller.
    pub ssh_host: String,
    /// SSH port (QEMU: forwarded on 127.0.0.1).
    pub ssh_port: u16,
    /// SSH user.
    pub ssh_user: String,
    /// The private key to log in with, where it is not the lab's own key
    /// (a host that exists, provider ssh: the user's key, by path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_identity: Option<std::path::PathBuf>,
    /// The jump host SSH goes through (provider ssh, `proxy_jump:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_jump: Option<JumpRecord>,
    /// The node names no key file: log in with the keys of the user's
    /// ssh-agent (`SSH_AUTH_SOCK`), on its jump host too (provider ssh).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ssh_agent: bool,
    /// The node's address on the lab's data link (the rxe link).
    pub data_addr: Ipv4Addr,
    /// Prefix length of the data network.
    pub data_prefix: u8,
    /// The data NIC inside the node, once provisioning found it.
    #[serde(default)]
    pub data_netdev: Option<String>,
    /// The RDMA device on the data NIC (`rxe0`).
    #[serde(default)]
    pub rdma_device: Option<String>,
    /// The node's SSH host key, pinned at first contact (OpenSSH public key line).
    #[serde(default)]
    pub host_key: Option<String>,
    /// The VM process, where the provider runs one on this machine.
    #[serde(default)]
    pub pid: Option<u32>,
    /// sha256 of the deployed rdma-agent binary.
    #[serde(default)]
    pub agent_sha256: Option<String>,
    /// Port the agent listens on inside the node (loopback).
    pub agent_port: u16,
    /// Provisioning finished on this node.
    #[serde(default)]
    pub provisioned: bool,
    /// What the lab changed on a host it does not own (provider ssh), so
    /// `down` undoes exactly that; `None` on machines the lab created,
    /// which keep the agent and facts in their global places.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostChanges>,
}

/// A jump host as the lab recorded it at `up`: where, as whom, and the
/// host key it presented then (the only one accepted afterwards).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JumpRecord {
    /// Its host.
    pub host: String,
    /// Its SSH port.
    pub port: u16,
    /// Login user there.
    pub user: String,
    /// The private key to log in with there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<std::path::PathBuf>,
    /// Its host key (OpenSSH public key line), pinned at `up`.
    pub host_key: String,
}

/// Everything a lab put on a host that outlives it: one directory, the
/// host lock, the agent's supervisor, an rxe link and a netem qdisc.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostChanges {
    /// The lab's directory on the host (`/var/lib/labctl/<lab>-<id>`):
    /// the agent, its secret, log and pid files, the lab facts.
    pub dir: String,
    /// The host lock file, holding [`holder`](Self::holder).
    pub lock: String,
    /// The line the lock holds: the lab, its id and the controller.
    pub holder: String,
    /// The transient systemd unit the agent runs in (where systemd runs).
    pub unit: String,
    /// How the agent is supervised: `systemd` or `watchdog` (once started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supervisor: Option<String>,
    /// The watchdog's pid, where there is no systemd.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watchdog_pid: Option<u32>,
    /// `fabric: rxe`: the rxe link this lab adds on the data netdev when
    /// that netdev has none (recorded before it is added, cleared when the
    /// netdev had one: a link the lab did not add is never removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rxe_link: Option<String>,
    /// The netdev on which `labctl impair` set a root netem qdisc
    /// (recorded before the rule is set; `impair --clear` and `down`
    /// remove that qdisc, only while it is still a netem one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netem_netdev: Option<String>,
}

impl HostChanges {
    /// The agent binary in the lab's directory.
    pub fn agent_path(&self) -> String {
        format!("{}/rdma-agent", self.dir)
    }

    /// The agent secret in the lab's directory.
    pub fn secret_path(&self) -> String {
        format!("{}/agent.secret", self.dir)
    }
}

/// The current time as RFC 3339 (UTC, seconds).
pub fn now_rfc3339() -> String {
    rfc3339(SystemTime::now())
}

/// `at` in RFC 3339, UTC, to the second (as [`now_rfc3339`] writes it).
pub fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

/// Writes `bytes` to `path` so that readers see the old or the new file,
/// never a torn one: temp file in the same directory, fsync, rename, fsync dir.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), StateError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    {
        let mut f = File::create(&tmp).map_err(io_err(&tmp))?;
        set_mode(&tmp, mode)?;
        f.write_all(bytes).map_err(io_err(&tmp))?;
        f.sync_all().map_err(io_err(&tmp))?;
    }
    fs::rename(&tmp, path).map_err(io_err(path))?;
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Sets a file's permission bits.
pub fn set_mode(path: &Path, mode: u32) -> Result<(), StateError> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(io_err(path))
}

/// Whether `file` is the file now at `path` (same device and inode).
fn is_same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), fs::metadata(path)) {
        (Ok(held), Ok(current)) => held.dev() == current.dev() && held.ino() == current.ino(),
        _ => false,
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_lab() -> (PathBuf, LabDir) {
        let base = std::env::temp_dir().join(format!(
            "labctl-state-test-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        fs::create_dir_all(&base).unwrap();
        let dir = LabDir::for_lab(&base.join("labs.yaml"), "demo");
        (base, dir)
    }

    fn sample_state() -> LabState {
        let mut state = LabState::new("demo", "qemu", "rxe");
        state.nodes.push(NodeState {
            name: "server".into(),
            ssh_host: "127.0.0.1".into(),
            ssh_port: 2201,
            ssh_user: "root".into(),
            ssh_identity: None,
            ssh_jump: None,
            ssh_agent: false,
            data_addr: Ipv4Addr::new(10, 77, 0, 1),
            data_prefix: 24,
            data_netdev: Some("eth1".into()),
            rdma_device: Some("rxe0".into()),
            host_key: None,
            pid: Some(42),
            agent_sha256: None,
            agent_port: 7470,
            provisioned: true,
            host: None,
        });
        state
    }

    #[test]
    fn test_state_round_trips_and_is_private() {
        let (base, dir) = temp_lab();
        assert!(dir.load().unwrap().is_none());
        dir.create().unwrap();
        dir.save(&sample_state()).unwrap();
        let loaded = dir.load().unwrap().unwrap();
        assert_eq!(loaded.lab, "demo");
        assert_eq!(loaded.node("server").unwrap().ssh_port, 2201);
        assert_eq!(loaded.phase, Phase::Creating);
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(dir.state_file()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let dir_mode = fs::metadata(dir.root()).unwrap().permissions().mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        // No temp file is left beside the state.
        let names: Vec<_> = fs::read_dir(dir.root())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, vec!["state.json"]);
        fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn test_corrupt_state_is_reported_with_its_path() {
        let (base, dir) = temp_lab();
        dir.create().unwrap();
        fs::write(dir.state_file(), b"{ not json").unwrap();
        let err = dir.load().unwrap_err().to_string();
        assert!(err.contains("state.json"), "{err}");
        assert!(err.contains("corrupt lab state"), "{err}");
        fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn test_second_lock_waits_then_fails_naming_the_holder() {
        let (base, dir) = temp_lab();
        let _held = dir.lock(Duration::ZERO).unwrap();
        // flock locks belong to the open file description, so a second open
        // in the same process contends exactly like another labctl would.
        let err = dir.lock(Duration::from_millis(300)).unwrap_err();
        match &err {
            StateError::Busy { lab, holder, .. } => {
                assert_eq!(lab, "demo");
                assert_eq!(holder, &std::process::id().to_string());
            }
            other => panic!("expected Busy, got {other}"),
        }
        drop(_held);
        dir.lock(Duration::ZERO).unwrap();
        fs::remove_dir_all(base).unwrap();
    }

    /// Issue 15 item 5: `down` removes the lab (lock file included) while
    /// it holds the lock. A labctl already waiting on the old lock file and
    /// one arriving after the removal must not both hold the lab.
    #[test]
    fn test_lock_removed_while_held_never_has_two_holders() {
        let (base, dir) = temp_lab();
        let first = dir.lock(Duration::ZERO).unwrap();
        let waiter = {
            let dir = dir.clone();
            std::thread::spawn(move || dir.lock(Duration::from_secs(2)))
        };
        // Let the waiter open the old lock file and start waiting on it.
        std::thread::sleep(Duration::from_millis(300));
        dir.remove().unwrap();
        let newcomer = dir.lock(Duration::ZERO).expect("the lab is free after its removal");
        drop(first);
        // The newcomer holds the lab for longer than the waiter waits, so
        // the waiter must give up, naming the newcomer (this process).
        match waiter.join().unwrap() {
            Err(StateError::Busy { holder, waited_s, .. }) => {
                assert_eq!(holder, std::process::id().to_string());
                assert!(waited_s >= 1, "gave up after {waited_s} s");
            }
            Ok(_) => panic!("two holders: the waiter took the removed lock file while the newcomer held the new one"),
            Err(other) => panic!("expected Busy, got {other}"),
        }
        drop(newcomer);
        dir.lock(Duration::ZERO).unwrap();
        fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn test_state_dir_sits_beside_the_labs_file() {
        let dir = LabDir::for_lab(Path::new("/srv/labs/labs.yaml"), "pair");
        if std::env::var_os("LABCTL_STATE_DIR").is_none() {
            assert_eq!(dir.root(), Path::new("/srv/labs/.labctl/pair"));
        }
        assert_eq!(dir.console_log("server"), dir.root().join("server.console.log"));
        // Results outlive the lab: they are not inside the directory `down` removes.
        assert!(
            !dir.results_dir().starts_with(dir.root()),
            "{}",
            dir.results_dir().display()
        );
        assert!(dir.results_dir().ends_with(".results/pair"));
    }
}
