//! The host a sweep ran on, as read before it began (`telemetry::host_record` reads it): what
//! decides its figures besides the scenario — kernel and command line, CPU and microcode, SMT,
//! NUMA, KVM's module parameters, THP, frequency governor and boost, isolated CPUs, QEMU and
//! libvirt, and whether the host is itself a VM. Journaled in the header; reports print it in
//! one line; a resume refuses a change in it; `ocrig compare` says what differs.
//!
//! A figure that could not be read is absent (None, or an empty map), never a guess; two
//! records are compared only on what both read.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostRecord {
    /// `uname -r` and `uname -v`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_release: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_version: Option<String>,
    /// /proc/cmdline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmdline: Option<String>,
    /// /proc/cpuinfo's `model name` and `microcode` (of the first CPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub microcode: Option<String>,
    /// /sys/devices/system/cpu/smt/control (`on`, `off`, `forceoff`, `notsupported`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smt: Option<String>,
    /// /sys/devices/system/node/online (`0`, `0-1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_nodes: Option<String>,
    /// The selected transparent huge page mode (`always`, `madvise`, `never`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thp: Option<String>,
    /// The sweep's CPUs' cpufreq governors, CPU → governor (empty: no cpufreq, e.g. a VM).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub governors: BTreeMap<usize, String>,
    /// Frequency boost (turbo): `on` / `off`, from cpufreq/boost or intel_pstate/no_turbo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boost: Option<String>,
    /// /sys/devices/system/cpu/isolated and nohz_full (empty strings: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolated: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nohz_full: Option<String>,
    /// The cpuidle driver and the idle states enabled on every measured CPU, with their exit
    /// latencies (`intel_idle: POLL 0 µs, C1 2 µs, C1E 10 µs, C6 170 µs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpuidle: Option<String>,
    /// The deepest of those states, as (name, exit latency in µs): a hazard past
    /// [`DEEP_IDLE_US`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deepest_idle: Option<(String, u64)>,
    /// Every kvm, kvm_intel and kvm_amd module parameter (`kvm.halt_poll_ns` → value).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kvm_params: BTreeMap<String, String>,
    /// First lines of `qemu-system-x86_64 --version` and `libvirtd --version` (this machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qemu: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub libvirt: Option<String>,
    /// Whether the host is itself a guest, in words with the evidence (CPUID hypervisor bit,
    /// DMI); `bare metal` when neither says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<String>,
    /// The sweep's CPUs that share a core (SMT siblings), each group of two or more.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub siblings_in_set: Vec<Vec<usize>>,
    /// Whether irqbalance runs (it moves interrupts onto any CPU, the measured ones too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub irqbalance: Option<bool>,
    /// The measured CPUs in words: cores, shared siblings, NUMA nodes, CPU 0, what is left to
    /// the host ([`crate::topology::Topology::describe`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
    /// Each measured CPU's core, siblings, package and node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpu_places: Vec<crate::topology::CpuPlace>,
    /// Where each guest's QEMU started, in words: CPUs, memory binding, other threads
    /// (`backend::StartPlacement::describe`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_start: Option<String>,
}

/// An idle state whose exit takes longer than this (µs) is a hazard: C1 and C1E exit in 1–10 µs,
/// package C6 in 100 µs or more (intel_idle's tables).
pub const DEEP_IDLE_US: u64 = 20;

/// The KVM parameters a summary names (halt polling and pause-loop exiting decide how a
/// spinning vCPU is treated); every one is recorded and compared.
const KVM_SUMMARY: &[&str] = &[
    "kvm.halt_poll_ns",
    "kvm_intel.ple_gap",
    "kvm_intel.ple_window",
    "kvm_amd.pause_filter_count",
    "kvm_amd.pause_filter_thresh",
];

