//! `ocrig doctor`: what this host is and what ocrig will do on it.

use std::time::Duration;

use crate::host::{self, NestedHost, VirtEvidence};
use crate::hostfs::{HostFs, LocalFs};
use crate::image::{self, ImageSpec, KernelSource};
use serde_json::{Value, json};

/// What doctor says, one fact at a time: each line printed as soon as it is known, or (`--json`)
/// every fact kept under its key and printed as one JSON object at the end. Each fact's JSON
/// carries what its line says: the figures as numbers where the line has them, the words as
/// they are printed otherwise.
struct Say {
    json: Option<serde_json::Map<String, Value>>,
}

impl Say {
    fn fact(&mut self, key: &str, line: String, value: Value) {
        match &mut self.json {
            None => println!("{line}"),
            Some(facts) => {
                facts.insert(key.into(), value);
            }
        }
    }
}

/// A probe's outcome: its description and what it measured, or why it was not taken.
fn probed<T: serde::Serialize>(r: &Result<T, String>, describe: impl Fn(&T) -> String) -> Value {
    match r {
        Ok(m) => json!({"description": describe(m), "measured": m}),
        Err(e) => json!({"error": e}),
    }
}

pub fn doctor(json: bool) -> anyhow::Result<()> {
    let mut say = Say {
        json: json.then(serde_json::Map::new),
    };
    let allowed = host::allowed_cpus();
    let cpus = crate::topology::usable_cpus(&LocalFs, &allowed);
    let (total, avail) = host::memory_mib();
    let online = host::online_cpus();
    say.fact(
        "host_cpus",
        format!(
            "host CPUs:      {} online, usable {}",
            online,
            crate::topology::cpu_words(&cpus)
        ),
        json!({"online": online, "usable": cpus}),
    );
    let topology = crate::topology::Topology::read(&LocalFs, &cpus);
    let order = topology.preference();
    const ORDER_RULE: &str = "`host.cpus: N` takes the first N: isolated CPUs first, one thread a core, one L3 \
         domain and one NUMA node's cores first, CPU 0's core last";
    say.fact(
        "cpu_order",
        format!(
            "CPU order:      {} ({ORDER_RULE})",
            crate::topology::cpu_words(&order)
        ),
        json!({"cpus": order, "rule": ORDER_RULE}),
    );
    // What a sweep with `host.cpus: 2` measures on: the probes below are taken there.
    let two: Vec<usize> = {
        let mut v = order.iter().copied().take(2).collect::<Vec<_>>();
        v.sort_unstable();
        v
    };
    let described = topology.describe(&two, Some(&allowed));
    say.fact(
        "host_cpus_2",
        format!("host.cpus: 2 →  {described}"),
        json!({"cpus": two, "description": described}),
    );
    let start = crate::backend::StartPlacement::of(&two, &topology, topology.others(&two, &allowed).cpus);
    let start = start.describe();
    say.fact("guests_start", format!("guests start:   {start}"), json!(start));
    say.fact(
        "memory_mib",
        format!("memory:         {total} MiB total, {avail} MiB available"),
        json!({"total": total, "available": avail}),
    );
    let ev = VirtEvidence::read();
    let choice = ev.choose();
    let qemu_v = host::qemu_version(std::path::Path::new("qemu-system-x86_64"));
    for (key, line, value) in virt_facts(&LocalFs, &ev, qemu_v) {
        say.fact(key, line, value);
    }
    const NOT_INSTALLED: &str = "not installed (run scripts/setup)";
    let qemu = host::tool_version("qemu-system-x86_64", &["--version"]);
    say.fact(
        "qemu",
        format!("QEMU:           {}", qemu.as_deref().unwrap_or(NOT_INSTALLED)),
        json!(qemu),
    );
    let virsh = host::tool_version("virsh", &["--version"]);
    say.fact(
        "libvirt_client",
        format!("libvirt client: {}", virsh.as_deref().unwrap_or(NOT_INSTALLED)),
        json!(virsh),
    );
    let libvirtd = libvirtd_status();
    say.fact("libvirtd", format!("libvirtd:       {libvirtd}"), json!(libvirtd));
    let libvirt_qemu = libvirt_qemu_line();
    say.fact(
        "libvirt_qemu",
        format!("libvirt's QEMU: {libvirt_qemu}"),
        json!(libvirt_qemu),
    );
    match image::resolve_default_kernel() {
        Ok(k) => say.fact(
            "default_kernel",
            format!("default kernel: {k} (Debian's linux-image-amd64)"),
            json!({"release": k.to_string(), "package": "linux-image-amd64"}),
        ),
        Err(e) => say.fact(
            "default_kernel",
            format!("default kernel: cannot resolve — {e:#}"),
            json!({"error": format!("{e:#}")}),
        ),
    }
    let spec = ImageSpec::kernel(KernelSource::Debian("default".into()));
    let cache = image::cache_dir();
    let img = image::cached(&spec, &cache);
    match &img {
        Ok(Some(img)) => say.fact(
            "image",
            format!(
                "image (default kernel): cached {} — kernel {}",
                img.dir.display(),
                img.kernel_release
            ),
            json!({"kernel": "default", "cached": true, "dir": img.dir, "kernel_release": img.kernel_release}),
        ),
        Ok(None) => say.fact(
            "image",
            format!(
                "image (default kernel): not built yet (`ocrig image build`; cache {})",
                cache.display()
            ),
            json!({"kernel": "default", "cached": false, "cache": cache}),
        ),
        Err(e) => say.fact(
            "image",
            format!("image (default kernel): unknown — {e:#}"),
            json!({"kernel": "default", "error": format!("{e:#}")}),
        ),
    }
    let img = img.ok().flatten();
    for (key, line, value) in start_facts(choice.accel, img.as_ref()) {
        say.fact(key, line, value);
    }
    let timeline = timeline_line(&LocalFs);
    let words = timeline
        .trim_start_matches("vCPU timeline:")
        .trim_start()
        .to_string();
    say.fact("vcpu_timeline", timeline, json!(words));
    use crate::telemetry::host_speed::HostProbe;
    let speed = crate::telemetry::host_speed::probe(&two, Duration::from_secs(2));
    let line = match &speed {
        Ok(s) => format!("host speed:     {}", s.describe()),
        Err(e) => format!("host speed:     not probed — {e}"),
    };
    say.fact("host_speed", line, probed(&speed, |s| s.describe()));
    let handover = crate::telemetry::host_handover::probe(&two, Duration::from_secs(2));
    let line = match &handover {
        Ok(s) => format!("host hand-over: {}", s.describe()),
        Err(e) => format!("host hand-over: not probed — {e}"),
    };
    say.fact("host_handover", line, probed(&handover, |s| s.describe()));
    let record = crate::telemetry::host_record::read(&LocalFs, &two, true);
    let summary = record.summary();
    let hazards = record.hazards();
    say.fact(
        "host",
        format!("host:           {summary}"),
        json!({"summary": summary, "record": record}),
    );
    if say.json.is_some() {
        say.fact("timing_hazards", String::new(), json!(hazards));
    } else if hazards.is_empty() {
        println!("timing hazards: none found");
    }
    if say.json.is_none() {
        for h in hazards {
            println!("timing hazard:  {h}");
        }
    }
    let floor =
        crate::telemetry::host_speed::noise_floor(&two, Duration::from_secs(6), Duration::from_secs(1));
    let describe =
        |f: &crate::telemetry::host_speed::NoiseFloor| f.describe(crate::stats::power::detectable_at_cv);
    let line = match &floor {
        Ok(f) => format!("noise floor:    {}", describe(f)),
        Err(e) => format!("noise floor:    not measured — {e}"),
    };
    say.fact("noise_floor", line, probed(&floor, describe));
    if let Some(facts) = say.json {
        crate::commands::out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&Value::Object(facts))?
        ))?;
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

