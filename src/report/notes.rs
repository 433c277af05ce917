//! The sentences beside the tables: what a metric is, what each comparison concludes and why,
//! retention, self-check rejections, disturbed runs, the host, each cell's telemetry.

use super::*;
use crate::vocabulary::HeadlineFrom;

/// `seconds, lower is better`.
pub fn describe_metric(wl: &WorkloadModel) -> String {
    use crate::journal::Better;
    let dir = match wl.better {
        Better::Higher => "higher is better",
        Better::Lower => "lower is better",
    };
    format!("{}, {dir}", wl.metric)
}

/// How a workload's comparisons were concluded, and each row's caveat (a lost pairing, why
/// a row was not tested or not concluded, what its sides lost to the self-checks).
pub fn conclusion_notes(model: &Model, wl: &WorkloadModel) -> Vec<String> {
    if wl.comparisons.is_empty() {
        return Vec::new();
    }
    let (lo, hi) = crate::stats::effect::margin_bounds(model.margin);
    let mut notes = vec![format!(
        "ratio = variant / {} over the design's units (rounds of variants sharing guests, bring-up pairs of variants \
         with their own): geometric mean, %improvement its, signed so + is better; its interval is the one its conclusion \
         was judged by, at the level of the row's Holm step over the report's {} tested comparisons{} (the title says \
         it): it excludes 1 exactly where the row differs (unadjusted 95% intervals: report.json, CSV); differs: p (Holm) \
         < {} (*); equivalent: both one-sided tests against ±{}% ({:.3}..{:.3}, symmetric in log space) below {} after \
         Holm, i.e. the row's (1 - 2α) interval within it; differs, within ±{}%: both; otherwise not concluded",
        model.baseline,
        model.family,
        if model.looks > 1 {
            format!(
                ", each p first × {} for the looks of `runs: {{until: concluded}}`",
                model.looks
            )
        } else {
            String::new()
        },
        model.alpha,
        fmt_margin(model.margin),
        lo.exp(),
        hi.exp(),
        model.alpha,
        fmt_margin(model.margin),
    )];
    for cmp in &wl.comparisons {
        let units: Vec<(String, String)> = cmp
            .rows
            .iter()
            .filter_map(|r| Some((fmt_level(r.level), r.effect.as_ref()?.units_words())))
            .collect();
        match units.first() {
            Some((_, u)) if units.iter().all(|(_, x)| x == u) => {
                notes.push(format!("{}: ratios over {u} at every level", cmp.variant));
            }
            Some(_) => {
                let each: Vec<String> = units.iter().map(|(l, u)| format!("{u} at {l}")).collect();
                notes.push(format!("{}: ratios over {}", cmp.variant, each.join(", ")));
            }
            None => {}
        }
        for r in &cmp.rows {
            let caveat = r
                .effect
                .as_ref()
                .and_then(|e| e.note.clone())
                .or_else(|| r.why.clone());
            if let Some(c) = caveat {
                notes.push(format!("{} at {}: {c}", cmp.variant, fmt_level(r.level)));
            }
            if let Some(w) = &r.withheld {
                notes.push(format!(
                    "{} at {}: not concluded: {} (its tests alone: {})",
                    cmp.variant,
                    fmt_level(r.level),
                    w.why,
                    w.tested.words()
                ));
            }
            if let Some(w) = &r.without_disturbed {
                let figure = match (&w.effect, &w.why) {
                    (Some(e), _) => format!("{} over {}", fmt_ratio(Some(e)), e.units_words()),
                    (None, Some(why)) => format!("no ratio ({why})"),
                    (None, None) => "no ratio".into(),
                };
                notes.push(format!(
                    "{} at {}: without the {} run(s) counted though the host disturbed them: {figure} (a figure, not a conclusion)",
                    cmp.variant,
                    fmt_level(r.level),
                    w.runs_left_out
                ));
            }
        }
        notes.extend(rejection_note(model, cmp));
    }
    notes
}

