//! Real guests as workers: boot every guest of a boot group in parallel through a backend
//! (QEMU or libvirt), wait until each answers SSH, run the backend's post-ready command, pin
//! the vCPUs, deploy the payload and its inputs; runs go through the gated barrier; shutting
//! down stops every guest.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::future::join_all;
use serde_json::{Value, json};

use super::barrier::{self, Limits, Participant};
use super::deploy::Prepared;
use super::{BroughtUp, Executor, GroupSpec, RunOutcome, RunRequest};
use crate::backend::{Backend, Guest, GuestSpec};
use crate::guest::ready::{tail_file, wait_for_marker};
use crate::guest::ssh::{Credentials, GuestSsh};
use crate::host::Accel;
use crate::image::Image;
use crate::scenario::Timeouts;
use crate::telemetry::sched_trace::Tracer;
use crate::vocabulary::StartMethod;

/// What the VM executor needs besides the boot group.
pub struct VmConfig {
    pub backend: Arc<dyn Backend>,
    pub accel: Accel,
    /// Image per variant name.
    pub images: BTreeMap<String, Image>,
    /// The payload and the workloads' inputs, read once.
    pub uploads: Vec<Prepared>,
    /// Guests go under `<guests_dir>/<group label>/boot<k>/`.
    pub guests_dir: PathBuf,
    /// Unique id of this sweep, part of every guest's name (`ocrig-<run id>-<n>`).
    pub run_id: String,
    pub host_cpus: Vec<usize>,
    pub vcpus: u32,
    pub memory_mib: u32,
    pub scratch_disk_mib: u32,
    /// Cold boot or snapshot clone (the backend falls back to a boot, saying why).
    pub guest_start: StartMethod,
    pub timeouts: Timeouts,
    /// Record the host's vCPU timeline of each run (`host.timeline`).
    pub timeline: bool,
}

/// A booted, reachable guest.
struct Live {
    guest: Box<dyn Guest>,
    ssh: Arc<GuestSsh>,
    index: u32,
    /// Host thread ids of the vCPUs (empty when the backend could not name them).
    vcpu_tids: Vec<i32>,
}

pub struct VmExecutor {
    cfg: VmConfig,
    live: Vec<Live>,
    /// Where the live guests' vCPUs run (set at bring-up).
    placed: Option<Placement>,
    /// Bring-ups per group label, for per-boot directories.
    boots: BTreeMap<String, u32>,
    /// The live guests' directory and the runs made on them, to name each run's timeline.
    workdir: Option<(PathBuf, u32)>,
    /// The live guests' host trace instance (made at bring-up, when runs record a timeline),
    /// or why their host cannot be traced.
    tracer: Option<Result<Tracer, String>>,
}

impl VmExecutor {
    pub fn new(cfg: VmConfig) -> Self {
        Self {
            cfg,
            live: Vec::new(),
            placed: None,
            boots: BTreeMap::new(),
            workdir: None,
            tracer: None,
        }
    }

    /// Each boot gets its own directory (`<label>/boot<k>/`), so a retry's console log never
    /// overwrites the one that shows why the previous guests failed.
    fn next_workdir(&mut self, group: &GroupSpec) -> PathBuf {
        let label = group.label.clone();
        let k = self.boots.entry(label.clone()).or_default();
        *k += 1;
        self.cfg.guests_dir.join(label).join(format!("boot{k}"))
    }

    /// The rotation of the live guests' vCPUs, when their placement rotates and every vCPU's
    /// host thread is known.
    fn rotation(&self) -> Option<Rotation> {
        self.placed.as_ref().filter(|p| p.rotating)?;
        let mut tids = Vec::new();
        for l in &self.live {
            if l.vcpu_tids.len() != self.cfg.vcpus as usize {
                tracing::warn!(
                    "{}: vCPU threads unknown, so its vCPUs share the CPUs unrotated",
                    l.guest.name()
                );
                return None;
            }
            tids.extend(&l.vcpu_tids);
        }
        Some(Rotation {
            tids,
            cpus: self.cfg.host_cpus.clone(),
        })
    }

    /// The pins as they hold: a failed pin, or (on this machine) a vCPU thread whose affinity
    /// reads back other than planned, is an error; else the sets read back (`pinning` as
    /// `pin_all` journaled it where the threads cannot be read: another host, or threads the
    /// backend could not name).
    fn pins_held(&self, pinning: Value, placed: &Placement, local: bool) -> Result<Value, String> {
        let failed = super::pins::failed(&pinning);
        if !failed.is_empty() {
            return Err(format!("pinning vCPUs failed: {}", failed.join("; ")));
        }
        let named = self
            .live
            .iter()
            .all(|l| l.vcpu_tids.len() == self.cfg.vcpus as usize);
        if !local || !named {
            return Ok(pinning);
        }
        let guests: Vec<super::pins::GuestPins<'_>> = self
            .live
            .iter()
            .map(|l| super::pins::GuestPins {
                guest: l.index,
                planned: placed.cpus.get(l.index as usize).map_or(&[], Vec::as_slice),
                tids: &l.vcpu_tids,
            })
            .collect();
        super::pins::verify(&guests, super::pins::affinity_of)
    }

