//! CLH queue lock (Craig; Landin & Hagersten, 1993-94): an implicit queue — each waiter swaps
//! its node into `tail` and spins on its *predecessor's* node until that one is released.
//!
//! Node ownership: CLH nodes migrate. A thread enters `lock` with one spare node of its own,
//! leaves it in the queue, and when it acquires it adopts its predecessor's node (nobody else
//! refers to it any more) as its new spare. So every thread always owns exactly one spare node,
//! however many CLH locks it holds at once, and each lock owns one node — its tail — while
//! unlocked. Nodes come from a [`Pool`] (leaked, never freed, see `pool.rs`): a thread's spare
//! goes back at thread exit, a lock's tail node when the lock is dropped. A never-used lock has
//! a null tail (`INIT` is a const and cannot allocate); the first acquirer then has no
//! predecessor to adopt and takes a fresh spare from the pool instead.
//!
//! The lock records its owner's node in `holder`, so `unlock` is one store; guards are `!Send`
//! (the unlocking thread must be the one that locked, whose spare was already replaced).
//!
//! Under vCPU preemption CLH is strictly FIFO, like `ticket` and `mcs`. Preemption of each
//! role:
//! - *owner*: stalls everyone; its `unlock` is one store and never waits for anyone (unlike
//!   MCS), so an owner is never held up by a waiter.
//! - *next waiter*: stalls everyone behind it, because the released node is watched only by it.
//! - *queued waiter*: stalls nobody until it is the next waiter (its `swap` into `tail` both
//!   queues and links it: there is no half-linked window).
//! - *newcomer*: one `swap` and it is queued; preempted before it, it holds nothing.

use std::cell::Cell;
use std::ptr;

use lock_api::{GuardNoSend, RawMutex};

use super::pool::Pool;
use super::sync::{AtomicBool, AtomicPtr, Ordering, global, spin_loop, thread_local};

#[repr(align(64))]
struct Node {
    /// True while the node's current user waits for or holds the lock.
    locked: AtomicBool,
}

global! {
    static POOL: Pool<Node> = Pool::new();
}

fn new_node() -> &'static Node {
    POOL.take(|_| Node {
        locked: AtomicBool::new(false),
    })
}

/// This thread's one spare node, given back to the pool when the thread exits.
struct Spare(Cell<&'static Node>);

#[cfg(not(loom))] // see pool.rs
impl Drop for Spare {
    fn drop(&mut self) {
        // The spare is never linked into a queue, whatever locks this thread still holds.
        POOL.give(self.0.get());
    }
}

thread_local! {
    static SPARE: Spare = Spare(Cell::new(new_node()));
}

fn node_ref(p: *mut Node) -> &'static Node {
    // SAFETY: every pointer stored in `tail` or `holder` comes from a `&'static Node` leaked
    // by the pool, which is never freed.
    unsafe { &*p }
}

pub struct RawClhLock {
    /// The last node queued (the owner's, or the released node of the last owner); null only
    /// before first use.
    tail: AtomicPtr<Node>,
    /// The owner's node; written by the new owner after acquiring, read by it in `unlock`.
    holder: AtomicPtr<Node>,
}

impl RawClhLock {
    /// We are queued behind `pred` (or first, if null): wait for it, then adopt its node.
    fn wait_and_adopt(&self, me: *mut Node, pred: *mut Node) {
        let spare = if pred.is_null() {
            new_node()
        } else {
            let pred = node_ref(pred);
            // Acquire pairs with the Release store in `unlock`: we see the previous critical
            // section once we see its node released.
            while pred.locked.load(Ordering::Acquire) {
                spin_loop();
            }
            pred
        };
        SPARE.with(|s| s.0.set(spare));
        // Relaxed: only the owner reads `holder`; the next owner writes it only after acquiring.
        self.holder.store(me, Ordering::Relaxed);
    }
}