/// One line of doctor's: its JSON key, the line, and its JSON value.
type Fact = (&'static str, String, Value);

/// The accelerator `auto` picks for each backend and why, whether the host is itself a guest,
/// and whether this QEMU reads KVM counters without disturbing the guests. `ev` is the
/// evidence for QEMU started by this process (the qemu backend).
fn virt_facts(fs: &dyn HostFs, ev: &VirtEvidence, qemu: Option<(u32, u32, u32)>) -> Vec<Fact> {
    let mut out = Vec::new();
    let choice = ev.choose();
    out.push((
        "accel",
        format!("accel (auto):   {} — {}", choice.accel.as_str(), choice.reason),
        json!({"choice": choice.accel.as_str(), "reason": choice.reason}),
    ));
    let opens_rw = match (&ev.kvm_denied, ev.dev_kvm) {
        (_, false) => "no node".to_string(),
        (None, true) => "yes".into(),
        (Some(why), true) => format!("no ({why})"),
    };
    out.push((
        "accel_evidence",
        format!(
            "  evidence:     vmx/svm={} /dev/kvm={} kvm_intel|kvm_amd={} kvm_pvm={} opens-rw={}",
            ev.cpu_has_vmx_or_svm, ev.dev_kvm, ev.kvm_intel_or_amd_loaded, ev.kvm_pvm_loaded, opens_rw
        ),
        json!({
            "vmx_or_svm": ev.cpu_has_vmx_or_svm,
            "dev_kvm": ev.dev_kvm,
            "kvm_intel_or_amd_loaded": ev.kvm_intel_or_amd_loaded,
            "kvm_pvm_loaded": ev.kvm_pvm_loaded,
            "opens_rw": opens_rw,
        }),
    ));
    let lv = VirtEvidence::read_for_libvirt(fs);
    let lc = lv.choose();
    out.push((
        "accel_libvirt",
        format!("accel (libvirt): {} — {}", lc.accel.as_str(), lc.reason),
        json!({"choice": lc.accel.as_str(), "reason": lc.reason}),
    ));
    let nested = NestedHost::read_from(fs).describe();
    out.push(("host_is_a_vm", format!("host is a VM:   {nested}"), json!(nested)));
    if choice.accel == host::Accel::Kvm || lc.accel == host::Accel::Kvm {
        let words = match qemu {
            Some(v) if v >= host::QEMU_QUIET_STATS => format!(
                "QEMU {}.{}.{} reads them with query-stats without stopping the vCPUs",
                v.0, v.1, v.2
            ),
            Some(v) => format!(
                "QEMU {}.{}.{} < 8.1: query-stats kicks every vCPU out of the guest per read \
                 (adding exits to what it counts), so ocrig reads debugfs instead (needs debugfs mounted)",
                v.0, v.1, v.2
            ),
            None => "QEMU version unknown".into(),
        };
        out.push(("kvm_counters", format!("KVM counters:   {words}"), json!(words)));
    }
    out
}

/// [`virt_facts`]' lines.
#[cfg(test)]
fn virt_lines(fs: &dyn HostFs, ev: &VirtEvidence, qemu: Option<(u32, u32, u32)>) -> Vec<String> {
    virt_facts(fs, ev, qemu)
        .into_iter()
        .map(|(_, line, _)| line)
        .collect()
}

/// [`start_methods`] as facts: each line's words after its label.
fn start_facts(accel: host::Accel, img: Option<&image::Image>) -> Vec<Fact> {
    let keys = [
        ("start_boot", "start: boot"),
        ("start_clone", "start: clone"),
        ("guest_clock", "guest clock:"),
    ];
    start_methods(accel, img)
        .into_iter()
        .zip(keys)
        .map(|(line, (key, label))| {
            let words = line.strip_prefix(label).unwrap_or(&line).trim_start().to_string();
            (key, line, json!(words))
        })
        .collect()
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
