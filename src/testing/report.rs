//! A fixture journal held in memory, read as a report reads a journal (from its file,
//! [`super::on_disk`]): its model and its rendered reports.

use crate::journal::Journal;
use crate::report::{Format, ReportOptions, model_digested, render_digested};
use crate::stats::cells::{Model, build_digested};
use crate::stats::digest::Digested;

/// The comparison model of `journal` at `alpha` (`metric` overrides every workload's headline
/// metric), as the statistics build it.
pub(crate) fn build(journal: &Journal, alpha: f64, metric: Option<&str>) -> Model {
    build_digested(&Digested::of(journal), alpha, metric)
}

/// The comparison model of `journal` as a report builds it.
pub(crate) fn model(journal: &Journal, opts: &ReportOptions) -> Model {
    model_digested(&Digested::of(journal), opts)
}

/// `journal` rendered in `format`.
pub(crate) fn render(journal: &Journal, format: Format, opts: &ReportOptions) -> anyhow::Result<String> {
    render_digested(&Digested::of(journal), format, opts)
}
