//! What a comparison can bet on: the variant-to-baseline ratio estimated over the units the
//! design replicated, its interval, and the tests a conclusion is drawn from.
//!
//! The unit of replication is what varied between the two sides (DESIGN.md):
//! - variants sharing guests ran each round in the same guests, one after the other: the unit
//!   is the round, and each round gives one ratio (the boot and the minute cancel in it);
//! - variants with guests of their own ran in blocks, one bring-up each, interleaved (block k
//!   of every variant at a level before block k + 1 of any): the unit is the block, whose runs
//!   are averaged (geometric mean) and paired with the baseline's block k;
//! - where the pairing was lost (a slot without a valid result on one side, two sweeps
//!   compared), the sides are compared unpaired over their
//!   independent units: bring-ups for variants with guests of their own (the runs inside one
//!   bring-up are never independent replicates of such a variant), runs for variants sharing
//!   guests, and the [`Effect::note`] says so.
//!
//! The effect is the geometric mean of the ratios with a Student t interval on their
//! logarithms (unpaired: Welch's on each side's log values). Where the units are of unequal
//! size (journals of earlier versions gave a sliced round's comparisons still open the slices
//! of those that had left it), each unit weighs as its slices do:
//! a weighted mean of the log ratios, its standard error the sandwich (robust) estimate, which
//! needs no model of how a unit's spread shrinks with its size, and Kish's effective number of
//! units less one as the degrees of freedom ([`paired`]). With equal sizes these are the plain
//! mean, its standard error and n − 1. `p` tests a ratio of 1; the two
//! one-sided tests (TOST) test "outside the margin" (`p_equivalent`), the margin symmetric in
//! log space ([`margin_bounds`]: the ratio within [1/(1 + margin), 1 + margin], ±ln(1 + margin)
//! around 0, so a variant equivalent to the baseline has the baseline equivalent to it).
//!
//! A report decides over its whole family of comparisons with [`holm`]-adjusted p values,
//! each p first multiplied by the looks a stopping rule took (`stats::cells`). The interval a
//! row prints is the one its conclusion was judged by: at the level its Holm step tested
//! ([`holm_levels`]; [`Effect::interval`]), so "the interval excludes 1" holds exactly when the
//! row `differs`. `equivalent` is judged by TOST at the level of the row's step in the family of
//! equivalence tests, which is the (1 − 2α) interval lying inside the margin
//! ([`Effect::equivalence`]). The [`CONFIDENCE`] interval (`low`, `high`) is kept too, labelled
//! unadjusted: what the row's data say alone, before the family and the looks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

use super::summary::{mean, variance};

/// Default equivalence margin: a ratio within [1/1.05, 1.05] is "the same" (±5 %,
/// [`margin_bounds`]).
pub const DEFAULT_MARGIN: f64 = 0.05;

/// Confidence of an [`Effect`]'s own interval (`low`, `high`): unadjusted for the family of
/// comparisons or the looks of a stopping rule (retention rows print it; comparison rows print
/// [`Effect::interval`] at their conclusion's level and keep this one as `interval_unadjusted`).
pub const CONFIDENCE: f64 = 0.95;

/// The equivalence margin's bounds on the log ratio: ±ln(1 + margin), i.e. a ratio within
/// [1/(1 + margin), 1 + margin] — symmetric in log space, so swapping the two sides of a
/// comparison leaves its equivalence unchanged (1 − margin would make the lower bound wider:
/// ln 0.95 = −0.0513 against ln 1.05 = +0.0488).
pub fn margin_bounds(margin: f64) -> (f64, f64) {
    let b = (1.0 + margin).ln();
    (-b, b)
}

/// A ratio's interval at a stated confidence.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Two-sided confidence, e.g. 0.9833 for a row whose Holm step tested at α = 0.0167.
    pub confidence: f64,
    pub low: f64,
    pub high: f64,
}

impl Interval {
    #[cfg(test)]
    pub fn contains(&self, ratio: f64) -> bool {
        self.low <= ratio && ratio <= self.high
    }
}

/// How `equivalent` was judged: the two one-sided tests at `alpha` each, which is the
/// (1 − 2·alpha) interval (`confidence`, `low`, `high`) lying within the margin's bounds
/// ([`margin_bounds`] as ratios: `margin_low` = 1/(1 + margin), `margin_high` = 1 + margin).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Equivalence {
    /// The level each one-sided test was run at (the row's Holm step in the family of
    /// equivalence tests, looks included).
    pub alpha: f64,
    /// 1 − 2·alpha.
    pub confidence: f64,
    pub low: f64,
    pub high: f64,
    pub margin_low: f64,
    pub margin_high: f64,
    /// The interval lies within [margin_low, margin_high]: both one-sided tests reject.
    pub within: bool,
}

/// What one unit of a comparison is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Unit {
    /// One round of variants sharing guests (paired).
    Round,
    /// One block: a bring-up of each side's guests, interleaved (paired).
    Block,
    /// One bring-up of a side's guests (unpaired).
    BringUp,
    /// One run (unpaired).
    Run,
}

impl Unit {
    /// The unit's name in the plural, as reports say it (`rounds`, `bring-up pairs`, …).
    pub fn plural(self) -> &'static str {
        match self {
            Unit::Round => "rounds",
            Unit::Block => "bring-up pairs",
            Unit::BringUp => "bring-ups",
            Unit::Run => "runs",
        }
    }
}

