//! Unit tests of the bench: perftest parsing, the suites, commands.

use std::net::Ipv4Addr;

use lab_results::bench::{judge, PerftestResult, Stats};

use super::reference::*;
use super::*;

// Real output captured on the e2e lab (two TCG VMs, rxe0, perftest 6.06),
// with dash's `times` appended as `labctl bench` runs it.
const WRITE_BW: &str = include_str!("fixtures/ib_write_bw.client.txt");
const WRITE_BW_SERVER: &str = include_str!("fixtures/ib_write_bw.server.txt");
const READ_BW: &str = include_str!("fixtures/ib_read_bw.client.txt");
const SEND_BW: &str = include_str!("fixtures/ib_send_bw.client.txt");
const ATOMIC_BW: &str = include_str!("fixtures/ib_atomic_bw.client.txt");
const WRITE_LAT: &str = include_str!("fixtures/ib_write_lat.client.txt");
const READ_LAT: &str = include_str!("fixtures/ib_read_lat.client.txt");
const READ_LAT_SERVER: &str = include_str!("fixtures/ib_read_lat.server.txt");
const SEND_LAT: &str = include_str!("fixtures/ib_send_lat.client.txt");
const ATOMIC_LAT: &str = include_str!("fixtures/ib_atomic_lat.client.txt");
// Real fi_pingpong output (libfabric-bin 1.17, tcp;ofi_rxm on the host's
// loopback, the bench's command line), with dash's `times` appended.
const PINGPONG: &str = include_str!("fixtures/fi_pingpong.client.txt");
const PINGPONG_SERVER: &str = include_str!("fixtures/fi_pingpong.server.txt");
const PINGPONG_64K: &str = include_str!("fixtures/fi_pingpong.64k.client.txt");

#[test]
fn test_parses_fi_pingpong_row_and_times() {
    let r = parse_fi_pingpong(PINGPONG).unwrap();
    assert_eq!((r.bytes, r.iterations), (64, 200));
    assert_eq!(r.lat_avg_us, Some(731.32));
    assert_eq!(r.lat_typical_us, None);
    assert_eq!(r.header.get("MB/sec").map(String::as_str), Some("0.09"));
    assert_eq!(r.header.get("time").map(String::as_str), Some("0.29s"));
    assert_eq!((r.cpu_user_s, r.cpu_system_s), (Some(0.09), Some(0.4)));
    let s = parse_fi_pingpong(PINGPONG_SERVER).unwrap();
    assert_eq!(s.lat_avg_us, Some(737.78));
    assert_eq!(s.cpu_system_s, Some(0.32));
    // Suffixed sizes and counts, no `times`.
    let big = parse_fi_pingpong(PINGPONG_64K).unwrap();
    assert_eq!((big.bytes, big.iterations), (65536, 2000));
    assert_eq!(big.lat_avg_us, Some(273.86));
    assert_eq!(big.cpu_user_s, None);
    assert!(parse_fi_pingpong("fi_getinfo(): -61 (No data available)\n")
        .unwrap_err()
        .contains("no result table"));
    let cut = "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec\n64 x\n";
    assert!(parse_fi_pingpong(cut).unwrap_err().contains("not understood"));
}

#[test]
fn test_fabric_pair_runs_fi_pingpong_on_the_same_provider() {
    let pairs = suite(Suite::Quick);
    let pair = pairs
        .iter()
        .find(|p| p.workload == "fabric-lat")
        .expect("the libfabric pair");
    assert_eq!(
        (pair.tool.as_str(), pair.provider.as_deref(), pair.metric),
        ("fi_pingpong", Some("tcp;ofi_rxm"), Metric::LatAvgUs)
    );
    assert!(!pair.metric.higher_is_better() && pair.metric.unit() == "us");
    let cmd = fi_pingpong_command(
        pair,
        "tcp;ofi_rxm",
        "eth1",
        Some(47600),
        Some(Ipv4Addr::new(10, 77, 0, 1)),
    );
    assert_eq!(
        cmd.as_str(),
        "fi_pingpong -p 'tcp;ofi_rxm' -e rdm -m msg -d eth1 -I 200 -S 64 -P 47600 10.77.0.1"
    );
    assert!(fi_pingpong_command(pair, "tcp;ofi_rxm", "eth1", Some(47600), None)
        .as_str()
        .ends_with(" -B 47600"));
    assert!(pairs
        .iter()
        .filter(|p| p.provider.is_none())
        .all(|p| p.tool.starts_with("ib_")));
}

