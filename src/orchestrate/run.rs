//! `ocrig run SCENARIO`: validate, prepare (payload, images), then sweep into a new results
//! directory. Bad input is rejected before anything is booted or created. One path for one
//! host and for several: the sweep's one host is the case H = 1 ([`super::hosts`] holds what
//! differs per host).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use super::finish::{finish, stopped};
use super::hosts::{self, Host};
use super::resume::{self, Resuming};
use super::sweep::{SweepHost, sweep_hosts, until_signal};
use super::{RunArgs, preflight, results_dir};
use crate::backend::owned::{self, RunOwnership};
use crate::executor::host::HostExecutor;
use crate::executor::vm::{VmConfig, VmExecutor};
use crate::journal::{RunRecord, RunsOn};
use crate::scenario::BackendKind;
use crate::sweep::progress::Progress;
use crate::sweep::scheduler::SharedJournal;

pub fn run(args: &RunArgs) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let mut resuming = Resuming::open(args.resume.as_deref(), args.wait_for_cpus)?;
    let mut loaded = resume::scenario(resuming.as_mut(), args.scenario.as_ref(), &args.sets)?;
    let scenario_path = loaded.path.clone();
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
        && resume::finished_already(&r.previous, &loaded, seed)?
    {
        return Ok(());
    }

    // Every host checked and planned: located bad input (exit 2) before anything is claimed
    // or booted.
    let hosts = hosts::prepare(&loaded, seed, resuming.is_some())?;
    let several = !loaded.scenario.host.hosts.is_empty();
    let accel = hosts::interchangeable(&hosts)?;
    for h in &hosts {
        preflight::raise_fd_limit(&h.plan)?;
    }
    let mut claims = hosts
        .iter()
        .map(|h| h.claim(args.wait_for_cpus))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // The sweep's one local host probed on its claimed CPUs before anything boots.
    let probes = match &hosts[..] {
        [one] if !several && one.local() => Probes::measure(&one.plan.host_cpus),
        _ => Probes::default(),
    };
    for h in &hosts {
        h.say();
    }
    say_sizing(&loaded.scenario, accel == crate::host::Accel::Kvm);

    let first = &hosts[0];
    let plan = first.plan.clone();
    let vm = first.backend.is_some();
    let t_prep = Instant::now();
    let reaped = owned::reap_orphan_qemus();
    if !reaped.is_empty() {
        crate::terminal::say(&format!(
            "ocrig: removed {} guest(s) left by an earlier ocrig: {}",
            reaped.len(),
            reaped.join(", ")
        ));
    }
    let payload = crate::payload_bin::locate()?;
    let uploads = match vm {
        true => preflight::uploads_for(&plan, &payload)?,
        false => Vec::new(),
    };
    let images = match vm {
        true => preflight::images_for(&plan, &loaded.scenario)?,
        false => BTreeMap::new(),
    };
    let prep_s = t_prep.elapsed().as_secs_f64();

    let labels: Vec<String> = hosts.iter().filter_map(|h| h.label.clone()).collect();
    let runs_on = RunsOn {
        scenario_sha256: loaded.sha256.clone(),
        backend: first.backend_name().to_string(),
        accel: accel.as_str().to_string(),
        host_cpus: plan.host_cpus.clone(),
        boots: plan.boot_infos(),
        kernels: results_dir::kernels_of(&images),
        payload_sha256: Some(preflight::file_sha256(&payload)?),
        images: results_dir::images_of(&images),
        hosts: labels.clone(),
        // What the host is (kernel, CPU, microcode, KVM parameters, …): journaled, and a
        // resume on a changed host is refused like any other change. Several hosts: one
        // record would describe only one of them.
        host: (!several).then(|| crate::journal::host::HostRecord {
            guest_start: Some(first.start_words()),
            ..crate::telemetry::host_record::read(first.fs().as_ref(), &plan.host_cpus, first.local())
        }),
    };
    if let Some(r) = &mut resuming {
        // Resuming goes on without the hosts that do not answer: fewer hosts is not a change.
        let was = &mut r.previous.runs_on;
        if runs_on.hosts.iter().all(|h| was.hosts.contains(h)) {
            was.hosts = runs_on.hosts.clone();
        }
    }
    let mut note = resume::resume_note(resuming.as_mut(), runs_on.clone(), args.accept_changed)?;
    let sets: Vec<String> = args.sets.iter().map(|o| o.given.clone()).collect();
    if let Some(n) = &mut note {
        n.overrides = sets.clone();
    }
    let previous = resuming.as_ref().map(|r| &r.previous);
    let previous_records: Vec<RunRecord> = previous.map(|p| p.records().to_vec()).unwrap_or_default();
    if let Some(p) = previous {
        resume::say_kept(p);
    }
    let (results_dir, journal, _new_lock) = results_dir::open_results(
        &args.results,
        previous,
        note,
        &plan,
        &loaded.text,
        |dir| claims.iter_mut().for_each(|c| c.note_results_dir(dir)),
        || {
            let mut head = results_dir::header(&plan, runs_on.clone());
            head.scenario_path = std::fs::canonicalize(&scenario_path).ok();
            head.overrides = sets.clone();
            head.runs_on.hosts = match several {
                true => labels.clone(),
                false => first.remote_label().into_iter().collect(),
            };
            head.kernel_identity = images
                .iter()
                .map(|(v, i)| (v.clone(), i.identity.clone()))
                .collect();
            head.host_speed = probes.speed.clone();
            head.host_handover = probes.handover.clone();
            head.noise_floor = probes.noise_floor.clone();
            head
        },
    )?;
    crate::image::identity::keep_configs(&results_dir, images.values().map(|i| &i.identity))?;
    match several {
        false => crate::terminal::say(&format!("ocrig: results in {}", results_dir.display())),
        true => crate::terminal::say(&format!(
            "ocrig: results in {}; runs spread over {} host(s): {}",
            results_dir.display(),
            hosts.len(),
            labels.join(", ")
        )),
    }
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
    // Each host's own run id among several: the guests of two hosts that are one libvirtd must
    // not share names, and each id is owned (so no reaper takes their domains for orphans).
    let id_of = |h: usize| match several {
        true => format!("{run_id}h{h}"),
        false => run_id.clone(),
    };
    let guests_dir = |h: usize| match several {
        true => results_dir.join("guests").join(format!("host{h}")),
        false => results_dir.join("guests"),
    };
    let _owners = (0..hosts.len())
        .map(|h| RunOwnership::claim(&id_of(h), &results_dir))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let progress = Progress::new(plan.measured_runs(), args.quiet);
    let sweep_of: Vec<SweepHost> = hosts
        .iter()
        .map(|h| SweepHost {
            label: h.label.clone(),
            plan: h.plan.clone(),
        })
        .collect();
    let journal = SharedJournal::new(journal, previous_records);
    if !several && first.local() {
        keep_off_measured_cpus(&plan.host_cpus);
    }
    let rt = tokio::runtime::Runtime::new()?;
    let outcome = rt.block_on(async {
        match vm {
            true => {
                let exec_for =
                    |h: usize| vm_executor(&hosts[h], accel, &images, &uploads, guests_dir(h), id_of(h));
                until_signal(sweep_hosts(
                    &sweep_of,
                    exec_for,
                    &journal,
                    &progress,
                    &results_dir,
                ))
                .await
            }
            false => {
                let exec_for = |_| HostExecutor {
                    payload: payload.clone(),
                    host_cpus: plan.host_cpus.clone(),
                };
                until_signal(sweep_hosts(
                    &sweep_of,
                    exec_for,
                    &journal,
                    &progress,
                    &results_dir,
                ))
                .await
            }
        }
    });
    // Blocking SSH threads may still wait on dead guests; do not wait for them.
    rt.shutdown_timeout(std::time::Duration::from_millis(500));
    // The guests are gone; the host traces may still be being removed (telemetry::sched_trace).
    super::wait_for_trace_cleanups(&outcome);
    progress.finish();
    let totals = stopped(outcome, &results_dir)?;
    drop(claims);
    let (uploads, upload_s) = crate::backend::remote::UPLOADS.get();
    let (tunnels, tunnel_s) = crate::backend::remote::TUNNEL_SETUPS.get();
    if uploads + tunnels > 0 {
        crate::terminal::say(&format!(
            "ocrig: remote host: {uploads} file(s) uploaded in {upload_s:.2} s; {tunnels} SSH tunnel(s) set up, {:.1} ms each",
            tunnel_s * 1e3 / tunnels.max(1) as f64
        ));
    }
    finish(&results_dir, &plan, previous.is_some(), t0, prep_s, &totals)
}

