//! `lock`: a generic lock microbenchmark over any registered algorithm.
//!
//! T threads loop for a fixed duration: acquire (trylock first, so an acquisition that found
//! the lock taken is counted as contended), update cache-line-padded shared data, hold for
//! `hold_ns` of calibrated work, release, then `gap_ns` of work outside. Two live exclusion
//! checks sit next to the shared data in every run: an owner-identity cell
//! ([`OwnerCheck`]: each owner writes its id on entry and must still find it on exit) and a
//! non-atomic counter whose final value must equal the ops total.
//!
//! No clock is read inside a critical section, and none at all on an uncontended acquisition:
//! a clock read costs 20-50 ns natively and microseconds on an emulated HPET, which would
//! become part of the hold (and the lock's hand-over) it is meant to measure. Acquisition
//! latency is sampled: one in [`LATENCY_SAMPLE_EVERY`] contended acquisitions reads the clock
//! when its try_lock failed and again just after its release; the hold's calibrated duration
//! is taken off that interval (see [`LockResult::acquire_latency`]).
//!
//! Hold and gap are iteration counts from calibrations the workers make themselves (up to
//! [`CALIBRATING_WORKERS`] of them, one at a time) just before the start gate, and again after
//! the stop, outside the window; the median before chooses the counts. Every run checks itself
//! ([`crate::checks`]): CPU time inside the window within elapsed × CPUs, calibrated work per
//! second within the CPUs the threads can use, exclusive holds per second within one, and the
//! calibration unchanged (within 5 %) over the run.

use std::cell::UnsafeCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use lock_api::RawMutex;
use serde::{Deserialize, Serialize};

use super::start::StartGate;
use crate::busywork::{self, Calibration, spin_iters};
use crate::checks::{self, Check, TOLERANCE};
use crate::env::Env;
use crate::locks::owner::{OwnerCheck, OwnerId};
use crate::locks::{self, LockInfo, LockVisitor, futex};
use crate::metrics::{Ctxsw, Fairness, Latency, new_latency_histogram};
use crate::report::Report;

/// One in this many contended acquisitions (per thread, starting with the first) is timed.
pub const LATENCY_SAMPLE_EVERY: u64 = 8;

/// Fewest latency samples from which a 99th percentile is reported: below that, the "p99" of
/// the histogram is one of its few largest samples (with 8 it is the maximum).
pub const MIN_SAMPLES_FOR_P99: u64 = 100;

/// At most this many workers calibrate (one at a time, ~7 ms each): enough to see every CPU
/// the threads run on in guests of the sizes used, without making a 256-thread start-up last
/// seconds. The rest run the counts the median of these chose.
pub const CALIBRATING_WORKERS: usize = 16;

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
    /// Work inside the critical section, in nanoseconds (calibrated busy loop).
    #[arg(long, default_value_t = 200)]
    pub hold_ns: u64,
    /// Work between releases and the next acquisition, in nanoseconds.
    #[arg(long, default_value_t = 200)]
    pub gap_ns: u64,
    /// Largest accepted change of the busy loop's speed between the calibrations before and
    /// after the run (a fraction): beyond it the run is not a result (exit 3). Widen it only
    /// on a machine whose CPU speed is known to move (a cloud VM whose physical core is
    /// shared), and say so: the holds then took that much longer or shorter than asked.
    #[arg(long, default_value_t = crate::checks::MAX_CALIBRATION_DRIFT, value_parser = positive_fraction)]
    pub max_calibration_drift: f64,
}

fn positive_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f > 0.0 && f.is_finite() => Ok(f),
        _ => Err(format!("{s:?} is not a positive fraction (e.g. 0.05 for 5 %)")),
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
    /// estimated as (time from the failed try_lock to just after the release) − `hold_ns`, so
    /// that no clock is read while the lock is held. It therefore includes the release itself
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
    /// What the hold and gap were made of.
    pub calibration: WorkCalibration,
    /// CPU time of every worker inside the measured window (thread CPU clocks read after the
    /// gate and at the stop), nanoseconds.
    pub window_cpu_ns: u64,
}

