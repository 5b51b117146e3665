//! The supervisor's log lines. The supervisor's stderr is `supervisor.log`
//! in the lab directory; each line it writes there itself is stamped with
//! the time, so that a user can put "data NIC stalled" beside the run that
//! failed then. [`data_nic_restarts`] reads back the lines that say the
//! supervisor restarted a node's data NIC (what `doctor` shows).

use crate::provider::NicRestart;

/// What the line of a data NIC the supervisor found stalled (and paused
/// and resumed its VM for) says after the node's name.
pub(super) const DATA_NIC_STALLED: &str = "data NIC stalled";
/// What the line of a failed restart says after the node's name.
pub(super) const RESTART_FAILED: &str = "restarting its transmit queue failed";
/// What the line of a VM the supervisor started says after the node's name.
pub(super) const STARTED: &str = "started";

/// Writes one line of the supervisor's log, stamped with the UTC time to
/// the second.
pub(super) fn line(what: std::fmt::Arguments) {
    eprintln!("{}", stamped(&lab_state::now_rfc3339(), what));
}

fn stamped(at: &str, what: std::fmt::Arguments) -> String {
    format!("{at} supervisor: {what}")
}

/// The supervisor's restarts of node `node`'s data NIC in `log` (the text
/// of `supervisor.log`) since the node last started, oldest first: each
/// stall it found and each restart that failed. Lines without a time
/// (QEMU's own messages) are not the supervisor's and are skipped.
pub(super) fn data_nic_restarts(log: &str, node: &str) -> Vec<NicRestart> {
    let about = format!("supervisor: node {node}");
    let mut restarts = Vec::new();
    for line in log.lines() {
        let Some((at, rest)) = line.split_once(' ') else {
            continue;
        };
        let Some(said) = rest.strip_prefix(&about) else {
            continue;
        };
        let Ok(at) = humantime::parse_rfc3339(at) else {
            continue;
        };
        if said.starts_with(&format!(" {STARTED}")) {
            restarts.clear();
        } else if let Some(detail) = said.strip_prefix(": ") {
            let failed = detail.starts_with(RESTART_FAILED);
            if failed || detail.starts_with(DATA_NIC_STALLED) {
                restarts.push(NicRestart {
                    at,
                    failed,
                    detail: detail.to_string(),
                });
            }
        }
    }
    restarts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_starts_with_its_time_then_says_whose_it_is() {
        let line = stamped("2026-12-01T04:20:00Z", format_args!("node {}: watching", "client"));
        assert_eq!(line, "2026-12-01T04:20:00Z supervisor: node client: watching");
    }

    #[test]
    fn restarts_are_read_back_per_node_since_it_last_started() {
        let at = |t: &str| format!("2026-12-01T04:{t}Z");
        let log = [
            stamped(&at("00:00"), format_args!("node client {STARTED} (pid 10)")),
            stamped(
                &at("00:01"),
                format_args!("node client: {DATA_NIC_STALLED}: before the restart"),
            ),
            stamped(&at("00:02"), format_args!("node client {STARTED} (pid 11)")),
            stamped(&at("00:03"), format_args!("node server {STARTED} (pid 12)")),
            "qemu-system-x86_64: a line of QEMU's own".to_string(),
            stamped(
                &at("00:04"),
                format_args!("node client: watching its data NIC's transmit queue"),
            ),
            stamped(
                &at("10:00"),
                format_args!("node client: {DATA_NIC_STALLED}: the guest posted 3 frame(s)"),
            ),
            stamped(&at("10:01"), format_args!("node client: {RESTART_FAILED}: broken pipe")),
            stamped(
                &at("11:00"),
                format_args!("node server: {DATA_NIC_STALLED}: the guest posted 9 frame(s)"),
            ),
            stamped(
                &at("12:00"),
                format_args!("node client2: {DATA_NIC_STALLED}: another node"),
            ),
        ]
        .join("\n");
        let client = data_nic_restarts(&log, "client");
        let seen: Vec<(String, bool, &str)> = client
            .iter()
            .map(|r| (lab_state::rfc3339(r.at), r.failed, r.detail.as_str()))
            .collect();
        assert_eq!(
            seen,
            [
                (at("10:00"), false, "data NIC stalled: the guest posted 3 frame(s)"),
                (at("10:01"), true, "restarting its transmit queue failed: broken pipe"),
            ]
        );
        assert_eq!(data_nic_restarts(&log, "server").len(), 1);
        assert!(data_nic_restarts(&log, "router").is_empty());
    }
}
