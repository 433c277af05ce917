//! A scripted executor for the scheduler's unit tests: no process, no guest. It answers every
//! run with a payload report whose headline value the test chooses, and injects the failures
//! a test names — a bring-up that fails, a worker that fails a given run, a run that never
//! returns (so the test can drop the sweep mid-run, as a signal does).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use serde_json::json;

use super::{BroughtUp, Executor, Finished, GroupSpec, RunOutcome, RunRequest, WorkerRun};

/// A payload report on stdout, as the real payload prints it, with one metric.
pub fn report_stdout(metric: &str, value: f64) -> String {
    json!({
        "schema": 1, "workload": "lock", "elapsed_ns": 1_000_000,
        "env": {"kernel": "mock", "cpus": 1, "cpus_allowed": 1, "clocksource": "tsc",
                "hypervisor": null, "cmdline": ""},
        "metrics": {metric: value},
    })
    .to_string()
}

/// What the payload prints when its run breaks one of its own checks: the full report with a
/// `checks` array, the check's words on stderr, exit status 3.
pub fn rejected_by_check(metric: &str, value: f64, detail: &str) -> Finished {
    let mut report: serde_json::Value =
        serde_json::from_str(&report_stdout(metric, value)).expect("valid JSON");
    report["checks"] = json!([
        {"name": "elapsed_covers_cpu", "ok": true, "value": 1.0, "bound": 1.0, "detail": "elapsed ≥ CPU time / CPUs"},
        {"name": "calibration_stable", "ok": false, "value": 0.31, "bound": 0.05, "detail": detail},
    ]);
    Finished {
        status: super::CHECK_FAILED_STATUS,
        stdout: report.to_string(),
        stderr: format!("{}{detail}\n", super::CHECK_FAILED_PREFIX),
    }
}

/// What the payload prints for a sliced run (`slices … -- ARM :: ARM …`): each arm's report
/// with its value from `value` (called with the arm's own argv) and its `--slices-per-arm`
/// slices' figures; where `check` is given, the first arm's run broke that check (exit status
/// 3, as the real payload).
fn sliced_answer(
    metric: &str,
    argv: &[String],
    value: impl Fn(&[String]) -> f64,
    check: Option<&str>,
) -> Finished {
    let dash = argv.iter().position(|a| a == "--").map_or(argv.len(), |i| i + 1);
    let flag = |name: &str| {
        let at = argv
            .iter()
            .position(|a| a == name)
            .expect("the sliced run's flags");
        argv[at + 1].parse::<u64>().expect("a number")
    };
    let (slices, slice_ms) = (flag("--slices-per-arm"), flag("--slice-ms"));
    let arms: Vec<serde_json::Value> = argv[dash..]
        .split(|a| a == ocrig_payload::slices::ARM_SEPARATOR)
        .enumerate()
        .map(|(i, arm)| {
            let v = value(arm);
            let mut r: serde_json::Value =
                serde_json::from_str(&report_stdout(metric, v)).expect("valid JSON");
            r["sliced"] = json!({
                "slice_ms": slice_ms,
                "slices": (0..slices).map(|j| json!({
                    "index": j, "due_ms": 0.0, "late_ms": 0.0, "elapsed_ns": slice_ms * 1_000_000,
                    "metrics": {metric: v},
                })).collect::<Vec<_>>(),
            });
            if let (0, Some(detail)) = (i, check) {
                r["checks"] = json!([{"name": "calibration_stable", "ok": false, "value": 0.31, "bound": 0.05,
                                      "detail": detail}]);
            }
            r
        })
        .collect();
    let mut report: serde_json::Value =
        serde_json::from_str(&report_stdout(metric, 0.0)).expect("valid JSON");
    report["workload"] = json!(ocrig_payload::slices::SLICED_WORKLOAD);
    report["metrics"] = json!({});
    report["arms"] = json!(arms);
    Finished {
        status: if check.is_some() {
            super::CHECK_FAILED_STATUS
        } else {
            0
        },
        stdout: report.to_string(),
        stderr: check.map_or_else(String::new, |d| {
            format!("{}arm 0: {d}\n", super::CHECK_FAILED_PREFIX)
        }),
    }
}

/// Guest 0's headline value in run call `n` with argv `argv`.
pub type ValueFn = Box<dyn Fn(u32, &[String]) -> f64 + Send>;

