//! The Multipass provider without Multipass: its JSON parsing against the
//! real formatter's shapes (every instance state), and the exact command lines
//! it runs, against a stand-in `multipass` put first on PATH that records its
//! arguments and answers from those shapes (tests/fixtures/multipass/).
//!
//! A real Multipass run is checked by hand; see docs/providers/multipass.md.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use lab_core::lab::{Lab, LabError, UpOptions};
use lab_model::LabsFile;
use lab_providers::multipass::{parse_info, parse_list, InstanceState, MultipassProvider};
use lab_providers::{HostKeyPair, NodeKeys, Provider, ProviderError};
use lab_state::progress::Silent;
use lab_state::{LabDir, LabState};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/multipass")
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(fixtures().join(name)).unwrap()
}

/// The keys `up` would hand the provider: `login`, and a real host key pair
/// per node, made in the lab's state directory as `up` makes them.
fn node_keys(lab: &Lab, login: &str) -> NodeKeys {
    let host_keys = lab
        .nodes
        .iter()
        .map(|n| {
            let (private_openssh, public) =
                lab_remote::ssh::load_or_create_host_key(&lab.dir.host_key(&n.name)).unwrap();
            (
                n.name.clone(),
                HostKeyPair {
                    private_openssh,
                    public,
                },
            )
        })
        .collect();
    NodeKeys {
        authorized_key: login.into(),
        host_keys,
        preload: Vec::new(),
    }
}

const EVERY_STATE: [(&str, InstanceState, &str); 9] = [
    ("s-running", InstanceState::Running, "Running"),
    ("s-stopped", InstanceState::Stopped, "Stopped"),
    ("s-deleted", InstanceState::Deleted, "Deleted"),
    ("s-starting", InstanceState::Starting, "Starting"),
    ("s-restarting", InstanceState::Restarting, "Restarting"),
    ("s-delayed", InstanceState::DelayedShutdown, "Delayed Shutdown"),
    ("s-suspending", InstanceState::Suspending, "Suspending"),
    ("s-suspended", InstanceState::Suspended, "Suspended"),
    ("s-unknown", InstanceState::Unknown, "Unknown"),
];

#[test]
fn test_info_parses_every_instance_state() {
    let report = parse_info(&fixture("info-every-state.json")).unwrap();
    assert_eq!(report.info.len(), 9);
    assert!(report.errors.is_empty());
    for (name, state, text) in EVERY_STATE {
        let info = &report.info[name];
        assert_eq!(info.state, state, "{name}");
        assert_eq!(info.state.as_str(), text);
        let running = matches!(state, InstanceState::Running | InstanceState::DelayedShutdown);
        assert_eq!(info.state.is_running(), running, "{name}");
    }
    let running = &report.info["s-running"];
    assert_eq!(running.first_ipv4(), Some("10.180.0.20".parse().unwrap()));
    assert_eq!(running.memory.used, Some(231735296));
    assert_eq!(running.disks["sda1"].used.as_deref(), Some("1862270976"));
    assert_eq!(running.load, vec![0.08, 0.03, 0.01]);
    assert_eq!(running.cpu_count.as_deref(), Some("1"));
    assert_eq!(running.mounts["/home/ubuntu/src"].uid_mappings, vec!["1000:default"]);
    // What a stopped instance lacks is absent, not zero.
    let stopped = &report.info["s-stopped"];
    assert_eq!(stopped.first_ipv4(), None);
    assert_eq!((stopped.memory.used, stopped.memory.total), (None, Some(1003765760)));
    assert!(stopped.load.is_empty() && stopped.release.is_empty());
    assert_eq!(report.info["s-unknown"].disks["sda1"].total, None);
}

#[test]
fn test_list_parses_every_instance_state() {
    let report = parse_list(&fixture("list-every-state.json")).unwrap();
    let got: Vec<(&str, InstanceState)> = report.list.iter().map(|i| (i.name.as_str(), i.state)).collect();
    let want: Vec<(&str, InstanceState)> = EVERY_STATE.iter().map(|(n, s, _)| (*n, *s)).collect();
    assert_eq!(got, want);
    let unknown = report.list.iter().find(|i| i.name == "s-unknown").unwrap();
    assert_eq!(unknown.release, "Not Available");
    assert!(parse_list(&fixture("list-empty.json")).unwrap().list.is_empty());
}

