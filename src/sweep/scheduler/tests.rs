//! The scheduler on the mock executor, with every kind of failure injected. Each test checks
//! the accounting from the journal the scheduler wrote (read back as a file), through the same
//! settle function the reports and resume use — and, where it matters, through the reports'
//! own model.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::executor::mock::{Calls, MockExecutor, Script};
use crate::journal::accounting::settle;
use crate::journal::{Entry, JOURNAL_FILE};
use crate::scenario::Scenario;

const METRIC: &str = "ops_per_sec";

/// Two variants that differ only in payload arguments (one shared boot per level), 2 guests,
/// each run whole (`slice_ms: 0`: sliced rounds have tests of their own, below).
/// 3 runs each and no warm-ups unless `extra` says otherwise (the tests of failures count
/// run calls; the default warm-up, a round on every fresh guest set, has tests of its own:
/// [`with_default_warm_ups`]).
fn scenario(extra: &str) -> Scenario {
    let warm_ups = if extra.lines().any(|l| l.starts_with("warmup_runs:")) {
        ""
    } else {
        "warmup_runs: 0\n"
    };
    with_default_warm_ups(&format!("{warm_ups}{extra}"))
}

/// [`scenario`] with the warm-ups a scenario gets when it names none.
fn with_default_warm_ups(extra: &str) -> Scenario {
    let runs = if extra.lines().any(|l| l.starts_with("runs:")) {
        ""
    } else {
        "runs: 3\n"
    };
    yaml_serde::from_str(&format!(
        "name: t\nhost: {{cpus: 2}}\nlevels: [1.0]\nvariants:\n  - {{name: a, args: {{algo: tas}}}}\n  - {{name: b, args: {{algo: ticket}}}}\nworkloads:\n  - command: lock\n    metric: {METRIC}\n    slice_ms: 0\n    args: {{threads: 1}}\ntimeouts: {{retries: 1}}\n{runs}{extra}"
    ))
    .unwrap()
}

fn plan(extra: &str) -> Plan {
    Plan::build(&scenario(extra), &[0, 1], 1).unwrap()
}

/// The sweep on its one host, journaling through `journal` after the resumed `previous`.
async fn run<E: Executor>(
    plan: &Plan,
    exec: E,
    journal: JournalWriter,
    previous: Vec<RunRecord>,
    progress: &Progress,
) -> anyhow::Result<PhaseTotals> {
    let journal = SharedJournal::new(journal, previous);
    run_with(plan, exec, &journal, progress, HostShare::only()).await
}

struct Outcome {
    records: Vec<RunRecord>,
    totals: PhaseTotals,
    calls: Calls,
    progress: u64,
    total: u64,
}

async fn sweep(plan: &Plan, script: Script, previous: Vec<RunRecord>, dir: &std::path::Path) -> Outcome {
    let exec = MockExecutor::new(METRIC, script);
    let calls = exec.calls.clone();
    let progress = Progress::new(plan.measured_runs(), true);
    let journal = JournalWriter::open(dir).unwrap();
    let totals = run(plan, exec, journal, previous, &progress).await.unwrap();
    Outcome {
        records: read_records(dir),
        totals,
        calls: calls.lock().unwrap().clone(),
        progress: progress.position(),
        total: plan.measured_runs(),
    }
}

fn read_records(dir: &std::path::Path) -> Vec<RunRecord> {
    std::fs::read_to_string(dir.join(JOURNAL_FILE))
        .unwrap_or_default()
        .lines()
        .map(|l| match serde_json::from_str(l).unwrap() {
            Entry::Run(r) => *r,
            Entry::Sweep(_) | Entry::Resume(_) => panic!("no header expected"),
        })
        .collect()
}

/// (variant, run) → how many records of it count, from the settled journal.
fn counted(records: &[RunRecord]) -> BTreeMap<(String, u32, u32), usize> {
    let s = settle(records);
    let mut out = BTreeMap::new();
    for r in s.counted(records).filter(|r| !r.warmup) {
        *out.entry((r.variant.clone(), r.run, r.guest)).or_default() += 1;
    }
    out
}

/// Every measured run of both variants counted exactly once per guest.
fn each_run_counted_once(records: &[RunRecord], runs: u32, guests: u32) {
    let want: BTreeMap<(String, u32, u32), usize> = ["a", "b"]
        .iter()
        .flat_map(|v| (0..runs).flat_map(move |r| (0..guests).map(move |g| ((v.to_string(), r, g), 1))))
        .collect();
    assert_eq!(counted(records), want, "{}", brief(records));
}

fn brief(records: &[RunRecord]) -> String {
    records
        .iter()
        .map(|r| {
            format!(
                "{} run {}{} guest {} attempt {} ok {} superseded {}",
                r.variant,
                r.run,
                if r.warmup { "w" } else { "" },
                r.guest,
                r.attempt,
                r.ok,
                r.superseded.is_some()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Guest 0's headline value by the variant's argv and how many run calls of that argv came
/// before (`k`, from 0): the same whatever order the variants are interleaved in.
fn by_variants_run(f: impl Fn(&[String], u32) -> f64 + Send + 'static) -> crate::executor::mock::ValueFn {
    // argv → (the last run call seen, k); every worker of a call asks, so count calls.
    let seen = std::sync::Mutex::new(BTreeMap::<Vec<String>, (u32, u32)>::new());
    Box::new(move |call, argv| {
        let mut seen = seen.lock().unwrap();
        let (last, k) = seen.entry(argv.to_vec()).or_insert((call, 0));
        if *last != call {
            (*last, *k) = (call, *k + 1);
        }
        f(argv, *k)
    })
}

fn fail(run_call: u32, guest: u32, error: &str) -> BTreeMap<u32, Vec<(u32, String)>> {
    BTreeMap::from([(run_call, vec![(guest, error.to_string())])])
}

#[tokio::test]
async fn all_ok_one_shared_boot_interleaved_each_run_counted_once() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan("warmup_runs: 1\n");
    assert_eq!(p.boots.len(), 1, "identical guests share the boot");
    let o = sweep(&p, Script::default(), vec![], dir.path()).await;
    assert_eq!(o.calls.bring_ups, vec![vec!["a".to_string(), "b".into()]]);
    each_run_counted_once(&o.records, 3, 2);
    // Round-robin, rotating: the warm-up round a, b, then run 0 of b, a (the second round
    // starts at the second variant), run 1 of a, b, run 2 of b, a.
    let order: Vec<(String, u32, bool)> = o
        .records
        .iter()
        .filter(|r| r.guest == 0)
        .map(|r| (r.variant.clone(), r.run, r.warmup))
        .collect();
    let want: Vec<(String, u32, bool)> = [
        (0, true, "ab"),
        (0, false, "ba"),
        (1, false, "ab"),
        (2, false, "ba"),
    ]
    .iter()
    .flat_map(|&(r, w, first)| first.chars().map(move |v| (v.to_string(), r, w)))
    .collect();
    assert_eq!(order, want);
    // One boot group at the level: one block, block 0, on every record.
    assert!(o.records.iter().all(|r| r.slot.block == 0));
    let seqs: Vec<u32> = o
        .records
        .iter()
        .filter(|r| r.guest == 0)
        .map(|r| r.slot.seq)
        .collect();
    assert_eq!(seqs, (0..8).collect::<Vec<_>>(), "the order is journaled");
    // Warm-ups are never counted as runs; 2 were made, on the one guest set.
    assert_eq!(
        (
            o.totals.runs_ok,
            o.totals.runs_failed,
            o.totals.boots,
            o.totals.warm_ups
        ),
        (6, 0, 1, 2)
    );
    assert_eq!(o.progress, o.total);
    assert!(o.records.iter().all(|r| r.attempt == 1 && r.attempt_records == 2));
    // Guest 1 ran the same workload (background: same), and the evidence is in every record.
    assert!(o.records.iter().all(|r| r.extra.contains_key("vcpu_sched")
        && r.extra.contains_key("guest_stat")
        && r.extra.contains_key("host_stat")));
    // The guest set's facts: on its first attempt's records (the first warm-up), and every
    // later record says where they are.
    let (first, later) = o.records.split_at(2);
    assert!(
        first
            .iter()
            .all(|r| r.warmup && r.extra["group"]["mock_bring_up"] == 1)
    );
    let on = serde_json::json!({"run": 0, "warmup": true, "attempt": 1, "guest": 0});
    assert!(
        later
            .iter()
            .all(|r| r.extra["group"] == serde_json::json!({"facts_on": on})),
        "{:?}",
        later[0].extra["group"]
    );
}

#[tokio::test]
async fn per_variant_guests_boot_a_fresh_set_per_run_in_turn() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan("schedule: {guests: per-variant}\n");
    let o = sweep(&p, Script::default(), vec![], dir.path()).await;
    // Guests of their own: one run per bring-up (the default), A B, B A, A B.
    let order: Vec<String> = o.calls.bring_ups.iter().map(|b| b.join("+")).collect();
    assert_eq!(order, ["a", "b", "b", "a", "a", "b"]);
    each_run_counted_once(&o.records, 3, 2);
}

#[tokio::test]
async fn a_background_guest_that_dies_supersedes_guest_0s_result() {
    let dir = tempfile::tempdir().unwrap();
    let script = Script {
        failing_runs: fail(3, 1, "guest 1: connection lost"),
        ..Default::default()
    };
    let o = sweep(&plan(""), script, vec![], dir.path()).await;
    // Run call 3 is run 1 of variant a (round 0 is b, a: it starts at the variant after the
    // baseline; round 1 is a, b): guest 0 finished, guest 1 died.
    let first: Vec<&RunRecord> = o
        .records
        .iter()
        .filter(|r| r.variant == "a" && r.run == 1 && r.attempt == 1)
        .collect();
    assert_eq!(first.len(), 2);
    assert!(
        first[0].ok && first[0].superseded.is_some(),
        "guest 0 ok but superseded"
    );
    assert!(!first[1].ok);
    each_run_counted_once(&o.records, 3, 2);
    let counted = settle(&o.records);
    let valid = counted
        .primary(&o.records, &RunKey::new("a", 1.0, "lock", false, 1))
        .unwrap();
    assert_eq!(
        valid.attempt, 2,
        "the result measured while guest 1 died never counts"
    );
    // The retry ran on fresh guests, right after the failure.
    assert_eq!(o.calls.bring_ups.len(), 2);
    assert_eq!(o.calls.runs[3].0, 2, "run call 4 is on the second bring-up");
    assert_eq!((o.totals.runs_ok, o.totals.attempts_failed), (6, 1));
    // The reports see 3 samples per cell, not 4, and no failed run.
    let model = stats_model(&o.records);
    for series in &model.workloads[0].series {
        let c = &series.cells[0];
        assert_eq!(
            (c.summary.as_ref().unwrap().n, c.failed),
            (3, 0),
            "{}",
            series.variant
        );
    }
}

#[tokio::test]
async fn guest_0_failing_is_retried_with_the_next_attempt_number() {
    let dir = tempfile::tempdir().unwrap();
    let script = Script {
        failing_runs: fail(1, 0, "payload exited with status 1"),
        ..Default::default()
    };
    let o = sweep(&plan(""), script, vec![], dir.path()).await;
    // Call 1 is run 0 of b: round 0 starts at the variant after the baseline.
    let run0: Vec<(u32, u32, bool)> = o
        .records
        .iter()
        .filter(|r| r.variant == "b" && r.run == 0)
        .map(|r| (r.attempt, r.guest, r.ok))
        .collect();
    assert_eq!(run0, [(1, 0, false), (1, 1, true), (2, 0, true), (2, 1, true)]);
    each_run_counted_once(&o.records, 3, 2);
}

#[tokio::test]
async fn any_guest_failing_every_attempt_gives_the_run_up_once() {
    let dir = tempfile::tempdir().unwrap();
    // Calls 1 and 2: run 0 of b (round 0 starts at the variant after the baseline) and its retry.
    let mut failing = fail(1, 1, "timed out");
    failing.extend(fail(2, 0, "timed out again"));
    let script = Script {
        failing_runs: failing,
        ..Default::default()
    };
    let o = sweep(&plan(""), script, vec![], dir.path()).await;
    // Run 0 of b failed in both attempts (retries: 1): no valid result, one failed run.
    let s = settle(&o.records);
    assert!(!s.has_valid_result(&RunKey::new("b", 1.0, "lock", false, 0)));
    assert_eq!(s.failed_runs("b", 1.0, "lock"), 1);
    assert_eq!(
        (o.totals.runs_ok, o.totals.runs_failed, o.totals.attempts_failed),
        (5, 1, 2)
    );
    assert_eq!(o.progress, o.total, "the progress bar counted each run once");
    let model = stats_model(&o.records);
    let b = &model.workloads[0].series[1].cells[0];
    assert_eq!((b.summary.as_ref().unwrap().n, b.failed), (2, 1));
    // Fresh guests after each failure: 1 + 2 bring-ups.
    assert_eq!(o.calls.bring_ups.len(), 3);
}

#[tokio::test]
async fn a_failed_boot_records_each_run_once_as_failed_and_the_sweep_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let p = Plan::build(
        &yaml_serde::from_str(
            "name: t\nhost: {cpus: 2}\nlevels: [0.5, 1.0]\nworkloads:\n  - command: lock\n    metric: ops_per_sec\nruns: 2\nwarmup_runs: 2\n",
        )
        .unwrap(),
        &[0, 1],
        1,
    )
    .unwrap();
    let script = Script {
        failing_bring_ups: BTreeSet::from([1]),
        ..Default::default()
    };
    let o = sweep(&p, script, vec![], dir.path()).await;
    // The warm-up that needed the guests says why they failed; each measured run is then
    // recorded failed once, attempt 1 (run 1 too, in the level's second block, which tries
    // no bring-up of a group that could not be brought up); the second warm-up is not made.
    let at_half: Vec<&RunRecord> = o.records.iter().filter(|r| r.level == 0.5).collect();
    assert_eq!(
        at_half
            .iter()
            .map(|r| (r.warmup, r.run, r.attempt, r.ok))
            .collect::<Vec<_>>(),
        [(true, 0, 1, false), (false, 0, 1, false), (false, 1, 1, false)],
        "{}",
        brief(&o.records)
    );
    assert!(
        at_half
            .iter()
            .all(|r| r.error.as_deref().unwrap().contains("bring-up 1 fails"))
    );
    // Level 1.0 booted and ran normally.
    let s = settle(&o.records);
    let cell = crate::journal::accounting::CellKey {
        variant: "base",
        level: 1.0,
        workload: "lock",
    };
    assert_eq!(
        s.samples(
            &o.records,
            &cell,
            METRIC,
            0..2,
            crate::vocabulary::HeadlineFrom::PrimaryGuest
        )
        .len(),
        2
    );
    assert_eq!(o.progress, o.total);
    // Measured runs given up: 2 (warm-ups are never counted as runs). Bring-ups: the failed
    // one, and level 1.0's two (one a block, by default at two levels).
    assert_eq!((o.totals.runs_failed, o.totals.boots), (2, 3));
}

#[tokio::test]
async fn a_reboot_failing_mid_group_keeps_the_finished_runs() {
    let dir = tempfile::tempdir().unwrap();
    let script = Script {
        // Run call 3 (run 1 of a: rounds b a, a b, b a) fails; the fresh guests for its retry
        // do not come up.
        failing_runs: fail(3, 1, "guest died"),
        failing_bring_ups: BTreeSet::from([2]),
        ..Default::default()
    };
    let o = sweep(&plan(""), script, vec![], dir.path()).await;
    let s = settle(&o.records);
    // Runs 0 of a and b finished before and still count; nothing was written over them.
    for v in ["a", "b"] {
        assert!(s.has_valid_result(&RunKey::new(v, 1.0, "lock", false, 0)), "{v}");
        let run0 = o.records.iter().filter(|r| r.variant == v && r.run == 0).count();
        assert_eq!(run0, 2, "run 0 of {v} journaled once per guest");
    }
    // Run 1 of a: attempt 1 failed, attempt 2 could not be made (recorded as attempt 2).
    let a1: Vec<(u32, bool)> = o
        .records
        .iter()
        .filter(|r| r.variant == "a" && r.run == 1 && r.guest == 0)
        .map(|r| (r.attempt, r.ok))
        .collect();
    assert_eq!(a1, [(1, true), (2, false)]);
    // Every run not yet done is recorded failed exactly once, with its own attempt number 1.
    let rest: BTreeSet<(String, u32, u32)> = o
        .records
        .iter()
        .filter(|r| !(r.run == 0 || (r.variant == "a" && r.run == 1)))
        .map(|r| (r.variant.clone(), r.run, r.attempt))
        .collect();
    assert_eq!(
        rest,
        BTreeSet::from([("b".into(), 1, 1), ("b".into(), 2, 1), ("a".into(), 2, 1)]),
        "{}",
        brief(&o.records)
    );
    assert_eq!(o.progress, o.total);
    assert_eq!((o.totals.runs_ok, o.totals.runs_failed), (2, 4));
}

#[tokio::test]
async fn an_interrupted_sweep_resumes_without_redoing_or_double_counting() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan("");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let script = Script {
        // Run call 2 fails on guest 1 (journaled, superseded); its retry (call 3) ok; call 5 hangs.
        failing_runs: fail(2, 1, "guest died"),
        hang_at: Some((5, tx)),
        ..Default::default()
    };
    {
        let exec = MockExecutor::new(METRIC, script);
        let progress = Progress::new(p.measured_runs(), true);
        let journal = JournalWriter::open(dir.path()).unwrap();
        // As a signal does: the sweep future is dropped mid-run.
        tokio::select! {
            _ = run(&p, exec, journal, vec![], &progress) => panic!("the sweep should hang"),
            _ = rx.recv() => {}
        }
    }
    let before = read_records(dir.path());
    let done_before: BTreeSet<(String, u32)> = settle(&before)
        .counted(&before)
        .map(|r| (r.variant.clone(), r.run))
        .collect();
    assert_eq!(done_before.len(), 3, "{}", brief(&before));

    // A partial attempt, as a crash mid-append leaves it: guest 0's line of run 2 of b only.
    let mut torn = before
        .iter()
        .find(|r| r.guest == 0 && r.superseded.is_none())
        .unwrap()
        .clone();
    (torn.variant, torn.run, torn.attempt) = ("b".into(), 2, 1);
    let mut previous = before.clone();
    previous.push(torn);

    let resumed_dir = tempfile::tempdir().unwrap();
    let o = sweep(&p, Script::default(), previous.clone(), resumed_dir.path()).await;
    let new = o.records;
    assert!(
        new.iter()
            .all(|r| !done_before.contains(&(r.variant.clone(), r.run))),
        "the resume redid a finished run:\n{}",
        brief(&new)
    );
    let b2: Vec<u32> = new
        .iter()
        .filter(|r| r.variant == "b" && r.run == 2)
        .map(|r| r.attempt)
        .collect();
    assert_eq!(b2, [2, 2], "the torn attempt 1 is followed by attempt 2");
    let mut all = previous;
    all.extend(new);
    each_run_counted_once(&all, 3, 2);
    assert_eq!(o.progress, o.total, "resumed runs counted once in the progress");
}

