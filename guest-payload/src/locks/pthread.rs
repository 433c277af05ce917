//! glibc's `pthread_mutex_t` (default type) behind `lock_api::RawMutex`: the baseline every
//! user-space lock is compared against. Futex-based; sleeps in the kernel when contended.

use std::cell::UnsafeCell;

use lock_api::{GuardNoSend, RawMutex};

pub struct RawPthreadMutex {
    inner: UnsafeCell<libc::pthread_mutex_t>,
}

// SAFETY: pthread mutexes are designed to be shared between threads; the UnsafeCell is only
// handed to pthread functions, which synchronise internally.
unsafe impl Sync for RawPthreadMutex {}
unsafe impl Send for RawPthreadMutex {}

unsafe impl RawMutex for RawPthreadMutex {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        inner: UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER),
    };
    // pthread requires the unlocking thread to be the owner.
    type GuardMarker = GuardNoSend;

    fn lock(&self) {
        // SAFETY: inner is an initialised mutex that never moves while locked (callers keep the
        // lock in place: it lives in an Arc or a static for its whole use).
        let rc = unsafe { libc::pthread_mutex_lock(self.inner.get()) };
        debug_assert_eq!(rc, 0);
    }

    fn try_lock(&self) -> bool {
        // SAFETY: as in lock.
        unsafe { libc::pthread_mutex_trylock(self.inner.get()) == 0 }
    }

    unsafe fn unlock(&self) {
        // SAFETY: the caller holds the lock (RawMutex contract).
        let rc = unsafe { libc::pthread_mutex_unlock(self.inner.get()) };
        debug_assert_eq!(rc, 0);
    }
}
