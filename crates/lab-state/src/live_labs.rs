//! The per-user list of live labs: one small JSON file per lab, keyed by
//! the lab's random id, in `$XDG_STATE_HOME/labctl/.registry/`
//! (`~/.local/state/labctl/.registry/`). `up` writes a lab's entry before it
//! creates anything and `down` removes it once everything is gone, so
//! `labctl down --leaked` can tell a lab brought up from another directory
//! (live: its entry points at a state directory that still holds that id)
//! from a leaked one (no entry, or its state directory was removed by hand).
//!
//! One file per lab, written atomically: concurrent labctl processes never
//! rewrite each other's entries. (Lab names start with a letter or digit,
//! so `.registry` is never a built-in lab's state directory; the directory
//! keeps that name so entries written by earlier versions still count.)

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{write_atomic, LabDir, StateError};

/// One live lab.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveLab {
    /// The lab's random id (also in its `state.json` and on its cloud resources).
    pub id: String,
    /// The lab's name.
    pub lab: String,
    /// `qemu`, `multipass`, `aws`.
    pub provider: String,
    /// Its state directory (absolute).
    pub state_dir: PathBuf,
    /// When `up` created it, RFC 3339.
    pub created: String,
}

/// The list's directory: `$XDG_STATE_HOME/labctl/.registry`.
pub fn dir() -> PathBuf {
    dirs::state_dir()
        .or_else(|| dirs::home_dir().map(|h| h.join(".local/state")))
        .unwrap_or_else(|| PathBuf::from(".labctl"))
        .join("labctl")
        .join(".registry")
}

fn entry_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.json"))
}

/// Records `entry` in the list at `dir` (created 0700 if missing).
pub fn register_in(dir: &Path, entry: &LiveLab) -> Result<(), StateError> {
    fs::create_dir_all(dir).map_err(|source| StateError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    crate::set_mode(dir, 0o700)?;
    let json = serde_json::to_vec_pretty(entry).expect("a live-lab entry serialises");
    write_atomic(&entry_path(dir, &entry.id), &json, 0o600)
}

/// Removes lab `id` from the list at `dir`; a missing entry is fine.
pub fn unregister_in(dir: &Path, id: &str) -> Result<(), StateError> {
    let path = entry_path(dir, id);
    match fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(StateError::Io { path, source: e }),
        _ => Ok(()),
    }
}

/// Every entry of the list at `dir` (unreadable files are skipped).
pub fn entries_in(dir: &Path) -> Vec<LiveLab> {
    let Ok(files) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<LiveLab> = files
        .filter_map(|f| fs::read(f.ok()?.path()).ok())
        .filter_map(|bytes| serde_json::from_slice(&bytes).ok())
        .collect();
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

/// Whether lab `id` is live according to the list at `dir`: it has an
/// entry, and the entry's state directory still holds a state with that id.
pub fn is_live_in(dir: &Path, id: &str) -> bool {
    let Ok(bytes) = fs::read(entry_path(dir, id)) else {
        return false;
    };
    let Ok(entry) = serde_json::from_slice::<LiveLab>(&bytes) else {
        return false;
    };
    let lab_dir = LabDir::at(&entry.state_dir, &entry.lab);
    matches!(lab_dir.load(), Ok(Some(state)) if state.id == id)
}

/// [`register_in`] the user's list.
pub fn register(entry: &LiveLab) -> Result<(), StateError> {
    register_in(&dir(), entry)
}

/// [`unregister_in`] the user's list.
pub fn unregister(id: &str) -> Result<(), StateError> {
    unregister_in(&dir(), id)
}

/// [`is_live_in`] the user's list.
pub fn is_live(id: &str) -> bool {
    is_live_in(&dir(), id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LabState;

    fn temp(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("labctl-live-labs-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn test_a_lab_is_live_while_its_state_directory_holds_its_id() {
        let base = temp("live");
        let list = base.join("live-labs");
        let lab_dir = LabDir::at(&base.join("project/.labctl/alpha"), "alpha");
        lab_dir.create().unwrap();
        let state = LabState::new("alpha", "aws", "rxe");
        lab_dir.save(&state).unwrap();
        let entry = LiveLab {
            id: state.id.clone(),
            lab: "alpha".into(),
            provider: "aws".into(),
            state_dir: lab_dir.root().to_path_buf(),
            created: state.created_at.clone(),
        };
        assert!(!is_live_in(&list, &state.id), "not registered yet");
        register_in(&list, &entry).unwrap();
        assert!(is_live_in(&list, &state.id));
        assert_eq!(entries_in(&list), vec![entry.clone()]);
        // Another lab's id is not live, even with the same name.
        assert!(!is_live_in(&list, "0123456789abcdef"));
        // The state directory removed by hand: leaked.
        fs::remove_dir_all(lab_dir.root()).unwrap();
        assert!(!is_live_in(&list, &state.id));
        // Recreated with another id (a new `up` there): the old id is leaked.
        lab_dir.create().unwrap();
        lab_dir.save(&LabState::new("alpha", "aws", "rxe")).unwrap();
        assert!(!is_live_in(&list, &state.id));
        unregister_in(&list, &state.id).unwrap();
        unregister_in(&list, &state.id).unwrap();
        assert!(entries_in(&list).is_empty());
        fs::remove_dir_all(&base).unwrap();
    }
}
