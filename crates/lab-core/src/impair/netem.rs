//! A netem configuration: parsed from what a person types (`40ms`, `2%`,
//! `200mbit`), checked for what netem would refuse or ignore, rendered as
//! the `tc` command that sets it, and read back from `tc qdisc show`.
//! Text only: running tc on a node is `apply`'s.

use std::fmt;

use serde::Serialize;

use lab_remote::command::RemoteCommand;

use super::error::ImpairError;

/// A netem configuration. Percentages are 0..=100, times microseconds, the
/// rate bits per second; `None` leaves that impairment out.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Netem {
    /// Packets dropped, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss_pct: Option<f64>,
    /// Added one-way delay, µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_us: Option<u64>,
    /// Random variation of the delay, ± µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jitter_us: Option<u64>,
    /// Bandwidth limit, bits per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_bit_s: Option<u64>,
    /// Packets sent at once, ahead of the delayed ones, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reorder_pct: Option<f64>,
    /// Packets sent twice, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duplicate_pct: Option<f64>,
}

impl Netem {
    /// Nothing set.
    pub fn is_empty(&self) -> bool {
        *self == Netem::default()
    }

    /// Checks what netem itself would refuse or silently ignore, and says why.
    pub fn validate(&self) -> Result<(), ImpairError> {
        if self.is_empty() {
            return Err(ImpairError::Spec(
                "no impairment given: use --loss, --delay, --jitter, --rate, --reorder or --duplicate, or --clear to remove one".into(),
            ));
        }
        if self.delay_us.is_none() {
            if self.jitter_us.is_some() {
                return Err(ImpairError::Spec(
                    "--jitter varies the delay, so it needs --delay too (e.g. --delay 40ms --jitter 5ms)".into(),
                ));
            }
            if self.reorder_pct.is_some() {
                return Err(ImpairError::Spec(
                    "--reorder needs --delay: netem reorders by sending some packets at once while the others wait out the delay (e.g. --delay 10ms --reorder 5%)".into(),
                ));
            }
        }
        if let (Some(jitter), Some(delay)) = (self.jitter_us, self.delay_us) {
            if jitter > delay {
                return Err(ImpairError::Spec(format!(
                    "--jitter {} is larger than --delay {}: a packet cannot leave before it was sent; use a jitter up to the delay",
                    format_time(jitter),
                    format_time(delay)
                )));
            }
        }
        if self.rate_bit_s == Some(0) {
            return Err(ImpairError::Spec(
                "--rate 0 would stop all traffic; use --loss 100% to cut the link".into(),
            ));
        }
        Ok(())
    }

    /// The netem arguments (after `netem`), in the order tc documents them.
    pub fn netem_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(delay) = self.delay_us {
            args.extend(["delay".into(), format_time(delay)]);
            if let Some(jitter) = self.jitter_us {
                args.push(format_time(jitter));
            }
        }
        if let Some(loss) = self.loss_pct {
            args.extend(["loss".into(), format_pct(loss)]);
        }
        if let Some(dup) = self.duplicate_pct {
            args.extend(["duplicate".into(), format_pct(dup)]);
        }
        if let Some(reorder) = self.reorder_pct {
            args.extend(["reorder".into(), format_pct(reorder)]);
        }
        if let Some(rate) = self.rate_bit_s {
            args.extend(["rate".into(), format_rate(rate)]);
        }
        args
    }

    /// `tc qdisc add dev NETDEV root netem ...`.
    pub fn tc_add_argv(&self, netdev: &str) -> Vec<String> {
        let mut argv: Vec<String> = ["tc", "qdisc", "add", "dev", netdev, "root", "netem"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        argv.extend(self.netem_args());
        argv
    }

    /// The shell command that makes this the NIC's only impairment: the old
    /// root qdisc goes, then this netem is added. Not `tc qdisc replace`:
    /// on an existing netem that keeps every option the new command leaves
    /// out (measured: `replace ... netem loss 2%` over `reorder 5% rate
    /// 200mbit` left all three active).
    pub fn tc_command(&self, netdev: &str) -> RemoteCommand {
        let argv = self.tc_add_argv(netdev);
        RemoteCommand::new("tc")
            .args(["qdisc", "del", "dev", netdev, "root"])
            .stderr_to_null()
            .then(RemoteCommand::new(&argv[0]).args(&argv[1..]))
    }
}

