//! Tests of suites: parsing, located errors, and the checks against a lab.

use super::*;
use crate::labs::{LabSpec, LabsFile};

fn lab() -> LabSpec {
    let text = "labs:\n  - name: t\n    nodes:\n      - name: server\n      - name: client\n";
    LabsFile::parse(Path::new("labs.yaml"), text).unwrap().labs[0].clone()
}

fn suite(text: &str) -> Result<Suite, SuiteError> {
    Suite::parse(Path::new("suite.yaml"), text)
}

fn check(text: &str) -> Result<(), String> {
    let suite = suite(text).map_err(|e| e.to_string())?;
    lab().check_suite(&suite, "suite.yaml").map_err(|e| e.to_string())
}

#[test]
fn test_bad_suite_files_name_line_and_problem() {
    let e = suite("workloads:\n  - workload: write-raed\n").unwrap_err().to_string();
    assert_eq!(
        e,
        "suite.yaml:2:15: workloads[0].workload: unknown workload `write-raed`\n  fix: write `write-read`"
    );
    let e = suite("workloads:\n  - workload: write-read\n    sise: 3\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("suite.yaml:3:") && e.contains("unknown field `sise`"),
        "{e}"
    );
    let e = suite("- write-read\n").unwrap_err().to_string();
    assert!(e.contains("fix: a suite is `steps:`"), "{e}");
}

