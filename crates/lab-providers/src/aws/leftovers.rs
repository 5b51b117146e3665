//! Finding what labctl left behind: every resource in a region carrying
//! labctl's tags for one owner ([`Leftover`]), as `down --leaked` lists it,
//! and deleting the id-less ones the user named, by their EC2 ids. Deleting
//! a leaked lab by its id is the provider's business (`LeakedScan` in
//! `mod.rs`).

use aws_sdk_ec2::types::Tag;
use aws_sdk_ec2::Client;
use serde::Serialize;

use super::ec2::{filter, live, tag_value, Ctx, Ec2, Found, Waits, TAG_CREATED, TAG_LAB, TAG_LAB_ID, TAG_OWNER};
use super::error::AwsError;

/// A resource carrying labctl's tags, as `down --leaked` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Leftover {
    /// The lab it belongs to.
    pub lab: String,
    /// `labctl:lab-id`: the lab's random id; `None` on resources of an older
    /// labctl, which tagged by name only (an empty tag counts as none).
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
        lab_id: "",
        region: &region,
    };
    let owned = filter(&format!("tag:{TAG_OWNER}"), &[owner]);
    let mut out = Vec::new();
    let mut notes = Vec::new();
    let mut push = |kind: &'static str, id: Option<&str>, tags: &[Tag]| {
        if let (Some(id), Some(lab)) = (id, tag_value(tags, TAG_LAB)) {
            out.push(Leftover {
                lab: lab.to_string(),
                lab_id: tag_value(tags, TAG_LAB_ID)
                    .filter(|id| !id.is_empty())
                    .map(str::to_string),
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

/// Deletes exactly `named` (leftovers of `client`'s region, listed by
/// [`find_leftovers`]), by their EC2 ids and in dependency order: what the
/// user named from `down --leaked`'s list, never anything found by lab name.
pub(super) async fn delete_named(
    client: &Client,
    region: &str,
    named: &[&Leftover],
    waits: Waits,
) -> Result<(), AwsError> {
    let ec2 = Ec2 {
        client,
        ctx: Ctx {
            lab: "(named resources)",
            lab_id: "",
            region,
        },
        waits,
    };
    let mut found = Found::default();
    for l in named {
        let id = Some(&l.id);
        match l.kind {
            "instance" => Found::add(&mut found.instances, id),
            "security-group" => Found::add(&mut found.security_groups, id),
            "key-pair" => Found::add(&mut found.key_pairs, id),
            "placement-group" => Found::add(&mut found.placement_groups, id),
            "subnet" => Found::add(&mut found.subnets, id),
            "vpc" => Found::add(&mut found.vpcs, id),
            "internet-gateway" => {
                // Detached from whatever VPC it is attached to before it goes.
                let described = client
                    .describe_internet_gateways()
                    .filters(filter("internet-gateway-id", &[&l.id]))
                    .send()
                    .await
                    .map_err(|e| ec2.ctx.err("DescribeInternetGateways", &l.id, e))?;
                let vpcs = described
                    .internet_gateways()
                    .iter()
                    .flat_map(|g| g.attachments())
                    .filter_map(|a| a.vpc_id().map(str::to_string))
                    .collect();
                found.internet_gateways.push((l.id.clone(), vpcs));
            }
            other => {
                return Err(AwsError::Api {
                    operation: "delete",
                    resource: l.id.clone(),
                    code: "UnknownKind".into(),
                    message: format!("labctl does not delete a resource of kind `{other}`"),
                })
            }
        }
    }
    ec2.remove(&found).await
}
