//! MCS queue lock (Mellor-Crummey & Scott, 1991): waiters form a linked queue of nodes, each
//! spinning on its *own* node; the owner hands the lock to its successor by writing one flag.
//!
//! Node ownership: `RawMutex` passes no node, so each thread has a block of [`MAX_HELD`] nodes
//! (leased from a [`Pool`], see `pool.rs`) and a bitmask of the ones in use. A node stays in use
//! from `lock` until `unlock` (the successor links itself to it), so a thread holding several
//! MCS locks at once uses one node per lock; the lock records its holder's node in `holder`,
//! which `unlock` reads — only the owner touches that field. Holding more than [`MAX_HELD`]
//! MCS locks at once panics. Guards are `!Send`: the unlocking thread must be the locking one,
//! because the node belongs to that thread's block.
//!
//! Under vCPU preemption MCS is strictly FIFO, like `ticket`, with the same weakness. Unlike
//! `ticket`, waiters spin on separate cache lines. Preemption of each role:
//! - *owner*: stalls everyone. An owner preempted inside `unlock`, after finding a successor
//!   not yet linked, keeps waiting for the link: the lock stays unavailable meanwhile.
//! - *next waiter*: stalls everyone behind it even though the lock is free, because the lock
//!   is handed to that waiter's node and nobody else may take it.
//! - *queued waiter*: one preempted between its `swap` into `tail` and its link store stalls
//!   its predecessor's `unlock` (which waits for the link) and so everyone; once linked it
//!   stalls only when it becomes the next waiter.
//! - *newcomer*: a newcomer always queues at the tail, so it stalls nobody until it is linked.
//!
//! No step assumes what other threads did in between: the tail `swap` and the tail CAS in
//! `unlock` are single RMWs whose result decides, and a failed CAS means a successor exists.

use std::cell::Cell;
use std::ptr;

use lock_api::{GuardNoSend, RawMutex};

use super::pool::Pool;
use super::sync::{AtomicBool, AtomicPtr, Ordering, global, spin_loop, thread_local};

/// MCS locks one thread can hold (or be waiting for) at the same time.
pub const MAX_HELD: usize = 8;

#[repr(align(64))]
struct Node {
    /// The successor, set by the successor itself once it has swapped itself into `tail`.
    next: AtomicPtr<Node>,
    /// True while this node's thread waits; the predecessor clears it to hand over the lock.
    waiting: AtomicBool,
}

struct Block {
    nodes: [Node; MAX_HELD],
}

global! {
    static POOL: Pool<Block> = Pool::new();
}

/// This thread's node block and which of its nodes are in use.
struct Lease {
    block: &'static Block,
    used: Cell<u8>,
}

impl Lease {
    /// At thread exit. A node still in use (a forgotten guard) may be linked into a queue:
    /// leak the block rather than let another thread reuse those nodes.
    fn give_back(&self) {
        if self.used.get() == 0 {
            POOL.give(self.block);
        }
    }
}

#[cfg(not(loom))] // see pool.rs
impl Drop for Lease {
    fn drop(&mut self) {
        self.give_back();
    }
}

/// Under loom, what this thread's exit does (see pool.rs); the thread must not use MCS after.
#[cfg(loom)]
pub fn loom_thread_exit() {
    LEASE.with(|l| l.give_back());
}

thread_local! {
    static LEASE: Lease = Lease {
        block: POOL.take(|_| Block {
            nodes: std::array::from_fn(|_| Node {
                next: AtomicPtr::new(ptr::null_mut()),
                waiting: AtomicBool::new(false),
            }),
        }),
        used: Cell::new(0),
    };
}

/// Marks a free node of this thread's block as used and returns it, reset.
fn claim_node() -> &'static Node {
    LEASE.with(|l| {
        let used = l.used.get();
        let i = (!used).trailing_zeros() as usize;
        assert!(
            i < MAX_HELD,
            "a thread may hold at most {MAX_HELD} MCS locks at once"
        );
        l.used.set(used | 1 << i);
        let node = &l.block.nodes[i];
        // Relaxed: these stores are published by the AcqRel swap/CAS that puts the node into
        // `tail`, which every other user of the node reads first.
        node.next.store(ptr::null_mut(), Ordering::Relaxed);
        node.waiting.store(true, Ordering::Relaxed);
        node
    })
}

/// Returns a node nobody refers to any more to this thread's block.
fn release_node(node: &Node) {
    LEASE.with(|l| {
        let base = l.block.nodes.as_ptr() as usize;
        let i = (node as *const Node as usize - base) / size_of::<Node>();
        debug_assert!(i < MAX_HELD, "MCS lock unlocked by a thread that did not lock it");
        l.used.set(l.used.get() & !(1 << i));
    })
}

pub struct RawMcsLock {
    /// The last node in the queue (the owner's when nobody waits); null when unlocked.
    tail: AtomicPtr<Node>,
    /// The owner's node; written by the new owner after acquiring, read by it in `unlock`.
    holder: AtomicPtr<Node>,
}

