//! The verdict rules on constructed rounds: no lab, no tools.

use super::*;
use crate::bench::{all_ok, Metric, Suite, BENCH_SCHEMA};

fn lat_spec() -> PairSpec {
    PairSpec {
        workload: "write-lat".into(),
        tool: "ib_write_lat".into(),
        size: 2,
        iterations: 200,
        depth: None,
        metric: Metric::LatTypicalUs,
        target: Some(1.0),
        provider: None,
        qps: 1,
        sweep_point: false,
    }
}

/// A counted round at `position`.
fn at(position: u32, value: f64) -> Sample {
    Sample {
        position: Some(position),
        value: Some(value),
        ..Sample::default()
    }
}

fn ours_at(position: u32, value: f64) -> Sample {
    Sample {
        verified: Some(true),
        ..at(position, value)
    }
}

/// Alternating reference, ours from position 0 (the order before ABBA).
fn abab(reference: &[f64], ours: &[f64]) -> PairRecord {
    let r = reference
        .iter()
        .enumerate()
        .map(|(i, &v)| at(2 * i as u32, v))
        .collect();
    let o = ours
        .iter()
        .enumerate()
        .map(|(i, &v)| ours_at(2 * i as u32 + 1, v))
        .collect();
    PairRecord::new(
        lat_spec(),
        SideStats::of("ib_write_lat", String::new(), r),
        SideStats::of("write-lat", String::new(), o),
    )
}

fn bench(pairs: Vec<PairRecord>) -> BenchRecord {
    BenchRecord {
        schema: BENCH_SCHEMA,
        id: "b".into(),
        lab: "t".into(),
        suite: Suite::Quick,
        rounds: 5,
        warmup_rounds: 0,
        order: "abba".into(),
        server: "server".into(),
        client: "client".into(),
        perftest_version: "6.06".into(),
        perftest_device: Default::default(),
        started_at: String::new(),
        client_uptime_s: None,
        duration_s: 0.0,
        failures: Failures::of(&pairs),
        pairs,
        agent_rss: Vec::new(),
        orchestration: None,
        collectives: None,
        saved_to: None,
        expectations: Vec::new(),
    }
}

#[test]
fn test_spearman_ranks_with_ties_and_refuses_what_does_not_vary() {
    let x = [1.0, 2.0, 3.0, 4.0, 5.0];
    assert_eq!(spearman(&x, &[10.0, 20.0, 30.0, 40.0, 50.0]), Some(1.0));
    assert_eq!(spearman(&x, &[5.0, 4.0, 3.0, 2.0, 1.0]), Some(-1.0));
    // Two adjacent swaps: sum of d² = 4, rho = 1 - 6·4 / (5·24) = 0.8.
    let rho = spearman(&x, &[2.0, 1.0, 4.0, 3.0, 5.0]).unwrap();
    assert!((rho - 0.8).abs() < 1e-12, "{rho}");
    // Ties share their mean rank: y's ranks are 1, 2, 3.5, 5, 3.5.
    let tied = spearman(&x, &[5.0, 6.0, 7.0, 8.0, 7.0]).unwrap();
    let expected = {
        let ry = [1.0, 2.0, 3.5, 5.0, 3.5];
        let d: f64 = ry.iter().map(|r: &f64| (r - 3.0) * (r - 3.0)).sum();
        let n: f64 = x.iter().zip(&ry).map(|(a, b)| (a - 3.0) * (b - 3.0)).sum();
        n / (10.0 * d).sqrt()
    };
    assert!((tied - expected).abs() < 1e-12, "{tied} {expected}");
    assert_eq!(spearman(&x, &[1.0; 5]), None);
    assert_eq!(spearman(&x, &[1.0, 2.0]), None);
}

#[test]
fn test_a_warming_node_is_marked_trending_and_scatter_is_not() {
    // The rounds of issue 37 right after `up`: both tools falling round by round.
    let warming = abab(
        &[1006.0, 820.0, 709.0, 601.0, 506.0],
        &[856.0, 651.0, 525.0, 440.0, 540.0],
    );
    let d = &warming.drift;
    assert_eq!((d.n, d.trending), (10, Some(true)), "{d:?}");
    // As docs/cmd/bench.md quotes it.
    assert!((d.rho.unwrap() - -0.8268).abs() < 1e-4, "{d:?}");
    assert!((d.threshold.unwrap() - 1.96 / 3.0).abs() < 1e-12);
    // The same figures shuffled in time: they scatter.
    let settled = abab(
        &[709.0, 1006.0, 506.0, 820.0, 601.0],
        &[525.0, 440.0, 856.0, 540.0, 651.0],
    );
    assert_eq!(settled.drift.trending, Some(false), "{:?}", settled.drift);
    // Rising figures trend too (a bandwidth pair warming up).
    let rising = abab(&[10.0, 11.0, 12.0, 13.0], &[10.5, 11.5, 12.5, 13.5]);
    assert_eq!(rising.drift.trending, Some(true));
    assert!(rising.drift.rho.unwrap() > 0.9);
    // Two rounds each cannot tell.
    let short = abab(&[1006.0, 506.0], &[856.0, 440.0]);
    assert_eq!((short.drift.n, short.drift.trending, short.drift.rho), (4, None, None));
    // Two tools at very different levels, each flat: no trend from the levels.
    let levels = abab(&[1000.0, 1001.0, 999.0, 1000.0], &[500.0, 499.0, 501.0, 500.0]);
    assert_eq!(levels.drift.trending, Some(false), "{:?}", levels.drift);
}

