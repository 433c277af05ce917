//! The rows of every report's tables, from the model: the published comparison layout, the
//! retention table, the single-variant table, what explains each cell, the KVM counters.

use super::*;

/// A comparison table as rows of text cells, shared by the terminal, Markdown and HTML formats:
/// header `oc | base | stdev | <variant> | stdev | %improvement | ratio [CI] | p (Holm) |
/// conclusion`, one row per level, then a `gmean` row. The ratio is the variant's over the
/// baseline's, estimated over the units the design replicated (rounds of shared guests,
/// bring-up pairs of variants with their own: [`conclusion_notes`] names them, so the table
/// stays 120 columns wide), with the interval its conclusion was judged by (its level in the
/// table's title: [`interval_levels`]); `%improvement` is that ratio's, signed so + is better;
/// `conclusion` is drawn from the Holm-adjusted tests ([`crate::stats::effect`]).
pub fn comparison_rows(model: &Model, cmp: &Comparison) -> Vec<Vec<String>> {
    let mut rows = vec![vec![
        "oc".to_string(),
        model.baseline.clone(),
        "stdev".into(),
        cmp.variant.clone(),
        "stdev".into(),
        "%improvement".into(),
        "ratio [CI]".into(),
        "p (Holm)".into(),
        "conclusion".into(),
    ]];
    let d = table_decimals(
        cmp.rows
            .iter()
            .flat_map(|r| [&r.base, &r.variant])
            .flatten()
            .map(|s| s.mean),
    );
    for r in &cmp.rows {
        rows.push(vec![
            fmt_level(r.level),
            fmt_opt(r.base.as_ref().map(|s| s.mean), d),
            fmt_opt(r.base.as_ref().and_then(|s| s.stdev), d),
            fmt_opt(r.variant.as_ref().map(|s| s.mean), d),
            fmt_opt(r.variant.as_ref().and_then(|s| s.stdev), d),
            fmt_pct(r.improvement_pct),
            fmt_row_ratio(r),
            fmt_p(r.p_holm, Some(r.conclusion == Conclusion::Differs)),
            conclusion_cell(model, r),
        ]);
    }
    if let Some(g) = &cmp.geomean {
        let mut row = vec![
            "gmean".into(),
            fmt_fixed(g.base, d),
            String::new(),
            fmt_fixed(g.variant, d),
            String::new(),
            fmt_pct(Some(g.improvement_pct)),
        ];
        row.resize(rows[0].len(), String::new());
        rows.push(row);
    }
    rows
}

/// A row's conclusion in a table's cell: `differs`, `differs, within ±5 %` (the equivalence
/// test passed too), `equivalent`, `not concluded`, `untested`; ` (post hoc)` after it where the
/// margin was given after the data.
pub fn conclusion_cell(model: &Model, r: &Row) -> String {
    let words = if r.within_margin && r.conclusion == Conclusion::Differs {
        format!("differs, within ±{} %", fmt_margin(model.margin))
    } else {
        r.conclusion.words().to_string()
    };
    if r.margin_post_hoc {
        format!("{words} (post hoc)")
    } else {
        words
    }
}

/// The confidence of a comparison's intervals, for its table's title: `97.5 %`, or where its
/// rows were tested at different levels (each at its Holm step) `98.3 % at 0.5x; 97.5 % at 1x,
/// 2x`; None when no row was tested.
pub fn interval_levels(cmp: &Comparison) -> Option<String> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for r in &cmp.rows {
        let Some(i) = &r.interval else { continue };
        let c = fmt_confidence(i.confidence);
        match groups.iter_mut().find(|(g, _)| *g == c) {
            Some((_, levels)) => levels.push(fmt_level(r.level)),
            None => groups.push((c, vec![fmt_level(r.level)])),
        }
    }
    match groups.as_slice() {
        [] => None,
        [(c, _)] => Some(c.clone()),
        _ => Some(
            groups
                .iter()
                .map(|(c, levels)| format!("{c} at {}", levels.join(", ")))
                .collect::<Vec<_>>()
                .join("; "),
        ),
    }
}

