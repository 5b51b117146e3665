//! What makes a node itself: the identity archive appended to the shared
//! initramfs (its name, data address, keys and preloaded files), the node's
//! initrd built from both, and the least memory a node needs to boot it.

use std::fs;
use std::io::Write;
use std::path::Path;

use crate::node_agent::AGENT_PORT;
use crate::provider::ProviderError;
use crate::{HostKeyPair, PreloadFile};
use lab_model::ResolvedNode;

/// The node's identity archive, appended to the shared initramfs: who it
/// is, its keys, and the `preload` files (the agent, its secret and port,
/// so the image's init starts the agent as the node boots).
#[allow(clippy::too_many_arguments)] // each a separate part of the node's identity
pub(super) fn identity_cpio(
    node: &ResolvedNode,
    all: &[ResolvedNode],
    mgmt_mac: &str,
    data_mac: &str,
    authorized_key: &str,
    host_key: &HostKeyPair,
    preload: &[PreloadFile],
    soft_roce: bool,
) -> std::io::Result<Vec<u8>> {
    let env = format!(
        "LAB_HOSTNAME={}\nLAB_MGMT_MAC={mgmt_mac}\nLAB_DATA_MAC={data_mac}\nLAB_DATA_ADDR={}\nLAB_DATA_PREFIX={}\n",
        node.name, node.data_addr, node.data_prefix
    );
    // Every node resolves every other by name on the data link (libfabric's
    // verbs provider needs the local hostname to resolve).
    let mut hosts = String::from("127.0.0.1 localhost\n");
    for other in all {
        hosts.push_str(&format!("{} {}\n", other.data_addr, other.name));
    }
    // The host key labctl generated: boot.sh creates one only when none is
    // there, so sshd presents exactly the key already pinned in the state.
    let mut files: Vec<(String, u32, Vec<u8>)> = [
        ("etc/lab/node.env", 0o100644, env),
        ("etc/hosts", 0o100644, hosts),
        ("etc/hostname", 0o100644, format!("{}\n", node.name)),
        ("root/.ssh", 0o040700, String::new()),
        (
            "root/.ssh/authorized_keys",
            0o100600,
            format!("{}\n", authorized_key.trim()),
        ),
        (
            "etc/ssh/ssh_host_ed25519_key",
            0o100600,
            format!("{}\n", host_key.private_openssh.trim()),
        ),
        (
            "etc/ssh/ssh_host_ed25519_key.pub",
            0o100644,
            format!("{}\n", host_key.public.trim()),
        ),
    ]
    .into_iter()
    .map(|(name, mode, text)| (name.to_string(), mode, text.into_bytes()))
    .collect();
    if !preload.is_empty() {
        // agent-run reads the port from here (agent-start.sh writes it on
        // nodes that were not given the agent at boot).
        let mut agent_env = format!("AGENT_PORT={AGENT_PORT}\n");
        if soft_roce {
            // An agent sets FI_UNIVERSE_SIZE itself when it starts on a node with
            // a software RoCE device (verbs;ofi_rxm cannot size its CQs for
            // libfabric's default of 256 peers on rxe); one started at boot starts
            // before the rxe link exists, so it is told here. 16: the agent's own
            // value (rdma-agent's SOFT_ROCE_UNIVERSE_SIZE).
            agent_env.push_str("export FI_UNIVERSE_SIZE=16\n");
        }
        files.push(("etc/lab/agent.env".into(), 0o100644, agent_env.into_bytes()));
    }
    for file in preload {
        let path = file.path.trim_start_matches('/');
        // The kernel creates no missing directories: each parent gets an
        // entry first (one that exists keeps its owner, and takes 0755).
        let mut parent = String::new();
        for dir in path
            .split('/')
            .collect::<Vec<_>>()
            .split_last()
            .map_or(&[][..], |(_, d)| d)
        {
            parent = if parent.is_empty() {
                dir.to_string()
            } else {
                format!("{parent}/{dir}")
            };
            if !files.iter().any(|(name, _, _)| *name == parent) {
                files.push((parent.clone(), 0o040755, Vec::new()));
            }
        }
        files.push((path.to_string(), 0o100000 | (file.mode & 0o7777), file.bytes.to_vec()));
    }
    let mut out = Vec::new();
    for (ino, (name, mode, content)) in files.iter().enumerate() {
        let mut w = cpio::newc::Builder::new(name)
            .ino(ino as u32 + 1)
            .mode(*mode)
            .nlink(1)
            .write(&mut out, content.len() as u32);
        w.write_all(content)?;
        w.finish()?;
    }
    cpio::newc::trailer(&mut out)?;
    Ok(out)
}

