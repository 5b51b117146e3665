//! What every verb shares: the global flags (the labs file, the lab,
//! verbosity) and the helpers built on them, among them where the labs come
//! from: `-f FILE`, else `./labs.yaml`, else the built-in labs (whose state
//! lives in the user's state directory).

use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::Duration;

use lab_core::lab::{Lab, LabError};
use lab_model::builtin::BUILTIN_NAME;
use lab_model::{ConfigError, LabsFile, DEFAULT_FILE};
use lab_state::LabDir;

use crate::color::ColorWhen;

/// The flags every verb takes.
#[derive(Debug, clap::Args)]
pub struct GlobalArgs {
    /// The labs file [default: ./labs.yaml; without one, the built-in labs].
    #[arg(short = 'f', long = "file", global = true, env = "LABCTL_FILE")]
    pub file: Option<PathBuf>,
    /// The lab to act on (default: the first in the file).
    #[arg(long, global = true, env = "LABCTL_LAB")]
    pub lab: Option<String>,
    /// More log output (-v info, -vv debug); LABCTL_LOG takes a tracing filter.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// When to colour output: auto (a terminal, unless NO_COLOR is set), always or never.
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value_t = ColorWhen::Auto)]
    pub color: ColorWhen,
}

/// A flag's value or a missing setting that labctl cannot work with, found
/// before anything was done: bad input, exit 2 (as clap's own usage errors).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

/// How long a verb waits for another labctl working on the same lab.
pub fn lock_wait() -> Duration {
    let secs = std::env::var("LABCTL_LOCK_WAIT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    Duration::from_secs(secs)
}

/// Where the labs come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabsSource {
    /// A labs file (`-f`, or `./labs.yaml`).
    File(PathBuf),
    /// No labs file: the labs compiled into labctl.
    Builtin,
}

impl GlobalArgs {
    /// `-f FILE`, else `./labs.yaml` when it exists, else the built-in labs.
    pub fn source(&self) -> LabsSource {
        match &self.file {
            Some(file) => LabsSource::File(file.clone()),
            None if Path::new(DEFAULT_FILE).exists() => LabsSource::File(DEFAULT_FILE.into()),
            None => LabsSource::Builtin,
        }
    }
}

impl LabsSource {
    /// Opens lab `name` (default: the first).
    pub fn open(&self, name: Option<&str>) -> Result<Lab, LabError> {
        match self {
            LabsSource::File(file) => Lab::open(file, name),
            LabsSource::Builtin => {
                let lab = Lab::open_builtin(name)?;
                note_builtin(&lab);
                Ok(lab)
            }
        }
    }

    /// Every lab of the source.
    pub fn load(&self) -> Result<LabsFile, ConfigError> {
        match self {
            LabsSource::File(file) => LabsFile::load(file),
            LabsSource::Builtin => Ok(LabsFile::builtin()),
        }
    }

    /// Where lab `lab` of this source keeps its state.
    pub fn lab_dir(&self, lab: &str) -> LabDir {
        match self {
            LabsSource::File(file) => LabDir::for_lab(file, lab),
            LabsSource::Builtin => LabDir::for_builtin_lab(lab),
        }
    }

    /// The file as messages name it.
    pub fn display(&self) -> String {
        match self {
            LabsSource::File(file) => file.display().to_string(),
            LabsSource::Builtin => BUILTIN_NAME.to_string(),
        }
    }

    /// The `-f FILE ` a suggested command needs (empty for the built-in labs).
    pub fn file_flag(&self) -> String {
        match self {
            LabsSource::File(file) => format!("-f {} ", file.display()),
            LabsSource::Builtin => String::new(),
        }
    }

    /// The file's path, for errors that carry one.
    pub fn path(&self) -> PathBuf {
        match self {
            LabsSource::File(file) => file.clone(),
            LabsSource::Builtin => PathBuf::from(BUILTIN_NAME),
        }
    }
}

/// Says, once per command, that the built-in labs are in use and where
/// their state goes (so nothing lands in the current directory unasked).
fn note_builtin(lab: &Lab) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        eprintln!(
            "labctl: no labs.yaml here and no -f FILE: using the built-in lab `{}` ({} QEMU nodes); its state is kept in {}
  `labctl init` writes the built-in labs out as labs.yaml to edit",
            lab.spec.name,
            lab.spec.nodes.len(),
            lab.dir.root().display()
        );
    });
}

/// Opens the selected lab.
pub fn open_lab(args: &GlobalArgs) -> Result<Lab, LabError> {
    args.source().open(args.lab.as_deref())
}

/// Resolves when the process gets SIGINT or SIGTERM; says which.
pub async fn interrupted() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => "terminated",
        _ = int.recv() => "interrupted",
    }
}
