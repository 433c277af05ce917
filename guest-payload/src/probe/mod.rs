//! The guest kernel's view of a run, measured beside the workload around exactly its window.
//!
//! Counting: one perf counter per CPU (pid = -1, every task) on each of the tracepoints
//! `lock:contention_begin`, `lock:contention_end`, `sched:sched_switch` and
//! `sched:sched_wakeup`; no trace buffer, the kernel only bumps a per-event count. The spin vs
//! sleep split needs `contention_begin`'s `flags`, which a count cannot see: a second counter
//! on the same tracepoint carries the filter `flags & 1` (`LCB_F_SPIN`), so `spin` counts the
//! begins of spinning waits (spinlocks, and a mutex's optimistic spin) and `sleep` is the rest
//! (`contention_begin - spin`: rwsem, mutex and rtmutex waits that block). A third one with
//! `flags & 32` (`LCB_F_MUTEX`) counts mutex waits, spinning or sleeping. Note that a mutex
//! waiter that spins and then sleeps emits two begins (6.1's `__mutex_lock_common`).
//!
//! The counters are opened disabled before the workload starts, enabled by
//! [`window_open`] (called by the start gates just before they stamp the start) and disabled
//! by [`window_close`] (called where a workload's last worker stopped, else when the workload
//! returns); the window's own length divides the counts.
//!
//! Trace events (`--trace-event system:name`) are switched on through tracefs before the
//! workload starts and off after it returned, so a variant can measure what tracing costs.

pub mod perf;
pub mod profile;
pub mod tracefs;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use tracefs::Event;

/// The probe's command-line switches (global options of `ocrig-payload`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Options {
    /// Count kernel lock contention and scheduler events in the window. Off by default: a perf
    /// counter on a tracepoint switches the tracepoint on, and each event then costs building
    /// its record (hackbench under TCG: median 0.56 s counted vs 0.41 s not, n = 5 each).
    #[arg(long, global = true)]
    pub kernel_counts: bool,
    /// Switch this guest trace event on through tracefs for the run (`system:name`, e.g.
    /// lock:contention_begin); repeatable. A name the kernel lacks fails the run (exit 2).
    #[arg(long = "trace-event", global = true, value_name = "SYSTEM:NAME", value_parser = parse_event)]
    pub trace_events: Vec<String>,
    /// Sample the kernel system-wide at this rate (cpu-clock, IP + kernel call chain) during
    /// the window and store folded stacks in the report's `kernel.profile`. Off by default.
    #[arg(long, global = true, value_name = "HZ", value_parser = clap::value_parser!(u64).range(1..=profile::DEFAULT_MAX_SAMPLE_RATE))]
    pub profile_hz: Option<u64>,
}

fn parse_event(s: &str) -> Result<String, String> {
    Event::parse(s).map(|e| e.to_string())
}

/// What one counter counts: a name in the report, a tracepoint and an optional filter.
struct Spec {
    name: &'static str,
    event: &'static str,
    filter: Option<&'static str>,
}

const SPECS: &[Spec] = &[
    Spec {
        name: "contention_begin",
        event: "lock:contention_begin",
        filter: None,
    },
    Spec {
        name: "contention_end",
        event: "lock:contention_end",
        filter: None,
    },
    // LCB_F_SPIN = 1 << 0, LCB_F_MUTEX = 1 << 5 (include/trace/events/lock.h).
    Spec {
        name: "spin",
        event: "lock:contention_begin",
        filter: Some("flags & 1"),
    },
    Spec {
        name: "mutex",
        event: "lock:contention_begin",
        filter: Some("flags & 32"),
    },
    Spec {
        name: "sched_switch",
        event: "sched:sched_switch",
        filter: None,
    },
    Spec {
        name: "sched_wakeup",
        event: "sched:sched_wakeup",
        filter: None,
    },
];

/// The `kernel` field of a report: counts over the window, rates, and why a figure is missing.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct KernelView {
    /// How the figures were taken.
    pub source: String,
    /// The kernel release the counts come from.
    pub kernel: String,
    /// CPUs counted (all online ones).
    pub cpus: Vec<usize>,
    /// From the start gate to `window_end`; None when the window never opened.
    pub window_ns: Option<u64>,
    /// Where the window closed: `workers_stopped` (the workload's own end) or `workload_returned`.
    pub window_end: Option<String>,
    /// name → events in the window, summed over CPUs (None: not measured, see `not_measured`).
    /// `sleep` = `contention_begin - spin`.
    pub counts: BTreeMap<String, Option<u64>>,
    pub per_sec: BTreeMap<String, Option<f64>>,
    /// Per operation of the workload (`ops_field` of its report).
    pub per_op: BTreeMap<String, Option<f64>>,
    pub ops_field: Option<String>,
    /// name → why it has no figure.
    pub not_measured: BTreeMap<String, String>,
    /// Trace events switched on through tracefs for this run.
    pub trace_events: Vec<String>,
    /// The kernel profile of the window (`--profile-hz`); None when not asked for or failed
    /// (then `not_measured.profile` says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<profile::Profile>,
}

