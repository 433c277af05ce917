//! Every run checks its own physics, next to its result: the report's `checks` array.
//!
//! A check is a named inequality with the numbers on both sides and plain words. A run whose
//! checks fail still prints its whole report (so the numbers can be read), then one stderr line
//! per failure starting [`FAILURE_PREFIX`], and exits with [`EXIT_CHECK_FAILED`]; the host turns
//! that into a failed attempt, never a sample.
//!
//! CPU time is counted inside the measured window only: each worker reads its own thread CPU
//! clock (`CLOCK_THREAD_CPUTIME_ID`, nanoseconds) just after the start gate and just as it
//! stops, so creating threads and calibrating (before the gate) or tearing down (after) is
//! never charged to the window.

use serde::{Deserialize, Serialize};

use crate::work_as_run::TimedWork;

/// Margin for clock and accounting granularity on every bound.
pub const TOLERANCE: f64 = 1.02;
/// Largest accepted change of the calibration between before and after the run: a factor
/// `1 + this` either way (see [`calibration_drift`]). The same tolerance as the work's own
/// ([`crate::work_as_run::MAX_WORK_ERROR`]): the run is judged by its work as it ran, and the
/// drift is the backstop where an interval is too short to time closely (and only there:
/// [`drift_unless_work_judged`]); a calibration off by
/// less than the work may be is not a reason to refuse a run. (At 5 %, in 1-vCPU TCG guests side
/// by side on this VM's two CPUs, 300 ms runs of 200 ns holds, 26 of 98 runs were refused for
/// drifts of 5-10 % that the work check would have allowed, 2026-12-04.)
pub const MAX_CALIBRATION_DRIFT: f64 = 0.10;
/// Exit status of a run that completed but broke a check.
pub const EXIT_CHECK_FAILED: u8 = 3;
/// Start of the stderr line printed for each failed check.
pub const FAILURE_PREFIX: &str = "ocrig-payload: check failed: ";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Check {
    /// Stable identifier, e.g. `cpu_within_elapsed`.
    pub name: String,
    pub ok: bool,
    /// The measured side (None when it could not be measured; then `ok` is true and `detail`
    /// says why).
    pub value: Option<f64>,
    /// The limit `value` is held to.
    pub bound: Option<f64>,
    /// Plain words with the numbers.
    pub detail: String,
}

impl Check {
    /// `value <= bound`.
    pub fn at_most(name: &str, value: f64, bound: f64, detail: String) -> Self {
        Self {
            name: name.into(),
            ok: value <= bound,
            value: Some(value),
            bound: Some(bound),
            detail,
        }
    }

    /// An exact equality of two counts (value = what was found, bound = what was expected).
    pub fn equal(name: &str, found: u64, expected: u64, detail: String) -> Self {
        Self {
            name: name.into(),
            ok: found == expected,
            value: Some(found as f64),
            bound: Some(expected as f64),
            detail,
        }
    }
}

/// At least one unit of work (`what`) done in the window: a run that did none measured
/// nothing, and every other check passes on it vacuously (8 1-vCPU guests on 2 CPUs, 800 ms
/// lock runs: one guest's vCPU ran 0.27 s of 1.97 s and made 0 operations, 2026-12-04).
pub fn work_done(done: u64, what: &str, elapsed_ns: u64) -> Check {
    Check {
        name: "work_done".into(),
        ok: done >= 1,
        value: Some(done as f64),
        bound: Some(1.0),
        detail: format!(
            "{done} {what} completed in the {:.3} s window (at least 1: a run that did none measured nothing)",
            elapsed_ns as f64 / 1e9
        ),
    }
}

/// Elapsed ≥ CPU time / CPUs: the workers' CPU time inside the window, spread over every CPU
/// they may use, cannot exceed the window.
pub fn cpu_within_elapsed(window_cpu_ns: u64, elapsed_ns: u64, cpus_allowed: usize) -> Check {
    let busy = window_cpu_ns as f64 / elapsed_ns.max(1) as f64;
    let bound = cpus_allowed as f64 * TOLERANCE;
    let detail = format!(
        "{:.4} CPU-s inside a {:.4} s window is {busy:.3} CPUs busy on average, {} {} CPUs allowed (x{TOLERANCE})",
        window_cpu_ns as f64 / 1e9,
        elapsed_ns as f64 / 1e9,
        if busy <= bound { "within" } else { "more than the" },
        cpus_allowed
    );
    Check::at_most("cpu_within_elapsed", busy, bound, detail)
}

