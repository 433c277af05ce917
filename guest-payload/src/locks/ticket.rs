//! Ticket spinlock: take a ticket, wait until `now_serving` reaches it. Strictly FIFO.
//!
//! FIFO is what makes it fragile under overcommit. Preemption of each role:
//! - *owner*: stalls everyone (all waiters spin on `now_serving`).
//! - *next waiter*: when the waiter whose turn is next is a preempted vCPU, every other waiter
//!   spins until that vCPU runs again, even though the lock is free (lock-waiter preemption).
//! - *queued waiter*: holds a ticket, so it will stall everyone behind it when its turn comes.
//! - *newcomer*: drawing a ticket is one RMW; preempted before it, it holds nothing.

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
        // Acquire on `now_serving`: this load is what synchronises with the previous owner's
        // Release store in `unlock` (issue 9: it was Relaxed, with the Acquire on the CAS of
        // `next_ticket`, which no owner writes with Release, so nothing ordered our critical
        // section after the previous one; loom's `ticket_contended` model caught it as a data
        // race). If the CAS then finds `next_ticket == serving`, `now_serving` (never past
        // `next_ticket`) is still `serving`, so the value we acquired is the current one.
        // Relaxed CAS: drawing a ticket publishes nothing (lock() draws Relaxed too).
        let serving = self.now_serving.load(Ordering::Acquire);
        self.next_ticket
            .compare_exchange(
                serving,
                serving.wrapping_add(1),
                Ordering::Relaxed,
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
