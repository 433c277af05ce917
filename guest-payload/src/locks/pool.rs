//! Where the queue locks (`mcs`, `clh`, `qspinlock`) keep their per-thread queue nodes.
//!
//! `lock_api::RawMutex::lock` takes no node argument, so each queue lock keeps its nodes per
//! thread (in a `thread_local!`). The node *memory* must not live in the thread-local block,
//! though: a thread that exits while one of its nodes is still linked into a queue (say it
//! `mem::forget`s a guard) would leave a dangling pointer in the lock. So nodes are leaked heap
//! allocations that are never freed, handed out and taken back through a [`Pool`]: a thread takes
//! one when it first uses a lock type and gives it back when it exits (if no queue still refers
//! to it), so memory stays bounded by the number of threads alive at once, not ever created.
//!
//! Under loom each model execution has its own pool (a `loom::lazy_static`, see `sync.rs`),
//! whose nodes are freed when the execution ends, and the locks' thread-local destructors do not
//! give nodes back (they are compiled out): loom may run a thread's thread-local destructors
//! after the execution has dropped its statics. Instead each queue lock exposes, under loom,
//! `loom_thread_exit()`, which runs the very body of its destructor, and the models call it as
//! a thread's last step; the free list is then a loom mutex, so a node handed to another thread
//! through the pool carries its happens-before edge as in the real (std mutex) pool, and
//! [`loom_reused`] tells a model that some execution really reused a node.

#[cfg(loom)]
use loom::sync::Mutex;
#[cfg(not(loom))]
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

#[cfg(loom)]
std::thread_local! {
    /// Nodes taken from a free list on this OS thread (loom runs a model's threads on the
    /// thread of its test, so this counts per model test).
    static REUSED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many nodes models on this test's thread have taken from a free list so far.
#[cfg(loom)]
pub fn loom_reused() -> u64 {
    REUSED.with(|r| r.get())
}

/// A free list of leaked, `'static` nodes (or per-thread node blocks) of one lock type.
pub struct Pool<T: 'static> {
    free: Mutex<Vec<&'static T>>,
    allocated: AtomicUsize,
    /// Every allocation (addresses), freed when the pool is dropped: only a loom execution's
    /// pool is ever dropped.
    #[cfg(loom)]
    all: std::sync::Mutex<Vec<usize>>,
}

impl<T: Sync + 'static> Pool<T> {
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self {
            free: Mutex::new(Vec::new()),
            allocated: AtomicUsize::new(0),
        }
    }

    /// (Not const under loom: its mutex registers with the running model.)
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            free: Mutex::new(Vec::new()),
            allocated: AtomicUsize::new(0),
            all: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// A node from the free list, or a newly leaked one built by `make` (given the number of
    /// nodes allocated before it, usable as a dense id).
    pub fn take(&'static self, make: impl FnOnce(usize) -> T) -> &'static T {
        if let Some(node) = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            #[cfg(loom)]
            REUSED.with(|r| r.set(r.get() + 1));
            return node;
        }
        // Relaxed: the count is only an id source and a statistic; the node itself is handed to
        // other threads through the locks' own Release/Acquire operations.
        let id = self.allocated.fetch_add(1, Ordering::Relaxed);
        let node = Box::leak(Box::new(make(id)));
        #[cfg(loom)]
        self.all
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(node as *mut T as usize);
        node
    }

    /// Returns a node no lock refers to any more (at thread exit; under loom, see above).
    pub fn give(&'static self, node: &'static T) {
        self.free.lock().unwrap_or_else(|e| e.into_inner()).push(node);
    }

    /// How many nodes were ever allocated (tests use it to check that nodes are recycled).
    #[cfg(test)]
    pub fn allocated(&self) -> usize {
        self.allocated.load(Ordering::Relaxed)
    }
}

#[cfg(loom)]
impl<T: 'static> Drop for Pool<T> {
    fn drop(&mut self) {
        for addr in self.all.get_mut().unwrap_or_else(|e| e.into_inner()).drain(..) {
            // SAFETY: leaked by `take` from a Box<T>; the execution that used it is over.
            drop(unsafe { Box::from_raw(addr as *mut T) });
        }
    }
}
