//! `mutex`: sysbench's mutex test (`sysbench mutex`), over any registered lock algorithm.
//!
//! As sysbench 1.0: an array of `num` locks (each padded by 256 bytes, as sysbench's
//! `thread_lock`); every thread does `locks` iterations of: pick a lock uniformly at random,
//! run an empty loop of `loops` iterations (the loop bound is re-read each iteration, as in
//! sysbench's compiled loop), lock it, increment a global counter, unlock. The result is the
//! wall time until the last thread finished (sysbench's "total time", `time_s`, lower is
//! better) and per-thread execution times. As in sysbench, the clock starts while every thread
//! is parked at the start gate (sysbench starts its timer inside its barrier's mutex) and stops
//! when the last thread has finished.
//!
//! `--acquire lock` (the default) acquires exactly as sysbench does: `lock()` only. Counting
//! contended acquisitions needs a trylock first (`--acquire trylock-first`), which changes the
//! lock's behaviour: a failed trylock is a short delay before `lock()`, by which time a
//! briefly held lock is often free again, so fewer waiters sleep (with one hot lock and no loop
//! it halved sysbench's time). So `contended` is null under `--acquire lock`.
//!
//! Additions: `--contended-delay-ns` spins that long before blocking, on the contended path
//! only (needs `--acquire trylock-first`); `--work-inside` / `--work-outside` add work inside the
//! critical section / after it. That work is spun to the TSC as the `lock` workload's hold and
//! gap (see [`super::lock`] and [`crate::busywork`]): each worker makes its own spinners and
//! warms them up before the start gate. The run is judged by its work as it ran: 1 in
//! [`WORK_SAMPLE_EVERY`] iterations per thread times its work inside and outside with the TSC,
//! and their medians must be within a factor 1 + `--max-work-error` of the asked ones
//! (`work_inside_as_asked`, `work_outside_as_asked`, see [`crate::work_as_run`]); the TSC rate
//! the work was spun at must hold over the run (`tsc_rate_held`), and two bookkeeping guards
//! hold the work to the CPUs and the holds of each lock to one second per second; the JSON's
//! `work` and `work_as_run` say what was found. Without such work (sysbench's own test) nothing
//! is spun and `work` is null with the reason. Each lock also guards its own counter and an
//! owner-identity cell ([`OwnerCheck`]), both checked. `progress_at_first_finish` records how
//! far every thread had got when the first thread finished: the fairness of progress under
//! preemption (equal work per thread otherwise hides it); `jain` is its Jain's index.

use std::cell::UnsafeCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use clap::{Args as ClapArgs, ValueEnum};
use lock_api::RawMutex;
use serde::{Deserialize, Serialize};

use super::Rng;
use super::gated::GatedWorkers;
use crate::busywork::{self, SpinCounts, Spinner, WorkMade};
use crate::checks::{self, Check, TOLERANCE};
use crate::env::Env;
use crate::locks::owner::{OwnerCheck, OwnerId};
use crate::locks::{self, LockInfo, LockVisitor, futex};
use crate::metrics::{Ctxsw, Fairness};
use crate::preempt_sample::{self, TscCalibration, TscWindow, ticks};
use crate::report::Report;
use crate::work_as_run::{self, TimedWork, WorkSamples};

/// How a thread acquires its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Acquire {
    /// `lock()` only, as sysbench (contended acquisitions are not counted).
    Lock,
    /// `try_lock()`, and `lock()` when it failed (counted as contended).
    TrylockFirst,
}