#[test]
fn test_parses_write_bw_table_header_and_times() {
    let r = parse_perftest(WRITE_BW).unwrap();
    assert_eq!((r.bytes, r.iterations), (65536, 300));
    assert_eq!(r.bw_peak_mib_s, Some(6.96));
    assert_eq!(r.bw_avg_mib_s, Some(6.80));
    assert_eq!(r.msg_rate_mpps, Some(0.000109));
    assert_eq!(r.lat_typical_us, None);
    assert_eq!(r.header.get("TX depth").map(String::as_str), Some("128"));
    assert_eq!(r.header.get("CQ Moderation").map(String::as_str), Some("16"));
    assert_eq!(r.header.get("Device").map(String::as_str), Some("rxe0"));
    assert_eq!(r.cpu_user_s, Some(1.798));
    assert_eq!(r.cpu_system_s, Some(0.776));
    // perftest's MB/sec is MiB/s: the message rate times 64 KiB says so.
    let from_rate = r.msg_rate_mpps.unwrap() * 1e6 * 65536.0 / (1u64 << 20) as f64;
    assert!((from_rate - r.bw_avg_mib_s.unwrap()).abs() < 0.05, "{from_rate}");
    let s = parse_perftest(WRITE_BW_SERVER).unwrap();
    assert_eq!(s.bw_avg_mib_s, Some(6.80));
    assert!(s.cpu_user_s.is_some());
}

#[test]
fn test_a_read_lat_server_without_a_table_still_gives_its_cpu_times() {
    let s = parse_perftest_server(READ_LAT_SERVER).unwrap();
    assert_eq!(
        (s.bytes, s.iterations, s.lat_typical_us, s.bw_avg_mib_s),
        (0, 0, None, None)
    );
    assert_eq!((s.cpu_user_s, s.cpu_system_s), (Some(0.182), Some(0.121)));
    assert_eq!(s.header.get("Outstand reads").map(String::as_str), Some("128"));
    // A server that did print a table must still parse it, and a broken one is an error.
    assert_eq!(parse_perftest_server(WRITE_BW_SERVER).unwrap().bw_avg_mib_s, Some(6.80));
    assert!(parse_perftest_server(" #bytes #iterations BW average[MB/sec]\n").is_err());
    assert!(parse_perftest(READ_LAT_SERVER).is_err());
}

#[test]
fn test_parses_every_bw_tool() {
    let r = parse_perftest(READ_BW).unwrap();
    assert_eq!((r.bw_peak_mib_s, r.bw_avg_mib_s), (Some(8.76), Some(8.18)));
    assert_eq!(r.header.get("Outstand reads").map(String::as_str), Some("128"));
    let r = parse_perftest(SEND_BW).unwrap();
    assert_eq!(r.bw_avg_mib_s, Some(5.63));
    let r = parse_perftest(ATOMIC_BW).unwrap();
    assert_eq!((r.bytes, r.iterations), (8, 500));
    assert_eq!(r.msg_rate_mpps, Some(0.004264));
}