#[tokio::test]
async fn a_cv_target_reached_early_stops_that_cell_only() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan("runs: {min: 2, max: 5, target_cv: 0.05}\n");
    let script = Script {
        // Variant a is steady (CV 0); b alternates 150 / 50 (CV ~0.7) and runs to max.
        value: Some(by_variants_run(|argv, k| {
            if argv.contains(&"ticket".to_string()) {
                if k % 2 == 1 { 50.0 } else { 150.0 }
            } else {
                100.0
            }
        })),
        ..Default::default()
    };
    let o = sweep(&p, script, vec![], dir.path()).await;
    let runs_of = |v: &str| guest0_runs(&o.records, v);
    assert_eq!((runs_of("a"), runs_of("b")), (2, 5), "{}", brief(&o.records));
    assert_eq!(o.progress, o.total, "skipped runs are counted as done");
    let model = stats_model(&o.records);
    assert_eq!(
        model.workloads[0].series[0].cells[0].summary.as_ref().unwrap().n,
        2
    );
}

#[tokio::test]
async fn a_shuffle_is_recorded_and_repeats_for_its_seed() {
    let order = |seed: u64| async move {
        let dir = tempfile::tempdir().unwrap();
        let p = Plan::build(
            &scenario(&format!("schedule: {{order: shuffle, seed: {seed}}}\nruns: 6\n")),
            &[0, 1],
            1,
        )
        .unwrap();
        let o = sweep(&p, Script::default(), vec![], dir.path()).await;
        each_run_counted_once(&o.records, 6, 2);
        o.records
            .iter()
            .filter(|r| r.guest == 0)
            .map(|r| (r.variant.clone(), r.run))
            .collect::<Vec<_>>()
    };
    let a = order(3).await;
    assert_eq!(a, order(3).await);
    assert_ne!(a, order(4).await);
    // Still one run of each cell per round.
    for round in a.chunks(2) {
        assert_eq!(round[0].1, round[1].1, "{a:?}");
    }
}

#[tokio::test]
async fn idle_and_hog_backgrounds_give_the_other_guests_their_commands() {
    // A run's headline is every guest's mean where each ran the measured workload only.
    use crate::vocabulary::HeadlineFrom;
    assert_eq!(plan("runs: 1\n").headline_from(), HeadlineFrom::EveryGuest);
    assert_eq!(
        plan("background: hog\nruns: 1\n").headline_from(),
        HeadlineFrom::PrimaryGuest
    );
    assert_eq!(
        plan("background: idle\nruns: 1\n").headline_from(),
        HeadlineFrom::PrimaryGuest
    );
    let dir = tempfile::tempdir().unwrap();
    let o = sweep(
        &plan("background: hog\nruns: 1\n"),
        Script::default(),
        vec![],
        dir.path(),
    )
    .await;
    let argv1 = o.calls.runs[0].1[1].clone().unwrap();
    assert_eq!(argv1[0], "hog");
    each_run_counted_once(&o.records, 1, 2);
    let dir = tempfile::tempdir().unwrap();
    let o = sweep(
        &plan("background: idle\nruns: 1\n"),
        Script::default(),
        vec![],
        dir.path(),
    )
    .await;
    assert!(o.calls.runs[0].1[1].is_none());
    each_run_counted_once(&o.records, 1, 1);
}

/// Guest 0's records of `variant`: its attempts, failed ones and warm-ups included.
fn guest0_runs(records: &[RunRecord], variant: &str) -> usize {
    records
        .iter()
        .filter(|r| r.variant == variant && r.guest == 0)
        .count()
}

/// The reports' model of a journal holding `records`.
fn stats_model(records: &[RunRecord]) -> crate::stats::cells::Model {
    stats_model_of(records, &["a", "b"], None)
}

/// [`stats_model`] of a sweep of `variants` (the first the baseline) whose header journaled
/// `looks`.
fn stats_model_of(
    records: &[RunRecord],
    variants: &[&str],
    looks: Option<u32>,
) -> crate::stats::cells::Model {
    let header: crate::journal::SweepHeader = crate::testing::header_with(serde_json::json!({
        "scenario": "t", "scenario_sha256": "00", "baseline": variants[0], "variants": variants,
        "levels": [1.0], "looks": looks,
        "workloads": {"lock": {"command": "lock", "metric": METRIC, "better": "higher"}},
        "backend": "mock", "accel": "tcg", "host_cpus": [0, 1], "guest_vcpus": 1,
        "started_at": "t", "ocrig_version": "0",
    }));
    let journal = crate::journal::Journal {
        header,
        runs: records.to_vec(),
    };
    crate::testing::build(&journal, 0.05, None)
}

#[tokio::test]
async fn arguments_the_payload_refuses_stop_the_sweep_at_once_with_its_words_and_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let words = "locktorture: the kernel does not know torture_type `spin_lok` (EINVAL from finit_module)";
    // Run call 1 (run 0 of variant a; no warm-ups here): refused in guest 1 only.
    let script = Script {
        refused_args: BTreeMap::from([(1, vec![(1, words.to_string())])]),
        ..Default::default()
    };
    let exec = MockExecutor::new(METRIC, script);
    let calls = exec.calls.clone();
    let p = plan("");
    let progress = Progress::new(p.measured_runs(), true);
    let journal = JournalWriter::open(dir.path()).unwrap();
    let err = run(&p, exec, journal, vec![], &progress)
        .await
        .expect_err("a refused argument ends the sweep");
    let refused = err
        .downcast_ref::<PayloadRefusedArgs>()
        .unwrap_or_else(|| panic!("{err:#}"));
    assert_eq!(
        (refused.guest, refused.level, refused.words.as_str()),
        (1, 1.0, words)
    );
    let said = err.to_string();
    assert!(said.contains("workload `lock`") && said.contains(words), "{said}");
    // Bad input: exit status 2.
    assert_eq!(
        crate::orchestrate::exit_code(&err),
        crate::orchestrate::exit::BAD_INPUT
    );
    // Nothing retried, the guests gone, the attempt journaled with the payload's words.
    let calls = calls.lock().unwrap().clone();
    assert_eq!((calls.runs.len(), calls.bring_ups.len(), calls.up), (1, 1, false));
    let recs = read_records(dir.path());
    assert_eq!(recs.len(), 2, "{recs:?}");
    let bad = recs.iter().find(|r| r.guest == 1).unwrap();
    assert_eq!(
        bad.error.as_deref(),
        Some(format!("payload refused its arguments: {words}").as_str())
    );
    assert!(recs.iter().all(|r| r.superseded.is_some()), "{recs:?}");
}

#[tokio::test]
async fn a_run_its_self_checks_reject_fails_in_their_words_and_is_retried() {
    let dir = tempfile::tempdir().unwrap();
    let why = "calibration drifted 31 % during the run (12.0 → 15.7 ns per iteration)";
    let script = Script {
        failing_checks: BTreeMap::from([(1, vec![(0, why.to_string())])]),
        ..Default::default()
    };
    let o = sweep(&plan(""), script, vec![], dir.path()).await;
    // Call 1 is run 0 of b: round 0 starts at the variant after the baseline.
    let run0: Vec<&RunRecord> = o
        .records
        .iter()
        .filter(|r| r.variant == "b" && r.run == 0)
        .collect();
    let shape: Vec<(u32, u32, bool)> = run0.iter().map(|r| (r.attempt, r.guest, r.ok)).collect();
    assert_eq!(shape, [(1, 0, false), (1, 1, true), (2, 0, true), (2, 1, true)]);
    let rejected = run0[0];
    // The check's own words, not "status 3".
    assert_eq!(
        rejected.error.as_deref(),
        Some(format!("self-check failed: {why}").as_str())
    );
    // The report stays with the failed record for a reader, but gives no sample.
    let report = rejected
        .payload
        .as_ref()
        .expect("the rejected run's report is kept");
    assert_eq!(report.metrics[METRIC], 100.0);
    assert!(rejected.metrics.is_empty());
    let checks = &rejected.extra[crate::sweep::records::SELF_CHECKS_KEY];
    assert_eq!(
        checks.as_array().unwrap().len(),
        1,
        "only the failed check: {checks}"
    );
    assert_eq!(checks[0]["name"], "calibration_stable");
    assert!(run0[1].superseded.as_deref().unwrap().contains(why));
    // Retried and counted once, by the one rule.
    each_run_counted_once(&o.records, 3, 2);
    assert_eq!(o.totals.attempts_failed, 1);
    // The reports say how many attempts the checks rejected, and why.
    let model = stats_model(&o.records);
    assert_eq!(model.self_checks.attempts, 1);
    assert_eq!(model.self_checks.reasons, vec![(why.to_string(), 1)]);
    assert_eq!(
        model.workloads[0].series[0].cells[0].summary.as_ref().unwrap().n,
        3
    );
}

