//! The verdict a person reads first, last on the terminal: per workload and level, each variant
//! against the baseline (ratio with the interval its conclusion was judged by and that
//! interval's level, the conclusion with its direction, the units behind it, what each side
//! lost to the self-checks), then the retention figures; within [`WIDTH`] columns, the
//! conclusions coloured on a terminal. It opens with what its figures are: the intervals'
//! levels, how `equivalent` was judged, a margin given after the data.

use super::format::{
    fmt_confidence, fmt_confidence_range, fmt_level, fmt_margin, fmt_ratio_interval, fmt_row_ratio,
};
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
        let mut head = format!("{}\n", rule("verdict"));
        for line in key_lines(model) {
            head.push_str(&wrap(&line, "", "  "));
        }
        out.insert_str(0, &head);
    }
    out
}

/// `── verdict ──…` across the width.
fn rule(title: &str) -> String {
    let head = format!("── {title} ");
    let fill = WIDTH.saturating_sub(head.chars().count());
    format!("{head}{}", "─".repeat(fill))
}

/// What the verdict's figures are, one line each: the level of its intervals (each row's Holm
/// step: `interval: 97.5–98.3 %, adjusted for 4 comparisons × 4 looks`), the interval
/// `equivalent` was judged by (the TOST's (1 − 2α) one), a margin given after the data, what
/// `rejected` counts.
pub fn key_lines(model: &Model) -> Vec<String> {
    let rows: Vec<&Row> = model
        .workloads
        .iter()
        .flat_map(|w| &w.comparisons)
        .flat_map(|c| &c.rows)
        .collect();
    let mut lines = Vec::new();
    if let Some(levels) = fmt_confidence_range(rows.iter().filter_map(|r| r.interval.map(|i| i.confidence))) {
        let looks = if model.looks > 1 {
            format!(" × {} looks", model.looks)
        } else {
            String::new()
        };
        let plural = if model.family == 1 { "" } else { "s" };
        lines.push(format!(
            "interval: {levels}, adjusted for {} comparison{plural}{looks} (Holm, α {}; each row at its step's level)",
            model.family, model.alpha
        ));
        let (lo, hi) = crate::stats::effect::margin_bounds(model.margin);
        if let Some(c) = fmt_confidence_range(rows.iter().filter_map(|r| r.equivalence.map(|e| e.confidence)))
        {
            lines.push(format!(
                "equivalent: the row's {c} interval within ±{} % ({:.3}–{:.3}), both one-sided tests at its step's level",
                fmt_margin(model.margin),
                lo.exp(),
                hi.exp()
            ));
        }
    }
    if let Some(p) = model.margin_post_hoc {
        lines.push(format!(
            "margin ±{} % given after the data: the sweep fixed ±{} % before them{}; every conclusion below is post hoc",
            fmt_margin(model.margin),
            fmt_margin(p.fixed),
            if p.stopped_on_conclusions {
                " and stopped on its conclusions at it"
            } else {
                ""
            }
        ));
    }
    if rows.iter().any(|r| r.rejections.any()) {
        lines.push(
            "rejected: attempts the self-checks refused, of all attempts, variant · baseline; empty: slots given up".into(),
        );
    }
    lines
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
    let rows = rows(model, wl);
    let lines: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            let concl = match &r.so {
                Some(so) => format!("{}: {so}", r.conclusion),
                None => r.conclusion.clone(),
            };
            let units = match &r.rejected {
                Some(lost) => format!("{}; {lost}", r.units),
                None => r.units.clone(),
            };
            [
                r.level.clone(),
                r.variant.clone(),
                r.ratio.clone(),
                r.confidence.clone(),
                concl,
                units,
            ]
        })
        .collect();
    let w = |k: usize| lines.iter().map(|l| l[k].chars().count()).max().unwrap_or(0);
    let (wo, wv, wr, wl_, wc) = (w(0), w(1), w(2), w(3), w(4));
    for ([oc, variant, ratio, level, concl, units], r) in lines.iter().zip(&rows) {
        let tone = tone_of(concl);
        let head = format!("  {oc:<wo$}  {variant:<wv$}  {ratio:<wr$}  {level:<wl_$}  ");
        let plain = head.chars().count() + wc + 2 + units.chars().count();
        if plain <= WIDTH {
            out.push_str(&format!(
                "{head}{}  {units}\n",
                paint(&format!("{concl:<wc$}"), tone)
            ));
        } else {
            // Too wide for one line: the units on the next, under the conclusion.
            let indent = " ".repeat(head.chars().count());
            out.push_str(&format!("{head}{}\n", paint(concl, tone)));
            out.push_str(&wrap(units, &indent, &indent));
        }
        if let Some(note) = &r.note {
            out.push_str(&wrap(&format!("({note})"), "      ", "       "));
        }
    }
    let retained = retained(wl);
    if let Some(from) = wl.retention.first().map(|r| r.from_level) {
        let one_boot = wl
            .retention
            .iter()
            .flat_map(|r| &r.rows)
            .any(|row| row.within_one_boot);
        let words = format!(
            "retention ({} at each level / at {}{}): {}",
            wl.metric,
            fmt_level(from),
            if one_boot { ", within one boot a level" } else { "" },
            retained.join(" · ")
        );
        out.push_str(&wrap(&words, "  ", "    "));
        let against = against_baseline(wl);
        if !against.is_empty() {
            let words = format!(
                "retention against {}'s (from the comparisons at both levels, 95 %): {}",
                model.baseline,
                against.join(" · ")
            );
            out.push_str(&wrap(&words, "  ", "    "));
        }
    }
    out
}

