//! Every run checks its own physics, next to its result: the report's `checks` array.
//!
//! A check is a named inequality with the numbers on both sides and plain words. A run whose
//! checks fail still prints its whole report (so the numbers can be read), then one stderr line
//! per failure starting [`FAILURE_PREFIX`], and exits with [`EXIT_CHECK_FAILED`]; the host turns
//! that into a failed attempt, never a sample.
//!
//! CPU time is counted inside the measured window only: each worker reads its own thread CPU
//! clock (`CLOCK_THREAD_CPUTIME_ID`, nanoseconds) just after the start gate and just as it
//! stops, so creating threads and warming the work up (before the gate) or tearing down (after) is
//! never charged to the window.

use serde::{Deserialize, Serialize};

use crate::work_as_run::TimedWork;

/// Margin for clock and accounting granularity on every bound.
pub const TOLERANCE: f64 = 1.02;
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

/// The TSC rate the work was spun at (`used_hz`, measured before the run) against the rate over
/// the run's own window (`window_hz`: TSC ticks against CLOCK_MONOTONIC across the whole run),
/// within [`crate::preempt_sample::MAX_TSC_RATE_CHANGE`] either way. The work's lengths are
/// ticks at the used rate, so this is the one check of them against an independent clock: a
/// rate misread before the run (a vCPU preempted between the two clocks' reads) or a TSC that
/// changed rate made every interval that much off, however well the spins landed on it.
pub fn tsc_rate_held(used_hz: f64, window_hz: f64) -> Check {
    let max = crate::preempt_sample::MAX_TSC_RATE_CHANGE;
    let ratio = used_hz / window_hz;
    let (error, bound) = (ratio.ln().abs(), max.ln_1p());
    // A NaN (no rate) compares false either way: said as `>`, and not accepted.
    let cmp = if error <= bound { "<=" } else { ">" };
    let detail = format!(
        "the work was spun at a TSC rate of {:.4} GHz (measured before the run), x{ratio:.4} the {:.4} GHz the TSC \
         ran at against CLOCK_MONOTONIC over the run's window (accepted within x{:.3}..x{:.3}, i.e. \
         |ln(used/window)| = {error:.4} {cmp} ln(1 + {max}) = {bound:.4}); every interval's length is off by that factor",
        used_hz / 1e9,
        window_hz / 1e9,
        1.0 / (1.0 + max),
        1.0 + max,
    );
    Check::at_most("tsc_rate_held", error, bound, detail)
}

