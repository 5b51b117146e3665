//! `labctl bench --orchestration`: how long `up` and `down` take.
//!
//! Each node count gets a scratch lab of its own: the current lab's provider,
//! fabric, image and node sizes with `node1..nodeN`, named `<lab>-orch<N>`,
//! written to a labs.yaml under a private directory beside the lab's state
//! (`<state base>/.orch-<random>/`, which also holds its state). `up` and
//! `down` run as `labctl` processes, so the time is what a user waits for.
//! `up` runs with the image cache as it is (warm), and with `cold` also with
//! `LABCTL_CACHE_DIR` pointing at an empty directory, which makes `up` build
//! the node image from scratch. The scratch labs are always torn down and
//! their directory removed, also when the bench fails or is dropped
//! (Ctrl-C): [`Scratch`]'s `Drop` runs `labctl down`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use lab_results::bench::{BenchRecord, OrchestrationRecord, PhaseTiming, Stats, StepTiming, Suite, BENCH_SCHEMA};
use serde::Serialize;

use super::{save, BenchError};
use crate::lab::Lab;
use lab_model::{LabSpec, NodeSpec, ProviderKind};
use lab_state::now_rfc3339;
use lab_state::progress::{phases, PhaseTime, StepTime};
use lab_state::text::last_lines;
use lab_state::LabDir;

/// What to time.
#[derive(Debug, Clone)]
pub struct OrchestrationOptions {
    /// The labctl binary to run `up` and `down` with.
    pub labctl: PathBuf,
    /// Node counts, one scratch lab each.
    pub nodes: Vec<usize>,
    /// Also time `up` with an empty image cache.
    pub cold: bool,
    /// Rounds per node count.
    pub rounds: u32,
    /// Give up on one `up` or `down` after this long.
    pub timeout: Duration,
}

/// Progress, for the command line.
#[derive(Debug, Clone)]
pub enum OrchestrationEvent<'a> {
    /// A step starts.
    Start {
        /// `up warm`, `up cold`, `down`.
        step: &'a str,
        /// Nodes.
        nodes: usize,
        /// Round (0-based).
        round: u32,
    },
    /// It ended: seconds, or why it failed.
    Done(&'a Result<f64, String>),
}

/// The scratch lab for `nodes` nodes: `base` with `node1..nodeN` (sized like
/// its first node) and no CI suite, named `<base>-orch<N>` within the
/// 31-character limit of lab names.
pub fn scratch_spec(base: &LabSpec, nodes: usize) -> LabSpec {
    let suffix = format!("-orch{nodes}");
    let stem = &base.name[..base.name.len().min(31 - suffix.len())];
    let mut spec = base.clone();
    spec.name = format!("{}{suffix}", stem.trim_end_matches('-'));
    spec.nodes = (1..=nodes)
        .map(|i| NodeSpec {
            name: format!("node{i}"),
            data_addr: None,
            ssh_port: None,
            ..base.nodes[0].clone()
        })
        .collect();
    spec.ci = None;
    spec
}

/// A scratch lab on disk; dropping it tears the lab down and removes it.
struct Scratch {
    labctl: PathBuf,
    dir: PathBuf,
    file: PathBuf,
    state: PathBuf,
}

impl Scratch {
    fn create(labctl: &Path, base_dir: &Path, spec: &LabSpec) -> Result<Scratch, BenchError> {
        let dir = base_dir.join(format!(".orch-{:016x}", rand::random::<u64>()));
        let file = dir.join("labs.yaml");
        #[derive(Serialize)]
        struct Doc<'a> {
            labs: [&'a LabSpec; 1],
        }
        let yaml = serde_yaml_ng::to_string(&Doc { labs: [spec] })
            .map_err(|e| BenchError::Setup(format!("writing the scratch lab `{}`: {e}", spec.name)))?;
        std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(&file, yaml))
            .map_err(|e| BenchError::Setup(format!("{}: {e}", file.display())))?;
        Ok(Scratch {
            labctl: labctl.to_path_buf(),
            state: dir.join("state"),
            dir,
            file,
        })
    }

    /// Runs `labctl VERB` on the scratch lab; returns its wall time.
    async fn time(&self, verb: &str, cache: Option<&Path>, timeout: Duration) -> Result<f64, String> {
        let mut cmd = tokio::process::Command::new(&self.labctl);
        cmd.arg("-f")
            .arg(&self.file)
            .arg(verb)
            .env("LABCTL_STATE_DIR", &self.state)
            .env_remove("LABCTL_LAB")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(cache) = cache {
            cmd.env("LABCTL_CACHE_DIR", cache);
        }
        let started = Instant::now();
        let out = tokio::time::timeout(timeout, cmd.output())
            .await
            .map_err(|_| format!("`labctl {verb}` took more than {} s; stopped", timeout.as_secs()))?
            .map_err(|e| format!("starting {}: {e}", self.labctl.display()))?;
        let seconds = started.elapsed().as_secs_f64();
        if !out.status.success() {
            return Err(format!(
                "`labctl -f {} {verb}` failed ({}):\n{}",
                self.file.display(),
                out.status,
                last_lines(&String::from_utf8_lossy(&out.stderr), 8)
            ));
        }
        Ok(seconds)
    }
}

