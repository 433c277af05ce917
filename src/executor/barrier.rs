//! The gated start over SSH: start the payload in every guest with `--go-stdin` and wait until
//! each says it is ready, then write the go line to all of them back to back from one thread,
//! then collect every result against a wall-clock deadline. The telemetry probe
//! ([`crate::telemetry::probe`]) reads right before the go signal (every guest already waiting)
//! and right after the last guest finished, its vCPU snapshots innermost; its window still
//! holds each payload's start before its gate and its report after its end (0.1–0.9 s of a
//! 3 s lock run under TCG here), so each guest's vCPU wait is also read over the run's own
//! window, from the run's vCPU timeline ([`crate::telemetry::run_window`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::future::join_all;
use serde_json::{Value, json};

use super::windows::FinishedGuest;
use super::{Finished, RunOutcome, WorkerRun};
use crate::backend::Guest;
use crate::guest::ssh::{GatedCommand, GuestSsh};
use crate::host::Accel;
use crate::payload_bin;
use crate::telemetry::orchestrator::{RunCost, SelfSnapshot};
use crate::telemetry::probe::{ProbeTarget, RunProbe};
use crate::telemetry::sched_trace::{self, SchedTrace, Tracer};

/// The line a gated payload prints on stderr when it waits for its go signal.
const READY_LINE: &str = "ocrig-payload: ready";

/// One guest taking part in a run.
pub struct Participant<'a> {
    pub index: usize,
    pub guest: &'a dyn Guest,
    pub ssh: Arc<GuestSsh>,
    /// None: the guest stays idle in this run.
    pub argv: Option<Vec<String>>,
    /// Host thread ids of its vCPUs (empty when unknown).
    pub vcpu_tids: Vec<i32>,
}

/// How long each step may take.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// From the go signal to the result.
    pub run: Duration,
    /// A telemetry read (`cat /proc/stat`).
    pub collect: Duration,
}

/// What the run's telemetry needs besides the guests.
#[derive(Clone, Copy)]
pub struct Host<'a> {
    /// The host the guests run on (its /proc for the vCPU and CPU telemetry).
    pub fs: &'a Arc<dyn crate::hostfs::HostFs>,
    pub cpus: &'a [usize],
    pub accel: Accel,
    /// The run's vCPU timeline ([`crate::telemetry::sched_trace`]); None: none.
    pub timeline: Option<Timeline<'a>>,
}

/// Where a run's vCPU timeline comes from and goes.
#[derive(Clone, Copy)]
pub struct Timeline<'a> {
    /// The guest set's trace instance on the host, or why that host cannot be traced.
    pub tracer: Result<&'a Tracer, &'a str>,
    /// The side file it is written to.
    pub file: &'a std::path::Path,
}

/// The line that ends each copy of the guest's /proc/stat in the gated command's output.
const STAT_END: &str = ocrig_payload::cli::PROC_STAT_END;

/// The guest shell command that starts the payload gated: every argument quoted (an empty one
/// stays an argument). The payload prints the guest's /proc/stat right before it is ready and
/// right after its run (`--proc-stat`: each copy followed by [`STAT_END`]), so the run's guest
/// CPU split costs no SSH round trips (two were ~25-110 ms a run at 1-2 guests) and no
/// process of its own (a shell's `cat` was ~5-15 ms of each run's start in a TCG guest); the
/// payload's exit status is the command's (it runs as a shell function's body:
/// [`GuestSsh::start_gated`]).
pub fn gated_command(argv: &[String]) -> anyhow::Result<String> {
    let quoted =
        shlex::try_join(argv.iter().map(String::as_str)).context("a payload argument holds a NUL byte")?;
    Ok(format!(
        "{} --go-stdin --proc-stat --tie-after {quoted}; return $?",
        payload_bin::GUEST_PATH
    ))
}

