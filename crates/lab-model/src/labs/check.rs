//! The checks of a whole document: what no single value shows (unique
//! names, addresses inside the lab's network, settings that fit the
//! provider). Each finding names the offending value by its document path;
//! the parsed tree gives that path's position.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use super::errors::{Located, MINIMAL_EXAMPLE};
use super::{Accel, Document, Fabric, LabSpec, ProviderKind};
use crate::limits::*;
use crate::network::*;
use crate::problem::{did_you_mean, Problem};
use crate::yaml::tree::{render_path, Aim, Node, Pos, Seg};

/// A problem at a document path, still to be located.
#[derive(Debug, Clone)]
pub(super) struct Issue {
    segs: Vec<Seg>,
    aim: Aim,
    problem: Problem,
}

impl Issue {
    fn at(segs: Vec<Seg>, aim: Aim, message: impl Into<String>, fix: impl Into<String>) -> Self {
        Issue {
            segs,
            aim,
            problem: Problem::new(message, fix),
        }
    }

    /// Finds the issue's position in the document's tree; falls back to the
    /// nearest enclosing value that exists (a default that was not written
    /// points at its lab).
    pub(super) fn locate(self, root: Option<&Node>) -> Located {
        let mut segs = self.segs.clone();
        let mut aim = self.aim;
        let pos = loop {
            if let Some(p) = root.and_then(|r| r.find(&segs, aim)) {
                break p;
            }
            if segs.pop().is_none() {
                break Pos { line: 1, column: 1 };
            }
            aim = Aim::Value;
        };
        Located {
            line: pos.line,
            column: pos.column,
            field: render_path(&self.segs),
            problem: self.problem,
        }
    }
}

fn lab_path(i: usize) -> Vec<Seg> {
    vec![Seg::Key("labs".into()), Seg::Index(i)]
}

fn lab_field(i: usize, field: &str) -> Vec<Seg> {
    let mut p = lab_path(i);
    p.push(Seg::Key(field.into()));
    p
}

fn node_field(i: usize, j: usize, field: &str) -> Vec<Seg> {
    let mut p = lab_field(i, "nodes");
    p.push(Seg::Index(j));
    p.push(Seg::Key(field.into()));
    p
}

/// The first problem of the document, if any.
pub(super) fn check_document(doc: &Document) -> Option<Issue> {
    if doc.labs.is_empty() {
        return Some(Issue::at(
            vec![Seg::Key("labs".into())],
            Aim::Key,
            "`labs` is empty: the file defines no labs",
            format!("add at least one lab under `labs:`, e.g.:{MINIMAL_EXAMPLE}"),
        ));
    }
    let mut lab_names: HashMap<&str, usize> = HashMap::new();
    for (i, lab) in doc.labs.iter().enumerate() {
        if let Some(first) = lab_names.insert(&lab.name, i) {
            return Some(Issue::at(
                lab_field(i, "name"),
                Aim::Value,
                format!("a lab named `{}` already exists (labs[{first}])", lab.name),
                "give each lab a different name",
            ));
        }
        if let Some(issue) = check_lab(i, lab) {
            return Some(issue);
        }
    }
    None
}

