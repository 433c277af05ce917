//! `futexlock`: the adaptive-futex seed's test — a futex mutex that sleeps at once vs one that
//! spins first, each thread looping `lock; spin hold; unlock; spin gap`.
//!
//! The loop and the lines it reports are the seed's: T threads each do `iterations` of lock,
//! `hold` busy-loop iterations (default 1000), unlock, `gap` busy-loop iterations (default
//! 10 000); the result is Kiter/s (thousand loop iterations per second over all threads,
//! `kiter_per_sec`, higher is better), then lock calls, lock syscalls (%), unlock calls,
//! unlock syscalls (%).
//!
//! The lock is a futex mutex with states 0 (free), 1 (locked), 2 (locked, maybe sleepers) as
//! glibc's `lll_lock` (Drepper's "mutex 3"): take 0→1 with a CAS; else swap in 2 and, while the
//! old value was not 0, FUTEX_WAIT for the value 2; unlock swaps in 0 and, if the old value was
//! 2, FUTEX_WAKEs one sleeper.
//!
//! - `--mode plain`: no spinning; the first failed CAS goes to the swap-and-sleep path.
//! - `--mode adaptive`: before sleeping, a waiter polls the lock word up to [`SPINS`] times (a
//!   pause between polls) and takes it with a CAS when it reads 0; it stops early when it reads
//!   2 (others already sleep, and it would only overtake them). This is user-space
//!   spin-then-park with a fixed budget, as glibc's `PTHREAD_MUTEX_ADAPTIVE_NP` or the
//!   `spin_park` lock. It is *not* the kernel's adaptive futex of the seed (FUTEX_LOCK with
//!   in-kernel spinning): a user-space waiter cannot see whether the owner is running, so it
//!   spins its budget whether the owner is on a CPU or a preempted vCPU — which is what
//!   overcommit exposes.
//!
//! What is counted, per thread, with no shared counter added to the loop:
//! - **lock calls** — every lock call;
//! - **lock syscalls** — lock calls that entered the kernel: those that made at least one
//!   FUTEX_WAIT system call, counted once per lock call however many waits it took, and
//!   including waits that returned EAGAIN at once (the word was no longer 2): each is a
//!   system call, which is the cost spinning is meant to avoid. Their breakdown is reported too:
//!   `futex_waits` (FUTEX_WAIT calls), `futex_wait_eagain` (of those, returned EAGAIN without
//!   sleeping) and `lock_sleeps` (lock calls in which a FUTEX_WAIT actually slept and was woken);
//! - **unlock calls** — every unlock call; **unlock syscalls** — unlock calls that issued a
//!   FUTEX_WAKE (at most one each); `futex_wakes_woke` of those woke a sleeper.
//!
//! The lock, its counter and an owner-identity cell ([`OwnerCheck`]) are checked after every
//! run; a violation fails it.

use std::cell::UnsafeCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Instant;

use clap::{Args as ClapArgs, ValueEnum};
use serde::{Deserialize, Serialize};

use super::start::StartGate;
use crate::busywork::spin_iters;
use crate::env::Env;
use crate::locks::owner::{OwnerCheck, OwnerId};
use crate::metrics::{Ctxsw, Fairness};
use crate::report::Report;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Futex mutex that sleeps as soon as the lock is taken.
    Plain,
    /// Poll the lock word up to a fixed budget, then sleep (user-space spin-then-park).
    Adaptive,
}

/// Polls of the lock word before an adaptive waiter sleeps.
pub const SPINS: u32 = 100;

#[derive(Debug, Clone, ClapArgs, Serialize, Deserialize)]
pub struct Args {
    /// Worker threads.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub threads: u32,
    /// Lock/unlock iterations per thread.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub iterations: u64,
    /// Busy-loop iterations inside the critical section (the seed's 1000).
    #[arg(long, default_value_t = 1000)]
    pub hold: u64,
    /// Busy-loop iterations between unlock and the next lock (the seed's 10 000).
    #[arg(long, default_value_t = 10_000)]
    pub gap: u64,
    /// plain (sleep at once) or adaptive (poll a fixed budget, then sleep).
    #[arg(long, value_enum, default_value_t = Mode::Adaptive)]
    pub mode: Mode,
}

