//! A lab's `packages:` and `node_ssh:` on the suite's quad lab
//! (`tests/labs/mpi.yaml`): the package is baked into an image of its own,
//! and `mpirun` launches across the four nodes over SSH by the hostfile
//! alone. The collectives' tests run on the same lab after these; the last
//! trial tears it down.

use std::time::Instant;

use libtest_mimic::{Failed, Trial};

use crate::util::{check, processes_mentioning, Labctl};

/// The quad lab's nodes.
pub const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];

pub fn trials(lab: &Labctl) -> Vec<Trial> {
    let lab = lab.clone();
    vec![crate::timing::trial(
        "test_quad_packages_and_node_ssh_run_mpirun_across_the_lab",
        move || test_packages_and_node_ssh_run_mpirun_across_the_lab(&lab),
    )]
}

/// Brings the quad lab up unless it is (a test run alone, by its name,
/// finds it down).
pub fn ensure_up(lab: &Labctl) -> Result<(), Failed> {
    if !lab.state_dir("mpi").join("state.json").exists() {
        lab.run(&["up"]).ok()?;
    }
    Ok(())
}

/// Tears the quad lab down, whatever its tests did, and checks nothing is left.
pub fn teardown_trial(lab: &Labctl) -> Trial {
    let lab = lab.clone();
    crate::timing::trial("test_quad_lab_down_leaves_nothing", move || {
        let down = lab.run(&["down"]);
        check(down.code == 0, || format!("down: {}", down.stderr))?;
        let dir = lab.state_dir("mpi");
        check(!dir.exists(), || format!("{} was left behind", dir.display()))?;
        let left = processes_mentioning(&dir.display().to_string());
        check(left.is_empty(), || format!("processes left behind: {left:?}"))
    })
}

/// The lab's marked lines in a file of root's home on `node`.
fn marked_lines(lab: &Labctl, node: &str, file: &str) -> Result<usize, Failed> {
    let out = lab
        .run(&[
            "exec",
            node,
            "--",
            &format!("grep -c ' # labctl:mpi$' ~/.ssh/{file} || true"),
        ])
        .ok()?;
    Ok(out.stdout.trim().parse()?)
}

fn test_packages_and_node_ssh_run_mpirun_across_the_lab(lab: &Labctl) -> Result<(), Failed> {
    let started = Instant::now();
    let up = lab.command().arg("up").output()?;
    let up_stderr = String::from_utf8_lossy(&up.stderr).into_owned();
    check(up.status.success(), || format!("up failed:\n{up_stderr}"))?;
    eprintln!(
        "  mpi lab up in {:.0} s (an image build included when the cache had none)",
        started.elapsed().as_secs_f64()
    );

    // The package is there (baked: up only checked it), and so is its mpirun.
    let version = lab
        .run(&["exec", "n1", "--", "dpkg-query -W -f='${Version}' openmpi-bin"])
        .ok()?;
    check(!version.stdout.trim().is_empty(), || {
        "openmpi-bin has no version".into()
    })?;

    // Nodes reach each other by name and by data address, with no prompt
    // (BatchMode fails instead of asking) and no host key check turned off.
    for (from, to) in [("n4", "n1"), ("n1", "n2"), ("n2", "n4")] {
        for target in [to.to_string(), format!("{{{to}.addr}}")] {
            let out = lab
                .run(&[
                    "exec",
                    from,
                    "--",
                    &format!("ssh -o BatchMode=yes -o StrictHostKeyChecking=yes {target} hostname"),
                ])
                .ok()?;
            check(out.stdout.trim() == to, || {
                format!("ssh from {from} to {target} printed {:?}", out.stdout)
            })?;
        }
    }

    // The point of it all: mpirun places one rank per node from the hostfile.
    let started = Instant::now();
    let mpirun = lab
        .run(&[
            "exec",
            "n1",
            "--",
            "mpirun --allow-run-as-root --hostfile /etc/labctl/hostfile -np 4 hostname",
        ])
        .ok()?;
    let mut hosts: Vec<&str> = mpirun.stdout.lines().map(str::trim).collect();
    hosts.sort_unstable();
    check(hosts == NODES, || {
        format!("mpirun printed:\n{}\n{}", mpirun.stdout, mpirun.stderr)
    })?;
    eprintln!("  mpirun -np 4 hostname took {:.1} s", started.elapsed().as_secs_f64());

    // A second up replaces the marked lines instead of adding to them.
    lab.run(&["up"]).ok()?;
    for node in NODES {
        let keys = marked_lines(lab, node, "authorized_keys")?;
        let hosts = marked_lines(lab, node, "known_hosts")?;
        check(keys == 1 && hosts == 4, || {
            format!("{node}: {keys} marked authorized_keys lines (want 1), {hosts} known_hosts lines (want 4)")
        })?;
    }
    // The controller's own key is still authorized (status reaches the nodes).
    lab.run(&["status"]).ok()?;
    Ok(())
}
