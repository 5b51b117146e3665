//! May a node's rdma-agent pin the memory its workloads register? Its
//! locked-memory limit (RLIMIT_MEMLOCK, `/proc/PID/limits`) and whether it
//! holds CAP_IPC_LOCK (root does: then no limit applies), read on the node.
//! `doctor`'s memlock check and a run whose registration failed both read
//! it here. It changes nothing on the node.

use lab_remote::command::RemoteCommand;
use lab_remote::ssh::SshSession;
use lab_state::NodeState;

use crate::provision::as_root;

/// The script's text, as a literal so that `doctor`'s probe script can
/// include it (`concat!`). Prints `memlock SOFT HARD` and `agent_capeff HEX`
/// for the oldest rdma-agent process, `memlock none none` without one.
macro_rules! agent_memlock_script {
    () => {
        r#"
pid=$(pgrep -xo rdma-agent)
if [ -n "$pid" ]; then
    sed -n 's/^Max locked memory  *\([^ ]*\)  *\([^ ]*\).*/memlock \1 \2/p' "/proc/$pid/limits"
    sed -n 's/^CapEff:[[:space:]]*\([0-9a-f]*\)$/agent_capeff \1/p' "/proc/$pid/status"
else
    echo "memlock none none"
fi
"#
    };
}
pub(crate) use agent_memlock_script;

/// The script on its own.
const SCRIPT: &str = agent_memlock_script!();

/// CAP_IPC_LOCK's bit in `CapEff` (linux/capability.h): a process that has
/// it locks memory past RLIMIT_MEMLOCK.
const CAP_IPC_LOCK: u32 = 14;

/// What to do about a limit that is too low.
pub const FIX: &str = "raise it for the agent: LimitMEMLOCK=infinity in its systemd unit (labctl's provisioning \
     sets it), or `ulimit -l unlimited` where it is started, or start it with CAP_IPC_LOCK (as root)";

/// A memlock limit as `/proc/PID/limits` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memlock {
    /// `unlimited`.
    Unlimited,
    /// Bytes.
    Bytes(u64),
}

impl std::fmt::Display for Memlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Memlock::Unlimited => f.write_str("unlimited"),
            Memlock::Bytes(b) => write!(f, "{} KiB", b / 1024),
        }
    }
}

/// The agent's limit and capability, as the script printed them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgentMemlock {
    /// The soft limit; None when no agent process was found.
    pub limit: Option<Memlock>,
    /// The agent holds CAP_IPC_LOCK, so no limit applies to what it registers.
    pub ipc_lock: bool,
}

impl AgentMemlock {
    /// Takes one line of the script's output, split into words; false when
    /// the line is not one of the script's.
    pub fn take_line(&mut self, words: &[&str]) -> bool {
        match words {
            ["memlock", soft, _hard] => {
                self.limit = match *soft {
                    "unlimited" => Some(Memlock::Unlimited),
                    n => n.parse().ok().map(Memlock::Bytes),
                };
                true
            }
            ["agent_capeff", hex] => {
                self.ipc_lock = u64::from_str_radix(hex, 16).is_ok_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0);
                true
            }
            _ => false,
        }
    }

    /// Parses the script's output.
    pub fn parse(text: &str) -> AgentMemlock {
        let mut found = AgentMemlock::default();
        for line in text.lines() {
            found.take_line(&line.split_whitespace().collect::<Vec<_>>());
        }
        found
    }

    /// The most the agent may lock, in bytes: None when nothing limits it
    /// (CAP_IPC_LOCK or an unlimited limit) or no agent runs.
    pub fn bound(&self) -> Option<u64> {
        match (self.ipc_lock, self.limit) {
            (false, Some(Memlock::Bytes(b))) => Some(b),
            _ => None,
        }
    }
}

/// Reads the agent's limit on `node`; None when the node cannot be asked.
pub async fn read(node: &NodeState, session: &SshSession) -> Option<AgentMemlock> {
    let out = session.exec(&as_root(node, RemoteCommand::script(SCRIPT))).await.ok()?;
    (out.status == 0).then(|| AgentMemlock::parse(&out.stdout_text()))
}

/// The size a failed registration asked for, from the agent's error
/// (`ibv_reg_mr of 65536 B: ...`); None when the error is not one.
pub fn refused_registration(message: &str) -> Option<u64> {
    let (_, rest) = message.split_once("ibv_reg_mr of ")?;
    rest.split_once(" B")?.0.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_root_is_not_bound_by_its_limit_and_a_plain_process_is() {
        // The lab's agent runs as root: every capability, an 8 MiB limit
        // that does not apply.
        let root = AgentMemlock::parse("memlock 8388608 8388608\nagent_capeff 000001ffffffffff\n");
        assert_eq!(root.limit, Some(Memlock::Bytes(8 << 20)));
        assert!(root.ipc_lock);
        assert_eq!(root.bound(), None);
        // Without CAP_IPC_LOCK (bit 14 clear) the limit binds.
        let plain = AgentMemlock::parse("memlock 65536 65536\nagent_capeff 000001ffffffbfff\n");
        assert!(!plain.ipc_lock);
        assert_eq!(plain.bound(), Some(64 * 1024));
        assert_eq!(plain.limit.unwrap().to_string(), "64 KiB");
        let unlimited = AgentMemlock::parse("memlock unlimited unlimited\nagent_capeff 0\n");
        assert_eq!(unlimited.bound(), None);
        assert_eq!(AgentMemlock::parse("memlock none none\n"), AgentMemlock::default());
    }

    #[test]
    fn test_a_refused_registration_is_read_from_the_agents_error() {
        assert_eq!(
            refused_registration("prepare: ibv_reg_mr of 262144 B: Cannot allocate memory (os error 12)"),
            Some(262_144)
        );
        assert_eq!(refused_registration("IBV_WC_RETRY_EXC_ERR"), None);
    }
}