/// One thread's (or all threads') lock and unlock calls and the system calls they made.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CallCounts {
    pub lock_calls: u64,
    /// Lock calls that made at least one FUTEX_WAIT system call.
    pub lock_syscalls: u64,
    /// Lock calls in which a FUTEX_WAIT slept until woken (returned 0).
    pub lock_sleeps: u64,
    /// FUTEX_WAIT system calls.
    pub futex_waits: u64,
    /// FUTEX_WAIT calls that returned EAGAIN at once (the word had changed).
    pub futex_wait_eagain: u64,
    pub unlock_calls: u64,
    /// Unlock calls that issued a FUTEX_WAKE.
    pub unlock_syscalls: u64,
    /// FUTEX_WAKE calls that woke a sleeper.
    pub futex_wakes_woke: u64,
}

impl CallCounts {
    fn add(self, o: Self) -> Self {
        Self {
            lock_calls: self.lock_calls + o.lock_calls,
            lock_syscalls: self.lock_syscalls + o.lock_syscalls,
            lock_sleeps: self.lock_sleeps + o.lock_sleeps,
            futex_waits: self.futex_waits + o.futex_waits,
            futex_wait_eagain: self.futex_wait_eagain + o.futex_wait_eagain,
            unlock_calls: self.unlock_calls + o.unlock_calls,
            unlock_syscalls: self.unlock_syscalls + o.unlock_syscalls,
            futex_wakes_woke: self.futex_wakes_woke + o.futex_wakes_woke,
        }
    }
}

/// The `futexlock` workload's fields in the report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FutexlockResult {
    pub mode: Mode,
    /// Polls before sleeping (0 in plain mode).
    pub spins: u32,
    pub threads: u32,
    pub iterations: u64,
    pub hold: u64,
    pub gap: u64,
    pub time_s: f64,
    pub iterations_total: u64,
    pub kiter_per_sec: f64,
    pub calls: CallCounts,
    /// lock syscalls / lock calls × 100.
    pub lock_syscall_pct: f64,
    /// unlock syscalls / unlock calls × 100.
    pub unlock_syscall_pct: f64,
    /// The seed's output lines.
    pub seed_lines: Vec<String>,
    pub thread_time_s: Vec<f64>,
    pub time_fairness: Fairness,
    /// Per thread: iterations done when the first thread finished.
    pub progress_at_first_finish: Vec<u64>,
    pub progress_fairness: Fairness,
    /// Non-atomic counter under the lock, must equal iterations_total.
    pub counted: u64,
    /// Owner-identity check failures (must be 0).
    pub owner_violations: u64,
    pub threads_ctxsw: Vec<Ctxsw>,
}

const FREE: u32 = 0;
const LOCKED: u32 = 1;
const SLEEPERS: u32 = 2;

/// The futex mutex described in the module comment, counting its own calls.
struct CountedFutexLock {
    state: AtomicU32,
    spins: u32,
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

impl CountedFutexLock {
    // Orderings: every transition that takes the lock (CAS 0→1, swap returning 0) is Acquire
    // and pairs with the Release swap in `unlock`; polls only look (Relaxed).
    fn lock(&self, c: &mut CallCounts) {
        c.lock_calls += 1;
        let take = || {
            self.state
                .compare_exchange(FREE, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        };
        if take() {
            return;
        }
        for _ in 0..self.spins {
            match self.state.load(Ordering::Relaxed) {
                FREE if take() => return,
                SLEEPERS => break,
                _ => std::hint::spin_loop(),
            }
        }
        // Swapping in 2 both takes a free lock and tells the owner to wake someone; we keep it
        // as 2, never 1, since other sleepers may remain.
        let (mut entered, mut slept) = (false, false);
        while self.state.swap(SLEEPERS, Ordering::Acquire) != FREE {
            entered = true;
            c.futex_waits += 1;
            // SAFETY: the word is a live, aligned u32; no timeout.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.state.as_ptr(),
                    libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                    SLEEPERS,
                    std::ptr::null::<libc::timespec>(),
                )
            };
            if r == 0 {
                slept = true;
            } else if errno() == libc::EAGAIN {
                c.futex_wait_eagain += 1;
            }
        }
        c.lock_syscalls += entered as u64;
        c.lock_sleeps += slept as u64;
    }

