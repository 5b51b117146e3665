//! Malformed files: a table of them with the exact located error and fix
//! each must give, the errors the reader finds itself, and how an error is
//! shown.

use std::path::Path;

use super::*;
use crate::labs::errors::NODE_FIELDS;

/// A lab `a` with one node `x`, plus `line` inside that node (line 5,
/// column 9).
fn node_with(line: &str) -> String {
    format!("labs:\n  - name: a\n    nodes:\n      - name: x\n        {line}\n")
}

/// A lab `a` with `line` at lab level (line 3, column 5) and one node `x`.
fn lab_with(line: &str) -> String {
    format!("labs:\n  - name: a\n    {line}\n    nodes:\n      - name: x\n")
}

/// An aws lab `a` with `line` inside its aws block (line 6, column 7),
/// after region, instance type and image.
fn aws_with(line: &str) -> String {
    format!("labs:\n  - name: a\n    provider: aws\n    aws:\n      region: us-east-1\n      {line}\n      instance_type: t3.micro\n      ami: ami-1\n    nodes:\n      - name: x\n")
}

/// A provider ssh, fabric existing lab `a` with one node `x` on host `h1`,
/// plus `line` inside that node (line 9, column 9).
fn ssh_node(line: &str) -> String {
    format!("labs:\n  - name: a\n    provider: ssh\n    fabric: existing\n    nodes:\n      - name: x\n        host: h1\n        data_addr: 10.77.0.1\n        {line}\n")
}

/// A provider ssh lab `a` with `lab` lines (from line 3, column 5) and one
/// node `x` with `node` lines (node's name on the line after them).
fn ssh_lab(lab: &str, node: &str) -> String {
    format!("labs:\n  - name: a\n    {lab}\n    nodes:\n      - name: x\n        {node}\n")
}

struct Case {
    name: &'static str,
    yaml: String,
    line: usize,
    column: usize,
    message: &'static str,
    fix: &'static str,
}

fn case(
    name: &'static str,
    yaml: impl Into<String>,
    line: usize,
    column: usize,
    message: &'static str,
    fix: &'static str,
) -> Case {
    Case {
        name,
        yaml: yaml.into(),
        line,
        column,
        message,
        fix,
    }
}

