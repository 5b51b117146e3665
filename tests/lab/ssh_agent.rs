//! A provider ssh lab whose `identity_file` is protected by a passphrase
//! logs in through a real ssh-agent (`ssh-agent -D -a SOCK`, the test's own
//! child). The key is a copy of the e2e lab's login key (authorized on the
//! VMs), added to the agent while still unencrypted and then encrypted on
//! disk with `ssh-keygen -p`: the agent holds it, labctl cannot read the
//! file. Without SSH_AUTH_SOCK, `up` fails naming the key and `ssh-add`,
//! leaving nothing; with it, `up`, a verified write-read and `labctl ssh`
//! (the system ssh, also through the agent) work, and `down` leaves
//! nothing. The agent is killed at the end, whatever failed.
//!
//! Then the same with an RSA key (3072 bits, encrypted on disk, held by a
//! second agent that has nothing else): an RSA signature from an agent must
//! ask for rsa-sha2-256/512, since OpenSSH 8.8 refuses SHA-1 `ssh-rsa`. The
//! VMs authorize that key for this phase only; its line goes afterwards.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use libtest_mimic::Failed;

use crate::ssh_existing::ssh_labs_file_with;
use crate::util::{bin_dir, check, nothing_left_on_vms, Labctl};

/// The test's ssh-agent, killed when dropped.
struct Agent {
    child: Child,
    socket: PathBuf,
}

