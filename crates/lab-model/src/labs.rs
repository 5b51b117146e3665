//! The `labs.yaml` model: what a lab is, how the file is read, and how it is
//! checked.
//!
//! A `labs.yaml` holds one or more labs; each lab names a provider (where the
//! machines run), a fabric (how RDMA is provided), and a list of nodes:
//!
//! ```yaml
//! labs:
//!   - name: local
//!     nodes:
//!       - name: server
//!       - name: client
//! ```
//!
//! [`LabsFile::load`] reads and checks a file; every problem comes back as a
//! [`ConfigError`] that names the file, line and column, says what is wrong
//! and how to fix it:
//!
//! ```text
//! labs.yaml:12:16: labs[0].nodes[1].cpus: 0 is out of range (1..=64)
//!   fix: set cpus to a whole number between 1 and 64
//! ```
//!
//! # How positions are found
//!
//! Checks of a single value (a name, a size, an address) run inside the
//! `Deserialize` impls, while the YAML parser still points at the value, so
//! their errors carry its position. Checks that need the whole lab (unique
//! names, addresses inside the network, fabric versus provider) run on the
//! parsed model; the offending value is then located by a second, cheap pass
//! over the text (`locate`) that walks to the value's path and fails there
//! on purpose, which makes the parser report that value's line and column.
//!
//! [`json_schema`] gives a JSON Schema of the format for editors; the shipped
//! copy is `docs/labs.schema.json` and a test keeps the two equal.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use schemars::JsonSchema;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::limits::*;
use crate::memory::*;
use crate::network::*;
use crate::problem::*;
use crate::scalar::*;

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// Everything that can be wrong with a labs file. Each variant's `Display`
/// gives the file (and, where there is one, line and column), what is wrong,
/// and on a second line, `  fix: ...`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file was read but its content is wrong.
    #[error("{}:{line}:{column}: {}{message}\n  fix: {}", path.display(), field_prefix(field), indent_fix(fix))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line of the offending text.
        line: usize,
        /// 1-based column of the offending text.
        column: usize,
        /// Where in the document, like `labs[0].nodes[1].cpus`; empty for the
        /// document itself.
        field: String,
        /// What is wrong.
        message: String,
        /// How to fix it.
        fix: String,
    },
    /// The file does not exist.
    #[error("{}: file not found\n  fix: {fix}", path.display())]
    NotFound {
        /// The file.
        path: PathBuf,
        /// How to fix it.
        fix: String,
    },
    /// The file exists but could not be read.
    #[error("{}: cannot read the file: {source}\n  fix: {fix}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
        /// How to fix it.
        fix: String,
    },
    /// `--lab NAME` names no lab of the file.
    #[error("{}: no lab named `{name}`; the labs in this file are: {}\n  fix: {fix}", path.display(), available.join(", "))]
    UnknownLab {
        /// The file.
        path: PathBuf,
        /// The name asked for.
        name: String,
        /// The names the file has, in order.
        available: Vec<String>,
        /// How to fix it.
        fix: String,
    },
}

/// Continuation lines of a fix line up under its first line.
fn indent_fix(fix: &str) -> String {
    fix.replace('\n', "\n       ")
}

fn field_prefix(field: &str) -> String {
    if field.is_empty() {
        String::new()
    } else {
        format!("{field}: ")
    }
}

impl ConfigError {
    /// The file concerned.
    pub fn path(&self) -> &Path {
        match self {
            ConfigError::Invalid { path, .. }
            | ConfigError::NotFound { path, .. }
            | ConfigError::Read { path, .. }
            | ConfigError::UnknownLab { path, .. } => path,
        }
    }

    /// 1-based line and column, for errors about the file's content.
    pub fn position(&self) -> Option<(usize, usize)> {
        match self {
            ConfigError::Invalid { line, column, .. } => Some((*line, *column)),
            _ => None,
        }
    }

    /// What is wrong, without file, position or fix.
    pub fn message(&self) -> String {
        match self {
            ConfigError::Invalid { message, .. } => message.clone(),
            ConfigError::NotFound { .. } => "file not found".into(),
            ConfigError::Read { source, .. } => format!("cannot read the file: {source}"),
            ConfigError::UnknownLab { name, available, .. } => {
                format!(
                    "no lab named `{name}`; the labs in this file are: {}",
                    available.join(", ")
                )
            }
        }
    }

    /// How to fix it.
    pub fn fix(&self) -> &str {
        match self {
            ConfigError::Invalid { fix, .. }
            | ConfigError::NotFound { fix, .. }
            | ConfigError::Read { fix, .. }
            | ConfigError::UnknownLab { fix, .. } => fix,
        }
    }
}

/// The message of the deliberate failure [`locate`] provokes.
const LOCATE_MARK: &str = "\u{4}labctl-locate\u{4}";

// ---------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------

/// A parsed and checked labs file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LabsFile {
    /// Where it was read from (used in messages).
    pub path: PathBuf,
    /// The labs, in file order; the first is the default.
    pub labs: Vec<LabSpec>,
}

/// The document as written: the top level of `labs.yaml`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "labs.yaml",
    description = "Labs for labctl: each lab is a set of VMs joined by an RDMA-capable data network. labctl uses the first lab unless given --lab NAME."
)]
struct Document {
    /// The labs; the first one is the default.
    #[schemars(length(min = 1))]
    labs: Vec<LabSpec>,
}

