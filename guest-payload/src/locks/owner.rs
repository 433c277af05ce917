//! Owner-identity exclusion check, run in every lock run and every lock test.
//!
//! A non-atomic counter only shows an overlap of two owners if it falls in the nanoseconds
//! between one owner's load and store. Here each acquisition writes its thread's id into a
//! shared cell right after it owns the lock, does its whole hold work, and checks that the cell
//! still holds its id just before it releases; a second owner anywhere inside the first one's
//! critical section overwrites the id and is caught, however long the hold. Entering also checks
//! that the previous owner cleared the cell, which catches an owner that started before the
//! previous one finished.
//!
//! Cost: two relaxed loads and two relaxed stores to a cache line the owner already holds (it
//! sits next to the protected data), i.e. plain `mov`s on x86 — a few ns per operation, part of
//! the measured hold.
//!
//! Relaxed is right: a correct lock orders every access of one owner before the next owner's
//! (its Release/Acquire pair), so a correct lock never shows a foreign id; a broken lock may
//! show anything, and any foreign value is a violation. The cell is atomic so that a broken
//! lock makes the check fail, not the program undefined.

use std::sync::atomic::{AtomicU64, Ordering};

/// The id a thread writes into the cell: any non-zero value unique among the threads sharing
/// the lock (for example worker index + 1).
pub type OwnerId = u64;

const FREE: u64 = 0;

#[derive(Debug, Default)]
pub struct OwnerCheck {
    owner: AtomicU64,
    violations: AtomicU64,
}

impl OwnerCheck {
    pub const fn new() -> Self {
        Self {
            owner: AtomicU64::new(FREE),
            violations: AtomicU64::new(0),
        }
    }

    /// Call right after acquiring the lock.
    #[inline]
    pub fn enter(&self, me: OwnerId) {
        debug_assert_ne!(me, FREE, "owner ids must be non-zero");
        if self.owner.load(Ordering::Relaxed) != FREE {
            self.violation();
        }
        self.owner.store(me, Ordering::Relaxed);
    }

    /// Call right before releasing the lock; false (and a violation counted) when another
    /// thread wrote the cell while `me` owned the lock.
    #[inline]
    pub fn leave(&self, me: OwnerId) -> bool {
        let ok = self.owner.load(Ordering::Relaxed) == me;
        if !ok {
            self.violation();
        }
        self.owner.store(FREE, Ordering::Relaxed);
        ok
    }

    #[cold]
    fn violation(&self) {
        self.violations.fetch_add(1, Ordering::Relaxed);
    }

    /// Overlaps seen so far (must stay 0).
    pub fn violations(&self) -> u64 {
        self.violations.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_owner_inside_the_first_ones_section_is_caught() {
        let c = OwnerCheck::new();
        c.enter(1);
        assert!(c.leave(1));
        assert_eq!(c.violations(), 0);
        // Thread 2 "acquires" while 1 still holds: both the entry and 1's exit see it.
        c.enter(1);
        c.enter(2);
        assert!(!c.leave(1));
        assert_eq!(c.violations(), 2);
    }
}
