//! The scheduler of one host's share of a sweep (all of it, on a sweep's one host): plan →
//! attempts → records. It decides which run comes next (block by block, each block a fresh
//! bring-up of one group: block k of every level before block k+1 of any, the levels in a
//! mirrored order, 1x 2x then 2x 1x; at a level of several boot groups block k of every group
//! before block k+1 of any; within a block round after round across the group's cells,
//! in a balanced order, [`super::order::RoundDesign`]), warms every fresh guest set with a
//! whole round before its first measured round, retries an attempt its payload's self-checks rejected on the same workers and one
//! whose guests failed on fresh ones, stops a cell once its stopping rule is met on the
//! results pooled over every host, and journals every attempt with the block it belongs to
//! — talking only to an [`Executor`].
//!
//! Accounting holds by construction: what is done, the stopping rule's samples, which warm-ups
//! a guest set has had and what a resume skips all come from [`accounting::settle`] over the
//! journaled records, the same rule the reports use.

use std::time::Instant;

use serde_json::Value;

use super::deadlines;
use super::order::{block_order, level_order};
use super::plan::{BootGroup, Cell, Plan};
use super::progress::Progress;
use super::records::{self, AttemptId};
use super::stopping::{Next, measured_key, next_run};
// The scheduler's tests judge the stopping rule through this name too.
#[cfg(test)]
use super::stopping::enough_runs;
use crate::executor::{Executor, RunRequest};
use crate::journal::accounting::{self, GuestSet, RunKey, Settled};
use crate::journal::{Entry, JournalWriter, RunRecord, Slot};
use crate::scenario::Background;

/// Wall time spent in each phase over the whole sweep, seconds, and what came of it.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct PhaseTotals {
    pub boot_s: f64,
    pub deploy_s: f64,
    /// Inside the executor's gated runs: starting the payloads, the run, collecting.
    pub run_s: f64,
    /// Of `run_s`, from the go signal until the last worker finished: the benchmark itself.
    pub measured_s: f64,
    pub teardown_s: f64,
    /// Boot groups the plan had work for.
    pub groups: u32,
    /// Times a group of workers was brought up (booted), including failed attempts to.
    pub boots: u32,
    /// Measured runs that got their valid result in this `ocrig run`.
    pub runs_ok: u32,
    /// Measured runs given up in this `ocrig run` (every attempt failed, or the workers could
    /// not be brought up).
    pub runs_failed: u32,
    /// Warm-up runs made that ran to their end (on every fresh guest set, on every host; one
    /// its self-checks rejected included, as it warmed its guests all the same); never
    /// counted as runs.
    pub warm_ups: u32,
    /// Attempts that failed (each retried while retries were left).
    pub attempts_failed: u32,
    /// Of those, attempts the host disturbed (`host.max_other_load`), and the seconds spent
    /// waiting for a quiet host before their retries.
    pub disturbed: u32,
    pub disturbed_wait_s: f64,
    /// Measured runs counted although the host disturbed them (it stayed busy through a whole
    /// wait): not among `attempts_failed`, each marked disturbed in the journal.
    pub disturbed_counted: u32,
    /// Largest measured go-signal skew across workers, microseconds.
    pub max_start_skew_us: f64,
}

/// One host's part of a sweep: a sweep on one host is the case of one share (`of == 1`, no
/// label); over several interchangeable hosts, each host's scheduler gets its share.
#[derive(Debug, Clone)]
pub struct HostShare {
    /// Recorded as every record's `host`; None for the sweep's one host.
    pub label: Option<String>,
    /// This host's position among the `of` hosts the measured runs are spread over: unit `u`
    /// is this host's when `u mod of == index`, a unit being a measured run of every cell, or
    /// in a blocked group a block of them ([`BootGroup::share_unit`]: a block's bring-up is
    /// not split over hosts, and block k of every group at a level is on one host, so each
    /// pair of blocks is made on one host). Every cell so gets the same number of runs on
    /// each host (±1 run or block), so no comparison confounds host with variant or level.
    /// Warm-ups are not spread: every guest set of every host gets its own.
    pub index: usize,
    pub of: usize,
}

impl HostShare {
    /// The whole sweep, on its one host.
    #[cfg(test)]
    pub fn only() -> Self {
        Self {
            label: None,
            index: 0,
            of: 1,
        }
    }

    /// Whether unit `unit` (see `index`) is this host's.
    pub fn takes(&self, unit: u32) -> bool {
        self.of <= 1 || unit as usize % self.of == self.index
    }
}

/// The payload refused a run's arguments (its exit status 2): the scenario asks what this
/// guest cannot do (a torture type or trace event its kernel lacks, a missing directory).
/// Every retry would be refused alike, so the sweep stops at once with the payload's own
/// words; the journal keeps the attempt. Bad input: exit status 2.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "workload `{workload}` of variant `{variant}` at {level}x: the payload in guest {guest} refused its arguments \
     (`{argv}`): {words}. Fix the scenario (the workload's `args`, or the variant's kernel); the sweep stopped \
     here and its journal keeps the attempt"
)]
pub struct PayloadRefusedArgs {
    pub workload: String,
    pub variant: String,
    pub level: f64,
    pub guest: u32,
    pub argv: String,
    pub words: String,
}

/// The host of a multi-host sweep could no longer be reached; its unfinished runs are left
/// for the other hosts.
#[derive(Debug, Clone)]
pub struct HostLost {
    pub host: String,
    pub why: String,
}

impl std::fmt::Display for HostLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "host {} was lost: {}", self.host, self.why)
    }
}

impl std::error::Error for HostLost {}

