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
    /// Why the user that runs QEMU cannot open /dev/kvm read-write (None: it can, or there is
    /// no /dev/kvm, which `dev_kvm` says). QEMU opens it `O_RDWR`; without that every guest
    /// exits with "Could not access KVM kernel module: Permission denied".
    pub kvm_denied: Option<String>,
}

/// The device node QEMU opens for KVM.
pub const DEV_KVM: &str = "/dev/kvm";

/// The user whose permissions decide whether QEMU can open /dev/kvm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QemuUser {
    /// For messages: `this process (uid 1000)`, `libvirt's qemu user libvirt-qemu`.
    pub who: String,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (as libvirt sets them: the user's groups from /etc/group).
    pub groups: Vec<u32>,
    /// This process itself: then /dev/kvm is really opened (which also honours ACLs and
    /// device cgroups that mode bits do not show).
    pub is_self: bool,
}

impl QemuUser {
    /// This process: QEMU started directly by ocrig runs as it.
    pub fn this_process() -> Self {
        // SAFETY: getuid/getgid cannot fail; getgroups writes at most `n` ids.
        let (uid, gid, groups) = unsafe {
            let n = libc::getgroups(0, std::ptr::null_mut());
            let mut g = vec![0 as libc::gid_t; n.max(0) as usize];
            let got = libc::getgroups(n, g.as_mut_ptr());
            g.truncate(got.max(0) as usize);
            (libc::getuid(), libc::getgid(), g)
        };
        Self {
            who: format!("this process (uid {uid})"),
            uid,
            gid,
            groups,
            is_self: true,
        }
    }

    /// The user libvirt's QEMU runs ocrig's domains as: root, as each domain asks in its DAC
    /// `<seclabel>` (the host's qemu.conf `user` is for its other VMs), resolved through the
    /// host's /etc/passwd and /etc/group.
    pub fn libvirt_daemon(fs: &dyn crate::hostfs::HostFs) -> Result<Self, String> {
        let passwd = fs.read("/etc/passwd").unwrap_or_default();
        let groups_file = fs.read("/etc/group").unwrap_or_default();
        resolve_user("+0", Some("+0"), &passwd, &groups_file)
            .map(|mut u| {
                u.who = "libvirt's QEMU for ocrig's domains (root, by their <seclabel>)".into();
                u
            })
            .map_err(|e| format!("libvirt's QEMU for ocrig's domains (root): {e}"))
    }
}

/// `name` (or `+uid`) and an optional group name (or `+gid`) as ids, with the user's
/// supplementary groups.
fn resolve_user(name: &str, group: Option<&str>, passwd: &str, groups: &str) -> Result<QemuUser, String> {
    let numeric = |s: &str| s.strip_prefix('+').and_then(|n| n.parse::<u32>().ok());
    let entry = passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() > 3 && (f[0] == name || numeric(name).is_some_and(|u| f[2].parse() == Ok(u))));
    let (login, uid, mut gid) = match (&entry, numeric(name)) {
        (Some(f), _) => (
            f[0].to_string(),
            f[2].parse::<u32>()
                .map_err(|_| "unreadable /etc/passwd entry".to_string())?,
            f[3].parse::<u32>()
                .map_err(|_| "unreadable /etc/passwd entry".to_string())?,
        ),
        (None, Some(uid)) => (String::new(), uid, uid),
        (None, None) => return Err("no such user in /etc/passwd".into()),
    };
    let group_entries: Vec<Vec<&str>> = groups.lines().map(|l| l.split(':').collect()).collect();
    if let Some(g) = group {
        gid = match numeric(g) {
            Some(n) => n,
            None => group_entries
                .iter()
                .find(|f| f.len() > 2 && f[0] == g)
                .and_then(|f| f[2].parse().ok())
                .ok_or_else(|| format!("no group {g} in /etc/group"))?,
        };
    }
    let supplementary = group_entries
        .iter()
        .filter(|f| f.len() > 3 && !login.is_empty() && f[3].split(',').any(|m| m.trim() == login))
        .filter_map(|f| f[2].parse().ok())
        .collect();
    Ok(QemuUser {
        who: name.to_string(),
        uid,
        gid,
        groups: supplementary,
        is_self: false,
    })
}

