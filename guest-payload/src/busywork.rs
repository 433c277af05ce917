//! Busy work of a given length: "hold the lock for H ns" as H ns of running, spun to the TSC.
//!
//! Why the clock and not a count of loop iterations: a count sized by a calibration lasts
//! whatever the CPU's speed makes it. Cloud hosts flip between speed states about 2x apart for
//! 40 ms to 2 s at a time (an Intel machine of this project's kind: busy loop p5 / p95 0.35 /
//! 0.72 ns per iteration, 43 % of samples slow, 2026-12-05), turbo and SMT siblings move it on
//! bare metal, and a count calibrated a moment before then made 2000 ns holds of x0.66 to x1.62
//! the asked length. A spin to the TSC lasts the asked time at any speed.
//!
//! Running time, not wall time: a spin is chunks of a busy loop that touches no memory
//! ([`spin_registers`]), each followed by a TSC read. A chunk that took far longer than planned
//! (over [`DISTURBED_FACTOR`] times its plan and [`DISTURBED_SLACK_NS`] more: the thread
//! preempted in the guest, its vCPU by the host, a long interrupt) counts only what its plan
//! said, so a preempted holder still owes the rest of its hold when it resumes, as a real
//! critical section does, and a disturbed hold lasts the asked time plus the disturbance. A
//! CPU at half speed is no disturbance: its chunks take twice their plan and count in full.
//!
//! Few reads, landing where asked: a spin's first chunk is planned for [`FIRST_CHUNK`] of the
//! length, and the chunks after it for all that is left, so an undisturbed spin is two chunks
//! and two reads. The first is short of the deadline on purpose: whatever ran just before a
//! spin slows its start by an amount that varies from one spin to the next (a gap right after
//! the release of a contended lock; natively, a 200 ns gap planned as one chunk overran by 14 %
//! at the median with a second thread spinning on the lock, on the machine of the note above).
//! The plans come from a line through what the spinner's first and later chunks cost (an
//! exponentially weighted mean of each's iterations and ticks, [`ChunkCost`]): a chunk's cost
//! besides its iterations is not only the read but the loop's mispredicted exit and the spin's
//! own arithmetic (natively about 40 ns here, against 10 ns for two reads back to back), and the
//! line, followed from every undisturbed chunk, carries that, the loop's pace and the CPU's
//! speed state. A spin stops once less than half a later chunk's fixed cost is owed (the next
//! read would overshoot by more). Each [`Spinner`] serves one kind of interval of one thread (a
//! hold, a gap), so its chunks are alike from one spin to the next and the line fits them where
//! they fall.
//!
//! What no line can know is the chunks' jitter: under TCG, where every read of the TSC takes a
//! lock of the emulator's, with another vCPU of the guest busy on the lock workload, chunks of
//! 200 ns run up to a few times long now and then, and each spin's last read lands past its
//! deadline by whatever its last chunk caught. So each spinner also follows the median of where
//! its spins land (a step towards it every spin) and aims that far short of the deadline: half
//! its spins end past the asked length and half short of it, which is what the work check
//! judges (the median).

use std::hint::black_box;

use serde::{Deserialize, Serialize};

use crate::preempt_sample::ticks;

/// A chunk that took more than this many times its plan (and [`DISTURBED_SLACK_NS`] more) was
/// disturbed: a speed state 2x slower is not, a preemption (50 µs to 30 ms) or an interrupt
/// under TCG (tens of µs) against chunks of 0.2-5 µs is.
pub const DISTURBED_FACTOR: i64 = 4;

/// ... and at least this much longer than planned, ns: a short top-up chunk (tens of ns) is not
/// disturbed by a few ns of jitter in the read itself.
pub const DISTURBED_SLACK_NS: f64 = 1_000.0;

/// The share of a spin its first chunk is planned for (see the module notes), where the spin
/// is long enough for two chunks: three quarters.
pub const FIRST_CHUNK: (i64, i64) = (3, 4);

/// Each chunk moves the spinner's means by 1/2^this of its difference from them: a quarter, so a
/// speed state's change is followed within a few spins and one odd chunk moves the next plan by
/// a quarter of its error.
const GAIN_SHIFT: u32 = 2;

/// What a read costs with the loop's call around nothing, measured this many times (the 10th
/// percentile kept).
const OVERHEAD_READS: usize = 65;

/// Fixed-point scale of the means and of ticks per iteration: 2^16. A spin does integer
/// arithmetic only: under TCG every floating-point operation is a call into the emulator's
/// soft float (tens of ns), which made each chunk of a 200 ns gap cost 120 ns and more.
const SCALE: u32 = 16;