/// The journal every host's scheduler appends to (one, for a sweep on one host), with every
/// record in it in journal order: each scheduler reads the others' records from here, so its
/// stopping rule judges the pooled valid results of a cell across hosts, by the same
/// accounting rule. A failed append poisons the writer, so no scheduler appends after it.
pub struct SharedJournal {
    pub writer: JournalWriter,
    pub records: Vec<RunRecord>,
}

impl SharedJournal {
    /// A journal being written by `writer` whose records so far are `previous` (those of the
    /// journal being resumed; empty for a new sweep).
    pub fn new(writer: JournalWriter, previous: Vec<RunRecord>) -> std::sync::Mutex<Self> {
        std::sync::Mutex::new(Self {
            writer,
            records: previous.into_iter().map(RunRecord::for_accounting).collect(),
        })
    }

    /// Appends one attempt's records (of a cell whose headline metric is `headline`); keeps of
    /// them only what the accounting rule and the stopping rules read: not the telemetry
    /// (kilobytes a record, and a sweep may make a million), and of the metrics only the
    /// headline one (a lock run reports a dozen: 1.1 of the 1.9 KB an accounting copy held).
    fn append_all(&mut self, recs: &[RunRecord], headline: &str) -> anyhow::Result<()> {
        let entries: Vec<Entry> = recs.iter().cloned().map(|r| Entry::Run(Box::new(r))).collect();
        self.writer.append_all(&entries)?;
        self.records.extend(recs.iter().cloned().map(|r| {
            let mut r = r.for_accounting();
            r.metrics.retain(|k, _| k == headline);
            r
        }));
        Ok(())
    }
}

/// Runs every boot group of `plan` on `exec`, for `share`, appending to `journal`; runs with
/// a valid result there already (a resumed sweep, or another host's) are not run again.
/// Owning the executor means dropping this future (on a signal, or when another host's
/// scheduler failed) drops every live worker. A host of a multi-host sweep that cannot be
/// reached when its workers fail to come up ends this call with [`HostLost`]; every record it
/// made is journaled.
pub async fn run_with<E: Executor>(
    plan: &Plan,
    exec: E,
    journal: &std::sync::Mutex<SharedJournal>,
    progress: &Progress,
    share: HostShare,
) -> anyhow::Result<PhaseTotals> {
    let (settled, synced, bring_ups) = {
        let j = lock(journal);
        let bring_ups = last_bring_ups(plan, &j.records, &share);
        (accounting::settle(&j.records), j.records.len(), bring_ups)
    };
    let mut s = Scheduler {
        plan,
        exec,
        journal,
        progress,
        synced,
        settled,
        last_bring_ups: bring_ups,
        totals: PhaseTotals::default(),
        share,
        host: HostLoad::default(),
    };
    let swept = s.run_levels().await;
    s.exec.shut_down().await;
    swept.map(|()| s.totals)
}

fn lock(j: &std::sync::Mutex<SharedJournal>) -> std::sync::MutexGuard<'_, SharedJournal> {
    j.lock().unwrap_or_else(|e| e.into_inner())
}

/// The highest bring-up of each boot group that `share`'s host's journaled `records` name (0:
/// none), so its new guest sets are numbered on from the interrupted sweep's and a resume's
/// sets are told from them. One pass: the journal may hold a million records.
fn last_bring_ups(plan: &Plan, records: &[RunRecord], share: &HostShare) -> Vec<u32> {
    let mut last = vec![0; plan.boots.len()];
    for slot in records.iter().filter(|r| r.host == share.label).map(|r| r.slot) {
        if let Some(l) = last.get_mut(slot.boot as usize) {
            *l = (*l).max(slot.bring_up);
        }
    }
    last
}

struct Scheduler<'a, E> {
    plan: &'a Plan,
    exec: E,
    journal: &'a std::sync::Mutex<SharedJournal>,
    share: HostShare,
    progress: &'a Progress,
    /// How many of the shared journal's records (the resumed one's, this host's and the other
    /// hosts', in journal order) this scheduler has taken in: `settled` is of that prefix. (Read
    /// in place: a copy per host scheduler doubled a million-record sweep's memory.)
    synced: usize,
    settled: Settled,
    /// Per boot group, the last bring-up this host journaled before this `ocrig run`.
    last_bring_ups: Vec<u32>,
    totals: PhaseTotals,
    host: HostLoad,
}

/// Whether the host is busy with a load of its own that lasts. The last wait for a quiet host
/// ended with the host still busy, and no run has run quiet since: under a lasting load a
/// disturbed run is neither waited for nor retried but counted, marked disturbed (each wait
/// and retry would cost as much and be disturbed too: a persistent 25 % hog of one CPU took
/// spinlock-variants from 515 s to 1285 s and still left 80 of 120 slots empty, and an empty
/// slot loses its comparison's pairing). The state ends after [`QUIET_RUNS`] measured runs in
/// a row ran clearly quiet (at most [`QUIET_SHARE`] of the bound), and the next disturbance is
/// waited for again.
#[derive(Debug, Default)]
struct HostLoad {
    busy: bool,
    /// Measured runs in a row that ran clearly quiet while the host was busy.
    quiet_in_a_row: u32,
}

impl HostLoad {
    /// What becomes of a measured run the host disturbs now: counted while it is busy, else
    /// failed (waited out and retried).
    fn disturbed_then(&self) -> records::Disturbed {
        if self.busy {
            records::Disturbed::Count
        } else {
            records::Disturbed::Fail
        }
    }

    fn disturbed(&mut self) {
        self.quiet_in_a_row = 0;
    }

