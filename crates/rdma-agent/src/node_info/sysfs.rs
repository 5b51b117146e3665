//! Where the kernel lists RDMA devices and netdevs, and how a sysfs
//! attribute is read (one value, trailing newline dropped).

use std::path::Path;

/// The RDMA devices' class directory.
pub(super) const SYSFS_IB: &str = "/sys/class/infiniband";
/// The netdevs' class directory.
pub(super) const SYSFS_NET: &str = "/sys/class/net";

/// A sysfs attribute's value, trimmed; `None` when it cannot be read.
pub(super) fn read_trimmed(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}
