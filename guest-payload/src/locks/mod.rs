//! Lock algorithms, one small file each, every one a [`lock_api::RawMutex`].
//!
//! Workloads are generic over the lock type; [`with_algo`] turns a name from the command line
//! into a monomorphised call through a [`LockVisitor`], so the hot loop has no dynamic dispatch.

pub mod clh;
pub mod futex;
pub mod futex_mutex;
pub mod mcs;
pub mod owner;
mod pool;
/// How many queue nodes loom models on this thread took from a free list (see pool.rs).
#[cfg(loom)]
pub use pool::loom_reused;
pub mod pthread;
pub mod pticket;
pub mod qspinlock;
pub mod spin_park;
pub(crate) mod sync;
/// The spin-wait waker that loom models start (see `sync.rs`).
#[cfg(loom)]
pub use sync::Waker as LoomWaker;
pub mod tas;
pub mod ticket;
pub mod ttas;

use lock_api::RawMutex;

/// Something generic over a lock type, run for the algorithm a user named.
pub trait LockVisitor {
    type Output;
    fn visit<R: RawMutex + Send + Sync + 'static>(self, info: &'static LockInfo) -> Self::Output;
}

/// One entry of the registry: the name users type and a line on what it is.
#[derive(Debug)]
pub struct LockInfo {
    pub name: &'static str,
    pub blurb: &'static str,
    /// True when the lock may sleep in the kernel (futex), so futex counts are meaningful.
    pub uses_futex: bool,
}

macro_rules! registry {
    ($( $name:literal => $ty:ty, $futex:expr, $blurb:literal; )*) => {
        /// Every algorithm, in the order `ocrig-payload list` prints them.
        pub static ALGOS: &[LockInfo] = &[
            $( LockInfo { name: $name, blurb: $blurb, uses_futex: $futex }, )*
        ];

        /// Runs `visitor` with the lock type called `name`; None for an unknown name.
        pub fn with_algo<V: LockVisitor>(name: &str, visitor: V) -> Option<V::Output> {
            let info = ALGOS.iter().find(|i| i.name == name)?;
            match name {
                $( $name => Some(visitor.visit::<$ty>(info)), )*
                _ => None,
            }
        }
    };
}

registry! {
    "tas" => tas::RawTasLock, false, "test-and-set spinlock: one atomic swap per attempt, unfair";
    "ttas" => ttas::RawTtasLock, false, "test-and-test-and-set spinlock with bounded exponential backoff, unfair";
    "ticket" => ticket::RawTicketLock, false, "ticket spinlock: strict FIFO, stalls behind a preempted next-in-line waiter";
    "mcs" => mcs::RawMcsLock, false, "MCS queue lock: FIFO, local spinning, stalls behind a preempted next-in-line waiter";
    "clh" => clh::RawClhLock, false, "CLH queue lock: FIFO, spins on the predecessor's node, stalls behind a preempted waiter";
    "qspinlock" => qspinlock::RawQspinLock, false, "Linux-style qspinlock: one word, pending bit, MCS queue (no paravirt hooks)";
    "pticket" => pticket::RawPticketLock, false, "preemptable ticket lock: FIFO, but overtakes a waiter stalled past a timeout";
    "spin_park" => spin_park::RawSpinParkLock, true, "spins a bounded while, then sleeps on a futex";
    "futex" => futex_mutex::RawFutexMutex, true, "plain futex mutex (Drepper's mutex 2, states 0/1/2): sleeps at once when contended";
    "pthread" => pthread::RawPthreadMutex, true, "glibc pthread_mutex_t (default type): futex-based, sleeps when contended";
}

/// Names of all algorithms, for error messages and `list`.
pub fn names() -> Vec<&'static str> {
    ALGOS.iter().map(|i| i.name).collect()
}

/// Checks a user-supplied algorithm name (used by clap's value parser).
pub fn parse_algo(name: &str) -> Result<String, String> {
    if ALGOS.iter().any(|i| i.name == name) {
        Ok(name.to_string())
    } else {
        Err(format!(
            "unknown lock algorithm '{name}' (known: {})",
            names().join(", ")
        ))
    }
}

#[cfg(test)]
mod stress;

#[cfg(test)]
pub(crate) mod exclusion_test {
    //! Shared mutual-exclusion checks: more threads than CPUs, an owner-identity check
    //! ([`OwnerCheck`]) around every critical section and a non-atomic counter inside it.
    use super::owner::OwnerCheck;
    use super::*;
    use std::cell::UnsafeCell;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// A "lock" that excludes nothing, for tests that must see the exclusion checks fail.
    pub struct NoLock;
    // SAFETY: deliberately wrong, for tests only — it never protects real data.
    unsafe impl lock_api::RawMutex for NoLock {
        #[allow(clippy::declare_interior_mutable_const)]
        const INIT: Self = NoLock;
        type GuardMarker = lock_api::GuardSend;
        fn lock(&self) {}
        fn try_lock(&self) -> bool {
            true
        }
        unsafe fn unlock(&self) {}
    }

