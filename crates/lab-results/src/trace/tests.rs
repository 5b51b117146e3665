use super::*;

fn sample(sent_ns: u64, agent_ns: u64, received_ns: u64) -> ClockSample {
    ClockSample {
        sent_ns,
        agent_ns,
        received_ns,
    }
}

#[test]
fn offset_comes_from_the_fastest_round_trip() {
    // Samples as recorded against a real agent (ns): the agent's clock is
    // ~5 s ahead; the second sample's round trip is the shortest.
    let samples = [
        sample(1_000_000, 5_001_900_000, 4_000_000),
        sample(10_000_000, 5_010_600_000, 11_000_000),
        sample(20_000_000, 5_021_000_000, 22_500_000),
    ];
    let e = estimate_offset(&samples).unwrap();
    assert_eq!(e.rtt_ns, 1_000_000);
    assert_eq!(e.error_ns, 500_000);
    assert_eq!(e.offset_ns, 5_010_600_000 - 10_500_000);
    assert_eq!(e.samples, 3);
    // An agent behind the controller: a negative offset.
    let behind = estimate_offset(&[sample(9_000, 1_000, 9_100)]).unwrap();
    assert_eq!(behind.offset_ns, 1_000 - 9_050);
    assert!(estimate_offset(&[]).is_none());
    assert!(estimate_offset(&[sample(10, 5, 9)]).is_none());
}

fn event(t_ns: u64, qp: u32, kind: &str, name: &str, args: &[(&str, &str)]) -> TraceEvent {
    TraceEvent {
        t_ns,
        qp,
        kind: kind.into(),
        name: name.into(),
        args: args.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    }
}

fn side(role: &str, offset_ns: i64, events: Vec<TraceEvent>) -> SideTrace {
    SideTrace {
        role: role.into(),
        node: format!("{role}-node"),
        rank: None,
        trace: Trace {
            events,
            dropped: 0,
            capacity: 16,
            sample_every: 1,
            record_cost_ns: 40.0,
        },
        clock: ClockEstimate {
            offset_ns,
            error_ns: 1_000,
            rtt_ns: 2_000,
            samples: 8,
            agent_ns: 0,
        },
        failed: None,
        clock_after: None,
    }
}

#[test]
fn writes_aligned_tracks_spans_and_flows() {
    let server = side(
        "server",
        1_000_000,
        vec![
            event(1_010_000, 0, "qp", "RTR", &[("qpn", "17")]),
            event(1_020_000, 0, "blob_sent", "capability", &[("rkey", "0x99")]),
            event(
                1_600_000,
                0,
                "completion",
                "RECV_RDMA_WITH_IMM",
                &[("wr_id", "0x1"), ("imm", "0x7")],
            ),
        ],
    );
    let client = side(
        "client",
        -500_000,
        vec![
            event(20_000, 0, "blob_received", "capability", &[("rkey", "0x99")]),
            event(
                50_000,
                0,
                "post",
                "WRITE_WITH_IMM",
                &[("wr_id", "0x5"), ("signaled", "true"), ("imm", "0x7")],
            ),
            event(80_000, 0, "completion", "WRITE", &[("wr_id", "0x5")]),
        ],
    );
    let ctx = TraceContext {
        lab: "lab".into(),
        workload: "write-imm".into(),
        run_id: "r1".into(),
        error: None,
    };
    let doc = chrome_trace(&ctx, &[server, client]);
    let events = doc["traceEvents"].as_array().unwrap();
    let find = |name: &str, pid: u64| {
        events
            .iter()
            .find(|e| e["name"] == name && e["pid"] == pid && e["ph"] == "X")
            .unwrap_or_else(|| panic!("no {name} in {events:#?}"))
    };
    // Aligned: server t - 1 ms, client t + 0.5 ms; the first event
    // (the server's RTR at 10 us controller time) is at 0.
    assert_eq!(find("QP -> RTR", 1)["ts"], 0.0);
    assert_eq!(find("blob sent", 1)["ts"], 10.0);
    assert_eq!(find("blob received", 2)["ts"], 510.0);
    let post = find("post WRITE_WITH_IMM", 2);
    assert_eq!(post["ts"], 540.0);
    assert_eq!(post["dur"], 30.0);
    assert_eq!(post["tid"], 1);
    assert_eq!(post["args"]["imm"], "0x7");
    assert_eq!(find("completion RECV_RDMA_WITH_IMM", 1)["ts"], 590.0);
    let names: Vec<&Value> = events
        .iter()
        .filter(|e| e["name"] == "thread_name" && e["pid"] == 1)
        .map(|e| &e["args"]["name"])
        .collect();
    assert!(names.iter().any(|n| *n == "QP 0 (qpn 17)"), "{names:?}");
    let flows: Vec<&Value> = events.iter().filter(|e| e["ph"] == "s" || e["ph"] == "f").collect();
    assert_eq!(flows.len(), 4, "blob and the immediate: {flows:#?}");
    let imm_end = flows
        .iter()
        .find(|e| e["ph"] == "f" && e["name"] == "WRITE_WITH_IMM")
        .unwrap();
    assert_eq!(imm_end["pid"], 1);
    assert_eq!(imm_end["ts"], 590.0);
    assert_eq!(doc["otherData"]["nodes"][1]["clock_offset_ns"], -500_000);
    assert_eq!(doc["otherData"]["flows"], 2);
    // The whole document is plain JSON a viewer can read back.
    let text = serde_json::to_string(&doc).unwrap();
    assert!(serde_json::from_str::<Value>(&text).is_ok());
}

