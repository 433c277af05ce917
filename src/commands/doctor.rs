//! `ocrig doctor`: what this host is and what ocrig will do on it.

use std::time::Duration;

use crate::host::{self, NestedHost, VirtEvidence};
use crate::hostfs::{HostFs, LocalFs};
use crate::image::{self, ImageSpec, KernelSource};

pub fn doctor() -> anyhow::Result<()> {
    let allowed = host::allowed_cpus();
    let cpus = crate::topology::usable_cpus(&LocalFs, &allowed);
    let (total, avail) = host::memory_mib();
    println!(
        "host CPUs:      {} online, usable {}",
        host::online_cpus(),
        crate::topology::cpu_words(&cpus)
    );
    let topology = crate::topology::Topology::read(&LocalFs, &cpus);
    let order = topology.preference();
    println!(
        "CPU order:      {} (`host.cpus: N` takes the first N: isolated CPUs first, one thread a core, one L3 \
         domain and one NUMA node's cores first, CPU 0's core last)",
        crate::topology::cpu_words(&order)
    );
    // What a sweep with `host.cpus: 2` measures on: the probes below are taken there.
    let two: Vec<usize> = {
        let mut v = order.iter().copied().take(2).collect::<Vec<_>>();
        v.sort_unstable();
        v
    };
    println!("host.cpus: 2 →  {}", topology.describe(&two, Some(&allowed)));
    let start = crate::backend::StartPlacement::of(&two, &topology, topology.others(&two, &allowed).cpus);
    println!("guests start:   {}", start.describe());
    println!("memory:         {total} MiB total, {avail} MiB available");
    let ev = VirtEvidence::read();
    let choice = ev.choose();
    let qemu_v = host::qemu_version(std::path::Path::new("qemu-system-x86_64"));
    for line in virt_lines(&LocalFs, &ev, qemu_v) {
        println!("{line}");
    }
    let qemu = host::tool_version("qemu-system-x86_64", &["--version"]);
    println!(
        "QEMU:           {}",
        qemu.as_deref().unwrap_or("not installed (run scripts/setup)")
    );
    let virsh = host::tool_version("virsh", &["--version"]);
    println!(
        "libvirt client: {}",
        virsh.as_deref().unwrap_or("not installed (run scripts/setup)")
    );
    println!("libvirtd:       {}", libvirtd_status());
    println!("libvirt's QEMU: {}", libvirt_qemu_line());
    match image::resolve_default_kernel() {
        Ok(k) => println!("default kernel: {k} (Debian's linux-image-amd64)"),
        Err(e) => println!("default kernel: cannot resolve — {e:#}"),
    }
    let spec = ImageSpec {
        kernel: KernelSource::Debian("default".into()),
    };
    let cache = image::cache_dir();
    let img = image::cached(&spec, &cache);
    match &img {
        Ok(Some(img)) => println!(
            "image (default kernel): cached {} — kernel {}",
            img.dir.display(),
            img.kernel_release
        ),
        Ok(None) => println!(
            "image (default kernel): not built yet (`ocrig image build`; cache {})",
            cache.display()
        ),
        Err(e) => println!("image (default kernel): unknown — {e:#}"),
    }
    let img = img.ok().flatten();
    for line in start_methods(choice.accel, img.as_ref()) {
        println!("{line}");
    }
    println!("{}", timeline_line(&LocalFs));
    use crate::telemetry::host_speed::HostProbe;
    match crate::telemetry::host_speed::probe(&two, Duration::from_secs(2)) {
        Ok(s) => println!("host speed:     {}", s.describe()),
        Err(e) => println!("host speed:     not probed — {e}"),
    }
    match crate::telemetry::host_handover::probe(&two, Duration::from_secs(2)) {
        Ok(s) => println!("host hand-over: {}", s.describe()),
        Err(e) => println!("host hand-over: not probed — {e}"),
    }
    let record = crate::telemetry::host_record::read(&LocalFs, &two, true);
    println!("host:           {}", record.summary());
    let hazards = record.hazards();
    if hazards.is_empty() {
        println!("timing hazards: none found");
    }
    for h in hazards {
        println!("timing hazard:  {h}");
    }
    match crate::telemetry::host_speed::noise_floor(&two, Duration::from_secs(6), Duration::from_secs(1)) {
        Ok(f) => println!(
            "noise floor:    {}",
            f.describe(crate::stats::power::detectable_at_cv)
        ),
        Err(e) => println!("noise floor:    not measured — {e}"),
    }
    Ok(())
}

