//! What ocrig itself costs, and what each guest's QEMU costs in memory: the orchestrator's own
//! CPU time, open file descriptors, threads and memory (read from /proc/self around each run),
//! and a QEMU process's proportional and private memory (`/proc/<pid>/smaps_rollup`: PSS and
//! private dirty, not RSS, which counts pages clones share with each other as each clone's own).
//!
//! Kept small on purpose: a handful of numbers per run record, so a million-record journal does
//! not grow by more than a few dozen bytes a record.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::probe::process_cpu_ns;

/// The orchestrator at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SelfSnapshot {
    /// CPU time of every thread of this process, nanoseconds.
    pub cpu_ns: u64,
    pub open_fds: Option<u64>,
    pub threads: Option<u64>,
    pub rss_kib: Option<u64>,
}

impl SelfSnapshot {
    pub fn take() -> Self {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        Self {
            cpu_ns: process_cpu_ns(),
            open_fds: count_fds(Path::new("/proc/self/fd")),
            threads: status_field(&status, "Threads:"),
            rss_kib: status_field(&status, "VmRSS:"),
        }
    }
}

/// What one run cost the orchestrator (journaled as `extra.orchestrator`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunCost {
    /// Orchestrator CPU time from the first payload start to the last result, milliseconds.
    pub cpu_ms: f64,
    /// `cpu_ms` per guest that ran something.
    pub cpu_ms_per_guest: Option<f64>,
    /// `cpu_ms` over the CPU the guests' vCPUs used in the run (`telemetry_cost.run_cpu_ms`).
    pub share_of_guest_cpu: Option<f64>,
    /// Highest of the two reads (start, end).
    pub open_fds: Option<u64>,
    pub threads: Option<u64>,
    pub rss_mib: Option<f64>,
    /// SSH sessions held (one per live guest; each run opens channels on it, no new session).
    pub ssh_sessions: u64,
}

impl RunCost {
    pub fn between(
        before: &SelfSnapshot,
        after: &SelfSnapshot,
        guests: usize,
        ssh_sessions: usize,
        guest_cpu_ms: Option<f64>,
    ) -> Self {
        let cpu_ms = after.cpu_ns.saturating_sub(before.cpu_ns) as f64 / 1e6;
        let max = |a: Option<u64>, b: Option<u64>| a.max(b);
        Self {
            cpu_ms,
            cpu_ms_per_guest: (guests > 0).then(|| cpu_ms / guests as f64),
            share_of_guest_cpu: guest_cpu_ms.filter(|g| *g > 0.0).map(|g| cpu_ms / g),
            open_fds: max(before.open_fds, after.open_fds),
            threads: max(before.threads, after.threads),
            rss_mib: max(before.rss_kib, after.rss_kib).map(|k| k as f64 / 1024.0),
            ssh_sessions: ssh_sessions as u64,
        }
    }
}

/// A process's memory as the kernel splits it among the processes sharing it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ProcessMemory {
    pub rss_mib: f64,
    /// Proportional set size: each shared page divided among its sharers.
    pub pss_mib: f64,
    /// Pages only this process has written: what each extra guest really costs.
    pub private_dirty_mib: f64,
}

impl ProcessMemory {
    /// Parses `/proc/<pid>/smaps_rollup`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let kib =
            |name: &str| status_field(text, name).ok_or_else(|| format!("smaps_rollup has no {name} line"));
        Ok(Self {
            rss_mib: kib("Rss:")? as f64 / 1024.0,
            pss_mib: kib("Pss:")? as f64 / 1024.0,
            private_dirty_mib: kib("Private_Dirty:")? as f64 / 1024.0,
        })
    }

    pub fn of_pid(pid: i32) -> Result<Self, String> {
        let path = format!("/proc/{pid}/smaps_rollup");
        let text = std::fs::read_to_string(&path).map_err(|e| format!("reading {path}: {e}"))?;
        Self::parse(&text)
    }
}

/// The number on a `Name:   123 kB` line of a /proc status-like file.
fn status_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l[name.len()..].split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

fn count_fds(dir: &Path) -> Option<u64> {
    Some(std::fs::read_dir(dir).ok()?.count() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smaps_rollup_is_read_in_kib_and_reported_in_mib() {
        let text = "55d0c0000000-7ffd00000000 ---p 00000000 00:00 0                  [rollup]\n\
                    Rss:              266240 kB\nPss:              133120 kB\nPss_Anon:          90000 kB\n\
                    Shared_Clean:      10240 kB\nPrivate_Dirty:     92160 kB\nSwap:                  0 kB\n";
        let m = ProcessMemory::parse(text).unwrap();
        assert_eq!(m.rss_mib, 260.0);
        assert_eq!(m.pss_mib, 130.0);
        assert_eq!(m.private_dirty_mib, 90.0);
        assert!(ProcessMemory::parse("Rss: 1 kB\n").unwrap_err().contains("Pss:"));
    }

    #[test]
    fn this_process_is_measured_and_its_cost_grows_with_work() {
        let me = ProcessMemory::of_pid(std::process::id() as i32).unwrap();
        assert!(me.pss_mib > 0.0 && me.pss_mib <= me.rss_mib, "{me:?}");
        let before = SelfSnapshot::take();
        let files: Vec<std::fs::File> = (0..10)
            .map(|_| std::fs::File::open("/proc/self/status").unwrap())
            .collect();
        // 30 ms of this thread's own CPU, however busy the host is (30 ms of wall time gave
        // 18 ms of CPU with both CPUs loaded).
        let start = crate::testing::thread_cpu_s();
        let mut x = 0u64;
        while crate::testing::thread_cpu_s() - start < 0.030 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let after = SelfSnapshot::take();
        let c = RunCost::between(&before, &after, 4, 4, Some(1000.0));
        assert!(c.cpu_ms >= 20.0, "{c:?}");
        assert_eq!(c.cpu_ms_per_guest, Some(c.cpu_ms / 4.0));
        assert_eq!(c.share_of_guest_cpu, Some(c.cpu_ms / 1000.0));
        // Other tests of this binary open and close files meanwhile: the process-wide count
        // only shows that ours are among them; the counting itself is checked on a directory
        // nothing else touches.
        assert!(after.open_fds.unwrap() >= 10);
        let dir = tempfile::tempdir().unwrap();
        for i in 0..10 {
            std::fs::write(dir.path().join(i.to_string()), "").unwrap();
        }
        assert_eq!(count_fds(dir.path()), Some(10));
        assert!(c.threads.unwrap() >= 1 && c.rss_mib.unwrap() > 0.0);
        drop(files);
        assert_eq!(
            RunCost::between(&before, &after, 0, 0, Some(0.0)).share_of_guest_cpu,
            None
        );
    }
}
