//! The findings ocrig was built from, reproduced small on real guests (issue 35), each asserted
//! where this host's measurement supports it and reported (with its interval) where it does
//! not. The full-size scenarios are scenarios/reproductions/seed00*.yaml;
//! `scripts/reproduce-seeds` runs them and writes the side-by-side summary.
//!
//! - **Mutex paradox** (seed000): a small sleep on the contended path only. Asserted: contended
//!   acquisitions fall by 2x and more at every level. Reported: the time ratio, and the same
//!   for the guest kernel's lock trace events switched on.
//! - **Adaptive spinning** (seed001): the seed's 1000 / 10 000 loop (its empty loop is in the
//!   full-size scenario). Asserted: adaptive makes a smaller share of its lock calls into
//!   system calls at every level, and that advantage shrinks at 2x (spinning on a preempted
//!   owner's vCPU runs out its budget). Reported: Kiter/s both ways, and the first and last
//!   thread's finish times.
//! - **Kernel mutexes from sysfs** (seed002): a guest kernel profile per cell. Asserted: the
//!   share of samples spent waiting for kernel locks (slow paths, spinning on the owner) rises
//!   from 1x to 2x. Reported: the share in all locking functions (it rose in every sweep here,
//!   by 7-18 %, too little to assert at 3 runs) and the top symbols (under TCG the emulated
//!   `rep stosb` of sysfs' page clearing, `memset_erms`, tops them; under KVM it does not).
//! - **qspinlock overcommit table** (seed004): base vs the spin-first kernel (64 trylocks before
//!   the qspinlock slow path), hackbench / ebizzy / dbench at 1x-3x in 2-vCPU guests. Asserted:
//!   the table is complete, each row with an interval and a conclusion. No direction: there are
//!   no PV spinlocks under emulation.

use std::path::Path;
use std::time::Instant;

use serde_json::Value;

use crate::common;

/// The small reproductions whose variants share guests make each level's runs on one bring-up:
/// they are about a mechanism within a run, not retention, and a level's second bring-up (the
/// default at two levels) would only cost time.
const ONE_BRING_UP: &str = "schedule: {bring_ups_per_level: 1}\n";

/// A sweep's report (`report.json`) and counted runs (ok, not warm-ups), and its text report.
struct Sweep {
    report: Value,
    runs: Vec<Value>,
    text: String,
}

fn sweep(file: &str, scenario: &str) -> Sweep {
    let t0 = Instant::now();
    let (_tmp, results) = common::run_scenario(file, scenario);
    eprintln!("{file}: sweep took {:.1} s", t0.elapsed().as_secs_f64());
    let dir = common::results_dir(&results);
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    let (_, records) = common::journal(&dir);
    let runs = records
        .into_iter()
        .filter(|r| r["type"] == "run" && r["ok"] == true && r["warmup"] != true)
        .collect();
    let text = report_text(&dir);
    Sweep {
        report: serde_json::from_str(&read("report.json")).unwrap(),
        runs,
        text,
    }
}

/// `ocrig report DIR` as a user reads it.
fn report_text(dir: &Path) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ocrig"))
        .arg("report")
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