#[tokio::test]
async fn a_run_the_host_disturbed_is_named_waited_out_and_retried_on_the_same_guests() {
    let dir = tempfile::tempdir().unwrap();
    // Call 1 (run 0 of b: round 0 starts at the variant after the baseline): 12 % of the
    // CPUs' time went to something else; every other run has the 1 % of a quiet host. Call 3
    // (run 0 of a, round 0 goes on after b's retry): 30 %, and again at its retry.
    let script = Script {
        realistic_host_cpus: Some(2),
        other_load: BTreeMap::from([(1, 0.12), (3, 0.30), (4, 0.30)]),
        ..Default::default()
    };
    let o = sweep(&plan(""), script, vec![], dir.path()).await;
    let attempts = |v: &str, run: u32| -> Vec<(u32, u32, bool)> {
        o.records
            .iter()
            .filter(|r| r.variant == v && r.run == run && r.guest == 0 && !r.warmup)
            .map(|r| (r.attempt, r.slot.bring_up, r.ok))
            .collect()
    };
    // Retried on the same guests, each retry after a wait for a quiet host.
    assert_eq!(attempts("b", 0), [(1, 1, false), (2, 1, true)]);
    assert_eq!(attempts("a", 0), [(1, 1, false), (2, 1, false), (3, 1, true)]);
    assert_eq!(attempts("a", 1), [(1, 1, true)]);
    assert_eq!(o.calls.bring_ups.len(), 1);
    let bound = crate::scenario::model::DEFAULT_MAX_OTHER_LOAD;
    assert_eq!(o.calls.quiet_waits, [(1, bound), (3, bound), (4, bound)]);
    // Named in the journal with the load, the bound and what it was; its numbers kept but
    // no sample.
    let d = o
        .records
        .iter()
        .find(|r| r.variant == "b" && r.run == 0 && r.attempt == 1 && r.guest == 0)
        .unwrap();
    let error = d.error.as_deref().unwrap();
    assert!(error.starts_with(crate::journal::DISTURBED_REASON), "{error}");
    // The 12 % added to the 1 % of a quiet host.
    assert!(
        error.contains("spent 13.0 %") && error.contains("above host.max_other_load 5.0 %"),
        "{error}"
    );
    assert!(d.superseded.is_some());
    let load = d.extra[crate::journal::DISTURBED_KEY]["foreign_load"]
        .as_f64()
        .unwrap();
    assert!((load - 0.13).abs() < 0.01, "{load}");
    each_run_counted_once(&o.records, 3, 2);
    assert_eq!((o.totals.disturbed, o.totals.attempts_failed), (3, 3));
    assert_eq!(o.totals.disturbed_wait_s, 3.0);
    // The reports count them apart from self-check rejections.
    let model = stats_model(&o.records);
    assert_eq!(model.disturbed.attempts, 3);
    assert_eq!(model.self_checks.attempts, 0);
    assert_eq!(
        model.workloads[0].series[0].cells[0].summary.as_ref().unwrap().n,
        3
    );
}

#[tokio::test]
async fn a_host_that_stays_busy_gets_one_wait_and_its_runs_then_count_marked_disturbed() {
    let dir = tempfile::tempdir().unwrap();
    // Calls 1-3 and 7 disturbed; every wait ends with the host still busy.
    let script = Script {
        realistic_host_cpus: Some(2),
        other_load: BTreeMap::from([(1, 0.2), (2, 0.2), (3, 0.2), (7, 0.2)]),
        host_stays_busy: true,
        // Some spread, so each comparison has an interval.
        value: Some(by_variants_run(|argv, k| {
            let of_b = argv.contains(&"ticket".to_string());
            [100.0, 102.0, 99.0, 101.0][k as usize % 4] * if of_b { 1.1 } else { 1.0 }
        })),
        ..Default::default()
    };
    let o = sweep(&plan(""), script, vec![], dir.path()).await;
    let bound = crate::scenario::model::DEFAULT_MAX_OTHER_LOAD;
    let tried: Vec<(String, u32, u32, bool)> = o
        .records
        .iter()
        .filter(|r| r.guest == 0)
        .map(|r| (r.variant.clone(), r.run, r.attempt, r.ok))
        .collect();
    // Call 1 (run 0 of b: round 0 starts at the variant after the baseline): failed, a wait
    // that ends busy, its retry (call 2) disturbed too: counted, marked. Call 3 (run 0 of a):
    // counted at once, marked. Calls 4-6 run quiet, three in a row,
    // which ends the busy state, so the disturbance of call 7 is failed, waited for again and
    // retried.
    assert_eq!(o.calls.quiet_waits, [(1, bound), (7, bound)], "{tried:?}");
    assert_eq!(
        &tried[..4],
        [
            ("b".into(), 0, 1, false),
            ("b".into(), 0, 2, true),
            ("a".into(), 0, 1, true),
            ("a".into(), 1, 1, true),
        ]
    );
    each_run_counted_once(&o.records, 3, 2);
    assert_eq!(
        (
            o.totals.disturbed,
            o.totals.disturbed_counted,
            o.totals.runs_failed,
            o.totals.runs_ok,
            o.totals.attempts_failed
        ),
        (2, 2, 0, 6, 2)
    );
    // Every record of a counted disturbed run is ok and says so, with the load, the bound and
    // the words a failed one would have had.
    let counted: Vec<&RunRecord> = o
        .records
        .iter()
        .filter(|r| crate::journal::counted_disturbed(&r.extra))
        .collect();
    assert_eq!(counted.len(), 4, "two runs of two guests");
    for r in &counted {
        assert!(r.ok && r.error.is_none() && r.superseded.is_none(), "{r:?}");
        let d = &r.extra[crate::journal::DISTURBED_KEY];
        assert!(d["foreign_load"].as_f64().unwrap() > bound, "{d}");
        assert!(
            d["why"]
                .as_str()
                .unwrap()
                .starts_with(crate::journal::DISTURBED_REASON),
            "{d}"
        );
    }
    // The report counts both kinds and names the counted runs in their cells.
    let model = stats_model(&o.records);
    assert_eq!((model.disturbed.attempts, model.disturbed.counted), (2, 2));
    let named: Vec<(String, Vec<u32>)> = model.workloads[0]
        .series
        .iter()
        .map(|s| (s.variant.clone(), s.cells[0].disturbed_runs.clone()))
        .collect();
    assert_eq!(named, [("a".into(), vec![0]), ("b".into(), vec![0])]);
    let line = crate::report::disturbed_line(&model).unwrap();
    assert!(
        line.contains("2 attempts failed, waited out") && line.contains("2 runs counted marked disturbed"),
        "{line}"
    );
    let note = crate::report::disturbed_runs_note(&model.workloads[0]).unwrap();
    assert!(
        note.starts_with("counted though the host disturbed them")
            && note.ends_with(": a 1x run 0 of 3; b 1x run 0 of 3"),
        "{note}"
    );
    let notes = crate::report::notes(&model, &model.workloads[0]);
    assert!(notes.contains(&note), "{notes:?}");
    // The comparison's ratio without them: run 0 of both sides left out, two rounds remain.
    let row = &model.workloads[0].comparisons[0].rows[0];
    let w = row.without_disturbed.as_ref().unwrap();
    assert_eq!(w.runs_left_out, 2);
    let quiet = w.effect.as_ref().unwrap();
    let all = row.effect.as_ref().unwrap();
    assert_eq!((all.n_base, quiet.n_base), (3, 2), "{all:?} {quiet:?}");
    assert!(
        notes.iter().any(|n| n
            .starts_with("b at 1x: without the 2 run(s) counted though the host disturbed them: ")
            && n.contains("over 2 rounds")),
        "{notes:?}"
    );
}

#[tokio::test]
async fn a_lasting_load_that_dips_under_its_bound_stays_busy_until_three_runs_in_a_row_are_clearly_quiet() {
    let dir = tempfile::tempdir().unwrap();
    // 1 % of a quiet host plus: 20 % (disturbed), 3 % (4 %: under the 5 % bound, above half
    // of it), and nothing at calls 5 and 6 (clearly quiet, two in a row).
    let script = Script {
        realistic_host_cpus: Some(2),
        other_load: BTreeMap::from([(1, 0.2), (2, 0.2), (3, 0.03), (4, 0.2), (7, 0.2)]),
        host_stays_busy: true,
        ..Default::default()
    };
    let o = sweep(&plan(""), script, vec![], dir.path()).await;
    let bound = crate::scenario::model::DEFAULT_MAX_OTHER_LOAD;
    // Call 3 counts as a quiet run but does not end the busy state, so call 4 counts marked
    // disturbed without a wait; two clearly quiet runs (5, 6) do not end it either, so call 7
    // counts marked disturbed too: one wait in the whole sweep.
    assert_eq!(o.calls.quiet_waits, [(1, bound)]);
    each_run_counted_once(&o.records, 3, 2);
    assert_eq!(
        (
            o.totals.disturbed,
            o.totals.disturbed_counted,
            o.totals.runs_failed
        ),
        (1, 3, 0)
    );
}

#[tokio::test]
async fn a_detectable_effect_target_runs_the_noisy_side_longer() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan("runs: {min: 3, max: 8, target_mde: 0.05}\n");
    let script = Script {
        // Variant a (the baseline) is steady at CV 1 %; b alternates 80 / 120 (CV ~20 %),
        // so a 5 % effect against it never becomes detectable and b runs to max.
        value: Some(by_variants_run(|argv, k| {
            if argv.contains(&"ticket".to_string()) {
                if k % 2 == 1 { 80.0 } else { 120.0 }
            } else {
                [101.0, 100.0, 99.0][k as usize % 3]
            }
        })),
        ..Default::default()
    };
    let o = sweep(&p, script, vec![], dir.path()).await;
    let runs_of = |v: &str| guest0_runs(&o.records, v);
    assert_eq!((runs_of("a"), runs_of("b")), (3, 8), "{}", brief(&o.records));
    assert_eq!(o.progress, o.total, "skipped runs are counted as done");
    let model = stats_model(&o.records);
    let row = &model.workloads[0].comparisons[0].rows[0];
    // The noisy side leaves a 5 % effect undecided: the ratio's interval reaches past ±5 %.
    let e = row.effect.as_ref().unwrap();
    assert!(e.low < 0.95 || e.high > 1.05, "{e:?}");
    assert_ne!(row.conclusion, crate::stats::cells::Conclusion::Equivalent);
}

/// A crash (or full disk) at any byte of the last append leaves a journal that a resume
/// continues: the torn line is cut off, the attempt it belonged to does not count and is made
/// again, nothing finished is redone, and every run ends with exactly one valid result.
#[tokio::test]
async fn a_journal_torn_at_every_byte_of_its_last_append_resumes_to_one_result_per_run() {
    let full = tempfile::tempdir().unwrap();
    let p = plan("");
    let o = sweep(&p, Script::default(), vec![], full.path()).await;
    each_run_counted_once(&o.records, 3, 2);
    let bytes = std::fs::read(full.path().join(JOURNAL_FILE)).unwrap();
    // The last append is one attempt: both guests' lines.
    let lines: Vec<usize> = bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .map(|(i, _)| i + 1)
        .collect();
    let last_append = lines[lines.len() - 3];
    let header = serde_json::to_string(&Entry::Sweep(Box::new(crate::testing::header()))).unwrap() + "\n";
    // On tmpfs where there is one: ~1600 resumes, each fsync'ing its appends.
    let shm = std::path::Path::new("/dev/shm");
    for cut in last_append + 1..bytes.len() {
        let dir = if shm.is_dir() {
            tempfile::tempdir_in(shm)
        } else {
            tempfile::tempdir()
        }
        .unwrap();
        let path = dir.path().join(JOURNAL_FILE);
        let mut torn = header.clone().into_bytes();
        torn.extend_from_slice(&bytes[..cut]);
        std::fs::write(&path, &torn).unwrap();
        let before = crate::journal::Journal::read(dir.path()).unwrap().runs;
        let done_before: BTreeSet<(String, u32)> = settle(&before)
            .counted(&before)
            .map(|r| (r.variant.clone(), r.run))
            .collect();
        assert_eq!(done_before.len(), 5, "cut at {cut}: all but the last run count");
        let exec = MockExecutor::new(METRIC, Script::default());
        let progress = Progress::new(p.measured_runs(), true);
        let journal = JournalWriter::open(dir.path()).unwrap();
        run(&p, exec, journal, before.clone(), &progress).await.unwrap();
        let after = crate::journal::Journal::read(dir.path()).unwrap().runs;
        let new = &after[before.len()..];
        assert!(
            new.iter()
                .all(|r| !done_before.contains(&(r.variant.clone(), r.run))),
            "cut at {cut}: the resume redid a finished run:\n{}",
            brief(new)
        );
        assert_eq!(new.len(), 2, "cut at {cut}: only the torn attempt is made again");
        each_run_counted_once(&after, 3, 2);
        assert_eq!(progress.position(), p.measured_runs());
    }
}

