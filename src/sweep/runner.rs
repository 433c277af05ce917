//! Runs a plan: per group, boot every guest in parallel, wait until all are ready, pin their
//! vCPUs, deploy the payload, then for each run start the workload in every guest at one
//! instant (a go line to all gated payloads), collect, journal, and finally tear down.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::future::join_all;
use serde_json::{Value, json};

use super::journal::{Entry, JournalWriter, RunRecord};
use super::plan::{Cell, Group, Plan};
use crate::backend::{Backend, Guest, GuestSpec};
use crate::guest::ready::{tail_file, wait_for_marker};
use crate::guest::ssh::{Credentials, ExecOutput, GuestSsh};
use crate::host::Accel;
use crate::image::Image;
use crate::payload_bin;
use crate::scenario::Background;
use crate::telemetry;

/// Everything a sweep needs that is not in the plan.
pub struct SweepEnv {
    /// None for the host backend (no guests).
    pub backend: Option<Arc<dyn Backend>>,
    pub accel: Accel,
    /// Image per variant name.
    pub images: BTreeMap<String, Image>,
    pub payload: PathBuf,
    pub results_dir: PathBuf,
    /// Unique id of this sweep, part of every guest's name.
    pub run_id: String,
    pub progress: super::progress::Progress,
}

/// Wall time spent in each phase over the whole sweep, seconds.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct PhaseTotals {
    pub boot_s: f64,
    pub deploy_s: f64,
    pub run_s: f64,
    pub teardown_s: f64,
    pub groups: u32,
    pub runs_ok: u32,
    pub runs_failed: u32,
    /// Largest measured go-signal skew across guests, microseconds.
    pub max_start_skew_us: f64,
}

/// A booted, reachable guest.
struct Live {
    guest: Box<dyn Guest>,
    ssh: Arc<GuestSsh>,
    index: u32,
    /// Host thread ids of the vCPUs (empty when the backend could not name them).
    vcpu_tids: Vec<i32>,
}

pub async fn run(plan: &Plan, env: &SweepEnv, journal: &mut JournalWriter) -> anyhow::Result<PhaseTotals> {
    let mut totals = PhaseTotals::default();
    for group in &plan.groups {
        tracing::info!(level = group.level, variant = %group.variant, guests = group.guests, "starting group");
        env.progress.doing(format!(
            "{}x {}: booting {} guest(s)",
            group.level, group.variant, group.guests
        ));
        let result = if plan.is_host_backend() {
            run_host_group(plan, group, env, journal, &mut totals).await
        } else {
            run_group(plan, group, env, journal, &mut totals).await
        };
        if let Err(e) = result {
            tracing::error!(
                "group level {} variant {} failed: {e:#}",
                group.level,
                group.variant
            );
            env.progress.println(&format!(
                "level {}x variant {}: {e:#}",
                group.level, group.variant
            ));
            record_group_failure(group, &format!("{e:#}"), env, journal, &mut totals)?;
        }
        totals.groups += 1;
    }
    Ok(totals)
}

