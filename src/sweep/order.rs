//! The order of runs: of the cells within each round of a boot group ([`RoundDesign`]), of
//! the boot groups within each block of a level ([`block_order`]), and of the levels within
//! each block ([`level_order`]). Round-robin is a balanced design, so no variant is always
//! first (the first run of a round, or the first bring-up of a block, is the one a drifting
//! host or a cold start hits differently) and none always follows the same other; a shuffle is
//! seeded, the same for the same seed, boot group and round (or level and block).

use crate::vocabulary::RunOrder;

/// The order of one boot group's rounds: which of its cells runs when, in each measured round
/// and in the warm-up rounds a fresh guest set gets before the measured round it makes first.
/// The cells are workload-major with `variants` variants per workload (the plan's order); the
/// workloads keep their order, and each workload's variants run in the round's order.
///
/// Round-robin is a Williams design over the variants (Williams 1949; the crossover design of
/// clinical trials): round r runs the variants in row r of a Latin square whose rows are, for
/// `k` variants, the sequence 0, 1, k−1, 2, k−2, … shifted by r (mod k); for odd k the square is
/// followed by its mirror (each row reversed), so the design's period is k rounds for even k
/// and 2k for odd k. Why this and not a plain rotation (round r starts at variant r mod k):
/// both put every variant first — and in every other place of the round — equally often over
/// any k consecutive rounds from round 0 (each square is Latin), but a rotation always runs
/// variant v right after v−1, so whatever one run leaves to the next (the host's state, which
/// correlates between neighbours; what the payload remembers in a guest) lands on the same
/// pair every round. In a Williams design every variant follows every other equally often
/// over one period. The stopping rule looks only where the order is balanced
/// ([`balanced_every`]: every k measured rounds), so at every look each variant has been
/// first equally often and each comparison has seen the baseline in every place alike; for
/// even k each variant has also followed every other alike at every look, for odd k at the
/// looks that are even multiples of k.
///
/// Which variant measured round 0 starts with (`first`) is the plan's ([`super::plan::Plan::
/// round_design`]): the variant after the baseline at the first level, one further at each
/// level, so over the levels the baseline starts a group's first measured round at most 1/k
/// of the time. (That round follows a whole warm-up round on fresh guests, so it is not cold
/// for anyone.) Warm-up rounds are made in the design's rows before the measured round they
/// warm for, so warm-ups and measured rounds read as one walk through the design.
///
/// A shuffle draws each round's order of all its cells at random (seeded): nothing is
/// balanced, nothing is systematic, and the looks are not aligned to rounds
/// (`balanced_every` is 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundDesign {
    pub cells: usize,
    pub variants: usize,
    pub order: RunOrder,
    /// Set when `order` is a shuffle.
    pub seed: Option<u64>,
    /// The boot group's index in the plan (a shuffle mixes it into its seed).
    pub boot: u32,
    /// Round-robin: the variant (its index among the group's) measured round 0 starts with.
    pub first: usize,
}

impl RoundDesign {
    /// Indices of the cells in the order measured round `round` runs them.
    pub fn measured(&self, round: u32) -> Vec<usize> {
        match self.order {
            RunOrder::RoundRobin => self.row(i64::from(round)),
            RunOrder::Shuffle => shuffled(self.cells, self.seed, self.at(round)),
        }
    }

    /// Indices of the cells in the order warm-up round `w` (of `rounds`) runs them on a fresh
    /// guest set whose first measured round is `before`.
    pub fn warm_up(&self, before: u32, w: u32, rounds: u32) -> Vec<usize> {
        match self.order {
            RunOrder::RoundRobin => self.row(i64::from(before) - i64::from(rounds) + i64::from(w)),
            RunOrder::Shuffle => shuffled(self.cells, self.seed.map(|s| s ^ WARM_UP_DOMAIN), self.at(w)),
        }
    }

