//! `lock`: a generic lock microbenchmark over any registered algorithm.
//!
//! T threads loop for a fixed duration: acquire (trylock first, so an acquisition that found
//! the lock taken is counted as contended), update cache-line-padded shared data, hold for
//! `hold_ns` of work, release, then `gap_ns` of work outside. Two live exclusion checks sit next
//! to the shared data in every run: an owner-identity cell ([`OwnerCheck`]: each owner writes
//! its id on entry and must still find it on exit) and a non-atomic counter whose final value
//! must equal the ops total.
//!
//! Hold and gap are spun to the TSC ([`crate::busywork`]): `hold_ns` of running at whatever
//! speed the CPU has, each thread with a spinner for each, made and warmed up by the thread
//! itself before the start gate. The only clock reads inside a critical section are the TSC
//! reads of the hold's spin and the one right before it (a few cycles natively, no syscall);
//! acquisition latency is sampled: one in [`LATENCY_SAMPLE_EVERY`] contended acquisitions reads
//! CLOCK_MONOTONIC when its try_lock failed and again just after its release, and the hold is
//! taken off that interval (see [`LockResult::acquire_latency`]). Every run checks itself
//! ([`crate::checks`]):
//! - the work as it ran, the run's verdict: the timed holds' median (1 cycle in 64) within a
//!   factor 1 + `--max-work-error` (default 0.10) of `--hold-ns` either way, or within one read
//!   of the clock where a read costs more (`hold_as_asked`), and the same for the gaps
//!   (`gap_as_asked`); see [`crate::work_as_run`];
//! - the TSC rate the work was spun at against the rate over the run's window, within 2 %
//!   (`tsc_rate_held`): the work's lengths against an independent clock;
//! - bookkeeping guards, which hold whatever the load (load only slows a run down) and so catch
//!   only the payload's own accounting errors: CPU time inside the window within elapsed × CPUs,
//!   hold + gap per second within the CPUs the threads can use, exclusive holds per second
//!   within one.
//!
//! Preempted holds and hand-overs ([`crate::preempt_sample`]): every acquisition reads the TSC
//! right before its hold's spin and again as the last thing before its unlock, which ends the
//! hold, and every release stores that read in a cell the lock protects, so an acquisition that
//! waited knows when the lock was handed to it; one in `--hold-sample-rate`⁻¹ reads the
//! thread's context switches (a syscall, outside the critical section). `--no-hold-sampling`
//! takes the sampling, the timed cycles and those two reads out (the spins' own reads remain:
//! they are the work's clock).

use std::cell::UnsafeCell;
use std::collections::BTreeMap;
use std::sync::Arc;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use lock_api::RawMutex;
use serde::{Deserialize, Serialize};

use super::gated::GatedWorkers;
use super::stall::{Stall, StallReport, StallSpec};
use crate::busywork::{self, SpinCounts, Spinner, WorkMade};
use crate::checks::{self, Check, TOLERANCE};
use crate::env::Env;
use crate::locks::owner::{OwnerCheck, OwnerId};
use crate::locks::{self, LockInfo, LockVisitor, futex};
use crate::metrics::{Ctxsw, Fairness, Latency, new_latency_histogram};
use crate::preempt_sample::{
    self, Cycle, PreemptionReport, Sampler, Settings, TscCalibration, TscWindow, ticks,
};
use crate::report::Report;
use crate::work_as_run::{self, TIMED_EVERY, TimedWork, WorkAsRun, WorkSamples};

/// One in this many contended acquisitions (per thread, starting with the first) is timed.
pub const LATENCY_SAMPLE_EVERY: u64 = 8;

/// Fewest latency samples from which a 99th percentile is reported: below that, the "p99" of
/// the histogram is one of its few largest samples (with 8 it is the maximum).
pub const MIN_SAMPLES_FOR_P99: u64 = 100;

#[derive(Debug, Clone, ClapArgs, Serialize, Deserialize)]
pub struct Args {
    /// Lock algorithm (see `ocrig-payload list`).
    #[arg(long, value_parser = locks::parse_algo, default_value = "ticket")]
    pub algo: String,
    /// Worker threads.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub threads: u32,
    /// How long to run, in milliseconds.
    #[arg(long, default_value_t = 3000, value_parser = clap::value_parser!(u64).range(1..))]
    pub duration_ms: u64,
    /// Work inside the critical section, in nanoseconds of running (spun to the TSC).
    #[arg(long, default_value_t = 200)]
    pub hold_ns: u64,
    /// Work between releases and the next acquisition, in nanoseconds of running.
    #[arg(long, default_value_t = 200)]
    pub gap_ns: u64,
    /// Share of acquisitions (per thread), in (0, 1], that read the thread's context switches
    /// before trying the lock (the window that splits stretched holds and hand-overs into guest
    /// and vCPU preemption) and record their lengths; every hold is timed regardless. The
    /// period used is 1 / rate rounded. `--no-hold-sampling` switches it all off.
    #[arg(long, default_value_t = preempt_sample::DEFAULT_SAMPLE_RATE, value_parser = sample_rate,
          allow_negative_numbers = true)]
    #[serde(default = "default_sample_rate")]
    pub hold_sample_rate: f64,
    /// A hold longer than the run's median hold by more than this, or a hand-over longer than
    /// the run's median hand-over by more than this, is stretched (a preemption), in
    /// nanoseconds; at most a host time slice (750 µs).
    #[arg(long, default_value_t = preempt_sample::DEFAULT_STRETCH_THRESHOLD_NS,
          value_parser = clap::value_parser!(u64).range(1..=preempt_sample::MAX_STRETCH_THRESHOLD_NS),
          allow_negative_numbers = true)]
    #[serde(default = "default_threshold")]
    pub stretch_threshold_ns: u64,
    /// No hold/hand-over timing or sampling: no TSC read inside critical sections but the hold's
    /// own spin (the report's `preemption` is then null, with the reason, and the holds and gaps
    /// as they ran are not judged). For measuring their cost.
    #[arg(long)]
    #[serde(default)]
    pub no_hold_sampling: bool,
    /// Largest accepted error of the hold and gap as they ran (sampled in the run, timed with the
    /// TSC: their median) against --hold-ns and --gap-ns: within a factor 1 + this either way
    /// (0.10: [1/1.1, 1.1]); beyond it the run is not a result (exit 3).
    #[arg(long, default_value_t = work_as_run::MAX_WORK_ERROR, value_parser = crate::checks::positive_fraction)]
    #[serde(default = "default_work_error")]
    pub max_work_error: f64,
    /// Test only: multiplies the hold's length by this, so the hold is deliberately not what
    /// was asked (the gap, unscaled, shows meanwhile that the rest of the work was made right).
    #[arg(long, hide = true, default_value_t = 1.0, value_parser = busywork::scale_factor)]
    #[serde(default = "one")]
    pub debug_scale_hold: f64,
    /// Test only: the same for the gap's length.
    #[arg(long, hide = true, default_value_t = 1.0, value_parser = busywork::scale_factor)]
    #[serde(default = "one")]
    pub debug_scale_gap: f64,
    /// Test only: a known guest preemption, `CPU:ON_MS:PERIOD_MS`: a thread pinned to that
    /// guest CPU at SCHED_FIFO takes it for ON_MS every PERIOD_MS of the window
    /// ([`super::stall`]); its bursts are reported beside the stretched intervals.
    #[arg(long, hide = true, value_parser = super::stall::parse_spec)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debug_guest_stall: Option<StallSpec>,
    /// Split stretched holds and hand-overs with the thread's runqueue wait in the guest too
    /// (`/proc/thread-self/schedstat`, read with the context switches): a guest switch counts
    /// as guest preemption only if the guest kept the thread waiting for half the interval (a
    /// host stall the guest follows with a switch stays vcpu). Off by default: it costs a fresh
    /// guest's first run about 2 % against the later runs (measured 2026-12-05).
    #[arg(long)]
    #[serde(default)]
    pub split_runqueue_wait: bool,
}

