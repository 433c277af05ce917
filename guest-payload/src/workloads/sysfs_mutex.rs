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
//! Result: `total_s` (wall time from the start — stamped before any task was released — until
//! the last task finished, lower is better; with `--seconds` the progress counts are the
//! result), per-task durations, file counts and context switches, and `jain`: Jain's index of
//! the files each task had read when the first task finished (with `--seconds`, when time was
//! up). The payload takes no user-space lock here (the locks are the kernel's), so there is no
//! owner-identity check and no futex count.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use serde::{Deserialize, Serialize};

use super::start::StartGate;
use crate::env::Env;
use crate::metrics::{Ctxsw, Fairness};
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
    /// Wall seconds from the start until the last task finished.
    pub total_s: f64,
    /// Per task: seconds from the start until it finished.
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
    /// Per task: files read when the first task finished (or when time was up).
    pub progress_at_first_finish: Vec<u64>,
    pub progress_fairness: Fairness,
    /// Per task: context switches during its walks.
    pub threads_ctxsw: Vec<Ctxsw>,
}

#[derive(Default)]
struct TaskOutcome {
    files: u64,
    bytes: u64,
    unreadable: u64,
    rounds: u64,
    pinned: bool,
    at_first_finish: Option<u64>,
    ctxsw: Ctxsw,
    end: Option<Instant>,
    /// Thread CPU time from the gate to `end`.
    cpu_ns: u64,
}

/// The flags every task watches while walking.
struct Flags {
    /// Time is up (`--seconds`).
    stop: AtomicBool,
    /// Some task has finished its rounds.
    first_done: AtomicBool,
}

/// Reads every regular file under `dir` (no symlinks followed).
fn walk(dir: &Path, buf: &mut Vec<u8>, out: &mut TaskOutcome, flags: &Flags) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        out.unreadable += 1;
        return;
    };
    for e in rd.flatten() {
        if flags.stop.load(Ordering::Relaxed) {
            return;
        }
        if out.at_first_finish.is_none() && flags.first_done.load(Ordering::Relaxed) {
            out.at_first_finish = Some(out.files);
        }
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            walk(&e.path(), buf, out, flags);
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

/// One task: pinned, parked at the gate, then its walks.
fn task(i: u32, cpus: u32, root: &Path, rounds: Option<u32>, flags: &Flags, gate: &StartGate) -> TaskOutcome {
    let mut out = TaskOutcome {
        pinned: super::pin_to_cpu((i % cpus) as usize),
        ..Default::default()
    };
    let mut buf = Vec::with_capacity(8192);
    gate.arrive();
    let cpu0 = crate::clock::thread_cpu_ns();
    let before = Ctxsw::this_thread();
    while !flags.stop.load(Ordering::Relaxed) && rounds.is_none_or(|r| out.rounds < r as u64) {
        walk(root, &mut buf, &mut out, flags);
        if !flags.stop.load(Ordering::Relaxed) {
            out.rounds += 1;
        }
    }
    out.end = Some(Instant::now());
    out.cpu_ns = crate::clock::thread_cpu_ns().saturating_sub(cpu0);
    flags.first_done.store(true, Ordering::Relaxed);
    out.at_first_finish.get_or_insert(out.files);
    out.ctxsw = Ctxsw::this_thread().since(before);
    out
}

pub fn run(args: &Args) -> anyhow::Result<Report> {
    super::require_dir("root directory", &args.root)?;
    let cpus = args.cpus.unwrap_or(crate::env::online_cpus() as u32).max(1);
    let tasks = cpus * args.tasks_per_cpu;
    let flags = Arc::new(Flags {
        stop: AtomicBool::new(false),
        first_done: AtomicBool::new(false),
    });
    let gate = Arc::new(StartGate::new(tasks as usize));
    let rounds = args.seconds.is_none().then_some(args.rounds);
    let workers: Vec<_> = (0..tasks)
        .map(|i| {
            let (flags, gate, root) = (Arc::clone(&flags), Arc::clone(&gate), args.root.clone());
            std::thread::Builder::new()
                .name(format!("sysfs-{i}"))
                .spawn(move || task(i, cpus, &root, rounds, &flags, &gate))
        })
        .collect::<Result<_, _>>()?;
    let start = gate.open();
    if let Some(s) = args.seconds {
        std::thread::sleep(Duration::from_secs_f64(s));
        flags.stop.store(true, Ordering::Relaxed);
    }
    let outcomes: Vec<TaskOutcome> = workers
        .into_iter()
        .map(|h| {
            h.join()
                .map_err(|_| anyhow::anyhow!("a sysfs-mutex task panicked"))
        })
        .collect::<anyhow::Result<_>>()?;
    crate::probe::window_close();
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
    let task_ns: Vec<u64> = outcomes
        .iter()
        .map(|o| {
            o.end
                .map_or(0, |e| e.saturating_duration_since(start).as_nanos() as u64)
        })
        .collect();
    let progress: Vec<u64> = outcomes
        .iter()
        .map(|o| o.at_first_finish.unwrap_or(o.files))
        .collect();
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
        progress_fairness: Fairness::of(&progress),
        progress_at_first_finish: progress,
        threads_ctxsw: outcomes.iter().map(|o| o.ctxsw).collect(),
    };
    let env = Env::read();
    let window_cpu_ns = outcomes.iter().map(|o| o.cpu_ns).sum();
    let checks = vec![crate::checks::cpu_within_elapsed(
        window_cpu_ns,
        elapsed.as_nanos() as u64,
        env.cpus_allowed,
    )];
    Ok(Report::new(
        "sysfs-mutex",
        elapsed.as_nanos() as u64,
        env,
        metrics_of(&result),
        &result,
    )?
    .with_checks(checks))
}

fn metrics_of(r: &SysfsMutexResult) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    m.insert("total_s".into(), r.total_s);
    m.insert("files_per_sec".into(), r.files_per_sec);
    m.insert("task_jain".into(), r.task_fairness.jain);
    m.insert("files_jain".into(), r.files_fairness.jain);
    m.insert("task_max_s".into(), r.task_s.iter().cloned().fold(0.0, f64::max));
    m.insert("unreadable".into(), r.unreadable as f64);
    m.insert("jain".into(), r.progress_fairness.jain);
    Ctxsw::insert_metrics(&r.threads_ctxsw, &mut m);
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
        assert!(r.task_s.iter().all(|&t| t <= r.total_s + 1e-9));
        assert_eq!(r.progress_at_first_finish.len(), 4);
        assert!(r.progress_at_first_finish.iter().all(|&f| f <= 9));
        assert!(
            r.progress_at_first_finish.contains(&9),
            "the first finisher read all"
        );
        assert_eq!(report.metrics["jain"], r.progress_fairness.jain);
        assert_eq!(r.threads_ctxsw.len(), 4);
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
