//! Limits every request shares, checked by the agent before it touches any
//! RDMA resource (and named in the controller's help). A node may lower the
//! size limit further: a run registers at most a quarter of its
//! MemAvailable, which only the agent can read.

/// Largest message size accepted unless the node has less memory to spare.
pub const DEFAULT_MAX_SIZE: u64 = 64 * 1024 * 1024;
/// Largest iteration count accepted.
pub const MAX_ITERATIONS: u64 = 1_000_000_000;
/// Default largest size of an all-sizes sweep.
pub const DEFAULT_SWEEP_MAX: u64 = 8 * 1024 * 1024;

/// The largest size of a sweep asked for with `max_size` (0: the default).
pub const fn sweep_max(max_size: u64) -> u64 {
    if max_size == 0 {
        DEFAULT_SWEEP_MAX
    } else {
        max_size
    }
}
/// Most QPs one run may ask for.
pub const MAX_QPS: u32 = 16;
/// Most ranks a collective may have (the agents' immediates name a sender
/// in 4 bits).
pub const MAX_RANKS: u32 = 16;
/// Longest timed run (`duration_s`), one day.
pub const MAX_DURATION_S: f64 = 86_400.0;
/// Longest session timeout (`timeout_ms`), one week: a session deadline is
/// `now + timeout`, which must not overflow the clock.
pub const MAX_TIMEOUT_MS: u64 = 7 * 86_400 * 1000;
/// Longest wait of a client before it connects (`connect_delay_ms`), one
/// minute: long enough to watch a server wait, short enough that a typo
/// does not hold a lab.
pub const MAX_CONNECT_DELAY_MS: u32 = 60_000;
/// Largest `total` of a bulk transfer (the server holds all of it in memory).
pub const MAX_BULK_TOTAL: u64 = 1 << 30;
/// A run's timeout unless told otherwise, seconds.
pub const DEFAULT_TIMEOUT_S: u64 = 120;
/// A trace's ring per side (per rank) unless told otherwise: the last this
/// many events are kept.
pub const DEFAULT_TRACE_EVENTS: u32 = 65_536;
/// The largest trace ring a run may ask for per side.
pub const MAX_TRACE_EVENTS: u32 = 1 << 20;
