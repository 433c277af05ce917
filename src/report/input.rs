//! What one report shows, built once from a journal's digests: the journal settled once by the
//! accounting rule, and from that the comparison model, the guest kernels' busiest symbols,
//! the hosts' agreement, the guest kernels' own words and (for `ocrig compare`) the variant
//! pairs. Every exporter renders from it; none reads what another rendered.

use std::cell::OnceCell;

use super::flame::{self, CellProfile};
use super::kernel_symbols as ks_report;
use super::{ReportOptions, hosts, timeline};
use crate::journal::accounting::{Settled, settle};
use crate::stats::cells::{Model, build_with_margin};
use crate::stats::digest::Digested;
use crate::stats::kernel_symbols::{self as ks, CellSymbols};

pub struct ReportInput<'a> {
    pub journal: &'a Digested,
    pub model: Model,
    /// Each profiled cell's busiest kernel symbols (empty: no counted run has a profile).
    pub symbols: Vec<CellSymbols>,
    /// `ocrig compare`: the variant pairs set against each other; empty otherwise.
    pub compare_pairs: Vec<(String, String)>,
    alpha: f64,
    settled: Settled,
    /// Each profiled cell's folded stacks, for flame graphs (HTML and the flame files only).
    profiles: OnceCell<Vec<CellProfile>>,
}

impl<'a> ReportInput<'a> {
    pub fn build(journal: &'a Digested, opts: &ReportOptions) -> Self {
        let settled = settle(&journal.runs);
        let mut model = build_with_margin(journal, &settled, opts.alpha, opts.metric.as_deref(), opts.margin);
        // Kernels by release, plus build number and short hash wherever two variants share a
        // release with different files: only identical kernels read as one.
        model
            .kernels
            .extend(crate::image::identity::labels(&journal.header.kernel_identity));
        let symbols = ks::aggregate_digests(settled.counted(&journal.runs));
        Self {
            journal,
            model,
            symbols,
            compare_pairs: Vec::new(),
            alpha: opts.alpha,
            settled,
            profiles: OnceCell::new(),
        }
    }

    pub fn profiles(&self) -> &[CellProfile] {
        self.profiles
            .get_or_init(|| flame::cells_digested(self.journal, &self.settled))
    }

    /// A sweep over several hosts: each cell's agreement across them, as text (empty with one).
    pub fn hosts_text(&self) -> String {
        hosts::agreement_text(self.journal, &self.settled, self.alpha)
    }

    /// The HTML section of the runs' vCPU timelines (empty when no run has one).
    pub fn timeline_section(&self) -> String {
        timeline::section(self.journal, &self.settled)
    }

    /// What each variant's guest kernels said about their PV features, as text.
    pub fn kernel_words(&self) -> String {
        super::kernel_words_text(self.journal)
    }

    /// `ocrig compare`: the profiled cells whose symbols changed between the pairs.
    pub fn changed(&self) -> Vec<ks_report::Changed<'_>> {
        ks_report::changed(&self.symbols, &self.compare_pairs)
    }

    pub fn baseline(&self) -> &str {
        &self.journal.header.baseline
    }
}
