//! `labctl ci` running the user's own programs as steps (copy, exec, pair,
//! collect) on the ci lab: each kind of step passing, and each failure a
//! step can have provoked for a real reason and reported as such. The lab,
//! its output directory and the checks that nothing is left come from
//! [`crate::ci`].

use libtest_mimic::Failed;
use serde_json::Value;

use crate::ci::{nothing_left, out_dir, read_json};
use crate::util::{check, Labctl};
use crate::verbs_example::build_rc_exchange;

/// The suite of `test_ci_steps_...`: the user's programs as copy, exec, pair
/// and collect steps, each failure provoked for a real reason.
const STEPS_SUITE: &str = r#"steps:
  - name: copy programs
    copy: {from: [rc_exchange, probe.sh], to: "@all:/usr/local/bin/"}
    setup: true
  - name: facts on every node
    exec: probe.sh {self.name} {self.dev} {self.gid_index}
  - name: rc_pingpong
    pair:
      server: ibv_rc_pingpong -d {self.dev} -g {self.gid_index} -n 50
      client: ibv_rc_pingpong -d {self.dev} -g {self.gid_index} -n 50 {server.addr}
      port: 18515
  - name: ib_write_bw
    pair:
      server: ib_write_bw -d {self.dev} -x {self.gid_index} -n 200
      client: ib_write_bw -d {self.dev} -x {self.gid_index} -n 200 {server.addr}
      port: 18515
    # perftest refuses to report when its clock sampling is disturbed
    # ("Correlation coefficient r^2 < 0.9"), as on a busy 2-core host.
    retries: 2
  - name: fails once
    exec: {nodes: client, run: "if [ -e /tmp/ci-fails-once ]; then rm /tmp/ci-fails-once; echo second try; else touch /tmp/ci-fails-once; echo first try; exit 1; fi"}
    retries: 1
  - name: fi_pingpong
    pair:
      server: fi_pingpong -p '{fi_provider}' -e rdm -I 50 -S 4096
      client: fi_pingpong -p '{fi_provider}' -e rdm -I 50 -S 4096 {server.addr}
      port: 47592
  - name: rc_exchange
    pair:
      server: [rc_exchange, -d, "{self.dev}", -g, "{self.gid_index}", -n, "8"]
      client: [rc_exchange, -d, "{self.dev}", -g, "{self.gid_index}", -n, "8", "{server.addr}"]
      ready: listening on port
  - name: rping over rdma_cm
    # An rdma_cm server has no TCP socket: `port:` sees its RDMA CM listener.
    pair:
      server: rping -s -a {server.addr} -p 7174 -v -C 3
      client: rping -c -a {server.addr} -p 7174 -v -C 3
      port: 7174
  - name: ucmatose ready by its line
    # ucmatose prints its first line with printf and no flush: the line
    # reaches `ready:` as it is printed only because labctl line-buffers it.
    pair:
      server: ucmatose -b {server.addr}
      client: ucmatose -s {server.addr}
      ready: "starting server"
  - name: rc_exchange to a wrong address
    pair:
      server: rc_exchange -d {self.dev} -g {self.gid_index}
      client: rc_exchange -d {self.dev} -g {self.gid_index} 10.77.0.99
      ready: listening on port
      server_exit: any
    timeout: 60
  - name: ib_write_bw with a GID index that does not exist
    pair:
      server: ib_write_bw -d {self.dev} -x 7 -n 20
      client: ib_write_bw -d {self.dev} -x 7 -n 20 {server.addr}
      port: 18515
    timeout: 30
  - name: exit status 3
    exec: {nodes: client, run: "echo going down; exit 3"}
    retries: 1
  - name: hangs past its time limit
    exec: {nodes: server, run: "echo started; sleep 600"}
    timeout: 5
  - name: server never ready
    pair: {server: "sleep 600", client: "true", port: 18999}
    timeout: 8
  - name: client killed
    pair:
      server: "echo ready; sleep 30"
      client: "kill -KILL $$"
      ready: ^ready$
      server_exit: any
  - name: nothing left running
    exec: "! pgrep -x sleep && ! pgrep -x rc_exchange"
  - name: corrupted write-read
    workload: write-read
    iterations: 3
    fault: corrupt
    # A verification failure is final: retries do not apply to it.
    retries: 2
  - collect: {from: "@all:/etc/labctl/lab.env", to: facts}
  - name: optional log
    collect: {from: "server:/tmp/no-such.log", optional: true}
  - name: failing setup
    exec: "exit 1"
    setup: true
  - name: after the failed setup
    exec: "true"
"#;