#[test]
fn test_older_and_newer_shapes_parse() {
    // Before snapshots: no cpu_count, no snapshot_count.
    let old = parse_info(&fixture("info-old-version.json")).unwrap();
    let hawfinch = &old.info["flowing-hawfinch"];
    assert_eq!(hawfinch.state, InstanceState::Running);
    assert_eq!(hawfinch.cpu_count, None);
    assert_eq!(hawfinch.first_ipv4(), Some("10.114.154.206".parse().unwrap()));
    // A state this labctl does not know yet is Unknown, not a parse error.
    let future = r#"{"errors": [], "info": {"x": {"state": "Hibernating", "ipv4": []}}}"#;
    assert_eq!(parse_info(future).unwrap().info["x"].state, InstanceState::Unknown);
    // An instance shown only through its snapshots has no state at all.
    let snaps = r#"{"errors": [], "info": {"x": {"snapshots": {"snapshot1": {"parent": "", "comment": ""}}}}}"#;
    let x = &parse_info(snaps).unwrap().info["x"];
    assert_eq!((x.state, x.snapshots.len()), (InstanceState::Unknown, 1));
    // The node's address is the first IPv4, the default network's.
    let lab = parse_info(&fixture("info-lab-running.json")).unwrap();
    assert_eq!(lab.info["mp-server"].first_ipv4(), Some("192.0.2.11".parse().unwrap()));
}

// ---------------------------------------------------------------------------
// The stand-in
// ---------------------------------------------------------------------------

/// PATH and the stand-in's directory are process-wide: one test at a time.
static STANDIN: Mutex<()> = Mutex::new(());

struct Standin {
    dir: PathBuf,
    _guard: MutexGuard<'static, ()>,
}

