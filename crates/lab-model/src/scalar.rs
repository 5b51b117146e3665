//! Checks of single values, run inside `Deserialize` while the YAML parser
//! still points at the value, so their problems carry its position.

use std::borrow::Cow;
use std::fmt;
use std::net::Ipv4Addr;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::limits::{
    default_image, default_multipass_image, CPUS_RANGE, DEFAULT_IMAGE, DEFAULT_MULTIPASS_IMAGE, MAX_NAME_LEN,
    SSH_PORT_RANGE,
};
use crate::problem::{did_you_mean, Problem};

/// A YAML value as a check sees it.
#[derive(Debug)]
pub(crate) enum Scalar<'a> {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(Cow<'a, str>),
    Mapping,
    Sequence,
}

impl Scalar<'_> {
    pub(crate) fn describe(&self) -> String {
        match self {
            Scalar::Null => "nothing (an empty value)".into(),
            Scalar::Bool(b) => format!("the boolean {b}"),
            Scalar::Int(n) => format!("the number {n}"),
            Scalar::Float(x) => format!("the number {x}"),
            Scalar::Str(s) => format!("the text \"{s}\""),
            Scalar::Mapping => "a mapping (`key: value` lines)".into(),
            Scalar::Sequence => "a list (`- item` lines)".into(),
        }
    }
}

/// Deserializes any value and hands it to `check`; the check's problem
/// becomes an error at the value's position.
pub(crate) fn scalar<'de, D, T, F>(d: D, check: F) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    F: FnOnce(Scalar<'_>) -> Result<T, Problem>,
{
    struct V<F>(F);

    impl<T, F> V<F>
    where
        F: FnOnce(Scalar<'_>) -> Result<T, Problem>,
    {
        fn run<E: de::Error>(self, v: Scalar<'_>) -> Result<T, E> {
            (self.0)(v).map_err(Problem::into_de)
        }
    }

    impl<'de, T, F> Visitor<'de> for V<F>
    where
        F: FnOnce(Scalar<'_>) -> Result<T, Problem>,
    {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a value")
        }

        fn visit_bool<E: de::Error>(self, v: bool) -> Result<T, E> {
            self.run(Scalar::Bool(v))
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
            self.run(Scalar::Int(v.into()))
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
            self.run(Scalar::Int(v.into()))
        }

        fn visit_i128<E: de::Error>(self, v: i128) -> Result<T, E> {
            self.run(Scalar::Int(v))
        }

        fn visit_u128<E: de::Error>(self, v: u128) -> Result<T, E> {
            self.run(Scalar::Int(i128::try_from(v).unwrap_or(i128::MAX)))
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
            self.run(Scalar::Float(v))
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
            self.run(Scalar::Str(Cow::Borrowed(v)))
        }

        fn visit_unit<E: de::Error>(self) -> Result<T, E> {
            self.run(Scalar::Null)
        }

        fn visit_none<E: de::Error>(self) -> Result<T, E> {
            self.run(Scalar::Null)
        }

        fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<T, A::Error> {
            self.run(Scalar::Mapping)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<T, A::Error> {
            self.run(Scalar::Sequence)
        }
    }

    d.deserialize_any(V(check))
}

/// Checks a name; `what` is "lab" or "node".
pub(crate) fn check_name(what: &str, v: Scalar<'_>, hostname: bool) -> Result<String, Problem> {
    let rule = if hostname {
        "lowercase letters, digits and `-`, starting and ending with a letter or digit, at most 31 characters"
    } else {
        "lowercase letters, digits and `-`, starting with a letter or digit, at most 31 characters"
    };
    let s = match v {
        Scalar::Str(s) => s.into_owned(),
        Scalar::Int(n) => n.to_string(),
        Scalar::Null => {
            return Err(Problem::new(
                format!("the {what} name is empty"),
                format!("give the {what} a name: {rule}"),
            ))
        }
        other => {
            return Err(Problem::new(
                format!("a {what} name must be text, found {}", other.describe()),
                format!("write a name made of {rule}"),
            ))
        }
    };
    let suggestion = {
        let mut t: String = s
            .to_ascii_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        t = t.trim_matches('-').to_string();
        t.truncate(MAX_NAME_LEN);
        if hostname {
            t = t.trim_end_matches('-').to_string();
        }
        t
    };
    let fix = |msg: String| {
        if suggestion.is_empty() || suggestion == s {
            Problem::new(msg, format!("use {rule}"))
        } else {
            Problem::new(msg, format!("use {rule}, e.g. `{suggestion}`"))
        }
    };
    if s.is_empty() {
        return Err(Problem::new(
            format!("the {what} name is empty"),
            format!("give the {what} a name: {rule}"),
        ));
    }
    if s.len() > MAX_NAME_LEN {
        return Err(fix(format!(
            "{what} name `{s}` is {} characters long; the limit is {MAX_NAME_LEN}",
            s.len()
        )));
    }
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        let why = if c.is_ascii_uppercase() {
            "uppercase letters are not allowed".to_string()
        } else {
            format!("`{c}` is not allowed")
        };
        return Err(fix(format!("{what} name `{s}` is not valid: {why}")));
    }
    if s.starts_with('-') || (hostname && s.ends_with('-')) {
        let end = if hostname { "start or end" } else { "start" };
        return Err(fix(format!(
            "{what} name `{s}` is not valid: it may not {end} with `-`"
        )));
    }
    Ok(s)
}

pub(crate) fn de_lab_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    scalar(d, |v| check_name("lab", v, false))
}

