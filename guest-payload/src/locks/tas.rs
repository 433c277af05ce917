//! Test-and-set spinlock: every attempt is an atomic swap on the one lock word.
//!
//! Unfair by construction — whoever's swap lands first after a release wins — which is why it
//! degrades gracefully under lock-holder preemption compared with FIFO locks: any running
//! waiter can take a released lock, no particular (possibly preempted) waiter is owed it.
//!
//! Preemption of each role:
//! - *owner*: every waiter spins (swapping, so the line bounces) until the owner's vCPU runs
//!   again and releases; nothing else can help.
//! - *next waiter* / *queued waiter*: there are none — no waiter is owed the lock, so a
//!   preempted waiter stalls nobody.
//! - *newcomer*: competes on equal terms with the waiters; it may overtake them indefinitely
//!   (unfair), but a preempted newcomer holds no state and stalls nobody.
//!
//! One atomic step per attempt, so there is no window between steps in which another thread's
//! progress could invalidate what this one read.

use lock_api::{GuardSend, RawMutex};

use super::sync::{AtomicBool, Ordering, spin_loop};

pub struct RawTasLock {
    locked: AtomicBool,
}

unsafe impl RawMutex for RawTasLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        locked: AtomicBool::new(false),
    };
    type GuardMarker = GuardSend;

    #[inline]
    fn lock(&self) {
        // Acquire on success: the critical section must see everything the previous owner wrote
        // before its Release store in `unlock`.
        while self.locked.swap(true, Ordering::Acquire) {
            spin_loop();
        }
    }

    #[inline]
    fn try_lock(&self) -> bool {
        !self.locked.swap(true, Ordering::Acquire)
    }

    #[inline]
    unsafe fn unlock(&self) {
        // Release publishes the critical section's writes to the next acquirer.
        self.locked.store(false, Ordering::Release);
    }

    fn is_locked(&self) -> bool {
        self.locked.load(Ordering::Relaxed)
    }
}
