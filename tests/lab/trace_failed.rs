//! A traced run that fails still leaves its trace: `run write-read
//! --corrupt-rkey --trace` on the suite lab, read back.

use libtest_mimic::Failed;
use serde_json::Value;

use crate::trace::{tempfile_dir, CLIENT, SERVER};
use crate::util::{check, Labctl};

pub fn run(lab: &Labctl) -> Result<(), Failed> {
    let dir = tempfile_dir().join("failed");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("bad.json");
    let path_s = path.display().to_string();
    let out = lab.run(&[
        "run",
        "write-read",
        "--corrupt-rkey",
        "--timeout",
        "60",
        "--trace",
        &path_s,
    ]);
    check(out.code != 0 && out.stderr.contains("REM_ACCESS_ERR"), || {
        format!("the corrupted rkey did not fail the run: {} {}", out.code, out.stderr)
    })?;
    check(out.stderr.contains("trace written to"), || {
        format!("no trace written: {}", out.stderr)
    })?;
    let doc: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
    let error = doc["otherData"]["error"].as_str().unwrap_or("");
    check(error.contains("REM_ACCESS_ERR"), || {
        format!("otherData.error: {error:?}")
    })?;
    let nodes = doc["otherData"]["nodes"].as_array().ok_or("no nodes")?;
    let client = nodes.iter().find(|n| n["role"] == "client").ok_or("no client node")?;
    check(
        client["failed"].as_str().unwrap_or("").contains("REM_ACCESS_ERR"),
        || format!("client node: {client}"),
    )?;
    let spans = |pid: u64, name: &str| -> Vec<Value> {
        doc["traceEvents"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["ph"] == "X" && e["pid"] == pid && e["name"] == name)
            .cloned()
            .collect()
    };
    // The client's WRITE went out with an rkey that is not the server's, and
    // its completion, named after that WRITE, failed with REM_ACCESS_ERR.
    let registration = spans(SERVER, "reg_mr")
        .into_iter()
        .find(|m| m["args"]["access"].as_str().unwrap_or("").contains("REMOTE_WRITE"))
        .ok_or("no server registration")?;
    let writes = spans(CLIENT, "post WRITE");
    let write = writes.first().ok_or("no WRITE post on the client")?;
    check(write["args"]["rkey"] != registration["args"]["rkey"], || {
        format!("the WRITE used the real rkey: {write} vs {registration}")
    })?;
    let failed = spans(CLIENT, "completion WRITE");
    check(
        failed.iter().any(|c| c["args"]["status"] == "IBV_WC_REM_ACCESS_ERR"),
        || format!("client WRITE completions: {failed:?}"),
    )?;
    // Each side's trace ends with its verdict naming the failure.
    for pid in [SERVER, CLIENT] {
        let verdicts = doc["traceEvents"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["pid"] == pid && e["cat"] == "verify")
            .count();
        check(verdicts == 1, || format!("pid {pid}: {verdicts} verdicts"))?;
    }
    // trace show reads it.
    let show = lab.run(&["trace", "show", &path_s]);
    check(show.code == 0 && show.stdout.contains("IBV_WC_REM_ACCESS_ERR"), || {
        format!("trace show: {} {}", show.stdout, show.stderr)
    })?;
    // A run that fails before anything is recorded leaves no empty file behind.
    let none = dir.join("none.json");
    let none_s = none.display().to_string();
    let out = lab.run(&["run", "write-read", "--server", "no-such-node", "--trace", &none_s]);
    check(out.code != 0 && !none.exists(), || {
        format!("an unknown node: exit {}, file left: {}", out.code, none.exists())
    })?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
