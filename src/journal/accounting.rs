//! Which journaled results count: the one definition of "the valid result of run r", used by
//! the sweep (what is done, the CV stopping rule), by resume and by the reports.
//!
//! A run is one slot of one cell (variant × level × workload, warm-up or measured, run index).
//! It may take several attempts. An attempt counts only when every guest that ran something
//! in it finished with a result: all its records are `ok`, none is marked superseded, and as
//! many are journaled as the attempt says it wrote. The valid result of a run is its first
//! such attempt in journal order; any later complete attempt of the same run (which the sweep
//! never makes, but a hand-merged journal might hold) is a duplicate and does not count.
//!
//! A warm-up is never a sample. It is made once on every freshly brought-up guest set (after
//! every boot of a group, on every host), so a warm-up's run is keyed by its guest set too
//! ([`GuestSet`]): each set's warm-up counts once, as that set's warm-up, and two sets' warm-ups
//! are neither duplicates nor attempts of one another.

use std::collections::{BTreeMap, BTreeSet};

use super::RunRecord;
use crate::vocabulary::HeadlineFrom;

/// What the rule reads of one journaled record: the full [`RunRecord`] (the sweep, resume) or
/// a report's compact digest of it, so both settle by the same code.
pub trait Attempted {
    fn variant(&self) -> &str;
    fn level(&self) -> f64;
    fn workload(&self) -> &str;
    fn warmup(&self) -> bool;
    fn run(&self) -> u32;
    fn guest(&self) -> u32;
    fn attempt(&self) -> u32;
    /// `ok` and not marked superseded.
    fn finished(&self) -> bool;
    /// [`RunRecord::attempt_records`].
    fn attempt_records(&self) -> u32;
    /// The guest set it ran on ([`GuestSet::of`]).
    fn guest_set(&self) -> GuestSet;
}

/// Implements [`Attempted`] for a record type that keeps the attempt's identity in fields of
/// the journal's names (`variant`, `level`, `workload`, `warmup`, `run`, `guest`, `attempt`,
/// `attempt_records`); `finished` and `guest_set` say how that type keeps the rest. One
/// implementation for the journal's records and the reports' digests of them.
macro_rules! attempted_by_fields {
    ($t:ty, finished: |$f:ident| $finished:expr, guest_set: |$g:ident| $guest_set:expr $(,)?) => {
        impl $crate::journal::accounting::Attempted for $t {
            fn variant(&self) -> &str {
                &self.variant
            }
            fn level(&self) -> f64 {
                self.level
            }
            fn workload(&self) -> &str {
                &self.workload
            }
            fn warmup(&self) -> bool {
                self.warmup
            }
            fn run(&self) -> u32 {
                self.run
            }
            fn guest(&self) -> u32 {
                self.guest
            }
            fn attempt(&self) -> u32 {
                self.attempt
            }
            fn finished(&self) -> bool {
                let $f = self;
                $finished
            }
            fn attempt_records(&self) -> u32 {
                self.attempt_records
            }
            fn guest_set(&self) -> $crate::journal::accounting::GuestSet {
                let $g = self;
                $guest_set
            }
        }
    };
}
pub(crate) use attempted_by_fields;

attempted_by_fields!(
    RunRecord,
    finished: |r| r.ok && r.superseded.is_none(),
    guest_set: |r| GuestSet::of(r),
);

impl<T: Attempted> Attempted for &T {
    fn variant(&self) -> &str {
        (*self).variant()
    }
    fn level(&self) -> f64 {
        (*self).level()
    }
    fn workload(&self) -> &str {
        (*self).workload()
    }
    fn warmup(&self) -> bool {
        (*self).warmup()
    }
    fn run(&self) -> u32 {
        (*self).run()
    }
    fn guest(&self) -> u32 {
        (*self).guest()
    }
    fn attempt(&self) -> u32 {
        (*self).attempt()
    }
    fn finished(&self) -> bool {
        (*self).finished()
    }
    fn attempt_records(&self) -> u32 {
        (*self).attempt_records()
    }
    fn guest_set(&self) -> GuestSet {
        (*self).guest_set()
    }
}

