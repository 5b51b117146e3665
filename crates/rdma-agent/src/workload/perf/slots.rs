//! The slots of write-bw, read-bw and read-lat: every request of a size has
//! a slot of its own, so that each one can be told apart from the others
//! without work in proportion to its bytes. Pure functions over byte
//! slices; the loops that post and poll are elsewhere.
//!
//! A QP (lane) of a size has `per_lane` slots of `size` bytes; request `r`
//! (numbered from 1 on its lane) uses slot `(r - 1) mod per_lane`. There are
//! at least as many slots as requests in flight, so a slot is touched again
//! only once the request that last used it has completed.
//!
//! - write-bw: the client's source holds the run's pattern; request `r`
//!   XORs `r` (little-endian, the slot's first `min(8, size)` bytes) into its
//!   source slot in place of the stamp of the request before it there, and
//!   WRITEs the slot into the same slot of the server's buffer. After the
//!   run the client WRITEs the count it claims for each QP after the slots
//!   ([`counts_offset`]); the server then checks that every slot the counts
//!   cover holds the pattern stamped with the last request counted into it
//!   ([`check_target`]): a lost WRITE among a QP's last `per_lane` shows as
//!   a missing sequence number. XOR rather than overwrite, so a corrupted
//!   source byte stays corrupted under its stamp.
//! - read-bw/read-lat: each READ reads the server's first `size` bytes into
//!   its slot. Before it is posted, the slot's first and last (up to) 8
//!   bytes are set to the complement of what the READ must bring
//!   ([`Sentinels`]); once its completion is seen they must hold the
//!   server's pattern. So every READ is checked for delivery (16 bytes, not
//!   the whole message: full checks of every READ would cost the CPU time
//!   the measurement is of), and the slots hold each QP's last READs in
//!   full for the check after the loop.

use crate::pattern::Pattern;

/// Bytes of one QP's slots at most (as fabric-bw's target).
pub const LANE_SLOT_BYTES: usize = 16 << 20;
/// Bytes of all QPs' slots at most (as send-bw's receive ring).
pub const SLOT_BYTES: usize = 64 << 20;

/// The slots of one size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slots {
    /// Bytes of a slot (the message size).
    pub size: usize,
    /// Slots per QP: a multiple of the post list, so that every full post
    /// list always covers the same slots.
    pub per_lane: usize,
    /// QPs.
    pub lanes: usize,
}

impl Slots {
    /// Enough slots per QP for `depth` requests in flight, posted `list` at a
    /// time, within [`LANE_SLOT_BYTES`] per QP and [`SLOT_BYTES`] in all;
    /// never fewer than one post list (large messages then keep fewer
    /// requests in flight: [`Slots::depth`]).
    pub fn of(size: usize, lanes: usize, depth: usize, list: usize) -> Slots {
        let (size, lanes, list) = (size.max(1), lanes.max(1), list.max(1));
        let fit = LANE_SLOT_BYTES.min(SLOT_BYTES / lanes) / size;
        let lists = depth.max(1).div_ceil(list).min((fit / list).max(1));
        Slots {
            size,
            per_lane: lists * list,
            lanes,
        }
    }

    /// Bytes of every QP's slots.
    pub fn bytes(&self) -> usize {
        self.lanes * self.per_lane * self.size
    }

    /// Requests in flight per QP: `depth`, or fewer when fewer slots fit.
    pub fn depth(&self, depth: usize) -> usize {
        depth.min(self.per_lane)
    }

    /// The slot of request `r` (from 1).
    pub fn slot(&self, r: u64) -> usize {
        ((r.max(1) - 1) % self.per_lane as u64) as usize
    }

    /// Byte offset of request `r` of lane `lane`.
    pub fn offset(&self, lane: usize, r: u64) -> usize {
        (lane * self.per_lane + self.slot(r)) * self.size
    }