#[derive(Debug, Clone, ClapArgs, Serialize, Deserialize)]
pub struct Args {
    /// Lock algorithm (see `ocrig-payload list`); sysbench uses pthread mutexes.
    #[arg(long, value_parser = locks::parse_algo, default_value = "pthread")]
    pub algo: String,
    /// Worker threads (sysbench --threads).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub threads: u32,
    /// Size of the lock array (sysbench --mutex-num).
    #[arg(long, alias = "mutex-num", default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=16_777_216))]
    pub num: u32,
    /// Lock acquisitions per thread (sysbench --mutex-locks).
    #[arg(long, alias = "mutex-locks", default_value_t = 50_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub locks: u64,
    /// Empty-loop iterations before each acquisition (sysbench --mutex-loops).
    #[arg(long, alias = "mutex-loops", default_value_t = 10_000)]
    pub loops: u32,
    /// lock: as sysbench; trylock-first: count contended acquisitions (changes the timing).
    #[arg(long, value_enum, default_value_t = Acquire::Lock)]
    pub acquire: Acquire,
    /// Extra work inside the critical section, in nanoseconds of running (spun to the TSC).
    #[arg(long, default_value_t = 0)]
    pub work_inside: u64,
    /// Extra work after releasing, in nanoseconds of running.
    #[arg(long, default_value_t = 0)]
    pub work_outside: u64,
    /// Busy delay before blocking when the trylock failed (contended path only, needs
    /// --acquire trylock-first), ns.
    #[arg(long, default_value_t = 0)]
    pub contended_delay_ns: u64,
    /// Sleep before blocking when the trylock failed (contended path only, needs --acquire
    /// trylock-first), ns: the seed's "small sleep", which gives the CPU away where the busy
    /// delay keeps it (the kernel rounds a short sleep up to its timer slack, 50 µs by default).
    #[arg(long, default_value_t = 0)]
    #[serde(default)]
    pub contended_sleep_ns: u64,
    /// Largest accepted error of the work inside and outside as it ran (1 in 64 iterations
    /// timed with the TSC: their median) against --work-inside and --work-outside, as the
    /// `lock` workload's --max-work-error: within a factor 1 + this either way; beyond it the
    /// run is not a result (exit 3).
    #[arg(long, default_value_t = work_as_run::MAX_WORK_ERROR, value_parser = checks::positive_fraction)]
    #[serde(default = "default_work_error")]
    pub max_work_error: f64,
    /// Test only: multiplies the work inside's length by this (the work outside, unscaled,
    /// shows meanwhile that the rest of the work was made right).
    #[arg(long, hide = true, default_value_t = 1.0, value_parser = busywork::scale_factor)]
    #[serde(default = "one")]
    pub debug_scale_inside: f64,
    /// Test only: the same for the work outside.
    #[arg(long, hide = true, default_value_t = 1.0, value_parser = busywork::scale_factor)]
    #[serde(default = "one")]
    pub debug_scale_outside: f64,
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

/// One in this many iterations per thread (the first, then every 64th) times its work inside
/// and outside, when there is such work (its spins read the TSC anyway) and reads the pace.
pub const WORK_SAMPLE_EVERY: u64 = 64;

/// How the `work_as_run` figures of a mutex run were read.
pub const WORK_METHOD: &str = "1 in 64 iterations per thread (the first, then every 64th): its work inside from the TSC read right before the \
     spin (inside the critical section) to the spin's own last read, its work outside the same way; judged by the median, ratio = median / \
     asked (10th and 90th percentiles beside); the contended delay is spun the same way and not timed";

impl Args {
    /// True when the run has busy work to spin.
    fn has_spun_work(&self) -> bool {
        self.work_inside > 0 || self.work_outside > 0 || self.contended_delay_ns > 0
    }

    /// Checks that the arguments fit together (the parser checks each on its own).
    pub fn check(&self) -> Result<(), String> {
        for (flag, ns) in [
            ("--contended-delay-ns", self.contended_delay_ns),
            ("--contended-sleep-ns", self.contended_sleep_ns),
        ] {
            if ns > 0 && self.acquire != Acquire::TrylockFirst {
                return Err(format!(
                    "{flag} needs --acquire trylock-first (only a failed trylock shows a contended acquisition)"
                ));
            }
        }
        Ok(())
    }
}

/// The `mutex` workload's fields in the report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MutexResult {
    pub algo: String,
    pub threads: u32,
    pub num: u32,
    pub locks: u64,
    pub loops: u32,
    pub acquire: Acquire,
    pub work_inside: u64,
    pub work_outside: u64,
    pub contended_delay_ns: u64,
    #[serde(default)]
    pub contended_sleep_ns: u64,
    /// Wall seconds from the start (stamped before any thread was released) until the last
    /// thread finished.
    pub time_s: f64,
    pub ops_total: u64,
    pub ops_per_sec: f64,
    /// Acquisitions whose trylock failed; null under `--acquire lock`.
    pub contended: Option<u64>,
    pub contention_rate: Option<f64>,
    /// Why `contended` is null.
    pub contended_unavailable: Option<String>,
    /// Per thread: seconds from the start until it finished its `locks` acquisitions.
    pub thread_time_s: Vec<f64>,
    /// Fairness of per-thread execution times (µs).
    pub time_fairness: Fairness,
    /// Per thread: acquisitions done when the first thread finished.
    pub progress_at_first_finish: Vec<u64>,
    pub progress_fairness: Fairness,
    pub futex: Option<futex::FutexCounts>,
    /// Why `futex` is null.
    pub futex_unavailable: Option<String>,
    /// Sum of the per-lock counters (must equal threads × locks).
    pub counted: u64,
    /// Owner-identity check failures over all locks (must be 0).
    pub owner_violations: u64,
    /// Per worker: context switches during its acquisitions.
    pub threads_ctxsw: Vec<Ctxsw>,
    /// How the spun work (`work_inside`, `work_outside`, `contended_delay_ns`) was made; null
    /// when there was none, with `work_unavailable` saying so.
    pub work: Option<WorkMade>,
    pub work_unavailable: Option<String>,
    /// The work inside and outside as it ran, against the asked: what `work_inside_as_asked`
    /// and `work_outside_as_asked` judge (null without spun work).
    pub work_as_run: Option<MutexWorkAsRun>,
    /// The test-only `--debug-scale-inside` and `--debug-scale-outside` factors the lengths were
    /// multiplied by (absent when 1).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub debug_scale_inside: f64,
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub debug_scale_outside: f64,
    /// CPU time of every worker inside the measured window (thread CPU clocks read after the
    /// gate and as each finished), nanoseconds.
    pub window_cpu_ns: u64,
}

