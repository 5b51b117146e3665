//! The C verbs example users copy (`examples/verbs-rc-exchange`): built on
//! the host with its own Makefile, copied to every node with `labctl cp`, run
//! as a server and client pair with `labctl exec` and the lab facts'
//! placeholders. The server must verify every byte the client wrote, and a
//! client given a wrong server address must fail fast with one clear line.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use libtest_mimic::{Failed, Trial};

use crate::util::{bin_dir, check, repo, Labctl};

pub fn trials(lab: &Labctl) -> Vec<Trial> {
    let t = |name: &str, f: fn(&Labctl) -> Result<(), Failed>| {
        let lab = lab.clone();
        crate::timing::trial(name, move || f(&lab))
    };
    vec![
        t(
            "test_verbs_example_rc_exchange_server_verifies_the_client_writes",
            test_verbs_example_rc_exchange_server_verifies_the_client_writes,
        ),
        t(
            "test_verbs_example_rc_exchange_wrong_server_address_fails_fast",
            test_verbs_example_rc_exchange_wrong_server_address_fails_fast,
        ),
    ]
}

/// The options both sides share: the node's own device, port and GID index.
const COMMON: &str = "-d {self.dev} -i {self.port} -g {self.gid_index}";

/// Builds the example with its Makefile in a copy of its directory under
/// `into` (as a user who copied it would), warnings refused; returns the
/// binary. It takes a second or two.
pub fn build_rc_exchange(into: &str) -> Result<PathBuf, Failed> {
    let src = repo().join("examples/verbs-rc-exchange");
    let dir: PathBuf = bin_dir().join(into);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    for file in ["rc_exchange.c", "Makefile"] {
        std::fs::copy(src.join(file), dir.join(file)).map_err(|e| format!("copy {file}: {e}"))?;
    }
    let make = std::process::Command::new("make")
        .current_dir(&dir)
        .output()
        .map_err(|e| format!("make: {e} (tests/install-test-deps.sh installs gcc, make and libibverbs-dev)"))?;
    let stderr = String::from_utf8_lossy(&make.stderr);
    check(make.status.success() && stderr.trim().is_empty(), || {
        format!("make failed or warned ({:?}):\n{stderr}", make.status)
    })?;
    Ok(dir.join("rc_exchange"))
}

/// Builds the example and copies the binary to every node's /usr/local/bin.
fn build_and_copy(lab: &Labctl) -> Result<(), Failed> {
    let bin = build_rc_exchange("verbs-rc-exchange")?;
    let bin = bin.to_str().ok_or("non-UTF-8 build path")?;
    lab.run(&["cp", bin, "@all:/usr/local/bin/rc_exchange"]).ok()?;
    Ok(())
}

fn test_verbs_example_rc_exchange_server_verifies_the_client_writes(lab: &Labctl) -> Result<(), Failed> {
    build_and_copy(lab)?;
    let (size, iters) = (8192u64, 32u64);
    let args = format!("{COMMON} -s {size} -n {iters}");
    let mut server = lab
        .command()
        .args(["exec", "server", "--", &format!("timeout 120 rc_exchange {args}")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    // Every line the server prints, as it prints it: the client starts once
    // the server says it listens.
    let (tx, rx) = mpsc::channel();
    let stdout = server.stdout.take().ok_or("server stdout")?;
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut server_out = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !server_out.contains("rc_exchange: listening on port 18600") {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => server_out += &(line + "\n"),
            Err(_) => {
                let _ = server.kill();
                let out = server.wait_with_output()?;
                return Err(format!(
                    "the server never said it listens:\n{server_out}{}",
                    String::from_utf8_lossy(&out.stderr)
                )
                .into());
            }
        }
    }
    let client = lab.run(&[
        "exec",
        "client",
        "--",
        &format!("timeout 120 rc_exchange {args} {{server.addr}}"),
    ]);
    if client.code != 0 {
        // The server would wait for a client until its `timeout` ends.
        let _ = server.kill();
    }
    let server = server.wait_with_output()?;
    let _ = reader.join();
    server_out.extend(rx.try_iter().map(|line| line + "\n"));
    let server_err = String::from_utf8_lossy(&server.stderr);
    check(client.code == 0 && server.status.success(), || {
        format!(
            "rc_exchange failed: client exit {}\n{}{}\nserver {:?}\n{server_out}{server_err}",
            client.code, client.stdout, client.stderr, server.status
        )
    })?;
    let bytes = size * iters;
    check(
        server_out.contains(&format!("rc_exchange: verified {bytes} bytes in {iters} iterations")),
        || format!("the server did not verify {bytes} bytes:\n{server_out}"),
    )?;
    check(
        client
            .stdout
            .contains(&format!("rc_exchange: wrote {bytes} bytes in {iters} iterations")),
        || format!("the client did not write {bytes} bytes:\n{}", client.stdout),
    )?;
    // Each side printed its transitions and the peer's RoCE v2 GID, the
    // other node's data address as an IPv4-mapped IPv6 address.
    for (side, out, peer) in [("server", &server_out, "client"), ("client", &client.stdout, "server")] {
        check(out.contains(" INIT -> RTR -> RTS (path MTU 1024)"), || {
            format!("{side} did not report its QP transitions:\n{out}")
        })?;
        let addr = lab.run(&["exec", peer, "--", "echo {self.addr}"]).ok()?;
        let gid = format!("GID ::ffff:{}", addr.stdout.trim());
        check(
            out.lines().any(|l| l.contains("remote QPN") && l.contains(&gid)),
            || format!("{side} did not see the {peer}'s {gid}:\n{out}"),
        )?;
    }
    Ok(())
}

fn test_verbs_example_rc_exchange_wrong_server_address_fails_fast(lab: &Labctl) -> Result<(), Failed> {
    build_and_copy(lab)?;
    // .250 of the data network: no node has it, so ARP goes unanswered.
    let started = Instant::now();
    let run = lab.run(&[
        "exec",
        "client",
        "--",
        &format!("a={{server.addr}}; timeout 60 rc_exchange {COMMON} \"${{a%.*}}.250\""),
    ]);
    let took = started.elapsed();
    check(run.code == 1, || {
        format!("exit {} (want 1)\n{}{}", run.code, run.stdout, run.stderr)
    })?;
    let line = run
        .stderr
        .lines()
        .find(|l| l.starts_with("rc_exchange: "))
        .unwrap_or_default();
    check(
        line.starts_with("rc_exchange: connect to ")
            && line.contains(".250:18600: ")
            && (line.ends_with("No route to host") || line.ends_with("no answer within 5 s")),
        || format!("not one clear line naming the connect:\n{}", run.stderr),
    )?;
    check(took < Duration::from_secs(15), || {
        format!("a wrong address took {took:?} to fail (want a few seconds)")
    })
}
