//! Good files resolved: defaults and overrides, data addresses, choosing a
//! lab, loading from disk, and ssh labs' targets.

use std::path::Path;

use super::*;

#[test]
fn test_defaults_apply_when_absent() {
    let f = LabsFile::parse(
        Path::new("labs.yaml"),
        "labs:\n  - name: a\n    nodes:\n      - name: x\n",
    )
    .unwrap();
    let lab = &f.labs[0];
    assert_eq!(lab.provider, ProviderKind::Qemu);
    assert_eq!(lab.fabric, Fabric::Rxe);
    assert_eq!(lab.image, "debian-bookworm");
    assert_eq!(lab.accel, Accel::Auto);
    assert_eq!(lab.data_network, DEFAULT_DATA_NETWORK);
    assert_eq!(lab.data_network.to_string(), "10.77.0.0/24");
    assert_eq!(lab.defaults, NodeDefaults::default());
    let nodes = lab.resolve_nodes();
    assert_eq!(
        nodes,
        vec![ResolvedNode {
            index: 0,
            name: "x".into(),
            cpus: 1,
            memory_mib: 1024,
            data_addr: Ipv4Addr::new(10, 77, 0, 1),
            data_prefix: 24,
            ssh_port: None,
            ssh: None,
            rdma_device: None,
        }]
    );
}

#[test]
fn test_empty_values_mean_default() {
    let yaml = "labs:\n  - name: a\n    provider:\n    fabric:\n    image:\n    accel:\n    data_network:\n    defaults:\n    nodes:\n      - name: x\n        cpus:\n        memory:\n        data_addr:\n        ssh_port:\n";
    let f = LabsFile::parse(Path::new("labs.yaml"), yaml).unwrap();
    let lab = &f.labs[0];
    assert_eq!(
        (lab.provider, lab.fabric, lab.accel),
        (ProviderKind::Qemu, Fabric::Rxe, Accel::Auto)
    );
    assert_eq!(lab.image, DEFAULT_IMAGE);
    assert_eq!(lab.data_network, DEFAULT_DATA_NETWORK);
    assert_eq!(lab.nodes[0].cpus, None);
}

#[test]
fn test_node_overrides_defaults_override_builtins() {
    let f = LabsFile::parse(Path::new("labs.yaml"), TWO_LABS).unwrap();
    let local = f.select(Some("local")).unwrap();
    let nodes = local.resolve_nodes();
    assert_eq!((nodes[0].cpus, nodes[0].memory_mib), (2, 2048));
    assert_eq!((nodes[1].cpus, nodes[1].memory_mib), (4, 1536));
    assert_eq!(nodes[1].index, 1);
    assert_eq!(nodes[1].data_addr, Ipv4Addr::new(10, 77, 0, 2));
}

#[test]
fn test_addresses_fill_in_order_skipping_explicit_ones() {
    let f = LabsFile::parse(Path::new("labs.yaml"), TWO_LABS).unwrap();
    let quad = f.select(Some("quad")).unwrap();
    let nodes = quad.resolve_nodes();
    let addrs: Vec<String> = nodes.iter().map(|n| n.data_addr.to_string()).collect();
    // n1 and n3 are explicit (.2 and .1); n2 and n4 take the first free: .3, .4.
    assert_eq!(addrs, ["192.168.7.2", "192.168.7.3", "192.168.7.1", "192.168.7.4"]);
    assert!(nodes.iter().all(|n| n.data_prefix == 29));
    assert_eq!(nodes[2].ssh_port, Some(2300));
    assert_eq!(nodes[3].memory_mib, 512);
    assert_eq!(nodes[3].cpus, 1);
    assert_eq!((quad.fabric, quad.accel), (Fabric::None, Accel::Tcg));
}

#[test]
fn test_multiple_labs_and_select() {
    let f = LabsFile::parse(Path::new("labs.yaml"), TWO_LABS).unwrap();
    assert_eq!(f.names(), ["local", "quad"]);
    assert_eq!(f.select(None).unwrap().name, "local");
    assert_eq!(f.select(Some("quad")).unwrap().nodes.len(), 4);
    assert_eq!(f.path, Path::new("labs.yaml"));
}

