//! From what a user asked for to what the agents get: a
//! [`WorkloadRequest`] (`labctl run`'s flags, or a suite's `workload:`
//! step; the type is lab-model's) becomes [`RunOptions`] or
//! [`CollectiveOptions`] here, in one place, so both mean the same thing
//! (unset fields keep the workload's catalogue defaults) and the checks of
//! combinations live where tests reach them.

use std::time::Duration;

use agent_proto::v1::{CmMode, CompletionMode, Fault, WorkloadParams};
use lab_model::request::WorkloadRequest;
use lab_model::suite::DEFAULT_TIMEOUT_S;
use workload_catalogue::{Opt, Refused};

use crate::collective::CollectiveOptions;
use crate::run::RunOptions;

/// Untimed operations a collective runs at each size before the timed ones.
pub const DEFAULT_WARMUP: u32 = 2;

/// A request whose fields do not fit its workload (bad input).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The workload is not in the catalogue.
    #[error("unknown workload `{name}`; supported: {}", workload_catalogue::names().collect::<Vec<_>>().join(", "))]
    UnknownWorkload {
        /// The name asked for.
        name: String,
    },
    /// An option the workload does not take.
    #[error("{} applies to {}, not to {workload} ({family} workload)", opt.flag(), workload_catalogue::taking(*opt))]
    NotTaken {
        /// The option.
        opt: Opt,
        /// The workload.
        workload: String,
        /// The workload's family.
        family: &'static str,
    },
    /// `--server`/`--client` given to a collective, whose every node is a rank.
    #[error("{workload} runs on every node given by --nodes (default: all), one rank each; --server and --client are for pair workloads")]
    PairOption {
        /// The workload.
        workload: String,
    },
    /// A fault the workload cannot inject, so its verdict could not catch it.
    #[error("{workload} cannot inject fault {}; it takes: {takes}", fault.label())]
    FaultNotTaken {
        /// The fault asked for.
        fault: workload_catalogue::Fault,
        /// The workload.
        workload: &'static str,
        /// The faults it takes.
        takes: String,
    },
}

/// What [`crate::collective::run_collective`] needs for `request` (a
/// collective workload's): its parameters as [`run_options`] makes them,
/// and the ranks' nodes. `--server`/`--client` are refused: every node of a
/// collective is a rank.
pub fn collective_options(request: &WorkloadRequest) -> Result<CollectiveOptions, RequestError> {
    if request.server.is_some() || request.client.is_some() {
        return Err(RequestError::PairOption {
            workload: request.workload.clone(),
        });
    }
    let opts = run_options(request)?;
    Ok(CollectiveOptions {
        params: opts.params,
        nodes: request.nodes.clone().unwrap_or_default(),
        ranks_per_node: request.ranks_per_node.unwrap_or(1),
        root: request.root.clone(),
        warmup: request.warmup.unwrap_or(DEFAULT_WARMUP),
        timeout: opts.timeout,
    })
}

