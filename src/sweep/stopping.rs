//! When a cell has enough runs: the rules (given the settled valid values of the cells
//! involved: the cell's own, and the baseline's at the same level) and the one decision the
//! scheduler, a resume and every host of a sweep take with them ([`next_run`]), over the
//! journaled records. Pure: no executor, no I/O; the scheduler only asks.
//!
//! A cell always makes `min` runs and never more than `max`. Between the two, with a CV
//! target it stops once its own CV is at or below it; with a detectable-effect target once a
//! two-sided Welch test (α = 0.05, power 0.8) against the baseline would detect an effect of
//! that size ([`crate::stats::power`]): "a 5 % difference would show". The baseline cell is
//! judged against a copy of itself (the most it can contribute to any comparison). Both
//! targets given: both must be met. Under `runs: {until: concluded}` see
//! [`Concluded`].

use super::looks::{Concluded, look_points};
use super::plan::{BootGroup, Cell, Plan};
use crate::journal::RunRecord;
use crate::journal::accounting::{CellKey, RunKey, Settled, headline_of};
use crate::stats::compare::DEFAULT_ALPHA;
use crate::stats::effect::Sample;
use crate::stats::power::{DEFAULT_POWER, mde_of_samples};
use crate::stats::summary::cv_reached;

/// How many runs a cell makes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StopRule {
    /// Measured runs always made.
    pub min: u32,
    /// Most measured runs.
    pub max: u32,
    /// Stop once the cell's coefficient of variation is at or below this fraction.
    pub target_cv: Option<f64>,
    /// Stop once an effect of this fraction of the baseline mean is detectable.
    pub target_mde: Option<f64>,
}

/// Whether a cell that has passed `measured` run slots (failed ones included) needs no more:
/// `own` are its valid values so far, `baseline` the baseline cell's at the same level (`None`
/// for the baseline cell itself).
pub fn enough(rule: &StopRule, measured: u32, own: &[f64], baseline: Option<&[f64]>) -> bool {
    if measured >= rule.max {
        return true;
    }
    if measured < rule.min {
        return false;
    }
    let cv_ok = rule.target_cv.is_none_or(|cv| cv_reached(own, cv));
    let mde_ok = rule.target_mde.is_none_or(|target| {
        mde_of_samples(baseline.unwrap_or(own), own, DEFAULT_ALPHA, DEFAULT_POWER)
            .is_some_and(|d| d.mde <= target)
    });
    cv_ok && mde_ok
}

/// The value of one block of a cell's runs made on one bring-up (guests of their own): the
/// geometric mean of its runs' values, the unit a comparison across bring-ups pairs (block k
/// of a variant with block k of the baseline), so a block of many runs weighs as one
/// replicate of what varies between boots. The arithmetic mean where a value is not positive
/// (no geometric mean exists); None for a block with no valid run.
pub fn block_value(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let n = values.len() as f64;
    Some(if values.iter().all(|&v| v > 0.0) {
        (values.iter().map(|v| v.ln()).sum::<f64>() / n).exp()
    } else {
        values.iter().sum::<f64>() / n
    })
}

/// What the next measured run of a cell is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// It has a valid result already (a resumed sweep, or another host's run).
    Done,
    /// The cell has enough runs: its count, or its targets.
    Enough,
    Run,
}

/// What measured run `run` of a cell needs, by the accounting rule over `records` (settled as
/// `settled`): the one decision of the live sweep on every host, of a resume and of
/// [`super::scheduler::work_left`]. `broken`: the group's workers cannot be brought up.
///
/// A cell's stopping rule decides once: at the first slot `r` whose earlier slots all have a
/// journaled attempt (on whichever host) and whose pooled valid results before `r` meet the
/// rule, the cell has enough, and every slot from `r` on is not needed. While an earlier slot
/// is still being made on another host its result could change the verdict, so later slots
/// are made (more runs, never too few); once every result is in, every host and a resume
/// find the same `r`.
pub(super) fn next_run(
    settled: &Settled,
    records: &[RunRecord],
    plan: &Plan,
    group: &BootGroup,
    cell: &Cell,
    run: u32,
    broken: bool,
) -> Next {
    if settled.has_valid_result(&measured_key(group, cell, run)) {
        return Next::Done;
    }
    // Without workers no CV can be reached: record the runs always made, skip the rest.
    if broken && run >= cell.runs {
        return Next::Enough;
    }
    if decided_at(settled, records, plan, group, cell, run).is_some() {
        Next::Enough
    } else {
        Next::Run
    }
}

