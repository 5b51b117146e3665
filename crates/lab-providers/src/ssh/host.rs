//! What the SSH provider changes on a host and how it undoes it: the host
//! lock, the lab's one directory, the agent's supervisor, and with
//! `fabric: rxe` the rxe link the lab adds where the data netdev has none
//! (the node-side half is `provisioning/node/host-lab.sh`; the link is added
//! by provisioning's rxe setup), and the netem qdisc `labctl impair` set
//! (recorded by lab-core's impair before it is set). Nothing outside those.

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
/// Exit status of `host-lab.sh release` when the lab's rxe link is open elsewhere.
const RXE_IN_USE: i32 = 24;

/// What labctl records for lab `lab` (id `id`) on a host, before it
/// touches it; `controller` names the machine running labctl. With
/// `adds_rxe` (fabric rxe), the name of the rxe link it would add.
pub fn planned_changes(lab: &str, id: &str, controller: &str, adds_rxe: bool) -> HostChanges {
    let short = &id[..id.len().min(8)];
    HostChanges {
        dir: format!("{LABS_ROOT}/{lab}-{short}"),
        lock: HOST_LOCK.into(),
        holder: format!("lab={lab} id={id} controller={controller}"),
        unit: format!("labctl-agent-{lab}-{short}"),
        supervisor: None,
        watchdog_pid: None,
        // Named after the lab's id: the host lock keeps other labs off the
        // host, and the name says whose link it is.
        rxe_link: adds_rxe.then(|| format!("rxe_{short}")),
        netem_netdev: None,
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
                "the host is in use by another lab: {} ({})",
                describe_holder(stderr.trim_start_matches("held by: ")),
                changes.lock
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

/// A lock's holder line (`lab=L id=I controller=C`) in words.
pub fn describe_holder(line: &str) -> String {
    let field = |key: &str| {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key))
            .unwrap_or("?")
            .to_string()
    };
    if !line.contains("lab=") {
        return format!("an unreadable lock `{line}`");
    }
    format!(
        "lab `{}` (id {}) of controller `{}`",
        field("lab="),
        field("id="),
        field("controller=")
    )
}