fn rank_side(rank: usize, events: Vec<TraceEvent>) -> SideTrace {
    let mut s = side(&format!("rank {rank}"), 0, events);
    s.node = format!("n{}", rank + 1);
    s.rank = Some(rank);
    s
}

/// (from pid, from tid, to pid, to tid) of every flow named `name`.
fn flows_named(doc: &Value, name: &str) -> Vec<(u64, u64, u64, u64)> {
    let events = doc["traceEvents"].as_array().unwrap();
    let starts: Vec<&Value> = events.iter().filter(|e| e["ph"] == "s" && e["name"] == name).collect();
    let mut out: Vec<(u64, u64, u64, u64)> = starts
        .iter()
        .map(|s| {
            let f = events
                .iter()
                .find(|e| e["ph"] == "f" && e["id"] == s["id"])
                .expect("every flow ends");
            let n = |v: &Value| v.as_u64().unwrap();
            (n(&s["pid"]), n(&s["tid"]), n(&f["pid"]), n(&f["tid"]))
        })
        .collect();
    out.sort();
    out
}

#[test]
fn qp_of_a_rank_faces_the_other_ranks_in_rank_order() {
    // Rank 2 of 4: QPs 0, 1, 2 face ranks 0, 1, 3.
    assert_eq!((0..3).map(|k| rank_facing(2, k)).collect::<Vec<_>>(), [0, 1, 3]);
    for (me, other) in [(2, 0), (2, 1), (2, 3), (0, 1), (3, 2)] {
        assert_eq!(rank_facing(me, qp_facing(me, other)), other);
    }
}

#[test]
fn a_collectives_writes_flow_from_the_qp_facing_the_peer_to_the_peers_qp_facing_back() {
    // Three ranks: each writes to its right neighbour (a ring step);
    // rank 0 also writes to rank 2. Every receive completes on the QP
    // facing its writer, in the order the writer posted.
    let write = |t: u64, qp: u32, imm: &str| {
        event(
            t,
            qp,
            "post",
            "WRITE_WITH_IMM",
            &[("wr_id", "0x1"), ("signaled", "false"), ("imm", imm)],
        )
    };
    let recv = |t: u64, qp: u32, imm: &str| {
        event(
            t,
            qp,
            "completion",
            "RECV_RDMA_WITH_IMM",
            &[("wr_id", "0x0"), ("imm", imm)],
        )
    };
    let qp = |qpn: &str, at: u32| event(1_000, at, "qp", "RTS", &[("qpn", qpn)]);
    let ranks = [
        // Rank 0: QP 0 faces rank 1, QP 1 faces rank 2.
        rank_side(
            0,
            vec![
                qp("10", 0),
                qp("11", 1),
                write(10_000, 0, "0xa"),
                write(11_000, 1, "0xb"),
                recv(30_000, 1, "0xc"),
            ],
        ),
        // Rank 1: QP 0 faces rank 0, QP 1 faces rank 2.
        rank_side(1, vec![recv(12_000, 0, "0xa"), write(20_000, 1, "0xd")]),
        // Rank 2: QP 0 faces rank 0, QP 1 faces rank 1.
        rank_side(
            2,
            vec![recv(13_000, 0, "0xb"), recv(22_000, 1, "0xd"), write(25_000, 0, "0xc")],
        ),
    ];
    let ctx = TraceContext {
        lab: "quad".into(),
        workload: "allreduce".into(),
        run_id: "r3".into(),
        error: None,
    };
    let doc = chrome_trace(&ctx, &ranks);
    // pid = rank + 1, tid = QP + 1.
    assert_eq!(
        flows_named(&doc, "WRITE_WITH_IMM"),
        [(1, 1, 2, 1), (1, 2, 3, 1), (2, 2, 3, 2), (3, 1, 1, 2)]
    );
    let events = doc["traceEvents"].as_array().unwrap();
    let threads: Vec<&Value> = events
        .iter()
        .filter(|e| e["name"] == "thread_name" && e["pid"] == 1)
        .map(|e| &e["args"]["name"])
        .collect();
    assert!(threads.iter().any(|n| *n == "QP 1 (qpn 11) to rank 2"), "{threads:?}");
    let process = events
        .iter()
        .find(|e| e["name"] == "process_name" && e["pid"] == 3)
        .unwrap();
    assert_eq!(process["args"]["name"], "rank 2 n3");
    assert_eq!(doc["otherData"]["nodes"][2]["rank"], 2);
}