/// Calibration before and after the run within a factor `1 + max_drift` of each other, in either
/// direction: `|ln(after / before)| <= ln(1 + max_drift)`, so the default 0.10 accepts
/// after/before within [1/1.1, 1.1]. (The old `|after − before| / before` was lopsided: a
/// before-calibration k× too slow read as a drift of 1 − 1/k < 1, so a bound of 1 or more
/// accepted any hold that came out too short.)
pub fn calibration_drift(before_ns_per_iter: f64, after_ns_per_iter: f64, max_drift: f64) -> Check {
    let ratio = after_ns_per_iter / before_ns_per_iter;
    let (drift, bound) = (ratio.ln().abs(), max_drift.ln_1p());
    let detail = format!(
        "calibration drifted x{ratio:.3} during the run ({before_ns_per_iter:.3} -> {after_ns_per_iter:.3} ns/iter; \
         accepted within x{:.3}..x{:.3}, i.e. |ln(after/before)| = {drift:.4} <= ln(1 + {max_drift}) = {bound:.4})",
        1.0 / (1.0 + max_drift),
        1.0 + max_drift,
    );
    // A NaN (no calibration after the run) compares false: not accepted.
    Check::at_most("calibration_drift", drift, bound, detail)
}

/// The drift a run is judged by where no work check could time its intervals: between the
/// speed its work was sized at (`sized`: its own calibration before the gate, or the
/// remembered speed, [`crate::loop_memory`]) and the fastest the loop ran in the calibrations
/// around the run (`fresh_before`, this run's own before the gate, and `after`), through
/// [`calibration_drift`]. It refuses a loop that ran faster than it was sized for (the holds
/// were short: the sizing sat in one of the host's slow spells), which no slow spell can fake.
/// A loop slower around the run than its sizing is not refused: each calibration reads the
/// undisturbed speed only when it does not sit wholly in a slow spell, so slower calibrations
/// say the host was slow then, as a judged run's slow holds do (the judged check reads the
/// 10th percentile of the holds, which a slow spell over part of the run does not move), not
/// that the work was not what was asked. A remembered speed the machine no longer has is
/// caught where it can be, by the judged runs' holds (three too long in a row forget it).
/// (Symmetric, it refused 33 attempts of spinlock-variants' 200 ns holds with both
/// calibrations in slow spells, on a host slow 44 % of the time, and left a slot empty.)
pub fn sizing_drift(sized: f64, fresh_before: f64, after: f64, max_drift: f64) -> Check {
    let fastest = if fresh_before.is_finite() && after.is_finite() {
        fresh_before.min(after)
    } else {
        f64::NAN // a missing calibration is not accepted
    };
    // (f64::min would drop the NaN: kept explicitly, so a missing calibration fails.)
    let observed = if fastest.is_nan() {
        fastest
    } else {
        fastest.min(sized)
    };
    let mut c = calibration_drift(sized, observed, max_drift);
    c.detail = format!(
        "{} [sized at {sized:.3} ns/iter; the loop's fastest around the run {fastest:.3}: this run's calibration before {fresh_before:.3}, after {after:.3}; only a faster loop is refused]",
        c.detail
    );
    c
}

/// The calibration drift as the backstop it is: judged only where no work check could judge
/// the run's own intervals. Where one did (`work`: the run's work checks), the intervals were
/// timed as they ran and held to the asked length, which is what a drift between the two
/// calibrations stands in for; a calibration after the run that lands in one of the host's
/// slow spells (this VM's loop speed flips between states ~x1.8 apart, 40 ms to 2 s long)
/// then says nothing about the run, and refusing it would refuse a run whose work was right.
/// A calibration before the run made in a slow spell still fails the run: every hold is short,
/// and the work check says so. The drift's figures stay in the detail.
pub fn drift_unless_work_judged(drift: Check, work: &[&Check]) -> Check {
    let judged: Vec<&str> = work
        .iter()
        .filter(|c| c.value.is_some())
        .map(|c| c.name.as_str())
        .collect();
    if judged.is_empty() {
        return drift;
    }
    let why = format!(
        "the run's own intervals were timed and judged ({}); {}",
        judged.join(", "),
        drift.detail
    );
    not_judged(&drift.name, drift.bound.unwrap_or(f64::NAN), &why)
}

