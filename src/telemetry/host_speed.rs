//! How steady the host's own CPU speed is: the payload's busy loop ([`spin_iters`]) timed in
//! short back-to-back samples on every CPU of a set at once, as a sweep loads them.
//!
//! Why: on a host whose core speed moves — a cloud VM whose physical core is shared with
//! another tenant's hyperthread, a laptop's frequency scaling — everything a run does besides
//! its spun holds and gaps (the lock's own atomics and hand-overs, the guest's kernel) takes
//! longer in the slow spells, so runs spread for what the host did, not for what was compared.
//! (The holds and gaps themselves are spun to the TSC and keep their length.) Measured on this
//! project's 2-CPU cloud VMs (2026-12-04, idle): the same loop at 0.54 or ~1.05 ns per
//! iteration, switching every 40 ms to 2 s. Neither /proc/stat nor steal time shows it; only the
//! loop's own speed does. So the host is probed before a sweep, journaled, reported, and
//! `ocrig doctor` says it up front.

use std::time::{Duration, Instant};

use ocrig_payload::busywork::spin_iters;
use serde::{Deserialize, Serialize};

/// A probe's sample: long enough to time well (µs), short enough to catch a state that lasts
/// tens of ms, and within a host time slice.
const SAMPLE: Duration = Duration::from_micros(500);

/// How long `ocrig run` probes before it boots anything (per CPU, all at once).
pub const PREFLIGHT: Duration = Duration::from_secs(1);

/// The block of the noise floor a sweep journals from its preflight samples ([`preflight`]):
/// ten per CPU in [`PREFLIGHT`] (`ocrig doctor` measures 1 s blocks over 6 s instead).
pub const PREFLIGHT_BLOCK: Duration = Duration::from_millis(100);

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
    /// The same in a few words, for a one-line warning (the rest goes to the log).
    fn headline(&self) -> String;
}

/// A probe's [`HostProbe::headline`]: steady or not, its spread and slow share, what follows.
pub(crate) fn headline(steady: bool, spread: f64, slow_share: f64, follows: &str) -> String {
    format!(
        "{} (x{spread:.2} fast to slow, {:.0} % of samples slow): {follows}",
        if steady { "steady" } else { "NOT steady" },
        slow_share * 100.0
    )
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

    fn headline(&self) -> String {
        headline(
            self.steady(),
            self.spread,
            self.slow_share,
            "lock runs spread more",
        )
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
                 Holds and gaps are spun to the clock and keep their length, but a lock's own work (its atomics, its hand-overs) \
                 takes longer in the slow spells, so runs spread more and comparisons need more of them to conclude",
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
    let (per_cpu, seconds) = samples_per_cpu(cpus, total)?;
    summarize(cpus, &mut per_cpu.concat(), seconds)
}

/// The probe a sweep makes before it boots anything: one set of samples on every CPU of
/// `cpus` at once for `total`, read both as the host's speed ([`probe`]) and as its noise
/// floor in blocks of `block` ([`noise_floor`]), each Err with why not.
pub fn preflight(
    cpus: &[usize],
    total: Duration,
    block: Duration,
) -> (Result<HostSpeed, String>, Result<NoiseFloor, String>) {
    if cpus.is_empty() {
        let why = "no CPU to probe".to_string();
        return (Err(why.clone()), Err(why));
    }
    match samples_per_cpu(cpus, total) {
        Ok((per_cpu, seconds)) => (
            summarize(cpus, &mut per_cpu.concat(), seconds),
            floor_of(cpus, &per_cpu, seconds, block),
        ),
        Err(why) => (Err(why.clone()), Err(why)),
    }
}

/// [`samples_on`] every CPU of `cpus` at once, one pinned thread each: each CPU's samples in
/// time order, and the seconds it all took.
fn samples_per_cpu(cpus: &[usize], total: Duration) -> Result<(Vec<Vec<f64>>, f64), String> {
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
    let mut per_cpu = Vec::new();
    for t in threads {
        per_cpu.push(t.join().map_err(|_| "a probe thread panicked".to_string())??);
    }
    Ok((per_cpu, t0.elapsed().as_secs_f64()))
}

/// The noise floor of the measured CPUs, as `ocrig doctor` measures it: the busy loop on every
/// CPU at once for a few seconds, in 0.5 ms samples, and the same samples averaged in blocks
/// the length of a short run. The blocks' spread is how much a run of that length varies with
/// nothing but this host's own state (runs of a lock or a guest vary more, never less).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoiseFloor {
    pub cpus: Vec<usize>,
    pub seconds: f64,
    /// Per-sample ns per iteration: p10 / p50 / p90.
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
    /// The largest change between two consecutive samples of one CPU, as a factor (≥ 1).
    pub largest_step: f64,
    pub block_s: f64,
    pub blocks: usize,
    /// Coefficient of variation of the blocks' mean ns per iteration.
    pub block_cv: f64,
}

