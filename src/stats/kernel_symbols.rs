//! The guest kernel's busiest symbols per cell, from the profiles the payload stores per run
//! (`kernel.profile`, see `ocrig_payload::probe::profile`): self samples (the leaf frame of each
//! folded stack; user-space samples are `[user]`, stacks beyond the stored ones `[other
//! stacks]`) as a share of all samples.
//!
//! Two steps, so that a streaming reader can keep one small digest per record and merge them
//! per cell without holding the journal: [`of_record`] reduces one record to its self samples
//! per symbol (at most the payload's stored stacks, a few hundred entries), and
//! [`CellSymbols::add`] sums such digests into a cell. [`aggregate`] does both over a set of
//! (counted) records.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[cfg(test)]
use crate::journal::RunRecord;

/// Symbols the main reports list per cell.
pub const TOP: usize = 5;

/// Name under which a profile's samples beyond its stored stacks are counted.
pub const OTHER_STACKS: &str = "[other stacks]";

/// One record's kernel profile reduced to what the reports need.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecordSymbols {
    /// Every sample of the window (kernel, user and those beyond the stored stacks).
    pub samples: u64,
    /// The sampled event (`cpu-clock`, `cycles`) and rate, as the payload reported them.
    pub event: String,
    pub rate_hz: u64,
    /// Leaf symbol → self samples.
    pub self_samples: BTreeMap<String, u64>,
}

/// Self samples per leaf frame of folded stacks (`root;...;leaf count`).
pub fn leaf_samples<'a>(folded: impl IntoIterator<Item = (&'a str, u64)>) -> BTreeMap<String, u64> {
    let mut leaf: BTreeMap<String, u64> = BTreeMap::new();
    for (stack, n) in folded {
        let sym = stack.rsplit(';').next().unwrap_or(stack);
        *leaf.entry(sym.to_string()).or_default() += n;
    }
    leaf
}

#[cfg(test)]
/// The self samples of `r`'s kernel profile; None when the record carries none (no payload,
/// profiling off, or the profile failed: the payload's `kernel.not_measured.profile` says why).
pub fn of_record(r: &RunRecord) -> Option<RecordSymbols> {
    super::digest::profile_of(r).map(|p| of_profile(&p))
}

/// The self samples of one run's kernel profile.
pub fn of_profile(profile: &ocrig_payload::probe::profile::Profile) -> RecordSymbols {
    let mut self_samples = leaf_samples(profile.folded.iter().map(|(s, n)| (s.as_str(), *n)));
    if profile.other_samples > 0 {
        *self_samples.entry(OTHER_STACKS.into()).or_default() += profile.other_samples;
    }
    RecordSymbols {
        samples: profile.samples,
        event: profile.event.clone(),
        rate_hz: profile.rate_hz,
        self_samples,
    }
}

/// Name fragments of the kernel's locking functions: mutexes (slow paths, optimistic spinning
/// on the owner), rwsems, the OSQ, raw spinlocks and rwlocks with their queued and PV slow
/// paths, and the test-and-set `virt_spin_lock`. A symbol naming any of them is counted as
/// locking; the kernel's lock-free helpers (`lockref_*`, RCU) are not.
const LOCKING_FRAGMENTS: [&str; 17] = [
    "mutex",
    "rwsem",
    "osq_lock",
    "osq_unlock",
    "spin_on_owner",
    "_spin_lock",
    "_spin_unlock",
    "_spin_trylock",
    "_raw_read_",
    "_raw_write_",
    "queued_spin",
    "queued_read",
    "queued_write",
    "pv_wait",
    "pv_kick",
    "virt_spin_lock",
    "percpu_down",
];

/// True for a kernel locking function (see [`LOCKING_FRAGMENTS`]; also `down_read*`,
/// `down_write*`, `up_read`, `up_write`).
pub fn is_locking(symbol: &str) -> bool {
    LOCKING_FRAGMENTS.iter().any(|f| symbol.contains(f))
        || ["down_read", "down_write", "up_read", "up_write"]
            .iter()
            .any(|p| symbol.starts_with(p))
}

/// True for the part of locking that is waiting for a lock held by another ([`is_locking`]
/// functions that are a slow path, spinning on the owner, the OSQ, or a PV wait): what a
/// preempted holder lengthens, where the uncontended lock and unlock calls stay as they are.
pub fn is_lock_wait(symbol: &str) -> bool {
    is_locking(symbol)
        && [
            "slowpath",
            "spin_on_owner",
            "osq_lock",
            "pv_wait",
            "virt_spin_lock",
        ]
        .iter()
        .any(|f| symbol.contains(f))
}

