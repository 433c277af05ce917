//! Per-thread counters and summaries shared by the workloads: fairness, latency percentiles.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Jain's fairness index of per-thread progress: (Σx)² / (n·Σx²). 1.0 is perfectly fair,
/// 1/n means one thread did all the work. An empty or all-zero input is reported as 1.0.
pub fn jain_index(xs: &[u64]) -> f64 {
    let n = xs.len() as f64;
    let sum: f64 = xs.iter().map(|&x| x as f64).sum();
    let sum_sq: f64 = xs.iter().map(|&x| (x as f64) * (x as f64)).sum();
    if n == 0.0 || sum_sq == 0.0 {
        return 1.0;
    }
    sum * sum / (n * sum_sq)
}

/// Per-thread progress summary printed next to every throughput figure.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Fairness {
    pub min: u64,
    pub max: u64,
    pub jain: f64,
}

impl Fairness {
    pub fn of(per_thread: &[u64]) -> Self {
        Self {
            min: per_thread.iter().copied().min().unwrap_or(0),
            max: per_thread.iter().copied().max().unwrap_or(0),
            jain: jain_index(per_thread),
        }
    }
}

/// Latency histogram in nanoseconds, 3 significant digits, up to one minute.
pub fn new_latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("static histogram bounds are valid")
}

/// Percentiles of a latency histogram, in nanoseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    pub count: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        Self {
            count: h.len(),
            p50_ns: h.value_at_quantile(0.50),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            max_ns: h.max(),
            mean_ns: h.mean(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_index_known_answers() {
        assert_eq!(jain_index(&[5, 5, 5, 5]), 1.0);
        assert!((jain_index(&[10, 0, 0, 0]) - 0.25).abs() < 1e-12);
        // (1+2+3)^2 / (3 * (1+4+9)) = 36/42
        assert!((jain_index(&[1, 2, 3]) - 36.0 / 42.0).abs() < 1e-12);
        assert_eq!(jain_index(&[]), 1.0);
    }

    #[test]
    fn latency_percentiles_from_histogram() {
        let mut h = new_latency_histogram();
        for v in 1..=1000u64 {
            h.record(v * 1000).unwrap();
        }
        let l = Latency::of(&h);
        assert_eq!(l.count, 1000);
        assert!((l.p50_ns as f64 - 500_000.0).abs() / 500_000.0 < 0.01);
        assert!(l.max_ns >= 999_000);
    }
}
