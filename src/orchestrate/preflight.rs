//! Preflight: everything checked or prepared before a results directory exists — remote hosts
//! answered, kernels known, accelerator chosen, payload and guest images ready, disk space.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;

use super::BadInput;
use crate::backend::libvirt::{self, LibvirtBackend};
use crate::backend::owned;
use crate::executor::deploy::{self, Prepared};

use crate::image::{self, ImageSpec};
use crate::scenario::fit::HostFacts;
use crate::scenario::locate::Seg;
use crate::scenario::{KernelRef, Loaded, ScenarioErrors};
use crate::sweep::plan::Plan;

/// The backend for a remote libvirt URI, checked at preflight: every failure (unreachable,
/// host key not pinned or changed, login refused, libvirt too old) is bad input naming the host.
pub(crate) fn connect_remote(uri: &str) -> anyhow::Result<Option<Arc<LibvirtBackend>>> {
    let Ok(Some(r)) = crate::backend::remote::parse(uri) else {
        return Ok(None);
    };
    let b = LibvirtBackend::connect(uri)
        .map_err(|e| BadInput(format!("preflight: remote host {} ({uri}): {e:#}", r.label())))?;
    Ok(Some(Arc::new(b)))
}

/// CPUs and available memory of a remote host, from libvirt's node info.
pub(crate) fn remote_facts(b: &LibvirtBackend) -> anyhow::Result<HostFacts> {
    use crate::backend::Backend;
    let label = b.remote().map_or_else(String::new, |r| r.remote.label());
    let (cpus, free_mib) = b
        .node_facts()
        .map_err(|e| BadInput(format!("preflight: remote host {label}: {e:#}")))?;
    Ok(HostFacts {
        allowed_cpus: crate::topology::preferred_order(
            b.host_fs().as_ref(),
            &(0..cpus as usize).collect::<Vec<_>>(),
        ),
        mem_available_mib: free_mib,
        node_of_cpu: Default::default(),
        node_mem_available_mib: Default::default(),
        online_cpus: None,
        remote: Some(label),
    })
}

/// The payload, every input the plan's workloads read in the guest and the scenario's
/// `guest.files`, read once.
pub(crate) fn uploads_for(plan: &Plan, payload: &Path) -> anyhow::Result<Vec<Prepared>> {
    let mut commands: Vec<&str> = plan.workloads.iter().map(|w| w.command.as_str()).collect();
    if plan.background == crate::scenario::Background::Hog {
        commands.push("hog");
    }
    let mut dp = deploy::deploy_plan(payload, &commands, Path::exists).map_err(BadInput)?;
    dp.add_guest_files(&plan.guest_files).map_err(BadInput)?;
    for w in &dp.warnings {
        crate::terminal::say(&format!("ocrig: warning: {w}"));
    }
    deploy::prepare(&dp)
}

/// Enough free space for every scratch disk of the largest level.
pub(crate) fn preflight_disk(dir: &Path, plan: &Plan) -> anyhow::Result<()> {
    let guests = plan.boots.iter().map(|g| g.guests).max().unwrap_or(0) as u64;
    let need_mib = guests * plan.scratch_disk_mib as u64 + 16;
    let free_mib = free_space_mib(dir)
        .with_context(|| format!("preflight: checking free space in {}", dir.display()))?;
    anyhow::ensure!(
        free_mib >= need_mib,
        "preflight: {} has {free_mib} MiB free, but the sweep needs {need_mib} MiB ({guests} scratch disks of {} MiB)",
        dir.display(),
        plan.scratch_disk_mib
    );
    Ok(())
}

fn free_space_mib(dir: &Path) -> std::io::Result<u64> {
    let st = rustix::fs::statvfs(dir)?;
    Ok(st.f_bavail * st.f_frsize / 1048576)
}

/// Destroys `ocrig-` domains whose sweep has no live owner (libvirt's auto-destroy normally
/// does this when ocrig dies; this covers a libvirtd that was restarted meanwhile).
pub(crate) fn reap_orphan_domains(uri: &str) {
    let Ok(names) = libvirt::list_owned(uri, "ocrig-") else {
        return;
    };
    for name in names.into_iter().filter(|n| owned::is_orphan_name(n)) {
        match libvirt::destroy_named(uri, &name) {
            Ok(()) => crate::terminal::say(&format!("ocrig: removed domain {name} left by an earlier ocrig")),
            Err(e) => tracing::warn!("removing orphan domain {name}: {e:#}"),
        }
    }
}

pub(crate) fn images_for(
    plan: &Plan,
    s: &crate::scenario::Scenario,
) -> anyhow::Result<BTreeMap<String, image::Image>> {
    let cache = image::cache_dir();
    let mut by_kernel: BTreeMap<String, image::Image> = BTreeMap::new();
    let mut out = BTreeMap::new();
    let packages = crate::scenario::normalised_packages(&s.guest.packages);
    for v in crate::scenario::expand::variants(s) {
        let kernel = crate::scenario::expand::guest_for(s, &v).kernel;
        let key = format!("{kernel:?}");
        if !by_kernel.contains_key(&key) {
            let spec = ImageSpec {
                kernel: kernel.source(),
                packages: packages.clone(),
            };
            let img = image::ensure(&spec, &cache)
                .with_context(|| format!("preparing the guest image for variant {}", v.name))?;
            check_room_for_packages(&img, s.guest.memory_mib).map_err(BadInput)?;
            by_kernel.insert(key.clone(), img);
        }
        out.insert(v.name.clone(), by_kernel[&key].clone());
    }
    debug_assert_eq!(out.len(), plan.variants.len());
    Ok(out)
}