/// What the mock should do, by sweep-wide counters (both 1-based, in the order calls arrive).
#[derive(Default)]
pub struct Script {
    /// Bring-ups (boots) that fail.
    pub failing_bring_ups: BTreeSet<u32>,
    /// Run call → the workers that fail it, each with its error.
    pub failing_runs: BTreeMap<u32, Vec<(u32, String)>>,
    /// Run call → the workers whose payload rejects its own run (exit status 3, a failed
    /// check in the report's `checks` and on stderr), each with the check's detail.
    pub failing_checks: BTreeMap<u32, Vec<(u32, String)>>,
    /// Run call → the workers whose payload refuses its arguments (exit status 2, the words
    /// on stderr as the payload prints them).
    pub refused_args: BTreeMap<u32, Vec<(u32, String)>>,
    /// The run call that never returns; the test is told through the channel when it starts.
    pub hang_at: Option<(u32, tokio::sync::mpsc::UnboundedSender<()>)>,
    /// The headline value of guest 0 in a run call, from its argv (default: 100).
    pub value: Option<ValueFn>,
    /// Called with the run call's number as each run call starts (to break something then).
    pub on_run: Option<Box<dyn Fn(u32) + Send>>,
    /// Yield to the runtime once per run call, so the schedulers of several hosts interleave
    /// run by run as real ones do (a mock run otherwise never waits).
    pub interleave: bool,
    /// Answer as a real host of this many CPUs would: every guest's full lock report and
    /// per-vCPU telemetry, the host's /proc/stat split per CPU (None: the minimal answer).
    /// The host's busy time is the guests' vCPU time plus 1 % of other load.
    pub realistic_host_cpus: Option<usize>,
    /// Run call → the other load (a share of the CPUs' time) the host adds to it, with
    /// `realistic_host_cpus` (a disturbed run).
    pub other_load: BTreeMap<u32, f64>,
    /// Every wait for a quiet host ends with the host still busy.
    pub host_stays_busy: bool,
}

/// A lock payload report as the real payload prints it (fields and sizes of a real run's).
pub fn realistic_report_stdout(metric: &str, value: f64) -> String {
    json!({
        "schema": 2, "workload": "lock", "elapsed_ns": 3_304_826_658u64,
        "env": {"kernel": "6.1.0-57-amd64", "cpus": 1, "cpus_allowed": 1, "clocksource": "tsc",
                "clocksource_available": ["tsc", "hpet", "acpi_pm"], "hypervisor": "KVMKVMKVM",
                "cmdline": "tsc_early_khz=2245786 tsc=reliable quiet console=ttyS0 panic=-1"},
        "metrics": {"acquire_p99_ns": 13223.0, "contended": 42512.0, "contention_rate": 0.80,
                    "ctxsw_involuntary": 20.0, "ctxsw_voluntary": 0.0, "jain": 0.988,
                    "max_thread_ops": 29445.0, "min_thread_ops": 23649.0, metric: value, "ops_total": 53094.0},
        "acquire_latency": {"p50_ns": 2100, "p90_ns": 8000, "p99_ns": 13223, "max_ns": 90000, "samples": 5314},
        "acquire_latency_sampling": "1 in 8 contended acquisitions (first try_lock failed), per thread; uncontended ones are never timed",
        "algo": "ticket", "contended": 42512, "contention_rate": 0.80, "duration_ms": 3000,
        "fairness": {"jain": 0.988, "max": 29445, "min": 23649}, "futex": null,
        "futex_unavailable": "'ticket' never sleeps in the kernel: it makes no futex calls",
        "gap_ns": 200, "hold_ns": 200, "lost_updates": 0, "ops_per_sec": value,
        "ops_per_thread": [29445, 23649], "ops_total": 53094, "owner_violations": 0, "threads": 2,
        "threads_ctxsw": [{"involuntary": 10, "voluntary": 0}, {"involuntary": 10, "voluntary": 0}],
    })
    .to_string()
}

