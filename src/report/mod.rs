//! Reports rendered from a journal: one file per format behind one trait ([`Exporter`]).
//!
//! Every format renders the same [`ReportInput`], built once from the journal's digests (one
//! pass of the accounting rule): the [`Model`](crate::stats::cells::Model) and what is shown
//! beside it (kernel symbols, the hosts' agreement, the guests' own words, timelines).

pub mod csv;
pub mod flame;
pub mod hosts;
pub mod html;
pub mod input;
pub mod json;
pub mod kernel_symbols;
pub mod kernels;
pub mod markdown;
pub mod plot;
pub mod table;
pub mod timeline;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;

#[cfg(test)]
use crate::journal::Journal;
use crate::journal::SweepHeader;
use crate::stats::cells::{Cell, Comparison, Conclusion, Model, WorkloadModel};
use crate::stats::compare::DEFAULT_ALPHA;
use crate::stats::digest::Digested;
#[cfg(test)]
use crate::stats::digest::RunDigest;
use crate::stats::effect::Effect;
pub use input::ReportInput;

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
    /// Equivalence margin (None: the scenario's, else [`crate::stats::effect::DEFAULT_MARGIN`]).
    pub margin: Option<f64>,
}

impl Default for ReportOptions {
    fn default() -> Self {
        Self {
            alpha: DEFAULT_ALPHA,
            metric: None,
            compare_names: None,
            margin: None,
        }
    }
}

/// One output format.
pub trait Exporter {
    fn render(&self, input: &ReportInput) -> anyhow::Result<String>;
}

/// Builds the comparison model of `journal`.
#[cfg(test)] // reports build it from the digests (model_digested)
pub fn model(journal: &Journal, opts: &ReportOptions) -> Model {
    model_digested(&Digested::of(journal), opts)
}

/// [`model`] from a journal's digests.
pub fn model_digested(journal: &Digested, opts: &ReportOptions) -> Model {
    ReportInput::build(journal, opts).model
}

#[cfg(test)]
/// Renders `journal` in `format`.
pub fn render(journal: &Journal, format: Format, opts: &ReportOptions) -> anyhow::Result<String> {
    render_digested(&Digested::of(journal), format, opts)
}

/// [`render`] from a journal's digests ([`Digested::read`] streams a journal file into them).
pub fn render_digested(journal: &Digested, format: Format, opts: &ReportOptions) -> anyhow::Result<String> {
    format.exporter().render(&ReportInput::build(journal, opts))
}

/// What each variant's guest kernels said about their PV features (`PV spinlocks …`,
/// `kvm-guest: …`), so a variant that did not take effect shows; empty without guests.
pub fn kernel_words_text(journal: &Digested) -> String {
    let words = crate::stats::explain::kernel_words_of(journal.runs.iter().filter_map(|r| {
        let (guests, lines, _) = r.pv_words.as_deref()?;
        Some((&*r.variant, *guests, lines.iter()))
    }));
    if words.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nGuest kernels' own words on PV features, per variant:\n");
    for v in &journal.header.variants {
        for line in words.get(v).into_iter().flatten() {
            out.push_str(&format!("  {v}: {line}\n"));
        }
    }
    if journal.header.accel == "tcg" {
        out.push_str(
            "  (under TCG the guests see no KVM PV features: PV-spinlock variants are expected to match — a null result)\n",
        );
    }
    out
}

/// Writes report.md, report.csv, report.json and report.html into `dir` (the results directory),
/// returning their paths.
pub fn write_all(journal: &Digested, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    write_all_with(journal, dir, &ReportOptions::default())
}