impl fmt::Display for Netem {
    /// The netem arguments as one line: `delay 40ms 5ms loss 1%`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.netem_args().join(" "))
    }
}

/// Parses a percentage: `2%`, `0.5%` or `2`, between 0 and 100.
pub fn parse_pct(text: &str) -> Result<f64, String> {
    let number = text.trim().strip_suffix('%').unwrap_or(text.trim());
    match number.parse::<f64>() {
        Ok(v) if (0.0..=100.0).contains(&v) => Ok(v),
        Ok(_) => Err(format!("`{text}` is not between 0% and 100%")),
        Err(_) => Err(format!("`{text}` is not a percentage (e.g. 1%, 0.5%)")),
    }
}

/// Parses a time with its unit: `100us`, `40ms`, `1.5s`; returns µs.
pub fn parse_time(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale = match unit {
        "us" | "µs" => 1.0,
        "ms" => 1e3,
        "s" => 1e6,
        "" => return Err(format!("`{text}` has no unit: write it with us, ms or s (e.g. 40ms)")),
        _ => {
            return Err(format!(
                "`{text}`: unknown time unit `{unit}`; use us, ms or s (e.g. 40ms)"
            ))
        }
    };
    match number.parse::<f64>() {
        Ok(v) if v.is_finite() => {
            let us = v * scale;
            if us > 0.0 && us < 1.0 {
                Err(format!("`{text}` is below netem's resolution of 1us"))
            } else {
                Ok(us.round() as u64)
            }
        }
        _ => Err(format!("`{text}` is not a time (e.g. 40ms, 100us, 1s)")),
    }
}

/// Parses a rate in bits per second: `500kbit`, `200mbit`, `1gbit`.
pub fn parse_rate(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale = match unit.to_ascii_lowercase().as_str() {
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "kbps" | "mbps" | "gbps" => {
            return Err(format!(
                "`{text}`: to tc, `{unit}` means bytes per second, which is easy to misread; write the rate in bits: kbit, mbit or gbit (e.g. 200mbit)"
            ))
        }
        "" => return Err(format!("`{text}` has no unit: write it with kbit, mbit or gbit (e.g. 200mbit)")),
        _ => return Err(format!("`{text}`: unknown rate unit `{unit}`; use kbit, mbit or gbit (e.g. 200mbit)")),
    };
    match number.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok((v * scale).round() as u64),
        _ => Err(format!("`{text}` is not a rate (e.g. 200mbit)")),
    }
}

fn format_pct(v: f64) -> String {
    format!("{v}%")
}

fn format_time(us: u64) -> String {
    match us {
        0 => "0us".into(),
        _ if us.is_multiple_of(1_000_000) => format!("{}s", us / 1_000_000),
        _ if us.is_multiple_of(1000) => format!("{}ms", us / 1000),
        _ => format!("{us}us"),
    }
}

fn format_rate(bits: u64) -> String {
    match bits {
        _ if bits >= 1_000_000_000 && bits.is_multiple_of(1_000_000_000) => format!("{}gbit", bits / 1_000_000_000),
        _ if bits >= 1_000_000 && bits.is_multiple_of(1_000_000) => format!("{}mbit", bits / 1_000_000),
        _ if bits >= 1000 && bits.is_multiple_of(1000) => format!("{}kbit", bits / 1000),
        _ => format!("{bits}bit"),
    }
}

