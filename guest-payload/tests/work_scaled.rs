//! The switch that makes the work wrong after the calibration (`--debug-scale-*`): half and
//! twice the asked hold or gap (lock workload), work inside or outside (mutex workload) are
//! refused by the in-run checks, the asked one passes.
//!
//! Its own test binary, and its tests one at a time: the check compares in-run work with a
//! calibration made a moment before, and on a 2-CPU machine any other test running beside it
//! moves the loop's speed between the two. In the library's binary (its other tests running
//! alongside) a CI run read the unscaled control x1.11-1.15 off its calibration in every attempt
//! for two minutes (2026-12-05) and the test failed; `cargo test` runs test binaries one after
//! another, so here nothing of the suite runs beside it.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use ocrig_payload::checks::{Check, MAX_CALIBRATION_DRIFT};
use ocrig_payload::preempt_sample::{DEFAULT_SAMPLE_RATE, DEFAULT_STRETCH_THRESHOLD_NS};
use ocrig_payload::report::Report;
use ocrig_payload::work_as_run::{MAX_WORK_ERROR, TimedWork};
use ocrig_payload::workloads::{lock, mutex};

/// One test at a time: the two tests of this file would otherwise load each other's CPU.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// How long to wait for the loop to hold still: the machine is a shared cloud VM whose loop
/// speed moves up to 2x for tens of milliseconds to seconds (measured 2026-12-04).
const PATIENCE: Duration = Duration::from_secs(120);

/// Whether the loop kept its calibrated
/// speed through the run, so the check's verdict is about the scaling and not the host. The
/// unscaled `control` must read within x1.05 of the calibration, and at x1 (both intervals
/// unscaled, timed in the same cycles) the two within 4 % of each other. Why the second: this
/// VM's host switches between two speeds x1.8 apart every 40 ms-2 s, and when a short run
/// straddles a switch the median of either interval lands in either mode (a mutex x1 run read
/// 0.80 beside a control of about 1.0, CI, 2026-12-04): a moving host the check is right to
/// refuse, not a sign the check is wrong.
fn held_still(factor: f64, tested: &TimedWork, control: &TimedWork) -> bool {
    let near = |q: f64, within: f64| q.ln().abs() <= within.ln_1p();
    let Some(c) = control.ratio else {
        return false;
    };
    near(c, 0.05) && (factor != 1.0 || tested.ratio.is_some_and(|t| near(t / c, 0.04)))
}

fn check(report: &Report, name: &str) -> Check {
    report.checks.iter().find(|c| c.name == name).unwrap().clone()
}

/// Runs `attempt` (one payload run returning the scaled interval's check, the scaled interval
/// and the unscaled control) until the control shows that the loop ran at its calibrated speed
/// (within x1.05: a scaled interval made while the speed moved the other way can be the right
/// length by accident), or [`PATIENCE`] passes.
fn held_still_run(
    what: &str,
    factor: f64,
    mut attempt: impl FnMut() -> (Check, TimedWork, TimedWork),
) -> Option<(Check, TimedWork)> {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        let (c, tested, control) = attempt();
        if held_still(factor, &tested, &control) {
            return Some((c, tested));
        }
        eprintln!("{what} x{factor}: the loop moved within the run, retrying: {tested:?} beside {control:?}");
    }
    None
}

fn assert_refused_unless_asked(what: &str, factor: f64, found: Option<(Check, TimedWork)>) {
    let (c, t) = found.unwrap_or_else(|| {
        panic!("{what} x{factor}: the loop never held its calibrated speed in {PATIENCE:?}")
    });
    assert_eq!(c.ok, factor == 1.0, "{what} x{factor}: {c:?}");
    // The ratio read is the factor, give or take the control's 5 % and the loop's spread within
    // the run (a scaled hold of 500 ns read 560 ns beside a 1000 ns gap within 5 %, 2026-12-04).
    let ratio = t.ratio.unwrap();
    assert!((ratio / factor).ln().abs() < 0.15, "{what} x{factor}: {t:?}");
}

fn lock_args(factor: f64, gap: bool) -> lock::Args {
    // One thread: its holds and gaps run under the same conditions (with two, a gap runs while
    // the other thread holds and a hold while it spins, and on this machine the two differ by
    // 3-6 %, which would blur the control).
    lock::Args {
        algo: "tas".into(),
        threads: 1,
        duration_ms: 150,
        hold_ns: 1_000,
        gap_ns: 1_000,
        max_calibration_drift: MAX_CALIBRATION_DRIFT,
        hold_sample_rate: DEFAULT_SAMPLE_RATE,
        stretch_threshold_ns: DEFAULT_STRETCH_THRESHOLD_NS,
        no_hold_sampling: false,
        max_work_error: MAX_WORK_ERROR,
        no_loop_memory: true,
        debug_scale_hold: if gap { 1.0 } else { factor },
        debug_scale_gap: if gap { factor } else { 1.0 },
        debug_guest_stall: None,
        split_runqueue_wait: false,
    }
}

#[test]
fn lock_hold_or_gap_scaled_after_the_calibration_is_refused_both_ways() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for gap in [false, true] {
        let what = if gap { "gap_as_asked" } else { "hold_as_asked" };
        for factor in [0.5, 2.0, 1.0] {
            let found = held_still_run(what, factor, || {
                let report = lock::run(&lock_args(factor, gap)).unwrap();
                let r: lock::LockResult = report.detail_as().unwrap();
                // The report says the counts were scaled.
                let cal = &r.calibration;
                assert_eq!(
                    (cal.debug_scale_hold, cal.debug_scale_gap),
                    if gap { (1.0, factor) } else { (factor, 1.0) }
                );
                let w = r.work_as_run.unwrap();
                let (tested, control) = if gap { (w.gap, w.hold) } else { (w.hold, w.gap) };
                (check(&report, what), tested, control)
            });
            assert_refused_unless_asked(what, factor, found);
        }
    }
}

fn mutex_args(factor: f64, outside: bool) -> mutex::Args {
    // One thread: its work inside and outside run under the same conditions.
    mutex::Args {
        algo: "tas".into(),
        threads: 1,
        num: 4,
        locks: 20_000,
        loops: 100,
        acquire: mutex::Acquire::Lock,
        work_inside: 1_000,
        work_outside: 1_000,
        contended_delay_ns: 0,
        contended_sleep_ns: 0,
        max_calibration_drift: MAX_CALIBRATION_DRIFT,
        max_work_error: MAX_WORK_ERROR,
        no_loop_memory: true,
        debug_scale_inside: if outside { 1.0 } else { factor },
        debug_scale_outside: if outside { factor } else { 1.0 },
    }
}

#[test]
fn mutex_work_scaled_after_the_calibration_is_refused_both_ways() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for outside in [false, true] {
        let what = if outside {
            "work_outside_as_asked"
        } else {
            "work_inside_as_asked"
        };
        for factor in [0.5, 2.0, 1.0] {
            let found = held_still_run(what, factor, || {
                let report = mutex::run(&mutex_args(factor, outside)).unwrap();
                let r: mutex::MutexResult = report.detail_as().unwrap();
                let c = r.calibration.unwrap();
                assert_eq!(
                    (c.debug_scale_inside, c.debug_scale_outside),
                    if outside { (1.0, factor) } else { (factor, 1.0) }
                );
                let w = c.work_as_run.unwrap();
                let (tested, control) = if outside {
                    (w.outside, w.inside)
                } else {
                    (w.inside, w.outside)
                };
                (check(&report, what), tested, control)
            });
            assert_refused_unless_asked(what, factor, found);
        }
    }
}
