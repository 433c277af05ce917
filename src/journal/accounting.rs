//! Which journaled results count: the one definition of "the valid result of run r", used by
//! the sweep (what is done, the CV stopping rule), by resume and by the reports.
//!
//! A run is one slot of one cell (variant × level × workload, warm-up or measured, run index).
//! It may take several attempts. An attempt counts only when every guest that ran something
//! in it finished with a result: all its records are `ok`, none is marked superseded, and as
//! many are journaled as the attempt says it wrote. The valid result of a run is its first
//! such attempt in journal order; any later complete attempt of the same run (which the sweep
//! never makes, but a hand-merged journal might hold) is a duplicate and does not count.
//! Journals of older ocrig versions carry no `superseded` or `attempt_records`: there, an
//! attempt counts when guest 0's record and every other record of it are `ok`.
//!
//! A warm-up is never a sample. It is made once on every freshly brought-up guest set (after
//! every boot of a group, on every host), so a warm-up's run is keyed by its guest set too
//! ([`GuestSet`]): each set's warm-up counts once, as that set's warm-up, and two sets' warm-ups
//! are neither duplicates nor attempts of one another.

use std::collections::{BTreeMap, BTreeSet};

use super::RunRecord;

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
    /// The guest set a record ran on, if the record says.
    pub fn of(r: &RunRecord) -> Option<Self> {
        r.slot.map(|s| Self {
            host: r.host.clone(),
            boot: s.boot,
            bring_up: s.bring_up,
        })
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

    pub fn of(r: &RunRecord) -> Self {
        match (r.warmup, GuestSet::of(r)) {
            (true, Some(set)) => Self::warm_up(&r.variant, r.level, &r.workload, r.run, set),
            _ => Self::new(&r.variant, r.level, &r.workload, r.warmup, r.run),
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
/// [`settle`].
#[derive(Debug, Clone, Default)]
pub struct Settled {
    standing: Vec<Standing>,
    /// Run → indices of its valid attempt's records, by guest.
    valid: BTreeMap<RunKey, Vec<usize>>,
    /// Run → the highest attempt number journaled.
    last_attempt: BTreeMap<RunKey, u32>,
}

/// Records of one attempt, in journal order.
struct Attempt {
    key: RunKey,
    indices: Vec<usize>,
    guests: BTreeSet<u32>,
}

impl Attempt {
    fn complete(&self, records: &[RunRecord]) -> bool {
        let recs = || self.indices.iter().map(|&i| &records[i]);
        let all_ok = recs().all(|r| r.ok && r.superseded.is_none());
        let declared = recs().find_map(|r| r.attempt_records);
        let whole = match declared {
            Some(n) => self.indices.len() == n as usize,
            None => self.guests.contains(&0),
        };
        all_ok && whole
    }
}

/// Settles every record: the one place that decides what counts.
pub fn settle(records: &[RunRecord]) -> Settled {
    let mut attempts: Vec<Attempt> = Vec::new();
    // (run, attempt number) → the attempt now collecting records; a guest seen twice starts a
    // new one (an older ocrig restarted attempt numbers at 1 on resume).
    let mut open: BTreeMap<(RunKey, u32), usize> = BTreeMap::new();
    let mut last_attempt: BTreeMap<RunKey, u32> = BTreeMap::new();
    for (i, r) in records.iter().enumerate() {
        let key = RunKey::of(r);
        let last = last_attempt.entry(key.clone()).or_default();
        *last = (*last).max(r.attempt);
        let slot = open.get(&(key.clone(), r.attempt)).copied();
        match slot {
            Some(a) if !attempts[a].guests.contains(&r.guest) => {
                attempts[a].indices.push(i);
                attempts[a].guests.insert(r.guest);
            }
            _ => {
                open.insert((key.clone(), r.attempt), attempts.len());
                attempts.push(Attempt {
                    key,
                    indices: vec![i],
                    guests: BTreeSet::from([r.guest]),
                });
            }
        }
    }
    let mut standing = vec![Standing::Failed; records.len()];
    let mut valid: BTreeMap<RunKey, Vec<usize>> = BTreeMap::new();
    for a in &attempts {
        if !a.complete(records) {
            continue;
        }
        let already = valid.contains_key(&a.key);
        for &i in &a.indices {
            standing[i] = if already {
                Standing::Duplicate
            } else {
                Standing::Counted
            };
        }
        if !already {
            let mut by_guest = a.indices.clone();
            by_guest.sort_by_key(|&i| records[i].guest);
            valid.insert(a.key.clone(), by_guest);
        }
    }
    Settled {
        standing,
        valid,
        last_attempt,
    }
}

impl Settled {
    /// Whether record `index` is part of its run's valid result.
    pub fn counts(&self, index: usize) -> bool {
        self.standing.get(index) == Some(&Standing::Counted)
    }

    #[cfg(test)]
    pub fn standing(&self, index: usize) -> Option<Standing> {
        self.standing.get(index).copied()
    }

    /// The valid result of a run: its counted records by guest (guest 0 first), if it has one.
    pub fn valid_result<'a>(&self, records: &'a [RunRecord], key: &RunKey) -> Option<Vec<&'a RunRecord>> {
        self.valid
            .get(key)
            .map(|ix| ix.iter().map(|&i| &records[i]).collect())
    }

    pub fn has_valid_result(&self, key: &RunKey) -> bool {
        self.valid.contains_key(key)
    }

    /// The run's primary result: guest 0's record of its valid attempt.
    pub fn primary<'a>(&self, records: &'a [RunRecord], key: &RunKey) -> Option<&'a RunRecord> {
        self.valid_result(records, key)?
            .into_iter()
            .find(|r| r.guest == 0)
    }

    /// The highest attempt number journaled for a run (0 when it has none).
    pub fn last_attempt(&self, key: &RunKey) -> u32 {
        self.last_attempt.get(key).copied().unwrap_or(0)
    }

    /// Every counted record, in journal order.
    pub fn counted<'a>(&'a self, records: &'a [RunRecord]) -> impl Iterator<Item = &'a RunRecord> + 'a {
        records
            .iter()
            .enumerate()
            .filter(|(i, _)| self.counts(*i))
            .map(|(_, r)| r)
    }

    /// Measured runs of a cell that were attempted but have no valid result.
    pub fn failed_runs(&self, variant: &str, level: f64, workload: &str) -> usize {
        self.last_attempt
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
        self.last_attempt
            .keys()
            .filter(|k| !k.warmup && !self.valid.contains_key(*k))
    }

    /// The headline values (guest 0's `metric`) of a cell's valid measured results among
    /// `runs`, in run order — the samples the CV stopping rule and the summaries see.
    pub fn samples(
        &self,
        records: &[RunRecord],
        cell: &CellKey<'_>,
        metric: &str,
        runs: std::ops::Range<u32>,
    ) -> Vec<f64> {
        if runs.is_empty() {
            return Vec::new();
        }
        let from = RunKey::new(cell.variant, cell.level, cell.workload, false, runs.start);
        let to = RunKey::new(cell.variant, cell.level, cell.workload, false, runs.end - 1);
        self.valid
            .range(from..=to)
            .filter_map(|(k, _)| self.primary(records, k)?.metrics.get(metric).copied())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::tests::OLD_FORMAT_RUN;

    const CELL: CellKey<'static> = CellKey {
        variant: "v",
        level: 1.0,
        workload: "w",
    };

    fn rec(run: u32, guest: u32, attempt: u32, ok: bool, of: Option<u32>) -> RunRecord {
        serde_json::from_value(serde_json::json!({
            "variant": "v", "level": 1.0, "workload": "w", "run": run, "warmup": false,
            "guest": guest, "guests": 2, "ok": ok, "attempt": attempt, "attempt_records": of,
            "metrics": if ok { serde_json::json!({"m": 10.0 + run as f64}) } else { serde_json::json!({}) },
            "argv": [], "timings": {}, "finished_at": "t",
        }))
        .unwrap()
    }

    #[test]
    fn an_attempt_counts_only_when_every_guest_finished_it() {
        let mut bad_other = rec(0, 1, 1, false, Some(2));
        bad_other.superseded = Some("guest 1 failed".into());
        let mut ok_primary = rec(0, 0, 1, true, Some(2));
        ok_primary.superseded = Some("guest 1 failed".into());
        let records = vec![
            ok_primary,
            bad_other,
            rec(0, 0, 2, true, Some(2)),
            rec(0, 1, 2, true, Some(2)),
        ];
        let s = settle(&records);
        let key = RunKey::new("v", 1.0, "w", false, 0);
        assert_eq!(
            (0..4).map(|i| s.counts(i)).collect::<Vec<_>>(),
            [false, false, true, true]
        );
        assert_eq!(s.primary(&records, &key).unwrap().attempt, 2);
        assert_eq!(s.last_attempt(&key), 2);
        assert_eq!(s.samples(&records, &CELL, "m", 0..10), [10.0]);
        assert_eq!(s.failed_runs("v", 1.0, "w"), 0);
    }

    #[test]
    fn a_cut_short_attempt_does_not_count() {
        // Guest 0's record made it to the journal, guest 1's did not (a crash mid-append).
        let records = vec![rec(3, 0, 1, true, Some(2))];
        let s = settle(&records);
        assert!(!s.counts(0));
        assert_eq!(s.failed_runs("v", 1.0, "w"), 1);
        assert!(s.samples(&records, &CELL, "m", 0..10).is_empty());
    }

    #[test]
    fn each_guest_sets_warm_up_is_a_run_of_its_own() {
        let warm = |host: Option<&str>, bring_up: u32| {
            let mut r = rec(0, 0, 1, true, Some(1));
            r.warmup = true;
            r.host = host.map(str::to_string);
            r.slot = Some(crate::journal::Slot {
                boot: 0,
                bring_up,
                seq: 0,
            });
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
        assert!(s.samples(&records, &CELL, "m", 0..10).is_empty());
        assert_eq!(s.runs_without_result().count(), 0);
    }

    #[test]
    fn a_second_complete_attempt_is_a_duplicate() {
        let records = vec![rec(0, 0, 1, true, Some(1)), rec(0, 0, 2, true, Some(1))];
        let s = settle(&records);
        assert_eq!(s.standing(0), Some(Standing::Counted));
        assert_eq!(s.standing(1), Some(Standing::Duplicate));
        assert_eq!(s.counted(&records).count(), 1);
    }

    #[test]
    fn old_journals_settle_by_their_ok_flags() {
        let old: RunRecord = match serde_json::from_str(OLD_FORMAT_RUN).unwrap() {
            crate::journal::Entry::Run(r) => *r,
            _ => unreachable!(),
        };
        // Today's bug, as an old journal holds it: guest 0 ok in attempt 1 while guest 1 failed,
        // then attempt 2 ok on both. Only attempt 2 counts; the old format's run 1 counts once.
        let mut failed_other = old.clone();
        (failed_other.guest, failed_other.ok) = (1, false);
        let mut retry0 = old.clone();
        retry0.attempt = 2;
        let mut retry1 = retry0.clone();
        retry1.guest = 1;
        let mut run1 = old.clone();
        run1.run = 1;
        // An older resume restarted attempts at 1: run 1 journaled twice as attempt 1.
        let run1_again = run1.clone();
        let records = vec![old.clone(), failed_other, retry0, retry1, run1, run1_again];
        let s = settle(&records);
        assert_eq!(
            (0..6).map(|i| s.counts(i)).collect::<Vec<_>>(),
            [false, false, true, true, true, false]
        );
        assert_eq!(
            s.samples(
                &records,
                &CellKey {
                    variant: "base",
                    level: 0.5,
                    workload: "lock-tas"
                },
                "ops_per_sec",
                0..2
            ),
            [123.5, 123.5]
        );
    }
}
