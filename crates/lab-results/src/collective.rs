//! The record of a collective run (`labctl run allreduce` ...): every
//! rank's figures and verdict, and the operation's figures as nccl-tests'
//! PERFORMANCE.md defines them: the time of an operation is its slowest
//! rank's, algbw = size / time, busbw = algbw x the collective's factor
//! (allreduce 2(n-1)/n; allgather, reduce-scatter, alltoall (n-1)/n;
//! reduce, broadcast 1). Bandwidths are in GB/s (10^9 bytes), as nccl-tests prints.

use agent_proto::v1::{CollectivePoint, SideResult};
use serde::{Deserialize, Serialize};
use workload_catalogue::Collective;

use crate::run::{CpuRecord, NodeRecord};

/// Version of [`CollectiveRecord`]'s layout.
pub const COLLECTIVE_SCHEMA: u32 = 1;

/// One collective run, as saved and as `--json` prints it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CollectiveRecord {
    /// [`COLLECTIVE_SCHEMA`].
    pub schema: u32,
    /// The run's id.
    pub id: String,
    /// The lab's name.
    pub lab: String,
    /// The collective ("allreduce").
    pub collective: String,
    /// How the agents ran it.
    pub algorithm: String,
    /// What moved the data: "verbs RC", or "libfabric <provider>".
    #[serde(default)]
    pub transport: String,
    /// Ranks.
    pub world: u32,
    /// The collectives with a root (`--root`): the root rank.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub root: Option<u32>,
    /// What the run was asked for.
    pub params: CollectiveParamsRecord,
    /// Every rank checked every element of its result and all matched.
    pub verified: bool,
    /// All ranks' verdicts in one line, or the first failing rank's.
    pub verify_detail: String,
    /// One entry per size.
    pub points: Vec<PointRecord>,
    /// Every rank: its node, verdict and facts.
    pub ranks: Vec<RankRecord>,
    /// Every node taking part, once.
    pub nodes: Vec<NodeRecord>,
    /// Start time, RFC 3339.
    pub started_at: String,
    /// Wall time of the whole run, seconds.
    pub duration_s: f64,
    /// Where the record was saved.
    pub saved_to: Option<String>,
}

/// What a collective run was asked for.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CollectiveParamsRecord {
    /// Size in bytes (the sweep's largest with `all_sizes`).
    pub size: u64,
    /// Sizes 8 B .. max_size in powers of two.
    pub all_sizes: bool,
    /// Timed operations per size (0: timed by duration).
    pub iterations: u64,
    /// Seconds per size when timed by duration.
    pub duration_s: f64,
    /// Untimed operations before the timed ones, per size.
    pub warmup: u32,
    /// Seed of the ranks' inputs.
    pub seed: u64,
    /// The fault injected, if any.
    pub fault: Option<String>,
    /// How completions were waited for ("event", "poll").
    pub completion: String,
}

/// The operation's figures at one size.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PointRecord {
    /// Bytes, as nccl-tests counts the operation's size.
    pub size: u64,
    /// float32 elements.
    pub count: u64,
    /// Timed operations.
    pub iterations: u64,
    /// Time of one operation: the slowest rank's mean, microseconds.
    pub time_us: f64,
    /// size / time, GB/s.
    pub algbw_gb_s: f64,
    /// algbw x the collective's factor, GB/s.
    pub busbw_gb_s: f64,
    /// Each rank's mean time, in rank order, microseconds.
    pub rank_time_us: Vec<f64>,
    /// The rank whose time is the operation's.
    pub slowest_rank: u32,
    /// Wrong elements over all ranks and operations (nccl-tests' #wrong).
    pub wrong: u64,
    /// Elements checked over all ranks and operations.
    pub checked: u64,
    /// incast: each sender's throughput and their fairness.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub incast: Option<IncastRecord>,
}

