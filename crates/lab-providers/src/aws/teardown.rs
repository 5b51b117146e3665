//! Tearing a lab down: finding everything of one lab by tag ([`Found`]) and
//! removing it in dependency order (instances, then the security group, key
//! pair, placement group, internet gateway, subnet and VPC), retrying while
//! EC2 still reports a dependency. Built on `ec2.rs`; the provider in
//! `mod.rs` decides what to delete.

use std::time::Instant;

use aws_sdk_ec2::client::Waiters;
use aws_sdk_ec2::types::InstanceStateName;
use aws_smithy_runtime_api::client::waiters::error::WaiterError;
use backon::{ConstantBuilder, Retryable};

use super::ec2::{live, Ec2, Ec2Instance, Found};
use super::error::AwsError;

impl Ec2<'_> {
    pub(super) async fn find(&self, found: &mut Found, efa: bool) -> Result<(), AwsError> {
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
    pub(super) async fn remove(&self, found: &Found) -> Result<(), AwsError> {
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
}
