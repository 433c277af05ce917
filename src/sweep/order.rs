//! The order of runs: of the cells within each round of a boot group, and of the boot groups
//! within each block of a level. Round-robin rotates, so no variant is always first (the
//! first run of a round, or the first bring-up of a block, is the one a drifting host or a
//! cold start hits differently); a shuffle is seeded, the same for the same seed, boot group
//! and round (or level and block).

use crate::vocabulary::RunOrder;

/// Indices of a boot group's `cells` cells in the order round `round` of boot group `boot`
/// runs them. The cells are workload-major with `variants` variants per workload (the plan's
/// order); round-robin keeps the workloads in order and starts each workload's variants at
/// variant `round mod variants`, so over any `variants` rounds each variant is first once.
pub fn round_order(
    cells: usize,
    variants: usize,
    order: RunOrder,
    seed: Option<u64>,
    boot: u32,
    round: u32,
) -> Vec<usize> {
    match order {
        RunOrder::RoundRobin => {
            let variants = variants.max(1);
            (0..cells)
                .map(|i| {
                    let (workload, j) = (i / variants, i % variants);
                    workload * variants + (round as usize + j) % variants
                })
                .collect()
        }
        RunOrder::Shuffle => shuffled(cells, seed, (u64::from(boot) << 32) | u64::from(round)),
    }
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

/// Told apart from a round's shuffle seed: a block's shuffle mixes this into the seed.
const BLOCK_DOMAIN: u64 = 0xB10C_B10C_B10C_B10C;

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

    #[test]
    fn round_robin_rotates_the_variants_of_each_workload_and_keeps_the_workloads_in_order() {
        // Two workloads of three variants: cells 0-2 and 3-5.
        assert_eq!(
            round_order(6, 3, RunOrder::RoundRobin, None, 0, 0),
            [0, 1, 2, 3, 4, 5]
        );
        assert_eq!(
            round_order(6, 3, RunOrder::RoundRobin, None, 0, 1),
            [1, 2, 0, 4, 5, 3]
        );
        assert_eq!(
            round_order(6, 3, RunOrder::RoundRobin, None, 0, 2),
            [2, 0, 1, 5, 3, 4]
        );
        assert_eq!(
            round_order(6, 3, RunOrder::RoundRobin, None, 7, 3),
            [0, 1, 2, 3, 4, 5]
        );
        // One variant: nothing to rotate.
        assert_eq!(round_order(3, 1, RunOrder::RoundRobin, None, 0, 5), [0, 1, 2]);
    }

    #[test]
    fn round_robin_blocks_rotate_the_groups() {
        assert_eq!(block_order(2, RunOrder::RoundRobin, None, 4, 0), [0, 1]);
        assert_eq!(block_order(2, RunOrder::RoundRobin, None, 4, 1), [1, 0]);
        assert_eq!(block_order(3, RunOrder::RoundRobin, None, 4, 5), [2, 0, 1]);
        assert_eq!(block_order(1, RunOrder::RoundRobin, None, 0, 3), [0]);
    }

    #[test]
    fn shuffles_repeat_per_seed_and_differ_by_round_block_and_seed() {
        let a = round_order(20, 2, RunOrder::Shuffle, Some(9), 1, 2);
        assert_eq!(a, round_order(20, 2, RunOrder::Shuffle, Some(9), 1, 2));
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..20).collect::<Vec<_>>(), "a permutation");
        assert_ne!(
            a,
            round_order(20, 2, RunOrder::Shuffle, Some(9), 1, 3),
            "rounds differ"
        );
        assert_ne!(
            a,
            round_order(20, 2, RunOrder::Shuffle, Some(10), 1, 2),
            "seeds differ"
        );
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
