//! The busy work as it ran: sampled in-run holds and gaps, as the TSC read them, held to what
//! was asked.
//!
//! Why: the work is spun to the TSC ([`crate::busywork`]), so each interval's two ends are TSC
//! reads that the spin takes anyway: the first right before it (the hold's, the lock already
//! owned; the gap's, right after the release) and the last its own final read. What lies
//! between is the interval, nothing else, so no timing cost is to be taken off. What the check
//! catches is the work not being what was asked: a spin that does not land where it should (a
//! clock read too coarse for the asked length, a pace it cannot follow), the test-only
//! `--debug-scale-*` factors, or an accounting error of the spinner's.
//!
//! - Timed: 1 in [`TIMED_EVERY`] cycles per thread records its hold and its gap: the cycles
//!   halfway between the preemption sampler's (which read the thread's context switches with a
//!   system call before they try the lock), so the timed ones are ordinary cycles. Under TCG
//!   the code right after a system call runs slower for a while (the emulator's caches of
//!   translated code and its chains between blocks start cold): the sampler's cycles read
//!   200 ns holds and gaps x1.12 the others' (qemu-x86_64, 2026-12-06).
//! - Judged by the typical interval: the median ([`JUDGED_QUANTILE`]); ratio = median / asked,
//!   the 10th and 90th percentiles beside it. A hold that a preemption stretched (rare: 0.01-0.3 %
//!   of holds under TCG at 2x) sits in the upper tail; a slow spell of the host's CPU no longer
//!   stretches anything, so the median is the undisturbed length. (Before the work was spun to
//!   the TSC it was a calibrated count of iterations, whose median moved with the host's speed
//!   state, so the 10th percentile was judged.)
//! - Judged as `|ln(ratio)| <= ln(1 + --max-work-error)`, so the default 0.10 accepts an
//!   interval within [asked / 1.1, asked × 1.1], too short and too long alike; or, where one
//!   read of the TSC costs more than that tolerance of the asked length, within one read of
//!   it: an interval ends on a read, so it can be neither made nor timed closer (a read's cost
//!   is measured in the run, two reads back to back in the timed cycles: under TCG, with two
//!   vCPUs of a guest reading the TSC as fast as a lock workload does, 100-250 ns, since the
//!   emulator takes one lock of its own for every read; natively and under KVM 10-30 ns).
//! - Not judged, with the reason in words (the ratio is then null, never 0, and the check passes
//!   saying so): timing switched off, fewer than [`MIN_SAMPLES`] samples, or nothing asked (0 ns).
//!   Whether the TSC's rate held over the run is the lock workload's `tsc_rate_held` check.
//!
//! Cost to the run: three histogram records once per 64 cycles (the holds' and gaps' ends are
//! TSC reads the spins take anyway).

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::metrics::new_latency_histogram;
use crate::preempt_sample::ticks;

/// Default of `--max-work-error`: a typical hold or gap within a factor 1.1 of the asked one.
pub const MAX_WORK_ERROR: f64 = 0.10;

/// The percentile of the timed intervals a run's work is judged by (see the module notes).
pub const JUDGED_QUANTILE: f64 = 0.5;

/// One cycle in this many per thread is timed (see the module notes).
pub const TIMED_EVERY: u64 = 64;

/// Fewest samples to judge by: the median of 50 lies between their 36th and 64th percentiles
/// with 95 % confidence, and the undisturbed intervals of a run are nearly all one length.
pub const MIN_SAMPLES: u64 = 50;

/// What a timed interval of a lock run is made of, for the report.
pub const METHOD: &str = "1 in 64 cycles per thread (halfway between the preemption sampler's): its hold from the TSC read right before \
     the hold's spin to the spin's own last read, its gap the same way from right after the release; judged by the median, ratio = \
     median / asked (10th and 90th percentiles beside)";

