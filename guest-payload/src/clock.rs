//! The two clocks every workload reads: the calling thread's CPU time and CLOCK_MONOTONIC.

/// The CPU clock of the calling thread, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    // SAFETY: clock_gettime writes one timespec; CLOCK_THREAD_CPUTIME_ID always exists on Linux.
    unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process of a run (forked workers'
/// windows are compared with each other and with the coordinator's). Async-signal-safe.
pub fn monotonic_ns() -> u64 {
    // SAFETY: clock_gettime writes one timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_cpu_clock_advances_with_work() {
        let t0 = thread_cpu_ns();
        crate::busywork::spin_iters(5_000_000);
        assert!(thread_cpu_ns() > t0);
        assert!(monotonic_ns() > 0);
    }
}
