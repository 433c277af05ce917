//! Reports rendered from a journal: one file per format behind one trait ([`Exporter`]).
//!
//! Every format renders the same [`Model`](crate::stats::cells::Model), built from the journal
//! alone by [`crate::stats::cells::build`].

pub mod csv;
pub mod html;
pub mod json;
pub mod markdown;
pub mod plot;
pub mod table;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::stats::cells::{Comparison, Model, WorkloadModel, build};
use crate::stats::compare::DEFAULT_ALPHA;
use crate::sweep::journal::{Journal, RunRecord};

/// Output format of `ocrig report` / `ocrig compare`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Terminal tables (comfy-table), in the published layout.
    Table,
    /// Markdown tables, for a review or a cover letter.
    Md,
    /// One row per workload × variant × level.
    Csv,
    /// The full comparison model.
    Json,
    /// One self-contained HTML file with inline SVG plots.
    Html,
}

impl Format {
    /// File name [`write_all`] uses for this format.
    pub fn file_name(self) -> &'static str {
        match self {
            Format::Table => "report.txt",
            Format::Md => "report.md",
            Format::Csv => "report.csv",
            Format::Json => "report.json",
            Format::Html => "report.html",
        }
    }

    fn exporter(self) -> Box<dyn Exporter> {
        match self {
            Format::Table => Box::new(table::TableExporter),
            Format::Md => Box::new(markdown::MarkdownExporter),
            Format::Csv => Box::new(csv::CsvExporter),
            Format::Json => Box::new(json::JsonExporter),
            Format::Html => Box::new(html::HtmlExporter),
        }
    }
}

/// What to compute the report with.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportOptions {
    /// Significance level of the Welch tests (`p < alpha` is significant).
    pub alpha: f64,
    /// Compare this metric instead of each workload's headline metric.
    pub metric: Option<String>,
    /// Names of the two sides of [`compare`] (A, B), e.g. the result directories' names.
    pub compare_names: Option<(String, String)>,
}

impl Default for ReportOptions {
    fn default() -> Self {
        Self {
            alpha: DEFAULT_ALPHA,
            metric: None,
            compare_names: None,
        }
    }
}

/// One output format.
pub trait Exporter {
    fn render(&self, model: &Model) -> anyhow::Result<String>;
}

/// Builds the comparison model of `journal`.
pub fn model(journal: &Journal, opts: &ReportOptions) -> Model {
    build(journal, opts.alpha, opts.metric.as_deref())
}

/// Renders `journal` in `format`.
pub fn render(journal: &Journal, format: Format, opts: &ReportOptions) -> anyhow::Result<String> {
    format.exporter().render(&model(journal, opts))
}

/// Writes report.md, report.csv, report.json and report.html into `dir` (the results directory),
/// returning their paths.
pub fn write_all(journal: &Journal, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    write_all_with(journal, dir, &ReportOptions::default())
}

/// [`write_all`] with explicit options.
pub fn write_all_with(journal: &Journal, dir: &Path, opts: &ReportOptions) -> anyhow::Result<Vec<PathBuf>> {
    let model = model(journal, opts);
    [Format::Md, Format::Csv, Format::Json, Format::Html]
        .into_iter()
        .map(|format| {
            let path = dir.join(format.file_name());
            let text = format
                .exporter()
                .render(&model)
                .with_context(|| format!("rendering {format:?} report"))?;
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            Ok(path)
        })
        .collect()
}

/// `ocrig compare A B`: two result directories of the same matrix, A as base and B as patched
/// (the mmtests compare-kernels use case). The sides are named by
/// [`ReportOptions::compare_names`] (e.g. the directories' names), else by their variant when
/// each journal has a single, different one, else `A` and `B`. See [`merge`].
pub fn compare(a: &Journal, b: &Journal, format: Format, opts: &ReportOptions) -> anyhow::Result<String> {
    let (an, bn) = opts.compare_names.clone().unwrap_or_else(|| default_names(a, b));
    render(&merge(a, b, &an, &bn)?, format, opts)
}

fn default_names(a: &Journal, b: &Journal) -> (String, String) {
    match (a.header.variants.as_slice(), b.header.variants.as_slice()) {
        ([x], [y]) if x != y => (x.clone(), y.clone()),
        _ => ("A".into(), "B".into()),
    }
}

