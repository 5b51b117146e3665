//! `labctl bench --suite collectives`: our collectives against Open MPI's
//! on every node of the lab, one rank per node on both sides.
//!
//! Open MPI's side is `provisioning/bench/mpi_collectives.c`, which fills
//! and checks the same elements as the agents and times an operation the
//! same way (the slowest rank's mean). It is built once per bench with
//! `mpicc` on the lab's first node, copied to the others over the lab's
//! own node-to-node SSH (`node_ssh:`), and run by `mpirun` over the lab's
//! hostfile. Ours runs through [`run_collective`], as `labctl run` does.
//!
//! Per collective and size the two alternate in the order of
//! [`super::schedule`]; both sides' busbw comes from
//! [`CollectiveFigures::of`] (nccl-tests' definitions, the catalogue's bus
//! factor). A single-pair write-bw on the same link, run once, is the
//! ceiling a busbw is read against.
//!
//! A lab without Open MPI, its compiler or node-to-node SSH is refused
//! before anything runs, with the labs.yaml lines that give them.

use std::time::{Duration, Instant};

use lab_remote::command::RemoteCommand;
use lab_results::bench::{
    BenchRecord, CeilingRecord, CollectiveFigures, CollectivesRecord, Failures, Metric, PairRecord, PairSpec, Sample,
    SideStats, Suite, BENCH_SCHEMA,
};
use lab_state::text::last_lines;
use lab_state::{now_rfc3339, LabState};
use workload_catalogue::Collective;

use super::options::{BenchError, BenchOptions, MpiTransport};
use super::parse::parse_mpi_collectives;
use super::reference::{node_data_path, DataPath};
use super::{agent_rss, run_ours, schedule, suite, uptime_s, BenchEvent, PairRounds, Side};
use crate::collective::{run_collective, CollectiveOptions};
use crate::facts::HOSTFILE_PATH;
use crate::lab::Lab;
use crate::run::default_params;

/// Open MPI's side, built on the nodes at every bench.
const MPI_PROGRAM: &str = include_str!("../../../../provisioning/bench/mpi_collectives.c");

/// Where the program is built and run on every node.
const MPI_DIR: &str = "/tmp/labctl-mpi-collectives";

/// Our collectives that Open MPI has, with the MPI call the program times.
/// (incast has no MPI counterpart.)
pub const WITH_MPI: [(&str, &str); 6] = [
    ("allreduce", "MPI_Allreduce"),
    ("allgather", "MPI_Allgather"),
    ("reduce-scatter", "MPI_Reduce_scatter_block"),
    ("reduce", "MPI_Reduce"),
    ("alltoall", "MPI_Alltoall"),
    ("broadcast", "MPI_Bcast"),
];

/// The sizes by default: one latency point and two bandwidth points.
pub const DEFAULT_COLLECTIVE_SIZES: [u64; 3] = [8, 64 << 10, 1 << 20];

/// Untimed operations at the start of every run, both sides.
pub const WARMUP_OPS: u32 = 2;

/// What the nodes need for Open MPI's side: each program and its package.
pub const MPI_PROGRAMS: [(&str, &str); 3] = [("mpirun", "openmpi-bin"), ("mpicc", "libopenmpi-dev"), ("gcc", "gcc")];

/// The memory a node with those packages needs: the image with a compiler
/// and Open MPI's headers did not boot in 1280 MiB under QEMU.
pub const MPI_NODE_MEMORY: &str = "2048MiB";

/// Timed operations at `size`: enough for a stable mean at small sizes,
/// few at large ones (an emulated link moves a few MB/s).
fn iterations_at(size: u64) -> u64 {
    match size {
        s if s >= 1 << 20 => 5,
        s if s >= 64 << 10 => 10,
        _ => 20,
    }
}

