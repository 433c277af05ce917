//! CSV: one row per workload × variant × level (long format, for spreadsheets and pandas),
//! then per non-baseline variant a `geomean` row (`kind` tells them apart; a geomean row has
//! no level). Non-baseline rows carry the comparison against the baseline at that level: the
//! ratio over the design's units with the interval its conclusion was judged by (`ratio_low`,
//! `ratio_high` at `ratio_confidence`, the level of its Holm step) and the unadjusted 95 % one
//! (`ratio_low_unadjusted`, `ratio_high_unadjusted`), its tests (`p`, and Holm-adjusted over
//! the report's family) and what it concludes (`conclusion`: differs, equivalent, not concluded,
//! untested; `within_margin` where it differs and the equivalence test passed too, judged by
//! the (1 − 2α) interval `equivalence_low`..`equivalence_high` at `equivalence_confidence`;
//! `conclusion_note` says why a row was unpaired, untested or withheld; `margin_post_hoc` where
//! the margin was given after the data); every cell row its measured `attempts` and the
//! `rejected_attempts` its self-checks refused (its empty slots are `failed`), and a comparison
//! row Fisher's test of the two sides' rates (`rejection_fisher_p`); every row above its
//! variant's lowest level its retention (the ratio to that level, `retention_vs_level`); and
//! every cell row what explains it: vCPU wait, guest steal (empty with a note when not
//! measured), contention, Jain, context switches, other guests, KVM counters.

use super::kernel_symbols::{self, CSV_COLUMNS as KERNEL_COLUMNS};
use super::layout::field;
use super::{Exporter, KVM_COLUMNS, ReportInput};
use crate::journal::Better;
use crate::stats::cells::{Cell, Comparison, Model, RetentionRow, Row, WorkloadModel, same_level};

pub struct CsvExporter;

/// The fixed columns; the KVM counters of [`KVM_COLUMNS`] follow as `kvm_<name>`.
pub const COLUMNS: [&str; 63] = [
    "kind",
    "workload",
    "command",
    "metric",
    "better",
    "variant",
    "baseline",
    "level",
    "n",
    "mean",
    "stdev",
    "cv",
    "median",
    "min",
    "max",
    "ci95_low",
    "ci95_high",
    "base_mean",
    "improvement_pct",
    "ratio",
    "ratio_low",
    "ratio_high",
    "unit",
    "paired",
    "units_base",
    "units_variant",
    "df",
    "p",
    "p_holm",
    "p_equivalent_holm",
    "conclusion",
    "conclusion_note",
    "ratio_confidence",
    "ratio_low_unadjusted",
    "ratio_high_unadjusted",
    "equivalence_confidence",
    "equivalence_low",
    "equivalence_high",
    "within_margin",
    "margin_post_hoc",
    "attempts",
    "rejected_attempts",
    "rejection_fisher_p",
    "retention",
    "retention_low",
    "retention_high",
    "retention_vs_level",
    "contention_rate",
    "jain",
    "failed",
    "disturbed_runs",
    "vcpu_wait_share",
    "vcpu_wait_n",
    "vcpu_wait_note",
    "guest_steal_share",
    "guest_steal_note",
    "host_other_share",
    "host_other_note",
    "ctxsw_voluntary",
    "ctxsw_involuntary",
    "other_guests_mean",
    "other_guests_n",
    "kvm_note",
];

/// Stretched lock holds and hand-overs (`stats::preemption`), after the KVM counters; empty for
/// workloads without a lock, the note saying why a lock cell has none.
pub const PREEMPTION_COLUMNS: [&str; 22] = [
    "stretched_hold_share",
    "hold_lost_share",
    "stretched_hold_vcpu_share",
    "stretched_handover_share",
    "handover_lost_share",
    "stretched_handover_vcpu_share",
    // What the stretched shares are of, per run (means) and per second.
    "holds_timed_per_run",
    "holds_stretched_per_run",
    "holds_timed_per_s",
    "handovers_timed_per_run",
    "handovers_stretched_per_run",
    "handovers_timed_per_s",
    // The listed stretched intervals judged by the host's record, per run (means).
    "observed_vcpu_per_run",
    "observed_both_per_run",
    "observed_guest_per_run",
    "observed_other_vcpu_per_run",
    "observed_unexplained_per_run",
    "observed_too_short_per_run",
    "observed_clock_error_ns",
    "observed_runs",
    "observed_note",
    "preemption_note",
];

