//! The agent on a node, as every provider sees it: the port it listens on
//! inside the node, and whether the deployed build runs on the nodes' CPU.
//! Shared here, below the providers, so that no provider borrows from another.

use crate::agent_binary::elf_arch;
use crate::provider::ProviderError;

/// The port rdma-agent listens on inside every node (loopback only).
pub const AGENT_PORT: u16 = 7470;

/// How to get an agent for `arch`, for the error.
fn agent_build_hint(arch: &str) -> String {
    if arch == "aarch64" {
        "build rdma-agent for aarch64 Linux and pass it with --agent (or LABCTL_AGENT): either on an arm64 Linux machine \
         (a Multipass instance will do) with `cargo build --release -p rdma-agent`, or cross-build with \
         `rustup target add aarch64-unknown-linux-gnu`, an aarch64 linker and arm64 rdma-core/libfabric dev packages, then \
         `cargo build --release -p rdma-agent --target aarch64-unknown-linux-gnu`; see docs/providers/multipass.md#apple-silicon-arm64"
            .into()
    } else {
        format!("build rdma-agent for {arch} Linux (`cargo build --release -p rdma-agent` on such a machine) and pass it with --agent")
    }
}

/// Checks that `agent` runs on nodes of architecture `node_arch`.
pub fn check_agent_arch(agent: &[u8], node_arch: &str) -> Result<(), ProviderError> {
    match elf_arch(agent) {
        Some(arch) if arch == node_arch => Ok(()),
        found => Err(ProviderError::AgentArch {
            agent: found.unwrap_or("not a Linux (ELF) executable").to_string(),
            nodes: node_arch.to_string(),
            how: agent_build_hint(node_arch),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elf(class_le: bool, machine: u16) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = if class_le { 1 } else { 2 };
        b[6] = 1;
        let m = if class_le {
            machine.to_le_bytes()
        } else {
            machine.to_be_bytes()
        };
        b[18..20].copy_from_slice(&m);
        b
    }

    #[test]
    fn test_agent_must_match_the_node_architecture() {
        assert!(check_agent_arch(&elf(true, 0x3e), "x86_64").is_ok());
        let e = check_agent_arch(&elf(true, 0x3e), "aarch64").unwrap_err().to_string();
        assert!(e.contains("built for x86_64") && e.contains("are aarch64"), "{e}");
        assert!(e.contains("rustup target add aarch64-unknown-linux-gnu"), "{e}");
        assert!(e.contains("--target aarch64-unknown-linux-gnu"), "{e}");
        let e = check_agent_arch(b"\xcf\xfa\xed\xfe mach-o", "aarch64")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a Linux (ELF) executable"), "{e}");
    }

    #[test]
    fn test_the_agent_this_build_made_fits_this_host() {
        // The test binary itself is an ELF for this host: the check accepts it.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(check_agent_arch(&me, std::env::consts::ARCH).is_ok());
    }
}
