//! `mutex`: sysbench's mutex test (`sysbench mutex`), over any registered lock algorithm.
//!
//! As sysbench 1.0: an array of `num` locks (each padded by 256 bytes, as sysbench's
//! `thread_lock`); every thread does `locks` iterations of: pick a lock uniformly at random,
//! run an empty loop of `loops` iterations (the loop bound is re-read each iteration, as in
//! sysbench's compiled loop), lock it, increment a global counter, unlock. The result is the
//! wall time until the last thread finished (sysbench's "total time", `time_s`, lower is
//! better) and per-thread execution times.
//!
//! Additions: the acquisition is a trylock first, so acquisitions that found the lock taken are
//! counted (`contended`); `--contended-delay-ns` spins that long before blocking, on the
//! contended path only; `--work-inside` / `--work-outside` add calibrated work inside the
//! critical section / after it. Each lock also guards its own counter, checked at the end.
//! `progress_at_first_finish` records how far every thread had got when the first thread
//! finished: the fairness of progress under preemption (equal work per thread otherwise hides
//! it).

use std::cell::UnsafeCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use clap::Args as ClapArgs;
use lock_api::RawMutex;
use serde::{Deserialize, Serialize};

use super::Rng;
use crate::busywork::{iterations_for, spin_iters};
use crate::env::Env;
use crate::locks::{self, LockInfo, LockVisitor, futex};
use crate::metrics::Fairness;
use crate::report::Report;

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
    /// Extra calibrated work inside the critical section, in nanoseconds.
    #[arg(long, default_value_t = 0)]
    pub work_inside: u64,
    /// Extra calibrated work after releasing, in nanoseconds.
    #[arg(long, default_value_t = 0)]
    pub work_outside: u64,
    /// Busy delay before blocking when the trylock failed (contended path only), ns.
    #[arg(long, default_value_t = 0)]
    pub contended_delay_ns: u64,
}

/// The `mutex` workload's fields in the report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MutexResult {
    pub algo: String,
    pub threads: u32,
    pub num: u32,
    pub locks: u64,
    pub loops: u32,
    pub work_inside: u64,
    pub work_outside: u64,
    pub contended_delay_ns: u64,
    /// Wall seconds from the start barrier until the last thread finished.
    pub time_s: f64,
    pub ops_total: u64,
    pub ops_per_sec: f64,
    pub contended: u64,
    pub contention_rate: f64,
    /// Per thread: seconds from the start until it finished its `locks` acquisitions.
    pub thread_time_s: Vec<f64>,
    /// Fairness of per-thread execution times (µs).
    pub time_fairness: Fairness,
    /// Per thread: acquisitions done when the first thread finished.
    pub progress_at_first_finish: Vec<u64>,
    pub progress_fairness: Fairness,
    pub futex: Option<futex::FutexCounts>,
    /// Sum of the per-lock counters (must equal threads × locks).
    pub counted: u64,
}

/// One element of the lock array: sysbench's `{ pthread_mutex_t mutex; char pad[256]; }`,
/// plus the counter the lock guards.
#[repr(C)]
struct Slot<R> {
    lock: R,
    counter: UnsafeCell<u64>,
    _pad: [u8; 256],
}

struct Shared<R> {
    slots: Vec<Slot<R>>,
    global_var: AtomicU32,
    first_done: AtomicBool,
}

// SAFETY: each `counter` is only touched while its `lock` is held.
unsafe impl<R: RawMutex + Sync> Sync for Shared<R> {}

struct Outcome {
    contended: u64,
    at_first_finish: u64,
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

#[derive(Clone, Copy)]
struct Params {
    locks: u64,
    loops: u32,
    inside: u64,
    outside: u64,
    delay: u64,
}

fn iters(ns: u64) -> u64 {
    if ns == 0 { 0 } else { iterations_for(ns) }
}

fn bench<R: RawMutex + Send + Sync + 'static>(args: &Args, info: &LockInfo) -> anyhow::Result<Report> {
    let p = Params {
        locks: args.locks,
        loops: args.loops,
        inside: iters(args.work_inside),
        outside: iters(args.work_outside),
        delay: iters(args.contended_delay_ns),
    };
    let shared = Arc::new(Shared::<R> {
        slots: (0..args.num)
            .map(|_| Slot {
                lock: R::INIT,
                counter: UnsafeCell::new(0),
                _pad: [0; 256],
            })
            .collect(),
        global_var: AtomicU32::new(0),
        first_done: AtomicBool::new(false),
    });
    let barrier = Arc::new(Barrier::new(args.threads as usize + 1));
    futex::reset_counts();
    let workers: Vec<_> = (0..args.threads)
        .map(|t| {
            let (shared, barrier) = (Arc::clone(&shared), Arc::clone(&barrier));
            std::thread::Builder::new()
                .name("mutex-worker".into())
                .spawn(move || worker(&shared, &barrier, p, t as u64))
        })
        .collect::<Result<_, _>>()?;
    barrier.wait();
    let start = Instant::now();
    let outcomes: Vec<(Outcome, Instant)> = workers
        .into_iter()
        .map(|h| h.join().map_err(|_| anyhow::anyhow!("a mutex worker panicked")))
        .collect::<anyhow::Result<_>>()?;
    let elapsed = outcomes
        .iter()
        .map(|(_, end)| end.duration_since(start))
        .max()
        .unwrap_or_default();

