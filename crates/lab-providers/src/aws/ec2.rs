//! The base of the AWS provider: how labctl names, tags and finds one lab's
//! EC2 resources. A lab is its id (`state.json`'s `id`, the `labctl:lab-id`
//! tag): every lookup of one lab's resources filters on it, and the names
//! EC2 keeps unique (key pair, security group, placement group) carry it,
//! so two labs of one name never see each other's resources. It owns the
//! tag keys, the filters that select a lab, the
//! per-call context ([`Ctx`]) that turns SDK errors into [`AwsError`]s, the
//! [`Ec2`] handle (client, context, waits) with its instance lookups, and
//! the [`Plan`] of a `create`. The launch and teardown halves of [`Ec2`] live
//! in `launch.rs` and `teardown.rs`; this module uses neither, nor the
//! provider in `mod.rs`.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_ec2::operation::describe_instances::{DescribeInstancesError, DescribeInstancesOutput};
use aws_sdk_ec2::types::{Filter, InstanceStateName, ResourceType, Tag, TagSpecification};
use aws_sdk_ec2::Client;
use aws_smithy_runtime_api::client::waiters::error::WaiterError;
use lab_model::AwsSpec;
use lab_state::{LabDir, LabState};
use serde::{Deserialize, Serialize};

use super::error::AwsError;
use crate::provider::ProviderError;

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
    /// fabric efa: how many EFA interfaces each instance has against how
    /// many its type takes (`labctl doctor` compares both with the EFA
    /// devices it finds on the node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub efa: Option<EfaInterfaces>,
}

/// The EFA interfaces of a lab's instances.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EfaInterfaces {
    /// The instances' type.
    pub instance_type: String,
    /// EFA interfaces each instance was launched with.
    pub attached: u32,
    /// The most the type takes (DescribeInstanceTypes'
    /// `NetworkInfo.EfaInfo.MaximumEfaInterfaces`); `None` when EC2 did not say.
    pub maximum: Option<u32>,
}

impl AwsState {
    /// The AWS part of a lab's state, if it has one.
    pub fn from_lab_state(state: &LabState) -> Option<AwsState> {
        serde_json::from_value(state.provider_state.clone()).ok()
    }

    pub(super) fn save(&self, dir: &LabDir, state: &mut LabState) -> Result<(), ProviderError> {
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

/// A filter on one field.
pub(super) fn filter(name: &str, values: &[&str]) -> Filter {
    Filter::builder()
        .name(name)
        .set_values(Some(values.iter().map(|v| v.to_string()).collect()))
        .build()
}

/// The name every named resource of lab `lab` with id `lab_id` gets (EC2
/// keeps key pair and placement group names unique per region, security
/// group names per VPC: with the id, two labs of one name never clash).
pub fn resource_name(lab: &str, lab_id: &str) -> String {
    format!("labctl-{lab}-{lab_id}")
}

/// One EC2 call's context: the lab and its id, for filters and errors.
/// `lab_id` is empty only where no lab is selected (checks before `up`,
/// listing leftovers, deleting resources the user named).
pub(super) struct Ctx<'a> {
    pub(super) lab: &'a str,
    pub(super) lab_id: &'a str,
    pub(super) region: &'a str,
}

impl Ctx<'_> {
    /// The filters that select this lab's resources: its name and its id.
    /// Never the name alone: that would take in another lab of the same
    /// name. (An empty id selects only resources tagged with an empty id,
    /// which labctl never makes.)
    pub(super) fn filters(&self) -> Vec<Filter> {
        debug_assert!(!self.lab_id.is_empty(), "a lab is selected by its id");
        vec![
            filter(&format!("tag:{TAG_LAB}"), &[self.lab]),
            filter(&format!("tag:{TAG_LAB_ID}"), &[self.lab_id]),
        ]
    }

