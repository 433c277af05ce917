//! How numbers read in every report: levels, fixed decimals, percentages, p values, ratios
//! with their intervals, counts and shares (a figure not measured reads `-`).

use super::*;

/// `0.5x`, `1x`, `2.5x`.
pub fn fmt_level(level: f64) -> String {
    format!("{level}x")
}

/// Decimals giving about six significant digits at the magnitude of `x` (0 to 6):
/// `18.9326`, `20499.4`, `1234568`.
pub fn decimals_for(x: f64) -> usize {
    let a = x.abs();
    if !a.is_finite() || a == 0.0 {
        return 4;
    }
    (6 - (a.log10().floor() as i32 + 1)).clamp(0, 6) as usize
}

/// `x` with `decimals` decimals; `-` if not finite.
pub fn fmt_fixed(x: f64, decimals: usize) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    format!("{x:.decimals$}")
}

/// Decimals for a whole column group: those of its largest magnitude, so decimal points line up.
pub(crate) fn table_decimals(values: impl Iterator<Item = f64>) -> usize {
    decimals_for(values.filter(|v| v.is_finite()).fold(0.0, |m, v| m.max(v.abs())))
}

pub(crate) fn fmt_opt(x: Option<f64>, decimals: usize) -> String {
    x.map_or_else(|| "-".into(), |x| fmt_fixed(x, decimals))
}

/// `+8.58%`, `-6.00%`.
pub fn fmt_pct(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{x:+.2}%"))
}

/// `0.0123`, `<0.0001`, with ` *` appended when significant.
pub fn fmt_p(p: Option<f64>, significant: Option<bool>) -> String {
    let Some(p) = p else { return "-".into() };
    let mut s = if p < 1e-4 {
        "<0.0001".to_string()
    } else {
        format!("{p:.4}")
    };
    if significant == Some(true) {
        s.push_str(" *");
    }
    s
}

/// A fraction (contention rate, Jain's index) to four decimals.
pub fn fmt_frac(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{x:.4}"))
}

/// A ratio to three decimals between 0.001 and 1000, in scientific notation outside (`7.1e-5`,
/// `6.3e14`): an interval from two runs a side at a family's level can span fifteen orders of
/// magnitude, and neither `0.000` (a ratio is never 0) nor a 30-digit column helps its reader.
pub fn fmt_ratio_value(x: f64) -> String {
    if !x.is_finite() {
        return if x > 0.0 { "inf".into() } else { "-".into() };
    }
    if x == 0.0 || (1e-3..1e3).contains(&x.abs()) {
        format!("{x:.3}")
    } else {
        format!("{x:.1e}")
    }
}

/// `0.952 [0.930, 0.974]`: a ratio and an interval.
pub fn fmt_ratio_interval(ratio: f64, low: f64, high: f64) -> String {
    format!(
        "{} [{}, {}]",
        fmt_ratio_value(ratio),
        fmt_ratio_value(low),
        fmt_ratio_value(high)
    )
}

/// `0.952 [0.930, 0.974]`: a ratio and its interval; `-` when none was estimated.
pub fn fmt_ratio(e: Option<&Effect>) -> String {
    e.map_or_else(|| "-".into(), |e| fmt_ratio_interval(e.ratio, e.low, e.high))
}

/// `0.900 [0.846, 0.958]`: a comparison row's ratio with the interval its conclusion was
/// judged by ([`crate::stats::cells::Row::interval`]); `-` without a ratio.
pub fn fmt_row_ratio(r: &crate::stats::cells::Row) -> String {
    match (&r.effect, &r.interval) {
        (Some(e), Some(i)) => fmt_ratio_interval(e.ratio, i.low, i.high),
        (e, _) => fmt_ratio(e.as_ref()),
    }
}

