//! `ocrig validate FILE...`: every check that needs no guest.

use std::path::PathBuf;

use crate::scenario::locate::Seg;
use crate::scenario::validate::{HostFacts, validate as check};
use crate::scenario::{KernelRef, Loaded, ScenarioErrors, load};

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
                Ok(l)
            })
            .and_then(|l| check_kernels(&l).map(|_| l));
        match checked {
            Ok(l) => {
                let plan = crate::sweep::plan::Plan::build(&l.scenario, &facts.allowed_cpus, 0)?;
                println!(
                    "{}: ok — {} levels × {} variants × {} workloads, {} runs in {} boot group(s), up to {} guests",
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

/// Every Debian kernel a scenario names must be known to apt (checked here rather than in the
/// pure validation because it asks the package lists).
pub fn check_kernels(l: &Loaded) -> Result<(), ScenarioErrors> {
    let s = &l.scenario;
    let mut refs: Vec<(Vec<Seg>, &KernelRef)> = vec![(
        vec![Seg::Key("guest".into()), Seg::Key("kernel".into())],
        &s.guest.kernel,
    )];
    for (i, v) in s.variants.iter().enumerate() {
        if let Some(k) = &v.kernel {
            refs.push((
                vec![
                    Seg::Key("variants".into()),
                    Seg::Index(i),
                    Seg::Key("kernel".into()),
                ],
                k,
            ));
        }
    }
    let mut errs = Vec::new();
    for (path, k) in refs {
        if let KernelRef::Debian(release) = k {
            match crate::image::kernel_known(release) {
                Ok(true) => {}
                Ok(false) => errs.push(l.error_at(
                    &path,
                    format!(
                        "Debian has no package linux-image-{release} (see `apt-cache search linux-image`)"
                    ),
                )),
                Err(e) => errs.push(l.error_at(&path, format!("cannot ask apt about {release}: {e:#}"))),
            }
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ScenarioErrors(errs))
    }
}