/// Work spun to the TSC, for one kind of interval of one thread (see the module notes).
#[derive(Debug, Clone)]
pub struct Spinner {
    ticks_per_ns: f64,
    cost: ChunkCost,
    /// Ticks the spins aim short of their length (negative: past it): a follower of the median
    /// landing, moved a step (1/256 of the length, at least a tick) towards it by every spin,
    /// so that half the spins land past their length and half short of it whatever the
    /// chunks' jitter, which the line cannot know. At most the whole length: a spin is then
    /// its one read, and if even that lands past the length at the median, the length cannot
    /// be made here and the work check says so.
    aim: i64,
    /// The shortest length that can be made, ticks ([`Spinner::resolution_ns`]).
    resolution_ticks: f64,
    /// [`DISTURBED_SLACK_NS`] in ticks.
    slack_ticks: i64,
    pub counts: SpinCounts,
}

/// What a spinner's chunks cost, in ticks: the exponentially weighted means of (iterations,
/// ticks) of its first chunks and of its later ones, and the line through the two; all scaled
/// by 2^[`SCALE`].
#[derive(Debug, Clone, Copy)]
struct ChunkCost {
    first: (i64, i64),
    later: (i64, i64),
    /// Ticks per iteration and fixed ticks measured when the spinner was made: the line where
    /// the two means lie too close together (or slope the wrong way) to draw one.
    measured_per_iter: i64,
    measured_fixed: i64,
}

impl ChunkCost {
    /// Ticks per iteration, scaled: the slope through the two means, where it is a plausible one.
    fn per_iter(&self) -> i64 {
        let dk = self.first.0 - self.later.0;
        let m = self.measured_per_iter;
        if dk < 16 << SCALE {
            return m;
        }
        let slope = (((self.first.1 - self.later.1) as i128) << SCALE) / dk as i128;
        let slope = slope as i64;
        if slope > m / 4 && slope < m * 4 { slope } else { m }
    }

    /// Ticks a later chunk costs besides its iterations, scaled (the line at 0 iterations
    /// through the later chunks' mean): never under the measured cost of a read, nor over four
    /// times it.
    fn fixed(&self, per_iter: i64) -> i64 {
        let at_zero = self.later.1 - ((self.later.0 as i128 * per_iter as i128) >> SCALE) as i64;
        at_zero.clamp(self.measured_fixed, 4 * self.measured_fixed)
    }

    /// The iterations that take `ticks` (unscaled) on the line of slope `per_iter` through
    /// `mean`, whose slope `iters_per_tick` (scaled) is its inverse, and the ticks that many are
    /// planned to take: a first chunk is planned from the first chunks' mean, a later one from
    /// the later ones' (a first chunk also carries the spin's own start, which under TCG costs
    /// as much as a later chunk's read).
    fn plan(mean: (i64, i64), per_iter: i64, iters_per_tick: i64, ticks: i64) -> (u64, i64) {
        let extra = (ticks << SCALE) - mean.1;
        let iters = mean.0 + ((extra as i128 * iters_per_tick as i128) >> SCALE) as i64;
        let iters = (iters >> SCALE).max(0);
        let planned = mean.1 + ((((iters << SCALE) - mean.0) as i128 * per_iter as i128) >> SCALE) as i64;
        (iters as u64, (planned >> SCALE).max(1))
    }

    fn learn(mean: &mut (i64, i64), iters: u64, took: i64) {
        mean.0 += (((iters as i64) << SCALE) - mean.0) >> GAIN_SHIFT;
        mean.1 += ((took << SCALE) - mean.1) >> GAIN_SHIFT;
    }
}

/// A spinner's chunks, counted.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SpinCounts {
    /// Spins made (intervals of work).
    pub spins: u64,
    /// Chunks of the loop they took, each with its read.
    pub chunks: u64,
    /// Chunks that took far longer than planned and counted only their plan.
    pub disturbed: u64,
}

impl SpinCounts {
    pub fn add(&mut self, o: &SpinCounts) {
        self.spins += o.spins;
        self.chunks += o.chunks;
        self.disturbed += o.disturbed;
    }
}