#[test]
fn test_parses_every_lat_tool() {
    let r = parse_perftest(WRITE_LAT).unwrap();
    assert_eq!((r.bytes, r.iterations), (2, 200));
    assert_eq!(r.lat_min_us, Some(461.79));
    assert_eq!(r.lat_max_us, Some(9189.51));
    assert_eq!(r.lat_typical_us, Some(2700.31));
    assert_eq!(r.lat_avg_us, Some(3149.13));
    assert_eq!(r.lat_stdev_us, Some(1913.29));
    assert_eq!(r.lat_p99_us, Some(8621.38));
    assert_eq!(r.lat_p999_us, Some(9189.51));
    assert_eq!(r.bw_avg_mib_s, None);
    assert_eq!(r.header.get("TX depth").map(String::as_str), Some("1"));
    assert_eq!(parse_perftest(READ_LAT).unwrap().lat_typical_us, Some(936.24));
    assert_eq!(parse_perftest(SEND_LAT).unwrap().lat_typical_us, Some(3991.90));
    let a = parse_perftest(ATOMIC_LAT).unwrap();
    assert_eq!((a.bytes, a.lat_typical_us), (8, Some(725.58)));
}

#[test]
fn test_rejects_output_without_a_table_or_in_gbits() {
    let err =
        parse_perftest(" Couldn't connect to 10.77.0.1:18515\nUnable to open file descriptor for socket connection")
            .unwrap_err();
    assert!(
        err.contains("no result table") && err.contains("Couldn't connect"),
        "{err}"
    );
    let gbits = WRITE_BW.replace(
        "BW peak[MB/sec]    BW average[MB/sec]",
        "BW peak[Gb/sec]    BW average[Gb/sec]",
    );
    assert!(parse_perftest(&gbits).unwrap_err().contains("MB/sec"));
    let cut = WRITE_BW.split("65536      300").next().unwrap();
    assert!(parse_perftest(cut).unwrap_err().contains("no result row"));
}

#[test]
fn test_stats_and_ratio_directions() {
    let s = Stats::of([Some(3.0), None, Some(1.0), Some(2.0)]);
    assert_eq!((s.min, s.median, s.max, s.n), (Some(1.0), Some(2.0), Some(3.0), 3));
    assert_eq!(Stats::of([Some(1.0), Some(2.0)]).median, Some(1.5));
    assert_eq!(Stats::of([None]).median, None);
    let pairs = suite(Suite::Quick);
    let bw = &pairs[0];
    let (r, ok) = judge(bw, &Stats::of([Some(10.0)]), &Stats::of([Some(11.5)]));
    assert_eq!((r, ok), (Some(1.15), Some(true)));
    let lat = pairs.iter().find(|p| p.workload == "write-lat").unwrap();
    let (r, ok) = judge(lat, &Stats::of([Some(100.0)]), &Stats::of([Some(120.0)]));
    assert_eq!((r, ok), (Some(1.2), Some(false)));
    // Quick's five (with the fi_pingpong pair), four more pairs, and
    // write-bw and send-bw at 2, 4 and 8 QPs.
    let full = suite(Suite::Full);
    assert_eq!(full.len(), 15);
    let labels: std::collections::BTreeSet<String> = full.iter().map(PairSpec::label).collect();
    assert_eq!(labels.len(), full.len(), "every pair has its own label: {labels:?}");
    // Every perftest pair of the full suite has a target but the scaling points.
    for p in full.iter().filter(|p| p.provider.is_none()) {
        assert_eq!(p.target.is_some(), p.qps == 1, "{}", p.label());
    }
}

#[test]
fn test_perftest_bandwidth_below_one_mib_s_comes_from_its_message_rate() {
    let row = |bw, mpps| PerftestResult {
        bytes: 2,
        bw_avg_mib_s: Some(bw),
        msg_rate_mpps: Some(mpps),
        ..Default::default()
    };
    // A real 2-byte ib_write_bw row on the lab printed "0.00 0.001047".
    let small = perftest_average_mib_s(&row(0.0, 0.001047)).unwrap();
    assert!((small - 0.001047e6 * 2.0 / 1048576.0).abs() < 1e-12, "{small}");
    assert_eq!(perftest_average_mib_s(&row(13.77, 0.000220)), Some(13.77));
}

