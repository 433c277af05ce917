//! What the owner-identity check adds to an uncontended lock + unlock, per algorithm: the same
//! binary runs the bare loop and the loop with the check, alternating, and prints medians.
//! A benchmark, not a test (`cargo run --release -p ocrig-payload --example owner_check_cost`;
//! run it under `flock /work/guest.lock` on a shared machine).

use std::cell::UnsafeCell;
use std::hint::black_box;
use std::time::Instant;

use lock_api::RawMutex;
use ocrig_payload::locks::owner::OwnerCheck;
use ocrig_payload::locks::{self, LockInfo, LockVisitor};

const OPS: u64 = 2_000_000;
const ROUNDS: usize = 15;

#[repr(align(128))]
struct Padded<T>(T);

/// The lock workload's layout: the lock on its own line, the owner cell next to the data.
struct Shared<R> {
    lock: Padded<R>,
    owner: OwnerCheck,
    data: UnsafeCell<u64>,
}

fn ns_per_op<R: RawMutex>(s: &Shared<R>, check: bool) -> f64 {
    let t = Instant::now();
    for _ in 0..OPS {
        s.lock.0.lock();
        if check {
            s.owner.enter(1);
        }
        // SAFETY: the lock is held; one thread.
        unsafe { *s.data.get() = black_box(*s.data.get() + 1) };
        if check {
            s.owner.leave(1);
        }
        // SAFETY: locked above by this thread.
        unsafe { s.lock.0.unlock() };
    }
    t.elapsed().as_nanos() as f64 / OPS as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

struct Cost;

impl LockVisitor for Cost {
    type Output = (f64, f64);
    fn visit<R: RawMutex + Send + Sync + 'static>(self, _: &'static LockInfo) -> (f64, f64) {
        let s = Shared {
            lock: Padded(R::INIT),
            owner: OwnerCheck::new(),
            data: UnsafeCell::new(0),
        };
        ns_per_op(&s, false);
        ns_per_op(&s, true);
        let (mut bare, mut checked) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            bare.push(ns_per_op(&s, false));
            checked.push(ns_per_op(&s, true));
        }
        assert_eq!(s.owner.violations(), 0);
        (median(bare), median(checked))
    }
}

fn main() {
    println!("uncontended lock+unlock, ns/op, median of {ROUNDS} alternating rounds of {OPS} ops");
    println!(
        "{:<10} {:>8} {:>12} {:>8}",
        "algo", "bare", "owner-check", "delta"
    );
    for info in locks::ALGOS {
        let (bare, checked) = locks::with_algo(info.name, Cost).expect("registered");
        println!(
            "{:<10} {bare:>8.2} {checked:>12.2} {:>+8.2}",
            info.name,
            checked - bare
        );
    }
}
