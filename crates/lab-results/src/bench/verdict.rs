//! What a bench's rounds say: which of them count, the ratio of the pair,
//! whether the rounds trend with time (the drift check), and whose failure
//! a failed round is. Pure functions of the record, so every rule here is
//! tested on constructed rounds.
//!
//! The rules:
//! - A round counts when it is not a warm-up, it produced a figure, and (for
//!   ours, and Open MPI's collectives, which check their results too) its
//!   bytes verified. Everything else is left out of the
//!   statistics and counted in [`LeftOut`].
//! - The ratio is ours / the reference's median over counted rounds; a side
//!   with no counted round gives no ratio. A collective's pair also has a
//!   time ratio: ours / the reference's median time per operation.
//! - Drift: Spearman's rank correlation between when a counted round ran
//!   and its figure, both tools together, each divided by its own median
//!   (so the two tools' levels do not look like a trend). The rounds trend
//!   when |rho| ≥ 1.96 / √(n − 1), about the 5 % two-sided level of rho
//!   for rounds in random order; fewer than [`DRIFT_MIN_ROUNDS`] rounds
//!   cannot tell.
//! - Spread: the ratio's 95 % interval over resampled rounds
//!   ([`RatioSpread`]), from [`SPREAD_MIN_ROUNDS`] counted rounds a side.
//! - A failed or unverified round of ours (warm-ups included: a corruption
//!   is never a warm-up effect), or a pair with no counted round of ours,
//!   is ours to answer for; a failed round of the reference tool is its own.

use super::{
    judge, BenchOutcome, BenchRecord, Drift, Failures, LeftOut, PairRecord, PairSpec, RatioSpread, Sample, SideStats,
    Stats, DRIFT_MIN_ROUNDS, SPREAD_MIN_ROUNDS, SPREAD_RESAMPLES,
};

impl Sample {
    /// Ours: the run finished and its bytes did not verify.
    pub fn unverified(&self) -> bool {
        self.verified == Some(false)
    }

    /// The run gave no figure (an error, a refusal, a timeout); an
    /// unverified run of ours is [`Sample::unverified`] instead.
    pub fn failed(&self) -> bool {
        !self.unverified() && (self.error.is_some() || !self.value.is_some_and(f64::is_finite))
    }

    /// The round goes into the statistics.
    pub fn counts(&self) -> bool {
        !self.warmup && !self.failed() && !self.unverified()
    }
}

impl SideStats {
    /// One side of a pair from its samples: statistics over the rounds that
    /// count, and how many were left out.
    pub fn of(tool: &str, command: String, samples: Vec<Sample>) -> SideStats {
        let counted = || samples.iter().filter(|s| s.counts());
        let measured = || samples.iter().filter(|s| !s.warmup);
        SideStats {
            tool: tool.to_string(),
            command,
            stats: Stats::of(counted().map(|s| s.value)),
            cpu_client_s_per_gib: Stats::of(counted().map(|s| s.cpu_client_s_per_gib)),
            cpu_total_s_per_gib: Stats::of(counted().map(|s| s.cpu_total_s_per_gib)),
            time_us: Stats::of(counted().map(|s| s.collective.as_ref().map(|c| c.time_us))),
            left_out: LeftOut {
                warmup: samples.iter().filter(|s| s.warmup).count(),
                failed: measured().filter(|s| s.failed()).count(),
                unverified: measured().filter(|s| s.unverified()).count(),
            },
            samples,
        }
    }
}

impl PairRecord {
    /// A pair's record from its two sides: the ratio, the verdict on the
    /// target, the CPU ratio and the drift check.
    pub fn new(spec: PairSpec, reference: SideStats, ours: SideStats) -> PairRecord {
        let (ratio, meets_target) = judge(&spec, &reference.stats, &ours.stats);
        let cpu_ratio = match (ours.cpu_total_s_per_gib.median, reference.cpu_total_s_per_gib.median) {
            (Some(o), Some(r)) if r > 0.0 => Some(o / r),
            _ => None,
        };
        let time_ratio = match (ours.time_us.median, reference.time_us.median) {
            (Some(o), Some(r)) if r > 0.0 => Some(o / r),
            _ => None,
        };
        let drift = Drift::of(&reference.samples, &ours.samples);
        let spread = RatioSpread::of(&reference.samples, &ours.samples);
        PairRecord {
            unit: spec.metric.unit().to_string(),
            better: if spec.metric.higher_is_better() {
                "higher"
            } else {
                "lower"
            }
            .to_string(),
            spec,
            reference,
            ours,
            ratio,
            meets_target,
            cpu_ratio,
            time_ratio,
            drift,
            spread,
        }
    }
}

