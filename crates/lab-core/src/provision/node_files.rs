//! What labctl writes on a node for the lab: the lab facts' files and
//! `/etc/hosts` lines, and with `node_ssh:` the key pair and host keys that
//! let nodes `ssh` each other. Lines in shared files carry the lab's marker,
//! so a second `up` replaces them and `down` removes only them.

use lab_remote::command::RemoteCommand;
use lab_remote::ssh::{SshError, SshSession};
use lab_state::NodeState;

use super::error::ProvisionError;
use super::privilege::as_root;
use crate::facts::{self, LabFacts};

/// Replaces the lines of file `$1` that end with `# $2` (the lab's marker,
/// [`facts::lab_marker`]) by new ones, `$3` (empty: only remove); creates
/// the file when it does not exist. The file is rewritten in place
/// (`cat >`), not renamed over, so it keeps its owner and mode, and an
/// `/etc/hosts` bind-mounted into a container keeps working.
const MARKED_LINES_SCRIPT: &str = r##"set -eu
file=$1 marker=$2
tmp=$(mktemp "$(dirname "$file")/.labctl.XXXXXX")
trap 'rm -f "$tmp"' EXIT
if [ -e "$file" ]; then
    awk -v m="$marker" '!(NF >= 2 && $NF == m && $(NF - 1) == "#")' "$file" >"$tmp"
fi
printf '%s' "$3" >>"$tmp"
cat "$tmp" >"$file""##;

/// Writes the lab facts' files in one command: `$1` the directory (created
/// 0755), then pairs of path and content, each written to a temporary file
/// beside it, made 0644 and renamed over, so a reader never sees half a file.
const FACTS_WRITE_SCRIPT: &str = r##"set -eu
mkdir -p -m 0755 "$1"
shift
tmp=
trap 'rm -f "$tmp"' EXIT
while [ "$#" -ge 2 ]; do
    tmp=$(mktemp "$1.XXXXXX")
    printf '%s' "$2" >"$tmp"
    chmod 0644 "$tmp"
    mv -f "$tmp" "$1"
    tmp=
    shift 2
done"##;

/// Installs the lab's node key pair for the login user: the private key from
/// stdin as `~/.ssh/id_ed25519` (0600, the identity `ssh` tries by default,
/// so `ssh <node>` and `mpirun` need no option), `$1` as its `.pub`.
const NODE_KEY_SCRIPT: &str = r##"set -eu
umask 077
mkdir -p "$HOME/.ssh"
chmod 0700 "$HOME/.ssh"
tmp=$(mktemp "$HOME/.ssh/.labctl.XXXXXX")
trap 'rm -f "$tmp"' EXIT
cat >"$tmp"
mv -f "$tmp" "$HOME/.ssh/id_ed25519"
printf '%s
' "$1" >"$HOME/.ssh/id_ed25519.pub"
chmod 0644 "$HOME/.ssh/id_ed25519.pub""##;

/// Removes the lab facts' files from a node (`down` on machines that stay).
const FACTS_REMOVE_SCRIPT: &str =
    r#"rm -f /etc/labctl/lab.env /etc/labctl/hostfile && { rmdir /etc/labctl 2>/dev/null || :; }"#;

/// Runs `command`; a non-zero exit is an error that shows `shown` (not the
/// whole line, which may carry a script).
async fn run_as(
    session: &SshSession,
    node: &NodeState,
    command: RemoteCommand,
    shown: &str,
) -> Result<(), ProvisionError> {
    let out = session.exec(&command).await?;
    if out.status != 0 {
        return Err(ProvisionError::Ssh(SshError::CommandFailed {
            node: node.name.clone(),
            command: shown.to_string(),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }));
    }
    Ok(())
}

