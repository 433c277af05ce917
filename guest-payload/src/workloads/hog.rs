//! `hog`: burns CPU on every online CPU for a fixed time — the `background: hog` load that
//! keeps the other guests' vCPUs runnable, so the host scheduler preempts the measured
//! guest's vCPUs as a real noisy neighbour would.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use serde::{Deserialize, Serialize};

use crate::env::Env;
use crate::report::Report;

#[derive(Debug, Clone, ClapArgs, Serialize, Deserialize)]
pub struct Args {
    /// How long to burn, in seconds.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Spinning threads (default: one per online CPU).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub threads: Option<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HogResult {
    pub threads: u32,
    pub seconds: f64,
    /// Busy-loop iterations per thread (how much CPU each one actually got).
    pub iterations: Vec<u64>,
}

pub fn run(args: &Args) -> anyhow::Result<Report> {
    anyhow::ensure!(
        args.seconds.is_finite() && args.seconds >= 0.0,
        "--seconds must be ≥ 0"
    );
    let threads = args.threads.unwrap_or(crate::env::online_cpus() as u32);
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                // At least one chunk: a thread the scheduler starts only after the stop (a busy
                // machine) still burns, and says so, rather than counting 0.
                let mut n = 0u64;
                loop {
                    crate::busywork::spin_iters(1000);
                    n += 1;
                    // Relaxed: the flag carries no data; join() synchronises the counts.
                    if stop.load(Ordering::Relaxed) {
                        break n;
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    stop.store(true, Ordering::Relaxed);
    let iterations: Vec<u64> = workers
        .into_iter()
        .map(|h| h.join().map_err(|_| anyhow::anyhow!("a hog thread panicked")))
        .collect::<Result<_, _>>()?;
    let elapsed = start.elapsed();
    let metrics = BTreeMap::from([("iterations".to_string(), iterations.iter().sum::<u64>() as f64)]);
    let result = HogResult {
        threads,
        seconds: args.seconds,
        iterations,
    };
    Report::new("hog", elapsed.as_nanos() as u64, Env::read(), metrics, &result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hog_burns_on_every_thread_for_the_time_asked() {
        let r = run(&Args {
            seconds: 0.2,
            threads: Some(2),
        })
        .unwrap();
        let h: HogResult = r.detail_as().unwrap();
        assert_eq!(h.iterations.len(), 2);
        assert!(h.iterations.iter().all(|&n| n > 0));
        assert!(r.elapsed_ns >= 200_000_000);
    }
}