/// One lab: a provider, a fabric and a list of nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LabSpec {
    /// The lab's name, unique in the file: lowercase letters, digits and `-`,
    /// starting with a letter or digit, at most 31 characters.
    #[serde(deserialize_with = "de_lab_name")]
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9-]{0,30}$"))]
    pub name: String,
    /// Where the machines run.
    #[serde(default)]
    pub provider: ProviderKind,
    /// How the nodes get RDMA.
    #[serde(default)]
    pub fabric: Fabric,
    /// The OS image of every node. qemu: `debian-bookworm` (the built-in image).
    #[serde(default = "default_image", deserialize_with = "de_image")]
    #[schemars(length(min = 1), example = &"debian-bookworm")]
    pub image: String,
    /// qemu only: how QEMU runs the VMs.
    #[serde(default)]
    pub accel: Accel,
    /// The IPv4 network of the nodes' data NICs, as ADDRESS/PREFIX. Nodes get
    /// the first free host addresses in order unless they set `data_addr`.
    #[serde(default = "default_data_network")]
    pub data_network: Ipv4Network,
    /// Settings that apply to every node that does not set them itself.
    #[serde(default)]
    pub defaults: NodeDefaults,
    /// The nodes (1 to 16), in order.
    #[schemars(length(min = 1, max = 16))]
    pub nodes: Vec<NodeSpec>,
    /// provider aws only (and required there): where and how the nodes run
    /// in EC2. See docs/providers/aws.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws: Option<AwsSpec>,
    /// provider multipass only: the Ubuntu image and disk of every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multipass: Option<MultipassSpec>,
    /// The suite `labctl ci` runs on this lab (unless given `--suite FILE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci: Option<crate::suite::Suite>,
    /// Debian/Ubuntu packages the lab's programs need on every node, by
    /// their package names (like `gcc`, `libibverbs-dev`, `openmpi-bin`):
    /// qemu bakes them into the node image (an image of their own, built
    /// once and cached); multipass and aws install them with apt-get at `up`.
    #[serde(default, deserialize_with = "de_packages", skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(regex(pattern = r"^[a-z0-9][a-z0-9+.-]+$")), example = &PACKAGES_EXAMPLE)]
    pub packages: Vec<String>,
    /// Let the nodes `ssh` each other by name or data address, without
    /// prompts, as the login user (what `mpirun --hostfile
    /// /etc/labctl/hostfile` needs): `up` installs a key pair of the lab's
    /// own and every node's host key on every node. Default: false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub node_ssh: bool,
}

/// An example of `packages:` for the schema.
const PACKAGES_EXAMPLE: [&str; 2] = ["gcc", "openmpi-bin"];

/// The `aws:` block of a lab (provider aws).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AwsSpec {
    /// The EC2 region, like `us-east-1`.
    #[schemars(length(min = 1), example = &"us-east-1")]
    pub region: String,
    /// The availability zone, like `us-east-1a`; all nodes run there.
    /// Default: the given subnet's zone, else one EC2 picks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability_zone: Option<String>,
    /// The instance type, like `c5n.18xlarge` (EFA) or `t3.medium` (rxe).
    #[schemars(length(min = 1), example = &"c5n.18xlarge")]
    pub instance_type: String,
    /// The image, as an AMI id (`ami-...`). Give `ami` or `ami_ssm_parameter`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami: Option<String>,
    /// The image, as an SSM parameter holding an AMI id, like
    /// `/aws/service/canonical/ubuntu/server/24.04/stable/current/amd64/hvm/ebs-gp3/ami-id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_ssm_parameter: Option<String>,
    /// The image's SSH user (`ubuntu` on Ubuntu, `ec2-user` on Amazon Linux).
    /// Default: `ubuntu`.
    #[serde(default = "default_aws_ssh_user")]
    pub ssh_user: String,
    /// An existing subnet (`subnet-...`) to launch into; its VPC is used.
    /// Default: labctl creates a VPC, subnet and internet gateway for the lab.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet_id: Option<String>,
    /// Who may reach the nodes' SSH, as an IPv4 CIDR. Default: this
    /// controller's public address (looked up at `up`), as a /32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_cidr: Option<String>,
    /// Which address of a node labctl connects to.
    #[serde(default)]
    pub ssh_address: SshAddress,
}

fn default_aws_ssh_user() -> String {
    "ubuntu".to_string()
}

/// Settings of `provider: multipass`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MultipassSpec {
    /// The image `multipass launch` boots, as `multipass find` names it
    /// (`24.04`, `22.04`, `noble`, ...). Default: 24.04.
    #[serde(default = "default_multipass_image", deserialize_with = "de_multipass_image")]
    #[schemars(length(min = 1), example = &"24.04")]
    pub image: String,
    /// Disk of every node, 4GiB to 64GiB. Default: 10GiB.
    #[serde(default = "default_multipass_disk", deserialize_with = "de_multipass_disk")]
    pub disk: MemorySize,
}

impl Default for MultipassSpec {
    fn default() -> Self {
        MultipassSpec {
            image: default_multipass_image(),
            disk: default_multipass_disk(),
        }
    }
}

/// Per-lab defaults for nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeDefaults {
    /// vCPUs per node (1 to 64). Built-in default: 1.
    #[serde(default, deserialize_with = "de_cpus", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub cpus: Option<u32>,
    /// Memory per node, 256MiB to 64GiB. Built-in default: 1GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemorySize>,
}

