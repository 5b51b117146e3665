//! The lab facts on every node (issue 13 part 3): `/etc/labctl/lab.env`,
//! the hostfile and the marked `/etc/hosts` lines that `up` writes, the same
//! facts in `status --json`, and verbs traffic set up from them alone.

use std::net::{Ipv4Addr, Ipv6Addr};

use libtest_mimic::{Failed, Trial};

use crate::util::{check, Labctl};

pub fn trials(lab: &Labctl) -> Vec<Trial> {
    let t = |name: &str, f: fn(&Labctl) -> Result<(), Failed>| {
        let lab = lab.clone();
        crate::timing::trial(name, move || f(&lab))
    };
    vec![
        t(
            "test_lab_facts_on_every_node_match_the_node",
            test_lab_facts_on_every_node_match_the_node,
        ),
        t(
            "test_lab_facts_drive_rc_pingpong_by_node_name",
            test_lab_facts_drive_rc_pingpong_by_node_name,
        ),
        t(
            "test_lab_facts_second_up_refreshes_and_keeps_one_set_of_hosts_lines",
            test_lab_facts_second_up_refreshes_and_keeps_one_set_of_hosts_lines,
        ),
    ]
}

const NODES: [&str; 2] = ["server", "client"];

/// Each node's data address, from `status --json`.
fn data_addrs(lab: &Labctl) -> Result<Vec<(String, Ipv4Addr)>, Failed> {
    let s = lab.run(&["status", "--json"]).ok()?.json()?;
    let mut out = Vec::new();
    for node in s["nodes"].as_array().ok_or("no nodes")? {
        let name = node["name"].as_str().ok_or("no name")?.to_string();
        let addr = node["data_addr"].as_str().ok_or("no data_addr")?;
        let addr: Ipv4Addr = addr.split('/').next().unwrap_or_default().parse()?;
        out.push((name, addr));
    }
    Ok(out)
}

/// The number of the lab's marked lines in a node's /etc/hosts.
fn marked_lines(lab: &Labctl, node: &str) -> Result<usize, Failed> {
    let out = lab
        .run(&["exec", node, "--", "grep -c ' # labctl:e2e$' /etc/hosts || true"])
        .ok()?;
    Ok(out.stdout.trim().parse()?)
}

fn test_lab_facts_on_every_node_match_the_node(lab: &Labctl) -> Result<(), Failed> {
    let addrs = data_addrs(lab)?;
    let status = lab.run(&["status", "--json"]).ok()?.json()?;
    let facts = &status["facts"];
    check(facts["lab"] == "e2e" && facts["fabric"] == "rxe", || {
        format!("status facts: {facts}")
    })?;
    check(facts["libfabric_provider"] == "verbs;ofi_rxd", || {
        format!("libfabric provider: {}", facts["libfabric_provider"])
    })?;
    check(facts["nodes"] == serde_json::json!(NODES), || {
        format!("nodes: {}", facts["nodes"])
    })?;
    for (i, (name, addr)) in addrs.iter().enumerate() {
        // Everything from lab.env, then what sysfs says at the GID index it gives.
        let out = lab
            .run(&[
                "exec",
                name,
                "--",
                ". /etc/labctl/lab.env && p=/sys/class/infiniband/$LABCTL_DEV/ports/$LABCTL_PORT && \
                 printf '%s\\n' \"$LABCTL_NODE\" \"$LABCTL_ADDR\" \"$LABCTL_GID_INDEX\" \"$LABCTL_NODES\" \
                 \"$LABCTL_ADDR_SERVER\" \"$LABCTL_ADDR_CLIENT\" \"$LABCTL_FI_PROVIDER\" \"$LABCTL_GID\" && \
                 cat $p/gids/$LABCTL_GID_INDEX $p/gid_attrs/types/$LABCTL_GID_INDEX",
            ])
            .ok()?;
        let lines: Vec<&str> = out.stdout.lines().collect();
        check(lines.len() == 10, || format!("{name}: lab.env gave:\n{}", out.stdout))?;
        check(lines[0] == name, || format!("{name}: LABCTL_NODE={}", lines[0]))?;
        check(lines[1] == addr.to_string(), || {
            format!("{name}: LABCTL_ADDR={} (want {addr})", lines[1])
        })?;
        check(lines[3] == "server client", || {
            format!("{name}: LABCTL_NODES={}", lines[3])
        })?;
        check(
            lines[4] == addrs[0].1.to_string() && lines[5] == addrs[1].1.to_string(),
            || {
                format!(
                    "{name}: LABCTL_ADDR_SERVER={} LABCTL_ADDR_CLIENT={}",
                    lines[4], lines[5]
                )
            },
        )?;
        check(lines[6] == "verbs;ofi_rxd", || {
            format!("{name}: LABCTL_FI_PROVIDER={}", lines[6])
        })?;
        let sysfs_gid: Ipv6Addr = lines[8].parse()?;
        check(sysfs_gid == addr.to_ipv6_mapped() && lines[7] == lines[8], || {
            format!(
                "{name}: GID index {} holds {} (LABCTL_GID {}), not ::ffff:{addr}",
                lines[2], lines[8], lines[7]
            )
        })?;
        check(lines[9] == "RoCE v2", || {
            format!("{name}: GID index {} is {}", lines[2], lines[9])
        })?;
        let node_facts = &status["nodes"][i]["facts"];
        check(node_facts["gid_index"].as_u64() == lines[2].parse().ok(), || {
            format!("{name}: status facts {node_facts} vs LABCTL_GID_INDEX {}", lines[2])
        })?;

        let hostfile = lab.run(&["exec", name, "--", "cat /etc/labctl/hostfile"]).ok()?;
        for (_, other) in &addrs {
            check(hostfile.stdout.contains(&format!("{other} slots=1\n")), || {
                format!("{name}: hostfile lacks {other}:\n{}", hostfile.stdout)
            })?;
        }
        check(marked_lines(lab, name)? == addrs.len(), || {
            format!("{name}: not one marked /etc/hosts line per node")
        })?;
    }
    // The server resolves the client's name to its data address.
    let getent = lab.run(&["exec", "server", "--", "getent hosts client"]).ok()?;
    check(
        getent.stdout.split_whitespace().next() == Some(&addrs[1].1.to_string()),
        || format!("getent hosts client: {}", getent.stdout),
    )
}

