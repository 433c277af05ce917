//! `ocrig run SCENARIO`: validate, prepare (payload, images), then sweep into a new results
//! directory. Bad input is rejected before anything is booted or created.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;

use super::results_lock::ResultsLock;
use super::sweep::{SweepHost, sweep_hosts, until_signal};
use super::{BadInput, SweepIncomplete, claims, preflight, results_dir, resume};
use crate::backend::Backend;
use crate::backend::libvirt::LibvirtBackend;
use crate::backend::owned::{self, RunOwnership};
use crate::backend::qemu::QemuBackend;
use crate::executor::host::HostExecutor;
use crate::executor::vm::{VmConfig, VmExecutor};
use crate::scenario::validate::{HostFacts, validate};
use crate::scenario::{BackendKind, ScenarioErrors, load};
use crate::sweep::accounting;
use crate::sweep::journal::{JournalWriteFailed, ResumeNote, RunRecord, RunsOn};
use crate::sweep::plan::Plan;
use crate::sweep::progress::Progress;
use crate::sweep::scheduler::{self, PhaseTotals, SharedJournal};

pub struct RunArgs {
    pub scenario: Option<PathBuf>,
    pub results: PathBuf,
    pub resume: Option<PathBuf>,
    pub backend: Option<BackendKind>,
    pub quiet: bool,
    /// Queue behind a live sweep on the same host CPUs (or results directory) instead of refusing.
    pub wait_for_cpus: bool,
    /// Let a resume continue although what it runs on differs from what the sweep ran on.
    pub accept_changed: bool,
}

/// A resume's results directory, locked, read, and what differs so far.
pub(crate) struct Resuming {
    pub previous: resume::Previous,
    /// Held until the process ends.
    pub lock: ResultsLock,
    /// Differences from the sweep as run, found so far (the scenario's; the environment's are
    /// added once preflight knows it).
    pub changes: Vec<String>,
}

