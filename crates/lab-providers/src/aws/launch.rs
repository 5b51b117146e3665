//! Bringing a lab up: the `ensure_*` steps that look up (by the lab's name
//! and id tags, never the name alone) or create the key pair, network,
//! security group and placement group, launching one
//! instance per node with the user-data that pins its host key, and waiting
//! until they run. Built on `ec2.rs`; the provider in `mod.rs` runs the
//! steps in order and records what they return.

use std::collections::BTreeMap;

use aws_sdk_ec2::client::Waiters;
use aws_sdk_ec2::primitives::Blob;
use aws_sdk_ec2::types::{
    InstanceNetworkInterfaceSpecification, InstanceStateName, InstanceType, IpPermission, IpRange, Placement,
    PlacementStrategy, ResourceType, UserIdGroupPair,
};
use aws_smithy_runtime_api::client::waiters::error::WaiterError;
use lab_model::{ResolvedNode, SshAddress};

use super::ec2::{filter, tag_spec, AwsState, Ec2, Ec2Instance, Plan, TAG_NODE};
use super::error::AwsError;
use crate::provider::ProviderError;
use crate::HostKeyPair;

/// The address space of a VPC labctl creates, and its one subnet.
const VPC_CIDR: &str = "10.78.0.0/16";
const SUBNET_CIDR: &str = "10.78.1.0/24";
/// EFA interfaces an instance of a fabric-efa lab is launched with: one, on
/// network card 0 (more would need one per network card and an Elastic IP
/// per instance for SSH, as EC2 gives no public address to an instance
/// launched with several interfaces).
pub(super) const EFA_INTERFACES_PER_INSTANCE: u32 = 1;

impl Ec2<'_> {
    pub(super) async fn ensure_key_pair(&self, plan: &Plan<'_>, public_key: &str) -> Result<String, AwsError> {
        let name = plan.name();
        let existing = self
            .client
            .describe_key_pairs()
            .set_filters(Some(self.ctx.filters()))
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
    pub(super) async fn ensure_network(
        &self,
        plan: &Plan<'_>,
        aws: &mut AwsState,
        mut save: impl FnMut(&AwsState) -> Result<(), ProviderError>,
    ) -> Result<String, ProviderError> {
        let ctx = &self.ctx;
        let name = plan.name();
        let vpc = match self
            .client
            .describe_vpcs()
            .set_filters(Some(self.ctx.filters()))
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
            .set_filters(Some(self.ctx.filters()))
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
            .set_filters(Some(self.ctx.filters()))
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
    pub(super) async fn ensure_security_group(
        &self,
        plan: &Plan<'_>,
        vpc: &str,
        ssh_cidr: &str,
        record: impl FnOnce(&str) -> Result<(), ProviderError>,
    ) -> Result<String, ProviderError> {
        let ctx = &self.ctx;
        let name = plan.name();
        let existing = self
            .client
            .describe_security_groups()
            .set_filters(Some(self.ctx.filters()))
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

    pub(super) async fn ensure_placement_group(&self, plan: &Plan<'_>) -> Result<String, AwsError> {
        let name = plan.name();
        let existing = self
            .client
            .describe_placement_groups()
            .set_filters(Some(self.ctx.filters()))
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

    pub(super) async fn launch(
        &self,
        plan: &Plan<'_>,
        node: &ResolvedNode,
        login: NodeLogin<'_>,
        subnet: &str,
        group: &str,
        placement_group: Option<&str>,
    ) -> Result<String, AwsError> {
        let name = format!("{}-{}", plan.name(), node.name);
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
            // EFA_INTERFACES_PER_INSTANCE, this one: on types
            // that take more, `doctor` says how many the lab leaves unused.
            nic = nic.interface_type("efa");
        }
        let placement = (plan.spec.availability_zone.is_some() || placement_group.is_some()).then(|| {
            Placement::builder()
                .set_availability_zone(plan.spec.availability_zone.clone())
                .set_group_name(placement_group.map(str::to_string))
                .build()
        });
        let token = client_token(&plan.id, &node.name);
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
    pub(super) async fn wait_running(&self, ids: &BTreeMap<String, String>) -> Result<Vec<Ec2Instance>, AwsError> {
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

/// RunInstances' client token for `node` of lab `lab_id`: it makes a retried
/// launch of the same node a no-op, and only that. EC2 returns the first
/// launch's instance for a repeated token, so it must never be shared
/// between two labs (of one name, created in the same second): it starts
/// with the lab's id. At most 64 ASCII characters; a node name that would
/// not fit is replaced by its hash.
fn client_token(lab_id: &str, node: &str) -> String {
    let token = format!("{lab_id}-{node}");
    if token.len() <= 64 && token.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return token;
    }
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(node.as_bytes());
    let hash: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("{lab_id}-{hash}")
}

fn node_of(ids: &BTreeMap<String, String>, id: &str) -> String {
    ids.iter()
        .find(|(_, v)| *v == id)
        .map(|(k, _)| k.clone())
        .unwrap_or_else(|| id.to_string())
}

/// How an instance is logged into: the EC2 key pair (the lab's login key)
/// and the host key it must present.
#[derive(Clone, Copy)]
pub(super) struct NodeLogin<'a> {
    pub(super) key_pair: &'a str,
    pub(super) host_key: &'a HostKeyPair,
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
    use super::client_token;

    #[test]
    fn test_client_token_is_the_lab_id_and_node_within_64_characters() {
        assert_eq!(client_token("0123456789abcdef", "server"), "0123456789abcdef-server");
        // Two long node names sharing their first 60 characters: tokens of
        // at most 64, still told apart, still the lab's.
        let long = "n".repeat(60);
        let (a, b) = (
            client_token("0123456789abcdef", &format!("{long}-a")),
            client_token("0123456789abcdef", &format!("{long}-b")),
        );
        assert!(a.len() <= 64 && b.len() <= 64, "{a} {b}");
        assert!(a.starts_with("0123456789abcdef-") && b.starts_with("0123456789abcdef-"));
        assert_ne!(a, b);
        // Another lab, same node: another token.
        assert_ne!(
            client_token("fedcba9876543210", "server"),
            client_token("0123456789abcdef", "server")
        );
    }
}