/// One node (one VM) of a lab.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// The node's hostname, unique in the lab: lowercase letters, digits and
    /// `-`, starting and ending with a letter or digit, at most 31 characters.
    #[serde(deserialize_with = "de_node_name")]
    #[schemars(regex(pattern = r"^[a-z0-9]([a-z0-9-]{0,29}[a-z0-9])?$"))]
    pub name: String,
    /// vCPUs (1 to 64); default: the lab's `defaults.cpus`, else 1.
    #[serde(default, deserialize_with = "de_cpus", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub cpus: Option<u32>,
    /// Memory, 256MiB to 64GiB; default: the lab's `defaults.memory`, else 1GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemorySize>,
    /// The data NIC's address: inside `data_network`, not its network or
    /// broadcast address, unique in the lab. Default: the next free host
    /// address.
    #[serde(default, deserialize_with = "de_data_addr", skip_serializing_if = "Option::is_none")]
    pub data_addr: Option<Ipv4Addr>,
    /// A fixed host port (1024 to 65535) forwarded to the node's SSH port.
    /// Default: a free port picked at `up`.
    #[serde(default, deserialize_with = "de_ssh_port", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1024, max = 65535))]
    pub ssh_port: Option<u16>,
}

/// A node with every default applied: what a provider creates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedNode {
    /// Position in the lab's `nodes` list, from 0.
    pub index: usize,
    /// Hostname.
    pub name: String,
    /// vCPUs.
    pub cpus: u32,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// Address of the data NIC.
    pub data_addr: Ipv4Addr,
    /// Prefix length of the data network.
    pub data_prefix: u8,
    /// Fixed SSH port on the host, if labs.yaml asked for one.
    pub ssh_port: Option<u16>,
}

fn default_data_network() -> Ipv4Network {
    DEFAULT_DATA_NETWORK
}

// ---------------------------------------------------------------------------
// Enumerations
// ---------------------------------------------------------------------------

macro_rules! yaml_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident ($what:literal) {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )+
        }
        default $default:ident;
        fix $fix:literal;
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, JsonSchema)]
        pub enum $name {
            $( $(#[$vmeta])* #[serde(rename = $text)] $variant, )+
        }

        impl $name {
            /// Every value, in the order the docs list them.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The value as written in labs.yaml.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            fn names() -> Vec<&'static str> {
                Self::ALL.iter().map(|v| v.as_str()).collect()
            }
        }

        impl Default for $name {
            fn default() -> Self {
                $name::$default
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, String> {
                Self::ALL
                    .iter()
                    .copied()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| format!("unknown {} `{}`; supported: {}", $what, s, Self::names().join(", ")))
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                scalar(d, |v| match v {
                    Scalar::Null => Ok($name::default()),
                    Scalar::Str(s) => s.parse::<$name>().map_err(|message| {
                        let names = Self::names();
                        let hint = did_you_mean(&s, &names)
                            .map(|m| format!("write `{m}`"))
                            .unwrap_or_else(|| format!("use one of: {}", names.join(", ")));
                        Problem::new(message, format!("{hint}; {}", $fix))
                    }),
                    other => Err(Problem::new(
                        format!("{} must be one of {}, found {}", $what, Self::names().join(", "), other.describe()),
                        format!("write one of: {}", Self::names().join(", ")),
                    )),
                })
            }
        }
    };
}

yaml_enum! {
    /// Where a lab's machines run (`provider:`).
    pub enum ProviderKind ("provider") {
        /// Local QEMU VMs (the default).
        Qemu = "qemu",
        /// Canonical Multipass VMs.
        Multipass = "multipass",
        /// Amazon EC2 instances.
        Aws = "aws",
    }
    default Qemu;
    fix "leave provider out for the default, qemu";
}

yaml_enum! {
    /// How the nodes get RDMA (`fabric:`).
    pub enum Fabric ("fabric") {
        /// SoftRoCE: the kernel's `rdma_rxe` over the data NIC (the default).
        Rxe = "rxe",
        /// AWS Elastic Fabric Adapter (provider aws only).
        Efa = "efa",
        /// No RDMA device; plain TCP workloads only.
        None = "none",
    }
    default Rxe;
    fix "leave fabric out for the default, rxe (SoftRoCE)";
}

impl Fabric {
    /// The libfabric provider that goes with this fabric when `--provider` is
    /// not given: rxe → `verbs;ofi_rxd` (the verbs RDM provider that works
    /// over rxe with libfabric's defaults; `verbs;ofi_rxm` works there too
    /// because the agent bounds `FI_UNIVERSE_SIZE` on soft RoCE), none →
    /// `tcp;ofi_rxm`, efa → `efa`.
    pub fn libfabric_provider(self) -> &'static str {
        match self {
            Fabric::Rxe => "verbs;ofi_rxd",
            Fabric::None => "tcp;ofi_rxm",
            Fabric::Efa => "efa",
        }
    }
}

yaml_enum! {
    /// Which address of an EC2 node the controller connects to (`aws.ssh_address:`).
    pub enum SshAddress ("ssh_address") {
        /// The public IPv4 address (the default; the controller is outside the VPC).
        Public = "public",
        /// The private address (the controller runs inside the VPC).
        Private = "private",
    }
    default Public;
    fix "leave ssh_address out for the default, public";
}

yaml_enum! {
    /// How QEMU runs the VMs (`accel:`, provider qemu only).
    pub enum Accel ("accel") {
        /// KVM when /dev/kvm is usable, else TCG (the default).
        Auto = "auto",
        /// Hardware virtualisation; fails if /dev/kvm is not usable.
        Kvm = "kvm",
        /// Software emulation: slower, works everywhere.
        Tcg = "tcg",
    }
    default Auto;
    fix "leave accel out for the default, auto (KVM when usable, else TCG)";
}

// ---------------------------------------------------------------------------
// Memory sizes
// ---------------------------------------------------------------------------

// ---------------------------------------------------------------------------
// IPv4 networks
// ---------------------------------------------------------------------------