    fn unlock(&self, c: &mut CallCounts) {
        c.unlock_calls += 1;
        if self.state.swap(FREE, Ordering::Release) == SLEEPERS {
            c.unlock_syscalls += 1;
            // SAFETY: the word is a live, aligned u32.
            let woke = unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.state.as_ptr(),
                    libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                    1,
                )
            };
            c.futex_wakes_woke += (woke > 0) as u64;
        }
    }
}

#[repr(align(128))]
struct Padded<T>(T);

/// What the lock protects, on one line: the owner cell and the counter.
struct Protected {
    owner: OwnerCheck,
    counter: UnsafeCell<u64>,
}

struct Shared {
    lock: Padded<CountedFutexLock>,
    protected: Padded<Protected>,
    first_done: Padded<AtomicBool>,
}

// SAFETY: `protected.counter` is only touched while `lock` is held.
unsafe impl Sync for Shared {}

struct Outcome {
    at_first_finish: u64,
    calls: CallCounts,
    ctxsw: Ctxsw,
    end: Instant,
    /// Thread CPU time from the gate to `end`.
    cpu_ns: u64,
}

pub fn run(args: &Args) -> anyhow::Result<Report> {
    let spins = match args.mode {
        Mode::Plain => 0,
        Mode::Adaptive => SPINS,
    };
    let shared = Arc::new(Shared {
        lock: Padded(CountedFutexLock {
            state: AtomicU32::new(FREE),
            spins,
        }),
        protected: Padded(Protected {
            owner: OwnerCheck::new(),
            counter: UnsafeCell::new(0),
        }),
        first_done: Padded(AtomicBool::new(false)),
    });
    let gate = Arc::new(StartGate::new(args.threads as usize));
    let (iterations, hold, gap) = (args.iterations, args.hold, args.gap);
    let workers: Vec<_> = (0..args.threads)
        .map(|t| {
            let (shared, gate) = (Arc::clone(&shared), Arc::clone(&gate));
            std::thread::Builder::new()
                .name("futexlock".into())
                .spawn(move || {
                    gate.arrive();
                    worker(&shared, t as OwnerId + 1, iterations, hold, gap)
                })
        })
        .collect::<Result<_, _>>()?;
    let start = gate.open();
    let outcomes: Vec<Outcome> = workers
        .into_iter()
        .map(|h| {
            h.join()
                .map_err(|_| anyhow::anyhow!("a futexlock worker panicked"))
        })
        .collect::<anyhow::Result<_>>()?;
    let thread_ns: Vec<u64> = outcomes
        .iter()
        .map(|o| o.end.duration_since(start).as_nanos() as u64)
        .collect();
    let elapsed_ns = thread_ns.iter().copied().max().unwrap_or(0);
    let total = args.threads as u64 * args.iterations;
    // SAFETY: all workers joined.
    let counted = unsafe { *shared.protected.0.counter.get() };
    let calls = outcomes.iter().fold(CallCounts::default(), |a, o| a.add(o.calls));
    let progress: Vec<u64> = outcomes.iter().map(|o| o.at_first_finish).collect();
    let secs = super::secs(elapsed_ns);
    let pct = |n: u64, of: u64| 100.0 * n as f64 / of.max(1) as f64;
    let kiter_per_sec = total as f64 / secs.max(1e-9) / 1000.0;
    let result = FutexlockResult {
        mode: args.mode,
        spins,
        threads: args.threads,
        iterations: args.iterations,
        hold: args.hold,
        gap: args.gap,
        time_s: secs,
        iterations_total: total,
        kiter_per_sec,
        lock_syscall_pct: pct(calls.lock_syscalls, calls.lock_calls),
        unlock_syscall_pct: pct(calls.unlock_syscalls, calls.unlock_calls),
        seed_lines: seed_lines(kiter_per_sec, &calls),
        calls,
        time_fairness: Fairness::of(&thread_ns.iter().map(|&n| n / 1000).collect::<Vec<_>>()),
        thread_time_s: thread_ns.iter().map(|&n| super::secs(n)).collect(),
        progress_fairness: Fairness::of(&progress),
        progress_at_first_finish: progress,
        counted,
        owner_violations: shared.protected.0.owner.violations(),
        threads_ctxsw: outcomes.iter().map(|o| o.ctxsw).collect(),
    };
    let name = format!("futexlock --mode {:?}", args.mode).to_lowercase();
    anyhow::ensure!(
        result.owner_violations == 0,
        "mutual exclusion violated by '{name}': {} owner-identity violations",
        result.owner_violations
    );
    anyhow::ensure!(
        counted == total,
        "mutual exclusion violated by '{name}': counted {counted} != {total}"
    );
    let env = Env::read();
    let window_cpu_ns = outcomes.iter().map(|o| o.cpu_ns).sum();
    let checks = vec![crate::checks::cpu_within_elapsed(
        window_cpu_ns,
        elapsed_ns,
        env.cpus_allowed,
    )];
    Ok(Report::new("futexlock", elapsed_ns, env, metrics_of(&result), &result)?.with_checks(checks))
}

