//! The scheduler of one host's share of a sweep (all of it, on a sweep's one host): plan →
//! attempts → records. It decides which run comes next (round after round across the cells of
//! a boot group), warms every fresh guest set before its first measured run, retries failed
//! attempts on fresh workers, stops a cell once its stopping rule is met on the results pooled
//! over every host, and journals every attempt — talking only to an [`Executor`].
//!
//! Accounting holds by construction: what is done, the stopping rule's samples, which warm-ups
//! a guest set has had and what a resume skips all come from [`accounting::settle`] over the
//! journaled records, the same rule the reports use.

use std::time::Instant;

use serde_json::Value;

use super::accounting::{self, CellKey, GuestSet, RunKey, Settled};
use super::deadlines;
use super::journal::{Entry, JournalWriter, RunRecord, Slot};
use super::order::round_order;
use super::plan::{BootGroup, Cell, Plan};
use super::progress::Progress;
use super::records::{self, AttemptId};
use crate::executor::{Executor, RunRequest};
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
    /// Warm-up runs made that finished (one set per fresh guest set, on every host); never
    /// counted as runs.
    pub warm_ups: u32,
    /// Attempts that failed (each retried while retries were left).
    pub attempts_failed: u32,
    /// Largest measured go-signal skew across workers, microseconds.
    pub max_start_skew_us: f64,
}

/// One host's part of a sweep: a sweep on one host is the case of one share (`of == 1`, no
/// label); over several interchangeable hosts, each host's scheduler gets its share.
#[derive(Debug, Clone)]
pub struct HostShare {
    /// Recorded as every record's `host`; None for the sweep's one host.
    pub label: Option<String>,
    /// This host's position among the `of` hosts the measured runs are spread over: measured
    /// run `r` of every cell is this host's when `r mod of == index`. Every cell so gets the
    /// same number of runs on each host (±1), so no comparison confounds host with variant
    /// or level. Warm-ups are not spread: every guest set of every host gets its own.
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

    pub fn takes(&self, run: u32) -> bool {
        self.of <= 1 || run as usize % self.of == self.index
    }
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
    let (settled, synced) = {
        let j = lock(journal);
        (accounting::settle(&j.records), j.records.len())
    };
    let mut s = Scheduler {
        plan,
        exec,
        journal,
        progress,
        synced,
        settled,
        totals: PhaseTotals::default(),
        share,
    };
    for (index, group) in plan.boots.iter().enumerate() {
        if let Err(e) = s.run_group(index as u32, group).await {
            s.exec.shut_down().await;
            return Err(e);
        }
    }
    s.exec.shut_down().await;
    Ok(s.totals)
}

fn lock(j: &std::sync::Mutex<SharedJournal>) -> std::sync::MutexGuard<'_, SharedJournal> {
    j.lock().unwrap_or_else(|e| e.into_inner())
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
    totals: PhaseTotals,
}

/// The state of one boot group's workers.
struct GroupState {
    index: u32,
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
}

/// What the next measured run of a cell is.
enum Next {
    /// It has a valid result already (a resumed sweep, or another host's run).
    Done,
    /// The cell has enough runs: its count, or its targets.
    Enough,
    Run,
}

