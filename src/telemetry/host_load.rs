//! The host's foreign load on a set of CPUs between runs: the CPUs' busy time less the CPU time
//! of this sweep's own processes (its guests' QEMUs, every thread, and ocrig), over the CPUs'
//! total time — what a disturbed run waits to fall (`host.max_other_load`).
//!
//! A guest's QEMU thread that ran on a CPU outside the set is taken off all the same, so the
//! figure errs low: a wait can end a little early, never late.

use std::collections::{HashMap, HashSet};

use super::cpu_stat::{StatSnapshot, cpus_delta};

/// Where an attempt's record keeps its foreign load (a share, or `{"unavailable": why}`).
pub const KEY: &str = "foreign_load";
/// Where it keeps the other processes that used the most CPU meanwhile (`[{pid, comm, cpu_s}]`).
pub const BUSIEST_KEY: &str = "foreign_busiest";
/// Why a remote host's runs hold no reading (`{"unavailable": REMOTE}`).
pub const REMOTE: &str = "a remote host: ocrig reads this machine's processes only";
/// Where it keeps [`Reading::named`].
pub const NAMED_KEY: &str = "foreign_named";

/// One process as /proc/<pid>/stat has it, CPU times in ticks.
struct ProcStat {
    comm: String,
    /// utime + stime: all its threads. (Not its reaped children's: a guest's QEMU reaped in
    /// between would bring its whole life's time with it; ocrig's short-lived `cp` and `mkfs`
    /// are foreign time no running process is named for, which [`Reading::named`] leaves out.)
    ticks: u64,
}

/// Every process now, by pid: one pass over /proc.
fn processes() -> HashMap<u32, ProcStat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return HashMap::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (head, rest) = stat.rsplit_once(')')?;
            // Fields after the ")" that ends the command name start at field 3; utime and
            // stime are 14 and 15.
            let mut f = rest.split_whitespace().skip(11);
            let ticks = f.next()?.parse::<u64>().ok()? + f.next()?.parse::<u64>().ok()?;
            Some((
                pid,
                ProcStat {
                    comm: head.split_once('(')?.1.to_string(),
                    ticks,
                },
            ))
        })
        .collect()
}

/// A reading to take the next one against.
pub struct LoadMark {
    stat: StatSnapshot,
    /// This sweep's own processes: its guests' and this one.
    own: HashSet<u32>,
    own_ticks: u64,
    /// Every other process's CPU ticks then, to name what ran meanwhile.
    others: HashMap<u32, u64>,
    at: std::time::Instant,
}

/// The CPU ticks of the `own` processes among `procs`.
fn own_ticks(procs: &HashMap<u32, ProcStat>, own: &HashSet<u32>) -> u64 {
    own.iter().filter_map(|p| procs.get(p)).map(|p| p.ticks).sum()
}

/// Marks now: the host's /proc/stat and the CPU time of `own` (pids), of this process and of
/// every other process.
pub fn mark(own: &[u32]) -> Result<LoadMark, String> {
    let own: HashSet<u32> = own.iter().copied().chain([std::process::id()]).collect();
    let procs = processes();
    Ok(LoadMark {
        stat: StatSnapshot::host()?,
        own_ticks: own_ticks(&procs, &own),
        others: procs
            .iter()
            .filter(|(pid, _)| !own.contains(pid))
            .map(|(&pid, p)| (pid, p.ticks))
            .collect(),
        own,
        at: std::time::Instant::now(),
    })
}

/// What the host's CPUs did since a mark.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// The foreign share of the CPUs' time, in [0, 1]: their busy time less the own processes'.
    pub foreign: f64,
    /// The CPU time the other processes still alive used, as a share of the CPUs' time: the
    /// part of the foreign load a process can be named for. (The rest is time of processes
    /// that started or ended in between, which /proc no longer or not yet shows apart — on a
    /// quiet host, mostly this sweep's own short-lived work.)
    pub named: f64,
    /// The other processes that used the most CPU, most first: `(pid, command, seconds)`, at
    /// most `busiest` of them, none without a tick.
    pub busiest: Vec<(u32, String, f64)>,
}

