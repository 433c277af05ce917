//! Fisher's exact test of a 2×2 table, two-sided: whether two sides of a comparison had their
//! attempts rejected (by the payload's self-checks) at different rates. A side that loses more
//! attempts keeps only the runs that passed, so its survivors may not be what it would have
//! measured; a row whose sides were rejected at clearly different rates is not concluded
//! (`stats::cells`).

use statrs::function::factorial::ln_binomial;

/// The level below which two sides' rejection rates read as clearly different.
pub const REJECTION_ALPHA: f64 = 0.05;

/// Two-sided p of Fisher's exact test of the table `[[a, b], [c, d]]` (rows: the two sides;
/// columns: rejected, not): the probability, over tables with the same margins, of those no
/// more probable than the one seen — scipy's `fisher_exact`, with its relative tolerance of
/// 1e-7 for tables as probable as this one. 1 where a margin is empty.
pub fn fisher_exact(a: u64, b: u64, c: u64, d: u64) -> f64 {
    let (row, col, n) = (a + b, a + c, a + b + c + d);
    if row == 0 || col == 0 || row == n || col == n {
        return 1.0;
    }
    // The count in the top-left cell is hypergeometric given the margins.
    let ln_pmf = |x: u64| ln_binomial(row, x) + ln_binomial(n - row, col - x) - ln_binomial(n, col);
    let (lo, hi) = ((row + col).saturating_sub(n), row.min(col));
    let seen = ln_pmf(a);
    let bound = seen + (1.0 + 1e-7f64).ln();
    let p: f64 = (lo..=hi).map(ln_pmf).filter(|&l| l <= bound).map(f64::exp).sum();
    p.min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_scipy() {
        // scipy 1.17: fisher_exact([[a, b], [c, d]]).pvalue
        let gold: [((u64, u64, u64, u64), f64); 10] = [
            ((9, 11, 1, 19), 0.00836173416818578),
            ((2, 12, 0, 12), 0.48307692307692296),
            ((0, 10, 0, 10), 1.0),
            ((5, 5, 5, 5), 1.0),
            ((3, 100, 20, 90), 0.0002812014682012966),
            ((1, 3, 5, 2), 0.24242424242424238),
            ((0, 444, 2, 440), 0.24859012128400354),
            ((12, 0, 0, 12), 7.39602301050679e-07),
            ((1, 0, 0, 0), 1.0),
            ((6, 14, 1, 19), 0.09147609147609148),
        ];
        for ((a, b, c, d), p) in gold {
            let got = fisher_exact(a, b, c, d);
            assert!(
                (got - p).abs() <= 1e-9 * p.max(1e-300),
                "[[{a}, {b}], [{c}, {d}]]: {got} vs scipy {p}"
            );
            // The test is the same with the sides swapped.
            assert!(
                (fisher_exact(c, d, a, b) - got).abs() <= 1e-12,
                "[[{a}, {b}], [{c}, {d}]]"
            );
        }
        assert_eq!(fisher_exact(0, 0, 0, 0), 1.0);
    }
}