    /// The request before `r` in its slot (0: none in this size).
    pub fn previous(&self, r: u64) -> u64 {
        r.saturating_sub(self.per_lane as u64)
    }

    /// Slots a lane of `count` requests used.
    pub fn used(&self, count: u64) -> usize {
        count.min(self.per_lane as u64) as usize
    }

    /// The last of `count` requests that landed in `slot` (`slot < count`).
    pub fn last_into(&self, slot: usize, count: u64) -> u64 {
        let (slot, per) = (slot as u64, self.per_lane as u64);
        slot + 1 + per * ((count - 1 - slot) / per)
    }
}

/// Where write-bw's per-QP counts start: after `slots_len` bytes of slots.
pub fn counts_offset(slots_len: usize) -> usize {
    slots_len.next_multiple_of(8)
}

/// Bytes of a slot of `size` that carry write-bw's stamp (and that
/// read-bw's [`Sentinels`] check at each end).
pub fn stamp_len(size: usize) -> usize {
    size.min(8)
}

/// Turns the stamp in a slot's first bytes from request `from` into request
/// `to` (0: no stamp, the pattern itself).
pub fn restamp(slot_head: &mut [u8], from: u64, to: u64) {
    let mask = (from ^ to).to_le_bytes();
    for (b, m) in slot_head.iter_mut().zip(mask) {
        *b ^= m;
    }
}

/// The per-QP counts as they travel (little-endian u64s).
pub fn encode_counts(counts: &[u64], out: &mut [u8]) {
    for (c, chunk) in counts.iter().zip(out.chunks_exact_mut(8)) {
        chunk.copy_from_slice(&c.to_le_bytes());
    }
}

/// The per-QP counts of `lanes` QPs read back.
pub fn decode_counts(bytes: &[u8], lanes: usize) -> Vec<u64> {
    bytes
        .chunks_exact(8)
        .take(lanes)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

/// write-bw's server: every slot the client's `counts` (one per QP) cover
/// must hold the pattern, at the slot's own offset, stamped with the last
/// request counted into it. The first slot that does not is named: the
/// sequence number it holds and, when that is an earlier request of the
/// same slot, the WRITE that is missing.
pub fn check_target(target: &[u8], slots: &Slots, counts: &[u64], pat: &Pattern) -> Result<(), String> {
    let n = stamp_len(slots.size);
    let mask = if n == 8 { u64::MAX } else { (1u64 << (8 * n)) - 1 };
    for (lane, &count) in counts.iter().enumerate().take(slots.lanes) {
        if count == 0 {
            return Err(format!("QP {lane}: the client counted no WRITEs"));
        }
        for j in 0..slots.used(count) {
            let want = slots.last_into(j, count);
            let off = (lane * slots.per_lane + j) * slots.size;
            let got = &target[off..off + slots.size];
            let mut word = [0u8; 8];
            for (i, w) in word.iter_mut().enumerate().take(n) {
                *w = got[i] ^ pat.byte_at((off + i) as u64);
            }
            let found = u64::from_le_bytes(word);
            let at = format!(
                "QP {lane}, slot {j} (byte {off} of the buffer, {} B WRITEs)",
                slots.size
            );
            if found != want & mask {
                let behind = (want & mask).wrapping_sub(found) & mask;
                let (holds, verdict) = if got.iter().all(|&b| b == 0) {
                    (
                        "nothing (never written)".to_string(),
                        format!("WRITE {want} is missing"),
                    )
                } else if let Some(earlier) = want
                    .checked_sub(behind)
                    .filter(|_| behind != 0 && behind.is_multiple_of(slots.per_lane as u64))
                {
                    (
                        format!("sequence number {earlier}, an earlier WRITE into this slot"),
                        format!("WRITE {want} is missing"),
                    )
                } else {
                    (format!("sequence number {found}"), "its stamp is damaged".to_string())
                };
                return Err(format!(
                    "{at} holds {holds}, expected sequence number {want} (the last of the {count} WRITEs the client counted on QP {lane}): {verdict}"
                ));
            }
            if let Err(m) = pat.verify(&got[n..], (off + n) as u64) {
                let mut m = m;
                m.offset += n;
                return Err(format!("{at}: {m}"));
            }
        }
    }
    Ok(())
}

/// The first and last (up to) 8 bytes a READ of the server's first `size`
/// bytes must bring, and the complement its slot holds until it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sentinels {
    head: [u8; 8],
    tail: [u8; 8],
    n: usize,
    size: usize,
}