    fn collect_limit(&self) -> Duration {
        Duration::from_secs(self.cfg.timeouts.collect_s)
    }
}

impl Executor for VmExecutor {
    async fn bring_up(&mut self, group: &GroupSpec) -> anyhow::Result<BroughtUp> {
        self.shut_down().await;
        let workdir = self.next_workdir(group);
        self.workdir = Some((workdir.clone(), 0));
        std::fs::create_dir_all(&workdir).with_context(|| format!("creating {}", workdir.display()))?;
        let image = self
            .cfg
            .images
            .get(&group.variants[0])
            .context("no image for this boot group's variant")?
            .clone();
        let specs = guest_specs(&self.cfg, group, &image, &workdir)?;
        let t_boot = Instant::now();
        let (live, boot_err) = boot_all(&self.cfg, &specs, &image).await;
        let boot_s = t_boot.elapsed().as_secs_f64();
        self.live = live;
        if let Some(e) = boot_err {
            self.shut_down().await;
            return Err(e);
        }
        let local = self.cfg.backend.host_fs().is_local();
        let placed = placement(group.guests, self.cfg.vcpus, &self.cfg.host_cpus, local);
        let placed = rotation_checked(
            placed,
            group.guests,
            self.cfg.vcpus,
            &self.cfg.host_cpus,
            &self.live.iter().map(|l| l.vcpu_tids.clone()).collect::<Vec<_>>(),
            crate::backend::pin_thread,
        );
        let pinning = pin_all(&self.live, &placed).await;
        let pinning = match self.pins_held(pinning, &placed, local) {
            Ok(p) => p,
            Err(e) => {
                self.shut_down().await;
                anyhow::bail!("{e}");
            }
        };
        let emulator = if local {
            let rest = crate::host::other_cpus(&self.cfg.host_cpus).cpus;
            emulator_threads_to(&self.live, &rest, crate::backend::pin_thread)
        } else {
            json!("left where the remote host's libvirt starts them")
        };
        let t_deploy = Instant::now();
        let deployed = deploy_all(&self.live, &self.cfg.uploads, self.cfg.timeouts.deploy_s).await;
        let deploy_s = t_deploy.elapsed().as_secs_f64();
        if let Err(e) = deployed {
            self.shut_down().await;
            return Err(e);
        }
        if self.cfg.timeline && timeline_on() {
            // Set up once for the guest set (~60 ms here), so runs only switch it on and off.
            let (fs, cpus) = (self.cfg.backend.host_fs(), self.cfg.host_cpus.clone());
            self.tracer = Some(
                tokio::task::spawn_blocking(move || Tracer::new(&fs, &cpus))
                    .await
                    .unwrap_or_else(|e| Err(format!("setting up the trace: {e}"))),
            );
        }
        let kernel = kernel_facts(&self.live, self.collect_limit()).await;
        let memory = if local {
            guest_memory(&self.live)
        } else {
            json!("not measured: the guests' QEMU processes are on another host")
        };
        let start: Vec<Value> = self
            .live
            .iter()
            .map(|l| json!({ "guest": l.index, "start": l.guest.start_facts() }))
            .collect();
        let facts = json!({
            "pinning": pinning,
            "placement": {
                "pinned": placed.pinned,
                "rotating": placed.rotating,
                "phase_ms": placed.rotating.then_some(ROTATION_PHASE.as_millis() as u64),
                "why": placed.why,
            },
            "boot_s": boot_s, "deploy_s": deploy_s, "guest_kernel": kernel, "start": start,
            "guest_memory": memory, "emulator_threads": emulator,
        });
        self.placed = Some(placed);
        Ok(BroughtUp {
            facts,
            boot_s,
            deploy_s,
        })
    }

