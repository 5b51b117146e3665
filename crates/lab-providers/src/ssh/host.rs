//! What the SSH provider changes on a host and how it undoes it: the host
//! lock, the lab's one directory, the agent's supervisor (the node-side
//! half is `provisioning/node/host-lab.sh`). Nothing outside those.

use std::collections::BTreeSet;

use lab_remote::command::RemoteCommand;
use lab_remote::ssh::SshSession;
use lab_state::HostChanges;

use crate::provider::ProviderError;

/// The node-side script (see its header for the subcommands).
pub const HOST_LAB_SCRIPT: &str = include_str!("../../../../provisioning/node/host-lab.sh");

/// Where labctl keeps each lab's directory on a host.
pub const LABS_ROOT: &str = "/var/lib/labctl";

/// The host lock: one lab at a time per host.
pub const HOST_LOCK: &str = "/run/labctl/host.lock";

/// The agent ports an ssh lab may take on a host's loopback: the first free
/// one wins at preflight (7470 is the default port of the labs labctl boots).
pub const AGENT_PORTS: std::ops::RangeInclusive<u16> = 7471..=7570;

/// Exit status of `host-lab.sh claim` when another lab holds the host.
const HELD_ELSEWHERE: i32 = 22;

/// What labctl records for lab `lab` (id `id`) on a host, before it
/// touches it; `controller` names the machine running labctl.
pub fn planned_changes(lab: &str, id: &str, controller: &str) -> HostChanges {
    let short = &id[..id.len().min(8)];
    HostChanges {
        dir: format!("{LABS_ROOT}/{lab}-{short}"),
        lock: HOST_LOCK.into(),
        holder: format!("lab={lab} id={id} controller={controller}"),
        unit: format!("labctl-agent-{lab}-{short}"),
        supervisor: None,
        watchdog_pid: None,
    }
}

/// The TCP ports something listens on, from `/proc/net/tcp` and
/// `/proc/net/tcp6` text (state `0A` is LISTEN; ports are hex).
pub fn listening_ports(proc_net_tcp: &str) -> BTreeSet<u16> {
    proc_net_tcp
        .lines()
        .filter_map(|line| {
            let mut cols = line.split_whitespace();
            let local = cols.nth(1)?;
            let state = cols.nth(1)?;
            if state != "0A" {
                return None;
            }
            u16::from_str_radix(local.rsplit(':').next()?, 16).ok()
        })
        .collect()
}

/// The first port of [`AGENT_PORTS`] nothing listens on.
pub fn free_agent_port(listening: &BTreeSet<u16>) -> Option<u16> {
    AGENT_PORTS.clone().find(|p| !listening.contains(p))
}

/// Reads the host's listening ports and picks the agent's.
pub async fn pick_agent_port(session: &SshSession, node: &str) -> Result<u16, ProviderError> {
    let text = session
        .run(
            &RemoteCommand::new("cat")
                .args(["/proc/net/tcp", "/proc/net/tcp6"])
                .stderr_to_null()
                .or(RemoteCommand::new("true")),
        )
        .await?
        .stdout_text();
    free_agent_port(&listening_ports(&text)).ok_or_else(|| ProviderError::Host {
        node: node.to_string(),
        problem: format!(
            "every port of {}-{} on the host's loopback is taken",
            AGENT_PORTS.start(),
            AGENT_PORTS.end()
        ),
        fix: "free one of them (`ss -ltn` lists what listens)".into(),
    })
}

fn root(login_is_root: bool, args: &[&str]) -> RemoteCommand {
    RemoteCommand::script_with(HOST_LAB_SCRIPT, args.iter().copied()).as_root(login_is_root)
}

/// Takes the host lock for the lab (or finds it the lab's own, from an
/// earlier `up`) and makes its directory. Another lab's lock is an error
/// naming it.
pub async fn claim(
    session: &SshSession,
    node: &str,
    login_is_root: bool,
    changes: &HostChanges,
) -> Result<(), ProviderError> {
    let out = session
        .exec(&root(
            login_is_root,
            &["claim", &changes.lock, &changes.dir, &changes.holder],
        ))
        .await?;
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    match out.status {
        0 => Ok(()),
        HELD_ELSEWHERE => Err(ProviderError::Host {
            node: node.to_string(),
            problem: format!(
                "the host is in use by another lab: {} {}",
                changes.lock,
                stderr.trim_start_matches("held by: ")
            ),
            fix: "run `labctl down` of that lab on the controller named, or give this lab other hosts".into(),
        }),
        status => Err(ProviderError::Host {
            node: node.to_string(),
            problem: format!("preparing {} failed (exit status {status}): {stderr}", changes.dir),
            fix: "check that root can write /var/lib and /run on the host".into(),
        }),
    }
}

/// Stops the lab's agent, removes its directory and its host lock (only
/// while the lock is still the lab's own). Idempotent.
pub async fn release(
    session: &SshSession,
    node: &str,
    login_is_root: bool,
    changes: &HostChanges,
) -> Result<(), ProviderError> {
    let out = session
        .exec(&root(
            login_is_root,
            &["release", &changes.lock, &changes.dir, &changes.unit, &changes.holder],
        ))
        .await?;
    if out.status != 0 {
        return Err(ProviderError::Host {
            node: node.to_string(),
            problem: format!(
                "removing {} failed (exit status {}): {}",
                changes.dir,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            fix: "run `labctl down` again; `labctl status --json` lists what is left on the host".into(),
        });
    }
    Ok(())
}