struct Opened {
    /// Per spec: its counters (one per CPU), or why it has none.
    counters: Vec<Result<Vec<perf::Counter>, String>>,
    sampler: Option<profile::Sampler>,
    opened_at: Option<Instant>,
    closed: Option<(Instant, &'static str)>,
}

static WINDOW: Mutex<Option<Opened>> = Mutex::new(None);

fn window() -> std::sync::MutexGuard<'static, Option<Opened>> {
    WINDOW.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts counting, if a probe is set up and its window is not open yet. Called by the start
/// gates right before they stamp the start; later calls do nothing.
pub fn window_open() {
    let mut w = window();
    if let Some(o) = w.as_mut().filter(|o| o.opened_at.is_none()) {
        for c in o.counters.iter_mut() {
            if let Ok(cs) = c
                && let Err(e) = cs.iter().try_for_each(|x| x.start())
            {
                *c = Err(format!("enabling the counter failed: {e}"));
            }
        }
        if let Some(s) = &o.sampler {
            s.start();
        }
        o.opened_at = Some(Instant::now());
    }
}

/// Stops counting where the workload's last worker stopped; later calls do nothing.
pub fn window_close() {
    close(&mut window(), "workers_stopped");
}

fn close(w: &mut Option<Opened>, how: &'static str) {
    if let Some(o) = w.as_mut().filter(|o| o.opened_at.is_some() && o.closed.is_none()) {
        o.closed = Some((Instant::now(), how));
        if let Some(s) = &o.sampler {
            s.stop();
        }
        for c in o.counters.iter_mut() {
            if let Ok(cs) = c
                && let Err(e) = cs.iter().try_for_each(|x| x.stop())
            {
                *c = Err(format!("disabling the counter failed: {e}"));
            }
        }
    }
}

/// A probe for one workload run: trace events on, counters opened (disabled).
pub struct Session {
    root: Option<std::path::PathBuf>,
    enabled_events: Vec<Event>,
    view: KernelView,
}

/// A trace event the running kernel lacks or tracefs refused: bad input for this guest.
#[derive(Debug)]
pub struct TraceEventError(pub String);

impl std::fmt::Display for TraceEventError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TraceEventError {}

impl Session {
    /// Switches the requested trace events on and opens the counters. Fails only for a trace
    /// event that cannot be switched on (after switching the others back off); counters that
    /// cannot be opened become `null` figures with the reason.
    pub fn start(opts: &Options) -> Result<Self, TraceEventError> {
        let mut s = Self {
            root: None,
            enabled_events: Vec::new(),
            view: KernelView {
                source:
                    "perf_event counting on tracepoints, one counter per online CPU (pid -1), no trace buffer"
                        .into(),
                kernel: tracefs::kernel_release(),
                ..KernelView::default()
            },
        };
        let root = tracefs::root();
        if !opts.trace_events.is_empty() {
            let root = root.clone().map_err(|e| {
                TraceEventError(format!(
                    "cannot switch on trace events {} on kernel {}: {e}",
                    opts.trace_events.join(", "),
                    s.view.kernel
                ))
            })?;
            for name in &opts.trace_events {
                let event = Event::parse(name).map_err(TraceEventError)?;
                if let Err(e) = tracefs::set_enabled(&root, &event, true) {
                    s.disable_events();
                    return Err(TraceEventError(format!("trace event {event}: {e}")));
                }
                s.enabled_events.push(event);
                s.root = Some(root.clone());
            }
            s.view.trace_events = opts.trace_events.clone();
        }
        let reason = if !opts.kernel_counts {
            Some(
                "kernel counting not asked for (--kernel-counts, a variant's kernel_counts: true)"
                    .to_string(),
            )
        } else {
            root.as_ref().err().cloned()
        };
        let cpus = tracefs::online_cpus();
        let counters = SPECS
            .iter()
            .map(|spec| {
                if let Some(r) = &reason {
                    return Err(r.clone());
                }
                let root = root.as_ref().map_err(Clone::clone)?;
                let cpus = cpus.as_ref().map_err(Clone::clone)?;
                let event = Event::parse(spec.event).expect("a valid built-in name");
                let id = tracefs::event_id(root, &event)?;
                cpus.iter()
                    .map(|&cpu| perf::Counter::tracepoint(id, cpu, spec.filter))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| {
                        format!(
                            "perf_event_open of {}{} failed: {e}",
                            spec.event,
                            spec.filter
                                .map(|f| format!(" with filter '{f}'"))
                                .unwrap_or_default()
                        )
                    })
            })
            .collect();
        let mut sampler = None;
        if let Some(hz) = opts.profile_hz {
            if let Some(max) = profile::max_sample_rate().filter(|&m| hz > m) {
                s.disable_events();
                return Err(TraceEventError(format!(
                    "--profile-hz {hz} is outside 1..={max} (kernel {}'s perf_event_max_sample_rate)",
                    s.view.kernel
                )));
            }
            match cpus
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|c| profile::Sampler::open(c, hz))
            {
                Ok(x) => sampler = Some(x),
                Err(why) => {
                    s.view.not_measured.insert("profile".into(), why);
                }
            }
        }
        s.view.cpus = cpus.unwrap_or_default();
        *window() = Some(Opened {
            counters,
            sampler,
            opened_at: None,
            closed: None,
        });
        Ok(s)
    }

    fn disable_events(&mut self) {
        if let Some(root) = &self.root {
            for e in self.enabled_events.drain(..) {
                if let Err(err) = tracefs::set_enabled(root, &e, false) {
                    eprintln!("ocrig-payload: warning: switching {e} off failed: {err}");
                }
            }
        }
    }

    /// Closes the window (if the workload did not), switches trace events off and puts the
    /// `kernel` field into `report` (when there is one).
    pub fn finish(mut self, report: Option<&mut crate::report::Report>) {
        let opened = {
            let mut w = window();
            close(&mut w, "workload_returned");
            w.take()
        };
        self.disable_events();
        let Some(report) = report else { return };
        let mut view = std::mem::take(&mut self.view);
        if let Some(o) = opened {
            fill(&mut view, o, report);
        }
        if let Ok(v) = serde_json::to_value(&view) {
            report.detail.insert("kernel".into(), v);
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.disable_events();
    }
}

