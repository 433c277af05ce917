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
//! `try_lock` never waits. It may only join the queue behind a node it saw released, with a
//! CAS on `tail`. Because nodes migrate and are re-queued, a bare pointer in `tail` would let
//! that CAS succeed after the node it saw was adopted by another thread and queued again
//! (locked) — the ABA race: T reads tail X (released), U locks (queues Y, adopts X), unlocks,
//! locks again (queues X), and T's CAS X→T succeeds and T waits for U's whole critical section.
//! So `tail` is a generation-tagged word: the node's address (64-aligned, below 2^47: 41 bits)
//! and the node's own queueing count (23 bits), which its user bumps every time it queues it.
//! A CAS that succeeds therefore proves the tail is still the very queueing of X that was seen
//! released (a node once released stays released until it is queued again, with a new tag), so
//! the `try_lock` that wins adopts X at once. Only 2^23 re-queueings of that one node between
//! T's load and its CAS could fool it; even then it would only wait (still exclusive).
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
use super::sync::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering, global, spin_loop, thread_local};

#[repr(align(64))]
struct Node {
    /// True while the node's current user waits for or holds the lock.
    locked: AtomicBool,
    /// How many times the node was queued (mod 2^[`TAG_BITS`]): the tag in `tail`. Only the
    /// node's current user (the thread whose spare it is) touches it, before queueing it, so
    /// Relaxed suffices; the node passes between threads through `locked`'s Release/Acquire.
    queued: AtomicU32,
}

/// Node addresses are 64-aligned (6 low bits zero) and below 2^47 (user space with 4-level
/// paging on x86-64 and aarch64), so 41 bits hold one; the other 23 hold the tag.
const ALIGN_SHIFT: u32 = 6;
const ADDR_BITS: u32 = 47;
const PTR_BITS: u32 = ADDR_BITS - ALIGN_SHIFT;
const TAG_BITS: u32 = 64 - PTR_BITS;
const PTR_MASK: u64 = (1 << PTR_BITS) - 1;
const TAG_MASK: u32 = (1 << TAG_BITS) - 1;

/// The `tail` word for `node` queued for the `tag`-th time (never 0: the node is not at 0).
fn tagged(node: &'static Node, tag: u32) -> u64 {
    (u64::from(tag) << PTR_BITS) | ((node as *const Node as u64) >> ALIGN_SHIFT)
}

/// The node in a `tail` word (None for a never-used lock).
fn node_of(word: u64) -> Option<&'static Node> {
    let addr = (word & PTR_MASK) << ALIGN_SHIFT;
    // SAFETY: every non-zero word stored in `tail` was made by `tagged` from a `&'static Node`
    // leaked by the pool, which is never freed (`new_node` checked that it fits the word).
    (addr != 0).then(|| unsafe { &*(addr as *const Node) })
}

global! {
    static POOL: Pool<Node> = Pool::new();
}

fn new_node() -> &'static Node {
    let node = POOL.take(|_| Node {
        locked: AtomicBool::new(false),
        queued: AtomicU32::new(0),
    });
    let addr = node as *const Node as u64;
    assert!(
        addr >> ADDR_BITS == 0 && addr.trailing_zeros() >= ALIGN_SHIFT,
        "CLH node at {addr:#x} does not fit the tagged tail"
    );
    node
}

