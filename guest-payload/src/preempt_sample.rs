//! Lock holds and hand-overs timed with the TSC, stretched ones (preemptions) counted, timed
//! and split into vCPU and guest preemption by sampled context-switch readings.
//!
//! Why: a lock that collapses under vCPU overcommit loses its time either to a preempted holder
//! (the critical section takes a host time slice instead of its asked length) or to a
//! preempted next owner (the lock was handed to a waiter whose vCPU is not running, so it sits
//! free). This module measures both inside the guest, per run.
//!
//! - Clock: the TSC (`rdtsc`: a few cycles natively, no syscall; guests run on it). Its rate is
//!   measured against CLOCK_MONOTONIC before the run and again after it ([`TscCalibration`]);
//!   a rate that moved by more than [`MAX_TSC_RATE_CHANGE`] makes the figures null with a reason.
//! - Hold: every acquisition reads the TSC ([`ordered_ticks`]) right before its hold's spin,
//!   which ends on a read of its own ([`crate::busywork`]), nothing else between (so a sampled
//!   hold is the hold's work as it ran: [`crate::work_as_run`]). Stretched when longer than the
//!   run's own median hold (the sampled ones', timed the same way) by more than the threshold.
//! - Hand-over: every release stores its hold's end TSC in a cell protected by the lock itself;
//!   an acquisition that had to wait (its try_lock failed; it read the TSC then) reads that cell
//!   under the lock: hand-over = its own hold's start − the previous owner's hold's end, so it
//!   includes the release, the acquisition and both owners' few instructions of bookkeeping
//!   around their holds (the owner check and the protected update, nanoseconds). Counted only
//!   when that release came after the wait began (so a waiter was queued when it happened);
//!   stretched when longer than the run's median hand-over by more than the threshold.
//! - The run's medians are known only at its end, so each thread keeps every interval over a
//!   provisional limit that no counted run's median can be under (holds: the asked hold
//!   shrunk by the work check's bound, [`Settings::max_work_error`]; hand-overs: 0), and the
//!   report counts those over the run's limit ([`StretchLimit`]).
//!   Every hold and hand-over is timed (two TSC reads a cycle, a third on a contended one)
//!   rather than 1 in 64: stretched ones are rare (0.01-0.3 % under TCG) and long (0.1-30 ms),
//!   so a 1-in-64 sample sees a handful a run and its ×64 estimate of the time they cost swung
//!   from 0.1 % to 230 % of the run between runs of one cell (measured, issue 23).
//! - Sampling (`--hold-sample-rate`, default 1 in 64 acquisitions per thread): what costs a
//!   syscall. A sampled acquisition reads the thread's context-switch counts (getrusage
//!   RUSAGE_THREAD) before trying the lock, and records its hold and hand-over lengths in the
//!   distribution of normal ones. A stretched hold or hand-over reads the counts again and
//!   compares them with the latest reading (at most one sampling period of acquisitions
//!   earlier): a rise means the guest scheduler switched the thread out in that window (guest
//!   preemption, or a sleep for sleeping locks); none means the guest never took the CPU from
//!   the thread, so the time went where the guest cannot see: the host took the vCPU (or, far
//!   less likely at this threshold, a long interrupt handler ran).
//!   With `--split-runqueue-wait` a switch alone does not make it guest: after the host gives
//!   a vCPU back, the guest often switches the thread out for a moment (its clock jumped the
//!   whole stall), so the thread's runqueue wait in the guest (`/proc/thread-self/schedstat`),
//!   read with the counts, must cover at least half the interval ([`SPLIT_METHOD`]; a host
//!   stall of 30 ms read as guest with switches alone, 2026-12-05). Off by default for its
//!   cost to a fresh guest's first run ([`SPLIT_WITHOUT_SCHEDSTAT`]). The longest stretched ones are listed one by one with
//!   their time, vCPU and wait ([`Stretch::longest`]).
//! - Sliced runs ([`crate::slices`]): an arm's report is one merged from its slices' reports
//!   ([`PreemptionReport::merge_slices`]): counts and lost time summed, shares over the sums,
//!   medians the slices' medians, the longest listed on one window from the first slice's start
//!   to the last one's end, and each slice's own window kept (`window_parts`) so the host can
//!   measure over the arm's own time alone.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::metrics::{Ctxsw, new_latency_histogram};

/// Fewest stretched samples from which a 99th percentile of their lengths is reported (below
/// it the "p99" is one of the few largest samples).
pub const MIN_SAMPLES_FOR_P99: u64 = 100;

/// 1 in 64 acquisitions: one getrusage (about 1 µs natively, a few under TCG) per 64 lock
/// cycles of 0.4-4 µs is ~1 % of the time, and the split's window (from the latest reading to a
/// stretched interval) stays within 64 cycles, 25-250 µs, against 20-30 involuntary switches per
/// thread in a 3 s run (measured in 2-vCPU TCG guests): a switch falls in a window ~0.2 % of the
/// time, so the split is rarely wrong.
pub const DEFAULT_SAMPLE_RATE: f64 = 1.0 / 64.0;

/// 50 µs: a guest's timer tick costs 1-10 µs natively and 10-30 µs with a VM exit, an
/// interrupt under TCG tens of µs; a host preemption costs a host time slice (0.75-3 ms with
/// CFS/EEVDF defaults). 50 µs sits above the first and well below the second, so a stretched
/// sample is a preemption, not noise.
pub const DEFAULT_STRETCH_THRESHOLD_NS: u64 = 50_000;

/// Largest threshold accepted: 750 µs, the shortest default host time slice (EEVDF's base
/// slice); a longer threshold would miss the preemptions it is there to count.
pub const MAX_STRETCH_THRESHOLD_NS: u64 = 750_000;

/// How many of a run's longest stretched holds (and as many hand-overs) are listed one by one
/// ([`Stretch::longest`]): enough for a 3 s run preempted every host slice at 2x to list the
/// ones that cost most, few enough that the report stays a few KiB.
pub const LONGEST_KEPT: usize = 32;

/// Largest accepted change of the TSC rate (against CLOCK_MONOTONIC) between the calibrations
/// before and after the run.
pub const MAX_TSC_RATE_CHANGE: f64 = 0.02;

/// How long each TSC calibration sleeps between its two readings.
pub const TSC_CALIBRATION_WINDOW: Duration = Duration::from_millis(20);

/// A lock run opens with the calibration its thread made last if it is this recent (a sliced
/// run's previous slice's closing one: [`TscCalibration::recent_or_measure`]).
pub const TSC_CALIBRATION_REUSED_WITHIN: Duration = Duration::from_secs(1);

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
        crate::clock::monotonic_ns()
    }
}

/// The clock's tick count once every earlier instruction has completed and every earlier store
/// has left the store buffer (`mfence; lfence; rdtsc`; Linux makes LFENCE dispatch-serialising
/// on AMD too): the reads around a timed interval of work. A plain `rdtsc` may run before an
/// earlier load that missed the cache has completed, and a pending store to a contended line
/// (a release the waiter spins on) stalls the loop's own stores once the store buffer fills:
/// either puts time that is not the loop's inside the interval. Natively (2026-12-04, ticket,
/// 2 threads, hold 200 or 2000 / gap 200, 500 ms runs) the sampled gaps of a run read up to
/// x1.35 its holds with plain reads (|ln gap/hold| p90 0.08-0.10, max 0.30), up to x1.11 with
/// `lfence` (max 0.11), and within 2.4 % with `mfence; lfence` (p90 0.018, 17 runs); tas
/// throughput unchanged within the noise (median 1.35 M ops/s either way, 8 runs each).
#[inline(always)]
pub fn ordered_ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: lfence and rdtsc have no preconditions on x86-64 (SSE2 is baseline).
        unsafe {
            core::arch::x86_64::_mm_mfence();
            core::arch::x86_64::_mm_lfence();
            core::arch::x86_64::_rdtsc()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        crate::clock::monotonic_ns()
    }
}

/// No CPU known (the CPU can't be read with the TSC here: [`tsc_names_cpu`]).
pub const NO_CPU: u32 = u32::MAX;

