//! Comparing a variant against the baseline: %improvement, Welch's t-test, geometric means.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

use super::summary::{mean, variance};
use crate::journal::Better;

/// Default significance level.
pub const DEFAULT_ALPHA: f64 = 0.05;

/// Percent improvement of `variant` over `base`, signed so that **+ is better**:
/// higher-is-better: `(variant − base) / base × 100`; lower-is-better: `(base − variant) / base × 100`.
/// `None` when `base` is 0 or either value is not finite.
pub fn improvement_pct(base: f64, variant: f64, better: Better) -> Option<f64> {
    if base == 0.0 || !base.is_finite() || !variant.is_finite() {
        return None;
    }
    let delta = match better {
        Better::Higher => variant - base,
        Better::Lower => base - variant,
    };
    Some(delta / base.abs() * 100.0)
}

/// A ratio (variant / base) as a percent improvement, signed so that **+ is better**:
/// higher-is-better `(ratio − 1) × 100`, lower-is-better `(1 − ratio) × 100` — what
/// [`improvement_pct`] gives for a base of 1, so its sign always says which side of 1 the ratio
/// is on. `None` for a ratio that is not finite.
pub fn improvement_of_ratio(ratio: f64, better: Better) -> Option<f64> {
    ratio.is_finite().then_some(())?;
    improvement_pct(1.0, ratio, better)
}

/// Result of Welch's unequal-variances t-test of `a` against `b`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Welch {
    /// `(mean(a) − mean(b)) / √(s²a/na + s²b/nb)` (the sign of scipy's `ttest_ind(a, b)`).
    pub t: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: f64,
    /// Two-sided p-value.
    pub p: f64,
}

impl Welch {
    #[cfg(test)]
    pub fn significant(&self, alpha: f64) -> bool {
        self.p < alpha
    }
}

/// Welch's t-test; `None` when either side has fewer than two samples or both have zero
/// variance (the test is undefined).
pub fn welch_t_test(a: &[f64], b: &[f64]) -> Option<Welch> {
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let (va, vb) = (variance(a)? / na, variance(b)? / nb);
    let se2 = va + vb;
    if se2 <= 0.0 || !se2.is_finite() {
        return None;
    }
    let t = (mean(a)? - mean(b)?) / se2.sqrt();
    let df = se2 * se2 / (va * va / (na - 1.0) + vb * vb / (nb - 1.0));
    let dist = StudentsT::new(0.0, 1.0, df).ok()?;
    let p = (2.0 * dist.sf(t.abs())).min(1.0);
    Some(Welch { t, df, p })
}

/// Geometric mean of strictly positive values; `None` if empty or any value is ≤ 0 or not finite.
pub fn geometric_mean(values: &[f64]) -> Option<f64> {
    if values.is_empty() || values.iter().any(|v| !(*v > 0.0 && v.is_finite())) {
        return None;
    }
    Some((values.iter().map(|v| v.ln()).sum::<f64>() / values.len() as f64).exp())
}