impl Standin {
    /// A fresh stand-in directory, with the stand-in first on PATH.
    fn new(name: &str) -> Standin {
        let guard = STANDIN.lock().unwrap_or_else(|e| e.into_inner());
        let dir = std::env::temp_dir().join(format!("labctl-mp-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        std::fs::copy(fixtures().join("multipass"), dir.join("bin/multipass")).unwrap();
        static ORIGINAL_PATH: OnceLock<OsString> = OnceLock::new();
        let path = ORIGINAL_PATH.get_or_init(|| std::env::var_os("PATH").unwrap_or_default());
        let mut paths = vec![dir.join("bin")];
        paths.extend(std::env::split_paths(path));
        std::env::set_var("PATH", std::env::join_paths(paths).unwrap());
        std::env::set_var("MP_STANDIN_DIR", &dir);
        // The registry of live labs that `up` writes stays in the test's directory.
        std::env::set_var("XDG_STATE_HOME", dir.join("xdg-state"));
        std::env::remove_var("MP_STANDIN_FAIL");
        std::env::remove_var("MP_STANDIN_HANG");
        Standin { dir, _guard: guard }
    }

    /// Answers `file` (version.json, list.json, info.json) with fixture `from`.
    fn answer(&self, file: &str, from: &str) {
        std::fs::copy(fixtures().join(from), self.dir.join(file)).unwrap();
    }

    fn silence(&self, file: &str) {
        let _ = std::fs::remove_file(self.dir.join(file));
    }

    /// The command lines run so far; forgets them.
    fn argv(&self) -> Vec<String> {
        let log = self.dir.join("argv.log");
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_file(&log);
        text.lines().map(String::from).collect()
    }

    /// A labs file with lab `mp` (provider multipass) in the stand-in's directory.
    fn lab(&self) -> (Lab, PathBuf) {
        let file = self.dir.join("labs.yaml");
        std::fs::write(
            &file,
            "labs:\n  - name: mp\n    provider: multipass\n    multipass:\n      image: \"22.04\"\n      disk: 8GiB\n    nodes:\n      - name: server\n        cpus: 2\n        memory: 2GiB\n      - name: client\n        memory: 1536MiB\n",
        )
        .unwrap();
        (Lab::open(&file, None).unwrap(), file)
    }
}

/// `create` of the lab, which the test set up to fail.
fn create_fails(lab: &Lab) -> ProviderError {
    let mut state = LabState::new("mp", "multipass", "rxe");
    runtime()
        .block_on(MultipassProvider::new().create(
            &lab.spec,
            &lab.nodes,
            &lab.dir,
            &mut state,
            &node_keys(lab, "k"),
            &Silent,
        ))
        .unwrap_err()
}

impl Drop for Standin {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn test_preflight_checks_daemon_and_name_clashes() {
    let mp = Standin::new("preflight");
    let (lab, _) = mp.lab();
    let rt = runtime();
    mp.answer("version.json", "version.json");
    mp.answer("list.json", "list-empty.json");
    rt.block_on(MultipassProvider::new().preflight(&lab.spec, &lab.nodes))
        .unwrap();
    assert_eq!(mp.argv(), ["version --format json", "list --format json"]);

    // The daemon does not answer.
    mp.answer("version.json", "version-no-daemon.json");
    let e = rt
        .block_on(MultipassProvider::new().preflight(&lab.spec, &lab.nodes))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("multipassd did not") && e.contains("snap start multipass"),
        "{e}"
    );

    // An instance of the same name exists outside the lab.
    mp.answer("version.json", "version.json");
    mp.answer("list.json", "list-lab.json");
    let e = rt
        .block_on(MultipassProvider::new().preflight(&lab.spec, &lab.nodes))
        .unwrap_err();
    assert!(
        matches!(&e, ProviderError::InstanceExists { instance, .. } if instance == "mp-server"),
        "{e}"
    );
    assert!(e.to_string().contains("multipass delete --purge mp-server"), "{e}");
}

#[test]
fn test_missing_multipass_says_how_to_install_it() {
    let _mp = Standin::new("missing");
    std::env::set_var("PATH", "/nonexistent");
    let text = "labs:\n  - name: mp\n    provider: multipass\n    nodes:\n      - name: a\n";
    let spec = LabsFile::parse(Path::new("labs.yaml"), text).unwrap().labs[0].clone();
    let e = runtime()
        .block_on(MultipassProvider::new().preflight(&spec, &spec.resolve_nodes()))
        .unwrap_err();
    assert!(matches!(e, ProviderError::MissingProgram { .. }), "{e}");
    let e = e.to_string();
    assert!(
        e.contains("`multipass` is not installed") && e.contains("snap install multipass"),
        "{e}"
    );
    assert!(e.contains("brew install --cask multipass"), "{e}");
}

#[test]
fn test_create_launches_each_node_with_its_cloud_init_and_records_addresses() {
    let mp = Standin::new("create");
    let (lab, _) = mp.lab();
    mp.answer("info.json", "info-lab-running.json");
    lab.dir.create().unwrap();
    let mut state = LabState::new("mp", "multipass", "rxe");
    let key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAbC labctl";
    let keys = node_keys(&lab, key);
    runtime()
        .block_on(MultipassProvider::new().create(&lab.spec, &lab.nodes, &lab.dir, &mut state, &keys, &Silent))
        .unwrap();
    let mut argv = mp.argv();
    let info = argv.pop().unwrap();
    argv.sort(); // launches run concurrently
                 // The user-data goes on stdin (the snap cannot read files outside the
                 // home directory), and each launch is followed by cloud-init's verdict.
    assert_eq!(
        argv,
        [
            "exec mp-client -- cloud-init status --long",
            "exec mp-server -- cloud-init status --long",
            "launch --name mp-client --cpus 1 --memory 1536M --disk 8G --cloud-init - --timeout 900 22.04",
            "launch --name mp-server --cpus 2 --memory 2G --disk 8G --cloud-init - --timeout 900 22.04",
        ]
    );
    assert_eq!(info, "info --format json mp-server mp-client");
    // Multipass got each node's own user-data, with the lab's key for root.
    let server = std::fs::read_to_string(mp.dir.join("mp-server.user-data")).unwrap();
    assert!(server.starts_with("#cloud-config\n"));
    assert!(server.contains("hostname: server\n") && server.contains(&format!("- {key}\n")));
    // ... and the host key labctl made for it, pinned in the state before any connection.
    let server_host_key = &keys.host_keys["server"].public;
    assert!(
        server.contains(&format!("ed25519_public: {server_host_key}\n")),
        "{server}"
    );
    assert_eq!(state.nodes[0].host_key.as_ref(), Some(server_host_key));
    assert!(std::fs::read_to_string(mp.dir.join("mp-client.user-data"))
        .unwrap()
        .contains("hostname: client\n"));
    // SSH and data traffic go to the first address Multipass reports, as root.
    let nodes: Vec<(&str, String, u16, &str)> = state
        .nodes
        .iter()
        .map(|n| {
            (
                n.name.as_str(),
                n.data_addr.to_string(),
                n.ssh_port,
                n.ssh_user.as_str(),
            )
        })
        .collect();
    assert_eq!(
        nodes,
        [
            ("server", "192.0.2.11".to_string(), 22, "root"),
            ("client", "192.0.2.12".to_string(), 22, "root")
        ]
    );
    assert!(state.nodes.iter().all(|n| n.ssh_host == n.data_addr.to_string()));
    assert_eq!(
        state.provider_state["instances"],
        serde_json::json!(["mp-server", "mp-client"])
    );
    // The state on disk says the same, for a later `down`.
    let saved = lab.dir.load().unwrap().unwrap();
    assert_eq!(saved.nodes.len(), 2);
}

#[test]
fn test_a_failed_cloud_init_fails_the_node_with_its_log() {
    let mp = Standin::new("cloud-init");
    let (lab, _) = mp.lab();
    lab.dir.create().unwrap();
    // What cloud-init 24.1 prints when a module failed, and its output log's end.
    std::fs::write(
        mp.dir.join("cloud-init-status"),
        "status: error\nextended_status: error - done\nboot_status_code: enabled-by-generator\nlast_update: Thu, 01 Jan 1970 00:02:11 +0000\ndetail:\nDataSourceNoCloud [seed=/dev/sr0][dsmode=net]\nerrors:\n\t- (scripts_user) failed\n",
    )
    .unwrap();
    std::fs::write(mp.dir.join("cloud-init-status.rc"), "1").unwrap();
    std::fs::write(
        mp.dir.join("cloud-init-output.log"),
        "E: Could not get lock /var/lib/dpkg/lock-frontend\nCloud-init v. 24.1 finished at Thu, 01 Jan 1970 00:02:11 +0000\n",
    )
    .unwrap();
    let e = create_fails(&lab);
    let text = e.to_string();
    assert!(matches!(e, ProviderError::CloudInitFailed { .. }), "{text}");
    assert!(
        text.contains(": cloud-init failed on the machine (status: error;"),
        "{text}"
    );
    assert!(
        text.contains("E: Could not get lock /var/lib/dpkg/lock-frontend"),
        "{text}"
    );
    assert!(text.contains("multipass exec mp-"), "{text}");
    // The log was read only because the status said error.
    assert!(mp
        .argv()
        .iter()
        .any(|l| l.ends_with("-- tail -n 25 /var/log/cloud-init-output.log")));
}

#[test]
fn test_cloud_init_status_line_is_read_from_any_version() {
    use lab_providers::multipass::cloud_init_status;
    assert_eq!(cloud_init_status("status: done\n"), Some("done"));
    assert_eq!(cloud_init_status("\nstatus: error\ndetail: x\n"), Some("error"));
    // 23.4+ reports recoverable errors as done, with a degraded extended status.
    assert_eq!(
        cloud_init_status("status: done\nextended_status: degraded done\n"),
        Some("done")
    );
    assert_eq!(cloud_init_status("bash: cloud-init: command not found\n"), None);
}

#[test]
fn test_failed_launch_reports_multipass_s_message() {
    let mp = Standin::new("launch-fails");
    let (lab, _) = mp.lab();
    lab.dir.create().unwrap();
    std::env::set_var("MP_STANDIN_FAIL", "launch");
    let e = create_fails(&lab);
    let text = e.to_string();
    assert!(matches!(e, ProviderError::CommandFailed { .. }), "{text}");
    assert!(text.contains("`multipass launch --name mp-"), "{text}");
    assert!(text.contains("launch failed: the stand-in was told to fail"), "{text}");
    // The instances were recorded before the launch, so `down` can find them.
    assert_eq!(
        lab.dir.load().unwrap().unwrap().provider_state["instances"],
        serde_json::json!(["mp-server", "mp-client"])
    );
}

#[tokio::test]
async fn test_check_alive_reads_the_instance_state() {
    let mp = Standin::new("alive");
    let state = LabState::new("mp", "multipass", "rxe");
    let dir = LabDir::for_lab(&mp.dir.join("labs.yaml"), "mp");
    let provider = MultipassProvider::new();
    mp.answer("info.json", "info-lab-running.json");
    provider.check_alive(&dir, &state, "client").await.unwrap();
    assert_eq!(mp.argv(), ["info --format json mp-client"]);

    mp.answer("info.json", "info-lab-client-stopped.json");
    let e = provider
        .check_alive(&dir, &state, "client")
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "node `client`: the machine is not running: Multipass reports instance `mp-client` as Stopped"
    );

    mp.silence("info.json");
    let e = provider
        .check_alive(&dir, &state, "server")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("instance \"mp-server\" does not exist"), "{e}");