/// The journal's key of measured run `run` of a group's cell.
pub(super) fn measured_key(group: &BootGroup, cell: &Cell, run: u32) -> RunKey {
    RunKey::new(&cell.variant, group.level, &cell.workload.id, false, run)
}

/// The slot at or before `run` at which a cell's stopping rule decided it has enough (see
/// [`next_run`]), if it has. In a blocked group the rule is judged at a block's end only, so
/// every block is made whole and keeps its pair in the other groups, and on the values of
/// its blocks (each block's geometric mean, [`block_value`]): the unit a comparison of guests
/// of their own replicates. Elsewhere it is judged on every slot's value.
fn decided_at(
    settled: &Settled,
    records: &[RunRecord],
    plan: &Plan,
    group: &BootGroup,
    cell: &Cell,
    run: u32,
) -> Option<u32> {
    if let Some(rule) = cell.concluded {
        return decided_by_conclusion(settled, records, plan, group, cell, run, &rule);
    }
    let baseline = plan.baseline.as_str();
    let this = CellKey {
        variant: &cell.variant,
        level: group.level,
        workload: &cell.workload.id,
    };
    let metric = &cell.workload.metric;
    // The baseline's valid values at this level, when a detectable effect is asked for.
    let baseline = (cell.target_mde.is_some() && cell.variant != baseline).then(|| {
        let base = CellKey {
            variant: baseline,
            ..this
        };
        unit_values(settled, records, plan, group, &base, metric, cell.max_runs)
    });
    // Slots before the first one not yet attempted anywhere can be judged.
    let judged = (0..run)
        .find(|&j| settled.last_attempt(&measured_key(group, cell, j)) == 0)
        .unwrap_or(run);
    first_stop(group, cell, judged, |r| {
        let values = unit_values(settled, records, plan, group, &this, metric, r);
        enough_runs(cell, r, &values, baseline.as_deref())
    })
}

/// The first slot up to `judged` where `group` may stop `cell` and `enough` says it has
/// enough. No rule stops a cell before its `runs` (each rule says so too; starting there only
/// saves work).
fn first_stop(group: &BootGroup, cell: &Cell, judged: u32, enough: impl Fn(u32) -> bool) -> Option<u32> {
    (cell.runs.min(judged)..=judged)
        .filter(|&r| group.may_stop_before(r, cell.rounds_at_most()))
        .find(|&r| enough(r))
}

/// How far a cell's rounds have gone towards its most runs: a round counts 1
/// ([`Spent::Rounds`]), or, for a sliced cell under `runs: {until: concluded}`
/// ([`crate::sweep::plan::Cell::budget_arms`]), the arms it ran of the arms its rounds
/// start with ([`Spent::Arms`]): a round of 3 of 10 arms spends 0.3 of a whole round's time.
enum Spent {
    Rounds,
    Arms(u32),
}

impl Spent {
    fn of(cell: &Cell) -> Self {
        cell.budget_arms.map_or(Spent::Rounds, Spent::Arms)
    }

    /// `rounds` whole rounds, in the unit [`Spent::before_each`] counts.
    fn full(&self, rounds: u32) -> u64 {
        match self {
            Spent::Rounds => u64::from(rounds),
            Spent::Arms(arms) => u64::from(rounds) * u64::from(*arms),
        }
    }

