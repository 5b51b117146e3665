//! The `labctl doctor` report: checks of each node and each pair of nodes,
//! each with a verdict, the evidence it was judged on, and what to do.

use serde::{Deserialize, Serialize};

/// Version of the `doctor --json` layout.
pub const DOCTOR_SCHEMA: u32 = 1;

/// A check's outcome, in increasing order of trouble.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// As it should be.
    Ok,
    /// Works, but a common cause of trouble or of poor figures.
    Warn,
    /// RDMA between the nodes cannot work as the lab asks.
    Fail,
}

impl Verdict {
    /// The word the text report prints.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
        }
    }
}

/// What a check looked at: one node, or a pair of nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "scope", rename_all = "lowercase")]
pub enum Scope {
    /// One node.
    Node {
        /// The node's name.
        node: String,
    },
    /// Two nodes, both ways unless the check says otherwise.
    Pair {
        /// The first node (the server of a pair's run).
        a: String,
        /// The second node (its client).
        b: String,
    },
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::Node { node } => f.write_str(node),
            Scope::Pair { a, b } => write!(f, "{a} <-> {b}"),
        }
    }
}

/// One check of one node or pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    /// Where it was checked.
    #[serde(flatten)]
    pub scope: Scope,
    /// The check's name (`port`, `gid`, `mtu`, `write-read` ...).
    pub check: String,
    /// Its outcome.
    pub verdict: Verdict,
    /// What was read, in the words of the place it was read from.
    pub evidence: String,
    /// What to do, when the verdict is not ok.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    /// A check that passed.
    pub fn ok(scope: &Scope, check: &str, evidence: impl Into<String>) -> Check {
        Check {
            scope: scope.clone(),
            check: check.into(),
            verdict: Verdict::Ok,
            evidence: evidence.into(),
            fix: None,
        }
    }

    /// A check that did not pass, with its fix.
    pub fn not_ok(
        scope: &Scope,
        check: &str,
        verdict: Verdict,
        evidence: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        Check {
            scope: scope.clone(),
            check: check.into(),
            verdict,
            evidence: evidence.into(),
            fix: Some(fix.into()),
        }
    }
}

/// Everything `labctl doctor` found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DoctorReport {
    /// [`DOCTOR_SCHEMA`].
    pub schema: u32,
    /// The lab's name.
    pub lab: String,
    /// Its fabric (`rxe`, `efa`, `existing`, `none`).
    pub fabric: String,
    /// Node checks first, in node order, then pair checks.
    pub checks: Vec<Check>,
    /// Wall time of the whole diagnosis, seconds.
    pub took_s: f64,
    /// The node facts of the lab's `expect:`, each met or missed on each
    /// node (also among the checks, as `expect <fact>`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expectations: Vec<crate::expect::ExpectOutcome>,
}

impl DoctorReport {
    /// The worst verdict of its checks (ok for none).
    pub fn verdict(&self) -> Verdict {
        self.checks.iter().map(|c| c.verdict).max().unwrap_or(Verdict::Ok)
    }

    /// How many checks have `verdict`.
    pub fn count(&self, verdict: Verdict) -> usize {
        self.checks.iter().filter(|c| c.verdict == verdict).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_the_worst_check_is_the_reports_verdict_and_the_json_names_the_scope() {
        let server = Scope::Node { node: "server".into() };
        let pair = Scope::Pair {
            a: "server".into(),
            b: "client".into(),
        };
        let mut report = DoctorReport {
            schema: DOCTOR_SCHEMA,
            lab: "rdma".into(),
            fabric: "rxe".into(),
            checks: vec![Check::ok(&server, "port", "rxe0 port 1 PORT_ACTIVE")],
            took_s: 1.0,
            expectations: Vec::new(),
        };
        assert_eq!(report.verdict(), Verdict::Ok);
        report
            .checks
            .push(Check::not_ok(&pair, "mtu", Verdict::Fail, "1500 vs 1200", "set both"));
        assert_eq!(report.verdict(), Verdict::Fail);
        assert_eq!(report.count(Verdict::Ok), 1);
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["checks"][1]["scope"], "pair");
        assert_eq!(json["checks"][1]["a"], "server");
        assert_eq!(json["checks"][1]["verdict"], "fail");
        assert_eq!(json["checks"][0]["node"], "server");
        assert!(json["checks"][0].get("fix").is_none());
        let back: DoctorReport = serde_json::from_value(json).unwrap();
        assert_eq!(back, report);
        assert_eq!(pair.to_string(), "server <-> client");
    }
}
