//! Journal records grouped into cells (workload × metric × variant × level) and the comparison
//! model every report format renders: per workload, each non-baseline variant against the
//! baseline, level by level, plus a geometric-mean row; and per cell what explains its number
//! (vCPU wait, guest steal, contention, fairness, context switches, KVM counters; [`explain`]).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use super::compare::{geomean_ratio, geometric_mean, improvement_of_ratio, improvement_pct};
use super::digest::{Digested, RunDigest};
pub use super::effect::Conclusion;
use super::effect::{CONFIDENCE, DEFAULT_MARGIN, Effect, Equivalence, Interval, Sample, holm, holm_levels};
use super::explain::{self, Measured};
use super::outliers::outlier_indices;
use super::summary::{Summary, mean, summarize};
use crate::journal::Better;
use crate::journal::accounting::headline_of;
use crate::vocabulary::HeadlineFrom;

/// Lock workloads report these; their per-cell means go next to the headline metric.
pub const CONTENTION_METRIC: &str = "contention_rate";
pub const JAIN_METRIC: &str = "jain";
/// Context switches of the workload's threads inside the guest (sums over its threads).
pub const CTXSW_VOLUNTARY_METRIC: &str = "ctxsw_voluntary";
pub const CTXSW_INVOLUNTARY_METRIC: &str = "ctxsw_involuntary";

/// Everything a report shows, computed from a journal alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Model {
    pub scenario: String,
    pub baseline: String,
    /// Baseline first, then the others in the header's order.
    pub variants: Vec<String>,
    /// Overcommit levels, ascending.
    pub levels: Vec<f64>,
    /// Guest kernel release per variant, when known.
    #[serde(default)]
    pub kernels: BTreeMap<String, String>,
    /// Significance level of the (Holm-adjusted) tests every conclusion is drawn from.
    pub alpha: f64,
    /// Equivalence margin: a ratio within [1/(1 + margin), 1 + margin] is "equivalent" when
    /// shown to be ([`super::effect::margin_bounds`]).
    #[serde(default = "default_margin")]
    pub margin: f64,
    /// Set when `margin` was given after the data (`ocrig report --margin`) and differs from the
    /// one the sweep fixed before them: every tested row's conclusion is then post hoc.
    #[serde(default)]
    pub margin_post_hoc: Option<MarginPostHoc>,
    /// Comparison rows that were tested: the family the Holm adjustment is over.
    #[serde(default)]
    pub family: usize,
    /// Looks a stopping rule (`runs: {until: concluded}`) may have taken at each comparison:
    /// every p is multiplied by it before Holm's adjustment (1: runs of a fixed count).
    #[serde(default = "one_look")]
    pub looks: u32,
    /// Accelerator the guests ran under (`kvm`, `tcg`) and the backend, from the header.
    #[serde(default)]
    pub accel: String,
    #[serde(default)]
    pub backend: String,
    /// How steady the host's own CPU speed was before the sweep, in words
    /// ([`crate::telemetry::host_speed::HostSpeed::describe`]); None when not probed.
    #[serde(default)]
    pub host_speed: Option<String>,
    /// How steady the host's hand-over of a cache line between two of its CPUs was before the
    /// sweep, in words ([`crate::telemetry::host_handover::HostHandover::describe`]).
    #[serde(default)]
    pub host_handover: Option<String>,
    /// The noise floor of the sweep's CPUs before the sweep, in words with the effects a 3-
    /// and a 10-run comparison could detect at it
    /// ([`crate::telemetry::host_speed::NoiseFloor::describe`]); None when not measured.
    #[serde(default)]
    pub noise_floor: Option<String>,
    /// What the host was, in one line ([`crate::journal::host::HostRecord::summary`]); None over
    /// several hosts.
    #[serde(default)]
    pub host: Option<String>,
    /// Variants whose guests said their spinlocks were other than the variant meant (KVM,
    /// ≥ 2 vCPUs), `variant: what it meant and what its guests said`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pv_disagreements: Vec<String>,
    pub workloads: Vec<WorkloadModel>,
    /// Attempts the payload's own physics checks rejected (each was failed and retried).
    #[serde(default)]
    pub self_checks: SelfCheckRejections,
    /// Measured attempts the host disturbed (each failed, waited out and retried).
    #[serde(default)]
    pub disturbed: Disturbances,
}

/// A margin given after the data, against the one fixed before them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MarginPostHoc {
    /// The margin the sweep fixed before its data: the scenario's (journaled in the header),
    /// else the default a sweep run until concluded stopped at.
    pub fixed: f64,
    /// The sweep ran `runs: {until: concluded}`: it stopped each comparison on its conclusion
    /// at `fixed`.
    pub stopped_on_conclusions: bool,
}

/// Whether the margin `given` to a report (None: the journal's) is post hoc: another than the
/// one the sweep fixed before its data — the scenario's `margin` (journaled), or, for a sweep
/// that stopped on its conclusions (`looks` journaled), the default it stopped at.
pub fn margin_post_hoc(
    given: Option<f64>,
    journaled: Option<f64>,
    looks: Option<u32>,
) -> Option<MarginPostHoc> {
    let fixed = journaled.or(looks.map(|_| DEFAULT_MARGIN))?;
    let given = given?;
    ((given - fixed).abs() > 1e-12).then_some(MarginPostHoc {
        fixed,
        stopped_on_conclusions: looks.is_some(),
    })
}

/// Attempts rejected by the payload's self-checks, and why.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SelfCheckRejections {
    /// Distinct attempts with at least one rejected record.
    pub attempts: usize,
    /// Each distinct reason (the check's words) with the number of records that gave it.
    pub reasons: Vec<(String, usize)>,
    /// Per check that failed (its name, e.g. `calibration_drift`), the records it rejected,
    /// most first: a record rejected by two checks counts under each.
    #[serde(default)]
    pub by_check: Vec<(String, usize)>,
}

/// The names of the checks a rejection's words name: `name: detail; name: detail`, where a
/// name is a lowercase identifier before `: ` at the start or after `; `.
pub fn check_names(why: &str) -> Vec<&str> {
    std::iter::once(why)
        .chain(why.match_indices("; ").map(|(i, _)| &why[i + 2..]))
        .filter_map(|part| {
            let name = part.split_once(": ")?.0;
            (!name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .then_some(name)
        })
        .collect()
}

/// Counts the attempts of `records` whose payload rejected its own run.
pub fn self_check_rejections(records: &[RunDigest]) -> SelfCheckRejections {
    let mut attempts = std::collections::BTreeSet::new();
    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    for r in records {
        let Some(why) = r
            .rejected
            .as_deref()
            .and_then(|w| w.strip_prefix(crate::journal::SELF_CHECK_REASON))
        else {
            continue;
        };
        attempts.insert((crate::journal::accounting::RunKey::of(r), r.attempt));
        *reasons.entry(why).or_default() += 1;
    }
    let mut by_check: BTreeMap<&str, usize> = BTreeMap::new();
    for (why, n) in &reasons {
        for name in check_names(why) {
            *by_check.entry(name).or_default() += n;
        }
    }
    let mut by_check: Vec<(String, usize)> = by_check.into_iter().map(|(c, n)| (c.to_string(), n)).collect();
    by_check.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    SelfCheckRejections {
        attempts: attempts.len(),
        reasons: reasons.into_iter().map(|(w, n)| (w.to_string(), n)).collect(),
        by_check,
    }
}

/// Measured attempts the host disturbed (its other load on the sweep's CPUs above
/// `host.max_other_load`): each was failed, waited out and retried on the same guests, or,
/// where the host stayed busy through a whole wait, counted marked disturbed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Disturbances {
    /// Failed (waited out and retried).
    pub attempts: usize,
    /// Counted, marked disturbed (each named in its cell: [`Cell::disturbed_runs`]).
    #[serde(default)]
    pub counted: usize,
    /// One example of the journal's words (they carry the load and the bound).
    pub example: Option<String>,
    /// Counted measured runs nobody judged: the host's other load was not read during them.
    #[serde(default)]
    pub unjudged: usize,
    /// Counted measured runs, judged or not: [`Disturbances::unjudged`]'s denominator.
    #[serde(default)]
    pub runs: usize,
    /// Why the load was not read, for the first unjudged run.
    #[serde(default)]
    pub unjudged_why: Option<String>,
}