/// Whether runs get the host scheduler's vCPU timeline here, and the slice setting it is read
/// against.
fn timeline_line(fs: &dyn HostFs) -> String {
    use crate::telemetry::sched_trace;
    let slice = sched_trace::host_slice_setting(fs);
    let slice = match slice["ns"].as_u64() {
        Some(ns) => format!(
            "{} {:.2} ms",
            slice["name"].as_str().unwrap_or("slice"),
            ns as f64 / 1e6
        ),
        None => format!(
            "slice not readable ({}); the kernel's default {:.2} ms",
            slice["unavailable"].as_str().unwrap_or("?"),
            slice["kernel_default_ns"].as_f64().unwrap_or(0.0) / 1e6
        ),
    };
    match sched_trace::traceable(fs) {
        Ok(()) => {
            format!("vCPU timeline:  traced per run (sched:sched_switch in a tracefs instance); {slice}")
        }
        Err(why) => format!("vCPU timeline:  not available — {why}"),
    }
}

/// The accelerator `auto` picks for each backend and why, whether the host is itself a guest,
/// and whether this QEMU reads KVM counters without disturbing the guests. `ev` is the
/// evidence for QEMU started by this process (the qemu backend).
fn virt_lines(fs: &dyn HostFs, ev: &VirtEvidence, qemu: Option<(u32, u32, u32)>) -> Vec<String> {
    let mut out = Vec::new();
    let choice = ev.choose();
    out.push(format!(
        "accel (auto):   {} — {}",
        choice.accel.as_str(),
        choice.reason
    ));
    out.push(format!(
        "  evidence:     vmx/svm={} /dev/kvm={} kvm_intel|kvm_amd={} kvm_pvm={} opens-rw={}",
        ev.cpu_has_vmx_or_svm,
        ev.dev_kvm,
        ev.kvm_intel_or_amd_loaded,
        ev.kvm_pvm_loaded,
        match (&ev.kvm_denied, ev.dev_kvm) {
            (_, false) => "no node".to_string(),
            (None, true) => "yes".into(),
            (Some(why), true) => format!("no ({why})"),
        }
    ));
    let lv = VirtEvidence::read_for_libvirt(fs);
    let lc = lv.choose();
    out.push(format!("accel (libvirt): {} — {}", lc.accel.as_str(), lc.reason));
    out.push(format!(
        "host is a VM:   {}",
        NestedHost::read_from(fs).describe()
    ));
    if choice.accel == host::Accel::Kvm || lc.accel == host::Accel::Kvm {
        out.push(match qemu {
            Some(v) if v >= host::QEMU_QUIET_STATS => format!(
                "KVM counters:   QEMU {}.{}.{} reads them with query-stats without stopping the vCPUs",
                v.0, v.1, v.2
            ),
            Some(v) => format!(
                "KVM counters:   QEMU {}.{}.{} < 8.1: query-stats kicks every vCPU out of the guest per read \
                 (adding exits to what it counts), so ocrig reads debugfs instead (needs debugfs mounted)",
                v.0, v.1, v.2
            ),
            None => "KVM counters:   QEMU version unknown".into(),
        });
    }
    out
}