/// Guest memory beside the packages' two copies: the kernel, the base image, the payload and a
/// run's buffers.
const MIB_BESIDE_PACKAGES: u64 = 160;

/// The guest packages live in the guest's memory twice while it boots (the initrd as loaded,
/// and its files unpacked), then once: refused when that leaves less than
/// [`MIB_BESIDE_PACKAGES`].
fn check_room_for_packages(img: &image::Image, memory_mib: u32) -> Result<(), String> {
    if img.packages_bytes == 0 {
        return Ok(());
    }
    let held = img.packages_bytes.div_ceil(1 << 20);
    let need = 2 * held + MIB_BESIDE_PACKAGES;
    if need <= memory_mib as u64 {
        return Ok(());
    }
    Err(format!(
        "guest.memory_mib: {memory_mib} MiB is too small for guest.packages, which hold {held} MiB unpacked in \
         the guest's memory (its initramfs, loaded and then unpacked while it boots): give the guest at least \
         {need} MiB"
    ))
}

/// Every package of `guest.packages` must be known to apt (else its closest names), and
/// Debian's perf must go with every variant's kernel.
fn check_packages(l: &Loaded) -> Vec<crate::scenario::ScenarioError> {
    let s = &l.scenario;
    let mut errs = Vec::new();
    if s.guest.packages.is_empty() {
        return errs;
    }
    let mut apt = image::AptLookup::open(&image::cache_dir());
    let mut known: Option<Vec<String>> = None;
    let mut perf = None;
    for (i, name) in s.guest.packages.iter().enumerate() {
        let at = [
            Seg::Key("guest".into()),
            Seg::Key("packages".into()),
            Seg::Index(i),
        ];
        match apt.package(name) {
            Ok(Some(info)) => {
                if name == image::packages::DEBIAN_PERF {
                    perf = Some((at, info));
                }
            }
            Ok(None) => {
                let names = known.get_or_insert_with(|| image::packages::known_names().unwrap_or_default());
                let close = image::packages::closest(name, names.iter().map(String::as_str), 5);
                let hint = if close.is_empty() {
                    "(see `apt-cache search`)".to_string()
                } else {
                    format!("(closest: {})", close.join(", "))
                };
                errs.push(l.error_at(&at, format!("apt has no package {name} {hint}")));
            }
            Err(e) => errs.push(l.error_at(&at, format!("cannot ask apt about {name}: {e:#}"))),
        }
    }
    if let Some((at, perf)) = perf {
        let mut seen = std::collections::BTreeSet::new();
        for v in crate::scenario::expand::variants(s) {
            let kernel = crate::scenario::expand::guest_for(s, &v).kernel;
            if !seen.insert(format!("{kernel:?}")) {
                continue;
            }
            let version = match &kernel {
                KernelRef::Debian(release) => match apt.kernel_package_version(release) {
                    Ok(Some(v)) => Some(v),
                    // An unknown kernel is said at its own field.
                    _ => continue,
                },
                _ => None,
            };
            if let Some(why) = image::packages::perf_mismatch(&perf, version.as_deref()) {
                errs.push(l.error_at(&at, format!("variant {}: {why}", v.name)));
            }
        }
    }
    errs
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
    let mut errs = check_packages(l);
    for (path, k) in refs {
        if let KernelRef::Debian(release) = k {
            match crate::image::kernel_unavailable(release) {
                Ok(None) => {}
                Ok(Some(why)) => errs.push(l.error_at(&path, why)),
                Err(e) => errs.push(l.error_at(&path, format!("cannot ask apt about {release}: {e:#}"))),
            }
        }
    }
    if !errs.is_empty() {
        return Err(ScenarioErrors(errs));
    }
    // The kernels are known: the trace events their variants switch on must be theirs.
    for note in crate::scenario::validate::check_trace_events(l)? {
        crate::terminal::say(&format!("ocrig: note: {note}"));
    }
    Ok(())
}

/// Raises the soft open-file limit to what `guests` guests need (up to the hard limit, which
/// validation checked), saying so; a no-op when the soft limit already suffices.
fn raise_fd_limit_to(guests: u64) -> Result<Option<String>, String> {
    use crate::scenario::fit::{FDS_BASE, FDS_PER_GUEST, fd_limits, fds_needed};
    let Some(fd) = fd_limits() else {
        return Ok(None);
    };
    let need = fds_needed(guests) + fd.open;
    if need <= fd.soft {
        return Ok(None);
    }
    let to = need.max(fd.soft).min(fd.hard);
    rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: Some(to),
            maximum: Some(fd.hard),
        },
    )
    .map_err(|e| format!("raising the open-file limit from {} to {to}: {e}", fd.soft))?;
    Ok(Some(format!(
        "raised the open-file limit from {} to {to} ({guests} guests × {FDS_PER_GUEST} + {FDS_BASE} + {} open)",
        fd.soft, fd.open
    )))
}

/// The open-file limit raised to what the plan's largest level needs (validation refused a
/// plan past the hard limit, with the numbers); said on stderr when raised.
pub(crate) fn raise_fd_limit(plan: &Plan) -> anyhow::Result<()> {
    let guests = plan.boots.iter().map(|g| g.guests).max().unwrap_or(0) as u64;
    if let Some(said) = raise_fd_limit_to(guests).map_err(|e| BadInput(format!("preflight: {e}")))? {
        crate::terminal::say(&format!("ocrig: {said}"));
    }
    Ok(())
}

/// SHA-256 of a file's bytes (the payload's identity in the journal).
pub(crate) fn file_sha256(path: &Path) -> anyhow::Result<String> {
    use sha2::{Digest, Sha256};
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(crate::scenario::hex(&Sha256::digest(&bytes)))
}
