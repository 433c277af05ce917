//! Workloads: each takes its clap `Args`, runs, and returns one [`crate::report::Report`].

pub mod dbench;
mod dbench_client;
pub mod dbench_loadfile;
pub mod ebizzy;
pub mod exec;
pub mod futexlock;
mod gated;
pub mod hackbench;
pub mod hog;
pub mod lock;
pub mod locktorture;
pub mod mutex;
mod shm;
pub mod stall;
pub mod start;
pub mod sysfs_mutex;

use crate::locks::LockInfo;
use crate::locks::futex::FutexCounts;

/// Algorithms whose every futex call goes through [`crate::locks::futex`]'s counters.
const FUTEX_COUNTED: &[&str] = &["futex", "spin_park"];

/// The futex counts of a lock run, or why there are none: counts only where the payload itself
/// issues the system calls, never a 0 that looks like a measurement. Read the counters after
/// the run (they are process-wide; reset them before it with `futex::reset_counts`).
pub(crate) fn futex_counts(info: &LockInfo) -> (Option<FutexCounts>, Option<String>) {
    if FUTEX_COUNTED.contains(&info.name) {
        (Some(crate::locks::futex::counts()), None)
    } else if info.name == "pthread" {
        let why = "glibc's pthread_mutex issues its own futex calls, which the payload cannot count";
        (None, Some(why.into()))
    } else if info.uses_futex {
        (
            None,
            Some(format!(
                "'{}' does not issue its futex calls through the payload's counters",
                info.name
            )),
        )
    } else {
        (
            None,
            Some(format!(
                "'{}' never sleeps in the kernel: it makes no futex calls",
                info.name
            )),
        )
    }
}

/// An argument that parsed but cannot be used on this machine (a missing directory or file).
/// Checked when the workload runs, not by the parser, because the host validates scenarios with
/// the same parser on a machine that lacks the guest's paths; `main` maps it to exit status 2.
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// Fails with [`BadInput`] unless `path` is an existing directory.
pub(crate) fn require_dir(what: &str, path: &std::path::Path) -> Result<(), BadInput> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(BadInput(format!(
            "{what} '{}' is not a directory",
            path.display()
        ))),
        Err(e) => Err(BadInput(format!(
            "{what} '{}' is not usable: {e}",
            path.display()
        ))),
    }
}

/// A small per-thread PRNG (xorshift64*): cheap, lock-free, good enough to pick chunks, keys and
/// lock slots. Each worker owns one, so no shared state is added to what is being measured.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose stream depends on `seed` (any value, including 0, is fine).
    pub fn new(seed: u64) -> Self {
        // splitmix64 of the seed, so nearby seeds give unrelated streams and the state is never 0.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Self(if z == 0 { 1 } else { z })
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0), by multiply-shift (no division in the hot loop).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() >> 32) * n) >> 32
    }
}

/// Seconds as f64 from a nanosecond count.
pub(crate) fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// Pins the calling thread to one CPU; false when the kernel refuses (CPU offline, cgroup).
pub(crate) fn pin_to_cpu(cpu: usize) -> bool {
    // SAFETY: the set is zeroed, CPU_SET stays within its bounds for cpu < CPU_SETSIZE, and
    // sched_setaffinity only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= libc::CPU_SETSIZE as usize {
            return false;
        }
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_below_stays_in_range_and_covers_it() {
        let mut r = Rng::new(0);
        let mut seen = [false; 10];
        for _ in 0..10_000 {
            let v = r.below(10) as usize;
            assert!(v < 10);
            seen[v] = true;
        }
        assert!(seen.iter().all(|&s| s));
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    }

    #[test]
    fn futex_counts_are_reported_only_where_the_payload_counts_them() {
        for info in crate::locks::ALGOS {
            let (counts, why) = futex_counts(info);
            assert!(counts.is_some() != why.is_some(), "{}", info.name);
            assert_eq!(
                counts.is_some(),
                FUTEX_COUNTED.contains(&info.name),
                "{}",
                info.name
            );
        }
        let pthread = crate::locks::ALGOS.iter().find(|i| i.name == "pthread").unwrap();
        assert!(futex_counts(pthread).1.unwrap().contains("glibc"));
    }
}