/// A ratio of two sides (variant / baseline, or a level / the lowest level) over their units.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Effect {
    pub unit: Unit,
    pub paired: bool,
    /// Units of each side (pairs, when paired).
    pub n_base: usize,
    pub n_variant: usize,
    /// Geometric-mean ratio, variant / base (not signed by "better").
    pub ratio: f64,
    /// [`CONFIDENCE`] interval of the ratio, unadjusted (see the module doc).
    pub low: f64,
    pub high: f64,
    pub df: f64,
    /// Standard error of the log ratio: with `df`, the interval at any level
    /// ([`Effect::interval`]).
    #[serde(default)]
    pub se: f64,
    /// Two-sided p of "the ratio is 1".
    pub p: f64,
    /// The larger p of the two one-sided tests of "the ratio is outside 1 ± margin".
    pub p_equivalent: f64,
    pub margin: f64,
    /// Why the comparison is not the design's paired one, or what it left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Effect {
    /// The two-sided (1 − `alpha`) interval of the ratio: it excludes 1 exactly when `p` <
    /// `alpha` (the same t distribution, the same standard error).
    pub fn interval(&self, alpha: f64) -> Interval {
        let q = self.quantile(1.0 - alpha / 2.0);
        let m = self.ratio.ln();
        Interval {
            confidence: 1.0 - alpha,
            low: (m - q * self.se).exp(),
            high: (m + q * self.se).exp(),
        }
    }

    /// The equivalence test at `alpha` as an interval: the (1 − 2·`alpha`) interval against the
    /// margin's bounds. `within` exactly when `p_equivalent` < `alpha`.
    pub fn equivalence(&self, alpha: f64) -> Equivalence {
        let q = self.quantile(1.0 - alpha);
        let m = self.ratio.ln();
        let (lo, hi) = margin_bounds(self.margin);
        let (low, high) = (m - q * self.se, m + q * self.se);
        Equivalence {
            alpha,
            confidence: 1.0 - 2.0 * alpha,
            low: low.exp(),
            high: high.exp(),
            margin_low: lo.exp(),
            margin_high: hi.exp(),
            within: lo < low && high < hi,
        }
    }

    /// The t quantile at `prob` of the effect's degrees of freedom.
    fn quantile(&self, prob: f64) -> f64 {
        StudentsT::new(0.0, 1.0, self.df).map_or(f64::NAN, |t| t.inverse_cdf(prob))
    }

    /// `3 rounds`, `4 bring-up pairs`, `3+4 bring-ups`.
    pub fn units_words(&self) -> String {
        if self.paired {
            format!("{} {}", self.n_base, self.unit.plural())
        } else {
            format!("{}+{} {}", self.n_base, self.n_variant, self.unit.plural())
        }
    }
}

/// One valid primary result and where the design put it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample<'a> {
    pub value: f64,
    pub run: u32,
    pub host: Option<&'a str>,
    /// The boot group and bring-up ([`crate::journal::Slot`]).
    pub boot: u32,
    pub bring_up: u32,
    pub block: u32,
    /// How much the value is worth against the side's others: the slices it is over (1 for a
    /// whole run, [`crate::journal::RunRecord::slices`]).
    pub weight: f64,
}

impl Sample<'_> {
    /// The weight of a record's value over `slices` slices (None: a whole run, 1).
    pub fn weight_of(slices: Option<u32>) -> f64 {
        slices.map_or(1.0, f64::from)
    }
}

/// The ratio of `variant` to `base` over the units the design replicated (module doc), or
/// why none can be given.
pub fn compare(base: &[Sample], variant: &[Sample], margin: f64) -> Result<Effect, String> {
    if base
        .iter()
        .chain(variant)
        .any(|s| !(s.value > 0.0 && s.value.is_finite()))
    {
        return Err("a value ≤ 0 has no logarithm: no ratio".into());
    }
    let boots = |side: &[Sample]| {
        side.iter()
            .map(|s| s.boot)
            .collect::<std::collections::BTreeSet<u32>>()
    };
    let (a, b) = (boots(base), boots(variant));
    if a.len() == 1 && a == b {
        // Same guests: a round is the unit; its two runs are one pair.
        let (pairs, left) = paired_by(base, variant, |s| (s.host, s.run, 0), |v| v[0]);
        if pairs.len() >= 2 {
            let mut e = paired(&pairs, Unit::Round, margin)?;
            if left > 0 {
                add_note(
                    &mut e,
                    format!("{left} run(s) without a partner in their round left out"),
                );
            }
            return Ok(e);
        }
        return unpaired_runs(
            base,
            variant,
            margin,
            "fewer than 2 rounds with both sides' results: unpaired over runs of the same guests",
        );
    }
    // A block weighs one: its spread is the bring-up's, which more runs in it do not shrink.
    let (pairs, left) = paired_by(
        base,
        variant,
        |s| (s.host, s.block, 0),
        |v| (geometric_mean(v).0, 1.0),
    );
    if pairs.len() >= 2 {
        let mut e = paired(&pairs, Unit::Block, margin)?;
        if left > 0 {
            add_note(&mut e, format!("{left} block(s) without a partner left out"));
        }
        return Ok(e);
    }
    let why = "fewer than 2 blocks with both sides' results (or two sweeps compared)";
    let (a, b) = (per_bring_up(base), per_bring_up(variant));
    if a.len() < 2 || b.len() < 2 {
        return Err(format!(
            "{} and {} bring-up(s): the runs of one bring-up are not independent replicates of a variant with guests of its own ({why})",
            a.len(),
            b.len()
        ));
    }
    let mut e = unpaired(&a, &b, Unit::BringUp, margin)?;
    e.note = Some(format!("unpaired: {why}"));
    Ok(e)
}

/// The ratio of `higher` (a cell at a level) to `lower` (the same variant at its lowest level):
/// unpaired, over bring-ups where each side had at least two, else over runs (saying that the
/// interval then leaves boot-to-boot variation out).
pub fn retention(lower: &[Sample], higher: &[Sample], margin: f64) -> Result<Effect, String> {
    if lower
        .iter()
        .chain(higher)
        .any(|s| !(s.value > 0.0 && s.value.is_finite()))
    {
        return Err("a value ≤ 0 has no logarithm: no ratio".into());
    }
    let (a, b) = (per_bring_up(lower), per_bring_up(higher));
    if a.len() >= 2 && b.len() >= 2 {
        return unpaired(&a, &b, Unit::BringUp, margin);
    }
    unpaired_runs(
        lower,
        higher,
        margin,
        "one bring-up per level: runs taken as independent, the interval leaves boot-to-boot variation out",
    )
}

