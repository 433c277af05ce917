//! A user-space model of the Linux kernel's queued spinlock (kernel/locking/qspinlock.c):
//! one 32-bit word, a pending-bit path for the first waiter and an MCS queue for the rest.
//!
//! The word (same layout as Linux with fewer than 16K CPUs):
//!
//! ```text
//!  31          18 17 16 15     9  8  7        0
//! | thread id+1  | idx |  unused  | P | locked  |
//! ```
//!
//! `locked` is 1 while held, `P` (pending) marks the one waiter spinning on the word itself, and
//! the tail names the last queued MCS node: the per-thread node block (`id`, a dense number
//! for each thread that ever queued, recycled at thread exit) and the node index inside it
//! (`idx`, the nesting level — Linux uses it for interrupt contexts; in user space only signal
//! handlers would nest, so it is almost always 0). A thread never needs a node while *holding*
//! a qspinlock, only while queueing for one: it leaves the queue when it takes the lock, so
//! holding any number of qspinlocks at once is fine. Beyond [`MAX_NODES`] nesting levels, or if
//! thread ids run out, a waiter spins on `try_lock` instead of queueing, as Linux does.
//!
//! Transitions (tail, pending, locked), following the kernel's comments:
//! - uncontended: `0,0,0 -> 0,0,1` with one CAS;
//! - first waiter: `0,0,1 -> 0,1,1`, spins on the word until the owner leaves, then
//!   `0,1,0 -> 0,0,1` (no queue node, no cache line other than the lock's touched);
//! - further waiters: publish themselves as tail, wait until they head the MCS queue, then wait
//!   for `*,0,0` and take the lock, clearing the tail if they are the last (`n,0,0 -> 0,0,1`)
//!   or handing queue-headship to the next node otherwise.
//!
//! Unlock is one atomic subtract of the locked byte (Linux stores a byte; mixed-size atomics
//! are not allowed in Rust, so every access here is to the whole word).
//!
//! Under vCPU preemption qspinlock is FIFO in its queue (like MCS) but the pending waiter and
//! any newcomer race for the word, so it is not strictly fair. Preemption of each role:
//! - *owner*: stalls everyone.
//! - *next waiter*: the pending waiter, preempted, stalls the queue head, which waits for
//!   `pending` to clear; the queue head, preempted, stalls all queued waiters (newcomers can
//!   take the pending slot only while no tail exists, i.e. not then).
//! - *queued waiter*: like MCS, one preempted between publishing its tail and linking stalls
//!   the head's hand-over (the head waits for the link after taking the lock).
//! - *newcomer*: one preempted between reading the word and its `fetch_or(PENDING)` may set a
//!   pending bit long after the word changed; it then sees the tail and undoes the bit. Every
//!   other thread must tolerate that transient bit: the head tries `n,0,0 -> 0,0,1` once and
//!   otherwise sets locked with an OR (issue 9: retrying the CAS erased the bit, the undo then
//!   cleared another waiter's, and the word underflowed).
//!
//! Linux's paravirt variant (pv_wait / pv_kick, halting in the hypervisor) is what fixes the
//! stalls in guests; this one has none.

use std::cell::Cell;
use std::ptr;

use lock_api::{GuardSend, RawMutex};

use super::pool::Pool;
use super::sync::{AtomicBool, AtomicPtr, AtomicU32, Ordering, global, spin_loop, thread_local};

pub const LOCKED_VAL: u32 = 1;
pub const LOCKED_MASK: u32 = 0xff;
pub const PENDING_VAL: u32 = 1 << 8;
pub const LOCKED_PENDING_MASK: u32 = 0xffff;
pub const TAIL_IDX_OFFSET: u32 = 16;
pub const TAIL_IDX_BITS: u32 = 2;
pub const TAIL_ID_OFFSET: u32 = TAIL_IDX_OFFSET + TAIL_IDX_BITS;
pub const TAIL_MASK: u32 = !LOCKED_PENDING_MASK;
/// Queue nodes per thread (nesting levels), as in Linux.
pub const MAX_NODES: usize = 1 << TAIL_IDX_BITS;
/// Thread ids that fit the tail (id + 1 is stored, so that tail 0 means "no queue").
pub const MAX_IDS: usize = (1 << (32 - TAIL_ID_OFFSET)) - 1;
/// How long a would-be pending waiter waits for an in-flight `0,1,0 -> 0,0,1` hand-over.
const PENDING_LOOPS: u32 = 64;

