//! A suite checked against the lab it will run on: every step of one kind,
//! unique names, nodes that exist, workload fields that the workload takes
//! (the catalogue's rule), copy and collect in their directions, a pair that
//! says when its server is ready.

use std::collections::HashSet;
use std::path::Path;

use workload_catalogue::{Asks, Refused};

use super::{NodeSet, StepKind, Suite, SuiteError, MAX_RETRIES};
use crate::copy_location::CopyLocation;

impl Suite {
    /// Checks the suite against the lab it will run on (its name and its
    /// nodes' names): at least one step, each of exactly one kind, unique
    /// names, nodes that exist, `labctl run` fields only on workload steps,
    /// `provider` only on fabric-* workloads, copy from this machine to
    /// nodes and collect the other way, a pair that says when its server is
    /// ready. `LabSpec::check_suite` calls this with a lab's own names.
    pub fn check(&self, lab: &str, nodes: &[&str], source_name: &str) -> Result<(), SuiteError> {
        let mismatch = |index: usize, message: String, fix: String| SuiteError::Mismatch {
            source_name: source_name.to_string(),
            index,
            message,
            fix,
        };
        if self.steps.is_empty() {
            return Err(mismatch(
                0,
                "the suite has no steps".into(),
                "list at least one step under `steps:`, like `- workload: write-read`".into(),
            ));
        }
        let known = |index: usize, role: &str, node: &str| {
            if nodes.contains(&node) {
                Ok(())
            } else {
                Err(mismatch(
                    index,
                    format!("{role} `{node}` is not a node of lab `{lab}`"),
                    format!("use one of: {}", nodes.join(", ")),
                ))
            }
        };
        let mut names = HashSet::new();
        for (index, step) in self.steps.iter().enumerate() {
            let kinds = step.kinds();
            match kinds.as_slice() {
                [_] => {}
                [] => {
                    return Err(mismatch(
                        index,
                        "the step says nothing to do".into(),
                        "give it one of `workload:`, `copy:`, `collect:`, `exec:` or `pair:`".into(),
                    ))
                }
                several => {
                    return Err(mismatch(
                        index,
                        format!("the step is both `{}`", several.join("` and `")),
                        "split it into one step per kind".into(),
                    ))
                }
            }
            if step.retries > MAX_RETRIES {
                return Err(mismatch(
                    index,
                    format!("`retries: {}` is more than {MAX_RETRIES}", step.retries),
                    format!("give at most {MAX_RETRIES}: a step that fails more often than that needs fixing, not rerunning"),
                ));
            }
            let name = step.name();
            if !names.insert(name.clone()) {
                return Err(mismatch(
                    index,
                    format!("the name `{name}` is used by an earlier step"),
                    "give each step of the suite its own `name:`".into(),
                ));
            }
            let kind = step.kind().expect("one kind, checked above");
            if !matches!(kind, StepKind::Workload(_)) {
                if let Some(field) = step.run_fields().first() {
                    return Err(mismatch(
                        index,
                        format!("`{field}` applies to workload steps, not to `{}`", kind.key()),
                        format!(
                            "remove `{field}`{}",
                            if matches!(kind, StepKind::Pair(_)) && matches!(field.as_str(), "server" | "client") {
                                " here and set the node inside pair, like `server: {node: n1, run: ...}`"
                            } else {
                                ""
                            }
                        ),
                    ));
                }
            }
            match kind {
                StepKind::Workload(workload) => {
                    let entry = workload_catalogue::find(workload).expect("checked while parsing");
                    if entry.shape.collective().is_some() {
                        if let Some(role) = [("server", &step.request.server), ("client", &step.request.client)]
                            .into_iter()
                            .find_map(|(role, node)| node.as_ref().map(|_| role))
                        {
                            return Err(mismatch(
                                index,
                                format!(
                                    "`{role}` is for pair workloads; {workload} runs one rank on each of its nodes"
                                ),
                                "list the ranks' nodes as `nodes: [n1, n2, ...]` (default: every node of the lab)"
                                    .into(),
                            ));
                        }
                        for node in step.request.nodes.iter().flatten() {
                            known(index, "nodes:", node)?;
                        }
                        if let Some(root) = &step.request.root {
                            known(index, "root", root)?;
                            if step.request.nodes.as_ref().is_some_and(|n| !n.contains(root)) {
                                return Err(mismatch(
                                    index,
                                    format!("root `{root}` is not one of the step's nodes"),
                                    format!("add `{root}` to `nodes:`, or name one of them as `root:`"),
                                ));
                            }
                        }
                        let ranks = step.request.nodes.as_ref().map_or(nodes.len(), Vec::len)
                            * step.request.ranks_per_node.unwrap_or(1).max(1) as usize;
                        let most = workload_catalogue::limits::MAX_RANKS as usize;
                        if !(2..=most).contains(&ranks) || step.request.ranks_per_node == Some(0) {
                            return Err(mismatch(
                                index,
                                format!("{workload} would run {ranks} ranks; a collective runs 2 ..= {most}"),
                                format!(
                                    "list at least two nodes (or set `ranks_per_node: 2`), at most {most} ranks in all"
                                ),
                            ));
                        }
                    } else {
                        known(index, "server", step.server())?;
                        known(index, "client", step.client())?;
                        if step.request.ranks_per_node.is_some() {
                            return Err(mismatch(
                                index,
                                format!("`ranks_per_node` applies to the collectives, not to {workload}"),
                                "remove the ranks_per_node line".into(),
                            ));
                        }
                    }
                    let asks = Asks {
                        trace: step.trace,
                        ..step.request.asks()
                    };
                    match entry.refuses(&asks) {
                        Some(Refused::Opt(opt)) => {
                            return Err(mismatch(
                                index,
                                format!(
                                    "`{}` applies to {}, not to {workload} ({} workload)",
                                    opt.key(),
                                    workload_catalogue::taking(opt),
                                    entry.family.label()
                                ),
                                format!("remove the {} line", opt.key().split(':').next().unwrap_or_default()),
                            ));
                        }
                        Some(Refused::Fault(fault)) => {
                            return Err(mismatch(
                                index,
                                format!("{workload} cannot inject fault {}", fault.label()),
                                format!("use one it takes: {}", entry.fault_labels()),
                            ));
                        }
                        None => {}
                    }
                }
                StepKind::Copy(copy) => {
                    for from in &copy.from {
                        if !CopyLocation::parse(from).is_local() {
                            return Err(mismatch(
                                index,
                                format!("copy.from `{from}` is on a node; copy sends files from this machine"),
                                "use `collect:` to fetch files from nodes".into(),
                            ));
                        }
                    }
                    match CopyLocation::parse(&copy.to) {
                        CopyLocation::Node { node, .. } => known(index, "copy.to's node", &node)?,
                        CopyLocation::Every { .. } => {}
                        CopyLocation::Local(_) => {
                            return Err(mismatch(
                                index,
                                format!("copy.to `{}` is not on a node", copy.to),
                                "write `NODE:PATH`, or `@all:PATH` for every node".into(),
                            ))
                        }
                    }
                }
                StepKind::Collect(collect) => {
                    for from in &collect.from {
                        match CopyLocation::parse(from) {
                            CopyLocation::Node { node, .. } => known(index, "collect.from's node", &node)?,
                            CopyLocation::Every { .. } => {}
                            CopyLocation::Local(_) => {
                                return Err(mismatch(
                                    index,
                                    format!("collect.from `{from}` is not on a node"),
                                    "write `NODE:PATH`, or `@all:PATH` for every node".into(),
                                ))
                            }
                        }
                    }
                    if let Some(to) = &collect.to {
                        let path = Path::new(to);
                        if path.is_absolute() || path.components().any(|c| matches!(c, std::path::Component::ParentDir))
                        {
                            return Err(mismatch(
                                index,
                                format!("collect.to `{to}` leaves the artifacts directory"),
                                "give a relative path without `..` (a subdirectory of the artifacts)".into(),
                            ));
                        }
                    }
                }
                StepKind::Exec(exec) => {
                    if let NodeSet::Some(list) = &exec.nodes {
                        for node in list {
                            known(index, "exec node", node)?;
                        }
                    }
                }
                StepKind::Pair(pair) => {
                    known(index, "pair.server's node", pair.server_node())?;
                    known(index, "pair.client's node", pair.client_node())?;
                    if pair.port.is_none() && pair.ready.is_none() {
                        return Err(mismatch(
                            index,
                            "the pair does not say when its server is ready".into(),
                            "add `port: N` (the TCP port the server listens on) or `ready: REGEX` (a line it prints when ready)".into(),
                        ));
                    }
                    if pair.port == Some(0) {
                        return Err(mismatch(
                            index,
                            "pair.port is 0".into(),
                            "give the TCP port the server listens on (1-65535)".into(),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}
