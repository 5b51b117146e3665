//! What the reference tools print, read back: a perftest side's result
//! table, header facts and CPU times (the shell's `times` appended by the
//! bench), `fi_pingpong`'s result row, and the JSON line of Open MPI's
//! collectives program (`provisioning/bench/mpi_collectives.c`). Pure text
//! in, records out; nothing here touches a lab.

use lab_results::bench::{CollectiveFigures, PerftestResult};
use lab_state::text::last_lines;

fn numbers(line: &str) -> Option<Vec<f64>> {
    let v: Result<Vec<f64>, _> = line.split_whitespace().map(str::parse::<f64>).collect();
    v.ok().filter(|v| !v.is_empty())
}

/// `0m1.601s` → 1.601.
fn parse_times_field(s: &str) -> Option<f64> {
    let s = s.strip_suffix('s')?;
    let (m, sec) = s.split_once('m')?;
    Some(m.parse::<f64>().ok()? * 60.0 + sec.parse::<f64>().ok()?)
}

/// Parses one perftest side's output (with the shell's `times` appended).
pub fn parse_perftest(output: &str) -> Result<PerftestResult, String> {
    let lines: Vec<&str> = output.lines().collect();
    let mut r = perftest_preamble(&lines);
    let header_at = lines
        .iter()
        .position(|l| l.trim_start().starts_with("#bytes"))
        .ok_or_else(|| {
            format!(
                "no result table (\"#bytes ...\") in perftest output:\n{}",
                last_lines(output, 12)
            )
        })?;
    let header = lines[header_at];
    let row = lines[header_at + 1..].iter().find_map(|l| numbers(l)).ok_or_else(|| {
        format!(
            "no result row under perftest's table header:\n{}",
            last_lines(output, 12)
        )
    })?;
    let col = |i: usize| row.get(i).copied();
    r.bytes = col(0).unwrap_or_default() as u64;
    r.iterations = col(1).unwrap_or_default() as u64;
    if header.contains("t_typical") {
        if row.len() < 7 {
            return Err(format!(
                "latency row has {} columns, expected at least 7: {row:?}",
                row.len()
            ));
        }
        r.lat_min_us = col(2);
        r.lat_max_us = col(3);
        r.lat_typical_us = col(4);
        r.lat_avg_us = col(5);
        r.lat_stdev_us = col(6);
        r.lat_p99_us = col(7);
        r.lat_p999_us = col(8);
    } else if header.contains("BW average") {
        if !header.contains("[MB/sec]") {
            return Err(format!(
                "perftest reported bandwidth in another unit than MB/sec (--report_gbits?): {}",
                header.trim()
            ));
        }
        if row.len() < 5 {
            return Err(format!("bandwidth row has {} columns, expected 5: {row:?}", row.len()));
        }
        r.bw_peak_mib_s = col(2);
        r.bw_avg_mib_s = col(3);
        r.msg_rate_mpps = col(4);
    } else {
        return Err(format!("unknown perftest table header: {}", header.trim()));
    }
    Ok(r)
}

/// What every perftest side prints besides its table: the header facts and,
/// appended by the bench's command wrapper, the CPU times.
fn perftest_preamble(lines: &[&str]) -> PerftestResult {
    let mut r = PerftestResult::default();
    for line in lines {
        // " TX depth        : 128" and "Dual-port : OFF\t\tDevice : rxe0".
        for part in line.split('\t').filter(|p| !p.trim().is_empty()) {
            if let Some((k, v)) = part.split_once(" : ").or_else(|| part.split_once(": ")) {
                let (k, v) = (k.trim(), v.trim());
                if !k.is_empty() && !k.starts_with('#') && !k.contains("address") && k.len() < 40 {
                    r.header.insert(k.to_string(), v.to_string());
                }
            }
        }
    }
    // dash's `times`: the shell's line, then its children's (perftest's).
    let times: Vec<(f64, f64)> = lines
        .iter()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (u, s) = (it.next()?, it.next()?);
            if it.next().is_some() {
                return None;
            }
            Some((parse_times_field(u)?, parse_times_field(s)?))
        })
        .collect();
    if times.len() >= 2 {
        let (u, s) = times[times.len() - 1];
        r.cpu_user_s = Some(u);
        r.cpu_system_s = Some(s);
    }
    r
}