/// A sweep whose guests never came up at one level ends with slots that have no valid result
/// (exit status 4); a resume that brings them up leaves none, and then there is no work left.
#[tokio::test]
async fn slots_without_a_result_are_counted_and_a_resume_fills_them() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan("");
    let script = Script {
        failing_bring_ups: BTreeSet::from([1, 2]),
        ..Default::default()
    };
    let o = sweep(&p, script, vec![], dir.path()).await;
    assert_eq!(slots_without_result(&p, &o.records), 6, "{}", brief(&o.records));
    assert!(work_left(&p, &o.records) > 0);
    let again = tempfile::tempdir().unwrap();
    let r = sweep(&p, Script::default(), o.records.clone(), again.path()).await;
    let mut all = o.records;
    all.extend(r.records);
    assert_eq!(slots_without_result(&p, &all), 0);
    assert_eq!(work_left(&p, &all), 0);
    each_run_counted_once(&all, 3, 2);
}

/// Two hosts share one journal: each host's CV rule judges the cell's valid results pooled over
/// both, so a host whose own results happen to be steady does not stop a cell the other
/// host's results (and the report, which pools them) show is not.
#[tokio::test]
async fn the_cv_rule_of_several_hosts_judges_their_pooled_results() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan("runs: {min: 4, max: 8, target_cv: 0.05}\n");
    let pool = SharedJournal::new(JournalWriter::open(dir.path()).unwrap(), Vec::new());
    let progress = Progress::new(p.measured_runs(), true);
    let host = |index: usize, noisy: bool| {
        let script = Script {
            value: Some(Box::new(move |n, _| {
                if noisy && n % 2 == 0 {
                    50.0
                } else {
                    100.0 + 50.0 * noisy as u8 as f64
                }
            })),
            ..Default::default()
        };
        run_with(
            &p,
            MockExecutor::new(METRIC, script),
            &pool,
            &progress,
            HostShare {
                label: Some(format!("h{index}")),
                index,
                of: 2,
            },
        )
    };
    let (a, b) = futures::join!(host(0, false), host(1, true));
    a.unwrap();
    b.unwrap();
    let records = crate::journal::Journal::read(&{
        let f = dir.path().join(JOURNAL_FILE);
        let body = std::fs::read(&f).unwrap();
        let h = serde_json::to_string(&Entry::Sweep(Box::new(crate::testing::header()))).unwrap();
        std::fs::write(&f, [h.as_bytes(), b"\n", &body].concat()).unwrap();
        f
    })
    .unwrap()
    .runs;
    let runs_on = |v: &str, h: &str| {
        records
            .iter()
            .filter(|r| r.variant == v && r.guest == 0 && r.host.as_deref() == Some(h))
            .count()
    };
    // Pooled, the results vary (100 on one host, 50/150 on the other): both run to max.
    assert_eq!(
        (runs_on("a", "h0"), runs_on("a", "h1")),
        (4, 4),
        "{}",
        brief(&records)
    );
    each_run_counted_once(&records, 8, 2);
    assert_eq!(progress.position(), p.measured_runs());
}

/// The stopping rule decides once per cell, by the pooled results: at the first slot whose
/// earlier slots all have a journaled attempt and whose results meet the rule. A result that
/// comes in later (a slot another host had in flight) does not undo the decision, and a slot
/// still being made elsewhere keeps the later ones running (more runs, never too few).
#[test]
fn a_cells_stopping_rule_decides_once_on_the_pooled_results() {
    let p = plan("runs: {min: 4, max: 12, target_cv: 0.05}\n");
    let (group, cell) = (&p.boots[0], &p.boots[0].cells[0]);
    let rec = |run: u32, guest: u32, value: f64| -> RunRecord {
        serde_json::from_value(serde_json::json!({
            "variant": cell.variant, "level": 1.0, "workload": cell.workload.id, "run": run,
            "warmup": false, "guest": guest, "guests": 2, "ok": true, "attempt": 1,
            "attempt_records": 2, "metrics": {METRIC: value}, "argv": [], "timings": {},
            "finished_at": "t", "host": if run.is_multiple_of(2) { "h0" } else { "h1" },
            "slot": {"boot": 0, "bring_up": 1, "seq": run, "block": 0},
        }))
        .unwrap()
    };
    let slots = |values: &[(u32, f64)]| -> Vec<RunRecord> {
        values
            .iter()
            .flat_map(|&(r, v)| [rec(r, 0, v), rec(r, 1, v)])
            .collect()
    };
    let next = |records: &[RunRecord], run: u32| {
        let settled = settle(records);
        match next_run(&settled, records, &p, group, cell, run, false) {
            Next::Done => "done",
            Next::Enough => "enough",
            Next::Run => "run",
        }
    };
    // Slots 0-3 steady; slot 4, made by the other host while slot 3 was in flight, is far off.
    let decided = slots(&[(0, 100.0), (1, 101.0), (2, 99.0), (3, 100.0), (4, 300.0)]);
    assert_eq!(
        next(&decided, 5),
        "enough",
        "decided at slot 4, not undone by slot 4's result"
    );
    let all: Vec<f64> = (0..5).map(|r| [100.0, 101.0, 99.0, 100.0, 300.0][r]).collect();
    assert!(
        !enough_runs(cell, 5, &all, None),
        "judged on slots 0-4 alone, the rule would run on"
    );
    // A resume agrees: nothing left of this cell; the 12 slots left are the other variant's.
    assert_eq!(work_left(&p, &decided), 12);
    // Slot 3 still being made on the other host: its result could change the verdict.
    let in_flight = slots(&[(0, 100.0), (1, 101.0), (2, 99.0), (4, 100.0)]);
    assert_eq!(next(&in_flight, 3), "run");
    assert_eq!(next(&in_flight, 5), "run", "never too few");
    // Noisy slots 0-3: no decision at 4; the rule judges again at each later slot.
    let noisy = slots(&[(0, 50.0), (1, 150.0), (2, 50.0), (3, 150.0)]);
    assert_eq!(next(&noisy, 4), "run");
}

#[tokio::test]
async fn the_sweep_keeps_in_memory_only_what_the_accounting_and_stopping_rules_read() {
    let plan = plan("");
    let dir = tempfile::tempdir().unwrap();
    let exec = MockExecutor::new(
        METRIC,
        Script {
            realistic_host_cpus: Some(2),
            ..Default::default()
        },
    );
    let progress = Progress::new(plan.measured_runs(), true);
    let journal = SharedJournal::new(JournalWriter::open(dir.path()).unwrap(), Vec::new());
    run_with(&plan, exec, &journal, &progress, HostShare::only())
        .await
        .unwrap();
    let kept = journal.into_inner().unwrap().records;
    let journaled = read_records(dir.path());
    assert_eq!(kept.len(), journaled.len());
    assert!(
        journaled
            .iter()
            .any(|r| r.metrics.len() > 1 && !r.extra.is_empty())
    );
    for (k, j) in kept.iter().zip(&journaled) {
        // The same record, in journal order, without its telemetry and payload report, and of
        // its metrics only the headline one.
        assert_eq!(
            (k.variant.as_str(), k.run, k.guest, k.attempt),
            (j.variant.as_str(), j.run, j.guest, j.attempt)
        );
        assert!(k.extra.is_empty() && k.payload.is_none() && k.argv.is_empty());
        assert_eq!(
            k.metrics.keys().collect::<Vec<_>>(),
            j.metrics.keys().filter(|m| *m == METRIC).collect::<Vec<_>>()
        );
        assert_eq!(k.metrics.get(METRIC), j.metrics.get(METRIC));
    }
}

// ---------------------------------------------------------------- the design (issue 33)

/// Variant a (the baseline) and b, whose guests have another kernel command line: two boot
/// groups at the level, so each variant's runs are made in blocks on fresh bring-ups. 2 guests,
/// the default warm-ups unless `extra` names some.
fn own_guests(extra: &str) -> Plan {
    let s: Scenario = yaml_serde::from_str(&format!(
        "name: t\nhost: {{cpus: 2}}\nlevels: [1.0]\nvariants:\n  - {{name: a, args: {{algo: tas}}}}\n  - {{name: b, cmdline: mitigations=off, args: {{algo: tas}}}}\nworkloads:\n  - command: lock\n    metric: {METRIC}\n    slice_ms: 0\n    args: {{threads: 1}}\ntimeouts: {{retries: 1}}\n{extra}"
    ))
    .unwrap();
    Plan::build(&s, &[0, 1], 1).unwrap()
}

/// A guest set as [`guest_sets`] names it: (variant, bring-up, block).
type SetId = (String, u32, u32);

/// Each guest set of `records` in the order the sets first appear, with its guest-0 records:
/// (run, warm-up).
fn guest_sets(records: &[RunRecord]) -> Vec<(SetId, Vec<(u32, bool)>)> {
    let mut sets: Vec<(SetId, Vec<(u32, bool)>)> = Vec::new();
    for r in records.iter().filter(|r| r.guest == 0) {
        let slot = r.slot;
        let set = (r.variant.clone(), slot.bring_up, slot.block);
        match sets.iter_mut().find(|(s, _)| *s == set) {
            Some((_, runs)) => runs.push((r.run, r.warmup)),
            None => sets.push((set, vec![(r.run, r.warmup)])),
        }
    }
    sets
}

#[tokio::test]
async fn own_guest_variants_alternate_fresh_bring_ups_block_by_block() {
    let dir = tempfile::tempdir().unwrap();
    let p = own_guests("runs: 6\nschedule: {runs_per_bring_up: 2}\n");
    let o = sweep(&p, Script::default(), vec![], dir.path()).await;
    // Block k of both groups before block k+1 of either, the first group rotating: A B, B A, A B.
    let order: Vec<String> = o.calls.bring_ups.iter().map(|b| b.join("+")).collect();
    assert_eq!(order, ["a", "b", "b", "a", "a", "b"]);
    // Each bring-up: its warm-up round (the default; one cell, so one run), then its block's
    // two runs, then down.
    let w = |run| (run, true);
    let m = |run| (run, false);
    let want = [
        (("a", 1, 0), vec![w(0), m(0), m(1)]),
        (("b", 1, 0), vec![w(0), m(0), m(1)]),
        (("b", 2, 1), vec![w(0), m(2), m(3)]),
        (("a", 2, 1), vec![w(0), m(2), m(3)]),
        (("a", 3, 2), vec![w(0), m(4), m(5)]),
        (("b", 3, 2), vec![w(0), m(4), m(5)]),
    ]
    .map(|((v, bring_up, block), runs)| ((v.to_string(), bring_up, block), runs));
    assert_eq!(guest_sets(&o.records), want, "{}", brief(&o.records));
    // Every record of a set (both guests, warm-up included) names the set's block.
    for r in &o.records {
        let s = r.slot;
        let same_set = o
            .records
            .iter()
            .filter(|q| q.variant == r.variant && q.slot.bring_up == s.bring_up);
        assert!(same_set.clone().all(|q| q.slot.block == s.block));
        if !r.warmup {
            assert_eq!(s.block, r.run / 2, "{r:?}");
        }
    }
    each_run_counted_once(&o.records, 6, 2);
    assert_eq!(
        (
            o.totals.groups,
            o.totals.boots,
            o.totals.warm_ups,
            o.totals.runs_ok
        ),
        (2, 6, 6, 12)
    );
    // Torn down after every block, and once more at the end.
    assert_eq!(o.calls.shut_downs, 7);
    assert_eq!(o.progress, o.total);
    assert_eq!(
        p.total_runs(),
        12 + 6,
        "the plan counts a warm-up round per bring-up"
    );
}

#[tokio::test]
async fn a_mixed_level_is_blocked_and_the_levels_take_turns_block_by_block() {
    // Variants a and b share guests, c has its own: both groups are blocked; b and a pair by
    // round inside their group, c pairs with a block by block.
    let s: Scenario = yaml_serde::from_str(&format!(
        "name: t\nhost: {{cpus: 2}}\nlevels: [0.5, 1.0]\nvariants:\n  - {{name: a, args: {{algo: tas}}}}\n  - {{name: b, args: {{algo: ticket}}}}\n  - {{name: c, cmdline: mitigations=off, args: {{algo: tas}}}}\nworkloads:\n  - command: lock\n    metric: {METRIC}\n    slice_ms: 0\n    args: {{threads: 1}}\nruns: 2\nwarmup_runs: 0\n"
    ))
    .unwrap();
    let p = Plan::build(&s, &[0, 1], 1).unwrap();
    assert_eq!(p.level_boots, [0..2, 2..4]);
    assert!(p.boots.iter().all(|g| g.runs_per_block == Some(1)));
    let dir = tempfile::tempdir().unwrap();
    let o = sweep(&p, Script::default(), vec![], dir.path()).await;
    // Block 0 of both levels (0.5x: a+b c, 1x: a+b c), then block 1 of both in the mirrored
    // level order (1x: c a+b, 0.5x: c a+b), the groups rotating within each level's block.
    let order: Vec<String> = o.calls.bring_ups.iter().map(|b| b.join("+")).collect();
    assert_eq!(order, ["a+b", "c", "a+b", "c", "c", "a+b", "c", "a+b"]);
    let levels: Vec<f64> = bring_ups_in_order(&o.records).iter().map(|s| s.level).collect();
    assert_eq!(levels, [0.5, 0.5, 1.0, 1.0, 1.0, 1.0, 0.5, 0.5]);
    // Inside the shared group each block is one round, in the design's order: b a (round 0
    // starts at the variant after the baseline), then a b.
    let shared: Vec<(String, u32)> = o
        .records
        .iter()
        .filter(|r| r.guest == 0 && r.variant != "c" && r.level == 0.5)
        .map(|r| (r.variant.clone(), r.run))
        .collect();
    assert_eq!(
        shared,
        [("b", 0), ("a", 0), ("a", 1), ("b", 1)].map(|(v, r)| (v.to_string(), r))
    );
    assert!(o.records.iter().all(|r| r.slot.block == r.run));
    each_run_counted_once_at(&o.records, &["a", "b", "c"], &[0.5, 1.0], 2);
}

