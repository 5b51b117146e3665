//! The JSON shapes of `multipass ... --format json`, typed after Multipass's
//! own formatter, and their parsers. Only shapes: running the commands is the
//! provider's.

use std::collections::BTreeMap;

use serde::Deserialize;

/// An instance's state, as Multipass prints it (`status_string_for` in its
/// client, one per `InstanceStatus` of its RPC protocol).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum InstanceState {
    /// Running.
    Running,
    /// Stopped.
    Stopped,
    /// Deleted but not purged (`multipass recover` brings it back).
    Deleted,
    /// Booting.
    Starting,
    /// Rebooting.
    Restarting,
    /// Running, with a shutdown scheduled (`multipass stop --time`).
    #[serde(rename = "Delayed Shutdown")]
    DelayedShutdown,
    /// Being suspended.
    Suspending,
    /// Suspended.
    Suspended,
    /// Anything else Multipass reports (its own fallback is `Unknown`).
    #[default]
    #[serde(other)]
    Unknown,
}

impl InstanceState {
    /// Whether the machine runs (a delayed shutdown still runs).
    pub fn is_running(self) -> bool {
        matches!(self, InstanceState::Running | InstanceState::DelayedShutdown)
    }

    /// The state as Multipass writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceState::Running => "Running",
            InstanceState::Stopped => "Stopped",
            InstanceState::Deleted => "Deleted",
            InstanceState::Starting => "Starting",
            InstanceState::Restarting => "Restarting",
            InstanceState::DelayedShutdown => "Delayed Shutdown",
            InstanceState::Suspending => "Suspending",
            InstanceState::Suspended => "Suspended",
            InstanceState::Unknown => "Unknown",
        }
    }
}

/// `multipass info --format json`.
#[derive(Debug, Clone, Deserialize)]
pub struct InfoReport {
    /// Always empty in the JSON output (errors go to stderr and the exit status).
    #[serde(default)]
    pub errors: Vec<serde_json::Value>,
    /// Per instance name.
    pub info: BTreeMap<String, InstanceInfo>,
}

/// One instance in `multipass info`. Fields a stopped instance lacks, or that
/// older Multipass versions do not print (`cpu_count`, `snapshot_count`),
/// are optional.
#[derive(Debug, Clone, Deserialize)]
pub struct InstanceInfo {
    /// Its state.
    #[serde(default)]
    pub state: InstanceState,
    /// Its IPv4 addresses, the default network's first.
    #[serde(default)]
    pub ipv4: Vec<String>,
    /// The image's hash.
    #[serde(default)]
    pub image_hash: String,
    /// The image's release (`24.04 LTS`).
    #[serde(default)]
    pub image_release: String,
    /// The running OS (`Ubuntu 24.04.1 LTS`); empty when stopped.
    #[serde(default)]
    pub release: String,
    /// vCPUs, as text.
    #[serde(default)]
    pub cpu_count: Option<String>,
    /// Snapshots, as text.
    #[serde(default)]
    pub snapshot_count: Option<String>,
    /// Load averages; empty when stopped.
    #[serde(default)]
    pub load: Vec<f64>,
    /// Disk usage per disk (Multipass names the one disk `sda1`).
    #[serde(default)]
    pub disks: BTreeMap<String, DiskUsage>,
    /// Memory usage, bytes.
    #[serde(default)]
    pub memory: MemoryUsage,
    /// Mounts per target path.
    #[serde(default)]
    pub mounts: BTreeMap<String, Mount>,
    /// Snapshots per name (`multipass info --snapshots`).
    #[serde(default)]
    pub snapshots: BTreeMap<String, serde_json::Value>,
}

/// Disk usage; bytes, as text.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct DiskUsage {
    /// Used bytes.
    pub used: Option<String>,
    /// Total bytes.
    pub total: Option<String>,
}

/// Memory usage, bytes.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct MemoryUsage {
    /// Used.
    pub used: Option<u64>,
    /// Total.
    pub total: Option<u64>,
}

/// A mount of a host directory.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Mount {
    /// The host directory.
    #[serde(default)]
    pub source_path: String,
    /// `host:instance` uid pairs.
    #[serde(default)]
    pub uid_mappings: Vec<String>,
    /// `host:instance` gid pairs.
    #[serde(default)]
    pub gid_mappings: Vec<String>,
}

/// `multipass list --format json`.
#[derive(Debug, Clone, Deserialize)]
pub struct ListReport {
    /// Every instance.
    pub list: Vec<ListEntry>,
}

/// One instance in `multipass list`.
#[derive(Debug, Clone, Deserialize)]
pub struct ListEntry {
    /// Its name.
    pub name: String,
    /// Its state.
    #[serde(default)]
    pub state: InstanceState,
    /// Its IPv4 addresses.
    #[serde(default)]
    pub ipv4: Vec<String>,
    /// `Ubuntu 24.04 LTS`, or `Not Available`.
    #[serde(default)]
    pub release: String,
}

/// `multipass version --format json`.
#[derive(Debug, Clone, Deserialize)]
pub struct VersionReport {
    /// The client's version.
    pub multipass: String,
    /// The daemon's version; absent when the daemon did not answer.
    #[serde(default)]
    pub multipassd: Option<String>,
}

/// Parses `multipass info --format json`.
pub fn parse_info(json: &str) -> Result<InfoReport, serde_json::Error> {
    serde_json::from_str(json)
}

/// Parses `multipass list --format json`.
pub fn parse_list(json: &str) -> Result<ListReport, serde_json::Error> {
    serde_json::from_str(json)
}

impl InstanceInfo {
    /// The first IPv4 address: the node's SSH and data address.
    pub fn first_ipv4(&self) -> Option<std::net::Ipv4Addr> {
        self.ipv4.iter().find_map(|a| a.parse().ok())
    }
}
