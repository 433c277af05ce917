//! Record building: one attempt's outcome becomes one journal record per worker that ran
//! something, each with its evidence; an attempt in which any worker failed is marked
//! superseded on every record, so nothing of it is ever a sample.

use std::collections::BTreeMap;

use anyhow::Context;
use serde_json::{Value, json};

use super::plan::Cell;
use crate::executor::{BAD_ARGS_STATUS, CHECK_FAILED_PREFIX, CHECK_FAILED_STATUS, RunOutcome, WorkerRun};
use crate::journal::DISTURBED_KEY;
use crate::journal::{RunRecord, Slot};

/// Which attempt of which run an outcome belongs to.
#[derive(Debug, Clone, Copy)]
pub struct AttemptId {
    pub level: f64,
    pub guests: u32,
    pub run: u32,
    pub warmup: bool,
    pub attempt: u32,
    pub slot: Slot,
}

/// The records of one attempt, in worker order, settled: if any failed, all are superseded.
///
/// `group_facts` are the guest set's facts (its guests' start, kernels' words, pinning,
/// memory); `facts_on`, once an attempt of the set has journaled them, says which record holds
/// them whole (see [`GuestParts::later`]): they do not change while the set is up, and at 480 guests
/// they are about a megabyte per attempt.
pub fn attempt_records(
    cell: &Cell,
    id: AttemptId,
    outcome: RunOutcome,
    group_facts: &Value,
    facts_on: Option<&Value>,
) -> Vec<RunRecord> {
    let now = jiff::Timestamp::now().to_string();
    let ran = outcome.workers.iter().flatten().count() as u32;
    let first = outcome.workers.iter().position(Option::is_some).unwrap_or(0) as u32;
    // A later attempt keeps of the facts only its guests' start facts.
    let parts = GuestParts::of(group_facts, facts_on.map(|_| &["start"][..]));
    let mut records: Vec<RunRecord> = outcome
        .workers
        .into_iter()
        .enumerate()
        .filter_map(|(i, w)| w.map(|w| (i as u32, w)))
        .map(|(guest, w)| {
            let mut rec = blank(cell, id, guest, ran, &now);
            rec.extra
                .insert("start_skew_us".into(), json!(outcome.start_skew_us));
            let group = match facts_on {
                Some(on) => parts.later(guest, on),
                None if guest == first => group_facts.clone(),
                None => parts.own(guest),
            };
            rec.extra.insert("group".into(), group);
            if guest == first {
                rec.extra.extend(outcome.host.clone());
            } else {
                // What every record of the attempt shares is journaled whole once, on its
                // first record; the others keep their own guest's part of it (at 480 guests the
                // whole is 480 guests' facts, on each of 480 records).
                rec.extra.extend(
                    outcome
                        .host
                        .iter()
                        .filter(|(k, _)| !FIRST_RECORD_ONLY.contains(&k.as_str()))
                        .map(|(k, v)| (k.clone(), without_per_cpu(v))),
                );
                rec.extra.insert(SHARED_ON_GUEST_KEY.into(), json!(first));
            }
            fill(&mut rec, w, &cell.workload.metric);
            rec
        })
        .collect();
    supersede_if_failed(&mut records);
    records
}

/// Host figures of an attempt that have no per-guest part, journaled on its first record only:
/// the host scheduler's vCPU timeline summary (every guest's slices, every CPU's shares).
const FIRST_RECORD_ONLY: &[&str] = &["timeline"];

/// On every record of an attempt but its first: the guest whose record holds the attempt's
/// shared facts whole (every guest's start facts and pinning, the host's per-CPU split).
pub const SHARED_ON_GUEST_KEY: &str = "shared_facts_on_guest";

/// Where a later attempt's records say the rest of their guest set's facts is.
pub const FACTS_ON_KEY: &str = "facts_on";

/// The identity of the record holding an attempt's facts whole (its first record), for
/// [`attempt_records`]' `facts_on` of the guest set's later attempts: same `slot` boot and
/// bring-up, this run, warm-up, attempt and guest.
pub fn facts_on(id: &AttemptId, records: &[RunRecord]) -> Value {
    let guest = records.first().map_or(0, |r| r.guest);
    json!({"run": id.run, "warmup": id.warmup, "attempt": id.attempt, "guest": guest})
}