/// One guest set of a sweep and what it made.
struct BringUp {
    level: f64,
    boot: u32,
    bring_up: u32,
    block: u32,
    /// Its guest-0 records: (variant, run, warm-up).
    runs: Vec<(String, u32, bool)>,
}

impl BringUp {
    /// (level, bring-up of its group, block).
    fn placed(&self) -> (f64, u32, u32) {
        (self.level, self.bring_up, self.block)
    }

    /// (warm-ups, measured runs) made on it.
    fn made(&self) -> (usize, usize) {
        let warm = self.runs.iter().filter(|r| r.2).count();
        (warm, self.runs.len() - warm)
    }
}

/// Each guest set of `records` in the order the sets first appear.
fn bring_ups_in_order(records: &[RunRecord]) -> Vec<BringUp> {
    let mut sets: Vec<BringUp> = Vec::new();
    for r in records.iter().filter(|r| r.guest == 0) {
        let s = r.slot;
        let run = (r.variant.clone(), r.run, r.warmup);
        match sets
            .iter_mut()
            .find(|x| (x.boot, x.bring_up) == (s.boot, s.bring_up))
        {
            Some(set) => {
                assert_eq!(set.block, s.block, "a guest set makes one block");
                set.runs.push(run);
            }
            None => sets.push(BringUp {
                level: r.level,
                boot: s.boot,
                bring_up: s.bring_up,
                block: s.block,
                runs: vec![run],
            }),
        }
    }
    sets
}

/// Every measured run of `variants` at `levels` counted exactly once (guest 0).
fn each_run_counted_once_at(records: &[RunRecord], variants: &[&str], levels: &[f64], runs: u32) {
    let s = settle(records);
    for &level in levels {
        for &variant in variants {
            let cell = crate::journal::accounting::CellKey {
                variant,
                level,
                workload: "lock",
            };
            let n = s
                .samples(
                    records,
                    &cell,
                    METRIC,
                    0..runs,
                    crate::vocabulary::HeadlineFrom::PrimaryGuest,
                )
                .len();
            assert_eq!(n, runs as usize, "{variant} at {level}x: {}", brief(records));
        }
    }
}

/// The reports' model of a journal holding `records` of a sweep of `plan`.
fn report_model(records: &[RunRecord], plan: &Plan) -> crate::stats::cells::Model {
    let workloads: serde_json::Map<String, serde_json::Value> = plan
        .workloads
        .iter()
        .map(|w| {
            let info = serde_json::json!({"command": w.command, "metric": w.metric, "better": "higher"});
            (w.id.clone(), info)
        })
        .collect();
    let header: crate::journal::SweepHeader = crate::testing::header_with(serde_json::json!({
        "scenario": "t", "scenario_sha256": "00", "baseline": plan.baseline, "variants": plan.variants,
        "levels": plan.levels, "workloads": workloads, "backend": "mock", "accel": "tcg",
        "host_cpus": [0, 1], "guest_vcpus": 1, "started_at": "t", "ocrig_version": "0",
    }));
    let journal = crate::journal::Journal {
        header,
        runs: records.to_vec(),
    };
    crate::testing::build(&journal, 0.05, None)
}

/// Variants a and b sharing guests at 1x and 2x, 4 runs, the default warm-up round.
fn shared_levels(extra: &str) -> Plan {
    let s: Scenario = yaml_serde::from_str(&format!(
        "name: t\nhost: {{cpus: 2}}\nlevels: [1.0, 2.0]\nvariants:\n  - {{name: a, args: {{algo: tas}}}}\n  - {{name: b, args: {{algo: ticket}}}}\nworkloads:\n  - command: lock\n    metric: {METRIC}\n    slice_ms: 0\n    args: {{threads: 1}}\nruns: 4\n{extra}"
    ))
    .unwrap();
    Plan::build(&s, &[0, 1], 1).unwrap()
}

/// Two levels of one shared boot group each: by default two bring-ups a level, the rounds
/// split between them, each block on freshly brought-up (and warmed) guests torn down after
/// it, the levels taking turns in a mirrored order (1x 2x 2x 1x) so retention is replicated
/// over bring-ups and an even drift of the host weighs both levels alike.
#[tokio::test]
async fn a_shared_level_makes_its_rounds_on_two_bring_ups_the_levels_mirrored() {
    let shared = shared_levels;
    // Values that vary from run to run, so every ratio has an interval.
    let varying = || Script {
        value: Some(Box::new(|call, _| 100.0 + f64::from(call % 5))),
        ..Default::default()
    };
    let p = shared("");
    assert!(
        p.boots
            .iter()
            .all(|g| g.runs_per_block.is_none() && g.blocks() == 2)
    );
    let dir = tempfile::tempdir().unwrap();
    let o = sweep(&p, varying(), vec![], dir.path()).await;
    let sets = bring_ups_in_order(&o.records);
    let placed: Vec<(f64, u32, u32)> = sets.iter().map(BringUp::placed).collect();
    // (level, bring-up of its group, block): 1x 2x, then 2x 1x, each block a fresh bring-up.
    assert_eq!(placed, [(1.0, 1, 0), (2.0, 1, 0), (2.0, 2, 1), (1.0, 2, 1)]);
    // Each bring-up: its warm-up round (both cells), then its block's two rounds.
    for BringUp {
        level, block, runs, ..
    } in &sets
    {
        let (warm, measured): (Vec<_>, Vec<_>) = runs.iter().partition(|r| r.2);
        assert_eq!(warm.len(), 2, "{level}x block {block}: a warm-up round");
        let rounds: BTreeSet<u32> = measured.iter().map(|r| r.1).collect();
        let want: BTreeSet<u32> = (2 * block..2 * block + 2).collect();
        assert_eq!((measured.len(), rounds), (4, want), "{level}x block {block}");
    }
    each_run_counted_once_at(&o.records, &["a", "b"], &[1.0, 2.0], 4);
    // Four bring-ups, torn down after each block and once more at the end.
    assert_eq!((o.totals.groups, o.totals.boots, o.totals.warm_ups), (2, 4, 8));
    assert_eq!(o.calls.bring_ups.len(), 4);
    assert_eq!(o.calls.shut_downs, 5);
    assert_eq!(o.progress, o.total);
    assert_eq!(p.total_runs(), 16 + 8, "a warm-up round per bring-up");
    // The report's retention is over those bring-ups: 2+2 a level, not within one boot.
    let model = report_model(&o.records, &p);
    let retention = &model.workloads[0].retention;
    assert_eq!(retention.len(), 2, "a and b");
    for r in retention {
        let e = r.rows[0].effect.as_ref().unwrap();
        assert_eq!(e.units_words(), "2+2 bring-ups", "{}", r.variant);
        assert!(!r.rows[0].within_one_boot);
    }
    let verdict = crate::report::verdict::text(&model);
    assert!(
        verdict.contains("retention (ops_per_sec at each level / at 1x): "),
        "{verdict}"
    );

    // Pinned to one bring-up a level: every level to its end in turn, on one bring-up.
    let p = shared("schedule: {bring_ups_per_level: 1}\n");
    assert!(p.boots.iter().all(|g| g.blocks() == 1));
    let dir = tempfile::tempdir().unwrap();
    let o = sweep(&p, varying(), vec![], dir.path()).await;
    let placed: Vec<(f64, u32, u32)> = bring_ups_in_order(&o.records)
        .iter()
        .map(BringUp::placed)
        .collect();
    assert_eq!(placed, [(1.0, 1, 0), (2.0, 1, 0)], "one bring-up per level");
    let model = report_model(&o.records, &p);
    for r in &model.workloads[0].retention {
        let e = r.rows[0].effect.as_ref().unwrap();
        assert_eq!(e.units_words(), "4+4 runs", "{}", r.variant);
        assert!(r.rows[0].within_one_boot);
    }
    let verdict = crate::report::verdict::text(&model);
    assert!(
        verdict.contains("retention (ops_per_sec at each level / at 1x, within one boot a level): "),
        "{verdict}"
    );
}

/// A sweep of shared levels interrupted in a level's second block resumes there: the blocks
/// already made are not brought up again, the interrupted one is made on a fresh bring-up
/// numbered on from the journal's (so its guest set is told from the interrupted one's, and
/// warmed anew), then the other level's second block, each making only its missing runs.
#[tokio::test]
async fn an_interrupted_sweep_of_shared_levels_resumes_in_its_block_on_a_fresh_bring_up() {
    let dir = tempfile::tempdir().unwrap();
    let p = shared_levels("");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // 1x block 0: calls 1-6 (a warm-up round of 2, rounds 0 and 1); 2x block 0: 7-12; 2x
    // block 1: warm-ups 13-14, round 2's first run 15, its second (16) hangs.
    let script = Script {
        hang_at: Some((16, tx)),
        ..Default::default()
    };
    {
        let exec = MockExecutor::new(METRIC, script);
        let progress = Progress::new(p.measured_runs(), true);
        let journal = JournalWriter::open(dir.path()).unwrap();
        tokio::select! {
            _ = run(&p, exec, journal, vec![], &progress) => panic!("the sweep should hang"),
            _ = rx.recv() => {}
        }
    }
    let before = read_records(dir.path());
    assert_eq!(work_left(&p, &before), 7, "{}", brief(&before));

    let again = tempfile::tempdir().unwrap();
    let o = sweep(&p, Script::default(), before.clone(), again.path()).await;
    let sets = bring_ups_in_order(&o.records);
    let placed: Vec<(f64, u32, u32)> = sets.iter().map(BringUp::placed).collect();
    assert_eq!(placed, [(2.0, 3, 1), (1.0, 2, 1)], "{}", brief(&o.records));
    assert_eq!(
        sets[0].made(),
        (2, 3),
        "warmed, round 2's missing run and round 3"
    );
    assert_eq!(sets[1].made(), (2, 4), "warmed, rounds 2 and 3");
    assert!(o.records.iter().all(|r| r.attempt == 1));
    let mut all = before;
    all.extend(o.records);
    each_run_counted_once_at(&all, &["a", "b"], &[1.0, 2.0], 4);
    assert_eq!(work_left(&p, &all), 0);
    assert_eq!(o.progress, o.total, "resumed runs counted once in the progress");
}

/// Guest 0's records of `o` in journal order, each as `[w]<variant><threads>` (`w`: a warm-up).
fn order_of(records: &[RunRecord]) -> Vec<String> {
    records
        .iter()
        .filter(|r| r.guest == 0)
        .map(|r| {
            let t = r
                .workload
                .trim_start_matches("lock")
                .trim_start_matches("[threads=")
                .trim_end_matches(']');
            format!("{}{}{}", if r.warmup { "w" } else { "" }, r.variant, t)
        })
        .collect()
}

#[tokio::test]
async fn a_shared_boot_warms_a_whole_round_then_runs_the_balanced_order() {
    let dir = tempfile::tempdir().unwrap();
    // Two workloads (threads 1 and 2) of two variants sharing guests, the default warm-up.
    let p = Plan::build(&over_threads_1_and_2(with_default_warm_ups("")), &[0, 1], 1).unwrap();
    assert_eq!(p.schedule.warm_up_rounds, 1);
    let o = sweep(&p, Script::default(), vec![], dir.path()).await;
    // The warm-up round: every cell once, in the design's round before round 0. Then round r
    // runs each workload's variants in row r of the design (for two variants b a, a b, …:
    // round 0 starts at the variant after the baseline); the workloads keep their order.
    assert_eq!(
        order_of(&o.records),
        [
            "wa1", "wb1", "wa2", "wb2", "b1", "a1", "b2", "a2", "a1", "b1", "a2", "b2", "b1", "a1", "b2",
            "a2"
        ]
    );
    assert_eq!((o.totals.boots, o.totals.warm_ups), (1, 4));
    assert_eq!(p.total_runs(), 12 + 4);
}

/// `warmup_runs: N` still says how many rounds: none, or two before the first measured one.
#[tokio::test]
async fn an_explicit_warm_up_count_is_that_many_rounds() {
    for (n, warm) in [(0, vec![]), (2, vec!["wb", "wa", "wa", "wb"])] {
        let dir = tempfile::tempdir().unwrap();
        let p = plan(&format!("warmup_runs: {n}\n"));
        assert_eq!(p.schedule.warm_up_rounds, n);
        let o = sweep(&p, Script::default(), vec![], dir.path()).await;
        let order = order_of(&o.records);
        // Warm-ups 0 and 1 are the design's two rounds before round 0 (a b, b a, then b a).
        let (warm_ups, measured) = order.split_at(warm.len());
        assert_eq!(warm_ups, warm, "{order:?}");
        assert_eq!(measured[..2], ["b", "a"]);
        assert_eq!(o.totals.warm_ups, 2 * n);
        each_run_counted_once(&o.records, 3, 2);
    }
}

/// `s` with its one workload over threads 1 and 2.
fn over_threads_1_and_2(mut s: Scenario) -> Scenario {
    use crate::scenario::model::ArgValue;
    let threads = ArgValue::List(vec![ArgValue::Int(1), ArgValue::Int(2)]);
    s.workloads[0].args.insert("threads".into(), threads);
    s
}