/// The calibration of one run's busy work.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WorkCalibration {
    /// Median over the calibrating workers before the gate: chose the iteration counts.
    pub ns_per_iter_before: f64,
    /// The same workers' median after the stop (outside the window).
    pub ns_per_iter_after: f64,
    pub hold_iters: u64,
    pub gap_iters: u64,
    /// hold_iters × ns_per_iter_before (and after): the hold actually made, in ns.
    pub effective_hold_ns: f64,
    pub effective_hold_ns_after: f64,
    pub effective_gap_ns: f64,
    pub effective_gap_ns_after: f64,
    /// Each calibrating worker's calibration, before and after.
    pub before: Vec<Calibration>,
    pub after: Vec<Calibration>,
}

#[repr(align(128))]
struct Padded<T>(T);

/// What the lock protects: the owner-identity cell sits on the same cache line as the data.
struct Protected {
    owner: OwnerCheck,
    data: UnsafeCell<[u64; 6]>,
}

struct Shared<R: RawMutex> {
    lock: Padded<R>,
    protected: Padded<Protected>,
    stop: Padded<AtomicBool>,
    /// Iteration counts, stored by the main thread under the start gate's mutex.
    hold_iters: AtomicU64,
    gap_iters: AtomicU64,
    /// The calibrating workers' calibrations before the gate.
    before: Mutex<Vec<Calibration>>,
}

// SAFETY: `protected.data` is only accessed while `lock` is held.
unsafe impl<R: RawMutex + Sync> Sync for Shared<R> {}

struct ThreadOutcome {
    ops: u64,
    contended: u64,
    /// Sampled "failed try_lock → after release" intervals, ns.
    cycle: hdrhistogram::Histogram<u64>,
    ctxsw: Ctxsw,
    window_cpu_ns: u64,
    after: Option<Calibration>,
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

/// The iteration counts for the calibration `ns_per_iter`, or the argument that cannot be made.
fn iteration_counts(args: &Args, ns_per_iter: f64) -> Result<(u64, u64), super::BadInput> {
    Ok((
        busywork::iterations("--hold-ns", args.hold_ns, ns_per_iter)?,
        busywork::iterations("--gap-ns", args.gap_ns, ns_per_iter)?,
    ))
}

fn bench<R: RawMutex + Send + Sync + 'static>(args: &Args, info: &LockInfo) -> anyhow::Result<Report> {
    let shared = Arc::new(Shared::<R> {
        lock: Padded(R::INIT),
        protected: Padded(Protected {
            owner: OwnerCheck::new(),
            data: UnsafeCell::new([0; 6]),
        }),
        stop: Padded(AtomicBool::new(false)),
        hold_iters: AtomicU64::new(0),
        gap_iters: AtomicU64::new(0),
        before: Mutex::new(Vec::new()),
    });
    let gate = Arc::new(StartGate::new(args.threads as usize));
    // The same kind of gate at the end: the main thread stamps the end (and so every worker's
    // CPU reading precedes it) while every worker is parked, before any calibrates again.
    let stop_gate = Arc::new(StartGate::new(args.threads as usize));
    let calibrating = (args.threads as usize).min(CALIBRATING_WORKERS);
    futex::reset_counts();

    let workers: Vec<_> = (0..args.threads)
        .map(|t| {
            let (shared, gate, stop_gate) = (Arc::clone(&shared), Arc::clone(&gate), Arc::clone(&stop_gate));
            let calibrates = (t as usize) < calibrating;
            std::thread::Builder::new()
                .name("lock-worker".into())
                .spawn(move || {
                    if calibrates {
                        let c = busywork::calibrate();
                        shared.before.lock().unwrap_or_else(|e| e.into_inner()).push(c);
                    }
                    gate.arrive();
                    // Relaxed: stored under the gate's mutex, which arrive() took after.
                    let hold = shared.hold_iters.load(Ordering::Relaxed);
                    let gap = shared.gap_iters.load(Ordering::Relaxed);
                    let mut out = worker(&shared, t as OwnerId + 1, hold, gap);
                    stop_gate.arrive();
                    out.after = calibrates.then(busywork::calibrate);
                    out
                })
        })
        .collect::<Result<_, _>>()?;

