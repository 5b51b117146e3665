//! Privileged steps: local VMs log in as root, cloud images as a user with
//! passwordless sudo, so root's commands run under `sudo -n` for anyone else.

use lab_remote::command::RemoteCommand;
use lab_state::NodeState;

/// `command` as root: as it is for root, under `sudo -n` for anyone else.
pub fn as_root(node: &NodeState, command: RemoteCommand) -> RemoteCommand {
    command.as_root(node.ssh_user == "root")
}
