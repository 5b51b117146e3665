//! Real records for the tests: saved by `labctl run` on the quad lab (four
//! TCG VMs) and the default two-node lab, kept as they were written, in
//! `fixtures/records/`.

use std::path::{Path, PathBuf};

use crate::collective::CollectiveRecord;
use crate::report::{load_dir, Record, Saved};
use crate::run::RunRecord;

/// allreduce over 4 ranks (n1..n4), sizes 8 B .. 64 KiB, 5 operations each; verified.
pub const ALLREDUCE_SWEEP: &str = "5546a2715b258e64";
/// alltoall over 2 ranks (server, client), sizes 8 B .. 64 KiB; verified.
pub const ALLTOALL_SWEEP: &str = "6599be2f8a7c902c";
/// incast of 3 senders into rank 0 (n1), 256 KiB; verified.
pub const INCAST: &str = "16b8ccb98b2bd4b0";
/// broadcast of 4004 B with `--inject-fault corrupt`: not verified.
pub const BROADCAST_CORRUPT: &str = "6d1a8f5ca997fcc1";
/// write-read, 4 KiB x 16: bandwidth, no latency samples.
pub const WRITE_READ: &str = "731f855a131b7e4c";
/// write-lat, 2 B x 200: latency samples, no bandwidth.
pub const WRITE_LAT: &str = "f8967b58c8bbffd8";

/// The fixtures' directory.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/records")
}

/// Every fixture, as `report` loads a results directory.
pub fn all() -> Vec<Saved> {
    let (saved, skipped) = load_dir(&dir()).expect("the fixtures load");
    assert!(skipped.is_empty(), "{skipped:?}");
    saved
}

fn saved(id: &str) -> Saved {
    all().into_iter().find(|s| s.id() == id).expect("a fixture of that id")
}

/// The collective record `id`.
pub fn collective(id: &str) -> CollectiveRecord {
    match saved(id).record {
        Record::Collective(c) => *c,
        _ => panic!("{id} is not a collective"),
    }
}

/// The run record `id`.
pub fn run(id: &str) -> RunRecord {
    match saved(id).record {
        Record::Run(r) => *r,
        _ => panic!("{id} is not a run"),
    }
}
