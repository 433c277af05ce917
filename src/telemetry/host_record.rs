//! Reads the host a sweep runs on ([`HostRecord`]) through the host-access seam: this
//! machine's files, or a remote host's (QEMU's and libvirt's versions only here, where ocrig
//! starts them).

use std::collections::BTreeMap;

use crate::hostfs::HostFs;
use crate::journal::host::HostRecord;

/// The record of the host `fs` reads, for the sweep's `cpus`; `local`: the tools' versions
/// too (QEMU and libvirtd are this machine's).
pub fn read(fs: &dyn HostFs, cpus: &[usize], local: bool) -> HostRecord {
    let text = |p: &str| fs.read(p).ok().map(|s| s.trim().to_string());
    let cpuinfo = fs.read("/proc/cpuinfo").unwrap_or_default();
    let cpu_field = |name: &str| {
        cpuinfo
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().to_string())
            })
            .filter(|v| !v.is_empty())
    };
    let governors: BTreeMap<usize, String> = cpus
        .iter()
        .filter_map(|&c| {
            text(&format!(
                "/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_governor"
            ))
            .map(|g| (c, g))
        })
        .collect();
    let boost = text("/sys/devices/system/cpu/cpufreq/boost")
        .map(|b| on_off(b == "1"))
        .or_else(|| text("/sys/devices/system/cpu/intel_pstate/no_turbo").map(|n| on_off(n == "0")));
    let nested = crate::host::NestedHost::read_from(fs);
    let topology = crate::topology::Topology::read(fs, cpus);
    let siblings_in_set = siblings_in(&topology);
    let irqbalance = irqbalance_runs(fs);
    let allowed = local.then(crate::host::allowed_cpus);
    let (cpuidle, deepest_idle) = idle_states(fs, cpus);
    HostRecord {
        cpuidle,
        deepest_idle,
        siblings_in_set,
        irqbalance,
        placement: Some(topology.describe(cpus, allowed.as_deref())),
        cpu_places: topology.cpus,
        // The orchestrator says where it starts its guests.
        guest_start: None,
        kernel_release: text("/proc/sys/kernel/osrelease"),
        kernel_version: text("/proc/sys/kernel/version"),
        cmdline: text("/proc/cmdline"),
        cpu_model: cpu_field("model name"),
        microcode: cpu_field("microcode"),
        smt: text("/sys/devices/system/cpu/smt/control"),
        numa_nodes: text("/sys/devices/system/node/online"),
        thp: text("/sys/kernel/mm/transparent_hugepage/enabled").and_then(|t| selected(&t)),
        governors,
        boost,
        isolated: text("/sys/devices/system/cpu/isolated"),
        nohz_full: text("/sys/devices/system/cpu/nohz_full"),
        kvm_params: crate::host::kvm_params(fs),
        qemu: local
            .then(|| crate::host::tool_version("qemu-system-x86_64", &["--version"]))
            .flatten(),
        libvirt: local
            .then(|| crate::host::tool_version("libvirtd", &["--version"]))
            .flatten(),
        vm: Some(if nested.is_guest() {
            format!(
                "a VM ({}{})",
                if nested.hypervisor_bit {
                    "CPUID hypervisor bit"
                } else {
                    "DMI"
                },
                nested
                    .sys_vendor
                    .as_deref()
                    .map(|v| format!("; DMI {v}"))
                    .unwrap_or_default()
            )
        } else {
            "bare metal".into()
        }),
    }
}