/// The `work_as_run` object of a mutex run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MutexWorkAsRun {
    pub inside: TimedWork,
    pub outside: TimedWork,
    /// How they were read ([`WORK_METHOD`]).
    pub method: String,
}

/// One element of the lock array: sysbench's `{ pthread_mutex_t mutex; char pad[256]; }`,
/// plus what the lock guards: its counter and owner-identity cell.
#[repr(C)]
struct Slot<R> {
    lock: R,
    owner: OwnerCheck,
    counter: UnsafeCell<u64>,
    _pad: [u8; 256],
}

#[repr(align(128))]
struct Padded<T>(T);

struct Shared<R> {
    slots: Vec<Slot<R>>,
    /// sysbench's `global_var`, alone on its line as a static in sysbench's .bss.
    global_var: Padded<AtomicU32>,
    /// Read by every thread on every iteration: kept off `global_var`'s line, which the lock
    /// owners write.
    first_done: Padded<AtomicBool>,
}

// SAFETY: each `counter` is only touched while its `lock` is held.
unsafe impl<R: RawMutex + Sync> Sync for Shared<R> {}

struct Outcome {
    contended: u64,
    at_first_finish: u64,
    ctxsw: Ctxsw,
    end: Instant,
    /// Thread CPU time from the gate to `end`.
    cpu_ns: u64,
    /// The timed iterations' work inside and outside, and the pace; None without spun work.
    work: Option<WorkSamples>,
    /// The inside spinner's chunk overhead, ns, and every spinner's counts (None without spun
    /// work).
    spun: Option<(f64, SpinCounts)>,
}

