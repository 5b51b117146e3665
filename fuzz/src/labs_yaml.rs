//! The labs.yaml parser: arbitrary UTF-8 text through `LabsFile::parse`
//! (precheck, YAML, the checks, error positions), then what `labctl` does
//! with a file that parses: `select` (first lab, a known name, and a name
//! taken from the input, which exercises the did-you-mean hint) and
//! `resolve_nodes` on every lab. Errors are fine; a panic is a bug.
//!
//! Shared by the cargo-fuzz target (`fuzz_targets/labs_yaml.rs`) and the
//! corpus replay the test suite runs on stable Rust
//! (`crates/lab-model/tests/fuzz_corpus.rs`).
use std::path::Path;

use lab_model::LabsFile;

/// One input: errors are fine, a panic is a finding.
pub fn run(text: &str) {
    let file = match LabsFile::parse(Path::new("labs.yaml"), text) {
        Ok(file) => file,
        Err(e) => {
            // Rendering the error computes positions and snippets from the text.
            let _ = e.to_string();
            let _ = (e.message(), e.fix(), e.position(), e.path());
            return;
        }
    };
    let _ = file.names();
    for lab in &file.labs {
        let nodes = lab.resolve_nodes();
        assert_eq!(nodes.len(), lab.nodes.len());
        for node in &lab.nodes {
            assert!(lab.node(&node.name).is_some());
        }
    }
    let first_line = text.lines().next().unwrap_or_default();
    for name in [None, Some("local"), Some(first_line)] {
        match file.select(name) {
            Ok(lab) => {
                let _ = lab.resolve_nodes();
            }
            Err(e) => {
                let _ = e.to_string();
                let _ = (e.message(), e.fix(), e.position());
            }
        }
    }
}