impl Spinner {
    /// A spinner for a TSC running at `tsc_hz`, with the read's cost and the loop's pace
    /// measured now on the calling thread (about 40 µs natively; the loop warms up first, as
    /// the first run of a block under TCG includes its translation).
    pub fn new(tsc_hz: f64) -> Self {
        spin_registers(20_000);
        let (fixed, median) = chunk_overhead_ticks();
        let fixed = fixed as i64;
        const N: u64 = 4_096;
        let mut took = [0i64; 9];
        for t in &mut took {
            let t0 = ticks();
            spin_registers(N);
            *t = ticks().wrapping_sub(t0) as i64;
        }
        took.sort_unstable();
        let per_iter = (((took[took.len() / 2] - fixed).max(1)) << SCALE) / N as i64;
        let ticks_per_ns = tsc_hz / 1e9;
        Self {
            ticks_per_ns,
            cost: ChunkCost {
                first: ((N as i64) << SCALE, (fixed << SCALE) + N as i64 * per_iter),
                later: (0, fixed << SCALE),
                measured_per_iter: per_iter.max(1),
                measured_fixed: fixed << SCALE,
            },
            aim: 0,
            resolution_ticks: median,
            slack_ticks: (DISTURBED_SLACK_NS * ticks_per_ns) as i64,
            counts: SpinCounts::default(),
        }
    }

    /// `ns` in ticks of this spinner's TSC.
    pub fn ticks_for(&self, ns: f64) -> u64 {
        (ns * self.ticks_per_ns).round() as u64
    }

    /// What a read of the clock costs with the loop's call around nothing, ns, as measured when
    /// the spinner was made: the shortest interval that can be made.
    pub fn overhead_ns(&self) -> f64 {
        unscaled(self.cost.measured_fixed) / self.ticks_per_ns
    }

    /// The shortest work this spinner can make, ns: what a chunk costs besides its iterations
    /// at the median.
    pub fn resolution_ns(&self) -> f64 {
        self.resolution_ticks / self.ticks_per_ns
    }

    /// The loop's pace as this spinner last saw it, ns per iteration.
    pub fn ns_per_iter(&self) -> f64 {
        unscaled(self.cost.per_iter()) / self.ticks_per_ns
    }

    /// Spins from `start` (a TSC reading the caller took) until `length` ticks of running have
    /// passed, and returns the last reading: the end of the interval. Out of line, so every
    /// interval runs this one copy of the machine code.
    #[inline(never)]
    pub fn spin(&mut self, start: u64, length: u64) -> u64 {
        self.counts.spins += 1;
        let per_iter = self.cost.per_iter();
        let fixed = self.cost.fixed(per_iter) >> SCALE;
        // Iterations per tick, scaled: one division a spin, multiplications a chunk.
        let iters_per_tick = (1i64 << (2 * SCALE)) / per_iter;
        let length = length as i64;
        // The running the chunks aim at: the length less what the spins of late have landed
        // past it at the median (see `aim`).
        let aim = length - self.aim;
        if length == 0 {
            return start;
        }
        let mut owed = aim;
        let mut prev = start;
        let mut first = true;
        // At least one chunk: every spin ends on a read of its own, however short it aims.
        while first || owed > fixed / 2 {
            let (iters, planned) = if first {
                let target = if owed > 4 * fixed {
                    owed * FIRST_CHUNK.0 / FIRST_CHUNK.1
                } else {
                    owed
                };
                ChunkCost::plan(self.cost.first, per_iter, iters_per_tick, target)
            } else {
                ChunkCost::plan(self.cost.later, per_iter, iters_per_tick, owed)
            };
            spin_registers(iters);
            let now = ticks();
            let took = now.wrapping_sub(prev) as i64;
            prev = now;
            self.counts.chunks += 1;
            // (A TSC that went backwards reads as a huge chunk: disturbed too.)
            if took < 0 || took > (planned * DISTURBED_FACTOR).max(planned + self.slack_ticks) {
                self.counts.disturbed += 1;
                owed -= planned;
            } else {
                owed -= took;
                // Learnt clipped at twice the plan: under TCG with another vCPU busy, chunks
                // run up to a few times long now and then, which would drag the means; a loop
                // that really got slower still moves them, a doubling a chunk.
                let mean = if first {
                    &mut self.cost.first
                } else {
                    &mut self.cost.later
                };
                ChunkCost::learn(mean, iters, took.min(2 * planned));
            }
            first = false;
        }
        // Running counted against the length: one step of the median's follower.
        let over = (aim - owed) - length;
        let step = (length >> 8).max(1);
        self.aim = (self.aim + over.signum() * step).clamp(-length / 2, length);
        prev
    }

    /// Spins `length` ticks from now, `times` times in a row: before a run's start gate, so the
    /// pace is learnt before the first measured interval.
    pub fn warm_up(&mut self, length: u64, times: u32) {
        for _ in 0..times {
            self.spin(ticks(), length);
        }
    }
}