/// 0: not yet checked; 1: `rdtscp` names the CPU; 2: it does not (or does not exist).
static TSC_CPU: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Whether the TSC can be read with the CPU it was read on: the CPU has `rdtscp` (CPUID
/// 0x80000001 EDX bit 27) and the kernel keeps the CPU number in IA32_TSC_AUX's low 12 bits (Linux
/// does where the CPU has RDTSCP or RDPID, for its vDSO getcpu), checked against `sched_getcpu`.
/// Checked once per process; call before the reads that depend on it.
pub fn tsc_names_cpu() -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    match TSC_CPU.load(Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let ok = rdtscp_agrees_with_sched_getcpu();
            TSC_CPU.store(if ok { 1 } else { 2 }, Relaxed);
            ok
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn rdtscp_agrees_with_sched_getcpu() -> bool {
    use crate::env::cpuid;
    use core::arch::x86_64::__rdtscp;
    // Leaf 0x80000001 is read only where the highest extended leaf reaches it.
    let has = cpuid(0x8000_0000).eax >= 0x8000_0001 && cpuid(0x8000_0001).edx & (1 << 27) != 0;
    // A migration between the two reads makes one try disagree: three tries.
    has && (0..3).any(|_| {
        let mut aux = 0u32;
        // SAFETY: the CPU has rdtscp (checked above).
        unsafe { __rdtscp(&mut aux) };
        // SAFETY: no arguments; -1 on failure.
        let cpu = unsafe { libc::sched_getcpu() };
        cpu >= 0 && aux & 0xfff == cpu as u32
    })
}

#[cfg(not(target_arch = "x86_64"))]
fn rdtscp_agrees_with_sched_getcpu() -> bool {
    false
}

/// [`ordered_ticks`] and the CPU it was read on ([`NO_CPU`] where [`tsc_names_cpu`] is false):
/// `mfence; lfence; rdtscp`, the CPU number coming from the same instruction as the time (no
/// second call; a few cycles more than `rdtsc`, which [`crate::work_as_run`] times the same
/// way).
#[inline(always)]
pub fn ordered_ticks_on_cpu() -> (u64, u32) {
    #[cfg(target_arch = "x86_64")]
    {
        if TSC_CPU.load(std::sync::atomic::Ordering::Relaxed) == 1 {
            let mut aux = 0u32;
            // SAFETY: the fences have no preconditions; rdtscp exists (TSC_CPU is 1 only then).
            let t = unsafe {
                core::arch::x86_64::_mm_mfence();
                core::arch::x86_64::_mm_lfence();
                core::arch::x86_64::__rdtscp(&mut aux)
            };
            return (t, aux & 0xfff);
        }
    }
    (ordered_ticks(), NO_CPU)
}

/// [`ticks`] and the CPU it was read on ([`NO_CPU`] where [`tsc_names_cpu`] is false); `rdtscp`
/// waits for earlier instructions to execute, no fences.
#[inline(always)]
pub fn ticks_on_cpu() -> (u64, u32) {
    #[cfg(target_arch = "x86_64")]
    {
        if TSC_CPU.load(std::sync::atomic::Ordering::Relaxed) == 1 {
            let mut aux = 0u32;
            // SAFETY: rdtscp exists (TSC_CPU is 1 only then).
            let t = unsafe { core::arch::x86_64::__rdtscp(&mut aux) };
            return (t, aux & 0xfff);
        }
    }
    (ticks(), NO_CPU)
}

/// The run's window on the TSC and on the guest's CLOCK_MONOTONIC, each end read as a pair:
/// the TSC's rate over the whole run, which times the stretched intervals from the window's
/// start and lets the host put them on its own clock (a 20 ms calibration's rate can be off
/// by 1e-4, 0.3 ms over a 3 s run).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct TscWindow {
    pub start_tick: u64,
    pub start_mono_ns: u64,
    pub end_tick: u64,
    pub end_mono_ns: u64,
    /// (end_tick - start_tick) / (end_mono_ns - start_mono_ns), Hz.
    pub hz: f64,
}

impl TscWindow {
    /// The TSC and CLOCK_MONOTONIC at one instant, now: the tightest of a few (monotonic, TSC,
    /// monotonic) triples, the TSC against the middle of its two monotonic reads ([`tightest_pair`]).
    pub fn read_pair() -> (u64, u64) {
        let (t, mono, _) = tightest_pair();
        (t, mono)
    }

    pub fn of(start: (u64, u64), end: (u64, u64)) -> Self {
        let (ticks, ns) = (end.0.wrapping_sub(start.0), end.1.saturating_sub(start.1));
        Self {
            start_tick: start.0,
            start_mono_ns: start.1,
            end_tick: end.0,
            end_mono_ns: end.1,
            hz: ticks as f64 * 1e9 / ns.max(1) as f64,
        }
    }
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

thread_local! {
    /// This thread's last calibration and when it ended ([`TscCalibration::recent_or_measure`]).
    static LAST_CALIBRATION: RefCell<Option<(Instant, TscCalibration)>> = const { RefCell::new(None) };
}

impl TscCalibration {
    /// Reads the TSC against CLOCK_MONOTONIC ([`tightest_pair`]), sleeps `window`, reads again.
    pub fn measure(window: Duration) -> Self {
        let (t0, m0, spread0) = tightest_pair();
        std::thread::sleep(window);
        let (t1, m1, spread1) = tightest_pair();
        let window_ns = m1.saturating_sub(m0).max(1);
        let c = Self {
            hz: t1.wrapping_sub(t0) as f64 * 1e9 / window_ns as f64,
            window_ns,
            read_spread_ns: spread0 + spread1,
        };
        LAST_CALIBRATION.set(Some((Instant::now(), c.clone())));
        c
    }

    /// The calibration this thread made last if it ended within `max_age` (the slices of a
    /// sliced run follow each other: a slice's closing calibration opens the next, saving its
    /// set-up `window` — the TSC's rate does not change in between, and the run's own check
    /// still compares its window's rate with both), else a new one.
    pub fn recent_or_measure(window: Duration, max_age: Duration) -> Self {
        LAST_CALIBRATION
            .with_borrow(|last| {
                last.as_ref()
                    .filter(|(at, _)| at.elapsed() <= max_age)
                    .map(|(_, c)| c.clone())
            })
            .unwrap_or_else(|| Self::measure(window))
    }
}

/// Triples read by [`tightest_pair`].
const PAIR_TRIES: usize = 8;

/// The TSC against CLOCK_MONOTONIC at one instant: of [`PAIR_TRIES`] (monotonic, TSC,
/// monotonic) triples, the one whose two monotonic reads lie closest, as (TSC, the middle of
/// the two, their spread in ns). One triple alone is as wide as any preemption between its
/// reads: a vCPU preempted there for a host slice (ms) would misread a 20 ms calibration by
/// 10 % and more, and the work is spun at that rate ([`crate::busywork`]).
pub fn tightest_pair() -> (u64, u64, u64) {
    let mut best = (0, 0, u64::MAX);
    for _ in 0..PAIR_TRIES {
        let a = crate::clock::monotonic_ns();
        let t = ticks();
        let b = crate::clock::monotonic_ns();
        let spread = b.saturating_sub(a);
        if spread < best.2 {
            best = (t, a / 2 + b / 2 + (a % 2 + b % 2) / 2, spread);
        }
    }
    best
}

/// The sampler's settings (from the lock workload's arguments).
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// One acquisition in this many (per thread) is sampled.
    pub every: u64,
    pub threshold_ns: u64,
    /// The hold the work is made to (`--hold-ns`, times the test-only scale), ns.
    pub hold_ns: f64,
    pub tsc_hz: f64,
    /// Also read the thread's runqueue wait for the split (`--split-runqueue-wait`,
    /// [`SPLIT_METHOD`]); else switches alone ([`SPLIT_WITHOUT_SCHEDSTAT`]).
    pub runqueue_wait: bool,
    /// The run's own work check (`hold_as_asked`) refuses a run whose median hold is off the
    /// asked one by more than this factor (`--max-work-error`): no counted run's median hold is
    /// under hold_ns / (1 + this), so a hold over that + the threshold is a candidate.
    pub max_work_error: f64,
}

impl Settings {
    /// The sampling period for a rate in (0, 1]: the nearest whole period.
    pub fn every_for(rate: f64) -> u64 {
        (1.0 / rate).round().max(1.0) as u64
    }

    /// Holds over this are candidates: the shortest median hold a counted run can have, plus
    /// the threshold. Its cost: a hold this close to its asked length (within the work check's
    /// bound, minus the threshold) takes the cold path (a getrusage) for nothing; only holds
    /// longer than the threshold / the bound (500 µs at 50 µs and 10 %) come near it, where a
    /// getrusage is under 1 % of the hold.
    pub fn provisional_hold_limit_ns(&self) -> f64 {
        let floor = if self.max_work_error.is_finite() && self.max_work_error > 0.0 {
            1.0 / (1.0 + self.max_work_error)
        } else {
            1.0
        };
        self.hold_ns.max(0.0) * floor + self.threshold_ns as f64
    }
}

/// One lock cycle, in ticks.
#[derive(Debug, Clone, Copy)]
pub struct Cycle {
    /// Read when the try_lock failed; None: it succeeded (no wait, no hand-over).
    pub wait_began: Option<u64>,
    /// The CPU `wait_began` was read on ([`NO_CPU`]: unknown): the next owner's vCPU when a
    /// hand-over to it began (it was already waiting then).
    pub wait_cpu: u32,
    /// Read right before the hold's busy loop (the lock owned).
    pub entered: u64,
    /// The CPU `entered` was read on ([`NO_CPU`]: unknown).
    pub entered_cpu: u32,
    /// The previous owner's release, read under the lock (0: none yet).
    pub previous_release: u64,
    /// Read after the hold's busy loop and the owner check, the last thing before the unlock
    /// (the lock still owned): what the next owner's hand-over is timed from.
    pub released: u64,
    /// This acquisition was sampled (its context switches were read before it).
    pub sampled: bool,
}

/// Counts of one kind of interval (holds or hand-overs) in one thread or one run.
#[derive(Debug, Clone)]
pub struct Tally {
    /// Intervals timed.
    pub timed: u64,
    /// Lengths of the sampled acquisitions' intervals, ns (the run's median is theirs).
    pub sampled_len: Histogram<u64>,
    /// Lengths of every one over the provisional limit (the candidates), ns.
    pub over_len: Histogram<u64>,
    /// Lengths of the candidates the split labelled guest, ns.
    pub over_guest_len: Histogram<u64>,
    /// The [`LONGEST_KEPT`] longest candidates, in no order.
    pub longest: Vec<Kept>,
}

/// One stretched interval as the thread saw it (see [`StretchedInterval`] for the report's form).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Kept {
    /// The TSC at its start (a hold's entry, a hand-over's release).
    pub start_tick: u64,
    pub len_ns: u64,
    /// The guest CPU the thread was on at its start (read with the TSC), None if unknown.
    pub cpu_at_start: Option<u32>,
    /// The guest CPU the thread was on at its end (`sched_getcpu`), None if unreadable.
    pub cpu: Option<u32>,
    pub guest: bool,
    /// The thread's runqueue wait in the guest over the split's window (see [`Split`]).
    pub guest_wait_ns: Option<u64>,
}