async fn run_group(
    plan: &Plan,
    group: &Group,
    env: &SweepEnv,
    journal: &mut JournalWriter,
    totals: &mut PhaseTotals,
) -> anyhow::Result<()> {
    let image = env
        .images
        .get(&group.variant)
        .context("no image for this variant")?;
    let group_dir = env
        .results_dir
        .join("guests")
        .join(format!("{}x-{}", group.level, group.variant));
    let mut boots = 0u32;
    let mut next_boot = || {
        boots += 1;
        group_dir.join(format!("boot{boots}"))
    };
    let (mut live, mut group_facts) = bring_up(plan, group, env, image, &next_boot(), totals).await?;
    // After a failed run the guests may be hung or dead: the next run gets fresh ones.
    let mut fresh_guests_needed = false;

    for cell in &group.cells {
        let mut samples = Vec::new();
        for run_no in 0..cell.warmup_runs + cell.max_runs {
            let (warmup, run) = match next_run(cell, run_no, &mut samples, &env.progress) {
                NextRun::Stop => break,
                NextRun::AlreadyDone => continue,
                NextRun::Run { warmup, run } => (warmup, run),
            };
            let mut attempt = 1;
            loop {
                if fresh_guests_needed {
                    teardown(std::mem::take(&mut live), totals).await;
                    (live, group_facts) = bring_up(plan, group, env, image, &next_boot(), totals).await?;
                }
                env.progress.doing(format!(
                    "{}x {} {} run {}{}{}",
                    group.level,
                    group.variant,
                    cell.workload.id,
                    run,
                    if warmup { " (warm-up)" } else { "" },
                    if attempt > 1 {
                        format!(" (attempt {attempt})")
                    } else {
                        String::new()
                    }
                ));
                let t_run = Instant::now();
                let (host_before, kvm_before) = (telemetry::host_stat(), telemetry::kvm_stats());
                let vcpus_before = vcpu_snapshots(&live);
                let outcome = run_once(plan, cell, &mut live, timeout_for(cell, plan)).await;
                let vcpus_after = vcpu_snapshots(&live);
                totals.run_s += t_run.elapsed().as_secs_f64();
                let around = host_telemetry(plan, &host_before, &kvm_before);
                let vcpu_sched: Vec<Value> = vcpus_before
                    .iter()
                    .zip(&vcpus_after)
                    .map(|(b, a)| json!(telemetry::vcpu::delta(b, a)))
                    .collect();
                let records = records_of(
                    group,
                    cell,
                    run,
                    warmup,
                    attempt,
                    outcome,
                    &live,
                    &group_facts,
                    &around,
                    &vcpu_sched,
                );
                let failed = records.iter().any(|r| !r.ok);
                for rec in records {
                    note_sample(&mut samples, &rec, &cell.workload.metric);
                    keep(rec, env, journal, totals)?;
                }
                fresh_guests_needed = failed;
                if !failed || attempt > plan.timeouts.retries {
                    break;
                }
                attempt += 1;
            }
            env.progress.run_done();
        }
    }
    teardown(live, totals).await;
    Ok(())
}

/// Boots, pins and deploys every guest of a group; on failure nothing is left running.
/// Each boot gets its own directory (`guests/<level>x-<variant>/boot<k>/`), so a retry's
/// console log never overwrites the one that shows why the previous guests failed.
async fn bring_up(
    plan: &Plan,
    group: &Group,
    env: &SweepEnv,
    image: &Image,
    workdir: &Path,
    totals: &mut PhaseTotals,
) -> anyhow::Result<(Vec<Live>, Value)> {
    std::fs::create_dir_all(workdir).with_context(|| format!("creating {}", workdir.display()))?;
    let specs = guest_specs(plan, group, env, image, workdir)?;
    let t_boot = Instant::now();
    let (live, boot_err) = boot_all(env, &specs, image, plan.timeouts.boot_s).await;
    let boot_s = t_boot.elapsed().as_secs_f64();
    totals.boot_s += boot_s;
    if let Some(e) = boot_err {
        teardown(live, totals).await;
        return Err(e);
    }
    let pinning = pin_all(&live, &plan.host_cpus, plan.vcpus).await;
    let t_deploy = Instant::now();
    let deployed = deploy_all(&live, &env.payload, plan.timeouts.deploy_s).await;
    let deploy_s = t_deploy.elapsed().as_secs_f64();
    totals.deploy_s += deploy_s;
    if let Err(e) = deployed {
        teardown(live, totals).await;
        return Err(e);
    }
    let kernel = kernel_facts(&live, Duration::from_secs(plan.timeouts.collect_s)).await;
    let start: Vec<Value> = live
        .iter()
        .map(|l| json!({ "guest": l.index, "start": l.guest.start_facts() }))
        .collect();
    let facts = json!({
        "pinning": pinning, "boot_s": boot_s, "deploy_s": deploy_s, "guest_kernel": kernel, "start": start,
    });
    Ok((live, facts))
}

/// What each guest's kernel actually saw: command line, clocksource, and its boot messages
/// about paravirt spinlocks, the clocksource and KVM.
async fn kernel_facts(live: &[Live], collect: Duration) -> Value {
    const CMD: &str = "cat /proc/cmdline; echo ---; \
        cat /sys/devices/system/clocksource/clocksource0/current_clocksource; echo ---; \
        dmesg | grep -iE 'spinlock|pvspin|clocksource|kvm|hypervisor' | tail -n 30";
    let probes = live.iter().map(|l| {
        let ssh = Arc::clone(&l.ssh);
        tokio::task::spawn_blocking(move || ssh.exec(CMD, None, collect))
    });
    let mut out = Vec::new();
    for r in join_all(probes).await {
        out.push(match r {
            Ok(Ok(o)) => {
                let mut parts = o.stdout.split("---\n");
                json!({
                    "cmdline": parts.next().unwrap_or("").trim(),
                    "clocksource": parts.next().unwrap_or("").trim(),
                    "dmesg": parts.next().unwrap_or("").lines().map(str::trim).collect::<Vec<_>>(),
                })
            }
            Ok(Err(e)) => json!({ "error": format!("{e:#}") }),
            Err(e) => json!({ "error": e.to_string() }),
        });
    }
    Value::Array(out)
}