fn check_lab(i: usize, lab: &LabSpec) -> Option<Issue> {
    if lab.fabric == Fabric::Efa && lab.provider != ProviderKind::Aws {
        return Some(Issue::at(
            lab_field(i, "fabric"),
            Aim::Value,
            format!(
                "fabric efa needs provider aws, but this lab uses provider {}",
                lab.provider
            ),
            "use fabric rxe (SoftRoCE) here, or set provider: aws",
        ));
    }
    if let Some(issue) = check_aws(i, lab) {
        return Some(issue);
    }
    if let Some(issue) = check_ssh(i, lab) {
        return Some(issue);
    }
    if lab.multipass.is_some() && lab.provider != ProviderKind::Multipass {
        return Some(Issue::at(
            lab_field(i, "multipass"),
            Aim::Key,
            format!(
                "`multipass:` applies to provider multipass only; this lab uses provider {}",
                lab.provider
            ),
            "remove the multipass section, or set provider: multipass",
        ));
    }
    if lab.provider == ProviderKind::Multipass {
        if lab.name.starts_with(|c: char| c.is_ascii_digit()) {
            return Some(Issue::at(
                lab_field(i, "name"),
                Aim::Value,
                format!(
                    "lab name `{}` starts with a digit, but Multipass instance names (`<lab>-<node>`) must start with a letter",
                    lab.name
                ),
                format!("rename the lab to start with a letter, like `lab{}`", lab.name),
            ));
        }
        if lab.image != DEFAULT_IMAGE {
            return Some(Issue::at(
                lab_field(i, "image"),
                Aim::Value,
                "with provider multipass the image is set under `multipass:`",
                format!(
                    "remove the image line and write `multipass: {{image: \"{}\"}}`",
                    lab.image
                ),
            ));
        }
        for (j, node) in lab.nodes.iter().enumerate() {
            let field = match (node.data_addr, node.ssh_port) {
                (Some(_), _) => "data_addr",
                (None, Some(_)) => "ssh_port",
                (None, None) => continue,
            };
            return Some(Issue::at(
                node_field(i, j, field),
                Aim::Value,
                format!("{field} does not apply to provider multipass: Multipass gives each node its address, and SSH goes to port 22 there"),
                format!("remove the {field} line"),
            ));
        }
    }
    if lab.provider == ProviderKind::Qemu && !QEMU_IMAGES.contains(&lab.image.as_str()) {
        let hint = did_you_mean(&lab.image, QEMU_IMAGES)
            .map(|m| format!("write `{m}`; "))
            .unwrap_or_default();
        return Some(Issue::at(
            lab_field(i, "image"),
            Aim::Value,
            format!(
                "unknown image `{}` for provider qemu; supported: {}",
                lab.image,
                QEMU_IMAGES.join(", ")
            ),
            format!("{hint}leave image out for the default, {DEFAULT_IMAGE}"),
        ));
    }
    if lab.provider != ProviderKind::Qemu && lab.accel != Accel::Auto {
        return Some(Issue::at(
            lab_field(i, "accel"),
            Aim::Value,
            format!(
                "accel applies to provider qemu only; this lab uses provider {}",
                lab.provider
            ),
            "remove the accel line",
        ));
    }
    let net = lab.data_network;
    if lab.provider == ProviderKind::Qemu && net.overlaps(&QEMU_USER_NETWORK) {
        return Some(Issue::at(
            lab_field(i, "data_network"),
            Aim::Value,
            format!("data_network {net} overlaps {QEMU_USER_NETWORK}, the network QEMU gives each VM for SSH"),
            format!("pick another private network, like {DEFAULT_DATA_NETWORK}"),
        ));
    }
    if lab.nodes.is_empty() {
        return Some(Issue::at(
            lab_field(i, "nodes"),
            Aim::Key,
            "`nodes` is empty: a lab needs at least one node",
            "add nodes under `nodes:`, e.g. `- name: server` and `- name: client`",
        ));
    }
    if lab.nodes.len() > MAX_NODES {
        let mut p = lab_field(i, "nodes");
        p.push(Seg::Index(MAX_NODES));
        return Some(Issue::at(
            p,
            Aim::Value,
            format!("the lab has {} nodes; at most {MAX_NODES} are allowed", lab.nodes.len()),
            "remove nodes from here on, or split them into another lab",
        ));
    }
    let mut names: HashMap<&str, usize> = HashMap::new();
    let mut addrs: HashMap<Ipv4Addr, usize> = HashMap::new();
    let mut ports: HashMap<u16, usize> = HashMap::new();
    for (j, node) in lab.nodes.iter().enumerate() {
        if let Some(first) = names.insert(&node.name, j) {
            return Some(Issue::at(
                node_field(i, j, "name"),
                Aim::Value,
                format!("node name `{}` is already used by nodes[{first}]", node.name),
                "give each node of a lab a different name",
            ));
        }
        if let Some(addr) = node.data_addr {
            if !net.contains(addr) {
                return Some(Issue::at(
                    node_field(i, j, "data_addr"),
                    Aim::Value,
                    format!("{addr} is outside the lab's data_network {net}"),
                    format!(
                        "use an address between {} and {}, or leave data_addr out",
                        net.host(0).unwrap_or(net.network()),
                        net.host(net.host_count().saturating_sub(1)).unwrap_or(net.network())
                    ),
                ));
            }
            if !net.is_host(addr) {
                let which = if addr == net.network() { "network" } else { "broadcast" };
                return Some(Issue::at(
                    node_field(i, j, "data_addr"),
                    Aim::Value,
                    format!("{addr} is the {which} address of {net}, not usable by a node"),
                    format!(
                        "use an address between {} and {}",
                        net.host(0).unwrap_or(net.network()),
                        net.host(net.host_count().saturating_sub(1)).unwrap_or(net.network())
                    ),
                ));
            }
            if let Some(first) = addrs.insert(addr, j) {
                return Some(Issue::at(
                    node_field(i, j, "data_addr"),
                    Aim::Value,
                    format!(
                        "data_addr {addr} is already used by nodes[{first}] ({})",
                        lab.nodes[first].name
                    ),
                    "give each node a different address, or leave data_addr out to get a free one",
                ));
            }
        }
        if let Some(port) = node.ssh_port {
            if let Some(first) = ports.insert(port, j) {
                return Some(Issue::at(
                    node_field(i, j, "ssh_port"),
                    Aim::Value,
                    format!(
                        "ssh_port {port} is already used by nodes[{first}] ({})",
                        lab.nodes[first].name
                    ),
                    "give each node a different ssh_port, or leave it out to get a free one",
                ));
            }
        }
    }
    if (lab.nodes.len() as u64) > net.host_count() {
        return Some(Issue::at(
            lab_field(i, "data_network"),
            Aim::Value,
            format!(
                "data_network {net} has {} host addresses but the lab has {} nodes",
                net.host_count(),
                lab.nodes.len()
            ),
            "use a larger network (a smaller prefix), like /24",
        ));
    }
    None
}

