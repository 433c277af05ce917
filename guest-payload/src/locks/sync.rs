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
    pub use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64};

    #[inline(always)]
    pub fn spin_loop() {
        std::hint::spin_loop();
    }
}

#[cfg(all(test, not(loom)))]
mod imp {
    //! std atomics with a stall hook before every operation.
    pub use super::stall::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64};

    #[inline]
    pub fn spin_loop() {
        super::stall::step(super::stall::Step::Spin);
        std::hint::spin_loop();
    }
}

#[cfg(loom)]
mod imp {
    pub use super::lazy_loom::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Waker, spin_loop};
}

pub use imp::*;
pub use std::sync::atomic::Ordering;

/// Whether `deadline` has passed. Under loom, where real time would make replays of one
/// execution diverge, every second check of a thread says yes, so the models explore both the
/// waited-out and the still-waiting branch of a timed wait.
#[inline]
pub fn expired(deadline: std::time::Instant) -> bool {
    #[cfg(loom)]
    {
        let _ = deadline;
        lazy_loom::CHECKS.with(|c| {
            c.set(c.get() + 1);
            c.get().is_multiple_of(2)
        })
    }
    #[cfg(not(loom))]
    {
        std::time::Instant::now() >= deadline
    }
}

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
    //! loom atomics behind `const` constructors (see the module comment), and spin-waits that
    //! loom can finish exploring.
    //!
    //! Loom explores every schedule, and a spin-wait is an unbounded loop: with two threads
    //! spinning at once, each one's access re-enables the other at every yield and the
    //! exploration never ends (tokio-rs/loom#162). Two reductions make the locks checkable,
    //! both sound for their safety:
    //! - [`spin_loop`]: when the value the thread last loaded is the value last written to
    //!   that atomic, re-reading cannot change what its loop decides until someone writes it
    //!   again, so the thread parks, and a [`Waker`] thread unparks it once the atomic's write
    //!   count moves. Only the waker ever yields while waiting (loom handles one such thread;
    //!   with two, it explores their alternation forever). The waker acquires nothing — it
    //!   reads only std counters — and was spawned before the workers, so the unpark, which in
    //!   loom passes the unparker's causality to the woken thread, passes nothing the woken
    //!   thread did not have: no happens-before edge is added (waking by the writer itself
    //!   would hide a missing Acquire in the wait). Otherwise (the read was stale) the thread
    //!   yields and re-reads; loom serves a thread that yielded newer stores. The one wait
    //!   that also watches a clock (pticket's timeout) reads it through [`super::expired`],
    //!   which under loom is a deterministic per-thread alternation (real time would differ
    //!   between loom's replays of an execution).
    //! - an RMW that would leave the value unchanged (a `swap` of `true` into a held
    //!   test-and-set lock, a `fetch_or` of a set bit) is a load, and a value-changing one a
    //!   CAS from what was loaded: failed attempts are then independent loads, not writes that
    //!   loom must order against each other. This over-approximates failed attempts (a load
    //!   may be stale, so an attempt may fail that a real RMW would not have) and removes no
    //!   successful one (loom may always let the load see the latest value, and the change is
    //!   a real RMW with the same ordering). An unchanged-value RMW publishes nothing in these
    //!   locks: none of them has Release semantics.
    //!
    //! Stores are modelled as swaps with the same ordering. loom orders a plain store in
    //! modification order only after what its thread has seen, so a store sequenced after
    //! an RMW can end up *before* another thread's RMW that read that first RMW — breaking RMW
    //! atomicity, which C11 guarantees. The futex mutex's `fetch_sub` + `store(0)` unlock hit
    //! it: loom let a waiter's `1 -> 2` CAS land "after" the store and reported a lost
    //! wake-up no real machine can produce. A swap is an RMW, always placed last; its read
    //! half takes the store's ordering's read side (none for Release), so it acquires nothing
    //! a store would not. (It continues release sequences where a C++20 store would end them;
    //! none of these locks relies on a release sequence ending.)
    //!
    //! The bookkeeping uses std types: loom runs one thread at a time, and it only steers the
    //! scheduler (deterministically), it synchronises nothing.
    use std::cell::Cell;
    use std::sync::OnceLock;
    use std::sync::atomic::{self, Ordering};

    /// Writes to one atomic so far, and the value of the last one (widened to u64).
    pub struct Watch {
        writes: atomic::AtomicU64,
        last: atomic::AtomicU64,
    }

    /// An atomic a thread read: which, its write count then, and the value it read.
    type Seen = Option<(*const Watch, u64, u64)>;

    loom::thread_local! {
        /// The atomic this thread last read.
        static LAST: Cell<Seen> = Cell::new(None);
        /// Deadline checks this thread made (see [`super::expired`]).
        pub(super) static CHECKS: Cell<u64> = Cell::new(0);
    }

    impl Watch {
        const fn new(init: u64) -> Self {
            Watch {
                writes: atomic::AtomicU64::new(0),
                last: atomic::AtomicU64::new(init),
            }
        }
        fn writes(&self) -> u64 {
            self.writes.load(Ordering::Relaxed)
        }
        fn read(&self, v: u64) {
            LAST.with(|l| l.set(Some((self as *const Watch, self.writes(), v))));
        }
        fn wrote(&self, v: u64) {
            self.last.store(v, Ordering::Relaxed);
            self.writes.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn spin_loop() {
        let Some((w, seen, value)) = LAST.with(Cell::get) else {
            loom::thread::yield_now();
            return;
        };
        // SAFETY: `w` is an atomic of this execution that this thread just read; the locks'
        // atomics live until the execution ends.
        let watch = unsafe { &*w };
        if watch.writes() != seen || watch.last.load(Ordering::Relaxed) != value {
            // Something newer to read (loom serves a thread newer stores after it yields).
            loom::thread::yield_now();
            return;
        }
        // We read the value the atomic holds now: until someone writes, re-reading cannot
        // change what the loop decides. Sleep until the waker sees a write.
        let parked = WAITERS.with(|w| match w.borrow_mut().as_mut() {
            Some(list) => {
                list.push((loom::thread::current(), w_addr(watch), seen));
                true
            }
            None => false,
        });
        if parked {
            loom::thread::park();
        } else {
            // No waker: wait without reading (correct, but loom may not finish with two
            // such waiters at once).
            while watch.writes() == seen {
                loom::thread::yield_now();
            }
        }
    }

    fn w_addr(w: &Watch) -> *const Watch {
        w
    }

    type Waiter = (loom::thread::Thread, *const Watch, u64);

    std::thread_local! {
        /// Threads parked in [`spin_loop`] until their atomic is written, while a [`Waker`]
        /// runs. A std thread-local: loom runs all of a model's threads on the OS thread that
        /// called `check`, and each test's model on its own.
        static WAITERS: std::cell::RefCell<Option<Vec<Waiter>>> =
            const { std::cell::RefCell::new(None) };
    }

    /// The loom thread that wakes spin-waiters (see the module comment); the models start one
    /// before their workers and drop it after joining them.
    pub struct Waker {
        stop: std::sync::Arc<atomic::AtomicBool>,
        thread: Option<loom::thread::JoinHandle<()>>,
    }

    impl Waker {
        #[allow(clippy::new_without_default)]
        pub fn new() -> Waker {
            WAITERS.with(|w| *w.borrow_mut() = Some(Vec::new()));
            let stop = std::sync::Arc::new(atomic::AtomicBool::new(false));
            let stopping = std::sync::Arc::clone(&stop);
            let thread = loom::thread::spawn(move || {
                loop {
                    let ready: Vec<loom::thread::Thread> = WAITERS.with(|w| {
                        let mut w = w.borrow_mut();
                        let list = w.as_mut().expect("waker running");
                        let mut ready = Vec::new();
                        list.retain(|(t, watch, seen)| {
                            // SAFETY: as in `spin_loop`.
                            let written = unsafe { &**watch }.writes() != *seen;
                            if written {
                                ready.push(t.clone());
                            }
                            !written
                        });
                        ready
                    });
                    for t in ready {
                        t.unpark();
                    }
                    if stopping.load(Ordering::Relaxed) {
                        return;
                    }
                    loom::thread::yield_now();
                }
            });
            Waker {
                stop,
                thread: Some(thread),
            }
        }
    }

    impl Drop for Waker {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
            WAITERS.with(|w| *w.borrow_mut() = None);
        }
    }

    /// What [`unchanged_is_a_read`] needs of a loom atomic.
    pub trait Cas {
        type V: Copy + PartialEq;
        fn wide(v: Self::V) -> u64;
        fn load(&self, o: Ordering) -> Self::V;
        fn cas(&self, c: Self::V, n: Self::V, s: Ordering, f: Ordering) -> Result<Self::V, Self::V>;
    }

    /// The failure ordering of a CAS standing for an RMW with ordering `o`.
    fn read_half(o: Ordering) -> Ordering {
        match o {
            Ordering::AcqRel | Ordering::Acquire | Ordering::SeqCst => Ordering::Acquire,
            _ => Ordering::Relaxed,
        }
    }

    /// The read-modify-write `old -> f(old)`: a load, and a CAS only if `f` changes the value
    /// (see the module comment).
    #[track_caller]
    fn unchanged_is_a_read<A: Cas>(a: &A, watch: &Watch, o: Ordering, f: impl Fn(A::V) -> A::V) -> A::V {
        let mut cur = a.load(read_half(o));
        loop {
            if f(cur) == cur {
                watch.read(A::wide(cur));
                return cur;
            }
            match a.cas(cur, f(cur), o, read_half(o)) {
                Ok(old) => {
                    watch.wrote(A::wide(f(old)));
                    return old;
                }
                Err(now) => cur = now,
            }
        }
    }

    macro_rules! lazy_atomic {
        ($name:ident, $t:ty) => {
            pub struct $name {
                init: $t,
                cell: OnceLock<loom::sync::atomic::$name>,
                watch: Watch,
            }

            // SAFETY: the loom atomic is Sync; `init` is only read; `watch` is an atomic.
            unsafe impl Sync for $name {}
            unsafe impl Send for $name {}

            impl Cas for loom::sync::atomic::$name {
                type V = $t;
                fn wide(v: $t) -> u64 {
                    u64::from(v)
                }
                #[track_caller]
                fn load(&self, o: Ordering) -> $t {
                    loom::sync::atomic::$name::load(self, o)
                }
                #[track_caller]
                fn cas(&self, c: $t, n: $t, s: Ordering, f: Ordering) -> Result<$t, $t> {
                    self.compare_exchange(c, n, s, f)
                }
            }

            #[allow(dead_code)] // the std API, not all of it used for every type
            impl $name {
                pub const fn new(v: $t) -> Self {
                    Self {
                        init: v,
                        cell: OnceLock::new(),
                        watch: Watch::new(v as u64),
                    }
                }
                #[track_caller]
                fn a(&self) -> &loom::sync::atomic::$name {
                    self.cell
                        .get_or_init(|| loom::sync::atomic::$name::new(self.init))
                }
                #[track_caller]
                pub fn load(&self, o: Ordering) -> $t {
                    let v = self.a().load(o);
                    self.watch.read(u64::from(v));
                    v
                }
                /// A store, as a swap (see "Stores" in the module comment).
                #[track_caller]
                pub fn store(&self, v: $t, o: Ordering) {
                    self.a().swap(v, o);
                    self.watch.wrote(u64::from(v));
                }
                /// A swap; one that would leave the value unchanged is a load.
                #[track_caller]
                pub fn swap(&self, v: $t, o: Ordering) -> $t {
                    unchanged_is_a_read(self.a(), &self.watch, o, |_| v)
                }
                #[track_caller]
                pub fn compare_exchange(&self, c: $t, n: $t, s: Ordering, f: Ordering) -> Result<$t, $t> {
                    let r = self.a().compare_exchange(c, n, s, f);
                    match r {
                        Ok(_) => self.watch.wrote(u64::from(n)),
                        Err(v) => self.watch.read(u64::from(v)),
                    }
                    r
                }
                #[track_caller]
                pub fn compare_exchange_weak(
                    &self,
                    c: $t,
                    n: $t,
                    s: Ordering,
                    f: Ordering,
                ) -> Result<$t, $t> {
                    self.compare_exchange(c, n, s, f)
                }
            }
        };
    }

    lazy_atomic!(AtomicU32, u32);
    lazy_atomic!(AtomicU64, u64);
    lazy_atomic!(AtomicBool, bool);

    impl AtomicU32 {
        #[track_caller]
        pub fn fetch_add(&self, v: u32, o: Ordering) -> u32 {
            let old = self.a().fetch_add(v, o);
            self.watch.wrote(u64::from(old.wrapping_add(v)));
            old
        }
        #[track_caller]
        pub fn fetch_sub(&self, v: u32, o: Ordering) -> u32 {
            let old = self.a().fetch_sub(v, o);
            self.watch.wrote(u64::from(old.wrapping_sub(v)));
            old
        }
        /// A fetch_or; one that sets no new bit is a load.
        #[track_caller]
        pub fn fetch_or(&self, v: u32, o: Ordering) -> u32 {
            unchanged_is_a_read(self.a(), &self.watch, o, |cur| cur | v)
        }
        /// A fetch_and; one that clears no bit is a load.
        #[track_caller]
        pub fn fetch_and(&self, v: u32, o: Ordering) -> u32 {
            unchanged_is_a_read(self.a(), &self.watch, o, |cur| cur & v)
        }
    }

    pub struct AtomicPtr<T> {
        init: *mut T,
        cell: OnceLock<loom::sync::atomic::AtomicPtr<T>>,
        watch: Watch,
    }

    // SAFETY: as std's AtomicPtr; `init` is only read; `watch` as above.
    unsafe impl<T> Sync for AtomicPtr<T> {}
    unsafe impl<T> Send for AtomicPtr<T> {}

    impl<T> AtomicPtr<T> {
        pub const fn new(v: *mut T) -> Self {
            Self {
                init: v,
                cell: OnceLock::new(),
                // (The initial pointer is recorded on first use: no pointer casts in a const.)
                watch: Watch::new(0),
            }
        }
        #[track_caller]
        fn a(&self) -> &loom::sync::atomic::AtomicPtr<T> {
            self.cell.get_or_init(|| {
                let init = self.init as usize as u64;
                self.watch.last.store(init, Ordering::Relaxed);
                loom::sync::atomic::AtomicPtr::new(self.init)
            })
        }
        #[track_caller]
        pub fn load(&self, o: Ordering) -> *mut T {
            let v = self.a().load(o);
            self.watch.read(v as usize as u64);
            v
        }
        #[track_caller]
        pub fn store(&self, v: *mut T, o: Ordering) {
            // As a swap, see "Stores" in the module comment.
            self.a().swap(v, o);
            self.watch.wrote(v as usize as u64);
        }
        /// The pointer locks swap in a pointer nobody else holds (their own node): a real swap.
        #[track_caller]
        pub fn swap(&self, v: *mut T, o: Ordering) -> *mut T {
            let old = self.a().swap(v, o);
            self.watch.wrote(v as usize as u64);
            old
        }
        #[track_caller]
        pub fn compare_exchange(
            &self,
            c: *mut T,
            n: *mut T,
            s: Ordering,
            f: Ordering,
        ) -> Result<*mut T, *mut T> {
            let r = self.a().compare_exchange(c, n, s, f);
            match r {
                Ok(_) => self.watch.wrote(n as usize as u64),
                Err(v) => self.watch.read(v as usize as u64),
            }
            r
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
    hooked!(AtomicU64, u64, u64::from);
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
