//! `sysfs-mutex`: many tasks walking and reading sysfs at once, a kernel-mutex workload.
//!
//! Reading a sysfs attribute goes through kernfs, which serialises on kernel mutexes (the open
//! file's mutex, kernfs' open-file and rwsem locks) and allocates a page per open: with many
//! tasks on every CPU, sleeping-lock handoff and optimistic spinning on those mutexes decide
//! the time, and a preempted lock holder (vCPU overcommit) stalls every reader. Seeded by
//! `perf bench locking mutex`-style stress: P × T tasks (`--cpus P --tasks-per-cpu T`), task
//! i pinned to CPU i mod P, each walks `--root` (default /sys/module, symlinks not followed)
//! and reads every regular file, for `--rounds R` rounds or, with `--seconds D`, until D
//! seconds have passed. Files that cannot be opened or read (write-only attributes, EIO,
//! permission) are counted, not fatal.
//!
//! Result: `total_s` (wall time until the last task finished, lower is better; with
//! `--seconds` the progress counts are the result) and per-task durations and file counts.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use serde::{Deserialize, Serialize};

use crate::env::Env;
use crate::metrics::Fairness;
use crate::report::Report;

#[derive(Debug, Clone, ClapArgs, Serialize, Deserialize)]
pub struct Args {
    /// CPUs to spread the tasks over (task i is pinned to CPU i mod P; default: online CPUs).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub cpus: Option<u32>,
    /// Tasks per CPU.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub tasks_per_cpu: u32,
    /// Directory tree to walk and read.
    #[arg(long, default_value = "/sys/module", value_parser = parse_root)]
    pub root: PathBuf,
    /// Full walks per task (ignored with --seconds).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
    /// Run for this many seconds instead of a fixed number of rounds.
    #[arg(long, value_parser = super::ebizzy::parse_seconds)]
    pub seconds: Option<f64>,
}

fn parse_root(s: &str) -> Result<PathBuf, String> {
    if s.is_empty() {
        return Err("an empty path".into());
    }
    Ok(PathBuf::from(s))
}

/// The `sysfs-mutex` workload's fields in the report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SysfsMutexResult {
    pub root: String,
    pub cpus: u32,
    pub tasks_per_cpu: u32,
    pub tasks: u32,
    pub rounds: u32,
    pub seconds: Option<f64>,
    /// Wall seconds from the start barrier until the last task finished.
    pub total_s: f64,
    pub task_s: Vec<f64>,
    pub task_fairness: Fairness,
    /// Files read per task (progress).
    pub files_per_task: Vec<u64>,
    pub files_fairness: Fairness,
    pub rounds_per_task: Vec<u64>,
    pub files_read: u64,
    pub bytes_read: u64,
    pub unreadable: u64,
    pub files_per_sec: f64,
    /// Tasks whose CPU pinning the kernel refused (they ran unpinned).
    pub pin_failures: u32,
}

#[derive(Default)]
struct TaskOutcome {
    files: u64,
    bytes: u64,
    unreadable: u64,
    rounds: u64,
    pinned: bool,
    ns: u64,
    end: Option<Instant>,
}

/// Reads every regular file under `dir` (no symlinks followed).
fn walk(dir: &Path, buf: &mut Vec<u8>, out: &mut TaskOutcome, stop: &AtomicBool) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        out.unreadable += 1;
        return;
    };
    for e in rd.flatten() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            walk(&e.path(), buf, out, stop);
        } else if ft.is_file() {
            buf.clear();
            match std::fs::File::open(e.path()).and_then(|mut f| f.read_to_end(buf)) {
                Ok(n) => {
                    out.files += 1;
                    out.bytes += n as u64;
                }
                Err(_) => out.unreadable += 1,
            }
        }
    }
}

