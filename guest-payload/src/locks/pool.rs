//! Where the queue locks (`mcs`, `clh`, `qspinlock`) keep their per-thread queue nodes.
//!
//! `lock_api::RawMutex::lock` takes no node argument, so each queue lock keeps its nodes per
//! thread (in a `thread_local!`). The node *memory* must not live in the thread-local block,
//! though: a thread that exits while one of its nodes is still linked into a queue (say it
//! `mem::forget`s a guard) would leave a dangling pointer in the lock. So nodes are leaked heap
//! allocations that are never freed, handed out and taken back through a [`Pool`]: a thread takes
//! one when it first uses a lock type and gives it back when it exits (if no queue still refers
//! to it), so memory stays bounded by the number of threads alive at once, not ever created.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A free list of leaked, `'static` nodes (or per-thread node blocks) of one lock type.
pub struct Pool<T: 'static> {
    free: Mutex<Vec<&'static T>>,
    allocated: AtomicUsize,
}

impl<T: Sync + 'static> Pool<T> {
    pub const fn new() -> Self {
        Self {
            free: Mutex::new(Vec::new()),
            allocated: AtomicUsize::new(0),
        }
    }

    /// A node from the free list, or a newly leaked one built by `make` (given the number of
    /// nodes allocated before it, usable as a dense id).
    pub fn take(&'static self, make: impl FnOnce(usize) -> T) -> &'static T {
        if let Some(node) = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return node;
        }
        // Relaxed: the count is only an id source and a statistic; the node itself is handed to
        // other threads through the locks' own Release/Acquire operations.
        let id = self.allocated.fetch_add(1, Ordering::Relaxed);
        Box::leak(Box::new(make(id)))
    }

    /// Returns a node no lock refers to any more.
    pub fn give(&'static self, node: &'static T) {
        self.free.lock().unwrap_or_else(|e| e.into_inner()).push(node);
    }

    /// How many nodes were ever allocated (tests use it to check that nodes are recycled).
    #[cfg(test)]
    pub fn allocated(&self) -> usize {
        self.allocated.load(Ordering::Relaxed)
    }
}
