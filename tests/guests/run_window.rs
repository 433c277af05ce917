//! Every guest at its level, measured over the run's own window (`vcpu_sched.run_window`), on
//! real guests (TCG here). 1-vCPU guests on 2 host CPUs, a lock run in guest 0 (its own window
//! on its TSC: the start gate to its end) and `background: hog` in the others, at 1.5x, 2x and
//! 2.5x. The probe's counters are read before the go signal and after the last guest's
//! end, so their window also holds the payload's start and report; the run's window is the
//! payload's own, and every guest is read over it (the hogs, whose payload gives none, over
//! guest 0's). The levels where the probe's window read furthest from the level's share: 1.5x
//! and 2.5x (rotating pinning), 2x (guest 0 and its peers).
//!
//! Checked: the window is guest 0's payload window on the host's clock (as long as the run it
//! reports), shared by every guest of the run; per vCPU, run + wait + idle is the window; and
//! the wait is the level's: within 0.1 of 1 − 1/L where the machine is quiet, and where other
//! processes took a vCPU's CPU while it waited (`wait_behind.other_s`, share f of the window)
//! its wait behind the run's own vCPUs within 0.1 of (1 − f)(1 − 1/L). A machine busy with
//! others' work (f above 0.15 for some guest) and a miss is measured again (at most three times).

use serde_json::Value;

use crate::common;

const SCENARIO: &str = "\
name: run-window
description: each guest's vCPU wait over the run's own window against 1 - 1/L
host:
  cpus: 2
  backend: qemu
guest:
  vcpus: 1
  memory_mib: 256
levels: [1.5, 2.0, 2.5]
variants:
  - {name: tas, args: {algo: tas}}
workloads:
  - name: lock
    command: lock
    args:
      threads: 1
      duration-ms: 1500
      hold-ns: 2000
      gap-ns: 200
    metric: ops_per_sec
    better: higher
background: hog
runs: 1
warmup_runs: 0
";

const LEVELS: [f64; 3] = [1.5, 2.0, 2.5];
const BOUND: f64 = 0.1;

/// One sweep's lines (a guest each) and whether every guest's wait was its level's.
struct Verdict {
    lines: Vec<String>,
    ok: bool,
    worst_foreign: f64,
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn judge(runs: &[Value]) -> Verdict {
    let mut v = Verdict {
        lines: Vec::new(),
        ok: true,
        worst_foreign: 0.0,
    };
    for level in LEVELS {
        let recs: Vec<&Value> = runs
            .iter()
            .filter(|r| r["level"].as_f64() == Some(level) && r["ok"] == true)
            .collect();
        let guests = (level * 2.0) as usize;
        assert_eq!(recs.len(), guests, "{level}x: one record per guest");
        let rec0 = recs.iter().find(|r| r["guest"] == 0).unwrap();
        let w0 = &rec0["extra"]["vcpu_sched"]["run_window"];
        assert_eq!(w0["window"], "payload", "{level}x: {w0}");
        // Guest 0's window is its payload's: as long as the run it reports (the clock tie is
        // within a millisecond or two here).
        let elapsed = num(&rec0["payload"]["elapsed_ns"]) / 1e9;
        assert!(
            (num(&w0["wall_s"]) - elapsed).abs() < 0.01,
            "{level}x: window {w0} vs the payload's {elapsed} s"
        );
        assert!(
            num(&w0["start_s"]) > 0.0,
            "the gate comes after the go signal: {w0}"
        );
        let ideal = (1.0 - 1.0 / level).max(0.0);
        let mut line = format!(
            "{level}x: window {:.3}–{:.3} s, level held {:.2}:",
            num(&w0["start_s"]),
            num(&w0["end_s"]),
            num(&w0["level_held"])
        );
        for r in &recs {
            let g = r["guest"].as_u64().unwrap();
            let w = &r["extra"]["vcpu_sched"]["run_window"];
            if g != 0 {
                assert_eq!(w["window"], "measured guest's payload", "{level}x g{g}: {w}");
                assert_eq!((&w["start_s"], &w["end_s"]), (&w0["start_s"], &w0["end_s"]));
            }
            let wall = num(&w["wall_s"]);
            let vcpu = &w["vcpus"][0];
            let (run, wait, idle) = (num(&vcpu["run_s"]), num(&vcpu["wait_s"]), num(&vcpu["idle_s"]));
            assert!(
                (run + wait + idle - wall).abs() < 0.002,
                "{level}x g{g}: run + wait + idle is the window: {w}"
            );
            let share = num(&w["mean_wait_share"]);
            assert!((share - wait / wall).abs() < 1e-9, "{w}");
            let behind = &vcpu["wait_behind"];
            let foreign = num(&behind["other_s"]) / wall;
            v.worst_foreign = v.worst_foreign.max(foreign);
            let level_part = num(&behind["vcpus_s"]) / wall;
            let expected = (1.0 - foreign) * ideal;
            let within =
                (level_part - expected).abs() <= BOUND && (foreign >= 0.05 || (share - ideal).abs() <= BOUND);
            v.ok &= within;
            line.push_str(&format!(
                " g{g} {share:.3} (1-1/L {ideal:.3}; behind vCPUs {level_part:.3}, others {foreign:.3}; idle {idle:.2} s){}",
                if within { "" } else { " OUT" }
            ));
        }
        v.lines.push(line);
    }
    v
}

#[test]
#[cfg_attr(not(feature = "full-tests"), ignore = "full tier: boots guests (~30 s)")]
fn every_guest_waits_its_levels_share_over_the_runs_own_window() {
    let _one = common::one_sweep();
    let mut last = None;
    for attempt in 1..=3 {
        let (_tmp, results) = common::run_scenario("run-window.yaml", SCENARIO);
        let (_, runs) = common::journal(&common::results_dir(&results));
        let v = judge(&runs);
        eprintln!("attempt {attempt}:\n{}", v.lines.join("\n"));
        let (ok, busy) = (v.ok, v.worst_foreign > 0.15);
        last = Some(v);
        if ok || !busy {
            break;
        }
        eprintln!("the machine was busy with other work: measuring again");
    }
    let v = last.unwrap();
    assert!(
        v.ok,
        "a guest's vCPU wait over the run's window is more than {BOUND} from its level's:\n{}",
        v.lines.join("\n")
    );
}
