//! The host scheduler's slice setting the measured vCPU slices are read against: its value, or
//! why it is not readable, and the kernel's default for the CPU count.

use serde_json::{Value, json};

use crate::hostfs::HostFs;

/// The host scheduler's slice setting, read where that host's kernel keeps it, or null with
/// why.
pub fn host_slice_setting(fs: &dyn HostFs) -> Value {
    let candidates = [
        ("base_slice_ns", "/sys/kernel/debug/sched/base_slice_ns"),
        ("min_granularity_ns", "/sys/kernel/debug/sched/min_granularity_ns"),
        ("min_granularity_ns", "/proc/sys/kernel/sched_min_granularity_ns"),
    ];
    let mut paths: Vec<String> = candidates.iter().map(|c| c.1.to_string()).collect();
    paths.extend([
        "/proc/sys/kernel/osrelease".into(),
        "/sys/devices/system/cpu/online".into(),
    ]);
    let read = fs.read_many(&paths);
    let hz = read[3].as_ref().ok().and_then(|r| hz(fs, r.trim()));
    let mut why = Vec::new();
    for ((name, path), r) in candidates.iter().zip(&read) {
        match r {
            Ok(t) => {
                if let Ok(ns) = t.trim().parse::<u64>() {
                    return json!({ "name": name, "ns": ns, "from": path, "hz": hz });
                }
            }
            // Not there is expected (each kernel has one of them); there and unreadable is news.
            Err(e) if fs.exists(path) => why.push(e.clone()),
            Err(_) => {}
        }
    }
    if why.is_empty() {
        why.push(if fs.exists("/sys/kernel/debug/sched") {
            "no base_slice_ns or min_granularity_ns in /sys/kernel/debug/sched".into()
        } else {
            "debugfs is not mounted at /sys/kernel/debug (base_slice_ns lives there)".into()
        });
    }
    let cpus = read[4].as_ref().ok().map_or(1, |t| cpu_count(t));
    json!({
        "name": "base_slice_ns", "ns": null, "unavailable": why.join("; "), "hz": hz,
        "kernel_default_ns": default_slice_ns(cpus),
        "kernel_default_rule": "not read from the host: the kernel's default, 0.75 ms × (1 + log2(min(online CPUs, 8))) \
            (base_slice_ns since 6.6, min_granularity_ns before), unless someone changed it",
    })
}

/// CPUs in a kernel CPU list such as `0-3,8,10-11`.
pub(super) fn cpu_count(list: &str) -> usize {
    list.trim()
        .split(',')
        .filter_map(|r| match r.split_once('-') {
            Some((a, b)) => Some(b.parse::<usize>().ok()? + 1 - a.parse::<usize>().ok()?),
            None => r.parse::<usize>().ok().map(|_| 1),
        })
        .sum()
}

/// The kernel's default slice for a host of `cpus` online CPUs (`sysctl_sched_base_slice`,
/// formerly `sysctl_sched_min_granularity`: 0.75 ms scaled by 1 + ilog2(min(CPUs, 8))).
pub(super) fn default_slice_ns(cpus: usize) -> u64 {
    750_000 * (1 + cpus.clamp(1, 8).ilog2() as u64)
}

/// That host kernel's CONFIG_HZ (its tick decides when a slice that ran out is noticed), from
/// /boot/config-<release>, or on this machine /proc/config.gz; null when neither says.
pub(super) fn hz(fs: &dyn HostFs, release: &str) -> Option<u64> {
    let text = fs.read(&format!("/boot/config-{release}")).ok().or_else(|| {
        // Binary: only read here, not through a remote host's text reader.
        if !fs.is_local() {
            return None;
        }
        let gz = std::fs::File::open("/proc/config.gz").ok()?;
        let mut s = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(gz), &mut s).ok()?;
        Some(s)
    })?;
    text.lines()
        .find_map(|l| l.strip_prefix("CONFIG_HZ=")?.trim().parse().ok())
}