pub(crate) fn de_node_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    scalar(d, |v| check_name("node", v, true))
}

pub(crate) fn de_image<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    scalar(d, |v| match v {
        Scalar::Null => Ok(default_image()),
        Scalar::Str(s) if s.trim().is_empty() => Err(Problem::new(
            "image is empty",
            format!("leave image out for the default, {DEFAULT_IMAGE}"),
        )),
        Scalar::Str(s) => Ok(s.into_owned()),
        other => Err(Problem::new(
            format!("image must be a name, found {}", other.describe()),
            format!("leave image out for the default, {DEFAULT_IMAGE}"),
        )),
    })
}

pub(crate) fn de_multipass_image<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    scalar(d, |v| match v {
        Scalar::Null => Ok(default_multipass_image()),
        Scalar::Str(s) if s.trim().is_empty() || s.contains(char::is_whitespace) => Err(Problem::new(
            format!("`{s}` is not a Multipass image name"),
            format!("name an image as `multipass find` lists it, like {DEFAULT_MULTIPASS_IMAGE}, or leave image out"),
        )),
        Scalar::Str(s) => Ok(s.into_owned()),
        Scalar::Float(x) => Err(Problem::new(
            format!("the image {x} was read as a number"),
            format!("quote it: image: \"{x}\""),
        )),
        other => Err(Problem::new(
            format!("image must be a name, found {}", other.describe()),
            format!("write an image like \"{DEFAULT_MULTIPASS_IMAGE}\", or leave image out"),
        )),
    })
}

/// A workload name (suite entries, `ci:`), checked against the catalogue
/// while the parser points at it.
pub(crate) fn de_workload<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let names: Vec<&str> = workload_catalogue::names().collect();
    scalar(d, |v| match v {
        Scalar::Str(s) if workload_catalogue::find(&s).is_some() => Ok(s.into_owned()),
        Scalar::Str(s) => {
            let hint = did_you_mean(&s, &names)
                .map(|m| format!("write `{m}`"))
                .unwrap_or_else(|| format!("use one of: {}", names.join(", ")));
            Err(Problem::new(format!("unknown workload `{s}`"), hint))
        }
        other => Err(Problem::new(
            format!("workload must be a workload's name, found {}", other.describe()),
            format!("use one of: {}", names.join(", ")),
        )),
    })
}

/// A whole number in `range`, for `field`.
pub(crate) fn int_in<T>(
    field: &str,
    v: Scalar<'_>,
    range: std::ops::RangeInclusive<T>,
    fix: &str,
) -> Result<Option<T>, Problem>
where
    T: Copy + fmt::Display + PartialOrd + TryFrom<i128> + Into<i128>,
{
    let (lo, hi) = (*range.start(), *range.end());
    let out_of_range = |n: String| Problem::new(format!("{n} is out of range ({lo}..={hi})"), fix.to_string());
    match v {
        Scalar::Null => Ok(None),
        Scalar::Int(n) => match T::try_from(n) {
            Ok(x) if range.contains(&x) => Ok(Some(x)),
            _ => Err(out_of_range(n.to_string())),
        },
        Scalar::Float(x) => Err(Problem::new(
            format!("{field} must be a whole number, found {x}"),
            fix.to_string(),
        )),
        Scalar::Str(s) => {
            let quoted = s.trim().parse::<i128>().is_ok();
            Err(Problem::new(
                format!("{field} must be a whole number, found the text \"{s}\""),
                if quoted {
                    format!("remove the quotes: {field}: {}", s.trim())
                } else {
                    fix.to_string()
                },
            ))
        }
        other => Err(Problem::new(
            format!("{field} must be a whole number, found {}", other.describe()),
            fix.to_string(),
        )),
    }
}