/// What each side of a comparison lost before its samples, where either lost any: attempts the
/// self-checks rejected (of all attempts) and empty slots, variant · baseline, per level.
pub fn rejection_note(model: &Model, cmp: &Comparison) -> Option<String> {
    let lost: Vec<&Row> = cmp.rows.iter().filter(|r| r.rejections.any()).collect();
    if lost.is_empty() {
        return None;
    }
    let rejected: Vec<String> = lost
        .iter()
        .map(|r| {
            format!(
                "{} · {} at {}",
                r.rejections.variant.rejected_words(),
                r.rejections.base.rejected_words(),
                fmt_level(r.level)
            )
        })
        .collect();
    let empty: Vec<String> = lost
        .iter()
        .filter(|r| r.rejections.variant.empty_slots + r.rejections.base.empty_slots > 0)
        .map(|r| {
            format!(
                "{} · {} at {}",
                r.rejections.variant.empty_slots,
                r.rejections.base.empty_slots,
                fmt_level(r.level)
            )
        })
        .collect();
    Some(format!(
        "{v}: attempts rejected by self-checks ({v} · {b}): {}{}",
        rejected.join(", "),
        if empty.is_empty() {
            String::new()
        } else {
            format!("; empty slots: {}", empty.join(", "))
        },
        v = cmp.variant,
        b = model.baseline
    ))
}

/// Where the margin was given after the data (`ocrig report --margin`) against the one the
/// sweep fixed before them: every conclusion is post hoc.
pub fn post_hoc_line(model: &Model) -> Option<String> {
    let p = model.margin_post_hoc?;
    Some(format!(
        "margin ±{}% given after the data (ocrig report --margin); the sweep fixed ±{}% before them{}: every conclusion \
         here is post hoc",
        fmt_margin(model.margin),
        fmt_margin(p.fixed),
        if p.stopped_on_conclusions {
            " and stopped each comparison on its conclusion at it"
        } else {
            ""
        }
    ))
}

/// What the retention table means, and its rows' caveats.
pub fn retention_notes(wl: &WorkloadModel) -> Vec<String> {
    let mut notes = Vec::new();
    for r in &wl.retention {
        for row in &r.rows {
            if let Some(n) = row.effect.as_ref().and_then(|e| e.note.as_ref()) {
                notes.push(format!("{} at {}: {n}", r.variant, fmt_level(row.level)));
            }
        }
    }
    notes
}

/// The line that says how many attempts the payload's own physics checks rejected, and why
/// (each such attempt was failed and retried; none of it is a sample).
pub fn self_check_line(model: &Model) -> Option<String> {
    let s = &model.self_checks;
    if s.attempts == 0 {
        return None;
    }
    let by_check: Vec<String> = s.by_check.iter().map(|(c, n)| format!("{c} {n}")).collect();
    // One example, the most frequent words (each carries its own numbers, so most are unique).
    let example = s
        .reasons
        .iter()
        .max_by_key(|(_, n)| *n)
        .map(|(r, n)| if *n > 1 { format!("{r} ({n}×)") } else { r.clone() });
    let by = if by_check.is_empty() {
        String::new()
    } else {
        format!("; records rejected per check: {}", by_check.join(", "))
    };
    Some(format!(
        "{} attempt{} rejected by self-checks (failed and retried){by}; {} distinct reason{}{}",
        s.attempts,
        if s.attempts == 1 { "" } else { "s" },
        s.reasons.len(),
        if s.reasons.len() == 1 { "" } else { "s" },
        example.map(|e| format!(", e.g. {e}")).unwrap_or_default()
    ))
}

/// The line that says how many measured attempts the host disturbed: failed, waited out and
/// retried on the same guests (none of it a sample), and counted marked disturbed where the
/// host stayed busy through a whole wait (each named in its cell's note).
pub fn disturbed_line(model: &Model) -> Option<String> {
    let d = &model.disturbed;
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    let mut parts = Vec::new();
    if d.attempts > 0 {
        parts.push(format!(
            "{} attempt{} failed, waited out and retried on the same guests",
            d.attempts,
            plural(d.attempts)
        ));
    }
    if d.counted > 0 {
        parts.push(format!(
            "{} run{} counted marked disturbed (the host stayed busy through a whole wait; each named in its cell)",
            d.counted,
            plural(d.counted)
        ));
    }
    (!parts.is_empty()).then(|| {
        format!(
            "disturbed by the host (its other load on the sweep's CPUs above host.max_other_load): {}{}",
            parts.join("; "),
            d.example
                .as_deref()
                .map(|e| format!("; e.g. {e}"))
                .unwrap_or_default()
        )
    })
}

/// The runs nothing judged for a host disturbance (their record holds no reading of the
/// host's other load), with their denominator and why: never a silent "not disturbed".
pub fn unjudged_line(model: &Model) -> Option<String> {
    let d = &model.disturbed;
    (d.unjudged > 0).then(|| {
        format!(
            "not judged for a host disturbance: {} of {} counted runs, the host's other load not read during them ({})",
            d.unjudged,
            d.runs,
            d.unjudged_why.as_deref().unwrap_or("no reason recorded")
        )
    })
}

