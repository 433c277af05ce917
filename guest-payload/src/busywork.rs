//! Calibrated busy work: "hold the lock for H ns" as a fixed amount of CPU work.
//!
//! Work is counted in loop iterations, not measured against a clock, so a vCPU preempted in the
//! middle of a critical section still owes the same work when it resumes — which is exactly
//! how a real critical section behaves under lock-holder preemption.
//!
//! The iteration count is only as true as the calibration that chose it, so a calibration is
//! made where the work runs and when it runs ([`calibrate`], called by the workers themselves
//! just before the start gate and again after the run) and is reported. Three things made the
//! old single calibration (best of 7 × 200k iterations on the main thread, before any worker
//! existed) off by up to 2× under TCG:
//! - the calibrated loop and the measured loop were two inlined copies of the same source, and
//!   an emulator (or a CPU front end) runs two copies at different speeds: [`spin_iters`] is
//!   one out-of-line function, so the calibrated machine code *is* the code the workload runs;
//! - a few milliseconds at process start are a lucky or unlucky moment: trials here are spread
//!   out (a short sleep between them, so they fall in different host time slices);
//! - a trial that spans a preemption reads slow, and inside a guest nothing can tell (the
//!   guest's CPU clock runs on while the host has taken the vCPU): the fastest of several
//!   spread-out trials is the loop's undisturbed speed, which is what "H ns of work" means;
//!   the median and the slowest trial are reported beside it. (A median was tried first: under
//!   TCG and on a loaded host half the calibrations then "drifted" by 7-48 % between before
//!   and after the run, i.e. they measured preemption, not the loop; the fastest trials agree.)
//! - a trial timed by the wall clock also counts the time its thread was preempted (by the
//!   run's other threads, or anything else on the machine): trials are timed by the thread's
//!   own CPU clock, so "H ns of hold" means H ns of CPU, which is also what the physics checks
//!   count. (Inside a guest that clock still runs while the host preempts the vCPU, which the
//!   guest cannot see; the spread and the after-run calibration show such noise.)

use std::hint::black_box;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::checks::thread_cpu_ns;

use serde::{Deserialize, Serialize};

/// CPU time one calibration trial aims at: long against the clock's resolution (microseconds
/// on an emulated HPET), short against a scheduler time slice (milliseconds).
pub const TRIAL_TARGET: Duration = Duration::from_millis(1);
/// Trials per calibration; the fastest is kept.
pub const TRIALS: usize = 9;
/// Pause between trials, so they sample different moments.
const TRIAL_SPACING: Duration = Duration::from_micros(500);
/// Busy time before the first trial of a process: in a guest the payload starts right after
/// the host's SSH traffic (deploy, the go line), which keeps QEMU's I/O thread busy on the
/// vCPU's host CPU for a while. Measured under TCG (1-vCPU guest, quiet-cell scenario): with
/// no settling, calibrations made at once were mostly 15-30 % slower than the same one after
/// the run (8 of 8 attempts broke the 5 % drift bound); with 50 ms, 6 of 7; with 300 ms, 4 of
/// 8, the remaining drifts going both ways (the host's own load).
const SETTLE: Duration = Duration::from_millis(300);

/// One calibration on the calling thread.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Calibration {
    /// The fastest trial: nanoseconds per [`spin_iters`] iteration when nothing disturbed it.
    pub ns_per_iter: f64,
    /// Fastest, median and slowest trial, ns per iteration (their ratios are the noise seen).
    pub min_ns_per_iter: f64,
    #[serde(default)]
    pub median_ns_per_iter: f64,
    pub max_ns_per_iter: f64,
    /// Iterations per trial (sized to take about [`TRIAL_TARGET`]).
    pub trial_iters: u64,
    pub trials: usize,
}

/// Only one thread of the process calibrates at a time: the threads of a run would otherwise
/// measure each other's competition for the CPUs, not the CPU.
static TURN: Mutex<()> = Mutex::new(());

/// Measures this thread's loop speed: sizes a trial to about [`TRIAL_TARGET`], then times
/// [`TRIALS`] spread-out trials and keeps the fastest. Takes about 15 ms (plus [`SETTLE`] on the
/// first call of the process).
pub fn calibrate() -> Calibration {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    static SETTLED: OnceLock<()> = OnceLock::new();
    SETTLED.get_or_init(|| {
        let until = std::time::Instant::now() + SETTLE;
        while std::time::Instant::now() < until {
            spin_iters(10_000);
        }
    });
    // Size the trial (this also warms the code: the first runs of a translated block under TCG
    // include its translation).
    let mut iters = 1_000u64;
    loop {
        let t = thread_cpu_ns();
        spin_iters(iters);
        let took = thread_cpu_ns().saturating_sub(t);
        if took >= TRIAL_TARGET.as_nanos() as u64 / 2 || iters >= 1 << 40 {
            let scale = TRIAL_TARGET.as_nanos() as f64 / took.max(1) as f64;
            iters = ((iters as f64 * scale) as u64).max(1_000);
            break;
        }
        iters *= 4;
    }
    let mut per_iter = [0f64; TRIALS];
    for (i, slot) in per_iter.iter_mut().enumerate() {
        if i > 0 {
            std::thread::sleep(TRIAL_SPACING);
        }
        let t = thread_cpu_ns();
        spin_iters(iters);
        *slot = thread_cpu_ns().saturating_sub(t).max(1) as f64 / iters as f64;
    }
    per_iter.sort_by(f64::total_cmp);
    Calibration {
        ns_per_iter: per_iter[0],
        min_ns_per_iter: per_iter[0],
        median_ns_per_iter: per_iter[TRIALS / 2],
        max_ns_per_iter: per_iter[TRIALS - 1],
        trial_iters: iters,
        trials: TRIALS,
    }
}

