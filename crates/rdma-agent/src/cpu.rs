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
}