/// Stops the lab's agent, removes its directory, the netem qdisc `impair`
/// set (only while it is still a netem one), the rxe link it added (not
/// while another process holds it open) and its host lock (only while the
/// lock is still the lab's own). Idempotent.
pub async fn release(
    session: &SshSession,
    node: &str,
    login_is_root: bool,
    changes: &HostChanges,
) -> Result<(), ProviderError> {
    let out = session
        .exec(&root(
            login_is_root,
            &[
                "release",
                &changes.lock,
                &changes.dir,
                &changes.unit,
                &changes.holder,
                changes.rxe_link.as_deref().unwrap_or("-"),
                changes.netem_netdev.as_deref().unwrap_or("-"),
            ],
        ))
        .await?;
    if out.status == RXE_IN_USE {
        return Err(ProviderError::Host {
            node: node.to_string(),
            problem: format!(
                "{}; the link and the host lock stay",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            fix: "stop those processes (a program that used rdma_cm keeps every RDMA device of the host open until it exits), then run `labctl down` again".into(),
        });
    }
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

/// What `changes` left on a host, one item a line (indented), for the
/// error of a `down` that could not undo it.
pub fn leftovers(changes: &HostChanges) -> String {
    let agent = match (changes.supervisor.as_deref(), changes.watchdog_pid) {
        (Some("systemd"), _) => format!("the agent, in the transient systemd unit {}", changes.unit),
        (_, Some(pid)) => format!("the agent under its watchdog (pid {pid})"),
        _ => format!("the agent, if it started (unit {} or its pid file)", changes.unit),
    };
    let mut items = vec![
        format!(
            "the directory {} (the agent binary, its secret, log and pid files, the lab facts)",
            changes.dir
        ),
        agent,
        format!("the host lock {} ({})", changes.lock, changes.holder),
    ];
    if let Some(link) = &changes.rxe_link {
        items.push(format!("the rxe link {link} the lab added"));
    }
    if let Some(netdev) = &changes.netem_netdev {
        items.push(format!("the netem qdisc on {netdev}"));
    }
    items.iter().map(|item| format!("    - {item}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_leftovers_list_everything_recorded() {
        let mut changes = planned_changes("lab1", "abcd", "me@ctl", true);
        changes.rxe_link = Some("rxe_lab1".into());
        changes.netem_netdev = Some("eth1".into());
        changes.supervisor = Some("systemd".into());
        let text = leftovers(&changes);
        for wanted in [
            changes.dir.as_str(),
            changes.unit.as_str(),
            changes.lock.as_str(),
            "the rxe link rxe_lab1",
            "the netem qdisc on eth1",
        ] {
            assert!(text.contains(wanted), "{wanted} missing in:\n{text}");
        }
        assert_eq!(text.lines().count(), 5, "{text}");
    }

    #[test]
    fn test_listening_ports_read_from_proc_net_tcp() {
        // Lines of a real /proc/net/tcp and /proc/net/tcp6 (state 0A is LISTEN, 01 ESTABLISHED).
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:8837 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 54775 1 000000003d872ff8 100 0 0 10 0\n\
   1: 0100007F:1D2F 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 62348 1 0000000012ef654b 100 0 0 10 0\n\
   2: 0100007F:1D2E 0100007F:B3A2 01 00000000:00000000 00:00000000 00000000     0        0 1669 1 0000000066bbedb4 20 4 30 10 -1\n\
   0: 00000000000000000000000001000000:1D30 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 7 1 0 100 0 0 10 0\n";
        let ports = listening_ports(text);
        assert_eq!(ports.into_iter().collect::<Vec<_>>(), [7471, 7472, 34871]);
        // 7470 (0x1D2E) is only an established connection's local port: free.
        let taken = listening_ports(text);
        assert_eq!(free_agent_port(&taken), Some(7473));
        let all: BTreeSet<u16> = AGENT_PORTS.collect();
        assert_eq!(free_agent_port(&all), None);
    }

    #[test]
    fn test_planned_changes_name_the_lab_and_its_id() {
        let c = planned_changes("bench", "0123456789abcdef", "ctl1", false);
        assert_eq!(c.rxe_link, None);
        let rxe = planned_changes("bench", "0123456789abcdef", "ctl1", true);
        assert_eq!(rxe.rxe_link.as_deref(), Some("rxe_01234567"));
        assert_eq!(c.dir, "/var/lib/labctl/bench-01234567");
        assert_eq!(c.lock, "/run/labctl/host.lock");
        assert_eq!(c.holder, "lab=bench id=0123456789abcdef controller=ctl1");
        assert_eq!(c.unit, "labctl-agent-bench-01234567");
        assert_eq!(
            describe_holder(&c.holder),
            "lab `bench` (id 0123456789abcdef) of controller `ctl1`"
        );
        assert_eq!(describe_holder("garbage"), "an unreadable lock `garbage`");
    }

    fn script(args: &[&str]) -> std::process::Output {
        std::process::Command::new("sh")
            .arg("-c")
            .arg(HOST_LAB_SCRIPT)
            .arg("sh")
            .args(args)
            .output()
            .unwrap()
    }

    #[test]
    fn test_the_host_script_refuses_a_held_lock_and_foreign_directories() {
        // Run on the controller itself: both refusals happen before the
        // script writes anything.
        let tmp = std::env::temp_dir().join(format!("labctl-host-lock-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let lock = tmp.join("host.lock");
        std::fs::write(&lock, "lab=other id=1 controller=c\n").unwrap();
        let dir = format!("/var/lib/labctl/never-made-{}", std::process::id());
        let held = script(&["claim", lock.to_str().unwrap(), &dir, "lab=mine id=2 controller=c"]);
        assert_eq!(held.status.code(), Some(HELD_ELSEWHERE), "{held:?}");
        assert_eq!(
            String::from_utf8_lossy(&held.stderr),
            "held by: lab=other id=1 controller=c\n"
        );
        assert!(!std::path::Path::new(&dir).exists());
        // release of another lab's lock leaves it, and never a directory outside /var/lib/labctl.
        let foreign = script(&[
            "release",
            lock.to_str().unwrap(),
            tmp.to_str().unwrap(),
            "u",
            "lab=mine id=2 controller=c",
        ]);
        assert_eq!(foreign.status.code(), Some(21), "{foreign:?}");
        assert!(lock.exists() && tmp.exists());
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
