//! Progress display: a spinner per node with elapsed time on a terminal,
//! plain timestamped lines otherwise (CI logs, pipes).

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use lab_state::progress::Reporter;

/// Chooses the display for this process's stderr.
pub fn reporter(quiet: bool) -> Box<dyn Reporter> {
    if quiet {
        Box::new(lab_state::progress::Silent)
    } else if std::io::stderr().is_terminal() {
        Box::new(Spinners::default())
    } else {
        Box::new(Lines {
            started: Instant::now(),
        })
    }
}

/// Plain lines with the time since start.
pub struct Lines {
    started: Instant,
}

impl Lines {
    fn print(&self, text: std::fmt::Arguments) {
        eprintln!("[{:>6.1}s] {text}", self.started.elapsed().as_secs_f64());
    }
}

impl Reporter for Lines {
    fn begin(&self, scope: &str, step: &str) {
        self.print(format_args!("{scope}: {step} ..."));
    }
    fn end(&self, scope: &str, step: &str, elapsed: Duration) {
        self.print(format_args!("{scope}: {step} done ({:.1}s)", elapsed.as_secs_f64()));
    }
    fn note(&self, scope: &str, message: &str) {
        self.print(format_args!("{scope}: {message}"));
    }
}

/// One spinner per scope.
#[derive(Default)]
pub struct Spinners {
    multi: MultiProgress,
    bars: Mutex<HashMap<String, ProgressBar>>,
}

impl Spinners {
    fn bar(&self, scope: &str) -> ProgressBar {
        let mut bars = self.bars.lock().expect("spinner table");
        bars.entry(scope.to_string())
            .or_insert_with(|| {
                let bar = self.multi.add(ProgressBar::new_spinner());
                bar.set_style(
                    ProgressStyle::with_template("{spinner} {prefix:>8.bold} {msg} [{elapsed}]")
                        .expect("valid template"),
                );
                bar.set_prefix(scope.to_string());
                bar.enable_steady_tick(Duration::from_millis(120));
                bar
            })
            .clone()
    }
}

impl Reporter for Spinners {
    fn begin(&self, scope: &str, step: &str) {
        self.bar(scope).set_message(format!("{step} ..."));
    }
    fn end(&self, scope: &str, step: &str, elapsed: Duration) {
        let bar = self.bar(scope);
        bar.set_message(format!("{step} done ({:.1}s)", elapsed.as_secs_f64()));
    }
    fn note(&self, scope: &str, message: &str) {
        let _ = self.multi.println(format!("  {scope}: {message}"));
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        for bar in self.bars.lock().expect("spinner table").values() {
            bar.finish();
        }
    }
}

/// `labctl cp`'s display: a byte bar per node on a terminal (only for
/// transfers large enough to watch), nothing otherwise; the summary after
/// the copy says what moved.
pub fn copy_progress(quiet: bool) -> Box<dyn lab_core::copy::CopyProgress> {
    if quiet || !std::io::stderr().is_terminal() {
        Box::new(lab_core::copy::NoProgress)
    } else {
        Box::new(CopyBars::default())
    }
}

/// Below this a copy is over before a bar is worth drawing.
const BAR_THRESHOLD: u64 = 4 << 20;

#[derive(Default)]
struct CopyBars {
    multi: MultiProgress,
    bars: Mutex<HashMap<String, ProgressBar>>,
}

impl lab_core::copy::CopyProgress for CopyBars {
    fn planned(&self, node: &str, bytes: u64) {
        if bytes < BAR_THRESHOLD {
            return;
        }
        let bar = self.multi.add(ProgressBar::new(bytes));
        bar.set_style(
            ProgressStyle::with_template("{prefix:>8.bold} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        bar.set_prefix(node.to_string());
        self.bars.lock().expect("bar table").insert(node.to_string(), bar);
    }
    fn advanced(&self, node: &str, bytes: u64) {
        if let Some(bar) = self.bars.lock().expect("bar table").get(node) {
            bar.inc(bytes);
        }
    }
    fn finished(&self, node: &str) {
        if let Some(bar) = self.bars.lock().expect("bar table").remove(node) {
            bar.finish_and_clear();
        }
    }
}