impl Agent {
    fn start(socket: PathBuf) -> Result<Agent, Failed> {
        let child = Command::new("ssh-agent")
            .arg("-D")
            .arg("-a")
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start ssh-agent (install openssh-client): {e}"))?;
        let agent = Agent { child, socket };
        for _ in 0..100 {
            if agent.socket.exists() {
                return Ok(agent);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Err(format!("ssh-agent made no socket at {}", agent.socket.display()).into())
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        // SIGTERM: ssh-agent removes its socket; SIGKILL only if it lingers.
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        for _ in 0..50 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Gives the key file at `path` a passphrase (the agent keeps its copy).
fn encrypt_on_disk(path: &str) -> Result<(), Failed> {
    run_tool(
        "ssh-keygen",
        &["-q", "-p", "-P", "", "-N", "lab pass", "-f", path],
        None,
    )
}

fn run_tool(program: &str, args: &[&str], agent: Option<&Path>) -> Result<(), Failed> {
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null());
    if let Some(socket) = agent {
        cmd.env("SSH_AUTH_SOCK", socket);
    }
    let out = cmd.output().map_err(|e| format!("{program}: {e}"))?;
    check(out.status.success(), || {
        format!("{program} {args:?} failed: {}", String::from_utf8_lossy(&out.stderr))
    })
}

pub(crate) fn test_ssh_lab_with_a_passphrase_key_logs_in_through_ssh_agent(qemu: &Labctl) -> Result<(), Failed> {
    let dir = bin_dir().join("lab-tests-ssh-agent");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let key = dir.join("lab_key");
    std::fs::copy(qemu.state_dir("e2e").join("id_ed25519"), &key)?;
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    let agent = Agent::start(dir.join("agent.sock"))?;
    let key_text = key.display().to_string();
    run_tool("ssh-add", &["-q", &key_text], Some(&agent.socket))?;
    encrypt_on_disk(&key_text)?;
    // Encrypted: ssh-keygen itself cannot read it without the passphrase.
    check(
        run_tool("ssh-keygen", &["-y", "-P", "", "-f", &key_text], None).is_err(),
        || "ssh-keygen -p did not encrypt the key".into(),
    )?;
    let file = ssh_labs_file_with(qemu, "ssha", &dir, |_| vec![("identity_file", key_text.clone())])?;
    let lab = Labctl {
        file,
        state_base: dir.join("state"),
    };
    let run = |args: &[&str], with_agent: bool| {
        let mut cmd = lab.command();
        match with_agent {
            true => cmd.env("SSH_AUTH_SOCK", &agent.socket),
            false => cmd.env_remove("SSH_AUTH_SOCK"),
        };
        crate::util::to_run(cmd.args(args).stdin(Stdio::null()).output().expect("run labctl"))
    };

    // Without an agent: a clear error naming the key and ssh-add, nothing left.
    let refused = run(&["up"], false);
    let leftover = lab.state_dir("ssha").exists();
    run(&["down"], false);
    eprintln!(
        "--- up without SSH_AUTH_SOCK (exit {}):\n{}",
        refused.code, refused.stderr
    );
    check(refused.code != 0, || {
        "up with an encrypted key and no agent succeeded".into()
    })?;
    check(
        refused.stderr.contains(&key_text)
            && refused.stderr.contains("node `")
            && refused.stderr.contains("protected by a passphrase")
            && refused.stderr.contains("ssh-add"),
        || format!("up without an agent:\n{}", refused.stderr),
    )?;
    check(!leftover, || "a refused up left state".into())?;
    nothing_left_on_the_vms(qemu, "after the refused up")?;

    // With the agent: up, traffic, labctl ssh, down.
    let result = (|| -> Result<(), Failed> {
        let up = run(&["up"], true);
        eprintln!("--- up with SSH_AUTH_SOCK:\n{}", up.stderr);
        check(up.code == 0, || {
            format!("up through the ssh-agent failed:\n{}", up.stderr)
        })?;
        let verified = run(&["run", "write-read", "--json"], true);
        check(verified.code == 0 && verified.json()?["verified"] == true, || {
            format!("write-read: {}{}", verified.stdout, verified.stderr)
        })?;
        let want = qemu
            .run(&["exec", "client", "--", "cat /proc/sys/kernel/random/boot_id"])
            .ok()?;
        let via = run(
            &[
                "ssh",
                "--batch",
                "client",
                "--",
                "cat",
                "/proc/sys/kernel/random/boot_id",
            ],
            true,
        );
        eprintln!(
            "--- labctl ssh --batch client -- cat /proc/sys/kernel/random/boot_id:\n{}{}",
            via.stdout, via.stderr
        );
        check(via.code == 0 && via.stdout.trim() == want.stdout.trim(), || {
            format!(
                "labctl ssh through the agent printed {:?} (want {:?}): {}",
                via.stdout, want.stdout, via.stderr
            )
        })
    })();
    let down = run(&["down"], true);
    let agent_pid = agent.child.id();
    drop(agent);
    result?;
    check(down.code == 0, || format!("down: {}", down.stderr))?;
    check(!lab.state_dir("ssha").exists(), || "the lab's state stayed".into())?;
    nothing_left_on_the_vms(qemu, "after down")?;
    check(
        !dir.join("agent.sock").exists() && !Path::new(&format!("/proc/{agent_pid}")).exists(),
        || "the ssh-agent (or its socket) stayed".into(),
    )?;
    rsa_key_through_the_agent(qemu, &dir)?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The comment of the RSA key, which marks its authorized_keys line.
const RSA_COMMENT: &str = "labctl-e2e-rsa";

/// `up` and `down` of an ssh lab whose only usable key is an RSA key that
/// an ssh-agent holds (encrypted on disk).
fn rsa_key_through_the_agent(qemu: &Labctl, dir: &Path) -> Result<(), Failed> {
    let key = dir.join("rsa_key");
    let key_text = key.display().to_string();
    run_tool(
        "ssh-keygen",
        &[
            "-q",
            "-t",
            "rsa",
            "-b",
            "3072",
            "-N",
            "",
            "-C",
            RSA_COMMENT,
            "-f",
            &key_text,
        ],
        None,
    )?;
    let agent = Agent::start(dir.join("agent-rsa.sock"))?;
    run_tool("ssh-add", &["-q", &key_text], Some(&agent.socket))?;
    encrypt_on_disk(&key_text)?;
    let public = std::fs::read_to_string(dir.join("rsa_key.pub"))?;
    let file = ssh_labs_file_with(qemu, "sshr", dir, |_| vec![("identity_file", key_text.clone())])?;
    let lab = Labctl {
        file,
        state_base: dir.join("state-rsa"),
    };
    let run = |args: &[&str]| {
        let mut cmd = lab.command();
        cmd.env("SSH_AUTH_SOCK", &agent.socket);
        crate::util::to_run(cmd.args(args).stdin(Stdio::null()).output().expect("run labctl"))
    };
    let authorize = format!("echo '{}' >> /root/.ssh/authorized_keys", public.trim());
    let unauthorize = format!("sed -i '/ {RSA_COMMENT}$/d' /root/.ssh/authorized_keys");
    let result = (|| -> Result<(), Failed> {
        for node in ["server", "client"] {
            qemu.run(&["exec", node, "--", &authorize]).ok()?;
        }
        let up = run(&["up"]);
        eprintln!("--- up with an RSA key in the agent (exit {}):\n{}", up.code, up.stderr);
        check(up.code == 0, || {
            format!("up with an RSA key through the agent failed:\n{}", up.stderr)
        })?;
        let state = std::fs::read_to_string(lab.state_dir("sshr").join("state.json"))?;
        check(state.contains(&key_text), || {
            "the lab's state does not name the RSA key".into()
        })
    })();
    let down = run(&["down"]);
    let unauthorized: Vec<_> = ["server", "client"]
        .iter()
        .map(|node| qemu.run(&["exec", node, "--", &unauthorize]).ok())
        .collect();
    drop(agent);
    result?;
    check(down.code == 0, || format!("down: {}", down.stderr))?;
    for done in unauthorized {
        done?;
    }
    check(!lab.state_dir("sshr").exists(), || "the RSA lab's state stayed".into())?;
    let left = qemu
        .run(&[
            "exec",
            "server",
            "--",
            &format!("grep -c {RSA_COMMENT} /root/.ssh/authorized_keys || true"),
        ])
        .ok()?;
    check(left.stdout.trim() == "0", || {
        format!("the RSA key is still authorized: {}", left.stdout)
    })?;
    nothing_left_on_vms(
        qemu,
        "ls -d /var/lib/labctl /run/labctl 2>/dev/null; pgrep -af '[v]ar/lib/labctl/sshr' || true",
        "after the RSA lab's down",
    )
}

/// No per-lab directory, host lock or agent of the ssh lab on either VM.
fn nothing_left_on_the_vms(qemu: &Labctl, when: &str) -> Result<(), Failed> {
    let listing = "ls -d /var/lib/labctl /run/labctl 2>/dev/null; pgrep -af '[v]ar/lib/labctl/ssha' || true";
    nothing_left_on_vms(qemu, listing, when)
}
