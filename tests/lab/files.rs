//! Bringing one's own files and commands into the lab: `labctl cp` to and
//! from nodes (checked by sha256, modes kept, nothing partial left behind on
//! failure) and `labctl exec` on several nodes at once.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use libtest_mimic::{Failed, Trial};

use crate::util::{check, Labctl};

pub fn trials(lab: &Labctl) -> Vec<Trial> {
    let t = |name: &str, f: fn(&Labctl) -> Result<(), Failed>| {
        let lab = lab.clone();
        crate::timing::trial(name, move || f(&lab))
    };
    vec![
        t(
            "test_cp_of_50_mib_to_every_node_and_back_keeps_bytes_and_mode",
            test_cp_of_50_mib_to_every_node_and_back_keeps_bytes_and_mode,
        ),
        t(
            "test_cp_directory_recursively_both_ways",
            test_cp_directory_recursively_both_ways,
        ),
        t(
            "test_cp_bad_input_and_failures_leave_nothing_partial",
            test_cp_bad_input_and_failures_leave_nothing_partial,
        ),
        t(
            "test_exec_on_every_node_prefixes_lines_and_aggregates_status",
            test_exec_on_every_node_prefixes_lines_and_aggregates_status,
        ),
        t(
            "test_exec_passes_several_words_as_argv_intact",
            test_exec_passes_several_words_as_argv_intact,
        ),
        t(
            "test_exec_fills_placeholders_per_node_and_refuses_unknown_ones",
            test_exec_fills_placeholders_per_node_and_refuses_unknown_ones,
        ),
    ]
}