/// The seed's result lines.
fn seed_lines(kiter_per_sec: f64, c: &CallCounts) -> Vec<String> {
    let pct = |n: u64, of: u64| 100.0 * n as f64 / of.max(1) as f64;
    vec![
        format!("Result: {kiter_per_sec:.0} Kiter/s"),
        format!("lock calls:      {}", c.lock_calls),
        format!(
            "lock syscalls:   {} ({:.2}%)",
            c.lock_syscalls,
            pct(c.lock_syscalls, c.lock_calls)
        ),
        format!("unlock calls:    {}", c.unlock_calls),
        format!(
            "unlock syscalls: {} ({:.2}%)",
            c.unlock_syscalls,
            pct(c.unlock_syscalls, c.unlock_calls)
        ),
    ]
}

fn metrics_of(r: &FutexlockResult) -> BTreeMap<String, f64> {
    let c = &r.calls;
    let mut m = BTreeMap::new();
    m.insert("kiter_per_sec".into(), r.kiter_per_sec);
    m.insert("time_s".into(), r.time_s);
    m.insert("lock_calls".into(), c.lock_calls as f64);
    m.insert("lock_syscalls".into(), c.lock_syscalls as f64);
    m.insert("lock_syscall_pct".into(), r.lock_syscall_pct);
    m.insert("unlock_calls".into(), c.unlock_calls as f64);
    m.insert("unlock_syscalls".into(), c.unlock_syscalls as f64);
    m.insert("unlock_syscall_pct".into(), r.unlock_syscall_pct);
    m.insert("lock_sleeps".into(), c.lock_sleeps as f64);
    m.insert("futex_waits".into(), c.futex_waits as f64);
    m.insert("futex_wait_eagain".into(), c.futex_wait_eagain as f64);
    m.insert("futex_wakes".into(), c.unlock_syscalls as f64);
    m.insert("jain".into(), r.progress_fairness.jain);
    m.insert("progress_jain".into(), r.progress_fairness.jain);
    m.insert("time_jain".into(), r.time_fairness.jain);
    // The seed's fairness question, do all threads finish together: the first and the last
    // thread's finish times and their ratio (1 = together).
    let max = r.thread_time_s.iter().cloned().fold(0.0, f64::max);
    let min = r.thread_time_s.iter().cloned().fold(f64::MAX, f64::min);
    m.insert("thread_time_max_s".into(), max);
    m.insert("thread_time_min_s".into(), min);
    if min > 0.0 {
        m.insert("finish_spread".into(), max / min);
    }
    Ctxsw::insert_metrics(&r.threads_ctxsw, &mut m);
    m
}

