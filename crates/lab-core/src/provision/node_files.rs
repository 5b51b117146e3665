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
/// (`>`), not renamed over, so it keeps its owner and mode, and an
/// `/etc/hosts` bind-mounted into a container keeps working. What it keeps
/// passes through a shell variable (`.` holds its trailing newlines): awk is
/// the one program it starts, each of which costs an emulated node a tenth
/// of a second.
const MARKED_LINES_SCRIPT: &str = r##"set -eu
file=$1 marker=$2
kept=.
if [ -e "$file" ]; then
    kept=$(awk -v m="$marker" '!(NF >= 2 && $NF == m && $(NF - 1) == "#")' "$file" && echo .)
fi
printf '%s%s' "${kept%.}" "$3" >"$file""##;

/// Writes the lab facts' files in one command: `$1` the directory (created
/// 0755), then pairs of path and content, each written 0644 to a new file
/// beside it and renamed over, so a reader never sees half a file. The new
/// file's name is made exclusively (noclobber) instead of by `mktemp` and
/// its mode comes from the umask: `mv` is the one program a file costs.
const FACTS_WRITE_SCRIPT: &str = r##"set -eu
[ -d "$1" ] || mkdir -p -m 0755 "$1"
shift
umask 022
set -C
tmp=
trap '[ -z "$tmp" ] || rm -f "$tmp"' EXIT
while [ "$#" -ge 2 ]; do
    n=0
    until { tmp=$1.labctl.$$.$n && : >"$tmp"; } 2>/dev/null; do
        tmp=
        n=$((n + 1))
        [ "$n" -lt 100 ] || { echo "cannot create a file beside $1" >&2; exit 1; }
    done
    printf '%s' "$2" >|"$tmp"
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("labctl-node-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Runs `script` with the host's `sh` as the node's shell runs it.
    fn run(script: &str, args: &[&str]) -> std::process::Output {
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .args(args)
            .output()
            .unwrap()
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn marked_lines_replace_only_the_labs_lines_and_keep_the_rest_byte_for_byte() {
        let dir = scratch("marked");
        let hosts = dir.join("hosts");
        // The user's lines, one that only looks like a marker mid-line, and
        // blank lines at the end: none of them is the lab's.
        let theirs = "127.0.0.1 localhost\n10.0.0.9 mine # lab-x extra\n\n\n";
        std::fs::write(&hosts, format!("{theirs}10.77.0.1 server # lab-x\n")).unwrap();
        std::fs::set_permissions(&hosts, std::fs::Permissions::from_mode(0o640)).unwrap();
        let path = hosts.to_str().unwrap();

        let out = run(MARKED_LINES_SCRIPT, &[path, "lab-x", "10.77.0.2 client # lab-x\n"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(
            std::fs::read_to_string(&hosts).unwrap(),
            format!("{theirs}10.77.0.2 client # lab-x\n")
        );
        assert_eq!(mode(&hosts), 0o640, "rewritten in place, mode kept");

        let out = run(MARKED_LINES_SCRIPT, &[path, "lab-x", ""]);
        assert!(out.status.success());
        assert_eq!(std::fs::read_to_string(&hosts).unwrap(), theirs);

        // A file that does not exist yet is created with the new lines.
        let fresh = dir.join("known_hosts");
        let out = run(MARKED_LINES_SCRIPT, &[fresh.to_str().unwrap(), "lab-x", "a # lab-x\n"]);
        assert!(out.status.success());
        assert_eq!(std::fs::read_to_string(&fresh).unwrap(), "a # lab-x\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn facts_files_are_written_whole_0644_and_leave_nothing_beside_them() {
        let dir = scratch("facts");
        let etc = dir.join("etc-labctl");
        let env = etc.join("lab.env");
        let hostfile = etc.join("hostfile");
        let args = |env_text: &'static str| {
            vec![
                etc.to_str().unwrap().to_string(),
                env.to_str().unwrap().to_string(),
                env_text.to_string(),
                hostfile.to_str().unwrap().to_string(),
                "server slots=1\nclient slots=1\n".to_string(),
            ]
        };
        for env_text in ["LAB_NAME=one\n", "LAB_NAME=two\n"] {
            let args = args(env_text);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = run(FACTS_WRITE_SCRIPT, &args);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            assert_eq!(std::fs::read_to_string(&env).unwrap(), env_text);
        }
        assert_eq!(
            std::fs::read_to_string(&hostfile).unwrap(),
            "server slots=1\nclient slots=1\n"
        );
        assert_eq!(mode(&env), 0o644);
        assert_eq!(mode(&hostfile), 0o644);
        assert_eq!(mode(&etc), 0o755);
        let mut names: Vec<String> = std::fs::read_dir(&etc)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["hostfile", "lab.env"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
