//! Oversubscription stress with injected preemption, for every registered algorithm.
//!
//! 8 threads per CPU share a few locks (4 by default, so queues are sometimes long and
//! sometimes a single waiter), each round taking one lock or two nested ones, by lock or by
//! try_lock. The stall hook (`sync::stall`) runs before every atomic step and every spin of the
//! lock code and stops the thread now and then, as the host stops a preempted vCPU:
//! - stores and read-modify-writes stall one time in 16: a yield (70%), a sleep of up to 100 µs
//!   (25%) or a lost time slice of 0.5-2 ms (5%);
//! - loads and spin rounds (mostly spin-waits) yield one time in 16 and stall as above one time
//!   in 1024;
//! - one round in 4 is a "slow vCPU" round, in which every store and read-modify-write stalls
//!   20-500 µs (preemption is bursty, and some interleavings need one thread stopped twice in a
//!   row while others get through whole hand-overs);
//! - one critical section in 4 is stalled as above (the owner preempted while holding), and
//!   threads rest outside the locks after half their rounds (up to 300 µs), so the number of
//!   contenders comes and goes.
//!
//! Every critical section is owner-checked ([`OwnerCheck`]) and bumps a counter with a separate
//! load and store; the run fails at the first owner violation, on a lost update, when a worker
//! dies (say, decoding a corrupted lock word), or when a lock is wedged (nobody acquired it for
//! 3 s, or a thread never came back).
//!
//! The per-lock tests run 2 s each; `OCRIG_STRESS_MS`, `OCRIG_STRESS_SEED`, `OCRIG_STRESS_LOCKS`,
//! `OCRIG_STRESS_STALL`, `OCRIG_STRESS_SLOW`, `OCRIG_STRESS_HOLD`, `OCRIG_STRESS_REST` and
//! `OCRIG_STRESS_REST_US` override the figures above. `stress_every_lock_long` (ignored) runs
//! every lock (or those named in `OCRIG_STRESS_ALGOS`) for 30 s and prints one line per lock.
//! pthread has no stall points inside (glibc), only in its critical sections.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lock_api::RawMutex;

use super::owner::OwnerCheck;
use super::sync::stall;
use super::{LockInfo, LockVisitor, with_algo};

#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub threads: usize,
    /// Locks the threads spread over (each round picks one, or two nested).
    pub locks: usize,
    pub duration: Duration,
    /// One step in this many (every atomic step and every spin is one) stalls.
    pub stall_one_in: u64,
    /// After one round in this many a thread rests outside the locks (up to `rest_max_us`),
    /// so the number of contenders varies: some bugs need a short queue (a queue head that is
    /// also the tail, a newcomer that finds the lock held but uncontended).
    pub rest_one_in: u64,
    pub rest_max_us: u64,
    /// One round in this many is a "slow vCPU" round: every store and read-modify-write of
    /// the lock code stalls, for 20-500 µs. Real preemption is bursty (a vCPU that lost its
    /// CPU soon loses it again), and some bugs need one thread stopped at two steps in a row
    /// while the others get through whole hand-overs.
    pub slow_one_in: u64,
    /// One critical section in this many is stalled (the owner preempted while holding).
    pub hold_stall_one_in: u64,
    pub seed: u64,
    /// A lock nobody acquired for this long, or a thread not back this long after the end,
    /// means a wedged lock.
    pub wedge_after: Duration,
}

impl Config {
    /// The figures in the module comment, `ms` long, each overridable from the environment.
    pub fn standard(ms: u64) -> Self {
        let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
        Config {
            threads: 8 * crate::env::online_cpus().max(1),
            locks: env("OCRIG_STRESS_LOCKS").map_or(4, |n| n.max(1) as usize),
            duration: Duration::from_millis(env("OCRIG_STRESS_MS").unwrap_or(ms)),
            stall_one_in: env("OCRIG_STRESS_STALL").unwrap_or(16),
            rest_one_in: env("OCRIG_STRESS_REST").unwrap_or(2),
            rest_max_us: env("OCRIG_STRESS_REST_US").unwrap_or(300),
            slow_one_in: env("OCRIG_STRESS_SLOW").unwrap_or(4),
            hold_stall_one_in: env("OCRIG_STRESS_HOLD").unwrap_or(4),
            seed: env("OCRIG_STRESS_SEED").unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            }),
            wedge_after: Duration::from_secs(3),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Outcome {
    pub algo: &'static str,
    pub config: Config,
    /// Critical sections completed (of A and of B).
    pub rounds: u64,
    pub stalls: u64,
    pub elapsed: Duration,
    pub violations: u64,
    pub lost_updates: u64,
    pub wedged: bool,
    /// A worker panicked (say, decoding a corrupted lock word).
    pub died: bool,
    /// Time from the start to the first violation or to the last progress before a wedge,
    /// and the rounds done by then.
    pub first_failure: Option<(Duration, u64)>,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.violations == 0 && self.lost_updates == 0 && !self.wedged && !self.died
    }