// ---------------------------------------------------------------------------
// Scalar checks, run while the parser points at the value
// ---------------------------------------------------------------------------

// ---------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------

impl LabsFile {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<LabsFile, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ConfigError::NotFound {
                    path: path.to_path_buf(),
                    fix: format!(
                        "labctl looks for ./{DEFAULT_FILE} in the current directory; run it where your {DEFAULT_FILE} is, or pass -f FILE"
                    ),
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(ConfigError::Read {
                    path: path.to_path_buf(),
                    source: e,
                    fix: "save the file as UTF-8 text".into(),
                })
            }
            Err(e) => {
                return Err(ConfigError::Read {
                    path: path.to_path_buf(),
                    source: e,
                    fix: "check that the path is a readable file, or pass another with -f FILE".into(),
                })
            }
        };
        Self::parse(path, &text)
    }

    /// Parses and checks `text`; `path` is used only in messages.
    pub fn parse(path: &Path, text: &str) -> Result<LabsFile, ConfigError> {
        let fail = |at: Located| ConfigError::Invalid {
            path: path.to_path_buf(),
            line: at.line,
            column: at.column,
            field: at.field,
            message: at.problem.message,
            fix: at.problem.fix,
        };
        if let Some(at) = precheck(text) {
            return Err(fail(at));
        }
        let doc: Document = serde_yaml_ng::from_str(text).map_err(|e| fail(translate(text, &e)))?;
        if let Some(issue) = check_document(&doc) {
            return Err(fail(issue.locate(text)));
        }
        Ok(LabsFile {
            path: path.to_path_buf(),
            labs: doc.labs,
        })
    }

    /// The lab called `name`, or the first lab when `name` is `None`.
    pub fn select(&self, name: Option<&str>) -> Result<&LabSpec, ConfigError> {
        let names: Vec<String> = self.labs.iter().map(|l| l.name.clone()).collect();
        let found = match name {
            None => self.labs.first(),
            Some(n) => self.labs.iter().find(|l| l.name == n),
        };
        found.ok_or_else(|| {
            let name = name.unwrap_or_default().to_string();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let fix = match did_you_mean(&name, &refs) {
                Some(m) => format!(
                    "did you mean `--lab {m}`? or add a lab named `{name}` to {}",
                    self.path.display()
                ),
                None if names.is_empty() => format!("add a lab to {}", self.path.display()),
                None => format!(
                    "use --lab with one of: {}, or add a lab named `{name}` to {}",
                    names.join(", "),
                    self.path.display()
                ),
            };
            ConfigError::UnknownLab {
                path: self.path.clone(),
                name,
                available: names,
                fix,
            }
        })
    }

    /// The names of the labs, in file order.
    pub fn names(&self) -> Vec<&str> {
        self.labs.iter().map(|l| l.name.as_str()).collect()
    }
}

impl LabSpec {
    /// The nodes with every default applied, in order: a node's own setting
    /// wins over the lab's `defaults`, which win over the built-in defaults
    /// (1 vCPU, 1 GiB). Nodes without `data_addr` get the lowest host
    /// addresses of `data_network` that no node claims explicitly.
    ///
    /// A checked lab always has enough addresses; should one not, the extra
    /// nodes get the broadcast address rather than a panic.
    pub fn resolve_nodes(&self) -> Vec<ResolvedNode> {
        let net = self.data_network;
        let taken: HashSet<Ipv4Addr> = self.nodes.iter().filter_map(|n| n.data_addr).collect();
        let mut free = (0..net.host_count())
            .filter_map(|i| net.host(i))
            .filter(|a| !taken.contains(a));
        self.nodes
            .iter()
            .enumerate()
            .map(|(index, n)| ResolvedNode {
                index,
                name: n.name.clone(),
                cpus: n.cpus.or(self.defaults.cpus).unwrap_or(DEFAULT_CPUS),
                memory_mib: n
                    .memory
                    .or(self.defaults.memory)
                    .map(|m| m.mib())
                    .unwrap_or(DEFAULT_MEMORY_MIB),
                data_addr: n.data_addr.or_else(|| free.next()).unwrap_or_else(|| net.broadcast()),
                data_prefix: net.prefix(),
                ssh_port: n.ssh_port,
            })
            .collect()
    }

    /// The node called `name`.
    pub fn node(&self, name: &str) -> Option<&NodeSpec> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// Checks `suite` against this lab's nodes (see [`Suite::check`]).
    pub fn check_suite(&self, suite: &crate::suite::Suite, source_name: &str) -> Result<(), crate::suite::SuiteError> {
        let nodes: Vec<&str> = self.nodes.iter().map(|n| n.name.as_str()).collect();
        suite.check(&self.name, &nodes, source_name)
    }

    /// The libfabric provider that goes with this lab's fabric when
    /// `--provider` is not given (see [`Fabric::libfabric_provider`]).
    pub fn libfabric_provider(&self) -> &'static str {
        self.fabric.libfabric_provider()
    }
}

/// The JSON Schema of `labs.yaml`, for editors (see `docs/labs-yaml.md`).
pub fn json_schema() -> serde_json::Value {
    let schema = schemars::schema_for!(Document);
    serde_json::to_value(schema).expect("a JSON Schema is JSON")
}

// ---------------------------------------------------------------------------
// Checks before parsing: things the YAML parser reports badly
// ---------------------------------------------------------------------------

/// A problem with its position and document path.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Located {
    line: usize,
    column: usize,
    field: String,
    problem: Problem,
}

fn is_blank_or_comment(line: &str) -> bool {
    let t = line.trim();
    t.is_empty() || t.starts_with('#') || t == "---" || t == "..."
}

