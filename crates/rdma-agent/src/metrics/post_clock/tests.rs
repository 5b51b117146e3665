use super::*;

/// perftest's peak loop from `print_report_bw`, transcribed: `tposted[i]`
/// is set for the first request of every post list, `tcompleted[j]` for
/// the last request of every `cq_mod` (and for the last request), times
/// are integer cycles (here ns) and each ratio is an integer division.
fn perftest_opt_delta(tposted: &[u64], tcompleted: &[u64], post_list: usize, cq_mod: usize) -> u64 {
    let n = tposted.len();
    let mut opt_delta = tcompleted[n - 1] - tposted[0];
    let mut i = 0;
    while i < n {
        let mut j = (i + 1).div_ceil(cq_mod) * cq_mod - 1;
        while j < n {
            opt_delta = opt_delta.min((tcompleted[j] - tposted[i]) / (j - i + 1) as u64);
            j += cq_mod;
        }
        if !n.is_multiple_of(cq_mod) {
            let j = n - 1;
            opt_delta = opt_delta.min((tcompleted[j] - tposted[i]) / (j - i + 1) as u64);
        }
        i += post_list;
    }
    opt_delta
}

/// A seeded run on one QP: posts of `post_list` requests while fewer than
/// `depth` are in flight, each request taking a pseudo-random service
/// time on the wire, the last of every `cq_mod` (and the last one)
/// signaled. Returns perftest's arrays and the clock recorded alongside.
fn simulated_run(
    n: usize,
    post_list: usize,
    cq_mod: usize,
    depth: usize,
    seed: u64,
) -> (Vec<u64>, Vec<u64>, PostClock) {
    let mut rng = seed | 1;
    let mut next = move |bound: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % bound
    };
    let mut clock = PostClock::new(n);
    let (mut tposted, mut tcompleted) = (vec![0u64; n], vec![0u64; n]);
    let mut now = 1_000u64;
    let mut wire_free = now;
    let mut done_at = vec![0u64; n];
    let (mut posted, mut completed) = (0usize, 0usize);
    while completed < n {
        if posted < n && posted - completed + post_list <= depth {
            let count = post_list.min(n - posted);
            tposted[posted] = now;
            clock.record_post(now, count as u64);
            for done in done_at.iter_mut().skip(posted).take(count) {
                // Bursty service: mostly fast, sometimes a stall.
                let service = if next(10) == 0 {
                    500 + next(3_000)
                } else {
                    50 + next(40)
                };
                wire_free = wire_free.max(now) + service;
                *done = wire_free;
            }
            posted += count;
            now += 5 + next(20);
            continue;
        }
        // Wait for the next signaled request in flight.
        let j = (completed..posted)
            .find(|&r| (r + 1) % cq_mod == 0 || r + 1 == n)
            .expect("a full queue holds a signaled request");
        now = now.max(done_at[j]) + next(30);
        tcompleted[j] = now;
        clock.record_completion(now, (j + 1 - completed) as u64);
        completed = j + 1;
    }
    (tposted, tcompleted, clock)
}

#[test]
fn the_peak_is_perftests_over_every_post_and_signaled_completion() {
    let mut compared = 0;
    for (n, post_list, cq_mod, depth) in [
        (1, 1, 1, 1),
        (7, 1, 1, 4),
        (100, 1, 10, 32),
        (1000, 1, 100, 128),
        (999, 1, 100, 128),
        (640, 4, 16, 64),
        (2000, 1, 1, 16),
        (5000, 1, 100, 128),
    ] {
        for seed in 1..=5 {
            let (tposted, tcompleted, clock) = simulated_run(n, post_list, cq_mod, depth, seed * 7919);
            let expected = perftest_opt_delta(&tposted, &tcompleted, post_list, cq_mod);
            let ours = clock.peak_ns_per_request().expect("measured");
            // perftest keeps whole cycles: the floor of our exact minimum.
            assert_eq!(
                (ours + 1e-9).floor() as u64,
                expected,
                "n={n} list={post_list} cq_mod={cq_mod} depth={depth} seed={seed}: {ours}"
            );
            compared += 1;
        }
    }
    assert_eq!(compared, 40);
}

#[test]
fn a_steady_run_peaks_at_its_average_and_a_stall_does_not_lower_the_peak() {
    // 100 requests, one every 10 ns, signaled each.
    let mut steady = PostClock::new(100);
    for r in 0..100u64 {
        steady.record_post(r * 10, 1);
        steady.record_completion(r * 10 + 10, 1);
    }
    // Post 0 at 0 to completion 99 at 1000: 10 ns a request; shorter stretches as well.
    assert_eq!(steady.peak_ns_per_request(), Some(10.0));
    // The same with a 10 µs stall in the middle: the peak is the fast half.
    let mut stalled = PostClock::new(100);
    for r in 0..100u64 {
        let stall = if r >= 50 { 10_000 } else { 0 };
        stalled.record_post(r * 10 + stall, 1);
        stalled.record_completion(r * 10 + 10 + stall, 1);
    }
    assert_eq!(stalled.peak_ns_per_request(), Some(10.0));
    assert!((stalled.span_s() - 11_000e-9).abs() < 1e-15);
}

#[test]
fn nothing_completed_or_too_many_events_is_not_measured() {
    let mut clock = PostClock::new(4);
    clock.record_post(0, 4);
    assert_eq!(clock.peak_ns_per_request(), None);
    assert_eq!(clock.span_s(), 0.0);

    let mut flooded = PostClock::new(MAX_EVENTS + 1);
    for r in 0..=MAX_EVENTS as u64 {
        flooded.record_post(r, 1);
    }
    flooded.record_completion(MAX_EVENTS as u64 + 5, MAX_EVENTS as u64 + 1);
    assert_eq!(flooded.peak_ns_per_request(), None);
}
