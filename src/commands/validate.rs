//! `ocrig validate FILE...`: every check that needs no guest.

use std::path::PathBuf;

use crate::orchestrate::preflight::check_kernels;
use crate::scenario::fit::HostFacts;
use crate::scenario::validate::validate as check;
use crate::scenario::{ScenarioErrors, load};

pub fn validate(files: &[PathBuf]) -> anyhow::Result<()> {
    let facts = HostFacts::read();
    let mut problems = Vec::new();
    for f in files {
        let checked = load(f)
            .map_err(|e| ScenarioErrors(vec![e]))
            .and_then(|l| check(&l, &facts).map(|_| l))
            .and_then(|l| {
                let ev = crate::scenario::validate::virt_evidence(&l, &crate::hostfs::LocalFs);
                let virt = crate::scenario::validate::check_virt(&l, &ev)?;
                for w in &virt.warnings {
                    eprintln!("ocrig: warning: {w}");
                }
                Ok((l, virt.accel.accel == crate::host::Accel::Kvm))
            })
            .and_then(|(l, kvm)| check_kernels(&l).map(|_| (l, kvm)));
        match checked {
            Ok((l, kvm)) => {
                let plan =
                    crate::sweep::plan::Plan::build(&l.scenario.sized_for(kvm), &facts.allowed_cpus, 0)?;
                // The runs as this host's accelerator would make them (a KVM block applies
                // under KVM only).
                let sized = match (l.scenario.has_kvm_sizing(), kvm) {
                    (false, _) => "",
                    (true, true) => " (sized for KVM)",
                    (true, false) => " (not under KVM: its KVM sizing ignored)",
                };
                println!(
                    "{}: ok{sized} — {} levels × {} variants × {} workloads, {} runs in {} boot group(s), up to {} guests",
                    f.display(),
                    plan.levels.len(),
                    plan.variants.len(),
                    plan.workloads.len(),
                    plan.total_runs(),
                    plan.boots.len(),
                    plan.boots.iter().map(|g| g.guests).max().unwrap_or(0)
                );
            }
            Err(e) => problems.extend(e.0),
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ScenarioErrors(problems).into())
    }
}
