//! The host's foreign load on a set of CPUs between runs: the CPUs' busy time less the CPU time
//! of this sweep's own processes (its guests' QEMUs, every thread, and ocrig), over the CPUs'
//! total time — what a disturbed run waits to fall (`host.max_other_load`).
//!
//! A guest's QEMU thread that ran on a CPU outside the set is taken off all the same, so the
//! figure errs low: a wait can end a little early, never late.

use super::cpu_stat::{StatSnapshot, cpus_delta};

/// CPU time of `pid` (all its threads), ticks; None once it is gone.
fn process_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the ")" that ends the command name start at field 3; utime is 14, stime 15.
    let mut f = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    Some(f.next()?.parse::<u64>().ok()? + f.next()?.parse::<u64>().ok()?)
}

/// A reading to take the next one against.
pub struct LoadMark {
    stat: StatSnapshot,
    own_ticks: u64,
    own: Vec<u32>,
}

/// Marks now: the host's /proc/stat and the CPU time of `own` (pids) and of this process.
pub fn mark(own: &[u32]) -> Result<LoadMark, String> {
    let mut own = own.to_vec();
    own.push(std::process::id());
    Ok(LoadMark {
        stat: StatSnapshot::host()?,
        own_ticks: own.iter().filter_map(|&p| process_ticks(p)).sum(),
        own,
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
        stranger.wait().unwrap();
        let foreign = foreign_since(&m, &cpus).unwrap();
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
