//! The AWS provider: one EC2 instance per node.
//!
//! What `up` creates, in order, each recorded in `provider_state` as soon as
//! it exists and tagged `labctl:lab`, `labctl:owner` and `labctl:created`:
//! the lab's key pair (its SSH public key), a VPC with a subnet and internet
//! gateway unless labs.yaml names a subnet, a security group, a cluster
//! placement group (fabric efa), and the instances. Everything is looked up
//! by tag before it is created, so a repeated `create` reuses what exists,
//! and `delete` finds the lab's resources by tag even with no state at all.
//!
//! The endpoint, credentials and region come from the standard AWS
//! configuration (`AWS_PROFILE`, `AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT_URL`, ...),
//! with the region from labs.yaml taking precedence.

pub mod error;

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_sdk_ec2::client::Waiters;
use aws_sdk_ec2::operation::describe_instances::{DescribeInstancesError, DescribeInstancesOutput};
use aws_sdk_ec2::primitives::Blob;
use aws_sdk_ec2::types::{
    Filter, InstanceNetworkInterfaceSpecification, InstanceStateName, InstanceType, IpPermission, IpRange, Placement,
    PlacementStrategy, ResourceType, Tag, TagSpecification, UserIdGroupPair,
};
use aws_sdk_ec2::Client;
use aws_smithy_runtime_api::client::waiters::error::WaiterError;
use backon::{ConstantBuilder, Retryable};
use serde::{Deserialize, Serialize};

pub use self::error::AwsError;
use crate::provider::{Provider, ProviderError};
use crate::{HostKeyPair, NodeKeys};
use lab_model::{AwsSpec, Fabric, LabSpec, ResolvedNode, SshAddress};
use lab_state::progress::{step, Reporter};
use lab_state::{LabDir, LabState, NodeState};

/// Tag holding the lab's name, on every resource labctl creates.
pub const TAG_LAB: &str = "labctl:lab";
/// Tag holding who created the resource (`user@host`).
pub const TAG_OWNER: &str = "labctl:owner";
/// Tag holding when the resource was created (RFC 3339).
pub const TAG_CREATED: &str = "labctl:created";
/// Tag holding the node an instance is.
pub const TAG_NODE: &str = "labctl:node";
/// Tag key: the lab's random id (`state.json`'s `id`), which tells two labs
/// of one name apart and keys the user's registry of live labs.
pub const TAG_LAB_ID: &str = "labctl:lab-id";
/// The port rdma-agent listens on inside every node (loopback only).
pub const AGENT_PORT: u16 = 7470;
/// The address space of a VPC labctl creates, and its one subnet.
const VPC_CIDR: &str = "10.78.0.0/16";
const SUBNET_CIDR: &str = "10.78.1.0/24";

/// What the provider records in `state.provider_state`: every resource it
/// created, so `delete` can remove exactly those.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AwsState {
    /// The region everything lives in.
    pub region: String,
    /// The key pair's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_name: Option<String>,
    /// A VPC labctl created (none when labs.yaml named a subnet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpc_id: Option<String>,
    /// The internet gateway of that VPC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internet_gateway_id: Option<String>,
    /// A subnet labctl created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet_id: Option<String>,
    /// The lab's security group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_group_id: Option<String>,
    /// The cluster placement group (fabric efa).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_group: Option<String>,
    /// Node name → instance id.
    #[serde(default)]
    pub instances: BTreeMap<String, String>,
}

impl AwsState {
    /// The AWS part of a lab's state, if it has one.
    pub fn from_lab_state(state: &LabState) -> Option<AwsState> {
        serde_json::from_value(state.provider_state.clone()).ok()
    }

    fn save(&self, dir: &LabDir, state: &mut LabState) -> Result<(), ProviderError> {
        state.provider_state = serde_json::to_value(self).expect("AWS state serialises");
        dir.save(state)?;
        Ok(())
    }
}

/// How often EC2 is polled while waiting, and for how long at most.
#[derive(Debug, Clone, Copy)]
pub struct Waits {
    /// Between two polls.
    pub poll: Duration,
    /// Instances reaching `running`.
    pub running: Duration,
    /// Instances reaching `terminated`, and the security group and VPC
    /// becoming deletable after them.
    pub teardown: Duration,
}

impl Default for Waits {
    fn default() -> Self {
        Waits {
            poll: Duration::from_secs(5),
            running: Duration::from_secs(600),
            teardown: Duration::from_secs(600),
        }
    }
}

/// When EC2 was asked whether a node runs, and what it said.
type AliveAnswer = (Instant, Result<(), String>);

/// The EC2 provider.
pub struct AwsProvider {
    spec: Option<AwsSpec>,
    fabric: Fabric,
    client: tokio::sync::OnceCell<(Client, String)>,
    /// Where the client's credentials come from, when labctl built it (the
    /// client's own config does not say).
    credentials: std::sync::OnceLock<aws_credential_types::provider::SharedCredentialsProvider>,
    fixed_client: bool,
    owner: String,
    waits: Waits,
    /// Per node: when EC2 was last asked whether it runs, and the answer;
    /// `check_alive` is called every few seconds while SSH is awaited.
    alive_cache: Mutex<HashMap<String, AliveAnswer>>,
}

impl AwsProvider {
    /// A provider for a lab of labs.yaml; the client is built from the
    /// standard AWS configuration on first use. `spec` is `None` when the
    /// lab is being removed and its labs.yaml entry no longer says aws.
    pub fn new(spec: Option<AwsSpec>, fabric: Fabric) -> AwsProvider {
        AwsProvider {
            spec,
            fabric,
            client: tokio::sync::OnceCell::new(),
            credentials: std::sync::OnceLock::new(),
            fixed_client: false,
            owner: default_owner(),
            waits: Waits::default(),
            alive_cache: Mutex::new(HashMap::new()),
        }
    }

    /// A provider using `client` as it is (tests: moto, request mocks).
    pub fn with_client(client: Client, spec: Option<AwsSpec>, fabric: Fabric) -> AwsProvider {
        // The lab's region is the one checked and recorded; the client may
        // sign for another (an emulator answers for any).
        let region = spec
            .as_ref()
            .map(|s| s.region.clone())
            .or_else(|| client.config().region().map(|r| r.to_string()))
            .unwrap_or_default();
        AwsProvider {
            client: tokio::sync::OnceCell::new_with(Some((client, region))),
            fixed_client: true,
            ..AwsProvider::new(spec, fabric)
        }
    }

    /// Sets how long to poll and wait.
    pub fn with_waits(mut self, waits: Waits) -> AwsProvider {
        self.waits = waits;
        self
    }

    /// The `labctl:owner` this provider tags with.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The client for `region` (the lab's, else the recorded one, else the
    /// environment's).
    async fn client(&self, lab: &str, recorded_region: Option<&str>) -> Result<(Client, String), AwsError> {
        let region = self
            .spec
            .as_ref()
            .map(|s| s.region.clone())
            .or_else(|| recorded_region.map(str::to_string));
        self.client
            .get_or_try_init(|| async {
                let config = sdk_config_from_env(region.as_deref()).await;
                if let Some(credentials) = config.credentials_provider() {
                    let _ = self.credentials.set(credentials);
                }
                let client = Client::new(&config);
                let region = client
                    .config()
                    .region()
                    .map(|r| r.to_string())
                    .ok_or_else(|| AwsError::NoRegion { lab: lab.to_string() })?;
                Ok((client, region))
            })
            .await
            .cloned()
    }

