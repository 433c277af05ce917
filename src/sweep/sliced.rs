//! Sliced runs on the host's side: the variants of one workload that share guests, run in one
//! payload invocation as alternating slices (the payload's `slices` command,
//! [`ocrig_payload::slices`]), and that invocation's output told apart into one outcome per
//! variant, as if each had run alone — so the records, the accounting rule and the reports
//! stay those of ordinary runs: round `r` of every sliced variant is one record each, made by
//! the same payload invocation.

use serde_json::{Map, Value, json};

use crate::executor::windows::{ARM_RUN_WINDOWS, STRETCHED_ON_HOST_ARMS};
use crate::executor::{CHECK_FAILED_STATUS, Finished, RunOutcome, WorkerRun};
use crate::journal::RunRecord;
use crate::scenario::Variant;
use crate::scenario::expand::WorkloadInstance;
use ocrig_payload::report::Report;
use ocrig_payload::slices::{ARM_SEPARATOR, SLICED_WORKLOAD};

/// How a workload's variants are sliced: every slice's window, the schedule's period and how
/// many slices each variant gets (its run's duration over the slice, rounded up).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SliceSpec {
    pub slice_ms: u64,
    pub period_ms: u64,
    /// From a slice's start on the schedule to its window's opening (every guest's at once).
    pub open_after_ms: u64,
    pub slices_per_arm: u32,
}

impl SliceSpec {
    /// How long a sliced run of `arms` arms lasts, go signal to its last slice's end, s.
    pub fn run_seconds(&self, arms: usize) -> f64 {
        (arms as f64 * f64::from(self.slices_per_arm) * self.period_ms as f64) / 1000.0
    }
}

/// Room in a slice's period for its set-up and teardown (a lock run's two 20 ms TSC
/// calibrations, its threads' start and join), ms. A slice whose predecessor overran starts
/// late, and says by how much (`late_ms`).
pub const SLICE_SETUP_MS: u64 = 200;

/// Of that, the room before the window: every guest's window opens this long after the
/// slice's start on the schedule, so the guests' slices of one arm cover the same time (each
/// guest's set-up takes its own time); a set-up that overruns it opens its window late
/// (`ready_ms` past `opened`'s time).
pub const SLICE_OPEN_AFTER_MS: u64 = 100;

/// How `w` is sliced under variant `v` (whose payload command line is `argv`), or None where
/// it runs whole: the workload is not sliced, or the variant asks the guest kernel for its
/// view of the run (a probe covers one payload run, which would be every arm's).
pub fn spec_for(w: &WorkloadInstance, v: &Variant, argv: &[String]) -> Option<SliceSpec> {
    let slice_ms = w.slice_ms.filter(|&ms| ms > 0)?;
    if !v.trace_events.is_empty() || v.kernel_counts || v.profile.is_some() {
        return None;
    }
    // As the payload reads the command line: a duration left out is the workload's default.
    let command = ocrig_payload::cli::validate(argv).ok()?;
    let run_ms = ocrig_payload::slices::duration_ms(&command)? as f64;
    Some(SliceSpec {
        slice_ms,
        period_ms: slice_ms + SLICE_SETUP_MS,
        open_after_ms: SLICE_OPEN_AFTER_MS,
        slices_per_arm: (run_ms / slice_ms as f64).ceil().max(1.0) as u32,
    })
}

/// Where a sliced record keeps what its run shared with the other variants' records.
pub const SLICED_KEY: &str = "sliced_with";

/// The payload command line of one sliced run of `arms` (each a cell's own argv, subcommand
/// first, variant order), as `spec` says.
pub fn argv(spec: SliceSpec, arms: &[&[String]]) -> Vec<String> {
    let mut argv: Vec<String> = vec![
        "slices".into(),
        "--slice-ms".into(),
        spec.slice_ms.to_string(),
        "--period-ms".into(),
        spec.period_ms.to_string(),
        "--open-after-ms".into(),
        spec.open_after_ms.to_string(),
        "--slices-per-arm".into(),
        spec.slices_per_arm.to_string(),
        "--".into(),
    ];
    for (i, arm) in arms.iter().enumerate() {
        if i > 0 {
            argv.push(ARM_SEPARATOR.into());
        }
        argv.extend(arm.iter().cloned());
    }
    argv
}

/// One outcome per arm from the outcome of the sliced run `sliced_argv` of `arms`: a worker
/// that ran the sliced command gets, for each arm, that arm's report as its output (status 3
/// and the payload's failure lines where the arm's own checks failed) and the arm's argv; a
/// worker that failed, or ran something else (a background load), is the same in every arm.
pub fn split(outcome: &RunOutcome, sliced_argv: &[String], arms: &[&[String]]) -> Vec<RunOutcome> {
    (0..arms.len())
        .map(|i| RunOutcome {
            workers: outcome
                .workers
                .iter()
                .map(|w| w.as_ref().map(|w| arm_of(w, sliced_argv, arms, i)))
                .collect(),
            start_skew_us: outcome.start_skew_us,
            host: outcome.host.clone(),
        })
        .collect()
}

