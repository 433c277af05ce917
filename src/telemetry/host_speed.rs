//! How steady the host's own CPU speed is: the payload's busy loop ([`spin_iters`]) timed in
//! short back-to-back samples on every CPU of a set at once, as a sweep loads them.
//!
//! Why: the payload's holds and gaps are iteration counts calibrated before the run, and its
//! self-checks hold the run's holds to what was asked (±10 %) and the calibration to itself
//! (5 %). On a host whose core speed moves — a cloud VM whose physical core is shared with
//! another tenant's hyperthread, a laptop's frequency scaling — those checks reject runs for
//! what the host did, not for what the rig did. Measured on this project's 2-CPU cloud VMs
//! (2026-12-04, idle): the same loop at 0.54 or ~1.05 ns per iteration, switching every 40 ms
//! to 2 s. Neither /proc/stat nor steal time shows it; only the loop's own speed does. So the
//! host is probed before a sweep, journaled, reported, and `ocrig doctor` says it up front.

use std::time::{Duration, Instant};

use ocrig_payload::busywork::spin_iters;
use serde::{Deserialize, Serialize};

/// A probe's sample: long enough to time well (µs), short enough to catch a state that lasts
/// tens of ms, and within a host time slice.
const SAMPLE: Duration = Duration::from_micros(500);

/// How long `ocrig run` probes before it boots anything (per CPU, all at once).
pub const PREFLIGHT: Duration = Duration::from_millis(500);

/// Above this spread (the slowest 5 % of samples against the fastest 5 %), the host's speed
/// is not steady: the same work takes more than 5 % longer at some moments than at others.
pub const STEADY_SPREAD: f64 = 1.05;

/// What a probe saw, in ns per iteration of the payload's busy loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostSpeed {
    pub cpus: Vec<usize>,
    pub samples: usize,
    pub seconds: f64,
    pub p5_ns_per_iter: f64,
    pub p50_ns_per_iter: f64,
    pub p95_ns_per_iter: f64,
    /// p95 / p5: 1.0 on a steady host.
    pub spread: f64,
    /// Share of samples more than 10 % slower than the fast state (p5), of `samples`.
    pub slow_share: f64,
}

/// A probe of the host made before a sweep ([`HostSpeed`], [`super::host_handover`]): what
/// the journal keeps, and whether and how steady the host was, in words.
pub trait HostProbe: Serialize + serde::de::DeserializeOwned {
    fn steady(&self) -> bool;
    /// One line for a person: steady or not, with the numbers and what follows.
    fn describe(&self) -> String;
}

/// A probe's samples summed up: p5 / p50 / p95, their spread (p95 / p5) and the share of
/// samples slower than the fast state (p5) by more than `slow_above`×.
pub(crate) struct Spread {
    pub p5: f64,
    pub p50: f64,
    pub p95: f64,
    pub spread: f64,
    pub slow_share: f64,
}

impl Spread {
    /// Err with fewer than 20 samples.
    pub(crate) fn of(samples: &mut [f64], slow_above: f64) -> Result<Self, String> {
        if samples.len() < 20 {
            return Err(format!("only {} samples", samples.len()));
        }
        samples.sort_by(f64::total_cmp);
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
        let (p5, p50, p95) = (at(0.05), at(0.50), at(0.95));
        let slow = samples.iter().filter(|&&s| s > p5 * slow_above).count();
        Ok(Self {
            p5,
            p50,
            p95,
            spread: p95 / p5,
            slow_share: slow as f64 / samples.len() as f64,
        })
    }
}

/// Pins the calling thread to `cpu`, or says why not.
pub(crate) fn pin_to(cpu: usize) -> Result<(), String> {
    if cpu >= rustix::thread::CpuSet::MAX_CPU {
        return Err(format!(
            "pinning to CPU {cpu}: above the {} a CPU set holds",
            rustix::thread::CpuSet::MAX_CPU
        ));
    }
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).map_err(|e| format!("pinning to CPU {cpu}: {e}"))
}

impl HostProbe for HostSpeed {
    fn steady(&self) -> bool {
        self.spread <= STEADY_SPREAD
    }