/// Turns a node pointer found in a lock back into a reference.
fn node_ref(p: *mut Node) -> &'static Node {
    // SAFETY: every pointer stored in `tail`, `next` or `holder` comes from a `&'static Node`
    // in a block leaked by the pool, which is never freed.
    unsafe { &*p }
}

unsafe impl RawMutex for RawMcsLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        tail: AtomicPtr::new(ptr::null_mut()),
        holder: AtomicPtr::new(ptr::null_mut()),
    };
    type GuardMarker = GuardNoSend;

    fn lock(&self) {
        let node = claim_node();
        let me = node as *const Node as *mut Node;
        // AcqRel: Acquire so that, when the queue was empty (pred null), we see the critical
        // section the last owner published with its Release CAS of `tail` to null; Release so a
        // successor that finds our node in `tail` sees it initialised.
        let pred = self.tail.swap(me, Ordering::AcqRel);
        if !pred.is_null() {
            // Release: our predecessor reads `next` with Acquire before writing `waiting`, so
            // our initialisation of `waiting` is ordered before its hand-over store.
            node_ref(pred).next.store(me, Ordering::Release);
            // Acquire pairs with the predecessor's Release store of false in `unlock`.
            while node.waiting.load(Ordering::Acquire) {
                spin_loop();
            }
        }
        // Relaxed: only the owner reads `holder`, and the next owner writes it only after
        // acquiring, which happens after our unlock.
        self.holder.store(me, Ordering::Relaxed);
    }

    fn try_lock(&self) -> bool {
        // Look before claiming a node: a held lock fails without touching thread-locals.
        if !self.tail.load(Ordering::Relaxed).is_null() {
            return false;
        }
        let node = claim_node();
        let me = node as *const Node as *mut Node;
        // Acquire on success, for the same reason as the swap in `lock`.
        if self
            .tail
            .compare_exchange(ptr::null_mut(), me, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            self.holder.store(me, Ordering::Relaxed);
            true
        } else {
            // Never published: nobody can refer to the node.
            release_node(node);
            false
        }
    }

    unsafe fn unlock(&self) {
        let me = self.holder.load(Ordering::Relaxed);
        let node = node_ref(me);
        // Acquire: pairs with the successor's Release store of `next`.
        let mut next = node.next.load(Ordering::Acquire);
        if next.is_null() {
            // No successor visible: try to empty the queue. Release publishes the critical
            // section to whoever next finds `tail` null.
            if self
                .tail
                .compare_exchange(me, ptr::null_mut(), Ordering::Release, Ordering::Relaxed)
                .is_ok()
            {
                release_node(node);
                return;
            }
            // A successor swapped itself in but has not linked to us yet; it will shortly. (If
            // it is preempted right here, we spin until its vCPU runs: MCS's unlock can block.)
            loop {
                next = node.next.load(Ordering::Acquire);
                if !next.is_null() {
                    break;
                }
                spin_loop();
            }
        }
        // Release hands the lock and our critical section to the successor. After this store
        // nobody refers to our node any more.
        node_ref(next).waiting.store(false, Ordering::Release);
        release_node(node);
    }

    fn is_locked(&self) -> bool {
        !self.tail.load(Ordering::Relaxed).is_null()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn trylock_fails_on_a_held_lock_and_succeeds_after_unlock() {
        let l = Arc::new(RawMcsLock::INIT);
        l.lock();
        let l2 = Arc::clone(&l);
        assert!(!std::thread::spawn(move || l2.try_lock()).join().unwrap());
        // SAFETY: held by this thread.
        unsafe { l.unlock() };
        assert!(l.try_lock());
        // SAFETY: held by this thread.
        unsafe { l.unlock() };
        assert!(!l.is_locked());
    }

    #[test]
    fn one_thread_holds_two_locks_under_contention() {
        // Two threads each take A then B, in opposite release orders, while a third hammers B:
        // nodes must not be shared between the two held locks.
        let ab = crate::locks::exclusion_test::hold_two_under_contention::<RawMcsLock>(false);
        assert!(!ab.0.is_locked() && !ab.1.is_locked());
    }

    #[test]
    fn holding_more_than_max_held_panics() {
        let r = std::thread::spawn(|| {
            let locks: Vec<RawMcsLock> = (0..=MAX_HELD).map(|_| RawMcsLock::INIT).collect();
            for l in &locks {
                l.lock();
            }
        })
        .join();
        assert!(r.is_err());
    }

    #[test]
    fn node_blocks_are_recycled_across_threads() {
        let l = Arc::new(RawMcsLock::INIT);
        let before = POOL.allocated();
        for _ in 0..50 {
            let l = Arc::clone(&l);
            std::thread::spawn(move || {
                l.lock();
                // SAFETY: held by this thread.
                unsafe { l.unlock() };
            })
            .join()
            .unwrap();
        }
        // Other tests run in parallel and lease blocks too, but far fewer than 50.
        assert!(POOL.allocated() - before < 20, "blocks are not recycled");
    }
}