#[test]
fn test_unknown_lab_lists_names() {
    let f = LabsFile::parse(Path::new("labs.yaml"), TWO_LABS).unwrap();
    let err = f.select(Some("big")).unwrap_err();
    match &err {
        ConfigError::UnknownLab { name, available, .. } => {
            assert_eq!(name, "big");
            assert_eq!(available, &["local", "quad"]);
        }
        other => panic!("expected UnknownLab, got {other:?}"),
    }
    let shown = err.to_string();
    assert!(
        shown.contains("no lab named `big`; the labs in this file are: local, quad"),
        "{shown}"
    );
    assert!(shown.contains("fix: use --lab with one of: local, quad"), "{shown}");
    let typo = f.select(Some("qaud")).unwrap_err().to_string();
    assert!(typo.contains("did you mean `--lab quad`?"), "{typo}");
}

#[test]
fn test_missing_file_says_where_labctl_looks() {
    let path = std::env::temp_dir().join(format!("labctl-no-such-{}/labs.yaml", std::process::id()));
    let err = LabsFile::load(&path).unwrap_err();
    assert!(matches!(err, ConfigError::NotFound { .. }), "{err:?}");
    let shown = err.to_string();
    assert!(shown.contains("file not found"), "{shown}");
    assert!(shown.contains("./labs.yaml") && shown.contains("-f FILE"), "{shown}");
}

#[test]
fn test_load_reads_the_file_and_keeps_its_path() {
    let dir = std::env::temp_dir().join(format!("labctl-model-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("my-labs.yaml");
    std::fs::write(
        &path,
        "labs:\n  - name: a\n    nodes:\n      - name: x\n        cpus: 99\n",
    )
    .unwrap();
    let err = LabsFile::load(&path).unwrap_err().to_string();
    assert!(err.starts_with(&format!("{}:5:15: ", path.display())), "{err}");
    std::fs::write(&path, TWO_LABS).unwrap();
    let f = LabsFile::load(&path).unwrap();
    assert_eq!(f.path, path);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn test_sixteen_nodes_are_fine() {
    let f = LabsFile::parse(Path::new("labs.yaml"), &lab_of(16)).unwrap();
    assert_eq!(f.labs[0].resolve_nodes()[15].data_addr, Ipv4Addr::new(10, 77, 0, 16));
}

#[test]
fn test_ssh_lab_resolves_targets_with_defaults() {
    let f = LabsFile::parse(
        Path::new("labs.yaml"),
        "labs:\n  - name: bench\n    provider: ssh\n    fabric: existing\n    data_network: 192.168.50.0/24\n    defaults: {user: lab, identity_file: ~/.ssh/lab_ed25519}\n    nodes:\n      - name: a\n        host: cx1.lab.example\n        data_addr: 192.168.50.11\n        host_key: SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s\n        rdma_device: mlx5_0\n      - name: b\n        host: cx2\n        port: 2200\n        user: root\n        sudo: false\n        data_addr: 192.168.50.12\n        host_key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl root@cx2\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let lab = &f.labs[0];
    assert_eq!((lab.provider, lab.fabric), (ProviderKind::Ssh, Fabric::Existing));
    assert_eq!(lab.libfabric_provider(), "verbs;ofi_rxm");
    let nodes = lab.resolve_nodes();
    let a = nodes[0].ssh.as_ref().unwrap();
    assert_eq!(
        (
            a.host.as_str(),
            a.port,
            a.user.as_deref(),
            a.identity_file.as_deref(),
            a.sudo
        ),
        ("cx1.lab.example", None, Some("lab"), Some("~/.ssh/lab_ed25519"), None)
    );
    assert_eq!(nodes[0].rdma_device.as_deref(), Some("mlx5_0"));
    assert_eq!(nodes[0].data_addr, Ipv4Addr::new(192, 168, 50, 11));
    let b = nodes[1].ssh.as_ref().unwrap();
    assert_eq!(
        (b.port, b.user.as_deref(), b.sudo),
        (Some(2200), Some("root"), Some(false))
    );
    // The key is kept without its comment: the comment is not part of the key.
    assert_eq!(
        b.host_key.as_deref(),
        Some("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl")
    );
    assert_eq!(nodes[1].rdma_device, None);
    let json = serde_json::to_string(lab).unwrap();
    let back: LabSpec = serde_json::from_str(&json).unwrap();
    assert_eq!(&back, lab);
    // A qemu node resolves without an ssh target.
    let q = LabsFile::parse(
        Path::new("labs.yaml"),
        "labs:\n  - name: q\n    nodes:\n      - name: a\n",
    )
    .unwrap();
    assert_eq!(q.labs[0].resolve_nodes()[0].ssh, None);
}