/// The tail value for node `idx` of thread `id`.
pub const fn encode_tail(id: usize, idx: usize) -> u32 {
    (((id + 1) as u32) << TAIL_ID_OFFSET) | ((idx as u32) << TAIL_IDX_OFFSET)
}

/// `(id, idx)` of a non-zero tail.
pub const fn decode_tail(tail: u32) -> (usize, usize) {
    (
        ((tail >> TAIL_ID_OFFSET) - 1) as usize,
        ((tail >> TAIL_IDX_OFFSET) & ((1 << TAIL_IDX_BITS) - 1)) as usize,
    )
}

#[repr(align(64))]
struct QNode {
    /// The next queued node, set by its owner after it published itself as tail.
    next: AtomicPtr<QNode>,
    /// Set by the predecessor when this node becomes the head of the queue.
    head: AtomicBool,
}

struct Block {
    /// Index into [`BLOCKS`], or None when ids ran out.
    id: Option<usize>,
    nodes: [QNode; MAX_NODES],
}

/// Thread ids handed out (block ids): every id the tail can encode, except under loom, where a
/// model has a handful of threads and each execution builds its own table.
const REGISTERED_IDS: usize = if cfg!(loom) { 8 } else { MAX_IDS };

global! {
    static POOL: Pool<Block> = Pool::new();
}
global! {
    /// id -> block, so a tail in the lock word can be turned back into a node.
    static BLOCKS: [AtomicPtr<Block>; REGISTERED_IDS] =
        [const { AtomicPtr::new(ptr::null_mut()) }; REGISTERED_IDS];
}

/// This thread's node block and current nesting depth (nodes in use).
struct Lease {
    block: &'static Block,
    depth: Cell<usize>,
}

impl Lease {
    /// At thread exit: nodes are only in use while this thread waits inside `lock`, never at
    /// thread exit, so the block goes back to the pool.
    fn give_back(&self) {
        POOL.give(self.block);
    }
}

#[cfg(not(loom))] // see pool.rs
impl Drop for Lease {
    fn drop(&mut self) {
        self.give_back();
    }
}

/// Under loom, what this thread's exit does (see pool.rs); the thread must not use qspinlock
/// after.
#[cfg(loom)]
pub fn loom_thread_exit() {
    LEASE.with(|l| l.give_back());
}

thread_local! {
    static LEASE: Lease = Lease {
        block: lease_block(),
        depth: Cell::new(0),
    };
}

fn lease_block() -> &'static Block {
    let block = POOL.take(|n| Block {
        id: (n < REGISTERED_IDS).then_some(n),
        nodes: std::array::from_fn(|_| QNode {
            next: AtomicPtr::new(ptr::null_mut()),
            head: AtomicBool::new(false),
        }),
    });
    if let Some(id) = block.id {
        // (Re-)register the block under its id. Release: a thread that decodes this id has read
        // a tail our thread published later with a Release CAS, so it sees the block anyway;
        // this keeps the table itself well-ordered.
        BLOCKS[id].store(block as *const Block as *mut Block, Ordering::Release);
    }
    block
}

fn node_of(tail: u32) -> &'static QNode {
    let (id, idx) = decode_tail(tail);
    // Acquire pairs with the Release store in `lease_block`.
    let block = BLOCKS[id].load(Ordering::Acquire);
    debug_assert!(!block.is_null());
    // SAFETY: a tail in a lock word was encoded from a registered block, and blocks are leaked
    // by the pool and never freed.
    unsafe { &(*block).nodes[idx] }
}

fn node_ref(p: *mut QNode) -> &'static QNode {
    // SAFETY: `next` pointers come from `&'static QNode`s in leaked, never-freed blocks.
    unsafe { &*p }
}

pub struct RawQspinLock {
    word: AtomicU32,
}