    async fn run(&mut self, request: &RunRequest) -> RunOutcome {
        let participants: Vec<Participant> = self
            .live
            .iter()
            .map(|l| Participant {
                index: l.index as usize,
                guest: l.guest.as_ref(),
                ssh: Arc::clone(&l.ssh),
                argv: request.argv.get(l.index as usize).cloned().flatten(),
                vcpu_tids: l.vcpu_tids.clone(),
            })
            .collect();
        let limits = Limits {
            run: request.timeout,
            collect: self.collect_limit(),
        };
        let fs = self.cfg.backend.host_fs();
        let timeline = self
            .workdir
            .as_mut()
            .filter(|_| self.cfg.timeline && timeline_on())
            .map(|(dir, runs)| {
                *runs += 1;
                dir.join(format!("timeline-run{runs}.json.gz"))
            });
        let host = barrier::Host {
            fs: &fs,
            cpus: &self.cfg.host_cpus,
            accel: self.cfg.accel,
            timeline: timeline.as_deref().map(|file| barrier::Timeline {
                tracer: match &self.tracer {
                    Some(Ok(t)) => Ok(t),
                    Some(Err(why)) => Err(why.as_str()),
                    None => Err("no trace instance was made for these guests"),
                },
                file,
            }),
        };
        // The host's foreign load over the attempt (processes other than this sweep's own:
        // its guests' QEMUs, every thread, and ocrig), on this machine only: what judges a
        // run disturbed (`host.max_other_load`).
        let load_mark = if fs.is_local() {
            Some(crate::telemetry::host_load::mark(&crate::backend::live::pids()))
        } else {
            None
        };
        let run = barrier::gated_run(&participants, request.argv.len(), host, limits);
        let rotation = self.rotation();
        let mut outcome = match rotation {
            // The rotation runs for exactly as long as the run does.
            Some(r) => tokio::select! {
                o = run => o,
                _ = r.run() => unreachable!("a rotation never ends"),
            },
            None => run.await,
        };
        if let Some(mark) = load_mark {
            use crate::telemetry::host_load;
            match mark.and_then(|m| host_load::read(&m, &self.cfg.host_cpus, 3)) {
                Ok(r) => {
                    let busiest: Vec<serde_json::Value> = r
                        .busiest
                        .iter()
                        .map(|(pid, comm, s)| serde_json::json!({"pid": pid, "comm": comm, "cpu_s": s}))
                        .collect();
                    outcome
                        .host
                        .insert(host_load::KEY.into(), serde_json::json!(r.foreign));
                    outcome
                        .host
                        .insert(host_load::NAMED_KEY.into(), serde_json::json!(r.named));
                    outcome
                        .host
                        .insert(host_load::BUSIEST_KEY.into(), serde_json::json!(busiest));
                }
                Err(e) => {
                    outcome
                        .host
                        .insert(host_load::KEY.into(), serde_json::json!({ "unavailable": e }));
                }
            }
        } else {
            outcome.host.insert(
                crate::telemetry::host_load::KEY.into(),
                serde_json::json!({ "unavailable": crate::telemetry::host_load::REMOTE }),
            );
        }
        for l in &self.live {
            if let Some(Some(w)) = outcome.workers.get_mut(l.index as usize)
                && w.result.is_err()
            {
                w.console_tail = Some(console_evidence(&l.guest.console_log()));
            }
        }
        outcome
    }

    async fn wait_quiet(&mut self, bound: f64, limit: Duration) -> super::QuietWait {
        use crate::telemetry::host_load;
        let t0 = Instant::now();
        let done = |quiet, last_load, note: Option<String>| super::QuietWait {
            waited_s: t0.elapsed().as_secs_f64(),
            quiet,
            last_load,
            note,
        };
        if !self.cfg.backend.host_fs().is_local() {
            return done(
                true,
                None,
                Some("a remote host's load is not sampled between runs".into()),
            );
        }
        let mut last = None;
        loop {
            let mark = match host_load::mark(&crate::backend::live::pids()) {
                Ok(m) => m,
                Err(e) => {
                    return done(
                        true,
                        last,
                        Some(format!("the host's load could not be read: {e}")),
                    );
                }
            };
            tokio::time::sleep(Duration::from_secs(1)).await;
            match host_load::foreign_since(&mark, &self.cfg.host_cpus) {
                Ok(load) if load <= bound => return done(true, Some(load), None),
                Ok(load) => last = Some(load),
                Err(e) => {
                    return done(
                        true,
                        last,
                        Some(format!("the host's load could not be read: {e}")),
                    );
                }
            }
            if t0.elapsed() >= limit {
                return done(false, last, None);
            }
        }
    }

    async fn host_reachable(&mut self) -> Result<(), String> {
        let b = Arc::clone(&self.cfg.backend);
        tokio::task::spawn_blocking(move || b.reachable())
            .await
            .map_err(|e| e.to_string())?
    }

    async fn shut_down(&mut self) {
        self.placed = None;
        let stops = std::mem::take(&mut self.live)
            .into_iter()
            .map(|mut l| async move {
                if let Err(e) = l.guest.shutdown(Duration::from_secs(5)).await {
                    tracing::warn!("stopping {}: {e:#}", l.guest.name());
                }
            });
        join_all(stops).await;
        // Removed in the background (telemetry::sched_trace).
        self.tracer = None;
    }
}

/// Whether this invocation lets runs record a vCPU timeline: yes unless `OCRIG_TIMELINE=off`
/// (the scenario's `host.timeline` decides otherwise; the cost is within the run-to-run noise,
/// measured in the README's telemetry section).
fn timeline_on() -> bool {
    std::env::var("OCRIG_TIMELINE").map_or(true, |v| v != "off")
}

