//! What every rank of a collective holds before and after an operation:
//! each rank's input is a deterministic function of (seed, rank, element),
//! float32 values that are small integers, so every sum of up to 16 ranks is
//! exact and the expected result of any element is known without asking
//! another rank. Pure functions: the data path fills and checks with them,
//! the unit tests run them without a device.

use workload_catalogue::Collective;

/// Bytes per element (float32).
pub const ELEMENT: usize = 4;

/// Input values stay below this; with at most 16 ranks every sum is below
/// 2^13, far inside float32's exact integers (2^24).
const VALUE_SPAN: u64 = 251;

/// The shape of one operation: which collective, how many ranks, which one
/// is the root, and how many elements each rank's buffer has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpShape {
    /// The operation.
    pub op: Collective,
    /// Ranks taking part.
    pub world: usize,
    /// The broadcast's source, the incast's and the reduce's sink.
    pub root: usize,
    /// Elements of the operation's size (see [`elements_of`]).
    pub count: usize,
}

/// The elements an operation of `size` bytes moves: size / 4, and for
/// alltoall rounded down to a multiple of the ranks (equal blocks, as
/// nccl-tests and MPI_Alltoall have them).
pub fn elements_of(op: Collective, size: u64, world: usize) -> usize {
    let count = (size / ELEMENT as u64) as usize;
    match op {
        Collective::Alltoall => count / world * world,
        _ => count,
    }
}

impl OpShape {
    /// Element range of chunk `i` of `n`: [i*count/n, (i+1)*count/n). Chunks
    /// differ by at most one element when count is not a multiple of n.
    pub fn chunk(&self, i: usize) -> std::ops::Range<usize> {
        let n = self.world;
        (i * self.count / n)..((i + 1) * self.count / n)
    }

    /// The chunk holding element `e`.
    pub fn chunk_of(&self, e: usize) -> usize {
        // The chunk boundaries are floor(i*count/n); search the few candidates.
        let guess = e * self.world / self.count.max(1);
        (guess.saturating_sub(1)..self.world)
            .find(|&i| self.chunk(i).contains(&e))
            .unwrap_or(self.world - 1)
    }

    /// Elements of alltoall's equal blocks.
    pub fn block(&self) -> usize {
        self.count / self.world
    }

    /// The elements of this rank's result that are checked: all of them,
    /// its own chunk for reduce-scatter, nothing on an incast's or a
    /// reduce's sender.
    pub fn checked_range(&self, rank: usize) -> std::ops::Range<usize> {
        match self.op {
            Collective::ReduceScatter => self.chunk(rank),
            Collective::Incast | Collective::Reduce if rank != self.root => 0..0,
            Collective::Incast => 0..self.count * self.world,
            _ => 0..self.count,
        }
    }

    /// The value element `e` of `rank`'s result must hold.
    pub fn expected(&self, seed: u64, rank: usize, e: usize) -> f32 {
        let sum = |e: usize| -> f32 { (0..self.world).map(|q| input_value(seed, q, e) as u32).sum::<u32>() as f32 };
        match self.op {
            Collective::Allreduce | Collective::ReduceScatter | Collective::Reduce => sum(e),
            Collective::Allgather => input_value(seed, self.chunk_of(e), e),
            Collective::Alltoall => {
                let b = self.block();
                let (from, k) = (e / b, e % b);
                input_value(seed, from, rank * b + k)
            }
            Collective::Broadcast => input_value(seed, self.root, e),
            // The root's output holds one region of `count` per rank, the
            // root's own left untouched (poisoned) and not checked.
            Collective::Incast => input_value(seed, e / self.count, e % self.count),
        }
    }
}

