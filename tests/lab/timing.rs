//! How long each trial took: the suite prints its slowest trials at the end
//! and writes every duration to `lab-tests-timings.tsv` beside the test
//! binary's release directory, so whoever keeps the suite's wall time in
//! budget sees where it goes without timing a run by hand. Each labctl
//! command a trial ran through [`crate::util::Labctl::run`] goes to
//! `lab-tests-commands.tsv` with its trial: where inside a slow trial the
//! time went.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use libtest_mimic::{Failed, Trial};

static DURATIONS: Mutex<Vec<(String, Duration)>> = Mutex::new(Vec::new());

/// The trial running now (trials take turns) and the commands it ran.
static CURRENT_TRIAL: Mutex<String> = Mutex::new(String::new());
static COMMANDS: Mutex<Vec<(Duration, String, String)>> = Mutex::new(Vec::new());

/// The lock's data, also after a trial panicked holding it: the timings of
/// the other trials still count.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Records one labctl command of the current trial.
pub fn command(args: &[&str], took: Duration) {
    let trial = lock(&CURRENT_TRIAL).clone();
    let line = args.join(" ").replace(['\t', '\n'], " ");
    lock(&COMMANDS).push((took, trial, line));
}

/// A trial whose wall time is recorded (pass or fail).
pub fn trial(name: impl Into<String>, body: impl FnOnce() -> Result<(), Failed> + Send + 'static) -> Trial {
    let name = name.into();
    let recorded = name.clone();
    Trial::test(name, move || {
        recorded.clone_into(&mut lock(&CURRENT_TRIAL));
        let start = Instant::now();
        let result = body();
        "(between trials)".clone_into(&mut lock(&CURRENT_TRIAL));
        lock(&DURATIONS).push((recorded, start.elapsed()));
        result
    })
}

/// Records a phase that is not a trial (bringing a lab up, tearing it down).
pub fn phase<T>(name: &str, body: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = body();
    lock(&DURATIONS).push((format!("[{name}]"), start.elapsed()));
    out
}

/// Prints the `top` slowest entries and the total, and writes all of them
/// (in run order) as `seconds<TAB>name` lines.
pub fn report(top: usize) {
    let durations = lock(&DURATIONS);
    if durations.is_empty() {
        return;
    }
    let tsv: String = durations
        .iter()
        .map(|(name, took)| format!("{:.1}\t{name}\n", took.as_secs_f64()))
        .collect();
    let path = crate::util::bin_dir().join("lab-tests-timings.tsv");
    if let Err(e) = std::fs::write(&path, tsv) {
        eprintln!("lab suite: cannot write {}: {e}", path.display());
    }
    let commands: String = lock(&COMMANDS)
        .iter()
        .map(|(took, trial, line)| format!("{:.1}\t{trial}\tlabctl {line}\n", took.as_secs_f64()))
        .collect();
    let commands_path = crate::util::bin_dir().join("lab-tests-commands.tsv");
    if let Err(e) = std::fs::write(&commands_path, commands) {
        eprintln!("lab suite: cannot write {}: {e}", commands_path.display());
    }
    let mut slowest: Vec<&(String, Duration)> = durations.iter().collect();
    slowest.sort_by_key(|(_, took)| std::cmp::Reverse(*took));
    let total: Duration = durations.iter().map(|(_, took)| *took).sum();
    println!(
        "lab: {} timed steps, {:.0} s in all; slowest (every one in {}):",
        durations.len(),
        total.as_secs_f64(),
        path.display()
    );
    for (name, took) in slowest.into_iter().take(top) {
        println!("  {:>7.1} s  {name}", took.as_secs_f64());
    }
}
