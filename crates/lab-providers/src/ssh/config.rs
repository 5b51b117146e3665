//! The subset of the user's `~/.ssh/config` a node's `host:` may name: a
//! `Host` entry's HostName, Port, User, IdentityFile, ProxyJump and
//! UserKnownHostsFile (labs.yaml's own values win). Parsed here by hand: no
//! maintained ssh-config crate is in the lock and the registry could not be
//! searched from this machine. Like ssh: keywords are case-insensitive, the
//! first value found for a keyword wins, `Host` patterns take `*`, `?` and
//! `!negation`. `Match` blocks and `Include` are not read (their lines are
//! skipped); tokens other than `%h`, `%p`, `%r`, `%%` and a leading `~` are
//! left as written.

use std::path::{Path, PathBuf};

/// What the config says for one host alias.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostConfig {
    /// `HostName` (with `%h` replaced by the alias).
    pub hostname: Option<String>,
    /// `Port`.
    pub port: Option<u16>,
    /// `User`.
    pub user: Option<String>,
    /// The first `IdentityFile`.
    pub identity_file: Option<String>,
    /// `ProxyJump` (`none` is kept as written: it means no jump host).
    pub proxy_jump: Option<String>,
    /// The first path of `UserKnownHostsFile`.
    pub user_known_hosts_file: Option<String>,
}

/// A line of the config that has a bad value: where, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub problem: String,
}

/// Whether `pattern` (ssh's `*` and `?` wildcards) matches `host`.
fn wildcard(pattern: &str, host: &str) -> bool {
    fn go(p: &[char], h: &[char]) -> bool {
        match (p.first(), h.first()) {
            (None, None) => true,
            (Some('*'), _) => go(&p[1..], h) || (!h.is_empty() && go(p, &h[1..])),
            (Some('?'), Some(_)) => go(&p[1..], &h[1..]),
            (Some(a), Some(b)) if a.eq_ignore_ascii_case(b) => go(&p[1..], &h[1..]),
            _ => false,
        }
    }
    let (p, h): (Vec<char>, Vec<char>) = (pattern.chars().collect(), host.chars().collect());
    go(&p, &h)
}

/// Whether a `Host` line's patterns select `host`: one positive pattern
/// matches and no negated one does.
fn host_line_matches(patterns: &[&str], host: &str) -> bool {
    let mut hit = false;
    for p in patterns {
        match p.strip_prefix('!') {
            Some(negated) if wildcard(negated, host) => return false,
            Some(_) => {}
            None => hit |= wildcard(p, host),
        }
    }
    hit
}

/// Splits `Keyword value`, `Keyword=value` or `Keyword = value`; quotes
/// around an argument are removed.
fn keyword_and_args(line: &str) -> Option<(String, Vec<String>)> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let split = line.find(|c: char| c.is_whitespace() || c == '=')?;
    let (keyword, rest) = line.split_at(split);
    let rest = rest.trim_start().strip_prefix('=').unwrap_or(rest).trim();
    let mut args = Vec::new();
    let mut chars = rest.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let mut word = String::new();
        if c == '"' {
            chars.next();
            for c in chars.by_ref() {
                if c == '"' {
                    break;
                }
                word.push(c);
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                word.push(c);
                chars.next();
            }
        }
        args.push(word);
    }
    Some((keyword.to_ascii_lowercase(), args))
}

/// What `text` (an ssh config) says for `alias`; a bad `Port` is a problem
/// with its line.
pub fn lookup(text: &str, alias: &str) -> Result<HostConfig, ConfigProblem> {
    let mut found = HostConfig::default();
    // Lines before the first Host apply to every host.
    let mut applies = true;
    for (index, line) in text.lines().enumerate() {
        let Some((keyword, args)) = keyword_and_args(line) else {
            continue;
        };
        let first = args.first().cloned();
        match keyword.as_str() {
            "host" => {
                let patterns: Vec<&str> = args.iter().map(String::as_str).collect();
                applies = host_line_matches(&patterns, alias);
            }
            // Not evaluated: a Match block's lines are skipped.
            "match" => applies = false,
            _ if !applies => {}
            "hostname" => {
                found.hostname = found.hostname.or(first.map(|h| h.replace("%h", alias)));
            }
            "port" if found.port.is_none() => {
                let value = first.unwrap_or_default();
                found.port = Some(value.parse::<u16>().ok().filter(|p| *p > 0).ok_or(ConfigProblem {
                    line: index + 1,
                    problem: format!("Port `{value}` is not a port (1 to 65535)"),
                })?);
            }
            "user" => found.user = found.user.or(first),
            "identityfile" => found.identity_file = found.identity_file.or(first),
            "proxyjump" => found.proxy_jump = found.proxy_jump.or(first),
            "userknownhostsfile" => found.user_known_hosts_file = found.user_known_hosts_file.or(first),
            _ => {}
        }
    }
    let host = found.hostname.clone().unwrap_or_else(|| alias.to_string());
    let port = found.port.unwrap_or(22).to_string();
    let user = found.user.clone().unwrap_or_default();
    let tokens = |s: String| {
        s.replace("%%", "\u{0}")
            .replace("%h", &host)
            .replace("%p", &port)
            .replace("%r", &user)
            .replace('\u{0}', "%")
    };
    found.identity_file = found.identity_file.map(tokens);
    found.user_known_hosts_file = found.user_known_hosts_file.map(tokens);
    Ok(found)
}

