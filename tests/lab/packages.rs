//! A lab's `packages:` and `node_ssh:` (issue 13 part 5, and part 3's
//! node_ssh) on a scratch lab of their own (`tests/labs/mpi.yaml`): the
//! package is baked into an image of its own, and `mpirun` launches across
//! both nodes over SSH by the hostfile alone.

use std::time::Instant;

use libtest_mimic::{Failed, Trial};

use crate::util::{check, processes_mentioning, Labctl};

pub fn trials(lab: &Labctl) -> Vec<Trial> {
    let lab = lab.clone();
    vec![Trial::test(
        "test_packages_and_node_ssh_run_mpirun_across_the_lab",
        move || {
            let result = test_packages_and_node_ssh_run_mpirun_across_the_lab(&lab);
            // Whatever happened, the scratch lab goes.
            let down = lab.run(&["down"]);
            result?;
            check(down.code == 0, || format!("down: {}", down.stderr))?;
            let dir = lab.state_dir("mpi");
            check(!dir.exists(), || format!("{} was left behind", dir.display()))?;
            let left = processes_mentioning(&dir.display().to_string());
            check(left.is_empty(), || format!("processes left behind: {left:?}"))
        },
    )]
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
        .run(&["exec", "server", "--", "dpkg-query -W -f='${Version}' openmpi-bin"])
        .ok()?;
    check(!version.stdout.trim().is_empty(), || {
        "openmpi-bin has no version".into()
    })?;

    // Nodes reach each other by name and by data address, with no prompt
    // (BatchMode fails instead of asking) and no host key check turned off.
    for (from, to) in [("client", "server"), ("server", "client")] {
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
            "server",
            "--",
            "mpirun --allow-run-as-root --hostfile /etc/labctl/hostfile -np 2 hostname",
        ])
        .ok()?;
    let mut hosts: Vec<&str> = mpirun.stdout.lines().map(str::trim).collect();
    hosts.sort_unstable();
    check(hosts == ["client", "server"], || {
        format!("mpirun printed:\n{}\n{}", mpirun.stdout, mpirun.stderr)
    })?;
    eprintln!("  mpirun -np 2 hostname took {:.1} s", started.elapsed().as_secs_f64());

    // A second up replaces the marked lines instead of adding to them.
    lab.run(&["up"]).ok()?;
    for node in ["server", "client"] {
        let keys = marked_lines(lab, node, "authorized_keys")?;
        let hosts = marked_lines(lab, node, "known_hosts")?;
        check(keys == 1 && hosts == 2, || {
            format!("{node}: {keys} marked authorized_keys lines (want 1), {hosts} known_hosts lines (want 2)")
        })?;
    }
    // The controller's own key is still authorized (status reaches the nodes).
    lab.run(&["status"]).ok()?;
    Ok(())
}
