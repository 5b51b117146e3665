//! One command on several nodes at once (`labctl exec --all`), each over
//! its own SSH session, output handed on as it arrives with the node it came
//! from.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use lab_remote::command::RemoteCommand;
use lab_remote::ssh;

use crate::lab::{connect_pinned, Lab, LabError};

/// How one node's run of the command ended.
#[derive(Debug, Clone)]
pub struct NodeExit {
    /// The node.
    pub node: String,
    /// Its exit status; 255 when the node could not be reached or the
    /// command ended without one (as ssh reports it).
    pub status: i32,
    /// Why the command could not run, when it could not.
    pub error: Option<String>,
    /// Wall time on this node, seconds.
    pub seconds: f64,
}

impl Lab {
    /// Runs `command` on every node of `nodes` in parallel. `on_output` gets
    /// each chunk of output with its node and whether it is stderr. Unknown
    /// nodes are an error before anything runs; a node that fails to connect
    /// is reported in its [`NodeExit`] while the others run.
    pub async fn exec_on(
        &self,
        nodes: &[String],
        command: &RemoteCommand,
        on_output: &(dyn Fn(&str, bool, &[u8]) + Send + Sync),
    ) -> Result<Vec<NodeExit>, LabError> {
        let state = self.state()?;
        for node in nodes {
            self.node_state(&state, node)?;
        }
        let key = Arc::new(ssh::load_or_create_key(&self.dir.ssh_key())?);
        let runs = nodes.iter().map(|name| {
            let key = key.clone();
            let recorded = state.node(name).expect("nodes checked above");
            async move {
                let started = Instant::now();
                let outcome = async {
                    let session = connect_pinned(recorded, key, Duration::from_secs(20)).await?;
                    let status = session
                        .exec_streaming(command, None, |is_err, data| on_output(name, is_err, data))
                        .await;
                    session.close().await;
                    Ok::<_, LabError>(status?)
                }
                .await;
                let (status, error) = match outcome {
                    Ok(status) if (0..=255).contains(&status) => (status, None),
                    Ok(_) => (255, Some("the command ended without an exit status".to_string())),
                    Err(e) => (255, Some(e.to_string())),
                };
                NodeExit {
                    node: name.clone(),
                    status,
                    error,
                    seconds: started.elapsed().as_secs_f64(),
                }
            }
        });
        Ok(join_all(runs).await)
    }
}
