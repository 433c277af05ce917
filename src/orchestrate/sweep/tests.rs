//! The one sweep loop on mock executors, with one host and with two: warm-ups on every fresh
//! guest set of every host (and a resume after a crash mid-group), a failed journal append on
//! one host stopping every host, and pooled stopping rules deciding once per cell. Every check
//! reads the journal back and settles it by the one accounting rule.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use super::*;
use crate::executor::mock::{Calls, MockExecutor, Script};
use crate::journal::accounting::{GuestSet, settle};
use crate::journal::{Entry, JOURNAL_FILE, JournalWriter, RunRecord};

const METRIC: &str = "ops_per_sec";

/// Two variants sharing one boot, 2 guests, 2 warm-ups and 4 measured runs per cell unless
/// `extra` says otherwise.
fn plan(extra: &str) -> Plan {
    let runs = if extra.contains("runs:") { "" } else { "runs: 4\n" };
    let scenario = yaml_serde::from_str(&format!(
        "name: t\nhost: {{cpus: 2}}\nlevels: [1.0]\nvariants:\n  - {{name: a, args: {{algo: tas}}}}\n  - {{name: b, args: {{algo: ticket}}}}\nworkloads:\n  - command: lock\n    metric: {METRIC}\n    slice_ms: 0\n    args: {{threads: 1}}\ntimeouts: {{retries: 1}}\nwarmup_runs: 2\n{runs}{extra}"
    ))
    .unwrap();
    Plan::build(&scenario, &[0, 1], 1).unwrap()
}

/// `n` hosts with the same plan: one unlabelled host, or hosts labelled h0, h1, ...
fn hosts(n: usize, plan: &Plan) -> Vec<SweepHost> {
    (0..n)
        .map(|h| SweepHost {
            label: (n > 1).then(|| format!("h{h}")),
            plan: plan.clone(),
        })
        .collect()
}

/// Executors for the hosts, each with its script (the default once a host's is used), and
/// what each was asked.
struct Mocks {
    scripts: Mutex<Vec<Option<Script>>>,
    calls: Mutex<Vec<Arc<Mutex<Calls>>>>,
}

impl Mocks {
    fn new(scripts: Vec<Script>) -> Self {
        Self {
            scripts: Mutex::new(scripts.into_iter().map(Some).collect()),
            calls: Mutex::default(),
        }
    }

    fn exec(&self, h: usize) -> MockExecutor {
        let script = self.scripts.lock().unwrap().get_mut(h).and_then(Option::take);
        let script = script.unwrap_or(Script {
            interleave: true,
            ..Default::default()
        });
        let exec = MockExecutor::new(METRIC, script);
        self.calls.lock().unwrap().push(exec.calls.clone());
        exec
    }

    fn runs(&self) -> Vec<usize> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .map(|c| c.lock().unwrap().runs.len())
            .collect()
    }
}

fn interleaved() -> Script {
    Script {
        interleave: true,
        ..Default::default()
    }
}

/// The records of `dir`'s journal (no header: the loop is given a bare journal).
fn read_records(dir: &Path) -> Vec<RunRecord> {
    std::fs::read_to_string(dir.join(JOURNAL_FILE))
        .unwrap_or_default()
        .lines()
        .map(|l| match serde_json::from_str(l).unwrap() {
            Entry::Run(r) => *r,
            _ => panic!("no header expected"),
        })
        .collect()
}

struct Swept {
    outcome: anyhow::Result<PhaseTotals>,
    records: Vec<RunRecord>,
    progress: u64,
}

/// One sweep over `hosts` into `dir`, resuming `previous`.
async fn sweep(hosts: &[SweepHost], mocks: &Mocks, previous: Vec<RunRecord>, dir: &Path) -> Swept {
    let journal = SharedJournal::new(JournalWriter::open(dir).unwrap(), previous);
    let progress = Progress::new(hosts[0].plan.measured_runs(), true);
    let outcome = sweep_hosts(hosts, |h| mocks.exec(h), &journal, &progress, dir).await;
    Swept {
        outcome,
        records: read_records(dir),
        progress: progress.position(),
    }
}

