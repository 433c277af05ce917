//! What each guest's payload window says against the run's vCPU timeline: its vCPU wait over
//! the run's own window ([`crate::telemetry::run_window`]) and the host's view of each stretched
//! interval it listed ([`crate::telemetry::stretched_on_host`]).
//!
//! A sliced run (`ocrig-payload slices`) is read once over all its slices, the guests' measured
//! time, and once per arm over that arm's own slices (each arm's `preemption.window_parts`), so
//! each variant's record carries its own figure (`vcpu_sched.arm_run_windows`,
//! `stretched_on_host_arms`, which [`crate::sweep::sliced`] puts in place per arm).

use serde_json::{Map, Value, json};

use crate::telemetry::run_window::GuestWindow;
use crate::telemetry::sched_trace;
use crate::telemetry::vcpu::RunWindow;
use ocrig_payload::slices::SLICED_WORKLOAD;

/// `vcpu_sched.arm_run_windows`: a sliced run's vCPU wait over each arm's own slices.
pub const ARM_RUN_WINDOWS: &str = "arm_run_windows";
/// `stretched_on_host_arms`: a sliced run's stretched intervals of each arm, on the host.
pub const STRETCHED_ON_HOST_ARMS: &str = "stretched_on_host_arms";

/// A guest whose payload finished: what its window is read from.
#[derive(Debug, Clone, Copy)]
pub struct FinishedGuest<'a> {
    pub index: usize,
    /// Its vCPU threads known to the trace.
    pub vcpus: usize,
    pub stdout: &'a str,
    /// Its go signal and its command's end on this machine's CLOCK_MONOTONIC, ns.
    pub command: Option<(u64, u64)>,
}

/// What one guest's window gives its record.
#[derive(Debug, Default)]
pub struct GuestWindows {
    run_window: Option<RunWindow>,
    on_host: Option<Value>,
    /// A sliced run's: per arm, (its run window, its stretched intervals on the host).
    arms: Option<Vec<(Option<RunWindow>, Option<Value>)>>,
}

impl GuestWindows {
    /// Into the guest's record's telemetry: `stretched_on_host`, `vcpu_sched.run_window` and,
    /// for a sliced run, each arm's.
    pub fn put_into(self, telemetry: &mut Map<String, Value>) {
        if let Some(h) = self.on_host {
            telemetry.insert("stretched_on_host".into(), h);
        }
        let (windows, on_host): (Vec<_>, Vec<_>) = self.arms.unwrap_or_default().into_iter().unzip();
        if !on_host.is_empty() {
            telemetry.insert(STRETCHED_ON_HOST_ARMS.into(), json!(on_host));
        }
        if let Some(Value::Object(sched)) = telemetry.get_mut("vcpu_sched") {
            if let Some(rw) = self.run_window {
                sched.insert("run_window".into(), json!(rw));
            }
            if !windows.is_empty() {
                sched.insert(ARM_RUN_WINDOWS.into(), json!(windows));
            }
        }
    }
}