fn test_lab_facts_drive_rc_pingpong_by_node_name(lab: &Labctl) -> Result<(), Failed> {
    let pingpong = ". /etc/labctl/lab.env && timeout 60 ibv_rc_pingpong -d \"$LABCTL_DEV\" -i \"$LABCTL_PORT\" \
                    -g \"$LABCTL_GID_INDEX\" -n 100 -s 4096";
    // 100 round trips of 4 KiB, counted both ways.
    crate::util::rc_pingpong(lab, pingpong, &format!("{pingpong} server"), 819_200)?;
    Ok(())
}

fn test_lab_facts_second_up_refreshes_and_keeps_one_set_of_hosts_lines(lab: &Labctl) -> Result<(), Failed> {
    // Another lab's line and an unmarked line must survive; a stale line of
    // this lab and a deleted lab.env must be put right by the next `up`.
    lab.run(&[
        "exec",
        "server",
        "--",
        "echo '10.99.0.9 bystander # labctl:other' >> /etc/hosts && \
         echo '10.99.0.8 unmarked' >> /etc/hosts && \
         echo '10.99.0.7 stale # labctl:e2e' >> /etc/hosts && rm /etc/labctl/lab.env",
    ])
    .ok()?;
    let up = lab.run(&["up"]).ok()?;
    check(up.stdout.contains("was already up"), || {
        format!("up said:\n{}", up.stdout)
    })?;
    let after = lab.run(&["up"]).ok()?;
    check(after.stdout.contains("was already up"), || {
        format!("up said:\n{}", after.stdout)
    })?;
    for node in NODES {
        check(marked_lines(lab, node)? == NODES.len(), || {
            format!("{node}: not exactly one set of marked /etc/hosts lines after two more `up`s")
        })?;
    }
    let hosts = lab.run(&["exec", "server", "--", "cat /etc/hosts"]).ok()?;
    let cleanup = lab.run(&["exec", "server", "--", "sed -i '/^10\\.99\\.0\\./d' /etc/hosts"]);
    check(
        hosts.stdout.contains("10.99.0.9 bystander # labctl:other\n")
            && hosts.stdout.contains("10.99.0.8 unmarked\n")
            && !hosts.stdout.contains("stale"),
        || format!("/etc/hosts after up:\n{}", hosts.stdout),
    )?;
    cleanup.ok()?;
    let env = lab
        .run(&["exec", "server", "--", ". /etc/labctl/lab.env && echo \"$LABCTL_NODE\""])
        .ok()?;
    check(env.stdout.trim() == "server", || {
        format!("lab.env not rewritten: {}{}", env.stdout, env.stderr)
    })
}
