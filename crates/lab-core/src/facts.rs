//! Lab facts: what a program on a node needs to know about the lab (its
//! name, every node's data address, this node's RDMA device, port and GID
//! index, the libfabric provider), gathered once at `up` and kept in the
//! lab's state directory (`facts.json`), so `status` and placeholders need
//! no RPC.
//!
//! The same facts take three shapes on every node (written by
//! [`provision::write_facts`](crate::provision::write_facts)):
//! - [`lab_env`]: `/etc/labctl/lab.env`, shell-sourceable `LABCTL_*`
//!   variables;
//! - [`hostfile`]: `/etc/labctl/hostfile`, in the form `mpirun` reads;
//! - [`hosts_lines`]: `/etc/hosts` lines that resolve node names to data
//!   addresses, each ending with the lab's [`lab_marker`] so that a later
//!   `up` (or `down` on machines that outlive the lab) removes exactly them.
//!
//! With `node_ssh:`, the lines that let nodes `ssh` each other carry the
//! same marker ([`authorized_keys_line`], [`known_hosts_lines`]).
//!
//! [`LabFacts::expand`] fills placeholders such as `{server.addr}` or
//! `{self.gid_index}` in a command template from the same facts.
//!
//! This module only computes and renders: no SSH, no files. One concern a
//! file: `gather` (the facts, built and kept), `render` (the files on a
//! node), `placeholders` (command templates).

mod gather;
mod placeholders;
mod render;

pub use gather::{LabFacts, LabLevelFacts, NodeFacts, HOSTFILE_PATH, LAB_ENV_PATH, NODE_DIR};
pub use placeholders::{PlaceholderError, LAB_FIELDS, NODE_FIELDS};
pub use render::{
    addr_var, authorized_keys_line, hostfile, hosts_lines, known_hosts_lines, lab_env, lab_env_in, lab_marker,
};

#[cfg(test)]
pub(crate) mod fixtures;