/// What a READ's slot showed after its completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Miss {
    /// Both ends still hold what was set before it was posted.
    Nothing,
    /// This byte of the slot differs from the server's pattern.
    Differs {
        /// Offset within the slot.
        offset: usize,
        /// The pattern's byte.
        expected: u8,
        /// The byte found.
        got: u8,
    },
}

impl std::fmt::Display for Miss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Miss::Nothing => write!(
                f,
                "delivered nothing into its slot (its first and last bytes still hold what was set before it was posted)"
            ),
            Miss::Differs { offset, expected, got } => write!(
                f,
                "byte {offset} of its slot is {got:#04x}, the server's pattern has {expected:#04x}"
            ),
        }
    }
}

impl Sentinels {
    /// The ends of a READ of `size` bytes of `pat` from offset 0.
    pub fn of(pat: &Pattern, size: usize) -> Sentinels {
        let size = size.max(1);
        let n = stamp_len(size);
        let (mut head, mut tail) = ([0u8; 8], [0u8; 8]);
        for i in 0..n {
            head[i] = pat.byte_at(i as u64);
            tail[i] = pat.byte_at((size - n + i) as u64);
        }
        Sentinels { head, tail, n, size }
    }

    /// Sets a slot's ends to the complement of what its READ must bring.
    pub fn clear(&self, slot: &mut [u8]) {
        let (n, size) = (self.n, self.size);
        for i in 0..n {
            slot[i] = !self.head[i];
            slot[size - n + i] = !self.tail[i];
        }
    }