#[tokio::test]
async fn every_fresh_guest_set_gets_a_whole_warm_up_round_before_it_measures() {
    let dir = tempfile::tempdir().unwrap();
    let p = Plan::build(&with_default_warm_ups(""), &[0, 1], 1).unwrap();
    let script = Script {
        // Calls 1 and 2 warm set 1 (a, b); call 4 (run 0 of a, after b's) loses a guest:
        // fresh guests.
        failing_runs: fail(4, 1, "guest 1: connection lost"),
        ..Default::default()
    };
    let o = sweep(&p, script, vec![], dir.path()).await;
    // Set 2 gets its own whole round, b too although b's run 0 is made; then a's run 0 again.
    let warm_ups: Vec<(String, u32)> = o
        .records
        .iter()
        .filter(|r| r.warmup && r.guest == 0)
        .map(|r| (r.variant.clone(), r.slot.bring_up))
        .collect();
    assert_eq!(
        warm_ups,
        [("a", 1), ("b", 1), ("a", 2), ("b", 2)].map(|(v, b)| (v.to_string(), b)),
        "{}",
        brief(&o.records)
    );
    let on_set_2: Vec<(String, u32, bool)> = o
        .records
        .iter()
        .filter(|r| r.slot.bring_up == 2 && r.guest == 0)
        .map(|r| (r.variant.clone(), r.run, r.warmup))
        .take(3)
        .collect();
    assert_eq!(
        on_set_2,
        [("a", 0, true), ("b", 0, true), ("a", 0, false)].map(|(v, r, w)| (v.to_string(), r, w)),
        "no measured run on unwarmed guests"
    );
    each_run_counted_once(&o.records, 3, 2);
    assert_eq!((o.totals.boots, o.totals.warm_ups, o.totals.runs_ok), (2, 4, 6));
}

#[tokio::test]
async fn a_self_check_rejection_is_retried_on_the_same_guests_a_guest_failure_on_fresh_ones() {
    let dir = tempfile::tempdir().unwrap();
    let script = Script {
        // Call 1 (run 0 of b, round 0 starting at the variant after the baseline): the
        // payload's checks reject it. Call 4 (run 1 of a, round 1 starting at a): guest 1
        // times out.
        failing_checks: BTreeMap::from([(1, vec![(0, "calibration drifted 9 %".to_string())])]),
        failing_runs: fail(4, 1, "timed out"),
        ..Default::default()
    };
    let o = sweep(&plan(""), script, vec![], dir.path()).await;
    let attempts = |v: &str, run: u32| -> Vec<(u32, u32, bool)> {
        o.records
            .iter()
            .filter(|r| r.variant == v && r.run == run && r.guest == 0)
            .map(|r| (r.attempt, r.slot.bring_up, r.ok))
            .collect()
    };
    assert_eq!(attempts("b", 0), [(1, 1, false), (2, 1, true)], "same guests");
    assert_eq!(attempts("a", 1), [(1, 1, true), (2, 2, true)], "fresh guests");
    assert!(
        o.records
            .iter()
            .filter(|r| r.variant == "a" && r.run == 1 && r.attempt == 1)
            .all(|r| r.superseded.is_some())
    );
    assert_eq!(o.calls.bring_ups.len(), 2);
    // Taken down after the guest failure, at the group's end and at the sweep's; never after
    // the rejection.
    assert_eq!(o.calls.shut_downs, 3);
    each_run_counted_once(&o.records, 3, 2);
    assert_eq!((o.totals.attempts_failed, o.totals.runs_ok), (2, 6));
}

#[tokio::test]
async fn self_check_rejections_and_guest_failures_have_budgets_of_their_own() {
    let rejected = |calls: &[u32]| -> BTreeMap<u32, Vec<(u32, String)>> {
        calls
            .iter()
            .map(|&c| (c, vec![(0, "calibration drifted 9 %".to_string())]))
            .collect()
    };
    // Four rejections of run 0 of b (round 0 starts at the variant after the baseline) in a
    // row: the first attempt and 3 retries (the default self_check_retries), all on one
    // bring-up; then the slot is given up.
    let dir = tempfile::tempdir().unwrap();
    let script = Script {
        failing_checks: rejected(&[1, 2, 3, 4]),
        ..Default::default()
    };
    let o = sweep(&plan(""), script, vec![], dir.path()).await;
    let b0: Vec<(u32, u32)> = o
        .records
        .iter()
        .filter(|r| r.variant == "b" && r.run == 0 && r.guest == 0)
        .map(|r| (r.attempt, r.slot.bring_up))
        .collect();
    assert_eq!(b0, [(1, 1), (2, 1), (3, 1), (4, 1)]);
    assert!(!settle(&o.records).has_valid_result(&RunKey::new("b", 1.0, "lock", false, 0)));
    assert_eq!(
        (o.totals.runs_failed, o.totals.runs_ok, o.calls.bring_ups.len()),
        (1, 5, 1)
    );
    assert_eq!(o.progress, o.total);
    // Rejected, guest failure, rejected, then ok: within both budgets (retries: 1 for guest
    // failures, 3 for rejections), so run 0 of b counts at attempt 4, on the second bring-up.
    let dir = tempfile::tempdir().unwrap();
    let script = Script {
        failing_checks: rejected(&[1, 3]),
        failing_runs: fail(2, 1, "timed out"),
        ..Default::default()
    };
    let o = sweep(&plan(""), script, vec![], dir.path()).await;
    let valid = settle(&o.records)
        .primary(&o.records, &RunKey::new("b", 1.0, "lock", false, 0))
        .map(|r| (r.attempt, r.slot.bring_up));
    assert_eq!(valid, Some((4, 2)), "{}", brief(&o.records));
    each_run_counted_once(&o.records, 3, 2);
    // A budget of 0 rejections: the first rejection gives the slot up.
    let dir = tempfile::tempdir().unwrap();
    let script = Script {
        failing_checks: rejected(&[1]),
        ..Default::default()
    };
    let mut p = plan("");
    p.timeouts.self_check_retries = 0;
    let o = sweep(&p, script, vec![], dir.path()).await;
    assert_eq!(o.totals.runs_failed, 1, "{}", brief(&o.records));
}

#[tokio::test]
async fn a_warm_up_its_self_checks_reject_is_made_again_on_the_same_guests() {
    let warm_ups_then_runs = |failing: &[u32], retries: u32| {
        let p = {
            let mut p = Plan::build(&with_default_warm_ups(""), &[0, 1], 1).unwrap();
            p.timeouts.self_check_retries = retries;
            p
        };
        let script = Script {
            failing_checks: failing
                .iter()
                .map(|&c| (c, vec![(0, "hold_as_asked: x0.78 the asked".to_string())]))
                .collect(),
            ..Default::default()
        };
        async move {
            let dir = tempfile::tempdir().unwrap();
            let o = sweep(&p, script, vec![], dir.path()).await;
            let shape: Vec<(bool, u32, bool, u32)> = o
                .records
                .iter()
                .filter(|r| r.guest == 0)
                .map(|r| (r.warmup, r.attempt, r.ok, r.slot.bring_up))
                .collect();
            each_run_counted_once(&o.records, 3, 2);
            (shape, o)
        }
    };
    // Fresh guests still speeding up: a's warm-up 0 is refused twice and made again on the
    // same guests until it passes; b's follows, and the first measured run comes after, on
    // that one bring-up.
    let (shape, o) = warm_ups_then_runs(&[1, 2], 3).await;
    assert_eq!(
        shape[..5],
        [
            (true, 1, false, 1),
            (true, 2, false, 1),
            (true, 3, true, 1),
            (true, 1, true, 1),
            (false, 1, true, 1)
        ]
    );
    assert_eq!(
        (
            o.calls.bring_ups.len(),
            o.totals.warm_ups,
            o.totals.runs_ok,
            o.totals.attempts_failed
        ),
        (1, 2, 6, 2)
    );
    // Refused beyond the self-check budget: it still warmed the guests, and the set goes on.
    let (shape, o) = warm_ups_then_runs(&[1, 2], 1).await;
    assert_eq!(
        shape[..4],
        [
            (true, 1, false, 1),
            (true, 2, false, 1),
            (true, 1, true, 1),
            (false, 1, true, 1)
        ]
    );
    assert_eq!(
        (o.calls.bring_ups.len(), o.totals.warm_ups, o.totals.runs_ok),
        (1, 2, 6)
    );
}

#[tokio::test]
async fn an_interrupted_blocked_sweep_resumes_with_exactly_the_missing_runs() {
    let dir = tempfile::tempdir().unwrap();
    let p = own_guests("runs: 4\nschedule: {runs_per_bring_up: 2}\n");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // Block 0: a (calls 1-3: warm-up, runs 0, 1), b (4-6). Block 1 starts with b: warm-up (7),
    // run 2 (8), run 3 (9) hangs.
    let script = Script {
        hang_at: Some((9, tx)),
        ..Default::default()
    };
    {
        let exec = MockExecutor::new(METRIC, script);
        let progress = Progress::new(p.measured_runs(), true);
        let journal = JournalWriter::open(dir.path()).unwrap();
        tokio::select! {
            _ = run(&p, exec, journal, vec![], &progress) => panic!("the sweep should hang"),
            _ = rx.recv() => {}
        }
    }
    let before = read_records(dir.path());
    let done = |records: &[RunRecord]| -> BTreeSet<(String, u32)> {
        settle(records)
            .counted(records)
            .filter(|r| !r.warmup)
            .map(|r| (r.variant.clone(), r.run))
            .collect()
    };
    let done_before = done(&before);
    assert_eq!(done_before.len(), 5, "{}", brief(&before));
    assert_eq!(work_left(&p, &before), 3);

    let again = tempfile::tempdir().unwrap();
    let o = sweep(&p, Script::default(), before.clone(), again.path()).await;
    // Block 1 again, in its order (b, then a), each on a fresh bring-up numbered on from the
    // journal's (b had sets 1 and 2, a set 1), each warmed, making only the missing runs.
    let order: Vec<String> = o.calls.bring_ups.iter().map(|b| b.join("+")).collect();
    assert_eq!(order, ["b", "a"]);
    let want = [
        (("b", 3, 1), vec![(0, true), (3, false)]),
        (("a", 2, 1), vec![(0, true), (2, false), (3, false)]),
    ]
    .map(|((v, bring_up, block), runs)| ((v.to_string(), bring_up, block), runs));
    assert_eq!(guest_sets(&o.records), want, "{}", brief(&o.records));
    assert!(o.records.iter().all(|r| r.attempt == 1));
    let mut all = before;
    all.extend(o.records);
    each_run_counted_once(&all, 4, 2);
    assert_eq!(work_left(&p, &all), 0);
    assert_eq!(o.progress, o.total, "resumed runs counted once in the progress");
}

#[tokio::test]
async fn two_hosts_are_dealt_whole_blocks_so_each_pair_is_made_on_one_host() {
    let dir = tempfile::tempdir().unwrap();
    let p = own_guests("runs: 4\nschedule: {runs_per_bring_up: 2}\n");
    let pool = SharedJournal::new(JournalWriter::open(dir.path()).unwrap(), Vec::new());
    let progress = Progress::new(p.measured_runs(), true);
    let host = |index: usize| {
        let exec = MockExecutor::new(
            METRIC,
            Script {
                interleave: true,
                ..Default::default()
            },
        );
        let calls = exec.calls.clone();
        let share = HostShare {
            label: Some(format!("h{index}")),
            index,
            of: 2,
        };
        (run_with(&p, exec, &pool, &progress, share), calls)
    };
    let ((h0, calls0), (h1, calls1)) = (host(0), host(1));
    let (a, b) = futures::join!(h0, h1);
    a.unwrap();
    b.unwrap();
    let records = pool.into_inner().unwrap().records;
    for r in &records {
        let block = r.slot.block;
        assert_eq!(r.host, Some(format!("h{}", block % 2)), "{r:?}");
    }
    // Each host brought up each group once: its block of each.
    assert_eq!(calls0.lock().unwrap().bring_ups.len(), 2);
    assert_eq!(calls1.lock().unwrap().bring_ups.len(), 2);
    each_run_counted_once(&records, 4, 2);
    assert_eq!(progress.position(), p.measured_runs());
}

/// Over two hosts a level's shared group is dealt by round, as with one bring-up a level:
/// each host makes its rounds of each block on a bring-up of its own, so every host's rounds
/// of a level are spread over two bring-ups and each round's pair is made on one host.
#[tokio::test]
async fn two_hosts_make_their_rounds_of_each_shared_block_on_bring_ups_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let p = shared_levels("warmup_runs: 0\n");
    let pool = SharedJournal::new(JournalWriter::open(dir.path()).unwrap(), Vec::new());
    let progress = Progress::new(p.measured_runs(), true);
    let host = |index: usize| {
        let script = Script {
            interleave: true,
            ..Default::default()
        };
        let exec = MockExecutor::new(METRIC, script);
        let calls = exec.calls.clone();
        let share = HostShare {
            label: Some(format!("h{index}")),
            index,
            of: 2,
        };
        (run_with(&p, exec, &pool, &progress, share), calls)
    };
    let ((h0, calls0), (h1, calls1)) = (host(0), host(1));
    let (a, b) = futures::join!(h0, h1);
    a.unwrap();
    b.unwrap();
    let records = pool.into_inner().unwrap().records;
    for r in &records {
        assert_eq!(r.host, Some(format!("h{}", r.run % 2)), "{r:?}");
        assert_eq!(r.slot.block, r.run / 2, "{r:?}");
    }
    // Each host: two bring-ups a level, one a block.
    assert_eq!(calls0.lock().unwrap().bring_ups.len(), 4);
    assert_eq!(calls1.lock().unwrap().bring_ups.len(), 4);
    each_run_counted_once_at(&records, &["a", "b"], &[1.0, 2.0], 4);
    assert_eq!(progress.position(), p.measured_runs());
}