    // A multipassd that never answers: the check gives up in its own time
    // and says so, instead of stalling `status` or an `up` waiting on SSH
    // (issue 15 item 2).
    std::env::set_var("MP_STANDIN_HANG", "info");
    let started = std::time::Instant::now();
    let e = provider
        .check_alive(&dir, &state, "server")
        .await
        .unwrap_err()
        .to_string();
    std::env::remove_var("MP_STANDIN_HANG");
    let took = started.elapsed();
    assert!(e.contains("no answer within 10 s"), "{e}");
    assert!(took < std::time::Duration::from_secs(15), "{took:?}");
}

#[test]
fn test_delete_purges_only_the_lab_s_existing_instances() {
    let mp = Standin::new("delete");
    let dir = LabDir::for_lab(&mp.dir.join("labs.yaml"), "mp");
    dir.create().unwrap();
    let provider = MultipassProvider::new();
    let rt = runtime();
    mp.answer("list.json", "list-lab.json");

    // From state: the recorded instances that exist; never `other-vm`.
    let mut state = LabState::new("mp", "multipass", "rxe");
    state.provider_state = serde_json::json!({"instances": ["mp-server", "mp-client"]});
    rt.block_on(provider.delete(&dir, Some(&state))).unwrap();
    assert_eq!(mp.argv(), ["list --format json", "delete --purge mp-client mp-server"]);

    // Without state (a crash before it was saved): from the user-data files.
    std::fs::create_dir_all(dir.root().join("multipass")).unwrap();
    std::fs::write(dir.root().join("multipass/server.user-data.yaml"), "x").unwrap();
    rt.block_on(provider.delete(&dir, None)).unwrap();
    assert_eq!(mp.argv(), ["list --format json", "delete --purge mp-server"]);

    // Nothing of the lab exists any more: nothing is deleted.
    mp.answer("list.json", "list-empty.json");
    rt.block_on(provider.delete(&dir, Some(&state))).unwrap();
    assert_eq!(mp.argv(), ["list --format json"]);

    // A lab with no instances at all does not even ask.
    let empty = LabDir::for_lab(&mp.dir.join("labs.yaml"), "other");
    rt.block_on(provider.delete(&empty, None)).unwrap();
    assert!(mp.argv().is_empty());
}