    pub fn line(&self) -> String {
        let failure = match self.first_failure {
            Some((t, r)) => format!(", first failure after {t:.2?} and {r} rounds"),
            None => String::new(),
        };
        format!(
            "{:<10} {} threads on {} locks, 1 stall in {} steps and {} holds, slow rounds 1 in {}, rest (< {} µs) after 1 \
             round in {}, seed {}: \
             {} rounds and {} stalls in {:.2?}; {} owner violations, {} lost updates, wedged: \
             {}, worker died: {}{failure}",
            self.algo,
            self.config.threads,
            self.config.locks,
            self.config.stall_one_in,
            self.config.hold_stall_one_in,
            self.config.slow_one_in,
            self.config.rest_max_us,
            self.config.rest_one_in,
            self.config.seed,
            self.rounds,
            self.stalls,
            self.elapsed,
            self.violations,
            self.lost_updates,
            self.wedged,
            self.died,
        )
    }
}

/// xorshift64*: small, fast, good enough to pick stall points.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

thread_local! {
    /// Whether this worker's current round is a slow-vCPU round (see [`Config::slow_one_in`]).
    static SLOW: Cell<bool> = const { Cell::new(false) };
}

/// Stops this thread as a preempted vCPU would be stopped, one time in `one_in`: a yield, a
/// short sleep, or a lost time slice.
fn maybe_stall(rng: &mut Rng, one_in: u64, stalls: &AtomicU64) {
    if rng.below(one_in) != 0 {
        return;
    }
    stalls.fetch_add(1, Ordering::Relaxed);
    match rng.below(100) {
        0..70 => std::thread::yield_now(),
        70..95 => std::thread::sleep(Duration::from_micros(1 + rng.below(100))),
        _ => std::thread::sleep(Duration::from_micros(500 + rng.below(1500))),
    }
}

/// The hook: stores and read-modify-writes (the steps that act on what was read before) stall
/// one time in `one_in`, or always in a slow round. Loads and spin rounds — mostly spin-waits, which are many, and a
/// waiter that slept on most of them would never be there to take a hand-over — yield one time
/// in `one_in` and stall like the others one time in `64 * one_in`.
fn stall_step(step: stall::Step, rng: &mut Rng, one_in: u64, stalls: &AtomicU64) {
    let acting = !matches!(step, stall::Step::Spin | stall::Step::Load);
    if acting && SLOW.with(Cell::get) {
        stalls.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(Duration::from_micros(20 + rng.below(480)));
    } else if acting {
        maybe_stall(rng, one_in, stalls);
    } else if rng.below(one_in) == 0 {
        std::thread::yield_now();
    } else {
        maybe_stall(rng, 64 * one_in, stalls);
    }
}

struct Guarded<R> {
    lock: R,
    owner: OwnerCheck,
    /// Bumped with a separate load and store, not an atomic add, so overlapping owners lose
    /// updates; atomic (Relaxed) so that a broken lock makes the test fail, not undefined.
    counter: AtomicU64,
}

struct Shared<R> {
    locks: Vec<Guarded<R>>,
    stop: AtomicBool,
    progress: AtomicU64,
    stalls: AtomicU64,
    start: Instant,
    /// Nanoseconds from `start` to the first violation, and rounds then (u64::MAX: none).
    failed_at: AtomicU64,
    rounds_at_failure: AtomicU64,
}

impl<R: RawMutex> Guarded<R> {
    fn new() -> Self {
        Guarded {
            lock: R::INIT,
            owner: OwnerCheck::new(),
            counter: AtomicU64::new(0),
        }
    }

    /// lock(), or a few try_lock()s first (then lock()).
    fn acquire(&self, try_first: bool) {
        if try_first {
            for _ in 0..4 {
                if self.lock.try_lock() {
                    return;
                }
                std::hint::spin_loop();
            }
        }
        self.lock.lock();
    }

    fn enter(&self, me: u64) {
        self.owner.enter(me);
        let v = self.counter.load(Ordering::Relaxed);
        self.counter.store(v + 1, Ordering::Relaxed);
    }

    /// Owner check, then unlock.
    fn leave(&self, me: u64) -> bool {
        let ok = self.owner.leave(me);
        // SAFETY: this thread holds the lock.
        unsafe { self.lock.unlock() };
        ok
    }
}

