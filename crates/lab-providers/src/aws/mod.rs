//! The AWS provider: one EC2 instance per node.
//!
//! What `up` creates, in order, each recorded in `provider_state` as soon as
//! it exists and tagged `labctl:lab`, `labctl:lab-id`, `labctl:owner` and
//! `labctl:created`: the lab's key pair (its SSH public key), a VPC with a
//! subnet and internet gateway unless labs.yaml names a subnet, a security
//! group, a cluster placement group (fabric efa), and the instances.
//!
//! A lab is its id (`state.json`'s `id`): everything is looked up by the
//! lab's name and id tags before it is created, so a repeated `create`
//! reuses what exists and a lab of the same name is never taken for this
//! one; `delete` removes what carries the id, found by tag. Resources
//! without an id (an older labctl's) are deleted only when the lab's own
//! state records them, or when the user names them (`down --leaked`).
//!
//! The endpoint, credentials and region come from the standard AWS
//! configuration (`AWS_PROFILE`, `AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT_URL`, ...),
//! with the region from labs.yaml taking precedence.
//!
//! The modules, from the base up: `ec2` (tags, filters, the recorded
//! `AwsState`, the per-lab `Ec2` handle and its lookups), `launch` and
//! `teardown` (the two halves of `Ec2`'s work), `leftovers` (finding tagged
//! resources of any lab), `address` (the controller's public address) and
//! `error`. This file holds
//! the provider itself: its client, the `Provider` operations that run those
//! steps in order, and `down --leaked`'s [`LeakedScan`], which deletes
//! through the provider.

mod address;
mod ec2;
pub mod error;
mod launch;
mod leftovers;
mod teardown;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_sdk_ec2::types::{InstanceStateName, InstanceType, InstanceTypeInfo};
use aws_sdk_ec2::Client;

