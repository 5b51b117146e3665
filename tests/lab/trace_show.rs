//! `labctl trace show`: a real write-imm trace drawn as a swimlane, its
//! rows checked against the trace file they were read from.

use libtest_mimic::{Failed, Trial};
use serde_json::Value;

use crate::util::{bin_dir, check, check_contains_all, Labctl};

pub fn trials(lab: &Labctl) -> Vec<Trial> {
    let lab = lab.clone();
    vec![crate::timing::trial(
        "test_trace_show_swimlane_of_write_imm",
        move || write_imm_swimlane(&lab),
    )]
}

fn write_imm_swimlane(lab: &Labctl) -> Result<(), Failed> {
    let dir = bin_dir().join(format!("trace-show-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("imm.json");
    let file = path.display().to_string();
    lab.run(&["run", "write-imm", "--trace", &file]).ok()?;
    let doc: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
    let recorded = doc["traceEvents"]
        .as_array()
        .ok_or("no traceEvents")?
        .iter()
        .filter(|e| e["ph"] == "X")
        .count();

    let lane = lab
        .run(&["trace", "show", &file, "--limit", "0", "--json"])
        .ok()?
        .json()?;
    let rows = lane["rows"].as_array().ok_or("no rows")?;
    let times: Vec<f64> = rows.iter().map(|r| r["t_ms"].as_f64().unwrap_or(f64::NAN)).collect();
    check(times.windows(2).all(|w| w[0] <= w[1]), || {
        format!("rows out of time order: {times:?}")
    })?;
    // Every recorded event is a row, but back-to-back receive posts share one ("×N").
    let folded: usize = rows
        .iter()
        .filter_map(|r| r["text"].as_str()?.rsplit_once(" ×")?.1.parse::<usize>().ok())
        .map(|n| n - 1)
        .sum();
    check(rows.len() + folded == recorded && lane["hidden"] == 0, || {
        format!("{} rows + {folded} folded != {recorded} events", rows.len())
    })?;
    let side_rows = |side: &str, prefix: &str| -> Vec<&Value> {
        rows.iter()
            .filter(|r| r["side"] == side && r["text"].as_str().unwrap_or("").starts_with(prefix))
            .collect()
    };
    // The client's immediates, each an arrow to the server; the server's
    // receive completions carry them in order (write-imm: 8 batches, then
    // the zero-length notification 8).
    let posts = side_rows("client", "post WRITE_WITH_IMM");
    check(posts.len() == 9, || format!("client WRITE_WITH_IMM posts: {posts:#?}"))?;
    for p in &posts {
        check(
            p["wire"]["toward"] == "server" && p["wire"]["label"].as_str().unwrap_or("").starts_with("WRITE_WITH_IMM"),
            || format!("post without its arrow: {p}"),
        )?;
    }
    let imms: Vec<String> = side_rows("server", "cqe RECV_RDMA_WITH_IMM")
        .iter()
        .filter_map(|r| {
            r["text"]
                .as_str()?
                .split(" imm ")
                .nth(1)?
                .split(' ')
                .next()
                .map(String::from)
        })
        .collect();
    let want: Vec<String> = (0..9).map(|i| format!("{i:#x}")).collect();
    check(imms == want, || format!("server immediates {imms:?}, want {want:?}"))?;
    let acks = side_rows("client", "cqe WRITE ok");
    check(
        acks.len() == 9 && acks.iter().all(|a| a["wire"]["toward"] == "client"),
        || format!("client WRITE completions as acks: {acks:#?}"),
    )?;
    // The blob the client received is the server's registration.
    let reg = side_rows("server", "reg_mr")
        .into_iter()
        .find(|r| !r["text"].as_str().unwrap_or("").contains("local only"))
        .ok_or("server: no registration the peer may use")?;
    let blob = side_rows("client", "blob received")
        .into_iter()
        .next()
        .ok_or("client: no blob received")?;
    let addr_rkey = |r: &Value| {
        let words: Vec<String> = r["text"].as_str().unwrap_or("").split(' ').map(String::from).collect();
        let after = |w: &str| {
            words
                .iter()
                .position(|x| x == w)
                .and_then(|i| words.get(i + 1))
                .cloned()
        };
        (words.iter().find(|w| w.starts_with("0x")).cloned(), after("rkey"))
    };
    check(addr_rkey(reg) == addr_rkey(blob) && addr_rkey(blob).0.is_some(), || {
        format!("blob {blob} is not the registration {reg}")
    })?;

    // The drawing: client left, wire middle, server right, in the width asked.
    let text = lab.run(&["trace", "show", &file, "--width", "140"]).ok()?.stdout;
    check_contains_all(
        "swimlane",
        &text,
        &["client", "server", "wire", "◀─── {addr, rkey} blob", "─▶", "◀"],
    )?;
    check(text.lines().all(|l| l.chars().count() <= 140), || {
        format!("wider than 140:\n{text}")
    })?;
    let header = text
        .lines()
        .find(|l| l.trim_start().starts_with("ms "))
        .ok_or_else(|| format!("no column header:\n{text}"))?;
    let col = |s: &str| header.find(s).unwrap_or(usize::MAX);
    check(col("client") < col("wire") && col("wire") < col("server"), || {
        header.to_string()
    })?;
    // A limit counts what it leaves out.
    let cut = lab.run(&["trace", "show", &file, "--limit", "5"]).ok()?.stdout;
    let more = rows.len() - 5;
    check(cut.contains(&format!("… {more} more events not shown")), || {
        cut.clone()
    })?;
    // A JSON file that is not a trace: exit 2, the file named, what to do.
    let other = dir.join("other.json");
    std::fs::write(&other, "{\"runs\": []}")?;
    let bad = lab.run(&["trace", "show", &other.display().to_string()]);
    check(
        bad.code == 2 && bad.stderr.contains("not a labctl trace") && bad.stderr.contains("other.json"),
        || format!("not a trace: exit {} {}", bad.code, bad.stderr),
    )?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
