//! The AWS provider against a local moto EC2 emulator: the lifecycle
//! creates and removes every resource, a second create changes nothing, a
//! launch refused midway leaves nothing once deleted, leaked resources are
//! found and removed, and bad settings give clear errors. (Two labs of one
//! name, and a lab whose state is lost: `aws_moto_lab_id.rs`.) (moto's instances never answer SSH; everything after
//! "the instance runs" is the QEMU suite's business.)

use std::path::Path;
use std::time::Duration;

use aws_sdk_ec2::Client;
use lab_model::{Fabric, LabSpec, LabsFile};
use lab_providers::aws::{scan_leaked, AwsError, AwsProvider, AwsState, EfaInterfaces, Leftover, Waits};
use lab_providers::{Provider, ProviderError};
use lab_state::progress::Silent;
use lab_state::{LabDir, LabState};

use crate::common::{self, some_linux_ami, tagged, temp_dir, Moto};

const REGION: &str = "us-east-1";

fn fast() -> Waits {
    Waits {
        poll: Duration::from_millis(100),
        running: Duration::from_secs(30),
        teardown: Duration::from_secs(30),
    }
}

/// A lab `name` of `nodes` nodes on moto, with `extra` lines in its aws block.
fn lab(dir: &Path, name: &str, ami: &str, instance_type: &str, fabric: &str, extra: &str) -> LabSpec {
    let yaml = format!(
        "labs:\n  - name: {name}\n    provider: aws\n    fabric: {fabric}\n    aws:\n      region: {REGION}\n      instance_type: {instance_type}\n      ami: {ami}\n      ssh_cidr: 198.51.100.7/32\n{extra}    nodes:\n      - name: server\n      - name: client\n"
    );
    let path = dir.join("labs.yaml");
    std::fs::write(&path, yaml).unwrap();
    LabsFile::load(&path).unwrap_or_else(|e| panic!("{e}")).labs[0].clone()
}

struct Fixture {
    moto: Moto,
    client: Client,
    ami: String,
    base: std::path::PathBuf,
}

async fn fixture(tag: &str) -> Fixture {
    let moto = Moto::start();
    let client = moto.client(REGION);
    let ami = some_linux_ami(&client).await;
    Fixture {
        moto,
        client,
        ami,
        base: temp_dir(tag),
    }
}

impl Fixture {
    fn provider(&self, spec: &LabSpec) -> AwsProvider {
        // The test's own registry of live labs (empty), never the user's.
        AwsProvider::with_client(self.client.clone(), spec.aws.clone(), spec.fabric)
            .with_waits(fast())
            .with_registry(&self.base.join("registry"))
    }

    fn lab(&self, name: &str, instance_type: &str, fabric: &str, extra: &str) -> (LabSpec, LabDir) {
        let spec = lab(&self.base, name, &self.ami, instance_type, fabric, extra);
        let dir = LabDir::for_lab(&self.base.join("labs.yaml"), name);
        dir.create().unwrap();
        (spec, dir)
    }

    /// `create` of a new lab (a fresh state, so a new id).
    async fn create(&self, spec: &LabSpec, dir: &LabDir) -> Result<LabState, ProviderError> {
        let state = LabState::new(&spec.name, "aws", &spec.fabric.to_string());
        self.create_with(spec, dir, state).await
    }

