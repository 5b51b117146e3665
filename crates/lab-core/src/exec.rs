//! One command on several nodes at once (`labctl exec --all`), each over
//! its own SSH session, output handed on as it arrives with the node it came
//! from; and how the words a user typed become each node's command line
//! (the quoting rule, the placeholders filled from the lab facts).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use lab_remote::command::RemoteCommand;
use lab_remote::ssh;

use crate::facts::{LabFacts, PlaceholderError};
use crate::lab::{connect_pinned, Lab, LabError};

/// The command line for a node's shell from the words a user gave: one word
/// is the user's shell line (pipes, `;`, `$VAR` work); several words are a
/// program and its arguments, each quoted, so the node sees the same argv
/// (unlike ssh, which joins them for the remote shell to split again).
pub fn command_line(words: &[String]) -> RemoteCommand {
    match words {
        [line] => RemoteCommand::user_line(line.clone()),
        [program, args @ ..] => RemoteCommand::new(program).args(args),
        [] => RemoteCommand::user_line(String::new()),
    }
}

/// Why [`filled_command`] could not fill a command.
#[derive(Debug)]
pub enum FillError {
    /// A placeholder that does not exist (or has no value).
    Placeholder(PlaceholderError),
    /// The command has placeholders and there are no facts to fill them.
    NoFacts,
}

/// The command line for `node` from `words` (see [`command_line`]), the
/// placeholders filled from `facts`. Without facts, only words without a
/// placeholder pass (braces that are the shell's are not placeholders).
pub fn filled_command(facts: Option<&LabFacts>, words: &[String], node: &str) -> Result<RemoteCommand, FillError> {
    let filled: Vec<String> = match facts {
        Some(facts) => words
            .iter()
            .map(|w| facts.expand(w, Some(node)))
            .collect::<Result<_, _>>()
            .map_err(FillError::Placeholder)?,
        None if words.iter().any(|w| has_placeholder(w)) => return Err(FillError::NoFacts),
        None => words.to_vec(),
    };
    Ok(command_line(&filled))
}

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
    /// Each node's command line for `words`, the placeholders (`{server.addr}`,
    /// `{self.dev}`, see [`LabFacts::expand`]) filled for that node. Unknown
    /// nodes and placeholders are errors here, before anything runs.
    pub fn commands_for(&self, nodes: &[String], words: &[String]) -> Result<Vec<(String, RemoteCommand)>, LabError> {
        let state = self.state()?;
        for node in nodes {
            self.node_state(&state, node)?;
        }
        let templated = words.iter().any(|w| w.contains('{'));
        let facts = if templated { LabFacts::load(&self.dir) } else { None };
        nodes
            .iter()
            .map(|node| {
                let command = filled_command(facts.as_ref(), words, node).map_err(|e| match e {
                    FillError::Placeholder(e) => LabError::Placeholder(e),
                    FillError::NoFacts => LabError::NoFacts(self.spec.name.clone()),
                })?;
                Ok((node.clone(), command))
            })
            .collect()
    }

    /// Runs each node's command (from [`Lab::commands_for`]) in parallel. `on_output` gets
    /// each chunk of output with its node and whether it is stderr. Unknown
    /// nodes are an error before anything runs; a node that fails to connect
    /// is reported in its [`NodeExit`] while the others run.
    pub async fn exec_on(
        &self,
        commands: &[(String, RemoteCommand)],
        on_output: &(dyn Fn(&str, bool, &[u8]) + Send + Sync),
    ) -> Result<Vec<NodeExit>, LabError> {
        let state = self.state()?;
        for (node, _) in commands {
            self.node_state(&state, node)?;
        }
        let key = Arc::new(ssh::load_or_create_key(&self.dir.ssh_key())?);
        let runs = commands.iter().map(|(name, command)| {
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

/// Whether `text` holds something [`LabFacts::expand`] would fill.
fn has_placeholder(text: &str) -> bool {
    // Any facts will do to ask: expansion of a text without placeholders is
    // the text itself, with placeholders it differs or fails.
    let probe = LabFacts {
        lab: String::new(),
        fabric: String::new(),
        libfabric_provider: String::new(),
        nodes: Vec::new(),
    };
    probe.expand(text, None).map_or(true, |same| same != text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_one_word_is_a_shell_line_several_are_argv() {
        let line = command_line(&["echo a; echo b".into()]);
        assert_eq!(line.as_str(), "echo a; echo b");
        let argv = command_line(&["sh".into(), "-c".into(), "echo a; echo b".into()]);
        assert_eq!(argv.as_str(), "sh -c 'echo a; echo b'");
        let spaced = command_line(&["ls".into(), "my dir".into(), "$HOME".into()]);
        assert_eq!(spaced.as_str(), "ls 'my dir' '$HOME'");
    }

    #[test]
    fn test_text_without_placeholders_needs_no_facts() {
        assert!(!has_placeholder("awk '{print $1}' ${HOME} {a,b}"));
        assert!(has_placeholder("ping {client.addr}"));
        assert!(has_placeholder("{{lab}}"));
    }
}
