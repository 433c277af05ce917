//! Sampled lock holds and hand-overs, timed with the TSC, classified as normal or stretched.
//!
//! Why: a lock that collapses under vCPU overcommit loses its time either to a preempted holder
//! (the critical section takes a host time slice instead of its calibrated length) or to a
//! preempted next owner (the lock was handed to a waiter whose vCPU is not running, so it sits
//! free). This module measures both on a sample of acquisitions, inside the guest, per run.
//!
//! - Clock: the TSC (`rdtsc`, a few cycles natively, no syscall; guests run on it). Its rate is
//!   measured against CLOCK_MONOTONIC before the run and again after it ([`TscCalibration`]);
//!   a rate that moved by more than [`MAX_TSC_RATE_CHANGE`] makes the figures null with a reason.
//! - Hold: TSC read right after the lock is owned and again just before the release. Stretched
//!   when longer than the calibrated hold by more than the threshold.
//! - Hand-over: every release (while sampling is on) stores its TSC in a cell protected by the
//!   lock itself; a sampled acquisition that had to wait (its try_lock failed) reads that cell
//!   right after owning the lock: hand-over = now − the previous owner's release. Counted only
//!   when that release came after this thread started waiting (so a waiter was queued when it
//!   happened); stretched when longer than the threshold.
//! - Split: on a stretched sample the thread's context-switch counts (getrusage RUSAGE_THREAD)
//!   are compared with a reading taken before the acquisition attempt. A rise means the guest
//!   scheduler switched the thread out somewhere in that window (guest preemption, or a sleep for
//!   sleeping locks); none means the guest never took the CPU from the thread, so the time went
//!   where the guest cannot see: the host took the vCPU (or, far less likely at this threshold,
//!   a long interrupt handler ran). Only sampled acquisitions read the counts before, and only
//!   stretched ones read them after: one syscall per sample, two per stretched one.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::metrics::{Ctxsw, new_latency_histogram};

/// Fewest stretched samples from which a 99th percentile of their lengths is reported (below
/// it the "p99" is one of the few largest samples).
pub const MIN_SAMPLES_FOR_P99: u64 = 100;

/// 1 in 64 acquisitions: at 1-4 µs per lock cycle under TCG (0.1-0.5 µs natively) a 3 s run
/// gives 10^4-10^5 samples, and the two clock reads plus one getrusage per sample cost about
/// 1-3 % of the cycle time (measured: see the issue 23 note).
pub const DEFAULT_SAMPLE_RATE: f64 = 1.0 / 64.0;

/// 50 µs: a guest's timer tick costs 1-10 µs natively and 10-30 µs with a VM exit, an
/// interrupt under TCG tens of µs; a host preemption costs a host time slice (0.75-3 ms with
/// CFS/EEVDF defaults). 50 µs sits above the first and well below the second, so a stretched
/// sample is a preemption, not noise.
pub const DEFAULT_STRETCH_THRESHOLD_NS: u64 = 50_000;

/// Largest accepted change of the TSC rate (against CLOCK_MONOTONIC) between the calibrations
/// before and after the run.
pub const MAX_TSC_RATE_CHANGE: f64 = 0.02;

/// How long each TSC calibration sleeps between its two readings.
pub const TSC_CALIBRATION_WINDOW: Duration = Duration::from_millis(20);

/// The clock's current tick count.
#[inline(always)]
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions on x86-64 (user mode may read it unless CR4.TSD,
        // which Linux does not set by default). Not serialising: it may run a few dozen cycles
        // early or late, nothing against a threshold of tens of µs.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        monotonic_ns()
    }
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the struct; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A measurement of the TSC's rate against CLOCK_MONOTONIC.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TscCalibration {
    /// Ticks per second.
    pub hz: f64,
    /// CLOCK_MONOTONIC time between the two readings, ns.
    pub window_ns: u64,
    /// Sum of the two monotonic-clock pairs' spreads around their TSC reads, ns: the rate is
    /// known to about this / `window_ns`.
    pub read_spread_ns: u64,
}