/// The work as it ran within a factor `1 + max_error` of what was asked, either way:
/// `|ln(net / asked)| <= ln(1 + max_error)` (see [`crate::work_as_run`]). `name` is the check's
/// (`hold_as_asked`), `arg` the argument that asked (`--hold-ns`). Where the run cannot judge,
/// the check passes with no value and says why.
pub fn work_as_asked(name: &str, arg: &str, w: &TimedWork, max_error: f64) -> Check {
    let bound = max_error.ln_1p();
    let (Some(ratio), Some(timed), Some(cost), Some(net)) =
        (w.ratio, w.timed_p10_ns, w.timing_cost_p10_ns, w.net_p10_ns)
    else {
        let why = w.unavailable.as_deref().unwrap_or("no figures");
        return not_judged(name, bound, why);
    };
    // The net cannot be read closer than about the timing's own cost: the TSC's steps (10 ns
    // under TCG here), the spread of the cost itself, and what a call of a real loop costs that
    // the empty call does not show (under TCG about 20 ns: 123 iterations of a 200 ns gap read
    // 220 ns net where 1227 of a 2000 ns hold read 2013, the same 1.63 ns an iteration as the
    // calibration, 2026-12-04). Judging to within the tolerance needs that resolution within
    // half of it, so a shorter interval is measured and shown, but not judged.
    let resolution = w.timing_cost_ns.unwrap_or(cost).max(cost);
    let finest = max_error / 2.0 * w.asked_ns as f64;
    if resolution > finest {
        let why = format!(
            "the timing's own cost ({resolution:.0} ns at the median) is more than half the tolerance \
             ({finest:.0} ns of the asked {arg} {}), so the net ({net:.0} ns, x{ratio:.3}) cannot be read closely \
             enough; the calibration drift still applies",
            w.asked_ns
        );
        return not_judged(name, bound, &why);
    }
    // A net of 0 or less (ratio <= 0) has no logarithm: it is infinitely too short.
    let error = if ratio > 0.0 {
        ratio.ln().abs()
    } else {
        f64::INFINITY
    };
    let typical = match w.net_p50_ns {
        Some(p50) => format!(
            "; the median net {p50:.0} ns, x{:.3}, host spells and all",
            p50 / w.asked_ns as f64
        ),
        None => String::new(),
    };
    let detail = format!(
        "the {} sampled intervals ran {timed:.0} ns undisturbed (their 10th percentile) as timed, less {cost:.0} ns of the \
         timing's own cost = {net:.0} ns: x{ratio:.3} the asked {arg} {} (accepted within x{:.3}..x{:.3}, i.e. \
         |ln(net/asked)| = {error:.4} <= ln(1 + {max_error}) = {bound:.4}){typical}",
        w.samples,
        w.asked_ns,
        1.0 / (1.0 + max_error),
        1.0 + max_error,
    );
    Check::at_most(name, error, bound, detail)
}

/// A work check that cannot judge: it passes with no value and says why.
fn not_judged(name: &str, bound: f64, why: &str) -> Check {
    Check {
        name: name.into(),
        ok: true,
        value: None,
        bound: Some(bound),
        detail: format!("not judged: {why}"),
    }
}

/// Parses a positive fraction (a drift bound such as `--max-calibration-drift`).
pub fn positive_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f > 0.0 && f.is_finite() => Ok(f),
        _ => Err(format!("{s:?} is not a positive fraction (e.g. 0.05 for 5 %)")),
    }
}

/// Whose CPU time [`rusage_cpu_ns`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RusageOf {
    /// This process, every thread (live and ended) included.
    Process,
    /// This process's children that have been waited for.
    ReapedChildren,
}

impl RusageOf {
    /// The kernel's account for the tasks of a run whose tasks are threads (`Process`) or
    /// forked processes (`ReapedChildren`).
    pub fn for_tasks(threads: bool) -> Self {
        if threads {
            Self::Process
        } else {
            Self::ReapedChildren
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Self::Process => "getrusage(RUSAGE_SELF): the whole process, start-up included",
            Self::ReapedChildren => {
                "getrusage(RUSAGE_CHILDREN): every reaped task process, start-up included"
            }
        }
    }
}