/// One comparison of the verdict, in words.
pub struct VerdictRow {
    pub level: String,
    pub variant: String,
    /// `1.653 [1.620, 1.687]` (the interval its conclusion was judged by), or `-` without a
    /// ratio.
    pub ratio: String,
    /// That interval's confidence, `98.3 %`; empty without one.
    pub confidence: String,
    /// `differs`, `equivalent within ±5 %`, `not concluded`, `untested`; a margin given after
    /// the data says so here where it is what the conclusion is about.
    pub conclusion: String,
    /// Where it differs: `65.3 % better`, `3.1 % better, within ±5 %`.
    pub so: Option<String>,
    /// The units behind it (`8 rounds`, `3+3 bring-ups`), or why there is no ratio.
    pub units: String,
    /// What the sides lost to the self-checks, where any row of the workload lost any:
    /// `rejected 2/14 · 0/12` (variant · baseline), `; empty 1 · 0` where slots were left empty.
    pub rejected: Option<String>,
    /// Why a row its tests concluded is not concluded.
    pub note: Option<String>,
}

/// Each variant against the baseline at each level, in the model's order.
pub fn rows(model: &Model, wl: &WorkloadModel) -> Vec<VerdictRow> {
    let lost = wl
        .comparisons
        .iter()
        .flat_map(|c| &c.rows)
        .any(|r| r.rejections.any());
    wl.comparisons
        .iter()
        .flat_map(|c| c.rows.iter().map(move |r| (c.variant.as_str(), r)))
        .map(|(variant, r)| {
            let units = match &r.effect {
                Some(e) => e.units_words(),
                None => r.why.clone().unwrap_or_else(|| "no ratio".into()),
            };
            let (conclusion, so) = conclusion(model, wl, r);
            VerdictRow {
                level: fmt_level(r.level),
                variant: variant.to_string(),
                ratio: fmt_row_ratio(r),
                confidence: r
                    .interval
                    .map(|i| fmt_confidence(i.confidence))
                    .unwrap_or_default(),
                conclusion,
                so,
                units,
                rejected: lost.then(|| rejected_words(r)),
                note: r
                    .withheld
                    .as_ref()
                    .map(|w| format!("not concluded: {}; its tests alone: {}", w.why, w.tested.words())),
            }
        })
        .collect()
}

