//! Starting worker threads at one instant, with the clock stamped before any of them runs.
//!
//! A start barrier that the main thread joins (`std::sync::Barrier` with workers + 1) releases
//! everyone at once and only then lets the main thread read the clock: with more threads than
//! CPUs the main thread is preempted behind its own workers, stamps the start late, and the
//! run reports a time its CPU time makes impossible. Here the main thread waits until every
//! worker is parked, stamps the start while still holding the gate's mutex, and only then opens
//! it — no worker can leave [`StartGate::arrive`] before the stamp (as sysbench's barrier, whose
//! callback starts the timer under the barrier's mutex).

use std::cell::Cell;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The next start gate's opening time, set by a sliced run for each slice (so that the
/// slices of every guest open their windows at one instant whatever each guest's set-up
/// took), and what that gate did with it.
#[derive(Debug, Clone, Copy)]
pub struct Opening {
    /// The gate opens no earlier than this.
    pub at: Instant,
    /// When every worker had arrived at the gate (the set-up's end).
    pub ready: Option<Instant>,
    /// When the gate opened: `at`, or later where the set-up overran it.
    pub opened: Option<Instant>,
}

thread_local! {
    // Per thread: the gate is opened by the thread that runs the workload (the one the sliced
    // run calls it on), and tests running side by side keep their schedules apart.
    static OPENING: Cell<Option<Opening>> = const { Cell::new(None) };
}

/// The next start gate this thread opens opens no earlier than `at` (the first
/// [`StartGate::open`] after this call; a workload's later gates — its stop gate — are not
/// held).
pub fn schedule_next_opening(at: Instant) {
    OPENING.set(Some(Opening {
        at,
        ready: None,
        opened: None,
    }));
}

/// When the next start gate this thread opens is scheduled to open, if it is (not cleared):
/// for workers to make their timing-sensitive preparation up to it.
pub fn scheduled_opening() -> Option<Instant> {
    OPENING.get().filter(|o| o.opened.is_none()).map(|o| o.at)
}

/// The scheduled opening set last on this thread, with what the gate did with it (cleared).
pub fn take_opening() -> Option<Opening> {
    OPENING.take()
}

/// Waits for a scheduled opening not yet used, and notes it used.
fn keep_schedule() {
    if let Some(mut o) = OPENING.get().filter(|o| o.opened.is_none()) {
        let now = Instant::now();
        o.ready = Some(now);
        if let Some(wait) = o.at.checked_duration_since(now) {
            std::thread::sleep(wait);
        }
        o.opened = Some(Instant::now());
        OPENING.set(Some(o));
    }
}

#[derive(Debug, Default)]
struct State {
    arrived: usize,
    open: bool,
}

#[derive(Debug)]
pub struct StartGate {
    workers: usize,
    state: Mutex<State>,
    changed: Condvar,
}

impl StartGate {
    /// A gate for `workers` threads.
    pub fn new(workers: usize) -> Self {
        Self {
            workers,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        }
    }

