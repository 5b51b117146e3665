//! cargo-fuzz target: the labs.yaml parser (see `../src/labs_yaml.rs`).
#![no_main]

#[path = "../src/labs_yaml.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|text: &str| harness::run(text));
