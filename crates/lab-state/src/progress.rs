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
