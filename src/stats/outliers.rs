//! Outlier detection with the modified Z-score (Iglewicz & Hoaglin): a robust score built on
//! the median absolute deviation, so a single wild run cannot hide itself by inflating the
//! stdev. `|M| > 3.5` is flagged.

use super::summary::median;

/// Scores whose magnitude exceeds this are outliers.
pub const OUTLIER_THRESHOLD: f64 = 3.5;

/// `0.6745` ≈ Φ⁻¹(0.75): makes MAD a consistent estimator of σ for normal data.
const MAD_SCALE: f64 = 0.6745;
/// `1.253314` ≈ √(π/2): the same for the mean absolute deviation (used when MAD is 0).
const MEAN_AD_SCALE: f64 = 1.253314;

/// Modified Z-score of each sample: `M_i = 0.6745 (x_i − median) / MAD`.
///
/// When more than half the samples are identical the MAD is 0; then the mean absolute
/// deviation is used instead (`M_i = (x_i − median) / (1.253314 · MeanAD)`), and if that is 0
/// too (all samples equal) every score is 0.
pub fn modified_zscores(samples: &[f64]) -> Vec<f64> {
    let Some(med) = median(samples) else {
        return Vec::new();
    };
    let deviations: Vec<f64> = samples.iter().map(|x| (x - med).abs()).collect();
    let mad = median(&deviations).unwrap_or(0.0);
    let scale = if mad > 0.0 {
        mad / MAD_SCALE
    } else {
        MEAN_AD_SCALE * deviations.iter().sum::<f64>() / deviations.len() as f64
    };
    if scale > 0.0 {
        samples.iter().map(|x| (x - med) / scale).collect()
    } else {
        vec![0.0; samples.len()]
    }
}

/// Indices of the samples whose modified Z-score exceeds [`OUTLIER_THRESHOLD`] in magnitude.
pub fn outlier_indices(samples: &[f64]) -> Vec<usize> {
    modified_zscores(samples)
        .iter()
        .enumerate()
        .filter(|(_, z)| z.abs() > OUTLIER_THRESHOLD)
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_all_close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-9, "{got:?} vs {want:?}");
        }
    }

    #[test]
    fn known_answer_mad() {
        // numpy 2.4: x = [10.1, 10.3, 9.9, 10.0, 10.2, 14.8, 10.05]; med = np.median(x) = 10.1;
        // mad = np.median(abs(x - med)) = 0.1; 0.6745 * (x - med) / mad
        //   = [0, 1.349, -1.349, -0.6745, 0.6745, 31.7015, -0.33725]; only index 5 exceeds 3.5.
        let x = [10.1, 10.3, 9.9, 10.0, 10.2, 14.8, 10.05];
        assert_all_close(
            &modified_zscores(&x),
            &[0.0, 1.349, -1.349, -0.6745, 0.6745, 31.7015, -0.33725],
        );
        assert_eq!(outlier_indices(&x), vec![5]);
    }

    #[test]
    fn zero_mad_falls_back_to_mean_absolute_deviation() {
        // numpy: y = [5, 5, 5, 5, 9]; median 5, MAD 0, mean AD 0.8;
        // (y - 5) / (1.253314 * 0.8) = [0, 0, 0, 0, 3.989423241103187] → index 4 flagged.
        let y = [5.0, 5.0, 5.0, 5.0, 9.0];
        assert_all_close(&modified_zscores(&y), &[0.0, 0.0, 0.0, 0.0, 3.989423241103187]);
        assert_eq!(outlier_indices(&y), vec![4]);
        assert_eq!(modified_zscores(&[2.0, 2.0, 2.0]), vec![0.0; 3]);
        assert!(modified_zscores(&[]).is_empty());
    }
}
