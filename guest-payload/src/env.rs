//! What the payload ran on: kernel, CPUs, clocksource, hypervisor. Read once per report.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Env {
    /// `uname -r`.
    pub kernel: String,
    /// Online CPUs (the guest's vCPUs inside a guest).
    pub cpus: usize,
    /// CPUs this process may run on (its affinity mask).
    pub cpus_allowed: usize,
    /// `/sys/devices/system/clocksource/clocksource0/current_clocksource`, or "unknown": the
    /// clock every timing in the report was read from (an emulated HPET costs microseconds a
    /// read under TCG; tsc and kvm-clock are read in user space).
    pub clocksource: String,
    /// `available_clocksource` (empty when unreadable; absent in reports before schema 2).
    #[serde(default)]
    pub clocksource_available: Vec<String>,
    /// Hypervisor vendor from CPUID leaf 0x40000000 when the hypervisor bit is set, else None.
    pub hypervisor: Option<String>,
    /// `/proc/cmdline`, trimmed.
    pub cmdline: String,
}

impl Env {
    pub fn read() -> Self {
        Self {
            kernel: kernel_release(),
            cpus: online_cpus(),
            cpus_allowed: allowed_cpus(),
            clocksource: read_trimmed("/sys/devices/system/clocksource/clocksource0/current_clocksource")
                .unwrap_or_else(|| "unknown".into()),
            clocksource_available: read_trimmed(
                "/sys/devices/system/clocksource/clocksource0/available_clocksource",
            )
            .map(|s| s.split_whitespace().map(String::from).collect())
            .unwrap_or_default(),
            hypervisor: hypervisor_vendor(),
            cmdline: read_trimmed("/proc/cmdline").unwrap_or_default(),
        }
    }
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

fn kernel_release() -> String {
    // SAFETY: uname fills a zeroed, properly sized struct; release is NUL-terminated.
    unsafe {
        let mut uts: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut uts) != 0 {
            return "unknown".into();
        }
        std::ffi::CStr::from_ptr(uts.release.as_ptr())
            .to_string_lossy()
            .into_owned()
    }
}

pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 { n as usize } else { 1 }
}

fn allowed_cpus() -> usize {
    // SAFETY: sched_getaffinity writes at most size_of::<cpu_set_t>() bytes into the set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return online_cpus();
        }
        libc::CPU_COUNT(&set) as usize
    }
}

/// CPUID leaf `leaf`: a safe function since Rust 1.94, wrapped for the older toolchains the
/// crate's rust-version allows.
#[cfg(target_arch = "x86_64")]
#[allow(unused_unsafe)]
pub fn cpuid(leaf: u32) -> std::arch::x86_64::CpuidResult {
    // SAFETY: every x86_64 CPU has the CPUID instruction.
    unsafe { std::arch::x86_64::__cpuid(leaf) }
}

#[cfg(target_arch = "x86_64")]
fn hypervisor_vendor() -> Option<String> {
    // CPUID.1:ECX bit 31 is the "running under a hypervisor" bit.
    let leaf1 = cpuid(1);
    if leaf1.ecx & (1 << 31) == 0 {
        return None;
    }
    let leaf = cpuid(0x4000_0000);
    let mut bytes = Vec::with_capacity(12);
    for reg in [leaf.ebx, leaf.ecx, leaf.edx] {
        bytes.extend_from_slice(&reg.to_le_bytes());
    }
    let vendor = String::from_utf8_lossy(&bytes)
        .trim_matches(char::from(0))
        .trim()
        .to_string();
    Some(if vendor.is_empty() {
        "unknown".into()
    } else {
        vendor
    })
}

#[cfg(not(target_arch = "x86_64"))]
fn hypervisor_vendor() -> Option<String> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_reads_this_machine() {
        let env = Env::read();
        assert!(!env.kernel.is_empty() && env.kernel != "unknown");
        assert!(env.cpus >= 1);
        assert!(env.cpus_allowed >= 1 && env.cpus_allowed <= env.cpus.max(env.cpus_allowed));
        if env.clocksource != "unknown" {
            assert!(env.clocksource_available.contains(&env.clocksource), "{env:?}");
        }
    }
}