/// Splits a gated command's stdout after the first [`STAT_END`]: the payload's own output and
/// the /proc/stat printed after it.
fn split_after_stat(stdout: &str) -> (String, Result<String, String>) {
    let tail = format!("\n{STAT_END}\n");
    match stdout.rfind(&tail) {
        Some(at) => (
            stdout[..at].to_string(),
            Ok(stdout[at + tail.len()..].to_string()),
        ),
        None => (
            stdout.to_string(),
            Err("the payload printed no /proc/stat after its run (it ended before its report)".to_string()),
        ),
    }
}

struct Started {
    index: usize,
    gated: GatedCommand,
    argv: Vec<String>,
    /// The guest's /proc/stat printed right before the payload started.
    stat_before: Result<String, String>,
    /// Its TSC tied to this host's clock ([`guest_clock`]), or why not.
    clock: Value,
}

/// Exchanges made to tie a guest's TSC to the host's clock: the quickest is kept. Each takes
/// one SSH round trip (about 0.2-2 ms here under TCG), all guests at once.
pub const CLOCK_EXCHANGES: usize = 8;

/// Ties the gated payload's TSC to this host's CLOCK_MONOTONIC (the tracefs `mono` clock of
/// the vCPU timeline): [`CLOCK_EXCHANGES`] sync questions, each timed on the host; the guest
/// read its TSC between the question and the answer, so the quickest exchange's midpoint is
/// the host's time of that reading within half its round trip (`error_ns`). With the run's own
/// TSC rate (the payload's `preemption.window`) it puts the payload's stretched intervals on
/// the host's timeline.
fn guest_clock(gated: &mut GatedCommand) -> Value {
    let mut best: Option<(u64, u64, u64)> = None; // (round trip, midpoint, tsc)
    let mut trips = Vec::new();
    for _ in 0..CLOCK_EXCHANGES {
        let asked = sched_trace::mono_ns();
        let tsc = match gated.sync() {
            Ok(t) => t,
            Err(e) => return json!({ "unavailable": format!("{e:#}") }),
        };
        let answered = sched_trace::mono_ns();
        let trip = answered.saturating_sub(asked);
        trips.push(trip);
        if best.is_none_or(|b| trip < b.0) {
            best = Some((trip, asked + trip / 2, tsc));
        }
    }
    let Some((trip, mid, tsc)) = best else {
        return json!({ "unavailable": "no exchange was made" });
    };
    trips.sort_unstable();
    json!({
        "host_mono_ns": mid,
        "tsc": tsc,
        "error_ns": trip / 2,
        "exchanges": trips.len(),
        "round_trip_ns": { "min": trips[0], "median": trips[trips.len() / 2], "max": trips[trips.len() - 1] },
        "method": "the guest's TSC read while the host waited for it over SSH; the quickest of the exchanges, at its midpoint on the host's CLOCK_MONOTONIC, within half its round trip; again once the payload was done (after)",
    })
}

/// Adds the tie made once the payload was done (`after`, [`guest_clock`]) to the one made before
/// its go (`before`), as `before.after`: the two give the guest TSC's rate on this host's clock
/// over the run ([`crate::telemetry::guest_tsc`]).
fn tie_again(before: &mut Value, mut after: Value) {
    if let Some(a) = after.as_object_mut() {
        a.remove("method");
    }
    before["after"] = after;
}

/// The probe's view of the participants; `ok(index)` says whose SSH session may be used.
fn targets<'a>(
    participants: &'a [Participant<'a>],
    ok: impl Fn(usize) -> bool,
    stat: impl Fn(usize) -> Option<Result<String, String>>,
) -> Vec<ProbeTarget<'a>> {
    participants
        .iter()
        .map(|p| ProbeTarget {
            guest: p.guest,
            ssh: Arc::clone(&p.ssh),
            vcpu_tids: &p.vcpu_tids,
            reachable: ok(p.index),
            proc_stat: stat(p.index),
        })
        .collect()
}

