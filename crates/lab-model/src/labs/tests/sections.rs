//! The optional parts of a lab: `packages:` and `node_ssh:`, and the
//! `aws:`, `multipass:` and `ci:` sections.

use std::path::Path;

use super::*;

#[test]
fn test_packages_and_node_ssh_are_read_as_written() {
    let f = LabsFile::parse(
        Path::new("labs.yaml"),
        "labs:\n  - name: mpi\n    packages: [openmpi-bin, libibverbs-dev, g++, libstdc++6, python3.11]\n    node_ssh: true\n    nodes:\n      - name: x\n  - name: plain\n    packages:\n    nodes:\n      - name: y\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mpi = &f.labs[0];
    assert_eq!(
        mpi.packages,
        ["openmpi-bin", "libibverbs-dev", "g++", "libstdc++6", "python3.11"]
    );
    assert!(mpi.node_ssh);
    let plain = &f.labs[1];
    assert!(plain.packages.is_empty() && !plain.node_ssh);
    // Neither field is written out when it has its default.
    let json = serde_json::to_value(plain).unwrap();
    assert!(
        json.get("packages").is_none() && json.get("node_ssh").is_none(),
        "{json}"
    );
    let back: LabSpec = serde_json::from_value(serde_json::to_value(mpi).unwrap()).unwrap();
    assert_eq!(&back, mpi);
}

#[test]
fn test_aws_block_defaults_and_round_trip() {
    let f = LabsFile::parse(
        Path::new("labs.yaml"),
        "labs:\n  - name: c\n    provider: aws\n    fabric: efa\n    aws:\n      region: us-east-1\n      instance_type: c5n.18xlarge\n      ami_ssm_parameter: /aws/service/x\n    nodes:\n      - name: a\n      - name: b\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let lab = &f.labs[0];
    let aws = lab.aws.as_ref().unwrap();
    assert_eq!((lab.provider, lab.fabric), (ProviderKind::Aws, Fabric::Efa));
    assert_eq!(aws.ssh_user, "ubuntu");
    assert_eq!(aws.ssh_address, SshAddress::Public);
    assert_eq!(
        (aws.ami.as_deref(), aws.ami_ssm_parameter.as_deref()),
        (None, Some("/aws/service/x"))
    );
    assert_eq!(
        (
            aws.subnet_id.as_deref(),
            aws.ssh_cidr.as_deref(),
            aws.availability_zone.as_deref()
        ),
        (None, None, None)
    );
    let json = serde_json::to_string(lab).unwrap();
    let back: LabSpec = serde_json::from_str(&json).unwrap();
    assert_eq!(&back, lab);
    // A qemu lab serialises without an aws key at all.
    let qemu = LabsFile::parse(
        Path::new("labs.yaml"),
        "labs:\n  - name: q\n    nodes:\n      - name: a\n",
    )
    .unwrap();
    assert!(!serde_json::to_string(&qemu.labs[0]).unwrap().contains("aws"));
}

#[test]
fn test_multipass_section_defaults_and_errors() {
    let parse = |text: &str| LabsFile::parse(Path::new("labs.yaml"), text);
    let mp = |extra: &str| format!("labs:\n  - name: a\n    provider: multipass\n{extra}    nodes:\n      - name: x\n");
    // Defaults: the current LTS, a 10 GiB disk.
    let lab = parse(&mp("")).unwrap().labs[0].clone();
    assert_eq!(lab.multipass, None);
    assert_eq!(lab.multipass.unwrap_or_default().image, DEFAULT_MULTIPASS_IMAGE);
    let lab = parse(&mp("    multipass:\n      image: \"22.04\"\n      disk: 20G\n"))
        .unwrap()
        .labs[0]
        .clone();
    let spec = lab.multipass.unwrap();
    assert_eq!((spec.image.as_str(), spec.disk.mib()), ("22.04", 20 * 1024));

    let err = |text: String| parse(&text).unwrap_err();
    // An unquoted version is a number to YAML.
    let e = err(mp("    multipass:\n      image: 22.04\n"));
    assert_eq!(e.position(), Some((5, 14)), "{e}");
    assert!(e.fix().contains("quote it"), "{e}");
    let e = err(mp("    multipass:\n      disk: 2GiB\n"));
    assert!(
        e.to_string().contains("disk 2GiB is out of range (4GiB..=64GiB)"),
        "{e}"
    );
    let e = err(mp("    multipass:\n      disks: 8G\n"));
    assert!(e.to_string().contains("unknown field `disks`"), "{e}");
    // The section belongs to provider multipass only.
    let e = err("labs:\n  - name: a\n    multipass:\n      image: \"24.04\"\n    nodes:\n      - name: x\n".into());
    assert_eq!(e.position(), Some((3, 5)), "{e}");
    assert!(e.message().contains("applies to provider multipass only"), "{e}");
    // Settings Multipass decides itself are refused where they are written.
    let e = err(mp("    image: debian-bookworm2\n"));
    assert!(e.message().contains("set under `multipass:`"), "{e}");
    let e = err(
        "labs:\n  - name: a\n    provider: multipass\n    nodes:\n      - name: x\n        ssh_port: 2222\n".into(),
    );
    assert_eq!(e.position(), Some((6, 19)), "{e}");
    assert!(
        e.message().contains("ssh_port does not apply to provider multipass"),
        "{e}"
    );
    let e = err(
        "labs:\n  - name: a\n    provider: multipass\n    nodes:\n      - name: x\n        data_addr: 10.77.0.9\n"
            .into(),
    );
    assert!(e.message().contains("data_addr does not apply"), "{e}");
}

#[test]
fn test_ci_section_is_a_suite() {
    let text = "labs:\n  - name: a\n    nodes:\n      - name: server\n      - name: client\n    ci:\n      workloads:\n        - workload: write-read\n        - name: bw\n          workload: write-bw\n          size: 65536\n";
    let lab = LabsFile::parse(Path::new("labs.yaml"), text).unwrap().labs[0].clone();
    let suite = lab.ci.unwrap();
    assert_eq!(suite.steps.len(), 2);
    assert_eq!(
        (suite.steps[1].name(), suite.steps[1].request.size),
        ("bw".to_string(), Some(65536))
    );
    let bad = text.replace("write-bw", "write-bq");
    let e = LabsFile::parse(Path::new("labs.yaml"), &bad).unwrap_err();
    assert_eq!(e.position(), Some((10, 21)), "{e}");
    assert!(e.message().contains("unknown workload `write-bq`"), "{e}");
    assert_eq!(e.fix(), "write `write-bw`");
}