/// What [`crate::run::run_workload`] needs for `request`: the workload's
/// catalogue defaults, overridden by what the request sets. An option the
/// workload does not take is refused, naming the workloads that take it.
pub fn run_options(request: &WorkloadRequest) -> Result<RunOptions, RequestError> {
    let entry = workload_catalogue::find(&request.workload).ok_or_else(|| RequestError::UnknownWorkload {
        name: request.workload.clone(),
    })?;
    match entry.refuses(&request.asks()) {
        Some(Refused::Opt(opt)) => {
            return Err(RequestError::NotTaken {
                opt,
                workload: request.workload.clone(),
                family: entry.family.label(),
            })
        }
        Some(Refused::Fault(fault)) => {
            return Err(RequestError::FaultNotTaken {
                fault,
                workload: entry.name,
                takes: entry.fault_labels(),
            })
        }
        None => {}
    }
    let mut params = WorkloadParams::defaults_of(&request.workload);
    if let Some(size) = request.size {
        params.size = size;
    }
    if let Some(n) = request.iterations {
        params.iterations = n;
    }
    if let Some(d) = request.duration_s {
        params.iterations = 0;
        params.duration_s = d;
    }
    params.all_sizes = request.all_sizes;
    params.max_size = request.max_size.unwrap_or(params.max_size);
    params.tx_depth = request.tx_depth.unwrap_or(params.tx_depth);
    params.cq_moderation = request.cq_moderation.unwrap_or(params.cq_moderation);
    params.post_list = request.post_list.unwrap_or(params.post_list);
    params.inline_size = request.inline_size.unwrap_or(params.inline_size);
    params.num_qps = request.qps.unwrap_or(params.num_qps);
    if let Some(cm) = request.cm {
        params.set_cm(CmMode::from(cm));
    }
    if let Some(completion) = request.completion {
        params.set_completion(CompletionMode::from(completion));
    }
    params.ping_pong = request.ping_pong;
    params.batches = request.batches.unwrap_or(params.batches);
    params.seed = request.seed.unwrap_or(params.seed);
    params.corrupt_rkey = request.corrupt_rkey;
    if let Some(fault) = request.fault {
        params.set_fault(Fault::from(fault));
    }
    params.capability_override = request.use_capability.clone().unwrap_or_default();
    if let Some(provider) = &request.provider {
        params.provider = provider.clone();
    }
    if let Some(total) = request.total {
        params.total = total;
    }
    if let Some(delay) = request.connect_delay {
        params.connect_delay_ms = u32::try_from(delay.as_millis()).unwrap_or(u32::MAX);
    }
    Ok(RunOptions {
        params,
        server: request.server.clone().unwrap_or_else(|| "server".into()),
        client: request.client.clone().unwrap_or_else(|| "client".into()),
        timeout: request.timeout.unwrap_or(Duration::from_secs(DEFAULT_TIMEOUT_S)),
        counters: request.counters,
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use lab_model::suite::{Suite, SuiteStep};
    use workload_catalogue::{Cm, Completion};

    use super::*;

    fn entry(text: &str) -> SuiteStep {
        Suite::parse(Path::new("suite.yaml"), text).unwrap().steps[0].clone()
    }

    #[test]
    fn test_suite_fields_and_flags_become_the_same_run_parameters() {
        let from_suite = entry(
            "workloads:\n  - workload: send-recv\n    size: 8KiB\n    iterations: 3\n    cm: oob\n    completion: event\n    ping_pong: true\n    timeout_s: 30\n",
        )
        .request();
        let from_flags = WorkloadRequest {
            workload: "send-recv".into(),
            size: Some(8192),
            iterations: Some(3),
            cm: Some(Cm::Oob),
            completion: Some(Completion::Event),
            ping_pong: true,
            timeout: Some(Duration::from_secs(30)),
            ..Default::default()
        };
        assert_eq!(from_suite, from_flags);
        let opts = run_options(&from_suite).unwrap();
        assert_eq!((opts.params.size, opts.params.iterations), (8192, 3));
        assert_eq!(opts.params.cm(), CmMode::Oob);
        assert_eq!(opts.params.completion(), CompletionMode::Event);
        assert!(opts.params.ping_pong);
        assert_eq!(opts.timeout, Duration::from_secs(30));
        assert_eq!((opts.server.as_str(), opts.client.as_str()), ("server", "client"));
    }

    #[test]
    fn test_the_connect_delay_is_whole_seconds_up_to_a_minute() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            request: WorkloadRequest,
        }
        use clap::Parser;
        let cli = Cli::try_parse_from(["run", "write-read", "--connect-delay", "8"]).unwrap();
        assert_eq!(run_options(&cli.request).unwrap().params.connect_delay_ms, 8000);
        let too_long = Cli::try_parse_from(["run", "write-read", "--connect-delay", "61"])
            .err()
            .unwrap()
            .to_string();
        assert!(too_long.contains("at most 60 s"), "{too_long}");
        assert_eq!(
            run_options(&entry("workloads:\n  - workload: write-read\n").request())
                .unwrap()
                .params
                .connect_delay_ms,
            0,
            "no delay unless asked for"
        );
    }

    #[test]
    fn test_unset_fields_keep_the_workloads_defaults() {
        let opts = run_options(&entry("workloads:\n  - workload: write-bw\n").request()).unwrap();
        assert_eq!(opts.params, WorkloadParams::defaults_of("write-bw"));
        assert_eq!(opts.timeout, Duration::from_secs(DEFAULT_TIMEOUT_S));
        let d = run_options(&WorkloadRequest {
            workload: "write-bw".into(),
            duration_s: Some(2.5),
            iterations: Some(9),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            (d.params.iterations, d.params.duration_s),
            (0, 2.5),
            "a duration wins over a count"
        );
    }

    #[test]
    fn test_fields_of_other_workloads_are_refused() {
        let provider = WorkloadRequest {
            workload: "write-read".into(),
            provider: Some("efa".into()),
            ..Default::default()
        };
        assert_eq!(
            run_options(&provider).unwrap_err().to_string(),
            "--provider applies to fabric-write, fabric-bw, fabric-lat, allreduce, allgather, reduce-scatter, reduce, alltoall, broadcast, incast, not to write-read (verbs workload)"
        );
        let total = WorkloadRequest {
            workload: "fabric-bw".into(),
            total: Some(1 << 20),
            ..Default::default()
        };
        assert!(matches!(
            run_options(&total),
            Err(RequestError::NotTaken { opt: Opt::Total, .. })
        ));
        let oob = WorkloadRequest {
            workload: "bulk-tcp".into(),
            cm: Some(Cm::Oob),
            ..Default::default()
        };
        assert_eq!(
            run_options(&oob).unwrap_err().to_string(),
            format!(
                "--cm oob applies to {}, not to bulk-tcp (TCP workload)",
                workload_catalogue::taking(Opt::CmOob)
            )
        );
        let unknown = WorkloadRequest {
            workload: "nope".into(),
            ..Default::default()
        };
        assert!(matches!(
            run_options(&unknown),
            Err(RequestError::UnknownWorkload { .. })
        ));
        let ok = WorkloadRequest {
            workload: "bulk-tcp".into(),
            total: Some(1 << 20),
            ..Default::default()
        };
        assert_eq!(run_options(&ok).unwrap().params.total, 1 << 20);
    }
}