    let (start, counts) = gate.open_with(|| {
        let before = shared.before.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let ns_per_iter = busywork::median_ns_per_iter(&before).unwrap_or(f64::NAN);
        let counts = iteration_counts(args, ns_per_iter);
        match &counts {
            Ok((hold, gap)) => {
                shared.hold_iters.store(*hold, Ordering::Relaxed);
                shared.gap_iters.store(*gap, Ordering::Relaxed);
            }
            // Refused: the workers leave at once (0 operations) and the run fails below.
            Err(_) => shared.stop.0.store(true, Ordering::Relaxed),
        }
        counts.map(|c| (c, before, ns_per_iter))
    });
    if counts.is_ok() {
        std::thread::sleep(Duration::from_millis(args.duration_ms));
    }
    // Relaxed suffices: the flag carries no data, and the stop gate synchronises the results.
    shared.stop.0.store(true, Ordering::Relaxed);
    let end = stop_gate.open();
    crate::probe::window_close();
    let outcomes: Vec<ThreadOutcome> = workers
        .into_iter()
        .map(|h| h.join().map_err(|_| anyhow::anyhow!("a lock worker panicked")))
        .collect::<anyhow::Result<_>>()?;
    let ((hold_iters, gap_iters), before, ns_before) = counts?;
    // Every counted operation lies inside the window: each worker was parked at the stop gate.
    let elapsed = end.saturating_duration_since(start);
    let (futex, futex_unavailable) = super::futex_counts(info);
    let env = Env::read();

