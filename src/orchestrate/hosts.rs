//! `ocrig run` over several interchangeable libvirt hosts (`host.hosts`): the preflight of every
//! host (reachable, big enough, the same guest counts and accelerator), their CPU claims, and
//! then the one sweep loop ([`super::sweep`]) with one labelled host each. Resuming continues
//! on whichever hosts answer.

use std::sync::Arc;
use std::time::Instant;

use super::BadInput;
use super::claims::{self, Claim};
use super::run::{self as single, RunArgs};
use super::sweep::{SweepHost, sweep_hosts as sweep, until_signal};
use super::{preflight, results_dir};
use crate::backend::Backend as _;
use crate::backend::libvirt::LibvirtBackend;
use crate::backend::owned::RunOwnership;
use crate::executor::vm::{VmConfig, VmExecutor};
use crate::scenario::Loaded;
use crate::scenario::validate::{HostFacts, validate};
use crate::sweep::journal::RunsOn;
use crate::sweep::plan::Plan;
use crate::sweep::progress::Progress;
use crate::sweep::scheduler::SharedJournal;

/// One host, checked and planned.
struct Host {
    label: String,
    backend: Arc<LibvirtBackend>,
    plan: Plan,
    accel: crate::host::AccelChoice,
}

fn label_of(uri: &str) -> String {
    match crate::backend::remote::parse(uri) {
        Ok(Some(r)) => r.label(),
        _ => format!("local ({uri})"),
    }
}

/// Connects to one host: remote ones are checked like a single remote host (SSH, pinned key,
/// libvirt version); a local URI must answer.
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