/// The retention table of a workload: `variant | oc | vs | ratio [95% CI] | units`, one row
/// per variant and level above its lowest; None when no variant has two levels.
pub fn retention_rows(wl: &WorkloadModel) -> Option<Vec<Vec<String>>> {
    if wl.retention.is_empty() {
        return None;
    }
    let mut rows = vec![
        ["variant", "oc", "vs", "ratio [95% CI]", "units"]
            .map(String::from)
            .to_vec(),
    ];
    for r in &wl.retention {
        for row in &r.rows {
            rows.push(vec![
                r.variant.clone(),
                fmt_level(row.level),
                fmt_level(r.from_level),
                fmt_ratio(row.effect.as_ref()),
                row.effect
                    .as_ref()
                    .map_or_else(|| row.why.clone().unwrap_or_default(), |e| e.units_words()),
            ]);
        }
    }
    Some(rows)
}

/// Summary table for a workload without a non-baseline variant: `oc | <variant> | stdev | cv | n`.
pub fn single_rows(wl: &WorkloadModel) -> Vec<Vec<String>> {
    let mut rows = vec![vec!["oc".to_string()]];
    for s in &wl.series {
        rows[0].extend([s.variant.clone(), "stdev".into(), "cv".into(), "n".into()]);
    }
    let d = table_decimals(
        wl.series
            .iter()
            .flat_map(|s| &s.cells)
            .filter_map(|c| Some(c.summary.as_ref()?.mean)),
    );
    for (i, level) in wl
        .series
        .first()
        .map(|s| &s.cells)
        .into_iter()
        .flatten()
        .map(|c| c.level)
        .enumerate()
    {
        let mut row = vec![fmt_level(level)];
        for s in &wl.series {
            let sum = s.cells[i].summary.as_ref();
            row.extend([
                fmt_opt(sum.map(|s| s.mean), d),
                fmt_opt(sum.and_then(|s| s.stdev), d),
                sum.and_then(|s| s.cv)
                    .map_or_else(|| "-".into(), |cv| format!("{:.2}%", cv * 100.0)),
                sum.map_or_else(|| "0".into(), |s| s.n.to_string()),
            ]);
        }
        rows.push(row);
    }
    rows
}

/// The cell table: one row per variant × level (so it stays 120 columns wide at any number
/// of variants), the headline metric next to what explains it:
/// `variant | oc | n | <metric> | vCPU wait | steal | other load | contention | jain | cs vol |
/// cs invol | other guests`. Columns no cell of the workload has are left out, except vCPU
/// wait, steal and other load, which show `-` and a note saying why.
pub fn cell_rows(wl: &WorkloadModel) -> Vec<Vec<String>> {
    let cells = || wl.series.iter().flat_map(|s| &s.cells);
    let has = |f: &dyn Fn(&Cell) -> bool| cells().any(f);
    let contention = has(&|c| c.contention_rate.is_some());
    let jain = has(&|c| c.jain.is_some());
    let ctxsw = has(&|c| c.ctxsw_voluntary.is_some() || c.ctxsw_involuntary.is_some());
    let others = has(&|c| c.other_guests.is_some());
    let preempted = has(&|c| c.preemption.is_some());
    let mut head: Vec<String> = [
        "variant",
        "oc",
        "n",
        wl.metric.as_str(),
        "vCPU wait",
        "steal",
        "other load",
    ]
    .map(String::from)
    .to_vec();
    if preempted {
        head.extend(PREEMPTION_COLUMNS.map(String::from));
    }
    let optional = [
        (contention, "contention"),
        (jain, "jain"),
        (ctxsw, "cs vol"),
        (ctxsw, "cs invol"),
        (others, "other guests"),
    ];
    head.extend(optional.iter().filter(|(on, _)| *on).map(|(_, h)| h.to_string()));
    let d = table_decimals(
        cells()
            .flat_map(|c| [&c.summary, &c.other_guests])
            .flatten()
            .map(|s| s.mean),
    );
    let mut rows = vec![head];
    for s in &wl.series {
        for c in &s.cells {
            let mut row = vec![
                s.variant.clone(),
                fmt_level(c.level),
                c.summary.as_ref().map_or(0, |s| s.n).to_string(),
                fmt_opt(c.summary.as_ref().map(|s| s.mean), d),
                fmt_share(c.vcpu_wait.mean()),
                fmt_share(c.guest_steal.mean()),
                fmt_share(c.host_other.mean()),
            ];
            if preempted {
                row.extend(preemption_cells(c));
            }
            if contention {
                row.push(fmt_frac(c.contention_rate));
            }
            if jain {
                row.push(fmt_frac(c.jain));
            }
            if ctxsw {
                row.push(fmt_count(c.ctxsw_voluntary));
                row.push(fmt_count(c.ctxsw_involuntary));
            }
            if others {
                row.push(fmt_opt(c.other_guests.as_ref().map(|s| s.mean), d));
            }
            rows.push(row);
        }
    }
    rows
}

