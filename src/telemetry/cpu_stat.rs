//! CPU time per state (user, system, idle, steal) between two `/proc/stat` snapshots, of the
//! host (per pinned CPU and summed) or of a guest (its aggregate line, read over SSH).
//!
//! procfs parses the file; this module only subtracts. Values are in USER_HZ ticks (100 per
//! second on x86), the unit /proc/stat always uses; only their ratios matter here.

use std::collections::BTreeMap;

use procfs::{CpuTime, ExplicitSystemInfo, FromReadSI, KernelStats};
use serde::{Deserialize, Serialize};

/// USER_HZ: /proc/stat counts in these ticks whatever the kernel's HZ.
const USER_HZ: u64 = 100;

/// One `/proc/stat` at one instant: the aggregate line and each online CPU's line by CPU id.
#[derive(Debug, Clone)]
pub struct StatSnapshot {
    total: Ticks,
    per_cpu: BTreeMap<usize, Ticks>,
}

impl StatSnapshot {
    /// Parses the text of a `/proc/stat` (this host's, or a guest's read over SSH).
    pub fn parse(text: &str) -> Result<Self, String> {
        let info = ExplicitSystemInfo {
            boot_time_secs: 0,
            ticks_per_second: USER_HZ,
            page_size: 4096,
            is_little_endian: cfg!(target_endian = "little"),
        };
        let stats =
            KernelStats::from_read(text.as_bytes(), &info).map_err(|e| format!("parsing /proc/stat: {e}"))?;
        // procfs keeps the per-CPU lines in file order without their labels; offline CPUs
        // have no line, so the ids come from the labels, in the same order.
        let ids: Vec<usize> = text
            .lines()
            .filter_map(|l| l.split_whitespace().next()?.strip_prefix("cpu")?.parse().ok())
            .collect();
        if ids.len() != stats.cpu_time.len() {
            return Err(format!(
                "parsing /proc/stat: {} per-CPU lines but {} CPU labels",
                stats.cpu_time.len(),
                ids.len()
            ));
        }
        Ok(Self {
            total: Ticks::from(&stats.total),
            per_cpu: ids
                .into_iter()
                .zip(stats.cpu_time.iter().map(Ticks::from))
                .collect(),
        })
    }

    /// This host's `/proc/stat` now.
    pub fn host() -> Result<Self, String> {
        let text = std::fs::read_to_string("/proc/stat").map_err(|e| format!("reading /proc/stat: {e}"))?;
        Self::parse(&text)
    }
}

/// Ticks per state, in /proc/stat's column order; columns an old kernel lacks count as 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Ticks {
    user: u64,
    nice: u64,
    system: u64,
    idle: u64,
    iowait: u64,
    irq: u64,
    softirq: u64,
    steal: u64,
}

impl From<&CpuTime> for Ticks {
    fn from(c: &CpuTime) -> Self {
        Self {
            user: c.user,
            nice: c.nice,
            system: c.system,
            idle: c.idle,
            iowait: c.iowait.unwrap_or(0),
            irq: c.irq.unwrap_or(0),
            softirq: c.softirq.unwrap_or(0),
            steal: c.steal.unwrap_or(0),
        }
    }
}

impl Ticks {
    /// Counters only grow; a smaller "after" (a CPU that went offline and back) counts as 0.
    fn since(&self, before: &Self) -> Self {
        Self {
            user: self.user.saturating_sub(before.user),
            nice: self.nice.saturating_sub(before.nice),
            system: self.system.saturating_sub(before.system),
            idle: self.idle.saturating_sub(before.idle),
            iowait: self.iowait.saturating_sub(before.iowait),
            irq: self.irq.saturating_sub(before.irq),
            softirq: self.softirq.saturating_sub(before.softirq),
            steal: self.steal.saturating_sub(before.steal),
        }
    }

    fn plus(&self, o: &Self) -> Self {
        Self {
            user: self.user + o.user,
            nice: self.nice + o.nice,
            system: self.system + o.system,
            idle: self.idle + o.idle,
            iowait: self.iowait + o.iowait,
            irq: self.irq + o.irq,
            softirq: self.softirq + o.softirq,
            steal: self.steal + o.steal,
        }
    }

    fn split(&self) -> CpuSplit {
        let user = self.user + self.nice;
        let system = self.system + self.irq + self.softirq;
        let idle = self.idle + self.iowait;
        let total = user + system + idle + self.steal;
        let share = |x: u64| {
            if total == 0 {
                None
            } else {
                Some(x as f64 / total as f64)
            }
        };
        CpuSplit {
            user,
            system,
            idle,
            steal: self.steal,
            steal_share: share(self.steal),
            busy_share: share(user + system),
        }
    }
}

