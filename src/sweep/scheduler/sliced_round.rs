//! A sliced run in the scheduler's loop: the cells of one workload that share guests and are
//! due in a round, made as one payload run of alternating slices ([`crate::sweep::sliced`]),
//! attempted, judged, journaled (one record set per cell, each under its own run key) and
//! retried as one, so every counted round of these cells comes from one invocation.

use super::{Ended, GroupState, Scheduler, Tries, attempt_id, describe, refused_args};
use crate::executor::Executor;
use crate::journal::RunRecord;
use crate::sweep::plan::{BootGroup, Cell};
use crate::sweep::records;
use crate::sweep::sliced;
use crate::sweep::stopping::{Next, measured_key};

impl<E: Executor> Scheduler<'_, E> {
    /// Measured run `run` of `cells` (two or more sliced cells of one workload, in the round's
    /// order, each due): attempts until one counts or a retry budget is spent, each on warmed
    /// workers, every attempt journaled for every cell.
    pub(super) async fn run_sliced_slot<'g>(
        &mut self,
        group: &'g BootGroup,
        state: &mut GroupState,
        cells: &[&'g Cell],
        run: u32,
    ) -> anyhow::Result<()> {
        let mut attempts: Vec<u32> = cells
            .iter()
            .map(|c| self.settled.last_attempt(&measured_key(group, c, run)) + 1)
            .collect();
        let mut tries = Tries::default();
        loop {
            let Some(facts) = self.workers_for(group, state, run).await? else {
                for (c, &a) in cells.iter().zip(&attempts) {
                    self.record_unattempted(group, state, c, run, a)?;
                }
                return Ok(());
            };
            let what = describe(group, cells[0], false, run, tries.made() + 1);
            self.progress
                .doing(format!("{what} sliced with {} more", cells.len() - 1));
            let ended = self
                .sliced_attempt(group, state, cells, run, &attempts, &facts)
                .await?;
            if ended == Ended::Counted {
                for c in cells {
                    self.totals.runs_ok += 1;
                    self.count_done(state, c);
                }
                return Ok(());
            }
            if !tries.retry_left(ended, &self.plan.timeouts) {
                break;
            }
            self.before_retry(ended).await;
            attempts.iter_mut().for_each(|a| *a += 1);
        }
        for (c, &a) in cells.iter().zip(&attempts) {
            self.give_up(group, state, c, run, a);
        }
        Ok(())
    }

    /// One sliced attempt on the workers up: run, told apart per cell, judged as one (any
    /// cell's failure fails them all: [`sliced::stand_together`]), journaled per cell.
    async fn sliced_attempt(
        &mut self,
        group: &BootGroup,
        state: &mut GroupState,
        cells: &[&Cell],
        run: u32,
        attempts: &[u32],
        facts: &serde_json::Value,
    ) -> anyhow::Result<Ended> {
        state.seq += 1;
        let spec = cells[0].slice.expect("a sliced cell has its slice");
        let arms: Vec<&[String]> = cells.iter().map(|c| c.argv.as_slice()).collect();
        let argv = sliced::argv(spec, &arms);
        let outcome = self
            .execute_argv(group, &argv, Some(spec.run_seconds(cells.len())))
            .await;
        let mut per_cell: Vec<Vec<RunRecord>> = sliced::split(&outcome, &argv, &arms)
            .into_iter()
            .zip(cells.iter().zip(attempts))
            .map(|(o, (c, &a))| {
                let id = attempt_id(group, state, run, false, a);
                records::attempt_records(c, id, o, facts, state.facts_on.as_ref())
            })
            .collect();
        sliced::stand_together(&mut per_cell);
        if state.facts_on.is_none()
            && let Some(first) = per_cell.first().filter(|r| !r.is_empty())
        {
            let id = attempt_id(group, state, run, false, attempts[0]);
            state.facts_on = Some(records::facts_on(&id, first));
        }
        // Judged as one attempt: its records are every cell's.
        let sizes: Vec<usize> = per_cell.iter().map(Vec::len).collect();
        let mut all: Vec<RunRecord> = per_cell.into_iter().flatten().collect();
        let ended = self.judge(&mut all, false);
        // The first refused record names its variant's cell.
        let refused = records::refused_args(&all)
            .and_then(|(r, _)| cells.iter().find(|c| c.variant == r.variant))
            .and_then(|c| refused_args(group, c, &all));
        self.report_failures(&all, ended);
        let mut rest = all.into_iter();
        for (c, n) in cells.iter().zip(sizes) {
            self.keep(c, rest.by_ref().take(n).collect())?;
        }
        if ended != Ended::Counted {
            self.totals.attempts_failed += 1;
        }
        self.after_attempt(state, ended, refused).await
    }

    /// The cells of `order` (the rest of a round's order, its first due now) that run sliced
    /// with its first: the first's workload's sliced cells still running, each due in this
    /// round, in the round's order. Fewer than two: the first runs whole.
    pub(super) fn sliced_with(
        &self,
        group: &BootGroup,
        state: &GroupState,
        order: &[usize],
        round: u32,
    ) -> Vec<usize> {
        let first = &group.cells[order[0]];
        if first.slice.is_none() {
            return vec![order[0]];
        }
        let broken = state.broken.is_some();
        order
            .iter()
            .copied()
            .filter(|&c| {
                let cell = &group.cells[c];
                !state.stopped[c]
                    && cell.sliced_with(first)
                    && (c == order[0] || self.next_run(group, cell, round, broken) == Next::Run)
            })
            .collect()
    }
}