/// Reads `home/.ssh/config` and looks `alias` up; no file is an empty
/// answer. The error says which file and line.
pub fn for_alias(home: &Path, alias: &str) -> Result<HostConfig, String> {
    let path = home.join(".ssh").join("config");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HostConfig::default()),
        Err(e) => return Err(format!("{} cannot be read: {e}", path.display())),
    };
    lookup(&text, alias).map_err(|p| format!("{}:{}: {}", path.display(), p.line, p.problem))
}

/// `~/...` under `home`; other paths as written.
pub fn expand_tilde(path: &str, home: &Path) -> PathBuf {
    match path.strip_prefix("~/") {
        Some(rest) => home.join(rest),
        None => PathBuf::from(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "\
# global lines before any Host apply to all
IdentityFile ~/.ssh/global_key

Host cx1 cx1.lab
    HostName 192.168.7.%h-ignored
    User lab
Host cx*  !cx9
    HostName=%h.lab.example
    Port 2222
    ProxyJump admin@bastion:22
    UserKnownHostsFile \"~/.ssh/known lab\" ~/.ssh/known2
Match host cx2
    User matched
Host *
    User fallback
    Port 22
";

    #[test]
    fn test_first_value_wins_across_matching_host_blocks() {
        let cx1 = lookup(CONFIG, "cx1").unwrap();
        assert_eq!(cx1.hostname.as_deref(), Some("192.168.7.cx1-ignored"));
        assert_eq!(cx1.user.as_deref(), Some("lab"));
        assert_eq!(cx1.port, Some(2222));
        assert_eq!(cx1.identity_file.as_deref(), Some("~/.ssh/global_key"));
        assert_eq!(cx1.proxy_jump.as_deref(), Some("admin@bastion:22"));
        assert_eq!(cx1.user_known_hosts_file.as_deref(), Some("~/.ssh/known lab"));
        // Match blocks are skipped: cx2 gets the `Host *` user.
        let cx2 = lookup(CONFIG, "cx2").unwrap();
        assert_eq!(cx2.hostname.as_deref(), Some("cx2.lab.example"));
        assert_eq!(cx2.user.as_deref(), Some("fallback"));
        // Negated: cx9 is not a cx* host.
        let cx9 = lookup(CONFIG, "cx9").unwrap();
        assert_eq!((cx9.hostname, cx9.port, cx9.proxy_jump), (None, Some(22), None));
        // Case-insensitive keywords; tokens in IdentityFile.
        let tokens = lookup(
            "host A\n  IDENTITYFILE ~/.ssh/%r@%h:%p_%%\n  user u\n  hostname h.example\n",
            "a",
        )
        .unwrap();
        assert_eq!(tokens.identity_file.as_deref(), Some("~/.ssh/u@h.example:22_%"));
    }

    #[test]
    fn test_bad_port_names_its_line_and_wildcards_match_like_ssh() {
        let err = lookup("Host a\n  Port 22x\n", "a").unwrap_err();
        assert_eq!(err.line, 2);
        assert!(err.problem.contains("Port `22x`"), "{}", err.problem);
        // A bad Port under another host is never read.
        assert!(lookup("Host b\n  Port 22x\n", "a").is_ok());
        assert!(wildcard("gpu?.lab", "gpu1.lab"));
        assert!(!wildcard("gpu?.lab", "gpu12.lab"));
        assert!(wildcard("*", "anything"));
        assert!(host_line_matches(&["*", "!bastion"], "gpu1"));
        assert!(!host_line_matches(&["*", "!bastion"], "bastion"));
        assert!(!host_line_matches(&["!bastion"], "gpu1"));
        let home = Path::new("/home/u");
        assert_eq!(expand_tilde("~/.ssh/k", home), PathBuf::from("/home/u/.ssh/k"));
        assert_eq!(expand_tilde("/etc/k", home), PathBuf::from("/etc/k"));
        assert_eq!(
            for_alias(Path::new("/nonexistent-home"), "a"),
            Ok(HostConfig::default())
        );
    }
}
