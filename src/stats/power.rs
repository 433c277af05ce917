//! What a comparison can conclude: the smallest effect a two-sided Welch test would detect
//! with the given power at the measured spread and sample sizes.
//!
//! A test at level α with `df` degrees of freedom rejects when |T| > c = t(1 − α/2, df). With
//! a true difference δ between the means and standard error SE = √(s²a/na + s²b/nb), T follows
//! the noncentral t distribution with noncentrality λ = δ / SE, and the power is
//! P(T > c) + P(T < −c). The minimum detectable effect is the δ whose power is the one asked
//! for, relative to the baseline mean. The noncentral t is computed exactly by integrating
//! over the χ² of the variance estimate (statrs has no noncentral t), so equal sizes and
//! spreads give the figures of statsmodels' `TTestIndPower` (tests below).

use serde::{Deserialize, Serialize};
use statrs::distribution::{ChiSquared, Continuous, ContinuousCDF, Normal, StudentsT};

use super::summary::Summary;

/// Power a comparison's minimum detectable effect is computed for.
pub const DEFAULT_POWER: f64 = 0.8;

/// The minimum detectable effect of one comparison.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Detectable {
    /// Smallest true difference of the means detected with `power`, as a fraction of the
    /// baseline mean (0.40 = 40 %).
    pub mde: f64,
    pub alpha: f64,
    pub power: f64,
    /// Welch–Satterthwaite degrees of freedom the test has at these sizes and spreads.
    pub df: f64,
}

/// Power of a two-sided t test at level `alpha` with `df` degrees of freedom against a true
/// noncentrality `lambda` (difference / standard error).
#[cfg(test)]
fn power_at(lambda: f64, df: f64, alpha: f64) -> Option<f64> {
    if !lambda.is_finite() {
        return None;
    }
    Some(TwoSided::new(df, alpha)?.power(lambda))
}

/// A two-sided t test's critical value and the quadrature of its variance estimate.
struct TwoSided {
    /// t(1 − α/2, df).
    c: f64,
    /// (√(V/df), weight) at the quadrature nodes of V ~ χ²(df).
    nodes: Vec<(f64, f64)>,
}

impl TwoSided {
    /// P(T > c) for T noncentral t is E[Φ(λ − c·√(V/df))] with V ~ χ²(df) (T = (Z + λ)/√(V/df)).
    /// The expectation is a Simpson sum over V's bulk (mean ± 12 standard deviations, cut at 0)
    /// in u = √V, which smooths the density of df ≤ 2 at 0; the weights are computed once.
    fn new(df: f64, alpha: f64) -> Option<Self> {
        if !(df > 0.0 && alpha > 0.0 && alpha < 1.0) {
            return None;
        }
        let c = StudentsT::new(0.0, 1.0, df).ok()?.inverse_cdf(1.0 - alpha / 2.0);
        let chi = ChiSquared::new(df).ok()?;
        let sd = (2.0 * df).sqrt();
        let (lo, hi) = ((df - 12.0 * sd).max(0.0).sqrt(), (df + 12.0 * sd + 40.0).sqrt());
        const PANELS: usize = 4000;
        let h = (hi - lo) / PANELS as f64;
        let nodes = (0..=PANELS)
            .map(|k| {
                let u = lo + k as f64 * h;
                let v = u * u;
                let simpson = match k {
                    0 | PANELS => 1.0,
                    k if k % 2 == 1 => 4.0,
                    _ => 2.0,
                };
                let density = if v > 0.0 { chi.pdf(v) * 2.0 * u } else { 0.0 };
                ((v / df).sqrt(), simpson * density * h / 3.0)
            })
            .collect();
        Some(Self { c, nodes })
    }

    /// P(T > c) + P(T < −c) at noncentrality `lambda`.
    fn power(&self, lambda: f64) -> f64 {
        let z = Normal::standard();
        let tail = |l: f64| {
            self.nodes
                .iter()
                .map(|&(s, w)| w * z.cdf(l - self.c * s))
                .sum::<f64>()
                .clamp(0.0, 1.0)
        };
        tail(lambda) + tail(-lambda)
    }
}