pub fn run(args: &Args) -> anyhow::Result<Report> {
    args.check().map_err(super::BadInput)?;
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

/// How long each worker warms its spinners up before the start gate (as the `lock` workload's).
const WARM_UP: Duration = Duration::from_millis(5);

/// A worker's spinners for the work inside, outside and the contended delay, made and warmed
/// up by the worker itself before the gate.
struct Spinners {
    inside: Spinner,
    outside: Spinner,
    delay: Spinner,
}

/// The spun work's lengths in ticks, and what they are timed with.
#[derive(Clone, Copy)]
struct Lengths {
    tsc_hz: f64,
    inside: u64,
    outside: u64,
    delay: u64,
}

impl Spinners {
    fn warmed_up(l: Lengths) -> Self {
        let mut s = Self {
            inside: Spinner::new(l.tsc_hz),
            outside: Spinner::new(l.tsc_hz),
            delay: Spinner::new(l.tsc_hz),
        };
        let until = Instant::now() + WARM_UP;
        while Instant::now() < until {
            s.inside.warm_up(l.inside, 8);
            s.outside.warm_up(l.outside, 8);
            s.delay.warm_up(l.delay, 8);
        }
        for sp in [&mut s.inside, &mut s.outside, &mut s.delay] {
            sp.counts = SpinCounts::default();
        }
        s
    }
}

#[derive(Clone, Copy)]
struct Params {
    locks: u64,
    loops: u32,
    trylock_first: bool,
    /// The contended path's sleep (None: no sleep).
    sleep: Option<std::time::Duration>,
    /// The spun work (None: there is none).
    lengths: Option<Lengths>,
}

fn bench<R: RawMutex + Send + Sync + 'static>(args: &Args, info: &LockInfo) -> anyhow::Result<Report> {
    let shared = Arc::new(Shared::<R> {
        slots: (0..args.num)
            .map(|_| Slot {
                lock: R::INIT,
                owner: OwnerCheck::new(),
                counter: UnsafeCell::new(0),
                _pad: [0; 256],
            })
            .collect(),
        global_var: Padded(AtomicU32::new(0)),
        first_done: Padded(AtomicBool::new(false)),
    });
    // Measured before any worker starts (they would load the CPU it measures on): the rate the
    // work is spun at, and what a chunk of it costs here (the shortest that can be made).
    let tsc_before = args
        .has_spun_work()
        .then(|| TscCalibration::measure(preempt_sample::TSC_CALIBRATION_WINDOW));
    let lengths = match &tsc_before {
        Some(tsc) => {
            let probe = Spinner::new(tsc.hz);
            for (arg, ns) in [
                ("--work-inside", args.work_inside),
                ("--work-outside", args.work_outside),
                ("--contended-delay-ns", args.contended_delay_ns),
            ] {
                busywork::makeable(arg, ns, probe.resolution_ns())?;
            }
            let (inside, outside) = made_ns(args);
            Some(Lengths {
                tsc_hz: tsc.hz,
                inside: probe.ticks_for(inside),
                outside: probe.ticks_for(outside),
                delay: probe.ticks_for(args.contended_delay_ns as f64),
            })
        }
        None => None,
    };
    let p = Params {
        locks: args.locks,
        loops: args.loops,
        trylock_first: args.acquire == Acquire::TrylockFirst,
        sleep: (args.contended_sleep_ns > 0)
            .then(|| std::time::Duration::from_nanos(args.contended_sleep_ns)),
        lengths,
    };
    futex::reset_counts();
    // Every worker parks once finished, so the end's window read follows every worker's work.
    let workers = GatedWorkers::spawn(
        "mutex-worker",
        args.threads,
        // Made before the gate, so the window holds none of it: the spinners (warmed up) and
        // the histograms the work is timed into (their pages in: see `new_latency_histogram`).
        move |_| {
            (
                lengths.map(Spinners::warmed_up),
                lengths.map(|_| WorkSamples::default()),
            )
        },
        {
            let shared = Arc::clone(&shared);
            move |t, (spinners, work)| worker(&shared, p, spinners, work, t as OwnerId + 1)
        },
    )?;
    let stamp = workers.start();
    let start = stamp.at;
    let window = TscWindow::of(stamp.tsc, workers.stop().tsc);
    crate::probe::window_close();
    let outcomes: Vec<Outcome> = workers.join("mutex")?;
    let (futex, futex_unavailable) = super::futex_counts(info);
    let thread_ns: Vec<u64> = outcomes
        .iter()
        .map(|o| o.end.duration_since(start).as_nanos() as u64)
        .collect();
    let elapsed_ns = thread_ns.iter().copied().max().unwrap_or(0);
    let work = lengths.map(|l| work_of(args, &outcomes, l.tsc_hz));

    // SAFETY: every worker has been joined; nobody touches the counters now.
    let counted: u64 = shared.slots.iter().map(|s| unsafe { *s.counter.get() }).sum();
    let owner_violations: u64 = shared.slots.iter().map(|s| s.owner.violations()).sum();
    let ops_total = args.threads as u64 * args.locks;
    let contended = p
        .trylock_first
        .then(|| outcomes.iter().map(|o| o.contended).sum::<u64>());
    let progress: Vec<u64> = outcomes.iter().map(|o| o.at_first_finish).collect();
    let secs = super::secs(elapsed_ns);
    let (work_as_run, work) = work.unzip();
    let result = MutexResult {
        algo: args.algo.clone(),
        threads: args.threads,
        num: args.num,
        locks: args.locks,
        loops: args.loops,
        acquire: args.acquire,
        work_inside: args.work_inside,
        work_outside: args.work_outside,
        contended_delay_ns: args.contended_delay_ns,
        contended_sleep_ns: args.contended_sleep_ns,
        time_s: secs,
        ops_total,
        ops_per_sec: ops_total as f64 / secs.max(1e-9),
        contended,
        contention_rate: contended.map(|c| c as f64 / ops_total as f64),
        contended_unavailable: (!p.trylock_first).then(|| {
            "not counted under --acquire lock (sysbench's way); use --acquire trylock-first".to_string()
        }),
        time_fairness: Fairness::of(&thread_ns.iter().map(|&n| n / 1000).collect::<Vec<_>>()),
        thread_time_s: thread_ns.iter().map(|&n| super::secs(n)).collect(),
        progress_fairness: Fairness::of(&progress),
        progress_at_first_finish: progress,
        futex,
        futex_unavailable,
        counted,
        owner_violations,
        threads_ctxsw: outcomes.iter().map(|o| o.ctxsw).collect(),
        work_unavailable: work.is_none().then(|| {
            "no spun work asked for (--work-inside, --work-outside and --contended-delay-ns are 0), so none was made".to_string()
        }),
        work,
        work_as_run,
        debug_scale_inside: args.debug_scale_inside,
        debug_scale_outside: args.debug_scale_outside,
        window_cpu_ns: outcomes.iter().map(|o| o.cpu_ns).sum(),
    };
    anyhow::ensure!(
        owner_violations == 0,
        "mutual exclusion violated by '{}': {owner_violations} owner-identity violations",
        info.name
    );
    anyhow::ensure!(
        counted == ops_total,
        "mutual exclusion violated by '{}': counted {counted} != {ops_total}",
        info.name
    );
    let env = Env::read();
    let checks = checks_of(
        &result,
        made_ns(args),
        window.hz,
        elapsed_ns,
        env.cpus_allowed,
        args.max_work_error,
    );
    Ok(Report::new("mutex", elapsed_ns, env, metrics_of(&result), &result)?.with_checks(checks))
}

