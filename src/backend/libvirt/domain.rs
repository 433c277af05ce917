//! The transient domain's XML: machine, CPU model and flags, kernel boot, console, scratch
//! disk, the user-mode NIC and QMP socket through `qemu:commandline`, where its threads start.

use std::path::Path;

use anyhow::Context;

use crate::backend::GuestSpec;
use crate::backend::boot::BootPlan;
use crate::backend::paths::{console_path, qmp_path};
use crate::host::Accel;

/// PCI slot on `pcie.0` of the user-mode NIC (see the module comment).
pub(super) const NIC_SLOT: &str = "0x10";

/// Escapes text for XML element content and single- or double-quoted attributes.
pub(super) fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '\'' => o.push_str("&apos;"),
            '"' => o.push_str("&quot;"),
            c => o.push(c),
        }
    }
    o
}

/// The `<cpu>` element for `spec.cpu`, and the `-cpu` override to pass when it has flags.
pub(super) fn cpu_xml(cpu: &str, vcpus: u32) -> (String, Option<String>) {
    let cpu = cpu.trim();
    let (model, flags) = match cpu.split_once(',') {
        Some((m, f)) => (m, Some(f)),
        None => (cpu, None),
    };
    let topology = format!("<topology sockets='1' dies='1' cores='{vcpus}' threads='1'/>");
    let element = match model {
        "max" => format!("<cpu mode='maximum' check='none'>{topology}</cpu>"),
        "host" => format!("<cpu mode='host-passthrough' check='none'>{topology}</cpu>"),
        m => format!(
            "<cpu mode='custom' match='exact' check='none'><model fallback='forbid'>{}</model>{topology}</cpu>",
            esc(m)
        ),
    };
    let over = flags.filter(|f| !f.trim().is_empty()).map(|_| cpu.to_string());
    (element, over)
}

/// The security models a libvirt host's QEMU driver applies (`<secmodel><model>` of its
/// capabilities' `<host>`: `none`, `dac`, `selinux`, `apparmor`), in order.
pub fn security_models(capabilities: &str) -> Vec<String> {
    let host = capabilities
        .split_once("<host>")
        .and_then(|(_, rest)| rest.split_once("</host>"))
        .map_or("", |(host, _)| host);
    host.split("<secmodel>")
        .skip(1)
        .filter_map(|m| {
            let m = m.split_once("</secmodel>")?.0;
            let model = m.split_once("<model>")?.1.split_once("</model>")?.0.trim();
            Some(model.to_string())
        })
        .collect()
}

/// The `<seclabel>` elements that run one domain's QEMU as root, unconfined, without relabelling
/// its files, whatever the host's qemu.conf says for its other VMs: a DAC label of root, and no
/// label for AppArmor or SELinux. Root so QEMU can reach ocrig's caches and create its QMP socket
/// in the results directory (and open /dev/kvm); no relabelling or profile, which took a domain's
/// start from 0.3 s to 4.3 s. A host's other VMs keep its settings.
pub fn seclabel_xml(models: &[String]) -> Vec<String> {
    models
        .iter()
        .filter_map(|m| match m.as_str() {
            "dac" => Some(
                "  <seclabel type='static' model='dac' relabel='no'><label>+0:+0</label></seclabel>".into(),
            ),
            "none" => None,
            other => Some(format!("  <seclabel type='none' model='{}'/>", esc(other))),
        })
        .collect()
}