/// A fresh local scratch directory for one test.
fn scratch(name: &str) -> Result<PathBuf, Failed> {
    let dir = std::env::temp_dir().join(format!("labctl-files-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

fn sha256_of(path: &Path) -> Result<String, Failed> {
    let out = std::process::Command::new("sha256sum")
        .arg(path)
        .output()
        .map_err(|e| format!("sha256sum: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text.split_whitespace().next().unwrap_or_default().to_string())
}

fn mode_of(path: &Path) -> Result<u32, Failed> {
    Ok(std::fs::metadata(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .permissions()
        .mode()
        & 0o7777)
}

/// Per node: what `exec --all --json` printed on stdout.
fn stdout_per_node(json: &serde_json::Value) -> Vec<(String, String)> {
    json["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            (
                n["node"].as_str().unwrap_or_default().to_string(),
                n["stdout"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn test_cp_of_50_mib_to_every_node_and_back_keeps_bytes_and_mode(lab: &Labctl) -> Result<(), Failed> {
    let dir = scratch("50mib")?;
    let payload = dir.join("payload.bin");
    // Random bytes from the kernel, so no pattern can hide a misplaced chunk.
    let mut bytes = vec![0u8; 50 << 20];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .map_err(|e| format!("/dev/urandom: {e}"))?;
    std::fs::write(&payload, &bytes).map_err(|e| format!("{}: {e}", payload.display()))?;
    std::fs::set_permissions(&payload, std::fs::Permissions::from_mode(0o750))?;
    let want = sha256_of(&payload)?;

    let sent = lab
        .run(&["cp", "--json", payload.to_str().unwrap(), "@all:/root/payload.bin"])
        .ok()?;
    let report = sent.json()?;
    let files = report["files"].as_array().ok_or("no files in cp --json")?;
    check(
        files.len() == 2
            && files
                .iter()
                .all(|f| f["sha256"] == want.as_str() && f["bytes"] == 50 << 20),
        || format!("cp --json to @all: {report}"),
    )?;
    // What the nodes themselves say they hold.
    let on_nodes = lab
        .run(&[
            "exec",
            "--all",
            "--json",
            "--",
            "sha256sum /root/payload.bin; stat -c %a /root/payload.bin",
        ])
        .ok()?
        .json()?;
    for (node, out) in stdout_per_node(&on_nodes) {
        check(out.starts_with(&want) && out.trim_end().ends_with("750"), || {
            format!("{node} holds {out:?}, sent {want} mode 750")
        })?;
    }

    let back = dir.join("back");
    std::fs::create_dir_all(&back)?;
    lab.run(&["cp", "-q", "@all:/root/payload.bin", back.to_str().unwrap()])
        .ok()?;
    for node in ["server", "client"] {
        let copy = back.join(node).join("payload.bin");
        let (got, mode) = (sha256_of(&copy)?, mode_of(&copy)?);
        check(got == want && mode == 0o750, || {
            format!("{}: sha256 {got} mode {mode:o}, want {want} 750", copy.display())
        })?;
    }
    lab.run(&["exec", "--all", "--", "rm -f /root/payload.bin"]).ok()?;
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

fn test_cp_directory_recursively_both_ways(lab: &Labctl) -> Result<(), Failed> {
    let dir = scratch("tree")?;
    let tree = dir.join("tree");
    std::fs::create_dir_all(tree.join("bin"))?;
    std::fs::write(tree.join("bin/run me"), b"#!/bin/sh\necho ran\n")?;
    std::fs::set_permissions(tree.join("bin/run me"), std::fs::Permissions::from_mode(0o755))?;
    std::fs::write(tree.join("config"), b"key=value\n")?;
    std::fs::set_permissions(tree.join("config"), std::fs::Permissions::from_mode(0o600))?;
    std::fs::set_permissions(tree.join("bin"), std::fs::Permissions::from_mode(0o750))?;

    lab.run(&["exec", "server", "--", "rm -rf /root/app"]).ok()?;
    let plain = lab.run(&["cp", tree.to_str().unwrap(), "server:/root/app"]);
    check(plain.code == 2 && plain.stderr.contains("add -r"), || {
        format!("a directory without -r: exit {}: {}", plain.code, plain.stderr)
    })?;
    lab.run(&["cp", "-r", tree.to_str().unwrap(), "server:/root/app"])
        .ok()?;
    let ran = lab.run(&["exec", "server", "--", "/root/app/bin/run\\ me"]).ok()?;
    check(ran.stdout.trim() == "ran", || {
        format!("the copied script: {}", ran.stdout)
    })?;
    let modes = lab
        .run(&[
            "exec",
            "server",
            "--",
            "cd /root/app && stat -c '%a %n' bin 'bin/run me' config",
        ])
        .ok()?;
    check(modes.stdout == "750 bin\n755 bin/run me\n600 config\n", || {
        format!("modes on the node: {:?}", modes.stdout)
    })?;

    let back = dir.join("back");
    lab.run(&["cp", "-r", "-q", "server:/root/app", back.to_str().unwrap()])
        .ok()?;
    for (rel, mode) in [("bin", 0o750), ("bin/run me", 0o755), ("config", 0o600)] {
        let got = mode_of(&back.join(rel))?;
        check(got == mode, || format!("{rel}: mode {got:o}, want {mode:o}"))?;
    }
    let config = std::fs::read(back.join("config"))?;
    check(config == b"key=value\n", || format!("config came back as {config:?}"))?;
    lab.run(&["exec", "server", "--", "rm -rf /root/app"]).ok()?;
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

fn test_cp_bad_input_and_failures_leave_nothing_partial(lab: &Labctl) -> Result<(), Failed> {
    let dir = scratch("bad")?;
    let file = dir.join("four-mib");
    std::fs::write(&file, vec![7u8; 4 << 20])?;
    let file = file.to_str().unwrap();
    let one_line = |text: &str| text.trim().lines().count() == 1;

    for (args, code, needle) in [
        (
            vec!["cp", file, "nosuch:/root/"],
            2,
            "has no node `nosuch`; its nodes are: server, client",
        ),
        (
            vec!["cp", "/nonexistent/file", "server:/root/"],
            2,
            "/nonexistent/file: No such file",
        ),
        (
            vec!["cp", "server:/etc/hostname", "client:/root/"],
            2,
            "go through this machine",
        ),
        (
            vec!["cp", file, "server:/nonexistent/dir/x"],
            1,
            "/nonexistent/dir: no such directory",
        ),
        (
            vec!["cp", "server:/nonexistent", dir.to_str().unwrap()],
            1,
            "/nonexistent: no such file or directory",
        ),
        // Never a rename over a device.
        (
            vec!["cp", file, "server:/dev/null"],
            1,
            "/dev/null: not a regular file or directory",
        ),
    ] {
        let run = lab.run(&args);
        check(
            run.code == code && run.stderr.contains(needle) && one_line(&run.stderr),
            || format!("{args:?}: exit {} (want {code}), stderr:\n{}", run.code, run.stderr),
        )?;
    }

    let null = lab.run(&["exec", "server", "--", "test -c /dev/null"]);
    check(null.code == 0, || "/dev/null is no longer a device on the node".into())?;

    // A node whose disk is full: the copy fails with the node's words and
    // leaves neither the destination nor its temporary file behind.
    lab.run(&[
        "exec",
        "server",
        "--",
        "mkdir -p /root/tiny && mount -t tmpfs -o size=1m tmpfs /root/tiny",
    ])
    .ok()?;
    let full = lab.run(&["cp", file, "server:/root/tiny/four-mib"]);
    let left = lab.run(&[
        "exec",
        "server",
        "--",
        "ls -A /root/tiny; umount /root/tiny; rmdir /root/tiny",
    ]);
    check(
        full.code == 1 && full.stderr.contains("No space left on device") && one_line(&full.stderr),
        || format!("full disk: exit {}: {}", full.code, full.stderr),
    )?;
    check(left.code == 0 && left.stdout.trim().is_empty(), || {
        format!("a failed copy left {:?} on the node", left.stdout)
    })?;
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

fn test_exec_on_every_node_prefixes_lines_and_aggregates_status(lab: &Labctl) -> Result<(), Failed> {
    // The client fails, the server succeeds: both outputs show, the exit
    // status is the client's.
    let run = lab.run(&[
        "exec",
        "--all",
        "--",
        "echo first-$(hostname); echo second-$(hostname); echo warn-$(hostname) >&2; [ $(hostname) = server ] || exit 4",
    ]);
    for node in ["server", "client"] {
        for line in [format!("{node} | first-{node}"), format!("{node} | second-{node}")] {
            check(run.stdout.lines().any(|l| l == line), || {
                format!("no line {line:?} in:\n{}", run.stdout)
            })?;
        }
        check(run.stderr.contains(&format!("{node} | warn-{node}")), || {
            format!("stderr of {node} missing:\n{}", run.stderr)
        })?;
    }
    check(run.code == 4, || format!("exit {} (want the client's 4)", run.code))?;

    let json = lab
        .run(&[
            "exec",
            "--nodes",
            "client,server",
            "--json",
            "--",
            "echo $(hostname); exit 0",
        ])
        .ok()?
        .json()?;
    let nodes = json["nodes"].as_array().ok_or("no nodes in exec --json")?;
    check(
        nodes.len() == 2
            && nodes.iter().all(|n| {
                n["status"] == 0
                    && n["stdout"].as_str() == Some(&format!("{}\n", n["node"].as_str().unwrap_or("?")))
                    && n["seconds"].as_f64().is_some_and(|s| s > 0.0)
            }),
        || format!("exec --json: {json}"),
    )?;
    let unknown = lab.run(&["exec", "--nodes", "server,nosuch", "--", "touch /root/should-not-exist"]);
    let created = lab.run(&["exec", "server", "--", "test -e /root/should-not-exist"]);
    check(
        unknown.code == 2 && unknown.stderr.contains("nosuch") && created.code == 1,
        || format!("unknown node: exit {}: {}", unknown.code, unknown.stderr),
    )
}

fn test_exec_passes_several_words_as_argv_intact(lab: &Labctl) -> Result<(), Failed> {
    let run = lab.run(&["exec", "server", "--", "sh", "-c", "echo a; echo b"]).ok()?;
    check(run.stdout == "a\nb\n", || {
        format!("sh -c 'echo a; echo b' gave {:?}", run.stdout)
    })?;
    let run = lab
        .run(&["exec", "server", "--", "printf", "%s|", "two words", "$HOME", "*"])
        .ok()?;
    check(run.stdout == "two words|$HOME|*|", || {
        format!("argv was not passed intact: {:?}", run.stdout)
    })?;
    // One word stays a shell line.
    let run = lab.run(&["exec", "server", "--", "echo $((6 * 7)) | tr 4 x"]).ok()?;
    check(run.stdout == "x2\n", || format!("shell line gave {:?}", run.stdout))
}

fn test_exec_fills_placeholders_per_node_and_refuses_unknown_ones(lab: &Labctl) -> Result<(), Failed> {
    // Each node's placeholders against what its own lab.env says.
    let json = lab
        .run(&[
            "exec",
            "--all",
            "--json",
            "--",
            ". /etc/labctl/lab.env; echo {self.name} {self.addr} {self.dev} {self.gid_index} {server.addr} {nodes}; \
             echo $LABCTL_NODE $LABCTL_ADDR $LABCTL_DEV $LABCTL_GID_INDEX $LABCTL_ADDR_SERVER $LABCTL_NODES",
        ])
        .ok()?
        .json()?;
    for (node, out) in stdout_per_node(&json) {
        let lines: Vec<&str> = out.lines().collect();
        check(
            lines.len() == 2 && lines[0] == lines[1] && lines[0].starts_with(&format!("{node} 10.77.0.")),
            || format!("{node}: placeholders and lab.env disagree: {out:?}"),
        )?;
    }
    // The shell's own braces are left alone.
    let shell = lab
        .run(&["exec", "server", "--", "echo x y | awk '{print $2}'; echo ${HOME}"])
        .ok()?;
    check(shell.stdout == "y\n/root\n", || {
        format!("shell braces: {:?}", shell.stdout)
    })?;
    // An unknown node or field stops everything before it runs.
    for (template, needle) in [
        (
            "touch /root/ran-{serverr.addr}",
            "no node `serverr`; its nodes are: server, client",
        ),
        (
            "touch /root/ran-{self.address}",
            "no field `address`; node fields are: addr, dev",
        ),
    ] {
        let run = lab.run(&["exec", "--all", "--", template]);
        check(run.code == 2 && run.stderr.contains(needle), || {
            format!("{template}: exit {}: {}", run.code, run.stderr)
        })?;
    }
    let ran = lab
        .run(&["exec", "--all", "--", "ls /root/ran-* 2>/dev/null | wc -l"])
        .ok()?;
    check(ran.stdout.lines().all(|l| l.ends_with("| 0")), || {
        format!("a refused template ran: {}", ran.stdout)
    })?;
    // The tutorial's ping-pong, addressed through placeholders alone.
    let pingpong = "timeout 60 ibv_rc_pingpong -d {self.dev} -i {self.port} -g {self.gid_index} -n 50 -s 1024";
    // 50 round trips of 1 KiB, counted both ways.
    crate::util::rc_pingpong(lab, pingpong, &format!("{pingpong} {{server.addr}}"), 102_400)?;
    Ok(())
}