impl HostRecord {
    /// The fields as (name, value) in a fixed order, for comparing and printing.
    fn fields(&self) -> Vec<(String, Option<String>)> {
        let mut out = vec![
            ("kernel".to_string(), self.kernel_release.clone()),
            ("kernel build".into(), self.kernel_version.clone()),
            ("cmdline".into(), self.cmdline.clone()),
            ("CPU".into(), self.cpu_model.clone()),
            ("microcode".into(), self.microcode.clone()),
            ("SMT".into(), self.smt.clone()),
            ("NUMA nodes".into(), self.numa_nodes.clone()),
            ("THP".into(), self.thp.clone()),
            ("governor".into(), self.governor()),
            ("boost".into(), self.boost.clone()),
            ("isolated".into(), self.isolated.clone()),
            ("nohz_full".into(), self.nohz_full.clone()),
            ("cpuidle".into(), self.cpuidle.clone()),
            ("QEMU".into(), self.qemu.clone()),
            ("libvirt".into(), self.libvirt.clone()),
            ("VM".into(), self.vm.clone()),
            ("guest start".into(), self.guest_start.clone()),
        ];
        for (k, v) in &self.kvm_params {
            out.push((k.clone(), Some(v.clone())));
        }
        out
    }

    /// The measured CPUs' distinct governors (`performance`, `performance/powersave`); None
    /// without cpufreq.
    fn governor(&self) -> Option<String> {
        let mut distinct: Vec<&str> = self.governors.values().map(String::as_str).collect();
        distinct.sort_unstable();
        distinct.dedup();
        (!distinct.is_empty()).then(|| distinct.join("/"))
    }

    /// Every field both records read and that differs, one line each (`name: was → now`).
    pub fn differences(&self, now: &HostRecord) -> Vec<String> {
        let now: BTreeMap<String, Option<String>> = now.fields().into_iter().collect();
        self.fields()
            .into_iter()
            .filter_map(|(k, was)| {
                let (Some(was), Some(Some(is))) = (was, now.get(&k)) else {
                    return None;
                };
                (&was != is).then(|| format!("host {k}: {was} → {is}"))
            })
            .collect()
    }

    /// What in this host makes timings unstable, one sentence each (`ocrig doctor`; pyperf's
    /// `system show` checks the same kind of thing).
    pub fn hazards(&self) -> Vec<String> {
        let mut out = Vec::new();
        let slow: Vec<String> = self
            .governors
            .iter()
            .filter(|(_, g)| g.as_str() != "performance")
            .map(|(c, g)| format!("{c}: {g}"))
            .collect();
        if !slow.is_empty() {
            out.push(format!(
                "cpufreq governor not `performance` on measured CPUs ({}): their clock follows the load",
                slow.join(", ")
            ));
        }
        if self.boost.as_deref() == Some("on") {
            out.push("frequency boost (turbo) on: the clock depends on how many cores are busy and how warm they are".into());
        }
        for g in &self.siblings_in_set {
            out.push(format!(
                "measured CPUs {g:?} are SMT siblings of one core: they share its execution units (give `host.cpus` one CPU a core)"
            ));
        }
        if matches!(self.isolated.as_deref(), Some(""))
            && matches!(self.nohz_full.as_deref(), Some("") | None)
        {
            out.push(
                "no isolated CPUs (isolcpus, nohz_full): the host's own tasks, timers and interrupts share the measured CPUs".into(),
            );
        }
        if let Some((name, us)) = self.deepest_idle.as_ref().filter(|(_, us)| *us > DEEP_IDLE_US) {
            out.push(format!(
                "deep idle state {name} (exit latency {us} µs) enabled on the measured CPUs: a vCPU that halts (a PV-spinlock waiter at 1x, once halt_poll_ns has passed) wakes that much later (`cpupower idle-set -D {DEEP_IDLE_US}` disables it)"
            ));
        }
        if let (Some(isolated), false) = (self.isolated.as_deref(), self.cpu_places.is_empty()) {
            let isolated = ocrig_payload::probe::tracefs::parse_cpu_list(isolated).unwrap_or_default();
            let shared: Vec<usize> = self
                .cpu_places
                .iter()
                .map(|p| p.cpu)
                .filter(|c| !isolated.is_empty() && !isolated.contains(c))
                .collect();
            if !shared.is_empty() {
                out.push(format!(
                    "measured CPUs {shared:?} are not isolated although the host isolates {}: the host's own tasks share them (name isolated CPUs in `host.cpus`)",
                    self.isolated.as_deref().unwrap_or_default()
                ));
            }
        }
        if self.irqbalance == Some(true) {
            out.push("irqbalance runs: it moves device interrupts onto the measured CPUs too".into());
        }
        if let Some(t) = self.thp.as_deref().filter(|t| *t != "never") {
            out.push(format!(
                "transparent huge pages `{t}`: whether guest RAM is backed by huge pages can change from boot to boot (QEMU asks for them), which moves memory-bound figures"
            ));
        }
        if let Some(vm) = self.vm.as_deref().filter(|v| v.starts_with("a VM")) {
            out.push(format!(
                "the host is {vm}: the hypervisor below can take its CPUs at any time (steal), and KVM here is nested"
            ));
        }
        out
    }

