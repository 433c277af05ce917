//! The accelerator a scenario's guests run under, judged for the user that will run QEMU, and
//! the variants that switch PV spinlocks (a command line, a CPU model, own kernels) checked
//! against it.

use crate::scenario::locate::Seg;
use crate::scenario::{BackendKind, KernelRef, Loaded, ScenarioErrors};

use super::*;

/// The accelerator a scenario's guests will run under and what validation warns about.
#[derive(Debug, Clone)]
pub struct VirtCheck {
    pub accel: crate::host::AccelChoice,
    pub warnings: Vec<String>,
}

/// The accelerator evidence for the user that will run QEMU for this scenario: this process
/// (qemu backend), root for the libvirt backend (each domain's own <seclabel>), on the host behind `fs`.
pub fn virt_evidence(l: &Loaded, fs: &dyn crate::hostfs::HostFs) -> crate::host::VirtEvidence {
    match l.scenario.host.backend {
        BackendKind::Libvirt => crate::host::VirtEvidence::read_for_libvirt(fs),
        _ => crate::host::VirtEvidence::read_from(fs),
    }
}

/// Whether kernel command-line words switch the PV spinlock (`nopvspin`).
pub(crate) fn switches_pv_spinlock_cmdline(cmdline: &str) -> bool {
    cmdline.split_whitespace().any(|w| w == "nopvspin")
}

/// Under KVM, a kernel of one's own (a tree or a file with its config) without SMP, KVM_GUEST or
/// PARAVIRT_SPINLOCKS runs other spinlocks than a KVM guest's, whatever its variant says: one
/// warning each (Debian's kernels have all three).
pub(crate) fn own_kernels_for_kvm(l: &Loaded) -> Vec<String> {
    use crate::image::guest_config::lacks_options;
    const KVM_GUEST: [(&str, &str, Option<&str>); 3] = [
        ("SMP", "y", None),
        ("KVM_GUEST", "y", None),
        ("PARAVIRT_SPINLOCKS", "y", None),
    ];
    kernels_run(&l.scenario)
        .into_iter()
        // A Debian kernel has all three.
        .filter_map(|(whose, k)| Some((whose, given_kernel(k)?)))
        .flat_map(|(whose, given)| {
            lacks_options(Some(given), &KVM_GUEST).into_iter().map(move |lack| {
                format!(
                    "{}: {whose} under KVM: {lack}: its guests run other spinlocks than a KVM guest's (no PV qspinlock, or no SMP at all), whatever the variant says",
                    l.path.display()
                )
            })
        })
        .collect()
}

/// Every kernel the scenario's guests run, each with whose it is: the guest's (when some
/// variant, or the implicit one, runs it) and each variant's own.
pub(crate) fn kernels_run(s: &crate::scenario::Scenario) -> Vec<(String, &KernelRef)> {
    std::iter::once(("the guest's kernel".to_string(), &s.guest.kernel))
        .filter(|_| s.variants.is_empty() || s.variants.iter().any(|v| v.kernel.is_none()))
        .chain(s.variants.iter().filter_map(|v| {
            v.kernel
                .as_ref()
                .map(|k| (format!("variant {}'s kernel", v.name), k))
        }))
        .collect()
}

/// A kernel of one's own as the config checks take it (None: a Debian kernel).
pub(crate) fn given_kernel(k: &KernelRef) -> Option<crate::image::guest_config::Given<'_>> {
    use crate::image::guest_config::Given;
    match k {
        KernelRef::Debian(_) => None,
        KernelRef::File(f) => Some(Given::File {
            path: &f.path,
            own_initrd: f.initrd.is_some(),
        }),
        KernelRef::Tree(t) => Some(Given::Tree(&t.tree)),
    }
}

/// Whether a `-cpu` value switches a KVM PV spinlock feature (`kvm-pv-unhalt`).
pub(crate) fn switches_pv_spinlock_cpu(cpu: &str) -> bool {
    crate::host::cpu_feature(cpu, "kvm-pv-unhalt").is_some()
}

