//! Placeholders such as `{server.addr}` or `{self.gid_index}` in a command
//! template, filled from the facts; the shell's own braces are left alone.

use super::gather::LabFacts;

/// The fields a node placeholder (`{NODE.FIELD}`) can name.
pub const NODE_FIELDS: [&str; 7] = ["addr", "dev", "port", "gid_index", "gid", "netdev", "name"];
/// The lab-level placeholders (`{NAME}`).
pub const LAB_FIELDS: [&str; 4] = ["lab", "nodes", "fabric", "fi_provider"];

impl LabFacts {
    /// Fills the placeholders of `template` from the facts:
    /// - `{NODE.FIELD}`, FIELD one of [`NODE_FIELDS`] (`addr`, `dev`,
    ///   `port`, `gid_index`, `gid`, `netdev`, `name`); NODE is a node's
    ///   name, or `self` for `self_node`;
    /// - `{lab}`, `{nodes}` (the names, space-separated), `{fabric}`,
    ///   `{fi_provider}`;
    /// - `{{NAME}}` stands for a literal `{NAME}`.
    ///
    /// Only braces around a placeholder's shape (a name of letters, digits,
    /// `_` and `-`, with at most one `.`) are placeholders; a name of that
    /// shape that does not exist is an error naming it and listing what
    /// exists. Every other brace is the shell's and stays as it is: `${VAR}`,
    /// `{a,b}`, `{1..3}`, `awk '{print $1}'`, `find -exec ... {} \;`.
    pub fn expand(&self, template: &str, self_node: Option<&str>) -> Result<String, PlaceholderError> {
        let mut out = String::with_capacity(template.len());
        let mut rest = template;
        while let Some(i) = rest.find('{') {
            out.push_str(&rest[..i]);
            let after = &rest[i + 1..];
            // `${...}` belongs to the shell.
            if out.ends_with('$') {
                out.push('{');
                rest = after;
                continue;
            }
            // `{{NAME}}` is the literal `{NAME}`.
            if let Some(inner) = after.strip_prefix('{') {
                if let Some(end) = inner.find("}}").filter(|end| is_placeholder_shape(&inner[..*end])) {
                    out.push('{');
                    out.push_str(&inner[..end]);
                    out.push('}');
                    rest = &inner[end + 2..];
                    continue;
                }
                out.push('{');
                rest = after;
                continue;
            }
            match after.find('}') {
                Some(end) if is_placeholder_shape(&after[..end]) => {
                    out.push_str(&self.placeholder(&after[..end], self_node)?);
                    rest = &after[end + 1..];
                }
                _ => {
                    out.push('{');
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        Ok(out)
    }

    /// The value of one placeholder (without its braces).
    fn placeholder(&self, name: &str, self_node: Option<&str>) -> Result<String, PlaceholderError> {
        let Some((node, field)) = name.split_once('.') else {
            return match name {
                "lab" => Ok(self.lab.clone()),
                "nodes" => Ok(self.node_names().join(" ")),
                "fabric" => Ok(self.fabric.clone()),
                "fi_provider" => Ok(self.libfabric_provider.clone()),
                _ => Err(PlaceholderError::Unknown {
                    placeholder: name.to_string(),
                    nodes: self.node_names(),
                }),
            };
        };
        let node_name = match node {
            "self" => self_node.ok_or_else(|| PlaceholderError::NoSelf {
                placeholder: name.to_string(),
            })?,
            other => other,
        };
        let facts = self.node(node_name).ok_or_else(|| PlaceholderError::UnknownNode {
            placeholder: name.to_string(),
            node: node_name.to_string(),
            nodes: self.node_names(),
        })?;
        let value = match field {
            "addr" => Some(facts.data_addr.to_string()),
            "dev" => facts.rdma_device.clone(),
            "port" => facts.port.map(|p| p.to_string()),
            "gid_index" => facts.gid_index.map(|i| i.to_string()),
            "gid" => facts.gid.clone(),
            "netdev" => facts.netdev.clone(),
            "name" => Some(facts.name.clone()),
            _ => {
                return Err(PlaceholderError::UnknownField {
                    placeholder: name.to_string(),
                    field: field.to_string(),
                })
            }
        };
        value.ok_or_else(|| PlaceholderError::Missing {
            placeholder: name.to_string(),
            node: facts.name.clone(),
            fabric: self.fabric.clone(),
        })
    }
}

/// A placeholder [`LabFacts::expand`] cannot fill.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceholderError {
    /// `{NODE.FIELD}` names no node of the lab.
    #[error("placeholder `{{{placeholder}}}`: the lab has no node `{node}`; its nodes are: {} (and `self`, the node the command runs on)", .nodes.join(", "))]
    UnknownNode {
        /// The placeholder, without braces.
        placeholder: String,
        /// The node it names.
        node: String,
        /// The lab's nodes.
        nodes: Vec<String>,
    },
    /// `{NODE.FIELD}` names no field.
    #[error("placeholder `{{{placeholder}}}`: a node has no field `{field}`; node fields are: {}", NODE_FIELDS.join(", "))]
    UnknownField {
        /// The placeholder, without braces.
        placeholder: String,
        /// The field it names.
        field: String,
    },
    /// `{NAME}` is not a lab-level placeholder.
    #[error("unknown placeholder `{{{placeholder}}}`; lab placeholders are {}; node placeholders are {{NODE.FIELD}} with NODE one of {} or `self`, and FIELD one of {}; write `{{{{NAME}}}}` for a literal `{{NAME}}`", LAB_FIELDS.map(|f| format!("{{{f}}}")).join(", "), .nodes.join(", "), NODE_FIELDS.join(", "))]
    Unknown {
        /// The placeholder, without braces.
        placeholder: String,
        /// The lab's nodes.
        nodes: Vec<String>,
    },
    /// `{self.FIELD}` where no node is `self`.
    #[error("placeholder `{{{placeholder}}}`: `self` means the node the command runs on, and here there is none; name the node instead")]
    NoSelf {
        /// The placeholder, without braces.
        placeholder: String,
    },
    /// The node has no such value (no RDMA device on `fabric: none`, no
    /// RoCE GID on EFA).
    #[error("placeholder `{{{placeholder}}}`: node `{node}` has no such value on fabric `{fabric}`")]
    Missing {
        /// The placeholder, without braces.
        placeholder: String,
        /// The node.
        node: String,
        /// The lab's fabric.
        fabric: String,
    },
}

/// Whether `text` (between braces) looks like a placeholder: a name of
/// letters, digits, `_` and `-` starting with a letter or `_`, or two such
/// names joined by one `.`.
fn is_placeholder_shape(text: &str) -> bool {
    let name = |part: &str| {
        part.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    match text.split_once('.') {
        Some((node, field)) => name(node) && name(field),
        None => name(text),
    }
}

#[cfg(test)]
mod tests {
    use crate::facts::fixtures::sample;

    #[test]
    fn test_expand_fills_every_placeholder() {
        let facts = sample();
        let cmd = facts
            .expand(
                "ib_write_bw -d {self.dev} -i {self.port} -x {self.gid_index} {server.addr} \
                 # {lab} {nodes} {fabric} {fi_provider} {client-2.gid} {server.netdev} {self.name}",
                Some("client-2"),
            )
            .unwrap();
        assert_eq!(
            cmd,
            "ib_write_bw -d rxe0 -i 1 -x 5 10.77.0.1 # e2e server client-2 rxe verbs;ofi_rxd \
             0000:0000:0000:0000:0000:ffff:0a4d:0002 eth1 client-2"
        );
    }

    #[test]
    fn test_expand_escapes_braces() {
        let facts = sample();
        // The shell's braces stay as they are; only placeholder shapes expand.
        assert_eq!(
            facts
                .expand("awk '{print $1}' ${HOME} {a,b} {1..3} {} { x; } {lab}", None)
                .unwrap(),
            "awk '{print $1}' ${HOME} {a,b} {1..3} {} { x; } e2e"
        );
        assert_eq!(
            facts.expand("{{lab}} {{server.addr}} {{{lab}", None).unwrap(),
            "{lab} {server.addr} {{e2e"
        );
        assert_eq!(facts.expand("no placeholders", None).unwrap(), "no placeholders");
        assert_eq!(facts.expand("", None).unwrap(), "");
    }

    #[test]
    fn test_expand_errors_name_the_culprit_and_list_what_exists() {
        let facts = sample();
        let err = |t: &str, s: Option<&str>| facts.expand(t, s).unwrap_err().to_string();
        assert_eq!(
            err("{serv.addr}", None),
            "placeholder `{serv.addr}`: the lab has no node `serv`; its nodes are: server, client-2 (and `self`, the node the command runs on)"
        );
        assert_eq!(
            err("{server.address}", None),
            "placeholder `{server.address}`: a node has no field `address`; node fields are: addr, dev, port, gid_index, gid, netdev, name"
        );
        let unknown = err("x {labname} y", None);
        assert!(unknown.starts_with("unknown placeholder `{labname}`"), "{unknown}");
        assert!(
            unknown.contains("{lab}, {nodes}, {fabric}, {fi_provider}") && unknown.contains("server, client-2"),
            "{unknown}"
        );
        assert!(unknown.contains("write `{{NAME}}` for a literal `{NAME}`"), "{unknown}");
        assert!(err("{self.addr}", None).contains("`self` means the node the command runs on"));
        assert!(err("{self.addr}", Some("ghost")).contains("no node `ghost`"));
    }
}