fn arm_of(w: &WorkerRun, sliced_argv: &[String], arms: &[&[String]], i: usize) -> WorkerRun {
    let mut out = w.clone();
    if w.argv != sliced_argv {
        return out;
    }
    out.argv = arms[i].to_vec();
    let own = own_window(&mut out.telemetry, i);
    out.telemetry.insert(
        SLICED_KEY.into(),
        json!({
            "arms": arms.len(),
            "arm": i,
            "note": if own {
                "vcpu_sched.run_window and stretched_on_host are over this arm's own slices; the rest of this worker's telemetry covers every arm's slices"
            } else {
                "this worker's telemetry covers every arm's slices"
            },
        }),
    );
    if let Ok(f) = &w.result
        && (f.status == 0 || f.status == CHECK_FAILED_STATUS)
    {
        out.result = arm_output(f, i, arms.len());
    }
    out
}

/// Puts arm `i`'s own figures (read over its slices: [`crate::executor::windows`]) where an
/// ordinary run's record has them, and drops every arm's lists; whether it had them.
fn own_window(telemetry: &mut Map<String, Value>, i: usize) -> bool {
    let mut own = false;
    if let Some(Value::Array(mut arms)) = telemetry.remove(STRETCHED_ON_HOST_ARMS)
        && i < arms.len()
    {
        let h = arms.swap_remove(i);
        if !h.is_null() {
            telemetry.insert("stretched_on_host".into(), h);
        }
    }
    if let Some(Value::Object(sched)) = telemetry.get_mut("vcpu_sched")
        && let Some(Value::Array(mut arms)) = sched.remove(ARM_RUN_WINDOWS)
        && i < arms.len()
    {
        let w = arms.swap_remove(i);
        if !w.is_null() {
            sched.insert("run_window".into(), w);
            own = true;
        }
    }
    own
}

/// Arm `i`'s output from the sliced run's: its report as the payload would have printed it
/// alone, or why there is none.
fn arm_output(f: &Finished, i: usize, arms: usize) -> Result<Finished, String> {
    let report: Report = serde_json::from_str(f.stdout.trim()).map_err(|e| {
        format!(
            "the sliced run printed no valid report ({e}): {}",
            f.stdout.trim()
        )
    })?;
    if report.workload != SLICED_WORKLOAD {
        return Err(format!("the sliced run reported workload `{}`", report.workload));
    }
    let mut all: Vec<Report> =
        serde_json::from_value(report.detail.get("arms").cloned().unwrap_or(Value::Null))
            .map_err(|e| format!("the sliced run's report has no arms ({e})"))?;
    if all.len() != arms {
        return Err(format!("the sliced run reported {} arms, not {arms}", all.len()));
    }
    let mut arm = all.swap_remove(i);
    // The guest kernel's view (a probe) covered every arm: kept on each, said so.
    if let Some(kernel) = report.detail.get("kernel") {
        arm.detail.insert("kernel".into(), kernel.clone());
        arm.detail.insert(
            "kernel_over".into(),
            json!("every arm's slices of the sliced run"),
        );
    }
    let failures = ocrig_payload::checks::failure_lines(&arm.checks);
    let stdout = serde_json::to_string(&arm).map_err(|e| e.to_string())?;
    Ok(Finished {
        status: if failures.is_empty() {
            0
        } else {
            CHECK_FAILED_STATUS
        },
        stdout,
        stderr: failures.join("\n"),
    })
}