impl Default for Tally {
    fn default() -> Self {
        Self {
            timed: 0,
            sampled_len: new_latency_histogram(),
            over_len: new_latency_histogram(),
            over_guest_len: new_latency_histogram(),
            longest: Vec::new(),
        }
    }
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.timed += other.timed;
        // Same bounds on both sides: adding cannot fail.
        let _ = self.sampled_len.add(&other.sampled_len);
        let _ = self.over_len.add(&other.over_len);
        let _ = self.over_guest_len.add(&other.over_guest_len);
    }

    /// Candidates over the provisional limit so far.
    pub fn candidates(&self) -> u64 {
        self.over_len.len()
    }

    #[cold]
    fn stretch(&mut self, start_tick: u64, start_cpu: u32, len_ns: f64, split: Split) {
        let switched = split.guest;
        let len_ns = (len_ns as u64).max(1);
        let _ = self.over_len.record(len_ns);
        if switched {
            let _ = self.over_guest_len.record(len_ns);
        }
        let kept = Kept {
            start_tick,
            len_ns,
            cpu_at_start: (start_cpu != NO_CPU).then_some(start_cpu),
            cpu: current_cpu(),
            guest: switched,
            guest_wait_ns: split.guest_wait_ns,
        };
        keep_longest(&mut self.longest, kept, LONGEST_KEPT);
    }
}

/// Keeps the `n` longest in `kept` (a linear scan: only stretched intervals come here, rarely).
fn keep_longest(kept: &mut Vec<Kept>, k: Kept, n: usize) {
    if kept.len() < n {
        kept.push(k);
    } else if let Some(shortest) = kept.iter_mut().min_by_key(|x| x.len_ns)
        && shortest.len_ns < k.len_ns
    {
        *shortest = k;
    }
}

/// The CPU the calling thread runs on now.
fn current_cpu() -> Option<u32> {
    // SAFETY: sched_getcpu takes no arguments; -1 on failure.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).ok()
}

/// One thread's counts.
#[derive(Debug, Clone, Default)]
pub struct ThreadSamples {
    pub holds: Tally,
    pub handovers: Tally,
    /// Waited acquisitions whose previous release came before the TSC read that marks the
    /// wait's start (just after the failed try_lock): the owner released in those few
    /// instructions (the common case, so these hand-overs were short), or the lock was released
    /// and retaken before it. Not counted as hand-overs: the release cannot be shown to have
    /// found this thread waiting.
    pub not_handed_over: u64,
    /// Hand-overs whose release read later on the TSC than the entry (TSCs of two CPUs apart).
    pub clock_behind: u64,
    /// The split read the thread's runqueue wait ([`SPLIT_METHOD`]; else
    /// [`SPLIT_WITHOUT_SCHEDSTAT`]).
    pub runqueue_wait_read: bool,
}

/// Per thread: decides which acquisitions are sampled and classifies every cycle.
pub struct Sampler {
    settings: Settings,
    countdown: u64,
    ns_per_tick: f64,
    /// A hold longer than this many ticks is a candidate (the provisional limit: the asked
    /// hold / (1 + max work error) + threshold).
    hold_limit: u64,
    /// A hand-over longer than this many ticks is a candidate (the threshold).
    handover_limit: u64,
    /// The thread's latest context-switch reading.
    last_ctxsw: Ctxsw,
    /// The thread's runqueue wait, and its latest reading (taken with `last_ctxsw`).
    runqueue: Option<RunqueueWait>,
    last_wait_ns: Option<u64>,
    pub out: ThreadSamples,
}

/// How a stretched interval was split, from what the guest saw over the split's window.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Split {
    guest: bool,
    guest_wait_ns: Option<u64>,
}

/// The split's rule for a stretched interval of `len_ns` over whose window the thread made the
/// switches `d` and waited `guest_wait_ns` on the guest's runqueue (None: not kept).
fn guest_label(d: Ctxsw, guest_wait_ns: Option<u64>, len_ns: f64) -> bool {
    d.voluntary > 0 || (d.involuntary > 0 && guest_wait_ns.is_none_or(|w| w as f64 >= len_ns / 2.0))
}

/// The calling thread's time spent runnable but waiting on a runqueue, as the guest kernel
/// accounts it (`/proc/thread-self/schedstat`, second field, ns; CONFIG_SCHED_INFO, which
/// Debian's kernels have): the time the guest preempted it. A vCPU the host took is invisible
/// to it: the guest thinks the thread ran.
struct RunqueueWait {
    file: std::fs::File,
}

impl RunqueueWait {
    /// Opened by the thread it reads (thread-self resolves at open).
    fn open() -> Option<Self> {
        let file = std::fs::File::open("/proc/thread-self/schedstat").ok()?;
        let me = Self { file };
        me.read().map(|_| me)
    }

    /// One pread of the file: about as costly as the getrusage beside it.
    fn read(&self) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 96];
        let n = self.file.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        text.split_ascii_whitespace().nth(1)?.parse().ok()
    }
}

impl Sampler {
    pub fn new(settings: Settings) -> Self {
        // Before the cycles that read the CPU with the TSC.
        tsc_names_cpu();
        let ticks_per_ns = settings.tsc_hz / 1e9;
        let s = Self {
            settings,
            countdown: 1,
            ns_per_tick: 1.0 / ticks_per_ns,
            hold_limit: (settings.provisional_hold_limit_ns() * ticks_per_ns) as u64,
            handover_limit: (settings.threshold_ns as f64 * ticks_per_ns) as u64,
            last_ctxsw: Ctxsw::this_thread(),
            runqueue: None,
            last_wait_ns: None,
            out: ThreadSamples::default(),
        };
        if settings.runqueue_wait {
            s.reading_runqueue_wait()
        } else {
            s
        }
    }

    /// Reads the guest's runqueue wait too where the kernel keeps it (else the split falls back
    /// to the context switches alone, [`SPLIT_WITHOUT_SCHEDSTAT`]). Call on the thread sampled.
    fn reading_runqueue_wait(mut self) -> Self {
        self.runqueue = RunqueueWait::open();
        self.last_wait_ns = self.runqueue.as_ref().and_then(RunqueueWait::read);
        self.out.runqueue_wait_read = self.runqueue.is_some();
        self
    }

    /// Whether this acquisition is sampled (the first, then one in `every`); a sampled one
    /// reads the thread's context switches now, before it tries the lock.
    #[inline(always)]
    pub fn begin(&mut self) -> bool {
        self.countdown -= 1;
        if self.countdown == 0 {
            self.countdown = self.settings.every;
            self.last_ctxsw = Ctxsw::this_thread();
            if let Some(r) = &self.runqueue {
                self.last_wait_ns = r.read();
            }
            true
        } else {
            false
        }
    }

    /// Splits a stretched interval of `len_ticks` by what the guest saw since the latest
    /// reading (and reads anew): guest when the thread slept (a voluntary switch), or when the
    /// guest preempted it (an involuntary switch) and kept it waiting on its runqueue for at
    /// least half the interval; vcpu otherwise. Without the runqueue wait, any switch is guest.
    #[cold]
    fn split(&mut self, len_ticks: u64) -> Split {
        let now = Ctxsw::this_thread();
        let d = now.since(self.last_ctxsw);
        self.last_ctxsw = now;
        let wait_now = self.runqueue.as_ref().and_then(RunqueueWait::read);
        let guest_wait_ns = match (wait_now, self.last_wait_ns) {
            (Some(now), Some(then)) => Some(now.saturating_sub(then)),
            _ => None,
        };
        self.last_wait_ns = wait_now;
        Split {
            guest: guest_label(d, guest_wait_ns, len_ticks as f64 * self.ns_per_tick),
            guest_wait_ns,
        }
    }

    /// Classifies one cycle: two subtractions and two comparisons unless something was
    /// stretched or the cycle was sampled.
    #[inline(always)]
    pub fn record(&mut self, c: &Cycle) {
        let hold = c.released.saturating_sub(c.entered);
        let handover = match c.wait_began {
            None => None,
            Some(_) if c.previous_release == 0 => None,
            Some(began) if c.previous_release < began => {
                self.out.not_handed_over += 1;
                None
            }
            Some(_) if c.entered < c.previous_release => {
                self.out.clock_behind += 1;
                None
            }
            Some(_) => Some(c.entered - c.previous_release),
        };
        let hold_stretched = hold > self.hold_limit;
        let handover_stretched = handover.is_some_and(|h| h > self.handover_limit);
        let split = if hold_stretched || handover_stretched {
            // One reading for both, so the wait is held to both.
            let len = if hold_stretched { hold } else { 0 }
                + if handover_stretched {
                    handover.unwrap_or(0)
                } else {
                    0
                };
            self.split(len)
        } else {
            Split {
                guest: false,
                guest_wait_ns: None,
            }
        };
        let ns = self.ns_per_tick;
        self.out.holds.timed += 1;
        if hold_stretched {
            self.out
                .holds
                .stretch(c.entered, c.entered_cpu, hold as f64 * ns, split);
        }
        if c.sampled {
            let _ = self
                .out
                .holds
                .sampled_len
                .record(((hold as f64 * ns) as u64).max(1));
        }
        if let Some(h) = handover {
            let o = &mut self.out.handovers;
            o.timed += 1;
            if handover_stretched {
                o.stretch(c.previous_release, c.wait_cpu, h as f64 * ns, split);
            }
            if c.sampled {
                let _ = o.sampled_len.record(((h as f64 * ns) as u64).max(1));
            }
        }
    }
}

/// Lengths of stretched holds or hand-overs, ns.
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