/// In a blocked group a stopping rule is judged at a block's end only, on the blocks' values
/// (each block's geometric mean), so every block is made whole and keeps its pair.
#[test]
fn a_stopping_rule_in_a_blocked_group_judges_whole_blocks() {
    let p = own_guests("runs: {min: 4, max: 12, target_cv: 0.09}\nschedule: {runs_per_bring_up: 2}\n");
    let (group, cell) = (&p.boots[0], &p.boots[0].cells[0]);
    assert_eq!(group.runs_per_block, Some(2));
    let rec = |run: u32, guest: u32, value: f64| -> RunRecord {
        serde_json::from_value(serde_json::json!({
            "variant": cell.variant, "level": 1.0, "workload": cell.workload.id, "run": run,
            "warmup": false, "guest": guest, "guests": 2, "ok": true, "attempt": 1,
            "attempt_records": 2, "metrics": {METRIC: value}, "argv": [], "timings": {},
            "finished_at": "t", "slot": {"boot": 0, "bring_up": run / 2 + 1, "seq": run % 2, "block": run / 2},
        }))
        .unwrap()
    };
    let slots = |values: &[f64]| -> Vec<RunRecord> {
        values
            .iter()
            .enumerate()
            .flat_map(|(r, &v)| [rec(r as u32, 0, v), rec(r as u32, 1, v)])
            .collect()
    };
    let next = |records: &[RunRecord], run: u32| {
        let settled = settle(records);
        match next_run(&settled, records, &p, group, cell, run, false) {
            Next::Done => "done",
            Next::Enough => "enough",
            Next::Run => "run",
        }
    };
    let block = |v: &[f64]| crate::sweep::stopping::block_value(v).unwrap();
    // Blocks (50, 150) and (100, 100): CV of their values above 9 % at slot 4.
    assert!(!crate::stats::summary::cv_reached(
        &[block(&[50.0, 150.0]), 100.0],
        0.09
    ));
    // Judged at slot 5 the values would be enough; slot 5 is inside block 2, so no decision.
    assert!(crate::stats::summary::cv_reached(
        &[block(&[50.0, 150.0]), 100.0, 100.0],
        0.09
    ));
    let four_and_one = slots(&[50.0, 150.0, 100.0, 100.0, 100.0]);
    assert_eq!(next(&four_and_one, 5), "run", "block 2 is made whole");
    // Block 2 whole: decided at its end.
    let three_blocks = slots(&[50.0, 150.0, 100.0, 100.0, 100.0, 100.0]);
    assert_eq!(next(&three_blocks, 6), "enough");
    // The values are the blocks': within-block spread (90 / 110) is no reason to run on.
    let steady_blocks = slots(&[90.0, 110.0, 110.0, 90.0]);
    assert_eq!(next(&steady_blocks, 4), "enough");
    assert!(!crate::stats::summary::cv_reached(
        &[90.0, 110.0, 110.0, 90.0],
        0.09
    ));
}

/// `runs: {until: concluded}` over variants sharing guests (4 variants, 3 comparisons, looks
/// at 4, 8 and 12 runs, where the order is balanced, so α 0.05 / (3 × 3) per look): b (×1.5)
/// is concluded `differs` at its first look, c (±3 % round by round) `equivalent` at its
/// second look (8 runs), once its interval is narrow enough at that level, d (+3 % ± 5 %)
/// never, so d and the baseline run to max and the report, testing each p × 3 looks,
/// concludes what the rule stopped on.
#[tokio::test]
async fn until_concluded_stops_each_comparison_on_its_conclusion_and_the_baseline_last() {
    let dir = tempfile::tempdir().unwrap();
    let s: Scenario = yaml_serde::from_str(&format!(
        "name: t\nhost: {{cpus: 2}}\nlevels: [1.0]\nvariants:\n  - {{name: a, args: {{algo: tas}}}}\n  - {{name: b, args: {{algo: ticket}}}}\n  - {{name: c, args: {{algo: mcs}}}}\n  - {{name: d, args: {{algo: clh}}}}\nworkloads:\n  - command: lock\n    metric: {METRIC}\n    slice_ms: 0\n    args: {{threads: 1}}\ntimeouts: {{retries: 1}}\nwarmup_runs: 0\nruns: {{until: concluded, min: 3, max: 12}}\n"
    ))
    .unwrap();
    let p = Plan::build(&s, &[0, 1], 1).unwrap();
    assert_eq!(p.looks, Some(3));
    let base = |k: u32| [100.0, 103.0, 97.0, 101.0][k as usize % 4];
    let script = Script {
        value: Some(by_variants_run(move |argv, k| {
            let algo = &argv[argv.iter().position(|a| a == "--algo").unwrap() + 1];
            match algo.as_str() {
                "ticket" => 1.5 * base(k) * [1.0, 1.01, 0.99][k as usize % 3],
                "mcs" => base(k) * [1.03, 0.97][k as usize % 2],
                "clh" => base(k) * [1.08, 0.98][k as usize % 2],
                _ => base(k),
            }
        })),
        ..Default::default()
    };
    let o = sweep(&p, script, vec![], dir.path()).await;
    let runs_of = |v: &str| guest0_runs(&o.records, v);
    let counts = ["a", "b", "c", "d"].map(runs_of);
    assert_eq!(
        counts[1],
        4,
        "b concluded at the first look: {}",
        brief(&o.records)
    );
    assert_eq!(counts[2], 8, "c stops at a look: {counts:?}");
    assert_eq!((counts[0], counts[3]), (12, 12), "a and d: {counts:?}");
    assert_eq!(o.progress, o.total, "skipped runs are counted as done");
    // The report, told the looks, concludes b and c and leaves d open.
    let model = stats_model_of(&o.records, &["a", "b", "c", "d"], Some(3));
    assert_eq!((model.family, model.looks), (3, 3));
    let conclusion = |v: &str| {
        let c = model.workloads[0]
            .comparisons
            .iter()
            .find(|c| c.variant == v)
            .unwrap();
        (c.rows[0].conclusion, c.rows[0].effect.clone().unwrap())
    };
    use crate::stats::cells::Conclusion;
    let (b, eb) = conclusion("b");
    assert_eq!(b, Conclusion::Differs, "{eb:?}");
    assert!((eb.ratio - 1.5).abs() < 0.01, "{eb:?}");
    let (c, ec) = conclusion("c");
    assert_eq!(c, Conclusion::Equivalent, "{ec:?}");
    let (d, ed) = conclusion("d");
    assert_eq!(d, Conclusion::NotConcluded, "{ed:?}");
    let rule = p.boots[0].cells[0].concluded.unwrap();
    assert!((rule.alpha - 0.05 / 9.0).abs() < 1e-12);
}

/// The rule over variants with guests of their own judges whole blocks (bring-up pairs, the
/// geometric mean of each block's runs) and stops both sides at the same block's end once the
/// one comparison is concluded: b is ×1.3 with a spread of about 1 % from block to block, and
/// the first look (3 runs, α 0.05 / 4) waits for its block's end at 4 runs, where 2 blocks
/// (df 1) conclude it.
#[tokio::test]
async fn until_concluded_with_guests_of_their_own_stops_at_a_blocks_end() {
    let dir = tempfile::tempdir().unwrap();
    let s: Scenario = yaml_serde::from_str(&format!(
        "name: t\nhost: {{cpus: 2}}\nlevels: [1.0]\nvariants:\n  - {{name: a, args: {{algo: tas}}}}\n  - {{name: b, cmdline: mitigations=off, args: {{algo: ticket}}}}\nworkloads:\n  - command: lock\n    metric: {METRIC}\n    slice_ms: 0\n    args: {{threads: 1}}\ntimeouts: {{retries: 1}}\nwarmup_runs: 0\nruns: {{until: concluded, min: 3, max: 12}}\nschedule: {{runs_per_bring_up: 2}}\n"
    ))
    .unwrap();
    let p = Plan::build(&s, &[0, 1], 1).unwrap();
    assert_eq!((p.boots.len(), p.looks), (2, Some(4)));
    let script = Script {
        value: Some(by_variants_run(|argv, k| {
            let noise = [1.0, 1.02, 0.99, 1.01, 1.0, 0.98, 1.01, 1.0, 0.99, 1.02, 1.0, 1.01][k as usize % 12];
            if argv.contains(&"ticket".to_string()) {
                130.0 * noise * if k % 4 < 2 { 1.005 } else { 0.995 }
            } else {
                100.0 * noise
            }
        })),
        ..Default::default()
    };
    let o = sweep(&p, script, vec![], dir.path()).await;
    let runs_of = |v: &str| guest0_runs(&o.records, v);
    assert_eq!((runs_of("a"), runs_of("b")), (4, 4), "{}", brief(&o.records));
    assert_eq!(o.calls.bring_ups.len(), 4, "two bring-ups a side");
    assert_eq!(o.progress, o.total);
}

// ---------------------------------------------------------------- a fair start (issue 47, 4)

const ALGOS: [&str; 10] = [
    "tas",
    "ticket",
    "mcs",
    "clh",
    "ttas",
    "pticket",
    "qspinlock",
    "futex",
    "pthread",
    "spin_park",
];

/// `k` variants v0..v(k-1) sharing guests (v0 the baseline), one lock workload, at `levels`;
/// no warm-ups unless `extra` names some.
fn shared_variants(k: usize, levels: &str, extra: &str) -> Plan {
    let variants: String = (0..k)
        .map(|v| format!("  - {{name: v{v}, args: {{algo: {}}}}}\n", ALGOS[v]))
        .collect();
    let warm_ups = if extra.contains("warmup_runs:") {
        ""
    } else {
        "warmup_runs: 0\n"
    };
    let s: Scenario = yaml_serde::from_str(&format!(
        "name: t\nhost: {{cpus: 2}}\nlevels: {levels}\nvariants:\n{variants}workloads:\n  - command: lock\n    metric: {METRIC}\n    slice_ms: 0\n    args: {{threads: 1}}\ntimeouts: {{retries: 1}}\n{warm_ups}{extra}"
    ))
    .unwrap();
    Plan::build(&s, &[0, 1], 1).unwrap()
}

/// Values no comparison concludes on: ±30 % from run to run, each variant in its own phase.
fn never_concluded() -> crate::executor::mock::ValueFn {
    by_variants_run(|argv, k| {
        let algo = &argv[argv.iter().position(|a| a == "--algo").unwrap() + 1];
        let v = ALGOS.iter().position(|a| a == algo).unwrap();
        100.0 * [1.3, 0.7, 1.2, 0.8, 1.1, 0.9][(k as usize + 2 * v) % 6]
    })
}

/// Per level, the variant of each measured round's first run (guest 0, journal order).
fn firsts(records: &[RunRecord]) -> BTreeMap<u64, Vec<String>> {
    let mut firsts: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for r in records.iter().filter(|r| r.guest == 0 && !r.warmup) {
        let level = firsts.entry(r.level.to_bits()).or_default();
        if level.len() == r.run as usize {
            level.push(r.variant.clone());
        }
    }
    firsts
}

/// The promise the stopping rule relies on: at every look of `runs: {until: concluded}` each
/// variant sharing the guests has run first in a round equally often (±0), for an even and an
/// odd number of variants; the looks are where `min` and `max` allow it.
#[tokio::test]
async fn at_every_look_each_variant_has_been_first_equally_often() {
    for (k, looks) in [
        (2, vec![4, 6, 10, 12]),
        (3, vec![3, 6, 9, 12]),
        (4, vec![4, 8, 12]),
    ] {
        let p = shared_variants(k, "[1.0]", "runs: {until: concluded, min: 3, max: 12}\n");
        let every = crate::sweep::order::balanced_every(k, p.schedule.order);
        assert_eq!(
            crate::sweep::looks::look_points(3, 12, every),
            looks,
            "{k} variants"
        );
        assert_eq!(p.looks, Some(looks.len() as u32));
        let dir = tempfile::tempdir().unwrap();
        let script = Script {
            value: Some(never_concluded()),
            ..Default::default()
        };
        let o = sweep(&p, script, vec![], dir.path()).await;
        let firsts = &firsts(&o.records)[&1.0f64.to_bits()];
        assert_eq!(firsts.len(), 12, "nothing concluded: {firsts:?}");
        for &look in &looks {
            let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
            for v in &firsts[..look as usize] {
                *counts.entry(v).or_default() += 1;
            }
            assert_eq!(counts.len(), k, "{k} variants, look {look}: {counts:?}");
            assert!(
                counts.values().all(|&n| n == look / k as u32),
                "{k} variants, look {look}: {counts:?}"
            );
        }
    }
}

/// The baseline does not take the first measured run of a fresh guest set's group more than
/// 1/k of the time: over the levels (one boot group each) round 0 starts at the variant after
/// the baseline, one further at each level; and its cold start is a warm-up round's, not a
/// measured run's.
#[tokio::test]
async fn the_baseline_starts_round_0_at_no_more_than_1_in_k_boot_groups() {
    let k = 3;
    let levels = "[0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]";
    let p = shared_variants(k, levels, "runs: 1\nwarmup_runs: 1\n");
    assert_eq!(p.boots.len(), 7);
    let dir = tempfile::tempdir().unwrap();
    let o = sweep(&p, Script::default(), vec![], dir.path()).await;
    let starts: Vec<String> = firsts(&o.records).values().map(|f| f[0].clone()).collect();
    assert_eq!(starts, ["v1", "v2", "v0", "v1", "v2", "v0", "v1"]);
    let baseline = starts.iter().filter(|v| *v == "v0").count();
    assert!(baseline * k <= starts.len(), "{starts:?}");
    // Each group's first run on its guests is a warm-up (a whole round of them).
    for level in &p.levels {
        let on_level: Vec<&RunRecord> = o
            .records
            .iter()
            .filter(|r| r.guest == 0 && r.level == *level)
            .collect();
        assert!(on_level[..k].iter().all(|r| r.warmup), "{level}x");
        assert!(on_level[k..].iter().all(|r| !r.warmup), "{level}x");
    }
    // A seeded shuffle: the baseline first in round 0 in about 1 of k seeds.
    let shuffled = shared_variants(k, "[1.0]", "schedule: {order: shuffle}\n");
    let seeds = 3000u64;
    let baseline_first = (0..seeds)
        .filter(|&seed| {
            let d = crate::sweep::order::RoundDesign {
                seed: Some(seed),
                ..shuffled.round_design(0)
            };
            d.measured(0)[0] == 0
        })
        .count() as f64;
    let expected = seeds as f64 / k as f64;
    let sd = (seeds as f64 * (1.0 / k as f64) * (1.0 - 1.0 / k as f64)).sqrt();
    assert!(
        (baseline_first - expected).abs() < 4.0 * sd,
        "{baseline_first} of {seeds}"
    );
}