/// Counts the attempts of `records` the host disturbed, and of the measured runs the one
/// accounting rule counts (`settled`), those nothing judged.
pub fn disturbances(records: &[RunDigest], settled: &crate::journal::accounting::Settled) -> Disturbances {
    let mut attempts = std::collections::BTreeSet::new();
    let mut counted = std::collections::BTreeSet::new();
    let mut example = None;
    let (mut runs, mut unjudged, mut unjudged_why) = (0, 0, None);
    // One primary record per counted measured run.
    for r in settled
        .counted(records)
        .filter(|r| !r.warmup && super::digest::is_primary_guest(r.guest))
    {
        runs += 1;
        if let Some(why) = r.load_unread() {
            unjudged += 1;
            unjudged_why.get_or_insert_with(|| why.to_string());
        }
    }
    for r in records {
        if r.ok && r.disturbed() {
            counted.insert((crate::journal::accounting::RunKey::of(r), r.attempt));
        }
        let Some(why) = r
            .rejected
            .as_deref()
            .filter(|w| w.starts_with(crate::journal::DISTURBED_REASON))
        else {
            continue;
        };
        attempts.insert((crate::journal::accounting::RunKey::of(r), r.attempt));
        example.get_or_insert_with(|| why.to_string());
    }
    Disturbances {
        attempts: attempts.len(),
        counted: counted.len(),
        example,
        unjudged,
        runs,
        unjudged_why,
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadModel {
    pub workload: String,
    /// Payload subcommand, e.g. `lock`.
    pub command: String,
    /// The metric compared (the workload's headline metric unless overridden).
    pub metric: String,
    /// Whose a run's value of it is: guest 0's, or the mean of every guest's.
    #[serde(default)]
    pub headline_from: HeadlineFrom,
    pub better: Better,
    /// True when the records carry `contention_rate` or `jain` (lock workloads).
    pub lock: bool,
    /// One per variant, in [`Model::variants`] order; one cell per level.
    pub series: Vec<Series>,
    /// One per non-baseline variant, against the baseline.
    pub comparisons: Vec<Comparison>,
    /// One per variant: its metric at each level against its lowest level.
    #[serde(default)]
    pub retention: Vec<Retention>,
    /// Self-check bounds the workload's arguments set looser than the payload's defaults
    /// ([`crate::journal::WorkloadInfo::loosened_bounds`]).
    #[serde(default)]
    pub loosened_bounds: Vec<String>,
}

/// A variant's metric at each level as a ratio to its lowest level (throughput at 2x / at 1x):
/// how much of it survives overcommit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Retention {
    pub variant: String,
    /// The level every ratio is against (the lowest with results).
    pub from_level: f64,
    /// One per higher level.
    pub rows: Vec<RetentionRow>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetentionRow {
    pub level: f64,
    /// The ratio and its interval; None with `why`.
    pub effect: Option<Effect>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// A variant's retention against the baseline's at this level (None for the baseline):
    /// its comparison's ratio here over its ratio at `from_level`, both paired within rounds
    /// (or blocks), so the boot of a level cancels in each — "does FIFO keep less than
    /// test-and-set?" ([`super::effect::ratio_of_effects`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub against_baseline: Option<Effect>,
    /// Retention over runs of one bring-up a level: what varies between boots, and the host's
    /// drift between the levels' stretches of time, is not in its interval.
    #[serde(default)]
    pub within_one_boot: bool,
}

fn default_margin() -> f64 {
    DEFAULT_MARGIN
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Series {
    pub variant: String,
    pub cells: Vec<Cell>,
}

/// One variant × level of one workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    pub level: f64,
    /// Primary results (guest 0, ok, not warm-up) of the metric; `None` if there are none.
    pub summary: Option<Summary>,
    /// The same results one by one, for plots that show every run.
    #[serde(default)]
    pub points: Vec<RunPoint>,
    /// Run indices of primary results flagged by the modified Z-score (|M| > 3.5).
    pub outlier_runs: Vec<u32>,
    /// Run indices of primary results counted although the host disturbed them (it stayed
    /// busy through a whole wait; [`crate::journal::counted_disturbed`]).
    #[serde(default)]
    pub disturbed_runs: Vec<u32>,
    /// Measured runs with no valid result (every attempt failed; see `journal::accounting`):
    /// the cell's empty slots.
    pub failed: usize,
    /// Measured attempts journaled (each run's first, and every retry), and of them those the
    /// payload's self-checks rejected: what [`Rejections`] compares between two sides.
    #[serde(default)]
    pub attempts: usize,
    #[serde(default)]
    pub rejected_attempts: usize,
    /// Mean `contention_rate` of the primary results, when reported.
    pub contention_rate: Option<f64>,
    /// Mean Jain's fairness index of the primary results, when reported.
    pub jain: Option<f64>,
    /// The metric over the other guests' (guest ≥ 1) successful measured runs.
    pub other_guests: Option<Summary>,
    /// Guest 0's vCPU wait share per run: host run-queue wait of its vCPU threads / the run's
    /// wall time, mean over its vCPUs.
    #[serde(default)]
    pub vcpu_wait: Measured,
    /// Guest 0's steal share per run from its own /proc/stat (not measured under TCG).
    #[serde(default)]
    pub guest_steal: Measured,
    /// Share of the pinned host CPUs' time that went to anything but the run's vCPUs, per run
    /// (another process on a shared host takes its part of the CPUs too).
    #[serde(default)]
    pub host_other: Measured,
    /// Mean voluntary / involuntary context switches of the workload's threads per run.
    #[serde(default)]
    pub ctxsw_voluntary: Option<f64>,
    #[serde(default)]
    pub ctxsw_involuntary: Option<f64>,
    /// Guest 0's VM's KVM counters, mean per run.
    #[serde(default)]
    pub kvm: explain::KvmCell,
    /// Stretched lock holds and hand-overs (lock workloads only; absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<super::preemption::CellPreemption>,
}

/// One primary result: its run index and value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RunPoint {
    pub run: u32,
    pub value: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub variant: String,
    pub rows: Vec<Row>,
    /// Across the levels where both sides have a positive mean.
    pub geomean: Option<Geomean>,
}

/// One level of a variant-vs-baseline comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub level: f64,
    pub base: Option<Summary>,
    pub variant: Option<Summary>,
    /// The row's ratio as a percentage, signed so + is better: (ratio − 1) × 100 where higher
    /// is better, (1 − ratio) × 100 where lower is (so its sign always agrees with the ratio's
    /// side of 1); None without a ratio.
    pub improvement_pct: Option<f64>,
    /// The ratio over the design's units with its unadjusted interval and tests
    /// ([`super::effect`]); None with `why`.
    pub effect: Option<Effect>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// Holm-adjusted over the model's family: `p` of "ratio 1", and of "outside the margin".
    pub p_holm: Option<f64>,
    pub p_equivalent_holm: Option<f64>,
    pub conclusion: Conclusion,
    /// The interval the conclusion was judged by: at 1 − the level of the row's Holm step,
    /// looks included ([`super::effect::holm_levels`]); it excludes 1 exactly when the tests
    /// say `differs`. None untested.
    #[serde(default)]
    pub interval: Option<Interval>,
    /// The effect's own [`CONFIDENCE`] interval, unadjusted for the family and the looks.
    #[serde(default)]
    pub interval_unadjusted: Option<Interval>,
    /// How `equivalent` was judged: both one-sided tests at the level of the row's Holm step
    /// in the family of equivalence tests, i.e. the (1 − 2α) interval within the margin.
    #[serde(default)]
    pub equivalence: Option<Equivalence>,
    /// The row differs, and the equivalence test passes too: "differs, within ±margin" (a
    /// difference shown, and shown smaller than the margin).
    #[serde(default)]
    pub within_margin: bool,
    /// Per side, its attempts, those its self-checks rejected and its empty slots, with
    /// Fisher's test of the two rejection rates.
    #[serde(default)]
    pub rejections: Rejections,
    /// Why a row its tests concluded is `not concluded` (its sides were rejected at clearly
    /// different rates), with what the tests said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withheld: Option<Withheld>,
    /// The margin was given after the data ([`Model::margin_post_hoc`]): the conclusion is
    /// post hoc.
    #[serde(default)]
    pub margin_post_hoc: bool,
    /// Where runs counted though the host disturbed them are on either side: the same ratio
    /// over the other runs alone, so a reader sees whether they moved it (a figure, not a
    /// conclusion: no Holm).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub without_disturbed: Option<WithoutDisturbed>,
}

