//! Ticket spinlock: take a ticket, wait until `now_serving` reaches it. Strictly FIFO.
//!
//! FIFO is what makes it fragile under overcommit: when the waiter whose turn is next is a
//! preempted vCPU, every other waiter spins until that vCPU runs again, even though the lock
//! is free (lock-waiter preemption).

use lock_api::{GuardSend, RawMutex};

use super::sync::{AtomicU32, Ordering, spin_loop};

pub struct RawTicketLock {
    next_ticket: AtomicU32,
    now_serving: AtomicU32,
}

unsafe impl RawMutex for RawTicketLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        next_ticket: AtomicU32::new(0),
        now_serving: AtomicU32::new(0),
    };
    type GuardMarker = GuardSend;

    #[inline]
    fn lock(&self) {
        // Relaxed is enough for drawing a ticket: the ordering that matters is the Acquire load
        // of `now_serving` that hands us the lock.
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        while self.now_serving.load(Ordering::Acquire) != ticket {
            spin_loop();
        }
    }

    #[inline]
    fn try_lock(&self) -> bool {
        // Only take a ticket if it would be served at once; a CAS avoids queueing behind others.
        let serving = self.now_serving.load(Ordering::Relaxed);
        self.next_ticket
            .compare_exchange(
                serving,
                serving.wrapping_add(1),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    #[inline]
    unsafe fn unlock(&self) {
        // Only the owner writes now_serving, so a load + store is race-free; Release publishes
        // the critical section to the next ticket holder.
        let next = self.now_serving.load(Ordering::Relaxed).wrapping_add(1);
        self.now_serving.store(next, Ordering::Release);
    }

    fn is_locked(&self) -> bool {
        self.next_ticket.load(Ordering::Relaxed) != self.now_serving.load(Ordering::Relaxed)
    }
}