/// User + system CPU time the kernel charged to `who`, in nanoseconds (microsecond resolution).
pub fn rusage_cpu_ns(who: RusageOf) -> u64 {
    let who = match who {
        RusageOf::Process => libc::RUSAGE_SELF,
        RusageOf::ReapedChildren => libc::RUSAGE_CHILDREN,
    };
    // SAFETY: getrusage writes one rusage; both `who` values always exist.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut ru);
        ru
    };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    ns(ru.ru_utime) + ns(ru.ru_stime)
}

/// Slack of [`window_cpu_within_rusage`] on top of [`TOLERANCE`]: getrusage's microsecond
/// resolution summed over many tasks.
const RUSAGE_SLACK_NS: f64 = 1e6;

/// The CPU the tasks' own clocks counted inside the window cannot exceed what the kernel
/// charged them in all (an independent account of the same CPU: getrusage, which also counts
/// everything outside the window).
pub fn window_cpu_within_rusage(window_cpu_ns: u64, rusage_cpu_ns: u64, source: RusageOf) -> Check {
    let bound = rusage_cpu_ns as f64 * TOLERANCE + RUSAGE_SLACK_NS;
    let detail = format!(
        "{:.4} CPU-s counted inside the window by the tasks' own CPU clocks, {} the {:.4} CPU-s the kernel charged \
         them in all ({}; x{TOLERANCE} + 1 ms)",
        window_cpu_ns as f64 / 1e9,
        if window_cpu_ns as f64 <= bound {
            "within"
        } else {
            "more than"
        },
        rusage_cpu_ns as f64 / 1e9,
        source.describe()
    );
    Check::at_most("window_cpu_within_rusage", window_cpu_ns as f64, bound, detail)
}

