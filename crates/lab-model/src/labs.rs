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
//! The text is parsed once into a tree of nodes that keep their positions
//! (`crate::yaml`). Checks of a single value (a name, a size, an address)
//! run inside the `Deserialize` impls while the reader is on that value's
//! node, so their errors carry its position. Checks that need the whole lab
//! (unique names, addresses inside the network, fabric versus provider) run
//! on the parsed model and name the offending value by its path; the same
//! tree gives that path's position.
//!
//! # Layout
//! - this file: the types of the format and what they answer;
//! - `load`: reading a file (precheck, YAML, the checks);
//! - `errors`: [`ConfigError`] and the wording of every reading error;
//! - `check`: the checks of a whole document.
//!
//! [`json_schema`] gives a JSON Schema of the format for editors; the shipped
//! copy is `docs/labs.schema.json` and a test keeps the two equal.

mod check;
mod errors;
mod load;

use std::collections::HashSet;
use std::fmt;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::de::Deserializer;
use serde::{Deserialize, Serialize};

pub use errors::ConfigError;

use crate::expect::Expectations;
use crate::limits::*;
use crate::memory::*;
use crate::network::*;
use crate::problem::*;
use crate::scalar::*;

// ---------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------

/// A parsed and checked labs file.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
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
    /// What the lab must deliver: node facts (`devices`, `link_rate`, `mtu`,
    /// `fi_provider`) and workload figures (`write-bw: {size: 64KiB, min:
    /// 10Gb/s}`). `labctl doctor` checks the node facts, `labctl bench` and
    /// `labctl ci` the figures; fabric-* runs fail when their endpoint opens
    /// another provider than `fi_provider`. See docs/labs-yaml.md.
    #[serde(default, skip_serializing_if = "Expectations::is_empty")]
    pub expect: Expectations,
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
    /// provider ssh only: the login user of every node that sets none.
    #[serde(default, deserialize_with = "de_ssh_user", skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// provider ssh only: the SSH port of every node that sets none.
    #[serde(default, deserialize_with = "de_port", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<u16>,
    /// provider ssh only: the private key of every node that sets none.
    #[serde(
        default,
        deserialize_with = "de_identity_file",
        skip_serializing_if = "Option::is_none"
    )]
    pub identity_file: Option<String>,
    /// provider ssh only: `sudo` of every node that sets none.
    #[serde(default, deserialize_with = "de_sudo", skip_serializing_if = "Option::is_none")]
    pub sudo: Option<bool>,
    /// provider ssh only: the jump host of every node that sets none.
    #[serde(default, deserialize_with = "de_proxy_jump", skip_serializing_if = "Option::is_none")]
    pub proxy_jump: Option<String>,
    /// provider ssh only: the jump host's SSH key, for every node that sets none.
    #[serde(
        default,
        deserialize_with = "de_proxy_jump_host_key",
        skip_serializing_if = "Option::is_none"
    )]
    pub proxy_jump_host_key: Option<String>,
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
    /// provider ssh only (required there): the host that exists, as a name,
    /// an address, or a `Host` entry of the user's ~/.ssh/config (whose
    /// HostName, Port, User, IdentityFile, ProxyJump and
    /// UserKnownHostsFile apply unless set here).
    #[serde(default, deserialize_with = "de_ssh_host", skip_serializing_if = "Option::is_none")]
    #[schemars(example = &"gpu1.lab.example")]
    pub host: Option<String>,
    /// provider ssh only: the host's SSH port. Default: ~/.ssh/config's, else 22.
    #[serde(default, deserialize_with = "de_port", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<u16>,
    /// provider ssh only: the login user. Default: `defaults.user`, else
    /// ~/.ssh/config's, else root.
    #[serde(default, deserialize_with = "de_ssh_user", skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// provider ssh only: the private key to log in with (`~` is the
    /// user's home). Default: `defaults.identity_file`, else
    /// ~/.ssh/config's, else the first of ~/.ssh/id_ed25519, id_ecdsa,
    /// id_rsa, else the keys of the running ssh-agent (SSH_AUTH_SOCK). A
    /// key behind a passphrase is used through the ssh-agent, which must
    /// hold it (`ssh-add`); labctl never asks for a passphrase.
    #[serde(
        default,
        deserialize_with = "de_identity_file",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(example = &"~/.ssh/id_ed25519")]
    pub identity_file: Option<String>,
    /// provider ssh only: the host's SSH key, as an OpenSSH public key
    /// (`ssh-ed25519 AAAA...`) or its SHA256 fingerprint (`SHA256:...`).
    /// Required unless the user's ~/.ssh/known_hosts has the host: labctl
    /// never trusts a host it did not create on first use.
    #[serde(default, deserialize_with = "de_host_key", skip_serializing_if = "Option::is_none")]
    #[schemars(example = &"SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s")]
    pub host_key: Option<String>,
    /// provider ssh only: whether privileged steps run under `sudo -n`
    /// (which must then work without a password). Default:
    /// `defaults.sudo`, else true unless the login user is root.
    #[serde(default, deserialize_with = "de_sudo", skip_serializing_if = "Option::is_none")]
    pub sudo: Option<bool>,
    /// provider ssh only: one jump host SSH goes through, as
    /// `[user@]host[:port]` (ssh's ProxyJump, one hop). Its user defaults
    /// to the node's, its port to 22; it logs in with the node's key.
    #[serde(default, deserialize_with = "de_proxy_jump", skip_serializing_if = "Option::is_none")]
    #[schemars(example = &"admin@bastion.example:2222")]
    pub proxy_jump: Option<String>,
    /// provider ssh only: the jump host's SSH key (public key or SHA256
    /// fingerprint, as for `host_key`). Required unless the user's
    /// ~/.ssh/known_hosts has the jump host.
    #[serde(
        default,
        deserialize_with = "de_proxy_jump_host_key",
        skip_serializing_if = "Option::is_none"
    )]
    pub proxy_jump_host_key: Option<String>,
    /// fabric existing only: the RDMA device to use, as `ibv_devices`
    /// lists it (`mlx5_0`). Default: the device whose netdev holds
    /// `data_addr`.
    #[serde(
        default,
        deserialize_with = "de_rdma_device",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(example = &"mlx5_0")]
    pub rdma_device: Option<String>,
}

