//! `lock`: a generic lock microbenchmark over any registered algorithm.
//!
//! T threads loop for a fixed duration: acquire (trylock first, so an acquisition that found
//! the lock taken is counted as contended), update cache-line-padded shared data, hold for
//! `hold_ns` of calibrated work, release, then `gap_ns` of work outside. The shared data also
//! carries a non-atomic counter whose final value must equal the ops total: a live
//! mutual-exclusion check in every run.

use std::cell::UnsafeCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use lock_api::RawMutex;
use serde::{Deserialize, Serialize};

use crate::busywork::{iterations_for, spin_iters};
use crate::env::Env;
use crate::locks::{self, LockInfo, LockVisitor, futex};
use crate::metrics::{Fairness, Latency, new_latency_histogram};
use crate::report::Report;

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
    pub futex: Option<futex::FutexCounts>,
    /// Time from the first acquisition attempt to owning the lock.
    pub acquire_latency: Latency,
    /// Increments of the unprotected counter that were lost (must be 0).
    pub lost_updates: u64,
}

#[repr(align(128))]
struct Padded<T>(T);

struct Shared<R: RawMutex> {
    lock: Padded<R>,
    data: Padded<UnsafeCell<[u64; 8]>>,
    stop: Padded<AtomicBool>,
}

// SAFETY: `data` is only accessed while `lock` is held.
unsafe impl<R: RawMutex + Sync> Sync for Shared<R> {}

struct ThreadOutcome {
    ops: u64,
    contended: u64,
    latency: hdrhistogram::Histogram<u64>,
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

fn bench<R: RawMutex + Send + Sync + 'static>(args: &Args, info: &LockInfo) -> anyhow::Result<Report> {
    let hold_iters = if args.hold_ns == 0 {
        0
    } else {
        iterations_for(args.hold_ns)
    };
    let gap_iters = if args.gap_ns == 0 {
        0
    } else {
        iterations_for(args.gap_ns)
    };
    let shared = Arc::new(Shared::<R> {
        lock: Padded(R::INIT),
        data: Padded(UnsafeCell::new([0; 8])),
        stop: Padded(AtomicBool::new(false)),
    });
    let barrier = Arc::new(Barrier::new(args.threads as usize + 1));
    futex::reset_counts();

    let workers: Vec<_> = (0..args.threads)
        .map(|_| {
            let shared = Arc::clone(&shared);
            let barrier = Arc::clone(&barrier);
            std::thread::Builder::new()
                .name("lock-worker".into())
                .spawn(move || worker(&shared, &barrier, hold_iters, gap_iters))
        })
        .collect::<Result<_, _>>()?;

    barrier.wait();
    let start = Instant::now();
    std::thread::sleep(Duration::from_millis(args.duration_ms));
    // Relaxed suffices: the flag carries no data, and join() below synchronises the results.
    shared.stop.0.store(true, Ordering::Relaxed);
    let outcomes: Vec<ThreadOutcome> = workers
        .into_iter()
        .map(|h| h.join().map_err(|_| anyhow::anyhow!("a lock worker panicked")))
        .collect::<anyhow::Result<_>>()?;
    let elapsed = start.elapsed();

    let ops_per_thread: Vec<u64> = outcomes.iter().map(|o| o.ops).collect();
    let ops_total: u64 = ops_per_thread.iter().sum();
    let contended: u64 = outcomes.iter().map(|o| o.contended).sum();
    let mut latency = new_latency_histogram();
    for o in &outcomes {
        latency.add(&o.latency)?;
    }
    // SAFETY: every worker has been joined; no one else touches the data now.
    let counted = unsafe { (*shared.data.0.get())[0] };
    let secs = elapsed.as_secs_f64();
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
        futex: info.uses_futex.then(futex::counts),
        acquire_latency: Latency::of(&latency),
        lost_updates: ops_total.saturating_sub(counted),
    };
    anyhow::ensure!(
        result.lost_updates == 0 && counted == ops_total,
        "mutual exclusion violated by '{}': counter {counted} != ops {ops_total}",
        args.algo
    );
    Report::new(
        "lock",
        elapsed.as_nanos() as u64,
        Env::read(),
        metrics_of(&result),
        &result,
    )
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
    m.insert("acquire_p99_ns".into(), r.acquire_latency.p99_ns as f64);
    if let Some(f) = r.futex {
        m.insert("futex_waits".into(), f.waits as f64);
        m.insert("futex_wakes".into(), f.wakes as f64);
    }
    m
}

fn worker<R: RawMutex>(
    shared: &Shared<R>,
    barrier: &Barrier,
    hold_iters: u64,
    gap_iters: u64,
) -> ThreadOutcome {
    let mut out = ThreadOutcome {
        ops: 0,
        contended: 0,
        latency: new_latency_histogram(),
    };
    let lock = &shared.lock.0;
    barrier.wait();
    while !shared.stop.0.load(Ordering::Relaxed) {
        let t0 = Instant::now();
        if !lock.try_lock() {
            out.contended += 1;
            lock.lock();
        }
        let waited = t0.elapsed().as_nanos() as u64;
        // SAFETY: we hold the lock; the data is only touched under it.
        unsafe {
            let data = &mut *shared.data.0.get();
            let v = std::ptr::read_volatile(&data[0]);
            std::ptr::write_volatile(&mut data[0], v + 1);
            data[1] = data[1].wrapping_add(v);
        }
        spin_iters(hold_iters);
        // SAFETY: this thread acquired the lock above.
        unsafe { lock.unlock() };
        out.ops += 1;
        let _ = out.latency.record(waited.max(1));
        spin_iters(gap_iters);
    }
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
        }
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