    /// `create` of the lab `state` is of, again.
    async fn create_with(&self, spec: &LabSpec, dir: &LabDir, mut state: LabState) -> Result<LabState, ProviderError> {
        let provider = self.provider(spec);
        provider.preflight(spec, &spec.resolve_nodes()).await?;
        let result = provider
            .create(
                spec,
                &spec.resolve_nodes(),
                dir,
                &mut state,
                &common::node_keys(spec),
                &Silent,
            )
            .await;
        result.map(|()| state)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

#[tokio::test]
async fn test_lifecycle_creates_then_removes_every_resource() {
    let f = fixture("life").await;
    let (spec, dir) = f.lab("life", "t3.medium", "rxe", "      ssh_user: ec2-user\n");
    let state = f
        .create(&spec, &dir)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", f.moto.log_text()));

    // What the state records is what EC2 holds under the lab's tag.
    let aws = AwsState::from_lab_state(&state).expect("aws state");
    let on_disk = dir.load().unwrap().expect("state saved");
    assert_eq!(on_disk.provider_state, state.provider_state);
    assert_eq!(aws.region, REGION);
    assert_eq!(aws.instances.len(), 2);
    let mut expected: Vec<(&str, String)> = vec![
        ("key-pair", aws.key_name.clone().unwrap()),
        ("security-group", aws.security_group_id.clone().unwrap()),
        ("vpc", aws.vpc_id.clone().unwrap()),
        ("subnet", aws.subnet_id.clone().unwrap()),
        ("internet-gateway", aws.internet_gateway_id.clone().unwrap()),
    ];
    expected.extend(aws.instances.values().map(|id| ("instance", id.clone())));
    expected.sort();
    assert_eq!(tagged(&f.client, "life").await, expected);
    assert_eq!(aws.key_name, Some(format!("labctl-life-{}", state.id)));

    // Every resource carries the owner and creation time too.
    let vpcs = f
        .client
        .describe_vpcs()
        .vpc_ids(aws.vpc_id.clone().unwrap())
        .send()
        .await
        .unwrap();
    let tags = vpcs.vpcs()[0].tags();
    let tag = |k: &str| {
        tags.iter()
            .find(|t| t.key() == Some(k))
            .and_then(|t| t.value())
            .map(str::to_string)
    };
    assert_eq!(
        tag("labctl:owner").as_deref(),
        Some(lab_providers::aws::default_owner().as_str())
    );
    assert_eq!(tag("labctl:created").as_deref(), Some(state.created_at.as_str()));

    // The security group: everything from itself, SSH from the controller.
    let groups = f
        .client
        .describe_security_groups()
        .group_ids(aws.security_group_id.clone().unwrap())
        .send()
        .await
        .unwrap();
    let group = &groups.security_groups()[0];
    let ingress = group.ip_permissions();
    assert!(ingress
        .iter()
        .any(|p| p.ip_protocol() == Some("-1")
            && p.user_id_group_pairs().iter().any(|g| g.group_id() == group.group_id())));
    assert!(ingress.iter().any(|p| p.ip_protocol() == Some("tcp")
        && p.from_port() == Some(22)
        && p.ip_ranges().iter().any(|r| r.cidr_ip() == Some("198.51.100.7/32"))));
    assert_eq!(ingress.len(), 2, "{ingress:?}");

    // Nodes: reachable addresses, the image's user, the private address as data address.
    assert_eq!(state.nodes.len(), 2);
    for node in &state.nodes {
        assert_eq!(node.ssh_user, "ec2-user");
        assert_eq!(node.ssh_port, 22);
        assert!(node.ssh_host.parse::<std::net::Ipv4Addr>().is_ok(), "{}", node.ssh_host);
        assert!(node.data_addr.to_string().starts_with("10.78.1."), "{}", node.data_addr);
        assert_eq!(node.data_prefix, 24);
    }

    // status: the provider sees both machines running.
    let provider = f.provider(&spec);
    for node in ["server", "client"] {
        provider.check_alive(&dir, &state, node).await.unwrap();
    }

    provider.delete(&dir, Some(&state)).await.unwrap();
    assert_eq!(tagged(&f.client, "life").await, vec![]);
    // A stopped node now reads as such.
    let fresh = f.provider(&spec);
    let err = fresh.check_alive(&dir, &state, "server").await.unwrap_err().to_string();
    assert!(err.contains("terminated"), "{err}");
    // A second delete has nothing to do and succeeds.
    fresh.delete(&dir, Some(&state)).await.unwrap();
}

#[tokio::test]
async fn test_every_instance_gets_the_host_key_labctl_pinned() {
    use base64::Engine as _;
    let f = fixture("hostkey").await;
    let (spec, dir) = f.lab("hostkey", "t3.medium", "rxe", "");
    let state = f
        .create(&spec, &dir)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", f.moto.log_text()));
    let aws = AwsState::from_lab_state(&state).expect("aws state");
    for node in &state.nodes {
        // Pinned before any connection: the state holds the key labctl made.
        assert_eq!(node.host_key.as_deref(), Some(common::HOST_KEY_PUBLIC), "{}", node.name);
        // And EC2 hands that same key to the instance's cloud-init.
        let attribute = f
            .client
            .describe_instance_attribute()
            .instance_id(&aws.instances[&node.name])
            .attribute(aws_sdk_ec2::types::InstanceAttributeName::UserData)
            .send()
            .await
            .unwrap();
        let encoded = attribute.user_data().and_then(|v| v.value()).expect("user data");
        let text = String::from_utf8(base64::engine::general_purpose::STANDARD.decode(encoded).unwrap()).unwrap();
        assert!(text.starts_with("#cloud-config\n"), "{text}");
        let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(
            doc["ssh_keys"]["ed25519_public"].as_str(),
            Some(common::HOST_KEY_PUBLIC)
        );
        assert!(doc["ssh_keys"]["ed25519_private"]
            .as_str()
            .unwrap()
            .starts_with("-----BEGIN OPENSSH PRIVATE KEY-----\n"));
        assert_eq!(doc["ssh_genkeytypes"].as_sequence().map(Vec::len), Some(0));
    }
    f.provider(&spec).delete(&dir, Some(&state)).await.unwrap();
    assert_eq!(tagged(&f.client, "hostkey").await, vec![]);
}

#[tokio::test]
async fn test_second_create_changes_nothing() {
    let f = fixture("again").await;
    let (spec, dir) = f.lab("again", "t3.medium", "rxe", "");
    let first = f.create(&spec, &dir).await.unwrap();
    let before = tagged(&f.client, "again").await;

    // Again with the state kept, and again with its record of resources
    // lost (only the lab's id left): EC2 is found by the lab's id tags.
    let second = f.create_with(&spec, &dir, first.clone()).await.unwrap();
    assert_eq!(tagged(&f.client, "again").await, before);
    assert_eq!(second.provider_state, first.provider_state);
    let mut bare = first.clone();
    bare.provider_state = serde_json::Value::Null;
    bare.nodes.clear();
    let third = f.create_with(&spec, &dir, bare).await.unwrap();
    assert_eq!(
        AwsState::from_lab_state(&third).unwrap().instances,
        AwsState::from_lab_state(&first).unwrap().instances
    );
    assert_eq!(tagged(&f.client, "again").await, before);

    f.provider(&spec).delete(&dir, Some(&first)).await.unwrap();
    assert_eq!(tagged(&f.client, "again").await, vec![]);
}

#[tokio::test]
async fn test_up_from_a_new_controller_address_adds_only_its_ssh_rule() {
    let f = fixture("moved").await;
    let (mut spec, dir) = f.lab("moved", "t3.medium", "rxe", "");
    let first = f.create(&spec, &dir).await.unwrap();
    let before = tagged(&f.client, "moved").await;

    // The controller moved to another network: the group is reused and opened to it.
    spec.aws.as_mut().unwrap().ssh_cidr = Some("203.0.113.9/32".into());
    f.create_with(&spec, &dir, first.clone()).await.unwrap();
    assert_eq!(tagged(&f.client, "moved").await, before, "nothing new is created");
    let group = AwsState::from_lab_state(&first).unwrap().security_group_id.unwrap();
    let described = f
        .client
        .describe_security_groups()
        .group_ids(&group)
        .send()
        .await
        .unwrap();
    let ssh_sources: Vec<&str> = described.security_groups()[0]
        .ip_permissions()
        .iter()
        .filter(|r| r.from_port() == Some(22))
        .flat_map(|r| r.ip_ranges().iter().filter_map(|r| r.cidr_ip()))
        .collect();
    assert_eq!(ssh_sources.len(), 2, "{ssh_sources:?}");
    assert!(ssh_sources.contains(&"198.51.100.7/32") && ssh_sources.contains(&"203.0.113.9/32"));

    // Same address again: no duplicate rule (EC2 would refuse one anyway).
    f.create_with(&spec, &dir, first.clone()).await.unwrap();
    assert_eq!(tagged(&f.client, "moved").await, before);
    f.provider(&spec).delete(&dir, Some(&first)).await.unwrap();
    assert_eq!(tagged(&f.client, "moved").await, vec![]);
}

#[tokio::test]
async fn test_launch_refused_midway_leaves_nothing_after_delete() {
    let f = fixture("refused").await;
    let spec = lab(&f.base, "refused", "ami-0000000000000dead", "t3.medium", "rxe", "");
    let dir = LabDir::for_lab(&f.base.join("labs.yaml"), "refused");
    dir.create().unwrap();
    let err = f.create(&spec, &dir).await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains("RunInstances") && text.contains("InvalidAMIID"), "{text}");
    // Key pair, network and security group were made before the refusal and recorded.
    let recorded = AwsState::from_lab_state(&dir.load().unwrap().unwrap()).unwrap();
    assert!(
        recorded.security_group_id.is_some() && recorded.vpc_id.is_some(),
        "{recorded:?}"
    );
    assert!(!tagged(&f.client, "refused").await.is_empty());

    let state = dir.load().unwrap();
    f.provider(&spec).delete(&dir, state.as_ref()).await.unwrap();
    assert_eq!(tagged(&f.client, "refused").await, vec![]);
}

#[tokio::test]
async fn test_an_efa_lab_records_its_efa_interfaces_against_what_the_type_takes() {
    let f = fixture("efacount").await;
    let (spec, dir) = f.lab("efacount", "p4d.24xlarge", "efa", "");
    // moto has no placement groups (DescribePlacementGroups answers 500):
    // create stops there, after the security group, with what
    // DescribeInstanceTypes said of p4d.24xlarge already recorded.
    let err = f.create(&spec, &dir).await.unwrap_err();
    assert!(err.to_string().contains("DescribePlacementGroups"), "{err}");
    let recorded = AwsState::from_lab_state(&dir.load().unwrap().unwrap()).unwrap();
    assert_eq!(
        recorded.efa,
        Some(EfaInterfaces {
            instance_type: "p4d.24xlarge".into(),
            attached: 1,
            maximum: Some(4),
        })
    );
    // No `delete` here: an EFA lab's teardown looks up its placement group,
    // which moto cannot answer either. The emulator goes with the fixture.
}

#[tokio::test]
async fn test_leaked_resources_are_listed_then_deleted() {
    let f = fixture("leak").await;
    let (kept, kept_dir) = f.lab("kept", "t3.medium", "rxe", "");
    let kept_state = f.create(&kept, &kept_dir).await.unwrap();
    let (lost, lost_dir) = f.lab("lost", "t3.medium", "rxe", "");
    let lost_state = f.create(&lost, &lost_dir).await.unwrap();
    std::fs::remove_dir_all(lost_dir.root()).unwrap();

    let owner = lab_providers::aws::default_owner();
    let labs_file = f.base.join("labs.yaml");
    let known = |l: &Leftover| LabDir::for_lab(&labs_file, &l.lab).exists();
    let scan = scan_leaked(f.client.clone(), &owner, known).await.unwrap();
    let labs: Vec<&str> = scan.leftovers.iter().map(|l| l.lab.as_str()).collect();
    assert_eq!(labs, vec!["lost"; 7], "{:?}", scan.leftovers);
    // Every resource carries the lab's id, which `down --leaked` checks
    // against the registry of live labs and deletes by.
    assert!(
        scan.leftovers
            .iter()
            .all(|l| l.lab_id.as_deref() == Some(lost_state.id.as_str())),
        "{:?}",
        scan.leftovers
    );
    let kinds: Vec<&str> = scan.leftovers.iter().map(|l| l.kind).collect();
    for kind in [
        "instance",
        "security-group",
        "key-pair",
        "vpc",
        "subnet",
        "internet-gateway",
    ] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    // moto has no placement groups; the scan says so instead of failing.
    assert_eq!(scan.notes.len(), 1, "{:?}", scan.notes);
    // Someone else's resources are not ours to list.
    let other = scan_leaked(f.client.clone(), "someone@else", known).await.unwrap();
    assert!(other.leftovers.is_empty());

    scan.delete(fast(), &[]).await.unwrap();
    assert_eq!(tagged(&f.client, "lost").await, vec![]);
    assert_eq!(tagged(&f.client, "kept").await.len(), 7);
    f.provider(&kept).delete(&kept_dir, Some(&kept_state)).await.unwrap();
}

#[tokio::test]
async fn test_instance_type_without_efa_is_refused_before_anything_exists() {
    let f = fixture("noefa").await;
    let (spec, dir) = f.lab("noefa", "t3.micro", "efa", "");
    let err = f.create(&spec, &dir).await.unwrap_err();
    assert!(
        matches!(err.service_error::<AwsError>(), Some(AwsError::NoEfa { instance_type, .. }) if instance_type == "t3.micro"),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("does not support EFA") && text.contains("fabric: rxe"),
        "{text}"
    );
    assert_eq!(tagged(&f.client, "noefa").await, vec![]);

    // An EFA type passes the same check (moto knows c5n.18xlarge has EFA).
    let (spec, _) = f.lab("efaok", "c5n.18xlarge", "efa", "");
    f.provider(&spec).check("efaok").await.unwrap();
    assert_eq!(spec.fabric, Fabric::Efa);
}

#[tokio::test]
async fn test_wrong_region_zone_and_type_give_clear_errors() {
    let f = fixture("wrong").await;
    let (spec, _) = f.lab("wrong", "t3.medium", "rxe", "");

    let mut bad_region = spec.clone();
    bad_region.aws.as_mut().unwrap().region = "mars-north-1".into();
    // moto answers any region's DescribeRegions with the real list.
    let err = AwsProvider::with_client(f.client.clone(), bad_region.aws.clone(), Fabric::Rxe)
        .check("wrong")
        .await
        .unwrap_err();
    assert!(matches!(err, AwsError::UnknownRegion { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("`mars-north-1` is not an EC2 region") && text.contains("us-east-1"),
        "{text}"
    );

    let mut bad_zone = spec.clone();
    bad_zone.aws.as_mut().unwrap().availability_zone = Some("us-east-1z".into());
    let err = f.provider(&bad_zone).check("wrong").await.unwrap_err();
    assert!(matches!(err, AwsError::UnknownZone { .. }), "{err}");
    assert!(err.to_string().contains("us-east-1a"), "{err}");

    let mut bad_type = spec.clone();
    bad_type.aws.as_mut().unwrap().instance_type = "x9.mega".into();
    let err = f.provider(&bad_type).check("wrong").await.unwrap_err();
    assert!(matches!(err, AwsError::UnknownInstanceType { .. }), "{err}");
    assert!(
        err.to_string().contains("`x9.mega` is not offered in region us-east-1"),
        "{err}"
    );
}

#[tokio::test]
async fn test_missing_credentials_are_reported_before_any_call() {
    let f = fixture("nocreds").await;
    let (spec, _) = f.lab("nocreds", "t3.medium", "rxe", "");
    // A client with no credential source at all (as when the environment,
    // profile and instance role all have none).
    let config = aws_sdk_ec2::Config::builder()
        .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
        .region(aws_sdk_ec2::config::Region::new(REGION))
        .endpoint_url(&f.moto.endpoint)
        .http_client(lab_providers::aws::https_client())
        .build();
    let client = Client::from_conf(config);
    let err = AwsProvider::with_client(client, spec.aws.clone(), Fabric::Rxe)
        .check("nocreds")
        .await
        .unwrap_err();
    assert!(matches!(err, AwsError::NoCredentials { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("no usable AWS credentials") && text.contains("AWS_ACCESS_KEY_ID"),
        "{text}"
    );
}