/// The measured slots (variant, run) with a valid result.
fn finished_slots(records: &[RunRecord]) -> BTreeSet<(String, u32)> {
    settle(records)
        .counted(records)
        .filter(|r| !r.warmup)
        .map(|r| (r.variant.clone(), r.run))
        .collect()
}

/// Whether `new` makes no measured run of a slot in `done`.
fn redoes_nothing(done: &BTreeSet<(String, u32)>, new: &[RunRecord]) -> bool {
    new.iter()
        .filter(|r| !r.warmup)
        .all(|r| !done.contains(&(r.variant.clone(), r.run)))
}

/// Each measured slot (variant, run) of both variants has exactly one valid result.
fn each_slot_counted_once(records: &[RunRecord], runs: u32) {
    let s = settle(records);
    let mut have: BTreeMap<(String, u32), usize> = BTreeMap::new();
    for r in s.counted(records).filter(|r| !r.warmup && r.guest == 0) {
        *have.entry((r.variant.clone(), r.run)).or_default() += 1;
    }
    let want: BTreeMap<(String, u32), usize> = ["a", "b"]
        .iter()
        .flat_map(|v| (0..runs).map(move |r| ((v.to_string(), r), 1)))
        .collect();
    assert_eq!(have, want, "{}", brief(records));
}