    pub(super) fn err<E, R>(
        &self,
        operation: &'static str,
        resource: &str,
        e: aws_sdk_ec2::error::SdkError<E, R>,
    ) -> AwsError
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

pub(super) fn tag_spec(kind: ResourceType, tags: &[Tag]) -> TagSpecification {
    TagSpecification::builder()
        .resource_type(kind)
        .set_tags(Some(tags.to_vec()))
        .build()
}

pub(super) fn tag_value<'t>(tags: &'t [Tag], key: &str) -> Option<&'t str> {
    tags.iter().find(|t| t.key() == Some(key)).and_then(|t| t.value())
}

/// An instance of the lab as EC2 reports it.
#[derive(Debug, Clone)]
pub(super) struct Ec2Instance {
    pub(super) id: String,
    pub(super) node: Option<String>,
    pub(super) state: InstanceStateName,
    pub(super) reason: String,
    pub(super) public_ip: Option<String>,
    pub(super) private_ip: Option<String>,
}

impl Ec2Instance {
    /// The instances of one DescribeInstances answer.
    pub(super) fn all_of(page: &DescribeInstancesOutput) -> Vec<Ec2Instance> {
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

pub(super) fn live(state: &InstanceStateName) -> bool {
    !matches!(state, InstanceStateName::Terminated | InstanceStateName::ShuttingDown)
}

/// Everything of one lab, as found by tag and from its state.
#[derive(Debug, Default)]
pub(super) struct Found {
    pub(super) instances: Vec<String>,
    pub(super) security_groups: Vec<String>,
    pub(super) key_pairs: Vec<String>,
    pub(super) placement_groups: Vec<String>,
    pub(super) internet_gateways: Vec<(String, Vec<String>)>,
    pub(super) subnets: Vec<String>,
    pub(super) vpcs: Vec<String>,
}

impl Found {
    pub(super) fn add(list: &mut Vec<String>, id: Option<&String>) {
        if let Some(id) = id {
            if !list.contains(id) {
                list.push(id.clone());
            }
        }
    }
}

/// The EC2 operations of one lab in one region.
pub(super) struct Ec2<'a> {
    pub(super) client: &'a Client,
    pub(super) ctx: Ctx<'a>,
    pub(super) waits: Waits,
}

impl Ec2<'_> {
    pub(super) async fn instances(&self) -> Result<Vec<Ec2Instance>, AwsError> {
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

    /// The instances `ids`, by instance id (a filter rather than
    /// `InstanceIds`, so one that no longer exists is missing from the
    /// answer instead of failing the call).
    pub(super) async fn describe(&self, ids: &[String]) -> Result<Vec<Ec2Instance>, AwsError> {
        let wanted: Vec<&str> = ids.iter().map(String::as_str).collect();
        let mut out = Vec::new();
        let mut pages = self
            .client
            .describe_instances()
            .filters(filter("instance-id", &wanted))
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| self.ctx.err("DescribeInstances", &ids.join(", "), e))?;
            out.extend(Ec2Instance::all_of(&page));
        }
        Ok(out)
    }

    /// A waiter's DescribeInstances call that failed, or a waiter that
    /// could not start.
    pub(super) fn waiter_failed(
        &self,
        ids: &str,
        e: WaiterError<DescribeInstancesOutput, DescribeInstancesError>,
    ) -> AwsError {
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
pub(super) struct Plan<'a> {
    pub(super) lab: &'a str,
    pub(super) spec: &'a AwsSpec,
    pub(super) efa: bool,
    pub(super) owner: &'a str,
    pub(super) created: String,
    /// The lab's id: tagged on everything, part of every name.
    pub(super) id: String,
}

impl Plan<'_> {
    /// The name of the lab's key pair, network, security and placement groups.
    pub(super) fn name(&self) -> String {
        resource_name(self.lab, &self.id)
    }

    pub(super) fn tags(&self, name: &str, extra: &[(&str, &str)]) -> Vec<Tag> {
        tags(self, name, extra)
    }
}