unsafe impl RawMutex for RawClhLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        tail: AtomicPtr::new(ptr::null_mut()),
        holder: AtomicPtr::new(ptr::null_mut()),
    };
    type GuardMarker = GuardNoSend;

    fn lock(&self) {
        let node = SPARE.with(|s| s.0.get());
        // Relaxed: published by the Release half of the swap below.
        node.locked.store(true, Ordering::Relaxed);
        let me = node as *const Node as *mut Node;
        // Release: our successor reads our node's `locked`, which must already be true when it
        // finds the node in `tail`. Acquire: so the predecessor node's memory (and, via it, its
        // released state) is read after we learned of it.
        let pred = self.tail.swap(me, Ordering::AcqRel);
        self.wait_and_adopt(me, pred);
    }

    fn try_lock(&self) -> bool {
        let pred = self.tail.load(Ordering::Acquire);
        if !pred.is_null() && node_ref(pred).locked.load(Ordering::Relaxed) {
            return false;
        }
        let node = SPARE.with(|s| s.0.get());
        node.locked.store(true, Ordering::Relaxed);
        let me = node as *const Node as *mut Node;
        // AcqRel as for the swap in `lock`. If the CAS fails, our node was never published and
        // stays our spare.
        if self
            .tail
            .compare_exchange(pred, me, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // We are now queued behind `pred`, which we saw released. In a rare ABA race `pred` may
        // have been re-queued (locked) by its new user between our look and our CAS; we are then
        // legitimately its successor and wait for that one critical section. Still exclusive.
        self.wait_and_adopt(me, pred);
        true
    }

    unsafe fn unlock(&self) {
        let me = node_ref(self.holder.load(Ordering::Relaxed));
        // Release hands our critical section to the successor spinning on our node, which then
        // adopts it; if nobody waits, the node stays in `tail` as the lock's own.
        me.locked.store(false, Ordering::Release);
    }

    fn is_locked(&self) -> bool {
        let t = self.tail.load(Ordering::Relaxed);
        !t.is_null() && node_ref(t).locked.load(Ordering::Relaxed)
    }
}

impl Drop for RawClhLock {
    fn drop(&mut self) {
        // With `&mut self` nobody waits on or holds the lock (a forgotten guard's node is the
        // tail and is not referenced by its thread any more), so the tail node is free.
        // (A load, not `get_mut`: loom's atomics have no `get_mut`.)
        let t = self.tail.load(Ordering::Relaxed);
        if !t.is_null() {
            POOL.give(node_ref(t));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn trylock_fails_on_a_held_lock_and_succeeds_after_unlock() {
        let l = Arc::new(RawClhLock::INIT);
        assert!(l.try_lock(), "trylock of a never-used lock");
        let l2 = Arc::clone(&l);
        assert!(!std::thread::spawn(move || l2.try_lock()).join().unwrap());
        // SAFETY: held by this thread.
        unsafe { l.unlock() };
        assert!(!l.is_locked());
        l.lock();
        assert!(l.is_locked());
        // SAFETY: held by this thread.
        unsafe { l.unlock() };
    }

    #[test]
    fn one_thread_holds_two_locks_under_contention() {
        let ab = crate::locks::exclusion_test::hold_two_under_contention::<RawClhLock>(true);
        assert!(!ab.0.is_locked() && !ab.1.is_locked());
    }

    #[test]
    fn nodes_are_conserved() {
        // Threads come and go, locks are created and dropped: spares and tail nodes must flow
        // back to the pool instead of being allocated afresh each time.
        let before = POOL.allocated();
        for _ in 0..50 {
            let l = Arc::new(RawClhLock::INIT);
            let l2 = Arc::clone(&l);
            std::thread::spawn(move || {
                l2.lock();
                // SAFETY: held by this thread.
                unsafe { l2.unlock() };
            })
            .join()
            .unwrap();
            drop(l);
        }
        assert!(POOL.allocated() - before < 20, "nodes are not recycled");
    }
}
