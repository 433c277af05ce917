//! Per-thread counters and summaries shared by the workloads: fairness, latency percentiles,
//! context switches and the process's CPU time.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Jain's fairness index of per-thread progress: (Σx)² / (n·Σx²). 1.0 is perfectly fair,
/// 1/n means one thread did all the work. An empty or all-zero input is reported as 1.0.
pub fn jain_index(xs: &[u64]) -> f64 {
    let n = xs.len() as f64;
    let sum: f64 = xs.iter().map(|&x| x as f64).sum();
    let sum_sq: f64 = xs.iter().map(|&x| (x as f64) * (x as f64)).sum();
    if n == 0.0 || sum_sq == 0.0 {
        return 1.0;
    }
    sum * sum / (n * sum_sq)
}

/// Per-thread progress summary printed next to every throughput figure.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Fairness {
    pub min: u64,
    pub max: u64,
    pub jain: f64,
}

impl Fairness {
    pub fn of(per_thread: &[u64]) -> Self {
        Self {
            min: per_thread.iter().copied().min().unwrap_or(0),
            max: per_thread.iter().copied().max().unwrap_or(0),
            jain: jain_index(per_thread),
        }
    }
}

/// Latency histogram in nanoseconds, 3 significant digits, up to one minute.
///
/// Its counts (about 220 KB) are written once here, so their pages are in memory before it is
/// used: a histogram a worker makes before its run's start gate costs the run no page faults
/// when it records. Faulting in and zeroing fresh pages is slow under emulation: at 12x
/// overcommit (24 1-vCPU guests on 2 CPUs, TCG) the workers' histograms made after the gate
/// took whole 1-2 s windows (`clear_page_erms` and `do_user_addr_fault` 43 % of the guests'
/// kernel profile), and most runs did no lock operation at all (2026-12-06).
pub fn new_latency_histogram() -> Histogram<u64> {
    let mut h = Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("static histogram bounds are valid");
    h.clear();
    h
}

/// Percentiles of a latency histogram, in nanoseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    pub count: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        Self {
            count: h.len(),
            p50_ns: h.value_at_quantile(0.50),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            max_ns: h.max(),
            mean_ns: h.mean(),
        }
    }
}

/// Context switches of one thread (`getrusage(RUSAGE_THREAD)`): voluntary ones are sleeps
/// (futex waits, blocking I/O), involuntary ones are preemptions by the scheduler.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Ctxsw {
    pub voluntary: u64,
    pub involuntary: u64,
}

impl Ctxsw {
    /// The calling thread's counts so far.
    pub fn this_thread() -> Self {
        let ru = rusage(libc::RUSAGE_THREAD);
        Self {
            voluntary: ru.ru_nvcsw.max(0) as u64,
            involuntary: ru.ru_nivcsw.max(0) as u64,
        }
    }

    /// The switches between `earlier` and `self` (two readings of one thread).
    pub fn since(self, earlier: Self) -> Self {
        Self {
            voluntary: self.voluntary.saturating_sub(earlier.voluntary),
            involuntary: self.involuntary.saturating_sub(earlier.involuntary),
        }
    }

    pub fn sum(all: &[Ctxsw]) -> Self {
        all.iter().fold(Self::default(), |a, c| Self {
            voluntary: a.voluntary + c.voluntary,
            involuntary: a.involuntary + c.involuntary,
        })
    }

    /// Adds `ctxsw_voluntary` and `ctxsw_involuntary` (sums over `per_thread`) to `metrics`.
    pub fn insert_metrics(per_thread: &[Ctxsw], metrics: &mut std::collections::BTreeMap<String, f64>) {
        let total = Self::sum(per_thread);
        metrics.insert("ctxsw_voluntary".into(), total.voluntary as f64);
        metrics.insert("ctxsw_involuntary".into(), total.involuntary as f64);
    }
}

/// User + system CPU seconds of this whole process so far (every thread, not the reaped
/// children).
pub fn process_cpu_s() -> f64 {
    let ru = rusage(libc::RUSAGE_SELF);
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn rusage(who: libc::c_int) -> libc::rusage {
    // SAFETY: getrusage fills the zeroed struct; `who` is RUSAGE_SELF or RUSAGE_THREAD, which
    // cannot fail on Linux, so a failure leaves zeros (reported as no switches).
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut ru);
        ru
    }
}

impl Latency {
    /// The same percentiles with a constant `ns` taken off each (saturating at 0): for a
    /// histogram of "wait + a known fixed cost", the wait alone.
    pub fn minus(&self, ns: u64) -> Self {
        Self {
            count: self.count,
            p50_ns: self.p50_ns.saturating_sub(ns),
            p99_ns: self.p99_ns.saturating_sub(ns),
            p999_ns: self.p999_ns.saturating_sub(ns),
            max_ns: self.max_ns.saturating_sub(ns),
            mean_ns: (self.mean_ns - ns as f64).max(0.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sleeping_thread_counts_voluntary_switches() {
        let before = Ctxsw::this_thread();
        for _ in 0..5 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let d = Ctxsw::this_thread().since(before);
        assert!(d.voluntary >= 5, "{d:?}");
        let total = Ctxsw::sum(&[d, d]);
        assert_eq!(total.voluntary, 2 * d.voluntary);
        let mut m = std::collections::BTreeMap::new();
        Ctxsw::insert_metrics(&[d, d], &mut m);
        assert_eq!(m["ctxsw_voluntary"], total.voluntary as f64);
    }

    #[test]
    fn jain_index_known_answers() {
        assert_eq!(jain_index(&[5, 5, 5, 5]), 1.0);
        assert!((jain_index(&[10, 0, 0, 0]) - 0.25).abs() < 1e-12);
        // (1+2+3)^2 / (3 * (1+4+9)) = 36/42
        assert!((jain_index(&[1, 2, 3]) - 36.0 / 42.0).abs() < 1e-12);
        assert_eq!(jain_index(&[]), 1.0);
    }

    #[test]
    fn latency_percentiles_from_histogram() {
        let mut h = new_latency_histogram();
        for v in 1..=1000u64 {
            h.record(v * 1000).unwrap();
        }
        let l = Latency::of(&h);
        assert_eq!(l.count, 1000);
        assert!((l.p50_ns as f64 - 500_000.0).abs() / 500_000.0 < 0.01);
        assert!(l.max_ns >= 999_000);
    }
}