fn default_work_error() -> f64 {
    work_as_run::MAX_WORK_ERROR
}

fn one() -> f64 {
    1.0
}

fn is_one(f: &f64) -> bool {
    *f == 1.0
}

fn default_sample_rate() -> f64 {
    preempt_sample::DEFAULT_SAMPLE_RATE
}

fn default_threshold() -> u64 {
    preempt_sample::DEFAULT_STRETCH_THRESHOLD_NS
}

/// A sampling rate: a share of acquisitions in (0, 1] (0 would sample nothing; use
/// `--no-hold-sampling` to say that).
fn sample_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(format!(
            "{s:?} is not a sampling rate in (0, 1] (e.g. 0.015625 for 1 in 64; --no-hold-sampling switches sampling off)"
        )),
    }
}

/// The `lock` workload's fields in the report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LockResult {
    pub algo: String,
    pub threads: u32,
    pub duration_ms: u64,
    pub hold_ns: u64,
    pub gap_ns: u64,
    pub ops_total: u64,
    pub ops_per_sec: f64,
    pub ops_per_thread: Vec<u64>,
    pub fairness: Fairness,
    /// Acquisitions whose trylock failed (the lock was held by someone else).
    pub contended: u64,
    pub contention_rate: f64,
    /// The payload's futex counters, for algorithms whose futex calls go through them.
    pub futex: Option<futex::FutexCounts>,
    /// Why `futex` is null.
    pub futex_unavailable: Option<String>,
    /// Sampled contended acquisitions: from the failed try_lock until the lock was owned,
    /// estimated as (time from the failed try_lock to just after the release) − the hold made,
    /// so that CLOCK_MONOTONIC is never read while the lock is held. It therefore includes the release itself
    /// (a FUTEX_WAKE for sleeping locks) and any preemption of the new owner during its hold.
    /// Null when no acquisition was contended (an uncontended acquisition is never timed).
    pub acquire_latency: Option<Latency>,
    /// Which acquisitions `acquire_latency` samples.
    pub acquire_latency_sampling: String,
    /// Increments of the unprotected counter that were lost (must be 0).
    pub lost_updates: u64,
    /// Owner-identity check failures: another thread owned the lock inside an owner's critical
    /// section (must be 0).
    pub owner_violations: u64,
    /// Per worker: context switches during its measured loop.
    pub threads_ctxsw: Vec<Ctxsw>,
    /// The 99th percentile of `acquire_latency` (ns), only from at least
    /// [`MIN_SAMPLES_FOR_P99`] samples; else null, with `acquire_latency_samples` saying why.
    pub acquire_p99_ns: Option<u64>,
    /// How many contended acquisitions `acquire_latency` holds.
    pub acquire_latency_samples: u64,
    /// How the hold and gap were made.
    pub work: WorkMade,
    /// The test-only `--debug-scale-hold` and `--debug-scale-gap` factors the lengths were
    /// multiplied by (absent when 1).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub debug_scale_hold: f64,
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub debug_scale_gap: f64,
    /// CPU time of every worker inside the measured window (thread CPU clocks read after the
    /// gate and at the stop), nanoseconds.
    pub window_cpu_ns: u64,
    /// Sampled holds and hand-overs, stretched ones (preemptions) among them; null when
    /// sampling was off, with `preemption_unavailable` saying so.
    pub preemption: Option<PreemptionReport>,
    pub preemption_unavailable: Option<String>,
    /// The hold and gap as they ran (sampled, timed) against the asked ones: what
    /// `hold_as_asked` and `gap_as_asked` judge.
    pub work_as_run: WorkAsRun,
    /// The known guest preemption a test asked for (`--debug-guest-stall`), burst by burst.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debug_guest_stall: Option<StallReport>,
}

#[repr(align(128))]
struct Padded<T>(T);

