//! `ocrig run SCENARIO`: validate, prepare (payload, images), then sweep into a new results
//! directory. Bad input is rejected before anything is booted or created.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use tokio::signal::unix::{SignalKind, signal};

use super::{BadInput, Interrupted, resume};
use crate::backend::Backend;
use crate::backend::isolation::{CpuClaim, CpusBusy};
use crate::backend::libvirt::{self, LibvirtBackend};
use crate::backend::owned::{self, RunOwnership};
use crate::backend::qemu::QemuBackend;
use crate::executor::Executor;
use crate::executor::deploy::{self, Prepared};
use crate::executor::host::HostExecutor;
use crate::executor::vm::{VmConfig, VmExecutor};
use crate::host::Accel;
use crate::image::{self, ImageSpec};
use crate::scenario::validate::{HostFacts, validate};
use crate::scenario::{BackendKind, ScenarioErrors, load};
use crate::sweep::accounting;
use crate::sweep::journal::{Entry, JournalWriter, RunRecord, ScheduleInfo, SweepHeader, WorkloadInfo};
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
        return super::run_hosts::run(args, loaded, previous, t0);
    }
    // A remote libvirt host is checked (SSH, pinned key, libvirt version) before anything else,
    // and the scenario is validated against its CPUs and memory.
    let remote_backend = match loaded.scenario.host.backend {
        BackendKind::Libvirt => connect_remote(loaded.scenario.host.libvirt_uri.trim())?,
        _ => None,
    };
    let remote_label = remote_backend
        .as_ref()
        .and_then(|b| b.remote())
        .map(|r| r.remote.label());
    let facts = match &remote_backend {
        Some(b) => remote_facts(b)?,
        None => HostFacts::read(),
    };
    validate(&loaded, &facts)?;
    // The accelerator, judged for the user that will run QEMU, and the CPU models and PV
    // variants against it: located bad input (exit 2) before anything is claimed or booted.
    let virt = {
        let fs = match &remote_backend {
            Some(b) => b.host_fs(),
            None => Arc::new(crate::hostfs::LocalFs),
        };
        crate::scenario::validate::check_virt(
            &loaded,
            &crate::scenario::validate::virt_evidence(&loaded, fs.as_ref()),
        )?
    };
    for w in &virt.warnings {
        eprintln!("ocrig: warning: {w}");
    }
    if loaded.scenario.host.backend != BackendKind::Host {
        super::validate::check_kernels(&loaded)?;
    }
    // A resumed sweep keeps the shuffle seed it started with.
    let seed = previous
        .as_ref()
        .and_then(|p| p.seed())
        .unwrap_or_else(crate::sweep::order::fresh_seed);
    let plan = Plan::build(&loaded.scenario, &facts.allowed_cpus, seed)?;
    let mut cpus = match &remote_backend {
        Some(b) => Claim::Remote(claim_remote_cpus(b, &plan.host_cpus, args.wait_for_cpus)?),
        None => Claim::Local(claim_cpus(&plan.host_cpus, args.wait_for_cpus)?),
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

    let accel = virt.accel;
    eprintln!("ocrig: accel {} — {}", accel.accel.as_str(), accel.reason);
    let backend: Option<Arc<dyn Backend>> = match s.host.backend {
        BackendKind::Qemu => Some(Arc::new(QemuBackend::default())),
        BackendKind::Libvirt if remote_backend.is_some() => remote_backend.map(|b| b as Arc<dyn Backend>),
        BackendKind::Libvirt => {
            let uri = &s.host.libvirt_uri;
            reap_orphan_domains(uri);
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
        uploads_for(&plan, &payload)?
    } else {
        Vec::new()
    };
    let images = if backend.is_some() {
        images_for(&plan, s)?
    } else {
        BTreeMap::new()
    };
    let prep_s = t_prep.elapsed().as_secs_f64();

    let (results_dir, mut journal) = open_results(
        &args.results,
        previous.as_ref(),
        &plan,
        &loaded.text,
        |dir| cpus.note_results_dir(dir),
        || {
            let mut head = header(&plan, &loaded.sha256, backend_name, accel.accel);
            head.scenario_path = std::fs::canonicalize(&scenario_path).ok();
            head.hosts = remote_label.iter().cloned().collect();
            head.kernels = kernels_of(&images);
            head.kernel_identity = images
                .iter()
                .map(|(v, i)| (v.clone(), i.identity.clone()))
                .collect();
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

    let run_id = run_id();
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
pub(super) fn finish(
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

/// Takes the host CPUs for this sweep: refused (bad input, exit 2) while a live sweep holds
/// any of them, unless told to wait.
pub(super) fn claim_cpus(cpus: &[usize], wait: bool) -> anyhow::Result<CpuClaim> {
    CpuClaim::claim(cpus, wait, |busy| {
        eprintln!("ocrig: waiting (--wait-for-cpus): {busy}");
    })
    .map_err(|e| match e.downcast::<CpusBusy>() {
        Ok(busy) => BadInput(busy.to_string()).into(),
        Err(e) => e.context("claiming the host CPUs"),
    })
}

/// The CPUs a sweep holds: on this machine, or on the remote host its guests run on.
pub(super) enum Claim {
    Local(CpuClaim),
    /// Held for its lifetime: dropping it releases the remote locks.
    #[allow(dead_code)]
    Remote(crate::backend::remote::RemoteCpuClaim),
}

impl Claim {
    pub(super) fn note_results_dir(&mut self, dir: &Path) {
        if let Claim::Local(c) = self {
            c.note_results_dir(dir);
        }
    }
}

/// The backend for a remote libvirt URI, checked at preflight: every failure (unreachable,
/// host key not pinned or changed, login refused, libvirt too old) is bad input naming the host.
pub(super) fn connect_remote(uri: &str) -> anyhow::Result<Option<Arc<LibvirtBackend>>> {
    let Ok(Some(r)) = crate::backend::remote::parse(uri) else {
        return Ok(None);
    };
    let b = LibvirtBackend::connect(uri)
        .map_err(|e| BadInput(format!("preflight: remote host {} ({uri}): {e:#}", r.label())))?;
    Ok(Some(Arc::new(b)))
}

/// CPUs and available memory of a remote host, from libvirt's node info.
pub(super) fn remote_facts(b: &LibvirtBackend) -> anyhow::Result<HostFacts> {
    let label = b.remote().map_or_else(String::new, |r| r.remote.label());
    let (cpus, free_mib) = b
        .node_facts()
        .map_err(|e| BadInput(format!("preflight: remote host {label}: {e:#}")))?;
    Ok(HostFacts {
        allowed_cpus: (0..cpus as usize).collect(),
        mem_available_mib: free_mib,
        remote: Some(label),
    })
}

pub(super) fn claim_remote_cpus(
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

/// The payload and every input the plan's workloads read in the guest, read once.
pub(super) fn uploads_for(plan: &Plan, payload: &Path) -> anyhow::Result<Vec<Prepared>> {
    let mut commands: Vec<&str> = plan.workloads.iter().map(|w| w.command.as_str()).collect();
    if plan.background == crate::scenario::Background::Hog {
        commands.push("hog");
    }
    let dp = deploy::deploy_plan(payload, &commands, Path::exists).map_err(BadInput)?;
    for w in &dp.warnings {
        eprintln!("ocrig: warning: {w}");
    }
    deploy::prepare(&dp)
}

/// Enough free space for every scratch disk of the largest level.
pub(super) fn preflight_disk(dir: &Path, plan: &Plan) -> anyhow::Result<()> {
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
pub(super) fn reap_orphan_domains(uri: &str) {
    let Ok(names) = libvirt::list_owned(uri, "ocrig-") else {
        return;
    };
    for name in names.into_iter().filter(|n| owned::is_orphan_name(n)) {
        match libvirt::destroy_named(uri, &name) {
            Ok(()) => eprintln!("ocrig: removed domain {name} left by an earlier ocrig"),
            Err(e) => tracing::warn!("removing orphan domain {name}: {e:#}"),
        }
    }
}

pub(super) fn images_for(
    plan: &Plan,
    s: &crate::scenario::Scenario,
) -> anyhow::Result<BTreeMap<String, image::Image>> {
    let cache = image::cache_dir();
    let mut by_kernel: BTreeMap<String, image::Image> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for v in crate::scenario::expand::variants(s) {
        let kernel = crate::scenario::expand::guest_for(s, &v).kernel;
        let key = format!("{kernel:?}");
        if !by_kernel.contains_key(&key) {
            let source = kernel.source();
            let img = image::ensure(&ImageSpec { kernel: source }, &cache)
                .with_context(|| format!("preparing the guest image for variant {}", v.name))?;
            by_kernel.insert(key.clone(), img);
        }
        out.insert(v.name.clone(), by_kernel[&key].clone());
    }
    debug_assert_eq!(out.len(), plan.variants.len());
    Ok(out)
}

/// The results directory — the resumed one, or a new one — with its log and its journal; for a
/// new sweep the scenario as run and the sweep header (`head`) are written first. `claimed`
/// is told the directory's absolute path, so a CPU claim names who holds it.
pub(super) fn open_results(
    root: &Path,
    previous: Option<&resume::Previous>,
    plan: &Plan,
    scenario_text: &str,
    mut claimed: impl FnMut(&Path),
    head: impl FnOnce() -> SweepHeader,
) -> anyhow::Result<(PathBuf, JournalWriter)> {
    let results_dir = match previous {
        Some(p) => p.dir.clone(),
        None => create_results_dir(root, &plan.name)?,
    };
    claimed(&std::fs::canonicalize(&results_dir).unwrap_or_else(|_| results_dir.clone()));
    preflight_disk(&results_dir, plan)?;
    super::log_to_file(&results_dir.join(if previous.is_some() {
        "ocrig-resume.log"
    } else {
        "ocrig.log"
    }))?;
    let mut journal = JournalWriter::open(&results_dir)?;
    if previous.is_none() {
        std::fs::write(results_dir.join("scenario.yaml"), scenario_text)?;
        journal.append(&Entry::Sweep(Box::new(head())))?;
    }
    Ok((results_dir, journal))
}

/// Each variant's guest kernel release, for the sweep header.
pub(super) fn kernels_of(images: &BTreeMap<String, crate::image::Image>) -> BTreeMap<String, String> {
    images
        .iter()
        .map(|(v, i)| (v.clone(), i.kernel_release.clone()))
        .collect()
}

pub(super) fn create_results_dir(root: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let stamp = jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ").to_string();
    let mut dir = root.join(format!("{name}-{stamp}"));
    let mut n = 1;
    while dir.exists() {
        n += 1;
        dir = root.join(format!("{name}-{stamp}-{n}"));
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating results directory {}", dir.display()))?;
    Ok(dir)
}

pub(super) fn run_id() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{:x}{:04x}", t.as_secs() & 0xffffff, std::process::id() & 0xffff)
}

pub(super) fn header(plan: &Plan, sha: &str, backend: &str, accel: Accel) -> SweepHeader {
    SweepHeader {
        scenario: plan.name.clone(),
        scenario_sha256: sha.to_string(),
        baseline: plan.baseline.clone(),
        variants: plan.variants.clone(),
        levels: plan.levels.clone(),
        workloads: plan
            .workloads
            .iter()
            .map(|w| {
                (
                    w.id.clone(),
                    WorkloadInfo {
                        command: w.command.clone(),
                        metric: w.metric.clone(),
                        better: w.better,
                    },
                )
            })
            .collect(),
        backend: backend.to_string(),
        accel: accel.as_str().to_string(),
        host_cpus: plan.host_cpus.clone(),
        guest_vcpus: plan.vcpus,
        scenario_path: None,
        kernels: BTreeMap::new(),
        kernel_identity: BTreeMap::new(),
        schedule: Some(ScheduleInfo {
            guests: plan.schedule.guests,
            order: plan.schedule.order,
            seed: plan.schedule.seed,
            boots: plan.boot_infos(),
        }),
        started_at: jiff::Timestamp::now().to_string(),
        ocrig_version: env!("CARGO_PKG_VERSION").to_string(),
        guest_start: Some(plan.guest_start.as_str().to_string()),
        hosts: Vec::new(),
    }
}