    struct Shared<R: RawMutex> {
        lock: R,
        owner: OwnerCheck,
        counter: UnsafeCell<u64>,
    }
    // SAFETY: counter is only touched while `lock` is held.
    unsafe impl<R: RawMutex + Sync> Sync for Shared<R> {}

    /// Two threads each take A then B (B by spinning on try_lock every third round when
    /// `try_b` is set), releasing in alternating orders, while a third hammers B: a lock whose
    /// per-thread queue nodes were shared between two held locks breaks here. Every critical
    /// section is owner-checked; returns the pair for the caller's own final check.
    pub fn hold_two_under_contention<R: RawMutex + Send + Sync + 'static>(try_b: bool) -> Arc<(R, R)> {
        let ab = Arc::new((R::INIT, R::INIT));
        let checks = Arc::new((OwnerCheck::new(), OwnerCheck::new()));
        let handles: Vec<_> = (0..3u64)
            .map(|t| {
                let (ab, checks) = (Arc::clone(&ab), Arc::clone(&checks));
                std::thread::spawn(move || {
                    let me = t + 1;
                    for i in 0..300 {
                        if t == 2 {
                            ab.1.lock();
                            checks.1.enter(me);
                            checks.1.leave(me);
                            // SAFETY: held by this thread.
                            unsafe { ab.1.unlock() };
                            continue;
                        }
                        ab.0.lock();
                        checks.0.enter(me);
                        if try_b && i % 3 == 0 {
                            while !ab.1.try_lock() {
                                std::hint::spin_loop();
                            }
                        } else {
                            ab.1.lock();
                        }
                        checks.1.enter(me);
                        // SAFETY: both held by this thread; either release order is allowed.
                        unsafe {
                            if i % 2 == 0 {
                                checks.0.leave(me);
                                ab.0.unlock();
                                checks.1.leave(me);
                                ab.1.unlock();
                            } else {
                                checks.1.leave(me);
                                ab.1.unlock();
                                checks.0.leave(me);
                                ab.0.unlock();
                            }
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(
            (checks.0.violations(), checks.1.violations()),
            (0, 0),
            "two owners at once (A, B)"
        );
        ab
    }

    /// Each of `threads` threads does up to `iters` lock/increment/unlock rounds, stopping early
    /// once `budget` has passed (FIFO spinlocks with more threads than CPUs can need a scheduler
    /// time slice per hand-over on a loaded machine); the owner check must see no overlap and
    /// the counter must equal the rounds done.
    pub fn check<R: RawMutex + Send + Sync + 'static>(threads: usize, iters: u64, budget: Duration) {
        let deadline = Instant::now() + budget;
        let shared = Arc::new(Shared::<R> {
            lock: R::INIT,
            owner: OwnerCheck::new(),
            counter: UnsafeCell::new(0),
        });
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let s = Arc::clone(&shared);
                std::thread::spawn(move || {
                    let me = i as u64 + 1;
                    let mut done = 0u64;
                    for n in 0..iters {
                        if n.is_multiple_of(64) && Instant::now() > deadline {
                            break;
                        }
                        if (n + i as u64).is_multiple_of(3) && s.lock.try_lock() {
                            // fall through with the lock held
                        } else {
                            s.lock.lock();
                        }
                        s.owner.enter(me);
                        // SAFETY: we hold the lock.
                        unsafe {
                            let v = std::ptr::read_volatile(s.counter.get());
                            std::ptr::write_volatile(s.counter.get(), v + 1);
                        }
                        s.owner.leave(me);
                        // SAFETY: this thread holds the lock.
                        unsafe { s.lock.unlock() };
                        done += 1;
                    }
                    done
                })
            })
            .collect();
        let rounds: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(rounds >= threads as u64, "hardly any rounds done");
        assert_eq!(shared.owner.violations(), 0, "two owners at once");
        // SAFETY: all threads joined.
        assert_eq!(unsafe { *shared.counter.get() }, rounds, "lost increments");
    }

    struct Exclusion;
    impl LockVisitor for Exclusion {
        type Output = ();
        fn visit<R: RawMutex + Send + Sync + 'static>(self, _: &'static LockInfo) {
            // One thread more than CPUs: FIFO spinlocks then hand over through the scheduler, which
            // is slow by design, so the round count stays modest.
            check::<R>(crate::env::online_cpus() + 1, 3_000, Duration::from_secs(2));
        }
    }

    #[test]
    fn every_registered_algorithm_excludes() {
        for info in ALGOS {
            with_algo(info.name, Exclusion).expect("registered");
        }
    }

    #[test]
    fn unknown_name_is_rejected() {
        assert!(parse_algo("nope").unwrap_err().contains("tas"));
        assert!(with_algo("nope", Exclusion).is_none());
    }
}