/// The one note naming every run counted though the host disturbed it, by variant and level
/// (run indices of the cell's n), so a reader sees which cells hold them.
pub fn disturbed_runs_note(wl: &WorkloadModel) -> Option<String> {
    let per_variant: Vec<String> = wl
        .series
        .iter()
        .filter_map(|s| {
            let cells: Vec<String> = s
                .cells
                .iter()
                .filter(|c| !c.disturbed_runs.is_empty())
                .map(|c| {
                    let runs: Vec<String> = c.disturbed_runs.iter().map(u32::to_string).collect();
                    format!(
                        "{} run {} of {}",
                        fmt_level(c.level),
                        runs.join(","),
                        c.summary.as_ref().map_or(0, |s| s.n)
                    )
                })
                .collect();
            (!cells.is_empty()).then(|| format!("{} {}", s.variant, cells.join(", ")))
        })
        .collect();
    (!per_variant.is_empty()).then(|| {
        format!(
            "counted though the host disturbed them (it stayed busy through a whole wait): {}",
            per_variant.join("; ")
        )
    })
}

/// The lines about the sweep as a whole that close every text format: a margin given after the
/// data, attempts the self-checks rejected, attempts the host disturbed, and how steady the host was.
pub fn sweep_lines(model: &Model) -> Vec<String> {
    post_hoc_line(model)
        .into_iter()
        .chain(self_check_line(model))
        .chain(disturbed_line(model))
        .chain(unjudged_line(model))
        .chain(host_probe_lines(model))
        .collect()
}

/// How steady the host's own speed, and its hand-over between two of its CPUs, were before
/// the sweep (probed then), each when it was probed.
pub(crate) fn host_probe_lines(model: &Model) -> impl Iterator<Item = String> + '_ {
    let host = model.host.as_ref().map(|h| format!("host: {h}"));
    let pv = model
        .pv_disagreements
        .iter()
        .map(|d| format!("variant not as meant: {d}"));
    pv.chain(host).chain(
        [
            ("speed", &model.host_speed),
            ("hand-over", &model.host_handover),
            ("noise floor", &model.noise_floor),
        ]
        .into_iter()
        .filter_map(|(what, words)| Some(format!("host {what} before the sweep: {}", words.as_ref()?))),
    )
}

/// The note that a workload's runs were accepted under self-check bounds looser than the
/// payload's defaults (which a stable host meets).
pub fn loosened_bounds_note(wl: &WorkloadModel) -> Option<String> {
    (!wl.loosened_bounds.is_empty()).then(|| {
        format!(
            "self-check bounds looser than the payload's defaults: {}; runs were accepted that the defaults would reject \
             (holds and gaps that far off what was asked)",
            wl.loosened_bounds.join(", ")
        )
    })
}