    /// Checks a slot's ends after its READ completed.
    pub fn check(&self, slot: &[u8]) -> Result<(), Miss> {
        let (n, size) = (self.n, self.size);
        if slot[..n] == self.head[..n] && slot[size - n..size] == self.tail[..n] {
            return Ok(());
        }
        let untouched = (0..n).all(|i| slot[i] == !self.head[i] && slot[size - n + i] == !self.tail[i]);
        if untouched {
            return Err(Miss::Nothing);
        }
        let ends = (0..n)
            .map(|i| (i, self.head[i]))
            .chain((0..n).map(|i| (size - n + i, self.tail[i])));
        for (offset, expected) in ends {
            if slot[offset] != expected {
                return Err(Miss::Differs {
                    offset,
                    expected,
                    got: slot[offset],
                });
            }
        }
        unreachable!("a slot whose ends match was accepted above")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_cover_the_depth_within_the_byte_budget() {
        // perftest's defaults: 64 KiB, 128 deep, one QP: a slot per request in flight.
        let s = Slots::of(65536, 1, 128, 1);
        assert_eq!((s.per_lane, s.depth(128), s.bytes()), (128, 128, 8 << 20));
        // Large messages keep fewer in flight, within 16 MiB per QP and 64 MiB in all.
        assert_eq!(Slots::of(8 << 20, 1, 128, 1).per_lane, 2);
        assert_eq!(Slots::of(64 << 10, 16, 128, 1).per_lane, 64);
        assert!(Slots::of(1 << 20, 8, 128, 1).bytes() <= SLOT_BYTES);
        // Always a whole number of post lists, at least one, and never fewer than the depth when they fit.
        for (size, lanes, depth, list) in [(2, 1, 7, 3), (4096, 4, 100, 16), (64 << 20, 2, 128, 4), (1, 16, 1, 1)] {
            let s = Slots::of(size, lanes, depth, list);
            assert!(s.per_lane >= list && s.per_lane.is_multiple_of(list), "{s:?}");
            assert!(s.per_lane >= depth || s.per_lane * size > LANE_SLOT_BYTES / 2, "{s:?}");
            assert!(s.depth(depth) <= s.per_lane);
        }
    }

    #[test]
    fn the_last_request_into_each_slot_is_the_one_that_stays() {
        for per_lane in [1usize, 3, 8] {
            let s = Slots::of(1, 1, per_lane, 1);
            assert_eq!(s.per_lane, per_lane);
            for count in 1..30u64 {
                let mut last = vec![0u64; per_lane];
                for r in 1..=count {
                    last[s.slot(r)] = r;
                }
                for (j, &l) in last.iter().enumerate().take(s.used(count)) {
                    assert_eq!(s.last_into(j, count), l, "per_lane {per_lane} count {count} slot {j}");
                    assert_eq!(s.previous(l), l.saturating_sub(per_lane as u64));
                }
            }
        }
    }

    /// A write-bw client and the server's memory, WRITEs applied in order
    /// per QP; `lost` WRITEs never reach the server.
    fn run_writes(s: &Slots, counts: &[u64], pat: &Pattern, lost: &[(usize, u64)]) -> (Vec<u8>, Vec<u8>) {
        let mut source = vec![0u8; s.bytes()];
        pat.fill(&mut source, 0);
        let before = source.clone();
        let mut target = vec![0u8; s.bytes()];
        for (lane, &count) in counts.iter().enumerate() {
            for r in 1..=count {
                let off = s.offset(lane, r);
                restamp(&mut source[off..off + stamp_len(s.size)], s.previous(r), r);
                if !lost.contains(&(lane, r)) {
                    target[off..off + s.size].copy_from_slice(&source[off..off + s.size]);
                }
            }
            for j in 0..s.used(count) {
                let off = (lane * s.per_lane + j) * s.size;
                restamp(&mut source[off..off + stamp_len(s.size)], s.last_into(j, count), 0);
            }
        }
        assert_eq!(source, before, "the source slots lose their stamps after the size");
        (source, target)
    }

    #[test]
    fn write_slots_verify_when_every_write_arrived() {
        let pat = Pattern::new(11);
        for (size, lanes, depth, counts) in [
            (4096, 1, 128, vec![300u64]),
            (4096, 1, 128, vec![5]),
            (3, 2, 4, vec![9, 2]),
            (1, 1, 8, vec![1000]),
            (100, 3, 16, vec![16, 17, 48]),
        ] {
            let s = Slots::of(size, lanes, depth, 1);
            let (_, target) = run_writes(&s, &counts, &pat, &[]);
            assert_eq!(check_target(&target, &s, &counts, &pat), Ok(()), "{s:?} {counts:?}");
        }
    }

    #[test]
    fn a_lost_write_among_the_last_slots_is_a_missing_sequence_number() {
        let pat = Pattern::new(5);
        let s = Slots::of(4096, 2, 128, 1);
        let counts = [300u64, 300];
        // WRITE 250 of QP 1 lands in slot 121 and is the last there; 122 held it before.
        let (_, target) = run_writes(&s, &counts, &pat, &[(1, 250)]);
        let err = check_target(&target, &s, &counts, &pat).unwrap_err();
        assert!(
            err.contains("QP 1, slot 121")
                && err.contains("holds sequence number 122, an earlier WRITE into this slot")
                && err.contains("WRITE 250 is missing"),
            "{err}"
        );
    }

    #[test]
    fn a_count_one_above_the_writes_is_caught_as_the_fault_skip_claims_it() {
        let pat = Pattern::new(9);
        let s = Slots::of(4096, 1, 128, 1);
        // More WRITEs than slots: every slot rewritten, only the stamps tell.
        let (_, target) = run_writes(&s, &[200], &pat, &[]);
        let err = check_target(&target, &s, &[201], &pat).unwrap_err();
        assert!(
            err.contains("holds sequence number 73") && err.contains("WRITE 201 is missing"),
            "{err}"
        );
        // Fewer WRITEs than slots: the claimed one's slot was never written.
        let (_, target) = run_writes(&s, &[20], &pat, &[]);
        let err = check_target(&target, &s, &[21], &pat).unwrap_err();
        assert!(
            err.contains("nothing (never written)") && err.contains("WRITE 21 is missing"),
            "{err}"
        );
        assert!(check_target(&target, &s, &[0], &pat)
            .unwrap_err()
            .contains("counted no WRITEs"));
    }

    #[test]
    fn a_corrupted_source_byte_survives_the_stamps() {
        let pat = Pattern::new(3);
        let s = Slots::of(64, 1, 16, 1);
        for (byte, needle) in [(0usize, "its stamp is damaged"), (9, "first difference at offset 9")] {
            let mut source = vec![0u8; s.bytes()];
            pat.fill(&mut source, 0);
            source[byte] ^= 0xFF;
            let mut target = vec![0u8; s.bytes()];
            for r in 1..=40u64 {
                let off = s.offset(0, r);
                restamp(&mut source[off..off + 8], s.previous(r), r);
                target[off..off + 64].copy_from_slice(&source[off..off + 64]);
            }
            let err = check_target(&target, &s, &[40], &pat).unwrap_err();
            assert!(
                err.contains("QP 0, slot 0") && err.contains(needle),
                "byte {byte}: {err}"
            );
        }
    }

    #[test]
    fn counts_round_trip() {
        let mut bytes = [0u8; 24];
        encode_counts(&[1, u64::MAX, 300], &mut bytes);
        assert_eq!(decode_counts(&bytes, 3), [1, u64::MAX, 300]);
        assert_eq!(decode_counts(&bytes, 2), [1, u64::MAX]);
    }

    #[test]
    fn sentinels_tell_a_delivered_read_from_one_that_brought_nothing() {
        let pat = Pattern::new(21);
        for size in [1usize, 2, 7, 8, 9, 15, 16, 17, 4096] {
            let ends = Sentinels::of(&pat, size);
            let mut slot = vec![0u8; size];
            pat.fill(&mut slot, 0);
            assert_eq!(ends.check(&slot), Ok(()), "size {size}");
            ends.clear(&mut slot);
            assert_eq!(ends.check(&slot), Err(Miss::Nothing), "size {size}");
            // Delivered, but not the server's bytes.
            pat.fill(&mut slot, 0);
            slot[size - 1] ^= 0x10;
            assert!(
                matches!(ends.check(&slot), Err(Miss::Differs { offset, .. }) if offset == size - 1),
                "size {size}"
            );
        }
    }

    /// The failure the final-contents check let through: a run of READs
    /// into one buffer where only the first delivered.
    #[test]
    fn a_read_after_the_first_that_delivered_nothing_is_caught() {
        let pat = Pattern::new(4);
        let size = 64;
        let ends = Sentinels::of(&pat, size);
        let mut sink = vec![0u8; size];
        let mut first_miss = None;
        for r in 1..=10u64 {
            ends.clear(&mut sink);
            if r == 1 {
                pat.fill(&mut sink, 0);
            }
            if let Err(m) = ends.check(&sink) {
                first_miss.get_or_insert((r, m));
            }
        }
        assert_eq!(first_miss, Some((2, Miss::Nothing)));
        // Without the clearing, the buffer's final contents look right.
        let mut stale = vec![0u8; size];
        pat.fill(&mut stale, 0);
        assert_eq!(pat.verify(&stale, 0), Ok(()));
        assert!(Miss::Nothing.to_string().contains("delivered nothing"));
    }
}
