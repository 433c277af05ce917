//! The switch that makes the work other than asked (`--debug-scale-*`): half and twice the
//! asked hold or gap (lock workload), work inside or outside (mutex workload) are refused by the
//! in-run checks, the asked one passes, and the ratio read is the factor.
//!
//! The work is spun to the TSC, so neither the CPU's speed states nor other tests loading the
//! machine move its length (they only lengthen the intervals they preempt, which the median
//! does not see); one run per case, no retries. 1000 ns is judged wherever a TSC read costs
//! under 1000 ns (a run refuses anything shorter than a read as bad input).

use ocrig_payload::checks::Check;
use ocrig_payload::preempt_sample::{DEFAULT_SAMPLE_RATE, DEFAULT_STRETCH_THRESHOLD_NS};
use ocrig_payload::report::Report;
use ocrig_payload::work_as_run::{MAX_WORK_ERROR, TimedWork};
use ocrig_payload::workloads::{lock, mutex};

fn check(report: &Report, name: &str) -> Check {
    report.checks.iter().find(|c| c.name == name).unwrap().clone()
}

/// The scaled interval's check refuses unless the factor is 1, its ratio reads the factor, and
/// the unscaled `control` (made in the same run) passes at about 1.
fn assert_refused_unless_asked(what: &str, factor: f64, c: &Check, tested: &TimedWork, control: &TimedWork) {
    assert_eq!(c.ok, factor == 1.0, "{what} x{factor}: {c:?}");
    assert!(c.value.is_some(), "{what} x{factor}: judged: {c:?}");
    let ratio = tested.ratio.unwrap();
    assert!(
        (ratio / factor).ln().abs() < MAX_WORK_ERROR.ln_1p(),
        "{what} x{factor}: {tested:?}"
    );
    let c = control.ratio.unwrap();
    assert!(
        c.ln().abs() < MAX_WORK_ERROR.ln_1p(),
        "{what} x{factor}: control {control:?}"
    );
}

fn lock_args(factor: f64, gap: bool) -> lock::Args {
    lock::Args {
        algo: "tas".into(),
        threads: 1,
        duration_ms: 150,
        hold_ns: 1_000,
        gap_ns: 1_000,
        hold_sample_rate: DEFAULT_SAMPLE_RATE,
        stretch_threshold_ns: DEFAULT_STRETCH_THRESHOLD_NS,
        no_hold_sampling: false,
        max_work_error: MAX_WORK_ERROR,
        debug_scale_hold: if gap { 1.0 } else { factor },
        debug_scale_gap: if gap { factor } else { 1.0 },
        debug_guest_stall: None,
        split_runqueue_wait: false,
    }
}

#[test]
fn lock_hold_or_gap_scaled_is_refused_both_ways() {
    for gap in [false, true] {
        let what = if gap { "gap_as_asked" } else { "hold_as_asked" };
        for factor in [0.5, 2.0, 1.0] {
            let report = lock::run(&lock_args(factor, gap)).unwrap();
            let r: lock::LockResult = report.detail_as().unwrap();
            // The report says the lengths were scaled.
            assert_eq!(
                (r.debug_scale_hold, r.debug_scale_gap),
                if gap { (1.0, factor) } else { (factor, 1.0) }
            );
            let w = r.work_as_run;
            let (tested, control) = if gap { (w.gap, w.hold) } else { (w.hold, w.gap) };
            assert_refused_unless_asked(what, factor, &check(&report, what), &tested, &control);
        }
    }
}

fn mutex_args(factor: f64, outside: bool) -> mutex::Args {
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
        max_work_error: MAX_WORK_ERROR,
        debug_scale_inside: if outside { 1.0 } else { factor },
        debug_scale_outside: if outside { factor } else { 1.0 },
    }
}

#[test]
fn mutex_work_scaled_is_refused_both_ways() {
    for outside in [false, true] {
        let what = if outside {
            "work_outside_as_asked"
        } else {
            "work_inside_as_asked"
        };
        for factor in [0.5, 2.0, 1.0] {
            let report = mutex::run(&mutex_args(factor, outside)).unwrap();
            let r: mutex::MutexResult = report.detail_as().unwrap();
            assert_eq!(
                (r.debug_scale_inside, r.debug_scale_outside),
                if outside { (1.0, factor) } else { (factor, 1.0) }
            );
            let w = r.work_as_run.unwrap();
            let (tested, control) = if outside {
                (w.outside, w.inside)
            } else {
                (w.inside, w.outside)
            };
            assert_refused_unless_asked(what, factor, &check(&report, what), &tested, &control);
        }
    }
}