/// Every column name, in order.
pub fn header() -> Vec<String> {
    COLUMNS
        .iter()
        .map(|c| c.to_string())
        .chain(KVM_COLUMNS.iter().map(|(k, _)| format!("kvm_{k}")))
        .chain(PREEMPTION_COLUMNS.iter().map(|c| c.to_string()))
        .collect()
}

fn preemption_fields(c: &Cell) -> Vec<String> {
    let Some(p) = &c.preemption else {
        return vec![String::new(); PREEMPTION_COLUMNS.len()];
    };
    let note = [&p.stretched_holds, &p.stretched_handovers]
        .iter()
        .filter_map(|m| m.unavailable.as_ref())
        .next()
        .cloned();
    vec![
        num(p.stretched_holds.mean()),
        num(p.hold_lost.mean()),
        num(p.holds_vcpu.mean()),
        num(p.stretched_handovers.mean()),
        num(p.handover_lost.mean()),
        num(p.handovers_vcpu.mean()),
    ]
    .into_iter()
    .chain([&p.holds_timed, &p.handovers_timed].into_iter().flat_map(|n| {
        [
            num(n.map(|n| n.timed_per_run)),
            num(n.map(|n| n.stretched_per_run)),
            num(n.and_then(|n| n.timed_per_s)),
        ]
    }))
    .chain(observed_fields(p))
    .chain([text(note.as_ref())])
    .collect()
}

fn observed_fields(p: &crate::stats::preemption::CellPreemption) -> Vec<String> {
    match &p.observed {
        Some(o) => {
            let per_run = |x: u64| num(Some(x as f64 / o.runs.max(1) as f64));
            vec![
                per_run(o.vcpu.count),
                per_run(o.both.count),
                per_run(o.guest.count),
                per_run(o.other_vcpu.count),
                per_run(o.unexplained.count),
                per_run(o.too_short),
                num(Some(o.error_ns as f64)),
                num(Some(o.runs as f64)),
                String::new(),
            ]
        }
        None => {
            let mut v = vec![String::new(); 8];
            v.push(text(p.observed_unavailable.as_ref()));
            v
        }
    }
}

fn num(x: Option<f64>) -> String {
    x.map(|x| x.to_string()).unwrap_or_default()
}

fn text(x: Option<&String>) -> String {
    x.map(|s| field(s)).unwrap_or_default()
}

/// The columns every row of a workload starts with: kind, workload, command, metric, better.
fn lead(kind: &str, wl: &WorkloadModel) -> Vec<String> {
    vec![
        kind.into(),
        field(&wl.workload),
        field(&wl.command),
        field(&wl.metric),
        match wl.better {
            Better::Higher => "higher".into(),
            Better::Lower => "lower".into(),
        },
    ]
}

