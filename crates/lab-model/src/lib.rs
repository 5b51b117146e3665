//! What a lab is: the `labs.yaml` model and the CI suites that run on it.
//!
//! This crate owns the file formats users write: their types, parsing,
//! defaults, validation with `file:line:column` errors that say how to fix
//! them, and the JSON schema for editors. Workload names and their options
//! are checked against the workload catalogue (crate `workload-catalogue`),
//! so a bad name is refused before anything is created.
//!
//! It must not touch the network, the lab's state directory or any machine:
//! it reads text and returns values. Every other labctl crate may depend on
//! it; of ours it depends only on the workload catalogue.
//!
//! # Layout
//! - [`labs`] (re-exported at the root): labs.yaml types, loading, and the
//!   checks of a whole document, located through the parsed tree.
//! - `yaml`: the one YAML reader of both files: a tree of nodes that keep
//!   their positions, and a serde deserializer over it with typed errors.
//! - the values inside it, each with its own checks: memory sizes
//!   ([`MemorySize`]), IPv4 networks ([`Ipv4Network`]), defaults and bounds
//!   (`DEFAULT_*`, `*_RANGE`); private modules check single scalars while
//!   the parser points at them and carry problems through serde.
//! - [`builtin`]: the labs used when there is no labs.yaml (`labctl init` writes them).
//! - [`request`]: a workload run as asked for, `labctl run`'s flags and a suite
//!   step's fields in one type.
//! - [`suite`]: `labctl ci` suites (a lab's `ci:` section or a suite file).
//! - [`copy_location`]: where a copied file is: `NODE:PATH`, `@all:PATH` or a local path (cp, copy/collect steps).
//! - [`expect`]: `expect:`, what a lab must deliver (node facts, workload figures).
//! - [`size`]: byte counts as written on the command line (`4MiB`).
#![warn(missing_docs)]

pub mod builtin;
pub mod copy_location;
pub mod expect;
mod fields;
pub mod jump;
pub mod labs;
mod limits;
mod located;
mod memory;
mod network;
mod problem;
pub mod request;
mod scalar;
pub mod size;
pub mod suite;
mod yaml;

pub use labs::*;
pub use limits::*;
pub use memory::MemorySize;
pub use network::{Ipv4Network, DEFAULT_DATA_NETWORK, QEMU_USER_NETWORK};
