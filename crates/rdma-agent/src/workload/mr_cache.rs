//! mr-cache: why RDMA libraries cache memory registrations. The client uses
//! buffers whose sizes cycle through `size`, 2x, 4x and 8x (4 to 32 KiB by
//! default); each use fills the buffer with the pattern and WRITEs it into
//! that size's slot of the server's buffer. It runs the cycle twice:
//!
//! 1. without a cache: ibv_reg_mr before every use, ibv_dereg_mr after it;
//! 2. through a [`RegistrationCache`] keyed by size: a miss registers and
//!    keeps the registration, a hit reuses it; the cache is flushed
//!    (every entry deregistered) at the end.
//!
//! Both passes time only the verbs registration calls, so the difference is
//! the registration time the cache saves. The server checks that each slot
//! holds the last payload the cached pass wrote at that size.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use agent_proto::v1::{Fault, MrCacheStats, Role, SideResult};

use super::{
    corrupt_byte, injects, iterations, pattern, post_done_recv, size, verdict, wait_for_done, OpKind, Workload,
};
use crate::pattern::Pattern;
use crate::session::{SessionError, Side};
use crate::validate::{check_footprint, OwnCheck};
use crate::verbs::{Access, BufId, LocalSlice, SendOp, SendWr};

/// The mr-cache workload.
pub struct MrCache;

/// Sizes in the cycle: `size` times 1, 2, 4 and 8.
pub const SIZE_CLASSES: usize = 4;
/// The server's buffer holds one slot per size: 1 + 2 + 4 + 8 times `size`.
pub const SERVER_BUFFER_FACTOR: u64 = 15;
/// The uncached pass writes from pattern streams of its own, so the server's
/// final bytes can only have come from the cached pass.
const UNCACHED_STREAM: u64 = 1 << 62;

/// The sizes of the cycle for a base size.
pub fn size_cycle(base: usize) -> [usize; SIZE_CLASSES] {
    [base, 2 * base, 4 * base, 8 * base]
}

/// Offset of size class `class`'s slot in the server's buffer.
fn slot_offset(base: usize, class: usize) -> usize {
    // 0, 1, 3, 7 times base: each slot follows the previous, smaller one.
    ((1 << class) - 1) * base
}

/// The index of the last op of `class` among `ops` ops cycling through the classes.
fn last_op_of_class(ops: u64, class: usize) -> Option<u64> {
    let class = class as u64;
    (ops > class).then(|| class + (ops - 1 - class) / SIZE_CLASSES as u64 * SIZE_CLASSES as u64)
}

/// A registration cache: a key (here the buffer size) maps to a registration
/// kept from its first use on; counts hits and misses.
#[derive(Debug)]
pub struct RegistrationCache<K, V> {
    entries: BTreeMap<K, V>,
    /// Lookups served from the cache.
    pub hits: u64,
    /// Lookups that had to register.
    pub misses: u64,
}

impl<K: Ord, V: Copy> RegistrationCache<K, V> {
    /// An empty cache.
    pub fn new() -> Self {
        RegistrationCache {
            entries: BTreeMap::new(),
            hits: 0,
            misses: 0,
        }
    }

    /// The registration for `key`: the kept one (a hit), or a new one from
    /// `register` (a miss), which is kept. Returns it and whether it was a hit.
    pub fn get_or_register<E>(&mut self, key: K, register: impl FnOnce() -> Result<V, E>) -> Result<(V, bool), E> {
        if let Some(v) = self.entries.get(&key) {
            self.hits += 1;
            return Ok((*v, true));
        }
        let v = register()?;
        self.misses += 1;
        self.entries.insert(key, v);
        Ok((v, false))
    }

    /// Empties the cache, returning its registrations for deregistration.
    pub fn flush(&mut self) -> Vec<V> {
        std::mem::take(&mut self.entries).into_values().collect()
    }
}

impl<K: Ord, V: Copy> Default for RegistrationCache<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