impl Scratch {
    /// The phases the last `up` of lab `name` recorded (empty if it did not).
    fn up_timeline(&self, name: &str) -> Vec<StepTime> {
        std::fs::read(LabDir::at(&self.state.join(name), name).up_timings())
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }
}

/// Per phase, over the rounds' timelines of `nodes` nodes: the slowest
/// node's seconds and when the phase was done, in the order of the phases.
fn phase_timing(nodes: usize, timelines: &[Vec<StepTime>]) -> Vec<PhaseTiming> {
    let rounds: Vec<Vec<PhaseTime>> = timelines.iter().map(|t| phases(t)).collect();
    let mut names: Vec<String> = Vec::new();
    for round in &rounds {
        for p in round {
            if !names.contains(&p.step) {
                names.push(p.step.clone());
            }
        }
    }
    names
        .into_iter()
        .map(|name| {
            let of = |pick: fn(&PhaseTime) -> f64| {
                Stats::of(
                    rounds
                        .iter()
                        .map(|round| round.iter().find(|p| p.step == name).map(pick)),
                )
            };
            PhaseTiming {
                seconds: of(|p| p.slowest_s),
                ends_at: of(|p| p.ends_at_s),
                phase: name,
                nodes,
            }
        })
        .collect()
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Blocking on purpose: this also runs when the bench's future is
        // dropped (Ctrl-C), and the lab must be gone before labctl exits.
        let _ = std::process::Command::new(&self.labctl)
            .arg("-f")
            .arg(&self.file)
            .arg("down")
            .env("LABCTL_STATE_DIR", &self.state)
            .env_remove("LABCTL_LAB")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One timed `labctl` call with its progress events.
struct Step<'a, F> {
    scratch: &'a Scratch,
    nodes: usize,
    round: u32,
    timeout: Duration,
    on_event: &'a mut F,
}