/// What the next run slot of a cell is.
enum NextRun {
    /// The cell has enough measured runs (skipped slots are counted as done).
    Stop,
    /// A resumed sweep already has this run; its result joins the samples.
    AlreadyDone,
    Run {
        warmup: bool,
        run: u32,
    },
}

fn next_run(
    cell: &Cell,
    run_no: u32,
    samples: &mut Vec<f64>,
    progress: &super::progress::Progress,
) -> NextRun {
    let warmup = run_no < cell.warmup_runs;
    let run = if warmup { run_no } else { run_no - cell.warmup_runs };
    if !warmup && enough_runs(cell, run, samples) {
        progress.skip(u64::from(cell.max_runs - run));
        return NextRun::Stop;
    }
    if !warmup && let Some(&v) = cell.done.get(&run) {
        samples.push(v);
        progress.run_done();
        return NextRun::AlreadyDone;
    }
    NextRun::Run { warmup, run }
}

/// Journals one record and counts it; failures are also shown above the progress bar.
fn keep(
    rec: RunRecord,
    env: &SweepEnv,
    journal: &mut JournalWriter,
    totals: &mut PhaseTotals,
) -> anyhow::Result<()> {
    if rec.ok {
        totals.runs_ok += 1;
    } else {
        totals.runs_failed += 1;
        env.progress.println(&format!(
            "{}x {} {} run {} guest {} attempt {} failed: {}",
            rec.level,
            rec.variant,
            rec.workload,
            rec.run,
            rec.guest,
            rec.attempt,
            rec.error.as_deref().unwrap_or("?")
        ));
    }
    if let Some(skew) = rec.extra.get("start_skew_us").and_then(Value::as_f64) {
        totals.max_start_skew_us = totals.max_start_skew_us.max(skew);
    }
    journal.append(&Entry::Run(Box::new(rec)))
}

/// True when a cell has made its minimum runs and, with a CV target, its primary results
/// (guest 0's headline metric) already vary less than the target.
fn enough_runs(cell: &Cell, measured: u32, samples: &[f64]) -> bool {
    measured >= cell.max_runs
        || (measured >= cell.runs
            && cell
                .target_cv
                .is_none_or(|cv| crate::stats::summary::cv_reached(samples, cv)))
}

/// Keeps guest 0's headline metric of a successful measured run.
fn note_sample(samples: &mut Vec<f64>, rec: &RunRecord, metric: &str) {
    if rec.ok
        && !rec.warmup
        && rec.guest == 0
        && let Some(v) = rec.metrics.get(metric)
    {
        samples.push(*v);
    }
}

/// The console lines that explain a failure: any panic / Oops / BUG lines, then the last 30.
fn console_evidence(console: &Path) -> String {
    let text = std::fs::read(console)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let alarms: Vec<&str> = text
        .lines()
        .filter(|l| {
            [
                "Kernel panic",
                "Oops",
                "BUG:",
                "OCRIG-FAIL",
                "soft lockup",
                "hung_task",
            ]
            .iter()
            .any(|k| l.contains(k))
        })
        .take(10)
        .collect();
    let tail = tail_file(console, 30);
    if alarms.is_empty() {
        tail
    } else {
        format!("{}\n...\n{tail}", alarms.join("\n"))
    }
}

/// Every live guest's vCPU scheduler counters, in guest order.
fn vcpu_snapshots(live: &[Live]) -> Vec<telemetry::vcpu::VcpuSnapshot> {
    live.iter()
        .map(|l| telemetry::vcpu::VcpuSnapshot::take(&l.vcpu_tids))
        .collect()
}

/// Host-side telemetry of one run: the pinned CPUs' time split and KVM counters.
fn host_telemetry(plan: &Plan, host_before: &str, kvm_before: &Value) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    m.insert(
        "host_stat".into(),
        telemetry::host_cpus_delta_json(host_before, &telemetry::host_stat(), &plan.host_cpus),
    );
    m.insert(
        "kvm".into(),
        telemetry::kvm_delta(kvm_before, &telemetry::kvm_stats()),
    );
    m
}

