//! A device's GID table in one query (`ibv_query_gid_table`, one ioctl)
//! instead of sysfs file by file: rxe's table has 1024 slots, and opening
//! each slot's file cost about 0.3 s per scan on an emulated node, paid by
//! every NodeInfo and every session's GID lookup.

use std::net::Ipv6Addr;

use sideway::ibverbs::address::GidType;
use sideway::ibverbs::device_context::DeviceContext;

/// One valid GID of a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidRow {
    /// The port it belongs to.
    pub port: u32,
    /// Its index in that port's table.
    pub index: u32,
    /// Its 16 bytes.
    pub gid: [u8; 16],
    /// "RoCE v2", "RoCE v1" or "IB" (sysfs's "IB/RoCE v1" names the last two alike).
    pub gid_type: &'static str,
}

/// The valid entries of every port's GID table, or None when the device
/// cannot answer (then sysfs is the way).
pub fn gid_table(ctx: &DeviceContext) -> Option<Vec<GidRow>> {
    let entries = ctx.query_gid_table().ok()?;
    Some(
        entries
            .iter()
            .map(|e| GidRow {
                port: e.port_num(),
                index: e.gid_index(),
                gid: Ipv6Addr::from(e.gid()).octets(),
                gid_type: match e.gid_type() {
                    GidType::RoceV2 => "RoCE v2",
                    GidType::RoceV1 => "RoCE v1",
                    GidType::InfiniBand => "IB",
                },
            })
            .filter(|row| row.gid != [0; 16])
            .collect(),
    )
}