#[test]
fn test_latency_pairs_run_perftests_default_count_and_a_sweep_a_shorter_one() {
    let full = suite(Suite::Full);
    let lat: Vec<&PairSpec> = full.iter().filter(|p| p.metric == Metric::LatTypicalUs).collect();
    let names: Vec<&str> = lat.iter().map(|p| p.workload.as_str()).collect();
    assert_eq!(names, ["write-lat", "read-lat", "send-lat", "atomic-lat"]);
    assert!(lat.iter().all(|p| p.iterations == 1000), "{lat:?}");
    let cmd = perftest_command(lat[0], "rxe0", 1, Some(1), None, None);
    assert_eq!(cmd.as_str(), "ib_write_lat -d rxe0 -x 1 -n 1000 -F -s 2");
    // A sweep's bandwidth points keep the suite's count.
    let sweep = sweep_pairs(&["write-bw".to_string(), "write-lat".to_string()], &[2, 1 << 20]).unwrap();
    let counts: Vec<u64> = sweep.iter().map(|p| p.iterations).collect();
    assert_eq!(counts, [300, 300, 200, 200]);
}

#[test]
fn test_a_sweep_is_one_pair_per_size_of_sweepable_workloads() {
    let names = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let pairs = sweep_pairs(&names(&DEFAULT_SWEEP_WORKLOADS), &default_sweep_sizes()).unwrap();
    assert_eq!(pairs.len(), 40);
    assert_eq!(pairs[0].label(), "write-bw 2B");
    assert_eq!(pairs[19].label(), "write-bw 1MiB");
    assert!(pairs.iter().all(|p| p.sweep_point && p.target.is_none() && p.qps == 1));
    let cmd = perftest_command(&pairs[25], "rxe0", 1, Some(1), None, None);
    assert_eq!(cmd.as_str(), "ib_write_lat -d rxe0 -x 1 -n 200 -F -s 64");
    for refused in ["atomic-bw", "atomic-lat", "fabric-lat", "write-read"] {
        let err = sweep_pairs(&names(&[refused]), &[2]).unwrap_err().to_string();
        assert!(
            err.contains(&format!("`{refused}` cannot sweep")) && err.contains("write-bw, read-bw, write-lat"),
            "{err}"
        );
    }
}

#[test]
fn test_scaling_points_spread_the_same_bytes_over_their_qps() {
    let full = suite(Suite::Full);
    let q4 = full.iter().find(|p| p.label() == "send-bw q4").unwrap();
    let q1 = full.iter().find(|p| p.label() == "send-bw").unwrap();
    assert_eq!(q4.iterations * 4, q1.iterations);
    let cmd = perftest_command(q4, "rxe0", 1, Some(1), None, Some(Ipv4Addr::new(10, 77, 0, 1)));
    assert_eq!(
        cmd.as_str(),
        "ib_send_bw -d rxe0 -x 1 -n 75 -F -s 65536 -t 128 -Q 16 -q 4 10.77.0.1"
    );
    // Records written before the field was there read one QP.
    let mut old = serde_json::to_value(q1).unwrap();
    old.as_object_mut().unwrap().remove("qps");
    assert_eq!(serde_json::from_value::<PairSpec>(old).unwrap().qps, 1);
}

#[test]
fn test_perftest_commands_match_our_parameters() {
    let pairs = suite(Suite::Quick);
    let cmd = perftest_command(
        &pairs[0],
        "rxe0",
        1,
        Some(1),
        Some(18600),
        Some(Ipv4Addr::new(10, 77, 0, 1)),
    );
    assert_eq!(
        cmd.as_str(),
        "ib_write_bw -d rxe0 -x 1 -p 18600 -n 300 -F -s 65536 -t 128 -Q 16 10.77.0.1"
    );
    let atomic = pairs.iter().find(|p| p.workload == "atomic-bw").unwrap();
    assert!(!perftest_command(atomic, "rxe0", 1, Some(1), Some(1), None)
        .as_str()
        .contains("-s "));
    let recorded = perftest_command(&pairs[0], "rxe0", 1, Some(1), None, Some(Ipv4Addr::new(10, 77, 0, 1)));
    assert!(!recorded.as_str().contains(" -p "), "{recorded}");
    // A NIC whose data address is on its second port: perftest is told (its default is 1).
    let second = perftest_command(&pairs[0], "mlx5_0", 2, Some(3), None, None);
    assert!(
        second.as_str().starts_with("ib_write_bw -d mlx5_0 -i 2 -x 3 "),
        "{second}"
    );
    // The wrapper passes the command as words: run it here (coreutils'
    // timeout and stdbuf, as on the nodes) and see them arrive intact.
    let lat = RemoteCommand::new("echo").args(["ib_write_lat", "-s", "2", "a b"]);
    let line = wrapped(&lat, 120);
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(line.as_str())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("ib_write_lat -s 2 a b\n"), "{text}");
    assert!(text.contains('s'), "times output missing: {text}");
}