/// The executor of one host's guests.
fn vm_executor(
    host: &Host,
    accel: crate::host::Accel,
    images: &BTreeMap<String, crate::image::Image>,
    uploads: &[crate::executor::deploy::Prepared],
    guests_dir: std::path::PathBuf,
    run_id: String,
) -> VmExecutor {
    let plan = &host.plan;
    VmExecutor::new(VmConfig {
        backend: Arc::clone(host.backend.as_ref().expect("a host with guests has a backend")),
        accel,
        images: images.clone(),
        uploads: uploads.to_vec(),
        guests_dir,
        run_id,
        host_cpus: plan.host_cpus.clone(),
        vcpus: plan.vcpus,
        memory_mib: plan.memory_mib,
        scratch_disk_mib: plan.scratch_disk_mib,
        guest_start: plan.guest_start,
        timeouts: plan.timeouts.clone(),
        timeline: plan.timeline,
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
    let others = crate::host::other_cpus(measured);
    if let Some(note) = &others.note {
        tracing::warn!("{note}");
    }
    let rest = others.cpus;
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
fn say_sizing(s: &crate::scenario::Scenario, kvm: bool) {
    if s.has_kvm_sizing() {
        crate::terminal::say(&format!(
            "ocrig: {}",
            if kvm {
                "under KVM: the scenario's kvm_runs and kvm_args apply"
            } else {
                "not under KVM: the scenario's kvm_runs and kvm_args are ignored"
            }
        ));
    }
}

/// What the host probes before the sweep saw, as the header keeps it: the host's own speed on
/// the claimed CPUs (`telemetry::host_speed`), its noise floor from the same samples, and its
/// hand-over of a cache line between two of them (`telemetry::host_handover`). A new sweep
/// journals them, a resume only says them; None where not probed or where a probe failed.
#[derive(Default)]
struct Probes {
    speed: Option<serde_json::Value>,
    handover: Option<serde_json::Value>,
    noise_floor: Option<serde_json::Value>,
}

impl Probes {
    fn measure(cpus: &[usize]) -> Self {
        use crate::telemetry::{host_handover, host_speed};
        let (speed, floor) = host_speed::preflight(cpus, host_speed::PREFLIGHT, host_speed::PREFLIGHT_BLOCK);
        let noise_floor = say_noise_floor(floor);
        let speed = say_host_probe("host speed", Some(speed));
        let handover = (cpus.len() >= 2).then(|| host_handover::probe(cpus, host_handover::PREFLIGHT));
        Self {
            speed,
            handover: say_host_probe("host hand-over", handover),
            noise_floor,
        }
    }
}

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

/// Says what a host probe before the sweep saw (a warning when the host was not steady) and
/// gives what the journal's header keeps of it; None when not probed or when it failed.
fn say_host_probe<T: crate::telemetry::host_speed::HostProbe>(
    what: &str,
    probed: Option<Result<T, String>>,
) -> Option<serde_json::Value> {
    match probed? {
        Ok(h) => {
            if h.steady() {
                tracing::info!("{what} {}", h.describe());
            } else {
                // One line on the terminal; the figures in the log and every report.
                tracing::info!("{what} {}", h.describe());
                crate::terminal::say(&format!("ocrig: warning: {what} {} (ocrig.log)", h.headline()));
            }
            serde_json::to_value(&h).ok()
        }
        Err(e) => {
            tracing::warn!("{what} not probed: {e}");
            None
        }
    }
}
