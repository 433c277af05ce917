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
    match image::cached(&spec, &cache) {
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
    Ok(())
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
