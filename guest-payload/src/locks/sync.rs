//! What the lock files are built on — atomics, the spin-loop hint, thread-locals, statics and a
//! cycle counter — from one of three sources, so that the code that is checked is the code that
//! ships:
//!
//! - the shipped payload (and benchmarks, and integration tests): `std`, re-exported as is, so
//!   the shim costs nothing;
//! - the payload's own unit tests (`cfg(test)`): `std` atomics wrapped so that every atomic step
//!   and every spin first calls [`stall::step`], a per-thread hook through which tests inject
//!   random stalls ("this thread's vCPU was preempted here") or pause a thread at one exact step
//!   to force an interleaving;
//! - model checking (`--cfg loom`): `loom`'s atomics, thread-locals and lazy statics, so
//!   `tests/lock_loom.rs` explores the interleavings of the very same lock code.
//!
//! Loom's atomics cannot be built in a `const` (they register with the running model), but
//! `lock_api::RawMutex::INIT` must be one. Under loom the wrappers therefore create their loom
//! atomic on first use, from the const initial value. That is sound as long as the first use
//! happens-before every other one: loom itself checks it (an access concurrent with the
//! creation is reported as a causality violation, never silently accepted). Lock words that
//! several threads touch concurrently must therefore be used once before the model spawns its
//! threads (the loom tests do `lock(); unlock()` on the spawning thread's behalf first, or
//! only touch the lock from spawned threads after a first use, see `tests/lock_loom.rs`).

#[cfg(not(any(test, loom)))]
mod imp {
    pub use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32};

    #[inline(always)]
    pub fn spin_loop() {
        std::hint::spin_loop();
    }
}

#[cfg(all(test, not(loom)))]
mod imp {
    //! std atomics with a stall hook before every operation.
    pub use super::stall::{AtomicBool, AtomicPtr, AtomicU32};

    #[inline]
    pub fn spin_loop() {
        super::stall::step(super::stall::Step::Spin);
        std::hint::spin_loop();
    }
}

#[cfg(loom)]
mod imp {
    pub use super::lazy_loom::{AtomicBool, AtomicPtr, AtomicU32};

    pub fn spin_loop() {
        // A yield point for loom: spinning threads are descheduled until someone else ran.
        loom::hint::spin_loop();
    }
}

pub use imp::*;
pub use std::sync::atomic::Ordering;

#[cfg(loom)]
pub(crate) use loom::thread_local;
/// `thread_local!` from std, or from loom (whose thread-locals live and die with the model's
/// threads).
#[cfg(not(loom))]
pub(crate) use std::thread_local;