fn worker(s: &Shared, me: OwnerId, iterations: u64, hold: u64, gap: u64) -> Outcome {
    let mut out = Outcome {
        at_first_finish: iterations,
        calls: CallCounts::default(),
        ctxsw: Ctxsw::default(),
        end: Instant::now(),
        cpu_ns: 0,
    };
    let cpu0 = crate::clock::thread_cpu_ns();
    let (lock, p) = (&s.lock.0, &s.protected.0);
    let mut seen = false;
    let before = Ctxsw::this_thread();
    for i in 0..iterations {
        lock.lock(&mut out.calls);
        p.owner.enter(me);
        // SAFETY: we hold the lock.
        unsafe {
            let c = p.counter.get();
            std::ptr::write_volatile(c, std::ptr::read_volatile(c) + 1);
        }
        spin_iters(hold);
        p.owner.leave(me);
        lock.unlock(&mut out.calls);
        spin_iters(gap);
        if !seen && s.first_done.0.load(Ordering::Relaxed) {
            seen = true;
            out.at_first_finish = i + 1;
        }
    }
    out.end = Instant::now();
    out.cpu_ns = crate::clock::thread_cpu_ns().saturating_sub(cpu0);
    s.first_done.0.store(true, Ordering::Relaxed);
    out.ctxsw = Ctxsw::this_thread().since(before);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(mode: Mode, threads: u32) -> Args {
        Args {
            threads,
            iterations: 20_000,
            hold: 50,
            gap: 50,
            mode,
        }
    }

    #[test]
    fn both_modes_count_every_iteration_and_call() {
        for mode in [Mode::Plain, Mode::Adaptive] {
            let report = run(&args(mode, 3)).unwrap();
            let r: FutexlockResult = report.detail_as().unwrap();
            assert_eq!(r.iterations_total, 60_000);
            assert_eq!(r.counted, 60_000);
            assert_eq!(r.owner_violations, 0);
            let c = r.calls;
            assert_eq!((c.lock_calls, c.unlock_calls), (60_000, 60_000));
            // A lock call enters the kernel at most once in these counts, and only by waiting.
            assert!(c.lock_syscalls <= c.lock_calls && c.lock_syscalls <= c.futex_waits);
            assert!(c.lock_sleeps <= c.lock_syscalls && c.futex_wait_eagain <= c.futex_waits);
            assert!(c.futex_wakes_woke <= c.unlock_syscalls);
            assert!(r.kiter_per_sec > 0.0);
            assert_eq!(r.thread_time_s.len(), 3);
            let (first, last) = (
                report.metrics["thread_time_min_s"],
                report.metrics["thread_time_max_s"],
            );
            assert!(0.0 < first && first <= last && last <= r.time_s + 1e-9);
            assert_eq!(report.metrics["finish_spread"], last / first);
            assert!(r.progress_at_first_finish.contains(&20_000));
            assert_eq!(report.metrics["kiter_per_sec"], r.kiter_per_sec);
            assert_eq!(report.metrics["lock_syscalls"], c.lock_syscalls as f64);
            assert_eq!(r.seed_lines.len(), 5);
            assert!(r.seed_lines[2].starts_with("lock syscalls:"));
            assert_eq!(r.spins, if mode == Mode::Plain { 0 } else { SPINS });
        }
    }

    #[test]
    fn one_thread_never_enters_the_kernel() {
        let r: FutexlockResult = run(&args(Mode::Plain, 1)).unwrap().detail_as().unwrap();
        assert_eq!(r.calls.lock_syscalls + r.calls.unlock_syscalls, 0);
        assert_eq!(r.lock_syscall_pct, 0.0);
    }

    #[test]
    fn a_waiter_on_a_held_lock_sleeps_once_and_is_woken() {
        let lock = Arc::new(CountedFutexLock {
            state: AtomicU32::new(FREE),
            spins: 0,
        });
        let mut mine = CallCounts::default();
        lock.lock(&mut mine);
        let l = Arc::clone(&lock);
        let waiter = std::thread::spawn(move || {
            let mut c = CallCounts::default();
            l.lock(&mut c);
            l.unlock(&mut c);
            c
        });
        // Wait until the waiter has marked the lock as having sleepers, then release it.
        while lock.state.load(Ordering::Relaxed) != SLEEPERS {
            std::thread::yield_now();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        lock.unlock(&mut mine);
        let theirs = waiter.join().unwrap();
        assert_eq!(mine.unlock_syscalls, 1);
        assert_eq!(theirs.lock_calls, 1);
        assert_eq!(theirs.lock_syscalls, 1, "{theirs:?}");
        assert!(theirs.futex_waits >= 1);
        // It took the lock as 2 (it cannot know whether others sleep), so its unlock wakes.
        assert_eq!(theirs.unlock_syscalls, 1);
    }
}