/// Element `e` of `rank`'s input: a small integer as float32.
pub fn input_value(seed: u64, rank: usize, e: usize) -> f32 {
    let mut z = seed ^ (e as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    // The rank's share keeps each rank's values apart, so a block that
    // lands at another rank's place is caught too.
    ((z % VALUE_SPAN) + 7 * rank as u64) as f32
}

/// Writes `rank`'s input elements `range` into `out` (4 bytes each, native order).
pub fn fill_input(out: &mut [u8], seed: u64, rank: usize, range: std::ops::Range<usize>) {
    for (chunk, e) in out.chunks_exact_mut(ELEMENT).zip(range) {
        chunk.copy_from_slice(&input_value(seed, rank, e).to_ne_bytes());
    }
}

/// The float32 at element `e` of `bytes`.
pub fn element(bytes: &[u8], e: usize) -> f32 {
    f32::from_ne_bytes(bytes[e * ELEMENT..(e + 1) * ELEMENT].try_into().expect("4 bytes"))
}

/// `acc[i] = a[i] + b[i]` over float32 elements (a reduction step).
pub fn add_into(acc: &mut [u8], a: &[u8], b: &[u8]) {
    for ((o, x), y) in acc
        .chunks_exact_mut(ELEMENT)
        .zip(a.chunks_exact(ELEMENT))
        .zip(b.chunks_exact(ELEMENT))
    {
        let s = f32::from_ne_bytes(x.try_into().expect("4 bytes")) + f32::from_ne_bytes(y.try_into().expect("4 bytes"));
        o.copy_from_slice(&s.to_ne_bytes());
    }
}

/// `acc[i] += b[i]` over float32 elements.
pub fn add_assign(acc: &mut [u8], b: &[u8]) {
    for (o, y) in acc.chunks_exact_mut(ELEMENT).zip(b.chunks_exact(ELEMENT)) {
        let s =
            f32::from_ne_bytes((&*o).try_into().expect("4 bytes")) + f32::from_ne_bytes(y.try_into().expect("4 bytes"));
        o.copy_from_slice(&s.to_ne_bytes());
    }
}

/// The first wrong element of a result: where, what was expected, what was there.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Wrong {
    /// Element index in the rank's output.
    pub element: usize,
    /// The value it should hold.
    pub expected: f32,
    /// The value it held.
    pub found: f32,
}

