//! `labctl down --leaked` against moto, as a user runs it (issue 15 item 3):
//! two aws labs brought up from two directories (their `up` fails at the SSH
//! wait, moto's instances never answer, and `--keep-on-failure` keeps them);
//! run from the first directory, `--leaked` lists neither; once the second
//! lab's state directory is removed by hand it lists exactly that lab's
//! resources, and `--yes` deletes those and nothing of the first lab. A
//! resource without a lab id (an older labctl's) is listed but deleted only
//! when named with `--delete-id-less`.
//! One test, because it sets process-wide environment variables.

#[path = "../../lab-providers/tests/aws/common.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{aws_environment_for, some_linux_ami, tagged, temp_dir, write_aws_lab, Moto};
use lab_core::lab::{Lab, UpOptions};
use lab_state::progress::Silent;

fn write_lab(dir: &Path, name: &str, ami: &str) -> PathBuf {
    write_aws_lab(&dir.join("labs.yaml"), name, ami)
}

/// `labctl -f LABS down --leaked [--yes]`: (exit code, stdout, stderr).
fn down_leaked(labs: &Path, yes: bool) -> (i32, String, String) {
    down_leaked_with(labs, yes, &[])
}

/// [`down_leaked`] with more arguments.
fn down_leaked_with(labs: &Path, yes: bool, more: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_labctl"));
    cmd.arg("-f").arg(labs).args(["down", "--leaked"]).args(more);
    if yes {
        cmd.arg("--yes");
    }
    let out = cmd.current_dir(labs.parent().unwrap()).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn test_down_leaked_lists_and_deletes_only_the_lab_whose_state_is_gone() {
    let moto = Moto::start();
    let base = temp_dir("leaked");
    // The list of live labs stays under `base` (XDG_STATE_HOME).
    aws_environment_for(&moto, &base);
    let client = moto.client("us-east-1");
    let ami = some_linux_ami(&client).await;
    let agent = base.join("rdma-agent");
    std::fs::write(&agent, b"not deployed: up fails before the agent step").unwrap();
    let opts = UpOptions {
        keep_on_failure: true,
        agent_binary: agent,
        ssh_wait: Duration::from_secs(3),
        lock_wait: Duration::from_secs(5),
    };

    // Two labs, each brought up from its own project directory and kept.
    let alpha_file = write_lab(&base.join("project-a"), "alpha", &ami);
    let beta_file = write_lab(&base.join("project-b"), "beta", &ami);
    let alpha = Lab::open(&alpha_file, None).unwrap();
    let beta = Lab::open(&beta_file, None).unwrap();
    alpha.up(&opts, &Silent).await.unwrap_err();
    beta.up(&opts, &Silent).await.unwrap_err();
    let alpha_resources = tagged(&client, "alpha").await;
    let beta_resources = tagged(&client, "beta").await;
    assert_eq!(alpha_resources.len(), 7, "{alpha_resources:?}");
    assert_eq!(beta_resources.len(), 7, "{beta_resources:?}");
    let live = lab_state::live_labs::entries_in(&lab_state::live_labs::dir());
    assert_eq!(live.len(), 2, "{live:?}");

    // From project A, beta is another directory's lab, and live: not leaked.
    // (Before lab ids it was listed, and --yes deleted it.)
    let (code, stdout, stderr) = down_leaked(&alpha_file, false);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("no leaked labctl resources"), "{stdout}{stderr}");

    // beta's state directory removed by hand: its resources are leaked, and
    // they are all that is listed.
    let beta_id = beta.state().unwrap().id;
    std::fs::remove_dir_all(beta.dir.root()).unwrap();
    let (code, stdout, stderr) = down_leaked(&alpha_file, false);
    eprintln!("{stdout}");
    assert_eq!(code, 1, "no tty and no --yes: nothing deleted\n{stdout}{stderr}");
    assert!(stdout.contains("7 leaked resources; re-run with --yes"), "{stdout}");
    let rows: Vec<&str> = stdout.lines().filter(|l| l.starts_with("us-east-1")).collect();
    assert_eq!(rows.len(), 7, "{stdout}");
    assert!(
        rows.iter().all(|r| r.contains(" beta ") && r.contains(&beta_id)),
        "{stdout}"
    );

    // --yes deletes exactly those.
    let (code, stdout, stderr) = down_leaked(&alpha_file, true);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("deleted 7 leaked resources"), "{stdout}");
    assert_eq!(tagged(&client, "beta").await, vec![]);
    assert_eq!(tagged(&client, "alpha").await, alpha_resources);

    // beta's live-lab entry went with its resources; alpha's own `down`
    // removes alpha and its entry.
    let left: Vec<String> = lab_state::live_labs::entries_in(&lab_state::live_labs::dir())
        .into_iter()
        .map(|e| e.lab)
        .collect();
    assert_eq!(left, vec!["alpha".to_string()]);

    assert_eq!(tagged(&client, "alpha").await, alpha_resources);
    assert!(alpha.down(Duration::from_secs(5)).await.unwrap());
    assert_eq!(tagged(&client, "alpha").await, vec![]);
    assert!(lab_state::live_labs::entries_in(&lab_state::live_labs::dir()).is_empty());
    let _ = std::fs::remove_dir_all(&base);
}