/// `size` as both sides run it: whole float32 elements, and for the
/// collectives that split the buffer into one block per rank
/// (`MPI_Allgather`, `MPI_Reduce_scatter_block`, `MPI_Alltoall` need equal
/// blocks) a multiple of the ranks, at least one element each.
pub fn size_for(op: Collective, size: u64, world: u32) -> u64 {
    let elements = (size / 4).max(1);
    let world = u64::from(world.max(1));
    match op {
        Collective::Allgather | Collective::ReduceScatter | Collective::Alltoall => {
            (elements / world).max(1) * world * 4
        }
        _ => elements * 4,
    }
}

/// The suite's pairs on `world` ranks: each collective of `only` (all of
/// [`WITH_MPI`] when empty) at each size. Targets (issue 34): allreduce and
/// alltoall busbw at 1 MiB and more at least Open MPI's; allreduce at 8 B
/// or less no slower (at one size busbw is size × factor / time, so busbw
/// ≥ 1.0× is time ≤ 1.0×).
pub fn collective_pairs(only: &[String], sizes: &[u64], world: u32) -> Result<Vec<PairSpec>, BenchError> {
    if let Some(unknown) = only.iter().find(|w| !WITH_MPI.iter().any(|(ours, _)| ours == w)) {
        let names: Vec<&str> = WITH_MPI.iter().map(|(ours, _)| *ours).collect();
        return Err(BenchError::Setup(format!(
            "`{unknown}` has no Open MPI counterpart in the collectives suite; these have: {}",
            names.join(", ")
        )));
    }
    let mut pairs: Vec<PairSpec> = Vec::new();
    for (workload, mpi) in WITH_MPI
        .iter()
        .filter(|(w, _)| only.is_empty() || only.iter().any(|o| o == w))
    {
        let op = collective_of(workload);
        for &asked in sizes {
            let size = size_for(op, asked, world);
            if pairs.iter().any(|p| p.workload == *workload && p.size == size) {
                continue;
            }
            let target = match op {
                Collective::Allreduce | Collective::Alltoall if size >= 1 << 20 => Some(1.0),
                Collective::Allreduce if size <= 8 => Some(1.0),
                _ => None,
            };
            pairs.push(PairSpec {
                workload: workload.to_string(),
                tool: mpi.to_string(),
                size,
                iterations: iterations_at(size),
                depth: None,
                metric: Metric::BusbwGbS,
                target,
                provider: None,
                qps: 1,
                sweep_point: false,
            });
        }
    }
    Ok(pairs)
}

fn collective_of(workload: &str) -> Collective {
    workload_catalogue::find(workload)
        .and_then(|w| w.shape.collective())
        .expect("WITH_MPI names collectives of the catalogue")
}

/// Why the lab cannot run Open MPI's side, with the labs.yaml lines that
/// fix it; None when nothing is missing. `missing`: per node, the programs
/// it lacks.
pub fn mpi_refusal(lab: &str, node_ssh: bool, missing: &[(String, Vec<String>)]) -> Option<String> {
    let missing: Vec<&(String, Vec<String>)> = missing.iter().filter(|(_, m)| !m.is_empty()).collect();
    if node_ssh && missing.is_empty() {
        return None;
    }
    let mut why = Vec::new();
    for (node, programs) in &missing {
        let packages: Vec<String> = programs
            .iter()
            .map(|p| {
                let package = MPI_PROGRAMS
                    .iter()
                    .find(|(prog, _)| prog == p)
                    .map_or("?", |(_, pkg)| pkg);
                format!("{p} (package {package})")
            })
            .collect();
        why.push(format!("node `{node}` has no {}", packages.join(", ")));
    }
    if !node_ssh {
        why.push("the nodes cannot ssh each other (mpirun starts its ranks over SSH)".into());
    }
    let packages: Vec<&str> = MPI_PROGRAMS.iter().map(|(_, pkg)| *pkg).collect();
    Some(format!(
        "the collectives suite runs Open MPI on every node of lab `{lab}`, but {}.\n\
         Give the lab these lines in labs.yaml, then `labctl down` and `labctl up` \
         (the packages are baked into the node image; it needs {MPI_NODE_MEMORY} per node to boot):\n\
         \n  - name: {lab}\n    packages: [{}]\n    node_ssh: true\n    defaults:\n      memory: {MPI_NODE_MEMORY}\n",
        why.join("; "),
        packages.join(", ")
    ))
}