/// 1-vCPU guest in a scenario whose variants switch PV spinlocks, which cannot differ (a
/// kernel with one possible CPU disables PV spinlocks itself) — a warning instead where
/// `guest.single_vcpu_intended` says so. Every problem is returned together, located.
pub fn check_virt(l: &Loaded, ev: &crate::host::VirtEvidence) -> Result<VirtCheck, ScenarioErrors> {
    use crate::host::{Accel, AccelChoice};
    let s = &l.scenario;
    let mut errs = Vec::new();
    let mut warnings = Vec::new();
    let auto = ev.choose();
    let accel = match s.host.accel {
        crate::scenario::AccelSetting::Auto => auto,
        crate::scenario::AccelSetting::Tcg => AccelChoice {
            accel: Accel::Tcg,
            reason: "requested by the scenario".into(),
        },
        crate::scenario::AccelSetting::Kvm if auto.accel == Accel::Kvm => AccelChoice {
            accel: Accel::Kvm,
            reason: "requested by the scenario".into(),
        },
        crate::scenario::AccelSetting::Kvm => {
            errs.push(l.error_at(
                &[key("host"), key("accel")],
                format!("accel: kvm cannot be had here: {}", auto.reason),
            ));
            auto
        }
    };
    if s.host.backend == BackendKind::Host {
        // No guests: no accelerator, CPU model or guest kernel is involved.
        return if errs.is_empty() {
            Ok(VirtCheck { accel, warnings })
        } else {
            Err(ScenarioErrors(errs))
        };
    }
    if accel.accel == Accel::Kvm {
        warnings.extend(own_kernels_for_kvm(l));
    }
    let mut cpus: Vec<(Vec<Seg>, &str)> = Vec::new();
    if let Some(c) = &s.guest.cpu {
        cpus.push((vec![key("guest"), key("cpu")], c));
    }
    for (i, v) in s.variants.iter().enumerate() {
        if let Some(c) = &v.cpu {
            cpus.push((vec![key("variants"), Seg::Index(i), key("cpu")], c));
        }
    }
    for (path, cpu) in &cpus {
        let model = cpu.split(',').next().unwrap_or("").trim();
        if model.is_empty() {
            errs.push(l.error_at(path, format!("'{cpu}' names no CPU model (e.g. `max`, `host`)")));
        } else if model == "host" && accel.accel == Accel::Tcg {
            errs.push(l.error_at(
                path,
                format!(
                    "`-cpu {cpu}` needs KVM (QEMU refuses it under TCG: \"CPU model 'host' requires KVM or HVF\"), \
                     and these guests run under TCG ({}); use `max` (under KVM it offers what `host` does)",
                    accel.reason
                ),
            ));
        }
    }
    let pv_variants: Vec<&str> = s
        .variants
        .iter()
        .filter(|v| {
            switches_pv_spinlock_cmdline(&v.cmdline) || v.cpu.as_deref().is_some_and(switches_pv_spinlock_cpu)
        })
        .map(|v| v.name.as_str())
        .collect();
    // Variants that run another kernel than the others (another release, file or tree: the
    // README's base-vs-patched recipe).
    let kernel_of =
        |v: &crate::scenario::model::Variant| v.kernel.clone().unwrap_or_else(|| s.guest.kernel.clone());
    let kernel_variants: Vec<&str> = match s.variants.first() {
        Some(first) if s.variants.iter().any(|v| kernel_of(v) != kernel_of(first)) => {
            s.variants.iter().map(|v| v.name.as_str()).collect()
        }
        _ => Vec::new(),
    };
    let single = if !pv_variants.is_empty() {
        Some(format!(
            "variant(s) {} switch PV spinlocks: a kernel with one possible CPU disables PV spinlocks by \
             itself (\"PV spinlocks disabled, single CPU\", and PV sched-yield and PV TLB flush with them), \
             and one CPU cannot contend a spinlock, so the variants cannot differ",
            pv_variants.join(", ")
        ))
    } else if !kernel_variants.is_empty() {
        Some(format!(
            "variants {} run different kernels: a kernel with one possible CPU never contends a spinlock \
             and turns PV spinlocks off (\"PV spinlocks disabled, single CPU\"), so a spinlock change between \
             them cannot show",
            kernel_variants.join(", ")
        ))
    } else {
        None
    };
    if let Some(what) = single.filter(|_| s.guest.vcpus == 1) {
        let why = format!("1-vCPU guests, but {what}; use vcpus >= 2");
        if s.guest.single_vcpu_intended {
            warnings.push(format!(
                "{}: guest.vcpus: {why} (kept: guest.single_vcpu_intended)",
                l.path.display()
            ));
        } else {
            errs.push(l.error_at(
                &[key("guest"), key("vcpus")],
                format!("{why}, or set guest.single_vcpu_intended: true if that null result is the point"),
            ));
        }
    }
    if errs.is_empty() {
        Ok(VirtCheck { accel, warnings })
    } else {
        Err(ScenarioErrors(errs))
    }
}