/// Runs one gated run on `participants` (in worker order, `workers` in all).
pub async fn gated_run(
    participants: &[Participant<'_>],
    workers: usize,
    host: Host<'_>,
    limits: Limits,
) -> RunOutcome {
    let mut results: Vec<Option<WorkerRun>> = (0..workers).map(|_| None).collect();
    let self_before = SelfSnapshot::take();
    let mut steps = Steps::new();

    // 1. Start the payload in every guest that runs something; each reports ready.
    let starts = participants.iter().filter_map(|p| {
        let argv = p.argv.clone()?;
        let (ssh, index) = (Arc::clone(&p.ssh), p.index);
        Some(async move {
            let argv_c = argv.clone();
            let r = tokio::task::spawn_blocking(move || -> anyhow::Result<Started> {
                let mut gated = ssh.start_gated(
                    &gated_command(&argv_c)?,
                    READY_LINE,
                    limits.run + Duration::from_secs(30),
                )?;
                let stat_before = gated.stdout_until(STAT_END).map_err(|e| format!("{e:#}"));
                let clock = guest_clock(&mut gated);
                Ok(Started {
                    index,
                    gated,
                    argv: argv_c,
                    stat_before,
                    clock,
                })
            })
            .await
            .map_err(anyhow::Error::from)
            .and_then(|r| r);
            (index, argv, r)
        })
    });
    let mut started = Vec::new();
    for (index, argv, r) in join_all(starts).await {
        match r {
            Ok(s) => started.push(s),
            Err(e) => results[index] = Some(failed(argv, format!("{e:#}"))),
        }
    }

    steps.mark();
    // 2. Telemetry right before the go signal (the scheduler trace outside the probe's reads).
    //    A guest whose start failed is not asked.
    let trace = match host.timeline {
        Some(t) => Some(start_trace(participants, t.tracer).await),
        None => None,
    };
    // By worker index, so each guest's lookup is one step (a run may have hundreds).
    let mut failed: Vec<bool> = (0..workers).map(|i| results[i].is_some()).collect();
    let mut stat_before: Vec<Option<Result<String, String>>> = vec![None; workers];
    let mut clocks: Vec<Option<Value>> = vec![None; workers];
    for s in &started {
        stat_before[s.index] = Some(s.stat_before.clone());
        clocks[s.index] = Some(s.clock.clone());
    }
    let probe = RunProbe::start(
        &targets(participants, |i| !failed[i], |i| stat_before[i].clone()),
        host.fs,
        host.cpus,
        host.accel,
        limits.collect,
    )
    .await;

    steps.mark();
    // 3. Go: one thread writes the go line to every gated payload back to back.
    let (started, go_times) = tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        let _urgent = RealtimeForAMoment::enter();
        for mut s in started {
            let t = s.gated.go();
            out.push((s, t));
        }
        drop(_urgent);
        let times: Vec<Instant> = out.iter().filter_map(|(_, t)| t.as_ref().ok().copied()).collect();
        (out, times)
    })
    .await
    .expect("the go thread panicked");
    let start_skew_us = match (go_times.iter().min(), go_times.iter().max()) {
        (Some(a), Some(b)) => b.duration_since(*a).as_secs_f64() * 1e6,
        _ => 0.0,
    };

    // 4. Collect every result, each against the wall-clock deadline from its go.
    let waits = started.into_iter().map(|(s, go)| async move {
        let Started {
            index, gated, argv, ..
        } = s;
        let go_at = match go {
            Ok(t) => t,
            Err(e) => {
                return (
                    index,
                    argv,
                    Err(format!("sending the go signal: {e:#}")),
                    None,
                    None,
                    None,
                    None,
                );
            }
        };
        // The payload's TSC tied to this host's clock again once it is done: with the tie
        // before the go, the TSC's own rate against this clock over the run.
        let waiter = tokio::task::spawn_blocking(move || gated.wait_tied(|g| Some(guest_clock(g))));
        // A stopped or hung guest cannot hold the sweep longer than the run deadline (the
        // blocked reader ends when the guest is torn down).
        let mut stat_after = None;
        let mut tie_after = None;
        let r = match tokio::time::timeout(limits.run, waiter).await {
            Ok(Ok(Ok((out, tied)))) => {
                let (stdout, after) = split_after_stat(&out.stdout);
                stat_after = Some(after);
                tie_after = tied;
                Ok(Finished {
                    status: out.status,
                    stdout,
                    stderr: out.stderr,
                })
            }
            Ok(Ok(Err(e))) => Err(format!("{:.1} s after go: {e:#}", go_at.elapsed().as_secs_f64())),
            Ok(Err(e)) => Err(format!("the collector thread failed: {e}")),
            Err(_) => Err(format!(
                "no result within the run deadline of {:.0} s (timeouts.run_s): the guest is hung or too slow",
                limits.run.as_secs_f64()
            )),
        };
        // The command's own end: where it said it was done, before the tie after it.
        let run_s = tie_after
            .as_ref()
            .map_or_else(|| go_at.elapsed(), |(done, _)| done.saturating_duration_since(go_at))
            .as_secs_f64();
        let clock_after = tie_after.map(|(_, clock)| clock);
        (index, argv, r, Some(run_s), stat_after, Some(go_at), clock_after)
    });
    let mut collected: Vec<Collected> = join_all(waits).await;

    steps.mark();
    // 5. Telemetry right after the last guest finished; a guest whose run failed may be
    //    stopped or hung, so only its host side is read.
    let mut stat_after: Vec<Option<Result<String, String>>> = vec![None; workers];
    for c in collected.iter_mut() {
        failed[c.0] |= c.2.is_err();
        stat_after[c.0] = c.4.clone();
        if let (Some(Some(before)), Some(after)) = (clocks.get_mut(c.0), c.6.take()) {
            tie_again(before, after);
        }
    }
    // The trace is read (~4 ms here) while the probe reads the guests.
    let timeline = async {
        match (trace, host.timeline) {
            (Some(trace), Some(Timeline { file, .. })) => {
                let window = run_window(&go_times, collected.iter().filter_map(|c| c.3));
                Some(finish_trace(trace, window, file.to_path_buf()).await)
            }
            _ => None,
        }
    };
    let read_from = targets(participants, |i| !failed[i], |i| stat_after[i].clone());
    let (mut telemetry, timeline) = tokio::join!(probe.finish(&read_from), timeline);
    let traced = timeline.is_some();
    let kept = timeline.and_then(|(summary, kept)| {
        telemetry.shared.insert("timeline".into(), summary);
        kept
    });
    // What each finished guest's payload window says against the host's timeline.
    let mut windows = {
        // Instant is CLOCK_MONOTONIC on Linux: one reading of both ties them together.
        let (now, now_ns) = (Instant::now(), sched_trace::mono_ns());
        let mono = |t: Instant| now_ns.saturating_sub(now.saturating_duration_since(t).as_nanos() as u64);
        let finished: Vec<FinishedGuest<'_>> = collected
            .iter()
            .filter_map(|(index, _, result, run_s, _, go, _)| {
                Some(FinishedGuest {
                    index: *index,
                    vcpus: participants
                        .iter()
                        .find(|p| p.index == *index)
                        .map_or(0, |p| p.vcpu_tids.len()),
                    stdout: &result.as_ref().ok()?.stdout,
                    command: go.zip(*run_s).map(|(go, run_s)| {
                        let go = mono(go);
                        (go, go + (run_s * 1e9) as u64)
                    }),
                })
            })
            .collect();
        super::windows::read(&finished, &clocks, kept.as_ref(), traced, workers)
    };
    drop(kept);
    for (index, argv, result, run_s, _, _, _) in collected {
        let run_s = if result.is_ok() { run_s } else { None };
        results[index] = Some(WorkerRun {
            argv,
            result,
            run_s,
            telemetry: Default::default(),
            console_tail: None,
        });
    }
    for (p, m) in participants.iter().zip(telemetry.per_guest) {
        if let Some(Some(w)) = results.get_mut(p.index) {
            w.telemetry = m;
            if let Some(c) = clocks[p.index].take() {
                w.telemetry.insert("guest_clock".into(), c);
            }
            std::mem::take(&mut windows[p.index]).put_into(&mut w.telemetry);
        }
    }
    steps.mark();
    let mut host = telemetry.shared;
    let guest_cpu_ms = host
        .get("telemetry_cost")
        .and_then(|c| c.get("run_cpu_ms"))
        .and_then(serde_json::Value::as_f64);
    let running = participants.iter().filter(|p| p.argv.is_some()).count();
    let cost = RunCost::between(
        &self_before,
        &SelfSnapshot::take(),
        running,
        participants.len(),
        guest_cpu_ms,
    );
    let mut cost = serde_json::json!(cost);
    cost["steps_ms"] = serde_json::json!(steps.ms);
    host.insert("orchestrator".into(), cost);
    RunOutcome {
        workers: results,
        start_skew_us,
        host,
    }
}

