//! Telemetry around a run: CPU time deltas from /proc/stat (user, system, idle, steal), and
//! per-vCPU scheduler statistics of the host threads that run the guests ([`vcpu`]).

pub mod vcpu;

use serde_json::{Value, json};

/// The aggregate `cpu` line of /proc/stat: jiffies per state, in the kernel's column order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
}

impl CpuTimes {
    /// Parses the line starting with `label` (e.g. "cpu" or "cpu3").
    pub fn parse(stat: &str, label: &str) -> Option<Self> {
        let line = stat
            .lines()
            .find(|l| l.split_whitespace().next() == Some(label))?;
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        let at = |i: usize| v.get(i).copied().unwrap_or(0);
        Some(Self {
            user: at(0),
            nice: at(1),
            system: at(2),
            idle: at(3),
            iowait: at(4),
            irq: at(5),
            softirq: at(6),
            steal: at(7),
        })
    }

    pub fn delta(&self, before: &Self) -> Self {
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

    pub fn total(&self) -> u64 {
        self.user + self.nice + self.system + self.idle + self.iowait + self.irq + self.softirq + self.steal
    }
}

/// Jiffies spent per state between two /proc/stat snapshots, with shares of the total.
pub fn stat_delta_json(before: &str, after: &str) -> Value {
    match (CpuTimes::parse(before, "cpu"), CpuTimes::parse(after, "cpu")) {
        (Some(b), Some(a)) => {
            let d = a.delta(&b);
            let total = d.total().max(1) as f64;
            json!({
                "user": d.user + d.nice, "system": d.system + d.irq + d.softirq, "idle": d.idle + d.iowait,
                "steal": d.steal,
                "steal_share": d.steal as f64 / total,
                "busy_share": (d.user + d.nice + d.system + d.irq + d.softirq) as f64 / total,
            })
        }
        _ => json!("not available"),
    }
}

/// The host's /proc/stat now (empty when unreadable).
pub fn host_stat() -> String {
    std::fs::read_to_string("/proc/stat").unwrap_or_default()
}

/// Host CPU time per state over the pinned CPUs, summed, between two /proc/stat snapshots.
pub fn host_cpus_delta_json(before: &str, after: &str, cpus: &[usize]) -> Value {
    let mut sum = CpuTimes::default();
    for c in cpus {
        let label = format!("cpu{c}");
        let (Some(b), Some(a)) = (CpuTimes::parse(before, &label), CpuTimes::parse(after, &label)) else {
            return json!("not available");
        };
        let d = a.delta(&b);
        sum = CpuTimes {
            user: sum.user + d.user,
            nice: sum.nice + d.nice,
            system: sum.system + d.system,
            idle: sum.idle + d.idle,
            iowait: sum.iowait + d.iowait,
            irq: sum.irq + d.irq,
            softirq: sum.softirq + d.softirq,
            steal: sum.steal + d.steal,
        };
    }
    let total = sum.total().max(1) as f64;
    json!({
        "cpus": cpus,
        "user": sum.user + sum.nice, "system": sum.system + sum.irq + sum.softirq, "idle": sum.idle + sum.iowait,
        "steal": sum.steal,
        "busy_share": (sum.user + sum.nice + sum.system + sum.irq + sum.softirq) as f64 / total,
    })
}

/// Host KVM statistics: the per-VM counters under debugfs when readable.
pub fn kvm_stats() -> Value {
    let dir = std::path::Path::new("/sys/kernel/debug/kvm");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return json!("not available (no /sys/kernel/debug/kvm: debugfs not mounted or no KVM guests)");
    };
    let mut stats = serde_json::Map::new();
    for e in entries.flatten() {
        if e.path().is_file()
            && let Ok(v) = std::fs::read_to_string(e.path())
            && let Ok(n) = v.trim().parse::<u64>()
        {
            stats.insert(e.file_name().to_string_lossy().into_owned(), json!(n));
        }
    }
    Value::Object(stats)
}

/// Counter differences between two [`kvm_stats`] snapshots (non-counters pass through).
pub fn kvm_delta(before: &Value, after: &Value) -> Value {
    match (before.as_object(), after.as_object()) {
        (Some(b), Some(a)) => Value::Object(
            a.iter()
                .filter_map(|(k, v)| {
                    let d = v.as_u64()?.saturating_sub(b.get(k)?.as_u64()?);
                    (d > 0).then(|| (k.clone(), json!(d)))
                })
                .collect(),
        ),
        _ => after.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_of_the_aggregate_line() {
        let b = "cpu  100 0 50 1000 0 0 0 5 0 0\ncpu0 1 2 3 4\n";
        let a = "cpu  160 0 70 1100 0 0 0 25 0 0\n";
        let v = stat_delta_json(b, a);
        assert_eq!(v["user"], 60);
        assert_eq!(v["system"], 20);
        assert_eq!(v["steal"], 20);
        assert!((v["steal_share"].as_f64().unwrap() - 20.0 / 200.0).abs() < 1e-12);
        assert_eq!(stat_delta_json("", a), json!("not available"));
    }

    #[test]
    fn host_deltas_sum_the_pinned_cpus_only() {
        let b = "cpu  0 0 0 0\ncpu0 10 0 0 100 0 0 0 0\ncpu1 10 0 0 100\ncpu2 0 0 0 0\n";
        let a = "cpu  0 0 0 0\ncpu0 20 0 5 105 0 0 0 0\ncpu1 30 0 0 100\ncpu2 500 0 0 0\n";
        let v = host_cpus_delta_json(b, a, &[0, 1]);
        assert_eq!(v["user"], 30);
        assert_eq!(v["system"], 5);
        assert_eq!(v["idle"], 5);
        assert_eq!(host_cpus_delta_json(b, a, &[7]), json!("not available"));
        let kb = json!({"exits": 5, "halt": 1});
        let ka = json!({"exits": 9, "halt": 1});
        assert_eq!(kvm_delta(&kb, &ka), json!({"exits": 4}));
    }
}