/// Reads the CPUs `cpus` since `since` (one /proc/stat read, one pass over /proc), naming the
/// `busiest` other processes. Err: the CPUs' time could not be read, or none passed.
pub fn read(since: &LoadMark, cpus: &[usize], busiest: usize) -> Result<Reading, String> {
    let now = StatSnapshot::host()?;
    let procs = processes();
    let split = cpus_delta(&since.stat, &now, cpus)?;
    let s = &split.sum;
    let total = (s.user + s.system + s.idle + s.steal) as f64;
    if total <= 0.0 {
        return Err("no time passed on the CPUs".into());
    }
    // A process that ended between the marks takes its ticks with it: never below 0.
    let own = own_ticks(&procs, &since.own).saturating_sub(since.own_ticks) as f64;
    let foreign = (((s.user + s.system) as f64 - own) / total).clamp(0.0, 1.0);
    // (pid, command, seconds, seen at the mark): one that started since is named among the
    // busiest with all its time, but only those seen at the mark make up `named`.
    let mut used: Vec<(u32, String, f64, bool)> = procs
        .into_iter()
        .filter(|(pid, _)| !since.own.contains(pid))
        .filter_map(|(pid, p)| {
            let before = since.others.get(&pid);
            let d = p.ticks.checked_sub(before.copied().unwrap_or(0))?;
            (d > 0).then(|| (pid, p.comm, d as f64 / 100.0, before.is_some()))
        })
        .collect();
    let span = since.at.elapsed().as_secs_f64() * cpus.len().max(1) as f64;
    let named_s: f64 = used.iter().filter(|u| u.3).map(|u| u.2).sum();
    let named = if span > 0.0 {
        (named_s / span).clamp(0.0, 1.0)
    } else {
        0.0
    };
    used.sort_by(|a, b| b.2.total_cmp(&a.2));
    Ok(Reading {
        foreign,
        named,
        busiest: used
            .into_iter()
            .take(busiest)
            .map(|(pid, comm, s, _)| (pid, comm, s))
            .collect(),
    })
}

/// The foreign share of `cpus`' time since `since` ([`Reading::foreign`]).
pub fn foreign_since(since: &LoadMark, cpus: &[usize]) -> Result<f64, String> {
    read(since, cpus, 0).map(|r| r.foreign)
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
        // A stranger (not named as own) busy on the same CPU: foreign, as much as it ran. The
        // other tests of this binary run beside it, and their time is this process's, taken off
        // the CPUs' busy time in ticks of two clocks (/proc/stat's and the process's): a reading
        // of a few hundred ms can lose tens of ms to that. So the stranger is measured up to
        // three times, and the reading closest to what it ran is judged.
        let stranger_reading = || {
            let m = mark(&own()).unwrap();
            let t = std::time::Instant::now();
            let mut stranger = std::process::Command::new("taskset")
                .args(["-c", &cpu.to_string(), "sh", "-c", "while :; do :; done"])
                .spawn()
                .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(500));
            let ran = processes()[&stranger.id()].ticks as f64 / 100.0;
            stranger.kill().unwrap();
            // Read before it is reaped: a reaped process is gone from /proc.
            let foreign = foreign_since(&m, &cpus).unwrap();
            stranger.wait().unwrap();
            (ran / t.elapsed().as_secs_f64() / cpus.len() as f64, foreign)
        };
        let mut readings = Vec::new();
        let (expected, foreign) = loop {
            let (expected, foreign) = stranger_reading();
            readings.push((expected, foreign));
            if foreign >= expected * 0.8 - 0.05 || readings.len() == 3 {
                break readings
                    .iter()
                    .copied()
                    .max_by(|a, b| (a.1 - a.0).total_cmp(&(b.1 - b.0)))
                    .unwrap();
            }
        };
        assert!(
            expected > 0.2 / cpus.len() as f64,
            "the stranger hardly ran: {readings:?}"
        );
        assert!(
            foreign >= expected * 0.8 - 0.05,
            "a stranger that had {expected:.2} of the CPU read as {foreign:.2} (every reading: {readings:?})"
        );
        assert!(
            own_load < foreign,
            "own busy time read as {own_load:.2}, the stranger's {foreign:.2}"
        );
    }
}