    /// What the rounds before each slot `0..=last` spent (one pass over the rounds): `r`
    /// before slot `r`, or the arms with an attempt journaled in each round before it (the
    /// cells sliced with `cell`; a round's arms are attempted together, on whichever host made
    /// it).
    fn before_each(&self, settled: &Settled, group: &BootGroup, cell: &Cell, last: u32) -> Vec<u64> {
        let arms: Vec<&Cell> = match self {
            Spent::Rounds => return (0..=u64::from(last)).collect(),
            Spent::Arms(_) => group.cells.iter().filter(|c| c.sliced_with(cell)).collect(),
        };
        let in_round = |j: u32| {
            arms.iter()
                .filter(|c| settled.last_attempt(&measured_key(group, c, j)) > 0)
                .count() as u64
        };
        std::iter::once(0)
            .chain((0..last).scan(0, |total, j| {
                *total += in_round(j);
                Some(*total)
            }))
            .collect()
    }
}

/// [`decided_at`] under `runs: {until: concluded}` ([`Concluded`]). A variant's cell has
/// enough at the first look (a [`look_points`] slot, where its group may stop and its order
/// is balanced) before which
/// every slot of it and of the baseline's cell at the level has a journaled attempt and whose
/// valid results before it conclude the comparison, or at its most runs.
/// The baseline's cell runs on while any comparison it is in at the level does: it has
/// enough at the first slot where it may stop at or after the last of theirs.
fn decided_by_conclusion<'a>(
    settled: &'a Settled,
    records: &'a [RunRecord],
    plan: &Plan,
    group: &BootGroup,
    cell: &Cell,
    run: u32,
    rule: &Concluded,
) -> Option<u32> {
    let key = |variant| CellKey {
        variant,
        level: group.level,
        workload: &cell.workload.id,
    };
    let stops = |r: u32| group.may_stop_before(r, cell.rounds_at_most());
    if cell.variant == plan.baseline {
        let level = plan
            .level_boots
            .iter()
            .find(|b| plan.boots[b.start].level.to_bits() == group.level.to_bits())?;
        let mut last = cell.runs;
        for g in &plan.boots[level.clone()] {
            for c in g
                .cells
                .iter()
                .filter(|c| c.variant != plan.baseline && c.workload.id == cell.workload.id)
            {
                last = last.max(decided_by_conclusion(settled, records, plan, g, c, run, rule)?);
            }
        }
        let spent = Spent::of(cell);
        let (budget, before) = (
            spent.full(cell.max_runs),
            spent.before_each(settled, group, cell, run.min(cell.rounds_at_most())),
        );
        let spent_all = |r: u32| before.get(r as usize).is_some_and(|&s| s >= budget);
        return (last.min(run)..=run)
            .find(|&r| stops(r) && (r >= last || r >= cell.rounds_at_most() || spent_all(r)));
    }
    let (this, base) = (key(&cell.variant), key(&plan.baseline));
    let attempted = |k: &CellKey<'_>, j: u32| {
        settled.last_attempt(&RunKey::new(k.variant, k.level, k.workload, false, j)) > 0
    };
    let judged = (0..run)
        .find(|&j| !attempted(&this, j) || !attempted(&base, j))
        .unwrap_or(run);
    // Read once; each look takes the slots before it.
    let metric = &cell.workload.metric;
    let (base, this) = (
        placed_samples(settled, records, plan, &base, metric, judged),
        placed_samples(settled, records, plan, &this, metric, judged),
    );
    let before = |side: &[Sample<'a>], r: u32| side.iter().filter(|s| s.run < r).copied().collect::<Vec<_>>();
    // The rule looks at its look points only, where the order is balanced (or, where blocks
    // stay whole, at the first block's end after each that is balanced too): what its α was
    // corrected for.
    // The plan's α was corrected for the looks of this same period.
    let every = group.balanced_every(plan.schedule.order);
    let last = cell.rounds_at_most();
    let balanced = |r: u32| r.is_multiple_of(every) || r >= last;
    // A look at p rounds is at the first slot whose rounds before it spent p whole rounds
    // (the slot p itself until comparisons leave a sliced round), up to the judged slots:
    // the rounds after them are not journaled yet.
    let spent = Spent::of(cell);
    let spent_before = spent.before_each(settled, group, cell, judged.min(last));
    let reached =
        |p: u32, r: u32| r >= last || spent_before.get(r as usize).is_some_and(|&s| s >= spent.full(p));
    let looks: Vec<u32> = look_points(cell.runs, cell.max_runs, every)
        .into_iter()
        .filter_map(|p| (p..=judged.min(last)).find(|&r| stops(r) && balanced(r) && reached(p, r)))
        .collect();
    first_stop(group, cell, judged, |r| {
        reached(cell.max_runs, r)
            || (looks.contains(&r) && rule.reached(&before(&base, r), &before(&this, r)))
    })
}