/// Puts the lab facts on a node: `/etc/labctl/lab.env`, `/etc/labctl/hostfile`
/// and the lab's marked `/etc/hosts` lines (earlier ones replaced, so a
/// second `up` leaves exactly one set).
pub async fn write_facts(session: &SshSession, node: &NodeState, lab_facts: &LabFacts) -> Result<(), ProvisionError> {
    if let Some(host) = &node.host {
        // A host that outlives the lab: the files go in the lab's directory,
        // and its /etc/hosts stays as it is (another lab may name the nodes).
        let env = facts::lab_env_in(lab_facts, &node.name, &host.dir).unwrap_or_default();
        let hostfile = facts::hostfile(lab_facts);
        let (env_path, hostfile_path) = (format!("{}/lab.env", host.dir), format!("{}/hostfile", host.dir));
        let write = RemoteCommand::script_with(
            FACTS_WRITE_SCRIPT,
            [
                host.dir.as_str(),
                env_path.as_str(),
                env.as_str(),
                hostfile_path.as_str(),
                hostfile.as_str(),
            ],
        );
        return run_as(
            session,
            node,
            as_root(node, write),
            "write the lab facts in the lab's directory",
        )
        .await;
    }
    // One command for the files and the /etc/hosts lines: every exec is a
    // process start in the guest, which costs a TCG node tenths of a second.
    let env = facts::lab_env(lab_facts, &node.name).unwrap_or_default();
    let hostfile = facts::hostfile(lab_facts);
    let hosts = facts::hosts_lines(lab_facts);
    let marker = facts::lab_marker(&lab_facts.lab);
    let write = RemoteCommand::script_with(
        FACTS_WRITE_SCRIPT,
        [
            facts::NODE_DIR,
            facts::LAB_ENV_PATH,
            env.as_str(),
            facts::HOSTFILE_PATH,
            hostfile.as_str(),
        ],
    )
    .and(RemoteCommand::script_with(
        MARKED_LINES_SCRIPT,
        ["/etc/hosts", marker.as_str(), hosts.as_str()],
    ));
    run_as(
        session,
        node,
        as_root(node, write),
        "write the lab facts (/etc/labctl/lab.env, /etc/labctl/hostfile, /etc/hosts)",
    )
    .await
}

/// What `node_ssh:` installs on every node: the lab's node key pair and
/// the lines that trust it and every node's host key.
pub struct NodeSsh {
    /// The private key, in OpenSSH format.
    pub private_key: Vec<u8>,
    /// Its public line.
    pub public_line: String,
    /// The marked `authorized_keys` line ([`facts::authorized_keys_line`]).
    pub authorized_keys: String,
    /// The marked `known_hosts` lines ([`facts::known_hosts_lines`]).
    pub known_hosts: String,
    /// The lab's marker.
    pub marker: String,
}

/// Lets the login user of `node` reach every node with `ssh <node>` (or its
/// data address) without a prompt: the lab's node key as `~/.ssh/id_ed25519`,
/// its public key in `~/.ssh/authorized_keys`, every node's host key in
/// `~/.ssh/known_hosts`. The two lists' lines carry the lab's marker, so a
/// second `up` replaces them and leaves the user's own lines alone.
pub async fn write_node_ssh(session: &SshSession, setup: &NodeSsh) -> Result<(), ProvisionError> {
    let command = RemoteCommand::script_with(NODE_KEY_SCRIPT, [setup.public_line.as_str()])
        .and(RemoteCommand::script_with(
            MARKED_LINES_SCRIPT,
            [
                ".ssh/authorized_keys",
                setup.marker.as_str(),
                setup.authorized_keys.as_str(),
            ],
        ))
        .and(RemoteCommand::script_with(
            MARKED_LINES_SCRIPT,
            [".ssh/known_hosts", setup.marker.as_str(), setup.known_hosts.as_str()],
        ));
    session
        .run_with_input(
            &command,
            &setup.private_key,
            "install the lab's node SSH key and known hosts in ~/.ssh",
        )
        .await?;
    Ok(())
}

/// Removes the lab facts from a node: the files and the lab's `/etc/hosts`
/// lines. For machines that outlive the lab (`down` on a provider that
/// keeps them).
pub async fn remove_facts(session: &SshSession, node: &NodeState, lab: &str) -> Result<(), ProvisionError> {
    run_as(
        session,
        node,
        as_root(
            node,
            RemoteCommand::script_with(MARKED_LINES_SCRIPT, ["/etc/hosts", facts::lab_marker(lab).as_str(), ""])
                .and(RemoteCommand::script(FACTS_REMOVE_SCRIPT)),
        ),
        "remove the lab facts",
    )
    .await
}