/// One thread's timed holds and gaps (work inside and outside, for the mutex workload), and the
/// loop's pace at the same cycles.
#[derive(Debug, Clone)]
pub struct WorkSamples {
    /// Holds, ns.
    pub holds: Histogram<u64>,
    /// Gaps, ns.
    pub gaps: Histogram<u64>,
    /// The spinners' pace, picoseconds per iteration.
    pub pace_ps: Histogram<u64>,
    /// What one read of the TSC took, ns: two reads back to back.
    pub clock_reads: Histogram<u64>,
}

impl Default for WorkSamples {
    fn default() -> Self {
        Self {
            holds: new_latency_histogram(),
            gaps: new_latency_histogram(),
            pace_ps: new_latency_histogram(),
            clock_reads: new_latency_histogram(),
        }
    }
}

impl WorkSamples {
    /// A timed cycle's hold and gap (in ticks) and the pace its spinners follow; and, read now,
    /// what a read of the clock costs at this moment of the run.
    pub fn record(&mut self, (hold, gap): (u64, u64), ns_per_tick: f64, pace_ns_per_iter: f64) {
        let a = ticks();
        let b = ticks();
        record(&mut self.holds, hold as f64 * ns_per_tick);
        record(&mut self.gaps, gap as f64 * ns_per_tick);
        record(&mut self.pace_ps, pace_ns_per_iter * 1e3);
        record(&mut self.clock_reads, b.wrapping_sub(a) as f64 * ns_per_tick);
    }

    pub fn add(&mut self, other: &WorkSamples) {
        // Same bounds on both sides: adding cannot fail.
        let _ = self.holds.add(&other.holds);
        let _ = self.gaps.add(&other.gaps);
        let _ = self.pace_ps.add(&other.pace_ps);
        let _ = self.clock_reads.add(&other.clock_reads);
    }

    /// The median read of the clock in the run, ns; None without a timed cycle.
    pub fn clock_read_ns(&self) -> Option<f64> {
        (!self.clock_reads.is_empty()).then(|| self.clock_reads.value_at_quantile(0.5) as f64)
    }
}

/// Records `value` (ns, or ps) rounded, at least 1.
pub fn record(h: &mut Histogram<u64>, value: f64) {
    let _ = h.record((value.round() as u64).max(1));
}

/// One kind of interval (hold or gap) as it ran, against what was asked.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TimedWork {
    /// The asked length (`--hold-ns`, `--gap-ns`), ns.
    pub asked_ns: u64,
    /// Intervals timed.
    pub samples: u64,
    /// Their 10th, 50th and 90th percentile, ns (null with too few samples).
    pub p10_ns: Option<f64>,
    pub p50_ns: Option<f64>,
    pub p90_ns: Option<f64>,
    /// What one read of the TSC took in the run, ns (the median of two reads back to back in
    /// the timed cycles): the resolution of the work, which cannot be made or read closer to
    /// its asked length than one read. Natively 10-30 ns; under TCG 20-45 ns with one vCPU
    /// reading it, and 100-250 ns with two vCPUs of a guest reading it as fast as a lock
    /// workload does (the emulator serialises every read of the TSC on one lock of its own).
    pub clock_read_ns: Option<f64>,
    /// p50_ns / asked_ns; null when the run cannot judge it, with `unavailable` saying why.
    pub ratio: Option<f64>,
    pub unavailable: Option<String>,
}

