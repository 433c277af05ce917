//! Memory shared with forked children: an anonymous `MAP_SHARED` mapping, so the parent and
//! every child forked after it was made see the same values (dbench's `shm_setup`).

/// Types for which all-zero bytes are a valid value and that are safe to share across
/// processes by address (atomics and plain data, no pointers).
///
/// # Safety
/// Implementors must be valid when zero-initialised and hold no pointers or handles.
pub(crate) unsafe trait ZeroValid: Sync {}

/// `len` zero-initialised values in a shared anonymous mapping.
pub(crate) struct SharedArray<T: ZeroValid> {
    ptr: *mut T,
    len: usize,
}

// SAFETY: T is Sync (ZeroValid's bound) and the mapping lives as long as the array.
unsafe impl<T: ZeroValid> Send for SharedArray<T> {}
unsafe impl<T: ZeroValid> Sync for SharedArray<T> {}

impl<T: ZeroValid> SharedArray<T> {
    pub fn new(len: usize) -> anyhow::Result<Self> {
        let len = len.max(1);
        let bytes = len * std::mem::size_of::<T>().max(1);
        // SAFETY: an anonymous shared mapping, no fd; checked for MAP_FAILED. The kernel zeroes
        // it, and zero bytes are a valid T (ZeroValid); mmap's page alignment satisfies T's.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        anyhow::ensure!(
            p != libc::MAP_FAILED,
            "mmap of {bytes} shared bytes failed: {}",
            std::io::Error::last_os_error()
        );
        Ok(Self { ptr: p.cast(), len })
    }

    pub fn get(&self, i: usize) -> &T {
        assert!(i < self.len, "shared index {i} out of {}", self.len);
        // SAFETY: in bounds of the live mapping.
        unsafe { &*self.ptr.add(i) }
    }
}

impl<T: ZeroValid> Drop for SharedArray<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping was created in `new` with this size.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len * std::mem::size_of::<T>().max(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    struct Cell(AtomicU64);
    // SAFETY: an atomic integer, valid at zero.
    unsafe impl ZeroValid for Cell {}

    #[test]
    fn a_forked_child_writes_what_the_parent_reads() {
        let a = SharedArray::<Cell>::new(2).unwrap();
        assert_eq!(a.get(1).0.load(Ordering::Relaxed), 0);
        // SAFETY: the child only stores to shared memory and leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            a.get(1).0.store(42, Ordering::Relaxed);
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert_eq!(a.get(1).0.load(Ordering::Relaxed), 42);
    }
}
