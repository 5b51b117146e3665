//! Problems found while reading a file: what is wrong and how to fix it,
//! carried through serde as a framed message so the parser's position can be
//! attached; and the did-you-mean hint for misspelt names (edit distance
//! from `strsim`, which replaced a hand-written Levenshtein).

use serde::de;

/// A problem found by a check: what, and how to fix it. Travels through
/// serde as a custom error message, framed by control characters so our
/// reader (`crate::yaml::de`) can tell it, whole, from other messages and
/// take it back as a `Problem`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    pub(crate) message: String,
    pub(crate) fix: String,
}

pub(crate) const FRAME_START: char = '\u{1}';

pub(crate) const FRAME_SPLIT: char = '\u{2}';

pub(crate) const FRAME_END: char = '\u{3}';

impl Problem {
    pub(crate) fn new(message: impl Into<String>, fix: impl Into<String>) -> Self {
        Problem {
            message: message.into(),
            fix: fix.into(),
        }
    }

    pub(crate) fn into_de<E: de::Error>(self) -> E {
        E::custom(format!(
            "{FRAME_START}{}{FRAME_SPLIT}{}{FRAME_END}",
            self.message, self.fix
        ))
    }

    /// The problem a framed message carries (the message `into_de` made,
    /// as a deserializer's `custom` receives it); `None` for any other.
    pub(crate) fn from_frame(raw: &str) -> Option<Problem> {
        let body = raw.strip_prefix(FRAME_START)?.strip_suffix(FRAME_END)?;
        let (message, fix) = body.split_once(FRAME_SPLIT)?;
        Some(Problem::new(message, fix))
    }
}

/// Common other words for our fields.
pub(crate) const ALIASES: &[(&str, &str)] = &[
    ("cpu", "cpus"),
    ("vcpus", "cpus"),
    ("vcpu", "cpus"),
    ("cores", "cpus"),
    ("ram", "memory"),
    ("mem", "memory"),
    ("memory_mib", "memory"),
    ("memory_mb", "memory"),
    ("ip", "data_addr"),
    ("addr", "data_addr"),
    ("address", "data_addr"),
    ("data_ip", "data_addr"),
    ("hostname", "name"),
    ("host", "name"),
    ("port", "ssh_port"),
    ("network", "data_network"),
    ("subnet", "data_network"),
    ("cidr", "data_network"),
    ("accelerator", "accel"),
    ("driver", "provider"),
    ("transport", "fabric"),
    ("rdma", "fabric"),
    ("node", "nodes"),
    ("hosts", "nodes"),
    ("machines", "nodes"),
    ("vms", "nodes"),
    ("lab", "labs"),
    ("default", "defaults"),
];

/// The candidate closest to `word`, if close enough to be a typo.
pub(crate) fn did_you_mean<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let w = word.to_ascii_lowercase().replace('-', "_");
    if let Some(c) = candidates.iter().find(|c| c.eq_ignore_ascii_case(&w)) {
        return Some(c);
    }
    if let Some((_, to)) = ALIASES.iter().find(|(from, _)| *from == w) {
        if let Some(c) = candidates.iter().find(|c| *c == to) {
            return Some(c);
        }
    }
    candidates
        .iter()
        .map(|c| (strsim::levenshtein(&w, &c.replace('-', "_")), *c))
        .filter(|(d, c)| *d <= 2.min(c.len().max(w.len()) / 3 + 1) && *d > 0)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}
