//! The one catalogue of workloads: for each workload its name, family,
//! shape (which roles take part), parameter defaults, the faults it can
//! inject and catch, the options it takes, the metrics it reports and its
//! one-line doc; with them the limits every request shares and the enums a
//! run's parameters are made of ([`Fault`], [`Cm`], [`Completion`]).
//!
//! Both sides read it: the controller for `labctl run --help`, the labs.yaml
//! and suite checks, its defaults and its option checks; the agent for its
//! request validation and for the test that keeps its dispatch table and
//! this catalogue in step.
//!
//! This crate owns facts only. It must not run anything, know the wire
//! format (agent-proto converts these enums to and from the proto's), or
//! know a node: limits that depend on a node's memory, and a workload's own
//! footprint checks, belong to the agent's implementation of it.
//!
//! # Adding a workload
//! 1. An entry in [`CATALOGUE`] (in `entries.rs`).
//! 2. Its implementation in rdma-agent, listed by name in the agent's
//!    dispatch table; the agent's tests fail while one exists without the
//!    other.
//!
//! Nothing else: the CLI, the schema, the suite checks and the defaults
//! follow from the entry.

mod entries;
pub mod limits;
mod model;
pub use entries::CATALOGUE;
pub use model::{Asks, Cm, Collective, Completion, Defaults, Family, Fault, Metric, Opt, Refused, Shape, Workload};

/// The workload called `name`.
pub fn find(name: &str) -> Option<&'static Workload> {
    CATALOGUE.iter().find(|w| w.name == name)
}

/// Every workload's name, in catalogue order.
pub fn names() -> impl Iterator<Item = &'static str> {
    CATALOGUE.iter().map(|w| w.name)
}

/// The pair workloads' names (every workload but the collectives), in
/// catalogue order: what a suite step may run.
pub fn pair_names() -> impl Iterator<Item = &'static str> {
    CATALOGUE
        .iter()
        .filter(|w| w.shape.collective().is_none())
        .map(|w| w.name)
}

/// The workloads that take `opt`, comma separated (for help and errors).
pub fn taking(opt: Opt) -> String {
    CATALOGUE
        .iter()
        .filter(|w| w.takes(opt))
        .map(|w| w.name)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_names_are_unique_and_found() {
        for w in CATALOGUE {
            assert_eq!(find(w.name).map(|f| f.name), Some(w.name));
            assert_eq!(names().filter(|n| *n == w.name).count(), 1, "{} twice", w.name);
        }
        assert!(find("nope").is_none());
    }

    #[test]
    fn test_every_workload_can_show_its_verdict_failing_and_has_runnable_defaults() {
        for w in CATALOGUE {
            assert!(!w.faults.is_empty(), "{} injects no fault", w.name);
            assert!(!w.metrics.is_empty(), "{} reports nothing", w.name);
            assert!(
                !w.doc.is_empty() && !w.doc.ends_with('.'),
                "{}: one line, no full stop",
                w.name
            );
            let d = w.defaults;
            assert!(d.size >= 1 && d.size <= limits::DEFAULT_MAX_SIZE, "{}", w.name);
            assert!(
                d.iterations >= 1 && d.iterations <= limits::MAX_ITERATIONS,
                "{}",
                w.name
            );
            assert!(d.qps >= 1 && d.qps <= limits::MAX_QPS, "{}", w.name);
            assert!(
                d.qps == 1 || w.takes(Opt::Qps),
                "{}: several QPs by default but no --qps",
                w.name
            );
            assert_eq!(
                d.total > 0,
                w.takes(Opt::Total),
                "{}: total and --total go together",
                w.name
            );
            assert!(d.total <= limits::MAX_BULK_TOTAL, "{}", w.name);
        }
    }

    #[test]
    fn test_families_decide_the_options_that_belong_to_them() {
        // A collective's ranks take one QP per other rank (no --qps), set up
        // as a pair's are (rdma_cm, or --cm oob); every rank keeps a trace.
        for w in CATALOGUE.iter().filter(|w| w.shape == Shape::Pair) {
            assert_eq!(
                w.takes(Opt::Provider),
                w.family == Family::Libfabric,
                "{}: --provider is libfabric's",
                w.name
            );
            assert_eq!(
                w.takes(Opt::CmOob),
                w.family == Family::Verbs,
                "{}: --cm oob is verbs'",
                w.name
            );
            assert_eq!(
                w.takes(Opt::Trace),
                w.family != Family::Tcp,
                "{}: TCP runs keep no trace",
                w.name
            );
        }
        for w in CATALOGUE.iter().filter(|w| w.shape.collective().is_some()) {
            assert!(w.takes(Opt::Trace), "{}: every rank keeps a trace", w.name);
            assert!(w.takes(Opt::CmOob) && !w.takes(Opt::Qps), "{}", w.name);
        }
    }

    #[test]
    fn test_the_facts_other_code_relies_on() {
        let w = |name| find(name).unwrap();
        assert_eq!(w("param-server").defaults.qps, 2);
        assert_eq!(w("inference-ring").defaults.tx_depth, 8);
        assert_eq!(w("write-imm").defaults.batches, 8);
        assert_eq!(
            (w("fabric-write").defaults.size, w("fabric-write").defaults.iterations),
            (65536, 64)
        );
        assert_eq!(taking(Opt::Qps), "write-bw, read-bw, send-bw, atomic-bw, param-server");
        assert_eq!(w("write-bw").fault_labels(), "skip, corrupt");
        assert_eq!(w("read").fault_labels(), "corrupt");
        assert_eq!(w("write-lat").defaults.completion, Completion::Poll);
        assert_eq!(w("read-lat").defaults.completion, Completion::Auto);
        assert!(w("write-lat").reports(Metric::Latency) && !w("write-lat").reports(Metric::Bandwidth));
        assert_eq!(CATALOGUE.len(), 28);
        let collectives: Vec<&str> = CATALOGUE
            .iter()
            .filter(|w| w.shape.collective().is_some())
            .map(|w| w.name)
            .collect();
        assert_eq!(
            collectives,
            [
                "allreduce",
                "allgather",
                "reduce-scatter",
                "reduce",
                "alltoall",
                "broadcast",
                "incast"
            ]
        );
        assert_eq!(taking(Opt::Root), "reduce, broadcast, incast");
        assert!(w("allreduce").takes(Opt::Nodes) && !w("write-read").takes(Opt::Nodes));
    }

    #[test]
    fn test_bus_factors_are_nccl_tests() {
        let f = |c: Collective| c.bus_factor(4);
        assert_eq!(f(Collective::Allreduce), 1.5);
        assert_eq!(f(Collective::Allgather), 0.75);
        assert_eq!(f(Collective::ReduceScatter), 0.75);
        assert_eq!(f(Collective::Alltoall), 0.75);
        assert_eq!(f(Collective::Broadcast), 1.0);
        assert_eq!(f(Collective::Reduce), 1.0);
        assert_eq!(f(Collective::Incast), 3.0);
    }
}
