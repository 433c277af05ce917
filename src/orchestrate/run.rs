//! `ocrig run SCENARIO`: validate, prepare (payload, images), then sweep into a new results
//! directory. Bad input is rejected before anything is booted or created.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use tokio::signal::unix::{SignalKind, signal};

use super::{BadInput, Interrupted, claims, preflight, results_dir, resume};
use crate::backend::Backend;
use crate::backend::libvirt::LibvirtBackend;
use crate::backend::owned::{self, RunOwnership};
use crate::backend::qemu::QemuBackend;
use crate::executor::Executor;
use crate::executor::host::HostExecutor;
use crate::executor::vm::{VmConfig, VmExecutor};
use crate::host::VirtEvidence;
use crate::scenario::validate::{HostFacts, validate};
use crate::scenario::{BackendKind, ScenarioErrors, load};
use crate::sweep::accounting;
use crate::sweep::journal::{JournalWriter, RunRecord};
use crate::sweep::plan::Plan;
use crate::sweep::progress::Progress;
use crate::sweep::scheduler::{self, PhaseTotals};

pub struct RunArgs {
    pub scenario: Option<PathBuf>,
    pub results: PathBuf,
    pub resume: Option<PathBuf>,
    pub backend: Option<BackendKind>,
    pub quiet: bool,
    /// Queue behind a live sweep on the same host CPUs instead of refusing.
    pub wait_for_cpus: bool,
}

pub fn run(args: &RunArgs) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let previous = match &args.resume {
        Some(dir) => Some(resume::Previous::read(dir, args.scenario.as_deref())?),
        None => None,
    };
    let scenario_path = match (&previous, &args.scenario) {
        (Some(p), _) => p.scenario_copy.clone(),
        (None, Some(s)) => s.clone(),
        (None, None) => return Err(BadInput("name a scenario file (or --resume DIR)".into()).into()),
    };
    let mut loaded = load(&scenario_path).map_err(|e| ScenarioErrors(vec![e]))?;
    if let Some(b) = args.backend {
        loaded.scenario.host.backend = b;
    }
    if !loaded.scenario.host.hosts.is_empty() {
        if loaded.scenario.host.backend != BackendKind::Libvirt {
            validate(&loaded, &HostFacts::read())?;
        }
        return super::hosts::run(args, loaded, previous, t0);
    }
    // A remote libvirt host is checked (SSH, pinned key, libvirt version) before anything else,
    // and the scenario is validated against its CPUs and memory.
    let remote_backend = match loaded.scenario.host.backend {
        BackendKind::Libvirt => preflight::connect_remote(loaded.scenario.host.libvirt_uri.trim())?,
        _ => None,
    };
    let remote_label = remote_backend
        .as_ref()
        .and_then(|b| b.remote())
        .map(|r| r.remote.label());
    let facts = match &remote_backend {
        Some(b) => preflight::remote_facts(b)?,
        None => HostFacts::read(),
    };
    validate(&loaded, &facts)?;
    if loaded.scenario.host.backend != BackendKind::Host {
        preflight::check_kernels(&loaded)?;
    }
    // A resumed sweep keeps the shuffle seed it started with.
    let seed = previous
        .as_ref()
        .and_then(|p| p.seed())
        .unwrap_or_else(crate::sweep::order::fresh_seed);
    let plan = Plan::build(&loaded.scenario, &facts.allowed_cpus, seed)?;
    let mut cpus = match &remote_backend {
        Some(b) => claims::Claim::Remote(claims::claim_remote_cpus(b, &plan.host_cpus, args.wait_for_cpus)?),
        None => claims::Claim::Local(claims::claim_cpus(&plan.host_cpus, args.wait_for_cpus)?),
    };
    let previous_records: Vec<RunRecord> = previous
        .as_ref()
        .map(|p| p.records().to_vec())
        .unwrap_or_default();
    if let Some(p) = &previous {
        let settled = accounting::settle(&previous_records);
        let kept = settled
            .counted(&previous_records)
            .filter(|r| !r.warmup && r.guest == 0)
            .count();
        eprintln!("ocrig: resuming {}: {kept} finished runs kept", p.dir.display());
    }
    let s = &loaded.scenario;

    let evidence = match &remote_backend {
        Some(b) => VirtEvidence::read_from(b.host_fs().as_ref()),
        None => VirtEvidence::read(),
    };
    let accel = preflight::resolve_accel(s.host.accel, &evidence)?;
    eprintln!("ocrig: accel {} — {}", accel.accel.as_str(), accel.reason);
    let backend: Option<Arc<dyn Backend>> = match s.host.backend {
        BackendKind::Qemu => Some(Arc::new(QemuBackend::default())),
        BackendKind::Libvirt if remote_backend.is_some() => remote_backend.map(|b| b as Arc<dyn Backend>),
        BackendKind::Libvirt => {
            let uri = &s.host.libvirt_uri;
            preflight::reap_orphan_domains(uri);
            Some(Arc::new(
                LibvirtBackend::connect(uri).context("preflight: the libvirt backend needs libvirtd")?,
            ))
        }
        BackendKind::Host => None,
    };
    let backend_name = backend.as_ref().map_or("host", |b| b.name());

    let t_prep = Instant::now();
    let reaped = owned::reap_orphan_qemus();
    if !reaped.is_empty() {
        eprintln!(
            "ocrig: removed {} guest(s) left by an earlier ocrig: {}",
            reaped.len(),
            reaped.join(", ")
        );
    }
    let payload = crate::payload_bin::locate()?;
    let uploads = if backend.is_some() {
        preflight::uploads_for(&plan, &payload)?
    } else {
        Vec::new()
    };
    let images = if backend.is_some() {
        preflight::images_for(&plan, s)?
    } else {
        BTreeMap::new()
    };
    let prep_s = t_prep.elapsed().as_secs_f64();

    let (results_dir, mut journal) = results_dir::open_results(
        &args.results,
        previous.as_ref(),
        &plan,
        &loaded.text,
        |dir| cpus.note_results_dir(dir),
        || {
            let mut head = results_dir::header(&plan, &loaded.sha256, backend_name, accel.accel);
            head.scenario_path = std::fs::canonicalize(&scenario_path).ok();
            head.hosts = remote_label.iter().cloned().collect();
            head.kernels = results_dir::kernels_of(&images);
            head
        },
    )?;
    eprintln!("ocrig: results in {}", results_dir.display());
    tracing::info!(
        "plan: {} boot group(s): {}",
        plan.boots.len(),
        plan.boots
            .iter()
            .map(|b| b.label())
            .collect::<Vec<_>>()
            .join(", ")
    );

    let run_id = results_dir::run_id();
    let progress = Progress::new(plan.total_runs(), args.quiet);
    let _ownership = RunOwnership::claim(&run_id, &results_dir)?;
    let rt = tokio::runtime::Runtime::new()?;
    let outcome = rt.block_on(async {
        match backend {
            Some(backend) => {
                let exec = VmExecutor::new(VmConfig {
                    backend,
                    accel: accel.accel,
                    images,
                    uploads,
                    guests_dir: results_dir.join("guests"),
                    run_id,
                    host_cpus: plan.host_cpus.clone(),
                    vcpus: plan.vcpus,
                    memory_mib: plan.memory_mib,
                    scratch_disk_mib: plan.scratch_disk_mib,
                    guest_start: plan.guest_start,
                    timeouts: plan.timeouts.clone(),
                });
                sweep_until_signal(&plan, exec, &mut journal, previous_records, &progress).await
            }
            None => {
                let exec = HostExecutor {
                    payload: payload.clone(),
                    host_cpus: plan.host_cpus.clone(),
                };
                sweep_until_signal(&plan, exec, &mut journal, previous_records, &progress).await
            }
        }
    });
    // Blocking SSH threads may still wait on dead guests; do not wait for them.
    rt.shutdown_timeout(std::time::Duration::from_millis(500));
    progress.finish();
    if let Err(e) = &outcome {
        tracing::error!("sweep stopped: {e:#}");
    }
    let totals = outcome?;
    drop(cpus);
    let (uploads, upload_s) = crate::backend::remote::UPLOADS.get();
    let (tunnels, tunnel_s) = crate::backend::remote::TUNNEL_SETUPS.get();
    if uploads + tunnels > 0 {
        eprintln!(
            "ocrig: remote host: {uploads} file(s) uploaded in {upload_s:.2} s; {tunnels} SSH tunnel(s) set up, {:.1} ms each",
            tunnel_s * 1e3 / tunnels.max(1) as f64
        );
    }
    finish(&results_dir, previous.is_some(), t0, prep_s, &totals)
}