/// One 1-vCPU guest's telemetry as the run probe journals it.
fn realistic_telemetry(guest: usize) -> serde_json::Map<String, serde_json::Value> {
    let wait = 1.0 - realistic_vcpu_run_s(guest) / 3.3;
    serde_json::Map::from_iter([
        (
            "vcpu_sched".to_string(),
            json!({"wall_s": 3.3, "mean_wait_share": wait, "mean_runnable_wait_share": wait, "vcpus": [{
                "vcpu": 0, "tid": 5000 + guest, "run_s": 3.3 * (1.0 - wait), "wait_s": 3.3 * wait,
                "wait_share": wait, "runnable_wait_share": wait, "timeslices": 672,
                "voluntary_switches": 143, "involuntary_switches": 529}]}),
        ),
        (
            "guest_stat".to_string(),
            json!({"user": 190, "system": 5, "idle": 0, "steal": 10, "steal_share": 0.05, "busy_share": 0.95}),
        ),
        (
            "kvm".to_string(),
            json!({"source": "qmp query-stats", "counters": {"halt_exits": 1000 + guest, "halt_successful_poll": 10,
                   "directed_yield_attempted": 7, "directed_yield_successful": 3, "preemption_reported": 40,
                   "preemption_other": 2, "hypercalls": 300}}),
        ),
    ])
}

/// The vCPU run time of guest `guest` in [`realistic_telemetry`], seconds.
fn realistic_vcpu_run_s(guest: usize) -> f64 {
    3.3 * (1.0 - (0.3 + (guest % 7) as f64 * 0.05))
}

/// The host's /proc/stat over a run of 3.3 s, split per CPU, as the run probe journals it:
/// busy for `vcpu_run_s` of guests' vCPU time and `other` of each CPU's time besides.
fn realistic_host(cpus: usize, vcpu_run_s: f64, other: f64) -> serde_json::Map<String, serde_json::Value> {
    // Ticks of 10 ms per CPU: 330 in the run.
    let busy = ((vcpu_run_s / cpus as f64 / 3.3 + other).min(1.0) * 330.0).round() as u64;
    let (system, user, idle) = (busy / 20, busy - busy / 20, 330 - busy);
    let share = busy as f64 / 330.0;
    let per_cpu: Vec<_> = (0..cpus)
        .map(|c| json!({"busy_share": share, "cpu": c, "idle": idle, "steal": 0, "steal_share": 0.0, "system": system, "user": user}))
        .collect();
    serde_json::Map::from_iter([
        (
            "host_stat".to_string(),
            json!({"busy_share": share, "cpus": (0..cpus).collect::<Vec<_>>(), "idle": idle * cpus as u64,
                   "per_cpu": per_cpu, "steal": 0, "steal_share": 0.0, "system": system * cpus as u64,
                   "user": user * cpus as u64}),
        ),
        (
            "telemetry_cost".to_string(),
            json!({"cpu_ms": 0.31, "run_cpu_ms": 160.0, "share": 0.002}),
        ),
        (crate::telemetry::host_load::KEY.to_string(), json!(other)),
        (crate::telemetry::host_load::NAMED_KEY.to_string(), json!(other)),
    ])
}

/// Everything the mock was asked, for the test to check.
#[derive(Debug, Default, Clone)]
pub struct Calls {
    pub bring_ups: Vec<Vec<String>>,
    /// Per run call: the bring-up it ran on and each worker's argv.
    pub runs: Vec<(u32, Vec<Option<Vec<String>>>)>,
    pub shut_downs: u32,
    /// Workers up right now.
    pub up: bool,
    /// When each run call arrived (the mock answers at once: the time between two is what
    /// the orchestrator spent on one attempt).
    pub run_started: Vec<std::time::Instant>,
    /// Each wait for a quiet host: (run calls made before it, the bound).
    pub quiet_waits: Vec<(u32, f64)>,
}

pub struct MockExecutor {
    pub script: Script,
    pub calls: Arc<Mutex<Calls>>,
    metric: String,
}

impl MockExecutor {
    pub fn new(metric: &str, script: Script) -> Self {
        Self {
            script,
            calls: Arc::default(),
            metric: metric.to_string(),
        }
    }
}

impl Executor for MockExecutor {
    async fn bring_up(&mut self, group: &GroupSpec) -> anyhow::Result<BroughtUp> {
        let mut calls = self.calls.lock().unwrap();
        calls.up = false;
        calls.bring_ups.push(group.variants.clone());
        let n = calls.bring_ups.len() as u32;
        anyhow::ensure!(
            !self.script.failing_bring_ups.contains(&n),
            "mock: bring-up {n} fails as scripted"
        );
        calls.up = true;
        Ok(BroughtUp {
            facts: json!({"mock_bring_up": n}),
            boot_s: 1.0,
            deploy_s: 0.5,
        })
    }

