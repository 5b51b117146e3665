//! `proxy_jump: [user@]host[:port]`: the one jump host (ssh's ProxyJump)
//! through which labctl reaches a host that exists. One hop only: a chain
//! (`a,b`) is refused with a message saying so.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A parsed `proxy_jump` value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxyJump {
    /// Login user at the jump host, if given (default: the node's user).
    pub user: Option<String>,
    /// The jump host's name or address (IPv6 without its brackets).
    pub host: String,
    /// Its SSH port, if given (default 22).
    pub port: Option<u16>,
}

impl fmt::Display for ProxyJump {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(user) = &self.user {
            write!(f, "{user}@")?;
        }
        match (self.host.contains(':'), self.port) {
            (true, Some(port)) => write!(f, "[{}]:{port}", self.host),
            (false, Some(port)) => write!(f, "{}:{port}", self.host),
            (_, None) => f.write_str(&self.host),
        }
    }
}

/// What a good value looks like, for error messages.
pub const PROXY_JUMP_RULE: &str =
    "one jump host as `[user@]host[:port]`, like `admin@bastion.example:2222` (IPv6: `[fd00::1]:22`)";

/// Parses `[user@]host[:port]`; the error is (problem, fix).
pub fn parse_proxy_jump(text: &str) -> Result<ProxyJump, (String, String)> {
    let fix = || format!("write {PROXY_JUMP_RULE}");
    let bad = |why: String| Err((format!("proxy_jump `{text}` {why}"), fix()));
    if text.contains(',') {
        return Err((
            format!("proxy_jump `{text}` names more than one jump host; labctl goes through one hop only"),
            "give the last hop only (the host that can reach the node), or reach the first hop another way (a VPN, a tunnel)".into(),
        ));
    }
    if text.contains("://") {
        return bad("is a URL".into());
    }
    let (user, rest) = match text.rsplit_once('@') {
        Some((user, rest)) => (Some(user), rest),
        None => (None, text),
    };
    if let Some(user) = user {
        if user.is_empty()
            || !user.chars().all(|c| c.is_ascii_alphanumeric() || "-._$".contains(c))
            || user.starts_with('-')
        {
            return bad(format!("has the user `{user}`, which is not a login name"));
        }
    }
    let (host, port) = if let Some(inner) = rest.strip_prefix('[') {
        match inner.split_once(']') {
            Some((host, "")) => (host, None),
            Some((host, port)) => match port.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return bad(format!("has `{port}` after the address's `]`")),
            },
            None => return bad("opens `[` without closing it".into()),
        }
    } else {
        match rest.split_once(':') {
            Some((_, after)) if after.contains(':') => {
                return bad("looks like an IPv6 address: write it in brackets, `[fd00::1]:22`".into())
            }
            Some((host, port)) => (host, Some(port)),
            None => (rest, None),
        }
    };
    if host.is_empty() {
        return bad("has no host".into());
    }
    if host.starts_with('-') || !host.chars().all(|c| c.is_ascii_alphanumeric() || "-._:%".contains(c)) {
        return bad(format!("has the host `{host}`, which is not a host name or address"));
    }
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => Some(n),
            _ => return bad(format!("has the port `{p}`; a port is 1 to 65535")),
        },
    };
    Ok(ProxyJump {
        user: user.map(str::to_string),
        host: host.to_string(),
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_proxy_jump_forms() {
        let full = parse_proxy_jump("admin@bastion.example:2222").unwrap();
        assert_eq!(
            full,
            ProxyJump {
                user: Some("admin".into()),
                host: "bastion.example".into(),
                port: Some(2222)
            }
        );
        assert_eq!(full.to_string(), "admin@bastion.example:2222");
        let bare = parse_proxy_jump("10.0.0.1").unwrap();
        assert_eq!((bare.user, bare.host.as_str(), bare.port), (None, "10.0.0.1", None));
        let v6 = parse_proxy_jump("root@[fd00::1]:22").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("fd00::1", Some(22)));
        assert_eq!(v6.to_string(), "root@[fd00::1]:22");
        assert_eq!(parse_proxy_jump("[fd00::1]").unwrap().port, None);
    }

    #[test]
    fn test_proxy_jump_bad_values_say_what_is_wrong() {
        let err = |t: &str| parse_proxy_jump(t).unwrap_err();
        let (chain, fix) = err("a.example,b.example");
        assert!(
            chain.contains("more than one jump host") && chain.contains("one hop only"),
            "{chain}"
        );
        assert!(fix.contains("last hop"), "{fix}");
        assert!(err("bastion:99999").0.contains("the port `99999`"));
        assert!(err("bastion:0").0.contains("the port `0`"));
        assert!(err("bastion:ssh").0.contains("the port `ssh`"));
        assert!(err("@bastion").0.contains("the user ``"));
        assert!(err("ad min@bastion").0.contains("not a login name"));
        assert!(err("root@").0.contains("has no host"));
        assert!(err("fd00::1").0.contains("brackets"));
        assert!(err("[fd00::1").0.contains("without closing"));
        assert!(err("ssh://bastion").0.contains("URL"));
        assert!(err("-oProxyCommand=x").0.contains("not a host name"));
    }
}