#[test]
fn test_perftest_on_infiniband_has_no_gid_index_and_roce_keeps_its_own() {
    let pairs = suite(Suite::Quick);
    let devices = agent_proto::fixtures::ib_and_roce_host();
    let ib = data_path_of("server", &devices, Ipv4Addr::new(10, 20, 0, 11), None).unwrap();
    assert_eq!(
        (ib.device.as_str(), ib.ib_port, ib.gid_index, ib.perftest_gid),
        ("mlx5_0", 1, 0, None)
    );
    assert_eq!(
        ib.netdev, "ib0",
        "fi_pingpong's tcp domain on IB is the IPoIB interface"
    );
    let cmd = perftest_command(
        &pairs[0],
        &ib.device,
        ib.ib_port,
        ib.perftest_gid,
        None,
        Some(Ipv4Addr::new(10, 20, 0, 12)),
    );
    assert_eq!(
        cmd.as_str(),
        "ib_write_bw -d mlx5_0 -n 300 -F -s 65536 -t 128 -Q 16 10.20.0.12"
    );
    let roce = data_path_of("client", &devices, Ipv4Addr::new(192, 168, 6, 6), None).unwrap();
    let cmd = perftest_command(&pairs[0], &roce.device, roce.ib_port, roce.perftest_gid, None, None);
    assert!(cmd.as_str().starts_with("ib_write_bw -d mlx5_4 -x 15 "), "{cmd}");
    // On a partition child: the parent's port, and fi_pingpong's domain is the child.
    let child = data_path_of(
        "server",
        &agent_proto::fixtures::ib_host_with_pkey_children(),
        Ipv4Addr::new(10, 82, 0, 11),
        None,
    )
    .unwrap();
    assert_eq!(
        (
            child.device.as_str(),
            child.ib_port,
            child.perftest_gid,
            child.netdev.as_str()
        ),
        ("mlx5_0", 1, None, "mlx5_ib0.8002")
    );
    // The recorded device of the node is honoured; an address on no port is named.
    let err = data_path_of("server", &devices, Ipv4Addr::new(10, 20, 0, 11), Some("mlx5_4")).unwrap_err();
    assert!(
        err.to_string()
            .contains("node `server`: no RDMA device named mlx5_4 has the RoCE v2 GID ::ffff:10.20.0.11"),
        "{err}"
    );
}

#[test]
fn test_perftest_refusing_to_report_on_a_disturbed_clock_is_told_from_other_failures() {
    // perftest's own words (get_clock.c: "Correlation coefficient r^2: %g <
    // 0.9", then "Can't produce a report"), after its header; the value is
    // illustrative.
    let refused = " Max inline data : 0[B]\n rdma_cm QPs\t : OFF\n\
        Correlation coefficient r^2: 0.612473 < 0.9\nCan't produce a report\n";
    assert_eq!(
        perftest_clock_refusal(refused),
        Some("Correlation coefficient r^2: 0.612473 < 0.9")
    );
    // A report, or another failure, is not that.
    assert_eq!(
        perftest_clock_refusal(" 65536      200      1180.53   1167.91   0.018687\n"),
        None
    );
    assert_eq!(perftest_clock_refusal("Couldn't connect to 10.77.0.1:18515\n"), None);
}