/// A confidence as a percentage with two significant digits of what it leaves out: `95 %`,
/// `97.5 %`, `98.3 %`, `99.965 %` (so the levels of a large family's rows stay apart).
pub fn fmt_confidence(c: f64) -> String {
    let out = (1.0 - c) * 100.0;
    if !(out > 0.0 && out.is_finite()) {
        return format!("{:.0} %", c * 100.0);
    }
    let decimals = (1 - out.log10().floor() as i32).max(0) as usize;
    let s = format!("{:.decimals$}", 100.0 - out);
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        &s
    };
    format!("{s} %")
}

/// The confidences of a set of intervals: `97.5 %`, or their range `97.5–98.8 %`.
pub fn fmt_confidence_range(cs: impl Iterator<Item = f64>) -> Option<String> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for c in cs {
        (lo, hi) = (lo.min(c), hi.max(c));
    }
    if !lo.is_finite() {
        return None;
    }
    let (a, b) = (fmt_confidence(lo), fmt_confidence(hi));
    Some(if a == b {
        a
    } else {
        format!("{}–{b}", a.trim_end_matches(" %"))
    })
}

/// A margin fraction as a percentage without trailing zeros: `5`, `2.5`.
pub(crate) fn fmt_margin(m: f64) -> String {
    let s = format!("{:.2}", m * 100.0);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Per-run mean of a count, compact: `873`, `12.3k`, `4.56M`.
pub fn fmt_count(x: Option<f64>) -> String {
    let Some(x) = x.filter(|x| x.is_finite()) else {
        return "-".into();
    };
    match x.abs() {
        a if a >= 1e9 => format!("{:.2}G", x / 1e9),
        a if a >= 1e6 => format!("{:.2}M", x / 1e6),
        a if a >= 1e4 => format!("{:.1}k", x / 1e3),
        _ => format!("{x:.0}"),
    }
}

/// A share (0..1) as a percentage with one decimal: `48.2%`.
pub fn fmt_share(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{:.1}%", x * 100.0))
}

/// The listed stretched intervals judged by the host's record, per run: `vcpu 9.5 · both 0.5 ·
/// guest 0 · other vCPU 2 · unexpl. 1 of 13/run ≥ 1.0 ms (tie ±0.25 ms)`.
pub fn observed_text(o: &crate::stats::preemption::Observed) -> String {
    let runs = o.runs.max(1) as f64;
    let n = |x: u64| {
        let v = x as f64 / runs;
        if (v - v.round()).abs() < 0.05 {
            format!("{v:.0}")
        } else {
            format!("{v:.1}")
        }
    };
    let ms = o.error_ns as f64 / 1e6;
    format!(
        "vcpu {} · both {} · guest {} · other vCPU {} · unexpl. {} of {}/run ≥ {:.1} ms (tie ±{ms:.2} ms)",
        n(o.vcpu.count),
        n(o.both.count),
        n(o.guest.count),
        n(o.other_vcpu.count),
        n(o.unexplained.count),
        n(o.judged()),
        crate::stats::preemption::ATTRIBUTABLE_ERRORS * ms,
    )
}

/// A stretched share with what it is a share of: `0.07% of 388.2k/run, 129.4k/s`; where a run
/// timed fewer than [`crate::stats::preemption::SHARE_MIN_TIMED`], the count instead:
/// `2 of 5/run, 1.7/s`.
pub fn stretched_of(share: f64, n: &crate::stats::preemption::Denominator) -> String {
    let small = |x: f64| {
        if x >= 100.0 {
            fmt_count(Some(x))
        } else if (x - x.round()).abs() < 0.05 {
            format!("{x:.0}")
        } else {
            format!("{x:.1}")
        }
    };
    let per_s = n
        .timed_per_s
        .map_or_else(String::new, |r| format!(", {}/s", small(r)));
    if n.too_few() {
        format!(
            "{} of {}/run{per_s}",
            small(n.stretched_per_run),
            small(n.timed_per_run)
        )
    } else {
        format!(
            "{:.2}% of {}/run{per_s}",
            share * 100.0,
            fmt_count(Some(n.timed_per_run))
        )
    }
}