pub fn run(args: &RunArgs) -> anyhow::Result<()> {
    let t0 = Instant::now();
    // A resumed directory is locked before its journal is read, so no second process redoes
    // what this one finishes (or this one what another finished).
    let mut resuming = match &args.resume {
        Some(dir) => {
            let lock = ResultsLock::take(dir, args.wait_for_cpus)?;
            let previous = resume::Previous::read(dir)?;
            Some(Resuming {
                previous,
                lock,
                changes: Vec::new(),
            })
        }
        None => None,
    };
    // What runs is what the journal hashed (`DIR/scenario.yaml`), unless another scenario is
    // named and its change accepted.
    let scenario_path = match (&mut resuming, &args.scenario) {
        (Some(r), Some(given)) => match r.previous.scenario_change(given)? {
            Some(diff) => {
                r.changes.push(diff);
                given.clone()
            }
            None => r.previous.scenario_copy.clone(),
        },
        (Some(r), None) => r.previous.scenario_copy.clone(),
        (None, Some(s)) => s.clone(),
        (None, None) => return Err(BadInput("name a scenario file (or --resume DIR)".into()).into()),
    };
    let mut loaded = load(&scenario_path).map_err(|e| ScenarioErrors(vec![e]))?;
    // A resume runs on the backend the sweep ran on unless told otherwise.
    let backend_as_run = resuming
        .as_ref()
        .and_then(|r| backend_named(&r.previous.runs_on.backend));
    if let Some(b) = args.backend.or(backend_as_run) {
        loaded.scenario.host.backend = b;
    }
    // A resumed sweep keeps the shuffle seed it started with.
    let seed = resuming
        .as_ref()
        .and_then(|r| r.previous.seed())
        .unwrap_or_else(crate::sweep::order::fresh_seed);
    if let Some(r) = &resuming
        && r.changes.is_empty()
        && args.backend.is_none_or(|b| Some(b) == backend_as_run)
        && finished_already(&r.previous, &loaded, seed)?
    {
        return Ok(());
    }
    if !loaded.scenario.host.hosts.is_empty() {
        if loaded.scenario.host.backend != BackendKind::Libvirt {
            validate(&loaded, &HostFacts::read())?;
        }
        return super::hosts::run(args, loaded, resuming, t0);
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
    // The accelerator, judged for the user that will run QEMU, and the CPU models and PV
    // variants against it: located bad input (exit 2) before anything is claimed or booted.
    let host_fs: Arc<dyn crate::hostfs::HostFs> = match &remote_backend {
        Some(b) => b.host_fs(),
        None => Arc::new(crate::hostfs::LocalFs),
    };
    let virt = crate::scenario::validate::check_virt(
        &loaded,
        &crate::scenario::validate::virt_evidence(&loaded, host_fs.as_ref()),
    )?;
    for w in &virt.warnings {
        eprintln!("ocrig: warning: {w}");
    }
    if loaded.scenario.host.backend != BackendKind::Host {
        preflight::check_kernels(&loaded)?;
    }
    let kvm = virt.accel.accel == crate::host::Accel::Kvm;
    say_sizing(&loaded.scenario, kvm);
    let plan = Plan::build(&loaded.scenario.sized_for(kvm), &facts.allowed_cpus, seed)?;
    preflight::raise_fd_limit(&plan)?;
    let mut cpus = match &remote_backend {
        Some(b) => claims::Claim::Remote(claims::claim_remote_cpus(b, &plan.host_cpus, args.wait_for_cpus)?),
        None => claims::Claim::Local(claims::claim_cpus(&plan.host_cpus, args.wait_for_cpus)?),
    };
    let s = &loaded.scenario;
    // The host's own speed on the claimed CPUs before anything boots (telemetry::host_speed),
    // and its hand-over of a cache line between two of them (telemetry::host_handover); a new
    // sweep journals them, a resume only says them.
    use crate::telemetry::{host_handover, host_speed};
    let local = remote_backend.is_none();
    let (host_speed, noise_floor) = match local {
        true => {
            let (speed, floor) = host_speed::preflight(
                &plan.host_cpus,
                host_speed::PREFLIGHT,
                host_speed::PREFLIGHT_BLOCK,
            );
            (Some(speed), say_noise_floor(floor))
        }
        false => (None, None),
    };
    let host_speed = say_host_probe("host speed", host_speed);
    let host_handover = (local && plan.host_cpus.len() >= 2)
        .then(|| host_handover::probe(&plan.host_cpus, host_handover::PREFLIGHT));
    let host_handover = say_host_probe("host hand-over", host_handover);

    let accel = virt.accel;
    eprintln!("ocrig: accel {} — {}", accel.accel.as_str(), accel.reason);
    // Where each local QEMU starts: on the measured CPUs, its memory bound to their nodes.
    let start = {
        let topology = crate::topology::Topology::read(&crate::hostfs::LocalFs, &plan.host_cpus);
        crate::backend::StartPlacement::of(
            &plan.host_cpus,
            &topology,
            crate::host::allowed_cpus_outside(&plan.host_cpus),
        )
    };
    let backend: Option<Arc<dyn Backend>> = match s.host.backend {
        BackendKind::Qemu => Some(Arc::new(QemuBackend::default().starting_on(start.clone()))),
        BackendKind::Libvirt if remote_backend.is_some() => remote_backend.map(|b| b as Arc<dyn Backend>),
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

    let runs_on = RunsOn {
        scenario_sha256: loaded.sha256.clone(),
        backend: backend_name.to_string(),
        accel: accel.accel.as_str().to_string(),
        host_cpus: plan.host_cpus.clone(),
        guests: plan.boot_infos(),
        kernels: results_dir::kernels_of(&images),
        payload_sha256: Some(preflight::file_sha256(&payload)?),
        images: results_dir::images_of(&images),
        hosts: Vec::new(),
        // What the host is (kernel, CPU, microcode, KVM parameters, …): journaled, and a
        // resume on a changed host is refused like any other change.
        host: Some(crate::journal::host::HostRecord {
            guest_start: Some(match local {
                true => start.describe(),
                false => "where the remote host's libvirt puts it; vCPUs pinned once up".into(),
            }),
            ..crate::telemetry::host_record::read(host_fs.as_ref(), &plan.host_cpus, local)
        }),
    };
    let note = resume_note(resuming.as_mut(), runs_on.clone(), args.accept_changed)?;
    let previous = resuming.as_ref().map(|r| &r.previous);
    let previous_records: Vec<RunRecord> = previous.map(|p| p.records().to_vec()).unwrap_or_default();
    if let Some(p) = previous {
        say_kept(p);
    }
    let (results_dir, journal, _new_lock) = results_dir::open_results(
        &args.results,
        previous,
        note,
        &plan,
        &loaded.text,
        |dir| cpus.note_results_dir(dir),
        || {
            let mut head = results_dir::header(&plan, &loaded.sha256, backend_name, accel.accel);
            head.scenario_path = std::fs::canonicalize(&scenario_path).ok();
            head.hosts = remote_label.iter().cloned().collect();
            head.kernels = runs_on.kernels.clone();
            head.kernel_identity = images
                .iter()
                .map(|(v, i)| (v.clone(), i.identity.clone()))
                .collect();
            head.payload_sha256 = runs_on.payload_sha256.clone();
            head.images = runs_on.images.clone();
            head.host_speed = host_speed.clone();
            head.host_handover = host_handover.clone();
            head.noise_floor = noise_floor.clone();
            head.host = runs_on.host.clone();
            head
        },
    )?;
    crate::image::identity::keep_configs(&results_dir, images.values().map(|i| &i.identity))?;
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
    let progress = Progress::new(plan.measured_runs(), args.quiet);
    let _ownership = RunOwnership::claim(&run_id, &results_dir)?;
    // The sweep's one host: the case H = 1 of a sweep over several hosts.
    let hosts = [SweepHost {
        label: None,
        plan: plan.clone(),
    }];
    let journal = SharedJournal::new(journal, previous_records);
    keep_off_measured_cpus(&plan.host_cpus);
    let rt = tokio::runtime::Runtime::new()?;
    let outcome = rt.block_on(async {
        match backend {
            Some(backend) => {
                let exec_for = |_| {
                    VmExecutor::new(VmConfig {
                        backend: Arc::clone(&backend),
                        accel: accel.accel,
                        images: images.clone(),
                        uploads: uploads.clone(),
                        guests_dir: results_dir.join("guests"),
                        run_id: run_id.clone(),
                        host_cpus: plan.host_cpus.clone(),
                        vcpus: plan.vcpus,
                        memory_mib: plan.memory_mib,
                        scratch_disk_mib: plan.scratch_disk_mib,
                        guest_start: plan.guest_start,
                        timeouts: plan.timeouts.clone(),
                        timeline: plan.timeline,
                    })
                };
                until_signal(sweep_hosts(&hosts, exec_for, &journal, &progress, &results_dir)).await
            }
            None => {
                let exec_for = |_| HostExecutor {
                    payload: payload.clone(),
                    host_cpus: plan.host_cpus.clone(),
                };
                until_signal(sweep_hosts(&hosts, exec_for, &journal, &progress, &results_dir)).await
            }
        }
    });
    // Blocking SSH threads may still wait on dead guests; do not wait for them.
    rt.shutdown_timeout(std::time::Duration::from_millis(500));
    // The guests are gone; the host traces may still be being removed (telemetry::sched_trace).
    super::wait_for_trace_cleanups(&outcome);
    progress.finish();
    let totals = stopped(outcome, &results_dir)?;
    drop(cpus);
    let (uploads, upload_s) = crate::backend::remote::UPLOADS.get();
    let (tunnels, tunnel_s) = crate::backend::remote::TUNNEL_SETUPS.get();
    if uploads + tunnels > 0 {
        eprintln!(
            "ocrig: remote host: {uploads} file(s) uploaded in {upload_s:.2} s; {tunnels} SSH tunnel(s) set up, {:.1} ms each",
            tunnel_s * 1e3 / tunnels.max(1) as f64
        );
    }
    finish(&results_dir, &plan, previous.is_some(), t0, prep_s, &totals)
}

/// The outcome of a sweep's schedulers: a failed journal append says what to do next.
pub(crate) fn stopped<T>(outcome: anyhow::Result<T>, results_dir: &Path) -> anyhow::Result<T> {
    outcome.map_err(|e| {
        tracing::error!("sweep stopped: {e:#}");
        if e.chain().any(|c| c.is::<JournalWriteFailed>()) {
            e.context(format!(
                "the sweep stopped and its guests were removed; the journal keeps every finished run: \
                 once the cause is gone, continue with `ocrig run --resume {}`",
                results_dir.display()
            ))
        } else {
            e
        }
    })
}

/// The backend a journal names.
fn backend_named(name: &str) -> Option<BackendKind> {
    match name {
        "host" => Some(BackendKind::Host),
        "qemu" => Some(BackendKind::Qemu),
        "libvirt" => Some(BackendKind::Libvirt),
        _ => None,
    }
}

/// Moves this thread, and so the sweep's runtime threads it starts, to the usable CPUs outside
/// `measured` where there are any (QEMU starts on the measured ones all the same: see
/// `QemuBackend::starting_on`); where there are none, as on a 2-CPU host measured whole, ocrig
/// shares them, which the journal's host record says (`placement`).
fn keep_off_measured_cpus(measured: &[usize]) {
    let rest = crate::host::allowed_cpus_outside(measured);
    if rest.is_empty() {
        return;
    }
    let me = rustix::thread::gettid().as_raw_nonzero().get();
    match crate::backend::pin_thread(me, &rest) {
        Ok(()) => tracing::info!("ocrig runs on CPUs {rest:?}, outside the measured {measured:?}"),
        Err(e) => tracing::warn!("ocrig could not move itself off the measured CPUs: {e:#}"),
    }
}

/// Says which sizing of a scenario with a KVM block (`kvm_runs`, `kvm_args`) the sweep runs.
pub(crate) fn say_sizing(s: &crate::scenario::Scenario, kvm: bool) {
    if s.has_kvm_sizing() {
        eprintln!(
            "ocrig: {}",
            if kvm {
                "under KVM: the scenario's kvm_runs and kvm_args apply"
            } else {
                "not under KVM: the scenario's kvm_runs and kvm_args are ignored"
            }
        );
    }
}

/// True (having said so) when the resumed sweep has no run left to make: nothing is booted,
/// claimed or written. Judged on the plan of the CPUs the sweep ran on.
fn finished_already(
    p: &resume::Previous,
    loaded: &crate::scenario::Loaded,
    seed: u64,
) -> anyhow::Result<bool> {
    let mut s = loaded
        .scenario
        .sized_for(p.runs_on.accel == crate::host::Accel::Kvm.as_str());
    if let Some(first) = s.host.hosts.first()
        && let Some(c) = first.cpus()
    {
        s.host.cpus = Some(c.clone());
    }
    let Ok(plan) = Plan::build(&s, &p.runs_on.host_cpus, seed) else {
        return Ok(false); // the full preflight says what is wrong
    };
    if scheduler::work_left(&plan, p.records()) > 0 {
        return Ok(false);
    }
    let kept = counted_runs(p.records());
    eprintln!(
        "ocrig: {}: the sweep is finished ({kept} runs with a valid result); nothing to do, nothing changed",
        p.dir.display()
    );
    Ok(true)
}

/// Measured runs with a valid result among `records`, by the one accounting rule.
pub(crate) fn counted_runs(records: &[RunRecord]) -> usize {
    accounting::settle(records)
        .counted(records)
        .filter(|r| !r.warmup && r.guest == 0)
        .count()
}

pub(crate) fn say_kept(p: &resume::Previous) {
    eprintln!(
        "ocrig: resuming {}: {} finished runs kept",
        p.dir.display(),
        counted_runs(p.records())
    );
}

/// The note a resume journals, once what it runs on (`now`) is compared with what the sweep
/// ran on: any difference is refused (bad input, nothing written) unless `accept`ed.
pub(crate) fn resume_note(
    resuming: Option<&mut Resuming>,
    now: RunsOn,
    accept: bool,
) -> anyhow::Result<Option<ResumeNote>> {
    let Some(r) = resuming else {
        return Ok(None);
    };
    let mut was = r.previous.runs_on.clone();
    // The scenario's difference is already told as a diff of its lines.
    if !r.changes.is_empty() {
        was.scenario_sha256 = now.scenario_sha256.clone();
    }
    r.changes.extend(resume::differences(&was, &now));
    if !r.changes.is_empty() && !accept {
        return Err(BadInput(format!(
            "cannot resume {}: it would not continue the sweep it started; refusing to mix results. Differences:\n  {}\n\
             Resume as it ran (e.g. the same --backend and CPUs), or pass --accept-changed to continue anyway (the journal records what was accepted)",
            r.previous.dir.display(),
            r.changes.join("\n  ")
        ))
        .into());
    }
    if !r.changes.is_empty() {
        eprintln!(
            "ocrig: --accept-changed: continuing although {}",
            r.changes.join("; ")
        );
    }
    r.lock.say_holder()?;
    Ok(Some(ResumeNote {
        at: jiff::Timestamp::now().to_string(),
        ocrig_version: env!("CARGO_PKG_VERSION").to_string(),
        runs_on: now,
        accepted_changes: r.changes.clone(),
    }))
}

/// Timings, reports and the closing line of a sweep that ran to its end; [`SweepIncomplete`]
/// when some of `plan`'s run slots have no valid result.
pub(crate) fn finish(
    results_dir: &Path,
    plan: &Plan,
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
    // Every resume keeps its own timings.
    let timings_file = if resumed {
        results_dir::numbered(results_dir, "timings-resume", "json")
    } else {
        results_dir.join("timings.json")
    };
    std::fs::write(timings_file, serde_json::to_string_pretty(&timings)?)?;

    // Streamed into digests: a long sweep's journal may not fit in memory whole.
    let j = crate::stats::digest::Digested::read(results_dir, false)?;
    super::out(&crate::report::render_digested(
        &j,
        crate::report::Format::Table,
        &Default::default(),
    )?)?;
    if let Err(e) = crate::report::write_all(&j, results_dir) {
        tracing::warn!("writing reports: {e:#}");
    }
    let disturbed = if totals.disturbed + totals.disturbed_counted > 0 {
        format!(
            "; the host disturbed {} attempt(s) (waited {:.0} s) and {} run(s) counted marked disturbed",
            totals.disturbed, totals.disturbed_wait_s, totals.disturbed_counted
        )
    } else {
        String::new()
    };
    eprintln!(
        "ocrig: {} runs ok, {} failed ({} failed attempts{disturbed}); {} warm-up(s); {} boot(s); wall {:.1} s = prepare {:.1} + boot {:.1} + deploy {:.1} + run {:.1} (measured {:.1}, {:.0}% of wall) + teardown {:.1}; max start skew {:.0} µs",
        totals.runs_ok,
        totals.runs_failed,
        totals.attempts_failed,
        totals.warm_ups,
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
    let slots = scheduler::slots_without_result(plan, &j.runs);
    if slots > 0 {
        return Err(SweepIncomplete {
            dir: results_dir.to_path_buf(),
            slots,
        }
        .into());
    }
    Ok(())
}

/// Says what a host probe before the sweep saw (a warning when the host was not steady) and
/// gives what the journal's header keeps of it; None when not probed or when it failed.
/// The preflight's noise floor ([`crate::telemetry::host_speed::NoiseFloor`]) said in the log
/// and kept for the header, or why it was not measured.
fn say_noise_floor(
    floor: Result<crate::telemetry::host_speed::NoiseFloor, String>,
) -> Option<serde_json::Value> {
    match floor {
        Ok(f) => {
            tracing::info!(
                "noise floor {}",
                f.describe(crate::stats::power::detectable_at_cv)
            );
            serde_json::to_value(&f).ok()
        }
        Err(e) => {
            tracing::warn!("noise floor not measured: {e}");
            None
        }
    }
}

fn say_host_probe<T: crate::telemetry::host_speed::HostProbe>(
    what: &str,
    probed: Option<Result<T, String>>,
) -> Option<serde_json::Value> {
    match probed? {
        Ok(h) => {
            if h.steady() {
                tracing::info!("{what} {}", h.describe());
            } else {
                eprintln!("ocrig: warning: {what} {}", h.describe());
            }
            serde_json::to_value(&h).ok()
        }
        Err(e) => {
            tracing::warn!("{what} not probed: {e}");
            None
        }
    }
}