    fn spec(&self, lab: &str) -> Result<&AwsSpec, AwsError> {
        self.spec
            .as_ref()
            .ok_or_else(|| AwsError::NoRegion { lab: lab.to_string() })
    }
}

/// The HTTP(S) client for EC2. TLS uses ring (already built for SSH) rather
/// than the SDK's default aws-lc, which would add minutes to a fresh build.
pub fn https_client() -> aws_sdk_ec2::config::SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https()
}

/// The standard AWS configuration (environment, profile, instance role),
/// with `region` when given.
pub async fn sdk_config_from_env(region: Option<&str>) -> aws_config::SdkConfig {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(https_client());
    if let Some(region) = region {
        loader = loader.region(aws_config::Region::new(region.to_string()));
    }
    loader.load().await
}

/// An EC2 client from the standard AWS configuration, with `region` when
/// given.
pub async fn client_from_env(region: Option<&str>) -> Client {
    Client::new(&sdk_config_from_env(region).await)
}

/// `user@host`, for the owner tag.
pub fn default_owner() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    format!("{user}@{host}")
}

/// A filter on one field.
fn filter(name: &str, values: &[&str]) -> Filter {
    Filter::builder()
        .name(name)
        .set_values(Some(values.iter().map(|v| v.to_string()).collect()))
        .build()
}

fn lab_filter(lab: &str) -> Filter {
    filter(&format!("tag:{TAG_LAB}"), &[lab])
}

/// The name every named resource of a lab gets.
pub fn resource_name(lab: &str) -> String {
    format!("labctl-{lab}")
}

/// One EC2 call's context: the lab (and, when known, its id, which
/// narrows every lookup to that one lab), for filters and errors.
struct Ctx<'a> {
    lab: &'a str,
    lab_id: Option<&'a str>,
    region: &'a str,
}

impl Ctx<'_> {
    /// The filters that select this lab's resources.
    fn filters(&self) -> Vec<Filter> {
        let mut filters = vec![lab_filter(self.lab)];
        if let Some(id) = self.lab_id {
            filters.push(filter(&format!("tag:{TAG_LAB_ID}"), &[id]));
        }
        filters
    }

    fn err<E, R>(&self, operation: &'static str, resource: &str, e: aws_sdk_ec2::error::SdkError<E, R>) -> AwsError
    where
        E: aws_sdk_ec2::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        AwsError::from_sdk(operation, self.region, self.lab, resource, e)
    }
}

/// The tags of every resource of the lab of `plan`, plus `Name` and any `extra`.
fn tags(plan: &Plan<'_>, name: &str, extra: &[(&str, &str)]) -> Vec<Tag> {
    [
        ("Name", name),
        (TAG_LAB, plan.lab),
        (TAG_LAB_ID, plan.id.as_str()),
        (TAG_OWNER, plan.owner),
        (TAG_CREATED, plan.created.as_str()),
    ]
    .iter()
    .chain(extra)
    .map(|(k, v)| Tag::builder().key(*k).value(*v).build())
    .collect()
}

fn tag_spec(kind: ResourceType, tags: &[Tag]) -> TagSpecification {
    TagSpecification::builder()
        .resource_type(kind)
        .set_tags(Some(tags.to_vec()))
        .build()
}

fn tag_value<'t>(tags: &'t [Tag], key: &str) -> Option<&'t str> {
    tags.iter().find(|t| t.key() == Some(key)).and_then(|t| t.value())
}

/// An instance of the lab as EC2 reports it.
#[derive(Debug, Clone)]
struct Ec2Instance {
    id: String,
    node: Option<String>,
    state: InstanceStateName,
    reason: String,
    public_ip: Option<String>,
    private_ip: Option<String>,
}

impl Ec2Instance {
    /// The instances of one DescribeInstances answer.
    fn all_of(page: &DescribeInstancesOutput) -> Vec<Ec2Instance> {
        page.reservations()
            .iter()
            .flat_map(|r| r.instances())
            .map(|instance| Ec2Instance {
                id: instance.instance_id().unwrap_or_default().to_string(),
                node: tag_value(instance.tags(), TAG_NODE).map(str::to_string),
                state: instance
                    .state()
                    .and_then(|s| s.name())
                    .cloned()
                    .unwrap_or(InstanceStateName::Pending),
                reason: instance
                    .state_reason()
                    .and_then(|r| r.message())
                    .unwrap_or("no reason given")
                    .to_string(),
                public_ip: instance.public_ip_address().map(str::to_string),
                private_ip: instance.private_ip_address().map(str::to_string),
            })
            .collect()
    }
}

fn live(state: &InstanceStateName) -> bool {
    !matches!(state, InstanceStateName::Terminated | InstanceStateName::ShuttingDown)
}

/// Everything of one lab, as found by tag and from its state.
#[derive(Debug, Default)]
struct Found {
    instances: Vec<String>,
    security_groups: Vec<String>,
    key_pairs: Vec<String>,
    placement_groups: Vec<String>,
    internet_gateways: Vec<(String, Vec<String>)>,
    subnets: Vec<String>,
    vpcs: Vec<String>,
}

impl Found {
    fn add(list: &mut Vec<String>, id: Option<&String>) {
        if let Some(id) = id {
            if !list.contains(id) {
                list.push(id.clone());
            }
        }
    }
}

/// The EC2 operations of one lab in one region.
struct Ec2<'a> {
    client: &'a Client,
    ctx: Ctx<'a>,
    waits: Waits,
}

