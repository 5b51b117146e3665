//! The agent_request fuzz corpus replayed on stable Rust, with the fuzz
//! target's own harness (`fuzz/src/agent_request.rs`): every seed and every
//! input a fuzz run kept, including the regressions of the panics fixed
//! (`regress-*`), goes through decoding, validation and the checks after it
//! without a panic.

use std::path::Path;

#[path = "../../../../fuzz/src/agent_request.rs"]
mod harness;

#[test]
fn every_agent_request_corpus_input_runs_without_a_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/agent_request");
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    inputs.sort();
    for input in &inputs {
        let bytes = std::fs::read(input).unwrap();
        if let Err(panic) = std::panic::catch_unwind(|| harness::run(&bytes)) {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("{} panicked: {why}", input.display());
        }
    }
    let regressions = inputs
        .iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("regress-"))
        })
        .count();
    assert!(inputs.len() >= 12 && regressions >= 5, "{inputs:?}");
}