/// A cell's valid results in its first `runs` slots, each its headline value
/// ([`Plan::headline_from`]) with where the design put it (host, boot group, bring-up, block):
/// what a comparison pairs.
fn placed_samples<'a>(
    settled: &'a Settled,
    records: &'a [RunRecord],
    plan: &Plan,
    cell: &CellKey<'_>,
    metric: &str,
    runs: u32,
) -> Vec<Sample<'a>> {
    settled
        .results(records, cell, 0..runs)
        .filter_map(|result| {
            let value = headline_of(&result, metric, plan.headline_from())?;
            let r = result.iter().find(|r| r.guest == 0)?;
            Some(Sample {
                value,
                run: r.run,
                host: r.host.as_deref(),
                boot: r.slot.boot,
                bring_up: r.slot.bring_up,
                block: r.slot.block,
                weight: Sample::weight_of(r.slices),
            })
        })
        .collect()
}

/// The values a stopping rule judges of a cell's valid results in its first `runs` slots:
/// each slot's headline value, or in a blocked group each block's.
fn unit_values(
    settled: &Settled,
    records: &[RunRecord],
    plan: &Plan,
    group: &BootGroup,
    cell: &CellKey<'_>,
    metric: &str,
    runs: u32,
) -> Vec<f64> {
    let from = plan.headline_from();
    match group.runs_per_block {
        None => settled.samples(records, cell, metric, 0..runs, from),
        Some(per_block) => (0..runs.div_ceil(per_block))
            .filter_map(|b| {
                let slots = group.block_runs(b);
                let in_block = settled.samples(records, cell, metric, slots.start..slots.end.min(runs), from);
                block_value(&in_block)
            })
            .collect(),
    }
}

/// True when a cell has made its runs and met its targets ([`enough`]) with its primary
/// results (guest 0's headline metric of the valid results so far) and the baseline's at its
/// level. `measured` counts run slots passed, failed ones included.
pub(super) fn enough_runs(cell: &Cell, measured: u32, samples: &[f64], baseline: Option<&[f64]>) -> bool {
    let rule = StopRule {
        min: cell.runs,
        max: cell.max_runs,
        target_cv: cell.target_cv,
        target_mde: cell.target_mde,
    };
    enough(&rule, measured, samples, baseline)
}

#[cfg(test)]
mod tests {
    use super::*;

    // ------------------------------------------------ the decision over journaled records

    const METRIC: &str = "ops_per_sec";

    /// A plan of `variants` (name, algo) sharing guests at 1x, one lock workload, and `runs`.
    fn plan_of(variants: &[(&str, &str)], runs: &str, extra: &str) -> Plan {
        let variants: String = variants
            .iter()
            .map(|(n, a)| format!("  - {{name: {n}, args: {{algo: {a}}}}}\n"))
            .collect();
        let s: crate::scenario::Scenario = yaml_serde::from_str(&format!(
            "name: t\nhost: {{cpus: 2}}\nlevels: [1.0]\nvariants:\n{variants}workloads:\n  - command: lock\n    metric: {METRIC}\n    args: {{threads: 1}}\nwarmup_runs: 0\nruns: {runs}\n{extra}"
        ))
        .unwrap();
        Plan::build(&s, &[0, 1], 1).unwrap()
    }

    /// Guest 0's valid record of measured run `run` of `variant` (one guest a run), in block
    /// `block`.
    fn record(variant: &str, run: u32, block: u32, value: f64) -> RunRecord {
        serde_json::from_value(serde_json::json!({
            "variant": variant, "level": 1.0, "workload": "lock", "run": run,
            "warmup": false, "guest": 0, "guests": 1, "ok": true, "attempt": 1,
            "attempt_records": 1, "metrics": {METRIC: value}, "argv": [], "timings": {},
            "finished_at": "t", "slot": {"boot": 0, "bring_up": block + 1, "seq": run, "block": block},
        }))
        .unwrap()
    }

