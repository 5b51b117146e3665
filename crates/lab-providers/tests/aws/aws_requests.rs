//! The exact EC2 requests of an EFA lab, asserted with the SDK's own
//! request mocking (aws-smithy-mocks): moto has no placement groups and
//! reports EFA interfaces back as plain ones, so these parts cannot be
//! checked against it. Also: a quota refusal and a security group that stays
//! in use for a while after its instances are gone; and that every lookup
//! of the lab's resources filters on its id, never its name alone.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_ec2::operation::authorize_security_group_egress::AuthorizeSecurityGroupEgressOutput;
use aws_sdk_ec2::operation::authorize_security_group_ingress::{
    AuthorizeSecurityGroupIngressInput, AuthorizeSecurityGroupIngressOutput,
};
use aws_sdk_ec2::operation::create_placement_group::{CreatePlacementGroupInput, CreatePlacementGroupOutput};
use aws_sdk_ec2::operation::create_security_group::{CreateSecurityGroupInput, CreateSecurityGroupOutput};
use aws_sdk_ec2::operation::delete_key_pair::DeleteKeyPairOutput;
use aws_sdk_ec2::operation::delete_placement_group::{DeletePlacementGroupInput, DeletePlacementGroupOutput};
use aws_sdk_ec2::operation::delete_security_group::DeleteSecurityGroupOutput;
use aws_sdk_ec2::operation::describe_instance_types::DescribeInstanceTypesOutput;
use aws_sdk_ec2::operation::describe_instances::DescribeInstancesOutput;
use aws_sdk_ec2::operation::describe_internet_gateways::DescribeInternetGatewaysOutput;
use aws_sdk_ec2::operation::describe_key_pairs::DescribeKeyPairsOutput;
use aws_sdk_ec2::operation::describe_placement_groups::DescribePlacementGroupsOutput;
use aws_sdk_ec2::operation::describe_regions::DescribeRegionsOutput;
use aws_sdk_ec2::operation::describe_security_groups::DescribeSecurityGroupsOutput;
use aws_sdk_ec2::operation::describe_subnets::DescribeSubnetsOutput;
use aws_sdk_ec2::operation::describe_vpcs::DescribeVpcsOutput;
use aws_sdk_ec2::operation::import_key_pair::{ImportKeyPairInput, ImportKeyPairOutput};
use aws_sdk_ec2::operation::revoke_security_group_egress::{
    RevokeSecurityGroupEgressInput, RevokeSecurityGroupEgressOutput,
};
use aws_sdk_ec2::operation::run_instances::{RunInstancesInput, RunInstancesOutput};
use aws_sdk_ec2::operation::terminate_instances::{TerminateInstancesInput, TerminateInstancesOutput};
use aws_sdk_ec2::types::{
    EfaInfo, Filter, Instance, InstanceState, InstanceStateName, InstanceTypeInfo, NetworkInfo, PlacementGroup,
    PlacementStrategy, Region, Reservation, ResourceType, SecurityGroup, StateReason, Subnet, Tag,
};
use aws_sdk_ec2::Client;
use aws_smithy_mocks::{mock, mock_client, Rule, RuleMode};
use lab_model::{LabSpec, LabsFile};
use lab_providers::aws::{AwsError, AwsProvider, AwsState, Waits};
use lab_providers::{Provider, ProviderError};
use lab_state::progress::Silent;
use lab_state::{LabDir, LabState};

use crate::common;

const EFA_LAB: &str = "labs:
  - name: hpc
    provider: aws
    fabric: efa
    aws:
      region: us-east-1
      availability_zone: us-east-1b
      instance_type: c5n.18xlarge
      ami_ssm_parameter: /aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id
      subnet_id: subnet-0abc
      ssh_cidr: 203.0.113.7/32
    nodes:
      - name: server
      - name: client
";

/// `create` of every node of `spec` with the lab's keys, as `up` calls it.
async fn create(
    provider: &AwsProvider,
    spec: &LabSpec,
    dir: &LabDir,
    state: &mut LabState,
) -> Result<(), ProviderError> {
    provider
        .create(
            spec,
            &spec.resolve_nodes(),
            dir,
            state,
            &common::node_keys(spec),
            &Silent,
        )
        .await
}
fn fast() -> Waits {
    Waits {
        poll: Duration::from_millis(10),
        running: Duration::from_secs(5),
        teardown: Duration::from_secs(5),
    }
}