/// The work as it ran within a factor `1 + max_error` of what was asked, either way:
/// `|ln(median / asked)| <= ln(1 + max_error)` (see [`crate::work_as_run`]); or, where one read
/// of the clock in the run costs more than `max_error` of the asked length, within one read of
/// it: `max_error` is then `read / asked`, since an interval that ends on a read can be made
/// no closer. `name` is the check's (`hold_as_asked`), `arg` the argument that asked
/// (`--hold-ns`). Where the run cannot judge, the check passes with no value and says why.
pub fn work_as_asked(name: &str, arg: &str, w: &TimedWork, max_error: f64) -> Check {
    let (Some(ratio), Some(p10), Some(p50), Some(p90)) = (w.ratio, w.p10_ns, w.p50_ns, w.p90_ns) else {
        let why = w.unavailable.as_deref().unwrap_or("no figures");
        return not_judged(name, max_error.ln_1p(), why);
    };
    let read = w.clock_read_ns.unwrap_or(0.0);
    let resolution = read / w.asked_ns as f64;
    let (tolerance, why) = if resolution > max_error {
        (
            resolution,
            format!(
                "one read of the clock: {read:.0} ns at the median in this run, more than {max_error} of the asked length"
            ),
        )
    } else {
        (max_error, format!("--max-work-error {max_error}"))
    };
    let bound = tolerance.ln_1p();
    // A median of 0 (ratio 0) has no logarithm: it is infinitely too short.
    let error = if ratio > 0.0 {
        ratio.ln().abs()
    } else {
        f64::INFINITY
    };
    // The comparison as it came out: `<=` where the check holds, `>` where it fails.
    let cmp = if error <= bound { "<=" } else { ">" };
    let detail = format!(
        "the {} sampled intervals ran {p50:.0} ns as timed (median; 10th-90th percentile {p10:.0}-{p90:.0} ns): x{ratio:.3} \
         the asked {arg} {} (accepted within x{:.3}..x{:.3}, {why}; i.e. |ln(median/asked)| = {error:.4} {cmp} ln(1 + {tolerance:.3}) \
         = {bound:.4})",
        w.samples,
        w.asked_ns,
        1.0 / (1.0 + tolerance),
        1.0 + tolerance,
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

/// Parses a positive fraction (a bound such as `--max-work-error`).
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
        let rate = tsc_rate_held(2.4e9, 2.52e9);
        assert!(!rate.ok);
        assert!(
            rate.detail.contains("x0.9524")
                && rate.detail.contains("2.4000 GHz")
                && rate.detail.contains("2.5200 GHz"),
            "{}",
            rate.detail
        );
        // The bound is in the words: x1/1.02..x1.02 and its log.
        assert!(
            rate.detail.contains("x0.980..x1.020")
                && rate.detail.contains("= 0.0488 > ln(1 + 0.02) = 0.0198")
                && rate.detail.contains("the TSC ran at against CLOCK_MONOTONIC"),
            "{}",
            rate.detail
        );
        assert!(tsc_rate_held(2.4e9, 2.41e9).ok && tsc_rate_held(2.41e9, 2.4e9).ok);
        assert!(!tsc_rate_held(2.4e9, f64::NAN).ok);
        let lines = failure_lines(&[ok, rate]);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].starts_with(
            "ocrig-payload: check failed: tsc_rate_held: the work was spun at a TSC rate of 2.4000 GHz"
        ));
        assert!(!Check::equal("messages", 9, 10, "x".into()).ok);
    }

    #[test]
    fn work_as_asked_is_symmetric_and_says_when_it_cannot_judge() {
        let work = |asked: u64, p50: f64| TimedWork {
            asked_ns: asked,
            samples: 1000,
            p10_ns: Some(p50 - 10.0),
            p50_ns: Some(p50),
            p90_ns: Some(2.0 * p50),
            clock_read_ns: Some(15.0),
            ratio: Some(p50 / asked as f64),
            unavailable: None,
        };
        let ok = work_as_asked("hold_as_asked", "--hold-ns", &work(200, 210.0), 0.10);
        assert!(ok.ok && ok.bound == Some(0.1f64.ln_1p()), "{ok:?}");
        assert!(
            ok.detail
                .contains("the 1000 sampled intervals ran 210 ns as timed")
                && ok.detail.contains("10th-90th percentile 200-420 ns")
                && ok.detail.contains("x1.050 the asked --hold-ns 200")
                && ok.detail.contains("x0.909..x1.100, --max-work-error 0.1;"),
            "{}",
            ok.detail
        );
        // Half and twice the asked hold both fail, by the same amount.
        let short = work_as_asked("hold_as_asked", "--hold-ns", &work(200, 100.0), 0.10);
        let long = work_as_asked("hold_as_asked", "--hold-ns", &work(200, 400.0), 0.10);
        assert!(!short.ok && !long.ok);
        assert!((short.value.unwrap() - long.value.unwrap()).abs() < 1e-12);
        // The comparison is said as it came out.
        assert!(
            ok.detail.contains("= 0.0488 <= ln(1 + 0.100) = 0.0953"),
            "{}",
            ok.detail
        );
        assert!(
            long.detail.contains("= 0.6931 > ln(1 + 0.100) = 0.0953"),
            "{}",
            long.detail
        );
        // The edges: x1.1 and x1/1.1 pass, beyond fails.
        assert!(work_as_asked("h", "--hold-ns", &work(1000, 1099.0), 0.10).ok);
        assert!(work_as_asked("h", "--hold-ns", &work(1000, 910.0), 0.10).ok);
        assert!(!work_as_asked("h", "--hold-ns", &work(1000, 1101.0), 0.10).ok);
        assert!(!work_as_asked("h", "--hold-ns", &work(1000, 908.0), 0.10).ok);
        // A read of the clock dearer than the tolerance (150 ns against 10 % of 200): judged
        // within one read of the asked length, and said so.
        let mut coarse = work(200, 320.0);
        coarse.clock_read_ns = Some(150.0);
        let c = work_as_asked("hold_as_asked", "--hold-ns", &coarse, 0.10);
        assert!(c.ok && c.bound == Some(0.75f64.ln_1p()), "{c:?}");
        assert!(
            c.detail
                .contains("x0.571..x1.750, one read of the clock: 150 ns at the median in this run"),
            "{}",
            c.detail
        );
        coarse.p50_ns = Some(360.0);
        coarse.ratio = Some(1.8);
        assert!(!work_as_asked("hold_as_asked", "--hold-ns", &coarse, 0.10).ok);
        // A median of nothing is infinitely short.
        let none = work_as_asked("h", "--hold-ns", &work(200, 0.0), 0.10);
        assert!(!none.ok && none.value == Some(f64::INFINITY), "{none:?}");
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