/// Merges two journals of the same matrix into one whose baseline is A's.
///
/// Each side's variants are renamed after the side: a journal with one variant contributes
/// variant `name`; one with several contributes `name/variant` for each (A's baseline variant is
/// the merged baseline). Refuses journals whose levels or workloads (ids, metric, direction)
/// differ, naming the difference.
pub fn merge(a: &Journal, b: &Journal, a_name: &str, b_name: &str) -> anyhow::Result<Journal> {
    check_same_matrix(a, b, a_name, b_name)?;
    let (a_name, b_name) = if a_name == b_name {
        (format!("{a_name} (A)"), format!("{b_name} (B)"))
    } else {
        (a_name.to_string(), b_name.to_string())
    };
    let rename = |j: &Journal, side: &str| -> BTreeMap<String, String> {
        let mut variants = j.header.variants.clone();
        for r in &j.runs {
            if !variants.contains(&r.variant) {
                variants.push(r.variant.clone());
            }
        }
        let single = variants.len() <= 1;
        variants
            .into_iter()
            .map(|v| {
                (
                    v.clone(),
                    if single {
                        side.to_string()
                    } else {
                        format!("{side}/{v}")
                    },
                )
            })
            .collect()
    };
    let (ra, rb) = (rename(a, &a_name), rename(b, &b_name));
    let mut header = a.header.clone();
    header.scenario = format!("{} vs {}", a_name, b_name);
    header.baseline = ra
        .get(&a.header.baseline)
        .cloned()
        .unwrap_or_else(|| a_name.clone());
    let mut variants = vec![header.baseline.clone()];
    for v in ra.values().chain(rb.values()) {
        if !variants.contains(v) {
            variants.push(v.clone());
        }
    }
    header.variants = variants;
    let kernels = |j: &Journal, map: &BTreeMap<String, String>| -> Vec<(String, String)> {
        j.header
            .kernels
            .iter()
            .filter_map(|(v, k)| Some((map.get(v)?.clone(), k.clone())))
            .collect()
    };
    header.kernels = kernels(a, &ra).into_iter().chain(kernels(b, &rb)).collect();
    let relabel = |r: &RunRecord, map: &BTreeMap<String, String>| RunRecord {
        variant: map[&r.variant].clone(),
        ..r.clone()
    };
    let runs = a
        .runs
        .iter()
        .map(|r| relabel(r, &ra))
        .chain(b.runs.iter().map(|r| relabel(r, &rb)))
        .collect();
    Ok(Journal { header, runs })
}

fn check_same_matrix(a: &Journal, b: &Journal, a_name: &str, b_name: &str) -> anyhow::Result<()> {
    use crate::stats::cells::same_level;
    let (la, lb) = (&a.header.levels, &b.header.levels);
    let only = |x: &[f64], y: &[f64]| -> Vec<String> {
        x.iter()
            .filter(|l| !y.iter().any(|m| same_level(**l, *m)))
            .map(|l| fmt_level(*l))
            .collect()
    };
    let (oa, ob) = (only(la, lb), only(lb, la));
    if !oa.is_empty() || !ob.is_empty() {
        anyhow::bail!(
            "{a_name} and {b_name} ran different overcommit levels: only in {a_name}: [{}]; only in {b_name}: [{}]",
            oa.join(", "),
            ob.join(", ")
        );
    }
    let (wa, wb) = (&a.header.workloads, &b.header.workloads);
    let oa: Vec<&str> = wa
        .keys()
        .filter(|k| !wb.contains_key(*k))
        .map(String::as_str)
        .collect();
    let ob: Vec<&str> = wb
        .keys()
        .filter(|k| !wa.contains_key(*k))
        .map(String::as_str)
        .collect();
    if !oa.is_empty() || !ob.is_empty() {
        anyhow::bail!(
            "{a_name} and {b_name} ran different workloads: only in {a_name}: [{}]; only in {b_name}: [{}]",
            oa.join(", "),
            ob.join(", ")
        );
    }
    for (id, x) in wa {
        let y = &wb[id];
        if x.metric != y.metric || x.better != y.better {
            anyhow::bail!(
                "workload {id} reports differently: {a_name}: {} ({:?} is better), {b_name}: {} ({:?} is better)",
                x.metric,
                x.better,
                y.metric,
                y.better
            );
        }
    }
    Ok(())
}

