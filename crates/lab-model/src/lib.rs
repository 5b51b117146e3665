//! What a lab is: the `labs.yaml` model and the CI suites that run on it.
//!
//! This crate owns the file formats users write: their types, parsing,
//! defaults, validation with `file:line:column` errors that say how to fix
//! them, and the JSON schema for editors. It also holds the catalogue of
//! workload names, so a bad name is refused before anything is created.
//!
//! It must not touch the network, the lab's state directory or any machine:
//! it reads text and returns values. Every other labctl crate may depend on
//! it; it depends on none of them.
//!
//! # Layout
//! - [`labs`] (re-exported at the root): labs.yaml types, defaults and checks.
//! - [`suite`]: `labctl ci` suites (a lab's `ci:` section or a suite file).
//! - [`workloads`]: the workloads the agents implement, by name.
//! - [`size`]: byte counts as written on the command line (`4MiB`).
#![warn(missing_docs)]

pub mod labs;
pub mod size;
pub mod suite;
pub mod workloads;

pub use labs::*;