impl RatioSpread {
    /// The interval over both sides' counted rounds; none with fewer than
    /// [`SPREAD_MIN_ROUNDS`] a side or a reference median of zero.
    pub fn of(reference: &[Sample], ours: &[Sample]) -> Option<RatioSpread> {
        // A round that counts has a finite figure ([`Sample::failed`]).
        let counted =
            |side: &[Sample]| -> Vec<f64> { side.iter().filter(|s| s.counts()).filter_map(|s| s.value).collect() };
        let (reference, ours) = (counted(reference), counted(ours));
        let rounds = reference.len().min(ours.len());
        if rounds < SPREAD_MIN_ROUNDS {
            return None;
        }
        let mut draw = SplitMix64(0x00C0_FFEE);
        let mut resampled_median = |values: &[f64]| {
            let picks = values.iter().map(|_| Some(values[draw.below(values.len())]));
            Stats::of(picks).median
        };
        let mut ratios: Vec<f64> = (0..SPREAD_RESAMPLES)
            .filter_map(|_| match (resampled_median(&reference), resampled_median(&ours)) {
                (Some(r), Some(o)) if r > 0.0 => Some(o / r),
                _ => None,
            })
            .collect();
        if ratios.is_empty() {
            return None;
        }
        ratios.sort_by(f64::total_cmp);
        let at = |q: f64| ratios[((ratios.len() - 1) as f64 * q).round() as usize];
        Some(RatioSpread {
            low: at(0.025),
            high: at(0.975),
            rounds,
        })
    }

    /// The target lies inside the interval: these rounds cannot tell a
    /// ratio that meets it from one that misses it.
    pub fn spans(&self, target: f64) -> bool {
        self.low <= target && target <= self.high
    }
}

/// Vigna's SplitMix64: a small, fixed-seed generator, so that the spread
/// of a record is reproducible without a dependency.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (n is a handful of rounds, so the modulo's bias is
    /// below 1e-17).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

impl Drift {
    /// The drift check over both sides' counted rounds (see the module's
    /// rules). Rounds without a position (older records) are not used.
    pub fn of(reference: &[Sample], ours: &[Sample]) -> Drift {
        let mut order = Vec::new();
        let mut figure = Vec::new();
        for side in [reference, ours] {
            let counted: Vec<(u32, f64)> = side
                .iter()
                .filter(|s| s.counts())
                .filter_map(|s| Some((s.position?, s.value?)))
                .collect();
            let Some(median) = Stats::of(counted.iter().map(|&(_, v)| Some(v))).median else {
                continue;
            };
            if median > 0.0 {
                order.extend(counted.iter().map(|&(at, _)| f64::from(at)));
                figure.extend(counted.iter().map(|&(_, v)| v / median));
            }
        }
        let n = order.len();
        if n < DRIFT_MIN_ROUNDS {
            return Drift { n, ..Drift::default() };
        }
        let threshold = 1.96 / ((n - 1) as f64).sqrt();
        let rho = spearman(&order, &figure);
        Drift {
            rho,
            n,
            threshold: Some(threshold),
            // Figures that do not vary at all do not trend.
            trending: Some(rho.is_some_and(|r| r.abs() >= threshold)),
        }
    }
}

/// Ranks from 1, ties sharing their mean rank.
fn ranks(v: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut out = vec![0.0; v.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && v[idx[j + 1]] == v[idx[i]] {
            j += 1;
        }
        let mean = (i + j) as f64 / 2.0 + 1.0;
        for &k in &idx[i..=j] {
            out[k] = mean;
        }
        i = j + 1;
    }
    out
}

/// Spearman's rank correlation of `x` and `y` (Pearson's on their ranks,
/// so ties are handled); None when either does not vary or they differ in
/// length.
pub fn spearman(x: &[f64], y: &[f64]) -> Option<f64> {
    if x.len() != y.len() || x.len() < 2 {
        return None;
    }
    let (rx, ry) = (ranks(x), ranks(y));
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (mx, my) = (mean(&rx), mean(&ry));
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in rx.iter().zip(&ry) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx) * (a - mx);
        syy += (b - my) * (b - my);
    }
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx * syy).sqrt())
}

impl Failures {
    /// The failed rounds of `pairs`, by whose failure they are.
    pub fn of(pairs: &[PairRecord]) -> Failures {
        let mut f = Failures::default();
        for p in pairs {
            f.reference_failed += p
                .reference
                .samples
                .iter()
                .filter(|s| s.failed() || s.unverified())
                .count();
            f.ours_failed += p.ours.samples.iter().filter(|s| s.failed()).count();
            f.ours_unverified += p.ours.samples.iter().filter(|s| s.unverified()).count();
            if p.ours.stats.n == 0 {
                f.pairs_without_ours.push(p.spec.label());
            }
            if p.reference.stats.n == 0 {
                f.pairs_without_reference.push(p.spec.label());
            }
        }
        f
    }

    /// Rounds of ours that failed or did not verify.
    pub fn ours(&self) -> usize {
        self.ours_failed + self.ours_unverified
    }
}

impl BenchRecord {
    /// What the bench comes to, read off its pairs (so older records are
    /// judged by the same rules).
    pub fn outcome(&self) -> BenchOutcome {
        let f = Failures::of(&self.pairs);
        let orchestration_ok = self.orchestration.as_ref().is_none_or(super::orchestration_ok);
        if !orchestration_ok || f.ours() > 0 || !f.pairs_without_ours.is_empty() {
            BenchOutcome::OursFailed
        } else if crate::expect::misses(&self.expectations).next().is_some() {
            BenchOutcome::ExpectMissed
        } else if f.reference_failed > 0 || !f.pairs_without_reference.is_empty() {
            BenchOutcome::ReferenceFailed
        } else {
            BenchOutcome::Ok
        }
    }
}

#[cfg(test)]
mod tests;
