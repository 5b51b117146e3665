//! From what a user asked for to what the agents get: one place that turns
//! `labctl run`'s flags and a CI suite entry into [`RunOptions`], so both
//! mean the same thing (unset fields keep the workload's defaults) and the
//! checks of combinations live where tests reach them.

use std::time::Duration;

use agent_proto::v1::{CmMode, CompletionMode, Fault};
use lab_model::suite::{SuiteCm, SuiteCompletion, SuiteStep, DEFAULT_TIMEOUT_S};
use lab_model::workloads::is_fabric;

use crate::run::{default_params, RunOptions};

/// A workload run as asked for; `None` (or `false`) leaves the workload's
/// default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkloadRequest {
    /// The workload.
    pub workload: String,
    /// The passive node (default `server`).
    pub server: Option<String>,
    /// The active node (default `client`).
    pub client: Option<String>,
    /// Message size, bytes.
    pub size: Option<u64>,
    /// Operations.
    pub iterations: Option<u64>,
    /// Run for this many seconds instead of a number of operations.
    pub duration_s: Option<f64>,
    /// Sweep sizes up to `max_size`.
    pub all_sizes: bool,
    /// Largest size of a sweep.
    pub max_size: Option<u64>,
    /// Send queue depth.
    pub tx_depth: Option<u32>,
    /// Signal one completion per this many operations.
    pub cq_moderation: Option<u32>,
    /// Work requests posted per call.
    pub post_list: Option<u32>,
    /// Inline data size.
    pub inline_size: Option<u32>,
    /// Queue pairs.
    pub qps: Option<u32>,
    /// Connection setup.
    pub cm: Option<CmMode>,
    /// How completions are waited for.
    pub completion: Option<CompletionMode>,
    /// send-recv: echo every message.
    pub ping_pong: bool,
    /// write-imm (and inference-ring) batches.
    pub batches: Option<u32>,
    /// Payload pattern seed.
    pub seed: Option<u64>,
    /// Negative test: the client uses a corrupted rkey.
    pub corrupt_rkey: bool,
    /// Negative test: inject this fault (the verdict must catch it).
    pub fault: Option<Fault>,
    /// Negative test: the client targets this `ADDR:RKEY`.
    pub use_capability: Option<String>,
    /// fabric-* only: the libfabric provider.
    pub provider: Option<String>,
    /// bulk-* only: bytes to move.
    pub total: Option<u64>,
    /// Abort the run after this long (default 120 s).
    pub timeout: Option<Duration>,
    /// Record the RDMA hardware counters.
    pub counters: bool,
}

/// A request whose fields do not fit its workload (bad input).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// `provider` on a workload that is not libfabric's.
    #[error("--provider applies to the libfabric workloads (fabric-*), not to {workload}")]
    ProviderNotFabric {
        /// The workload.
        workload: String,
    },
    /// `total` on a workload that is not bulk-*.
    #[error("--total applies to bulk-rdma and bulk-tcp, not to {workload}")]
    TotalNotBulk {
        /// The workload.
        workload: String,
    },
}

impl WorkloadRequest {
    /// What [`crate::run::run_workload`] needs for this request.
    pub fn run_options(&self) -> Result<RunOptions, RequestError> {
        let mut params = default_params(&self.workload);
        if let Some(size) = self.size {
            params.size = size;
        }
        if let Some(n) = self.iterations {
            params.iterations = n;
        }
        if let Some(d) = self.duration_s {
            params.iterations = 0;
            params.duration_s = d;
        }
        params.all_sizes = self.all_sizes;
        params.max_size = self.max_size.unwrap_or(params.max_size);
        params.tx_depth = self.tx_depth.unwrap_or(params.tx_depth);
        params.cq_moderation = self.cq_moderation.unwrap_or(params.cq_moderation);
        params.post_list = self.post_list.unwrap_or(params.post_list);
        params.inline_size = self.inline_size.unwrap_or(params.inline_size);
        params.num_qps = self.qps.unwrap_or(params.num_qps);
        if let Some(cm) = self.cm {
            params.set_cm(cm);
        }
        if let Some(completion) = self.completion {
            params.set_completion(completion);
        }
        params.ping_pong = self.ping_pong;
        params.batches = self.batches.unwrap_or(params.batches);
        params.seed = self.seed.unwrap_or(params.seed);
        params.corrupt_rkey = self.corrupt_rkey;
        if let Some(fault) = self.fault {
            params.set_fault(fault);
        }
        params.capability_override = self.use_capability.clone().unwrap_or_default();
        if let Some(provider) = &self.provider {
            if !is_fabric(&self.workload) {
                return Err(RequestError::ProviderNotFabric {
                    workload: self.workload.clone(),
                });
            }
            params.provider = provider.clone();
        }
        if let Some(total) = self.total {
            if !self.workload.starts_with("bulk-") {
                return Err(RequestError::TotalNotBulk {
                    workload: self.workload.clone(),
                });
            }
            params.total = total;
        }
        Ok(RunOptions {
            params,
            server: self.server.clone().unwrap_or_else(|| "server".into()),
            client: self.client.clone().unwrap_or_else(|| "client".into()),
            timeout: self.timeout.unwrap_or(Duration::from_secs(DEFAULT_TIMEOUT_S)),
            counters: self.counters,
        })
    }
}

