//! The hosts a sweep runs on, each checked and planned before anything is claimed or booted:
//! the sweep's one host (this machine, by QEMU, libvirt or the payload alone, or one remote
//! libvirt host) or several interchangeable libvirt hosts (`host.hosts`). Only what differs
//! per host is here; the sweep over them is one path ([`super::run`]).

use std::sync::Arc;

use anyhow::Context;

use super::BadInput;
use super::claims::{self, Claim};
use super::preflight;
use crate::backend::libvirt::LibvirtBackend;
use crate::backend::qemu::QemuBackend;
use crate::backend::{Backend, StartPlacement};
use crate::host::{Accel, AccelChoice};
use crate::hostfs::HostFs;
use crate::scenario::fit::HostFacts;
use crate::scenario::validate::{check_virt, validate, virt_evidence};
use crate::scenario::{BackendKind, Loaded};
use crate::sweep::plan::Plan;

/// One host, checked and planned.
pub(crate) struct Host {
    /// The label its records carry among several hosts; None for a sweep's one host.
    pub label: Option<String>,
    /// None: the payload runs on this machine itself (`backend: host`).
    pub backend: Option<Arc<dyn Backend>>,
    /// Set for a remote libvirt host: its CPUs are claimed there, its files read there.
    remote: Option<Arc<LibvirtBackend>>,
    /// Where its local guests start; None on a remote host.
    pub start: Option<StartPlacement>,
    pub plan: Plan,
    pub accel: AccelChoice,
}

impl Host {
    pub fn local(&self) -> bool {
        self.remote.is_none()
    }

    /// The remote host's label (`user@host:port`), None for this machine.
    pub fn remote_label(&self) -> Option<String> {
        Some(self.remote.as_ref()?.remote()?.remote.label())
    }

    pub fn backend_name(&self) -> &'static str {
        self.backend.as_ref().map_or("host", |b| b.name())
    }

    /// Where its files are read: this machine's, or the remote host's over SSH.
    pub fn fs(&self) -> Arc<dyn HostFs> {
        match &self.remote {
            Some(b) => b.host_fs(),
            None => Arc::new(crate::hostfs::LocalFs),
        }
    }

    /// Its measured CPUs, held where they are until the claim is dropped.
    pub fn claim(&self, wait: bool) -> anyhow::Result<Claim> {
        Ok(match &self.remote {
            Some(b) => Claim::Remote(claims::claim_remote_cpus(b, &self.plan.host_cpus, wait)?),
            None => Claim::Local(claims::claim_cpus(&self.plan.host_cpus, wait)?),
        })
    }

    /// Where its guests' QEMUs start, in words, for the host record.
    pub fn start_words(&self) -> String {
        match (&self.backend, &self.start, &self.remote) {
            (None, ..) => "no guests: the payload runs on this host's CPUs".into(),
            (Some(_), Some(s), _) => s.describe(),
            (Some(_), None, Some(_)) => {
                "where the remote host's libvirt puts it; vCPUs pinned once up".into()
            }
            (Some(_), None, None) => "where libvirt puts it; vCPUs pinned once up".into(),
        }
    }

    /// What it was found to be, said once its CPUs are held.
    pub fn say(&self) {
        match &self.label {
            None => crate::terminal::say(&format!(
                "ocrig: accel {} — {}",
                self.accel.accel.as_str(),
                self.accel.reason
            )),
            Some(label) => crate::terminal::say(&format!(
                "ocrig: host {label}: {} CPUs given, accel {} — {}",
                self.plan.host_cpus.len(),
                self.accel.accel.as_str(),
                self.accel.reason
            )),
        }
    }
}

/// The sweep's hosts, each checked (reachable, big enough, its accelerator and kernels) and
/// planned: located bad input before anything is claimed or booted. A resumed sweep goes on
/// without the hosts of several that do not answer.
pub(crate) fn prepare(loaded: &Loaded, seed: u64, resumed: bool) -> anyhow::Result<Vec<Host>> {
    let s = &loaded.scenario;
    if s.host.hosts.is_empty() {
        let host = match s.host.backend {
            BackendKind::Libvirt => match preflight::connect_remote(s.host.libvirt_uri.trim())? {
                Some(remote) => checked(loaded, remote_parts(remote)?, None, seed)?,
                None => local(loaded, seed)?,
            },
            _ => local(loaded, seed)?,
        };
        return Ok(vec![host]);
    }
    if s.host.backend != BackendKind::Libvirt {
        validate(loaded, &HostFacts::read())?;
    }
    let mut hosts: Vec<Host> = Vec::new();
    for entry in &s.host.hosts {
        let uri = entry.uri().to_string();
        let backend = match connect(&uri) {
            Ok(b) => b,
            Err(e) if resumed => {
                crate::terminal::say(&format!(
                    "ocrig: host {} does not answer; resuming without it: {e:#}",
                    label_of(&uri)
                ));
                continue;
            }
            Err(e) => return Err(e),
        };
        let parts = match backend.remote() {
            Some(_) => remote_parts(backend)?,
            None => Parts {
                facts: HostFacts::read(),
                fs: Arc::new(crate::hostfs::LocalFs),
                backend: Some(Arc::clone(&backend) as Arc<dyn Backend>),
                remote: None,
            },
        };
        let mut entry_loaded = loaded.clone();
        if let Some(c) = entry.cpus() {
            entry_loaded.scenario.host.cpus = Some(c.clone());
        }
        // Every record names its host, and a guest set is known by its host: two entries
        // that are the same host (split by CPUs) get labels of their own.
        let mut label = label_of(&uri);
        if hosts.iter().any(|h| h.label.as_deref() == Some(&label)) {
            label = format!("{label} #{}", hosts.len() + 1);
        }
        hosts.push(checked(&entry_loaded, parts, Some(label), seed)?);
    }
    anyhow::ensure!(
        !hosts.is_empty(),
        "none of the sweep's hosts answers; try --resume later"
    );
    Ok(hosts)
}