fn efa_lab(dir: &Path) -> (LabSpec, LabDir) {
    let path = dir.join("labs.yaml");
    std::fs::write(&path, EFA_LAB).unwrap();
    let spec = LabsFile::load(&path).unwrap().labs[0].clone();
    let lab_dir = LabDir::for_lab(&path, "hpc");
    lab_dir.create().unwrap();
    (spec, lab_dir)
}

fn temp_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("labctl-aws-requests-{}-{}", std::process::id(), rand_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn rand_suffix() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
}

/// Records every input a rule sees.
fn recorder<T>() -> Arc<Mutex<Vec<T>>> {
    Arc::new(Mutex::new(Vec::new()))
}

/// What EC2 would answer for an empty account in us-east-1 with one subnet
/// and an EFA instance type; RunInstances starts running instances that
/// DescribeInstances then reports.
struct Account {
    rules: Vec<Rule>,
    launched: Arc<Mutex<Vec<RunInstancesInput>>>,
    groups: Arc<Mutex<Vec<CreateSecurityGroupInput>>>,
    ingress: Arc<Mutex<Vec<AuthorizeSecurityGroupIngressInput>>>,
    revoked: Arc<Mutex<Vec<RevokeSecurityGroupEgressInput>>>,
    placement: Arc<Mutex<Vec<CreatePlacementGroupInput>>>,
    keys: Arc<Mutex<Vec<ImportKeyPairInput>>>,
    /// The filters of every DescribeKeyPairs, DescribeSecurityGroups and
    /// DescribePlacementGroups: how the lab's own resources are looked up.
    lookups: Lookups,
}

