//! The lab's side of `labctl ssh`: the pinned host keys and ssh config
//! written into the lab's directory, and the `ssh` command line that uses
//! them (built by [`crate::ssh_client`]).

use lab_state::LabState;

use super::{Lab, LabError};

impl Lab {
    /// The command line of `ssh` to `node` (interactive, or running
    /// `command`) that logs in as `up` did (the node's key, user, port and
    /// jump host) and trusts only the pinned host keys; `batch`: it never
    /// prompts (`BatchMode`), for scripts.
    pub fn ssh_argv(&self, node: &str, command: &[String], batch: bool) -> Result<Vec<String>, LabError> {
        let state = self.state()?;
        let node = self.node_state(&state, node)?;
        self.write_known_hosts(&state)?;
        let files = self.ssh_client_files(&state, batch);
        if batch {
            self.write_ssh_config(&state, &files)?;
        }
        Ok(crate::ssh_client::ssh_argv(node, &files, command))
    }

    /// The ssh client's files; the batch config is a file of its own so a
    /// script's call never changes an interactive one's.
    fn ssh_client_files(&self, state: &LabState, batch: bool) -> crate::ssh_client::ClientFiles {
        let config = self.dir.ssh_config();
        crate::ssh_client::ClientFiles {
            config: if batch { config.with_extension("batch") } else { config },
            known_hosts: self.dir.known_hosts(),
            lab_key: crate::ssh_client::lab_key_for(state, self.dir.ssh_key()),
            batch,
        }
    }

    /// Writes the pinned host keys (nodes and jump hosts) and the ssh
    /// config `labctl ssh` uses.
    pub(super) fn write_known_hosts(&self, state: &LabState) -> Result<(), LabError> {
        let text = crate::ssh_client::known_hosts_text(state);
        lab_state::write_atomic(&self.dir.known_hosts(), text.as_bytes(), 0o600)?;
        self.write_ssh_config(state, &self.ssh_client_files(state, false))
    }

    fn write_ssh_config(&self, state: &LabState, files: &crate::ssh_client::ClientFiles) -> Result<(), LabError> {
        let config = crate::ssh_client::config_text(state, files).map_err(|problem| LabError::SshClientConfig {
            lab: self.spec.name.clone(),
            problem,
        })?;
        lab_state::write_atomic(&files.config, config.as_bytes(), 0o600)?;
        Ok(())
    }
}
