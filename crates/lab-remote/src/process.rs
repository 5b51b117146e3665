//! A user's command on a node that can be stopped, and a wait for a port to
//! listen: what a CI step needs around a command that may hang.
//!
//! Closing the SSH channel does not stop a command started without a
//! terminal, so a command that must be stoppable is started by [`in_group`]:
//! a small script of ours notes the command's process group (sshd starts
//! every session command as a session leader, so the group holds the
//! command and whatever it started) in a file on the node, runs the command,
//! and removes the file when it ends. [`stop_group`] signals that group:
//! SIGTERM, then SIGKILL after two seconds.
//!
//! It must not decide when to stop anything (the orchestration crate does).

use crate::command::RemoteCommand;

/// Runs `"$2" "$3" ...` with the caller's process group noted in `$1`; the
/// note is removed when the command ends; the exit status is the command's.
/// Its stdout is line-buffered where coreutils' `stdbuf` is there (its
/// environment reaches every program the command starts): a C program
/// writing into the SSH channel's pipe would otherwise hold its output in
/// a 4 KiB block until it exits, so a `ready` line would arrive only at
/// exit, and a program that is killed would lose all of it.
const IN_GROUP: &str = r#"read -r _ _ _ _ pgid _ < /proc/$$/stat || exit 125
echo "$pgid" > "$1" || exit 125
note=$1; shift
if command -v stdbuf >/dev/null 2>&1; then
  stdbuf -oL -eL "$@"
else
  "$@"
fi
status=$?
rm -f -- "$note"
exit $status"#;

/// Stops the process group noted in `$1` (if the note is still there):
/// SIGTERM, then SIGKILL after 2 s; removes the note; prints `stopped` when
/// there was something to stop. Refuses a note that
/// is not a plain number above 1, so a damaged file cannot signal init or
/// every process.
// dash's kill takes no `--`; a negative number after the signal is a group.
const STOP_GROUP: &str = r#"[ -f "$1" ] || exit 0
pgid=$(cat -- "$1")
rm -f -- "$1"
case $pgid in ''|*[!0-9]*|0|1) echo "not a process group: '$pgid'" >&2; exit 1;; esac
kill -TERM "-$pgid" 2>/dev/null || exit 0
echo stopped
i=0
while kill -0 "-$pgid" 2>/dev/null && [ $i -lt 20 ]; do sleep 0.1; i=$((i + 1)); done
kill -KILL "-$pgid" 2>/dev/null
exit 0"#;

/// Exits 0 as soon as port `$1` listens on the node, 1 once `$2` seconds
/// have passed by the node's clock. A TCP listener (IPv4 or IPv6, from
/// /proc/net/tcp*) or an RDMA CM one: an rdma_cm server (rping, ucmatose,
/// a user's program) listens in the RDMA CM port space and has no socket;
/// `rdma resource show cm_id` lists it as `state LISTEN` with its
/// `src-addr ADDR:PORT` (seen by root only for other users' processes).
/// Bounded by time, not by a count of checks: on a slow (emulated) node
/// each check takes longer, and a count-bounded loop outlived the caller's
/// own deadline, leaving a `sleep` behind after the step ended. Reads /proc
/// for TCP, so it needs neither ss nor netstat.
const WAIT_LISTENING: &str = r#"hex=$(printf ':%04X' "$1")
end=$(( $(date +%s) + $2 ))
while :; do
  if awk -v p="$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' /proc/net/tcp /proc/net/tcp6 2>/dev/null; then
    exit 0
  fi
  if rdma resource show cm_id 2>/dev/null | grep -Eq "state LISTEN .*src-addr [^ ]*:$1( |\$)"; then
    exit 0
  fi
  [ "$(date +%s)" -lt "$end" ] || exit 1
  sleep 0.2
done"#;

/// A fresh name for a process-group note on a node.
pub fn note_path(label: &str) -> String {
    let label: String = label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(32)
        .collect();
    format!("/tmp/labctl-{label}-{:08x}.pgid", rand::random::<u32>())
}