fn row(
    model: &Model,
    wl: &WorkloadModel,
    variant: &str,
    c: &Cell,
    cmp: Option<&Row>,
    kept: Option<(f64, &RetentionRow)>,
) -> Vec<String> {
    let s = c.summary.as_ref();
    let e = cmp.and_then(|r| r.effect.as_ref());
    let k = kept.and_then(|(_, r)| r.effect.as_ref());
    let mut r = lead("cell", wl);
    r.extend([
        field(variant),
        field(&model.baseline),
        c.level.to_string(),
        s.map_or(0, |s| s.n).to_string(),
        num(s.map(|s| s.mean)),
        num(s.and_then(|s| s.stdev)),
        num(s.and_then(|s| s.cv)),
        num(s.map(|s| s.median)),
        num(s.map(|s| s.min)),
        num(s.map(|s| s.max)),
        num(s.and_then(|s| s.ci95).map(|ci| ci.low)),
        num(s.and_then(|s| s.ci95).map(|ci| ci.high)),
        num(cmp.and_then(|r| r.base.as_ref()).map(|b| b.mean)),
        num(cmp.and_then(|r| r.improvement_pct)),
        num(e.map(|e| e.ratio)),
        num(cmp.and_then(|r| r.interval).map(|i| i.low)),
        num(cmp.and_then(|r| r.interval).map(|i| i.high)),
        e.map(|e| {
            serde_json::to_value(e.unit)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default()
        })
        .unwrap_or_default(),
        e.map(|e| e.paired.to_string()).unwrap_or_default(),
        e.map(|e| e.n_base.to_string()).unwrap_or_default(),
        e.map(|e| e.n_variant.to_string()).unwrap_or_default(),
        num(e.map(|e| e.df)),
        num(e.map(|e| e.p)),
        num(cmp.and_then(|r| r.p_holm)),
        num(cmp.and_then(|r| r.p_equivalent_holm)),
        cmp.map(|r| r.conclusion.words().to_string()).unwrap_or_default(),
        text(
            cmp.and_then(|r| {
                let withheld = r.withheld.as_ref().map(|w| format!("not concluded: {}", w.why));
                let caveat = e.and_then(|e| e.note.clone()).or_else(|| r.why.clone());
                match (caveat, withheld) {
                    (Some(c), Some(w)) => Some(format!("{c}; {w}")),
                    (c, w) => c.or(w),
                }
            })
            .as_ref(),
        ),
        num(cmp.and_then(|r| r.interval).map(|i| i.confidence)),
        num(e.map(|e| e.low)),
        num(e.map(|e| e.high)),
        num(cmp.and_then(|r| r.equivalence).map(|q| q.confidence)),
        num(cmp.and_then(|r| r.equivalence).map(|q| q.low)),
        num(cmp.and_then(|r| r.equivalence).map(|q| q.high)),
        cmp.filter(|r| r.effect.is_some())
            .map(|r| r.within_margin.to_string())
            .unwrap_or_default(),
        cmp.filter(|r| r.effect.is_some())
            .map(|r| r.margin_post_hoc.to_string())
            .unwrap_or_default(),
        c.attempts.to_string(),
        c.rejected_attempts.to_string(),
        num(cmp.and_then(|r| r.rejections.fisher_p)),
        num(k.map(|e| e.ratio)),
        num(k.map(|e| e.low)),
        num(k.map(|e| e.high)),
        kept.map(|(from, _)| from.to_string()).unwrap_or_default(),
        num(c.contention_rate),
        num(c.jain),
        c.failed.to_string(),
        // The run indices, ';'-separated (empty: none counted disturbed).
        c.disturbed_runs
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(";"),
        num(c.vcpu_wait.mean()),
        c.vcpu_wait.samples.len().to_string(),
        text(c.vcpu_wait.unavailable.as_ref()),
        num(c.guest_steal.mean()),
        text(c.guest_steal.unavailable.as_ref()),
        num(c.host_other.mean()),
        text(c.host_other.unavailable.as_ref()),
        num(c.ctxsw_voluntary),
        num(c.ctxsw_involuntary),
        num(c.other_guests.as_ref().map(|s| s.mean)),
        c.other_guests.as_ref().map_or(0, |s| s.n).to_string(),
        text(c.kvm.unavailable.as_ref()),
    ]);
    r.extend(
        KVM_COLUMNS
            .iter()
            .map(|(k, _)| num(c.kvm.counters.get(*k).copied())),
    );
    r.extend(preemption_fields(c));
    r
}

/// A comparison's geometric mean over the levels: `mean` is the variant's, `base_mean` the
/// baseline's, `n` the number of levels; the columns that have no meaning here are empty.
fn geomean_row(model: &Model, wl: &WorkloadModel, cmp: &Comparison) -> Option<Vec<String>> {
    let g = cmp.geomean.as_ref()?;
    let mut r = lead("geomean", wl);
    r.extend([
        field(&cmp.variant),
        field(&model.baseline),
        String::new(),
        g.levels.to_string(),
    ]);
    r.push(g.variant.to_string());
    r.extend(std::iter::repeat_n(String::new(), 7));
    r.push(g.base.to_string());
    r.push(g.improvement_pct.to_string());
    r.resize(header().len(), String::new());
    Some(r)
}