pub(crate) fn test_ci_steps_run_the_users_programs_and_report_each_failure(lab: &Labctl) -> Result<(), Failed> {
    let out = out_dir("steps");
    // The user's files, beside the suite: a program built on this machine
    // and a script whose mode must survive the copy.
    let built = build_rc_exchange("ci-steps-build")?;
    std::fs::copy(&built, out.join("rc_exchange"))?;
    let probe = out.join("probe.sh");
    std::fs::write(&probe, "#!/bin/sh\necho \"node=$1 dev=$2 gid_index=$3\"\n")?;
    std::fs::set_permissions(&probe, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let suite = out.join("steps.suite.yaml");
    std::fs::write(&suite, STEPS_SUITE)?;
    let (junit, report, artifacts) = (out.join("junit.xml"), out.join("report.json"), out.join("artifacts"));
    let run = lab.run(&[
        "ci",
        "--suite",
        &suite.display().to_string(),
        "--junit",
        &junit.display().to_string(),
        "--report",
        &report.display().to_string(),
        "--artifacts",
        &artifacts.display().to_string(),
    ]);
    let all = format!("exit {}\nstdout:\n{}\nstderr:\n{}", run.code, run.stdout, run.stderr);
    check(run.code == 1, || all.clone())?;
    let r = read_json(&report)?;
    check(
        r["schema"] == 2 && r["up"]["ok"] == true && r["down"]["ok"] == true,
        || format!("{r}"),
    )?;
    let cases = r["cases"].as_array().ok_or("no cases")?;
    let case = |name: &str| {
        cases
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .ok_or_else(|| Failed::from(format!("no case {name}: {r}")))
    };
    let passed = [
        "copy programs",
        "facts on every node",
        "rc_pingpong",
        "ib_write_bw",
        "fails once",
        "fi_pingpong",
        "rc_exchange",
        "rping over rdma_cm",
        "ucmatose ready by its line",
        "nothing left running",
        "collect lab.env",
        "optional log",
    ];
    for name in passed {
        let c = case(name)?;
        check(c["status"] == "passed", || format!("{name} did not pass: {c}\n{all}"))?;
    }
    check(r["passed"] == 12 && r["failed"] == 8 && r["not_run"] == 1, || {
        format!("counts: {} {} {}\n{all}", r["passed"], r["failed"], r["not_run"])
    })?;

    // copy: both files on both nodes, checked, the script still executable
    // (the next step ran it by name).
    let copy = case("copy programs")?;
    check(copy["transfers"].as_array().map_or(0, Vec::len) == 4, || {
        format!("{copy}")
    })?;
    let facts = case("facts on every node")?;
    for node in ["server", "client"] {
        let cmd = facts["commands"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["node"] == node))
            .ok_or_else(|| format!("no command on {node}: {facts}"))?;
        let stdout = cmd["stdout"].as_str().unwrap_or_default();
        check(
            stdout.starts_with(&format!("node={node} dev=rxe0 gid_index=")) && cmd["status"] == 0,
            || format!("{cmd}"),
        )?;
    }
    // The pairs moved bytes: the tools' own words.
    let output_of = |c: &Value, role: &str| -> String {
        c["commands"]
            .as_array()
            .and_then(|cs| cs.iter().find(|x| x["role"] == role))
            .map(|x| {
                format!(
                    "{}{}",
                    x["stdout"].as_str().unwrap_or(""),
                    x["stderr"].as_str().unwrap_or("")
                )
            })
            .unwrap_or_default()
    };
    let pp = case("rc_pingpong")?;
    check(output_of(&pp, "client").contains("bytes in"), || format!("{pp}"))?;
    let bw = case("ib_write_bw")?;
    check(output_of(&bw, "client").contains("BW average"), || format!("{bw}"))?;
    let rcx = case("rc_exchange")?;
    check(output_of(&rcx, "server").contains("verified"), || format!("{rcx}"))?;
    let rping = case("rping over rdma_cm")?;
    check(output_of(&rping, "server").contains("ping data: rdma-ping-2"), || {
        format!("{rping}")
    })?;
    let cma = case("ucmatose ready by its line")?;
    check(
        output_of(&cma, "server").contains("cmatose: starting server")
            && output_of(&cma, "client").contains("cmatose: starting client"),
        || format!("{cma}"),
    )?;

    // Each failure names the node, the command, the status and the output.
    let why = |name: &str| -> Result<String, Failed> {
        let c = case(name)?;
        check(c["status"] == "failed", || format!("{name}: {c}"))?;
        Ok(c["message"].as_str().unwrap_or_default().to_string())
    };
    let wrong = why("rc_exchange to a wrong address")?;
    check(
        wrong.contains("client on client: `rc_exchange -d rxe0")
            && wrong.contains("10.77.0.99")
            && wrong.contains("exited with status")
            && wrong.contains("connect to 10.77.0.99"),
        || format!("wrong address: {wrong}"),
    )?;
    // perftest says only that it failed; the step names the GID index it
    // was given, what that entry is on the node, and the right one.
    let gid = why("ib_write_bw with a GID index that does not exist")?;
    check(
        gid.contains("server on `server`: `-x 7`: GID index 7 of rxe0 port 1 is empty")
            && gid.contains("the RoCE v2 GID of its data address 10.77.0.1 is index 1"),
        || format!("wrong GID index: {gid}"),
    )?;
    let three = why("exit status 3")?;
    check(
        three.contains("exec on client: `echo going down; exit 3` exited with status 3")
            && three.contains("going down"),
        || format!("exit 3: {three}"),
    )?;
    // retries: a step that fails once passes on its second attempt, and the
    // report keeps why the first failed; one that always fails runs each
    // attempt it was given.
    let once = case("fails once")?;
    check(
        once["status"] == "passed"
            && once["attempts"] == 2
            && once["failed_attempts"][0]
                .as_str()
                .is_some_and(|m| m.starts_with("attempt 1 of 2: ") && m.contains("first try"))
            && once["commands"][0]["stdout"]
                .as_str()
                .is_some_and(|out| out.contains("second try")),
        || format!("fails once: {once}"),
    )?;
    let three_case = case("exit status 3")?;
    check(
        three_case["attempts"] == 2 && three_case["failed_attempts"].as_array().map_or(0, Vec::len) == 1,
        || format!("exit 3 with retries: {three_case}"),
    )?;
    check(
        all.contains("fails once: attempt 1 of 2 FAILED") && all.contains("on attempt 2"),
        || format!("no retry note in the progress:\n{all}"),
    )?;
    check(
        three_case["failure"] == "run" && three_case.get("not_retried").is_none(),
        || format!("exit 3 is a run failure, retried: {three_case}"),
    )?;
    // A workload whose bytes did not verify fails on its first attempt,
    // whatever its retries, and the report, summary and JUnit say why.
    let corrupted = case("corrupted write-read")?;
    check(
        corrupted["status"] == "failed"
            && corrupted["attempts"] == 1
            && corrupted["failure"] == "verification"
            && corrupted.get("failed_attempts").is_none()
            && corrupted["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("not verified: ") && m.contains("differs"))
            && corrupted["not_retried"]
                .as_str()
                .is_some_and(|m| m.starts_with("not retried (2 retries left): a verification failure is final")),
        || format!("corrupted write-read: {corrupted}"),
    )?;
    check(
        all.contains("(not retried: a verification failure is final)")
            && !all.contains("corrupted write-read: attempt 1 of 3 FAILED"),
        || format!("the corrupted step was retried, or the summary does not say it was not:\n{all}"),
    )?;
    let hang = why("hangs past its time limit")?;
    check(
        hang.contains("exec on server")
            && hang.contains("did not finish within 5 s; stopped")
            && hang.contains("started"),
        || format!("hang: {hang}"),
    )?;
    let never = why("server never ready")?;
    check(
        never.contains("server on server: `sleep 600` was not ready within 8 s") && never.contains("port 18999"),
        || format!("never ready: {never}"),
    )?;
    let killed = why("client killed")?;
    check(killed.contains("was killed by signal 9"), || {
        format!("killed: {killed}")
    })?;
    let setup = why("failing setup")?;
    check(setup.contains("exited with status 1"), || setup.clone())?;
    let after = case("after the failed setup")?;
    check(
        after["status"] == "not-run" && after["message"] == "not run: setup step `failing setup` failed",
        || format!("{after}"),
    )?;

    // collect: each node's file in its own directory, as the node has it.
    for node in ["server", "client"] {
        let env = artifacts.join("facts").join(node).join("lab.env");
        let text = std::fs::read_to_string(&env).map_err(|e| format!("{}: {e}", env.display()))?;
        check(text.contains(&format!("LABCTL_NODE={node}")), || text.clone())?;
    }

    // JUnit: one case per step, failures with their messages, output kept.
    let xml = std::fs::read_to_string(&junit)?;
    check(xml.contains(r#"tests="21" failures="8" errors="1""#), || {
        format!("counts:\n{xml}")
    })?;
    // Earlier attempts as surefire's flakyFailure (passed later) and
    // rerunFailure (failed every time).
    check(
        xml.contains("<flakyFailure") && xml.contains("<rerunFailure") && xml.contains("first try"),
        || format!("junit reruns:\n{xml}"),
    )?;
    check(xml.contains("connect to 10.77.0.99"), || format!("junit:\n{xml}"))?;
    check(
        xml.contains("not retried (2 retries left): a verification failure is final"),
        || format!("junit does not say the corrupted step was not retried:\n{xml}"),
    )?;
    check(
        xml.contains("<system-out>==&gt; server on server: ibv_rc_pingpong"),
        || format!("junit:\n{xml}"),
    )?;
    nothing_left(lab)
}