#[test]
fn a_libfabric_collectives_writes_flow_to_the_destination_with_the_same_cq_data() {
    // Over libfabric a rank has one endpoint (qp 0); its k-th inserted
    // address is its k-th other rank. Rank 0 writes the same step to
    // both others (as an alltoall does): each flow ends at the entry of
    // the rank it was addressed to.
    let av = |t: u64, fi_addr: &str| event(t, 0, "av", "fi_av_insert", &[("fi_addr", fi_addr)]);
    let write = |t: u64, dest: &str, data: &str| {
        event(
            t,
            0,
            "post",
            "fi_writemsg",
            &[
                ("wr_id", "0x1"),
                ("signaled", "true"),
                ("dest", dest),
                ("cq_data", data),
            ],
        )
    };
    let entry = |t: u64, data: &str| event(t, 0, "completion", "FI_REMOTE_WRITE", &[("cq_data", data)]);
    let ranks = [
        rank_side(
            0,
            vec![
                av(1_000, "7"),
                av(1_100, "8"),
                write(10_000, "8", "0x100"),
                write(10_500, "7", "0x100"),
            ],
        ),
        rank_side(1, vec![av(1_000, "0"), av(1_100, "1"), entry(12_000, "0x100")]),
        rank_side(2, vec![av(1_000, "0"), av(1_100, "1"), entry(11_000, "0x100")]),
    ];
    let ctx = TraceContext {
        lab: "quad".into(),
        workload: "alltoall".into(),
        run_id: "r4".into(),
        error: None,
    };
    let doc = chrome_trace(&ctx, &ranks);
    let events = doc["traceEvents"].as_array().unwrap();
    let ts_of = |pid: u64, ph: &str| -> Vec<f64> {
        events
            .iter()
            .filter(|e| e["ph"] == ph && e["pid"] == pid && e["name"] == "fi_writemsg")
            .map(|e| e["ts"].as_f64().unwrap())
            .collect()
    };
    // Rank 0's write to fi_addr 8 (rank 2) ends at rank 2's entry (10 us
    // after the first event), the one to fi_addr 7 at rank 1's (11 us).
    assert_eq!(flows_named(&doc, "fi_writemsg"), [(1, 1, 2, 1), (1, 1, 3, 1)]);
    assert_eq!(ts_of(3, "f"), [10.0]);
    assert_eq!(ts_of(2, "f"), [11.0]);
}