/// `rejected 2/14 · 0/12`, and `; empty 1 · 0` where a slot was left empty (variant · baseline).
fn rejected_words(r: &Row) -> String {
    let (v, b) = (r.rejections.variant, r.rejections.base);
    let mut s = format!("rejected {} · {}", v.rejected_words(), b.rejected_words());
    if v.empty_slots + b.empty_slots > 0 {
        s.push_str(&format!("; empty {} · {}", v.empty_slots, b.empty_slots));
    }
    s
}

/// Every variant's retention at every level above the lowest: `tas 2x 0.523 [0.509, 0.538]`.
pub fn retained(wl: &WorkloadModel) -> Vec<String> {
    wl.retention
        .iter()
        .flat_map(|r| {
            r.rows.iter().map(move |row| match &row.effect {
                Some(e) => format!(
                    "{} {} {}",
                    r.variant,
                    fmt_level(row.level),
                    fmt_ratio_interval(e.ratio, e.low, e.high)
                ),
                None => format!("{} {} -", r.variant, fmt_level(row.level)),
            })
        })
        .collect()
}

/// Every non-baseline variant's retention against the baseline's, with its interval and
/// whether it excludes 1: `mcs 2x 0.912 [0.850, 0.978] less`.
pub fn against_baseline(wl: &WorkloadModel) -> Vec<String> {
    wl.retention
        .iter()
        .flat_map(|r| {
            r.rows.iter().filter_map(move |row| {
                let e = row.against_baseline.as_ref()?;
                let word = if e.low > 1.0 {
                    " more"
                } else if e.high < 1.0 {
                    " less"
                } else {
                    ""
                };
                Some(format!(
                    "{} {} {}{word}",
                    r.variant,
                    fmt_level(row.level),
                    fmt_ratio_interval(e.ratio, e.low, e.high)
                ))
            })
        })
        .collect()
}

