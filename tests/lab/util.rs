//! Running the real `labctl` binary against a test lab.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use libtest_mimic::Failed;

/// The release directory this test binary was built into (labctl and
/// rdma-agent sit beside it).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/..")
        .to_path_buf()
}

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the repo")
        .to_path_buf()
}

/// How a test talks to labctl: a labs file and a private state directory.
#[derive(Clone)]
pub struct Labctl {
    /// The labs file.
    pub file: PathBuf,
    /// LABCTL_STATE_DIR for this suite.
    pub state_base: PathBuf,
}

/// What a labctl run did.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Fails unless labctl exited 0.
    pub fn ok(self) -> Result<Run, Failed> {
        if self.code != 0 {
            return Err(format!(
                "labctl exited {}\nstdout:\n{}\nstderr:\n{}",
                self.code, self.stdout, self.stderr
            )
            .into());
        }
        Ok(self)
    }

    /// stdout parsed as JSON.
    pub fn json(&self) -> Result<serde_json::Value, Failed> {
        serde_json::from_str(&self.stdout).map_err(|e| format!("stdout is not JSON ({e}):\n{}", self.stdout).into())
    }
}

impl Labctl {
    /// A labctl for the labs file `file` (relative to the repo).
    pub fn new(file: &str, state_base: &Path) -> Labctl {
        Labctl {
            file: repo().join(file),
            state_base: state_base.to_path_buf(),
        }
    }

    /// The command, ready for arguments.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(bin_dir().join("labctl"));
        cmd.arg("-f")
            .arg(&self.file)
            .env("LABCTL_STATE_DIR", &self.state_base)
            .env("LABCTL_AGENT", bin_dir().join("rdma-agent"))
            .env_remove("LABCTL_LAB");
        cmd
    }

    /// Runs labctl with `args`.
    pub fn run(&self, args: &[&str]) -> Run {
        let started = std::time::Instant::now();
        let out = self.command().args(args).output().expect("run labctl");
        crate::timing::command(args, started.elapsed());
        to_run(out)
    }

    /// The lab's state directory.
    pub fn state_dir(&self, lab: &str) -> PathBuf {
        self.state_base.join(lab)
    }
}

pub(crate) fn to_run(out: Output) -> Run {
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Live processes whose command line mentions `needle`.
pub fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')) {
            continue;
        }
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if text.contains(needle) {
            found.push(format!("{pid}: {text}"));
        }
    }
    found
}

/// Fails with `msg` unless `cond`.
/// Runs `listing`, a shell command that prints what an ssh lab could have
/// left on a host, on both VMs of the suite lab (the hosts of the ssh-lab
/// tests); fails naming the node, `when`, and what was printed.
pub fn nothing_left_on_vms(qemu: &Labctl, listing: &str, when: &str) -> Result<(), Failed> {
    for node in ["server", "client"] {
        let left = qemu.run(&["exec", node, "--", listing]).ok()?;
        check(left.stdout.trim().is_empty(), || {
            format!("{node} {when}: left behind:\n{}", left.stdout.trim())
        })?;
    }
    Ok(())
}

/// A labctl command run when the guard is dropped: the repair a test owes
/// the shared lab (an MTU, a firewall rule, an impairment, `up`), whatever
/// happened to the test. A failed repair is printed; a drop cannot fail the
/// test, and the next trial's own checks see the lab as it is.
pub struct RepairOnDrop<'a> {
    lab: &'a Labctl,
    args: Vec<String>,
}

impl<'a> RepairOnDrop<'a> {
    pub fn new<S: AsRef<str>>(lab: &'a Labctl, args: &[S]) -> RepairOnDrop<'a> {
        RepairOnDrop {
            lab,
            args: args.iter().map(|a| a.as_ref().to_string()).collect(),
        }
    }

    /// The test does the repair itself and checks it: nothing on drop.
    pub fn disarm(mut self) {
        self.args.clear();
    }
}

impl Drop for RepairOnDrop<'_> {
    fn drop(&mut self) {
        if self.args.is_empty() {
            return;
        }
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let run = self.lab.run(&args);
        if run.code != 0 {
            eprintln!("`labctl {}` after the test failed: {}", args.join(" "), run.stderr);
        }
    }
}

