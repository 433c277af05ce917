//! Per-VM KVM statistics over a run: halts, halt polling, PV sched-yield hypercalls,
//! preempted-vCPU reports, hypercalls, exits.
//!
//! What the counters count (Linux 6.1/6.6, arch/x86/kvm/x86.c): `directed_yield_attempted` /
//! `_successful` only in `kvm_sched_yield`, the `KVM_HC_SCHED_YIELD` hypercall (PV
//! sched-yield) — not pause-loop exits, which end in `kvm_vcpu_on_spin` and have no statistic
//! (PLE shows only in the host's `kvm:kvm_exit` tracepoint, reason `PAUSE_INSTRUCTION` on
//! Intel / `pause` on AMD, and `kvm:kvm_ple_window_update`); `hypercalls` counts every
//! hypercall number together (PV IPIs, spinlock kicks, sched-yield, …; a split by number needs
//! the host's `kvm:kvm_hypercall` tracepoint).
//!
//! Two sources, both per VM: QEMU's `query-stats` (QMP, the kernel's binary stats file
//! descriptors, Linux ≥ 5.14) with QEMU ≥ 8.1 — before 8.1 QEMU read each vCPU's stats on
//! that vCPU's thread, kicking it out of the guest per read and adding to the exits being
//! counted — else debugfs `/sys/kernel/debug/kvm/<qemu pid>-<fd>/`, whose files carry the VM's
//! counters with the vCPUs' summed. Under TCG neither exists and the run records why.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The cumulative counters kept (KVM's generic and x86 VM/vCPU stats). Instant values
/// (`guest_mode`, `pages_4k`), peaks and histograms are left out: their differences mean
/// nothing.
pub const COUNTERS: &[&str] = &[
    "exits",
    "halt_exits",
    "halt_successful_poll",
    "halt_attempted_poll",
    "halt_poll_invalid",
    "halt_wakeup",
    "halt_wait_ns",
    "halt_poll_success_ns",
    "halt_poll_fail_ns",
    "directed_yield_attempted",
    "directed_yield_successful",
    "preemption_reported",
    "preemption_other",
    "hypercalls",
    "irq_exits",
    "request_irq_exits",
    "signal_exits",
    "io_exits",
    "mmio_exits",
    "irq_window_exits",
    "nmi_window_exits",
    "notify_window_exits",
    "irq_injections",
    "nmi_injections",
    "insn_emulation",
    "insn_emulation_fail",
    "host_state_reload",
    "fpu_reload",
    "req_event",
    "l1d_flush",
    "pf_taken",
    "pf_fixed",
    "tlb_flush",
    "invlpg",
    "nested_run",
    "remote_tlb_flush",
    "remote_tlb_flush_requests",
    "mmu_cache_miss",
    "mmu_shadow_zapped",
];

/// One VM's counters at one instant (vCPU counters summed over its vCPUs) and where from.
#[derive(Debug, Clone, PartialEq)]
pub struct KvmCounters {
    pub source: &'static str,
    pub counters: BTreeMap<String, u64>,
}

/// One VM's counters over one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KvmRun {
    pub source: String,
    pub counters: BTreeMap<String, u64>,
}

/// Pause-loop exiting, which no KVM statistic counts.
pub const PLE_NOT_MEASURED: &str = "not measured: KVM keeps no statistic of pause-loop exits \
    (kvm_vcpu_on_spin); they show only in the host's kvm:kvm_exit tracepoint (reason PAUSE_INSTRUCTION \
    on Intel, pause on AMD) and kvm:kvm_ple_window_update, which ocrig does not record";

/// Hypercalls by number, which KVM's statistics do not split.
pub const HYPERCALLS_NOT_SPLIT: &str = "by number: not measured — KVM's `hypercalls` statistic sums \
    every number (KVM_HC_KICK_CPU spinlock kicks, KVM_HC_SEND_IPI PV IPIs, KVM_HC_SCHED_YIELD, …); \
    the host's kvm:kvm_hypercall tracepoint has the number, which ocrig does not record";

/// Whether `query-stats` of this QEMU version reads KVM's counters without kicking the vCPUs.
pub fn query_stats_quiet(qemu: Option<(u32, u32, u32)>) -> Result<(), String> {
    match qemu {
        Some(v) if v >= crate::host::QEMU_QUIET_STATS => Ok(()),
        Some((a, b, c)) => Err(format!(
            "QEMU {a}.{b}.{c} < 8.1: its query-stats kicks every vCPU out of the guest per read, \
             adding to the exits it counts; not used"
        )),
        None => {
            Err("QEMU's version is unknown; query-stats before 8.1 would kick every vCPU per read".into())
        }
    }
}