type Lookups = Arc<Mutex<Vec<(&'static str, Vec<Filter>)>>>;

/// The `tag:` filters of one lookup, as `key=value`, sorted.
fn tag_filters(filters: &[Filter]) -> Vec<String> {
    let mut out: Vec<String> = filters
        .iter()
        .filter(|f| f.name().is_some_and(|n| n.starts_with("tag:")))
        .map(|f| format!("{}={}", f.name().unwrap(), f.values().join(",")))
        .collect();
    out.sort();
    out
}

/// Every lookup recorded in `lookups` filtered on lab `hpc` and id `id`,
/// never on the name alone.
fn assert_looked_up_by_id(lookups: &Lookups, id: &str) {
    let lookups = lookups.lock().unwrap();
    assert!(!lookups.is_empty());
    for (operation, filters) in lookups.iter() {
        assert_eq!(
            tag_filters(filters),
            vec![format!("tag:labctl:lab-id={id}"), "tag:labctl:lab=hpc".to_string()],
            "{operation}"
        );
    }
}

fn account(efa_supported: bool, run_instances: Option<Rule>) -> Account {
    let launched = recorder::<RunInstancesInput>();
    let groups = recorder();
    let ingress = recorder();
    let revoked = recorder();
    let placement = recorder();
    let keys = recorder();
    let lookups: Lookups = recorder();
    let mut rules = vec![
        mock!(Client::describe_regions).then_output(|| {
            DescribeRegionsOutput::builder()
                .regions(Region::builder().region_name("us-east-1").build())
                .regions(Region::builder().region_name("eu-west-1").build())
                .build()
        }),
        mock!(Client::describe_availability_zones).then_output(|| {
            aws_sdk_ec2::operation::describe_availability_zones::DescribeAvailabilityZonesOutput::builder()
                .availability_zones(
                    aws_sdk_ec2::types::AvailabilityZone::builder()
                        .zone_name("us-east-1a")
                        .build(),
                )
                .availability_zones(
                    aws_sdk_ec2::types::AvailabilityZone::builder()
                        .zone_name("us-east-1b")
                        .build(),
                )
                .build()
        }),
        mock!(Client::describe_instance_types).then_compute_output(move |req| {
            let name = req.instance_types()[0].clone();
            DescribeInstanceTypesOutput::builder()
                .instance_types(
                    InstanceTypeInfo::builder()
                        .instance_type(name)
                        .network_info(
                            NetworkInfo::builder()
                                .efa_supported(efa_supported)
                                .efa_info(EfaInfo::builder().maximum_efa_interfaces(1).build())
                                .build(),
                        )
                        .build(),
                )
                .build()
        }),
        {
            let lookups = lookups.clone();
            mock!(Client::describe_key_pairs).then_compute_output(move |req| {
                lookups
                    .lock()
                    .unwrap()
                    .push(("DescribeKeyPairs", req.filters().to_vec()));
                DescribeKeyPairsOutput::builder().build()
            })
        },
        {
            let keys = keys.clone();
            mock!(Client::import_key_pair).then_compute_output(move |req| {
                keys.lock().unwrap().push(req.clone());
                ImportKeyPairOutput::builder().key_name(req.key_name().unwrap()).build()
            })
        },
        mock!(Client::describe_subnets).then_output(|| {
            DescribeSubnetsOutput::builder()
                .subnets(
                    Subnet::builder()
                        .subnet_id("subnet-0abc")
                        .vpc_id("vpc-0abc")
                        .availability_zone("us-east-1b")
                        .cidr_block("172.31.16.0/20")
                        .build(),
                )
                .build()
        }),
        {
            let lookups = lookups.clone();
            mock!(Client::describe_security_groups).then_compute_output(move |req| {
                lookups
                    .lock()
                    .unwrap()
                    .push(("DescribeSecurityGroups", req.filters().to_vec()));
                DescribeSecurityGroupsOutput::builder().build()
            })
        },
        {
            let groups = groups.clone();
            mock!(Client::create_security_group).then_compute_output(move |req| {
                groups.lock().unwrap().push(req.clone());
                CreateSecurityGroupOutput::builder().group_id("sg-0efa").build()
            })
        },
        {
            let ingress = ingress.clone();
            mock!(Client::authorize_security_group_ingress).then_compute_output(move |req| {
                ingress.lock().unwrap().push(req.clone());
                AuthorizeSecurityGroupIngressOutput::builder().r#return(true).build()
            })
        },
        mock!(Client::authorize_security_group_egress)
            .then_output(|| AuthorizeSecurityGroupEgressOutput::builder().r#return(true).build()),
        {
            let revoked = revoked.clone();
            mock!(Client::revoke_security_group_egress).then_compute_output(move |req| {
                revoked.lock().unwrap().push(req.clone());
                RevokeSecurityGroupEgressOutput::builder().r#return(true).build()
            })
        },
        {
            let lookups = lookups.clone();
            mock!(Client::describe_placement_groups).then_compute_output(move |req| {
                lookups
                    .lock()
                    .unwrap()
                    .push(("DescribePlacementGroups", req.filters().to_vec()));
                DescribePlacementGroupsOutput::builder().build()
            })
        },
        {
            let placement = placement.clone();
            mock!(Client::create_placement_group).then_compute_output(move |req| {
                placement.lock().unwrap().push(req.clone());
                CreatePlacementGroupOutput::builder()
                    .placement_group(
                        PlacementGroup::builder()
                            .group_name(req.group_name().unwrap())
                            .strategy(PlacementStrategy::Cluster)
                            .build(),
                    )
                    .build()
            })
        },
    ];
    rules.push(run_instances.unwrap_or_else(|| {
        let launched = launched.clone();
        mock!(Client::run_instances).then_compute_output(move |req| {
            let mut launched = launched.lock().unwrap();
            launched.push(req.clone());
            RunInstancesOutput::builder()
                .instances(
                    Instance::builder()
                        .instance_id(format!("i-{:04}", launched.len()))
                        .build(),
                )
                .build()
        })
    }));
    rules.push(instances_in(&launched, InstanceStateName::Running, None));
    Account {
        rules,
        launched,
        groups,
        ingress,
        revoked,
        placement,
        keys,
        lookups,
    }
}

/// DescribeInstances: every instance launched so far, in `state` (with
/// `reason` as its state reason).
fn instances_in(
    launched: &Arc<Mutex<Vec<RunInstancesInput>>>,
    state: InstanceStateName,
    reason: Option<&'static str>,
) -> Rule {
    let seen = launched.clone();
    mock!(Client::describe_instances).then_compute_output(move |_| {
        let reservations = seen
            .lock()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(n, req)| {
                let tags: Vec<Tag> = req.tag_specifications()[0].tags().to_vec();
                Reservation::builder()
                    .instances(
                        Instance::builder()
                            .instance_id(format!("i-{:04}", n + 1))
                            .state(InstanceState::builder().name(state.clone()).build())
                            .set_state_reason(reason.map(|r| StateReason::builder().message(r).build()))
                            .private_ip_address(format!("172.31.16.{}", 10 + n))
                            .public_ip_address(format!("198.51.100.{}", 10 + n))
                            .set_tags(Some(tags))
                            .build(),
                    )
                    .build()
            })
            .collect::<Vec<_>>();
        DescribeInstancesOutput::builder()
            .set_reservations(Some(reservations))
            .build()
    })
}

fn client(rules: &[Rule]) -> Client {
    // The mock's test defaults stop the clock, and the SDK's waiters time
    // out by that clock: give them the wall clock (a default config's).
    let wall_clock = aws_sdk_ec2::Config::builder().build().time_source();
    mock_client!(aws_sdk_ec2, RuleMode::MatchAny, rules.iter(), |mut conf| {
        conf.set_time_source(wall_clock.clone());
        conf
    })
}

fn tag<'a>(tags: &'a [Tag], key: &str) -> Option<&'a str> {
    tags.iter().find(|t| t.key() == Some(key)).and_then(|t| t.value())
}