/// One kind of interval (holds or hand-overs) over a run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Stretch {
    /// Intervals timed (holds: every acquisition; hand-overs: every waited one whose previous
    /// release came after the wait began).
    pub timed: u64,
    /// Longer than [`Self::limit_ns`].
    pub stretched: u64,
    /// stretched / timed.
    pub stretched_share: f64,
    /// Time lost in stretched ones beyond the run's median (holds: the holder was not running
    /// its critical section; hand-overs: the lock sat with no one running in it), ns.
    pub lost_ns: f64,
    /// lost_ns / the run's elapsed time (the lock is one resource: its holds and hand-overs are
    /// serial, so this is the share of the run the lock lost to them).
    pub lost_share: f64,
    /// Stretched ones during which the guest switched the thread out (guest preemption, or a
    /// sleep), and those with no switch (the host took the vCPU).
    pub stretched_guest: u64,
    pub stretched_vcpu: u64,
    /// Median length of the sampled acquisitions' intervals (normal ones included), ns; null
    /// when none was sampled.
    pub sampled_p50_ns: Option<u64>,
    pub sampled: u64,
    /// Stretched ones' lengths; null when none was stretched.
    pub stretched_len: Option<Lengths>,
    /// The [`LONGEST_KEPT`] longest stretched ones of the run (all threads), one by one, in
    /// the order they began: where the lock's time went, when, and on which vCPU.
    #[serde(default)]
    pub longest: Vec<StretchedInterval>,
    /// Stretched = longer than this, ns, and what it is (see [`StretchLimit`]); absent from
    /// reports made when it was the asked hold (or 0) + the threshold.
    #[serde(default)]
    pub limit_ns: Option<u64>,
    #[serde(default)]
    pub limit_from: Option<String>,
}

/// What a run's candidates are judged against: stretched = longer than `limit_ns`, and the
/// time it lost is what it took beyond `base_ns`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StretchLimit {
    pub limit_ns: u64,
    pub base_ns: f64,
    pub from: &'static str,
}

pub const LIMIT_FROM_MEDIAN: &str = "the run's median (sampled_p50_ns) + threshold_ns";
pub const LIMIT_FROM_FLOOR: &str = "the provisional limit (the asked hold / (1 + the work check's bound) + threshold_ns): the run's median \
     + threshold_ns is under it, so the threads kept no interval that short (the work check refuses such a run)";
pub const LIMIT_FROM_NO_SAMPLE: &str =
    "no acquisition sampled, so no median: the asked hold (hand-overs: 0) + threshold_ns";

impl StretchLimit {
    /// From the run's `median` (None: nothing sampled), the `threshold_ns`, the
    /// `provisional_ns` the threads kept candidates over, and the `fallback_ns` a median stands
    /// in for where there is none (holds: the asked hold; hand-overs: 0).
    pub fn of(median: Option<u64>, threshold_ns: u64, provisional_ns: f64, fallback_ns: f64) -> Self {
        let provisional = provisional_ns.max(0.0).ceil() as u64;
        match median {
            Some(m) if m + threshold_ns >= provisional => Self {
                limit_ns: m + threshold_ns,
                base_ns: m as f64,
                from: LIMIT_FROM_MEDIAN,
            },
            Some(m) => Self {
                limit_ns: provisional,
                base_ns: m as f64,
                from: LIMIT_FROM_FLOOR,
            },
            None => Self {
                limit_ns: ((fallback_ns.max(0.0) as u64) + threshold_ns).max(provisional),
                base_ns: fallback_ns.max(0.0),
                from: LIMIT_FROM_NO_SAMPLE,
            },
        }
    }
}

/// The part of `h` over `limit_ns` (a value's bucket judged by its middle: within 0.1 % of the
/// limit, at 3 significant digits, either way).
fn over(h: &Histogram<u64>, limit_ns: u64) -> Histogram<u64> {
    let mut out = new_latency_histogram();
    for v in h.iter_recorded() {
        let value = h.median_equivalent(v.value_iterated_to());
        if value > limit_ns {
            let _ = out.record_n(value, v.count_at_value());
        }
    }
    out
}

/// How many values of `h` lie over `limit_ns`, judged as [`over`] does.
fn count_over(h: &Histogram<u64>, limit_ns: u64) -> u64 {
    h.iter_recorded()
        .filter(|v| h.median_equivalent(v.value_iterated_to()) > limit_ns)
        .map(|v| v.count_at_value())
        .sum()
}

/// The sum of the values in `h`, each its bucket's middle.
fn total_ns(h: &Histogram<u64>) -> f64 {
    h.iter_recorded()
        .map(|v| h.median_equivalent(v.value_iterated_to()) as f64 * v.count_at_value() as f64)
        .sum()
}

/// One stretched hold or hand-over.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct StretchedInterval {
    /// Its start (a hold's entry, a hand-over's release) from the window's start, on the TSC
    /// (the window's start read just after the start gate opened; negative if an interval
    /// began before that read).
    pub at_ns: i64,
    pub len_ns: u64,
    /// The worker thread that recorded it (a hold's holder, a hand-over's next owner), from 0.
    pub thread: u32,
    /// The guest CPU that thread was on when the interval began (a hold: at its entry; a
    /// hand-over: the next owner, waiting since before the release), read with the TSC
    /// (`rdtscp`); null where the CPU cannot be read so (see [`tsc_names_cpu`]). Differs from
    /// `cpu` where the guest moved the thread meanwhile.
    #[serde(default)]
    pub cpu_at_start: Option<u32>,
    /// The guest CPU that thread was on when the interval ended (`sched_getcpu`); null if
    /// unreadable.
    pub cpu: Option<u32>,
    /// The split's label ([`SPLIT_METHOD`]): true = guest, false = vcpu.
    pub guest: bool,
    /// How long the guest kept the thread waiting on its runqueue over the split's window
    /// (`/proc/thread-self/schedstat`), ns; null where the guest kernel does not keep it.
    pub guest_wait_ns: Option<u64>,
}

impl Stretch {
    /// The run's figures from its merged tally `t`: the candidates over `limit`, and the
    /// longest of them listed (`longest`, already the longest candidates).
    fn of(
        t: &Tally,
        elapsed_ns: u64,
        mut longest: Vec<StretchedInterval>,
        limit: StretchLimit,
    ) -> Option<Self> {
        if t.timed == 0 {
            return None;
        }
        let stretched_len = over(&t.over_len, limit.limit_ns);
        let stretched = stretched_len.len();
        let stretched_guest = count_over(&t.over_guest_len, limit.limit_ns).min(stretched);
        let lost_ns = (total_ns(&stretched_len) - stretched as f64 * limit.base_ns).max(0.0);
        longest.retain(|s| s.len_ns > limit.limit_ns);
        Some(Self {
            timed: t.timed,
            stretched,
            stretched_share: stretched as f64 / t.timed as f64,
            lost_ns,
            lost_share: lost_ns / elapsed_ns.max(1) as f64,
            stretched_guest,
            stretched_vcpu: stretched - stretched_guest,
            sampled_p50_ns: median(&t.sampled_len),
            sampled: t.sampled_len.len(),
            stretched_len: Lengths::of(&stretched_len),
            longest,
            limit_ns: Some(limit.limit_ns),
            limit_from: Some(limit.from.into()),
        })
    }
}

/// The median of the sampled lengths (None: none sampled).
fn median(h: &Histogram<u64>) -> Option<u64> {
    (!h.is_empty()).then(|| h.value_at_quantile(0.5))
}

/// The [`LONGEST_KEPT`] longest of every thread's kept intervals (`pick` chooses holds or
/// hand-overs), in the order they began, timed from `origin_tick`.
fn longest_of(
    threads: &[ThreadSamples],
    pick: impl Fn(&ThreadSamples) -> &Tally,
    origin_tick: u64,
    ns_per_tick: f64,
) -> Vec<StretchedInterval> {
    let all: Vec<StretchedInterval> = threads
        .iter()
        .enumerate()
        .flat_map(|(thread, t)| {
            pick(t).longest.iter().map(move |k| StretchedInterval {
                at_ns: ((k.start_tick as i128 - origin_tick as i128) as f64 * ns_per_tick) as i64,
                len_ns: k.len_ns,
                thread: thread as u32,
                cpu_at_start: k.cpu_at_start,
                cpu: k.cpu,
                guest: k.guest,
                guest_wait_ns: k.guest_wait_ns,
            })
        })
        .collect();
    longest_in_order(all)
}

/// The [`LONGEST_KEPT`] longest of `all`, in the order they began.
fn longest_in_order(mut all: Vec<StretchedInterval>) -> Vec<StretchedInterval> {
    all.sort_by_key(|s| std::cmp::Reverse(s.len_ns));
    all.truncate(LONGEST_KEPT);
    all.sort_by_key(|s| s.at_ns);
    all
}

/// The `preemption` object of a lock report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PreemptionReport {
    /// The requested share of acquisitions sampled, and the period used (1 / rate, rounded).
    pub sample_rate: f64,
    pub sample_every: u64,
    pub sampling: String,
    /// Stretched = longer than the run's median by more than this (each side's `limit_ns`).
    pub threshold_ns: u64,
    /// The hold the work was made to (`--hold-ns`, times the test-only scale), ns: what a hold
    /// is measured against where no hold was sampled.
    pub hold_ns: f64,
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
    /// The run's window on the TSC (what `longest[].at_ns` count from); absent from reports
    /// made before it was.
    #[serde(default)]
    pub window: Option<TscWindow>,
    /// A sliced arm's report ([`PreemptionReport::merge_slices`]): each slice's own window, in
    /// schedule order, the arm's measured time on the TSC (`window` spans them and the gaps
    /// and other arms' slices between them). Empty (absent) in an ordinary run's report.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub window_parts: Vec<TscWindow>,
}

pub const SPLIT_METHOD: &str = "getrusage(RUSAGE_THREAD) context switches and the thread's runqueue wait (/proc/thread-self/schedstat) read after each \
     stretched hold or hand-over and compared with the thread's latest readings (taken before every sampled acquisition, so at most one sampling \
     period of acquisitions earlier, or at the previous stretched one): guest = the thread slept (a voluntary switch), or the guest preempted it \
     (an involuntary switch) and kept it waiting on its runqueue for at least half the stretched length; vcpu otherwise (the guest believed it \
     ran the thread: the host took the vCPU). A host preemption after which the guest also switched the thread out briefly stays vcpu; \
     each interval's runqueue wait is listed with it (longest[].guest_wait_ns)";