/// The work inside and outside the work is made to, ns: the asked ones times the test-only
/// scales.
fn made_ns(args: &Args) -> (f64, f64) {
    (
        args.work_inside as f64 * args.debug_scale_inside,
        args.work_outside as f64 * args.debug_scale_outside,
    )
}

/// The work inside and outside as it ran, from every thread's samples, and how it was made.
fn work_of(args: &Args, outcomes: &[Outcome], tsc_hz: f64) -> (MutexWorkAsRun, WorkMade) {
    let mut work = WorkSamples::default();
    for w in outcomes.iter().filter_map(|o| o.work.as_ref()) {
        work.add(w);
    }
    let mut counts = SpinCounts::default();
    for (_, c) in outcomes.iter().filter_map(|o| o.spun.as_ref()) {
        counts.add(c);
    }
    let as_run = MutexWorkAsRun {
        inside: TimedWork::of(
            "work inside",
            args.work_inside,
            &work.holds,
            work.clock_read_ns(),
            None,
        ),
        outside: TimedWork::of(
            "work outside",
            args.work_outside,
            &work.gaps,
            work.clock_read_ns(),
            None,
        ),
        method: WORK_METHOD.into(),
    };
    let made = WorkMade {
        method: busywork::METHOD.into(),
        tsc_hz,
        chunk_overhead_ns: busywork::median(outcomes.iter().filter_map(|o| o.spun.map(|s| s.0)).collect())
            .unwrap_or(f64::NAN),
        pace_ns_per_iter: busywork::Pace::of(&work.pace_ps),
        counts,
    };
    (as_run, made)
}

/// The run's checks: CPU inside the window, and, where there is spun work, the work inside and
/// outside as it ran (`work_inside_as_asked`, `work_outside_as_asked`: the run's verdict on its
/// work, see [`crate::work_as_run`]), the TSC rate it was spun at (`tsc_rate_held`), and two
/// bookkeeping guards. The guards (with `cpu_within_elapsed`) hold whatever the machine's load
/// (load only slows a run down) and fail only on the payload's own accounting errors. Only the
/// spun part of the work is counted there (not sysbench's empty loop, nor the lock's own cost):
/// the bounds are then lower bounds on the work done, which makes them safe to hold to the
/// CPUs. `made` is the work inside and outside made, ns; `window_hz` the TSC's rate over the run.
fn checks_of(
    r: &MutexResult,
    made: (f64, f64),
    window_hz: f64,
    elapsed_ns: u64,
    cpus_allowed: usize,
    max_work_error: f64,
) -> Vec<Check> {
    let mut out = vec![checks::cpu_within_elapsed(
        r.window_cpu_ns,
        elapsed_ns,
        cpus_allowed,
    )];
    let (Some(m), Some(w)) = (&r.work, &r.work_as_run) else {
        return out;
    };
    let secs = elapsed_ns.max(1) as f64 / 1e9;
    let ops_per_sec = r.ops_total as f64 / secs;
    // The delay is only spent on contended acquisitions (counted under trylock-first, which
    // the delay requires).
    let delays_per_sec = r.contended.unwrap_or(0) as f64 / secs;
    let (inside_s, outside_s, delay_s) = (made.0 / 1e9, made.1 / 1e9, r.contended_delay_ns as f64 / 1e9);
    let usable = (r.threads as usize).min(cpus_allowed.max(1));
    let work = ops_per_sec * (inside_s + outside_s) + delays_per_sec * delay_s;
    out.push(checks::tsc_rate_held(m.tsc_hz, window_hz));
    out.push(checks::work_as_asked(
        "work_inside_as_asked",
        "--work-inside",
        &w.inside,
        max_work_error,
    ));
    out.push(checks::work_as_asked(
        "work_outside_as_asked",
        "--work-outside",
        &w.outside,
        max_work_error,
    ));
    out.push(Check::at_most(
        "work_within_cpus",
        work,
        usable as f64 * TOLERANCE,
        format!(
            "{ops_per_sec:.0} ops/s x ({:.1} + {:.1}) ns of work inside + outside, plus {delays_per_sec:.0} \
             contended/s x {:.1} ns of delay, is {work:.3} CPU-s of work per second, for min({} threads, \
             {cpus_allowed} CPUs allowed) = {usable} CPUs (x{TOLERANCE})",
            inside_s * 1e9,
            outside_s * 1e9,
            delay_s * 1e9,
            r.threads
        ),
    ));
    if made.0 > 0.0 {
        // Each lock serialises its holders: at most one hold-second per second per lock (and
        // never more than the CPUs, which `work_within_cpus` already bounds).
        let holds = ops_per_sec * inside_s;
        let bound_locks = (r.num as usize).min(usable);
        out.push(Check::at_most(
            "holds_serialised",
            holds,
            bound_locks as f64 * TOLERANCE,
            format!(
                "{ops_per_sec:.0} ops/s x {:.1} ns of work inside is {holds:.3} s of exclusive hold per second, \
                 over min(--num {}, {usable} usable CPUs) = {bound_locks} (x{TOLERANCE})",
                inside_s * 1e9,
                r.num
            ),
        ));
    }
    out
}

