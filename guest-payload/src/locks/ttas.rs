//! Test-and-test-and-set spinlock with bounded exponential backoff.
//!
//! Waiters spin on a plain load (the cache line stays shared, no coherence traffic while the
//! lock is held) and only try the atomic swap once the lock looks free; after a failed swap
//! they back off for an exponentially growing, capped number of pause instructions, so a
//! release is not followed by a storm of swaps from every waiter.
//!
//! Preemption of each role (as `tas`: unfair, nobody is owed the lock):
//! - *owner*: every waiter spins (on a shared line, at least) until the owner's vCPU runs again.
//! - *next waiter* / *queued waiter*: there are none, so a preempted waiter stalls nobody.
//! - *newcomer*: its first swap competes with the spinning waiters on equal terms; a preempted
//!   newcomer holds no state.
//!
//! A waiter preempted *during its backoff* may wake to find the lock taken again and start
//! over; it is not owed anything, so that costs only its own latency. Backoff can add up to
//! [`MAX_BACKOFF`] pauses of latency after a release.
//!
//! Every decision is re-made from one fresh read, and taking the lock is one atomic swap, so no
//! step relies on what other threads did (or did not do) since an earlier read.

use lock_api::{GuardSend, RawMutex};

use super::sync::{AtomicBool, Ordering, spin_loop};

/// Pause instructions after the first failed swap; doubles per failure up to [`MAX_BACKOFF`].
const MIN_BACKOFF: u32 = 4;
/// Cap on the backoff, in pause instructions (a few microseconds on current x86 parts).
pub const MAX_BACKOFF: u32 = 1024;

pub struct RawTtasLock {
    locked: AtomicBool,
}

impl RawTtasLock {
    #[cold]
    fn lock_contended(&self) {
        let mut backoff = MIN_BACKOFF;
        loop {
            // Relaxed: this read only decides whether a swap is worth trying; the swap below is
            // what acquires.
            while self.locked.load(Ordering::Relaxed) {
                spin_loop();
            }
            if !self.locked.swap(true, Ordering::Acquire) {
                return;
            }
            // A fixed delay, not a wait for anyone: plain pauses (under loom and the stall hook
            // too, where a wait would be a scheduling point; this is not one).
            for _ in 0..backoff {
                std::hint::spin_loop();
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}

unsafe impl RawMutex for RawTtasLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        locked: AtomicBool::new(false),
    };
    type GuardMarker = GuardSend;

    #[inline]
    fn lock(&self) {
        // First attempt: swap straight away, without the test. When the lock is free (the
        // common case) a load first would fetch the line shared and the swap then needs a
        // second coherence transaction to own it; the test pays off only while waiting.
        // Acquire: see the previous owner's critical section.
        if self.locked.swap(true, Ordering::Acquire) {
            self.lock_contended();
        }
    }

    #[inline]
    fn try_lock(&self) -> bool {
        // Test first (Relaxed, no ownership taken), then set. Acquire on the successful swap:
        // the critical section must see what the previous owner wrote before its Release store.
        !self.locked.load(Ordering::Relaxed) && !self.locked.swap(true, Ordering::Acquire)
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