/// The split by switches alone: the default (reading the runqueue wait too costs a fresh
/// guest's first run about 2 % of its throughput against the later runs: run 0 of the
/// run-position test fell 1.9 points further behind runs 1..5 with it, in 7 of 7 pairs against
/// the build without it, 2026-12-05), or where the guest kernel keeps none.
pub const SPLIT_WITHOUT_SCHEDSTAT: &str = "getrusage(RUSAGE_THREAD) context switches (voluntary + involuntary) read after each stretched hold or hand-over \
     and compared with the thread's latest reading (taken before every sampled acquisition, so at most one sampling period of acquisitions earlier, \
     or at the previous stretched one): a rise = guest (the guest switched the thread out or it slept somewhere in that window, so guest is an \
     upper bound: a host preemption the guest followed with a switch counts as guest); none = vcpu (the host took the vCPU). This guest kernel \
     keeps no runqueue wait (/proc/thread-self/schedstat)";

/// Why the TSC cannot time this run, if its rate against CLOCK_MONOTONIC moved by more than
/// [`MAX_TSC_RATE_CHANGE`] between the calibrations before and after it.
pub fn tsc_rate_moved(before: &TscCalibration, after: &TscCalibration) -> Option<String> {
    let change = after.hz / before.hz - 1.0;
    (!change.is_finite() || change.abs() > MAX_TSC_RATE_CHANGE).then(|| {
        format!(
            "the TSC rate moved {:+.1} % against CLOCK_MONOTONIC over the run ({:.0} -> {:.0} Hz; at most {:.0} % accepted)",
            change * 100.0,
            before.hz,
            after.hz,
            MAX_TSC_RATE_CHANGE * 100.0
        )
    })
}

/// Builds the report from every thread's samples; `elapsed_ns` is the run's window and
/// `window` its ends on the TSC (the stretched intervals are timed from its start at its rate).
pub fn report(
    settings: &Settings,
    rate: f64,
    threads: Vec<ThreadSamples>,
    elapsed_ns: u64,
    window: TscWindow,
    tsc_before: TscCalibration,
    tsc_after: TscCalibration,
) -> PreemptionReport {
    let threads_read_runqueue_wait = threads.iter().all(|t| t.runqueue_wait_read);
    let clock_bad = tsc_rate_moved(&tsc_before, &tsc_after);
    let every = settings.every;
    let hz = if window.hz.is_finite() && window.hz > 0.0 {
        window.hz
    } else {
        settings.tsc_hz
    };
    let origin_tick = window.start_tick;
    let longest_holds = longest_of(&threads, |t| &t.holds, origin_tick, 1e9 / hz);
    let longest_handovers = longest_of(&threads, |t| &t.handovers, origin_tick, 1e9 / hz);
    let all = merged(threads);
    let threshold = settings.threshold_ns;
    let hold_limit = StretchLimit::of(
        median(&all.holds.sampled_len),
        threshold,
        settings.provisional_hold_limit_ns(),
        settings.hold_ns,
    );
    let handover_limit = StretchLimit::of(
        median(&all.handovers.sampled_len),
        threshold,
        threshold as f64,
        0.0,
    );
    let (holds, holds_unavailable) = match (
        &clock_bad,
        Stretch::of(&all.holds, elapsed_ns, longest_holds, hold_limit),
    ) {
        (Some(why), _) => (None, Some(why.clone())),
        (None, Some(s)) => (Some(s), None),
        (None, None) => (
            None,
            Some("no acquisition was sampled (fewer operations than the sampling period)".into()),
        ),
    };
    let (handovers, handovers_unavailable) = match (
        &clock_bad,
        Stretch::of(&all.handovers, elapsed_ns, longest_handovers, handover_limit),
    ) {
        (Some(why), _) => (None, Some(why.clone())),
        (None, Some(s)) => (Some(s), None),
        (None, None) => (
            None,
            Some("no acquisition waited for a release (no contention, e.g. one thread)".into()),
        ),
    };
    PreemptionReport {
        sample_rate: rate,
        sample_every: every,
        sampling: format!(
            "every hold and every waited hand-over timed with the TSC; 1 in {every} acquisitions per thread (the first, then every {every}th) \
             reads the thread's context switches before it (the split's window) and records its lengths in sampled_p50_ns"
        ),
        threshold_ns: settings.threshold_ns,
        hold_ns: settings.hold_ns,
        tsc_before,
        tsc_after,
        holds,
        holds_unavailable,
        handovers,
        handovers_unavailable,
        not_handed_over: all.not_handed_over,
        clock_behind: all.clock_behind,
        window: Some(window),
        window_parts: Vec::new(),
        split: if threads_read_runqueue_wait {
            SPLIT_METHOD
        } else {
            SPLIT_WITHOUT_SCHEDSTAT
        }
        .into(),
    }
}

/// Every thread's tallies added into the first thread's (a new histogram is about 220 KB
/// written, slow under emulation, and a sliced run's slices follow each other closely: the
/// merge makes none); an empty tally where there is no thread.
fn merged(threads: Vec<ThreadSamples>) -> ThreadSamples {
    let mut threads = threads.into_iter();
    let mut all = threads.next().unwrap_or_default();
    for t in threads {
        all.holds.add(&t.holds);
        all.handovers.add(&t.handovers);
        all.not_handed_over += t.not_handed_over;
        all.clock_behind += t.clock_behind;
    }
    all
}

impl PreemptionReport {
    /// One report for a sliced run's arm from its slices' reports, each with its slice's
    /// measured time (`elapsed_ns`), in schedule order; `slices` is not empty (an arm has at
    /// least one slice).
    ///
    /// - `window`: the first slice's start to the last slice's end, its `hz` the rate over that
    ///   whole span (as every window's is over its own: the longest baseline, seconds rather
    ///   than a slice's few hundred ms, so the best rate to put the slices' starts on one
    ///   clock); `window_parts`: each slice's own window. Both absent where a slice has none.
    /// - `holds`, `handovers`: merged where every slice measured them ([`Stretch::merge_slices`];
    ///   each slice judged stretched against its own limit), else null with the first missing
    ///   slice's reason.
    /// - Counts of the whole run (`not_handed_over`, `clock_behind`) summed; the settings,
    ///   `split` and `tsc_before` the first slice's, `tsc_after` the last one's (every slice
    ///   checked its own calibrations: a slice whose TSC rate moved has no sides).
    pub fn merge_slices(slices: &[(PreemptionReport, u64)]) -> PreemptionReport {
        let first = &slices[0].0;
        let last = &slices[slices.len() - 1].0;
        let window_parts: Vec<TscWindow> = slices
            .iter()
            .map(|(r, _)| r.window)
            .collect::<Option<_>>()
            .unwrap_or_default();
        let window = spanning(&window_parts);
        // Where each slice's window began in the merged one, ns: what its intervals' `at_ns`
        // (counted from its own start) are moved by.
        let offsets: Vec<Option<i64>> = slices
            .iter()
            .map(|(r, _)| ns_between(window?, r.window?.start_tick))
            .collect();
        let (holds, holds_unavailable) = merged_side(slices, &offsets, |r| (&r.holds, &r.holds_unavailable));
        let (handovers, handovers_unavailable) =
            merged_side(slices, &offsets, |r| (&r.handovers, &r.handovers_unavailable));
        PreemptionReport {
            sample_rate: first.sample_rate,
            sample_every: first.sample_every,
            sampling: first.sampling.clone(),
            threshold_ns: first.threshold_ns,
            hold_ns: first.hold_ns,
            tsc_before: first.tsc_before.clone(),
            tsc_after: last.tsc_after.clone(),
            holds,
            holds_unavailable,
            handovers,
            handovers_unavailable,
            not_handed_over: slices.iter().map(|(r, _)| r.not_handed_over).sum(),
            clock_behind: slices.iter().map(|(r, _)| r.clock_behind).sum(),
            split: first.split.clone(),
            window,
            window_parts,
        }
    }
}

/// The window from the first part's start to the last part's end, at the rate over that span
/// (None: no parts).
fn spanning(parts: &[TscWindow]) -> Option<TscWindow> {
    let (first, last) = (parts.first()?, parts.last()?);
    Some(TscWindow::of(
        (first.start_tick, first.start_mono_ns),
        (last.end_tick, last.end_mono_ns),
    ))
}

/// The time from `window`'s start to `tick`, ns, at the window's rate (None: no usable rate).
/// The window's rate, not the slice's own: the host puts `at_ns` on its clock from the
/// window's start at the window's rate, so this way a slice's start comes back where it was.
fn ns_between(window: TscWindow, tick: u64) -> Option<i64> {
    (window.hz.is_finite() && window.hz > 0.0)
        .then(|| ((tick as i128 - window.start_tick as i128) as f64 * 1e9 / window.hz) as i64)
}

/// One side (`pick`: holds or hand-overs) of a sliced arm: merged if every slice has it, else
/// null with the first slice's reason that lacks it. `offsets`: each slice's start in the
/// merged window ([`ns_between`]).
fn merged_side(
    slices: &[(PreemptionReport, u64)],
    offsets: &[Option<i64>],
    pick: impl Fn(&PreemptionReport) -> (&Option<Stretch>, &Option<String>),
) -> (Option<Stretch>, Option<String>) {
    let mut parts = Vec::with_capacity(slices.len());
    for (i, ((r, elapsed_ns), offset)) in slices.iter().zip(offsets).enumerate() {
        match pick(r) {
            (Some(s), _) => parts.push((s, *elapsed_ns, *offset)),
            (None, why) => {
                let why = why.as_deref().unwrap_or("absent");
                return (
                    None,
                    Some(format!(
                        "slice {i} of the arm's {} (counted from 0): {why}",
                        slices.len()
                    )),
                );
            }
        }
    }
    (Some(Stretch::merge_slices(&parts)), None)
}

/// What a merged [`Stretch`]'s `limit_from` says before the first slice's own.
pub const LIMIT_FROM_SLICES: &str =
    "each slice's own (limit_ns is their median; a slice's stretched ones are over its own)";

