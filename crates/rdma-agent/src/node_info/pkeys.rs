//! The P_Key table index an oob QP needs to join the partition of the
//! IPoIB interface that holds the data address.

use std::path::Path;

use super::sysfs::{read_trimmed, SYSFS_IB, SYSFS_NET};

/// The P_Key table index of `device`/`port` that an oob QP uses to be in
/// the partition of IPoIB interface `netdev` (the one that holds the data
/// address), found as IPoIB finds its own (ib_find_pkey): for the parent
/// its P_Key is the one at index 0, the port's default partition; for a
/// partition child (`ib0.8001`) the child's. rdma_cm does this by itself;
/// oob's INIT transition has to name it.
pub fn ipoib_pkey_index(device: &str, port: u8, netdev: &str) -> Result<u16, String> {
    ipoib_pkey_index_in(Path::new(SYSFS_IB), Path::new(SYSFS_NET), device, port, netdev)
}

/// `ipoib_pkey_index` with the sysfs roots given.
pub(super) fn ipoib_pkey_index_in(
    root: &Path,
    net_root: &Path,
    device: &str,
    port: u8,
    netdev: &str,
) -> Result<u16, String> {
    let broadcast = read_trimmed(net_root.join(netdev).join("broadcast"))
        .ok_or_else(|| format!("cannot read /sys/class/net/{netdev}/broadcast"))?;
    let pkey = pkey_of_broadcast(&broadcast)
        .ok_or_else(|| format!("{netdev}'s broadcast address `{broadcast}` is not an IPoIB one"))?;
    let dir = root.join(device).join("ports").join(port.to_string()).join("pkeys");
    let table: Vec<(u16, u16)> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    let index = e.file_name().to_str()?.parse::<u16>().ok()?;
                    let value = read_trimmed(e.path())?;
                    Some((index, u16::from_str_radix(value.trim_start_matches("0x"), 16).ok()?))
                })
                .collect()
        })
        .unwrap_or_default();
    pkey_index(&table, pkey).ok_or_else(|| {
        format!("{netdev}'s P_Key {pkey:#06x} is not in {device} port {port}'s P_Key table (the subnet manager's partitions)")
    })
}

/// The P_Key of an IPoIB interface from its broadcast address: IPoIB's
/// ipoib_ndo_init() (drivers/infiniband/ulp/ipoib/ipoib_main.c) writes the
/// interface's P_Key, full-membership bit set, into bytes 8 and 9
/// (`00:ff:ff:ff:ff:12:40:1b:80:02:...` is P_Key 0x8002).
fn pkey_of_broadcast(text: &str) -> Option<u16> {
    let bytes: Vec<u8> = text
        .split(':')
        .map(|b| u8::from_str_radix(b, 16).ok())
        .collect::<Option<_>>()?;
    (bytes.len() == 20).then(|| u16::from_be_bytes([bytes[8], bytes[9]]))
}

/// The index of `pkey` in a port's P_Key table ((index, value) pairs), as
/// the kernel's ib_find_pkey() picks it: the 15-bit partition number
/// matches, a full-membership entry is preferred over a limited one.
fn pkey_index(table: &[(u16, u16)], pkey: u16) -> Option<u16> {
    let mut matching: Vec<(u16, u16)> = table
        .iter()
        .copied()
        .filter(|&(_, value)| value & 0x7fff == pkey & 0x7fff)
        .collect();
    matching.sort_by_key(|&(index, value)| (value & 0x8000 == 0, index));
    matching.first().map(|&(index, _)| index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pkey_index_is_that_of_the_ipoib_interfaces_partition() {
        // Broadcast addresses as `ip -d link show` printed them for mlx5_ib0
        // (P_Key 0xffff) and mlx5_ib0.8002 in the linux-rdma mail quoted
        // above fake_pkey_child_sysfs().
        let parent = "00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff";
        let child = "00:ff:ff:ff:ff:12:40:1b:80:02:00:00:00:00:00:00:ff:ff:ff:ff";
        assert_eq!(pkey_of_broadcast(parent), Some(0xffff));
        assert_eq!(pkey_of_broadcast(child), Some(0x8002));
        assert_eq!(pkey_of_broadcast("ff:ff:ff:ff:ff:ff"), None, "an Ethernet broadcast");
        // A port's table (illustrative): the default partition at 0, 0x8002
        // at 3 as a limited member (0x0002) and at 5 as a full one.
        let table = [(0, 0xffff), (1, 0x8001), (3, 0x0002), (5, 0x8002), (2, 0)];
        assert_eq!(pkey_index(&table, 0xffff), Some(0));
        assert_eq!(pkey_index(&table, 0x8002), Some(5), "full membership first");
        assert_eq!(pkey_index(&table[..3], 0x8002), Some(3), "else the limited entry");
        assert_eq!(pkey_index(&table, 0x8009), None);
    }
}
