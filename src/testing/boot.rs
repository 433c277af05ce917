//! Backend fixtures: guest specs and boot plans of every kind a scenario makes, and the golden
//! files their QEMU arguments and libvirt XML are held against.

use std::path::Path;

use crate::backend::boot::{BootPlan, plan_with};
use crate::backend::{FastKernel, GuestSpec};
use crate::host::Accel;
use crate::vocabulary::StartMethod;

/// KVM guests of every variant kind a scenario can make — the three kernel-side spinlock
/// configurations, steal time off, `max` with a feature off, and a clone's restore — each
/// with its boot plan, for the QEMU-argument and libvirt-XML golden tests.
pub fn kvm_variant_cases() -> Vec<(&'static str, GuestSpec, BootPlan, Option<&'static Path>)> {
    let base = GuestSpec {
        accel: Accel::Kvm,
        cpu: "host".into(),
        ..spec(FastKernel::Unavailable("the kernel has no PVH entry note".into()))
    };
    let with = |cpu: &str, extra: &str| GuestSpec {
        cpu: cpu.into(),
        cmdline: format!("{} {extra}", base.cmdline).trim().to_string(),
        ..base.clone()
    };
    let boot = |s: GuestSpec| {
        // No TSC rate: a KVM guest's plan must not depend on one.
        let p = plan_with(&s, StartMethod::Boot, Path::new("/nonexistent/qboot.rom"), None);
        (s, p)
    };
    let mut out = Vec::new();
    for (name, s) in [
        ("pv-qspinlock", with("host", "")),
        ("nopvspin", with("host", "nopvspin")),
        ("unhalt-off", with("host,kvm-pv-unhalt=off", "")),
        ("steal-off", with("host,kvm-steal-time=off", "")),
        ("max-unhalt-off", with("max,kvm-pv-unhalt=off", "")),
    ] {
        let (s, p) = boot(s);
        out.push((name, s, p, None));
    }
    let s = with("host", "");
    let p = plan_with(&s, StartMethod::Clone, Path::new("/nonexistent/qboot.rom"), None);
    out.push(("clone", s, p, Some(Path::new("/t/state"))));
    // The fast boot (a PVH vmlinux through qboot; a libvirt ROM loader), a template saving
    // its RAM to a file, and a clone mapping that file private: inputs that exist, under
    // the source tree (golden files name them as `$SRC/...`).
    let inputs = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/backend/testdata/golden-inputs");
    let qboot = inputs.join("qboot.rom");
    let pvh = GuestSpec {
        fast_kernel: FastKernel::Pvh(inputs.join("vmlinux")),
        ..with("host", "")
    };
    let p = plan_with(&pvh, StartMethod::Boot, &qboot, None);
    assert_eq!(
        p.facts["bios"], "qboot",
        "the golden PVH case boots through qboot"
    );
    out.push(("pvh-qboot", pvh.clone(), p, None));
    let template = GuestSpec {
        ram: crate::backend::RamBacking::TemplateFile("/t/ram".into()),
        ..pvh.clone()
    };
    let p = plan_with(&template, StartMethod::Clone, &qboot, None);
    out.push(("template", template, p, None));
    let shared = GuestSpec {
        ram: crate::backend::RamBacking::CloneOf("/t/ram".into()),
        start: StartMethod::CloneShared,
        ..pvh
    };
    let p = plan_with(&shared, StartMethod::CloneShared, &qboot, None);
    out.push(("clone-shared", shared, p, Some(Path::new("/t/state"))));
    out
}

/// Compares `text` (the source tree's path written `$SRC`) with the golden file
/// `src/backend/testdata/golden/<name>`; `scripts/bless-golden` rewrites the files instead
/// (through `OCRIG_BLESS=1`), for a reviewer to read in the diff.
pub fn golden(name: &str, text: &str) {
    let text = text.replace(env!("CARGO_MANIFEST_DIR"), "$SRC");
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/backend/testdata/golden")
        .join(name);
    if std::env::var_os("OCRIG_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (scripts/bless-golden writes it)", path.display()));
    assert_eq!(
        text,
        want,
        "{} differs (scripts/bless-golden rewrites it: then review the diff)",
        path.display()
    );
}

pub fn spec(fast: FastKernel) -> GuestSpec {
    GuestSpec {
        name: "ocrig-t-0".into(),
        vcpus: 2,
        memory_mib: 512,
        kernel: "/k/vmlinuz".into(),
        initrd: "/k/initrd.img".into(),
        cmdline: "console=ttyS0 panic=-1".into(),
        accel: Accel::Tcg,
        cpu: "max".into(),
        scratch_disk: None,
        workdir: "/w".into(),
        fast_kernel: fast,
        start: StartMethod::Boot,
        ram: crate::backend::RamBacking::Anonymous,
    }
}
