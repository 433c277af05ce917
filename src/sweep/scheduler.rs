//! The scheduler: plan → attempts → records. It decides which run comes next (round after
//! round across the cells of a boot group), retries failed attempts on fresh workers, stops a
//! cell at its CV target, and journals every attempt — talking only to an [`Executor`].
//!
//! Accounting holds by construction: what is done, the CV samples and what a resume skips all
//! come from [`accounting::settle`] over the journaled records, the same rule the reports use.

use std::time::Instant;

use serde_json::Value;

use super::accounting::{self, CellKey, RunKey, Settled};
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
    /// Runs that got their valid result in this `ocrig run`.
    pub runs_ok: u32,
    /// Runs given up in this `ocrig run` (every attempt failed, or the workers could not be
    /// brought up).
    pub runs_failed: u32,
    /// Attempts that failed (each retried while retries were left).
    pub attempts_failed: u32,
    /// Largest measured go-signal skew across workers, microseconds.
    pub max_start_skew_us: f64,
}

/// Runs every boot group of `plan` on `exec`. `previous` holds the records of the journal being
/// resumed (empty for a new sweep); runs with a valid result there are not run again.
/// Owning the executor means dropping this future (on a signal) drops every live worker.
pub async fn run<E: Executor>(
    plan: &Plan,
    exec: E,
    journal: &mut JournalWriter,
    previous: Vec<RunRecord>,
    progress: &Progress,
) -> anyhow::Result<PhaseTotals> {
    run_with(plan, exec, Journal::Own(journal), previous, progress, None).await
}

/// One host's part of a sweep over several interchangeable hosts.
#[derive(Debug, Clone)]
pub struct HostShare {
    /// Recorded as every record's `host`.
    pub label: String,
    /// This host's position among the `of` hosts the runs are spread over: run `r` of every
    /// cell (warm-ups alike) is this host's when `r mod of == index`. Every cell so gets the
    /// same number of runs on each host (±1), so no comparison confounds host with variant
    /// or level.
    pub index: usize,
    pub of: usize,
}