/// A guest set's facts split by guest once per attempt, so each of its N records takes its
/// own part in time independent of N (cutting every per-guest list for every guest was
/// quadratic: at 480 guests, 230,000 entries looked at per attempt).
struct GuestParts<'a> {
    facts: &'a Value,
    /// Per key of the facts, in order: its value whole, or its entries by guest.
    keys: Vec<(&'a str, Part<'a>)>,
}

enum Part<'a> {
    Whole(&'a Value),
    /// Entries by guest, and what a guest without any gets (`guest_kernel`: the whole list,
    /// as its entries name no guest; a list naming guests: none).
    ByGuest(std::collections::HashMap<u64, Vec<&'a Value>>, Option<&'a Value>),
}

impl<'a> GuestParts<'a> {
    /// `facts` split, of the keys `only` names (all with `None`).
    fn of(facts: &'a Value, only: Option<&[&str]>) -> Self {
        let Value::Object(m) = facts else {
            return Self {
                facts,
                keys: Vec::new(),
            };
        };
        let guest_of = |e: &Value| e.get("guest").and_then(Value::as_u64);
        // `guest_kernel` names no guest: its entries are in the order of `start`'s (both are
        // made from the live guests in order), so a guest's entry is at its place in `start`.
        let start_guests: Option<Vec<u64>> = m
            .get("start")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().map(guest_of).collect());
        let keys = m
            .iter()
            .filter(|(k, _)| only.is_none_or(|o| o.contains(&k.as_str())))
            .map(|(k, v)| {
                let by = |pairs: Vec<(u64, &'a Value)>, missing: Option<&'a Value>| {
                    let mut map: std::collections::HashMap<u64, Vec<&'a Value>> = Default::default();
                    for (g, e) in pairs {
                        map.entry(g).or_default().push(e);
                    }
                    Part::ByGuest(map, missing)
                };
                let part = match (k.as_str(), v.as_array()) {
                    ("guest_kernel", Some(a)) => match &start_guests {
                        Some(guests) if guests.len() == a.len() => {
                            by(guests.iter().copied().zip(a.iter()).collect(), Some(v))
                        }
                        _ => Part::Whole(v),
                    },
                    ("guest_kernel", None) => Part::Whole(v),
                    (_, Some(a)) if !a.is_empty() && a.iter().all(|e| guest_of(e).is_some()) => {
                        by(a.iter().map(|e| (guest_of(e).unwrap_or(0), e)).collect(), None)
                    }
                    _ => Part::Whole(v),
                };
                (k.as_str(), part)
            })
            .collect();
        Self { facts, keys }
    }

    /// `guest`'s part of the facts: each per-guest list cut to its entries.
    fn own(&self, guest: u32) -> Value {
        if !self.facts.is_object() {
            return self.facts.clone();
        }
        Value::Object(
            self.keys
                .iter()
                .map(|(k, part)| {
                    let v = match part {
                        Part::Whole(v) => (*v).clone(),
                        Part::ByGuest(by, missing) => match (by.get(&(guest as u64)), missing) {
                            (Some(es), _) => Value::Array(es.iter().map(|e| (*e).clone()).collect()),
                            (None, Some(whole)) => (*whole).clone(),
                            (None, None) => Value::Array(Vec::new()),
                        },
                    };
                    (k.to_string(), v)
                })
                .collect(),
        )
    }

