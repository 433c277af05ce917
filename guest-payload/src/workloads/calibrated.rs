//! The workers of the calibrated lock workloads (`lock`, `mutex`): threads that time the busy
//! loop themselves just before the start (up to [`CALIBRATING_WORKERS`] of them, all at once,
//! so under the load the run will have), park at a [`StartGate`] while the main thread sizes
//! the work from those timings and stamps the start, run, park at a second gate while the main
//! thread stamps the end, and only then time the loop again (so no worker is measured while
//! another calibrates, and no calibration competes with the run).

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use super::start::StartGate;
use crate::busywork::{self, Calibration};

/// At most this many workers calibrate (all at once, ~10 ms): enough to see every CPU the
/// threads run on in guests of the sizes used, and to load them as the run will. The rest wait
/// at the gate and run the counts the median of these chose.
pub const CALIBRATING_WORKERS: usize = 16;

/// Workers started behind the two gates; see the module.
pub struct CalibratedWorkers<O> {
    handles: Vec<JoinHandle<(O, Option<Calibration>)>>,
    gate: Arc<StartGate>,
    stop_gate: Arc<StartGate>,
    before: Arc<Mutex<Vec<Calibration>>>,
}

impl<O: Send + 'static> CalibratedWorkers<O> {
    /// Starts `threads` threads named `name`; the first `calibrating` time the loop before the
    /// start gate and again after the stop gate. Between the gates each runs `work(t)` (t from
    /// 0): what the main thread stored while sizing the run is visible to it (the gate's mutex
    /// orders both).
    pub fn spawn(
        name: &str,
        threads: u32,
        calibrating: usize,
        work: impl Fn(u32) -> O + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        let gate = Arc::new(StartGate::new(threads as usize));
        let stop_gate = Arc::new(StartGate::new(threads as usize));
        let before = Arc::new(Mutex::new(Vec::new()));
        let work = Arc::new(work);
        let handles = (0..threads)
            .map(|t| {
                let (gate, stop_gate, before, work) = (
                    Arc::clone(&gate),
                    Arc::clone(&stop_gate),
                    Arc::clone(&before),
                    Arc::clone(&work),
                );
                let calibrates = (t as usize) < calibrating;
                std::thread::Builder::new().name(name.into()).spawn(move || {
                    if calibrates {
                        let c = busywork::calibrate();
                        before.lock().unwrap_or_else(|e| e.into_inner()).push(c);
                    }
                    gate.arrive();
                    let out = work(t);
                    stop_gate.arrive();
                    (out, calibrates.then(busywork::calibrate))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            handles,
            gate,
            stop_gate,
            before,
        })
    }

    /// Once every worker is parked at the start gate: `size` from the calibrations made before
    /// it, then the start stamped and the workers released ([`StartGate::open_with`]).
    pub fn start<T>(&self, size: impl FnOnce(Vec<Calibration>) -> T) -> (Instant, T) {
        self.gate
            .open_with(|| size(self.before.lock().unwrap_or_else(|e| e.into_inner()).clone()))
    }

    /// Once every worker is parked at the stop gate: the end stamped, and the workers released
    /// to calibrate again.
    pub fn stop(&self) -> Instant {
        self.stop_gate.open()
    }

    /// Every worker's outcome and its calibration after the run, in thread order.
    pub fn join(self, what: &str) -> anyhow::Result<Vec<(O, Option<Calibration>)>> {
        self.handles
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow::anyhow!("a {what} worker panicked")))
            .collect()
    }
}
