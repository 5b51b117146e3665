//! `labctl graph` on the running lab (issue 17 item 5): the Mermaid, DOT
//! and SVG pictures and the `--json` model name the real nodes, their data
//! addresses, and the rxe devices and data GIDs that `status --json`
//! reports (and sysfs on the node holds).

use std::net::{Ipv4Addr, Ipv6Addr};

use libtest_mimic::{Failed, Trial};

use crate::util::{check, check_contains_all, Labctl};

pub fn trials(lab: &Labctl) -> Vec<Trial> {
    let lab = lab.clone();
    vec![crate::timing::trial(
        "test_graph_names_the_real_nodes_addresses_devices_and_gids",
        move || test_graph_names_the_real_nodes_addresses_devices_and_gids(&lab),
    )]
}

/// What `status --json` says about one node.
struct Reported {
    name: String,
    addr: String,
    device: String,
    gid_index: u64,
    gid: Ipv6Addr,
}

fn reported(lab: &Labctl) -> Result<Vec<Reported>, Failed> {
    let s = lab.run(&["status", "--json"]).ok()?.json()?;
    let mut out = Vec::new();
    for n in s["nodes"].as_array().ok_or("status: no nodes")? {
        let facts = &n["facts"];
        let field = |v: &serde_json::Value, what: &str| -> Result<String, Failed> {
            Ok(v.as_str()
                .ok_or_else(|| format!("status: no {what} in {n}"))?
                .to_string())
        };
        out.push(Reported {
            name: field(&n["name"], "name")?,
            addr: field(&n["data_addr"], "data_addr")?,
            device: field(&n["rdma"][0]["device"], "rdma device")?,
            gid_index: facts["gid_index"].as_u64().ok_or("status: no gid_index")?,
            gid: field(&facts["gid"], "gid")?.parse()?,
        });
    }
    Ok(out)
}

fn test_graph_names_the_real_nodes_addresses_devices_and_gids(lab: &Labctl) -> Result<(), Failed> {
    let nodes = reported(lab)?;
    check(nodes.len() == 2, || format!("{} nodes in status", nodes.len()))?;
    for n in &nodes {
        // The GID status reports is the node's data address, as sysfs has it.
        let addr: Ipv4Addr = n.addr.split('/').next().unwrap_or_default().parse()?;
        check(n.gid == addr.to_ipv6_mapped(), || {
            format!("{}: status GID {} is not ::ffff:{addr}", n.name, n.gid)
        })?;
        let sysfs = lab
            .run(&[
                "exec",
                &n.name,
                "--",
                &format!("cat /sys/class/infiniband/{}/ports/1/gids/{}", n.device, n.gid_index),
            ])
            .ok()?;
        check(sysfs.stdout.trim().parse::<Ipv6Addr>().ok() == Some(n.gid), || {
            format!("{}: sysfs GID {} holds {}", n.name, n.gid_index, sysfs.stdout.trim())
        })?;
    }

    // The model: live, every node with its address, device and data GID.
    let model = lab.run(&["graph", "--json"]).ok()?.json()?;
    check(model["source"] == "live" && model["lab"] == "e2e", || {
        format!("graph --json: {model}")
    })?;
    for (i, n) in nodes.iter().enumerate() {
        let m = &model["nodes"][i];
        let port = &m["rdma"][0];
        let gid: Option<Ipv6Addr> = port["data_gid"].as_str().and_then(|g| g.parse().ok());
        check(
            m["name"] == n.name.as_str()
                && m["data_addr"] == n.addr.as_str()
                && port["device"] == n.device.as_str()
                && port["data_gid_index"].as_u64() == Some(n.gid_index)
                && gid == Some(n.gid)
                && m["agent"]["state"] == "up",
            || format!("graph --json node {i}: {m}"),
        )?;
    }

    // The three pictures name the same facts.
    let mermaid = lab.run(&["graph"]).ok()?.stdout;
    let dot = lab.run(&["graph", "--format", "dot"]).ok()?.stdout;
    let svg_path = std::env::temp_dir().join(format!("labctl-e2e-graph-{}.svg", std::process::id()));
    let svg_path_text = svg_path.display().to_string();
    lab.run(&["graph", "-o", &svg_path_text]).ok()?;
    let svg = std::fs::read_to_string(&svg_path)?;
    let _ = std::fs::remove_file(&svg_path);
    let doc = roxmltree::Document::parse(&svg)?;
    let svg_lines: Vec<&str> = doc
        .descendants()
        .filter(|t| t.has_tag_name("tspan"))
        .filter_map(|t| t.text())
        .collect();
    check(mermaid.starts_with("%% lab e2e (qemu, rxe): live\nflowchart"), || {
        format!("mermaid:\n{mermaid}")
    })?;
    check(dot.contains("graph \"e2e\" {"), || format!("dot:\n{dot}"))?;
    for n in &nodes {
        let gid_line = format!("GID {} {} (RoCE v2)", n.gid_index, n.gid);
        let device = format!("{} port 1 ACTIVE", n.device);
        for (what, text) in [("mermaid", &mermaid), ("dot", &dot)] {
            check_contains_all(what, text, &[&n.name, &n.addr, &device, &gid_line])?;
        }
        check(svg_lines.contains(&n.name.as_str()), || {
            format!("svg lacks node {}: {svg_lines:?}", n.name)
        })?;
        check(svg_lines.contains(&gid_line.as_str()), || {
            format!("svg lacks {gid_line:?}: {svg_lines:?}")
        })?;
        check(svg_lines.iter().any(|l| l.ends_with(&n.addr)), || {
            format!("svg lacks {}: {svg_lines:?}", n.addr)
        })?;
    }
    Ok(())
}

/// Trials for before the lab is up (the suite's first phase).
pub fn planned_trials(lab: &Labctl) -> Vec<Trial> {
    let lab = lab.clone();
    vec![crate::timing::trial(
        "test_graph_of_a_lab_not_up_shows_the_planned_nodes_and_says_so",
        move || test_graph_of_a_lab_not_up_shows_the_planned_nodes_and_says_so(&lab),
    )]
}

fn test_graph_of_a_lab_not_up_shows_the_planned_nodes_and_says_so(lab: &Labctl) -> Result<(), Failed> {
    let out = lab.run(&["graph", "--format", "dot"]).ok()?;
    check(out.stderr.contains("is not up"), || format!("stderr: {}", out.stderr))?;
    // tests/labs/e2e.yaml plans server and client on the default data network.
    check_contains_all(
        "dot",
        &out.stdout,
        &[
            "planned from labs.yaml, not up",
            "data network 10.77.0.0/24",
            "server\\nRDMA device: unknown until up\\nagent: not deployed",
            "n0 -- net [label=\"10.77.0.1/24\"]",
            "n1 -- net [label=\"10.77.0.2/24\"]",
        ],
    )?;
    let model = lab.run(&["graph", "--json"]).ok()?.json()?;
    check(
        model["source"] == "planned" && model["nodes"][1]["agent"]["state"] == "unknown",
        || format!("graph --json: {model}"),
    )?;
    // A file whose extension names no format is bad input: exit 2, and a fix.
    let bad = lab.run(&["graph", "-o", "/tmp/labctl-e2e-graph.png"]);
    check(bad.code == 2 && bad.stderr.contains("--format mermaid|dot|svg"), || {
        format!("graph -o x.png: exit {}, stderr {}", bad.code, bad.stderr)
    })?;
    Ok(())
}
