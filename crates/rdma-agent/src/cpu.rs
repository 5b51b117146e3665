//! CPU time of the calling thread (user and system seconds) via getrusage.

/// User and system CPU seconds at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTimes {
    /// Seconds spent in user mode.
    pub user_s: f64,
    /// Seconds spent in the kernel.
    pub system_s: f64,
}

impl CpuTimes {
    /// The calling thread's CPU times so far (RUSAGE_THREAD: each session
    /// runs on its own thread, so deltas are that session's cost alone).
    pub fn thread_now() -> CpuTimes {
        // getrusage is FFI; it lives with the rest of the unsafe code.
        let (user_s, system_s) = crate::verbs::thread_cpu_seconds();
        CpuTimes { user_s, system_s }
    }

    /// The CPU time spent between `earlier` and `self`.
    pub fn since(&self, earlier: &CpuTimes) -> CpuTimes {
        CpuTimes {
            user_s: (self.user_s - earlier.user_s).max(0.0),
            system_s: (self.system_s - earlier.system_s).max(0.0),
        }
    }
}

/// CPU time the whole node spent busy (every CPU, every process, and the
/// kernel's softirq work, where rxe's packet processing runs), from the
/// first line of `/proc/stat`. The per-thread [`CpuTimes`] cannot see work
/// the kernel does outside the thread; this can, mixed with everything else
/// the node did meanwhile.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NodeBusy {
    /// Busy seconds (user, nice, system, irq, softirq, steal) summed over CPUs.
    pub busy_s: f64,
}

/// `/proc/stat` counts in USER_HZ, which the kernel fixes at 100 for userspace.
const USER_HZ: f64 = 100.0;

impl NodeBusy {
    /// The node's busy time so far, or None where `/proc/stat` is unreadable.
    pub fn now() -> Option<NodeBusy> {
        Self::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// Parses the aggregate `cpu` line of `/proc/stat` text.
    pub fn parse(stat: &str) -> Option<NodeBusy> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let fields: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|f| f.parse().ok())
            .collect::<Option<_>>()?;
        // user nice system idle iowait irq softirq steal [guest guest_nice]: guest
        // time is already inside user and nice, idle and iowait are not busy.
        let busy: u64 = [0usize, 1, 2, 5, 6, 7].iter().filter_map(|&i| fields.get(i)).sum();
        Some(NodeBusy {
            busy_s: busy as f64 / USER_HZ,
        })
    }

    /// Busy seconds between `earlier` and `self`.
    pub fn since(&self, earlier: &NodeBusy) -> f64 {
        (self.busy_s - earlier.busy_s).max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_never_go_negative() {
        let later = CpuTimes {
            user_s: 2.0,
            system_s: 1.0,
        };
        let earlier = CpuTimes {
            user_s: 0.5,
            system_s: 1.5,
        };
        assert_eq!(
            later.since(&earlier),
            CpuTimes {
                user_s: 1.5,
                system_s: 0.0
            }
        );
    }

    #[test]
    fn thread_times_are_monotonic() {
        // Some sandboxes do not account per-thread time; only monotonicity is portable.
        let a = CpuTimes::thread_now();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(x);
        let b = CpuTimes::thread_now();
        assert!(b.user_s >= a.user_s && b.system_s >= a.system_s);
    }

    #[test]
    fn test_node_busy_counts_all_but_idle_and_iowait() {
        let stat = "cpu  100 20 30 1000 50 5 15 2 7 0\ncpu0 100 20 30 1000 50 5 15 2 7 0\nintr 1\n";
        let busy = NodeBusy::parse(stat).unwrap();
        assert!((busy.busy_s - 1.72).abs() < 1e-9, "{busy:?}");
        assert_eq!(NodeBusy::parse("intr 1\n"), None);
        let later = NodeBusy { busy_s: 3.0 };
        assert!((later.since(&busy) - 1.28).abs() < 1e-9);
        assert_eq!(busy.since(&later), 0.0);
    }
}