    /// A measured run that was not disturbed: `clearly_quiet` ones in a row end the busy state.
    fn undisturbed(&mut self, clearly_quiet: bool) {
        self.quiet_in_a_row = if clearly_quiet { self.quiet_in_a_row + 1 } else { 0 };
        if self.quiet_in_a_row >= QUIET_RUNS {
            self.busy = false;
        }
    }

    /// A wait for a quiet host ended, `quiet` or still busy.
    fn waited(&mut self, quiet: bool) {
        self.busy = !quiet;
        self.quiet_in_a_row = 0;
    }
}

/// The share of `host.max_other_load` at most which a run ends the busy state ([`HostLoad`]):
/// a lasting load reads on both sides of its bound from run to run (a 25 % hog of one of 2 CPUs
/// read 3.9-8 % against a 5 % bound, 2026-12-04), and ending the state at the first run under
/// the bound cost a 30 s wait every few runs (44 waits in the first 20 minutes of
/// spinlock-variants); a quiet host reads 0.3 % (max 0.7 %).
pub const QUIET_SHARE: f64 = 0.5;

/// Measured runs in a row that must run clearly quiet to end the busy state ([`HostLoad`]):
/// a lasting load that competes with the guests reads clearly quiet now and then on its own
/// (a 25 % hog of one of 2 CPUs during the 2x half of spinlock-variants: 19 clearly quiet runs
/// among 211, at most two in a row), and each such run ended the state and cost the next
/// disturbance a 30 s wait that found the host still busy (20 waits, 600 s of a 2400 s
/// sweep). A quiet host reads clearly quiet on every run, so it loses nothing.
pub const QUIET_RUNS: u32 = 3;

/// The state of one boot group's workers, kept across the group's blocks.
struct GroupState {
    index: u32,
    /// The block being made.
    block: u32,
    /// Facts of the workers now up (brought up and warmed); None when none are.
    up: Option<Value>,
    /// Which record holds `up` whole, once an attempt on these workers journaled it.
    facts_on: Option<Value>,
    /// The latest bring-up of this group on this host, numbered on from the journal's, so a
    /// resume's guest sets are told from the interrupted sweep's.
    bring_ups: u32,
    seq: u32,
    /// Why the workers could not be brought up; every later run of the group is recorded failed.
    broken: Option<String>,
    /// Cells with no measured run left to make on this host (their count or target met, or
    /// done before): they are not warmed.
    stopped: Vec<bool>,
    /// The progress bar's runs left (on this host) of the group's cells that share a budget of
    /// rounds' time ([`Cell::budget_arms`]): each run of theirs counts one until it is
    /// spent, and what is left counts when the last of them stops.
    budget_left: u64,
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// Every guest finished with a result: the run has it.
    Counted,
    /// The payload's own checks rejected it and nothing else failed: the guests answered and
    /// ran it to its end, so they stay up and the retry is made on them.
    Rejected,
    /// A guest failed (timed out, died, lost its session, no report): the guests are taken
    /// down, as they may be hung or dead, and whatever runs next gets fresh ones.
    GuestFailed,
    /// Every guest finished, but the host's other load on the sweep's CPUs was above
    /// `host.max_other_load` during the run: the guests stay up, the host is waited out.
    Disturbed,
}

/// The failed attempts of one measured run so far, each kind against its own budget.
#[derive(Debug, Default)]
struct Tries {
    guest_failures: u32,
    rejections: u32,
    disturbances: u32,
}

impl Tries {
    /// Attempts made so far.
    fn made(&self) -> u32 {
        self.guest_failures + self.rejections + self.disturbances
    }

    /// Counts a failed attempt that ended `ended`; whether its kind has a retry left: up to
    /// `timeouts.retries` guest failures (on fresh guests), `self_check_retries` rejections
    /// (on the same ones) and `disturbed_retries` disturbances.
    fn retry_left(&mut self, ended: Ended, timeouts: &crate::scenario::Timeouts) -> bool {
        let (spent, budget) = match ended {
            Ended::Counted => return false,
            Ended::Rejected => (&mut self.rejections, timeouts.self_check_retries),
            Ended::GuestFailed => (&mut self.guest_failures, timeouts.retries),
            Ended::Disturbed => (&mut self.disturbances, timeouts.disturbed_retries),
        };
        *spent += 1;
        *spent <= budget
    }
}

