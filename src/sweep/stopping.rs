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
use crate::stats::effect::{Sample, compare};
use crate::stats::power::{DEFAULT_POWER, mde_of_samples};
use crate::stats::summary::cv_reached;

/// `runs: {until: concluded, min, max}`: a comparison stops once the report's own rule
/// concludes it — its interval over the units the design replicated ([`compare`]) shows a
/// ratio of 1 excluded (`differs`) or the ratio inside 1 ± margin (`equivalent`) — at a
/// level strict enough for every look and every comparison at once: α / (family × looks),
/// Bonferroni over the report's family of comparisons and over the run counts at which the
/// rule looks ([`look_points`]: `min`, then about 1.5× the last, and `max`). Bonferroni's
/// test rejecting implies Holm's does, so a comparison stopped as concluded is concluded in
/// the report, whose p values are
/// multiplied by the same number of looks ([`looks`]): a small SD seen by luck at an early
/// look stops nothing that the report would not stand by, and the family's chance of one
/// false conclusion stays within α however many looks were taken.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Concluded {
    /// The level each look tests at.
    pub alpha: f64,
    /// Equivalence margin (the report's).
    pub margin: f64,
}

impl Concluded {
    /// The rule for a sweep whose report compares `family` pairs, each looked at up to
    /// `looks` times.
    pub fn new(family: usize, looks: u32, margin: f64) -> Self {
        Self {
            alpha: DEFAULT_ALPHA / (family.max(1) as f64 * f64::from(looks.max(1))),
            margin,
        }
    }

    /// Whether the comparison of `variant` with `base` (valid results so far, where the
    /// design put them) is concluded either way.
    pub fn reached(&self, base: &[Sample], variant: &[Sample]) -> bool {
        compare(base, variant, self.margin).is_ok_and(|e| e.p < self.alpha || e.p_equivalent < self.alpha)
    }
}

/// How much each look's run count grows over the last one's. Every look costs the rule its
/// share of α, so looking after every run (10 looks for 3 to 12 runs) tests each at α/10;
/// looking at 3, 5, 8 and 12 runs tests each at α/4, and loses little: a comparison that
/// concludes at 6 runs concludes at 8.
const LOOK_GROWTH: f64 = 1.5;

/// The run counts at which `runs: {until: concluded, min, max}` looks: `min`, then each about
/// [`LOOK_GROWTH`]× the last (rounded up, at least one more), and `max` — 3, 5, 8, 12 for 3 to
/// 12. (Where blocks must stay whole a look waits for the next block's end; a look point
/// never gives more than one look.)
pub fn look_points(min: u32, max: u32) -> Vec<u32> {
    let mut points = vec![min.min(max)];
    while let Some(&last) = points.last().filter(|&&l| l < max) {
        let next = (f64::from(last) * LOOK_GROWTH).ceil() as u32;
        points.push(next.max(last + 1).min(max));
    }
    points
}

/// How many looks a rule of `min` to `max` runs takes at most ([`look_points`]): what its α
/// and the report's p values are corrected for.
pub fn looks(min: u32, max: u32) -> u32 {
    look_points(min, max).len() as u32
}

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

    /// One round of a shared-guests sweep: baseline and variant measured in the same guests.
    fn round(run: u32, value: f64) -> Sample<'static> {
        Sample {
            value,
            run,
            host: None,
            boot: 0,
            bring_up: 1,
            block: 0,
        }
    }

    /// Standard normal draws (Box-Muller) from a seeded generator.
    fn normal(rng: &mut fastrand::Rng) -> f64 {
        let (u, v) = (1.0 - rng.f64(), rng.f64());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// Runs `sequences` simulated comparisons of a variant `effect`× the baseline, each round's
    /// values log-normal with spread `sd` (and a round effect both sides share), looking with
    /// `rule` after each round count in `points` (the last of them is the most); returns how
    /// many stopped on `differs`, on `equivalent`, and the rounds all of them took.
    fn simulate(rule: &Concluded, effect: f64, sd: f64, points: &[u32], sequences: u32) -> (u32, u32, u32) {
        let max = *points.last().unwrap();
        let mut rng = fastrand::Rng::with_seed(33);
        let (mut differs, mut equivalent, mut rounds) = (0, 0, 0);
        for _ in 0..sequences {
            let (mut base, mut variant) = (Vec::new(), Vec::new());
            for r in 0..max {
                let shared = 100.0 * (0.1 * normal(&mut rng)).exp();
                base.push(round(r, shared * (sd * normal(&mut rng)).exp()));
                variant.push(round(r, effect * shared * (sd * normal(&mut rng)).exp()));
                let n = r + 1;
                if !points.contains(&n) {
                    continue;
                }
                let e = compare(&base, &variant, rule.margin).unwrap();
                if e.p < rule.alpha {
                    differs += 1;
                } else if e.p_equivalent < rule.alpha {
                    equivalent += 1;
                } else if n < max {
                    continue;
                }
                rounds += n;
                break;
            }
        }
        (differs, equivalent, rounds)
    }

    #[test]
    fn looks_grow_by_half_from_min_to_max() {
        assert_eq!(look_points(3, 12), [3, 5, 8, 12]);
        assert_eq!(look_points(3, 8), [3, 5, 8]);
        assert_eq!(look_points(1, 4), [1, 2, 3, 4]);
        assert_eq!(look_points(5, 5), [5]);
        assert_eq!(looks(3, 20), 6, "{:?}", look_points(3, 20));
    }

    /// The rule's point: looking again as runs come in must not turn noise into `differs`. On
    /// 2000 simulated A/A comparisons (spread 3 % a run, looks at 3, 5, 8, 12) the corrected
    /// rule concludes `differs` in under α = 5 % of them, where an uncorrected α looking after
    /// every round concludes it several times as often; and a real 10 % effect is still found.
    #[test]
    fn looking_again_keeps_false_differences_within_alpha() {
        let (min, max, n) = (3, 12, 2000);
        let corrected = Concluded::new(1, looks(min, max), 0.05);
        assert!((corrected.alpha - 0.0125).abs() < 1e-12);
        let naive = Concluded {
            alpha: DEFAULT_ALPHA,
            margin: 0.05,
        };
        let points = look_points(min, max);
        let every: Vec<u32> = (min..=max).collect();
        let (false_differs, equivalent, _) = simulate(&corrected, 1.0, 0.03, &points, n);
        let (naive_differs, _, _) = simulate(&naive, 1.0, 0.03, &every, n);
        let rate = f64::from(false_differs) / f64::from(n);
        let naive_rate = f64::from(naive_differs) / f64::from(n);
        eprintln!("A/A: corrected {rate:.4} differs ({equivalent} equivalent), uncorrected {naive_rate:.4}");
        assert!(rate <= DEFAULT_ALPHA, "{rate}");
        assert!(
            naive_rate > 2.0 * DEFAULT_ALPHA,
            "uncorrected looks: {naive_rate}"
        );
        // Equal sides are mostly shown equivalent within ±5 % by max.
        assert!(equivalent > n / 2, "{equivalent} of {n}");
        // A 10 % effect at the same spread: found nearly always, and early.
        let (found, _, rounds) = simulate(&corrected, 1.1, 0.03, &points, n);
        assert!(found > n * 95 / 100, "{found} of {n}");
        assert!(f64::from(rounds) / f64::from(n) < 8.0, "{rounds}");
    }

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
