//! Facts about the host: CPUs, which accelerator `auto` picks and why, tool versions.

use std::path::Path;
use std::process::Command;

use serde::{Deserialize, Serialize};

/// The accelerator QEMU is told to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    pub fn as_str(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

/// What `accel: auto` chose and the evidence for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccelChoice {
    pub accel: Accel,
    pub reason: String,
}

/// The raw evidence, separated from the decision so the decision can be tested.
#[derive(Debug, Clone, Default)]
pub struct VirtEvidence {
    pub cpu_has_vmx_or_svm: bool,
    pub dev_kvm: bool,
    pub kvm_intel_or_amd_loaded: bool,
    pub kvm_pvm_loaded: bool,
}

impl VirtEvidence {
    pub fn read() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_has_vmx_or_svm = cpuinfo
            .lines()
            .filter(|l| l.starts_with("flags"))
            .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"));
        Self {
            cpu_has_vmx_or_svm,
            dev_kvm: Path::new("/dev/kvm").exists(),
            kvm_intel_or_amd_loaded: Path::new("/sys/module/kvm_intel").exists()
                || Path::new("/sys/module/kvm_amd").exists(),
            kvm_pvm_loaded: Path::new("/sys/module/kvm_pvm").exists(),
        }
    }

    /// KVM only where hardware virtualization is real: vmx/svm, kvm_intel/kvm_amd and /dev/kvm.
    /// A /dev/kvm backed by the software PVM hypervisor cannot run stock kernels, so it means TCG.
    pub fn choose(&self) -> AccelChoice {
        let tcg = |reason: String| AccelChoice {
            accel: Accel::Tcg,
            reason,
        };
        if self.kvm_pvm_loaded && !self.kvm_intel_or_amd_loaded {
            return tcg(
                "/dev/kvm is the software PVM hypervisor (kvm_pvm), which stock guest kernels cannot use; \
                 using TCG (vCPUs are still host threads, so overcommit preempts them, but timings are \
                 10x+ slower and there are no PV spinlocks or steal time)"
                    .into(),
            );
        }
        if !self.cpu_has_vmx_or_svm {
            return tcg("the CPU has no vmx/svm flag (no hardware virtualization); using TCG".into());
        }
        if !self.kvm_intel_or_amd_loaded {
            return tcg("vmx/svm present but neither kvm_intel nor kvm_amd is loaded; using TCG".into());
        }
        if !self.dev_kvm {
            return tcg("kvm_intel/kvm_amd loaded but /dev/kvm is missing; using TCG".into());
        }
        AccelChoice {
            accel: Accel::Kvm,
            reason: "hardware virtualization (vmx/svm) with kvm_intel/kvm_amd and /dev/kvm".into(),
        }
    }
}

/// CPUs this process may run on (its affinity mask), ascending.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: sched_getaffinity writes at most size_of::<cpu_set_t>() bytes into the set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return (0..online_cpus()).collect();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

pub fn online_cpus() -> usize {
    ocrig_payload::env::online_cpus()
}

/// Total and available memory in MiB from /proc/meminfo.
pub fn memory_mib() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map(|kib| kib / 1024)
            .unwrap_or(0)
    };
    (field("MemTotal:"), field("MemAvailable:"))
}

/// First line of `cmd --version`, or None when it is not installed.
pub fn tool_version(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .next()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(vmx: bool, dev: bool, kvm: bool, pvm: bool) -> VirtEvidence {
        VirtEvidence {
            cpu_has_vmx_or_svm: vmx,
            dev_kvm: dev,
            kvm_intel_or_amd_loaded: kvm,
            kvm_pvm_loaded: pvm,
        }
    }

    #[test]
    fn kvm_only_with_real_hardware_virtualization() {
        assert_eq!(ev(true, true, true, false).choose().accel, Accel::Kvm);
        let pvm = ev(false, true, false, true).choose();
        assert_eq!(pvm.accel, Accel::Tcg);
        assert!(pvm.reason.contains("PVM"));
        assert_eq!(ev(false, false, false, false).choose().accel, Accel::Tcg);
        assert_eq!(ev(true, false, true, false).choose().accel, Accel::Tcg);
        assert_eq!(ev(true, true, false, false).choose().accel, Accel::Tcg);
    }

    #[test]
    fn this_host_is_described() {
        assert!(!allowed_cpus().is_empty());
        let (total, avail) = memory_mib();
        assert!(total > 0 && avail <= total);
        let _ = VirtEvidence::read().choose();
    }
}