/// Runs the scheduler until it is done or a signal arrives. Dropping the sweep future (on a
/// signal) drops the executor, and with it every live guest, which kills it.
pub(super) async fn sweep_until_signal<E: Executor>(
    plan: &Plan,
    exec: E,
    journal: &mut JournalWriter,
    previous: Vec<RunRecord>,
    progress: &Progress,
) -> anyhow::Result<PhaseTotals> {
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    tokio::select! {
        r = scheduler::run(plan, exec, journal, previous, progress) => r,
        _ = sigint.recv() => Err(Interrupted { signal: "SIGINT", code: 130 }.into()),
        _ = sigterm.recv() => Err(Interrupted { signal: "SIGTERM", code: 143 }.into()),
    }
}

/// Timings, reports and the closing line of a sweep that ran to its end.
pub(crate) fn finish(
    results_dir: &Path,
    resumed: bool,
    t0: Instant,
    prep_s: f64,
    totals: &PhaseTotals,
) -> anyhow::Result<()> {
    let wall_s = t0.elapsed().as_secs_f64();
    let share = |x: f64| if wall_s > 0.0 { x / wall_s } else { 0.0 };
    let timings = serde_json::json!({
        "wall_s": wall_s, "prepare_s": prep_s, "phases": totals,
        "run_share": share(totals.run_s), "measured_share": share(totals.measured_s),
    });
    let timings_file = if resumed {
        "timings-resume.json"
    } else {
        "timings.json"
    };
    std::fs::write(
        results_dir.join(timings_file),
        serde_json::to_string_pretty(&timings)?,
    )?;

    let j = crate::sweep::journal::Journal::read(results_dir)?;
    super::out(&crate::report::render(
        &j,
        crate::report::Format::Table,
        &Default::default(),
    )?)?;
    if let Err(e) = crate::report::write_all(&j, results_dir) {
        tracing::warn!("writing reports: {e:#}");
    }
    eprintln!(
        "ocrig: {} runs ok, {} failed ({} failed attempts); {} boot(s); wall {:.1} s = prepare {:.1} + boot {:.1} + deploy {:.1} + run {:.1} (measured {:.1}, {:.0}% of wall) + teardown {:.1}; max start skew {:.0} µs",
        totals.runs_ok,
        totals.runs_failed,
        totals.attempts_failed,
        totals.boots,
        wall_s,
        prep_s,
        totals.boot_s,
        totals.deploy_s,
        totals.run_s,
        totals.measured_s,
        share(totals.measured_s) * 100.0,
        totals.teardown_s,
        totals.max_start_skew_us
    );
    anyhow::ensure!(
        totals.runs_ok > 0 || totals.runs_failed == 0,
        "every run failed (see the journal)"
    );
    Ok(())
}