/// The cpuidle driver and the idle states enabled on every one of `cpus` (name and exit
/// latency), in words, and the deepest of them. None where the host has no cpuidle (a VM
/// without it, or a remote host's files unread).
fn idle_states(fs: &dyn HostFs, cpus: &[usize]) -> (Option<String>, Option<(String, u64)>) {
    const CPU: &str = "/sys/devices/system/cpu";
    let driver = fs.read(&format!("{CPU}/cpuidle/current_driver")).ok();
    let Some(first) = cpus.first() else {
        return (None, None);
    };
    let states: Vec<String> = fs
        .list_dir(&format!("{CPU}/cpu{first}/cpuidle"))
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.starts_with("state"))
        .collect();
    let paths: Vec<String> = cpus
        .iter()
        .flat_map(|c| {
            states.iter().flat_map(move |st| {
                ["name", "latency", "disable"].map(|f| format!("{CPU}/cpu{c}/cpuidle/{st}/{f}"))
            })
        })
        .collect();
    let texts = fs.read_many(&paths);
    let field = |i: usize| {
        texts
            .get(i)
            .and_then(|t| t.as_ref().ok())
            .map(|t| t.trim().to_string())
    };
    // A state counts as enabled where every measured CPU has it enabled.
    let mut enabled: Vec<(String, u64)> = Vec::new();
    for (k, _) in states.iter().enumerate() {
        let on_all = (0..cpus.len()).all(|i| field((i * states.len() + k) * 3 + 2).as_deref() == Some("0"));
        let (name, latency) = (field(k * 3), field(k * 3 + 1).and_then(|l| l.parse().ok()));
        if let (true, Some(name), Some(latency)) = (on_all, name, latency) {
            enabled.push((name, latency));
        }
    }
    enabled.sort_by_key(|(_, l)| *l);
    let words = match (driver.as_deref().map(str::trim), enabled.is_empty()) {
        (None, true) => return (None, None),
        (d, true) => format!(
            "{}: no idle state enabled on every measured CPU",
            d.unwrap_or("cpuidle")
        ),
        (d, false) => format!(
            "{}: {}",
            d.unwrap_or("cpuidle"),
            enabled
                .iter()
                .map(|(n, l)| format!("{n} {l} µs"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    (Some(words), enabled.last().cloned())
}

/// The groups of `cpus` that share a core (from each CPU's `topology/thread_siblings_list`).
fn siblings_in(topology: &crate::topology::Topology) -> Vec<Vec<usize>> {
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for p in &topology.cpus {
        groups.entry(p.core).or_default().push(p.cpu);
    }
    groups.into_values().filter(|g| g.len() > 1).collect()
}

/// Whether a process named irqbalance runs (None: /proc not listed).
fn irqbalance_runs(fs: &dyn HostFs) -> Option<bool> {
    let pids: Vec<String> = fs
        .list_dir("/proc")
        .ok()?
        .into_iter()
        .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
        .map(|p| format!("/proc/{p}/comm"))
        .collect();
    Some(
        fs.read_many(&pids)
            .into_iter()
            .flatten()
            .any(|c| c.trim() == "irqbalance"),
    )
}

fn on_off(on: bool) -> String {
    if on { "on" } else { "off" }.into()
}

/// The bracketed choice of a sysfs mode file (`always [madvise] never` → `madvise`).
fn selected(modes: &str) -> Option<String> {
    let start = modes.find('[')? + 1;
    let end = start + modes[start..].find(']')?;
    Some(modes[start..end].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host's files laid out under a directory (crate::testing::RootedFs).
    #[test]
    fn a_host_is_read_from_its_files() {
        let d = tempfile::tempdir().unwrap();
        let put = |p: &str, text: &str| {
            let f = d.path().join(p.trim_start_matches('/'));
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, text).unwrap();
        };
        put("/proc/sys/kernel/osrelease", "6.1.0-41-amd64\n");
        put(
            "/proc/cpuinfo",
            "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nmicrocode\t: 0xa0011d1\nflags\t\t: fpu hypervisor\n",
        );
        put("/sys/devices/system/cpu/smt/control", "off\n");
        put(
            "/sys/kernel/mm/transparent_hugepage/enabled",
            "always [madvise] never\n",
        );
        put(
            "/sys/devices/system/cpu/cpu1/cpufreq/scaling_governor",
            "schedutil\n",
        );
        put("/sys/devices/system/cpu/cpufreq/boost", "1\n");
        put("/sys/devices/system/cpu/isolated", "\n");
        put("/sys/module/kvm/parameters/halt_poll_ns", "200000\n");
        put("/sys/module/kvm_amd/parameters/pause_filter_count", "3000\n");
        put("/sys/class/dmi/id/sys_vendor", "Google\n");
        put(
            "/sys/devices/system/cpu/cpu0/topology/thread_siblings_list",
            "0-1\n",
        );
        put(
            "/sys/devices/system/cpu/cpu1/topology/thread_siblings_list",
            "0-1\n",
        );
        put("/proc/812/comm", "irqbalance\n");
        put("/proc/self/comm", "ocrig\n");
        let fs = crate::testing::RootedFs::new(d.path());
        let r = read(&fs, &[0, 1], false);
        assert_eq!(r.kernel_release.as_deref(), Some("6.1.0-41-amd64"));
        assert_eq!(
            (r.cpu_model.as_deref(), r.microcode.as_deref()),
            (Some("AMD EPYC 7B13"), Some("0xa0011d1"))
        );
        assert_eq!(
            (r.smt.as_deref(), r.thp.as_deref()),
            (Some("off"), Some("madvise"))
        );
        // CPU 0 has no cpufreq here: only CPU 1's governor.
        assert_eq!(r.governors, [(1, "schedutil".to_string())].into());
        assert_eq!(
            (r.boost.as_deref(), r.isolated.as_deref()),
            (Some("on"), Some(""))
        );
        assert_eq!(r.kvm_params["kvm.halt_poll_ns"], "200000");
        assert_eq!(r.kvm_params["kvm_amd.pause_filter_count"], "3000");
        assert_eq!(r.vm.as_deref(), Some("a VM (CPUID hypervisor bit; DMI Google)"));
        assert_eq!(
            (r.siblings_in_set.clone(), r.irqbalance),
            (vec![vec![0, 1]], Some(true))
        );
        // Each of these makes timings unstable, and doctor says so: governor, boost, SMT
        // siblings, no isolation, irqbalance, THP, a VM.
        let h = r.hazards();
        assert_eq!(h.len(), 7, "{h:#?}");
        assert!(
            h[0].contains("1: schedutil") && h[2].contains("[0, 1] are SMT siblings"),
            "{h:#?}"
        );
        // Not read: absent, never a guess; no tools asked about on a host that is not local.
        assert!(r.cmdline.is_none() && r.numa_nodes.is_none() && r.qemu.is_none());
    }

    #[test]
    fn idle_states_and_isolation_on_recorded_hosts_are_recorded_and_judged() {
        use crate::testing::host_trees;
        let tree = host_trees::intel_two_socket();
        let r = read(&tree.fs, &[8, 9], false);
        assert_eq!(
            r.cpuidle.as_deref(),
            Some("intel_idle: POLL 0 µs, C1 2 µs, C1E 10 µs, C6 170 µs")
        );
        assert_eq!(r.deepest_idle, Some(("C6".to_string(), 170)));
        assert!(
            r.hazards()
                .iter()
                .any(|h| h.starts_with("deep idle state C6 (exit latency 170 µs)")),
            "{:#?}",
            r.hazards()
        );
        // C6 disabled on one measured CPU: not enabled on every one, so C1E is the deepest.
        tree.fs
            .write("/sys/devices/system/cpu/cpu9/cpuidle/state3/disable", "1\n");
        let r = read(&tree.fs, &[8, 9], false);
        assert_eq!(r.deepest_idle, Some(("C1E".to_string(), 10)));
        assert!(!r.hazards().iter().any(|h| h.contains("deep idle")));
        // Measured CPUs outside the host's isolated ones: a hazard naming them.
        let tree = host_trees::isolated_host();
        let h = read(&tree.fs, &[7, 8], false).hazards();
        assert!(
            h.iter()
                .any(|h| h.starts_with("measured CPUs [7] are not isolated although the host isolates 8-15")),
            "{h:#?}"
        );
        assert!(
            !read(&tree.fs, &[8, 9], false)
                .hazards()
                .iter()
                .any(|h| h.contains("not isolated"))
        );
    }

    /// This machine, read for real: a cloud VM here.
    #[test]
    fn this_machine_reads_as_what_it_is() {
        let r = read(&crate::hostfs::LocalFs, &[0], true);
        assert!(r.kernel_release.is_some() && r.cmdline.is_some() && r.cpu_model.is_some());
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap();
        assert_eq!(
            r.vm.as_deref().unwrap().starts_with("a VM"),
            cpuinfo.contains(" hypervisor")
                || crate::host::NestedHost::read_from(&crate::hostfs::LocalFs).is_guest()
        );
        if std::path::Path::new("/usr/bin/qemu-system-x86_64").exists() {
            assert!(
                r.qemu.as_deref().unwrap().starts_with("QEMU emulator version"),
                "{r:?}"
            );
        }
    }
}