/// The host backend: no guest; the payload runs here, restricted to the scenario's CPUs, with
/// its thread count already scaled by the level in the plan.
async fn run_host_group(
    plan: &Plan,
    group: &Group,
    env: &SweepEnv,
    journal: &mut JournalWriter,
    totals: &mut PhaseTotals,
) -> anyhow::Result<()> {
    for cell in &group.cells {
        let mut samples = Vec::new();
        for run_no in 0..cell.warmup_runs + cell.max_runs {
            let (warmup, run) = match next_run(cell, run_no, &mut samples, &env.progress) {
                NextRun::Stop => break,
                NextRun::AlreadyDone => continue,
                NextRun::Run { warmup, run } => (warmup, run),
            };
            env.progress.doing(format!(
                "{}x {} {} run {run} on the host",
                group.level, group.variant, cell.workload.id
            ));
            let t_run = Instant::now();
            let (host_before, kvm_before) = (telemetry::host_stat(), telemetry::kvm_stats());
            let result =
                run_on_host(&env.payload, &cell.argv, &plan.host_cpus, timeout_for(cell, plan)).await;
            totals.run_s += t_run.elapsed().as_secs_f64();
            let around = host_telemetry(plan, &host_before, &kvm_before);
            let outcome = RunOutcome {
                per_guest: vec![Some(result)],
                start_skew_us: 0.0,
            };
            let facts = json!({ "host_cpus": plan.host_cpus });
            for rec in records_of(group, cell, run, warmup, 1, outcome, &[], &facts, &around, &[]) {
                note_sample(&mut samples, &rec, &cell.workload.metric);
                keep(rec, env, journal, totals)?;
            }
            env.progress.run_done();
        }
    }
    Ok(())
}

async fn run_on_host(
    payload: &Path,
    argv: &[String],
    cpus: &[usize],
    timeout: Duration,
) -> anyhow::Result<GuestRun> {
    let stat_before = telemetry::host_stat();
    let mut cmd = tokio::process::Command::new(payload);
    cmd.args(argv).kill_on_drop(true);
    let cpus = cpus.to_vec();
    // SAFETY: the closure only calls async-signal-safe sched_setaffinity on a stack cpu_set_t.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &c in &cpus {
                libc::CPU_SET(c, &mut set);
            }
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let t = Instant::now();
    let out = tokio::time::timeout(timeout, cmd.output())
        .await
        .map_err(|_| anyhow::anyhow!("the payload did not finish within {timeout:?}"))?
        .with_context(|| format!("running {}", payload.display()))?;
    Ok(GuestRun {
        output: ExecOutput {
            status: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        },
        argv: argv.to_vec(),
        run_s: t.elapsed().as_secs_f64(),
        stat_before,
        stat_after: telemetry::host_stat(),
    })
}

fn guest_specs(
    plan: &Plan,
    group: &Group,
    env: &SweepEnv,
    image: &Image,
    workdir: &Path,
) -> anyhow::Result<Vec<GuestSpec>> {
    let cpu = group.guest.cpu.clone().unwrap_or_else(|| match env.accel {
        Accel::Tcg => "max".into(),
        Accel::Kvm => "host".into(),
    });
    // panic=-1 with QEMU's -no-reboot turns a guest kernel panic into a QEMU exit we can see.
    let cmdline = format!("console=ttyS0 panic=-1 {}", group.guest.cmdline)
        .trim()
        .to_string();
    (0..group.guests)
        .map(|i| {
            let name = format!("ocrig-{}-{}", env.run_id, i);
            let scratch_disk = if plan.scratch_disk_mib > 0 {
                Some(make_scratch_disk(workdir, &name, plan.scratch_disk_mib)?)
            } else {
                None
            };
            Ok(GuestSpec {
                name,
                vcpus: plan.vcpus,
                memory_mib: plan.memory_mib,
                kernel: image.kernel.clone(),
                initrd: image.initrd.clone(),
                cmdline: cmdline.clone(),
                accel: env.accel,
                cpu: cpu.clone(),
                scratch_disk,
                workdir: workdir.to_path_buf(),
                // issue 12: PVH kernel of the image, boot or clone.
                fast_kernel: image.fast_kernel(),
                start: plan.guest_start,
            })
        })
        .collect()
}