fn metrics_of(r: &MutexResult) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    m.insert("time_s".into(), r.time_s);
    m.insert("ops_per_sec".into(), r.ops_per_sec);
    if let (Some(c), Some(rate)) = (r.contended, r.contention_rate) {
        m.insert("contended".into(), c as f64);
        m.insert("contention_rate".into(), rate);
    }
    m.insert("jain".into(), r.progress_fairness.jain);
    m.insert("time_jain".into(), r.time_fairness.jain);
    m.insert("progress_jain".into(), r.progress_fairness.jain);
    let max = r.thread_time_s.iter().cloned().fold(0.0, f64::max);
    let min = r.thread_time_s.iter().cloned().fold(f64::MAX, f64::min);
    m.insert("thread_time_max_s".into(), max);
    m.insert("thread_time_min_s".into(), min);
    if let Some(f) = r.futex {
        m.insert("futex_waits".into(), f.waits as f64);
        m.insert("futex_wakes".into(), f.wakes as f64);
    }
    Ctxsw::insert_metrics(&r.threads_ctxsw, &mut m);
    m
}

/// sysbench 1.0's default generator: xoroshiro128+ per thread, and `sb_rand_uniform(a, b)` =
/// `a + double in [0, 1) × (b − a + 1)`. Its cost sits between an unlock and the next lock —
/// with one hot lock and no loop, that gap decides how often a waiter gets in — so it is
/// reproduced, out of line as sysbench's call into another file.
struct SbRand([u64; 2]);

impl SbRand {
    fn new(seed: u64) -> Self {
        let mut r = Rng::new(seed);
        Self([r.next_u64() | 1, r.next_u64()])
    }

    #[inline(never)]
    fn uniform(&mut self, a: u32, b: u32) -> u32 {
        let [s0, mut s1] = self.0;
        let x = s0.wrapping_add(s1);
        s1 ^= s0;
        self.0 = [s0.rotate_left(55) ^ s1 ^ (s1 << 14), s1.rotate_left(36)];
        let unit = f64::from_bits((0x3FF << 52) | (x >> 12)) - 1.0;
        a + (unit * f64::from(b - a + 1)) as u32
    }
}