impl HostShare {
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

/// The journal several hosts' schedulers share, with every record in it in journal order: each
/// scheduler reads the others' records from here, so its stopping rule judges the pooled valid
/// results of a cell across hosts, by the same accounting rule.
pub struct SharedJournal {
    pub writer: JournalWriter,
    pub records: Vec<RunRecord>,
}

/// Where the records go: this scheduler's journal, or one several hosts' schedulers share.
pub enum Journal<'a> {
    Own(&'a mut JournalWriter),
    Shared(&'a std::sync::Mutex<SharedJournal>),
}

impl Journal<'_> {
    fn append_all(&mut self, recs: &[RunRecord]) -> anyhow::Result<()> {
        let entries: Vec<Entry> = recs.iter().cloned().map(|r| Entry::Run(Box::new(r))).collect();
        match self {
            Journal::Own(j) => j.append_all(&entries),
            Journal::Shared(j) => {
                let mut j = j.lock().unwrap_or_else(|e| e.into_inner());
                j.writer.append_all(&entries)?;
                j.records.extend_from_slice(recs);
                Ok(())
            }
        }
    }
}

/// [`run`] for one host's share of a sweep over several hosts (`share`), or all of it (None).
/// A host that cannot be reached when its workers fail to come up ends this call with
/// [`HostLost`]; every record it made is journaled.
pub async fn run_with<E: Executor>(
    plan: &Plan,
    exec: E,
    journal: Journal<'_>,
    previous: Vec<RunRecord>,
    progress: &Progress,
    share: Option<HostShare>,
) -> anyhow::Result<PhaseTotals> {
    let settled = accounting::settle(&previous);
    let mut s = Scheduler {
        plan,
        exec,
        journal,
        progress,
        records: previous,
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

struct Scheduler<'a, E> {
    plan: &'a Plan,
    exec: E,
    journal: Journal<'a>,
    share: Option<HostShare>,
    progress: &'a Progress,
    /// Every record of the journal: the resumed one's, then this run's (this run's without
    /// their telemetry: [`RunRecord::for_accounting`]).
    records: Vec<RunRecord>,
    settled: Settled,
    totals: PhaseTotals,
}

/// The state of one boot group's workers.
struct GroupState {
    index: u32,
    /// Facts of the workers now up; None when none are.
    up: Option<Value>,
    bring_ups: u32,
    seq: u32,
    /// Why the workers could not be brought up; every later run of the group is recorded failed.
    broken: Option<String>,
}

/// What the next measured run of a cell is.
enum Next {
    /// It has a valid result already (a resumed sweep).
    Done,
    /// The cell has enough runs: its count, or its CV target.
    Enough,
    Run,
}

impl<E: Executor> Scheduler<'_, E> {
    async fn run_group(&mut self, index: u32, group: &BootGroup) -> anyhow::Result<()> {
        self.sync();
        let cells = &group.cells;
        let active: Vec<bool> = cells.iter().map(|c| self.has_work(group, c)).collect();
        if !active.iter().any(|&a| a) {
            // A resumed sweep finished this group before: count its runs as done.
            for c in cells {
                let mine = (0..c.warmup_runs)
                    .chain(0..c.max_runs)
                    .filter(|&r| self.takes(r))
                    .count();
                self.progress.skip(mine as u64);
            }
            return Ok(());
        }
        self.totals.groups += 1;
        tracing::info!(level = group.level, variants = ?group.variants, guests = group.guests, "starting boot group");
        let mut state = GroupState {
            index,
            up: None,
            bring_ups: 0,
            seq: 0,
            broken: None,
        };
        let (run_order, seed) = (self.plan.schedule.order, self.plan.schedule.seed);
        let order = |round: u32| round_order(cells.len(), run_order, seed, index, round);
        let warmups = cells.iter().map(|c| c.warmup_runs).max().unwrap_or(0);
        for w in 0..warmups {
            for c in order(w) {
                let cell = &cells[c];
                if w >= cell.warmup_runs || !self.takes(w) {
                    continue;
                }
                if !active[c] || state.broken.is_some() {
                    self.progress.skip(1);
                    continue;
                }
                self.run_slot(group, &mut state, cell, true, w).await?;
            }
        }
        let rounds = cells.iter().map(|c| c.max_runs).max().unwrap_or(0);
        let mut stopped = vec![false; cells.len()];
        for i in 0..rounds {
            for c in order(warmups + i) {
                let cell = &cells[c];
                if stopped[c] || !self.takes(i) {
                    continue;
                }
                self.sync();
                match self.next_run(group, cell, i, state.broken.is_some()) {
                    Next::Done => self.progress.run_done(),
                    Next::Enough => {
                        stopped[c] = true;
                        let left = (i..cell.max_runs).filter(|&r| self.takes(r)).count();
                        self.progress.skip(left as u64);
                    }
                    Next::Run => self.run_slot(group, &mut state, cell, false, i).await?,
                }
            }
        }
        if state.up.take().is_some() {
            self.tear_down().await;
        }
        Ok(())
    }

    /// Whether run slot `run` of every cell is this host's.
    fn takes(&self, run: u32) -> bool {
        self.share.as_ref().is_none_or(|s| s.takes(run))
    }

    /// Whether a cell still has a measured run to make.
    fn has_work(&self, group: &BootGroup, cell: &Cell) -> bool {
        for i in (0..cell.max_runs).filter(|&i| self.takes(i)) {
            match self.next_run(group, cell, i, false) {
                Next::Done => continue,
                Next::Enough => return false,
                Next::Run => return true,
            }
        }
        false
    }

    fn next_run(&self, group: &BootGroup, cell: &Cell, run: u32, broken: bool) -> Next {
        let next = next_run(
            &self.settled,
            &self.records,
            &self.plan.baseline,
            group,
            cell,
            run,
            broken,
        );
        // Over several hosts, a stopping rule judges the pooled results of the slots before
        // this one; while another host has not journaled one of them yet, its result could
        // change the verdict, so this host runs its slot (more runs, never too few). A resume
        // then judges the same slots with every result in, and agrees.
        let several = self.share.as_ref().is_some_and(|s| s.of > 1);
        if matches!(next, Next::Enough)
            && several
            && !broken
            && run < cell.max_runs
            && (0..run).any(|j| self.settled.last_attempt(&run_key(group, cell, false, j)) == 0)
        {
            return Next::Run;
        }
        next
    }

    /// One run: attempts until one counts or the retries are spent. Each attempt is journaled.
    async fn run_slot(
        &mut self,
        group: &BootGroup,
        state: &mut GroupState,
        cell: &Cell,
        warmup: bool,
        run: u32,
    ) -> anyhow::Result<()> {
        let key = run_key(group, cell, warmup, run);
        let first = self.settled.last_attempt(&key) + 1;
        let retries = self.plan.timeouts.retries;
        for attempt in first..=first + retries {
            let id = AttemptId {
                level: group.level,
                guests: group.guests,
                run,
                warmup,
                attempt,
                slot: Slot {
                    boot: state.index,
                    bring_up: state.bring_ups,
                    seq: state.seq,
                },
            };
            if state.up.is_none() && state.broken.is_none() {
                self.bring_up(group, state).await;
                if state.broken.is_some()
                    && let Some(share) = &self.share
                    && let Err(why) = self.exec.host_reachable().await
                {
                    return Err(HostLost {
                        host: share.label.clone(),
                        why,
                    }
                    .into());
                }
            }
            let (Some(facts), None) = (&state.up, &state.broken) else {
                let why = state.broken.clone().unwrap_or_default();
                let id = AttemptId {
                    slot: Slot {
                        bring_up: state.bring_ups,
                        ..id.slot
                    },
                    ..id
                };
                self.keep(vec![records::unattempted_record(cell, id, &why)])?;
                self.totals.runs_failed += 1;
                self.progress.run_done();
                return Ok(());
            };
            let facts = facts.clone();
            let id = AttemptId {
                slot: Slot {
                    bring_up: state.bring_ups,
                    ..id.slot
                },
                ..id
            };
            state.seq += 1;
            self.progress
                .doing(describe(group, cell, warmup, run, attempt - first + 1));
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
            let recs = records::attempt_records(cell, id, outcome, &facts);
            let counted = recs.iter().all(|r| r.ok);
            self.report_failures(&recs);
            self.keep(recs)?;
            if counted {
                self.totals.runs_ok += 1;
                self.progress.run_done();
                return Ok(());
            }
            self.totals.attempts_failed += 1;
            // The workers may be hung or dead: whatever runs next gets fresh ones.
            state.up = None;
            self.tear_down().await;
        }
        self.totals.runs_failed += 1;
        self.progress.run_done();
        Ok(())
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
        match self.exec.bring_up(group).await {
            Ok(up) => {
                self.totals.boot_s += up.boot_s;
                self.totals.deploy_s += up.deploy_s;
                state.up = Some(up.facts);
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
    fn keep(&mut self, mut recs: Vec<RunRecord>) -> anyhow::Result<()> {
        if let Some(share) = &self.share {
            for r in &mut recs {
                r.host = Some(share.label.clone());
            }
        }
        self.journal.append_all(&recs)?;
        match &self.journal {
            Journal::Own(_) => {
                // Settled incrementally: the work of this attempt's run, not of the journal.
                self.settled.extend(&recs);
                // Only what the stopping rule reads: a journal's telemetry is kilobytes a record.
                self.records
                    .extend(recs.into_iter().map(RunRecord::for_accounting));
            }
            Journal::Shared(_) => self.sync(),
        }
        Ok(())
    }

    /// Takes in what the other hosts journaled since (a shared journal): `records` stays the
    /// journal's prefix in journal order, so settling it gives what the reports will give.
    fn sync(&mut self) {
        let Journal::Shared(j) = &self.journal else {
            return;
        };
        let j = j.lock().unwrap_or_else(|e| e.into_inner());
        if j.records.len() > self.records.len() {
            let new = &j.records[self.records.len()..];
            self.settled.extend(new);
            self.records
                .extend(new.iter().cloned().map(RunRecord::for_accounting));
        }
    }

    fn report_failures(&self, recs: &[RunRecord]) {
        for r in recs.iter().filter(|r| !r.ok) {
            self.progress.println(&format!(
                "{}x {} {} run {} guest {} attempt {} failed: {}",
                r.level,
                r.variant,
                r.workload,
                r.run,
                r.guest,
                r.attempt,
                r.error.as_deref().unwrap_or("?")
            ));
        }
    }
}

/// What measured run `run` of a cell needs, by the accounting rule over `records` (settled as
/// `settled`): the one decision of the live sweep, of a resume and of [`work_left`].
fn next_run(
    settled: &Settled,
    records: &[RunRecord],
    baseline: &str,
    group: &BootGroup,
    cell: &Cell,
    run: u32,
    broken: bool,
) -> Next {
    let key = run_key(group, cell, false, run);
    if settled.has_valid_result(&key) {
        return Next::Done;
    }
    // Without workers no CV can be reached: record the runs always made, skip the rest.
    if broken && run >= cell.runs {
        return Next::Enough;
    }
    let this = CellKey {
        variant: &cell.variant,
        level: group.level,
        workload: &cell.workload.id,
    };
    let samples = settled.samples(records, &this, &cell.workload.metric, 0..run);
    // The baseline's valid values at this level, when a detectable effect is asked for.
    let baseline = (cell.target_mde.is_some() && cell.variant != baseline).then(|| {
        let base = CellKey {
            variant: baseline,
            ..this
        };
        settled.samples(records, &base, &cell.workload.metric, 0..u32::MAX)
    });
    if enough_runs(cell, run, &samples, baseline.as_deref()) {
        Next::Enough
    } else {
        Next::Run
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
pub fn slots_without_result(plan: &Plan, records: &[RunRecord]) -> usize {
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
