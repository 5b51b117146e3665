//! A failed step's program that was given a GID index: does that index
//! exist on the node's RDMA port, and is it the RoCE v2 GID of the node's
//! data address? Read from sysfs on the node after the failure, because the
//! program's own error ("Failed to modify QP to RTR", "Couldn't connect")
//! names none of it. perftest takes the index as `-x N` (`--gid-index`),
//! the libibverbs examples (`ibv_rc_pingpong` ...) and programs built like
//! them as `-g N` (`--gid-idx`). It only says something when the index is
//! wrong on the node; it never changes what failed.

use lab_remote::command::RemoteCommand;
use lab_remote::ssh::SshSession;

use crate::facts::NodeFacts;

/// Prints the port's GID table size and entry `$3`'s GID and type (sysfs;
/// an entry past the table has no file, an unused one reads as zeros and
/// has no type).
const READ_ENTRY: &str = r#"
d=/sys/class/infiniband/$1/ports/$2
[ -d "$d/gids" ] || { echo "noport"; exit 0; }
echo "size $(ls "$d/gids" | wc -l)"
echo "gid $(cat "$d/gids/$3" 2>/dev/null)"
echo "type $(cat "$d/gid_attrs/types/$3" 2>/dev/null)"
"#;

/// A GID index as a command line gives it, with the device and port given
/// beside it (perftest and the examples: `-d DEV`, `-i PORT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GivenIndex {
    /// The option as written (`-x`, `--gid-idx`, ...).
    pub flag: String,
    /// The index.
    pub index: u32,
    /// `-d`/`--ib-dev`, when given.
    pub device: Option<String>,
    /// `-i`/`--ib-port`, when given.
    pub port: Option<u32>,
}

/// The words of a step's command as the shell splits them: a list-form
/// command's own, a line's split as `sh` would (None when it does not split).
fn words_of(command: &RemoteCommand) -> Option<Vec<String>> {
    match command.argv() {
        Some(argv) => Some(argv.to_vec()),
        None => shlex::split(&command.to_string()),
    }
}

/// Finds a GID index in a command's `words`: `-x`/`--gid-index` after a
/// perftest program (`ib_*`), `-g`/`--gid-idx` after any other (perftest's
/// own `-g` is its multicast switch and takes no value).
pub fn given_index(words: &[String]) -> Option<GivenIndex> {
    let mut given = None;
    let mut device = None;
    let mut port = None;
    let mut perftest = false;
    let mut program_seen = false;
    let mut i = 0;
    while i < words.len() {
        let word = words[i].as_str();
        let next = words.get(i + 1).map(String::as_str);
        if !word.starts_with('-') && !program_seen {
            // The program, past `sudo`, `timeout` and its duration (`30`, `30s`).
            let base = word.rsplit('/').next().unwrap_or(word);
            perftest = base.starts_with("ib_");
            program_seen = base != "sudo" && base != "timeout" && !base.starts_with(|c: char| c.is_ascii_digit());
        }
        let (name, inline) = match word.split_once('=') {
            Some((name, value)) if word.starts_with("--") => (name, Some(value)),
            _ => (word, None),
        };
        let index_flag = if perftest {
            matches!(name, "-x" | "--gid-index")
        } else {
            matches!(name, "-g" | "--gid-idx")
        };
        let value = inline.or(next);
        let mut took_next = inline.is_none();
        if index_flag {
            if let Some(index) = value.and_then(|v| v.parse().ok()) {
                given = Some((name.to_string(), index));
            }
        } else if matches!(name, "-d" | "--ib-dev") {
            device = value.map(str::to_string);
        } else if matches!(name, "-i" | "--ib-port") {
            port = value.and_then(|v| v.parse().ok());
        } else {
            took_next = false;
        }
        i += if took_next { 2 } else { 1 };
    }
    given.map(|(flag, index)| GivenIndex {
        flag,
        index,
        device,
        port,
    })
}

/// Entry `given.index` of the port, as the node's sysfs shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    table_size: u32,
    gid: String,
    kind: String,
}

fn parse_entry(text: &str) -> Option<Entry> {
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
            .unwrap_or_default()
    };
    if text.lines().any(|l| l.trim() == "noport") {
        return None;
    }
    Some(Entry {
        table_size: field("size ").parse().ok()?,
        gid: field("gid "),
        kind: field("type "),
    })
}

/// What is wrong with the entry, or None when it is the data address's
/// RoCE v2 GID (or the node's facts do not say which that is).
fn what_is_wrong(given: &GivenIndex, entry: &Entry, facts: &NodeFacts, device: &str, port: u32) -> Option<String> {
    let at = format!("{device} port {port}");
    let unused = entry.gid.is_empty() || entry.gid.chars().all(|c| c == '0' || c == ':');
    if given.index >= entry.table_size {
        Some(format!(
            "GID index {} is past the end of {at}'s table ({} entries)",
            given.index, entry.table_size
        ))
    } else if unused || entry.kind.is_empty() {
        Some(format!(
            "GID index {} of {at} is empty: no address holds it",
            given.index
        ))
    } else if Some(given.index) == facts.gid_index {
        None
    } else if entry.kind.contains("v1") {
        Some(format!(
            "GID index {} of {at} is a RoCE v1 entry ({}): RoCE v1 is not routable, and the peer's v2 GID will not match it",
            given.index, entry.gid
        ))
    } else {
        Some(format!(
            "GID index {} of {at} is {} ({}), not the RoCE v2 GID of the node's data address",
            given.index, entry.gid, entry.kind
        ))
    }
}