/// What the lock protects: the owner-identity cell sits on the same cache line as the data.
struct Protected {
    owner: OwnerCheck,
    data: UnsafeCell<[u64; 6]>,
    /// The TSC of the last release (0: none yet, or sampling off). Written by the owner just
    /// before its unlock and read by the next owner right after its lock: the lock's own
    /// release/acquire orders the two, so it needs no atomic (and it shares the line the owner
    /// already has).
    release_ticks: UnsafeCell<u64>,
}

struct Shared<R: RawMutex> {
    lock: Padded<R>,
    protected: Padded<Protected>,
    stop: Padded<AtomicBool>,
}

// SAFETY: `protected.data` is only accessed while `lock` is held.
unsafe impl<R: RawMutex + Sync> Sync for Shared<R> {}

/// How long each worker warms its spinners up before the start gate: each spin's first chunk
/// teaches its pace, so a few hundred spins make the first measured ones land where they should
/// (under TCG the first runs of the loop's code also include its translation).
const WARM_UP: Duration = Duration::from_millis(5);

/// How long before a scheduled gate the workers stop warming up and go to it.
const WARM_UP_MARGIN: Duration = Duration::from_millis(2);

/// What a worker makes itself before the start gate, so the window holds none of it: its
/// spinners (warmed up), its sampler, and the histograms it records into (their pages in).
struct Prepared {
    spinners: Spinners,
    sampler: Option<Sampler>,
    work: Option<WorkSamples>,
    cycle: hdrhistogram::Histogram<u64>,
}

/// A worker's two spinners, made and warmed up by the worker itself before the gate.
struct Spinners {
    hold: Spinner,
    gap: Spinner,
}

impl Spinners {
    /// Made and warmed up for [`WARM_UP`], or until `until` where that is later.
    fn warmed_up(tsc_hz: f64, hold_ticks: u64, gap_ticks: u64, until: Option<Instant>) -> Self {
        let (mut hold, mut gap) = (Spinner::new(tsc_hz), Spinner::new(tsc_hz));
        let until = (Instant::now() + WARM_UP).max(until.unwrap_or_else(Instant::now));
        while Instant::now() < until {
            hold.warm_up(hold_ticks, 8);
            gap.warm_up(gap_ticks, 8);
        }
        Self { hold, gap }
    }
}

struct ThreadOutcome {
    ops: u64,
    contended: u64,
    /// Sampled "failed try_lock → after release" intervals, ns.
    cycle: hdrhistogram::Histogram<u64>,
    ctxsw: Ctxsw,
    window_cpu_ns: u64,
    samples: Option<preempt_sample::ThreadSamples>,
    work: Option<WorkSamples>,
    /// The hold spinner's chunk overhead, ns, and both spinners' counts.
    chunk_overhead_ns: f64,
    spins: SpinCounts,
}

pub fn run(args: &Args) -> anyhow::Result<Report> {
    locks::with_algo(&args.algo, Bench(args))
        .ok_or_else(|| anyhow::anyhow!("unknown lock algorithm '{}'", args.algo))?
}

struct Bench<'a>(&'a Args);

impl LockVisitor for Bench<'_> {
    type Output = anyhow::Result<Report>;
    fn visit<R: RawMutex + Send + Sync + 'static>(self, info: &'static LockInfo) -> Self::Output {
        bench::<R>(self.0, info)
    }
}

/// The hold and gap the work is made to, ns: the asked ones times the test-only scales.
fn made_ns(args: &Args) -> (f64, f64) {
    (
        args.hold_ns as f64 * args.debug_scale_hold,
        args.gap_ns as f64 * args.debug_scale_gap,
    )
}