/// Time per state over a run, USER_HZ ticks; shares of the total (`None` over no time).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuSplit {
    pub user: u64,
    pub system: u64,
    pub idle: u64,
    /// Time the hypervisor ran something else while this CPU was runnable (0 without a
    /// paravirtual steal clock, e.g. under TCG — the reports say so rather than show 0 %).
    pub steal: u64,
    pub steal_share: Option<f64>,
    pub busy_share: Option<f64>,
}

/// The host's pinned CPUs over a run: summed, and each on its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostSplit {
    pub cpus: Vec<usize>,
    #[serde(flatten)]
    pub sum: CpuSplit,
    pub per_cpu: Vec<PerCpu>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerCpu {
    pub cpu: usize,
    #[serde(flatten)]
    pub split: CpuSplit,
}

/// A guest's (or any machine's) aggregate CPU time between two snapshots.
pub fn total_delta(before: &StatSnapshot, after: &StatSnapshot) -> CpuSplit {
    after.total.since(&before.total).split()
}

/// CPUs `cpus` between two snapshots of this host; an error names a CPU missing from either.
pub fn cpus_delta(before: &StatSnapshot, after: &StatSnapshot, cpus: &[usize]) -> Result<HostSplit, String> {
    let mut sum = Ticks::default();
    let mut per_cpu = Vec::with_capacity(cpus.len());
    for &cpu in cpus {
        let (Some(b), Some(a)) = (before.per_cpu.get(&cpu), after.per_cpu.get(&cpu)) else {
            return Err(format!("CPU {cpu} has no line in /proc/stat (offline?)"));
        };
        let d = a.since(b);
        sum = sum.plus(&d);
        per_cpu.push(PerCpu {
            cpu,
            split: d.split(),
        });
    }
    Ok(HostSplit {
        cpus: cpus.to_vec(),
        sum: sum.split(),
        per_cpu,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(cpu_lines: &str) -> String {
        format!(
            "{cpu_lines}intr 0\nctxt 100\nbtime 1700000000\nprocesses 10\nprocs_running 1\nprocs_blocked 0\n"
        )
    }

    #[test]
    fn aggregate_deltas_and_shares() {
        let b = StatSnapshot::parse(&stat(
            "cpu  100 0 50 1000 0 0 0 5 0 0\ncpu0 1 2 3 4 0 0 0 0 0 0\n",
        ))
        .unwrap();
        let a = StatSnapshot::parse(&stat(
            "cpu  160 0 70 1100 0 0 0 25 0 0\ncpu0 1 2 3 4 0 0 0 0 0 0\n",
        ))
        .unwrap();
        let d = total_delta(&b, &a);
        assert_eq!((d.user, d.system, d.idle, d.steal), (60, 20, 100, 20));
        // 20 of 60 + 20 + 100 + 20 = 200 ticks stolen; 80 busy.
        assert_eq!(d.steal_share, Some(0.1));
        assert_eq!(d.busy_share, Some(0.4));
        let same = total_delta(&a, &a);
        assert_eq!(
            (same.steal_share, same.busy_share),
            (None, None),
            "no time: no share"
        );
    }

    #[test]
    fn host_cpus_are_found_by_label_even_with_an_offline_cpu() {
        // CPU 1 is offline: no line, so the second per-CPU line is CPU 2.
        let b = StatSnapshot::parse(&stat(
            "cpu  0 0 0 0 0 0 0 0\ncpu0 10 0 0 100 0 0 0 0\ncpu2 10 0 0 100 0 0 0 0\n",
        ))
        .unwrap();
        let a = StatSnapshot::parse(&stat(
            "cpu  0 0 0 0 0 0 0 0\ncpu0 20 0 5 105 0 0 0 0\ncpu2 500 0 0 100 0 0 0 0\n",
        ))
        .unwrap();
        let h = cpus_delta(&b, &a, &[0]).unwrap();
        assert_eq!((h.sum.user, h.sum.system, h.sum.idle), (10, 5, 5));
        assert_eq!(h.per_cpu.len(), 1);
        let h = cpus_delta(&b, &a, &[0, 2]).unwrap();
        assert_eq!(h.sum.user, 10 + 490);
        assert_eq!(h.per_cpu[1].cpu, 2);
        assert_eq!(h.per_cpu[1].split.busy_share, Some(1.0));
        let e = cpus_delta(&b, &a, &[1]).unwrap_err();
        assert!(e.contains("CPU 1"), "{e}");
    }

    #[test]
    fn this_hosts_stat_parses_and_garbage_does_not() {
        let s = StatSnapshot::host().unwrap();
        assert!(!s.per_cpu.is_empty());
        assert!(StatSnapshot::parse("not a stat file").is_err());
    }
}