    fn next_of(plan: &Plan, records: &[RunRecord], variant: &str, run: u32, broken: bool) -> Next {
        let group = plan
            .boots
            .iter()
            .find(|g| g.variants.iter().any(|v| v == variant))
            .unwrap();
        let cell = group.cells.iter().find(|c| c.variant == variant).unwrap();
        next_run(
            &crate::journal::accounting::settle(records),
            records,
            plan,
            group,
            cell,
            run,
            broken,
        )
    }

    #[test]
    fn a_fixed_count_runs_its_slots_and_skips_none_it_has() {
        let p = plan_of(&[("a", "tas")], "3", "");
        let made: Vec<RunRecord> = [0, 2].iter().map(|&r| record("a", r, 0, 100.0)).collect();
        assert_eq!(next_of(&p, &made, "a", 0, false), Next::Done);
        assert_eq!(
            next_of(&p, &made, "a", 1, false),
            Next::Run,
            "a slot without a result"
        );
        assert_eq!(next_of(&p, &made, "a", 2, false), Next::Done);
        let all: Vec<RunRecord> = (0..3).map(|r| record("a", r, 0, 100.0)).collect();
        assert_eq!(next_of(&p, &all, "a", 3, false), Next::Enough);
        // Workers that cannot come up: the runs always made are still recorded (failed), none
        // beyond them.
        let p = plan_of(&[("a", "tas")], "{min: 2, max: 6, target_cv: 0.01}", "");
        assert_eq!(next_of(&p, &[], "a", 1, true), Next::Run);
        assert_eq!(next_of(&p, &[], "a", 2, true), Next::Enough);
        assert_eq!(next_of(&p, &[], "a", 2, false), Next::Run);
    }

