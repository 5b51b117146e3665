//! labctl's tests of the built binary as a person meets it (no lab, no VM),
//! one test binary for the three files. The AWS `down --leaked` test stays
//! a binary of its own (`down_leaked_moto.rs`): it changes the process's
//! environment, which nothing else may read meanwhile.

mod cli_conventions;
mod first_use_errors;
mod newcomer;