/// Whether `user` may open `path` read-write, judged as the kernel does for a device node:
/// root passes; else the owner, group or other bits of the node's mode must grant `rw`. For
/// this process itself the node is also really opened (ACLs, device cgroups). `Err` says why not.
pub fn kvm_access(path: &Path, user: &QemuUser) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).map_err(|e| format!("{} cannot be read: {e}", path.display()))?;
    if user.is_self {
        return match std::fs::OpenOptions::new().read(true).write(true).open(path) {
            Ok(_) => Ok(()),
            Err(e) => Err(format!(
                "{} cannot open {} read-write ({e}; mode {:o}, owner {}:{}) — add the user to the node's \
                 group (usually `kvm`: `adduser $USER kvm`, then log in again)",
                user.who,
                path.display(),
                meta.mode() & 0o7777,
                meta.uid(),
                meta.gid()
            )),
        };
    }
    mode_allows_rw(meta.mode(), meta.uid(), meta.gid(), user).map_err(|why| {
        format!(
            "{} cannot open {} read-write: {why} — add it to the node's group (usually `kvm`)",
            user.who,
            path.display()
        )
    })
}

/// The classic Unix permission check of `rw` for `user` on a node with `mode`, owned by
/// `owner:group`.
fn mode_allows_rw(mode: u32, owner: u32, group: u32, user: &QemuUser) -> Result<(), String> {
    let has = |bits: u32| mode & bits == bits;
    let (granted, as_what) = if user.uid == 0 {
        (true, "root")
    } else if user.uid == owner {
        (has(0o600), "its owner")
    } else if user.gid == group || user.groups.contains(&group) {
        (has(0o060), "a member of its group")
    } else {
        (has(0o006), "neither its owner nor in its group")
    };
    if granted {
        Ok(())
    } else {
        Err(format!(
            "mode {:o}, owner {owner}:{group}; uid {} gid {} groups {:?} is {as_what}, which the mode does not let read and write",
            mode & 0o7777,
            user.uid,
            user.gid,
            user.groups
        ))
    }
}

/// Whether the host is itself a virtual machine, and the evidence.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NestedHost {
    /// CPUID leaf 1 ECX bit 31, which Linux shows as the `hypervisor` flag in /proc/cpuinfo.
    pub hypervisor_bit: bool,
    /// /sys/class/dmi/id/sys_vendor and product_name (e.g. `QEMU`, `Standard PC (Q35 + ICH9, 2009)`).
    pub sys_vendor: Option<String>,
    pub product_name: Option<String>,
}

/// DMI vendor or product words of virtual machines (KVM/QEMU, cloud hypervisors, VMware,
/// Hyper-V, Xen, VirtualBox).
const VM_DMI_WORDS: &[&str] = &[
    "qemu",
    "kvm",
    "bochs",
    "virtual machine",
    "vmware",
    "virtualbox",
    "innotek",
    "xen",
    "amazon ec2",
    "google compute engine",
    "openstack",
    "cloud hypervisor",
    "firecracker",
];

impl NestedHost {
    pub fn read_from(fs: &dyn crate::hostfs::HostFs) -> Self {
        let cpuinfo = fs.read("/proc/cpuinfo").unwrap_or_default();
        let dmi = |f: &str| {
            fs.read(&format!("/sys/class/dmi/id/{f}"))
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        };
        Self {
            hypervisor_bit: cpu_flag(&cpuinfo, "hypervisor"),
            sys_vendor: dmi("sys_vendor"),
            product_name: dmi("product_name"),
        }
    }

    /// DMI names a virtual machine.
    pub fn dmi_says_vm(&self) -> bool {
        [&self.sys_vendor, &self.product_name]
            .into_iter()
            .flatten()
            .any(|s| {
                let s = s.to_ascii_lowercase();
                VM_DMI_WORDS.iter().any(|w| s.contains(w))
            })
    }

    pub fn is_guest(&self) -> bool {
        self.hypervisor_bit || self.dmi_says_vm()
    }

    /// One paragraph for `doctor`: what the host is and what that means for the figures.
    pub fn describe(&self) -> String {
        let dmi = format!(
            "DMI sys_vendor {:?}, product_name {:?}",
            self.sys_vendor.as_deref().unwrap_or("?"),
            self.product_name.as_deref().unwrap_or("?")
        );
        if !self.is_guest() {
            return format!("bare metal as far as it can tell (no CPUID hypervisor bit; {dmi})");
        }
        let evidence = match (self.hypervisor_bit, self.dmi_says_vm()) {
            (true, true) => "CPUID hypervisor bit set and DMI names a VM",
            (true, false) => "CPUID hypervisor bit set",
            _ => "DMI names a VM",
        };
        format!(
            "this host is itself a guest ({evidence}; {dmi}): KVM here is nested (L1), and when the \
             hypervisor below (L0) preempts this host's vCPUs that shows only as steal in this host's \
             /proc/stat (the report's `other load` / host steal), not in the guests' steal or vCPU wait, \
             and exits cost an extra L0 round trip — figures are for this VM, not the machine under it"
        )
    }
}

