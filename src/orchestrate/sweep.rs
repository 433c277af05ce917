//! The one sweep loop of `ocrig run`. A sweep on one host is the case H = 1 of a sweep over H
//! interchangeable hosts: every host gets the same plan (its own CPUs), measured run slot `r`
//! of every cell goes to host `r mod H`, one scheduler per host runs its share at the same
//! time, and all of them journal into one journal (each record naming its host when there are
//! several). So stopping rules (judged on the pooled valid results of a cell), journal appends,
//! the stop on a failed append, resume and warm-ups (on every fresh guest set of every host)
//! behave the same for one host and for many.
//!
//! A host that cannot be reached any more ends its scheduler; once the others are done, the
//! runs still without a valid result are spread over the hosts left (or, with none left, wait
//! for `--resume`). Anything else that ends a scheduler with an error — a journal append that
//! failed above all — ends every host's scheduler at once, and with them their guests.

use std::future::Future;
use std::path::Path;
use std::sync::Mutex;

use futures::future::try_join_all;
use tokio::signal::unix::{SignalKind, signal};

use super::Interrupted;
use crate::executor::Executor;
use crate::sweep::plan::Plan;
use crate::sweep::progress::Progress;
use crate::sweep::scheduler::{self, HostLost, HostShare, PhaseTotals, SharedJournal};

/// One host of a sweep, checked and planned.
pub(crate) struct SweepHost {
    /// Recorded in every record of a sweep over several hosts; None for a sweep's one host.
    pub label: Option<String>,
    pub plan: Plan,
}

impl SweepHost {
    fn name(&self) -> &str {
        self.label.as_deref().unwrap_or("(the sweep's host)")
    }
}

/// Sweeps `hosts` (one unlabelled host for a sweep on one host), each host `h` on an executor
/// from `exec_for(h)`, appending to `journal` (which holds the resumed journal's records).
pub(crate) async fn sweep_hosts<E: Executor>(
    hosts: &[SweepHost],
    exec_for: impl Fn(usize) -> E,
    journal: &Mutex<SharedJournal>,
    progress: &Progress,
    results_dir: &Path,
) -> anyhow::Result<PhaseTotals> {
    let mut totals = PhaseTotals::default();
    let mut alive: Vec<usize> = (0..hosts.len()).collect();
    let mut pass = 0;
    loop {
        pass += 1;
        let of = alive.len();
        let jobs = alive.iter().enumerate().map(|(index, &h)| {
            let host = &hosts[h];
            let share = HostShare {
                label: host.label.clone(),
                index,
                of,
            };
            let exec = exec_for(h);
            async move {
                match scheduler::run_with(&host.plan, exec, journal, progress, share).await {
                    // A lost host ends only its share; anything else ends every host's
                    // scheduler at once: try_join_all drops the other futures, and with them
                    // their executors and guests.
                    Err(e) if !e.is::<HostLost>() => Err(match &host.label {
                        Some(l) => e.context(format!("the sweep on host {l}")),
                        _ => e,
                    }),
                    r => Ok((h, r)),
                }
            }
        });
        let mut lost = Vec::new();
        for (h, r) in try_join_all(jobs).await? {
            match r {
                Ok(t) => add(&mut totals, &t),
                Err(e) => match e.downcast_ref::<HostLost>() {
                    Some(l) => {
                        progress.println(&format!("ocrig: {l}"));
                        lost.push(h);
                    }
                    None => return Err(e),
                },
            }
        }
        if lost.is_empty() {
            return Ok(totals);
        }
        alive.retain(|h| !lost.contains(h));
        let done = {
            let j = journal.lock().unwrap_or_else(|e| e.into_inner());
            crate::journal::accounting::counted_runs(&j.records)
        };
        if alive.is_empty() {
            anyhow::bail!(
                "every host was lost; {done} finished runs are in the journal. Continue with `ocrig run --resume {}` \
                 once a host answers",
                results_dir.display()
            );
        }
        let names = |hs: &[usize]| hs.iter().map(|&h| hosts[h].name()).collect::<Vec<_>>().join(", ");
        let msg = format!(
            "ocrig: pass {pass}: {done} finished runs kept; the unfinished runs of {} go to {}",
            names(&lost),
            names(&alive)
        );
        progress.println(&msg);
        // Said once on the terminal; the log keeps it.
        tracing::info!("{msg}");
    }
}

/// Runs a sweep until it is done or a signal arrives. On a signal every local guest process
/// is killed first ([`crate::backend::live`]), then the sweep is dropped, which drops every
/// executor and the rest of every live guest: parts dropped before a guest's own may wait on
/// that guest (an SSH channel's close) and must find it gone.
pub(crate) async fn until_signal<T>(sweep: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    until_signal_killing(sweep, crate::backend::live::kill_all).await
}

/// [`until_signal`], with what kills the guests at a signal (tests kill only their own).
pub(crate) async fn until_signal_killing<T>(
    sweep: impl Future<Output = anyhow::Result<T>>,
    kill_guests: impl FnOnce() -> Vec<u32>,
) -> anyhow::Result<T> {
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sweep = Box::pin(sweep);
    let stop = tokio::select! {
        r = &mut sweep => return r,
        _ = sigint.recv() => Interrupted { signal: "SIGINT", code: 130 },
        _ = sigterm.recv() => Interrupted { signal: "SIGTERM", code: 143 },
    };
    let t = std::time::Instant::now();
    let killed = kill_guests();
    tracing::debug!(
        "{}: killed guest processes {killed:?}; dropping the sweep",
        stop.signal
    );
    drop(sweep);
    tracing::debug!(
        "{}: sweep dropped {:.1} ms after the signal was seen",
        stop.signal,
        t.elapsed().as_secs_f64() * 1e3
    );
    Err(stop.into())
}

fn add(t: &mut PhaseTotals, o: &PhaseTotals) {
    t.boot_s += o.boot_s;
    t.deploy_s += o.deploy_s;
    t.run_s += o.run_s;
    t.measured_s += o.measured_s;
    t.teardown_s += o.teardown_s;
    t.groups += o.groups;
    t.boots += o.boots;
    t.runs_ok += o.runs_ok;
    t.runs_failed += o.runs_failed;
    t.warm_ups += o.warm_ups;
    t.attempts_failed += o.attempts_failed;
    t.disturbed += o.disturbed;
    t.disturbed_wait_s += o.disturbed_wait_s;
    t.disturbed_counted += o.disturbed_counted;
    t.max_start_skew_us = t.max_start_skew_us.max(o.max_start_skew_us);
}

#[cfg(test)]
mod tests;