/// The calling thread at real-time priority (SCHED_FIFO 1) until dropped, then back to the
/// normal policy: at 12x every host CPU runs 12 runnable vCPU threads, and a go thread that
/// the scheduler preempts between two guests' go lines stretches the start skew by a whole
/// time slice (measured: 1.2–9.8 ms at 24 guests on 2 CPUs before). Writing N go lines takes
/// microseconds, so holding a CPU that long costs the guests nothing measurable. Where the
/// process may not (not root, no CAP_SYS_NICE) it stays as it is.
struct RealtimeForAMoment(bool);

impl RealtimeForAMoment {
    fn enter() -> Self {
        let param = libc::sched_param { sched_priority: 1 };
        // SAFETY: sets this thread's policy (pid 0 = the caller) from a valid sched_param.
        let ok = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } == 0;
        if !ok {
            tracing::debug!(
                "the go thread stays at normal priority: {}",
                std::io::Error::last_os_error()
            );
        }
        Self(ok)
    }
}

impl Drop for RealtimeForAMoment {
    fn drop(&mut self) {
        if self.0 {
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: as in `enter`; SCHED_OTHER takes priority 0.
            unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) };
        }
    }
}

/// Wall time of each step of a gated run, milliseconds: [payload starts until all ready,
/// telemetry before, go to the last result, telemetry after] (`extra.orchestrator.steps_ms`).
struct Steps {
    at: Instant,
    ms: Vec<f64>,
}

