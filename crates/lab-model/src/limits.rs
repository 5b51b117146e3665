//! The defaults and bounds of labs.yaml values.

/// The file `labctl` reads when no `-f FILE` is given.
pub const DEFAULT_FILE: &str = "labs.yaml";

/// The only image the QEMU provider has for now.
pub const DEFAULT_IMAGE: &str = "debian-bookworm";

/// Images the QEMU provider can boot.
pub const QEMU_IMAGES: &[&str] = &[DEFAULT_IMAGE];

/// vCPUs of a node when neither the node nor `defaults` say.
pub const DEFAULT_CPUS: u32 = 1;

/// Memory of a node, in MiB, when neither the node nor `defaults` say.
pub const DEFAULT_MEMORY_MIB: u64 = 1024;

/// Allowed vCPUs per node.
pub const CPUS_RANGE: std::ops::RangeInclusive<u32> = 1..=64;

/// Allowed memory per node, in MiB.
pub const MEMORY_MIB_RANGE: std::ops::RangeInclusive<u64> = 256..=64 * 1024;

/// Allowed fixed SSH ports.
pub const SSH_PORT_RANGE: std::ops::RangeInclusive<u16> = 1024..=65535;

/// Most nodes a lab may have.
pub const MAX_NODES: usize = 16;

/// Longest lab or node name.
pub const MAX_NAME_LEN: usize = 31;

/// The Multipass image when labs.yaml names none: the current Ubuntu LTS.
pub const DEFAULT_MULTIPASS_IMAGE: &str = "24.04";

/// Allowed disk of a Multipass node, in MiB.
pub const MULTIPASS_DISK_MIB_RANGE: std::ops::RangeInclusive<u64> = 4 * 1024..=64 * 1024;

pub(crate) fn default_multipass_image() -> String {
    DEFAULT_MULTIPASS_IMAGE.to_string()
}

pub(crate) fn default_image() -> String {
    DEFAULT_IMAGE.to_string()
}
