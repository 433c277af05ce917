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
        // Guest 0's window is its payload's: as long as the run it reports (both are stamped
        // together at the gates, and the window is put on the host's clock at its own rate).
        let elapsed = num(&rec0["payload"]["elapsed_ns"]) / 1e9;
        assert!(
            (num(&w0["wall_s"]) - elapsed).abs() < 0.001,
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

const SLICED: &str = "\
name: run-window-sliced
description: each arm of a sliced run read over its own slices
host:
  cpus: 2
  backend: qemu
guest:
  vcpus: 1
  memory_mib: 256
levels: [2.0]
variants:
  - {name: tas, baseline: true, args: {algo: tas}}
  - {name: ticket, args: {algo: ticket}}
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
    slice_ms: 300
runs: 1
warmup_runs: 0
";

/// A sliced run at 2x (four 1-vCPU guests on 2 CPUs, every guest running both arms' slices):
/// each arm's record is read over that arm's own five slices, not the run's span (which also
/// holds the other arm's slices and the set-up between them): its window is made of five parts
/// as long together as the arm's slices and opened at one time in every guest, its vCPU wait
/// is the level's (within 0.1 of 0.5, or of (1 − f) × 0.5 behind the run's vCPUs where other
/// processes took a share f), and its stretched intervals are placed on the host's record (the
/// preemption attribution).
#[test]
#[cfg_attr(not(feature = "full-tests"), ignore = "full tier: boots guests (~40 s)")]
fn each_arm_of_a_sliced_run_is_read_over_its_own_slices() {
    let _one = common::one_sweep();
    let (_tmp, results) = common::run_scenario("run-window-sliced.yaml", SLICED);
    let dir = common::results_dir(&results);
    let (_, runs) = common::journal(&dir);
    let mut lines = Vec::new();
    let mut starts = Vec::new();
    for variant in ["tas", "ticket"] {
        let mut first_slice = Vec::new();
        let recs: Vec<&Value> = runs
            .iter()
            .filter(|r| r["variant"] == variant && r["ok"] == true && r["warmup"] != true)
            .collect();
        assert_eq!(recs.len(), 4, "{variant}: one record per guest");
        for r in &recs {
            let g = r["guest"].as_u64().unwrap();
            let w = &r["extra"]["vcpu_sched"]["run_window"];
            assert_eq!(
                (&w["window"], &w["parts"]),
                (&Value::from("payload"), &Value::from(5)),
                "{variant} g{g}: {w}"
            );
            // As long as the arm's slices together (the arm's elapsed is their sum).
            let elapsed = num(&r["payload"]["elapsed_ns"]) / 1e9;
            assert!(
                (num(&w["wall_s"]) - elapsed).abs() < 0.002,
                "{variant} g{g}: window {w} vs the arm's slices' {elapsed} s"
            );
            let parts = r["payload"]["preemption"]["window_parts"]
                .as_array()
                .map_or(0, Vec::len);
            assert_eq!(parts, 5, "{variant} g{g}: the payload keeps each slice's window");
            let share = num(&w["mean_wait_share"]);
            let behind = &w["vcpus"][0]["wait_behind"];
            let wall = num(&w["wall_s"]);
            let foreign = num(&behind["other_s"]) / wall;
            let level_part = num(&behind["vcpus_s"]) / wall;
            let within = (level_part - (1.0 - foreign) * 0.5).abs() <= BOUND;
            lines.push(format!(
                "{variant} g{g}: {share:.3} over {:.3}–{:.3} s in 5 parts ({wall:.3} s); behind vCPUs {level_part:.3}, others {foreign:.3}{}",
                num(&w["start_s"]),
                num(&w["end_s"]),
                if within { "" } else { " OUT" }
            ));
            assert!(within, "{}", lines.join("\n"));
            first_slice.push(num(&w["start_s"]));
            if g == 0 {
                starts.push(num(&w["start_s"]));
                // The stretched intervals the arm listed, against the host's record.
                let on_host = &r["extra"]["stretched_on_host"];
                assert!(
                    on_host.is_object() && on_host.get("unavailable").is_none(),
                    "{variant}: {on_host}"
                );
            }
        }
        // The guests' slices of an arm cover the same time: each guest's window opens on the
        // schedule, whatever its own set-up took (they were 0.18–0.37 s apart when each slice's
        // window opened after its own set-up).
        let spread = first_slice.iter().copied().fold(f64::MIN, f64::max)
            - first_slice.iter().copied().fold(f64::MAX, f64::min);
        assert!(
            spread < 0.1,
            "{variant}: the guests' first slices open {spread:.3} s apart: {first_slice:?}"
        );
    }
    eprintln!("{}", lines.join("\n"));
    // The report judges each arm's stretched holds by the host's record (most of them vCPU
    // preemption at 2x), as it does an unsliced run's.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ocrig"))
        .args(["report", "--format", "json"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let model: Value = serde_json::from_slice(&out.stdout).unwrap();
    for series in model["workloads"][0]["series"].as_array().unwrap() {
        let p = &series["cells"][0]["preemption"];
        let o = &p["observed"];
        let judged: u64 = ["vcpu", "both", "guest", "other_vcpu", "unexplained"]
            .iter()
            .map(|k| o[k]["count"].as_u64().unwrap_or(0))
            .sum();
        let host_took = o["vcpu"]["count"].as_u64().unwrap_or(0) + o["both"]["count"].as_u64().unwrap_or(0);
        assert!(judged > 0 && 2 * host_took > judged, "{}: {p}", series["variant"]);
    }
    // The two arms' windows are their own: one starts with the first slice, the other after it.
    assert!((starts[0] - starts[1]).abs() > 0.2, "{starts:?}");
}
