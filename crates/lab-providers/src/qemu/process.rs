//! The processes a QEMU lab started, identified by pid and start time.
//!
//! A pid alone names whatever process has it now; after a reboot or enough
//! churn that is someone else's. The start time (`/proc/<pid>/stat` field
//! 22, clock ticks since boot) together with the pid names exactly one
//! process for the life of the machine, so `down` signals only what `up`
//! started.

use std::fs;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

/// One process the lab started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartedProcess {
    /// Its pid.
    pub pid: u32,
    /// When it started, in clock ticks since boot.
    pub start_ticks: u64,
}

impl StartedProcess {
    /// The live process `pid` as it is now, or `None` when there is none.
    pub fn of(pid: u32) -> Option<StartedProcess> {
        let stat = read_stat(pid)?;
        Some(StartedProcess {
            pid,
            start_ticks: stat.start_ticks,
        })
    }

    /// Whether this very process is still running (not exited, not a zombie).
    pub fn is_running(&self) -> bool {
        read_stat(self.pid).is_some_and(|stat| stat.start_ticks == self.start_ticks && stat.state != 'Z')
    }

    /// Sends `signal` if this very process is still running; whether it was sent.
    pub fn signal(&self, signal: Signal) -> bool {
        self.is_running() && kill(Pid::from_raw(self.pid as i32), signal).is_ok()
    }
}

struct Stat {
    state: char,
    start_ticks: u64,
}

/// The state and start time from `/proc/<pid>/stat`. The command name (field
/// 2) is in parentheses and may hold spaces or parentheses itself, so the
/// fields after it are counted from its last `)`.
fn read_stat(pid: u32) -> Option<Stat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

fn parse_stat(text: &str) -> Option<Stat> {
    let mut fields = text.rsplit_once(')')?.1.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Field 3 is the state; the start time is field 22, 19 fields later.
    let start_ticks = fields.nth(18)?.parse().ok()?;
    Some(Stat { state, start_ticks })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_stat_fields_are_counted_after_the_command_name() {
        let line = "4242 (qemu) (x y)) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 3 0 987654 1000 10 0 0";
        let stat = parse_stat(line).unwrap();
        assert_eq!(stat.state, 'S');
        assert_eq!(stat.start_ticks, 987654);
    }

    #[test]
    fn test_a_process_is_known_by_pid_and_start_time() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let started = StartedProcess::of(child.id()).unwrap();
        assert!(started.is_running());
        // The same pid with another start time is another process.
        let other = StartedProcess {
            start_ticks: started.start_ticks + 1,
            ..started
        };
        assert!(!other.is_running());
        assert!(!other.signal(Signal::SIGKILL));
        assert!(started.signal(Signal::SIGKILL));
        child.wait().unwrap();
        assert!(!started.is_running());
    }
}