/// A cell's self samples in the kernel's locking functions ([`is_locking`]): how much of the
/// guest's time went to taking, waiting for and releasing kernel locks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockingShare {
    pub samples: u64,
    /// samples / all samples of the cell (its denominator, `CellSymbols::samples`, beside it).
    pub share: f64,
    /// Of them, waiting for a held lock ([`is_lock_wait`]), and that as a share of all samples.
    pub waiting_samples: u64,
    pub waiting_share: f64,
    pub of_samples: u64,
    /// The busiest locking symbols, busiest first (at most [`TOP`]).
    pub top: Vec<SymbolShare>,
}

/// One symbol's place in a cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SymbolShare {
    pub symbol: String,
    pub samples: u64,
    /// samples / all samples of the cell.
    pub share: f64,
}

/// The summed profiles of one cell (workload × variant × level).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellSymbols {
    pub workload: String,
    pub variant: String,
    pub level: f64,
    /// Records whose profile was added.
    pub runs: usize,
    pub samples: u64,
    /// The sampled events seen (normally one), e.g. `cpu-clock`.
    pub events: Vec<String>,
    pub self_samples: BTreeMap<String, u64>,
}

impl CellSymbols {
    pub fn new(workload: &str, variant: &str, level: f64) -> Self {
        Self {
            workload: workload.into(),
            variant: variant.into(),
            level,
            runs: 0,
            samples: 0,
            events: Vec::new(),
            self_samples: BTreeMap::new(),
        }
    }

    /// Adds one record's digest.
    pub fn add(&mut self, r: RecordSymbols) {
        self.runs += 1;
        self.samples += r.samples;
        if !self.events.contains(&r.event) {
            self.events.push(r.event);
        }
        for (sym, n) in r.self_samples {
            *self.self_samples.entry(sym).or_default() += n;
        }
    }

    /// The `n` symbols with the most self samples, busiest first (ties by name).
    pub fn top(&self, n: usize) -> Vec<SymbolShare> {
        self.top_of(n, |_| true)
    }

    /// The `n` busiest symbols that `keep` accepts, as [`CellSymbols::top`].
    fn top_of(&self, n: usize, keep: impl Fn(&str) -> bool) -> Vec<SymbolShare> {
        let mut v: Vec<(&String, u64)> = self
            .self_samples
            .iter()
            .filter(|(s, _)| keep(s))
            .map(|(s, k)| (s, *k))
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let total = self.samples.max(1) as f64;
        v.into_iter()
            .take(n)
            .map(|(s, k)| SymbolShare {
                symbol: s.clone(),
                samples: k,
                share: k as f64 / total,
            })
            .collect()
    }

    /// The cell's samples in kernel locking functions, with the busiest of them.
    pub fn locking(&self) -> LockingShare {
        let samples: u64 = self
            .self_samples
            .iter()
            .filter(|(s, _)| is_locking(s))
            .map(|(_, k)| k)
            .sum();
        let waiting_samples: u64 = self
            .self_samples
            .iter()
            .filter(|(s, _)| is_lock_wait(s))
            .map(|(_, k)| k)
            .sum();
        LockingShare {
            samples,
            share: samples as f64 / self.samples.max(1) as f64,
            waiting_samples,
            waiting_share: waiting_samples as f64 / self.samples.max(1) as f64,
            of_samples: self.samples,
            top: self.top_of(TOP, is_locking),
        }
    }
}

#[cfg(test)]
/// The cells of `records` that have at least one profile, in order of first appearance. Pass
/// only the records that count (`settle(..).counted(..)`): every record given is added.
pub fn aggregate<'a>(records: impl IntoIterator<Item = &'a RunRecord>) -> Vec<CellSymbols> {
    cells_of(
        records
            .into_iter()
            .filter_map(|r| Some((r.workload.as_str(), r.variant.as_str(), r.level, of_record(r)?))),
    )
}

/// [`aggregate`] over report digests (pass only the counted ones).
pub fn aggregate_digests<'a>(
    runs: impl IntoIterator<Item = &'a super::digest::RunDigest>,
) -> Vec<CellSymbols> {
    cells_of(runs.into_iter().filter_map(|d| {
        let p = d.profile.as_deref()?;
        Some((&*d.workload, &*d.variant, d.level, of_profile(p)))
    }))
}