#[test]
fn test_an_unverified_round_of_ours_is_left_out_of_the_ratio_and_counted() {
    let mut ours: Vec<Sample> = [300.0, 310.0, 320.0]
        .iter()
        .enumerate()
        .map(|(i, &v)| ours_at(2 * i as u32 + 1, v))
        .collect();
    // A run that finished fast because its bytes were wrong.
    ours.push(Sample {
        verified: Some(false),
        error: Some("not verified: client: byte 17 differs".into()),
        ..ours_at(7, 1.0)
    });
    let reference = (0..4).map(|i| at(2 * i, 400.0)).collect();
    let pair = PairRecord::new(
        lat_spec(),
        SideStats::of("ib_write_lat", String::new(), reference),
        SideStats::of("write-lat", String::new(), ours),
    );
    assert_eq!(pair.ours.stats.n, 3);
    assert_eq!(pair.ours.stats.median, Some(310.0));
    assert_eq!(
        pair.ours.left_out,
        LeftOut {
            warmup: 0,
            failed: 0,
            unverified: 1
        }
    );
    assert_eq!(pair.ratio, Some(310.0 / 400.0));
    let b = bench(vec![pair]);
    assert_eq!((b.failures.ours_unverified, b.failures.ours_failed), (1, 0));
    assert_eq!(b.outcome(), BenchOutcome::OursFailed);
    assert_eq!(b.outcome().exit_status(), 1);
    assert!(!all_ok(&b));
}

#[test]
fn test_a_pair_with_no_verified_round_of_ours_has_no_ratio_and_fails() {
    let bad = |p| Sample {
        verified: Some(false),
        error: Some("not verified".into()),
        ..ours_at(p, 1.0)
    };
    let pair = PairRecord::new(
        lat_spec(),
        SideStats::of("ib_write_lat", String::new(), vec![at(0, 400.0), at(3, 410.0)]),
        SideStats::of("write-lat", String::new(), vec![bad(1), bad(2)]),
    );
    assert_eq!((pair.ratio, pair.meets_target, pair.ours.stats.n), (None, None, 0));
    let b = bench(vec![pair]);
    assert_eq!(b.failures.pairs_without_ours, ["write-lat"]);
    assert_eq!(b.outcome(), BenchOutcome::OursFailed);
}

#[test]
fn test_a_reference_that_fails_is_not_our_failure() {
    let failed = |p| Sample {
        error: Some("perftest client exited 9".into()),
        ..Sample {
            position: Some(p),
            ..Sample::default()
        }
    };
    // One round of the reference failed: the ratio stands on the others.
    let some = PairRecord::new(
        lat_spec(),
        SideStats::of(
            "ib_write_lat",
            String::new(),
            vec![at(0, 400.0), failed(3), at(4, 420.0)],
        ),
        SideStats::of(
            "write-lat",
            String::new(),
            vec![ours_at(1, 300.0), ours_at(2, 310.0), ours_at(5, 305.0)],
        ),
    );
    assert_eq!(some.reference.left_out.failed, 1);
    assert_eq!(some.ratio, Some(305.0 / 410.0));
    let b = bench(vec![some.clone()]);
    assert_eq!(b.failures.reference_failed, 1);
    assert!(b.failures.pairs_without_reference.is_empty());
    assert_eq!(b.outcome(), BenchOutcome::ReferenceFailed);
    assert_eq!(b.outcome().exit_status(), 3);
    // Every round of the reference failed: no ratio rather than a wrong one.
    let none = PairRecord::new(
        lat_spec(),
        SideStats::of("ib_write_lat", String::new(), vec![failed(0), failed(3)]),
        SideStats::of("write-lat", String::new(), vec![ours_at(1, 300.0), ours_at(2, 310.0)]),
    );
    assert_eq!((none.ratio, none.meets_target, none.cpu_ratio), (None, None, None));
    assert_eq!(none.ours.stats.median, Some(305.0));
    let b = bench(vec![some.clone(), none]);
    assert_eq!(b.failures.pairs_without_reference, ["write-lat"]);
    assert_eq!(b.failures.reference_failed, 3);
    assert_eq!(b.outcome(), BenchOutcome::ReferenceFailed);
    // Ours failing as well: ours decides.
    let ours_too = PairRecord::new(
        lat_spec(),
        SideStats::of("ib_write_lat", String::new(), vec![failed(0), at(3, 400.0)]),
        SideStats::of(
            "write-lat",
            String::new(),
            vec![
                Sample {
                    error: Some("node `client` (client): rdma-agent did not answer Run".into()),
                    ..Sample::default()
                },
                ours_at(2, 310.0),
            ],
        ),
    );
    let b = bench(vec![some, ours_too]);
    assert_eq!((b.failures.reference_failed, b.failures.ours_failed), (2, 1));
    assert_eq!(b.outcome(), BenchOutcome::OursFailed);
}