/// Reads the root netem qdisc out of `tc qdisc show dev X`; `None` when the
/// NIC has none (its default qdisc, or another kind).
pub fn parse_tc_show(output: &str) -> Option<Netem> {
    let line = output.lines().find(|l| {
        let words: Vec<&str> = l.split_whitespace().collect();
        words.len() >= 4 && words[0] == "qdisc" && words[1] == "netem" && words.contains(&"root")
    })?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut netem = Netem::default();
    let mut i = 0;
    while i < words.len() {
        let next = words.get(i + 1).copied().unwrap_or_default();
        match words[i] {
            "delay" => {
                netem.delay_us = tc_time(next);
                // The jitter, when there is one, follows the delay.
                if let Some(jitter) = words.get(i + 2).and_then(|w| tc_time(w)) {
                    netem.jitter_us = Some(jitter);
                    i += 1;
                }
                i += 1;
            }
            "loss" => {
                // `loss random 1%` in some versions, `loss 1%` in others.
                let value = if next == "random" {
                    words.get(i + 2).copied()
                } else {
                    Some(next)
                };
                netem.loss_pct = value.and_then(tc_pct);
                i += 1;
            }
            "duplicate" => {
                netem.duplicate_pct = tc_pct(next);
                i += 1;
            }
            "reorder" => {
                netem.reorder_pct = tc_pct(next);
                i += 1;
            }
            "rate" => {
                netem.rate_bit_s = tc_rate(next);
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    // netem with nothing set (`tc qdisc add ... netem`) impairs nothing.
    (!netem.is_empty()).then_some(netem)
}

/// tc prints times as `40ms`, `40.0ms`, `100us`, `1s` or `1.5s`.
fn tc_time(word: &str) -> Option<u64> {
    let split = word.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = word.split_at(split);
    let v: f64 = number.parse().ok()?;
    let scale = match unit {
        "ns" => 1e-3,
        "us" => 1.0,
        "ms" => 1e3,
        "s" => 1e6,
        _ => return None,
    };
    Some((v * scale).round() as u64)
}

/// Percentages come back through the kernel's 32-bit probability, so `2%`
/// may read as 1.99999%: round to what a person typed (6 significant digits).
fn tc_pct(word: &str) -> Option<f64> {
    let v: f64 = word.strip_suffix('%')?.parse().ok()?;
    Some((v * 1e4).round() / 1e4)
}

/// tc prints rates as `200Mbit`, `500Kbit`, `1Gbit` or `800bit`.
fn tc_rate(word: &str) -> Option<u64> {
    let split = word.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = word.split_at(split);
    let v: f64 = number.parse().ok()?;
    let scale = match unit.to_ascii_lowercase().as_str() {
        "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "tbit" => 1e12,
        "kibit" => 1024.0,
        "mibit" => 1024.0 * 1024.0,
        "gibit" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some((v * scale).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_percentages_accept_with_or_without_sign_and_reject_out_of_range() {
        assert_eq!(parse_pct("2%"), Ok(2.0));
        assert_eq!(parse_pct("0.5%"), Ok(0.5));
        assert_eq!(parse_pct("100"), Ok(100.0));
        assert!(parse_pct("150%").unwrap_err().contains("between 0% and 100%"));
        assert!(parse_pct("-1%").unwrap_err().contains("between"));
        assert!(parse_pct("lots").unwrap_err().contains("not a percentage"));
    }

    #[test]
    fn test_times_need_a_unit() {
        assert_eq!(parse_time("40ms"), Ok(40_000));
        assert_eq!(parse_time("100us"), Ok(100));
        assert_eq!(parse_time("1.5s"), Ok(1_500_000));
        assert_eq!(parse_time("0.5ms"), Ok(500));
        assert!(parse_time("40").unwrap_err().contains("no unit"));
        assert!(parse_time("40min").unwrap_err().contains("unknown time unit `min`"));
        assert!(parse_time("ms").unwrap_err().contains("not a time"));
        assert!(parse_time("0.1us").unwrap_err().contains("resolution"));
    }

    #[test]
    fn test_rates_are_bits_and_bytes_are_refused_with_a_reason() {
        assert_eq!(parse_rate("200mbit"), Ok(200_000_000));
        assert_eq!(parse_rate("500kbit"), Ok(500_000));
        assert_eq!(parse_rate("1Gbit"), Ok(1_000_000_000));
        assert!(parse_rate("200mbps").unwrap_err().contains("bytes per second"));
        assert!(parse_rate("200").unwrap_err().contains("no unit"));
        assert!(parse_rate("200furlong").unwrap_err().contains("unknown rate unit"));
    }

    #[test]
    fn test_jitter_and_reorder_need_a_delay() {
        let jitter = Netem {
            jitter_us: Some(5000),
            ..Default::default()
        };
        assert!(jitter.validate().unwrap_err().to_string().contains("needs --delay"));
        let reorder = Netem {
            reorder_pct: Some(5.0),
            ..Default::default()
        };
        assert!(reorder
            .validate()
            .unwrap_err()
            .to_string()
            .contains("--reorder needs --delay"));
        let too_much = Netem {
            delay_us: Some(1000),
            jitter_us: Some(5000),
            ..Default::default()
        };
        assert!(too_much
            .validate()
            .unwrap_err()
            .to_string()
            .contains("larger than --delay 1ms"));
        assert!(Netem::default().validate().unwrap_err().to_string().contains("--clear"));
        let zero_rate = Netem {
            rate_bit_s: Some(0),
            ..Default::default()
        };
        assert!(zero_rate.validate().unwrap_err().to_string().contains("--loss 100%"));
    }

    #[test]
    fn test_everything_renders_as_one_netem_that_replaces_the_old() {
        let netem = Netem {
            loss_pct: Some(1.0),
            delay_us: Some(40_000),
            jitter_us: Some(5_000),
            rate_bit_s: Some(200_000_000),
            reorder_pct: Some(5.0),
            duplicate_pct: Some(0.5),
        };
        netem.validate().unwrap();
        assert_eq!(
            netem.tc_command("eth1").as_str(),
            "tc qdisc del dev eth1 root 2>/dev/null; \
             tc qdisc add dev eth1 root netem delay 40ms 5ms loss '1%' duplicate '0.5%' reorder '5%' rate 200mbit"
        );
        assert_eq!(
            netem.to_string(),
            "delay 40ms 5ms loss 1% duplicate 0.5% reorder 5% rate 200mbit"
        );
        let odd = Netem {
            delay_us: Some(1500),
            rate_bit_s: Some(1_500_000),
            ..Default::default()
        };
        assert_eq!(odd.to_string(), "delay 1500us rate 1500kbit");
    }

    #[test]
    fn test_tc_show_reads_back_what_was_set() {
        // As iproute2 6.1 printed it on the lab's node (Debian 12), jitter and all.
        let out = "qdisc netem 8001: root refcnt 2 limit 1000 delay 40ms  5ms loss 1% duplicate 0.5% reorder 5% rate 200Mbit gap 1\n";
        assert_eq!(
            parse_tc_show(out),
            Some(Netem {
                loss_pct: Some(1.0),
                delay_us: Some(40_000),
                jitter_us: Some(5_000),
                rate_bit_s: Some(200_000_000),
                reorder_pct: Some(5.0),
                duplicate_pct: Some(0.5),
            })
        );
        let loss_only = "qdisc netem 8002: root refcnt 2 limit 1000 loss 2%\n";
        assert_eq!(parse_tc_show(loss_only).unwrap().to_string(), "loss 2%");
        let decimal = "qdisc netem 8003: root refcnt 2 limit 1000 delay 40.0ms loss 1.99999%\n";
        assert_eq!(parse_tc_show(decimal).unwrap().to_string(), "delay 40ms loss 2%");
        // A NIC's default qdisc, or netem that is not at the root, is no impairment of ours.
        assert_eq!(parse_tc_show("qdisc pfifo_fast 0: root refcnt 2 bands 3\n"), None);
        assert_eq!(parse_tc_show("qdisc noqueue 0: root refcnt 2\n"), None);
        assert_eq!(parse_tc_show(""), None);
        assert_eq!(
            parse_tc_show("qdisc netem 10: parent 1:1 limit 1000 loss 5%\nqdisc htb 1: root refcnt 2\n"),
            None
        );
    }
}
