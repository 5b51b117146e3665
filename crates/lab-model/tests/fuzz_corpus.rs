//! The labs_yaml fuzz corpus replayed on stable Rust, with the fuzz target's
//! own harness (`fuzz/src/labs_yaml.rs`): every seed and every input a fuzz
//! run kept goes through the parser and what labctl does with its result
//! without a panic.

use std::path::Path;

#[path = "../../../fuzz/src/labs_yaml.rs"]
mod harness;

#[test]
fn every_labs_yaml_corpus_input_runs_without_a_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/labs_yaml");
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    inputs.sort();
    let mut ran = 0;
    for input in &inputs {
        let bytes = std::fs::read(input).unwrap();
        // libFuzzer hands the target only UTF-8 inputs (`|text: &str|`).
        let Ok(text) = std::str::from_utf8(&bytes) else {
            continue;
        };
        harness::run(text);
        ran += 1;
    }
    assert!(ran >= 7, "{inputs:?}");
}