/// The stderr lines for the failed checks (empty when all passed).
pub fn failure_lines(checks: &[Check]) -> Vec<String> {
    checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| format!("{FAILURE_PREFIX}{}: {}", c.name, c.detail))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_that_did_no_work_is_refused() {
        let none = work_done(0, "lock operations", 800_000_000);
        assert!(
            !none.ok
                && none
                    .detail
                    .starts_with("0 lock operations completed in the 0.800 s window"),
            "{none:?}"
        );
        assert!(work_done(1, "lock operations", 800_000_000).ok);
    }

    #[test]
    fn bounds_hold_and_break_with_the_numbers_in_words() {
        let ok = cpu_within_elapsed(1_900_000_000, 1_000_000_000, 2);
        assert!(ok.ok && ok.value == Some(1.9) && ok.bound == Some(2.04));
        let bad = cpu_within_elapsed(20_600_000, 9_000_000, 2);
        assert!(!bad.ok, "{bad:?}");
        assert!(
            bad.detail.contains("0.0206 CPU-s") && bad.detail.contains("2.289"),
            "{}",
            bad.detail
        );
        let drift = calibration_drift(12.1, 15.9, MAX_CALIBRATION_DRIFT);
        assert!(!drift.ok);
        assert!(
            drift.detail.contains("x1.314") && drift.detail.contains("12.100 -> 15.900"),
            "{}",
            drift.detail
        );
        // The bound is in the words: x1/1.1..x1.1 and its log.
        assert!(
            drift.detail.contains("x0.909..x1.100") && drift.detail.contains("ln(1 + 0.1) = 0.0953"),
            "{}",
            drift.detail
        );
        assert!(calibration_drift(10.0, 10.4, MAX_CALIBRATION_DRIFT).ok);
        let lines = failure_lines(&[ok, drift]);
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0]
                .starts_with("ocrig-payload: check failed: calibration_drift: calibration drifted x1.314")
        );
        assert!(!Check::equal("messages", 9, 10, "x".into()).ok);
    }

    #[test]
    fn calibration_drift_is_symmetric_and_a_wide_bound_still_refuses_too_short() {
        // k x too slow and k x too fast are the same drift.
        for (before, after) in [(10.0, 12.0), (12.0, 10.0)] {
            let c = calibration_drift(before, after, 0.19);
            assert!(!c.ok, "{c:?}");
            assert!((c.value.unwrap() - 1.2f64.ln()).abs() < 1e-12, "{c:?}");
            assert!(calibration_drift(before, after, 0.21).ok);
        }
        // The edges of the default: x1.1 and x1/1.1 pass, a hair beyond fails, both ways.
        assert!(calibration_drift(1.0, 1.0999, MAX_CALIBRATION_DRIFT).ok);
        assert!(calibration_drift(1.0999, 1.0, MAX_CALIBRATION_DRIFT).ok);
        assert!(!calibration_drift(1.0, 1.101, MAX_CALIBRATION_DRIFT).ok);
        assert!(!calibration_drift(1.101, 1.0, MAX_CALIBRATION_DRIFT).ok);
        // A bound of 1 (the old statistic's "anything goes" for a too-slow first calibration,
        // whose drift 1 - 1/k never reaches 1) accepts x2 either way, and refuses x3 either way.
        assert!(calibration_drift(2.9, 1.5, 1.0).ok && calibration_drift(1.5, 2.9, 1.0).ok);
        assert!(!calibration_drift(3.0, 1.0, 1.0).ok && !calibration_drift(1.0, 3.0, 1.0).ok);
        // No calibration after the run (NaN) is not accepted.
        assert!(!calibration_drift(1.0, f64::NAN, 0.6).ok);
    }

    #[test]
    fn the_sizing_drift_reads_the_fastest_calibration_around_the_run() {
        // Sized right, the after-calibration in a slow spell: accepted.
        let c = sizing_drift(1.642, 1.642, 2.416, MAX_CALIBRATION_DRIFT);
        assert!(c.ok, "{c:?}");
        assert!(c.detail.contains("fastest around the run 1.642"), "{}", c.detail);
        // Sized in a slow spell (holds short), the loop fast afterwards: refused.
        assert!(!sizing_drift(2.5, 2.5, 1.65, MAX_CALIBRATION_DRIFT).ok);
        // Sized from a remembered fast speed, both fresh calibrations slow (slow spells):
        // accepted, as a judged run's holds would be.
        assert!(sizing_drift(1.65, 2.6, 2.4, MAX_CALIBRATION_DRIFT).ok);
        // Sized slower than the loop ran after, by just over the bound: refused.
        assert!(!sizing_drift(1.65, 1.65, 1.49, MAX_CALIBRATION_DRIFT).ok);
        assert!(sizing_drift(1.65, 1.65, 1.51, MAX_CALIBRATION_DRIFT).ok);
        // Sized from memory, this run's own before slow, after fast: accepted.
        assert!(sizing_drift(1.65, 2.6, 1.70, MAX_CALIBRATION_DRIFT).ok);
        // No calibration after: not accepted.
        assert!(!sizing_drift(1.65, 1.65, f64::NAN, MAX_CALIBRATION_DRIFT).ok);
    }

    #[test]
    fn the_drift_judges_only_where_no_work_check_could() {
        let drift = || calibration_drift(2.35, 1.667, MAX_CALIBRATION_DRIFT);
        assert!(!drift().ok);
        let judged_ok = Check::at_most("hold_as_asked", 0.01, 0.0953, "x1.010".into());
        let judged_bad = Check::at_most("hold_as_asked", 0.35, 0.0953, "x0.701".into());
        let unjudged = not_judged("gap_as_asked", 0.0953, "too short to time");
        // No work check judged: the drift decides.
        let d = drift_unless_work_judged(drift(), &[&unjudged]);
        assert!(!d.ok, "{d:?}");
        // One judged (either way): the drift is shown, not judged, with its figures; a hold
        // the calibration made too short still fails, by the hold's own check.
        for work in [&judged_ok, &judged_bad] {
            let d = drift_unless_work_judged(drift(), &[work, &unjudged]);
            assert!(d.ok && d.value.is_none(), "{d:?}");
            assert!(
                d.detail
                    .starts_with("not judged: the run's own intervals were timed and judged (hold_as_asked)")
                    && d.detail.contains("2.350 -> 1.667"),
                "{}",
                d.detail
            );
        }
        assert!(!judged_bad.ok);
    }

    #[test]
    fn work_as_asked_is_symmetric_and_says_when_it_cannot_judge() {
        let work = |asked: u64, net: f64| TimedWork {
            asked_ns: asked,
            samples: 1000,
            timing_cost_samples: 1000,
            timed_p50_ns: Some(2.0 * net + 10.0),
            timing_cost_ns: Some(10.0),
            net_p50_ns: Some(2.0 * net),
            timed_p10_ns: Some(net + 10.0),
            timing_cost_p10_ns: Some(10.0),
            net_p10_ns: Some(net),
            ratio: Some(net / asked as f64),
            unavailable: None,
        };
        let ok = work_as_asked("hold_as_asked", "--hold-ns", &work(200, 210.0), 0.10);
        assert!(ok.ok && ok.bound == Some(0.1f64.ln_1p()), "{ok:?}");
        assert!(
            ok.detail.contains("ran 220 ns undisturbed")
                && ok.detail.contains("the median net 420 ns, x2.100")
                && ok.detail.contains("less 10 ns")
                && ok.detail.contains("= 210 ns: x1.050 the asked --hold-ns 200")
                && ok.detail.contains("x0.909..x1.100"),
            "{}",
            ok.detail
        );
        // Half and twice the asked hold both fail, by the same amount.
        let short = work_as_asked("hold_as_asked", "--hold-ns", &work(200, 100.0), 0.10);
        let long = work_as_asked("hold_as_asked", "--hold-ns", &work(200, 400.0), 0.10);
        assert!(!short.ok && !long.ok);
        assert!((short.value.unwrap() - long.value.unwrap()).abs() < 1e-12);
        // The edges: x1.1 and x1/1.1 pass, beyond fails.
        assert!(work_as_asked("h", "--hold-ns", &work(1000, 1099.0), 0.10).ok);
        assert!(work_as_asked("h", "--hold-ns", &work(1000, 910.0), 0.10).ok);
        assert!(!work_as_asked("h", "--hold-ns", &work(1000, 1101.0), 0.10).ok);
        assert!(!work_as_asked("h", "--hold-ns", &work(1000, 908.0), 0.10).ok);
        // A net of nothing (the timing cost ate the whole interval) is infinitely short.
        let none = work_as_asked("h", "--hold-ns", &work(200, -5.0), 0.10);
        assert!(!none.ok && none.value == Some(f64::INFINITY), "{none:?}");
        // Too short for the timing to resolve the tolerance: a cost of 30 ns at the median
        // against half of 10 % of 200 ns is shown, not judged (x1.15 would otherwise fail).
        let mut w = work(200, 230.0);
        w.timing_cost_ns = Some(30.0);
        let c = work_as_asked("gap_as_asked", "--gap-ns", &w, 0.10);
        assert!(c.ok && c.value.is_none(), "{c:?}");
        assert!(
            c.detail.contains("(30 ns at the median)")
                && c.detail.contains("(10 ns of the asked --gap-ns 200)")
                && c.detail.contains("x1.150"),
            "{}",
            c.detail
        );
        // The same cost against 2000 ns is judged.
        let mut w = work(2000, 2300.0);
        w.timing_cost_ns = Some(30.0);
        assert!(!work_as_asked("hold_as_asked", "--hold-ns", &w, 0.10).ok);
        // Not judged: passes, no value, the reason in words.
        let mut w = work(200, 200.0);
        (w.ratio, w.unavailable) = (None, Some("too few samples to judge by".into()));
        let c = work_as_asked("gap_as_asked", "--gap-ns", &w, 0.10);
        assert!(
            c.ok && c.value.is_none() && c.detail == "not judged: too few samples to judge by",
            "{c:?}"
        );
        assert!(failure_lines(&[c]).is_empty());
    }

    #[test]
    fn the_kernels_account_bounds_the_window_and_says_whose_it_is() {
        let before = rusage_cpu_ns(RusageOf::Process);
        let t0 = crate::clock::thread_cpu_ns();
        crate::busywork::spin_iters(20_000_000);
        let window = crate::clock::thread_cpu_ns() - t0;
        let charged = rusage_cpu_ns(RusageOf::Process) - before;
        let c = window_cpu_within_rusage(window, charged, RusageOf::Process);
        assert!(c.ok, "{c:?}");
        let bad = window_cpu_within_rusage(50_000_000, 20_000_000, RusageOf::ReapedChildren);
        assert!(
            !bad.ok && bad.bound == Some(20_000_000.0 * TOLERANCE + 1e6),
            "{bad:?}"
        );
        assert!(
            bad.detail.contains("0.0500 CPU-s")
                && bad.detail.contains("more than the 0.0200")
                && bad.detail.contains("RUSAGE_CHILDREN"),
            "{}",
            bad.detail
        );
        assert_eq!(RusageOf::for_tasks(true), RusageOf::Process);
    }
}