/// The median of several threads' calibrations (ns per iteration); None for none.
pub fn median_ns_per_iter(cals: &[Calibration]) -> Option<f64> {
    let mut v: Vec<f64> = cals.iter().map(|c| c.ns_per_iter).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Iterations for `ns` of work at `ns_per_iter`; 0 for 0. A positive amount shorter than one
/// iteration cannot be made and is refused, naming `arg` and the measured resolution, rather
/// than rounded to nothing (or up to a whole iteration, many times what was asked).
pub fn iterations(arg: &str, ns: u64, ns_per_iter: f64) -> Result<u64, crate::workloads::BadInput> {
    if ns == 0 {
        return Ok(0);
    }
    if (ns as f64) < ns_per_iter {
        return Err(crate::workloads::BadInput(format!(
            "{arg} {ns} cannot be calibrated here: one busy-loop iteration takes {ns_per_iter:.2} ns on this CPU \
             (the resolution of the work), so use 0 or at least {}",
            ns_per_iter.ceil() as u64
        )));
    }
    Ok(((ns as f64) / ns_per_iter).round().max(1.0) as u64)
}

/// `iters` × `factor`, rounded: the test-only `--debug-scale-hold` and kin, which make the work
/// deliberately other than asked after the calibration chose it (so a test can show that the
/// in-run checks see it).
pub fn scaled(iters: u64, factor: f64) -> u64 {
    (iters as f64 * factor).round() as u64
}

/// Parses a `--debug-scale-hold` (or kin) factor: positive and finite.
pub fn scale_factor(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f > 0.0 && f.is_finite() => Ok(f),
        _ => Err(format!("{s:?} is not a positive factor (e.g. 0.5 or 2)")),
    }
}

/// The busy loop. Out of line on purpose: every caller runs, and [`calibrate`] measures, this
/// one copy of the machine code (the call costs a few ns once per hold or gap).
#[inline(never)]
pub fn spin_iters(iters: u64) {
    for i in 0..iters {
        black_box(i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_is_positive_ordered_and_sized() {
        let c = calibrate();
        assert!(c.ns_per_iter > 0.0);
        assert_eq!(c.ns_per_iter, c.min_ns_per_iter);
        assert!(c.min_ns_per_iter <= c.median_ns_per_iter && c.median_ns_per_iter <= c.max_ns_per_iter);
        assert!(c.trial_iters >= 1_000 && c.trials == TRIALS);
    }

    #[test]
    fn iterations_refuse_what_cannot_be_made_and_round_the_rest() {
        assert_eq!(iterations("--hold-ns", 0, 2.5).unwrap(), 0);
        let e = iterations("--hold-ns", 2, 2.5).unwrap_err().to_string();
        assert!(e.contains("--hold-ns 2") && e.contains("2.50 ns"), "{e}");
        assert_eq!(iterations("--gap-ns", 200, 2.5).unwrap(), 80);
        assert_eq!(iterations("--gap-ns", 3, 2.5).unwrap(), 1);
        assert_eq!(
            (scaled(727, 0.5), scaled(727, 2.0), scaled(727, 1.0)),
            (364, 1454, 727)
        );
        assert_eq!(scale_factor("2").unwrap(), 2.0);
        assert!(scale_factor("0").is_err() && scale_factor("-1").is_err() && scale_factor("inf").is_err());
    }

    #[test]
    fn median_of_calibrations() {
        let c = |ns| Calibration {
            ns_per_iter: ns,
            min_ns_per_iter: ns,
            median_ns_per_iter: ns,
            max_ns_per_iter: ns,
            trial_iters: 1,
            trials: 1,
        };
        assert_eq!(median_ns_per_iter(&[]), None);
        assert_eq!(median_ns_per_iter(&[c(3.0), c(1.0), c(2.0)]), Some(2.0));
        assert_eq!(median_ns_per_iter(&[c(4.0), c(1.0), c(2.0), c(3.0)]), Some(2.5));
    }
}