/// A scaled value as a plain one.
fn unscaled(v: i64) -> f64 {
    v as f64 / (1u64 << SCALE) as f64
}

/// The 10th percentile of [`OVERHEAD_READS`] readings of what a chunk costs besides its
/// iterations: a read, an empty call of the loop, a read.
/// Also their median: the resolution of the work. Where reading the clock is itself slow and
/// jittery (a hypervisor's TSC: back to back, two reads 26 ticks apart at the median and 1 at
/// the least), the 10th percentile can be a few ticks, far below what a read costs.
fn chunk_overhead_ticks() -> (f64, f64) {
    let mut v = [0u64; OVERHEAD_READS];
    for s in &mut v {
        let t0 = ticks();
        spin_registers(0);
        *s = ticks().wrapping_sub(t0);
    }
    v.sort_unstable();
    let p10 = v[OVERHEAD_READS / 10].max(1) as f64;
    (p10, (v[OVERHEAD_READS / 2] as f64).max(p10))
}

/// An asked length in ns that a spinner with `overhead_ns` can make: 0 (nothing), or at least
/// one chunk's cost. A shorter positive one is refused, naming `arg` and the resolution, rather
/// than made as a whole read (many times what was asked) or as nothing.
pub fn makeable(arg: &str, ns: u64, overhead_ns: f64) -> Result<(), crate::workloads::BadInput> {
    if ns == 0 || ns as f64 >= overhead_ns {
        return Ok(());
    }
    Err(crate::workloads::BadInput(format!(
        "{arg} {ns} cannot be made here: the work is spun to the TSC, and one read of it (with the loop's call) takes \
         {overhead_ns:.0} ns on this CPU (the resolution of the work), so use 0 or at least {}",
        overhead_ns.ceil() as u64
    )))
}

/// Parses a `--debug-scale-hold` (or kin) factor: positive and finite.
pub fn scale_factor(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f > 0.0 && f.is_finite() => Ok(f),
        _ => Err(format!("{s:?} is not a positive factor (e.g. 0.5 or 2)")),
    }
}

/// How a run's busy work was made, for its report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WorkMade {
    /// In words ([`METHOD`]).
    pub method: String,
    /// The TSC rate the asked lengths were turned into ticks at (measured before the run), Hz.
    pub tsc_hz: f64,
    /// What one chunk costs besides its iterations (a read and the call), ns: the median over
    /// the workers' spinners.
    pub chunk_overhead_ns: f64,
    /// The loop's pace as the spinners followed it through the run (ns per iteration, read at
    /// the sampled cycles: 10th, 50th and 90th percentile): how much the CPU's speed moved,
    /// which the work's lengths did not. Null with no sampled cycle.
    pub pace_ns_per_iter: Option<Pace>,
    /// Every worker's spins, chunks and disturbed chunks.
    pub counts: SpinCounts,
}

/// The 10th, 50th and 90th percentile of the loop's pace, ns per iteration.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Pace {
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
    pub samples: u64,
}

impl Pace {
    /// From a histogram of paces in picoseconds per iteration; None when empty.
    pub fn of(ps: &hdrhistogram::Histogram<u64>) -> Option<Self> {
        (!ps.is_empty()).then(|| Self {
            p10: ps.value_at_quantile(0.10) as f64 / 1e3,
            p50: ps.value_at_quantile(0.50) as f64 / 1e3,
            p90: ps.value_at_quantile(0.90) as f64 / 1e3,
            samples: ps.len(),
        })
    }
}

/// [`WorkMade::method`].
pub const METHOD: &str = "spun to the TSC: chunks of a busy loop, each followed by a TSC read, until the asked ns of running \
     have passed at the rate measured before the run; a chunk that took over 4x its plan and 1 us more (a preemption, a long \
     interrupt) counts only its plan, so a preempted interval still owes the rest; two chunks a spin (3/4, then the rest), \
     planned from what the spinner's chunks cost of late and aimed short by the median overshoot of its spins, so the CPU's \
     speed moves the number of iterations, not the length";

/// The median of `values`; None for none.
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    })
}

/// The busy loop. Out of line on purpose: every caller runs this one copy of the machine code.
/// Each iteration stores its counter (`black_box`): the seeds' loops that `futexlock` and the
/// host's speed probe reproduce.
#[inline(never)]
pub fn spin_iters(iters: u64) {
    for i in 0..iters {
        black_box(i);
    }
}