/// The ratio of two independent effects' ratios, `num / den`, with its interval: e.g. a
/// variant's ratio to the baseline at 2x over the same at 1x — how much of its 1x throughput
/// the variant keeps at 2x against how much the baseline keeps (the interaction of variant and
/// level). Each side's standard error is read back from its [`CONFIDENCE`] interval on the log
/// scale; the degrees of freedom are Welch–Satterthwaite's. The two must be independent (two
/// levels' comparisons: different rounds on different guests).
pub fn ratio_of_effects(num: &Effect, den: &Effect, margin: f64) -> Result<Effect, String> {
    let se = |e: &Effect| -> Result<f64, String> {
        let t = StudentsT::new(0.0, 1.0, e.df).map_err(|x| x.to_string())?;
        Ok((e.high / e.low).ln() / (2.0 * t.inverse_cdf(1.0 - (1.0 - CONFIDENCE) / 2.0)))
    };
    let (s1, s2) = (se(num)?, se(den)?);
    let se2 = s1 * s1 + s2 * s2;
    let df = se2 * se2 / (s1.powi(4) / num.df + s2.powi(4) / den.df);
    let mut e = tested(num.ratio.ln() - den.ratio.ln(), se2.sqrt(), df, num.unit, margin)?;
    e.paired = false;
    e.n_base = den.n_base;
    e.n_variant = num.n_base;
    Ok(e)
}

/// Adds `words` to an effect's note.
fn add_note(e: &mut Effect, words: String) {
    e.note = Some(match e.note.take() {
        Some(before) => format!("{before}; {words}"),
        None => words,
    });
}

fn unpaired_runs(base: &[Sample], variant: &[Sample], margin: f64, why: &str) -> Result<Effect, String> {
    let logs = |side: &[Sample]| side.iter().map(|s| s.value.ln()).collect::<Vec<_>>();
    let mut e = unpaired(&logs(base), &logs(variant), Unit::Run, margin)?;
    e.note = Some(why.to_string());
    Ok(e)
}

/// Each side's values keyed by `key`, combined per key by `unit_value` (a unit's value and
/// weight from its samples'), then the keys both sides have: log base unit, log variant unit
/// and the pair's weight; and how many units had no partner.
fn paired_by<'a, K: Ord>(
    base: &[Sample<'a>],
    variant: &[Sample<'a>],
    key: impl Fn(&Sample<'a>) -> K,
    unit_value: impl Fn(&[Weighed]) -> Weighed,
) -> (Vec<Pair>, usize) {
    let group = |side: &[Sample<'a>]| {
        let mut m: BTreeMap<K, Vec<Weighed>> = BTreeMap::new();
        for s in side {
            m.entry(key(s)).or_default().push((s.value, s.weight));
        }
        m
    };
    let (a, mut b) = (group(base), group(variant));
    let (mut pairs, mut left) = (Vec::new(), 0);
    for (k, va) in a {
        match b.remove(&k) {
            Some(vb) => {
                let ((xa, wa), (xb, wb)) = (unit_value(&va), unit_value(&vb));
                pairs.push(Pair {
                    base: xa.ln(),
                    variant: xb.ln(),
                    // The log ratio's variance goes as 1/wa + 1/wb.
                    weight: 2.0 / (1.0 / wa + 1.0 / wb),
                });
            }
            None => left += 1,
        }
    }
    (pairs, left + b.len())
}

/// A value and its weight.
type Weighed = (f64, f64);

/// A paired unit: both sides' log values and its weight.
#[derive(Debug, Clone, Copy)]
struct Pair {
    base: f64,
    variant: f64,
    weight: f64,
}

/// Where a bring-up ran: host, boot group, bring-up.
type BringUpKey<'a> = (Option<&'a str>, u32, u32);

/// Log of the (weighted) geometric mean of each bring-up's values (keyed by host, boot,
/// bring-up).
fn per_bring_up(side: &[Sample]) -> Vec<f64> {
    let mut m: BTreeMap<BringUpKey, Vec<Weighed>> = BTreeMap::new();
    for s in side {
        m.entry((s.host, s.boot, s.bring_up))
            .or_default()
            .push((s.value, s.weight));
    }
    m.values().map(|v| geometric_mean(v).0.ln()).collect()
}

/// The weighted geometric mean of values and their total weight.
fn geometric_mean(v: &[Weighed]) -> Weighed {
    let w: f64 = v.iter().map(|(_, w)| w).sum();
    ((v.iter().map(|(x, wx)| wx * x.ln()).sum::<f64>() / w).exp(), w)
}

/// Paired: the weighted mean of the log ratios with a t interval (module doc): the sandwich
/// standard error, n/(n − 1) · Σ w²(d − m)² / (Σ w)², on Kish's effective n, (Σ w)² / Σ w²,
/// less one degrees of freedom — with equal weights the mean's usual s/√n on n − 1.
fn paired(pairs: &[Pair], unit: Unit, margin: f64) -> Result<Effect, String> {
    let n = pairs.len() as f64;
    let total: f64 = pairs.iter().map(|p| p.weight).sum();
    let m = pairs.iter().map(|p| p.weight * (p.variant - p.base)).sum::<f64>() / total;
    let spread: f64 = pairs
        .iter()
        .map(|p| (p.weight * (p.variant - p.base - m)).powi(2))
        .sum();
    let se = (n / (n - 1.0) * spread).sqrt() / total;
    let effective = total * total / pairs.iter().map(|p| p.weight * p.weight).sum::<f64>();
    let mut e = tested(m, se, effective - 1.0, unit, margin)?;
    e.paired = true;
    e.n_base = pairs.len();
    e.n_variant = pairs.len();
    if let Some(words) = weighed_words(pairs, effective) {
        e.note = Some(words);
    }
    Ok(e)
}

/// What a comparison over units of unequal weight says of them, or None where they weigh alike.
fn weighed_words(pairs: &[Pair], effective: f64) -> Option<String> {
    let (lo, hi) = pairs.iter().fold((f64::INFINITY, 0.0_f64), |(lo, hi), p| {
        (lo.min(p.weight), hi.max(p.weight))
    });
    (hi > lo * (1.0 + 1e-9)).then(|| {
        format!(
            "units weighed by their slices ({lo:.0}–{hi:.0}): worth {effective:.1} of {} equal ones",
            pairs.len()
        )
    })
}

/// Unpaired: Welch's t on the two sides' log values.
fn unpaired(a: &[f64], b: &[f64], unit: Unit, margin: f64) -> Result<Effect, String> {
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let (Some(va), Some(vb)) = (variance(a), variance(b)) else {
        return Err(format!(
            "{} and {} {}: at least 2 a side are needed",
            a.len(),
            b.len(),
            unit.plural()
        ));
    };
    let (va, vb) = (va / na, vb / nb);
    let se2 = va + vb;
    let df = se2 * se2 / (va * va / (na - 1.0) + vb * vb / (nb - 1.0));
    let m = mean(b).unwrap_or(0.0) - mean(a).unwrap_or(0.0);
    let mut e = tested(m, se2.sqrt(), df, unit, margin)?;
    e.n_base = a.len();
    e.n_variant = b.len();
    Ok(e)
}

/// The interval and both tests of a log ratio `m` with standard error `se`.
fn tested(m: f64, se: f64, df: f64, unit: Unit, margin: f64) -> Result<Effect, String> {
    if !(se > 0.0 && se.is_finite() && df > 0.0) {
        return Err(format!("no spread among the {}: no interval", unit.plural()));
    }
    let t = StudentsT::new(0.0, 1.0, df).map_err(|e| e.to_string())?;
    let q = t.inverse_cdf(1.0 - (1.0 - CONFIDENCE) / 2.0);
    let p = (2.0 * t.sf((m / se).abs())).min(1.0);
    let (lo, hi) = margin_bounds(margin);
    let p_equivalent = t.sf((m - lo) / se).max(t.sf((hi - m) / se));
    Ok(Effect {
        unit,
        paired: false,
        n_base: 0,
        n_variant: 0,
        ratio: m.exp(),
        low: (m - q * se).exp(),
        high: (m + q * se).exp(),
        df,
        se,
        p,
        p_equivalent,
        margin,
        note: None,
    })
}

/// Holm's step-down adjustment of a family of p values (same order as given): the k-th
/// smallest is multiplied by (m − k + 1), made monotone, capped at 1.
pub fn holm(ps: &[f64]) -> Vec<f64> {
    let m = ps.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| ps[a].total_cmp(&ps[b]));
    let mut out = vec![0.0; m];
    let mut running: f64 = 0.0;
    for (k, &i) in order.iter().enumerate() {
        running = running.max(((m - k) as f64 * ps[i]).min(1.0));
        out[i] = running;
    }
    out
}