/// Which ways of starting a guest work on this host, and why (one line each).
fn start_methods(accel: host::Accel, img: Option<&image::Image>) -> Vec<String> {
    let mut out = Vec::new();
    let qboot = std::path::Path::new(host::QBOOT_ROM).is_file();
    let pvh = match img {
        Some(i) => match (&i.pvh_kernel, &i.pvh_unavailable) {
            (Some(k), _) => Ok(k.display().to_string()),
            (None, why) => Err(why.clone().unwrap_or_default()),
        },
        None => Err("no cached image to check (`ocrig image build`)".into()),
    };
    out.push(match (&pvh, qboot) {
        (Ok(k), true) => format!("start: boot     PVH of {k} with qboot — the fast cold boot"),
        (Ok(k), false) => format!(
            "start: boot     PVH of {k} through SeaBIOS — no {} (install qemu-system-data for qboot)",
            host::QBOOT_ROM
        ),
        (Err(why), _) => format!("start: boot     bzImage through SeaBIOS — {why}"),
    });
    out.push(match crate::backend::started::clone_support() {
        Ok(()) => {
            let v = host::qemu_version(std::path::Path::new("qemu-system-x86_64"))
                .map_or("?".into(), |(a, b, c)| format!("{a}.{b}.{c}"));
            format!(
                "start: clone    works (the default) — QEMU {v} restores a saved template from a file \
                 (`-incoming file:`, QEMU ≥ 8.2); {} templates in {}",
                accel.as_str(),
                crate::image::cache_dir().join("templates").display()
            )
        }
        Err(why) => format!("start: clone    unavailable, guests are booted — {why}"),
    });
    // The TSC rate (maybe a 200 ms measurement) only where TCG guests use it.
    let tsc = (accel == host::Accel::Tcg).then(host::tsc_freq).flatten();
    out.push(match (accel, tsc) {
        (host::Accel::Tcg, Some(f)) => format!(
            "guest clock:    TCG guests get tsc_early_khz={} tsc=reliable (host TSC from {}{})",
            f.khz,
            f.source,
            if f.invariant { ", invariant" } else { "" }
        ),
        (host::Accel::Tcg, None) => {
            "guest clock:    host TSC rate unknown: TCG guests calibrate their own TSC and may use HPET"
                .into()
        }
        (host::Accel::Kvm, _) => "guest clock:    KVM guests use kvm-clock (nothing forced)".into(),
    });
    out
}

/// How libvirt's QEMU runs ocrig's domains (as each asks in its own `<seclabel>`), and the host's
/// other VMs (as /etc/libvirt/qemu.conf says, which ocrig leaves alone).
fn libvirt_qemu_line() -> String {
    qemu_conf_words(std::fs::read_to_string("/etc/libvirt/qemu.conf").ok().as_deref())
}

/// `qemu.conf`'s `user` and `security_driver` (the last uncommented setting of each), which apply
/// to the host's VMs that do not say otherwise, beside what ocrig's domains say for themselves.
fn qemu_conf_words(conf: Option<&str>) -> String {
    const OURS: &str =
        "ocrig's domains run as root, unconfined, without relabelling, by their own <seclabel>";
    let Some(conf) = conf else {
        return format!("{OURS}; no /etc/libvirt/qemu.conf (libvirt not installed: run scripts/setup)");
    };
    let setting = |key: &str| {
        conf.lines()
            .rev()
            .map(str::trim)
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| {
                let (k, v) = l.split_once('=')?;
                (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
            })
    };
    let user = setting("user");
    let driver = setting("security_driver");
    format!(
        "{OURS}; the host's other VMs as qemu.conf says (runs as {}, security driver {})",
        user.as_deref().unwrap_or("libvirt-qemu (the default)"),
        driver
            .as_deref()
            .unwrap_or("the default (AppArmor or SELinux where present)")
    )
}