/// The transient domain for a guest whose SSH is forwarded from `ssh_port` on 127.0.0.1,
/// booting `plan` or, with `incoming`, restoring that saved state, under the host's security
/// `models` ([`seclabel_xml`]). Paths are used as given; `boot` makes them absolute first.
pub fn domain_xml(
    spec: &GuestSpec,
    plan: &BootPlan,
    ssh_port: u16,
    incoming: Option<&Path>,
    start: &crate::backend::StartPlacement,
    models: &[String],
) -> String {
    let dom_type = match spec.accel {
        Accel::Kvm => "kvm",
        Accel::Tcg => "qemu",
    };
    let console = esc(&console_path(&spec.workdir, &spec.name).to_string_lossy());
    let (cpu, cpu_override) = cpu_xml(&spec.cpu, spec.vcpus);
    let mut x = String::new();
    let mut line = |s: &str| {
        x.push_str(s);
        x.push('\n');
    };
    line(&format!(
        "<domain type='{dom_type}' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>"
    ));
    line(&format!("  <name>{}</name>", esc(&spec.name)));
    line("  <description>ocrig guest (transient, destroyed when its ocrig exits)</description>");
    line(&format!("  <memory unit='MiB'>{}</memory>", spec.memory_mib));
    // The domain's threads start on the measured CPUs (ocrig pins each vCPU within them once
    // its thread is known), its other threads where `others` says, and its memory is bound to
    // the measured CPUs' nodes before the guest touches it.
    let list = crate::backend::cpu_list_text;
    match start.cpus.is_empty() {
        true => line(&format!("  <vcpu placement='static'>{}</vcpu>", spec.vcpus)),
        false => line(&format!(
            "  <vcpu placement='static' cpuset='{}'>{}</vcpu>",
            list(&start.cpus),
            spec.vcpus
        )),
    }
    if !start.others.is_empty() {
        line(&format!(
            "  <cputune><emulatorpin cpuset='{}'/></cputune>",
            list(&start.others)
        ));
    }
    if !start.memory_nodes.is_empty() {
        line(&format!(
            "  <numatune><memory mode='strict' nodeset='{}'/></numatune>",
            list(&start.memory_nodes)
        ));
    }
    if plan.vmgenid {
        line("  <genid/>");
    }
    line("  <os>");
    line("    <type arch='x86_64' machine='q35'>hvm</type>");
    if let Some(bios) = &plan.bios {
        line(&format!(
            "    <loader type='rom' readonly='yes'>{}</loader>",
            esc(&bios.to_string_lossy())
        ));
    }
    line(&format!(
        "    <kernel>{}</kernel>",
        esc(&plan.kernel.to_string_lossy())
    ));
    line(&format!(
        "    <initrd>{}</initrd>",
        esc(&spec.initrd.to_string_lossy())
    ));
    line(&format!("    <cmdline>{}</cmdline>", esc(&plan.cmdline)));
    line("  </os>");
    // Without <acpi/> libvirt passes acpi=off, and the guest would not find its other CPUs.
    line("  <features><acpi/><apic/></features>");
    line(&format!("  {cpu}"));
    line("  <clock offset='utc'/>");
    // Like -no-reboot: a guest that reboots or panics (panic=-1) stops instead of looping.
    line("  <on_poweroff>destroy</on_poweroff>");
    line("  <on_reboot>destroy</on_reboot>");
    line("  <on_crash>destroy</on_crash>");
    line("  <devices>");
    // -nodefaults: no USB controller, no balloon (libvirt adds both unless told not to).
    line("    <controller type='usb' model='none'/>");
    line(&format!(
        "    <serial type='file'><source path='{console}' append='on'/><target port='0'/></serial>"
    ));
    line(&format!(
        "    <console type='file'><source path='{console}' append='on'/><target type='serial' port='0'/></console>"
    ));
    line("    <rng model='virtio'><backend model='builtin'/></rng>");
    if let Some(disk) = &spec.scratch_disk {
        line("    <disk type='file' device='disk'>");
        line("      <driver name='qemu' type='raw' cache='none'/>");
        line(&format!(
            "      <source file='{}'/>",
            esc(&disk.to_string_lossy())
        ));
        line("      <target dev='vda' bus='virtio'/>");
        line("    </disk>");
    }
    line("    <memballoon model='none'/>");
    line("  </devices>");
    for l in seclabel_xml(models) {
        line(&l);
    }
    line("  <qemu:commandline>");
    let mut args = vec![
        "-netdev".to_string(),
        format!("user,id=n0,hostfwd=tcp:127.0.0.1:{ssh_port}-:22"),
        "-device".to_string(),
        format!("virtio-net-pci,netdev=n0,bus=pcie.0,addr={NIC_SLOT}"),
    ];
    if let Some(c) = cpu_override {
        args.extend(["-cpu".to_string(), c]);
    }
    args.extend([
        "-qmp".to_string(),
        format!(
            "unix:{},server=on,wait=off",
            qmp_path(&spec.workdir, &spec.name).display()
        ),
    ]);
    if let Some(state) = incoming {
        args.extend(["-incoming".to_string(), format!("file:{}", state.display())]);
    }
    for a in args {
        line(&format!("    <qemu:arg value='{}'/>", esc(&a)));
    }
    line("  </qemu:commandline>");
    line("</domain>");
    x
}

/// `spec` with absolute paths (libvirt requires them; the sweep may pass relative ones).
pub(super) fn absolute(spec: &GuestSpec) -> anyhow::Result<GuestSpec> {
    let abs = |p: &Path| std::path::absolute(p).with_context(|| format!("resolving {}", p.display()));
    Ok(GuestSpec {
        kernel: abs(&spec.kernel)?,
        initrd: abs(&spec.initrd)?,
        workdir: abs(&spec.workdir)?,
        scratch_disk: spec.scratch_disk.as_deref().map(abs).transpose()?,
        ..spec.clone()
    })
}