/// A `static` whose value is made by a `const` expression. Under loom each model execution
/// needs its own value (the atomics inside belong to one execution), so there it is a
/// `loom::lazy_static!`, built on first use in each execution and dropped at its end.
macro_rules! global {
    ($(#[$attr:meta])* static $name:ident: $ty:ty = $init:expr;) => {
        #[cfg(not(loom))]
        $(#[$attr])*
        static $name: $ty = $init;
        #[cfg(loom)]
        loom::lazy_static! {
            $(#[$attr])*
            static ref $name: $ty = $init;
        }
    };
}
pub(crate) use global;

#[cfg(loom)]
mod lazy_loom {
    //! loom atomics behind `const` constructors (see the module comment).
    use std::sync::OnceLock;
    use std::sync::atomic::Ordering;

    macro_rules! lazy_atomic {
        ($name:ident, $t:ty) => {
            pub struct $name {
                init: $t,
                cell: OnceLock<loom::sync::atomic::$name>,
            }

            // SAFETY: the loom atomic is Sync; `init` is only read.
            unsafe impl Sync for $name {}

            #[allow(dead_code)] // the std API, not all of it used for every type
            impl $name {
                pub const fn new(v: $t) -> Self {
                    Self {
                        init: v,
                        cell: OnceLock::new(),
                    }
                }
                #[track_caller]
                fn a(&self) -> &loom::sync::atomic::$name {
                    self.cell
                        .get_or_init(|| loom::sync::atomic::$name::new(self.init))
                }
                #[track_caller]
                pub fn load(&self, o: Ordering) -> $t {
                    self.a().load(o)
                }
                #[track_caller]
                pub fn store(&self, v: $t, o: Ordering) {
                    self.a().store(v, o)
                }
                #[track_caller]
                pub fn swap(&self, v: $t, o: Ordering) -> $t {
                    self.a().swap(v, o)
                }
                #[track_caller]
                pub fn compare_exchange(&self, c: $t, n: $t, s: Ordering, f: Ordering) -> Result<$t, $t> {
                    self.a().compare_exchange(c, n, s, f)
                }
                #[track_caller]
                pub fn compare_exchange_weak(
                    &self,
                    c: $t,
                    n: $t,
                    s: Ordering,
                    f: Ordering,
                ) -> Result<$t, $t> {
                    self.a().compare_exchange_weak(c, n, s, f)
                }
            }
        };
    }

    macro_rules! lazy_int_ops {
        ($name:ident, $t:ty) => {
            impl $name {
                #[track_caller]
                pub fn fetch_add(&self, v: $t, o: Ordering) -> $t {
                    self.a().fetch_add(v, o)
                }
                #[track_caller]
                pub fn fetch_sub(&self, v: $t, o: Ordering) -> $t {
                    self.a().fetch_sub(v, o)
                }
                #[track_caller]
                pub fn fetch_or(&self, v: $t, o: Ordering) -> $t {
                    self.a().fetch_or(v, o)
                }
                #[track_caller]
                pub fn fetch_and(&self, v: $t, o: Ordering) -> $t {
                    self.a().fetch_and(v, o)
                }
            }
        };
    }

    lazy_atomic!(AtomicU32, u32);
    lazy_int_ops!(AtomicU32, u32);
    lazy_atomic!(AtomicBool, bool);

    pub struct AtomicPtr<T> {
        init: *mut T,
        cell: OnceLock<loom::sync::atomic::AtomicPtr<T>>,
    }

    // SAFETY: as std's AtomicPtr; `init` is only read.
    unsafe impl<T> Sync for AtomicPtr<T> {}
    unsafe impl<T> Send for AtomicPtr<T> {}

    impl<T> AtomicPtr<T> {
        pub const fn new(v: *mut T) -> Self {
            Self {
                init: v,
                cell: OnceLock::new(),
            }
        }
        #[track_caller]
        fn a(&self) -> &loom::sync::atomic::AtomicPtr<T> {
            self.cell
                .get_or_init(|| loom::sync::atomic::AtomicPtr::new(self.init))
        }
        #[track_caller]
        pub fn load(&self, o: Ordering) -> *mut T {
            self.a().load(o)
        }
        #[track_caller]
        pub fn store(&self, v: *mut T, o: Ordering) {
            self.a().store(v, o)
        }
        #[track_caller]
        pub fn swap(&self, v: *mut T, o: Ordering) -> *mut T {
            self.a().swap(v, o)
        }
        #[track_caller]
        pub fn compare_exchange(
            &self,
            c: *mut T,
            n: *mut T,
            s: Ordering,
            f: Ordering,
        ) -> Result<*mut T, *mut T> {
            self.a().compare_exchange(c, n, s, f)
        }
    }
}

#[cfg(all(test, not(loom)))]
pub mod stall {
    //! The unit tests' stall hook: every atomic step and every spin of every lock first calls
    //! [`step`], which runs this thread's hook, if one is installed ([`with_hook`]). Threads
    //! without a hook (every other unit test) pay one thread-local read per step.
    use std::cell::RefCell;
    use std::sync::atomic::{self, Ordering};

    /// One step a lock is about to take. Values are widened to u64 (pointers: their address).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Step {
        Load,
        Store(u64),
        Swap(u64),
        CompareExchange {
            current: u64,
            new: u64,
        },
        FetchAdd(u64),
        FetchSub(u64),
        FetchOr(u64),
        FetchAnd(u64),
        /// One round of a spin-wait loop.
        Spin,
    }

    type Hook = Box<dyn FnMut(Step)>;

    thread_local! {
        static HOOK: RefCell<Option<Hook>> = const { RefCell::new(None) };
    }

    /// Runs `f` with `hook` called before every lock step this thread takes.
    pub fn with_hook<T>(hook: impl FnMut(Step) + 'static, f: impl FnOnce() -> T) -> T {
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                HOOK.with(|h| *h.borrow_mut() = None);
            }
        }
        HOOK.with(|h| *h.borrow_mut() = Some(Box::new(hook)));
        let _reset = Reset;
        f()
    }

    #[inline]
    pub fn step(s: Step) {
        HOOK.with(|h| {
            // A hook that itself uses a lock would re-enter: such steps are not hooked.
            if let Ok(mut h) = h.try_borrow_mut()
                && let Some(f) = h.as_mut()
            {
                f(s);
            }
        });
    }

    /// A one-shot pause point for forcing an interleaving: the thread whose hook calls
    /// [`Gate::hold`] stops there (a preempted vCPU) until the test calls [`Gate::release`].
    #[derive(Default)]
    pub struct Gate {
        state: std::sync::Mutex<(bool, bool)>,
        cv: std::sync::Condvar,
    }

    impl Gate {
        /// Called from a hook: marks the gate reached and waits for the release.
        pub fn hold(&self) {
            let mut s = self.state.lock().unwrap();
            s.0 = true;
            self.cv.notify_all();
            while !s.1 {
                s = self.cv.wait(s).unwrap();
            }
        }

        /// Waits (at most 10 s, then panics naming `what`) until a thread holds at the gate.
        pub fn wait_reached(&self, what: &str) {
            let s = self.state.lock().unwrap();
            let (s, timeout) = self
                .cv
                .wait_timeout_while(s, std::time::Duration::from_secs(10), |s| !s.0)
                .unwrap();
            assert!(!timeout.timed_out() || s.0, "never reached: {what}");
        }

        pub fn release(&self) {
            self.state.lock().unwrap().1 = true;
            self.cv.notify_all();
        }
    }

    macro_rules! hooked {
        ($name:ident, $t:ty, $w:expr) => {
            #[derive(Default)]
            pub struct $name(atomic::$name);

            #[allow(dead_code)] // the std API, not all of it used for every type
            impl $name {
                pub const fn new(v: $t) -> Self {
                    Self(atomic::$name::new(v))
                }
                #[inline]
                pub fn load(&self, o: Ordering) -> $t {
                    step(Step::Load);
                    self.0.load(o)
                }
                #[inline]
                pub fn store(&self, v: $t, o: Ordering) {
                    step(Step::Store($w(v)));
                    self.0.store(v, o)
                }
                #[inline]
                pub fn swap(&self, v: $t, o: Ordering) -> $t {
                    step(Step::Swap($w(v)));
                    self.0.swap(v, o)
                }
                #[inline]
                pub fn compare_exchange(&self, c: $t, n: $t, s: Ordering, f: Ordering) -> Result<$t, $t> {
                    step(Step::CompareExchange {
                        current: $w(c),
                        new: $w(n),
                    });
                    self.0.compare_exchange(c, n, s, f)
                }
                #[inline]
                pub fn compare_exchange_weak(
                    &self,
                    c: $t,
                    n: $t,
                    s: Ordering,
                    f: Ordering,
                ) -> Result<$t, $t> {
                    step(Step::CompareExchange {
                        current: $w(c),
                        new: $w(n),
                    });
                    self.0.compare_exchange_weak(c, n, s, f)
                }
            }
        };
    }

    hooked!(AtomicU32, u32, u64::from);
    hooked!(AtomicBool, bool, u64::from);

    impl AtomicU32 {
        /// For the futex system call, which takes the word's address.
        pub fn as_ptr(&self) -> *mut u32 {
            self.0.as_ptr()
        }
        #[inline]
        pub fn fetch_add(&self, v: u32, o: Ordering) -> u32 {
            step(Step::FetchAdd(v.into()));
            self.0.fetch_add(v, o)
        }
        #[inline]
        pub fn fetch_sub(&self, v: u32, o: Ordering) -> u32 {
            step(Step::FetchSub(v.into()));
            self.0.fetch_sub(v, o)
        }
        #[inline]
        pub fn fetch_or(&self, v: u32, o: Ordering) -> u32 {
            step(Step::FetchOr(v.into()));
            self.0.fetch_or(v, o)
        }
        #[inline]
        pub fn fetch_and(&self, v: u32, o: Ordering) -> u32 {
            step(Step::FetchAnd(v.into()));
            self.0.fetch_and(v, o)
        }
    }

    pub struct AtomicPtr<T>(atomic::AtomicPtr<T>);

    fn addr<T>(p: *mut T) -> u64 {
        p as usize as u64
    }

    impl<T> AtomicPtr<T> {
        pub const fn new(v: *mut T) -> Self {
            Self(atomic::AtomicPtr::new(v))
        }
        #[inline]
        pub fn load(&self, o: Ordering) -> *mut T {
            step(Step::Load);
            self.0.load(o)
        }
        #[inline]
        pub fn store(&self, v: *mut T, o: Ordering) {
            step(Step::Store(addr(v)));
            self.0.store(v, o)
        }
        #[inline]
        pub fn swap(&self, v: *mut T, o: Ordering) -> *mut T {
            step(Step::Swap(addr(v)));
            self.0.swap(v, o)
        }
        #[inline]
        pub fn compare_exchange(
            &self,
            c: *mut T,
            n: *mut T,
            s: Ordering,
            f: Ordering,
        ) -> Result<*mut T, *mut T> {
            step(Step::CompareExchange {
                current: addr(c),
                new: addr(n),
            });
            self.0.compare_exchange(c, n, s, f)
        }
    }
}
