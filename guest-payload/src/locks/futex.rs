//! Futex system calls with counters, so lock results can report how often they slept and woke.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

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
pub fn wait(word: &AtomicU32, expected: u32) {
    WAITS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: word is a valid, aligned u32 for the duration of the call; no timeout.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            std::ptr::null::<libc::timespec>(),
        );
    }
}

/// Wakes up to `n` waiters on `word`.
pub fn wake(word: &AtomicU32, n: i32) {
    WAKES.fetch_add(1, Ordering::Relaxed);
    // SAFETY: word is a valid, aligned u32.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            n,
        );
    }
}