impl<E: Executor> Scheduler<'_, E> {
    async fn run_group(&mut self, index: u32, group: &BootGroup) -> anyhow::Result<()> {
        self.sync();
        let cells = &group.cells;
        let active: Vec<bool> = cells.iter().map(|c| self.has_work(group, c)).collect();
        let mine = |c: &Cell| (0..c.max_runs).filter(|&r| self.share.takes(r)).count() as u64;
        if !active.iter().any(|&a| a) {
            // Finished before (a resumed sweep, or the other hosts): count its runs as done.
            for c in cells {
                self.progress.skip(mine(c));
            }
            return Ok(());
        }
        for (c, _) in cells.iter().zip(&active).filter(|(_, a)| !**a) {
            self.progress.skip(mine(c));
        }
        self.totals.groups += 1;
        tracing::info!(level = group.level, variants = ?group.variants, guests = group.guests, "starting boot group");
        let mut state = GroupState {
            index,
            up: None,
            facts_on: None,
            bring_ups: self.last_bring_up(index),
            seq: 0,
            broken: None,
            stopped: active.iter().map(|a| !a).collect(),
        };
        let warmups = cells.iter().map(|c| c.warmup_runs).max().unwrap_or(0);
        let rounds = cells.iter().map(|c| c.max_runs).max().unwrap_or(0);
        for i in 0..rounds {
            for c in self.order(group, index, warmups + i) {
                let cell = &cells[c];
                if state.stopped[c] || !self.share.takes(i) {
                    continue;
                }
                self.sync();
                match self.next_run(group, cell, i, state.broken.is_some()) {
                    Next::Done => self.progress.run_done(),
                    Next::Enough => {
                        state.stopped[c] = true;
                        let left = (i..cell.max_runs).filter(|&r| self.share.takes(r)).count();
                        self.progress.skip(left as u64);
                    }
                    Next::Run => self.run_slot(group, &mut state, cell, i).await?,
                }
            }
        }
        if state.up.take().is_some() {
            self.tear_down().await;
        }
        Ok(())
    }

    /// The order of a boot group's cells in round `round` (warm-up rounds first).
    fn order(&self, group: &BootGroup, index: u32, round: u32) -> Vec<usize> {
        let (run_order, seed) = (self.plan.schedule.order, self.plan.schedule.seed);
        round_order(group.cells.len(), run_order, seed, index, round)
    }

    /// The highest bring-up of boot group `boot` this host's journaled records name (0: none).
    fn last_bring_up(&self, boot: u32) -> u32 {
        lock(self.journal).records[..self.synced]
            .iter()
            .filter(|r| r.host == self.share.label)
            .filter_map(|r| r.slot)
            .filter(|s| s.boot == boot)
            .map(|s| s.bring_up)
            .max()
            .unwrap_or(0)
    }

    /// Whether a cell still has a measured run to make.
    fn has_work(&self, group: &BootGroup, cell: &Cell) -> bool {
        for i in (0..cell.max_runs).filter(|&i| self.share.takes(i)) {
            match self.next_run(group, cell, i, false) {
                Next::Done => continue,
                Next::Enough => return false,
                Next::Run => return true,
            }
        }
        false
    }

    fn next_run(&self, group: &BootGroup, cell: &Cell, run: u32, broken: bool) -> Next {
        next_run(
            &self.settled,
            &lock(self.journal).records[..self.synced],
            &self.plan.baseline,
            group,
            cell,
            run,
            broken,
        )
    }

    /// One measured run: attempts until one counts or the retries are spent, each on warmed
    /// workers. Each attempt is journaled.
    async fn run_slot(
        &mut self,
        group: &BootGroup,
        state: &mut GroupState,
        cell: &Cell,
        run: u32,
    ) -> anyhow::Result<()> {
        let key = run_key(group, cell, false, run);
        let first = self.settled.last_attempt(&key) + 1;
        let retries = self.plan.timeouts.retries;
        for attempt in first..=first + retries {
            if state.up.is_none() && state.broken.is_none() {
                self.bring_up_warmed(group, state).await?;
            }
            let id = AttemptId {
                level: group.level,
                guests: group.guests,
                run,
                warmup: false,
                attempt,
                slot: Slot {
                    boot: state.index,
                    bring_up: state.bring_ups,
                    seq: state.seq,
                    block: None,
                },
            };
            let Some(facts) = state.up.clone() else {
                let why = state.broken.clone().unwrap_or_default();
                self.keep(cell, vec![records::unattempted_record(cell, id, &why)])?;
                self.totals.runs_failed += 1;
                self.progress.run_done();
                return Ok(());
            };
            self.progress
                .doing(describe(group, cell, false, run, attempt - first + 1));
            if self.attempt(group, state, cell, id, &facts).await? {
                self.totals.runs_ok += 1;
                self.progress.run_done();
                return Ok(());
            }
        }
        self.totals.runs_failed += 1;
        self.progress.run_done();
        Ok(())
    }

    /// One attempt on the workers up (`facts`), journaled; true when it counts. A failed one
    /// takes the workers down: they may be hung or dead, so whatever runs next gets fresh ones.
    async fn attempt(
        &mut self,
        group: &BootGroup,
        state: &mut GroupState,
        cell: &Cell,
        id: AttemptId,
        facts: &Value,
    ) -> anyhow::Result<bool> {
        state.seq += 1;
        let request = RunRequest {
            argv: (0..group.guests)
                .map(|g| argv_for(g, cell, self.plan.background))
                .collect(),
            timeout: deadlines::run_timeout(&cell.argv, self.plan.timeouts.run_s),
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
        let recs = records::attempt_records(cell, id, outcome, facts, state.facts_on.as_ref());
        if state.facts_on.is_none() && !recs.is_empty() {
            state.facts_on = Some(records::facts_on(&id, &recs));
        }
        let counted = recs.iter().all(|r| r.ok);
        self.report_failures(&recs);
        self.keep(cell, recs)?;
        if !counted {
            self.totals.attempts_failed += 1;
            state.up = None;
            self.tear_down().await;
        }
        Ok(counted)
    }

    /// Brings up a fresh guest set and warms it: the warm-ups of every cell with a measured run
    /// left on this host, in the group's warm-up rounds, on this set, before its first
    /// measured run. Each runs once on the set (the accounting rule keys a warm-up by its
    /// guest set, and one the journal already holds for the set is not made again). A warm-up
    /// that fails takes the set down like any failed attempt, and the next set is warmed anew;
    /// after `retries + 1` sets in a row whose warm-ups failed, the group is broken.
    async fn bring_up_warmed(&mut self, group: &BootGroup, state: &mut GroupState) -> anyhow::Result<()> {
        let warmups = group.cells.iter().map(|c| c.warmup_runs).max().unwrap_or(0);
        let mut failed_sets = 0;
        while state.up.is_none() && state.broken.is_none() {
            self.bring_up(group, state).await;
            if state.broken.is_some() {
                if let Some(host) = &self.share.label
                    && let Err(why) = self.exec.host_reachable().await
                {
                    return Err(HostLost {
                        host: host.clone(),
                        why,
                    }
                    .into());
                }
                // The first warm-up due says why it could not be made.
                if let Some((cell, _)) = self.warm_ups(group, state, warmups).into_iter().next() {
                    let why = state.broken.clone().unwrap_or_default();
                    let id = self.warm_up_id(group, state, cell, 0);
                    self.keep(cell, vec![records::unattempted_record(cell, id, &why)])?;
                }
                return Ok(());
            }
            let facts = state.up.clone().unwrap_or_default();
            let mut failure = None;
            for (cell, w) in self.warm_ups(group, state, warmups) {
                let id = self.warm_up_id(group, state, cell, w);
                self.progress.doing(describe(group, cell, true, w, 1));
                if !self.attempt(group, state, cell, id, &facts).await? {
                    failure = Some(format!("warm-up {w} of {} {}", cell.variant, cell.workload.id));
                    break;
                }
                self.totals.warm_ups += 1;
            }
            if let Some(what) = failure {
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

    /// The warm-ups the guest set now up still needs, in order: (cell, warm-up run).
    fn warm_ups<'g>(&self, group: &'g BootGroup, state: &GroupState, warmups: u32) -> Vec<(&'g Cell, u32)> {
        let set = self.guest_set(state);
        let mut out = Vec::new();
        for w in 0..warmups {
            for c in self.order(group, state.index, w) {
                let cell = &group.cells[c];
                let key = RunKey::warm_up(&cell.variant, group.level, &cell.workload.id, w, set.clone());
                if w < cell.warmup_runs && !state.stopped[c] && !self.settled.has_valid_result(&key) {
                    out.push((cell, w));
                }
            }
        }
        out
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
        AttemptId {
            level: group.level,
            guests: group.guests,
            run,
            warmup: true,
            attempt: self.settled.last_attempt(&key) + 1,
            slot: Slot {
                boot: state.index,
                bring_up: state.bring_ups,
                seq: state.seq,
                block: None,
            },
        }
    }

    async fn bring_up(&mut self, group: &BootGroup, state: &mut GroupState) {
        state.bring_ups += 1;
        self.totals.boots += 1;
        self.progress.doing(format!(
            "{}x {}: booting {} guest(s)",
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

    fn report_failures(&self, recs: &[RunRecord]) {
        for r in recs.iter().filter(|r| !r.ok) {
            self.progress.println(&format!(
                "{}x {} {} run {}{} guest {} attempt {} failed: {}",
                r.level,
                r.variant,
                r.workload,
                r.run,
                if r.warmup { " (warm-up)" } else { "" },
                r.guest,
                r.attempt,
                r.error.as_deref().unwrap_or("?")
            ));
        }
    }
}

/// What measured run `run` of a cell needs, by the accounting rule over `records` (settled as
/// `settled`): the one decision of the live sweep on every host, of a resume and of
/// [`work_left`].
///
/// A cell's stopping rule decides once: at the first slot `r` whose earlier slots all have a
/// journaled attempt (on whichever host) and whose pooled valid results before `r` meet the
/// rule, the cell has enough, and every slot from `r` on is not needed. While an earlier slot
/// is still being made on another host its result could change the verdict, so later slots
/// are made (more runs, never too few); once every result is in, every host and a resume
/// find the same `r`.
fn next_run(
    settled: &Settled,
    records: &[RunRecord],
    baseline: &str,
    group: &BootGroup,
    cell: &Cell,
    run: u32,
    broken: bool,
) -> Next {
    if settled.has_valid_result(&run_key(group, cell, false, run)) {
        return Next::Done;
    }
    // Without workers no CV can be reached: record the runs always made, skip the rest.
    if broken && run >= cell.runs {
        return Next::Enough;
    }
    if decided_at(settled, records, baseline, group, cell, run).is_some() {
        Next::Enough
    } else {
        Next::Run
    }
}

/// The slot at or before `run` at which a cell's stopping rule decided it has enough (see
/// [`next_run`]), if it has.
fn decided_at(
    settled: &Settled,
    records: &[RunRecord],
    baseline: &str,
    group: &BootGroup,
    cell: &Cell,
    run: u32,
) -> Option<u32> {
    let this = CellKey {
        variant: &cell.variant,
        level: group.level,
        workload: &cell.workload.id,
    };
    // The baseline's valid values at this level, when a detectable effect is asked for.
    let baseline = (cell.target_mde.is_some() && cell.variant != baseline).then(|| {
        let base = CellKey {
            variant: baseline,
            ..this
        };
        settled.samples(records, &base, &cell.workload.metric, 0..u32::MAX)
    });
    // Slots before the first one not yet attempted anywhere can be judged.
    let judged = (0..run)
        .find(|&j| settled.last_attempt(&run_key(group, cell, false, j)) == 0)
        .unwrap_or(run);
    // No rule stops a cell before its `runs` (`enough` says so too; this only saves work).
    (cell.runs.min(judged)..=judged).find(|&r| {
        let samples = settled.samples(records, &this, &cell.workload.metric, 0..r);
        enough_runs(cell, r, &samples, baseline.as_deref())
    })
}

/// How many measured runs of `plan` still need making given the journaled `records` (over
/// every host; an upper bound, as a CV target may stop a cell sooner): 0 when a resume would
/// change nothing.
pub fn work_left(plan: &Plan, records: &[RunRecord]) -> usize {
    let settled = accounting::settle(records);
    let mut left = 0;
    for group in &plan.boots {
        for cell in &group.cells {
            for run in 0..cell.max_runs {
                match next_run(&settled, records, &plan.baseline, group, cell, run, false) {
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

fn run_key(group: &BootGroup, cell: &Cell, warmup: bool, run: u32) -> RunKey {
    RunKey::new(&cell.variant, group.level, &cell.workload.id, warmup, run)
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
fn argv_for(guest: u32, cell: &Cell, background: Background) -> Option<Vec<String>> {
    match (guest, background) {
        (0, _) | (_, Background::Same) => Some(cell.argv.clone()),
        (_, Background::Idle) => None,
        (_, Background::Hog) => Some(vec![
            "hog".into(),
            "--seconds".into(),
            format!("{}", deadlines::hog_seconds(&cell.argv)),
        ]),
    }
}

/// True when a cell has made its runs and met its targets ([`super::stopping::enough`]) with
/// its primary results (guest 0's headline metric of the valid results so far) and the
/// baseline's at its level. `measured` counts run slots passed, failed ones included.
fn enough_runs(cell: &Cell, measured: u32, samples: &[f64], baseline: Option<&[f64]>) -> bool {
    let rule = super::stopping::StopRule {
        min: cell.runs,
        max: cell.max_runs,
        target_cv: cell.target_cv,
        target_mde: cell.target_mde,
    };
    super::stopping::enough(&rule, measured, samples, baseline)
}

#[cfg(test)]
mod tests;