/// An incast's senders as the root saw them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct IncastRecord {
    /// Each sender's throughput into the root, MiB/s: its size over its own
    /// time (barrier to its write delivered); the root's own entry is 0.
    pub sender_mib_s: Vec<f64>,
    /// All senders' bytes over the operation's time, MiB/s.
    pub aggregate_mib_s: f64,
    /// Jain's fairness index over the senders: 1 when all got the same
    /// share, 1/(n-1) when one got everything.
    pub jain_fairness: f64,
}

/// One rank of the run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RankRecord {
    /// The rank.
    pub rank: u32,
    /// Its node.
    pub node: String,
    /// Its verdict.
    pub verified: bool,
    /// What it checked, or its first wrong element.
    pub verify_detail: String,
    /// Bytes its writes carried.
    pub bytes: u64,
    /// Operations it took part in (warmup included).
    pub ops: u64,
    /// Its CPU time.
    pub cpu: CpuRecord,
    /// Device, GID, QPNs, completion mode ...
    pub facts: std::collections::BTreeMap<String, String>,
}

/// Jain's fairness index of `xs`: (sum x)^2 / (n sum x^2); 0 for none.
pub fn jain_fairness(xs: &[f64]) -> f64 {
    let sum: f64 = xs.iter().sum();
    let squares: f64 = xs.iter().map(|x| x * x).sum();
    if xs.is_empty() || squares == 0.0 {
        return 0.0;
    }
    sum * sum / (xs.len() as f64 * squares)
}

/// nccl-tests' algbw: `size` bytes over one operation's time, GB/s (0
/// for no time).
pub fn algbw_gb_s(size: u64, time_us: f64) -> f64 {
    if time_us > 0.0 {
        size as f64 / (time_us * 1e-6) / 1e9
    } else {
        0.0
    }
}

/// The operation's figures at the `index`-th size, from every rank's
/// (in rank order).
pub fn point(op: Collective, root: u32, ranks: &[&SideResult], index: usize) -> PointRecord {
    let world = ranks.len() as u32;
    let at = |r: &SideResult| r.collective.get(index).cloned().unwrap_or_default();
    let points: Vec<CollectivePoint> = ranks.iter().map(|r| at(r)).collect();
    let first = points.first().cloned().unwrap_or_default();
    let (slowest_rank, time_us) = points
        .iter()
        .enumerate()
        .map(|(i, p)| (i as u32, p.time_us))
        .fold((0, 0.0), |best, (i, t)| if t > best.1 { (i, t) } else { best });
    let algbw_gb_s = algbw_gb_s(first.size, time_us);
    let incast = (op == Collective::Incast).then(|| {
        // Each sender's own time ends when its write is delivered: its size
        // over that time is its throughput, whatever order they started in.
        let sender_mib_s: Vec<f64> = points
            .iter()
            .enumerate()
            .map(|(q, p)| {
                if q as u32 == root || p.time_us <= 0.0 {
                    0.0
                } else {
                    p.size as f64 / (p.time_us * 1e-6) / f64::from(1u32 << 20)
                }
            })
            .collect();
        let senders: Vec<f64> = sender_mib_s
            .iter()
            .enumerate()
            .filter(|(q, _)| *q as u32 != root)
            .map(|(_, v)| *v)
            .collect();
        IncastRecord {
            aggregate_mib_s: if time_us > 0.0 {
                first.size as f64 * f64::from(world.saturating_sub(1)) / (time_us * 1e-6) / f64::from(1u32 << 20)
            } else {
                0.0
            },
            jain_fairness: jain_fairness(&senders),
            sender_mib_s,
        }
    });
    PointRecord {
        size: first.size,
        count: first.size / 4,
        iterations: first.iterations,
        time_us,
        algbw_gb_s,
        busbw_gb_s: algbw_gb_s * op.bus_factor(world),
        rank_time_us: points.iter().map(|p| p.time_us).collect(),
        slowest_rank,
        wrong: points.iter().map(|p| p.wrong).sum(),
        checked: points.iter().map(|p| p.checked).sum(),
        incast,
    }
}