#[tokio::test]
async fn test_efa_lab_sends_efa_interfaces_a_cluster_placement_group_and_a_closed_security_group() {
    let base = temp_dir();
    let (spec, dir) = efa_lab(&base);
    let account = account(true, None);
    let provider = AwsProvider::with_client(client(&account.rules), spec.aws.clone(), spec.fabric).with_waits(fast());
    provider.preflight(&spec, &spec.resolve_nodes()).await.unwrap();
    let mut state = LabState::new("hpc", "aws", "efa");
    create(&provider, &spec, &dir, &mut state).await.unwrap();
    // Named after the lab and its id, so a lab of the same name never clashes.
    let name = format!("labctl-hpc-{}", state.id);

    // Each existing resource was looked up by the lab's name and id.
    assert_looked_up_by_id(&account.lookups, &state.id);

    // The key pair is the lab's own public key.
    let keys = account.keys.lock().unwrap();
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[0].key_name(), Some(name.as_str()));
    assert_eq!(
        keys[0].public_key_material().unwrap().as_ref(),
        common::LOGIN_KEY.as_bytes()
    );

    // One cluster placement group, tagged.
    let placement = account.placement.lock().unwrap();
    assert_eq!(placement.len(), 1);
    assert_eq!(placement[0].group_name(), Some(name.as_str()));
    assert_eq!(placement[0].strategy(), Some(&PlacementStrategy::Cluster));
    let pg_tags = placement[0].tag_specifications()[0].tags();
    assert_eq!(
        placement[0].tag_specifications()[0].resource_type(),
        Some(&ResourceType::PlacementGroup)
    );
    assert_eq!(tag(pg_tags, "labctl:lab"), Some("hpc"));
    assert_eq!(tag(pg_tags, "labctl:lab-id"), Some(state.id.as_str()));

    // The security group: in the subnet's VPC; in: all from itself and SSH
    // from the controller; out: only to itself (the default allow-all revoked).
    let groups = account.groups.lock().unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].vpc_id(), Some("vpc-0abc"));
    assert_eq!(groups[0].group_name(), Some(name.as_str()));
    let ingress = account.ingress.lock().unwrap();
    let rules = ingress[0].ip_permissions();
    assert_eq!(rules.len(), 2);
    assert_eq!(rules[0].ip_protocol(), Some("-1"));
    assert_eq!(rules[0].user_id_group_pairs()[0].group_id(), Some("sg-0efa"));
    assert_eq!(rules[1].ip_protocol(), Some("tcp"));
    assert_eq!((rules[1].from_port(), rules[1].to_port()), (Some(22), Some(22)));
    assert_eq!(rules[1].ip_ranges()[0].cidr_ip(), Some("203.0.113.7/32"));
    let revoked = account.revoked.lock().unwrap();
    assert_eq!(
        revoked[0].ip_permissions()[0].ip_ranges()[0].cidr_ip(),
        Some("0.0.0.0/0")
    );

    // Each node: one EFA interface in the subnet and group, in the placement
    // group and zone, the image from SSM, tagged with lab, owner, time, node.
    let launched = account.launched.lock().unwrap();
    assert_eq!(launched.len(), 2);
    for (req, node) in launched.iter().zip(["server", "client"]) {
        assert_eq!(req.instance_type().map(|t| t.as_str()), Some("c5n.18xlarge"));
        assert_eq!(
            req.image_id(),
            Some("resolve:ssm:/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id")
        );
        assert_eq!((req.min_count(), req.max_count()), (Some(1), Some(1)));
        assert_eq!(req.key_name(), Some(name.as_str()));
        let nics = req.network_interfaces();
        assert_eq!(nics.len(), 1);
        assert_eq!(nics[0].interface_type(), Some("efa"));
        assert_eq!(nics[0].device_index(), Some(0));
        assert_eq!(nics[0].subnet_id(), Some("subnet-0abc"));
        assert_eq!(nics[0].groups(), ["sg-0efa"]);
        assert_eq!(nics[0].associate_public_ip_address(), Some(true));
        assert_eq!(nics[0].delete_on_termination(), Some(true));
        assert!(req.security_group_ids().is_empty() && req.subnet_id().is_none());
        let placement = req.placement().unwrap();
        assert_eq!(placement.group_name(), Some(name.as_str()));
        assert_eq!(placement.availability_zone(), Some("us-east-1b"));
        let kinds: Vec<_> = req
            .tag_specifications()
            .iter()
            .filter_map(|t| t.resource_type())
            .collect();
        assert_eq!(
            kinds,
            [
                &ResourceType::Instance,
                &ResourceType::Volume,
                &ResourceType::NetworkInterface
            ]
        );
        let tags = req.tag_specifications()[0].tags();
        assert_eq!(tag(tags, "labctl:lab"), Some("hpc"));
        assert_eq!(tag(tags, "labctl:lab-id"), Some(state.id.as_str()));
        assert_eq!(tag(tags, "labctl:node"), Some(node));
        assert_eq!(tag(tags, "labctl:owner"), Some(provider.owner()));
        assert_eq!(tag(tags, "labctl:created"), Some(state.created_at.as_str()));
        // One token per lab and node: a retry is a no-op, another lab's
        // launch (same name, same second) is not.
        assert_eq!(req.client_token(), Some(format!("{}-{node}", state.id).as_str()));
    }

    // The state has everything, the nodes their addresses.
    let aws = AwsState::from_lab_state(&state).unwrap();
    assert_eq!(aws.placement_group.as_deref(), Some(name.as_str()));
    assert_eq!(aws.security_group_id.as_deref(), Some("sg-0efa"));
    assert_eq!(aws.vpc_id, None, "a given subnet's VPC is not labctl's to delete");
    assert_eq!(aws.instances["server"], "i-0001");
    assert_eq!(state.nodes[0].ssh_host, "198.51.100.10");
    assert_eq!(state.nodes[0].ssh_user, "ubuntu");
    assert_eq!(state.nodes[1].data_addr.to_string(), "172.31.16.11");
    assert_eq!(state.nodes[1].data_prefix, 20);
    std::fs::remove_dir_all(base).unwrap();
}

