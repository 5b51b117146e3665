//! Finding and opening RDMA devices by name, and the error type of every
//! verbs step ([`LinkError`]). Nothing here touches a QP or a buffer: that
//! is [`super::link`]'s.

use std::sync::Arc;

use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::DeviceContext;

/// A failed verbs step, with what was being done.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// No RDMA device of that name.
    #[error("RDMA device {name:?} not found (devices: {available})")]
    DeviceNotFound {
        /// The requested name.
        name: String,
        /// What exists.
        available: String,
    },
    /// A verbs call failed.
    #[error("{step} failed: {detail}")]
    Verbs {
        /// What we were doing ("ibv_reg_mr of 4096 B").
        step: String,
        /// The underlying error.
        detail: String,
    },
    /// A work request referred to memory outside a buffer, or a chain of another link.
    #[error("bad work request: {0}")]
    BadWorkRequest(String),
    /// ibv_post_send / ibv_post_recv refused the list.
    #[error("{call} failed: {source}")]
    Post {
        /// Which post.
        call: &'static str,
        /// errno.
        source: std::io::Error,
    },
    /// ibv_poll_cq failed.
    #[error("ibv_poll_cq failed: {0}")]
    Poll(std::io::Error),
}

pub(super) fn verbs_err(step: impl Into<String>, detail: impl std::fmt::Display) -> LinkError {
    LinkError::Verbs {
        step: step.into(),
        detail: detail.to_string(),
    }
}

/// The names of the RDMA devices libibverbs sees (empty when none, or when
/// libibverbs is not installed).
pub fn device_names() -> Vec<String> {
    match DeviceList::new() {
        Ok(list) => list.iter().map(|d| d.name()).collect(),
        Err(_) => Vec::new(),
    }
}

/// Opens a device context by name.
pub fn open_device(name: &str) -> Result<Arc<DeviceContext>, LinkError> {
    let list = DeviceList::new().map_err(|e| verbs_err("ibv_get_device_list", e))?;
    let mut available = Vec::new();
    for device in list.iter() {
        let device_name = device.name();
        if device_name == name {
            return device
                .open()
                .map_err(|e| verbs_err(format!("ibv_open_device({name})"), e));
        }
        available.push(device_name);
    }
    Err(LinkError::DeviceNotFound {
        name: name.to_string(),
        available: if available.is_empty() {
            "none".into()
        } else {
            available.join(", ")
        },
    })
}

/// The active MTU of a port in bytes, if the device opens and the port answers.
pub fn port_active_mtu(ctx: &DeviceContext, port: u8) -> Option<u32> {
    let attr = ctx.query_port(port).ok()?;
    Some(mtu_bytes(attr.active_mtu() as u32))
}

/// What carries a side's traffic on `port`, for its run record (no silent
/// fallback): the link layer, the port's active MTU and the type of the GID
/// at `gid_index`. A fact the device does not answer is left out.
pub fn carrier_facts(ctx: &DeviceContext, port: u8, gid_index: u32) -> Vec<(&'static str, String)> {
    let mut facts = Vec::new();
    if let Ok(attr) = ctx.query_port(port) {
        let layer = match attr.link_layer() {
            sideway::ibverbs::device_context::LinkLayer::Ethernet => "Ethernet",
            sideway::ibverbs::device_context::LinkLayer::InfiniBand => "InfiniBand",
            sideway::ibverbs::device_context::LinkLayer::Unspecified => "unspecified",
        };
        facts.push(("link_layer", layer.to_string()));
        facts.push(("active_mtu", mtu_bytes(attr.active_mtu() as u32).to_string()));
    }
    let row = super::gids::gid_table(ctx).and_then(|rows| {
        rows.into_iter()
            .find(|r| r.port == u32::from(port) && r.index == gid_index)
    });
    if let Some(row) = row {
        facts.push(("gid_type", row.gid_type.to_string()));
    }
    facts
}

/// IBV_MTU_* enum value to bytes.
pub fn mtu_bytes(ibv_mtu: u32) -> u32 {
    match ibv_mtu {
        1 => 256,
        2 => 512,
        3 => 1024,
        4 => 2048,
        5 => 4096,
        _ => 0,
    }
}
