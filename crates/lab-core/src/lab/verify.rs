//! The second `up` of a lab that exists: every node checked against what
//! the first `up` recorded (still running, its pinned host key, the lab's
//! packages, its rxe device, the current agent), then the facts refreshed.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use lab_model::Fabric;
use lab_providers::AgentBinary;
use lab_remote::ssh;
use lab_state::progress::Reporter;
use lab_state::LabState;

use super::{connect_pinned, Lab, LabError, ThenOverSessions};
use crate::provision::{self, AgentDeploy};

impl Lab {
    /// A second `up`: every node must still run, answer SSH with its pinned
    /// key, have the lab's `packages:` and run the current agent (redeployed
    /// if it differs).
    pub(super) async fn verify<T>(
        &self,
        mut state: LabState,
        agent: &AgentBinary,
        reporter: &dyn Reporter,
        then: ThenOverSessions<T>,
    ) -> Result<T, LabError> {
        let provider = self.provider()?;
        let packages_in_image = provider.packages_in_image();
        let set_clock = self.nodes_keep_no_time();
        let key = Arc::new(ssh::load_or_create_key(&self.dir.ssh_key())?);
        let secret = &self.load_or_create_agent_secret()?;
        for node in &state.nodes {
            provider
                .check_alive(&self.dir, &state, &node.name)
                .await
                .map_err(|e| LabError::Unhealthy {
                    lab: self.spec.name.clone(),
                    reason: e.to_string(),
                })?;
        }
        let mut nodes = state.nodes.clone();
        let checks = nodes.iter_mut().map(|node| {
            let key = key.clone();
            async move {
                let session = Arc::new(connect_pinned(node, key, Duration::from_secs(20)).await?);
                let name = node.name.clone();
                if !self.spec.packages.is_empty() {
                    let packages = lab_state::progress::step(
                        reporter,
                        &name,
                        "packages",
                        provision::ensure_packages(&session, node, &self.spec.packages, packages_in_image, reporter),
                    )
                    .await;
                    if let Err(e) = packages {
                        session.close().await;
                        return Err(e.into());
                    }
                }
                // A node the lab owns gets its rxe device back if it lost it
                // (`rdma link delete`, a reloaded module): setup_rxe adds one
                // only when the data NIC has none. Hosts the lab does not own
                // keep what `up` recorded for `down` to undo.
                if self.spec.fabric == Fabric::Rxe && node.host.is_none() {
                    let rxe =
                        lab_state::progress::step(reporter, &name, "rxe", provision::setup_rxe(&session, node)).await;
                    match rxe {
                        Ok((netdev, device, added)) => {
                            if added {
                                reporter.note(
                                    &name,
                                    &format!("the data NIC {netdev} had no rxe device: added {device}"),
                                );
                            }
                            node.data_netdev = Some(netdev);
                            node.rdma_device = Some(device);
                        }
                        Err(e) => {
                            session.close().await;
                            return Err(e.into());
                        }
                    }
                }
                let deployed = lab_state::progress::step(
                    reporter,
                    &name,
                    "verify agent",
                    provision::deploy_agent(&session, node, AgentDeploy { binary: agent, secret }, false, reporter),
                )
                .await;
                if let Err(e) = deployed {
                    session.close().await;
                    return Err(e.into());
                }
                if set_clock {
                    let deploy = AgentDeploy { binary: agent, secret };
                    let clocked = lab_state::progress::step(
                        reporter,
                        &name,
                        "clock",
                        provision::set_clock(&session, node, deploy),
                    )
                    .await;
                    if let Err(e) = clocked {
                        session.close().await;
                        return Err(e.into());
                    }
                }
                Ok::<_, LabError>(session)
            }
        });
        let results = join_all(checks).await;
        state.nodes = nodes;
        self.dir.save(&state)?;
        let mut sessions = Vec::new();
        let mut unhealthy = None;
        for r in results {
            match r {
                Ok(session) => sessions.push(session),
                Err(e) => {
                    unhealthy.get_or_insert(LabError::Unhealthy {
                        lab: self.spec.name.clone(),
                        reason: e.to_string(),
                    });
                }
            }
        }
        // The facts are refreshed: a node may have been rebooted (cloud
        // images regenerate /etc/hosts), or its GID index changed.
        let verified = match unhealthy {
            Some(e) => Err(e),
            None => {
                async {
                    self.set_facts(&state, &sessions, secret, reporter).await?;
                    self.set_node_ssh(&state, &sessions, reporter).await?;
                    Ok(then(self, &sessions, reporter).await)
                }
                .await
            }
        };
        for session in &sessions {
            session.close().await;
        }
        verified
    }
}
