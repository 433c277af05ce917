//! The template key: every input that shapes a saved state, as text (hashed into the cache
//! directory's name and compared whole on every use).

use std::path::Path;

use anyhow::Context;

use super::stored::{FORMAT, mtime_ns, ram_in_file};
use crate::backend::GuestSpec;
use crate::backend::boot::BootPlan;
use crate::backend::launcher::Launcher;
use crate::host::Accel;

/// Everything the template key covers, as text.
pub(super) fn inputs(l: &dyn Launcher, spec: &GuestSpec, plan: &BootPlan) -> anyhow::Result<String> {
    inputs_on(l, spec, plan, &crate::hostfs::LocalFs)
}

/// `inputs` with the host's kernel facts read through `host` (a stand-in in tests).
pub(super) fn inputs_on(
    l: &dyn Launcher,
    spec: &GuestSpec,
    plan: &BootPlan,
    host: &dyn crate::hostfs::HostFs,
) -> anyhow::Result<String> {
    let mut s = format!(
        "format {FORMAT}\nbackend {}\naccel {}\n",
        l.kind(),
        spec.accel.as_str()
    );
    s.push_str(&l.fingerprint(spec, plan)?);
    s.push('\n');
    let files = [Some(&plan.kernel), Some(&spec.initrd), plan.bios.as_ref()];
    for f in files.into_iter().flatten() {
        s.push_str(&format!("file {}\n", file_stamp(f)?));
    }
    let scratch = match &spec.scratch_disk {
        Some(d) => std::fs::metadata(d)
            .with_context(|| format!("the scratch disk {}", d.display()))?
            .len()
            .to_string(),
        None => "none".into(),
    };
    s.push_str(&format!("scratch {scratch}\n"));
    s.push_str(if ram_in_file(l, spec) {
        "ram file\n"
    } else {
        "ram state\n"
    });
    if spec.accel == Accel::Kvm {
        // `-cpu host` is whatever this CPU offers; a template saved on other silicon (or after a
        // microcode update that changed the flags) must not be restored here.
        s.push_str(&format!("host-cpu {}\n", host_cpu_identity()));
        // CPUID is not in the migration stream: the leaves KVM hands a `-cpu host` guest also
        // depend on the host kernel and KVM's module parameters, so either changing means
        // another template.
        s.push_str(&crate::host::kvm_identity(host));
    }
    Ok(s)
}

/// `path size mtime-ns`: the files are content-addressed by the image cache already; this
/// catches a file replaced in place.
pub fn file_stamp(path: &Path) -> anyhow::Result<String> {
    let m = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    let mtime = mtime_ns(&m);
    let canon = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    Ok(format!("{} {} {mtime}", canon.display(), m.len()))
}

fn host_cpu_identity() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |k: &str| {
        info.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default()
    };
    format!(
        "{} | {} | {}",
        field("model name"),
        field("microcode"),
        crate::image::sha256_hex(field("flags").as_bytes())
    )
}