/// After a step failed: when `command`, run on `facts`' node, was given a
/// GID index that is wrong there, says what it is and which index is
/// right. None when the command gives none, the index is right, or the
/// node cannot be asked.
pub async fn explain(session: &SshSession, facts: &NodeFacts, side: &str, command: &RemoteCommand) -> Option<String> {
    let given = given_index(&words_of(command)?)?;
    let device = given.device.clone().or_else(|| facts.rdma_device.clone())?;
    let port = given.port.or(facts.port).unwrap_or(1);
    let read = RemoteCommand::script_with(READ_ENTRY, [device.clone(), port.to_string(), given.index.to_string()]);
    let out = session.exec(&read).await.ok()?;
    let entry = parse_entry(&out.stdout_text())?;
    let wrong = what_is_wrong(&given, &entry, facts, &device, port)?;
    let right = match facts.gid_index {
        Some(index) => format!(
            "; the RoCE v2 GID of its data address {} is index {index} (`{{self.gid_index}}` in a step's command)",
            facts.data_addr
        ),
        None => String::new(),
    };
    Some(format!(
        "{side} on `{}`: `{} {}`: {wrong}{right}",
        facts.name, given.flag, given.index
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step's command line as the suite gives it (`run: "..."`).
    fn given_in(line: &str) -> Option<GivenIndex> {
        given_index(&words_of(&RemoteCommand::user_line(line))?)
    }

    #[test]
    fn test_the_gid_index_is_read_as_each_program_family_takes_it() {
        let perftest = given_in("ib_write_bw -d rxe0 -x 7 -n 200 10.77.0.1").unwrap();
        assert_eq!((perftest.flag.as_str(), perftest.index), ("-x", 7));
        assert_eq!(perftest.device.as_deref(), Some("rxe0"));
        assert_eq!(
            given_in("timeout 30 ib_send_lat --gid-index=3 -i 2").unwrap().port,
            Some(2)
        );
        // perftest's -g is its multicast switch, not a GID index.
        assert_eq!(given_in("ib_send_bw -g -n 5"), None);
        let example = given_in("ibv_rc_pingpong -d rxe0 -g 1 -n 50").unwrap();
        assert_eq!((example.flag.as_str(), example.index), ("-g", 1));
        // A list-form command, and a line with quoted words.
        let listed = RemoteCommand::new("rc_exchange").args(["-d", "rxe0", "-g", "9", "-n", "8"]);
        assert_eq!(given_index(&words_of(&listed).unwrap()).unwrap().index, 9);
        let quoted = given_in("rc_exchange '-d' 'rxe0' '-g' '9' '-n' '8'").unwrap();
        assert_eq!(quoted.index, 9);
        // A duration with its unit is not the program.
        assert_eq!(given_in("timeout 30s ib_write_bw -x 3").unwrap().flag, "-x");
        assert_eq!(given_in("rping -s -a 10.77.0.1 -p 7174"), None);
    }

    fn facts() -> NodeFacts {
        serde_json::from_value(serde_json::json!({
            "name": "server", "data_addr": "10.77.0.1", "data_prefix": 24, "netdev": "eth1",
            "rdma_device": "rxe0", "port": 1, "gid_index": 1,
            "gid": "0000:0000:0000:0000:0000:ffff:0a4d:0001", "vcpus": 1
        }))
        .unwrap()
    }

    #[test]
    fn test_an_index_is_wrong_when_past_the_table_empty_v1_or_another_address() {
        let given = |index| GivenIndex {
            flag: "-x".into(),
            index,
            device: None,
            port: None,
        };
        // Recorded on a lab node (rxe0 port 1): entry 7 of 1024 unused.
        let empty = parse_entry("size 1024\ngid 0000:0000:0000:0000:0000:0000:0000:0000\ntype \n").unwrap();
        let wrong = what_is_wrong(&given(7), &empty, &facts(), "rxe0", 1).unwrap();
        assert!(wrong.contains("GID index 7 of rxe0 port 1 is empty"), "{wrong}");
        let past = what_is_wrong(&given(2000), &empty, &facts(), "rxe0", 1).unwrap();
        assert!(
            past.contains("past the end of rxe0 port 1's table (1024 entries)"),
            "{past}"
        );
        let v1 = parse_entry("size 1024\ngid 0000:0000:0000:0000:0000:ffff:0a4d:0001\ntype IB/RoCE v1\n").unwrap();
        assert!(what_is_wrong(&given(0), &v1, &facts(), "rxe0", 1)
            .unwrap()
            .contains("RoCE v1 entry"));
        let right = parse_entry("size 1024\ngid 0000:0000:0000:0000:0000:ffff:0a4d:0001\ntype RoCE v2\n").unwrap();
        assert_eq!(what_is_wrong(&given(1), &right, &facts(), "rxe0", 1), None);
        // rxe's index 0: the link-local address, RoCE v2, not the data address.
        let link_local = parse_entry("size 1024\ngid fe80:0000:0000:0000:5054:98ff:fe01:0102\ntype RoCE v2\n").unwrap();
        let other = what_is_wrong(&given(0), &link_local, &facts(), "rxe0", 1).unwrap();
        assert!(
            other.contains(
                "is fe80:0000:0000:0000:5054:98ff:fe01:0102 (RoCE v2), not the RoCE v2 GID of the node's data address"
            ),
            "{other}"
        );
        assert_eq!(parse_entry("noport\n"), None);
    }
}