/// The local QEMU's answer to [`query_stats_quiet`], asked once per process.
pub fn local_query_stats_quiet() -> Result<(), String> {
    static QUIET: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    QUIET
        .get_or_init(|| query_stats_quiet(crate::host::qemu_version(Path::new("qemu-system-x86_64"))))
        .clone()
}

/// Whether a QEMU `-cpu` value turns the guest's steal clock (`kvm-steal-time`) off, read as
/// QEMU reads it ([`crate::host::cpu_feature`]); the guest's steal then stays 0 whatever
/// happens, which is no measurement.
pub fn steal_time_off(cpu: &str) -> bool {
    crate::host::cpu_feature(cpu, "kvm-steal-time") == Some(false)
}

pub const QMP_SOURCE: &str = "qmp query-stats";
pub const DEBUGFS_SOURCE: &str = "debugfs";

/// Sums the kept counters of a `query-stats` answer: `raw` is `{"vm": [...], "vcpu": [...]}`,
/// each the `return` of `query-stats` for that target.
pub fn from_query_stats(raw: &Value) -> Result<KvmCounters, String> {
    let mut counters = BTreeMap::new();
    let mut any_kvm = false;
    for target in ["vm", "vcpu"] {
        let results = raw[target]
            .as_array()
            .ok_or_else(|| format!("query-stats for target {target} returned no list"))?;
        for result in results.iter().filter(|r| r["provider"] == "kvm") {
            any_kvm = true;
            for stat in result["stats"].as_array().into_iter().flatten() {
                let (Some(name), Some(v)) = (stat["name"].as_str(), stat["value"].as_u64()) else {
                    continue;
                };
                if COUNTERS.contains(&name) {
                    *counters.entry(name.to_string()).or_insert(0) += v;
                }
            }
        }
    }
    if !any_kvm {
        return Err("QEMU's query-stats has no KVM provider: the guest does not run under KVM".into());
    }
    Ok(KvmCounters {
        source: QMP_SOURCE,
        counters,
    })
}

/// A guest's counters from what QMP answered (`qmp`: the raw `query-stats` answer, or why
/// there is none) and, where that gives none, debugfs (`debugfs`, read only when asked).
/// Under KVM a host kernel before 5.14 has no binary stats, so QEMU's `query-stats` answers
/// without a KVM provider: debugfs is read then, not the TCG conclusion ("the guest does not
/// run under KVM"); a QMP failure reads debugfs too. Under TCG (`kvm` false) an answer
/// without KVM stats is QEMU's word and final. `local`: debugfs is this machine's (a remote
/// host's is not read).
pub fn counters_from(
    qmp: Result<Value, String>,
    kvm: bool,
    local: bool,
    debugfs: impl FnOnce() -> Result<KvmCounters, String>,
) -> Result<KvmCounters, String> {
    let qmp = match qmp {
        Ok(raw) => match from_query_stats(&raw) {
            Ok(c) => return Ok(c),
            Err(why) if !kvm => return Err(why),
            Err(_) => {
                "query-stats has no KVM provider (a host kernel before 5.14 has no binary stats)".to_string()
            }
        },
        Err(why) => why,
    };
    if !local {
        return Err(format!(
            "QMP: {qmp}; debugfs: a remote host's /sys/kernel/debug/kvm is not read"
        ));
    }
    debugfs().map_err(|d| format!("QMP: {qmp}; debugfs: {d}"))
}

/// Reads the per-VM debugfs directory of the QEMU process `pid` under `root`
/// (`/sys/kernel/debug/kvm`).
pub fn from_debugfs(root: &Path, pid: i32) -> Result<KvmCounters, String> {
    let entries = std::fs::read_dir(root)
        .map_err(|e| format!("no {}: {e} (debugfs not mounted, or no KVM)", root.display()))?;
    let prefix = format!("{pid}-");
    let dir = entries
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.is_dir()
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
        })
        .ok_or_else(|| {
            format!(
                "no {}/{prefix}* directory: QEMU pid {pid} runs no KVM VM",
                root.display()
            )
        })?;
    let mut counters = BTreeMap::new();
    for name in COUNTERS {
        if let Ok(text) = std::fs::read_to_string(dir.join(name))
            && let Ok(v) = text.trim().parse::<u64>()
        {
            counters.insert(name.to_string(), v);
        }
    }
    if counters.is_empty() {
        return Err(format!("{} has none of the KVM counters", dir.display()));
    }
    Ok(KvmCounters {
        source: DEBUGFS_SOURCE,
        counters,
    })
}