/// The smallest useful file, for fixes.
const MINIMAL_EXAMPLE: &str =
    "\n  labs:\n    - name: local\n      nodes:\n        - name: server\n        - name: client";

/// Empty files and tab indentation.
fn precheck(text: &str) -> Option<Located> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.lines().all(is_blank_or_comment) {
        let line = text.lines().count().max(1);
        return Some(Located {
            line,
            column: 1,
            field: String::new(),
            problem: Problem::new(
                "the file is empty: it defines no labs",
                format!("add at least one lab (see docs/labs-yaml.md), e.g.:{MINIMAL_EXAMPLE}"),
            ),
        });
    }
    for (i, line) in text.lines().enumerate() {
        if let Some((col, c)) = line
            .chars()
            .enumerate()
            .find(|(_, c)| c.is_control() && *c != '\t' && *c != '\r')
        {
            let what = match c {
                '\0' => "a NUL byte (U+0000)".to_string(),
                c => format!("the control character U+{:04X}", c as u32),
            };
            return Some(Located {
                line: i + 1,
                column: col + 1,
                field: String::new(),
                problem: Problem::new(
                    format!("the file contains {what}; labs.yaml must be plain text"),
                    "delete it: it is invisible in most editors (`cat -A FILE` shows it, as ^@ for NUL); the file may have been saved in a binary or UTF-16 format",
                ),
            });
        }
        let indent: &str = &line[..line.len() - line.trim_start().len()];
        if let Some(col) = indent.find('\t') {
            if line.trim_start().starts_with('#') {
                continue;
            }
            return Some(Located {
                line: i + 1,
                column: col + 1,
                field: String::new(),
                problem: Problem::new(
                    "a tab character is used for indentation; YAML allows only spaces there",
                    "replace the tabs at the start of the line with spaces (2 per level); set your editor to insert spaces for .yaml files",
                ),
            });
        }
    }
    None
}

// ---------------------------------------------------------------------------
// Turning serde_yaml_ng errors into located problems
// ---------------------------------------------------------------------------

/// Fields of each part of the file, for suggestions.
const DOC_FIELDS: &[&str] = &["labs"];
const LAB_FIELDS: &[&str] = &[
    "name",
    "provider",
    "fabric",
    "image",
    "accel",
    "data_network",
    "defaults",
    "nodes",
    "aws",
    "multipass",
    "ci",
    "packages",
    "node_ssh",
];
const AWS_FIELDS: &[&str] = &[
    "region",
    "availability_zone",
    "instance_type",
    "ami",
    "ami_ssm_parameter",
    "ssh_user",
    "subnet_id",
    "ssh_cidr",
    "ssh_address",
];
const DEFAULTS_FIELDS: &[&str] = &["cpus", "memory"];
const NODE_FIELDS: &[&str] = &["name", "cpus", "memory", "data_addr", "ssh_port"];

/// A document path, as serde_yaml_ng prints it (`labs[0].nodes[1].cpus`),
/// split into parts.
fn split_path(path: &str) -> Vec<Seg> {
    let mut out = Vec::new();
    if path.is_empty() || path == "." {
        return out;
    }
    for part in path.split('.') {
        let (key, rest) = match part.find('[') {
            Some(i) => part.split_at(i),
            None => (part, ""),
        };
        if !key.is_empty() {
            out.push(Seg::Key(key.to_string()));
        }
        for idx in rest.split('[').filter(|s| !s.is_empty()) {
            if let Ok(n) = idx.trim_end_matches(']').parse() {
                out.push(Seg::Index(n));
            }
        }
    }
    out
}

/// Which part of the file a path is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Document,
    Labs,
    Lab,
    Defaults,
    Aws,
    Nodes,
    Node,
    Other,
}

fn part_of(segs: &[Seg]) -> Part {
    use Seg::{Index, Key};
    match segs {
        [] => Part::Document,
        [Key(l)] if l == "labs" => Part::Labs,
        [Key(l), Index(_)] if l == "labs" => Part::Lab,
        [Key(l), Index(_), Key(d)] if l == "labs" && d == "defaults" => Part::Defaults,
        [Key(l), Index(_), Key(a)] if l == "labs" && a == "aws" => Part::Aws,
        [Key(l), Index(_), Key(n)] if l == "labs" && n == "nodes" => Part::Nodes,
        [Key(l), Index(_), Key(n), Index(_)] if l == "labs" && n == "nodes" => Part::Node,
        _ => Part::Other,
    }
}

fn fields_of(part: Part) -> &'static [&'static str] {
    match part {
        Part::Document => DOC_FIELDS,
        Part::Lab => LAB_FIELDS,
        Part::Defaults => DEFAULTS_FIELDS,
        Part::Aws => AWS_FIELDS,
        Part::Node => NODE_FIELDS,
        _ => &[],
    }
}

fn part_name(part: Part) -> &'static str {
    match part {
        Part::Document => "the top level",
        Part::Labs => "labs",
        Part::Lab => "a lab",
        Part::Defaults => "defaults",
        Part::Aws => "aws",
        Part::Nodes => "nodes",
        Part::Node => "a node",
        Part::Other => "this place",
    }
}