fn libvirtd_status() -> String {
    let out = std::process::Command::new("timeout")
        .args([
            &format!("{}", Duration::from_secs(5).as_secs()),
            "virsh",
            "-c",
            "qemu:///system",
            "version",
        ])
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            let daemon = text
                .lines()
                .find(|l| l.contains("running hypervisor") || l.contains("library"));
            format!("answers ({})", daemon.unwrap_or("ok").trim())
        }
        Ok(o) => format!("does not answer: {}", String::from_utf8_lossy(&o.stderr).trim()),
        Err(e) => format!("cannot ask: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libvirts_qemu_is_said_for_ocrigs_domains_and_the_hosts_others() {
        let old = "#user = \"libvirt-qemu\"\n# ocrig settings\nsecurity_driver = \"none\"\nuser = \"root\"\n";
        assert_eq!(
            qemu_conf_words(Some(old)),
            "ocrig's domains run as root, unconfined, without relabelling, by their own <seclabel>; the host's other \
             VMs as qemu.conf says (runs as root, security driver none)"
        );
        // Debian's file as shipped: every setting commented out.
        let w = qemu_conf_words(Some("#user = \"root\"\n#security_driver = \"selinux\"\n"));
        assert!(
            w.ends_with("(runs as libvirt-qemu (the default), security driver the default (AppArmor or SELinux where present))"),
            "{w}"
        );
        assert!(qemu_conf_words(None).contains("not installed"));
    }

    #[test]
    fn doctor_says_whether_runs_get_a_timeline_and_why_not() {
        // A host only read (a stand-in): no trace, and the line says why.
        let dir = tempfile::tempdir().unwrap();
        let line = timeline_line(&crate::testing::RootedFs::new(dir.path()));
        assert!(
            line.contains("not available") && line.contains("only read from here"),
            "{line}"
        );
        // This machine: traced, or the precondition that failed in its own words.
        let line = timeline_line(&LocalFs);
        assert!(
            line.contains("traced per run") && line.contains(" ms")
                || line.contains("root")
                || line.contains("tracefs"),
            "{line}"
        );
    }
    use crate::testing::RootedFs;

    #[test]
    fn doctor_says_a_nested_host_is_a_guest_and_what_that_means() {
        let root = tempfile::tempdir().unwrap();
        let fs = RootedFs::new(root.path());
        fs.write(
            "/proc/cpuinfo",
            "processor : 0\nflags : fpu sse2 vmx hypervisor\n",
        );
        fs.write("/sys/class/dmi/id/sys_vendor", "QEMU\n");
        fs.write(
            "/sys/class/dmi/id/product_name",
            "Standard PC (i440FX + PIIX, 1996)\n",
        );
        fs.write("/sys/module/kvm_intel/parameters/nested", "Y\n");
        fs.write("/dev/kvm", "");
        fs.write("/etc/libvirt/qemu.conf", "user = \"root\"\n");
        fs.write("/etc/passwd", "root:x:0:0:root:/root:/bin/bash\n");
        fs.write("/etc/group", "root:x:0:\n");
        let ev = VirtEvidence::read_for(&fs, None);
        let lines = virt_lines(&fs, &ev, Some((8, 0, 4))).join("\n");
        assert!(lines.contains("accel (auto):   kvm"), "{lines}");
        assert!(
            lines.contains("host is a VM:   this host is itself a guest"),
            "{lines}"
        );
        assert!(
            lines.contains("CPUID hypervisor bit set and DMI names a VM"),
            "{lines}"
        );
        assert!(lines.contains("only as steal in this host's"), "{lines}");
        assert!(lines.contains("< 8.1: query-stats kicks every vCPU"), "{lines}");
        let newer = virt_lines(&fs, &ev, Some((10, 0, 2))).join("\n");
        assert!(newer.contains("without stopping the vCPUs"), "{newer}");
    }

    #[test]
    fn libvirts_qemu_for_ocrigs_domains_opens_a_dev_kvm_its_qemu_conf_user_could_not() {
        // A /dev/kvm stand-in of mode 0660 whose group is not libvirt-qemu's: the host's other
        // VMs (as libvirt-qemu) could not open it, ocrig's (root, by their <seclabel>) can.
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let fs = RootedFs::new(root.path());
        fs.write("/dev/kvm", "");
        fs.write("/etc/libvirt/qemu.conf", "user = \"libvirt-qemu\"\n");
        let node = root.path().join("dev/kvm");
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o660)).unwrap();
        fs.write(
            "/etc/passwd",
            "root:x:0:0:root:/root:/bin/bash\nlibvirt-qemu:x:64055:64055:Libvirt Qemu:/var/lib/libvirt:/usr/sbin/nologin\n",
        );
        fs.write("/etc/group", "root:x:0:\nkvm:x:64999:\nlibvirt-qemu:x:64055:\n");
        let user = host::QemuUser::libvirt_daemon(&fs).unwrap();
        assert_eq!(user.uid, 0);
        assert_eq!(host::kvm_access(&node, &user), Ok(()));
    }
}
