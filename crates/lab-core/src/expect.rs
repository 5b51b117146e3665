//! Measuring a lab against the workload figures of its `expect:`, each by a
//! run of its own (a pair on two nodes, a collective on every node). Only
//! verified runs give figures: a run whose bytes did not check out
//! measures nothing.
//!
//! `bench` and `ci` call [`measure_workloads`] and [`measure`]; the node
//! facts are doctor's (`crate::doctor::expected`). The wording of each
//! outcome is `lab_results::expect`'s.

use std::time::Duration;

use lab_model::expect::{Expectations, WorkloadExpectation};
use lab_results::expect::{workload_bounds, workload_label, ExpectOutcome};
use workload_catalogue::Shape;

use crate::collective::{run_collective, CollectiveOptions};
use crate::lab::Lab;
use crate::run::{default_params, run_workload, RunOptions};

/// Where the pair workloads run, and how long each may take.
#[derive(Debug, Clone)]
pub struct Placement {
    /// The passive node of a pair.
    pub server: String,
    /// The active node of a pair.
    pub client: String,
    /// Each run's limit.
    pub timeout: Duration,
}

/// Measures each workload expectation with a run of its own, in the order
/// written, handing each outcome to `on_outcome` as it comes.
pub async fn measure_workloads(
    lab: &Lab,
    expect: &Expectations,
    at: &Placement,
    mut on_outcome: impl FnMut(&ExpectOutcome),
) -> Vec<ExpectOutcome> {
    let mut outcomes = Vec::new();
    for w in &expect.workloads {
        let outcome = measure(lab, expect, w, at).await;
        on_outcome(&outcome);
        outcomes.push(outcome);
    }
    outcomes
}

/// One workload expectation: its run, then the judgement of its figures
/// (the first bound missed, when both are given and one is).
pub async fn measure(lab: &Lab, expect: &Expectations, w: &WorkloadExpectation, at: &Placement) -> ExpectOutcome {
    let what = workload_label(w);
    let bounds = workload_bounds(w);
    let mut params = default_params(&w.workload);
    params.size = w.size;
    params.expect_provider = expect.fi_provider.clone().unwrap_or_default();
    let collective = workload_catalogue::find(&w.workload).is_some_and(|c| matches!(c.shape, Shape::Collective(_)));
    let (bits_per_s, latency_us, run_id) = if collective {
        let opts = CollectiveOptions {
            params,
            nodes: Vec::new(),
            ranks_per_node: 1,
            root: None,
            warmup: 2,
            timeout: at.timeout,
        };
        match run_collective(lab, &opts, |_, _| {}).await {
            Ok(r) if !r.verified => {
                return ExpectOutcome::not_measured(&what, bounds, &format!("not verified: {}", r.verify_detail))
                    .from_run(&r.id)
            }
            Ok(r) => {
                let busbw = r.points.iter().find(|p| p.size == w.size).or(r.points.first());
                (busbw.map_or(0.0, |p| p.busbw_gb_s * 8e9), None, r.id)
            }
            Err(e) => return ExpectOutcome::not_measured(&what, bounds, &e.to_string()),
        }
    } else {
        let opts = RunOptions {
            params,
            server: at.server.clone(),
            client: at.client.clone(),
            timeout: at.timeout,
            counters: false,
        };
        match run_workload(lab, &opts, |_| {}).await {
            Ok(r) if !r.verified => {
                let detail = format!(
                    "not verified: client: {}; server: {}",
                    r.client.verify_detail, r.server.verify_detail
                );
                return ExpectOutcome::not_measured(&what, bounds, &detail).from_run(&r.id);
            }
            Ok(r) => (r.bw_avg_gbps * 1e9, Some(r.lat_us.typical), r.id),
            Err(e) => return ExpectOutcome::not_measured(&what, bounds, &e.to_string()),
        }
    };
    let by_rate = w.min.as_ref().map(|min| ExpectOutcome::of_rate(&what, min, bits_per_s));
    let by_latency = match (&w.max, latency_us) {
        (Some(max), Some(us)) => Some(ExpectOutcome::of_latency(&what, max, us)),
        _ => None,
    };
    let outcome = match (by_rate, by_latency) {
        (Some(r), Some(l)) if r.met() => l,
        (Some(r), _) => r,
        (None, Some(l)) => l,
        (None, None) => ExpectOutcome::not_measured(&what, bounds, "the workload reported no such figure"),
    };
    outcome.from_run(&run_id)
}