impl TscCalibration {
    /// Reads (monotonic, TSC, monotonic), sleeps `window`, reads again.
    pub fn measure(window: Duration) -> Self {
        let read = || {
            let a = monotonic_ns();
            let t = ticks();
            let b = monotonic_ns();
            (a, t, b)
        };
        let (a0, t0, b0) = read();
        std::thread::sleep(window);
        let (a1, t1, b1) = read();
        let mid = |a: u64, b: u64| a / 2 + b / 2;
        let window_ns = mid(a1, b1).saturating_sub(mid(a0, b0)).max(1);
        Self {
            hz: t1.wrapping_sub(t0) as f64 * 1e9 / window_ns as f64,
            window_ns,
            read_spread_ns: (b0 - a0) + (b1 - a1),
        }
    }
}

/// The sampler's settings (from the lock workload's arguments).
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// One acquisition in this many (per thread) is sampled.
    pub every: u64,
    pub threshold_ns: u64,
    /// The calibrated hold (hold iterations × ns per iteration), ns.
    pub calibrated_hold_ns: f64,
    pub tsc_hz: f64,
}

impl Settings {
    /// The sampling period for a rate in (0, 1]: the nearest whole period.
    pub fn every_for(rate: f64) -> u64 {
        (1.0 / rate).round().max(1.0) as u64
    }
}

/// What a sampled acquisition noted before trying the lock.
#[derive(Debug, Clone, Copy)]
pub struct Before {
    ticks: u64,
    ctxsw: Ctxsw,
}

impl Before {
    pub fn now() -> Self {
        Self {
            ctxsw: Ctxsw::this_thread(),
            ticks: ticks(),
        }
    }
}

/// One sampled lock cycle, in ticks.
#[derive(Debug, Clone, Copy)]
pub struct Cycle {
    pub before: Before,
    /// The try_lock failed.
    pub waited: bool,
    /// Read right after the lock was owned.
    pub entered: u64,
    /// The previous owner's release, read under the lock (0: none yet).
    pub previous_release: u64,
    /// Read just before this release.
    pub released: u64,
}

/// Counts of one kind of sample (holds or hand-overs) in one thread or one run.
#[derive(Debug, Clone)]
pub struct Tally {
    pub samples: u64,
    pub stretched: u64,
    /// Stretched samples during which the thread's context-switch counts rose.
    pub stretched_guest: u64,
    /// Time beyond the normal length in stretched samples, ns (see [`Stretch::lost_ns_estimate`]).
    pub lost_ns: f64,
    /// Lengths of every sample, ns.
    pub all: Histogram<u64>,
    /// Lengths of stretched samples, ns.
    pub stretched_len: Histogram<u64>,
}

impl Default for Tally {
    fn default() -> Self {
        Self {
            samples: 0,
            stretched: 0,
            stretched_guest: 0,
            lost_ns: 0.0,
            all: new_latency_histogram(),
            stretched_len: new_latency_histogram(),
        }
    }
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.samples += other.samples;
        self.stretched += other.stretched;
        self.stretched_guest += other.stretched_guest;
        self.lost_ns += other.lost_ns;
        // Same bounds on both sides: adding cannot fail.
        let _ = self.all.add(&other.all);
        let _ = self.stretched_len.add(&other.stretched_len);
    }
}

/// One thread's samples.
#[derive(Debug, Clone, Default)]
pub struct ThreadSamples {
    pub holds: Tally,
    pub handovers: Tally,
    /// Waited acquisitions whose previous release came before the wait began (the lock was
    /// released and taken by someone else between; e.g. a weak CAS failing spuriously): no
    /// hand-over to this thread happened while it was queued, so none is counted.
    pub not_handed_over: u64,
    /// Hand-overs whose release read later on the TSC than the entry (TSCs of two CPUs apart).
    pub clock_behind: u64,
}

/// Per thread: decides which acquisitions are sampled and classifies them.
pub struct Sampler {
    settings: Settings,
    countdown: u64,
    ns_per_tick: f64,
    pub out: ThreadSamples,
}

impl Sampler {
    pub fn new(settings: Settings) -> Self {
        Self {
            settings,
            countdown: 1,
            ns_per_tick: 1e9 / settings.tsc_hz,
            out: ThreadSamples::default(),
        }
    }

    /// Whether this acquisition is sampled (the first, then one in `every`).
    #[inline(always)]
    pub fn due(&mut self) -> bool {
        self.countdown -= 1;
        if self.countdown == 0 {
            self.countdown = self.settings.every;
            true
        } else {
            false
        }
    }

