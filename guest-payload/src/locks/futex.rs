//! Futex system calls with counters, so lock results can report how often they slept and woke.
//!
//! Under loom the system call cannot be modelled, so [`wait`] and [`wake`] are emulated with
//! loom's mutex and condition variable, with the futex's semantics: `wait` checks the word and
//! queues itself atomically with respect to `wake` (the kernel's hash-bucket lock), and
//! `wake(n)` wakes at most `n` of the threads waiting on that word, in FIFO order. Real futexes
//! may also wake spuriously; callers re-check either way.

use std::sync::atomic::{AtomicU64, Ordering};

use super::sync::AtomicU32;

static WAITS: AtomicU64 = AtomicU64::new(0);
static WAKES: AtomicU64 = AtomicU64::new(0);

/// Futex calls made by this process's locks since the last [`reset_counts`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FutexCounts {
    pub waits: u64,
    pub wakes: u64,
}

pub fn counts() -> FutexCounts {
    FutexCounts {
        waits: WAITS.load(Ordering::Relaxed),
        wakes: WAKES.load(Ordering::Relaxed),
    }
}

pub fn reset_counts() {
    WAITS.store(0, Ordering::Relaxed);
    WAKES.store(0, Ordering::Relaxed);
}

/// Sleeps while `*word == expected` (spurious wake-ups allowed, callers re-check).
pub fn wait(word: &std::sync::atomic::AtomicU32, expected: u32) {
    WAITS.fetch_add(1, Ordering::Relaxed);
    sys_wait(word.as_ptr(), expected);
}

/// Wakes up to `n` waiters on `word`.
pub fn wake(word: &std::sync::atomic::AtomicU32, n: i32) {
    WAKES.fetch_add(1, Ordering::Relaxed);
    sys_wake(word.as_ptr(), n);
}

/// [`wait`] for this module's locks, whose words are [`super::sync`] atomics (emulated under
/// loom, see the module comment).
pub(super) fn wait_word(word: &AtomicU32, expected: u32) {
    WAITS.fetch_add(1, Ordering::Relaxed);
    #[cfg(not(loom))]
    sys_wait(word.as_ptr(), expected);
    #[cfg(loom)]
    emulated::wait(word, expected);
}

/// [`wake`] for this module's locks.
pub(super) fn wake_word(word: &AtomicU32, n: i32) {
    WAKES.fetch_add(1, Ordering::Relaxed);
    #[cfg(not(loom))]
    sys_wake(word.as_ptr(), n);
    #[cfg(loom)]
    emulated::wake(word, n);
}

fn sys_wait(word: *mut u32, expected: u32) {
    // SAFETY: callers pass a valid, aligned u32 that lives for the duration of the call; no
    // timeout.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word,
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            std::ptr::null::<libc::timespec>(),
        );
    }
}

fn sys_wake(word: *mut u32, n: i32) {
    // SAFETY: callers pass a valid, aligned u32.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word,
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            n,
        );
    }
}

#[cfg(loom)]
mod emulated {
    use super::AtomicU32;
    use loom::sync::{Condvar, Mutex};
    use std::sync::atomic::Ordering;

    /// Waiters as (word address, ticket), oldest first.
    #[derive(Default)]
    struct Queue {
        waiters: Vec<(usize, u64)>,
        next_ticket: u64,
    }

    loom::lazy_static! {
        static ref FUTEX: (Mutex<Queue>, Condvar) = (Mutex::new(Queue::default()), Condvar::new());
    }

    pub fn wait(word: &AtomicU32, expected: u32) {
        let (queue, cv) = &*FUTEX;
        let mut q = queue.lock().unwrap();
        // Checked under the queue lock, as the kernel checks under the hash-bucket lock: a
        // waker that changed the word before taking the lock is seen here, one that changes it
        // later finds us queued.
        if word.load(Ordering::Relaxed) != expected {
            return;
        }
        let me = q.next_ticket;
        q.next_ticket += 1;
        let addr = word as *const AtomicU32 as usize;
        q.waiters.push((addr, me));
        while q.waiters.contains(&(addr, me)) {
            q = cv.wait(q).unwrap();
        }
    }

    pub fn wake(word: &AtomicU32, n: i32) {
        let (queue, cv) = &*FUTEX;
        let mut q = queue.lock().unwrap();
        let addr = word as *const AtomicU32 as usize;
        let mut left = n.max(0) as usize;
        let before = q.waiters.len();
        q.waiters.retain(|&(a, _)| {
            if a == addr && left > 0 {
                left -= 1;
                false
            } else {
                true
            }
        });
        if q.waiters.len() != before {
            cv.notify_all();
        }
    }
}