fn unknown_field(part: Part, field: &str) -> Problem {
    let fields = fields_of(part);
    let list = fields.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ");
    let message = format!("unknown field `{field}` in {}", part_name(part));
    if let Some(m) = did_you_mean(field, fields) {
        return Problem::new(
            format!("{message}; did you mean `{m}`?"),
            format!("rename `{field}` to `{m}`"),
        );
    }
    // A field that belongs one level up or down.
    let elsewhere = match part {
        Part::Document if LAB_FIELDS.contains(&field) || NODE_FIELDS.contains(&field) => Some(
            "the file starts with `labs:`, then a list of labs (`- name: ...`); put this field inside a lab"
                .to_string(),
        ),
        Part::Lab if NODE_FIELDS.contains(&field) && DEFAULTS_FIELDS.contains(&field) => Some(format!(
            "`{field}` is a node setting: put it under `defaults:` for every node, or under one node in `nodes:`"
        )),
        Part::Lab if NODE_FIELDS.contains(&field) => Some(format!(
            "`{field}` is a node setting: put it under one node in `nodes:`"
        )),
        Part::Defaults if NODE_FIELDS.contains(&field) => Some(format!(
            "`{field}` differs per node: set it on each node in `nodes:`; defaults takes only `cpus` and `memory`"
        )),
        Part::Defaults | Part::Node | Part::Aws if LAB_FIELDS.contains(&field) => Some(format!(
            "`{field}` is a lab setting: move it up to the lab, next to `nodes:` (check the indentation)"
        )),
        _ => None,
    };
    let fix = elsewhere.unwrap_or_else(|| format!("remove `{field}`; the fields here are {list}"));
    Problem::new(format!("{message}; expected one of {list}"), fix)
}

fn missing_field(part: Part, field: &str) -> Problem {
    match (part, field) {
        (Part::Document, "labs") => Problem::new(
            "the file has no `labs:` key",
            format!("start the file with `labs:` followed by a list of labs, e.g.:{MINIMAL_EXAMPLE}"),
        ),
        (Part::Lab, "name") => Problem::new(
            "this lab has no `name`",
            "add `name: NAME` to the lab (lowercase letters, digits and `-`)",
        ),
        (Part::Lab, "nodes") => Problem::new(
            "this lab has no `nodes`",
            "add `nodes:` with at least one node, e.g.:\n  nodes:\n    - name: server\n    - name: client",
        ),
        (Part::Node, "name") => Problem::new(
            "this node has no `name`",
            "add `name: NAME` to the node; it becomes the hostname",
        ),
        (part, field) => Problem::new(
            format!("`{field}` is missing in {}", part_name(part)),
            format!("add `{field}:`"),
        ),
    }
}

fn invalid_type(part: Part, found: &str) -> Problem {
    let found = found
        .replace("string ", "the text ")
        .replace("integer ", "the number ")
        .replace("floating point ", "the number ")
        .replace("boolean ", "the boolean ")
        .replace("sequence", "a list")
        .replace("map", "a mapping")
        .replace("unit value", "nothing");
    match part {
        Part::Document => Problem::new(
            format!("the file must be a mapping with a `labs:` key, found {found}"),
            format!("start the file with `labs:` followed by a list of labs, e.g.:{MINIMAL_EXAMPLE}"),
        ),
        Part::Labs => Problem::new(
            format!("labs must be a list of labs, found {found}"),
            format!("write each lab as a list item starting with `- ` under `labs:`, e.g.:{MINIMAL_EXAMPLE}"),
        ),
        Part::Lab => Problem::new(
            format!("each lab must be a mapping (`name:`, `nodes:`, ...), found {found}"),
            "write the lab as `- name: NAME` followed by its fields, indented under the `-`",
        ),
        Part::Aws => Problem::new(
            format!("aws must be a mapping, found {found}"),
            "write `aws:` then `region:`, `instance_type:` and `ami:` indented below it (see docs/providers/aws.md)",
        ),
        Part::Defaults => Problem::new(
            format!("defaults must be a mapping, found {found}"),
            "write `defaults:` then `cpus:` and/or `memory:` indented below it",
        ),
        Part::Nodes => Problem::new(
            format!("nodes must be a list of nodes, found {found}"),
            "write one node per item, e.g.:\n  nodes:\n    - name: server\n    - name: client",
        ),
        Part::Node => Problem::new(
            format!("each node must be a mapping with at least `name:`, found {found}"),
            "write the node as `- name: NAME` (a bare `- NAME` is not enough)",
        ),
        Part::Other => Problem::new(
            format!("unexpected {found}"),
            "check the indentation against docs/labs-yaml.md",
        ),
    }
}

/// A field that must hold a number or text holds something else: say what
/// it must be, in words, and show one.
fn wrong_scalar(field: &str, found: &str, expected: &str) -> Problem {
    let found = found
        .replace("string ", "the text ")
        .replace("integer ", "")
        .replace("floating point ", "")
        .replace("boolean ", "")
        .replace("sequence", "a list")
        .replace("map", "a mapping")
        .replace("unit value", "nothing");
    let (must, example) = match expected {
        "u64" | "u32" | "u16" | "u8" | "usize" => ("a whole number, 0 or more", "4096"),
        "i64" | "i32" | "i16" | "i8" => ("a whole number", "10"),
        "f64" | "f32" => ("a number", "1.5"),
        "a boolean" => ("true or false", "true"),
        "a string" => ("text", "name"),
        _ => ("a single value", "4096"),
    };
    Problem::new(
        format!("{field} must be {must}, found {found}"),
        format!("write it like `{field}: {example}` (see docs/labs-yaml.md)"),
    )
}

/// The words inside backticks of `s`.
fn backticked(s: &str) -> Vec<&str> {
    s.split('`').skip(1).step_by(2).collect()
}

