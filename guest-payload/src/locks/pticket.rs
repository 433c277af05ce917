//! Preemptable ticket spinlock (Ouyang & Lange, "Preemptable Ticket Spinlocks: Improving
//! Consolidated Performance in the Cloud", VEE 2013).
//!
//! A ticket lock whose tickets only say *who may try*; ownership is a separate test-and-set
//! bit. Each locker draws a ticket; `head` counts completed critical sections. A waiter whose
//! ticket equals `head` (its turn) — or is already behind it (someone overtook it while it was
//! preempted) — competes for the bit at once. Any other waiter waits in FIFO order, but only
//! until its **timeout**: `distance × TIMEOUT_UNIT`, where `distance = ticket - head` is how
//! many critical sections are still ahead of it. The deadline restarts whenever `head` moves,
//! so it measures how long the queue has been *stalled*, not how long we have waited: while
//! the queue advances, order is FIFO; when it stops for longer than the time the waiters ahead
//! would plausibly need (because the next waiter in line is a preempted vCPU), waiters fall
//! back to racing for the bit, nearest-to-the-head first. The paper counts pause iterations
//! (`distance << 14`, a fraction of a millisecond per position); we use wall time so the rule
//! means the same on KVM and on a 10x slower TCG guest — [`TIMEOUT_UNIT`] per position.
//!
//! State: `next` (the ticket dispenser) and `grant` = `head << 1 | acquired`. Unlock is a single
//! `fetch_add(1)` on `grant`: with `acquired` set, adding 1 clears it and carries into `head`.
//! Tickets and head are 31-bit counters compared with wrapping arithmetic.
//!
//! Preemption of each role:
//! - *owner*: still stalls everyone.
//! - *next waiter*: stalls the others only for one timeout (about `TIMEOUT_UNIT` per position)
//!   instead of until its vCPU runs again, which is the point of the algorithm. Fairness is
//!   traded away only then.
//! - *queued waiter*: its ticket keeps `head` from reaching later tickets only until their
//!   timeouts; once it runs again it finds itself behind `head` and competes at once.
//! - *newcomer*: draws a ticket (one RMW) and waits its distance; it never takes the bit ahead
//!   of a waiter whose turn it is unless that waiter's timeout let others compete.
//!
//! Stall detection reads the clock only every [`SPINS_PER_CLOCK_READ`] polls (and when `head`
//! moves), not on every spin: in a guest on HPET or TCG a clock read costs microseconds.
//! The bit itself is test-and-set, so no step assumes who ran in between; `try_lock` takes a
//! ticket only by a CAS that proves no other ticket is outstanding.

use std::time::{Duration, Instant};

use lock_api::{GuardSend, RawMutex};

use super::sync::{AtomicU32, Ordering, expired, spin_loop};

/// Stall allowance per waiter ahead of us before we may take the lock out of order.
pub const TIMEOUT_UNIT: Duration = Duration::from_micros(100);
/// Spins between clock reads while waiting for our turn (reading the clock costs far more
/// than a poll of the lock, especially in a guest without a paravirtual clock).
/// (1 under loom, where a spin-wait is parked until the watched word is written: see sync.rs.)
const SPINS_PER_CLOCK_READ: u32 = if cfg!(loom) { 1 } else { 64 };
const ACQUIRED: u32 = 1;
/// Tickets and head live in 31 bits (head shares `grant` with the acquired bit).
const TICKET_MASK: u32 = u32::MAX >> 1;