    /// Round-robin: the cells in row `row` of the design (any integer; the design repeats).
    fn row(&self, row: i64) -> Vec<usize> {
        let k = self.variants.max(1);
        let sequence = williams_row(k, row);
        (0..self.cells)
            .map(|i| {
                let (workload, j) = (i / k, i % k);
                workload * k + (sequence[j] + self.first) % k
            })
            .collect()
    }

    fn at(&self, round: u32) -> u64 {
        (u64::from(self.boot) << 32) | u64::from(round)
    }
}

/// Measured rounds of `variants` variants sharing guests after which `order` has put every
/// variant first (and in every other place of the round) equally often, counted from round 0:
/// the variants' number under round-robin ([`RoundDesign`]), 1 for a shuffle (which balances
/// nothing) or one variant. The looks of `runs: {until: concluded}` fall on multiples of it
/// where `min` and `max` allow ([`super::looks::look_points`]).
pub fn balanced_every(variants: usize, order: RunOrder) -> u32 {
    match order {
        RunOrder::RoundRobin => variants.max(1) as u32,
        RunOrder::Shuffle => 1,
    }
}

/// Row `row` (taken modulo the design's period) of a Williams design for `k` treatments: the
/// sequence 0, 1, k−1, 2, k−2, … shifted by the row (mod k), and for odd k, in rows k..2k, the
/// rows 0..k reversed.
fn williams_row(k: usize, row: i64) -> Vec<usize> {
    let period = if k.is_multiple_of(2) { k } else { 2 * k };
    let r = row.rem_euclid(period.max(1) as i64) as usize;
    let mut sequence: Vec<usize> = (0..k)
        .map(|j| match j {
            0 => 0,
            j if j % 2 == 1 => j.div_ceil(2),
            j => k - j / 2,
        })
        .map(|s| (s + r) % k)
        .collect();
    if r >= k {
        sequence.reverse();
    }
    sequence
}

/// Positions of a level's `groups` boot groups (in plan order) in the order block `block`
/// brings them up: round-robin starts at group `block mod groups`; a shuffle is seeded by the
/// seed, the level's first boot group and the block.
pub fn block_order(
    groups: usize,
    order: RunOrder,
    seed: Option<u64>,
    first_boot: u32,
    block: u32,
) -> Vec<usize> {
    match order {
        RunOrder::RoundRobin => (0..groups)
            .map(|j| (block as usize + j) % groups.max(1))
            .collect(),
        // Kept apart from the rounds' shuffles (which mix boot and round the same way).
        RunOrder::Shuffle => shuffled(
            groups,
            seed.map(|s| s ^ BLOCK_DOMAIN),
            (u64::from(first_boot) << 32) | u64::from(block),
        ),
    }
}

/// Positions of the sweep's `levels` levels (in plan order) in the order their block `block`
/// is made: the plan's order for even blocks, reversed for odd ones (1x 2x, 2x 1x, 1x 2x, …),
/// whatever `schedule.order` says. A host whose speed drifts evenly over the sweep so gives
/// each level the same mean time over every two blocks, and a level's retention does not
/// read the drift as the level's effect (the plan's order of every level to its end did, for
/// every level after the first). Not shuffled: with few levels a shuffle would as often put
/// one level first in every block.
pub fn level_order(levels: usize, block: u32) -> Vec<usize> {
    if block.is_multiple_of(2) {
        (0..levels).collect()
    } else {
        (0..levels).rev().collect()
    }
}

/// Told apart from a round's shuffle seed: a block's shuffle mixes this into the seed.
const BLOCK_DOMAIN: u64 = 0xB10C_B10C_B10C_B10C;

/// Told apart from a measured round's shuffle seed: a warm-up round's mixes this in.
const WARM_UP_DOMAIN: u64 = 0x3A53_3A53_3A53_3A53;

fn shuffled(n: usize, seed: Option<u64>, at: u64) -> Vec<usize> {
    let mut ix: Vec<usize> = (0..n).collect();
    let mixed = seed
        .unwrap_or(0)
        .wrapping_add(at)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    fastrand::Rng::with_seed(mixed).shuffle(&mut ix);
    ix
}