/// One side's attempts at a cell, for [`Rejections`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SideAttempts {
    /// Measured attempts journaled.
    pub attempts: usize,
    /// Of them, those the payload's self-checks rejected.
    pub rejected: usize,
    /// Measured slots left without a valid result (given up).
    pub empty_slots: usize,
}

impl SideAttempts {
    fn of(c: &Cell) -> Self {
        Self {
            attempts: c.attempts,
            rejected: c.rejected_attempts,
            empty_slots: c.failed,
        }
    }

    /// `2/14`: rejected of attempts.
    pub fn rejected_words(&self) -> String {
        format!("{}/{}", self.rejected, self.attempts)
    }
}

/// What each side of a comparison lost before its samples: the runs that survived the
/// self-checks are all a conclusion sees, so a side rejected far more often may be measured
/// on its lucky runs only. Where the two rates differ clearly (Fisher's exact test,
/// two-sided, p < [`super::fisher::REJECTION_ALPHA`]) the row is not concluded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Rejections {
    pub base: SideAttempts,
    pub variant: SideAttempts,
    /// Fisher's exact test of rejected against passed attempts, variant vs base; None where a
    /// side has no attempt.
    pub fisher_p: Option<f64>,
}

impl Rejections {
    fn of(base: &Cell, variant: &Cell) -> Self {
        let (base, variant) = (SideAttempts::of(base), SideAttempts::of(variant));
        let fisher_p = (base.attempts > 0 && variant.attempts > 0).then(|| {
            let side = |s: SideAttempts| (s.rejected as u64, s.attempts.saturating_sub(s.rejected) as u64);
            let ((a, b), (c, d)) = (side(variant), side(base));
            super::fisher::fisher_exact(a, b, c, d)
        });
        Self {
            base,
            variant,
            fisher_p,
        }
    }

    /// Any attempt rejected or slot left empty on either side.
    pub fn any(&self) -> bool {
        [self.base, self.variant]
            .iter()
            .any(|s| s.rejected > 0 || s.empty_slots > 0)
    }

    /// Why the rates differ clearly, in words naming the sides; None where they do not.
    pub fn unequal(&self, variant: &str, baseline: &str) -> Option<String> {
        let p = self.fisher_p.filter(|p| *p < super::fisher::REJECTION_ALPHA)?;
        Some(format!(
            "self-checks rejected {} attempts of {variant} vs {} of {baseline}: Fisher p = {}",
            self.variant.rejected_words(),
            self.base.rejected_words(),
            fmt_fisher_p(p)
        ))
    }
}

/// `0.008`, `<0.001`.
fn fmt_fisher_p(p: f64) -> String {
    if p < 0.001 {
        "<0.001".into()
    } else {
        format!("{p:.3}")
    }
}

/// A row not concluded although its tests concluded ([`Row::withheld`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Withheld {
    pub why: String,
    /// What the tests alone concluded.
    pub tested: Conclusion,
}

/// A row's ratio without its runs counted though disturbed ([`Row::without_disturbed`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WithoutDisturbed {
    /// The runs left out, of both sides.
    pub runs_left_out: usize,
    pub effect: Option<Effect>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Geomean {
    /// Geometric mean of the baseline's per-level means.
    pub base: f64,
    /// Geometric mean of the variant's per-level means.
    pub variant: f64,
    /// Geometric mean of the per-level `variant / base` ratios (= `variant / base` above).
    pub ratio: f64,
    /// Signed so + is better.
    pub improvement_pct: f64,
    /// Number of levels that went into it.
    pub levels: usize,
}

/// Whether two overcommit levels are the same (levels are written as parsed, so exact up to
/// float noise).
pub fn same_level(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(1.0)
}

/// The comparison model of a journal's digests ([`Digested::read`] streams a journal into
/// them), at the margin the sweep's scenario set (or the default). `metric` overrides every
/// workload's headline metric.
#[cfg(test)] // reports go through build_with_margin
pub fn build_digested(journal: &Digested, alpha: f64, metric: Option<&str>) -> Model {
    let settled = crate::journal::accounting::settle(&journal.runs);
    build_with_margin(journal, &settled, alpha, metric, None)
}

/// The comparison model of a journal's digests `settled` by the accounting rule, at equivalence margin
/// `margin` (None: the scenario's, else the default). Linear in the records: they are grouped
/// into their cells in one pass.
pub fn build_with_margin(
    journal: &Digested,
    settled: &crate::journal::accounting::Settled,
    alpha: f64,
    metric: Option<&str>,
    margin: Option<f64>,
) -> Model {
    let header = &journal.header;
    let post_hoc = margin_post_hoc(margin, header.margin, header.looks);
    let margin = margin.or(header.margin).unwrap_or(DEFAULT_MARGIN);
    let baseline = header.baseline.clone();

    let mut variants = vec![baseline.clone()];
    let mut seen: HashSet<&str> = HashSet::from([baseline.as_str()]);
    let extra = journal.runs.iter().map(|r| &*r.variant);
    for v in header.variants.iter().map(String::as_str).chain(extra) {
        if seen.insert(v) {
            variants.push(v.to_string());
        }
    }
    let distinct: HashSet<u64> = header
        .levels
        .iter()
        .chain(journal.runs.iter().map(|r| &r.level))
        .map(|l| l.to_bits())
        .collect();
    let mut levels: Vec<f64> = distinct.into_iter().map(f64::from_bits).collect();
    levels.sort_by(f64::total_cmp);
    levels.dedup_by(|a, b| same_level(*a, *b));
    let level_index = |l: f64| levels.iter().position(|&x| same_level(x, l));
    let variant_index: HashMap<&str, usize> = variants
        .iter()
        .enumerate()
        .map(|(i, v)| (v.as_str(), i))
        .collect();

    // Only the valid result of each run (the sweep's own accounting rule), grouped by
    // workload → (variant, level) in journal order, in one pass.
    let mut grouped: HashMap<&str, HashMap<(usize, usize), Vec<&RunDigest>>> = HashMap::new();
    for r in settled.counted(&journal.runs) {
        let (Some(&v), Some(l)) = (variant_index.get(&*r.variant), level_index(r.level)) else {
            continue;
        };
        grouped
            .entry(&*r.workload)
            .or_default()
            .entry((v, l))
            .or_default()
            .push(r);
    }
    // Measured runs without a valid result, by (workload, variant, level bits).
    let mut failed: HashMap<(&str, &str, u64), usize> = HashMap::new();
    for k in settled.runs_without_result() {
        *failed
            .entry((k.workload.as_str(), k.variant.as_str(), k.level_bits))
            .or_default() += 1;
    }
    let attempts = attempts_by_cell(journal);
    let no_records = HashMap::new();

    let workloads = header
        .workloads
        .iter()
        .map(|(id, info)| {
            let metric = metric.unwrap_or(&info.metric).to_string();
            let by_cell = grouped.get(id.as_str()).unwrap_or(&no_records);
            let cells: HashMap<(usize, usize), CellRecords<'_>> = by_cell
                .iter()
                .map(|(&k, recs)| (k, CellRecords::of(recs, header.headline_from)))
                .collect();
            let none = CellRecords::of(&[], header.headline_from);
            let records = |v: usize, l: usize| cells.get(&(v, l)).unwrap_or(&none);
            let lock = by_cell
                .values()
                .flatten()
                .any(|r| r.metric(CONTENTION_METRIC).is_some() || r.metric(JAIN_METRIC).is_some());
            let series: Vec<Series> = variants
                .iter()
                .enumerate()
                .map(|(vi, v)| Series {
                    variant: v.clone(),
                    cells: levels
                        .iter()
                        .enumerate()
                        .map(|(li, &l)| {
                            let failed = failed
                                .get(&(id.as_str(), v.as_str(), l.to_bits()))
                                .copied()
                                .unwrap_or(0);
                            let mut c = cell(records(vi, li), l, &metric, failed);
                            if let Some(a) = attempts.get(&(id.as_str(), v.as_str(), l.to_bits())) {
                                (c.attempts, c.rejected_attempts) = *a;
                            }
                            c
                        })
                        .collect(),
                })
                .collect();
            let comparisons: Vec<Comparison> = (1..variants.len())
                .map(|vi| {
                    let per_level: Vec<(f64, &CellRecords<'_>, &CellRecords<'_>)> = levels
                        .iter()
                        .enumerate()
                        .map(|(li, &l)| (l, records(0, li), records(vi, li)))
                        .collect();
                    let mut c = compare_variant(&variants[vi], &per_level, &metric, info.better, margin);
                    for (row, (b, v)) in c
                        .rows
                        .iter_mut()
                        .zip(series[0].cells.iter().zip(&series[vi].cells))
                    {
                        row.rejections = Rejections::of(b, v);
                    }
                    c
                })
                .collect();
            let mut retention: Vec<Retention> = (0..variants.len())
                .filter_map(|vi| {
                    let per_level: Vec<(f64, &CellRecords<'_>)> = levels
                        .iter()
                        .enumerate()
                        .map(|(li, &l)| (l, records(vi, li)))
                        .collect();
                    retention_of(&variants[vi], &per_level, &metric, margin)
                })
                .collect();
            retention_against_baseline(&mut retention, &comparisons, margin);
            WorkloadModel {
                workload: id.clone(),
                command: info.command.clone(),
                metric,
                headline_from: header.headline_from,
                better: info.better,
                lock,
                series,
                comparisons,
                retention,
                loosened_bounds: info.loosened_bounds.clone(),
            }
        })
        .collect();
    let mut workloads: Vec<WorkloadModel> = workloads;
    let looks = header.looks.unwrap_or(1).max(1);
    let family = conclude(&mut workloads, &baseline, alpha, looks, post_hoc.is_some());

    Model {
        scenario: header.scenario.clone(),
        baseline,
        variants,
        levels,
        kernels: header.runs_on.kernels.clone(),
        alpha,
        margin,
        margin_post_hoc: post_hoc,
        family,
        looks,
        accel: header.runs_on.accel.clone(),
        backend: header.runs_on.backend.clone(),
        host_speed: probe_words::<crate::telemetry::host_speed::HostSpeed>(header.host_speed.as_ref()),
        host_handover: probe_words::<crate::telemetry::host_handover::HostHandover>(
            header.host_handover.as_ref(),
        ),
        noise_floor: header
            .noise_floor
            .as_ref()
            .and_then(|v| serde_json::from_value::<crate::telemetry::host_speed::NoiseFloor>(v.clone()).ok())
            .map(|f| f.describe(super::power::detectable_at_cv)),
        host: header.runs_on.host.as_ref().map(|h| h.summary()),
        pv_disagreements: pv_disagreements(journal),
        workloads,
        self_checks: self_check_rejections(&journal.runs),
        disturbed: disturbances(&journal.runs, settled),
    }
}

/// A cell by workload, variant and level bits.
type CellId<'a> = (&'a str, &'a str, u64);

/// Per cell: its measured attempts (distinct run, attempt) and how many of them the payload's
/// self-checks rejected, from every journaled record (one pass).
fn attempts_by_cell(journal: &Digested) -> HashMap<CellId<'_>, (usize, usize)> {
    type Attempts = HashSet<(u32, u32)>;
    let mut seen: HashMap<CellId, (Attempts, Attempts)> = HashMap::new();
    for r in journal.runs.iter().filter(|r| !r.warmup) {
        let e = seen
            .entry((&*r.workload, &*r.variant, r.level.to_bits()))
            .or_default();
        e.0.insert((r.run, r.attempt));
        if r.rejected
            .as_deref()
            .is_some_and(|w| w.starts_with(crate::journal::SELF_CHECK_REASON))
        {
            e.1.insert((r.run, r.attempt));
        }
    }
    seen.into_iter()
        .map(|(k, (all, rejected))| (k, (all.len(), rejected.len())))
        .collect()
}