/// How the controller reaches a host that exists (provider ssh), with the
/// lab's `defaults` applied; ~/.ssh/config is applied later, by the
/// provider, since it belongs to the user who runs labctl.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SshTarget {
    /// Host name, address or ~/.ssh/config `Host` entry.
    pub host: String,
    /// SSH port, if labs.yaml gives one.
    pub port: Option<u16>,
    /// Login user, if labs.yaml gives one.
    pub user: Option<String>,
    /// Private key path, if labs.yaml gives one (`~` not yet expanded).
    pub identity_file: Option<String>,
    /// The pinned host key or fingerprint, if labs.yaml gives one.
    pub host_key: Option<String>,
    /// Whether privileged steps use `sudo -n`, if labs.yaml says.
    pub sudo: Option<bool>,
    /// The jump host, if labs.yaml gives one.
    pub proxy_jump: Option<crate::jump::ProxyJump>,
    /// The jump host's key or fingerprint, if labs.yaml gives one.
    pub proxy_jump_host_key: Option<String>,
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
    /// provider ssh: how to reach the host that exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh: Option<SshTarget>,
    /// fabric existing: the RDMA device labs.yaml names, if it names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdma_device: Option<String>,
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
        /// Hosts that already exist, reached over SSH; labctl creates and
        /// deletes no machine (see docs/providers/ssh.md).
        Ssh = "ssh",
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
        /// The RDMA devices the hosts already have (mlx5, irdma, bnxt_re,
        /// an rxe someone set up); provider ssh only.
        Existing = "existing",
    }
    default Rxe;
    fix "leave fabric out for the default, rxe (SoftRoCE)";
}

impl Fabric {
    /// The libfabric provider that goes with this fabric when `--provider` is
    /// not given: rxe → `verbs;ofi_rxd` (the verbs RDM provider that works
    /// over rxe with libfabric's defaults; `verbs;ofi_rxm` works there too
    /// because the agent bounds `FI_UNIVERSE_SIZE` on soft RoCE), none →
    /// `tcp;ofi_rxm`, efa → `efa`, existing → `verbs;ofi_rxm` (the usual
    /// RDM provider over hardware verbs devices).
    pub fn libfabric_provider(self) -> &'static str {
        match self {
            Fabric::Rxe => "verbs;ofi_rxd",
            Fabric::Existing => "verbs;ofi_rxm",
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

impl LabsFile {
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
                ssh: n.host.as_ref().map(|host| SshTarget {
                    host: host.clone(),
                    port: n.port.or(self.defaults.port),
                    user: n.user.clone().or_else(|| self.defaults.user.clone()),
                    identity_file: n.identity_file.clone().or_else(|| self.defaults.identity_file.clone()),
                    host_key: n.host_key.clone(),
                    sudo: n.sudo.or(self.defaults.sudo),
                    // Validated when labs.yaml was read.
                    proxy_jump: n
                        .proxy_jump
                        .as_deref()
                        .or(self.defaults.proxy_jump.as_deref())
                        .and_then(|j| crate::jump::parse_proxy_jump(j).ok()),
                    proxy_jump_host_key: n
                        .proxy_jump_host_key
                        .clone()
                        .or_else(|| self.defaults.proxy_jump_host_key.clone()),
                }),
                rdma_device: n.rdma_device.clone(),
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

#[cfg(test)]
mod tests;