/// The level each p of a family was tested at by Holm's step-down procedure at `alpha` (same
/// order as given): the i-th smallest at α / (m − i + 1) while every smaller one was rejected;
/// from the first that was not on, every later one at that step's level (Holm stops there).
/// So a p is below its level exactly when its [`holm`]-adjusted p is below `alpha`, and an
/// interval at confidence 1 − level excludes the null exactly when the row is rejected. Ties
/// are ordered as [`holm`] orders them (by position).
pub fn holm_levels(ps: &[f64], alpha: f64) -> Vec<f64> {
    let m = ps.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| ps[a].total_cmp(&ps[b]));
    let mut out = vec![0.0; m];
    let mut stopped: Option<f64> = None;
    for (k, &i) in order.iter().enumerate() {
        let level = stopped.unwrap_or(alpha / (m - k) as f64);
        // Rejected as `holm` decides it: (m − k)·p < α for this and every earlier step.
        if stopped.is_none() && ((m - k) as f64 * ps[i]).min(1.0) >= alpha {
            stopped = Some(level);
        }
        out[i] = level;
    }
    out
}

/// What a comparison concludes, in words a reader bets on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Conclusion {
    /// The Holm-adjusted p of "ratio 1" is below α: the variant differs.
    Differs,
    /// The Holm-adjusted p of both one-sided tests against ±margin is below α.
    Equivalent,
    /// Neither: the interval says what is left open.
    NotConcluded,
    /// No ratio could be estimated (the row says why).
    Untested,
}

