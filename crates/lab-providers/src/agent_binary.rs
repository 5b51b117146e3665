//! The rdma-agent build that labctl deploys: its bytes, hash and version,
//! read once per command and handed to providers (which check that their
//! nodes can run it) and to provisioning (which uploads it); and what the
//! ELF file needs from a machine (its CPU architecture, the newest glibc
//! symbol version it references), read with `goblin` (which replaced two
//! hand-written header readers and a byte scan for `GLIBC_` strings).

use std::sync::Arc;

use sha2::{Digest, Sha256};

/// The agent build this labctl deploys.
#[derive(Debug, Clone)]
pub struct AgentBinary {
    /// The file's bytes.
    pub bytes: Arc<Vec<u8>>,
    /// Its sha256, hex.
    pub sha256: String,
    /// The version it reports (labctl's own).
    pub version: String,
}

impl AgentBinary {
    /// Reads the agent binary at `path`.
    pub fn load(path: &std::path::Path, version: &str) -> std::io::Result<AgentBinary> {
        let bytes = std::fs::read(path)?;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        Ok(AgentBinary {
            bytes: Arc::new(bytes),
            sha256,
            version: version.to_string(),
        })
    }
}

impl AgentBinary {
    /// What this build needs from a node.
    pub fn needs(&self) -> AgentNeeds {
        AgentNeeds::of(&self.bytes)
    }
}

/// What an ELF executable needs from the machine that runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentNeeds {
    /// `uname -m` spelling of its architecture (`x86_64`, `aarch64`, ...);
    /// None when the file is not ELF.
    pub arch: Option<&'static str>,
    /// The newest `GLIBC_x.y` symbol version it references, if any.
    pub glibc: Option<(u32, u32)>,
}

impl AgentNeeds {
    /// Reads the architecture and glibc version `elf` needs.
    pub fn of(elf: &[u8]) -> AgentNeeds {
        AgentNeeds {
            arch: elf_arch(elf),
            glibc: newest_glibc(elf),
        }
    }
}

/// The CPU an ELF binary is built for, as `uname -m` names it, from its
/// header; `another architecture` for machines labctl has no name for.
pub fn elf_arch(bytes: &[u8]) -> Option<&'static str> {
    use goblin::elf::header;
    let h = goblin::elf::Elf::parse_header(bytes).ok()?;
    Some(match h.e_machine {
        header::EM_X86_64 => "x86_64",
        header::EM_AARCH64 => "aarch64",
        header::EM_386 => "x86",
        header::EM_ARM => "arm",
        header::EM_RISCV => "riscv64",
        _ => "another architecture",
    })
}

/// The newest `GLIBC_x.y` among the versions the binary's dynamic symbols
/// need (its `.gnu.version_r`); None for a static or non-ELF file.
fn newest_glibc(bytes: &[u8]) -> Option<(u32, u32)> {
    let elf = goblin::elf::Elf::parse(bytes).ok()?;
    let verneed = elf.verneed.as_ref()?;
    verneed
        .iter()
        .flat_map(|need| need.iter().collect::<Vec<_>>())
        .filter_map(|aux| elf.dynstrtab.get_at(aux.vna_name))
        .filter_map(|name| {
            let (major, minor) = name.strip_prefix("GLIBC_")?.split_once('.')?;
            let minor = minor.split('.').next()?;
            Some((major.parse().ok()?, minor.parse().ok()?))
        })
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ELF header alone: enough for the architecture.
    fn header(little_endian: bool, machine: u16) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2; // 64-bit
        b[5] = if little_endian { 1 } else { 2 };
        b[6] = 1; // version
        let m = if little_endian {
            machine.to_le_bytes()
        } else {
            machine.to_be_bytes()
        };
        b[18..20].copy_from_slice(&m);
        b
    }

    #[test]
    fn test_architecture_comes_from_the_header_in_either_byte_order() {
        assert_eq!(elf_arch(&header(true, 0x3e)), Some("x86_64"));
        assert_eq!(elf_arch(&header(true, 0xb7)), Some("aarch64"));
        assert_eq!(elf_arch(&header(false, 0xb7)), Some("aarch64"));
        assert_eq!(elf_arch(&header(true, 0x2)), Some("another architecture"));
        assert_eq!(elf_arch(b"#!/bin/sh\n"), None);
        assert_eq!(
            AgentNeeds::of(b"#!/bin/sh\n"),
            AgentNeeds {
                arch: None,
                glibc: None
            }
        );
    }

    #[test]
    fn test_a_real_binary_needs_this_hosts_arch_and_at_most_its_glibc() {
        // This test binary is a dynamically linked glibc executable, like the agent.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let needs = AgentNeeds::of(&me);
        assert_eq!(needs.arch, Some(std::env::consts::ARCH));
        let (major, minor) = needs.glibc.expect("a glibc binary references GLIBC_ versions");
        let host = std::process::Command::new("getconf")
            .arg("GNU_LIBC_VERSION")
            .output()
            .unwrap();
        let host = String::from_utf8_lossy(&host.stdout);
        let (hmaj, hmin) = host.trim().strip_prefix("glibc ").unwrap().split_once('.').unwrap();
        assert_eq!(major, 2);
        assert!(
            (major, minor) <= (hmaj.parse().unwrap(), hmin.parse().unwrap()),
            "{needs:?} vs {host}"
        );
        assert!(minor >= 2, "{needs:?}");
    }
}
