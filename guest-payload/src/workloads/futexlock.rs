//! `futexlock`: plain futex mutex vs adaptive spin-then-park, the case for adaptive futex
//! spinning (a waiter spins while the owner is likely running, and only sleeps in the kernel
//! when it is not — which under vCPU overcommit is exactly when the owner was preempted).
//!
//! T threads each do `iterations` of: lock; spin `hold` iterations; unlock; spin `gap`
//! iterations. `--mode plain` uses the registry's `futex` lock (no spinning), `--mode adaptive`
//! the registry's `spin_park`; when the registry does not have them, the simple local versions
//! below are used (the report says which). Reports Kiter/s (`kiter_per_sec`, higher is better)
//! and the futex wait/wake syscalls per lock call — the cost adaptive spinning is meant to cut.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use clap::{Args as ClapArgs, ValueEnum};
use lock_api::{GuardSend, RawMutex};
use serde::{Deserialize, Serialize};

use crate::busywork::spin_iters;
use crate::env::Env;
use crate::locks::{self, LockInfo, LockVisitor, futex};
use crate::metrics::Fairness;
use crate::report::Report;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Futex mutex that sleeps as soon as the lock is taken.
    Plain,
    /// Spin for a while, then park in the kernel.
    Adaptive,
}

#[derive(Debug, Clone, ClapArgs, Serialize, Deserialize)]
pub struct Args {
    /// Worker threads.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub threads: u32,
    /// Lock/unlock iterations per thread.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub iterations: u64,
    /// Spin-loop iterations inside the critical section.
    #[arg(long, default_value_t = 100)]
    pub hold: u64,
    /// Spin-loop iterations between unlock and the next lock.
    #[arg(long, default_value_t = 100)]
    pub gap: u64,
    /// plain (futex, no spinning) or adaptive (spin then park).
    #[arg(long, value_enum, default_value_t = Mode::Adaptive)]
    pub mode: Mode,
}

/// The `futexlock` workload's fields in the report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FutexlockResult {
    pub mode: Mode,
    /// The lock implementation used: a registry name, or "local-futex" / "local-spin-park".
    pub lock: String,
    pub threads: u32,
    pub iterations: u64,
    pub hold: u64,
    pub gap: u64,
    pub time_s: f64,
    pub iterations_total: u64,
    pub kiter_per_sec: f64,
    pub thread_time_s: Vec<f64>,
    pub time_fairness: Fairness,
    /// Per thread: iterations done when the first thread finished.
    pub progress_at_first_finish: Vec<u64>,
    pub progress_fairness: Fairness,
    pub futex_waits: u64,
    pub futex_wakes: u64,
    /// futex waits / lock calls.
    pub wait_share: f64,
    /// futex wakes / unlock calls.
    pub wake_share: f64,
    /// Non-atomic counter under the lock, must equal iterations_total.
    pub counted: u64,
}

/// Drepper's "mutex2" (0 free, 1 locked, 2 locked with waiters): never spins.
pub struct LocalFutexMutex {
    state: AtomicU32,
}

/// Spin-then-park: up to SPINS attempts while the lock looks busy, then the futex path.
pub struct LocalSpinPark {
    inner: LocalFutexMutex,
}

const SPINS: u32 = 100;

impl LocalFutexMutex {
    #[inline]
    fn lock_slow(&self) {
        let mut c = self.state.swap(2, Ordering::Acquire);
        while c != 0 {
            futex::wait(&self.state, 2);
            c = self.state.swap(2, Ordering::Acquire);
        }
    }
}

// SAFETY: state transitions give mutual exclusion: only the thread that moves 0 -> 1/2 owns it.
unsafe impl RawMutex for LocalFutexMutex {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        state: AtomicU32::new(0),
    };
    type GuardMarker = GuardSend;

    fn lock(&self) {
        if self
            .state
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_slow();
        }
    }

    fn try_lock(&self) -> bool {
        self.state
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    unsafe fn unlock(&self) {
        if self.state.swap(0, Ordering::Release) == 2 {
            futex::wake(&self.state, 1);
        }
    }
}

