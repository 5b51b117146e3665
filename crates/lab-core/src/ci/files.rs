//! `copy:` and `collect:` steps: files to the nodes and back, each checked
//! by sha256 as `labctl cp` checks it (they are `Lab::copy` with the suite's
//! paths resolved).

use std::path::Path;
use std::time::Duration;

use futures::future::join_all;
use lab_model::copy_location::CopyLocation;
use lab_model::suite::{CollectStep, CopyStep};
use lab_results::ci::TransferRecord;

use super::step::StepOutcome;
use crate::copy::{CopyReport, NoProgress};
use crate::lab::Lab;

/// Copies `copy.from` (relative to `base_dir`, the suite file's directory)
/// to `copy.to`, within `timeout`.
pub async fn run_copy(lab: &Lab, copy: &CopyStep, base_dir: &Path, timeout: Duration) -> StepOutcome {
    let sources: Vec<CopyLocation> = copy
        .from
        .iter()
        .map(|from| CopyLocation::Local(base_dir.join(from)))
        .collect();
    let dest = CopyLocation::parse(&copy.to);
    match tokio::time::timeout(timeout, lab.copy(&sources, &dest, true, &NoProgress)).await {
        Ok(Ok(report)) => outcome(report, Some),
        Ok(Err(e)) => StepOutcome::failed(format!("copy to {}: {e}", copy.to)),
        Err(_) => StepOutcome::failed(format!(
            "copy to {} did not finish within {} s",
            copy.to,
            timeout.as_secs()
        )),
    }
}

/// Fetches `collect.from` into `artifacts/<to>/<node>/`, within `timeout`.
/// Each path of each node is its own copy, so one missing file does not
/// hide the others; with `optional` a missing one is skipped.
pub async fn run_collect(lab: &Lab, collect: &CollectStep, artifacts: &Path, timeout: Duration) -> StepOutcome {
    let dest_root = match &collect.to {
        Some(sub) => artifacts.join(sub),
        None => artifacts.to_path_buf(),
    };
    let every: Vec<String> = lab.spec.nodes.iter().map(|n| n.name.clone()).collect();
    let mut wanted: Vec<(String, String)> = Vec::new();
    for from in &collect.from {
        match CopyLocation::parse(from) {
            CopyLocation::Node { node, path } => wanted.push((node, path)),
            CopyLocation::Every { path } => wanted.extend(every.iter().map(|n| (n.clone(), path.clone()))),
            CopyLocation::Local(_) => unreachable!("collect.from is on nodes (checked with the suite)"),
        }
    }
    let fetch_all = join_all(wanted.iter().map(|(node, path)| {
        let dest = dest_root.join(node);
        async move {
            if let Err(e) = std::fs::create_dir_all(&dest) {
                return Err(format!("{}: {e}", dest.display()));
            }
            let source = CopyLocation::Node {
                node: node.clone(),
                path: path.clone(),
            };
            let copied = lab
                .copy(&[source], &CopyLocation::Local(dest.clone()), true, &NoProgress)
                .await
                .map_err(|e| e.to_string());
            // A node's directory with nothing in it (an optional file that
            // was missing) is not an artifact; a full one stays.
            let _ = std::fs::remove_dir(&dest);
            copied
        }
    }));
    let results = match tokio::time::timeout(timeout, fetch_all).await {
        Ok(results) => results,
        Err(_) => {
            return StepOutcome::failed(format!(
                "collecting {} did not finish within {} s",
                collect.from.join(", "),
                timeout.as_secs()
            ))
        }
    };
    let mut merged = StepOutcome::default();
    let mut failures = Vec::new();
    for result in results {
        let part = match result {
            Ok(report) => outcome(report, |failure| {
                let missing = failure.ends_with("no such file or directory");
                (!(missing && collect.optional)).then_some(failure)
            }),
            Err(why) => StepOutcome::failed(why),
        };
        merged.transfers.extend(part.transfers);
        failures.extend(part.failure);
    }
    merged.failure = (!failures.is_empty()).then(|| failures.join("\n"));
    merged
}

/// The step's outcome from a copy's report; `keep` says which node
/// failures fail the step.
fn outcome(report: CopyReport, keep: impl Fn(String) -> Option<String>) -> StepOutcome {
    let transfers = report
        .files
        .into_iter()
        .map(|f| TransferRecord {
            node: f.node,
            from: f.from,
            to: f.to,
            bytes: f.bytes,
            sha256: f.sha256,
        })
        .collect();
    let failures: Vec<String> = report
        .failed
        .into_iter()
        .filter_map(|f| {
            let named = if f.error.starts_with("node `") {
                f.error
            } else {
                format!("node `{}`: {}", f.node, f.error)
            };
            keep(named)
        })
        .collect();
    StepOutcome {
        failure: (!failures.is_empty()).then(|| failures.join("\n")),
        transfers,
        ..StepOutcome::default()
    }
}