/// Each variant whose guests' PV words disagree with what the variant meant
/// ([`super::explain::PvIntent::disagreement`]), judged on its first record with guest facts.
fn pv_disagreements(journal: &Digested) -> Vec<String> {
    let h = &journal.header;
    // One pass over the records: each variant's first with guest facts.
    let mut first: BTreeMap<&str, &super::digest::PvWords> = BTreeMap::new();
    for r in &journal.runs {
        if let Some(w) = r.pv_words.as_ref().filter(|w| w.0 && w.2.is_some()) {
            first.entry(&*r.variant).or_insert(w);
        }
    }
    h.variants
        .iter()
        .filter_map(|v| {
            let (_, lines, intent) = first.get(v.as_str())?.as_ref();
            let said = intent
                .as_ref()?
                .disagreement(&h.runs_on.accel, h.guest_vcpus, lines);
            said.map(|s| format!("{v}: {s}"))
        })
        .collect()
}

/// The valid primary results of a cell (guest 0, measured): the one place that decides which
/// of its counted records are samples (every statistic and telemetry column goes through it).
/// A host probe the header journaled ([`crate::telemetry::host_speed::HostProbe`]), in words.
fn probe_words<T: crate::telemetry::host_speed::HostProbe>(
    journaled: Option<&serde_json::Value>,
) -> Option<String> {
    serde_json::from_value::<T>(journaled?.clone())
        .ok()
        .map(|h| h.describe())
}

fn primary<'a>(records: &'a [&'a RunDigest]) -> impl Iterator<Item = &'a RunDigest> + 'a {
    records
        .iter()
        .copied()
        .filter(|r| r.ok && !r.warmup && super::digest::is_primary_guest(r.guest))
}

fn metric_values<'a>(records: impl Iterator<Item = &'a RunDigest>, metric: &str) -> (Vec<f64>, Vec<u32>) {
    records
        .filter_map(|r| r.metric(metric).map(|v| (v, r.run)))
        .unzip()
}

/// A cell's counted records (every guest's, in journal order) with its valid measured results
/// grouped once: each its primary record and its attempt's records, in the order of the
/// primary records. What every figure of the cell reads its headline values from.
struct CellRecords<'a> {
    records: &'a [&'a RunDigest],
    results: Vec<(&'a RunDigest, Vec<&'a RunDigest>)>,
    from: HeadlineFrom,
}

impl<'a> CellRecords<'a> {
    fn of(records: &'a [&'a RunDigest], from: HeadlineFrom) -> Self {
        // The counted records of a measured run are one attempt's.
        let mut of_run: HashMap<u32, Vec<&'a RunDigest>> = HashMap::new();
        for &r in records.iter().filter(|r| r.ok && !r.warmup) {
            of_run.entry(r.run).or_default().push(r);
        }
        let results = primary(records)
            .map(|p| (p, of_run.remove(&p.run).unwrap_or_default()))
            .collect();
        Self {
            records,
            results,
            from,
        }
    }

    /// Each valid result's primary record and its headline value of `metric`
    /// ([`headline_of`]: guest 0's, or every guest's mean).
    fn headlines<'s>(&'s self, metric: &'s str) -> impl Iterator<Item = (&'a RunDigest, f64)> + 's {
        self.results
            .iter()
            .filter_map(move |(p, result)| Some((*p, headline_of(result, metric, self.from)?)))
    }

    /// [`Self::headlines`]' values and runs.
    fn headline_values(&self, metric: &str) -> (Vec<f64>, Vec<u32>) {
        self.headlines(metric).map(|(r, v)| (v, r.run)).unzip()
    }

    /// The headline values with where the design put them; with `quiet_only`, not those
    /// counted though the host disturbed them.
    fn samples(&self, metric: &str, quiet_only: bool) -> Vec<Sample<'a>> {
        self.headlines(metric)
            .filter(|(r, _)| !(quiet_only && r.disturbed()))
            .map(|(r, value)| Sample {
                value,
                run: r.run,
                host: r.host.as_deref(),
                boot: r.slot.0,
                bring_up: r.slot.1,
                block: r.block,
                weight: Sample::weight_of(r.slices),
            })
            .collect()
    }
}

