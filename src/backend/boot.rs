//! How a guest's kernel is started, the same for every backend: which kernel file, which
//! firmware, which command line, which devices a clone needs. The fast path is PVH: QEMU loads
//! the uncompressed ELF vmlinux and enters it at its PVH entry point, with Debian's qboot as
//! firmware, so neither SeaBIOS's PC initialisation nor the in-guest xz decompression (seconds
//! under TCG) happens. Where a piece is missing, the bzImage is booted through SeaBIOS as
//! before, and ocrig says why once.
//!
//! Guests meant to be cloned (templates and their clones) get a `vmgenid` device, so that a
//! restored kernel sees a new VM generation ID and reseeds its RNG at once. qboot cannot set
//! that device up (measured: with `-device vmgenid` under qboot the guest prints nothing and
//! never boots — qboot lacks the ACPI linker's WRITE_POINTER), so templates boot PVH through
//! SeaBIOS: ~1.4 s more, paid once per template, never by a clone.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Value, json};

use super::{FastKernel, GuestSpec};
use crate::host::{self, Accel};
use crate::vocabulary::StartMethod;

/// What QEMU is given to start a guest's kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct BootPlan {
    pub kernel: PathBuf,
    /// `-bios`; None = QEMU's default (SeaBIOS).
    pub bios: Option<PathBuf>,
    /// The full kernel command line.
    pub cmdline: String,
    /// A VM generation ID device (guests to be cloned).
    pub vmgenid: bool,
    /// For the journal: `{"kernel": "pvh"|"bzimage", "bios": "qboot"|"seabios", "clock": ...}`.
    pub facts: Value,
}

/// The plan for `spec` started by `method` (a clone's plan is its template's).
pub fn plan(spec: &GuestSpec, method: StartMethod) -> BootPlan {
    plan_with(
        spec,
        method,
        Path::new(host::QBOOT_ROM),
        tsc_needed(spec.accel, &spec.cmdline)
            .then(host::tsc_freq)
            .flatten()
            .map(|f| f.khz),
    )
}

/// Whether the guest's clock arguments need the host's TSC rate: TCG guests whose command line
/// does not set the clock. Reading it may mean a 200 ms measurement, which a KVM guest
/// (kvm-clock) never uses.
fn tsc_needed(accel: Accel, cmdline: &str) -> bool {
    accel == Accel::Tcg && !sets_clock(cmdline)
}

fn sets_clock(cmdline: &str) -> bool {
    cmdline
        .split_whitespace()
        .any(|a| a.starts_with("tsc=") || a.starts_with("tsc_early_khz=") || a.starts_with("clocksource="))
}