/// Whether /proc/cpuinfo's `flags` lines carry `flag`.
fn cpu_flag(cpuinfo: &str, flag: &str) -> bool {
    cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags"))
        .any(|l| l.split_whitespace().any(|f| f == flag))
}

/// What decides the CPUID and PV features KVM hands a `-cpu host` guest besides the CPU: the
/// host kernel release and every KVM module parameter ([`kvm_params`]), e.g. kvm_intel's
/// `ept`, kvm's `enable_pmu`, `halt_poll_ns`. One `key=value` line each, sorted.
pub fn kvm_identity(fs: &dyn crate::hostfs::HostFs) -> String {
    let release = fs
        .read("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|e| format!("unknown ({e})"));
    let mut out = format!("host-kernel {release}\n");
    for (k, v) in kvm_params(fs) {
        out.push_str(&format!("kvm-param {k}={v}\n"));
    }
    out
}

/// Every parameter of the loaded KVM modules (`/sys/module/{kvm,kvm_intel,kvm_amd}/parameters`),
/// `module.name` → value, sorted; a write-only or root-only one reads `?` (its name still
/// counts).
pub fn kvm_params(fs: &dyn crate::hostfs::HostFs) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    for module in ["kvm", "kvm_intel", "kvm_amd"] {
        let dir = format!("/sys/module/{module}/parameters");
        let Ok(names) = fs.list_dir(&dir) else {
            continue;
        };
        let paths: Vec<String> = names.iter().map(|n| format!("{dir}/{n}")).collect();
        for (n, v) in names.iter().zip(fs.read_many(&paths)) {
            let v = v.map(|v| v.trim().to_string()).unwrap_or_else(|_| "?".into());
            out.insert(format!("{module}.{n}"), v);
        }
    }
    out
}

/// What a QEMU `-cpu` value says of `feature` (`kvm-steal-time`, `kvm-pv-unhalt`): Some(on) or
/// Some(off) as QEMU reads it, None when it is not mentioned. The feature's name with `-` or
/// `_`, `-name` / `+name` / bare `name`, or `name=` one of QEMU's booleans (`off`, `no`,
/// `false`, `n`, `on`, `yes`, `true`, `y`, in lower case: QEMU 10 refuses `OFF` or `N`,
/// "expects 'on' or 'off'"); the last mention wins.
pub fn cpu_feature(cpu: &str, feature: &str) -> Option<bool> {
    let mut said = None;
    for f in cpu.split(',').skip(1) {
        let f = f.trim();
        let (name, on) = match f.split_once('=') {
            Some((name, value)) => match value {
                "off" | "no" | "false" | "n" => (name, false),
                "on" | "yes" | "true" | "y" => (name, true),
                _ => continue, // QEMU refuses it; nothing to read
            },
            None => match f.strip_prefix('-') {
                Some(name) => (name, false),
                None => (f.strip_prefix('+').unwrap_or(f), true),
            },
        };
        if name.replace('_', "-") == feature {
            said = Some(on);
        }
    }
    said
}

impl VirtEvidence {
    /// This host, for QEMU started by this process.
    pub fn read() -> Self {
        Self::read_for(&crate::hostfs::LocalFs, Some(&QemuUser::this_process()))
    }

    /// The evidence on the host behind `fs` (a remote libvirt host's over SSH), /dev/kvm
    /// access judged for this process's user (remote: not judged, see `read_for`).
    pub fn read_from(fs: &dyn crate::hostfs::HostFs) -> Self {
        let user = fs.is_local().then(QemuUser::this_process);
        Self::read_for(fs, user.as_ref())
    }

    /// The evidence with /dev/kvm access judged for `user` (None: not judged — a remote host,
    /// whose node this process cannot stat; QEMU's own error then says it at boot).
    pub fn read_for(fs: &dyn crate::hostfs::HostFs, user: Option<&QemuUser>) -> Self {
        let cpuinfo = fs.read("/proc/cpuinfo").unwrap_or_default();
        let dev_kvm = fs.exists(DEV_KVM);
        let kvm_denied = match user {
            Some(u) if dev_kvm && fs.is_local() => kvm_access(Path::new(DEV_KVM), u).err(),
            _ => None,
        };
        Self {
            cpu_has_vmx_or_svm: cpu_flag(&cpuinfo, "vmx") || cpu_flag(&cpuinfo, "svm"),
            dev_kvm,
            kvm_intel_or_amd_loaded: fs.exists("/sys/module/kvm_intel") || fs.exists("/sys/module/kvm_amd"),
            kvm_pvm_loaded: fs.exists("/sys/module/kvm_pvm"),
            kvm_denied,
        }
    }

