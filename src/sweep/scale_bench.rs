//! The big-host benchmark (a benchmark, not a test: it asserts nothing about time; run it with
//! `scripts/bench-scale`). A 192-CPU host at 0.5x..2.5x with 1-vCPU guests (96..480 guests per
//! attempt), 10 variants × 5 levels × `OCRIG_BENCH_RUNS` runs (10 by default; 70 gives about a
//! million records) through the real scheduler, journal and accounting, the mock executor
//! answering every guest with a full lock report and per-vCPU telemetry and the host with its
//! per-CPU /proc/stat split. Prints the orchestrator's time per appended record at 1k, 100k
//! and 1M records (from when each attempt's run call arrived), its CPU time per guest-run, the
//! journal's bytes per record, and the streamed report's time over that journal.

use std::time::Instant;

use super::plan::Plan;
use super::progress::Progress;
use super::scheduler::{HostShare, SharedJournal, run_with};
use crate::executor::mock::{MockExecutor, Script};
use crate::journal::JournalWriter;

fn cpu_seconds() -> f64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

/// The process's peak resident memory so far, KiB.
fn max_rss_kib() -> i64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    u.ru_maxrss
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "a benchmark: scripts/bench-scale runs it"]
async fn big_host_192_cpus_480_guests() {
    let runs: u32 = std::env::var("OCRIG_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let variants: String = (0..10)
        .map(|i| format!("  - {{name: v{i}, args: {{hold-ns: {}}}}}\n", 200 + i))
        .collect();
    let scenario: crate::scenario::Scenario = yaml_serde::from_str(&format!(
        "name: big-host\nhost: {{cpus: 192}}\nguest: {{vcpus: 1}}\nlevels: [0.5, 1.0, 1.5, 2.0, 2.5]\nvariants:\n{variants}workloads:\n  - command: lock\n    metric: ops_per_sec\n    args: {{threads: 1}}\nruns: {runs}\n"
    ))
    .expect("scenario");
    let cpus: Vec<usize> = (0..192).collect();
    let plan = Plan::build(&scenario, &cpus, 1).expect("plan");
    let dir =
        tempfile::tempdir_in(std::env::var("OCRIG_BENCH_DIR").unwrap_or_else(|_| "/tmp".into())).unwrap();
    let exec = MockExecutor::new(
        "ops_per_sec",
        Script {
            realistic_host_cpus: Some(192),
            value: Some(Box::new(|n, _| 1000.0 + (n % 13) as f64)),
            ..Default::default()
        },
    );
    let calls = exec.calls.clone();
    let progress = Progress::new(plan.total_runs(), true);
    let mut writer = JournalWriter::open(dir.path()).unwrap();
    let mut header = crate::testing::header();
    header.baseline = "v0".into();
    header.variants = (0..10).map(|i| format!("v{i}")).collect();
    header.levels = scenario.levels.clone();
    header.runs_on.host_cpus = cpus.clone();
    header.workloads.insert(
        plan.boots[0].cells[0].workload.id.clone(),
        crate::journal::WorkloadInfo {
            command: "lock".into(),
            metric: "ops_per_sec".into(),
            better: crate::journal::Better::Higher,
            loosened_bounds: Vec::new(),
        },
    );
    writer
        .append(&crate::journal::Entry::Sweep(Box::new(header)))
        .unwrap();
    let journal = SharedJournal::new(writer, Vec::new());
    let (t0, cpu0) = (Instant::now(), cpu_seconds());
    run_with(&plan, exec, &journal, &progress, HostShare::only())
        .await
        .unwrap();
    let (wall, cpu) = (t0.elapsed().as_secs_f64(), cpu_seconds() - cpu0);
    let calls = calls.lock().unwrap().clone();
    // Records appended by the end of each attempt, and the time each attempt took (from its run
    // call to the next one's: scheduling, record building, journaling, settling).
    let sizes: Vec<usize> = calls
        .runs
        .iter()
        .map(|(_, argv)| argv.iter().flatten().count())
        .collect();
    let records: usize = sizes.iter().sum();
    let mut done = 0usize;
    let mut at = Vec::new();
    for (pair, size) in calls.run_started.windows(2).zip(&sizes) {
        done += size;
        let dt = (pair[1] - pair[0]).as_secs_f64();
        at.push((done, dt / (*size).max(1) as f64));
    }
    println!(
        "big host: 192 CPUs, 10 variants x 5 levels x {runs} runs, {} attempts, {records} records",
        calls.runs.len()
    );
    for mark in [1_000usize, 10_000, 100_000, 1_000_000] {
        // The mean over the attempts around the mark (a window of 20).
        let Some(i) = at.iter().position(|(n, _)| *n >= mark) else {
            continue;
        };
        let w = &at[i.saturating_sub(10)..(i + 10).min(at.len())];
        let us = w.iter().map(|(_, t)| t).sum::<f64>() / w.len() as f64 * 1e6;
        println!("  time per appended record at {mark:>9} records: {us:8.1} µs");
    }
    let bytes = std::fs::metadata(dir.path().join(crate::journal::JOURNAL_FILE))
        .unwrap()
        .len();
    println!(
        "  orchestrator per guest-run: {:.1} µs CPU, {:.1} µs wall ({wall:.1} s wall, {cpu:.1} s CPU in all)",
        cpu / records as f64 * 1e6,
        wall / records as f64 * 1e6
    );
    println!(
        "  journal: {bytes} bytes, {} bytes per record; peak RSS {:.0} MiB",
        bytes / records.max(1) as u64,
        max_rss_kib() as f64 / 1024.0
    );
    let t = Instant::now();
    let digested = crate::stats::digest::Digested::read(dir.path(), false).unwrap();
    let model = crate::stats::cells::build_digested(&digested, 0.05, None);
    println!(
        "  report model over it (streamed): {:.2} s for {} records, {} cells",
        t.elapsed().as_secs_f64(),
        digested.runs.len(),
        model
            .workloads
            .iter()
            .map(|w| w.series.len() * model.levels.len())
            .sum::<usize>()
    );
}
