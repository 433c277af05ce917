//! Plain futex mutex: Drepper's "mutex 2" from "Futexes Are Tricky" (2011), states 0/1/2.
//!
//! State 0 = unlocked, 1 = locked with no waiters, 2 = locked and maybe waiters. Uncontended,
//! lock and unlock are one atomic each and no system call; contended, the waiter never spins:
//! it marks the lock 2 and sleeps in `FUTEX_WAIT` at once, and the unlocker of a 2-lock pays a
//! `FUTEX_WAKE`. Every wait and wake goes through [`super::futex`], so they are counted.
//!
//! Preemption of each role: a preempted *owner* costs waiters no CPU (they sleep) but the
//! critical section still waits for the vCPU to run. There is no next or queued waiter the
//! lock is owed to: a woken waiter is not owed the lock (a running thread may take it first),
//! so a preempted *woken waiter* stalls nobody, and a *newcomer* may overtake sleepers. The
//! futex wait re-checks the word in the kernel, so an unlock between a waiter's swap to 2 and
//! its sleep is never lost. The price is
//! a kernel round trip (sleep + wake-up IPI, i.e. VM exits on real hardware) on every contended
//! hand-over, even for critical sections far shorter than a context switch.

use lock_api::{GuardSend, RawMutex};

use super::futex;
use super::sync::{AtomicU32, Ordering};

const UNLOCKED: u32 = 0;
const LOCKED: u32 = 1;
const CONTENDED: u32 = 2;

pub struct RawFutexMutex {
    state: AtomicU32,
}

impl RawFutexMutex {
    #[cold]
    fn lock_contended(&self, mut c: u32) {
        // Acquire on every transition that can take the lock (the CASes from 0): it pairs with
        // the Release in `unlock`. Failed CASes and the 1→2 marking take nothing: Relaxed.
        loop {
            // Mark the lock contended (unless it already is) before sleeping, so the owner's
            // unlock knows to wake us. If the 1→2 CAS finds 0 the lock was just released: retry.
            if c == CONTENDED
                || self
                    .state
                    .compare_exchange(LOCKED, CONTENDED, Ordering::Relaxed, Ordering::Relaxed)
                    .map_or_else(|v| v != UNLOCKED, |_| true)
            {
                futex::wait_word(&self.state, CONTENDED);
            }
            // Take the lock as 2, not 1: we cannot know whether other sleepers remain.
            match self
                .state
                .compare_exchange(UNLOCKED, CONTENDED, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(v) => c = v,
            }
        }
    }
}

unsafe impl RawMutex for RawFutexMutex {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        state: AtomicU32::new(UNLOCKED),
    };
    type GuardMarker = GuardSend;

    #[inline]
    fn lock(&self) {
        if let Err(c) = self
            .state
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
        {
            self.lock_contended(c);
        }
    }

    #[inline]
    fn try_lock(&self) -> bool {
        self.state
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    #[inline]
    unsafe fn unlock(&self) {
        // Release publishes the critical section. 1→0 means nobody waits; from 2 we store 0
        // (the decrement left 1, which must not stay: it would look like "locked, no waiters")
        // and wake one sleeper, which retakes the lock as 2.
        if self.state.fetch_sub(1, Ordering::Release) != LOCKED {
            self.state.store(UNLOCKED, Ordering::Release);
            futex::wake_word(&self.state, 1);
        }
    }

    fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) != UNLOCKED
    }
}