// SAFETY: as LocalFutexMutex, which it wraps.
unsafe impl RawMutex for LocalSpinPark {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        inner: LocalFutexMutex::INIT,
    };
    type GuardMarker = GuardSend;

    fn lock(&self) {
        for _ in 0..SPINS {
            if self.inner.state.load(Ordering::Relaxed) == 0 && self.inner.try_lock() {
                return;
            }
            std::hint::spin_loop();
        }
        if !self.inner.try_lock() {
            self.inner.lock_slow();
        }
    }

    fn try_lock(&self) -> bool {
        self.inner.try_lock()
    }

    unsafe fn unlock(&self) {
        // SAFETY: forwarded precondition.
        unsafe { self.inner.unlock() }
    }
}

#[repr(align(128))]
struct Padded<T>(T);

struct Shared<R> {
    lock: Padded<R>,
    counter: Padded<std::cell::UnsafeCell<u64>>,
    first_done: Padded<AtomicBool>,
    lock_calls: AtomicU64,
}

// SAFETY: counter only touched under lock.
unsafe impl<R: RawMutex + Sync> Sync for Shared<R> {}

pub fn run(args: &Args) -> anyhow::Result<Report> {
    let (registry_name, local_name) = match args.mode {
        Mode::Plain => ("futex", "local-futex"),
        Mode::Adaptive => ("spin_park", "local-spin-park"),
    };
    if let Some(r) = locks::with_algo(registry_name, Bench(args, registry_name)) {
        return r;
    }
    match args.mode {
        Mode::Plain => bench::<LocalFutexMutex>(args, local_name),
        Mode::Adaptive => bench::<LocalSpinPark>(args, local_name),
    }
}

struct Bench<'a>(&'a Args, &'static str);

impl LockVisitor for Bench<'_> {
    type Output = anyhow::Result<Report>;
    fn visit<R: RawMutex + Send + Sync + 'static>(self, _info: &'static LockInfo) -> Self::Output {
        bench::<R>(self.0, self.1)
    }
}

fn bench<R: RawMutex + Send + Sync + 'static>(args: &Args, lock_name: &str) -> anyhow::Result<Report> {
    let shared = Arc::new(Shared::<R> {
        lock: Padded(R::INIT),
        counter: Padded(std::cell::UnsafeCell::new(0)),
        first_done: Padded(AtomicBool::new(false)),
        lock_calls: AtomicU64::new(0),
    });
    let barrier = Arc::new(Barrier::new(args.threads as usize + 1));
    futex::reset_counts();
    let (iterations, hold, gap) = (args.iterations, args.hold, args.gap);
    let workers: Vec<_> = (0..args.threads)
        .map(|_| {
            let (shared, barrier) = (Arc::clone(&shared), Arc::clone(&barrier));
            std::thread::Builder::new()
                .name("futexlock".into())
                .spawn(move || worker(&shared, &barrier, iterations, hold, gap))
        })
        .collect::<Result<_, _>>()?;
    barrier.wait();
    let start = Instant::now();
    let outcomes: Vec<(u64, Instant)> = workers
        .into_iter()
        .map(|h| {
            h.join()
                .map_err(|_| anyhow::anyhow!("a futexlock worker panicked"))
        })
        .collect::<anyhow::Result<_>>()?;
    let counts = futex::counts();
    let thread_ns: Vec<u64> = outcomes
        .iter()
        .map(|(_, e)| e.duration_since(start).as_nanos() as u64)
        .collect();
    let elapsed_ns = thread_ns.iter().copied().max().unwrap_or(0);
    let total = args.threads as u64 * args.iterations;
    // SAFETY: all workers joined.
    let counted = unsafe { *shared.counter.0.get() };
    let calls = shared.lock_calls.load(Ordering::Relaxed).max(1);
    let progress: Vec<u64> = outcomes.iter().map(|o| o.0).collect();
    let secs = super::secs(elapsed_ns);
    let result = FutexlockResult {
        mode: args.mode,
        lock: lock_name.to_string(),
        threads: args.threads,
        iterations: args.iterations,
        hold: args.hold,
        gap: args.gap,
        time_s: secs,
        iterations_total: total,
        kiter_per_sec: total as f64 / secs.max(1e-9) / 1000.0,
        time_fairness: Fairness::of(&thread_ns.iter().map(|&n| n / 1000).collect::<Vec<_>>()),
        thread_time_s: thread_ns.iter().map(|&n| super::secs(n)).collect(),
        progress_fairness: Fairness::of(&progress),
        progress_at_first_finish: progress,
        futex_waits: counts.waits,
        futex_wakes: counts.wakes,
        wait_share: counts.waits as f64 / calls as f64,
        wake_share: counts.wakes as f64 / calls as f64,
        counted,
    };
    anyhow::ensure!(
        counted == total,
        "mutual exclusion violated by '{lock_name}': counted {counted} != {total}"
    );
    Report::new("futexlock", elapsed_ns, Env::read(), metrics_of(&result), &result)
}