fn bench<R: RawMutex + Send + Sync + 'static>(args: &Args, info: &LockInfo) -> anyhow::Result<Report> {
    let shared = Arc::new(Shared::<R> {
        lock: Padded(R::INIT),
        protected: Padded(Protected {
            owner: OwnerCheck::new(),
            data: UnsafeCell::new([0; 6]),
            release_ticks: UnsafeCell::new(0),
        }),
        stop: Padded(AtomicBool::new(false)),
    });
    // Measured before any worker starts (they would load the CPU it measures on): the rate the
    // work is spun at, and what a chunk of it costs here (the shortest that can be made).
    let tsc_before = TscCalibration::recent_or_measure(
        preempt_sample::TSC_CALIBRATION_WINDOW,
        preempt_sample::TSC_CALIBRATION_REUSED_WITHIN,
    );
    let probe = Spinner::new(tsc_before.hz);
    busywork::makeable("--hold-ns", args.hold_ns, probe.resolution_ns())?;
    busywork::makeable("--gap-ns", args.gap_ns, probe.resolution_ns())?;
    let (hold_made, gap_made) = made_ns(args);
    let (hold_ticks, gap_ticks) = (probe.ticks_for(hold_made), probe.ticks_for(gap_made));
    let tsc_hz = tsc_before.hz;
    let ns_per_tick = 1e9 / tsc_hz;
    let sampling = (!args.no_hold_sampling).then(|| Settings {
        every: Settings::every_for(args.hold_sample_rate),
        threshold_ns: args.stretch_threshold_ns,
        hold_ns: hold_made,
        tsc_hz,
        runqueue_wait: args.split_runqueue_wait,
        max_work_error: args.max_work_error,
    });
    futex::reset_counts();

    // The end is stamped (and so every worker's CPU reading precedes it) while every worker is
    // parked at the stop gate.
    let opening = super::start::scheduled_opening();
    let workers = GatedWorkers::spawn(
        "lock-worker",
        args.threads,
        move |_| {
            let (sampler, work, cycle) = (
                sampling.map(Sampler::new),
                sampling.is_some().then(WorkSamples::default),
                new_latency_histogram(),
            );
            // The spinners last, warming up until the gate: a sliced run's slice waits for its
            // window's time busy, as back-to-back runs are (an idle CPU comes back in another
            // speed state), and the pace they learn is the pace at the window's start.
            let until = opening.map(|at| at.checked_sub(WARM_UP_MARGIN).unwrap_or(at));
            Prepared {
                spinners: Spinners::warmed_up(tsc_hz, hold_ticks, gap_ticks, until),
                sampler,
                work,
                cycle,
            }
        },
        {
            let shared = Arc::clone(&shared);
            move |t, prepared| {
                let lengths = (hold_ticks, gap_ticks);
                worker(&shared, t as OwnerId + 1, lengths, prepared, ns_per_tick)
            }
        },
    )?;
    // The window's start on the TSC (stamped with `start`), for the stretched intervals' times
    // and the rate over the run.
    let (start, window_start) = {
        let s = workers.start();
        (s.at, s.tsc)
    };
    let origin_tick = window_start.0;
    let stall = match (args.debug_guest_stall, args.no_hold_sampling) {
        (Some(spec), false) => Some(Stall::start(spec, origin_tick)),
        (Some(_), true) => Some(Err(anyhow::anyhow!(
            "--debug-guest-stall times its bursts on the TSC: not with --no-hold-sampling"
        ))),
        _ => None,
    };
    if !matches!(stall, Some(Err(_))) {
        std::thread::sleep(Duration::from_millis(args.duration_ms));
    }
    // Relaxed suffices: the flag carries no data, and the stop gate synchronises the results.
    shared.stop.0.store(true, Ordering::Relaxed);
    let (end, window_end) = {
        let s = workers.stop();
        (s.at, s.tsc)
    };
    let window = TscWindow::of(window_start, window_end);
    // The stall ends with the window, before anything after it is timed.
    let stall = stall.map(|s| s.and_then(|s| s.stop(window.hz)));
    crate::probe::window_close();
    let mut outcomes: Vec<ThreadOutcome> = workers.join("lock")?;
    let debug_guest_stall = stall.transpose()?;
    let tsc_after = TscCalibration::measure(preempt_sample::TSC_CALIBRATION_WINDOW);
    // Every counted operation lies inside the window: each worker was parked at the stop gate.
    let elapsed = end.saturating_duration_since(start);
    let (futex, futex_unavailable) = super::futex_counts(info);
    let env = Env::read();

    let ops_per_thread: Vec<u64> = outcomes.iter().map(|o| o.ops).collect();
    let ops_total: u64 = ops_per_thread.iter().sum();
    let contended: u64 = outcomes.iter().map(|o| o.contended).sum();
    // The threads' histograms are added into the first thread's, and their samples moved out:
    // the teardown makes no new histogram (each is about 220 KB written, slow under emulation,
    // and a sliced run's next slice is due soon).
    if let Some((first, rest)) = outcomes.split_first_mut() {
        for o in rest.iter() {
            first.cycle.add(&o.cycle)?;
        }
    }
    // SAFETY: every worker has been joined; no one else touches the data now.
    let counted = unsafe { (*shared.protected.0.data.get())[0] };
    let secs = elapsed.as_secs_f64();
    // What the sampled interval includes besides the wait: the hold as made.
    let cycle = outcomes.first().map(|o| &o.cycle).filter(|c| !c.is_empty());
    let acquire_latency = cycle.map(|c| Latency::of(c).minus(hold_made.round() as u64));
    let acquire_latency_samples = cycle.map_or(0, |c| c.len());
    let thread_samples: Vec<preempt_sample::ThreadSamples> =
        outcomes.iter_mut().filter_map(|o| o.samples.take()).collect();
    let preemption = sampling.map(|s| {
        preempt_sample::report(
            &s,
            args.hold_sample_rate,
            thread_samples,
            elapsed.as_nanos() as u64,
            window,
            tsc_before,
            tsc_after,
        )
    });
    let preemption_unavailable = preemption
        .is_none()
        .then(|| "hold/hand-over timing switched off (--no-hold-sampling)".to_string());
    let (work_as_run, work) = work_of(args, &mut outcomes, preemption_unavailable.as_deref(), tsc_hz);
    let result = LockResult {
        algo: args.algo.clone(),
        threads: args.threads,
        duration_ms: args.duration_ms,
        hold_ns: args.hold_ns,
        gap_ns: args.gap_ns,
        ops_total,
        ops_per_sec: ops_total as f64 / secs,
        fairness: Fairness::of(&ops_per_thread),
        ops_per_thread,
        contended,
        contention_rate: if ops_total == 0 {
            0.0
        } else {
            contended as f64 / ops_total as f64
        },
        futex,
        futex_unavailable,
        acquire_p99_ns: acquire_latency
            .as_ref()
            .filter(|_| acquire_latency_samples >= MIN_SAMPLES_FOR_P99)
            .map(|l| l.p99_ns),
        acquire_latency_samples,
        acquire_latency,
        acquire_latency_sampling: format!(
            "1 in {LATENCY_SAMPLE_EVERY} contended acquisitions (first try_lock failed), per thread; uncontended ones are never timed; \
             acquire_p99_ns only from at least {MIN_SAMPLES_FOR_P99} samples"
        ),
        lost_updates: ops_total.saturating_sub(counted),
        owner_violations: shared.protected.0.owner.violations(),
        threads_ctxsw: outcomes.iter().map(|o| o.ctxsw).collect(),
        window_cpu_ns: outcomes.iter().map(|o| o.window_cpu_ns).sum(),
        work,
        debug_scale_hold: args.debug_scale_hold,
        debug_scale_gap: args.debug_scale_gap,
        preemption,
        preemption_unavailable,
        work_as_run,
        debug_guest_stall,
    };
    anyhow::ensure!(
        result.owner_violations == 0,
        "mutual exclusion violated by '{}': {} owner-identity violations",
        info.name,
        result.owner_violations
    );
    anyhow::ensure!(
        result.lost_updates == 0 && counted == ops_total,
        "mutual exclusion violated by '{}': counter {counted} != ops {ops_total}",
        info.name
    );
    let checks = checks_of(
        &result,
        made_ns(args),
        window.hz,
        elapsed.as_nanos() as u64,
        env.cpus_allowed,
        args.max_work_error,
    );
    Ok(Report::new(
        "lock",
        elapsed.as_nanos() as u64,
        env,
        metrics_of(&result),
        &result,
    )?
    .with_checks(checks))
}