/// A record's headline numbers, for [`Settled::samples`].
pub trait Headline: Attempted {
    fn metric(&self, name: &str) -> Option<f64>;
}

/// A run's headline value from its valid result (`result`, its counted records): guest 0's
/// `metric`, or with [`HeadlineFrom::EveryGuest`] the mean of every guest's that reports it.
/// None when guest 0's record lacks it (the run has no value of that metric).
pub fn headline_of<R: Headline>(result: &[&R], metric: &str, from: HeadlineFrom) -> Option<f64> {
    let primary = result.iter().find(|r| r.guest() == 0)?.metric(metric)?;
    match from {
        HeadlineFrom::PrimaryGuest => Some(primary),
        HeadlineFrom::EveryGuest => {
            let (sum, n) = result
                .iter()
                .filter_map(|r| r.metric(metric))
                .fold((0.0, 0u32), |(s, n), v| (s + v, n + 1));
            Some(sum / f64::from(n))
        }
    }
}

/// The records at a valid result's indices ((guest, index) pairs), in its order.
fn records_at<'a, R>(records: &'a [R], at: &[(u32, usize)]) -> Vec<&'a R> {
    at.iter().map(|&(_, i)| &records[i]).collect()
}

impl Headline for RunRecord {
    fn metric(&self, name: &str) -> Option<f64> {
        self.metrics.get(name).copied()
    }
}

/// One run: a slot of a cell.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RunKey {
    pub variant: String,
    /// The level's bit pattern (levels are compared exactly as parsed).
    pub level_bits: u64,
    pub workload: String,
    pub warmup: bool,
    pub run: u32,
    /// For a warm-up: the guest set it warmed. Warm-ups are made once per freshly brought-up
    /// guest set (on every host), so each set's warm-up is a run of its own; None for measured
    /// runs, and for warm-ups of journals that record no slot.
    pub guest_set: Option<GuestSet>,
}

/// One freshly brought-up set of guests: the host (None: the sweep's one host), the boot
/// group, and which bring-up of it (numbered on across resumes, so a set is never met twice).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GuestSet {
    pub host: Option<String>,
    pub boot: u32,
    pub bring_up: u32,
}

impl GuestSet {
    /// The guest set a record ran on.
    pub fn of(r: &RunRecord) -> Self {
        Self {
            host: r.host.clone(),
            boot: r.slot.boot,
            bring_up: r.slot.bring_up,
        }
    }
}

impl RunKey {
    pub fn new(variant: &str, level: f64, workload: &str, warmup: bool, run: u32) -> Self {
        Self {
            variant: variant.to_string(),
            level_bits: level.to_bits(),
            workload: workload.to_string(),
            warmup,
            run,
            guest_set: None,
        }
    }

    /// Warm-up `run` of a cell on guest set `set`.
    pub fn warm_up(variant: &str, level: f64, workload: &str, run: u32, set: GuestSet) -> Self {
        Self {
            guest_set: Some(set),
            ..Self::new(variant, level, workload, true, run)
        }
    }

    pub fn of(r: &impl Attempted) -> Self {
        // Only a warm-up is keyed by its guest set (asked only then: it clones the host name).
        if r.warmup() {
            Self::warm_up(r.variant(), r.level(), r.workload(), r.run(), r.guest_set())
        } else {
            Self::new(r.variant(), r.level(), r.workload(), false, r.run())
        }
    }
}

/// A cell: variant × level × workload.
#[derive(Debug, Clone, Copy)]
pub struct CellKey<'a> {
    pub variant: &'a str,
    pub level: f64,
    pub workload: &'a str,
}

/// What one journaled record is worth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Part of its run's valid result.
    Counted,
    /// Part of an attempt that failed or was cut short.
    Failed,
    /// Part of a complete attempt of a run that already had a valid result.
    Duplicate,
}

