//! Facts about the host: CPUs, which accelerator `auto` picks and why, tool versions, the TSC rate.

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
        Self::read_from(&crate::hostfs::LocalFs)
    }

    /// The evidence on the host behind `fs` (a remote libvirt host's over SSH).
    pub fn read_from(fs: &dyn crate::hostfs::HostFs) -> Self {
        let cpuinfo = fs.read("/proc/cpuinfo").unwrap_or_default();
        let cpu_has_vmx_or_svm = cpuinfo
            .lines()
            .filter(|l| l.starts_with("flags"))
            .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"));
        Self {
            cpu_has_vmx_or_svm,
            dev_kvm: fs.exists("/dev/kvm"),
            kvm_intel_or_amd_loaded: fs.exists("/sys/module/kvm_intel") || fs.exists("/sys/module/kvm_amd"),
            kvm_pvm_loaded: fs.exists("/sys/module/kvm_pvm"),
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

/// The host's TSC frequency and where the figure came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TscFreq {
    pub khz: u64,
    /// `cpuid 0x40000010` (the hypervisor's timing leaf), `dmesg` (the host kernel's own
    /// calibration), or `measured` (rdtsc against CLOCK_MONOTONIC_RAW, rounded to 1 MHz).
    pub source: &'static str,
    /// CPUID 0x80000007 EDX bit 8: the TSC runs at a constant rate in every P-/C-state.
    pub invariant: bool,
}

/// The host TSC frequency, read once per process. Under TCG the guest's TSC *is* the host's
/// (QEMU's rdtsc helper returns host ticks plus an offset), so this is the rate a TCG guest
/// must be told with `tsc_early_khz=` to trust its TSC instead of calibrating it against an
/// emulated PIT and then falling back to HPET. None off x86-64.
pub fn tsc_freq() -> Option<TscFreq> {
    static FREQ: std::sync::OnceLock<Option<TscFreq>> = std::sync::OnceLock::new();
    FREQ.get_or_init(read_tsc_freq).clone()
}

#[cfg(target_arch = "x86_64")]
fn read_tsc_freq() -> Option<TscFreq> {
    use std::arch::x86_64::__cpuid;
    // cpuid exists on every x86-64 CPU; leaves above the maximum read as zeros or junk, hence
    // the range checks.
    let invariant = __cpuid(0x8000_0000).eax >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0;
    let with = |khz: u64, source| {
        Some(TscFreq {
            khz,
            source,
            invariant,
        })
    };
    let hv_khz = {
        let max = __cpuid(0x4000_0000).eax;
        if (0x4000_0010..0x4000_0100).contains(&max) {
            __cpuid(0x4000_0010).eax as u64
        } else {
            0
        }
    };
    if hv_khz > 0 {
        return with(hv_khz, "cpuid 0x40000010");
    }
    if let Some(khz) = dmesg_tsc_khz(&kernel_log()) {
        return with(khz, "dmesg");
    }
    with(measure_tsc_khz()?, "measured")
}

#[cfg(not(target_arch = "x86_64"))]
fn read_tsc_freq() -> Option<TscFreq> {
    None
}

fn kernel_log() -> String {
    Command::new("dmesg")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// The host kernel's TSC figure: its refined calibration if it made one, else the detected one.
fn dmesg_tsc_khz(log: &str) -> Option<u64> {
    let mhz_after = |key: &str| {
        log.lines().rev().find_map(|l| {
            let rest = &l[l.find(key)? + key.len()..];
            let mhz: f64 = rest.split_whitespace().next()?.parse().ok()?;
            Some((mhz * 1000.0).round() as u64)
        })
    };
    mhz_after("Refined TSC clocksource calibration:").or_else(|| mhz_after("tsc: Detected"))
}

#[cfg(target_arch = "x86_64")]
fn measure_tsc_khz() -> Option<u64> {
    let raw = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_RAW, &mut ts) };
        ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64
    };
    // SAFETY: rdtsc has no preconditions on x86-64.
    let (t0, c0) = (raw(), unsafe { std::arch::x86_64::_rdtsc() });
    std::thread::sleep(std::time::Duration::from_millis(200));
    let (t1, c1) = (raw(), unsafe { std::arch::x86_64::_rdtsc() });
    let khz = (c1.wrapping_sub(c0)) as f64 / ((t1 - t0) / 1e6);
    // Rounded to 1 MHz so that every process on this host derives the same kernel argument
    // (and so the same clone template) from a measurement that jitters in the last digits.
    (khz > 0.0).then(|| ((khz / 1000.0).round() * 1000.0) as u64)
}

/// Debian's qboot firmware (qemu-system-data): a minimal BIOS that jumps straight to the
/// kernel QEMU loaded, instead of SeaBIOS's full PC initialisation.
pub const QBOOT_ROM: &str = "/usr/share/qemu/qboot.rom";

/// QEMU's version as (major, minor, micro) from `qemu-system-x86_64 --version`.
pub fn qemu_version(binary: &Path) -> Option<(u32, u32, u32)> {
    let line = tool_version(&binary.to_string_lossy(), &["--version"])?;
    parse_qemu_version(&line)
}

fn parse_qemu_version(line: &str) -> Option<(u32, u32, u32)> {
    let v = line.split("version ").nth(1)?.split_whitespace().next()?;
    let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
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
    fn tsc_frequency_from_the_kernel_log_or_cpuid() {
        let log = "[0.000076] tsc: Detected 2596.126 MHz processor\n[1.2] tsc: Refined TSC clocksource calibration: 2596.002 MHz\n";
        assert_eq!(dmesg_tsc_khz(log), Some(2_596_002));
        assert_eq!(
            dmesg_tsc_khz("[0.0] tsc: Detected 2596.126 MHz processor"),
            Some(2_596_126)
        );
        assert_eq!(dmesg_tsc_khz("nothing"), None);
        // The figure this host reports is a plausible TSC rate, and the same every time.
        if let Some(f) = tsc_freq() {
            assert!((100_000..10_000_000).contains(&f.khz), "{f:?}");
            assert_eq!(tsc_freq(), Some(f));
        }
    }

    #[test]
    fn qemu_versions_parse() {
        assert_eq!(
            parse_qemu_version("QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)"),
            Some((10, 0, 2))
        );
        assert_eq!(parse_qemu_version("QEMU emulator version 8.2"), Some((8, 2, 0)));
        assert_eq!(parse_qemu_version("garbage"), None);
    }

    #[test]
    fn this_host_is_described() {
        assert!(!allowed_cpus().is_empty());
        let (total, avail) = memory_mib();
        assert!(total > 0 && avail <= total);
        let _ = VirtEvidence::read().choose();
    }
}