/// Time spent in the registration calls of one pass.
#[derive(Debug, Default, Clone, Copy)]
struct RegTimes {
    registrations: u64,
    reg: Duration,
    dereg: Duration,
}

impl RegTimes {
    fn register(&mut self, side: &mut Side, buf: BufId) -> Result<(), SessionError> {
        let t = Instant::now();
        side.link.register_buffer(buf)?;
        self.reg += t.elapsed();
        self.registrations += 1;
        Ok(())
    }

    fn deregister(&mut self, side: &mut Side, buf: BufId) {
        let t = Instant::now();
        side.link.deregister_buffer(buf);
        self.dereg += t.elapsed();
    }

    fn total_us(&self) -> f64 {
        (self.reg + self.dereg).as_secs_f64() * 1e6
    }
}

/// The statistics of both passes.
fn stats(
    base: usize,
    ops: u64,
    cache: &RegistrationCache<usize, BufId>,
    cached: RegTimes,
    uncached: RegTimes,
) -> MrCacheStats {
    let saved_us = uncached.total_us() - cached.total_us();
    MrCacheStats {
        sizes: size_cycle(base).iter().map(|s| *s as u64).collect(),
        ops,
        hits: cache.hits,
        misses: cache.misses,
        registrations: cached.registrations,
        uncached_registrations: uncached.registrations,
        cached_reg_us: cached.reg.as_secs_f64() * 1e6,
        cached_dereg_us: cached.dereg.as_secs_f64() * 1e6,
        uncached_reg_us: uncached.reg.as_secs_f64() * 1e6,
        uncached_dereg_us: uncached.dereg.as_secs_f64() * 1e6,
        saved_us,
        saved_pct: if uncached.total_us() > 0.0 {
            100.0 * saved_us / uncached.total_us()
        } else {
            0.0
        },
    }
}

/// WRITEs `len` bytes of `buf` to `remote_offset` in the server's buffer and
/// waits for the completion. The chain is built per use: a registration
/// changes the buffer's lkey.
fn write_and_wait(side: &mut Side, buf: BufId, len: usize, remote_offset: usize, op: u64) -> Result<(), SessionError> {
    let mut chain = side.link.send_chain(&[SendWr {
        wr_id: OpKind::Write.wr_id(op),
        op: SendOp::Write {
            local: LocalSlice { buf, offset: 0, len },
            remote_addr: side.peer.addr + remote_offset as u64,
            rkey: side.peer.rkey,
        },
        signaled: true,
        inline: false,
    }])?;
    side.link.post_send(&mut chain)?;
    side.next_completion("the WRITE completion")?;
    Ok(())
}

fn fill(side: &mut Side, buf: BufId, len: usize, p: Pattern) {
    p.fill(&mut side.link.buffer_mut(buf)[..len], 0);
}