/// Checks `rank`'s output; returns how many elements were checked, how many
/// were wrong, and the first wrong one.
pub fn check(shape: &OpShape, seed: u64, rank: usize, output: &[u8]) -> (u64, u64, Option<Wrong>) {
    let range = shape.checked_range(rank);
    let mut wrong = 0u64;
    let mut first = None;
    for e in range.clone() {
        if shape.op == Collective::Incast && e / shape.count == shape.root {
            continue;
        }
        let found = element(output, e);
        let expected = shape.expected(seed, rank, e);
        // Bit equality: every value is an exact integer, and a NaN (the
        // poison left where nothing arrived) equals nothing.
        if found.to_bits() != expected.to_bits() {
            wrong += 1;
            first.get_or_insert(Wrong {
                element: e,
                expected,
                found,
            });
        }
    }
    let checked = match shape.op {
        Collective::Incast if rank == shape.root => (range.len() - shape.count) as u64,
        _ => range.len() as u64,
    };
    (checked, wrong, first)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(op: Collective, world: usize, count: usize) -> OpShape {
        OpShape {
            op,
            world,
            root: 1 % world,
            count,
        }
    }

    /// Computes every rank's result the slow way, from the definition.
    fn reference(s: &OpShape, seed: u64) -> Vec<Vec<u8>> {
        let input = |q: usize| -> Vec<u8> {
            let mut v = vec![0u8; s.count * ELEMENT];
            fill_input(&mut v, seed, q, 0..s.count);
            v
        };
        let inputs: Vec<Vec<u8>> = (0..s.world).map(input).collect();
        let mut sum = vec![0u8; s.count * ELEMENT];
        for q in &inputs {
            let prev = sum.clone();
            add_into(&mut sum, &prev, q);
        }
        (0..s.world)
            .map(|r| match s.op {
                Collective::Allreduce => sum.clone(),
                Collective::ReduceScatter => {
                    let mut out = vec![0xFFu8; s.count * ELEMENT];
                    let c = s.chunk(r);
                    out[c.start * ELEMENT..c.end * ELEMENT].copy_from_slice(&sum[c.start * ELEMENT..c.end * ELEMENT]);
                    out
                }
                Collective::Allgather => {
                    let mut out = vec![0u8; s.count * ELEMENT];
                    for (q, input) in inputs.iter().enumerate() {
                        let c = s.chunk(q);
                        out[c.start * ELEMENT..c.end * ELEMENT]
                            .copy_from_slice(&input[c.start * ELEMENT..c.end * ELEMENT]);
                    }
                    out
                }
                Collective::Alltoall => {
                    let b = s.block();
                    let mut out = vec![0u8; s.count * ELEMENT];
                    for q in 0..s.world {
                        out[q * b * ELEMENT..(q + 1) * b * ELEMENT]
                            .copy_from_slice(&inputs[q][r * b * ELEMENT..(r + 1) * b * ELEMENT]);
                    }
                    out
                }
                Collective::Reduce if r == s.root => sum.clone(),
                Collective::Reduce => vec![0xFFu8; s.count * ELEMENT],
                Collective::Broadcast => inputs[s.root].clone(),
                Collective::Incast => {
                    let mut out = vec![0xFFu8; s.count * s.world * ELEMENT];
                    if r == s.root {
                        for q in (0..s.world).filter(|q| *q != s.root) {
                            out[q * s.count * ELEMENT..(q + 1) * s.count * ELEMENT].copy_from_slice(&inputs[q]);
                        }
                    }
                    out
                }
            })
            .collect()
    }

    /// Every collective of the catalogue.
    fn all() -> impl Iterator<Item = Collective> {
        workload_catalogue::CATALOGUE
            .iter()
            .filter_map(|w| w.shape.collective())
    }

    #[test]
    fn test_expected_values_match_the_definition_of_each_collective() {
        for op in all() {
            for world in [2, 3, 4, 7, 16] {
                for count in [1usize, 5, 64, 1001] {
                    let count = elements_of(op, (count * ELEMENT) as u64, world);
                    if count == 0 {
                        continue;
                    }
                    let s = shape(op, world, count);
                    for (r, out) in reference(&s, 42).iter().enumerate() {
                        let (checked, wrong, first) = check(&s, 42, r, out);
                        assert_eq!((wrong, first), (0, None), "{op:?} world {world} count {count} rank {r}");
                        // Every rank that holds part of a result checks it all.
                        assert_eq!(
                            checked as usize,
                            s.checked_range(r).len()
                                - if op == Collective::Incast && r == s.root {
                                    count
                                } else {
                                    0
                                },
                            "{op:?} rank {r}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn test_a_wrong_element_is_named_with_expected_and_found() {
        let s = shape(Collective::Allreduce, 4, 1001);
        let mut out = reference(&s, 7).remove(2);
        let e = 517;
        let good = element(&out, e);
        out[e * ELEMENT..(e + 1) * ELEMENT].copy_from_slice(&(good + 1.0).to_ne_bytes());
        let (checked, wrong, first) = check(&s, 7, 2, &out);
        assert_eq!((checked, wrong), (1001, 1));
        assert_eq!(
            first,
            Some(Wrong {
                element: e,
                expected: good,
                found: good + 1.0
            })
        );
        // Poison (all ones: NaN) where nothing arrived is wrong too.
        out[..8].fill(0xFF);
        assert_eq!(check(&s, 7, 2, &out).1, 3);
    }

    #[test]
    fn test_sums_of_sixteen_ranks_are_exact_and_ranks_differ() {
        for e in 0..1000 {
            let total: f64 = (0..16).map(|q| f64::from(input_value(9, q, e))).sum();
            assert!(total < f64::from(1u32 << 24));
            assert_ne!(input_value(9, 0, e), input_value(9, 1, e));
        }
    }

    #[test]
    fn test_chunks_cover_every_element_once() {
        for world in 2..=16 {
            for count in [1usize, 3, 15, 16, 17, 1001] {
                let s = shape(Collective::Allreduce, world, count);
                let mut next = 0;
                for i in 0..world {
                    let c = s.chunk(i);
                    assert_eq!(c.start, next);
                    next = c.end;
                    for e in c {
                        assert_eq!(s.chunk_of(e), i, "world {world} count {count} e {e}");
                    }
                }
                assert_eq!(next, count);
            }
        }
    }
}