/// The programs of [`MPI_PROGRAMS`] each node lacks.
async fn missing_programs(lab: &Lab, nodes: &[String]) -> Result<Vec<(String, Vec<String>)>, BenchError> {
    let programs: Vec<&str> = MPI_PROGRAMS.iter().map(|(p, _)| *p).collect();
    futures::future::try_join_all(nodes.iter().map(|node| {
        let cmd = RemoteCommand::script_with(
            "for p in \"$@\"; do command -v \"$p\" >/dev/null 2>&1 || echo \"$p\"; done",
            programs.iter(),
        );
        async move {
            let mut out = Vec::new();
            lab.exec(node, &cmd, |stderr, d| {
                if !stderr {
                    out.extend_from_slice(d)
                }
            })
            .await?;
            let lacks = String::from_utf8_lossy(&out)
                .split_whitespace()
                .map(String::from)
                .collect();
            Ok::<_, BenchError>((node.clone(), lacks))
        }
    }))
    .await
}

/// Open MPI's transport as mpirun is told it: the MCA words, and in words.
fn transport_args(transport: MpiTransport, data: &DataPath) -> (Vec<String>, String) {
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    match transport {
        MpiTransport::Tcp => (
            words(&[
                "--mca",
                "pml",
                "ob1",
                "--mca",
                "btl",
                "tcp,self",
                "--mca",
                "btl_tcp_if_include",
                &data.netdev,
            ]),
            format!(
                "TCP: the ob1 PML with the tcp BTL on {} (the kernel's TCP over the data link)",
                data.netdev
            ),
        ),
        MpiTransport::Ucx => {
            let device = format!("{}:{}", data.device, data.ib_port);
            (
                words(&["--mca", "pml", "ucx", "-x", &format!("UCX_NET_DEVICES={device}")]),
                format!("UCX over the RDMA device {device} (the ucx PML)"),
            )
        }
    }
}