/// The operation count a workload reports, for per-operation rates.
const OPS_FIELDS: &[&str] = &["ops_total", "files_read"];

fn fill(view: &mut KernelView, mut o: Opened, report: &crate::report::Report) {
    if let Some(s) = o.sampler.take() {
        if o.opened_at.is_some() {
            view.profile = Some(s.finish());
        } else {
            view.not_measured.insert(
                "profile".into(),
                "the workload has no measured-window hook, so nothing was sampled".into(),
            );
        }
    }
    let window_ns = match (o.opened_at, o.closed) {
        (Some(a), Some((b, how))) => {
            view.window_end = Some(how.into());
            Some(b.saturating_duration_since(a).as_nanos() as u64)
        }
        _ => None,
    };
    view.window_ns = window_ns;
    let ops = OPS_FIELDS
        .iter()
        .find_map(|f| report.detail.get(*f).and_then(|v| v.as_u64()).map(|n| (*f, n)));
    view.ops_field = ops.map(|(f, _)| f.to_string());
    let put = |view: &mut KernelView, name: &str, value: Result<u64, String>| {
        let v = value
            .map_err(|why| view.not_measured.insert(name.into(), why))
            .ok();
        view.counts.insert(name.into(), v);
        let rate = |d: f64| v.filter(|_| d > 0.0).map(|n| n as f64 / d);
        view.per_sec
            .insert(name.into(), rate(window_ns.map_or(0.0, |ns| ns as f64 / 1e9)));
        view.per_op
            .insert(name.into(), rate(ops.map_or(0.0, |(_, n)| n as f64)));
    };
    for (spec, counters) in SPECS.iter().zip(o.counters) {
        let value = counters.and_then(|cs| {
            if window_ns.is_none() {
                return Err("the workload has no measured-window hook, so nothing was counted".into());
            }
            cs.iter()
                .map(|c| c.read().map(|r| r.count))
                .sum::<std::io::Result<u64>>()
                .map_err(|e| format!("reading the counter failed: {e}"))
        });
        put(view, spec.name, value);
    }
    let sleep = match (view.counts["contention_begin"], view.counts["spin"]) {
        // Two counters enabled a few microseconds apart: the difference never goes below 0.
        (Some(all), Some(spin)) => Ok(all.saturating_sub(spin)),
        // Not measured for the reason its parts were not.
        _ => Err(["contention_begin", "spin"]
            .iter()
            .find_map(|n| view.not_measured.get(*n).cloned())
            .unwrap_or_else(|| "needs both contention_begin and spin".into())),
    };
    put(view, "sleep", sleep);
    if ops.is_none() {
        view.not_measured.insert(
            "per_op".into(),
            format!(
                "the {} report has no operation count ({})",
                report.workload,
                OPS_FIELDS.join(" or ")
            ),
        );
    }
}
