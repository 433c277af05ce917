//! The workers of the timed-work lock workloads (`lock`, `mutex`): threads that prepare their
//! work themselves just before the start (each its own spinners, warmed up, so under the load
//! the run will have: [`crate::busywork`]), park at a [`StartGate`] while the main thread stamps
//! the start, run, and park at a second gate while the main thread stamps the end, so every
//! worker's CPU reading precedes it.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use super::start::StartGate;

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
    pub fn start(&self) -> Instant {
        self.gate.open()
    }

    /// Once every worker is parked at the stop gate: the end stamped, and the workers released.
    pub fn stop(&self) -> Instant {
        self.stop_gate.open()
    }

    /// Every worker's outcome, in thread order.
    pub fn join(self, what: &str) -> anyhow::Result<Vec<O>> {
        self.handles
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow::anyhow!("a {what} worker panicked")))
            .collect()
    }
}