/// Parses the passive side's output. Servers of the read and atomic latency
/// tests print no result table (only the client measures), so there a table
/// is optional and the header and CPU times are what the server gives.
pub fn parse_perftest_server(output: &str) -> Result<PerftestResult, String> {
    if output.lines().any(|l| l.trim_start().starts_with("#bytes")) {
        parse_perftest(output)
    } else {
        Ok(perftest_preamble(&output.lines().collect::<Vec<_>>()))
    }
}

/// Parses one `fi_pingpong` side's output (with the shell's `times` appended):
/// the row under "bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec".
/// Sizes print with binary suffixes ("64k"), counts with decimal ones ("2k").
pub fn parse_fi_pingpong(output: &str) -> Result<PerftestResult, String> {
    let lines: Vec<&str> = output.lines().collect();
    let header_at = lines
        .iter()
        .position(|l| l.starts_with("bytes") && l.contains("usec/xfer"))
        .ok_or_else(|| {
            format!(
                "no result table (\"bytes ... usec/xfer\") in fi_pingpong output:\n{}",
                last_lines(output, 12)
            )
        })?;
    let row: Vec<&str> = lines
        .get(header_at + 1)
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    let bad = || format!("fi_pingpong result row not understood: {:?}", lines.get(header_at + 1));
    if row.len() < 8 {
        return Err(bad());
    }
    let scaled = |s: &str, base: f64| -> Option<f64> {
        let s = s.trim_start_matches('=');
        let (num, mult) = match s.chars().last()? {
            'k' => (&s[..s.len() - 1], base),
            'm' => (&s[..s.len() - 1], base * base),
            'g' => (&s[..s.len() - 1], base * base * base),
            _ => (s, 1.0),
        };
        Some(num.parse::<f64>().ok()? * mult)
    };
    let mut r = PerftestResult {
        bytes: scaled(row[0], 1024.0).ok_or_else(bad)? as u64,
        iterations: scaled(row[1], 1000.0).ok_or_else(bad)? as u64,
        lat_avg_us: Some(row[6].parse().map_err(|_| bad())?),
        ..Default::default()
    };
    r.header.insert("tool".into(), "fi_pingpong".into());
    for (k, v) in [("time", row[4]), ("MB/sec", row[5]), ("Mxfers/sec", row[7])] {
        r.header.insert(k.into(), v.into());
    }
    let times: Vec<(f64, f64)> = lines[header_at + 2..]
        .iter()
        .filter_map(|l| {
            let (u, s) = l.split_once(' ')?;
            Some((parse_times_field(u.trim())?, parse_times_field(s.trim())?))
        })
        .collect();
    if let Some(&(u, s)) = times.last() {
        r.cpu_user_s = Some(u);
        r.cpu_system_s = Some(s);
    }
    Ok(r)
}

/// The line `mpi_collectives` prints on rank 0 (see its header comment).
#[derive(serde::Deserialize)]
struct MpiCollectivesLine {
    collective: String,
    world: u32,
    size: u64,
    iterations: u64,
    time_us: f64,
    wrong: u64,
    checked: u64,
}

/// Reads the output of `mpi_collectives` (mpirun's own lines around it are
/// skipped): its figures, busbw from the catalogue's bus factor of the
/// collective it names, and what it checked.
pub fn parse_mpi_collectives(output: &str) -> Result<CollectiveFigures, String> {
    let line = output
        .lines()
        .map(str::trim)
        .rfind(|l| l.starts_with("{\"collective\""))
        .ok_or_else(|| {
            format!(
                "no result line ({{\"collective\":...}}) in the output of mpi_collectives:\n{}",
                last_lines(output, 12)
            )
        })?;
    let r: MpiCollectivesLine =
        serde_json::from_str(line).map_err(|e| format!("mpi_collectives printed {line:?}: {e}"))?;
    let op = workload_catalogue::find(&r.collective)
        .and_then(|w| w.shape.collective())
        .ok_or_else(|| format!("mpi_collectives printed an unknown collective `{}`", r.collective))?;
    if r.iterations == 0 || r.time_us <= 0.0 {
        return Err(format!("mpi_collectives timed nothing: {line}"));
    }
    Ok(CollectiveFigures {
        checked: r.checked,
        wrong: r.wrong,
        ..CollectiveFigures::of(op, r.world, r.size, r.iterations, r.time_us)
    })
}