use self::address::controller_cidr;
use self::ec2::{live, Ctx, Ec2, Found, Plan};
pub use self::ec2::{
    resource_name, AwsState, EfaInterfaces, Waits, TAG_CREATED, TAG_LAB, TAG_LAB_ID, TAG_NODE, TAG_OWNER,
};
pub use self::error::AwsError;
use self::launch::NodeLogin;
pub use self::leftovers::{find_leftovers, Leftover};
use crate::provider::{Provider, ProviderError};
use crate::NodeKeys;
use lab_model::{AwsSpec, Fabric, LabSpec, ResolvedNode, SshAddress};
use lab_state::progress::{step, Reporter};
use lab_state::{LabDir, LabState, NodeState};

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
    /// The registry of live labs, read by `delete` when the lab's state is
    /// lost (it says which ids lived in the lab's state directory).
    registry: std::path::PathBuf,
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
            registry: lab_state::live_labs::dir(),
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

    /// Reads the registry of live labs at `dir` instead of the user's (tests).
    pub fn with_registry(mut self, dir: &std::path::Path) -> AwsProvider {
        self.registry = dir.to_path_buf();
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

/// What DescribeInstanceTypes says of `instance_type` in `region`; a type
/// EC2 does not know there is [`AwsError::UnknownInstanceType`].
async fn describe_instance_type(
    client: &Client,
    region: &str,
    lab: &str,
    instance_type: &str,
) -> Result<InstanceTypeInfo, AwsError> {
    let unknown = |detail: String| AwsError::UnknownInstanceType {
        instance_type: instance_type.to_string(),
        region: region.to_string(),
        detail,
    };
    let types = client
        .describe_instance_types()
        .instance_types(InstanceType::from(instance_type))
        .send()
        .await
        .map_err(
            |e| match AwsError::from_sdk("DescribeInstanceTypes", region, lab, instance_type, e) {
                AwsError::Api { code, message, .. } if code.starts_with("InvalidInstanceType") => {
                    unknown(format!("{code}: {message}"))
                }
                other => other,
            },
        )?;
    types
        .instance_types()
        .first()
        .cloned()
        .ok_or_else(|| unknown("DescribeInstanceTypes returned nothing".into()))
}

impl AwsProvider {
    /// Checks credentials, region, zone and instance type (EFA support for
    /// fabric efa) without creating anything.
    pub async fn check(&self, lab: &str) -> Result<(), AwsError> {
        let spec = self.spec(lab)?.clone();
        let (client, region) = self.client(lab, None).await?;
        // Nothing here selects a lab's resources: no id is needed.
        let ctx = Ctx {
            lab,
            lab_id: "",
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
        let info = describe_instance_type(&client, &region, lab, &spec.instance_type).await?;
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

    /// Creates the lab's resources (reusing any that carry its name and id)
    /// and fills `state`.
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
        if state.id.is_empty() {
            return Err(AwsError::NoLabId { lab: lab.name.clone() }.into());
        }
        let lab_id = state.id.clone();
        let (client, region) = self.client(&lab.name, None).await?;
        let ec2 = Ec2 {
            client: &client,
            ctx: Ctx {
                lab: &lab.name,
                lab_id: &lab_id,
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
            id: lab_id.clone(),
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

        if plan.efa {
            aws.efa = Some(EfaInterfaces {
                instance_type: spec.instance_type.clone(),
                attached: launch::EFA_INTERFACES_PER_INSTANCE,
                maximum: describe_instance_type(&client, &region, &lab.name, &spec.instance_type)
                    .await?
                    .network_info()
                    .and_then(|n| n.efa_info())
                    .and_then(|e| e.maximum_efa_interfaces())
                    .and_then(|n| u32::try_from(n).ok()),
            });
            aws.save(dir, state)?;
        }
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
                agent_port: crate::node_agent::AGENT_PORT,
                provisioned: false,
                host: None,
            });
        }
        aws.save(dir, state)?;
        Ok(())
    }

    /// Removes every resource of lab `lab` whose id tag is `lab_id`, found
    /// by tag (another lab of the same name keeps its own). `region` is the
    /// recorded one, for a lab whose labs.yaml entry no longer says aws.
    pub async fn delete_lab_by_id(&self, lab: &str, lab_id: &str, region: Option<&str>) -> Result<(), AwsError> {
        self.delete_by_id(lab, lab_id, region, self.fabric == Fabric::Efa).await
    }

    /// [`AwsProvider::delete_lab_by_id`]; `efa`: look for a placement group
    /// too (only EFA labs have one, and some endpoints, moto among them,
    /// cannot list them).
    async fn delete_by_id(&self, lab: &str, lab_id: &str, region: Option<&str>, efa: bool) -> Result<(), AwsError> {
        if lab_id.is_empty() {
            return Err(AwsError::NoLabId { lab: lab.to_string() });
        }
        let (client, region) = self.client(lab, region).await?;
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
        ec2.find(&mut found, efa).await?;
        ec2.remove(&found).await
    }

    /// Removes exactly the resources `recorded` names, by their EC2 ids: the
    /// state of a lab from before lab ids, whose resources carry no id to
    /// find them by.
    async fn delete_recorded(&self, lab: &str, recorded: &AwsState) -> Result<(), AwsError> {
        let (client, region) = self.client(lab, Some(&recorded.region)).await?;
        let ec2 = Ec2 {
            client: &client,
            ctx: Ctx {
                lab,
                lab_id: "",
                region: &region,
            },
            waits: self.waits,
        };
        let mut found = Found::default();
        for id in recorded.instances.values() {
            Found::add(&mut found.instances, Some(id));
        }
        Found::add(&mut found.security_groups, recorded.security_group_id.as_ref());
        Found::add(&mut found.key_pairs, recorded.key_name.as_ref());
        Found::add(&mut found.placement_groups, recorded.placement_group.as_ref());
        Found::add(&mut found.subnets, recorded.subnet_id.as_ref());
        Found::add(&mut found.vpcs, recorded.vpc_id.as_ref());
        if let (Some(gateway), Some(vpc)) = (&recorded.internet_gateway_id, &recorded.vpc_id) {
            found.internet_gateways.push((gateway.clone(), vec![vpc.clone()]));
        }
        // Terminated instances need no wait.
        if !found.instances.is_empty() {
            let states = ec2.describe(&found.instances).await?;
            found
                .instances
                .retain(|id| states.iter().any(|i| &i.id == id && live(&i.state)));
        }
        ec2.remove(&found).await
    }

    /// The ids of the labs the registry says lived in `dir` (for a lab
    /// whose state is lost: a state directory holds one lab at a time, so
    /// each of them is this directory's).
    fn registered_ids(&self, dir: &LabDir) -> Vec<(String, String)> {
        lab_state::live_labs::entries_in(&self.registry)
            .into_iter()
            .filter(|e| e.state_dir == dir.root())
            .map(|e| (e.lab, e.id))
            .collect()
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
                lab_id: &state.id,
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

    /// Deletes by the lab's id, never by its name: a lab of the same name
    /// (another directory, another job) keeps everything. With the state
    /// lost, the ids come from the registry entries of this state
    /// directory; a state from before lab ids deletes what it recorded.
    async fn delete(&self, dir: &LabDir, state: Option<&LabState>) -> Result<(), ProviderError> {
        let recorded = state.and_then(AwsState::from_lab_state);
        let region = recorded.as_ref().map(|r| r.region.as_str());
        let labs = match state {
            Some(s) if !s.id.is_empty() => vec![(s.lab.clone(), s.id.clone())],
            _ => self.registered_ids(dir),
        };
        let efa = self.fabric == Fabric::Efa || recorded.as_ref().is_some_and(|r| r.placement_group.is_some());
        for (lab, id) in &labs {
            self.delete_by_id(lab, id, region, efa).await?;
        }
        if let (Some(state), Some(recorded)) = (state.filter(|s| s.id.is_empty()), &recorded) {
            self.delete_recorded(&state.lab, recorded).await?;
        }
        Ok(())
    }
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
    /// The leftovers that carry no lab id (an older labctl's): never
    /// deleted unless the user names them.
    pub fn id_less(&self) -> impl Iterator<Item = &Leftover> {
        self.leftovers.iter().filter(|l| l.lab_id.is_none())
    }

    /// Deletes every leaked lab's resources by the lab's id (a live lab of
    /// the same name keeps its own), plus exactly the id-less leftovers
    /// whose id is in `named`; other id-less leftovers stay. Returns what
    /// was deleted.
    pub async fn delete(&self, waits: Waits, named: &[String]) -> Result<Vec<&Leftover>, AwsError> {
        let mut labs: Vec<(&str, &str)> = self
            .leftovers
            .iter()
            .filter_map(|l| Some((l.lab.as_str(), l.lab_id.as_deref()?)))
            .collect();
        labs.dedup();
        for (lab, lab_id) in labs {
            let efa = self
                .leftovers
                .iter()
                .any(|l| l.lab_id.as_deref() == Some(lab_id) && l.kind == "placement-group");
            let fabric = if efa { Fabric::Efa } else { Fabric::Rxe };
            let provider = AwsProvider::with_client(self.client.clone(), None, fabric).with_waits(waits);
            provider.delete_lab_by_id(lab, lab_id, None).await?;
        }
        let chosen: Vec<&Leftover> = self.id_less().filter(|l| named.contains(&l.id)).collect();
        if !chosen.is_empty() {
            leftovers::delete_named(&self.client, &self.region, &chosen, waits).await?;
        }
        Ok(self
            .leftovers
            .iter()
            .filter(|l| l.lab_id.is_some() || named.contains(&l.id))
            .collect())
    }
}
