//! The verdict a person reads first, last on the terminal: per workload and level, each variant
//! against the baseline (ratio, interval, conclusion with its direction, the units behind it),
//! then the retention figures; within [`WIDTH`] columns, the conclusions coloured on a terminal.

use super::format::{fmt_level, fmt_margin};
use super::layout::{WIDTH, wrap};
use crate::color::{Tone, paint};
use crate::stats::cells::{Conclusion, Model, Row, WorkloadModel};
use crate::vocabulary::Better;

/// The verdict block (empty for a model without workloads).
pub fn text(model: &Model) -> String {
    let mut out = String::new();
    for wl in &model.workloads {
        out.push_str(&workload(model, wl));
    }
    if !out.is_empty() {
        out.insert_str(0, &format!("{}\n", rule("verdict")));
    }
    out
}

/// `── verdict ──…` across the width.
fn rule(title: &str) -> String {
    let head = format!("── {title} ");
    let fill = WIDTH.saturating_sub(head.chars().count());
    format!("{head}{}", "─".repeat(fill))
}

fn workload(model: &Model, wl: &WorkloadModel) -> String {
    let better = match wl.better {
        Better::Higher => "higher is better",
        Better::Lower => "lower is better",
    };
    let mut out = if wl.comparisons.is_empty() {
        format!(
            "{} ({}, {better}): one variant, nothing compared\n",
            wl.workload, wl.metric
        )
    } else {
        format!(
            "{} ({}, {better}): each variant / {}\n",
            wl.workload, wl.metric, model.baseline
        )
    };
    let lines: Vec<[String; 5]> = rows(model, wl)
        .into_iter()
        .map(|r| {
            let concl = match r.so {
                Some(so) => format!("{}: {so}", r.conclusion),
                None => r.conclusion,
            };
            [r.level, r.variant, r.ratio, concl, r.units]
        })
        .collect();
    let w = |k: usize| lines.iter().map(|l| l[k].chars().count()).max().unwrap_or(0);
    let (wo, wv, wr, wc) = (w(0), w(1), w(2), w(3));
    for [oc, variant, ratio, concl, units] in &lines {
        let tone = tone_of(concl);
        let line = format!(
            "  {oc:<wo$}  {variant:<wv$}  {ratio:<wr$}  {}  {units}",
            paint(&format!("{concl:<wc$}"), tone),
        );
        out.push_str(&line);
        out.push('\n');
    }
    let retained = retained(wl);
    if let Some(from) = wl.retention.first().map(|r| r.from_level) {
        let words = format!(
            "retention ({} at each level / at {}): {}",
            wl.metric,
            fmt_level(from),
            retained.join(" · ")
        );
        out.push_str(&wrap(&words, "  ", "    "));
    }
    out
}

/// One comparison of the verdict, in words.
pub struct VerdictRow {
    pub level: String,
    pub variant: String,
    /// `1.653 [1.620, 1.687]`, or `-` without a ratio.
    pub ratio: String,
    /// `differs`, `equivalent within ±5 %`, `not concluded`, `untested`.
    pub conclusion: String,
    /// Where it differs: `65.3 % better`.
    pub so: Option<String>,
    /// The units behind it (`8 rounds`, `3+3 bring-ups`), or why there is no ratio.
    pub units: String,
}

/// Each variant against the baseline at each level, in the model's order.
pub fn rows(model: &Model, wl: &WorkloadModel) -> Vec<VerdictRow> {
    wl.comparisons
        .iter()
        .flat_map(|c| c.rows.iter().map(move |r| (c.variant.as_str(), r)))
        .map(|(variant, r)| {
            let (ratio, units) = match &r.effect {
                Some(e) => (
                    format!("{:.3} [{:.3}, {:.3}]", e.ratio, e.low, e.high),
                    e.units_words(),
                ),
                None => ("-".into(), r.why.clone().unwrap_or_else(|| "no ratio".into())),
            };
            let (conclusion, so) = conclusion(model, wl, r);
            VerdictRow {
                level: fmt_level(r.level),
                variant: variant.to_string(),
                ratio,
                conclusion,
                so,
                units,
            }
        })
        .collect()
}

/// Every variant's retention at every level above the lowest: `tas 2x 0.523 [0.509, 0.538]`.
pub fn retained(wl: &WorkloadModel) -> Vec<String> {
    wl.retention
        .iter()
        .flat_map(|r| {
            r.rows.iter().map(move |row| match &row.effect {
                Some(e) => format!(
                    "{} {} {:.3} [{:.3}, {:.3}]",
                    r.variant,
                    fmt_level(row.level),
                    e.ratio,
                    e.low,
                    e.high
                ),
                None => format!("{} {} -", r.variant, fmt_level(row.level)),
            })
        })
        .collect()
}

/// A row's conclusion in words, with its margin where it is equivalent, and its direction and
/// size where it differs.
fn conclusion(model: &Model, wl: &WorkloadModel, r: &Row) -> (String, Option<String>) {
    match (r.conclusion, &r.effect) {
        (Conclusion::Differs, Some(e)) => {
            let up = e.ratio > 1.0;
            let better = up == (wl.better == Better::Higher);
            let pct = (e.ratio - 1.0).abs() * 100.0;
            (
                "differs".into(),
                Some(format!("{pct:.1} % {}", if better { "better" } else { "worse" })),
            )
        }
        (Conclusion::Equivalent, _) => (format!("equivalent within ±{} %", fmt_margin(model.margin)), None),
        (c, _) => (c.words().to_string(), None),
    }
}

fn tone_of(conclusion: &str) -> Tone {
    if conclusion.starts_with("differs") {
        Tone::Strong
    } else if conclusion.starts_with("equivalent") {
        Tone::Good
    } else {
        Tone::Caution
    }
}

#[cfg(test)]
mod tests {
    use crate::report::{Format, ReportOptions};
    use crate::testing::{journal, render};

    #[test]
    fn the_verdict_closes_the_table_report_within_the_width() {
        let text = render(&journal(), Format::Table, &ReportOptions::default()).unwrap();
        let verdict = &text[text.find("── verdict ").expect("a verdict")..];
        assert!(
            verdict.contains("hackbench (seconds, lower is better): each variant / base\n"),
            "{verdict}"
        );
        // The fixture's rows (table.rs's test derives them with scipy): hackbench 0.5x
        // 0.900 [0.864, 0.938] differs, lower is better, so 10 % better; lock 1x 1.601 differs,
        // higher is better.
        assert!(
            verdict.contains("  0.5x  patched  0.900 [0.864, 0.938]  differs: 10.0 % better")
                && verdict.contains("  1x    patched  1.025 [0.916, 1.147]  not concluded"),
            "{verdict}"
        );
        assert!(
            verdict.contains("1.601 [1.475, 1.737]  differs: 60.1 % better"),
            "{verdict}"
        );
        assert!(
            verdict.contains("retention (seconds at each level / at 0.5x): base 1x 1.999 [1.795, 2.226]"),
            "{verdict}"
        );
        assert!(verdict.contains("3+3 bring-ups"), "{verdict}");
        for line in text.lines() {
            assert!(
                line.chars().count() <= 120,
                "{} columns: {line}",
                line.chars().count()
            );
        }
    }
}