impl Steps {
    fn new() -> Self {
        Self {
            at: Instant::now(),
            ms: Vec::with_capacity(4),
        }
    }

    fn mark(&mut self) {
        let now = Instant::now();
        self.ms
            .push((now.duration_since(self.at).as_secs_f64() * 1e4).round() / 10.0);
        self.at = now;
    }
}

/// Starts recording the run on the host scheduler trace of the guests' host (this machine, or
/// a remote host over SSH), or says why there is none. On a blocking thread: its tracefs
/// writes can wait for RCU grace periods (seconds on a busy host), and this task must stay
/// free to notice a signal and kill the guests.
async fn start_trace(
    participants: &[Participant<'_>],
    tracer: Result<&Tracer, &str>,
) -> Result<SchedTrace, String> {
    let mut guests = vec![Vec::new(); participants.iter().map(|p| p.index + 1).max().unwrap_or(0)];
    for p in participants {
        guests[p.index] = p.vcpu_tids.clone();
    }
    let tracer = tracer.map_err(str::to_string)?.clone();
    tokio::task::spawn_blocking(move || tracer.begin(&guests))
        .await
        .unwrap_or_else(|e| Err(format!("starting the trace: {e}")))
}

/// Reads the run's trace on a blocking thread (as [`start_trace`]).
async fn finish_trace(
    trace: Result<SchedTrace, String>,
    window: Option<(u64, u64)>,
    file: std::path::PathBuf,
) -> (Value, Option<sched_trace::Kept>) {
    match (trace, window) {
        (Ok(t), Some(w)) => tokio::task::spawn_blocking(move || t.finish_keeping(w, &file))
            .await
            .unwrap_or_else(|e| (json!({ "unavailable": format!("reading the trace: {e}") }), None)),
        (Err(why), _) => (json!({ "unavailable": why }), None),
        (Ok(_), None) => (
            json!({ "unavailable": "no guest was started, so the run has no window" }),
            None,
        ),
    }
}

/// What a finished guest's collection left: (index, argv, result, run_s, /proc/stat after, go).
type Collected = (
    usize,
    Vec<String>,
    Result<Finished, String>,
    Option<f64>,
    Option<Result<String, String>>,
    Option<Instant>,
    // The tie after the run ([`guest_clock`]).
    Option<Value>,
);

/// The measured window on the trace clock: the first go signal to the last guest's end.
fn run_window(go_times: &[Instant], run_s: impl Iterator<Item = f64>) -> Option<(u64, u64)> {
    // Instant is CLOCK_MONOTONIC on Linux: one reading of both ties them together.
    let (now, now_ns) = (Instant::now(), sched_trace::mono_ns());
    let go = *go_times.iter().min()?;
    let go_ns = now_ns.saturating_sub(now.saturating_duration_since(go).as_nanos() as u64);
    let last = go_times
        .iter()
        .max()
        .map_or(0, |t| t.duration_since(go).as_nanos() as u64);
    let run_ns = run_s.fold(0.0, f64::max) * 1e9;
    Some((go_ns, go_ns + last.max(run_ns as u64)))
}

fn failed(argv: Vec<String>, error: String) -> WorkerRun {
    WorkerRun {
        argv,
        result: Err(error),
        run_s: None,
        telemetry: Default::default(),
        console_tail: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_quoted_for_the_guest_shell_and_empty_ones_survive() {
        let argv: Vec<String> = ["lock", "--algo", "tas", "--note", "a b'c", "--empty", ""]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let cmd = gated_command(&argv).unwrap();
        let payload = cmd.split("; ").next().unwrap();
        let words = shlex::split(payload).unwrap();
        assert_eq!(words[0], payload_bin::GUEST_PATH);
        assert_eq!(words[1..4], ["--go-stdin", "--proc-stat", "--tie-after"]);
        assert_eq!(&words[4..], argv.as_slice(), "{cmd}");
    }

    #[test]
    fn the_gated_command_runs_the_payload_with_its_proc_stat_around_and_keeps_its_status() {
        let cmd = gated_command(&["lock".to_string(), "--algo".into(), "".into()]).unwrap();
        assert!(
            cmd.starts_with(&format!(
                "{} --go-stdin --proc-stat --tie-after lock --algo ''",
                payload_bin::GUEST_PATH
            )),
            "{cmd}"
        );
        // Run by a real shell with a stand-in payload that prints as `--proc-stat` says,
        // reports and fails its checks.
        let stand_in = format!(
            "sh -c 'cat /proc/stat; echo {STAT_END}; echo \"{{report}}\"; echo; echo {STAT_END}; cat /proc/stat; exit 3' --"
        );
        let cmd = cmd.replace(payload_bin::GUEST_PATH, &stand_in);
        // As the guest's kept shell runs it: the body of a function.
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("ocrig_cmd() {{\n{cmd}\n}}; ocrig_cmd"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3), "{cmd}");
        let text = String::from_utf8(out.stdout).unwrap();
        let (head, rest) = text.split_once(&format!("{STAT_END}\n")).unwrap();
        assert!(head.starts_with("cpu "), "{head}");
        let (payload, after) = split_after_stat(rest);
        assert_eq!(payload, "{report}\n");
        assert!(after.unwrap().starts_with("cpu "));
        assert!(split_after_stat("{report}").1.is_err());
    }
}