impl Ec2<'_> {
    async fn instances(&self) -> Result<Vec<Ec2Instance>, AwsError> {
        let mut out = Vec::new();
        let mut pages = self
            .client
            .describe_instances()
            .set_filters(Some(self.ctx.filters()))
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| self.ctx.err("DescribeInstances", &format!("lab `{}`", self.ctx.lab), e))?;
            out.extend(Ec2Instance::all_of(&page));
        }
        Ok(out)
    }

    async fn describe(&self, ids: &[String]) -> Result<Vec<Ec2Instance>, AwsError> {
        let all = self.instances().await?;
        Ok(all.into_iter().filter(|i| ids.contains(&i.id)).collect())
    }

    async fn find(&self, found: &mut Found, efa: bool) -> Result<(), AwsError> {
        let ctx = &self.ctx;
        let what = format!("lab `{}`", ctx.lab);
        for i in self.instances().await? {
            if live(&i.state) {
                Found::add(&mut found.instances, Some(&i.id));
            }
        }
        let groups = self
            .client
            .describe_security_groups()
            .set_filters(Some(ctx.filters()))
            .send()
            .await
            .map_err(|e| ctx.err("DescribeSecurityGroups", &what, e))?;
        for g in groups.security_groups() {
            Found::add(&mut found.security_groups, g.group_id().map(str::to_string).as_ref());
        }
        let keys = self
            .client
            .describe_key_pairs()
            .set_filters(Some(ctx.filters()))
            .send()
            .await
            .map_err(|e| ctx.err("DescribeKeyPairs", &what, e))?;
        for k in keys.key_pairs() {
            Found::add(&mut found.key_pairs, k.key_name().map(str::to_string).as_ref());
        }
        // Only EFA labs have a placement group; asking only then keeps
        // rxe labs working against endpoints without placement groups (moto).
        if efa {
            let groups = self
                .client
                .describe_placement_groups()
                .set_filters(Some(ctx.filters()))
                .send()
                .await
                .map_err(|e| ctx.err("DescribePlacementGroups", &what, e))?;
            for g in groups.placement_groups() {
                Found::add(&mut found.placement_groups, g.group_name().map(str::to_string).as_ref());
            }
        }
        let gateways = self
            .client
            .describe_internet_gateways()
            .set_filters(Some(ctx.filters()))
            .send()
            .await
            .map_err(|e| ctx.err("DescribeInternetGateways", &what, e))?;
        for g in gateways.internet_gateways() {
            let id = g.internet_gateway_id().unwrap_or_default().to_string();
            let vpcs = g
                .attachments()
                .iter()
                .filter_map(|a| a.vpc_id().map(str::to_string))
                .collect();
            if !found.internet_gateways.iter().any(|(known, _)| *known == id) {
                found.internet_gateways.push((id, vpcs));
            }
        }
        let subnets = self
            .client
            .describe_subnets()
            .set_filters(Some(ctx.filters()))
            .send()
            .await
            .map_err(|e| ctx.err("DescribeSubnets", &what, e))?;
        for s in subnets.subnets() {
            Found::add(&mut found.subnets, s.subnet_id().map(str::to_string).as_ref());
        }
        let vpcs = self
            .client
            .describe_vpcs()
            .set_filters(Some(ctx.filters()))
            .send()
            .await
            .map_err(|e| ctx.err("DescribeVpcs", &what, e))?;
        for v in vpcs.vpcs() {
            Found::add(&mut found.vpcs, v.vpc_id().map(str::to_string).as_ref());
        }
        Ok(())
    }

    /// Removes everything in `found`, in dependency order. Resources that
    /// are already gone count as removed.
    async fn remove(&self, found: &Found) -> Result<(), AwsError> {
        let ctx = &self.ctx;
        let gone = |r: Result<(), AwsError>| match r {
            Err(e) if e.is_not_found() => Ok(()),
            other => other,
        };
        if !found.instances.is_empty() {
            let ids = found.instances.join(", ");
            gone(
                self.client
                    .terminate_instances()
                    .set_instance_ids(Some(found.instances.clone()))
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| ctx.err("TerminateInstances", &ids, e)),
            )?;
            self.wait_terminated(&found.instances).await?;
        }
        for group in &found.security_groups {
            // The group stays in use until the instances' network
            // interfaces are gone, a little after `terminated`.
            self.retry_dependency("DeleteSecurityGroup", group, || async {
                self.client
                    .delete_security_group()
                    .group_id(group)
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| ctx.err("DeleteSecurityGroup", group, e))
            })
            .await?;
        }
        for group in &found.placement_groups {
            gone(
                self.client
                    .delete_placement_group()
                    .group_name(group)
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| ctx.err("DeletePlacementGroup", group, e)),
            )?;
        }
        for key in &found.key_pairs {
            gone(
                self.client
                    .delete_key_pair()
                    .key_name(key)
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| ctx.err("DeleteKeyPair", key, e)),
            )?;
        }
        for (gateway, vpcs) in &found.internet_gateways {
            for vpc in vpcs {
                gone(
                    self.client
                        .detach_internet_gateway()
                        .internet_gateway_id(gateway)
                        .vpc_id(vpc)
                        .send()
                        .await
                        .map(|_| ())
                        .map_err(|e| ctx.err("DetachInternetGateway", gateway, e)),
                )?;
            }
            gone(
                self.client
                    .delete_internet_gateway()
                    .internet_gateway_id(gateway)
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| ctx.err("DeleteInternetGateway", gateway, e)),
            )?;
        }
        for subnet in &found.subnets {
            self.retry_dependency("DeleteSubnet", subnet, || async {
                self.client
                    .delete_subnet()
                    .subnet_id(subnet)
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| ctx.err("DeleteSubnet", subnet, e))
            })
            .await?;
        }
        for vpc in &found.vpcs {
            self.retry_dependency("DeleteVpc", vpc, || async {
                self.client
                    .delete_vpc()
                    .vpc_id(vpc)
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| ctx.err("DeleteVpc", vpc, e))
            })
            .await?;
        }
        Ok(())
    }

    /// Runs `call` until it succeeds, the resource is gone, or it fails with
    /// anything but DependencyViolation (or that outlasts the teardown wait).
    async fn retry_dependency<F, Fut>(&self, operation: &str, id: &str, call: F) -> Result<(), AwsError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<(), AwsError>>,
    {
        let started = Instant::now();
        let result = call
            .retry(ConstantBuilder::new().with_delay(self.waits.poll).without_max_times())
            .when(|e| e.code() == Some("DependencyViolation") && started.elapsed() < self.waits.teardown)
            .notify(|_, _| tracing::debug!(%operation, %id, "still in use; retrying"))
            .await;
        match result {
            Err(e) if e.is_not_found() => Ok(()),
            other => other,
        }
    }

    /// Waits (EC2's InstanceTerminated waiter) until every instance of
    /// `ids` is terminated.
    async fn wait_terminated(&self, ids: &[String]) -> Result<(), AwsError> {
        let waited = self
            .client
            .wait_until_instance_terminated()
            .set_instance_ids(Some(ids.to_vec()))
            .wait(self.waits.teardown)
            .await;
        let left = |found: Vec<Ec2Instance>| -> Vec<Ec2Instance> {
            found
                .into_iter()
                .filter(|i| i.state != InstanceStateName::Terminated)
                .collect()
        };
        match waited {
            Ok(_) => Ok(()),
            Err(WaiterError::ExceededMaxWait(e)) => {
                // The waiter keeps no answer: ask once more to name what is left.
                let left: Vec<_> = left(self.describe(ids).await?).into_iter().map(|i| i.id).collect();
                if left.is_empty() {
                    return Ok(());
                }
                Err(AwsError::Timeout {
                    what: format!("instances {} to terminate", left.join(", ")),
                    waited_s: e.elapsed().as_secs(),
                })
            }
            // Pending or stopping: someone else started or stopped it.
            Err(WaiterError::FailureState(f)) => {
                let found = f.final_poll().as_result().map(Ec2Instance::all_of).unwrap_or_default();
                let bad = left(found).into_iter().next();
                Err(AwsError::NotTerminating {
                    instance: bad.as_ref().map_or_else(|| ids.join(", "), |i| i.id.clone()),
                    state: bad.map_or_else(|| "not terminated".into(), |i| i.state.as_str().to_string()),
                })
            }
            Err(e) => Err(self.waiter_failed(&ids.join(", "), e)),
        }
    }

    /// A waiter's DescribeInstances call that failed, or a waiter that
    /// could not start.
    fn waiter_failed(&self, ids: &str, e: WaiterError<DescribeInstancesOutput, DescribeInstancesError>) -> AwsError {
        match e {
            WaiterError::OperationFailed(e) => self.ctx.err("DescribeInstances", ids, e.into_error()),
            other => AwsError::Api {
                operation: "DescribeInstances",
                resource: ids.to_string(),
                code: "unknown".into(),
                message: aws_sdk_ec2::error::DisplayErrorContext(&other).to_string(),
            },
        }
    }
}

/// Everything `create` needs to know about the lab beyond labs.yaml.
struct Plan<'a> {
    lab: &'a str,
    spec: &'a AwsSpec,
    efa: bool,
    owner: &'a str,
    created: String,
    id: String,
}

impl Plan<'_> {
    fn tags(&self, name: &str, extra: &[(&str, &str)]) -> Vec<Tag> {
        tags(self, name, extra)
    }
}

