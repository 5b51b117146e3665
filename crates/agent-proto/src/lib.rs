//! The gRPC contract between `labctl` and `rdma-agent`, generated from
//! `proto/rdma_agent/v1/agent.proto`, and the one rule both sides apply to
//! every call: it carries the lab's agent secret ([`auth`]), and the one
//! reading of a `NodeInfo` reply both sides make: where a node's data
//! address lives on either link layer ([`data_path`]).
//!
//! This crate owns the wire contract only; it must not hold workload or
//! orchestration logic.

pub mod auth;
pub mod data_path;
#[cfg(any(test, feature = "test-fixtures"))]
pub mod fixtures;

/// Version 1 of the agent API.
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    tonic::include_proto!("rdma_agent.v1");

    /// `TraceEvent.name` of a failed verbs completion: its own opcode is not
    /// valid (only wr_id, status, qp_num and vendor_err are, ibv_poll_cq(3)),
    /// so a reader names it after the post it completes.
    pub const FAILED_COMPLETION_OPCODE: &str = "FAILED";

    // The catalogue's enums are the run's parameters; these are their wire
    // form. The conversions both ways live here, and nowhere else.
    use workload_catalogue as catalogue;

    impl Fault {
        /// The fault's name as `labctl run --inject-fault` and run records spell it.
        pub fn label(self) -> &'static str {
            catalogue::Fault::try_from(self).map_or("none", catalogue::Fault::label)
        }
    }

    impl From<catalogue::Fault> for Fault {
        fn from(f: catalogue::Fault) -> Fault {
            match f {
                catalogue::Fault::Skip => Fault::Skip,
                catalogue::Fault::Corrupt => Fault::Corrupt,
            }
        }
    }

    impl TryFrom<Fault> for catalogue::Fault {
        /// `Fault::None`: no fault.
        type Error = ();
        fn try_from(f: Fault) -> Result<catalogue::Fault, ()> {
            match f {
                Fault::None => Err(()),
                Fault::Skip => Ok(catalogue::Fault::Skip),
                Fault::Corrupt => Ok(catalogue::Fault::Corrupt),
            }
        }
    }

    impl From<catalogue::Cm> for CmMode {
        fn from(cm: catalogue::Cm) -> CmMode {
            match cm {
                catalogue::Cm::RdmaCm => CmMode::RdmaCm,
                catalogue::Cm::Oob => CmMode::Oob,
            }
        }
    }

    impl From<CmMode> for catalogue::Cm {
        fn from(cm: CmMode) -> catalogue::Cm {
            match cm {
                CmMode::RdmaCm => catalogue::Cm::RdmaCm,
                CmMode::Oob => catalogue::Cm::Oob,
            }
        }
    }

    impl From<catalogue::Completion> for CompletionMode {
        fn from(c: catalogue::Completion) -> CompletionMode {
            match c {
                catalogue::Completion::Poll => CompletionMode::Poll,
                catalogue::Completion::Event => CompletionMode::Event,
                catalogue::Completion::Auto => CompletionMode::Auto,
            }
        }
    }

    impl From<CompletionMode> for catalogue::Completion {
        fn from(c: CompletionMode) -> catalogue::Completion {
            match c {
                CompletionMode::Poll => catalogue::Completion::Poll,
                CompletionMode::Event => catalogue::Completion::Event,
                CompletionMode::Auto => catalogue::Completion::Auto,
            }
        }
    }

    impl WorkloadParams {
        /// How long a run may take beyond its timeout (`timeout_ms`, the
        /// setup allowance): the client's connect delay and, for a timed
        /// run, its duration at each size (a sweep runs every power of two
        /// from 2 B to its largest size; counted here as all of them, a
        /// bound for the sweeps that start higher). The agents' deadlines
        /// and the controller's are both counted from timeout + this.
        pub fn beyond_timeout(&self) -> std::time::Duration {
            let delay = u64::from(self.connect_delay_ms.min(catalogue::limits::MAX_CONNECT_DELAY_MS));
            let per_size = if self.iterations == 0 {
                std::time::Duration::try_from_secs_f64(self.duration_s).unwrap_or_default()
            } else {
                std::time::Duration::ZERO
            };
            let sizes = if self.all_sizes {
                catalogue::limits::sweep_max(self.max_size).max(2).ilog2()
            } else {
                1
            };
            std::time::Duration::from_millis(delay) + per_size * sizes
        }

        /// The parameters a workload runs with when nothing says otherwise:
        /// its catalogue defaults, in the request's form. An unknown name
        /// gets the common defaults (the agent refuses it by name).
        pub fn defaults_of(workload: &str) -> WorkloadParams {
            let d = catalogue::find(workload).map_or(catalogue::Defaults::of(4096, 16), |w| w.defaults);
            WorkloadParams {
                workload: workload.to_string(),
                completion: CompletionMode::from(d.completion) as i32,
                size: d.size,
                iterations: d.iterations,
                tx_depth: d.tx_depth,
                num_qps: d.qps,
                batches: d.batches,
                total: d.total,
                ib_port: 1,
                gid_index: -1,
                seed: 1,
                ..Default::default()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::v1::WorkloadParams;

    #[test]
    fn test_a_run_goes_beyond_its_timeout_by_its_delay_and_a_timed_runs_duration() {
        let counted = WorkloadParams {
            iterations: 100,
            duration_s: 30.0,
            connect_delay_ms: 2_000,
            ..Default::default()
        };
        // A counted run's duration_s is not its length.
        assert_eq!(counted.beyond_timeout(), Duration::from_secs(2));
        let timed = WorkloadParams {
            iterations: 0,
            duration_s: 30.0,
            ..counted.clone()
        };
        assert_eq!(timed.beyond_timeout(), Duration::from_secs(32));
        // A sweep 2 B ..= 64 KiB: 16 sizes, each timed.
        let sweep = WorkloadParams {
            all_sizes: true,
            max_size: 64 << 10,
            duration_s: 1.0,
            ..timed.clone()
        };
        assert_eq!(sweep.beyond_timeout(), Duration::from_secs(2 + 16));
        let nonsense = WorkloadParams {
            iterations: 0,
            duration_s: f64::NAN,
            connect_delay_ms: u32::MAX,
            ..Default::default()
        };
        assert_eq!(
            nonsense.beyond_timeout(),
            Duration::from_millis(u64::from(workload_catalogue::limits::MAX_CONNECT_DELAY_MS))
        );
    }
}