fn malformed_cases() -> Vec<Case> {
    vec![
        // --- The document as a whole -------------------------------------
        case("empty file", "", 1, 1, "the file is empty", "add at least one lab"),
        case("only comments", "# nothing yet\n\n", 2, 1, "the file is empty", "labs:"),
        case("a scalar", "hello\n", 1, 1, "must be a mapping with a `labs:` key, found the text \"hello\"", "start the file with `labs:`"),
        case("a list", "- a\n- b\n", 1, 1, "must be a mapping with a `labs:` key, found a list", "start the file with `labs:`"),
        case("empty mapping", "{}\n", 1, 1, "the file has no `labs:` key", "start the file with `labs:`"),
        case("labs misspelt", "lab:\n  - name: a\n", 1, 1, "unknown field `lab` in the top level; did you mean `labs`?", "rename `lab` to `labs`"),
        case("nodes at top level", "nodes:\n  - name: x\n", 1, 1, "unknown field `nodes` in the top level", "put this field inside a lab"),
        case("labs empty list", "labs: []\n", 1, 1, "`labs` is empty", "add at least one lab"),
        case("labs without value", "# my labs\nlabs:\n", 2, 1, "`labs` is empty", "add at least one lab"),
        case("labs is a mapping", "labs:\n  name: a\n", 2, 3, "labs must be a list of labs, found a mapping", "list item starting with `- `"),
        case("two documents", "labs:\n  - name: a\n    nodes:\n      - name: x\n---\nlabs: []\n", 5, 1, "more than one YAML document", "remove the extra `---`"),
        // --- YAML syntax ---------------------------------------------------
        case("tab indentation", "labs:\n\t- name: a\n", 2, 1, "tab character is used for indentation", "replace the tabs"),
        case("tab after spaces", "labs:\n  - name: a\n  \tnodes:\n", 3, 3, "tab character", "spaces"),
        case("key dedented", "labs:\n  - name: a\n    nodes:\n      - name: x\n     cpus: 2\n", 5, 6, "does not line up with the keys around it", "check the indentation"),
        case("key under list at list level", "labs:\n  - name: a\n    nodes:\n      - name: x\n      cpus: 1\n", 5, 7, "does not line up with the list items", "check the indentation"),
        case("list item over-indented", "labs:\n  - name: a\n    nodes:\n      - name: x\n       - name: y\n", 5, 8, "does not line up", "check the indentation"),
        case("value with colon", "labs:\n  - name: a: b\n", 2, 12, "unexpected `key: value` here", "check the indentation"),
        case("unclosed quote", "labs:\n  - name: \"a\n    nodes: []\n", 2, 11, "a quoted value that never ends", "close the quote"),
        case("reserved character", "labs:\n  - name: @a\n", 2, 11, "cannot start a YAML value", "double quotes"),
        case("duplicate key", node_with("cpus: 1\n        cpus: 2"), 6, 9, "`cpus` is given twice", "remove the other"),
        // --- Shapes --------------------------------------------------------
        case("lab is a string", "labs:\n  - local\n", 2, 5, "each lab must be a mapping", "`- name: NAME`"),
        case("lab without name", "labs:\n  - nodes:\n      - name: x\n", 2, 5, "this lab has no `name`", "add `name: NAME`"),
        case("lab without nodes", "labs:\n  - name: a\n", 2, 5, "this lab has no `nodes`", "add `nodes:`"),
        case("nodes empty list", "labs:\n  - name: a\n    nodes: []\n", 3, 5, "`nodes` is empty", "add nodes under `nodes:`"),
        case("nodes without value", "labs:\n  - name: a\n    nodes:\n", 3, 5, "`nodes` is empty", "add nodes"),
        case("nodes is a mapping", "labs:\n  - name: a\n    nodes:\n      name: x\n", 4, 7, "nodes must be a list of nodes, found a mapping", "one node per item"),
        case("node is a string", "labs:\n  - name: a\n    nodes:\n      - server\n", 4, 9, "each node must be a mapping", "a bare `- NAME` is not enough"),
        case("node without name", "labs:\n  - name: a\n    nodes:\n      - cpus: 2\n", 4, 9, "this node has no `name`", "add `name: NAME`"),
        case("defaults is a list", lab_with("defaults: [1]"), 3, 15, "defaults must be a mapping", "`cpus:` and/or `memory:`"),
        case("too many nodes", lab_of(17), 20, 9, "the lab has 17 nodes; at most 16", "remove nodes"),
        // --- Unknown fields ------------------------------------------------
        case("node field typo", node_with("cpu: 2"), 5, 9, "unknown field `cpu` in a node; did you mean `cpus`?", "rename `cpu` to `cpus`"),
        case("node field alias", node_with("ram: 2GiB"), 5, 9, "did you mean `memory`?", "rename `ram` to `memory`"),
        case("node field unrelated", node_with("color: red"), 5, 9, "unknown field `color` in a node; expected one of `name`, `cpus`", "remove `color`"),
        case("lab field typo", lab_with("provder: qemu"), 3, 5, "unknown field `provder` in a lab; did you mean `provider`?", "rename `provder` to `provider`"),
        case("node setting on lab", lab_with("cpus: 2"), 3, 5, "unknown field `cpus` in a lab", "put it under `defaults:`"),
        case("lab setting on node", node_with("data_network: 10.1.0.0/24"), 5, 9, "unknown field `data_network` in a node", "move it up to the lab"),
        case("per-node field in defaults", lab_with("defaults:\n      ssh_port: 2222"), 4, 7, "unknown field `ssh_port` in defaults", "set it on each node"),
        case("dashed field name", node_with("ssh-port: 2222"), 5, 9, "did you mean `ssh_port`?", "rename `ssh-port` to `ssh_port`"),
        // --- Names ---------------------------------------------------------
        case("lab name uppercase", "labs:\n  - name: Lab1\n    nodes:\n      - name: x\n", 2, 11, "lab name `Lab1` is not valid: uppercase letters are not allowed", "e.g. `lab1`"),
        case("lab name underscore", "labs:\n  - name: my_lab\n    nodes:\n      - name: x\n", 2, 11, "`_` is not allowed", "e.g. `my-lab`"),
        case("lab name too long", "labs:\n  - name: abcdefghijklmnopqrstuvwxyz0123456\n    nodes:\n      - name: x\n", 2, 11, "is 33 characters long; the limit is 31", "at most 31 characters"),
        case("lab name starts with dash", "labs:\n  - name: -a\n    nodes:\n      - name: x\n", 2, 11, "may not start with `-`", "e.g. `a`"),
        case("lab name empty", "labs:\n  - name: \"\"\n    nodes:\n      - name: x\n", 2, 11, "the lab name is empty", "give the lab a name"),
        case("node name trailing dash", "labs:\n  - name: a\n    nodes:\n      - name: db-\n", 4, 15, "may not start or end with `-`", "e.g. `db`"),
        case("node name with dot", "labs:\n  - name: a\n    nodes:\n      - name: db.local\n", 4, 15, "`.` is not allowed", "e.g. `db-local`"),
        case("node name empty", "labs:\n  - name: a\n    nodes:\n      - name:\n", 4, 14, "the node name is empty", "give the node a name"),
        case("node name is a list", "labs:\n  - name: a\n    nodes:\n      - name: [a]\n", 4, 15, "a node name must be text, found a list", "lowercase letters"),
        case("duplicate node name", "labs:\n  - name: a\n    nodes:\n      - name: x\n      - name: y\n      - name: x\n", 6, 15, "node name `x` is already used by nodes[0]", "different name"),
        case("duplicate node name, flow style", "labs:\n  - name: a\n    nodes: [{name: a}, {name: a}]\n", 3, 31, "node name `a` is already used", "different name"),
        case("duplicate lab name", "labs:\n  - name: a\n    nodes:\n      - name: x\n  - name: a\n    nodes:\n      - name: y\n", 5, 11, "a lab named `a` already exists (labs[0])", "different name"),
        // --- Enumerations and image ----------------------------------------
        case("provider typo", lab_with("provider: qmeu"), 3, 15, "unknown provider `qmeu`; supported: qemu, multipass, aws, ssh", "write `qemu`"),
        case("provider unknown", lab_with("provider: docker"), 3, 15, "unknown provider `docker`; supported: qemu, multipass, aws", "use one of: qemu, multipass, aws"),
        case("provider is a number", lab_with("provider: 1"), 3, 15, "provider must be one of qemu, multipass, aws, ssh, found the number 1", "write one of"),
        case("fabric unknown", lab_with("fabric: roce"), 3, 13, "unknown fabric `roce`; supported: rxe, efa, none, existing", "leave fabric out for the default, rxe"),
        case("accel uppercase", lab_with("accel: KVM"), 3, 12, "unknown accel `KVM`; supported: auto, kvm, tcg", "write `kvm`"),
        case("efa on qemu", lab_with("fabric: efa"), 3, 13, "fabric efa needs provider aws, but this lab uses provider qemu", "use fabric rxe"),
        case("accel on multipass", lab_with("provider: multipass\n    accel: kvm"), 4, 12, "accel applies to provider qemu only", "remove the accel line"),
        case("unknown qemu image", lab_with("image: ubuntu-jammy"), 3, 12, "unknown image `ubuntu-jammy` for provider qemu; supported: debian-bookworm", "leave image out"),
        case("qemu image typo", lab_with("image: debian-bookwrom"), 3, 12, "unknown image `debian-bookwrom`", "write `debian-bookworm`"),
        case("image empty", lab_with("image: \"\""), 3, 12, "image is empty", "leave image out"),
        // --- cpus ----------------------------------------------------------
        case("cpus zero", node_with("cpus: 0"), 5, 15, "0 is out of range (1..=64)", "set cpus to a whole number between 1 and 64"),
        case("cpus too many", node_with("cpus: 65"), 5, 15, "65 is out of range (1..=64)", "between 1 and 64"),
        case("cpus negative", node_with("cpus: -2"), 5, 15, "-2 is out of range (1..=64)", "between 1 and 64"),
        case("cpus quoted", node_with("cpus: \"2\""), 5, 15, "cpus must be a whole number, found the text \"2\"", "remove the quotes: cpus: 2"),
        case("cpus fraction", node_with("cpus: 1.5"), 5, 15, "cpus must be a whole number, found 1.5", "between 1 and 64"),
        case("cpus boolean", node_with("cpus: true"), 5, 15, "cpus must be a whole number, found the boolean true", "between 1 and 64"),
        case("defaults cpus zero", lab_with("defaults:\n      cpus: 0"), 4, 13, "0 is out of range (1..=64)", "between 1 and 64"),
        // --- memory --------------------------------------------------------
        case("memory plain small number", node_with("memory: 2"), 5, 17, "2 is below the minimum of 256MiB", "did you mean 2GiB?"),
        case("memory too small", node_with("memory: 128MiB"), 5, 17, "128MiB is below the minimum of 256MiB", "use at least 256MiB"),
        case("memory too large", node_with("memory: 128GiB"), 5, 17, "128GiB is above the maximum of 64GiB", "use at most 64GiB"),
        case("memory unknown unit", node_with("memory: 1Gx"), 5, 17, "`1Gx` has an unknown unit `Gx`", "use MiB or GiB"),
        case("memory in TiB", node_with("memory: 999TiB"), 5, 17, "`999TiB` is far more than the most allowed here (64 GiB)", "write at most 64GiB"),
        case("NUL byte", "labs:\n  - name: a\u{0}b\n    nodes:\n      - name: x\n", 2, 12, "the file contains a NUL byte (U+0000); labs.yaml must be plain text", "delete it"),
        case("negative size in ci", "labs:\n  - name: a\n    ci:\n      workloads:\n        - workload: write-bw\n          size: -4096\n    nodes:\n      - name: x\n", 6, 17, "-4096 is not a size", "like 65536 or 64KiB"),
        case("size with a bad unit in ci", "labs:\n  - name: a\n    ci:\n      workloads:\n        - workload: write-bw\n          size: 4 parsecs\n    nodes:\n      - name: x\n", 6, 17, "`4 parsecs` is not a size", "like 65536 or 64KiB"),
        case("multipass lab name starting with a digit", "labs:\n  - name: 1lab\n    provider: multipass\n    nodes:\n      - name: x\n", 2, 11, "lab name `1lab` starts with a digit, but Multipass instance names", "rename the lab to start with a letter"),
        case("memory not a size", node_with("memory: lots"), 5, 17, "`lots` is not a memory size", "like 512MiB, 1GiB"),
        case("memory fraction of MiB", node_with("memory: 1.3G"), 5, 17, "`1.3G` is not a whole number of MiB", "round it"),
        case("memory in KiB", node_with("memory: 4096KiB"), 5, 17, "too small to be a node's memory", "in MiB or GiB"),
        case("memory negative", node_with("memory: -1"), 5, 17, "-1 is not a memory size", "like 512MiB"),
        case("defaults memory bad", lab_with("defaults:\n      memory: 1 TB"), 4, 15, "`1 TB` is far more than the most allowed here (64 GiB)", "write at most 64GiB"),
        // --- data network and addresses ------------------------------------
        case("network without prefix", lab_with("data_network: 10.77.0.0"), 3, 19, "the /PREFIX is missing", "write ADDRESS/PREFIX, like 10.77.0.0/24"),
        case("network prefix too long", lab_with("data_network: 10.77.0.0/31"), 3, 19, "the prefix /31 is out of range (/8..=/30)", "between /8 and /30"),
        case("network bad prefix", lab_with("data_network: 10.77.0.0/xx"), 3, 19, "`/xx` is not a prefix length", "between /8 and /30"),
        case("network bad address", lab_with("data_network: 10.77.0/24"), 3, 19, "`10.77.0` is not an IPv4 address", "write ADDRESS/PREFIX"),
        case("network host bits", lab_with("data_network: 10.77.0.5/24"), 3, 19, "`10.77.0.5/24` has host bits set", "10.77.0.0/24"),
        case("network is a number", lab_with("data_network: 10"), 3, 19, "data_network must be ADDRESS/PREFIX, found the number 10", "10.77.0.0/24"),
        case("network overlaps qemu", lab_with("data_network: 10.0.0.0/16"), 3, 19, "overlaps 10.0.2.0/24, the network QEMU gives each VM", "pick another private network"),
        case("network too small", "labs:\n  - name: a\n    data_network: 10.77.0.0/30\n    nodes:\n      - name: a\n      - name: b\n      - name: c\n", 3, 19, "has 2 host addresses but the lab has 3 nodes", "use a larger network"),
        case("data_addr outside", node_with("data_addr: 10.78.0.2"), 5, 20, "10.78.0.2 is outside the lab's data_network 10.77.0.0/24", "between 10.77.0.1 and 10.77.0.254"),
        case("data_addr network address", node_with("data_addr: 10.77.0.0"), 5, 20, "10.77.0.0 is the network address of 10.77.0.0/24", "between 10.77.0.1 and 10.77.0.254"),
        case("data_addr broadcast", node_with("data_addr: 10.77.0.255"), 5, 20, "10.77.0.255 is the broadcast address", "between 10.77.0.1 and 10.77.0.254"),
        case("data_addr not an address", node_with("data_addr: 10.77.0.300"), 5, 20, "`10.77.0.300` is not an IPv4 address", "like 10.77.0.2"),
        case("data_addr with prefix", node_with("data_addr: 10.77.0.2/24"), 5, 20, "has a prefix; it is a single address", "write just the address, `10.77.0.2`"),
        case("data_addr is a number", node_with("data_addr: 7"), 5, 20, "data_addr must be an IPv4 address, found the number 7", "like 10.77.0.2"),
        case("data_addr duplicate", "labs:\n  - name: a\n    nodes:\n      - name: x\n        data_addr: 10.77.0.5\n      - name: y\n        data_addr: 10.77.0.5\n", 7, 20, "data_addr 10.77.0.5 is already used by nodes[0] (x)", "different address"),
        case("data_addr outside custom network", "labs:\n  - name: a\n    nodes:\n      - name: x\n        data_addr: 10.77.0.9\n    data_network: 192.168.50.0/28\n", 5, 20, "outside the lab's data_network 192.168.50.0/28", "between 192.168.50.1 and 192.168.50.14"),
        // --- ssh_port ------------------------------------------------------
        case("ssh_port privileged", node_with("ssh_port: 22"), 5, 19, "22 is out of range (1024..=65535)", "like 2222"),
        case("ssh_port too large", node_with("ssh_port: 70000"), 5, 19, "70000 is out of range (1024..=65535)", "between 1024 and 65535"),
        case("ssh_port duplicate", "labs:\n  - name: a\n    nodes:\n      - name: x\n        ssh_port: 2222\n      - name: y\n        ssh_port: 2222\n", 7, 19, "ssh_port 2222 is already used by nodes[0] (x)", "different ssh_port"),
        // --- packages and node_ssh -----------------------------------------
        case("package uppercase", lab_with("packages: [gcc, Make]"), 3, 21, "package name `Make` is not valid: uppercase letters are not allowed", "write `make`"),
        case("package version pinned", lab_with("packages: [gcc=4:12.2.0-3]"), 3, 16, "`=` pins a version", "write the name alone: `gcc`"),
        case("package architecture", lab_with("packages: [\"libc6:i386\"]"), 3, 16, "`:` names an architecture", "write the name alone: `libc6`"),
        case("two packages in one item", lab_with("packages:\n      - gcc make"), 4, 9, "package name `gcc make` is not valid: it holds more than one name", "`packages: [gcc, make]`"),
        case("package starts with a dash", lab_with("packages: [\"-gcc\"]"), 3, 16, "it must start with a letter or digit", "lowercase letters, digits, `+`, `-` and `.`"),
        case("package one character", lab_with("packages: [x]"), 3, 16, "package name `x` is not valid: it is one character long", "at least 2 characters"),
        case("package underscore", lab_with("packages: [libfoo_dev]"), 3, 16, "package name `libfoo_dev` is not valid: `_` is not allowed", "lowercase letters"),
        case("package is a number", lab_with("packages: [7]"), 3, 16, "a package name must be text, found the number 7", "like `gcc`"),
        case("package empty item", lab_with("packages:\n      -\n      - gcc"), 4, 8, "a package name is empty", "remove the empty list item"),
        case("packages not a list", lab_with("packages: gcc make"), 3, 15, "packages must be a list of package names, found the text \"gcc make\"", "`packages: [gcc, make]`"),
        case("field typo in a part without a name of its own", lab_with("provider: multipass\n    multipass:\n      imag: 24.04"), 5, 7, "unknown field `imag` in `labs[0].multipass`; did you mean `image`?", "rename `imag` to `image`"),
        case("packages typo", lab_with("pakages: [gcc]"), 3, 5, "unknown field `pakages` in a lab; did you mean `packages`?", "rename `pakages` to `packages`"),
        case("node_ssh not a boolean", lab_with("node_ssh: yes"), 3, 15, "node_ssh must be true or false, found the text \"yes\"", "node_ssh: true"),
        // --- aws -----------------------------------------------------------
        case("aws without its block", lab_with("provider: aws"), 3, 15, "provider aws needs an `aws:` block", "instance_type: t3.medium"),
        case("aws block on a qemu lab", lab_with("aws: {region: us-east-1, instance_type: t3.micro, ami: ami-1}"), 3, 5, "`aws` applies to provider aws only; this lab uses provider qemu", "remove the aws block"),
        case("aws field typo", aws_with("instance_typ: t3.micro"), 6, 7, "unknown field `instance_typ` in aws; did you mean `instance_type`?", "rename `instance_typ` to `instance_type`"),
        case("aws region missing", "labs:\n  - name: a\n    provider: aws\n    aws:\n      instance_type: t3.micro\n      ami: ami-1\n    nodes:\n      - name: x\n", 5, 7, "`region` is missing in aws", "add `region:`"),
        case("aws both images", aws_with("ami_ssm_parameter: /aws/service/x"), 6, 7, "both `ami` and `ami_ssm_parameter` are set", "keep one"),
        case("aws no image", "labs:\n  - name: a\n    provider: aws\n    aws:\n      region: us-east-1\n      instance_type: t3.micro\n    nodes:\n      - name: x\n", 4, 5, "the aws block names no image", "ami_ssm_parameter"),
        case("aws ami not an id", "labs:\n  - name: a\n    provider: aws\n    aws:\n      region: us-east-1\n      instance_type: t3.micro\n      ami: ubuntu\n    nodes:\n      - name: x\n", 7, 12, "`ubuntu` is not an AMI id", "ami-0123456789abcdef0"),
        case("aws zone outside region", aws_with("availability_zone: eu-west-1a"), 6, 26, "availability zone `eu-west-1a` is not in region us-east-1", "like us-east-1a"),
        case("aws subnet not an id", aws_with("subnet_id: vpc-123"), 6, 18, "`vpc-123` is not a subnet id", "subnet-0123456789abcdef0"),
        case("aws ssh_cidr bad", aws_with("ssh_cidr: 203.0.113.7"), 6, 17, "`203.0.113.7` is not an IPv4 CIDR", "203.0.113.7/32"),
        case("aws ssh_address unknown", aws_with("ssh_address: elastic"), 6, 20, "unknown ssh_address `elastic`; supported: public, private", "use one of: public, private"),
        case("aws node cpus", "labs:\n  - name: a\n    provider: aws\n    aws: {region: us-east-1, instance_type: t3.micro, ami: ami-1}\n    nodes:\n      - name: x\n        cpus: 2\n", 7, 9, "`cpus` cannot be set on provider aws: the instance type sets it", "remove the cpus line"),
        case("aws node ssh_port", "labs:\n  - name: a\n    provider: aws\n    aws: {region: us-east-1, instance_type: t3.micro, ami: ami-1}\n    nodes:\n      - name: x\n        ssh_port: 2222\n", 7, 9, "`ssh_port` cannot be set on provider aws", "remove the ssh_port line"),
        case("aws defaults", "labs:\n  - name: a\n    provider: aws\n    aws: {region: us-east-1, instance_type: t3.micro, ami: ami-1}\n    defaults: {cpus: 2}\n    nodes:\n      - name: x\n", 5, 5, "cpus and memory come from the instance type on provider aws", "remove `defaults`"),
        // --- provider ssh and fabric existing -------------------------------
        case("ssh host_key garbage", ssh_node("host_key: hello"), 9, 19, "host_key `hello` is neither a public key nor a SHA256 fingerprint", "ssh-keyscan"),
        case("ssh host_key short fingerprint", ssh_node("host_key: SHA256:abc"), 9, 19, "is not a SHA256 fingerprint: after `SHA256:` come 43 base64 characters", "ssh-keygen -lf"),
        case("ssh port zero", ssh_node("port: 0"), 9, 15, "0 is out of range (1..=65535)", "the host's SSH port"),
        case("ssh sudo text", ssh_node("sudo: yes please"), 9, 15, "sudo must be true or false, found the text", "sudo -n"),
        case("ssh host starts with dash", ssh_lab("provider: ssh\n    fabric: existing", "host: \"-oProxyCommand=x\""), 7, 15, "host `-oProxyCommand=x` starts with `-`", "a host name"),
        case("ssh node without host", ssh_lab("provider: ssh\n    fabric: existing", "data_addr: 10.77.0.1"), 6, 15, "node `x` has no `host`", "add `host: NAME-OR-ADDRESS`"),
        case("ssh node without data_addr", ssh_lab("provider: ssh\n    fabric: existing", "host: h1"), 6, 15, "node `x` has no `data_addr`", "ip -br addr"),
        case("ssh image", ssh_lab("provider: ssh\n    fabric: existing\n    image: ubuntu", "host: h1"), 5, 12, "`image` does not apply to provider ssh", "remove the image line"),
        case("ssh packages", ssh_lab("provider: ssh\n    fabric: existing\n    packages: [gcc]", "host: h1"), 5, 5, "`packages` does not apply to provider ssh", "install what the lab needs on the hosts yourself"),
        case("ssh cpus", ssh_node("cpus: 2"), 9, 9, "`cpus` does not apply to provider ssh", "remove the cpus line"),
        case("ssh ssh_port", ssh_node("ssh_port: 2222"), 9, 9, "`ssh_port` does not apply to provider ssh", "as `port:` instead"),
        case("ssh two nodes one host", "labs:\n  - name: a\n    provider: ssh\n    fabric: existing\n    nodes:\n      - {name: x, host: h1, data_addr: 10.77.0.1}\n      - {name: y, host: h1, data_addr: 10.77.0.2}\n", 7, 25, "h1 port 22 is already nodes[0] (x); two nodes of a lab cannot be one host", "its own host"),
        case("existing on qemu", lab_with("fabric: existing"), 3, 13, "fabric existing uses RDMA devices that hosts already have, so it needs provider ssh", "set provider: ssh"),
        case("host on qemu", node_with("host: h1"), 5, 9, "`host` applies to provider ssh only (hosts that exist); this lab uses provider qemu", "remove the host line"),
        case("user in defaults on qemu", lab_with("defaults:\n      user: ubuntu"), 4, 7, "`user` applies to provider ssh only; this lab uses provider qemu", "set provider: ssh"),
        case("rdma_device without existing", ssh_lab("provider: ssh\n    fabric: none", "host: h1\n        data_addr: 10.77.0.1\n        rdma_device: mlx5_0"), 9, 9, "`rdma_device` picks one of the devices a host already has, which is fabric existing; this lab uses fabric none", "set fabric: existing"),
        case("rdma_device bad character", ssh_node("rdma_device: mlx5/0"), 9, 22, "rdma_device `mlx5/0` contains `/`", "ibv_devices"),
        // --- Errors in a later lab point into that lab ---------------------
        case("error in second lab", "labs:\n  - name: a\n    nodes:\n      - name: x\n  - name: b\n    nodes:\n      - name: y\n        cpus: 100\n", 8, 15, "100 is out of range", "between 1 and 64"),
        case("aliases point at the anchored value", "labs:\n  - name: a\n    nodes:\n      - &n {name: x}\n      - *n\n", 4, 19, "node name `x` is already used", "different name"),
    ]
}

