//! The calling thread's own CPU time, for a test that must burn a known amount of it whatever
//! else the host runs meanwhile (a wall-clock spin gets less CPU on a loaded host).

/// Seconds of CPU this thread has run (`CLOCK_THREAD_CPUTIME_ID`).
pub(crate) fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}