#[test]
fn test_warm_up_rounds_are_named_left_out_and_still_judged() {
    let warm = |s: Sample| Sample { warmup: true, ..s };
    let pair = PairRecord::new(
        lat_spec(),
        SideStats::of(
            "ib_write_lat",
            String::new(),
            vec![warm(at(0, 1000.0)), at(2, 400.0), at(5, 402.0)],
        ),
        SideStats::of(
            "write-lat",
            String::new(),
            vec![warm(ours_at(1, 900.0)), ours_at(3, 300.0), ours_at(4, 302.0)],
        ),
    );
    assert_eq!((pair.reference.stats.n, pair.reference.stats.max), (2, Some(402.0)));
    assert_eq!(pair.ours.left_out.warmup, 1);
    assert_eq!(pair.ratio, Some(301.0 / 401.0));
    assert_eq!(bench(vec![pair.clone()]).outcome(), BenchOutcome::Ok);
    // A warm-up of ours that did not verify is a corruption all the same.
    let mut bad = pair;
    bad.ours.samples[0].verified = Some(false);
    bad.ours.samples[0].error = Some("not verified".into());
    let b = bench(vec![bad]);
    assert_eq!(b.failures.ours_unverified, 1);
    assert_eq!(b.outcome(), BenchOutcome::OursFailed);
}

#[test]
fn test_a_schema_1_record_reads_with_the_new_fields_empty() {
    let mut json = serde_json::to_value(bench(vec![abab(&[400.0], &[300.0])])).unwrap();
    let obj = json.as_object_mut().unwrap();
    for key in ["warmup_rounds", "order", "failures"] {
        obj.remove(key);
    }
    obj.insert("schema".into(), 1.into());
    let pair = obj["pairs"][0].as_object_mut().unwrap();
    pair.remove("drift");
    for side in ["reference", "ours"] {
        let side = pair[side].as_object_mut().unwrap();
        side.remove("left_out");
        side["samples"][0].as_object_mut().unwrap().remove("position");
    }
    let old: BenchRecord = serde_json::from_value(json).unwrap();
    assert_eq!((old.order.as_str(), old.warmup_rounds), ("abab", 0));
    assert_eq!(old.pairs[0].drift, Drift::default());
    assert_eq!(old.pairs[0].ours.samples[0].position, None);
    assert_eq!(old.outcome(), BenchOutcome::Ok);
}

#[test]
fn test_the_spread_tells_tight_rounds_from_rounds_that_span_the_target() {
    // Ours 10 % ahead in every round, each tool within 1 %: the interval
    // holds the ratio and stays clear of parity.
    let tight = abab(&[500.0, 502.0, 498.0, 501.0], &[450.0, 452.0, 449.0, 451.0]);
    let s = tight.spread.expect("four rounds a side");
    let ratio = tight.ratio.expect("a ratio");
    assert!(s.low <= ratio && ratio <= s.high, "{s:?} around {ratio}");
    assert!(s.low > 0.88 && s.high < 0.92, "{s:?}");
    assert!(!s.spans(1.0));
    assert_eq!(s.rounds, 4);
    // A ratio of 1.03 from rounds that scatter by a half: it misses the
    // target, and the interval says rounds like these could have met it.
    let scattered = abab(&[400.0, 700.0, 450.0, 650.0], &[430.0, 740.0, 490.0, 640.0]);
    let s = scattered.spread.expect("four rounds a side");
    assert_eq!(scattered.meets_target, Some(false));
    assert!(s.spans(1.0), "{s:?}");
    // The same rounds give the same interval: the resampling is seeded.
    assert_eq!(
        RatioSpread::of(&scattered.reference.samples, &scattered.ours.samples),
        Some(s)
    );
}

#[test]
fn test_no_spread_from_fewer_than_three_rounds_a_side() {
    let two = abab(&[500.0, 510.0, 505.0], &[450.0, 460.0]);
    assert_eq!(two.spread, None);
    // A failed round of the reference does not count towards the three.
    let mut failed = at(6, 0.0);
    failed.value = None;
    failed.error = Some("exited 17".into());
    let pair = PairRecord::new(
        lat_spec(),
        SideStats::of("ib_write_lat", String::new(), vec![at(0, 500.0), at(2, 510.0), failed]),
        SideStats::of(
            "write-lat",
            String::new(),
            vec![ours_at(1, 450.0), ours_at(3, 455.0), ours_at(5, 452.0)],
        ),
    );
    assert_eq!(pair.spread, None);
}
