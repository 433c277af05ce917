//! A command line as a workload (`command: exec`), on real guests: a shell script of this
//! machine's (a loop of a fixed amount of work), copied into every guest by `guest.files` and
//! run there at the go signal, its metrics read from its output (a pattern) and its wall time; 1-vCPU guests at 0.5x (one guest, a host CPU free) and 1.5x
//! (three guests on two CPUs).
//!
//! Checked: every record carries both metrics, the pattern's value is the loop count the
//! command printed, the exit status was checked, and the work took longer at 1.5x, where each
//! vCPU waits about a third of the time for a host CPU, by a ratio within [1.15, 2.2] of 0.5x's
//! (1.5 with every vCPU busy throughout; the guests' start and end are not perfectly
//! together), over runs the host's other load did not disturb: the sweep waits out other tests'
//! guests (up to 5 min) rather than count a run they slowed. Then a command the guest's shell
//! cannot find stops the sweep as bad input (exit 2) with the shell's words, and nothing is
//! retried.

use std::process::Command;

use serde_json::Value;

use crate::common;

const SCENARIO: &str = r#"
name: exec
description: a shell loop as a workload, its count read from its output and its wall time
host:
  cpus: 2
  backend: qemu
guest:
  vcpus: 1
  memory_mib: 256
  files:
    - {from: SCRIPT, to: /root/bench/loop.sh}
levels: [0.5, 1.5]
variants:
  - {name: base}
workloads:
  - name: loop
    command: exec
    args:
      run: '/root/bench/loop.sh 50000'
    metrics:
      - {name: time_s, wall: true, better: lower}
      - {name: loops, regex: 'loops done: (\d+)', better: higher}
    metric: time_s
runs: 2
background: same
# The full tier boots other tests' guests beside this one: wait out their load (up to 5 min)
# rather than count a run it slowed, which makes 0.5x as slow as 1.5x.
timeouts: {disturbed_wait_s: 300}
"#;

#[test]
#[cfg_attr(not(feature = "full-tests"), ignore = "full tier: boots guests (~40 s)")]
fn a_command_line_runs_in_every_guest_and_its_metrics_come_from_its_output() {
    let _one = common::one_sweep();
    // The benchmark: a script of this machine's, copied into every guest (`guest.files`),
    // executable there as it is here.
    let bench = tempfile::tempdir().unwrap();
    let script = bench.path().join("loop.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\ni=0; while [ $i -lt \"$1\" ]; do i=$((i+1)); done; echo \"loops done: $i\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let scenario = SCENARIO.replace("SCRIPT", script.to_str().unwrap());
    let (_tmp, results) = common::run_scenario("exec.yaml", &scenario);
    let dir = common::results_dir(&results);
    let (header, runs) = common::journal(&dir);
    assert_eq!(header["workloads"]["loop"]["better"], "lower", "{header}");
    let measured: Vec<&Value> = runs
        .iter()
        .filter(|r| r["ok"] == true && r["warmup"] != true && r["guest"] == 0)
        .collect();
    assert_eq!(measured.len(), 4, "two runs at each of two levels");
    // A run counted although other load took the host's CPUs is no measure of the level.
    let disturbed: Vec<&Value> = measured
        .iter()
        .copied()
        .filter(|r| r["extra"]["disturbed"]["counted"] == true)
        .collect();
    assert!(
        disturbed.is_empty(),
        "the host stayed busy through every wait, so these runs measured its other load: {:?}",
        disturbed
            .iter()
            .map(|r| &r["extra"]["disturbed"])
            .collect::<Vec<_>>()
    );
    let mean_time = |level: f64| {
        let t: Vec<f64> = measured
            .iter()
            .filter(|r| r["level"].as_f64() == Some(level))
            .map(|r| r["metrics"]["time_s"].as_f64().unwrap())
            .collect();
        t.iter().sum::<f64>() / t.len() as f64
    };
    for r in &measured {
        assert_eq!(r["metrics"]["loops"], 50000.0, "{r}");
        let checks = r["payload"]["checks"].as_array().unwrap();
        assert!(
            checks
                .iter()
                .any(|c| c["name"] == "exit_status" && c["ok"] == true),
            "{checks:?}"
        );
        assert_eq!(r["payload"]["exit_status"], 0, "{r}");
    }
    let ratio = mean_time(1.5) / mean_time(0.5);
    eprintln!(
        "exec: time_s 0.5x {:.3} s, 1.5x {:.3} s, ratio {ratio:.3}",
        mean_time(0.5),
        mean_time(1.5)
    );
    assert!(
        (1.15..=2.2).contains(&ratio),
        "a CPU-bound command at 1.5x takes about 1.5 times as long as at 0.5x: {ratio}"
    );

    // A command the guest's shell cannot find: bad input, the sweep stops with the shell's
    // words, nothing retried.
    let tmp = tempfile::tempdir().unwrap();
    let bad = scenario.replace("levels: [0.5, 1.5]", "levels: [0.5]").replace(
        "run: '/root/bench/loop.sh 50000'",
        "run: 'no-such-benchmark --threads 4'",
    );
    let path = tmp.path().join("bad.yaml");
    std::fs::write(&path, bad).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ocrig"))
        .args(["run", "--quiet", "--wait-for-cpus", "--results"])
        .arg(tmp.path().join("results"))
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no-such-benchmark") && err.contains("exit 127"),
        "{err}"
    );
}
