//! The host CPUs a sweep holds while it runs, here or on its remote host.

use std::path::Path;

use anyhow::Context;

use super::BadInput;
use crate::backend::isolation::{CpuClaim, CpusBusy};
use crate::backend::libvirt::LibvirtBackend;

/// Takes the host CPUs for this sweep: refused (bad input, exit 2) while a live sweep holds
/// any of them, unless told to wait.
pub(crate) fn claim_cpus(cpus: &[usize], wait: bool) -> anyhow::Result<CpuClaim> {
    CpuClaim::claim(cpus, wait, |busy| {
        eprintln!("ocrig: waiting (--wait-for-cpus): {busy}");
    })
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
        eprintln!("ocrig: waiting (--wait-for-cpus): {busy}");
    })
    .map_err(
        |e| match e.downcast::<crate::backend::isolation::RemoteCpusBusy>() {
            Ok(busy) => BadInput(busy.to_string()).into(),
            Err(e) => e.context(format!("claiming the CPUs of {}", r.label())),
        },
    )
}