    /// Under `until: concluded` a variant stops at the first look that concludes it, and the
    /// baseline runs on while any of its comparisons does.
    #[test]
    fn a_concluded_comparison_stops_at_a_look_and_the_baseline_with_the_last() {
        let p = plan_of(
            &[("a", "tas"), ("b", "ticket"), ("c", "mcs")],
            "{until: concluded, min: 3, max: 12}",
            "",
        );
        let noise = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98];
        // b: ×1.5 round by round; c: ±20 % around the baseline, concluded neither way.
        let rounds = |n: u32| -> Vec<RunRecord> {
            (0..n)
                .flat_map(|r| {
                    let base = 100.0 * noise[r as usize % 6];
                    let c = base * if r % 2 == 0 { 1.2 } else { 0.8 };
                    [
                        record("a", r, 0, base),
                        record("b", r, 0, 1.5 * base),
                        record("c", r, 0, c),
                    ]
                })
                .collect()
        };
        let three = rounds(3);
        assert_eq!(
            next_of(&p, &three, "b", 3, false),
            Next::Enough,
            "concluded at the first look"
        );
        assert_eq!(next_of(&p, &three, "c", 3, false), Next::Run);
        assert_eq!(next_of(&p, &three, "a", 3, false), Next::Run, "c still runs");
        // Between looks nothing is judged: b's slots before 3 are all it needed.
        let two = rounds(2);
        assert_eq!(next_of(&p, &two, "b", 2, false), Next::Run);
        // c runs to max; the baseline stops with it.
        let all = rounds(12);
        assert_eq!(next_of(&p, &all, "c", 12, false), Next::Enough);
        assert_eq!(next_of(&p, &all, "a", 12, false), Next::Enough);
        // The baseline's slot 3 is missing: b cannot be judged at its look before it.
        let gap: Vec<RunRecord> = three
            .into_iter()
            .filter(|r| !(r.variant == "a" && r.run == 1))
            .collect();
        assert_eq!(next_of(&p, &gap, "b", 3, false), Next::Run);
    }

    /// Sliced rounds shrink as comparisons conclude, and a look at p rounds falls where the
    /// rounds spent p whole rounds' worth of arms: of four arms, b concludes at 3 rounds
    /// (12 arm-runs spent), then rounds of three spend 3 each, so the look at 5 rounds (20) is
    /// before slot 6 (21), not 5 (18); once c has concluded too, the budget of 12 whole rounds
    /// (48) is spent before slot 20 (21 + 14 × 2); no cell is in more than 12 × 4 / 2 = 24
    /// rounds.
    #[test]
    fn sliced_rounds_look_and_stop_by_the_rounds_they_spent() {
        let p = plan_of(
            &[("a", "tas"), ("b", "ticket"), ("c", "mcs"), ("d", "clh")],
            "{until: concluded, min: 3, max: 12}",
            "",
        );
        assert!(p.boots[0].cells.iter().all(|c| c.slice.is_some()));
        assert!(
            p.boots[0]
                .cells
                .iter()
                .all(|c| c.max_runs == 12 && c.rounds_at_most() == 24)
        );
        // c: unclear over 3 rounds (log ratios −0.69, −0.11, −0.69: t 2.5 on 2 df), clear over 6
        // (three more at 0.6: t 5.8 on 5 df, p 0.002 < 0.05 / (3 × 4)); d swings ±20 %.
        let c_ratio = [0.5, 0.9, 0.5, 0.6, 0.6, 0.6];
        let rounds = |n: u32| -> Vec<RunRecord> {
            (0..n)
                .flat_map(|r| {
                    let d = if r % 2 == 0 { 120.0 } else { 80.0 };
                    let mut made = vec![
                        record("a", r, 0, 100.0),
                        record("c", r, 0, 100.0 * c_ratio.get(r as usize).copied().unwrap_or(1.0)),
                        record("d", r, 0, d),
                    ];
                    if r < 3 {
                        made.push(record("b", r, 0, [150.0, 151.0, 149.0][r as usize]));
                    }
                    made
                })
                .collect()
        };
        assert_eq!(next_of(&p, &rounds(3), "b", 3, false), Next::Enough);
        assert_eq!(
            next_of(&p, &rounds(3), "c", 3, false),
            Next::Run,
            "not at 3 rounds"
        );
        assert_eq!(
            next_of(&p, &rounds(5), "c", 5, false),
            Next::Run,
            "slot 5 is no look: 18 of 20 arm-runs spent"
        );
        assert_eq!(
            next_of(&p, &rounds(6), "c", 6, false),
            Next::Enough,
            "the look at 5 rounds"
        );
        // d runs on past 12 rounds, until the budget is spent.
        assert_eq!(next_of(&p, &rounds(12), "d", 12, false), Next::Run);
        let spent: Vec<RunRecord> = rounds(15)
            .into_iter()
            .filter(|r| !(r.variant == "c" && r.run >= 6))
            .collect();
        // With c gone after slot 6 the rounds of a and d spend 2 each: 12 + 3 × 3 + 2 × k ≥ 48
        // at k = 14, before slot 20.
        assert_eq!(next_of(&p, &spent, "d", 15, false), Next::Run);
        let more = |to: u32| -> Vec<RunRecord> {
            spent
                .iter()
                .cloned()
                .chain((15..to).flat_map(|r| [record("a", r, 0, 100.0), record("d", r, 0, 100.0)]))
                .collect()
        };
        assert_eq!(next_of(&p, &more(19), "d", 19, false), Next::Run, "47 of 48");
        let more = more(20);
        assert_eq!(next_of(&p, &more, "d", 20, false), Next::Enough);
        assert_eq!(
            next_of(&p, &more, "a", 20, false),
            Next::Enough,
            "the baseline with it"
        );
    }

    /// A family of A/A comparisons under sliced rounds that shrink as comparisons conclude:
    /// four variants the same as the baseline, each round's value of each off by a log SD of
    /// 2 % (a host state shared by the round's variants on top). Whether and when a look falls
    /// depends on the other comparisons (they share the baseline's rounds), but a look is
    /// still one of at most 4, each tested at α / (family × looks): over 300 families the
    /// share with any comparison `differs` at its end stays within α = 0.05 (the bound allows
    /// 2.5 standard errors of its estimate), and most are `equivalent`. Seen: 3.3 % of 300 and
    /// of 3000 families; with a log SD of 1 % or 5 % instead, 1.1 % and 4.4 % of 3000.
    #[test]
    fn a_family_of_a_a_comparisons_in_shrinking_rounds_keeps_its_false_alarms_within_alpha() {
        let names: Vec<(String, &str)> = (0..5).map(|i| (format!("v{i}"), "tas")).collect();
        let variants: Vec<(&str, &str)> = names.iter().map(|(n, a)| (n.as_str(), *a)).collect();
        let p = plan_of(&variants, "{until: concluded, min: 3, max: 12}", "");
        let group = &p.boots[0];
        assert_eq!(group.cells[0].budget_arms, Some(5));
        let rule = group.cells[0].concluded.unwrap();
        let mut rng = fastrand::Rng::with_seed(59);
        let mut gauss = move || {
            let (u, v) = (rng.f64().max(1e-300), rng.f64());
            (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
        };
        let families = 300;
        let (mut false_alarms, mut equivalent, mut comparisons, mut rounds_most) = (0, 0, 0, 0);
        for _ in 0..families {
            let mut records: Vec<RunRecord> = Vec::new();
            let mut stopped = vec![false; group.cells.len()];
            for r in 0..group.rounds() {
                let settled = crate::journal::accounting::settle(&records);
                let mut due = Vec::new();
                for (c, stop) in stopped.iter_mut().enumerate().filter(|(_, s)| !**s) {
                    match next_run(&settled, &records, &p, group, &group.cells[c], r, false) {
                        Next::Run => due.push(c),
                        Next::Enough => *stop = true,
                        Next::Done => {}
                    }
                }
                if due.is_empty() {
                    break;
                }
                rounds_most = rounds_most.max(r + 1);
                let host = 100.0 * (0.1 * gauss()).exp();
                for c in due {
                    let value = host * (0.02 * gauss()).exp();
                    records.push(record(&group.cells[c].variant, r, 0, value));
                }
            }
            let settled = crate::journal::accounting::settle(&records);
            let key = |v: &'static str| CellKey {
                variant: v,
                level: 1.0,
                workload: "lock",
            };
            let base = placed_samples(&settled, &records, &p, &key("v0"), METRIC, u32::MAX);
            let mut alarm = false;
            for (name, _) in &names[1..] {
                let this = CellKey {
                    variant: name,
                    level: 1.0,
                    workload: "lock",
                };
                let side = placed_samples(&settled, &records, &p, &this, METRIC, u32::MAX);
                let rounds: std::collections::BTreeSet<u32> = side.iter().map(|s| s.run).collect();
                let paired: Vec<Sample> = base.iter().filter(|s| rounds.contains(&s.run)).copied().collect();
                let e = crate::stats::effect::compare(&paired, &side, rule.margin).unwrap();
                comparisons += 1;
                alarm |= e.p < rule.alpha;
                equivalent += usize::from(e.p_equivalent < rule.alpha);
            }
            false_alarms += usize::from(alarm);
        }
        let rate = false_alarms as f64 / f64::from(families);
        let se = (0.05 * 0.95 / f64::from(families)).sqrt();
        eprintln!(
            "{false_alarms} of {families} families with a false differs; {equivalent} of {comparisons} \
             comparisons equivalent; at most {rounds_most} rounds"
        );
        assert!(rate <= 0.05 + 2.5 * se, "families with a false differs: {rate}");
        assert!(
            equivalent * 2 > comparisons,
            "{equivalent} of {comparisons} equivalent"
        );
        assert!(
            rounds_most > 12,
            "the open comparisons got more rounds: {rounds_most}"
        );
    }

    /// In a blocked group the rule judges each block's geometric mean, at blocks' ends only.
    #[test]
    fn a_blocked_groups_rule_judges_block_values_at_block_ends() {
        let s: crate::scenario::Scenario = yaml_serde::from_str(&format!(
            "name: t\nhost: {{cpus: 2}}\nlevels: [1.0]\nvariants:\n  - {{name: a, args: {{algo: tas}}}}\n  - {{name: b, cmdline: nopvspin, args: {{algo: tas}}}}\nworkloads:\n  - command: lock\n    metric: {METRIC}\n    args: {{threads: 1}}\nwarmup_runs: 0\nruns: {{min: 2, max: 8, target_cv: 0.05}}\nschedule: {{runs_per_bring_up: 2}}\n"
        ))
        .unwrap();
        let p = Plan::build(&s, &[0, 1], 1).unwrap();
        let group = &p.boots[0];
        assert_eq!(group.runs_per_block, Some(2));
        let records: Vec<RunRecord> = [80.0, 125.0, 125.0, 80.0, 100.0]
            .iter()
            .enumerate()
            .map(|(r, &v)| record("a", r as u32, r as u32 / 2, v))
            .collect();
        let settled = crate::journal::accounting::settle(&records);
        let key = CellKey {
            variant: "a",
            level: 1.0,
            workload: "lock",
        };
        // Blocks (80, 125) and (125, 80): both 100; the third block is cut at slot 5.
        let values = unit_values(&settled, &records, &p, group, &key, METRIC, 5);
        assert_eq!(values.len(), 3);
        assert!(values.iter().all(|v| (v - 100.0).abs() < 1e-9), "{values:?}");
        // Steady blocks: enough at the end of block 1 (slot 4), although the runs spread 22 %.
        assert_eq!(next_of(&p, &records[..4], "a", 4, false), Next::Enough);
        // Slot 3 is inside block 1: no decision there.
        assert_eq!(next_of(&p, &records[..3], "a", 3, false), Next::Run);
    }

    fn rule(target_cv: Option<f64>, target_mde: Option<f64>) -> StopRule {
        StopRule {
            min: 3,
            max: 10,
            target_cv,
            target_mde,
        }
    }

    #[test]
    fn counts_bound_every_rule() {
        let r = rule(None, None);
        assert!(!enough(&r, 2, &[1.0, 1.0], None));
        assert!(enough(&r, 3, &[1.0, 1.0, 1.0], None));
        // At max a cell stops whatever its spread.
        let r = rule(Some(0.01), Some(0.01));
        assert!(enough(&r, 10, &[1.0, 5.0], None));
        assert!(!enough(&r, 9, &[1.0, 5.0], None));
    }

    #[test]
    fn a_blocks_value_is_the_geometric_mean_of_its_runs() {
        assert_eq!(block_value(&[]), None);
        assert!((block_value(&[5.0]).unwrap() - 5.0).abs() < 1e-12);
        let v = block_value(&[2.0, 8.0]).unwrap();
        assert!((v - 4.0).abs() < 1e-12, "{v}");
        assert_eq!(
            block_value(&[0.0, 2.0]),
            Some(1.0),
            "no geometric mean with a zero"
        );
    }

    #[test]
    fn a_detectable_effect_target_needs_enough_runs_for_the_spread() {
        let r = rule(None, Some(0.05));
        // CV 1 %: three runs a side detect far less than 5 % (statsmodels: d = 3.07 at n = 3,
        // i.e. 3.07 × 1 % ≈ 3.1 %).
        let steady = [100.0, 101.0, 99.0];
        assert!(enough(&r, 3, &steady, None));
        assert!(enough(&r, 3, &steady, Some(&[100.5, 101.5, 99.5])));
        // CV 10 %: 3.07 × 10 % ≈ 31 % at n = 3 — more runs.
        let noisy = [100.0, 110.0, 90.0];
        assert!(!enough(&r, 3, &noisy, None));
        // A steady cell against a noisy baseline cannot show 5 % either.
        assert!(!enough(&r, 3, &steady, Some(&noisy)));
        // One value of the baseline: nothing is detectable yet.
        assert!(!enough(&r, 3, &steady, Some(&[100.0])));
        // Both targets: both must hold (CV 1 % > 0.5 %).
        assert!(!enough(&rule(Some(0.005), Some(0.05)), 3, &steady, None));
    }
}