/// Measures [`NoiseFloor`] on `cpus` for `total`, in blocks of `block`.
pub fn noise_floor(cpus: &[usize], total: Duration, block: Duration) -> Result<NoiseFloor, String> {
    if cpus.is_empty() {
        return Err("no CPU to probe".into());
    }
    let (per_cpu, seconds) = samples_per_cpu(cpus, total)?;
    floor_of(cpus, &per_cpu, seconds, block)
}

fn floor_of(
    cpus: &[usize],
    per_cpu: &[Vec<f64>],
    seconds: f64,
    block: Duration,
) -> Result<NoiseFloor, String> {
    let per_block = ((block.as_secs_f64() / SAMPLE.as_secs_f64()).round() as usize).max(1);
    let mut all: Vec<f64> = per_cpu.iter().flatten().copied().collect();
    if all.len() < 20 {
        return Err(format!("only {} samples", all.len()));
    }
    all.sort_by(f64::total_cmp);
    let at = |q: f64| all[((all.len() - 1) as f64 * q).round() as usize];
    let largest_step = per_cpu
        .iter()
        .flat_map(|s| s.windows(2).map(|w| (w[0] / w[1]).max(w[1] / w[0])))
        .fold(1.0, f64::max);
    let means: Vec<f64> = per_cpu
        .iter()
        .flat_map(|s| {
            s.chunks_exact(per_block)
                .map(|c| c.iter().sum::<f64>() / c.len() as f64)
        })
        .collect();
    if means.len() < 2 {
        return Err(format!(
            "{} blocks of {:?}: too few to spread",
            means.len(),
            block
        ));
    }
    let n = means.len() as f64;
    let mean = means.iter().sum::<f64>() / n;
    let var = means.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let block_cv = var.sqrt() / mean;
    Ok(NoiseFloor {
        cpus: cpus.to_vec(),
        seconds,
        p10: at(0.10),
        p50: at(0.50),
        p90: at(0.90),
        largest_step,
        block_s: block.as_secs_f64(),
        blocks: means.len(),
        block_cv,
    })
}

impl NoiseFloor {
    /// In words, with `detectable(cv, runs)`: the smallest effect a comparison of `runs` runs a
    /// side could detect at coefficient of variation `cv` (the statistics are `stats::power`'s,
    /// which the caller brings: telemetry sits below stats).
    pub fn describe(&self, detectable: impl Fn(f64, usize) -> Option<f64>) -> String {
        let mde = |n| detectable(self.block_cv, n).map_or("?".into(), |m| format!("{:.1} %", m * 100.0));
        format!(
            "busy loop {:.3} / {:.3} / {:.3} ns per iteration (p10 / p50 / p90 on CPUs {:?}, {:.1} s), largest step between two \
             0.5 ms samples x{:.2}; {} blocks of {:.1} s vary by CV {:.2} %, so with nothing but this host's own noise a comparison \
             of 3 runs a side could detect {} and of 10 runs {} (two-sided 5 %, 80 % power; runs of a lock or a guest vary more)",
            self.p10,
            self.p50,
            self.p90,
            self.cpus,
            self.seconds,
            self.largest_step,
            self.blocks,
            self.block_s,
            self.block_cv * 100.0,
            mde(3),
            mde(10)
        )
    }
}