impl RawQspinLock {
    /// The raw lock word, for tests and diagnostics.
    pub fn word(&self) -> u32 {
        self.word.load(Ordering::Relaxed)
    }

    #[cold]
    fn lock_slow(&self, mut val: u32) {
        // Relaxed loads here only steer; every path that takes the lock does so after an
        // Acquire load or RMW that observed the previous owner's Release in `unlock`.

        // 0,1,0: a pending waiter is just turning into the owner; let it finish (bounded).
        if val == PENDING_VAL {
            for _ in 0..PENDING_LOOPS {
                spin_loop();
                val = self.word.load(Ordering::Relaxed);
                if val != PENDING_VAL {
                    break;
                }
            }
        }
        // Anyone pending or queued: queue behind them.
        if val & !LOCKED_MASK == 0 {
            // 0,0,* -> 0,1,*: try to become the pending waiter.
            val = self.word.fetch_or(PENDING_VAL, Ordering::Acquire);
            if val & !LOCKED_MASK == 0 {
                // We are pending. Wait for the owner to go; Acquire pairs with its Release.
                while self.word.load(Ordering::Acquire) & LOCKED_MASK != 0 {
                    spin_loop();
                }
                // 0,1,0 -> 0,0,1 (a tail may have appeared meanwhile: the add preserves it).
                // Relaxed: the Acquire load above already ordered us after the last owner.
                self.word
                    .fetch_add(LOCKED_VAL.wrapping_sub(PENDING_VAL), Ordering::Relaxed);
                return;
            }
            // Someone beat us to pending or queued meanwhile: undo our pending bit if we set
            // it (a queue head may be waiting for pending to clear), then queue.
            if val & PENDING_VAL == 0 {
                self.word.fetch_and(!PENDING_VAL, Ordering::Relaxed);
            }
        }
        self.lock_queued();
    }

    fn lock_queued(&self) {
        let (block, idx) = LEASE.with(|l| {
            let idx = l.depth.get();
            l.depth.set(idx + 1);
            (l.block, idx)
        });
        let leave = || LEASE.with(|l| l.depth.set(l.depth.get() - 1));
        let Some(id) = block.id.filter(|_| idx < MAX_NODES) else {
            // No node to queue with: spin on the word instead (as Linux does past MAX_NODES).
            while !self.try_lock() {
                spin_loop();
            }
            leave();
            return;
        };
        let node = &block.nodes[idx];
        let tail = encode_tail(id, idx);
        // Relaxed: published by the Release CAS that makes us the tail.
        node.head.store(false, Ordering::Relaxed);
        node.next.store(ptr::null_mut(), Ordering::Relaxed);

        // p,*,* -> n,*,*: publish our node as the tail, keeping locked and pending. Release so
        // our successor (who finds our tail here) sees the node initialised; Acquire so we see
        // our predecessor's node initialised (it was published the same way).
        let mut val = self.word.load(Ordering::Relaxed);
        let old = loop {
            let new = (val & LOCKED_PENDING_MASK) | tail;
            match self
                .word
                .compare_exchange_weak(val, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(v) => break v,
                Err(v) => val = v,
            }
        };
        if old & TAIL_MASK != 0 {
            // Link behind the previous tail and wait to become the queue head. Release orders
            // our node's initialisation before the predecessor's hand-over store to it.
            node_of(old & TAIL_MASK)
                .next
                .store(node as *const QNode as *mut QNode, Ordering::Release);
            // Acquire pairs with the predecessor's Release store of `head`.
            while !node.head.load(Ordering::Acquire) {
                spin_loop();
            }
        }

        // We head the queue: wait for the owner and the pending waiter to leave (*,0,0).
        // Acquire pairs with the owner's Release in `unlock`.
        let val = loop {
            let v = self.word.load(Ordering::Acquire);
            if v & LOCKED_PENDING_MASK == 0 {
                break v;
            }
            spin_loop();
        };
        // n,0,0 -> 0,0,1: if we are the last queued, take the lock and empty the queue, with
        // ONE attempt, as Linux does. The CAS fails if someone queued behind us *or* if a
        // newcomer set a transient pending bit (it read `0,0,1` earlier, its `fetch_or` then
        // returned our tail, so it will clear the bit again and queue behind us). Retrying
        // from the failed value would write `0,0,1` over that pending bit and the newcomer's
        // later undo would clear someone else's (issue 9: the word underflowed and two
        // threads could own the lock). Either way a successor will link to our node, so
        // after a failure we take the lock with an OR and hand headship over.
        // Relaxed: the Acquire load above ordered us after the last owner.
        if val & TAIL_MASK == tail
            && self
                .word
                .compare_exchange(val, LOCKED_VAL, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            leave();
            return;
        }
        // *,*,0 -> *,*,1: with a tail present only the queue head may set locked (newcomers
        // see the tail and queue; a transient pending bit is undone by its setter), so an OR,
        // which keeps the tail and any pending bit, is enough. Relaxed as the CAS above.
        self.word.fetch_or(LOCKED_VAL, Ordering::Relaxed);
        // Hand queue-headship to our successor, which has swapped itself in and is (about to
        // be) linked. Acquire pairs with its Release store of `next`.
        let next = loop {
            let n = node.next.load(Ordering::Acquire);
            if !n.is_null() {
                break n;
            }
            spin_loop();
        };
        // Release: the successor will touch the word only after seeing this.
        node_ref(next).head.store(true, Ordering::Release);
        leave();
    }
}