impl Stretch {
    /// One side of a sliced arm from each slice's (its figures, its measured time, ns, and
    /// where its window began in the merged window, ns; None: not known).
    ///
    /// - Counts and `lost_ns` summed; `lost_share` over the summed time, `stretched_share` over
    ///   the summed timed ones (each slice's stretched ones are judged against its own median,
    ///   as an ordinary run's are against the run's).
    /// - `sampled_p50_ns`: the median of the slices', weighted by their sampled counts (a
    ///   stand-in for the median of all the samples, which the slices do not keep);
    ///   `limit_ns`: the plain median of the slices' limits (a figure of each slice, not of
    ///   its samples).
    /// - `stretched_len`: see [`Lengths::merge_slices`].
    /// - `longest`: the slices' lists moved onto the merged window's start, the
    ///   [`LONGEST_KEPT`] longest of them in the order they began; empty if any slice's start is
    ///   not known (their times could not be put on one origin).
    pub fn merge_slices(parts: &[(&Stretch, u64, Option<i64>)]) -> Stretch {
        let sum = |f: fn(&Stretch) -> u64| parts.iter().map(|p| f(p.0)).sum::<u64>();
        let (timed, stretched) = (sum(|s| s.timed), sum(|s| s.stretched));
        let lost_ns: f64 = parts.iter().map(|p| p.0.lost_ns).sum();
        let elapsed_ns: u64 = parts.iter().map(|p| p.1).sum();
        Stretch {
            timed,
            stretched,
            stretched_share: if timed == 0 {
                0.0
            } else {
                stretched as f64 / timed as f64
            },
            lost_ns,
            lost_share: lost_ns / elapsed_ns.max(1) as f64,
            stretched_guest: sum(|s| s.stretched_guest),
            stretched_vcpu: sum(|s| s.stretched_vcpu),
            sampled_p50_ns: weighted_median(
                parts
                    .iter()
                    .filter_map(|p| Some((p.0.sampled_p50_ns?, p.0.sampled)))
                    .collect(),
            ),
            sampled: sum(|s| s.sampled),
            stretched_len: Lengths::merge_slices(parts.iter().filter_map(|p| p.0.stretched_len.as_ref())),
            longest: merged_longest(parts),
            limit_ns: weighted_median(parts.iter().filter_map(|p| Some((p.0.limit_ns?, 1))).collect()),
            limit_from: parts
                .iter()
                .find_map(|p| p.0.limit_from.as_deref())
                .map(|from| format!("{LIMIT_FROM_SLICES}: {from}")),
        }
    }
}

/// The slices' longest stretched ones (`parts` as [`Stretch::merge_slices`] takes them), each
/// `at_ns` moved from its slice's window start to the merged window's, the [`LONGEST_KEPT`]
/// longest of them in the order they began; none if a slice's start is not known.
fn merged_longest(parts: &[(&Stretch, u64, Option<i64>)]) -> Vec<StretchedInterval> {
    let mut all = Vec::new();
    for &(s, _, offset) in parts {
        let Some(offset) = offset else {
            return Vec::new();
        };
        all.extend(s.longest.iter().map(|l| StretchedInterval {
            at_ns: l.at_ns + offset,
            ..*l
        }));
    }
    longest_in_order(all)
}

impl Lengths {
    /// A sliced arm's stretched lengths from its slices' (those that had any): `count` summed,
    /// `max_ns` the largest; `p50_ns` the median of the slices' medians weighted by their
    /// counts (a stand-in for the median of them all, which would need the slices'
    /// histograms, not in their reports); `p99_ns` null (a p99 of them all lies somewhere
    /// between the slices' own p99s, none of which it is).
    pub fn merge_slices<'a>(slices: impl Iterator<Item = &'a Lengths>) -> Option<Lengths> {
        let slices: Vec<&Lengths> = slices.collect();
        Some(Lengths {
            count: slices.iter().map(|l| l.count).sum(),
            p50_ns: weighted_median(slices.iter().map(|l| (l.p50_ns, l.count)).collect())?,
            p99_ns: None,
            max_ns: slices.iter().map(|l| l.max_ns).max()?,
        })
    }
}