/// Makes the arms' records of one sliced attempt stand or fall together: where any arm's
/// record failed, every arm's records are superseded, naming the variant and guest that
/// failed, so a round's variants are always measured by one invocation (a retry reruns them
/// all). A record that only stood with a failed partner keeps `ok` and no error of its own:
/// the rejection is counted against the variant that was refused, not its partners.
pub fn stand_together(per_arm: &mut [Vec<RunRecord>]) {
    let failures: Vec<String> = per_arm
        .iter()
        .flatten()
        .filter(|r| !r.ok)
        .map(|r| {
            format!(
                "{} guest {}: {}",
                r.variant,
                r.guest,
                r.error.as_deref().unwrap_or("failed")
            )
        })
        .collect();
    if failures.is_empty() {
        return;
    }
    let reason = format!(
        "sliced attempt failed, so none of its variants' results count ({})",
        failures.join("; ")
    );
    for r in per_arm.iter_mut().flatten() {
        r.superseded = Some(reason.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::collections::BTreeMap;

    fn s(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    fn arm_report(algo: &str, ops: f64, failed: bool) -> Report {
        let mut r = Report::new(
            "lock",
            1,
            ocrig_payload::env::Env::read(),
            BTreeMap::from([("ops_per_sec".to_string(), ops)]),
            &json!({"algo": algo}),
        )
        .unwrap();
        r.checks.push(ocrig_payload::checks::Check {
            name: "hold_as_asked".into(),
            ok: !failed,
            value: Some(1.2),
            bound: Some(1.1),
            detail: "slice 3 (due at 1200 ms): hold 1.2 × asked".into(),
        });
        r
    }

    fn sliced_stdout(arms: &[Report]) -> String {
        let r = Report::new(
            SLICED_WORKLOAD,
            2,
            ocrig_payload::env::Env::read(),
            BTreeMap::new(),
            &json!({"arms": arms, "order": [0, 1, 1, 0]}),
        )
        .unwrap();
        serde_json::to_string(&r).unwrap()
    }

    fn worker(argv: &[String], result: Result<Finished, String>) -> WorkerRun {
        WorkerRun {
            argv: argv.to_vec(),
            result,
            run_s: Some(1.0),
            telemetry: serde_json::Map::new(),
            console_tail: None,
        }
    }

    #[test]
    fn the_command_line_names_every_arm_in_order() {
        let (a, b) = (s(&["lock", "--algo", "ticket"]), s(&["lock", "--algo", "tas"]));
        let spec = SliceSpec {
            slice_ms: 300,
            period_ms: 450,
            open_after_ms: 100,
            slices_per_arm: 10,
        };
        let argv = argv(spec, &[&a, &b]);
        assert_eq!(
            argv.join(" "),
            "slices --slice-ms 300 --period-ms 450 --open-after-ms 100 --slices-per-arm 10 -- lock --algo ticket :: lock --algo tas"
        );
        // The payload's own parser reads it back.
        assert!(ocrig_payload::cli::validate(&argv).is_ok());
    }

    #[test]
    fn each_arm_gets_its_own_report_and_verdict() {
        let (a, b) = (s(&["lock", "--algo", "ticket"]), s(&["lock", "--algo", "tas"]));
        let arms: [&[String]; 2] = [&a, &b];
        let sliced = argv(
            SliceSpec {
                slice_ms: 300,
                period_ms: 450,
                open_after_ms: 100,
                slices_per_arm: 2,
            },
            &arms,
        );
        let stdout = sliced_stdout(&[arm_report("ticket", 1e6, false), arm_report("tas", 2e6, true)]);
        let hog = s(&["hog", "--seconds", "3"]);
        // The executor read each arm's vCPU wait and stretched intervals over its own slices.
        let mut measured = worker(
            &sliced,
            Ok(Finished {
                status: CHECK_FAILED_STATUS,
                stdout,
                stderr: String::new(),
            }),
        );
        measured.telemetry.insert(
            "vcpu_sched".into(),
            json!({
                "wall_s": 2.0,
                "run_window": {"mean_wait_share": 0.5},
                ARM_RUN_WINDOWS: [{"mean_wait_share": 0.4}, {"mean_wait_share": 0.6}],
            }),
        );
        measured
            .telemetry
            .insert(STRETCHED_ON_HOST_ARMS.into(), json!([{"holds": [1]}, null]));
        let outcome = RunOutcome {
            workers: vec![
                Some(measured),
                Some(worker(&sliced, Err("connection lost".into()))),
                Some(worker(
                    &hog,
                    Ok(Finished {
                        status: 0,
                        stdout: "{}".into(),
                        stderr: String::new(),
                    }),
                )),
                None,
            ],
            start_skew_us: 5.0,
            host: serde_json::Map::new(),
        };
        let split = split(&outcome, &sliced, &arms);
        assert_eq!(split.len(), 2);
        let first = |o: &RunOutcome| o.workers[0].clone().unwrap();
        let (t, s2) = (first(&split[0]), first(&split[1]));
        assert_eq!(t.argv, a);
        assert_eq!(s2.argv, b);
        // Each arm's record reads its own slices' figures where a plain run's has them.
        for (w, share) in [(&t, 0.4), (&s2, 0.6)] {
            let sched = &w.telemetry["vcpu_sched"];
            assert_eq!(sched["run_window"]["mean_wait_share"], share);
            assert!(sched.get(ARM_RUN_WINDOWS).is_none());
            assert!(!w.telemetry.contains_key(STRETCHED_ON_HOST_ARMS));
            assert!(
                w.telemetry[SLICED_KEY]["note"]
                    .as_str()
                    .unwrap()
                    .contains("own slices")
            );
        }
        assert_eq!(t.telemetry["stretched_on_host"], json!({"holds": [1]}));
        assert!(!s2.telemetry.contains_key("stretched_on_host"));
        let (t, s2) = (t.result.unwrap(), s2.result.unwrap());
        assert_eq!(t.status, 0);
        assert!(t.stdout.contains("\"ticket\""));
        assert_eq!(s2.status, CHECK_FAILED_STATUS);
        assert!(s2.stderr.contains("hold_as_asked: slice 3"), "{}", s2.stderr);
        // A failed worker fails every arm; a background worker is left as it was.
        for o in &split {
            assert_eq!(
                o.workers[1].as_ref().unwrap().result,
                Err("connection lost".into())
            );
            assert_eq!(o.workers[2].as_ref().unwrap().argv, hog);
            assert!(o.workers[3].is_none());
        }
    }
}