/// `command`, run in a way [`stop_group`] with the same `note` can stop.
pub fn in_group(note: &str, command: &RemoteCommand) -> RemoteCommand {
    RemoteCommand::script_with(IN_GROUP, [note, "sh", "-c", command.as_str()])
}

/// Stops what [`in_group`] started with `note`, if it still runs; its
/// output is `stopped` when it did stop something.
pub fn stop_group(note: &str) -> RemoteCommand {
    RemoteCommand::script_with(STOP_GROUP, [note])
}

/// Exits 0 once `port` listens on the node (TCP, or an RDMA CM listener),
/// 1 after `seconds` (at least 1) by the node's clock.
pub fn wait_listening(port: u16, seconds: u64) -> RemoteCommand {
    RemoteCommand::script_with(WAIT_LISTENING, [port.to_string(), seconds.max(1).to_string()])
}

#[cfg(test)]
mod tests {
    use std::process::Command;
    use std::time::{Duration, Instant};

    use super::*;

    fn sh(command: &RemoteCommand) -> std::process::Child {
        // setsid: as sshd starts a session command, in a session of its own.
        Command::new("setsid")
            .arg("sh")
            .arg("-c")
            .arg(command.as_str())
            .spawn()
            .expect("sh runs")
    }

    #[test]
    fn test_a_grouped_command_and_its_children_stop_and_the_note_goes() {
        let note = format!("/tmp/labctl-test-{}.pgid", std::process::id());
        let inner = RemoteCommand::user_line("sleep 300 & sleep 301; echo never");
        let mut child = sh(&in_group(&note, &inner));
        let started = Instant::now();
        while !std::path::Path::new(&note).exists() {
            assert!(started.elapsed() < Duration::from_secs(5), "no note written");
            std::thread::sleep(Duration::from_millis(20));
        }
        let pgid: i32 = std::fs::read_to_string(&note).unwrap().trim().parse().unwrap();
        assert_eq!(pgid, child.id() as i32, "the group is the session command's");
        let stop = Command::new("sh")
            .arg("-c")
            .arg(stop_group(&note).as_str())
            .output()
            .unwrap();
        assert!(stop.status.success());
        assert_eq!(String::from_utf8_lossy(&stop.stdout), "stopped\n");
        let status = child.wait().unwrap();
        assert!(!status.success());
        // Both sleeps are gone with the group.
        let left = Command::new("pgrep").arg("-g").arg(pgid.to_string()).output().unwrap();
        assert!(
            left.stdout.is_empty(),
            "left: {}",
            String::from_utf8_lossy(&left.stdout)
        );
        assert!(!std::path::Path::new(&note).exists());
    }

    #[test]
    fn test_a_grouped_command_keeps_its_status_and_removes_its_note() {
        let note = format!("/tmp/labctl-test-status-{}.pgid", std::process::id());
        let status = sh(&in_group(&note, &RemoteCommand::user_line("exit 7")))
            .wait()
            .unwrap();
        assert_eq!(status.code(), Some(7));
        assert!(!std::path::Path::new(&note).exists());
        // Stopping a finished command is fine, and says nothing.
        let stop = Command::new("sh")
            .arg("-c")
            .arg(stop_group(&note).as_str())
            .output()
            .unwrap();
        assert!(stop.status.success() && stop.stdout.is_empty());
    }

    #[test]
    fn test_a_damaged_note_signals_nothing() {
        let note = format!("/tmp/labctl-test-bad-{}.pgid", std::process::id());
        std::fs::write(&note, "1\n").unwrap();
        let out = Command::new("sh")
            .arg("-c")
            .arg(stop_group(&note).as_str())
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("not a process group: '1'"));
    }

    #[test]
    fn test_wait_listening_sees_a_listening_port_and_gives_up_on_a_closed_one() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let ok = Command::new("sh")
            .arg("-c")
            .arg(wait_listening(port, 2).as_str())
            .status()
            .unwrap();
        assert!(ok.success());
        drop(listener);
        let started = Instant::now();
        let closed = Command::new("sh")
            .arg("-c")
            .arg(wait_listening(port, 1).as_str())
            .status()
            .unwrap();
        assert!(!closed.success());
        assert!(started.elapsed() < Duration::from_secs(4));
    }
}