/// The run's verdict: every rank checked and passed; the detail is the
/// first failing rank's, or a summary.
pub fn verdict(ranks: &[&SideResult]) -> (bool, String) {
    if let Some(bad) = ranks.iter().find(|r| !r.checked || !r.verified) {
        return (false, bad.verify_detail.clone());
    }
    let checked: u64 = ranks.iter().flat_map(|r| r.collective.iter()).map(|p| p.checked).sum();
    (
        true,
        format!(
            "all {} ranks verified: {checked} elements checked, none wrong",
            ranks.len()
        ),
    )
}

/// Columns of [`points_csv`]: nccl-tests' first, then what ties a row to
/// its record.
pub const POINT_COLUMNS: &[&str] = &[
    "collective",
    "world",
    "size",
    "count",
    "iterations",
    "time_us",
    "algbw_gb_s",
    "busbw_gb_s",
    "wrong",
    "slowest_rank",
    "checked",
    "incast_aggregate_mib_s",
    "incast_jain_fairness",
    "id",
    "started_at",
    "lab",
    "verified",
];

/// Writes one row per size of each record. Numbers are the record's values
/// unrounded; the incast columns are empty for the other collectives.
pub fn points_csv(records: &[&CollectiveRecord], out: impl std::io::Write) -> Result<(), csv::Error> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record(POINT_COLUMNS)?;
    for r in records {
        for p in &r.points {
            let incast = |f: fn(&IncastRecord) -> f64| p.incast.as_ref().map(|i| f(i).to_string()).unwrap_or_default();
            w.write_record([
                r.collective.clone(),
                r.world.to_string(),
                p.size.to_string(),
                p.count.to_string(),
                p.iterations.to_string(),
                p.time_us.to_string(),
                p.algbw_gb_s.to_string(),
                p.busbw_gb_s.to_string(),
                p.wrong.to_string(),
                p.slowest_rank.to_string(),
                p.checked.to_string(),
                incast(|i| i.aggregate_mib_s),
                incast(|i| i.jain_fairness),
                r.id.clone(),
                r.started_at.clone(),
                r.lab.clone(),
                r.verified.to_string(),
            ])?;
        }
    }
    w.flush()?;
    Ok(())
}

/// Columns of [`ranks_csv`].
pub const RANK_COLUMNS: &[&str] = &[
    "id",
    "collective",
    "world",
    "size",
    "rank",
    "node",
    "time_us",
    "slowest",
    "incast_sender_mib_s",
];

/// Writes one row per size and rank of each record: each rank's own mean
/// time (the operation's is the slowest's) and, for incast, each sender's
/// throughput (empty for the root).
pub fn ranks_csv(records: &[&CollectiveRecord], out: impl std::io::Write) -> Result<(), csv::Error> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record(RANK_COLUMNS)?;
    for r in records {
        for p in &r.points {
            for (rank, time_us) in p.rank_time_us.iter().enumerate() {
                let node = r.ranks.get(rank).map(|k| k.node.clone()).unwrap_or_default();
                let sender = p
                    .incast
                    .as_ref()
                    .filter(|_| r.root != Some(rank as u32))
                    .and_then(|i| i.sender_mib_s.get(rank))
                    .map(f64::to_string)
                    .unwrap_or_default();
                w.write_record([
                    r.id.clone(),
                    r.collective.clone(),
                    r.world.to_string(),
                    p.size.to_string(),
                    rank.to_string(),
                    node,
                    time_us.to_string(),
                    (rank as u32 == p.slowest_rank).to_string(),
                    sender,
                ])?;
            }
        }
    }
    w.flush()?;
    Ok(())
}