/// provider ssh and fabric existing: the hosts exist, so nothing that sizes
/// or images a machine applies; every node names its host and its data
/// address; the ssh settings and `rdma_device` appear only where they apply.
fn check_ssh(i: usize, lab: &LabSpec) -> Option<Issue> {
    let ssh = lab.provider == ProviderKind::Ssh;
    if lab.fabric == Fabric::Existing && !ssh {
        return Some(Issue::at(
            lab_field(i, "fabric"),
            Aim::Value,
            format!(
                "fabric existing uses RDMA devices that hosts already have, so it needs provider ssh; this lab uses provider {}, whose machines labctl creates without any",
                lab.provider
            ),
            "use fabric rxe (SoftRoCE) here, or set provider: ssh and list the hosts",
        ));
    }
    let ssh_only = |d: &super::NodeDefaults| {
        [
            ("user", d.user.is_some()),
            ("port", d.port.is_some()),
            ("identity_file", d.identity_file.is_some()),
            ("sudo", d.sudo.is_some()),
        ]
        .into_iter()
        .find(|(_, set)| *set)
        .map(|(f, _)| f)
    };
    if !ssh {
        if let Some(field) = ssh_only(&lab.defaults) {
            let mut p = lab_field(i, "defaults");
            p.push(Seg::Key(field.into()));
            return Some(Issue::at(
                p,
                Aim::Key,
                format!(
                    "`{field}` applies to provider ssh only; this lab uses provider {}",
                    lab.provider
                ),
                format!("remove the {field} line, or set provider: ssh"),
            ));
        }
        for (j, node) in lab.nodes.iter().enumerate() {
            let set = [
                ("host", node.host.is_some()),
                ("port", node.port.is_some()),
                ("user", node.user.is_some()),
                ("identity_file", node.identity_file.is_some()),
                ("host_key", node.host_key.is_some()),
                ("sudo", node.sudo.is_some()),
            ];
            if let Some((field, _)) = set.into_iter().find(|(_, s)| *s) {
                return Some(Issue::at(
                    node_field(i, j, field),
                    Aim::Key,
                    format!(
                        "`{field}` applies to provider ssh only (hosts that exist); this lab uses provider {}, which creates its machines",
                        lab.provider
                    ),
                    format!("remove the {field} line, or set provider: ssh"),
                ));
            }
        }
    }
    if lab.fabric != Fabric::Existing {
        if let Some(j) = lab.nodes.iter().position(|n| n.rdma_device.is_some()) {
            return Some(Issue::at(
                node_field(i, j, "rdma_device"),
                Aim::Key,
                format!(
                    "`rdma_device` picks one of the devices a host already has, which is fabric existing; this lab uses fabric {}",
                    lab.fabric
                ),
                "remove the rdma_device line, or set fabric: existing",
            ));
        }
    }
    if !ssh {
        return None;
    }
    let not_here = |what: &str| {
        format!("`{what}` does not apply to provider ssh: the hosts exist already and labctl does not size, image or install them")
    };
    if lab.image != DEFAULT_IMAGE {
        return Some(Issue::at(
            lab_field(i, "image"),
            Aim::Value,
            not_here("image"),
            "remove the image line",
        ));
    }
    if !lab.packages.is_empty() {
        return Some(Issue::at(
            lab_field(i, "packages"),
            Aim::Key,
            not_here("packages"),
            "remove the packages list and install what the lab needs on the hosts yourself (labctl only changes what `down` can undo)",
        ));
    }
    if lab.node_ssh {
        return Some(Issue::at(
            lab_field(i, "node_ssh"),
            Aim::Value,
            "node_ssh is not supported on provider ssh yet: it would install keys into the hosts' accounts",
            "remove the node_ssh line",
        ));
    }
    for (field, set) in [
        ("cpus", lab.defaults.cpus.is_some()),
        ("memory", lab.defaults.memory.is_some()),
    ] {
        if set {
            let mut p = lab_field(i, "defaults");
            p.push(Seg::Key(field.into()));
            return Some(Issue::at(
                p,
                Aim::Key,
                not_here(field),
                format!("remove the {field} line"),
            ));
        }
    }
    let mut endpoints: HashMap<(String, u16), usize> = HashMap::new();
    for (j, node) in lab.nodes.iter().enumerate() {
        let local_only = [
            ("cpus", node.cpus.is_some()),
            ("memory", node.memory.is_some()),
            ("ssh_port", node.ssh_port.is_some()),
        ];
        if let Some((field, _)) = local_only.into_iter().find(|(_, set)| *set) {
            let fix = if field == "ssh_port" {
                "write the host's SSH port as `port:` instead".to_string()
            } else {
                format!("remove the {field} line")
            };
            return Some(Issue::at(node_field(i, j, field), Aim::Key, not_here(field), fix));
        }
        let Some(host) = &node.host else {
            return Some(Issue::at(
                node_field(i, j, "name"),
                Aim::Value,
                format!(
                    "node `{}` has no `host`: provider ssh needs to know which host it is",
                    node.name
                ),
                "add `host: NAME-OR-ADDRESS` to the node (an entry of ~/.ssh/config works too)",
            ));
        };
        if node.data_addr.is_none() {
            return Some(Issue::at(
                node_field(i, j, "name"),
                Aim::Value,
                format!("node `{}` has no `data_addr`: on a host that exists it is the address the RDMA netdev already has", node.name),
                "add `data_addr: A.B.C.D` with the address of the host's RDMA-capable netdev (`ip -br addr` on the host), inside data_network",
            ));
        }
        let port = node.port.or(lab.defaults.port).unwrap_or(22);
        if let Some(first) = endpoints.insert((host.clone(), port), j) {
            return Some(Issue::at(
                node_field(i, j, "host"),
                Aim::Value,
                format!(
                    "{host} port {port} is already nodes[{first}] ({}); two nodes of a lab cannot be one host",
                    lab.nodes[first].name
                ),
                "give each node its own host (or port)",
            ));
        }
    }
    None
}