pub(crate) fn de_cpus<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    scalar(d, |v| {
        int_in("cpus", v, CPUS_RANGE, "set cpus to a whole number between 1 and 64")
    })
}

pub(crate) fn de_ssh_port<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u16>, D::Error> {
    scalar(d, |v| {
        int_in(
            "ssh_port",
            v,
            SSH_PORT_RANGE,
            "pick a port between 1024 and 65535, like 2222, or leave ssh_port out to get a free one",
        )
    })
}

pub(crate) fn de_data_addr<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Ipv4Addr>, D::Error> {
    scalar(d, |v| match v {
        Scalar::Null => Ok(None),
        Scalar::Str(s) => {
            let t = s.trim();
            if let Some((a, _)) = t.split_once('/') {
                if a.parse::<Ipv4Addr>().is_ok() {
                    return Err(Problem::new(
                        format!("data_addr `{s}` has a prefix; it is a single address"),
                        format!("write just the address, `{a}`; the prefix comes from data_network"),
                    ));
                }
            }
            t.parse::<Ipv4Addr>().map(Some).map_err(|_| {
                Problem::new(
                    format!("`{s}` is not an IPv4 address"),
                    "write four numbers 0-255 separated by dots, like 10.77.0.2, or leave data_addr out",
                )
            })
        }
        other => Err(Problem::new(
            format!("data_addr must be an IPv4 address, found {}", other.describe()),
            "write an address like 10.77.0.2, or leave data_addr out",
        )),
    })
}

/// What a Debian package name is made of (Debian Policy 5.6.1), for messages.
const PACKAGE_NAME_RULE: &str =
    "a Debian package name is lowercase letters, digits, `+`, `-` and `.`, starts with a letter or digit, and is at least 2 characters long";

/// Checks one entry of `packages:`: a Debian package name, nothing more (no
/// version, no architecture, no second name), so that it can go to
/// mmdebstrap and apt-get as one word.
pub(crate) fn check_package_name(v: Scalar<'_>) -> Result<String, Problem> {
    let s = match v {
        Scalar::Str(s) => s.into_owned(),
        Scalar::Null => {
            return Err(Problem::new(
                "a package name is empty",
                "remove the empty list item, or write a package name in it",
            ))
        }
        other => {
            return Err(Problem::new(
                format!("a package name must be text, found {}", other.describe()),
                format!("write the package's name, like `gcc`; {PACKAGE_NAME_RULE}"),
            ))
        }
    };
    if s.is_empty() {
        return Err(Problem::new(
            "a package name is empty",
            "remove the empty list item, or write a package name in it",
        ));
    }
    let lowered = s.to_ascii_lowercase();
    let problem = |why: String, fix: String| Problem::new(format!("package name `{s}` is not valid: {why}"), fix);
    let bad = s
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '+' | '-' | '.')));
    if let Some((at, c)) = bad {
        let name = &s[..at];
        return Err(match c {
            '=' => problem(
                "`=` pins a version, which labctl does not do: nodes get the suite's version".into(),
                format!("write the name alone: `{name}`"),
            ),
            ':' => problem(
                "`:` names an architecture, which labctl does not do: nodes get their own".into(),
                format!("write the name alone: `{name}`"),
            ),
            c if c.is_whitespace() || c == ',' => problem(
                "it holds more than one name".into(),
                format!(
                    "give each package its own list item: `packages: [{}]`",
                    s.split(|c: char| c.is_whitespace() || c == ',')
                        .filter(|w| !w.is_empty())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
            c if c.is_ascii_uppercase() => problem(
                "uppercase letters are not allowed".into(),
                format!("write `{lowered}`; {PACKAGE_NAME_RULE}"),
            ),
            c => problem(format!("`{c}` is not allowed"), PACKAGE_NAME_RULE.to_string()),
        });
    }
    if !s.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(problem(
            "it must start with a letter or digit".into(),
            PACKAGE_NAME_RULE.to_string(),
        ));
    }
    if s.len() < 2 {
        return Err(problem(
            "it is one character long".into(),
            PACKAGE_NAME_RULE.to_string(),
        ));
    }
    Ok(s)
}

