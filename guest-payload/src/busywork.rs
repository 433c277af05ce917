//! Calibrated busy work: "hold the lock for H ns" as a fixed amount of CPU work.
//!
//! Work is counted in loop iterations, not measured against a clock, so a vCPU preempted in the
//! middle of a critical section still owes the same work when it resumes — which is exactly
//! how a real critical section behaves under lock-holder preemption.

use std::hint::black_box;
use std::sync::OnceLock;
use std::time::Instant;

static ITERS_PER_US: OnceLock<f64> = OnceLock::new();

/// Spins for about `ns` nanoseconds of CPU time (0 returns at once).
#[inline]
pub fn spin_ns(ns: u64) {
    if ns == 0 {
        return;
    }
    spin_iters(iterations_for(ns));
}

/// Number of [`spin_iters`] iterations that take `ns` nanoseconds on this CPU.
pub fn iterations_for(ns: u64) -> u64 {
    let per_us = *ITERS_PER_US.get_or_init(calibrate);
    ((ns as f64) * per_us / 1000.0).round().max(1.0) as u64
}

#[inline]
pub fn spin_iters(iters: u64) {
    for i in 0..iters {
        black_box(i);
    }
}

/// Iterations per microsecond, best of several short trials (the fastest trial is the one
/// least disturbed by preemption).
pub fn calibrate() -> f64 {
    const TRIAL: u64 = 200_000;
    let mut best = f64::MAX;
    for _ in 0..7 {
        let t = Instant::now();
        spin_iters(TRIAL);
        best = best.min(t.elapsed().as_nanos().max(1) as f64);
    }
    TRIAL as f64 / (best / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_gives_positive_rate_and_monotone_iterations() {
        assert!(calibrate() > 0.0);
        assert!(iterations_for(10_000) >= iterations_for(100));
    }
}