impl Workload for MrCache {
    fn name(&self) -> &'static str {
        "mr-cache"
    }

    fn own_check(&self) -> OwnCheck {
        |params, limits| {
            check_footprint(
                params,
                limits,
                SERVER_BUFFER_FACTOR,
                "mr-cache's server holds a slot per size: 15 x size",
            )
        }
    }

    fn prepare(&self, side: &mut Side) -> Result<(), SessionError> {
        let base = size(&side.params);
        match side.role {
            Role::Server => {
                side.exposed = Some(
                    side.link
                        .add_buffer(base * SERVER_BUFFER_FACTOR as usize, Access::Remote)?,
                );
                post_done_recv(side)
            }
            Role::Client => {
                // One buffer per size, deregistered: each pass registers it
                // itself, and only the passes' registrations are timed.
                for len in size_cycle(base) {
                    let buf = side.link.add_buffer(len, Access::Local)?;
                    side.link.deregister_buffer(buf);
                    side.bufs.push(buf);
                }
                Ok(())
            }
        }
    }

    fn run(&self, side: &mut Side) -> Result<SideResult, SessionError> {
        let base = size(&side.params);
        let ops = iterations(&side.params);
        let p = pattern(&side.params);
        let sizes = size_cycle(base);
        if side.role == Role::Server {
            // One-sided: nothing to do until the done message; sleep for it.
            side.set_passive(true);
            wait_for_done(side)?;
            let exposed = side.exposed.expect("prepared");
            let mut checked = Vec::new();
            let mut problems = Vec::new();
            for (class, len) in sizes.iter().enumerate() {
                let Some(op) = last_op_of_class(ops, class) else {
                    continue;
                };
                let start = slot_offset(base, class);
                let slot = &side.link.buffer(exposed)[start..start + len];
                match p.derive(op).verify(slot, 0) {
                    Ok(()) => checked.push(format!("{len} B (use {op})")),
                    Err(m) => problems.push(format!("the {len} B slot at offset {start} differs from use {op}: {m}")),
                }
            }
            let mut result = side.base_result();
            verdict(
                &mut result,
                if problems.is_empty() {
                    Ok(format!(
                        "each size's slot holds the cached pass's last payload: {}",
                        checked.join(", ")
                    ))
                } else {
                    Err(problems.join("; "))
                },
            );
            return Ok(result);
        }
        let need = (base as u64) * SERVER_BUFFER_FACTOR;
        if side.peer.len < need {
            return Err(SessionError::Protocol(format!(
                "server buffer is {} B, mr-cache needs {need} B (15 x size)",
                side.peer.len
            )));
        }
        let bufs: Vec<BufId> = side.bufs.clone();
        let mut bytes = 0u64;

        // Pass 1, no cache: register, use, deregister, every time.
        let mut uncached = RegTimes::default();
        for op in 0..ops {
            let class = (op % SIZE_CLASSES as u64) as usize;
            let (buf, len) = (bufs[class], sizes[class]);
            uncached.register(side, buf)?;
            fill(side, buf, len, p.derive(UNCACHED_STREAM | op));
            write_and_wait(side, buf, len, slot_offset(base, class), op)?;
            uncached.deregister(side, buf);
            bytes += len as u64;
            side.progress("uncached", bytes, op + 1, format!("{len} B, registered for this use"));
        }

        // Pass 2, through the cache.
        let mut cache: RegistrationCache<usize, BufId> = RegistrationCache::new();
        let mut cached = RegTimes::default();
        for op in 0..ops {
            let class = (op % SIZE_CLASSES as u64) as usize;
            let len = sizes[class];
            let (buf, hit) = cache.get_or_register(len, || {
                cached.register(side, bufs[class])?;
                Ok::<_, SessionError>(bufs[class])
            })?;
            fill(side, buf, len, p.derive(op));
            if op + 1 == ops && injects(side, Fault::Corrupt) {
                // The last use of a size is what the server checks.
                corrupt_byte(side, buf, len / 2, "the last cached use's source");
            }
            write_and_wait(side, buf, len, slot_offset(base, class), ops + op)?;
            bytes += len as u64;
            side.progress(
                "cached",
                bytes,
                ops + op + 1,
                format!("{len} B, cache {}", if hit { "hit" } else { "miss" }),
            );
        }
        for buf in cache.flush() {
            cached.deregister(side, buf);
        }
        side.send_done()?;
        let elapsed = side.elapsed();
        let stats = stats(base, ops, &cache, cached, uncached);
        let mut result = side.base_result();
        result.bytes = bytes;
        result.ops = 2 * ops;
        result.bw = Some(crate::metrics::bandwidth(result.bytes, result.ops, elapsed, &[]));
        result.verify_detail = format!(
            "{} hits, {} misses over {ops} uses; registering took {:.0} us with the cache, {:.0} us without \
             (the server verifies the bytes)",
            stats.hits,
            stats.misses,
            stats.cached_reg_us + stats.cached_dereg_us,
            stats.uncached_reg_us + stats.uncached_dereg_us
        );
        result.mr_cache = Some(stats);
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `ops` lookups of the size cycle through a cache that counts its registrations.
    fn drive(ops: u64) -> (RegistrationCache<usize, usize>, u64) {
        let sizes = size_cycle(4096);
        let mut cache = RegistrationCache::new();
        let mut registrations = 0;
        for op in 0..ops {
            let len = sizes[(op % SIZE_CLASSES as u64) as usize];
            let (v, hit) = cache
                .get_or_register(len, || {
                    registrations += 1;
                    Ok::<_, ()>(len)
                })
                .unwrap();
            assert_eq!(v, len);
            assert_eq!(hit, op >= SIZE_CLASSES as u64, "op {op}");
        }
        (cache, registrations)
    }

    #[test]
    fn test_cycle_is_four_to_thirty_two_kib() {
        assert_eq!(size_cycle(4096), [4096, 8192, 16384, 32768]);
        let ends: Vec<usize> = (0..SIZE_CLASSES)
            .map(|c| slot_offset(4096, c) + size_cycle(4096)[c])
            .collect();
        // Slots are back to back and fill the server's buffer exactly.
        assert_eq!(ends, [4096, 12288, 28672, 61440]);
        assert_eq!(61440, 4096 * SERVER_BUFFER_FACTOR as usize);
    }

    #[test]
    fn test_cache_hits_follow_the_cycle() {
        let (cache, registrations) = drive(40);
        assert_eq!((cache.hits, cache.misses, registrations), (36, 4, 4));
        let (cache, registrations) = drive(10);
        assert_eq!((cache.hits, cache.misses, registrations), (6, 4, 4));
        let (cache, registrations) = drive(3);
        assert_eq!((cache.hits, cache.misses, registrations), (0, 3, 3));
    }

    #[test]
    fn test_flush_returns_every_entry_once_and_empties() {
        let (mut cache, _) = drive(7);
        let mut flushed = cache.flush();
        flushed.sort_unstable();
        assert_eq!(flushed, size_cycle(4096).to_vec());
        assert!(cache.flush().is_empty());
        // After a flush the next lookup registers again.
        let (_, hit) = cache.get_or_register(4096, || Ok::<_, ()>(1)).unwrap();
        assert!(!hit);
    }

    #[test]
    fn test_failed_registration_is_not_cached() {
        let mut cache: RegistrationCache<usize, usize> = RegistrationCache::new();
        assert_eq!(cache.get_or_register(8, || Err("ENOMEM")), Err("ENOMEM"));
        assert_eq!((cache.hits, cache.misses), (0, 0));
        assert_eq!(cache.get_or_register(8, || Ok::<_, &str>(5)), Ok((5, false)));
    }

    #[test]
    fn test_last_op_of_each_class() {
        assert_eq!(last_op_of_class(40, 0), Some(36));
        assert_eq!(last_op_of_class(40, 3), Some(39));
        assert_eq!(last_op_of_class(10, 1), Some(9));
        assert_eq!(last_op_of_class(10, 2), Some(6));
        assert_eq!(last_op_of_class(3, 3), None);
        assert_eq!(last_op_of_class(1, 0), Some(0));
    }

    #[test]
    fn test_saved_time_compares_both_passes() {
        let mut cache: RegistrationCache<usize, BufId> = RegistrationCache::new();
        cache.hits = 36;
        cache.misses = 4;
        let cached = RegTimes {
            registrations: 4,
            reg: Duration::from_micros(40),
            dereg: Duration::from_micros(10),
        };
        let uncached = RegTimes {
            registrations: 40,
            reg: Duration::from_micros(400),
            dereg: Duration::from_micros(100),
        };
        let s = stats(4096, 40, &cache, cached, uncached);
        assert_eq!(
            (s.hits, s.misses, s.registrations, s.uncached_registrations),
            (36, 4, 4, 40)
        );
        assert!((s.saved_us - 450.0).abs() < 1e-6, "{}", s.saved_us);
        assert!((s.saved_pct - 90.0).abs() < 1e-6, "{}", s.saved_pct);
        assert_eq!(s.sizes, vec![4096, 8192, 16384, 32768]);
    }
}