/// `min`/`max` that give no balanced look still run: with 5 variants and at most 4 rounds the
/// only look is at max (a fixed count: nothing stops early, even a clear difference), tested
/// at α / family; with 3 variants and max 10 the looks are 3, 6, 9 and 10, the last one
/// carrying the round past 9 (one variant first once more).
#[tokio::test]
async fn a_min_and_max_without_a_balanced_look_still_run() {
    let clear_difference = || {
        by_variants_run(|argv, k| {
            let ticket = argv.contains(&"ticket".to_string());
            100.0 * [1.0, 1.01, 0.99][k as usize % 3] * if ticket { 1.5 } else { 1.0 }
        })
    };
    let p = shared_variants(5, "[1.0]", "runs: {until: concluded, min: 3, max: 4}\n");
    assert_eq!(p.looks, Some(1));
    assert!((p.boots[0].cells[0].concluded.unwrap().alpha - 0.05 / 4.0).abs() < 1e-12);
    let dir = tempfile::tempdir().unwrap();
    let script = Script {
        value: Some(clear_difference()),
        ..Default::default()
    };
    let o = sweep(&p, script, vec![], dir.path()).await;
    for v in 0..5 {
        assert_eq!(guest0_runs(&o.records, &format!("v{v}")), 4, "v{v}");
    }
    assert_eq!(o.progress, o.total);
    // 3 variants, max 10: v1 (×1.5) stops at the first look; the others run to 10.
    let p = shared_variants(3, "[1.0]", "runs: {until: concluded, min: 3, max: 10}\n");
    assert_eq!(crate::sweep::looks::look_points(3, 10, 3), [3, 6, 9, 10]);
    assert_eq!(p.looks, Some(4));
    let dir = tempfile::tempdir().unwrap();
    let script = Script {
        value: Some(never_concluded()),
        ..Default::default()
    };
    let o = sweep(&p, script, vec![], dir.path()).await;
    let firsts = &firsts(&o.records)[&1.0f64.to_bits()];
    assert_eq!(firsts.len(), 10);
    let count = |n: usize| {
        let mut c: BTreeMap<&str, usize> = BTreeMap::new();
        for v in &firsts[..n] {
            *c.entry(v).or_default() += 1;
        }
        c.into_values().collect::<Vec<_>>()
    };
    assert_eq!(count(9), [3, 3, 3]);
    let mut at_max = count(10);
    at_max.sort();
    assert_eq!(at_max, [3, 3, 4], "max mod 3 = 1 variant first once more");
    let dir = tempfile::tempdir().unwrap();
    let script = Script {
        value: Some(clear_difference()),
        ..Default::default()
    };
    let o = sweep(&p, script, vec![], dir.path()).await;
    assert_eq!(guest0_runs(&o.records, "v1"), 3, "{}", brief(&o.records));
}

/// [`scenario`] with the lock workload sliced (3 variants: a, b, c sharing the guests).
fn sliced_plan(extra: &str) -> Plan {
    let runs = if extra.contains("runs:") { "" } else { "runs: 3\n" };
    let s: Scenario = yaml_serde::from_str(&format!(
        "name: t\nhost: {{cpus: 2}}\nlevels: [1.0]\nvariants:\n  - {{name: a, args: {{algo: tas}}}}\n  - {{name: b, args: {{algo: ticket}}}}\n  - {{name: c, args: {{algo: mcs}}}}\nworkloads:\n  - command: lock\n    metric: {METRIC}\n    slice_ms: 300\n    args: {{threads: 1, duration-ms: 1200}}\ntimeouts: {{retries: 1}}\nwarmup_runs: 0\n{runs}{extra}"
    ))
    .unwrap();
    Plan::build(&s, &[0, 1], 1).unwrap()
}

/// Variants sharing guests whose workload is sliced run each round as one payload run of all
/// of them, and each gets its own record per guest of that round, with its own value.
#[tokio::test]
async fn a_sliced_workload_runs_each_round_as_one_run_of_every_variant() {
    let dir = tempfile::tempdir().unwrap();
    let script = Script {
        value: Some(Box::new(|_, argv| match argv.iter().any(|a| a == "tas") {
            true => 200.0,
            false => 100.0,
        })),
        ..Default::default()
    };
    let plan = sliced_plan("");
    let o = sweep(&plan, script, vec![], dir.path()).await;
    // One run call per round, sliced: every variant's arm, 4 slices of 300 ms each.
    assert_eq!(o.calls.runs.len(), 3, "{:?}", o.calls.runs);
    for (_, argv) in &o.calls.runs {
        let argv = argv[0].as_ref().unwrap().join(" ");
        assert!(
            argv.starts_with(
                "slices --slice-ms 300 --period-ms 500 --open-after-ms 100 --slices-per-arm 4 -- lock"
            ),
            "{argv}"
        );
        assert_eq!(argv.matches(" :: ").count(), 2, "{argv}");
    }
    // The arms rotate: no variant is always the first slice.
    let firsts: BTreeSet<String> = o
        .calls
        .runs
        .iter()
        .map(|(_, a)| a[0].as_ref().unwrap()[12].clone())
        .collect();
    assert!(firsts.len() > 1, "{firsts:?}");
    let c = counted(&o.records);
    for v in ["a", "b", "c"] {
        for r in 0..3 {
            for g in 0..2 {
                assert_eq!(c.get(&(v.to_string(), r, g)), Some(&1), "{}", brief(&o.records));
            }
        }
    }
    for r in o.records.iter().filter(|r| r.guest == 0) {
        let want = if r.variant == "a" { 200.0 } else { 100.0 };
        assert_eq!(r.metrics[METRIC], want, "{}", r.variant);
        assert_eq!(
            r.argv[0], "lock",
            "each record keeps its own variant's command line"
        );
        assert_eq!(r.extra[crate::sweep::sliced::SLICED_KEY]["arms"], 3);
    }
    // The round's records are one attempt's: one slot.
    let seqs: BTreeSet<(u32, u32)> = o.records.iter().map(|r| (r.run, r.slot.seq)).collect();
    assert_eq!(seqs.len(), 3, "{seqs:?}");
    assert_eq!(o.totals.runs_ok, 9);
    assert_eq!(o.progress, o.total);
}

/// Once a comparison is concluded its variant leaves the sliced rounds, which get shorter
/// (each arm keeps its 4 slices), and the comparison still open gets more of them within the
/// time of `max` whole rounds: 8 rounds of 3 arms are 24 arm-runs; after 3 rounds of 3 (9),
/// rounds of 2 until 24 are spent (9 + 8 × 2 = 25 ≥ 24 before round 11), so c and the
/// baseline make 11 rounds, the most a cell may ([`Cell::rounds_at_most`]) being 12.
#[tokio::test]
async fn a_sliced_round_shrinks_as_variants_conclude_and_the_open_ones_get_more_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let script = Script {
        // b (ticket) is a clear half of a (the baseline); c (mcs) swings ±30 % a round.
        value: Some(by_variants_run(|argv, k| {
            let algo = &argv[argv.iter().position(|a| a == "--algo").unwrap() + 1];
            match algo.as_str() {
                "tas" => 100.0 * (1.0 + 0.001 * f64::from(k % 3)),
                "ticket" => 50.0 * (1.0 + 0.001 * f64::from(k % 2)),
                _ => 100.0 * [1.3, 0.7][k as usize % 2],
            }
        })),
        ..Default::default()
    };
    let plan = sliced_plan(
        "runs: {until: concluded, min: 3, max: 8}
",
    );
    assert!(
        plan.boots[0]
            .cells
            .iter()
            .all(|c| c.max_runs == 8 && c.rounds_at_most() == 12),
        "{:?}",
        plan.boots[0]
            .cells
            .iter()
            .map(|c| c.rounds_at_most())
            .collect::<Vec<_>>()
    );
    let o = sweep(&plan, script, vec![], dir.path()).await;
    let per_call: Vec<(usize, String)> = o
        .calls
        .runs
        .iter()
        .map(|(_, a)| {
            let argv = a[0].as_ref().unwrap();
            let at = argv.iter().position(|w| w == "--slices-per-arm").unwrap();
            (argv.iter().filter(|w| *w == "lock").count(), argv[at + 1].clone())
        })
        .collect();
    let (three, two) = per_call.split_at(3);
    assert!(three.iter().all(|c| *c == (3, "4".to_string())), "{per_call:?}");
    assert_eq!(two.len(), 8, "{per_call:?}");
    assert!(two.iter().all(|c| *c == (2, "4".to_string())), "{per_call:?}");
    assert_eq!(guest0_runs(&o.records, "b"), 3, "{}", brief(&o.records));
    assert_eq!(guest0_runs(&o.records, "c"), 11, "{}", brief(&o.records));
    assert_eq!(guest0_runs(&o.records, "a"), 11, "{}", brief(&o.records));
    for r in o.records.iter().filter(|r| r.ok && !r.warmup) {
        assert_eq!(r.slices, Some(4), "{} run {}", r.variant, r.run);
    }
    // The bar counts 8 runs a cell: b's 5 skipped pay for the rounds past 8 of a and c.
    assert_eq!(o.progress, o.total);
    assert_eq!(crate::sweep::scheduler::work_left(&plan, &o.records), 0);
}

/// A variant's slice refused by its self-checks fails the whole sliced attempt: the refused
/// variant's record says why, its partners' stand superseded without an error of their own
/// (the rejection is not theirs), and the round is retried as one on the same guests.
#[tokio::test]
async fn a_sliced_round_refused_for_one_variant_is_retried_for_all() {
    let dir = tempfile::tempdir().unwrap();
    let why = "hold 1.4 × asked";
    let script = Script {
        failing_checks: BTreeMap::from([(2, vec![(0, why.to_string())])]),
        ..Default::default()
    };
    let o = sweep(&sliced_plan(""), script, vec![], dir.path()).await;
    assert_eq!(o.calls.runs.len(), 4, "one retry");
    assert_eq!(o.calls.bring_ups.len(), 1, "retried on the same guests");
    let failed: Vec<&RunRecord> = o
        .records
        .iter()
        .filter(|r| r.run == 1 && r.attempt == 1)
        .collect();
    assert_eq!(failed.len(), 6, "{}", brief(&o.records));
    let refused: Vec<&&RunRecord> = failed.iter().filter(|r| !r.ok).collect();
    assert_eq!(refused.len(), 1);
    assert!(refused[0].error.as_deref().unwrap().contains(why));
    for r in &failed {
        assert!(
            r.superseded.as_deref().unwrap().contains(&refused[0].variant),
            "{r:?}"
        );
        if r.ok {
            assert!(r.error.is_none());
        }
    }
    for v in ["a", "b", "c"] {
        for r in 0..3 {
            assert_eq!(counted(&o.records).get(&(v.to_string(), r, 0)), Some(&1));
        }
    }
    assert_eq!(o.totals.attempts_failed, 1);
}

/// A variant that asks for the guest kernel's view (a probe covers one payload run) runs
/// whole; the others still run sliced together.
#[tokio::test]
async fn a_probed_variant_runs_whole_beside_the_sliced_ones() {
    let dir = tempfile::tempdir().unwrap();
    let s: Scenario = yaml_serde::from_str(&format!(
        "name: t\nhost: {{cpus: 2}}\nlevels: [1.0]\nvariants:\n  - {{name: a, args: {{algo: tas}}}}\n  - {{name: b, args: {{algo: ticket}}}}\n  - {{name: c, args: {{algo: mcs}}, kernel_counts: true}}\nworkloads:\n  - command: lock\n    metric: {METRIC}\n    slice_ms: 300\n    args: {{threads: 1, duration-ms: 1200}}\ntimeouts: {{retries: 1}}\nwarmup_runs: 0\nruns: 2\n"
    ))
    .unwrap();
    let plan = Plan::build(&s, &[0, 1], 1).unwrap();
    let o = sweep(&plan, Script::default(), vec![], dir.path()).await;
    let kinds: Vec<String> = o
        .calls
        .runs
        .iter()
        .map(|(_, a)| a[0].as_ref().unwrap()[0].clone())
        .collect();
    assert_eq!(kinds.iter().filter(|k| *k == "slices").count(), 2, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| *k == "lock").count(), 2, "{kinds:?}");
    assert_eq!(o.totals.runs_ok, 6);
}

/// A sliced group's stopping rule may look after any round (its runs balance the variants'
/// places inside themselves); a group of whole runs only where its order is balanced. The
/// plan's α and the rule's looks come from the same period.
#[test]
fn a_sliced_group_looks_after_any_round_a_whole_one_where_balanced() {
    let sliced = sliced_plan("runs: {until: concluded, min: 3, max: 12}\n");
    assert_eq!(sliced.boots[0].balanced_every(sliced.schedule.order), 1);
    assert_eq!(sliced.looks, Some(4), "3, 5, 8, 12");
    let whole = plan("runs: {until: concluded, min: 3, max: 12}\n");
    assert_eq!(whole.boots[0].balanced_every(whole.schedule.order), 2);
}
