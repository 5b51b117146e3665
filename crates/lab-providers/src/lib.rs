//! Providers create and delete the machines of a lab.
//!
//! This crate owns the [`Provider`] trait, its registry keyed by the
//! `provider:` value of labs.yaml ([`for_lab`]), one implementation per
//! provider ([`qemu`], [`multipass`], [`aws`], [`ssh`]), and the node image the QEMU
//! provider boots ([`image`]).
//!
//! It must not set up anything inside a node beyond "it answers SSH": rxe,
//! the agent and everything after are provider-independent and belong to the
//! orchestration crate (`lab-core`'s `provision`).
//!
//! # Layout
//! - the trait, [`ProviderError`] and [`Liveness`] (private `provider`), the
//!   registry [`for_lab`]/[`for_kind`] (private `registry`), re-exported here.
//! - [`qemu`]: local VMs under a supervisor process, a private data segment.
//! - [`multipass`]: Ubuntu VMs through the `multipass` CLI and cloud-init.
//! - [`aws`]: EC2 instances (EFA or SoftRoCE) through aws-sdk-ec2.
//! - [`ssh`]: hosts that already exist (no machine created or deleted);
//!   its preflight reads the hosts over SSH and changes nothing there.
//! - [`image`]: the QEMU node image recipe and its cache.
//! - [`AgentBinary`]: the agent build a lab deploys, which providers check.
//! - [`NodeKeys`]: the login key and the per-node SSH host keys a provider
//!   puts on the machines it creates (no trust on first use).
#![warn(missing_docs)]

mod agent_binary;
pub mod aws;
mod cloud_init;
pub mod image;
pub mod multipass;
mod node_keys;
mod provider;
pub mod qemu;
mod registry;
pub mod ssh;

pub use agent_binary::AgentBinary;
pub use node_keys::{HostKeyPair, NodeKeys, PreloadFile};
pub use provider::{Liveness, Provider, ProviderError};
pub use registry::{for_kind, for_lab};