pub fn run(args: &Args) -> anyhow::Result<Report> {
    super::require_dir("root directory", &args.root)?;
    let cpus = args.cpus.unwrap_or(crate::env::online_cpus() as u32).max(1);
    let tasks = cpus * args.tasks_per_cpu;
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(tasks as usize + 1));
    let timed = args.seconds.is_some();
    let rounds = args.rounds;
    let workers: Vec<_> = (0..tasks)
        .map(|i| {
            let (stop, barrier, root) = (Arc::clone(&stop), Arc::clone(&barrier), args.root.clone());
            std::thread::Builder::new()
                .name(format!("sysfs-{i}"))
                .spawn(move || {
                    let mut out = TaskOutcome {
                        pinned: super::pin_to_cpu((i % cpus) as usize),
                        ..Default::default()
                    };
                    let mut buf = Vec::with_capacity(8192);
                    barrier.wait();
                    let t0 = Instant::now();
                    while !stop.load(Ordering::Relaxed) && (timed || out.rounds < rounds as u64) {
                        walk(&root, &mut buf, &mut out, &stop);
                        if !stop.load(Ordering::Relaxed) {
                            out.rounds += 1;
                        }
                    }
                    out.ns = t0.elapsed().as_nanos() as u64;
                    out.end = Some(Instant::now());
                    out
                })
        })
        .collect::<Result<_, _>>()?;
    barrier.wait();
    let start = Instant::now();
    if let Some(s) = args.seconds {
        std::thread::sleep(Duration::from_secs_f64(s));
        stop.store(true, Ordering::Relaxed);
    }
    let outcomes: Vec<TaskOutcome> = workers
        .into_iter()
        .map(|h| {
            h.join()
                .map_err(|_| anyhow::anyhow!("a sysfs-mutex task panicked"))
        })
        .collect::<anyhow::Result<_>>()?;
    // Until the last task finished (not until the joins returned).
    let elapsed = outcomes
        .iter()
        .filter_map(|o| o.end)
        .max()
        .map_or_else(|| start.elapsed(), |end| end.saturating_duration_since(start));
    let files_per_task: Vec<u64> = outcomes.iter().map(|o| o.files).collect();
    let files_read: u64 = files_per_task.iter().sum();
    anyhow::ensure!(
        files_read > 0,
        "no readable file under {} (is it the right root?)",
        args.root.display()
    );
    let task_ns: Vec<u64> = outcomes.iter().map(|o| o.ns).collect();
    let total_s = elapsed.as_secs_f64();
    let result = SysfsMutexResult {
        root: args.root.display().to_string(),
        cpus,
        tasks_per_cpu: args.tasks_per_cpu,
        tasks,
        rounds: args.rounds,
        seconds: args.seconds,
        total_s,
        task_fairness: Fairness::of(&task_ns.iter().map(|&n| n / 1000).collect::<Vec<_>>()),
        task_s: task_ns.iter().map(|&n| super::secs(n)).collect(),
        files_fairness: Fairness::of(&files_per_task),
        files_per_task,
        rounds_per_task: outcomes.iter().map(|o| o.rounds).collect(),
        files_read,
        bytes_read: outcomes.iter().map(|o| o.bytes).sum(),
        unreadable: outcomes.iter().map(|o| o.unreadable).sum(),
        files_per_sec: files_read as f64 / total_s,
        pin_failures: outcomes.iter().filter(|o| !o.pinned).count() as u32,
    };
    Report::new(
        "sysfs-mutex",
        elapsed.as_nanos() as u64,
        Env::read(),
        metrics_of(&result),
        &result,
    )
}

fn metrics_of(r: &SysfsMutexResult) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    m.insert("total_s".into(), r.total_s);
    m.insert("files_per_sec".into(), r.files_per_sec);
    m.insert("task_jain".into(), r.task_fairness.jain);
    m.insert("files_jain".into(), r.files_fairness.jain);
    m.insert("task_max_s".into(), r.task_s.iter().cloned().fold(0.0, f64::max));
    m.insert("unreadable".into(), r.unreadable as f64);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> PathBuf {
        let d = std::env::temp_dir().join(format!("ocrig-sysfs-{}", std::process::id()));
        std::fs::create_dir_all(d.join("a/b")).unwrap();
        std::fs::write(d.join("x"), "1\n").unwrap();
        std::fs::write(d.join("a/y"), "22\n").unwrap();
        std::fs::write(d.join("a/b/z"), "333\n").unwrap();
        let _ = std::os::unix::fs::symlink(&d, d.join("a/loop"));
        d
    }

    #[test]
    fn rounds_mode_reads_every_file_per_round() {
        let root = tree();
        let a = Args {
            cpus: Some(2),
            tasks_per_cpu: 2,
            root: root.clone(),
            rounds: 3,
            seconds: None,
        };
        let report = run(&a).unwrap();
        let r: SysfsMutexResult = report.detail_as().unwrap();
        assert_eq!(r.tasks, 4);
        assert_eq!(r.files_per_task, vec![9; 4]);
        assert_eq!(r.rounds_per_task, vec![3; 4]);
        assert_eq!(r.files_read, 36);
        assert_eq!(r.bytes_read, 4 * 3 * 9);
        assert_eq!(r.unreadable, 0);
        assert!(r.task_s.iter().all(|&t| t <= r.total_s + 1e-3));
        let back: Report = serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
        assert_eq!(back, report);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn timed_mode_on_real_sysfs_counts_unreadable_files() {
        if !Path::new("/sys/module").is_dir() {
            return;
        }
        let a = Args {
            cpus: Some(1),
            tasks_per_cpu: 2,
            root: "/sys/module".into(),
            rounds: 1,
            seconds: Some(0.3),
        };
        let r: SysfsMutexResult = run(&a).unwrap().detail_as().unwrap();
        assert!(r.files_read > 0);
        assert_eq!(r.files_per_task.iter().sum::<u64>(), r.files_read);
    }

    #[test]
    fn missing_root_is_rejected() {
        let a = Args {
            cpus: Some(1),
            tasks_per_cpu: 1,
            root: "/nonexistent/ocrig".into(),
            rounds: 1,
            seconds: None,
        };
        let e = run(&a).unwrap_err();
        assert!(
            e.is::<super::super::BadInput>() && e.to_string().contains("not usable"),
            "{e}"
        );
        assert!(parse_root("").is_err());
    }
}