impl Sweep {
    fn workload(&self, name: &str) -> &Value {
        self.report["workloads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["workload"] == name)
            .unwrap_or_else(|| panic!("no workload {name} in the report"))
    }

    /// The comparison row of `variant` against the baseline at `level`, checked to carry a
    /// ratio inside its interval and a conclusion; returns (row, "ratio [low, high] conclusion").
    fn row(&self, workload: &str, variant: &str, level: f64) -> (&Value, String) {
        let cmp = self.workload(workload)["comparisons"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["variant"] == variant)
            .unwrap_or_else(|| panic!("no comparison of {variant} in {workload}"));
        let row = cmp["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["level"] == level)
            .unwrap_or_else(|| panic!("{workload}: {variant} has no row at {level}x: {cmp}"));
        let (ratio, low, high) = common::checked_effect(row);
        let conclusion = row["conclusion"].as_str().unwrap();
        assert!(
            ["differs", "equivalent", "not-concluded"].contains(&conclusion),
            "{row}"
        );
        (row, format!("{ratio:.3} [{low:.3}, {high:.3}] {conclusion}"))
    }

    /// A series cell's field (`contention_rate`, …) for `variant` at `level`.
    fn cell(&self, workload: &str, variant: &str, level: f64, field: &str) -> f64 {
        let series = self.workload(workload)["series"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["variant"] == variant)
            .unwrap();
        let cell = series["cells"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["level"] == level)
            .unwrap();
        cell[field]
            .as_f64()
            .unwrap_or_else(|| panic!("{workload} {variant} {level}x: no {field} in {cell}"))
    }

    /// The mean over the counted runs of `variant` at `level` of a payload metric.
    fn mean(&self, workload: &str, variant: &str, level: f64, metric: &str) -> f64 {
        let v: Vec<f64> = self
            .runs
            .iter()
            .filter(|r| r["workload"] == workload && r["variant"] == variant && r["level"] == level)
            .map(|r| {
                r["payload"]["metrics"][metric]
                    .as_f64()
                    .unwrap_or_else(|| panic!("no {metric} in {}", r["payload"]["metrics"]))
            })
            .collect();
        assert!(v.len() >= 2, "{workload} {variant} {level}x: {} runs", v.len());
        v.iter().sum::<f64>() / v.len() as f64
    }
}

#[test]
#[cfg_attr(not(feature = "full-tests"), ignore = "full tier: boots guests (~39 s)")]
fn the_mutex_paradoxs_slower_contended_path_cuts_contended_acquisitions() {
    let _one = common::one_sweep();
    let s = sweep(
        "seed000-small.yaml",
        &[
            "name: seed000-small\nhost: {cpus: 2, backend: qemu}\nguest: {vcpus: 2, memory_mib: 384}\n\
         levels: [1.0, 2.0]\nvariants:\n  - {name: base, baseline: true}\n\
         \x20 - {name: slow-contended, args: {contended-sleep-ns: 1000}}\n\
         \x20 - {name: lock-traced, trace_events: [lock:contention_begin, lock:contention_end]}\n\
         workloads:\n  - name: mutex\n    command: mutex\n\
         \x20   args: {algo: pthread, acquire: trylock-first, threads: 4, num: 1, locks: 100000, loops: 100}\n\
         \x20   metric: time_s\n    better: lower\nruns: 4\n",
            ONE_BRING_UP,
        ]
        .concat(),
    );
    for level in [1.0, 2.0] {
        let base = s.cell("mutex", "base", level, "contention_rate");
        let slow = s.cell("mutex", "slow-contended", level, "contention_rate");
        let traced = s.cell("mutex", "lock-traced", level, "contention_rate");
        let (_, time) = s.row("mutex", "slow-contended", level);
        let (_, traced_time) = s.row("mutex", "lock-traced", level);
        eprintln!(
            "{level}x: slow-contended / base time {time}, contended {slow:.4} vs {base:.4} ({:.1}x fewer); \
             lock-traced / base time {traced_time}, contended {traced:.4}",
            base / slow
        );
        // The seed's mechanism: a slower contended path halves (here: far more) the contended
        // acquisitions, whatever it does to the time.
        assert!(slow * 2.0 <= base, "{level}x: contended {slow} vs {base}");
    }
}

/// What the seed's adaptive spinning does that holds on any host: far fewer lock calls enter
/// the kernel, at 1x and at 2x. Whether it keeps less of that edge at 2x (its spins on a
/// preempted owner running out) is printed, not asserted: in this small form under TCG the
/// 2x / 1x ratio of the edge was 0.58, 0.83, 1.19 and 1.21 in four runs (2026-12-07), and a
/// test asserting it above 1 failed two of the last nine full tiers.
#[test]
#[cfg_attr(not(feature = "full-tests"), ignore = "full tier: boots guests (~25 s)")]
fn adaptive_spinning_makes_fewer_lock_syscalls_at_every_level() {
    let _one = common::one_sweep();
    let s = sweep(
        "seed001-small.yaml",
        &[
            "name: seed001-small\nhost: {cpus: 2, backend: qemu}\nguest: {vcpus: 2, memory_mib: 384}\n\
         levels: [1.0, 2.0]\nvariants:\n  - {name: plain, baseline: true, args: {mode: plain}}\n\
         \x20 - {name: adaptive, args: {mode: adaptive}}\nworkloads:\n\
         \x20 - {name: work, command: futexlock, args: {threads: 8, iterations: 5000, hold: 1000, gap: 10000}, metric: kiter_per_sec, better: higher}\n\
         runs: 6\n",
            ONE_BRING_UP,
        ]
        .concat(),
    );
    let mut edge = Vec::new();
    for level in [1.0, 2.0] {
        let (_, kiter) = s.row("work", "adaptive", level);
        let line: Vec<String> = ["plain", "adaptive"]
            .iter()
            .map(|v| {
                format!(
                    "{v} lock syscalls {:.2} %, unlock syscalls {:.2} %, last/first finish {:.3}",
                    s.mean("work", v, level, "lock_syscall_pct"),
                    s.mean("work", v, level, "unlock_syscall_pct"),
                    s.mean("work", v, level, "finish_spread"),
                )
            })
            .collect();
        eprintln!("{level}x: adaptive / plain Kiter/s {kiter}; {}", line.join("; "));
        let plain = s.mean("work", "plain", level, "lock_syscall_pct");
        let adaptive = s.mean("work", "adaptive", level, "lock_syscall_pct");
        // 0.23–0.48 of plain's in eight cells of this test (2026-12-05..07).
        assert!(
            adaptive < 0.75 * plain,
            "{level}x: lock syscalls {adaptive} % vs {plain} %"
        );
        edge.push(adaptive / plain);
        // The seed's fairness question is answered in every run: the first and last finisher.
        for r in s.runs.iter().filter(|r| r["level"] == level) {
            let m = &r["payload"]["metrics"];
            let (first, last) = (
                m["thread_time_min_s"].as_f64().unwrap(),
                m["thread_time_max_s"].as_f64().unwrap(),
            );
            assert!(0.0 < first && first <= last, "{m}");
            assert!((m["finish_spread"].as_f64().unwrap() - last / first).abs() < 1e-9);
        }
    }
    // Spinning on an owner whose vCPU was preempted runs out its budget and sleeps after all:
    // reported, as this host does not show it reliably (the doc above).
    eprintln!(
        "adaptive / plain lock syscall share: 1x {:.3}, 2x {:.3} (2x / 1x {:.2})",
        edge[0],
        edge[1],
        edge[1] / edge[0]
    );
}

#[test]
#[cfg_attr(not(feature = "full-tests"), ignore = "full tier: boots guests (~157 s)")]
fn waiting_for_kernel_locks_from_sysfs_walks_grows_in_the_guest_profile_under_overcommit() {
    let _one = common::one_sweep();
    let s = sweep(
        "seed002-small.yaml",
        &[
            "name: seed002-small\nhost: {cpus: 2, backend: qemu}\nguest: {vcpus: 2, memory_mib: 384}\n\
         levels: [1.0, 2.0]\nvariants:\n  - {name: base, baseline: true, profile: {rate_hz: 999}}\n\
         workloads:\n  - name: sysfs-mutex\n    command: sysfs-mutex\n\
         \x20   args: {cpus: 2, tasks-per-cpu: 4, seconds: 3}\n    metric: files_per_sec\n    better: higher\nruns: 3\n",
            ONE_BRING_UP,
        ]
        .concat(),
    );
    let cells = s.report["kernel_symbols"].as_array().unwrap();
    let share = |level: f64| {
        let c = cells
            .iter()
            .find(|c| c["level"] == level)
            .unwrap_or_else(|| panic!("no profile at {level}x"));
        let l = &c["locking"];
        let top: Vec<String> = c["top"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                format!(
                    "{} {:.1}%",
                    t["symbol"].as_str().unwrap(),
                    t["share"].as_f64().unwrap() * 100.0
                )
            })
            .collect();
        let locking: Vec<String> = l["top"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                format!(
                    "{} {:.2}%",
                    t["symbol"].as_str().unwrap(),
                    t["share"].as_f64().unwrap() * 100.0
                )
            })
            .collect();
        eprintln!(
            "{level}x: locking {:.2} % of {} samples, waiting {:.2} % ({}); top {}",
            l["share"].as_f64().unwrap() * 100.0,
            l["of_samples"],
            l["waiting_share"].as_f64().unwrap() * 100.0,
            locking.join(", "),
            top.join(", ")
        );
        assert_eq!(l["of_samples"], c["samples"]);
        l["waiting_share"].as_f64().unwrap()
    };
    let (one, two) = (share(1.0), share(2.0));
    assert!(one > 0.0, "no lock wait sampled at 1x");
    // The spinlock slow path alone: 0.47-0.59 % at 1x, 0.79-1.07 % at 2x in five sweeps here.
    assert!(two > one, "lock waiting share 1x {one:.4}, 2x {two:.4}");
    assert!(s.text.contains("kernel locking functions"), "{}", s.text);
}

