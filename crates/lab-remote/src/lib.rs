//! How the controller reaches a node once it exists.
//!
//! This crate owns the SSH transport ([`ssh`]: russh sessions with the lab's
//! key and pinned host keys, commands with exit status, SFTP upload and
//! download, direct-tcpip channels) and the gRPC client to a node's
//! rdma-agent ([`agent`]), whose transport is such a channel to 127.0.0.1
//! inside the node.
//!
//! It must not create or delete machines (providers do), decide what runs on
//! a node (the orchestration crate does), or read labs.yaml.
//!
//! # Layout
//! - [`command`]: command lines for a node's shell, built from words (the
//!   only place that quotes for a remote shell).
//! - [`ssh`]: sessions, commands, file transfer, tunnels.
//! - [`ssh_login`]: what a session logs in with (a key file, the lab's key,
//!   the user's ssh-agent) and the login itself.
//! - [`process`]: a user's command that can be stopped (its process group),
//!   a wait for a port to listen.
//! - [`transfer`]: files to and from a node, streamed and checked by sha256.
//! - [`agent`]: connect to an agent through a session, wait for it to be healthy.
#![warn(missing_docs)]

pub mod agent;
pub mod command;
pub mod process;
pub mod ssh;
pub mod ssh_login;
pub mod transfer;
