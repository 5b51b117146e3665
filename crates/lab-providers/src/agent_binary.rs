//! The rdma-agent build that labctl deploys: its bytes, hash and version,
//! read once per command and handed to providers (which check that their
//! nodes can run it) and to provisioning (which uploads it); and what the
//! ELF file needs from a machine (its CPU architecture, the newest glibc
//! symbol version it references).
//!
//! ELF is read and rewritten with `object`, which replaced two hand-written
//! header readers and a byte scan for `GLIBC_` strings. The copy that is
//! uploaded has its DWARF sections (`.debug_*`) removed: the release build
//! keeps line tables for backtraces on this machine, the nodes get a binary
//! a fraction of the size (symbols stay, so a backtrace on a node still
//! names functions).

use std::sync::Arc;

use object::read::elf::{FileHeader, SectionHeader};
use object::Endianness;
use sha2::{Digest, Sha256};

/// The agent build this labctl deploys.
#[derive(Debug, Clone)]
pub struct AgentBinary {
    /// The bytes uploaded to nodes: the file without its debug sections.
    pub bytes: Arc<Vec<u8>>,
    /// Their sha256, hex.
    pub sha256: String,
    /// The version it reports (labctl's own).
    pub version: String,
}

impl AgentBinary {
    /// Reads the agent binary at `path` and drops its debug sections.
    pub fn load(path: &std::path::Path, version: &str) -> std::io::Result<AgentBinary> {
        let built = std::fs::read(path)?;
        let bytes = without_debug_sections(&built).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: cannot rewrite it without debug sections: {e}", path.display()),
            )
        })?;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        Ok(AgentBinary {
            bytes: Arc::new(bytes),
            sha256,
            version: version.to_string(),
        })
    }

    /// What this build needs from a node.
    pub fn needs(&self) -> AgentNeeds {
        AgentNeeds::of(&self.bytes)
    }
}

/// `elf` without its `.debug_*` sections; anything that is not ELF (a
/// script standing in for the agent in tests) unchanged.
pub fn without_debug_sections(elf: &[u8]) -> Result<Vec<u8>, object::build::Error> {
    if !elf.starts_with(b"\x7fELF") {
        return Ok(elf.to_vec());
    }
    let mut builder = object::build::elf::Builder::read(elf)?;
    for section in builder.sections.iter_mut() {
        if section.name.as_slice().starts_with(b".debug_") {
            section.delete = true;
        }
    }
    let mut out = Vec::with_capacity(elf.len() / 4);
    builder.write(&mut out)?;
    Ok(out)
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
    use object::elf;
    let machine = match object::FileKind::parse(bytes).ok()? {
        object::FileKind::Elf64 => {
            let h = elf::FileHeader64::<Endianness>::parse(bytes).ok()?;
            h.e_machine(h.endian().ok()?)
        }
        object::FileKind::Elf32 => {
            let h = elf::FileHeader32::<Endianness>::parse(bytes).ok()?;
            h.e_machine(h.endian().ok()?)
        }
        _ => return None,
    };
    Some(match machine {
        elf::EM_X86_64 => "x86_64",
        elf::EM_AARCH64 => "aarch64",
        elf::EM_386 => "x86",
        elf::EM_ARM => "arm",
        elf::EM_RISCV => "riscv64",
        _ => "another architecture",
    })
}

/// The newest `GLIBC_x.y` among the versions the binary's dynamic symbols
/// need (its `.gnu.version_r`); None for a static, 32-bit or non-ELF file.
fn newest_glibc(bytes: &[u8]) -> Option<(u32, u32)> {
    let header = object::elf::FileHeader64::<Endianness>::parse(bytes).ok()?;
    let endian = header.endian().ok()?;
    let sections = header.sections(endian, bytes).ok()?;
    let (mut needs, link) = sections.gnu_verneed(endian, bytes).ok()??;
    let strings = sections.section(link).ok()?.strings(endian, bytes).ok()??;
    let mut newest = None;
    while let Ok(Some((_, mut auxes))) = needs.next() {
        while let Ok(Some(aux)) = auxes.next() {
            let Ok(name) = aux.name(endian, strings) else { continue };
            let version = std::str::from_utf8(name)
                .ok()
                .and_then(|n| n.strip_prefix("GLIBC_"))
                .and_then(|v| v.split_once('.'))
                .and_then(|(major, rest)| {
                    let minor = rest.split('.').next()?;
                    Some((major.parse::<u32>().ok()?, minor.parse::<u32>().ok()?))
                });
            newest = newest.max(version);
        }
    }
    newest
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
    fn test_the_uploaded_copy_has_no_debug_sections_and_still_runs() {
        // A real ELF with DWARF: a tiny C program built here with -g.
        let dir = std::env::temp_dir().join(format!("labctl-strip-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (src, exe, stripped) = (dir.join("hi.c"), dir.join("hi"), dir.join("hi.stripped"));
        std::fs::write(
            &src,
            "#include <stdio.h>\nint main(void) { puts(\"hello from the node\"); return 0; }\n",
        )
        .unwrap();
        let cc = std::process::Command::new("cc")
            .arg("-g")
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .status()
            .unwrap();
        assert!(cc.success());
        let built = std::fs::read(&exe).unwrap();
        let out = without_debug_sections(&built).unwrap();
        let names = |bytes: &[u8]| -> Vec<String> {
            use object::{Object, ObjectSection};
            let file = object::File::parse(bytes).unwrap();
            file.sections()
                .filter_map(|s| s.name().ok().map(str::to_string))
                .collect()
        };
        assert!(names(&built).iter().any(|n| n == ".debug_info"), "{:?}", names(&built));
        assert!(
            !names(&out).iter().any(|n| n.starts_with(".debug_")),
            "{:?}",
            names(&out)
        );
        assert!(
            names(&out).iter().any(|n| n == ".symtab"),
            "symbols stay: {:?}",
            names(&out)
        );
        assert!(out.len() < built.len());
        assert_eq!(AgentNeeds::of(&out), AgentNeeds::of(&built));
        std::fs::write(&stripped, &out).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&stripped, std::fs::Permissions::from_mode(0o755)).unwrap();
        let ran = std::process::Command::new(&stripped).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&ran.stdout), "hello from the node\n");
        // Not ELF (a stand-in script): unchanged.
        assert_eq!(without_debug_sections(b"#!/bin/sh\n").unwrap(), b"#!/bin/sh\n");
        let _ = std::fs::remove_dir_all(&dir);
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