fn metrics_of(r: &FutexlockResult) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    m.insert("kiter_per_sec".into(), r.kiter_per_sec);
    m.insert("time_s".into(), r.time_s);
    m.insert("futex_waits".into(), r.futex_waits as f64);
    m.insert("futex_wakes".into(), r.futex_wakes as f64);
    m.insert("wait_share".into(), r.wait_share);
    m.insert("wake_share".into(), r.wake_share);
    m.insert("progress_jain".into(), r.progress_fairness.jain);
    m.insert("time_jain".into(), r.time_fairness.jain);
    m
}

/// Returns (iterations done when the first thread finished, end instant).
fn worker<R: RawMutex>(
    s: &Shared<R>,
    barrier: &Barrier,
    iterations: u64,
    hold: u64,
    gap: u64,
) -> (u64, Instant) {
    let mut at_first = iterations;
    let mut seen = false;
    barrier.wait();
    for i in 0..iterations {
        s.lock.0.lock();
        // SAFETY: we hold the lock.
        unsafe {
            let p = s.counter.0.get();
            std::ptr::write_volatile(p, std::ptr::read_volatile(p) + 1);
        }
        spin_iters(hold);
        // SAFETY: acquired above.
        unsafe { s.lock.0.unlock() };
        spin_iters(gap);
        if !seen && s.first_done.0.load(Ordering::Relaxed) {
            seen = true;
            at_first = i + 1;
        }
    }
    s.lock_calls.fetch_add(iterations, Ordering::Relaxed);
    s.first_done.0.store(true, Ordering::Relaxed);
    (at_first, Instant::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(mode: Mode) -> Args {
        Args {
            threads: 3,
            iterations: 20_000,
            hold: 50,
            gap: 50,
            mode,
        }
    }

    #[test]
    fn both_modes_count_every_iteration() {
        for mode in [Mode::Plain, Mode::Adaptive] {
            let report = run(&args(mode)).unwrap();
            let r: FutexlockResult = report.detail_as().unwrap();
            assert_eq!(r.iterations_total, 60_000);
            assert_eq!(r.counted, 60_000);
            assert!(r.kiter_per_sec > 0.0);
            assert_eq!(r.thread_time_s.len(), 3);
            assert!(r.progress_at_first_finish.contains(&20_000));
            assert!(r.wait_share >= 0.0 && r.wake_share >= 0.0);
            assert_eq!(report.metrics["kiter_per_sec"], r.kiter_per_sec);
        }
    }

    #[test]
    fn local_locks_exclude_and_single_thread_never_sleeps() {
        for mode in [Mode::Plain, Mode::Adaptive] {
            let a = args(mode);
            let r: FutexlockResult = match mode {
                Mode::Plain => bench::<LocalFutexMutex>(&a, "local-futex"),
                Mode::Adaptive => bench::<LocalSpinPark>(&a, "local-spin-park"),
            }
            .unwrap()
            .detail_as()
            .unwrap();
            assert_eq!(r.counted, 60_000);
        }
        let m = LocalFutexMutex::INIT;
        for _ in 0..1000 {
            m.lock();
            // SAFETY: locked above.
            unsafe { m.unlock() };
        }
        assert_eq!(m.state.load(Ordering::Relaxed), 0);
    }
}