fn worker<R: RawMutex>(
    shared: &Shared<R>,
    p: Params,
    mut spinners: Option<Spinners>,
    mut work: Option<WorkSamples>,
    me: OwnerId,
) -> Outcome {
    let mut rng = SbRand::new(me.wrapping_mul(0x51_7CC1_B727_220A).wrapping_add(7));
    let n = shared.slots.len() as u32;
    let mut out = Outcome {
        contended: 0,
        at_first_finish: p.locks,
        ctxsw: Ctxsw::default(),
        end: Instant::now(),
        cpu_ns: 0,
        work: None,
        spun: None,
    };
    let cpu0 = crate::clock::thread_cpu_ns();
    let mut seen_first = false;
    let ns_per_tick = p.lengths.map_or(f64::NAN, |l| 1e9 / l.tsc_hz);
    let before = Ctxsw::this_thread();
    for i in 0..p.locks {
        let timed = work.is_some() && i % WORK_SAMPLE_EVERY == 0;
        let slot = &shared.slots[rng.uniform(0, n - 1) as usize];
        // sysbench's empty loop, as its compiled form: the bound is loaded from memory on
        // every iteration (a volatile read keeps the loop and that load).
        let mut c = 0u32;
        // SAFETY: reading a live local.
        while c < unsafe { std::ptr::read_volatile(&p.loops) } {
            c += 1;
        }
        if !p.trylock_first {
            slot.lock.lock();
        } else if !slot.lock.try_lock() {
            out.contended += 1;
            if let (Some(s), Some(l)) = (spinners.as_mut(), p.lengths) {
                s.delay.spin(ticks(), l.delay);
            }
            if let Some(d) = p.sleep {
                std::thread::sleep(d);
            }
            slot.lock.lock();
        }
        slot.owner.enter(me);
        // sysbench's unsynchronised `global_var++` (a plain load and store).
        let g = shared.global_var.0.load(Ordering::Relaxed);
        shared.global_var.0.store(g.wrapping_add(1), Ordering::Relaxed);
        // SAFETY: we hold this slot's lock.
        unsafe { *slot.counter.get() += 1 };
        let inside = spinners.as_mut().zip(p.lengths).map(|(s, l)| {
            let t0 = ticks();
            (t0, s.inside.spin(t0, l.inside))
        });
        slot.owner.leave(me);
        // SAFETY: this thread acquired the lock above.
        unsafe { slot.lock.unlock() };
        if let (Some(s), Some(l), Some((i0, i1))) = (spinners.as_mut(), p.lengths, inside) {
            let t0 = ticks();
            let t1 = s.outside.spin(t0, l.outside);
            if let (Some(w), true) = (work.as_mut(), timed) {
                let pace = if l.inside > 0 { &s.inside } else { &s.outside }.ns_per_iter();
                w.record((i1.wrapping_sub(i0), t1.wrapping_sub(t0)), ns_per_tick, pace);
            }
        }
        if !seen_first && shared.first_done.0.load(Ordering::Relaxed) {
            seen_first = true;
            out.at_first_finish = i + 1;
        }
    }
    out.end = Instant::now();
    out.cpu_ns = crate::clock::thread_cpu_ns().saturating_sub(cpu0);
    shared.first_done.0.store(true, Ordering::Relaxed);
    out.ctxsw = Ctxsw::this_thread().since(before);
    out.work = work;
    out.spun = spinners.map(|s| {
        let mut c = s.inside.counts;
        c.add(&s.outside.counts);
        c.add(&s.delay.counts);
        (s.inside.overhead_ns(), c)
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(algo: &str, threads: u32) -> Args {
        Args {
            algo: algo.into(),
            threads,
            num: 4,
            locks: 20_000,
            loops: 100,
            acquire: Acquire::Lock,
            work_inside: 0,
            work_outside: 0,
            contended_delay_ns: 0,
            contended_sleep_ns: 0,
            max_work_error: work_as_run::MAX_WORK_ERROR,
            debug_scale_inside: 1.0,
            debug_scale_outside: 1.0,
        }
    }

    #[test]
    fn every_algorithm_counts_every_acquisition() {
        for algo in locks::names() {
            // FIFO spinlocks hand over through the scheduler when threads outnumber free CPUs
            // (other tests run in parallel): keep it small.
            let mut a = args(algo, 2);
            a.locks = 1000;
            let report = run(&a).unwrap();
            let r: MutexResult = report.detail_as().unwrap();
            assert_eq!(r.ops_total, 2000);
            assert_eq!(r.counted, r.ops_total);
            assert_eq!(r.owner_violations, 0);
            // sysbench's acquisition: nothing counted, and said so.
            assert!(r.contended.is_none() && r.contended_unavailable.is_some());
            assert!(!report.metrics.contains_key("contention_rate"));
            assert_eq!(r.thread_time_s.len(), 2);
            assert!(r.thread_time_s.iter().all(|&t| t <= r.time_s + 1e-9));
            assert!(r.progress_at_first_finish.iter().all(|&x| x <= 1000));
            assert!(r.progress_at_first_finish.contains(&1000));
            assert_eq!(report.metrics["time_s"], r.time_s);
            assert_eq!(report.metrics["jain"], r.progress_fairness.jain);
            assert_eq!(r.threads_ctxsw.len(), 2);
            assert!(r.futex.is_some() != r.futex_unavailable.is_some(), "{algo}");
            // No spun work: nothing made, said so, and only the CPU check.
            assert!(r.work.is_none() && r.work_as_run.is_none() && r.work_unavailable.is_some());
            let names: Vec<&str> = report.checks.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(names, ["cpu_within_elapsed"], "{algo}");
        }
    }

    #[test]
    fn spun_work_is_made_by_the_workers_and_checked() {
        let mut a = args("tas", 3);
        a.num = 1;
        a.locks = 3000;
        a.work_inside = 300;
        a.work_outside = 200;
        a.acquire = Acquire::TrylockFirst;
        a.contended_delay_ns = 400;
        let report = run(&a).unwrap();
        let r: MutexResult = report.detail_as().unwrap();
        assert!(r.work_unavailable.is_none());
        let m = r.work.as_ref().expect("the work made");
        // Every iteration spun its work inside and outside, and every contended one its delay.
        assert_eq!(m.counts.spins, 2 * r.ops_total + r.contended.unwrap(), "{m:?}");
        assert!(
            m.counts.chunks >= 2 * r.ops_total && m.tsc_hz > 1e6 && m.chunk_overhead_ns > 0.0,
            "{m:?}"
        );
        assert!(r.window_cpu_ns > 0);
        let names: Vec<&str> = report.checks.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "cpu_within_elapsed",
                "tsc_rate_held",
                "work_inside_as_asked",
                "work_outside_as_asked",
                "work_within_cpus",
                "holds_serialised"
            ]
        );
        // The work as it ran: the asked lengths, one timed sample per 64 iterations per thread
        // (the first, then every 64th), each figure judged or null with the reason.
        let w = r.work_as_run.as_ref().expect("work_as_run with spun work");
        assert_eq!((w.inside.asked_ns, w.outside.asked_ns), (300, 200));
        assert_eq!(w.inside.samples, 3 * 3000u64.div_ceil(WORK_SAMPLE_EVERY));
        assert_eq!(w.outside.samples, w.inside.samples);
        assert_eq!(m.pace_ns_per_iter.unwrap().samples, w.inside.samples);
        for t in [&w.inside, &w.outside] {
            assert!(t.ratio.is_some() != t.unavailable.is_some(), "{t:?}");
        }
        // The bookkeeping guards hold whatever the load (load only slows the run down), and so
        // does the clock the work was spun to.
        for c in report.checks.iter().filter(|c| !c.name.ends_with("_as_asked")) {
            assert!(c.ok, "{c:?}");
        }
        let v: serde_json::Value = serde_json::to_value(&report).unwrap();
        for field in ["tsc_hz", "chunk_overhead_ns", "pace_ns_per_iter", "counts"] {
            assert!(v["work"].get(field).is_some(), "missing work.{field}");
        }
    }

    #[test]
    fn work_shorter_than_a_clock_read_is_refused_naming_the_argument() {
        // 1 ns is shorter than a TSC read on any CPU: refused as bad input, naming the argument.
        for (inside, outside, arg) in [(1, 0, "--work-inside 1"), (0, 1, "--work-outside 1")] {
            let mut a = args("tas", 1);
            (a.work_inside, a.work_outside) = (inside, outside);
            let e = run(&a).unwrap_err();
            assert!(e.is::<super::super::BadInput>(), "{e}");
            assert!(e.to_string().contains(arg), "{e}");
        }
        let mut a = args("tas", 1);
        a.acquire = Acquire::TrylockFirst;
        a.contended_delay_ns = 2;
        let e = run(&a).unwrap_err().to_string();
        assert!(e.contains("--contended-delay-ns 2"), "{e}");
    }

    #[test]
    fn a_broken_bound_fails_its_check_with_the_numbers() {
        // The checks alone, on made-up results: 1 lock held 1000 ns by 2M ops/s is 2 s of
        // exclusive hold per second.
        let mut a = args("tas", 2);
        a.work_inside = 1000;
        let report = run(&a).unwrap();
        let mut r: MutexResult = report.detail_as().unwrap();
        r.num = 1;
        r.ops_total = 2_000_000;
        r.window_cpu_ns = 1_000_000_000;
        // The TSC ran 5 % faster over the run than the rate the work was spun at.
        let hz = r.work.as_ref().unwrap().tsc_hz;
        let checks = checks_of(&r, (1000.0, 0.0), hz * 1.05, 1_000_000_000, 2, 0.10);
        let by = |n: &str| by_name(&checks, n);
        assert!(by("cpu_within_elapsed").ok);
        let rate = by("tsc_rate_held");
        assert!(!rate.ok && rate.detail.contains("x0.9524"), "{rate:?}");
        let holds = by("holds_serialised");
        assert!(!holds.ok && holds.value == Some(2.0), "{holds:?}");
        assert!(
            holds.detail.contains("min(--num 1, 2 usable CPUs)"),
            "{}",
            holds.detail
        );
        // 2 s of work per second on 2 threads and 2 CPUs is within the bound.
        assert!(by("work_within_cpus").ok);
        r.threads = 1;
        assert!(
            !by_name(
                &checks_of(&r, (1000.0, 0.0), hz, 1_000_000_000, 2, 0.10),
                "work_within_cpus"
            )
            .ok
        );
    }

    fn by_name(checks: &[Check], name: &str) -> Check {
        checks.iter().find(|c| c.name == name).unwrap().clone()
    }

    #[test]
    fn sysbench_uniform_stays_in_range_and_covers_it() {
        let mut r = SbRand::new(3);
        let mut seen = [0u32; 7];
        for _ in 0..70_000 {
            seen[r.uniform(0, 6) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| (8_000..12_000).contains(&c)), "{seen:?}");
        assert_eq!(r.uniform(5, 5), 5);
    }

    #[test]
    fn contended_path_delay_and_work_options_run() {
        let mut a = args("tas", 2);
        a.num = 1;
        a.locks = 2000;
        a.work_inside = 200;
        a.work_outside = 100;
        a.contended_delay_ns = 500;
        // The delay sits on the trylock's failure path: refused without it, by name.
        let e = run(&a).unwrap_err();
        assert!(e.is::<super::super::BadInput>() && e.to_string().contains("--acquire trylock-first"));
        a.acquire = Acquire::TrylockFirst;
        let report = run(&a).unwrap();
        let r: MutexResult = report.detail_as().unwrap();
        assert_eq!(r.counted, 4000);
        assert!(r.contended.unwrap() <= 4000 && r.contended_unavailable.is_none());
        assert_eq!(report.metrics["contended"], r.contended.unwrap() as f64);
        let back: Report = serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
        assert_eq!(back, report);
    }
}