/// The mpirun words up to the program: one rank per node of the hostfile.
fn mpirun_words(world: u32, transport: &[String]) -> Vec<String> {
    let mut words: Vec<String> = [
        "mpirun",
        "--allow-run-as-root",
        "--hostfile",
        HOSTFILE_PATH,
        "-np",
        &world.to_string(),
        "--map-by",
        "node",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    words.extend(transport.iter().cloned());
    words
}

/// The program's arguments for one run of `spec`.
fn program_args(spec: &PairSpec, seed: u64) -> Vec<String> {
    vec![
        format!("{MPI_DIR}/mpi_collectives"),
        spec.workload.clone(),
        spec.size.to_string(),
        spec.iterations.to_string(),
        WARMUP_OPS.to_string(),
        seed.to_string(),
    ]
}

/// Builds the program on `first` and copies it to the others' data
/// addresses over the lab's node-to-node SSH.
async fn build(lab: &Lab, state: &LabState, first: &str, others: &[String]) -> Result<String, BenchError> {
    const SCRIPT: &str = "set -e; d=$1; shift; mkdir -p \"$d\"; cat > \"$d/mpi_collectives.c\"; \
        mpicc -O2 -o \"$d/mpi_collectives\" \"$d/mpi_collectives.c\"; \
        for a in \"$@\"; do ssh -o BatchMode=yes \"$a\" mkdir -p \"$d\"; \
        scp -q -o BatchMode=yes \"$d/mpi_collectives\" \"$a:$d/mpi_collectives\"; done";
    let addrs: Vec<String> = others
        .iter()
        .map(|n| lab.node_state(state, n).map(|s| s.data_addr.to_string()))
        .collect::<Result<_, _>>()?;
    let cmd = RemoteCommand::script_with(
        SCRIPT,
        std::iter::once(MPI_DIR.to_string()).chain(addrs.iter().cloned()),
    );
    let session = lab.connect(state, first).await?;
    let mut out = Vec::new();
    let status = session
        .exec_streaming(&cmd, Some(MPI_PROGRAM.as_bytes()), |_, d| out.extend_from_slice(d))
        .await
        .map_err(|e| BenchError::Setup(e.to_string()));
    session.close().await;
    if status? != 0 {
        return Err(BenchError::Setup(format!(
            "building mpi_collectives on `{first}` and copying it to {} failed:\n{}",
            addrs.join(", "),
            last_lines(&String::from_utf8_lossy(&out), 15)
        )));
    }
    Ok(format!(
        "mpicc -O2 on `{first}`, copied to {} with scp over the lab's node SSH, in {MPI_DIR}",
        others.join(", ")
    ))
}

/// One round of Open MPI's side, run by mpirun on the first node.
async fn run_mpi(lab: &Lab, first: &str, mpirun: &[String], spec: &PairSpec, seed: u64, timeout: Duration) -> Sample {
    let mut sample = Sample::default();
    let timeout_s = timeout.as_secs().max(10);
    let cmd = RemoteCommand::script_with(
        "t=$1; shift; timeout \"$t\" \"$@\"",
        std::iter::once(timeout_s.to_string())
            .chain(mpirun.iter().cloned())
            .chain(program_args(spec, seed)),
    );
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let status = lab
        .exec(first, &cmd, |is_stderr, d| {
            if is_stderr {
                stderr.extend_from_slice(d)
            } else {
                stdout.extend_from_slice(d)
            }
        })
        .await;
    let (stdout, stderr) = (String::from_utf8_lossy(&stdout), String::from_utf8_lossy(&stderr));
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            sample.error = Some(format!("mpirun on `{first}`: {e}"));
            return sample;
        }
    };
    match parse_mpi_collectives(&stdout) {
        Ok(figures) if figures.size != spec.size || figures.iterations != spec.iterations => {
            sample.error = Some(format!(
                "mpi_collectives ran {} B x {} where {} B x {} was asked",
                figures.size, figures.iterations, spec.size, spec.iterations
            ));
        }
        Ok(figures) => {
            sample.value = Some(figures.busbw_gb_s);
            sample.verified = Some(figures.verified());
            if !figures.verified() {
                sample.error = Some(format!(
                    "Open MPI's result did not verify: {} of {} elements wrong",
                    figures.wrong, figures.checked
                ));
            }
            sample.collective = Some(figures);
        }
        Err(_) if status == 124 => {
            sample.error = Some(format!("mpirun did not finish within {timeout_s} s (killed)"));
        }
        Err(e) => {
            sample.error = Some(format!(
                "mpirun exited with status {status}: {e}\n{}",
                last_lines(&stderr, 10)
            ));
        }
    }
    sample
}

/// One round of ours, through the controller `labctl run` uses.
async fn run_ours_collective(
    lab: &Lab,
    nodes: &[String],
    spec: &PairSpec,
    seed: u64,
    timeout: Duration,
) -> (Sample, String) {
    let op = collective_of(&spec.workload);
    let mut params = default_params(&spec.workload);
    params.size = spec.size;
    params.iterations = spec.iterations;
    params.seed = seed;
    let described = format!(
        "{} size {} iterations {} warmup {WARMUP_OPS} seed {seed} on {} ranks ({}), {}",
        spec.workload,
        spec.size,
        spec.iterations,
        nodes.len(),
        nodes.join(" "),
        op.algorithm()
    );
    let opts = CollectiveOptions {
        params,
        nodes: nodes.to_vec(),
        ranks_per_node: 1,
        root: None,
        warmup: WARMUP_OPS,
        timeout,
    };
    let mut sample = Sample::default();
    match run_collective(lab, &opts, |_, _| {}).await {
        Ok(record) => match record.points.first() {
            Some(p) => {
                let figures = CollectiveFigures {
                    checked: p.checked,
                    wrong: p.wrong,
                    ..CollectiveFigures::of(op, record.world, p.size, p.iterations, p.time_us)
                };
                sample.value = Some(figures.busbw_gb_s);
                sample.collective = Some(figures);
                sample.verified = Some(record.verified);
                sample.run_id = Some(record.id.clone());
                if !record.verified {
                    sample.error = Some(format!("not verified: {}", record.verify_detail));
                }
            }
            None => sample.error = Some(format!("run {} measured no size", record.id)),
        },
        Err(e) => sample.error = Some(e.to_string()),
    }
    (sample, described)
}