/// Geometric mean across levels of `variant / base` (pairs of per-level means). Equal to
/// `geometric_mean(variants) / geometric_mean(bases)`, so feeding the two geometric means to
/// [`improvement_pct`] gives the summary row's %improvement.
pub fn geomean_ratio(pairs: &[(f64, f64)]) -> Option<f64> {
    let ratios: Vec<f64> = pairs.iter().map(|(b, v)| v / b).collect();
    geometric_mean(&ratios)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1e-300)
    }

    #[test]
    fn published_improvement_figures() {
        // hackbench (seconds, lower is better): base 18.9326, patched 20.0686 → −6.00%
        let h = improvement_pct(18.9326, 20.0686, Better::Lower).unwrap();
        assert_eq!(format!("{h:+.2}%"), "-6.00%");
        // ebizzy (records/s, higher is better): 20499.375 → 22257.875 → +8.58%
        let e = improvement_pct(20499.375, 22257.875, Better::Higher).unwrap();
        assert_eq!(format!("{e:+.2}%"), "+8.58%");
        // python3: (18.9326-20.0686)/18.9326*100, (22257.875-20499.375)/20499.375*100
        assert!(close(h, -6.000232403367732, 1e-12));
        assert!(close(e, 8.578310314338852, 1e-12));
        assert_eq!(improvement_pct(0.0, 1.0, Better::Higher), None);
        // From a ratio: its sign is the ratio's side of 1, turned by the direction.
        assert!((improvement_of_ratio(0.9, Better::Lower).unwrap() - 10.0).abs() < 1e-12);
        assert!((improvement_of_ratio(0.9, Better::Higher).unwrap() + 10.0).abs() < 1e-12);
        assert!((improvement_of_ratio(1.25, Better::Higher).unwrap() - 25.0).abs() < 1e-12);
        assert_eq!(improvement_of_ratio(f64::NAN, Better::Higher), None);
    }

    #[test]
    fn welch_known_answers() {
        // scipy 1.17: scipy.stats.ttest_ind(a, b, equal_var=False)
        //   → statistic=-8.507684125304444, pvalue=1.4643348390086662e-05, df=8.884275456298953
        let a = [18.71, 19.02, 18.88, 19.35, 18.64, 18.99];
        let b = [20.11, 19.87, 20.35, 19.95, 20.02];
        let w = welch_t_test(&a, &b).unwrap();
        assert!(close(w.t, -8.507684125304444, 1e-9), "{w:?}");
        assert!(close(w.df, 8.884275456298953, 1e-9), "{w:?}");
        assert!(close(w.p, 1.4643348390086662e-05, 1e-6), "{w:?}");
        assert!(w.significant(DEFAULT_ALPHA));

        // scipy 1.17: ttest_ind(c, d, equal_var=False)
        //   → statistic=-0.48170966244723534, pvalue=0.642583878538178, df=8.214712519765492
        let c = [101.2, 98.7, 103.4, 99.9];
        let d = [102.8, 97.1, 105.0, 100.6, 104.1, 99.2, 101.7];
        let w = welch_t_test(&c, &d).unwrap();
        assert!(close(w.t, -0.48170966244723534, 1e-9), "{w:?}");
        assert!(close(w.df, 8.214712519765492, 1e-9), "{w:?}");
        assert!(close(w.p, 0.642583878538178, 1e-7), "{w:?}");
        assert!(!w.significant(DEFAULT_ALPHA));
        // symmetric: swapping sides flips t only
        let s = welch_t_test(&d, &c).unwrap();
        assert!(close(s.t, 0.48170966244723534, 1e-9) && close(s.p, w.p, 1e-12));
    }

    #[test]
    fn welch_undefined_cases() {
        assert_eq!(welch_t_test(&[1.0], &[1.0, 2.0]), None);
        assert_eq!(welch_t_test(&[3.0, 3.0], &[4.0, 4.0]), None);
    }

    #[test]
    fn geometric_means() {
        // scipy.stats.gmean([1.1, 0.9, 1.25]) = 1.0736145845094707
        assert!(close(
            geometric_mean(&[1.1, 0.9, 1.25]).unwrap(),
            1.0736145845094707,
            1e-12
        ));
        // gmean([20, 40, 80]) = 40.0, gmean([22, 40, 76]) = 40.5912184652275
        let pairs = [(20.0, 22.0), (40.0, 40.0), (80.0, 76.0)];
        let r = geomean_ratio(&pairs).unwrap();
        assert!(close(r, 40.5912184652275 / 40.0, 1e-12));
        assert!(close(r, (1.1f64 * 1.0 * 0.95).cbrt(), 1e-12));
        assert_eq!(geometric_mean(&[1.0, 0.0]), None);
        assert_eq!(geometric_mean(&[]), None);
    }
}