pub(crate) fn plan_with(
    spec: &GuestSpec,
    method: StartMethod,
    qboot: &Path,
    tsc_khz: Option<u64>,
) -> BootPlan {
    let vmgenid = method.is_clone();
    let mut facts = serde_json::Map::new();
    let pvh = match &spec.fast_kernel {
        FastKernel::Pvh(k) if k.is_file() => Ok(k.clone()),
        FastKernel::Pvh(k) => Err(format!("the PVH kernel {} is missing", k.display())),
        FastKernel::Unavailable(why) => Err(why.clone()),
    };
    let (kernel, bios) = match pvh {
        Ok(k) => {
            facts.insert("kernel".into(), json!("pvh"));
            let bios = (qboot.is_file() && !vmgenid).then(|| qboot.to_path_buf());
            if vmgenid {
                facts.insert(
                    "bios_why".into(),
                    json!("a template needs vmgenid, which qboot cannot set up"),
                );
            } else if bios.is_none() {
                notice_once(&format!(
                    "no {} (Debian's qemu-system-data): PVH boot through SeaBIOS, ~1.4 s slower",
                    qboot.display()
                ));
            }
            (k, bios)
        }
        Err(why) => {
            facts.insert("kernel".into(), json!("bzimage"));
            facts.insert("fallback_reason".into(), json!(why));
            notice_once(&format!(
                "booting the bzImage through SeaBIOS, not PVH: {why} (PVH boot is ~3x faster under TCG)"
            ));
            (spec.kernel.clone(), None)
        }
    };
    facts.insert(
        "bios".into(),
        json!(if bios.is_some() { "qboot" } else { "seabios" }),
    );
    let (clock, clock_facts) = clock_args(spec.accel, &spec.cmdline, tsc_khz);
    facts.insert("clock".into(), clock_facts);
    let cmdline = [clock.as_str(), "quiet", spec.cmdline.trim()]
        .iter()
        .filter(|p| !p.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    facts.insert("vmgenid".into(), json!(vmgenid));
    // The `-cpu` value, so that figures it switches off (kvm-steal-time) are reported as such.
    facts.insert("cpu".into(), json!(spec.cpu));
    BootPlan {
        kernel,
        bios,
        cmdline,
        vmgenid,
        facts: Value::Object(facts),
    }
}

/// Kernel arguments that give the guest a cheap, stable clocksource.
///
/// TCG: the guest's TSC is the host's (QEMU returns host rdtsc plus an offset), but the guest
/// kernel cannot calibrate it against an emulated PIT reliably, so its clocksource watchdog
/// marks the TSC unstable and it falls back to HPET, whose every read is an emulated MMIO exit
/// costing microseconds. `tsc_early_khz=` gives it the host's rate and `tsc=reliable` turns off
/// the watchdog.
///
/// KVM: nothing. kvm-clock is paravirtual, cheap (no exit per read) and corrected by the host;
/// forcing `tsc` there is only safe with an invariant host TSC and stable TSC offsets across
/// vCPUs, which is for a scenario to ask for (`cmdline: clocksource=tsc tsc=reliable`).
///
/// A scenario whose command line already sets the clock (`tsc=`, `tsc_early_khz=`,
/// `clocksource=`) gets nothing added.
fn clock_args(accel: Accel, cmdline: &str, tsc_khz: Option<u64>) -> (String, Value) {
    if sets_clock(cmdline) {
        return (
            String::new(),
            json!({"args": null, "why": "the scenario's command line sets the clock"}),
        );
    }
    match (accel, tsc_khz) {
        (Accel::Kvm, _) => (String::new(), json!({"args": null, "why": "KVM: kvm-clock"})),
        (Accel::Tcg, Some(khz)) => {
            let args = format!("tsc_early_khz={khz} tsc=reliable");
            (args.clone(), json!({ "args": args }))
        }
        (Accel::Tcg, None) => {
            notice_once(
                "the host's TSC rate is unknown: TCG guests will calibrate their own TSC and may fall back to HPET",
            );
            (
                String::new(),
                json!({"args": null, "why": "the host's TSC rate is unknown"}),
            )
        }
    }
}

/// Prints `msg` as a warning the first time it is seen in this process; true if it printed.
pub fn notice_once(msg: &str) -> bool {
    static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    let new = seen.get_or_insert_with(HashSet::new).insert(msg.to_string());
    if new {
        tracing::warn!("{msg}");
    }
    new
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{kvm_variant_cases, spec};

    #[test]
    fn kvm_plans_have_no_tcg_clock_arguments_and_keep_the_variant_words() {
        for (name, s, p, _) in kvm_variant_cases() {
            assert!(!p.cmdline.contains("tsc_early_khz"), "{name}: {}", p.cmdline);
            assert_eq!(p.facts["clock"]["why"], "KVM: kvm-clock", "{name}");
            assert_eq!(p.facts["cpu"], s.cpu.as_str(), "{name}");
        }
    }

    #[test]
    fn pvh_with_qboot_and_the_tsc_arguments_under_tcg() {
        let dir = tempfile::tempdir().unwrap();
        let (vmlinux, qboot) = (dir.path().join("vmlinux"), dir.path().join("qboot.rom"));
        std::fs::write(&vmlinux, "elf").unwrap();
        std::fs::write(&qboot, "rom").unwrap();
        let p = plan_with(
            &spec(FastKernel::Pvh(vmlinux.clone())),
            StartMethod::Boot,
            &qboot,
            Some(2_596_126),
        );
        assert_eq!(p.kernel, vmlinux);
        assert_eq!(p.bios.as_deref(), Some(qboot.as_path()));
        assert_eq!(p.facts["kernel"], "pvh");
        assert_eq!(
            p.cmdline,
            "tsc_early_khz=2596126 tsc=reliable quiet console=ttyS0 panic=-1"
        );
        assert_eq!(p.facts["bios"], "qboot");
        assert!(!p.vmgenid);

        // A template (for clones): vmgenid, so SeaBIOS, the rest the same.
        let t = plan_with(
            &spec(FastKernel::Pvh(vmlinux.clone())),
            StartMethod::Clone,
            &qboot,
            Some(2_596_126),
        );
        assert!(t.vmgenid && t.bios.is_none() && t.kernel == vmlinux && t.cmdline == p.cmdline);

        // No qboot: PVH through SeaBIOS.
        let p = plan_with(
            &spec(FastKernel::Pvh(vmlinux)),
            StartMethod::Boot,
            &dir.path().join("none"),
            Some(1),
        );
        assert!(p.facts["kernel"] == "pvh" && p.bios.is_none());
        assert_eq!(p.facts["bios"], "seabios");
    }

    #[test]
    fn falls_back_to_the_bzimage_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let qboot = dir.path().join("qboot.rom");
        std::fs::write(&qboot, "rom").unwrap();
        let p = plan_with(
            &spec(FastKernel::Unavailable("the kernel has no PVH entry note".into())),
            StartMethod::Boot,
            &qboot,
            Some(1000),
        );
        assert_eq!(p.kernel, Path::new("/k/vmlinuz"));
        assert_eq!(p.bios, None, "qboot only with PVH (the measured combination)");
        assert_eq!(p.facts["kernel"], "bzimage");
        assert_eq!(p.facts["fallback_reason"], "the kernel has no PVH entry note");
        // A PVH kernel that went missing is a fallback too, not a QEMU error.
        let p = plan_with(
            &spec(FastKernel::Pvh(dir.path().join("gone"))),
            StartMethod::Boot,
            &qboot,
            None,
        );
        assert_eq!(p.facts["kernel"], "bzimage");
        assert!(p.facts["fallback_reason"].as_str().unwrap().contains("missing"));
    }

    #[test]
    fn a_fallback_is_said_once() {
        let msg = "test notice: said once per process";
        assert!(notice_once(msg));
        assert!(!notice_once(msg));
        assert!(notice_once("test notice: another"));
    }

    #[test]
    fn clock_arguments_per_accelerator() {
        assert_eq!(
            clock_args(Accel::Tcg, "", Some(2000000)).0,
            "tsc_early_khz=2000000 tsc=reliable"
        );
        assert_eq!(clock_args(Accel::Kvm, "", Some(2000000)).0, "");
        // The TSC rate is read (perhaps measured, 200 ms) only where it becomes an argument.
        assert!(tsc_needed(Accel::Tcg, "nopvspin"));
        assert!(!tsc_needed(Accel::Kvm, "nopvspin"));
        assert!(!tsc_needed(Accel::Tcg, "clocksource=hpet"));
        assert_eq!(clock_args(Accel::Tcg, "", None).0, "");
        // The scenario's own clock settings win.
        let (args, facts) = clock_args(Accel::Tcg, "nopvspin clocksource=hpet", Some(2000000));
        assert_eq!(args, "");
        assert!(facts["why"].as_str().unwrap().contains("scenario"));
    }
}