/// Every record of a journal settled by the rule above. Indices refer to the slice given to
/// [`settle`] (or the records given to [`Settled::extend`], in order). Settling is
/// incremental: taking in one more record costs the work of its own run only, so a sweep
/// that settles after every attempt stays linear in the journal's length.
#[derive(Debug, Clone, Default)]
pub struct Settled {
    standing: Vec<Standing>,
    /// Run → indices of its valid attempt's records, by guest.
    valid: BTreeMap<RunKey, Vec<(u32, usize)>>,
    /// Run → the highest attempt number journaled, and its attempts in journal order.
    runs: BTreeMap<RunKey, RunAttempts>,
    attempts: Vec<Attempt>,
}

#[derive(Debug, Clone, Default)]
struct RunAttempts {
    last_attempt: u32,
    /// The attempt that is the run's valid result.
    valid: Option<usize>,
    /// Indices into [`Settled::attempts`], in order of first record.
    attempts: Vec<usize>,
    /// Attempt number → the attempt now collecting records; a guest seen twice starts a new
    /// one (a hand-merged journal holding an attempt twice: the second is a duplicate).
    open: BTreeMap<u32, usize>,
}

/// Records of one attempt, in journal order, with what decides whether it is complete.
#[derive(Debug, Clone)]
struct Attempt {
    indices: Vec<usize>,
    /// The guest of each of `indices`.
    guest_of: Vec<u32>,
    guests: BTreeSet<u32>,
    all_finished: bool,
    /// The `attempt_records` its first record declares.
    declared: u32,
}

impl Attempt {
    fn complete(&self) -> bool {
        self.all_finished && self.indices.len() == self.declared as usize
    }
}

/// Measured runs with a valid result among `records`, by the one accounting rule.
pub fn counted_runs<R: Attempted>(records: &[R]) -> usize {
    settle(records)
        .counted(records)
        .filter(|r| !r.warmup() && r.guest() == 0)
        .count()
}

/// Settles every record: the one place that decides what counts.
pub fn settle<R: Attempted>(records: &[R]) -> Settled {
    let mut s = Settled::default();
    s.extend(records);
    s
}

impl Settled {
    /// Takes in `more`, the records that follow those already settled in the journal.
    pub fn extend<R: Attempted>(&mut self, more: &[R]) {
        for r in more {
            self.push(r);
        }
    }

    /// Takes in the journal's next record; settles its run anew (the work of one run).
    pub fn push<R: Attempted>(&mut self, r: &R) {
        let i = self.standing.len();
        self.standing.push(Standing::Failed);
        let key = RunKey::of(r);
        let run = self.runs.entry(key.clone()).or_default();
        run.last_attempt = run.last_attempt.max(r.attempt());
        let a = match run.open.get(&r.attempt()).copied() {
            Some(a) if !self.attempts[a].guests.contains(&r.guest()) => a,
            _ => {
                let a = self.attempts.len();
                self.attempts.push(Attempt {
                    indices: Vec::new(),
                    guest_of: Vec::new(),
                    guests: BTreeSet::new(),
                    all_finished: true,
                    declared: r.attempt_records(),
                });
                run.open.insert(r.attempt(), a);
                run.attempts.push(a);
                a
            }
        };
        let at = &mut self.attempts[a];
        let was_complete = at.complete();
        at.indices.push(i);
        at.guest_of.push(r.guest());
        at.guests.insert(r.guest());
        at.all_finished &= r.finished();
        let complete = at.complete();
        if complete == was_complete {
            // Nothing about the run changed but one more record: it stands as its attempt does
            // (the common case; an attempt changes once, when its last record lands).
            self.standing[i] = match (complete, run.valid == Some(a)) {
                (false, _) => Standing::Failed,
                (true, true) => Standing::Counted,
                (true, false) => Standing::Duplicate,
            };
            if self.standing[i] == Standing::Counted
                && let Some(v) = self.valid.get_mut(&key)
            {
                let at = v.partition_point(|&(g, _)| g <= r.guest());
                v.insert(at, (r.guest(), i));
            }
            return;
        }
        // The run's valid result: its first complete attempt; any later complete one is a
        // duplicate. Re-decided over this run's attempts only.
        let mut valid: Option<usize> = None;
        for &a in &run.attempts {
            let at = &self.attempts[a];
            let complete = at.complete();
            for &j in &at.indices {
                self.standing[j] = match (complete, valid.is_some()) {
                    (false, _) => Standing::Failed,
                    (true, false) => Standing::Counted,
                    (true, true) => Standing::Duplicate,
                };
            }
            if complete && valid.is_none() {
                valid = Some(a);
            }
        }
        run.valid = valid;
        match valid {
            Some(a) => {
                let mut by_guest: Vec<(u32, usize)> = self.attempts[a]
                    .guest_of
                    .iter()
                    .copied()
                    .zip(self.attempts[a].indices.iter().copied())
                    .collect();
                by_guest.sort_by_key(|&(g, _)| g);
                self.valid.insert(key, by_guest);
            }
            None => {
                self.valid.remove(&key);
            }
        }
    }

