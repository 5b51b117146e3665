//! Faults and trust on the real lab: a cut link, a stale capability, a
//! replaced agent, secrets that must stay private, and (last, because it
//! breaks the lab) a node killed mid-run. Every failure must be named and
//! bounded in time; none may hang or leave anything behind.

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use libtest_mimic::{Failed, Trial};
use serde_json::Value;

use crate::util::{check, Labctl};

/// Tests that leave the lab as they found it.
pub fn trials(lab: &Labctl) -> Vec<Trial> {
    let t = |name: &str, f: fn(&Labctl) -> Result<(), Failed>| {
        let lab = lab.clone();
        crate::timing::trial(name, move || f(&lab))
    };
    vec![
        t(
            "test_cut_link_fails_with_retry_exceeded_naming_the_link",
            test_cut_link_fails_with_retry_exceeded_naming_the_link,
        ),
        t(
            "test_rkey_of_a_finished_run_is_refused",
            test_rkey_of_a_finished_run_is_refused,
        ),
        t(
            "test_replaced_agent_is_detected_and_redeployed",
            test_replaced_agent_is_detected_and_redeployed,
        ),
        t(
            "test_keys_are_private_and_never_printed",
            test_keys_are_private_and_never_printed,
        ),
        t(
            "test_another_user_cannot_attach_to_the_data_segment",
            test_another_user_cannot_attach_to_the_data_segment,
        ),
        t(
            "test_stopped_agent_fails_status_and_run_in_time",
            test_stopped_agent_fails_status_and_run_in_time,
        ),
    ]
}

/// Tests that break the lab; they run after every other lab test, and the
/// teardown trial then checks that `down` still removes everything.
pub fn destructive_trials(lab: &Labctl) -> Vec<Trial> {
    let lab = lab.clone();
    vec![crate::timing::trial(
        "test_node_killed_mid_run_is_named_in_time",
        move || test_node_killed_mid_run_is_named_in_time(&lab),
    )]
}

/// The e2e lab's state.json.
pub(crate) fn state(lab: &Labctl) -> Result<Value, Failed> {
    let path = lab.state_dir("e2e").join("state.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()).into())
}

fn node<'a>(state: &'a Value, name: &str) -> Result<&'a Value, Failed> {
    state["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|n| n["name"] == name))
        .ok_or_else(|| format!("no node {name} in state.json").into())
}

/// 100% loss on the client's data NIC. In oob mode the QPs connect through
/// the controller, so the run starts and its first WRITE is never
/// acknowledged: retry exceeded, named with both ends of the link.
fn test_cut_link_fails_with_retry_exceeded_naming_the_link(lab: &Labctl) -> Result<(), Failed> {
    let st = state(lab)?;
    let netdev = node(&st, "client")?["data_netdev"]
        .as_str()
        .unwrap_or("eth1")
        .to_string();
    let cut = format!("tc qdisc add dev {netdev} root netem loss 100%");
    let heal = format!("tc qdisc del dev {netdev} root 2>/dev/null; true");
    // A run first, so each node has the other's MAC: with the link cut, an
    // oob QP could not even resolve its path (ARP) and would fail at RTR.
    lab.run(&["run", "write-read", "--cm", "oob"]).ok()?;
    lab.run(&["exec", "client", "--", &cut]).ok()?;
    let started = Instant::now();
    let run = lab.run(&["run", "write-bw", "--cm", "oob", "-n", "50", "--timeout", "90"]);
    let took = started.elapsed();
    // Heal before judging, so a failed check leaves a working lab.
    let healed = lab.run(&["exec", "client", "--", &heal]);
    check(healed.code == 0, || {
        format!("could not remove the loss: {}", healed.stderr)
    })?;
    check(run.code != 0, || {
        format!("the run passed over a cut link:\n{}", run.stdout)
    })?;
    check(run.stderr.contains("IBV_WC_RETRY_EXC_ERR"), || {
        format!("not a retry-exceeded error:\n{}", run.stderr)
    })?;
    check(
        run.stderr.contains("RDMA link") && run.stderr.contains(&netdev) && run.stderr.contains("10.77.0.1"),
        || format!("the error does not name the link:\n{}", run.stderr),
    )?;
    check(took < Duration::from_secs(80), || {
        format!("took {took:?}: the run waited for its timeout instead of failing")
    })?;
    eprintln!("cut link: failed in {:.1}s", took.as_secs_f64());
    // The link works again once healed.
    let again = lab.run(&["run", "write-read", "--json"]).ok()?.json()?;
    check(again["verified"] == true, || format!("after healing: {again}"))
}