// ---- formatting shared by the text formats ----

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
fn table_decimals(values: impl Iterator<Item = f64>) -> usize {
    decimals_for(values.filter(|v| v.is_finite()).fold(0.0, |m, v| m.max(v.abs())))
}

fn fmt_opt(x: Option<f64>, decimals: usize) -> String {
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

/// `seconds, lower is better`.
pub fn describe_metric(wl: &WorkloadModel) -> String {
    use crate::sweep::journal::Better;
    let dir = match wl.better {
        Better::Higher => "higher is better",
        Better::Lower => "lower is better",
    };
    format!("{}, {dir}", wl.metric)
}

/// A comparison table as rows of text cells, shared by the terminal, Markdown and HTML formats:
/// header `oc | base | stdev | <variant> | stdev | %improvement | p`, one row per level, then a
/// `gmean` row.
pub fn comparison_rows(model: &Model, cmp: &Comparison) -> Vec<Vec<String>> {
    let mut rows = vec![vec![
        "oc".to_string(),
        model.baseline.clone(),
        "stdev".into(),
        cmp.variant.clone(),
        "stdev".into(),
        "%improvement".into(),
        "p".into(),
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
            fmt_p(r.welch.map(|w| w.p), r.significant),
        ]);
    }
    if let Some(g) = &cmp.geomean {
        rows.push(vec![
            "gmean".into(),
            fmt_fixed(g.base, d),
            String::new(),
            fmt_fixed(g.variant, d),
            String::new(),
            fmt_pct(Some(g.improvement_pct)),
            String::new(),
        ]);
    }
    rows
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

/// Fairness/contention table for lock workloads:
/// `oc | <v> contention | ... | <v> jain | ...`, one column pair per variant.
pub fn fairness_rows(wl: &WorkloadModel) -> Vec<Vec<String>> {
    let mut head = vec!["oc".to_string()];
    head.extend(wl.series.iter().map(|s| format!("{} contention", s.variant)));
    head.extend(wl.series.iter().map(|s| format!("{} jain", s.variant)));
    let mut rows = vec![head];
    let levels: Vec<f64> = wl
        .series
        .first()
        .map(|s| s.cells.iter().map(|c| c.level).collect())
        .unwrap_or_default();
    for (i, level) in levels.into_iter().enumerate() {
        let mut row = vec![fmt_level(level)];
        row.extend(wl.series.iter().map(|s| fmt_frac(s.cells[i].contention_rate)));
        row.extend(wl.series.iter().map(|s| fmt_frac(s.cells[i].jain)));
        rows.push(row);
    }
    rows
}

/// Aggregate of the other guests (guest ≥ 1) next to guest 0, when any other guest reported:
/// `oc | <v> guest 0 | <v> others | ...`.
pub fn other_guest_rows(wl: &WorkloadModel) -> Option<Vec<Vec<String>>> {
    if !wl
        .series
        .iter()
        .flat_map(|s| &s.cells)
        .any(|c| c.other_guests.is_some())
    {
        return None;
    }
    let mut head = vec!["oc".to_string()];
    for s in &wl.series {
        head.extend([
            format!("{} guest 0", s.variant),
            format!("{} other guests", s.variant),
            "n".into(),
        ]);
    }
    let mut rows = vec![head];
    let cells = || wl.series.iter().flat_map(|s| &s.cells);
    let d = table_decimals(
        cells()
            .flat_map(|c| [&c.summary, &c.other_guests])
            .flatten()
            .map(|s| s.mean),
    );
    let levels: Vec<f64> = wl.series[0].cells.iter().map(|c| c.level).collect();
    for (i, level) in levels.into_iter().enumerate() {
        let mut row = vec![fmt_level(level)];
        for s in &wl.series {
            let c = &s.cells[i];
            row.extend([
                fmt_opt(c.summary.as_ref().map(|s| s.mean), d),
                fmt_opt(c.other_guests.as_ref().map(|s| s.mean), d),
                c.other_guests
                    .as_ref()
                    .map_or_else(|| "0".into(), |s| s.n.to_string()),
            ]);
        }
        rows.push(row);
    }
    Some(rows)
}

/// Footnotes for a workload: sample counts, failures and outliers.
pub fn notes(model: &Model, wl: &WorkloadModel) -> Vec<String> {
    let mut notes = Vec::new();
    let counts: Vec<String> = wl
        .series
        .iter()
        .map(|s| {
            let ns: Vec<usize> = s
                .cells
                .iter()
                .map(|c| c.summary.as_ref().map_or(0, |s| s.n))
                .collect();
            let (lo, hi) = (
                ns.iter().min().copied().unwrap_or(0),
                ns.iter().max().copied().unwrap_or(0),
            );
            if lo == hi {
                format!("{} n={lo}", s.variant)
            } else {
                format!("{} n={lo}..{hi}", s.variant)
            }
        })
        .collect();
    notes.push(format!(
        "runs per cell: {}; p: Welch's t-test, * = p < {}",
        counts.join(", "),
        model.alpha
    ));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::cells::tests::journal;

    #[test]
    fn number_formats() {
        let fmt_num = |x: f64| fmt_fixed(x, decimals_for(x));
        assert_eq!(fmt_num(18.9326), "18.9326");
        assert_eq!(fmt_num(20499.375), "20499.4");
        assert_eq!(fmt_num(1234567.8), "1234568");
        assert_eq!(fmt_num(0.25), "0.250000");
        assert_eq!(fmt_level(0.5), "0.5x");
        assert_eq!(fmt_level(2.0), "2x");
        assert_eq!(fmt_pct(Some(-6.000232403367732)), "-6.00%");
        assert_eq!(fmt_p(Some(0.0123), Some(true)), "0.0123 *");
        assert_eq!(fmt_p(Some(1e-6), Some(true)), "<0.0001 *");
    }

    #[test]
    fn merge_names_sides_and_refuses_other_matrices() {
        let (mut a, b) = (journal(), journal());
        a.header.kernels = BTreeMap::from([("patched".into(), "6.8.0-pv".into())]);
        let m = merge(&a, &b, "v6.8", "v6.9").unwrap();
        assert_eq!(
            m.header.kernels,
            BTreeMap::from([("v6.8/patched".into(), "6.8.0-pv".into())])
        );
        assert_eq!(m.header.baseline, "v6.8/base");
        assert_eq!(
            m.header.variants,
            ["v6.8/base", "v6.8/patched", "v6.9/base", "v6.9/patched"]
        );
        assert_eq!(m.runs.len(), a.runs.len() * 2);

        let mut single = journal();
        single.header.variants = vec!["base".into()];
        single.runs.retain(|r| r.variant == "base");
        let m = merge(&single, &single, "old", "new").unwrap();
        assert_eq!(
            (m.header.baseline.as_str(), m.header.variants.clone()),
            ("old", vec!["old".into(), "new".into()])
        );
        let opts = ReportOptions {
            compare_names: Some(("old".into(), "new".into())),
            ..Default::default()
        };
        let text = compare(&single, &single, Format::Table, &opts).unwrap();
        assert!(text.contains("hackbench: new vs old"), "{text}");
        let text = compare(&single, &single, Format::Table, &ReportOptions::default()).unwrap();
        assert!(text.contains("hackbench: B vs A"), "{text}");
        let mut renamed = single.clone();
        renamed.header.variants = vec!["v6.9".into()];
        renamed.header.baseline = "v6.9".into();
        renamed.runs.iter_mut().for_each(|r| r.variant = "v6.9".into());
        let text = compare(&single, &renamed, Format::Table, &ReportOptions::default()).unwrap();
        assert!(text.contains("hackbench: v6.9 vs base"), "{text}");

        let mut other = journal();
        other.header.levels = vec![0.5, 2.0];
        let e = merge(&a, &other, "A", "B").unwrap_err().to_string();
        assert!(
            e.contains("only in A: [1x]") && e.contains("only in B: [2x]"),
            "{e}"
        );
        let mut other = journal();
        other.header.workloads.remove("hackbench");
        let e = merge(&a, &other, "A", "B").unwrap_err().to_string();
        assert!(e.contains("different workloads: only in A: [hackbench]"), "{e}");
    }

    #[test]
    fn write_all_writes_four_files() {
        let dir = tempfile::tempdir().unwrap();
        let paths = write_all(&journal(), dir.path()).unwrap();
        let names: Vec<String> = paths
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into())
            .collect();
        assert_eq!(names, ["report.md", "report.csv", "report.json", "report.html"]);
        for p in paths {
            assert!(std::fs::metadata(p).unwrap().len() > 0);
        }
    }
}
