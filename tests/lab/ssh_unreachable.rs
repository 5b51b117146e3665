//! `down` of a provider ssh lab while one host cannot be reached, without
//! touching the suite's VMs: the lab's client node is a TCP relay this test
//! runs on 127.0.0.1, forwarding to the client VM's forwarded SSH port (its
//! pinned host key is the VM's: the same host). `up` through the relay;
//! the relay stops; `down` reports the host, lists what it left there and
//! keeps the node in the lab's state (the server is released); the relay
//! starts again on the same port; `down` removes everything: no per-lab
//! directory, agent, host lock or hosts line on either VM.
//!
//! And `up` of a lab whose client is a host that accepts the TCP connection
//! and never says a word (a listener this test runs): the preflight gives
//! up on it after its per-host timeout, naming node, host:port and how far
//! it got, and nothing is left on the server VM or in the lab's state.

use std::io::ErrorKind;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use libtest_mimic::Failed;
use serde_json::Value;

use crate::ssh_existing::ssh_labs_file_with;
use crate::util::{bin_dir, check, e2e_server_and_client, Labctl};

/// A TCP relay from 127.0.0.1:`port` to 127.0.0.1:`to`; stopping it closes
/// its listener and every relayed connection.
struct Relay {
    port: u16,
    to: u16,
    stop: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<TcpStream>>>,
    accept: Option<JoinHandle<()>>,
}

impl Relay {
    fn start(port: u16, to: u16) -> Result<Relay, Failed> {
        let listener = TcpListener::bind(("127.0.0.1", port))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let streams: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (stop_flag, open) = (stop.clone(), streams.clone());
        let accept = std::thread::spawn(move || {
            while !stop_flag.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((inbound, _)) => {
                        let _ = inbound.set_nonblocking(false);
                        if let Ok(outbound) = TcpStream::connect(("127.0.0.1", to)) {
                            let _ = relay_both_ways(inbound, outbound, &open);
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(20)),
                    Err(_) => break,
                }
            }
        });
        Ok(Relay {
            port,
            to,
            stop,
            streams,
            accept: Some(accept),
        })
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        for stream in self.streams.lock().expect("relay streams").drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

/// Copies `a` to `b` and `b` to `a` on threads of their own; both streams
/// are kept in `open` so stopping the relay can cut them.
fn relay_both_ways(a: TcpStream, b: TcpStream, open: &Mutex<Vec<TcpStream>>) -> std::io::Result<()> {
    open.lock()
        .expect("relay streams")
        .extend([a.try_clone()?, b.try_clone()?]);
    for (mut from, mut into) in [(a.try_clone()?, b.try_clone()?), (b, a)] {
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut into);
            let _ = into.shutdown(Shutdown::Write);
        });
    }
    Ok(())
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop();
    }
}