/// A finished run's MR is deregistered: its {addr, rkey} is refused by the
/// server's RNIC (rxe) even though the agent and the memory are still there.
fn test_rkey_of_a_finished_run_is_refused(lab: &Labctl) -> Result<(), Failed> {
    for attempt in 0..2 {
        let first = lab.run(&["run", "write-read", "--json"]).ok()?.json()?;
        let facts = &first["server"]["facts"];
        let (addr, rkey) = (
            facts["mr_addr"].as_str().unwrap_or_default(),
            facts["mr_rkey"].as_str().unwrap_or_default(),
        );
        check(!addr.is_empty() && !rkey.is_empty(), || {
            format!("no capability in {facts}")
        })?;
        let capability = format!("{addr}:{rkey}");
        let stale = lab.run(&["run", "write-read", "--use-capability", &capability, "--json"]);
        if stale.code == 0 {
            // Only possible if the new MR got the very same address and key.
            let second = stale.json()?;
            let new = &second["server"]["facts"];
            if attempt == 0 && new["mr_addr"] == facts["mr_addr"] && new["mr_rkey"] == facts["mr_rkey"] {
                continue;
            }
            return Err(format!("a stale capability {capability} was accepted: {second}").into());
        }
        return check(stale.stderr.contains("IBV_WC_REM_ACCESS_ERR"), || {
            format!(
                "stale capability {capability}: not a remote access error:\n{}",
                stale.stderr
            )
        });
    }
    Err("the new MR matched the stale capability twice".into())
}

/// A node's agent binary replaced behind labctl's back (here by a script that
/// is not an agent at all): status reports the node unhealthy, and `up`
/// notices the binary differs from its own build and redeploys it.
fn test_replaced_agent_is_detected_and_redeployed(lab: &Labctl) -> Result<(), Failed> {
    let replace = "printf '#!/bin/sh\\necho not the agent >&2\\nsleep 600\\n' > /usr/local/bin/rdma-agent.fake \
                   && chmod 755 /usr/local/bin/rdma-agent.fake \
                   && mv -f /usr/local/bin/rdma-agent.fake /usr/local/bin/rdma-agent \
                   && pkill -9 -x rdma-agent; true";
    lab.run(&["exec", "client", "--", replace]).ok()?;
    let status = lab.run(&["status", "--json"]);
    let s = status.json()?;
    let client = node(&s, "client")?;
    check(status.code != 0 && !client["error"].is_null(), || {
        format!(
            "status did not notice the replaced agent (exit {}): {client}",
            status.code
        )
    })?;
    let up = lab.run(&["up"]).ok()?;
    let s = lab.run(&["status", "--json"]).ok()?.json()?;
    let client = node(&s, "client")?;
    check(
        client["error"].is_null() && client["agent"]["version"] == env!("CARGO_PKG_VERSION"),
        || format!("after up: {client}\nup said:\n{}{}", up.stdout, up.stderr),
    )?;
    let sums = lab
        .run(&["exec", "client", "--", "sha256sum /usr/local/bin/rdma-agent"])
        .ok()?;
    // What labctl uploads is the build without its debug sections, so the
    // node's copy is compared with that, computed here from the built file.
    let built = crate::util::bin_dir().join("rdma-agent");
    let ours = lab_providers::AgentBinary::load(&built, env!("CARGO_PKG_VERSION"))
        .map_err(|e| format!("{}: {e}", built.display()))?
        .sha256;
    check(sums.stdout.starts_with(&ours), || {
        format!("deployed {} but labctl uploads {ours}", sums.stdout.trim())
    })
}