/// [`write_all`] with explicit options.
pub fn write_all_with(journal: &Digested, dir: &Path, opts: &ReportOptions) -> anyhow::Result<Vec<PathBuf>> {
    let input = ReportInput::build(journal, opts);
    let mut written = Vec::new();
    for format in [Format::Md, Format::Csv, Format::Json, Format::Html] {
        let path = dir.join(format.file_name());
        let text = format
            .exporter()
            .render(&input)
            .with_context(|| format!("rendering {format:?} report"))?;
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    written.extend(flame::write(input.profiles(), input.baseline(), dir)?);
    Ok(written)
}

/// `ocrig compare A B`: two result directories of the same matrix, A as base and B as patched
/// (the mmtests compare-kernels use case). The sides are named by
/// [`ReportOptions::compare_names`] (e.g. the directories' names), else by their variant when
/// each journal has a single, different one, else `A` and `B`. See [`merge`].
/// Takes both journals' digests: the merged journal is made of them, not of copies.
pub fn compare(a: Digested, b: Digested, format: Format, opts: &ReportOptions) -> anyhow::Result<String> {
    let (an, bn) = opts
        .compare_names
        .clone()
        .unwrap_or_else(|| default_names(&a, &b));
    let merged = merge(a, b, &an, &bn)?;
    let mut input = ReportInput::build(&merged, opts);
    input.compare_pairs = kernel_symbols::compare_pairs(&merged, &an, &bn);
    format.exporter().render(&input)
}

fn default_names(a: &Digested, b: &Digested) -> (String, String) {
    match (a.header.variants.as_slice(), b.header.variants.as_slice()) {
        ([x], [y]) if x != y => (x.clone(), y.clone()),
        _ => ("A".into(), "B".into()),
    }
}

/// Added to B's boot groups and blocks in [`merge`], so none is taken for one of A's.
const OTHER_SWEEP: u32 = 1 << 24;

/// Merges two journals of the same matrix into one whose baseline is A's.
///
/// Each side's variants are renamed after the side: a journal with one variant contributes
/// variant `name`; one with several contributes `name/variant` for each (A's baseline variant is
/// the merged baseline). Refuses journals whose levels or workloads (ids, metric, direction)
/// differ, naming the difference.
pub fn merge(a: Digested, b: Digested, a_name: &str, b_name: &str) -> anyhow::Result<Digested> {
    check_same_matrix(&a.header, &b.header, a_name, b_name)?;
    let (a_name, b_name) = if a_name == b_name {
        (format!("{a_name} (A)"), format!("{b_name} (B)"))
    } else {
        (a_name.to_string(), b_name.to_string())
    };
    let rename = |j: &Digested, side: &str| -> BTreeMap<String, Arc<str>> {
        let mut variants = j.header.variants.clone();
        let mut seen: std::collections::HashSet<&str> =
            j.header.variants.iter().map(String::as_str).collect();
        for r in &j.runs {
            if seen.insert(&r.variant) {
                variants.push(r.variant.to_string());
            }
        }
        let single = variants.len() <= 1;
        variants
            .into_iter()
            .map(|v| {
                let to = if single {
                    side.to_string()
                } else {
                    format!("{side}/{v}")
                };
                (v, Arc::from(to))
            })
            .collect()
    };
    let (ra, rb) = (rename(&a, &a_name), rename(&b, &b_name));
    let mut header = a.header.clone();
    header.scenario = format!("{} vs {}", a_name, b_name);
    header.baseline = ra
        .get(&a.header.baseline)
        .map(|v| v.to_string())
        .unwrap_or_else(|| a_name.clone());
    let mut variants = vec![header.baseline.clone()];
    for v in ra.values().chain(rb.values()) {
        if !variants.iter().any(|x| **x == **v) {
            variants.push(v.to_string());
        }
    }
    header.variants = variants;
    let names = |map: &BTreeMap<String, Arc<str>>| -> BTreeMap<String, String> {
        map.iter().map(|(k, v)| (k.clone(), v.to_string())).collect()
    };
    let (na, nb) = (names(&ra), names(&rb));
    let kernels = |j: &Digested, map: &BTreeMap<String, String>| -> Vec<(String, String)> {
        j.header
            .kernels
            .iter()
            .filter_map(|(v, k)| Some((map.get(v)?.clone(), k.clone())))
            .collect()
    };
    header.kernels = kernels(&a, &na).into_iter().chain(kernels(&b, &nb)).collect();
    header.kernel_identity = kernels::renamed(&a.header.kernel_identity, &na)
        .chain(kernels::renamed(&b.header.kernel_identity, &nb))
        .collect();
    let mut runs = a.runs;
    for r in runs.iter_mut() {
        r.variant = ra[&*r.variant].clone();
    }
    // B's digests move over from its end, its room given back as it empties (both journals
    // of a million records each are most of the memory), then are put back in order.
    let from = runs.len();
    let mut b_runs = b.runs;
    runs.reserve_exact(b_runs.len());
    while let Some(mut r) = b_runs.pop() {
        r.variant = rb[&*r.variant].clone();
        // B's guests and blocks are not A's: a comparison across the two sweeps pairs nothing
        // and is unpaired over bring-ups (`stats::effect`), and a B guest set's warm-ups are
        // never taken for an A one's.
        r.slot = r.slot.map(|(boot, bring_up)| (boot + OTHER_SWEEP, bring_up));
        r.block_1 = r.block_1.map(|b| b.saturating_add(OTHER_SWEEP));
        runs.push(r);
        if b_runs.len().is_multiple_of(1 << 16) {
            b_runs.shrink_to_fit();
        }
    }
    runs[from..].reverse();
    Ok(Digested { header, runs })
}

fn check_same_matrix(a: &SweepHeader, b: &SweepHeader, a_name: &str, b_name: &str) -> anyhow::Result<()> {
    use crate::stats::cells::same_level;
    let (la, lb) = (&a.levels, &b.levels);
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
    let (wa, wb) = (&a.workloads, &b.workloads);
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
    use crate::journal::Better;
    let dir = match wl.better {
        Better::Higher => "higher is better",
        Better::Lower => "lower is better",
    };
    format!("{}, {dir}", wl.metric)
}

/// A comparison table as rows of text cells, shared by the terminal, Markdown and HTML formats:
/// header `oc | base | stdev | <variant> | stdev | %improvement | ratio [95% CI] | p (Holm) |
/// conclusion`, one row per level, then a `gmean` row. The ratio is the variant's over the
/// baseline's, estimated over the units the design replicated (rounds of shared guests,
/// bring-up pairs of variants with their own: [`conclusion_notes`] names them, so the table
/// stays 120 columns wide); `conclusion` is drawn from the Holm-adjusted tests
/// ([`crate::stats::effect`]).
pub fn comparison_rows(model: &Model, cmp: &Comparison) -> Vec<Vec<String>> {
    let mut rows = vec![vec![
        "oc".to_string(),
        model.baseline.clone(),
        "stdev".into(),
        cmp.variant.clone(),
        "stdev".into(),
        "%improvement".into(),
        "ratio [95% CI]".into(),
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
            fmt_ratio(r.effect.as_ref()),
            fmt_p(r.p_holm, Some(r.conclusion == Conclusion::Differs)),
            r.conclusion.words().into(),
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

/// `0.952 [0.930, 0.974]`: a ratio and its interval; `-` when none was estimated.
pub fn fmt_ratio(e: Option<&Effect>) -> String {
    e.map_or_else(
        || "-".into(),
        |e| format!("{:.3} [{:.3}, {:.3}]", e.ratio, e.low, e.high),
    )
}

/// How a workload's comparisons were concluded, and each row's caveat (a lost pairing, why
/// a row was not tested).
pub fn conclusion_notes(model: &Model, wl: &WorkloadModel) -> Vec<String> {
    if wl.comparisons.is_empty() {
        return Vec::new();
    }
    let mut notes = vec![format!(
        "ratio = variant / {} over the design's units (rounds of variants sharing guests, bring-up pairs\n    \
         of variants with their own): geometric mean with a {:.0}% t interval; p (Holm) over the report's\n    \
         {} tested comparisons{}; differs: p (Holm) < {} (*); equivalent: both one-sided tests against\n    \
         ±{}% below {} after Holm; otherwise not concluded",
        model.baseline,
        crate::stats::effect::CONFIDENCE * 100.0,
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
        model.alpha,
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
    }
    notes
}

/// A margin fraction as a percentage without trailing zeros: `5`, `2.5`.
fn fmt_margin(m: f64) -> String {
    let s = format!("{:.2}", m * 100.0);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
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

/// The lines about the sweep as a whole that close every text format: attempts the
/// self-checks rejected, attempts the host disturbed, and how steady the host was.
pub fn sweep_lines(model: &Model) -> Vec<String> {
    self_check_line(model)
        .into_iter()
        .chain(disturbed_line(model))
        .chain(unjudged_line(model))
        .chain(host_probe_lines(model))
        .collect()
}

/// How steady the host's own speed, and its hand-over between two of its CPUs, were before
/// the sweep (probed then), each when it was probed.
fn host_probe_lines(model: &Model) -> impl Iterator<Item = String> + '_ {
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
             (holds, gaps or the calibration that far off what was asked)",
            wl.loosened_bounds.join(", ")
        )
    })
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

/// How many leading columns of a table are labels (left-aligned): `oc`, or `variant | oc`
/// in the cell tables.
pub fn label_columns(rows: &[Vec<String>]) -> usize {
    match rows.first() {
        Some(head) if head.first().is_some_and(|h| h == "variant") => 2,
        _ => 1,
    }
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
fn preemption_cells(c: &Cell) -> [String; 5] {
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

/// KVM counters shown per cell (mean per run of guest 0's VM), with their column names
/// (labelled for what KVM counts: see `stats::explain::KVM_COLUMNS`).
pub const KVM_COLUMNS: [(&str, &str); 7] = crate::stats::explain::KVM_COLUMNS;

/// `variant | oc | halt exits | ... | hypercalls`, one row per variant × level, of each cell's
/// KVM figure `of` (None: "-"), when any cell `has` such figures (KVM hosts only).
fn kvm_table(
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

/// What the cell table's telemetry columns mean, and why any of them is empty.
pub fn telemetry_notes(wl: &WorkloadModel) -> Vec<String> {
    let cells: Vec<&Cell> = wl.series.iter().flat_map(|s| &s.cells).collect();
    let mut notes = vec![
        "vCPU wait = host run-queue wait of guest 0's vCPU threads / run wall time; every vCPU busy: 1 - 1/L at L >= 1x"
            .to_string(),
    ];
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_judgement_reads_per_run_with_its_bounds() {
        use crate::stats::preemption::{Labelled, Observed};
        let l = |count| Labelled { count, ns: 0.0 };
        let o = Observed {
            vcpu: l(19),
            both: l(1),
            guest: l(0),
            other_vcpu: l(4),
            unexplained: l(3),
            moved: 0,
            too_short: 40,
            unread: 0,
            error_ns: 250_000,
            runs: 2,
        };
        assert_eq!(
            observed_text(&o),
            "vcpu 9.5 · both 0.5 · guest 0 · other vCPU 2 · unexpl. 1.5 of 13.5/run ≥ 1.0 ms (tie ±0.25 ms)"
        );
    }
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
        let m = merge(Digested::of(&a), Digested::of(&b), "v6.8", "v6.9").unwrap();
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
        // A's records, then B's, each in journal order, renamed.
        let (da, db) = (Digested::of(&a), Digested::of(&b));
        let side = |d: &Digested, name: &str| -> Vec<RunDigest> {
            d.runs
                .iter()
                .map(|r| RunDigest {
                    variant: Arc::from(format!("{name}/{}", r.variant)),
                    slot: r
                        .slot
                        .map(|(b, u)| (b + if name == "v6.9" { OTHER_SWEEP } else { 0 }, u)),
                    block_1: r
                        .block_1
                        .map(|b| b.saturating_add(if name == "v6.9" { OTHER_SWEEP } else { 0 })),
                    ..r.clone()
                })
                .collect()
        };
        assert_eq!(m.runs, [side(&da, "v6.8"), side(&db, "v6.9")].concat());

        let mut single = journal();
        single.header.variants = vec!["base".into()];
        single.runs.retain(|r| r.variant == "base");
        let single_j = single;
        let single = Digested::of(&single_j);
        let m = merge(single.clone(), single.clone(), "old", "new").unwrap();
        assert_eq!(
            (m.header.baseline.as_str(), m.header.variants.clone()),
            ("old", vec!["old".into(), "new".into()])
        );
        let opts = ReportOptions {
            compare_names: Some(("old".into(), "new".into())),
            ..Default::default()
        };
        let text = compare(single.clone(), single.clone(), Format::Table, &opts).unwrap();
        assert!(text.contains("hackbench: new vs old"), "{text}");
        let text = compare(
            single.clone(),
            single.clone(),
            Format::Table,
            &ReportOptions::default(),
        )
        .unwrap();
        assert!(text.contains("hackbench: B vs A"), "{text}");
        let mut renamed = single_j.clone();
        renamed.header.variants = vec!["v6.9".into()];
        renamed.header.baseline = "v6.9".into();
        renamed.runs.iter_mut().for_each(|r| r.variant = "v6.9".into());
        let renamed = Digested::of(&renamed);
        let text = compare(
            single.clone(),
            renamed.clone(),
            Format::Table,
            &ReportOptions::default(),
        )
        .unwrap();
        assert!(text.contains("hackbench: v6.9 vs base"), "{text}");

        let mut other = journal();
        other.header.levels = vec![0.5, 2.0];
        let e = merge(Digested::of(&a), Digested::of(&other), "A", "B")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("only in A: [1x]") && e.contains("only in B: [2x]"),
            "{e}"
        );
        let mut other = journal();
        other.header.workloads.remove("hackbench");
        let e = merge(Digested::of(&a), Digested::of(&other), "A", "B")
            .unwrap_err()
            .to_string();
        assert!(e.contains("different workloads: only in A: [hackbench]"), "{e}");
    }

    #[test]
    fn one_kernel_for_all_variants_is_named_once() {
        let mut m = model(&journal(), &ReportOptions::default());
        let code = |v: &str| format!("`{v}`");
        assert_eq!(variants_line(&m, code), "`base`, `patched`");
        m.kernels = BTreeMap::from([("base".into(), "6.1".into()), ("patched".into(), "6.1".into())]);
        assert_eq!(
            variants_line(&m, code),
            "`base`, `patched` (kernel `6.1` for all)"
        );
        m.kernels.insert("patched".into(), "6.8".into());
        assert_eq!(
            variants_line(&m, code),
            "`base` (kernel `6.1`), `patched` (kernel `6.8`)"
        );
    }

    #[test]
    fn every_format_says_how_many_attempts_the_self_checks_rejected() {
        let mut j = journal();
        assert!(
            !render(&j, Format::Table, &ReportOptions::default())
                .unwrap()
                .contains("self-checks")
        );
        // Two records of one attempt and one of another, rejected for two reasons.
        let mut rejected = |run: u32, attempt: u32, guest: u32, why: &str| {
            let mut r = j.runs[0].clone();
            (r.run, r.attempt, r.guest, r.ok) = (run, attempt, guest, false);
            r.error = Some(format!("{}{why}", crate::journal::SELF_CHECK_REASON));
            j.runs.push(r);
        };
        rejected(
            0,
            7,
            0,
            "calibration_drift: calibration drifted x1.31 during the run",
        );
        rejected(
            0,
            7,
            1,
            "calibration_drift: calibration drifted x1.31 during the run",
        );
        rejected(
            1,
            7,
            0,
            "gap_as_asked: ran x1.25 the asked; holds_serialised: ops/s × hold = 1.13 > 1.02 for an exclusive lock",
        );
        // Counted per check (a record rejected by two counts under each), one example given.
        let line = "2 attempts rejected by self-checks (failed and retried); records rejected per check: \
                    calibration_drift 2, gap_as_asked 1, holds_serialised 1; 2 distinct reasons, \
                    e.g. calibration_drift: calibration drifted x1.31 during the run (2×)";
        for format in [Format::Table, Format::Md, Format::Html] {
            let text = render(&j, format, &ReportOptions::default()).unwrap();
            let text = text.replace("&#39;", "'").replace("&gt;", ">");
            assert!(text.contains(line), "{format:?}:\n{text}");
        }
        let json = render(&j, Format::Json, &ReportOptions::default()).unwrap();
        let m: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(m["self_checks"]["attempts"], 2);
        assert_eq!(
            m["self_checks"]["by_check"][0],
            serde_json::json!(["calibration_drift", 2])
        );
    }

    #[test]
    fn every_format_says_which_runs_nothing_judged_for_a_host_disturbance() {
        use crate::telemetry::host_load::KEY;
        let mut j = journal();
        for r in &mut j.runs {
            r.extra.insert(KEY.into(), serde_json::json!(0.002));
        }
        let quiet = render(&j, Format::Table, &ReportOptions::default()).unwrap();
        assert!(!quiet.contains("not judged for a host disturbance"), "{quiet}");
        let counted: Vec<usize> = (0..j.runs.len())
            .filter(|&i| j.runs[i].ok && !j.runs[i].warmup && j.runs[i].guest == 0)
            .collect();
        assert!(counted.len() > 2);
        j.runs[counted[0]].extra.insert(
            KEY.into(),
            serde_json::json!({"unavailable": crate::telemetry::host_load::REMOTE}),
        );
        j.runs[counted[1]].extra.remove(KEY);
        let line = format!(
            "not judged for a host disturbance: 2 of {} counted runs, the host's other load not read during them \
             (a remote host: ocrig reads this machine's processes only)",
            counted.len()
        );
        for format in [Format::Table, Format::Md, Format::Html] {
            let text = render(&j, format, &ReportOptions::default())
                .unwrap()
                .replace("&#39;", "'");
            assert!(text.contains(&line), "{format:?}:\n{text}");
        }
        let m: serde_json::Value =
            serde_json::from_str(&render(&j, Format::Json, &ReportOptions::default()).unwrap()).unwrap();
        assert_eq!(m["disturbed"]["unjudged"], 2);
        assert_eq!(m["disturbed"]["runs"], counted.len());
    }

    #[test]
    fn a_workload_run_under_loosened_bounds_says_so_in_every_format() {
        let mut j = journal();
        let wl = j.header.workloads.keys().next().unwrap().clone();
        j.header.workloads.get_mut(&wl).unwrap().loosened_bounds =
            vec!["--max-work-error 1 (default 0.1)".into()];
        for format in [Format::Table, Format::Md, Format::Html] {
            let text = render(&j, format, &ReportOptions::default())
                .unwrap()
                .replace("&#39;", "'");
            assert!(
                text.contains(
                    "self-check bounds looser than the payload's defaults: --max-work-error 1 (default 0.1)"
                ),
                "{format:?}:\n{text}"
            );
        }
        let json = render(&j, Format::Json, &ReportOptions::default()).unwrap();
        assert!(json.contains("--max-work-error 1 (default 0.1)"));
    }

    #[test]
    fn every_format_says_how_steady_the_host_was_before_the_sweep() {
        let mut j = journal();
        assert!(
            !render(&j, Format::Table, &ReportOptions::default())
                .unwrap()
                .contains("host speed")
        );
        j.header.host_speed = Some(serde_json::json!({
            "cpus": [0, 1], "samples": 2000, "seconds": 0.5, "p5_ns_per_iter": 0.27,
            "p50_ns_per_iter": 0.33, "p95_ns_per_iter": 0.48, "spread": 1.78, "slow_share": 0.57
        }));
        j.header.host_handover = Some(serde_json::json!({
            "cpus": [0, 1], "samples": 3000, "seconds": 0.5, "p5_ns": 54.0, "p50_ns": 58.0,
            "p95_ns": 86.0, "spread": 1.59, "slow_share": 0.31
        }));
        // CV 2 % of 0.1 s blocks: 3 runs a side detect about 2.4 × 2 % × 2 (Cohen's d ×
        // CV), 10 runs about 1.3 × 2 % × 2 (stats::power).
        j.header.noise_floor = Some(serde_json::json!({
            "cpus": [0, 1], "seconds": 1.0, "p10": 0.27, "p50": 0.33, "p90": 0.46,
            "largest_step": 1.9, "block_s": 0.1, "blocks": 20, "block_cv": 0.02
        }));
        let json = render(&j, Format::Json, &ReportOptions::default()).unwrap();
        assert!(json.contains("blocks of 0.1 s vary by CV 2.00 %"), "{json}");
        for format in [Format::Table, Format::Md, Format::Html] {
            let text = render(&j, format, &ReportOptions::default()).unwrap();
            assert!(
                text.contains(
                    "host speed before the sweep: NOT steady, x1.78 between its fast and slow samples, 57 %"
                ),
                "{format:?}:\n{text}"
            );
            assert!(
                text.contains(
                    "host hand-over before the sweep: NOT steady, x1.59 between its fast and slow samples, 31 %"
                ),
                "{format:?}:\n{text}"
            );
            assert!(
                text.contains(
                    "host noise floor before the sweep: busy loop 0.270 / 0.330 / 0.460 ns per iteration"
                ) && text.contains("a comparison of 3 runs a side could detect"),
                "{format:?}:\n{text}"
            );
        }
    }

    #[test]
    fn two_builds_of_one_release_are_not_one_kernel_for_all() {
        let mut j = journal();
        j.header.kernels = BTreeMap::from([
            ("base".into(), "6.1.192".into()),
            ("patched".into(), "6.1.192".into()),
        ]);
        let code = |v: &str| format!("`{v}`");
        // Before kernel identities: the releases alone make it read as one kernel.
        let before = variants_line(&model(&j, &ReportOptions::default()), code);
        assert_eq!(before, "`base`, `patched` (kernel `6.1.192` for all)");
        let build = |n: u32, sha: &str| crate::image::KernelIdentity {
            release: "6.1.192".into(),
            version: Some(format!("#{n} SMP PREEMPT_DYNAMIC Tue Dec  1 21:0{n}:00 UTC 2026")),
            sha256: sha.into(),
            source: "tree /src/linux".into(),
            boot: "pvh".into(),
            config_sha256: Some("c0nf".into()),
            config_from: "/src/linux/.config".into(),
        };
        j.header.kernel_identity = BTreeMap::from([
            ("base".into(), build(1, "1111aaaa2222")),
            ("patched".into(), build(2, "3333bbbb4444")),
        ]);
        let after = variants_line(&model(&j, &ReportOptions::default()), code);
        assert_eq!(
            after,
            "`base` (kernel `6.1.192 #1 1111aaaa`), `patched` (kernel `6.1.192 #2 3333bbbb`)"
        );
        // The same file for both: one kernel for all again.
        j.header
            .kernel_identity
            .insert("patched".into(), build(1, "1111aaaa2222"));
        let same = variants_line(&model(&j, &ReportOptions::default()), code);
        assert_eq!(same, "`base`, `patched` (kernel `6.1.192` for all)");
        // Merged for `ocrig compare`, the identities follow the renamed variants.
        let m = merge(Digested::of(&j), Digested::of(&j), "A", "B").unwrap();
        assert_eq!(m.header.kernel_identity.len(), 4);
        assert!(m.header.kernel_identity.contains_key("B/patched"));
    }

    #[test]
    fn write_all_writes_four_files() {
        let dir = tempfile::tempdir().unwrap();
        let paths = write_all(&Digested::of(&journal()), dir.path()).unwrap();
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