fn make_scratch_disk(workdir: &Path, name: &str, mib: u32) -> anyhow::Result<PathBuf> {
    let path = workdir.join(format!("{name}.scratch.img"));
    let f = std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    f.set_len(mib as u64 * 1024 * 1024)?;
    let out = std::process::Command::new("mkfs.ext4")
        .args(["-F", "-q"])
        .arg(&path)
        .output()
        .context("running mkfs.ext4 for the scratch disk")?;
    anyhow::ensure!(
        out.status.success(),
        "mkfs.ext4 {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(path)
}

/// Boots every guest in parallel and waits until each answers SSH. Returns the guests that
/// came up, and the first error if any did not (the caller tears the rest down).
async fn boot_all(
    env: &SweepEnv,
    specs: &[GuestSpec],
    image: &Image,
    boot_s: u64,
) -> (Vec<Live>, Option<anyhow::Error>) {
    let deadline = Instant::now() + Duration::from_secs(boot_s);
    let creds = Credentials {
        user: "root".into(),
        private_key: image.client_key.clone(),
        host_key_blob: image.host_key_blob.clone(),
    };
    let boots = specs.iter().enumerate().map(|(i, spec)| {
        let creds = creds.clone();
        async move {
            let backend = env.backend.as_ref().context("this backend boots no guests")?;
            let mut guest = backend.boot(spec).await?;
            let console = guest.console_log();
            let addr = guest.ssh_addr();
            let alive = guest.liveness();
            // The guest stays here, not in the blocking thread: if this future is dropped (a
            // signal), dropping the guest kills it at once.
            let name = spec.name.clone();
            let t0 = Instant::now();
            let ssh = tokio::task::spawn_blocking(move || {
                wait_for_marker(&console, deadline, alive)?;
                tracing::debug!("{name}: ready marker after {:.2} s", t0.elapsed().as_secs_f64());
                let s = GuestSsh::connect_until(addr, &creds, deadline)?;
                tracing::debug!("{name}: SSH login after {:.2} s", t0.elapsed().as_secs_f64());
                Ok::<_, anyhow::Error>(s)
            })
            .await?;
            let ssh = match ssh {
                Ok(ssh) => post_ready(guest.as_ref(), ssh, deadline).await,
                Err(e) => Err(e),
            };
            match ssh {
                Ok(ssh) => {
                    let vcpu_tids = guest.vcpu_threads().await.unwrap_or_else(|e| {
                        tracing::warn!("vCPU thread ids of {}: {e:#}", guest.name());
                        Vec::new()
                    });
                    Ok(Live {
                        guest,
                        ssh: Arc::new(ssh),
                        index: i as u32,
                        vcpu_tids,
                    })
                }
                Err(e) => {
                    let name = guest.name().to_string();
                    let _ = guest.shutdown(Duration::from_secs(2)).await;
                    Err(e.context(format!("guest {name} did not become ready")))
                }
            }
        }
    });
    let results = join_all(boots).await;
    let mut live = Vec::new();
    let mut first_err = None;
    for r in results {
        match r {
            Ok(l) => live.push(l),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    live.sort_by_key(|l| l.index);
    (live, first_err)
}

/// Runs the backend's post-ready command (if any) in a guest that just became reachable.
async fn post_ready(guest: &dyn Guest, ssh: GuestSsh, deadline: Instant) -> anyhow::Result<GuestSsh> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    let Some(cmd) = guest.post_ready_command(now) else {
        return Ok(ssh);
    };
    let name = guest.name().to_string();
    let budget = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_secs(5));
    tokio::task::spawn_blocking(move || {
        let out = ssh.exec(&cmd, None, budget)?;
        anyhow::ensure!(
            out.ok(),
            "post-ready command in {name} failed with status {}: {}",
            out.status,
            out.stderr.trim()
        );
        Ok(ssh)
    })
    .await?
}

/// Pins guest g's vCPU i to host CPU `cpus[(g·vcpus + i) mod n]`, spreading guests evenly.
async fn pin_all(live: &[Live], cpus: &[usize], vcpus: u32) -> Value {
    let mut all = Vec::new();
    for l in live {
        let offset = (l.index * vcpus) as usize % cpus.len();
        let rotated: Vec<usize> = cpus
            .iter()
            .cycle()
            .skip(offset)
            .take(cpus.len())
            .copied()
            .collect();
        match l.guest.pin_vcpus(&rotated).await {
            Ok(map) => all.push(json!({ "guest": l.index, "vcpu_to_cpu": map })),
            Err(e) => all.push(json!({ "guest": l.index, "error": format!("{e:#}") })),
        }
    }
    Value::Array(all)
}

async fn deploy_all(live: &[Live], payload: &Path, deploy_s: u64) -> anyhow::Result<()> {
    let data =
        Arc::new(std::fs::read(payload).with_context(|| format!("reading payload {}", payload.display()))?);
    let uploads = live.iter().map(|l| {
        let ssh = Arc::clone(&l.ssh);
        let data = Arc::clone(&data);
        let name = l.guest.name().to_string();
        tokio::task::spawn_blocking(move || {
            ssh.upload(
                &data,
                payload_bin::GUEST_PATH,
                "755",
                Duration::from_secs(deploy_s),
            )
            .with_context(|| format!("deploying the payload to {name}"))
        })
    });
    for r in join_all(uploads).await {
        r??;
    }
    Ok(())
}

/// What one run produced in each guest.
struct RunOutcome {
    /// Per guest index: the command's output, or why it failed; None for idle guests.
    per_guest: Vec<Option<anyhow::Result<GuestRun>>>,
    start_skew_us: f64,
}

struct GuestRun {
    output: ExecOutput,
    argv: Vec<String>,
    run_s: f64,
    stat_before: String,
    stat_after: String,
}

fn argv_for(guest: u32, cell: &Cell, background: Background) -> Option<Vec<String>> {
    match (guest, background) {
        (0, _) | (_, Background::Same) => Some(cell.argv.clone()),
        (_, Background::Idle) => None,
        // The hog burns for as long as the measured workload is expected to run.
        (_, Background::Hog) => {
            let secs = workload_seconds(&cell.argv).unwrap_or(30.0);
            Some(vec!["hog".into(), "--seconds".into(), format!("{secs}")])
        }
    }
}

fn shell_quote(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=,:".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

async fn run_once(plan: &Plan, cell: &Cell, live: &mut [Live], run_timeout: Duration) -> RunOutcome {
    let collect = Duration::from_secs(plan.timeouts.collect_s);
    // 1. Start the payload gated in every guest that runs something; each reports ready.
    let starts = live.iter().map(|l| {
        let argv = argv_for(l.index, cell, plan.background);
        let ssh = Arc::clone(&l.ssh);
        tokio::task::spawn_blocking(move || -> Option<anyhow::Result<_>> {
            let argv = argv?;
            Some((|| {
                let stat_before = ssh.exec("cat /proc/stat", None, collect)?.stdout;
                let cmd = format!("{} --go-stdin {}", payload_bin::GUEST_PATH, shell_quote(&argv));
                let gated = ssh.start_gated(
                    &cmd,
                    "ocrig-payload: ready",
                    run_timeout + Duration::from_secs(30),
                )?;
                Ok((gated, argv, stat_before))
            })())
        })
    });
    let mut started: Vec<Option<anyhow::Result<_>>> = join_all(starts)
        .await
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| Some(Err(e.into()))))
        .collect();

    // 2. Go: one thread writes the go line to every gated payload back to back.
    let mut gated: Vec<(usize, crate::guest::ssh::GatedCommand, Vec<String>, String)> = Vec::new();
    for (i, s) in started.iter_mut().enumerate() {
        if let Some(Ok(_)) = s {
            let Some(Ok((g, argv, stat))) = s.take() else {
                unreachable!()
            };
            gated.push((i, g, argv, stat));
        }
    }
    let (gated, go_times) = tokio::task::spawn_blocking(move || {
        let mut times = Vec::new();
        let mut out = Vec::new();
        for (i, mut g, argv, stat) in gated {
            let t = g.go();
            times.push(t.as_ref().ok().copied());
            out.push((i, g, argv, stat, t));
        }
        (out, times)
    })
    .await
    .expect("go thread panicked");
    let valid: Vec<Instant> = go_times.into_iter().flatten().collect();
    let start_skew_us = match (valid.iter().min(), valid.iter().max()) {
        (Some(a), Some(b)) => b.duration_since(*a).as_secs_f64() * 1e6,
        _ => 0.0,
    };

    // 3. Collect every guest's output in parallel.
    let waits = gated.into_iter().map(|(i, g, argv, stat_before, go)| {
        let ssh = Arc::clone(&live[i].ssh);
        let collector = tokio::task::spawn_blocking(move || -> (usize, anyhow::Result<GuestRun>) {
            let r = (|| {
                let go_at = go?;
                let output = g
                    .wait()
                    .with_context(|| format!("{:.1} s after go", go_at.elapsed().as_secs_f64()))?;
                let run_s = go_at.elapsed().as_secs_f64();
                let stat_after = ssh.exec("cat /proc/stat", None, collect)?.stdout;
                Ok(GuestRun {
                    output,
                    argv,
                    run_s,
                    stat_before,
                    stat_after,
                })
            })();
            (i, r)
        });
        // A wall-clock deadline from go: a stopped or hung guest cannot hold the sweep longer
        // than the run timeout (the blocked reader ends when the guest is torn down).
        async move {
            match tokio::time::timeout(run_timeout, collector).await {
                Ok(Ok(done)) => done,
                Ok(Err(e)) => (i, Err(anyhow::anyhow!("the collector thread failed: {e}"))),
                Err(_) => (
                    i,
                    Err(anyhow::anyhow!(
                        "no result within the run deadline of {:.0} s (timeouts.run_s): the guest is hung or too slow",
                        run_timeout.as_secs_f64()
                    )),
                ),
            }
        }
    });
    let mut per_guest: Vec<Option<anyhow::Result<GuestRun>>> = started
        .into_iter()
        .map(|s| s.map(|r| r.map(|_| unreachable!("taken above"))))
        .collect();
    for (i, res) in join_all(waits).await {
        per_guest[i] = Some(res);
    }
    RunOutcome {
        per_guest,
        start_skew_us,
    }
}

