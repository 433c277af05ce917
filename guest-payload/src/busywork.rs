//! Calibrated busy work: "hold the lock for H ns" as a fixed amount of CPU work.
//!
//! Work is counted in loop iterations, not measured against a clock, so a vCPU preempted in the
//! middle of a critical section still owes the same work when it resumes — which is exactly
//! how a real critical section behaves under lock-holder preemption.
//!
//! The iteration count is only as true as the calibration that chose it, so a calibration is
//! made where the work runs and when it runs ([`calibrate`], called by the workers themselves
//! just before the start gate and again after the run) and is reported. The run itself is then
//! judged by its work as it ran ([`crate::work_as_run`]: the in-run holds' undisturbed length, timed, against
//! the asked hold), so the calibration's job is to predict the loop's speed *in the run*. What
//! that took:
//! - the calibrated loop and the measured loop were two inlined copies of the same source, and
//!   an emulator (or a CPU front end) runs two copies at different speeds: [`spin_iters`] is
//!   one out-of-line function, so the calibrated machine code *is* the code the workload runs;
//! - a trial timed by the wall clock also counts the time its thread was preempted (by the
//!   run's other threads, or anything else on the machine): trials are timed by the thread's
//!   own CPU clock. (Inside a guest that clock still runs while the host preempts the vCPU,
//!   which the guest cannot see; see the statistic below.)
//! - the load: the calibrating workers calibrate all at once, with busy work (not sleeps)
//!   before and between trials, so the CPUs are as busy as in the run. Serialised one at a
//!   time, each calibrated beside idle CPUs while the run has every worker busy, and where CPUs
//!   share a core or a power budget (SMT siblings, turbo; TCG's vCPU threads on a shared host)
//!   the loop's speed depends on what the others do. (On this project's VM the other vCPU's
//!   busy loop, PAUSE spin or idleness did not move it; the host's own load did, between 0.27
//!   and 0.50-0.56 ns per iteration for tens of ms to seconds, measured 2026-12-04.)
//! - the statistic: the 10th percentile ([`UNDISTURBED_QUANTILE`], the 3rd fastest) of
//!   [`TRIALS`] trials, each about [`TRIAL_TARGET`] of CPU (at most about 1 ms even at half the
//!   sizing's speed), spread evenly over [`SPAN`]. The run is judged by its undisturbed
//!   intervals, the 10th percentile of the sampled holds and gaps ([`crate::work_as_run`]): a
//!   hold that a preemption (in the guest or of the vCPU by the host) or a slow spell of the
//!   host lands in sits in the upper part of the distribution, and so does a trial (which the
//!   guest cannot see: its CPU clock runs while the host preempts the vCPU). So the calibration
//!   and the check read the same part of the loop's distribution of speeds, over 250 ms and
//!   over the run. Fastest, 10th percentile, median and slowest are all reported. (Before the
//!   span, natively on this VM with other work running, in-run ns per iteration / fastest of 9
//!   trials within 10 ms was p50 1.00-1.02, 54 runs, 2026-12-04.)
//! - the span: this VM's host switches between two speeds x1.7-1.9 apart, for 40 ms to 2 s at a
//!   time (`ocrig doctor`'s host speed line). Under TCG a guest's loop shows it as a floor of
//!   1.63 ns per iteration and spells of 1.7-3.5: of 52 calibrations of 9 trials within 10 ms
//!   (2-vCPU guests, ticket-vs-tas at 1x, 2026-12-04), about half never reached the floor, so
//!   before and after disagreed by up to x1.6 and the holds chosen from a slow one ran at x0.7
//!   of the asked length whenever the host was fast. Trials spread over 250 ms reach the floor
//!   in nearly every calibration (the figures are in the sweep notes); 2 x 250 ms per run is
//!   the price.
//! - a few milliseconds at process start are a lucky or unlucky moment (in a guest, QEMU's I/O
//!   thread is still busy with the SSH traffic that started the payload): the first calibration
//!   of a process waits [`SETTLE`] first, busy, and every calibration started meanwhile waits
//!   for the same instant, so they all start together.

use std::hint::black_box;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::clock::thread_cpu_ns;

use serde::{Deserialize, Serialize};

