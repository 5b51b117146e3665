//! The agent's dispatch table: each workload of the catalogue
//! (`workload-catalogue`) maps to the code that runs it here (a verbs
//! [`Workload`], a libfabric [`fabric_session::Kind`], or the TCP session).
//! The service looks a request up here, validates it with the catalogue
//! entry's rules and the workload's own checks, and starts the session the
//! runner names.
//!
//! This module owns the table and the name lookup; it must not hold any
//! workload's facts (they are the catalogue's) or behaviour (it lives with
//! the workload). Its tests fail while a workload exists on one side only.

use agent_proto::v1::WorkloadParams;
use workload_catalogue::{Collective, Family};

use crate::fabric_session;
use crate::tcp_session;
use crate::validate::{self, Limits, ValidationError};
use crate::workload::collective::{self, CollectiveWorkload};
use crate::workload::{
    atomic, bulk, inference_ring, mr_cache, param_server, perf, read, send_recv, write_imm, write_read, Workload,
};

/// What runs a workload.
#[derive(Clone, Copy)]
pub enum Runner {
    /// A verbs workload on a QP (rdma_cm or oob setup).
    Verbs(&'static dyn Workload),
    /// A libfabric RDM workload.
    Fabric(fabric_session::Kind),
    /// bulk-tcp, over a kernel TCP socket.
    Tcp,
    /// A collective over libfabric RDM: what a collective's request naming
    /// a provider runs (made by [`check`], not listed in the registry).
    FabricCollective {
        /// The registry name ("allreduce").
        name: &'static str,
        /// The operation.
        op: Collective,
    },
}

impl Runner {
    /// The name of the workload it runs.
    pub fn name(&self) -> &'static str {
        match self {
            Runner::Verbs(w) => w.name(),
            Runner::Fabric(kind) => kind.name(),
            Runner::Tcp => tcp_session::NAME,
            Runner::FabricCollective { name, .. } => name,
        }
    }

    /// The family of code it is, as the catalogue names families.
    pub fn family(&self) -> Family {
        match self {
            Runner::Verbs(_) => Family::Verbs,
            Runner::Fabric(_) | Runner::FabricCollective { .. } => Family::Libfabric,
            Runner::Tcp => Family::Tcp,
        }
    }

    /// The workload's own checks, after the shared ones.
    pub fn own_check(&self) -> validate::OwnCheck {
        match self {
            Runner::Verbs(w) => w.own_check(),
            Runner::Fabric(kind) => kind.own_check(),
            Runner::Tcp => tcp_session::check_request,
            Runner::FabricCollective { .. } => collective::check_request,
        }
    }
}