#[test]
fn test_failed_up_purges_what_it_launched() {
    let mp = Standin::new("up");
    let (lab, _) = mp.lab();
    mp.answer("version.json", "version.json");
    mp.answer("list.json", "list-empty.json");
    mp.answer("info.json", "info-lab-running.json");
    // The test binary is an ELF for this host, so the architecture check passes.
    let opts = UpOptions {
        keep_on_failure: false,
        agent_binary: std::env::current_exe().unwrap(),
        ssh_wait: Duration::from_secs(2),
        lock_wait: Duration::from_secs(5),
    };
    // Nothing answers SSH on 192.0.2.0/24: `up` fails and cleans up.
    let rt = runtime();
    let list_after_launch = {
        let dir = mp.dir.clone();
        std::thread::spawn(move || {
            // Once both launches are logged, `list` shows the lab's instances.
            // Up to 20 s: a loaded two-core machine (a lab's VMs running)
            // has been seen to take over 5 s to get there.
            for _ in 0..800 {
                let log = std::fs::read_to_string(dir.join("argv.log")).unwrap_or_default();
                if log.matches("launch ").count() == 2 {
                    std::fs::copy(fixtures().join("list-lab.json"), dir.join("list.json")).unwrap();
                    return true;
                }
                std::thread::sleep(Duration::from_millis(25));
            }
            false
        })
    };
    let e = rt.block_on(lab.up(&opts, &Silent)).unwrap_err();
    assert!(list_after_launch.join().unwrap(), "the launches never happened");
    assert!(matches!(e, LabError::Provision(_) | LabError::Nodes(_)), "{e}");
    let argv = mp.argv();
    assert_eq!(argv[..2], ["version --format json", "list --format json"]);
    assert_eq!(argv.iter().filter(|l| l.starts_with("launch ")).count(), 2, "{argv:?}");
    assert_eq!(argv.last().unwrap(), "delete --purge mp-client mp-server", "{argv:?}");
    assert!(!lab.dir.exists(), "the failed lab's state was left behind");
}
