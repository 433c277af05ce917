//! Reports rendered from a journal: one file per format behind one trait ([`Exporter`]).
//!
//! Every format renders the same [`ReportInput`], built once from the journal's digests (one
//! pass of the accounting rule): the [`Model`](crate::stats::cells::Model) and what is shown
//! beside it (kernel symbols, the hosts' agreement, the guests' own words, timelines).

pub mod csv;
pub mod flame;
pub mod gate;
pub mod hosts;
pub mod html;
pub mod input;
pub mod json;
pub mod kernel_symbols;
pub mod kernels;
pub mod layout;
pub mod markdown;
pub mod plot;
pub mod table;
pub mod timeline;
pub mod verdict;

mod compare;
mod format;
mod notes;
mod rows;

pub use compare::*;
pub use format::*;
pub use notes::*;
pub use rows::*;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;

use crate::journal::SweepHeader;
use crate::stats::cells::{Cell, Comparison, Conclusion, Model, Row, WorkloadModel};
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
    /// Names of the sides of [`compare_all`] (A, B, …), e.g. the result directories' names.
    pub compare_names: Option<Vec<String>>,
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

/// The comparison model of a journal's digests.
pub fn model_digested(journal: &Digested, opts: &ReportOptions) -> Model {
    ReportInput::build(journal, opts).model
}

/// A journal's digests ([`Digested::read`] streams a journal file into them) rendered in
/// `format`.
pub fn render_digested(journal: &Digested, format: Format, opts: &ReportOptions) -> anyhow::Result<String> {
    Ok(render_gated(journal, format, opts, None)?.0)
}

/// [`render_digested`], with the gate's verdict on the same model where `fail_on` asks for it.
pub fn render_gated(
    journal: &Digested,
    format: Format,
    opts: &ReportOptions,
    fail_on: Option<gate::FailOn>,
) -> anyhow::Result<(String, Option<gate::Gate>)> {
    let input = ReportInput::build(journal, opts);
    let gate = fail_on.map(|f| gate::Gate::of(&input.model, f));
    Ok((format.exporter().render(&input)?, gate))
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
    if journal.header.runs_on.accel == "tcg" {
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

#[cfg(test)]
mod tests;
