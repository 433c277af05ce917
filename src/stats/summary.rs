//! Descriptive statistics of one cell's samples.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

/// Confidence level of the interval in [`Summary::ci95`].
pub const CONFIDENCE: f64 = 0.95;

/// A closed interval `[low, high]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub low: f64,
    pub high: f64,
}

/// Descriptive statistics of a sample. Quantities that need two or more samples (or a non-zero
/// mean, for the CV) are `None` when undefined rather than NaN.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: usize,
    pub mean: f64,
    /// Sample standard deviation (Bessel-corrected, `n - 1` in the denominator).
    pub stdev: Option<f64>,
    /// Coefficient of variation, `stdev / |mean|`.
    pub cv: Option<f64>,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// 95% confidence interval of the mean: `mean ± t(0.975, n-1) · stdev / √n`.
    pub ci95: Option<Interval>,
}

/// Arithmetic mean; `None` for an empty slice.
pub fn mean(samples: &[f64]) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    Some(samples.iter().sum::<f64>() / samples.len() as f64)
}

/// Sample variance (`n - 1` denominator); `None` with fewer than two samples.
pub fn variance(samples: &[f64]) -> Option<f64> {
    if samples.len() < 2 {
        return None;
    }
    let m = mean(samples)?;
    Some(samples.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (samples.len() - 1) as f64)
}

/// Sample standard deviation; `None` with fewer than two samples.
pub fn stdev(samples: &[f64]) -> Option<f64> {
    variance(samples).map(f64::sqrt)
}

/// Median (mean of the middle two for an even count); `None` for an empty slice.
pub fn median(samples: &[f64]) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    })
}

/// Two-sided Student-t confidence interval of the mean at `level` (e.g. 0.95) for `n` samples
/// with the given mean and sample stdev; `None` when `n < 2` or `level` is not in (0, 1).
pub fn confidence_interval(mean: f64, stdev: f64, n: usize, level: f64) -> Option<Interval> {
    if n < 2 || !(level > 0.0 && level < 1.0) {
        return None;
    }
    let t = StudentsT::new(0.0, 1.0, (n - 1) as f64).ok()?;
    let q = t.inverse_cdf(1.0 - (1.0 - level) / 2.0);
    let half = q * stdev / (n as f64).sqrt();
    Some(Interval {
        low: mean - half,
        high: mean + half,
    })
}

/// Summarizes `samples`; `None` for an empty slice.
pub fn summarize(samples: &[f64]) -> Option<Summary> {
    let mean = mean(samples)?;
    let n = samples.len();
    let stdev = stdev(samples);
    let cv = stdev.filter(|_| mean != 0.0).map(|s| s / mean.abs());
    Some(Summary {
        n,
        mean,
        stdev,
        cv,
        median: median(samples)?,
        min: samples.iter().copied().fold(f64::INFINITY, f64::min),
        max: samples.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        ci95: stdev.and_then(|s| confidence_interval(mean, s, n, CONFIDENCE)),
    })
}

/// Whether `samples` are stable enough to stop adding runs: at least two samples and a
/// coefficient of variation at or below `target_cv` (a fraction, e.g. `0.02` for 2%).
/// For a sweep with dynamic run counts.
pub fn cv_reached(samples: &[f64], target_cv: f64) -> bool {
    summarize(samples)
        .and_then(|s| s.cv)
        .is_some_and(|cv| cv <= target_cv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1.0)
    }

    #[test]
    fn known_answer_summary() {
        // Values from Python 3 / scipy 1.17:
        //   a = [18.71, 19.02, 18.88, 19.35, 18.64, 18.99]
        //   statistics.mean(a) = 18.931666666666665, statistics.stdev(a) = 0.2541980854897746
        //   scipy.stats.t.interval(0.95, 5, loc=mean, scale=scipy.stats.sem(a))
        //     = (18.664902136160368, 19.19843119717296)
        let a = [18.71, 19.02, 18.88, 19.35, 18.64, 18.99];
        let s = summarize(&a).unwrap();
        assert_eq!(s.n, 6);
        assert!(close(s.mean, 18.931666666666665, 1e-12));
        assert!(close(s.stdev.unwrap(), 0.2541980854897746, 1e-12));
        assert!(close(
            s.cv.unwrap(),
            0.2541980854897746 / 18.931666666666665,
            1e-12
        ));
        assert!(close(s.median, 18.935, 1e-12));
        assert_eq!((s.min, s.max), (18.64, 19.35));
        let ci = s.ci95.unwrap();
        assert!(close(ci.low, 18.664902136160368, 1e-9), "{ci:?}");
        assert!(close(ci.high, 19.19843119717296, 1e-9), "{ci:?}");
    }

    #[test]
    fn degenerate_samples() {
        assert_eq!(summarize(&[]), None);
        let one = summarize(&[4.0]).unwrap();
        assert_eq!(
            (one.n, one.mean, one.stdev, one.cv, one.ci95),
            (1, 4.0, None, None, None)
        );
        let zero = summarize(&[0.0, 0.0]).unwrap();
        assert_eq!((zero.stdev, zero.cv), (Some(0.0), None));
    }

    #[test]
    fn cv_threshold() {
        // stdev([100, 101, 99]) = 1, mean = 100 → CV = 0.01
        assert!(cv_reached(&[100.0, 101.0, 99.0], 0.01));
        assert!(!cv_reached(&[100.0, 101.0, 99.0], 0.0099));
        assert!(!cv_reached(&[100.0], 0.5));
    }
}
