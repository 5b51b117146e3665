//! The order of a pair's runs. A freshly booted emulated node keeps getting
//! faster for minutes, so a comparison whose two tools run in different
//! phases of that drift measures the drift. Warm-up rounds go first and
//! are not counted; the measured rounds then alternate in ABBA order
//! (reference, ours, ours, reference, ...): over an even number of rounds
//! each tool's positions are symmetric around the middle of the pair, so a
//! drift linear in time moves both medians (and means) by the same amount,
//! where ABAB would always run the reference in the slower half.

/// Which tool a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The reference tool (perftest, `fi_pingpong`).
    Reference,
    /// Our workload.
    Ours,
}

/// One run in a pair's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// The tool.
    pub side: Side,
    /// The round: 0-based among warm-ups, and among measured rounds.
    pub round: u32,
    /// A warm-up round.
    pub warmup: bool,
}

/// A pair's runs in order: `warmup` rounds of (reference, ours), then
/// `rounds` measured rounds, the reference first in even rounds and ours
/// first in odd ones.
pub fn schedule(warmup: u32, rounds: u32) -> Vec<Slot> {
    let warm = (0..warmup).flat_map(|round| {
        [Side::Reference, Side::Ours].map(|side| Slot {
            side,
            round,
            warmup: true,
        })
    });
    let measured = (0..rounds).flat_map(|round| {
        let order = if round % 2 == 0 {
            [Side::Reference, Side::Ours]
        } else {
            [Side::Ours, Side::Reference]
        };
        order.map(|side| Slot {
            side,
            round,
            warmup: false,
        })
    });
    warm.chain(measured).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lab_results::bench::Stats;

    fn letters(slots: &[Slot]) -> String {
        slots
            .iter()
            .map(|s| match (s.side, s.warmup) {
                (Side::Reference, false) => 'A',
                (Side::Ours, false) => 'B',
                (Side::Reference, true) => 'a',
                (Side::Ours, true) => 'b',
            })
            .collect()
    }

    #[test]
    fn test_warm_ups_first_then_abba() {
        let slots = schedule(1, 4);
        assert_eq!(letters(&slots), "abABBAABBA");
        assert_eq!(
            slots.iter().map(|s| s.round).collect::<Vec<_>>(),
            [0, 0, 0, 0, 1, 1, 2, 2, 3, 3]
        );
        assert_eq!(letters(&schedule(0, 3)), "ABBAAB");
        assert_eq!(letters(&schedule(2, 1)), "ababAB");
        assert!(schedule(0, 0).is_empty());
    }

    /// Median of each tool's figures when every run is its position in
    /// time (a drift linear in time, the same for both tools).
    fn medians_under_linear_drift(slots: &[Slot]) -> (f64, f64) {
        let of = |side| {
            Stats::of(
                (0u32..)
                    .zip(slots)
                    .filter(|(_, s)| s.side == side && !s.warmup)
                    .map(|(at, _)| Some(f64::from(at))),
            )
            .median
            .unwrap()
        };
        (of(Side::Reference), of(Side::Ours))
    }

    #[test]
    fn test_abba_over_even_rounds_cancels_a_linear_drift_where_abab_does_not() {
        for rounds in [2, 4, 6, 8] {
            for warmup in [0, 1, 2] {
                let (r, o) = medians_under_linear_drift(&schedule(warmup, rounds));
                assert_eq!(r, o, "{rounds} rounds, {warmup} warm-ups");
            }
        }
        // ABAB, as before: the reference always half a step earlier.
        let abab: Vec<Slot> = (0..4)
            .flat_map(|round| {
                [Side::Reference, Side::Ours].map(|side| Slot {
                    side,
                    round,
                    warmup: false,
                })
            })
            .collect();
        let (r, o) = medians_under_linear_drift(&abab);
        assert_eq!(o - r, 1.0);
        // An odd count leaves at most one step of it.
        let (r, o) = medians_under_linear_drift(&schedule(0, 3));
        assert!((o - r).abs() <= 1.0);
    }
}