/// CPU time one calibration trial aims at: long against the clock's resolution (microseconds
/// on an emulated HPET), short against a scheduler time slice (0.75-3 ms): half a millisecond,
/// so that a trial made at half the sizing's speed still stays within 1 ms.
pub const TRIAL_TARGET: Duration = Duration::from_micros(500);
/// Trials per calibration; the one at [`UNDISTURBED_QUANTILE`] is kept.
pub const TRIALS: usize = 25;
/// Where in the loop's distribution of speeds "undisturbed" is read, by the calibration (among
/// its trials) and by a run's checks (among its timed intervals, [`crate::work_as_run`]): the
/// 10th percentile, so both read the same part of the same distribution. Not the fastest: a
/// host can be fast for rare moments, which 25 trials over 250 ms find and a run's holds never
/// have (natively here the fastest of 25 made 1000 ns holds read 1141-1151 ns net in every run
/// while the gaps' 10th percentile read 991-1001, 2026-12-04).
pub const UNDISTURBED_QUANTILE: f64 = 0.10;
/// The wall time the trials are spread over, busy between them (so they sample different
/// moments of the host, and the CPUs stay as loaded as in the run: a sleep would hand them to
/// whatever else runs there). Long against the host's slow spells that a 10 ms calibration sat
/// wholly inside (see the module notes), short against a run of seconds.
pub const SPAN: Duration = Duration::from_millis(250);
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
    /// The trial at [`UNDISTURBED_QUANTILE`] (the 3rd fastest of 25; the fastest in reports made
    /// before): nanoseconds per [`spin_iters`] iteration when nothing disturbed it.
    pub ns_per_iter: f64,
    /// Fastest, median and slowest trial, ns per iteration (their ratios are the noise seen).
    pub min_ns_per_iter: f64,
    #[serde(default)]
    pub median_ns_per_iter: f64,
    pub max_ns_per_iter: f64,
    /// Iterations per trial (sized to take about [`TRIAL_TARGET`]).
    pub trial_iters: u64,
    pub trials: usize,
    /// Wall time from the first trial's start to the last one's end, ms (null in reports made
    /// before the trials were spread over [`SPAN`]).
    #[serde(default)]
    pub span_ms: Option<f64>,
}

/// The end of the process's settling time, set by the first calibration: every thread that
/// calibrates before it busy-waits until then, so all settle at once, as they will run.
static SETTLED_AT: OnceLock<Instant> = OnceLock::new();

/// Measures this thread's loop speed: sizes a trial to about [`TRIAL_TARGET`], then times
/// [`TRIALS`] trials spread over [`SPAN`] with busy work between them and keeps the one at
/// [`UNDISTURBED_QUANTILE`].
/// Every calibrating worker of a run calls it at the same time (no turns), so each trial runs
/// under the load the run will have. Takes about [`SPAN`] (plus what remains of [`SETTLE`] on
/// the first calls of the process).
pub fn calibrate() -> Calibration {
    let settled_at = *SETTLED_AT.get_or_init(|| Instant::now() + SETTLE);
    busy_until(settled_at);
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
    let start = Instant::now();
    for (i, slot) in per_iter.iter_mut().enumerate() {
        busy_until(start + SPAN.mul_f64(i as f64 / TRIALS as f64));
        let t = thread_cpu_ns();
        spin_iters(iters);
        *slot = thread_cpu_ns().saturating_sub(t).max(1) as f64 / iters as f64;
    }
    per_iter.sort_by(f64::total_cmp);
    let undisturbed = ((TRIALS - 1) as f64 * UNDISTURBED_QUANTILE).round() as usize;
    Calibration {
        ns_per_iter: per_iter[undisturbed],
        min_ns_per_iter: per_iter[0],
        median_ns_per_iter: per_iter[TRIALS / 2],
        max_ns_per_iter: per_iter[TRIALS - 1],
        trial_iters: iters,
        trials: TRIALS,
        span_ms: Some(start.elapsed().as_secs_f64() * 1e3),
    }
}

/// Runs the busy loop, untimed, until `until`: the load of a run, between and before trials.
fn busy_until(until: Instant) {
    while Instant::now() < until {
        spin_iters(10_000);
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
        assert!(c.min_ns_per_iter <= c.ns_per_iter && c.ns_per_iter <= c.median_ns_per_iter);
        assert!(c.min_ns_per_iter <= c.median_ns_per_iter && c.median_ns_per_iter <= c.max_ns_per_iter);
        assert!(c.trial_iters >= 1_000 && c.trials == TRIALS);
        // The trials are spread over the span: the last starts (TRIALS - 1) / TRIALS of it in.
        let span = c.span_ms.unwrap();
        let least = SPAN.as_secs_f64() * 1e3 * (TRIALS - 1) as f64 / TRIALS as f64;
        assert!(span >= least && span < least + 1_000.0, "{span} ms");
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
            span_ms: None,
        };
        assert_eq!(median_ns_per_iter(&[]), None);
        assert_eq!(median_ns_per_iter(&[c(3.0), c(1.0), c(2.0)]), Some(2.0));
        assert_eq!(median_ns_per_iter(&[c(4.0), c(1.0), c(2.0), c(3.0)]), Some(2.5));
    }
}