    /// Classifies one sampled cycle; reads the thread's context switches again only when the
    /// hold or the hand-over was stretched.
    pub fn record(&mut self, c: &Cycle) {
        let threshold = self.settings.threshold_ns as f64;
        let hold_ns = c.released.saturating_sub(c.entered) as f64 * self.ns_per_tick;
        let excess = hold_ns - self.settings.calibrated_hold_ns;
        let hold_stretched = excess > threshold;
        let handover_ns = if !c.waited || c.previous_release == 0 {
            None
        } else if c.previous_release < c.before.ticks {
            self.out.not_handed_over += 1;
            None
        } else if c.entered < c.previous_release {
            self.out.clock_behind += 1;
            None
        } else {
            Some((c.entered - c.previous_release) as f64 * self.ns_per_tick)
        };
        let handover_stretched = handover_ns.is_some_and(|h| h > threshold);
        let switched = (hold_stretched || handover_stretched).then(|| {
            let d = Ctxsw::this_thread().since(c.before.ctxsw);
            d.voluntary + d.involuntary > 0
        });
        let switched = switched.unwrap_or(false);

        let h = &mut self.out.holds;
        h.samples += 1;
        let _ = h.all.record((hold_ns as u64).max(1));
        if hold_stretched {
            h.stretched += 1;
            h.stretched_guest += u64::from(switched);
            h.lost_ns += excess;
            let _ = h.stretched_len.record((hold_ns as u64).max(1));
        }
        if let Some(ns) = handover_ns {
            let o = &mut self.out.handovers;
            o.samples += 1;
            let _ = o.all.record((ns as u64).max(1));
            if handover_stretched {
                o.stretched += 1;
                o.stretched_guest += u64::from(switched);
                o.lost_ns += ns;
                let _ = o.stretched_len.record((ns as u64).max(1));
            }
        }
    }
}

/// Lengths of stretched samples, ns.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Lengths {
    pub count: u64,
    pub p50_ns: u64,
    /// Only from at least [`MIN_SAMPLES_FOR_P99`] stretched samples (else null).
    pub p99_ns: Option<u64>,
    pub max_ns: u64,
}

impl Lengths {
    fn of(h: &Histogram<u64>) -> Option<Self> {
        (!h.is_empty()).then(|| Self {
            count: h.len(),
            p50_ns: h.value_at_quantile(0.5),
            p99_ns: (h.len() >= MIN_SAMPLES_FOR_P99).then(|| h.value_at_quantile(0.99)),
            max_ns: h.max(),
        })
    }
}

/// One kind of sample over a run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Stretch {
    pub samples: u64,
    pub stretched: u64,
    /// stretched / samples.
    pub stretched_share: f64,
    /// Σ over stretched samples of the time lost × the sampling period: an estimate of the
    /// run's total (holds: the length beyond the calibrated hold; hand-overs: the whole
    /// hand-over, the lock sat with no one running in it), ns.
    pub lost_ns_estimate: f64,
    /// lost_ns_estimate / the run's elapsed time (the lock is one resource: its holds and
    /// hand-overs are serial, so this is the share of the run the lock lost to them).
    pub lost_share: f64,
    /// Stretched samples during which the guest switched the thread out (guest preemption,
    /// or a sleep), and those with no switch (the host took the vCPU).
    pub stretched_guest: u64,
    pub stretched_vcpu: u64,
    /// Median length of every sample (normal ones included), ns.
    pub p50_ns: u64,
    /// Stretched samples' lengths; null when none was stretched.
    pub stretched_len: Option<Lengths>,
}

impl Stretch {
    fn of(t: &Tally, every: u64, elapsed_ns: u64) -> Option<Self> {
        (t.samples > 0).then(|| {
            let lost = t.lost_ns * every as f64;
            Self {
                samples: t.samples,
                stretched: t.stretched,
                stretched_share: t.stretched as f64 / t.samples as f64,
                lost_ns_estimate: lost,
                lost_share: lost / elapsed_ns.max(1) as f64,
                stretched_guest: t.stretched_guest,
                stretched_vcpu: t.stretched - t.stretched_guest,
                p50_ns: t.all.value_at_quantile(0.5),
                stretched_len: Lengths::of(&t.stretched_len),
            }
        })
    }
}