    // A poisoned gate only means a worker panicked while parked; the state is still valid.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Worker: announces that its setup is done and blocks until the gate opens.
    pub fn arrive(&self) {
        let mut s = self.lock();
        s.arrived += 1;
        self.changed.notify_all();
        while !s.open {
            s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Main thread: waits until every worker has arrived, stamps the start and releases them.
    /// The returned instant precedes the first instruction any worker runs after the gate.
    pub fn open(&self) -> Instant {
        self.open_stamped(Instant::now)
    }

    /// [`Self::open`] with the start stamped by `stamp` (run while no worker can leave the gate,
    /// so every clock it reads is read at the same point of the run).
    pub fn open_stamped<T>(&self, stamp: impl FnOnce() -> T) -> T {
        let mut s = self.lock();
        while s.arrived < self.workers {
            s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        // Every worker is parked: holding the gate's mutex while waiting lets none out early.
        keep_schedule();
        crate::probe::window_open();
        let start = stamp();
        s.open = true;
        self.changed.notify_all();
        start
    }
}

/// The same gate for workers that may be forked processes: a "ready" pipe every worker writes a
/// byte into, and a "wake" pipe they all poll. The coordinator reads one ready byte per worker,
/// stamps the start, then writes a single wake byte that nobody reads, so every poller sees it
/// (hackbench's and dbench's scheme). Create it before forking.
#[derive(Debug)]
pub struct PipeGate {
    ready_read: i32,
    /// -1 once the coordinator closed its copy (see [`Self::close_ready_writer`]).
    ready_write: AtomicI32,
    wake: [i32; 2],
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

impl PipeGate {
    pub fn new() -> anyhow::Result<Self> {
        let mut ready = [-1i32; 2];
        let mut wake = [-1i32; 2];
        // SAFETY: each array has room for the two descriptors pipe2 writes.
        let ok = unsafe {
            libc::pipe2(ready.as_mut_ptr(), libc::O_CLOEXEC) == 0
                && libc::pipe2(wake.as_mut_ptr(), libc::O_CLOEXEC) == 0
        };
        let gate = Self {
            ready_read: ready[0],
            ready_write: AtomicI32::new(ready[1]),
            wake,
        };
        anyhow::ensure!(
            ok,
            "creating the start pipes failed: {}",
            std::io::Error::last_os_error()
        );
        Ok(gate)
    }

    /// Worker: announces that its setup is done and blocks until the gate opens.
    pub fn arrive(&self) -> std::io::Result<()> {
        let b = [b'r'];
        // SAFETY: one byte from a valid buffer into our pipe.
        if unsafe { libc::write(self.ready_write.load(Ordering::Relaxed), b.as_ptr().cast(), 1) } != 1 {
            return Err(std::io::Error::last_os_error());
        }
        wait_readable(self.wake[0], None).map(|_| ())
    }

    /// Coordinator: waits (at most `timeout`) until `workers` have arrived, stamps the start and
    /// releases them all.
    pub fn open(&self, workers: usize, timeout: Duration) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + timeout;
        let mut b = [0u8; 1];
        for arrived in 0..workers {
            let left = deadline.saturating_duration_since(Instant::now());
            anyhow::ensure!(
                wait_readable(self.ready_read, Some(left))?,
                "only {arrived} of {workers} workers got ready within {timeout:?}"
            );
            // SAFETY: one byte into a valid buffer.
            let r = unsafe { libc::read(self.ready_read, b.as_mut_ptr().cast(), 1) };
            anyhow::ensure!(
                r == 1,
                "only {arrived} of {workers} workers got ready (a worker died)"
            );
        }
        crate::probe::window_open();
        let start = Instant::now();
        // SAFETY: one byte from a valid buffer.
        let w = unsafe { libc::write(self.wake[1], b.as_ptr().cast(), 1) };
        anyhow::ensure!(
            w == 1,
            "waking the workers failed: {}",
            std::io::Error::last_os_error()
        );
        Ok(start)
    }

    /// Coordinator, after forking every worker: drops its own copy of the ready pipe's write
    /// end, so that if every worker dies before arriving, [`Self::open`] sees end of file.
    pub fn close_ready_writer(&self) {
        let fd = self.ready_write.swap(-1, Ordering::Relaxed);
        if fd >= 0 {
            // SAFETY: closing a descriptor we own, once (the swap hands it out once).
            unsafe { libc::close(fd) };
        }
    }
}

/// Polls `fd` for input; Ok(false) when `timeout` passed first (None: wait for ever).
fn wait_readable(fd: i32, timeout: Option<Duration>) -> std::io::Result<bool> {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let ms = match deadline {
            None => -1,
            Some(d) => d
                .saturating_duration_since(Instant::now())
                .as_millis()
                .min(i32::MAX as u128) as i32,
        };
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        match r {
            1 => return Ok(true),
            0 => return Ok(false),
            _ if errno() == libc::EINTR => continue,
            _ => return Err(std::io::Error::last_os_error()),
        }
    }
}

impl Drop for PipeGate {
    fn drop(&mut self) {
        let ready_write = self.ready_write.load(Ordering::Relaxed);
        for fd in [self.ready_read, ready_write].into_iter().chain(self.wake) {
            if fd >= 0 {
                // SAFETY: closing descriptors we own.
                unsafe { libc::close(fd) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn no_worker_passes_before_the_start_stamp() {
        let n = 8;
        let gate = Arc::new(StartGate::new(n));
        let workers: Vec<_> = (0..n)
            .map(|_| {
                let g = Arc::clone(&gate);
                std::thread::spawn(move || {
                    g.arrive();
                    Instant::now()
                })
            })
            .collect();
        let start = gate.open();
        for w in workers {
            assert!(w.join().unwrap() >= start);
        }
    }

    #[test]
    fn a_scheduled_opening_holds_the_first_gate_only_and_says_when_it_opened() {
        let gate = StartGate::new(0);
        let at = Instant::now() + Duration::from_millis(30);
        schedule_next_opening(at);
        assert!(gate.open() >= at);
        let later = StartGate::new(0);
        let again = Instant::now();
        // A second gate (the workload's stop gate) is not held.
        assert!(later.open().duration_since(again) < Duration::from_millis(25));
        let o = take_opening().unwrap();
        assert!(o.ready.unwrap() < at && o.opened.unwrap() >= at, "{o:?}");
        assert!(take_opening().is_none());
        // A gate whose set-up overran its time opens at once, and says so.
        schedule_next_opening(Instant::now());
        std::thread::sleep(Duration::from_millis(5));
        gate.open();
        let o = take_opening().unwrap();
        assert!(o.opened.unwrap().duration_since(o.at) >= Duration::from_millis(5));
    }

    #[test]
    fn pipe_gate_releases_after_the_stamp_and_times_out_on_missing_workers() {
        let gate = Arc::new(PipeGate::new().unwrap());
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let g = Arc::clone(&gate);
                std::thread::spawn(move || {
                    g.arrive().unwrap();
                    Instant::now()
                })
            })
            .collect();
        let start = gate.open(3, Duration::from_secs(30)).unwrap();
        for w in workers {
            assert!(w.join().unwrap() >= start);
        }
        let lonely = PipeGate::new().unwrap();
        let e = lonely.open(1, Duration::from_millis(50)).unwrap_err();
        assert!(e.to_string().contains("0 of 1"), "{e}");
    }
}