#[tokio::test]
async fn test_efa_lab_on_a_type_without_efa_sends_nothing_that_creates() {
    let base = temp_dir();
    let (spec, _dir) = efa_lab(&base);
    let account = account(false, None);
    let provider = AwsProvider::with_client(client(&account.rules), spec.aws.clone(), spec.fabric).with_waits(fast());
    let err = provider.preflight(&spec, &spec.resolve_nodes()).await.unwrap_err();
    assert!(
        matches!(err.service_error::<AwsError>(), Some(AwsError::NoEfa { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("EfaSupported=false"), "{err}");
    assert!(account.keys.lock().unwrap().is_empty() && account.launched.lock().unwrap().is_empty());
    std::fs::remove_dir_all(base).unwrap();
}

#[tokio::test]
async fn test_quota_refusal_is_explained_and_what_was_made_is_recorded() {
    let base = temp_dir();
    let (spec, dir) = efa_lab(&base);
    let refused = mock!(Client::run_instances)
        .sequence()
        .http_status(
            400,
            Some(
                "<Response><Errors><Error><Code>VcpuLimitExceeded</Code><Message>You have requested more vCPU capacity than your current vCPU limit of 32 allows for the instance bucket that the specified instance type belongs to.</Message></Error></Errors><RequestID>r-1</RequestID></Response>"
                    .into(),
            ),
        )
        .repeatedly()
        .build();
    let account = account(true, Some(refused));
    let provider = AwsProvider::with_client(client(&account.rules), spec.aws.clone(), spec.fabric).with_waits(fast());
    let mut state = LabState::new("hpc", "aws", "efa");
    let err = create(&provider, &spec, &dir, &mut state).await.unwrap_err();
    assert!(
        matches!(err.service_error::<AwsError>(), Some(AwsError::Quota { .. })),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("RunInstances") && text.contains("VcpuLimitExceeded") && text.contains("request a higher quota"),
        "{text}"
    );
    // Everything made before the refusal is on disk for `down`.
    let saved = AwsState::from_lab_state(&dir.load().unwrap().unwrap()).unwrap();
    assert_eq!(saved.security_group_id.as_deref(), Some("sg-0efa"));
    let name = format!("labctl-hpc-{}", state.id);
    assert_eq!(saved.placement_group.as_deref(), Some(name.as_str()));
    assert_eq!(saved.key_name.as_deref(), Some(name.as_str()));
    std::fs::remove_dir_all(base).unwrap();
}

#[tokio::test]
async fn test_delete_of_an_efa_lab_retries_the_security_group_and_removes_the_placement_group() {
    let base = temp_dir();
    let (spec, dir) = efa_lab(&base);
    let terminated = recorder::<TerminateInstancesInput>();
    let placement_deleted = recorder::<DeletePlacementGroupInput>();
    let running = Arc::new(Mutex::new(true));
    let lookups: Lookups = recorder();
    let state = LabState::new("hpc", "aws", "efa");
    let name = format!("labctl-hpc-{}", state.id);
    // In use twice (the instances' interfaces linger), then deletable.
    let delete_group = mock!(Client::delete_security_group)
        .sequence()
        .http_status(
            400,
            Some("<Response><Errors><Error><Code>DependencyViolation</Code><Message>resource sg-0efa has a dependent object</Message></Error></Errors><RequestID>r-2</RequestID></Response>".into()),
        )
        .times(2)
        .output(|| DeleteSecurityGroupOutput::builder().build())
        .build();
    let rules = vec![
        {
            let running = running.clone();
            mock!(Client::describe_instances).then_compute_output(move |_| {
                let state = if *running.lock().unwrap() {
                    InstanceStateName::Running
                } else {
                    InstanceStateName::Terminated
                };
                DescribeInstancesOutput::builder()
                    .reservations(
                        Reservation::builder()
                            .instances(
                                Instance::builder()
                                    .instance_id("i-0001")
                                    .state(InstanceState::builder().name(state).build())
                                    .tags(Tag::builder().key("labctl:lab").value("hpc").build())
                                    .build(),
                            )
                            .build(),
                    )
                    .build()
            })
        },
        {
            let (terminated, running) = (terminated.clone(), running.clone());
            mock!(Client::terminate_instances).then_compute_output(move |req| {
                terminated.lock().unwrap().push(req.clone());
                *running.lock().unwrap() = false;
                TerminateInstancesOutput::builder().build()
            })
        },
        {
            let lookups = lookups.clone();
            mock!(Client::describe_security_groups).then_compute_output(move |req| {
                lookups
                    .lock()
                    .unwrap()
                    .push(("DescribeSecurityGroups", req.filters().to_vec()));
                DescribeSecurityGroupsOutput::builder()
                    .security_groups(SecurityGroup::builder().group_id("sg-0efa").build())
                    .build()
            })
        },
        delete_group.clone(),
        {
            let lookups = lookups.clone();
            mock!(Client::describe_key_pairs).then_compute_output(move |req| {
                lookups
                    .lock()
                    .unwrap()
                    .push(("DescribeKeyPairs", req.filters().to_vec()));
                DescribeKeyPairsOutput::builder().build()
            })
        },
        mock!(Client::delete_key_pair).then_output(|| DeleteKeyPairOutput::builder().build()),
        {
            let (lookups, name) = (lookups.clone(), name.clone());
            mock!(Client::describe_placement_groups).then_compute_output(move |req| {
                lookups
                    .lock()
                    .unwrap()
                    .push(("DescribePlacementGroups", req.filters().to_vec()));
                DescribePlacementGroupsOutput::builder()
                    .placement_groups(PlacementGroup::builder().group_name(&name).build())
                    .build()
            })
        },
        {
            let placement_deleted = placement_deleted.clone();
            mock!(Client::delete_placement_group).then_compute_output(move |req| {
                placement_deleted.lock().unwrap().push(req.clone());
                DeletePlacementGroupOutput::builder().build()
            })
        },
        mock!(Client::describe_internet_gateways).then_output(|| DescribeInternetGatewaysOutput::builder().build()),
        mock!(Client::describe_subnets).then_output(|| DescribeSubnetsOutput::builder().build()),
        mock!(Client::describe_vpcs).then_output(|| DescribeVpcsOutput::builder().build()),
    ];
    let provider = AwsProvider::with_client(client(&rules), spec.aws.clone(), spec.fabric).with_waits(fast());
    // Nothing recorded in the state: the lab is found by its name and id tags.
    provider.delete(&dir, Some(&state)).await.unwrap();
    assert_looked_up_by_id(&lookups, &state.id);
    assert_eq!(terminated.lock().unwrap()[0].instance_ids(), ["i-0001"]);
    assert_eq!(
        delete_group.num_calls(),
        3,
        "DeleteSecurityGroup is retried until it succeeds"
    );
    assert_eq!(placement_deleted.lock().unwrap()[0].group_name(), Some(name.as_str()));
    std::fs::remove_dir_all(base).unwrap();
}

/// `up` of a lab whose instances EC2 reports in `state`; the create error.
async fn create_with_instances_in(
    state: InstanceStateName,
    reason: Option<&'static str>,
    waits: Waits,
) -> ProviderError {
    let base = temp_dir();
    let (spec, dir) = efa_lab(&base);
    let mut account = account(true, None);
    // Rules match in order: this DescribeInstances answers before the account's.
    account.rules.insert(0, instances_in(&account.launched, state, reason));
    let provider = AwsProvider::with_client(client(&account.rules), spec.aws.clone(), spec.fabric).with_waits(waits);
    let mut state = LabState::new("hpc", "aws", "efa");
    let err = create(&provider, &spec, &dir, &mut state).await.unwrap_err();
    std::fs::remove_dir_all(base).unwrap();
    err
}

#[tokio::test]
async fn test_an_instance_that_terminates_while_starting_fails_up_with_its_node_and_reason() {
    let err = create_with_instances_in(
        InstanceStateName::Terminated,
        Some("Server.InsufficientInstanceCapacity: Insufficient capacity."),
        fast(),
    )
    .await;
    match err.service_error::<AwsError>() {
        Some(AwsError::InstanceFailed {
            node,
            instance,
            state,
            reason,
        }) => {
            assert_eq!((node.as_str(), instance.as_str()), ("server", "i-0001"));
            assert_eq!(state, "terminated");
            assert_eq!(reason, "Server.InsufficientInstanceCapacity: Insufficient capacity.");
        }
        _ => panic!("expected InstanceFailed, got {err}"),
    }
}

#[tokio::test]
async fn test_instances_that_never_run_time_out_naming_the_pending_nodes_and_the_wait() {
    let waits = Waits {
        running: Duration::from_secs(1),
        ..fast()
    };
    let started = std::time::Instant::now();
    let err = create_with_instances_in(InstanceStateName::Pending, None, waits).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "waited {:?} for a 1 s wait",
        started.elapsed()
    );
    match err.service_error::<AwsError>() {
        Some(AwsError::Timeout { what, waited_s }) => {
            assert_eq!(what, "instances to run: server (i-0001), client (i-0002)");
            assert!(*waited_s >= 1, "{err}");
        }
        _ => panic!("expected Timeout, got {err}"),
    }
    assert!(
        err.to_string()
            .starts_with("timed out after 1 s waiting for instances to run"),
        "{err}"
    );
}