fn brief(records: &[RunRecord]) -> String {
    records
        .iter()
        .filter(|r| r.guest == 0)
        .map(|r| {
            let s = r.slot;
            format!(
                "{:?} set {}/{} {} run {}{} attempt {} ok {}",
                r.host,
                s.boot,
                s.bring_up,
                r.variant,
                r.run,
                if r.warmup { "w" } else { "" },
                r.attempt,
                r.ok && r.superseded.is_none()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The warm-up rule, checked on a journal: on every guest set (host, boot, bring-up), each
/// cell's warm-ups 0..`warmups` are made at most once, all of them before the set's first
/// measured run, and every cell measured on the set was warmed on it in full. Returns the
/// guest sets that made a measured run.
fn warmed_once_per_set_before_measuring(records: &[RunRecord], warmups: u32) -> BTreeSet<GuestSet> {
    let mut sets: BTreeMap<GuestSet, Vec<&RunRecord>> = BTreeMap::new();
    for r in records.iter().filter(|r| r.guest == 0) {
        sets.entry(GuestSet::of(r)).or_default().push(r);
    }
    let mut measuring = BTreeSet::new();
    for (set, recs) in &sets {
        let mut warmed: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
        let mut measured = false;
        for r in recs {
            if r.warmup {
                assert!(
                    !measured,
                    "{set:?}: a warm-up after a measured run\n{}",
                    brief(records)
                );
                assert!(
                    warmed.entry(&r.variant).or_default().insert(r.run),
                    "{set:?}: warm-up {} of {} made twice\n{}",
                    r.run,
                    r.variant,
                    brief(records)
                );
            } else {
                measured = true;
                let all: BTreeSet<u32> = (0..warmups).collect();
                assert_eq!(
                    warmed.get(r.variant.as_str()),
                    Some(&all),
                    "{set:?}: {} measured on a guest set not warmed in full\n{}",
                    r.variant,
                    brief(records)
                );
            }
        }
        if measured {
            measuring.insert(set.clone());
        }
    }
    measuring
}

/// The reports' n per cell (through the reports' own model of the journal).
fn report_n(records: &[RunRecord]) -> Vec<usize> {
    let header: crate::journal::SweepHeader = crate::testing::header_with(serde_json::json!({
        "scenario": "t", "scenario_sha256": "00", "baseline": "a", "variants": ["a", "b"],
        "levels": [1.0],
        "workloads": {"lock": {"command": "lock", "metric": METRIC, "better": "higher"}},
        "backend": "mock", "accel": "tcg", "host_cpus": [0, 1], "guest_vcpus": 1,
        "started_at": "t", "ocrig_version": "0",
    }));
    let journal = crate::journal::Journal {
        header,
        runs: records.to_vec(),
    };
    let model = crate::testing::build(&journal, 0.05, None);
    model.workloads[0]
        .series
        .iter()
        .map(|s| s.cells[0].summary.as_ref().map_or(0, |x| x.n))
        .collect()
}

#[tokio::test]
async fn every_fresh_guest_set_of_every_host_is_warmed_once_and_never_counted() {
    for n in [1, 2] {
        let dir = tempfile::tempdir().unwrap();
        let p = plan("");
        // Host 0's 6th run call (a measured run) loses guest 1: its retry runs on fresh guests,
        // which are warmed again before it.
        let first = Script {
            failing_runs: BTreeMap::from([(6, vec![(1, "guest 1: connection lost".to_string())])]),
            interleave: true,
            ..Default::default()
        };
        let mocks = Mocks::new(vec![first, interleaved()]);
        let o = sweep(&hosts(n, &p), &mocks, vec![], dir.path()).await;
        let totals = o.outcome.unwrap();
        each_slot_counted_once(&o.records, 4);
        let sets = warmed_once_per_set_before_measuring(&o.records, 2);
        // Host 0 measured on two guest sets (the second after the failure), every other host
        // on one: each warmed with 2 warm-ups of both cells.
        assert_eq!(sets.len(), n + 1, "{sets:?}\n{}", brief(&o.records));
        assert_eq!(totals.warm_ups as usize, sets.len() * 2 * 2);
        assert_eq!(totals.boots as usize, n + 1);
        if n == 2 {
            let hosts_measuring: BTreeSet<_> = sets.iter().map(|s| s.host.clone()).collect();
            assert_eq!(hosts_measuring.len(), 2, "both hosts warmed their guests");
        }
        // The warm-ups are never a sample: the reports count 4 runs per cell, as the journal's
        // valid measured results.
        assert_eq!(report_n(&o.records), [4, 4]);
        assert_eq!((totals.runs_ok, totals.runs_failed), (8, 0));
        assert_eq!(o.progress, p.measured_runs());
    }
}

#[tokio::test]
async fn a_resume_after_a_crash_mid_group_warms_its_fresh_guests_and_redoes_nothing() {
    for n in [1, 2] {
        let dir = tempfile::tempdir().unwrap();
        let p = plan("");
        let hs = hosts(n, &p);
        // Host 0's 7th run call never returns: its warm-ups (4) and two measured runs are
        // journaled, then the process "crashes" (the sweep future is dropped, as SIGKILL ends it).
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let first = Script {
            hang_at: Some((7, tx)),
            interleave: true,
            ..Default::default()
        };
        let mocks = Mocks::new(vec![first, interleaved()]);
        {
            let journal = SharedJournal::new(JournalWriter::open(dir.path()).unwrap(), vec![]);
            let progress = Progress::new(p.measured_runs(), true);
            tokio::select! {
                _ = sweep_hosts(&hs, |h| mocks.exec(h), &journal, &progress, dir.path()) => {
                    panic!("the sweep should hang")
                }
                _ = rx.recv() => {}
            }
        }
        let before = read_records(dir.path());
        let done_before = finished_slots(&before);
        assert!(done_before.len() >= 2, "{}", brief(&before));
        assert!(
            done_before.len() < 8,
            "the crash was mid-group: {}",
            brief(&before)
        );
        let sets_before = warmed_once_per_set_before_measuring(&before, 2);

        let o = sweep(&hs, &Mocks::new(vec![]), before.clone(), dir.path()).await;
        o.outcome.unwrap();
        let all = o.records;
        let new = &all[before.len()..];
        assert!(
            redoes_nothing(&done_before, new),
            "the resume redid a finished run:\n{}",
            brief(new)
        );
        // The resume's guests are fresh: warmed again, on guest sets of their own (bring-ups
        // numbered on from the crashed sweep's), and no set was warmed twice.
        let sets_after = warmed_once_per_set_before_measuring(&all, 2);
        let resumed: BTreeSet<_> = sets_after.difference(&sets_before).collect();
        assert!(!resumed.is_empty());
        for set in &resumed {
            let before_on_host = before
                .iter()
                .filter(|r| r.host == set.host)
                .map(|r| r.slot.bring_up)
                .max()
                .unwrap_or(0);
            assert!(
                set.bring_up > before_on_host,
                "{set:?} reuses a crashed set's number"
            );
        }
        assert!(new.iter().take(2 * 2).all(|r| r.warmup), "{}", brief(new));
        each_slot_counted_once(&all, 4);
        assert_eq!(report_n(&all), [4, 4]);
        assert_eq!(o.progress, p.measured_runs());
    }
}

/// A journal append that fails (ENOSPC, here from /dev/full put in as the writer mid-sweep)
/// on one host's scheduler stops every host's at once with exit status 3; every run journaled
/// before stays, whole, and a resume continues to one valid result per slot, redoing nothing.
#[tokio::test]
async fn a_failed_append_on_either_host_stops_every_host_and_keeps_every_finished_run() {
    for failing_host in [0, 1] {
        let dir = tempfile::tempdir().unwrap();
        let full = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/dev/full", full.path().join(JOURNAL_FILE)).unwrap();
        let p = plan("runs: 8\n");
        let hs = hosts(2, &p);
        let journal = Arc::new(SharedJournal::new(
            JournalWriter::open(dir.path()).unwrap(),
            vec![],
        ));
        let breaker = {
            let journal = Arc::clone(&journal);
            let full = full.path().to_path_buf();
            move |n: u32| {
                // The failing host's 7th run call: its warm-ups and two measured runs are in.
                if n == 7 {
                    let mut j = journal.lock().unwrap();
                    j.writer = JournalWriter::open(&full).unwrap();
                }
            }
        };
        let mut scripts = vec![interleaved(), interleaved()];
        scripts[failing_host].on_run = Some(Box::new(breaker));
        let mocks = Mocks::new(scripts);
        let progress = Progress::new(p.measured_runs(), true);
        let outcome = sweep_hosts(&hs, |h| mocks.exec(h), &journal, &progress, dir.path()).await;
        let e = super::super::finish::stopped(outcome, dir.path()).unwrap_err();
        assert_eq!(
            super::super::exit_code(&e),
            super::super::exit::JOURNAL_WRITE_FAILED,
            "{e:#}"
        );
        let text = format!("{e:#}");
        assert!(text.contains("No space left"), "{text}");
        assert!(text.contains("--resume"), "{text}");
        assert!(text.contains("the sweep on host h"), "{text}");
        // Every host stopped at once: neither made more than one run call after the failing
        // host's 7th (the other host's, in flight), of the 12 each had to make.
        let runs = mocks.runs();
        assert!(runs.iter().all(|&r| r <= 8), "{runs:?}");
        let before = read_records(dir.path());
        assert!(!before.is_empty());
        let done_before = finished_slots(&before);
        assert!(done_before.len() >= 2, "{}", brief(&before));
        // Once the disk has room again: the resume finishes exactly what is left.
        let o = sweep(&hs, &Mocks::new(vec![]), before.clone(), dir.path()).await;
        o.outcome.unwrap();
        let new = &o.records[before.len()..];
        assert!(redoes_nothing(&done_before, new), "{}", brief(new));
        each_slot_counted_once(&o.records, 8);
        warmed_once_per_set_before_measuring(&o.records, 2);
    }
}

/// A cell's stopping rule judges the valid results of both hosts pooled and decides once for
/// the cell: one host and two hosts stop a steady cell at the same slot (two hosts may add the
/// one slot that was in flight when the rule was met), and a resume of the finished sweep
/// finds nothing left — for a CV target and for a detectable-effect target.
#[tokio::test]
async fn pooled_stopping_rules_decide_once_for_the_cell_on_one_host_and_two() {
    for target in ["target_cv: 0.05", "target_mde: 0.05"] {
        let p = plan(&format!("runs: {{min: 4, max: 12, {target}}}\n"));
        let steady = || Script {
            // Values within ±1 % of 100: every rule is met as soon as min allows.
            value: Some(Box::new(|n, _| [100.0, 101.0, 99.0][n as usize % 3])),
            interleave: true,
            ..Default::default()
        };
        let mut n_per_cell = Vec::new();
        for h in [1, 2] {
            let dir = tempfile::tempdir().unwrap();
            let hs = hosts(h, &p);
            let o = sweep(&hs, &Mocks::new(vec![steady(), steady()]), vec![], dir.path()).await;
            o.outcome.unwrap();
            let n = report_n(&o.records);
            assert!(
                n.iter().all(|&k| (4..4 + h).contains(&k)),
                "{target}, {h} host(s): n {n:?}\n{}",
                brief(&o.records)
            );
            if h == 2 {
                // Both hosts measured, and neither ran past the slot the rule decided at.
                let last = |host: &str| {
                    o.records
                        .iter()
                        .filter(|r| !r.warmup && r.host.as_deref() == Some(host))
                        .map(|r| r.run)
                        .max()
                        .unwrap()
                };
                assert!(last("h0") <= 4 && last("h1") <= 4, "{}", brief(&o.records));
            }
            assert_eq!(crate::sweep::scheduler::work_left(&p, &o.records), 0);
            // Resuming the finished sweep makes no run at all.
            let again = Mocks::new(vec![]);
            let r = sweep(&hs, &again, o.records.clone(), dir.path()).await;
            r.outcome.unwrap();
            assert_eq!(r.records.len(), o.records.len(), "the resume made runs");
            assert!(again.runs().iter().all(|&k| k == 0));
            n_per_cell.push(n);
        }
        assert_eq!(n_per_cell[0], [4, 4], "{target}: one host stops at min");
    }
}

/// A part of the sweep whose drop waits for a guest process to end, as libssh2's close of an
/// open channel waits for the guest's answer (up to the run deadline + 30 s).
struct WaitsForGuest(std::process::Child);

impl Drop for WaitsForGuest {
    fn drop(&mut self) {
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_secs(20) {
            if self.0.try_wait().unwrap().is_some() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_signal_kills_the_guests_before_the_sweep_is_dropped() {
    let guest = std::process::Command::new("sleep").arg("600").spawn().unwrap();
    let pid = guest.id();
    let live = crate::backend::live::LiveProcess::register(pid).expect("a pidfd for the guest");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let t = std::time::Instant::now();
    let outcome = rt.block_on(async move {
        let sweep = async move {
            let _held = (WaitsForGuest(guest), live);
            std::future::pending::<anyhow::Result<()>>().await
        };
        tokio::spawn(async {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::INT).unwrap();
        });
        until_signal_killing(sweep, || crate::backend::live::kill_matching(|p| p == pid)).await
    });
    let stopped = t.elapsed();
    let e = outcome.expect_err("stopped by the signal");
    assert_eq!(
        e.downcast_ref::<Interrupted>().map(|i| i.code),
        Some(130),
        "{e:#}"
    );
    // Signal at 200 ms; the guest dies at once, so the drop waits for nothing.
    assert!(
        stopped < std::time::Duration::from_secs(2),
        "stopped after {stopped:?}"
    );
}
