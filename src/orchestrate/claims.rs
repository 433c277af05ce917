//! The host CPUs a sweep holds while it runs, here or on its remote host.

use std::path::Path;

use anyhow::Context;

use super::BadInput;
use crate::backend::isolation::{CpuClaim, CpusBusy};
use crate::backend::libvirt::LibvirtBackend;

/// Where CPU claims are taken instead of the host-wide directory, for tests whose sweeps do not
/// measure anything (fault injection on the host backend) and so need not queue behind real
/// sweeps on a shared machine. Never set it for a sweep whose numbers matter.
pub const PRIVATE_CLAIMS_ENV: &str = "OCRIG_PRIVATE_CPU_CLAIMS";

/// Takes the host CPUs for this sweep: refused (bad input, exit 2) while a live sweep holds
/// any of them, unless told to wait.
pub(crate) fn claim_cpus(cpus: &[usize], wait: bool) -> anyhow::Result<CpuClaim> {
    let on_wait = |busy: &CpusBusy| {
        crate::terminal::say(&format!("ocrig: waiting (--wait-for-cpus): {busy}"));
    };
    match std::env::var_os(PRIVATE_CLAIMS_ENV) {
        Some(dir) => CpuClaim::claim_in(Path::new(&dir), cpus, wait, on_wait),
        None => CpuClaim::claim(cpus, wait, on_wait),
    }
    .map_err(|e| match e.downcast::<CpusBusy>() {
        Ok(busy) => BadInput(busy.to_string()).into(),
        Err(e) => e.context("claiming the host CPUs"),
    })
}

/// The CPUs a sweep holds: on this machine, or on the remote host its guests run on.
pub(crate) enum Claim {
    Local(CpuClaim),
    /// Held for its lifetime: dropping it releases the remote locks.
    #[allow(dead_code)]
    Remote(crate::backend::remote::RemoteCpuClaim),
}

impl Claim {
    pub(crate) fn note_results_dir(&mut self, dir: &Path) {
        if let Claim::Local(c) = self {
            c.note_results_dir(dir);
        }
    }
}

pub(crate) fn claim_remote_cpus(
    b: &LibvirtBackend,
    cpus: &[usize],
    wait: bool,
) -> anyhow::Result<crate::backend::remote::RemoteCpuClaim> {
    let r = &b.remote().context("not a remote backend")?.remote;
    crate::backend::remote::RemoteCpuClaim::claim(r, cpus, wait, |busy| {
        crate::terminal::say(&format!("ocrig: waiting (--wait-for-cpus): {busy}"));
    })
    .map_err(
        |e| match e.downcast::<crate::backend::isolation::RemoteCpusBusy>() {
            Ok(busy) => BadInput(busy.to_string()).into(),
            Err(e) => e.context(format!("claiming the CPUs of {}", r.label())),
        },
    )
}