/// The code of every workload the agent runs.
static REGISTRY: &[Runner] = &[
    Runner::Verbs(&write_read::WriteRead),
    Runner::Verbs(&write_imm::WriteImm),
    Runner::Verbs(&send_recv::SendRecv),
    Runner::Verbs(&read::Read),
    Runner::Verbs(&atomic::Atomic),
    Runner::Verbs(&perf::Perf {
        name: "write-bw",
        op: perf::PerfOp::Write,
        latency: false,
    }),
    Runner::Verbs(&perf::Perf {
        name: "read-bw",
        op: perf::PerfOp::Read,
        latency: false,
    }),
    Runner::Verbs(&perf::Perf {
        name: "send-bw",
        op: perf::PerfOp::Send,
        latency: false,
    }),
    Runner::Verbs(&perf::Perf {
        name: "atomic-bw",
        op: perf::PerfOp::Atomic,
        latency: false,
    }),
    Runner::Verbs(&perf::Perf {
        name: "write-lat",
        op: perf::PerfOp::Write,
        latency: true,
    }),
    Runner::Verbs(&perf::Perf {
        name: "read-lat",
        op: perf::PerfOp::Read,
        latency: true,
    }),
    Runner::Verbs(&perf::Perf {
        name: "send-lat",
        op: perf::PerfOp::Send,
        latency: true,
    }),
    Runner::Verbs(&perf::Perf {
        name: "atomic-lat",
        op: perf::PerfOp::Atomic,
        latency: true,
    }),
    Runner::Verbs(&mr_cache::MrCache),
    Runner::Verbs(&param_server::ParamServer),
    Runner::Verbs(&inference_ring::InferenceRing),
    Runner::Verbs(&bulk::BulkRdma),
    Runner::Verbs(&CollectiveWorkload {
        name: "allreduce",
        op: Collective::Allreduce,
    }),
    Runner::Verbs(&CollectiveWorkload {
        name: "allgather",
        op: Collective::Allgather,
    }),
    Runner::Verbs(&CollectiveWorkload {
        name: "reduce-scatter",
        op: Collective::ReduceScatter,
    }),
    Runner::Verbs(&CollectiveWorkload {
        name: "reduce",
        op: Collective::Reduce,
    }),
    Runner::Verbs(&CollectiveWorkload {
        name: "alltoall",
        op: Collective::Alltoall,
    }),
    Runner::Verbs(&CollectiveWorkload {
        name: "broadcast",
        op: Collective::Broadcast,
    }),
    Runner::Verbs(&CollectiveWorkload {
        name: "incast",
        op: Collective::Incast,
    }),
    Runner::Fabric(fabric_session::Kind::Write),
    Runner::Fabric(fabric_session::Kind::Bw),
    Runner::Fabric(fabric_session::Kind::Lat),
    Runner::Tcp,
];

/// The names of every workload, in catalogue order.
pub fn names() -> Vec<&'static str> {
    workload_catalogue::names().collect()
}

/// The runner of workload `name`, or an error listing the supported names.
pub fn find(name: &str) -> Result<Runner, ValidationError> {
    if name.is_empty() {
        return Err(ValidationError::Missing { field: "workload" });
    }
    REGISTRY
        .iter()
        .copied()
        .find(|r| r.name() == name)
        .ok_or_else(|| ValidationError::UnknownWorkload {
            name: name.to_string(),
            supported: names().join(", "),
        })
}