pub fn run(
    args: &RunArgs,
    loaded: Loaded,
    mut resuming: Option<single::Resuming>,
    t0: Instant,
) -> anyhow::Result<()> {
    let s = loaded.scenario.clone();
    let seed = resuming
        .as_ref()
        .and_then(|r| r.previous.seed())
        .unwrap_or_else(crate::sweep::order::fresh_seed);
    let resumed = resuming.is_some();

    // Preflight: every host reachable and big enough (a resumed sweep goes on without the
    // hosts that do not answer).
    let mut hosts = Vec::new();
    for entry in &s.host.hosts {
        let uri = entry.uri().to_string();
        let backend = match connect(&uri) {
            Ok(b) => b,
            Err(e) if resumed => {
                eprintln!(
                    "ocrig: host {} does not answer; resuming without it: {e:#}",
                    label_of(&uri)
                );
                continue;
            }
            Err(e) => return Err(e),
        };
        let facts = if backend.remote().is_some() {
            preflight::remote_facts(&backend)?
        } else {
            HostFacts::read()
        };
        let mut mine = loaded.clone();
        if let Some(c) = entry.cpus() {
            mine.scenario.host.cpus = Some(c.clone());
        }
        validate(&mine, &facts)?;
        preflight::check_kernels(&mine)?;
        // The accelerator first: a scenario's KVM sizing applies to a host that runs KVM.
        let ev = crate::scenario::validate::virt_evidence(&mine, backend.host_fs().as_ref());
        let accel = crate::scenario::validate::check_virt(&mine, &ev)?.accel;
        let kvm = accel.accel == crate::host::Accel::Kvm;
        let plan = Plan::build(&mine.scenario.sized_for(kvm), &facts.allowed_cpus, seed)?;
        // Every record names its host, and a guest set is known by its host: two entries
        // that are the same host (split by CPUs) get labels of their own.
        let mut label = label_of(&uri);
        if hosts.iter().any(|h: &Host| h.label == label) {
            label = format!("{label} #{}", hosts.len() + 1);
        }
        hosts.push(Host {
            label,
            backend,
            plan,
            accel,
        });
    }
    anyhow::ensure!(
        !hosts.is_empty(),
        "none of the sweep's hosts answers; try --resume later"
    );
    let shape = |p: &Plan| p.boots.iter().map(|b| (b.label(), b.guests)).collect::<Vec<_>>();
    for h in &hosts[1..] {
        if shape(&h.plan) != shape(&hosts[0].plan) {
            return Err(BadInput(format!(
                "hosts {} and {} are not interchangeable for this scenario: their CPUs give different guest counts \
                 ({:?} vs {:?}); give each the same number of CPUs",
                hosts[0].label,
                h.label,
                shape(&hosts[0].plan),
                shape(&h.plan)
            ))
            .into());
        }
    }
    let mut accel = None;
    for h in &hosts {
        let a = &h.accel;
        if let Some(first) = &accel
            && a.accel != *first
        {
            return Err(BadInput(format!(
                "host {} runs guests under {}, the others under {}: hosts must be interchangeable",
                h.label,
                a.accel.as_str(),
                first.as_str()
            ))
            .into());
        }
        eprintln!(
            "ocrig: host {}: {} CPUs given, accel {} — {}",
            h.label,
            h.plan.host_cpus.len(),
            a.accel.as_str(),
            a.reason
        );
        accel = Some(a.accel);
    }
    let accel = accel.expect("at least one host");
    super::run::say_sizing(&loaded.scenario, accel == crate::host::Accel::Kvm);

    // The CPUs of every host, on that host.
    let mut claims = Vec::new();
    for h in &hosts {
        claims.push(match h.backend.remote() {
            Some(_) => Claim::Remote(claims::claim_remote_cpus(
                &h.backend,
                &h.plan.host_cpus,
                args.wait_for_cpus,
            )?),
            None => Claim::Local(claims::claim_cpus(&h.plan.host_cpus, args.wait_for_cpus)?),
        });
    }

    let t_prep = Instant::now();
    let plan0 = hosts[0].plan.clone();
    let payload = crate::payload_bin::locate()?;
    let uploads = preflight::uploads_for(&plan0, &payload)?;
    let images = preflight::images_for(&plan0, &s)?;
    let prep_s = t_prep.elapsed().as_secs_f64();

    let runs_on = RunsOn {
        scenario_sha256: loaded.sha256.clone(),
        backend: "libvirt".into(),
        accel: accel.as_str().to_string(),
        host_cpus: plan0.host_cpus.clone(),
        guests: plan0.boot_infos(),
        kernels: results_dir::kernels_of(&images),
        payload_sha256: Some(preflight::file_sha256(&payload)?),
        images: results_dir::images_of(&images),
        hosts: hosts.iter().map(|h| h.label.clone()).collect(),
        // Several hosts: one record would describe only one of them.
        host: None,
    };
    let mut was_on = resuming.as_ref().map(|r| r.previous.runs_on.clone());
    if let (Some(was), Some(r)) = (&mut was_on, &mut resuming) {
        // Resuming goes on without the hosts that do not answer: fewer hosts is not a change.
        if runs_on.hosts.iter().all(|h| was.hosts.contains(h)) {
            was.hosts = runs_on.hosts.clone();
        }
        r.previous.runs_on = was.clone();
    }
    let note = single::resume_note(resuming.as_mut(), runs_on.clone(), args.accept_changed)?;
    let previous = resuming.as_ref().map(|r| &r.previous);
    if let Some(p) = previous {
        single::say_kept(p);
    }
    let (results_dir, journal, _new_lock) = results_dir::open_results(
        &args.results,
        previous,
        note,
        &plan0,
        &loaded.text,
        |dir| claims.iter_mut().for_each(|c| c.note_results_dir(dir)),
        || {
            let mut head = results_dir::header(&plan0, &loaded.sha256, "libvirt", accel);
            head.scenario_path = std::fs::canonicalize(&loaded.path).ok();
            head.kernels = runs_on.kernels.clone();
            head.kernel_identity = images
                .iter()
                .map(|(v, i)| (v.clone(), i.identity.clone()))
                .collect();
            head.payload_sha256 = runs_on.payload_sha256.clone();
            head.images = runs_on.images.clone();
            head.hosts = runs_on.hosts.clone();
            head
        },
    )?;
    eprintln!(
        "ocrig: results in {}; runs spread over {} host(s): {}",
        results_dir.display(),
        hosts.len(),
        hosts
            .iter()
            .map(|h| h.label.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let progress = Progress::new(plan0.measured_runs(), args.quiet);
    let run_id = results_dir::run_id();
    // One run id per host: the guests of two hosts that are one libvirtd must not share names,
    // and each id is owned (so no reaper takes their domains for orphans).
    let mut owners = Vec::new();
    for k in 0..hosts.len() {
        owners.push(RunOwnership::claim(&format!("{run_id}h{k}"), &results_dir)?);
    }
    let journal = SharedJournal::new(
        journal,
        previous.map(|p| p.records().to_vec()).unwrap_or_default(),
    );
    let sweep_hosts: Vec<SweepHost> = hosts
        .iter()
        .map(|h| SweepHost {
            label: Some(h.label.clone()),
            plan: h.plan.clone(),
        })
        .collect();
    let exec_for = |h: usize| {
        let host = &hosts[h];
        VmExecutor::new(VmConfig {
            backend: Arc::clone(&host.backend) as Arc<dyn crate::backend::Backend>,
            accel,
            images: images.clone(),
            uploads: uploads.clone(),
            guests_dir: results_dir.join("guests").join(format!("host{h}")),
            run_id: format!("{run_id}h{h}"),
            host_cpus: host.plan.host_cpus.clone(),
            vcpus: host.plan.vcpus,
            memory_mib: host.plan.memory_mib,
            scratch_disk_mib: host.plan.scratch_disk_mib,
            guest_start: host.plan.guest_start,
            timeouts: host.plan.timeouts.clone(),
            timeline: host.plan.timeline,
        })
    };
    let rt = tokio::runtime::Runtime::new()?;
    let outcome = rt.block_on(until_signal(sweep(
        &sweep_hosts,
        exec_for,
        &journal,
        &progress,
        &results_dir,
    )));
    rt.shutdown_timeout(std::time::Duration::from_millis(500));
    // The guests are gone; the host traces may still be being removed (telemetry::sched_trace).
    super::wait_for_trace_cleanups(&outcome);
    progress.finish();
    let totals = single::stopped(outcome, &results_dir)?;
    drop(claims);
    drop(owners);
    single::finish(&results_dir, &plan0, resumed, t0, prep_s, &totals)
}