fn guest_specs(
    cfg: &VmConfig,
    group: &GroupSpec,
    image: &Image,
    workdir: &Path,
) -> anyhow::Result<Vec<GuestSpec>> {
    let cpu = group.guest.cpu.clone().unwrap_or_else(|| match cfg.accel {
        Accel::Tcg => "max".into(),
        Accel::Kvm => "host".into(),
    });
    // panic=-1 with QEMU's -no-reboot turns a guest kernel panic into a QEMU exit we can see.
    // An image with guest packages unpacks into a ramfs root: the default tmpfs root holds at
    // most half of the memory left beside the initrd (160 MiB of packages fail in 384 MiB).
    let root = if image.packages_bytes > 0 {
        "rootfstype=ramfs "
    } else {
        ""
    };
    let cmdline = format!("{root}console=ttyS0 panic=-1 {}", group.guest.cmdline)
        .trim()
        .to_string();
    (0..group.guests)
        .map(|i| {
            let name = format!("ocrig-{}-{}", cfg.run_id, i);
            let scratch_disk = if cfg.scratch_disk_mib > 0 {
                Some(make_scratch_disk(workdir, &name, cfg.scratch_disk_mib)?)
            } else {
                None
            };
            Ok(GuestSpec {
                name,
                vcpus: cfg.vcpus,
                memory_mib: cfg.memory_mib,
                kernel: image.kernel.clone(),
                initrd: image.initrd.clone(),
                cmdline: cmdline.clone(),
                accel: cfg.accel,
                cpu: cpu.clone(),
                scratch_disk,
                workdir: workdir.to_path_buf(),
                fast_kernel: image.fast_kernel(),
                start: cfg.guest_start,
                ram: crate::backend::RamBacking::Anonymous,
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
async fn boot_all(cfg: &VmConfig, specs: &[GuestSpec], image: &Image) -> (Vec<Live>, Option<anyhow::Error>) {
    use crate::scenario::fit::{fd_limits, start_concurrency};
    let fd_headroom = fd_limits().map(|f| f.soft.saturating_sub(f.open));
    let bound = start_concurrency(cfg.host_cpus.len(), specs.len(), fd_headroom);
    tracing::info!(
        "starting {} guests, at most {} at once: {}",
        specs.len(),
        bound.at_once,
        bound.why
    );
    let permits = Arc::new(tokio::sync::Semaphore::new(bound.at_once.max(1)));
    let creds = Credentials {
        user: "root".into(),
        private_key: image.client_key.clone(),
        host_key_blob: image.host_key_blob.clone(),
    };
    let boots = specs.iter().enumerate().map(|(i, spec)| {
        let creds = creds.clone();
        let backend = Arc::clone(&cfg.backend);
        let permits = Arc::clone(&permits);
        async move {
            // Held from QEMU's start to the SSH login: the part that takes host CPU. Each
            // guest's boot deadline runs from its own start.
            let _permit = permits.acquire_owned().await?;
            let deadline = Instant::now() + Duration::from_secs(cfg.timeouts.boot_s);
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
            // Right after the SSH login and before anything else (pinning, deploy): the
            // backend's post-ready command, e.g. a restored snapshot setting its clock.
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

/// Where every vCPU of a boot group may run.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    /// Per guest, per vCPU: the host CPUs it may run on (for a rotating placement, the set
    /// it rotates over).
    pub cpus: Vec<Vec<Vec<usize>>>,
    /// Each vCPU has a CPU of its own or shares one with the same number of others.
    pub pinned: bool,
    /// Whole-CPU pinning that moves on every [`ROTATION_PHASE`] so that each vCPU spends the
    /// same time on the crowded CPUs as every other.
    pub rotating: bool,
    /// The arithmetic behind the choice, for the journal.
    pub why: String,
}

/// How long each phase of a rotating placement lasts: short against a run (a 5 s run at 2.5x
/// sees 20 whole cycles of 5 phases), long against the cost of moving a thread.
pub const ROTATION_PHASE: Duration = Duration::from_millis(50);

/// Places `guests` guests of `vcpus` vCPUs each on the host CPUs `cpus` so that every vCPU
/// gets the same share of a CPU, i.e. every guest is at the level it is reported at.
///
/// With V = guests × vCPUs vCPUs on n CPUs: if V ≤ n or n divides V, the global vCPU k
/// (guest g's vCPU i is k = g·vcpus + i) is pinned to CPU k mod n, so every CPU runs the same
/// number of vCPUs and a busy vCPU waits 1 − n/V of the time (0 when V ≤ n). Otherwise
/// whole-CPU pinning cannot be even (1.5x of 1-vCPU guests on 2 CPUs puts 2 vCPUs on one CPU
/// and 1 on the other: waits of 1/2 and 0 where the level says 1/3), so on a host whose
/// threads this process can move (`can_rotate`) the pinning rotates ([`rotation_phase`]),
/// and elsewhere every vCPU may run on the whole set and the host scheduler shares it.
/// Measured here (issue 18), every vCPU busy, other load on the machine: the shared set left
/// one guest at 0.22 and another at 0.83 where both should wait the same; see README.
pub fn placement(guests: u32, vcpus: u32, cpus: &[usize], can_rotate: bool) -> Placement {
    let n = cpus.len().max(1);
    let total = (guests * vcpus) as usize;
    if total <= n || total.is_multiple_of(n) {
        let per_guest = (0..guests as usize)
            .map(|g| {
                (0..vcpus as usize)
                    .map(|i| vec![cpus[(g * vcpus as usize + i) % n]])
                    .collect()
            })
            .collect();
        let why = if total <= n {
            format!("{total} vCPUs on {n} host CPUs: one CPU each")
        } else {
            format!("{total} vCPUs on {n} host CPUs: {} on each CPU", total / n)
        };
        return Placement {
            cpus: per_guest,
            pinned: true,
            rotating: false,
            why,
        };
    }
    let per_guest = (0..guests).map(|_| vec![cpus.to_vec(); vcpus as usize]).collect();
    let uneven = format!(
        "{total} vCPUs on {n} host CPUs: {n} does not divide {total}, so pinning each vCPU \
         to one CPU would put {} on some CPUs and {} on others",
        total / n + 1,
        total / n
    );
    let why = if can_rotate {
        format!(
            "{uneven}; the pinning rotates every {} ms through {total} phases, so every vCPU \
             holds every place once per cycle and gets {n}/{total} of a CPU",
            ROTATION_PHASE.as_millis()
        )
    } else {
        format!(
            "{uneven}; every vCPU shares the set {cpus:?} (this host's threads cannot be moved from here)"
        )
    };
    Placement {
        cpus: per_guest,
        pinned: false,
        rotating: can_rotate,
        why,
    }
}

/// A rotating placement only where the rotation can move every vCPU thread: each is moved to
/// its CPU of the first phase now (what the rotation does first anyway). A thread that cannot
/// be moved (a libvirt guest's QEMU runs as another user, so a non-root ocrig gets EPERM) or
/// an unknown vCPU thread makes it the shared placement, with the reason in `why`: the journal
/// never says `rotating` for a rotation that cannot happen.
fn rotation_checked(
    placed: Placement,
    guests: u32,
    vcpus: u32,
    cpus: &[usize],
    vcpu_tids: &[Vec<i32>],
    pin: impl Fn(i32, &[usize]) -> anyhow::Result<()>,
) -> Placement {
    if !placed.rotating {
        return placed;
    }
    let refused = (|| -> anyhow::Result<()> {
        let mut tids = Vec::new();
        for (g, t) in vcpu_tids.iter().enumerate() {
            anyhow::ensure!(t.len() == vcpus as usize, "guest {g}'s vCPU threads are unknown");
            tids.extend(t);
        }
        anyhow::ensure!(tids.len() == (guests * vcpus) as usize, "not every guest is up");
        for (tid, cpu) in tids.iter().zip(rotation_phase(tids.len(), cpus, 0)) {
            pin(*tid, &[cpu])?;
        }
        Ok(())
    })();
    match refused {
        Ok(()) => placed,
        Err(e) => {
            tracing::warn!("the vCPUs cannot rotate, so they share the CPUs: {e:#}");
            let mut shared = placement(guests, vcpus, cpus, false);
            shared.why = format!("{}; a rotation was refused: {e:#}", shared.why);
            shared
        }
    }
}

/// The host CPU of each global vCPU k (of `total`) in phase `phase` of a rotation over `cpus`:
/// position q = (k + phase) mod total goes to CPU ⌊q·n/total⌋, so every CPU holds ⌊total/n⌋
/// or ⌈total/n⌉ vCPUs in every phase, and over `total` phases each vCPU takes every position
/// once: its CPU share summed over a cycle is Σ over CPUs of count·(1/count) = n, the same
/// n/total per phase for every vCPU.
pub fn rotation_phase(total: usize, cpus: &[usize], phase: usize) -> Vec<usize> {
    let n = cpus.len();
    (0..total)
        .map(|k| cpus[((k + phase) % total) * n / total])
        .collect()
}

/// A rotating placement at work: the vCPU threads in global vCPU order and the CPUs.
struct Rotation {
    tids: Vec<i32>,
    cpus: Vec<usize>,
}

impl Rotation {
    /// Moves the threads to the next phase every [`ROTATION_PHASE`]; never returns (the run
    /// it serves drops it). A thread that cannot be moved (it exited) is skipped quietly: the
    /// run that lost it fails on its own.
    async fn run(&self) {
        let mut tick = tokio::time::interval(ROTATION_PHASE);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for phase in 0.. {
            tick.tick().await;
            let to = rotation_phase(self.tids.len(), &self.cpus, phase);
            for (tid, cpu) in self.tids.iter().zip(to) {
                let _ = crate::backend::pin_thread(*tid, &[cpu]);
            }
        }
    }
}

/// Moves every thread of each guest's QEMU but its vCPUs (the main loop, I/O, RCU and worker
/// threads) to `cpus`, the usable CPUs outside the measured set, so only vCPUs run on the
/// measured CPUs; where there are none (a host measured whole) they stay and that is said.
/// Per guest: the CPUs and how many threads moved, or why not.
fn emulator_threads_to(
    live: &[Live],
    cpus: &[usize],
    pin: impl Fn(i32, &[usize]) -> anyhow::Result<()>,
) -> Value {
    if cpus.is_empty() {
        return json!("on the measured CPUs: no usable CPU outside them for QEMU's other threads");
    }
    let per_guest: Vec<Value> = live
        .iter()
        .map(|l| {
            let Some(pid) = l.vcpu_tids.first().and_then(|&t| crate::telemetry::vcpu::process_of(t)) else {
                return json!({ "guest": l.index, "error": "QEMU's process is not known (no vCPU thread ids)" });
            };
            match move_other_threads(pid, &l.vcpu_tids, cpus, &pin) {
                Ok(moved) => json!({ "guest": l.index, "cpus": cpus, "moved": moved }),
                Err(e) => json!({ "guest": l.index, "error": format!("{e:#}") }),
            }
        })
        .collect();
    Value::Array(per_guest)
}

/// Pins every thread of process `pid` except `keep` to `cpus`; how many were moved. A thread
/// that exits meanwhile is skipped.
fn move_other_threads(
    pid: i32,
    keep: &[i32],
    cpus: &[usize],
    pin: impl Fn(i32, &[usize]) -> anyhow::Result<()>,
) -> anyhow::Result<usize> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map_err(|e| anyhow::anyhow!("listing /proc/{pid}/task: {e}"))?;
    let mut moved = 0;
    for tid in tasks
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
    {
        if !keep.contains(&tid) && pin(tid, cpus).is_ok() {
            moved += 1;
        }
    }
    Ok(moved)
}

/// Applies the placement to every guest; per guest the mapping applied, or why it failed.
async fn pin_all(live: &[Live], placed: &Placement) -> Value {
    let mut all = Vec::new();
    for l in live {
        let Some(sets) = placed.cpus.get(l.index as usize) else {
            all.push(json!({ "guest": l.index, "error": "no placement for this guest" }));
            continue;
        };
        match l.guest.pin_vcpus(sets).await {
            Ok(map) => all.push(super::pins::journaled(l.index, &map)),
            Err(e) => all.push(json!({ "guest": l.index, "error": format!("{e:#}") })),
        }
    }
    Value::Array(all)
}

/// Copies the payload and every input into every guest, in parallel across guests.
async fn deploy_all(live: &[Live], uploads: &[Prepared], deploy_s: u64) -> anyhow::Result<()> {
    let limit = Duration::from_secs(deploy_s);
    let jobs = live.iter().map(|l| {
        let ssh = Arc::clone(&l.ssh);
        let uploads = uploads.to_vec();
        let name = l.guest.name().to_string();
        tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
            for u in &uploads {
                if let Some(dir) = Path::new(&u.guest_path).parent().and_then(Path::to_str) {
                    let mkdir = format!("mkdir -p {}", shlex::try_quote(dir)?);
                    ssh.exec(&mkdir, None, limit)?;
                }
                ssh.upload(&u.bytes, &u.guest_path, u.mode, limit)
                    .with_context(|| format!("deploying {} to {name}", u.guest_path))?;
            }
            Ok(())
        })
    });
    for r in join_all(jobs).await {
        r??;
    }
    Ok(())
}

/// What the group's QEMU processes take of host memory once up and deployed, summed and
/// averaged over guests (a few numbers, whatever the guest count: the group facts go into
/// every record). PSS divides a page shared by clones among them; private dirty is what each
/// clone wrote for itself.
fn guest_memory(live: &[Live]) -> Value {
    use crate::telemetry::orchestrator::ProcessMemory;
    let mut read = Vec::new();
    let mut why_not = Vec::new();
    for l in live {
        let pid = l
            .vcpu_tids
            .first()
            .and_then(|&t| crate::telemetry::vcpu::process_of(t));
        match pid.map(ProcessMemory::of_pid) {
            Some(Ok(m)) => read.push(m),
            Some(Err(e)) => why_not.push(format!("{}: {e}", l.guest.name())),
            None => why_not.push(format!("{}: QEMU process unknown", l.guest.name())),
        }
    }
    if read.is_empty() {
        return json!(format!(
            "not measured: {}",
            why_not.first().map_or("no guests", String::as_str)
        ));
    }
    let n = read.len() as f64;
    let sum = |f: fn(&ProcessMemory) -> f64| read.iter().map(f).sum::<f64>();
    let max = |f: fn(&ProcessMemory) -> f64| read.iter().map(f).fold(0.0, f64::max);
    let r1 = |x: f64| (x * 10.0).round() / 10.0;
    json!({
        "guests": read.len(),
        "pss_mib_mean": r1(sum(|m| m.pss_mib) / n),
        "pss_mib_max": r1(max(|m| m.pss_mib)),
        "private_dirty_mib_mean": r1(sum(|m| m.private_dirty_mib) / n),
        "rss_mib_mean": r1(sum(|m| m.rss_mib) / n),
        "pss_mib_total": r1(sum(|m| m.pss_mib)),
        "not_read": (!why_not.is_empty()).then_some(why_not.len()),
    })
}

/// What each guest's kernel actually saw: command line, clocksource, and its boot messages
/// about paravirt spinlocks, the clocksource and KVM.
async fn kernel_facts(live: &[Live], collect: Duration) -> Value {
    const CMD: &str = "cat /proc/cmdline; echo ---; \
        cat /sys/devices/system/clocksource/clocksource0/current_clocksource; echo ---; \
        dmesg | grep -iE 'spinlock|pvspin|clocksource|kvm|hypervisor' | tail -n 30; echo ---; \
        dmesg | grep -E 'PV spinlocks|kvm-guest:|Hypervisor detected' | head -n 40";
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
                    // The kernel's own words on its PV features (`PV spinlocks …`,
                    // `kvm-guest: …`), all of them, so a variant that did not take effect shows.
                    "pv_words": parts.next().unwrap_or("").lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>(),
                })
            }
            Ok(Err(e)) => json!({ "error": format!("{e:#}") }),
            Err(e) => json!({ "error": e.to_string() }),
        });
    }
    Value::Array(out)
}