/// What follows the shared image of `base_len` bytes in a node's initrd:
/// its identity archive, which the kernel reads only at a 4-byte aligned
/// offset (it skips zero padding), so padded first.
fn identity_tail(base_len: u64, identity: &[u8]) -> Vec<u8> {
    let pad = ((4 - base_len % 4) % 4) as usize;
    let mut out = vec![0; pad];
    out.extend_from_slice(identity);
    out
}

/// Writes a node's initrd: a copy of the shared image (made by the kernel,
/// `copy_file_range`, not through this process) and the node's identity.
pub(super) fn write_initrd(base: &Path, initrd: &Path, identity: &[u8]) -> Result<(), ProviderError> {
    let io = |context: String| move |source| ProviderError::Io { context, source };
    let base_len = fs::copy(base, initrd).map_err(io(format!("copying {} to {}", base.display(), initrd.display())))?;
    // The identity carries the node's host key and the lab's agent secret:
    // readable by the owner only, like the state's own agent.secret.
    fs::set_permissions(initrd, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(io(format!("restricting {}", initrd.display())))?;
    fs::OpenOptions::new()
        .append(true)
        .open(initrd)
        .and_then(|mut file| file.write_all(&identity_tail(base_len, identity)))
        .map_err(io(format!("writing {}", initrd.display())))
}

/// The least memory a node booting an initramfs of `initramfs_bytes` needs:
/// the kernel holds the archive while it unpacks the root filesystem (as
/// large, uncompressed) into RAM, plus room for the kernel and the node's
/// work; in 64 MiB steps. Measured on the 158 MiB image: 512 MiB fails to
/// unpack ("write error"), 640 MiB boots.
fn min_memory_mib(initramfs_bytes: u64) -> u64 {
    let archive_mib = initramfs_bytes.div_ceil(1 << 20);
    (2 * archive_mib + 320).div_ceil(64) * 64
}

/// Refuses nodes too small to boot the image, before any VM starts.
pub(super) fn check_memory(nodes: &[ResolvedNode], initramfs_bytes: u64) -> Result<(), ProviderError> {
    let need = min_memory_mib(initramfs_bytes);
    let small: Vec<String> = nodes
        .iter()
        .filter(|n| n.memory_mib < need)
        .map(|n| {
            format!(
                "node `{}`: memory {}MiB is too small for a QEMU node: its root filesystem ({} MiB) is unpacked into RAM beside its initramfs\n  fix: give it at least `memory: {need}MiB` in labs.yaml",
                n.name,
                n.memory_mib,
                initramfs_bytes.div_ceil(1 << 20)
            )
        })
        .collect();
    if small.is_empty() {
        Ok(())
    } else {
        Err(ProviderError::Preflight(small.join("\n")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(index: usize, name: &str) -> ResolvedNode {
        ResolvedNode {
            index,
            name: name.into(),
            cpus: 1,
            memory_mib: 1024,
            data_addr: std::net::Ipv4Addr::new(10, 77, 0, index as u8 + 1),
            data_prefix: 24,
            ssh_port: None,
            ssh: None,
            rdma_device: None,
        }
    }

    #[test]
    fn test_identity_archive_carries_name_address_login_key_and_host_key() {
        let nodes = vec![node(0, "server"), node(1, "client")];
        let archive = identity_cpio(
            &nodes[1],
            &nodes,
            "52:54:00:00:02:01",
            "52:54:00:01:02:02",
            "ssh-ed25519 AAAA test",
            &HostKeyPair {
                private_openssh: "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbg==\n-----END OPENSSH PRIVATE KEY-----"
                    .into(),
                public: "ssh-ed25519 AAAAhost".into(),
            },
            &[PreloadFile {
                path: "/etc/labctl/agent.secret".into(),
                mode: 0o600,
                bytes: std::sync::Arc::new(b"00ff\n".to_vec()),
            }],
            true,
        )
        .unwrap();
        let mut reader = std::io::Cursor::new(archive);
        let mut files = std::collections::HashMap::new();
        loop {
            let mut entry = cpio::newc::Reader::new(&mut reader).unwrap();
            if entry.entry().is_trailer() {
                break;
            }
            let name = entry.entry().name().to_string();
            let mode = entry.entry().mode();
            let mut text = String::new();
            std::io::Read::read_to_string(&mut entry, &mut text).unwrap();
            files.insert(name, (mode, text));
            entry.finish().unwrap();
        }
        assert!(files["etc/lab/node.env"].1.contains("LAB_HOSTNAME=client"));
        assert!(files["etc/lab/node.env"].1.contains("LAB_DATA_ADDR=10.77.0.2"));
        assert!(files["etc/hosts"].1.contains("10.77.0.1 server"));
        assert_eq!(files["root/.ssh/authorized_keys"].0 & 0o777, 0o600);
        assert_eq!(files["root/.ssh/authorized_keys"].1, "ssh-ed25519 AAAA test\n");
        // The host key labctl generated, private half readable by root only.
        assert_eq!(files["etc/ssh/ssh_host_ed25519_key"].0 & 0o777, 0o600);
        assert!(files["etc/ssh/ssh_host_ed25519_key"]
            .1
            .starts_with("-----BEGIN OPENSSH PRIVATE KEY-----\n"));
        assert_eq!(files["etc/ssh/ssh_host_ed25519_key.pub"].1, "ssh-ed25519 AAAAhost\n");
        // A preloaded file, after an entry for its directory, and the
        // agent's port beside it.
        assert_eq!(files["etc/labctl"].0, 0o040755);
        assert_eq!(files["etc/labctl/agent.secret"], (0o100600, "00ff\n".to_string()));
        assert_eq!(
            files["etc/lab/agent.env"].1,
            "AGENT_PORT=7470\nexport FI_UNIVERSE_SIZE=16\n"
        );
    }

    #[test]
    fn test_small_nodes_are_refused_before_any_vm_starts() {
        // The 158 MiB image: 512 MiB failed to unpack it, 640 MiB booted.
        let image = 165_085_184;
        assert_eq!(min_memory_mib(image), 640);
        let mut nodes = vec![node(0, "a"), node(1, "b")];
        nodes[0].memory_mib = 640;
        nodes[1].memory_mib = 512;
        let e = check_memory(&nodes, image).unwrap_err().to_string();
        assert!(
            e.contains("node `b`: memory 512MiB is too small") && e.contains("at least `memory: 640MiB`"),
            "{e}"
        );
        assert!(!e.contains("node `a`"), "{e}");
        nodes[1].memory_mib = 1024;
        assert!(check_memory(&nodes, image).is_ok());
    }

    #[test]
    fn test_identity_starts_4_byte_aligned_after_the_base() {
        let dir = std::env::temp_dir().join(format!("labctl-initrd-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        for base_len in 0..8 {
            let base = dir.join("base");
            fs::write(&base, vec![0x1f; base_len]).unwrap();
            let initrd = dir.join("initrd");
            write_initrd(&base, &initrd, b"070701").unwrap();
            let out = fs::read(&initrd).unwrap();
            let at = out.len() - 6;
            assert_eq!(at % 4, 0, "base of {base_len} bytes");
            assert!(out[..base_len].iter().all(|b| *b == 0x1f));
            assert!(out[base_len..at].iter().all(|b| *b == 0));
            assert_eq!(&out[at..], b"070701");
            let mode = std::os::unix::fs::PermissionsExt::mode(&fs::metadata(&initrd).unwrap().permissions());
            assert_eq!(mode & 0o777, 0o600, "the initrd holds secrets");
        }
        fs::remove_dir_all(&dir).unwrap();
    }
}