#[test]
fn fabric_sends_and_cq_data_writes_get_flows_to_the_peer_entries_they_cause() {
    let client = side(
        "client",
        0,
        vec![
            event(10_000, 0, "post", "fi_send", &[("wr_id", "0x1"), ("signaled", "true")]),
            event(20_000, 0, "completion", "FI_SEND", &[("wr_id", "0x1")]),
            event(90_000, 0, "completion", "FI_REMOTE_WRITE", &[("cq_data", "0x5eed")]),
        ],
    );
    let server = side(
        "server",
        0,
        vec![
            event(15_000, 0, "completion", "FI_RECV", &[("wr_id", "0x9")]),
            // A write without data causes no entry on the peer: no flow.
            event(
                30_000,
                0,
                "post",
                "fi_writemsg",
                &[("wr_id", "0x2"), ("signaled", "true")],
            ),
            event(
                40_000,
                0,
                "post",
                "fi_writemsg",
                &[("wr_id", "0x3"), ("signaled", "true"), ("cq_data", "0x5eed")],
            ),
            event(60_000, 0, "completion", "FI_WRITE", &[("wr_id", "0x3")]),
        ],
    );
    let ctx = TraceContext {
        lab: "lab".into(),
        workload: "fabric-write".into(),
        run_id: "r2".into(),
        error: None,
    };
    let doc = chrome_trace(&ctx, &[server, client]);
    let events = doc["traceEvents"].as_array().unwrap();
    let starts: Vec<(&str, f64)> = events
        .iter()
        .filter(|e| e["ph"] == "s")
        .map(|e| (e["name"].as_str().unwrap(), e["ts"].as_f64().unwrap()))
        .collect();
    let ends: Vec<(&str, f64)> = events
        .iter()
        .filter(|e| e["ph"] == "f")
        .map(|e| (e["name"].as_str().unwrap(), e["ts"].as_f64().unwrap()))
        .collect();
    assert_eq!(doc["otherData"]["flows"], 2, "{starts:?}");
    // fi_writemsg with data (server, 40 µs after its first event at 15) ends at the
    // client's FI_REMOTE_WRITE; fi_send (client, 10) at the server's FI_RECV.
    assert!(
        starts.contains(&("fi_writemsg", 30.0)) && ends.contains(&("fi_writemsg", 80.0)),
        "{starts:?} {ends:?}"
    );
    assert!(
        starts.contains(&("fi_send", 0.0)) && ends.contains(&("fi_send", 5.0)),
        "{starts:?} {ends:?}"
    );
    // The write with data is a span lasting until its FI_WRITE entry.
    let span = events
        .iter()
        .find(|e| e["ph"] == "X" && e["args"]["wr_id"] == "0x3")
        .expect("the write's span");
    assert_eq!(span["dur"], 20.0);
    assert!(events
        .iter()
        .any(|e| e["ph"] == "M" && e["tid"] == 1 && e["args"]["name"] == "libfabric endpoint (posts, CQ entries)"));
}

#[test]
fn drift_between_two_measurements_is_taken_out() {
    // The agent's clock gains 100 ppm: 1 ms over 10 s of its time.
    let mut s = side(
        "client",
        5_000_000,
        vec![event(5_000_000_000, 0, "verify", "verified", &[])],
    );
    s.clock.agent_ns = 1_000_000_000;
    assert_eq!(
        s.offset_at(6_000_000_000),
        5_000_000,
        "one measurement: a constant offset"
    );
    assert!(s.drift_ppm().is_none());
    assert_eq!(s.offset_error_ns(), 1_000, "one measurement: its own bound");
    s.clock_after = Some(ClockEstimate {
        offset_ns: 6_000_000,
        error_ns: 1_500,
        rtt_ns: 2_000,
        samples: 8,
        agent_ns: 11_000_000_000,
    });
    assert_eq!(s.offset_at(1_000_000_000), 5_000_000);
    assert_eq!(s.offset_at(6_000_000_000), 5_500_000, "halfway: half the drift");
    assert_eq!(s.offset_at(11_000_000_000), 6_000_000);
    assert!((s.drift_ppm().unwrap() - 100.0).abs() < 1e-9);
    let ctx = TraceContext {
        lab: "lab".into(),
        workload: "write-bw".into(),
        run_id: "r3".into(),
        error: None,
    };
    let doc = chrome_trace(&ctx, &[s]);
    let node = &doc["otherData"]["nodes"][0];
    assert!((node["clock_drift_ppm"].as_f64().unwrap() - 100.0).abs() < 1e-9);
    assert_eq!(node["clock_after_offset_ns"], 6_000_000);
    // Events between the two measurements are placed to within the larger
    // bound (the second's here), not the first's alone.
    assert_eq!(node["clock_error_ns"], 1_000);
    assert_eq!(node["offset_error_ns"], 1_500);
}