    /// For the libvirt backend: access judged for root, as its domains ask in their <seclabel>.
    pub fn read_for_libvirt(fs: &dyn crate::hostfs::HostFs) -> Self {
        if !fs.is_local() {
            // A remote node cannot be stat'ed from here: not judged (QEMU's error says it).
            return Self::read_for(fs, None);
        }
        match QemuUser::libvirt_daemon(fs) {
            Ok(u) => Self::read_for(fs, Some(&u)),
            Err(e) => Self {
                kvm_denied: Some(format!(
                    "cannot tell whether libvirt's QEMU may open /dev/kvm: {e}"
                )),
                ..Self::read_for(fs, None)
            },
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
        if let Some(why) = &self.kvm_denied {
            return tcg(format!("/dev/kvm is there but {why}; using TCG"));
        }
        AccelChoice {
            accel: Accel::Kvm,
            reason: "hardware virtualization (vmx/svm) with kvm_intel/kvm_amd, and /dev/kvm opens read-write for the user running QEMU".into(),
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

/// Where QEMU's other threads and ocrig itself go on this machine while `measured` is
/// measured: the usable CPUs outside the measured cores and the isolated CPUs, or what it had
/// to fall back to, and why ([`crate::topology::Topology::others`]; empty on a host measured
/// whole).
pub fn other_cpus(measured: &[usize]) -> crate::topology::Others {
    crate::topology::Topology::read(&crate::hostfs::LocalFs, measured).others(measured, &allowed_cpus())
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
    use ocrig_payload::env::cpuid;
    // cpuid exists on every x86-64 CPU; leaves above the maximum read as zeros or junk, hence
    // the range checks.
    let invariant = cpuid(0x8000_0000).eax >= 0x8000_0007 && cpuid(0x8000_0007).edx & (1 << 8) != 0;
    let with = |khz: u64, source| {
        Some(TscFreq {
            khz,
            source,
            invariant,
        })
    };
    let hv_khz = {
        let max = cpuid(0x4000_0000).eax;
        if (0x4000_0010..0x4000_0100).contains(&max) {
            cpuid(0x4000_0010).eax as u64
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

/// The first QEMU whose `query-stats` reads KVM's binary stats without kicking every vCPU
/// out of the guest (8.0 and 7.x stop each vCPU per read, which adds the exits being counted).
pub const QEMU_QUIET_STATS: (u32, u32, u32) = (8, 1, 0);

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
            kvm_denied: None,
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

    #[test]
    fn kvm_is_refused_where_the_qemu_user_cannot_open_dev_kvm() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let node = dir.path().join("kvm");
        std::fs::write(&node, "").unwrap();
        // The stand-in is owned by whoever runs the test; a different uid outside its group.
        let meta = std::fs::metadata(&node).unwrap();
        use std::os::unix::fs::MetadataExt;
        let stranger = QemuUser {
            who: "user nobody".into(),
            uid: meta.uid() + 4242,
            gid: meta.gid() + 4242,
            groups: vec![],
            is_self: false,
        };
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o660)).unwrap();
        let e = kvm_access(&node, &stranger).unwrap_err();
        assert!(
            e.contains("mode 660") && e.contains("neither its owner nor in its group"),
            "{e}"
        );
        let member = QemuUser {
            groups: vec![meta.gid()],
            ..stranger.clone()
        };
        assert_eq!(kvm_access(&node, &member), Ok(()), "the kvm group grants rw");
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(
            kvm_access(&node, &member)
                .unwrap_err()
                .contains("a member of its group")
        );
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(kvm_access(&node, &stranger), Ok(()));
        let root = QemuUser {
            uid: 0,
            ..stranger.clone()
        };
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o000)).unwrap();
        assert_eq!(kvm_access(&node, &root), Ok(()));
        assert!(kvm_access(&dir.path().join("missing"), &stranger).is_err());
        // The decision: hardware virtualization present, but the node refuses the QEMU user.
        let mut e = ev(true, true, true, false);
        e.kvm_denied = kvm_access(&node, &stranger).err();
        let c = e.choose();
        assert_eq!(c.accel, Accel::Tcg);
        assert!(
            c.reason.contains("cannot open") && c.reason.contains("using TCG"),
            "{}",
            c.reason
        );
    }

    #[test]
    fn qemu_users_resolve_through_etc_passwd_and_etc_group() {
        // ocrig's libvirt domains run QEMU as root by their own <seclabel>, whatever qemu.conf says.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("etc/libvirt")).unwrap();
        std::fs::write(
            dir.path().join("etc/libvirt/qemu.conf"),
            "user = \"libvirt-qemu\"\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("etc/passwd"), "root:x:0:0:root:/root:/bin/bash\n").unwrap();
        std::fs::write(dir.path().join("etc/group"), "root:x:0:\nkvm:x:104:root\n").unwrap();
        let root = QemuUser::libvirt_daemon(&crate::testing::RootedFs::new(dir.path())).unwrap();
        assert_eq!((root.uid, root.gid, root.groups.clone()), (0, 0, vec![104]));
        assert!(root.who.contains("<seclabel>"), "{}", root.who);
        let passwd = "root:x:0:0:root:/root:/bin/bash\nlibvirt-qemu:x:64055:108:Libvirt Qemu,,,:/var/lib/libvirt:/usr/sbin/nologin\n";
        let group = "root:x:0:\nkvm:x:104:libvirt-qemu,alice\nlibvirt-qemu:x:108:\n";
        let u = resolve_user("libvirt-qemu", None, passwd, group).unwrap();
        assert_eq!((u.uid, u.gid, u.groups.clone()), (64055, 108, vec![104]));
        let no_kvm = resolve_user("libvirt-qemu", None, passwd, "kvm:x:104:alice\n").unwrap();
        // /dev/kvm as Debian's udev makes it: root:kvm 0660.
        assert_eq!(mode_allows_rw(0o20660, 0, 104, &u), Ok(()));
        assert!(mode_allows_rw(0o20660, 0, 104, &no_kvm).is_err());
        let r = resolve_user("+0", Some("+0"), passwd, group).unwrap();
        assert_eq!((r.uid, r.gid), (0, 0));
        assert!(resolve_user("nobody-here", None, passwd, group).is_err());
    }

    #[test]
    fn a_nested_host_is_recognised_by_cpuid_and_dmi() {
        let root = tempfile::tempdir().unwrap();
        let fs = crate::testing::RootedFs::new(root.path());
        fs.write(
            "/proc/cpuinfo",
            "processor : 0\nflags : fpu vme sse2 vmx hypervisor\n",
        );
        fs.write("/sys/class/dmi/id/sys_vendor", "QEMU\n");
        fs.write(
            "/sys/class/dmi/id/product_name",
            "Standard PC (Q35 + ICH9, 2009)\n",
        );
        let n = NestedHost::read_from(&fs);
        assert!(n.hypervisor_bit && n.dmi_says_vm() && n.is_guest());
        let d = n.describe();
        assert!(
            d.contains("itself a guest") && d.contains("steal") && d.contains("QEMU"),
            "{d}"
        );
        let metal = tempfile::tempdir().unwrap();
        let fs = crate::testing::RootedFs::new(metal.path());
        fs.write("/proc/cpuinfo", "flags : fpu vmx\n");
        fs.write("/sys/class/dmi/id/sys_vendor", "Dell Inc.\n");
        fs.write("/sys/class/dmi/id/product_name", "PowerEdge R640\n");
        let n = NestedHost::read_from(&fs);
        assert!(!n.is_guest(), "{n:?}");
        assert!(n.describe().contains("bare metal"));
    }

    #[test]
    fn kvm_identity_names_the_host_kernel_and_every_module_parameter() {
        let root = tempfile::tempdir().unwrap();
        let fs = crate::testing::RootedFs::new(root.path());
        fs.write("/proc/sys/kernel/osrelease", "6.1.0-41-amd64\n");
        fs.write("/sys/module/kvm/parameters/halt_poll_ns", "200000\n");
        fs.write("/sys/module/kvm/parameters/enable_pmu", "Y\n");
        fs.write("/sys/module/kvm_intel/parameters/ept", "Y\n");
        let id = kvm_identity(&fs);
        assert_eq!(
            id,
            "host-kernel 6.1.0-41-amd64\nkvm-param kvm.enable_pmu=Y\nkvm-param kvm.halt_poll_ns=200000\nkvm-param kvm_intel.ept=Y\n"
        );
        fs.write("/sys/module/kvm/parameters/halt_poll_ns", "0\n");
        assert_ne!(kvm_identity(&fs), id, "a changed parameter changes the identity");
    }
}