impl Ec2<'_> {
    async fn ensure_key_pair(&self, plan: &Plan<'_>, public_key: &str) -> Result<String, AwsError> {
        let name = resource_name(plan.lab);
        let existing = self
            .client
            .describe_key_pairs()
            .filters(lab_filter(plan.lab))
            .send()
            .await
            .map_err(|e| self.ctx.err("DescribeKeyPairs", &name, e))?;
        if let Some(key) = existing.key_pairs().iter().find_map(|k| k.key_name()) {
            return Ok(key.to_string());
        }
        self.client
            .import_key_pair()
            .key_name(&name)
            .public_key_material(Blob::new(public_key.trim().as_bytes()))
            .tag_specifications(tag_spec(ResourceType::KeyPair, &plan.tags(&name, &[])))
            .send()
            .await
            .map_err(|e| self.ctx.err("ImportKeyPair", &name, e))?;
        Ok(name)
    }

    /// The lab's own VPC, internet gateway and subnet; records each as it
    /// appears. Returns the subnet.
    async fn ensure_network(
        &self,
        plan: &Plan<'_>,
        aws: &mut AwsState,
        mut save: impl FnMut(&AwsState) -> Result<(), ProviderError>,
    ) -> Result<String, ProviderError> {
        let ctx = &self.ctx;
        let name = resource_name(plan.lab);
        let vpc = match self
            .client
            .describe_vpcs()
            .filters(lab_filter(plan.lab))
            .send()
            .await
            .map_err(|e| ctx.err("DescribeVpcs", &name, e))?
            .vpcs()
            .iter()
            .find_map(|v| v.vpc_id())
        {
            Some(id) => id.to_string(),
            None => self
                .client
                .create_vpc()
                .cidr_block(VPC_CIDR)
                .tag_specifications(tag_spec(ResourceType::Vpc, &plan.tags(&name, &[])))
                .send()
                .await
                .map_err(|e| ctx.err("CreateVpc", &name, e))?
                .vpc()
                .and_then(|v| v.vpc_id())
                .unwrap_or_default()
                .to_string(),
        };
        aws.vpc_id = Some(vpc.clone());
        save(aws)?;
        let gateway = self
            .client
            .describe_internet_gateways()
            .filters(lab_filter(plan.lab))
            .send()
            .await
            .map_err(|e| ctx.err("DescribeInternetGateways", &name, e))?
            .internet_gateways()
            .first()
            .map(|g| {
                let attached = g.attachments().iter().any(|a| a.vpc_id() == Some(vpc.as_str()));
                (g.internet_gateway_id().unwrap_or_default().to_string(), attached)
            });
        let (gateway, attached) = match gateway {
            Some(found) => found,
            None => {
                let id = self
                    .client
                    .create_internet_gateway()
                    .tag_specifications(tag_spec(ResourceType::InternetGateway, &plan.tags(&name, &[])))
                    .send()
                    .await
                    .map_err(|e| ctx.err("CreateInternetGateway", &name, e))?
                    .internet_gateway()
                    .and_then(|g| g.internet_gateway_id())
                    .unwrap_or_default()
                    .to_string();
                (id, false)
            }
        };
        aws.internet_gateway_id = Some(gateway.clone());
        save(aws)?;
        if !attached {
            self.client
                .attach_internet_gateway()
                .internet_gateway_id(&gateway)
                .vpc_id(&vpc)
                .send()
                .await
                .map_err(|e| ctx.err("AttachInternetGateway", &gateway, e))?;
            let tables = self
                .client
                .describe_route_tables()
                .filters(filter("vpc-id", &[&vpc]))
                .filters(filter("association.main", &["true"]))
                .send()
                .await
                .map_err(|e| ctx.err("DescribeRouteTables", &vpc, e))?;
            let table = tables
                .route_tables()
                .iter()
                .find_map(|t| t.route_table_id())
                .unwrap_or_default()
                .to_string();
            self.client
                .create_route()
                .route_table_id(&table)
                .destination_cidr_block("0.0.0.0/0")
                .gateway_id(&gateway)
                .send()
                .await
                .map_err(|e| ctx.err("CreateRoute", &table, e))?;
        }
        let subnet = match self
            .client
            .describe_subnets()
            .filters(lab_filter(plan.lab))
            .send()
            .await
            .map_err(|e| ctx.err("DescribeSubnets", &name, e))?
            .subnets()
            .iter()
            .find_map(|s| s.subnet_id())
        {
            Some(id) => id.to_string(),
            None => self
                .client
                .create_subnet()
                .vpc_id(&vpc)
                .cidr_block(SUBNET_CIDR)
                .set_availability_zone(plan.spec.availability_zone.clone())
                .tag_specifications(tag_spec(ResourceType::Subnet, &plan.tags(&name, &[])))
                .send()
                .await
                .map_err(|e| ctx.err("CreateSubnet", &name, e))?
                .subnet()
                .and_then(|s| s.subnet_id())
                .unwrap_or_default()
                .to_string(),
        };
        aws.subnet_id = Some(subnet.clone());
        save(aws)?;
        Ok(subnet)
    }

    /// The lab's security group: all traffic to and from itself, SSH from
    /// `ssh_cidr`. EFA labs also lose the default allow-all egress rule, as
    /// the EFA guide asks; rxe labs keep it (Ubuntu fetches
    /// linux-modules-extra).
    async fn ensure_security_group(
        &self,
        plan: &Plan<'_>,
        vpc: &str,
        ssh_cidr: &str,
        record: impl FnOnce(&str) -> Result<(), ProviderError>,
    ) -> Result<String, ProviderError> {
        let ctx = &self.ctx;
        let name = resource_name(plan.lab);
        let existing = self
            .client
            .describe_security_groups()
            .filters(lab_filter(plan.lab))
            .filters(filter("vpc-id", &[vpc]))
            .send()
            .await
            .map_err(|e| ctx.err("DescribeSecurityGroups", &name, e))?;
        if let Some(found) = existing.security_groups().iter().find(|g| g.group_id().is_some()) {
            let id = found.group_id().unwrap_or_default();
            record(id)?;
            // Reused as found, except SSH: the controller's address changes (a laptop on
            // another network) and without its rule every SSH wait would time out.
            if !allows_ssh_from(found.ip_permissions(), ssh_cidr) {
                self.client
                    .authorize_security_group_ingress()
                    .group_id(id)
                    .ip_permissions(ssh_rule(ssh_cidr))
                    .send()
                    .await
                    .map_err(|e| ctx.err("AuthorizeSecurityGroupIngress", id, e))?;
            }
            return Ok(id.to_string());
        }
        let group = self
            .client
            .create_security_group()
            .group_name(&name)
            .description(format!(
                "labctl lab {}: the nodes talk to each other; SSH from the controller",
                plan.lab
            ))
            .vpc_id(vpc)
            .tag_specifications(tag_spec(ResourceType::SecurityGroup, &plan.tags(&name, &[])))
            .send()
            .await
            .map_err(|e| ctx.err("CreateSecurityGroup", &name, e))?
            .group_id()
            .unwrap_or_default()
            .to_string();
        record(&group)?;
        let to_self = IpPermission::builder()
            .ip_protocol("-1")
            .user_id_group_pairs(UserIdGroupPair::builder().group_id(&group).build())
            .build();
        self.client
            .authorize_security_group_ingress()
            .group_id(&group)
            .ip_permissions(to_self.clone())
            .ip_permissions(ssh_rule(ssh_cidr))
            .send()
            .await
            .map_err(|e| ctx.err("AuthorizeSecurityGroupIngress", &group, e))?;
        if plan.efa {
            self.client
                .authorize_security_group_egress()
                .group_id(&group)
                .ip_permissions(to_self)
                .send()
                .await
                .map_err(|e| ctx.err("AuthorizeSecurityGroupEgress", &group, e))?;
            self.client
                .revoke_security_group_egress()
                .group_id(&group)
                .ip_permissions(
                    IpPermission::builder()
                        .ip_protocol("-1")
                        .ip_ranges(IpRange::builder().cidr_ip("0.0.0.0/0").build())
                        .build(),
                )
                .send()
                .await
                .map_err(|e| ctx.err("RevokeSecurityGroupEgress", &group, e))?;
        }
        Ok(group)
    }

    async fn ensure_placement_group(&self, plan: &Plan<'_>) -> Result<String, AwsError> {
        let name = resource_name(plan.lab);
        let existing = self
            .client
            .describe_placement_groups()
            .filters(lab_filter(plan.lab))
            .send()
            .await
            .map_err(|e| self.ctx.err("DescribePlacementGroups", &name, e))?;
        if let Some(group) = existing.placement_groups().iter().find_map(|g| g.group_name()) {
            return Ok(group.to_string());
        }
        self.client
            .create_placement_group()
            .group_name(&name)
            .strategy(PlacementStrategy::Cluster)
            .tag_specifications(tag_spec(ResourceType::PlacementGroup, &plan.tags(&name, &[])))
            .send()
            .await
            .map_err(|e| self.ctx.err("CreatePlacementGroup", &name, e))?;
        Ok(name)
    }

    async fn launch(
        &self,
        plan: &Plan<'_>,
        node: &ResolvedNode,
        login: NodeLogin<'_>,
        subnet: &str,
        group: &str,
        placement_group: Option<&str>,
    ) -> Result<String, AwsError> {
        let name = format!("{}-{}", resource_name(plan.lab), node.name);
        let tags = plan.tags(&name, &[(TAG_NODE, &node.name)]);
        let image = match (&plan.spec.ami, &plan.spec.ami_ssm_parameter) {
            (Some(ami), _) => ami.clone(),
            // EC2 resolves the parameter itself at launch.
            (None, Some(parameter)) => format!("resolve:ssm:{parameter}"),
            (None, None) => String::new(),
        };
        let mut nic = InstanceNetworkInterfaceSpecification::builder()
            .device_index(0)
            .subnet_id(subnet)
            .groups(group)
            .delete_on_termination(true)
            .associate_public_ip_address(plan.spec.ssh_address == SshAddress::Public);
        if plan.efa {
            nic = nic.interface_type("efa");
        }
        let placement = (plan.spec.availability_zone.is_some() || placement_group.is_some()).then(|| {
            Placement::builder()
                .set_availability_zone(plan.spec.availability_zone.clone())
                .set_group_name(placement_group.map(str::to_string))
                .build()
        });
        // The token makes a retried launch of the same node a no-op.
        let token: String = format!("{}-{}-{}", plan.lab, node.name, plan.created)
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .take(64)
            .collect();
        let out = self
            .client
            .run_instances()
            .image_id(image)
            .instance_type(InstanceType::from(plan.spec.instance_type.as_str()))
            .min_count(1)
            .max_count(1)
            .key_name(login.key_pair)
            .user_data(user_data(login.host_key))
            .network_interfaces(nic.build())
            .set_placement(placement)
            .client_token(token)
            .tag_specifications(tag_spec(ResourceType::Instance, &tags))
            .tag_specifications(tag_spec(ResourceType::Volume, &tags))
            .tag_specifications(tag_spec(ResourceType::NetworkInterface, &tags))
            .send()
            .await
            .map_err(|e| self.ctx.err("RunInstances", &format!("node `{}`", node.name), e))?;
        Ok(out
            .instances()
            .first()
            .and_then(|i| i.instance_id())
            .unwrap_or_default()
            .to_string())
    }

    /// Waits until every instance of `ids` (node → id) runs; fails on one
    /// that stops or terminates instead.
    async fn wait_running(&self, ids: &BTreeMap<String, String>) -> Result<Vec<Ec2Instance>, AwsError> {
        let wanted: Vec<String> = ids.values().cloned().collect();
        let waited = self
            .client
            .wait_until_instance_running()
            .set_instance_ids(Some(wanted.clone()))
            .wait(self.waits.running)
            .await;
        let failed = |found: &[Ec2Instance]| {
            found
                .iter()
                .find(|i| !matches!(i.state, InstanceStateName::Pending | InstanceStateName::Running))
                .map(|bad| AwsError::InstanceFailed {
                    node: node_of(ids, &bad.id),
                    instance: bad.id.clone(),
                    state: bad.state.as_str().to_string(),
                    reason: bad.reason.clone(),
                })
        };
        match waited {
            Ok(done) => Ok(done.as_result().map(Ec2Instance::all_of).unwrap_or_default()),
            // Shutting down, terminated or stopping.
            Err(WaiterError::FailureState(f)) => {
                let found = f.final_poll().as_result().map(Ec2Instance::all_of).unwrap_or_default();
                Err(failed(&found).unwrap_or_else(|| AwsError::Timeout {
                    what: format!("instances to run: {}", wanted.join(", ")),
                    waited_s: 0,
                }))
            }
            Err(WaiterError::ExceededMaxWait(e)) => {
                // The waiter keeps no answer: ask once more to name what is
                // not running (or stopped, which the waiter does not fail on).
                let found = self.describe(&wanted).await?;
                if let Some(bad) = failed(&found) {
                    return Err(bad);
                }
                let pending: Vec<_> = found
                    .iter()
                    .filter(|i| i.state != InstanceStateName::Running)
                    .map(|i| format!("{} ({})", node_of(ids, &i.id), i.id))
                    .collect();
                Err(AwsError::Timeout {
                    what: format!("instances to run: {}", pending.join(", ")),
                    waited_s: e.elapsed().as_secs(),
                })
            }
            Err(e) => Err(self.waiter_failed(&wanted.join(", "), e)),
        }
    }
}