/// Samples of ns per iteration on `cpu`, back to back for `total`.
fn samples_on(cpu: usize, total: Duration) -> Result<Vec<f64>, String> {
    pin_to(cpu)?;
    // Steps of a sixteenth of a sample at the fastest of a few short timings; a sample is as
    // many steps as fit in [`SAMPLE`] of wall time, so every sample (and every block of them,
    // [`floor_of`]) lasts its time whatever the CPU's speed: sized in iterations, a probe that
    // fell in a slow spell made half as many samples, and half as many blocks.
    let per_ns = (0..5)
        .map(|_| {
            let t = Instant::now();
            spin_iters(20_000);
            20_000.0 / (t.elapsed().as_nanos().max(1) as f64)
        })
        .fold(0.0, f64::max);
    let step = ((SAMPLE.as_nanos() as f64 * per_ns / 16.0) as u64).max(100);
    let end = Instant::now() + total;
    let mut out = Vec::new();
    while Instant::now() < end {
        let t = Instant::now();
        let until = t + SAMPLE;
        let mut iters = 0;
        while Instant::now() < until {
            spin_iters(step);
            iters += step;
        }
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

    /// Blocks of a steady host barely vary; a host switching speed between blocks does (the
    /// effect a comparison could detect at that spread: stats::power's
    /// `detectable_at_cv_is_cohens_d_times_it`).
    #[test]
    fn the_noise_floor_is_the_spread_of_run_length_blocks() {
        let block = Duration::from_millis(5); // 10 samples a block
        let steady: Vec<f64> = (0..200).map(|i| 1.0 + (i % 2) as f64 * 0.01).collect();
        let f = floor_of(&[0], &[steady], 0.1, block).unwrap();
        assert_eq!((f.blocks, f.largest_step), (20, 1.01));
        assert!(f.block_cv < 1e-9, "{f:?}");
        // Every other block 20 % slower.
        let two: Vec<f64> = (0..200)
            .map(|i| if (i / 10) % 2 == 0 { 1.0 } else { 1.2 })
            .collect();
        let f = floor_of(&[0], &[two], 0.1, block).unwrap();
        assert!(
            (f.largest_step - 1.2).abs() < 1e-12 && (f.p10, f.p90) == (1.0, 1.2),
            "{f:?}"
        );
        let cv = f.block_cv;
        assert!((cv - 0.1 / 1.1 * (20.0f64 / 19.0).sqrt()).abs() < 1e-9, "{cv}");
        let words = f.describe(|cv, runs| Some(cv * runs as f64));
        assert!(words.contains("of 3 runs a side could detect"), "{words}");
        assert!(floor_of(&[0], &[vec![1.0; 5]], 0.1, block).is_err());
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

    /// A sweep's preflight reads one set of samples twice: the speed over all of them, the
    /// noise floor over its blocks (400 ms in 20 ms blocks: about 20 per CPU).
    #[test]
    fn a_preflight_gives_the_speed_and_the_noise_floor_of_the_same_samples() {
        let cpus = crate::host::allowed_cpus();
        // 400 ms: even with the CPU shared with the full tier's guests, enough 20 ms blocks.
        let (speed, floor) = preflight(&cpus[..1], Duration::from_millis(400), Duration::from_millis(20));
        let (speed, floor) = (speed.unwrap(), floor.unwrap());
        assert_eq!(
            (speed.cpus.clone(), floor.cpus.clone()),
            (cpus[..1].to_vec(), cpus[..1].to_vec())
        );
        assert_eq!(speed.seconds, floor.seconds);
        // Blocks of 40 samples (20 ms of 0.5 ms ones) of the one CPU: as many as its samples
        // fill (a sample is shorter while the host runs fast, so their count varies).
        assert!(
            floor.blocks >= 2 && floor.blocks == speed.samples / 40,
            "{speed:?} {floor:?}"
        );
        assert!(floor.p10 <= floor.p50 && floor.p50 <= floor.p90, "{floor:?}");
        assert!(
            speed.p5_ns_per_iter <= floor.p10 && floor.p90 <= speed.p95_ns_per_iter,
            "{speed:?} {floor:?}"
        );
        assert!(floor.block_cv.is_finite() && floor.block_cv >= 0.0, "{floor:?}");
        let (a, b) = preflight(&[], Duration::from_millis(10), Duration::from_millis(1));
        assert!(a.is_err() && b.is_err());
    }
}