impl Conclusion {
    pub fn words(self) -> &'static str {
        match self {
            Conclusion::Differs => "differs",
            Conclusion::Equivalent => "equivalent",
            Conclusion::NotConcluded => "not concluded",
            Conclusion::Untested => "untested",
        }
    }

    /// From a row's Holm-adjusted p values (None: untested).
    pub fn of(adjusted: Option<(f64, f64)>, alpha: f64) -> Self {
        match adjusted {
            None => Conclusion::Untested,
            Some((p, _)) if p < alpha => Conclusion::Differs,
            Some((_, p_eq)) if p_eq < alpha => Conclusion::Equivalent,
            Some(_) => Conclusion::NotConcluded,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::normal;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1e-12)
    }

    fn s(value: f64, run: u32, boot: u32, bring_up: u32, block: u32) -> Sample<'static> {
        Sample {
            value,
            run,
            host: None,
            boot,
            bring_up,
            block,
            weight: 1.0,
        }
    }

    /// A variant's retention against the baseline's, from the two levels' paired comparisons,
    /// is Welch's test on the two levels' per-round log ratios (scipy-checked on its own:
    /// `unpaired`): the same ratio, interval and p.
    #[test]
    fn the_ratio_of_two_levels_ratios_is_welchs_test_on_their_rounds() {
        let level = |b: &[f64], v: &[f64]| {
            let base: Vec<Sample> = b
                .iter()
                .enumerate()
                .map(|(i, &x)| s(x, i as u32, 0, 1, 0))
                .collect();
            let var: Vec<Sample> = v
                .iter()
                .enumerate()
                .map(|(i, &x)| s(x, i as u32, 0, 1, 0))
                .collect();
            let d: Vec<f64> = b.iter().zip(v).map(|(b, v)| (v / b).ln()).collect();
            (compare(&base, &var, 0.05).unwrap(), d)
        };
        let (at1, d1) = level(&[100.0, 104.0, 98.0, 101.0], &[102.0, 105.0, 99.5, 103.0]);
        let (at2, d2) = level(&[50.0, 47.0, 55.0], &[80.0, 70.0, 90.0]);
        let e = ratio_of_effects(&at2, &at1, 0.05).unwrap();
        let welch = unpaired(&d1, &d2, Unit::Round, 0.05).unwrap();
        for (got, want) in [
            (e.ratio, welch.ratio),
            (e.low, welch.low),
            (e.high, welch.high),
            (e.p, welch.p),
            (e.df, welch.df),
        ] {
            assert!(close(got, want, 1e-9), "{got} vs {want}: {e:?} {welch:?}");
        }
        assert_eq!((e.n_base, e.n_variant, e.paired), (4, 3, false));
    }

    #[test]
    fn shared_guests_pair_by_round() {
        // One boot group: rounds pair. Log ratios of the three rounds; scipy 1.16:
        //   d = np.log([101/100, 103.5/102, 99.8/99]); ttest_1samp(d, 0).pvalue,
        //   t.interval(0.95, 2, mean(d), sem(d)), TOST: max(t.sf((mean - ln 0.95)/sem, 2),
        //   t.sf((ln 1.05 - mean)/sem, 2)); all exponentiated where a ratio
        let base = [s(100.0, 0, 0, 1, 0), s(102.0, 1, 0, 1, 0), s(99.0, 2, 0, 1, 0)];
        let var = [s(101.0, 0, 0, 1, 0), s(103.5, 1, 0, 1, 0), s(99.8, 2, 0, 1, 0)];
        let e = compare(&base, &var, 0.05).unwrap();
        assert_eq!((e.unit, e.paired, e.n_base), (Unit::Round, true, 3));
        assert_eq!(e.units_words(), "3 rounds");
        assert!(close(e.ratio, GOLD_ROUND.0, 1e-12), "{e:?}");
        assert!(close(e.p, GOLD_ROUND.1, 1e-9), "{e:?}");
        assert!(
            close(e.low, GOLD_ROUND.2, 1e-9) && close(e.high, GOLD_ROUND.3, 1e-9),
            "{e:?}"
        );
        assert!(close(e.p_equivalent, GOLD_ROUND.4, 1e-9), "{e:?}");
        assert_eq!(e.note, None);
    }

    /// Rounds of unequal slices weigh as their slices: the weighted mean of the log ratios,
    /// the sandwich standard error and Kish's effective n less one (by hand, Python 3.11:
    /// d = [0.10, 0.0, 0.04, 0.02], w = [1, 1, 2, 4]; m = Σwd/Σw; se = √(n/(n − 1) Σ(w(d −
    /// m))²)/Σw; df = (Σw)²/Σw² − 1), and the row says so.
    #[test]
    fn rounds_of_unequal_slices_weigh_as_their_slices() {
        let round = |run: u32, value: f64, slices: u32| Sample {
            weight: Sample::weight_of(Some(slices)),
            ..s(value, run, 0, 1, 0)
        };
        let (d, w) = ([0.10, 0.0, 0.04, 0.02], [1, 1, 2, 4]);
        let base: Vec<_> = (0..4).map(|r| round(r, 100.0, w[r as usize])).collect();
        let var: Vec<_> = (0..4)
            .map(|r| round(r, 100.0 * f64::exp(d[r as usize]), w[r as usize]))
            .collect();
        let e = compare(&base, &var, 0.05).unwrap();
        assert!(close(e.ratio.ln(), 0.0325, 1e-9), "{e:?}");
        assert!(close(e.se, 0.013179450544945593, 1e-9), "{e:?}");
        assert!(close(e.df, 1.9090909090909092, 1e-9), "{e:?}");
        assert_eq!(e.n_base, 4);
        assert_eq!(
            e.note.as_deref(),
            Some("units weighed by their slices (1–4): worth 2.9 of 4 equal ones")
        );
        // Equal slices: the plain mean, s/√n and n − 1, no note.
        let base: Vec<_> = (0..4).map(|r| round(r, 100.0, 10)).collect();
        let var: Vec<_> = (0..4)
            .map(|r| round(r, 100.0 * f64::exp(d[r as usize]), 10))
            .collect();
        let e = compare(&base, &var, 0.05).unwrap();
        assert!(close(e.ratio.ln(), 0.04, 1e-9), "{e:?}");
        assert!(close(e.se, 0.02160246899469287, 1e-9), "{e:?}");
        assert!(close(e.df, 3.0, 1e-12), "{e:?}");
        assert_eq!(e.note, None);
    }

    /// Simulated rounds whose slices grow from 10 to 50 (arms leaving the round): the 95 %
    /// interval covers the true ratio about 95 % of the time, whether a round's spread shrinks
    /// with its slices as weighing assumes or not at all (the sandwich error needs no model),
    /// and where it does shrink, the weighed interval is narrower than the unweighed one.
    #[test]
    fn weighed_rounds_cover_the_true_ratio_and_are_sharper_where_slices_help() {
        let mut rng = fastrand::Rng::with_seed(47);
        let slices = [10, 10, 10, 20, 20, 34, 34, 50, 50, 50, 50, 50];
        let truth = 0.97_f64.ln();
        for shrinks in [true, false] {
            let (mut covered, mut width_weighed, mut width_plain) = (0, 0.0, 0.0);
            let sims = 4000;
            for _ in 0..sims {
                let (mut base, mut var) = (Vec::new(), Vec::new());
                for (r, &n) in slices.iter().enumerate() {
                    let sd = if shrinks { 0.11 / f64::from(n).sqrt() } else { 0.04 };
                    let host = normal(&mut rng) * 0.05;
                    let b = 100.0 * f64::exp(host + normal(&mut rng) * sd);
                    let v = 100.0 * f64::exp(host + truth + normal(&mut rng) * sd);
                    for (side, x) in [(&mut base, b), (&mut var, v)] {
                        side.push(Sample {
                            weight: f64::from(n),
                            ..s(x, r as u32, 0, 1, 0)
                        });
                    }
                }
                let e = compare(&base, &var, 0.05).unwrap();
                covered += usize::from(e.low < 0.97 && 0.97 < e.high);
                width_weighed += (e.high / e.low).ln();
                let plain = |side: &[Sample<'static>]| -> Vec<Sample<'static>> {
                    side.iter().map(|x| Sample { weight: 1.0, ..*x }).collect()
                };
                let e = compare(&plain(&base), &plain(&var), 0.05).unwrap();
                width_plain += (e.high / e.low).ln();
            }
            let coverage = covered as f64 / sims as f64;
            assert!(
                (0.935..=0.965).contains(&coverage),
                "shrinks {shrinks}: {coverage}"
            );
            if shrinks {
                // 1/Σn against Σ(1/n)/N² for the means' variances: 0.815 of the SE, less
                // the t quantile's rise with fewer effective rounds (9.5 of 12).
                assert!(
                    width_weighed < 0.9 * width_plain,
                    "{width_weighed} vs {width_plain}"
                );
            }
        }
    }

    #[test]
    fn own_guests_pair_by_block_and_average_the_runs_of_a_block() {
        // Two boot groups; blocks 0..3, two runs each; block geometric means pair.
        let mut base = Vec::new();
        let mut var = Vec::new();
        let b = [(100.0, 101.0), (98.0, 98.5), (103.0, 102.0)];
        let v = [(95.0, 96.0), (94.0, 93.0), (97.5, 98.0)];
        for k in 0..3u32 {
            base.push(s(b[k as usize].0, 2 * k, 0, k + 1, k));
            base.push(s(b[k as usize].1, 2 * k + 1, 0, k + 1, k));
            var.push(s(v[k as usize].0, 2 * k, 1, k + 1, k));
            var.push(s(v[k as usize].1, 2 * k + 1, 1, k + 1, k));
        }
        let e = compare(&base, &var, 0.05).unwrap();
        assert_eq!((e.unit, e.paired, e.n_base), (Unit::Block, true, 3));
        // scipy: gb = [gmean(x) for x in b]; gv likewise; d = log(gv) - log(gb);
        //   exp(mean(d)), ttest_1samp(d, 0).pvalue
        assert!(close(e.ratio, GOLD_BLOCK.0, 1e-12), "{e:?}");
        assert!(close(e.p, GOLD_BLOCK.1, 1e-9), "{e:?}");
        // A lost block leaves 2 pairs, said in the note.
        let e = compare(&base[..4], &var, 0.05).unwrap();
        assert_eq!((e.unit, e.n_base), (Unit::Block, 2));
        assert!(e.note.unwrap().contains("1 block(s)"));
    }

    #[test]
    fn own_guests_in_one_block_are_unpaired_over_bring_ups_never_runs() {
        // One block a side (fewer than 2 to pair): each side one bring-up of three runs. Runs
        // of one boot are not replicates: no test.
        let base = [s(413.8, 0, 0, 1, 0), s(416.8, 1, 0, 1, 0), s(414.2, 2, 0, 1, 0)];
        let var = [s(413.4, 0, 1, 1, 0), s(410.0, 1, 1, 1, 0), s(412.1, 2, 1, 1, 0)];
        let e = compare(&base, &var, 0.05).unwrap_err();
        assert!(e.contains("1 and 1 bring-up(s)"), "{e}");
        // Two bring-ups a side (a retry on fresh guests, say): Welch over bring-up means.
        let base = [s(100.0, 0, 0, 1, 0), s(102.0, 1, 0, 2, 0), s(101.0, 2, 0, 2, 0)];
        let var = [s(96.0, 0, 1, 1, 0), s(97.0, 1, 1, 1, 0), s(95.0, 2, 1, 2, 0)];
        let e = compare(&base, &var, 0.05).unwrap();
        assert_eq!(
            (e.unit, e.paired, e.n_base, e.n_variant),
            (Unit::BringUp, false, 2, 2)
        );
        assert_eq!(e.units_words(), "2+2 bring-ups");
        assert!(e.note.as_deref().unwrap().contains("unpaired"));
        // scipy: a = log([100, gmean([102, 101])]); b = log([gmean([96, 97]), 95]);
        //   ttest_ind(b, a, equal_var=False)
        assert!(close(e.p, GOLD_BRING_UPS.1, 1e-9), "{e:?}");
        assert!(close(e.ratio, GOLD_BRING_UPS.0, 1e-12), "{e:?}");
    }

    #[test]
    fn retention_is_over_bring_ups_where_each_level_had_two_else_over_runs_saying_so() {
        let (lower, higher) = ([10.0, 10.2, 9.8], [20.0, 21.0, 19.0]);
        let one_boot = |xs: [f64; 3], boot| {
            xs.iter()
                .enumerate()
                .map(|(i, &x)| s(x, i as u32, boot, 1, 0))
                .collect::<Vec<_>>()
        };
        let e = retention(&one_boot(lower, 0), &one_boot(higher, 1), 0.05).unwrap();
        assert_eq!(e.unit, Unit::Run);
        assert!(
            e.note.as_deref().unwrap().contains("one bring-up per level"),
            "{e:?}"
        );
        let own = |xs: [f64; 3], boot| {
            xs.iter()
                .enumerate()
                .map(|(i, &x)| s(x, i as u32, boot, i as u32 + 1, 0))
                .collect::<Vec<_>>()
        };
        let b = retention(&own(lower, 0), &own(higher, 1), 0.05).unwrap();
        assert_eq!((b.unit, b.note.as_deref()), (Unit::BringUp, None));
        // A bring-up of one run is that run: the same ratio and test either way.
        assert!(
            close(b.ratio, e.ratio, 1e-12) && close(b.p, e.p, 1e-9),
            "{b:?} {e:?}"
        );
        assert!(close(
            e.ratio,
            (20.0f64 * 21.0 * 19.0).cbrt() / (10.0f64 * 10.2 * 9.8).cbrt(),
            1e-12
        ));
    }

    #[test]
    fn holm_matches_statsmodels() {
        // statsmodels.stats.multitest.multipletests([0.01, 0.04, 0.03, 0.005], method='holm')[1]
        //   → [0.03, 0.06, 0.06, 0.02]
        let adj = holm(&[0.01, 0.04, 0.03, 0.005]);
        for (a, b) in adj.iter().zip([0.03, 0.06, 0.06, 0.02]) {
            assert!(close(*a, b, 1e-12), "{adj:?}");
        }
        // multipletests([0.9, 0.8], method='holm')[1] → [1.0, 1.0] (0.8 × 2 capped at 1)
        assert_eq!(holm(&[0.9, 0.8]), [1.0, 1.0]);
        assert!(holm(&[]).is_empty());
    }

    #[test]
    fn conclusions_follow_the_adjusted_tests() {
        assert_eq!(Conclusion::of(Some((0.01, 0.9)), 0.05), Conclusion::Differs);
        assert_eq!(Conclusion::of(Some((0.5, 0.01)), 0.05), Conclusion::Equivalent);
        assert_eq!(Conclusion::of(Some((0.5, 0.5)), 0.05), Conclusion::NotConcluded);
        assert_eq!(Conclusion::of(None, 0.05), Conclusion::Untested);
    }

    #[test]
    fn a_tight_a_a_pair_is_equivalent_and_a_known_effect_differs() {
        // A/A: round ratios within ±0.5 %: the interval sits inside ±5 %.
        let base: Vec<_> = [100.0, 101.0, 99.5, 100.2]
            .iter()
            .enumerate()
            .map(|(i, &x)| s(x, i as u32, 0, 1, 0))
            .collect();
        let var: Vec<_> = [100.3, 100.6, 99.9, 100.0]
            .iter()
            .enumerate()
            .map(|(i, &x)| s(x, i as u32, 0, 1, 0))
            .collect();
        let e = compare(&base, &var, 0.05).unwrap();
        assert!(
            e.low > 0.95 && e.high < 1.05 && e.p_equivalent < 0.01 && e.p > 0.05,
            "{e:?}"
        );
        // A 2000 → 2400 ns hold at gap 200: 2200 / 2600 of the throughput, ratio 0.846.
        let var: Vec<_> = base
            .iter()
            .map(|b| Sample {
                value: b.value * 2200.0 / 2600.0 * (1.0 + 0.002 * b.run as f64),
                ..*b
            })
            .collect();
        let e = compare(&base, &var, 0.05).unwrap();
        assert!(
            e.p < 0.001 && e.high < 0.95 && (e.ratio - 0.846).abs() < 0.01,
            "{e:?}"
        );
    }

    #[test]
    fn no_logarithm_no_ratio() {
        let base = [s(0.0, 0, 0, 1, 0), s(1.0, 1, 0, 1, 0)];
        let var = [s(1.0, 0, 0, 1, 0), s(1.0, 1, 0, 1, 0)];
        assert!(compare(&base, &var, 0.05).unwrap_err().contains("logarithm"));
    }

    #[test]
    fn the_margin_is_symmetric_in_log_space() {
        let (lo, hi) = margin_bounds(0.05);
        assert!(close(lo.exp(), 1.0 / 1.05, 1e-15) && close(hi.exp(), 1.05, 1e-15));
        // Below the baseline, where the lower bound decides. scipy 1.17:
        //   b = [100, 102, 99, 101]; v = [97.1, 99.2, 96.0, 98.3]; d = log(v / b);
        //   m, se = mean(d), sem(d); lo, hi = -log(1.05), log(1.05)
        //   max(t.sf((m - lo) / se, 3), t.sf((hi - m) / se, 3)) → 7.610707586846232e-05,
        //   and the same with d negated (the sides swapped).
        let base: Vec<_> = [100.0, 102.0, 99.0, 101.0]
            .iter()
            .enumerate()
            .map(|(i, &x)| s(x, i as u32, 0, 1, 0))
            .collect();
        let var: Vec<_> = [97.1, 99.2, 96.0, 98.3]
            .iter()
            .enumerate()
            .map(|(i, &x)| s(x, i as u32, 0, 1, 0))
            .collect();
        let e = compare(&base, &var, 0.05).unwrap();
        let swapped = compare(&var, &base, 0.05).unwrap();
        assert!(close(e.ratio, 0.9716273434865066, 1e-12), "{e:?}");
        assert!(close(e.p_equivalent, 7.610707586846232e-05, 1e-7), "{e:?}");
        assert!(close(swapped.p_equivalent, e.p_equivalent, 1e-9), "{swapped:?}");
        let eq = e.equivalence(0.05);
        assert!(close(eq.margin_low, 1.0 / 1.05, 1e-15) && close(eq.margin_high, 1.05, 1e-15));
    }

    #[test]
    fn intervals_at_any_level_match_scipy_and_the_tests() {
        let base = [s(100.0, 0, 0, 1, 0), s(102.0, 1, 0, 1, 0), s(99.0, 2, 0, 1, 0)];
        let var = [s(101.0, 0, 0, 1, 0), s(103.5, 1, 0, 1, 0), s(99.8, 2, 0, 1, 0)];
        let e = compare(&base, &var, 0.05).unwrap();
        // At 0.05 the effect's own interval.
        let at95 = e.interval(0.05);
        assert!(
            close(at95.low, e.low, 1e-12) && close(at95.high, e.high, 1e-12),
            "{at95:?}"
        );
        // scipy: exp(t.interval(1 - 0.05/3, 2, mean(d), sem(d))) → (0.995992578437593,
        //   1.0260814351580951); exp(t.interval(1 - 2 * 0.0125, 2, …)) → (0.9987936043349354,
        //   1.0232038830190084)
        let i = e.interval(0.05 / 3.0);
        assert!(close(i.confidence, 1.0 - 0.05 / 3.0, 1e-15));
        assert!(
            close(i.low, 0.995992578437593, 1e-9) && close(i.high, 1.0260814351580951, 1e-9),
            "{i:?}"
        );
        let q = e.equivalence(0.0125);
        assert!(close(q.confidence, 0.975, 1e-15));
        assert!(
            close(q.low, 0.9987936043349354, 1e-9) && close(q.high, 1.0232038830190084, 1e-9),
            "{q:?}"
        );
        // p_equivalent 0.00131: within at 0.0125, not at 0.001.
        assert!(q.within && !e.equivalence(0.001).within);
        // p 0.0306: the interval at 0.05 excludes 1, at 0.05/3 it holds it.
        assert!(!at95.contains(1.0) && i.contains(1.0));
    }

    /// On random families of comparisons (sizes 1 to 40, looks 1 to 5, effects from none to
    /// large, 3 to 12 rounds): each row's interval at the level of its Holm step excludes 1
    /// exactly when its Holm-adjusted p (p × looks first) is below α, and its equivalence
    /// interval lies within the margin exactly when its adjusted equivalence p is.
    #[test]
    fn an_interval_at_its_holm_level_excludes_1_exactly_when_the_row_differs() {
        let mut rng = fastrand::Rng::with_seed(47);
        let (mut differs, mut equivalent, mut rows) = (0, 0, 0);
        for _ in 0..400 {
            let m = rng.usize(1..=40);
            let looks = rng.u32(1..=5);
            let k = f64::from(looks);
            let effects: Vec<Effect> = (0..m)
                .map(|_| {
                    let n = rng.u32(3..=12);
                    let shift = [0.0, 0.01, 0.03, 0.1][rng.usize(0..4)] * if rng.bool() { 1.0 } else { -1.0 };
                    let sd = [0.005, 0.02, 0.05][rng.usize(0..3)];
                    let base: Vec<_> = (0..n)
                        .map(|r| s(100.0 * (sd * normal(&mut rng)).exp(), r, 0, 1, 0))
                        .collect();
                    let var: Vec<_> = (0..n)
                        .map(|r| s(100.0 * (shift + sd * normal(&mut rng)).exp(), r, 0, 1, 0))
                        .collect();
                    compare(&base, &var, 0.05).unwrap()
                })
                .collect();
            let p: Vec<f64> = effects.iter().map(|e| (e.p * k).min(1.0)).collect();
            let p_eq: Vec<f64> = effects.iter().map(|e| (e.p_equivalent * k).min(1.0)).collect();
            let (adjusted, adjusted_eq) = (holm(&p), holm(&p_eq));
            let (levels, levels_eq) = (holm_levels(&p, 0.05), holm_levels(&p_eq, 0.05));
            for (i, e) in effects.iter().enumerate() {
                let interval = e.interval(levels[i] / k);
                assert_eq!(
                    !interval.contains(1.0),
                    adjusted[i] < 0.05,
                    "row {i} of {m} × {looks} looks: {e:?} {interval:?} p_holm {}",
                    adjusted[i]
                );
                let eq = e.equivalence(levels_eq[i] / k);
                assert_eq!(eq.within, adjusted_eq[i] < 0.05, "row {i}: {e:?} {eq:?}");
                differs += usize::from(adjusted[i] < 0.05);
                equivalent += usize::from(adjusted_eq[i] < 0.05);
                rows += 1;
            }
        }
        // Both sides of each equivalence were met many times.
        assert!(
            differs > rows / 10 && differs < rows * 9 / 10,
            "{differs} of {rows}"
        );
        assert!(
            equivalent > rows / 10 && equivalent < rows * 9 / 10,
            "{equivalent} of {rows}"
        );
    }

    #[test]
    fn holm_levels_step_down_and_stop_where_holm_stops() {
        // p 0.005, 0.01, 0.03, 0.04 at α 0.05: steps 0.05/4, 0.05/3, 0.05/2 — 0.03 ≥ 0.025 stops
        // there, and 0.04 is tested at that step's level too (statsmodels' Holm: 0.02, 0.03,
        // 0.06, 0.06).
        let levels = holm_levels(&[0.01, 0.04, 0.03, 0.005], 0.05);
        for (a, b) in levels.iter().zip([0.05 / 3.0, 0.025, 0.025, 0.0125]) {
            assert!(close(*a, b, 1e-15), "{levels:?}");
        }
        // Every p rejected: each at its own step.
        let levels = holm_levels(&[0.001, 0.002], 0.05);
        assert!(
            close(levels[0], 0.025, 1e-15) && close(levels[1], 0.05, 1e-15),
            "{levels:?}"
        );
        // None rejected: all at the first step's level, α / m.
        assert_eq!(holm_levels(&[0.5, 0.2, 0.9], 0.06), [0.02; 3]);
        assert!(holm_levels(&[], 0.05).is_empty());
    }

    // (ratio, p, low, high, p_equivalent) from scipy (see the tests above).
    const GOLD_ROUND: (f64, f64, f64, f64, f64) = (
        1.010925068583254,
        0.030596630179062164,
        1.0024978175536725,
        1.0194231612233329,
        0.0013107438912467611,
    );
    const GOLD_BLOCK: (f64, f64) = (0.9518515232398211, 0.0004461237240512267);
    const GOLD_BRING_UPS: (f64, f64) = (0.950368773354598, 0.04237370854641846);
}