unsafe impl RawMutex for RawQspinLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        word: AtomicU32::new(0),
    };
    // Holding needs no per-thread state (nodes are only used while waiting).
    type GuardMarker = GuardSend;

    #[inline]
    fn lock(&self) {
        // 0,0,0 -> 0,0,1. Acquire on success pairs with the previous owner's Release.
        if let Err(val) = self
            .word
            .compare_exchange(0, LOCKED_VAL, Ordering::Acquire, Ordering::Relaxed)
        {
            self.lock_slow(val);
        }
    }

    #[inline]
    fn try_lock(&self) -> bool {
        // Only an idle word (no owner, pending waiter or queue) can be taken without waiting.
        self.word.load(Ordering::Relaxed) == 0
            && self
                .word
                .compare_exchange(0, LOCKED_VAL, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    #[inline]
    unsafe fn unlock(&self) {
        // Clear the locked byte (it is exactly 1 while held), keeping pending and tail.
        // Release publishes the critical section to the next owner.
        self.word.fetch_sub(LOCKED_VAL, Ordering::Release);
    }

    fn is_locked(&self) -> bool {
        self.word.load(Ordering::Relaxed) & LOCKED_MASK != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn tail_encoding_round_trips_and_leaves_locked_pending_alone() {
        for (id, idx) in [(0, 0), (1, 3), (4095, 1), (MAX_IDS - 1, MAX_NODES - 1)] {
            let t = encode_tail(id, idx);
            assert_ne!(t, 0);
            assert_eq!(t & LOCKED_PENDING_MASK, 0, "tail overlaps locked/pending");
            assert_eq!(t & TAIL_MASK, t);
            assert_eq!(decode_tail(t), (id, idx));
        }
        assert_eq!(encode_tail(0, 0), 1 << 18);
        assert_eq!(encode_tail(0, 1), (1 << 18) | (1 << 16));
        assert_eq!(LOCKED_MASK & PENDING_VAL, 0);
    }

    fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
        let start = Instant::now();
        while !cond() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "timed out waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn word_goes_through_locked_pending_and_queued_states() {
        let l = Arc::new(RawQspinLock::INIT);
        assert!(l.try_lock());
        assert_eq!(l.word(), LOCKED_VAL);
        assert!(!l.try_lock());

        let spawn = |l: &Arc<RawQspinLock>| {
            let l = Arc::clone(l);
            std::thread::spawn(move || {
                l.lock();
                // SAFETY: held by this thread.
                unsafe { l.unlock() };
            })
        };
        // First waiter takes the pending bit, no queue.
        let a = spawn(&l);
        wait_for("pending", || l.word() == LOCKED_VAL | PENDING_VAL);
        // Second waiter queues: the tail names node 0 of a registered block.
        let b = spawn(&l);
        wait_for("a tail", || l.word() & TAIL_MASK != 0);
        let w = l.word();
        assert_eq!(w & LOCKED_PENDING_MASK, LOCKED_VAL | PENDING_VAL);
        let (id, idx) = decode_tail(w & TAIL_MASK);
        assert_eq!(idx, 0);
        assert!(!BLOCKS[id].load(Ordering::Relaxed).is_null());

        // SAFETY: held by this thread.
        unsafe { l.unlock() };
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(l.word(), 0, "word not idle after everyone left");
    }

    #[test]
    fn queued_waiters_exclude() {
        // The generic exclusion test rarely builds a queue (it needs an owner, a pending waiter
        // and a third thread at once); hold the lock a little so the MCS path is exercised, and
        // check that it was.
        struct Shared {
            lock: RawQspinLock,
            counter: std::cell::UnsafeCell<u64>,
            queued_seen: AtomicU32,
        }
        // SAFETY: counter is only touched with the lock held.
        unsafe impl Sync for Shared {}
        let s = Arc::new(Shared {
            lock: RawQspinLock::INIT,
            counter: std::cell::UnsafeCell::new(0),
            queued_seen: AtomicU32::new(0),
        });
        let deadline = Instant::now() + Duration::from_secs(1);
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let s = Arc::clone(&s);
                std::thread::spawn(move || {
                    let mut done = 0u64;
                    while done < 20_000 && (!done.is_multiple_of(64) || Instant::now() < deadline) {
                        s.lock.lock();
                        // SAFETY: we hold the lock.
                        unsafe {
                            let v = std::ptr::read_volatile(s.counter.get());
                            for _ in 0..50 {
                                spin_loop();
                            }
                            std::ptr::write_volatile(s.counter.get(), v + 1);
                        }
                        if s.lock.word() & TAIL_MASK != 0 {
                            s.queued_seen.fetch_add(1, Ordering::Relaxed);
                        }
                        // SAFETY: held by this thread.
                        unsafe { s.lock.unlock() };
                        done += 1;
                    }
                    done
                })
            })
            .collect();
        let rounds: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        // SAFETY: all threads joined.
        assert_eq!(unsafe { *s.counter.get() }, rounds, "lost increments");
        assert!(s.queued_seen.load(Ordering::Relaxed) > 0, "no waiter ever queued");
        assert_eq!(s.lock.word(), 0);
    }

    /// Issue 9, forced step by step through the stall hook (each pause is a preempted vCPU):
    /// owner O (this thread) holds; newcomer B reads `0,0,1` and is stopped before its
    /// `fetch_or(PENDING)`; P becomes the pending waiter and H queues behind it as head; O
    /// leaves, P takes and leaves, H reads `n,0,0` and is stopped before its CAS; B's
    /// `fetch_or` lands (`n,1,0`, B will undo) and B is stopped before its undo; H's CAS fails.
    /// The old head retried the CAS on `n,1,0`, erasing B's bit; D then became pending, B's
    /// undo cleared D's bit, and D's `fetch_add(LOCKED - PENDING)` underflowed the word (seen:
    /// `0x0007ff00`, the queue wedged for good). Fixed, H sets locked and hands over, D queues.
    #[test]
    fn regression_issue9_head_retry_erases_newcomer_pending_bit() {
        use crate::locks::owner::OwnerCheck;
        use crate::locks::sync::stall::{Gate, Step, with_hook};
        use std::sync::atomic::AtomicBool as StdBool;

        struct Shared {
            lock: RawQspinLock,
            owner: OwnerCheck,
        }
        let s = Arc::new(Shared {
            lock: RawQspinLock::INIT,
            owner: OwnerCheck::new(),
        });
        let word = |s: &Shared| s.lock.word();
        let (b_or, b_undo, h_cas, h_hold) = (
            Arc::new(Gate::default()),
            Arc::new(Gate::default()),
            Arc::new(Gate::default()),
            Arc::new(Gate::default()),
        );
        let d_spins = Arc::new(StdBool::new(false));
        // One round of lock + owner-checked section + unlock, with `hook` on every lock step
        // and `hold` run inside the section.
        let spawn = |me: u64, hook: Box<dyn FnMut(Step) + Send>, hold: Option<Arc<Gate>>| {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                with_hook(hook, || s.lock.lock());
                s.owner.enter(me);
                if let Some(g) = hold {
                    g.hold();
                }
                s.owner.leave(me);
                // SAFETY: held by this thread.
                unsafe { s.lock.unlock() };
            })
        };
        let once = |gate: &Arc<Gate>, want: fn(Step) -> bool| -> Box<dyn FnMut(Step) + Send> {
            let gate = Arc::clone(gate);
            let mut done = false;
            Box::new(move |step| {
                if !done && want(step) {
                    done = true;
                    gate.hold();
                }
            })
        };
        let no_hook = || -> Box<dyn FnMut(Step) + Send> { Box::new(|_| {}) };

        // O holds.
        s.lock.lock();
        s.owner.enter(100);
        // B: read 0,0,1, stopped before fetch_or(PENDING).
        let b_first = once(&b_or, |st| st == Step::FetchOr(PENDING_VAL.into()));
        let mut b_second = once(&b_undo, |st| st == Step::FetchAnd((!PENDING_VAL).into()));
        let mut b_first = b_first;
        let b = spawn(
            1,
            Box::new(move |st| {
                b_first(st);
                b_second(st);
            }),
            None,
        );
        b_or.wait_reached("B before its fetch_or");
        // P: pending.
        let p = spawn(2, no_hook(), None);
        wait_for("P pending", || word(&s) == LOCKED_VAL | PENDING_VAL);
        // H: queues, head; stopped before its n,0,0 -> 0,0,1 CAS.
        let h = spawn(
            3,
            once(&h_cas, |st| {
                matches!(st, Step::CompareExchange { current, new }
                    if new == u64::from(LOCKED_VAL)
                        && current as u32 & TAIL_MASK != 0
                        && current as u32 & LOCKED_PENDING_MASK == 0)
            }),
            Some(Arc::clone(&h_hold)),
        );
        wait_for("H queued", || word(&s) & TAIL_MASK != 0);
        // O leaves; P takes the lock and leaves; H reads n,0,0.
        assert!(s.owner.leave(100));
        // SAFETY: held by this thread.
        unsafe { s.lock.unlock() };
        p.join().unwrap();
        h_cas.wait_reached("H before its CAS");
        // B's fetch_or lands on n,0,0 (it sees the tail: it will undo).
        b_or.release();
        b_undo.wait_reached("B before its undo");
        assert_eq!(word(&s) & LOCKED_PENDING_MASK, PENDING_VAL);
        // H's CAS fails on n,1,0; H must take the lock without erasing B's bit.
        h_cas.release();
        wait_for("H locked", || word(&s) & LOCKED_MASK != 0);
        assert_ne!(
            word(&s) & PENDING_VAL,
            0,
            "the queue head erased the newcomer's pending bit: {:#010x}",
            word(&s)
        );
        // D arrives while H holds and B's bit is still set.
        let flag = Arc::clone(&d_spins);
        let d = spawn(
            4,
            Box::new(move |st| {
                if st == Step::Spin {
                    flag.store(true, Ordering::Relaxed);
                }
            }),
            None,
        );
        wait_for("D waiting", || d_spins.load(Ordering::Relaxed));
        // B undoes its bit and queues; H leaves.
        b_undo.release();
        h_hold.release();
        // Everyone must get through (the old code wedged here with the word underflowed).
        let start = Instant::now();
        while [&b, &h, &d].iter().any(|t| !t.is_finished()) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "wedged: word {:#010x}, owner violations {}",
                word(&s),
                s.owner.violations()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        for t in [b, h, d] {
            t.join().unwrap();
        }
        assert_eq!(s.owner.violations(), 0, "two owners at once");
        assert_eq!(word(&s), 0, "word not idle after everyone left");
    }

    #[test]
    fn one_thread_holds_two_locks_under_contention() {
        let ab = crate::locks::exclusion_test::hold_two_under_contention::<RawQspinLock>(false);
        assert_eq!((ab.0.word(), ab.1.word()), (0, 0));
    }
}