/// Friendlier words for libyaml's syntax errors.
fn syntax_problem(raw: &str) -> Problem {
    let indent_fix = "check the indentation: keys of one mapping start in the same column, children are indented more (2 spaces) than their parent, and list items start with `- `";
    let msg = if raw.contains("mapping values are not allowed") {
        "unexpected `key: value` here: usually a wrong indentation, or a value containing `: ` that needs quotes"
            .to_string()
    } else if raw.contains("did not find expected key") {
        "this line does not line up with the keys around it (bad indentation)".to_string()
    } else if raw.contains("did not find expected '-' indicator") {
        "this line does not line up with the list items around it (bad indentation)".to_string()
    } else if raw.contains("could not find expected ':'") {
        "a key without `:` (every line in a mapping is `key: value`)".to_string()
    } else if raw.contains("found character that cannot start any token") {
        "a character that cannot start a YAML value (quote values starting with @, ` or %)".to_string()
    } else if raw.contains("while scanning a quoted scalar") {
        "a quoted value that never ends".to_string()
    } else {
        format!("invalid YAML: {raw}")
    };
    let fix = if raw.contains("quoted scalar") {
        "close the quote on the same line".to_string()
    } else if raw.contains("cannot start any token") {
        "put the value in double quotes, or remove the character".to_string()
    } else {
        indent_fix.to_string()
    };
    Problem::new(msg, fix)
}

/// Removes serde_yaml_ng's ` at line L column C` (and `, context at ...`).
fn strip_marks(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(" at line ") {
        out.push_str(&rest[..i]);
        let tail = &rest[i + " at line ".len()..];
        // skip "L column C"
        let skip = tail
            .find(|c: char| !(c.is_ascii_digit() || c == ' ' || c.is_ascii_lowercase()))
            .unwrap_or(tail.len());
        rest = &tail[skip..];
    }
    out.push_str(rest);
    out
}

fn translate(text: &str, err: &serde_yaml_ng::Error) -> Located {
    let raw = err.to_string();
    let (line, column) = match err.location() {
        Some(l) => (l.line(), l.column()),
        None => (1, 1),
    };
    // Our own problems, framed.
    if let (Some(s), Some(m), Some(e)) = (raw.find(FRAME_START), raw.find(FRAME_SPLIT), raw.find(FRAME_END)) {
        let field = raw[..s].trim_end_matches(": ").to_string();
        return Located {
            line,
            column,
            field: if field == "." { String::new() } else { field },
            problem: Problem::new(&raw[s + 1..m], &raw[m + 1..e]),
        };
    }
    if raw.starts_with("deserializing from YAML containing more than one document") {
        let second = text
            .lines()
            .enumerate()
            .filter(|(_, l)| l.starts_with("---"))
            .map(|(i, _)| i + 1)
            .nth(usize::from(!text.trim_start().starts_with("---")).saturating_sub(1) + 1)
            .or_else(|| text.lines().position(|l| l.starts_with("---")).map(|i| i + 1))
            .unwrap_or(1);
        return Located {
            line: second,
            column: 1,
            field: String::new(),
            problem: Problem::new(
                "the file holds more than one YAML document (`---` separators)",
                "keep one document: put every lab in the one `labs:` list and remove the extra `---`",
            ),
        };
    }
    // An unclosed quote is reported at the end of the file; its start is
    // more useful.
    if let Some(at) = raw.find("while scanning a quoted scalar at line ") {
        let tail = &raw[at + "while scanning a quoted scalar at line ".len()..];
        let mut nums = tail
            .split(|c: char| !c.is_ascii_digit())
            .filter(|s| !s.is_empty())
            .filter_map(|s| s.parse::<usize>().ok());
        if let (Some(l), Some(c)) = (nums.next(), nums.next()) {
            return Located {
                line: l,
                column: c,
                field: String::new(),
                problem: Problem::new("a quoted value that never ends", "close the quote on the same line"),
            };
        }
    }
    let stripped = strip_marks(&raw);
    const SERDE: &[&str] = &[
        "unknown field `",
        "missing field `",
        "duplicate field `",
        "invalid type: ",
        "invalid value: ",
        "invalid length ",
    ];
    let found = SERDE.iter().find_map(|p| {
        if stripped.starts_with(p) {
            Some((String::new(), stripped.as_str()))
        } else {
            stripped
                .find(&format!(": {p}"))
                .map(|i| (stripped[..i].to_string(), &stripped[i + 2..]))
        }
    });
    let Some((field, msg)) = found else {
        return Located {
            line,
            column,
            field: String::new(),
            problem: syntax_problem(&stripped),
        };
    };
    let field = if field == "." { String::new() } else { field };
    let segs = split_path(&field);
    let words = backticked(msg);
    let (line, column, field, problem) = if msg.starts_with("unknown field") {
        // serde_yaml_ng reports the key's position; the path is the mapping's.
        let name = words.first().copied().unwrap_or("");
        (line, column, field.clone(), unknown_field(part_of(&segs), name))
    } else if msg.starts_with("missing field") {
        let name = words.first().copied().unwrap_or("");
        (line, column, field.clone(), missing_field(part_of(&segs), name))
    } else if msg.starts_with("duplicate field") {
        let name = words.first().copied().unwrap_or("").to_string();
        let issue = Issue {
            segs: {
                let mut s = segs.clone();
                s.push(Seg::Key(name.clone()));
                s
            },
            aim: Aim::SecondKey,
            problem: Problem::new(
                format!("`{name}` is given twice in {}", part_name(part_of(&segs))),
                format!("keep one `{name}:` line and remove the other"),
            ),
        };
        let at = issue.locate(text);
        (at.line, at.column, at.field, at.problem)
    } else if let Some(rest) = msg.strip_prefix("invalid type: ") {
        let (found, expected) = rest.split_once(", expected ").unwrap_or((rest, ""));
        let problem = match (part_of(&segs), segs.last()) {
            (Part::Other, Some(Seg::Key(leaf))) => wrong_scalar(leaf, found, expected),
            (part, _) => invalid_type(part, found),
        };
        (line, column, field.clone(), problem)
    } else {
        (
            line,
            column,
            field.clone(),
            Problem::new(msg.to_string(), "check this value against docs/labs-yaml.md"),
        )
    };
    Located {
        line,
        column,
        field,
        problem,
    }
}