/// One cell from its counted records, in journal order.
fn cell(of: &CellRecords<'_>, level: f64, metric: &str, failed: usize) -> Cell {
    let records = of.records;
    let (samples, runs) = of.headline_values(metric);
    let others = records
        .iter()
        .copied()
        .filter(|r| r.ok && !r.warmup && !super::digest::is_primary_guest(r.guest));
    let (other_samples, _) = metric_values(others, metric);
    let metric_mean = |name: &str| mean(&of.headline_values(name).0);
    // Each run's records (one attempt's: only its valid one counts), for the host's share.
    let mut by_run: HashMap<(u32, bool, u32), Vec<&RunDigest>> = HashMap::new();
    for r in records {
        by_run.entry((r.run, r.warmup, r.attempt)).or_default().push(r);
    }
    Cell {
        level,
        summary: summarize(&samples),
        points: runs
            .iter()
            .zip(&samples)
            .map(|(&run, &value)| RunPoint { run, value })
            .collect(),
        outlier_runs: outlier_indices(&samples).into_iter().map(|i| runs[i]).collect(),
        disturbed_runs: disturbed_runs(records, metric),
        failed,
        // Set from every journaled attempt by the caller (`attempts_by_cell`).
        attempts: 0,
        rejected_attempts: 0,
        contention_rate: metric_mean(CONTENTION_METRIC),
        jain: metric_mean(JAIN_METRIC),
        other_guests: summarize(&other_samples),
        vcpu_wait: explain::measure_of(primary(records).map(|r| r.vcpu_wait.clone())),
        guest_steal: explain::measure_of(primary(records).map(|r| r.guest_steal.clone())),
        host_other: explain::measure_of(primary(records).map(|r| {
            let run = &by_run[&(r.run, r.warmup, r.attempt)];
            explain::host_other_of(run.iter().map(|o| &o.host_other))
        })),
        ctxsw_voluntary: metric_mean(CTXSW_VOLUNTARY_METRIC),
        ctxsw_involuntary: metric_mean(CTXSW_INVOLUNTARY_METRIC),
        kvm: explain::kvm_cell_of(
            primary(records).map(|r| r.kvm.as_ref().map(|c| c.iter().map(|(k, v)| (k.clone(), v)))),
        ),
        preemption: super::preemption::aggregate(
            primary(records).filter_map(|r| r.preemption.as_deref().cloned()),
        ),
    }
}

/// The run indices of a cell's valid primary results counted though the host disturbed them.
fn disturbed_runs(records: &[&RunDigest], metric: &str) -> Vec<u32> {
    primary(records)
        .filter(|r| r.disturbed() && r.metric(metric).is_some())
        .map(|r| r.run)
        .collect()
}

/// An effect, or why none could be given, as the model's rows keep them.
fn effect_or_why(tested: Result<Effect, String>) -> (Option<Effect>, Option<String>) {
    match tested {
        Ok(e) => (Some(e), None),
        Err(why) => (None, Some(why)),
    }
}

fn compare_variant(
    variant: &str,
    per_level: &[(f64, &CellRecords<'_>, &CellRecords<'_>)],
    metric: &str,
    better: Better,
    margin: f64,
) -> Comparison {
    let rows: Vec<Row> = per_level
        .iter()
        .map(|&(level, base_of, variant_of)| {
            let (b, _) = base_of.headline_values(metric);
            let (v, _) = variant_of.headline_values(metric);
            let (base, var) = (summarize(&b), summarize(&v));
            let tested = match (b.is_empty(), v.is_empty()) {
                (true, _) | (_, true) => Err("no results on a side".to_string()),
                _ => super::effect::compare(
                    &base_of.samples(metric, false),
                    &variant_of.samples(metric, false),
                    margin,
                ),
            };
            let (effect, why) = effect_or_why(tested);
            // From the ratio, so its sign never disagrees with it.
            let improvement_pct = effect
                .as_ref()
                .and_then(|e| improvement_of_ratio(e.ratio, better));
            let runs_left_out = disturbed_runs(base_of.records, metric).len()
                + disturbed_runs(variant_of.records, metric).len();
            let without_disturbed = (runs_left_out > 0).then(|| {
                let (b, v) = (base_of.samples(metric, true), variant_of.samples(metric, true));
                let (effect, why) = effect_or_why(if b.is_empty() || v.is_empty() {
                    Err("every run of a side was disturbed".to_string())
                } else {
                    super::effect::compare(&b, &v, margin)
                });
                WithoutDisturbed {
                    runs_left_out,
                    effect,
                    why,
                }
            });
            Row {
                level,
                base,
                variant: var,
                improvement_pct,
                effect,
                why,
                p_holm: None,
                p_equivalent_holm: None,
                conclusion: Conclusion::Untested,
                interval: None,
                interval_unadjusted: None,
                equivalence: None,
                within_margin: false,
                rejections: Rejections::default(),
                withheld: None,
                margin_post_hoc: false,
                without_disturbed,
            }
        })
        .collect();
    let pairs: Vec<(f64, f64)> = rows
        .iter()
        .filter_map(|r| Some((r.base.as_ref()?.mean, r.variant.as_ref()?.mean)))
        .filter(|(b, v)| *b > 0.0 && *v > 0.0)
        .collect();
    let geomean = (|| {
        let base = geometric_mean(&pairs.iter().map(|p| p.0).collect::<Vec<_>>())?;
        let var = geometric_mean(&pairs.iter().map(|p| p.1).collect::<Vec<_>>())?;
        Some(Geomean {
            base,
            variant: var,
            ratio: geomean_ratio(&pairs)?,
            improvement_pct: improvement_pct(base, var, better)?,
            levels: pairs.len(),
        })
    })();
    Comparison {
        variant: variant.to_string(),
        rows,
        geomean,
    }
}

/// Each non-baseline variant's retention against the baseline's, from its comparison's rows at
/// the retention's two levels.
fn retention_against_baseline(retention: &mut [Retention], comparisons: &[Comparison], margin: f64) {
    for r in retention.iter_mut() {
        let Some(c) = comparisons.iter().find(|c| c.variant == r.variant) else {
            continue;
        };
        let effect_at = |level: f64| {
            c.rows
                .iter()
                .find(|row| row.level == level)
                .and_then(|row| row.effect.as_ref())
        };
        let Some(from) = effect_at(r.from_level) else {
            continue;
        };
        for row in &mut r.rows {
            row.against_baseline =
                effect_at(row.level).and_then(|e| super::effect::ratio_of_effects(e, from, margin).ok());
        }
    }
}

