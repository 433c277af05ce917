//! The host's foreign load on a set of CPUs between runs: the CPUs' busy time less the CPU time
//! of this sweep's own processes (its guests' QEMUs, every thread, and ocrig), over the CPUs'
//! total time — what a disturbed run waits to fall (`host.max_other_load`).
//!
//! A guest's QEMU thread that ran on a CPU outside the set is taken off all the same, so the
//! figure errs low: a wait can end a little early, never late.

use super::cpu_stat::{StatSnapshot, cpus_delta};

/// Where an attempt's record keeps its foreign load (a share, or `{"unavailable": why}`).
pub const KEY: &str = "foreign_load";
/// Where it keeps the other processes that used the most CPU meanwhile (`[{pid, comm, cpu_s}]`).
pub const BUSIEST_KEY: &str = "foreign_busiest";
/// Where it keeps [`named_share`].
pub const NAMED_KEY: &str = "foreign_named";

/// CPU time of `pid` (all its threads, and its children it has waited for: ocrig's `cp`,
/// `mkfs`, `ssh`), ticks; None once it is gone.
fn process_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the ")" that ends the command name start at field 3; utime, stime, cutime
    // and cstime are 14 to 17.
    let f: Vec<u64> = stat
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .skip(11)
        .take(4)
        .map(|v| v.parse::<i64>().map(|v| v.max(0) as u64))
        .collect::<Result<_, _>>()
        .ok()?;
    Some(f.iter().sum())
}

/// A reading to take the next one against.
pub struct LoadMark {
    stat: StatSnapshot,
    own_ticks: u64,
    own: Vec<u32>,
    /// Every other process's CPU ticks then, to name what ran meanwhile.
    others: std::collections::HashMap<u32, u64>,
    at: std::time::Instant,
}

/// Every process's (pid, command, CPU ticks) now.
fn all_processes() -> Vec<(u32, String, u64)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (head, rest) = stat.rsplit_once(')')?;
            let comm = head.split_once('(')?.1.to_string();
            let mut f = rest.split_whitespace().skip(11);
            let ticks = f.next()?.parse::<u64>().ok()? + f.next()?.parse::<u64>().ok()?;
            Some((pid, comm, ticks))
        })
        .collect()
}

/// The CPU time every other process still alive used since `since`, as a share of `cpus`
/// CPUs' time since then: the part of the foreign load a process can be named for. (The rest
/// is time of processes that started or ended in between, which /proc no longer or not yet
/// shows apart — on a quiet host, mostly this sweep's own short-lived work.)
pub fn named_share(since: &LoadMark, cpus: usize) -> f64 {
    let used: u64 = all_processes()
        .into_iter()
        .filter(|(pid, _, _)| !since.own.contains(pid))
        .filter_map(|(pid, _, ticks)| ticks.checked_sub(*since.others.get(&pid)?))
        .sum();
    let span = since.at.elapsed().as_secs_f64() * cpus.max(1) as f64;
    if span <= 0.0 {
        return 0.0;
    }
    (used as f64 / 100.0 / span).clamp(0.0, 1.0)
}

/// The processes other than the own ones that used the most CPU since `since`, most first:
/// `(pid, command, seconds)`, at most `n`, none under 10 ms.
pub fn busiest_others(since: &LoadMark, n: usize) -> Vec<(u32, String, f64)> {
    let mut used: Vec<(u32, String, f64)> = all_processes()
        .into_iter()
        .filter(|(pid, _, _)| !since.own.contains(pid))
        .filter_map(|(pid, comm, ticks)| {
            let before = since.others.get(&pid).copied().unwrap_or(0);
            let d = ticks.checked_sub(before)?;
            (d > 0).then(|| (pid, comm, d as f64 / 100.0))
        })
        .collect();
    used.sort_by(|a, b| b.2.total_cmp(&a.2));
    used.truncate(n);
    used
}

/// Marks now: the host's /proc/stat and the CPU time of `own` (pids) and of this process.
pub fn mark(own: &[u32]) -> Result<LoadMark, String> {
    let mut own = own.to_vec();
    own.push(std::process::id());
    let others = all_processes()
        .into_iter()
        .filter(|(pid, _, _)| !own.contains(pid))
        .map(|(pid, _, ticks)| (pid, ticks))
        .collect();
    Ok(LoadMark {
        stat: StatSnapshot::host()?,
        own_ticks: own.iter().filter_map(|&p| process_ticks(p)).sum(),
        own,
        others,
        at: std::time::Instant::now(),
    })
}

/// The foreign share of `cpus`' time since `since`, in [0, 1]. Err: the CPUs' time could not
/// be read, or none passed.
pub fn foreign_since(since: &LoadMark, cpus: &[usize]) -> Result<f64, String> {
    let now = StatSnapshot::host()?;
    let own_now: u64 = since.own.iter().filter_map(|&p| process_ticks(p)).sum();
    let split = cpus_delta(&since.stat, &now, cpus)?;
    let s = &split.sum;
    let total = (s.user + s.system + s.idle + s.steal) as f64;
    if total <= 0.0 {
        return Err("no time passed on the CPUs".into());
    }
    // A process that ended between the marks takes its ticks with it: never below 0.
    let own = own_now.saturating_sub(since.own_ticks) as f64;
    Ok((((s.user + s.system) as f64 - own) / total).clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_busy_time_is_not_foreign_and_a_busy_stranger_is() {
        // Every CPU this process may use, so the time its other threads (other tests) spend
        // is inside the set it is taken off: a sweep's own processes run on its CPUs.
        let cpus = crate::host::allowed_cpus();
        let cpu = cpus[0];
        // Guests other tests of this binary run are this process's own, as in a sweep.
        let own = || crate::backend::live::pids();
        // This process busy on the CPU: its own time, taken off.
        let m = mark(&own()).unwrap();
        std::thread::spawn(move || {
            let mut set = rustix::thread::CpuSet::new();
            set.set(cpu);
            rustix::thread::sched_setaffinity(None, &set).unwrap();
            let end = std::time::Instant::now() + std::time::Duration::from_millis(500);
            while std::time::Instant::now() < end {
                std::hint::black_box(0u64);
            }
        })
        .join()
        .unwrap();
        let own_load = foreign_since(&m, &cpus).unwrap();
        // A stranger (not named as own) busy on the same CPU: foreign, as much as it ran.
        let m = mark(&own()).unwrap();
        let t = std::time::Instant::now();
        let mut stranger = std::process::Command::new("taskset")
            .args(["-c", &cpu.to_string(), "sh", "-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(500));
        let ran = process_ticks(stranger.id()).unwrap() as f64 / 100.0;
        stranger.kill().unwrap();
        // Read before it is reaped: a reaped child's time is its parent's (cutime), and this
        // process is its parent.
        let foreign = foreign_since(&m, &cpus).unwrap();
        stranger.wait().unwrap();
        let expected = ran / t.elapsed().as_secs_f64() / cpus.len() as f64;
        assert!(
            expected > 0.2 / cpus.len() as f64,
            "the stranger hardly ran: {ran} s"
        );
        assert!(
            foreign >= expected * 0.8 - 0.05,
            "a stranger that had {expected:.2} of the CPU read as {foreign:.2}"
        );
        assert!(
            own_load < foreign,
            "own busy time read as {own_load:.2}, the stranger's {foreign:.2}"
        );
    }
}
