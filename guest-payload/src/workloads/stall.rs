//! A known guest preemption, for tests (`lock --debug-guest-stall CPU:ON_MS:PERIOD_MS`): a
//! thread pinned to one guest CPU at SCHED_FIFO that takes it for ON_MS every PERIOD_MS of the
//! run's window (the first PERIOD_MS in), so the lock worker on that CPU is switched out by the guest
//! for that long. It times its own bursts on the TSC the stretched intervals are timed on, so a
//! report carries its own ground truth: each burst should come back as a stretched hold or
//! hand-over labelled guest, with the guest's runqueue wait to match.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::preempt_sample::ticks;

/// `CPU:ON_MS:PERIOD_MS` as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StallSpec {
    pub cpu: usize,
    pub on_ms: u64,
    pub period_ms: u64,
}

/// Parses `CPU:ON_MS:PERIOD_MS`: 0 < ON_MS < PERIOD_MS, and ON_MS at most half the period so
/// the guest's RT throttling (950 ms a second) never cuts a burst.
pub fn parse_spec(s: &str) -> Result<StallSpec, String> {
    let bad = || format!("{s:?} is not CPU:ON_MS:PERIOD_MS with 0 < ON_MS <= PERIOD_MS / 2 (e.g. 1:30:300)");
    let parts: Vec<&str> = s.split(':').collect();
    let [cpu, on, period] = parts[..] else {
        return Err(bad());
    };
    let (cpu, on_ms, period_ms) = (
        cpu.parse().map_err(|_| bad())?,
        on.parse::<u64>().map_err(|_| bad())?,
        period.parse::<u64>().map_err(|_| bad())?,
    );
    if on_ms == 0 || on_ms * 2 > period_ms {
        return Err(bad());
    }
    Ok(StallSpec {
        cpu,
        on_ms,
        period_ms,
    })
}

/// One burst: its start from the window's start on the TSC, and its length, ns.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Burst {
    pub at_ns: i64,
    pub len_ns: u64,
}

/// The `debug_guest_stall` object of a lock report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StallReport {
    #[serde(flatten)]
    pub spec: StallSpec,
    pub bursts: Vec<Burst>,
}

pub struct Stall {
    spec: StallSpec,
    /// Dropped or sent to: the thread stops at once, between bursts.
    stop: Sender<()>,
    origin_tick: u64,
    /// Each burst's first and last TSC reading.
    thread: JoinHandle<Vec<(u64, u64)>>,
}

impl Stall {
    /// Starts the stalling thread now (the window's start, `origin_tick` on the TSC); fails if
    /// it cannot be pinned or made SCHED_FIFO (needs root in the guest).
    pub fn start(spec: StallSpec, origin_tick: u64) -> anyhow::Result<Self> {
        let (stop, stopped) = mpsc::channel::<()>();
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("guest-stall".into())
            .spawn(move || {
                ready_tx.send(pin_fifo(spec.cpu)).ok();
                let (on, period) = (
                    Duration::from_millis(spec.on_ms),
                    Duration::from_millis(spec.period_ms),
                );
                let mut bursts = Vec::new();
                // The first burst one period in: the workers have all taken their CPUs.
                let mut next = Instant::now() + period;
                // Waits for the next burst unless told to stop meanwhile.
                while let Err(RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(next.saturating_duration_since(Instant::now()))
                {
                    let began = Instant::now();
                    let t0 = ticks();
                    while began.elapsed() < on {
                        std::hint::spin_loop();
                    }
                    bursts.push((t0, ticks()));
                    next += period;
                }
                bursts
            })?;
        ready_rx
            .recv()
            .map_err(|_| anyhow::anyhow!("the guest-stall thread died"))?
            .map_err(|e| {
                anyhow::anyhow!(
                    "--debug-guest-stall: cannot pin a SCHED_FIFO thread to CPU {}: {e}",
                    spec.cpu
                )
            })?;
        Ok(Self {
            spec,
            stop,
            origin_tick,
            thread,
        })
    }

    /// Stops the thread; its bursts timed from the window's start with the TSC at `tsc_hz` (the
    /// rate the stretched intervals are timed with).
    pub fn stop(self, tsc_hz: f64) -> anyhow::Result<StallReport> {
        let _ = self.stop.send(());
        let bursts = self
            .thread
            .join()
            .map_err(|_| anyhow::anyhow!("the guest-stall thread panicked"))?;
        let ns_per_tick = 1e9 / tsc_hz;
        let bursts = bursts
            .into_iter()
            .map(|(t0, t1)| Burst {
                at_ns: ((t0 as i128 - self.origin_tick as i128) as f64 * ns_per_tick) as i64,
                len_ns: (t1.saturating_sub(t0) as f64 * ns_per_tick) as u64,
            })
            .collect();
        Ok(StallReport {
            spec: self.spec,
            bursts,
        })
    }
}

fn pin_fifo(cpu: usize) -> Result<(), std::io::Error> {
    // SAFETY: plain syscalls on the calling thread (pid 0) with initialised arguments.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let param = libc::sched_param { sched_priority: 10 };
        if libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_are_parsed_or_refused_in_words() {
        assert_eq!(
            parse_spec("1:30:300"),
            Ok(StallSpec {
                cpu: 1,
                on_ms: 30,
                period_ms: 300
            })
        );
        for bad in ["1:30", "x:30:300", "1:0:300", "1:200:300", "1:30:300:4", ""] {
            let e = parse_spec(bad).unwrap_err();
            assert!(e.contains("CPU:ON_MS:PERIOD_MS"), "{bad}: {e}");
        }
    }
}
