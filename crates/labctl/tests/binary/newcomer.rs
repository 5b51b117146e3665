//! What a newcomer meets before any lab exists: `labctl init`, and labctl
//! run in a directory without labs.yaml (the built-in labs, their state in
//! the user's state directory). These run the built binary in scratch
//! directories; nothing here boots a VM (`status` of a lab that is not up
//! only reads its state).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("labctl-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// labctl in `dir`, with HOME and the XDG state directory inside `dir` and
/// none of the caller's LABCTL_* settings.
fn labctl(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_labctl"))
        .args(args)
        .current_dir(dir)
        .env("HOME", dir.join("home"))
        .env("XDG_STATE_HOME", dir.join("state"))
        .env_remove("LABCTL_FILE")
        .env_remove("LABCTL_LAB")
        .env_remove("LABCTL_STATE_DIR")
        .output()
        .expect("run labctl")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn test_without_labs_yaml_the_builtin_lab_is_used_and_its_state_goes_to_the_state_dir() {
    let scratch = Scratch::new("builtin");
    let out = labctl(&scratch.0, &["status", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("using the built-in lab `local`"), "{stderr}");
    assert!(stderr.contains("labctl init"), "{stderr}");
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["lab"], "local");
    let state_dir = scratch.0.join("state/labctl/local");
    assert_eq!(status["state_dir"].as_str(), Some(state_dir.to_str().unwrap()));
    // Nothing was written into the directory labctl was run from.
    let left: Vec<_> = std::fs::read_dir(&scratch.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "home" && n != "state")
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // --lab picks another built-in lab; an unknown one lists them.
    let quad = labctl(&scratch.0, &["--lab", "quad", "status", "--json"]);
    let quad: serde_json::Value = serde_json::from_slice(&quad.stdout).unwrap();
    assert_eq!(quad["lab"], "quad");
    let bad = labctl(&scratch.0, &["--lab", "nope", "status"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("local"), "{}", text(&bad.stderr));
}

#[test]
fn test_init_writes_a_labs_yaml_that_labctl_then_reads_and_refuses_to_overwrite_it() {
    let scratch = Scratch::new("init");
    let out = labctl(&scratch.0, &["init"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("wrote labs.yaml"), "{}", text(&out.stdout));
    let written = std::fs::read_to_string(scratch.0.join("labs.yaml")).unwrap();
    assert!(written.contains("# The default lab: two VMs"), "{written}");

    // Now ./labs.yaml is read: no built-in note, state beside the file.
    let status = labctl(&scratch.0, &["status", "--json"]);
    assert!(status.status.success(), "{}", text(&status.stderr));
    assert!(!text(&status.stderr).contains("built-in"), "{}", text(&status.stderr));
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let beside = scratch.0.join(".labctl/local");
    assert_eq!(json["state_dir"].as_str(), Some(beside.to_str().unwrap()));

    // A second init refuses (bad input: exit 2) and leaves the file alone.
    std::fs::write(
        scratch.0.join("labs.yaml"),
        "labs:\n  - name: mine\n    nodes:\n      - name: a\n",
    )
    .unwrap();
    let again = labctl(&scratch.0, &["init"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        text(&again.stderr).contains("already exists"),
        "{}",
        text(&again.stderr)
    );
    assert!(std::fs::read_to_string(scratch.0.join("labs.yaml"))
        .unwrap()
        .contains("mine"));
    // --force replaces it; -f writes elsewhere.
    assert!(labctl(&scratch.0, &["init", "--force"]).status.success());
    assert_eq!(std::fs::read_to_string(scratch.0.join("labs.yaml")).unwrap(), written);
    assert!(labctl(&scratch.0, &["-f", "other.yaml", "init"]).status.success());
    assert!(scratch.0.join("other.yaml").exists());
    assert!(!scratch.0.join("labs.yaml.labctl-init").exists());
}

#[test]
fn test_a_flag_of_another_workload_is_bad_input_before_anything_runs() {
    // The built-in lab is not up; the request is refused before labctl
    // looks for it.
    let scratch = Scratch::new("badflag");
    for (args, says) in [
        (
            &["run", "write-read", "--provider", "efa"][..],
            "--provider applies to fabric-write, fabric-bw, fabric-lat, allreduce, allgather, reduce-scatter, reduce, alltoall, broadcast, incast, not to write-read (verbs workload)",
        ),
        (
            &["run", "fabric-bw", "--total", "1MiB"][..],
            "--total applies to bulk-rdma, bulk-tcp, not to fabric-bw (libfabric workload)",
        ),
        (
            &["run", "bulk-tcp", "--cm", "oob"][..],
            "--cm oob applies to write-read,",
        ),
        (
            &["run", "write-read", "--ping-pong"][..],
            "--ping-pong applies to send-recv, not to write-read",
        ),
    ] {
        let out = labctl(&scratch.0, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains(says), "{args:?}: {}", text(&out.stderr));
    }
}