#[test]
fn test_suite_must_fit_the_lab() {
    assert_eq!(
        check("workloads:\n  - workload: write-read\n  - workload: send-recv\n"),
        Ok(())
    );
    let e = check("steps: []\n").unwrap_err();
    assert!(e.contains("no steps"), "{e}");
    let e = check("workloads:\n  - workload: read\n  - workload: read\n").unwrap_err();
    assert!(e.contains("steps[1]") && e.contains("`read` is used"), "{e}");
    let e = check("workloads:\n  - workload: read\n    client: c9\n").unwrap_err();
    assert!(
        e.contains("client `c9` is not a node") && e.contains("server, client"),
        "{e}"
    );
    // Both sides on one node: one agent holds both (Lab A: one host, two QPs).
    assert_eq!(check("workloads:\n  - workload: read\n    client: server\n"), Ok(()));
    // A collective runs one rank on each of its nodes (default: all).
    assert_eq!(check("workloads:\n  - workload: allreduce\n"), Ok(()));
    assert_eq!(
        check("workloads:\n  - workload: broadcast\n    nodes: [client, server]\n    root: server\n    warmup: 0\n    trace: true\n"),
        Ok(())
    );
    assert_eq!(
        check("workloads:\n  - workload: alltoall\n    nodes: [server]\n    ranks_per_node: 2\n"),
        Ok(())
    );
    let e = check("workloads:\n  - workload: allreduce\n    server: server\n").unwrap_err();
    assert!(
        e.contains("`server` is for pair workloads; allreduce runs one rank on each of its nodes")
            && e.contains("nodes: [n1, n2, ...]"),
        "{e}"
    );
    let e = check("workloads:\n  - workload: allreduce\n    nodes: [server, n9]\n").unwrap_err();
    assert!(e.contains("nodes: `n9` is not a node of lab"), "{e}");
    let e = check("workloads:\n  - workload: incast\n    nodes: [server, server]\n    root: client\n").unwrap_err();
    assert!(e.contains("root `client` is not one of the step's nodes"), "{e}");
    let e = check("workloads:\n  - workload: allreduce\n    nodes: [server]\n").unwrap_err();
    assert!(e.contains("would run 1 ranks; a collective runs 2 ..= 16"), "{e}");
    let e = check("workloads:\n  - workload: allreduce\n    ranks_per_node: 9\n").unwrap_err();
    assert!(e.contains("would run 18 ranks"), "{e}");
    let e = check("workloads:\n  - workload: allreduce\n    root: server\n").unwrap_err();
    assert!(
        e.contains("`root` applies to reduce, broadcast, incast, not to allreduce"),
        "{e}"
    );
    let e = check("workloads:\n  - workload: allreduce\n    qps: 2\n").unwrap_err();
    assert!(e.contains("`qps` applies to") && e.contains("not to allreduce"), "{e}");
    // And the collectives' fields are theirs.
    let e = check("workloads:\n  - workload: write-read\n    nodes: [server, client]\n").unwrap_err();
    assert!(
        e.contains("`nodes` applies to allreduce,") && e.contains("not to write-read"),
        "{e}"
    );
    let e = check("workloads:\n  - workload: write-read\n    ranks_per_node: 2\n").unwrap_err();
    assert!(
        e.contains("`ranks_per_node` applies to the collectives, not to write-read"),
        "{e}"
    );
    // A command's wrong type is told with what a command is, not a number.
    let e = suite("steps:\n  - exec: {run: true}\n").unwrap_err().to_string();
    assert!(
        e.contains(
            "exec.run: must be a command line, or a list of a program and its arguments, found the boolean true"
        ) && e.contains("fix: make `run:` a command line, or a list of a program and its arguments"),
        "{e}"
    );
    let e = check("workloads:\n  - exec: {run: \"true\"}\n    warmup: 1\n").unwrap_err();
    assert!(e.contains("`warmup` applies to workload steps, not to `exec`"), "{e}");
    let e = check("workloads:\n  - workload: read\n    provider: efa\n").unwrap_err();
    assert!(
        e.contains("`provider` applies to fabric-write, fabric-bw, fabric-lat, allreduce, allgather, reduce-scatter, reduce, alltoall, broadcast, incast, not to read (verbs workload)"),
        "{e}"
    );
    assert!(check("workloads:\n  - workload: fabric-write\n    trace: true\n").is_ok());
    let e = check("workloads:\n  - workload: bulk-tcp\n    trace: true\n").unwrap_err();
    assert!(
        e.contains("not to bulk-tcp (TCP workload)") && e.contains("remove the trace line"),
        "{e}"
    );
    assert!(check("workloads:\n  - workload: write-imm\n    trace: true\n").is_ok());
    // Every option the catalogue gives to some workloads only.
    let e = check("workloads:\n  - workload: fabric-bw\n    cm: oob\n").unwrap_err();
    assert!(
        e.contains("`cm: oob` applies to write-read,") && e.contains("remove the cm line"),
        "{e}"
    );
    let e = check("workloads:\n  - workload: write-read\n    ping_pong: true\n").unwrap_err();
    assert!(e.contains("`ping_pong` applies to send-recv, not to write-read"), "{e}");
    let e = check("workloads:\n  - workload: read\n    qps: 2\n").unwrap_err();
    assert!(
        e.contains("`qps` applies to write-bw, read-bw, send-bw, atomic-bw, param-server"),
        "{e}"
    );
    assert!(check("workloads:\n  - workload: send-bw\n    qps: 2\n").is_ok());
    let e = check("workloads:\n  - workload: send-recv\n    batches: 4\n").unwrap_err();
    assert!(e.contains("`batches` applies to write-imm, inference-ring"), "{e}");
    let e = check("steps:\n  - exec: {run: hostname}\n    trace: true\n").unwrap_err();
    assert!(e.contains("trace"), "{e}");
}

#[test]
fn test_step_kinds_and_their_shorthands_parse() {
    let s = suite(
        "steps:
  - copy: {from: build/app, to: '@all:/usr/local/bin/'}
    setup: true
  - exec: ibv_devinfo -d {self.dev}
  - exec: {nodes: client, run: [sh, -c, 'echo a; echo b']}
    timeout: 30
  - pair:
      server: ibv_rc_pingpong -d {self.dev} -g {self.gid_index}
      client: {node: client, run: 'ibv_rc_pingpong {server.addr}'}
      port: 18515
  - collect: {from: ['@all:/tmp/a.log', 'server:/tmp/b'], to: logs, optional: true}
",
    )
    .unwrap();
    lab().check_suite(&s, "suite.yaml").unwrap();
    let names: Vec<String> = s.steps.iter().map(SuiteStep::name).collect();
    assert_eq!(
        names,
        [
            "copy app",
            "exec ibv_devinfo",
            "exec sh",
            "pair ibv_rc_pingpong",
            "collect a.log"
        ]
    );
    assert!(s.steps[0].setup);
    assert_eq!(
        s.steps[1].exec.as_ref().unwrap(),
        &ExecStep {
            nodes: NodeSet::All,
            run: CommandSpec::Line("ibv_devinfo -d {self.dev}".into())
        }
    );
    let exec = s.steps[2].exec.as_ref().unwrap();
    assert_eq!(exec.nodes, NodeSet::Some(vec!["client".into()]));
    assert_eq!(exec.run.words(), ["sh", "-c", "echo a; echo b"]);
    assert_eq!(s.steps[2].timeout(), std::time::Duration::from_secs(30));
    let pair = s.steps[3].pair.as_ref().unwrap();
    assert_eq!((pair.server_node(), pair.client_node()), ("server", "client"));
    assert_eq!(pair.port, Some(18515));
    assert_eq!(pair.server_exit, ServerExit::Zero);
    assert_eq!(s.steps[4].collect.as_ref().unwrap().from.len(), 2);
}