/// Sums per-record symbols into cells (workload, variant, level), in order of first appearance.
fn cells_of<'a>(records: impl Iterator<Item = (&'a str, &'a str, f64, RecordSymbols)>) -> Vec<CellSymbols> {
    let mut out: Vec<CellSymbols> = Vec::new();
    // (workload, variant, level bits) → index into `out`: one lookup per record.
    let mut index: BTreeMap<(String, String, u64), usize> = BTreeMap::new();
    for (workload, variant, level, digest) in records {
        let key = (workload.to_string(), variant.to_string(), level.to_bits());
        let i = *index.entry(key).or_insert_with(|| {
            out.push(CellSymbols::new(workload, variant, level));
            out.len() - 1
        });
        out[i].add(digest);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{profiled, record};

    #[test]
    fn a_record_reduces_to_its_leaf_frames_and_a_cell_ranks_them_by_share() {
        let a = profiled(
            "base",
            2.0,
            &[
                ("entry;__mutex_lock_slowpath;mutex_spin_on_owner", 30),
                ("entry;kernfs_iop_permission;__mutex_lock_slowpath", 50),
                ("[user]", 100),
            ],
            20,
        );
        let d = of_record(&a).unwrap();
        assert_eq!(d.samples, 200);
        assert_eq!(d.self_samples["mutex_spin_on_owner"], 30);
        assert_eq!(d.self_samples[OTHER_STACKS], 20);
        // A record without a payload (or without a profile) has no digest.
        assert!(of_record(&record("base", 2.0, "x", 0, &[])).is_none());

        let b = profiled("base", 2.0, &[("entry;vfs_read;mutex_spin_on_owner", 200)], 0);
        let other_cell = profiled("base", 1.0, &[("idle", 10)], 0);
        let cells = aggregate([&a, &other_cell, &b]);
        assert_eq!(cells.len(), 2);
        let c = &cells[0];
        assert_eq!((c.level, c.runs, c.samples), (2.0, 2, 400));
        assert_eq!(c.events, ["cpu-clock"]);
        let top = c.top(3);
        assert_eq!(top[0].symbol, "mutex_spin_on_owner");
        assert_eq!(top[0].samples, 230);
        assert!((top[0].share - 230.0 / 400.0).abs() < 1e-12);
        assert_eq!(top[1].symbol, "[user]");
        assert_eq!(top[2].symbol, "__mutex_lock_slowpath");
        assert_eq!(cells[1].top(5).len(), 1);
    }

    #[test]
    fn the_locking_share_counts_the_kernels_lock_functions_against_every_sample() {
        let locking = [
            "native_queued_spin_lock_slowpath",
            "__pv_queued_spin_lock_slowpath",
            "_raw_spin_lock_irqsave",
            "_raw_spin_unlock_irqrestore",
            "__mutex_lock_slowpath",
            "mutex_spin_on_owner",
            "rwsem_down_read_slowpath",
            "osq_lock",
            "down_write",
            "up_read",
            "queued_write_lock_slowpath",
            "_raw_read_lock_irqsave",
            "virt_spin_lock",
            "pv_wait",
        ];
        let not = [
            "memset_erms",
            "lockref_get_not_dead",
            "__rcu_read_unlock",
            "[user]",
            "down",
            "update_blocked_averages",
        ];
        for s in locking {
            assert!(is_locking(s), "{s}");
        }
        for s in not {
            assert!(!is_locking(s), "{s}");
        }
        let r = profiled(
            "base",
            2.0,
            &[
                (
                    "a;kernfs_fop_open;__mutex_lock_slowpath;native_queued_spin_lock_slowpath",
                    30,
                ),
                ("a;kernfs_fop_open;__mutex_lock_slowpath", 10),
                ("a;sysfs_kf_seq_show;memset_erms", 50),
                ("[user]", 10),
            ],
            100,
        );
        let cells = aggregate([&r]);
        let l = cells[0].locking();
        // 40 of 200: the samples beyond the stored stacks count in the denominator, unclassified.
        assert_eq!((l.samples, l.of_samples), (40, 200));
        // Of them the spinlock slow path is waiting; the mutex slow path's own frame too.
        assert_eq!(l.waiting_samples, 40);
        assert!(is_lock_wait("mutex_spin_on_owner") && is_lock_wait("osq_lock"));
        assert!(
            !is_lock_wait("_raw_spin_lock") && !is_lock_wait("mutex_unlock") && !is_lock_wait("down_read")
        );
        assert!((l.share - 0.2).abs() < 1e-12);
        let names: Vec<&str> = l.top.iter().map(|s| s.symbol.as_str()).collect();
        assert_eq!(
            names,
            ["native_queued_spin_lock_slowpath", "__mutex_lock_slowpath"]
        );
        assert!((l.top[0].share - 0.15).abs() < 1e-12);
    }
}