    // SAFETY: every worker has been joined; nobody touches the counters now.
    let counted: u64 = shared.slots.iter().map(|s| unsafe { *s.counter.get() }).sum();
    let ops_total = args.threads as u64 * args.locks;
    let contended: u64 = outcomes.iter().map(|(o, _)| o.contended).sum();
    let thread_ns: Vec<u64> = outcomes
        .iter()
        .map(|(_, end)| end.duration_since(start).as_nanos() as u64)
        .collect();
    let progress: Vec<u64> = outcomes.iter().map(|(o, _)| o.at_first_finish).collect();
    let secs = elapsed.as_secs_f64();
    let result = MutexResult {
        algo: args.algo.clone(),
        threads: args.threads,
        num: args.num,
        locks: args.locks,
        loops: args.loops,
        work_inside: args.work_inside,
        work_outside: args.work_outside,
        contended_delay_ns: args.contended_delay_ns,
        time_s: secs,
        ops_total,
        ops_per_sec: ops_total as f64 / secs.max(1e-9),
        contended,
        contention_rate: contended as f64 / ops_total as f64,
        time_fairness: Fairness::of(&thread_ns.iter().map(|&n| n / 1000).collect::<Vec<_>>()),
        thread_time_s: thread_ns.iter().map(|&n| super::secs(n)).collect(),
        progress_fairness: Fairness::of(&progress),
        progress_at_first_finish: progress,
        futex: info.uses_futex.then(futex::counts),
        counted,
    };
    anyhow::ensure!(
        counted == ops_total,
        "mutual exclusion violated by '{}': counted {counted} != {ops_total}",
        args.algo
    );
    Report::new(
        "mutex",
        elapsed.as_nanos() as u64,
        Env::read(),
        metrics_of(&result),
        &result,
    )
}

fn metrics_of(r: &MutexResult) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    m.insert("time_s".into(), r.time_s);
    m.insert("ops_per_sec".into(), r.ops_per_sec);
    m.insert("contended".into(), r.contended as f64);
    m.insert("contention_rate".into(), r.contention_rate);
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
    m
}

fn worker<R: RawMutex>(shared: &Shared<R>, barrier: &Barrier, p: Params, seed: u64) -> (Outcome, Instant) {
    let mut rng = Rng::new(seed.wrapping_mul(0x51_7CC1_B727_220A).wrapping_add(7));
    let n = shared.slots.len() as u64;
    let mut out = Outcome {
        contended: 0,
        at_first_finish: p.locks,
    };
    let mut seen_first = false;
    barrier.wait();
    for i in 0..p.locks {
        let slot = &shared.slots[rng.below(n) as usize];
        // sysbench's empty loop, as its compiled form: the bound is loaded from memory on
        // every iteration (a volatile read keeps the loop and that load).
        let mut c = 0u32;
        // SAFETY: reading a live local.
        while c < unsafe { std::ptr::read_volatile(&p.loops) } {
            c += 1;
        }
        if !slot.lock.try_lock() {
            out.contended += 1;
            spin_iters(p.delay);
            slot.lock.lock();
        }
        // sysbench's unsynchronised `global_var++` (a plain load and store).
        let g = shared.global_var.load(Ordering::Relaxed);
        shared.global_var.store(g.wrapping_add(1), Ordering::Relaxed);
        // SAFETY: we hold this slot's lock.
        unsafe { *slot.counter.get() += 1 };
        spin_iters(p.inside);
        // SAFETY: this thread acquired the lock above.
        unsafe { slot.lock.unlock() };
        spin_iters(p.outside);
        if !seen_first && shared.first_done.load(Ordering::Relaxed) {
            seen_first = true;
            out.at_first_finish = i + 1;
        }
    }
    shared.first_done.store(true, Ordering::Relaxed);
    (out, Instant::now())
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
            work_inside: 0,
            work_outside: 0,
            contended_delay_ns: 0,
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
            assert!(r.contended <= r.ops_total);
            assert_eq!(r.thread_time_s.len(), 2);
            assert!(r.thread_time_s.iter().all(|&t| t <= r.time_s + 1e-9));
            assert!(r.progress_at_first_finish.iter().all(|&x| x <= 1000));
            assert!(r.progress_at_first_finish.contains(&1000));
            assert_eq!(report.metrics["time_s"], r.time_s);
        }
    }

    #[test]
    fn contended_path_delay_and_work_options_run() {
        let mut a = args("tas", 2);
        a.num = 1;
        a.locks = 2000;
        a.work_inside = 200;
        a.work_outside = 100;
        a.contended_delay_ns = 500;
        let report = run(&a).unwrap();
        let r: MutexResult = report.detail_as().unwrap();
        assert_eq!(r.counted, 4000);
        let back: Report = serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
        assert_eq!(back, report);
    }
}