/// The hold and gap as they ran, from every thread's timed cycles, and how they were made.
fn work_of(
    args: &Args,
    outcomes: &mut [ThreadOutcome],
    timing_off: Option<&str>,
    tsc_hz: f64,
) -> (WorkAsRun, WorkMade) {
    // Added into the first thread's samples (no new histograms: see `run`'s teardown).
    let mut counts = SpinCounts::default();
    let mut works = outcomes.iter_mut().filter_map(|o| o.work.take());
    let mut work = works.next().unwrap_or_default();
    for w in works {
        work.add(&w);
    }
    for o in outcomes.iter() {
        counts.add(&o.spins);
    }
    let as_run = WorkAsRun {
        hold: TimedWork::of(
            "hold",
            args.hold_ns,
            &work.holds,
            work.clock_read_ns(),
            timing_off,
        ),
        gap: TimedWork::of("gap", args.gap_ns, &work.gaps, work.clock_read_ns(), timing_off),
        method: work_as_run::METHOD.into(),
    };
    let made = WorkMade {
        method: busywork::METHOD.into(),
        tsc_hz,
        chunk_overhead_ns: busywork::median(outcomes.iter().map(|o| o.chunk_overhead_ns).collect())
            .unwrap_or(f64::NAN),
        pace_ns_per_iter: busywork::Pace::of(&work.pace_ps),
        counts,
    };
    (as_run, made)
}

/// The run's checks. `hold_as_asked` and `gap_as_asked` judge the work by what happened in the
/// run, `tsc_rate_held` the clock it was spun to; `work_done` that the run made at least one
/// operation (the others pass on an empty run). The other three are bookkeeping guards: they
/// hold whatever the machine's load (load only slows a run down), and fail only when the
/// payload's own accounting is wrong (a start stamped late, CPU counted twice, work counted
/// that was not done, a hold that ended early). `made` is the hold and gap made, ns;
/// `window_hz` the TSC's rate over the run's window.
fn checks_of(
    r: &LockResult,
    made: (f64, f64),
    window_hz: f64,
    elapsed_ns: u64,
    cpus_allowed: usize,
    max_work_error: f64,
) -> Vec<Check> {
    let (hold_s, gap_s) = (made.0 / 1e9, made.1 / 1e9);
    let usable = (r.threads as usize).min(cpus_allowed.max(1));
    let work = r.ops_per_sec * (hold_s + gap_s);
    let holds = r.ops_per_sec * hold_s;
    vec![
        checks::cpu_within_elapsed(r.window_cpu_ns, elapsed_ns, cpus_allowed),
        checks::work_done(r.ops_total, "lock operations", elapsed_ns),
        checks::tsc_rate_held(r.work.tsc_hz, window_hz),
        checks::work_as_asked("hold_as_asked", "--hold-ns", &r.work_as_run.hold, max_work_error),
        checks::work_as_asked("gap_as_asked", "--gap-ns", &r.work_as_run.gap, max_work_error),
        Check::at_most(
            "work_within_cpus",
            work,
            usable as f64 * TOLERANCE,
            format!(
                "{:.0} ops/s x ({:.1} + {:.1}) ns of hold + gap is {work:.3} CPU-s of work per second, \
                 for min({} threads, {cpus_allowed} CPUs allowed) = {usable} CPUs (x{TOLERANCE})",
                r.ops_per_sec,
                hold_s * 1e9,
                gap_s * 1e9,
                r.threads
            ),
        ),
        Check::at_most(
            "holds_serialised",
            holds,
            TOLERANCE,
            format!(
                "{:.0} ops/s x {:.1} ns of hold is {holds:.3} s of exclusive hold per second (at most 1, x{TOLERANCE})",
                r.ops_per_sec,
                hold_s * 1e9
            ),
        ),
    ]
}

fn metrics_of(r: &LockResult) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    m.insert("ops_per_sec".into(), r.ops_per_sec);
    m.insert("ops_total".into(), r.ops_total as f64);
    m.insert("contended".into(), r.contended as f64);
    m.insert("contention_rate".into(), r.contention_rate);
    m.insert("jain".into(), r.fairness.jain);
    m.insert("min_thread_ops".into(), r.fairness.min as f64);
    m.insert("max_thread_ops".into(), r.fairness.max as f64);
    if let Some(p99) = r.acquire_p99_ns {
        m.insert("acquire_p99_ns".into(), p99 as f64);
    }
    if let Some(f) = r.futex {
        m.insert("futex_waits".into(), f.waits as f64);
        m.insert("futex_wakes".into(), f.wakes as f64);
    }
    Ctxsw::insert_metrics(&r.threads_ctxsw, &mut m);
    if let Some(p) = &r.preemption {
        for (name, s) in [("hold", &p.holds), ("handover", &p.handovers)] {
            if let Some(s) = s {
                m.insert(format!("stretched_{name}_share"), s.stretched_share);
                m.insert(format!("stretched_{name}_lost_share"), s.lost_share);
            }
        }
    }
    m
}

/// One critical section: owner check around the protected update and the hold's spin. Returns
/// the TSC read right before the spin (with the CPU it was read on, with `timing`; an ordered
/// read then, so the update's stores are out of the way) and the spin's last read, and nothing
/// else between, so the work's hold is the spin alone: the update and its cache misses fall in
/// the hand-overs, the owner check's leave in the hold the preemption figures time.
#[inline(always)]
fn critical(
    p: &Protected,
    me: OwnerId,
    spinner: &mut Spinner,
    hold_ticks: u64,
    timing: bool,
) -> ((u64, u32), u64) {
    p.owner.enter(me);
    // SAFETY: the caller holds the lock; the data is only touched under it.
    unsafe {
        let data = &mut *p.data.get();
        let v = std::ptr::read_volatile(&data[0]);
        std::ptr::write_volatile(&mut data[0], v + 1);
        data[1] = data[1].wrapping_add(v);
    }
    let entered = if timing {
        preempt_sample::ordered_ticks_on_cpu()
    } else {
        (ticks(), preempt_sample::NO_CPU)
    };
    let released = spinner.spin(entered.0, hold_ticks);
    p.owner.leave(me);
    (entered, released)
}