/// The median of `(value, weight)` pairs: the value with at most half the weight below it and
/// at most half above; where exactly half lies at or below one value, the midpoint of it and
/// the next (so, with equal weights, the ordinary median). None without any weight.
fn weighted_median(mut v: Vec<(u64, u64)>) -> Option<u64> {
    v.retain(|&(_, w)| w > 0);
    v.sort_unstable();
    let total: u64 = v.iter().map(|&(_, w)| w).sum();
    let mut below = 0;
    for (i, &(value, w)) in v.iter().enumerate() {
        below += w;
        if below * 2 == total {
            // The rest weighs half the total, more than 0: a next value exists.
            return Some(value.midpoint(v[i + 1].0));
        }
        if below * 2 > total {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recent_calibration_is_reused_and_an_old_one_measured_again() {
        let window = Duration::from_millis(5);
        let first = TscCalibration::measure(window);
        let t = Instant::now();
        assert_eq!(
            TscCalibration::recent_or_measure(window, Duration::from_secs(60)),
            first
        );
        assert!(t.elapsed() < window, "reused without sleeping");
        std::thread::sleep(Duration::from_millis(2));
        let t = Instant::now();
        let again = TscCalibration::recent_or_measure(window, Duration::from_millis(1));
        assert!(t.elapsed() >= window && again.window_ns >= 5_000_000, "{again:?}");
    }

    #[test]
    fn tsc_rate_agrees_with_the_monotonic_clock() {
        let a = TscCalibration::measure(Duration::from_millis(20));
        let b = TscCalibration::measure(Duration::from_millis(20));
        assert!(a.hz > 1e6, "{a:?}");
        assert!((b.hz / a.hz - 1.0).abs() < 0.05, "{a:?} {b:?}");
        // A 20 ms sleep measured through the TSC lands near 20 ms of CLOCK_MONOTONIC.
        let t0 = ticks();
        let m0 = crate::clock::monotonic_ns();
        std::thread::sleep(Duration::from_millis(20));
        let secs = (ticks() - t0) as f64 / a.hz;
        let mono = (crate::clock::monotonic_ns() - m0) as f64 / 1e9;
        assert!((secs / mono - 1.0).abs() < 0.05, "{secs} vs {mono}");
    }

    /// Where the CPU has rdtscp and Linux keeps the CPU in TSC_AUX (this machine: both), the
    /// TSC read names the CPU sched_getcpu names, on each CPU the thread is pinned to.
    #[test]
    fn the_tsc_read_names_the_cpu_it_ran_on() {
        let has = std::fs::read_to_string("/proc/cpuinfo")
            .unwrap()
            .split_whitespace()
            .any(|f| f == "rdtscp");
        assert_eq!(tsc_names_cpu(), has && cfg!(target_arch = "x86_64"));
        if !tsc_names_cpu() {
            assert_eq!(ordered_ticks_on_cpu().1, NO_CPU);
            return;
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        std::thread::spawn(move || {
            for cpu in 0..cpus {
                // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET within its size.
                let pinned = unsafe {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu, &mut set);
                    libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) == 0
                };
                if pinned {
                    let (t, c) = ordered_ticks_on_cpu();
                    assert!(t > 0);
                    assert_eq!((c, ticks_on_cpu().1), (cpu as u32, cpu as u32));
                }
            }
        })
        .join()
        .unwrap();
    }

    fn settings() -> Settings {
        Settings {
            every: 4,
            threshold_ns: 50_000,
            hold_ns: 1_000.0,
            tsc_hz: 1e9, // one tick = one ns, for readable cases
            runqueue_wait: true,
            max_work_error: 0.10,
        }
    }

    fn cycle(wait_began: Option<u64>, previous_release: u64, entered: u64, released: u64) -> Cycle {
        Cycle {
            wait_began,
            wait_cpu: 1,
            entered,
            entered_cpu: 0,
            previous_release,
            released,
            sampled: true,
        }
    }

    #[test]
    fn samples_one_in_every_starting_with_the_first() {
        let mut s = Sampler::new(settings());
        let due: Vec<bool> = (0..9).map(|_| s.begin()).collect();
        assert_eq!(due, [true, false, false, false, true, false, false, false, true]);
        assert_eq!(Settings::every_for(1.0 / 64.0), 64);
        assert_eq!(Settings::every_for(1.0), 1);
        assert_eq!(Settings::every_for(0.3), 3);
    }

    #[test]
    fn holds_and_handovers_are_classified_against_the_threshold() {
        let mut s = Sampler::new(settings());
        // Normal hold (1.2 µs), normal hand-over (500 ns after a release made while waiting).
        s.record(&cycle(Some(100), 1_000, 1_500, 2_700));
        // Stretched hold: the run's median (1 µs) + 60 µs; not waited, so no hand-over.
        s.record(&cycle(None, 9_000, 10_100, 71_100));
        // Just under the limit: 1 µs + 50 µs is not stretched, though over the provisional
        // limit (1 µs / 1.1 + 50 µs), so kept as a candidate until the report.
        s.record(&cycle(None, 9_000, 80_000, 130_999));
        // Stretched hand-over of 80 µs, normal hold.
        s.record(&cycle(Some(100_000), 150_000, 230_000, 231_000));
        // Waited, but the previous release was before the wait began: no hand-over.
        s.record(&cycle(Some(300_000), 250_000, 300_500, 301_500));
        // Release later than entry on the TSC: counted as clock behind, no hand-over.
        s.record(&cycle(Some(400_000), 400_900, 400_800, 401_800));
        let o = &s.out;
        assert_eq!(o.holds.timed, 6);
        assert_eq!(o.holds.candidates(), 2);
        assert_eq!(o.handovers.timed, 2);
        assert_eq!(o.handovers.candidates(), 1);
        assert_eq!(o.not_handed_over, 1);
        assert_eq!(o.clock_behind, 1);
        // Only candidates are split (whether this thread was switched out meanwhile depends on
        // the machine's load; `a_switch_since_...` makes one happen).
        assert!(o.holds.over_guest_len.len() <= 2 && o.handovers.over_guest_len.len() <= 1);

        let tsc = TscCalibration {
            hz: 1e9,
            window_ns: 1,
            read_spread_ns: 0,
        };
        let r = report(
            &settings(),
            0.25,
            vec![o.clone(), o.clone()],
            10_000_000,
            TscWindow::of((1_000, 0), (10_001_000, 10_000_000)),
            tsc.clone(),
            tsc.clone(),
        );
        // This machine's kernel keeps the runqueue wait; the report says which split it made.
        assert_eq!(r.split, SPLIT_METHOD);
        let h = r.holds.unwrap();
        assert_eq!((h.timed, h.stretched), (12, 2));
        // Each stretched one listed, by thread, timed from the origin (tick 1000 = 1 µs).
        let at: Vec<(i64, u64, u32)> = h.longest.iter().map(|l| (l.at_ns, l.len_ns, l.thread)).collect();
        assert_eq!(at.len(), 2);
        assert!(
            at.iter().all(|&(a, len, _)| a == 9_100 && len == 61_000),
            "{at:?}"
        );
        let mut threads: Vec<u32> = at.iter().map(|a| a.2).collect();
        threads.sort();
        assert_eq!(threads, [0, 1]);
        let o = r.handovers.as_ref().unwrap();
        assert!(
            o.longest.iter().all(|l| l.at_ns == 149_000 && l.len_ns == 80_000),
            "{o:?}"
        );
        // The CPU each ended on is read (this machine has sched_getcpu), and the one it began
        // on is the cycle's (holds: the entry's; hand-overs: the waiter's).
        assert!(h.longest.iter().all(|l| l.cpu.is_some()), "{h:?}");
        assert!(h.longest.iter().all(|l| l.cpu_at_start == Some(0)), "{h:?}");
        assert!(
            r.handovers
                .as_ref()
                .unwrap()
                .longest
                .iter()
                .all(|l| l.cpu_at_start == Some(1)),
            "{:?}",
            r.handovers
        );
        assert_eq!(h.stretched_vcpu + h.stretched_guest, 2);
        assert!((h.stretched_share - 2.0 / 12.0).abs() < 1e-12);
        // Over the run's median hold (1 µs) + 50 µs.
        assert_eq!((h.sampled_p50_ns, h.limit_ns), (Some(1_000), Some(51_000)));
        assert_eq!(h.limit_from.as_deref(), Some(LIMIT_FROM_MEDIAN));
        // 2 × 60 µs beyond the median over 10 ms (each length its histogram bucket's middle:
        // within 0.1 %).
        assert!((h.lost_share - 0.012).abs() < 0.012e-3, "{h:?}");
        let len = h.stretched_len.unwrap();
        assert!(len.p99_ns.is_none() && (len.max_ns as f64 - 61_000.0).abs() < 100.0);
        let o = r.handovers.unwrap();
        assert_eq!((o.timed, o.stretched), (4, 2));
        // 2 × (80 µs − the median hand-over, 500 ns) over 10 ms.
        assert_eq!(o.limit_ns, Some(50_500));
        assert!((o.lost_share - 0.0159).abs() < 0.0159e-3, "{o:?}");
        assert_eq!(r.not_handed_over, 2);

        // A TSC whose rate moved makes both null with the reason.
        let moved = TscCalibration {
            hz: 1.1e9,
            ..tsc.clone()
        };
        let r = report(
            &settings(),
            0.25,
            vec![s.out.clone()],
            10_000_000,
            TscWindow::of((0, 0), (10_000_000, 10_000_000)),
            tsc.clone(),
            moved,
        );
        assert!(r.holds.is_none() && r.handovers.is_none());
        assert!(r.holds_unavailable.unwrap().contains("TSC rate moved"));
        // No waited acquisition: hand-overs null with a reason, holds measured.
        let mut one = Sampler::new(settings());
        one.record(&cycle(None, 0, 10, 1_010));
        let r = report(
            &settings(),
            0.25,
            vec![one.out],
            10_000_000,
            TscWindow::of((0, 0), (10_000_000, 10_000_000)),
            tsc.clone(),
            tsc,
        );
        assert!(r.holds.is_some() && r.handovers.is_none());
        assert!(r.handovers_unavailable.unwrap().contains("no acquisition waited"));
    }

    /// The list keeps the longest, the report the longest of all threads in the order they began.
    #[test]
    fn the_longest_stretched_intervals_are_kept_in_order() {
        let k = |start_tick, len_ns| Kept {
            start_tick,
            cpu_at_start: Some(0),
            len_ns,
            cpu: Some(0),
            guest: false,
            guest_wait_ns: Some(0),
        };
        let mut kept = Vec::new();
        for i in 0..100u64 {
            // Lengths 0, 7, 14, ... 693 in a scrambled order of start.
            keep_longest(&mut kept, k((i * 37) % 100, i * 7), 5);
        }
        let mut lens: Vec<u64> = kept.iter().map(|x| x.len_ns).collect();
        lens.sort();
        assert_eq!(lens, [665, 672, 679, 686, 693]);

        let mut a = ThreadSamples::default();
        let mut b = ThreadSamples::default();
        for i in 0..(LONGEST_KEPT as u64) {
            a.holds.longest.push(k(1_000 + i, 10 + i));
            b.holds.longest.push(k(2_000 - i, 100 + i));
        }
        let got = longest_of(&[a, b], |t| &t.holds, 1_000, 2.0);
        assert_eq!(got.len(), LONGEST_KEPT);
        // Thread 1's are all longer than thread 0's, and come in the order they began.
        assert!(got.iter().all(|s| s.thread == 1 && s.len_ns >= 100), "{got:?}");
        assert!(got.windows(2).all(|w| w[0].at_ns < w[1].at_ns));
        assert_eq!(got[0].at_ns, 2 * (2_000 - 31 - 1_000));
    }

    /// The split: a sleep is guest; a preemption by the guest is guest only if the guest kept the
    /// thread waiting for at least half the interval (a host preemption of 30 ms after which the
    /// guest ran something else for 250 µs read as guest with switches alone: the forced
    /// preemption test, 2026-12-05); without the runqueue wait any switch is guest.
    #[test]
    fn the_split_holds_the_guests_runqueue_wait_to_the_interval() {
        let sw = |voluntary, involuntary| Ctxsw {
            voluntary,
            involuntary,
        };
        let ms = 1e6;
        assert!(!guest_label(sw(0, 0), Some(0), 30.0 * ms));
        assert!(guest_label(sw(1, 0), Some(0), 30.0 * ms));
        assert!(!guest_label(sw(0, 1), Some(250_000), 30.4 * ms));
        assert!(guest_label(sw(0, 1), Some(15_200_000), 30.4 * ms));
        assert!(guest_label(sw(0, 1), None, 30.4 * ms));
        assert!(!guest_label(sw(0, 0), None, 30.4 * ms));
    }

    /// A thread that sleeps between its latest reading and a stretched hold: counted as guest.
    #[test]
    fn a_switch_since_the_latest_reading_makes_a_stretched_hold_guest() {
        let mut s = Sampler::new(settings());
        assert!(s.begin());
        std::thread::sleep(Duration::from_millis(2));
        s.record(&cycle(None, 0, 1_000, 100_000));
        let counts = |s: &Sampler| (s.out.holds.candidates(), s.out.holds.over_guest_len.len());
        assert_eq!(counts(&s), (1, 1));
        // The stretched one read the counts anew: the next, with no switch between, is vCPU.
        s.record(&cycle(None, 0, 200_000, 300_000));
        assert_eq!(counts(&s), (2, 1));
    }

    /// Stretched is judged against the run's own median, not the asked length: a run whose holds
    /// all ran 30 % over the asked 100 µs (within a looser work bound) counts only the one
    /// that ran the threshold over the others; one whose median sits under what the threads
    /// kept falls back to the provisional limit and says so.
    #[test]
    fn stretched_is_over_the_runs_own_median() {
        let slow = Settings {
            threshold_ns: 20_000,
            hold_ns: 100_000.0,
            max_work_error: 0.5,
            ..settings()
        };
        // Provisional: 100 µs / 1.5 + 20 µs = 86.7 µs.
        assert!((slow.provisional_hold_limit_ns() - 86_666.7).abs() < 1.0);
        let mut s = Sampler::new(slow);
        let mut at = 0;
        for len in [130_000, 131_000, 129_000, 130_500, 145_000, 160_000] {
            s.record(&cycle(None, 0, at, at + len));
            at += 1_000_000;
        }
        // Against the asked hold + threshold (120 µs) every one would be stretched.
        assert_eq!(s.out.holds.candidates(), 6);
        let tsc = TscCalibration {
            hz: 1e9,
            window_ns: 1,
            read_spread_ns: 0,
        };
        let window = TscWindow::of((0, 0), (10_000_000, 10_000_000));
        let r = report(
            &slow,
            1.0,
            vec![s.out.clone()],
            10_000_000,
            window,
            tsc.clone(),
            tsc.clone(),
        );
        let h = r.holds.unwrap();
        let median = h.sampled_p50_ns.unwrap();
        assert!((130_000..=131_000).contains(&median), "{h:?}");
        // Over the median + 20 µs: the 160 µs one alone (145 µs is under 150).
        assert_eq!((h.stretched, h.limit_ns), (1, Some(median + 20_000)));
        assert_eq!(h.longest.iter().map(|l| l.len_ns).collect::<Vec<_>>(), [160_000]);
        assert!((h.lost_ns - (160_000 - median) as f64).abs() < 200.0, "{h:?}");

        // Holds far under their asked length: the median + threshold is under the provisional
        // limit, which the threads kept candidates over, so it is the limit, said as such.
        let mut s = Sampler::new(slow);
        for len in [10_000, 10_000, 10_000, 90_000] {
            s.record(&cycle(None, 0, at, at + len));
            at += 1_000_000;
        }
        let r = report(&slow, 1.0, vec![s.out], 10_000_000, window, tsc.clone(), tsc);
        let h = r.holds.unwrap();
        assert_eq!((h.stretched, h.limit_ns), (1, Some(86_667)));
        assert_eq!(h.limit_from.as_deref(), Some(LIMIT_FROM_FLOOR));
    }

    #[test]
    fn a_limit_without_a_median_stands_on_the_asked_hold() {
        let l = StretchLimit::of(None, 50_000, 50_909.1, 1_000.0);
        assert_eq!(
            (l.limit_ns, l.base_ns, l.from),
            (51_000, 1_000.0, LIMIT_FROM_NO_SAMPLE)
        );
        let l = StretchLimit::of(None, 50_000, 50_000.0, 0.0);
        assert_eq!((l.limit_ns, l.base_ns), (50_000, 0.0));
        let l = StretchLimit::of(Some(700), 50_000, 50_000.0, 0.0);
        assert_eq!(
            (l.limit_ns, l.base_ns, l.from),
            (50_700, 700.0, LIMIT_FROM_MEDIAN)
        );
    }

    fn interval(at_ns: i64, len_ns: u64) -> StretchedInterval {
        StretchedInterval {
            at_ns,
            len_ns,
            thread: 0,
            cpu_at_start: Some(0),
            cpu: Some(1),
            guest: false,
            guest_wait_ns: None,
        }
    }

    /// One slice's side: `stretched` of `timed`, one of them guest, lengths around `p50` +
    /// 60 µs.
    fn side(timed: u64, stretched: u64, p50: u64, lost_ns: f64, longest: Vec<StretchedInterval>) -> Stretch {
        Stretch {
            timed,
            stretched,
            stretched_share: stretched as f64 / timed as f64,
            lost_ns,
            lost_share: 0.5,
            stretched_guest: 1,
            stretched_vcpu: stretched - 1,
            sampled_p50_ns: Some(p50),
            sampled: timed / 4,
            stretched_len: Some(Lengths {
                count: stretched,
                p50_ns: p50 + 60_000,
                p99_ns: None,
                max_ns: p50 + 90_000,
            }),
            longest,
            limit_ns: Some(p50 + 50_000),
            limit_from: Some(LIMIT_FROM_MEDIAN.into()),
        }
    }

    /// One slice's report over `window` (ticks at 2 GHz, CLOCK_MONOTONIC from 0).
    fn sliced(
        window: Option<TscWindow>,
        holds: Option<Stretch>,
        handovers: Option<Stretch>,
    ) -> PreemptionReport {
        let tsc = TscCalibration {
            hz: 2e9,
            window_ns: 20_000_000,
            read_spread_ns: window.map_or(0, |w| w.start_mono_ns),
        };
        PreemptionReport {
            sample_rate: 0.25,
            sample_every: 4,
            sampling: "sampled".into(),
            threshold_ns: 50_000,
            hold_ns: 1_000.0,
            tsc_before: tsc.clone(),
            tsc_after: tsc,
            holds_unavailable: holds.is_none().then(|| "no holds here".into()),
            handovers_unavailable: handovers
                .is_none()
                .then(|| "no acquisition waited for a release".into()),
            holds,
            handovers,
            not_handed_over: 3,
            clock_behind: 1,
            split: SPLIT_METHOD.into(),
            window,
            window_parts: Vec::new(),
        }
    }

    /// A 300 ms slice's window starting `start_ms` into the run, at 2 GHz.
    fn slice_window(start_ms: u64) -> TscWindow {
        let (start, end) = (start_ms * 1_000_000, (start_ms + 300) * 1_000_000);
        TscWindow::of((2 * start, start), (2 * end, end))
    }

    /// Two slices 600 ms apart (another arm's slice between them): counts summed, shares over
    /// the sums, one window over both and each slice's own, the listed ones on that window.
    #[test]
    fn a_sliced_arms_report_sums_its_slices_on_one_window() {
        let (w0, w1) = (slice_window(1), slice_window(601));
        let a = sliced(
            Some(w0),
            Some(side(1_000, 4, 1_000, 100_000.0, vec![interval(5_000, 70_000)])),
            Some(side(100, 2, 500, 20_000.0, vec![])),
        );
        let b = sliced(
            Some(w1),
            Some(side(3_000, 6, 1_200, 300_000.0, vec![interval(7_000, 80_000)])),
            Some(side(300, 2, 700, 40_000.0, vec![])),
        );
        let m = PreemptionReport::merge_slices(&[(a.clone(), 300_000_000), (b.clone(), 300_000_000)]);
        let w = m.window.unwrap();
        assert_eq!((w.start_tick, w.start_mono_ns), (w0.start_tick, w0.start_mono_ns));
        assert_eq!((w.end_tick, w.end_mono_ns), (w1.end_tick, w1.end_mono_ns));
        assert_eq!(w.hz, 2e9);
        assert_eq!(m.window_parts, [w0, w1]);
        assert_eq!((&m.tsc_before, &m.tsc_after), (&a.tsc_before, &b.tsc_after));
        assert_eq!((m.not_handed_over, m.clock_behind), (6, 2));
        // An ordinary report's JSON has no parts; the merged one lists them.
        assert!(serde_json::to_value(&a).unwrap().get("window_parts").is_none());
        let json = serde_json::to_value(&m).unwrap();
        assert_eq!(json["window_parts"].as_array().map(Vec::len), Some(2));

        let h = m.holds.unwrap();
        assert!(m.holds_unavailable.is_none() && m.handovers_unavailable.is_none());
        assert_eq!((h.timed, h.stretched, h.sampled), (4_000, 10, 250 + 750));
        assert_eq!((h.stretched_guest, h.stretched_vcpu), (2, 8));
        assert!((h.stretched_share - 10.0 / 4_000.0).abs() < 1e-15);
        assert_eq!(h.lost_ns, 400_000.0);
        assert!((h.lost_share - 400_000.0 / 600_000_000.0).abs() < 1e-15);
        // Slice 1 sampled three times as many: its median weighs three times as much.
        assert_eq!(h.sampled_p50_ns, Some(1_200));
        // The limits' plain median: the midpoint of the two.
        assert_eq!(h.limit_ns, Some(51_100));
        assert!(h.limit_from.unwrap().starts_with(LIMIT_FROM_SLICES));
        let len = h.stretched_len.unwrap();
        assert_eq!(
            (len.count, len.p50_ns, len.p99_ns, len.max_ns),
            (10, 61_200, None, 91_200)
        );
        // Slice 1's starts 600 ms after slice 0's: its interval at 7 µs lands at 600.007 ms.
        let at: Vec<(i64, u64)> = h.longest.iter().map(|l| (l.at_ns, l.len_ns)).collect();
        assert_eq!(at, [(5_000, 70_000), (600_007_000, 80_000)]);
        let o = m.handovers.unwrap();
        assert_eq!((o.timed, o.stretched, o.lost_ns), (400, 4, 60_000.0));
    }

    /// The listed ones of all slices: the longest [`LONGEST_KEPT`], in the order they began.
    #[test]
    fn a_sliced_arm_lists_the_longest_of_all_its_slices() {
        let list = |from: u64| -> Vec<StretchedInterval> {
            (0..LONGEST_KEPT as u64)
                .map(|i| interval(1_000 * i as i64, from + i))
                .collect()
        };
        let short = side(1_000, 32, 1_000, 0.0, list(60_000));
        let long = side(1_000, 32, 1_000, 0.0, list(90_000));
        let m = PreemptionReport::merge_slices(&[
            (sliced(Some(slice_window(0)), Some(short), None), 1),
            (sliced(Some(slice_window(400)), Some(long), None), 1),
        ]);
        let got = m.holds.unwrap().longest;
        assert_eq!(got.len(), LONGEST_KEPT);
        assert!(got.iter().all(|l| l.len_ns >= 90_000), "{got:?}");
        assert!(got.windows(2).all(|w| w[0].at_ns < w[1].at_ns));
        assert_eq!(got[0].at_ns, 400_000_000);
    }

    /// A side some slice lacks is null with that slice's reason; a slice without a window
    /// leaves the arm without one, and its listed ones without an origin (so unlisted).
    #[test]
    fn a_sliced_arm_lacks_what_a_slice_lacks() {
        let s = |longest| Some(side(1_000, 2, 1_000, 0.0, longest));
        let m = PreemptionReport::merge_slices(&[
            (
                sliced(Some(slice_window(0)), s(vec![interval(0, 70_000)]), s(vec![])),
                1,
            ),
            (sliced(None, s(vec![]), None), 1),
        ]);
        assert!(m.window.is_none() && m.window_parts.is_empty());
        let h = m.holds.unwrap();
        assert!(h.longest.is_empty() && h.timed == 2_000);
        assert!(m.handovers.is_none());
        assert_eq!(
            m.handovers_unavailable.as_deref(),
            Some("slice 1 of the arm's 2 (counted from 0): no acquisition waited for a release")
        );
        // A slice whose side is null with no reason says that it is absent.
        let mut bare = sliced(Some(slice_window(0)), None, None);
        bare.holds_unavailable = None;
        let m =
            PreemptionReport::merge_slices(&[(sliced(Some(slice_window(0)), s(vec![]), None), 1), (bare, 1)]);
        assert_eq!(
            m.holds_unavailable.as_deref(),
            Some("slice 1 of the arm's 2 (counted from 0): absent")
        );
    }

    #[test]
    fn the_weighted_median_is_the_median_with_equal_weights() {
        assert_eq!(weighted_median(vec![(30, 1), (10, 1), (20, 1)]), Some(20));
        assert_eq!(weighted_median(vec![(10, 1), (21, 1)]), Some(15));
        assert_eq!(weighted_median(vec![(10, 1), (20, 3)]), Some(20));
        assert_eq!(weighted_median(vec![(10, 5), (20, 3)]), Some(10));
        assert_eq!(weighted_median(vec![(10, 0)]), None);
        assert_eq!(weighted_median(vec![]), None);
    }
}