impl<E: Executor> Scheduler<'_, E> {
    // ---------------------------------------------------------- the order: what runs next

    /// Every level, block by block: block 0 of every level, then block 1 of every level in the
    /// reversed level order, and so on ([`level_order`]: 1x 2x, 2x 1x, 1x 2x, …), each level's
    /// block as [`Self::run_level`] makes it; a level whose groups have no block left is passed.
    /// So a host drifting evenly weighs every level alike, and each level's bring-ups are spread
    /// over the sweep. Where every level is one block (one bring-up a level), every level runs
    /// to its end in turn, as the plan lists them.
    async fn run_levels(&mut self) -> anyhow::Result<()> {
        let plan = self.plan;
        // Every boot group's state, kept from its level's first block to its last: the workers
        // it has up, its bring-ups on this host, its stopped cells. None: not started yet, or
        // no measured run left on this host.
        let mut states: Vec<Option<GroupState>> = plan.boots.iter().map(|_| None).collect();
        let blocks = plan.boots.iter().map(BootGroup::blocks).max().unwrap_or(0);
        for block in 0..blocks {
            for level in level_order(plan.level_boots.len(), block) {
                self.run_level(plan.level_boots[level].clone(), block, &mut states)
                    .await?;
            }
        }
        Ok(())
    }

    /// Block `block` of one level, whose boot groups are `plan.boots[boots]`: the block of each
    /// group that has one, the groups in the block order. The level's groups are started
    /// ([`Self::start_group`]) as its first block begins, their states kept in `states` (indexed
    /// as `plan.boots`) for its later blocks. A level of one group makes its block k on its k-th
    /// fresh bring-up; a level of several makes block k of every group before block k+1 of any.
    async fn run_level(
        &mut self,
        boots: std::ops::Range<usize>,
        block: u32,
        states: &mut [Option<GroupState>],
    ) -> anyhow::Result<()> {
        let plan = self.plan;
        let groups = &plan.boots[boots.clone()];
        if block == 0 {
            for (g, group) in groups.iter().enumerate() {
                states[boots.start + g] = self.start_group((boots.start + g) as u32, group);
            }
        }
        let (order, seed) = (plan.schedule.order, plan.schedule.seed);
        for g in block_order(groups.len(), order, seed, boots.start as u32, block) {
            if let Some(state) = states[boots.start + g].as_mut()
                && block < groups[g].blocks()
            {
                self.run_block(&groups[g], state, block).await?;
            }
        }
        Ok(())
    }

    /// A boot group's state as its first block starts; None when it has no measured run left
    /// on this host (its runs are then counted done on the progress bar).
    fn start_group(&mut self, index: u32, group: &BootGroup) -> Option<GroupState> {
        self.sync();
        let cells = &group.cells;
        let active: Vec<bool> = cells.iter().map(|c| self.has_work(group, c)).collect();
        // Cells finished before (a resumed sweep, or the other hosts): their runs count as done.
        for (c, _) in cells.iter().zip(&active).filter(|(_, a)| !**a) {
            let mine = (0..c.max_runs).filter(|&r| self.takes(group, r)).count();
            self.progress.skip(mine as u64);
        }
        if !active.iter().any(|&a| a) {
            return None;
        }
        self.totals.groups += 1;
        tracing::info!(level = group.level, variants = ?group.variants, guests = group.guests, blocks = group.blocks(), "starting boot group");
        let budget_left = cells
            .iter()
            .zip(&active)
            .filter(|(c, a)| **a && c.budget_arms.is_some())
            .map(|(c, _)| (0..c.max_runs).filter(|&r| self.takes(group, r)).count() as u64)
            .sum();
        Some(GroupState {
            index,
            block: 0,
            up: None,
            facts_on: None,
            bring_ups: self.last_bring_ups.get(index as usize).copied().unwrap_or(0),
            seq: 0,
            broken: None,
            stopped: active.iter().map(|a| !a).collect(),
            budget_left,
        })
    }

    /// Block `block` of a group: its rounds on this host, on one bring-up (a fresh one after a
    /// failed attempt), which goes down with the block.
    async fn run_block(
        &mut self,
        group: &BootGroup,
        state: &mut GroupState,
        block: u32,
    ) -> anyhow::Result<()> {
        state.block = block;
        for round in group.block_runs(block) {
            if self.takes(group, round) {
                self.run_round(group, state, round).await?;
            }
        }
        if block + 1 >= group.blocks() {
            self.spend_budget(state);
        }
        // The next block of this group is made on fresh guests, after the other groups' blocks.
        if state.up.take().is_some() {
            self.tear_down().await;
        }
        Ok(())
    }

    /// Round `round`: measured run `round` of each cell still running, in the round's order
    /// ([`super::order::RoundDesign`]).
    async fn run_round(
        &mut self,
        group: &BootGroup,
        state: &mut GroupState,
        round: u32,
    ) -> anyhow::Result<()> {
        let order = self.plan.round_design(state.index as usize).measured(round);
        let mut made = vec![false; group.cells.len()];
        for (at, &c) in order.iter().enumerate() {
            if state.stopped[c] || made[c] {
                continue;
            }
            self.sync();
            let cell = &group.cells[c];
            match self.next_run(group, cell, round, state.broken.is_some()) {
                Next::Done => self.count_done(state, cell),
                Next::Enough => self.stop(group, state, c, round),
                Next::Run => {
                    let sliced = self.sliced_with(group, state, &order[at..], round);
                    if sliced.len() > 1 {
                        sliced.iter().for_each(|&p| made[p] = true);
                        let cells: Vec<&Cell> = sliced.iter().map(|&p| &group.cells[p]).collect();
                        self.run_sliced_slot(group, state, &cells, round).await?;
                    } else {
                        self.run_slot(group, state, cell, round).await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Cell `c` has enough from run `run` on: it is not run (nor warmed) again, and its runs
    /// left on this host count as done.
    fn stop(&mut self, group: &BootGroup, state: &mut GroupState, c: usize, run: u32) {
        state.stopped[c] = true;
        if group.cells[c].budget_arms.is_none() {
            let left = (run..group.cells[c].max_runs)
                .filter(|&r| self.takes(group, r))
                .count();
            self.progress.skip(left as u64);
        } else if group
            .cells
            .iter()
            .zip(&state.stopped)
            .all(|(cell, stopped)| *stopped || cell.budget_arms.is_none())
        {
            self.spend_budget(state);
        }
    }

    /// Counts the group's budget left on the progress bar: its cells that share it have stopped
    /// (or have no rounds left).
    fn spend_budget(&self, state: &mut GroupState) {
        self.progress.skip(std::mem::take(&mut state.budget_left));
    }

    /// Counts a cell's measured run made (or found made) on the progress bar, which counts
    /// `max_runs` a cell ([`Plan::measured_runs`]): a run of a cell that shares its group's
    /// budget of rounds' time counts while the budget lasts (rounds past a cell's `max_runs`
    /// are made in the time of the runs its concluded peers did not need).
    fn count_done(&self, state: &mut GroupState, cell: &Cell) {
        if cell.budget_arms.is_none() {
            self.progress.run_done();
        } else if state.budget_left > 0 {
            state.budget_left -= 1;
            self.progress.run_done();
        }
    }

    /// Whether measured run `run` of a group's cells is this host's to make.
    fn takes(&self, group: &BootGroup, run: u32) -> bool {
        self.share.takes(group.share_unit(run))
    }

    /// Whether a cell still has a measured run to make.
    fn has_work(&self, group: &BootGroup, cell: &Cell) -> bool {
        for i in (0..cell.rounds_at_most()).filter(|&i| self.takes(group, i)) {
            match self.next_run(group, cell, i, false) {
                Next::Done => continue,
                Next::Enough => return false,
                Next::Run => return true,
            }
        }
        false
    }

    /// What measured run `run` of a cell needs ([`next_run`]), by what this host has
    /// taken in of the journal.
    fn next_run(&self, group: &BootGroup, cell: &Cell, run: u32, broken: bool) -> Next {
        next_run(
            &self.settled,
            &lock(self.journal).records[..self.synced],
            self.plan,
            group,
            cell,
            run,
            broken,
        )
    }

    // ---------------------------------------------------------- one measured run, step by step

    /// One measured run: attempts until one counts or a retry budget is spent ([`Tries`]), each
    /// on warmed workers; every attempt journaled.
    async fn run_slot<'g>(
        &mut self,
        group: &'g BootGroup,
        state: &mut GroupState,
        cell: &'g Cell,
        run: u32,
    ) -> anyhow::Result<()> {
        let mut attempt = self.settled.last_attempt(&measured_key(group, cell, run)) + 1;
        let mut tries = Tries::default();
        loop {
            let Some(facts) = self.workers_for(group, state, run).await? else {
                return self.record_unattempted(group, state, cell, run, attempt);
            };
            self.progress
                .doing(describe(group, cell, false, run, tries.made() + 1));
            let id = attempt_id(group, state, run, false, attempt);
            let ended = self.attempt(group, state, cell, id, &facts).await?;
            if ended == Ended::Counted {
                self.totals.runs_ok += 1;
                self.count_done(state, cell);
                return Ok(());
            }
            if !tries.retry_left(ended, &self.plan.timeouts) {
                break;
            }
            self.before_retry(ended).await;
            attempt += 1;
        }
        self.give_up(group, state, cell, run, attempt);
        Ok(())
    }

    /// The facts of the warmed workers the next attempt (of measured round `round`) runs on:
    /// those up, or a fresh set brought up and warmed; None when the group's workers cannot be
    /// brought up.
    async fn workers_for(
        &mut self,
        group: &BootGroup,
        state: &mut GroupState,
        round: u32,
    ) -> anyhow::Result<Option<Value>> {
        if state.up.is_none() && state.broken.is_none() {
            self.bring_up_warmed(group, state, round).await?;
        }
        Ok(state.up.clone())
    }

    /// One attempt on the workers up (`facts`): run, judged, journaled. A guest failure (or
    /// arguments the payload refuses) takes the workers down; a self-check rejection alone
    /// keeps them (see [`Ended`]).
    async fn attempt(
        &mut self,
        group: &BootGroup,
        state: &mut GroupState,
        cell: &Cell,
        id: AttemptId,
        facts: &Value,
    ) -> anyhow::Result<Ended> {
        state.seq += 1;
        let outcome = self.execute(group, cell).await;
        let mut recs = records::attempt_records(cell, id, outcome, facts, state.facts_on.as_ref());
        if state.facts_on.is_none() && !recs.is_empty() {
            state.facts_on = Some(records::facts_on(&id, &recs));
        }
        let ended = self.judge(&mut recs, id.warmup);
        let refused = refused_args(group, cell, &recs);
        self.journal_attempt(cell, recs, ended)?;
        self.after_attempt(state, ended, refused).await
    }

    /// After a journaled attempt that ended `ended`: a guest failure, or arguments the payload
    /// refused, take the workers down; refused arguments end the sweep.
    async fn after_attempt(
        &mut self,
        state: &mut GroupState,
        ended: Ended,
        refused: Option<PayloadRefusedArgs>,
    ) -> anyhow::Result<Ended> {
        if ended == Ended::GuestFailed || refused.is_some() {
            state.up = None;
            self.tear_down().await;
        }
        match refused {
            Some(r) => Err(r.into()),
            None => Ok(ended),
        }
    }

    /// Runs a cell's payload on the group's workers (the others per `background`), with the
    /// time it took added to the totals.
    async fn execute(&mut self, group: &BootGroup, cell: &Cell) -> crate::executor::RunOutcome {
        let seconds = crate::scenario::expand::workload_seconds(&cell.argv);
        self.execute_argv(group, &cell.argv, seconds).await
    }

    /// Runs the payload command line `argv`, which lasts `seconds` (None: unknown), on the
    /// group's workers (the others per `background`), with the time it took added to the
    /// totals.
    async fn execute_argv(
        &mut self,
        group: &BootGroup,
        argv: &[String],
        seconds: Option<f64>,
    ) -> crate::executor::RunOutcome {
        let request = RunRequest {
            argv: (0..group.guests)
                .map(|g| argv_for(g, argv, seconds, self.plan.background))
                .collect(),
            timeout: deadlines::timeout_for(seconds, self.plan.timeouts.run_s),
        };
        let t = Instant::now();
        let outcome = self.exec.run(&request).await;
        self.totals.run_s += t.elapsed().as_secs_f64();
        self.totals.measured_s += outcome
            .workers
            .iter()
            .flatten()
            .filter_map(|w| w.run_s)
            .fold(0.0, f64::max);
        self.totals.max_start_skew_us = self.totals.max_start_skew_us.max(outcome.start_skew_us);
        outcome
    }

    /// How an attempt with records `recs` ended, a measured one's marked disturbed where the
    /// host's other load was above its bound ([`HostLoad`] says whether it then counts).
    fn judge(&mut self, recs: &mut [RunRecord], warmup: bool) -> Ended {
        let then = self.host.disturbed_then();
        // A warm-up's numbers are never used: only a measured run is judged disturbed.
        let disturbed = match self.plan.max_other_load {
            Some(bound) if !warmup => records::mark_disturbed(recs, bound, then),
            _ => None,
        };
        if disturbed.is_some() {
            self.host.disturbed();
            return match then {
                records::Disturbed::Count => {
                    self.totals.disturbed_counted += 1;
                    Ended::Counted
                }
                records::Disturbed::Fail => {
                    self.totals.disturbed += 1;
                    Ended::Disturbed
                }
            };
        }
        if recs.iter().all(|r| r.ok) {
            // A warm-up is not judged disturbed, so it does not end the busy state either.
            if !warmup {
                let clearly_quiet = match (self.plan.max_other_load, records::foreign_load(recs)) {
                    (Some(bound), Some(load)) => load <= bound * QUIET_SHARE,
                    _ => true,
                };
                self.host.undisturbed(clearly_quiet);
            }
            Ended::Counted
        } else if records::only_self_checks_failed(recs) {
            Ended::Rejected
        } else {
            Ended::GuestFailed
        }
    }

    /// Journals an attempt that ended `ended`, saying what failed in it.
    fn journal_attempt(&mut self, cell: &Cell, recs: Vec<RunRecord>, ended: Ended) -> anyhow::Result<()> {
        self.report_failures(&recs, ended);
        self.keep(cell, recs)?;
        if ended != Ended::Counted {
            self.totals.attempts_failed += 1;
        }
        Ok(())
    }

    /// Before a failed attempt's retry: a disturbed one waits for a quiet host (only a quiet
    /// host's disturbance fails: see [`HostLoad`]); a rejected one is retried at once on the
    /// same workers, one whose guests failed on fresh ones ([`Self::workers_for`]).
    async fn before_retry(&mut self, ended: Ended) {
        if let (Ended::Disturbed, Some(bound)) = (ended, self.plan.max_other_load) {
            self.wait_quiet(bound).await;
        }
    }

    /// Waits for the host to be quiet before a disturbed run's retry (up to
    /// `timeouts.disturbed_wait_s`), and says how that went.
    async fn wait_quiet(&mut self, bound: f64) {
        let limit = std::time::Duration::from_secs(self.plan.timeouts.disturbed_wait_s);
        let w = self.exec.wait_quiet(bound, limit).await;
        self.host.waited(w.quiet);
        self.totals.disturbed_wait_s += w.waited_s;
        let load = w
            .last_load
            .map_or_else(String::new, |l| format!(", other load {:.1} %", l * 100.0));
        let msg = match (&w.note, w.quiet) {
            (Some(note), _) => format!("disturbed run: retried at once ({note})"),
            (None, true) => format!(
                "disturbed run: the host was quiet again after {:.0} s{load}",
                w.waited_s
            ),
            (None, false) => format!(
                "disturbed run: the host was still busy after {:.0} s{load}; retried, and it and \
                 every later run counts, marked disturbed, until {QUIET_RUNS} in a row run quiet",
                w.waited_s
            ),
        };
        self.progress.println(&msg);
        // Said once on the terminal; the log keeps it.
        tracing::info!("{msg}");
    }

    /// A run whose every attempt failed, within its budgets: it counts as failed.
    fn give_up(&mut self, group: &BootGroup, state: &mut GroupState, cell: &Cell, run: u32, attempts: u32) {
        self.totals.runs_failed += 1;
        self.progress.println(&format!(
            "{}x {} {} run {run}: given up after {attempts} attempts (the report counts it as failed)",
            group.level, cell.variant, cell.workload.id
        ));
        self.count_done(state, cell);
    }

    /// A run the group's workers could not be brought up for: journaled failed, with why.
    fn record_unattempted(
        &mut self,
        group: &BootGroup,
        state: &mut GroupState,
        cell: &Cell,
        run: u32,
        attempt: u32,
    ) -> anyhow::Result<()> {
        let id = attempt_id(group, state, run, false, attempt);
        let why = state.broken.clone().unwrap_or_default();
        self.keep(cell, vec![records::unattempted_record(cell, id, &why)])?;
        self.totals.runs_failed += 1;
        self.count_done(state, cell);
        Ok(())
    }

    // ---------------------------------------------------------- fresh workers and warm-ups

    /// Brings up a fresh guest set and warms it before its first measured round, `round`: with
    /// the plan's warm-up rounds (by default one: a warm-up run of every cell with a measured
    /// run left on this host, [`Self::warm_up_set`]). A set whose warm-ups lost their guests
    /// was taken down like any failed attempt, and the next set is warmed anew; after
    /// `retries + 1` sets in a row whose warm-ups failed, the group is broken.
    async fn bring_up_warmed(
        &mut self,
        group: &BootGroup,
        state: &mut GroupState,
        round: u32,
    ) -> anyhow::Result<()> {
        let mut failed_sets = 0;
        while state.up.is_none() && state.broken.is_none() {
            self.bring_up(group, state).await;
            if state.broken.is_some() {
                return self.bring_up_failed(group, state, round).await;
            }
            if let Some(what) = self.warm_up_set(group, state, round).await? {
                failed_sets += 1;
                if failed_sets > self.plan.timeouts.retries {
                    state.broken = Some(format!(
                        "the warm-ups failed on {failed_sets} fresh guest set(s) in a row (last: {what}); no measured run is made on unwarmed guests"
                    ));
                }
            }
        }
        Ok(())
    }

    /// The group's workers could not be brought up: on a host of several that cannot be
    /// reached, the host is lost ([`HostLost`]); else the first warm-up due is journaled failed
    /// with why (the group's runs are, as they come).
    async fn bring_up_failed(
        &mut self,
        group: &BootGroup,
        state: &GroupState,
        round: u32,
    ) -> anyhow::Result<()> {
        if let Some(host) = &self.share.label
            && let Err(why) = self.exec.host_reachable().await
        {
            return Err(HostLost {
                host: host.clone(),
                why,
            }
            .into());
        }
        if let Some((cell, w)) = self.warm_ups(group, state, round).into_iter().next() {
            let why = state.broken.clone().unwrap_or_default();
            let id = self.warm_up_id(group, state, cell, w);
            self.keep(cell, vec![records::unattempted_record(cell, id, &why)])?;
        }
        Ok(())
    }

    /// Makes the warm-ups the set now up needs ([`Self::warm_ups`]), each once on the set (the
    /// accounting rule keys a warm-up by its guest set, and one the journal already holds for
    /// the set is not made again). What lost the set's guests, if a warm-up did.
    async fn warm_up_set(
        &mut self,
        group: &BootGroup,
        state: &mut GroupState,
        round: u32,
    ) -> anyhow::Result<Option<String>> {
        let facts = state.up.clone().unwrap_or_default();
        for (cell, w) in self.warm_ups(group, state, round) {
            if self.warm_up(group, state, cell, w, &facts).await? == Ended::GuestFailed {
                return Ok(Some(format!(
                    "warm-up {w} of {} {}",
                    cell.variant, cell.workload.id
                )));
            }
            self.totals.warm_ups += 1;
        }
        Ok(None)
    }

    /// Warm-up `w` of a cell on the set up. One its self-checks rejected ran to its end on these
    /// guests and warmed them all the same (a warm-up's numbers are never used), but it is made
    /// again on the same guests, up to `self_check_retries` times: on fresh guests that refusal
    /// is the guests still speeding up (a clone's busy loop read 2.76, 2.13, then 1.72 ns/iter
    /// over its first three runs here), and the next measured run would be refused instead.
    /// After that the set goes on. Warm-ups are never judged disturbed.
    async fn warm_up(
        &mut self,
        group: &BootGroup,
        state: &mut GroupState,
        cell: &Cell,
        w: u32,
        facts: &Value,
    ) -> anyhow::Result<Ended> {
        let mut tries = 1;
        loop {
            let id = self.warm_up_id(group, state, cell, w);
            self.progress.doing(describe(group, cell, true, w, tries));
            match self.attempt(group, state, cell, id, facts).await? {
                Ended::Rejected if tries <= self.plan.timeouts.self_check_retries => tries += 1,
                ended => return Ok(ended),
            }
        }
    }

    /// The warm-ups the guest set now up still needs before measured round `round`, in order:
    /// (cell, warm-up run). Warm-up round w runs every cell still running, in the design's
    /// order for the w-th of the rounds before `round`.
    fn warm_ups<'g>(&self, group: &'g BootGroup, state: &GroupState, round: u32) -> Vec<(&'g Cell, u32)> {
        let set = self.guest_set(state);
        let needed = |cell: &Cell, w: u32| {
            let key = RunKey::warm_up(&cell.variant, group.level, &cell.workload.id, w, set.clone());
            !self.settled.has_valid_result(&key)
        };
        let (design, rounds) = (
            self.plan.round_design(state.index as usize),
            self.plan.schedule.warm_up_rounds,
        );
        (0..rounds)
            .flat_map(|w| design.warm_up(round, w, rounds).into_iter().map(move |c| (c, w)))
            .filter(|&(c, w)| !state.stopped[c] && needed(&group.cells[c], w))
            .map(|(c, w)| (&group.cells[c], w))
            .collect()
    }

    fn guest_set(&self, state: &GroupState) -> GuestSet {
        GuestSet {
            host: self.share.label.clone(),
            boot: state.index,
            bring_up: state.bring_ups,
        }
    }

    fn warm_up_id(&self, group: &BootGroup, state: &GroupState, cell: &Cell, run: u32) -> AttemptId {
        let key = RunKey::warm_up(
            &cell.variant,
            group.level,
            &cell.workload.id,
            run,
            self.guest_set(state),
        );
        attempt_id(group, state, run, true, self.settled.last_attempt(&key) + 1)
    }

    async fn bring_up(&mut self, group: &BootGroup, state: &mut GroupState) {
        state.bring_ups += 1;
        self.totals.boots += 1;
        let block = match group.runs_per_block {
            Some(_) => format!(" (block {})", state.block),
            None => String::new(),
        };
        self.progress.doing(format!(
            "{}x {}: booting {} guest(s){block}",
            group.level,
            group.variants.join("+"),
            group.guests
        ));
        match self.exec.bring_up(&group.spec()).await {
            Ok(up) => {
                self.totals.boot_s += up.boot_s;
                self.totals.deploy_s += up.deploy_s;
                state.up = Some(up.facts);
                state.facts_on = None;
            }
            Err(e) => {
                let why = format!("bringing up the guests failed: {e:#}");
                tracing::error!("level {} {:?}: {why}", group.level, group.variants);
                self.progress.println(&format!(
                    "level {}x {}: {why}",
                    group.level,
                    group.variants.join("+")
                ));
                state.broken = Some(why);
            }
        }
    }

    async fn tear_down(&mut self) {
        let t = Instant::now();
        self.exec.shut_down().await;
        self.totals.teardown_s += t.elapsed().as_secs_f64();
    }

    // ---------------------------------------------------------- the journal

    /// Journals one attempt's records together and settles them.
    fn keep(&mut self, cell: &Cell, mut recs: Vec<RunRecord>) -> anyhow::Result<()> {
        for r in &mut recs {
            r.host = self.share.label.clone();
        }
        lock(self.journal).append_all(&recs, &cell.workload.metric)?;
        self.sync();
        Ok(())
    }

    /// Takes in what was journaled since (by this host, or the others): `records` stays the
    /// journal's prefix in journal order, so settling it gives what the reports will give.
    fn sync(&mut self) {
        let j = lock(self.journal);
        if j.records.len() > self.synced {
            self.settled.extend(&j.records[self.synced..]);
            self.synced = j.records.len();
        }
    }

    /// One line per failed attempt, within 120 columns: a self-check's refusal is routine (the
    /// run is tried again in the same guests), a guest's failure brings up fresh ones; the whole
    /// reason goes to the log (and the journal).
    fn report_failures(&self, recs: &[RunRecord], ended: Ended) {
        for r in recs.iter().filter(|r| !r.ok) {
            let error = r.error.as_deref().unwrap_or("?");
            let what = format!(
                "{}x {} {} run {}{} guest {} attempt {}",
                r.level,
                r.variant,
                r.workload,
                r.run,
                if r.warmup { " (warm-up)" } else { "" },
                r.guest,
                r.attempt
            );
            tracing::info!("{what} failed: {error}");
            self.progress.println(&failure_line(&what, error, ended));
        }
    }
}

/// The payload's refusal of a cell's arguments in an attempt's records, if it refused them.
fn refused_args(group: &BootGroup, cell: &Cell, recs: &[RunRecord]) -> Option<PayloadRefusedArgs> {
    records::refused_args(recs).map(|(r, words)| PayloadRefusedArgs {
        workload: cell.workload.id.clone(),
        variant: cell.variant.clone(),
        level: group.level,
        guest: r.guest,
        argv: r.argv.join(" "),
        words: words.to_string(),
    })
}

/// [`Scheduler::report_failures`]'s line: the check that refused, or the failure's first words.
fn failure_line(what: &str, error: &str, ended: Ended) -> String {
    let line = match error.strip_prefix(crate::journal::SELF_CHECK_REASON) {
        Some(rest) if ended == Ended::Rejected => {
            let check = rest.split(':').next().unwrap_or(rest).trim();
            format!("{what}: refused by self-check {check}, tried again in the same guests (why: ocrig.log)")
        }
        _ => format!("{what} failed (why: ocrig.log): {error}"),
    };
    crate::terminal::one_line(&line)
}

/// Which attempt of which run, on the guest set now up, in the group's block being made.
fn attempt_id(group: &BootGroup, state: &GroupState, run: u32, warmup: bool, attempt: u32) -> AttemptId {
    AttemptId {
        level: group.level,
        guests: group.guests,
        run,
        warmup,
        attempt,
        slot: Slot {
            boot: state.index,
            bring_up: state.bring_ups,
            seq: state.seq,
            block: state.block,
        },
    }
}

/// How many measured runs of `plan` still need making given the journaled `records` (over
/// every host; an upper bound, as a CV target may stop a cell sooner): 0 when a resume would
/// change nothing.
pub fn work_left(plan: &Plan, records: &[RunRecord]) -> usize {
    let settled = accounting::settle(records);
    let mut left = 0;
    for group in &plan.boots {
        for cell in &group.cells {
            for run in 0..cell.rounds_at_most() {
                match next_run(&settled, records, plan, group, cell, run, false) {
                    Next::Done => {}
                    Next::Enough => break,
                    Next::Run => left += 1,
                }
            }
        }
    }
    left
}

/// Measured run slots of `plan` that were attempted but have no valid result: a sweep that ends
/// with any did not get every result it set out to (exit status 4).
pub fn slots_without_result<R: accounting::Attempted>(plan: &Plan, records: &[R]) -> usize {
    let settled = accounting::settle(records);
    let planned: std::collections::BTreeSet<(&str, u64, &str)> = plan
        .boots
        .iter()
        .flat_map(|g| {
            g.cells
                .iter()
                .map(move |c| (c.variant.as_str(), g.level.to_bits(), c.workload.id.as_str()))
        })
        .collect();
    settled
        .runs_without_result()
        .filter(|k| planned.contains(&(k.variant.as_str(), k.level_bits, k.workload.as_str())))
        .count()
}

fn describe(group: &BootGroup, cell: &Cell, warmup: bool, run: u32, try_no: u32) -> String {
    format!(
        "{}x {} {} run {}{}{}",
        group.level,
        cell.variant,
        cell.workload.id,
        run,
        if warmup { " (warm-up)" } else { "" },
        if try_no > 1 {
            format!(" (retry {})", try_no - 1)
        } else {
            String::new()
        }
    )
}

/// What worker `guest` runs: guest 0 always the measured workload, the others per `background`.
fn argv_for(
    guest: u32,
    argv: &[String],
    seconds: Option<f64>,
    background: Background,
) -> Option<Vec<String>> {
    match (guest, background) {
        (0, _) | (_, Background::Same) => Some(argv.to_vec()),
        (_, Background::Idle) => None,
        (_, Background::Hog) => Some(vec![
            "hog".into(),
            "--seconds".into(),
            format!("{}", deadlines::hog_seconds_for(seconds)),
        ]),
    }
}

mod sliced_round;

#[cfg(test)]
mod tests;
