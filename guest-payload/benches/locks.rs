//! Lock micro-benchmarks: every registered algorithm side by side with the crates.io peers that
//! run the same algorithm (`spin::SpinMutex` for tas/ttas, `spin::TicketMutex` for ticket,
//! `parking_lot::Mutex` for the futex-based ones).
//!
//! A small custom harness (`harness = false`) so one `cargo bench --bench locks` prints one
//! table in well under a minute on 2 CPUs:
//! - uncontended: one thread, lock + `+= 1` + unlock, in ns/op;
//! - contended: T threads (2 and 4) loop lock + `+= 1` + unlock for a fixed time, in operations
//!   per second (all threads together).
//!
//! Every lock is sampled once per round, rounds interleave all locks, and the table shows
//! medians, so load from elsewhere on a shared machine hits all locks alike.
//!
//! `OCRIG_BENCH_MS` sets the contended sample length (default 100 ms). Arguments filter locks
//! by name (substring), e.g. `cargo bench --bench locks -- ticket`.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use lock_api::RawMutex;
use ocrig_payload::locks::{self, LockInfo, LockVisitor};

const UNCONTENDED_OPS: u64 = 1_000_000;
const ROUNDS: usize = 7;
const THREADS: [usize; 2] = [2, 4];

/// One mutex type under test, protecting a counter.
trait BenchLock: Send + Sync + 'static {
    fn new() -> Self;
    fn bump(&self);
}

struct Ours<R: RawMutex>(lock_api::Mutex<R, u64>);
impl<R: RawMutex + Send + Sync + 'static> BenchLock for Ours<R> {
    fn new() -> Self {
        Self(lock_api::Mutex::new(0))
    }
    #[inline]
    fn bump(&self) {
        *self.0.lock() += 1;
    }
}

struct ParkingLot(parking_lot::Mutex<u64>);
impl BenchLock for ParkingLot {
    fn new() -> Self {
        Self(parking_lot::Mutex::new(0))
    }
    #[inline]
    fn bump(&self) {
        *self.0.lock() += 1;
    }
}

struct SpinMutex(spin::mutex::SpinMutex<u64>);
impl BenchLock for SpinMutex {
    fn new() -> Self {
        Self(spin::mutex::SpinMutex::new(0))
    }
    #[inline]
    fn bump(&self) {
        *self.0.lock() += 1;
    }
}

struct TicketMutex(spin::mutex::TicketMutex<u64>);
impl BenchLock for TicketMutex {
    fn new() -> Self {
        Self(spin::mutex::TicketMutex::new(0))
    }
    #[inline]
    fn bump(&self) {
        *self.0.lock() += 1;
    }
}

/// ns per uncontended lock + increment + unlock, one sample.
fn uncontended<L: BenchLock>() -> f64 {
    let lock = L::new();
    let start = Instant::now();
    for _ in 0..UNCONTENDED_OPS {
        black_box(&lock).bump();
    }
    start.elapsed().as_nanos() as f64 / UNCONTENDED_OPS as f64
}

