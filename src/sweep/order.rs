//! The order of cells within each round of a boot group: round-robin, or a seeded shuffle that
//! is the same for the same seed, boot group and round.

use crate::vocabulary::RunOrder;

/// Indices of `cells` cells in the order round `round` of boot group `boot` runs them.
pub fn round_order(cells: usize, order: RunOrder, seed: Option<u64>, boot: u32, round: u32) -> Vec<usize> {
    let mut ix: Vec<usize> = (0..cells).collect();
    if order == RunOrder::Shuffle {
        let mixed = seed
            .unwrap_or(0)
            .wrapping_add((u64::from(boot) << 32) | u64::from(round))
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        fastrand::Rng::with_seed(mixed).shuffle(&mut ix);
    }
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
    fn round_robin_keeps_plan_order_and_shuffles_repeat_per_seed() {
        assert_eq!(round_order(4, RunOrder::RoundRobin, None, 0, 3), [0, 1, 2, 3]);
        let a = round_order(20, RunOrder::Shuffle, Some(9), 1, 2);
        assert_eq!(a, round_order(20, RunOrder::Shuffle, Some(9), 1, 2));
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..20).collect::<Vec<_>>(), "a permutation");
        assert_ne!(
            a,
            round_order(20, RunOrder::Shuffle, Some(9), 1, 3),
            "rounds differ"
        );
        assert_ne!(
            a,
            round_order(20, RunOrder::Shuffle, Some(10), 1, 2),
            "seeds differ"
        );
    }
}
