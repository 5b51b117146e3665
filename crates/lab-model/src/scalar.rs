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

/// A workload name (suite entries, `ci:`), checked while the parser points at it.
pub(crate) fn de_workload<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    use crate::workloads::WORKLOADS;
    scalar(d, |v| match v {
        Scalar::Str(s) if WORKLOADS.contains(&s.as_ref()) => Ok(s.into_owned()),
        Scalar::Str(s) => {
            let hint = did_you_mean(&s, WORKLOADS)
                .map(|m| format!("write `{m}`"))
                .unwrap_or_else(|| format!("use one of: {}", WORKLOADS.join(", ")));
            Err(Problem::new(format!("unknown workload `{s}`"), hint))
        }
        other => Err(Problem::new(
            format!("workload must be a workload's name, found {}", other.describe()),
            format!("use one of: {}", WORKLOADS.join(", ")),
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