#[test]
#[cfg_attr(not(feature = "full-tests"), ignore = "full tier: boots guests (~136 s)")]
fn the_spin_first_qspinlock_table_is_complete_at_every_level() {
    let _one = common::one_sweep();
    let trees = common::test_kernel_trees();
    let (base, spinfirst) = (&trees["base"], &trees["spinfirst"]);
    common::validate_shipped_with_trees(
        "reproductions/seed004-spinfirst.yaml",
        &[("/srv/kernels/base", base), ("/srv/kernels/spinfirst", spinfirst)],
    );
    let s = sweep(
        "seed004-small.yaml",
        &format!(
            "name: seed004-small\nhost: {{cpus: 2, backend: qemu}}\n\
             guest: {{vcpus: 2, memory_mib: 384, scratch_disk_mib: 128}}\nlevels: [1.0, 2.0, 3.0]\n\
             variants:\n  - {{name: base, baseline: true, kernel: {{tree: {}}}}}\n\
             \x20 - {{name: spinfirst, kernel: {{tree: {}}}}}\nworkloads:\n\
             \x20 - {{name: hackbench, command: hackbench, args: {{groups: 1, loops: 30}}, metric: time_s, better: lower}}\n\
             \x20 - {{name: ebizzy, command: ebizzy, args: {{seconds: 1}}, metric: records_per_sec, better: higher}}\n\
             \x20 - {{name: dbench, command: dbench, args: {{clients: 2, seconds: 1, dir: /scratch}}, metric: mb_per_sec, better: higher}}\n\
             runs: 2\n",
            base.display(),
            spinfirst.display()
        ),
    );
    for w in ["hackbench", "ebizzy", "dbench"] {
        for level in [1.0, 2.0, 3.0] {
            let (row, words) = s.row(w, "spinfirst", level);
            // Two bring-ups a side, paired block by block.
            assert_eq!(
                (&row["effect"]["unit"], &row["effect"]["n_base"]),
                (&Value::from("block"), &Value::from(2)),
                "{row}"
            );
            eprintln!("{w} {level}x: spinfirst / base {words}");
        }
        // The seed's layout: base, stdev, patched, stdev, %improvement per level.
        let title = format!("{w}: spinfirst vs base");
        // The workload's tables, up to the next workload's: a table wider than 120 columns (an
        // interval as wide as [6.1e-26, 1.3e25] at one bring-up pair) goes on in a second one.
        let table = s
            .text
            .split(&title)
            .nth(1)
            .unwrap_or_else(|| panic!("no {title} table:\n{}", s.text))
            .split(": spinfirst vs base")
            .next()
            .unwrap();
        for col in [
            "base",
            "stdev",
            "spinfirst",
            "%improvement",
            "ratio [CI]",
            "conclusion",
        ] {
            // (The header rows, after the title, which says the intervals' level, and the rule.)
            assert!(
                table.lines().any(|l| l.starts_with("| oc ") && l.contains(col)),
                "{col}: {table}"
            );
        }
    }
    eprintln!("{}", s.text);
}