// ---------------------------------------------------------------------------
// Checks of the whole document, located afterwards
// ---------------------------------------------------------------------------

/// One step of a document path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
}

/// What of the path's end to point at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Aim {
    /// The value.
    Value,
    /// The last key itself (for values that are empty or absent).
    Key,
    /// The second occurrence of the last key in its mapping.
    SecondKey,
}

/// A problem at a document path, still to be located in the text.
#[derive(Debug, Clone)]
struct Issue {
    segs: Vec<Seg>,
    aim: Aim,
    problem: Problem,
}

fn render_path(segs: &[Seg]) -> String {
    let mut out = String::new();
    for s in segs {
        match s {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

impl Issue {
    fn at(segs: Vec<Seg>, aim: Aim, message: impl Into<String>, fix: impl Into<String>) -> Self {
        Issue {
            segs,
            aim,
            problem: Problem::new(message, fix),
        }
    }

    /// Finds the issue's position; falls back to the nearest enclosing value
    /// that exists (a default that was not written points at its lab).
    fn locate(self, text: &str) -> Located {
        let mut segs = self.segs.clone();
        let mut aim = self.aim;
        let pos = loop {
            if let Some(p) = locate(text, &segs, aim) {
                break p;
            }
            if segs.pop().is_none() {
                break (1, 1);
            }
            aim = Aim::Value;
        };
        Located {
            line: pos.0,
            column: pos.1,
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
fn check_document(doc: &Document) -> Option<Issue> {
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

// ---------------------------------------------------------------------------
// Locating a path in the text
// ---------------------------------------------------------------------------

/// The 1-based (line, column) of the value at `segs` (or of its key, per
/// `aim`), found by walking the document with serde_yaml_ng and failing on
/// purpose at the target, so that the parser reports where it was.
fn locate(text: &str, segs: &[Seg], aim: Aim) -> Option<(usize, usize)> {
    let de = serde_yaml_ng::Deserializer::from_str(text);
    match (Locate { segs, aim }).deserialize(de) {
        Err(e) if e.to_string().contains(LOCATE_MARK) => e.location().map(|l| (l.line(), l.column())),
        _ => None,
    }
}

struct Locate<'a> {
    segs: &'a [Seg],
    aim: Aim,
}

/// Fails at whatever value it is given.
struct Fail;

impl<'de> Visitor<'de> for Fail {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("anything")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Err(E::custom(LOCATE_MARK))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Err(E::custom(LOCATE_MARK))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Err(E::custom(LOCATE_MARK))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Err(E::custom(LOCATE_MARK))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Err(E::custom(LOCATE_MARK))
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Err(E::custom(LOCATE_MARK))
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Err(E::custom(LOCATE_MARK))
    }

    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(LOCATE_MARK))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(LOCATE_MARK))
    }
}

/// Reads a key; fails on it when it is the target occurrence.
struct KeySeed<'a> {
    target: Option<&'a str>,
    fail: bool,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        struct K<'a> {
            target: Option<&'a str>,
            fail: bool,
        }
        impl<'de> Visitor<'de> for K<'_> {
            type Value = String;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
                if self.fail && self.target == Some(v) {
                    Err(E::custom(LOCATE_MARK))
                } else {
                    Ok(v.to_string())
                }
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<String, E> {
                Ok(v.to_string())
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
                Ok(v.to_string())
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
                Ok(v.to_string())
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<String, E> {
                Ok(v.to_string())
            }
            fn visit_unit<E: de::Error>(self) -> Result<String, E> {
                Ok(String::new())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<String, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(String::new())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<String, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(String::new())
            }
        }
        d.deserialize_any(K {
            target: self.target,
            fail: self.fail,
        })
    }
}

impl<'de> DeserializeSeed<'de> for Locate<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.segs.is_empty() {
            return d.deserialize_any(Fail);
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Locate<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("anything")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let (want, rest) = match self.segs.split_first() {
            Some((Seg::Key(k), rest)) => (Some(k.as_str()), rest),
            _ => (None, &[][..]),
        };
        let last = rest.is_empty();
        let mut seen = 0;
        loop {
            let fail_key = last
                && match self.aim {
                    Aim::Key => seen == 0,
                    Aim::SecondKey => seen == 1,
                    Aim::Value => false,
                };
            let Some(key) = map.next_key_seed(KeySeed {
                target: want,
                fail: fail_key,
            })?
            else {
                return Ok(());
            };
            if Some(key.as_str()) == want {
                seen += 1;
                if seen == 1 && (!last || self.aim == Aim::Value) {
                    return map.next_value_seed(Locate {
                        segs: rest,
                        aim: self.aim,
                    });
                }
            }
            map.next_value::<IgnoredAny>()?;
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let (want, rest) = match self.segs.split_first() {
            Some((Seg::Index(i), rest)) => (Some(*i), rest),
            _ => (None, &[][..]),
        };
        let mut i = 0;
        loop {
            if Some(i) == want {
                return seq
                    .next_element_seed(Locate {
                        segs: rest,
                        aim: self.aim,
                    })
                    .map(|_| ());
            }
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests;
