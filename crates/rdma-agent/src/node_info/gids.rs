//! A port's GIDs with their types: from the device's GID table where it
//! answers, else from sysfs; and one GID's bytes by index.

use std::path::{Path, PathBuf};

use agent_proto::v1::Gid;

use super::sysfs::{read_trimmed, SYSFS_IB};

/// Port `port`'s GIDs out of a device's GID table, by index.
pub(super) fn port_gids(rows: &[crate::verbs::GidRow], port: u32) -> Vec<Gid> {
    let mut gids: Vec<Gid> = rows
        .iter()
        .filter(|r| r.port == port)
        .map(|r| Gid {
            index: r.index,
            gid: sysfs_gid_text(&r.gid),
            gid_type: r.gid_type.to_string(),
        })
        .collect();
    gids.sort_by_key(|g| g.index);
    gids
}

/// GID bytes in sysfs's form: eight groups of four hex digits.
fn sysfs_gid_text(gid: &[u8; 16]) -> String {
    gid.chunks(2)
        .map(|pair| format!("{:02x}{:02x}", pair[0], pair[1]))
        .collect::<Vec<_>>()
        .join(":")
}

/// The port's non-zero GIDs with their types, from sysfs.
pub(super) fn gids(port_dir: &Path, infiniband: bool) -> Vec<Gid> {
    let Ok(entries) = std::fs::read_dir(port_dir.join("gids")) else {
        return Vec::new();
    };
    let mut indices: Vec<u32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    indices.sort();
    indices
        .into_iter()
        .filter_map(|i| {
            let gid = read_trimmed(port_dir.join("gids").join(i.to_string()))?;
            if gid.chars().all(|c| c == '0' || c == ':') {
                return None;
            }
            let gid_type = read_trimmed(port_dir.join("gid_attrs/types").join(i.to_string())).unwrap_or_default();
            Some(Gid {
                index: i,
                gid,
                gid_type: gid_type_name(&gid_type, infiniband),
            })
        })
        .collect()
}

/// sysfs "IB/RoCE v1" (one value for both) → "IB" on InfiniBand ports,
/// "RoCE v1" on Ethernet ones; "RoCE v2" stays.
fn gid_type_name(sysfs: &str, infiniband: bool) -> String {
    match sysfs {
        "IB/RoCE v1" if infiniband => "IB".into(),
        "IB/RoCE v1" => "RoCE v1".into(),
        other => other.to_string(),
    }
}

/// The GID bytes at `index` of `device`/`port` from sysfs.
pub fn gid_at(device: &str, port: u8, index: u32) -> Option<[u8; 16]> {
    let path: PathBuf = [SYSFS_IB, device, "ports", &port.to_string(), "gids", &index.to_string()]
        .iter()
        .collect();
    parse_gid(&read_trimmed(path)?)
}

/// "fe80:0000:...:0001" (sysfs form) → bytes.
pub fn parse_gid(text: &str) -> Option<[u8; 16]> {
    let ip: std::net::Ipv6Addr = text.parse().ok()?;
    Some(ip.octets())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_table_rows_read_like_sysfs() {
        let v2 = parse_gid("0000:0000:0000:0000:0000:ffff:0a4d:0001").unwrap();
        let v1 = parse_gid("fe80:0000:0000:0000:5054:00ff:febb:0001").unwrap();
        let rows = [
            crate::verbs::GidRow {
                port: 1,
                index: 1,
                gid: v2,
                gid_type: "RoCE v2",
            },
            crate::verbs::GidRow {
                port: 2,
                index: 0,
                gid: v1,
                gid_type: "RoCE v1",
            },
            crate::verbs::GidRow {
                port: 1,
                index: 0,
                gid: v1,
                gid_type: "RoCE v1",
            },
        ];
        let port1 = port_gids(&rows, 1);
        let seen: Vec<(u32, &str, &str)> = port1
            .iter()
            .map(|g| (g.index, g.gid.as_str(), g.gid_type.as_str()))
            .collect();
        assert_eq!(
            seen,
            [
                (0, "fe80:0000:0000:0000:5054:00ff:febb:0001", "RoCE v1"),
                (1, "0000:0000:0000:0000:0000:ffff:0a4d:0001", "RoCE v2"),
            ],
            "port 1's rows by index, in sysfs's text form"
        );
        assert_eq!(parse_gid(&port1[1].gid), Some(v2));
    }
}