fn worker<R: RawMutex>(
    shared: &Shared<R>,
    me: OwnerId,
    (hold_ticks, gap_ticks): (u64, u64),
    prepared: Prepared,
    ns_per_tick: f64,
) -> ThreadOutcome {
    let Prepared {
        mut spinners,
        mut sampler,
        mut work,
        cycle,
    } = prepared;
    let mut out = ThreadOutcome {
        ops: 0,
        contended: 0,
        cycle,
        ctxsw: Ctxsw::default(),
        window_cpu_ns: 0,
        samples: None,
        work: None,
        chunk_overhead_ns: spinners.hold.overhead_ns(),
        spins: SpinCounts::default(),
    };
    // Only the run's own spins are counted (not the warm-up's).
    spinners.hold.counts = SpinCounts::default();
    spinners.gap.counts = SpinCounts::default();
    let lock = &shared.lock.0;
    let protected = &shared.protected.0;
    let timing = sampler.is_some();
    let cpu0 = crate::clock::thread_cpu_ns();
    let before = Ctxsw::this_thread();
    while !shared.stop.0.load(Ordering::Relaxed) {
        // A preemption anywhere below only lengthens the interval it falls in: before the
        // try_lock, or between the failed try_lock and `began`, it is outside every figure;
        // between `began` and lock() returning it is waiting (outside too, unless the lock was
        // handed to this thread meanwhile: then it is the hand-over's); between lock() and
        // `entered` a stretched hand-over (the lock was ours and no one ran in it); between
        // `entered` and `released` a stretched hold (whose spin still owes the rest of the
        // hold when it resumes, if it fell in the spin); between `released` and the unlock
        // store it counts in the next owner's hand-over (a store or two; for MCS and CLH the
        // wait for the successor's link too, which only the successor can hold up).
        let sampled = sampler.as_mut().is_some_and(|s| s.begin());
        let (wait_began, sample) = if lock.try_lock() {
            (None, None)
        } else {
            out.contended += 1;
            let t0 = (out.contended % LATENCY_SAMPLE_EVERY == 1 % LATENCY_SAMPLE_EVERY).then(Instant::now);
            let began = if timing {
                preempt_sample::ticks_on_cpu()
            } else {
                (0, preempt_sample::NO_CPU)
            };
            lock.lock();
            (Some(began), t0)
        };
        // SAFETY: read under the lock (the cell's writers all hold it).
        let previous_release = if timing {
            unsafe { *protected.release_ticks.get() }
        } else {
            0
        };
        let ((entered, entered_cpu), spun) = critical(protected, me, &mut spinners.hold, hold_ticks, timing);
        // The release as the preemption figures time it: read after the owner check, the last
        // thing before the unlock's store, so a preemption of the owner anywhere in its section
        // stretches its own hold, judged by its own evidence. (Timed from the spin's end, one in
        // the owner check stretched the next owner's hand-over instead, judged by that
        // thread's: a guest's burst that stopped the owner there came back as the waiter's
        // hand-over labelled vcpu, CI of 2026-12-06.)
        let released = if timing {
            let t = ticks();
            // SAFETY: still under the lock.
            unsafe { *protected.release_ticks.get() = t };
            t
        } else {
            spun
        };
        // SAFETY: this thread acquired the lock above.
        unsafe { lock.unlock() };
        if let Some(s) = sampler.as_mut() {
            s.record(&Cycle {
                wait_began: wait_began.map(|w| w.0),
                wait_cpu: wait_began.map_or(preempt_sample::NO_CPU, |w| w.1),
                entered,
                entered_cpu,
                previous_release,
                released,
                sampled,
            });
        }
        if let Some(t0) = sample {
            let _ = out.cycle.record((t0.elapsed().as_nanos() as u64).max(1));
        }
        out.ops += 1;
        // The gap starts after the release (the release is the lock's cost, not the gap's: an
        // MCS release that waits for its successor's link took 250 ns under TCG).
        let gap_start = ticks();
        let gap_end = spinners.gap.spin(gap_start, gap_ticks);
        if let (Some(w), true) = (work.as_mut(), out.ops % TIMED_EVERY == TIMED_EVERY / 2) {
            let pace = if hold_ticks > 0 {
                &spinners.hold
            } else {
                &spinners.gap
            }
            .ns_per_iter();
            let lengths = (spun.wrapping_sub(entered), gap_end.wrapping_sub(gap_start));
            w.record(lengths, ns_per_tick, pace);
        }
    }
    out.ctxsw = Ctxsw::this_thread().since(before);
    out.window_cpu_ns = crate::clock::thread_cpu_ns().saturating_sub(cpu0);
    out.samples = sampler.map(|s| s.out);
    out.work = work;
    out.spins = spinners.hold.counts;
    out.spins.add(&spinners.gap.counts);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(algo: &str, threads: u32) -> Args {
        Args {
            algo: algo.into(),
            threads,
            duration_ms: 150,
            hold_ns: 100,
            gap_ns: 100,
            hold_sample_rate: preempt_sample::DEFAULT_SAMPLE_RATE,
            stretch_threshold_ns: preempt_sample::DEFAULT_STRETCH_THRESHOLD_NS,
            no_hold_sampling: false,
            max_work_error: work_as_run::MAX_WORK_ERROR,
            debug_scale_hold: 1.0,
            debug_scale_gap: 1.0,
            debug_guest_stall: None,
            split_runqueue_wait: false,
        }
    }

    #[test]
    fn lock_report_is_consistent() {
        for algo in locks::names() {
            let report = run(&args(algo, 3)).unwrap();
            let r: LockResult = report.detail_as().unwrap();
            assert_eq!(r.ops_per_thread.len(), 3);
            assert_eq!(r.ops_per_thread.iter().sum::<u64>(), r.ops_total);
            assert!(r.ops_total > 0, "{algo} made no progress");
            assert_eq!(r.lost_updates, 0);
            assert!(r.contended <= r.ops_total);
            assert!(r.fairness.jain > 0.0 && r.fairness.jain <= 1.0 + 1e-9);
            assert!(report.elapsed_ns >= 150_000_000);
            // The window on the TSC is stamped with the start and the end: the host reads the
            // run over it, so it is as long as the run reported.
            let w = r.preemption.as_ref().and_then(|p| p.window).expect("a window");
            let span = (w.end_mono_ns - w.start_mono_ns) as i64;
            assert!(
                (span - report.elapsed_ns as i64).abs() < 1_000_000,
                "{algo}: window {span} ns vs elapsed {} ns",
                report.elapsed_ns
            );
            assert_eq!(report.metrics["ops_total"], r.ops_total as f64);
            assert_eq!(r.owner_violations, 0);
            assert_eq!(r.threads_ctxsw.len(), 3);
            let vol: u64 = r.threads_ctxsw.iter().map(|c| c.voluntary).sum();
            assert_eq!(report.metrics["ctxsw_voluntary"], vol as f64);
            // A futex count is either the payload's own or absent with a reason.
            assert!(r.futex.is_some() != r.futex_unavailable.is_some(), "{algo}");
            assert_eq!(report.metrics.contains_key("futex_waits"), r.futex.is_some());
            match &r.acquire_latency {
                Some(l) => {
                    assert!(r.contended > 0 && l.count >= 1);
                    assert!(l.count <= r.contended.div_ceil(LATENCY_SAMPLE_EVERY) * 3);
                    assert_eq!(l.count, r.acquire_latency_samples);
                }
                None => assert!(!report.metrics.contains_key("acquire_p99_ns")),
            }
            // A p99 only from a sample that supports it, and then also in the metrics.
            assert_eq!(
                r.acquire_p99_ns.is_some(),
                r.acquire_latency_samples >= MIN_SAMPLES_FOR_P99
            );
            assert_eq!(
                report.metrics.contains_key("acquire_p99_ns"),
                r.acquire_p99_ns.is_some()
            );
            // How the work was made: every operation spun one hold and one gap, each of at
            // least one chunk, at a rate and a chunk cost that were measured.
            let m = &r.work;
            assert_eq!(m.counts.spins, 2 * r.ops_total, "{algo}: {m:?}");
            assert!(m.counts.chunks >= m.counts.spins && m.counts.disturbed <= m.counts.chunks);
            assert!(m.tsc_hz > 1e6 && m.chunk_overhead_ns > 0.0, "{algo}: {m:?}");
            // One cycle in 64 per thread (halfway between the sampler's) timed its hold and gap
            // and read the pace: none where no thread got that far (3 threads on 2 CPUs with a
            // FIFO lock can hand over at the scheduler's tick, a few dozen times in the run).
            let timed: u64 = r
                .ops_per_thread
                .iter()
                .map(|&o| (o + TIMED_EVERY / 2) / TIMED_EVERY)
                .sum();
            let pace_samples = match m.pace_ns_per_iter {
                Some(pace) => {
                    assert!(
                        pace.p10 > 0.0 && pace.p10 <= pace.p50 && pace.p50 <= pace.p90,
                        "{pace:?}"
                    );
                    pace.samples
                }
                None => 0,
            };
            assert!(r.window_cpu_ns > 0);
            let names: Vec<&str> = report.checks.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(
                names,
                [
                    "cpu_within_elapsed",
                    "work_done",
                    "tsc_rate_held",
                    "hold_as_asked",
                    "gap_as_asked",
                    "work_within_cpus",
                    "holds_serialised"
                ],
                "{algo}"
            );
            // The work as it ran: each figure judged, or null with the reason; the ratio is the
            // median against the asked length, which are the arguments.
            let w = &r.work_as_run;
            for (t, asked) in [(&w.hold, 100), (&w.gap, 100)] {
                assert_eq!(t.asked_ns, asked);
                assert!(t.ratio.is_some() != t.unavailable.is_some(), "{algo}: {t:?}");
                if let (Some(p10), Some(p50), Some(p90)) = (t.p10_ns, t.p50_ns, t.p90_ns) {
                    assert!(p10 <= p50 && p50 <= p90, "{algo}: {t:?}");
                }
                if let Some(ratio) = t.ratio {
                    assert_eq!(ratio, t.p50_ns.unwrap() / asked as f64);
                }
            }
            assert_eq!(
                (w.hold.samples, w.gap.samples, pace_samples),
                (timed, timed, timed),
                "{algo}: ops per thread {:?}",
                r.ops_per_thread
            );
            // Bookkeeping guards cannot fail, whatever the machine's load (load only slows the
            // run), nor the clock the work was spun to.
            for name in [
                "cpu_within_elapsed",
                "work_within_cpus",
                "holds_serialised",
                "tsc_rate_held",
            ] {
                let check = report.checks.iter().find(|c| c.name == name).unwrap();
                assert!(check.ok, "{algo}: {check:?}");
            }
        }
    }

    #[test]
    fn a_hold_or_gap_shorter_than_a_clock_read_is_refused_naming_the_argument() {
        // 1 ns is shorter than a TSC read on any CPU (several ns at the least): refused as bad
        // input, naming the argument and the resolution, before any worker starts.
        for (hold, gap, arg) in [(1, 200, "--hold-ns 1"), (200, 1, "--gap-ns 1")] {
            let mut a = args("tas", 1);
            (a.hold_ns, a.gap_ns) = (hold, gap);
            let e = run(&a).unwrap_err();
            assert!(e.is::<super::super::BadInput>(), "{e}");
            assert!(
                e.to_string().contains(arg) && e.to_string().contains("one read of it"),
                "{e}"
            );
        }
        // 0 is nothing asked, and runs.
        let mut a = args("tas", 1);
        a.gap_ns = 0;
        assert!(run(&a).is_ok());
    }

    /// A "lock" that excludes nothing: the owner-identity check must fail the run by name.
    use crate::locks::exclusion_test::NoLock;

    #[test]
    fn a_lock_that_does_not_exclude_fails_the_run_by_name() {
        static INFO: LockInfo = LockInfo {
            name: "nolock",
            blurb: "test only",
            uses_futex: false,
        };
        let mut a = args("tas", 3);
        a.hold_ns = 2000;
        let e = bench::<NoLock>(&a, &INFO).unwrap_err().to_string();
        assert!(e.contains("'nolock'") && e.contains("owner-identity"), "{e}");
    }

    #[test]
    fn sampled_holds_and_handovers_are_reported_and_sampling_switches_off() {
        let report = run(&args("ticket", 2)).unwrap();
        let r: LockResult = report.detail_as().unwrap();
        let p = r.preemption.as_ref().expect("sampling is on by default");
        assert!(r.preemption_unavailable.is_none());
        assert_eq!(p.sample_every, 64);
        // The TSC calibration is recorded, before and after, and agrees with itself.
        assert!(p.tsc_before.hz > 1e6 && (p.tsc_after.hz / p.tsc_before.hz - 1.0).abs() < 0.1);
        let h = p.holds.as_ref().expect("holds timed");
        // Every acquisition is timed; the first, then one in 64, per thread, is sampled.
        assert_eq!(h.timed, r.ops_total);
        let expected: u64 = r.ops_per_thread.iter().map(|o| o.div_ceil(64)).sum();
        assert_eq!(h.sampled, expected);
        assert!(h.stretched <= h.timed && h.stretched_guest + h.stretched_vcpu == h.stretched);
        // A normal sampled hold is the hold made: never 100x it.
        let p50 = h.sampled_p50_ns.unwrap() as f64;
        assert!(p50 < 100.0 * p.hold_ns.max(1_000.0), "{h:?} vs {}", p.hold_ns);
        // Stretched time is at least the threshold per stretched hold, and within the run.
        assert!(h.lost_ns >= h.stretched as f64 * p.threshold_ns as f64);
        assert!(h.lost_share <= 1.0 + 1e-9, "{h:?}");
        assert_eq!(report.metrics["stretched_hold_share"], h.stretched_share);
        if let Some(o) = &p.handovers {
            // Hand-overs only to acquisitions that waited.
            assert!(o.timed <= r.contended && o.stretched <= o.timed);
            assert_eq!(report.metrics["stretched_handover_lost_share"], o.lost_share);
        }
        // Physics still holds with sampling on.
        assert!(
            report
                .checks
                .iter()
                .find(|c| c.name == "holds_serialised")
                .unwrap()
                .ok
        );

        let mut off = args("ticket", 2);
        off.no_hold_sampling = true;
        let report = run(&off).unwrap();
        let r: LockResult = report.detail_as().unwrap();
        assert!(r.preemption.is_none());
        assert!(r.preemption_unavailable.unwrap().contains("--no-hold-sampling"));
        // Nothing timed, so the work as it ran is not judged, and says why.
        let w = r.work_as_run;
        assert!(w.hold.ratio.is_none() && w.hold.p50_ns.is_none());
        assert!(w.gap.unavailable.unwrap().contains("--no-hold-sampling"));
        let c = check(&report, "hold_as_asked");
        assert!(
            c.ok && c.value.is_none() && c.detail.contains("not judged"),
            "{c:?}"
        );
        assert!(!report.metrics.contains_key("stretched_hold_share"));
        // Null, not absent: a lock report always says whether it sampled.
        let v = serde_json::to_value(&report).unwrap();
        assert!(v.get("preemption").is_some_and(|p| p.is_null()));
    }

    /// Two spinning threads squeezed onto one CPU: the kernel preempts holders (the waiter then
    /// spins through its slice), so stretched holds appear, and the thread's own involuntary
    /// switch count says the scheduler it runs under did it.
    #[test]
    fn holders_preempted_by_the_scheduler_are_stretched_and_counted_as_guest() {
        let outcome = std::thread::spawn(|| {
            // SAFETY: a zeroed cpu_set_t with one CPU set, for this thread (pid 0); the
            // workers it spawns inherit the mask.
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                let cpu = libc::sched_getcpu().max(0) as usize;
                libc::CPU_SET(cpu, &mut set);
                assert_eq!(libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set), 0);
            }
            let mut a = args("tas", 2);
            a.duration_ms = 400;
            a.hold_ns = 5_000;
            a.hold_sample_rate = 1.0;
            run(&a).unwrap()
        })
        .join()
        .unwrap();
        let r: LockResult = outcome.detail_as().unwrap();
        let h = r.preemption.unwrap().holds.unwrap();
        assert!(h.stretched >= 1, "{h:?}");
        assert!(h.stretched_guest >= 1, "{h:?}");
        assert!(h.lost_share > 0.0 && h.lost_share <= 1.5, "{h:?}");
        let len = h.stretched_len.unwrap();
        assert!(len.max_ns >= len.p50_ns && len.p50_ns > 50_000, "{len:?}");
    }

    fn check<'a>(report: &'a Report, name: &str) -> &'a Check {
        report.checks.iter().find(|c| c.name == name).unwrap()
    }

    #[test]
    fn report_round_trips_through_json() {
        let report = run(&args("tas", 2)).unwrap();
        let text = serde_json::to_string(&report).unwrap();
        let back: Report = serde_json::from_str(&text).unwrap();
        assert_eq!(back, report);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        for field in [
            "workload",
            "algo",
            "threads",
            "ops_total",
            "ops_per_thread",
            "contended",
            "elapsed_ns",
        ] {
            assert!(v.get(field).is_some(), "missing {field}");
        }
        assert!(v["env"]["kernel"].is_string() && v["env"]["cpus"].is_u64());
        // The test-only scales are absent when 1.
        assert!(v.get("debug_scale_hold").is_none() && v.get("debug_scale_gap").is_none());
    }
}