#[test]
fn test_malformed_files_give_located_messages_with_fixes() {
    let cases = malformed_cases();
    assert!(
        cases.len() >= 40,
        "the table must keep at least 40 cases, has {}",
        cases.len()
    );
    let mut names = HashSet::new();
    let mut failures = Vec::new();
    for c in &cases {
        assert!(names.insert(c.name), "duplicate case name {}", c.name);
        let err = match LabsFile::parse(Path::new("labs.yaml"), &c.yaml) {
            Ok(_) => {
                failures.push(format!("[{}] parsed, but must fail\n{}", c.name, c.yaml));
                continue;
            }
            Err(e) => e,
        };
        let shown = err.to_string();
        let ConfigError::Invalid {
            line,
            column,
            message,
            fix,
            ..
        } = &err
        else {
            failures.push(format!("[{}] not an Invalid error: {shown}", c.name));
            continue;
        };
        let mut wrong = Vec::new();
        if (*line, *column) != (c.line, c.column) {
            wrong.push(format!("at {line}:{column}, expected {}:{}", c.line, c.column));
        }
        if !message.contains(c.message) {
            wrong.push(format!("message lacks {:?}", c.message));
        }
        if !fix.contains(c.fix) {
            wrong.push(format!("fix lacks {:?}", c.fix));
        }
        if !shown.starts_with(&format!("labs.yaml:{line}:{column}: ")) || !shown.contains("\n  fix: ") {
            wrong.push("display is not `labs.yaml:LINE:COL: ...\\n  fix: ...`".into());
        }
        if shown.contains(FRAME_START) || shown.contains(FRAME_END) || shown.contains(" at line ") {
            wrong.push("display leaks internal markers".into());
        }
        if !wrong.is_empty() {
            failures.push(format!(
                "[{}] {}\n--- yaml ---\n{}--- got ---\n{shown}",
                c.name,
                wrong.join("; "),
                c.yaml
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
}

#[test]
fn test_display_shape() {
    let err = LabsFile::parse(Path::new("labs.yaml"), &node_with("cpus: 0")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "labs.yaml:5:15: labs[0].nodes[0].cpus: 0 is out of range (1..=64)\n  fix: set cpus to a whole number between 1 and 64"
    );
    assert_eq!(err.position(), Some((5, 15)));
    assert_eq!(err.fix(), "set cpus to a whole number between 1 and 64");
    assert_eq!(err.path(), Path::new("labs.yaml"));
}

#[test]
fn test_multi_line_fix_is_indented() {
    let err = LabsFile::parse(Path::new("x.yaml"), "").unwrap_err().to_string();
    assert!(err.contains("e.g.:\n         labs:\n           - name: local"), "{err}");
}

/// Errors the reader finds itself (not serde's derived code): duplicate
/// keys in any mapping, nesting and alias limits, unclosed brackets and
/// unknown anchors, each at its place.
#[test]
fn test_reader_errors_are_located() {
    let at = |text: &str| {
        let e = LabsFile::parse(Path::new("labs.yaml"), text).unwrap_err();
        (e.position().unwrap(), e.to_string())
    };
    let (pos, e) = at("labs:\n  - name: a\n    nodes: [{name: a, name: b}]\n");
    assert_eq!(pos, (3, 23), "{e}");
    assert!(
        e.contains("labs[0].nodes[0].name: `name` is given twice in a node"),
        "{e}"
    );
    let (pos, e) = at("labs:\n  - name: a\n    nodes:\n      - name: x\nlabs: []\n");
    assert_eq!(pos, (5, 1), "{e}");
    assert!(e.contains("`labs` is given twice in the top level"), "{e}");
    let (pos, e) = at(&format!("labs: {}", "[".repeat(100)));
    assert_eq!(pos.0, 1, "{e}");
    assert!(e.contains("nested more than 64 deep"), "{e}");
    let bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n";
    let (pos, e) = at(bomb);
    assert_eq!(pos.0, 5, "{e}");
    assert!(e.contains("aliases (`*name`) repeat too many values"), "{e}");
    let (pos, e) = at("labs: [a\n");
    assert_eq!(pos, (1, 7), "{e}");
    assert!(e.contains("a `[` or `{` that is never closed"), "{e}");
    let (pos, e) = at("labs:\n  - name: a\n    nodes:\n      - name: x\n  - *nope\n");
    assert_eq!(pos, (5, 5), "{e}");
    assert!(e.contains("names no anchor"), "{e}");
    // serde's own list of fields serves the parts without a list here.
    let (pos, e) = at("labs:\n  - name: a\n    nodes:\n      - name: x\n    ci:\n      stepz: []\n");
    assert_eq!(pos, (6, 7), "{e}");
    assert!(e.contains("did you mean `steps`?"), "{e}");
    // A tag that makes a number text is read as text.
    let (pos, e) = at("labs:\n  - name: a\n    nodes:\n      - name: x\n        cpus: !!str 2\n");
    assert_eq!(pos, (5, 21), "{e}");
    assert!(e.contains("found the text \"2\""), "{e}");
}

#[test]
fn test_suggestions() {
    assert_eq!(did_you_mean("cpu", NODE_FIELDS), Some("cpus"));
    assert_eq!(did_you_mean("memroy", NODE_FIELDS), Some("memory"));
    assert_eq!(did_you_mean("Name", NODE_FIELDS), Some("name"));
    assert_eq!(did_you_mean("zebra", NODE_FIELDS), None);
}