#[test]
fn test_bad_steps_say_which_and_how_to_fix() {
    let at = |text: &str| suite(text).unwrap_err().to_string();
    let e = at("steps:\n  - exec: ''\n");
    assert!(
        e.starts_with("suite.yaml:2:") && e.contains("the command is empty"),
        "{e}"
    );
    let e = at("steps:\n  - exec: {nodes: client, rn: ls}\n");
    assert!(
        e.starts_with("suite.yaml:2:") && e.contains("unknown field `rn`"),
        "{e}"
    );
    let e = at("steps:\n  - pair:\n      server: a\n      client: b\n      ready: 'listen(ing'\n");
    assert!(
        e.starts_with("suite.yaml:5:") && e.contains("`ready` is not a regular expression"),
        "{e}"
    );
    let e = at("steps:\n  - exec: {nodes: [], run: ls}\n");
    assert!(e.contains("`nodes` is an empty list"), "{e}");

    let e = check("steps:\n  - {}\n").unwrap_err();
    assert!(e.contains("says nothing to do") && e.contains("`exec:`"), "{e}");
    let e = check("steps:\n  - exec: ls\n    workload: read\n").unwrap_err();
    assert!(e.contains("both `workload` and `exec`"), "{e}");
    let e = check("steps:\n  - exec: ls\n    size: 4\n").unwrap_err();
    assert!(e.contains("`size` applies to workload steps, not to `exec`"), "{e}");
    let e = check("steps:\n  - exec: {nodes: [server, c9], run: ls}\n").unwrap_err();
    assert!(e.contains("exec node `c9` is not a node of lab `t`"), "{e}");
    let e = check("steps:\n  - pair: {server: a, client: b}\n").unwrap_err();
    assert!(
        e.contains("does not say when its server is ready") && e.contains("port: N"),
        "{e}"
    );
    let e = check("steps:\n  - pair: {server: {node: s9, run: a}, client: b, port: 1}\n").unwrap_err();
    assert!(e.contains("pair.server's node `s9`"), "{e}");
    let e = check("steps:\n  - copy: {from: 'server:/etc/x', to: '@all:/tmp/'}\n").unwrap_err();
    assert!(e.contains("use `collect:`"), "{e}");
    let e = check("steps:\n  - copy: {from: x, to: /tmp/x}\n").unwrap_err();
    assert!(e.contains("is not on a node"), "{e}");
    let e = check("steps:\n  - collect: {from: '@all:/x', to: ../up}\n").unwrap_err();
    assert!(e.contains("leaves the artifacts directory"), "{e}");
    let e = check("steps:\n  - exec: ls\n  - exec: ls -l\n").unwrap_err();
    assert!(e.contains("`exec ls` is used by an earlier step"), "{e}");
    let e = check("steps:\n  - exec: ls\n    retries: 6\n").unwrap_err();
    assert!(
        e.contains("`retries: 6` is more than 5") && e.contains("at most 5"),
        "{e}"
    );
    check("steps:\n  - exec: ls\n    retries: 5\n").unwrap();
}

#[test]
fn test_shipped_example_suites_fit_a_two_node_lab() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/ci-examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with(".suite.yaml") {
            let suite = Suite::load(&path).unwrap_or_else(|e| panic!("{e}"));
            lab().check_suite(&suite, &path.display().to_string()).unwrap();
            checked += 1;
        }
    }
    assert!(checked > 0, "no example suite in {}", dir.display());
}

