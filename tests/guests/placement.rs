//! Every guest at the level it is reported at, measured on real guests (TCG here, KVM where the
//! host has it). 1-vCPU guests on 2 host CPUs with every vCPU busy (`hog` in guest 0,
//! `background: hog` in the others) at 1x, 1.5x, 2x and 2.5x: a fair share of the CPUs makes
//! EVERY guest's vCPU wait 1 - 1/L (0, 1/3, 1/2, 3/5). Whole-CPU round-robin pinning broke this
//! at 1.5x (guests 0 and 2 waited 0.50, guest 1 0.01) and 2.5x (0.67 and 0.51); the sweep now
//! rotates the pinning where it cannot be even (every vCPU takes every place in turn), and
//! journals which it did.
//!
//! The machine is shared: other processes' CPU time on the claimed CPUs takes its part too.
//! The host's per-CPU /proc/stat in the same journal says how much (busy time beyond our vCPUs'),
//! so each guest is checked against 1 - (1 - foreign) · CPUs / vCPUs over the CPUs it may use
//! (1 - 1/L itself on a quiet machine, which is then checked as stated). A loaded machine also
//! spreads its load unevenly over the CPUs, so a sweep whose foreign share is above 15 % and
//! that misses the bound is run again (at most three times); the last one is asserted.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::common;

const SCENARIO: &str = "\
name: placement-physics
description: every vCPU busy; each guest's vCPU wait share against 1 - 1/L
host:
  cpus: 2
  backend: qemu
guest:
  vcpus: 1
  memory_mib: 256
levels: [1.0, 1.5, 2.0, 2.5]
workloads:
  - name: hog
    command: hog
    args:
      seconds: 5
    metric: iterations
    better: higher
background: hog
runs: 1
warmup_runs: 0
";

const LEVELS: [f64; 4] = [1.0, 1.5, 2.0, 2.5];
const BOUND: f64 = 0.1;

/// Guest `g`'s vCPU 0 host CPUs, from the placement the sweep journaled.
fn cpus_of(rec: &Value, g: u64) -> Vec<u64> {
    let p = rec["extra"]["group"]["pinning"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["guest"] == g)
        .unwrap_or_else(|| panic!("no pinning for guest {g}: {}", rec["extra"]["group"]));
    p["vcpu_to_cpus"][0][1]
        .as_array()
        .unwrap_or_else(|| panic!("{p}"))
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect()
}

/// One sweep's verdict: per level a line per guest, and whether every guest was within the
/// bound, and the largest foreign share seen.
struct Verdict {
    lines: Vec<String>,
    ok: bool,
    worst_foreign: f64,
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
            .filter(|r| r["level"].as_f64() == Some(level))
            .collect();
        let guests = (level * 2.0) as usize;
        assert_eq!(recs.len(), guests, "{level}x: one record per guest");
        let rec0 = recs.iter().find(|r| r["guest"] == 0).unwrap();
        assert_eq!(rec0["ok"], true, "{rec0}");
        let placement = &rec0["extra"]["group"]["placement"];
        // Whole-CPU pinning exactly where it can be even (2 divides the vCPU count), a rotating
        // pinning elsewhere (the QEMU backend's threads are this host's).
        let divides = guests.is_multiple_of(2);
        assert_eq!(placement["pinned"], divides, "{level}x: {placement}");
        assert_eq!(placement["rotating"], !divides, "{level}x: {placement}");

        // The guests sharing each CPU set, their vCPU run time, and the set's host time.
        let mut by_set: BTreeMap<Vec<u64>, Vec<(u64, f64, f64)>> = BTreeMap::new();
        for r in &recs {
            let g = r["guest"].as_u64().unwrap();
            let s = &r["extra"]["vcpu_sched"]["vcpus"][0];
            let wait = r["extra"]["vcpu_sched"]["mean_wait_share"].as_f64().unwrap();
            by_set
                .entry(cpus_of(rec0, g))
                .or_default()
                .push((g, s["run_s"].as_f64().unwrap(), wait));
        }
        let per_cpu = rec0["extra"]["host_stat"]["per_cpu"].as_array().unwrap();
        let mut line = format!("{level}x ({}):", if divides { "pinned" } else { "rotating" });
        for (set, members) in &by_set {
            let (mut total_s, mut busy_s) = (0.0, 0.0);
            for c in per_cpu
                .iter()
                .filter(|c| set.contains(&c["cpu"].as_u64().unwrap()))
            {
                let t = |k: &str| c[k].as_f64().unwrap() / 100.0;
                total_s += t("user") + t("system") + t("idle") + t("steal");
                busy_s += t("user") + t("system");
            }
            let ours: f64 = members.iter().map(|m| m.1).sum();
            let foreign = ((busy_s - ours) / total_s).clamp(0.0, 1.0);
            v.worst_foreign = v.worst_foreign.max(foreign);
            let share = set.len() as f64 / members.len() as f64;
            let ideal = (1.0 - share).max(0.0);
            let expected = (1.0 - (1.0 - foreign) * share).max(0.0);
            for &(g, _, wait) in members {
                let within =
                    (wait - expected).abs() <= BOUND && (foreign >= 0.05 || (wait - ideal).abs() <= BOUND);
                v.ok &= within;
                line.push_str(&format!(
                    " g{g} {wait:.3} (CPUs {set:?}, 1-1/L {ideal:.3}, other load {foreign:.3} → {expected:.3}){}",
                    if within { "" } else { " OUT" }
                ));
            }
        }
        v.lines.push(line);
    }
    v
}

#[test]
#[cfg_attr(not(feature = "full-tests"), ignore = "full tier: boots guests (~35 s)")]
fn every_guest_waits_one_minus_one_over_the_level() {
    let _one = common::one_sweep();
    let mut last = None;
    for attempt in 1..=3 {
        let (_tmp, results) = common::run_scenario("placement.yaml", SCENARIO);
        let (_, runs) = common::journal(&common::results_dir(&results));
        let v = judge(&runs);
        eprintln!("attempt {attempt}:\n{}", v.lines.join("\n"));
        let busy = v.worst_foreign > 0.15;
        let ok = v.ok;
        last = Some(v);
        if ok || !busy {
            break;
        }
        eprintln!(
            "the machine was busy (other load up to {:.2}): measuring again",
            last.as_ref().unwrap().worst_foreign
        );
    }
    let v = last.unwrap();
    assert!(
        v.ok,
        "a guest's vCPU wait is more than {BOUND} from its level's:\n{}",
        v.lines.join("\n")
    );
}
