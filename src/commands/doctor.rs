//! `ocrig doctor`: what this host is and what ocrig will do on it.

use std::time::Duration;

use crate::host::{self, VirtEvidence};
use crate::image::{self, ImageSpec, KernelSource};

pub fn doctor() -> anyhow::Result<()> {
    let cpus = host::allowed_cpus();
    let (total, avail) = host::memory_mib();
    println!(
        "host CPUs:      {} online, usable {:?}",
        host::online_cpus(),
        cpus
    );
    println!("memory:         {total} MiB total, {avail} MiB available");
    let ev = VirtEvidence::read();
    let choice = ev.choose();
    println!("accel (auto):   {} — {}", choice.accel.as_str(), choice.reason);
    println!(
        "  evidence:     vmx/svm={} /dev/kvm={} kvm_intel|kvm_amd={} kvm_pvm={}",
        ev.cpu_has_vmx_or_svm, ev.dev_kvm, ev.kvm_intel_or_amd_loaded, ev.kvm_pvm_loaded
    );
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
    Ok(())
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
    out.push(match (accel, host::tsc_freq()) {
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