fn timeout_for(cell: &Cell, plan: &Plan) -> Duration {
    run_timeout(&cell.argv, plan.timeouts.run_s)
}

/// A run's deadline: the scenario's `timeouts.run_s`, else twice the workload's own duration
/// (`--duration-ms` or `--seconds`) plus a minute, else ten minutes less a minute of slack.
fn run_timeout(argv: &[String], configured_s: Option<u64>) -> Duration {
    if let Some(s) = configured_s {
        return Duration::from_secs(s);
    }
    let secs = workload_seconds(argv).unwrap_or(540.0);
    Duration::from_secs_f64(secs * 2.0 + 60.0)
}

/// How long a workload says it runs (`--duration-ms` or `--seconds`), if it says.
fn workload_seconds(argv: &[String]) -> Option<f64> {
    let value_of = |flag: &str| {
        argv.iter()
            .position(|a| a == flag)
            .and_then(|i| argv.get(i + 1))
            .and_then(|v| v.parse::<f64>().ok())
    };
    value_of("--duration-ms")
        .map(|ms| ms / 1000.0)
        .or_else(|| value_of("--seconds"))
}

#[allow(clippy::too_many_arguments)]
fn records_of(
    group: &Group,
    cell: &Cell,
    run: u32,
    warmup: bool,
    attempt: u32,
    outcome: RunOutcome,
    live: &[Live],
    group_facts: &Value,
    around: &serde_json::Map<String, Value>,
    vcpu_sched: &[Value],
) -> Vec<RunRecord> {
    let now = jiff::Timestamp::now().to_string();
    outcome
        .per_guest
        .into_iter()
        .enumerate()
        .filter_map(|(i, r)| r.map(|r| (i, r)))
        .map(|(i, r)| {
            let mut rec = RunRecord {
                variant: group.variant.clone(),
                level: group.level,
                workload: cell.workload.id.clone(),
                run,
                warmup,
                guest: i as u32,
                guests: group.guests,
                ok: false,
                error: None,
                attempt,
                metrics: BTreeMap::new(),
                payload: None,
                argv: cell.argv.clone(),
                timings: BTreeMap::new(),
                extra: serde_json::Map::new(),
                finished_at: now.clone(),
            };
            rec.extra
                .insert("start_skew_us".into(), json!(outcome.start_skew_us));
            rec.extra.insert("group".into(), group_facts.clone());
            rec.extra.extend(around.clone());
            if let Some(v) = vcpu_sched.get(i) {
                rec.extra.insert("vcpu_sched".into(), v.clone());
            }
            match r.and_then(|gr| parse_run(gr, &cell.workload.metric, &mut rec)) {
                Ok(()) => rec.ok = true,
                Err(e) => {
                    rec.error = Some(format!("{e:#}"));
                    if let Some(l) = live.get(i) {
                        rec.extra.insert(
                            "console_tail".into(),
                            json!(console_evidence(&l.guest.console_log())),
                        );
                    }
                }
            }
            rec
        })
        .collect()
}

