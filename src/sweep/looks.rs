//! The rule of `runs: {until: concluded}` as the plan fixes it before any run: the level each
//! look tests at ([`Concluded`]) and the run counts it looks at ([`look_points`]). What a cell
//! decides with it over the journaled records is [`super::stopping`]'s.

use crate::stats::compare::DEFAULT_ALPHA;
use crate::stats::effect::{Sample, compare};

/// `runs: {until: concluded, min, max}`: a comparison stops once the report's own rule
/// concludes it — its interval over the units the design replicated ([`compare`]) shows a
/// ratio of 1 excluded (`differs`) or the ratio inside 1 ± margin (`equivalent`) — at a
/// level strict enough for every look and every comparison at once: α / (family × looks),
/// Bonferroni over the report's family of comparisons and over the run counts at which the
/// rule looks ([`look_points`]: `min`, then about 1.5× the last, and `max`, each where the
/// run order is balanced). Bonferroni's test rejecting implies Holm's does, so a comparison
/// stopped as concluded is concluded in the report, whose p values are multiplied by the
/// same number of looks ([`looks`], the most any group takes): a small SD seen by luck at an early
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

/// The run counts at which `runs: {until: concluded, min, max}` looks at a group whose run
/// order is balanced every `every` rounds ([`super::order::balanced_every`]: the number of
/// variants sharing its guests under round-robin, else 1): the first multiple of `every` at
/// or after `min`, then each about [`LOOK_GROWTH`]× the last (at least one more) rounded up to
/// a multiple of `every`, and `max`. 3, 5, 8, 12 for 3 to 12 rounds of one variant (or of a
/// shuffle); 4, 8, 12 with 4 variants sharing guests; 10, 12 with 10. So at every look before
/// `max` each variant has been first (and in every other place of the round) equally often,
/// and at `max` too where it is a multiple of `every`; a `max` that is not is kept (the user's
/// bound), and its look carries the rounds past the last multiple (`max mod every` variants
/// first once more than the others). Where no multiple of `every` lies below `max`, the only
/// look is at `max`: the rule runs a fixed `max` rounds, balanced as far as `max` allows.
/// (Where blocks must stay whole a look waits for the next block's end
/// that is also a multiple of `every`; a look point never gives more than one look.)
pub fn look_points(min: u32, max: u32, every: u32) -> Vec<u32> {
    let every = every.max(1);
    let up = |n: u32| n.div_ceil(every) * every;
    let mut points = Vec::new();
    let mut next = up(min);
    while next < max {
        points.push(next);
        next = up(((f64::from(next) * LOOK_GROWTH).ceil() as u32).max(next + 1));
    }
    points.push(max);
    points
}

/// How many looks a rule of `min` to `max` runs takes at most at a group balanced every
/// `every` rounds ([`look_points`]): what its α and the report's p values are corrected for
/// (the plan's is the most over its groups).
pub fn looks(min: u32, max: u32, every: u32) -> u32 {
    look_points(min, max, every).len() as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::normal;

    /// One round of a shared-guests sweep: baseline and variant measured in the same guests.
    fn round(run: u32, value: f64) -> Sample<'static> {
        Sample {
            value,
            run,
            host: None,
            boot: 0,
            bring_up: 1,
            block: 0,
            weight: 1.0,
        }
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
        assert_eq!(look_points(3, 12, 1), [3, 5, 8, 12]);
        assert_eq!(look_points(3, 8, 1), [3, 5, 8]);
        assert_eq!(look_points(1, 4, 1), [1, 2, 3, 4]);
        assert_eq!(look_points(5, 5, 1), [5]);
        assert_eq!(looks(3, 20, 1), 6, "{:?}", look_points(3, 20, 1));
    }

    /// Looks fall where the order is balanced: on multiples of the variants sharing guests,
    /// then `max`. A `max` that cannot give one is still the last look; with none below
    /// `max`, `max` is the only one.
    #[test]
    fn looks_fall_on_multiples_of_the_variants_where_min_and_max_allow() {
        assert_eq!(look_points(3, 12, 2), [4, 6, 10, 12]);
        assert_eq!(look_points(3, 12, 3), [3, 6, 9, 12]);
        assert_eq!(look_points(3, 12, 4), [4, 8, 12]);
        assert_eq!(look_points(3, 12, 10), [10, 12], "spinlock-variants: 10 variants");
        assert_eq!(look_points(3, 30, 10), [10, 20, 30]);
        assert_eq!(look_points(3, 8, 10), [8], "no balanced look: a fixed max");
        assert_eq!(look_points(12, 12, 5), [12]);
        assert_eq!(looks(3, 12, 10), 2);
        for every in 1..=12 {
            for (min, max) in [(1, 4), (3, 12), (3, 20), (5, 50), (2, 7)] {
                let points = look_points(min, max, every);
                assert_eq!(points.last(), Some(&max));
                assert!(points.windows(2).all(|w| w[0] < w[1]), "{points:?}");
                let (before, _) = points.split_at(points.len() - 1);
                assert!(before.iter().all(|p| p % every == 0 && *p >= min), "{points:?}");
            }
        }
    }

    /// The rule's point: looking again as runs come in must not turn noise into `differs`. On
    /// 2000 simulated A/A comparisons (spread 3 % a run, looks at 3, 5, 8, 12) the corrected
    /// rule concludes `differs` in under α = 5 % of them, where an uncorrected α looking after
    /// every round concludes it several times as often; and a real 10 % effect is still found.
    #[test]
    fn looking_again_keeps_false_differences_within_alpha() {
        let (min, max, n) = (3, 12, 2000);
        let corrected = Concluded::new(1, looks(min, max, 1), 0.05);
        assert!((corrected.alpha - 0.0125).abs() < 1e-12);
        let naive = Concluded {
            alpha: DEFAULT_ALPHA,
            margin: 0.05,
        };
        let points = look_points(min, max, 1);
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
}
