//! Lock algorithms, one small file each, every one a [`lock_api::RawMutex`].
//!
//! Workloads are generic over the lock type; [`with_algo`] turns a name from the command line
//! into a monomorphised call through a [`LockVisitor`], so the hot loop has no dynamic dispatch.

pub mod futex;
pub mod pthread;
pub mod tas;
pub mod ticket;

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
    "ticket" => ticket::RawTicketLock, false, "ticket spinlock: strict FIFO, stalls behind a preempted next-in-line waiter";
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
pub(crate) mod exclusion_test {
    //! Shared mutual-exclusion check: more threads than CPUs hammer a non-atomic counter.
    use super::*;
    use std::cell::UnsafeCell;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    struct Shared<R: RawMutex> {
        lock: R,
        counter: UnsafeCell<u64>,
        owners: AtomicUsize,
        second_owner_seen: AtomicBool,
    }
    // SAFETY: counter is only touched while `lock` is held.
    unsafe impl<R: RawMutex + Sync> Sync for Shared<R> {}

    pub fn check<R: RawMutex + Send + Sync + 'static>(threads: usize, iters: u64) {
        let shared = Arc::new(Shared::<R> {
            lock: R::INIT,
            counter: UnsafeCell::new(0),
            owners: AtomicUsize::new(0),
            second_owner_seen: AtomicBool::new(false),
        });
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let s = Arc::clone(&shared);
                std::thread::spawn(move || {
                    for n in 0..iters {
                        if (n + i as u64) % 3 == 0 && s.lock.try_lock() {
                            // fall through with the lock held
                        } else {
                            s.lock.lock();
                        }
                        if s.owners.fetch_add(1, Ordering::Relaxed) != 0 {
                            s.second_owner_seen.store(true, Ordering::Relaxed);
                        }
                        // SAFETY: we hold the lock.
                        unsafe {
                            let v = std::ptr::read_volatile(s.counter.get());
                            std::ptr::write_volatile(s.counter.get(), v + 1);
                        }
                        s.owners.fetch_sub(1, Ordering::Relaxed);
                        // SAFETY: this thread holds the lock.
                        unsafe { s.lock.unlock() };
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert!(
            !shared.second_owner_seen.load(Ordering::Relaxed),
            "two owners at once"
        );
        // SAFETY: all threads joined.
        assert_eq!(
            unsafe { *shared.counter.get() },
            threads as u64 * iters,
            "lost increments"
        );
    }

    struct Exclusion;
    impl LockVisitor for Exclusion {
        type Output = ();
        fn visit<R: RawMutex + Send + Sync + 'static>(self, _: &'static LockInfo) {
            // One thread more than CPUs: FIFO spinlocks then hand over through the scheduler, which
            // is slow by design, so the round count stays modest.
            check::<R>(crate::env::online_cpus() + 1, 3_000);
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