/// The variants for a report's opening line, each as `code` renders a name: `a`, `b` (kernel
/// `k`) each with its own kernel, or once for all when every variant ran the same one.
pub fn variants_line(model: &Model, code: impl Fn(&str) -> String) -> String {
    let kernels: Vec<Option<&String>> = model.variants.iter().map(|v| model.kernels.get(v)).collect();
    let names: Vec<String> = model.variants.iter().map(|v| code(v)).collect();
    match kernels.first() {
        Some(Some(k)) if model.variants.len() > 1 && kernels.iter().all(|x| *x == Some(*k)) => {
            format!("{} (kernel {} for all)", names.join(", "), code(k))
        }
        _ => names
            .iter()
            .zip(&kernels)
            .map(|(n, k)| match k {
                Some(k) => format!("{n} (kernel {})", code(k)),
                None => n.clone(),
            })
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// What the cell table's telemetry columns mean, and why any of them is empty.
pub fn telemetry_notes(wl: &WorkloadModel) -> Vec<String> {
    let cells: Vec<&Cell> = wl.series.iter().flat_map(|s| &s.cells).collect();
    let mut notes = Vec::new();
    if wl.headline_from == HeadlineFrom::EveryGuest && cells.iter().any(|c| c.other_guests.is_some()) {
        notes.push(format!(
            "{} = a run's mean over its guests (each ran the workload; other guests = guest 0's peers alone)",
            wl.metric
        ));
    }
    notes.push(
        "vCPU wait = host run-queue wait of guest 0's vCPU threads / run wall time; every vCPU busy: 1 - 1/L at L >= 1x"
            .to_string(),
    );
    let reasons = |label: &str, why: Vec<&String>| -> Vec<String> {
        let mut why = why;
        why.sort();
        why.dedup();
        why.into_iter().map(|w| format!("{label}: {w}")).collect()
    };
    notes.extend(reasons(
        "vCPU wait",
        cells
            .iter()
            .filter_map(|c| c.vcpu_wait.unavailable.as_ref())
            .collect(),
    ));
    notes.extend(reasons(
        "steal",
        cells
            .iter()
            .filter_map(|c| c.guest_steal.unavailable.as_ref())
            .collect(),
    ));
    notes.push("other load = pinned host CPUs' time spent on anything but this run's vCPUs (a shared host's other work)".into());
    notes.extend(reasons(
        "other load",
        cells
            .iter()
            .filter_map(|c| c.host_other.unavailable.as_ref())
            .collect(),
    ));
    let preemption: Vec<&crate::stats::preemption::CellPreemption> =
        cells.iter().filter_map(|c| c.preemption.as_ref()).collect();
    if !preemption.is_empty() {
        notes.push(crate::stats::preemption::NOTE.into());
        notes.extend(reasons(
            "stretched hold",
            preemption
                .iter()
                .filter_map(|p| p.stretched_holds.unavailable.as_ref())
                .collect(),
        ));
        notes.extend(reasons(
            "stretched hand-over",
            preemption
                .iter()
                .filter_map(|p| p.stretched_handovers.unavailable.as_ref())
                .collect(),
        ));
    }
    if cells.iter().any(|c| c.ctxsw_voluntary.is_some()) {
        notes.push(
            "cs vol / cs invol: context switches of the workload's threads inside the guest, mean per run"
                .into(),
        );
    }
    if cells.iter().any(|c| c.kvm.runs > 0) {
        notes.extend(crate::stats::explain::kvm_notes());
    }
    if cells.iter().all(|c| c.kvm.runs == 0) {
        notes.extend(reasons(
            "KVM counters",
            cells.iter().filter_map(|c| c.kvm.unavailable.as_ref()).collect(),
        ));
    }
    notes
}

/// Footnotes for a workload: sample counts, failures and outliers.
pub fn notes(model: &Model, wl: &WorkloadModel) -> Vec<String> {
    let mut notes = Vec::new();
    // Variants with the same counts share one entry, so the line stays short at ten variants.
    let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
    for s in &wl.series {
        let ns: Vec<usize> = s
            .cells
            .iter()
            .map(|c| c.summary.as_ref().map_or(0, |s| s.n))
            .collect();
        let (lo, hi) = (
            ns.iter().min().copied().unwrap_or(0),
            ns.iter().max().copied().unwrap_or(0),
        );
        let n = if lo == hi {
            format!("n={lo}")
        } else {
            format!("n={lo}..{hi}")
        };
        match groups.iter_mut().find(|(g, _)| *g == n) {
            Some((_, vs)) => vs.push(&s.variant),
            None => groups.push((n, vec![&s.variant])),
        }
    }
    let counts: Vec<String> = match groups.as_slice() {
        [(n, _)] if wl.series.len() > 1 => vec![format!("{n} (every variant)")],
        _ => groups
            .iter()
            .map(|(n, vs)| format!("{} {n}", vs.join(", ")))
            .collect(),
    };
    notes.push(format!("runs per cell: {}", counts.join("; ")));
    notes.extend(loosened_bounds_note(wl));
    notes.extend(conclusion_notes(model, wl));
    notes.extend(retention_notes(wl));
    notes.extend(telemetry_notes(wl));
    notes.extend(disturbed_runs_note(wl));
    for s in &wl.series {
        for c in &s.cells {
            if c.failed > 0 {
                notes.push(format!(
                    "{} at {}: {} failed run(s) excluded",
                    s.variant,
                    fmt_level(c.level),
                    c.failed
                ));
            }
            if !c.outlier_runs.is_empty() {
                let runs: Vec<String> = c.outlier_runs.iter().map(u32::to_string).collect();
                notes.push(format!(
                    "{} at {}: outlier run(s) {} (modified Z-score > 3.5; kept)",
                    s.variant,
                    fmt_level(c.level),
                    runs.join(", ")
                ));
            }
        }
    }
    notes
}