impl Exporter for CsvExporter {
    /// With profiled cells, every row ends with the [`KERNEL_COLUMNS`] (filled on the rows of
    /// cells with a profile).
    fn render(&self, input: &ReportInput) -> anyhow::Result<String> {
        let model = &input.model;
        let profiled = !input.symbols.is_empty();
        let mut head = header();
        if profiled {
            head.extend(KERNEL_COLUMNS.iter().map(|c| c.to_string()));
        }
        let mut out = head.join(",");
        out.push('\n');
        let mut line = |mut r: Vec<String>, kernel: Option<[String; 6]>| {
            if profiled {
                r.extend(kernel.unwrap_or_default());
            }
            out.push_str(&r.join(","));
            out.push('\n');
        };
        for wl in &model.workloads {
            for s in &wl.series {
                let cmp = wl.comparisons.iter().find(|c| c.variant == s.variant);
                let retention = wl.retention.iter().find(|r| r.variant == s.variant);
                for (i, c) in s.cells.iter().enumerate() {
                    let kept = retention.and_then(|r| {
                        let row = r.rows.iter().find(|k| same_level(k.level, c.level))?;
                        Some((r.from_level, row))
                    });
                    let kernel =
                        kernel_symbols::csv_fields(&input.symbols, &wl.workload, &s.variant, c.level);
                    line(
                        row(model, wl, &s.variant, c, cmp.map(|cmp| &cmp.rows[i]), kept),
                        Some(kernel),
                    );
                }
            }
            for cmp in &wl.comparisons {
                if let Some(r) = geomean_row(model, wl, cmp) {
                    line(r, None);
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Format, ReportOptions};
    use crate::testing::{journal, render};

    /// Minimal RFC 4180 reader for the test.
    fn parse(text: &str) -> Vec<Vec<String>> {
        let mut rows = vec![];
        let (mut row, mut f, mut quoted) = (vec![], String::new(), false);
        let mut chars = text.chars().peekable();
        while let Some(ch) = chars.next() {
            match (ch, quoted) {
                ('"', true) if chars.peek() == Some(&'"') => {
                    f.push('"');
                    chars.next();
                }
                ('"', _) => quoted = !quoted,
                (',', false) => row.push(std::mem::take(&mut f)),
                ('\n', false) => {
                    row.push(std::mem::take(&mut f));
                    rows.push(std::mem::take(&mut row));
                }
                (c, _) => f.push(c),
            }
        }
        rows
    }

    #[test]
    fn parses_back() {
        let mut j = journal();
        j.header.scenario = "x".into();
        let wl = j.header.workloads.remove("hackbench").unwrap();
        j.header.workloads.insert("hackbench, \"quoted\"".into(), wl);
        for r in &mut j.runs {
            if r.workload == "hackbench" {
                r.workload = "hackbench, \"quoted\"".into();
            }
        }
        let text = render(&j, Format::Csv, &ReportOptions::default()).unwrap();
        let rows = parse(&text);
        let head = header();
        assert_eq!(rows[0], head);
        // 2 workloads × 2 variants × 2 levels, then one geomean row per workload.
        assert_eq!(rows.len(), 1 + 8 + 2);
        assert!(rows.iter().all(|r| r.len() == head.len()), "ragged rows");
        let col = |name: &str| head.iter().position(|c| c == name).unwrap();
        let patched = rows
            .iter()
            .find(|r| r[col("kind")] == "cell" && r[col("variant")] == "patched" && r[col("level")] == "0.5")
            .unwrap();
        assert_eq!(patched[col("workload")], "hackbench, \"quoted\"");
        assert_eq!(patched[col("mean")].parse::<f64>().unwrap(), 9.0);
        assert_eq!(
            patched[col("improvement_pct")].parse::<f64>().unwrap().round(),
            10.0
        );
        assert_eq!(patched[col("conclusion")], "differs");
        assert_eq!(
            (patched[col("unit")].as_str(), patched[col("paired")].as_str()),
            ("bring-up", "false")
        );
        assert!(patched[col("conclusion_note")].contains("fewer than 2 blocks"));
        // Holm over 4: 3 × 0.003543624615619606 (stats::cells' test).
        assert!((patched[col("p_holm")].parse::<f64>().unwrap() - 0.010630873846858818).abs() < 1e-12);
        let base = &rows[1];
        assert_eq!(
            (
                base[col("variant")].as_str(),
                base[col("improvement_pct")].as_str()
            ),
            ("base", "")
        );
        assert_eq!(base[col("failed")], "1");
        let lock = rows.iter().find(|r| r[col("workload")] == "lock-ticket").unwrap();
        assert!((lock[col("jain")].parse::<f64>().unwrap() - 0.99).abs() < 1e-12);
        // base at 0.5x: vCPU wait (0.02 + 0.04 + 0.06) / 3 over 3 runs, steal 0.05, halts 2000.
        assert!((lock[col("vcpu_wait_share")].parse::<f64>().unwrap() - 0.04).abs() < 1e-12);
        assert_eq!(lock[col("vcpu_wait_n")], "3");
        assert!((lock[col("guest_steal_share")].parse::<f64>().unwrap() - 0.05).abs() < 1e-12);
        assert_eq!(lock[col("kvm_halt_exits")], "2000");
        assert!((lock[col("host_other_share")].parse::<f64>().unwrap() - 0.1).abs() < 1e-9);
        assert_eq!(
            lock[col("base_mean")],
            "",
            "the baseline's own row compares with nothing"
        );
        // hackbench had no telemetry: empty numbers, and a note saying why.
        assert_eq!(base[col("vcpu_wait_share")], "");
        assert!(base[col("vcpu_wait_note")].contains("not recorded"));
        // The geomean rows: hackbench base 14.1421, patched 13.5831, +3.95 % (see cells.rs).
        let g = rows
            .iter()
            .find(|r| r[col("kind")] == "geomean" && r[col("workload")].starts_with("hackbench"))
            .unwrap();
        assert_eq!(
            (
                g[col("variant")].as_str(),
                g[col("level")].as_str(),
                g[col("n")].as_str()
            ),
            ("patched", "", "2")
        );
        assert!((g[col("mean")].parse::<f64>().unwrap() - 13.583077707206124).abs() < 1e-9);
        assert!((g[col("base_mean")].parse::<f64>().unwrap() - 14.142135623730951).abs() < 1e-9);
        assert!((g[col("improvement_pct")].parse::<f64>().unwrap() - 3.9531364385072787).abs() < 1e-9);
        assert_eq!(g[col("stdev")], "");
        // What each comparison concludes, and each row's retention against its lowest level.
        let patched_1x = rows
            .iter()
            .find(|r| {
                r[col("kind")] == "cell"
                    && r[col("workload")].starts_with("hackbench")
                    && r[col("variant")] == "patched"
                    && r[col("level")] == "1"
            })
            .unwrap();
        assert_eq!(patched_1x[col("conclusion")], "not concluded");
        let lo = patched_1x[col("ratio_low")].parse::<f64>().unwrap();
        let hi = patched_1x[col("ratio_high")].parse::<f64>().unwrap();
        assert!(lo < 1.0 && hi > 1.0, "{lo} {hi}");
        // That interval is the one its conclusion was judged by, at its Holm step's level (from
        // lock 0.5x on Holm stops: 1 - 0.05/2; stats::cells' test has scipy's bounds); the
        // unadjusted 95 % one beside it, narrower.
        assert_eq!(patched_1x[col("ratio_confidence")].parse::<f64>().unwrap(), 0.975);
        assert!((lo - 0.8901097806008812).abs() < 1e-9 && (hi - 1.1804269626769321).abs() < 1e-9);
        let ulo = patched_1x[col("ratio_low_unadjusted")].parse::<f64>().unwrap();
        assert!(ulo > lo, "{ulo} {lo}");
        assert_eq!(patched_1x[col("within_margin")], "false");
        assert_eq!(patched_1x[col("margin_post_hoc")], "false");
        assert_eq!(
            patched_1x[col("equivalence_confidence")].parse::<f64>().unwrap(),
            0.975
        );
        // Attempts per cell, and Fisher's test of the two sides' rejections.
        assert_eq!(
            (
                base[col("attempts")].as_str(),
                base[col("rejected_attempts")].as_str()
            ),
            ("4", "0")
        );
        assert_eq!(patched[col("rejection_fisher_p")], "1");
        assert_eq!(patched_1x[col("retention_vs_level")], "0.5");
        // patched hackbench: gmean(20.5, 21.5, 19.5) / gmean(9.0, 9.1, 8.9)
        let kept = (20.5f64 * 21.5 * 19.5).cbrt() / (9.0f64 * 9.1 * 8.9).cbrt();
        assert!((patched_1x[col("retention")].parse::<f64>().unwrap() - kept).abs() < 1e-12);
        assert_eq!(
            base[col("conclusion")],
            "",
            "the baseline's own row compares with nothing"
        );
        assert_eq!(base[col("retention")], "", "the lowest level is the reference");
    }
}
