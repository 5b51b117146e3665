//! One side's figures of one round of the collectives suite (ours or Open
//! MPI's, computed the same way: nccl-tests' algbw and busbw from the size,
//! the ranks and the slowest rank's mean time). What the suite ran on is
//! [`super::CollectivesRecord`].

use serde::{Deserialize, Serialize};
use workload_catalogue::Collective;

use crate::collective::algbw_gb_s;

/// One round of one side of a collective pair. The sample's `value` is
/// [`CollectiveFigures::busbw_gb_s`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CollectiveFigures {
    /// Ranks.
    pub world: u32,
    /// Bytes of the operation, as nccl-tests counts them.
    pub size: u64,
    /// Timed operations.
    pub iterations: u64,
    /// Time of one operation: the slowest rank's mean, µs.
    pub time_us: f64,
    /// size / time, GB/s.
    pub algbw_gb_s: f64,
    /// algbw × the collective's bus factor, GB/s.
    pub busbw_gb_s: f64,
    /// Elements checked over all ranks and operations.
    pub checked: u64,
    /// Of them, wrong.
    pub wrong: u64,
}

impl CollectiveFigures {
    /// The figures of `op` on `world` ranks moving `size` bytes in
    /// `time_us` per operation: algbw and busbw as nccl-tests defines them,
    /// with the catalogue's bus factor (the same for both sides).
    pub fn of(op: Collective, world: u32, size: u64, iterations: u64, time_us: f64) -> CollectiveFigures {
        let algbw = algbw_gb_s(size, time_us);
        CollectiveFigures {
            world,
            size,
            iterations,
            time_us,
            algbw_gb_s: algbw,
            busbw_gb_s: algbw * op.bus_factor(world),
            checked: 0,
            wrong: 0,
        }
    }

    /// Every element was checked and none was wrong.
    pub fn verified(&self) -> bool {
        self.checked > 0 && self.wrong == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{CeilingRecord, Sample};

    #[test]
    fn test_figures_follow_nccl_tests_with_the_catalogue_factor() {
        // 1 MiB allreduce on 4 ranks in 500 ms: algbw 2.097 MB/s, busbw 1.5x that.
        let f = CollectiveFigures::of(Collective::Allreduce, 4, 1 << 20, 5, 500_000.0);
        assert!((f.algbw_gb_s - 1048576.0 / 0.5 / 1e9).abs() < 1e-15);
        assert!((f.busbw_gb_s - f.algbw_gb_s * 1.5).abs() < 1e-15);
        let b = CollectiveFigures::of(Collective::Broadcast, 4, 1 << 20, 5, 500_000.0);
        assert_eq!(b.busbw_gb_s, b.algbw_gb_s);
        assert_eq!(
            CollectiveFigures::of(Collective::Alltoall, 4, 8, 1, 0.0).busbw_gb_s,
            0.0
        );
        assert!(!f.verified(), "nothing checked vouches for nothing");
    }

    #[test]
    fn test_the_ceiling_is_in_busbw_units() {
        let c = CeilingRecord::new(
            "write-bw".into(),
            Sample {
                value: Some(20.0),
                ..Default::default()
            },
        );
        assert!((c.gb_s.unwrap() - 0.020_971_52).abs() < 1e-12);
        assert_eq!(CeilingRecord::new(String::new(), Sample::default()).gb_s, None);
    }
}