/// This thread's one spare node, given back to the pool when the thread exits.
struct Spare(Cell<&'static Node>);

impl Spare {
    /// At thread exit: the spare is never linked into a queue, whatever locks this thread
    /// still holds, so it goes back to the pool.
    fn give_back(&self) {
        POOL.give(self.0.get());
    }
}

#[cfg(not(loom))] // see pool.rs
impl Drop for Spare {
    fn drop(&mut self) {
        self.give_back();
    }
}

/// Under loom, what this thread's exit does (see pool.rs); the thread must not use CLH after.
#[cfg(loom)]
pub fn loom_thread_exit() {
    SPARE.with(|s| s.give_back());
}

thread_local! {
    static SPARE: Spare = Spare(Cell::new(new_node()));
}

/// Marks this thread's spare as waiting and returns it with the tail word that queues it.
fn prepare_spare() -> (&'static Node, u64) {
    let node = SPARE.with(|s| s.0.get());
    // Relaxed: published by the Release half of the swap or CAS that queues it.
    node.locked.store(true, Ordering::Relaxed);
    let tag = node.queued.load(Ordering::Relaxed).wrapping_add(1) & TAG_MASK;
    node.queued.store(tag, Ordering::Relaxed);
    (node, tagged(node, tag))
}

pub struct RawClhLock {
    /// The last node queued (the owner's, or the released node of the last owner), tagged (see
    /// the module comment); 0 only before first use.
    tail: AtomicU64,
    /// The owner's node; written by the new owner after acquiring, read by it in `unlock`.
    holder: AtomicPtr<Node>,
}

impl RawClhLock {
    /// We are queued behind `pred` (or first, if None): wait for it, then adopt its node.
    fn wait_and_adopt(&self, me: &'static Node, pred: Option<&'static Node>) {
        let spare = match pred {
            None => new_node(),
            Some(pred) => {
                // Acquire pairs with the Release store in `unlock`: we see the previous critical
                // section once we see its node released.
                while pred.locked.load(Ordering::Acquire) {
                    spin_loop();
                }
                pred
            }
        };
        SPARE.with(|s| s.0.set(spare));
        // Relaxed: only the owner reads `holder`; the next owner writes it only after acquiring.
        self.holder
            .store(me as *const Node as *mut Node, Ordering::Relaxed);
    }
}

unsafe impl RawMutex for RawClhLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        tail: AtomicU64::new(0),
        holder: AtomicPtr::new(ptr::null_mut()),
    };
    type GuardMarker = GuardNoSend;

    fn lock(&self) {
        let (node, word) = prepare_spare();
        // Release: our successor reads our node's `locked`, which must already be true when it
        // finds the node in `tail`. Acquire: so the predecessor node's memory (and, via it, its
        // released state) is read after we learned of it.
        let pred = self.tail.swap(word, Ordering::AcqRel);
        self.wait_and_adopt(node, node_of(pred));
    }

    fn try_lock(&self) -> bool {
        // Acquire: the node's memory, published by the swap or CAS that queued it.
        let seen = self.tail.load(Ordering::Acquire);
        let pred = node_of(seen);
        // Acquire pairs with `unlock`'s Release: a released node hands us its critical section.
        if pred.is_some_and(|p| p.locked.load(Ordering::Acquire)) {
            return false;
        }
        let (node, word) = prepare_spare();
        // AcqRel as for the swap in `lock`. If the CAS fails, our node was never published and
        // stays our spare (its bumped tag is simply skipped).
        if self
            .tail
            .compare_exchange(seen, word, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // The tail was still the queueing of `pred` we saw released (the tag), so it is still
        // released: adopting it does not wait.
        #[cfg(any(test, loom))]
        assert!(
            !pred.is_some_and(|p| p.locked.load(Ordering::Relaxed)),
            "CLH try_lock succeeded behind a node that is queued again (ABA)"
        );
        self.wait_and_adopt(node, pred);
        true
    }

    unsafe fn unlock(&self) {
        let me = self.holder.load(Ordering::Relaxed);
        // SAFETY: `holder` is the owner's node, a leaked `&'static Node` (see `wait_and_adopt`).
        let me = unsafe { &*me };
        // Release hands our critical section to the successor spinning on our node, which then
        // adopts it; if nobody waits, the node stays in `tail` as the lock's own.
        me.locked.store(false, Ordering::Release);
    }

    fn is_locked(&self) -> bool {
        node_of(self.tail.load(Ordering::Relaxed)).is_some_and(|t| t.locked.load(Ordering::Relaxed))
    }
}

impl Drop for RawClhLock {
    fn drop(&mut self) {
        // With `&mut self` nobody waits on or holds the lock (a forgotten guard's node is the
        // tail and is not referenced by its thread any more), so the tail node is free.
        // (A load, not `get_mut`: loom's atomics have no `get_mut`.)
        if let Some(t) = node_of(self.tail.load(Ordering::Relaxed)) {
            POOL.give(t);
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
