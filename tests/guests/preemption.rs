//! Preempted lock holds and hand-overs on real guests (issue 23): 2-vCPU guests, 2 lock threads,
//! ticket (FIFO) and tas, alone on the 2 host CPUs (1x) and with a second such guest (2x).
//! Under 2x the host preempts vCPUs, so a FIFO lock's next owner is often not running when the
//! lock is handed to it: at 2x more of ticket's hand-overs must be stretched than tas's, and
//! they must cost ticket more of the run than tas's cost tas (tas hands the lock to whoever
//! runs); from 1x to 2x ticket's must rise, checked when 1x had the host CPUs to itself. The guest cannot see the
//! host take a vCPU, so most stretched intervals at 2x must be split as vCPU preemption (no
//! context switch of the thread in the guest). Every record's own figures must agree with
//! each other (every hold timed, hand-overs only to waiters, the TSC rate stable).
//!
//! This machine is shared, so 1x is often not alone (other load took 55-65 % of the CPUs in
//! one measured sweep): the host's other load is printed next to the figures, and the issue's
//! stronger claims (1x ≤ 1 % of intervals stretched, 2x ≥ 10×) are printed, not asserted.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::common;

const SCENARIO: &str = "\
name: preemption-e2e
description: ticket vs tas, 1x and 2x, stretched holds and hand-overs
host:
  cpus: 2
  backend: qemu
guest:
  vcpus: 2
  memory_mib: 384
levels: [1.0, 2.0]
variants:
  - {name: ticket, baseline: true, args: {algo: ticket}}
  - {name: tas, args: {algo: tas}}
workloads:
  - name: lock
    command: lock
    args:
      threads: 2
      duration-ms: 2000
      hold-ns: 200
      gap-ns: 200
    metric: ops_per_sec
    better: higher
runs: 2
# One bring-up a level: the test is about preemption within a run; a level's second bring-up
# (the default at two levels, for retention) would only cost time.
schedule: {bring_ups_per_level: 1}
";

/// Sums over a cell's records of (stretched, timed, lost share, vcpu, guest) for one side.
#[derive(Default, Debug)]
struct Side {
    stretched: u64,
    timed: u64,
    lost_share: f64,
    runs: usize,
    vcpu: u64,
    guest: u64,
}

impl Side {
    fn add(&mut self, s: &Value) {
        self.stretched += s["stretched"].as_u64().unwrap();
        self.timed += s["timed"].as_u64().unwrap();
        self.lost_share += s["lost_share"].as_f64().unwrap();
        self.vcpu += s["stretched_vcpu"].as_u64().unwrap();
        self.guest += s["stretched_guest"].as_u64().unwrap();
        self.runs += 1;
    }
    fn share(&self) -> f64 {
        self.stretched as f64 / self.timed.max(1) as f64
    }
    fn lost(&self) -> f64 {
        self.lost_share / self.runs.max(1) as f64
    }
}