    /// Whether record `index` is part of its run's valid result.
    pub fn counts(&self, index: usize) -> bool {
        self.standing.get(index) == Some(&Standing::Counted)
    }

    #[cfg(test)]
    pub fn standing(&self, index: usize) -> Option<Standing> {
        self.standing.get(index).copied()
    }

    /// The valid result of a run: its counted records by guest (guest 0 first), if it has one.
    #[cfg(test)] // the sweep and the reports read a cell's at once ([`Settled::results`])
    pub fn valid_result<'a, R>(&self, records: &'a [R], key: &RunKey) -> Option<Vec<&'a R>> {
        self.valid.get(key).map(|ix| records_at(records, ix))
    }

    pub fn has_valid_result(&self, key: &RunKey) -> bool {
        self.valid.contains_key(key)
    }

    /// The run's primary result: guest 0's record of its valid attempt.
    #[cfg(test)]
    pub fn primary<'a, R: Attempted>(&self, records: &'a [R], key: &RunKey) -> Option<&'a R> {
        self.valid_result(records, key)?
            .into_iter()
            .find(|r| r.guest() == 0)
    }

    /// The highest attempt number journaled for a run (0 when it has none).
    pub fn last_attempt(&self, key: &RunKey) -> u32 {
        self.runs.get(key).map_or(0, |r| r.last_attempt)
    }

    /// Every counted record, in journal order.
    pub fn counted<'a, R>(&'a self, records: &'a [R]) -> impl Iterator<Item = &'a R> + 'a {
        records
            .iter()
            .enumerate()
            .filter(|(i, _)| self.counts(*i))
            .map(|(_, r)| r)
    }

    /// Measured runs of a cell that were attempted but have no valid result.
    #[cfg(test)] // the per-record form; reports use the digests' one
    pub fn failed_runs(&self, variant: &str, level: f64, workload: &str) -> usize {
        self.runs
            .keys()
            .filter(|k| {
                !k.warmup
                    && k.variant == variant
                    && k.level_bits == level.to_bits()
                    && k.workload == workload
                    && !self.valid.contains_key(k)
            })
            .count()
    }

    /// Every measured run that was attempted but has no valid result, in key order.
    pub fn runs_without_result(&self) -> impl Iterator<Item = &RunKey> + '_ {
        self.runs
            .keys()
            .filter(|k| !k.warmup && !self.valid.contains_key(*k))
    }

    /// The headline values ([`headline_of`]) of a cell's valid measured results among `runs`,
    /// in run order — the samples the CV stopping rule and the summaries see.
    pub fn samples<R: Headline>(
        &self,
        records: &[R],
        cell: &CellKey<'_>,
        metric: &str,
        runs: std::ops::Range<u32>,
        from: HeadlineFrom,
    ) -> Vec<f64> {
        self.results(records, cell, runs)
            .filter_map(|result| headline_of(&result, metric, from))
            .collect()
    }

    /// The valid results (each its counted records, guest 0 first) of a cell's measured runs
    /// among `runs`, in run order.
    pub fn results<'a, R: Attempted>(
        &'a self,
        records: &'a [R],
        cell: &CellKey<'_>,
        runs: std::ops::Range<u32>,
    ) -> impl Iterator<Item = Vec<&'a R>> + 'a {
        let range = (!runs.is_empty()).then(|| {
            RunKey::new(cell.variant, cell.level, cell.workload, false, runs.start)
                ..=RunKey::new(cell.variant, cell.level, cell.workload, false, runs.end - 1)
        });
        range
            .into_iter()
            .flat_map(|r| self.valid.range(r))
            .map(|(_, ix)| records_at(records, ix))
    }

    /// The valid result of every measured run (each its counted records, guest 0 first), in
    /// key order.
    pub fn measured_results<'a, R>(&'a self, records: &'a [R]) -> impl Iterator<Item = Vec<&'a R>> + 'a {
        self.valid
            .iter()
            .filter(|(k, _)| !k.warmup)
            .map(|(_, ix)| records_at(records, ix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CELL: CellKey<'static> = CellKey {
        variant: "v",
        level: 1.0,
        workload: "w",
    };

    fn rec(run: u32, guest: u32, attempt: u32, ok: bool, of: u32) -> RunRecord {
        serde_json::from_value(serde_json::json!({
            "variant": "v", "level": 1.0, "workload": "w", "run": run, "warmup": false,
            "guest": guest, "guests": 2, "ok": ok, "attempt": attempt, "attempt_records": of,
            "slot": {"boot": 0, "bring_up": 1, "seq": 0, "block": 0},
            "metrics": if ok { serde_json::json!({"m": 10.0 + run as f64}) } else { serde_json::json!({}) },
            "argv": [], "timings": {}, "finished_at": "t",
        }))
        .unwrap()
    }

    /// Guest 0's headline values of the test cell's first 10 runs.
    fn guest0_samples(s: &Settled, records: &[RunRecord]) -> Vec<f64> {
        s.samples(records, &CELL, "m", 0..10, HeadlineFrom::PrimaryGuest)
    }

    #[test]
    fn a_runs_headline_is_guest_0s_or_every_guests_mean() {
        let mut other = rec(0, 1, 1, true, 2);
        other.metrics.insert("m".into(), 14.0);
        let records = vec![rec(0, 0, 1, true, 2), other, rec(1, 0, 1, true, 1)];
        let s = settle(&records);
        let at = |from| s.samples(&records, &CELL, "m", 0..2, from);
        assert_eq!(at(HeadlineFrom::PrimaryGuest), [10.0, 11.0]);
        assert_eq!(at(HeadlineFrom::EveryGuest), [12.0, 11.0]);
        // Without guest 0's figure the run has none, whatever the others say.
        let result: Vec<&RunRecord> = vec![&records[1]];
        assert_eq!(headline_of(&result, "m", HeadlineFrom::EveryGuest), None);
        let result: Vec<&RunRecord> = vec![&records[0], &records[1]];
        assert_eq!(headline_of(&result, "other", HeadlineFrom::EveryGuest), None);
    }

    #[test]
    fn an_attempt_counts_only_when_every_guest_finished_it() {
        let mut bad_other = rec(0, 1, 1, false, 2);
        bad_other.superseded = Some("guest 1 failed".into());
        let mut ok_primary = rec(0, 0, 1, true, 2);
        ok_primary.superseded = Some("guest 1 failed".into());
        let records = vec![
            ok_primary,
            bad_other,
            rec(0, 0, 2, true, 2),
            rec(0, 1, 2, true, 2),
        ];
        let s = settle(&records);
        let key = RunKey::new("v", 1.0, "w", false, 0);
        assert_eq!(
            (0..4).map(|i| s.counts(i)).collect::<Vec<_>>(),
            [false, false, true, true]
        );
        assert_eq!(s.primary(&records, &key).unwrap().attempt, 2);
        assert_eq!(s.last_attempt(&key), 2);
        assert_eq!(guest0_samples(&s, &records), [10.0]);
        assert_eq!(s.failed_runs("v", 1.0, "w"), 0);
    }

    #[test]
    fn settling_record_by_record_gives_what_settling_at_once_gives() {
        let mut superseded = rec(1, 0, 1, true, 2);
        superseded.superseded = Some("guest 1 failed".into());
        let records = vec![
            rec(0, 0, 1, true, 2),
            superseded,
            rec(1, 1, 1, false, 2),
            rec(0, 1, 1, true, 2),
            rec(1, 0, 2, true, 2),
            rec(2, 0, 1, true, 1),
            rec(1, 1, 2, true, 2),
            rec(2, 0, 2, true, 1),
            rec(3, 0, 1, true, 1),
        ];
        let at_once = settle(&records);
        for split in 0..=records.len() {
            let mut s = settle(&records[..split]);
            s.extend(&records[split..]);
            for i in 0..records.len() {
                assert_eq!(s.standing(i), at_once.standing(i), "split {split}, record {i}");
            }
            assert_eq!(guest0_samples(&s, &records), guest0_samples(&at_once, &records));
        }
        assert_eq!(
            (0..records.len())
                .map(|i| at_once.standing(i).unwrap())
                .collect::<Vec<_>>(),
            [
                Standing::Counted,
                Standing::Failed,
                Standing::Failed,
                Standing::Counted,
                Standing::Counted,
                Standing::Counted,
                Standing::Counted,
                Standing::Duplicate,
                // An attempt of one guest: its record makes it whole.
                Standing::Counted,
            ]
        );
    }

    #[test]
    fn a_cut_short_attempt_does_not_count() {
        // Guest 0's record made it to the journal, guest 1's did not (a crash mid-append).
        let records = vec![rec(3, 0, 1, true, 2)];
        let s = settle(&records);
        assert!(!s.counts(0));
        assert_eq!(s.failed_runs("v", 1.0, "w"), 1);
        assert!(guest0_samples(&s, &records).is_empty());
    }

    #[test]
    fn each_guest_sets_warm_up_is_a_run_of_its_own() {
        let warm = |host: Option<&str>, bring_up: u32| {
            let mut r = rec(0, 0, 1, true, 1);
            r.warmup = true;
            r.host = host.map(str::to_string);
            r.slot = crate::journal::Slot {
                boot: 0,
                bring_up,
                seq: 0,
                block: 0,
            };
            r
        };
        // Host a's first and second guest sets, host b's first, then a's first again (a hand-
        // merged journal): only the last is a duplicate.
        let records = vec![
            warm(Some("a"), 1),
            warm(Some("a"), 2),
            warm(Some("b"), 1),
            warm(Some("a"), 1),
        ];
        let s = settle(&records);
        assert_eq!(
            (0..4).map(|i| s.standing(i)).collect::<Vec<_>>(),
            [
                Some(Standing::Counted),
                Some(Standing::Counted),
                Some(Standing::Counted),
                Some(Standing::Duplicate)
            ]
        );
        let set = GuestSet {
            host: Some("b".into()),
            boot: 0,
            bring_up: 1,
        };
        assert!(s.has_valid_result(&RunKey::warm_up("v", 1.0, "w", 0, set)));
        // Never a sample, and never a measured run without a result.
        assert!(guest0_samples(&s, &records).is_empty());
        assert_eq!(s.runs_without_result().count(), 0);
    }

    #[test]
    fn a_second_complete_attempt_is_a_duplicate() {
        let records = vec![rec(0, 0, 1, true, 1), rec(0, 0, 2, true, 1)];
        let s = settle(&records);
        assert_eq!(s.standing(0), Some(Standing::Counted));
        assert_eq!(s.standing(1), Some(Standing::Duplicate));
        assert_eq!(s.counted(&records).count(), 1);
    }
}