#[test]
fn test_only_perftests_own_transient_failures_run_the_round_again() {
    // A reference failure recorded by a bench on the QEMU lab (ib_send_bw -q 8).
    let completion_error = "perftest client exited 17:\n GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:01\n\
        ---------------------------------------------------------------------------------------\n \
        #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n \
        Completion with error at client\n Failed status 9: wr_id 4 syndrom 0x0\nscnt=64, ccnt=24\n";
    assert!(reference_failure_is_transient(completion_error));
    assert!(reference_failure_is_transient(&format!(
        "{PERFTEST_CLOCK_REFUSED}: `Correlation coefficient r^2: 0.61 < 0.9`"
    )));
    // Not connecting, a timeout or a report that does not parse is not.
    assert!(!reference_failure_is_transient(
        "perftest client exited 1:\nCouldn't connect to 10.77.0.1:18515\n"
    ));
    assert!(!reference_failure_is_transient("perftest client exited 124:\n"));
    assert!(!reference_failure_is_transient(
        "perftest server: ssh: connection closed"
    ));
}

// Real output of provisioning/bench/mpi_collectives.c on the quad lab (four
// TCG nodes, Open MPI 4.1.4 over TCP on eth1), as mpirun printed it.
const MPI_ALLREDUCE_8: &str = include_str!("fixtures/mpi_collectives.allreduce-8.txt");
const MPI_ALLTOALL_1M: &str = include_str!("fixtures/mpi_collectives.alltoall-1m.txt");

#[test]
fn test_parses_mpi_collectives_and_computes_busbw_with_the_catalogue_factor() {
    let a = parse_mpi_collectives(MPI_ALLREDUCE_8).unwrap();
    assert_eq!((a.world, a.size, a.iterations), (4, 8, 20));
    assert_eq!(a.time_us, 23132.607);
    // 2 float32 elements x 4 ranks x 22 operations (warm-ups are checked too).
    assert_eq!((a.checked, a.wrong), (176, 0));
    assert!(a.verified());
    let algbw = 8.0 / 23132.607e-6 / 1e9;
    assert!((a.algbw_gb_s - algbw).abs() < 1e-18);
    assert!((a.busbw_gb_s - algbw * 1.5).abs() < 1e-18, "allreduce on 4: 2(n-1)/n");

    let t = parse_mpi_collectives(MPI_ALLTOALL_1M).unwrap();
    assert_eq!((t.world, t.size, t.iterations, t.checked), (4, 1 << 20, 5, 7_340_032));
    let algbw = 1048576.0 / 452479.940e-6 / 1e9;
    assert!((t.busbw_gb_s - algbw * 0.75).abs() < 1e-15, "alltoall on 4: (n-1)/n");

    // mpirun's own lines around the result are skipped.
    let noisy = format!("Warning: Permanently added '10.77.0.2'\n{MPI_ALLREDUCE_8}\n");
    assert_eq!(parse_mpi_collectives(&noisy).unwrap(), a);
    // A wrong element is read, not hidden.
    let wrong = MPI_ALLREDUCE_8.replace("\"wrong\":0", "\"wrong\":3");
    let w = parse_mpi_collectives(&wrong).unwrap();
    assert_eq!(w.wrong, 3);
    assert!(!w.verified());
    // No result line, an unknown collective, nothing timed.
    let e = parse_mpi_collectives("mpirun: command not found\n").unwrap_err();
    assert!(e.contains("no result line") && e.contains("command not found"), "{e}");
    let e = parse_mpi_collectives(&MPI_ALLREDUCE_8.replace("allreduce", "incastish")).unwrap_err();
    assert!(e.contains("unknown collective `incastish`"), "{e}");
    assert!(parse_mpi_collectives(&MPI_ALLREDUCE_8.replace("23132.607", "0.000")).is_err());
}

