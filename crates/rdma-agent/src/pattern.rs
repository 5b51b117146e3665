//! Seeded, verifiable payload patterns: every byte is a function of (seed,
//! offset), so either side can fill or check any range without sharing data,
//! and a mismatch names its exact offset.

/// A payload pattern derived from a seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pattern {
    seed: u64,
}

/// Where a buffer first differed from its expected pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// Byte offset within the checked range.
    pub offset: usize,
    /// The byte the pattern expects.
    pub expected: u8,
    /// The byte found.
    pub got: u8,
    /// How many bytes differ in total.
    pub differing: usize,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "first difference at offset {} (expected {:#04x}, got {:#04x}); {} bytes differ",
            self.offset, self.expected, self.got, self.differing
        )
    }
}

impl Pattern {
    /// The pattern for `seed`.
    pub fn new(seed: u64) -> Pattern {
        Pattern { seed }
    }

    /// The same family of bytes, for a different stream (e.g. batch `n`).
    pub fn derive(&self, stream: u64) -> Pattern {
        Pattern {
            seed: splitmix64(self.seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        }
    }

    /// The 8 pattern bytes of the 8-byte-aligned word at `word_index`.
    fn word(&self, word_index: u64) -> [u8; 8] {
        splitmix64(self.seed.wrapping_add(word_index.wrapping_mul(0xD1B5_4A32_D192_ED03))).to_le_bytes()
    }

    /// The expected byte at absolute `offset`.
    pub fn byte_at(&self, offset: u64) -> u8 {
        self.word(offset / 8)[(offset % 8) as usize]
    }

    /// Fills `buf` as the range starting at absolute offset `start`.
    pub fn fill(&self, buf: &mut [u8], start: u64) {
        let mut offset = start;
        let mut rest = buf;
        // Unaligned head byte by byte, then whole words.
        while !offset.is_multiple_of(8) && !rest.is_empty() {
            rest[0] = self.byte_at(offset);
            rest = &mut rest[1..];
            offset += 1;
        }
        let mut chunks = rest.chunks_exact_mut(8);
        for chunk in &mut chunks {
            chunk.copy_from_slice(&self.word(offset / 8));
            offset += 8;
        }
        for b in chunks.into_remainder() {
            *b = self.byte_at(offset);
            offset += 1;
        }
    }

    /// Checks `buf` as the range starting at absolute offset `start`.
    pub fn verify(&self, buf: &[u8], start: u64) -> Result<(), Mismatch> {
        let mut first: Option<(usize, u8, u8)> = None;
        let mut differing = 0usize;
        let mut check = |i: usize, expected: u8, got: u8| {
            if got != expected {
                differing += 1;
                first.get_or_insert((i, expected, got));
            }
        };
        // Word by word like `fill` (one hash per 8 bytes, compared as a whole; byte
        // detail only for words that differ): receivers check every message in the
        // data path, on a vCPU they share with rxe's kernel work.
        let head = ((8 - start % 8) % 8).min(buf.len() as u64) as usize;
        for (i, &got) in buf[..head].iter().enumerate() {
            check(i, self.byte_at(start + i as u64), got);
        }
        let mut chunks = buf[head..].chunks_exact(8);
        let mut i = head;
        for chunk in &mut chunks {
            let expected = self.word((start + i as u64) / 8);
            if chunk != expected {
                for (k, (&got, &want)) in chunk.iter().zip(&expected).enumerate() {
                    check(i + k, want, got);
                }
            }
            i += 8;
        }
        for &got in chunks.remainder() {
            check(i, self.byte_at(start + i as u64), got);
            i += 1;
        }
        match first {
            None => Ok(()),
            Some((offset, expected, got)) => Err(Mismatch {
                offset,
                expected,
                got,
                differing,
            }),
        }
    }
}

/// SplitMix64: small, fast, and well mixed; good enough to make a shifted or
/// stale buffer never look right.
fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_then_verify_round_trips_at_any_offset() {
        let p = Pattern::new(42);
        for start in [0u64, 1, 7, 8, 13, 4096] {
            for len in [0usize, 1, 2, 7, 8, 9, 63, 1000] {
                let mut buf = vec![0u8; len];
                p.fill(&mut buf, start);
                assert_eq!(p.verify(&buf, start), Ok(()), "start {start} len {len}");
                for (i, b) in buf.iter().enumerate() {
                    assert_eq!(*b, p.byte_at(start + i as u64));
                }
            }
        }
    }

    #[test]
    fn a_range_filled_in_pieces_equals_one_fill() {
        let p = Pattern::new(7);
        let mut whole = vec![0u8; 100];
        p.fill(&mut whole, 3);
        let mut pieces = vec![0u8; 100];
        let (a, b) = pieces.split_at_mut(37);
        p.fill(a, 3);
        p.fill(b, 40);
        assert_eq!(whole, pieces);
    }

    #[test]
    fn seeds_and_streams_differ() {
        let mut a = vec![0u8; 64];
        let mut b = vec![0u8; 64];
        Pattern::new(1).fill(&mut a, 0);
        Pattern::new(2).fill(&mut b, 0);
        assert_ne!(a, b);
        Pattern::new(1).derive(1).fill(&mut b, 0);
        assert_ne!(a, b);
    }

    #[test]
    fn verify_names_the_first_difference() {
        let p = Pattern::new(9);
        let mut buf = vec![0u8; 32];
        p.fill(&mut buf, 0);
        buf[5] ^= 0xff;
        buf[20] ^= 0x01;
        let m = p.verify(&buf, 0).unwrap_err();
        assert_eq!(m.offset, 5);
        assert_eq!(m.got, p.byte_at(5) ^ 0xff);
        assert_eq!(m.differing, 2);
        assert!(m.to_string().contains("offset 5"));
    }

    #[test]
    fn verify_agrees_with_a_byte_by_byte_check_at_any_alignment() {
        let p = Pattern::new(11);
        for start in [0u64, 3, 8, 13] {
            for len in [0usize, 5, 8, 29, 64] {
                // Corrupt the head, a middle word and the tail (where they exist).
                for flips in [vec![], vec![0], vec![len / 2], vec![0, len / 2, len.saturating_sub(1)]] {
                    let mut buf = vec![0u8; len];
                    p.fill(&mut buf, start);
                    for &f in flips.iter().filter(|&&f| f < len) {
                        buf[f] ^= 0x5a;
                    }
                    let wrong: Vec<usize> = (0..len).filter(|&i| buf[i] != p.byte_at(start + i as u64)).collect();
                    match p.verify(&buf, start) {
                        Ok(()) => assert!(wrong.is_empty(), "start {start} len {len}: missed {wrong:?}"),
                        Err(m) => {
                            assert_eq!(m.offset, wrong[0], "start {start} len {len}");
                            assert_eq!(m.differing, wrong.len());
                            assert_eq!(m.expected, p.byte_at(start + m.offset as u64));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn shifted_data_does_not_verify() {
        let p = Pattern::new(3);
        let mut buf = vec![0u8; 64];
        p.fill(&mut buf, 1);
        assert!(p.verify(&buf, 0).is_err());
    }
}