impl TimedWork {
    /// Figures from the run's merged samples. `timing_off` is why nothing was timed in this
    /// run, if so; `what` names the interval in the reasons ("hold", "gap").
    pub fn of(
        what: &str,
        asked_ns: u64,
        timed: &Histogram<u64>,
        clock_read_ns: Option<f64>,
        timing_off: Option<&str>,
    ) -> Self {
        let mut w = Self {
            asked_ns,
            samples: timed.len(),
            p10_ns: None,
            p50_ns: None,
            p90_ns: None,
            clock_read_ns,
            ratio: None,
            unavailable: None,
        };
        if let Some(why) = timing_off {
            w.unavailable = Some(why.to_string());
            return w;
        }
        if timed.len() < MIN_SAMPLES {
            w.unavailable = Some(format!(
                "too few samples to judge by: {} timed {what} intervals (at least {MIN_SAMPLES})",
                w.samples
            ));
            return w;
        }
        let at = |q: f64| timed.value_at_quantile(q) as f64;
        (w.p10_ns, w.p50_ns, w.p90_ns) = (Some(at(0.10)), Some(at(JUDGED_QUANTILE)), Some(at(0.90)));
        if asked_ns == 0 {
            w.unavailable = Some(format!("no {what} was asked (0 ns): nothing to judge"));
        } else {
            w.ratio = Some(at(JUDGED_QUANTILE) / asked_ns as f64);
        }
        w
    }
}

/// The `work_as_run` object of a lock report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WorkAsRun {
    pub hold: TimedWork,
    pub gap: TimedWork,
    /// How the intervals were read ([`METHOD`]).
    pub method: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(values: &[(u64, u64)]) -> Histogram<u64> {
        let mut h = new_latency_histogram();
        for &(v, n) in values {
            h.record_n(v, n).unwrap();
        }
        h
    }

    #[test]
    fn the_typical_interval_against_the_asked_length() {
        // 2000 ns holds, a few landing a read early or late, a few stretched by preemption.
        let timed = hist(&[(1_960, 100), (2_000, 700), (2_040, 150), (60_000, 50)]);
        let w = TimedWork::of("hold", 2_000, &timed, Some(20.0), None);
        assert_eq!(w.samples, 1000);
        assert_eq!(
            (w.p10_ns, w.p50_ns, w.p90_ns),
            (Some(1_960.0), Some(2_000.0), Some(2_040.0))
        );
        assert_eq!(w.ratio, Some(1.0));
        assert!(w.unavailable.is_none());
        // Half as long as asked reads as 0.5.
        let w = TimedWork::of("hold", 4_000, &timed, Some(20.0), None);
        assert_eq!(w.ratio, Some(0.5));
    }

    #[test]
    fn what_cannot_be_judged_is_null_with_the_reason() {
        let timed = hist(&[(417, 900)]);
        let w = TimedWork::of(
            "hold",
            200,
            &timed,
            None,
            Some("timing switched off (--no-hold-sampling)"),
        );
        assert!(w.ratio.is_none() && w.p50_ns.is_none() && w.p10_ns.is_none());
        assert!(w.unavailable.unwrap().contains("--no-hold-sampling"));

        let few = hist(&[(417, MIN_SAMPLES - 1)]);
        let w = TimedWork::of("hold", 200, &few, None, None);
        assert!(w.ratio.is_none() && w.p50_ns.is_none());
        let why = w.unavailable.unwrap();
        assert!(
            why.contains("49 timed hold intervals") && why.contains("at least 50"),
            "{why}"
        );

        let w = TimedWork::of("gap", 0, &timed, None, None);
        assert!(w.ratio.is_none() && w.p50_ns == Some(417.0));
        assert!(w.unavailable.unwrap().contains("no gap was asked"));
    }

    #[test]
    fn samples_add_up_across_threads() {
        let mut s = WorkSamples::default();
        for _ in 0..200 {
            s.record((4_800, 2_400), 1.0 / 2.4, 0.36);
        }
        let mut all = WorkSamples::default();
        all.add(&s);
        all.add(&s);
        assert_eq!(
            (all.holds.len(), all.gaps.len(), all.pace_ps.len()),
            (400, 400, 400)
        );
        assert_eq!(all.holds.value_at_quantile(0.5), 2_000);
        assert_eq!(all.gaps.value_at_quantile(0.5), 1_000);
        assert_eq!(all.pace_ps.value_at_quantile(0.5), 360);
    }
}
