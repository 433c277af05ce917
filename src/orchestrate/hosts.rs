//! `ocrig run` over several interchangeable libvirt hosts (`host.hosts`): every host gets the
//! same plan (its own CPUs), run slot `r` of every cell goes to host `r mod H`, one scheduler per
//! host runs its share at the same time, and all of them journal into one journal, each record
//! naming its host. A host that cannot be reached any more ends its scheduler; once the others
//! are done, the runs still without a valid result are spread over the hosts left (or, with
//! none left, wait for `--resume`). Resuming continues on whichever hosts answer.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::future::try_join_all;

use super::BadInput;
use super::claims::{self, Claim};
use super::run::{self as single, RunArgs};
use super::{preflight, results_dir};
use crate::backend::Backend as _;
use crate::backend::libvirt::LibvirtBackend;
use crate::backend::owned::RunOwnership;
use crate::executor::vm::{VmConfig, VmExecutor};
use crate::scenario::Loaded;
use crate::scenario::validate::{HostFacts, validate};
use crate::sweep::journal::{RunRecord, RunsOn};
use crate::sweep::plan::Plan;
use crate::sweep::progress::Progress;
use crate::sweep::scheduler::{self, HostLost, HostShare, PhaseTotals, SharedJournal};

/// One host, checked and planned.
struct Host {
    label: String,
    backend: Arc<LibvirtBackend>,
    plan: Plan,
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
        let plan = Plan::build(&mine.scenario, &facts.allowed_cpus, seed)?;
        hosts.push(Host {
            label: label_of(&uri),
            backend,
            plan,
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
        let ev = crate::scenario::validate::virt_evidence(&loaded, h.backend.host_fs().as_ref());
        let a = crate::scenario::validate::check_virt(&loaded, &ev)?.accel;
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
    let progress = Progress::new(plan0.total_runs(), args.quiet);
    let run_id = results_dir::run_id();
    // One run id per host: the guests of two hosts that are one libvirtd must not share names,
    // and each id is owned (so no reaper takes their domains for orphans).
    let mut owners = Vec::new();
    for k in 0..hosts.len() {
        owners.push(RunOwnership::claim(&format!("{run_id}h{k}"), &results_dir)?);
    }
    // Every host's scheduler appends here and reads the others' records from here.
    let journal = Mutex::new(SharedJournal {
        writer: journal,
        records: previous.map(|p| p.records().to_vec()).unwrap_or_default(),
    });
    let pooled = |j: &Mutex<SharedJournal>| -> Vec<RunRecord> {
        j.lock().unwrap_or_else(|e| e.into_inner()).records.clone()
    };
    let mut records = pooled(&journal);

    let rt = tokio::runtime::Runtime::new()?;
    let mut totals = PhaseTotals::default();
    let mut alive: Vec<usize> = (0..hosts.len()).collect();
    let mut pass = 0;
    let outcome: anyhow::Result<()> = rt.block_on(async {
        loop {
            pass += 1;
            let n = alive.len();
            let jobs = alive.iter().enumerate().map(|(k, &h)| {
                let host = &hosts[h];
                let exec = VmExecutor::new(VmConfig {
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
                });
                let share = HostShare {
                    label: host.label.clone(),
                    index: k,
                    of: n,
                };
                let previous = records.clone();
                let (journal, progress) = (&journal, &progress);
                async move {
                    let r = scheduler::run_with(
                        &host.plan,
                        exec,
                        scheduler::Journal::Shared(journal),
                        previous,
                        progress,
                        Some(share),
                    )
                    .await;
                    // A lost host ends only its share; anything else (a journal append that
                    // failed above all) ends every host's scheduler at once: try_join_all drops
                    // the other futures, and with them their executors and guests.
                    match r {
                        Err(e) if !e.is::<HostLost>() => {
                            Err(e.context(format!("the sweep on host {}", host.label)))
                        }
                        r => Ok((h, r)),
                    }
                }
            });
            let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
            let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            let results = tokio::select! {
                r = try_join_all(jobs) => single::stopped(r, &results_dir)?,
                _ = sigint.recv() => return Err(super::Interrupted { signal: "SIGINT", code: 130 }.into()),
                _ = sigterm.recv() => return Err(super::Interrupted { signal: "SIGTERM", code: 143 }.into()),
            };
            let mut lost = Vec::new();
            for (h, r) in results {
                match r {
                    Ok(t) => add(&mut totals, &t),
                    Err(e) => match e.downcast_ref::<HostLost>() {
                        Some(l) => {
                            progress.println(&format!("ocrig: {l}"));
                            lost.push(h);
                        }
                        None => return Err(e),
                    },
                }
            }
            records = pooled(&journal);
            if lost.is_empty() {
                return Ok(());
            }
            alive.retain(|h| !lost.contains(h));
            let settled = crate::sweep::accounting::settle(&records);
            let done = settled.counted(&records).filter(|r| !r.warmup && r.guest == 0).count();
            if alive.is_empty() {
                anyhow::bail!(
                    "every host was lost; {done} finished runs are in the journal. Continue with `ocrig run --resume {}` \
                     once a host answers",
                    results_dir.display()
                );
            }
            let msg = format!(
                "ocrig: pass {pass}: {done} finished runs kept; the unfinished runs of {} go to {}",
                lost.iter().map(|&h| hosts[h].label.as_str()).collect::<Vec<_>>().join(", "),
                alive.iter().map(|&h| hosts[h].label.as_str()).collect::<Vec<_>>().join(", ")
            );
            progress.println(&msg);
            tracing::warn!("{msg}");
        }
    });
    rt.shutdown_timeout(std::time::Duration::from_millis(500));
    progress.finish();
    if let Err(e) = &outcome {
        tracing::error!("sweep stopped: {e:#}");
    }
    outcome?;
    drop(claims);
    drop(owners);
    single::finish(&results_dir, &plan0, resumed, t0, prep_s, &totals)
}

fn add(t: &mut PhaseTotals, o: &PhaseTotals) {
    t.boot_s += o.boot_s;
    t.deploy_s += o.deploy_s;
    t.run_s += o.run_s;
    t.measured_s += o.measured_s;
    t.teardown_s += o.teardown_s;
    t.groups += o.groups;
    t.boots += o.boots;
    t.runs_ok += o.runs_ok;
    t.runs_failed += o.runs_failed;
    t.attempts_failed += o.attempts_failed;
    t.max_start_skew_us = t.max_start_skew_us.max(o.max_start_skew_us);
}
