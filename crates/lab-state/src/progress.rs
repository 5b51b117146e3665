//! How long steps report progress. The library says what it is doing; the
//! binary decides how to show it (spinners on a terminal, plain lines in logs).

use std::time::Duration;

/// Receives progress from long operations. `scope` is a node name, or `lab`
/// for steps that concern the whole lab.
pub trait Reporter: Send + Sync {
    /// A step began.
    fn begin(&self, scope: &str, step: &str);
    /// A step finished.
    fn end(&self, scope: &str, step: &str, elapsed: Duration);
    /// A fact worth showing (the accelerator chosen, a warning).
    fn note(&self, scope: &str, message: &str);
}

/// A reporter that shows nothing (tests, `--json`).
pub struct Silent;

impl Reporter for Silent {
    fn begin(&self, _: &str, _: &str) {}
    fn end(&self, _: &str, _: &str, _: Duration) {}
    fn note(&self, _: &str, _: &str) {}
}

/// Runs `fut` as step `step` of `scope`, reporting its start and end.
pub async fn step<T>(reporter: &dyn Reporter, scope: &str, step: &str, fut: impl std::future::Future<Output = T>) -> T {
    reporter.begin(scope, step);
    let started = std::time::Instant::now();
    let out = fut.await;
    reporter.end(scope, step, started.elapsed());
    out
}

/// One finished step of a [`Timeline`]: when it began (seconds since the
/// timeline started) and how long it took.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StepTime {
    /// A node name, or `lab`.
    pub scope: String,
    /// The step.
    pub step: String,
    /// Seconds from the timeline's start to the step's start.
    pub start_s: f64,
    /// Seconds the step took.
    pub seconds: f64,
}

/// A reporter that records when every step began and ended, and passes
/// everything on to `inner` (`up`'s phase timings, `up --timings`).
pub struct Timeline<'a> {
    inner: &'a dyn Reporter,
    started: std::time::Instant,
    steps: std::sync::Mutex<Vec<StepTime>>,
}

impl<'a> Timeline<'a> {
    /// Starts the clock now.
    pub fn new(inner: &'a dyn Reporter) -> Timeline<'a> {
        Timeline {
            inner,
            started: std::time::Instant::now(),
            steps: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// The steps that ended so far, in the order they ended.
    pub fn steps(&self) -> Vec<StepTime> {
        self.steps.lock().expect("timeline").clone()
    }
}

impl Reporter for Timeline<'_> {
    fn begin(&self, scope: &str, step: &str) {
        self.inner.begin(scope, step);
    }
    fn end(&self, scope: &str, step: &str, elapsed: Duration) {
        let now = self.started.elapsed().saturating_sub(elapsed);
        self.steps.lock().expect("timeline").push(StepTime {
            scope: scope.to_string(),
            step: step.to_string(),
            start_s: now.as_secs_f64(),
            seconds: elapsed.as_secs_f64(),
        });
        self.inner.end(scope, step, elapsed);
    }
    fn note(&self, scope: &str, message: &str) {
        self.inner.note(scope, message);
    }
}

/// One step of a [`Timeline`] over every scope that ran it (the nodes run
/// theirs side by side).
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseTime {
    /// The step.
    pub step: String,
    /// The longest any scope took, seconds.
    pub slowest_s: f64,
    /// When the last scope finished it, seconds since the timeline started.
    pub ends_at_s: f64,
}

/// `steps` grouped by step name, in the order the steps first began.
pub fn phases(steps: &[StepTime]) -> Vec<PhaseTime> {
    let mut by_start: Vec<&StepTime> = steps.iter().collect();
    by_start.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
    let mut out: Vec<PhaseTime> = Vec::new();
    for s in by_start {
        let end = s.start_s + s.seconds;
        match out.iter_mut().find(|p| p.step == s.step) {
            Some(p) => {
                p.slowest_s = p.slowest_s.max(s.seconds);
                p.ends_at_s = p.ends_at_s.max(end);
            }
            None => out.push(PhaseTime {
                step: s.step.clone(),
                slowest_s: s.seconds,
                ends_at_s: end,
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_timeline_records_each_step_with_its_start() {
        let timeline = Timeline::new(&Silent);
        std::thread::sleep(Duration::from_millis(20));
        timeline.end("lab", "first", Duration::from_millis(10));
        timeline.end("node1", "second", Duration::ZERO);
        let steps = timeline.steps();
        assert_eq!(
            steps
                .iter()
                .map(|s| (s.scope.as_str(), s.step.as_str()))
                .collect::<Vec<_>>(),
            [("lab", "first"), ("node1", "second")]
        );
        // The first began 10 ms before it ended, at least 20 ms in.
        assert!(steps[0].start_s >= 0.009 && steps[0].seconds == 0.01, "{steps:?}");
        assert!(steps[1].start_s >= 0.02, "{steps:?}");
    }

    #[test]
    fn test_phases_take_the_slowest_node_in_start_order() {
        let t = |scope: &str, step: &str, start_s: f64, seconds: f64| StepTime {
            scope: scope.into(),
            step: step.into(),
            start_s,
            seconds,
        };
        let steps = [
            t("node2", "wait for SSH", 1.0, 9.0),
            t("lab", "start VMs", 0.0, 1.0),
            t("node1", "wait for SSH", 1.0, 8.0),
            t("node1", "rxe", 9.0, 2.0),
        ];
        let got = phases(&steps);
        let names: Vec<&str> = got.iter().map(|p| p.step.as_str()).collect();
        assert_eq!(names, ["start VMs", "wait for SSH", "rxe"]);
        assert_eq!((got[1].slowest_s, got[1].ends_at_s), (9.0, 10.0));
        assert_eq!((got[2].slowest_s, got[2].ends_at_s), (2.0, 11.0));
    }
}