/// A variant's retention: each higher level against its lowest level with results.
fn retention_of(
    variant: &str,
    per_level: &[(f64, &CellRecords<'_>)],
    metric: &str,
    margin: f64,
) -> Option<Retention> {
    let mut with_results = per_level
        .iter()
        .map(|&(l, of)| (l, of.samples(metric, false)))
        .filter(|(_, s)| !s.is_empty());
    let (from_level, lowest) = with_results.next()?;
    let rows: Vec<RetentionRow> = with_results
        .map(|(level, higher)| {
            let (effect, why) = effect_or_why(super::effect::retention(&lowest, &higher, margin));
            let within_one_boot = effect
                .as_ref()
                .is_some_and(|e| e.unit == super::effect::Unit::Run);
            RetentionRow {
                level,
                effect,
                why,
                against_baseline: None,
                within_one_boot,
            }
        })
        .collect();
    (!rows.is_empty()).then(|| Retention {
        variant: variant.to_string(),
        from_level,
        rows,
    })
}

fn one_look() -> u32 {
    1
}

/// Holm-adjusts every tested comparison row of the model as one family and sets each row's
/// conclusion; returns the family's size. Each p is first multiplied by `looks` (Bonferroni
/// over the looks a stopping rule took, as it did: `sweep::looks::Concluded`).
///
/// Each row gets the interval its conclusion was judged by: at 1 − α_row, where α_row is the
/// level of its Holm step, α / ((m − i + 1) · looks) for the i-th smallest p while every
/// smaller one was rejected, and for the rows from the first step not rejected on, that step's
/// level ([`holm_levels`]). So on every row the interval excludes 1 exactly when the tests say
/// `differs`, and the equivalence test (TOST at the row's step in the family of equivalence
/// p values) is its (1 − 2α_row) interval lying within the margin. A row whose sides' self-
/// checks rejected their attempts at clearly different rates ([`Rejections::unequal`]) is
/// `not concluded` whatever its tests say ([`Row::withheld`]); it stays in the family.
fn conclude(
    workloads: &mut [WorkloadModel],
    baseline: &str,
    alpha: f64,
    looks: u32,
    post_hoc: bool,
) -> usize {
    let rows = || {
        workloads
            .iter()
            .flat_map(|w| &w.comparisons)
            .flat_map(|c| &c.rows)
    };
    let k = f64::from(looks.max(1));
    let tested: Vec<(f64, f64)> = rows()
        .filter_map(|r| {
            r.effect
                .as_ref()
                .map(|e| ((e.p * k).min(1.0), (e.p_equivalent * k).min(1.0)))
        })
        .collect();
    let (ps, ps_eq): (Vec<f64>, Vec<f64>) = tested.iter().copied().unzip();
    let adjusted = holm(&ps).into_iter().zip(holm(&ps_eq));
    let levels = holm_levels(&ps, alpha)
        .into_iter()
        .zip(holm_levels(&ps_eq, alpha));
    let mut per_row = adjusted.zip(levels);
    for c in workloads.iter_mut().flat_map(|w| &mut w.comparisons) {
        for r in &mut c.rows {
            let Some(e) = &r.effect else { continue };
            let ((p, p_eq), (level, level_eq)) = per_row.next().expect("one adjusted pair per tested row");
            (r.p_holm, r.p_equivalent_holm) = (Some(p), Some(p_eq));
            // On the raw p's scale: the level divided by the looks each p was multiplied by.
            r.interval = Some(e.interval(level / k));
            r.interval_unadjusted = Some(Interval {
                confidence: CONFIDENCE,
                low: e.low,
                high: e.high,
            });
            r.equivalence = Some(e.equivalence(level_eq / k));
            r.margin_post_hoc = post_hoc;
            let tested = Conclusion::of(Some((p, p_eq)), alpha);
            match r.rejections.unequal(&c.variant, baseline) {
                Some(why) => {
                    r.conclusion = Conclusion::NotConcluded;
                    r.withheld = Some(Withheld { why, tested });
                }
                _ => {
                    r.conclusion = tested;
                    r.within_margin = tested == Conclusion::Differs && p_eq < alpha;
                }
            }
        }
    }
    tested.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{build, journal, normal, record};

    /// A KVM sweep whose `patched` variant meant `nopvspin` but whose guests said PV spinlocks
    /// were enabled is named in the model (and so in every text format and JSON); `base`,
    /// whose guests said enabled as meant, is not.
    #[test]
    fn a_variant_whose_guests_said_otherwise_is_named() {
        let mut j = journal();
        for r in &mut j.runs {
            let cmdline = if r.variant == "patched" {
                "quiet nopvspin"
            } else {
                "quiet"
            };
            r.extra.insert(
                "group".into(),
                serde_json::json!({"guest_kernel": [{"cmdline": cmdline, "pv_words": ["[0.1] kvm-guest: PV spinlocks enabled"]}]}),
            );
        }
        let m = build_digested(&Digested::of(&j), 0.05, None);
        assert_eq!(m.pv_disagreements.len(), 1, "{:?}", m.pv_disagreements);
        assert!(
            m.pv_disagreements[0].starts_with("patched: meant `nopvspin`"),
            "{:?}",
            m.pv_disagreements
        );
        let md = crate::testing::render(&j, crate::report::Format::Md, &Default::default()).unwrap();
        assert!(
            md.contains("variant not as meant: patched: meant `nopvspin`"),
            "{md}"
        );
        // Streamed from a journal file the same.
        let d = tempfile::tempdir().unwrap();
        let mut w = crate::journal::JournalWriter::open(d.path()).unwrap();
        w.append(&crate::journal::Entry::Sweep(Box::new(j.header.clone())))
            .unwrap();
        for r in &j.runs {
            w.append(&crate::journal::Entry::Run(Box::new(r.clone())))
                .unwrap();
        }
        drop(w);
        let streamed = build_digested(&Digested::read(d.path(), true).unwrap(), 0.05, None);
        assert_eq!(streamed.pv_disagreements, m.pv_disagreements);
    }

    #[test]
    fn a_run_of_guests_that_all_ran_the_workload_is_worth_their_mean() {
        // The fixture's run 0 of base at 0.5x (hackbench): guest 0 10.0 s, guest 1 11.0 s.
        let mut j = journal();
        let base_05 = |m: &Model| {
            let c = &m.workloads[0].series[0].cells[0];
            (c.summary.as_ref().unwrap().clone(), c.points.clone())
        };
        // A journal from before the choice reads guest 0's alone.
        let (s, points) = base_05(&build(&j, 0.05, None));
        assert!((s.mean - 10.0).abs() < 1e-12, "{s:?}");
        assert_eq!(points[0].value, 10.0);
        j.header.headline_from = HeadlineFrom::EveryGuest;
        let m = build(&j, 0.05, None);
        let (s, points) = base_05(&m);
        assert_eq!((s.n, points[0].run, points[0].value), (3, 0, 10.5));
        assert!((s.mean - (10.5 + 10.2 + 9.8) / 3.0).abs() < 1e-12, "{s:?}");
        // Still one sample per run: the comparison pairs runs, not guests.
        let e = m.workloads[0].comparisons[0].rows[0].effect.as_ref().unwrap();
        assert_eq!((e.n_base, e.n_variant), (3, 3), "{e:?}");
        // The ratio of the sides' geometric means, run 0 at its guests' mean.
        let expected = ((9.0f64 * 9.1 * 8.9).ln() - (10.5f64 * 10.2 * 9.8).ln()) / 3.0;
        assert!((e.ratio.ln() - expected).abs() < 1e-12, "{e:?}");
        // Guest 1's own figure is still shown beside them.
        assert_eq!(
            m.workloads[0].series[0].cells[0]
                .other_guests
                .as_ref()
                .unwrap()
                .mean,
            11.0
        );
    }

    #[test]
    fn cells_and_comparisons() {
        let m = build(&journal(), 0.05, None);
        assert_eq!(m.variants, ["base", "patched"]);
        assert_eq!(m.levels, [0.5, 1.0]);
        let hb = &m.workloads[0];
        assert_eq!(
            (hb.workload.as_str(), hb.better, hb.lock),
            ("hackbench", Better::Lower, false)
        );
        let c = &&hb.series[0].cells[0];
        let s = c.summary.as_ref().unwrap();
        assert_eq!((s.n, c.failed), (3, 1));
        assert!((s.mean - 10.0).abs() < 1e-12);
        assert_eq!(c.other_guests.as_ref().unwrap().mean, 11.0);
        assert_eq!((c.contention_rate, c.jain), (None, None));

        let row = &hb.comparisons[0].rows[0];
        // From the ratio (below), lower is better: (1 - 0.900082988508867) * 100.
        assert!(
            (row.improvement_pct.unwrap() - 9.9917011491133).abs() < 1e-9,
            "{row:?}"
        );
        // Each of the fixture's runs is a bring-up of its own, all in one block: unpaired over
        // bring-ups (here, runs), and the row says so.
        // scipy 1.16: ttest_ind(log([9.0, 9.1, 8.9]), log([10.0, 10.2, 9.8]), equal_var=False)
        //   → statistic=-7.968256940603644, pvalue=0.003543624615619606, df=3.1269986077160152
        let e = row.effect.as_ref().unwrap();
        assert_eq!((e.unit, e.paired), (crate::stats::effect::Unit::BringUp, false));
        assert!(
            e.note.as_deref().unwrap().contains("fewer than 2 blocks"),
            "{e:?}"
        );
        assert!((e.p - 0.003543624615619606).abs() < 1e-9, "{e:?}");
        assert!((e.df - 3.1269986077160152).abs() < 1e-9, "{e:?}");
        assert!((e.ratio - 0.900082988508867).abs() < 1e-12, "{e:?}");
        // Holm over the model's 4 tested rows: the other p are 0.5732150885277965 (hackbench
        // 1x), 0.07395008761239544 and 0.0002148051050902624 (lock 0.5x, 1x), so 0.00354 is
        // the second smallest: × 3 = 0.010630873846858818.
        assert_eq!(m.family, 4);
        assert!((row.p_holm.unwrap() - 3.0 * 0.003543624615619606).abs() < 1e-12);
        assert_eq!(row.conclusion, Conclusion::Differs);
        // Its interval is at the level of its Holm step, the second: 1 - 0.05/3. scipy:
        //   ttest_ind(log(b), log(a), equal_var=False).confidence_interval(1 - 0.05/3)
        //   → exp: (0.8459726849786089, 0.9576543079798595)
        let i = row.interval.unwrap();
        assert!((i.confidence - (1.0 - 0.05 / 3.0)).abs() < 1e-15, "{i:?}");
        assert!((i.low - 0.8459726849786089).abs() < 1e-9 && (i.high - 0.9576543079798595).abs() < 1e-9);
        // The unadjusted 95 % interval is kept beside it.
        let u = row.interval_unadjusted.unwrap();
        assert_eq!((u.confidence, u.low, u.high), (0.95, e.low, e.high));
        // The smallest p (lock 1x) at 1 - 0.05/4; the third (lock 0.5x, 2 × 0.074 ≥ 0.05) is
        // where Holm stops, and it and the fourth are at its level, 1 - 0.05/2. scipy as above:
        //   lock 1x (0.9875): (1.4006588935963977, 1.828900960275576); lock 0.5x (0.975):
        //   (0.9187737479290494, 1.570529680614562); hackbench 1x (0.975): (0.8901097806008812,
        //   1.1804269626769321)
        let at = |w: usize, l: usize| m.workloads[w].comparisons[0].rows[l].interval.unwrap();
        for (i, c, lo, hi) in [
            (at(1, 1), 0.9875, 1.4006588935963977, 1.828900960275576),
            (at(1, 0), 0.975, 0.9187737479290494, 1.570529680614562),
            (at(0, 1), 0.975, 0.8901097806008812, 1.1804269626769321),
        ] {
            assert!((i.confidence - c).abs() < 1e-15, "{i:?}");
            assert!((i.low - lo).abs() < 1e-9 && (i.high - hi).abs() < 1e-9, "{i:?}");
        }
        // Not rejected on either side: both attempts and rejections counted, nothing withheld.
        assert_eq!(
            (row.rejections.base.attempts, row.rejections.base.empty_slots),
            (4, 1),
            "base hackbench 0.5x: 3 counted runs and one failed: {:?}",
            row.rejections
        );
        assert_eq!(row.rejections.fisher_p, Some(1.0));
        assert!(row.withheld.is_none() && !row.within_margin && !row.margin_post_hoc);
        let r1 = &hb.comparisons[0].rows[1];
        assert!((r1.p_holm.unwrap() - 0.5732150885277965).abs() < 1e-9, "{r1:?}");
        assert_eq!(r1.conclusion, Conclusion::NotConcluded);
        assert_eq!(
            m.workloads[1].comparisons[0].rows[0].conclusion,
            Conclusion::NotConcluded
        );
        assert_eq!(
            m.workloads[1].comparisons[0].rows[1].conclusion,
            Conclusion::Differs
        );
        // Retention of each variant, 1x against 0.5x (base hackbench: 20 / 10 = 2.0).
        let kept = &hb.retention[0];
        assert_eq!((kept.variant.as_str(), kept.from_level), ("base", 0.5));
        let e = kept.rows[0].effect.as_ref().unwrap();
        assert!((e.ratio - (20.0f64 * 21.0 * 19.0).cbrt() / (10.0f64 * 10.2 * 9.8).cbrt()).abs() < 1e-12);
        // Each run a bring-up of its own: unpaired over bring-ups (stats::effect's test has the
        // one-bring-up-per-level case).
        assert_eq!(
            (e.unit, e.note.as_deref()),
            (crate::stats::effect::Unit::BringUp, None)
        );

        let lock = &m.workloads[1];
        assert!(lock.lock);
        let cell = &&lock.series[1].cells[1];
        assert!((cell.contention_rate.unwrap() - 0.4).abs() < 1e-12);
        assert!((cell.jain.unwrap() - 0.9).abs() < 1e-12);
        // Telemetry of the three runs: wait 0.42, 0.44, 0.46; steal 0.05; halts 1000, 2000, 3000.
        assert_eq!(cell.vcpu_wait.samples.len(), 3);
        assert!((cell.vcpu_wait.mean().unwrap() - 0.44).abs() < 1e-12);
        assert!((cell.guest_steal.mean().unwrap() - 0.05).abs() < 1e-12);
        assert!(
            (cell.host_other.mean().unwrap() - 0.1).abs() < 1e-9,
            "{:?}",
            cell.host_other
        );
        assert_eq!(cell.kvm.counters["halt_exits"], 2000.0);
        assert_eq!(
            (cell.ctxsw_voluntary, cell.ctxsw_involuntary),
            (Some(101.0), Some(202.0))
        );
        assert_eq!(
            cell.points.iter().map(|p| p.value).collect::<Vec<_>>(),
            [800.0, 820.0, 780.0]
        );
        // hackbench was journaled without telemetry: not measured, with the reason.
        let old = &hb.series[0].cells[0];
        assert!(old.vcpu_wait.summary.is_none());
        assert!(
            old.vcpu_wait
                .unavailable
                .as_deref()
                .unwrap()
                .contains("not recorded")
        );
        // Under TCG the same records' steal is no measurement.
        let mut tcg = journal();
        tcg.header.runs_on.accel = "tcg".into();
        let m = build(&tcg, 0.05, None);
        let c = &m.workloads[1].series[0].cells[0];
        assert!(c.guest_steal.summary.is_none());
        assert!(c.guest_steal.unavailable.as_deref().unwrap().contains("TCG"));
        assert!(
            c.vcpu_wait.summary.is_some(),
            "vCPU wait is measured under TCG too"
        );
    }

    /// `n` attempts of `variant`'s runs at `level` of `workload` rejected by the self-checks
    /// (each an attempt after the fixture's counted ones).
    fn reject(j: &mut crate::journal::Journal, variant: &str, level: f64, workload: &str, n: u32) {
        for i in 0..n {
            let mut r = record(variant, level, workload, i % 3, &[]);
            (r.attempt, r.ok) = (2 + i / 3, false);
            r.error = Some(format!(
                "{}calibration_drift: calibration drifted x1.31 during the run",
                crate::journal::SELF_CHECK_REASON
            ));
            j.runs.push(r);
        }
    }

    /// A row whose sides the self-checks rejected at clearly different rates is not concluded,
    /// saying why and what its tests said; at rates alike it stands.
    #[test]
    fn unequal_rejections_leave_a_row_not_concluded_with_the_reason() {
        // lock-ticket at 1x differs (the fixture). 9 of patched's 12 attempts rejected, none of
        // base's 3: scipy fisher_exact([[9, 3], [0, 3]]).pvalue → 0.043956043956043966.
        let mut j = journal();
        reject(&mut j, "patched", 1.0, "lock-ticket", 9);
        let m = build(&j, 0.05, None);
        let row = &m.workloads[1].comparisons[0].rows[1];
        let r = &row.rejections;
        assert_eq!(
            (
                r.variant.attempts,
                r.variant.rejected,
                r.base.attempts,
                r.base.rejected
            ),
            (12, 9, 3, 0)
        );
        assert!(
            (r.fisher_p.unwrap() - 0.043956043956043966).abs() < 1e-12,
            "{r:?}"
        );
        assert_eq!(row.conclusion, Conclusion::NotConcluded);
        let w = row.withheld.as_ref().unwrap();
        assert_eq!(w.tested, Conclusion::Differs);
        assert_eq!(
            w.why,
            "self-checks rejected 9/12 attempts of patched vs 0/3 of base: Fisher p = 0.044"
        );
        // Its interval still says what the tests said: 1 lies outside.
        assert!(!row.interval.unwrap().contains(1.0));
        // The same row stays in the family: Holm is over the same 4 rows.
        assert_eq!(m.family, 4);
        // 3 of 6 against 0 of 3: Fisher p 0.46 (scipy), the rates not clearly different.
        let mut j = journal();
        reject(&mut j, "patched", 1.0, "lock-ticket", 3);
        let m = build(&j, 0.05, None);
        let row = &m.workloads[1].comparisons[0].rows[1];
        assert_eq!(row.conclusion, Conclusion::Differs, "{:?}", row.rejections);
        assert!(row.withheld.is_none());
        assert_eq!(row.rejections.variant.rejected_words(), "3/6");
    }

    /// Two variants sharing guests, `rounds` rounds of base `b(r)` and variant `v(r)` at 1x.
    fn shared(rounds: u32, b: impl Fn(u32) -> f64, v: impl Fn(u32) -> f64) -> crate::journal::Journal {
        let mut j = journal();
        j.header.levels = vec![1.0];
        j.header.workloads.retain(|w, _| w == "lock-ticket");
        j.runs.clear();
        for r in 0..rounds {
            for (variant, x) in [("base", b(r)), ("patched", v(r))] {
                let mut rec = record(variant, 1.0, "lock-ticket", r, &[("ops_per_sec", x)]);
                rec.slot = crate::journal::Slot {
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

    /// A difference shown, and shown smaller than the margin: "differs, within ±margin".
    #[test]
    fn a_small_sure_difference_differs_within_the_margin() {
        let wobble = |r: u32| 1.0 + 0.004 * [0.0, 1.0, -1.0, 0.5, -0.5, 0.2][r as usize % 6];
        let j = shared(
            6,
            |r| 1000.0 * wobble(r),
            |r| 1020.0 * wobble(r) * (1.0 + 0.001 * f64::from(r % 2)),
        );
        let m = build(&j, 0.05, None);
        let row = &m.workloads[0].comparisons[0].rows[0];
        assert_eq!(row.conclusion, Conclusion::Differs, "{row:?}");
        assert!(row.within_margin, "{row:?}");
        let eq = row.equivalence.unwrap();
        assert!(eq.within && eq.low > 1.0 / 1.05 && eq.high < 1.05, "{eq:?}");
        // A one-row family without looks: tested at α itself, TOST at the 90 % interval.
        assert!((row.interval.unwrap().confidence - 0.95).abs() < 1e-15);
        assert!((eq.confidence - 0.90).abs() < 1e-15 && (eq.alpha - 0.05).abs() < 1e-15);
        // The same ratio with a 1 % margin: it differs and is not within it.
        let m = build_with_margin(
            &Digested::of(&j),
            &crate::journal::accounting::settle(&Digested::of(&j).runs),
            0.05,
            None,
            Some(0.01),
        );
        let row = &m.workloads[0].comparisons[0].rows[0];
        assert_eq!((row.conclusion, row.within_margin), (Conclusion::Differs, false));
        // %improvement from the ratio: + for a higher-is-better ratio above 1.
        assert!(row.improvement_pct.unwrap() > 1.9, "{row:?}");
    }

    /// `report --margin` other than the one the sweep fixed before its data marks every
    /// tested row post hoc; the fixed one changes nothing.
    #[test]
    fn a_margin_given_after_the_data_is_post_hoc() {
        let of = |journaled: Option<f64>, looks: Option<u32>, given: Option<f64>| {
            let mut j = journal();
            (j.header.margin, j.header.looks) = (journaled, looks);
            let d = Digested::of(&j);
            build_with_margin(
                &d,
                &crate::journal::accounting::settle(&d.runs),
                0.05,
                None,
                given,
            )
        };
        // Stopped on its conclusions at a journaled ±5 %, reported at ±3 %.
        let m = of(Some(0.05), Some(4), Some(0.03));
        assert_eq!(
            m.margin_post_hoc,
            Some(MarginPostHoc {
                fixed: 0.05,
                stopped_on_conclusions: true
            })
        );
        let rows: Vec<&Row> = m
            .workloads
            .iter()
            .flat_map(|w| &w.comparisons)
            .flat_map(|c| &c.rows)
            .collect();
        assert!(rows.iter().all(|r| r.margin_post_hoc), "every tested row");
        // At the journaled margin: nothing changes.
        assert_eq!(of(Some(0.05), Some(4), Some(0.05)), of(Some(0.05), Some(4), None));
        assert_eq!(of(Some(0.05), Some(4), None).margin_post_hoc, None);
        // Stopped on conclusions at the default (no margin journaled): post hoc too.
        assert!(of(None, Some(4), Some(0.03)).margin_post_hoc.is_some());
        // A fixed run count whose scenario set a margin: post hoc, not stopped on it.
        assert_eq!(
            of(Some(0.02), None, Some(0.03))
                .margin_post_hoc
                .map(|p| p.stopped_on_conclusions),
            Some(false)
        );
        // Nothing fixed before the data (a fixed count at the default): not post hoc.
        assert_eq!(of(None, None, Some(0.03)).margin_post_hoc, None);
    }

    /// On random sweeps (2 to 6 variants sharing guests, 1 to 3 levels, 3 to 10 rounds,
    /// 1 to 4 looks, some attempts rejected), every tested row's printed interval excludes 1
    /// exactly when its tests say `differs`, its equivalence interval lies within the margin
    /// exactly when they say `equivalent` (or "differs, within"), and its %improvement has the
    /// sign of its ratio's side of 1.
    #[test]
    fn every_rows_interval_says_what_its_conclusion_says() {
        let mut rng = fastrand::Rng::with_seed(2047);
        let (mut seen, mut differs, mut equivalent, mut withheld) = (0, 0, 0, 0);
        for _ in 0..60 {
            let variants: Vec<String> = (0..rng.usize(2..=6)).map(|i| format!("v{i}")).collect();
            let levels: Vec<f64> = [1.0, 1.5, 2.0][..rng.usize(1..=3)].to_vec();
            let mut j = journal();
            j.header.variants = variants.clone();
            j.header.baseline = variants[0].clone();
            j.header.levels = levels.clone();
            j.header.workloads.retain(|w, _| w == "lock-ticket");
            j.header.looks = Some(rng.u32(1..=4));
            j.runs.clear();
            let rounds = rng.u32(3..=10);
            let sd = [0.004, 0.015, 0.04][rng.usize(0..3)];
            for (li, &level) in levels.iter().enumerate() {
                for (vi, v) in variants.iter().enumerate() {
                    let shift = if vi == 0 {
                        0.0
                    } else {
                        [0.0, 0.01, 0.03, -0.08][rng.usize(0..4)]
                    };
                    for r in 0..rounds {
                        let x = 1000.0 * (shift + sd * normal(&mut rng)).exp();
                        let mut rec = record(v, level, "lock-ticket", r, &[("ops_per_sec", x)]);
                        rec.slot = crate::journal::Slot {
                            boot: li as u32,
                            bring_up: 1,
                            seq: 0,
                            block: 0,
                        };
                        j.runs.push(rec);
                    }
                    if rng.u32(0..8) == 0 {
                        reject(&mut j, v, level, "lock-ticket", rng.u32(1..=12));
                    }
                }
            }
            let m = build(&j, 0.05, None);
            for r in m
                .workloads
                .iter()
                .flat_map(|w| &w.comparisons)
                .flat_map(|c| &c.rows)
            {
                let Some(e) = &r.effect else { continue };
                let tested = r.withheld.as_ref().map_or(r.conclusion, |w| w.tested);
                let interval = r.interval.unwrap();
                assert_eq!(!interval.contains(1.0), tested == Conclusion::Differs, "{r:?}");
                let eq = r.equivalence.unwrap();
                assert_eq!(
                    eq.within,
                    tested == Conclusion::Equivalent
                        || (tested == Conclusion::Differs && r.p_equivalent_holm.unwrap() < 0.05),
                    "{r:?}"
                );
                if r.withheld.is_none() {
                    assert_eq!(
                        r.within_margin,
                        tested == Conclusion::Differs && eq.within,
                        "{r:?}"
                    );
                }
                let imp = r.improvement_pct.unwrap();
                assert_eq!(imp > 0.0, e.ratio > 1.0, "higher is better: {imp} {}", e.ratio);
                seen += 1;
                differs += usize::from(tested == Conclusion::Differs);
                equivalent += usize::from(tested == Conclusion::Equivalent);
                withheld += usize::from(r.withheld.is_some());
            }
        }
        assert!(
            differs > 0 && equivalent > 0 && withheld > 0,
            "{seen}: {differs} {equivalent} {withheld}"
        );
    }

    #[test]
    fn geomean_row() {
        let m = build(&journal(), 0.05, None);
        let g = m.workloads[0].comparisons[0].geomean.as_ref().unwrap();
        // hackbench means: base 10, 20; patched 9, 20.5.
        // python3: math.sqrt(10*20)=14.142135623730951, math.sqrt(9*20.5)=13.583077707206124
        //   (14.142135623730951-13.583077707206124)/14.142135623730951*100 = 3.9531364385072787
        assert!((g.base - 14.142135623730951).abs() < 1e-9);
        assert!((g.variant - 13.583077707206124).abs() < 1e-9);
        assert!((g.ratio - 13.583077707206124 / 14.142135623730951).abs() < 1e-12);
        assert!((g.improvement_pct - 3.9531364385072787).abs() < 1e-9);
        assert_eq!(g.levels, 2);
    }

    #[test]
    fn outlier_runs_are_named_by_run_index() {
        let mut j = journal();
        let xs = [10.1, 10.3, 9.9, 10.0, 10.2, 14.8, 10.05];
        j.runs
            .retain(|r| r.workload != "hackbench" || r.variant != "patched" || r.level != 0.5);
        for (i, x) in xs.into_iter().enumerate() {
            j.runs.push(record(
                "patched",
                0.5,
                "hackbench",
                10 + i as u32,
                &[("seconds", x)],
            ));
        }
        let m = build(&j, 0.05, None);
        assert_eq!(m.workloads[0].series[1].cells[0].outlier_runs, [15]);
    }
}