impl From<&SuiteStep> for WorkloadRequest {
    fn from(entry: &SuiteStep) -> WorkloadRequest {
        WorkloadRequest {
            workload: entry.workload.clone().unwrap_or_default(),
            server: entry.server.clone(),
            client: entry.client.clone(),
            size: entry.size,
            iterations: entry.iterations,
            duration_s: entry.duration_s.map(|d| d as f64),
            cm: entry.cm.map(|cm| match cm {
                SuiteCm::RdmaCm => CmMode::RdmaCm,
                SuiteCm::Oob => CmMode::Oob,
            }),
            completion: entry.completion.map(|c| match c {
                SuiteCompletion::Poll => CompletionMode::Poll,
                SuiteCompletion::Event => CompletionMode::Event,
                SuiteCompletion::Auto => CompletionMode::Auto,
            }),
            qps: entry.qps,
            ping_pong: entry.ping_pong,
            batches: entry.batches,
            seed: entry.seed,
            corrupt_rkey: entry.corrupt_rkey,
            provider: entry.provider.clone(),
            timeout: entry.timeout_s.map(Duration::from_secs),
            ..WorkloadRequest::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use lab_model::suite::Suite;

    use super::*;

    fn entry(text: &str) -> SuiteStep {
        Suite::parse(Path::new("suite.yaml"), text).unwrap().steps[0].clone()
    }

    #[test]
    fn test_suite_fields_and_flags_become_the_same_run_parameters() {
        let from_suite = WorkloadRequest::from(&entry(
            "workloads:\n  - workload: send-recv\n    size: 8192\n    iterations: 3\n    cm: oob\n    completion: event\n    ping_pong: true\n    timeout_s: 30\n",
        ));
        let from_flags = WorkloadRequest {
            workload: "send-recv".into(),
            size: Some(8192),
            iterations: Some(3),
            cm: Some(CmMode::Oob),
            completion: Some(CompletionMode::Event),
            ping_pong: true,
            timeout: Some(Duration::from_secs(30)),
            ..Default::default()
        };
        assert_eq!(from_suite, from_flags);
        let opts = from_suite.run_options().unwrap();
        assert_eq!((opts.params.size, opts.params.iterations), (8192, 3));
        assert_eq!(opts.params.cm(), CmMode::Oob);
        assert_eq!(opts.params.completion(), CompletionMode::Event);
        assert!(opts.params.ping_pong);
        assert_eq!(opts.timeout, Duration::from_secs(30));
        assert_eq!((opts.server.as_str(), opts.client.as_str()), ("server", "client"));
    }

    #[test]
    fn test_unset_fields_keep_the_workloads_defaults() {
        let opts = WorkloadRequest::from(&entry("workloads:\n  - workload: write-bw\n"))
            .run_options()
            .unwrap();
        assert_eq!(opts.params, default_params("write-bw"));
        assert_eq!(opts.timeout, Duration::from_secs(DEFAULT_TIMEOUT_S));
        let d = WorkloadRequest {
            workload: "write-bw".into(),
            duration_s: Some(2.5),
            iterations: Some(9),
            ..Default::default()
        }
        .run_options()
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
            provider.run_options().unwrap_err().to_string(),
            "--provider applies to the libfabric workloads (fabric-*), not to write-read"
        );
        let total = WorkloadRequest {
            workload: "fabric-bw".into(),
            total: Some(1 << 20),
            ..Default::default()
        };
        assert!(matches!(total.run_options(), Err(RequestError::TotalNotBulk { .. })));
        let ok = WorkloadRequest {
            workload: "bulk-tcp".into(),
            total: Some(1 << 20),
            ..Default::default()
        };
        assert_eq!(ok.run_options().unwrap().params.total, 1 << 20);
    }
}