pub fn check(cond: bool, msg: impl FnOnce() -> String) -> Result<(), Failed> {
    if cond {
        Ok(())
    } else {
        Err(msg().into())
    }
}

/// Every string of `wants` is in `text` (`what` names the text in the failure).
pub fn check_contains_all<S: AsRef<str>>(what: &str, text: &str, wants: &[S]) -> Result<(), Failed> {
    for want in wants.iter().map(AsRef::as_ref) {
        check(text.contains(want), || format!("{what} lacks {want:?}:\n{text}"))?;
    }
    Ok(())
}

/// What `ibv_rc_pingpong` printed on each side.
pub struct PingPong {
    pub client: String,
    pub server: String,
}

/// Runs `ibv_rc_pingpong` between the lab's server and client: `server_cmd`
/// on the server in the background, then, two seconds later, `client_cmd`
/// on the client. Fails unless both exit 0 and each side reports moving
/// `bytes` bytes (ibv_rc_pingpong counts both directions).
pub fn rc_pingpong(lab: &Labctl, server_cmd: &str, client_cmd: &str, bytes: u64) -> Result<PingPong, Failed> {
    let server = lab
        .command()
        .args(["exec", "server", "--", server_cmd])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    std::thread::sleep(std::time::Duration::from_secs(2));
    let client = lab.run(&["exec", "client", "--", client_cmd]);
    let server = server.wait_with_output()?;
    let server_out = String::from_utf8_lossy(&server.stdout).into_owned();
    check(client.code == 0 && server.status.success(), || {
        format!(
            "ibv_rc_pingpong failed: client {} {}{}; server {:?} {}{}",
            client.code,
            client.stdout,
            client.stderr,
            server.status,
            server_out,
            String::from_utf8_lossy(&server.stderr)
        )
    })?;
    let moved = format!("{bytes} bytes in");
    for (side, out) in [("client", client.stdout.as_str()), ("server", server_out.as_str())] {
        check(out.contains(&moved), || {
            format!("{side} moved the wrong amount (want {bytes}):\n{out}")
        })?;
    }
    Ok(PingPong {
        client: client.stdout,
        server: server_out,
    })
}

/// The suite lab's (`e2e`) `server` and `client` nodes, as its state.json records them.
pub fn e2e_server_and_client(lab: &Labctl) -> Result<(serde_json::Value, serde_json::Value), Failed> {
    let path = lab.state_dir("e2e").join("state.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let state: serde_json::Value = serde_json::from_str(&text)?;
    let node = |name: &str| -> Result<serde_json::Value, Failed> {
        state["nodes"]
            .as_array()
            .and_then(|n| n.iter().find(|n| n["name"] == name))
            .cloned()
            .ok_or_else(|| format!("no node {name} in the e2e state").into())
    };
    Ok((node("server")?, node("client")?))
}

/// Waits up to 30 s until `node`'s agent answers `status` again (after it
/// was killed or restarted: its supervisor starts it again).
pub fn wait_for_agent(lab: &Labctl, node: &str, after: &str) -> Result<(), Failed> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        // While the agent restarts, status exits non-zero; its JSON still tells.
        let s = lab.run(&["status", "--json"]).json()?;
        let entry = s["nodes"]
            .as_array()
            .and_then(|nodes| nodes.iter().find(|n| n["name"] == node))
            .cloned()
            .unwrap_or_default();
        if entry["error"].is_null() && entry["agent"]["version"] == env!("CARGO_PKG_VERSION") {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("{node}: agent not healthy 30 s after {after}: {}", entry["error"]).into());
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}