/// Operations per second with `threads` threads hammering one lock for `len`, one sample.
fn contended<L: BenchLock>(threads: usize, len: Duration) -> f64 {
    let lock = Arc::new(L::new());
    let stop = Arc::new(AtomicBool::new(false));
    let total = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (lock, stop, total, barrier) = (lock.clone(), stop.clone(), total.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let mut ops = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    lock.bump();
                    ops += 1;
                }
                total.fetch_add(ops, Ordering::Relaxed);
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    std::thread::sleep(len);
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    // Threads stuck behind a preempted waiter finish late; count the real duration.
    total.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

/// One sample of every metric: ns/op uncontended, then ops/s for each of [`THREADS`].
type Sampler = Box<dyn Fn(Duration) -> Vec<f64>>;

fn sampler<L: BenchLock>() -> Sampler {
    Box::new(|len| {
        let mut v = vec![uncontended::<L>()];
        v.extend(THREADS.iter().map(|&t| contended::<L>(t, len)));
        v
    })
}

struct Sample;
impl LockVisitor for Sample {
    type Output = Sampler;
    fn visit<R: RawMutex + Send + Sync + 'static>(self, _: &'static LockInfo) -> Sampler {
        sampler::<Ours<R>>()
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; everything else not starting with '-' is a name filter.
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let wanted = |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()));
    let len = Duration::from_millis(
        std::env::var("OCRIG_BENCH_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100),
    );
    println!(
        "{} CPUs online; contended samples {:?}; ops/s are all threads together",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        len
    );
    println!(
        "{:<22} {:>9} {}",
        "lock",
        "ns/op(1)",
        THREADS
            .iter()
            .map(|t| format!("{:>12}", format!("ops/s({t})")))
            .collect::<Vec<_>>()
            .join(" ")
    );

    let mut locks: Vec<(String, Sampler)> = locks::ALGOS
        .iter()
        .filter(|i| wanted(i.name))
        .map(|i| {
            (
                i.name.to_string(),
                locks::with_algo(i.name, Sample).expect("registered"),
            )
        })
        .collect();
    let peers: [(&str, Sampler); 3] = [
        ("spin::SpinMutex", sampler::<SpinMutex>()),
        ("spin::TicketMutex", sampler::<TicketMutex>()),
        ("parking_lot::Mutex", sampler::<ParkingLot>()),
    ];
    locks.extend(
        peers
            .into_iter()
            .filter(|(n, _)| wanted(n))
            .map(|(n, s)| (n.to_string(), s)),
    );

    // Rounds interleave all locks, so a burst of load from elsewhere on the machine hits every
    // lock alike instead of whichever happened to be measured then; ratios are taken per round.
    let mut samples: Vec<Vec<Vec<f64>>> = vec![Vec::new(); locks.len()];
    for _ in 0..ROUNDS {
        for ((_, sample), out) in locks.iter().zip(&mut samples) {
            out.push(sample(len));
        }
    }
    let metrics = 1 + THREADS.len();
    for ((name, _), s) in locks.iter().zip(&samples) {
        let cols: Vec<String> = (0..metrics)
            .map(|m| median(s.iter().map(|r| r[m]).collect()))
            .enumerate()
            .map(|(m, v)| {
                if m == 0 {
                    format!("{v:>9.2}")
                } else {
                    format!("{v:>12.0}")
                }
            })
            .collect();
        println!("{:<22} {}", name, cols.join(" "));
    }

    // Ours vs the peer running the same algorithm. Ratios > 1 mean ours is slower: our ns/op
    // over the peer's, and the peer's ops/s over ours (median over rounds of per-round ratios).
    let pairs = [
        ("tas", "spin::SpinMutex"),
        ("ttas", "spin::SpinMutex"),
        ("ticket", "spin::TicketMutex"),
        ("futex", "parking_lot::Mutex"),
        ("spin_park", "parking_lot::Mutex"),
    ];
    let find = |n: &str| locks.iter().position(|(name, _)| name == n).map(|i| &samples[i]);
    let mut header = false;
    for (ours, peer) in pairs {
        let (Some(o), Some(p)) = (find(ours), find(peer)) else {
            continue;
        };
        if !header {
            println!("\nslowdown vs peer (ours / peer; > 1.0 = ours slower; median of per-round ratios)");
            header = true;
        }
        let ratio = |m: usize| {
            median(
                o.iter()
                    .zip(p)
                    .map(|(o, p)| if m == 0 { o[0] / p[0] } else { p[m] / o[m] })
                    .collect(),
            )
        };
        let contended: Vec<String> = THREADS
            .iter()
            .enumerate()
            .map(|(i, t)| format!("{t} threads {:>5.2}x", ratio(i + 1)))
            .collect();
        println!(
            "{:<10} vs {:<20} uncontended {:>5.2}x  {}",
            ours,
            peer,
            ratio(0),
            contended.join("  ")
        );
    }
}
