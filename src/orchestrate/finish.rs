//! The end of a sweep: what stopped it, said with what to do next, and, when it ran to its
//! end, its timings, reports and closing line.

use std::path::Path;
use std::time::Instant;

use super::{SweepIncomplete, results_dir};
use crate::journal::JournalWriteFailed;
use crate::sweep::plan::Plan;
use crate::sweep::scheduler::{self, PhaseTotals};

/// The outcome of a sweep's schedulers: a failed journal append says what to do next.
pub(crate) fn stopped<T>(outcome: anyhow::Result<T>, results_dir: &Path) -> anyhow::Result<T> {
    outcome.map_err(|e| {
        tracing::error!("sweep stopped: {e:#}");
        if e.chain().any(|c| c.is::<JournalWriteFailed>()) {
            e.context(format!(
                "the sweep stopped and its guests were removed; the journal keeps every finished run: \
                 once the cause is gone, continue with `ocrig run --resume {}`",
                results_dir.display()
            ))
        } else {
            e
        }
    })
}

/// Timings, reports and the closing line of a sweep that ran to its end; [`SweepIncomplete`]
/// when some of `plan`'s run slots have no valid result.
pub(crate) fn finish(
    results_dir: &Path,
    plan: &Plan,
    resumed: bool,
    t0: Instant,
    prep_s: f64,
    totals: &PhaseTotals,
) -> anyhow::Result<()> {
    let wall_s = t0.elapsed().as_secs_f64();
    let share = |x: f64| if wall_s > 0.0 { x / wall_s } else { 0.0 };
    let timings = serde_json::json!({
        "wall_s": wall_s, "prepare_s": prep_s, "phases": totals,
        "run_share": share(totals.run_s), "measured_share": share(totals.measured_s),
    });
    // Every resume keeps its own timings.
    let timings_file = if resumed {
        results_dir::numbered(results_dir, "timings-resume", "json")
    } else {
        results_dir.join("timings.json")
    };
    std::fs::write(timings_file, serde_json::to_string_pretty(&timings)?)?;

    let disturbed = if totals.disturbed + totals.disturbed_counted > 0 {
        format!(
            "; the host disturbed {} attempt(s) (waited {:.0} s) and {} run(s) counted marked disturbed",
            totals.disturbed, totals.disturbed_wait_s, totals.disturbed_counted
        )
    } else {
        String::new()
    };
    tracing::info!(
        "{} runs ok, {} failed ({} failed attempts{disturbed}); {} warm-up(s); {} boot(s); wall {:.1} s = prepare {:.1} + boot {:.1} + deploy {:.1} + run {:.1} (measured {:.1}, {:.0}% of wall) + teardown {:.1}; max start skew {:.0} µs",
        totals.runs_ok,
        totals.runs_failed,
        totals.attempts_failed,
        totals.warm_ups,
        totals.boots,
        wall_s,
        prep_s,
        totals.boot_s,
        totals.deploy_s,
        totals.run_s,
        totals.measured_s,
        share(totals.measured_s) * 100.0,
        totals.teardown_s,
        totals.max_start_skew_us
    );
    // Before the report, so its verdict is the last thing on the terminal; the breakdown is in
    // timings.json and the log.
    eprintln!("{}", closing_line(totals, wall_s, share(totals.measured_s)));

    // Streamed into digests: a long sweep's journal may not fit in memory whole.
    let j = crate::stats::digest::Digested::read(results_dir, false)?;
    super::out(&crate::report::render_digested(
        &j,
        crate::report::Format::Table,
        &Default::default(),
    )?)?;
    if let Err(e) = crate::report::write_all(&j, results_dir) {
        tracing::warn!("writing reports: {e:#}");
    }
    super::out(&format!(
        "report: {}\n{}\n",
        results_dir.join("report.html").display(),
        crate::color::paint(
            &format!("log:    {}", results_dir.join("ocrig.log").display()),
            crate::color::Tone::Dim
        )
    ))?;
    let slots = scheduler::slots_without_result(plan, &j.runs);
    if slots > 0 {
        return Err(SweepIncomplete {
            dir: results_dir.to_path_buf(),
            slots,
        }
        .into());
    }
    Ok(())
}

/// The sweep's count in one line within 120 columns: runs, failures, wall and how much of it ran.
fn closing_line(t: &PhaseTotals, wall_s: f64, measured_share: f64) -> String {
    let retried = match t.attempts_failed {
        0 => String::new(),
        n => format!(" ({n} failed attempt(s) tried again)"),
    };
    format!(
        "ocrig: {} runs ok, {} failed{retried}; {} boot(s); wall {:.0} s, {:.0} % of it measured (timings.json)",
        t.runs_ok,
        t.runs_failed,
        t.boots,
        wall_s,
        measured_share * 100.0
    )
}