/// The spinners' busy loop: the same count, kept in a register, with no memory access at all.
/// A loop that stores stalls behind an earlier store still waiting for its cache line: a gap
/// right after the release of a contended lock ran its first iterations several times slower,
/// by an amount that varied with the other threads' spinning. Out of line, as [`spin_iters`].
#[inline(never)]
pub fn spin_registers(iters: u64) {
    for i in 0..iters {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: an empty instruction sequence that takes the counter in a register: it touches
        // no memory, stack or flags, and only keeps the loop from being optimised away.
        unsafe {
            std::arch::asm!("/* {0} */", in(reg) i, options(nomem, nostack, preserves_flags));
        }
        #[cfg(not(target_arch = "x86_64"))]
        black_box(i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preempt_sample::TscCalibration;

    fn spinner() -> Spinner {
        Spinner::new(TscCalibration::measure(std::time::Duration::from_millis(5)).hz)
    }

    /// The median of `n` spins of `asked` ticks, in ticks.
    fn median_spin(s: &mut Spinner, asked: u64, n: usize) -> f64 {
        let mut took: Vec<f64> = (0..n)
            .map(|_| {
                let t0 = ticks();
                s.spin(t0, asked).wrapping_sub(t0) as f64
            })
            .collect();
        took.sort_by(f64::total_cmp);
        took[n / 2]
    }

    #[test]
    fn a_spin_lasts_what_was_asked_at_any_pace() {
        let mut s = spinner();
        assert!(s.overhead_ns() > 0.0 && s.ns_per_iter() > 0.0);
        for ns in [5_000.0, 1_000.0] {
            let asked = s.ticks_for(ns);
            s.warm_up(asked, 100);
            // The median spin, against what was asked (a loaded machine's disturbed spins only
            // lengthen the upper part).
            let p50 = median_spin(&mut s, asked, 401);
            assert!(
                (p50 / asked as f64).ln().abs() < 0.03,
                "{ns} ns: median {p50} ticks for {asked} asked ({:?})",
                s.cost
            );
        }
        // The line misread x3 slow (as if the CPU had sped up 3x after it was learnt), then x3
        // fast: the next spin still lasts what was asked where its plan fell short (more
        // chunks), and within a few dozen spins the median is back where it was asked. (Not
        // the pace itself: this kind of machine flips between speed states 2x apart, and the
        // line follows the loop, not the state it was in a moment ago.)
        let asked = s.ticks_for(5_000.0);
        for misread in [3.0, 1.0 / 3.0] {
            for mean in [&mut s.cost.first, &mut s.cost.later] {
                mean.1 = (mean.1 as f64 * misread) as i64;
            }
            let t0 = ticks();
            let first = s.spin(t0, asked).wrapping_sub(t0) as f64;
            if misread > 1.0 {
                assert!(first >= asked as f64 * 0.97, "{first} vs {asked}");
            }
            s.warm_up(asked, 40);
            let p50 = median_spin(&mut s, asked, 101);
            assert!((p50 / asked as f64).ln().abs() < 0.03, "median {p50} vs {asked}");
        }
    }

    #[test]
    fn a_disturbed_chunk_counts_only_its_plan() {
        let mut s = spinner();
        let asked = s.ticks_for(20_000.0);
        s.warm_up(asked, 50);
        let before = s.counts;
        // A "preemption" in the first chunk: the thread sleeps 2 ms after the spin's start.
        let t0 = ticks();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let took = s.spin(t0, asked).wrapping_sub(t0);
        // The sleep did not count: the spin ran its whole length after it.
        assert!(s.counts.disturbed > before.disturbed, "{:?}", s.counts);
        let slept = s.ticks_for(2_000_000.0);
        assert!(took as f64 >= (slept + asked) as f64 * 0.97, "{took} ticks");
        assert_eq!(s.counts.spins, before.spins + 1);
    }

    #[test]
    fn nothing_asked_is_no_spin_and_too_short_is_refused() {
        let mut s = spinner();
        let t0 = ticks();
        assert_eq!(s.spin(t0, 0), t0);
        assert_eq!(s.counts.chunks, 0);
        assert!(makeable("--hold-ns", 0, 40.0).is_ok());
        assert!(makeable("--hold-ns", 40, 40.0).is_ok());
        let e = makeable("--hold-ns", 20, 40.4).unwrap_err().to_string();
        assert!(
            e.contains("--hold-ns 20") && e.contains("40 ns") && e.contains("at least 41"),
            "{e}"
        );
        assert_eq!(scale_factor("2").unwrap(), 2.0);
        assert!(scale_factor("0").is_err() && scale_factor("-1").is_err() && scale_factor("inf").is_err());
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }
}