fn parse_run(gr: GuestRun, metric: &str, rec: &mut RunRecord) -> anyhow::Result<()> {
    // Background guests may run another command (a CPU hog) without the headline metric.
    let expect_metric = gr.argv == rec.argv;
    rec.argv = gr.argv;
    rec.timings.insert("run_s".into(), gr.run_s);
    rec.extra.insert(
        "guest_stat".into(),
        crate::telemetry::stat_delta_json(&gr.stat_before, &gr.stat_after),
    );
    anyhow::ensure!(
        gr.output.ok(),
        "payload exited with status {}: {}",
        gr.output.status,
        gr.output.stderr.trim()
    );
    let report: ocrig_payload::report::Report = serde_json::from_str(gr.output.stdout.trim())
        .with_context(|| format!("payload printed no valid report: {}", gr.output.stdout.trim()))?;
    rec.metrics = report.metrics.clone();
    rec.payload = Some(report);
    if expect_metric && !rec.metrics.contains_key(metric) {
        anyhow::bail!(
            "metric '{metric}' is not in the payload's report (it has: {})",
            rec.metrics.keys().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    Ok(())
}

fn record_group_failure(
    group: &Group,
    error: &str,
    env: &SweepEnv,
    journal: &mut JournalWriter,
    totals: &mut PhaseTotals,
) -> anyhow::Result<()> {
    let now = jiff::Timestamp::now().to_string();
    for cell in &group.cells {
        for run_no in 0..cell.warmup_runs + cell.runs {
            let warmup = run_no < cell.warmup_runs;
            let rec = RunRecord {
                variant: group.variant.clone(),
                level: group.level,
                workload: cell.workload.id.clone(),
                run: if warmup { run_no } else { run_no - cell.warmup_runs },
                warmup,
                guest: 0,
                guests: group.guests,
                ok: false,
                error: Some(error.to_string()),
                attempt: 1,
                metrics: BTreeMap::new(),
                payload: None,
                argv: cell.argv.clone(),
                timings: BTreeMap::new(),
                extra: serde_json::Map::new(),
                finished_at: now.clone(),
            };
            totals.runs_failed += 1;
            journal.append(&Entry::Run(Box::new(rec)))?;
            env.progress.run_done();
        }
    }
    Ok(())
}

async fn teardown(live: Vec<Live>, totals: &mut PhaseTotals) {
    let t = Instant::now();
    let stops = live.into_iter().map(|mut l| async move {
        if let Err(e) = l.guest.shutdown(Duration::from_secs(5)).await {
            tracing::warn!("stopping {}: {e:#}", l.guest.name());
        }
    });
    join_all(stops).await;
    totals.teardown_s += t.elapsed().as_secs_f64();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::expand::WorkloadInstance;
    use crate::sweep::journal::Better;

    fn cell(runs: u32, max_runs: u32, target_cv: Option<f64>) -> Cell {
        Cell {
            workload: WorkloadInstance {
                id: "w".into(),
                source: 0,
                command: "lock".into(),
                args: BTreeMap::new(),
                metric: "m".into(),
                better: Better::Higher,
            },
            argv: vec!["lock".into(), "--duration-ms".into(), "2000".into()],
            warmup_runs: 0,
            runs,
            max_runs,
            target_cv,
            done: Default::default(),
        }
    }

    #[test]
    fn fixed_run_counts_stop_at_the_count() {
        let c = cell(3, 3, None);
        assert!(!enough_runs(&c, 2, &[1.0, 1.0]));
        assert!(enough_runs(&c, 3, &[1.0, 1.0, 1.0]));
    }

    #[test]
    fn dynamic_run_counts_stop_when_the_cv_is_reached_or_at_max() {
        let c = cell(2, 6, Some(0.05));
        assert!(!enough_runs(&c, 1, &[100.0]));
        assert!(enough_runs(&c, 2, &[100.0, 101.0]));
        assert!(!enough_runs(&c, 2, &[100.0, 150.0]));
        assert!(enough_runs(&c, 6, &[100.0, 150.0, 90.0, 160.0, 80.0, 170.0]));
    }

    #[test]
    fn run_timeout_follows_the_workload_duration() {
        let argv = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            run_timeout(&argv(&["lock", "--duration-ms", "2000"]), None),
            Duration::from_secs(64)
        );
        assert_eq!(
            run_timeout(&argv(&["ebizzy", "--seconds", "7"]), None),
            Duration::from_secs(74)
        );
        assert_eq!(
            run_timeout(&argv(&["hackbench"]), None),
            Duration::from_secs(1140)
        );
        assert_eq!(run_timeout(&argv(&["lock"]), Some(5)), Duration::from_secs(5));
    }

    #[test]
    fn arguments_are_quoted_for_the_guest_shell() {
        let argv: Vec<String> = ["lock", "--algo", "tas", "--note", "a b'c"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(shell_quote(&argv), "lock --algo tas --note 'a b'\\''c'");
    }
}