    /// One line for a report's header.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(k) = &self.kernel_release {
            parts.push(format!("Linux {k}"));
        }
        if let Some(c) = &self.cpu_model {
            let mc = self
                .microcode
                .as_deref()
                .map(|m| format!(" (microcode {m})"))
                .unwrap_or_default();
            parts.push(format!("{c}{mc}"));
        }
        if let Some(s) = &self.smt {
            parts.push(format!("SMT {s}"));
        }
        if let Some(n) = &self.numa_nodes {
            parts.push(format!("NUMA nodes {n}"));
        }
        parts.push(
            self.governor()
                .map_or("no cpufreq".into(), |g| format!("governor {g}")),
        );
        if let Some(b) = &self.boost {
            parts.push(format!("boost {b}"));
        }
        if let Some(t) = &self.thp {
            parts.push(format!("THP {t}"));
        }
        match self.isolated.as_deref() {
            Some("") | None => {}
            Some(i) => parts.push(format!("isolated {i}")),
        }
        let kvm: Vec<String> = KVM_SUMMARY
            .iter()
            .filter_map(|k| self.kvm_params.get(*k).map(|v| format!("{k}={v}")))
            .collect();
        if !kvm.is_empty() {
            parts.push(format!("KVM {}", kvm.join(" ")));
        }
        if let Some(q) = &self.qemu {
            parts.push(q.clone());
        }
        if let Some(vm) = &self.vm {
            parts.push(vm.clone());
        }
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> HostRecord {
        HostRecord {
            kernel_release: Some("6.1.0-41-amd64".into()),
            cpu_model: Some("Intel(R) Xeon(R) Gold 6338".into()),
            microcode: Some("0xd0003a5".into()),
            smt: Some("on".into()),
            numa_nodes: Some("0-1".into()),
            thp: Some("madvise".into()),
            governors: [(2, "performance".into()), (3, "performance".into())].into(),
            boost: Some("off".into()),
            isolated: Some("".into()),
            kvm_params: [
                ("kvm.halt_poll_ns".to_string(), "200000".to_string()),
                ("kvm_intel.ple_gap".into(), "128".into()),
                ("kvm_intel.ept".into(), "Y".into()),
            ]
            .into(),
            vm: Some("bare metal".into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_host_is_summed_up_in_one_line() {
        assert_eq!(
            record().summary(),
            "Linux 6.1.0-41-amd64, Intel(R) Xeon(R) Gold 6338 (microcode 0xd0003a5), SMT on, NUMA nodes 0-1, \
             governor performance, boost off, THP madvise, KVM kvm.halt_poll_ns=200000 kvm_intel.ple_gap=128, bare metal"
        );
        assert_eq!(HostRecord::default().summary(), "no cpufreq");
    }

    /// Each changed field is named; one that either side did not read is not compared.
    #[test]
    fn differences_name_what_changed_and_skip_what_was_not_read() {
        let was = record();
        let mut now = record();
        assert!(was.differences(&now).is_empty());
        now.microcode = Some("0xd0003b9".into());
        now.kvm_params.insert("kvm.halt_poll_ns".into(), "0".into());
        now.governors.insert(3, "powersave".into());
        now.cpu_model = None;
        assert_eq!(
            was.differences(&now),
            [
                "host microcode: 0xd0003a5 → 0xd0003b9",
                "host governor: performance → performance/powersave",
                "host kvm.halt_poll_ns: 200000 → 0",
            ]
        );
    }
}