/// [`points_csv`] of one record, as `labctl run COLLECTIVE --csv` prints it.
pub fn to_csv(record: &CollectiveRecord) -> Result<String, csv::Error> {
    let mut bytes = Vec::new();
    points_csv(&[record], &mut bytes)?;
    Ok(String::from_utf8(bytes).expect("CSV of UTF-8 fields"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(time_us: f64, size: u64) -> SideResult {
        SideResult {
            checked: true,
            verified: true,
            collective: vec![CollectivePoint {
                size,
                iterations: 10,
                time_us,
                checked: 100,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn test_the_slowest_rank_sets_the_time_and_busbw_follows_nccl_tests() {
        let ranks = [
            rank(100.0, 1_000_000),
            rank(250.0, 1_000_000),
            rank(200.0, 1_000_000),
            rank(50.0, 1_000_000),
        ];
        let refs: Vec<&SideResult> = ranks.iter().collect();
        let p = point(Collective::Allreduce, 0, &refs, 0);
        assert_eq!((p.slowest_rank, p.time_us), (1, 250.0));
        // 1 MB in 250 us: 4 GB/s; allreduce on 4 ranks moves 2 * 3/4 of it per rank.
        assert!((p.algbw_gb_s - 4.0).abs() < 1e-9);
        assert!((p.busbw_gb_s - 6.0).abs() < 1e-9);
        assert_eq!(p.rank_time_us, [100.0, 250.0, 200.0, 50.0]);
        assert_eq!((p.checked, p.wrong), (400, 0));
        let p = point(Collective::Alltoall, 0, &refs, 0);
        assert!((p.busbw_gb_s - 3.0).abs() < 1e-9);
        let p = point(Collective::Broadcast, 0, &refs, 0);
        assert!((p.busbw_gb_s - 4.0).abs() < 1e-9);
    }

    #[test]
    fn test_one_failing_rank_fails_the_run_with_its_detail() {
        let mut ranks = [rank(1.0, 8), rank(1.0, 8)];
        assert!(verdict(&ranks.iter().collect::<Vec<_>>()).0);
        ranks[1].verified = false;
        ranks[1].verify_detail = "rank 1: element 3".into();
        assert_eq!(
            verdict(&ranks.iter().collect::<Vec<_>>()),
            (false, "rank 1: element 3".to_string())
        );
        // A rank that checked nothing cannot vouch for its result.
        ranks[1] = rank(1.0, 8);
        ranks[1].checked = false;
        assert!(!verdict(&ranks.iter().collect::<Vec<_>>()).0);
    }

    #[test]
    fn test_jain_index_is_one_for_equal_shares_and_falls_with_unfairness() {
        assert!((jain_fairness(&[5.0, 5.0, 5.0]) - 1.0).abs() < 1e-12);
        assert!((jain_fairness(&[9.0, 0.0, 0.0]) - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(jain_fairness(&[]), 0.0);
    }

    /// The real records' CSV, read back with a CSV reader.
    fn read_csv(bytes: &[u8]) -> (Vec<String>, Vec<csv::StringRecord>) {
        let mut reader = csv::Reader::from_reader(bytes);
        let header = reader.headers().unwrap().iter().map(String::from).collect();
        (header, reader.records().map(Result::unwrap).collect())
    }

    #[test]
    fn test_points_csv_has_one_row_per_size_with_the_records_values_unrounded() {
        use crate::fixtures::{collective, ALLREDUCE_SWEEP, INCAST};
        let (sweep, incast) = (collective(ALLREDUCE_SWEEP), collective(INCAST));
        let mut out = Vec::new();
        points_csv(&[&sweep, &incast], &mut out).unwrap();
        let (header, rows) = read_csv(&out);
        assert_eq!(header, POINT_COLUMNS);
        let col = |name: &str| POINT_COLUMNS.iter().position(|c| *c == name).unwrap();
        // 14 sizes of the sweep (8 B .. 64 KiB), then the incast's one.
        assert_eq!(rows.len(), 15);
        let sizes: Vec<&str> = rows[..14].iter().map(|r| &r[col("size")]).collect();
        assert_eq!(
            sizes,
            ["8", "16", "32", "64", "128", "256", "512", "1024", "2048", "4096", "8192", "16384", "32768", "65536"]
        );
        for (row, p) in rows.iter().zip(&sweep.points) {
            let number = |name: &str| row[col(name)].parse::<f64>().unwrap();
            assert_eq!(&row[col("collective")], "allreduce");
            assert_eq!(&row[col("world")], "4");
            assert_eq!(number("time_us"), p.time_us);
            // 0.0000006168... GB/s at 8 B on an emulated lab: not rounded to 0.
            assert_eq!(number("algbw_gb_s"), p.algbw_gb_s);
            assert_eq!(number("busbw_gb_s"), p.busbw_gb_s);
            assert_eq!(row[col("wrong")].parse::<u64>().unwrap(), p.wrong);
            assert_eq!(row[col("checked")].parse::<u64>().unwrap(), p.checked);
            assert_eq!(&row[col("incast_jain_fairness")], "", "not an incast");
            assert_eq!(
                (&row[col("id")], &row[col("lab")], &row[col("verified")]),
                (ALLREDUCE_SWEEP, "quad", "true")
            );
        }
        assert!((rows[0][col("busbw_gb_s")].parse::<f64>().unwrap() - 6.168e-7).abs() < 1e-10);
        let last = &rows[14];
        let fairness = incast.points[0].incast.as_ref().unwrap();
        assert_eq!((&last[col("collective")], &last[col("size")]), ("incast", "262144"));
        assert_eq!(
            last[col("incast_jain_fairness")].parse::<f64>().unwrap(),
            fairness.jain_fairness
        );
        assert_eq!(
            last[col("incast_aggregate_mib_s")].parse::<f64>().unwrap(),
            fairness.aggregate_mib_s
        );
        // `run --csv` is the same writer: nccl-tests' columns first.
        assert!(to_csv(&sweep)
            .unwrap()
            .starts_with("collective,world,size,count,iterations,time_us,algbw_gb_s,busbw_gb_s,wrong,slowest_rank,"));
    }

    #[test]
    fn test_ranks_csv_has_each_ranks_time_and_each_senders_throughput() {
        use crate::fixtures::{collective, ALLREDUCE_SWEEP, INCAST};
        let (sweep, incast) = (collective(ALLREDUCE_SWEEP), collective(INCAST));
        let mut out = Vec::new();
        ranks_csv(&[&incast, &sweep], &mut out).unwrap();
        let (header, rows) = read_csv(&out);
        assert_eq!(header, RANK_COLUMNS);
        // incast: 4 ranks at one size; allreduce: 4 ranks at 14 sizes.
        assert_eq!(rows.len(), 4 + 4 * 14);
        let point = &incast.points[0];
        let senders = &point.incast.as_ref().unwrap().sender_mib_s;
        for (rank, row) in rows[..4].iter().enumerate() {
            assert_eq!(&row[4], rank.to_string());
            assert_eq!(&row[5], format!("n{}", rank + 1));
            assert_eq!(row[6].parse::<f64>().unwrap(), point.rank_time_us[rank]);
            assert_eq!(
                &row[7],
                if rank as u32 == point.slowest_rank {
                    "true"
                } else {
                    "false"
                }
            );
            if incast.root == Some(rank as u32) {
                assert_eq!(&row[8], "", "the root sends nothing");
            } else {
                assert_eq!(row[8].parse::<f64>().unwrap(), senders[rank]);
            }
        }
        // One slowest rank per size, and no sender column outside incast.
        for size in rows[4..].chunks(4) {
            assert_eq!(size.iter().filter(|r| &r[7] == "true").count(), 1);
            assert!(size.iter().all(|r| &r[1] == "allreduce" && r[8].is_empty()));
        }
    }
}