/// A seed for a shuffle the scenario gave none for (recorded in the journal).
pub fn fresh_seed() -> u64 {
    fastrand::u64(..)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn design(cells: usize, variants: usize, first: usize) -> RoundDesign {
        RoundDesign {
            cells,
            variants,
            order: RunOrder::RoundRobin,
            seed: None,
            boot: 0,
            first,
        }
    }

    /// Over each variant, in which place of its rounds it ran, over measured rounds `rounds`
    /// of `d` (one workload): `places[v][p]`.
    fn places(d: &RoundDesign, rounds: std::ops::Range<u32>) -> Vec<Vec<u32>> {
        let mut places = vec![vec![0; d.variants]; d.variants];
        for r in rounds {
            for (p, &c) in d.measured(r).iter().enumerate() {
                places[c][p] += 1;
            }
        }
        places
    }

    /// How often variant `a` ran right before `b` within a round, over rounds `rounds`.
    fn follows(d: &RoundDesign, rounds: std::ops::Range<u32>) -> Vec<Vec<u32>> {
        let mut after = vec![vec![0; d.variants]; d.variants];
        for r in rounds {
            for pair in d.measured(r).windows(2) {
                after[pair[0]][pair[1]] += 1;
            }
        }
        after
    }

    #[test]
    fn williams_rows_are_the_textbook_squares() {
        let rows = |k: usize, n: i64| (0..n).map(|r| williams_row(k, r)).collect::<Vec<_>>();
        assert_eq!(rows(2, 2), [[0, 1], [1, 0]]);
        assert_eq!(
            rows(4, 4),
            [[0, 1, 3, 2], [1, 2, 0, 3], [2, 3, 1, 0], [3, 0, 2, 1]]
        );
        // Odd: the square, then its mirror.
        assert_eq!(
            rows(3, 6),
            [[0, 1, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0], [0, 2, 1], [1, 0, 2]]
        );
        assert_eq!(williams_row(3, 6), williams_row(3, 0), "the design repeats");
        assert_eq!(williams_row(3, -1), williams_row(3, 5));
        assert_eq!(williams_row(1, 7), [0]);
    }

    /// The design's promise: over any whole number of k rounds from round 0 every variant has
    /// been in every place (first included) equally often, whichever variant starts; over one
    /// period every variant has run right after every other equally often.
    #[test]
    fn every_k_rounds_put_each_variant_in_each_place_alike_and_a_period_after_each_other() {
        for k in 1..=10usize {
            for first in 0..k {
                let d = design(k, k, first);
                let every = balanced_every(k, d.order);
                assert_eq!(every as usize, k);
                for n in (1..=3).map(|m| m * every) {
                    let p = places(&d, 0..n);
                    assert!(
                        p.iter().flatten().all(|&x| x == n / every),
                        "k {k} first {first} after {n} rounds: {p:?}"
                    );
                }
                let period = if k % 2 == 0 { k } else { 2 * k } as u32;
                let after = follows(&d, 0..period);
                for (a, row) in after.iter().enumerate() {
                    for (b, &n) in row.iter().enumerate() {
                        let want = if a == b { 0 } else { period / k as u32 };
                        assert_eq!(n, want, "k {k}: {a} before {b}: {after:?}");
                    }
                }
            }
        }
    }

    /// What the Williams design improves on: a rotation runs each variant after the same one.
    #[test]
    fn a_plain_rotation_would_always_follow_the_same_variant() {
        let k = 4;
        let rotation = |r: usize| (0..k).map(|j| (r + j) % k).collect::<Vec<_>>();
        let mut before_baseline = std::collections::BTreeSet::new();
        for r in 0..k {
            let row = rotation(r);
            for pair in row.windows(2).filter(|p| p[1] == 0) {
                before_baseline.insert(pair[0]);
            }
        }
        assert_eq!(before_baseline.len(), 1, "always variant k−1");
        let after = follows(&design(k, k, 0), 0..k as u32);
        assert!((1..k).all(|v| after[v][0] == 1), "{after:?}");
    }

    #[test]
    fn the_workloads_keep_their_order_and_share_each_rounds_variant_order() {
        // Two workloads of three variants: cells 0-2 and 3-5; measured round 0 starts at
        // variant 1.
        let d = design(6, 3, 1);
        assert_eq!(d.measured(0), [1, 2, 0, 4, 5, 3]);
        assert_eq!(d.measured(1), [2, 0, 1, 5, 3, 4]);
        assert_eq!(d.measured(3), [0, 2, 1, 3, 5, 4], "the mirror half");
        // One variant: nothing to order.
        assert_eq!(design(3, 1, 0).measured(5), [0, 1, 2]);
    }

    /// Warm-up rounds are the design's rows before the measured round they warm for.
    #[test]
    fn warm_up_rounds_run_on_into_the_measured_ones() {
        let d = design(4, 4, 1);
        assert_eq!(d.warm_up(0, 0, 1), d.measured(3));
        assert_eq!(d.warm_up(0, 0, 2), d.measured(2));
        assert_eq!(d.warm_up(0, 1, 2), d.measured(3));
        assert_eq!(d.warm_up(6, 0, 1), d.measured(5), "a fresh set mid-sweep");
        let shuffle = RoundDesign {
            order: RunOrder::Shuffle,
            seed: Some(9),
            ..design(20, 2, 0)
        };
        assert_ne!(shuffle.warm_up(0, 0, 1), shuffle.measured(0));
        assert_eq!(balanced_every(2, shuffle.order), 1);
    }

    #[test]
    fn round_robin_blocks_rotate_the_groups() {
        assert_eq!(block_order(2, RunOrder::RoundRobin, None, 4, 0), [0, 1]);
        assert_eq!(block_order(2, RunOrder::RoundRobin, None, 4, 1), [1, 0]);
        assert_eq!(block_order(3, RunOrder::RoundRobin, None, 4, 5), [2, 0, 1]);
        assert_eq!(block_order(1, RunOrder::RoundRobin, None, 0, 3), [0]);
    }

    #[test]
    fn levels_take_turns_in_a_mirrored_order() {
        assert_eq!(level_order(2, 0), [0, 1]);
        assert_eq!(level_order(2, 1), [1, 0]);
        assert_eq!(level_order(3, 2), [0, 1, 2]);
        assert_eq!(level_order(3, 3), [2, 1, 0]);
        // Over each two blocks every level's mean position is the same: an even drift weighs
        // all alike.
        let mean: Vec<usize> = (0..3)
            .map(|l| {
                (0..2)
                    .map(|b| level_order(3, b).iter().position(|&x| x == l).unwrap())
                    .sum()
            })
            .collect();
        assert_eq!(mean, [2, 2, 2]);
    }

    #[test]
    fn shuffles_repeat_per_seed_and_differ_by_round_block_and_seed() {
        let shuffle = |seed: u64, boot: u32| RoundDesign {
            order: RunOrder::Shuffle,
            seed: Some(seed),
            boot,
            ..design(20, 2, 0)
        };
        let a = shuffle(9, 1).measured(2);
        assert_eq!(a, shuffle(9, 1).measured(2));
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..20).collect::<Vec<_>>(), "a permutation");
        assert_ne!(a, shuffle(9, 1).measured(3), "rounds differ");
        assert_ne!(a, shuffle(10, 1).measured(2), "seeds differ");
        assert_ne!(a, shuffle(9, 2).measured(2), "boot groups differ");
        let b = block_order(20, RunOrder::Shuffle, Some(9), 1, 2);
        assert_eq!(b, block_order(20, RunOrder::Shuffle, Some(9), 1, 2));
        assert_ne!(
            b,
            block_order(20, RunOrder::Shuffle, Some(9), 1, 3),
            "blocks differ"
        );
        assert_ne!(b, a, "a block's shuffle is not its round's");
    }
}
