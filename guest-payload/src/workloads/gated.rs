//! The workers of the timed-work lock workloads (`lock`, `mutex`): threads that prepare their
//! work themselves just before the start (each its own spinners, warmed up, so under the load
//! the run will have: [`crate::busywork`]), park at a [`StartGate`] while the main thread stamps
//! the start, run, and park at a second gate while the main thread stamps the end, so every
//! worker's CPU reading precedes it.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use super::start::StartGate;
use crate::preempt_sample::TscWindow;

/// A gate's moment on both clocks, read together while every worker is parked at it: the run's
/// elapsed time and its window on the TSC then cover the same interval (read apart, a
/// preemption of the main thread between them — one guest tick, or the vCPU's wait for a host
/// CPU under overcommit — made them differ by milliseconds).
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    pub at: Instant,
    /// `(TSC, CLOCK_MONOTONIC ns)`, [`TscWindow::read_pair`].
    pub tsc: (u64, u64),
}

impl Stamp {
    fn now() -> Self {
        Self {
            at: Instant::now(),
            tsc: TscWindow::read_pair(),
        }
    }
}

/// Workers started behind the two gates; see the module.
pub struct GatedWorkers<O> {
    handles: Vec<JoinHandle<O>>,
    gate: Arc<StartGate>,
    stop_gate: Arc<StartGate>,
}

impl<O: Send + 'static> GatedWorkers<O> {
    /// Starts `threads` threads named `name`; each runs `prepare(t)` (t from 0) before the start
    /// gate, and `work(t, prepared)` between the gates.
    pub fn spawn<P>(
        name: &str,
        threads: u32,
        prepare: impl Fn(u32) -> P + Send + Sync + 'static,
        work: impl Fn(u32, P) -> O + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        let gate = Arc::new(StartGate::new(threads as usize));
        let stop_gate = Arc::new(StartGate::new(threads as usize));
        let (prepare, work) = (Arc::new(prepare), Arc::new(work));
        let handles = (0..threads)
            .map(|t| {
                let (gate, stop_gate, prepare, work) = (
                    Arc::clone(&gate),
                    Arc::clone(&stop_gate),
                    Arc::clone(&prepare),
                    Arc::clone(&work),
                );
                std::thread::Builder::new().name(name.into()).spawn(move || {
                    let prepared = prepare(t);
                    gate.arrive();
                    let out = work(t, prepared);
                    stop_gate.arrive();
                    out
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            handles,
            gate,
            stop_gate,
        })
    }

    /// Once every worker is parked at the start gate: the start stamped and the workers released.
    pub fn start(&self) -> Stamp {
        self.gate.open_stamped(Stamp::now)
    }

    /// Once every worker is parked at the stop gate: the end stamped, and the workers released.
    pub fn stop(&self) -> Stamp {
        self.stop_gate.open_stamped(Stamp::now)
    }

    /// Every worker's outcome, in thread order.
    pub fn join(self, what: &str) -> anyhow::Result<Vec<O>> {
        self.handles
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow::anyhow!("a {what} worker panicked")))
            .collect()
    }
}