/// A row's conclusion in words, with its margin where it is equivalent (or differs within
/// it), its direction and size where it differs, and the margin's being post hoc where it
/// was given after the data.
fn conclusion(model: &Model, wl: &WorkloadModel, r: &Row) -> (String, Option<String>) {
    let margin = fmt_margin(model.margin);
    let post_hoc = r.margin_post_hoc.then(|| format!("post hoc margin ±{margin} %"));
    match (r.conclusion, &r.effect) {
        (Conclusion::Differs, Some(e)) => {
            let up = e.ratio > 1.0;
            let better = up == (wl.better == Better::Higher);
            let pct = (e.ratio - 1.0).abs() * 100.0;
            let mut so = format!("{pct:.1} % {}", if better { "better" } else { "worse" });
            match (r.within_margin, &post_hoc) {
                (true, Some(_)) => so.push_str(&format!(", within the post hoc margin ±{margin} %")),
                (true, None) => so.push_str(&format!(", within ±{margin} %")),
                (false, Some(p)) => so.push_str(&format!(" ({p})")),
                (false, None) => {}
            }
            ("differs".into(), Some(so))
        }
        (Conclusion::Equivalent, _) => match post_hoc {
            Some(p) => (format!("equivalent ({p})"), None),
            None => (format!("equivalent within ±{margin} %"), None),
        },
        (c, _) => match post_hoc.filter(|_| r.effect.is_some()) {
            Some(p) => (format!("{} ({p})", c.words()), None),
            None => (c.words().to_string(), None),
        },
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
    use crate::journal::{Journal, SELF_CHECK_REASON, Slot};
    use crate::report::{Format, ReportOptions};
    use crate::testing::{journal, record, render};

    fn verdict_of(j: &Journal, opts: &ReportOptions) -> String {
        let text = render(j, Format::Table, opts).unwrap();
        for line in text.lines() {
            assert!(
                line.chars().count() <= 120,
                "{} columns: {line}",
                line.chars().count()
            );
        }
        text[text.find("── verdict ").expect("a verdict")..].to_string()
    }

    #[test]
    fn the_verdict_closes_the_table_report_within_the_width() {
        let verdict = verdict_of(&journal(), &ReportOptions::default());
        assert!(
            verdict.contains("hackbench (seconds, lower is better): each variant / base\n"),
            "{verdict}"
        );
        // What its intervals are, first: each row's at its Holm step (table.rs's test derives
        // them with scipy): 1 - 0.05/4 … 1 - 0.05/2 over the fixture's 4 comparisons.
        assert!(
            verdict.contains(
                "interval: 97.5–98.8 %, adjusted for 4 comparisons (Holm, α 0.05; each row at its step's level)\n\
                 equivalent: the row's 97.5 % interval within ±5 % (0.952–1.050), both one-sided tests at its step's level\n"
            ),
            "{verdict}"
        );
        // hackbench 0.5x differs (lower is better, so 10 % better) at 98.3 %; base's one empty
        // slot (a failed run) is said on the row, the key says what the counts are.
        assert!(
            verdict.contains(
                "  0.5x  patched  0.900 [0.846, 0.958]  98.3 %  differs: 10.0 % better  3+3 bring-ups; rejected 0/3 · 0/4; \
                 empty 0 · 1\n"
            ) && verdict.contains("  1x    patched  1.025 [0.890, 1.180]  97.5 %  not concluded           3+3 bring-ups; rejected 0/3 · 0/3\n"),
            "{verdict}"
        );
        assert!(
            verdict.contains("rejected: attempts the self-checks refused"),
            "{verdict}"
        );
        // lock 1x differs, higher is better; nothing lost there, so no counts.
        assert!(
            verdict.contains(
                "  1x    patched  1.601 [1.401, 1.829]  98.8 %  differs: 60.1 % better  3+3 bring-ups\n"
            ),
            "{verdict}"
        );
        assert!(
            verdict.contains("retention (seconds at each level / at 0.5x): base 1x 1.999 [1.795, 2.226]"),
            "{verdict}"
        );
    }

    /// Two variants sharing guests, `rounds` rounds at 1x of base `b(r)` and patched `v(r)`.
    fn shared(rounds: u32, b: impl Fn(u32) -> f64, v: impl Fn(u32) -> f64) -> Journal {
        let mut j = journal();
        j.header.levels = vec![1.0];
        j.header.workloads.retain(|w, _| w == "lock-ticket");
        j.runs.clear();
        for r in 0..rounds {
            for (variant, x) in [("base", b(r)), ("patched", v(r))] {
                let mut rec = record(variant, 1.0, "lock-ticket", r, &[("ops_per_sec", x)]);
                rec.slot = Slot {
                    boot: 0,
                    bring_up: 1,
                    seq: 0,
                    block: 0,
                };
                j.runs.push(rec);
            }
        }
        j
    }

    const WOBBLE: [f64; 6] = [0.0, 1.0, -1.0, 0.5, -0.5, 0.2];

    /// A difference shown smaller than the margin reads "differs, within ±5 %".
    #[test]
    fn a_sure_small_difference_reads_differs_within_the_margin() {
        // scipy: d = log(v / b) of the rounds below; exp(mean(d)) = 1.02050987256371,
        //   exp(t.interval(0.95, 5, mean(d), sem(d))) = (1.01992375, 1.02109634), and the 90 %
        //   interval (1.02005039, 1.02096957) lies within 1/1.05..1.05.
        let w = |r: u32| 1.0 + 0.004 * WOBBLE[r as usize % 6];
        let j = shared(
            6,
            |r| 1000.0 * w(r),
            |r| 1020.0 * w(r) * (1.0 + 0.001 * f64::from(r % 2)),
        );
        let verdict = verdict_of(&j, &ReportOptions::default());
        assert!(
            verdict.contains(
                "  1x  patched  1.021 [1.020, 1.021]  95 %  differs: 2.1 % better, within ±5 %  6 rounds\n"
            ),
            "{verdict}"
        );
        // One comparison, no looks: tested at α itself; equivalence by its 90 % interval.
        assert!(
            verdict.contains("interval: 95 %, adjusted for 1 comparison (Holm, α 0.05; each row at its step's level)\nequivalent: the row's 90 %"),
            "{verdict}"
        );
    }

    /// `report --margin` other than the one the sweep stopped on marks every conclusion post
    /// hoc, and the verdict says so once; the journaled margin changes nothing.
    #[test]
    fn a_margin_given_after_the_data_is_said_post_hoc() {
        let w = |r: u32| 1.0 + 0.004 * WOBBLE[r as usize % 6];
        let mut j = shared(
            6,
            |r| 1000.0 * w(r),
            |r| 1000.0 * w(r) * (1.0 + 0.002 * f64::from(r % 2)),
        );
        (j.header.margin, j.header.looks) = (Some(0.05), Some(4));
        let at = |m: Option<f64>| ReportOptions {
            margin: m,
            ..ReportOptions::default()
        };
        let verdict = verdict_of(&j, &at(Some(0.03)));
        assert!(
            verdict.contains(
                "margin ±3 % given after the data: the sweep fixed ±5 % before them and stopped on its conclusions at \
                 it; every\n  conclusion below is post hoc\n"
            ),
            "{verdict}"
        );
        assert!(
            verdict.contains("  equivalent (post hoc margin ±3 %)  6 rounds"),
            "{verdict}"
        );
        assert_eq!(verdict_of(&j, &at(Some(0.05))), verdict_of(&j, &at(None)));
        assert!(!verdict_of(&j, &at(None)).contains("post hoc"));
        // Every format says it.
        for format in [Format::Md, Format::Html] {
            let text = render(&j, format, &at(Some(0.03))).unwrap();
            assert!(text.contains("given after the data"), "{format:?}");
        }
        let json = render(&j, Format::Json, &at(Some(0.03))).unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["margin_post_hoc"]["fixed"], 0.05);
        assert_eq!(
            v["workloads"][0]["comparisons"][0]["rows"][0]["margin_post_hoc"],
            true
        );
    }

    /// Sides rejected at clearly different rates: the row is not concluded, says why under it,
    /// and carries each side's counts; within 120 columns with long names.
    #[test]
    fn unequal_rejections_are_said_on_the_row() {
        let mut j = shared(6, |r| 1000.0 + f64::from(r), |r| 1300.0 + 2.0 * f64::from(r));
        let long = "pticket-with-a-long-name-for-width";
        for r in &mut j.runs {
            if r.variant == "patched" {
                r.variant = long.into();
            }
        }
        j.header.variants = vec!["base".into(), long.into()];
        for i in 0..9 {
            let mut r = record(long, 1.0, "lock-ticket", i % 6, &[]);
            (r.attempt, r.ok) = (2 + i / 6, false);
            r.slot = j.runs[0].slot;
            r.error = Some(format!("{SELF_CHECK_REASON}hold_as_asked: ran x1.4 the asked"));
            j.runs.push(r);
        }
        let verdict = verdict_of(&j, &ReportOptions::default());
        // scipy: fisher_exact([[9, 6], [0, 6]]).pvalue → 0.018575851393188854; the ratio
        //   exp(mean(log(v / b))) = 1.3017430659735683, its 95 % interval (1.3003763, 1.30311127).
        assert!(
            verdict.contains(&format!(
                "  1x  {long}  1.302 [1.300, 1.303]  95 %  not concluded  6 rounds; rejected 9/15 · 0/6\n      (not concluded: \
                 self-checks rejected 9/15 attempts of {long} vs 0/6 of base: Fisher p\n       = 0.019; its tests alone: differs)\n"
            )),
            "{verdict}"
        );
    }
}