#[test]
fn test_reading_errors_are_located_and_worded_from_their_kind() {
    let at = |text: &str| suite(text).unwrap_err().to_string();
    assert_eq!(
        at("steps:\n  - workload: read\n    cm: foo\n"),
        "suite.yaml:3:9: steps[0].cm: unknown value `foo`; supported: rdma_cm, oob\n  fix: write `oob`"
    );
    assert_eq!(
        at("steps:\n  - pair: {server: a, client: b, port: 70000}\n"),
        "suite.yaml:2:40: steps[0].pair.port: must be a whole number from 0 to 65535, found the number 70000\n  fix: write it like `port: 10` (see docs/cmd/ci.md)"
    );
    assert_eq!(
        at("steps:\n  - exec: \"ls\n"),
        "suite.yaml:2:11: a quoted value that never ends\n  fix: close the quote on the same line"
    );
    let e = at("steps: []\n---\nsteps: []\n");
    assert!(
        e.starts_with("suite.yaml:2:1: the file holds more than one YAML document"),
        "{e}"
    );
    assert_eq!(
        at("steps:\n  - exec: ls\n    exec: ls\n"),
        "suite.yaml:3:5: steps[0].exec: `exec` is given twice\n  fix: keep one `exec:` line and remove the other"
    );
    let e = at("workloads:\n  - workload: write-read\n    sise: 3\n");
    assert!(
        e.starts_with("suite.yaml:3:5: workloads[0]: unknown field `sise`; expected one of `name`,")
            && e.ends_with("fix: rename `sise` to `size`"),
        "{e}"
    );
    let e = at("");
    assert!(
        e.starts_with("suite.yaml:1:1: `steps` is missing\n  fix: add `steps:`"),
        "{e}"
    );
    assert_eq!(
        at("steps:\n  - exec: {rn: ls}\n"),
        "suite.yaml:2:12: steps[0].exec: unknown field `rn`; expected one of `nodes`, `run`\n  fix: rename `rn` to `run`"
    );
}

#[test]
fn test_a_workload_step_reads_the_fields_of_labctl_run_with_their_positions() {
    let s = suite(
        "steps:\n  - name: big\n    workload: bulk-rdma\n    size: 64KiB\n    total: 1.5MiB\n    duration_s: 2.5\n    timeout: 30\n    trace: true\n",
    )
    .unwrap();
    let step = &s.steps[0];
    assert_eq!(step.name(), "big");
    assert_eq!((step.request.size, step.request.total), (Some(65536), Some(1_572_864)));
    assert_eq!(step.request.duration_s, Some(2.5));
    assert!(step.trace);
    let request = step.request();
    assert_eq!(request.workload, "bulk-rdma");
    assert_eq!(request.timeout, Some(std::time::Duration::from_secs(30)));

    let at = |text: &str| suite(text).unwrap_err().to_string();
    assert_eq!(
        at("steps:\n  - workload: read\n    qps: many\n"),
        "suite.yaml:3:10: steps[0].qps: must be a whole number from 0 to 4294967295, found the text \"many\"\n  fix: write it like `qps: 10` (see docs/cmd/ci.md)"
    );
    let e = at("steps:\n  - workload: read\n    iteratons: 3\n");
    assert!(
        e.starts_with("suite.yaml:3:5: steps[0]: unknown field `iteratons`; expected one of `name`,")
            && e.contains("`trace`")
            && e.ends_with("fix: rename `iteratons` to `iterations`"),
        "{e}"
    );
    let e = at("steps:\n  - exec: ls\n    retires: 1\n");
    assert!(e.ends_with("fix: rename `retires` to `retries`"), "{e}");
    // The command line's own options are not a step's.
    let e = at("steps:\n  - workload: read\n    counters: true\n");
    assert!(e.contains("unknown field `counters`"), "{e}");
}

#[test]
fn test_every_run_field_is_refused_on_a_step_of_another_kind() {
    for field in [
        "tx_depth: 4",
        "fault: skip",
        "total: 1MiB",
        "inline_size: 64",
        "seed: 3",
    ] {
        let key = field.split(':').next().unwrap();
        let e = check(&format!("steps:\n  - exec: ls\n    {field}\n")).unwrap_err();
        assert!(
            e.contains(&format!("`{key}` applies to workload steps, not to `exec`")),
            "{e}"
        );
    }
}