    async fn run(&mut self, request: &RunRequest) -> RunOutcome {
        let n = {
            let mut calls = self.calls.lock().unwrap();
            assert!(calls.up, "mock: a run was started with no workers up");
            let bring_up = calls.bring_ups.len() as u32;
            calls.runs.push((bring_up, request.argv.clone()));
            calls.run_started.push(std::time::Instant::now());
            calls.runs.len() as u32
        };
        if let Some(f) = &self.script.on_run {
            f(n);
        }
        if self.script.interleave {
            tokio::task::yield_now().await;
        }
        if let Some((at, tx)) = &self.script.hang_at
            && *at == n
        {
            let _ = tx.send(());
            std::future::pending::<()>().await;
        }
        let failing = self.script.failing_runs.get(&n).cloned().unwrap_or_default();
        let workers = request
            .argv
            .iter()
            .enumerate()
            .map(|(g, argv)| {
                let argv = argv.clone()?;
                let value = self.script.value.as_ref().map_or(100.0, |f| f(n, &argv));
                let check = self
                    .script
                    .failing_checks
                    .get(&n)
                    .and_then(|c| c.iter().find(|(w, _)| *w == g as u32));
                let refused = self
                    .script
                    .refused_args
                    .get(&n)
                    .and_then(|c| c.iter().find(|(w, _)| *w == g as u32));
                let sliced = argv.first().is_some_and(|a| a == "slices");
                let result = match (failing.iter().find(|(w, _)| *w == g as u32), check) {
                    (Some((_, e)), _) => Err(e.clone()),
                    (None, check) if sliced => Ok(sliced_answer(
                        &self.metric,
                        &argv,
                        |arm| self.script.value.as_ref().map_or(100.0, |f| f(n, arm)),
                        check.map(|c| c.1.as_str()),
                    )),
                    _ if refused.is_some() => Ok(Finished {
                        status: super::BAD_ARGS_STATUS,
                        stdout: String::new(),
                        stderr: format!("ocrig-payload: error: {}\n", refused.map_or("", |r| r.1.as_str())),
                    }),
                    (None, Some((_, detail))) => Ok(rejected_by_check(&self.metric, value, detail)),
                    (None, None) => Ok(Finished {
                        status: 0,
                        stdout: match self.script.realistic_host_cpus {
                            Some(_) => realistic_report_stdout(&self.metric, value),
                            None => report_stdout(&self.metric, value),
                        },
                        stderr: String::new(),
                    }),
                };
                if self.script.realistic_host_cpus.is_some() {
                    return Some(WorkerRun {
                        argv,
                        result,
                        run_s: Some(3.3),
                        telemetry: realistic_telemetry(g),
                        console_tail: Some(format!("mock console of worker {g}")),
                    });
                }
                Some(WorkerRun {
                    argv,
                    result,
                    run_s: Some(1.0),
                    telemetry: serde_json::Map::from_iter([
                        ("guest_stat".to_string(), json!({"busy_share": 1.0})),
                        (
                            "vcpu_sched".to_string(),
                            json!({"wall_s": 1.0, "vcpus": [], "mean_wait_share": null}),
                        ),
                    ]),
                    console_tail: Some(format!("mock console of worker {g}")),
                })
            })
            .collect();
        RunOutcome {
            workers,
            start_skew_us: 5.0,
            host: match self.script.realistic_host_cpus {
                Some(cpus) => realistic_host(
                    cpus,
                    (0..request.argv.len())
                        .filter(|&g| request.argv[g].is_some())
                        .map(realistic_vcpu_run_s)
                        .sum(),
                    0.01 + self.script.other_load.get(&n).copied().unwrap_or(0.0),
                ),
                None => serde_json::Map::from_iter([("host_stat".to_string(), json!({"busy_share": 1.0}))]),
            },
        }
    }

    async fn wait_quiet(&mut self, bound: f64, _limit: std::time::Duration) -> super::QuietWait {
        let mut calls = self.calls.lock().unwrap();
        let made = calls.runs.len() as u32;
        calls.quiet_waits.push((made, bound));
        let busy = self.script.host_stays_busy;
        super::QuietWait {
            waited_s: 1.0,
            quiet: !busy,
            last_load: Some(if busy { bound * 2.0 } else { bound / 2.0 }),
            note: None,
        }
    }

    async fn shut_down(&mut self) {
        let mut calls = self.calls.lock().unwrap();
        calls.up = false;
        calls.shut_downs += 1;
    }
}