/// The stretched hold / hand-over columns of the cell table (lock workloads; see
/// `stats::preemption`), placed right after the vCPU wait they explain.
pub const PREEMPTION_COLUMNS: [&str; 5] = [
    "stretched hold",
    "hold loss",
    "stretched hand-over",
    "hand-over loss",
    "on the host's record",
];

/// A cell's [`PREEMPTION_COLUMNS`]: shares as percentages (two decimals: 1 % is the line between
/// alone and preempted), the stretched ones with what they are shares of ([`stretched_of`]),
/// `-` when not measured.
pub(crate) fn preemption_cells(c: &Cell) -> [String; 5] {
    use crate::stats::explain::Measured;
    let pct = |m: &Measured| {
        m.mean()
            .map_or_else(|| "-".into(), |x| format!("{:.2}%", x * 100.0))
    };
    let of = |m: &Measured, n: Option<&crate::stats::preemption::Denominator>| match (m.mean(), n) {
        (Some(share), Some(n)) => stretched_of(share, n),
        _ => pct(m),
    };
    match &c.preemption {
        Some(p) => [
            of(&p.stretched_holds, p.holds_timed.as_ref()),
            pct(&p.hold_lost),
            of(&p.stretched_handovers, p.handovers_timed.as_ref()),
            pct(&p.handover_lost),
            p.observed.as_ref().map_or_else(|| "-".into(), observed_text),
        ],
        None => ["-".into(), "-".into(), "-".into(), "-".into(), "-".into()],
    }
}

/// KVM counters shown per cell (mean per run of guest 0's VM), with their column names
/// (labelled for what KVM counts: see `stats::explain::KVM_COLUMNS`).
pub const KVM_COLUMNS: [(&str, &str); 7] = crate::stats::explain::KVM_COLUMNS;

/// `variant | oc | halt exits | ... | hypercalls`, one row per variant × level, of each cell's
/// KVM figure `of` (None: "-"), when any cell `has` such figures (KVM hosts only).
pub(crate) fn kvm_table(
    wl: &WorkloadModel,
    has: impl Fn(&Cell) -> bool,
    of: impl Fn(&Cell, &str) -> Option<String>,
) -> Option<Vec<Vec<String>>> {
    if !wl.series.iter().flat_map(|s| &s.cells).any(has) {
        return None;
    }
    let mut head = vec!["variant".to_string(), "oc".into()];
    head.extend(KVM_COLUMNS.iter().map(|(_, h)| h.to_string()));
    let mut rows = vec![head];
    for s in &wl.series {
        for c in &s.cells {
            let mut row = vec![s.variant.clone(), fmt_level(c.level)];
            row.extend(
                KVM_COLUMNS
                    .iter()
                    .map(|(k, _)| of(c, k).unwrap_or_else(|| "-".into())),
            );
            rows.push(row);
        }
    }
    Some(rows)
}

/// The KVM counters' mean per run ([`kvm_table`]).
pub fn kvm_rows(wl: &WorkloadModel) -> Option<Vec<Vec<String>>> {
    kvm_table(
        wl,
        |c| c.kvm.runs > 0,
        |c, k| c.kvm.counters.get(k).map(|v| fmt_count(Some(*v))),
    )
}

/// The same counters per second of run (`kvm.per_sec`: the cell's counts over its runs'
/// seconds): a table of its own, as the totals' is as wide as a report allows; its column
/// names are the totals', the title says "per second".
pub fn kvm_rate_rows(wl: &WorkloadModel) -> Option<Vec<Vec<String>>> {
    kvm_table(
        wl,
        |c| !c.kvm.per_sec.is_empty(),
        |c, k| {
            c.kvm.per_sec.get(k).map(|r| match r.abs() {
                // Small rates keep a decimal: 3.5/s is not 4/s.
                a if a < 100.0 => format!("{r:.1}"),
                _ => fmt_count(Some(*r)),
            })
        },
    )
}
