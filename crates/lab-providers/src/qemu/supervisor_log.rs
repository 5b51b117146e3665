//! The supervisor's log lines. The supervisor's stderr is `supervisor.log`
//! in the lab directory; each line it writes there itself is stamped with
//! the time, so that a user can put "data NIC stalled" beside the run that
//! failed then.

/// Writes one line of the supervisor's log, stamped with the UTC time to
/// the second.
pub(super) fn line(what: std::fmt::Arguments) {
    eprintln!("{}", stamped(&lab_state::now_rfc3339(), what));
}

fn stamped(at: &str, what: std::fmt::Arguments) -> String {
    format!("{at} supervisor: {what}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_starts_with_its_time_then_says_whose_it_is() {
        let line = stamped("2026-12-01T04:20:00Z", format_args!("node {}: watching", "client"));
        assert_eq!(line, "2026-12-01T04:20:00Z supervisor: node client: watching");
    }
}