impl<F: FnMut(OrchestrationEvent<'_>)> Step<'_, F> {
    async fn run(&mut self, step: &str, cache: Option<&Path>) -> Result<f64, String> {
        (self.on_event)(OrchestrationEvent::Start {
            step,
            nodes: self.nodes,
            round: self.round,
        });
        let verb = if step == "down" { "down" } else { "up" };
        let result = self.scratch.time(verb, cache, self.timeout).await;
        (self.on_event)(OrchestrationEvent::Done(&result));
        result
    }
}

fn timing(step: &str, nodes: usize, samples: Vec<Result<f64, String>>) -> StepTiming {
    StepTiming {
        step: step.to_string(),
        nodes,
        seconds: Stats::of(samples.iter().map(|s| s.as_ref().ok().copied())),
        errors: samples.iter().filter_map(|s| s.as_ref().err().cloned()).collect(),
        samples: samples.into_iter().map(Result::ok).collect(),
    }
}

/// Times `up` (warm, and cold when asked) and `down` of scratch labs like
/// `lab` with each node count; saves the record among `lab`'s results.
pub async fn run_orchestration(
    lab: &Lab,
    opts: &OrchestrationOptions,
    mut on_event: impl FnMut(OrchestrationEvent<'_>),
) -> Result<BenchRecord, BenchError> {
    if lab.spec.provider != ProviderKind::Qemu {
        return Err(BenchError::Setup(format!(
            "--orchestration times local QEMU labs; lab `{}` uses provider {} (each `up` there would create \
             new machines); run it on a qemu lab",
            lab.spec.name, lab.spec.provider
        )));
    }
    if let Some(n) = opts.nodes.iter().find(|n| !(1..=16).contains(*n)) {
        return Err(BenchError::Setup(format!("--nodes {n}: a lab has 1 to 16 nodes")));
    }
    let base_dir = lab
        .dir
        .root()
        .parent()
        .ok_or_else(|| BenchError::Setup(format!("state directory {} has no parent", lab.dir.root().display())))?
        .to_path_buf();
    let started_at = now_rfc3339();
    let started = Instant::now();
    let mut steps = Vec::new();
    let mut phase_timings = Vec::new();
    for &nodes in &opts.nodes {
        let spec = scratch_spec(&lab.spec, nodes);
        let scratch = Scratch::create(&opts.labctl, &base_dir, &spec)?;
        let (mut warm, mut cold, mut down) = (Vec::new(), Vec::new(), Vec::new());
        let mut timelines = Vec::new();
        for round in 0..opts.rounds.max(1) {
            let mut step = Step {
                scratch: &scratch,
                nodes,
                round,
                timeout: opts.timeout,
                on_event: &mut on_event,
            };
            let up = step.run("up warm", None).await;
            if up.is_ok() {
                timelines.push(scratch.up_timeline(&spec.name));
            }
            warm.push(up);
            down.push(step.run("down", None).await);
            if opts.cold {
                let cache = scratch.dir.join("empty-image-cache");
                cold.push(step.run("up cold", Some(&cache)).await);
                down.push(step.run("down", None).await);
                let _ = std::fs::remove_dir_all(&cache);
            }
        }
        steps.push(timing("up warm", nodes, warm));
        phase_timings.extend(phase_timing(nodes, &timelines));
        if opts.cold {
            steps.push(timing("up cold", nodes, cold));
        }
        steps.push(timing("down", nodes, down));
        drop(scratch);
    }
    let mut record = BenchRecord {
        schema: BENCH_SCHEMA,
        id: format!("{:016x}", rand::random::<u64>()),
        lab: lab.spec.name.clone(),
        suite: Suite::Orchestration,
        rounds: opts.rounds.max(1),
        warmup_rounds: 0,
        order: "abba".into(),
        server: String::new(),
        client: String::new(),
        perftest_version: String::new(),
        perftest_device: Default::default(),
        started_at,
        client_uptime_s: None,
        duration_s: started.elapsed().as_secs_f64(),
        pairs: Vec::new(),
        failures: Default::default(),
        agent_rss: Vec::new(),
        orchestration: Some(OrchestrationRecord {
            image_cache: lab_providers::image::cache_root().display().to_string(),
            steps,
            phases: phase_timings,
        }),
        collectives: None,
        saved_to: None,
        expectations: Vec::new(),
    };
    record.saved_to = Some(save(lab, &record)?.display().to_string());
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lab_model::LabsFile;

    #[test]
    fn test_scratch_lab_keeps_the_settings_and_parses_back() {
        let text = "labs:\n  - name: a-rather-long-lab-name-for-test\n    accel: tcg\n    nodes:\n      \
                    - name: server\n        cpus: 2\n        ssh_port: 2222\n      - name: client\n    \
                    ci:\n      workloads:\n        - workload: write-bw\n";
        let base = &LabsFile::parse(Path::new("labs.yaml"), text).unwrap().labs[0];
        let spec = scratch_spec(base, 4);
        assert_eq!(spec.name, "a-rather-long-lab-name-fo-orch4");
        assert!(spec.name.len() <= 31);
        let names: Vec<&str> = spec.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["node1", "node2", "node3", "node4"]);
        assert!(spec.nodes.iter().all(|n| n.cpus == Some(2) && n.ssh_port.is_none()));
        assert!(spec.ci.is_none());
        // What Scratch::create writes is a labs file labctl accepts, unchanged.
        #[derive(Serialize)]
        struct Doc<'a> {
            labs: [&'a LabSpec; 1],
        }
        let yaml = serde_yaml_ng::to_string(&Doc { labs: [&spec] }).unwrap();
        let back = LabsFile::parse(Path::new("scratch.yaml"), &yaml).unwrap();
        assert_eq!(back.labs[0], spec, "{yaml}");
    }

    #[test]
    fn test_timing_stats_skip_failed_rounds() {
        let t = timing("up warm", 2, vec![Ok(60.0), Err("boom".into()), Ok(70.0)]);
        assert_eq!(
            (t.seconds.min, t.seconds.median, t.seconds.n),
            (Some(60.0), Some(65.0), 2)
        );
        assert_eq!(t.samples, vec![Some(60.0), None, Some(70.0)]);
        assert_eq!(t.errors, vec!["boom".to_string()]);
        assert!(!lab_results::bench::orchestration_ok(&OrchestrationRecord {
            image_cache: String::new(),
            steps: vec![t],
            phases: Vec::new(),
        }));
    }
}