/// The lab's private key is 0600 and its body appears in nothing labctl
/// writes or prints: state, status, run JSON, saved results, logs, and the
/// nodes' agent logs.
fn test_keys_are_private_and_never_printed(lab: &Labctl) -> Result<(), Failed> {
    use std::os::unix::fs::PermissionsExt;
    let dir = lab.state_dir("e2e");
    let key_path = dir.join("id_ed25519");
    let mode = std::fs::metadata(&key_path)
        .map_err(|e| format!("{}: {e}", key_path.display()))?
        .permissions()
        .mode();
    check(mode & 0o777 == 0o600, || {
        format!("{} has mode {:o}", key_path.display(), mode & 0o777)
    })?;
    let needles = secret_needles(&key_path, &dir.join("id_ed25519.pub"))?;
    let mut haystacks: Vec<(String, String)> = Vec::new();
    let status = lab.run(&["status", "--json"]);
    haystacks.push(("status --json".into(), status.stdout + &status.stderr));
    let run = lab.run(&["run", "write-read", "--json"]);
    haystacks.push(("run --json".into(), run.stdout + &run.stderr));
    for node in ["server", "client"] {
        let log = lab.run(&["exec", node, "--", "cat /var/log/rdma-agent.log"]);
        haystacks.push((format!("{node}'s agent log"), log.stdout));
    }
    // No private key of any kind in what labctl and the agents print.
    for (what, text) in &haystacks {
        check(!text.contains("PRIVATE KEY"), || {
            format!("a private key appears in {what}")
        })?;
    }
    let mut files = Vec::new();
    collect_files(&dir, &mut files);
    collect_files(&lab.state_base.join(".results"), &mut files);
    for path in files {
        if path == key_path {
            continue;
        }
        let mut bytes = Vec::new();
        if std::fs::File::open(&path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .is_ok()
        {
            haystacks.push((path.display().to_string(), String::from_utf8_lossy(&bytes).into_owned()));
        }
    }
    for (what, text) in &haystacks {
        check(!needles.iter().any(|n| contains(text.as_bytes(), n)), || {
            format!("the lab's private key appears in {what}")
        })?;
    }
    eprintln!("private key absent from {} outputs and files", haystacks.len());
    Ok(())
}

/// Issue 15 item 11: the data segment carries the lab's RoCE frames
/// (addresses, rkeys); a local user other than the lab's owner cannot attach
/// to it, while the lab's own VMs are attached.
fn test_another_user_cannot_attach_to_the_data_segment(lab: &Labctl) -> Result<(), Failed> {
    use std::os::unix::process::CommandExt;
    let state = state(lab)?;
    let socket = state["provider_state"]["segment_socket"]
        .as_str()
        .ok_or("no provider_state.segment_socket in state.json")?;
    check(std::path::Path::new(socket).starts_with(lab.state_dir("e2e")), || {
        format!("segment {socket} is not inside the lab's directory")
    })?;
    check(
        std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)?,
        || "the suite runs as root (CI); as another user this check has no second user to try".into(),
    )?;
    let out = std::process::Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import socket, sys\n\
             s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n\
             try:\n    s.connect(sys.argv[1]); print('attached')\n\
             except OSError as e:\n    print(type(e).__name__, e.errno)",
        ])
        .arg(socket)
        .uid(65534)
        .gid(65534)
        .output()?;
    let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
    check(said == "PermissionError 13", || {
        format!(
            "nobody attaching to {socket}: {said:?} (want EACCES) {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    // The lab still works through the segment.
    let run = lab.run(&["run", "write-read", "--json"]).ok()?.json()?;
    check(run["verified"] == true, || {
        format!("write-read after the attempt: {run}")
    })
}

/// What would betray the lab's private key: its 32-byte ed25519 seed in
/// hex, and the middle of its base64 at each of the three byte alignments.
/// (The key file's base64 body as a whole is no needle: it also carries the
/// public key, which is rightly everywhere. Nor is the PEM armour: the state
/// directory rightly holds the nodes' own host keys, see `security.rs`.)
fn secret_needles(key_path: &std::path::Path, pub_path: &std::path::Path) -> Result<Vec<Vec<u8>>, Failed> {
    let key = std::fs::read_to_string(key_path)?;
    let body: String = key.lines().filter(|l| !l.starts_with("-----")).collect();
    let decoded = base64_decode(&body)?;
    let public = std::fs::read_to_string(pub_path)?;
    let blob = base64_decode(public.split_whitespace().nth(1).ok_or("no key in the .pub file")?)?;
    let pk = &blob[blob.len() - 32..];
    // openssh-key-v1 stores the private key as seed || public key: the seed
    // is the 32 bytes before the public key's last copy.
    let at = (0..=decoded.len() - 32)
        .rev()
        .find(|&i| &decoded[i..i + 32] == pk)
        .filter(|&i| i >= 32)
        .ok_or("no seed before the public key in the private key file")?;
    let seed = &decoded[at - 32..at];
    let mut needles = vec![seed.iter().map(|b| format!("{b:02x}")).collect::<String>().into_bytes()];
    for shift in 0..3 {
        let mut shifted = vec![0u8; shift];
        shifted.extend_from_slice(seed);
        let text = base64_encode(&shifted);
        needles.push(text.as_bytes()[4..text.len() - 4].to_vec());
    }
    Ok(needles)
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(BASE64[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

fn base64_decode(text: &str) -> Result<Vec<u8>, Failed> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes().filter(|&c| c != b'=') {
        let v = BASE64.iter().position(|&b| b == c).ok_or("not base64")? as u32;
        acc = acc << 6 | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn collect_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_files(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// The client VM is killed (SIGKILL to its QEMU) while a timed run is
/// moving data: the run fails well before its timeout and names the node.
fn test_node_killed_mid_run_is_named_in_time(lab: &Labctl) -> Result<(), Failed> {
    let st = state(lab)?;
    let pid = node(&st, "client")?["pid"]
        .as_u64()
        .ok_or("no pid for the client VM in state.json")?;
    let timeout_s = 120;
    let mut child = lab
        .command()
        .args(["run", "write-bw", "-D", "60", "--timeout", &timeout_s.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn labctl run: {e}"))?;
    // Let the run get going (connection setup takes a few seconds under TCG).
    std::thread::sleep(Duration::from_secs(10));
    if let Ok(Some(status)) = child.try_wait() {
        return Err(format!("the 60 s run ended early ({status}) before the VM was killed").into());
    }
    let killed = Instant::now();
    nix_kill(pid as i32)?;
    let deadline = killed + Duration::from_secs(timeout_s);
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err(format!("labctl run still running {timeout_s} s after the VM was killed").into());
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let took = killed.elapsed();
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    check(!status.success(), || {
        format!("the run succeeded without its client:\n{stderr}")
    })?;
    check(stderr.contains("client"), || {
        format!("the error does not name the node:\n{stderr}")
    })?;
    check(took < Duration::from_secs(60), || {
        format!("took {took:?} after the kill: {stderr}")
    })?;
    eprintln!("node killed: run failed {:.1}s after the kill", took.as_secs_f64());
    Ok(())
}

fn nix_kill(pid: i32) -> Result<(), Failed> {
    let out = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .output()
        .map_err(|e| format!("kill: {e}"))?;
    check(out.status.success(), || {
        format!("kill -9 {pid}: {}", String::from_utf8_lossy(&out.stderr))
    })
}

/// An agent that accepts calls and never answers (SIGSTOP), before a run and
/// in the middle of one: `status` and `run` fail within their deadlines,
/// naming the node and the call, instead of waiting forever (issue 15 item 1).
fn test_stopped_agent_fails_status_and_run_in_time(lab: &Labctl) -> Result<(), Failed> {
    let signal = |sig: &str| lab.run(&["exec", "client", "--", &format!("pkill -{sig} -x rdma-agent")]);
    let result = (|| {
        signal("STOP").ok()?;
        let started = Instant::now();
        let status = lab.run(&["status", "--json"]);
        let took = started.elapsed();
        let s = status.json()?;
        let client = node(&s, "client")?;
        let said = client["error"].as_str().unwrap_or_default().to_string();
        eprintln!("stopped agent: status failed in {:.1}s: {said}", took.as_secs_f64());
        check(
            status.code != 0 && said.contains("did not answer Health within 10 s") && took < Duration::from_secs(40),
            || {
                format!(
                    "status with a stopped agent: exit {} after {took:?}: {client}",
                    status.code
                )
            },
        )?;

        let started = Instant::now();
        // The run's own timeout bounds its wait for the agent's first answer.
        let run = lab.run(&["run", "write-read", "--timeout", "8"]);
        let took = started.elapsed();
        eprintln!("stopped agent: run failed in {:.1}s", took.as_secs_f64());
        check(
            run.code != 0
                && run
                    .stderr
                    .contains("node `client` (client): rdma-agent did not answer NodeInfo within 8 s")
                && took < Duration::from_secs(20),
            || {
                format!(
                    "run with a stopped agent: exit {} after {took:?}: {}",
                    run.code, run.stderr
                )
            },
        )?;
        signal("CONT").ok()?;

        // Stopped in the middle of a run: the server's side fails on its own
        // timeout (5 s + the 6 s duration from its start), and the run ends
        // 3 s later naming both, not at the controller's deadline (26 s).
        let mut child = lab
            .command()
            .args(["run", "write-bw", "--duration", "6", "--timeout", "5"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        std::thread::sleep(Duration::from_secs(4));
        let started = Instant::now();
        signal("STOP").ok()?;
        let mut stderr = String::new();
        child.stderr.take().ok_or("no stderr")?.read_to_string(&mut stderr)?;
        let exit = child.wait()?;
        let took = started.elapsed();
        eprintln!(
            "stopped agent mid-run: run failed {:.1}s after the stop",
            took.as_secs_f64()
        );
        check(
            !exit.success()
                && stderr.contains("node `server` (server): DeadlineExceeded")
                && stderr.contains("node `client` (client): rdma-agent had not answered Run")
                && took < Duration::from_secs(20),
            || format!("run with the agent stopped mid-run: {exit:?} after {took:?}: {stderr}"),
        )
    })();
    // Whatever happened, the agent runs again for the tests after this one.
    let _ = signal("CONT");
    result?;
    let healthy = lab.run(&["status"]);
    check(healthy.code == 0, || {
        format!("after SIGCONT: {}{}", healthy.stdout, healthy.stderr)
    })
}
