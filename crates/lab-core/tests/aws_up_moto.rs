//! `up` of an aws lab as labctl runs it (the provider built from the
//! standard AWS environment: AWS_ENDPOINT_URL pointing at moto, keys in
//! AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY): moto's instances never answer
//! SSH, so `up` fails at the SSH wait and must leave nothing behind; a launch
//! EC2 refuses must too; missing credentials are reported before anything is
//! made. One test, because it sets process-wide environment variables.

#[path = "../../lab-providers/tests/aws/common.rs"]
mod common;

use std::time::Duration;

use common::{aws_environment_for, some_linux_ami, tagged, temp_dir, write_aws_lab, Moto};
use lab_core::lab::{Lab, LabError, UpOptions};
use lab_state::progress::Silent;

fn write_lab(dir: &std::path::Path, name: &str, ami: &str) -> std::path::PathBuf {
    write_aws_lab(&dir.join(format!("{name}.yaml")), name, ami)
}

#[tokio::test]
async fn test_up_against_moto_fails_cleanly_and_leaves_nothing() {
    let moto = Moto::start();
    let base = temp_dir("up");
    aws_environment_for(&moto, &base);
    let client = moto.client("us-east-1");
    let ami = some_linux_ami(&client).await;
    let agent = base.join("rdma-agent");
    std::fs::write(&agent, b"not deployed: up fails before the agent step").unwrap();
    let opts = UpOptions {
        keep_on_failure: false,
        agent_binary: agent,
        ssh_wait: Duration::from_secs(3),
        lock_wait: Duration::from_secs(5),
    };

    // 1. Everything is created, then SSH never answers: up fails naming the
    //    node and removes every resource and the state directory.
    let lab = Lab::open(&write_lab(&base, "nossh", &ami), None).unwrap();
    let err = lab.up(&opts, &Silent).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("SSH") && (text.contains("`server`") || text.contains("`client`")),
        "{text}"
    );
    assert!(!lab.dir.exists(), "the state directory is left behind");
    assert_eq!(tagged(&client, "nossh").await, vec![]);
    // The instances did exist: moto still lists them, terminated.
    let all = client.describe_instances().send().await.unwrap();
    let terminated = all
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter(|i| i.state().and_then(|s| s.name()).map(|s| s.as_str()) == Some("terminated"))
        .count();
    assert_eq!(terminated, 2);

    // 2. EC2 refuses the launch midway (after key pair, network and
    //    security group): the error says why, nothing is left.
    let lab = Lab::open(&write_lab(&base, "refused", "ami-0000000000000dead"), None).unwrap();
    let err = lab.up(&opts, &Silent).await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains("RunInstances") && text.contains("InvalidAMIID"), "{text}");
    assert!(!lab.dir.exists());
    assert_eq!(tagged(&client, "refused").await, vec![]);

    // 3. No credentials: a clear error before anything exists.
    std::env::remove_var("AWS_ACCESS_KEY_ID");
    std::env::remove_var("AWS_SECRET_ACCESS_KEY");
    let lab = Lab::open(&write_lab(&base, "nocreds", &ami), None).unwrap();
    let err = lab.up(&opts, &Silent).await.unwrap_err();
    assert!(matches!(err, LabError::Provider(_)), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("no usable AWS credentials") && text.contains("AWS_ACCESS_KEY_ID"),
        "{text}"
    );
    assert!(!lab.dir.exists());
    assert_eq!(tagged(&client, "nocreds").await, vec![]);

    std::fs::remove_dir_all(&base).unwrap();
}
