//! Executors: "a group of workers that can start a gated run, return per-worker results with
//! their evidence, and shut down" — the one seam between the sweep's scheduler and the things
//! that run payloads (in the spirit of hyperfine's `Executor`: raw, shell, mock).
//!
//! - [`vm::VmExecutor`]: real guests through a [`crate::backend::Backend`] (QEMU or libvirt)
//!   reached over SSH; one worker per guest.
//! - [`host::HostExecutor`]: the payload on the host itself, restricted to the scenario's CPUs;
//!   one worker.
//! - `mock::MockExecutor` (tests only): scripted outcomes and injected failures, so the
//!   scheduler's accounting is tested without a process.
//!
//! The scheduler decides what runs when and what counts; an executor only brings workers up,
//! runs what it is told on all of them at one instant, and reports what happened.

pub mod barrier;
pub mod deploy;
pub mod host;
#[cfg(test)]
pub mod mock;
pub mod pins;
pub mod vm;
pub mod windows;

use std::time::Duration;

use serde_json::Value;

use crate::scenario::expand::GuestVariant;

/// What an executor brings up: one boot group's guests as the sweep's plan describes them.
/// The executor's own description, so it reads nothing of the plan above it
/// (`sweep::plan::BootGroup::spec` makes one).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSpec {
    /// A directory name for the group's guests (`<level>x-<variant>`), short: QEMU's QMP
    /// socket lives below it.
    pub label: String,
    /// Guests to bring up.
    pub guests: u32,
    /// The guest every one of them boots: kernel, command line, CPU model.
    pub guest: GuestVariant,
    /// The variants sharing these guests, in scenario order (the first names the image).
    pub variants: Vec<String>,
}

/// What bringing a group of workers up produced.
#[derive(Debug, Clone)]
pub struct BroughtUp {
    /// Journaled with every record of the group as `extra.group` (pinning, boot and deploy
    /// times, the guest kernels' view, how each guest was started).
    pub facts: Value,
    pub boot_s: f64,
    pub deploy_s: f64,
}

/// One gated run on every worker.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// Per worker, in worker order: the payload argv, or `None` for a worker that stays idle.
    pub argv: Vec<Option<Vec<String>>>,
    /// Wall-clock deadline from the go signal.
    pub timeout: Duration,
}

/// Exit status of a payload whose run broke one of its own physics checks (it still prints
/// its full report, with a `checks` array, on stdout).
pub const CHECK_FAILED_STATUS: i32 = 3;

/// The payload's exit status for arguments it refuses (unparsable, or unusable in this guest:
/// a missing directory, a trace event or torture type its kernel lacks).
pub const BAD_ARGS_STATUS: i32 = 2;
/// What the payload prints on stderr before each failed check's detail.
pub const CHECK_FAILED_PREFIX: &str = "ocrig-payload: check failed: ";

/// What one worker's command left, when it finished at all.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

/// One worker's part of a run, with the evidence taken around it.
#[derive(Debug, Clone)]
pub struct WorkerRun {
    pub argv: Vec<String>,
    /// The command's output, or why there is none (never started, timed out, connection lost).
    pub result: Result<Finished, String>,
    /// Go signal to the command's end, seconds.
    pub run_s: Option<f64>,
    /// Telemetry of this worker over the run, merged into its record's `extra`:
    /// `vcpu_sched` (host-side scheduling of its vCPU threads), `guest_stat` (its own CPU time
    /// split), `kvm` (per-VM KVM counters, or why there are none) — see `telemetry::probe`.
    pub telemetry: serde_json::Map<String, Value>,
    /// On failure: the console lines that explain it (`extra.console_tail`).
    pub console_tail: Option<String>,
}

/// What one gated run produced.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// Per worker, in worker order; `None` for idle workers.
    pub workers: Vec<Option<WorkerRun>>,
    /// Spread of the go signal's delivery across workers, microseconds.
    pub start_skew_us: f64,
    /// Telemetry of the whole run, merged into every record's `extra` (`host_stat`,
    /// `telemetry_cost`).
    pub host: serde_json::Map<String, Value>,
}

/// What waiting for a quiet host came to ([`Executor::wait_quiet`]).
#[derive(Debug, Clone, PartialEq)]
pub struct QuietWait {
    pub waited_s: f64,
    /// The last window's foreign load was at most the bound (or nothing could be sampled).
    pub quiet: bool,
    /// The last window's foreign load, when sampled.
    pub last_load: Option<f64>,
    /// Why nothing was sampled, or what went wrong.
    pub note: Option<String>,
}

/// A group of workers. The scheduler calls `bring_up` before the first run of a boot group
/// and again (for fresh workers) after any failed attempt; `shut_down` when the group is done.
#[allow(async_fn_in_trait)]
pub trait Executor {
    /// Brings up fresh workers for `group`, first stopping any still up. On error nothing of
    /// the group is left running.
    async fn bring_up(&mut self, group: &GroupSpec) -> anyhow::Result<BroughtUp>;

    /// Runs one gated run: every worker with a command starts it and waits; all are released
    /// at one instant; each result (or failure) comes back with its evidence.
    async fn run(&mut self, request: &RunRequest) -> RunOutcome;

    /// Stops every worker; idempotent.
    async fn shut_down(&mut self);

    /// Waits until the host's foreign load on the workers' CPUs (their busy time less this
    /// sweep's own processes') is at most `bound` over a one-second window, or `limit` passed:
    /// a disturbed run is retried once the host is quiet again. By default there is nothing
    /// to wait for.
    async fn wait_quiet(&mut self, _bound: f64, _limit: std::time::Duration) -> QuietWait {
        QuietWait {
            waited_s: 0.0,
            quiet: true,
            last_load: None,
            note: Some("this executor does not sample the host's load".into()),
        }
    }

    /// Whether the host the workers run on can still be reached (asked when workers could not
    /// be brought up in a sweep over several hosts). Err says why not.
    async fn host_reachable(&mut self) -> Result<(), String> {
        Ok(())
    }
}