impl<R> Shared<R> {
    /// Records a failure now (the first one counts) and stops everyone.
    fn fail(&self) {
        self.fail_at(self.start.elapsed(), self.progress.load(Ordering::Relaxed));
    }

    fn fail_at(&self, after: Duration, rounds: u64) {
        if self
            .failed_at
            .compare_exchange(
                u64::MAX,
                after.as_nanos() as u64,
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            self.rounds_at_failure.store(rounds, Ordering::Relaxed);
        }
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One worker: rounds of one lock, or of two nested (taken in index order, released in
/// either order), until told to stop. Returns the critical sections it completed per lock.
fn worker<R: RawMutex>(s: &Shared<R>, me: u64, seed: u64, config: Config) -> Vec<u64> {
    let mut rng = Rng::new(seed);
    let n = s.locks.len() as u64;
    let mut done = vec![0u64; s.locks.len()];
    while !s.stop.load(Ordering::Relaxed) {
        SLOW.with(|slow| slow.set(rng.below(config.slow_one_in) == 0));
        let r = rng.next();
        let first = rng.below(n) as usize;
        // One round in four also takes a second lock inside the first.
        let second =
            (r.is_multiple_of(4) && n > 1).then(|| (first + 1 + rng.below(n - 1) as usize) % n as usize);
        let (outer, inner) = match second {
            Some(b) if b < first => (b, Some(first)),
            Some(b) => (first, Some(b)),
            None => (first, None),
        };
        let mut ok = true;
        for (k, &i) in [Some(outer), inner].iter().flatten().enumerate() {
            s.locks[i].acquire(r & (0x10 << k) != 0);
            s.locks[i].enter(me);
            maybe_stall(&mut rng, config.hold_stall_one_in, &s.stalls);
            done[i] += 1;
        }
        match inner {
            Some(i) if r & 0x40 != 0 => {
                ok &= s.locks[outer].leave(me);
                ok &= s.locks[i].leave(me);
            }
            Some(i) => {
                ok &= s.locks[i].leave(me);
                ok &= s.locks[outer].leave(me);
            }
            None => ok &= s.locks[outer].leave(me),
        }
        s.progress.fetch_add(1, Ordering::Relaxed);
        if !ok || s.locks.iter().any(|l| l.owner.violations() != 0) {
            s.fail();
        }
        if rng.below(config.rest_one_in) == 0 {
            std::thread::sleep(Duration::from_micros(1 + rng.below(config.rest_max_us)));
        }
    }
    done
}

pub fn stress<R: RawMutex + Send + Sync + 'static>(algo: &'static str, config: Config) -> Outcome {
    let s = Arc::new(Shared::<R> {
        locks: (0..config.locks).map(|_| Guarded::new()).collect(),
        stop: AtomicBool::new(false),
        progress: AtomicU64::new(0),
        stalls: AtomicU64::new(0),
        start: Instant::now(),
        failed_at: AtomicU64::new(u64::MAX),
        rounds_at_failure: AtomicU64::new(0),
    });
    let handles: Vec<_> = (0..config.threads as u64)
        .map(|i| {
            let s = Arc::clone(&s);
            let seed = config.seed ^ (i + 1).wrapping_mul(0xd1b5_4a32_d192_ed03);
            std::thread::spawn(move || {
                let mut rng = Rng::new(!seed);
                let hook_shared = Arc::clone(&s);
                stall::with_hook(
                    move |step| stall_step(step, &mut rng, config.stall_one_in, &hook_shared.stalls),
                    || worker(&s, i + 1, seed, config),
                )
            })
        })
        .collect();

    // Watchdog: stop at the deadline or the first failure: an owner violation (seen by the
    // workers), a worker that died (panicked), or a lock nobody acquired for `wedge_after`.
    let deadline = s.start + config.duration;
    let mut seen: Vec<(u64, Instant, u64)> = s.locks.iter().map(|_| (0, s.start, 0)).collect();
    let (mut wedged, mut died) = (false, false);
    while !s.stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        if handles.iter().any(|h| h.is_finished()) {
            died = true;
            s.fail();
            break;
        }
        let progress = s.progress.load(Ordering::Relaxed);
        for (l, (count, at, rounds)) in s.locks.iter().zip(&mut seen) {
            let c = l.counter.load(Ordering::Relaxed);
            if c != *count {
                (*count, *at, *rounds) = (c, Instant::now(), progress);
            } else if at.elapsed() > config.wedge_after {
                wedged = true;
                s.fail_at(*at - s.start, *rounds);
            }
        }
        if wedged {
            break;
        }
    }
    s.stop.store(true, Ordering::Relaxed);
    let elapsed = s.start.elapsed();

    // A thread still stuck in a lock after the others stopped is wedged too; it is left
    // behind (it cannot be stopped), the test fails.
    let back = Instant::now();
    while !handles.iter().all(|h| h.is_finished()) && back.elapsed() < config.wedge_after {
        std::thread::sleep(Duration::from_millis(10));
    }
    wedged |= !handles.iter().all(|h| h.is_finished());
    let mut lost_updates = 0;
    if !wedged {
        let mut done = vec![0u64; s.locks.len()];
        for h in handles {
            match h.join() {
                Ok(counts) => done.iter_mut().zip(counts).for_each(|(d, n)| *d += n),
                Err(_) => died = true,
            }
        }
        if !died {
            lost_updates = (s.locks.iter().zip(&done))
                .map(|(l, &d)| l.counter.load(Ordering::Relaxed).abs_diff(d))
                .sum();
        }
    }
    let failed_at = s.failed_at.load(Ordering::Relaxed);
    Outcome {
        algo,
        config,
        rounds: s.progress.load(Ordering::Relaxed),
        stalls: s.stalls.load(Ordering::Relaxed),
        elapsed,
        violations: s.locks.iter().map(|l| l.owner.violations()).sum(),
        lost_updates,
        wedged,
        died,
        first_failure: (failed_at != u64::MAX).then(|| {
            (
                Duration::from_nanos(failed_at),
                s.rounds_at_failure.load(Ordering::Relaxed),
            )
        }),
    }
}

struct Stress(Config);

impl LockVisitor for Stress {
    type Output = Outcome;
    fn visit<R: RawMutex + Send + Sync + 'static>(self, info: &'static LockInfo) -> Outcome {
        stress::<R>(info.name, self.0)
    }
}