/// Checks a request: its workload is in the catalogue and runs here, and
/// its parameters pass the shared checks, the entry's and the workload's
/// own. Returns the runner: a collective naming a libfabric provider runs
/// over libfabric, any other over verbs.
pub fn check(params: &WorkloadParams, limits: &Limits) -> Result<Runner, ValidationError> {
    let runner = find(&params.workload)?;
    let entry = workload_catalogue::find(&params.workload).ok_or_else(|| ValidationError::UnknownWorkload {
        name: params.workload.clone(),
        supported: names().join(", "),
    })?;
    let runner = match entry.shape.collective() {
        Some(op) if !params.provider.is_empty() => Runner::FabricCollective { name: entry.name, op },
        _ => runner,
    };
    validate::validate(params, entry, runner.own_check(), limits)?;
    Ok(runner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::*;
    use agent_proto::v1::Fault;
    use workload_catalogue::limits::*;
    use workload_catalogue::{Opt, CATALOGUE};

    /// The request checks, without the runner (which has no equality).
    fn check(params: &WorkloadParams, limits: &Limits) -> Result<(), ValidationError> {
        super::check(params, limits).map(|_| ())
    }

    fn limits() -> Limits {
        Limits {
            max_size: DEFAULT_MAX_SIZE,
            mem_available: Some(1 << 40),
        }
    }

    fn params(size: u64) -> WorkloadParams {
        WorkloadParams {
            workload: "write-read".into(),
            size,
            iterations: 1,
            gid_index: -1,
            ..Default::default()
        }
    }

    #[test]
    fn write_imm_buffer_is_size_times_batches() {
        let mut p = params(1 << 20);
        p.workload = "write-imm".into();
        p.batches = 64;
        assert_eq!(check(&p, &limits()), Ok(()));
        p.batches = 65;
        let err = check(&p, &limits()).unwrap_err();
        assert!(
            matches!(err, ValidationError::SizeOutOfRange { limit, .. } if limit == DEFAULT_MAX_SIZE / 65),
            "{err}"
        );
        assert!(err.to_string().contains("all 65 batches"), "{err}");
    }

    #[test]
    fn faults_are_taken_only_where_the_verdict_can_catch_them() {
        let with = |workload: &str, fault: Fault, size: u64| {
            let mut p = params(size);
            p.workload = workload.into();
            p.set_fault(fault);
            check(&p, &limits())
        };
        assert_eq!(with("write-read", Fault::Corrupt, 64), Ok(()));
        assert_eq!(with("atomic-bw", Fault::Skip, 8), Ok(()));
        assert_eq!(with("write-lat", Fault::Skip, 1), Ok(()));
        assert_eq!(with("write-bw", Fault::Skip, 64), Ok(()));
        let err = with("read", Fault::Skip, 64).unwrap_err().to_string();
        assert_eq!(err, "read cannot inject fault skip; it can inject: corrupt");
        let err = with("fabric-bw", Fault::Corrupt, 64).unwrap_err().to_string();
        assert!(err.ends_with("it can inject: skip"), "{err}");
        // A 1-byte write-lat ping is all counter: nothing to corrupt.
        assert!(matches!(
            with("write-lat", Fault::Corrupt, 1),
            Err(ValidationError::FieldOutOfRange { field: "size", .. })
        ));
        let mut unknown = params(8);
        unknown.fault = 7;
        assert!(matches!(
            check(&unknown, &limits()),
            Err(ValidationError::FieldOutOfRange { field: "fault", .. })
        ));
    }

    #[test]
    fn a_trace_ring_above_the_limit_is_refused_not_cut_down() {
        let mut p = params(8);
        p.trace = Some(agent_proto::v1::TraceOptions {
            max_events: MAX_TRACE_EVENTS,
            ..Default::default()
        });
        assert_eq!(check(&p, &limits()), Ok(()));
        p.trace.as_mut().unwrap().max_events = MAX_TRACE_EVENTS + 1;
        let err = check(&p, &limits()).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "trace.max_events {} is out of range: must be 0 (default {DEFAULT_TRACE_EVENTS}) ..= {MAX_TRACE_EVENTS}",
                MAX_TRACE_EVENTS + 1
            )
        );
    }

    #[test]
    fn accepts_the_boundaries() {
        assert_eq!(check(&params(1), &limits()), Ok(()));
        assert_eq!(check(&params(DEFAULT_MAX_SIZE), &limits()), Ok(()));
        let mut p = params(8);
        p.iterations = MAX_ITERATIONS;
        assert_eq!(check(&p, &limits()), Ok(()));
    }

    #[test]
    fn rejects_sizes_outside_the_range() {
        assert!(matches!(
            check(&params(0), &limits()),
            Err(ValidationError::SizeOutOfRange { .. })
        ));
        assert!(matches!(
            check(&params(DEFAULT_MAX_SIZE + 1), &limits()),
            Err(ValidationError::SizeOutOfRange { .. })
        ));
    }

    #[test]
    fn size_limit_shrinks_with_available_memory() {
        let small = Limits {
            max_size: DEFAULT_MAX_SIZE,
            mem_available: Some(16 * 1024 * 1024),
        };
        let err = check(&params(8 * 1024 * 1024), &small).unwrap_err();
        assert!(err.to_string().contains("MemAvailable"), "{err}");
        assert_eq!(check(&params(4 * 1024 * 1024), &small), Ok(()));
    }

    #[test]
    fn sweeps_check_their_max_size() {
        let mut p = params(0);
        p.all_sizes = true;
        assert_eq!(check(&p, &limits()), Ok(()));
        p.max_size = DEFAULT_MAX_SIZE * 2;
        assert!(check(&p, &limits()).is_err());
        // Found while writing the fuzz target: a sweep up to 1 B has no sizes,
        // and the perf workloads' buffer_len panicked on the empty sweep.
        p.max_size = 1;
        assert!(check(&p, &limits())
            .unwrap_err()
            .to_string()
            .contains("max_size 1 is out of range"));
        p.max_size = 2;
        assert_eq!(check(&p, &limits()), Ok(()));
    }

    #[test]
    fn rejects_iterations_and_durations() {
        let mut p = params(8);
        p.iterations = MAX_ITERATIONS + 1;
        assert!(matches!(
            check(&p, &limits()),
            Err(ValidationError::IterationsOutOfRange { .. })
        ));
        p.iterations = 0;
        assert!(matches!(check(&p, &limits()), Err(ValidationError::BadDuration { .. })));
        p.duration_s = 2.0;
        assert_eq!(check(&p, &limits()), Ok(()));
        p.duration_s = f64::NAN;
        assert!(check(&p, &limits()).is_err());
    }

    #[test]
    fn durations_and_timeouts_are_checked_even_on_counted_runs() {
        // Found by review: with iterations > 0 duration_s was not checked,
        // and the bandwidth loops' Duration::from_secs_f64 panicked on these.
        let mut p = params(8);
        p.iterations = 5;
        for bad in [
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            1e20,
            -1.0,
            MAX_DURATION_S + 1.0,
        ] {
            p.duration_s = bad;
            let err = check(&p, &limits()).unwrap_err();
            assert!(matches!(err, ValidationError::BadDuration { .. }), "{bad}: {err}");
            assert!(err.to_string().contains("[0, 86400]"), "{err}");
        }
        p.duration_s = MAX_DURATION_S;
        assert_eq!(check(&p, &limits()), Ok(()));
        // A session deadline is now + timeout: a timeout near u64::MAX ms
        // would overflow the clock.
        p.duration_s = 0.0;
        p.timeout_ms = u64::MAX;
        let err = check(&p, &limits()).unwrap_err().to_string();
        assert!(err.contains("timeout_ms 18446744073709551615 is out of range"), "{err}");
        p.timeout_ms = MAX_TIMEOUT_MS;
        assert_eq!(check(&p, &limits()), Ok(()));
    }

    #[test]
    fn capability_override_parses_hex_and_decimal_or_is_refused() {
        let mut p = params(8);
        p.capability_override = "0x7f00dead0000:0x1a2b".into();
        assert_eq!(capability_override(&p), Some((0x7f00_dead_0000, 0x1a2b)));
        assert_eq!(check(&p, &limits()), Ok(()));
        p.capability_override = "4096:77".into();
        assert_eq!(capability_override(&p), Some((4096, 77)));
        for bad in ["0x1000", "zz:1", "1:0x1ffffffff", ":"] {
            p.capability_override = bad.into();
            let err = check(&p, &limits()).unwrap_err().to_string();
            assert!(
                err.contains("capability_override") && err.contains("ADDR:RKEY"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn several_qps_are_refused_naming_the_workloads_that_take_them() {
        let mut p = params(8);
        p.num_qps = 2;
        let err = check(&p, &limits()).unwrap_err().to_string();
        let multi: Vec<&str> = CATALOGUE.iter().filter(|w| w.takes(Opt::Qps)).map(|w| w.name).collect();
        assert_eq!(multi, ["write-bw", "read-bw", "send-bw", "atomic-bw", "param-server"]);
        for name in multi {
            assert!(err.contains(name), "{err}");
            p.workload = name.into();
            assert_eq!(check(&p, &limits()), Ok(()), "{name}");
        }
    }

    #[test]
    fn test_every_catalogue_entry_runs_here_and_nothing_else_does() {
        for entry in CATALOGUE {
            let runner =
                find(entry.name).unwrap_or_else(|_| panic!("{} is in the catalogue but not run here", entry.name));
            assert_eq!(runner.name(), entry.name);
            assert_eq!(
                runner.family(),
                entry.family,
                "{}: the catalogue and the code disagree",
                entry.name
            );
        }
        for runner in REGISTRY {
            assert!(
                workload_catalogue::find(runner.name()).is_some(),
                "{} runs here but is not in the catalogue",
                runner.name()
            );
            assert_eq!(
                REGISTRY.iter().filter(|r| r.name() == runner.name()).count(),
                1,
                "{} twice",
                runner.name()
            );
        }
        assert_eq!(REGISTRY.len(), CATALOGUE.len());
    }

    #[test]
    fn unknown_workload_lists_the_supported_names() {
        let mut p = params(8);
        p.workload = "nope".into();
        let err = check(&p, &limits()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("unknown workload \"nope\"; supported: {}", names().join(", "))
        );
        for name in ["write-read", "atomic-lat", "fabric-write", "bulk-tcp"] {
            assert!(names().contains(&name), "{name}");
        }
        p.workload.clear();
        assert_eq!(
            check(&p, &limits()),
            Err(ValidationError::Missing { field: "workload" })
        );
    }

    #[test]
    fn test_pattern_workloads_check_what_they_register() {
        let mut p = params(4096);
        p.workload = "mr-cache".into();
        assert_eq!(check(&p, &limits()), Ok(()));
        p.size = DEFAULT_MAX_SIZE / 8;
        let err = check(&p, &limits()).unwrap_err().to_string();
        assert!(err.contains("15 x size"), "{err}");
        let mut p = params(4096);
        p.workload = "param-server".into();
        p.num_qps = 3;
        assert_eq!(check(&p, &limits()), Ok(()));
        p.size = 4097;
        let err = check(&p, &limits()).unwrap_err().to_string();
        assert!(err.contains("multiple of 4"), "{err}");
        p.size = DEFAULT_MAX_SIZE / 2;
        let err = check(&p, &limits()).unwrap_err().to_string();
        assert!(err.contains("3 gradient slots"), "{err}");
        let mut p = params(DEFAULT_MAX_SIZE / 8);
        p.workload = "inference-ring".into();
        assert_eq!(check(&p, &limits()), Ok(()));
        p.tx_depth = 16;
        let err = check(&p, &limits()).unwrap_err().to_string();
        assert!(err.contains("16 slots"), "{err}");
    }

    #[test]
    fn rejects_small_fields_out_of_range() {
        let mut p = params(8);
        p.gid_index = -2;
        assert!(check(&p, &limits()).unwrap_err().to_string().contains("gid_index"));
        let mut p = params(8);
        p.num_qps = 2;
        assert!(check(&p, &limits())
            .unwrap_err()
            .to_string()
            .contains("num_qps 2 is out of range"));
        p.workload = "write-bw".into();
        assert_eq!(check(&p, &limits()), Ok(()));
        p.num_qps = MAX_QPS + 1;
        assert!(check(&p, &limits())
            .unwrap_err()
            .to_string()
            .contains("num_qps 17 is out of range"));
        let mut p = params(8);
        p.tx_depth = 8;
        p.cq_moderation = 16;
        assert!(check(&p, &limits()).unwrap_err().to_string().contains("cq_moderation"));
    }

    #[test]
    fn test_bulk_total_is_capped_and_falls_back_to_size_times_iterations() {
        let mut p = params(1 << 20);
        p.workload = "bulk-rdma".into();
        p.total = 64 << 20;
        assert_eq!(check(&p, &limits()), Ok(()));
        p.total = MAX_BULK_TOTAL + 1;
        let err = check(&p, &limits()).unwrap_err().to_string();
        assert!(
            err.contains("total 1073741825 B is out of range") && err.contains("1 GiB"),
            "{err}"
        );
        // total 0: size x iterations.
        p.total = 0;
        p.iterations = 8;
        assert_eq!(bulk_total(&p), 8 << 20);
        assert_eq!(check(&p, &limits()), Ok(()));
        p.iterations = u64::MAX / 2;
        assert_eq!(bulk_total(&p), u64::MAX);
        let small = Limits {
            max_size: DEFAULT_MAX_SIZE,
            mem_available: Some(64 << 20),
        };
        p.total = 32 << 20;
        p.iterations = 1;
        let err = check(&p, &small).unwrap_err().to_string();
        assert!(err.contains("MemAvailable") && err.contains("16777216"), "{err}");
    }
}