/// Every finished guest's [`GuestWindows`], by worker index.
pub fn read(
    finished: &[FinishedGuest<'_>],
    clocks: &[Option<Value>],
    kept: Option<&sched_trace::Kept>,
    traced: bool,
    workers: usize,
) -> Vec<GuestWindows> {
    let mut preemption: Vec<Option<Value>> = vec![None; workers];
    let mut arms: Vec<Option<Vec<Option<Value>>>> = vec![None; workers];
    for g in finished {
        match preemptions(g.stdout) {
            Preemptions::Whole(p) => preemption[g.index] = p,
            Preemptions::Arms(a) => {
                preemption[g.index] = all_arms(&a);
                arms[g.index] = Some(a);
            }
        }
    }
    let on_host =
        |p: &[Option<&Value>], index: usize| stretched_on_host(p[index], clocks[index].as_ref(), kept, index);
    // The whole run's windows, then each arm's: arm i's slices where the guest ran a sliced
    // run; a guest that ran something else (a background load) is read over the measured
    // guest's arm, as in a plain run.
    let arm_count = arms.iter().flatten().map(Vec::len).max().unwrap_or(0);
    let sets: Vec<Vec<Option<&Value>>> = std::iter::once(preemption.iter().map(Option::as_ref).collect())
        .chain((0..arm_count).map(|i| {
            arms.iter()
                .map(|a| a.as_ref().and_then(|a| a.get(i)).and_then(Option::as_ref))
                .collect()
        }))
        .collect();
    let mut windows = run_windows(finished, &sets, clocks, kept, traced, workers).into_iter();
    let mut out: Vec<GuestWindows> = windows
        .next()
        .unwrap_or_else(|| vec![None; workers])
        .into_iter()
        .map(|run_window| GuestWindows {
            run_window,
            ..Default::default()
        })
        .collect();
    for g in finished.iter().filter(|g| arms[g.index].is_none()) {
        out[g.index].on_host = on_host(&sets[0], g.index);
    }
    for (p, arm_windows) in sets[1..].iter().zip(windows) {
        for g in finished.iter().filter(|g| arms[g.index].is_some()) {
            let figures = (arm_windows[g.index].clone(), on_host(p, g.index));
            out[g.index].arms.get_or_insert_with(Vec::new).push(figures);
        }
    }
    out
}

/// A payload report's `preemption`: an ordinary run's, or each arm's of a sliced run.
#[derive(Debug, PartialEq)]
enum Preemptions {
    Whole(Option<Value>),
    Arms(Vec<Option<Value>>),
}

/// The `preemption` objects of a payload's report, read once (only those fields are built: the
/// rest is skipped, not made a tree): an ordinary run's, None where it has none; or a sliced
/// run's arms' (each its slices merged, with every slice's window in `window_parts`), in arm
/// order.
fn preemptions(stdout: &str) -> Preemptions {
    #[derive(serde::Deserialize)]
    struct Arm {
        preemption: Option<Value>,
    }
    #[derive(serde::Deserialize)]
    struct Report {
        #[serde(default)]
        workload: String,
        preemption: Option<Value>,
        #[serde(default)]
        arms: Vec<Arm>,
    }
    let object = |p: Option<Value>| p.filter(Value::is_object);
    match serde_json::from_str::<Report>(stdout.trim()) {
        Ok(r) if r.workload == SLICED_WORKLOAD => {
            Preemptions::Arms(r.arms.into_iter().map(|a| object(a.preemption)).collect())
        }
        Ok(r) => Preemptions::Whole(object(r.preemption)),
        Err(_) => Preemptions::Whole(None),
    }
}

/// The window of all of a sliced run's arms together: every slice's, in time order (where any
/// arm has none, none).
fn all_arms(arms: &[Option<Value>]) -> Option<Value> {
    let mut parts = Vec::new();
    for arm in arms {
        parts.extend(arm.as_ref()?["window_parts"].as_array()?.iter().cloned());
    }
    parts.sort_by_key(|p| p["start_tick"].as_u64());
    Some(json!({ "window_parts": parts }))
}

/// Each stretched interval the guest's payload listed, against the host's timeline
/// ([`crate::telemetry::stretched_on_host`]); None where the payload timed none.
fn stretched_on_host(
    preemption: Option<&Value>,
    clock: Option<&Value>,
    kept: Option<&sched_trace::Kept>,
    guest: usize,
) -> Option<Value> {
    let preemption = preemption?;
    Some(match (kept, clock) {
        (Some(k), Some(clock)) => crate::telemetry::stretched_on_host::of_run(
            preemption,
            clock,
            &k.timeline,
            guest as u32,
            k.offset_ns,
        ),
        (None, _) => json!({ "unavailable": "the run has no vCPU timeline (see extra.timeline)" }),
        (Some(_), None) => json!({ "unavailable": "the guest's TSC was not tied to the host's clock" }),
    })
}

/// Each finished guest's vCPU wait over the run's own window
/// ([`crate::telemetry::run_window`]), by worker index, for each set of payload windows
/// (`preemption` objects by worker index); or why there is none. `traced`: the run asked for
/// a timeline (else there is nothing to say why about).
fn run_windows(
    finished: &[FinishedGuest<'_>],
    sets: &[Vec<Option<&Value>>],
    clocks: &[Option<Value>],
    kept: Option<&sched_trace::Kept>,
    traced: bool,
    workers: usize,
) -> Vec<Vec<Option<RunWindow>>> {
    let Some(kept) = kept else {
        let why = if traced {
            "the run has no vCPU timeline (see extra.timeline)"
        } else {
            "no vCPU timeline was recorded (host.timeline)"
        };
        let mut out: Vec<Option<RunWindow>> = vec![None; workers];
        for g in finished {
            out[g.index] = Some(RunWindow {
                unavailable: Some(why.into()),
                ..Default::default()
            });
        }
        return vec![out; sets.len()];
    };
    let guests: Vec<Vec<GuestWindow<'_>>> = sets
        .iter()
        .map(|preemption| {
            finished
                .iter()
                .map(|g| GuestWindow {
                    guest: g.index as u32,
                    vcpus: g.vcpus,
                    preemption: preemption[g.index],
                    clock: clocks[g.index].as_ref(),
                    command: g.command,
                })
                .collect()
        })
        .collect();
    crate::telemetry::run_window::of_runs(&guests, kept, MEASURED_GUEST)
        .into_iter()
        .map(|measured| {
            let mut out: Vec<Option<RunWindow>> = vec![None; workers];
            for (g, w) in finished.iter().zip(measured) {
                out[g.index] = Some(w);
            }
            out
        })
        .collect()
}

/// The guest whose records are a cell's samples (`stats::digest::is_primary_guest`): its
/// payload's window is the run's, for guests whose payload gives none.
const MEASURED_GUEST: u32 = 0;

#[cfg(test)]
mod tests {
    use super::*;

    fn part(a: u64, b: u64) -> Value {
        json!({"start_tick": a, "end_tick": b, "hz": 1e9})
    }

    #[test]
    fn a_sliced_report_gives_each_arms_slices_and_all_of_them_together() {
        let arm = |parts: Vec<Value>| json!({"workload": "lock", "preemption": {"window_parts": parts}});
        let stdout = json!({
            "workload": SLICED_WORKLOAD,
            "arms": [arm(vec![part(0, 10), part(30, 40)]), arm(vec![part(15, 25), part(45, 55)])],
        })
        .to_string();
        let Preemptions::Arms(arms) = preemptions(&stdout) else {
            panic!("a sliced report")
        };
        assert_eq!(arms.len(), 2);
        assert_eq!(arms[1].as_ref().unwrap()["window_parts"][0], part(15, 25));
        // Together: every slice in time order.
        let all = all_arms(&arms).unwrap();
        let starts: Vec<u64> = all["window_parts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["start_tick"].as_u64().unwrap())
            .collect();
        assert_eq!(starts, [0, 15, 30, 45]);
        // An arm without its slices' windows: none together (never a window with holes).
        let partial = vec![arms[0].clone(), None];
        assert_eq!(all_arms(&partial), None);
        // An ordinary report is not sliced.
        let plain = json!({"workload": "lock", "preemption": {"window": part(0, 1)}}).to_string();
        assert_eq!(
            preemptions(&plain),
            Preemptions::Whole(Some(json!({"window": part(0, 1)})))
        );
    }

    #[test]
    fn each_arms_figures_go_beside_the_whole_runs() {
        let mut telemetry = Map::new();
        telemetry.insert("vcpu_sched".into(), json!({"wall_s": 1.0}));
        let window = |share: f64| RunWindow {
            mean_wait_share: Some(share),
            ..Default::default()
        };
        GuestWindows {
            run_window: Some(window(0.5)),
            on_host: None,
            arms: Some(vec![
                (Some(window(0.4)), Some(json!({"holds": []}))),
                (Some(window(0.6)), None),
            ]),
        }
        .put_into(&mut telemetry);
        let sched = &telemetry["vcpu_sched"];
        assert_eq!(sched["run_window"]["mean_wait_share"], 0.5);
        assert_eq!(sched[ARM_RUN_WINDOWS][1]["mean_wait_share"], 0.6);
        assert_eq!(telemetry[STRETCHED_ON_HOST_ARMS], json!([{"holds": []}, null]));
        assert!(!telemetry.contains_key("stretched_on_host"));
    }
}