/// `a.b.c.d/n` with n in 0..=32 (EC2 accepts host bits; it masks them).
fn is_ipv4_cidr(text: &str) -> bool {
    text.split_once('/')
        .is_some_and(|(addr, prefix)| addr.parse::<Ipv4Addr>().is_ok() && prefix.parse::<u8>().is_ok_and(|p| p <= 32))
}

/// The `aws:` block: present exactly for provider aws, one image source,
/// and no node settings that only a local VM has.
fn check_aws(i: usize, lab: &LabSpec) -> Option<Issue> {
    let aws_field = |field: &str| {
        let mut p = lab_field(i, "aws");
        p.push(Seg::Key(field.into()));
        p
    };
    let aws = match (&lab.aws, lab.provider) {
        (None, ProviderKind::Aws) => {
            return Some(Issue::at(
                lab_field(i, "provider"),
                Aim::Value,
                "provider aws needs an `aws:` block saying where the nodes run",
                "add to the lab, e.g.:\n  aws:\n    region: us-east-1\n    instance_type: t3.medium\n    ami_ssm_parameter: /aws/service/canonical/ubuntu/server/24.04/stable/current/amd64/hvm/ebs-gp3/ami-id\n(see docs/providers/aws.md)",
            ))
        }
        (Some(_), provider) if provider != ProviderKind::Aws => {
            return Some(Issue::at(
                lab_field(i, "aws"),
                Aim::Key,
                format!("`aws` applies to provider aws only; this lab uses provider {provider}"),
                "remove the aws block, or set provider: aws",
            ))
        }
        (Some(aws), _) => aws,
        (None, _) => return None,
    };
    match (&aws.ami, &aws.ami_ssm_parameter) {
        (Some(_), Some(_)) => {
            return Some(Issue::at(
                aws_field("ami_ssm_parameter"),
                Aim::Key,
                "both `ami` and `ami_ssm_parameter` are set; the image must come from one of them",
                "keep one of the two lines",
            ))
        }
        (None, None) => {
            return Some(Issue::at(
                lab_field(i, "aws"),
                Aim::Key,
                "the aws block names no image",
                "add `ami: ami-...` or `ami_ssm_parameter: /aws/service/...` under aws",
            ))
        }
        (Some(ami), None) if !ami.starts_with("ami-") => {
            return Some(Issue::at(
                aws_field("ami"),
                Aim::Value,
                format!("`{ami}` is not an AMI id"),
                "write an id like ami-0123456789abcdef0, or use ami_ssm_parameter for a name",
            ))
        }
        _ => {}
    }
    if let Some(zone) = &aws.availability_zone {
        if !zone.starts_with(aws.region.as_str()) || zone.len() == aws.region.len() {
            return Some(Issue::at(
                aws_field("availability_zone"),
                Aim::Value,
                format!("availability zone `{zone}` is not in region {}", aws.region),
                format!(
                    "use a zone of {0}, like {0}a, or leave availability_zone out",
                    aws.region
                ),
            ));
        }
    }
    if let Some(subnet) = aws.subnet_id.as_deref().filter(|s| !s.starts_with("subnet-")) {
        return Some(Issue::at(
            aws_field("subnet_id"),
            Aim::Value,
            format!("`{subnet}` is not a subnet id"),
            "write an id like subnet-0123456789abcdef0, or leave subnet_id out to have labctl create one",
        ));
    }
    if let Some(cidr) = aws.ssh_cidr.as_deref().filter(|c| !is_ipv4_cidr(c)) {
        return Some(Issue::at(
            aws_field("ssh_cidr"),
            Aim::Value,
            format!("`{cidr}` is not an IPv4 CIDR"),
            "write ADDRESS/PREFIX, like 203.0.113.7/32 for one address, or leave ssh_cidr out for this controller's address",
        ));
    }
    if lab.defaults.cpus.is_some() || lab.defaults.memory.is_some() {
        return Some(Issue::at(
            lab_field(i, "defaults"),
            Aim::Key,
            "cpus and memory come from the instance type on provider aws",
            "remove `defaults`, and pick aws.instance_type for the size",
        ));
    }
    for (j, node) in lab.nodes.iter().enumerate() {
        let local_only = [
            ("cpus", node.cpus.is_some(), "the instance type sets it"),
            ("memory", node.memory.is_some(), "the instance type sets it"),
            ("data_addr", node.data_addr.is_some(), "EC2 assigns it from the subnet"),
            ("ssh_port", node.ssh_port.is_some(), "nodes answer SSH on port 22"),
        ];
        if let Some((field, _, why)) = local_only.into_iter().find(|(_, set, _)| *set) {
            return Some(Issue::at(
                node_field(i, j, field),
                Aim::Key,
                format!("`{field}` cannot be set on provider aws: {why}"),
                format!("remove the {field} line"),
            ));
        }
    }
    None
}