fn stress_named(algo: &str, config: Config) -> Outcome {
    with_algo(algo, Stress(config)).expect("registered algorithm")
}

fn assert_survives(algo: &str) {
    let out = stress_named(algo, Config::standard(2_000));
    println!("{}", out.line());
    assert!(out.ok(), "{}", out.line());
    // A stress that hardly ran proves nothing (and FIFO locks must still make progress).
    assert!(
        out.rounds >= 20 * out.config.threads as u64,
        "too few rounds: {}",
        out.line()
    );
}

macro_rules! stress_tests {
    ($($test:ident => $algo:literal,)*) => {
        $(
            #[test]
            fn $test() {
                assert_survives($algo);
            }
        )*
    };
}

stress_tests! {
    tas_survives_stalls => "tas",
    ttas_survives_stalls => "ttas",
    ticket_survives_stalls => "ticket",
    mcs_survives_stalls => "mcs",
    clh_survives_stalls => "clh",
    qspinlock_survives_stalls => "qspinlock",
    pticket_survives_stalls => "pticket",
    spin_park_survives_stalls => "spin_park",
    futex_survives_stalls => "futex",
    pthread_survives_stalls => "pthread",
}

#[test]
fn every_algorithm_has_a_stress_test() {
    // The list above is written out (one #[test] per lock, so they run and fail separately);
    // this keeps it complete.
    let listed = [
        "tas",
        "ttas",
        "ticket",
        "mcs",
        "clh",
        "qspinlock",
        "pticket",
        "spin_park",
        "futex",
        "pthread",
    ];
    assert_eq!(super::names(), listed);
}

#[test]
fn the_stress_catches_a_lock_that_does_not_exclude() {
    // A "lock" that never excludes: the stress must report owner violations, not pass.
    use super::exclusion_test::NoLock;
    let mut config = Config::standard(300);
    config.duration = Duration::from_millis(300);
    let out = stress::<NoLock>("none", config);
    assert!(out.violations > 0, "{}", out.line());
    assert!(out.first_failure.is_some());
}

#[test]
#[ignore = "long: 30 s per lock (OCRIG_STRESS_MS, OCRIG_STRESS_ALGOS); prints figures per lock"]
fn stress_every_lock_long() {
    let only = std::env::var("OCRIG_STRESS_ALGOS").unwrap_or_default();
    let mut failed = Vec::new();
    for name in super::names() {
        if !only.is_empty() && !only.split(',').any(|a| a == name) {
            continue;
        }
        let out = stress_named(name, Config::standard(30_000));
        println!("{}", out.line());
        if !out.ok() {
            failed.push(name);
        }
    }
    assert!(failed.is_empty(), "failed: {failed:?}");
}
