//! Spin-then-park mutex: spin (test-and-test-and-set) for a bounded number of iterations, then
//! sleep on a futex like the `futex` mutex (states 0/1/2).
//!
//! The spin budget is [`SPIN_LIMIT`] polls of the lock word with one pause each — on the order
//! of microseconds, roughly a short critical section plus a cache-line transfer — so a lock
//! held briefly by a *running* holder is taken without a system call, and a lock whose holder
//! is slow (or preempted) costs a waiter at most that budget before it yields its CPU.
//! A waiter stops spinning early when it sees state 2 (others already sleep), so it does not
//! overtake sleepers for long. Futex waits and wakes are counted through [`super::futex`].
//!
//! Preemption of each role: a preempted *owner* costs each waiter one spin budget, then the
//! waiters sleep and give their vCPUs back; there is no *next* or *queued waiter* the lock is
//! owed to (a woken waiter competes like anyone), so a preempted waiter stalls nobody; a
//! *newcomer* may take the lock ahead of sleepers (unfair), and preempted it holds nothing.
//! Every transition is one RMW or CAS decided by its own result; a waiter that sleeps marks
//! the state 2 first, so an unlock in between always wakes someone. This is the adaptive shape of glibc's adaptive mutex and of
//! `parking_lot`, without their spin heuristics.

use lock_api::{GuardSend, RawMutex};

use super::futex;
use super::sync::{AtomicU32, Ordering, spin_loop};

const UNLOCKED: u32 = 0;
const LOCKED: u32 = 1;
const CONTENDED: u32 = 2;

/// Polls of the lock word before parking.
pub const SPIN_LIMIT: u32 = 128;

pub struct RawSpinParkLock {
    state: AtomicU32,
}

impl RawSpinParkLock {
    #[cold]
    fn lock_contended(&self) {
        // Spin phase. Relaxed loads only look; the CAS takes the lock with Acquire, pairing with
        // the Release swap in `unlock`.
        for _ in 0..SPIN_LIMIT {
            match self.state.load(Ordering::Relaxed) {
                UNLOCKED if self.try_lock() => return,
                CONTENDED => break,
                _ => {}
            }
            spin_loop();
        }
        // Park phase (Drepper's "mutex 3"): swapping in 2 both takes a free lock (Acquire) and
        // tells the owner a sleeper may exist. We take the lock as 2, never 1, because we cannot
        // know whether other sleepers remain.
        while self.state.swap(CONTENDED, Ordering::Acquire) != UNLOCKED {
            futex::wait_word(&self.state, CONTENDED);
        }
    }
}

unsafe impl RawMutex for RawSpinParkLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        state: AtomicU32::new(UNLOCKED),
    };
    type GuardMarker = GuardSend;

    #[inline]
    fn lock(&self) {
        if !self.try_lock() {
            self.lock_contended();
        }
    }

    #[inline]
    fn try_lock(&self) -> bool {
        // Acquire on success: see the previous owner's critical section.
        self.state
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    #[inline]
    unsafe fn unlock(&self) {
        // Release publishes the critical section; the swap also tells us whether anyone may be
        // asleep (state 2), in which case one sleeper is woken.
        if self.state.swap(UNLOCKED, Ordering::Release) == CONTENDED {
            futex::wake_word(&self.state, 1);
        }
    }

    fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) != UNLOCKED
    }
}