/// `packages:`: a list of package names, each checked where it stands.
pub(crate) fn de_packages<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    struct PackageName(String);

    impl<'de> serde::Deserialize<'de> for PackageName {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            scalar(d, check_package_name).map(PackageName)
        }
    }

    struct Packages;

    impl<'de> Visitor<'de> for Packages {
        type Value = Vec<String>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list of package names")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
            let mut names = Vec::new();
            while let Some(PackageName(name)) = seq.next_element()? {
                names.push(name);
            }
            Ok(names)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Vec<String>, E> {
            Ok(Vec::new())
        }

        fn visit_none<E: de::Error>(self) -> Result<Vec<String>, E> {
            Ok(Vec::new())
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<String>, E> {
            Err(not_a_list(Scalar::Str(Cow::Borrowed(v))).into_de())
        }

        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Vec<String>, E> {
            Err(not_a_list(Scalar::Bool(v)).into_de())
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Vec<String>, E> {
            Err(not_a_list(Scalar::Int(v.into())).into_de())
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Vec<String>, E> {
            Err(not_a_list(Scalar::Int(v.into())).into_de())
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Vec<String>, E> {
            Err(not_a_list(Scalar::Float(v)).into_de())
        }

        fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Vec<String>, A::Error> {
            Err(not_a_list(Scalar::Mapping).into_de())
        }
    }

    fn not_a_list(found: Scalar<'_>) -> Problem {
        let example = match &found {
            Scalar::Str(s) if !s.trim().is_empty() => s
                .split(|c: char| c.is_whitespace() || c == ',')
                .filter(|w| !w.is_empty())
                .collect::<Vec<_>>()
                .join(", "),
            _ => "gcc, openmpi-bin".to_string(),
        };
        Problem::new(
            format!("packages must be a list of package names, found {}", found.describe()),
            format!("write `packages: [{example}]`, or one `- NAME` line per package under `packages:`"),
        )
    }

    d.deserialize_any(Packages)
}

/// A text value that is one word (no whitespace, not starting with `-`, so
/// it cannot pass for an option of ssh or a shell word): `host`, `user`,
/// `identity_file`, `rdma_device`. `rule` says what a good one looks like.
fn one_word(field: &str, v: Scalar<'_>, allowed: impl Fn(char) -> bool, rule: &str) -> Result<Option<String>, Problem> {
    match v {
        Scalar::Null => Ok(None),
        Scalar::Str(s) if s.is_empty() => Err(Problem::new(
            format!("{field} is empty"),
            format!("write {rule}, or leave {field} out"),
        )),
        Scalar::Str(s) if s.starts_with('-') => Err(Problem::new(
            format!("{field} `{s}` starts with `-`"),
            format!("write {rule}"),
        )),
        Scalar::Str(s) => match s.chars().find(|c| !allowed(*c)) {
            Some(c) => Err(Problem::new(
                format!(
                    "{field} `{s}` contains `{}`, which is not allowed there",
                    c.escape_default()
                ),
                format!("write {rule}"),
            )),
            None => Ok(Some(s.into_owned())),
        },
        Scalar::Int(n) if field == "host" => Err(Problem::new(
            format!("host must be a name or an address, found the number {n}"),
            "write a host name, an IPv4/IPv6 address or a `Host` entry of ~/.ssh/config",
        )),
        other => Err(Problem::new(
            format!("{field} must be text, found {}", other.describe()),
            format!("write {rule}"),
        )),
    }
}

pub(crate) fn de_ssh_host<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    scalar(d, |v| {
        one_word(
            "host",
            v,
            |c| c.is_ascii_alphanumeric() || "-._:%".contains(c),
            "a host name (`gpu1.lab.example`), an address (`10.0.0.5`) or a `Host` entry of ~/.ssh/config",
        )
    })
}

pub(crate) fn de_ssh_user<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    scalar(d, |v| {
        one_word(
            "user",
            v,
            |c| c.is_ascii_alphanumeric() || "-._$".contains(c),
            "a login name like `ubuntu` or `root`",
        )
    })
}

pub(crate) fn de_identity_file<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    scalar(d, |v| {
        one_word(
            "identity_file",
            v,
            |c| !c.is_control(),
            "the path of a private key, like `~/.ssh/id_ed25519`",
        )
    })
}