/// The noncentrality a two-sided test at `alpha` with `df` degrees of freedom needs for
/// `power`, by bisection (power grows with λ).
pub fn required_noncentrality(df: f64, alpha: f64, power: f64) -> Option<f64> {
    if !(power > alpha && power < 1.0 && lambda_ok(df)) {
        return None;
    }
    let test = TwoSided::new(df, alpha)?;
    let (mut lo, mut hi) = (0.0, 1.0);
    while test.power(hi) < power {
        hi *= 2.0;
        if hi > 1e6 {
            return None;
        }
    }
    // 40 halvings: λ to 1e-12 of its bracket, far below the quadrature's error.
    for _ in 0..40 {
        let mid = (lo + hi) / 2.0;
        if test.power(mid) < power {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some((lo + hi) / 2.0)
}

fn lambda_ok(df: f64) -> bool {
    df.is_finite() && df > 0.0
}

/// Minimum detectable effect of comparing `variant` against `base` (Welch's test, two-sided
/// `alpha`, `power`), relative to the baseline mean. `None` when either side has fewer than
/// two samples, the baseline mean is 0, or both sides have no spread.
pub fn min_detectable_effect(
    base: &Summary,
    variant: &Summary,
    alpha: f64,
    power: f64,
) -> Option<Detectable> {
    let (sa, sb) = (base.stdev?, variant.stdev?);
    let (na, nb) = (base.n as f64, variant.n as f64);
    if base.mean == 0.0 || !base.mean.is_finite() {
        return None;
    }
    let (va, vb) = (sa * sa / na, sb * sb / nb);
    let se2 = va + vb;
    if !(se2 > 0.0 && se2.is_finite()) {
        return None;
    }
    let df = se2 * se2 / (va * va / (na - 1.0) + vb * vb / (nb - 1.0));
    let lambda = required_noncentrality(df, alpha, power)?;
    Some(Detectable {
        mde: lambda * se2.sqrt() / base.mean.abs(),
        alpha,
        power,
        df,
    })
}

/// The smallest difference (a fraction of the mean) a comparison of `runs` runs a side could
/// detect where both sides vary with coefficient of variation `cv`, two-sided at 5 % with
/// [`DEFAULT_POWER`] (`ocrig doctor`'s noise floor; a lower bound for real runs).
pub fn detectable_at_cv(cv: f64, runs: usize) -> Option<f64> {
    let side = Summary {
        n: runs,
        mean: 1.0,
        stdev: Some(cv),
        cv: Some(cv),
        median: 1.0,
        min: 1.0,
        max: 1.0,
        ci95: None,
    };
    min_detectable_effect(&side, &side, 0.05, DEFAULT_POWER).map(|d| d.mde)
}

/// Minimum detectable effect straight from samples (see [`min_detectable_effect`]).
pub fn mde_of_samples(base: &[f64], variant: &[f64], alpha: f64, power: f64) -> Option<Detectable> {
    let (a, b) = (
        super::summary::summarize(base)?,
        super::summary::summarize(variant)?,
    );
    min_detectable_effect(&a, &b, alpha, power)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs()
    }

    /// Two samples of size n, each with mean m and sample stdev s.
    fn spread(m: f64, s: f64, n: usize) -> Summary {
        let mut x = super::super::summary::summarize(&vec![m; n]).unwrap();
        x.stdev = Some(s);
        x.cv = Some(s / m);
        x
    }

    #[test]
    fn power_matches_statsmodels() {
        // statsmodels 0.14 TTestIndPower().power(effect_size=d, nobs1=n, alpha=0.05, ratio=1)
        // uses df = 2n − 2 and λ = d·√(n/2), which is what equal sizes and spreads give here.
        for (d, n, want) in KNOWN_POWER {
            let lambda = d * (n / 2.0f64).sqrt();
            let got = power_at(lambda, 2.0 * n - 2.0, 0.05).unwrap();
            assert!(close(got, *want, 1e-6), "d {d} n {n}: {got} vs {want}");
        }
    }

    #[test]
    fn detectable_effect_matches_statsmodels() {
        // TTestIndPower().solve_power(nobs1=n, alpha=0.05, power=0.8, ratio=1) = Cohen's d;
        // with both sides' CV c that is an effect of d·c of the mean.
        for (n, d) in KNOWN_D {
            let cv = 0.1;
            let s = spread(100.0, 100.0 * cv, *n);
            let got = min_detectable_effect(&s, &s, 0.05, DEFAULT_POWER).unwrap();
            assert!(close(got.mde, d * cv, 1e-5), "n {n}: {} vs {}", got.mde, d * cv);
            assert!(close(got.df, 2.0 * *n as f64 - 2.0, 1e-12));
        }
    }

    /// The noise floor's figure (moved from telemetry::host_speed's test): statsmodels'
    /// TTestIndPower d for 3 and 10 a side (3.071, 1.325 at α 0.05, power 0.8) times the CV.
    #[test]
    fn detectable_at_a_cv_is_cohens_d_times_it() {
        let cv = 0.1 / 1.1 * (20.0f64 / 19.0).sqrt();
        let (m3, m10) = (
            detectable_at_cv(cv, 3).unwrap(),
            detectable_at_cv(cv, 10).unwrap(),
        );
        assert!(
            (m3 / cv - 3.0709).abs() < 1e-3 && (m10 / cv - 1.3249).abs() < 1e-3,
            "{m3} {m10} {cv}"
        );
    }

    #[test]
    fn unequal_spreads_match_scipys_noncentral_t() {
        // scipy 1.16 stats.nct: brentq over λ of nct.sf(c, df, λ) + nct.cdf(−c, df, λ) = 0.8 with
        // c = t.ppf(0.975, df), Welch df, then λ·SE / mean(base):
        //   base (10, sd 0.2, n 3), variant (9, sd 0.1, n 3) → 0.05551995910098776, df 2.941176470588235
        //   base (1000, sd 100, n 3), variant (1200, sd 100, n 3) → 0.3070892266363688, df 4
        let d = min_detectable_effect(&spread(10.0, 0.2, 3), &spread(9.0, 0.1, 3), 0.05, 0.8).unwrap();
        assert!(close(d.mde, 0.05551995910098776, 1e-5), "{d:?}");
        assert!(close(d.df, 2.941176470588235, 1e-12), "{d:?}");
        let d =
            min_detectable_effect(&spread(1000.0, 100.0, 3), &spread(1200.0, 100.0, 3), 0.05, 0.8).unwrap();
        assert!(close(d.mde, 0.3070892266363688, 1e-5), "{d:?}");
    }

    #[test]
    fn undefined_without_spread_or_samples() {
        let one = super::super::summary::summarize(&[1.0]).unwrap();
        let two = super::super::summary::summarize(&[1.0, 2.0]).unwrap();
        assert_eq!(min_detectable_effect(&one, &two, 0.05, 0.8), None);
        let flat = super::super::summary::summarize(&[3.0, 3.0]).unwrap();
        assert_eq!(min_detectable_effect(&flat, &flat, 0.05, 0.8), None);
        // More runs, smaller detectable effect.
        let a = mde_of_samples(&[100.0, 110.0, 90.0], &[100.0, 110.0, 90.0], 0.05, 0.8).unwrap();
        let b = mde_of_samples(
            &[100.0, 110.0, 90.0, 100.0, 110.0, 90.0],
            &[100.0, 110.0, 90.0, 100.0, 110.0, 90.0],
            0.05,
            0.8,
        )
        .unwrap();
        assert!(b.mde < a.mde, "{b:?} vs {a:?}");
    }

    /// (Cohen's d, n per group, power): statsmodels 0.15.0
    /// `TTestIndPower().power(effect_size=d, nobs1=n, alpha=0.05, ratio=1, alternative='two-sided')`.
    const KNOWN_POWER: &[(f64, f64, f64)] = &[
        (1.0, 5.0, 0.28629549338059757),
        (2.0, 3.0, 0.46264081189130635),
        (0.5, 20.0, 0.3379390289250411),
        (3.0, 3.0, 0.7825543870581168),
        (1.5, 10.0, 0.8869702022546694),
    ];
    /// (n per group, Cohen's d): statsmodels 0.15.0
    /// `TTestIndPower().solve_power(nobs1=n, alpha=0.05, power=0.8, ratio=1, alternative='two-sided')`.
    /// Cohen's classic table agrees: d = 0.8 ("large") needs n ≈ 26 per group.
    const KNOWN_D: &[(usize, f64)] = &[
        (2, 5.653489341914222),
        (3, 3.070892269599019),
        (5, 2.024440145655355),
        (10, 1.324947368330822),
        (30, 0.7356198334313554),
    ];
}
