//! Providers create and delete the machines of a lab.
//!
//! This crate owns the [`Provider`] trait, the choice of implementation by
//! the `provider:` value of labs.yaml ([`for_lab`]), one implementation per
//! provider ([`qemu`], [`multipass`], [`aws`], [`ssh`]), and the node image the QEMU
//! provider boots ([`image`]).
//!
//! It must not set up anything inside a node beyond "it answers SSH": rxe,
//! the agent and everything after are provider-independent and belong to the
//! orchestration crate (`lab-core`'s `provision`).
//!
//! # Layout
//! - the trait, [`ProviderError`] and [`Liveness`] (private `provider`), the
//!   implementation for a `provider:` value [`for_lab`]/[`for_kind`]
//!   (private `by_kind`), re-exported here. Neither names a provider's own
//!   types: a provider's service errors reach [`ProviderError::Service`]
//!   boxed, through the provider's own `From`.
//! - what every provider's nodes share about the agent (its port, the
//!   check that the build runs on the nodes' CPU): private `node_agent`,
//!   below the providers, so that no provider borrows from another.
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
mod by_kind;
mod cloud_init;
pub mod image;
pub mod multipass;
mod node_agent;
mod node_keys;
mod provider;
pub mod qemu;
pub mod ssh;

pub use agent_binary::AgentBinary;
pub use by_kind::{for_kind, for_lab};
pub use node_keys::{HostKeyPair, MissingHostKey, NodeKeys, PreloadFile};
pub use provider::{Liveness, NicRestart, Provider, ProviderError};