/// The change over a run. Both snapshots must come from the same source.
pub fn delta(
    before: &Result<KvmCounters, String>,
    after: &Result<KvmCounters, String>,
) -> Result<KvmRun, String> {
    let (b, a) = match (before, after) {
        (Ok(b), Ok(a)) => (b, a),
        (Err(e), _) | (_, Err(e)) => return Err(e.clone()),
    };
    if b.source != a.source {
        return Err(format!(
            "the snapshots came from different sources ({} before, {} after)",
            b.source, a.source
        ));
    }
    let counters = a
        .counters
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v.saturating_sub(*b.counters.get(k)?))))
        .collect();
    Ok(KvmRun {
        source: a.source.to_string(),
        counters,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECORDED: &str = include_str!("testdata/kvm_pvm_query_stats.json");

    #[test]
    fn query_stats_sample_recorded_on_pvm_sums_vcpus_and_skips_non_counters() {
        // A real answer from this machine's kvm_pvm (see the fixture's _about): not a stock
        // KVM host, so this checks the shape and the arithmetic, not values on vmx/svm.
        let sample: Value = serde_json::from_str(RECORDED).unwrap();
        let b = from_query_stats(&sample["before"]).unwrap();
        let a = from_query_stats(&sample["after"]).unwrap();
        assert_eq!(a.source, QMP_SOURCE);
        assert!(!a.counters.contains_key("guest_mode") && !a.counters.contains_key("halt_wait_hist"));
        assert!(
            !a.counters.contains_key("pages_4k"),
            "instant values are not counters"
        );
        let d = delta(&Ok(b), &Ok(a)).unwrap();
        // python3 over the same file, summing every numeric non-histogram stat of both vCPUs
        // and the VM: halt_exits 64, exits 4684, preemption_other 28, halt_wakeup 7,
        // insn_emulation 4405269, remote_tlb_flush_requests 1.
        let c = &d.counters;
        assert_eq!(c["halt_exits"], 64);
        assert_eq!(c["exits"], 4684);
        assert_eq!(c["preemption_other"], 28);
        assert_eq!(c["halt_wakeup"], 7);
        assert_eq!(c["insn_emulation"], 4405269);
        assert_eq!(c["remote_tlb_flush_requests"], 1);
        assert_eq!(c["directed_yield_attempted"], 0);
    }

    #[test]
    fn tcg_answers_are_not_available_with_the_reason() {
        // What QEMU 10.0.2 answers under -accel tcg (measured): empty lists.
        let e = from_query_stats(&serde_json::json!({"vm": [], "vcpu": []})).unwrap_err();
        assert!(e.contains("does not run under KVM"), "{e}");
        assert!(from_query_stats(&serde_json::json!({"vm": {}})).is_err());
        let e = delta(&Err("not available: x".into()), &Err("y".into())).unwrap_err();
        assert_eq!(e, "not available: x");
    }

    #[test]
    fn debugfs_per_vm_directory_by_pid() {
        let root = tempfile::tempdir().unwrap();
        let vm = root.path().join("4242-11");
        std::fs::create_dir(&vm).unwrap();
        std::fs::create_dir(root.path().join("42-12")).unwrap();
        std::fs::write(vm.join("halt_exits"), "17\n").unwrap();
        std::fs::write(vm.join("directed_yield_attempted"), "3\n").unwrap();
        std::fs::write(vm.join("pages_4k"), "900\n").unwrap();
        let c = from_debugfs(root.path(), 4242).unwrap();
        assert_eq!(c.source, DEBUGFS_SOURCE);
        assert_eq!(c.counters.len(), 2);
        assert_eq!(c.counters["halt_exits"], 17);
        assert!(
            from_debugfs(root.path(), 7)
                .unwrap_err()
                .contains("runs no KVM VM")
        );
        assert!(
            from_debugfs(&root.path().join("nope"), 1)
                .unwrap_err()
                .contains("debugfs")
        );
        let q = from_query_stats(&serde_json::from_str::<Value>(RECORDED).unwrap()["after"]);
        assert!(delta(&Ok(c), &q).unwrap_err().contains("different sources"));
    }

    const KVM_66: &str = include_str!("testdata/kvm_6.6_query_stats.json");
    const DEBUGFS_66: &str = include_str!("testdata/kvm_6.6_debugfs_vm.txt");

    #[test]
    fn query_stats_of_a_stock_kvm_guest_under_linux_6_6_sum_both_vcpus() {
        let sample: Value = serde_json::from_str(KVM_66).unwrap();
        let b = from_query_stats(&sample["before"]).unwrap();
        let a = from_query_stats(&sample["after"]).unwrap();
        let d = delta(&Ok(b), &Ok(a)).unwrap();
        // python3 over the fixture: the vCPUs' after - before, summed over both vCPUs.
        let c = &d.counters;
        assert_eq!(c["exits"], 800_000);
        assert_eq!(c["halt_exits"], 36_000);
        assert_eq!(c["hypercalls"], 16_400);
        assert_eq!(c["directed_yield_attempted"], 1_240);
        assert_eq!(c["directed_yield_successful"], 480);
        assert_eq!(c["preemption_reported"], 10_000);
        assert!(
            !c.contains_key("guest_mode") && !c.contains_key("halt_wait_hist") && !c.contains_key("pages_4k")
        );
        // Every counter ocrig keeps is one Linux 6.6 reports.
        for name in COUNTERS {
            assert!(
                a_has(&sample["after"], name),
                "{name} is not a Linux 6.6 statistic"
            );
        }
    }

    fn a_has(raw: &Value, name: &str) -> bool {
        ["vm", "vcpu"].iter().any(|t| {
            raw[t]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["stats"].as_array().unwrap().iter().any(|s| s["name"] == name))
        })
    }

    #[test]
    fn under_kvm_a_query_stats_answer_without_kvm_stats_reads_debugfs_and_under_tcg_does_not() {
        let empty = serde_json::json!({"vm": [], "vcpu": []});
        let from_fs = || {
            Ok(KvmCounters {
                source: DEBUGFS_SOURCE,
                counters: BTreeMap::from([("halt_exits".to_string(), 7)]),
            })
        };
        // A pre-5.14 KVM host: QEMU answers, with no KVM provider; debugfs has the counters.
        let c = counters_from(Ok(empty.clone()), true, true, from_fs).unwrap();
        assert_eq!((c.source, c.counters["halt_exits"]), (DEBUGFS_SOURCE, 7));
        // Neither: both said.
        let e = counters_from(Ok(empty.clone()), true, true, || Err("no VM directory".into())).unwrap_err();
        assert!(
            e.contains("before 5.14") && e.contains("debugfs: no VM directory"),
            "{e}"
        );
        // A remote host's debugfs is not read.
        let e = counters_from(Ok(empty.clone()), true, false, from_fs).unwrap_err();
        assert!(e.contains("remote host"), "{e}");
        // Under TCG: QEMU's own words, and debugfs is never read.
        let e = counters_from(Ok(empty), false, true, || panic!("debugfs read under TCG")).unwrap_err();
        assert!(e.contains("does not run under KVM"), "{e}");
        // A QMP failure under KVM reads debugfs.
        let c = counters_from(Err("no answer within 2s".into()), true, true, from_fs).unwrap();
        assert_eq!(c.source, DEBUGFS_SOURCE);
        // And a full answer is the answer.
        let sample: Value = serde_json::from_str(KVM_66).unwrap();
        let c = counters_from(Ok(sample["after"].clone()), true, true, || panic!("debugfs read")).unwrap();
        assert_eq!(c.source, QMP_SOURCE);
    }

    #[test]
    fn a_linux_6_6_debugfs_tree_reads_as_the_query_stats_after_snapshot() {
        let root = tempfile::tempdir().unwrap();
        let vm = root.path().join("31337-14");
        std::fs::create_dir_all(vm.join("vcpu0")).unwrap();
        std::fs::write(vm.join("vcpu0/tsc-offset"), "-123456\n").unwrap();
        for line in DEBUGFS_66.lines().filter(|l| !l.starts_with('#')) {
            let (name, value) = line.split_once(' ').unwrap();
            std::fs::write(vm.join(name), format!("{value}\n")).unwrap();
        }
        let fs = from_debugfs(root.path(), 31337).unwrap();
        let sample: Value = serde_json::from_str(KVM_66).unwrap();
        let qmp = from_query_stats(&sample["after"]).unwrap();
        assert_eq!(fs.counters, qmp.counters, "both sources give the same counters");
    }

    /// Whether this host's QEMU starts a TCG machine with `-cpu cpu` (stopped before it runs:
    /// the features are applied when its vCPUs are made, before QMP answers).
    fn qemu_accepts(cpu: &str) -> bool {
        use std::io::Write;
        use std::process::{Command, Stdio};
        let mut q = Command::new("qemu-system-x86_64")
            .args([
                "-accel",
                "tcg",
                "-M",
                "q35",
                "-m",
                "64",
                "-nodefaults",
                "-display",
                "none",
                "-S",
            ])
            .args(["-cpu", cpu, "-qmp", "stdio"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("qemu-system-x86_64 (./scripts/setup installs it)");
        let mut stdin = q.stdin.take().unwrap();
        // A QEMU that refused the value has exited: the write may fail, the status says.
        let _ = stdin.write_all(b"{\"execute\":\"qmp_capabilities\"}\n{\"execute\":\"quit\"}\n");
        drop(stdin);
        q.wait().unwrap().success()
    }

    /// The spellings [`steal_time_off`] reads are the ones QEMU takes: each value it counts
    /// (either way) starts a machine, each it passes over is refused, checked against this
    /// host's QEMU under TCG (10.0 here: lower case only).
    #[test]
    fn steal_time_spellings_match_what_qemu_accepts() {
        for value in ["off", "no", "false", "n", "on", "yes", "true", "y"] {
            let cpu = format!("max,kvm-steal-time={value}");
            assert!(qemu_accepts(&cpu), "QEMU refused {cpu}");
            assert_eq!(
                steal_time_off(&format!("max,kvm-steal-time=on,kvm-steal-time={value}")),
                !["on", "yes", "true", "y"].contains(&value)
            );
        }
        for cpu in [
            "max,kvm-steal-time=OFF",
            "max,kvm-steal-time=N",
            "max,kvm-steal-time=maybe",
        ] {
            assert!(!qemu_accepts(cpu), "QEMU took {cpu}");
            assert!(!steal_time_off(cpu), "{cpu}");
        }
        for cpu in [
            "max,kvm_steal_time=off",
            "max,-kvm-steal-time",
            "max,-kvm_steal_time,+kvm-steal-time",
        ] {
            assert!(qemu_accepts(cpu), "QEMU refused {cpu}");
        }
    }

    #[test]
    fn qemu_before_8_1_is_not_asked_and_steal_time_off_is_recognised() {
        assert_eq!(query_stats_quiet(Some((8, 1, 0))), Ok(()));
        assert_eq!(query_stats_quiet(Some((10, 0, 2))), Ok(()));
        assert!(
            query_stats_quiet(Some((8, 0, 4)))
                .unwrap_err()
                .contains("kicks every vCPU")
        );
        assert!(query_stats_quiet(Some((7, 2, 0))).is_err());
        assert!(query_stats_quiet(None).is_err());
        assert!(steal_time_off("host,kvm-steal-time=off"));
        assert!(steal_time_off("max,-kvm-steal-time"));
        // QEMU's other spellings, and the last mention wins.
        for off in [
            "host,kvm_steal_time=off",
            "host,kvm-steal-time=no",
            "host,kvm-steal-time=false",
            "host,-kvm_steal_time",
            "host,kvm-steal-time=on,kvm-steal-time=off",
        ] {
            assert!(steal_time_off(off), "{off}");
        }
        for on in [
            "host,kvm-steal-time=off,kvm-steal-time=on",
            "host,kvm_steal_time=yes",
            "host,-kvm-steal-time,+kvm-steal-time",
            "host,kvm-steal-time",
            "host,kvm-steal-timer=off",
            "kvm-steal-time=off",
            // QEMU refuses these: nothing to read.
            "host,kvm-steal-time=N",
            "host,kvm-steal-time=OFF",
        ] {
            assert!(!steal_time_off(on), "{on}");
        }
        assert!(!steal_time_off("host,kvm-pv-unhalt=off"));
        assert!(!steal_time_off("host"));
    }
}