    /// A later attempt's part (of facts split of `start` only): its guest's start facts (how it was started: boot or clone,
    /// `-cpu`, which the reports read of every record) and where the rest is (`facts_on`: the
    /// set's first attempt's first record; every record of that attempt has its own guest's
    /// part).
    fn later(&self, guest: u32, on: &Value) -> Value {
        let mut part = match self.own(guest) {
            Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        part.insert(FACTS_ON_KEY.into(), on.clone());
        Value::Object(part)
    }
}

/// A host figure without its per-CPU split (`host_stat.per_cpu`), which the first record holds.
fn without_per_cpu(v: &Value) -> Value {
    match v {
        Value::Object(m) if m.contains_key("per_cpu") => Value::Object(
            m.iter()
                .filter(|(k, _)| k.as_str() != "per_cpu")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        _ => v.clone(),
    }
}

/// The single record of a run that could not be attempted at all (its workers could not be
/// brought up): failed, with the reason.
pub fn unattempted_record(cell: &Cell, id: AttemptId, error: &str) -> RunRecord {
    let mut rec = blank(cell, id, 0, 1, &jiff::Timestamp::now().to_string());
    rec.error = Some(error.to_string());
    rec.superseded = Some(format!("attempt {} was never made: {error}", id.attempt));
    rec
}

/// A record of guest `guest` of an attempt that journals `attempt_records` records in all.
fn blank(cell: &Cell, id: AttemptId, guest: u32, attempt_records: u32, now: &str) -> RunRecord {
    RunRecord {
        variant: cell.variant.clone(),
        level: id.level,
        workload: cell.workload.id.clone(),
        run: id.run,
        warmup: id.warmup,
        guest,
        guests: id.guests,
        host: None,
        ok: false,
        error: None,
        attempt: id.attempt,
        superseded: None,
        attempt_records,
        slot: id.slot,
        metrics: BTreeMap::new(),
        slices: None,
        payload: None,
        argv: cell.argv.clone(),
        timings: BTreeMap::new(),
        extra: serde_json::Map::new(),
        finished_at: now.to_string(),
    }
}

/// Puts one worker's result and evidence into its record.
fn fill(rec: &mut RunRecord, w: WorkerRun, metric: &str) {
    // Background workers may run another command (a CPU hog) without the headline metric.
    let expect_metric = w.argv == rec.argv;
    rec.argv = w.argv;
    if let Some(s) = w.run_s {
        rec.timings.insert("run_s".into(), s);
    }
    rec.extra.extend(w.telemetry);
    if let Ok(out) = &w.result
        && let Some(rejected) = self_check_failure(out)
    {
        // Not a result: failed with the checks' own words, the report kept for a reader.
        rec.error = Some(rejected.reason);
        rec.extra.insert(SELF_CHECKS_KEY.into(), rejected.checks);
        rec.payload = rejected.report.map(Box::new);
        return;
    }
    let parsed = w
        .result
        .map_err(anyhow::Error::msg)
        .and_then(|out| parse_report(&out, metric, expect_metric));
    match parsed {
        Ok(report) => {
            rec.metrics = report.metrics.clone();
            rec.slices = ocrig_payload::slices::slices_in(&report);
            rec.payload = Some(Box::new(report));
            rec.ok = true;
        }
        Err(e) => {
            rec.error = Some(format!("{e:#}"));
            if let Some(tail) = w.console_tail {
                rec.extra.insert("console_tail".into(), json!(tail));
            }
        }
    }
}

/// Where a record rejected by the payload's self-checks keeps the failed checks
/// (`[{"name","ok","value","bound","detail"}]`, or `[{"detail"}]` from stderr alone).
pub const SELF_CHECKS_KEY: &str = "self_checks_failed";
pub use crate::journal::{BAD_ARGS_REASON, SELF_CHECK_REASON};

/// The first record of an attempt whose payload refused its arguments, with the payload's
/// words, if any.
pub fn refused_args(records: &[RunRecord]) -> Option<(&RunRecord, &str)> {
    records
        .iter()
        .find_map(|r| Some((r, r.error.as_deref()?.strip_prefix(BAD_ARGS_REASON)?)))
}

/// The payload's self-check bounds and their defaults: a workload that sets one looser
/// accepts runs the shipped defaults would reject.
const BOUNDS: [(&str, f64); 1] = [("--max-work-error", ocrig_payload::work_as_run::MAX_WORK_ERROR)];

/// Each self-check bound some `argv` sets above its default, with the loosest value, e.g.
/// `--max-work-error 1 (default 0.1)`; in [`BOUNDS`] order.
pub fn loosened_bounds<'a>(argvs: impl Iterator<Item = &'a [String]>) -> Vec<String> {
    let mut loosest = [None::<f64>; BOUNDS.len()];
    for argv in argvs {
        for (i, (flag, default)) in BOUNDS.iter().enumerate() {
            let set = argv.iter().enumerate().find_map(|(k, a)| {
                let v = a.strip_prefix(flag)?;
                match v.strip_prefix('=') {
                    Some(v) => v.parse::<f64>().ok(),
                    None if v.is_empty() => argv.get(k + 1)?.parse::<f64>().ok(),
                    None => None,
                }
            });
            if let Some(v) = set.filter(|v| v > default) {
                loosest[i] = Some(loosest[i].map_or(v, |l: f64| l.max(v)));
            }
        }
    }
    BOUNDS
        .iter()
        .zip(loosest)
        .filter_map(|((flag, default), v)| Some(format!("{flag} {} (default {default})", v?)))
        .collect()
}

/// A run the payload itself rejected: its physics checks did not hold.
struct Rejected {
    reason: String,
    checks: Value,
    report: Option<ocrig_payload::report::Report>,
}

/// The payload's verdict when it exited with [`CHECK_FAILED_STATUS`]: the failed checks from
/// the report's `checks` array and the stderr lines (the stderr's words win: they are the
/// payload's own sentence with the numbers), and the report itself when it parses.
fn self_check_failure(out: &crate::executor::Finished) -> Option<Rejected> {
    if out.status != CHECK_FAILED_STATUS {
        return None;
    }
    let said: Vec<&str> = out
        .stderr
        .lines()
        .filter_map(|l| l.trim().strip_prefix(CHECK_FAILED_PREFIX))
        .map(str::trim)
        .collect();
    let report: Option<ocrig_payload::report::Report> = serde_json::from_str(out.stdout.trim()).ok();
    // The payload's typed checks (its report's top-level `checks`).
    let failed: Vec<Value> = report
        .as_ref()
        .map(|r| {
            r.checks
                .iter()
                .filter(|c| !c.ok)
                .filter_map(|c| serde_json::to_value(c).ok())
                .collect()
        })
        .unwrap_or_default();
    let details: Vec<String> = if !said.is_empty() {
        said.iter().map(|s| s.to_string()).collect()
    } else {
        failed
            .iter()
            .map(|c| {
                c["detail"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("{} ({} vs bound {})", c["name"], c["value"], c["bound"]))
            })
            .collect()
    };
    if details.is_empty() {
        // Status 3 without a word of why: an ordinary failure.
        return None;
    }
    let checks = if failed.is_empty() {
        Value::Array(details.iter().map(|d| json!({ "detail": d })).collect())
    } else {
        Value::Array(failed)
    };
    Some(Rejected {
        reason: format!("{SELF_CHECK_REASON}{}", details.join("; ")),
        checks,
        report,
    })
}

fn parse_report(
    out: &crate::executor::Finished,
    metric: &str,
    expect_metric: bool,
) -> anyhow::Result<ocrig_payload::report::Report> {
    if out.status == BAD_ARGS_STATUS {
        let words = out.stderr.trim();
        anyhow::bail!(
            "{BAD_ARGS_REASON}{}",
            words.strip_prefix("ocrig-payload: error: ").unwrap_or(words)
        );
    }
    anyhow::ensure!(
        out.status == 0,
        "payload exited with status {}: {}",
        out.status,
        out.stderr.trim()
    );
    let report: ocrig_payload::report::Report = serde_json::from_str(out.stdout.trim())
        .with_context(|| format!("payload printed no valid report: {}", out.stdout.trim()))?;
    if expect_metric && !report.metrics.contains_key(metric) {
        anyhow::bail!(
            "metric '{metric}' is not in the payload's report (it has: {})",
            report.metrics.keys().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    Ok(report)
}

/// The foreign load an attempt is judged disturbed by (on its first record), if read: the
/// share of the sweep's CPUs' time that went to processes other than the sweep's own.
pub fn foreign_load(records: &[RunRecord]) -> Option<f64> {
    let extra = &records.first()?.extra;
    let foreign = extra.get(crate::telemetry::host_load::KEY)?.as_f64()?;
    // Only what a process still running can be named for: a load nobody can be named for is,
    // on a quiet host, this sweep's own short-lived work (6-11 % of 2 CPUs at a fresh own-guest
    // set's first runs here, 2026-12-04, with no other process above 0.01 s), not a
    // disturbance. (A record without the named share judges by the whole foreign load.)
    Some(
        match extra
            .get(crate::telemetry::host_load::NAMED_KEY)
            .and_then(Value::as_f64)
        {
            Some(named) => foreign.min(named),
            None => foreign,
        },
    )
}

/// What a disturbed attempt becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disturbed {
    /// Failed and superseded: it is waited out and retried.
    Fail,
    /// Counted, its records `ok` and marked disturbed: the host stayed busy through a whole
    /// wait, so a retry would be disturbed too (and a slot left empty would lose the design's
    /// pairing); the report names every such run in its cell.
    Count,
}

/// Judges a counted attempt (every record `ok`) by the host's foreign load on the sweep's
/// CPUs during it (the executor's [`crate::telemetry::host_load`] reading on the attempt's
/// first record: their busy time less this sweep's own processes', its guests' QEMUs and
/// ocrig, over their total time). Above `bound`, the load is returned and, as `then` says,
/// every record becomes a failed, superseded record saying so (its numbers kept for a reader,
/// none a sample), or stays counted, marked disturbed. An attempt without the reading (a
/// remote host) is not judged.
///
/// Not the report's `other load` (busy time less the vCPUs' run time): that counts QEMU's own
/// threads too, 5-13 % of the CPUs at 0.5x under TCG here (2026-12-04), where the second CPU
/// has nothing else to do.
pub fn mark_disturbed(records: &mut [RunRecord], bound: f64, then: Disturbed) -> Option<f64> {
    if records.is_empty() || !records.iter().all(|r| r.ok) {
        return None;
    }
    let load = foreign_load(records)?;
    if load <= bound {
        return None;
    }
    let busiest: Vec<String> = records[0]
        .extra
        .get(crate::telemetry::host_load::BUSIEST_KEY)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|p| {
                    format!(
                        "{} (pid {}) {:.2} s",
                        p["comm"].as_str().unwrap_or("?"),
                        p["pid"],
                        p["cpu_s"].as_f64().unwrap_or(0.0)
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let who = if busiest.is_empty() {
        String::new()
    } else {
        format!("; busiest other processes: {}", busiest.join(", "))
    };
    let why = format!(
        "{}the host's CPUs of this sweep spent {:.1} % of their time during the run on processes \
         other than the sweep's own (its guests' QEMUs and ocrig), above host.max_other_load {:.1} %{who}",
        crate::journal::DISTURBED_REASON,
        load * 100.0,
        bound * 100.0
    );
    if then == Disturbed::Count {
        for r in records.iter_mut() {
            r.extra.insert(
                DISTURBED_KEY.into(),
                json!({ "foreign_load": load, "bound": bound, "counted": true, "why": why }),
            );
        }
        return Some(load);
    }
    for r in records.iter_mut() {
        r.ok = false;
        r.error = Some(why.clone());
        r.extra.insert(
            DISTURBED_KEY.into(),
            json!({ "foreign_load": load, "bound": bound }),
        );
    }
    supersede_if_failed(records);
    Some(load)
}

/// Whether a failed attempt failed only by its payload's own self-checks: every record that
/// is not `ok` is a self-check rejection ([`SELF_CHECK_REASON`]), so every guest answered and
/// ran the run to its end, and what the checks saw was the run, not the guests.
pub fn only_self_checks_failed(records: &[RunRecord]) -> bool {
    let mut failed = records.iter().filter(|r| !r.ok).peekable();
    failed.peek().is_some()
        && failed.all(|r| {
            r.error
                .as_deref()
                .is_some_and(|e| e.starts_with(SELF_CHECK_REASON))
        })
}

/// Marks every record of a failed attempt superseded, naming the guest(s) that failed.
fn supersede_if_failed(records: &mut [RunRecord]) {
    let failures: Vec<String> = records
        .iter()
        .filter(|r| !r.ok)
        .map(|r| format!("guest {}: {}", r.guest, r.error.as_deref().unwrap_or("failed")))
        .collect();
    if failures.is_empty() {
        return;
    }
    let reason = format!(
        "attempt failed, so none of its results count ({})",
        failures.join("; ")
    );
    for r in records {
        r.superseded = Some(reason.clone());
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn loosened_bounds_name_each_bound_set_above_its_default_at_its_loosest() {
        let argv = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        let a = argv("lock --algo tas --max-work-error=0.5");
        let b = argv("lock --algo ticket --max-work-error 1");
        let c = argv("lock --algo mcs --max-work-error 0.05");
        assert_eq!(
            loosened_bounds([a.as_slice(), b.as_slice(), c.as_slice()].into_iter()),
            vec!["--max-work-error 1 (default 0.1)".to_string()]
        );
        // At or below the defaults, or not set: nothing loosened.
        assert!(loosened_bounds([c.as_slice(), argv("lock").as_slice()].into_iter()).is_empty());
    }

    use super::*;
    use crate::executor::Finished;
    use crate::scenario::expand::WorkloadInstance;
    use crate::vocabulary::Better;

    fn cell() -> Cell {
        Cell {
            variant: "v".into(),
            workload: WorkloadInstance {
                id: "w".into(),
                source: 0,
                command: "lock".into(),
                args: BTreeMap::new(),
                metric: "ops_per_sec".into(),
                better: Better::Higher,
                metric_rules: Vec::new(),
                slice_ms: None,
            },
            argv: vec!["lock".into()],
            runs: 1,
            max_runs: 1,
            budget_arms: None,
            target_cv: None,
            target_mde: None,
            concluded: None,
            slice: None,
        }
    }

    fn report_json(ops: f64) -> String {
        crate::executor::mock::report_stdout("ops_per_sec", ops)
    }

    fn worker(result: Result<Finished, String>) -> Option<WorkerRun> {
        Some(WorkerRun {
            argv: vec!["lock".into()],
            result,
            run_s: Some(1.0),
            telemetry: serde_json::Map::from_iter([
                ("guest_stat".to_string(), json!({"user": 1})),
                ("vcpu_sched".to_string(), json!({"wall_s": 1.0})),
            ]),
            console_tail: Some("Kernel panic".into()),
        })
    }

    fn id() -> AttemptId {
        AttemptId {
            level: 1.0,
            guests: 3,
            run: 0,
            warmup: false,
            attempt: 1,
            slot: Slot {
                boot: 0,
                bring_up: 1,
                seq: 0,
                block: 0,
            },
        }
    }

    #[test]
    fn one_failed_worker_supersedes_the_whole_attempt() {
        let ok = Finished {
            status: 0,
            stdout: report_json(5.0),
            stderr: String::new(),
        };
        let outcome = RunOutcome {
            workers: vec![worker(Ok(ok)), None, worker(Err("timed out".into()))],
            start_skew_us: 12.0,
            host: serde_json::Map::new(),
        };
        let recs = attempt_records(&cell(), id(), outcome, &json!({"boot_s": 1}), None);
        assert_eq!(recs.len(), 2, "the idle guest has no record");
        assert_eq!((recs[0].guest, recs[0].ok), (0, true));
        assert_eq!((recs[1].guest, recs[1].ok), (2, false));
        assert!(recs.iter().all(|r| r.attempt_records == 2));
        let why = recs[0].superseded.as_deref().unwrap();
        assert!(why.contains("guest 2: timed out"), "{why}");
        assert_eq!(recs[1].extra["console_tail"], "Kernel panic");
        assert!(!recs[0].extra.contains_key("console_tail"));
        assert_eq!(recs[0].extra["vcpu_sched"], json!({"wall_s": 1.0}));
        assert_eq!(recs[0].extra["group"], json!({"boot_s": 1}));
    }

    #[test]
    fn what_an_attempt_shares_is_journaled_whole_once_and_each_guest_keeps_its_part() {
        let ok = || {
            worker(Ok(Finished {
                status: 0,
                stdout: report_json(5.0),
                stderr: String::new(),
            }))
        };
        let per_guest = |g: u32| json!({"guest": g, "start": {"method": "clone", "n": g}});
        let kernel = |g: u32| json!({"pv_words": [format!("[0.1] kvm-guest: guest {g}"), "[0.2] PV spinlocks enabled"]});
        let group = json!({"boot_s": 1, "start": [per_guest(0), per_guest(1), per_guest(2)],
                           "guest_kernel": [kernel(0), kernel(1), kernel(2)]});
        let host_stat = json!({"user": 300, "system": 0, "idle": 100, "steal": 0, "busy_share": 0.75,
                               "per_cpu": [{"cpu": 0, "user": 150}, {"cpu": 1, "user": 150}]});
        let outcome = RunOutcome {
            workers: vec![ok(), ok(), ok()],
            start_skew_us: 12.0,
            host: serde_json::Map::from_iter([
                ("host_stat".to_string(), host_stat.clone()),
                (
                    "timeline".to_string(),
                    json!({"path": "t.json.gz", "segments": 9}),
                ),
            ]),
        };
        let recs = attempt_records(&cell(), id(), outcome.clone(), &group, None);
        assert_eq!(recs[0].extra["group"], group);
        assert_eq!(recs[0].extra["timeline"]["segments"], 9);
        assert_eq!(recs[0].extra["host_stat"], host_stat);
        assert!(!recs[0].extra.contains_key(SHARED_ON_GUEST_KEY));
        for r in &recs[1..] {
            assert_eq!(r.extra["group"]["start"], json!([per_guest(r.guest)]), "{r:?}");
            assert_eq!(r.extra["group"]["boot_s"], 1);
            assert_eq!(r.extra["group"]["guest_kernel"], json!([kernel(r.guest)]));
            assert_eq!(r.extra["host_stat"]["busy_share"], 0.75);
            assert!(r.extra["host_stat"].get("per_cpu").is_none());
            assert_eq!(r.extra[SHARED_ON_GUEST_KEY], 0);
            assert!(
                !r.extra.contains_key("timeline"),
                "the first record holds the timeline"
            );
        }
        // What the reports read of the attempt is the same as from untrimmed records.
        let ctx = crate::stats::explain::RecordContext {
            accel: "kvm",
            backend: "host",
        };
        let mut whole = recs.clone();
        for r in &mut whole {
            r.extra.insert("group".into(), group.clone());
            r.extra.insert("host_stat".into(), host_stat.clone());
        }
        let refs = |v: &[RunRecord]| crate::testing::host_other(&v.iter().collect::<Vec<_>>(), &ctx);
        assert_eq!(refs(&recs), refs(&whole));
        assert!(refs(&recs).is_ok());
        let words = |v: &[RunRecord]| crate::testing::kernel_words(v.iter());
        assert_eq!(words(&recs), words(&whole));

        // A later attempt of the same guest set: each record keeps its guest's start facts and
        // where the rest is; the host's figures are the attempt's own, as before.
        let on = facts_on(&id(), &recs);
        assert_eq!(on, json!({"run": 0, "warmup": false, "attempt": 1, "guest": 0}));
        let later = attempt_records(&cell(), id(), outcome, &group, Some(&on));
        for r in &later {
            assert_eq!(
                r.extra["group"],
                json!({"start": [per_guest(r.guest)], "facts_on": on}),
                "{r:?}"
            );
        }
        assert_eq!(later[0].extra["host_stat"], host_stat);
        assert_eq!(later[0].extra["timeline"]["segments"], 9);
        assert_eq!(later[1].extra[SHARED_ON_GUEST_KEY], 0);
        // The reports read the same of it (a guest's `-cpu` is in its start facts; the
        // kernels' words, once per guest set, are on the first attempt's records).
        assert_eq!(refs(&later), refs(&whole));
        let both: Vec<RunRecord> = recs.iter().chain(&later).cloned().collect();
        assert_eq!(words(&both), words(&whole));
    }

    #[test]
    fn a_missing_headline_metric_fails_the_worker() {
        let ok = Finished {
            status: 0,
            stdout: report_json(5.0).replace("ops_per_sec", "other"),
            stderr: String::new(),
        };
        let outcome = RunOutcome {
            workers: vec![worker(Ok(ok))],
            start_skew_us: 0.0,
            host: serde_json::Map::new(),
        };
        let recs = attempt_records(&cell(), id(), outcome, &Value::Null, None);
        assert!(!recs[0].ok);
        assert!(recs[0].error.as_deref().unwrap().contains("metric 'ops_per_sec'"));
    }
}
