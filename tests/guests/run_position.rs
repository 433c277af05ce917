//! Run position does not matter: the first run in a freshly started guest (a clone restored
//! from a snapshot, whose page cache and payload binary are cold) is a sample like the others.
//! One 1-vCPU guest at 0.5x (nothing else on the host CPUs it may use but the machine's own
//! other work), one lock thread, hold 200 / gap 200 ns, six runs of one cell in one guest and
//! no warm-up: run 0 must lie within the rest's 99 % prediction interval around their median,
//! median ± t(0.995, 4) · s · √(1 + 1/5) with s the robust spread 1.4826 · MAD (one host hiccup
//! in runs 1..5 must not widen the bound until it cannot fail), or within 5 % of that median
//! (the quiet-cell tolerance, issue 18: four runs agree within CV 5 %), whichever is wider, or
//! between the lowest and the highest of runs 1..5 (a host that flips between two speed states
//! puts three runs in one state and the median and MAD there: see the test).
//!
//! Why the 5 % floor: this machine's own speed moves between runs regardless of position.
//! Measured here, six repeats of this test: run 0 was +0.1, +2.4, +1.7, +1.3, +9.5 and +1.8 %
//! off the mean of runs 1..5 (position, if anything, makes run 0 faster); one CI run saw
//! runs 1..5 agree to CV 0.3 % and run 0 3.0 % below them, which the bare interval (±1.6 %)
//! called a position effect. A cold first run (page cache, code translated afresh by TCG after
//! a restore) that costs 5 % or more still fails. The figures are printed for the record, with
//! the other load of each run.

use serde_json::Value;
use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::common;

const SCENARIO: &str = "\
name: run-position
description: six runs of one cell in one guest; run 0 against the rest
host:
  cpus: 2
  backend: qemu
guest:
  vcpus: 1
  memory_mib: 256
levels: [0.5]
workloads:
  - name: lock
    command: lock
    args:
      algo: ticket
      threads: 1
      hold-ns: 200
      gap-ns: 200
      duration-ms: 1500
    metric: ops_per_sec
    better: higher
runs: 6
warmup_runs: 0
";

#[test]
#[cfg_attr(not(feature = "full-tests"), ignore = "full tier: boots guests (~19 s)")]
fn the_first_run_in_a_fresh_guest_is_a_sample_like_the_others() {
    let _one = common::one_sweep();
    let (_tmp, results) = common::run_scenario("position.yaml", SCENARIO);
    let (_, records) = common::journal(&common::results_dir(&results));
    let all: Vec<Value> = records.into_iter().filter(|r: &Value| r["guest"] == 0).collect();
    // An attempt the payload's self-checks rejected is retried in fresh guests, as it should be;
    // any other failure fails the test.
    let self_check = |r: &Value| {
        let said = |k: &str| r[k].as_str().is_some_and(|e| e.contains("self-check failed: "));
        said("error") || said("superseded")
    };
    let (runs, rejected): (Vec<Value>, Vec<Value>) = all
        .into_iter()
        .partition(|r| r["ok"] == true && r.get("superseded").is_none());
    for r in &rejected {
        assert!(self_check(r), "a failed attempt that no self-check rejected: {r}");
        eprintln!("retried after a self-check: {} {}", r["error"], r["superseded"]);
    }
    assert_eq!(runs.len(), 6, "six valid runs");
    // All six in one guest (one bring-up), unless a rejected attempt brought up fresh guests:
    // the first run in each of those is a first run in a fresh guest too.
    let bring_ups: std::collections::BTreeSet<String> =
        runs.iter().map(|r| r["slot"]["bring_up"].to_string()).collect();
    assert!(bring_ups.len() == 1 || !rejected.is_empty(), "{bring_ups:?}");
    let mut by_run: Vec<(u64, f64, f64)> = runs
        .iter()
        .map(|r| {
            let busy = r["extra"]["host_stat"]["busy_share"].as_f64().unwrap_or(f64::NAN);
            (
                r["run"].as_u64().unwrap(),
                r["metrics"]["ops_per_sec"].as_f64().unwrap(),
                busy,
            )
        })
        .collect();
    by_run.sort_by_key(|r| r.0);
    let rest: Vec<f64> = by_run[1..].iter().map(|r| r.1).collect();
    let n = rest.len() as f64;
    let mean = rest.iter().sum::<f64>() / n;
    let sd = (rest.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    let median = median_of(&rest);
    let mad = median_of(&rest.iter().map(|x| (x - median).abs()).collect::<Vec<_>>());
    let robust_sd = 1.4826 * mad;
    let t = StudentsT::new(0.0, 1.0, n - 1.0).unwrap().inverse_cdf(0.995);
    // The spread is the larger of the two: a robust one keeps one odd run among the rest from
    // widening the bound, but when the rest fall in two speed states (1.28M and 1.43-1.50M
    // ops/s, 2026-12-06) their MAD reads only one state's spread (1.3 %, against a CV of 6 %),
    // and a first run in the slow state then missed a ±6.6 % bound by 1.2 % below the rest.
    let interval = t * robust_sd.max(sd) * (1.0 + 1.0 / n).sqrt() / median;
    let bound = interval.max(QUIET_CELL_TOLERANCE);
    let first = by_run[0].1;
    let lines: Vec<String> = by_run
        .iter()
        .map(|(run, v, busy)| format!("run {run}: {v:.0} ops/s, host CPUs busy {busy:.2}"))
        .collect();
    let off = first / median - 1.0;
    // Among the rest's own values it is a sample like them whatever the median says: this
    // host flips between speed states (runs 1..5 read 1.59-1.60M and 1.69-1.76M ops/s in one
    // run of this test, 2026-12-04), and a median and MAD of the lower three then put a bound
    // of ±3.5 % around 1.60M that a run at 1.69M misses. A cold first run lies below them all.
    let (lowest, highest) = rest
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        });
    let among_the_rest = (lowest..=highest).contains(&first);
    let report = format!(
        "{}\nruns 1..5: mean {mean:.0}, CV {:.3}, median {median:.0}, robust sd {robust_sd:.0}; \
         run 0 is {:+.1} % off the median, the 99 % prediction interval ±{:.1} %, the bound ±{:.1} %",
        lines.join("\n"),
        sd / mean,
        off * 100.0,
        interval * 100.0,
        bound * 100.0
    );
    eprintln!("{report}");
    assert!(
        off.abs() <= bound || among_the_rest,
        "run 0 lies outside the rest's range, their 99 % prediction interval and the 5 % quiet-cell tolerance:\n{report}"
    );
}

/// Issue 18's bar for a quiet cell: runs agree within CV 5 %.
const QUIET_CELL_TOLERANCE: f64 = 0.05;

fn median_of(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}