    let after: Vec<Calibration> = outcomes.iter().filter_map(|o| o.after).collect();
    let ns_after = busywork::median_ns_per_iter(&after).unwrap_or(f64::NAN);
    let calibration = WorkCalibration {
        ns_per_iter_before: ns_before,
        ns_per_iter_after: ns_after,
        hold_iters,
        gap_iters,
        effective_hold_ns: hold_iters as f64 * ns_before,
        effective_hold_ns_after: hold_iters as f64 * ns_after,
        effective_gap_ns: gap_iters as f64 * ns_before,
        effective_gap_ns_after: gap_iters as f64 * ns_after,
        before,
        after,
    };
    let ops_per_thread: Vec<u64> = outcomes.iter().map(|o| o.ops).collect();
    let ops_total: u64 = ops_per_thread.iter().sum();
    let contended: u64 = outcomes.iter().map(|o| o.contended).sum();
    let mut cycle = new_latency_histogram();
    for o in &outcomes {
        cycle.add(&o.cycle)?;
    }
    // SAFETY: every worker has been joined; no one else touches the data now.
    let counted = unsafe { (*shared.protected.0.data.get())[0] };
    let secs = elapsed.as_secs_f64();
    // What the sampled interval includes besides the wait: the hold as calibrated (not the
    // nominal `hold_ns`, which rounding and the loop's speed make different).
    let acquire_latency =
        (!cycle.is_empty()).then(|| Latency::of(&cycle).minus(calibration.effective_hold_ns.round() as u64));
    let acquire_latency_samples = cycle.len();
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
        calibration,
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
        elapsed.as_nanos() as u64,
        env.cpus_allowed,
        args.max_calibration_drift,
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

/// The run's physics. Work per operation is counted at the faster of the two calibrations (the
/// smaller ns per iteration), so a bound fails only if it fails under either of them; the
/// drift check says whether they agree.
fn checks_of(r: &LockResult, elapsed_ns: u64, cpus_allowed: usize, max_drift: f64) -> Vec<Check> {
    let c = &r.calibration;
    let per_iter = c.ns_per_iter_before.min(c.ns_per_iter_after);
    let (hold_s, gap_s) = (
        c.hold_iters as f64 * per_iter / 1e9,
        c.gap_iters as f64 * per_iter / 1e9,
    );
    let usable = (r.threads as usize).min(cpus_allowed.max(1));
    let work = r.ops_per_sec * (hold_s + gap_s);
    let holds = r.ops_per_sec * hold_s;
    vec![
        checks::cpu_within_elapsed(r.window_cpu_ns, elapsed_ns, cpus_allowed),
        checks::calibration_drift(c.ns_per_iter_before, c.ns_per_iter_after, max_drift),
        Check::at_most(
            "work_within_cpus",
            work,
            usable as f64 * TOLERANCE,
            format!(
                "{:.0} ops/s x ({:.1} + {:.1}) ns of calibrated hold + gap is {work:.3} CPU-s of work per second, \
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
                "{:.0} ops/s x {:.1} ns of calibrated hold is {holds:.3} s of exclusive hold per second (at most 1, x{TOLERANCE})",
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
    m
}

/// One critical section: owner check around the protected update and the hold work.
#[inline(always)]
fn critical(p: &Protected, me: OwnerId, hold_iters: u64) {
    p.owner.enter(me);
    // SAFETY: the caller holds the lock; the data is only touched under it.
    unsafe {
        let data = &mut *p.data.get();
        let v = std::ptr::read_volatile(&data[0]);
        std::ptr::write_volatile(&mut data[0], v + 1);
        data[1] = data[1].wrapping_add(v);
    }
    spin_iters(hold_iters);
    p.owner.leave(me);
}

fn worker<R: RawMutex>(shared: &Shared<R>, me: OwnerId, hold_iters: u64, gap_iters: u64) -> ThreadOutcome {
    let mut out = ThreadOutcome {
        ops: 0,
        contended: 0,
        cycle: new_latency_histogram(),
        ctxsw: Ctxsw::default(),
        window_cpu_ns: 0,
        after: None,
    };
    let lock = &shared.lock.0;
    let cpu0 = checks::thread_cpu_ns();
    let before = Ctxsw::this_thread();
    while !shared.stop.0.load(Ordering::Relaxed) {
        let sample = if lock.try_lock() {
            None
        } else {
            out.contended += 1;
            let t0 = (out.contended % LATENCY_SAMPLE_EVERY == 1 % LATENCY_SAMPLE_EVERY).then(Instant::now);
            lock.lock();
            t0
        };
        critical(&shared.protected.0, me, hold_iters);
        // SAFETY: this thread acquired the lock above.
        unsafe { lock.unlock() };
        if let Some(t0) = sample {
            let _ = out.cycle.record((t0.elapsed().as_nanos() as u64).max(1));
        }
        out.ops += 1;
        spin_iters(gap_iters);
    }
    out.ctxsw = Ctxsw::this_thread().since(before);
    out.window_cpu_ns = checks::thread_cpu_ns().saturating_sub(cpu0);
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
            max_calibration_drift: crate::checks::MAX_CALIBRATION_DRIFT,
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
            // The calibration that made the work is reported, before and after.
            let c = &r.calibration;
            assert_eq!(c.before.len(), 3);
            assert_eq!(c.after.len(), 3);
            assert!(c.ns_per_iter_before > 0.0 && c.ns_per_iter_after > 0.0);
            assert!((c.effective_hold_ns - c.hold_iters as f64 * c.ns_per_iter_before).abs() < 1e-6);
            assert!(r.window_cpu_ns > 0);
            let names: Vec<&str> = report.checks.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(
                names,
                [
                    "cpu_within_elapsed",
                    "calibration_drift",
                    "work_within_cpus",
                    "holds_serialised"
                ],
                "{algo}"
            );
            // Physics cannot fail, whatever the machine's load (load only slows the run).
            for name in ["cpu_within_elapsed", "work_within_cpus", "holds_serialised"] {
                let check = report.checks.iter().find(|c| c.name == name).unwrap();
                assert!(check.ok, "{algo}: {check:?}");
            }
        }
    }

    #[test]
    fn a_hold_or_gap_below_one_iteration_is_refused_naming_the_argument() {
        let mut a = args("tas", 1);
        a.hold_ns = 2;
        let e = iteration_counts(&a, 2.5).unwrap_err().to_string();
        assert!(e.contains("--hold-ns 2") && e.contains("2.50 ns"), "{e}");
        a.hold_ns = 200;
        a.gap_ns = 1;
        let e = iteration_counts(&a, 2.5).unwrap_err().to_string();
        assert!(e.contains("--gap-ns 1"), "{e}");
        a.gap_ns = 0;
        assert_eq!(iteration_counts(&a, 2.5).unwrap(), (80, 0));
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
    }
}