/// The `preemption` object of a lock report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PreemptionReport {
    /// The requested share of acquisitions sampled, and the period used (1 / rate, rounded).
    pub sample_rate: f64,
    pub sample_every: u64,
    pub sampling: String,
    pub threshold_ns: u64,
    /// What a hold is compared with: the calibrated hold, ns.
    pub calibrated_hold_ns: f64,
    pub tsc_before: TscCalibration,
    pub tsc_after: TscCalibration,
    pub holds: Option<Stretch>,
    pub holds_unavailable: Option<String>,
    pub handovers: Option<Stretch>,
    pub handovers_unavailable: Option<String>,
    pub not_handed_over: u64,
    pub clock_behind: u64,
    /// How stretched samples were split into guest and vCPU preemption.
    pub split: String,
}

pub const SPLIT_METHOD: &str = "getrusage(RUSAGE_THREAD) context switches read before the acquisition attempt and, on a stretched sample, after the release: \
     a rise = guest (the guest switched the thread out or it slept, possibly while waiting rather than holding, so guest is an upper bound); \
     none = vcpu (the guest kept running the thread, the time went to the host taking the vCPU)";

/// Builds the report from every thread's samples; `elapsed_ns` is the run's window.
pub fn report(
    settings: &Settings,
    rate: f64,
    threads: &[ThreadSamples],
    elapsed_ns: u64,
    tsc_before: TscCalibration,
    tsc_after: TscCalibration,
) -> PreemptionReport {
    let mut all = ThreadSamples::default();
    for t in threads {
        all.holds.add(&t.holds);
        all.handovers.add(&t.handovers);
        all.not_handed_over += t.not_handed_over;
        all.clock_behind += t.clock_behind;
    }
    let change = tsc_after.hz / tsc_before.hz - 1.0;
    let clock_bad = (!change.is_finite() || change.abs() > MAX_TSC_RATE_CHANGE).then(|| {
        format!(
            "the TSC rate moved {:+.1} % against CLOCK_MONOTONIC over the run ({:.0} -> {:.0} Hz; at most {:.0} % accepted)",
            change * 100.0,
            tsc_before.hz,
            tsc_after.hz,
            MAX_TSC_RATE_CHANGE * 100.0
        )
    });
    let every = settings.every;
    let (holds, holds_unavailable) = match (&clock_bad, Stretch::of(&all.holds, every, elapsed_ns)) {
        (Some(why), _) => (None, Some(why.clone())),
        (None, Some(s)) => (Some(s), None),
        (None, None) => (
            None,
            Some("no acquisition was sampled (fewer operations than the sampling period)".into()),
        ),
    };
    let (handovers, handovers_unavailable) =
        match (&clock_bad, Stretch::of(&all.handovers, every, elapsed_ns)) {
            (Some(why), _) => (None, Some(why.clone())),
            (None, Some(s)) => (Some(s), None),
            (None, None) => (
                None,
                Some("no sampled acquisition waited for a release (no contention, e.g. one thread)".into()),
            ),
        };
    PreemptionReport {
        sample_rate: rate,
        sample_every: every,
        sampling: format!(
            "1 in {every} acquisitions per thread (the first, then every {every}th), contended or not; hand-overs only from sampled acquisitions whose try_lock failed \
             and whose previous release came after the wait began; every release stores its TSC while sampling is on"
        ),
        threshold_ns: settings.threshold_ns,
        calibrated_hold_ns: settings.calibrated_hold_ns,
        tsc_before,
        tsc_after,
        holds,
        holds_unavailable,
        handovers,
        handovers_unavailable,
        not_handed_over: all.not_handed_over,
        clock_behind: all.clock_behind,
        split: SPLIT_METHOD.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsc_rate_agrees_with_the_monotonic_clock() {
        let a = TscCalibration::measure(Duration::from_millis(20));
        let b = TscCalibration::measure(Duration::from_millis(20));
        assert!(a.hz > 1e6, "{a:?}");
        assert!((b.hz / a.hz - 1.0).abs() < 0.05, "{a:?} {b:?}");
        // A 20 ms sleep measured through the TSC lands near 20 ms of CLOCK_MONOTONIC.
        let t0 = ticks();
        let m0 = monotonic_ns();
        std::thread::sleep(Duration::from_millis(20));
        let secs = (ticks() - t0) as f64 / a.hz;
        let mono = (monotonic_ns() - m0) as f64 / 1e9;
        assert!((secs / mono - 1.0).abs() < 0.05, "{secs} vs {mono}");
    }

    fn settings() -> Settings {
        Settings {
            every: 4,
            threshold_ns: 50_000,
            calibrated_hold_ns: 1_000.0,
            tsc_hz: 1e9, // one tick = one ns, for readable cases
        }
    }

    fn cycle(before: u64, waited: bool, previous_release: u64, entered: u64, released: u64) -> Cycle {
        Cycle {
            before: Before {
                ticks: before,
                ctxsw: Ctxsw::this_thread(),
            },
            waited,
            entered,
            previous_release,
            released,
        }
    }

    #[test]
    fn samples_one_in_every_starting_with_the_first() {
        let mut s = Sampler::new(settings());
        let due: Vec<bool> = (0..9).map(|_| s.due()).collect();
        assert_eq!(due, [true, false, false, false, true, false, false, false, true]);
        assert_eq!(Settings::every_for(1.0 / 64.0), 64);
        assert_eq!(Settings::every_for(1.0), 1);
        assert_eq!(Settings::every_for(0.3), 3);
    }

    #[test]
    fn holds_and_handovers_are_classified_against_the_threshold() {
        let mut s = Sampler::new(settings());
        // Normal hold (1.2 µs), normal hand-over (500 ns after a release made while waiting).
        s.record(&cycle(100, true, 1_000, 1_500, 2_700));
        // Stretched hold: 1 µs calibrated + 60 µs; not waited, so no hand-over.
        s.record(&cycle(10_000, false, 9_000, 10_100, 71_100));
        // Stretched hand-over of 80 µs, normal hold.
        s.record(&cycle(100_000, true, 150_000, 230_000, 231_000));
        // Waited, but the previous release was before the wait began: no hand-over.
        s.record(&cycle(300_000, true, 250_000, 300_500, 301_500));
        // Release later than entry on the TSC: counted as clock behind, no hand-over.
        s.record(&cycle(400_000, true, 400_900, 400_800, 401_800));
        let o = &s.out;
        assert_eq!(o.holds.samples, 5);
        assert_eq!(o.holds.stretched, 1);
        assert!((o.holds.lost_ns - 60_000.0).abs() < 1.0);
        assert_eq!(o.handovers.samples, 2);
        assert_eq!(o.handovers.stretched, 1);
        assert!((o.handovers.lost_ns - 80_000.0).abs() < 1.0);
        assert_eq!(o.not_handed_over, 1);
        assert_eq!(o.clock_behind, 1);
        // The thread was not switched out during this test's few µs: both count as vCPU.
        assert_eq!(o.holds.stretched_guest + o.handovers.stretched_guest, 0);

        let tsc = TscCalibration {
            hz: 1e9,
            window_ns: 1,
            read_spread_ns: 0,
        };
        let r = report(
            &settings(),
            0.25,
            &[o.clone(), o.clone()],
            10_000_000,
            tsc.clone(),
            tsc.clone(),
        );
        let h = r.holds.unwrap();
        assert_eq!((h.samples, h.stretched, h.stretched_vcpu), (10, 2, 2));
        assert!((h.stretched_share - 0.2).abs() < 1e-12);
        // 2 × 60 µs × period 4 over 10 ms.
        assert!((h.lost_share - 0.048).abs() < 1e-9, "{h:?}");
        let len = h.stretched_len.unwrap();
        assert!(len.p99_ns.is_none() && (len.max_ns as f64 - 61_000.0).abs() < 100.0);
        let o = r.handovers.unwrap();
        assert_eq!((o.samples, o.stretched), (4, 2));
        assert!((o.lost_share - 0.064).abs() < 1e-9);
        assert_eq!(r.not_handed_over, 2);

        // A TSC whose rate moved makes both null with the reason.
        let moved = TscCalibration {
            hz: 1.1e9,
            ..tsc.clone()
        };
        let r = report(
            &settings(),
            0.25,
            &[s.out.clone()],
            10_000_000,
            tsc.clone(),
            moved,
        );
        assert!(r.holds.is_none() && r.handovers.is_none());
        assert!(r.holds_unavailable.unwrap().contains("TSC rate moved"));
        // No waited sample: hand-overs null with a reason, holds measured.
        let mut one = Sampler::new(settings());
        one.record(&cycle(0, false, 0, 10, 1_010));
        let r = report(&settings(), 0.25, &[one.out], 10_000_000, tsc.clone(), tsc);
        assert!(r.holds.is_some() && r.handovers.is_none());
        assert!(
            r.handovers_unavailable
                .unwrap()
                .contains("no sampled acquisition waited")
        );
    }
}