/// The console lines that explain a failure: any panic / Oops / BUG lines, then the last 30.
pub fn console_evidence(console: &Path) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_thread_but_the_vcpus_moves_to_the_cpus_outside_the_measured_set() {
        // This test process stands in for a QEMU: its threads, two of them "vCPUs".
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let (stop, tx) = (std::sync::Arc::clone(&stop), tx.clone());
                std::thread::spawn(move || {
                    tx.send(rustix::thread::gettid().as_raw_nonzero().get()).unwrap();
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                })
            })
            .collect();
        let tids: Vec<i32> = (0..3).map(|_| rx.recv().unwrap()).collect();
        let pid = std::process::id() as i32;
        let pinned = std::sync::Mutex::new(Vec::new());
        let pin = |tid: i32, cpus: &[usize]| {
            assert_eq!(cpus, [7]);
            pinned.lock().unwrap().push(tid);
            Ok(())
        };
        let moved = move_other_threads(pid, &tids[..2], &[7], pin).unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        workers.into_iter().for_each(|w| w.join().unwrap());
        let pinned = pinned.into_inner().unwrap();
        assert_eq!(moved, pinned.len());
        assert!(
            !pinned.contains(&tids[0]) && !pinned.contains(&tids[1]),
            "a vCPU moved"
        );
        assert!(pinned.contains(&tids[2]) && pinned.contains(&pid), "{pinned:?}");
        // No CPU outside the measured set: nothing moves, and that is said.
        let said = emulator_threads_to(&[], &[], |_, _| panic!("moved"));
        assert!(said.as_str().unwrap().contains("no usable CPU outside"), "{said}");
        assert!(move_other_threads(i32::MAX, &[], &[7], |_, _| Ok(())).is_err());
    }

    /// vCPUs per host CPU for a placement, counting a shared vCPU as 1/|set| on each CPU.
    fn load(p: &Placement, cpus: &[usize]) -> Vec<f64> {
        let mut l = vec![0.0; cpus.len()];
        for set in p.cpus.iter().flatten() {
            for c in set {
                l[cpus.iter().position(|x| x == c).unwrap()] += 1.0 / set.len() as f64;
            }
        }
        l
    }

    #[test]
    fn placement_is_even_at_every_level() {
        let cpus = [0, 1];
        // 1-vCPU guests on 2 CPUs at 0.5x .. 3x; 2-vCPU guests on 4 CPUs at 0.5x .. 2.5x.
        for (guests, vcpus, cpus) in [
            (1, 1, &cpus[..]),
            (2, 1, &cpus[..]),
            (3, 1, &cpus[..]),
            (4, 1, &cpus[..]),
            (5, 1, &cpus[..]),
            (6, 1, &cpus[..]),
            (1, 2, &[0, 1, 2, 3][..]),
            (3, 2, &[0, 1, 2, 3][..]),
            (5, 2, &[0, 1, 2, 3][..]),
            (4, 2, &[4, 5, 6, 7][..]),
        ] {
            let p = placement(guests, vcpus, cpus, false);
            assert_eq!(p.cpus.len(), guests as usize);
            assert!(p.cpus.iter().all(|g| g.len() == vcpus as usize));
            let l = load(&p, cpus);
            let total = (guests * vcpus) as f64;
            let even = (total / cpus.len() as f64).max(1.0);
            if p.pinned {
                // Every CPU runs the same whole number of vCPUs (or one each when fewer).
                assert!(
                    l.iter()
                        .all(|&x| x == even || (total < cpus.len() as f64 && x <= 1.0)),
                    "{p:?}"
                );
            } else {
                assert!(p.cpus.iter().flatten().all(|set| set == cpus), "{p:?}");
                assert!(p.why.contains("does not divide"), "{}", p.why);
            }
            assert_eq!(
                p.pinned,
                (total as usize).is_multiple_of(cpus.len()) || total as usize <= cpus.len()
            );
        }
        // 1.5x: the old round-robin put guests 0 and 2 on CPU 0; now all three share both.
        let p = placement(3, 1, &cpus, false);
        assert!(!p.pinned && !p.rotating);
        assert!(p.why.contains("2 on some CPUs and 1 on others"), "{}", p.why);
        // 2x: two guests per CPU, alternating.
        let p = placement(4, 1, &cpus, true);
        assert!(p.pinned && !p.rotating);
        assert_eq!(
            p.cpus,
            vec![vec![vec![0]], vec![vec![1]], vec![vec![0]], vec![vec![1]]]
        );
        assert!(placement(5, 1, &cpus, true).rotating);
    }

    #[test]
    fn a_rotation_that_cannot_move_a_thread_is_the_shared_placement_and_says_why() {
        // 1.5x of 1-vCPU guests on 2 CPUs: uneven, so it rotates where threads can be moved.
        let cpus = [0, 1];
        let rotating = placement(3, 1, &cpus, true);
        assert!(rotating.rotating);
        let tids = vec![vec![101], vec![102], vec![103]];
        let moved = std::cell::RefCell::new(Vec::new());
        let ok = rotation_checked(rotating.clone(), 3, 1, &cpus, &tids, |t, c| {
            moved.borrow_mut().push((t, c.to_vec()));
            Ok(())
        });
        assert_eq!(ok, rotating);
        assert_eq!(
            moved.into_inner(),
            [(101, vec![0]), (102, vec![0]), (103, vec![1])],
            "every thread moved to its first phase"
        );
        // A non-root ocrig under libvirt: the first move is refused.
        let eperm = rotation_checked(rotating.clone(), 3, 1, &cpus, &tids, |t, _| {
            anyhow::bail!("sched_setaffinity(tid {t}): Operation not permitted (os error 1)")
        });
        assert!(!eperm.rotating && !eperm.pinned, "{eperm:?}");
        assert_eq!(eperm.cpus, placement(3, 1, &cpus, false).cpus);
        assert!(
            eperm
                .why
                .contains("a rotation was refused: sched_setaffinity(tid 101)"),
            "{}",
            eperm.why
        );
        // A guest whose vCPU threads are unknown cannot rotate either.
        let unknown = rotation_checked(rotating, 3, 1, &cpus, &[vec![101], vec![], vec![103]], |_, _| {
            Ok(())
        });
        assert!(
            !unknown.rotating && unknown.why.contains("guest 1's vCPU threads are unknown"),
            "{}",
            unknown.why
        );
        // A placement that does not rotate is left alone.
        let even = placement(2, 1, &cpus, true);
        assert_eq!(
            rotation_checked(even.clone(), 2, 1, &cpus, &[], |_, _| anyhow::bail!("no")),
            even
        );
    }

    #[test]
    fn a_rotation_gives_every_vcpu_the_same_cpu_share() {
        for (total, cpus) in [
            (3, vec![0, 1]),
            (5, vec![0, 1]),
            (7, vec![2, 3, 5]),
            (6, vec![0, 1, 2, 3]),
        ] {
            let n = cpus.len();
            let mut share = vec![0.0; total];
            for phase in 0..total {
                let to = rotation_phase(total, &cpus, phase);
                let count = |c: usize| to.iter().filter(|&&x| x == c).count();
                for &c in &cpus {
                    // Every CPU holds ⌊V/n⌋ or ⌈V/n⌉ vCPUs in every phase.
                    assert!(count(c) == total / n || count(c) == total.div_ceil(n), "{to:?}");
                }
                for (k, &c) in to.iter().enumerate() {
                    share[k] += 1.0 / count(c) as f64;
                }
            }
            for s in &share {
                // 1 − share is the wait of 1 − 1/L at level L = V/n.
                assert!(
                    (s / total as f64 - n as f64 / total as f64).abs() < 1e-12,
                    "{total} on {cpus:?}: {share:?}"
                );
            }
        }
    }

    #[test]
    fn console_evidence_puts_panic_lines_ahead_of_the_tail() {
        let dir = tempfile::tempdir().unwrap();
        let con = dir.path().join("c.log");
        let mut text = String::from("Kernel panic - not syncing: sysrq\n");
        for i in 0..40 {
            text.push_str(&format!("trace line {i}\n"));
        }
        std::fs::write(&con, text).unwrap();
        let e = console_evidence(&con);
        assert!(e.starts_with("Kernel panic"), "{e}");
        assert!(
            e.ends_with("trace line 39") && !e.contains("trace line 9\n"),
            "{e}"
        );
    }
}
