//! When a cell has enough runs: one pure rule, given the settled valid values of the cells
//! involved (the cell's own, and the baseline's at the same level), used by the scheduler
//! (and, across hosts, by whoever pools their results).
//!
//! A cell always makes `min` runs and never more than `max`. Between the two, with a CV
//! target it stops once its own CV is at or below it; with a detectable-effect target once a
//! two-sided Welch test (α = 0.05, power 0.8) against the baseline would detect an effect of
//! that size ([`crate::stats::power`]): "a 5 % difference would show". The baseline cell is
//! judged against a copy of itself (the most it can contribute to any comparison). Both
//! targets given: both must be met.

use crate::stats::compare::DEFAULT_ALPHA;
use crate::stats::power::{DEFAULT_POWER, mde_of_samples};
use crate::stats::summary::cv_reached;

/// How many runs a cell makes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StopRule {
    /// Measured runs always made.
    pub min: u32,
    /// Most measured runs.
    pub max: u32,
    /// Stop once the cell's coefficient of variation is at or below this fraction.
    pub target_cv: Option<f64>,
    /// Stop once an effect of this fraction of the baseline mean is detectable.
    pub target_mde: Option<f64>,
}

/// Whether a cell that has passed `measured` run slots (failed ones included) needs no more:
/// `own` are its valid values so far, `baseline` the baseline cell's at the same level (`None`
/// for the baseline cell itself).
pub fn enough(rule: &StopRule, measured: u32, own: &[f64], baseline: Option<&[f64]>) -> bool {
    if measured >= rule.max {
        return true;
    }
    if measured < rule.min {
        return false;
    }
    let cv_ok = rule.target_cv.is_none_or(|cv| cv_reached(own, cv));
    let mde_ok = rule.target_mde.is_none_or(|target| {
        mde_of_samples(baseline.unwrap_or(own), own, DEFAULT_ALPHA, DEFAULT_POWER)
            .is_some_and(|d| d.mde <= target)
    });
    cv_ok && mde_ok
}

/// The value of one block of a cell's runs made on one bring-up (guests of their own): the
/// geometric mean of its runs' values, the unit a comparison across bring-ups pairs (block k
/// of a variant with block k of the baseline), so a block of many runs weighs as one
/// replicate of what varies between boots. The arithmetic mean where a value is not positive
/// (no geometric mean exists); None for a block with no valid run.
pub fn block_value(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let n = values.len() as f64;
    Some(if values.iter().all(|&v| v > 0.0) {
        (values.iter().map(|v| v.ln()).sum::<f64>() / n).exp()
    } else {
        values.iter().sum::<f64>() / n
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(target_cv: Option<f64>, target_mde: Option<f64>) -> StopRule {
        StopRule {
            min: 3,
            max: 10,
            target_cv,
            target_mde,
        }
    }

    #[test]
    fn counts_bound_every_rule() {
        let r = rule(None, None);
        assert!(!enough(&r, 2, &[1.0, 1.0], None));
        assert!(enough(&r, 3, &[1.0, 1.0, 1.0], None));
        // At max a cell stops whatever its spread.
        let r = rule(Some(0.01), Some(0.01));
        assert!(enough(&r, 10, &[1.0, 5.0], None));
        assert!(!enough(&r, 9, &[1.0, 5.0], None));
    }

    #[test]
    fn a_blocks_value_is_the_geometric_mean_of_its_runs() {
        assert_eq!(block_value(&[]), None);
        assert!((block_value(&[5.0]).unwrap() - 5.0).abs() < 1e-12);
        let v = block_value(&[2.0, 8.0]).unwrap();
        assert!((v - 4.0).abs() < 1e-12, "{v}");
        assert_eq!(
            block_value(&[0.0, 2.0]),
            Some(1.0),
            "no geometric mean with a zero"
        );
    }

    #[test]
    fn a_detectable_effect_target_needs_enough_runs_for_the_spread() {
        let r = rule(None, Some(0.05));
        // CV 1 %: three runs a side detect far less than 5 % (statsmodels: d = 3.07 at n = 3,
        // i.e. 3.07 × 1 % ≈ 3.1 %).
        let steady = [100.0, 101.0, 99.0];
        assert!(enough(&r, 3, &steady, None));
        assert!(enough(&r, 3, &steady, Some(&[100.5, 101.5, 99.5])));
        // CV 10 %: 3.07 × 10 % ≈ 31 % at n = 3 — more runs.
        let noisy = [100.0, 110.0, 90.0];
        assert!(!enough(&r, 3, &noisy, None));
        // A steady cell against a noisy baseline cannot show 5 % either.
        assert!(!enough(&r, 3, &steady, Some(&noisy)));
        // One value of the baseline: nothing is detectable yet.
        assert!(!enough(&r, 3, &steady, Some(&[100.0])));
        // Both targets: both must hold (CV 1 % > 0.5 %).
        assert!(!enough(&rule(Some(0.005), Some(0.05)), 3, &steady, None));
    }
}
