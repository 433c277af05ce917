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
//! only (needs `--acquire trylock-first`); `--work-inside` / `--work-outside` add calibrated
//! work inside the critical section / after it. Each lock also guards its own counter and an
//! owner-identity cell ([`OwnerCheck`]), both checked. `progress_at_first_finish` records how
//! far every thread had got when the first thread finished: the fairness of progress under
//! preemption (equal work per thread otherwise hides it); `jain` is its Jain's index.

use std::cell::UnsafeCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Instant;

use clap::{Args as ClapArgs, ValueEnum};
use lock_api::RawMutex;
use serde::{Deserialize, Serialize};

use super::Rng;
use super::start::StartGate;
use crate::busywork::{iterations_for, spin_iters};
use crate::env::Env;
use crate::locks::owner::{OwnerCheck, OwnerId};
use crate::locks::{self, LockInfo, LockVisitor, futex};
use crate::metrics::{Ctxsw, Fairness};
use crate::report::Report;

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
    /// Extra calibrated work inside the critical section, in nanoseconds.
    #[arg(long, default_value_t = 0)]
    pub work_inside: u64,
    /// Extra calibrated work after releasing, in nanoseconds.
    #[arg(long, default_value_t = 0)]
    pub work_outside: u64,
    /// Busy delay before blocking when the trylock failed (contended path only, needs
    /// --acquire trylock-first), ns.
    #[arg(long, default_value_t = 0)]
    pub contended_delay_ns: u64,
}

impl Args {
    /// Checks that the arguments fit together (the parser checks each on its own).
    pub fn check(&self) -> Result<(), String> {
        if self.contended_delay_ns > 0 && self.acquire != Acquire::TrylockFirst {
            return Err(
                "--contended-delay-ns needs --acquire trylock-first (only a failed trylock shows a contended acquisition)"
                    .into(),
            );
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

#[derive(Clone, Copy)]
struct Params {
    locks: u64,
    loops: u32,
    trylock_first: bool,
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
        trylock_first: args.acquire == Acquire::TrylockFirst,
        inside: iters(args.work_inside),
        outside: iters(args.work_outside),
        delay: iters(args.contended_delay_ns),
    };
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
    let gate = Arc::new(StartGate::new(args.threads as usize));
    futex::reset_counts();
    let workers: Vec<_> = (0..args.threads)
        .map(|t| {
            let (shared, gate) = (Arc::clone(&shared), Arc::clone(&gate));
            std::thread::Builder::new()
                .name("mutex-worker".into())
                .spawn(move || {
                    gate.arrive();
                    worker(&shared, p, t as OwnerId + 1)
                })
        })
        .collect::<Result<_, _>>()?;
    let start = gate.open();
    let outcomes: Vec<Outcome> = workers
        .into_iter()
        .map(|h| h.join().map_err(|_| anyhow::anyhow!("a mutex worker panicked")))
        .collect::<anyhow::Result<_>>()?;
    crate::probe::window_close();
    let (futex, futex_unavailable) = super::futex_counts(info);
    let thread_ns: Vec<u64> = outcomes
        .iter()
        .map(|o| o.end.duration_since(start).as_nanos() as u64)
        .collect();
    let elapsed_ns = thread_ns.iter().copied().max().unwrap_or(0);

    // SAFETY: every worker has been joined; nobody touches the counters now.
    let counted: u64 = shared.slots.iter().map(|s| unsafe { *s.counter.get() }).sum();
    let owner_violations: u64 = shared.slots.iter().map(|s| s.owner.violations()).sum();
    let ops_total = args.threads as u64 * args.locks;
    let contended = p
        .trylock_first
        .then(|| outcomes.iter().map(|o| o.contended).sum::<u64>());
    let progress: Vec<u64> = outcomes.iter().map(|o| o.at_first_finish).collect();
    let secs = super::secs(elapsed_ns);
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
    let window_cpu_ns = outcomes.iter().map(|o| o.cpu_ns).sum();
    let checks = vec![crate::checks::cpu_within_elapsed(
        window_cpu_ns,
        elapsed_ns,
        env.cpus_allowed,
    )];
    Ok(Report::new("mutex", elapsed_ns, env, metrics_of(&result), &result)?.with_checks(checks))
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

fn worker<R: RawMutex>(shared: &Shared<R>, p: Params, me: OwnerId) -> Outcome {
    let mut rng = SbRand::new(me.wrapping_mul(0x51_7CC1_B727_220A).wrapping_add(7));
    let n = shared.slots.len() as u32;
    let mut out = Outcome {
        contended: 0,
        at_first_finish: p.locks,
        ctxsw: Ctxsw::default(),
        end: Instant::now(),
        cpu_ns: 0,
    };
    let cpu0 = crate::checks::thread_cpu_ns();
    let mut seen_first = false;
    let before = Ctxsw::this_thread();
    for i in 0..p.locks {
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
            spin_iters(p.delay);
            slot.lock.lock();
        }
        slot.owner.enter(me);
        // sysbench's unsynchronised `global_var++` (a plain load and store).
        let g = shared.global_var.0.load(Ordering::Relaxed);
        shared.global_var.0.store(g.wrapping_add(1), Ordering::Relaxed);
        // SAFETY: we hold this slot's lock.
        unsafe { *slot.counter.get() += 1 };
        spin_iters(p.inside);
        slot.owner.leave(me);
        // SAFETY: this thread acquired the lock above.
        unsafe { slot.lock.unlock() };
        spin_iters(p.outside);
        if !seen_first && shared.first_done.0.load(Ordering::Relaxed) {
            seen_first = true;
            out.at_first_finish = i + 1;
        }
    }
    out.end = Instant::now();
    out.cpu_ns = crate::checks::thread_cpu_ns().saturating_sub(cpu0);
    shared.first_done.0.store(true, Ordering::Relaxed);
    out.ctxsw = Ctxsw::this_thread().since(before);
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
        }
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