/// What is known of a host before it is checked.
struct Parts {
    facts: HostFacts,
    fs: Arc<dyn HostFs>,
    backend: Option<Arc<dyn Backend>>,
    remote: Option<Arc<LibvirtBackend>>,
}

fn remote_parts(remote: Arc<LibvirtBackend>) -> anyhow::Result<Parts> {
    Ok(Parts {
        facts: preflight::remote_facts(&remote)?,
        fs: remote.host_fs(),
        backend: Some(Arc::clone(&remote) as Arc<dyn Backend>),
        remote: Some(remote),
    })
}

/// This machine as the sweep's one host: checked and planned first, then its backend made,
/// whose QEMUs start on the measured CPUs with their memory bound to those CPUs' nodes.
fn local(loaded: &Loaded, seed: u64) -> anyhow::Result<Host> {
    let parts = Parts {
        facts: HostFacts::read(),
        fs: Arc::new(crate::hostfs::LocalFs),
        backend: None,
        remote: None,
    };
    let mut host = checked(loaded, parts, None, seed)?;
    if loaded.scenario.host.backend == BackendKind::Host {
        return Ok(host);
    }
    let cpus = &host.plan.host_cpus;
    let topology = crate::topology::Topology::read(&crate::hostfs::LocalFs, cpus);
    let others = topology.others(cpus, &crate::host::allowed_cpus()).cpus;
    let start = StartPlacement::of(cpus, &topology, others);
    let s = &loaded.scenario;
    host.backend = match s.host.backend {
        BackendKind::Qemu => Some(Arc::new(QemuBackend::default().starting_on(start.clone()))),
        BackendKind::Libvirt => {
            let uri = &s.host.libvirt_uri;
            preflight::reap_orphan_domains(uri);
            Some(Arc::new(
                LibvirtBackend::connect(uri)
                    .context("preflight: the libvirt backend needs libvirtd")?
                    .starting_on(start.clone()),
            ))
        }
        BackendKind::Host => None,
    };
    host.start = Some(start);
    Ok(host)
}

/// A host validated against its facts, its accelerator judged for the user that will run QEMU
/// (and the CPU models and PV variants against it), its kernels checked, and its plan sized
/// for that accelerator.
fn checked(loaded: &Loaded, parts: Parts, label: Option<String>, seed: u64) -> anyhow::Result<Host> {
    validate(loaded, &parts.facts)?;
    let virt = check_virt(loaded, &virt_evidence(loaded, parts.fs.as_ref()))?;
    for w in &virt.warnings {
        crate::terminal::say(&format!("ocrig: warning: {w}"));
    }
    if loaded.scenario.host.backend != BackendKind::Host {
        preflight::check_kernels(loaded)?;
    }
    let kvm = virt.accel.accel == Accel::Kvm;
    let plan = Plan::build(&loaded.scenario.sized_for(kvm), &parts.facts.allowed_cpus, seed)?;
    Ok(Host {
        label,
        backend: parts.backend,
        remote: parts.remote,
        start: None,
        plan,
        accel: virt.accel,
    })
}

/// The accelerator every host runs guests under: hosts of one sweep must be interchangeable
/// (the same guest counts at every level, the same accelerator).
pub(crate) fn interchangeable(hosts: &[Host]) -> anyhow::Result<Accel> {
    let first = &hosts[0];
    let name = |h: &Host| h.label.clone().unwrap_or_default();
    let shape = |p: &Plan| p.boots.iter().map(|b| (b.label(), b.guests)).collect::<Vec<_>>();
    for h in &hosts[1..] {
        if shape(&h.plan) != shape(&first.plan) {
            return Err(BadInput(format!(
                "hosts {} and {} are not interchangeable for this scenario: their CPUs give different guest counts \
                 ({:?} vs {:?}); give each the same number of CPUs",
                name(first),
                name(h),
                shape(&first.plan),
                shape(&h.plan)
            ))
            .into());
        }
        if h.accel.accel != first.accel.accel {
            return Err(BadInput(format!(
                "host {} runs guests under {}, the others under {}: hosts must be interchangeable",
                name(h),
                h.accel.accel.as_str(),
                first.accel.accel.as_str()
            ))
            .into());
        }
    }
    Ok(first.accel.accel)
}

fn label_of(uri: &str) -> String {
    match crate::backend::remote::parse(uri) {
        Ok(Some(r)) => r.label(),
        _ => format!("local ({uri})"),
    }
}

/// Connects to one of several hosts: remote ones are checked like a single remote host (SSH,
/// pinned key, libvirt version); a local URI must answer.
fn connect(uri: &str) -> anyhow::Result<Arc<LibvirtBackend>> {
    match preflight::connect_remote(uri)? {
        Some(b) => Ok(b),
        None => {
            preflight::reap_orphan_domains(uri);
            let b = LibvirtBackend::connect(uri)
                .map_err(|e| BadInput(format!("preflight: host {uri}: {e:#}")))?;
            Ok(Arc::new(b))
        }
    }
}