fn node_of(ids: &BTreeMap<String, String>, id: &str) -> String {
    ids.iter()
        .find(|(_, v)| *v == id)
        .map(|(k, _)| k.clone())
        .unwrap_or_else(|| id.to_string())
}

/// Where the controller learns its public IPv4 address (AWS's own service).
const CHECKIP_URL: &str = "https://checkip.amazonaws.com/";

/// This controller's public IPv4 address as a /32, from [`CHECKIP_URL`]
/// over HTTPS (the system's trust roots), within 10 s.
async fn controller_cidr() -> Result<String, AwsError> {
    let err = |detail: String| AwsError::ControllerAddress { detail };
    let answer = tokio::time::timeout(Duration::from_secs(10), https_get(CHECKIP_URL))
        .await
        .map_err(|_| err(format!("{CHECKIP_URL} did not answer within 10 s")))?
        .map_err(|e| err(format!("{CHECKIP_URL}: {e}")))?;
    parse_checkip(&answer).ok_or_else(|| err(format!("{CHECKIP_URL} answered {:?}", answer.trim())))
}

/// The body of a GET of `url`, HTTPS only, as text; an error says every
/// cause (hyper's own message is only "client error (Connect)").
async fn https_get(url: &str) -> Result<String, String> {
    https_get_inner(url).await.map_err(|e| {
        let mut text = e.to_string();
        let mut source = e.source();
        while let Some(cause) = source {
            text.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        text
    })
}

async fn https_get_inner(url: &str) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    use http_body_util::BodyExt;
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(rustls::crypto::ring::default_provider())?
        .https_only()
        .enable_http1()
        .build();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, http_body_util::Empty<bytes::Bytes>>(connector);
    let response = client.get(url.parse()?).await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    if !status.is_success() {
        return Err(format!("HTTP {status}").into());
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// checkip's answer (an address and a newline) as a /32.
fn parse_checkip(answer: &str) -> Option<String> {
    answer
        .trim()
        .parse::<std::net::Ipv4Addr>()
        .ok()
        .map(|ip| format!("{ip}/32"))
}

impl AwsProvider {
    /// Checks credentials, region, zone and instance type (EFA support for
    /// fabric efa) without creating anything.
    pub async fn check(&self, lab: &str) -> Result<(), AwsError> {
        let spec = self.spec(lab)?.clone();
        let (client, region) = self.client(lab, None).await?;
        let ctx = Ctx {
            lab,
            lab_id: None,
            region: &region,
        };
        // Credentials first, so that a missing key is not reported as
        // whatever the first EC2 call happens to fail with.
        if let Some(credentials) = self.credentials.get() {
            use aws_credential_types::provider::ProvideCredentials;
            credentials
                .provide_credentials()
                .await
                .map_err(|e| AwsError::NoCredentials {
                    detail: error::credentials_detail(&aws_sdk_ec2::error::DisplayErrorContext(&e).to_string()),
                })?;
        }
        let regions = client
            .describe_regions()
            .all_regions(true)
            .send()
            .await
            .map_err(|e| ctx.err("DescribeRegions", &region, e))?;
        let known: Vec<String> = regions
            .regions()
            .iter()
            .filter_map(|r| r.region_name().map(str::to_string))
            .collect();
        if !known.contains(&region) {
            return Err(AwsError::UnknownRegion { region, known });
        }
        if let Some(zone) = &spec.availability_zone {
            let zones = client
                .describe_availability_zones()
                .send()
                .await
                .map_err(|e| ctx.err("DescribeAvailabilityZones", zone, e))?;
            let known: Vec<String> = zones
                .availability_zones()
                .iter()
                .filter_map(|z| z.zone_name().map(str::to_string))
                .collect();
            if !known.contains(zone) {
                return Err(AwsError::UnknownZone {
                    zone: zone.clone(),
                    region,
                    known,
                });
            }
        }
        let types = client
            .describe_instance_types()
            .instance_types(InstanceType::from(spec.instance_type.as_str()))
            .send()
            .await
            .map_err(
                |e| match AwsError::from_sdk("DescribeInstanceTypes", &region, lab, &spec.instance_type, e) {
                    AwsError::Api { code, message, .. } if code.starts_with("InvalidInstanceType") => {
                        AwsError::UnknownInstanceType {
                            instance_type: spec.instance_type.clone(),
                            region: region.clone(),
                            detail: format!("{code}: {message}"),
                        }
                    }
                    other => other,
                },
            )?;
        let Some(info) = types.instance_types().first() else {
            return Err(AwsError::UnknownInstanceType {
                instance_type: spec.instance_type.clone(),
                region,
                detail: "DescribeInstanceTypes returned nothing".into(),
            });
        };
        if self.fabric == Fabric::Efa {
            let supported = info.network_info().and_then(|n| n.efa_supported());
            if supported != Some(true) {
                return Err(AwsError::NoEfa {
                    instance_type: spec.instance_type.clone(),
                    supported: supported.map(|s| s.to_string()).unwrap_or_else(|| "unknown".into()),
                });
            }
        }
        Ok(())
    }

    /// Creates the lab's resources (reusing any that carry its tags) and
    /// fills `state`.
    async fn create_resources(
        &self,
        lab: &LabSpec,
        nodes: &[ResolvedNode],
        dir: &LabDir,
        state: &mut LabState,
        keys: &NodeKeys,
        reporter: &dyn Reporter,
    ) -> Result<(), ProviderError> {
        let spec = self.spec(&lab.name)?;
        let (client, region) = self.client(&lab.name, None).await?;
        let ec2 = Ec2 {
            client: &client,
            ctx: Ctx {
                lab: &lab.name,
                lab_id: None,
                region: &region,
            },
            waits: self.waits,
        };
        let plan = Plan {
            lab: &lab.name,
            spec,
            efa: lab.fabric == Fabric::Efa,
            owner: &self.owner,
            created: state.created_at.clone(),
            id: state.id.clone(),
        };
        let mut aws = AwsState::from_lab_state(state).unwrap_or_default();
        aws.region = region.clone();
        aws.save(dir, state)?;

        let key = step(
            reporter,
            "lab",
            "key pair",
            ec2.ensure_key_pair(&plan, &keys.authorized_key),
        )
        .await?;
        aws.key_name = Some(key.clone());
        aws.save(dir, state)?;

        let (subnet, vpc) = match &spec.subnet_id {
            Some(subnet) => {
                let found = client
                    .describe_subnets()
                    .subnet_ids(subnet)
                    .send()
                    .await
                    .map_err(|e| ec2.ctx.err("DescribeSubnets", subnet, e))?;
                let vpc = found
                    .subnets()
                    .first()
                    .and_then(|s| s.vpc_id())
                    .unwrap_or_default()
                    .to_string();
                (subnet.clone(), vpc)
            }
            None => {
                let subnet = step(
                    reporter,
                    "lab",
                    "network",
                    ec2.ensure_network(&plan, &mut aws, |a| a.save(dir, &mut state.clone())),
                )
                .await?;
                aws.save(dir, state)?;
                (subnet, aws.vpc_id.clone().unwrap_or_default())
            }
        };

        let ssh_cidr = match &spec.ssh_cidr {
            Some(cidr) => cidr.clone(),
            None => controller_cidr().await?,
        };
        let mut recorded = None;
        let group = step(
            reporter,
            "lab",
            "security group",
            ec2.ensure_security_group(&plan, &vpc, &ssh_cidr, |id| {
                recorded = Some(id.to_string());
                let mut with_group = aws.clone();
                with_group.security_group_id = Some(id.to_string());
                with_group.save(dir, state)
            }),
        )
        .await?;
        aws.security_group_id = recorded.or(Some(group.clone()));

        let placement_group = if plan.efa {
            let group = step(reporter, "lab", "placement group", ec2.ensure_placement_group(&plan)).await?;
            aws.placement_group = Some(group.clone());
            aws.save(dir, state)?;
            Some(group)
        } else {
            None
        };

        let existing = ec2.instances().await?;
        for node in nodes {
            let reuse = existing
                .iter()
                .find(|i| i.node.as_deref() == Some(node.name.as_str()) && live(&i.state));
            let id = match reuse {
                Some(instance) => instance.id.clone(),
                None => {
                    step(
                        reporter,
                        &node.name,
                        "launch",
                        ec2.launch(
                            &plan,
                            node,
                            NodeLogin {
                                key_pair: &key,
                                host_key: keys.host_key(&node.name)?,
                            },
                            &subnet,
                            &group,
                            placement_group.as_deref(),
                        ),
                    )
                    .await?
                }
            };
            aws.instances.insert(node.name.clone(), id);
            aws.save(dir, state)?;
        }

        let running = step(reporter, "lab", "instances running", ec2.wait_running(&aws.instances)).await?;
        let subnet_prefix = client
            .describe_subnets()
            .subnet_ids(&subnet)
            .send()
            .await
            .map_err(|e| ec2.ctx.err("DescribeSubnets", &subnet, e))?
            .subnets()
            .first()
            .and_then(|s| s.cidr_block())
            .and_then(|c| c.split_once('/'))
            .and_then(|(_, p)| p.parse().ok())
            .unwrap_or(24);
        state.nodes.clear();
        for node in nodes {
            let id = &aws.instances[&node.name];
            let instance = running.iter().find(|i| &i.id == id).expect("waited for every instance");
            let private: std::net::Ipv4Addr = instance
                .private_ip
                .as_deref()
                .and_then(|ip| ip.parse().ok())
                .ok_or_else(|| AwsError::Api {
                    operation: "DescribeInstances",
                    resource: id.clone(),
                    code: "NoPrivateAddress".into(),
                    message: "the running instance reports no private IPv4 address".into(),
                })?;
            let ssh_host = match spec.ssh_address {
                SshAddress::Private => private.to_string(),
                SshAddress::Public => instance.public_ip.clone().ok_or_else(|| AwsError::NoPublicAddress {
                    node: node.name.clone(),
                    instance: id.clone(),
                })?,
            };
            state.nodes.push(NodeState {
                name: node.name.clone(),
                ssh_host,
                ssh_port: 22,
                ssh_user: spec.ssh_user.clone(),
                ssh_identity: None,
                ssh_jump: None,
                ssh_agent: false,
                data_addr: private,
                data_prefix: subnet_prefix,
                data_netdev: None,
                rdma_device: None,
                host_key: Some(keys.host_key(&node.name)?.public.trim().to_string()),
                pid: None,
                agent_sha256: None,
                agent_port: AGENT_PORT,
                provisioned: false,
                host: None,
            });
        }
        aws.save(dir, state)?;
        Ok(())
    }

    /// Removes every resource of `lab`: those recorded in `recorded` and
    /// those carrying its tag.
    pub async fn delete_lab(&self, lab: &str, recorded: Option<&AwsState>) -> Result<(), AwsError> {
        self.delete_tagged(lab, None, recorded).await
    }

    /// Removes every resource of lab `lab` whose id tag is `lab_id` (another
    /// lab of the same name keeps its own).
    pub async fn delete_lab_by_id(&self, lab: &str, lab_id: &str) -> Result<(), AwsError> {
        self.delete_tagged(lab, Some(lab_id), None).await
    }

    async fn delete_tagged(
        &self,
        lab: &str,
        lab_id: Option<&str>,
        recorded: Option<&AwsState>,
    ) -> Result<(), AwsError> {
        let (client, region) = self.client(lab, recorded.map(|r| r.region.as_str())).await?;
        let ec2 = Ec2 {
            client: &client,
            ctx: Ctx {
                lab,
                lab_id,
                region: &region,
            },
            waits: self.waits,
        };
        let mut found = Found::default();
        if let Some(r) = recorded {
            for id in r.instances.values() {
                Found::add(&mut found.instances, Some(id));
            }
            Found::add(&mut found.security_groups, r.security_group_id.as_ref());
            Found::add(&mut found.key_pairs, r.key_name.as_ref());
            Found::add(&mut found.placement_groups, r.placement_group.as_ref());
            Found::add(&mut found.subnets, r.subnet_id.as_ref());
            Found::add(&mut found.vpcs, r.vpc_id.as_ref());
            if let (Some(gateway), Some(vpc)) = (&r.internet_gateway_id, &r.vpc_id) {
                found.internet_gateways.push((gateway.clone(), vec![vpc.clone()]));
            }
        }
        let efa = self.fabric == Fabric::Efa || recorded.is_some_and(|r| r.placement_group.is_some());
        ec2.find(&mut found, efa).await?;
        // Recorded instances that are already terminated need no wait.
        if !found.instances.is_empty() {
            let states = ec2.describe(&found.instances).await?;
            found
                .instances
                .retain(|id| states.iter().any(|i| &i.id == id && live(&i.state)));
        }
        ec2.remove(&found).await
    }
}

#[async_trait]
impl Provider for AwsProvider {
    async fn preflight(&self, lab: &LabSpec, _nodes: &[ResolvedNode]) -> Result<(), ProviderError> {
        Ok(self.check(&lab.name).await?)
    }

    async fn create(
        &self,
        lab: &LabSpec,
        nodes: &[ResolvedNode],
        dir: &LabDir,
        state: &mut LabState,
        keys: &NodeKeys,
        reporter: &dyn Reporter,
    ) -> Result<(), ProviderError> {
        self.create_resources(lab, nodes, dir, state, keys, reporter).await
    }

    async fn check_alive(&self, _dir: &LabDir, state: &LabState, node: &str) -> Result<(), ProviderError> {
        let down = |reason: String| ProviderError::NodeDown {
            node: node.to_string(),
            reason,
            console: "EC2 console output (`aws ec2 get-console-output`)".into(),
            console_tail: String::new(),
        };
        let Some(aws) = AwsState::from_lab_state(state) else {
            return Err(down("the lab's state records no AWS resources".into()));
        };
        let Some(id) = aws.instances.get(node).cloned() else {
            return Err(down("no EC2 instance is recorded for it".into()));
        };
        if let Some((at, answer)) = self.alive_cache.lock().expect("alive cache").get(node) {
            if at.elapsed() < Duration::from_secs(10) {
                return answer.clone().map_err(down);
            }
        }
        let lab = state.lab.clone();
        let client = match self.client.get().filter(|_| self.fixed_client).map(|(c, _)| c.clone()) {
            Some(c) => c,
            None => client_from_env(Some(&aws.region)).await,
        };
        let ec2 = Ec2 {
            client: &client,
            ctx: Ctx {
                lab: &lab,
                lab_id: None,
                region: &aws.region,
            },
            waits: self.waits,
        };
        let limit = crate::provider::CHECK_ALIVE_TIMEOUT;
        let answer = match tokio::time::timeout(limit, ec2.describe(std::slice::from_ref(&id))).await {
            Err(_) => Err(format!(
                "EC2 did not answer about instance {id} within {} s",
                limit.as_secs()
            )),
            Ok(Err(e)) => Err(format!("cannot ask EC2 about instance {id}: {e}")),
            Ok(Ok(found)) => match found.first() {
                None => Err(format!("EC2 instance {id} no longer exists")),
                Some(i) if matches!(i.state, InstanceStateName::Running | InstanceStateName::Pending) => Ok(()),
                Some(i) => Err(format!("EC2 instance {id} is {}: {}", i.state.as_str(), i.reason)),
            },
        };
        self.alive_cache
            .lock()
            .expect("alive cache")
            .insert(node.to_string(), (Instant::now(), answer.clone()));
        answer.map_err(down)
    }

    async fn delete(&self, dir: &LabDir, state: Option<&LabState>) -> Result<(), ProviderError> {
        let lab = state.map(|s| s.lab.clone()).unwrap_or_else(|| {
            dir.root()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
        let recorded = state.and_then(AwsState::from_lab_state);
        Ok(self.delete_lab(&lab, recorded.as_ref()).await?)
    }
}

/// A resource carrying labctl's tags, as `down --leaked` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Leftover {
    /// The lab it belongs to.
    pub lab: String,
    /// `labctl:lab-id`: the lab's random id; `None` on resources of an older
    /// labctl, which tagged by name only.
    pub lab_id: Option<String>,
    /// `instance`, `security-group`, `key-pair`, `placement-group`, `vpc`, `subnet`, `internet-gateway`.
    pub kind: &'static str,
    /// Its id or name.
    pub id: String,
    /// `labctl:owner`.
    pub owner: String,
    /// `labctl:created`.
    pub created: String,
}

/// Every resource in the provider's region tagged by labctl for `owner`,
/// sorted by lab. Placement groups are listed where the endpoint supports
/// them; a failure there is returned as a note, not an error.
pub async fn find_leftovers(client: &Client, owner: &str) -> Result<(Vec<Leftover>, Vec<String>), AwsError> {
    let region = client.config().region().map(|r| r.to_string()).unwrap_or_default();
    let ctx = Ctx {
        lab: "(any)",
        lab_id: None,
        region: &region,
    };
    let owned = filter(&format!("tag:{TAG_OWNER}"), &[owner]);
    let mut out = Vec::new();
    let mut notes = Vec::new();
    let mut push = |kind: &'static str, id: Option<&str>, tags: &[Tag]| {
        if let (Some(id), Some(lab)) = (id, tag_value(tags, TAG_LAB)) {
            out.push(Leftover {
                lab: lab.to_string(),
                lab_id: tag_value(tags, TAG_LAB_ID).map(str::to_string),
                kind,
                id: id.to_string(),
                owner: tag_value(tags, TAG_OWNER).unwrap_or_default().to_string(),
                created: tag_value(tags, TAG_CREATED).unwrap_or_default().to_string(),
            });
        }
    };
    let instances = client
        .describe_instances()
        .filters(owned.clone())
        .send()
        .await
        .map_err(|e| ctx.err("DescribeInstances", "leftovers", e))?;
    for i in instances.reservations().iter().flat_map(|r| r.instances()) {
        if i.state().and_then(|s| s.name()).is_some_and(live) {
            push("instance", i.instance_id(), i.tags());
        }
    }
    let groups = client
        .describe_security_groups()
        .filters(owned.clone())
        .send()
        .await
        .map_err(|e| ctx.err("DescribeSecurityGroups", "leftovers", e))?;
    for g in groups.security_groups() {
        push("security-group", g.group_id(), g.tags());
    }
    let keys = client
        .describe_key_pairs()
        .filters(owned.clone())
        .send()
        .await
        .map_err(|e| ctx.err("DescribeKeyPairs", "leftovers", e))?;
    for k in keys.key_pairs() {
        push("key-pair", k.key_name(), k.tags());
    }
    match client.describe_placement_groups().filters(owned.clone()).send().await {
        Ok(groups) => {
            for g in groups.placement_groups() {
                push("placement-group", g.group_name(), g.tags());
            }
        }
        Err(e) => notes.push(format!(
            "placement groups in {region} could not be listed: {}",
            ctx.err("DescribePlacementGroups", "leftovers", e)
        )),
    }
    let gateways = client
        .describe_internet_gateways()
        .filters(owned.clone())
        .send()
        .await
        .map_err(|e| ctx.err("DescribeInternetGateways", "leftovers", e))?;
    for g in gateways.internet_gateways() {
        push("internet-gateway", g.internet_gateway_id(), g.tags());
    }
    let subnets = client
        .describe_subnets()
        .filters(owned.clone())
        .send()
        .await
        .map_err(|e| ctx.err("DescribeSubnets", "leftovers", e))?;
    for s in subnets.subnets() {
        push("subnet", s.subnet_id(), s.tags());
    }
    let vpcs = client
        .describe_vpcs()
        .filters(owned)
        .send()
        .await
        .map_err(|e| ctx.err("DescribeVpcs", "leftovers", e))?;
    for v in vpcs.vpcs() {
        push("vpc", v.vpc_id(), v.tags());
    }
    out.sort_by(|a, b| (&a.lab, &a.lab_id, a.kind, &a.id).cmp(&(&b.lab, &b.lab_id, b.kind, &b.id)));
    Ok((out, notes))
}

/// Tagged resources of one region whose lab labctl does not know here.
#[derive(Debug)]
pub struct LeakedScan {
    /// The region searched.
    pub region: String,
    /// What was found, sorted by lab.
    pub leftovers: Vec<Leftover>,
    /// What could not be searched, and why.
    pub notes: Vec<String>,
    client: Client,
}

/// Lists the resources `owner` tagged in `client`'s region whose lab
/// `is_known` rejects (a live lab is `labctl down`'s business, not a leak).
pub async fn scan_leaked(
    client: Client,
    owner: &str,
    is_known: impl Fn(&Leftover) -> bool,
) -> Result<LeakedScan, AwsError> {
    let region = client.config().region().map(|r| r.to_string()).unwrap_or_default();
    let (mut leftovers, notes) = find_leftovers(&client, owner).await?;
    leftovers.retain(|l| !is_known(l));
    Ok(LeakedScan {
        region,
        leftovers,
        notes,
        client,
    })
}

impl LeakedScan {
    /// Deletes every leaked lab's resources (by tag, in dependency order):
    /// by the lab's id where the resources carry one, so a live lab of the
    /// same name keeps its own; by name for an older labctl's resources.
    pub async fn delete(&self, waits: Waits) -> Result<(), AwsError> {
        let mut labs: Vec<(&str, Option<&str>)> = self
            .leftovers
            .iter()
            .map(|l| (l.lab.as_str(), l.lab_id.as_deref()))
            .collect();
        labs.dedup();
        for (lab, lab_id) in labs {
            let efa = self
                .leftovers
                .iter()
                .any(|l| l.lab == lab && l.lab_id.as_deref() == lab_id && l.kind == "placement-group");
            let fabric = if efa { Fabric::Efa } else { Fabric::Rxe };
            let provider = AwsProvider::with_client(self.client.clone(), None, fabric).with_waits(waits);
            match lab_id {
                Some(id) => provider.delete_lab_by_id(lab, id).await?,
                None => provider.delete_lab(lab, None).await?,
            }
        }
        Ok(())
    }
}

/// How an instance is logged into: the EC2 key pair (the lab's login key)
/// and the host key it must present.
#[derive(Clone, Copy)]
struct NodeLogin<'a> {
    key_pair: &'a str,
    host_key: &'a HostKeyPair,
}

/// The instance's user-data (base64, as RunInstances takes it): cloud-config
/// that installs the host key labctl generated, so the first SSH connection
/// already knows the key to expect. EC2 keeps user-data readable to the
/// account and, through the instance metadata service, to processes on the
/// instance; a lab node is single-tenant, see docs/reliability.md.
fn user_data(host_key: &HostKeyPair) -> String {
    use base64::Engine as _;
    let mut doc = serde_yaml_ng::Mapping::new();
    crate::cloud_init::add_host_key(&mut doc, host_key);
    base64::engine::general_purpose::STANDARD.encode(crate::cloud_init::render(&doc))
}

/// TCP 22 from `cidr`: how the controller reaches the nodes.
fn ssh_rule(cidr: &str) -> IpPermission {
    IpPermission::builder()
        .ip_protocol("tcp")
        .from_port(22)
        .to_port(22)
        .ip_ranges(
            IpRange::builder()
                .cidr_ip(cidr)
                .description("SSH from the labctl controller")
                .build(),
        )
        .build()
}

/// Whether `rules` already let `cidr` reach TCP 22 (by a rule naming exactly that range).
fn allows_ssh_from(rules: &[IpPermission], cidr: &str) -> bool {
    rules.iter().any(|r| {
        let port_22 = match r.ip_protocol() {
            Some("-1") => true,
            Some("tcp") | Some("6") => r.from_port().unwrap_or(0) <= 22 && r.to_port().unwrap_or(0) >= 22,
            _ => false,
        };
        port_22 && r.ip_ranges().iter().any(|range| range.cidr_ip() == Some(cidr))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkip_answer_becomes_a_slash_32() {
        assert_eq!(parse_checkip("203.0.113.7\n").as_deref(), Some("203.0.113.7/32"));
        assert_eq!(parse_checkip("<html>blocked</html>"), None);
        assert_eq!(parse_checkip(""), None);
    }

    #[tokio::test]
    async fn the_address_lookup_refuses_plain_http() {
        // A listener that would answer if the client spoke plain HTTP to it.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let e = https_get(&url).await.unwrap_err();
        assert!(e.contains("unsupported scheme http"), "{e}");
    }
}