#[test]
#[cfg_attr(not(feature = "full-tests"), ignore = "full tier: boots guests (~36 s)")]
fn stretched_handovers_rise_with_overcommit_and_cost_the_fifo_lock_most() {
    let _one = common::one_sweep();
    let (_tmp, results) = common::run_scenario("preemption.yaml", SCENARIO);
    let dir = common::results_dir(&results);
    let (_, records) = common::journal(&dir);
    let runs: Vec<Value> = records
        .into_iter()
        .filter(|r: &Value| r["ok"] == true && r["guest"] == 0 && r.get("superseded").is_none())
        .filter(|r| r["warmup"] == false)
        .collect();
    assert!(
        runs.len() >= 8,
        "2 variants x 2 levels x 2 runs: {} valid",
        runs.len()
    );

    // (level, variant) -> (holds, hand-overs)
    let mut cells: BTreeMap<(String, String), (Side, Side)> = BTreeMap::new();
    for r in &runs {
        let p = &r["payload"];
        let pre = &p["preemption"];
        assert!(
            pre.is_object(),
            "sampling is on by default: {}",
            p["preemption_unavailable"]
        );
        // The TSC rate was measured twice; where it moved more than 2 % (this machine's speed
        // flips, and under TCG the guest's TSC follows the host's clock: seen 2.5 % in a full
        // suite, 2026-12-04) the figures are null with that reason, never wrong numbers.
        let (hz0, hz1) = (
            pre["tsc_before"]["hz"].as_f64().unwrap(),
            pre["tsc_after"]["hz"].as_f64().unwrap(),
        );
        assert!(hz0 > 1e8, "{hz0}");
        if (hz1 / hz0 - 1.0).abs() > 0.02 {
            assert!(pre["holds"].is_null() && pre["handovers"].is_null(), "{pre}");
            let why = pre["holds_unavailable"].as_str().unwrap_or_default();
            assert!(why.contains("TSC rate moved"), "{pre}");
            eprintln!("a run's TSC rate moved {hz0:.0} -> {hz1:.0} Hz: its figures are null ({why})");
            continue;
        }
        let holds = &pre["holds"];
        // Every acquisition timed; hand-overs only to acquisitions that waited.
        assert_eq!(holds["timed"], p["ops_total"], "{pre}");
        let handovers = &pre["handovers"];
        assert!(handovers.is_object(), "2 threads contend: {pre}");
        assert!(handovers["timed"].as_u64().unwrap() <= p["contended"].as_u64().unwrap());
        for s in [holds, handovers] {
            let (st, guest, vcpu) = (
                s["stretched"].as_u64().unwrap(),
                s["stretched_guest"].as_u64().unwrap(),
                s["stretched_vcpu"].as_u64().unwrap(),
            );
            assert_eq!(guest + vcpu, st);
            // Each stretched interval lost at least... nothing negative, and no more than the run.
            let lost = s["lost_share"].as_f64().unwrap();
            assert!((0.0..=1.0 + 1e-9).contains(&lost), "{s}");
            assert_eq!(s["stretched_len"].is_null(), st == 0, "{s}");
        }
        assert_eq!(
            r["metrics"]["stretched_handover_share"],
            handovers["stretched_share"]
        );
        let level = r["level"].to_string();
        let cell = cells
            .entry((level, r["variant"].as_str().unwrap().to_string()))
            .or_default();
        cell.0.add(holds);
        cell.1.add(handovers);
    }
    let other = host_other(&dir);
    for ((level, variant), (h, o)) in &cells {
        let other = other
            .iter()
            .find(|(k, _)| k.ends_with(variant.as_str()) && k.starts_with(level.as_str()))
            .and_then(|(_, v)| *v);
        eprintln!(
            "{level}x {variant:6}: holds {}/{} stretched ({:.3} %, lost {:.3} % of the run, vcpu {} guest {}); \
             hand-overs {}/{} ({:.3} %, lost {:.3} %, vcpu {} guest {}); host other load {other:.3?}",
            h.stretched,
            h.timed,
            100.0 * h.share(),
            100.0 * h.lost(),
            h.vcpu,
            h.guest,
            o.stretched,
            o.timed,
            100.0 * o.share(),
            100.0 * o.lost(),
            o.vcpu,
            o.guest
        );
    }
    let get = |level: &str, v: &str| &cells[&(level.to_string(), v.to_string())];
    let (t1, t2, a2) = (get("1.0", "ticket"), get("2.0", "ticket"), get("2.0", "tas"));
    // FIFO hands the lock to the next in line whether it runs or not; tas to whoever runs.
    assert!(
        t2.1.lost() > a2.1.lost(),
        "at 2x ticket loses more of the run to stretched hand-overs ({:.4}) than tas ({:.4})",
        t2.1.lost(),
        a2.1.lost()
    );
    assert!(
        t2.1.share() > a2.1.share(),
        "at 2x more of ticket's hand-overs are stretched ({:.5}) than tas's ({:.5})",
        t2.1.share(),
        a2.1.share()
    );
    // From 1x to 2x only where 1x had the CPUs (nearly) to itself: on this shared machine
    // other work often takes half the CPUs at 1x too, and then 1x is preempted like 2x.
    let alone = other
        .iter()
        .filter(|(k, _)| k.starts_with("1.0x"))
        .all(|(_, v)| v.is_some_and(|v| v < 0.10));
    if alone {
        assert!(
            t2.1.share() > t1.1.share(),
            "ticket's stretched hand-overs rise from 1x ({:.5}) to 2x ({:.5})",
            t1.1.share(),
            t2.1.share()
        );
    } else {
        eprintln!("1x was not alone (other load >= 10 %): the 1x -> 2x rise is not checked");
    }
    // The guest does not see the host take a vCPU: at 2x most stretched intervals of the two
    // locks had no context switch of the thread in the guest.
    let (vcpu, guest): (u64, u64) = [t2, a2]
        .iter()
        .flat_map(|c| [&c.0, &c.1])
        .fold((0, 0), |(v, g), s| (v + s.vcpu, g + s.guest));
    assert!(vcpu > guest, "2x: {vcpu} vCPU vs {guest} guest preemptions");

    // The explain table carries the new columns, for the lock workload.
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    for col in [
        "stretched hold",
        "hold loss",
        "stretched hand-over",
        "hand-over loss",
    ] {
        assert!(md.contains(col), "report.md lacks {col}:\n{md}");
    }
    let csv = std::fs::read_to_string(dir.join("report.csv")).unwrap();
    assert!(csv.lines().next().unwrap().contains("stretched_handover_share"));
    assert!(csv.lines().next().unwrap().contains("handovers_timed_per_run"));

    // Every stretched share with what it is a share of: the report's holds and hand-overs
    // timed per run are the journal's, cell by cell, and the table says them.
    let model: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let mut checked = 0;
    for s in model["workloads"][0]["series"].as_array().unwrap() {
        for c in s["cells"].as_array().unwrap() {
            let key = (c["level"].to_string(), s["variant"].as_str().unwrap().to_string());
            let Some((h, o)) = cells.get(&key) else { continue };
            for (side, name) in [(h, "holds_timed"), (o, "handovers_timed")] {
                let n = &c["preemption"][name];
                let want = side.timed as f64 / side.runs as f64;
                let got = n["timed_per_run"].as_f64().unwrap_or(f64::NAN);
                assert!(
                    (got - want).abs() <= 1e-6 * want.max(1.0),
                    "{key:?} {name}: {n} vs {want}"
                );
                assert_eq!(n["runs"].as_u64(), Some(side.runs as u64), "{key:?} {name}: {n}");
                assert!(n["timed_per_s"].as_f64().unwrap() > 0.0, "{n}");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 2 * cells.len(), "every cell's two denominators");
    assert!(
        md.contains("/run, "),
        "the table gives each share's denominator:\n{md}"
    );
}

/// Each cell's mean `host_other` (the pinned host CPUs' time that went to anything but the
/// run's vCPUs) from the report's model, as "<level>x <variant>".
fn host_other(dir: &std::path::Path) -> BTreeMap<String, Option<f64>> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let mut out = BTreeMap::new();
    for s in v["workloads"][0]["series"].as_array().unwrap() {
        for c in s["cells"].as_array().unwrap() {
            out.insert(
                format!("{}x {}", c["level"], s["variant"].as_str().unwrap()),
                c["host_other"]["summary"]["mean"].as_f64(),
            );
        }
    }
    out
}