#[cfg(loom)]
std::thread_local! {
    /// Waits that ended by timeout, ahead of a waiter whose turn it was (loom runs a model's
    /// threads on its test's thread, so this counts per model test).
    static OVERTAKES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Under loom: how many waits on this test's thread so far ended in the overtaking path.
#[cfg(loom)]
pub fn loom_overtakes() -> u64 {
    OVERTAKES.with(|o| o.get())
}

pub struct RawPticketLock {
    next: AtomicU32,
    grant: AtomicU32,
}

/// `ticket - head` as a signed 31-bit distance (negative: the head has passed us).
fn distance(ticket: u32, head: u32) -> i32 {
    ((ticket.wrapping_sub(head) & TICKET_MASK) << 1) as i32 >> 1
}

impl RawPticketLock {
    /// Waits for our turn or our timeout.
    #[cold]
    fn wait_turn(&self, ticket: u32) {
        let mut head = u32::MAX; // "never seen": forces the first deadline computation
        let mut deadline = Instant::now();
        let mut spins = 0u32;
        loop {
            // Relaxed: this only decides when to compete; the Acquire is in `take`.
            let h = self.grant.load(Ordering::Relaxed) >> 1;
            let d = distance(ticket, h);
            if d <= 0 {
                return;
            }
            if h != head {
                head = h;
                deadline = Instant::now() + TIMEOUT_UNIT * d as u32;
                spins = 0;
            }
            spins += 1;
            if spins.is_multiple_of(SPINS_PER_CLOCK_READ) && expired(deadline) {
                // Timed out with d > 0 waiters ahead: we compete out of turn.
                #[cfg(loom)]
                OVERTAKES.with(|o| o.set(o.get() + 1));
                return;
            }
            spin_loop();
        }
    }

    /// Competes for the acquired bit (test-and-test-and-set).
    fn take(&self) {
        loop {
            // Acquire pairs with the Release `fetch_add` in `unlock`.
            if self.grant.fetch_or(ACQUIRED, Ordering::Acquire) & ACQUIRED == 0 {
                return;
            }
            while self.grant.load(Ordering::Relaxed) & ACQUIRED != 0 {
                spin_loop();
            }
        }
    }
}

unsafe impl RawMutex for RawPticketLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        next: AtomicU32::new(0),
        grant: AtomicU32::new(0),
    };
    type GuardMarker = GuardSend;

    #[inline]
    fn lock(&self) {
        // Relaxed: the ticket only orders attempts; ownership is taken in `take`.
        let ticket = self.next.fetch_add(1, Ordering::Relaxed) & TICKET_MASK;
        if distance(ticket, self.grant.load(Ordering::Relaxed) >> 1) > 0 {
            self.wait_turn(ticket);
        }
        self.take();
    }

    #[inline]
    fn try_lock(&self) -> bool {
        // Free and nobody queued: head == next and not acquired. Taking the ticket with a CAS
        // from `head` succeeds only if no other ticket is outstanding (every ticket drawn has
        // been released), so nobody else can be competing for the bit and `take` cannot wait.
        let g = self.grant.load(Ordering::Relaxed);
        if g & ACQUIRED != 0 {
            return false;
        }
        let n = self.next.load(Ordering::Relaxed);
        if n & TICKET_MASK != g >> 1
            || self
                .next
                .compare_exchange(n, n.wrapping_add(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return false;
        }
        self.take();
        true
    }

    #[inline]
    unsafe fn unlock(&self) {
        // acquired 1 -> 0 and head += 1 in one RMW. Release publishes the critical section.
        self.grant.fetch_add(1, Ordering::Release);
    }

    fn is_locked(&self) -> bool {
        self.grant.load(Ordering::Relaxed) & ACQUIRED != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn distance_wraps_in_31_bits() {
        assert_eq!(distance(5, 3), 2);
        assert_eq!(distance(3, 5), -2);
        assert_eq!(distance(0, TICKET_MASK), 1);
        assert_eq!(distance(TICKET_MASK, 0), -1);
    }

    #[test]
    fn trylock_fails_while_held_or_queued() {
        let l = RawPticketLock::INIT;
        assert!(l.try_lock());
        assert!(!l.try_lock());
        // SAFETY: held.
        unsafe { l.unlock() };
        // An outstanding ticket (a waiter) makes trylock fail even though the bit is free.
        l.next.fetch_add(1, Ordering::Relaxed);
        assert!(!l.is_locked());
        assert!(!l.try_lock());
    }

    #[test]
    fn a_preempted_waiter_is_overtaken_after_the_timeout() {
        // Draw a ticket and never use it: a waiter preempted forever. A strict ticket lock
        // would make the next locker wait forever; here it waits about one TIMEOUT_UNIT.
        let l = Arc::new(RawPticketLock::INIT);
        l.next.fetch_add(1, Ordering::Relaxed);
        let l2 = Arc::clone(&l);
        let start = Instant::now();
        let t = std::thread::spawn(move || {
            l2.lock();
            // SAFETY: held by this thread.
            unsafe { l2.unlock() };
        });
        t.join().unwrap();
        let waited = start.elapsed();
        assert!(
            waited >= TIMEOUT_UNIT,
            "took the lock out of order without waiting: {waited:?}"
        );
        assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    }

    #[test]
    fn waiters_in_line_wait_for_their_turn() {
        // While the holder holds, a waiter at distance 1 must not take the lock even after its
        // timeout (the acquired bit still excludes it), and takes it once released.
        let l = Arc::new(RawPticketLock::INIT);
        l.lock();
        let l2 = Arc::clone(&l);
        let t = std::thread::spawn(move || {
            l2.lock();
            // SAFETY: held by this thread.
            unsafe { l2.unlock() };
        });
        std::thread::sleep(TIMEOUT_UNIT * 5);
        assert!(!t.is_finished());
        // SAFETY: held by this thread.
        unsafe { l.unlock() };
        t.join().unwrap();
        assert!(!l.is_locked());
    }
}