/// Runs the collectives suite on every node of the lab and saves its
/// record (`run_bench` runs the pair suites).
pub async fn run_collectives_bench(
    lab: &Lab,
    opts: &BenchOptions,
    mut on_event: impl FnMut(BenchEvent<'_>),
) -> Result<BenchRecord, BenchError> {
    let state = lab.state()?;
    let nodes: Vec<String> = state.nodes.iter().map(|n| n.name.clone()).collect();
    let world = nodes.len() as u32;
    if world < 2 {
        return Err(BenchError::Setup(format!(
            "the collectives suite needs at least 2 nodes; lab `{}` has {world}",
            lab.spec.name
        )));
    }
    let sizes = if opts.sweep_sizes.is_empty() {
        DEFAULT_COLLECTIVE_SIZES.to_vec()
    } else {
        opts.sweep_sizes.clone()
    };
    let mut specs = collective_pairs(&opts.only, &sizes, world)?;
    if let Some(n) = opts.iterations {
        specs.iter_mut().for_each(|s| s.iterations = n.max(1));
    }
    for node in [&opts.server, &opts.client] {
        lab.node_state(&state, node)?;
    }
    // Nothing runs on a lab that cannot run both sides.
    let missing = missing_programs(lab, &nodes).await?;
    if let Some(why) = mpi_refusal(&lab.spec.name, lab.spec.node_ssh, &missing) {
        return Err(BenchError::Setup(why));
    }

    let started_at = now_rfc3339();
    let started = Instant::now();
    let first = &nodes[0];
    let (paths, client_uptime_s) = futures::join!(
        async {
            futures::try_join!(
                node_data_path(lab, &state, first),
                node_data_path(lab, &state, &opts.server),
                node_data_path(lab, &state, &opts.client)
            )
        },
        uptime_s(lab, &opts.client)
    );
    let (first_dev, server_dev, client_dev) = paths?;
    let mut version = Vec::new();
    lab.exec(first, &RemoteCommand::script("mpirun --version 2>&1"), |_, d| {
        version.extend_from_slice(d)
    })
    .await?;
    let mpi_version = String::from_utf8_lossy(&version)
        .lines()
        .next()
        .unwrap_or("unknown")
        .trim()
        .to_string();
    on_event(BenchEvent::Step {
        what: "building mpi_collectives on the first node, copying it to the others",
    });
    let built = Instant::now();
    let build_words = build(lab, &state, first, &nodes[1..]).await?;
    let build_s = built.elapsed().as_secs_f64();
    let (transport_words, transport_detail) = transport_args(opts.mpi_transport, &first_dev);
    let mpirun = mpirun_words(world, &transport_words);
    let seed = default_params("allreduce").seed;

    let mut idle_rss = Vec::new();
    for node in &nodes {
        idle_rss.push(agent_rss(lab, &state, node, "before the runs").await?);
    }
    let mut pairs = Vec::new();
    for spec in specs {
        let label = spec.label();
        let mut rounds = PairRounds::new(started);
        let mut ours_cmd = String::new();
        for (position, slot) in (0u32..).zip(schedule(opts.warmup, opts.rounds.max(1))) {
            let tool = rounds.announce(&label, &spec, slot, &mut on_event);
            let sample = match slot.side {
                Side::Reference => run_mpi(lab, first, &mpirun, &spec, seed, opts.timeout).await,
                Side::Ours => {
                    let (sample, described) = run_ours_collective(lab, &nodes, &spec, seed, opts.timeout).await;
                    ours_cmd = described;
                    sample
                }
            };
            rounds.file(slot, position, tool, sample, &mut on_event);
        }
        let mut command = mpirun.clone();
        command.extend(program_args(&spec, seed));
        let reference = SideStats::of(&spec.tool, command.join(" "), rounds.reference);
        let ours = SideStats::of(&spec.workload, ours_cmd, rounds.ours);
        pairs.push(PairRecord::new(spec, reference, ours));
    }

    // The link's ceiling, once the lab is warm: the quick suite's write-bw pair.
    let ceiling_spec = suite(Suite::Quick)
        .into_iter()
        .find(|p| p.workload == "write-bw" && p.qps == 1)
        .expect("the quick suite has write-bw");
    on_event(BenchEvent::Start {
        pair: "link ceiling",
        tool: &ceiling_spec.workload,
        round: 0,
        warmup: false,
    });
    let (ceiling_sample, ceiling_cmd) = run_ours(lab, opts, &ceiling_spec, 0).await;
    on_event(BenchEvent::Done {
        tool: &ceiling_spec.workload,
        sample: &ceiling_sample,
    });
    let ceiling = CeilingRecord::new(
        format!("{ceiling_cmd}, {} -> {}", opts.client, opts.server),
        ceiling_sample,
    );

    for node in &nodes {
        idle_rss.push(agent_rss(lab, &state, node, "after the runs").await?);
    }
    let expectations = super::measure_expectations(lab, opts, &opts.server, &opts.client, &mut on_event).await;
    let mut record = BenchRecord {
        schema: BENCH_SCHEMA,
        id: format!("{:016x}", rand::random::<u64>()),
        lab: lab.spec.name.clone(),
        suite: Suite::Collectives,
        rounds: opts.rounds.max(1),
        warmup_rounds: opts.warmup,
        order: "abba".into(),
        server: opts.server.clone(),
        client: opts.client.clone(),
        perftest_version: String::new(),
        perftest_device: [
            (server_dev.device.clone(), server_dev.gid_index),
            (client_dev.device.clone(), client_dev.gid_index),
        ],
        started_at,
        client_uptime_s,
        duration_s: started.elapsed().as_secs_f64(),
        failures: Failures::of(&pairs),
        pairs,
        agent_rss: idle_rss,
        orchestration: None,
        collectives: Some(CollectivesRecord {
            nodes,
            world,
            warmup_ops: WARMUP_OPS,
            seed,
            mpi_version,
            mpi_transport: opts.mpi_transport.label().to_string(),
            mpi_transport_detail: transport_detail,
            mpirun: mpirun.join(" "),
            build: build_words,
            build_s,
            ceiling: Some(ceiling),
        }),
        saved_to: None,
        expectations,
    };
    record.saved_to = Some(super::save(lab, &record)?.display().to_string());
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_sizes_are_whole_elements_and_equal_blocks_where_mpi_needs_them() {
        assert_eq!(size_for(Collective::Allreduce, 8, 4), 8);
        assert_eq!(size_for(Collective::Broadcast, 10, 4), 8);
        assert_eq!(size_for(Collective::Allreduce, 1, 4), 4);
        // One element per rank at least; 8 B on 4 ranks is half an element each.
        assert_eq!(size_for(Collective::Alltoall, 8, 4), 16);
        assert_eq!(size_for(Collective::Allgather, 1 << 20, 4), 1 << 20);
        // 1 MiB on 3 ranks: 87381 elements each.
        assert_eq!(size_for(Collective::ReduceScatter, 1 << 20, 3), 87381 * 3 * 4);
    }

    #[test]
    fn test_pairs_cover_every_collective_with_mpi_and_targets_follow_the_issue() {
        let pairs = collective_pairs(&[], &DEFAULT_COLLECTIVE_SIZES, 4).unwrap();
        assert_eq!(pairs.len(), 18);
        assert!(pairs.iter().all(|p| p.metric == Metric::BusbwGbS));
        let target = |w: &str, size: u64| {
            pairs
                .iter()
                .find(|p| p.workload == w && p.size == size)
                .map(|p| p.target)
                .unwrap()
        };
        assert_eq!(target("allreduce", 1 << 20), Some(1.0));
        assert_eq!(target("alltoall", 1 << 20), Some(1.0));
        assert_eq!(target("allreduce", 8), Some(1.0));
        assert_eq!(target("allgather", 1 << 20), None);
        assert_eq!(target("alltoall", 16), None);
        let labels: Vec<String> = pairs.iter().take(3).map(PairSpec::label).collect();
        assert_eq!(labels, ["allreduce 8B", "allreduce 64KiB", "allreduce 1MiB"]);
        assert_eq!(
            pairs.iter().find(|p| p.workload == "reduce-scatter").unwrap().tool,
            "MPI_Reduce_scatter_block"
        );
        assert_eq!(
            pairs.iter().find(|p| p.workload == "reduce").unwrap().tool,
            "MPI_Reduce"
        );
        // Sizes that round to one are one pair.
        let two = collective_pairs(&["alltoall".into()], &[4, 8, 16], 4).unwrap();
        assert_eq!(two.iter().map(|p| p.size).collect::<Vec<_>>(), [16]);
        let err = collective_pairs(&["incast".into()], &[8], 4).unwrap_err().to_string();
        assert!(err.contains("`incast` has no Open MPI counterpart"), "{err}");
    }

    #[test]
    fn test_a_lab_without_open_mpi_is_refused_with_the_lines_that_fix_it() {
        assert_eq!(mpi_refusal("mpi", true, &[("n1".into(), vec![])]), None);
        let why = mpi_refusal(
            "quad",
            false,
            &[("n1".into(), vec!["mpicc".into(), "gcc".into()]), ("n2".into(), vec![])],
        )
        .unwrap();
        assert!(
            why.contains("node `n1` has no mpicc (package libopenmpi-dev), gcc (package gcc)"),
            "{why}"
        );
        assert!(!why.contains("`n2`"), "{why}");
        assert!(why.contains("cannot ssh each other"), "{why}");
        assert!(why.contains("packages: [openmpi-bin, libopenmpi-dev, gcc]"), "{why}");
        assert!(why.contains("node_ssh: true"), "{why}");
        assert!(why.contains("memory: 2048MiB"), "{why}");
        // The lines are YAML a lab takes.
        let yaml = why.split_once("boot):\n").unwrap().1;
        let parsed: serde_yaml_ng::Value = serde_yaml_ng::from_str(yaml).unwrap();
        assert_eq!(parsed[0]["defaults"]["memory"].as_str(), Some("2048MiB"));
    }

    #[test]
    fn test_mpirun_runs_one_rank_per_node_of_the_hostfile_over_the_chosen_transport() {
        let data = DataPath {
            device: "rxe0".into(),
            ib_port: 1,
            gid_index: 1,
            perftest_gid: Some(1),
            addr: "10.77.0.1".parse().unwrap(),
            netdev: "eth1".into(),
        };
        let (tcp, words) = transport_args(MpiTransport::Tcp, &data);
        assert_eq!(
            tcp.join(" "),
            "--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include eth1"
        );
        assert!(words.starts_with("TCP"));
        let (ucx, _) = transport_args(MpiTransport::Ucx, &data);
        assert_eq!(ucx.join(" "), "--mca pml ucx -x UCX_NET_DEVICES=rxe0:1");
        let line = mpirun_words(4, &tcp).join(" ");
        assert!(line.starts_with(
            "mpirun --allow-run-as-root --hostfile /etc/labctl/hostfile -np 4 --map-by node --mca pml ob1"
        ));
        let spec = &collective_pairs(&["broadcast".into()], &[1 << 20], 4).unwrap()[0];
        assert_eq!(
            program_args(spec, 7).join(" "),
            "/tmp/labctl-mpi-collectives/mpi_collectives broadcast 1048576 5 2 7"
        );
    }
}