    fn describe(&self) -> String {
        let figures = format!(
            "busy loop {:.3} / {:.3} / {:.3} ns per iteration (p5 / p50 / p95 of {} samples of {} µs on CPUs {:?} at once, {:.1} s)",
            self.p5_ns_per_iter,
            self.p50_ns_per_iter,
            self.p95_ns_per_iter,
            self.samples,
            SAMPLE.as_micros(),
            self.cpus,
            self.seconds
        );
        if self.steady() {
            format!("steady: {figures}")
        } else {
            format!(
                "NOT steady, x{:.2} between its fast and slow samples, {:.0} % of samples over 10 % slower than the fast state: {figures}. \
                 Runs are judged by their undisturbed holds and gaps (the 10th percentile), so they still count, but the typical hold \
                 runs longer than asked in the slow spells (the median in each run's work_as_run says how much), and a calibration \
                 made in a long slow spell is refused and retried",
                self.spread,
                self.slow_share * 100.0
            )
        }
    }
}

/// Times the busy loop on every CPU of `cpus` at once, each thread pinned to its CPU, for
/// `total`. Err: why it could not (no CPU, a thread that could not be pinned or started).
pub fn probe(cpus: &[usize], total: Duration) -> Result<HostSpeed, String> {
    if cpus.is_empty() {
        return Err("no CPU to probe".into());
    }
    let t0 = Instant::now();
    let threads: Vec<_> = cpus
        .iter()
        .map(|&cpu| {
            std::thread::Builder::new()
                .name(format!("ocrig-speed-{cpu}"))
                .spawn(move || samples_on(cpu, total))
                .map_err(|e| format!("starting a probe thread: {e}"))
        })
        .collect::<Result<_, _>>()?;
    let mut all = Vec::new();
    for t in threads {
        all.extend(t.join().map_err(|_| "a probe thread panicked".to_string())??);
    }
    summarize(cpus, &mut all, t0.elapsed().as_secs_f64())
}

/// Samples of ns per iteration on `cpu`, back to back for `total`.
fn samples_on(cpu: usize, total: Duration) -> Result<Vec<f64>, String> {
    pin_to(cpu)?;
    // Iterations per sample from the fastest of a few short timings.
    let per_ns = (0..5)
        .map(|_| {
            let t = Instant::now();
            spin_iters(20_000);
            20_000.0 / (t.elapsed().as_nanos().max(1) as f64)
        })
        .fold(0.0, f64::max);
    let iters = ((SAMPLE.as_nanos() as f64 * per_ns) as u64).max(1000);
    let end = Instant::now() + total;
    let mut out = Vec::new();
    while Instant::now() < end {
        let t = Instant::now();
        spin_iters(iters);
        out.push(t.elapsed().as_nanos() as f64 / iters as f64);
    }
    Ok(out)
}

fn summarize(cpus: &[usize], samples: &mut [f64], seconds: f64) -> Result<HostSpeed, String> {
    let s = Spread::of(samples, 1.10)?;
    Ok(HostSpeed {
        cpus: cpus.to_vec(),
        samples: samples.len(),
        seconds,
        p5_ns_per_iter: s.p5,
        p50_ns_per_iter: s.p50,
        p95_ns_per_iter: s.p95,
        spread: s.spread,
        slow_share: s.slow_share,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_of_two_speed_states_is_not_steady_and_one_state_is() {
        // 70 % of samples at 0.54 ns/iter, 30 % at 1.05: this project's VMs on 2026-12-04.
        let mut two: Vec<f64> = (0..100).map(|i| if i % 10 < 7 { 0.54 } else { 1.05 }).collect();
        let s = summarize(&[0, 1], &mut two, 1.0).unwrap();
        assert_eq!((s.p5_ns_per_iter, s.p95_ns_per_iter), (0.54, 1.05));
        assert!((s.slow_share - 0.30).abs() < 1e-9, "{}", s.slow_share);
        assert!(!s.steady());
        assert!(s.describe().starts_with("NOT steady, x1.94"), "{}", s.describe());
        let mut one: Vec<f64> = (0..100).map(|i| 0.54 + (i % 3) as f64 * 0.005).collect();
        let s = summarize(&[0], &mut one, 1.0).unwrap();
        assert!(s.steady(), "{}", s.describe());
        assert_eq!(s.slow_share, 0.0);
        assert!(summarize(&[0], &mut [1.0; 5], 1.0).is_err());
    }

    #[test]
    fn a_probe_times_every_cpu_of_the_set() {
        let cpus = crate::host::allowed_cpus();
        let s = probe(&cpus[..1], Duration::from_millis(100)).unwrap();
        // 100 ms of 0.5 ms samples: about 200, fewer when the host is slow or busy.
        assert!(s.samples >= 20, "{s:?}");
        assert!(s.p5_ns_per_iter > 0.0 && s.p5_ns_per_iter <= s.p50_ns_per_iter);
        assert!(s.p50_ns_per_iter <= s.p95_ns_per_iter);
        assert!(probe(&[], Duration::from_millis(10)).is_err());
    }
}