pub(crate) fn test_ssh_lab_down_of_an_unreachable_host_lists_it_and_a_later_down_cleans_up(
    qemu: &Labctl,
) -> Result<(), Failed> {
    let dir = bin_dir().join("lab-tests-ssh-unreachable");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let (_, client) = e2e_server_and_client(qemu)?;
    let client_port = client["ssh_port"].as_u64().ok_or("client: no ssh_port")? as u16;
    let mut relay = Relay::start(0, client_port)?;
    let relay_port = relay.port.to_string();
    let file = ssh_labs_file_with(qemu, "sshu", &dir, move |n| match n {
        "client" => vec![("port", relay_port.clone())],
        _ => Vec::new(),
    })?;
    let lab = Labctl {
        file,
        state_base: dir.join("state"),
    };
    let result = unreachable_then_back(qemu, &lab, &mut relay);
    // Whatever failed, the hosts are given back (through a running relay).
    if relay.accept.is_none() {
        relay = Relay::start(relay.port, relay.to)?;
    }
    if lab.state_dir("sshu").exists() {
        lab.run(&["down"]);
    }
    drop(relay);
    result?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn unreachable_then_back(qemu: &Labctl, lab: &Labctl, relay: &mut Relay) -> Result<(), Failed> {
    lab.run(&["up"]).ok()?;
    let dir_of_client = lab_dir_on(lab, "client")?;
    relay.stop();
    let down = lab.run(&["down"]);
    eprintln!(
        "--- down while the client is unreachable (exit {}):\n{}",
        down.code, down.stderr
    );
    check(down.code != 0, || {
        "down succeeded while the client host was unreachable".into()
    })?;
    // Named once: the SSH error inside does not repeat it.
    check(down.stderr.matches("node `client`:").count() == 1, || {
        format!("the node is named more than once:\n{}", down.stderr)
    })?;
    for wanted in [
        "node `client`",
        "left on the host:",
        dir_of_client.as_str(),
        "the host lock /run/labctl/host.lock",
        "run `labctl down` again once the host answers",
    ] {
        check(down.stderr.contains(wanted), || {
            format!("down of an unreachable host: `{wanted}` missing in:\n{}", down.stderr)
        })?;
    }
    // The state keeps exactly the node whose host still holds the lab's things.
    let state: Value = serde_json::from_str(&std::fs::read_to_string(lab.state_dir("sshu").join("state.json"))?)?;
    let kept: Vec<&str> = state["nodes"]
        .as_array()
        .map(|n| n.iter().filter_map(|n| n["name"].as_str()).collect())
        .unwrap_or_default();
    check(kept == ["client"], || format!("nodes kept in the state: {kept:?}"))?;
    let server_left = leftovers_on(qemu, "sshu", "server")?;
    check(server_left.is_empty(), || {
        format!("the reachable server was not released:\n{server_left}")
    })?;
    let held = leftovers_on(qemu, "sshu", "client")?;
    check(
        held.contains(&dir_of_client) && held.contains("lab=sshu") && held.contains("rdma-agent"),
        || format!("the unreachable client should still hold the lab's directory, lock and agent:\n{held}"),
    )?;

    // The host answers again on the same address: down removes everything.
    *relay = Relay::start(relay.port, relay.to)?;
    let again = lab.run(&["down"]);
    eprintln!(
        "--- down once the client answers again (exit {}):\n{}{}",
        again.code, again.stdout, again.stderr
    );
    check(again.code == 0, || {
        format!("down after the host came back: {}", again.stderr)
    })?;
    check(!lab.state_dir("sshu").exists(), || "the lab's state stayed".into())?;
    for node in ["server", "client"] {
        let left = leftovers_on(qemu, "sshu", node)?;
        check(left.is_empty(), || format!("{node}: the lab left\n{left}"))?;
    }
    Ok(())
}

/// The lab's directory on `node`'s host, from its state.
fn lab_dir_on(lab: &Labctl, node: &str) -> Result<String, Failed> {
    let state: Value = serde_json::from_str(&std::fs::read_to_string(lab.state_dir("sshu").join("state.json"))?)?;
    state["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["name"] == node))
        .and_then(|n| n["host"]["dir"].as_str())
        .map(str::to_string)
        .ok_or_else(|| format!("{node}: no host dir in the state").into())
}

/// What the ssh lab `name` has on `node` (through the QEMU lab's own
/// access): its directories, host lock, agent processes and hosts lines
/// (its own only: other ssh-lab tests may hold the hosts meanwhile).
fn leftovers_on(qemu: &Labctl, name: &str, node: &str) -> Result<String, Failed> {
    // Nothing in this command line may match `labctl/NAME-`, or pgrep
    // finds its own shell: `[s]shu` for `sshu`, and the directory by grep.
    let (first, rest) = name.split_at(1);
    let listing = format!(
        "ls -d /var/lib/labctl/* 2>/dev/null | grep -F '/{name}-'; grep -s 'lab={name} ' /run/labctl/host.lock; \
         pgrep -af 'labctl/[{first}]{rest}-'; grep 'labctl:{name}' /etc/hosts; true"
    );
    let out = qemu.run(&["exec", node, "--", &listing]).ok()?;
    Ok(out.stdout.trim().to_string())
}

/// A listener on 127.0.0.1 that accepts connections and never writes (an
/// SSH banner never comes); dropping it stops accepting and closes them.
struct Silent {
    port: u16,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Silent {
    fn start() -> Result<Silent, Failed> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let accept = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !flag.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => held.push(stream),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(20)),
                    Err(_) => break,
                }
            }
        });
        Ok(Silent {
            port,
            stop,
            accept: Some(accept),
        })
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

pub(crate) fn test_ssh_lab_up_of_an_unreachable_host_that_never_answers_times_out_naming_it(
    qemu: &Labctl,
) -> Result<(), Failed> {
    let dir = bin_dir().join("lab-tests-ssh-silent");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let silent = Silent::start()?;
    let port = silent.port.to_string();
    let file = ssh_labs_file_with(qemu, "sshs", &dir, move |n| match n {
        "client" => vec![("port", port.clone())],
        _ => Vec::new(),
    })?;
    let lab = Labctl {
        file,
        state_base: dir.join("state"),
    };
    let started = std::time::Instant::now();
    let up = lab.run(&["up"]);
    let took = started.elapsed();
    eprintln!(
        "--- up with a silent client host (exit {}, {took:.1?}):\n{}",
        up.code, up.stderr
    );
    let result = silent_host_refused(qemu, &lab, &up, took, silent.port);
    drop(silent);
    if lab.state_dir("sshs").exists() {
        lab.run(&["down"]);
    }
    result?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn silent_host_refused(
    qemu: &Labctl,
    lab: &Labctl,
    up: &crate::util::Run,
    took: Duration,
    port: u16,
) -> Result<(), Failed> {
    check(up.code != 0, || {
        format!("up succeeded with a silent host:\n{}", up.stderr)
    })?;
    // The preflight's per-host timeout is 15 s; `up` ends soon after it.
    check(took < Duration::from_secs(40), || format!("up took {took:?}"))?;
    for wanted in [
        "node `client`".to_string(),
        format!("SSH to 127.0.0.1:{port} timed out after 15 s"),
        "no SSH banner came".to_string(),
        "fix: check the node's host and port".to_string(),
    ] {
        check(up.stderr.contains(&wanted), || {
            format!("up with a silent host: `{wanted}` missing in:\n{}", up.stderr)
        })?;
    }
    // Nothing of the lab anywhere: no state here, nothing on either VM.
    let state_dir = lab.state_dir("sshs");
    let entries = std::fs::read_dir(&state_dir).map(|d| d.count()).unwrap_or(0);
    check(entries == 0, || {
        format!("{} holds {entries} entries", state_dir.display())
    })?;
    for node in ["server", "client"] {
        let left = leftovers_on(qemu, "sshs", node)?;
        check(left.is_empty(), || format!("{node}: the refused lab left\n{left}"))?;
    }
    Ok(())
}