pub(crate) fn de_rdma_device<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    scalar(d, |v| {
        let name = one_word(
            "rdma_device",
            v,
            |c| c.is_ascii_alphanumeric() || "-_.".contains(c),
            "an RDMA device name as `rdma link` or `ibv_devices` lists it, like `mlx5_0`",
        )?;
        match name {
            Some(n) if n.len() > 63 => Err(Problem::new(
                format!(
                    "rdma_device `{n}` is {} characters long; device names have at most 63",
                    n.len()
                ),
                "write the name `ibv_devices` lists, like `mlx5_0`",
            )),
            other => Ok(other),
        }
    })
}

/// The SSH port of a host that exists (provider ssh): any port, 22 included.
pub(crate) fn de_port<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u16>, D::Error> {
    scalar(d, |v| {
        int_in(
            "port",
            v,
            1..=65535,
            "set port to the host's SSH port (1 to 65535), or leave it out for ~/.ssh/config's or 22",
        )
    })
}

pub(crate) fn de_sudo<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    scalar(d, |v| {
        match v {
        Scalar::Null => Ok(None),
        Scalar::Bool(b) => Ok(Some(b)),
        other => Err(Problem::new(
            format!("sudo must be true or false, found {}", other.describe()),
            "write `sudo: true` (privileged steps run under `sudo -n`), `sudo: false` (the user is root), or leave it out to decide by the login user",
        )),
    }
    })
}

/// `host_key:` is an OpenSSH public key (`ssh-ed25519 AAAA...`, comment
/// allowed) or its SHA256 fingerprint as `ssh-keygen -lf` prints it
/// (`SHA256:` and 43 characters of unpadded base64).
pub(crate) fn de_proxy_jump<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    scalar(d, |v| match v {
        Scalar::Null => Ok(None),
        Scalar::Str(s) => crate::jump::parse_proxy_jump(&s)
            .map(|_| Some(s.into_owned()))
            .map_err(|(problem, fix)| Problem::new(problem, fix)),
        other => Err(Problem::new(
            format!("proxy_jump must be text, found {}", other.describe()),
            format!("write {}", crate::jump::PROXY_JUMP_RULE),
        )),
    })
}

pub(crate) fn de_host_key<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    host_key_field(d, "host_key")
}

pub(crate) fn de_proxy_jump_host_key<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    host_key_field(d, "proxy_jump_host_key")
}

/// A host key (`ssh-ed25519 AAAA...`) or its fingerprint (`SHA256:...`) in field `field`.
fn host_key_field<'de, D: Deserializer<'de>>(d: D, field: &str) -> Result<Option<String>, D::Error> {
    const FIX: &str = "paste the host's key as `ssh-keyscan -t ed25519 HOST` prints it (without the host name), or its fingerprint from `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` run on the host (`SHA256:...`)";
    scalar(d, |v| match v {
        Scalar::Null => Ok(None),
        Scalar::Str(s) => {
            let t = s.trim();
            let b64 = |x: &str| !x.is_empty() && x.chars().all(|c| c.is_ascii_alphanumeric() || "+/=".contains(c));
            if let Some(fp) = t.strip_prefix("SHA256:") {
                if fp.len() == 43 && b64(fp) && !fp.contains('=') {
                    return Ok(Some(t.to_string()));
                }
                return Err(Problem::new(
                    format!("{field} `{t}` is not a SHA256 fingerprint: after `SHA256:` come 43 base64 characters"),
                    FIX,
                ));
            }
            let mut words = t.split_whitespace();
            match (words.next(), words.next()) {
                (Some(algo), Some(key))
                    if (algo.starts_with("ssh-") || algo.starts_with("ecdsa-") || algo.starts_with("sk-"))
                        && b64(key) =>
                {
                    Ok(Some(format!("{algo} {key}")))
                }
                _ => Err(Problem::new(
                    format!("{field} `{t}` is neither a public key nor a SHA256 fingerprint"),
                    FIX,
                )),
            }
        }
        other => Err(Problem::new(
            format!("{field} must be text, found {}", other.describe()),
            FIX,
        )),
    })
}