/// A side's round of a collective from `time_us` per operation.
fn collective_round(round: u32, op: workload_catalogue::Collective, size: u64, time_us: f64) -> Sample {
    let figures = lab_results::bench::CollectiveFigures {
        checked: 10,
        ..lab_results::bench::CollectiveFigures::of(op, 4, size, 5, time_us)
    };
    Sample {
        round,
        value: Some(figures.busbw_gb_s),
        verified: Some(true),
        collective: Some(figures),
        ..Default::default()
    }
}

#[test]
fn test_collective_pair_ratios_come_from_both_sides_medians() {
    use workload_catalogue::Collective::Allreduce;
    let spec = collectives::collective_pairs(&["allreduce".into()], &[1 << 20], 4).unwrap()[0].clone();
    // Open MPI: 400, 500, 600 ms per op; ours 250, 260, 1000 (one slow round).
    let theirs: Vec<Sample> = [400e3, 500e3, 600e3]
        .iter()
        .enumerate()
        .map(|(i, &t)| collective_round(i as u32, Allreduce, 1 << 20, t))
        .collect();
    let ours: Vec<Sample> = [250e3, 1000e3, 260e3]
        .iter()
        .enumerate()
        .map(|(i, &t)| collective_round(i as u32, Allreduce, 1 << 20, t))
        .collect();
    let pair = PairRecord::new(
        spec,
        SideStats::of("MPI_Allreduce", String::new(), theirs),
        SideStats::of("allreduce", String::new(), ours),
    );
    assert_eq!(pair.unit, "GB/s");
    assert_eq!(pair.better, "higher");
    assert_eq!(
        (pair.ours.time_us.median, pair.reference.time_us.median),
        (Some(260e3), Some(500e3))
    );
    // busbw medians: the median time's busbw on each side, so the ratio is 500/260.
    assert!((pair.ratio.unwrap() - 500.0 / 260.0).abs() < 1e-12);
    assert!((pair.time_ratio.unwrap() - 260.0 / 500.0).abs() < 1e-12);
    assert_eq!(pair.meets_target, Some(true));
    // A round of Open MPI that did not verify is left out, and is theirs.
    let mut bad = collective_round(0, Allreduce, 1 << 20, 1.0);
    bad.verified = Some(false);
    bad.error = Some("Open MPI's result did not verify: 1 of 10 elements wrong".into());
    let pair = PairRecord::new(
        pair.spec.clone(),
        SideStats::of("MPI_Allreduce", String::new(), vec![bad]),
        pair.ours.clone(),
    );
    assert_eq!((pair.reference.stats.n, pair.reference.left_out.unverified), (0, 1));
    assert_eq!((pair.ratio, pair.time_ratio), (None, None));
    let f = Failures::of(&[pair]);
    assert_eq!((f.reference_failed, f.ours()), (1, 0));
}

#[test]
fn pair_rounds_stamp_each_run_with_its_place_and_when_it_started() {
    let spec = suite(Suite::Quick)
        .into_iter()
        .next()
        .expect("the quick suite has pairs");
    let started = Instant::now() - std::time::Duration::from_secs(30);
    let mut rounds = PairRounds::new(started);
    let mut events = 0;
    let mut on_event = |_: BenchEvent<'_>| events += 1;
    let mut stamped = Vec::new();
    for (position, slot) in (0u32..).zip(schedule(1, 2)) {
        let before = started.elapsed().as_secs_f64();
        let tool = rounds.announce("pair", &spec, slot, &mut on_event);
        let after = started.elapsed().as_secs_f64();
        rounds.file(slot, position, tool, Sample::default(), &mut on_event);
        stamped.push((before, after));
    }
    assert_eq!(events, 2 * 6, "a start and a done event per run");
    let samples: Vec<&Sample> = rounds.reference.iter().chain(&rounds.ours).collect();
    assert_eq!(samples.len(), 6);
    for s in samples {
        let position = s.position.expect("every run has its position") as usize;
        let at = s.at_s.expect("every run has its start time");
        let (before, after) = stamped[position];
        // The bench started 30 s ago: a run's time counts from then, not
        // from the pair's first run.
        assert!(
            at >= 30.0 && before <= at && at <= after,
            "{at} not in {before}..={after}"
        );
    }
}
